/* runtime/session.c — hearth_session: a token timeline over KV blocks of the model's pool.
 *
 * The batching primitive is session_forward(): it packs new tokens of several sessions into
 * forward passes of at most scratch.max_tokens tokens, asks for the outputs of each session's last
 * new token, and stores them in the session (logits, or the final hidden state for embeddings). */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/prof.h"
#include "model/model.h"
#include "runtime/kv_cache.h"
#include "runtime/kv_ring.h"
#include "runtime/prefix_store.h"
#include "runtime/row_score.h"
#include "runtime/sampler.h"
#include "runtime/session_embed.h"
#include "runtime/session_unkeyed.h"
#include "runtime/session_verify.h"

struct hearth_session {
  struct hearth_model *m;
  int n_ctx;
  int32_t *tokens;   /* [n_ctx] */
  int n_tokens;      /* tokens whose KV is in the cache */
  int32_t *blocks;   /* [max_blocks] block ids */
  int32_t *sblocks;  /* [max_blocks] the sliding pool's block of each, -1 below the window (kv_ring.h); NULL without */
  uint64_t *bhash;   /* [max_blocks] prefix-cache key of each full block (hash chain) */
  int n_blocks;
  int n_keyed;       /* leading full blocks whose bhash is set (and registered in the cache) */
  int n_reused;      /* tokens the last prepare/sync kept or took from the prefix cache */
  int32_t greedy_id; /* after a greedy step: argmax of the last logits and its logprob */
  float greedy_logprob;
  float *out;        /* [max(vocab, d)] last logits or hidden state */
  int has_out;
  uint64_t epoch;    /* new at creation and at every truncation: a step enqueued ahead for an older epoch is not this one's */
  int (*abort_fn)(void *arg); /* hearth_session_set_abort: polled before every forward batch */
  void *abort_arg;
  int invariant;     /* hearth_session_set_row_invariant: its forwards run the backend's row-invariant kernels,
                        and its blocks live under their own prefix-cache keys */
  struct hearth_row_score *score; /* during hearth_sessions_step_scored only: what this session's row must give */
  int unkeyed;       /* session_set_unkeyed: its blocks never enter the prefix cache (nor the disk store) */
  const struct hearth_sample_req *sample; /* during hearth_sessions_step_sampled only: who draws its next token */
};

void session_set_unkeyed(struct hearth_session *s) { s->unkeyed = 1; }
int session_swa_held(const struct hearth_session *s) { return s->sblocks ? kv_ring_held(s->sblocks, s->n_blocks) : 0; }

/* The root of a session's block-hash chain: a row-invariant session's blocks were computed with other kernels
 * (CUDA), so they are another cache entry than the same tokens computed on the fast path */
static uint64_t chain_root(const struct hearth_session *s) { return s->invariant ? 0x696e76617269616eull : 0; }


static uint64_t next_epoch(struct hearth_model *m) { return __atomic_add_fetch(&m->epochs, 1, __ATOMIC_RELAXED); }

int hearth_session_new(struct hearth_model *m, const struct hearth_session_params *p,
                       struct hearth_session **out, struct hearth_err *err) {
  *out = NULL;
  int cap = m->max_blocks_per_seq * m->kv.block_size;
  int n_ctx = p && p->n_ctx > 0 ? p->n_ctx : cap;
  if (n_ctx > cap) return err_set(err, HEARTH_ERR_ARG, "n_ctx %d exceeds the KV pool / context limit %d", n_ctx, cap);
  struct hearth_session *s = calloc(1, sizeof *s);
  if (!s) return err_set(err, HEARTH_ERR_NOMEM, "out of memory");
  s->m = m;
  s->epoch = next_epoch(m);
  s->n_ctx = n_ctx;
  s->tokens = malloc((size_t)n_ctx * sizeof *s->tokens);
  s->blocks = malloc((size_t)m->max_blocks_per_seq * sizeof *s->blocks);
  s->bhash = malloc((size_t)m->max_blocks_per_seq * sizeof *s->bhash);
  if (m->kv.swa.n_blocks) s->sblocks = malloc((size_t)m->max_blocks_per_seq * sizeof *s->sblocks);
  int w = m->cfg.vocab_size > m->cfg.hidden_size ? m->cfg.vocab_size : m->cfg.hidden_size;
  s->out = malloc((size_t)w * sizeof *s->out);
  if (!s->tokens || !s->blocks || !s->bhash || !s->out || (m->kv.swa.n_blocks && !s->sblocks)) {
    hearth_session_free(s);
    return err_set(err, HEARTH_ERR_NOMEM, "out of memory");
  }
  *out = s;
  return 0;
}

void hearth_session_set_abort(struct hearth_session *s, int (*fn)(void *arg), void *arg) {
  s->abort_fn = fn;
  s->abort_arg = arg;
}

/* Keeps the first min(n, held) tokens and returns how many were kept. Blocks no longer needed go
 * back to the pool. A shared block is immutable, so a cut inside one falls back to its start. A cut
 * back to where the sliding blocks of the window were already given back keeps nothing (kv_ring.h). */
static int truncate_to(struct hearth_session *s, int n) {
  int bs = s->m->kv.block_size;
  if (n > s->n_tokens) n = s->n_tokens;
  if (n % bs && n / bs < s->n_blocks &&
      (kv_block_shared(&s->m->kv, s->blocks[n / bs]) ||
       (s->sblocks && s->sblocks[n / bs] >= 0 && kv_swa_shared(&s->m->kv, s->sblocks[n / bs]))))
    n -= n % bs;
  if (s->sblocks && !kv_ring_intact(&s->m->kv, s->sblocks, s->n_blocks, n)) n = 0;
  s->n_tokens = n;
  int keep = (n + bs - 1) / bs;
  if (s->sblocks && s->n_blocks > keep) kv_ring_release(&s->m->kv, s->sblocks, keep, s->n_blocks);
  while (s->n_blocks > keep) kv_block_unref(&s->m->kv, s->blocks[--s->n_blocks]);
  if (s->n_keyed > n / bs) s->n_keyed = n / bs;
  s->has_out = 0;
  s->epoch = next_epoch(s->m);
  return n;
}

void hearth_session_set_row_invariant(struct hearth_session *s, int on) {
  if ((on != 0) == s->invariant) return;
  truncate_to(s, 0); /* what it holds was computed (and keyed) the other way */
  s->invariant = on != 0;
}

/* Registers the session's newly completed full blocks in the prefix cache (after a call that keeps its tokens);
 * then the sliding blocks out of sight from the next position go back (the cache holds those it took). */
static void key_full_blocks(struct hearth_session *s) {
  int bs = s->m->kv.block_size;
  for (int b = s->n_keyed; !s->unkeyed && b < s->n_tokens / bs; b++) {
    uint64_t parent = b ? s->bhash[b - 1] : chain_root(s);
    const int32_t *t = s->tokens + (size_t)b * bs;
    s->bhash[b] = prefix_hash(parent, t, bs);
    const int32_t sid = s->sblocks ? s->sblocks[b] : -1;
    if (kv_prefix_register(&s->m->kv, s->bhash[b], parent, t, s->blocks[b], sid) && s->m->store_dir)
      prefix_store_note(s->m, s->bhash[b], parent, t, s->blocks[b], sid); /* saved later, off this path */
    s->n_keyed = b + 1;
  }
  if (s->sblocks) kv_ring_release_dead(&s->m->kv, s->sblocks, s->n_blocks, s->n_tokens);
}

/* attach_cached's disk path at block s->n_tokens / bs: the chain of keys of the full blocks that may be attached
 * (up to the one before position n-1) is computed from the tokens, and the run of them found on disk is loaded in
 * one go (prefix_store_load_run). Returns the blocks attached. */
static int attach_from_disk(struct hearth_session *s, const int32_t *tokens, int n) {
  struct hearth_model *m = s->m;
  const int bs = m->kv.block_size, b0 = s->n_tokens / bs;
  int nb = (n - 1) / bs - b0; /* full blocks before the one that holds position n-1 */
  if (nb > s->n_ctx / bs - b0) nb = s->n_ctx / bs - b0;
  if (nb <= 0) return 0;
  uint64_t *key = malloc((size_t)nb * sizeof *key), *parent = malloc((size_t)nb * sizeof *parent);
  int32_t *ids = malloc((size_t)nb * 2 * sizeof *ids), *sids = ids ? ids + nb : NULL;
  int got = 0;
  if (key && parent && ids) {
    uint64_t p = b0 ? s->bhash[b0 - 1] : chain_root(s);
    for (int i = 0; i < nb; i++) {
      parent[i] = p;
      key[i] = p = prefix_hash(p, tokens + (size_t)(b0 + i) * bs, bs);
    }
    pthread_mutex_lock(&m->forward_mu);
    got = prefix_store_load_run(m, key, parent, tokens + (size_t)b0 * bs, nb, ids, s->sblocks ? sids : NULL);
    pthread_mutex_unlock(&m->forward_mu);
  }
  for (int i = 0; i < got; i++) {
    if (s->sblocks) s->sblocks[s->n_blocks] = sids[i];
    s->blocks[s->n_blocks++] = ids[i];
    s->bhash[b0 + i] = key[i];
    s->n_keyed = b0 + i + 1;
    memcpy(s->tokens + s->n_tokens, tokens + s->n_tokens, (size_t)bs * sizeof *tokens);
    s->n_tokens += bs;
  }
  free(key);
  free(parent);
  free(ids);
  return got;
}

/* After attach_cached took blocks past `held`: a cached prefix resumes only where the sliding blocks of its last
 * window came with it (an entry may have given its sliding part up, kv_ring.h), so the blocks past the last such
 * boundary go back; then the sliding blocks below the window do. */
static void kv_ring_attached(struct hearth_session *s, int held) {
  struct kv_pool *p = &s->m->kv;
  const int bs = p->block_size;
  while (s->n_tokens > held && !kv_ring_intact(p, s->sblocks, s->n_blocks, s->n_tokens)) {
    s->n_blocks--;
    kv_ring_release(p, s->sblocks, s->n_blocks, s->n_blocks + 1);
    kv_block_unref(p, s->blocks[s->n_blocks]);
    s->n_tokens -= bs;
    s->n_keyed = s->n_blocks;
  }
  kv_ring_release_dead(p, s->sblocks, s->n_blocks, s->n_tokens);
}

/* Attaches cached full blocks that continue the held prefix with tokens[n_tokens..), stopping
 * before the block that holds position n-1 (that one must be evaluated for its logits). */
static void attach_cached(struct hearth_session *s, const int32_t *tokens, int n) {
  int bs = s->m->kv.block_size;
  const int held = s->n_tokens;
  while (s->n_tokens % bs == 0 && s->n_tokens + bs <= n - 1 && s->n_keyed == s->n_blocks) {
    int b = s->n_tokens / bs;
    uint64_t parent = b ? s->bhash[b - 1] : chain_root(s);
    const int32_t *t = tokens + s->n_tokens;
    uint64_t key = prefix_hash(parent, t, bs);
    int32_t sid = -1, id = kv_prefix_attach(&s->m->kv, key, parent, t, s->sblocks ? &sid : NULL);
    if (id < 0 && s->m->store_dir) { /* not in memory: maybe on disk from an earlier run, with the blocks after it */
      if (attach_from_disk(s, tokens, n) == 0) break;
      continue;
    }
    if (id < 0) break;
    if (s->sblocks) s->sblocks[s->n_blocks] = sid;
    s->blocks[s->n_blocks++] = id;
    s->bhash[b] = key;
    s->n_keyed = b + 1;
    memcpy(s->tokens + s->n_tokens, t, (size_t)bs * sizeof *t);
    s->n_tokens += bs;
  }
  if (s->sblocks) kv_ring_attached(s, held);
}

void hearth_session_free(struct hearth_session *s) {
  if (!s) return;
  if (s->blocks) truncate_to(s, 0);
  free(s->tokens);
  free(s->blocks);
  free(s->sblocks);
  free(s->bhash);
  free(s->out);
  free(s);
}

int hearth_session_n_tokens(const struct hearth_session *s) { return s->n_tokens; }
const int32_t *hearth_session_tokens(const struct hearth_session *s) { return s->tokens; }
const float *hearth_session_logits(const struct hearth_session *s) {
  return s->has_out && !s->m->cfg.is_embedding ? s->out : NULL;
}

static int ring_dry(const struct hearth_session *s, struct hearth_err *err) {
  return err_set(err, HEARTH_ERR_CTX_FULL, "KV cache is full (the sliding-window pool's %d blocks of %d tokens in use)",
                 s->m->kv.swa.n_blocks, s->m->kv.block_size);
}

static int ensure_blocks(struct hearth_session *s, int n_tokens, struct hearth_err *err) {
  int need = (n_tokens + s->m->kv.block_size - 1) / s->m->kv.block_size;
  while (s->n_blocks < need) {
    int32_t id = kv_block_alloc(&s->m->kv);
    if (id < 0) return err_set(err, HEARTH_ERR_CTX_FULL, "KV cache is full (%d blocks of %d tokens in use)", s->m->kv.n_blocks, s->m->kv.block_size);
    if (s->sblocks) s->sblocks[s->n_blocks] = -1;
    s->blocks[s->n_blocks++] = id;
  }
  /* sliding blocks: those out of sight go back, the first forward pass's new ones are mapped (a longer call maps
   * the rest pass by pass: ring_pass) */
  int to = s->n_tokens + s->m->scratch.max_tokens < n_tokens ? s->n_tokens + s->m->scratch.max_tokens : n_tokens;
  if (s->sblocks && kv_ring_fill(&s->m->kv, s->sblocks, s->n_blocks, s->n_tokens, s->n_tokens, to)) return ring_dry(s, err);
  return 0;
}

/* Evaluates new tokens for n sessions; tokens[i][0..counts[i]) are appended to sessions[i]. */
enum out_mode { OUT_LOGITS, OUT_HIDDEN, OUT_GREEDY };

/* the greedy ids (rows 0..n) and their logprobs (rows n..2n, as f32) inside scratch.gsel */
static void gsel_views(struct model_scratch *sc, int n, struct hb_tensor *gid, struct hb_tensor *glp) {
  *gid = sc->gsel;
  gid->rows = n;
  gid->bytes = 0;
  *glp = sc->gsel;
  glp->dtype = HB_F32;
  glp->rows = n;
  glp->data = (char *)sc->gsel.data + (size_t)n * sizeof(int32_t);
  glp->bytes = 0;
}

/* What the caller sees of row k of a device selection read back into gsel (ids in 0..n, logprobs in n..2n): a
 * device argmax reports a row holding a NaN or an infinity by a NaN logprob beside a valid id (0), since a greedy
 * graph has already fed that id to the next step (greedy_tail); the caller gets -1 and logprob 0 there, as from
 * the host's selection (run_batch). */
static void device_pick(const int32_t *gsel, int n, int k, int32_t *id, float *lp) {
  float v;
  memcpy(&v, gsel + n + k, sizeof v);
  *id = isnan(v) ? -1 : gsel[k];
  *lp = isnan(v) ? 0.0f : v;
}

/* Whether a greedy decode step can end inside its graph: the argmax into gsel, its ids copied into the next
 * step's input (scratch.ids) and the batch's positions and lengths advanced by one on the device. A step
 * enqueued ahead (step_ahead) is then that graph and its readback alone, with no upload unless a session
 * enters a new KV block. */
static int greedy_tail_capable(const struct hearth_model *m) {
  const struct hb_ops *be = m->be;
  return be->argmax && be->copy_rows && be->decode_advance;
}

/* what a greedy decode step enqueues after the forward pass (greedy_tail_capable) */
static void greedy_tail(struct hearth_model *m, struct hb_batch *b) {
  struct hb_tensor gid, glp;
  gsel_views(&m->scratch, b->n_out, &gid, &glp);
  m->be->argmax(m->bctx, &m->scratch.logits, b->n_out, &gid, &glp);
  m->be->copy_rows(m->bctx, &m->scratch.ids, &gid, b->n_out);
  m->be->decode_advance(m->bctx, b);
}

/* Whether a decode step of n tokens whose sequence holds len keys after it takes the backend's fused attention
 * + o_proj (attn_o): such steps replay graphs of their own (graphs_short), since their kernels differ */
static int short_step(const struct hearth_model *m, int n, int len) {
  const struct hb_ops *be = m->be;
  return n == 1 && be->attn_o && be->attn_o_max_len && len <= be->attn_o_max_len(m->bctx, m->cfg.head_dim);
}

/* a decode step of n > 1 sequences, each len[i] tokens after it, short enough for the backend's kernels of short
 * batches (batch_short_len): such steps replay graphs of their own (graphs_bshort), since their kernels differ */
static int short_batch(const struct hearth_model *m, int n, const int32_t *len) {
  const struct hb_ops *be = m->be;
  if (n < 2 || !be->batch_short_len) return 0;
  const int lim = be->batch_short_len(m->bctx, n);
  for (int i = 0; i < n && lim > 0; i++)
    if (len[i] > lim) return 0;
  return lim > 0;
}

/* the graph slot of a decode-shaped step of n sequences, each len[i] tokens after it */
static struct model_graph *graph_slot(struct hearth_model *m, int n, const int32_t *len, int tail) {
  if (short_step(m, n, len[0])) return &m->graphs_short[tail];
  if (short_batch(m, n, len)) return &m->graphs_bshort[tail][n];
  return &(tail ? m->graphs_greedy : m->graphs)[n];
}

/* Enqueues the family forward of the uploaded batch (plus greedy_tail with tail), replayed from a captured
 * graph for decode-shaped batches when the backend offers graphs (captured on the shape's second run; greedy
 * steps have graphs of their own) */
static int enqueue_graph(struct hearth_model *m, struct hb_batch *b, int want_hidden, int tail, struct hearth_err *err) {
  const struct hb_ops *be = m->be;
  struct hb_ctx *c = m->bctx;
  int rc = 0;
  int decode_shape = b->n_tokens == b->n_seqs && b->n_out == b->n_tokens && !want_hidden;
  struct model_graph *g = !decode_shape || !be->capture_begin || m->row_invariant || b->n_tokens >= MODEL_MAX_GRAPHS
                             ? NULL
                             : graph_slot(m, b->n_tokens, b->seq_len, tail);
  int ran = 0;
  if (g && g->graph) {
    rc = be->graph_launch(c, g->graph, err);
    if (rc == 0) ran = 1;
    else { be->graph_free(g->graph); g->graph = NULL; g->seen = 0; rc = 0; } /* stale: run plainly, capture later */
  } else if (g && g->seen) {
    if (be->capture_begin(c, err) == 0) {
      m->fam->forward(m, b, want_hidden);
      if (tail) greedy_tail(m, b);
      void *graph = NULL;
      if (be->capture_end(c, &graph, err) == 0 && graph) {
        g->graph = graph;
        if (be->graph_launch(c, graph, err) == 0) ran = 1;
      }
    }
  }
  if (!ran) {
    m->fam->forward(m, b, want_hidden);
    if (tail) greedy_tail(m, b);
    if (g) g->seen = 1;
  }
  return 0;
}

/* Uploads the staged batch's ids and tables and enqueues its forward pass (enqueue_graph) */
static int enqueue_forward(struct hearth_model *m, struct hb_batch *b, int want_hidden, int tail, struct hearth_err *err) {
  const struct hb_ops *be = m->be;
  struct hb_ctx *c = m->bctx;
  if (be->write(c, &m->scratch.ids, 0, b->n_tokens, m->b_ids)) return err_set(err, HEARTH_ERR_BACKEND, "%s: cannot copy token ids", be->name);
  int rc = be->batch_upload(c, b, err);
  return rc ? rc : enqueue_graph(m, b, want_hidden, tail, err);
}

/* Runs one forward pass over the staged batch (enqueue_forward) and brings back what `mode` asks for into
 * m->b_outbuf (logits or hidden rows) or m->b_gid/b_glp (greedy ids and logprobs; with need_logits the logits
 * rows as well; without a device argmax only rows with row_greedy[k] set, or all when it is NULL, are chosen
 * on the host, and their logprobs computed only with want_lp). */
static int run_batch_outputs(struct hearth_model *m, struct hb_batch *b, enum out_mode mode, int need_logits,
                             const uint8_t *row_greedy, struct hearth_row_score *const *rowsc,
                             const struct hearth_sample_req *const *rowsm, int want_lp, int tail, struct hearth_err *err);
static int run_batch(struct hearth_model *m, struct hb_batch *b, enum out_mode mode, int need_logits,
                     const uint8_t *row_greedy, struct hearth_row_score *const *rowsc,
                     const struct hearth_sample_req *const *rowsm, int want_lp, struct hearth_err *err) {
  const int want_hidden = mode == OUT_HIDDEN;
  /* a greedy decode-shaped step ends in its graph (greedy_tail) */
  const int tail = mode == OUT_GREEDY && b->n_out > 0 && b->n_tokens == b->n_seqs && b->n_out == b->n_tokens &&
                   greedy_tail_capable(m);
  const double t_enq = prof_now();
  int rc = enqueue_forward(m, b, want_hidden, tail, err);
  prof_add(PROF_FWD_ENQUEUE, t_enq, b->n_tokens);
  if (rc) return rc;
  const double t_wait = prof_now();
  rc = run_batch_outputs(m, b, mode, need_logits, row_greedy, rowsc, rowsm, want_lp, tail, err);
  prof_add(PROF_FWD_WAIT, t_wait, b->n_out);
  return rc;
}

/* Scored rows (rowsc[k] != NULL) after the outputs are on the host: their scores from the op's result words
 * (m->b_score_out) or, without the op, from the logits rows in m->b_outbuf; their greedy id and logprob follow */
static void fill_scores(struct hearth_model *m, int n, struct hearth_row_score *const *rowsc) {
  const int64_t V = m->cfg.vocab_size;
  for (int k = 0; k < n; k++) {
    if (!rowsc[k]) continue;
    int32_t *w = m->b_score_out + (size_t)k * HB_SCORE_OUT;
    if (!m->be->row_score) {
      int32_t req[HB_SCORE_REQ];
      row_score_req(rowsc[k], req);
      row_score_host(m->b_outbuf + (size_t)k * V, V, req, w);
    }
    row_score_fill(w, V, rowsc[k]);
    m->b_gid[k] = rowsc[k]->id;
    m->b_glp[k] = rowsc[k]->id < 0 ? 0.0f : (float)rowsc[k]->logprob;
  }
}

/* ---- sampled rows (hearth_sessions_step_sampled) ----
 * A backend with the sample op draws them where the logits are: each row's request (the sampler's next u, the
 * penalties that apply and the row's distinct history tokens) goes down, the id comes back in gsel beside the
 * argmax's (whose logprob still tells a row with a NaN or an infinity). The sampler's RNG advances only when the
 * op's draw is taken; a row the op cannot decide (-1), or cannot take at all (temperature 0 with penalties), is
 * read back and sampled on the host with that same RNG state, so the draws are the host's either way. */

/* Enqueues the sample op for the sampled rows of a batch of n outputs (rowsm[k] != NULL); host_row[k] = 1 for
 * those that the host must sample from their logits row in any case. Returns 0 or HEARTH_ERR_NOMEM. */
static int sample_enqueue(struct hearth_model *m, int n, const struct hearth_sample_req *const *rowsm,
                          uint8_t *host_row, struct hb_tensor *gid, struct hearth_err *err) {
  struct hb_sample_row rows[MODEL_MAX_SEQS]; /* one output row per session of a step */
  int used = 0, any = 0;
  for (int k = 0; k < n; k++) {
    rows[k] = (struct hb_sample_row){.temperature = 0.0f}; /* not the op's row */
    host_row[k] = 0;
    if (!rowsm[k]) continue;
    int got = -2;
    while (m->be->sample) {
      got = sampler_device_row(rowsm[k]->smp, rowsm[k]->history, rowsm[k]->n_history, &rows[k],
                               m->b_pen ? m->b_pen + used : NULL, m->b_pen_cap - used);
      if (got != -1) break;
      /* the batch's lists outgrew the staging: grow it (rare: a list holds each distinct token once) */
      int cap = m->b_pen_cap < 4096 ? 8192 : 2 * m->b_pen_cap;
      struct hb_sample_pen *p = realloc(m->b_pen, (size_t)cap * sizeof *p);
      if (!p) return err_set(err, HEARTH_ERR_NOMEM, "out of memory");
      m->b_pen = p;
      m->b_pen_cap = cap;
    }
    if (got < 0) {
      rows[k] = (struct hb_sample_row){.temperature = 0.0f};
      host_row[k] = 1;
      continue;
    }
    rows[k].pen0 = used;
    rows[k].n_pen = got;
    used += got;
    any = 1;
  }
  if (any) m->be->sample(m->bctx, &m->scratch.logits, n, rows, m->b_pen, used, gid);
  return 0;
}

/* The sampled rows' ids once gsel (and, with have_rows, every logits row) is on the host: the op's draw, or the
 * host's from the row (read back here when it is not yet) */
static int sample_finish(struct hearth_model *m, int n, const struct hearth_sample_req *const *rowsm,
                         const uint8_t *host_row, int have_rows, struct hearth_err *err) {
  const int64_t V = m->cfg.vocab_size;
  uint8_t host[MODEL_MAX_SEQS];
  int reads = 0;
  for (int k = 0; k < n; k++) {
    host[k] = 0;
    if (!rowsm[k]) continue;
    float v;
    memcpy(&v, m->b_gsel + n + k, sizeof v);
    const int32_t id = host_row[k] ? -1 : m->b_gsel[k];
    m->b_glp[k] = 0.0f;
    if (isnan(v) || id == HB_SAMPLE_NONFINITE) { m->b_gid[k] = -1; continue; } /* the argmax saw a NaN or an inf */
    if (id >= 0) { /* the op drew with the sampler's next u: take it */
      sampler_skip_unit(rowsm[k]->smp);
      m->b_gid[k] = id;
      continue;
    }
    host[k] = 1;
    if (!have_rows) {
      if (m->be->read(m->bctx, &m->scratch.logits, k, 1, m->b_outbuf + (size_t)k * V))
        return err_set(err, HEARTH_ERR_BACKEND, "%s: read failed", m->be->name);
      reads++;
    }
  }
  if (reads) {
    int rc = m->be->sync(m->bctx, err);
    if (rc) return rc;
  }
  for (int k = 0; k < n; k++)
    if (host[k])
      m->b_gid[k] = hearth_sampler_sample(rowsm[k]->smp, m->b_outbuf + (size_t)k * V, rowsm[k]->history,
                                          rowsm[k]->n_history);
  return 0;
}

/* run_batch's second half: the outputs of the enqueued forward */
/* The backend's row_score op over the first n output rows: what each scored row asks goes down, its result words
 * come back into m->b_score_out (fill_scores reads them) */
static int score_rows(struct hearth_model *m, int n, struct hearth_row_score *const *rowsc, struct hearth_err *err) {
  const struct hb_ops *be = m->be;
  struct hb_ctx *c = m->bctx;
  struct model_scratch *sc = &m->scratch;
  for (int k = 0; k < n; k++) row_score_req(rowsc[k], m->b_score_req + (size_t)k * HB_SCORE_REQ);
  if (be->write(c, &sc->score_req, 0, n, m->b_score_req)) return err_set(err, HEARTH_ERR_BACKEND, "%s: write failed", be->name);
  be->row_score(c, &sc->logits, n, &sc->score_req, &sc->score_out);
  if (be->read(c, &sc->score_out, 0, n, m->b_score_out)) return err_set(err, HEARTH_ERR_BACKEND, "%s: read failed", be->name);
  return 0;
}

static int run_batch_outputs(struct hearth_model *m, struct hb_batch *b, enum out_mode mode, int need_logits,
                             const uint8_t *row_greedy, struct hearth_row_score *const *rowsc,
                             const struct hearth_sample_req *const *rowsm, int want_lp, int tail,
                             struct hearth_err *err) {
  const struct hb_ops *be = m->be;
  struct hb_ctx *c = m->bctx;
  struct model_scratch *sc = &m->scratch;
  const int want_hidden = mode == OUT_HIDDEN;
  int rc, scored = 0, sampled = 0;
  if (b->n_out == 0) return be->sync(c, err);
  for (int k = 0; rowsc && k < b->n_out; k++) scored |= rowsc[k] != NULL;
  for (int k = 0; rowsm && k < b->n_out; k++) sampled |= rowsm[k] != NULL;
  if (scored && !be->row_score) need_logits = 1; /* scored on the host, from the rows (below) */
  if (mode == OUT_GREEDY && be->argmax) {
    /* ids in rows 0..n of gsel, their logprobs in rows n..2n: one read (one round trip) brings both */
    const int n = b->n_out;
    struct hb_tensor gid, glp;
    gsel_views(sc, n, &gid, &glp);
    if (!tail) be->argmax(c, &sc->logits, n, &gid, &glp);
    uint8_t host_row[MODEL_MAX_SEQS];
    if (sampled) { /* after the argmax: the sampled rows' ids replace its ids in gsel */
      rc = sample_enqueue(m, n, rowsm, host_row, &gid, err);
      if (rc) return rc;
      for (int k = 0; k < n; k++) need_logits |= rowsm[k] && host_row[k];
    }
    if (scored && be->row_score && (rc = score_rows(m, n, rowsc, err))) return rc; /* in the same round trip */
    if ((need_logits && be->read(c, &sc->logits, 0, n, m->b_outbuf)) || be->read(c, &sc->gsel, 0, 2 * n, m->b_gsel))
      return err_set(err, HEARTH_ERR_BACKEND, "%s: read failed", be->name);
    rc = be->sync(c, err);
    if (rc) return rc;
    for (int k = 0; k < n; k++) device_pick(m->b_gsel, n, k, &m->b_gid[k], &m->b_glp[k]);
    if (scored) fill_scores(m, n, rowsc);
    return sampled ? sample_finish(m, n, rowsm, host_row, need_logits, err) : 0;
  }
  const struct hb_tensor *src = want_hidden ? &sc->sel : &sc->logits;
  if (be->read(c, src, 0, b->n_out, m->b_outbuf)) return err_set(err, HEARTH_ERR_BACKEND, "%s: read failed", be->name);
  /* a backend without argmax that scores rows (the CPU, over its threads) */
  if (scored && be->row_score && mode == OUT_GREEDY && (rc = score_rows(m, b->n_out, rowsc, err))) return rc;
  rc = be->sync(c, err);
  if (rc || mode != OUT_GREEDY) return rc;
  for (int k = 0; k < b->n_out; k++) { /* host selection when the backend has no argmax op */
    const float *lg = m->b_outbuf + (size_t)k * m->cfg.vocab_size;
    if (rowsm && rowsm[k]) { /* sampled: as the server sampled it from the session's logits (NaN / inf: -1) */
      int finite = 1;
      for (int i = 0; i < m->cfg.vocab_size; i++) finite &= fabsf(lg[i]) <= FLT_MAX;
      m->b_gid[k] = finite ? hearth_sampler_sample(rowsm[k]->smp, lg, rowsm[k]->history, rowsm[k]->n_history) : -1;
      m->b_glp[k] = 0.0f;
      continue;
    }
    if (row_greedy && !row_greedy[k]) continue; /* this row's caller samples from its logits */
    if (rowsc && rowsc[k]) continue; /* scored: fill_scores below sets its id and logprob from the row's scores */
    /* a NaN or an infinity in the row (the model's numbers broke down) is reported as id -1: a NaN
     * compares false, so a plain argmax would answer with token 0 for a row of NaNs */
    int32_t best = 0;
    int finite = 1;
    for (int i = 0; i < m->cfg.vocab_size; i++) {
      finite &= fabsf(lg[i]) <= FLT_MAX;
      if (lg[i] > lg[best]) best = i;
    }
    m->b_gid[k] = finite ? best : -1;
    m->b_glp[k] = finite && want_lp ? hearth_logprob(lg, m->cfg.vocab_size, best) : 0.0f; /* a second pass, with exp */
  }
  if (scored) fill_scores(m, b->n_out, rowsc);
  return 0;
}

/* The checks every step makes before it touches anything: sessions of one model, none twice, room for their new
 * tokens, ids in the vocabulary, at most max_seqs sessions */
static int check_step(struct hearth_session **ss, int n, const int32_t *const *tokens, const int *counts,
                      struct hearth_err *err) {
  struct hearth_model *m = ss[0]->m;
  for (int i = 0; i < n; i++) {
    if (ss[i]->m != m) return err_set(err, HEARTH_ERR_ARG, "sessions of different models in one step");
    for (int j = 0; j < i; j++) if (ss[j] == ss[i]) return err_set(err, HEARTH_ERR_ARG, "a session appears twice in one step");
    if (counts[i] < 0) return err_set(err, HEARTH_ERR_ARG, "negative token count");
    if (ss[i]->n_tokens + counts[i] > ss[i]->n_ctx)
      return err_set(err, HEARTH_ERR_CTX_FULL, "context full: %d + %d tokens exceed n_ctx %d", ss[i]->n_tokens, counts[i], ss[i]->n_ctx);
    for (int t = 0; t < counts[i]; t++)
      if (tokens[i][t] < 0 || tokens[i][t] >= m->cfg.vocab_size)
        return err_set(err, HEARTH_ERR_ARG, "token id %d out of range [0, %d)", tokens[i][t], m->cfg.vocab_size);
  }
  if (n > m->max_seqs) return err_set(err, HEARTH_ERR_ARG, "at most %d sessions per step", m->max_seqs);
  return 0;
}

/* KV blocks for every session's new tokens; on failure the blocks taken are given back (sessions unchanged) */
static int take_blocks(struct hearth_session **ss, int n, const int *counts, struct hearth_err *err) {
  for (int i = 0; i < n; i++) {
    int rc = ensure_blocks(ss[i], ss[i]->n_tokens + counts[i], err);
    if (rc) {
      for (int j = 0; j <= i; j++) truncate_to(ss[j], ss[j]->n_tokens);
      return rc;
    }
  }
  return 0;
}

/* ---- decoding one step ahead ------------------------------------------------------------------------
 * In a decode loop (the same sessions, one greedy token each, call after call) the host's part of a step —
 * packing and uploading the batch, launching the graph, the readback's round trip — leaves the GPU idle when
 * the loop is synchronous (bench/NOTES.md, round 14: 27-37 µs of a 0.5-1.3 ms step). So from the second
 * identical call on, the step after this one is enqueued before the host waits for this one: its tokens are
 * this step's argmax, copied on the device (copy_rows), its positions one further. The next call claims it
 * when it asks for exactly that step (the same sessions at the same epochs and positions, each passing the id
 * it was given); anything else drops it (a sync; its work is lost, and its KV writes sit at each session's
 * next position, which that session's next real step writes again before anything reads them). A loop that
 * ends pays one dropped step; a batch that changes every call (one-token classification) never speculates,
 * and one that changes every few steps stops after a few drops (ahead_drop). */

static int ahead_capable(const struct hearth_model *m) {
  const struct hb_ops *be = m->be;
  return be->read_start && be->read_finish && greedy_tail_capable(m) && be->capture_begin &&
         be->graph_launch;
}

/* with forward_mu held: waits for a step in flight and forgets it. A dropped step costs a whole step of the
 * device's time and a claimed one saves a few percent of one, so each drop makes the next speculation wait for a
 * longer streak (a server whose batch changes every few steps soon stops speculating) */
static void ahead_drop(struct hearth_model *m) {
  struct model_ahead *A = &m->ahead;
  if (!A->live) return;
  struct hearth_err e = {0};
  m->be->sync(m->bctx, &e);
  A->live = 0;
  A->n_dropped++;
  A->need = A->need >= 256 ? 1024 : 4 * A->need;
  A->claims = 0;
}

/* stages a decode batch of one token per session at each session's n_tokens (ids from tokens unless NULL) */
static struct hb_batch pack_decode(struct hearth_model *m, struct hearth_session **ss, int n, const int32_t *const *tokens) {
  const int MB = m->max_blocks_per_seq;
  for (int i = 0; i < n; i++) {
    const struct hearth_session *s = ss[i];
    memcpy(m->b_bt + (size_t)i * MB, s->blocks, (size_t)s->n_blocks * sizeof(int32_t));
    if (s->sblocks) kv_ring_stage(m->b_bt_swa + (size_t)i * MB, s->sblocks, s->n_blocks);
    if (tokens) m->b_ids[i] = tokens[i][0];
    m->b_pos[i] = s->n_tokens;
    m->b_seq[i] = i;
    m->b_len[i] = s->n_tokens + 1;
    m->b_out[i] = i;
  }
  struct hb_batch b = {
    .n_tokens = n, .n_seqs = n, .max_blocks = MB, .block_size = m->kv.block_size,
    .pos = m->b_pos, .seq = m->b_seq, .block_table = m->b_bt, .seq_len = m->b_len, .out_rows = m->b_out, .n_out = n,
    .block_table_swa = m->kv.swa.n_blocks ? m->b_bt_swa : NULL,
  };
  return b;
}

/* with forward_mu held, after this call's step (a greedy graph: greedy_tail) has been enqueued and its tokens
 * joined the sessions: enqueues the next step and records it in m->ahead; nothing when it cannot. The step
 * before left the next ids in scratch.ids and the positions and lengths advanced on the device, so the
 * batch is uploaded again only when a session enters a new KV block (its block table changes). */
static void ahead_enqueue(struct hearth_model *m, struct hearth_session **ss, int n) {
  const struct hb_ops *be = m->be;
  struct hb_ctx *c = m->bctx;
  struct model_ahead *A = &m->ahead;
  int32_t len[AHEAD_MAX] = {0};
  for (int i = 0; i < n; i++) len[i] = ss[i]->n_tokens + 1;
  struct model_graph *g = graph_slot(m, n, len, 1);
  struct hearth_err e = {0};
  if (!g->graph) return; /* (not captured yet, e.g. the step crosses attn_o's length: the next call runs it plainly) */
  int grew = 0;
  for (int i = 0; i < n; i++) { /* room for one more token; a new block stays with the session if the step is dropped */
    const int had = ss[i]->n_blocks;
    if (ss[i]->n_tokens + 1 > ss[i]->n_ctx || ensure_blocks(ss[i], ss[i]->n_tokens + 1, &e)) return;
    grew |= ss[i]->n_blocks != had;
  }
  if (grew) { /* host arrays equal to what decode_advance left, with the new block table */
    struct hb_batch b = pack_decode(m, ss, n, NULL);
    if (be->batch_upload(c, &b, &e)) {
      be->sync(c, &e);
      return;
    }
  }
  if (be->graph_launch(c, g->graph, &e)) {
    be->sync(c, &e); /* (a stale graph: the next plain step recaptures it) */
    return;
  }
  const int slot = A->next_slot;
  if (be->read_start(c, &m->scratch.gsel, 2 * n, slot)) return;
  A->next_slot ^= 1;
  A->live = 1;
  A->slot = slot;
  A->n = n;
  for (int i = 0; i < n; i++) {
    A->ss[i] = ss[i];
    A->epoch[i] = ss[i]->epoch;
    A->pos[i] = ss[i]->n_tokens;
  }
}

/* hearth_sessions_step_select for n sessions, one greedy token each, on a backend with ahead_capable */
static int step_ahead(struct hearth_session **ss, int n, const int32_t *const *tokens, const int *counts, int32_t *ids,
                      float *logprobs, int hold, struct hearth_err *err) {
  struct hearth_model *m = ss[0]->m;
  const struct hb_ops *be = m->be;
  struct hb_ctx *c = m->bctx;
  struct model_ahead *A = &m->ahead;
  int rc = check_step(ss, n, tokens, counts, err);
  if (rc) return rc;
  pthread_mutex_lock(&m->forward_mu);
  int claimed = A->live && A->n == n;
  for (int i = 0; i < n && claimed; i++)
    claimed = ss[i] == A->ss[i] && ss[i]->epoch == A->epoch[i] && ss[i]->n_tokens == A->pos[i] && tokens[i][0] == A->tok[i];
  if (!claimed) ahead_drop(m);
  else if (A->n_claimed++, ++A->claims == 32) {
    A->need = A->need > 4 ? A->need / 2 : 2;
    A->claims = 0;
  }
  A->live = 0;
  int same = n == A->prev_n;
  for (int i = 0; i < n && same; i++) same = ss[i] == A->prev[i];
  A->streak = same ? (A->streak < (1 << 30) ? A->streak + 1 : A->streak) : 1;
  A->prev_n = n;
  memcpy(A->prev, ss, (size_t)n * sizeof *ss);
  int slot = A->slot;
  if (!claimed) {
    rc = take_blocks(ss, n, counts, err); /* on failure it gave its blocks back */
    if (rc) {
      pthread_mutex_unlock(&m->forward_mu);
      return rc;
    }
    struct hb_batch b = pack_decode(m, ss, n, tokens);
    rc = enqueue_forward(m, &b, 0, 1, err); /* with greedy_tail (ahead_capable implies it) */
    if (!rc) {
      slot = A->next_slot;
      A->next_slot ^= 1;
      if (be->read_start(c, &m->scratch.gsel, 2 * n, slot)) rc = be->sync(c, err);
    }
    if (rc) {
      be->sync(c, &(struct hearth_err){0});
      pthread_mutex_unlock(&m->forward_mu);
      for (int i = 0; i < n; i++) truncate_to(ss[i], ss[i]->n_tokens); /* blocks taken for this step go back */
      return rc;
    }
  }
  for (int i = 0; i < n; i++) { /* this step's tokens join the sessions */
    ss[i]->tokens[ss[i]->n_tokens++] = tokens[i][0];
    ss[i]->has_out = 0;
  }
  if (A->streak >= A->need && !hold) ahead_enqueue(m, ss, n); /* hold: the caller will not step plainly next */
  rc = be->read_finish(c, slot, m->b_gsel, err);
  if (!rc)
    for (int i = 0; i < n; i++) {
      int32_t id;
      float lp;
      device_pick(m->b_gsel, n, i, &id, &lp);
      A->tok[i] = m->b_gsel[i]; /* the id the step ahead was fed (0 where -1 is reported): what claims it */
      ss[i]->greedy_id = id;
      ss[i]->greedy_logprob = lp;
      if (ids) ids[i] = id;
      if (logprobs) logprobs[i] = lp;
    }
  else
    ahead_drop(m);
  pthread_mutex_unlock(&m->forward_mu);
  for (int i = 0; i < n; i++) {
    if (rc) truncate_to(ss[i], ss[i]->n_tokens - 1); /* KV past the start is unreliable */
    else key_full_blocks(ss[i]);
  }
  return rc;
}

void hearth_model_ahead_counts(struct hearth_model *m, uint64_t *claimed, uint64_t *dropped) {
  pthread_mutex_lock(&m->forward_mu);
  if (claimed) *claimed = m->ahead.n_claimed;
  if (dropped) *dropped = m->ahead.n_dropped;
  pthread_mutex_unlock(&m->forward_mu);
}

/* every (n == 1, OUT_LOGITS or OUT_HIDDEN): also write the logits (hidden states) of every appended
 * position to every[i * width], a forward pass holding at most max_out of them */
/* key: register the full blocks the call completed in the prefix cache (not for tokens that are dropped
 * again: hearth_session_peek_logits) */
static int session_forward_k(struct hearth_session **ss, int n, const int32_t *const *tokens, const int *counts,
                             enum out_mode mode, const uint8_t *greedy, int want_lp, float *every, int key,
                             struct hearth_err *err) {
  int want_hidden = mode == OUT_HIDDEN;
  if (n <= 0) return 0;
  struct hearth_model *m = ss[0]->m;
  const double t_blk = prof_now();
  int crc = check_step(ss, n, tokens, counts, err);
  if (!crc) crc = take_blocks(ss, n, counts, err);
  prof_add(PROF_STEP_BLOCKS, t_blk, n);
  if (crc) return crc;
  int inv = want_hidden; /* embeddings are always batch-invariant */
  for (int i = 0; i < n; i++) inv |= ss[i]->invariant;
  inv = inv && m->be->set_row_invariant;
  const int T = m->scratch.max_tokens, MB = m->max_blocks_per_seq;
  int done[MODEL_MAX_SEQS];
  memset(done, 0, sizeof done);
  int outw = want_hidden ? m->cfg.hidden_size : m->cfg.vocab_size;
  int rc = 0, start[MODEL_MAX_SEQS];
  for (int i = 0; i < n; i++) start[i] = ss[i]->n_tokens;
  pthread_mutex_lock(&m->forward_mu); /* guards the model's batch staging (b_*, b_ids, b_outbuf) */
  ahead_drop(m); /* a decode loop was left: its step ahead is lost */
  m->ahead.streak = 0;
  m->ahead.prev_n = 0;
  if (inv) { /* every forward of this call, whoever else is in it (backend.h, set_row_invariant) */
    m->be->set_row_invariant(m->bctx, 1);
    m->row_invariant = 1;
  }
  int32_t *ids = m->b_ids;
  float *outbuf = m->b_outbuf;
  for (;;) {
    int nt = 0, nseq = 0, nout = 0, first = 0;
    int owner[MODEL_MAX_SEQS];
    for (int i = 0; i < n && nt < T; i++) {
      int left = counts[i] - done[i];
      if (left <= 0) continue;
      int take = left < T - nt ? left : T - nt;
      if (every && take > m->scratch.max_out) take = m->scratch.max_out;
      struct hearth_session *s = ss[i];
      /* ring_pass: the sliding blocks of this pass's positions (kv_ring.h) */
      if (s->sblocks && kv_ring_fill(&m->kv, s->sblocks, s->n_blocks, start[i], s->n_tokens, s->n_tokens + take)) {
        rc = ring_dry(s, err);
        break;
      }
      int sq = nseq++;
      memcpy(m->b_bt + (size_t)sq * MB, s->blocks, (size_t)s->n_blocks * sizeof(int32_t));
      if (s->sblocks) kv_ring_stage(m->b_bt_swa + (size_t)sq * MB, s->sblocks, s->n_blocks);
      first = done[i];
      for (int t = 0; t < take; t++) {
        int p = s->n_tokens + t;
        ids[nt] = tokens[i][done[i] + t];
        s->tokens[p] = ids[nt];
        m->b_pos[nt] = p;
        m->b_seq[nt] = sq;
        if (every) { m->b_out[nout] = nt; owner[nout] = i; nout++; }
        nt++;
      }
      done[i] += take;
      s->n_tokens += take;
      m->b_len[sq] = s->n_tokens;
      if (!every && done[i] == counts[i]) { m->b_out[nout] = nt - 1; owner[nout] = i; nout++; }
    }
    if (rc || nt == 0) break;
    /* a long prompt is several batches: the caller may give up between them (client gone) */
    if (ss[0]->abort_fn && n == 1 && ss[0]->abort_fn(ss[0]->abort_arg)) {
      rc = err_set(err, HEARTH_ERR_CANCELLED, "cancelled");
      break;
    }
    struct hb_batch b = {
      .n_tokens = nt, .n_seqs = nseq, .max_blocks = MB, .block_size = m->kv.block_size,
      .pos = m->b_pos, .seq = m->b_seq, .block_table = m->b_bt, .seq_len = m->b_len,
      .out_rows = m->b_out, .n_out = nout, .block_table_swa = m->kv.swa.n_blocks ? m->b_bt_swa : NULL,
    };
    int need_logits = 0, scored = 0; /* OUT_GREEDY: a session that wants its logits instead (greedy[i] == 0) */
    uint8_t rowg[MODEL_MAX_SEQS];
    struct hearth_row_score *rowsc[MODEL_MAX_SEQS]; /* OUT_GREEDY: the scores a session asked for (hearth_sessions_step_scored) */
    const struct hearth_sample_req *rowsm[MODEL_MAX_SEQS]; /* OUT_GREEDY: the draws asked for (hearth_sessions_step_sampled) */
    int sampled = 0;
    if (mode == OUT_GREEDY && greedy)
      for (int k = 0; k < nout; k++) {
        rowg[k] = greedy[owner[k]] != 0;
        need_logits |= !rowg[k];
      }
    for (int k = 0; k < nout; k++) {
      rowsc[k] = mode == OUT_GREEDY ? ss[owner[k]]->score : NULL;
      scored |= rowsc[k] != NULL;
      rowsm[k] = mode == OUT_GREEDY ? ss[owner[k]]->sample : NULL;
      sampled |= rowsm[k] != NULL;
    }
    rc = run_batch(m, &b, mode, need_logits, mode == OUT_GREEDY && greedy ? rowg : NULL, scored ? rowsc : NULL,
                   sampled ? rowsm : NULL, want_lp, err);
    if (rc) break;
    if (every) { /* every row: the caller's; the last one of the call: the session's logits */
      memcpy(every + (size_t)first * outw, outbuf, (size_t)nout * outw * sizeof(float));
      if (done[0] == counts[0]) {
        memcpy(ss[0]->out, outbuf + (size_t)(nout - 1) * outw, (size_t)outw * sizeof(float));
        ss[0]->has_out = 1;
      }
      continue;
    }
    for (int k = 0; k < nout; k++) {
      struct hearth_session *s = ss[owner[k]];
      if (mode == OUT_GREEDY) {
        s->greedy_id = m->b_gid[k];
        s->greedy_logprob = m->b_glp[k];
      }
      if (mode != OUT_GREEDY || !m->be->argmax || (greedy && !greedy[owner[k]])) {
        memcpy(s->out, outbuf + (size_t)k * outw, (size_t)outw * sizeof(float));
        s->has_out = 1;
      }
    }
  }
  if (inv) {
    m->be->set_row_invariant(m->bctx, 0);
    m->row_invariant = 0;
  }
  pthread_mutex_unlock(&m->forward_mu);
  if (rc) for (int i = 0; i < n; i++) truncate_to(ss[i], start[i]); /* KV past start is unreliable */
  if (!rc && !want_hidden && key) {
    const double t_key = prof_now();
    for (int i = 0; i < n; i++) key_full_blocks(ss[i]);
    prof_add(PROF_STEP_KEY, t_key, n);
  }
  return rc;
}

static int session_forward(struct hearth_session **ss, int n, const int32_t *const *tokens, const int *counts,
                           enum out_mode mode, const uint8_t *greedy, int want_lp, float *every,
                           struct hearth_err *err) {
  return session_forward_k(ss, n, tokens, counts, mode, greedy, want_lp, every, 1, err);
}

int hearth_sessions_step(struct hearth_session **sessions, int n_sessions, const int32_t *const *tokens,
                         const int *n_tokens, struct hearth_err *err) {
  return session_forward(sessions, n_sessions, tokens, n_tokens, OUT_LOGITS, NULL, 0, NULL, err);
}

/* hearth_sessions_step_scored and _sampled: sessions whose choice (a score, a draw) is made where the logits are */
static int step_chosen(struct hearth_session **sessions, int n_sessions, const int32_t *const *tokens,
                       const int *n_tokens, const uint8_t *greedy, struct hearth_row_score *const *scores,
                       const struct hearth_sample_req *const *samples, int32_t *ids, float *logprobs,
                       struct hearth_err *err) {
  int any = 0;
  for (int i = 0; i < n_sessions; i++)
    any |= ((scores && scores[i]) || (samples && samples[i])) && n_tokens[i] > 0;
  if (!any) return hearth_sessions_step_select(sessions, n_sessions, tokens, n_tokens, greedy, ids, logprobs, err);
  if (n_sessions > sessions[0]->m->max_seqs)
    return err_set(err, HEARTH_ERR_ARG, "at most %d sessions per step", sessions[0]->m->max_seqs);
  uint8_t g[MODEL_MAX_SEQS]; /* a scored or sampled session is chosen for where its logits are, like a greedy one */
  for (int i = 0; i < n_sessions; i++) {
    struct hearth_row_score *sc = scores ? scores[i] : NULL;
    const struct hearth_sample_req *sm = samples ? samples[i] : NULL;
    if (sc && sm) return err_set(err, HEARTH_ERR_ARG, "session %d is both scored and sampled in one step", i);
    if (sm && !sm->smp) return err_set(err, HEARTH_ERR_ARG, "session %d: a sample request without a sampler", i);
    if (sc && (sc->k < 0 || sc->k > HEARTH_SCORE_TOPK || sc->n_ids < 0 || sc->n_ids > HEARTH_SCORE_IDS))
      return err_set(err, HEARTH_ERR_ARG, "row score: k %d or n_ids %d out of range", sc->k, sc->n_ids);
    for (int j = 0; sc && j < sc->n_ids; j++)
      if (sc->ids[j] < 0 || sc->ids[j] >= sessions[i]->m->cfg.vocab_size)
        return err_set(err, HEARTH_ERR_ARG, "row score: id %d out of range", sc->ids[j]);
    g[i] = (uint8_t)(!greedy || greedy[i] || sc || sm);
  }
  for (int i = 0; i < n_sessions; i++) {
    sessions[i]->score = n_tokens[i] > 0 && scores ? scores[i] : NULL;
    sessions[i]->sample = n_tokens[i] > 0 && samples ? samples[i] : NULL;
  }
  for (int i = 0; i < n_sessions; i++) if (g[i]) sessions[i]->has_out = 0;
  int rc = session_forward(sessions, n_sessions, tokens, n_tokens, OUT_GREEDY, g, logprobs != NULL, NULL, err);
  for (int i = 0; i < n_sessions; i++) {
    sessions[i]->score = NULL;
    sessions[i]->sample = NULL;
  }
  if (rc) return rc;
  for (int i = 0; i < n_sessions; i++) {
    if (!g[i] || n_tokens[i] == 0) continue; /* logits wanted, or no new token: no choice made */
    if (ids) ids[i] = sessions[i]->greedy_id;
    if (logprobs && !(samples && samples[i])) logprobs[i] = sessions[i]->greedy_logprob;
  }
  return 0;
}

int hearth_sessions_step_scored(struct hearth_session **sessions, int n_sessions, const int32_t *const *tokens,
                                const int *n_tokens, const uint8_t *greedy, struct hearth_row_score *const *scores,
                                int32_t *ids, float *logprobs, struct hearth_err *err) {
  return step_chosen(sessions, n_sessions, tokens, n_tokens, greedy, scores, NULL, ids, logprobs, err);
}

int hearth_sessions_step_sampled(struct hearth_session **sessions, int n_sessions, const int32_t *const *tokens,
                                 const int *n_tokens, const uint8_t *greedy, struct hearth_row_score *const *scores,
                                 const struct hearth_sample_req *const *samples, int32_t *ids, float *logprobs,
                                 struct hearth_err *err) {
  return step_chosen(sessions, n_sessions, tokens, n_tokens, greedy, scores, samples, ids, logprobs, err);
}

int hearth_sessions_step_select(struct hearth_session **sessions, int n_sessions, const int32_t *const *tokens,
                                const int *n_tokens, const uint8_t *greedy, int32_t *ids, float *logprobs,
                                struct hearth_err *err) {
  int one = n_sessions > 0 && n_sessions <= AHEAD_MAX && n_sessions < MODEL_MAX_GRAPHS &&
            n_sessions <= sessions[0]->m->max_seqs && ahead_capable(sessions[0]->m);
  for (int i = 0; i < n_sessions && one; i++) one = n_tokens[i] == 1 && (!greedy || greedy[i]) && !sessions[i]->invariant;
  if (one) return step_ahead(sessions, n_sessions, tokens, n_tokens, ids, logprobs, 0, err); /* a decode loop's step */
  int any = !greedy;
  for (int i = 0; i < n_sessions && !any; i++) any = greedy[i] != 0;
  if (!any) return session_forward(sessions, n_sessions, tokens, n_tokens, OUT_LOGITS, NULL, 0, NULL, err);
  for (int i = 0; i < n_sessions; i++) if (!greedy || greedy[i]) sessions[i]->has_out = 0;
  int rc = session_forward(sessions, n_sessions, tokens, n_tokens, OUT_GREEDY, greedy, logprobs != NULL, NULL, err);
  if (rc) return rc;
  for (int i = 0; i < n_sessions; i++) {
    if ((greedy && !greedy[i]) || n_tokens[i] == 0) continue; /* logits wanted, or no new token: no choice made */
    if (ids) ids[i] = sessions[i]->greedy_id;
    if (logprobs) logprobs[i] = sessions[i]->greedy_logprob;
  }
  return 0;
}

int hearth_sessions_step_greedy(struct hearth_session **sessions, int n_sessions, const int32_t *const *tokens,
                                const int *n_tokens, int32_t *ids, float *logprobs, struct hearth_err *err) {
  return hearth_sessions_step_select(sessions, n_sessions, tokens, n_tokens, NULL, ids, logprobs, err);
}

int session_ahead_live(const struct hearth_session *s) {
  struct hearth_model *m = s->m;
  const struct model_ahead *A = &m->ahead;
  int live = 0;
  pthread_mutex_lock(&m->forward_mu); /* (another thread may step another session of the model) */
  for (int i = 0; A->live && i < A->n && !live; i++) live = A->ss[i] == s;
  pthread_mutex_unlock(&m->forward_mu);
  return live;
}

/* (called only where a step ahead of s is in flight: the backend is ahead_capable and s not row-invariant) */
int session_step_hold(struct hearth_session *s, int32_t token, int32_t *id, float *lp, struct hearth_err *err) {
  const int32_t *t = &token;
  const int one = 1;
  return step_ahead(&s, 1, &t, &one, id, lp, 1, err);
}

int hearth_session_append(struct hearth_session *s, const int32_t *tokens, int n, struct hearth_err *err) {
  if (n <= 0) return err_set(err, HEARTH_ERR_ARG, "append needs at least one token");
  return session_forward(&s, 1, &tokens, &n, OUT_LOGITS, NULL, 0, NULL, err);
}

int hearth_session_append_logits(struct hearth_session *s, const int32_t *tokens, int n, float *logits,
                                 struct hearth_err *err) {
  if (n <= 0) return err_set(err, HEARTH_ERR_ARG, "append needs at least one token");
  if (!logits) return err_set(err, HEARTH_ERR_ARG, "append_logits needs an output buffer");
  if (s->m->cfg.is_embedding) return err_set(err, HEARTH_ERR_ARG, "an embedding model has no logits");
  return session_forward(&s, 1, &tokens, &n, OUT_LOGITS, NULL, 0, logits, err);
}

int hearth_session_peek_logits(struct hearth_session *s, const int32_t *tokens, int n, float *logits,
                               struct hearth_err *err) {
  if (n <= 0) return err_set(err, HEARTH_ERR_ARG, "peek needs at least one token");
  if (!logits) return err_set(err, HEARTH_ERR_ARG, "peek_logits needs an output buffer");
  if (s->m->cfg.is_embedding) return err_set(err, HEARTH_ERR_ARG, "an embedding model has no logits");
  const int held = s->n_tokens;
  /* not keyed: the block that holds position `held` stays this session's own (a block is shared only
   * once keyed or attached, and both need it full), so the cut below lands exactly at `held` */
  int rc = session_forward_k(&s, 1, &tokens, &n, OUT_LOGITS, NULL, 0, logits, 0, err);
  if (!rc) truncate_to(s, held);
  return rc;
}

int hearth_session_prepare(struct hearth_session *s, const int32_t *tokens, int n, struct hearth_err *err) {
  if (n <= 0) return err_set(err, HEARTH_ERR_ARG, "sync needs at least one token");
  if (n > s->n_ctx) return err_set(err, HEARTH_ERR_CTX_FULL, "%d tokens exceed n_ctx %d", n, s->n_ctx);
  int common = 0;
  while (common < s->n_tokens && common < n && s->tokens[common] == tokens[common]) common++;
  if (common == n) common = n - 1; /* re-evaluate the last position so its logits are current */
  truncate_to(s, common);
  attach_cached(s, tokens, n);
  s->n_reused = s->n_tokens;
  return s->n_tokens;
}

int hearth_session_n_reused(const struct hearth_session *s) { return s->n_reused; }

int hearth_session_sync(struct hearth_session *s, const int32_t *tokens, int n, struct hearth_err *err) {
  int common = hearth_session_prepare(s, tokens, n, err);
  if (common < 0) return common;
  int rest = n - common;
  const int32_t *p = tokens + common;
  return session_forward(&s, 1, &p, &rest, OUT_LOGITS, NULL, 0, NULL, err);
}

int hearth_session_embed(struct hearth_session *s, const int32_t *tokens, int n, float *out, struct hearth_err *err) {
  if (n <= 0) return err_set(err, HEARTH_ERR_ARG, "embed needs at least one token");
  truncate_to(s, 0);
  const enum hearth_pooling pool = s->m->info.pooling;
  const int d = s->m->cfg.hidden_size;
  /* attention is causal: the first position's hidden state depends on the first token alone */
  if (pool == HEARTH_POOL_CLS) n = 1;
  float *rows = NULL; /* mean pooling: every position's final hidden state */
  if (pool == HEARTH_POOL_MEAN && n > 1 && !(rows = malloc((size_t)n * (size_t)d * sizeof *rows)))
    return err_set(err, HEARTH_ERR_NOMEM, "out of memory");
  int rc = session_forward(&s, 1, &tokens, &n, OUT_HIDDEN, NULL, 0, rows, err);
  if (!rc) {
    double ss = 0;
    for (int i = 0; i < d; i++) {
      double v = s->out[i]; /* the last position (the only one for cls) */
      if (rows) {
        v = 0;
        for (int t = 0; t < n; t++) v += rows[(size_t)t * d + i];
        v /= n;
      }
      out[i] = (float)v;
      ss += v * v;
    }
    double norm = sqrt(ss);
    if (norm < 1e-12) norm = 1e-12;
    for (int i = 0; i < d; i++) out[i] = (float)(out[i] / norm);
  }
  free(rows);
  truncate_to(s, 0); /* embeddings do not keep their KV */
  return rc;
}

int session_embed_last(struct hearth_session **ss, int n, const int32_t *const *tokens, const int *counts,
                       float *hidden, struct hearth_err *err) {
  for (int i = 0; i < n; i++) truncate_to(ss[i], 0);
  int rc = session_forward(ss, n, tokens, counts, OUT_HIDDEN, NULL, 0, NULL, err);
  const int d = n > 0 ? ss[0]->m->cfg.hidden_size : 0;
  for (int i = 0; i < n; i++) {
    if (!rc) memcpy(hidden + (size_t)i * d, ss[i]->out, (size_t)d * sizeof *hidden);
    truncate_to(ss[i], 0); /* embeddings do not keep their KV */
  }
  return rc;
}

/* ---- verifying a draft (runtime/session_verify.h) ----------------------------------------------------- */

int session_verify_rows(const struct hearth_session *s) {
  const struct model_scratch *sc = &s->m->scratch;
  const int r = sc->max_out < sc->max_tokens ? sc->max_out : sc->max_tokens;
  /* step twins (CUDA): 8 rows, what one decode GEMV launch holds (more would read the weights twice) */
  return s->m->be->set_step_twins && r > 8 ? 8 : r;
}

int session_is_invariant(const struct hearth_session *s) { return s->invariant; }

int session_verify_span(const struct hearth_session *s) {
  const struct hearth_model *m = s->m;
  const int r = session_verify_rows(s);
  /* rows alike in any batch, or every row past attn_o's range */
  if (!m->be->set_step_twins || !short_step(m, 1, s->n_tokens + 1)) return r;
  /* one-token steps on attn_o: the rows whose keys stay within its range (their twins are attn_o's rows), never rows
   * on both sides of it (a verify's attention is one kind of launch) */
  const int lim = m->be->attn_o_max_len(m->bctx, m->cfg.head_dim) - s->n_tokens;
  return lim < r ? lim : r;
}
struct hearth_model *session_model(const struct hearth_session *s) { return s->m; }
int session_n_ctx(const struct hearth_session *s) { return s->n_ctx; }

int session_verify(struct hearth_session **ss, int n, const int32_t *const *tokens, const int *counts, int32_t *ids,
                   float *lps, struct hearth_err *err) {
  if (n <= 0) return 0;
  struct hearth_model *m = ss[0]->m;
  int total = 0;
  for (int i = 0; i < n; i++) {
    if (counts[i] < 1) return err_set(err, HEARTH_ERR_ARG, "verify: session %d has no token", i);
    if (ss[i]->invariant) return err_set(err, HEARTH_ERR_ARG, "verify: session %d is row-invariant", i);
    total += counts[i];
  }
  if (total > session_verify_rows(ss[0]))
    return err_set(err, HEARTH_ERR_ARG, "verify: %d rows exceed one forward's %d", total, session_verify_rows(ss[0]));
  const int twins = m->be->set_step_twins != NULL; /* rows as one-token steps: one sequence at a time */
  if (twins && (n != 1 || counts[0] > session_verify_span(ss[0])))
    return err_set(err, HEARTH_ERR_ARG, "verify: this backend verifies one session at a time, within session_verify_span");
  int rc = check_step(ss, n, tokens, counts, err);
  if (!rc) rc = take_blocks(ss, n, counts, err);
  if (rc) return rc;
  const int MB = m->max_blocks_per_seq;
  int start[MODEL_MAX_SEQS];
  pthread_mutex_lock(&m->forward_mu);
  /* A verify of the session a decode loop is stepping, with no step of it in flight (speculate.c holds one back
   * before it verifies), goes on with the loop: the step after it may be enqueued ahead at once. Anything else
   * leaves the loop, as session_forward_k: a step ahead is lost */
  const struct model_ahead *A = &m->ahead;
  if (!(n == 1 && !A->live && A->prev_n == 1 && A->prev[0] == ss[0])) {
    ahead_drop(m);
    m->ahead.streak = 0;
    m->ahead.prev_n = 0;
  }
  int nt = 0;
  for (int i = 0; i < n; i++) { /* every position is an output row: the draft is checked at each */
    struct hearth_session *s = ss[i];
    start[i] = s->n_tokens;
    memcpy(m->b_bt + (size_t)i * MB, s->blocks, (size_t)s->n_blocks * sizeof(int32_t));
    for (int t = 0; t < counts[i]; t++, nt++) {
      m->b_ids[nt] = s->tokens[s->n_tokens + t] = tokens[i][t];
      m->b_pos[nt] = s->n_tokens + t;
      m->b_seq[nt] = i;
      m->b_out[nt] = nt;
    }
    s->n_tokens += counts[i];
    s->has_out = 0;
    m->b_len[i] = s->n_tokens;
  }
  struct hb_batch b = {
    .n_tokens = nt, .n_seqs = n, .max_blocks = MB, .block_size = m->kv.block_size,
    .pos = m->b_pos, .seq = m->b_seq, .block_table = m->b_bt, .seq_len = m->b_len,
    .out_rows = m->b_out, .n_out = nt,
  };
  /* the greedy selection of a one-token step, row by row (run_batch_outputs) */
  const int on = twins && !m->be->set_step_twins(m->bctx, 1);
  if (twins && !on) {
    m->info.can_speculate = 0;
    rc = err_set(err, HEARTH_ERR_UNSUPPORTED, "verify: the backend has no step twins in its mode; speculation is off");
  }
  if (!rc) rc = run_batch(m, &b, OUT_GREEDY, 0, NULL, NULL, NULL, lps != NULL, err);
  if (on) {
    const int bad = m->be->set_step_twins(m->bctx, 0);
    if (!rc && bad) { /* its rows are not the one-token steps' bits: never again on this model */
      m->info.can_speculate = 0;
      rc = err_set(err, HEARTH_ERR_UNSUPPORTED, "verify: %d ops had no one-token form; speculation is off", bad);
    }
  }
  if (!rc)
    for (int r = 0; r < nt; r++) {
      ids[r] = m->b_gid[r];
      if (lps) lps[r] = m->b_glp[r];
    }
  pthread_mutex_unlock(&m->forward_mu);
  if (rc) for (int i = 0; i < n; i++) truncate_to(ss[i], start[i]); /* KV past start is unreliable */
  return rc;
}

void session_keep(struct hearth_session *s, int n) {
  /* the cut lands exactly at n: blocks past the last keyed one are this session's own (never shared) */
  truncate_to(s, n);
  key_full_blocks(s);
}
