/* tests/server/test_server.c — unit groups for server pieces that need no live server.
 *   scrub: errors_scrub hides directory parts of absolute paths in client-facing messages and
 *          leaves everything else (routes, ratios, short paths) as it was.
 *   json_fsm: the json_object recognizer accepts exactly the prefixes of JSON objects: a table of
 *          documents and of refused texts, every prefix of every accepted document, and random
 *          byte strings checked against jansson (complete ⇔ jansson parses it as an object).
 *   json_mask: on the real Qwen vocabulary, the per-step mask equals feeding each token alone, and
 *          walks that take random allowed tokens end as a JSON object / a well-formed tool call.
 *   json_budget: request JSON whose parse tree would outgrow its size is refused (by the pre-scan
 *          before any allocation, or by the counting allocator mid-parse), ordinary bodies parse, and
 *          the global budget refuses what does not fit and takes back what is released; the same
 *          pre-scan refuses nesting deeper than the cap.
 *   http_frame: the strict request framer (http_frame.h) passes well-framed requests whole, in any
 *          pieces, and refuses each malformed head, body and size with its status. */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/errors.h"
#include "server/http_frame.h"
#include "server/json_budget.h"
#include "server/json_mask.h"
#include "server/json_schema.h"
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
      "{\"a\":-0.0e-0, \"b\":123456789012345, \"c\":1.5E+99, \"d\":\"\\u00e9\\uffff\"}",
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
      /* narrower than RFC 8259 by design: what every parser reads back alike */
      "{\"a\":1234567890123456}", "{\"a\":1e100}", "{\"a\":0.1234567890123456}", "{\"a\":\"\\u0000\"}",
      "{\"a\":\"\\ud83d\\ude00\"}",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int done = 0;
    int acc = fsm_accepts(bad[i], strlen(bad[i]), &done);
    CHECKF(!acc || !done, "accepted as complete: %s", bad[i]);
    if (i + 5 < sizeof bad / sizeof bad[0]) { /* the last five are narrowings: jansson takes them */
      json_error_t je;
      json_t *j = json_loadb(bad[i], strlen(bad[i]), 0, &je);
      CHECKF(!j || !json_is_object(j), "table error: jansson parses %s as an object", bad[i]);
      json_decref(j);
    }
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
    json_t *j = json_loadb(doc, (size_t)n, 0, &je);
    int parses = j && json_is_object(j);
    json_decref(j);
    if (acc && done) n_complete++;
    /* what the recognizer accepts as complete, jansson must parse */
    CHECKF(!(acc && done) || parses, "doc %.*s: complete for the recognizer, jansson: %s", n, doc, je.text);
    /* and the converse, except where the recognizer is narrower by design: trailing whitespace (the
     * answer ends at its '}'), exponents of 3+ digits (numbers every parser reads back alike) */
    int narrowed = doc[n - 1] == ' ';
    for (int i = 0; i + 3 < n && !narrowed; i++)
      if ((doc[i] == 'e' || doc[i] == 'E') && doc[i + 1] >= '0' && doc[i + 1] <= '9' && doc[i + 2] >= '0' &&
          doc[i + 2] <= '9' && doc[i + 3] >= '0' && doc[i + 3] <= '9')
        narrowed = 1;
    for (int i = 0; i + 4 < n && !narrowed; i++)
      if ((doc[i] == 'e' || doc[i] == 'E') && (doc[i + 1] == '+' || doc[i + 1] == '-') && doc[i + 2] >= '0' &&
          doc[i + 2] <= '9' && doc[i + 3] >= '0' && doc[i + 3] <= '9' && doc[i + 4] >= '0' && doc[i + 4] <= '9')
        narrowed = 1;
    if (narrowed) continue;
    CHECKF((acc && done) == parses, "doc %.*s: fsm %d/%d jansson %d", n, doc, acc, done, parses);
    if (test_failures > 20) break;
  }
  CHECKF(n_complete > 50, "only %d random documents were complete objects", n_complete);
}

/* jvocab_mask at state s against feeding every `every`-th token of the vocabulary alone: the number of
 * ids where the two disagree; *allowed = the tokens feeding takes, *left = what the mask reports */
static int mask_vs_feed(const struct jvocab *v, const struct jprog *pg, const struct jstate *s, float *lg, int nv,
                        int every, int *allowed, int *left) {
  for (int i = 0; i < nv; i++) lg[i] = 0.0f;
  *left = jvocab_mask(v, pg, s, lg, nv);
  int mism = 0;
  *allowed = 0;
  for (int i = 0; i < nv; i += every) {
    const char *p;
    size_t len;
    int a = 0;
    if (jvocab_bytes(v, i, &p, &len) == 0) {
      struct jstate c = *s;
      a = jstate_feed_all(pg, &c, p, len);
    }
    *allowed += a;
    mism += a != (lg[i] == 0.0f);
  }
  return mism;
}

/* A walk that takes a random allowed token each step (the mask checked against feeding every token
 * alone on the first steps); after `steer` steps it prefers the closers in `closers` when allowed.
 * Returns the bytes produced (NUL-terminated, in out) and whether the program completed. */
static int walk(const struct tok *t, const struct jvocab *v, const struct jprog *pg, int steps, int steer,
                const char *const *closers, int n_closers, char *out, size_t cap, uint64_t seed) {
  const int nv = tok_vocab_size(t) + 64; /* the model's vocabulary may be larger than the tokenizer's */
  float *lg = malloc((size_t)nv * sizeof *lg);
  struct jstate s;
  jstate_init(pg, &s);
  uint64_t r = seed;
  size_t n_out = 0;
  for (int stepi = 0; stepi < steps && !jstate_done(pg, &s); stepi++) {
    /* the mask equals each token fed alone (every id for the first 25 steps, then every 11th) */
    int left, counted;
    const int every = stepi < 25 ? 1 : 11, mism = mask_vs_feed(v, pg, &s, lg, nv, every, &counted, &left);
    CHECK(left > 0);
    CHECKF(mism == 0 && (every > 1 || counted == left), "step %d: %d mismatches, %d allowed vs %d left", stepi,
           mism, counted, left);
    int pick = -1, k = 0;
    r ^= r << 13; r ^= r >> 7; r ^= r << 17;
    for (int i = 0, want = left > 0 ? (int)(r % (uint64_t)left) : -1; i < nv && pick < 0; i++)
      if (lg[i] == 0.0f && k++ == want) pick = i; /* the want-th allowed token */
    if (stepi >= steer)
      for (int k = 0; k < n_closers; k++) {
        int32_t id = tok_find_token(t, closers[k], strlen(closers[k]));
        if (id >= 0 && lg[id] == 0.0f) { pick = id; break; }
      }
    CHECK(pick >= 0);
    if (pick < 0) break;
    const char *p;
    size_t len;
    CHECK(jvocab_bytes(v, pick, &p, &len) == 0);
    CHECK(jstate_feed_all(pg, &s, p, len));
    if (n_out + len < cap) { memcpy(out + n_out, p, len); n_out += len; }
    if (test_failures) break;
  }
  out[n_out < cap ? n_out : cap - 1] = 0;
  free(lg);
  return jstate_done(pg, &s);
}

TEST_GROUP(json_mask) {
  char dir[512];
  test_tokenizer_dir(dir, sizeof dir, "qwen3");
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
  /* json_object: a random walk that closes parses as an object */
  static char out[8192];
  static const char *const closers[] = {"\"", "]", "}"};
  int closed = walk(t, v, jprog_json_object(), 300, 150, closers, 3, out, sizeof out, 99);
  printf("  json_object walk %s after %zu bytes: %.120s\n", closed ? "closed" : "open", strlen(out), out);
  CHECK(closed); /* fixed seed: the steered walk closes */
  if (closed) {
    json_error_t je;
    json_t *j = json_loadb(out, strlen(out), 0, &je);
    CHECKF(j && json_is_object(j), "walk output does not parse: %s", out);
    json_decref(j);
  }
  /* a forced tool call: <tool_call>\n{"name": one of the names, "arguments": {...}}\n</tool_call> */
  static const char *const names[] = {"get_weather", "get", "lookup_user"};
  struct jprog *tc = jprog_tool_call(names, 3);
  CHECK(tc != NULL);
  for (uint64_t seed = 1; tc && seed <= 3; seed++) {
    closed = walk(t, v, tc, 300, 40, closers, 3, out, sizeof out, seed * 7919);
    printf("  tool-call walk %s after %zu bytes: %.160s\n", closed ? "closed" : "open", strlen(out), out);
    CHECK(closed);
    const char *pre = "<tool_call>\n{\"name\": \"", *post = "}\n</tool_call>";
    size_t n = strlen(out);
    CHECKF(!strncmp(out, pre, strlen(pre)) && n > strlen(post) && !strcmp(out + n - strlen(post), post),
           "tool-call shape: %s", out);
    json_error_t je;
    json_t *j = n > strlen(post) ? json_loadb(out + 12, n - 12 - 13, 0, &je) : NULL; /* between the tags */
    const char *nm = json_string_value(json_object_get(j, "name"));
    CHECKF(j && nm && (!strcmp(nm, "get_weather") || !strcmp(nm, "get") || !strcmp(nm, "lookup_user")) &&
               json_is_object(json_object_get(j, "arguments")), "tool call body: %s", out);
    json_decref(j);
  }
  /* the closing tag never inside an argument string (it would end the call early); elsewhere fine */
  if (tc) {
    struct jstate ts;
    jstate_init(tc, &ts);
    const char *pre = "<tool_call>\n{\"name\": \"get\", \"arguments\": {\"a\": \"x</tool_call";
    CHECK(jstate_feed_all(tc, &ts, pre, strlen(pre)));
    CHECK(!jstate_feed_all(tc, &ts, ">", 1));
    CHECK(jstate_feed_all(tc, &ts, "\"}}\n</tool_call>", 16) && jstate_done(tc, &ts));
  }
  jprog_free(tc);
  /* one function whose arguments follow its parameters schema (jprog_tool_call_args) */
  json_t *params = json_loads("{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},"
                              "\"days\":{\"type\":\"integer\"}},\"required\":[\"city\"]}", 0, NULL);
  struct jprog *args = params ? jschema_compile(params, NULL, 0) : NULL;
  struct jprog *ta = args ? jprog_tool_call_args("get_weather", args) : NULL;
  CHECK(ta != NULL);
  CHECK(!args || jprog_tool_call_args("no spaces", args) == NULL);
  jprog_free(args); /* the composed program holds its own copy */
  if (ta) {
    static const char good[] = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"days\": 3}}\n</tool_call>";
    struct jstate ts;
    jstate_init(ta, &ts);
    CHECK(jstate_feed_all(ta, &ts, good, sizeof good - 1) && jstate_done(ta, &ts));
    static const char *const refused[] = {
        "<tool_call>\n{\"name\": \"get\"",                                  /* another name */
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"town\"", /* a key the schema lacks */
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": 3",  /* a number for a string */
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"x\", \"days\": 1.5",
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"x</tool_call>",
    };
    for (size_t k = 0; k < sizeof refused / sizeof *refused; k++) {
      jstate_init(ta, &ts);
      CHECKF(!jstate_feed_all(ta, &ts, refused[k], strlen(refused[k])), "accepted refused[%zu]", k);
    }
    /* a walk of the real vocabulary under the program closes as a call that parses, with both keys */
    closed = walk(t, v, ta, 300, 40, closers, 3, out, sizeof out, 4242);
    printf("  schema tool-call walk %s after %zu bytes: %.160s\n", closed ? "closed" : "open", strlen(out), out);
    CHECK(closed); /* fixed seed: the steered walk closes */
    if (closed) {
      size_t n = strlen(out);
      json_t *j = json_loadb(out + 12, n - 12 - 13, 0, NULL);
      json_t *a = json_object_get(j, "arguments");
      CHECKF(json_is_string(json_object_get(a, "city")) && json_is_integer(json_object_get(a, "days")) &&
                 json_object_size(a) == 2, "schema tool call body: %s", out);
      json_decref(j);
    }
  }
  jprog_free(ta);
  json_decref(params);
  static const char *const bad_names[] = {"ok", "no spaces"};
  CHECK(jprog_tool_call(bad_names, 2) == NULL);
  /* special tokens are never allowed (the end-of-text token among them) */
  const int nv = tok_vocab_size(t) + 64;
  float *lg = calloc((size_t)nv, sizeof *lg);
  struct jstate s;
  jstate_init(jprog_json_object(), &s);
  jvocab_mask(v, jprog_json_object(), &s, lg, nv);
  int32_t eot = tok_find_token(t, "<|endoftext|>", 13);
  CHECK(eot >= 0 && isinf(lg[eot]));
  CHECK(isinf(lg[nv - 1])); /* past the tokenizer's vocabulary */
  int32_t brace = tok_find_token(t, "{", 1);
  CHECK(brace >= 0 && lg[brace] == 0.0f);
  free(lg);
  jvocab_free(v);
  tok_free(t);
  /* a SentencePiece-style vocabulary (Gemma: "▁" pieces, <0xXX> byte fallback) */
  test_tokenizer_dir(dir, sizeof dir, "gemma3");
  if (tok_load_dir(dir, &t, &err)) {
    fprintf(stderr, "json_mask: %s (scripts/fetch-tokenizers.sh)\n", err.msg);
    test_failures++;
    return;
  }
  CHECK(jvocab_new(t, &v, &err) == 0);
  if (v) {
    const int gv = tok_vocab_size(t);
    float *g = calloc((size_t)gv, sizeof *g);
    jstate_init(jprog_json_object(), &s);
    CHECK(jstate_feed_all(jprog_json_object(), &s, "{\"a\":\"", 6));
    CHECK(jvocab_mask(v, jprog_json_object(), &s, g, gv) > 1000);
    int32_t eos = tok_find_token(t, "<eos>", 5), b41 = tok_find_token(t, "<0x41>", 6), nl = tok_find_token(t, "<0x0A>", 6);
    CHECK(eos >= 0 && isinf(g[eos]));
    CHECK(b41 >= 0 && g[b41] == 0.0f); /* 'A' by byte fallback, inside a string */
    CHECK(nl >= 0 && isinf(g[nl]));    /* a raw newline inside a string is not JSON */
    free(g);
    jvocab_free(v);
  }
  tok_free(t);
}

static int schema_refused(const char *schema_json, const char *want) {
  json_error_t je;
  json_t *sc = json_loads(schema_json, 0, &je);
  char msg[300] = "";
  struct jprog *p = sc ? jschema_compile(sc, msg, sizeof msg) : NULL;
  json_decref(sc);
  const int ok = sc && !p && strstr(msg, want);
  if (!ok) printf("  schema %s: %s (wanted an error with '%s')\n", schema_json, p ? "compiled" : msg, want);
  jprog_free(p);
  return ok;
}

/* feeds doc in one piece and byte by byte; returns 1 when every prefix is accepted, 2 when also complete */
static int schema_feed(const struct jprog *p, const char *doc) {
  struct jstate s, b;
  jstate_init(p, &s);
  if (!jstate_feed_all(p, &s, doc, strlen(doc))) return 0;
  jstate_init(p, &b);
  for (size_t i = 0; doc[i]; i++) {
    if (jstate_done(p, &b)) return 0; /* complete before the end */
    if (!jstate_feed_all(p, &b, doc + i, 1)) return 0;
  }
  return jstate_done(p, &s) && jstate_done(p, &b) ? 2 : 1;
}

TEST_GROUP(json_schema) {
  static const char *S = "{\"type\": \"object\", \"properties\": {"
                         "\"answer\": {\"enum\": [\"yes\", \"no\"]}, \"score\": {\"type\": \"integer\"},"
                         "\"p\": {\"type\": \"number\"}, \"why\": {\"type\": [\"string\", \"null\"]},"
                         "\"ok\": {\"type\": \"boolean\", \"description\": \"ignored\"},"
                         "\"meta\": {\"type\": \"object\", \"properties\": {\"n\": {\"const\": 3}}},"
                         "\"tags\": {\"type\": \"array\", \"items\": {\"enum\": [\"x\", \"y\"]}, \"maxItems\": 4},"
                         "\"any\": {}}, \"required\": [\"answer\"]}";
  json_error_t je;
  json_t *sc = json_loads(S, 0, &je);
  CHECK(sc != NULL);
  char msg[300];
  struct jprog *p = jschema_compile(sc, msg, sizeof msg);
  CHECKF(p != NULL, "compile: %s", msg);
  if (p) {
    static const char *good[] = {
        "{\"answer\": \"yes\", \"score\": -12, \"p\": 1.5e3, \"why\": null, \"ok\": true, "
        "\"meta\": {\"n\": 3}, \"tags\": [\"x\", \"y\", \"x\"], \"any\": {\"x\": [null]}}",
        "{\"answer\": \"no\", \"score\": 0, \"p\": -0.25, \"why\": \"because \\\"x\\\"\", \"ok\": false, "
        "\"meta\": {\"n\": 3}, \"tags\": [], \"any\": 7}",
    };
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) CHECKF(schema_feed(p, good[i]) == 2, "refused: %s", good[i]);
    static const char *bad[] = {
        "{\"answer\": \"maybe\"",            /* not in the enum */
        "{\"answer\":\"yes\"",              /* the canonical layout has a space */
        " {\"answer\": \"yes\"",            /* no leading whitespace */
        "{\"score\": 1",                    /* properties in the schema's order */
        "{\"answer\": \"yes\", \"score\": 1.5",   /* an integer has no fraction */
        "{\"answer\": \"yes\", \"score\": 1e2",   /* ... nor exponent */
        "{\"answer\": \"yes\", \"score\": 01",    /* JSON numbers have no leading zeros */
        "{\"answer\": \"yes\", \"score\": 1, \"p\": true",
        "{\"answer\": \"yes\", \"score\": 1, \"p\": 2, \"why\": 5",
        "{\"answer\": \"yes\", \"score\": 1, \"p\": 2, \"why\": null, \"ok\": true, \"meta\": {\"n\": 4}",
        "{\"answer\": \"yes\", \"score\": 1, \"p\": 2, \"why\": null, \"ok\": true, \"meta\": {\"n\": 3}, \"tags\": {",
        /* nothing after the object */
        "{\"answer\": \"yes\", \"score\": 1, \"p\": 2, \"why\": null, \"ok\": true, \"meta\": {\"n\": 3}, \"tags\": [], \"any\": 1}x",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) CHECKF(schema_feed(p, bad[i]) == 0, "accepted: %s", bad[i]);
  }
  /* what the subset refuses, with a message naming the reason */
  CHECK(schema_refused("{\"type\": \"string\"}", "root"));
  CHECK(schema_refused("{\"type\": \"object\", \"properties\": {\"a\": {\"$ref\": \"#/x\"}}}", "$ref"));
  CHECK(schema_refused("{\"type\": \"object\", \"properties\": {\"a\": {\"anyOf\": []}}}", "anyOf"));
  CHECK(schema_refused("{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"array\", \"items\": "
                       "{\"type\": \"object\", \"properties\": {\"b\": {}}}}}}", "properties"));
  CHECK(schema_refused("{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"array\", \"minItems\": 3, "
                       "\"maxItems\": 2}}}", "minItems"));
  /* arrays: [item, item], items an enum / a scalar type / anything, minItems..maxItems followed */
  json_t *ar = json_loads("{\"type\": \"object\", \"properties\": {"
                          "\"tags\": {\"type\": \"array\", \"items\": {\"enum\": [\"a\", \"bc\", 10]}, \"maxItems\": 3},"
                          "\"ns\": {\"type\": \"array\", \"items\": {\"type\": \"integer\"}, \"minItems\": 1},"
                          "\"xs\": {\"type\": \"array\", \"items\": true}}}", 0, &je);
  struct jprog *pa = jschema_compile(ar, msg, sizeof msg);
  CHECKF(pa != NULL, "compile: %s", msg);
  if (pa) {
    CHECK(schema_feed(pa, "{\"tags\": [], \"ns\": [1], \"xs\": []}") == 2);
    CHECK(schema_feed(pa, "{\"tags\": [\"bc\", 10, \"a\"], \"ns\": [-3, 40, 0], \"xs\": [{\"k\": [1, 2]}, \"s\", null]}") == 2);
    CHECK(schema_feed(pa, "{\"tags\": [\"a\", \"a\", \"a\", \"a\"") == 0); /* maxItems 3 */
    CHECK(schema_feed(pa, "{\"tags\": [\"b\"") == 0);                       /* not in the enum */
    CHECK(schema_feed(pa, "{\"tags\": [1]") == 0);                            /* 10 is, 1 is not */
    CHECK(schema_feed(pa, "{\"tags\": [], \"ns\": []") == 0);                /* minItems 1 */
    CHECK(schema_feed(pa, "{\"tags\": [], \"ns\": [1.5") == 0);              /* integers */
    CHECK(schema_feed(pa, "{\"tags\": [\"a\",\"a\"") == 0);                  /* ", " between items */
    CHECK(schema_feed(pa, "{\"tags\": [\"a\", ]") == 0);
    CHECK(schema_feed(pa, "{\"tags\": [ \"a\"") == 0);
  }
  jprog_free(pa);
  json_decref(ar);
  CHECK(schema_refused("{\"type\": \"object\", \"properties\": {\"a\": {}}, \"required\": [\"b\"]}", "'b'"));
  CHECK(schema_refused("{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"date\"}}}", "unknown type"));
  CHECK(schema_refused("{\"type\": \"object\", \"properties\": {\"a\": {\"enum\": []}}}", "enum"));
  /* from review: constraints the subset cannot follow are refused, not ignored */
  CHECK(schema_refused("{\"type\": \"object\", \"enum\": [{\"a\": 1}]}", "root"));
  CHECK(schema_refused("{\"type\": \"object\", \"properties\": {}, \"required\": [\"a\"]}", "'a'"));
  CHECK(schema_refused("{\"type\": \"object\", \"properties\": {\"x\": {\"type\": \"object\", \"required\": [\"id\"]}}}", "'id'"));
  CHECK(schema_refused("{\"type\": \"object\", \"additionalProperties\": {\"type\": \"integer\"}}", "additionalProperties"));
  CHECK(schema_refused("{\"type\": \"object\", \"properties\": {\"x\": {\"type\": \"integer\", \"enum\": [1, \"a\"]}}}", "type"));
  CHECK(schema_refused("{\"type\": \"object\", \"properties\": {\"x\": {\"type\": [\"array\", \"null\"], \"minItems\": 2}}}", "minItems"));
  CHECK(schema_refused("{\"type\": \"object\", \"properties\": {\"x\": {\"type\": \"array\", \"items\": {\"type\": \"string\", \"if\": {}}}}}", "'if'"));
  {
    static char big[6000], key[1400];
    memset(big, 'a', 5000);
    big[5000] = 0;
    char *sj = malloc(6200);
    snprintf(sj, 6200, "{\"type\": \"object\", \"properties\": {\"x\": {\"const\": \"%s\"}}}", big);
    CHECK(schema_refused(sj, "too long"));
    /* a 300-character property name in the message: cut at a character boundary, still UTF-8 */
    for (int i = 0; i < 600; i += 2) { key[i] = (char)0xC3; key[i + 1] = (char)0xA9; } /* "é" x 300 */
    key[600] = 0;
    snprintf(sj, 6200, "{\"type\": \"object\", \"properties\": {\"%s\": {\"type\": \"date\"}}}", key);
    json_t *kj = json_loads(sj, 0, &je);
    char m2[300];
    struct jprog *kp = kj ? jschema_compile(kj, m2, sizeof m2) : NULL;
    CHECK(kj && !kp && strlen(m2) <= 200 && strlen(m2) > 100);
    size_t ml = strlen(m2);
    CHECK(ml == 0 || ((unsigned char)m2[ml - 1] & 0xC0) != 0xC0); /* no lead byte left dangling */
    json_decref(kj);
    free(sj);
  }
  /* a real enum value in its shortest exact form; a string's \uD8.. never started (it could not end) */
  json_t *fj = json_loads("{\"type\": \"object\", \"properties\": {\"x\": {\"enum\": [0.1, 2.5e-7]}, \"s\": {\"type\": \"string\"}}}", 0, &je);
  struct jprog *fp = jschema_compile(fj, msg, sizeof msg);
  CHECK(fp && schema_feed(fp, "{\"x\": 0.1, \"s\": \"\\u00e9\"}") == 2 && schema_feed(fp, "{\"x\": 2.5e-7, \"s\": \"\"}") == 2);
  CHECK(fp && schema_feed(fp, "{\"x\": 0.1, \"s\": \"\\ud8") == 0 && schema_feed(fp, "{\"x\": 0.1, \"s\": \"\\uD7FF") == 1);
  jprog_free(fp);
  json_decref(fj);
  /* an object without properties and additionalProperties false is exactly {} */
  json_t *e0 = json_loads("{\"type\": \"object\", \"properties\": {}, \"additionalProperties\": false}", 0, &je);
  struct jprog *pe = jschema_compile(e0, msg, sizeof msg);
  CHECK(pe && schema_feed(pe, "{}") == 2 && schema_feed(pe, "{\"a\": 1}") == 0);
  jprog_free(pe);
  json_decref(e0);
  /* random walks over the real vocabulary end as documents that parse and follow the schema */
  char dir[512];
  test_tokenizer_dir(dir, sizeof dir, "qwen3");
  struct tok *t = NULL;
  struct hearth_err err = {0};
  struct jvocab *v = NULL;
  if (p && !tok_load_dir(dir, &t, &err) && !jvocab_new(t, &v, &err)) {
    static char out[8192];
    static const char *const closers[] = {"\"", "]", "}", ","};
    for (uint64_t seed = 1; seed <= 4; seed++) {
      int closed = walk(t, v, p, 400, 60, closers, 4, out, sizeof out, seed * 104729);
      printf("  schema walk %s after %zu bytes: %.200s\n", closed ? "closed" : "open", strlen(out), out);
      CHECK(closed);
      json_t *j = closed ? json_loads(out, 0, &je) : NULL;
      const char *ans = json_string_value(json_object_get(j, "answer"));
      json_t *why = json_object_get(j, "why");
      CHECKF(j && ans && (!strcmp(ans, "yes") || !strcmp(ans, "no")) && json_is_integer(json_object_get(j, "score")) &&
                 json_is_number(json_object_get(j, "p")) && (json_is_string(why) || json_is_null(why)) &&
                 json_is_boolean(json_object_get(j, "ok")) &&
                 json_integer_value(json_object_get(json_object_get(j, "meta"), "n")) == 3 &&
                 json_is_array(json_object_get(j, "tags")) && json_object_get(j, "any") && json_object_size(j) == 8,
             "walk output does not follow the schema: %s", out);
      json_t *tg = json_object_get(j, "tags"), *tv;
      size_t ti;
      CHECK(json_array_size(tg) <= 4);
      json_array_foreach(tg, ti, tv) CHECKF(json_is_string(tv) && (!strcmp(json_string_value(tv), "x") ||
                                                                  !strcmp(json_string_value(tv), "y")), "tag: %s", out);
      json_decref(j);
    }
  } else if (p) {
    fprintf(stderr, "json_schema: %s (scripts/fetch-tokenizers.sh)\n", err.msg);
    test_failures++;
  }
  jvocab_free(v);
  tok_free(t);
  jprog_free(p);
  json_decref(sc);
}

/* ---- mask_fuzz: random schemas (and the json_object and tool-call programs), random byte walks
 * through them, and at random states the mask compared with feeding every token of the real
 * vocabulary alone: the mask's shortcuts (jump past a refused prefix, plain string tokens) must
 * never change what it allows */
static uint64_t fz_rs = 88172645463325252ull;
static unsigned fz_rnd(unsigned n) {
  fz_rs ^= fz_rs << 13; fz_rs ^= fz_rs >> 7; fz_rs ^= fz_rs << 17;
  return (unsigned)(fz_rs % n);
}
static json_t *fz_enum(void) {
  static const char *const vals[] = {"1", "10", "100", "-1", "0", "1.5", "\"a\"", "\"ab\"", "\"a\\\"b\"", "\"\"",
                                     "null", "true", "false", "[]", "[1]", "{}", "{\"k\":1}", "\"\\u00e9\"", "\"x\\\\\"", "0.5"};
  json_t *a = json_array();
  for (int i = 0, n = 1 + (int)fz_rnd(4); i < n; i++) json_array_append_new(a, json_loads(vals[fz_rnd(20)], JSON_DECODE_ANY, NULL));
  return a;
}
static json_t *fz_schema(int depth, int root) {
  static const char *const scal[] = {"string", "number", "integer", "boolean", "null"};
  switch (root ? 0 : fz_rnd(depth > 3 ? 6 : 8)) {
  case 0: case 7: {
    json_t *p = json_object();
    char key[16];
    for (int i = 0, n = root ? 1 + (int)fz_rnd(4) : (int)fz_rnd(4); i < n; i++) {
      snprintf(key, sizeof key, "k%d", i);
      json_object_set_new(p, key, fz_schema(depth + 1, 0));
    }
    if (!json_object_size(p)) { json_decref(p); return json_pack("{s:s}", "type", "object"); }
    return json_pack("{s:s,s:o}", "type", "object", "properties", p);
  }
  case 1: return json_pack("{s:s}", "type", scal[fz_rnd(5)]);
  case 2: {
    json_t *t = json_array();
    for (int i = 0, n = 1 + (int)fz_rnd(3); i < n; i++) json_array_append_new(t, json_string(scal[fz_rnd(5)]));
    return json_pack("{s:o}", "type", t);
  }
  case 3: return json_pack("{s:o}", "enum", fz_enum());
  case 4: {
    json_t *a = json_pack("{s:s}", "type", "array");
    const unsigned it = fz_rnd(4);
    if (it == 1) json_object_set_new(a, "items", json_pack("{s:s}", "type", scal[fz_rnd(5)]));
    if (it == 2) json_object_set_new(a, "items", json_pack("{s:o}", "enum", fz_enum()));
    if (it == 3) json_object_set_new(a, "items", json_true());
    const int lo = (int)fz_rnd(3), hi = lo + (int)fz_rnd(3);
    if (fz_rnd(2)) json_object_set_new(a, "minItems", json_integer(lo));
    if (fz_rnd(2)) json_object_set_new(a, "maxItems", json_integer(hi));
    return a;
  }
  case 5: return fz_rnd(2) ? json_true() : json_object();
  default: return json_pack("{s:s}", "type", "string");
  }
}

TEST_GROUP(mask_fuzz) {
  char dir[512];
  test_tokenizer_dir(dir, sizeof dir, "qwen3");
  struct tok *t = NULL;
  struct jvocab *v = NULL;
  struct hearth_err err = {0};
  if (tok_load_dir(dir, &t, &err) || jvocab_new(t, &v, &err)) {
    fprintf(stderr, "mask_fuzz: %s (scripts/fetch-tokenizers.sh)\n", err.msg);
    test_failures++;
    tok_free(t);
    return;
  }
  const int nv = tok_vocab_size(t) + 64;
  float *lg = malloc((size_t)nv * sizeof *lg);
  static const char *const tools[] = {"get_weather", "lookup_user", "a.b-c"};
  struct jprog *tc = jprog_tool_call(tools, 3);
  long states = 0, bad_states = 0;
  const char *ie = getenv("HEARTH_MASK_FUZZ_ITERS"); /* a longer run by hand: more random programs */
  const int iters = ie && atoi(ie) > 0 ? atoi(ie) : 60;
  for (int it = 0; it < iters && lg && tc; it++) {
    json_t *sc = fz_schema(0, 1);
    char msg[300];
    const struct jprog *p = it % 6 == 4 ? tc : it % 6 == 5 ? jprog_json_object() : NULL;
    struct jprog *own = p ? NULL : jschema_compile(sc, msg, sizeof msg);
    if (!p) p = own;
    if (!p) { json_decref(sc); continue; } /* a random schema the subset refuses */
    struct jstate st;
    jstate_init(p, &st);
    for (int n = 0; n < 400 && !jstate_done(p, &st); n++) {
      unsigned char acc[256], cl[256];
      int na = 0, nc = 0;
      for (int c = 1; c < 256; c++) {
        struct jstate tt = st;
        const char b = (char)c;
        if (!jstate_feed_all(p, &tt, &b, 1)) continue;
        acc[na++] = (unsigned char)c;
        if (strchr("\"]},:0123456789ntf[{\\ <", c)) cl[nc++] = (unsigned char)c;
      }
      CHECKF(na > 0, "a dead end (no byte can follow) in program %d after %d bytes", it, n);
      if (!na) break;
      if (fz_rnd(8) == 0) {
        int cnt, left;
        const int bad = mask_vs_feed(v, p, &st, lg, nv, 1, &cnt, &left);
        states++;
        if (bad || cnt != left) bad_states++;
      }
      const unsigned char c = nc && fz_rnd(10) < 7 ? cl[fz_rnd((unsigned)nc)] : acc[fz_rnd((unsigned)na)];
      CHECK(jstate_feed_all(p, &st, (const char *)&c, 1));
    }
    jprog_free(own);
    json_decref(sc);
  }
  printf("  mask_fuzz: %ld states compared, %ld differ\n", states, bad_states);
  CHECK(states > 100 && bad_states == 0);
  jprog_free(tc);
  free(lg);
  jvocab_free(v);
  tok_free(t);
}

/* "pre" + n copies of unit joined by ',' + "post" (malloc'd); *len its length. */
static char *repeat_json(const char *pre, const char *unit, size_t n, const char *post, size_t *len) {
  size_t pl = strlen(pre), ul = strlen(unit), ql = strlen(post);
  char *b = malloc(pl + ql + (ul + 1) * n + 1), *w = b;
  if (!b) return NULL;
  memcpy(w, pre, pl), w += pl;
  for (size_t i = 0; i < n; i++) {
    if (i) *w++ = ',';
    memcpy(w, unit, ul), w += ul;
  }
  memcpy(w, post, ql), w += ql;
  *w = 0;
  *len = (size_t)(w - b);
  return b;
}

TEST_GROUP(json_budget) {
  json_budget_init((size_t)64 << 20);
  json_error_t je;
  size_t n;
  /* [{},{},...]: ~38x its size in jansson; refused by the pre-scan, nothing allocated */
  char *t = repeat_json("[", "{}", 2000000, "]", &n);
  REQUIRE(t);
  struct json_budget b = {0};
  json_t *j = json_budget_loadb(&b, t, n, 64, 0, &je);
  CHECK(!j && b.over == JSON_BUDGET_REQUEST && b.spent == 0);
  json_decref(j);
  free(t);
  /* [1,1,...] passes the pre-scan (20 bytes a value) but the parse needs ~30x: stopped mid-way */
  t = repeat_json("[", "1", 1500000, "]", &n);
  REQUIRE(t);
  j = json_budget_loadb(&b, t, n, 64, 0, &je);
  CHECKF(!j && b.over == JSON_BUDGET_REQUEST, "over %d", b.over);
  CHECKF(b.spent > n * JSON_TREE_FACTOR / 2 && b.spent <= n * JSON_TREE_FACTOR + JSON_TREE_SLACK,
         "spent %zu of %zu", b.spent, n * JSON_TREE_FACTOR + JSON_TREE_SLACK);
  free(t);
  json_budget_release(&b);
  CHECK(json_budget_in_use() == 0);
  /* chat messages (~10x) and 6-digit token ids (~9x) parse, and their cost is charged */
  t = repeat_json("{\"messages\":[", "{\"role\":\"user\",\"content\":\"how are you doing today?\"}",
                  20000, "]}", &n);
  REQUIRE(t);
  j = json_budget_loadb(&b, t, n, 64, 0, &je);
  CHECKF(j && json_array_size(json_object_get(j, "messages")) == 20000, "%s", je.text);
  CHECK(b.spent > n && b.used == b.spent && json_budget_in_use() == b.used);
  json_decref(j);
  free(t);
  json_budget_release(&b);
  t = repeat_json("{\"prompt\":[", "151643", 500000, "]}", &n);
  REQUIRE(t);
  j = json_budget_loadb(&b, t, n, 64, 0, &je);
  CHECKF(j && json_array_size(json_object_get(j, "prompt")) == 500000, "%s", je.text);
  json_decref(j);
  free(t);
  json_budget_release(&b);
  /* the global budget (64 MiB here): what does not fit is refused until released */
  struct json_budget a = {0}, c = {0};
  CHECK(json_budget_reserve(&a, (size_t)60 << 20) == 0);
  CHECK(json_budget_reserve(&c, (size_t)8 << 20) == -1 && c.over == JSON_BUDGET_GLOBAL && c.used == 0);
  t = repeat_json("[", "\"abcdefgh\"", 100000, "]", &n); /* ~2 MB of tree: over 64 MiB in all */
  REQUIRE(t);
  c.over = 0;
  j = json_budget_loadb(&c, t, n, 64, 0, &je);
  CHECK(!j && c.over == JSON_BUDGET_GLOBAL);
  json_budget_release(&c);
  json_budget_release(&a);
  CHECK(json_budget_in_use() == 0);
  j = json_budget_loadb(&c, t, n, 64, 0, &je);
  CHECK(j && json_array_size(j) == 100000);
  json_decref(j);
  json_budget_release(&c);
  free(t);
  CHECK(json_budget_in_use() == 0);
  /* the same pass checks the nesting depth: 65 levels refused at 64, 64 parse, brackets inside
   * strings (after an escaped quote) do not count */
  char deep[200];
  snprintf(deep, sizeof deep, "%.*s%.*s", 65, "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[",
           65, "]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]");
  j = json_budget_loadb(&c, deep, strlen(deep), 64, 0, &je);
  CHECK(!j && c.over == JSON_BUDGET_DEPTH && c.spent == 0);
  j = json_budget_loadb(&c, deep + 1, strlen(deep) - 2, 64, 0, &je);
  CHECK(j && c.over == JSON_BUDGET_OK);
  json_decref(j);
  const char *quoted = "{\"a\":\"\\\"[[[[{{{{\",\"b\":[[1]]}";
  j = json_budget_loadb(&c, quoted, strlen(quoted), 3, 0, &je); /* { [ [ */
  CHECKF(j && c.over == JSON_BUDGET_OK, "%s", je.text);
  json_decref(j);
  j = json_budget_loadb(&c, quoted, strlen(quoted), 2, 0, &je);
  CHECK(!j && c.over == JSON_BUDGET_DEPTH);
  json_budget_release(&c);
  /* outside a budgeted parse jansson allocates as before */
  j = json_pack("{s:[i,i]}", "a", 1, 2);
  CHECK(j && json_budget_in_use() == 0);
  json_decref(j);
}

/* Feeds text to a new framer in pieces of `step` bytes (0: all at once), as a relay would: the
 * bytes not judged yet are presented again with the next piece. Returns the framer; *passed gets
 * how many bytes it judged well framed. */
static struct http_framer frame_text(const char *text, size_t n, size_t step, size_t *passed) {
  struct http_framer fr = {0};
  size_t ok = 0, have = 0;
  while (!fr.status) {
    size_t more = step ? step : n;
    have = have + more < n ? have + more : n;
    ok += http_frame_feed(&fr, text + ok, have - ok);
    if (have == n) break;
  }
  *passed = ok;
  return fr;
}

#define HOST "Host: 127.0.0.1:8080\r\n"
TEST_GROUP(http_frame) {
  static const struct { const char *text; unsigned status; unsigned long heads; } rows[] = {
      {"GET /health HTTP/1.1\r\n" HOST "\r\n", 0, 1},
      {"GET /a HTTP/1.1\r\n" HOST "\r\nGET /b HTTP/1.0\r\n\r\n", 0, 2},
      {"\r\nGET /health HTTP/1.1\r\n" HOST "\r\n", 0, 1},
      {"POST /t HTTP/1.1\r\n" HOST "Content-Length: 2\r\n\r\n{}GET / HTTP/1.1\r\n" HOST "\r\n", 0, 2},
      {"POST /t HTTP/1.1\r\n" HOST "Transfer-Encoding: chunked\r\n\r\n2;x=y\r\n{}\r\n0\r\nX-T: 1\r\n\r\n"
       "GET / HTTP/1.1\r\n" HOST "\r\n", 0, 2},
      {"POST /t HTTP/1.1\r\n" HOST "Transfer-Encoding: CHUNKED\r\n\r\n0\r\n\r\n", 0, 1},
      {"POST /t HTTP/1.1\r\n" HOST "Content-Length:  007 \r\n\r\n1234567", 0, 1},
      {"GET /\xff HTTP/1.1\r\n" HOST "X-U: caf\xc3\xa9\r\n\r\n", 0, 1},
      {"GARBAGE\r\n\r\n", 400, 0},
      {"GET  / HTTP/1.1\r\n" HOST "\r\n", 400, 0},
      {"GET / HTTP/1.1 \r\n" HOST "\r\n", 400, 0},
      {"GET / HTTX/1.1\r\n" HOST "\r\n", 400, 0},
      {"G@T / HTTP/1.1\r\n" HOST "\r\n", 400, 0},
      {"GET / HTTP/1.1\r\n" HOST ": x\r\n\r\n", 400, 0},
      {"GET / HTTP/1.1\r\n" HOST "  : x\r\n\r\n", 400, 0},
      {"GET / HTTP/1.1\r\n" HOST "X-A: 1\r\n 2\r\n\r\n", 400, 0},
      {"GET / HTTP/1.1\r\n" HOST "X-A : 1\r\n\r\n", 400, 0},
      {"GET / HTTP/1.1\r\n" HOST "X-A\r\n\r\n", 400, 0},
      {"GET / HTTP/1.1\r\n" HOST "X-A: a\x01" "b\r\n\r\n", 400, 0},
      {"GET / HTTP/1.1\n" HOST "\r\n", 400, 0},
      {"GET / HTTP/1.1\r\n" HOST "X-A: a\rb\r\n\r\n", 400, 0},
      {"GET / HTTP/1.1\r\n" HOST HOST "\r\n", 400, 0},
      {"POST / HTTP/1.1\r\n" HOST "Content-Length: -1\r\n\r\n{}", 400, 0},
      {"POST / HTTP/1.1\r\n" HOST "Content-Length: 2\r\nContent-Length: 2\r\n\r\n{}", 400, 0},
      {"POST / HTTP/1.1\r\n" HOST "Content-Length: 1000000000000000000\r\n\r\n", 400, 0},
      {"POST / HTTP/1.1\r\n" HOST "Content-Length:\r\n\r\n", 400, 0},
      {"POST / HTTP/1.1\r\n" HOST "Content-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n", 400, 0},
      {"POST / HTTP/1.1\r\n" HOST "Transfer-Encoding: gzip\r\n\r\n", 501, 0},
      {"POST / HTTP/1.1\r\n" HOST "Transfer-Encoding: gzip, chunked\r\n\r\n", 501, 0},
      {"POST / HTTP/1.1\r\n" HOST "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 501, 0},
      /* errors inside a body: the head before was passed (heads counts it) */
      {"POST / HTTP/1.1\r\n" HOST "Transfer-Encoding: chunked\r\n\r\nzz\r\n", 400, 1},
      {"POST / HTTP/1.1\r\n" HOST "Transfer-Encoding: chunked\r\n\r\n2\r\n{}}\r\n0\r\n\r\n", 400, 1},
      {"POST / HTTP/1.1\r\n" HOST "Transfer-Encoding: chunked\r\n\r\n1000000000000000\r\n", 400, 1},
      {"POST / HTTP/1.1\r\n" HOST "Transfer-Encoding: chunked\r\n\r\n0\r\n: bad\r\n\r\n", 400, 1},
      /* a valid request, then a malformed one */
      {"GET / HTTP/1.1\r\n" HOST "\r\nPOST / HTTP/1.1\r\n" HOST "Content-Length: -1\r\n\r\n", 400, 1},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    size_t n = strlen(rows[i].text), passed;
    for (size_t step = 0; step <= 3; step++) { /* whole, then byte by byte, 2 and 3 at a time */
      struct http_framer fr = frame_text(rows[i].text, n, step, &passed);
      CHECKF(fr.status == rows[i].status && fr.heads == rows[i].heads,
             "row %zu step %zu: status %u heads %lu (%s), want %u heads %lu", i, step, fr.status,
             fr.heads, fr.why, rows[i].status, rows[i].heads);
      /* accepted text passes whole; refused text passes no byte of the request it stops in */
      if (!rows[i].status) CHECKF(passed == n, "row %zu step %zu: passed %zu of %zu", i, step, passed, n);
      else CHECKF(passed < n && (fr.status != 400 || fr.why[0]), "row %zu: passed %zu of %zu", i, passed, n);
    }
  }
  /* a head is judged only when complete: the bytes so far pass nothing and fail nothing */
  struct http_framer fr = {0};
  const char *part = "GET / HTTP/1.1\r\nHost: x\r\nX-A: 1";
  CHECK(http_frame_feed(&fr, part, strlen(part)) == 0 && !fr.status && !http_frame_mid_request(&fr));
  /* a Content-Length body passes as it comes, and the framer knows it is inside a request */
  const char *post = "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n12345";
  fr = (struct http_framer){0};
  CHECK(http_frame_feed(&fr, post, strlen(post)) == strlen(post) && http_frame_mid_request(&fr));
  CHECK(http_frame_feed(&fr, "67890", 5) == 5 && !http_frame_mid_request(&fr) && fr.heads == 1);
  /* sizes: a long request line is a 414, a long head a 431, a head just under the cap passes */
  size_t big = HTTP_FRAME_HEAD_MAX + 100;
  char *t = malloc(big + 64);
  REQUIRE(t);
  memcpy(t, "GET /", 5);
  memset(t + 5, 'u', big - 5);
  fr = (struct http_framer){0};
  CHECK(http_frame_feed(&fr, t, big) == 0 && fr.status == 414);
  int k = snprintf(t, 64, "GET / HTTP/1.1\r\nX-B: ");
  memset(t + k, 'b', big - (size_t)k);
  fr = (struct http_framer){0};
  CHECK(http_frame_feed(&fr, t, big) == 0 && fr.status == 431);
  size_t fit = HTTP_FRAME_HEAD_MAX - 8;
  memcpy(t + fit - 4, "\r\n\r\n", 4);
  fr = (struct http_framer){0};
  CHECK(http_frame_feed(&fr, t, fit) == fit && !fr.status && fr.heads == 1);
  free(t);
}

TEST_MAIN(T(scrub), T(json_fsm), T(json_mask), T(json_schema), T(mask_fuzz), T(json_budget), T(http_frame))
