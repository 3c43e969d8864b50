/* backend/cpu/cpu_backend.c — the CPU op table: f32 activations, a thread pool, paged KV in f32.
 *
 * Owns: splitting each op over the pool's threads and walking KV block tables. Does not own the
 * inner loops of matmuls (cpu_kernels.h: a scalar reference set plus per-ISA sets chosen at init).
 * With hb_config.exact the scalar set is used, which is the f32-activation int4 path that matches
 * the oracle's quantize->dequantize references exactly.
 *
 * With a SIMD set, an int4 matmul is one pool job in two phases: the threads quantize the
 * activations to 16-bit integers (struct cpu_q8: two int8 planes) once, split by tokens, meet at a barrier, then each
 * multiplies its own range of output rows (16-row aligned) for all tokens. Splitting by output
 * rows, never by the reduction dimension, keeps results identical for any thread count. Attention
 * is split into (token tile, KV head) items taken dynamically, longest first; each item is
 * computed whole by one thread, so it is deterministic as well. Scratch (the quantized activations,
 * the attention tile list) grows on first use to the largest batch seen and is then reused. */
#include <math.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_ops_gemma4.h"
#include "base/half.h"
#include "base/threadpool.h"
#include "backend/cpu/kern_limits.h"
#include "quant/q4.h"
#include "runtime/row_score.h" /* row_score's definition, which the CPU op runs as it is */

struct hb_ctx {
  struct threadpool *pool;
  const struct cpu_kernels *k;
  /* quantized activations of the current matmul (SIMD sets); grown on demand */
  void *q8buf;
  size_t q8cap;
  /* norm_matmul: products before an add, normed rows when composed from the separate ops */
  void *tmpbuf, *xnbuf;
  size_t tmpcap, xncap;
  /* attention work items: (t0, t1) token ranges of one sequence */
  int32_t *tiles;
  int tilecap;
};

/* Grows *buf to at least `need` bytes (64-aligned, contents dropped). 0 or -1 on OOM. */
static int grow(void **buf, size_t *cap, size_t need) {
  if (need <= *cap) return 0;
  size_t n = need + need / 4 + 4096;
  void *b = aligned_alloc(64, (n + 63) & ~(size_t)63);
  if (!b) return -1;
  free(*buf);
  *buf = b;
  *cap = n;
  return 0;
}

static int cpu_init(const struct hb_config *cfg, struct hb_ctx **out, struct hearth_err *err) {
  struct hb_ctx *c = calloc(1, sizeof *c);
  if (!c) return err_set(err, HEARTH_ERR_NOMEM, "out of memory");
  c->pool = threadpool_create(cfg ? cfg->n_threads : 0);
  if (!c->pool) { free(c); return err_set(err, HEARTH_ERR_NOMEM, "cannot start CPU threads"); }
  c->k = (cfg && cfg->exact) ? &cpu_kernels_ref : cpu_kernels_select();
  *out = c;
  return 0;
}

static const char *cpu_kernels_name(struct hb_ctx *c) { return c->k->name; }

static void cpu_free(struct hb_ctx *c) {
  if (!c) return;
  threadpool_free(c->pool);
  free(c->q8buf);
  free(c->tmpbuf);
  free(c->xnbuf);
  free(c->tiles);
  free(c);
}

static size_t dtype_size(enum hb_dtype dt) {
  switch (dt) {
  case HB_F32: case HB_I32: return 4;
  case HB_F16: case HB_BF16: return 2;
  default: return 0;
  }
}

static int cpu_alloc(struct hb_ctx *c, struct hb_tensor *t, enum hb_dtype dt, int64_t rows, int64_t cols,
                     struct hearth_err *err) {
  (void)c;
  memset(t, 0, sizeof *t);
  size_t es = dtype_size(dt);
  if (!es || rows < 0 || cols < 0) return err_set(err, HEARTH_ERR_ARG, "cpu alloc: bad dtype or shape");
  if (rows && (uint64_t)cols > SIZE_MAX / es / (uint64_t)rows) return err_set(err, HEARTH_ERR_NOMEM, "cpu alloc: size overflows");
  size_t bytes = (size_t)rows * (size_t)cols * es;
  t->data = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
  if (!t->data && bytes) return err_set(err, HEARTH_ERR_NOMEM, "out of memory allocating %zu bytes", bytes);
  t->dtype = dt;
  t->rows = rows;
  t->cols = cols;
  t->bytes = bytes;
  return 0;
}

static void cpu_release(struct hb_ctx *c, struct hb_tensor *t) {
  if (!t) return;
  if (t->dtype == HB_Q4 && t->data) {
    struct cpu_q4 *q = t->data;
    if (q->packed && c->k->q4_free_packed) c->k->q4_free_packed(q);
    free(q->qs);
    free(q->d);
    free(q);
  } else if (t->bytes) {
    free(t->data);
  }
  memset(t, 0, sizeof *t);
}

static int cpu_weight_upload(struct hb_ctx *c, struct hb_tensor *dst, const struct hb_host_weight *src,
                             struct hearth_err *err) {
  memset(dst, 0, sizeof *dst);
  if (src->dtype == HB_Q4) {
    if (src->cols % Q4_GROUP) return err_set(err, HEARTH_ERR_ARG, "q4 weight cols %lld not a multiple of 128", (long long)src->cols);
    struct cpu_q4 *q = calloc(1, sizeof *q);
    size_t qb = (size_t)src->rows * (size_t)src->cols / 2, db = (size_t)src->rows * (size_t)(src->cols / Q4_GROUP) * 2;
    if (!q) return err_set(err, HEARTH_ERR_NOMEM, "out of memory for a %lldx%lld int4 weight", (long long)src->rows, (long long)src->cols);
    q->rows = src->rows;
    q->cols = src->cols;
    if (c->k->q4_pack) {
      /* straight from the caller's buffer into the packed layout, on the loader's threads when it
       * lends them (they are idle while a weight uploads), else on ours */
      if (c->k->q4_pack(q, src->data, src->scales, src->pool ? src->pool : c->pool)) {
        free(q);
        return err_set(err, HEARTH_ERR_NOMEM, "out of memory repacking an int4 weight");
      }
    } else {
      q->qs = malloc(qb);
      q->d = malloc(db);
      if (!q->qs || !q->d) {
        free(q->qs); free(q->d); free(q);
        return err_set(err, HEARTH_ERR_NOMEM, "out of memory for a %lldx%lld int4 weight", (long long)src->rows, (long long)src->cols);
      }
      memcpy(q->qs, src->data, qb);
      memcpy(q->d, src->scales, db);
    }
    dst->dtype = HB_Q4;
    dst->rows = src->rows;
    dst->cols = src->cols;
    dst->data = q;
    dst->bytes = q->packed ? (size_t)((q->rows + 15) / 16 * 16) * (size_t)q->cols / 2 + db : qb + db;
    return 0;
  }
  int rc = cpu_alloc(c, dst, src->dtype, src->rows, src->cols, err);
  if (rc) return rc;
  memcpy(dst->data, src->data, dst->bytes);
  return 0;
}

static int cpu_write(struct hb_ctx *c, struct hb_tensor *t, int64_t row0, int64_t n_rows, const void *host) {
  (void)c;
  size_t rb = (size_t)t->cols * dtype_size(t->dtype);
  memcpy((char *)t->data + (size_t)row0 * rb, host, (size_t)n_rows * rb);
  return 0;
}

static int cpu_read(struct hb_ctx *c, const struct hb_tensor *t, int64_t row0, int64_t n_rows, void *host) {
  (void)c;
  size_t rb = (size_t)t->cols * dtype_size(t->dtype);
  memcpy(host, (const char *)t->data + (size_t)row0 * rb, (size_t)n_rows * rb);
  return 0;
}

/* the pool block's rows of each layer with storage, K then V, packed in order (backend.h) */
static int cpu_kv_block_copy(const struct hb_kv_layer *layers, int n_layers, const int32_t *blocks, int nb, int bs,
                             char *host, size_t bytes, int to_host) {
  if (nb < 0 || (size_t)nb * hb_kv_block_bytes(layers, n_layers, bs) != bytes) return HEARTH_ERR_ARG;
  for (int b = 0; b < nb; b++)
    for (int l = 0; l < n_layers; l++) {
      if (!layers[l].k.data) continue;
      const struct hb_tensor *kv[2] = {&layers[l].k, &layers[l].v};
      for (int j = 0; j < 2; j++) {
        size_t rb = (size_t)kv[j]->cols * hb_elem_size(kv[j]->dtype), n = (size_t)bs * rb;
        char *dev = (char *)kv[j]->data + (size_t)blocks[b] * n;
        if (to_host) memcpy(host, dev, n);
        else memcpy(dev, host, n);
        host += n;
      }
    }
  return 0;
}
static int cpu_kv_block_read(struct hb_ctx *c, const struct hb_kv_layer *layers, int n_layers, const int32_t *blocks,
                             int nb, int bs, void *host, size_t bytes) {
  (void)c;
  return cpu_kv_block_copy(layers, n_layers, blocks, nb, bs, host, bytes, 1);
}
static int cpu_kv_block_write(struct hb_ctx *c, struct hb_kv_layer *layers, int n_layers, const int32_t *blocks,
                              int nb, int bs, const void *host, size_t bytes) {
  (void)c;
  return cpu_kv_block_copy(layers, n_layers, blocks, nb, bs, (char *)host, bytes, 0);
}

static int cpu_batch_upload(struct hb_ctx *c, struct hb_batch *b, struct hearth_err *err) {
  (void)c; (void)err; /* the CPU reads the host arrays directly */
  (void)b;
  return 0;
}

/* ---- embedding ------------------------------------------------------------------------ */

static void cpu_embed(struct hb_ctx *c, struct hb_tensor *out, const struct hb_tensor *table,
                      const struct hb_tensor *ids, int n, float scale) {
  const int32_t *id = ids->data;
  int64_t d = table->cols;
  for (int t = 0; t < n; t++) {
    float *o = (float *)out->data + t * d;
    int64_t r = id[t];
    if (table->dtype == HB_Q4) c->k->q4_row(table->data, r, o);
    else if (table->dtype == HB_BF16) for (int64_t j = 0; j < d; j++) o[j] = bf16_to_f32(((const uint16_t *)table->data)[r * d + j]);
    else memcpy(o, (const float *)table->data + r * d, (size_t)d * sizeof *o);
    if (scale != 1.0f) for (int64_t j = 0; j < d; j++) o[j] *= scale;
  }
}

/* ---- rmsnorm, matmul ----------------------------------------------------------------------- */

/* Row chunks are dealt in n_reg contiguous regions, one per thread: a thread takes the chunks of
 * its own region in order (so it streams one contiguous stretch of the weights and its prefetches
 * run on into its next chunk), then helps with the other regions. Handing every chunk out from
 * one shared counter instead cost a decode step ~30 % (the 0.5B's 169 matmuls per token, two
 * threads, Zen 5: the counter's cache line bouncing and each thread's stream restarting at every
 * chunk; bench/RESULTS.md). A late or descheduled thread's region is still taken by the others.
 *
 * One job covers up to three weights that share the input (Q, K, V; gate, up), an optional RMS norm
 * in front (norm_matmul) and an optional accumulation into the output (x += a·Woᵀ): the norm and
 * the activation quantization run once for all of them, and the chunks of all weights form one
 * list. Each step computes every value exactly as the separate ops do (same functions, same order
 * of float operations), so fusing changes no bit. */
enum { MM_REGIONS = 16, MM_MAX = 3 };
struct mm_job {
  const struct cpu_kernels *k;
  const struct hb_tensor *x;
  const float *norm_w; /* NULL: no norm */
  float eps, w_offset;
  const float *silu_up; /* not NULL: the input is silu(x) * silu_up (silu_matmul; no norm then) */
  int n, n_mm, add;
  struct hb_tensor *outs[MM_MAX];
  const struct hb_tensor *ws[MM_MAX], *bs[MM_MAX];
  float *tmp;      /* add: the products (+ bias) land here, then out += tmp ([n][rows], n_mm == 1) */
  float *xn;       /* norm / silu: the input rows, shared, or thread ith's at ith * xn_own floats on */
  size_t xn_own;
  struct cpu_q8 a; /* a.q == NULL: the f32-activation path (no norm, no add) */
  /* > 0: every thread quantizes all n tokens into its own copy of a (thread ith's at byte offset
   * ith * q_own of each of a's buffers), which spares the wait for one another */
  size_t q_own;
  /* dynamic work: token chunks to quantize, then row chunks (multiples of 16 rows) */
  int q_chunk, q_chunks;
  int64_t r_chunk[MM_MAX];
  int r_first[MM_MAX + 1]; /* weight i's chunks are [r_first[i], r_first[i + 1]) of the list */
  _Alignas(64) int q_next;
  _Alignas(64) int q_done;
  int n_reg;
  struct { _Alignas(64) int next; } reg[MM_REGIONS];
};

static inline void spin_pause(int *spins) {
#if defined(__x86_64__)
  if (++*spins < 4096) { __builtin_ia32_pause(); return; }
#else
  ++*spins;
#endif
  sched_yield();
}

/* rows [r0, r1) of x (d wide) RMS-normed with weights wv (+ w_offset) into out */
static void rmsnorm_rows(const float *x, const float *wv, float eps, float w_offset, int64_t d, int64_t r0,
                         int64_t r1, float *out) {
  for (int64_t r = r0; r < r1; r++) {
    const float *xi = x + r * d;
    float *o = out + r * d;
    /* eight f64 chains over j mod 8 (the squares are exact in f64; one chain was a 4-cycle add per element: ~2 % of a
     * W5 run on the CPU), summed pairwise; a row's order is fixed, so the bits do not depend on the batch */
    double s8[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t j = 0;
    for (; j + 8 <= d; j += 8)
      for (int u = 0; u < 8; u++) s8[u] += (double)xi[j + u] * xi[j + u];
    for (; j < d; j++) s8[j % 8] += (double)xi[j] * xi[j];
    const double ss = ((s8[0] + s8[1]) + (s8[2] + s8[3])) + ((s8[4] + s8[5]) + (s8[6] + s8[7]));
    float inv = (float)(1.0 / sqrt(ss / (double)d + (double)eps));
    for (j = 0; j < d; j++) o[j] = xi[j] * inv * (wv[j] + w_offset);
  }
}

/* the input of the matmuls for tokens [t0, t1) into xn (same stride as x): the norm or the SwiGLU
 * product, computed as the rmsnorm and silu_mul ops compute it */
static void mm_prologue(const struct mm_job *j, int t0, int t1, float *xn) {
  int64_t ld = j->x->cols;
  const float *x = j->x->data;
  if (j->norm_w) {
    rmsnorm_rows(x, j->norm_w, j->eps, j->w_offset, ld, t0, t1, xn);
  } else {
    int64_t o = (int64_t)t0 * ld;
    j->k->silu_mul(xn + o, x + o, j->silu_up + o, (int64_t)(t1 - t0) * ld);
  }
}

/* output rows [lo, hi) of weight i for all the job's tokens (a: the quantized activations) */
static void mm_rows(const struct mm_job *j, int i, const struct cpu_q8 *a, int64_t lo, int64_t hi) {
  const struct hb_tensor *w = j->ws[i];
  float *out = j->add ? j->tmp : j->outs[i]->data;
  const float *x = j->x->data;
  int64_t ldo = w->rows, ldx = j->x->cols, cols = w->cols;
  switch (w->dtype) {
  case HB_Q4:
    if (a->q) j->k->matmul_q4q8(w->data, a, j->n, lo, hi, out, ldo);
    else j->k->matmul_q4(w->data, x, ldx, j->n, lo, hi, out, ldo);
    break;
  case HB_BF16:
    (j->k->matmul_bf16 ? j->k->matmul_bf16 : cpu_kernels_ref.matmul_bf16)(w->data, cols, x, ldx, j->n, lo, hi, out, ldo);
    break;
  default:
    (j->k->matmul_f32 ? j->k->matmul_f32 : cpu_kernels_ref.matmul_f32)(w->data, cols, x, ldx, j->n, lo, hi, out, ldo);
    break;
  }
  if (j->bs[i]) {
    const float *b = j->bs[i]->data;
    for (int t = 0; t < j->n; t++)
      for (int64_t r = lo; r < hi; r++) out[t * ldo + r] += b[r];
  }
  if (j->add) { /* as the add op: x += o */
    float *dst = j->outs[i]->data;
    for (int t = 0; t < j->n; t++)
      for (int64_t r = lo; r < hi; r++) dst[t * ldo + r] += out[t * ldo + r];
  }
}

static void mm_worker(void *arg, int ith, int nth) {
  (void)nth;
  struct mm_job *j = arg;
  const float *x = j->x->data;
  int64_t ldx = j->x->cols;
  struct cpu_q8 a = j->a;
  if (j->a.q && j->q_own) {
    size_t off = (size_t)ith * j->q_own;
    a.q += off;
    a.lo += off;
    a.s = (float *)((char *)a.s + off);
    a.c = (int32_t *)((char *)a.c + off);
    if (a.v16) a.v16 = (int16_t *)((char *)a.v16 + off);
    if (a.tiles) a.tiles += off;
    if (j->xn) {
      float *xn = j->xn + (size_t)ith * j->xn_own;
      mm_prologue(j, 0, j->n, xn);
      j->k->q8_quantize(xn, ldx, 0, j->n, &a);
    } else {
      j->k->q8_quantize(x, ldx, 0, j->n, &a);
    }
  } else if (j->a.q) {
    for (;;) {
      int c = __atomic_fetch_add(&j->q_next, 1, __ATOMIC_RELAXED);
      if (c >= j->q_chunks) break;
      int t0 = c * j->q_chunk, t1 = t0 + j->q_chunk < j->n ? t0 + j->q_chunk : j->n;
      if (j->xn) mm_prologue(j, t0, t1, j->xn);
      j->k->q8_quantize(j->xn ? j->xn : x, ldx, t0, t1, &j->a);
      __atomic_add_fetch(&j->q_done, 1, __ATOMIC_RELEASE);
    }
    for (int spins = 0; __atomic_load_n(&j->q_done, __ATOMIC_ACQUIRE) < j->q_chunks;) spin_pause(&spins);
  }
  int total = j->r_first[j->n_mm];
  for (int k = 0; k < j->n_reg; k++) {
    int r = (ith + k) % j->n_reg, i = 0;
    long c0, c1;
    threadpool_split(total, r, j->n_reg, 1, &c0, &c1);
    for (;;) {
      long c = c0 + __atomic_fetch_add(&j->reg[r].next, 1, __ATOMIC_RELAXED);
      if (c >= c1) break;
      while (c >= j->r_first[i + 1]) i++;
      int64_t rows = j->ws[i]->rows, lo = (c - j->r_first[i]) * j->r_chunk[i];
      int64_t hi = lo + j->r_chunk[i] < rows ? lo + j->r_chunk[i] : rows;
      mm_rows(j, i, &a, lo, hi);
    }
  }
}

/* Runs the job: quantization scratch when every weight takes the quantized path, chunking, the
 * pool. Returns 0, or -1 when scratch cannot be had (nothing done). */
static int mm_run(struct hb_ctx *c, struct mm_job *j) {
  int nth = threadpool_size(c->pool), n = j->n;
  int q8 = c->k->matmul_q4q8 != NULL;
  for (int i = 0; i < j->n_mm; i++) q8 = q8 && j->ws[i]->dtype == HB_Q4;
  if (q8) {
    int64_t cols = j->ws[0]->cols, G = cols / Q4_GROUP;
    size_t qb = ((size_t)n * (size_t)cols + 63) & ~(size_t)63, sb = ((size_t)n * (size_t)G * 4 + 63) & ~(size_t)63;
    /* a few tokens (decode): each thread normalizes and quantizes them all itself (a microsecond
     * at most) instead of splitting the work and meeting at a barrier (the bytes are the same) */
    int own = n <= 4 && nth > 1;
    size_t vb = c->k->q8_v16 > 0 && n >= c->k->q8_v16 ? 2 * qb : 0; /* v as int16, where the set reads it */
    size_t tb = c->k->q8_tiles > 0 && n >= c->k->q8_tiles ? q8_tiles_bytes(n, G) : 0; /* the AMX set's copy */
    size_t per = 2 * qb + 2 * sb + vb + tb, nbuf = own ? (size_t)nth : 1;
    size_t xnb = j->norm_w || j->silu_up ? (((size_t)n * (size_t)cols * sizeof(float) + 63) & ~(size_t)63) : 0;
    if (grow(&c->q8buf, &c->q8cap, per * nbuf + xnb * nbuf)) return -1;
    j->a.q = c->q8buf;
    j->a.lo = (int8_t *)c->q8buf + qb; /* 16-bit activations for every batch size: cpu_kernels.h */
    j->a.s = (float *)((char *)c->q8buf + 2 * qb);
    j->a.c = (int32_t *)((char *)c->q8buf + 2 * qb + sb);
    j->a.v16 = vb ? (int16_t *)((char *)c->q8buf + 2 * qb + 2 * sb) : NULL;
    j->a.tiles = tb ? (int8_t *)c->q8buf + 2 * qb + 2 * sb + vb : NULL;
    j->q_own = own ? per : 0; /* thread ith's copy: the same buffers, ith * per bytes on */
    j->a.cols = cols;
    j->xn = xnb ? (float *)((char *)c->q8buf + per * nbuf) : NULL;
    j->xn_own = own ? xnb / sizeof(float) : 0;
    j->q_chunk = n / (4 * nth) > 1 ? n / (4 * nth) : 1;
    j->q_chunks = (n + j->q_chunk - 1) / j->q_chunk;
  } else if (j->norm_w || j->silu_up || j->add) {
    return -1; /* the caller composes the separate ops */
  }
  if (j->add) {
    if (grow(&c->tmpbuf, &c->tmpcap, (size_t)n * (size_t)j->ws[0]->rows * sizeof(float))) return -1;
    j->tmp = c->tmpbuf;
  }
  /* row chunks: whole 16-row blocks, about 8 per thread and weight, so a late or descheduled
   * thread leaves its share to the others; which thread computes a row never changes its value */
  j->r_first[0] = 0;
  for (int i = 0; i < j->n_mm; i++) {
    int64_t rows = j->ws[i]->rows, nblk = (rows + 15) / 16, per = nblk / (8 * nth);
    /* an even number of blocks where there are enough: the SIMD kernels take row blocks in pairs (a lone block
     * costs the activation reads of a pair) */
    per = per > 1 ? (per + 1) & ~(int64_t)1 : nblk >= 4 * nth ? 2 : 1;
    j->r_chunk[i] = 16 * per;
    j->r_first[i + 1] = j->r_first[i] + (int)((rows + j->r_chunk[i] - 1) / j->r_chunk[i]);
  }
  j->n_reg = nth < MM_REGIONS ? nth : MM_REGIONS;
  threadpool_run_dynamic(c->pool, mm_worker, j);
  return 0;
}

static void cpu_matmul(struct hb_ctx *c, struct hb_tensor *out, const struct hb_tensor *x,
                       const struct hb_tensor *w, const struct hb_tensor *bias, int n) {
  struct mm_job j = {.k = c->k, .x = x, .n = n, .n_mm = 1, .outs = {out}, .ws = {w}, .bs = {bias}};
  if (mm_run(c, &j)) {
    /* no scratch for the quantized activations (a few MiB; cannot happen in practice) and no
     * f32-activation kernel for the packed layout: a zero output rather than garbage */
    memset(out->data, 0, (size_t)n * (size_t)w->rows * sizeof(float));
  }
}

static void cpu_rmsnorm(struct hb_ctx *c, struct hb_tensor *out, const struct hb_tensor *x,
                        const struct hb_tensor *w, float eps, float w_offset) {
  (void)c;
  int64_t d = w->cols * w->rows; /* weights are stored [1 × d] */
  rmsnorm_rows(x->data, w->data, eps, w_offset, d, 0, x->rows * x->cols / d, out->data);
}

/* backend.h's norm_matmul: one job where every weight takes the quantized path, else the separate
 * ops (rmsnorm into scratch, the matmuls, the add) */
static void cpu_norm_matmul(struct hb_ctx *c, const struct hb_tensor *x, const struct hb_tensor *norm_w, float eps,
                            float w_offset, int n_mm, struct hb_tensor *const *outs,
                            const struct hb_tensor *const *ws, const struct hb_tensor *const *biases, int n,
                            int add) {
  struct mm_job j = {.k = c->k, .x = x, .norm_w = norm_w ? norm_w->data : NULL, .eps = eps, .w_offset = w_offset,
                     .n = n, .n_mm = n_mm, .add = add};
  for (int i = 0; i < n_mm && i < MM_MAX; i++) {
    j.outs[i] = outs[i];
    j.ws[i] = ws[i];
    j.bs[i] = biases ? biases[i] : NULL;
  }
  if (n_mm <= MM_MAX && !(add && n_mm != 1) && !mm_run(c, &j)) return;
  /* composed: the same values through the separate ops */
  int64_t d = x->cols;
  struct hb_tensor xs = *x, tmp = {0};
  if (norm_w) {
    if (grow(&c->xnbuf, &c->xncap, (size_t)n * (size_t)d * sizeof(float))) return;
    xs.data = c->xnbuf;
    xs.rows = n;
    struct hb_tensor xv = *x;
    xv.rows = n;
    cpu_rmsnorm(c, &xs, &xv, norm_w, eps, w_offset);
  }
  for (int i = 0; i < n_mm; i++) {
    struct hb_tensor *o = outs[i];
    if (add) {
      if (grow(&c->tmpbuf, &c->tmpcap, (size_t)n * (size_t)ws[i]->rows * sizeof(float))) return;
      tmp = *outs[i];
      tmp.data = c->tmpbuf;
      o = &tmp;
    }
    cpu_matmul(c, o, &xs, ws[i], biases ? biases[i] : NULL, n);
    if (add) {
      float *dst = outs[i]->data;
      const float *src = tmp.data;
      for (int64_t e = 0; e < (int64_t)n * ws[i]->rows; e++) dst[e] += src[e];
    }
  }
}

static void cpu_silu_mul(struct hb_ctx *c, struct hb_tensor *out, const struct hb_tensor *gate,
                         const struct hb_tensor *up, int n);

/* backend.h's silu_matmul: out (+)= (silu(gate) * up)·wᵀ in one job (the product computed by each
 * thread for its tokens, as silu_mul computes it: the SIMD silu has no tail when the width is a
 * multiple of 16, so any split gives the same values), else the separate ops */
static void cpu_silu_matmul(struct hb_ctx *c, const struct hb_tensor *gate, const struct hb_tensor *up,
                            struct hb_tensor *out, const struct hb_tensor *w, int n, int add) {
  struct mm_job j = {.k = c->k, .x = gate, .silu_up = up->data, .n = n, .n_mm = 1, .add = add, .outs = {out},
                     .ws = {w}};
  if (c->k->silu_mul && gate->cols % 16 == 0 && !mm_run(c, &j)) return;
  int64_t d = gate->cols;
  if (grow(&c->xnbuf, &c->xncap, (size_t)n * (size_t)d * sizeof(float))) return;
  struct hb_tensor h = *gate;
  h.data = c->xnbuf;
  cpu_silu_mul(c, &h, gate, up, n);
  struct hb_tensor *outs[1] = {out};
  const struct hb_tensor *ws[1] = {w};
  cpu_norm_matmul(c, &h, NULL, 0.0f, 0.0f, 1, outs, ws, NULL, n, add);
}

/* ---- rope, kv, attention ---------------------------------------------------------------- */

/* Rotates, in each head of x's first b->n_tokens rows, the pairs (i, i + half) for i < n_pairs by
 * pos · inv_freq[i]: the loop of rope_neox (half = n_rot / 2 = n_pairs) and Gemma 4's rope_prop. */
struct rope_job {
  float *x;
  const int32_t *pos;
  int n_tokens, n_heads, head_dim, half, n_pairs;
  const float *inv_freq;
};

/* tokens [lo, hi) of the job: each token's angles once, then every head's pairs in order (contiguous, so the
 * rotation vectorizes); per element the same products and sums as one pair at a time */
static void rope_worker(void *arg, int ith, int nth) {
  const struct rope_job *j = arg;
  long lo, hi;
  threadpool_split(j->n_tokens, ith, nth, 1, &lo, &hi);
  float cs[1024], sn[1024];
  for (long t = lo; t < hi; t++) {
    const float p = (float)j->pos[t];
    for (int i = 0; i < j->n_pairs; i++) {
      const float ang = p * j->inv_freq[i];
      cs[i] = cosf(ang);
      sn[i] = sinf(ang);
    }
    for (int h = 0; h < j->n_heads; h++) {
      float *v = j->x + (t * j->n_heads + h) * (int64_t)j->head_dim, *w = v + j->half;
      for (int i = 0; i < j->n_pairs; i++) {
        const float a = v[i], bb = w[i];
        v[i] = a * cs[i] - bb * sn[i];
        w[i] = bb * cs[i] + a * sn[i];
      }
    }
  }
}

void cpu_rope_rotate(struct hb_ctx *c, struct hb_tensor *x, const struct hb_batch *b, int n_heads, int head_dim,
                     int half, int n_pairs, const float *inv_freq) {
  if (n_pairs > 1024) n_pairs = 1024; /* callers' tables hold at most 1024 */
  struct rope_job j = {x->data, b->pos, b->n_tokens, n_heads, head_dim, half, n_pairs, inv_freq};
  /* a one-token pass (decode) stays on this thread: the pool's wake-up costs more than the rotation */
  if (b->n_tokens > 1 && c->pool) threadpool_run(c->pool, rope_worker, &j);
  else rope_worker(&j, 0, 1);
}

static void cpu_rope_neox(struct hb_ctx *c, struct hb_tensor *x, const struct hb_batch *b, int n_heads,
                          int head_dim, int n_rot, float theta) {
  int half = n_rot / 2;
  float inv_freq[1024];
  for (int i = 0; i < half && i < 1024; i++)
    inv_freq[i] = 1.0f / powf(theta, (float)(2 * i) / (float)n_rot);
  cpu_rope_rotate(c, x, b, n_heads, head_dim, half, half, inv_freq);
}

static inline int64_t kv_slot(const struct hb_batch *b, int seq, int pos) {
  int32_t blk = b->block_table[seq * b->max_blocks + pos / b->block_size];
  return (int64_t)blk * b->block_size + pos % b->block_size;
}

static void cpu_kv_write(struct hb_ctx *c, struct hb_kv_layer *kv, const struct hb_tensor *k,
                         const struct hb_tensor *v, const struct hb_batch *b) {
  (void)c;
  int64_t w = (int64_t)kv->n_kv_heads * kv->head_dim;
  for (int t = 0; t < b->n_tokens; t++) {
    int64_t s = kv_slot(b, b->seq[t], b->pos[t]);
    memcpy((float *)kv->k.data + s * w, (const float *)k->data + t * w, (size_t)w * sizeof(float));
    memcpy((float *)kv->v.data + s * w, (const float *)v->data + t * w, (size_t)w * sizeof(float));
  }
}

struct attn_job {
  struct hb_tensor *out;
  const struct hb_tensor *q;
  const struct hb_kv_layer *kv;
  const struct hb_batch *b;
  const struct hb_attn_params *p;
};

/* One (token, head) per work item; online softmax over the sequence's keys, in f32. */
static void attn_worker(void *arg, int ith, int nth) {
  struct attn_job *j = arg;
  const struct hb_attn_params *p = j->p;
  const struct hb_batch *b = j->b;
  int hd = p->head_dim, group = p->n_heads / p->n_kv_heads;
  int64_t kvw = (int64_t)p->n_kv_heads * hd;
  long lo, hi;
  threadpool_split((long)b->n_tokens * p->n_heads, ith, nth, 1, &lo, &hi);
  float acc[1024];
  for (long it = lo; it < hi; it++) {
    int t = (int)(it / p->n_heads), h = (int)(it % p->n_heads), kvh = h / group;
    const float *q = (const float *)j->q->data + ((int64_t)t * p->n_heads + h) * hd;
    float *o = (float *)j->out->data + ((int64_t)t * p->n_heads + h) * hd;
    int seq = b->seq[t], pos = b->pos[t];
    int start = p->window > 0 && pos - p->window + 1 > 0 ? pos - p->window + 1 : 0;
    float mx = -INFINITY, sum = 0.0f;
    for (int d = 0; d < hd; d++) acc[d] = 0.0f;
    for (int kp = start; kp <= pos; kp++) {
      int64_t s = kv_slot(b, seq, kp);
      const float *kk = (const float *)j->kv->k.data + s * kvw + (int64_t)kvh * hd;
      const float *vv = (const float *)j->kv->v.data + s * kvw + (int64_t)kvh * hd;
      float sc = 0.0f;
      for (int d = 0; d < hd; d++) sc += q[d] * kk[d];
      sc *= p->scale;
      if (p->softcap > 0.0f) sc = p->softcap * tanhf(sc / p->softcap);
      if (sc > mx) {
        float f = expf(mx - sc); /* exp(-inf) = 0 on the first key */
        sum *= f;
        for (int d = 0; d < hd; d++) acc[d] *= f;
        mx = sc;
      }
      float e = expf(sc - mx);
      sum += e;
      for (int d = 0; d < hd; d++) acc[d] += e * vv[d];
    }
    float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    for (int d = 0; d < hd; d++) o[d] = acc[d] * inv;
  }
}

/* Fast path: (token tile, KV head) items, taken dynamically from the end (longest first). */
struct fattn_job {
  struct cpu_attn_job a;
  const struct cpu_kernels *k;
  const int32_t *tiles; /* [n_tiles][2] */
  int n_tiles, n_items;
  int next; /* atomic: items handed out */
};

static void fattn_worker(void *arg, int ith, int nth) {
  (void)ith; (void)nth;
  struct fattn_job *j = arg;
  for (;;) {
    int it = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED);
    if (it >= j->n_items) return;
    int idx = j->n_items - 1 - it, tile = idx / j->a.n_kv_heads, kvh = idx % j->a.n_kv_heads;
    j->k->attn_tile(&j->a, j->tiles[2 * tile], j->tiles[2 * tile + 1], kvh);
  }
}

static void cpu_attention(struct hb_ctx *c, struct hb_tensor *out, const struct hb_tensor *q,
                          const struct hb_kv_layer *kv, const struct hb_batch *b,
                          const struct hb_attn_params *p) {
  int G = p->n_heads / p->n_kv_heads;
  /* head_dim 512 (Gemma 4's full layers) included since session 28: the scalar worker took 18 % of E2B's prefill */
  if (c->k->attn_tile && p->head_dim % 16 == 0 && p->head_dim <= KERN_ATT_MAX_HD && G * p->head_dim <= KERN_ATT_OBUF) {
    /* tiles: runs of consecutive tokens of one sequence, at most tq tokens each */
    int tq = KERN_ATT_OBUF / (G * p->head_dim);
    if (tq > 16) tq = 16;
    if (b->n_tokens > c->tilecap) {
      int32_t *t = malloc((size_t)b->n_tokens * 2 * sizeof *t);
      if (t) { free(c->tiles); c->tiles = t; c->tilecap = b->n_tokens; }
    }
    if (b->n_tokens <= c->tilecap) {
      int nt = 0;
      for (int t0 = 0; t0 < b->n_tokens;) {
        int t1 = t0 + 1;
        while (t1 < b->n_tokens && t1 - t0 < tq && b->seq[t1] == b->seq[t0]) t1++;
        c->tiles[2 * nt] = t0;
        c->tiles[2 * nt + 1] = t1;
        nt++;
        t0 = t1;
      }
      struct fattn_job j = {
        .a = {.q = q->data, .out = out->data, .k = kv->k.data, .v = kv->v.data, .pos = b->pos,
              .seq = b->seq, .block_table = b->block_table, .max_blocks = b->max_blocks,
              .block_size = b->block_size, .n_heads = p->n_heads, .n_kv_heads = p->n_kv_heads,
              .head_dim = p->head_dim, .window = p->window, .scale = p->scale, .softcap = p->softcap},
        .k = c->k, .tiles = c->tiles, .n_tiles = nt, .n_items = nt * p->n_kv_heads, .next = 0,
      };
      threadpool_run_dynamic(c->pool, fattn_worker, &j);
      return;
    }
  }
  struct attn_job j = {out, q, kv, b, p};
  threadpool_run(c->pool, attn_worker, &j);
}

/* ---- elementwise ------------------------------------------------------------------------- */

struct ew_job {
  const struct cpu_kernels *k;
  float *o;
  const float *g, *u;
  int64_t n, chunk;
  int next;
};

static void silu_worker(void *arg, int ith, int nth) {
  (void)ith; (void)nth;
  struct ew_job *j = arg;
  for (;;) {
    int64_t lo = (int64_t)__atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED) * j->chunk;
    if (lo >= j->n) return;
    int64_t hi = lo + j->chunk < j->n ? lo + j->chunk : j->n;
    j->k->silu_mul(j->o + lo, j->g + lo, j->u + lo, hi - lo);
  }
}

static void cpu_silu_mul(struct hb_ctx *c, struct hb_tensor *out, const struct hb_tensor *gate,
                         const struct hb_tensor *up, int n) {
  int64_t m = (int64_t)n * gate->cols;
  const float *g = gate->data, *u = up->data;
  float *o = out->data;
  if (c->k->silu_mul) {
    struct ew_job j = {c->k, o, g, u, m, 16384, 0};
    if (m > 16384) threadpool_run_dynamic(c->pool, silu_worker, &j);
    else c->k->silu_mul(o, g, u, m);
    return;
  }
  for (int64_t i = 0; i < m; i++) o[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

struct gelu_job {
  struct hb_tensor *out;
  const struct hb_tensor *gate, *up;
  int up_col0, n;
  void (*fast)(float *o, const float *g, const float *u, int64_t n);
};

static void gelu_worker(void *arg, int ith, int nth) {
  struct gelu_job *j = arg;
  long lo, hi;
  threadpool_split(j->n, ith, nth, 1, &lo, &hi);
  if (lo < hi) cpu_gelu_mul_rows(j->out, j->gate, j->up, j->up_col0, (int)lo, (int)hi, j->fast);
}

/* Gemma 4's GELU-tanh gating: rows over the threads (a prefill's MLP is T x 12288 tanh) */
static void cpu_gelu_mul(struct hb_ctx *c, struct hb_tensor *out, const struct hb_tensor *gate,
                         const struct hb_tensor *up, int up_col0, int n) {
  struct gelu_job j = {out, gate, up, up_col0, n, c->k->gelu_mul};
  if ((int64_t)n * gate->cols < 16384) cpu_gelu_mul_rows(out, gate, up, up_col0, 0, n, c->k->gelu_mul);
  else threadpool_run(c->pool, gelu_worker, &j);
}

static void cpu_add(struct hb_ctx *c, struct hb_tensor *x, const struct hb_tensor *y, int n) {
  (void)c;
  int64_t m = (int64_t)n * x->cols;
  float *a = x->data;
  const float *bb = y->data;
  for (int64_t i = 0; i < m; i++) a[i] += bb[i];
}

static void cpu_gather_rows(struct hb_ctx *c, struct hb_tensor *out, const struct hb_tensor *x,
                            const struct hb_batch *b) {
  (void)c;
  for (int i = 0; i < b->n_out; i++)
    memcpy((float *)out->data + (int64_t)i * x->cols, (const float *)x->data + (int64_t)b->out_rows[i] * x->cols,
           (size_t)x->cols * sizeof(float));
}

/* row_score (backend.h): runtime/row_score.c's host definition, the rows over the pool (one row = one call, so the
 * bits are the host's). A scored row is passes over all 151,936 logits; on the engine thread alone they were 5 % of a
 * W5 run on 2 cores (HEARTH_PROFILE's "forward wait") */
struct rs_job {
  const float *lg;
  int64_t V;
  const int32_t *req;
  int32_t *out;
  int n, next;
};
static void rs_worker(void *arg, int ith, int nth) {
  (void)ith; (void)nth;
  struct rs_job *j = arg;
  for (int k; (k = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED)) < j->n;)
    row_score_host(j->lg + (size_t)k * j->V, j->V, j->req + (size_t)k * HB_SCORE_REQ, j->out + (size_t)k * HB_SCORE_OUT);
}
static void cpu_row_score(struct hb_ctx *c, const struct hb_tensor *logits, int n, const struct hb_tensor *req,
                          struct hb_tensor *out) {
  struct rs_job j = {logits->data, logits->cols, req->data, out->data, n, 0};
  if (n > 1) threadpool_run_dynamic(c->pool, rs_worker, &j);
  else rs_worker(&j, 0, 1);
}

static int cpu_sync(struct hb_ctx *c, struct hearth_err *err) {
  (void)c; (void)err;
  return 0;
}

const struct hb_ops hb_cpu_ops = {
  .name = "cpu",
  .init = cpu_init,
  .free = cpu_free,
  .alloc = cpu_alloc,
  .release = cpu_release,
  .weight_upload = cpu_weight_upload,
  .write = cpu_write,
  .read = cpu_read,
  .batch_upload = cpu_batch_upload,
  .kv_block_read = cpu_kv_block_read,
  .kv_block_write = cpu_kv_block_write,
  .embed = cpu_embed,
  .rmsnorm = cpu_rmsnorm,
  .matmul = cpu_matmul,
  .norm_matmul = cpu_norm_matmul,
  .silu_matmul = cpu_silu_matmul,
  .rope_neox = cpu_rope_neox,
  .kv_write = cpu_kv_write,
  .attention = cpu_attention,
  .silu_mul = cpu_silu_mul,
  .add = cpu_add,
  .gather_rows = cpu_gather_rows,
  .sync = cpu_sync,
  .gelu_mul = cpu_gelu_mul,
  .scale = cpu_scale,
  .softcap = cpu_softcap,
  .rope_prop = cpu_rope_prop,
  .row_score = cpu_row_score,
  .kernels = cpu_kernels_name,
};

