/* tests/unit/test_label_invariance.c — what label scoring (completions "labels", server/engine.c) relies on:
 *   peek: hearth_session_peek_logits gives the logits of every position of a continuation, the same bits as
 *     appending it, and leaves the session holding exactly what it held (the next append is unchanged);
 *   invariance: the logits of a prompt's last position and of its label continuation are bit-identical
 *     whether the prompt is evaluated alone in one pass, in uneven chunks down to a single token, or inside
 *     one step of 64 sessions (ragged prefill of other prompts, decode tokens of running sequences, a
 *     prefix attached from the prefix cache that another session computed).
 * The group names the backend: `cpu` (label unit, CI) and `cuda` (label cuda, on the GPU machine). Uses the
 * tiny qwen2 oracle fixture, or the checkpoint HEARTH_INVARIANCE_MODEL names (CMake runs the Gemma 4 fixtures so; a
 * `hearth mkmodel` of real shapes by hand). */
#include <stdlib.h>
#include <string.h>

#include "hearth.h"
#include "test.h"

#define FIXTURE HEARTH_SOURCE_DIR "/tests/fixtures/model/qwen2"

enum { NS = 64, NP = 45, NL = 4, NDEC = 20 };

static struct hearth_model *load(enum hearth_backend_kind be) {
  struct hearth_model_params p;
  hearth_model_params_default(&p);
  const char *env = getenv("HEARTH_INVARIANCE_MODEL"); /* another checkpoint, e.g. a mkmodel of real shapes */
  p.path = env && *env ? env : FIXTURE;
  p.backend = be;
  p.n_threads = 2;
  p.kv_tokens = 16384;
  struct hearth_model *m = NULL;
  struct hearth_err err = {0};
  if (hearth_model_load(&p, &m, &err)) fprintf(stderr, "load (backend %d): %s\n", (int)be, err.msg);
  return m;
}

/* prompt i: a 32-token prefix common to all, then its own tokens (lengths 40..103) */
static int make_prompt(int i, int V, int32_t *t) {
  int n = i == 0 ? NP : 40 + (i * 13) % 64;
  for (int k = 0; k < n; k++) t[k] = k < 32 ? (k * 31 + 7) % V : (k * 17 + i * 101 + 3) % V;
  return n;
}

/* label tokens, taken modulo the vocabulary of the checkpoint under test (label_ids) */
static const int32_t LABEL0[NL] = {11, 257, 42, 900};
static int32_t LABEL[NL];
static void label_ids(int V) {
  for (int i = 0; i < NL; i++) LABEL[i] = LABEL0[i] % V;
}

/* P0 evaluated alone on a fresh model (chunks[] sizes, summing to NP, or one pass when NULL): its last
 * logits into last[V], the peeked label rows into rows[(NL-1) * V] */
static int alone(enum hearth_backend_kind be, const int *chunks, float *last, float *rows) {
  struct hearth_model *m = load(be);
  if (!m) return -1;
  const int V = hearth_model_info(m)->n_vocab;
  label_ids(V);
  int32_t p[128];
  make_prompt(0, V, p);
  struct hearth_session *s = NULL;
  struct hearth_err err = {0};
  int rc = hearth_session_new(m, NULL, &s, &err);
  if (!rc) hearth_session_set_row_invariant(s, 1); /* as the engine sets it for a request with labels */
  if (!chunks && !rc) rc = hearth_session_sync(s, p, NP, &err);
  for (int at = 0, c = 0; chunks && !rc && at < NP; at += chunks[c++]) rc = hearth_session_append(s, p + at, chunks[c], &err);
  if (!rc) memcpy(last, hearth_session_logits(s), (size_t)V * sizeof *last);
  if (!rc) rc = hearth_session_peek_logits(s, LABEL, NL - 1, rows, &err);
  if (rc) fprintf(stderr, "alone: %s\n", err.msg);
  hearth_session_free(s);
  hearth_model_free(m);
  return rc;
}

static void run(enum hearth_backend_kind be) {
  struct hearth_model *m = load(be);
  REQUIRE(m);
  const int V = hearth_model_info(m)->n_vocab;
  label_ids(V);
  struct hearth_err err = {0};
  float *last = malloc((size_t)V * sizeof *last), *rows = malloc((size_t)NL * V * sizeof *rows);
  float *got = malloc((size_t)NL * V * sizeof *got), *ref = malloc((size_t)NL * V * sizeof *ref);
  REQUIRE(last && rows && got && ref);

  /* peek = append, and the session is left as it was */
  int32_t p[NS][128];
  int np[NS];
  for (int i = 0; i < NS; i++) np[i] = make_prompt(i, V, p[i]);
  struct hearth_session *a = NULL, *b = NULL;
  REQUIRE(hearth_session_new(m, NULL, &a, &err) == 0 && hearth_session_new(m, NULL, &b, &err) == 0);
  hearth_session_set_row_invariant(a, 1);
  hearth_session_set_row_invariant(b, 1);
  REQUIRE(hearth_session_sync(a, p[1], np[1], &err) == 0);
  REQUIRE(hearth_session_sync(b, p[1], np[1], &err) == 0);
  REQUIRE(hearth_session_peek_logits(a, LABEL, NL, got, &err) == 0);
  REQUIRE(hearth_session_append_logits(b, LABEL, NL, ref, &err) == 0);
  CHECK(memcmp(got, ref, (size_t)NL * V * sizeof *got) == 0);
  CHECKF(hearth_session_n_tokens(a) == np[1], "peek left %d tokens, want %d", hearth_session_n_tokens(a), np[1]);
  CHECK(memcmp(hearth_session_tokens(a), p[1], (size_t)np[1] * sizeof(int32_t)) == 0);
  CHECK(hearth_session_logits(a) == NULL);
  REQUIRE(hearth_session_append(a, LABEL, 2, &err) == 0); /* after the peek: as if it never happened */
  CHECK(memcmp(hearth_session_logits(a), ref + V, (size_t)V * sizeof *ref) == 0);
  int32_t bad = V + 5;
  CHECK(hearth_session_peek_logits(a, &bad, 1, got, &err) == HEARTH_ERR_ARG);
  CHECK(hearth_session_n_tokens(a) == np[1] + 2);
  hearth_session_free(a);
  hearth_session_free(b);

  /* P0 alone in one pass: the reference bits */
  REQUIRE(alone(be, NULL, last, rows) == 0);
  /* alone in uneven chunks, the last one a single token (a decode-shaped pass) */
  static const int CH[] = {7, 16, 1, 20, 1};
  REQUIRE(alone(be, CH, ref, got) == 0);
  CHECKF(memcmp(ref, last, (size_t)V * sizeof *last) == 0, "last logits: chunked vs one pass");
  CHECKF(memcmp(got, rows, (size_t)(NL - 1) * V * sizeof *rows) == 0, "label rows: chunked vs one pass");

  /* one step of 64 sessions: NDEC running sequences decode a token, the rest prefill ragged prompts, and
   * P0 attaches the common prefix another session computed (2 cached blocks) */
  struct hearth_session *s[NS];
  const int32_t *tp[NS];
  int cnt[NS];
  for (int i = 0; i < NS; i++) {
    REQUIRE(hearth_session_new(m, NULL, &s[i], &err) == 0);
    hearth_session_set_row_invariant(s[i], 1);
  }
  for (int i = 1; i <= NDEC; i++) REQUIRE(hearth_session_sync(s[i], p[i], np[i], &err) == 0);
  int32_t dec[NS];
  for (int i = 0; i < NS; i++) {
    if (i >= 1 && i <= NDEC) {
      dec[i] = (int32_t)(i * 7 % V);
      tp[i] = &dec[i];
      cnt[i] = 1;
      continue;
    }
    int h = hearth_session_prepare(s[i], p[i], np[i], &err);
    REQUIRE(h >= 0);
    if (i == 0) CHECKF(h == 32, "P0 attached %d cached tokens, want 32", h);
    tp[i] = p[i] + h;
    cnt[i] = np[i] - h;
  }
  REQUIRE(hearth_sessions_step(s, NS, tp, cnt, &err) == 0);
  CHECKF(memcmp(hearth_session_logits(s[0]), last, (size_t)V * sizeof *last) == 0, "last logits: in a step of 64 vs alone");
  REQUIRE(hearth_session_peek_logits(s[0], LABEL, NL - 1, got, &err) == 0);
  CHECKF(memcmp(got, rows, (size_t)(NL - 1) * V * sizeof *rows) == 0, "label rows: after a step of 64 vs alone");
  for (int i = 0; i < NS; i++) hearth_session_free(s[i]);
  free(last);
  free(rows);
  free(got);
  free(ref);
  hearth_model_free(m);
}

TEST_GROUP(cpu) { run(HEARTH_BACKEND_CPU); }
TEST_GROUP(cuda) { run(HEARTH_BACKEND_CUDA); }

TEST_MAIN(T(cpu), T(cuda))
