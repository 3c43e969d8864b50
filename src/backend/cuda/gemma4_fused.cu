/* backend/cuda/gemma4_fused.cu — the two Gemma 4 decode fusions of backend.h: the per-head norms, proportional RoPE
 * and cache write after the QKV projections (g4_qkv_post: six plain launches in one), and the post-norm residual add
 * with the layer scalar (norm_add: three in one). A Gemma 4 layer ran about 25 launches a token on the plain ops, and
 * the E4B's decode step was 1,037 launches, most of them norms and elementwise kernels a few µs each (bench/NOTES.md,
 * session 27). Each kernel repeats the arithmetic of the plain kernels it replaces (norm_rope.cu, gemma4_ops.cu,
 * elementwise.cu, attention.cu's kv_write) in the same order, with the same roundings to the activation type between
 * them, so the fused ops are bit-identical to the plain sequences (test_cuda_ops checks it). */
#include <math.h>

#include "backend/cuda/g4_post.cuh"

/* ---- g4_qkv_post ---------------------------------------------------------------------------------------
 * One warp per (token, head); heads [0, nq) are q, then (with a cache) nkv heads of k and nkv of v. The warp's
 * arithmetic is g4_post.cuh's (the norm rmsnorm_kernel's, the rotation rope_prop_kernel's), the cache slot
 * kv_write_kernel's. */
template <typename T, typename KT>
__global__ __launch_bounds__(32) void g4_qkv_post_kernel(T *q, const T *k, const T *v, const void *qw, int qwdt,
                                                         const void *kw, int kwdt, float eps, KT *kc, KT *vc,
                                                         const int32_t *pos, const int32_t *seq, const int32_t *bt,
                                                         int max_blocks, int bs, int nq, int nkv, int hd, int n_pairs,
                                                         const __grid_constant__ g4_rinv rinv) {
  pdl_trigger();
  const int t = blockIdx.x, h = blockIdx.y, lane = threadIdx.x, nj = hd / 32;
  const int kind = h < nq ? 0 : (h < nq + nkv ? 1 : 2); /* q, k, v */
  const int hh = kind == 0 ? h : (kind == 1 ? h - nq : h - nq - nkv);
  const T *src = kind == 0 ? q + ((int64_t)t * nq + hh) * hd : (kind == 1 ? k : v) + ((int64_t)t * nkv + hh) * hd;
  /* Nothing below but q, k and v comes from the GEMV before: the norm weights, the position, the rotation's sin and
   * cos, and the cache slot are read and computed before the wait, so that after it the warp has one round trip
   * (its head's values) before its stores (bench/NOTES.md, lesson 1; session 31). */
  float wn[QP_MAXJ], sn[QP_MAXJ / 2], cs[QP_MAXJ / 2];
  const int p = pos[t];
  g4_post_pre(wn, sn, cs, kind == 0 ? qw : (kind == 1 ? kw : NULL), kind == 0 ? qwdt : kwdt, kind < 2, p,
              [&](int i) { return rinv.v[i]; }, nj, n_pairs, lane);
  int64_t slot = 0;
  if (kind > 0) slot = (int64_t)bt[(int64_t)seq[t] * max_blocks + p / bs] * bs + p % bs;
  pdl_wait(); /* launched with programmatic stream serialization: q, k, v come from the GEMV before */
  float x[QP_MAXJ];
#pragma unroll
  for (int j = 0; j < QP_MAXJ; j++)
    if (j < nj) x[j] = ldf(src + lane + 32 * j);
  g4_post_apply<T>(x, wn, sn, cs, nj, hd, n_pairs, eps, kind < 2, lane);
  if (kind == 0) {
    T *o = q + ((int64_t)t * nq + hh) * hd;
#pragma unroll
    for (int j = 0; j < QP_MAXJ; j++)
      if (j < nj) stf(o + lane + 32 * j, x[j]);
    return;
  }
  const int64_t w_kv = (int64_t)nkv * hd;
  KT *c = (kind == 1 ? kc : vc) + slot * w_kv + (int64_t)hh * hd;
#pragma unroll
  for (int j = 0; j < QP_MAXJ; j++)
    if (j < nj) stf(c + lane + 32 * j, x[j]);
}

int cu_g4_qkv_post(struct hb_ctx *ctx, struct hb_tensor *q, const struct hb_tensor *k, const struct hb_tensor *v,
                   const struct hb_tensor *q_norm, const struct hb_tensor *k_norm, float eps, struct hb_kv_layer *kv,
                   const struct hb_batch *b, int n_heads, int n_kv, int hd, int n_pairs, float theta, float factor) {
  const int n = b->n_tokens;
  if (n <= 0) return 0;
  if (hd % 64 || hd > 32 * QP_MAXJ || n > 65535 || !b->d_pos.data) return 1;
  if (q->cols != (int64_t)n_heads * hd || q->rows < n || q_norm->rows * q_norm->cols != hd) return 1;
  if (q->dtype != HB_F16 && q->dtype != HB_F32) return 1;
  if (kv) {
    if (!k || !v || !k_norm || k->dtype != q->dtype || v->dtype != q->dtype || k->cols != (int64_t)n_kv * hd ||
        v->cols != k->cols || k->rows < n || v->rows < n || k_norm->rows * k_norm->cols != hd ||
        kv->n_kv_heads != n_kv || kv->head_dim != hd || kv->k.dtype != kv->v.dtype ||
        (kv->k.dtype != HB_F16 && kv->k.dtype != HB_F32))
      return 1;
  }
  if (n_pairs > hd / 2) n_pairs = hd / 2; /* as rope_prop clamps it */
  if (n_pairs < 0) n_pairs = 0;
  g4_rinv rinv;
  g4_rinv_make(&rinv, n_pairs, hd, theta, factor);
  dim3 grid((unsigned)n, (unsigned)(n_heads + (kv ? 2 * n_kv : 0)));
  const int32_t *pos = (const int32_t *)b->d_pos.data, *seq = (const int32_t *)b->d_seq.data,
                *bt = (const int32_t *)b->d_block_table.data;
  const void *kw = kv ? k_norm->data : NULL;
  const int kwdt = kv ? (int)k_norm->dtype : 0;
#define QP(T, KT)                                                                                                   \
  cu_launch_pdl(ctx, "g4_qkv_post", g4_qkv_post_kernel<T, KT>, grid, dim3(32), 0,                                   \
      (T *)q->data, kv ? (const T *)k->data : NULL, kv ? (const T *)v->data : NULL, q_norm->data, (int)q_norm->dtype, \
      kw, kwdt, eps, kv ? (KT *)kv->k.data : NULL, kv ? (KT *)kv->v.data : NULL, pos, seq, bt, b->max_blocks,       \
      b->block_size, n_heads, kv ? n_kv : 0, hd, n_pairs, rinv)
  const bool kf16 = !kv || kv->k.dtype == HB_F16;
  if (q->dtype == HB_F16 && kf16) QP(__half, __half);
  else if (q->dtype == HB_F16) QP(__half, float);
  else if (kf16) QP(float, __half);
  else QP(float, float);
#undef QP
  CU_LAUNCHED(ctx, "g4_qkv_post");
  return 0;
}

/* ---- norm_add: x = (x + rmsnorm(y) · w) · s ------------------------------------------------------------
 * WIDE (d >= 1024): one 256-thread block per row with rmsnorm_row_kernel's sums (16-byte loads of f16 rows when
 * d % 8 == 0); else one warp per row with rmsnorm_kernel's. Then add_kernel's and scale_kernel's roundings. */
template <typename T, bool WIDE>
__global__ __launch_bounds__(256) void norm_add_kernel(T *x, const T *y, const void *w, int wdt, int64_t rows, int d,
                                                       float eps, float s) {
  pdl_trigger();
  const int nthr = WIDE ? 256 : 32;
  /* (the early exit below is taken before pdl_wait only by warps with no row: they touch nothing) */
  const int64_t r = WIDE ? (int64_t)blockIdx.x : (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int tid = WIDE ? (int)threadIdx.x : (int)threadIdx.x % 32;
  if (r >= rows) return; /* WIDE: grid = rows, never taken; a warp-uniform exit otherwise */
  const T *yr = y + r * d;
  T *xr = x + r * d;
  pdl_wait(); /* launched with programmatic stream serialization: y (and x) come from the kernels before */
  float ss = 0.0f;
  if (WIDE && sizeof(T) == 2 && d % 8 == 0) {
    for (int j = tid * 8; j < d; j += 256 * 8) {
      uint4 u = *(const uint4 *)(yr + j);
      const __half2 *h = (const __half2 *)&u;
#pragma unroll
      for (int e = 0; e < 4; e++) {
        float2 f = __half22float2(h[e]);
        ss += f.x * f.x + f.y * f.y;
      }
    }
  } else {
    for (int j = tid; j < d; j += nthr) {
      float v = ldf(yr + j);
      ss += v * v;
    }
  }
  ss = warp_sum(ss);
  if (WIDE) {
    __shared__ float s_ss[8];
    if (tid % 32 == 0) s_ss[tid / 32] = ss;
    __syncthreads();
    float tot = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; i++) tot += s_ss[i];
    ss = tot;
  }
  const float inv = rsqrtf(ss / (float)d + eps);
  /* every load of a chunk before its stores: written as one loop, each store to x may alias the next element's loads
   * for the compiler, so the loads ran one round trip at a time (4.9 µs a row of 2,560 under ncu) */
  constexpr int MAXJ = WIDE ? 16 : 32;
  for (int base = 0; base < d; base += MAXJ * nthr) {
    float xv[MAXJ], yv[MAXJ], wv[MAXJ];
#pragma unroll
    for (int k = 0; k < MAXJ; k++) {
      const int j = base + tid + k * nthr;
      if (j < d) {
        xv[k] = ldf(xr + j);
        yv[k] = ldf(yr + j);
        wv[k] = ld_any(w, wdt, j);
      }
    }
#pragma unroll
    for (int k = 0; k < MAXJ; k++) {
      const int j = base + tid + k * nthr;
      if (j >= d) break;
      const float yn = rnd<T>(yv[k] * inv * (wv[k] + 0.0f));
      /* __fadd_rn: with f32 storage rnd is the identity, and a contracted fma(y·inv, w, x) would skip the rounding
       * of the product that the plain rmsnorm's store makes */
      const float sum = rnd<T>(__fadd_rn(xv[k], yn));
      stf(xr + j, s == 1.0f ? sum : sum * s);
    }
  }
}

void cu_norm_add(struct hb_ctx *ctx, struct hb_tensor *x, const struct hb_tensor *y, const struct hb_tensor *w,
                 float eps, float s, int n) {
  const int64_t d = x->cols;
  if (n <= 0) return;
  if (y->cols != d || w->rows * w->cols != d || x->rows < n || y->rows < n || x->dtype != y->dtype ||
      (x->dtype != HB_F16 && x->dtype != HB_F32) || w->dtype == HB_Q4 || w->dtype == HB_I32 || d > 0x7fffffff) {
    CU_ARG(ctx, "norm_add: x %lldx%lld, y %lldx%lld, w %lldx%lld", (long long)x->rows, (long long)d,
           (long long)y->rows, (long long)y->cols, (long long)w->rows, (long long)w->cols);
    return;
  }
  const bool f16 = x->dtype == HB_F16;
  if (d >= 1024) {
    if (f16)
      cu_launch_pdl(ctx, "norm_add", norm_add_kernel<__half, true>, dim3((unsigned)n), dim3(256), 0, (__half *)x->data,
                    (const __half *)y->data, w->data, (int)w->dtype, (int64_t)n, (int)d, eps, s);
    else
      cu_launch_pdl(ctx, "norm_add", norm_add_kernel<float, true>, dim3((unsigned)n), dim3(256), 0, (float *)x->data,
                    (const float *)y->data, w->data, (int)w->dtype, (int64_t)n, (int)d, eps, s);
  } else {
    const unsigned grid = (unsigned)((n + 7) / 8); /* 8 rows (warps) a block */
    if (f16)
      cu_launch_pdl(ctx, "norm_add", norm_add_kernel<__half, false>, dim3(grid), dim3(256), 0, (__half *)x->data,
                    (const __half *)y->data, w->data, (int)w->dtype, (int64_t)n, (int)d, eps, s);
    else
      cu_launch_pdl(ctx, "norm_add", norm_add_kernel<float, false>, dim3(grid), dim3(256), 0, (float *)x->data,
                    (const float *)y->data, w->data, (int)w->dtype, (int64_t)n, (int)d, eps, s);
  }
  CU_LAUNCHED(ctx, "norm_add");
}
