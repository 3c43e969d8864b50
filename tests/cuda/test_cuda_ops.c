/* tests/cuda/test_cuda_ops.c — every CUDA op against the scalar CPU op (hb_cpu_ops, exact set).
 *
 * Groups: exact (hb_config.exact = 1: f32 activations, f32 KV: must match the CPU to ~1e-5),
 * fast (f16 activations and KV, f32-accumulating int4 GEMV on f16 x, tensor-core int4 GEMM: bounds per op),
 * graph (a captured attention step replayed at later positions). Fresh random inputs per case,
 * device outputs poisoned with NaN before each op, relative L2 error ‖gpu − cpu‖ / ‖cpu‖; a NaN or
 * unwritten element fails. Needs a GPU: label `cuda` (CI runs ctest -LE cuda). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "quant/q4.h"
#include "runtime/row_score.h"
#include "runtime/sampler.h"
#include "test.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void) { /* uniform [-1, 1) */
  rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
  return (float)((rng >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}
static int irand(int n) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (int)((rng >> 33) % (uint64_t)n); }

static const struct hb_ops *C = &hb_cpu_ops, *G = &hb_cuda_ops;
static struct hb_ctx *cc, *gc;
static int g_exact;

static float *randv(int64_t n, float amp) {
  float *v = malloc((size_t)n * sizeof *v);
  for (int64_t i = 0; i < n; i++) v[i] = frand() * amp;
  return v;
}

/* a pair of tensors (cpu, gpu) holding the same host data */
struct pair { struct hb_tensor c, g; int64_t rows, cols; };

static void pair_alloc(struct pair *p, enum hb_dtype dt, int64_t rows, int64_t cols) {
  struct hearth_err err = {0};
  p->rows = rows; p->cols = cols;
  if (C->alloc(cc, &p->c, dt, rows, cols, &err) || G->alloc(gc, &p->g, dt, rows, cols, &err))
    fprintf(stderr, "alloc: %s\n", err.msg);
}
static void pair_set(struct pair *p, const void *host) {
  C->write(cc, &p->c, 0, p->rows, host);
  G->write(gc, &p->g, 0, p->rows, host);
}
static void pair_rand(struct pair *p, enum hb_dtype dt, int64_t rows, int64_t cols, float amp) {
  pair_alloc(p, dt, rows, cols);
  float *h = randv(rows * cols, amp);
  pair_set(p, h);
  free(h);
}
static void pair_poison(struct pair *p) { /* NaN into the gpu copy */
  float *h = malloc((size_t)(p->rows * p->cols) * sizeof *h);
  for (int64_t i = 0; i < p->rows * p->cols; i++) h[i] = NAN;
  G->write(gc, &p->g, 0, p->rows, h);
  free(h);
}
static void pair_free(struct pair *p) { C->release(cc, &p->c); G->release(gc, &p->g); }

static void weight_pair(struct pair *p, enum hb_dtype dt, int64_t rows, int64_t cols, float amp) {
  struct hearth_err err = {0};
  float *w = randv(rows * cols, amp);
  struct hb_host_weight hw = {dt, rows, cols, NULL, NULL, NULL};
  uint8_t *qs = NULL;
  uint16_t *d = NULL, *b16 = NULL;
  if (dt == HB_Q4) {
    qs = malloc((size_t)(rows * cols / 2));
    d = malloc((size_t)(rows * cols / 128) * 2);
    for (int64_t r = 0; r < rows; r++) q4_quantize_row(w + r * cols, cols, qs + r * cols / 2, d + r * cols / 128);
    hw.data = qs; hw.scales = d;
  } else if (dt == HB_BF16) {
    b16 = malloc((size_t)(rows * cols) * 2);
    for (int64_t i = 0; i < rows * cols; i++) { uint32_t u; memcpy(&u, &w[i], 4); b16[i] = (uint16_t)(u >> 16); }
    hw.data = b16;
  } else {
    hw.data = w;
  }
  p->rows = rows; p->cols = cols;
  if (C->weight_upload(cc, &p->c, &hw, &err) || G->weight_upload(gc, &p->g, &hw, &err))
    fprintf(stderr, "weight_upload: %s\n", err.msg);
  free(w); free(qs); free(d); free(b16);
}

/* relative L2 error over the first n rows; NaN/inf anywhere fails */
static double cmp(struct pair *p, int64_t n_rows, const char *what, double tol) {
  struct hearth_err err = {0};
  int64_t n = n_rows * p->cols;
  float *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b);
  C->read(cc, &p->c, 0, n_rows, b);
  int rc = G->read(gc, &p->g, 0, n_rows, a);
  if (rc || G->sync(gc, &err)) { fprintf(stderr, "%s: gpu error: %s\n", what, err.msg[0] ? err.msg : "read failed"); test_failures++; free(a); free(b); return INFINITY; }
  double num = 0, den = 0;
  int64_t bad = 0;
  for (int64_t i = 0; i < n; i++) {
    if (!isfinite(a[i])) { bad++; continue; }
    double dd = (double)a[i] - b[i];
    num += dd * dd;
    den += (double)b[i] * b[i];
  }
  double rel = bad ? INFINITY : sqrt(num / (den > 0 ? den : 1e-30));
  printf("  %-44s rel %.2e (tol %.0e)%s\n", what, rel, tol, bad ? "  NON-FINITE" : "");
  CHECKF(rel <= tol, "%s: rel %.3e > %.1e (%lld non-finite)", what, rel, tol, (long long)bad);
  free(a); free(b);
  return rel;
}

static int setup(int exact) {
  struct hearth_err err = {0};
  struct hb_config cfg = {2, 0, 1};
  g_exact = exact;
  if (C->init(&cfg, &cc, &err)) { fprintf(stderr, "cpu init: %s\n", err.msg); return 1; }
  cfg.exact = exact;
  if (G->init(&cfg, &gc, &err)) {
    fprintf(stderr, "cuda init: %s\n", err.msg);
    C->free(cc);
    test_failures++;
    return 1;
  }
  char buf[512];
  hb_cuda_mem_report(gc, buf, sizeof buf);
  printf("  %s\n", buf);
  return 0;
}
static void teardown(void) { G->free(gc); C->free(cc); }

/* ---- per-op checks ---------------------------------------------------------------------------- */

static void check_matmul(enum hb_dtype wdt, int rows, int cols, int n, int with_bias, double tol) {
  struct pair w, x, o, bias;
  weight_pair(&w, wdt, rows, cols, 0.5f);
  if (with_bias) weight_pair(&bias, HB_F32, 1, rows, 0.5f);
  pair_rand(&x, HB_F32, n, cols, 1.0f);
  pair_alloc(&o, HB_F32, n, rows);
  pair_poison(&o);
  C->matmul(cc, &o.c, &x.c, &w.c, with_bias ? &bias.c : NULL, n);
  G->matmul(gc, &o.g, &x.g, &w.g, with_bias ? &bias.g : NULL, n);
  char what[96];
  snprintf(what, sizeof what, "matmul %s %dx%d n=%d%s", wdt == HB_Q4 ? "q4" : wdt == HB_BF16 ? "bf16" : "f32", rows,
           cols, n, with_bias ? " +bias" : "");
  cmp(&o, n, what, tol);
  pair_free(&w); pair_free(&x); pair_free(&o);
  if (with_bias) pair_free(&bias);
}

/* the GEMV writing f32 (the runtime's logits tensor, alloc_f32) */
static void check_matmul_f32out(int rows, int cols, int n, double tol) {
  struct hearth_err err = {0};
  struct pair w, x, o;
  weight_pair(&w, HB_Q4, rows, cols, 0.5f);
  pair_rand(&x, HB_F32, n, cols, 1.0f);
  o.rows = n; o.cols = rows;
  if (C->alloc(cc, &o.c, HB_F32, n, rows, &err) || !G->alloc_f32 || G->alloc_f32(gc, &o.g, n, rows, &err)) {
    fprintf(stderr, "alloc_f32: %s\n", err.msg);
    test_failures++;
    return;
  }
  CHECK(o.g.dtype == HB_F32);
  pair_poison(&o);
  C->matmul(cc, &o.c, &x.c, &w.c, NULL, n);
  G->matmul(gc, &o.g, &x.g, &w.g, NULL, n);
  char what[96];
  snprintf(what, sizeof what, "matmul q4 %dx%d n=%d -> f32", rows, cols, n);
  cmp(&o, n, what, tol);
  pair_free(&w); pair_free(&x); pair_free(&o);
}

static void check_embed(enum hb_dtype dt, double tol) {
  struct pair tab, ids, o;
  int vocab = 1001, d = 896, n = 7; /* 1001 rows: the device layout pads rows to blocks of 8 */
  weight_pair(&tab, dt, vocab, d, 1.0f);
  pair_alloc(&ids, HB_I32, n, 1);
  int32_t id[7];
  for (int i = 0; i < n; i++) id[i] = i ? irand(vocab) : vocab - 1; /* the last row: in the padded block */
  pair_set(&ids, id);
  pair_alloc(&o, HB_F32, n, d);
  pair_poison(&o);
  C->embed(cc, &o.c, &tab.c, &ids.c, n, 1.5f);
  G->embed(gc, &o.g, &tab.g, &ids.g, n, 1.5f);
  cmp(&o, n, dt == HB_Q4 ? "embed q4" : "embed bf16", tol);
  pair_free(&tab); pair_free(&ids); pair_free(&o);
}

static void check_rmsnorm(int rows, int d, int wcols, float off, double tol) {
  struct pair x, w, o;
  pair_rand(&x, HB_F32, rows, d, 3.0f);
  weight_pair(&w, HB_F32, 1, wcols, 1.0f);
  pair_alloc(&o, HB_F32, rows, d);
  pair_poison(&o);
  C->rmsnorm(cc, &o.c, &x.c, &w.c, 1e-6f, off);
  G->rmsnorm(gc, &o.g, &x.g, &w.g, 1e-6f, off);
  char what[96];
  snprintf(what, sizeof what, "rmsnorm %dx%d w=%d off=%g", rows, d, wcols, off);
  cmp(&o, rows, what, tol);
  /* in place */
  C->rmsnorm(cc, &x.c, &x.c, &w.c, 1e-6f, off);
  G->rmsnorm(gc, &x.g, &x.g, &w.g, 1e-6f, off);
  cmp(&x, rows, "rmsnorm in place", tol);
  pair_free(&x); pair_free(&w); pair_free(&o);
}

static void check_elementwise(double tol) {
  int n = 5, d = 4864;
  struct pair g, u, o;
  pair_rand(&g, HB_F32, n, d, 4.0f);
  pair_rand(&u, HB_F32, n, d, 2.0f);
  pair_alloc(&o, HB_F32, n, d);
  pair_poison(&o);
  C->silu_mul(cc, &o.c, &g.c, &u.c, n);
  G->silu_mul(gc, &o.g, &g.g, &u.g, n);
  cmp(&o, n, "silu_mul", tol);
  C->add(cc, &g.c, &u.c, n);
  G->add(gc, &g.g, &u.g, n);
  cmp(&g, n, "add", tol);
  pair_free(&g); pair_free(&u); pair_free(&o);
}

/* a batch over n_seqs sequences: sequence s has ctx[s] tokens already and adds new_tok[s] */
#define TB_SEQS 32 /* sequences a test batch holds */
struct tb {
  struct hb_batch b;
  int32_t pos[2048], seq[2048], bt[TB_SEQS * 128], seq_len[TB_SEQS], out_rows[2048];
};

static void make_batch(struct tb *t, int n_seqs, const int *ctx, const int *new_tok, int bs, int max_blocks) {
  memset(t, 0, sizeof *t);
  int n = 0;
  int perm[TB_SEQS * 128];
  for (int i = 0; i < n_seqs * max_blocks; i++) perm[i] = i;
  for (int i = n_seqs * max_blocks - 1; i > 0; i--) { int j = irand(i + 1), tmp = perm[i]; perm[i] = perm[j]; perm[j] = tmp; }
  for (int s = 0; s < n_seqs; s++) {
    for (int j = 0; j < max_blocks; j++) t->bt[s * max_blocks + j] = perm[s * max_blocks + j];
    for (int k = 0; k < new_tok[s]; k++) { t->pos[n] = ctx[s] + k; t->seq[n] = s; n++; }
    t->seq_len[s] = ctx[s] + new_tok[s];
  }
  for (int i = 0; i < n; i++) t->out_rows[i] = i;
  t->b.n_tokens = n; t->b.n_seqs = n_seqs; t->b.max_blocks = max_blocks; t->b.block_size = bs;
  t->b.pos = t->pos; t->b.seq = t->seq; t->b.block_table = t->bt; t->b.seq_len = t->seq_len;
  t->b.out_rows = t->out_rows; t->b.n_out = n;
}

struct kvpair { struct hb_kv_layer c, g; };

static void kv_alloc(struct kvpair *kv, int n_blocks, int bs, int n_kv, int hd) {
  struct pair k, v;
  pair_alloc(&k, HB_F32, (int64_t)n_blocks * bs, (int64_t)n_kv * hd);
  pair_alloc(&v, HB_F32, (int64_t)n_blocks * bs, (int64_t)n_kv * hd);
  kv->c.k = k.c; kv->c.v = v.c; kv->g.k = k.g; kv->g.v = v.g;
  kv->c.n_kv_heads = kv->g.n_kv_heads = n_kv;
  kv->c.head_dim = kv->g.head_dim = hd;
}
static void kv_free(struct kvpair *kv) {
  C->release(cc, &kv->c.k); C->release(cc, &kv->c.v); G->release(gc, &kv->g.k); G->release(gc, &kv->g.v);
}

/* writes random k/v rows for every token of the batch pre into both caches (earlier context) */
static void fill_cache(struct kvpair *kv, struct tb *pre, int n_kv, int hd) {
  struct hearth_err err = {0};
  if (!pre->b.n_tokens) return;
  struct pair k, v;
  pair_rand(&k, HB_F32, pre->b.n_tokens, n_kv * hd, 1.0f);
  pair_rand(&v, HB_F32, pre->b.n_tokens, n_kv * hd, 1.0f);
  C->batch_upload(cc, &pre->b, &err);
  if (G->batch_upload(gc, &pre->b, &err)) fprintf(stderr, "batch_upload: %s\n", err.msg);
  C->kv_write(cc, &kv->c, &k.c, &v.c, &pre->b);
  G->kv_write(gc, &kv->g, &k.g, &v.g, &pre->b);
  pair_free(&k); pair_free(&v);
}

/* fills the caches for all context tokens (one prefill batch of random k/v), then runs the
 * step batch: rope q,k; kv_write; attention; compares rope'd q and the attention output */
static void check_attention(int n_seqs, const int *ctx, const int *new_tok, int n_heads, int n_kv, int hd, int window,
                            float softcap, double tol) {
  struct hearth_err err = {0};
  int bs = 16, max_blocks = 128;
  struct kvpair kv;
  kv_alloc(&kv, n_seqs * max_blocks, bs, n_kv, hd);
  struct tb pre, st;
  int zero[TB_SEQS] = {0}, total = 0;
  for (int i = 0; i < n_seqs; i++) total += ctx[i] + new_tok[i];
  if (n_seqs > TB_SEQS || total > 2048) { /* struct tb holds TB_SEQS sequences, 2048 tokens */
    fprintf(stderr, "check_attention: %d seqs, %d tokens over the test batch's size\n", n_seqs, total);
    exit(1);
  }
  make_batch(&pre, n_seqs, zero, ctx, bs, max_blocks);
  make_batch(&st, n_seqs, ctx, new_tok, bs, max_blocks);
  memcpy(st.bt, pre.bt, sizeof st.bt); /* same block tables */
  fill_cache(&kv, &pre, n_kv, hd);
  int n = st.b.n_tokens;
  struct pair q, k, v, o;
  pair_rand(&q, HB_F32, n, n_heads * hd, 1.5f);
  pair_rand(&k, HB_F32, n, n_kv * hd, 1.5f);
  pair_rand(&v, HB_F32, n, n_kv * hd, 1.0f);
  pair_alloc(&o, HB_F32, n, n_heads * hd);
  pair_poison(&o);
  C->batch_upload(cc, &st.b, &err);
  G->batch_upload(gc, &st.b, &err);
  C->rope_neox(cc, &q.c, &st.b, n_heads, hd, hd, 1000000.0f);
  G->rope_neox(gc, &q.g, &st.b, n_heads, hd, hd, 1000000.0f);
  C->rope_neox(cc, &k.c, &st.b, n_kv, hd, hd, 1000000.0f);
  G->rope_neox(gc, &k.g, &st.b, n_kv, hd, hd, 1000000.0f);
  char what[128];
  snprintf(what, sizeof what, "rope_neox q (%d tokens, hd %d)", n, hd);
  cmp(&q, n, what, g_exact ? 2e-5 : 2e-3);
  C->kv_write(cc, &kv.c, &k.c, &v.c, &st.b);
  G->kv_write(gc, &kv.g, &k.g, &v.g, &st.b);
  struct hb_attn_params ap = {n_heads, n_kv, hd, 1.0f / sqrtf((float)hd), window, softcap};
  C->attention(cc, &o.c, &q.c, &kv.c, &st.b, &ap);
  G->attention(gc, &o.g, &q.g, &kv.g, &st.b, &ap);
  snprintf(what, sizeof what, "attention %d seqs %d tok h%d/%d hd%d w%d cap%g", n_seqs, n, n_heads, n_kv, hd, window,
           softcap);
  cmp(&o, n, what, tol);
  /* gather_rows over a few rows */
  st.b.n_out = 3 < n ? 3 : n;
  st.out_rows[0] = n - 1;
  if (n > 2) { st.out_rows[1] = 0; st.out_rows[2] = n / 2; }
  G->batch_upload(gc, &st.b, &err);
  struct pair sel;
  pair_alloc(&sel, HB_F32, st.b.n_out, n_heads * hd);
  pair_poison(&sel);
  C->gather_rows(cc, &sel.c, &o.c, &st.b);
  G->gather_rows(gc, &sel.g, &o.g, &st.b);
  cmp(&sel, st.b.n_out, "gather_rows", tol);
  pair_free(&sel);
  pair_free(&q); pair_free(&k); pair_free(&v); pair_free(&o);
  kv_free(&kv);
}

/* Gemma 4's ops (model/gemma4.c): gelu_mul reading one layer's slice of a wider up tensor (the per-layer inputs),
 * in place as the model runs it; scale; softcap; proportional RoPE over part of each head, with a factor */
static void check_gemma4_ops(double tol) {
  struct hearth_err err = {0};
  int n = 5, w = 256, L = 3;
  struct pair g, u, o;
  pair_rand(&g, HB_F32, n, w, 4.0f);
  pair_rand(&u, HB_F32, n, L * w, 2.0f);
  pair_alloc(&o, HB_F32, n, w);
  for (int col0 = 0; col0 <= 2 * w; col0 += w) {
    pair_poison(&o);
    C->gelu_mul(cc, &o.c, &g.c, &u.c, col0, n);
    G->gelu_mul(gc, &o.g, &g.g, &u.g, col0, n);
    char what[64];
    snprintf(what, sizeof what, "gelu_mul up cols %d..%d of %d", col0, col0 + w, L * w);
    cmp(&o, n, what, tol);
  }
  C->gelu_mul(cc, &g.c, &g.c, &u.c, w, n);
  G->gelu_mul(gc, &g.g, &g.g, &u.g, w, n);
  cmp(&g, n, "gelu_mul in place (out = gate)", tol);
  pair_free(&g); pair_free(&u); pair_free(&o);

  struct pair x;
  pair_rand(&x, HB_F32, 7, 1536, 3.0f);
  C->scale(cc, &x.c, 0.37f, 7);
  G->scale(gc, &x.g, 0.37f, 7);
  cmp(&x, 7, "scale 0.37", tol);
  pair_free(&x);
  /* logits-like: f32 (alloc_f32) rows well past the cap, so tanh saturates on some */
  int V = 5000;
  struct pair lg;
  lg.rows = 3; lg.cols = V;
  if (C->alloc(cc, &lg.c, HB_F32, 3, V, &err) || G->alloc_f32(gc, &lg.g, 3, V, &err)) {
    fprintf(stderr, "alloc_f32: %s\n", err.msg);
    test_failures++;
    return;
  }
  float *h = randv(3 * V, 80.0f);
  pair_set(&lg, h);
  free(h);
  C->softcap(cc, &lg.c, 30.0f, 3);
  G->softcap(gc, &lg.g, 30.0f, 3);
  cmp(&lg, 3, "softcap 30 (f32 logits)", tol);
  pair_free(&lg);
  /* softcap on an activation tensor (f16 on the fast path) */
  pair_rand(&x, HB_F32, 4, 640, 40.0f);
  C->softcap(cc, &x.c, 25.0f, 4);
  G->softcap(gc, &x.g, 25.0f, 4);
  cmp(&x, 4, "softcap 25 (activations)", tol);
  pair_free(&x);

  /* rope_prop: sliding-layer form (all pairs, factor 1), full-layer form (a quarter of the pairs, theta 1e6,
   * factor 8 and 1), at positions up to a few thousand */
  static const struct { int hd, nh, pairs; float theta, factor; } rp[] = {
    {256, 8, 128, 10000.0f, 1.0f}, {512, 8, 64, 1000000.0f, 1.0f}, {512, 2, 64, 1000000.0f, 8.0f},
    {32, 4, 4, 1000000.0f, 1.0f}, {64, 3, 32, 10000.0f, 1.0f},
  };
  for (size_t r = 0; r < sizeof rp / sizeof rp[0]; r++) {
    struct tb st;
    int ctx[2] = {3000, 17}, nt[2] = {3, 4};
    make_batch(&st, 2, ctx, nt, 16, 256);
    C->batch_upload(cc, &st.b, &err);
    if (G->batch_upload(gc, &st.b, &err)) fprintf(stderr, "batch_upload: %s\n", err.msg);
    int nn = st.b.n_tokens;
    pair_rand(&x, HB_F32, nn, rp[r].nh * rp[r].hd, 2.0f);
    C->rope_prop(cc, &x.c, &st.b, rp[r].nh, rp[r].hd, rp[r].pairs, rp[r].theta, rp[r].factor);
    G->rope_prop(gc, &x.g, &st.b, rp[r].nh, rp[r].hd, rp[r].pairs, rp[r].theta, rp[r].factor);
    char what[96];
    snprintf(what, sizeof what, "rope_prop hd %d x%d pairs %d theta %g factor %g", rp[r].hd, rp[r].nh, rp[r].pairs,
             rp[r].theta, rp[r].factor);
    cmp(&x, nn, what, g_exact ? 2e-5 : 2e-3);
    pair_free(&x);
  }
}

/* two device tensors hold the same bits over their first rows (read back as f32: exact for f16 and f32 storage) */
static void gpu_same(const struct hb_tensor *a, const struct hb_tensor *b, int64_t rows, const char *what) {
  struct hearth_err err = {0};
  const int64_t n = rows * a->cols;
  float *ha = malloc((size_t)n * sizeof *ha), *hb = malloc((size_t)n * sizeof *hb);
  int rc = G->read(gc, a, 0, rows, ha) | G->read(gc, b, 0, rows, hb);
  if (rc || G->sync(gc, &err)) {
    fprintf(stderr, "%s: gpu error: %s\n", what, err.msg);
    test_failures++;
  } else {
    int64_t diff = 0, nonfinite = 0;
    for (int64_t i = 0; i < n; i++) {
      diff += memcmp(&ha[i], &hb[i], sizeof ha[i]) != 0;
      nonfinite += !isfinite(hb[i]);
    }
    printf("  %-52s %lld of %lld differ\n", what, (long long)diff, (long long)n);
    CHECKF(diff == 0 && nonfinite == 0, "%s: %lld of %lld values differ from the plain ops, %lld non-finite", what,
           (long long)diff, (long long)n, (long long)nonfinite);
  }
  free(ha); free(hb);
}

/* g4_post_attention (attention.cu: g4_qkv_post folded into attn_decode_smem and attn_decode) against g4_qkv_post then attention on
 * the same inputs and caches: the output and both caches must hold the same bits. per new tokens a sequence (the op
 * takes one) at ctx[i] keys before them; own: the layer writes its keys (else a KV-shared layer, whose new keys are already in the cache).
 * take: whether the op must cover the batch (the exact mode's f32 activations and the shapes it leaves to the two
 * ops must decline, touching nothing). */
static void check_g4_post_attention(int n_seqs, const int *ctx, int per, int nq, int nkv, int hd, int pairs,
                                    float theta, float factor, int window, int own, int take) {
  struct hearth_err err = {0};
  const float eps = 1e-6f;
  const int bs = 16, max_blocks = 64;
  struct tb pre, st;
  int zero[TB_SEQS] = {0}, pre_n[TB_SEQS], one[TB_SEQS];
  for (int i = 0; i < n_seqs; i++) { pre_n[i] = ctx[i] + (own ? 0 : per); one[i] = per; }
  make_batch(&pre, n_seqs, zero, pre_n, bs, max_blocks);
  make_batch(&st, n_seqs, ctx, one, bs, max_blocks);
  memcpy(st.bt, pre.bt, sizeof st.bt);
  struct kvpair kv[2];
  const int64_t crow = (int64_t)n_seqs * max_blocks * bs, w = (int64_t)nkv * hd;
  for (int i = 0; i < 2; i++) kv_alloc(&kv[i], n_seqs * max_blocks, bs, nkv, hd);
  float *hc = calloc((size_t)(crow * w), sizeof *hc);
  G->write(gc, &kv[0].g.k, 0, crow, hc); G->write(gc, &kv[0].g.v, 0, crow, hc);
  fill_cache(&kv[0], &pre, nkv, hd); /* (a KV-shared layer: its new keys too) */
  for (int c = 0; c < 2; c++) { /* the second cache a copy of the first */
    struct hb_tensor *src = c ? &kv[0].g.v : &kv[0].g.k, *dst = c ? &kv[1].g.v : &kv[1].g.k;
    if (G->read(gc, src, 0, crow, hc) || G->sync(gc, &err)) fprintf(stderr, "read: %s\n", err.msg);
    G->write(gc, dst, 0, crow, hc);
  }
  if (G->batch_upload(gc, &st.b, &err)) fprintf(stderr, "batch_upload: %s\n", err.msg);
  const int n = st.b.n_tokens;
  struct pair q[2], k[2], v[2], o[2], qn, kn;
  float *hq = randv((int64_t)n * nq * hd, 3.0f), *hk = randv((int64_t)n * w, 3.0f), *hv = randv((int64_t)n * w, 2.0f);
  for (int i = 0; i < 2; i++) {
    pair_alloc(&q[i], HB_F32, n, (int64_t)nq * hd);
    pair_alloc(&k[i], HB_F32, n, w);
    pair_alloc(&v[i], HB_F32, n, w);
    pair_alloc(&o[i], HB_F32, n, (int64_t)nq * hd);
    pair_set(&q[i], hq); pair_set(&k[i], hk); pair_set(&v[i], hv);
    pair_poison(&o[i]);
  }
  weight_pair(&qn, HB_F32, 1, hd, 1.5f);
  weight_pair(&kn, HB_F32, 1, hd, 1.5f);
  struct hb_attn_params ap = {nq, nkv, hd, 1.0f, window, 0.0f};
  char what[128];
  snprintf(what, sizeof what, "g4_post_attention %d seqs h%d/%d hd%d w%d%s", n_seqs, nq, nkv, hd, window,
           own ? "" : " shared");
  const int rc = hb_cuda_g4_post_attention(gc, &o[1].g, &q[1].g, &k[1].g, &v[1].g, &qn.g, &kn.g, eps,
                                           own ? &kv[1].g : NULL, &kv[1].g, &st.b, &ap, pairs, theta, factor);
  CHECKF(rc == !take, "%s: returned %d (expected %d)", what, rc, !take);
  if (rc == 0) {
    CHECK(hb_cuda_g4_qkv_post(gc, &q[0].g, &k[0].g, &v[0].g, &qn.g, &kn.g, eps, own ? &kv[0].g : NULL, &st.b, nq, nkv,
                              hd, pairs, theta, factor) == 0);
    G->attention(gc, &o[0].g, &q[0].g, &kv[0].g, &st.b, &ap);
    gpu_same(&o[0].g, &o[1].g, n, what);
  } else { /* declined: the output still the poison, the caches (compared below) as they were */
    const int64_t no = (int64_t)n * nq * hd;
    float *ho = malloc((size_t)no * sizeof *ho);
    int64_t touched = 0;
    if (G->read(gc, &o[1].g, 0, n, ho) || G->sync(gc, &err)) fprintf(stderr, "read: %s\n", err.msg);
    for (int64_t i = 0; i < no; i++) touched += !isnan(ho[i]);
    printf("  %-52s declined, %lld outputs written\n", what, (long long)touched);
    CHECKF(touched == 0, "%s: declined but wrote %lld outputs", what, (long long)touched);
    free(ho);
  }
  gpu_same(&kv[0].g.k, &kv[1].g.k, crow, "  its cache k");
  gpu_same(&kv[0].g.v, &kv[1].g.v, crow, "  its cache v");
  for (int i = 0; i < 2; i++) { pair_free(&q[i]); pair_free(&k[i]); pair_free(&v[i]); pair_free(&o[i]); kv_free(&kv[i]); }
  pair_free(&qn); pair_free(&kn);
  free(hq); free(hk); free(hv); free(hc);
}

/* Gemma 4's decode fusions (gemma4_fused.cu) against the plain device ops they stand for, on the same inputs: the
 * bits must be the same (f16 activations on the fast path, f32 on the exact one), including the cache rows written */
static void check_gemma4_fused(void) {
  struct hearth_err err = {0};
  const float eps = 1e-6f;
  static const struct { int nq, nkv, hd, pairs; float theta, factor; int own; } qs[] = {
    {8, 2, 256, 128, 10000.0f, 1.0f, 1},  /* E4B sliding layer */
    {8, 2, 512, 64, 1000000.0f, 1.0f, 1}, /* full layer: a quarter of the pairs turn */
    {16, 8, 512, 64, 1000000.0f, 8.0f, 1},
    {8, 1, 256, 128, 10000.0f, 1.0f, 0},  /* KV-shared layer: q only */
    {4, 2, 64, 32, 10000.0f, 1.0f, 1},
  };
  for (size_t r = 0; r < sizeof qs / sizeof qs[0]; r++) {
    const int nq = qs[r].nq, nkv = qs[r].nkv, hd = qs[r].hd, bs = 16, max_blocks = 32;
    struct tb st;
    int ctx[2] = {40, 300}, nt[2] = {1, 3};
    make_batch(&st, 2, ctx, nt, bs, max_blocks);
    if (G->batch_upload(gc, &st.b, &err)) fprintf(stderr, "batch_upload: %s\n", err.msg);
    const int n = st.b.n_tokens;
    struct pair q[2], k[2], v[2], qn, kn, ones;
    struct kvpair kv[2];
    float *hq = randv((int64_t)n * nq * hd, 3.0f), *hk = randv((int64_t)n * nkv * hd, 3.0f),
          *hv = randv((int64_t)n * nkv * hd, 2.0f), *h1 = malloc((size_t)hd * sizeof *h1);
    float *zero = calloc((size_t)2 * max_blocks * bs * nkv * hd, sizeof *zero);
    for (int i = 0; i < hd; i++) h1[i] = 1.0f;
    for (int i = 0; i < 2; i++) {
      pair_alloc(&q[i], HB_F32, n, (int64_t)nq * hd);
      pair_alloc(&k[i], HB_F32, n, (int64_t)nkv * hd);
      pair_alloc(&v[i], HB_F32, n, (int64_t)nkv * hd);
      pair_set(&q[i], hq); pair_set(&k[i], hk); pair_set(&v[i], hv);
      kv_alloc(&kv[i], 2 * max_blocks, bs, nkv, hd);
      G->write(gc, &kv[i].g.k, 0, 2 * max_blocks * bs, zero);
      G->write(gc, &kv[i].g.v, 0, 2 * max_blocks * bs, zero);
    }
    weight_pair(&qn, HB_F32, 1, hd, 1.5f);
    weight_pair(&kn, HB_F32, 1, hd, 1.5f);
    pair_alloc(&ones, HB_F32, 1, hd);
    struct hb_host_weight hw = {HB_F32, 1, hd, h1, NULL, NULL};
    G->release(gc, &ones.g);
    if (G->weight_upload(gc, &ones.g, &hw, &err)) fprintf(stderr, "weight_upload: %s\n", err.msg);
    /* plain: what model/gemma4.c runs without the fusion */
    G->rmsnorm(gc, &q[0].g, &q[0].g, &qn.g, eps, 0.0f);
    G->rope_prop(gc, &q[0].g, &st.b, nq, hd, qs[r].pairs, qs[r].theta, qs[r].factor);
    if (qs[r].own) {
      G->rmsnorm(gc, &k[0].g, &k[0].g, &kn.g, eps, 0.0f);
      G->rope_prop(gc, &k[0].g, &st.b, nkv, hd, qs[r].pairs, qs[r].theta, qs[r].factor);
      G->rmsnorm(gc, &v[0].g, &v[0].g, &ones.g, eps, 0.0f);
      G->kv_write(gc, &kv[0].g, &k[0].g, &v[0].g, &st.b);
    }
    CHECK(hb_cuda_g4_qkv_post(gc, &q[1].g, &k[1].g, &v[1].g, &qn.g, &kn.g, eps, qs[r].own ? &kv[1].g : NULL, &st.b,
                              nq, nkv, hd, qs[r].pairs, qs[r].theta, qs[r].factor) == 0);
    char what[112];
    snprintf(what, sizeof what, "g4_qkv_post q (%d heads of %d, %d pairs%s)", nq, hd, qs[r].pairs,
             qs[r].own ? "" : ", shared");
    gpu_same(&q[0].g, &q[1].g, n, what);
    snprintf(what, sizeof what, "g4_qkv_post cache k (%d kv heads of %d)", nkv, hd);
    gpu_same(&kv[0].g.k, &kv[1].g.k, 2 * max_blocks * bs, what);
    snprintf(what, sizeof what, "g4_qkv_post cache v (%d kv heads of %d)", nkv, hd);
    gpu_same(&kv[0].g.v, &kv[1].g.v, 2 * max_blocks * bs, what);
    for (int i = 0; i < 2; i++) { pair_free(&q[i]); pair_free(&k[i]); pair_free(&v[i]); kv_free(&kv[i]); }
    pair_free(&qn); pair_free(&kn); pair_free(&ones);
    free(hq); free(hk); free(hv); free(h1); free(zero);
  }
  /* a head dim the kernel does not hold in one lane pair declines without touching anything */
  {
    struct tb st;
    int ctx[1] = {5}, nt[1] = {1};
    make_batch(&st, 1, ctx, nt, 16, 4);
    G->batch_upload(gc, &st.b, &err);
    struct pair q, qn;
    pair_alloc(&q, HB_F32, 1, 4 * 32);
    weight_pair(&qn, HB_F32, 1, 32, 1.0f);
    CHECK(hb_cuda_g4_qkv_post(gc, &q.g, NULL, NULL, &qn.g, NULL, eps, NULL, &st.b, 4, 0, 32, 16, 1e4f, 1.0f) == 1);
    pair_free(&q); pair_free(&qn);
  }
  /* norm_add: the warp-per-row form (d < 1024) and the block-per-row one, with and without the layer scalar */
  static const struct { int n, d; float s; } na[] = {{1, 640, 1.0f}, {5, 640, 0.37f}, {1, 2560, 1.0f}, {3, 2560, 0.5f},
                                                      {2, 3840, 1.7f}, {9, 1000, 0.9f}};
  for (size_t r = 0; r < sizeof na / sizeof na[0]; r++) {
    const int n = na[r].n, d = na[r].d;
    struct pair x[2], y[2], w;
    float *hx = randv((int64_t)n * d, 20.0f), *hy = randv((int64_t)n * d, 3.0f);
    for (int i = 0; i < 2; i++) {
      pair_alloc(&x[i], HB_F32, n, d);
      pair_alloc(&y[i], HB_F32, n, d);
      pair_set(&x[i], hx); pair_set(&y[i], hy);
    }
    weight_pair(&w, HB_F32, 1, d, 2.0f);
    G->rmsnorm(gc, &y[0].g, &y[0].g, &w.g, eps, 0.0f);
    G->add(gc, &x[0].g, &y[0].g, n);
    G->scale(gc, &x[0].g, na[r].s, n);
    hb_cuda_norm_add(gc, &x[1].g, &y[1].g, &w.g, eps, na[r].s, n);
    char what[96];
    snprintf(what, sizeof what, "norm_add n=%d d=%d s=%g", n, d, (double)na[r].s);
    gpu_same(&x[0].g, &x[1].g, n, what);
    for (int i = 0; i < 2; i++) { pair_free(&x[i]); pair_free(&y[i]); }
    pair_free(&w);
    free(hx); free(hy);
  }
}

/* a cache tensor of n_blocks · bs rows in the activation type (other = 0) or the other float type (1: f32 on the fast
 * path, f16 on the exact one), every element NaN */
static void kv_nan(struct hb_tensor *t, int other, int64_t rows, int64_t cols) {
  struct hearth_err err = {0};
  int rc = !other ? G->alloc(gc, t, HB_F32, rows, cols, &err)
                  : g_exact ? G->alloc(gc, t, HB_F16, rows, cols, &err) : G->alloc_f32(gc, t, rows, cols, &err);
  if (rc) fprintf(stderr, "alloc: %s\n", err.msg);
  float *h = malloc((size_t)(rows * cols) * sizeof *h);
  for (int64_t i = 0; i < rows * cols; i++) h[i] = NAN;
  G->write(gc, t, 0, rows, h);
  free(h);
}

/* two caches after the same batch: the rows at the batch's slots hold the same bits and are finite, every other row is
 * still the NaN both started with (nothing written outside the slots) */
static void cache_same(const struct hb_tensor *a, const struct hb_tensor *b, const struct tb *st, const char *what) {
  struct hearth_err err = {0};
  const int64_t rows = a->rows, cols = a->cols;
  float *ha = malloc((size_t)(rows * cols) * sizeof *ha), *hb = malloc((size_t)(rows * cols) * sizeof *hb);
  char *slot = calloc((size_t)rows, 1);
  int rc = G->read(gc, a, 0, rows, ha) | G->read(gc, b, 0, rows, hb);
  if (rc || G->sync(gc, &err)) {
    fprintf(stderr, "%s: gpu error: %s\n", what, err.msg);
    test_failures++;
  } else {
    for (int i = 0; i < st->b.n_tokens; i++) {
      const int p = st->pos[i], bs = st->b.block_size;
      slot[(int64_t)st->bt[st->seq[i] * st->b.max_blocks + p / bs] * bs + p % bs] = 1;
    }
    int64_t diff = 0, bad = 0, stray = 0;
    for (int64_t r = 0; r < rows; r++)
      for (int64_t c = 0; c < cols; c++) {
        const int64_t i = r * cols + c;
        if (slot[r]) {
          diff += memcmp(&ha[i], &hb[i], sizeof ha[i]) != 0;
          bad += !isfinite(hb[i]);
        } else {
          stray += !isnan(ha[i]) || !isnan(hb[i]);
        }
      }
    printf("  %-52s %lld of %lld differ\n", what, (long long)diff, (long long)st->b.n_tokens * cols);
    CHECKF(diff == 0 && bad == 0 && stray == 0,
           "%s: %lld values differ from the plain ops, %lld non-finite, %lld written outside the batch's slots", what,
           (long long)diff, (long long)bad, (long long)stray);
  }
  free(ha); free(hb); free(slot);
}

/* rope_kv_write with Qwen3's per-head q/k norms folded in, against rmsnorm(q) + rmsnorm(k) + rope_kv_write on the same
 * inputs: q and the cache rows the same bits (f16 activations on the fast path, f32 on the exact one; a cache of the
 * other float type too); q also against the CPU op sequence. Qwen3-Embedding-0.6B's heads (16 q, 8 kv of 128) at one
 * token (decode), three tokens of two sequences and ~600 of three (an embedding batch), an odd small shape at 64, and
 * head dim 256; then the shapes it declines, leaving q as it was */
static void check_rope_kv_norm(void) {
  struct hearth_err err = {0};
  const float eps = 1e-6f, theta = 1000000.0f;
  static const struct { int nq, nkv, hd, ns, ctx[3], nt[3], other; } rc[] = {
    {16, 8, 128, 1, {40}, {1}, 0},
    {16, 8, 128, 2, {40, 300}, {1, 2}, 0},
    {16, 8, 128, 3, {0, 0, 17}, {250, 201, 150}, 0},
    {16, 8, 128, 2, {0, 5}, {37, 90}, 1},
    {5, 1, 64, 2, {3, 0}, {4, 3}, 0},
    {3, 3, 64, 1, {0}, {9}, 1},
    {4, 2, 256, 2, {20, 0}, {3, 30}, 0},
  };
  for (size_t r = 0; r < sizeof rc / sizeof rc[0]; r++) {
    const int nq = rc[r].nq, nkv = rc[r].nkv, hd = rc[r].hd, ns = rc[r].ns, bs = 16, max_blocks = 32;
    struct tb st;
    int ctx[3], nt[3];
    for (int i = 0; i < 3; i++) { ctx[i] = rc[r].ctx[i]; nt[i] = rc[r].nt[i]; }
    make_batch(&st, ns, ctx, nt, bs, max_blocks);
    C->batch_upload(cc, &st.b, &err);
    if (G->batch_upload(gc, &st.b, &err)) fprintf(stderr, "batch_upload: %s\n", err.msg);
    const int n = st.b.n_tokens;
    struct pair q[2], k[2], v[2], qn, kn;
    struct hb_tensor kc[2], vc[2];
    float *hq = randv((int64_t)n * nq * hd, 3.0f), *hk = randv((int64_t)n * nkv * hd, 3.0f),
          *hv = randv((int64_t)n * nkv * hd, 2.0f);
    for (int i = 0; i < 2; i++) {
      pair_alloc(&q[i], HB_F32, n, (int64_t)nq * hd);
      pair_alloc(&k[i], HB_F32, n, (int64_t)nkv * hd);
      pair_alloc(&v[i], HB_F32, n, (int64_t)nkv * hd);
      pair_set(&q[i], hq); pair_set(&k[i], hk); pair_set(&v[i], hv);
      kv_nan(&kc[i], rc[r].other, (int64_t)ns * max_blocks * bs, (int64_t)nkv * hd);
      kv_nan(&vc[i], rc[r].other, (int64_t)ns * max_blocks * bs, (int64_t)nkv * hd);
    }
    struct hb_kv_layer kv[2] = {{.k = kc[0], .v = vc[0], .n_kv_heads = nkv, .head_dim = hd},
                                {.k = kc[1], .v = vc[1], .n_kv_heads = nkv, .head_dim = hd}};
    weight_pair(&qn, HB_F32, 1, hd, 1.5f);
    weight_pair(&kn, HB_F32, 1, hd, 1.5f);
    /* plain: what model/blocks.c runs without the fold */
    G->rmsnorm(gc, &q[0].g, &q[0].g, &qn.g, eps, 0.0f);
    G->rmsnorm(gc, &k[0].g, &k[0].g, &kn.g, eps, 0.0f);
    CHECK(hb_cuda_rope_kv_write(gc, &q[0].g, &k[0].g, &v[0].g, &kv[0], &st.b, nq, hd, theta, NULL, NULL, 0.0f) == 0);
    CHECK(hb_cuda_rope_kv_write(gc, &q[1].g, &k[1].g, &v[1].g, &kv[1], &st.b, nq, hd, theta, &qn.g, &kn.g, eps) == 0);
    char what[112];
    snprintf(what, sizeof what, "rope_kv_write+qk norm q (%d+%d heads of %d, n %d%s)", nq, nkv, hd, n,
             rc[r].other ? ", other cache type" : "");
    gpu_same(&q[0].g, &q[1].g, n, what);
    snprintf(what, sizeof what, "rope_kv_write+qk norm cache k (n %d)", n);
    cache_same(&kv[0].k, &kv[1].k, &st, what);
    snprintf(what, sizeof what, "rope_kv_write+qk norm cache v (n %d)", n);
    cache_same(&kv[0].v, &kv[1].v, &st, what);
    /* and q against the CPU's rmsnorm + rope_neox (its own tolerance: a different sin/cos and f16 roundings) */
    C->rmsnorm(cc, &q[1].c, &q[1].c, &qn.c, eps, 0.0f);
    C->rope_neox(cc, &q[1].c, &st.b, nq, hd, hd, theta);
    snprintf(what, sizeof what, "rope_kv_write+qk norm q vs cpu (n %d, hd %d)", n, hd);
    cmp(&q[1], n, what, g_exact ? 1e-4 : 3e-3);
    for (int i = 0; i < 2; i++) {
      pair_free(&q[i]); pair_free(&k[i]); pair_free(&v[i]);
      G->release(gc, &kc[i]); G->release(gc, &vc[i]);
    }
    pair_free(&qn); pair_free(&kn);
    free(hq); free(hk); free(hv);
  }
  /* declined (1, nothing done): head dim 32 (half a rotation is not a lane's pair), a partial rotation, one norm alone;
   * without norms the same call runs */
  {
    struct tb st;
    int ctx[1] = {5}, nt[1] = {2};
    make_batch(&st, 1, ctx, nt, 16, 4);
    G->batch_upload(gc, &st.b, &err);
    static const struct { int hd, n_rot, one; } dc[] = {{32, 32, 0}, {128, 64, 0}, {128, 128, 1}};
    for (size_t d = 0; d < sizeof dc / sizeof dc[0]; d++) {
      const int hd = dc[d].hd, nq = 4, nkv = 2;
      struct pair q, k, v, qn, kn;
      struct hb_tensor kc, vc, q0;
      pair_rand(&q, HB_F32, 2, (int64_t)nq * hd, 3.0f);
      pair_rand(&k, HB_F32, 2, (int64_t)nkv * hd, 3.0f);
      pair_rand(&v, HB_F32, 2, (int64_t)nkv * hd, 3.0f);
      weight_pair(&qn, HB_F32, 1, hd, 1.0f);
      weight_pair(&kn, HB_F32, 1, hd, 1.0f);
      kv_nan(&kc, 0, 4 * 16, (int64_t)nkv * hd);
      kv_nan(&vc, 0, 4 * 16, (int64_t)nkv * hd);
      struct hb_kv_layer kv = {.k = kc, .v = vc, .n_kv_heads = nkv, .head_dim = hd};
      if (G->alloc(gc, &q0, HB_F32, 2, (int64_t)nq * hd, &err)) fprintf(stderr, "alloc: %s\n", err.msg);
      float *h = malloc((size_t)2 * nq * hd * sizeof *h);
      G->read(gc, &q.g, 0, 2, h);
      G->write(gc, &q0, 0, 2, h);
      CHECK(hb_cuda_rope_kv_write(gc, &q.g, &k.g, &v.g, &kv, &st.b, nq, dc[d].n_rot, theta, &qn.g,
                                  dc[d].one ? NULL : &kn.g, eps) == 1);
      char what[96];
      snprintf(what, sizeof what, "rope_kv_write+qk norm declined (hd %d, n_rot %d%s): q", hd, dc[d].n_rot,
               dc[d].one ? ", q norm alone" : "");
      gpu_same(&q0, &q.g, 2, what);
      CHECK(hb_cuda_rope_kv_write(gc, &q.g, &k.g, &v.g, &kv, &st.b, nq, dc[d].n_rot, theta, NULL, NULL, 0.0f) == 0);
      CHECK(G->sync(gc, &err) == 0);
      pair_free(&q); pair_free(&k); pair_free(&v); pair_free(&qn); pair_free(&kn);
      G->release(gc, &kc); G->release(gc, &vc); G->release(gc, &q0);
      free(h);
    }
  }
}

/* gelu_matmul (the PLE gate's GELU in the projection GEMV's prologue) against gelu_mul + matmul: the same bits on the
 * fast path, at the E2B/E4B widths (PLE slice 256 of L·256 per-layer inputs, hidden 1536 / 2560), 1 and 3 tokens; the
 * exact path declines it (the model then runs the plain ops) */
static void check_gelu_matmul(void) {
  static const struct { int n, d, L, layer; } gm[] = {{1, 2560, 4, 3}, {3, 2560, 4, 1}, {1, 1536, 3, 0}, {8, 2560, 2, 1}};
  const int S = 256;
  for (size_t r = 0; r < sizeof gm / sizeof gm[0]; r++) {
    const int n = gm[r].n, d = gm[r].d, col0 = gm[r].layer * S;
    struct pair g[2], ple, o[2], w, g_keep;
    float *hg = randv((int64_t)n * S, 3.0f);
    for (int i = 0; i < 2; i++) {
      pair_alloc(&g[i], HB_F32, n, S);
      pair_set(&g[i], hg);
      pair_alloc(&o[i], HB_F32, n, d);
      pair_poison(&o[i]);
    }
    pair_alloc(&g_keep, HB_F32, n, S);
    pair_set(&g_keep, hg);
    pair_rand(&ple, HB_F32, n, (int64_t)gm[r].L * S, 2.0f);
    weight_pair(&w, HB_Q4, d, S, 0.5f);
    int rc = hb_cuda_gelu_matmul(gc, &o[1].g, &g[1].g, &ple.g, col0, &w.g, n);
    CHECKF(rc == (g_exact ? 1 : 0), "gelu_matmul n=%d d=%d returned %d (exact %d)", n, d, rc, g_exact);
    if (!g_exact) {
      G->gelu_mul(gc, &g[0].g, &g[0].g, &ple.g, col0, n);
      G->matmul(gc, &o[0].g, &g[0].g, &w.g, NULL, n);
      char what[96];
      snprintf(what, sizeof what, "gelu_matmul n=%d %dx%d ple cols %d..%d", n, d, S, col0, col0 + S);
      gpu_same(&o[0].g, &o[1].g, n, what);
      gpu_same(&g_keep.g, &g[1].g, n, "gelu_matmul leaves the gate as it was");
    }
    for (int i = 0; i < 2; i++) { pair_free(&g[i]); pair_free(&o[i]); }
    pair_free(&g_keep); pair_free(&ple); pair_free(&w);
    free(hg);
  }
}

/* add_norm_matmul (a norm_add folded into the next GEMV's prologue, x' to a second buffer) against norm_add in place
 * followed by the plain projection: the projection's outputs and x' must have the plain ops' bits, x and y unchanged.
 * Forms: the QKV norm_matmul (3 weights), the GeGLU gate/up (norm_swiglu's epilogue) and the PLE gate (no norm), at the
 * E4B width (2560: q 2048, k/v 512, ff 10240, PLE 256), the 12B's (3840: norm_add's block reduction over 15 chunks) and
 * a narrow one (640: norm_add's one-warp reduction), 1 and 3 tokens (and 8), with and without the layer scalar. The
 * exact path (f32 activations) declines it. */
enum { ANM_QKV, ANM_GLU, ANM_PLAIN };
static void check_add_norm_matmul_case(int form, int d, int n, float s, int ff) {
  const float eps = 1e-6f;
  int rows[3] = {0, 0, 0}, n_mm = 0;
  if (form == ANM_QKV) { rows[0] = 2048; rows[1] = rows[2] = 512; n_mm = 3; }
  if (form == ANM_GLU) { rows[0] = rows[1] = ff; n_mm = 2; }
  if (form == ANM_PLAIN) { rows[0] = 256; n_mm = 1; }
  struct pair x[2], y, xo, aw, nw, w[3], o[2][3], x_keep, y_keep;
  float *hx = randv((int64_t)n * d, 20.0f), *hy = randv((int64_t)n * d, 3.0f);
  for (int i = 0; i < 2; i++) { pair_alloc(&x[i], HB_F32, n, d); pair_set(&x[i], hx); }
  pair_alloc(&x_keep, HB_F32, n, d); pair_set(&x_keep, hx);
  pair_alloc(&y, HB_F32, n, d); pair_set(&y, hy);
  pair_alloc(&y_keep, HB_F32, n, d); pair_set(&y_keep, hy);
  pair_alloc(&xo, HB_F32, n, d); pair_poison(&xo);
  weight_pair(&aw, HB_F32, 1, d, 2.0f);
  weight_pair(&nw, HB_F32, 1, d, 1.5f);
  for (int m = 0; m < n_mm; m++) {
    weight_pair(&w[m], HB_Q4, rows[m], d, 0.5f);
    for (int i = 0; i < 2; i++) { pair_alloc(&o[i][m], HB_F32, n, rows[m]); pair_poison(&o[i][m]); }
  }
  struct hb_tensor *o0[3] = {&o[0][0].g, &o[0][1].g, &o[0][2].g}, *o1[3] = {&o[1][0].g, &o[1][1].g, &o[1][2].g};
  const struct hb_tensor *wg[3] = {&w[0].g, &w[1].g, &w[2].g};
  const int act = form == ANM_GLU ? HB_ACT_GELU_TANH : -1;
  int rc = hb_cuda_add_norm_matmul(gc, &xo.g, &x[1].g, &y.g, &aw.g, s, form == ANM_PLAIN ? NULL : &nw.g, eps, n_mm, o1,
                                   wg, act, n);
  /* it declines on the exact path and above 4 rows (gemv_q4.cu ADD_FOLD_MAX_N: measured slower at 8) */
  CHECKF(rc == (g_exact || n > 4 ? 1 : 0), "add_norm_matmul form %d d=%d n=%d returned %d (exact %d)", form, d, n, rc,
         g_exact);
  if (!g_exact && rc == 0) {
    /* the plain sequence: norm_add in place, then the projection reading x */
    hb_cuda_norm_add(gc, &x[0].g, &y.g, &aw.g, eps, s, n);
    if (form == ANM_GLU)
      CHECK(hb_cuda_norm_swiglu(gc, &x[0].g, &nw.g, eps, &w[0].g, &w[1].g, &o[0][0].g, n, HB_ACT_GELU_TANH) == 0);
    else
      hb_cuda_norm_matmul(gc, &x[0].g, form == ANM_PLAIN ? NULL : &nw.g, eps, 0.0f, n_mm, o0, wg, NULL, n, 0);
    static const char *fn[] = {"qkv", "glu", "plain"};
    char what[112];
    snprintf(what, sizeof what, "add_norm_matmul %s d=%d n=%d s=%g: x'", fn[form], d, n, (double)s);
    gpu_same(&x[0].g, &xo.g, n, what);
    for (int m = 0; m < (form == ANM_GLU ? 1 : n_mm); m++) {
      snprintf(what, sizeof what, "add_norm_matmul %s d=%d n=%d s=%g: out %d (%d rows)", fn[form], d, n, (double)s, m,
               rows[m]);
      gpu_same(&o[0][m].g, &o[1][m].g, n, what);
    }
    gpu_same(&x_keep.g, &x[1].g, n, "add_norm_matmul leaves x as it was");
    gpu_same(&y_keep.g, &y.g, n, "add_norm_matmul leaves y as it was");
  }
  for (int m = 0; m < n_mm; m++) { pair_free(&w[m]); pair_free(&o[0][m]); pair_free(&o[1][m]); }
  for (int i = 0; i < 2; i++) pair_free(&x[i]);
  pair_free(&x_keep); pair_free(&y); pair_free(&y_keep); pair_free(&xo); pair_free(&aw); pair_free(&nw);
  free(hx); free(hy);
}
static void check_add_norm_matmul(void) {
  static const struct { int form, d, n; float s; int ff; } cs[] = {
    {ANM_QKV, 2560, 1, 1.0f, 0},     {ANM_QKV, 2560, 3, 0.37f, 0},   {ANM_QKV, 3840, 1, 0.5f, 0},
    {ANM_QKV, 3840, 3, 1.0f, 0},     {ANM_QKV, 640, 3, 1.0f, 0},     {ANM_QKV, 2560, 4, 1.0f, 0},
    {ANM_QKV, 2560, 8, 1.0f, 0}, /* declines */
    {ANM_GLU, 2560, 1, 1.0f, 10240}, {ANM_GLU, 2560, 3, 1.0f, 10240}, {ANM_GLU, 3840, 1, 1.0f, 2048},
    {ANM_GLU, 640, 2, 1.0f, 512},    {ANM_PLAIN, 2560, 1, 1.0f, 0},  {ANM_PLAIN, 2560, 3, 1.0f, 0},
    {ANM_PLAIN, 1536, 1, 1.0f, 0},
  };
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++)
    check_add_norm_matmul_case(cs[i].form, cs[i].d, cs[i].n, cs[i].s, cs[i].ff);
}

static void check_argmax(void) {
  struct hearth_err err = {0};
  int n = 3, vocab = 151936;
  struct pair lg;
  pair_rand(&lg, HB_F32, n, vocab, 8.0f);
  struct hb_tensor ids, lp;
  G->alloc(gc, &ids, HB_I32, n, 1, &err);
  G->alloc(gc, &lp, HB_F32, n, 1, &err);
  hb_cuda_argmax(gc, &lg.g, n, &ids, &lp);
  int32_t gid[3] = {-1, -1, -1};
  float glp[3] = {NAN, NAN, NAN};
  G->read(gc, &ids, 0, n, gid);
  G->read(gc, &lp, 0, n, glp);
  float *h = malloc((size_t)vocab * n * sizeof *h);
  G->read(gc, &lg.g, 0, n, h); /* what the device holds (f16-rounded on the fast path) */
  for (int r = 0; r < n; r++) {
    const float *row = h + (int64_t)r * vocab;
    int best = 0;
    for (int i = 1; i < vocab; i++) if (row[i] > row[best]) best = i;
    double s = 0;
    for (int i = 0; i < vocab; i++) s += exp((double)row[i] - row[best]);
    double ref = -log(s);
    printf("  argmax row %d: gpu %d cpu %d, logprob gpu %.5f ref %.5f\n", r, gid[r], best, glp[r], ref);
    CHECK(gid[r] == best);
    CHECK(fabs(glp[r] - ref) < 1e-3 + 1e-3 * fabs(ref));
  }
  free(h);
  G->release(gc, &ids); G->release(gc, &lp);
  pair_free(&lg);
}

static void run_all(int exact) {
  if (setup(exact)) return;
  double mt = exact ? 1e-5 : 4e-3;    /* q4 GEMV: f16 x (was 1.5e-2 with int8 x) */
  double mg = exact ? 1e-5 : 4e-3;    /* q4: f16 tensor-core GEMM */
  double md = exact ? 1e-5 : 4e-3;    /* dense weights, f16 activations */
  double ew = exact ? 1e-6 : 1e-3;    /* elementwise in f16 */
  double at = exact ? 5e-5 : 4e-3;
  for (int n = 1; n <= 8; n++) check_matmul(HB_Q4, 384, 1024, n, n == 3, mt);
  check_matmul(HB_Q4, 2560, 2048, 1, 1, mt);
  check_matmul(HB_Q4, 2048, 11008, 4, 0, mt);    /* 88 KB of x: the GEMM by default (48 KB), the GEMV in *_xmaxall */
  check_matmul(HB_Q4, 2048, 11008, 1, 1, mt);  /* 3B down_proj + residual at one token (16-warp blocks) */
  check_matmul(HB_Q4, 136, 896, 2, 0, mt);
  check_matmul(HB_Q4, 256, 11008, 8, 0, mt);   /* 176 KB of f16 x: the GEMM by default, the GEMV in *_xmaxall */
  check_matmul(HB_Q4, 32768, 2048, 1, 0, mt);  /* LM-head-like: 1-2 warps per 16-row tile */
  check_matmul(HB_Q4, 16384, 896, 3, 1, mt);   /* 7 groups per row: padded steps */
  check_matmul(HB_Q4, 24, 4864, 5, 1, mt);     /* one and a half tiles, 38 groups over 8 warps */
  check_matmul(HB_Q4, 100, 256, 2, 0, mt);     /* fewer groups (2) than warps */
  check_matmul(HB_Q4, 16384, 1664, 2, 0, mt);  /* 13 groups: a short last step (2 or 4 groups per step) */
  check_matmul(HB_Q4, 16384, 2944, 1, 1, mt);  /* 23 groups */
  check_matmul(HB_Q4, 21, 896, 1, 1, mt);      /* rows not a multiple of 8 (padded blocks), 7 groups */
  if (!exact) { check_matmul_f32out(20000, 2048, 1, mt); check_matmul_f32out(3000, 896, 8, mt); }
  check_matmul(HB_Q4, 384, 1024, 9, 0, mg);
  check_matmul(HB_Q4, 1152, 896, 71, 1, mg);
  check_matmul(HB_Q4, 1152, 896, 50, 1, mg);   /* BM = 64 tiles */
  check_matmul(HB_Q4, 100, 896, 40, 1, mg);    /* rows not a multiple of 8 */
  check_matmul(HB_Q4, 640, 2048, 64, 0, mg);    /* BM = 64, full */
  check_matmul(HB_Q4, 2048, 2048, 17, 1, mg);   /* BM = 32 tiles, split-K */
  check_matmul(HB_Q4, 200, 4864, 300, 0, mg);  /* split-K (grid under one wave) */
  check_matmul(HB_Q4, 2048, 512, 1100, 1, mg);  /* 16 x 9 tiles: no split */
  check_matmul(HB_Q4, 256, 11008, 32, 0, mg);   /* decode x32 down_proj-like: deep split-K */
  check_matmul(HB_BF16, 300, 640, 5, 1, md);
  check_matmul(HB_F32, 130, 256, 70, 0, md);
  check_embed(HB_Q4, ew);
  check_embed(HB_BF16, ew);
  check_rmsnorm(5, 2048, 2048, 0.0f, ew * 2);
  check_rmsnorm(3, 1100, 1100, 0.5f, ew * 2);  /* block-per-row kernel, scalar loads */
  check_rmsnorm(6, 16 * 128, 128, 1.0f, ew * 2);
  check_elementwise(ew * 2);
  { int c[3] = {70, 300, 1}, nt[3] = {1, 1, 1}; check_attention(3, c, nt, 16, 2, 128, 0, 0.0f, at); }
  { int c[3] = {1100, 5, 17}, nt[3] = {1, 1, 1}; check_attention(3, c, nt, 14, 2, 64, 0, 0.0f, at); }
  { int c[3] = {128, 31, 64}, nt[3] = {1, 1, 1}; check_attention(3, c, nt, 16, 2, 128, 0, 0.0f, at); }
  { int c[2] = {1500, 257}, nt[2] = {1, 1}; check_attention(2, c, nt, 16, 2, 256, 0, 0.0f, at); }
  { int c[2] = {500, 40}, nt[2] = {1, 1}; check_attention(2, c, nt, 8, 8, 128, 128, 30.0f, at); }
  { int c[1] = {0}, nt[1] = {71}; check_attention(1, c, nt, 16, 2, 128, 0, 0.0f, at); }
  { int c[2] = {30, 100}, nt[2] = {40, 70}; check_attention(2, c, nt, 14, 2, 64, 0, 0.0f, at); }
  { int c[2] = {0, 64}, nt[2] = {100, 33}; check_attention(2, c, nt, 16, 8, 128, 50, 0.0f, at); }
  { int c[1] = {9}, nt[1] = {40}; check_attention(1, c, nt, 4, 2, 256, 0, 20.0f, at); }
  { int c[2] = {300, 7}, nt[2] = {1, 1}; check_attention(2, c, nt, 4, 2, 32, 0, 0.0f, at); }  /* hd 32 (tiny fixtures) */
  { int c[1] = {5}, nt[1] = {30}; check_attention(1, c, nt, 4, 2, 32, 0, 0.0f, at); }
  /* round 4 decode kernel: many sequences, windows, one-key rows, GQA 7 and 8, lengths around the split size */
  { int c[4] = {1700, 65, 2, 129}, nt[4] = {1, 1, 1, 1}; check_attention(4, c, nt, 16, 2, 128, 64, 0.0f, at); } /* sum of contexts <= 2048: struct tb */
  { int c[4] = {0, 700, 33, 16}, nt[4] = {1, 1, 1, 1}; check_attention(4, c, nt, 14, 2, 64, 100, 0.0f, at); }
  { int c[5] = {15, 16, 17, 31, 1023}, nt[5] = {1, 1, 1, 1, 1}; check_attention(5, c, nt, 12, 2, 128, 0, 50.0f, at); }
  /* round 7 decode kernel (keys through shared memory): several new tokens of one sequence (the keys
   * the batch writes are copied after the wait), one pass vs several splits, a split longer than one
   * pass (8 tokens: 2 splits of 501 keys, walked 224 at a time), hd 64 at its 256-key pass */
  { int c[2] = {300, 50}, nt[2] = {3, 2}; check_attention(2, c, nt, 16, 2, 128, 0, 0.0f, at); }
  { int c[8] = {1000, 100, 50, 30, 20, 10, 5, 1}, nt[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    check_attention(8, c, nt, 16, 2, 128, 0, 0.0f, at); }
  { int c[3] = {255, 256, 900}, nt[3] = {1, 1, 2}; check_attention(3, c, nt, 14, 2, 64, 0, 0.0f, at); }
  { int c[2] = {600, 95}, nt[2] = {1, 1}; check_attention(2, c, nt, 8, 4, 256, 0, 30.0f, at); }
  /* decode batches past 8 rows (session 39): every row at most 256 keys takes attn_decode_smem (f16 only: the fast
   * group) with one split and the keys a pass for one wave — x16 3B-like, x32 0.5B-like, x9 hd 256 with a window and
   * softcap at exactly 256 keys, x10 hd 256 in several passes, 4 sequences of 3 new tokens (a verify-like batch);
   * a row over 256 keys sends the batch to the split-key kernel. Each case counts the wide launches. */
  {
    long w = hb_cuda_attn_wide_launches(gc);
#define WIDE(expect, what)                                                                                  \
  do {                                                                                                      \
    const long now = hb_cuda_attn_wide_launches(gc), want = w + (g_exact ? 0 : (expect));                   \
    CHECKF(now == want, "%s: %ld wide attn_decode_smem launches, expected %ld", what, now - w, want - w);   \
    w = now;                                                                                                \
  } while (0)
    { int c[16], nt[16];
      for (int i = 0; i < 16; i++) { c[i] = (i * 37) % 250; nt[i] = 1; }
      check_attention(16, c, nt, 16, 2, 128, 0, 0.0f, at); WIDE(1, "x16 hd128"); }
    { int c[32], nt[32];
      for (int i = 0; i < 32; i++) { c[i] = i == 5 ? 0 : i == 31 ? 250 : (i * 29) % 120; nt[i] = 1; } /* <= 2,048 tokens */
      check_attention(32, c, nt, 14, 2, 64, 0, 0.0f, at); WIDE(1, "x32 hd64"); }
    { int c[9] = {200, 3, 100, 64, 255, 17, 128, 1, 90}, nt[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
      check_attention(9, c, nt, 8, 4, 256, 48, 30.0f, at); WIDE(1, "x9 hd256 window"); }
    { int c[10] = {250, 199, 180, 7, 160, 240, 33, 120, 222, 201}, nt[10] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
      check_attention(10, c, nt, 8, 2, 256, 0, 0.0f, at); WIDE(1, "x10 hd256 passes"); }
    { int c[4] = {100, 0, 253, 40}, nt[4] = {3, 3, 3, 3};
      check_attention(4, c, nt, 16, 2, 128, 0, 0.0f, at); WIDE(1, "4 x 3 tokens hd128"); }
    { int c[12] = {600, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110}, nt[12] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
      check_attention(12, c, nt, 16, 2, 128, 0, 0.0f, at); WIDE(0, "x12 with a 600-key row"); }
#undef WIDE
  }
  /* prefill on tensor cores (fast group: attn_prefill_mma; exact group: the SIMT kernel): a long prompt
   * (16 query tiles, heaviest first), 3 sequences whose tokens start and end inside 64-query tiles,
   * the Qwen2.5-0.5B shape (GQA 7), a window crossing key tiles, hd 256 with softcap (32-key tiles,
   * Q re-read from shared memory), 8 sequences of 9 tokens in two tiles (up to 8 segments a tile) */
  { int c[1] = {0}, nt[1] = {1000}; check_attention(1, c, nt, 16, 2, 128, 0, 0.0f, at); }
  { int c[3] = {0, 5, 100}, nt[3] = {17, 64, 65}; check_attention(3, c, nt, 16, 2, 128, 0, 0.0f, at); }
  { int c[2] = {0, 200}, nt[2] = {150, 90}; check_attention(2, c, nt, 14, 2, 64, 0, 0.0f, at); }
  { int c[1] = {50}, nt[1] = {300}; check_attention(1, c, nt, 16, 2, 128, 100, 0.0f, at); }
  { int c[1] = {20}, nt[1] = {200}; check_attention(1, c, nt, 8, 4, 256, 0, 50.0f, at); }
  { int c[8] = {0, 1, 15, 16, 17, 63, 64, 200}, nt[8] = {9, 9, 9, 9, 9, 9, 9, 9};
    check_attention(8, c, nt, 14, 2, 64, 0, 0.0f, at); }
  /* head_dim 512 (Gemma 4's full layers: attn_wide.cu): decode, several sequences, a window, a prefill, softcap */
  { int c[3] = {700, 5, 40}, nt[3] = {1, 1, 1}; check_attention(3, c, nt, 8, 1, 512, 0, 0.0f, at); }
  { int c[2] = {300, 9}, nt[2] = {1, 2}; check_attention(2, c, nt, 4, 2, 512, 100, 0.0f, at); }
  { int c[2] = {0, 33}, nt[2] = {70, 40}; check_attention(2, c, nt, 4, 2, 512, 0, 0.0f, at); }
  { int c[1] = {20}, nt[1] = {50}; check_attention(1, c, nt, 2, 1, 512, 16, 30.0f, at); }
  check_gemma4_ops(ew * 2);
  check_gemma4_fused();
  { /* the E4B's sliding layers (one split, several, past the window, the first key), a KV-shared one, the 12B's
     * heads with slices of several passes (8 rows: two splits), head dim 64; the full layers; then a batch it leaves
     * to the two ops */
    const int a[3] = {40, 700, 0}, b[8] = {700, 300, 1, 50, 96, 95, 191, 0}, c[2] = {300, 5}, d[2] = {9, 30};
    check_g4_post_attention(3, a, 1, 8, 2, 256, 128, 10000.0f, 1.0f, 512, 1, !g_exact);
    check_g4_post_attention(3, a, 1, 8, 2, 256, 128, 10000.0f, 1.0f, 512, 0, !g_exact);
    check_g4_post_attention(8, b, 1, 16, 8, 256, 64, 1000000.0f, 8.0f, 0, 1, !g_exact);
    check_g4_post_attention(2, c, 1, 4, 2, 64, 32, 10000.0f, 1.0f, 0, 1, !g_exact);
    /* the full layers (head dim 512, attn_decode): one split and several, a KV-shared one */
    check_g4_post_attention(2, c, 1, 8, 1, 512, 64, 1000000.0f, 1.0f, 0, 1, !g_exact);
    check_g4_post_attention(3, a, 1, 16, 8, 512, 64, 1000000.0f, 8.0f, 0, 1, !g_exact);
    check_g4_post_attention(3, a, 1, 8, 2, 512, 64, 1000000.0f, 1.0f, 0, 0, !g_exact);
    check_g4_post_attention(2, d, 2, 8, 2, 256, 128, 10000.0f, 1.0f, 512, 1, 0); /* two new keys a sequence */
  }
  check_rope_kv_norm();
  check_gelu_matmul();
  check_add_norm_matmul();
  check_argmax();
  teardown();
}

TEST_GROUP(exact) { run_all(1); }
TEST_GROUP(fast) { run_all(0); }

/* a captured kv_write + attention step replayed at three later positions; each replay must equal
 * the uncaptured CPU result at that position (positions/block tables come from batch_upload). prop: Gemma 4's
 * shape instead (head_dim 512 through attn_wide.cu, a window, q turned by rope_prop inside the graph) */
static void graph_steps(int prop) {
  if (setup(0)) return;
  struct hearth_err err = {0};
  int bs = 16, max_blocks = 64, n_heads = prop ? 4 : 16, n_kv = prop ? 1 : 2, hd = prop ? 512 : 128;
  struct kvpair kv;
  kv_alloc(&kv, 2 * max_blocks, bs, n_kv, hd);
  struct tb pre, st;
  int zero[2] = {0, 0}, ctx0[2] = {100, 300}, one[2] = {1, 1};
  make_batch(&pre, 2, zero, ctx0, bs, max_blocks);
  struct pair k, v, q, o;
  pair_rand(&k, HB_F32, pre.b.n_tokens, n_kv * hd, 1.0f);
  pair_rand(&v, HB_F32, pre.b.n_tokens, n_kv * hd, 1.0f);
  C->batch_upload(cc, &pre.b, &err);
  G->batch_upload(gc, &pre.b, &err);
  C->kv_write(cc, &kv.c, &k.c, &v.c, &pre.b);
  G->kv_write(gc, &kv.g, &k.g, &v.g, &pre.b);
  pair_free(&k); pair_free(&v);
  struct hb_attn_params ap = {n_heads, n_kv, hd, prop ? 1.0f : 1.0f / sqrtf((float)hd), prop ? 64 : 0, 0.0f};
  struct hb_cuda_graph *gr = NULL;
  /* and a fused norm+GEMV (launched with programmatic dependent launch) on an input rewritten each step */
  struct pair gx, gnw, gw, gxn, go;
  pair_alloc(&gx, HB_F32, 2, 1024);
  weight_pair(&gnw, HB_F32, 1, 1024, 1.0f);
  weight_pair(&gw, HB_Q4, 384, 1024, 0.5f);
  pair_alloc(&gxn, HB_F32, 2, 1024);
  pair_alloc(&go, HB_F32, 2, 384);
  pair_alloc(&q, HB_F32, 2, n_heads * hd);
  pair_alloc(&k, HB_F32, 2, n_kv * hd);
  pair_alloc(&v, HB_F32, 2, n_kv * hd);
  pair_alloc(&o, HB_F32, 2, n_heads * hd);
  for (int step = 0; step < 4; step++) {
    int c2[2] = {100 + step, 300 + step};
    make_batch(&st, 2, c2, one, bs, max_blocks);
    memcpy(st.bt, pre.bt, sizeof st.bt);
    float *h = randv(2 * n_heads * hd, 1.0f);
    pair_set(&q, h); free(h);
    h = randv(2 * n_kv * hd, 1.0f); pair_set(&k, h); free(h);
    h = randv(2 * n_kv * hd, 1.0f); pair_set(&v, h); free(h);
    pair_poison(&o);
    h = randv(2 * 1024, 2.0f); pair_set(&gx, h); free(h);
    pair_poison(&go);
    C->rmsnorm(cc, &gxn.c, &gx.c, &gnw.c, 1e-6f, 0.0f);
    C->matmul(cc, &go.c, &gxn.c, &gw.c, NULL, 2);
    struct hb_tensor *gop[1] = {&go.g};
    const struct hb_tensor *gwp[1] = {&gw.g};
    C->batch_upload(cc, &st.b, &err);
    CHECK(G->batch_upload(gc, &st.b, &err) == 0);
    if (prop) C->rope_prop(cc, &q.c, &st.b, n_heads, hd, hd / 8, 1000000.0f, 1.0f);
    C->kv_write(cc, &kv.c, &k.c, &v.c, &st.b);
    C->attention(cc, &o.c, &q.c, &kv.c, &st.b, &ap);
    if (step == 0) { /* uncaptured first (sizes scratch), then capture for the next steps */
      if (prop) G->rope_prop(gc, &q.g, &st.b, n_heads, hd, hd / 8, 1000000.0f, 1.0f);
      G->kv_write(gc, &kv.g, &k.g, &v.g, &st.b);
      G->attention(gc, &o.g, &q.g, &kv.g, &st.b, &ap);
      hb_cuda_norm_matmul(gc, &gx.g, &gnw.g, 1e-6f, 0.0f, 1, gop, gwp, NULL, 2, 0);
    } else {
      if (!gr) {
        CHECK(hb_cuda_capture_begin(gc, &err) == 0);
        if (prop) G->rope_prop(gc, &q.g, &st.b, n_heads, hd, hd / 8, 1000000.0f, 1.0f);
        G->kv_write(gc, &kv.g, &k.g, &v.g, &st.b);
        G->attention(gc, &o.g, &q.g, &kv.g, &st.b, &ap);
        hb_cuda_norm_matmul(gc, &gx.g, &gnw.g, 1e-6f, 0.0f, 1, gop, gwp, NULL, 2, 0);
        if (hb_cuda_capture_end(gc, &gr, &err)) { fprintf(stderr, "capture: %s\n", err.msg); test_failures++; break; }
      }
      if (hb_cuda_graph_launch(gc, gr, &err)) { fprintf(stderr, "launch: %s\n", err.msg); test_failures++; break; }
    }
    char what[64];
    snprintf(what, sizeof what, "graph step %d attention", step);
    cmp(&o, 2, what, 4e-3);
    snprintf(what, sizeof what, "graph step %d norm+GEMV (PDL)", step);
    cmp(&go, 2, what, 1.5e-2);
  }
  hb_cuda_graph_free(gr);
  pair_free(&gx); pair_free(&gnw); pair_free(&gw); pair_free(&gxn); pair_free(&go);
  pair_free(&q); pair_free(&k); pair_free(&v); pair_free(&o);
  kv_free(&kv);
  teardown();
}
TEST_GROUP(graph) { graph_steps(0); }
TEST_GROUP(graph_gemma4) { graph_steps(1); }

/* norm_matmul on the general path (n > 8: rmsnorm kernel, then one tensor-core GEMM over all n_mm
 * weights, the residual add in its epilogue) against rmsnorm + one matmul (+ add) per weight on the
 * CPU. norm 0: no rmsnorm (o_proj); add: outs[0] starts as a random residual, else it is poisoned. */
static void check_norm_matmul(int K, int n_mm, const int *rows, int n, int norm, int with_bias, int add,
                              double tol) {
  struct pair x, nw, xn, t, w[3], b[3], o[3];
  pair_rand(&x, HB_F32, n, K, 3.0f);
  if (norm) weight_pair(&nw, HB_F32, 1, K, 1.0f);
  pair_alloc(&xn, HB_F32, n, K);
  for (int i = 0; i < n_mm; i++) {
    weight_pair(&w[i], HB_Q4, rows[i], K, 0.5f);
    if (with_bias) weight_pair(&b[i], HB_F32, 1, rows[i], 0.5f);
    if (add) {
      pair_rand(&o[i], HB_F32, n, rows[i], 5.0f);
    } else {
      pair_alloc(&o[i], HB_F32, n, rows[i]);
      pair_poison(&o[i]);
    }
  }
  const struct hb_tensor *src = &x.c;
  if (norm) {
    C->rmsnorm(cc, &xn.c, &x.c, &nw.c, 1e-6f, 0.0f);
    src = &xn.c;
  }
  if (add) pair_alloc(&t, HB_F32, n, rows[0]);
  for (int i = 0; i < n_mm; i++) {
    if (add) {
      C->matmul(cc, &t.c, src, &w[i].c, with_bias ? &b[i].c : NULL, n);
      C->add(cc, &o[i].c, &t.c, n);
    } else {
      C->matmul(cc, &o[i].c, src, &w[i].c, with_bias ? &b[i].c : NULL, n);
    }
  }
  struct hb_tensor *og[3] = {&o[0].g, &o[1].g, &o[2].g};
  const struct hb_tensor *wg[3] = {&w[0].g, &w[1].g, &w[2].g}, *bg[3] = {&b[0].g, &b[1].g, &b[2].g};
  hb_cuda_norm_matmul(gc, &x.g, norm ? &nw.g : NULL, 1e-6f, 0.0f, n_mm, og, wg, with_bias ? bg : NULL, n, add);
  for (int i = 0; i < n_mm; i++) {
    char what[96];
    snprintf(what, sizeof what, "%s K=%d rows=%d (%d of %d) n=%d%s", norm ? "norm_matmul" : "matmul", K, rows[i], i,
             n_mm, n, add ? " +=" : with_bias ? " +bias" : "");
    cmp(&o[i], n, what, tol);
  }
  for (int i = 0; i < n_mm; i++) {
    pair_free(&w[i]); pair_free(&o[i]);
    if (with_bias) pair_free(&b[i]);
  }
  if (norm) pair_free(&nw);
  if (add) pair_free(&t);
  pair_free(&x); pair_free(&xn);
}

/* silu_matmul on the general path: silu_mul kernel, then the tensor-core GEMM (+ residual in its
 * epilogue) against silu_mul, matmul (+ add) on the CPU */
static void check_silu_matmul(int K, int rows, int n, int add, double tol) {
  struct pair gt, up, h, wd, r, t;
  pair_rand(&gt, HB_F32, n, K, 3.0f);
  pair_rand(&up, HB_F32, n, K, 2.0f);
  weight_pair(&wd, HB_Q4, rows, K, 0.5f);
  pair_alloc(&h, HB_F32, n, K);
  if (add) {
    pair_rand(&r, HB_F32, n, rows, 5.0f);
  } else {
    pair_alloc(&r, HB_F32, n, rows);
    pair_poison(&r);
  }
  C->silu_mul(cc, &h.c, &gt.c, &up.c, n);
  if (add) {
    pair_alloc(&t, HB_F32, n, rows);
    C->matmul(cc, &t.c, &h.c, &wd.c, NULL, n);
    C->add(cc, &r.c, &t.c, n);
  } else {
    C->matmul(cc, &r.c, &h.c, &wd.c, NULL, n);
  }
  hb_cuda_silu_matmul(gc, &gt.g, &up.g, &r.g, &wd.g, n, add);
  char what[96];
  snprintf(what, sizeof what, "silu_matmul K=%d rows=%d n=%d%s", K, rows, n, add ? " +=" : "");
  cmp(&r, n, what, tol);
  if (add) pair_free(&t);
  pair_free(&gt); pair_free(&up); pair_free(&h); pair_free(&wd); pair_free(&r);
}

/* the fused decode entry points of cuda_backend.h against the CPU op sequences they stand for */
/* attn_o: x += attention(q over the cache) · Woᵀ for one token at position p, against the CPU's attention, matmul
 * and add: once with x = 0 (the product alone), once with a random residual. max_len: the fused path's length limit
 * for the case (hb_cuda_set_attn_o_max: -2 one chunk at every head dim; above one chunk the keys are walked in
 * chunks); a step longer than the limit and a two-token batch must be declined without a launch. */
static void check_attn_o(int n_heads, int n_kv, int hd, int d, int p, int max_len) {
  struct hearth_err err = {0};
  const int bs = 16, max_blocks = 64;
  struct kvpair kv;
  kv_alloc(&kv, max_blocks, bs, n_kv, hd);
  struct tb pre, st;
  int zero[1] = {0}, ctx[1] = {p}, one[1] = {1};
  make_batch(&pre, 1, zero, ctx, bs, max_blocks);
  make_batch(&st, 1, ctx, one, bs, max_blocks);
  memcpy(st.bt, pre.bt, sizeof st.bt);
  fill_cache(&kv, &pre, n_kv, hd);
  struct pair q, k, v, a, o, x, wo;
  pair_rand(&q, HB_F32, 1, n_heads * hd, 1.5f);
  pair_rand(&k, HB_F32, 1, n_kv * hd, 1.0f);
  pair_rand(&v, HB_F32, 1, n_kv * hd, 1.0f);
  weight_pair(&wo, HB_Q4, d, n_heads * hd, 0.5f);
  pair_alloc(&a, HB_F32, 1, n_heads * hd);
  pair_alloc(&o, HB_F32, 1, d);
  pair_alloc(&x, HB_F32, 1, d);
  C->batch_upload(cc, &st.b, &err);
  CHECK(G->batch_upload(gc, &st.b, &err) == 0);
  C->kv_write(cc, &kv.c, &k.c, &v.c, &st.b);
  G->kv_write(gc, &kv.g, &k.g, &v.g, &st.b);
  struct hb_attn_params ap = {n_heads, n_kv, hd, 1.0f / sqrtf((float)hd), 0, 0.0f};
  C->attention(cc, &a.c, &q.c, &kv.c, &st.b, &ap);
  C->matmul(cc, &o.c, &a.c, &wo.c, NULL, 1);
  hb_cuda_set_attn_o_max(gc, max_len);
  const int limit = hb_cuda_attn_o_max_len(gc, hd);
  CHECKF(limit >= p + 1, "attn_o: limit %d below the case's %d keys", limit, p + 1);
  float *h = calloc((size_t)d, sizeof *h);
  for (int rep = 0; rep < 2; rep++) {
    if (rep) for (int i = 0; i < d; i++) h[i] = frand() * 2.0f;
    pair_set(&x, h);
    C->add(cc, &x.c, &o.c, 1);
    CHECK(hb_cuda_attn_o(gc, &x.g, &q.g, &kv.g, &st.b, &ap, &wo.g) == 0);
    char what[112];
    snprintf(what, sizeof what, "attn_o h%d/%d hd%d d%d keys %d%s", n_heads, n_kv, hd, d, p + 1, rep ? " +x" : "");
    cmp(&x, 1, what, 1.5e-2);
  }
  /* declined: a sequence over the limit, two tokens */
  st.seq_len[0] = limit + 1;
  CHECK(hb_cuda_attn_o(gc, &x.g, &q.g, &kv.g, &st.b, &ap, &wo.g) == 1);
  st.seq_len[0] = p + 1;
  st.b.n_tokens = 2;
  CHECK(hb_cuda_attn_o(gc, &x.g, &q.g, &kv.g, &st.b, &ap, &wo.g) == 1);
  free(h);
  pair_free(&q); pair_free(&k); pair_free(&v); pair_free(&a); pair_free(&o); pair_free(&x); pair_free(&wo);
  kv_free(&kv);
}

/* the norm GEMV's one-read rmsnorm prologue on two more shapes: a 0.5B-wide row at three tokens, so that a 16-lane group's
 * token changes inside a warp, and rows with entries of +-40,000 against norm weights up to 4, whose x * w is beyond f16
 * (round 24's GEMV_DEFER stored x * w and needed a fallback there: bench/patches/round24-defer.patch at ac09af2) */
static void check_norm_rows(int n, int K, int big) {
  struct pair x, nw, w, o, xn;
  const int rows = 256;
  pair_alloc(&x, HB_F32, n, K);
  float *h = randv((int64_t)n * K, 3.0f);
  if (big)
    for (int i = 0; i < n * K; i += 32) h[i] = (i & 64) ? 40000.0f : -40000.0f;
  pair_set(&x, h);
  free(h);
  weight_pair(&nw, HB_F32, 1, K, big ? 4.0f : 1.0f);
  weight_pair(&w, HB_Q4, rows, K, 0.5f);
  pair_alloc(&xn, HB_F32, n, K);
  pair_alloc(&o, HB_F32, n, rows);
  pair_poison(&o);
  C->rmsnorm(cc, &xn.c, &x.c, &nw.c, 1e-6f, 0.0f);
  C->matmul(cc, &o.c, &xn.c, &w.c, NULL, n);
  struct hb_tensor *og[1] = {&o.g};
  const struct hb_tensor *wg[1] = {&w.g};
  hb_cuda_norm_matmul(gc, &x.g, &nw.g, 1e-6f, 0.0f, 1, og, wg, NULL, n, 0);
  char what[64];
  snprintf(what, sizeof what, "norm_matmul n=%d K=%d%s", n, K, big ? " x*w beyond f16" : "");
  cmp(&o, n, what, 1.5e-2);
  pair_free(&x); pair_free(&nw); pair_free(&w); pair_free(&o); pair_free(&xn);
}

/* norm_qkv_rope_kv past the GEMV (batched decode): rmsnorm, the QKV GEMM split over K, and rope + the cache write in
 * its finish must give the bits of the sequence it replaces on the same device (norm_matmul into q/k/v, then
 * rope_kv_write): q, and the cache rows of every new token, each path writing its own cache. ns sequences of nt new
 * tokens each at the contexts ctx. */
static void check_qkv_rope_split(int n_heads, int n_kv, int hd, int d, int ns, const int *ctx, int nt) {
  struct hearth_err err = {0};
  const int bs = 16, max_blocks = 16;
  int newt[8], n = ns * nt;
  for (int i = 0; i < ns; i++) newt[i] = nt;
  struct kvpair ka, kb;
  kv_alloc(&ka, ns * max_blocks, bs, n_kv, hd);
  kv_alloc(&kb, ns * max_blocks, bs, n_kv, hd);
  struct tb st;
  make_batch(&st, ns, ctx, newt, bs, max_blocks);
  struct pair x, nw, w[3], bi[3], qa, qb, k, v;
  const int rows[3] = {n_heads * hd, n_kv * hd, n_kv * hd};
  pair_rand(&x, HB_F32, n, d, 3.0f);
  weight_pair(&nw, HB_F32, 1, d, 1.0f);
  for (int i = 0; i < 3; i++) {
    weight_pair(&w[i], HB_Q4, rows[i], d, 0.5f);
    weight_pair(&bi[i], HB_F32, 1, rows[i], 0.5f);
  }
  pair_alloc(&qa, HB_F32, n, rows[0]);
  pair_alloc(&qb, HB_F32, n, rows[0]);
  pair_alloc(&k, HB_F32, n, rows[1]);
  pair_alloc(&v, HB_F32, n, rows[2]);
  pair_poison(&qa); pair_poison(&qb);
  CHECK(G->batch_upload(gc, &st.b, &err) == 0);
  struct hb_tensor *outs[3] = {&qa.g, &k.g, &v.g};
  const struct hb_tensor *wg[3] = {&w[0].g, &w[1].g, &w[2].g}, *bg[3] = {&bi[0].g, &bi[1].g, &bi[2].g};
  hb_cuda_norm_matmul(gc, &x.g, &nw.g, 1e-6f, 0.0f, 3, outs, wg, bg, n, 0);
  CHECK(hb_cuda_rope_kv_write(gc, &qa.g, &k.g, &v.g, &ka.g, &st.b, n_heads, hd, 1000000.0f, NULL, NULL, 0.0f) == 0);
  const int rc = hb_cuda_norm_qkv_rope_kv(gc, &x.g, &nw.g, 1e-6f, wg, bg, &qb.g, &kb.g, &st.b, n_heads, 1000000.0f, n);
  const int64_t cache_rows = (int64_t)ns * max_blocks * bs, w_kv = (int64_t)n_kv * hd;
  float *a = malloc((size_t)n * rows[0] * sizeof *a), *b = malloc((size_t)n * rows[0] * sizeof *b);
  float *ca[2], *cb[2];
  for (int i = 0; i < 2; i++) {
    ca[i] = malloc((size_t)(cache_rows * w_kv) * sizeof(float));
    cb[i] = malloc((size_t)(cache_rows * w_kv) * sizeof(float));
  }
  G->read(gc, &qa.g, 0, n, a);
  G->read(gc, &qb.g, 0, n, b);
  G->read(gc, &ka.g.k, 0, cache_rows, ca[0]);
  G->read(gc, &ka.g.v, 0, cache_rows, ca[1]);
  G->read(gc, &kb.g.k, 0, cache_rows, cb[0]);
  G->read(gc, &kb.g.v, 0, cache_rows, cb[1]);
  const int sync_bad = G->sync(gc, &err) != 0;
  size_t dq = 0, dc = 0, nonfinite = 0;
  for (size_t i = 0; i < (size_t)n * rows[0]; i++) {
    if (!isfinite(b[i])) nonfinite++;
    if (memcmp(&a[i], &b[i], sizeof a[i])) dq++;
  }
  for (int t = 0; t < n; t++) {
    const int p = st.pos[t], slot = st.bt[st.seq[t] * max_blocks + p / bs] * bs + p % bs;
    for (int i = 0; i < 2; i++)
      for (int64_t j = 0; j < w_kv; j++) {
        const float *pa = &ca[i][slot * w_kv + j], *pb = &cb[i][slot * w_kv + j];
        if (!isfinite(*pb)) nonfinite++;
        if (memcmp(pa, pb, sizeof *pa)) dc++;
      }
  }
  printf("  qkv rope split-K finish: heads %d/%d hd %d d %d n %d: rc %d, q %zu and cache %zu values differ from "
         "norm_matmul + rope_kv_write, %zu non-finite\n", n_heads, n_kv, hd, d, n, rc, dq, dc, nonfinite);
  CHECKF(rc == 0 && !sync_bad && dq == 0 && dc == 0 && nonfinite == 0,
         "qkv rope split-K finish hd %d d %d n %d: rc %d, %zu + %zu values differ, %zu non-finite (%s)", hd, d, n, rc,
         dq, dc, nonfinite, err.msg);
  free(a); free(b);
  for (int i = 0; i < 2; i++) { free(ca[i]); free(cb[i]); }
  pair_free(&x); pair_free(&nw); pair_free(&qa); pair_free(&qb); pair_free(&k); pair_free(&v);
  for (int i = 0; i < 3; i++) { pair_free(&w[i]); pair_free(&bi[i]); }
  kv_free(&ka); kv_free(&kb);
}

/* row r of a device tensor as a one-row view */
static struct hb_tensor row_of(const struct hb_tensor *t, int r) {
  struct hb_tensor v = *t;
  const size_t es = t->dtype == HB_F32 ? 4 : 2;
  v.data = (char *)t->data + (size_t)r * (size_t)t->cols * es;
  v.rows = 1;
  return v;
}

/* Step twins (hb_cuda_set_step_twins, a speculative verify on CUDA): in twin mode the decode GEMV over n rows must give
 * each row the bits of a one-row launch — norm + three weights with biases (QKV-like), norm + gate/up with SiLU
 * (norm_swiglu; ff 11,008 takes the co-resident shape at one row), silu(gate)·up · down with the residual add, and the
 * final norm + head into f32 logits — and count nothing as untwinnable. K = 896 (the prologue's f64 partials: K / 8 is
 * not a multiple of 32), 2,048 and 3,584 (n rows past 4 take the prologue's two-read path there) */
static void check_twins(int K, int ff, int n) {
  struct pair x, nw, w[3], b[3], wg, wu, wd, wh;
  const int rows[3] = {512, 128, 128}, V = 1000;
  pair_rand(&x, HB_F32, n, K, 3.0f);
  weight_pair(&nw, HB_F32, 1, K, 1.0f);
  for (int i = 0; i < 3; i++) {
    weight_pair(&w[i], HB_Q4, rows[i], K, 0.5f);
    weight_pair(&b[i], HB_F32, 1, rows[i], 0.5f);
  }
  /* small gate/up/down: silu(h)·h of amplitude-0.5 weights overflows the f16 activations at ff 11,008 */
  weight_pair(&wg, HB_Q4, ff, K, 0.1f);
  weight_pair(&wu, HB_Q4, ff, K, 0.1f);
  weight_pair(&wd, HB_Q4, K, ff, 0.1f);
  weight_pair(&wh, HB_Q4, V, K, 0.5f);
  struct hearth_err err = {0};
  /* [0]: twin mode over n rows, [1]: n one-row launches */
  struct hb_tensor q[2][3], h[2], r[2], lg[2];
  for (int k = 0; k < 2; k++) {
    for (int i = 0; i < 3; i++) G->alloc(gc, &q[k][i], HB_F32, n, rows[i], &err);
    G->alloc(gc, &h[k], HB_F32, n, ff, &err);
    G->alloc(gc, &r[k], HB_F32, n, K, &err);
    G->alloc_f32(gc, &lg[k], n, V, &err);
  }
  const struct hb_tensor *ws[3] = {&w[0].g, &w[1].g, &w[2].g}, *bs[3] = {&b[0].g, &b[1].g, &b[2].g};
  float *res = randv((int64_t)n * K, 2.0f);
  for (int k = 0; k < 2; k++) {
    G->write(gc, &r[k], 0, n, res);
    if (k == 0) CHECK(hb_cuda_set_step_twins(gc, 1) == 0);
    for (int r0 = 0; r0 < (k ? n : 1); r0++) {
      const int m = k ? 1 : n;
      struct hb_tensor xv = k ? row_of(&x.g, r0) : x.g, hv = k ? row_of(&h[k], r0) : h[k],
                       rv = k ? row_of(&r[k], r0) : r[k], lv = k ? row_of(&lg[k], r0) : lg[k], qv[3];
      for (int i = 0; i < 3; i++) qv[i] = k ? row_of(&q[k][i], r0) : q[k][i];
      struct hb_tensor *og[3] = {&qv[0], &qv[1], &qv[2]}, *ol[1] = {&lv};
      const struct hb_tensor *wl[1] = {&wh.g};
      hb_cuda_norm_matmul(gc, &xv, &nw.g, 1e-6f, 0.0f, 3, og, ws, bs, m, 0);
      CHECK(hb_cuda_norm_swiglu(gc, &xv, &nw.g, 1e-6f, &wg.g, &wu.g, &hv, m, HB_ACT_SILU) == 0);
      hb_cuda_silu_matmul(gc, &hv, &hv, &rv, &wd.g, m, 1); /* (silu(h)·h here: any gate and up will do) */
      hb_cuda_norm_matmul(gc, &rv, &nw.g, 1e-6f, 0.0f, 1, ol, wl, NULL, m, 0);
    }
    if (k == 0) {
      const int bad = hb_cuda_set_step_twins(gc, 0);
      CHECKF(bad == 0, "twins K=%d n=%d: %d ops without a one-token form", K, n, bad);
    }
  }
  free(res);
  char what[96];
  for (int i = 0; i < 3; i++) {
    snprintf(what, sizeof what, "twins K=%d n=%d norm_matmul out %d", K, n, i);
    gpu_same(&q[1][i], &q[0][i], n, what);
  }
  snprintf(what, sizeof what, "twins K=%d n=%d norm_swiglu ff %d", K, n, ff);
  gpu_same(&h[1], &h[0], n, what);
  snprintf(what, sizeof what, "twins K=%d n=%d silu_matmul += (down)", K, n);
  gpu_same(&r[1], &r[0], n, what);
  snprintf(what, sizeof what, "twins K=%d n=%d head (f32)", K, n);
  gpu_same(&lg[1], &lg[0], n, what);
  for (int k = 0; k < 2; k++) {
    for (int i = 0; i < 3; i++) G->release(gc, &q[k][i]);
    G->release(gc, &h[k]); G->release(gc, &r[k]); G->release(gc, &lg[k]);
  }
  for (int i = 0; i < 3; i++) { pair_free(&w[i]); pair_free(&b[i]); }
  pair_free(&wg); pair_free(&wu); pair_free(&wd); pair_free(&wh); pair_free(&nw); pair_free(&x);
}

/* Step twins of attn_o: n consecutive tokens of one sequence at positions p.. in one twin-mode launch must give every
 * row of x the bits of the one-token launch at its position (whose keys include the rows before it, written by the
 * kernel before, as a verify's QKV launch writes them), and count nothing as untwinnable; a verify whose last row
 * passes attn_o's limit, and a many-token batch outside twin mode, are declined without a launch. */
static void check_attn_o_twins(int n_heads, int n_kv, int hd, int d, int p, int n) {
  struct hearth_err err = {0};
  const int bs = 16, max_blocks = 64;
  struct kvpair kv;
  kv_alloc(&kv, max_blocks, bs, n_kv, hd);
  struct tb pre, st, one;
  int zero[1] = {0}, ctx[1] = {p}, nn[1] = {n};
  make_batch(&pre, 1, zero, ctx, bs, max_blocks);
  make_batch(&st, 1, ctx, nn, bs, max_blocks);
  memcpy(st.bt, pre.bt, sizeof st.bt);
  fill_cache(&kv, &pre, n_kv, hd);
  struct pair q, k, v, wo;
  pair_rand(&q, HB_F32, n, n_heads * hd, 1.5f);
  pair_rand(&k, HB_F32, n, n_kv * hd, 1.0f);
  pair_rand(&v, HB_F32, n, n_kv * hd, 1.0f);
  weight_pair(&wo, HB_Q4, d, n_heads * hd, 0.5f);
  CHECK(G->batch_upload(gc, &st.b, &err) == 0);
  G->kv_write(gc, &kv.g, &k.g, &v.g, &st.b); /* the rows' own keys, as the verify's QKV launch writes them */
  struct hb_attn_params ap = {n_heads, n_kv, hd, 1.0f / sqrtf((float)hd), 0, 0.0f};
  float *res = randv((int64_t)n * d, 2.0f);
  struct hb_tensor x[2];
  for (int i = 0; i < 2; i++) {
    G->alloc(gc, &x[i], HB_F32, n, d, &err);
    G->write(gc, &x[i], 0, n, res);
  }
  char what[112];
  snprintf(what, sizeof what, "attn_o twins h%d/%d hd%d keys %d..%d", n_heads, n_kv, hd, p + 1, p + n);
  CHECK(hb_cuda_attn_o(gc, &x[0], &q.g, &kv.g, &st.b, &ap, &wo.g) == 1); /* not in twin mode */
  CHECK(hb_cuda_set_step_twins(gc, 1) == 0);
  CHECKF(hb_cuda_attn_o(gc, &x[0], &q.g, &kv.g, &st.b, &ap, &wo.g) == 0, "%s: declined", what);
  CHECKF(hb_cuda_set_step_twins(gc, 0) == 0, "%s: counted as untwinnable", what);
  for (int r = 0; r < n; r++) { /* the one-token launches, in order */
    int cr[1] = {p + r}, o1[1] = {1};
    make_batch(&one, 1, cr, o1, bs, max_blocks);
    memcpy(one.bt, pre.bt, sizeof one.bt);
    CHECK(G->batch_upload(gc, &one.b, &err) == 0);
    struct hb_tensor xr = row_of(&x[1], r), qr = row_of(&q.g, r);
    CHECK(hb_cuda_attn_o(gc, &xr, &qr, &kv.g, &one.b, &ap, &wo.g) == 0);
  }
  gpu_same(&x[1], &x[0], n, what);
  /* declined: the last row one key past the limit */
  CHECK(G->batch_upload(gc, &st.b, &err) == 0);
  st.seq_len[0] = hb_cuda_attn_o_max_len(gc, hd) + 1;
  CHECK(hb_cuda_set_step_twins(gc, 1) == 0);
  CHECK(hb_cuda_attn_o(gc, &x[0], &q.g, &kv.g, &st.b, &ap, &wo.g) == 1);
  hb_cuda_set_step_twins(gc, 0);
  free(res);
  for (int i = 0; i < 2; i++) G->release(gc, &x[i]);
  pair_free(&q); pair_free(&k); pair_free(&v); pair_free(&wo);
  kv_free(&kv);
}

/* Which twin-mode attention rows count as untwinnable: rows within attn_o's limit whose one-token steps take attn_o
 * (its shapes: 14/2 heads at hd 64) are counted when attn_o declines them (here for the last row's length) and the
 * attention op runs them instead; with shapes attn_o declines (16 KV heads), its one-token steps run the attention op
 * too, so the rows are twins and nothing is counted. */
static void check_attn_twin_count(int n_heads, int n_kv, int expect_bad) {
  struct hearth_err err = {0};
  const int bs = 16, max_blocks = 64, hd = 64, d = n_heads * hd, p = 20, n = 4;
  struct kvpair kv;
  kv_alloc(&kv, max_blocks, bs, n_kv, hd);
  struct tb pre, st;
  int zero[1] = {0}, ctx[1] = {p}, nn[1] = {n};
  make_batch(&pre, 1, zero, ctx, bs, max_blocks);
  make_batch(&st, 1, ctx, nn, bs, max_blocks);
  memcpy(st.bt, pre.bt, sizeof st.bt);
  fill_cache(&kv, &pre, n_kv, hd);
  struct pair q, k, v, wo, x;
  pair_rand(&q, HB_F32, n, n_heads * hd, 1.5f);
  pair_rand(&k, HB_F32, n, n_kv * hd, 1.0f);
  pair_rand(&v, HB_F32, n, n_kv * hd, 1.0f);
  pair_rand(&x, HB_F32, n, d, 1.0f);
  weight_pair(&wo, HB_Q4, d, n_heads * hd, 0.5f);
  struct hb_tensor a;
  G->alloc(gc, &a, HB_F32, n, n_heads * hd, &err);
  CHECK(G->batch_upload(gc, &st.b, &err) == 0);
  G->kv_write(gc, &kv.g, &k.g, &v.g, &st.b);
  struct hb_attn_params ap = {n_heads, n_kv, hd, 1.0f / sqrtf((float)hd), 0, 0.0f};
  CHECK(hb_cuda_set_step_twins(gc, 1) == 0);
  if (expect_bad) st.seq_len[0] = hb_cuda_attn_o_max_len(gc, hd) + 1; /* declined for its length only */
  CHECK(hb_cuda_attn_o(gc, &x.g, &q.g, &kv.g, &st.b, &ap, &wo.g) == 1);
  st.seq_len[0] = p + n;
  G->attention(gc, &a, &q.g, &kv.g, &st.b, &ap);
  const int bad = hb_cuda_set_step_twins(gc, 0);
  CHECKF(expect_bad ? bad > 0 : bad == 0, "attn twins h%d/%d: %d ops counted untwinnable, expected %s", n_heads, n_kv,
         bad, expect_bad ? "some" : "none");
  CHECK(G->sync(gc, &err) == 0);
  G->release(gc, &a);
  pair_free(&q); pair_free(&k); pair_free(&v); pair_free(&wo); pair_free(&x);
  kv_free(&kv);
}

TEST_GROUP(twins) {
  if (setup(0)) return;
  /* attn_o's rows (the 0.5B's shape at its default limit, 256 keys; the 3B's at one chunk of 208) */
  hb_cuda_set_attn_o_max(gc, -1);
  if (hb_cuda_attn_o_max_len(gc, 64) > 0) {
    check_attn_o_twins(14, 2, 64, 896, 0, 8);
    check_attn_o_twins(14, 2, 64, 896, 37, 6);
    check_attn_o_twins(14, 2, 64, 896, 248, 8); /* the last row's keys: exactly the limit */
    hb_cuda_set_attn_o_max(gc, -2);
    check_attn_o_twins(16, 2, 128, 2048, 120, 7);
    hb_cuda_set_attn_o_max(gc, -1);
    check_attn_twin_count(14, 2, 1);
    check_attn_twin_count(16, 16, 0);
  }
  check_twins(896, 4864, 8);
  check_twins(2048, 11008, 8);
  check_twins(2048, 11008, 5);
  check_twins(3584, 2048, 7);
  teardown();
}

TEST_GROUP(fused) {
  if (setup(0)) return;
  struct hearth_err err = {0};
  /* Gemma 4's GEMV folds again here, so that test_cuda_ops.fused_cores runs them in the co-resident gate/up shape */
  check_gelu_matmul();
  check_add_norm_matmul();
  check_norm_rows(3, 896, 0);
  check_norm_rows(1, 1024, 1);
  check_norm_rows(2, 2048, 1);
  for (int n = 1; n <= 8; n += 7) {
    int K = n == 8 ? 2048 : 1024, rows[3] = {512, 128, 72}; /* n = 8: the two-read norm prologue */
    struct pair x, nw, w[3], b[3], o[3], xn, t;
    pair_rand(&x, HB_F32, n, K, 3.0f);
    weight_pair(&nw, HB_F32, 1, K, 1.0f);
    pair_alloc(&xn, HB_F32, n, K);
    for (int i = 0; i < 3; i++) {
      weight_pair(&w[i], HB_Q4, rows[i], K, 0.5f);
      weight_pair(&b[i], HB_F32, 1, rows[i], 0.5f);
      pair_alloc(&o[i], HB_F32, n, rows[i]);
      pair_poison(&o[i]);
    }
    C->rmsnorm(cc, &xn.c, &x.c, &nw.c, 1e-6f, 0.0f);
    for (int i = 0; i < 3; i++) C->matmul(cc, &o[i].c, &xn.c, &w[i].c, &b[i].c, n);
    struct hb_tensor *og[3] = {&o[0].g, &o[1].g, &o[2].g};
    const struct hb_tensor *wg[3] = {&w[0].g, &w[1].g, &w[2].g}, *bg[3] = {&b[0].g, &b[1].g, &b[2].g};
    hb_cuda_norm_matmul(gc, &x.g, &nw.g, 1e-6f, 0.0f, 3, og, wg, bg, n, 0);
    for (int i = 0; i < 3; i++) {
      char what[64];
      snprintf(what, sizeof what, "norm_matmul n=%d out %d", n, i);
      cmp(&o[i], n, what, 1.5e-2);
    }
    /* o[0] += xn · w0ᵀ (no norm, add) */
    pair_alloc(&t, HB_F32, n, rows[0]);
    C->matmul(cc, &t.c, &xn.c, &w[0].c, NULL, n);
    C->add(cc, &o[0].c, &t.c, n);
    C->rmsnorm(cc, &xn.c, &x.c, &nw.c, 1e-6f, 0.0f);
    G->rmsnorm(gc, &xn.g, &x.g, &nw.g, 1e-6f, 0.0f);
    struct hb_tensor *o1[1] = {&o[0].g};
    const struct hb_tensor *w1[1] = {&w[0].g};
    hb_cuda_norm_matmul(gc, &xn.g, NULL, 0.0f, 0.0f, 1, o1, w1, NULL, n, 1);
    cmp(&o[0], n, n == 1 ? "matmul+add n=1" : "matmul+add n=8", 1.5e-2);
    /* silu(gate) * up -> down (+ residual) */
    struct pair gt, up, wd, r;
    pair_rand(&gt, HB_F32, n, 1536, 3.0f);
    pair_rand(&up, HB_F32, n, 1536, 2.0f);
    weight_pair(&wd, HB_Q4, 256, 1536, 0.5f);
    pair_rand(&r, HB_F32, n, 256, 5.0f);
    struct pair h, t2;
    pair_alloc(&h, HB_F32, n, 1536);
    pair_alloc(&t2, HB_F32, n, 256);
    C->silu_mul(cc, &h.c, &gt.c, &up.c, n);
    C->matmul(cc, &t2.c, &h.c, &wd.c, NULL, n);
    C->add(cc, &r.c, &t2.c, n);
    hb_cuda_silu_matmul(gc, &gt.g, &up.g, &r.g, &wd.g, n, 1);
    cmp(&r, n, n == 1 ? "silu_matmul+add n=1" : "silu_matmul+add n=8", 1.5e-2);
    pair_free(&gt); pair_free(&up); pair_free(&wd); pair_free(&r); pair_free(&h); pair_free(&t2);
    pair_free(&x); pair_free(&nw); pair_free(&xn); pair_free(&t);
    for (int i = 0; i < 3; i++) { pair_free(&w[i]); pair_free(&b[i]); pair_free(&o[i]); }
  }
  /* the 3B's down_proj + residual at one token: 128 tiles of 86 groups (the long-row split GEMV in 16-warp blocks) */
  {
    struct pair h, wd, r, t;
    pair_rand(&h, HB_F32, 1, 11008, 2.0f);
    weight_pair(&wd, HB_Q4, 2048, 11008, 0.5f);
    pair_rand(&r, HB_F32, 1, 2048, 5.0f);
    pair_alloc(&t, HB_F32, 1, 2048);
    C->matmul(cc, &t.c, &h.c, &wd.c, NULL, 1);
    C->add(cc, &r.c, &t.c, 1);
    struct hb_tensor *o1[1] = {&r.g};
    const struct hb_tensor *w1[1] = {&wd.g};
    hb_cuda_norm_matmul(gc, &h.g, NULL, 0.0f, 0.0f, 1, o1, w1, NULL, 1, 1);
    cmp(&r, 1, "matmul+add 2048x11008 n=1", 1.5e-2);
    pair_free(&h); pair_free(&wd); pair_free(&r); pair_free(&t);
  }
  /* n > 8: one multi-weight tensor-core GEMM per call (tile grids and splits as on 132 SMs; a joined
   * launch splits as its largest weight alone would) */
  {
    double mg = 4e-3; /* the fast group's q4 GEMM tolerance */
    int qkv3[3] = {2048, 256, 256}, qkv05[3] = {896, 128, 128}, part[3] = {512, 256, 200}, odd[3] = {200, 128, 256};
    int gu[2] = {11008, 11008}, gus[2] = {1024, 1024}, o1[1] = {2048};
    check_norm_matmul(2048, 3, qkv3, 71, 1, 1, 0, mg);    /* 3B QKV: 20 col tiles x 1, split-K 8 over all three */
    check_norm_matmul(2048, 3, qkv3, 600, 1, 1, 0, mg);   /* 20 x 5 tiles, split-K 4 */
    check_norm_matmul(896, 3, qkv05, 71, 1, 1, 0, mg);    /* 0.5B QKV: 9 x 1, 14 k-tiles: split-K 3 (5, 5, 4) */
    check_norm_matmul(896, 3, qkv05, 600, 1, 1, 0, mg);   /* 9 x 5, split-K 3 */
    check_norm_matmul(512, 3, qkv3, 1100, 1, 1, 0, mg);   /* 20 x 9 = 180 tiles: no split, bias in the epilogue */
    check_norm_matmul(1024, 3, part, 50, 1, 1, 0, mg);    /* last weight 200 rows: partial last tile; BM 64, split 4 */
    check_norm_matmul(1024, 3, odd, 50, 1, 1, 0, mg);     /* 200 % 128 != 0 before the last: per-weight fallback */
    check_norm_matmul(2048, 2, gu, 40, 1, 0, 0, mg);      /* 3B gate/up: 172 x 1 tiles (BM 64), split-K 4 */
    check_norm_matmul(2048, 2, gus, 40, 1, 0, 0, mg);     /* two weights, 16 x 1 tiles: split-K 8 */
    check_norm_matmul(2048, 1, o1, 300, 0, 0, 1, mg);     /* o_proj + residual: 16 x 3, split-K 6, add in the finish */
    check_norm_matmul(512, 1, o1, 1100, 0, 0, 1, mg);     /* 16 x 9 = 144 tiles: add in the GEMM epilogue */
    check_silu_matmul(11008, 2048, 17, 1, mg);            /* 3B down + residual: BM 32, 16 tiles, split-K 16 */
    check_silu_matmul(11008, 2048, 520, 1, mg);           /* 3B down + residual: 16 x 5 tiles, split-K 4 (43 k-tiles) */
    check_silu_matmul(4864, 896, 520, 1, mg);             /* 0.5B down + residual: 7 x 5 tiles, split-K 8 (last: 6) */
    check_silu_matmul(1536, 256, 100, 0, mg);             /* no residual */
  }
  /* two weights (gate/up-like) for 3 decode rows, a norm with a weight offset (Gemma's 1 + w) */
  {
    const int n = 3, K = 1024, R = 1024;
    struct pair x, nw, xn, w[2], o[2];
    pair_rand(&x, HB_F32, n, K, 2.0f);
    weight_pair(&nw, HB_F32, 1, K, 0.5f);
    pair_alloc(&xn, HB_F32, n, K);
    for (int i = 0; i < 2; i++) {
      weight_pair(&w[i], HB_Q4, R, K, 0.5f);
      pair_alloc(&o[i], HB_F32, n, R);
      pair_poison(&o[i]);
    }
    C->rmsnorm(cc, &xn.c, &x.c, &nw.c, 1e-6f, 1.0f);
    for (int i = 0; i < 2; i++) C->matmul(cc, &o[i].c, &xn.c, &w[i].c, NULL, n);
    struct hb_tensor *og[2] = {&o[0].g, &o[1].g};
    const struct hb_tensor *wg[2] = {&w[0].g, &w[1].g};
    hb_cuda_norm_matmul(gc, &x.g, &nw.g, 1e-6f, 1.0f, 2, og, wg, NULL, n, 0);
    cmp(&o[0], n, "norm_matmul n_mm=2 off=1 n=3 out 0", 1.5e-2);
    cmp(&o[1], n, "norm_matmul n_mm=2 off=1 n=3 out 1", 1.5e-2);
    pair_free(&x); pair_free(&nw); pair_free(&xn);
    for (int i = 0; i < 2; i++) { pair_free(&w[i]); pair_free(&o[i]); }
  }
  /* norm + gate/up with silu(gate) * up in the GEMV epilogue (decode rows; gate row i and up row i in
   * one lane): whole-tile warps (0.5B gate/up: 608 tiles) and k-split blocks (128 tiles), K with one
   * norm read (896) and the two-read prologue (n = 8 at 2048), against rmsnorm, two matmuls and
   * silu_mul on the CPU; rows % 16 != 0 and n > 8 are declined */
  {
    const int cases[][3] = {{1, 896, 4864}, {3, 2048, 1024}, {8, 2048, 4864}, {2, 1024, 2048}};
    for (size_t ci = 0; ci < 2 * sizeof cases / sizeof cases[0]; ci++) {
      const int n = cases[ci / 2][0], K = cases[ci / 2][1], R = cases[ci / 2][2];
      const int act = ci % 2 ? HB_ACT_GELU_TANH : HB_ACT_SILU; /* Gemma 4's GeGLU in the same epilogue */
      struct pair x, nw, xn, wgp, wup, gt, up, h;
      pair_rand(&x, HB_F32, n, K, 2.0f);
      weight_pair(&nw, HB_F32, 1, K, 0.5f);
      pair_alloc(&xn, HB_F32, n, K);
      weight_pair(&wgp, HB_Q4, R, K, 0.5f);
      weight_pair(&wup, HB_Q4, R, K, 0.5f);
      pair_alloc(&gt, HB_F32, n, R);
      pair_alloc(&up, HB_F32, n, R);
      pair_alloc(&h, HB_F32, n, R);
      pair_poison(&h);
      C->rmsnorm(cc, &xn.c, &x.c, &nw.c, 1e-6f, 0.0f);
      C->matmul(cc, &gt.c, &xn.c, &wgp.c, NULL, n);
      C->matmul(cc, &up.c, &xn.c, &wup.c, NULL, n);
      if (act == HB_ACT_SILU) C->silu_mul(cc, &h.c, &gt.c, &up.c, n);
      else C->gelu_mul(cc, &h.c, &gt.c, &up.c, 0, n);
      CHECK(hb_cuda_norm_swiglu(gc, &x.g, &nw.g, 1e-6f, &wgp.g, &wup.g, &h.g, n, act) == 0);
      char what[80];
      snprintf(what, sizeof what, "norm_swiglu act=%d n=%d K=%d rows=%d", act, n, K, R);
      cmp(&h, n, what, 1.5e-2);
      pair_free(&x); pair_free(&nw); pair_free(&xn); pair_free(&wgp); pair_free(&wup);
      pair_free(&gt); pair_free(&up); pair_free(&h);
    }
    struct pair x, nw, wgp, wup, h;
    pair_rand(&x, HB_F32, 9, 1024, 2.0f);
    weight_pair(&nw, HB_F32, 1, 1024, 0.5f);
    weight_pair(&wgp, HB_Q4, 1032, 1024, 0.5f);
    weight_pair(&wup, HB_Q4, 1032, 1024, 0.5f);
    pair_alloc(&h, HB_F32, 9, 1032);
    CHECK(hb_cuda_norm_swiglu(gc, &x.g, &nw.g, 1e-6f, &wgp.g, &wup.g, &h.g, 9, HB_ACT_SILU) == 1);
    CHECK(hb_cuda_norm_swiglu(gc, &x.g, &nw.g, 1e-6f, &wgp.g, &wup.g, &h.g, 2, HB_ACT_SILU) == 1);
    pair_free(&x); pair_free(&nw); pair_free(&wgp); pair_free(&wup); pair_free(&h);
  }
  /* rope + kv_write in one launch, checked through attention over the written cache */
  {
    int bs = 16, max_blocks = 64, n_heads = 16, n_kv = 2, hd = 128;
    struct kvpair kv;
    kv_alloc(&kv, 2 * max_blocks, bs, n_kv, hd);
    struct tb pre;
    int zero[2] = {0, 0}, nt[2] = {37, 90};
    make_batch(&pre, 2, zero, nt, bs, max_blocks);
    int n = pre.b.n_tokens;
    struct pair q, k, v, o;
    pair_rand(&q, HB_F32, n, n_heads * hd, 1.5f);
    pair_rand(&k, HB_F32, n, n_kv * hd, 1.5f);
    pair_rand(&v, HB_F32, n, n_kv * hd, 1.0f);
    pair_alloc(&o, HB_F32, n, n_heads * hd);
    pair_poison(&o);
    C->batch_upload(cc, &pre.b, &err);
    G->batch_upload(gc, &pre.b, &err);
    C->rope_neox(cc, &q.c, &pre.b, n_heads, hd, hd, 1000000.0f);
    C->rope_neox(cc, &k.c, &pre.b, n_kv, hd, hd, 1000000.0f);
    C->kv_write(cc, &kv.c, &k.c, &v.c, &pre.b);
    CHECK(hb_cuda_rope_kv_write(gc, &q.g, &k.g, &v.g, &kv.g, &pre.b, n_heads, hd, 1000000.0f, NULL, NULL, 0.0f) == 0);
    cmp(&q, n, "rope_kv_write: q", 2e-3);
    struct hb_attn_params ap = {n_heads, n_kv, hd, 1.0f / sqrtf((float)hd), 0, 0.0f};
    C->attention(cc, &o.c, &q.c, &kv.c, &pre.b, &ap);
    G->attention(gc, &o.g, &q.g, &kv.g, &pre.b, &ap);
    cmp(&o, n, "rope_kv_write: attention over the cache", 4e-3);
    pair_free(&q); pair_free(&k); pair_free(&v); pair_free(&o);
    kv_free(&kv);
  }
  /* norm + QKV + rope + cache write in one launch (decode rows of several sequences), checked
   * against the CPU op sequence through q and through attention over the written cache */
  static const struct { int n_heads, n_kv, hd, d, ns, ctx[5], nt[5]; } shp[] = {
      {16, 2, 128, 2048, 1, {200}, {1}},
      {14, 2, 64, 896, 5, {70, 0, 300, 15, 16}, {1, 1, 1, 1, 1}},
      {8, 2, 64, 512, 2, {20, 40}, {3, 1}}, /* several new tokens of one sequence (a short prompt) */
      {4, 2, 256, 1024, 2, {5, 0}, {2, 2}},
      {8, 4, 32, 256, 1, {10}, {4}},
  };
  for (size_t si = 0; si < sizeof shp / sizeof shp[0]; si++) {
    const int bs = 16, max_blocks = 32, n_heads = shp[si].n_heads, n_kv = shp[si].n_kv, hd = shp[si].hd;
    const int d = shp[si].d, ns = shp[si].ns;
    int ctx[5], newt[5], zero[5] = {0}, n = 0;
    for (int i = 0; i < 5; i++) { ctx[i] = shp[si].ctx[i]; newt[i] = shp[si].nt[i]; n += i < ns ? newt[i] : 0; }
    struct kvpair kv;
    kv_alloc(&kv, ns * max_blocks, bs, n_kv, hd);
    struct tb pre, st;
    make_batch(&pre, ns, zero, ctx, bs, max_blocks);
    make_batch(&st, ns, ctx, newt, bs, max_blocks);
    memcpy(st.bt, pre.bt, sizeof st.bt);
    fill_cache(&kv, &pre, n_kv, hd);
    struct pair x, nw, xn, w[3], bi[3], q, k, v, o;
    const int rows[3] = {n_heads * hd, n_kv * hd, n_kv * hd};
    pair_rand(&x, HB_F32, n, d, 3.0f);
    weight_pair(&nw, HB_F32, 1, d, 1.0f);
    pair_alloc(&xn, HB_F32, n, d);
    for (int i = 0; i < 3; i++) {
      weight_pair(&w[i], HB_Q4, rows[i], d, 0.5f);
      weight_pair(&bi[i], HB_F32, 1, rows[i], 0.5f);
    }
    pair_alloc(&q, HB_F32, n, rows[0]);
    pair_alloc(&k, HB_F32, n, rows[1]);
    pair_alloc(&v, HB_F32, n, rows[2]);
    pair_alloc(&o, HB_F32, n, rows[0]);
    pair_poison(&q); pair_poison(&o);
    C->batch_upload(cc, &st.b, &err);
    CHECK(G->batch_upload(gc, &st.b, &err) == 0);
    C->rmsnorm(cc, &xn.c, &x.c, &nw.c, 1e-6f, 0.0f);
    C->matmul(cc, &q.c, &xn.c, &w[0].c, &bi[0].c, n);
    C->matmul(cc, &k.c, &xn.c, &w[1].c, &bi[1].c, n);
    C->matmul(cc, &v.c, &xn.c, &w[2].c, &bi[2].c, n);
    C->rope_neox(cc, &q.c, &st.b, n_heads, hd, hd, 1000000.0f);
    C->rope_neox(cc, &k.c, &st.b, n_kv, hd, hd, 1000000.0f);
    C->kv_write(cc, &kv.c, &k.c, &v.c, &st.b);
    const struct hb_tensor *wg[3] = {&w[0].g, &w[1].g, &w[2].g}, *bg[3] = {&bi[0].g, &bi[1].g, &bi[2].g};
    CHECK(hb_cuda_norm_qkv_rope_kv(gc, &x.g, &nw.g, 1e-6f, wg, bg, &q.g, &kv.g, &st.b, n_heads, 1000000.0f, n) == 0);
    char what[96];
    snprintf(what, sizeof what, "norm_qkv_rope_kv: q (n=%d of %d seqs, hd %d)", n, ns, hd);
    cmp(&q, n, what, 1.5e-2);
    struct hb_attn_params ap = {n_heads, n_kv, hd, 1.0f / sqrtf((float)hd), 0, 0.0f};
    C->attention(cc, &o.c, &q.c, &kv.c, &st.b, &ap);
    G->attention(gc, &o.g, &q.g, &kv.g, &st.b, &ap);
    snprintf(what, sizeof what, "norm_qkv_rope_kv: attention over the cache (n=%d of %d seqs, hd %d)", n, ns, hd);
    cmp(&o, n, what, 1.5e-2);
    /* not covered (n over 8): declines without touching anything */
    CHECK(hb_cuda_norm_qkv_rope_kv(gc, &x.g, &nw.g, 1e-6f, wg, bg, &q.g, &kv.g, &st.b, n_heads, 1000000.0f, 9) == 1);
    pair_free(&x); pair_free(&nw); pair_free(&xn); pair_free(&q); pair_free(&k); pair_free(&v); pair_free(&o);
    for (int i = 0; i < 3; i++) { pair_free(&w[i]); pair_free(&bi[i]); }
    kv_free(&kv);
  }
  {
    const int c8[8] = {30, 0, 70, 5, 100, 1, 16, 200}, c3[3] = {10, 50, 0}, c2[2] = {33, 7};
    check_qkv_rope_split(16, 2, 128, 2048, 8, c8, 4); /* the 3B's, 32 rows */
    check_qkv_rope_split(14, 2, 64, 896, 3, c3, 3);   /* the 0.5B's, 9 rows */
    check_qkv_rope_split(8, 2, 64, 512, 2, c2, 12);   /* 24 rows, two splits */
  }
  /* attention + o_proj in one launch (one-token steps): the 3B's and the 0.5B's shapes at the lengths of a tg128
   * run, the chunked walk of longer rows, wider groups and one head per group (clusters of 4 and 8) */
  hb_cuda_set_attn_o_max(gc, -2);
  if (hb_cuda_attn_o_max_len(gc, 128) > 0) {
    /* (heads, KV heads, head dim, rows of Wo): the 3B's and the 0.5B's, clusters of 4 and 8, one head per group, a
     * cluster of one and of three, and rows that are not a multiple of 64 (32- and 16-row blocks) */
    static const int shapes[][4] = {{16, 2, 128, 2048}, {14, 2, 64, 896}, {32, 4, 64, 1024}, {8, 8, 128, 512},
                                    {4, 1, 128, 512},   {12, 3, 64, 992}, {8, 2, 64, 528}};
    for (int si = 0; si < (int)(sizeof shapes / sizeof shapes[0]); si++) {
      const int lim = hb_cuda_attn_o_chunk(shapes[si][2]), lens[4] = {0, 70, 198, lim - 1}; /* lim: one chunk */
      for (int li = 0; li < 4; li++)
        check_attn_o(shapes[si][0], shapes[si][1], shapes[si][2], shapes[si][3], lens[li], -2);
    }
    check_attn_o(16, 2, 128, 2048, 700, 1024); /* four chunks of 208 keys */
    check_attn_o(14, 2, 64, 896, 512, 1024);   /* two whole chunks of 256 and the new key alone in a third */
    check_attn_o(16, 2, 128, 2048, 416, 1024); /* two whole chunks of 208 and the new key alone in a third */
    /* the default: one chunk at head dim 64, off at 128 (where it measured slower: attn_o.cu) */
    hb_cuda_set_attn_o_max(gc, -1);
    CHECK(hb_cuda_attn_o_max_len(gc, 64) == hb_cuda_attn_o_chunk(64) && hb_cuda_attn_o_max_len(gc, 128) == 0);
  } else {
    printf("  attn_o: not offered on this device (needs sm_90)\n");
  }
  hb_cuda_set_attn_o_max(gc, -1);
  teardown();
}

/* ---- the sample op (backend.h) vs runtime/sampler.c given the same u ----------------------------------------------
 * Many random rows (a peaked head over noise, flat noise, entries near -FLT_MAX, ties, large magnitudes) and parameter
 * sets (temperature, top-k 0/1/40/2000, top-p, min-p, repetition / presence / frequency penalties over a prompt and
 * a history, seeds), 16 rows a launch, beside rows the op must leave alone (temperature 0). Every id the device
 * decides must be the host sampler's draw with that row's u (sampler_sample_u); -1 (the host's) is allowed only
 * where the device's candidate cap or a near tie can leave it undecided, and never for the cases it always holds
 * (plain sampling, top-k <= 40): those counts are held to. The logits must come back unchanged (the penalties work
 * on a copy). Each row prints its parameters, u, and both ids. */
struct smp_case { float t; int k; float p, minp, rep, pres, freq; int must; }; /* must: the device decides */
static const struct smp_case SMP_CASES[] = {
  {1.0f, 0, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 1},    {0.8f, 40, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 1},
  {1.0f, 1, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 1},    {1.0f, 2000, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 0},
  {1.0f, 0, 0.9f, 0.0f, 1.0f, 0.0f, 0.0f, 0},    {1.3f, 0, 1.0f, 0.05f, 1.0f, 0.0f, 0.0f, 0},
  {0.7f, 40, 0.95f, 0.1f, 1.0f, 0.0f, 0.0f, 1},  {0.9f, 0, 1.0f, 0.0f, 1.3f, 0.5f, 0.2f, 1},
  {1.1f, 40, 0.8f, 0.02f, 0.8f, -0.3f, 0.4f, 1}, {2.0f, 0, 0.5f, 0.0f, 1.2f, 1.0f, 1.0f, 0},
  {1e-3f, 0, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 1},   {1.0f, 2000, 0.9f, 0.1f, 1.1f, 0.0f, 0.3f, 0},
};
#define SMP_NCASES ((int)(sizeof SMP_CASES / sizeof SMP_CASES[0]))
enum { SMP_ROWS = 16 };

/* The sampler of one test row (case c, seed, prompt) and its device row: the penalty entries go to pen[*n_pen ..
 * *n_pen + cap) and *n_pen moves past them. Returns 0, or -1 (a failure counted) when the sampler cannot be made. */
static int smp_row(const struct smp_case *c, int V, uint64_t seed, const int32_t *prompt, int n_prompt,
                   const int32_t *hist, int nh, int cap, struct hearth_sampler **smp, struct hb_sample_row *row,
                   struct hb_sample_pen *pen, int *n_pen) {
  struct hearth_sampling p;
  struct hearth_err err = {0};
  hearth_sampling_default(&p);
  p.temperature = c->t; p.top_k = c->k; p.top_p = c->p; p.min_p = c->minp;
  p.repetition_penalty = c->rep; p.presence_penalty = c->pres; p.frequency_penalty = c->freq;
  p.seed = seed;
  if (hearth_sampler_new(&p, V, smp, &err)) { fprintf(stderr, "sampler: %s\n", err.msg); test_failures++; return -1; }
  hearth_sampler_set_prompt(*smp, prompt, n_prompt);
  const int np = sampler_device_row(*smp, hist, nh, row, pen + *n_pen, cap);
  CHECKF(np >= 0, "penalty list %d", np);
  row->pen0 = *n_pen;
  row->n_pen = np > 0 ? np : 0;
  *n_pen += row->n_pen;
  return 0;
}

static void smp_fill(float *r, int V, int kind) {
  for (int i = 0; i < V; i++) r[i] = frand() * 2.0f;
  switch (kind % 5) {
  case 0: for (int j = 0; j < 40; j++) r[irand(V)] += 14.0f + frand(); break; /* a peaked head */
  case 1: break;                                                              /* flat */
  case 2: for (int i = 0; i < V; i++) if (irand(3) == 0) r[i] = -3e38f; r[irand(V)] = 9.0f; break; /* -inf once penalised */
  case 3: for (int j = 0; j < 20; j++) r[irand(V)] = 12.5f; for (int j = 0; j < 60; j++) r[irand(V)] = 11.0f; break;
  case 4: for (int i = 0; i < V; i++) r[i] *= 3e3f; break;
  }
}

static void check_sample(int V, int launches, int *decided, int *deferred) {
  struct hearth_err err = {0};
  float *h = malloc((size_t)SMP_ROWS * V * sizeof *h), *back = malloc((size_t)SMP_ROWS * V * sizeof *back);
  struct hb_sample_pen *pen = malloc((size_t)SMP_ROWS * 4096 * sizeof *pen);
  struct hb_tensor lg, ids;
  if (G->alloc_f32(gc, &lg, SMP_ROWS, V, &err) || G->alloc(gc, &ids, HB_I32, SMP_ROWS, 1, &err)) {
    fprintf(stderr, "sample: %s\n", err.msg);
    test_failures++;
    return;
  }
  for (int L = 0; L < launches; L++) {
    struct hb_sample_row rows[SMP_ROWS];
    struct hearth_sampler *smp[SMP_ROWS];
    int32_t prompt[SMP_ROWS][48], hist[SMP_ROWS][64], nh[SMP_ROWS], cs[SMP_ROWS], init[SMP_ROWS], got[SMP_ROWS];
    int n_pen = 0;
    for (int r = 0; r < SMP_ROWS; r++) {
      float *row = h + (int64_t)r * V;
      smp_fill(row, V, L * SMP_ROWS + r);
      cs[r] = (L * 7 + r) % (SMP_NCASES + 1) - 1; /* -1: a row the op leaves alone */
      init[r] = 1000 + r;
      smp[r] = NULL;
      nh[r] = irand(64);
      for (int i = 0; i < 48; i++) prompt[r][i] = irand(V);
      for (int i = 0; i < nh[r]; i++) hist[r][i] = i % 3 ? irand(V) : prompt[r][irand(48)];
      for (int i = 0; i < nh[r]; i += 2) if (row[hist[r][i]] > -INFINITY) row[hist[r][i]] += 10.0f; /* penalties bite */
      if (cs[r] < 0) { rows[r] = (struct hb_sample_row){.temperature = 0.0f}; continue; }
      if (smp_row(&SMP_CASES[cs[r]], V, (uint64_t)(L * 131 + r), prompt[r], 48, hist[r], nh[r], 4096, &smp[r], &rows[r],
                  pen, &n_pen))
        return;
    }
    G->write(gc, &lg, 0, SMP_ROWS, h);
    G->write(gc, &ids, 0, SMP_ROWS, init);
    G->sample(gc, &lg, SMP_ROWS, rows, pen, n_pen, &ids);
    G->read(gc, &ids, 0, SMP_ROWS, got);
    G->read(gc, &lg, 0, SMP_ROWS, back);
    if (G->sync(gc, &err)) { fprintf(stderr, "sample V %d: %s\n", V, err.msg); test_failures++; break; }
    CHECKF(!memcmp(back, h, (size_t)SMP_ROWS * V * sizeof *h), "V %d launch %d: the op changed the logits", V, L);
    for (int r = 0; r < SMP_ROWS; r++) {
      if (cs[r] < 0) {
        CHECKF(got[r] == init[r], "V %d launch %d row %d (not sampled): id %d, want it untouched", V, L, r, got[r]);
        continue;
      }
      const struct smp_case *c = &SMP_CASES[cs[r]];
      const int32_t want = sampler_sample_u(smp[r], h + (int64_t)r * V, hist[r], nh[r], rows[r].u);
      printf("  sample V %d launch %d row %d kind %d (T %g k %d p %g min_p %g rep %g pres %g freq %g, %d hist, %d listed) "
             "u %.17g: device %d host %d\n", V, L, r, (L * SMP_ROWS + r) % 5, c->t, c->k, c->p, c->minp, c->rep, c->pres,
             c->freq, nh[r], rows[r].n_pen, rows[r].u, got[r], want);
      if (got[r] == -1) {
        (*deferred)++;
        CHECKF(!c->must, "V %d launch %d row %d: the device deferred a case it always decides", V, L, r);
      } else {
        (*decided)++;
        CHECKF(got[r] == want, "V %d launch %d row %d: device %d, host %d", V, L, r, got[r], want);
      }
      hearth_sampler_free(smp[r]);
    }
  }
  G->release(gc, &lg);
  G->release(gc, &ids);
  free(h);
  free(back);
  free(pen);
}

TEST_GROUP(sample) {
  if (setup(1)) return;
  const int Vs[] = {151936, 5000, 700};
  for (int v = 0; v < 3; v++) {
    int decided = 0, deferred = 0;
    check_sample(Vs[v], v == 0 ? 12 : 24, &decided, &deferred);
    printf("  sample V %d: %d rows decided on the device (each equal to the host's draw), %d deferred to the host\n",
           Vs[v], decided, deferred);
    CHECK(decided > 0);
  }
  teardown();
}

/* ---- the sample op on full-size flat rows (sample_large.cuh: sets past SAMPLE_CAP) vs runtime/sampler.c ---------
 * Rows of 151,936 and 262,144 entries that are flat (a random-weight model's), flat with exact ties everywhere,
 * flat under a peaked head, or flat with a third near -FLT_MAX; top-p 0.5-0.99, min-p alone and with top-p, top-k 50 and
 * 5,000 with top-p, top-k 20,000 alone, temperatures 0.3-2, penalties; 32 rows a launch, each its own seed.
 * Every id the device decides must be the host's draw with that u; -1 (deferred to the host) is allowed only for
 * a near tie, so the deferrals are counted, printed and held under 1 % of the draws. */
static const struct smp_case SMPL_CASES[] = {
  {0.8f, 0, 0.95f, 0.0f, 1.0f, 0.0f, 0.0f, 0},   {1.0f, 0, 0.5f, 0.0f, 1.0f, 0.0f, 0.0f, 0},
  {0.3f, 0, 0.9f, 0.0f, 1.0f, 0.0f, 0.0f, 0},    {2.0f, 0, 0.99f, 0.0f, 1.0f, 0.0f, 0.0f, 0},
  {1.2f, 0, 0.95f, 0.05f, 1.0f, 0.0f, 0.0f, 0},  {1.0f, 0, 1.0f, 0.01f, 1.0f, 0.0f, 0.0f, 0},
  {0.7f, 0, 1.0f, 0.3f, 1.0f, 0.0f, 0.0f, 0},    {1.0f, 50, 0.9f, 0.0f, 1.0f, 0.0f, 0.0f, 0},
  {0.9f, 5000, 0.9f, 0.0f, 1.1f, 0.0f, 0.0f, 0}, {1.5f, 20000, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 0},
  {0.8f, 0, 0.95f, 0.0f, 1.3f, 0.5f, 0.2f, 0},   {1.0f, 0, 0.99f, 0.001f, 1.0f, 0.2f, 0.1f, 0},
};
#define SMPL_NCASES ((int)(sizeof SMPL_CASES / sizeof SMPL_CASES[0]))
enum { SMPL_ROWS = 32 };

static void smpl_fill(float *r, int V, int kind) {
  for (int i = 0; i < V; i++) r[i] = frand() * 2.0f;
  switch (kind % 4) {
  case 0: break;
  case 1: for (int i = 0; i < V; i++) r[i] = floorf(r[i] * 16.0f) / 16.0f; break; /* ties everywhere */
  case 2: for (int j = 0; j < 50; j++) r[irand(V)] += 6.0f; break;
  case 3: for (int i = 0; i < V; i++) if (irand(3) == 0) r[i] = -3e38f; break; /* -inf once penalised */
  }
}

static void check_sample_large(int V, int launches, int *decided, int *deferred) {
  struct hearth_err err = {0};
  float *h = malloc((size_t)SMPL_ROWS * V * sizeof *h), *back = malloc((size_t)SMPL_ROWS * V * sizeof *back);
  struct hb_sample_pen *pen = malloc((size_t)SMPL_ROWS * 256 * sizeof *pen);
  struct hb_tensor lg, ids;
  if (G->alloc_f32(gc, &lg, SMPL_ROWS, V, &err) || G->alloc(gc, &ids, HB_I32, SMPL_ROWS, 1, &err)) {
    fprintf(stderr, "sample_large: %s\n", err.msg);
    test_failures++;
    return;
  }
  for (int L = 0; L < launches; L++) {
    struct hb_sample_row rows[SMPL_ROWS];
    struct hearth_sampler *smp[SMPL_ROWS];
    int32_t prompt[SMPL_ROWS][24], hist[SMPL_ROWS][32], nh[SMPL_ROWS], cs[SMPL_ROWS], got[SMPL_ROWS];
    int n_pen = 0;
    for (int r = 0; r < SMPL_ROWS; r++) {
      float *row = h + (int64_t)r * V;
      smpl_fill(row, V, L + r);
      cs[r] = (L * 5 + r) % SMPL_NCASES;
      nh[r] = irand(32);
      for (int i = 0; i < 24; i++) prompt[r][i] = irand(V);
      for (int i = 0; i < nh[r]; i++) hist[r][i] = irand(V);
      if (smp_row(&SMPL_CASES[cs[r]], V, (uint64_t)(V + L * 1009 + r * 7), prompt[r], 24, hist[r], nh[r], 256, &smp[r],
                  &rows[r], pen, &n_pen))
        return;
    }
    G->write(gc, &lg, 0, SMPL_ROWS, h);
    G->sample(gc, &lg, SMPL_ROWS, rows, pen, n_pen, &ids);
    G->read(gc, &ids, 0, SMPL_ROWS, got);
    G->read(gc, &lg, 0, SMPL_ROWS, back);
    if (G->sync(gc, &err)) { fprintf(stderr, "sample_large V %d: %s\n", V, err.msg); test_failures++; break; }
    CHECKF(!memcmp(back, h, (size_t)SMPL_ROWS * V * sizeof *h), "V %d launch %d: the op changed the logits", V, L);
    for (int r = 0; r < SMPL_ROWS; r++) {
      const struct smp_case *c = &SMPL_CASES[cs[r]];
      const int32_t want = sampler_sample_u(smp[r], h + (int64_t)r * V, hist[r], nh[r], rows[r].u);
      if (got[r] == -1) {
        (*deferred)++;
        printf("  sample_large V %d launch %d row %d kind %d (T %g k %d p %g min_p %g rep %g pres %g freq %g) u %.17g: "
               "deferred, host %d\n", V, L, r, (L + r) % 4, c->t, c->k, c->p, c->minp, c->rep, c->pres, c->freq, rows[r].u,
               want);
      } else {
        (*decided)++;
        CHECKF(got[r] == want, "V %d launch %d row %d kind %d case %d u %.17g: device %d, host %d", V, L, r, (L + r) % 4,
               cs[r], rows[r].u, got[r], want);
      }
      hearth_sampler_free(smp[r]);
    }
  }
  G->release(gc, &lg);
  G->release(gc, &ids);
  free(h);
  free(back);
  free(pen);
}

TEST_GROUP(sample_large) {
  if (setup(1)) return;
  const int Vs[] = {151936, 262144}, launches[] = {40, 32};
  for (int v = 0; v < 2; v++) {
    int decided = 0, deferred = 0;
    check_sample_large(Vs[v], launches[v], &decided, &deferred);
    printf("  sample_large V %d: %d draws, %d decided on the device (each equal to the host's draw), %d deferred\n",
           Vs[v], decided + deferred, decided, deferred);
    CHECK(decided + deferred == launches[v] * SMPL_ROWS);
    CHECKF(deferred * 100 <= decided + deferred, "V %d: %d of %d draws deferred", Vs[v], deferred, decided + deferred);
  }
  teardown();
}

/* ---- the sample op's many-block path (sample_split.cuh: launches of <= 8 rows) against its one-block path ----------
 * The same rows (sample_large's kinds, and a row of three values only, where every cut and the draw fall inside a
 * run of ~50k equal keys) sampled four ways: all 32 in one launch (one block a row), in launches of 1 to 8 rows (the
 * split path), and those small launches again with hb_cuda_set_sample_one_block (one block a row, a test-only switch).
 * The three must agree id for id (-1 included: both paths compute the same integers), and each decided id must be
 * the host's draw. Then a lone flat top-p 0.95 row, the decode case of issue 36 item 4, is timed both ways and the
 * times printed (information only: speed is `hearth bench`'s business, not a test's). */
static void smps_fill(float *r, int V, int kind) {
  if (kind % 5 == 4) { for (int i = 0; i < V; i++) r[i] = (float)(i % 3) * 0.25f; return; }
  smpl_fill(r, V, kind % 5);
}

static double smps_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* rows r0 .. r0 + n of h through the op in one launch; ids into got[r0 ..]; returns the wall time (synced) or -1 */
static double smps_launch(struct hb_tensor *lg, struct hb_tensor *ids, const float *h, int V, int r0, int n,
                          const struct hb_sample_row *rows, const struct hb_sample_pen *pen, int n_pen, int32_t *got) {
  struct hearth_err err = {0};
  G->write(gc, lg, 0, n, h + (int64_t)r0 * V);
  if (G->sync(gc, &err)) { fprintf(stderr, "sample_split: %s\n", err.msg); test_failures++; return -1.0; }
  const double t0 = smps_now();
  G->sample(gc, lg, n, rows + r0, pen, n_pen, ids);
  if (G->sync(gc, &err)) { fprintf(stderr, "sample_split: %s\n", err.msg); test_failures++; return -1.0; }
  const double t = smps_now() - t0;
  G->read(gc, ids, 0, n, got + r0);
  if (G->sync(gc, &err)) { fprintf(stderr, "sample_split: %s\n", err.msg); test_failures++; return -1.0; }
  return t;
}

static void check_sample_split(int V, int launches) {
  static const int sizes[] = {1, 8, 3, 5, 2, 8, 4, 1}; /* 32 rows */
  struct hearth_err err = {0};
  float *h = malloc((size_t)SMPL_ROWS * V * sizeof *h);
  struct hb_sample_pen *pen = malloc((size_t)SMPL_ROWS * 256 * sizeof *pen);
  struct hb_tensor lg, ids;
  if (G->alloc_f32(gc, &lg, SMPL_ROWS, V, &err) || G->alloc(gc, &ids, HB_I32, SMPL_ROWS, 1, &err)) {
    fprintf(stderr, "sample_split: %s\n", err.msg);
    test_failures++;
    return;
  }
  int decided = 0, deferred = 0;
  for (int L = 0; L < launches; L++) {
    struct hb_sample_row rows[SMPL_ROWS];
    struct hearth_sampler *smp[SMPL_ROWS];
    int32_t prompt[SMPL_ROWS][24], hist[SMPL_ROWS][32], nh[SMPL_ROWS], cs[SMPL_ROWS];
    int32_t all[SMPL_ROWS], split[SMPL_ROWS], block[SMPL_ROWS];
    int n_pen = 0;
    for (int r = 0; r < SMPL_ROWS; r++) {
      smps_fill(h + (int64_t)r * V, V, L + r);
      cs[r] = (L * 3 + r) % SMPL_NCASES;
      nh[r] = irand(32);
      for (int i = 0; i < 24; i++) prompt[r][i] = irand(V);
      for (int i = 0; i < nh[r]; i++) hist[r][i] = irand(V);
      if (smp_row(&SMPL_CASES[cs[r]], V, (uint64_t)(V + L * 733 + r * 11), prompt[r], 24, hist[r], nh[r], 256, &smp[r],
                  &rows[r], pen, &n_pen))
        return;
    }
    if (smps_launch(&lg, &ids, h, V, 0, SMPL_ROWS, rows, pen, n_pen, all) < 0) break;
    for (int g = 0, r0 = 0; g < 8; r0 += sizes[g++])
      if (smps_launch(&lg, &ids, h, V, r0, sizes[g], rows, pen, n_pen, split) < 0) goto out;
    hb_cuda_set_sample_one_block(gc, 1);
    for (int g = 0, r0 = 0; g < 8; r0 += sizes[g++])
      if (smps_launch(&lg, &ids, h, V, r0, sizes[g], rows, pen, n_pen, block) < 0) { hb_cuda_set_sample_one_block(gc, 0); goto out; }
    hb_cuda_set_sample_one_block(gc, 0);
    for (int r = 0; r < SMPL_ROWS; r++) {
      const int32_t want = sampler_sample_u(smp[r], h + (int64_t)r * V, hist[r], nh[r], rows[r].u);
      CHECKF(split[r] == all[r] && block[r] == all[r], "V %d launch %d row %d kind %d case %d: split %d, one block %d and "
             "%d (32 rows / small launches), host %d", V, L, r, (L + r) % 5, cs[r], split[r], all[r], block[r], want);
      if (split[r] == -1) deferred++;
      else {
        decided++;
        CHECKF(split[r] == want, "V %d launch %d row %d kind %d case %d u %.17g: device %d, host %d", V, L, r, (L + r) % 5,
               cs[r], rows[r].u, split[r], want);
      }
      hearth_sampler_free(smp[r]);
    }
  }
  printf("  sample_split V %d: %d draws equal on both paths, %d decided (each the host's draw), %d deferred\n", V,
         decided + deferred, decided, deferred);
  CHECKF(deferred * 100 <= decided + deferred, "V %d: %d of %d draws deferred", V, deferred, decided + deferred);
  { /* one flat row, T 0.8, top-p 0.95: the median of 9 launches each way */
    const struct smp_case c = {0.8f, 0, 0.95f, 0.0f, 1.0f, 0.0f, 0.0f, 0};
    struct hb_sample_row row;
    struct hearth_sampler *smp;
    int32_t prompt[4] = {1, 2, 3, 4}, got[2];
    double ts[2][9];
    int np = 0;
    smpl_fill(h, V, 0);
    if (smp_row(&c, V, 77, prompt, 4, NULL, 0, 0, &smp, &row, pen, &np)) goto out;
    for (int k = 0; k < 9; k++)
      for (int m = 0; m < 2; m++) {
        hb_cuda_set_sample_one_block(gc, m);
        ts[m][k] = smps_launch(&lg, &ids, h, V, 0, 1, &row, pen, np, got + m);
        hb_cuda_set_sample_one_block(gc, 0);
        CHECKF(got[m] == got[0], "V %d timed row: split %d, one block %d", V, got[0], got[m]);
      }
    for (int m = 0; m < 2; m++) /* insertion sort: the median is ts[m][4] */
      for (int a = 1; a < 9; a++)
        for (int b = a; b > 0 && ts[m][b] < ts[m][b - 1]; b--) { double x = ts[m][b]; ts[m][b] = ts[m][b - 1]; ts[m][b - 1] = x; }
    printf("  sample_split V %d: one flat top-p 0.95 row: %.1f us split, %.1f us one block (launch to sync, median of 9)\n",
           V, ts[0][4] * 1e6, ts[1][4] * 1e6);
    hearth_sampler_free(smp);
  }
out:
  G->release(gc, &lg);
  G->release(gc, &ids);
  free(h);
  free(pen);
}

TEST_GROUP(sample_split) {
  if (setup(1)) return;
  check_sample_split(151936, 12);
  check_sample_split(262144, 6);
  teardown();
}

/* ---- rows holding a NaN or an infinity (the model's numbers broke down): the argmax writes id 0 (still a valid id:
 * a greedy graph feeds it to the next step on the device) and a NaN logprob, which the runtime turns into id -1; the
 * sample op writes HB_SAMPLE_NONFINITE. Finite rows beside them are chosen as before: the host's argmax (first
 * index on ties) of what the device holds, with the same id and logprob bits as in a batch of finite rows alone.
 * Both argmax kernels (one block per row; the split one from 4096 * 32 columns), f32 (exact) and f16 logits. */
enum { NF_ROWS = 8 };
static const int nf_bad[NF_ROWS] = {0, 1, 1, 1, 1, 1, 0, 1};

static void nf_fill(float *h, int V) {
  for (int64_t i = 0; i < (int64_t)NF_ROWS * V; i++) h[i] = frand() * 8.0f;
  h[1 * (int64_t)V + irand(V)] = NAN;                           /* one NaN */
  for (int i = 0; i < V; i++) h[2 * (int64_t)V + i] = NAN;      /* all NaN */
  h[3 * (int64_t)V + irand(V)] = INFINITY;                      /* one +inf */
  h[4 * (int64_t)V + irand(V)] = -INFINITY;                     /* one -inf */
  for (int i = 0; i < V; i++) h[5 * (int64_t)V + i] = -INFINITY; /* all -inf */
  h[6 * (int64_t)V + 17] = h[6 * (int64_t)V + V - 3] = 9.5f;    /* a tie at the max: the first index wins */
  h[7 * (int64_t)V + 0] = NAN;                                   /* a NaN in the first column */
}

/* argmax of rows [0, n) of lg into gid / glp (glp NULL: no logprobs); ids and logprobs poisoned first, so an
 * unwritten one cannot pass. 0 on success. */
static int nf_argmax(const struct hb_tensor *lg, int n, int32_t *gid, float *glp) {
  struct hearth_err err = {0};
  struct hb_tensor ids, lp;
  int32_t pid[NF_ROWS];
  float plp[NF_ROWS];
  for (int r = 0; r < NF_ROWS; r++) { pid[r] = -7; plp[r] = 1.0f; }
  if (G->alloc(gc, &ids, HB_I32, n, 1, &err) || G->alloc(gc, &lp, HB_F32, n, 1, &err)) {
    fprintf(stderr, "nonfinite: %s\n", err.msg);
    return -1;
  }
  G->write(gc, &ids, 0, n, pid);
  G->write(gc, &lp, 0, n, plp);
  hb_cuda_argmax(gc, lg, n, &ids, glp ? &lp : NULL);
  G->read(gc, &ids, 0, n, gid);
  if (glp) G->read(gc, &lp, 0, n, glp);
  int rc = G->sync(gc, &err);
  if (rc) fprintf(stderr, "nonfinite argmax: %s\n", err.msg);
  G->release(gc, &ids);
  G->release(gc, &lp);
  return rc;
}

static void check_nonfinite(int V) {
  struct hearth_err err = {0};
  float *h = malloc((size_t)NF_ROWS * (size_t)V * sizeof *h), *d = malloc((size_t)NF_ROWS * (size_t)V * sizeof *d);
  nf_fill(h, V);
  struct pair lg, fin;
  pair_alloc(&lg, HB_F32, NF_ROWS, V);
  pair_alloc(&fin, HB_F32, 2, V);
  G->write(gc, &lg.g, 0, NF_ROWS, h);
  G->write(gc, &fin.g, 0, 1, h);                         /* the finite rows 0 and 6 alone */
  G->write(gc, &fin.g, 1, 1, h + 6 * (int64_t)V);
  G->read(gc, &lg.g, 0, NF_ROWS, d); /* what the device holds (f16-rounded on the fast path) */
  if (G->sync(gc, &err)) { fprintf(stderr, "nonfinite: %s\n", err.msg); test_failures++; }
  int32_t gid[NF_ROWS] = {0}, gid2[NF_ROWS] = {0}, nolp[NF_ROWS] = {0}, fid[2] = {0};
  float glp[NF_ROWS] = {0}, glp2[NF_ROWS] = {0}, flp[2] = {0};
  int ok = nf_argmax(&lg.g, NF_ROWS, gid, glp) == 0 && nf_argmax(&lg.g, NF_ROWS, gid2, glp2) == 0 &&
           nf_argmax(&lg.g, NF_ROWS, nolp, NULL) == 0 && nf_argmax(&fin.g, 2, fid, flp) == 0;
  CHECK(ok);
  for (int r = 0; ok && r < NF_ROWS; r++) {
    const float *row = d + (int64_t)r * V;
    if (nf_bad[r]) {
      printf("  argmax V %d row %d (non-finite): id %d logprob %f\n", V, r, gid[r], glp[r]);
      CHECKF(gid[r] == 0 && isnan(glp[r]), "V %d row %d: id %d logprob %f, want 0 and NaN", V, r, gid[r], glp[r]);
    } else {
      int best = 0;
      for (int i = 1; i < V; i++) if (row[i] > row[best]) best = i;
      double s = 0;
      for (int i = 0; i < V; i++) s += exp((double)row[i] - row[best]);
      const double ref = -log(s);
      printf("  argmax V %d row %d: gpu %d cpu %d, logprob gpu %.5f ref %.5f\n", V, r, gid[r], best, glp[r], ref);
      CHECKF(gid[r] == best, "V %d row %d: id %d, host argmax %d", V, r, gid[r], best);
      CHECK(fabs(glp[r] - ref) < 1e-3 + 1e-3 * fabs(ref));
    }
    /* a second launch (the split kernel's per-row counters were reset) and one without logprobs agree */
    CHECKF(gid2[r] == gid[r] && nolp[r] == gid[r] && !memcmp(&glp2[r], &glp[r], sizeof glp[r]),
           "V %d row %d: ids %d / %d / %d over three launches", V, r, gid[r], gid2[r], nolp[r]);
  }
  /* the finite rows alone: the same ids and logprob bits (a broken neighbour changes nothing) */
  CHECK(ok && fid[0] == gid[0] && fid[1] == gid[6] && !memcmp(&flp[0], &glp[0], 4) && !memcmp(&flp[1], &glp[6], 4));

  /* the sample op: top-k 50 at temperature 1 (decided on the device), on an f32 copy of the rows */
  struct hb_sample_row P[NF_ROWS];
  for (int r = 0; r < NF_ROWS; r++)
    P[r] = (struct hb_sample_row){.u = (frand() + 1.0f) * 0.4995f, .temperature = 1.0f, .top_k = 50, .top_p = 1.0f,
                                  .repetition = 1.0f};
  struct hb_tensor ids, lp, lg32;
  int32_t sid[NF_ROWS];
  G->alloc(gc, &ids, HB_I32, NF_ROWS, 1, &err);
  G->alloc(gc, &lp, HB_F32, NF_ROWS, 1, &err);
  G->alloc_f32(gc, &lg32, NF_ROWS, V, &err);
  G->write(gc, &lg32, 0, NF_ROWS, h);
  G->sample(gc, &lg32, NF_ROWS, P, NULL, 0, &ids);
  G->read(gc, &ids, 0, NF_ROWS, sid);
  if (G->sync(gc, &err)) { fprintf(stderr, "nonfinite sample: %s\n", err.msg); test_failures++; }
  else {
    struct hearth_sampling sp;
    hearth_sampling_default(&sp);
    sp.top_k = 50;
    struct hearth_sampler *hs = NULL;
    if (hearth_sampler_new(&sp, V, &hs, &err)) { fprintf(stderr, "sampler: %s\n", err.msg); test_failures++; }
    for (int r = 0; hs && r < NF_ROWS; r++) {
      const int32_t want = nf_bad[r] ? HB_SAMPLE_NONFINITE : sampler_sample_u(hs, h + (int64_t)r * V, NULL, 0, P[r].u);
      printf("  sample V %d row %d: gpu %d want %d\n", V, r, sid[r], want);
      CHECKF(sid[r] == want, "V %d row %d: sampled %d, want %d", V, r, sid[r], want);
    }
    hearth_sampler_free(hs);
  }
  G->release(gc, &lg32);
  G->release(gc, &ids);
  G->release(gc, &lp);
  pair_free(&lg);
  pair_free(&fin);
  free(h);
  free(d);
}

TEST_GROUP(nonfinite) {
  for (int exact = 1; exact >= 0; exact--) {
    if (setup(exact)) return;
    check_nonfinite(1000);   /* one block per row */
    check_nonfinite(151936); /* the split kernel */
    teardown();
  }
}

/* ---- row scores (backend.h row_score): the device op against its host definition (runtime/row_score.c) on rows
 * with many ties (values on a 1/8 grid), a NaN row and an infinite one; top-k ids and values, the max and the ids'
 * values must be the same bits, log Σ exp within 1e-12 (a double sum in another order); a row alone must give the
 * same bits as in the batch (the op's batch invariance). */
static void check_row_score(int V) {
  enum { R = 6 };
  struct hearth_err err = {0};
  float *h = malloc((size_t)R * (size_t)V * sizeof *h);
  for (int64_t i = 0; i < (int64_t)R * V; i++) h[i] = floorf(frand() * 64.0f) / 8.0f;
  h[2 * (int64_t)V + irand(V)] = NAN;
  h[3 * (int64_t)V + irand(V)] = INFINITY;
  h[4 * (int64_t)V + 5] = h[4 * (int64_t)V + V - 1] = 100.0f; /* a tie at the max: the first index */
  int32_t req[R * HB_SCORE_REQ], out[R * HB_SCORE_OUT], one[HB_SCORE_OUT], ref[HB_SCORE_OUT];
  memset(req, 0, sizeof req);
  for (int r = 0; r < R; r++) {
    int32_t *q = req + r * HB_SCORE_REQ;
    q[0] = r == 5 ? 0 : r == 0 ? HB_SCORE_K : 1 + irand(HB_SCORE_K);
    q[1] = r == 1 ? HB_SCORE_NID : irand(4);
    for (int j = 0; j < q[1]; j++) q[2 + j] = irand(V);
  }
  struct hb_tensor lg, rq, ot, lg1, rq1, ot1;
  /* logits are f32 on every path (alloc_f32: the fast path's alloc would store f16) */
  int bad = G->alloc_f32(gc, &lg, R, V, &err) || G->alloc(gc, &rq, HB_I32, R, HB_SCORE_REQ, &err) ||
            G->alloc(gc, &ot, HB_I32, R, HB_SCORE_OUT, &err) || G->alloc_f32(gc, &lg1, 1, V, &err) ||
            G->alloc(gc, &rq1, HB_I32, 1, HB_SCORE_REQ, &err) || G->alloc(gc, &ot1, HB_I32, 1, HB_SCORE_OUT, &err);
  CHECKF(!bad, "row_score alloc: %s", err.msg);
  if (bad) { free(h); return; }
  for (int i = 0; i < R * HB_SCORE_OUT; i++) out[i] = 0x7fc00001; /* poisoned: an unwritten word cannot pass */
  G->write(gc, &lg, 0, R, h);
  G->write(gc, &rq, 0, R, req);
  G->write(gc, &ot, 0, R, out);
  G->row_score(gc, &lg, R, &rq, &ot);
  G->read(gc, &ot, 0, R, out);
  CHECKF(G->sync(gc, &err) == 0, "row_score: %s", err.msg);
  for (int r = 0; r < R; r++) {
    const int32_t *q = req + r * HB_SCORE_REQ, *o = out + r * HB_SCORE_OUT;
    row_score_host(h + (int64_t)r * V, V, q, ref);
    for (int i = 0; i < HB_SCORE_OUT; i++) one[i] = 0x7fc00001;
    G->write(gc, &lg1, 0, 1, h + (int64_t)r * V);
    G->write(gc, &rq1, 0, 1, q);
    G->write(gc, &ot1, 0, 1, one);
    G->row_score(gc, &lg1, 1, &rq1, &ot1);
    G->read(gc, &ot1, 0, 1, one);
    CHECKF(G->sync(gc, &err) == 0, "row_score alone: %s", err.msg);
    if (ref[0] < 0) {
      CHECKF(o[0] == -1 && one[0] == -1, "V %d row %d (non-finite): id %d / %d, want -1", V, r, o[0], one[0]);
      continue;
    }
    double ls_d, ls_h;
    memcpy(&ls_d, o + 2, sizeof ls_d);
    memcpy(&ls_h, ref + 2, sizeof ls_h);
    int same = o[0] == ref[0] && o[1] == ref[1] && fabs(ls_d - ls_h) <= 1e-12 * fabs(ls_h) + 1e-15;
    for (int j = 0; j < q[0]; j++) same &= o[HB_SCORE_TOP + j] == ref[HB_SCORE_TOP + j] && o[HB_SCORE_TOPV + j] == ref[HB_SCORE_TOPV + j];
    for (int j = 0; j < q[1]; j++) same &= o[HB_SCORE_IDV + j] == ref[HB_SCORE_IDV + j];
    int alone = memcmp(o, one, 4 * sizeof *o) == 0 &&
                memcmp(o + HB_SCORE_TOP, one + HB_SCORE_TOP, (size_t)q[0] * sizeof *o) == 0 &&
                memcmp(o + HB_SCORE_TOPV, one + HB_SCORE_TOPV, (size_t)q[0] * sizeof *o) == 0 &&
                memcmp(o + HB_SCORE_IDV, one + HB_SCORE_IDV, (size_t)q[1] * sizeof *o) == 0;
    printf("  row_score V %d row %d: k %d ids %d, argmax %d (host %d), lse %.15f (host %.15f), top1 %d, alone %s\n", V, r,
           q[0], q[1], o[0], ref[0], ls_d, ls_h, q[0] ? o[HB_SCORE_TOP] : -1, alone ? "same" : "DIFFERS");
    CHECKF(same, "V %d row %d: device scores differ from the host's", V, r);
    CHECKF(alone, "V %d row %d: alone and in the batch differ", V, r);
  }
  G->release(gc, &lg); G->release(gc, &rq); G->release(gc, &ot);
  G->release(gc, &lg1); G->release(gc, &rq1); G->release(gc, &ot1);
  free(h);
}

TEST_GROUP(row_score) {
  if (setup(0)) return;
  check_row_score(1000);
  check_row_score(151936);
  teardown();
}

/* run-to-run determinism: the same decode GEMV with the rmsnorm prologue, or the same split-K GEMM, launched again on
 * the same inputs must give the same bits. Until round 23 both added partial sums with f32 atomics in arrival order (the
 * norm's sum of squares per warp; split-K's partial tiles), and greedy ids of one checkpoint differed from run to run
 * (bench/NOTES.md). kind: 0 norm_matmul (n <= 8: the decode GEMV; more: rmsnorm + GEMM), 1 norm_swiglu, 2 silu_matmul
 * (no residual: the GEMM with split-K) */
static void check_repeat(int kind, int K, int n_mm, const int *rows, int n) {
  struct hearth_err err = {0};
  struct pair x, x2, nw, w[3], o[3];
  pair_rand(&x, HB_F32, n, K, 3.0f);
  if (kind == 2) pair_rand(&x2, HB_F32, n, K, 2.0f);
  else weight_pair(&nw, HB_F32, 1, K, 1.0f);
  const int n_out = kind == 0 ? n_mm : 1;
  size_t tot = 0;
  for (int i = 0; i < n_mm; i++) {
    weight_pair(&w[i], HB_Q4, rows[i], K, 0.5f);
    if (i < n_out) {
      pair_alloc(&o[i], HB_F32, n, rows[i]);
      tot += (size_t)n * (size_t)rows[i];
    }
  }
  float *ref = malloc(tot * sizeof *ref), *got = malloc(tot * sizeof *got);
  struct hb_tensor *og[3] = {&o[0].g, &o[1].g, &o[2].g};
  const struct hb_tensor *wg[3] = {&w[0].g, &w[1].g, &w[2].g};
  int differ = 0, reps = 24, bad = 0;
  for (int rep = 0; rep < reps && !bad; rep++) {
    for (int i = 0; i < n_out; i++) pair_poison(&o[i]); /* a launch that wrote nothing cannot pass */
    if (kind == 0) hb_cuda_norm_matmul(gc, &x.g, &nw.g, 1e-6f, 0.0f, n_mm, og, wg, NULL, n, 0);
    else if (kind == 1) bad = hb_cuda_norm_swiglu(gc, &x.g, &nw.g, 1e-6f, &w[0].g, &w[1].g, &o[0].g, n, HB_ACT_SILU) != 0;
    else hb_cuda_silu_matmul(gc, &x.g, &x2.g, &o[0].g, &w[0].g, n, 0);
    float *dst = rep ? got : ref;
    size_t off = 0;
    for (int i = 0; i < n_out; i++) {
      G->read(gc, &o[i].g, 0, n, dst + off);
      off += (size_t)n * (size_t)rows[i];
    }
    if (G->sync(gc, &err)) { fprintf(stderr, "repeat: %s\n", err.msg); bad = 1; break; }
    for (size_t i = 0; i < tot && !bad; i++) bad = !isfinite(dst[i]);
    if (rep && memcmp(ref, got, tot * sizeof *ref)) differ++;
  }
  char what[96];
  snprintf(what, sizeof what, "%s K=%d rows=%d%s n=%d", kind == 0 ? "norm_matmul" : kind == 1 ? "norm_swiglu" : "silu_matmul",
           K, rows[0], n_mm > 1 ? "+" : "", n);
  printf("  %-44s %d of %d repeats differ from the first%s\n", what, differ, reps - 1, bad ? ", ERROR or NON-FINITE" : "");
  CHECKF(!bad && differ == 0, "%s: %d of %d repeated launches differ from the first (error or non-finite: %d)", what,
         differ, reps - 1, bad);
  free(ref); free(got);
  for (int i = 0; i < n_mm; i++) {
    pair_free(&w[i]);
    if (i < n_out) pair_free(&o[i]);
  }
  if (kind == 2) pair_free(&x2);
  else pair_free(&nw);
  pair_free(&x);
}

TEST_GROUP(repeat) {
  if (setup(0)) return;
  const int qkv3[3] = {2048, 256, 256}, qkv05[3] = {896, 128, 128}, gu3b[2] = {11008, 11008}, gu[2] = {1024, 1024};
  const int gu8[2] = {4864, 4864}, head[1] = {16384}, down[1] = {2048};
  /* the decode GEMV's norm prologue (n <= 8) */
  check_repeat(0, 2048, 3, qkv3, 1);     /* the 3B's norm + QKV, one token: 8 warps' sums */
  check_repeat(0, 2048, 3, qkv3, 3);     /* three tokens (round 23: 23 of 23 repeats differed with f32 slots) */
  check_repeat(0, 896, 3, qkv05, 5);     /* the 0.5B's: 7 groups, warps whose chunks straddle two tokens */
  check_repeat(0, 2048, 1, head, 1);     /* LM-head-like: whole-tile warps */
  check_repeat(1, 2048, 2, gu3b, 1);     /* the 3B's gate/up: the co-resident 11-warp shape */
  check_repeat(1, 2048, 2, gu, 3);
  check_repeat(1, 2048, 2, gu8, 8);      /* eight tokens: the long-row prologue */
  /* the prefill GEMM's split-K (after the rmsnorm or silu kernel) */
  check_repeat(0, 2048, 3, qkv3, 71);    /* the 3B's QKV at a 71-token prompt: split-K 8 over all three */
  check_repeat(0, 896, 3, qkv05, 71);    /* the 0.5B's: split-K 3 (5, 5, 4 k-tiles) */
  check_repeat(0, 2048, 2, gu3b, 40);    /* the 3B's gate/up: split-K 4 */
  check_repeat(2, 11008, 1, down, 17);   /* the 3B's down at 17 rows: split-K 16 */
  teardown();
}

/* norm_swiglu (SiLU) past the GEMV: rmsnorm, then the gate/up GEMM with silu(g) * u in its epilogue (no split-K) or in
 * its split-K finish, must give the bits of the plain sequence it replaces on the same device (norm_matmul into gate
 * and up, then silu_mul): partial token tiles, a row count that is not a multiple of 64 (the last block's rows
 * masked), decode batches, the embedding model's and the 3B's shapes. Outputs poisoned first; a decline (1) fails. */
static void check_swiglu_gemm(int K, int R, int n) {
  struct pair x, nw, wgp, wup, gt, up, ref, h;
  pair_rand(&x, HB_F32, n, K, 2.0f);
  weight_pair(&nw, HB_F32, 1, K, 0.5f);
  weight_pair(&wgp, HB_Q4, R, K, 0.5f);
  weight_pair(&wup, HB_Q4, R, K, 0.5f);
  pair_alloc(&gt, HB_F32, n, R);
  pair_alloc(&up, HB_F32, n, R);
  pair_alloc(&ref, HB_F32, n, R);
  pair_alloc(&h, HB_F32, n, R);
  pair_poison(&ref);
  pair_poison(&h);
  struct hb_tensor *og[2] = {&gt.g, &up.g};
  const struct hb_tensor *wg[2] = {&wgp.g, &wup.g};
  hb_cuda_norm_matmul(gc, &x.g, &nw.g, 1e-6f, 0.0f, 2, og, wg, NULL, n, 0);
  G->silu_mul(gc, &ref.g, &gt.g, &up.g, n);
  const int rc = hb_cuda_norm_swiglu(gc, &x.g, &nw.g, 1e-6f, &wgp.g, &wup.g, &h.g, n, HB_ACT_SILU);
  const size_t cnt = (size_t)n * (size_t)R;
  float *a = malloc(cnt * sizeof *a), *b = malloc(cnt * sizeof *b);
  struct hearth_err err = {0};
  G->read(gc, &ref.g, 0, n, a);
  G->read(gc, &h.g, 0, n, b);
  const int sync_bad = G->sync(gc, &err) != 0;
  size_t differ = 0, nonfinite = 0, first = cnt;
  for (size_t i = 0; i < cnt; i++) {
    if (!isfinite(a[i]) || !isfinite(b[i])) nonfinite++;
    if (memcmp(&a[i], &b[i], sizeof a[i])) {
      if (first == cnt) first = i;
      differ++;
    }
  }
  printf("  swiglu GEMM K=%d rows=%d n=%d: rc %d, %zu of %zu values differ from norm_matmul + silu_mul, %zu non-finite\n",
         K, R, n, rc, differ, cnt, nonfinite);
  if (first < cnt)
    printf("    first: token %zu, column %zu: %.8g against %.8g\n", first / (size_t)R, first % (size_t)R, b[first], a[first]);
  CHECKF(rc == 0 && !sync_bad && differ == 0 && nonfinite == 0,
         "swiglu GEMM K=%d rows=%d n=%d: rc %d, %zu values differ, %zu non-finite (%s)", K, R, n, rc, differ, nonfinite,
         err.msg);
  free(a);
  free(b);
  pair_free(&x); pair_free(&nw); pair_free(&wgp); pair_free(&wup);
  pair_free(&gt); pair_free(&up); pair_free(&ref); pair_free(&h);
}

/* the mma.sync GEMM and the wgmma GEMM (sm90a/gemm_wgmma.cu), each forced for every GEMM call: token tiles of 32, 64
 * and 128 with partial last tiles, split-K (the finish adding the residual),
 * three weights in one launch, bias, add into the output, a last weight of 200 rows, f16 and f32 outputs; with
 * 128 weight rows per block (WG) and 256 (WG256; the QKV of 2048 + 256 + 256 rows, a weight of 512 rows then one of
 * 256 then 200). It is built for Hopper (sm_90a): on another GPU the group fails, saying so. */
TEST_GROUP(wgmma) {
  if (setup(0)) return;
  double mg = 4e-3; /* the fast group's q4 GEMM tolerance */
  int qkv3[3] = {2048, 256, 256}, part[3] = {512, 256, 200}, gu[2] = {1024, 1024}, o1[1] = {2048};
  const int kinds[3] = {HB_CUDA_GEMM_MMA, HB_CUDA_GEMM_WG, HB_CUDA_GEMM_WG256};
  for (int ki = 0; ki < 3; ki++) {
    const int kind = kinds[ki];
    printf("  -- %s\n", kind == HB_CUDA_GEMM_MMA ? "mma.sync (the kernel of other GPUs; auto mode takes wgmma from 9 rows)"
                       : kind == HB_CUDA_GEMM_WG ? "wgmma, 128 weight rows per block"
                                                 : "wgmma, 256 weight rows per block");
    if (hb_cuda_set_gemm(gc, kind) != kind) {
      CHECKF(0, "the wgmma GEMM does not run on this device (it needs sm_90: H100 / H200)");
      break;
    }
    check_norm_matmul(2048, 3, qkv3, 9, 1, 1, 0, mg);     /* 32-token tile (wgmma, n <= 32), 9 of 32 rows, split-K */
    check_norm_matmul(2048, 2, gu, 32, 1, 0, 0, mg);      /* a whole 32-token tile (a decode step of 32 sequences) */
    check_norm_matmul(2048, 3, qkv3, 33, 1, 1, 0, mg);    /* 64-token tile, 33 of 64 rows used, split-K */
    check_norm_matmul(2048, 3, qkv3, 71, 1, 1, 0, mg);    /* 128-token tile, partial, split-K */
    check_norm_matmul(2048, 3, qkv3, 600, 1, 1, 0, mg);   /* 5 token tiles, split-K */
    check_norm_matmul(512, 3, qkv3, 1100, 1, 1, 0, mg);   /* 9 token tiles: no split at 128 rows, bias in the epilogue */
    check_norm_matmul(1024, 3, part, 50, 1, 1, 0, mg);    /* last weight 200 rows: a partial weight tile */
    check_norm_matmul(1024, 2, gu, 130, 1, 0, 0, mg);     /* two token tiles, the second holding 2 rows */
    check_norm_matmul(2048, 1, o1, 300, 0, 0, 1, mg);     /* o_proj + residual, the add in the split-K finish */
    check_norm_matmul(512, 1, o1, 1100, 0, 0, 1, mg);     /* the add in the GEMM epilogue */
    check_silu_matmul(11008, 2048, 17, 1, mg);            /* 3B down + residual: deep split-K */
    check_silu_matmul(11008, 2048, 520, 1, mg);           /* split-K over 172 k-tiles */
    check_silu_matmul(3072, 1024, 566, 0, mg);            /* the embedding model's down, no residual */
    check_matmul_f32out(1024, 1024, 200, mg);             /* f32 output, through the split-K finish */
    check_matmul_f32out(4096, 1024, 1100, mg);            /* f32 output from the GEMM epilogue (no split) */
    check_matmul_f32out(100, 896, 40, mg);                /* f32 output, 100 rows (padded weight blocks) */
    check_matmul_f32out(1024, 1024, 24, mg);              /* f32 output at the 32-token tile, split-K */
    /* norm_swiglu: silu_mul in the split-K finish (with 256 weight rows a block the 3B's joined gate/up fills the
     * GPU without a split: a smaller one) */
    check_swiglu_gemm(2048, kind == HB_CUDA_GEMM_WG256 ? 1024 : 11008, 24);
  }
  if (hb_cuda_set_gemm(gc, HB_CUDA_GEMM_AUTO) == HB_CUDA_GEMM_AUTO) {
    printf("  -- norm_swiglu's SwiGLU GEMM (auto kernel choice)\n");
    check_swiglu_gemm(1024, 3072, 700);   /* the embedding model's gate/up, 6 token tiles, the last of 60 rows */
    check_swiglu_gemm(1024, 3072, 7870);  /* an embedding pass */
    check_swiglu_gemm(2048, 11008, 130);  /* the 3B's, two token tiles, the second of 2 rows */
    check_swiglu_gemm(1024, 1000, 2200);  /* 1000 rows: the last block's 24 of 64 masked */
    check_swiglu_gemm(2048, 11008, 32);   /* a 3B decode step of 32 sequences: silu_mul in the split-K finish */
    check_swiglu_gemm(2048, 11008, 9);    /* 9 sequences, the fewest the GEMM takes */
    check_swiglu_gemm(896, 4864, 50);     /* the 0.5B's, 64-token tile */
    check_swiglu_gemm(1024, 3072, 200);   /* two token tiles under a wave: split */
  }
  teardown();
}

/* no GPU: init must fail with a message, not crash (runs anywhere) */
TEST_GROUP(init_error) {
  struct hearth_err err = {0};
  struct hb_config cfg = {1, 99, 0};
  struct hb_ctx *x = NULL;
  int rc = G->init(&cfg, &x, &err);
  printf("  init(device 99): rc %d: %s\n", rc, err.msg);
  CHECK(rc != 0 && x == NULL && err.msg[0]);
}

TEST_MAIN(T(exact), T(fast), T(fused), T(twins), T(wgmma), T(graph), T(graph_gemma4), T(sample), T(sample_large), T(sample_split), T(nonfinite), T(row_score), T(repeat), T(init_error))
