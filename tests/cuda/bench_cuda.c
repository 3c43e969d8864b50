/* tests/cuda/bench_cuda.c — decode/prefill micro-benchmark of the CUDA backend with the real
 * Qwen2.5-3B / 0.5B shapes and random int4 weights (same work as real weights), built from the op
 * table exactly as model/blocks.c calls it ("ops" variant), and from the fused entry points of
 * cuda_backend.h ("fused" variant: 6 launches per layer). Decode steps are captured into a CUDA graph
 * once and replayed; the next token id stays on the device (argmax -> embed); per step the host
 * uploads the batch (positions) and reads back 4 bytes per sequence.
 *
 * usage: bench_cuda [3b|0.5b|gemv|breakdown|breakdown0.5b|all]   prints one markdown table per model (W1/W2 rows), plus a
 * per-matrix GEMV bandwidth table. Not a test: it times, and only sanity-checks for NaN-free ids. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"

static const struct hb_ops *G = &hb_cuda_ops;
static struct hb_ctx *gc;
static struct hearth_err err;

#define DIE(...) do { fprintf(stderr, __VA_ARGS__); fprintf(stderr, " [%s]\n", err.msg); exit(1); } while (0)

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t rng = 88172645463325252ull;
static uint32_t r32(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (uint32_t)(rng >> 16); }

struct cfg {
  const char *name;
  int H, L, nh, nkv, hd, F, V;
  double floor_tg, target_tg; /* tok/s */
};
static const struct cfg CFG_3B = {"Qwen2.5-3B", 2048, 36, 16, 2, 128, 11008, 151936, 2684, 930};
static const struct cfg CFG_05B = {"Qwen2.5-0.5B", 896, 24, 14, 2, 64, 4864, 151936, 16759, 1840};

struct layer {
  struct hb_tensor wq, wk, wv, bq, bk, bv, wo, wg, wu, wd, an, fn;
  struct hb_kv_layer kv;
};

struct model {
  struct cfg c;
  struct layer *l;
  struct hb_tensor emb, onorm;
  struct hb_tensor x, xn, q, k, v, a, o, g, u, sel, logits, ids, lp;
  int maxT, maxOut, bs, max_blocks, n_seqs_cap;
  uint64_t weight_bytes;
};

static void up_q4(struct hb_tensor *t, int rows, int cols, uint64_t *bytes) {
  size_t qb = (size_t)rows * cols / 2, sb = (size_t)rows * (cols / 128);
  uint8_t *q = malloc(qb);
  uint16_t *s = malloc(sb * 2);
  for (size_t i = 0; i < qb; i += 4) { uint32_t v = r32(); memcpy(q + i, &v, qb - i < 4 ? qb - i : 4); }
  for (size_t i = 0; i < sb; i++) s[i] = (uint16_t)(0x2000 + (r32() % 0x0800)) | (uint16_t)((r32() & 1) << 15); /* ~0.008..0.03 */
  struct hb_host_weight hw = {HB_Q4, rows, cols, q, s, NULL};
  if (G->weight_upload(gc, t, &hw, &err)) DIE("upload q4 %dx%d", rows, cols);
  *bytes += qb + sb * 2;
  free(q); free(s);
}
static void up_f32(struct hb_tensor *t, int n, float base, float amp) {
  float *h = malloc((size_t)n * 4);
  for (int i = 0; i < n; i++) h[i] = base + amp * ((float)(r32() % 2001) / 1000.0f - 1.0f);
  struct hb_host_weight hw = {HB_F32, 1, n, h, NULL, NULL};
  if (G->weight_upload(gc, t, &hw, &err)) DIE("upload f32");
  free(h);
}
static void act(struct hb_tensor *t, enum hb_dtype dt, int rows, int cols) {
  if (G->alloc(gc, t, dt, rows, cols, &err)) DIE("alloc %dx%d", rows, cols);
}

static void model_init(struct model *m, const struct cfg *c, int maxT, int n_seqs_cap, int max_ctx) {
  memset(m, 0, sizeof *m);
  m->c = *c;
  m->maxT = maxT;
  m->maxOut = n_seqs_cap;
  m->bs = 16;
  m->max_blocks = (max_ctx + 15) / 16;
  m->n_seqs_cap = n_seqs_cap;
  int kvw = c->nkv * c->hd;
  m->l = calloc((size_t)c->L, sizeof *m->l);
  double t0 = now();
  for (int i = 0; i < c->L; i++) {
    struct layer *L = &m->l[i];
    up_q4(&L->wq, c->nh * c->hd, c->H, &m->weight_bytes);
    up_q4(&L->wk, kvw, c->H, &m->weight_bytes);
    up_q4(&L->wv, kvw, c->H, &m->weight_bytes);
    up_q4(&L->wo, c->H, c->nh * c->hd, &m->weight_bytes);
    up_q4(&L->wg, c->F, c->H, &m->weight_bytes);
    up_q4(&L->wu, c->F, c->H, &m->weight_bytes);
    up_q4(&L->wd, c->H, c->F, &m->weight_bytes);
    up_f32(&L->bq, c->nh * c->hd, 0.0f, 0.1f);
    up_f32(&L->bk, kvw, 0.0f, 0.1f);
    up_f32(&L->bv, kvw, 0.0f, 0.1f);
    up_f32(&L->an, c->H, 1.0f, 0.2f);
    up_f32(&L->fn, c->H, 1.0f, 0.2f);
    int rows = n_seqs_cap * m->max_blocks * m->bs;
    act(&L->kv.k, HB_F32, rows, kvw);
    act(&L->kv.v, HB_F32, rows, kvw);
    L->kv.n_kv_heads = c->nkv;
    L->kv.head_dim = c->hd;
  }
  up_q4(&m->emb, c->V, c->H, &m->weight_bytes);
  up_f32(&m->onorm, c->H, 1.0f, 0.2f);
  act(&m->x, HB_F32, maxT, c->H);
  act(&m->xn, HB_F32, maxT, c->H);
  act(&m->q, HB_F32, maxT, c->nh * c->hd);
  act(&m->k, HB_F32, maxT, kvw);
  act(&m->v, HB_F32, maxT, kvw);
  act(&m->a, HB_F32, maxT, c->nh * c->hd);
  act(&m->o, HB_F32, maxT, c->H);
  act(&m->g, HB_F32, maxT, c->F);
  act(&m->u, HB_F32, maxT, c->F);
  act(&m->sel, HB_F32, n_seqs_cap, c->H);
  act(&m->logits, HB_F32, n_seqs_cap, c->V);
  act(&m->ids, HB_I32, maxT, 1);
  act(&m->lp, HB_F32, n_seqs_cap, 1);
  char buf[512];
  hb_cuda_mem_report(gc, buf, sizeof buf);
  printf("%s: %.3f GB int4 weights uploaded in %.1f s; KV %d seqs x %d tokens\n  %s\n", c->name,
         m->weight_bytes / 1e9, now() - t0, n_seqs_cap, m->max_blocks * m->bs, buf);
}

static void model_free(struct model *m) {
  for (int i = 0; i < m->c.L; i++) {
    struct layer *L = &m->l[i];
    struct hb_tensor *ts[] = {&L->wq, &L->wk, &L->wv, &L->bq, &L->bk, &L->bv, &L->wo, &L->wg, &L->wu, &L->wd,
                              &L->an, &L->fn, &L->kv.k, &L->kv.v};
    for (size_t j = 0; j < sizeof ts / sizeof ts[0]; j++) G->release(gc, ts[j]);
  }
  struct hb_tensor *ts[] = {&m->emb, &m->onorm, &m->x, &m->xn, &m->q, &m->k, &m->v, &m->a, &m->o, &m->g, &m->u,
                            &m->sel, &m->logits, &m->ids, &m->lp};
  for (size_t j = 0; j < sizeof ts / sizeof ts[0]; j++) G->release(gc, ts[j]);
  free(m->l);
}

/* per-op timing marks (bench_cuda breakdown): MARK(name) after each op when g_mark >= 0 */
static int g_mark = -1;
static const char *g_mark_name[1024];
#define MARK(name) do { if (g_mark >= 0 && g_mark < 1024) { g_mark_name[g_mark] = (name); hb_cuda_mark(gc, g_mark++); } } while (0)

static struct hb_tensor rv(const struct hb_tensor *t, int n) { struct hb_tensor v = *t; v.rows = n; v.bytes = 0; return v; }

/* one forward pass over the batch; ids tensor holds the input ids (n rows) and receives the
 * chosen ids of the n_out output rows (rows 0..n_out-1) */
static void forward(struct model *m, struct hb_batch *b, int fused) {
  const struct cfg *c = &m->c;
  int n = b->n_tokens;
  struct hb_tensor x = rv(&m->x, n), xn = rv(&m->xn, n), q = rv(&m->q, n), k = rv(&m->k, n), v = rv(&m->v, n),
                   a = rv(&m->a, n), o = rv(&m->o, n), g = rv(&m->g, n), u = rv(&m->u, n);
  struct hb_attn_params ap = {c->nh, c->nkv, c->hd, 1.0f / sqrtf((float)c->hd), 0, 0.0f};
  MARK("start");
  G->embed(gc, &x, &m->emb, &m->ids, n, 1.0f);
  MARK("embed");
  for (int i = 0; i < c->L; i++) {
    struct layer *L = &m->l[i];
    if (fused) {
      struct hb_tensor *o3[3] = {&q, &k, &v};
      const struct hb_tensor *w3[3] = {&L->wq, &L->wk, &L->wv}, *b3[3] = {&L->bq, &L->bk, &L->bv};
      hb_cuda_norm_matmul(gc, &x, &L->an, 1e-6f, 0.0f, 3, o3, w3, b3, n, 0);
      MARK("norm+qkv gemv");
      hb_cuda_rope_kv_write(gc, &q, &k, &v, &L->kv, b, c->nh, c->hd, 1000000.0f, NULL, NULL, 0.0f);
      MARK("rope+kv_write");
      G->attention(gc, &a, &q, &L->kv, b, &ap);
      MARK("attention");
      struct hb_tensor *o1[1] = {&x};
      const struct hb_tensor *w1[1] = {&L->wo};
      hb_cuda_norm_matmul(gc, &a, NULL, 0.0f, 0.0f, 1, o1, w1, NULL, n, 1);
      MARK("o gemv+residual");
      struct hb_tensor *o2[2] = {&g, &u};
      const struct hb_tensor *w2[2] = {&L->wg, &L->wu};
      hb_cuda_norm_matmul(gc, &x, &L->fn, 1e-6f, 0.0f, 2, o2, w2, NULL, n, 0);
      MARK("norm+gate/up gemv");
      hb_cuda_silu_matmul(gc, &g, &u, &x, &L->wd, n, 1);
      MARK("silu+down gemv+residual");
    } else {
      G->rmsnorm(gc, &xn, &x, &L->an, 1e-6f, 0.0f);
      MARK("rmsnorm");
      G->matmul(gc, &q, &xn, &L->wq, &L->bq, n);
      MARK("q/k/v matmul");
      G->matmul(gc, &k, &xn, &L->wk, &L->bk, n);
      MARK("q/k/v matmul");
      G->matmul(gc, &v, &xn, &L->wv, &L->bv, n);
      MARK("q/k/v matmul");
      G->rope_neox(gc, &q, b, c->nh, c->hd, c->hd, 1000000.0f);
      MARK("rope");
      G->rope_neox(gc, &k, b, c->nkv, c->hd, c->hd, 1000000.0f);
      MARK("rope");
      G->kv_write(gc, &L->kv, &k, &v, b);
      MARK("kv_write");
      G->attention(gc, &a, &q, &L->kv, b, &ap);
      MARK("attention");
      G->matmul(gc, &o, &a, &L->wo, NULL, n);
      MARK("o matmul");
      G->add(gc, &x, &o, n);
      MARK("add");
      G->rmsnorm(gc, &xn, &x, &L->fn, 1e-6f, 0.0f);
      MARK("rmsnorm");
      G->matmul(gc, &g, &xn, &L->wg, NULL, n);
      MARK("gate/up matmul");
      G->matmul(gc, &u, &xn, &L->wu, NULL, n);
      MARK("gate/up matmul");
      G->silu_mul(gc, &g, &g, &u, n);
      MARK("silu_mul");
      G->matmul(gc, &o, &g, &L->wd, NULL, n);
      MARK("down matmul");
      G->add(gc, &x, &o, n);
      MARK("add");
    }
  }
  struct hb_tensor sel = rv(&m->sel, b->n_out), lg = rv(&m->logits, b->n_out);
  if (fused) {
    G->gather_rows(gc, &sel, &x, b);
    MARK("head: gather/norm");
    struct hb_tensor *o1[1] = {&lg};
    const struct hb_tensor *w1[1] = {&m->emb};
    hb_cuda_norm_matmul(gc, &sel, &m->onorm, 1e-6f, 0.0f, 1, o1, w1, NULL, b->n_out, 0);
    MARK("head: lm_head");
  } else {
    G->rmsnorm(gc, &xn, &x, &m->onorm, 1e-6f, 0.0f);
    MARK("head: gather/norm");
    G->gather_rows(gc, &sel, &xn, b);
    MARK("head: gather/norm");
    G->matmul(gc, &lg, &sel, &m->emb, NULL, b->n_out);
    MARK("head: lm_head");
  }
  hb_cuda_argmax(gc, &lg, b->n_out, &m->ids, &m->lp);
  MARK("head: argmax");
}

struct bb {
  struct hb_batch b;
  int32_t *pos, *seq, *bt, *seq_len, *out;
};
static void bb_init(struct bb *t, struct model *m) {
  memset(t, 0, sizeof *t);
  t->pos = calloc((size_t)m->maxT, 4); t->seq = calloc((size_t)m->maxT, 4); t->out = calloc((size_t)m->maxT, 4);
  t->seq_len = calloc((size_t)m->n_seqs_cap, 4);
  t->bt = calloc((size_t)m->n_seqs_cap * m->max_blocks, 4);
  for (int i = 0; i < m->n_seqs_cap * m->max_blocks; i++) t->bt[i] = i; /* sequence s owns its own blocks */
  t->b.max_blocks = m->max_blocks; t->b.block_size = m->bs;
  t->b.pos = t->pos; t->b.seq = t->seq; t->b.block_table = t->bt; t->b.seq_len = t->seq_len; t->b.out_rows = t->out;
}
static void bb_free(struct bb *t) { free(t->pos); free(t->seq); free(t->out); free(t->seq_len); free(t->bt); }

/* prefill of n tokens of sequence s from position p0 through the op table (fused 0) or the fused entry
 * points (1: for n > 8 one GEMM per norm+QKV / norm+gate/up, residual adds in the GEMM epilogue);
 * returns seconds (synchronised) */
static double prefill(struct model *m, struct bb *t, int s, int p0, int n, int fused) {
  int32_t *ids = malloc((size_t)n * 4);
  for (int i = 0; i < n; i++) { ids[i] = (int32_t)(r32() % (uint32_t)m->c.V); t->pos[i] = p0 + i; t->seq[i] = 0; }
  /* one-sequence batch: map sequence s to batch sequence 0 through its own block-table row */
  int32_t *row = t->bt + (size_t)s * m->max_blocks;
  struct hb_batch b = t->b;
  b.n_tokens = n; b.n_seqs = 1; b.block_table = row; b.n_out = 1;
  t->seq_len[0] = p0 + n;
  t->out[0] = n - 1;
  if (G->sync(gc, &err)) DIE("sync");
  double t0 = now();
  G->write(gc, &m->ids, 0, n, ids);
  if (G->batch_upload(gc, &b, &err)) DIE("batch_upload");
  forward(m, &b, fused);
  int32_t id;
  G->read(gc, &m->ids, 0, 1, &id);
  if (G->sync(gc, &err)) DIE("prefill %d", n);
  double dt = now() - t0;
  free(ids);
  return dt;
}

/* n_steps decode steps of B sequences, each at context ctx0 + step; graph captured at step 1 */
static double decode(struct model *m, struct bb *t, int B, int ctx0, int n_steps, int fused, int use_graph) {
  struct hb_cuda_graph *gr = NULL;
  int32_t *ids = malloc((size_t)B * 4);
  for (int i = 0; i < B; i++) ids[i] = (int32_t)(r32() % (uint32_t)m->c.V);
  G->write(gc, &m->ids, 0, B, ids);
  t->b.n_tokens = B; t->b.n_seqs = B; t->b.n_out = B;
  for (int i = 0; i < B; i++) { t->seq[i] = i; t->out[i] = i; }
  double t0 = 0;
  for (int st = 0; st < n_steps + 2; st++) {
    if (st == 2) { if (G->sync(gc, &err)) DIE("sync"); t0 = now(); }
    for (int i = 0; i < B; i++) { t->pos[i] = ctx0 + st; t->seq_len[i] = ctx0 + st + 1; }
    if (G->batch_upload(gc, &t->b, &err)) DIE("batch_upload");
    if (!use_graph || st == 0) {
      forward(m, &t->b, fused);
    } else {
      if (!gr) {
        if (hb_cuda_capture_begin(gc, &err)) DIE("capture_begin");
        forward(m, &t->b, fused);
        if (hb_cuda_capture_end(gc, &gr, &err)) DIE("capture_end");
      }
      if (hb_cuda_graph_launch(gc, gr, &err)) DIE("graph_launch");
    }
    if (G->read(gc, &m->ids, 0, B, ids)) { G->sync(gc, &err); DIE("read ids"); }
  }
  double dt = now() - t0;
  for (int i = 0; i < B; i++)
    if (ids[i] < 0 || ids[i] >= m->c.V) { fprintf(stderr, "bad id %d\n", ids[i]); exit(1); }
  hb_cuda_graph_free(gr);
  free(ids);
  return dt;
}

static int cmpd(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return x < y ? -1 : x > y; }
static double median(double *v, int n) { qsort(v, (size_t)n, sizeof *v, cmpd); return v[n / 2]; }

/* the device's own time per decode step: the step's graph replayed n_steps times back to back (no upload, no read,
 * one sync at the end; positions stay put, which changes no kernel's work) */
static double decode_replay(struct model *m, struct bb *t, int ctx0, int n_steps, int prof) {
  struct hb_cuda_graph *gr = NULL;
  t->b.n_tokens = 1; t->b.n_seqs = 1; t->b.n_out = 1;
  t->seq[0] = 0; t->out[0] = 0; t->pos[0] = ctx0; t->seq_len[0] = ctx0 + 1;
  if (G->batch_upload(gc, &t->b, &err)) DIE("batch_upload");
  forward(m, &t->b, 1); /* once uncaptured: scratch sized */
  if (hb_cuda_capture_begin(gc, &err)) DIE("capture_begin");
  forward(m, &t->b, 1);
  if (hb_cuda_capture_end(gc, &gr, &err)) DIE("capture_end");
  for (int i = 0; i < 3; i++) if (hb_cuda_graph_launch(gc, gr, &err)) DIE("graph_launch");
  if (G->sync(gc, &err)) DIE("sync");
  if (prof) hb_cuda_profiler_range(1);
  double t0 = now();
  for (int i = 0; i < n_steps; i++) if (hb_cuda_graph_launch(gc, gr, &err)) DIE("graph_launch");
  if (G->sync(gc, &err)) DIE("sync");
  double dt = now() - t0;
  if (prof) hb_cuda_profiler_range(0);
  hb_cuda_graph_free(gr);
  return dt;
}

/* what a synchronous decode loop adds per step on the host side: bench_cuda's own loop (upload, replay, read the
 * ids, wait) against the same graph replayed back to back (bench/NOTES.md, round 14) */
static void bench_host(const struct cfg *c) {
  struct model m;
  model_init(&m, c, 256, 1, 512);
  struct bb t;
  bb_init(&t, &m);
  prefill(&m, &t, 0, 0, 71, 0);
  double a[3], b[3];
  for (int r = 0; r < 3; r++) {
    a[r] = decode(&m, &t, 1, 71, 128, 1, 1) / 128;
    b[r] = decode_replay(&m, &t, 71, 128, 0) / 128;
  }
  const double ma = median(a, 3), mb = median(b, 3);
  printf("| %s | %.1f | %.1f | %.1f |\n", c->name, ma * 1e6, mb * 1e6, (ma - mb) * 1e6);
  fflush(stdout);
  bb_free(&t);
  model_free(&m);
}

/* `replay3b` / `replay0.5b`: the batch-1 decode graph at 71 keys replayed back to back inside the profiler's
 * collection range, for `ncu --profile-from-start off --graph-profiling graph` (the whole step as one workload:
 * its stall reasons with the kernels in their real order and caches as a step leaves them) */
static void bench_replay(const struct cfg *c) {
  struct model m;
  model_init(&m, c, 256, 1, 512);
  struct bb t;
  bb_init(&t, &m);
  prefill(&m, &t, 0, 0, 71, 0);
  printf("| %s | replay @71 | %.1f us/step |\n", c->name, decode_replay(&m, &t, 71, 8, 1) / 8 * 1e6);
  fflush(stdout);
  bb_free(&t);
  model_free(&m);
}

static void bench_model(const struct cfg *c) {
  struct model m;
  model_init(&m, c, 1570, 32, 1570 + 160);
  struct bb t;
  bb_init(&t, &m);
  printf("\n### %s (H200, random int4 g128 weights, f16 activations, f16 KV)\n\n", c->name);
  printf("| workload | variant | tok/s | ms | vs floor | vs target |\n|---|---|---|---|---|---|\n");
  int pls[3] = {71, 512, 1570};
  double pp1570 = 0;
  for (int i = 0; i < 3; i++) {
    for (int fused = 0; fused < 2; fused++) {
      double ts[5];
      for (int r = 0; r < 5; r++) ts[r] = prefill(&m, &t, 0, 0, pls[i], fused);
      double md = median(ts, 5);
      if (pls[i] == 1570) pp1570 = pls[i] / md;
      printf("| pp%d | %s | %.0f | %.2f | | %s |\n", pls[i], fused ? "fused" : "ops", pls[i] / md, md * 1e3,
             pls[i] == 1570 && c->H == 2048 ? (pp1570 >= 21000 ? "PASS (>= 21,000)" : "below 21,000") : "");
      fflush(stdout);
    }
  }
  (void)pp1570;
  int ctxs[2] = {71, 1570};
  for (int ci = 0; ci < 2; ci++) {
    prefill(&m, &t, 0, 0, ctxs[ci], 0);
    for (int fused = 0; fused < 2; fused++) {
      for (int gr = 1; gr >= 0; gr--) {
        if (!gr && (fused || ci)) continue; /* one no-graph row for reference */
        double dt = decode(&m, &t, 1, ctxs[ci], 128, fused, gr);
        double tps = 128 / dt;
        printf("| tg128 @%d | %s%s | %.0f | %.3f/tok | %.1f%% | %.2fx of %.0f |\n", ctxs[ci], fused ? "fused" : "ops",
               gr ? "+graph" : " (no graph)", tps, dt / 128 * 1e3, 100 * tps / c->floor_tg, tps / c->target_tg,
               c->target_tg);
        fflush(stdout);
      }
    }
  }
  int Bs[2] = {8, 32};
  for (int bi = 0; bi < 2; bi++) {
    int B = Bs[bi];
    for (int s = 0; s < B; s++) { /* 71-token prompt per sequence */
      struct hb_batch save = t.b;
      prefill(&m, &t, s, 0, 71, 0);
      t.b = save;
    }
    for (int fused = 0; fused < 2; fused++) {
      if (fused && B > 8) continue; /* fused ops fall back to the op sequence above 8 rows */
      double dt = decode(&m, &t, B, 71, 128, fused, 1);
      double tps = B * 128 / dt;
      printf("| decode x%d @71 | %s+graph | %.0f aggregate | %.3f/step | | %s |\n", B, fused ? "fused" : "ops", tps,
             dt / 128 * 1e3, c->H == 2048 && B == 32 ? (tps >= 5000 ? "PASS (>= 5,000)" : "below 5,000") : "");
      fflush(stdout);
    }
  }
  printf("\nbytes/token (int4 weights incl. tied table once) %.3f GB; floor %.0f tok/s at 4.27 TB/s\n",
         m.weight_bytes / 1e9, c->floor_tg);
  bb_free(&t);
  model_free(&m);
}

/* GEMV time per matrix shape (n = 1) with the prologue/epilogue the model uses (norm before qkv,
 * gate/up and the head; silu·up before down; the residual add after o and down), 3B and 0.5B shapes;
 * distinct weight copies rotate past the L2. Back-to-back launches of one shape: with programmatic
 * dependent launch a launch's weight prefetch overlaps the previous one's tail, as in the model. */
enum gemv_kind { GK_NORM, GK_ADD, GK_SILU };
static void bench_gemv(void) {
  struct { const char *name; int r0, r1, r2, cols, n_mm, kind; } shp[] = {
      {"3B qkv 2560x2048 (norm, 3 weights)", 2048, 256, 256, 2048, 3, GK_NORM},
      {"3B o 2048x2048 (+residual)", 2048, 0, 0, 2048, 1, GK_ADD},
      {"3B gate+up 2x11008x2048 (norm)", 11008, 11008, 0, 2048, 2, GK_NORM},
      {"3B down 2048x11008 (silu, +residual)", 2048, 0, 0, 11008, 1, GK_SILU},
      {"3B lm_head 151936x2048 (norm)", 151936, 0, 0, 2048, 1, GK_NORM},
      {"0.5B qkv 1152x896 (norm, 3 weights)", 896, 128, 128, 896, 3, GK_NORM},
      {"0.5B o 896x896 (+residual)", 896, 0, 0, 896, 1, GK_ADD},
      {"0.5B gate+up 2x4864x896 (norm)", 4864, 4864, 0, 896, 2, GK_NORM},
      {"0.5B down 896x4864 (silu, +residual)", 896, 0, 0, 4864, 1, GK_SILU},
      {"0.5B lm_head 151936x896 (norm)", 151936, 0, 0, 896, 1, GK_NORM}};
  printf("\n### GEMV int4 (n = 1, f16 x), model prologues, rotating copies\n\n| matrix | us | GB/s |\n|---|---|---|\n");
  for (size_t si = 0; si < sizeof shp / sizeof shp[0]; si++) {
    const int big = shp[si].r0 > 100000, NC = big ? 2 : 8, K = shp[si].cols, nmm = shp[si].n_mm;
    const int rows3[3] = {shp[si].r0, shp[si].r1, shp[si].r2};
    struct hb_tensor w[8][3], o[3], x, x2, nw;
    uint64_t bytes = 0;
    for (int c = 0; c < NC; c++)
      for (int j = 0; j < nmm; j++) { uint64_t b0 = 0; up_q4(&w[c][j], rows3[j], K, &b0); if (!c) bytes += b0; }
    act(&x, HB_F32, 1, K);
    act(&x2, HB_F32, 1, K);
    up_f32(&nw, K, 1.0f, 0.2f);
    float *h = malloc((size_t)K * 4);
    for (int i = 0; i < K; i++) h[i] = (float)(r32() % 2001) / 1000.0f - 1.0f;
    G->write(gc, &x, 0, 1, h);
    G->write(gc, &x2, 0, 1, h);
    free(h);
    for (int j = 0; j < nmm; j++) act(&o[j], HB_F32, 1, rows3[j]);
    struct hb_tensor *op[3] = {&o[0], &o[1], &o[2]};
    int reps = big ? 50 : 200;
    double t0 = 0;
    for (int r = 0; r < reps + 10; r++) {
      if (r == 10) { G->sync(gc, &err); t0 = now(); }
      const struct hb_tensor *wp[3] = {&w[r % NC][0], &w[r % NC][1], &w[r % NC][2]};
      if (shp[si].kind == GK_SILU) hb_cuda_silu_matmul(gc, &x, &x2, &o[0], wp[0], 1, 1);
      else if (shp[si].kind == GK_ADD) hb_cuda_norm_matmul(gc, &x, NULL, 0, 0, 1, op, wp, NULL, 1, 1);
      else hb_cuda_norm_matmul(gc, &x, &nw, 1e-6f, 0.0f, nmm, op, wp, NULL, 1, 0);
    }
    if (G->sync(gc, &err)) DIE("gemv bench");
    double dt = (now() - t0) / reps;
    printf("| %s | %.1f | %.0f |\n", shp[si].name, dt * 1e6, bytes / dt / 1e9);
    for (int c = 0; c < NC; c++) for (int j = 0; j < nmm; j++) G->release(gc, &w[c][j]);
    for (int j = 0; j < nmm; j++) G->release(gc, &o[j]);
    G->release(gc, &x);
    G->release(gc, &x2);
    G->release(gc, &nw);
  }
}

/* Where a decode step's device time goes: one step of batch 1 at contexts 71 and 1570, the forward
 * captured into a graph with a timestamp after every op, replayed 20 times; per op kind the median
 * over replays of the summed intervals (event nodes between kernels remove any overlap, so the
 * total is a little above the unmarked graph's). */
static void breakdown(const struct cfg *c) {
  struct model m;
  model_init(&m, c, 1570, 1, 1570 + 64);
  struct bb t;
  bb_init(&t, &m);
  printf("\n### %s decode step breakdown (batch 1, graph with a timestamp after every op)\n", c->name);
  int ctxs[2] = {71, 1570};
  for (int ci = 0; ci < 2; ci++) {
    prefill(&m, &t, 0, 0, ctxs[ci], 0);
    for (int fused = 1; fused >= 0; fused--) {
      t.b.n_tokens = 1; t.b.n_seqs = 1; t.b.n_out = 1;
      t.seq[0] = 0; t.out[0] = 0; t.pos[0] = ctxs[ci]; t.seq_len[0] = ctxs[ci] + 1;
      if (G->batch_upload(gc, &t.b, &err)) DIE("batch_upload");
      g_mark = 0;
      forward(&m, &t.b, fused); /* uncaptured once: sizes scratch, creates the events */
      int nmarks = g_mark;
      g_mark = -1;
      struct hb_cuda_graph *gr = NULL;
      if (hb_cuda_capture_begin(gc, &err)) DIE("capture_begin");
      g_mark = 0;
      forward(&m, &t.b, fused);
      g_mark = -1;
      if (hb_cuda_capture_end(gc, &gr, &err)) DIE("capture_end");
      enum { NK = 24, REPS = 20 };
      const char *kinds[NK];
      int nk = 0;
      double per[NK][REPS], tot[REPS];
      memset(per, 0, sizeof per);
      for (int r = 0; r < REPS; r++) {
        if (hb_cuda_graph_launch(gc, gr, &err) || G->sync(gc, &err)) DIE("replay");
        tot[r] = hb_cuda_mark_ms(gc, 0, nmarks - 1) * 1e3;
        for (int i = 1; i < nmarks; i++) {
          int k = 0;
          while (k < nk && strcmp(kinds[k], g_mark_name[i])) k++;
          if (k == nk && nk < NK) kinds[nk++] = g_mark_name[i];
          if (k < NK) per[k][r] += hb_cuda_mark_ms(gc, i - 1, i) * 1e3;
        }
      }
      hb_cuda_graph_free(gr);
      printf("\n%s @%d, %s (%d ops): median step %.0f us\n\n| op | us/step | us/layer | share |\n|---|---|---|---|\n",
             c->name, ctxs[ci], fused ? "fused" : "ops", nmarks - 1, median(tot, REPS));
      double mt = median(tot, REPS);
      for (int k = 0; k < nk; k++) {
        double md = median(per[k], REPS);
        int per_layer = strncmp(kinds[k], "head", 4) && strcmp(kinds[k], "embed");
        if (per_layer) printf("| %s | %.1f | %.2f | %.1f%% |\n", kinds[k], md, md / c->L, 100 * md / mt);
        else printf("| %s | %.1f | – | %.1f%% |\n", kinds[k], md, 100 * md / mt);
      }
    }
  }
  bb_free(&t);
  model_free(&m);
}

int main(int argc, char **argv) {
  const char *which = argc > 1 ? argv[1] : "all";
  struct hb_config cfg = {1, 0, 0};
  if (G->init(&cfg, &gc, &err)) { fprintf(stderr, "bench_cuda: %s\n", err.msg); return 1; }
  if (!strcmp(which, "gemv") || !strcmp(which, "all")) bench_gemv();
  if (!strcmp(which, "0.5b") || !strcmp(which, "all")) bench_model(&CFG_05B);
  if (!strcmp(which, "3b") || !strcmp(which, "all")) bench_model(&CFG_3B);
  if (!strcmp(which, "breakdown") || !strcmp(which, "all")) breakdown(&CFG_3B);
  if (!strcmp(which, "breakdown0.5b")) breakdown(&CFG_05B);
  if (!strcmp(which, "replay3b")) bench_replay(&CFG_3B);
  if (!strcmp(which, "replay0.5b")) bench_replay(&CFG_05B);
  if (!strcmp(which, "host")) {
    printf("\n### decode step, µs: bench_cuda's synchronous loop against back-to-back replays (fused, graph, @71)\n\n"
           "| model | loop | replays | host's share |\n|---|---|---|---|\n");
    bench_host(&CFG_05B);
    bench_host(&CFG_3B);
  }
  if (G->sync(gc, &err)) { fprintf(stderr, "bench_cuda: %s\n", err.msg); return 1; }
  G->free(gc);
  return 0;
}
