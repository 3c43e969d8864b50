/* backend/cuda/cuda_backend.cu — the CUDA op table: device selection, memory, host copies, the
 * batch upload, graph capture and error mapping. The kernels live in one file per op family
 * (matmul_q4.cu, attention.cu, norm_rope.cu, elementwise.cu, sample.cu).
 *
 * Owns: one stream per context (every op is enqueued on it in order), the sticky error status,
 * the device copies of each batch's index arrays and the scratch the kernels share.
 * Does not own: model weights' meaning or the KV block tables (runtime/), host-side sampling.
 *
 * Dtypes on the device:
 *   activations  exact=1: f32;  exact=0: alloc(HB_F32) gives an f16 tensor (dtype reads HB_F16)
 *   Q4 weights   repacked at upload (cuda_common.cuh, matmul_q4.cu); scales fp16
 *   dense        BF16/F32 matrices stay as uploaded; 1-row weights (norms, biases) become f32
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_profiler_api.h>

#include "backend/cuda/cuda_common.cuh"

extern "C" {
#include "backend/cuda/cuda_backend.h"
}

/* ---- errors --------------------------------------------------------------------------------- */

/* base/err.c's err_set, kept local so that libhearth_cuda links after libhearth in any order */
__attribute__((format(printf, 3, 4))) static int cu_err_set(struct hearth_err *err, int code, const char *fmt, ...) {
  if (!err) return code;
  err->code = code;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err->msg, sizeof err->msg, fmt, ap);
  va_end(ap);
  return code;
}

void cu_fail(struct hb_ctx *ctx, int code, const char *file, int line, const char *fmt, ...) {
  if (!ctx || ctx->status) return; /* keep the first error */
  char m[320];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(m, sizeof m, fmt, ap);
  va_end(ap);
  const char *base = strrchr(file, '/');
  snprintf(ctx->msg, sizeof ctx->msg, "cuda: %s (%s:%d)", m, base ? base + 1 : file, line);
  ctx->status = code;
}

static int report(struct hb_ctx *ctx, struct hearth_err *err) {
  if (!ctx->status) return 0;
  return cu_err_set(err, ctx->status, "%s", ctx->msg);
}

int cu_scratch(struct hb_ctx *ctx, void **buf, size_t *cap, size_t need, size_t elem, int zero) {
  if (need <= *cap) return 0;
  if (ctx->capturing) {
    cu_fail(ctx, HEARTH_ERR_ARG, __FILE__, __LINE__,
            "scratch must grow during graph capture: run this shape once uncaptured first");
    return 1;
  }
  size_t n = need + need / 2;
  void *p = NULL;
  if (CU_OK(ctx, cudaStreamSynchronize(ctx->stream))) return 1;
  if (CU_OK(ctx, cudaMalloc(&p, n * elem))) return 1;
  /* on this context's stream: a legacy-stream memset is not ordered with it (it is non-blocking) and could land
   * after the first work that uses the buffer */
  if (zero && CU_OK(ctx, cudaMemsetAsync(p, 0, n * elem, ctx->stream))) { cudaFree(p); return 1; }
  if (*buf) cudaFree(*buf);
  ctx->bytes_scratch += (n - *cap) * elem;
  *buf = p;
  *cap = n;
  ctx->gen++;
  return 0;
}

/* ---- init / free ------------------------------------------------------------------------------ */

static int cuda_init(const struct hb_config *cfg, struct hb_ctx **out, struct hearth_err *err) {
  *out = NULL;
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0)
    return cu_err_set(err, HEARTH_ERR_BACKEND, "cuda: no usable GPU (%s)",
                   e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device found");
  int dev = cfg ? cfg->device : 0;
  if (dev < 0 || dev >= n) return cu_err_set(err, HEARTH_ERR_ARG, "cuda: device %d does not exist (%d found)", dev, n);
  cudaDeviceProp prop;
  if ((e = cudaSetDevice(dev)) != cudaSuccess || (e = cudaGetDeviceProperties(&prop, dev)) != cudaSuccess)
    return cu_err_set(err, HEARTH_ERR_BACKEND, "cuda: cannot open device %d: %s", dev, cudaGetErrorString(e));
  if (prop.major < 8)
    return cu_err_set(err, HEARTH_ERR_UNSUPPORTED, "cuda: %s is compute capability %d.%d; hearth needs 8.0 or newer",
                   prop.name, prop.major, prop.minor);
  struct hb_ctx *c = (struct hb_ctx *)calloc(1, sizeof *c);
  if (!c) return cu_err_set(err, HEARTH_ERR_NOMEM, "out of memory");
  c->device = dev;
  c->exact = cfg ? cfg->exact : 0;
  c->n_sm = prop.multiProcessorCount;
  c->cc_major = prop.major;
  c->smem_optin = prop.sharedMemPerBlockOptin;
  c->smem_sm = prop.sharedMemPerMultiprocessor;
  c->smem_reserved = prop.reservedSharedMemPerBlock;
  c->stage_on = 1; /* (off from the first failed pinned allocation: stage_get) */
  if ((e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)) != cudaSuccess) {
    free(c);
    return cu_err_set(err, HEARTH_ERR_BACKEND, "cuda: cannot create a stream: %s", cudaGetErrorString(e));
  }
  cu_attn_o_init(c);
  if (cu_matmul_init(c)) {
    int rc = report(c, err);
    cudaStreamDestroy(c->stream);
    free(c);
    return rc;
  }
  *out = c;
  return 0;
}

static void cuda_free(struct hb_ctx *c) {
  if (!c) return;
  cudaStreamSynchronize(c->stream);
  cudaFree(c->b_in);
  cudaFreeHost(c->stage);
  cudaFreeHost(c->pin);
  cudaFree(c->kv_io);
  for (int i = 0; i < 2; i++) {
    cudaFreeHost(c->rd[i].buf);
    if (c->rd[i].ev) cudaEventDestroy(c->rd[i].ev);
  }
  if (c->marks) {
    for (int i = 0; i < 1024; i++) if (c->marks[i]) cudaEventDestroy(c->marks[i]);
    free(c->marks);
  }
  cudaFree(c->attn_part); cudaFree(c->attn_cnt); cudaFree(c->tmp[0]); cudaFree(c->tmp[1]); cudaFree(c->gemm_part); cudaFree(c->am_part); cudaFree(c->am_cnt);
  cudaFree(c->sample_rows); cudaFree(c->sample_pen); cudaFree(c->sample_work); cudaFree(c->sample_split);
  cu_trace_print(c);
#if HEARTH_TRACE
  cudaFree(c->tr_dev);
#endif
  cudaStreamDestroy(c->stream);
  free(c);
}

/* ---- memory ----------------------------------------------------------------------------------- */

static size_t dtype_size(enum hb_dtype dt) {
  switch (dt) {
  case HB_F32: case HB_I32: return 4;
  case HB_F16: case HB_BF16: return 2;
  default: return 0;
  }
}

static int dev_alloc(struct hb_ctx *c, void **p, size_t bytes, const char *what, struct hearth_err *err) {
  *p = NULL;
  if (!bytes) return 0;
  cudaError_t e = cudaMalloc(p, bytes);
  if (e == cudaSuccess) { c->bytes_alloc += bytes; return 0; }
  cudaGetLastError(); /* clear */
  size_t fr = 0, tot = 0;
  cudaMemGetInfo(&fr, &tot);
  return cu_err_set(err, e == cudaErrorMemoryAllocation ? HEARTH_ERR_NOMEM : HEARTH_ERR_BACKEND,
                 "cuda: cannot allocate %.1f MiB for %s (%.1f MiB free of %.1f MiB; this context holds %.1f MiB): %s",
                 bytes / 1048576.0, what, fr / 1048576.0, tot / 1048576.0,
                 (c->bytes_alloc + c->bytes_scratch) / 1048576.0, cudaGetErrorString(e));
}

static int cuda_alloc(struct hb_ctx *c, struct hb_tensor *t, enum hb_dtype dt, int64_t rows, int64_t cols,
                      struct hearth_err *err) {
  memset(t, 0, sizeof *t);
  if (dt == HB_F32 && !c->exact) dt = HB_F16; /* the fast path keeps activations in f16 */
  size_t es = dtype_size(dt);
  if (!es || rows < 0 || cols < 0) return cu_err_set(err, HEARTH_ERR_ARG, "cuda alloc: bad dtype or shape");
  size_t bytes = (size_t)rows * (size_t)cols * es;
  int rc = dev_alloc(c, &t->data, bytes, "a tensor", err);
  if (rc) return rc;
  t->dtype = dt;
  t->rows = rows;
  t->cols = cols;
  t->bytes = bytes;
  return 0;
}

/* logits: f32 on the fast path too (f16 logits of ~40 have a 0.03 quantum: near-ties flip) */
static int cuda_alloc_f32(struct hb_ctx *c, struct hb_tensor *t, int64_t rows, int64_t cols, struct hearth_err *err) {
  memset(t, 0, sizeof *t);
  if (rows < 0 || cols < 0) return cu_err_set(err, HEARTH_ERR_ARG, "cuda alloc: bad shape");
  size_t bytes = (size_t)rows * (size_t)cols * 4;
  int rc = dev_alloc(c, &t->data, bytes, "a tensor", err);
  if (rc) return rc;
  t->dtype = HB_F32;
  t->rows = rows;
  t->cols = cols;
  t->bytes = bytes;
  return 0;
}

static void cuda_release(struct hb_ctx *c, struct hb_tensor *t) {
  if (!t) return;
  if (t->bytes) {
    cudaStreamSynchronize(c->stream);
    cudaFree(t->data);
    if (t->aux) cudaFree(t->aux);
    c->bytes_alloc -= t->bytes < c->bytes_alloc ? t->bytes : c->bytes_alloc;
  }
  memset(t, 0, sizeof *t);
}

static int cuda_weight_upload(struct hb_ctx *c, struct hb_tensor *dst, const struct hb_host_weight *src,
                              struct hearth_err *err) {
  memset(dst, 0, sizeof *dst);
  if (c->status) return report(c, err);
  int64_t rows = src->rows, cols = src->cols;
  if (src->dtype == HB_Q4) {
    if (cols % 128)
      return cu_err_set(err, HEARTH_ERR_UNSUPPORTED, "cuda: int4 weight %lldx%lld: cols must be a multiple of 128",
                     (long long)rows, (long long)cols);
    /* the source (quant/q4.h, row-major) into one transient buffer, repacked from there (cu_q4_repack) */
    const size_t qb = (size_t)rows * (size_t)cols / 2, sb = (size_t)rows * (size_t)(cols / 128) * 2;
    const size_t dqb = q4_bytes(rows, cols), dsb = q4_scale_bytes(rows, cols);
    void *q = NULL, *s = NULL, *tmp = NULL;
    int rc = dev_alloc(c, &q, dqb, "int4 weights", err);
    if (!rc) rc = dev_alloc(c, &s, dsb, "int4 scales", err);
    if (!rc) rc = dev_alloc(c, &tmp, qb + sb, "the int4 repack buffer", err);
    if (rc) { cudaFree(q); cudaFree(s); cudaFree(tmp); return rc; }
    c->bytes_alloc -= qb + sb; /* tmp is transient */
    if (!CU_OK(c, cudaMemcpyAsync(tmp, src->data, qb, cudaMemcpyHostToDevice, c->stream)) &&
        !CU_OK(c, cudaMemcpyAsync((uint8_t *)tmp + qb, src->scales, sb, cudaMemcpyHostToDevice, c->stream))) {
      cu_q4_repack(c, (uint8_t *)q, (__half *)s, (const uint8_t *)tmp, (const __half *)((uint8_t *)tmp + qb), rows, cols);
      CU_OK(c, cudaStreamSynchronize(c->stream));
    }
    cudaFree(tmp);
    if (c->status) { cudaFree(q); cudaFree(s); return report(c, err); }
    dst->dtype = HB_Q4;
    dst->rows = rows;
    dst->cols = cols;
    dst->data = q;
    dst->aux = s;
    dst->bytes = dqb + dsb;
    return 0;
  }
  if (src->dtype != HB_BF16 && src->dtype != HB_F32 && src->dtype != HB_F16)
    return cu_err_set(err, HEARTH_ERR_ARG, "cuda: weight dtype %d cannot be uploaded", (int)src->dtype);
  size_t n = (size_t)rows * (size_t)cols;
  enum hb_dtype dt = rows == 1 ? HB_F32 : src->dtype; /* norms and biases: f32 */
  void *p = NULL;
  int rc = dev_alloc(c, &p, n * dtype_size(dt), "a dense weight", err);
  if (rc) return rc;
  if (dt == src->dtype) {
    CU_OK(c, cudaMemcpy(p, src->data, n * dtype_size(dt), cudaMemcpyHostToDevice));
  } else {
    float *h = (float *)malloc(n * sizeof(float));
    if (!h) { cudaFree(p); return cu_err_set(err, HEARTH_ERR_NOMEM, "out of memory"); }
    const uint16_t *s16 = (const uint16_t *)src->data;
    for (size_t i = 0; i < n; i++) {
      if (src->dtype == HB_BF16) {
        uint32_t u = (uint32_t)s16[i] << 16;
        memcpy(&h[i], &u, 4);
      } else {
        __half_raw r;
        r.x = s16[i];
        h[i] = __half2float(__half(r));
      }
    }
    CU_OK(c, cudaMemcpy(p, h, n * sizeof(float), cudaMemcpyHostToDevice));
    free(h);
  }
  if (c->status) { cudaFree(p); return report(c, err); }
  dst->dtype = dt;
  dst->rows = rows;
  dst->cols = cols;
  dst->data = p;
  dst->bytes = n * dtype_size(dt);
  return 0;
}

/* the pinned staging area (see hb_ctx): n bytes that stay untouched until the stream is next synchronized, or
 * NULL (staging off, too large, or no pinned memory: the caller copies from pageable memory instead) */
#define CU_STAGE_MAX ((size_t)4 << 20)
static void *stage_get(struct hb_ctx *c, size_t n) {
  if (!c->stage_on || n > CU_STAGE_MAX || c->capturing) return NULL;
  n = (n + 127) & ~(size_t)127;
  if (c->stage_off + n > c->stage_cap) {
    if (CU_OK(c, cudaStreamSynchronize(c->stream))) return NULL; /* every staged copy has run */
    /* full after fewer than 64 uploads since the last sync (a loop that never syncs: decoding ahead with large
     * block tables): grow, so that such syncs stay rare */
    size_t cap = n > c->stage_cap ? 2 * n : c->stage_n < 64 && c->stage_cap < ((size_t)64 << 20) ? 2 * c->stage_cap : 0;
    c->stage_off = 0;
    c->stage_n = 0;
    if (cap) {
      if (cap < ((size_t)256 << 10)) cap = (size_t)256 << 10;
      void *p = NULL;
      if (cudaHostAlloc(&p, cap, cudaHostAllocDefault) != cudaSuccess) {
        (void)cudaGetLastError(); /* not sticky: pageable copies from now on */
        c->stage_on = 0;
        return NULL;
      }
      cudaFreeHost(c->stage);
      c->stage = (char *)p;
      c->stage_cap = cap;
    }
  }
  void *p = c->stage + c->stage_off;
  c->stage_off += n;
  c->stage_n++;
  return p;
}
void *cu_stage(struct hb_ctx *c, size_t n) { return stage_get(c, n); }
/* after the stream has been synchronized: every staged copy has run */
static void stage_reset(struct hb_ctx *c) { c->stage_off = 0; c->stage_n = 0; }
/* a tensor whose host copies may go through the stage (the host side is always f32 or i32; f16 converts there) */
static void *stage_for(struct hb_ctx *c, const struct hb_tensor *t, size_t bytes) {
  return t->dtype == HB_F16 || t->dtype == HB_F32 || t->dtype == HB_I32 ? stage_get(c, bytes) : NULL;
}

/* host copies: the host side is always f32 (or i32); f16 tensors convert on the host */
static void f32_to_f16(__half *dst, const float *src, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = __float2half_rn(src[i]);
}
static void f16_to_f32(float *dst, const __half *src, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = __half2float(src[i]);
}

static int cuda_write(struct hb_ctx *c, struct hb_tensor *t, int64_t row0, int64_t n_rows, const void *host) {
  if (c->status) return c->status;
  size_t n = (size_t)n_rows * (size_t)t->cols, es = dtype_size(t->dtype);
  char *dst = (char *)t->data + (size_t)row0 * (size_t)t->cols * es;
  void *st = stage_for(c, t, n * es);
  if (st) { /* asynchronous: the stage holds the bytes until the copy has run */
    if (t->dtype == HB_F16)
      f32_to_f16((__half *)st, (const float *)host, n);
    else
      memcpy(st, host, n * es);
    CU_OK(c, cudaMemcpyAsync(dst, st, n * es, cudaMemcpyHostToDevice, c->stream));
  } else if (t->dtype == HB_F16) {
    __half *h = (__half *)malloc(n * sizeof(__half));
    if (!h) { cu_fail(c, HEARTH_ERR_NOMEM, __FILE__, __LINE__, "out of host memory"); return c->status; }
    f32_to_f16(h, (const float *)host, n);
    if (!CU_OK(c, cudaMemcpyAsync(dst, h, n * 2, cudaMemcpyHostToDevice, c->stream)))
      CU_OK(c, cudaStreamSynchronize(c->stream));
    free(h);
  } else if (t->dtype == HB_F32 || t->dtype == HB_I32) {
    if (!CU_OK(c, cudaMemcpyAsync(dst, host, n * es, cudaMemcpyHostToDevice, c->stream)))
      CU_OK(c, cudaStreamSynchronize(c->stream));
  } else {
    cu_fail(c, HEARTH_ERR_ARG, __FILE__, __LINE__, "write: tensor dtype %d is not host-writable", (int)t->dtype);
  }
  return c->status;
}

static int cuda_read(struct hb_ctx *c, const struct hb_tensor *t, int64_t row0, int64_t n_rows, void *host) {
  if (c->status) return c->status;
  size_t n = (size_t)n_rows * (size_t)t->cols, es = dtype_size(t->dtype);
  const char *src = (const char *)t->data + (size_t)row0 * (size_t)t->cols * es;
  void *st = stage_for(c, t, n * es);
  if (st) { /* into pinned memory: one DMA, then the sync the caller needs anyway */
    if (!CU_OK(c, cudaMemcpyAsync(st, src, n * es, cudaMemcpyDeviceToHost, c->stream)) &&
        !CU_OK(c, cudaStreamSynchronize(c->stream))) {
      if (t->dtype == HB_F16)
        f16_to_f32((float *)host, (const __half *)st, n);
      else
        memcpy(host, st, n * es);
      stage_reset(c);
    }
  } else if (t->dtype == HB_F16) {
    __half *h = (__half *)malloc(n * sizeof(__half));
    if (!h) { cu_fail(c, HEARTH_ERR_NOMEM, __FILE__, __LINE__, "out of host memory"); return c->status; }
    if (!CU_OK(c, cudaMemcpyAsync(h, src, n * 2, cudaMemcpyDeviceToHost, c->stream)) &&
        !CU_OK(c, cudaStreamSynchronize(c->stream)))
      f16_to_f32((float *)host, h, n);
    free(h);
  } else if (t->dtype == HB_F32 || t->dtype == HB_I32) {
    if (!CU_OK(c, cudaMemcpyAsync(host, src, n * es, cudaMemcpyDeviceToHost, c->stream)))
      CU_OK(c, cudaStreamSynchronize(c->stream));
  } else {
    cu_fail(c, HEARTH_ERR_ARG, __FILE__, __LINE__, "read: tensor dtype %d is not host-readable", (int)t->dtype);
  }
  return c->status;
}

static void view_i32(struct hb_tensor *t, int32_t *p, int64_t n) {
  memset(t, 0, sizeof *t);
  t->dtype = HB_I32;
  t->rows = n;
  t->cols = 1;
  t->data = p;
}

/* Positions, sequence ids and block tables reach the device only here, by stream-ordered copies
 * before the step's kernels: kernels launched with programmatic dependent launch (decode attention,
 * the QKV+rope GEMV) read them before griddepcontrol.wait. The one kernel that writes them,
 * decode_advance, is launched without PDL as the last node of a greedy graph, so a graph or copy boundary
 * always separates it from their next reader; a kernel writing them anywhere else would break that.
 * The five arrays are packed into the stage and copied to b_in at once. Each region starts at a multiple of 32
 * elements, at an offset fixed by (n_tokens, n_out, n_seqs, max_blocks), which a decode graph's shape fixes. */
static int cuda_batch_upload(struct hb_ctx *c, struct hb_batch *b, struct hearth_err *err) {
  if (c->status) return report(c, err);
  if (c->capturing) return cu_err_set(err, HEARTH_ERR_ARG, "cuda: batch_upload inside a graph capture");
  const int64_t nt = b->n_tokens, ns = b->n_seqs, nbt = (int64_t)b->n_seqs * b->max_blocks, no = b->n_out;
  if (nt < 0 || ns < 0 || nbt < 0 || no < 0) return cu_err_set(err, HEARTH_ERR_ARG, "cuda: batch_upload: negative count");
  auto up = [](int64_t v) { return (v + 31) & ~(int64_t)31; };
  /* a model with a sliding-window pool (runtime/kv_ring.h) has a second block table, after the first */
  const int64_t nsw = b->block_table_swa ? nbt : 0;
  const int64_t o_seq = up(nt), o_out = o_seq + up(nt), o_len = o_out + up(no), o_bt = o_len + up(ns),
                o_sw = o_bt + up(nbt), total = nsw ? o_sw + nsw : o_bt + nbt;
  void *vp = c->b_in;
  if (cu_scratch(c, &vp, &c->b_in_cap, (size_t)(total > 256 ? total : 256), sizeof(int32_t), 1)) return report(c, err);
  c->b_in = (int32_t *)vp;
  const struct { const int32_t *src; int64_t off, n; } part[6] = {
      {b->pos, 0, nt}, {b->seq, o_seq, nt}, {b->out_rows, o_out, b->out_rows ? no : 0}, {b->seq_len, o_len, ns},
      {b->block_table, o_bt, nbt}, {b->block_table_swa, o_sw, nsw}};
  int32_t *st = total ? (int32_t *)stage_get(c, (size_t)total * 4) : NULL;
  if (st) { /* one copy of the whole span (the alignment gaps carry whatever the stage held) */
    for (int i = 0; i < 6; i++)
      if (part[i].n) memcpy(st + part[i].off, part[i].src, (size_t)part[i].n * 4);
    if (CU_OK(c, cudaMemcpyAsync(c->b_in, st, (size_t)total * 4, cudaMemcpyHostToDevice, c->stream))) return report(c, err);
  } else { /* no pinned memory: a copy per array from the caller's memory */
    for (int i = 0; i < 6; i++)
      if (part[i].n && CU_OK(c, cudaMemcpyAsync(c->b_in + part[i].off, part[i].src, (size_t)part[i].n * 4,
                                                  cudaMemcpyHostToDevice, c->stream)))
        return report(c, err);
  }
  view_i32(&b->d_pos, c->b_in, nt);
  view_i32(&b->d_seq, c->b_in + o_seq, nt);
  view_i32(&b->d_seq_len, c->b_in + o_len, ns);
  view_i32(&b->d_block_table, c->b_in + o_bt, nbt);
  view_i32(&b->d_out_rows, c->b_in + o_out, no);
  if (nsw) view_i32(&b->d_block_table_swa, c->b_in + o_sw, nsw);
  else memset(&b->d_block_table_swa, 0, sizeof b->d_block_table_swa);
  return 0;
}

/* ---- reads that the host waits for later (decoding one step ahead, runtime/session.c) --------------- */
/* One KV pool block of every layer with storage <-> a packed host payload (backend.h): all of the block's
 * chunks (K and V of each layer) in one batched copy call through the pinned stage. Restoring a 1,560-token
 * prefix of a 36-layer model from the prefix store took 7,000 single-row copies before. */
enum { KV_IO_MAX = 512 }; /* chunks: K and V of up to 256 layers */
static int kv_block_chunks(const struct hb_kv_layer *layers, int n_layers, int32_t block, int bs, void **dev,
                           size_t *sz) {
  int n = 0;
  for (int l = 0; l < n_layers; l++) {
    if (!layers[l].k.data) continue;
    if (n + 2 > KV_IO_MAX) return -1;
    const struct hb_tensor *kv[2] = {&layers[l].k, &layers[l].v};
    for (int j = 0; j < 2; j++, n++) {
      sz[n] = (size_t)bs * (size_t)kv[j]->cols * dtype_size(kv[j]->dtype);
      dev[n] = (char *)kv[j]->data + (size_t)block * sz[n];
    }
  }
  return n;
}

/* count copies dst[i] <- src[i] in stream order: one batched call, or one call each where the driver has no
 * batched copies */
static void copy_chunks(struct hb_ctx *c, void **dst, void **src, size_t *sz, int n, cudaMemcpyKind kind) {
  static int batch_ok = 1;
  if (batch_ok) {
    cudaMemcpyAttributes at;
    memset(&at, 0, sizeof at);
    at.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    at.srcLocHint.type = kind == cudaMemcpyHostToDevice ? cudaMemLocationTypeHost : cudaMemLocationTypeDevice;
    at.dstLocHint.type = kind == cudaMemcpyHostToDevice ? cudaMemLocationTypeDevice : cudaMemLocationTypeHost;
    size_t idx = 0;
    if (cudaMemcpyBatchAsync(dst, src, sz, (size_t)n, &at, &idx, 1, c->stream) == cudaSuccess) return;
    (void)cudaGetLastError(); /* not sticky: fall back for good */
    batch_ok = 0;
  }
  for (int i = 0; i < n && !c->status; i++) CU_OK(c, cudaMemcpyAsync(dst[i], src[i], sz[i], kind, c->stream));
}

/* the device side of blocks[0..nb) as chunks (kv_block_chunks per block) into malloc'd dev / sz arrays; host side
 * chunk i is the next sz[i] bytes. Returns the chunk count, or -1 (status set). */
static int kv_blocks_chunks(struct hb_ctx *c, const struct hb_kv_layer *layers, int n_layers, const int32_t *blocks, int nb,
                            int bs, size_t bytes, const char *what, void ***dev, void ***hostp, size_t **sz) {
  const size_t per = hb_kv_block_bytes(layers, n_layers, bs);
  if (nb < 1 || (size_t)nb * per != bytes || c->capturing) {
    CU_ARG(c, "%s: %zu bytes for %d blocks of %zu", what, bytes, nb, per);
    return -1;
  }
  const size_t cap = (size_t)nb * KV_IO_MAX;
  *dev = (void **)malloc(cap * sizeof(void *));
  *hostp = (void **)malloc(cap * sizeof(void *));
  *sz = (size_t *)malloc(cap * sizeof(size_t));
  if (!*dev || !*hostp || !*sz) {
    CU_ARG(c, "%s: out of host memory", what);
    return -1;
  }
  int n = 0;
  for (int b = 0; b < nb; b++) {
    int k = kv_block_chunks(layers, n_layers, blocks[b], bs, *dev + n, *sz + n);
    if (k < 0) {
      CU_ARG(c, "%s: more KV layers than %d", what, KV_IO_MAX / 2);
      return -1;
    }
    n += k;
  }
  return n;
}

/* chunk i: sz[i] bytes between the KV at kv[i] and packed + off[i] (all multiples of 16 bytes); one block of threads a
 * chunk */
struct kv_pack_chunk {
  char *kv;
  uint64_t off, sz;
};
/* to_kv: packed -> KV (kv_block_write's scatter), else KV -> packed (kv_block_read's gather) */
__global__ void kv_pack_kernel(const struct kv_pack_chunk *ch, char *packed, int to_kv) {
  const struct kv_pack_chunk k = ch[blockIdx.x];
  uint4 *p = (uint4 *)(packed + k.off), *q = (uint4 *)k.kv;
  for (uint64_t i = threadIdx.x; i < k.sz / 16; i += blockDim.x) {
    if (to_kv) q[i] = p[i];
    else p[i] = q[i];
  }
}

/* kv_block_write from the pinned buffer and every kv_block_read: the blocks' chunks (dev[i], sz[i]) move through one
 * packed device buffer (c->kv_io, with the chunk table behind the bytes) by one kernel and one copy of the packed
 * bytes, instead of thousands of 8 KB copies: a 1,560-token prefix of the 3B is 7,000 chunks to restore, and the disk
 * prefix cache reads 64 blocks (4,600 chunks) back at a time, on the engine's path when its notes are full (W5s spent
 * 0.4 ms a prompt there: docs/decisions.md). to_kv: host -> KV, else KV -> host. Returns 1 without doing anything
 * when it does not apply, else 0 (status set on a failure); the stream is synchronised (host is the caller's). */
static int kv_packed_io(struct hb_ctx *c, void **dev, size_t *sz, int n, char *host, size_t bytes, int to_kv) {
  const size_t tab = (size_t)n * sizeof(struct kv_pack_chunk), need = ((bytes + 255) & ~(size_t)255) + tab;
  if (n < 1 || n > 65535 || bytes % 16) return 1;
  for (int i = 0; i < n; i++)
    if (sz[i] % 16 || (uintptr_t)dev[i] % 16) return 1;
  struct kv_pack_chunk *t = (struct kv_pack_chunk *)malloc(tab);
  if (!t) return 1;
  uint64_t off = 0;
  for (int i = 0; i < n; i++) {
    t[i].kv = (char *)dev[i];
    t[i].off = off;
    t[i].sz = sz[i];
    off += sz[i];
  }
  if (cu_scratch(c, &c->kv_io, &c->kv_io_cap, need, 1, 0)) {
    free(t);
    return 0; /* status set */
  }
  char *packed = (char *)c->kv_io;
  struct kv_pack_chunk *dt = (struct kv_pack_chunk *)(packed + need - tab);
  if (to_kv) CU_OK(c, cudaMemcpyAsync(packed, host, bytes, cudaMemcpyHostToDevice, c->stream));
  if (!c->status && !CU_OK(c, cudaMemcpyAsync(dt, t, tab, cudaMemcpyHostToDevice, c->stream))) {
    kv_pack_kernel<<<n, 256, 0, c->stream>>>(dt, packed, to_kv);
    CU_LAUNCHED(c, to_kv ? "kv_scatter" : "kv_gather");
  }
  if (!to_kv && !c->status) CU_OK(c, cudaMemcpyAsync(host, packed, bytes, cudaMemcpyDeviceToHost, c->stream));
  if (!c->status) CU_OK(c, cudaStreamSynchronize(c->stream)); /* t and the caller's buffer are free again */
  free(t);
  return 0;
}

static int cuda_kv_block_write(struct hb_ctx *c, struct hb_kv_layer *layers, int n_layers, const int32_t *blocks, int nb,
                               int bs, const void *host, size_t bytes) {
  if (c->status) return c->status;
  void **dev = NULL, **src = NULL;
  size_t *sz = NULL;
  int n = kv_blocks_chunks(c, layers, n_layers, blocks, nb, bs, bytes, "kv_block_write", &dev, &src, &sz);
  if (n >= 0) {
    /* from the host_pinned buffer: straight to the device (the wait below keeps the buffer the caller's) */
    const int pinned = c->pin && (const char *)host >= c->pin && (const char *)host + bytes <= c->pin + c->pin_cap;
    if (pinned && !kv_packed_io(c, dev, sz, n, (char *)host, bytes, 1)) {
      free(dev);
      free(src);
      free(sz);
      return c->status;
    }
    char *st = pinned ? NULL : (char *)stage_get(c, bytes);
    const char *h = st ? st : (const char *)host;
    if (st) memcpy(st, host, bytes);
    for (int i = 0; i < n; i++) { src[i] = (void *)h; h += sz[i]; }
    copy_chunks(c, dev, src, sz, n, cudaMemcpyHostToDevice);
    if (!st && !c->status) CU_OK(c, cudaStreamSynchronize(c->stream)); /* pageable or host_pinned: the caller's bytes */
  }
  free(dev);
  free(src);
  free(sz);
  return c->status;
}

static void *cuda_host_pinned(struct hb_ctx *c, size_t bytes) {
  if (c->status || bytes == 0) return NULL;
  if (bytes <= c->pin_cap) return c->pin;
  if (c->pin) {
    if (CU_OK(c, cudaStreamSynchronize(c->stream))) return NULL; /* no copy from the old buffer still pending */
    cudaFreeHost(c->pin);
    c->pin = NULL;
    c->pin_cap = 0;
  }
  void *p = NULL;
  if (cudaHostAlloc(&p, bytes, cudaHostAllocDefault) != cudaSuccess) {
    (void)cudaGetLastError(); /* not sticky: the caller uses ordinary memory */
    return NULL;
  }
  c->pin = (char *)p;
  c->pin_cap = bytes;
  return p;
}

static int cuda_kv_block_read(struct hb_ctx *c, const struct hb_kv_layer *layers, int n_layers, const int32_t *blocks, int nb,
                              int bs, void *host, size_t bytes) {
  if (c->status) return c->status;
  void **dev = NULL, **dst = NULL;
  size_t *sz = NULL;
  int n = kv_blocks_chunks(c, layers, n_layers, blocks, nb, bs, bytes, "kv_block_read", &dev, &dst, &sz);
  if (n >= 0 && !kv_packed_io(c, dev, sz, n, (char *)host, bytes, 0)) n = -1; /* done (or status set) */
  if (n >= 0) {
    char *st = (char *)stage_get(c, bytes);
    char *h = st ? st : (char *)host;
    for (int i = 0; i < n; i++) { dst[i] = h; h += sz[i]; }
    copy_chunks(c, dst, dev, sz, n, cudaMemcpyDeviceToHost);
    if (!c->status) CU_OK(c, cudaStreamSynchronize(c->stream));
    if (!c->status && st) {
      memcpy(host, st, bytes);
      stage_reset(c);
    }
  }
  free(dev);
  free(dst);
  free(sz);
  return c->status;
}

static int cuda_read_start(struct hb_ctx *c, const struct hb_tensor *t, int64_t n_rows, int slot) {
  if (c->status) return c->status;
  if (slot < 0 || slot > 1 || t->dtype != HB_I32 || n_rows < 0 || n_rows > t->rows || c->capturing) {
    CU_ARG(c, "read_start: slot %d, dtype %d, %lld rows", slot, (int)t->dtype, (long long)n_rows);
    return c->status;
  }
  const size_t n = (size_t)n_rows * (size_t)t->cols * 4;
  if (n > c->rd[slot].cap) { /* the slot's previous copy was waited for (read_finish) or the stream synced */
    void *p = NULL;
    const size_t cap = n < 4096 ? 4096 : 2 * n;
    if ((c->rd[slot].ev && CU_OK(c, cudaEventSynchronize(c->rd[slot].ev))) ||
        CU_OK(c, cudaHostAlloc(&p, cap, cudaHostAllocDefault)))
      return c->status;
    cudaFreeHost(c->rd[slot].buf);
    c->rd[slot].buf = p;
    c->rd[slot].cap = cap;
  }
  if (!c->rd[slot].ev && CU_OK(c, cudaEventCreateWithFlags(&c->rd[slot].ev, cudaEventDisableTiming))) return c->status;
  c->rd[slot].bytes = n;
  if (!CU_OK(c, cudaMemcpyAsync(c->rd[slot].buf, t->data, n, cudaMemcpyDeviceToHost, c->stream)))
    CU_OK(c, cudaEventRecord(c->rd[slot].ev, c->stream));
  return c->status;
}

static int cuda_read_finish(struct hb_ctx *c, int slot, void *host, struct hearth_err *err) {
  if (!c->status && (slot < 0 || slot > 1 || !c->rd[slot].ev)) CU_ARG(c, "read_finish: slot %d was never started", slot);
  if (!c->status && !CU_OK(c, cudaEventSynchronize(c->rd[slot].ev)) && host)
    memcpy(host, c->rd[slot].buf, c->rd[slot].bytes);
  return report(c, err);
}

static void cuda_copy_rows(struct hb_ctx *c, struct hb_tensor *dst, const struct hb_tensor *src, int64_t n_rows) {
  if (c->status) return;
  if (dst->dtype != HB_I32 || src->dtype != HB_I32 || dst->cols != src->cols || n_rows > dst->rows || n_rows > src->rows) {
    CU_ARG(c, "copy_rows: I32 tensors of equal width and >= %lld rows", (long long)n_rows);
    return;
  }
  if (n_rows > 0)
    CU_OK(c, cudaMemcpyAsync(dst->data, src->data, (size_t)n_rows * (size_t)src->cols * 4, cudaMemcpyDeviceToDevice,
                             c->stream));
}

/* decode_advance: every token's position and every sequence's length one further (a decode batch: one token per
 * sequence), where the batch's graph reads them. Never with PDL (cu_launch_pdl), and never directly before a PDL
 * kernel: those read positions before their griddepcontrol.wait (see cuda_batch_upload) */
__global__ void decode_advance_kernel(int32_t *pos, int nt, int32_t *len, int ns) {
  const int i = threadIdx.x + blockIdx.x * blockDim.x;
  if (i < nt) pos[i] += 1;
  if (i < ns) len[i] += 1;
}
static void cuda_decode_advance(struct hb_ctx *c, const struct hb_batch *b) {
  if (c->status) return;
  const int n = b->n_tokens > b->n_seqs ? b->n_tokens : b->n_seqs;
  if (n <= 0) return;
  decode_advance_kernel<<<(n + 127) / 128, 128, 0, c->stream>>>((int32_t *)b->d_pos.data, b->n_tokens,
                                                               (int32_t *)b->d_seq_len.data, b->n_seqs);
  CU_LAUNCHED(c, "decode_advance");
}

static int cuda_sync(struct hb_ctx *c, struct hearth_err *err) {
  if (!c->status && !c->capturing && !CU_OK(c, cudaStreamSynchronize(c->stream))) stage_reset(c);
  return report(c, err);
}

/* ---- ops: the sticky status turns every later op into a no-op --------------------------------- */

static void op_embed(struct hb_ctx *c, struct hb_tensor *out, const struct hb_tensor *table,
                     const struct hb_tensor *ids, int n, float scale) {
  if (!c->status) cu_embed(c, out, table, ids, n, scale);
}
static void op_rmsnorm(struct hb_ctx *c, struct hb_tensor *out, const struct hb_tensor *x,
                       const struct hb_tensor *w, float eps, float w_offset) {
  if (!c->status) cu_rmsnorm(c, out, x, w, eps, w_offset);
}
static void op_matmul(struct hb_ctx *c, struct hb_tensor *out, const struct hb_tensor *x,
                      const struct hb_tensor *w, const struct hb_tensor *bias, int n) {
  if (!c->status) cu_matmul(c, out, x, w, bias, n);
}
static void op_rope(struct hb_ctx *c, struct hb_tensor *x, const struct hb_batch *b, int n_heads,
                    int head_dim, int n_rot, float theta) {
  if (!c->status) cu_rope_neox(c, x, b, n_heads, head_dim, n_rot, theta);
}
static void op_kv_write(struct hb_ctx *c, struct hb_kv_layer *kv, const struct hb_tensor *k,
                        const struct hb_tensor *v, const struct hb_batch *b) {
  if (!c->status) cu_kv_write(c, kv, k, v, b);
}
static void op_attention(struct hb_ctx *c, struct hb_tensor *out, const struct hb_tensor *q,
                         const struct hb_kv_layer *kv, const struct hb_batch *b, const struct hb_attn_params *p) {
  if (c->status) return;
  cu_attention(c, out, q, kv, b, p);
}
static void op_silu_mul(struct hb_ctx *c, struct hb_tensor *out, const struct hb_tensor *gate,
                        const struct hb_tensor *up, int n) {
  if (!c->status) cu_silu_mul(c, out, gate, up, n);
}
static void op_add(struct hb_ctx *c, struct hb_tensor *x, const struct hb_tensor *y, int n) {
  if (!c->status) cu_add(c, x, y, n);
}
static void op_gelu_mul(struct hb_ctx *c, struct hb_tensor *out, const struct hb_tensor *gate, const struct hb_tensor *up,
                        int up_col0, int n) {
  if (!c->status) cu_gelu_mul(c, out, gate, up, up_col0, n);
}
static void op_scale(struct hb_ctx *c, struct hb_tensor *x, float s, int n) {
  if (!c->status) cu_scale(c, x, s, n);
}
static void op_softcap(struct hb_ctx *c, struct hb_tensor *x, float cap, int n) {
  if (!c->status) cu_softcap(c, x, cap, n);
}
static void op_rope_prop(struct hb_ctx *c, struct hb_tensor *x, const struct hb_batch *b, int n_heads, int head_dim,
                         int n_pairs, float theta, float factor) {
  if (!c->status) cu_rope_prop(c, x, b, n_heads, head_dim, n_pairs, theta, factor);
}
static void op_gather_rows(struct hb_ctx *c, struct hb_tensor *out, const struct hb_tensor *x,
                           const struct hb_batch *b) {
  if (!c->status) cu_gather_rows(c, out, x, b);
}


/* ---- graphs ----------------------------------------------------------------------------------- */

struct hb_cuda_graph {
  cudaGraphExec_t exec;
  unsigned gen;
  int traced; /* a trace build: the capture's number when it was traced (trace.cu), else 0 */
};

extern "C" int hb_cuda_capture_begin(struct hb_ctx *c, struct hearth_err *err) {
  if (c->status) return report(c, err);
  if (c->capturing) return cu_err_set(err, HEARTH_ERR_ARG, "cuda: a capture is already open");
  if (CU_OK(c, cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeRelaxed))) return report(c, err);
  c->capturing = 1;
  cu_trace_capture_begin(c);
  return 0;
}

extern "C" int hb_cuda_capture_end(struct hb_ctx *c, struct hb_cuda_graph **out, struct hearth_err *err) {
  *out = NULL;
  if (!c->capturing) return cu_err_set(err, HEARTH_ERR_ARG, "cuda: no capture is open");
  cudaGraph_t g = NULL;
  cudaError_t e = cudaStreamEndCapture(c->stream, &g);
  c->capturing = 0;
  if (e != cudaSuccess) cu_ok_(c, e, "cudaStreamEndCapture", __FILE__, __LINE__);
  if (c->status) {
    if (g) cudaGraphDestroy(g);
    return report(c, err);
  }
  struct hb_cuda_graph *h = (struct hb_cuda_graph *)calloc(1, sizeof *h);
  if (!h) { cudaGraphDestroy(g); return cu_err_set(err, HEARTH_ERR_NOMEM, "out of memory"); }
  e = cudaGraphInstantiate(&h->exec, g, 0);
  cudaGraphDestroy(g);
  if (e != cudaSuccess) {
    free(h);
    cu_ok_(c, e, "cudaGraphInstantiate", __FILE__, __LINE__);
    return report(c, err);
  }
  h->gen = c->gen;
  h->traced = cu_trace_graph_traced(c);
  *out = h;
  return 0;
}

extern "C" int hb_cuda_graph_launch(struct hb_ctx *c, struct hb_cuda_graph *g, struct hearth_err *err) {
  if (c->status) return report(c, err);
  if (g->gen != c->gen) return cu_err_set(err, HEARTH_ERR_ARG, "cuda: stale graph (a scratch buffer moved): capture again");
  const int traced = g->traced && g->traced == cu_trace_captures(c); /* only the latest capture */
  if (traced) cu_trace_replay_begin(c);
  if (CU_OK(c, cudaGraphLaunch(g->exec, c->stream))) return report(c, err);
  if (traced) cu_trace_replay_end(c);
  return 0;
}

extern "C" void hb_cuda_graph_free(struct hb_cuda_graph *g) {
  if (!g) return;
  cudaGraphExecDestroy(g->exec);
  free(g);
}

extern "C" void hb_cuda_argmax(struct hb_ctx *c, const struct hb_tensor *logits, int n, struct hb_tensor *ids,
                               struct hb_tensor *logprobs) {
  if (!c->status) cu_argmax(c, logits, n, ids, logprobs);
}

/* ---- fused ops --------------------------------------------------------------------------------- */

/* a temporary activation tensor shaped like `like` (n rows × cols) in scratch slot i */
static int tmp_tensor(struct hb_ctx *c, int i, const struct hb_tensor *like, int64_t n, int64_t cols,
                      struct hb_tensor *t) {
  size_t es = like->dtype == HB_F16 ? 2 : 4;
  if (cu_scratch(c, &c->tmp[i], &c->tmp_cap[i], (size_t)(n * cols) * es, 1, 0)) return 1;
  memset(t, 0, sizeof *t);
  t->dtype = like->dtype == HB_F16 ? HB_F16 : HB_F32;
  t->rows = n;
  t->cols = cols;
  t->data = c->tmp[i];
  return 0;
}

extern "C" void hb_cuda_norm_matmul(struct hb_ctx *c, const struct hb_tensor *x, const struct hb_tensor *norm_w,
                                    float eps, float w_offset, int n_mm, struct hb_tensor *const *outs,
                                    const struct hb_tensor *const *ws, const struct hb_tensor *const *biases, int n,
                                    int add) {
  if (c->status || n <= 0) return;
  if (n_mm < 1 || n_mm > 3 || (add && n_mm != 1)) { CU_ARG(c, "norm_matmul: n_mm %d add %d", n_mm, add); return; }
  if (!cu_gemv_fused(c, norm_w ? PRO_NORM : PRO_PLAIN, x, NULL, norm_w, eps, w_offset, n_mm, outs, ws, biases, n, add))
    return;
  struct hb_tensor xn = *x;
  xn.rows = n;
  if (norm_w) {
    if (tmp_tensor(c, 0, x, n, x->cols, &xn)) return;
    cu_rmsnorm(c, &xn, x, norm_w, eps, w_offset);
  }
  /* one tensor-core GEMM over all weights, the residual add in its epilogue; else one matmul each */
  if (!cu_gemm_q4(c, &xn, n_mm, outs, ws, biases, n, add)) return;
  for (int i = 0; i < n_mm; i++) {
    const struct hb_tensor *b = biases ? biases[i] : NULL;
    if (!add) { cu_matmul(c, outs[i], &xn, ws[i], b, n); continue; }
    struct hb_tensor t;
    if (tmp_tensor(c, 1, outs[i], n, outs[i]->cols, &t)) return;
    cu_matmul(c, &t, &xn, ws[i], b, n);
    cu_add(c, outs[i], &t, n);
  }
}

extern "C" void hb_cuda_silu_matmul(struct hb_ctx *c, const struct hb_tensor *gate, const struct hb_tensor *up,
                                    struct hb_tensor *out, const struct hb_tensor *w, int n, int add) {
  if (c->status || n <= 0) return;
  struct hb_tensor *o1[1] = {out};
  const struct hb_tensor *w1[1] = {w};
  if (!cu_gemv_fused(c, PRO_SILU, gate, up, NULL, 0.0f, 0.0f, 1, o1, w1, NULL, n, add)) return;
  struct hb_tensor g;
  if (tmp_tensor(c, 0, gate, n, gate->cols, &g)) return;
  cu_silu_mul(c, &g, gate, up, n);
  if (!cu_gemm_q4(c, &g, 1, o1, w1, NULL, n, add)) return; /* the residual add in the GEMM epilogue */
  if (!add) { cu_matmul(c, out, &g, w, NULL, n); return; }
  struct hb_tensor t;
  if (tmp_tensor(c, 1, out, n, out->cols, &t)) return;
  cu_matmul(c, &t, &g, w, NULL, n);
  cu_add(c, out, &t, n);
}

extern "C" int hb_cuda_g4_qkv_post(struct hb_ctx *c, struct hb_tensor *q, const struct hb_tensor *k,
                                   const struct hb_tensor *v, const struct hb_tensor *q_norm,
                                   const struct hb_tensor *k_norm, float eps, struct hb_kv_layer *kv,
                                   const struct hb_batch *b, int n_heads, int n_kv_heads, int head_dim, int n_pairs,
                                   float theta, float factor) {
  if (c->status) return 0; /* sticky error: nothing runs either way */
  return cu_g4_qkv_post(c, q, k, v, q_norm, k_norm, eps, kv, b, n_heads, n_kv_heads, head_dim, n_pairs, theta, factor);
}

extern "C" int hb_cuda_g4_post_attention(struct hb_ctx *c, struct hb_tensor *out, const struct hb_tensor *q,
                                         const struct hb_tensor *k, const struct hb_tensor *v,
                                         const struct hb_tensor *q_norm, const struct hb_tensor *k_norm, float eps,
                                         struct hb_kv_layer *kv_w, const struct hb_kv_layer *kv,
                                         const struct hb_batch *b, const struct hb_attn_params *p, int n_pairs,
                                         float theta, float factor) {
  if (c->status) return 0; /* sticky error: nothing runs either way */
  return cu_g4_post_attention(c, out, q, k, v, q_norm, k_norm, eps, kv_w, kv, b, p, n_pairs, theta, factor);
}

extern "C" void hb_cuda_norm_add(struct hb_ctx *c, struct hb_tensor *x, const struct hb_tensor *y,
                                 const struct hb_tensor *w, float eps, float s, int n) {
  if (!c->status) cu_norm_add(c, x, y, w, eps, s, n);
}

extern "C" int hb_cuda_gelu_matmul(struct hb_ctx *c, struct hb_tensor *out, const struct hb_tensor *gate,
                                   const struct hb_tensor *up, int up_col0, const struct hb_tensor *w, int n) {
  if (c->status) return 0; /* sticky error: nothing runs either way */
  if (n <= 0) return 1;
  return cu_gemv_gelu_matmul(c, out, gate, up, up_col0, w, n);
}

extern "C" int hb_cuda_add_norm_matmul(struct hb_ctx *c, struct hb_tensor *xo, const struct hb_tensor *x,
                                       const struct hb_tensor *y, const struct hb_tensor *aw, float s,
                                       const struct hb_tensor *norm_w, float eps, int n_mm,
                                       struct hb_tensor *const *outs, const struct hb_tensor *const *ws, int act, int n) {
  if (c->status) return 0; /* sticky error: nothing runs either way */
  if (n <= 0 || n_mm < 1 || n_mm > 3) return 1;
  return cu_gemv_add_norm_matmul(c, xo, x, y, aw, s, norm_w, eps, n_mm, outs, ws, act, n);
}

extern "C" int hb_cuda_norm_qkv_rope_kv(struct hb_ctx *c, const struct hb_tensor *x, const struct hb_tensor *norm_w,
                                        float eps, const struct hb_tensor *const *ws,
                                        const struct hb_tensor *const *biases, struct hb_tensor *q,
                                        struct hb_kv_layer *kv, const struct hb_batch *b, int n_heads, float theta,
                                        int n) {
  if (c->status) return 0; /* sticky error: nothing runs either way */
  if (!norm_w || n <= 0) return 1;
  if (!cu_gemv_qkv_rope_kv(c, x, norm_w, eps, ws, biases, q, kv, b, n_heads, theta, n)) return 0;
  /* batched decode: rmsnorm, then the QKV GEMM with rope and the cache write in its split-K finish, where that GEMM
   * splits K; asked with a dry run first (x stands in for xn: same dtype, cols and >= n rows), so that a decline
   * leaves nothing done */
  struct hb_tensor xn;
  if (x->dtype != HB_F16 || n > x->rows || cu_qkv_rope_split(c, x, ws, biases, q, kv, b, n_heads, theta, n, 1) ||
      tmp_tensor(c, 0, x, n, x->cols, &xn))
    return 1;
  cu_rmsnorm(c, &xn, x, norm_w, eps, 0.0f);
  if (cu_qkv_rope_split(c, &xn, ws, biases, q, kv, b, n_heads, theta, n, 0))
    CU_ARG(c, "norm_qkv_rope_kv: the split QKV GEMM declined after its check");
  return 0;
}

extern "C" int hb_cuda_norm_swiglu(struct hb_ctx *c, const struct hb_tensor *x, const struct hb_tensor *norm_w,
                                   float eps, const struct hb_tensor *w_gate, const struct hb_tensor *w_up,
                                   struct hb_tensor *out, int n, int act) {
  if (c->status) return 0; /* sticky error: nothing runs either way */
  if (!norm_w || n <= 0) return 1;
  if (!cu_gemv_norm_swiglu(c, x, norm_w, eps, w_gate, w_up, out, n, act)) return 0;
  /* prefill and batched decode (SiLU): rmsnorm, then the gate/up GEMM with silu(g) * u in its epilogue or in its
   * split-K finish, where that GEMM covers the shapes; asked with a dry run first, so that a decline leaves nothing
   * done */
  if (act != HB_ACT_SILU || x->dtype != HB_F16 || n > x->rows) return 1;
  struct hb_tensor xn; /* x stands in for xn in the question: same dtype, cols and (>= n) rows */
  if (!cu_gemm_q4_swiglu_covers(c, x, w_gate, w_up, out, n) || tmp_tensor(c, 0, x, n, x->cols, &xn)) return 1;
  cu_rmsnorm(c, &xn, x, norm_w, eps, 0.0f);
  if (cu_gemm_q4_swiglu(c, &xn, w_gate, w_up, out, n)) CU_ARG(c, "norm_swiglu: the SwiGLU GEMM declined after its check");
  return 0;
}

extern "C" int hb_cuda_attn_o(struct hb_ctx *c, struct hb_tensor *x, const struct hb_tensor *q,
                              const struct hb_kv_layer *kv, const struct hb_batch *b, const struct hb_attn_params *p,
                              const struct hb_tensor *wo) {
  if (c->status) return 0; /* sticky error: nothing runs either way */
  return cu_attn_o(c, x, q, kv, b, p, wo);
}

static void cuda_set_row_invariant(struct hb_ctx *c, int on) { c->row_invariant = on != 0; }

/* Rows of one sequence computed as its one-token steps (backend.h, set_step_twins): the decode GEMV takes every
 * projection in the launch shape (warps per tile, so the order of its K sums) a one-token launch picks, in row chunks
 * where the rows' x does not fit that shape (gemv_q4.cu, gemv_twin_launch); attention takes the decode kernels with
 * the splits of a one-token launch (attention.cu). What has no such form counts in twin_bad: the GEMMs, the fused
 * attention + o_proj of short one-token steps (attn_o), Gemma 4's fused ops, and the exact (f32) mode as a whole. */
extern "C" int hb_cuda_set_step_twins(struct hb_ctx *c, int on) {
  if (on) {
    if (c->exact || c->row_invariant) return 1;
    c->twin = 1;
    c->twin_bad = 0;
    return 0;
  }
  c->twin = 0;
  return c->twin_bad;
}

extern "C" int hb_cuda_attn_o_max_len(struct hb_ctx *c, int head_dim) { return cu_attn_o_max_len(c, head_dim); }

extern "C" int hb_cuda_batch_short_len(struct hb_ctx *c, int n_tokens) { return cu_attn_batch_short_len(c, n_tokens); }

extern "C" long hb_cuda_attn_wide_launches(struct hb_ctx *c) { return cu_attn_wide_launches(c); }

extern "C" void hb_cuda_set_attn_o_max(struct hb_ctx *c, int max_len) { c->attn_o_max = max_len < -2 ? -1 : max_len; }

extern "C" int hb_cuda_attn_o_chunk(int head_dim) { return cu_attn_o_chunk(head_dim); }
extern "C" void hb_cuda_profiler_range(int on) { (void)(on ? cudaProfilerStart() : cudaProfilerStop()); }

extern "C" int hb_cuda_rope_kv_write(struct hb_ctx *c, struct hb_tensor *q, struct hb_tensor *k,
                                     const struct hb_tensor *v, struct hb_kv_layer *kv, const struct hb_batch *b,
                                     int n_heads, int n_rot, float theta, const struct hb_tensor *q_norm,
                                     const struct hb_tensor *k_norm, float eps) {
  return c->status ? 0 : cu_rope_kv_write(c, q, k, v, kv, b, n_heads, n_rot, theta, q_norm, k_norm, eps);
}


extern "C" size_t hb_cuda_mem_free(struct hb_ctx *c) {
  size_t fr = 0, tot = 0;
  (void)c;
  if (cudaMemGetInfo(&fr, &tot) != cudaSuccess) return 0;
  return fr;
}

extern "C" void hb_cuda_mem_report(struct hb_ctx *c, char *buf, size_t len) {
  size_t fr = 0, tot = 0;
  cudaMemGetInfo(&fr, &tot);
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, c->device) != cudaSuccess) snprintf(prop.name, sizeof prop.name, "?");
  snprintf(buf, len,
           "cuda device %d: %s, %d SMs, %.2f GiB total, %.2f GiB free; this context: %.3f GiB tensors+weights, "
           "%.3f GiB scratch; activations %s",
           c->device, prop.name, c->n_sm, tot / 1073741824.0, fr / 1073741824.0, c->bytes_alloc / 1073741824.0,
           c->bytes_scratch / 1073741824.0, c->exact ? "f32 (exact)" : "f16");
}

/* ---- timing marks ------------------------------------------------------------------------------ */

extern "C" void hb_cuda_mark(struct hb_ctx *c, int i) {
  if (c->status || i < 0 || i >= 1024) return;
  if (!c->marks && !(c->marks = (cudaEvent_t *)calloc(1024, sizeof(cudaEvent_t)))) return;
  if (!c->marks[i] && CU_OK(c, cudaEventCreate(&c->marks[i]))) return;
  /* under stream capture a plain record only adds a dependency; External makes it a timing node */
  CU_OK(c, cudaEventRecordWithFlags(c->marks[i], c->stream, c->capturing ? cudaEventRecordExternal : cudaEventRecordDefault));
}

extern "C" float hb_cuda_mark_ms(struct hb_ctx *c, int i, int j) {
  float ms = -1.0f;
  if (!c->marks || i < 0 || j < 0 || i >= 1024 || j >= 1024 || !c->marks[i] || !c->marks[j]) return -1.0f;
  if (cudaEventElapsedTime(&ms, c->marks[i], c->marks[j]) != cudaSuccess) { cudaGetLastError(); return -1.0f; }
  return ms;
}

/* ---- the table ---------------------------------------------------------------------------------- */

static int op_capture_end(struct hb_ctx *c, void **graph, struct hearth_err *err) {
  struct hb_cuda_graph *g = NULL;
  int rc = hb_cuda_capture_end(c, &g, err);
  *graph = g;
  return rc;
}
static int op_graph_launch(struct hb_ctx *c, void *graph, struct hearth_err *err) {
  return hb_cuda_graph_launch(c, (struct hb_cuda_graph *)graph, err);
}
static void op_graph_free(void *graph) { hb_cuda_graph_free((struct hb_cuda_graph *)graph); }
static uint64_t op_mem_available(struct hb_ctx *c) { return hb_cuda_mem_free(c); }
static void op_row_score(struct hb_ctx *c, const struct hb_tensor *logits, int n, const struct hb_tensor *req,
                         struct hb_tensor *out) {
  if (!c->status) cu_row_score(c, logits, n, req, out);
}
static void op_sample(struct hb_ctx *c, const struct hb_tensor *logits, int n, const struct hb_sample_row *rows,
                      const struct hb_sample_pen *pen, int n_pen, struct hb_tensor *ids) {
  if (!c->status) cu_sample(c, logits, n, rows, pen, n_pen, ids);
}

extern "C" const struct hb_ops hb_cuda_ops = {
  /* .name = */ "cuda",
  /* .init = */ cuda_init,
  /* .free = */ cuda_free,
  /* .alloc = */ cuda_alloc,
  /* .release = */ cuda_release,
  /* .weight_upload = */ cuda_weight_upload,
  /* .write = */ cuda_write,
  /* .read = */ cuda_read,
  /* .batch_upload = */ cuda_batch_upload,
  /* .kv_block_read = */ cuda_kv_block_read,
  /* .kv_block_write = */ cuda_kv_block_write,
  /* .embed = */ op_embed,
  /* .rmsnorm = */ op_rmsnorm,
  /* .matmul = */ op_matmul,
  /* .rope_neox = */ op_rope,
  /* .kv_write = */ op_kv_write,
  /* .attention = */ op_attention,
  /* .silu_mul = */ op_silu_mul,
  /* .add = */ op_add,
  /* .gather_rows = */ op_gather_rows,
  /* .sync = */ cuda_sync,
  /* .norm_matmul = */ hb_cuda_norm_matmul,
  /* .silu_matmul = */ hb_cuda_silu_matmul,
  /* .rope_kv_write = */ hb_cuda_rope_kv_write,
  /* .argmax = */ hb_cuda_argmax,
  /* .capture_begin = */ hb_cuda_capture_begin,
  /* .capture_end = */ op_capture_end,
  /* .graph_launch = */ op_graph_launch,
  /* .graph_free = */ op_graph_free,
  /* .alloc_f32 = */ cuda_alloc_f32,
  /* .norm_qkv_rope_kv = */ hb_cuda_norm_qkv_rope_kv,
  /* .norm_swiglu = */ hb_cuda_norm_swiglu,
  /* .read_start = */ cuda_read_start,
  /* .read_finish = */ cuda_read_finish,
  /* .copy_rows = */ cuda_copy_rows,
  /* .decode_advance = */ cuda_decode_advance,
  /* .attn_o = */ hb_cuda_attn_o,
  /* .attn_o_max_len = */ hb_cuda_attn_o_max_len,
  /* .set_row_invariant = */ cuda_set_row_invariant,
  /* .gelu_mul = */ op_gelu_mul,
  /* .scale = */ op_scale,
  /* .softcap = */ op_softcap,
  /* .rope_prop = */ op_rope_prop,
  /* .mem_available = */ op_mem_available,
  /* .row_score = */ op_row_score,
  /* .kernels = */ NULL,
  /* .host_pinned = */ cuda_host_pinned,
  /* .sample = */ op_sample,
};
