/* runtime/embed_batch.c — hearth_embed_batch: many embedding inputs in few, full forward passes.
 *
 * Owns the packing of inputs into forward passes and the pooling of their hidden states. Does not
 * own the forward itself (session.c's session_embed_last) nor any queueing across callers (the
 * server's embed_queue.c gathers concurrent requests into one call).
 *
 * Packing, and why it keeps every input's embedding bit-identical to hearth_session_embed:
 *   - inputs are taken longest first; a pass is filled first-fit (the longest input left that still
 *     fits) up to the scratch's max_tokens tokens, max_seqs sequences and the KV pool's blocks:
 *     ragged, no padding;
 *   - an input never straddles two passes unless it is longer than a pass, and such an input runs in
 *     passes of its own, cut at the same multiples of max_tokens as when it is embedded alone.
 *   So an input's tokens always enter a forward at the same positions with the same chunking; what
 *   differs is only which other sequences' rows share the pass. The CPU backend computes every row
 *   independently of the others (per-row activation quantization, integer dot products per row,
 *   one sequence's attention never reads another's KV: docs/decisions.md, "Batch-invariant
 *   embeddings"), so the result does not depend on the company. tests/unit/test_embed_batch.c
 *   checks it bit for bit; tests/cuda/test_cuda_embed_batch.c asks the same of the CUDA backend.
 *
 * Pooling: the last token's hidden state (the default) and the first token's (cls: a one-token
 * pass, attention being causal) are packed as above. Mean pooling needs every row of a sequence,
 * which the pass's output buffer (max_seqs rows) cannot hold for many sequences at once, so mean
 * inputs run one at a time through hearth_session_embed (correct, not faster). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/prof.h"
#include "model/model.h"
#include "runtime/session_embed.h"

/* what hearth_session_embed does to the pooled vector, operation for operation (bit-equal results) */
static void normalise(const float *h, int d, float *out) {
  double ss = 0;
  for (int i = 0; i < d; i++) {
    double v = h[i];
    out[i] = (float)v;
    ss += v * v;
  }
  double norm = sqrt(ss);
  if (norm < 1e-12) norm = 1e-12;
  for (int i = 0; i < d; i++) out[i] = (float)(out[i] / norm);
}

/* an input's length as packed (qsort has no context argument, so each entry carries it) */
struct by_len {
  int len, idx;
};

static int cmp_desc(const void *a, const void *b) {
  const struct by_len *x = a, *y = b;
  if (x->len != y->len) return x->len > y->len ? -1 : 1;
  return (x->idx > y->idx) - (x->idx < y->idx); /* a total order: the packing is deterministic */
}

/* the inputs embedded one at a time (mean pooling) */
static int embed_each(struct hearth_model *m, const int32_t *const *tokens, const int *n_tokens, int n,
                      float *out, int (*abort_fn)(void *), void *abort_arg, struct hearth_embed_stats *st,
                      struct hearth_err *err) {
  struct hearth_session *s = NULL;
  int rc = hearth_session_new(m, NULL, &s, err);
  if (rc) return rc;
  hearth_session_set_abort(s, abort_fn, abort_arg);
  const int T = m->scratch.max_out; /* the every-row path's pass size (session.c) */
  for (int i = 0; i < n && !rc; i++) {
    if (abort_fn && abort_fn(abort_arg)) rc = err_set(err, HEARTH_ERR_CANCELLED, "cancelled");
    else rc = hearth_session_embed(s, tokens[i], n_tokens[i], out + (size_t)i * m->cfg.hidden_size, err);
    if (!rc && st) {
      st->n_forwards += (n_tokens[i] + T - 1) / T;
      st->n_tokens += n_tokens[i];
    }
  }
  hearth_session_free(s);
  return rc;
}

int hearth_embed_batch(struct hearth_model *m, const int32_t *const *tokens, const int *n_tokens, int n,
                       float *out, int (*abort_fn)(void *arg), void *abort_arg, struct hearth_embed_stats *stats,
                       struct hearth_err *err) {
  if (!m->cfg.is_embedding) return err_set(err, HEARTH_ERR_ARG, "hearth_embed_batch: not an embedding model");
  if (n < 0) return err_set(err, HEARTH_ERR_ARG, "hearth_embed_batch: negative input count");
  const int cap = m->max_blocks_per_seq * m->kv.block_size, V = m->cfg.vocab_size, d = m->cfg.hidden_size;
  for (int i = 0; i < n; i++) {
    if (n_tokens[i] < 1) return err_set(err, HEARTH_ERR_ARG, "input %d is empty", i);
    if (n_tokens[i] > cap) return err_set(err, HEARTH_ERR_CTX_FULL, "input %d has %d tokens; a sequence holds at most %d", i, n_tokens[i], cap);
    for (int t = 0; t < n_tokens[i]; t++)
      if (tokens[i][t] < 0 || tokens[i][t] >= V)
        return err_set(err, HEARTH_ERR_ARG, "input %d: token id %d out of range [0, %d)", i, tokens[i][t], V);
  }
  if (stats) memset(stats, 0, sizeof *stats);
  const enum hearth_pooling pool = m->info.pooling;
  if (pool == HEARTH_POOL_MEAN) return embed_each(m, tokens, n_tokens, n, out, abort_fn, abort_arg, stats, err);
  /* a pass: at most T tokens, S sequences and the pool's NB blocks of bs tokens (whole blocks per sequence) */
  const int T = m->scratch.max_tokens, S = m->max_seqs, bs = m->kv.block_size, NB = m->kv.n_blocks;
  struct by_len *order = malloc((size_t)(n ? n : 1) * sizeof *order);
  uint8_t *used = calloc((size_t)(n ? n : 1), 1);
  float *hidden = malloc((size_t)S * d * sizeof *hidden);
  struct hearth_session **ss = calloc((size_t)S, sizeof *ss);
  const int32_t **bt = malloc((size_t)S * sizeof *bt);
  int *bn = malloc((size_t)S * sizeof *bn), *bidx = malloc((size_t)S * sizeof *bidx);
  int rc = order && used && hidden && ss && bt && bn && bidx ? 0 : err_set(err, HEARTH_ERR_NOMEM, "out of memory");
  for (int i = 0; i < n && !rc; i++) {
    order[i].len = pool == HEARTH_POOL_CLS ? 1 : n_tokens[i]; /* cls: the first token's state is the first token's alone */
    order[i].idx = i;
  }
  if (!rc) qsort(order, (size_t)n, sizeof *order, cmp_desc);
  int n_sess = 0;
  for (int first = 0; !rc && first < n;) {
    /* one pass: the longest input left, then first fit over the rest (longest first) */
    int nb = 0, nt = 0, nblk = 0;
    for (int k = first; k < n && nb < S && nt < T; k++) {
      if (used[k]) continue;
      int len = order[k].len, blk = (len + bs - 1) / bs;
      if (nb == 0 || (nt + len <= T && nblk + blk <= NB)) {
        nblk += blk;
        bidx[nb] = order[k].idx;
        bt[nb] = tokens[order[k].idx];
        bn[nb] = len;
        nb++;
        nt += len;
        used[k] = 1;
        if (len > T) break; /* longer than a pass: alone, in passes of its own */
      }
    }
    while (first < n && used[first]) first++;
    while (n_sess < nb && !rc) rc = hearth_session_new(m, NULL, &ss[n_sess++], err);
    if (rc) break;
    if (abort_fn && abort_fn(abort_arg)) {
      rc = err_set(err, HEARTH_ERR_CANCELLED, "cancelled");
      break;
    }
    hearth_session_set_abort(ss[0], nb == 1 ? abort_fn : NULL, abort_arg); /* between the passes of a long input */
    const double t_pass = prof_now();
    rc = session_embed_last(ss, nb, bt, bn, hidden, err);
    prof_add(PROF_EMBED_PASS, t_pass, nt);
    hearth_session_set_abort(ss[0], NULL, NULL);
    if (rc) break;
    for (int k = 0; k < nb; k++) normalise(hidden + (size_t)k * d, d, out + (size_t)bidx[k] * d);
    if (stats) {
      stats->n_forwards += (nt + T - 1) / T;
      stats->n_tokens += nt;
    }
  }
  for (int i = 0; i < n_sess; i++) hearth_session_free(ss[i]);
  free(order);
  free(used);
  free(hidden);
  free(ss);
  free(bt);
  free(bn);
  free(bidx);
  return rc;
}
