/* runtime/warm_up.c — hearth_model_warm_up: one pass over the request path's kernels right after a load.
 *
 * Why: the CUDA runtime loads each kernel's module at its first launch (lazy loading, the default since CUDA 12),
 * and the first forward of each shape also allocates its scratch and captures its graph. On the H200 that cost the
 * first request after a start ~10 ms of the 47 ms it took to answer from the disk prefix cache (bench/RESULTS.md,
 * session 24). A server calls this before it reports ready, so the cost moves to the start.
 *
 * The work: prefills of a few sizes (the decode GEMV for n <= 8, the GEMM's three tile heights), greedy decode steps
 * (the graph path), a scored step (row scores), a step that brings logits to the host, teacher forcing, and the same
 * in the row-invariant mode; for an embedding model one embedding and one batch of two. Token ids are synthetic and
 * the session is unkeyed, so nothing of it reaches the prefix cache or the disk store. */
#include <stdlib.h>

#include "base/err.h"
#include "hearth.h"
#include "runtime/session_unkeyed.h"
#include "runtime/warm_up.h"

#define WARM_MAX 128 /* the longest synthetic prompt */

static void synth(int32_t *t, int n, int salt, int n_vocab) {
  for (int i = 0; i < n; i++) t[i] = (int32_t)(((uint64_t)(i + 1) * 7919u + (uint64_t)salt * 104729u) % (uint64_t)n_vocab);
}

static int warm_embedding(struct hearth_model *m, struct hearth_session *s, int32_t *t, struct hearth_err *err) {
  const struct hearth_model_info *info = hearth_model_info(m);
  float *out = malloc((size_t)2 * info->n_embd * sizeof *out);
  if (!out) return err_set(err, HEARTH_ERR_NOMEM, "out of memory");
  synth(t, 8, 1, info->n_vocab);
  int rc = hearth_session_embed(s, t, 8, out, err);
  if (!rc) {
    synth(t + 8, 40, 2, info->n_vocab);
    const int32_t *toks[2] = {t, t + 8};
    const int n[2] = {8, 40};
    rc = hearth_embed_batch(m, toks, n, 2, out, NULL, NULL, NULL, err);
  }
  free(out);
  return rc;
}

static int warm_generative(struct hearth_session *s, int32_t *t, int n_vocab, float *peek, struct hearth_err *err) {
  static const int sizes[] = {4, 24, 48, 100}; /* GEMV (n <= 8); GEMM tiles of 32, 64 and 128 rows */
  int rc = 0, salt = 1;
  for (int inv = 0; inv < 2 && !rc; inv++) {
    hearth_session_set_row_invariant(s, inv);
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes && !rc; i++) {
      synth(t, sizes[i], salt++, n_vocab); /* a new first token each time: the whole prompt is computed */
      rc = hearth_session_sync(s, t, sizes[i], err);
    }
    int32_t id = 0;
    float lp = 0.0f;
    for (int step = 0; step < 3 && !rc; step++) { /* greedy decode: the second and third replay the graph */
      int32_t tok = (int32_t)((step + 5) % n_vocab);
      const int32_t *tp = &tok;
      const int one = 1;
      rc = hearth_sessions_step_greedy(&s, 1, &tp, &one, &id, &lp, err);
    }
    if (!rc) { /* a scored step: logprobs / label scoring */
      struct hearth_row_score sc = {.k = 5, .n_ids = 2, .ids = {0, 1}};
      struct hearth_row_score *scp = &sc;
      int32_t tok = 7 % n_vocab;
      const int32_t *tp = &tok;
      const int one = 1;
      rc = hearth_sessions_step_scored(&s, 1, &tp, &one, NULL, &scp, &id, &lp, err);
    }
    if (!rc) { /* logits to the host (sampled requests) */
      int32_t tok = 9 % n_vocab;
      const int32_t *tp = &tok;
      const int one = 1;
      rc = hearth_sessions_step(&s, 1, &tp, &one, err);
    }
    if (!rc) { /* teacher forcing (multi-token labels) */
      int32_t two[2] = {(int32_t)(11 % n_vocab), (int32_t)(13 % n_vocab)};
      rc = hearth_session_peek_logits(s, two, 2, peek, err);
    }
  }
  return rc;
}

int hearth_model_warm_up(struct hearth_model *m, struct hearth_err *err) {
  if (hearth_model_info(m)->backend == HEARTH_BACKEND_CPU) return 0; /* nothing is loaded lazily there */
  return warm_up_run(m, err);
}

int warm_up_run(struct hearth_model *m, struct hearth_err *err) {
  const struct hearth_model_info *info = hearth_model_info(m);
  if ((long long)info->kv_blocks * info->kv_block_tokens < 2 * WARM_MAX) return 0; /* a pool too small to matter */
  struct hearth_session_params sp = {.n_ctx = 2 * WARM_MAX};
  struct hearth_session *s = NULL;
  int rc = hearth_session_new(m, &sp, &s, err);
  if (rc) return err_prefix(err, "warm-up");
  session_set_unkeyed(s);
  int32_t *t = malloc(WARM_MAX * sizeof *t);
  float *peek = info->is_embedding ? NULL : malloc((size_t)2 * info->n_vocab * sizeof *peek);
  if (!t || (!info->is_embedding && !peek)) rc = err_set(err, HEARTH_ERR_NOMEM, "out of memory");
  else if (info->is_embedding) rc = warm_embedding(m, s, t, err);
  else rc = warm_generative(s, t, info->n_vocab, peek, err);
  free(peek);
  free(t);
  hearth_session_free(s);
  return rc ? err_prefix(err, "warm-up") : 0;
}
