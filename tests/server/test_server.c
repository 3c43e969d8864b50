/* tests/server/test_server.c — unit groups for server pieces that need no live server.
 *   scrub: errors_scrub hides directory parts of absolute paths in client-facing messages and
 *          leaves everything else (routes, ratios, short paths) as it was.
 *   json_fsm: the json_object recognizer accepts exactly the prefixes of JSON objects: a table of
 *          documents and of refused texts, every prefix of every accepted document, and random
 *          byte strings checked against jansson (complete ⇔ jansson parses it as an object).
 *   json_mask: on the real Qwen vocabulary, the per-step mask equals feeding each token alone, and
 *          a walk that always takes a random allowed token stays a JSON prefix. */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "server/errors.h"
#include "server/json_mask.h"
#include "test.h"
#include "tok/tokenizer.h"

static void check_scrub(const char *in, const char *want) {
  char buf[512];
  snprintf(buf, sizeof buf, "%s", in);
  errors_scrub(buf);
  CHECKF(!strcmp(buf, want), "scrub(\"%s\") = \"%s\", want \"%s\"", in, buf, want);
}

TEST_GROUP(scrub) {
  check_scrub("/home/alice/models/Qwen/tokenizer.json: line 3: bad", ".../tokenizer.json: line 3: bad");
  check_scrub("model /srv/m/qwen: no config.json", "model .../qwen: no config.json");
  check_scrub("cannot open '/var/lib/x/chat_template.jinja'", "cannot open '.../chat_template.jinja'");
  check_scrub("a (/opt/data/file) b", "a (.../file) b");
  check_scrub("dir=/usr/local/share/x,y", "dir=.../x,y");
  check_scrub("two: /a/bb/c and /ddd/e", "two: .../c and .../e");
  check_scrub("no path here", "no path here");
  check_scrub("ratio 1/2 and a/b/c", "ratio 1/2 and a/b/c"); /* not at a word start */
  check_scrub("/short", "/short");                          /* no directory part */
  check_scrub("/a/b", "/a/b");                              /* directory too short to shorten */
  check_scrub("", "");
  /* a message made only of slashes never grows */
  char buf[64];
  memset(buf, '/', 63);
  buf[63] = 0;
  errors_scrub(buf);
  CHECK(strlen(buf) <= 63);
}


/* ---- json_object decoding ----------------------------------------------------------------- */

static int fsm_accepts(const char *doc, size_t n, int *complete) {
  struct jfsm s;
  jfsm_init(&s);
  for (size_t i = 0; i < n; i++)
    if (!jfsm_feed(&s, (unsigned char)doc[i])) return 0;
  *complete = jfsm_done(&s);
  return 1;
}

TEST_GROUP(json_fsm) {
  static const char *const ok[] = {
      "{}", " {\n}", "{\"a\":1}", "{\"a\": [1, -2.5e+3, 0, 0.25, 1E9, true, false, null]}",
      "{\"k\":{\"n\":{}},\"s\":\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\"}",
      "{\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\":\"\"}", "{\"a\":[[],[{}],\"x\"]}", "{\"a\":-0}",
  };
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    size_t n = strlen(ok[i]);
    int done = 0;
    CHECKF(fsm_accepts(ok[i], n, &done) && done, "refused or incomplete: %s", ok[i]);
    for (size_t k = 0; k < n; k++) { /* every proper prefix: accepted, not complete (bar trailing ws) */
      int d = 0;
      CHECKF(fsm_accepts(ok[i], k, &d), "prefix %zu of %s refused", k, ok[i]);
    }
  }
  static const char *const bad[] = {
      "[]", "\"x\"", "1", "{a:1}", "{\"a\" 1}", "{\"a\":01}", "{\"a\":1.}", "{\"a\":.5}", "{\"a\":+1}",
      "{\"a\":tru}x", "{\"a\":1,}", "{,}", "{\"a\":[1,]}", "{\"a\":\"\x01\"}", "{\"a\":\"\\x\"}",
      "{\"a\":\"\\u12g4\"}", "{\"a\":\"\xc0\x80\"}", "{\"a\":\"\xed\xa0\x80\"}", "{\"a\":\"\xf5\"}",
      "{}x", "{} {}", "{\"a\":1]", "{\"a\":[1}", "{\"a\":1e}", "{\"a\":-}",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int done = 0;
    int acc = fsm_accepts(bad[i], strlen(bad[i]), &done);
    CHECKF(!acc || !done, "accepted as complete: %s", bad[i]);
    json_error_t je;
    json_t *j = json_loadb(bad[i], strlen(bad[i]), 0, &je);
    CHECKF(!j || !json_is_object(j), "table error: jansson parses %s as an object", bad[i]);
    json_decref(j);
  }
  /* a whitespace run is capped */
  char ws[80];
  memset(ws, ' ', sizeof ws);
  int d = 0;
  CHECK(!fsm_accepts(ws, JFSM_MAX_WS + 1, &d));
  CHECK(fsm_accepts(ws, JFSM_MAX_WS, &d) && !d);
  /* random texts over JSON's alphabet: complete ⇔ jansson parses an object; nesting depth and
   * the whitespace cap aside (kept out of the generator's reach: depth <= 8, runs < 4) */
  static const char alpha[] = "{}[]:,\"\\ 01-.eE+tfnrulsaxu\xc3\xa9";
  uint64_t r = 12345;
  int n_complete = 0;
  for (int it = 0; it < 200000; it++) {
    char doc[24];
    int n = 2 + (int)(r % 18);
    doc[0] = '{';
    for (int i = 1; i < n; i++) {
      r ^= r << 13; r ^= r >> 7; r ^= r << 17;
      doc[i] = alpha[r % (sizeof alpha - 1)];
    }
    int done = 0;
    int acc = fsm_accepts(doc, (size_t)n, &done);
    json_error_t je;
    json_t *j = json_loadb(doc, (size_t)n, JSON_ALLOW_NUL, &je);
    int parses = j && json_is_object(j);
    json_decref(j);
    if (acc && done) n_complete++;
    /* not the recognizer's business: trailing whitespace (refused here: the answer ends at its
     * '}'), numbers jansson cannot represent */
    if (doc[n - 1] == ' ' || (!j && (strstr(je.text, "overflow") || strstr(je.text, "too big")))) continue;
    CHECKF((acc && done) == parses, "doc %.*s: fsm %d/%d jansson %d", n, doc, acc, done, parses);
    if (test_failures > 20) break;
  }
  CHECKF(n_complete > 50, "only %d random documents were complete objects", n_complete);
}

static int tok_dir(char *buf, size_t n, const char *name) {
  const char *c = getenv("HEARTH_CACHE");
  if (c) snprintf(buf, n, "%s/tokenizers/%s", c, name);
  else snprintf(buf, n, "%s/.cache/hearth/tokenizers/%s", getenv("HOME") ? getenv("HOME") : ".", name);
  return 0;
}

TEST_GROUP(json_mask) {
  char dir[512];
  tok_dir(dir, sizeof dir, "qwen3");
  struct tok *t = NULL;
  struct hearth_err err = {0};
  if (tok_load_dir(dir, &t, &err)) {
    fprintf(stderr, "json_mask: %s (scripts/fetch-tokenizers.sh)\n", err.msg);
    test_failures++;
    return;
  }
  struct jvocab *v = NULL;
  CHECK(jvocab_new(t, &v, &err) == 0);
  if (!v) { tok_free(t); return; }
  const int nv = tok_vocab_size(t) + 64; /* the model's vocabulary may be larger than the tokenizer's */
  float *lg = malloc((size_t)nv * sizeof *lg);
  struct jfsm s;
  jfsm_init(&s);
  uint64_t r = 99;
  char out[4096];
  size_t n_out = 0;
  for (int stepi = 0; stepi < 300 && !jfsm_done(&s); stepi++) {
    for (int i = 0; i < nv; i++) lg[i] = 0.0f;
    int left = jvocab_mask(v, &s, lg, nv);
    CHECK(left > 0);
    /* the mask equals each token fed alone (every id for the first 25 steps, then every 11th) */
    int mism = 0, counted = 0, every = stepi < 25 ? 1 : 11;
    for (int i = 0; i < nv; i += every) {
      const char *p;
      size_t len;
      int allowed = 0;
      if (jvocab_bytes(v, i, &p, &len) == 0) {
        struct jfsm c = s;
        allowed = jfsm_feed_all(&c, p, len);
      }
      counted += allowed;
      if (allowed != (lg[i] == 0.0f)) mism++;
    }
    CHECKF(mism == 0 && (every > 1 || counted == left), "step %d: %d mismatches, %d allowed vs %d left", stepi,
           mism, counted, left);
    /* take a random allowed token, preferring short ones near the end so the walk closes */
    int pick = -1;
    for (int tries = 0; tries < 100000 && pick < 0; tries++) {
      r ^= r << 13; r ^= r >> 7; r ^= r << 17;
      int i = (int)(r % (uint64_t)nv);
      if (lg[i] == 0.0f) pick = i;
    }
    if (stepi > 150) { /* steer toward closing: a closer if allowed */
      int32_t c1 = tok_find_token(t, "}", 1), c2 = tok_find_token(t, "]", 1), c3 = tok_find_token(t, "\"", 1);
      if (c3 >= 0 && lg[c3] == 0.0f) pick = c3;
      else if (c2 >= 0 && lg[c2] == 0.0f) pick = c2;
      else if (c1 >= 0 && lg[c1] == 0.0f) pick = c1;
    }
    CHECK(pick >= 0);
    if (pick < 0) break;
    const char *p;
    size_t len;
    CHECK(jvocab_bytes(v, pick, &p, &len) == 0);
    CHECK(jfsm_feed_all(&s, p, len));
    if (n_out + len < sizeof out) { memcpy(out + n_out, p, len); n_out += len; }
    if (test_failures) break;
  }
  printf("  json_mask: random walk %s after %zu bytes: %.*s\n", jfsm_done(&s) ? "closed" : "open", n_out,
         (int)(n_out < 160 ? n_out : 160), out);
  if (jfsm_done(&s) && n_out < sizeof out) {
    json_error_t je;
    json_t *j = json_loadb(out, n_out, 0, &je);
    CHECKF(j && json_is_object(j), "walk output does not parse: %.*s", (int)n_out, out);
    json_decref(j);
  }
  /* special tokens are never allowed (the end-of-text token among them) */
  int32_t eot = tok_find_token(t, "<|endoftext|>", 13);
  for (int i = 0; i < nv; i++) lg[i] = 0.0f;
  jfsm_init(&s);
  jvocab_mask(v, &s, lg, nv);
  CHECK(eot >= 0 && isinf(lg[eot]));
  CHECK(isinf(lg[nv - 1])); /* past the tokenizer's vocabulary */
  int32_t brace = tok_find_token(t, "{", 1);
  CHECK(brace >= 0 && lg[brace] == 0.0f);
  free(lg);
  jvocab_free(v);
  tok_free(t);
  /* a SentencePiece-style vocabulary (Gemma: "▁" pieces, <0xXX> byte fallback) */
  tok_dir(dir, sizeof dir, "gemma3");
  if (tok_load_dir(dir, &t, &err)) {
    fprintf(stderr, "json_mask: %s (scripts/fetch-tokenizers.sh)\n", err.msg);
    test_failures++;
    return;
  }
  CHECK(jvocab_new(t, &v, &err) == 0);
  if (v) {
    const int gv = tok_vocab_size(t);
    float *g = calloc((size_t)gv, sizeof *g);
    jfsm_init(&s);
    CHECK(jfsm_feed_all(&s, "{\"a\":\"", 6));
    CHECK(jvocab_mask(v, &s, g, gv) > 1000);
    int32_t eos = tok_find_token(t, "<eos>", 5), b41 = tok_find_token(t, "<0x41>", 6), nl = tok_find_token(t, "<0x0A>", 6);
    CHECK(eos >= 0 && isinf(g[eos]));
    CHECK(b41 >= 0 && g[b41] == 0.0f); /* 'A' by byte fallback, inside a string */
    CHECK(nl >= 0 && isinf(g[nl]));    /* a raw newline inside a string is not JSON */
    free(g);
    jvocab_free(v);
  }
  tok_free(t);
}

TEST_MAIN(T(scrub), T(json_fsm), T(json_mask))
