/* backend/cuda/attention.cu — KV write (with rope, and Qwen3's q/k norms) and attention over the paged KV cache
 * (causal, optional sliding window and logit soft-cap), in four kernels:
 *
 *   attn_decode_smem  decode of up to 8 tokens, f16 q and cache, head_dim 64/128/256: one query head
 *                 per block, its keys copied to shared memory (those not written this step before
 *                 griddepcontrol.wait), one pass of up to C keys writes the output (see its comment).
 *   attn_decode   the other decode shapes (f32, hd 32, wider batches). Grid (token, kv head, split):
 *                 each block takes one token, the (up to 8) query heads sharing one kv head, and one
 *                 slice of the token's keys; 4 warps walk keys, one lane per head_dim/32 dims, online
 *                 softmax per head. Slices write (m, l, acc) partials; the last slice to finish (an
 *                 atomic counter per token and kv head, reset by that block) merges them. The number
 *                 of slices is fixed by shapes and the key count is read on the device, so the launch
 *                 is graph-safe while the context grows.
 *   attn_prefill  many tokens per sequence. Grid (32-query tile, head): the tile's rows that share
 *                 one sequence are processed together over 32-key tiles in shared memory (f32 SIMT
 *                 FMA, online softmax); a tile that spans sequences loops over them. The exact (f32)
 *                 path, head_dim 32 and mixed dtypes.
 *   attn_prefill_mma  the same on tensor cores for f16 q and cache, head_dim 64/128/256: grid (head,
 *                 64-query tile), FlashAttention-2 with mma.sync m16n8k16 (f32 accumulate, P in f16).
 *
 * Positions, sequence ids and block tables are the batch's device copies (batch_upload).
 * Scratch: ctx->attn_part / attn_cnt (cu_scratch). Head dims: 32, 64, 128, 256 (32 * D); the others go to
 * attn_wide.cu's plain kernel.
 */
#include <limits.h>
#include <type_traits>
#include <stdlib.h>
#include <math.h>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/g4_post.cuh"
#include "backend/cuda/gemm_q4.cuh"
#include "backend/cuda/ptx.cuh"

/* ---- kv_write ------------------------------------------------------------------------------------ */

template <typename T, typename KT>
__global__ void kv_write_kernel(KT *kc, KT *vc, const T *k, const T *v, const int32_t *pos, const int32_t *seq,
                                const int32_t *bt, int max_blocks, int bs, int n_tokens, int64_t w) {
  pdl_trigger();
  int64_t total = (int64_t)n_tokens * w;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    int t = (int)(i / w);
    int64_t e = i % w;
    int p = pos[t];
    int64_t slot = (int64_t)bt[(int64_t)seq[t] * max_blocks + p / bs] * bs + p % bs;
    stf(kc + slot * w + e, ldf(k + i));
    stf(vc + slot * w + e, ldf(v + i));
  }
}

void cu_kv_write(struct hb_ctx *ctx, struct hb_kv_layer *kv, const struct hb_tensor *k,
                 const struct hb_tensor *v, const struct hb_batch *b) {
  int64_t w = (int64_t)kv->n_kv_heads * kv->head_dim;
  if (b->n_tokens <= 0) return;
  if (!b->d_pos.data || k->cols != w || v->cols != w || k->dtype != v->dtype || kv->k.dtype != kv->v.dtype) {
    CU_ARG(ctx, "kv_write: k/v cols %lld/%lld, cache width %lld, or batch not uploaded", (long long)k->cols,
           (long long)v->cols, (long long)w);
    return;
  }
  const unsigned grid = cu_ew_grid(ctx, (int64_t)b->n_tokens * w);
  const int32_t *pos = (const int32_t *)b->d_pos.data, *seq = (const int32_t *)b->d_seq.data,
                *bt = (const int32_t *)b->d_block_table.data;
#define KVW(T, KT)                                                                                             \
  kv_write_kernel<T, KT><<<grid, 256, 0, ctx->stream>>>((KT *)kv->k.data, (KT *)kv->v.data, (const T *)k->data, \
                                                        (const T *)v->data, pos, seq, bt, b->max_blocks,         \
                                                        b->block_size, b->n_tokens, w)
  if (k->dtype == HB_F16 && kv->k.dtype == HB_F16) KVW(__half, __half);
  else if (k->dtype == HB_F16 && kv->k.dtype == HB_F32) KVW(__half, float);
  else if (k->dtype == HB_F32 && kv->k.dtype == HB_F16) KVW(float, __half);
  else if (k->dtype == HB_F32 && kv->k.dtype == HB_F32) KVW(float, float);
  else { CU_ARG(ctx, "kv_write: dtypes"); return; }
#undef KVW
  CU_LAUNCHED(ctx, "kv_write");
}

/* ---- rope + kv_write in one launch ---------------------------------------------------------------- */

/* One block per token: the token's n_rot/2 rotation angles pos · rinv[i] go through sincosf once, into shared memory
 * (every q and k head of the token turns by the same angles), then the block rotates q in place and writes k (rotated
 * on the fly, read-only) and v into the cache. The inverse frequencies come from the host (cu_rope_rinv: rope_pow's
 * formula, the decode GEMV's table). Until session 28 every element computed its own double pow and sincosf behind a
 * 64-bit division of a flat index: 27 % of an embedding pass's GPU time (W6 under ncu: 349 µs a launch at 7,870
 * tokens, more than the attention). */
#define RKV_MAX_HALF 256
struct rkv_rinv { float v[RKV_MAX_HALF]; };

/* the prologue of the rope kernels of one block per token (rope_kv_kernel, rope_kv_norm_kernel, rope_kv_split_kernel):
 * token t's half rotation angles pos · rinv[i] through sincosf into s_sn / s_cs, and the cache slot of its position,
 * returned. Run before griddepcontrol.wait: positions and block tables are the batch's upload, never written by the
 * kernel before (cuda_backend.cu). The caller syncs the block before reading the angles. */
__device__ __forceinline__ int64_t rkv_prologue(float *s_sn, float *s_cs, const rkv_rinv &rinv, int half, int t,
                                                const int32_t *pos, const int32_t *seq, const int32_t *bt,
                                                int max_blocks, int bs) {
  const int p = pos[t];
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    float sn, cs;
    sincosf((float)p * rinv.v[i], &sn, &cs);
    s_sn[i] = sn;
    s_cs[i] = cs;
  }
  return (int64_t)bt[(int64_t)seq[t] * max_blocks + p / bs] * bs + p % bs;
}

template <typename T, typename KT>
__global__ void __launch_bounds__(256) rope_kv_kernel(T *q, const T *k, const T *v, KT *kc, KT *vc, const int32_t *pos,
                                                      const int32_t *seq, const int32_t *bt, int max_blocks, int bs,
                                                      int n_heads, int n_kv, int hd, int n_rot,
                                                      const __grid_constant__ rkv_rinv rinv) {
  __shared__ float s_sn[RKV_MAX_HALF], s_cs[RKV_MAX_HALF];
  pdl_trigger();
  const int t = blockIdx.x, half = n_rot / 2;
  const int64_t w = (int64_t)n_kv * hd, slot = rkv_prologue(s_sn, s_cs, rinv, half, t, pos, seq, bt, max_blocks, bs);
  __syncthreads();
  pdl_wait();
  T *qt = q + (int64_t)t * n_heads * hd;
  for (int j = threadIdx.x; j < n_heads * half; j += blockDim.x) {
    const int h = j / half, i = j - h * half;
    T *x = qt + (int64_t)h * hd;
    const float sn = s_sn[i], cs = s_cs[i], a = ldf(x + i), bb = ldf(x + i + half);
    stf(x + i, a * cs - bb * sn);
    stf(x + i + half, bb * cs + a * sn);
  }
  const T *kt = k + (int64_t)t * w, *vt = v + (int64_t)t * w;
  for (int j = threadIdx.x; j < w; j += blockDim.x) {
    const int d = j % hd;
    const T *x = kt + (j - d);
    float val = ldf(x + d);
    if (d < n_rot) {
      const int i = d < half ? d : d - half;
      const float sn = s_sn[i], cs = s_cs[i], a = ldf(x + i), bb = ldf(x + i + half);
      val = d < half ? a * cs - bb * sn : bb * cs + a * sn;
    }
    stf(kc + slot * w + j, val);
    stf(vc + slot * w + j, ldf(vt + j));
  }
}

/* The same with Qwen3's per-head q/k RMSNorm folded in (the two rmsnorm launches between the QKV projection and this
 * kernel read and wrote all of q and k once more: ~3 % of an embedding pass). Each warp takes whole heads in turn, q
 * heads then k heads, lane l holding dims l + 32 j (j < NJ = hd / 32), which is rmsnorm_kernel's assignment: the
 * same lane-strided f32 sum of squares, warp_sum, rsqrtf(ss / hd + eps) and x · inv · (w + 0), rounded to T where
 * rmsnorm's store rounds it (rnd); so the result is bit-identical to rmsnorm(q) + rmsnorm(k) + rope_kv_kernel
 * (test_cuda_ops checks the bits). With n_rot = hd the pair (i, i + hd/2) of a rotation sits in one lane (j and
 * j + NJ/2), so the rotation is rope_kv_kernel's expressions on registers. NJ is a template parameter so that the
 * pair's index is a constant and x stays in registers. The norm weights are read before griddepcontrol.wait. */
template <typename T, typename KT, int NJ>
__global__ void __launch_bounds__(256) rope_kv_norm_kernel(T *q, const T *k, const T *v, KT *kc, KT *vc,
                                                           const int32_t *pos, const int32_t *seq, const int32_t *bt,
                                                           int max_blocks, int bs, int n_heads, int n_kv, int hd,
                                                           const void *qw, int qwdt, const void *kw, int kwdt,
                                                           float eps, const __grid_constant__ rkv_rinv rinv) {
  constexpr int HD = 32 * NJ, HALF = HD / 2, NH = NJ / 2;
  __shared__ float s_sn[HALF], s_cs[HALF];
  pdl_trigger();
  const int t = blockIdx.x, lane = threadIdx.x % 32, warp = threadIdx.x / 32, n_warps = blockDim.x / 32;
  const int64_t w = (int64_t)n_kv * HD, slot = rkv_prologue(s_sn, s_cs, rinv, HALF, t, pos, seq, bt, max_blocks, bs);
  float wq[NJ], wk[NJ]; /* (w + w_offset) as rmsnorm_kernel forms it, with the offset 0 that blocks.c passes */
#pragma unroll
  for (int j = 0; j < NJ; j++) {
    wq[j] = ld_any(qw, qwdt, lane + 32 * j) + 0.0f;
    wk[j] = ld_any(kw, kwdt, lane + 32 * j) + 0.0f;
  }
  __syncthreads();
  pdl_wait();
  /* h is the same for every lane of a warp: the loop and its branches are warp-uniform (warp_sum needs all 32) */
  for (int h = warp; h < n_heads + n_kv; h += n_warps) {
    const bool isq = h < n_heads;
    const T *src = isq ? q + ((int64_t)t * n_heads + h) * HD : k + ((int64_t)t * n_kv + (h - n_heads)) * HD;
    float x[NJ], ss = 0.0f;
#pragma unroll
    for (int j = 0; j < NJ; j++) {
      x[j] = ldf(src + lane + 32 * j);
      ss += x[j] * x[j];
    }
    ss = warp_sum(ss);
    const float inv = rsqrtf(ss / (float)hd + eps); /* hd (= HD) from the arguments: the same division as rmsnorm's */
#pragma unroll
    for (int j = 0; j < NJ; j++) x[j] = rnd<T>(x[j] * inv * (isq ? wq[j] : wk[j]));
#pragma unroll
    for (int j = 0; j < NH; j++) {
      const int i = lane + 32 * j;
      const float sn = s_sn[i], cs = s_cs[i], a = x[j], bb = x[j + NH];
      x[j] = a * cs - bb * sn;
      x[j + NH] = bb * cs + a * sn;
    }
    if (isq) {
      T *o = q + ((int64_t)t * n_heads + h) * HD;
#pragma unroll
      for (int j = 0; j < NJ; j++) stf(o + lane + 32 * j, x[j]);
    } else {
      KT *o = kc + slot * w + (int64_t)(h - n_heads) * HD;
#pragma unroll
      for (int j = 0; j < NJ; j++) stf(o + lane + 32 * j, x[j]);
    }
  }
  const T *vt = v + (int64_t)t * w;
  for (int j = threadIdx.x; j < w; j += blockDim.x) stf(vc + slot * w + j, ldf(vt + j));
}

int cu_rope_kv_write(struct hb_ctx *ctx, struct hb_tensor *q, struct hb_tensor *k, const struct hb_tensor *v,
                     struct hb_kv_layer *kv, const struct hb_batch *b, int n_heads, int n_rot, float theta,
                     const struct hb_tensor *q_norm, const struct hb_tensor *k_norm, float eps) {
  const int n_kv = kv->n_kv_heads, hd = kv->head_dim, nt = b->n_tokens;
  const bool norm = q_norm || k_norm;
  if (norm) { /* covered: both norms of head_dim entries in a float type, a whole-head rotation, hd 64 / 128 / 256 */
    const bool wok = q_norm && k_norm && q_norm->rows * q_norm->cols == hd && k_norm->rows * k_norm->cols == hd &&
                     (q_norm->dtype == HB_F32 || q_norm->dtype == HB_F16 || q_norm->dtype == HB_BF16) &&
                     (k_norm->dtype == HB_F32 || k_norm->dtype == HB_F16 || k_norm->dtype == HB_BF16);
    if (!wok || n_rot != hd || (hd != 64 && hd != 128 && hd != 256) ||
        (q->dtype != HB_F16 && q->dtype != HB_F32) || (kv->k.dtype != HB_F16 && kv->k.dtype != HB_F32))
      return 1;
  }
  if (nt <= 0) return 0;
  if (!b->d_pos.data || q->cols != (int64_t)n_heads * hd || k->cols != (int64_t)n_kv * hd || v->cols != k->cols ||
      q->dtype != k->dtype || k->dtype != v->dtype || kv->k.dtype != kv->v.dtype || n_rot > hd || n_rot % 2 ||
      n_rot / 2 > RKV_MAX_HALF) {
    CU_ARG(ctx, "rope_kv_write: shapes/dtypes or batch not uploaded");
    return 0;
  }
  rkv_rinv rinv;
  cu_rope_rinv(rinv.v, n_rot, theta);
  const int32_t *pos = (const int32_t *)b->d_pos.data, *seq = (const int32_t *)b->d_seq.data,
                *bt = (const int32_t *)b->d_block_table.data;
  if (norm) {
#define RKN(T, KT, NJ)                                                                                              \
  cu_launch_pdl(ctx, "rope_kv_write", rope_kv_norm_kernel<T, KT, NJ>, dim3((unsigned)nt), dim3(256), 0,             \
                (T *)q->data, (const T *)k->data, (const T *)v->data, (KT *)kv->k.data, (KT *)kv->v.data, pos, seq, \
                bt, b->max_blocks, b->block_size, n_heads, n_kv, hd, q_norm->data, (int)q_norm->dtype,              \
                k_norm->data, (int)k_norm->dtype, eps, rinv)
#define RKN_HD(T, KT)                   \
  do {                                  \
    if (hd == 64) RKN(T, KT, 2);        \
    else if (hd == 128) RKN(T, KT, 4);  \
    else RKN(T, KT, 8);                 \
  } while (0)
    if (q->dtype == HB_F16 && kv->k.dtype == HB_F16) RKN_HD(__half, __half);
    else if (q->dtype == HB_F32 && kv->k.dtype == HB_F32) RKN_HD(float, float);
    else if (q->dtype == HB_F16 && kv->k.dtype == HB_F32) RKN_HD(__half, float);
    else RKN_HD(float, __half);
#undef RKN_HD
#undef RKN
    CU_LAUNCHED(ctx, "rope_kv_write");
    return 0;
  }
#define RKV(T, KT)                                                                                                  \
  cu_launch_pdl(ctx, "rope_kv_write", rope_kv_kernel<T, KT>, dim3((unsigned)nt), dim3(256), 0, (T *)q->data,       \
                (const T *)k->data, (const T *)v->data, (KT *)kv->k.data, (KT *)kv->v.data, pos, seq, bt,            \
                b->max_blocks, b->block_size, n_heads, n_kv, hd, n_rot, rinv)
  if (q->dtype == HB_F16 && kv->k.dtype == HB_F16) RKV(__half, __half);
  else if (q->dtype == HB_F32 && kv->k.dtype == HB_F32) RKV(float, float);
  else if (q->dtype == HB_F16 && kv->k.dtype == HB_F32) RKV(__half, float);
  else RKV(float, __half);
#undef RKV
  CU_LAUNCHED(ctx, "rope_kv_write");
  return 0;
}

/* rope_kv_kernel reading the QKV GEMM's split-K slices instead of its outputs (a decode step of 9+ sequences, where
 * that GEMM splits K): each value is what gemm_finish would store (the column's slices summed in order, + bias, + 0,
 * rounded to f16), then rope_kv_kernel's expressions on it (n_rot = hd), so the q and the cache rows are the bits of
 * norm_matmul + rope_kv_write (test_cuda_ops checks them) with one launch and the q/k/v rows' write and re-read
 * fewer: x32 +1 % on the H100 (bench/RESULTS.md "Session 36"). Grid (tokens, jobs / 256): one block per token lost
 * 5 % at x32, a chain of slice loads on 32 blocks; q rotated into the GEMM's q output (a.out[0]). */
template <typename KT>
__global__ void __launch_bounds__(256) rope_kv_split_kernel(const __grid_constant__ gemm_args a, KT *kc, KT *vc,
                                                            const int32_t *pos, const int32_t *seq, const int32_t *bt,
                                                            int max_blocks, int bs, int n_heads, int n_kv, int hd,
                                                            const __grid_constant__ rkv_rinv rinv) {
  __shared__ float s_sn[RKV_MAX_HALF], s_cs[RKV_MAX_HALF];
  pdl_trigger();
  const int t = blockIdx.x, half = hd / 2;
  const int64_t w = (int64_t)n_kv * hd, slot = rkv_prologue(s_sn, s_cs, rinv, half, t, pos, seq, bt, max_blocks, bs);
  __syncthreads();
  pdl_wait();
  /* one job a thread: a q pair (i, i + half) of a head, or a k pair's element with its v element; the slices of the
   * job's 2 or 3 columns summed together (independent loads in flight, not one chain per value) */
  const int j = blockIdx.y * blockDim.x + threadIdx.x, nq = n_heads * half;
  if (j >= nq + w) return;
  const int64_t total = (int64_t)a.M * a.n_total;
  const float *pr = a.part + (int64_t)t * a.n_total;
  const bool isq = j < nq;
  int ca, cb, cv = 0, i, d = 0;
  if (isq) {
    const int h = j / half;
    i = j - h * half;
    ca = a.col0[0] + h * hd + i;
    cb = ca + half;
  } else {
    const int jk = j - nq;
    d = jk % hd;
    i = d < half ? d : d - half;
    ca = a.col0[1] + (jk - d) + i;
    cb = ca + half;
    cv = a.col0[2] + jk;
  }
  float va = 0.0f, vb = 0.0f, vv = 0.0f;
#pragma unroll 4
  for (int z = 0; z < a.n_split; z++) {
    const float *pz = pr + (int64_t)z * total;
    va += pz[ca];
    vb += pz[cb];
    if (!isq) vv += pz[cv];
  }
  /* what gemm_finish stores: + bias, + 0 (no add), rounded to f16 */
  auto fin = [&](float v, int c) -> float {
    const int wi = gemm_weight(a, c);
    const float *bias = a.bias[wi];
    return __half2float(__float2half_rn(v + (bias ? bias[c - a.col0[wi]] : 0.0f) + 0.0f));
  };
  const float sn = s_sn[i], cs = s_cs[i], av = fin(va, ca), bb = fin(vb, cb);
  if (isq) {
    __half *qt = (__half *)a.out[0] + (int64_t)t * a.ldo[0] + (ca - a.col0[0]);
    qt[0] = __float2half_rn(av * cs - bb * sn);
    qt[half] = __float2half_rn(bb * cs + av * sn);
  } else {
    const int jk = j - nq;
    stf(kc + slot * w + jk, d < half ? av * cs - bb * sn : bb * cs + av * sn);
    stf(vc + slot * w + jk, fin(vv, cv));
  }
}

int cu_qkv_rope_split(struct hb_ctx *ctx, const struct hb_tensor *xn, const struct hb_tensor *const *ws,
                      const struct hb_tensor *const *biases, struct hb_tensor *q, struct hb_kv_layer *kv,
                      const struct hb_batch *b, int n_heads, float theta, int n, int dry) {
  const int hd = kv->head_dim, n_kv = kv->n_kv_heads;
  if (ctx->row_invariant || n < 1 || !b->d_pos.data || n != b->n_tokens || hd % 2 || hd / 2 > RKV_MAX_HALF ||
      q->dtype != HB_F16 || (kv->k.dtype != HB_F16 && kv->k.dtype != HB_F32) || kv->v.dtype != kv->k.dtype ||
      ws[0]->rows != (int64_t)n_heads * hd || ws[1]->rows != (int64_t)n_kv * hd || ws[2]->rows != ws[1]->rows ||
      kv->k.cols != ws[1]->rows || q->cols != ws[0]->rows)
    return 1;
  /* k1, v1 only fix the plan's dtype/shape checks: a split GEMM writes its slices, the kernel the cache */
  struct hb_tensor k1 = *q, v1 = *q;
  k1.cols = v1.cols = ws[1]->rows;
  struct hb_tensor *outs[3] = {q, &k1, &v1};
  struct gemm_plan pl;
  if (cu_gemm_q4_plan(ctx, xn, 3, outs, ws, biases, n, 0, &pl) || pl.S < 2 || pl.odt != HB_F16) return 1;
  if (dry) return 0;
  if (cu_gemm_q4_run(ctx, &pl, 0)) return 0;
  rkv_rinv rinv;
  cu_rope_rinv(rinv.v, hd, theta);
  const int32_t *pos = (const int32_t *)b->d_pos.data, *seq = (const int32_t *)b->d_seq.data,
                *bt = (const int32_t *)b->d_block_table.data;
  const dim3 grid((unsigned)n, (unsigned)((n_heads * hd / 2 + n_kv * hd + 255) / 256));
  if (kv->k.dtype == HB_F16)
    cu_launch_pdl(ctx, "rope_kv_split", rope_kv_split_kernel<__half>, grid, dim3(256), 0, pl.a,
                  (__half *)kv->k.data, (__half *)kv->v.data, pos, seq, bt, b->max_blocks, b->block_size, n_heads, n_kv,
                  hd, rinv);
  else
    cu_launch_pdl(ctx, "rope_kv_split", rope_kv_split_kernel<float>, grid, dim3(256), 0, pl.a,
                  (float *)kv->k.data, (float *)kv->v.data, pos, seq, bt, b->max_blocks, b->block_size, n_heads, n_kv,
                  hd, rinv);
  CU_LAUNCHED(ctx, "rope_kv_split");
  return 0;
}

template <int D>
__device__ __forceinline__ void load_row(float f[D], const float *p) {
#pragma unroll
  for (int d = 0; d < D; d++) f[d] = p[d];
}
template <int D>
__device__ __forceinline__ void load_row(float f[D], const __half *p) {
  if (D % 2 == 0) {
#pragma unroll
    for (int d = 0; d < D; d += 2) {
      float2 v = __half22float2(*(const __half2 *)(p + d));
      f[d] = v.x;
      f[d + 1] = v.y;
    }
  } else {
#pragma unroll
    for (int d = 0; d < D; d++) f[d] = __half2float(p[d]);
  }
}
/* 8 consecutive elements (16-byte aligned for f16, 32 for f32) */
__device__ __forceinline__ void load8(float f[8], const __half *p) {
  uint4 u = *(const uint4 *)p;
  const __half2 *h = (const __half2 *)&u;
#pragma unroll
  for (int j = 0; j < 4; j++) {
    float2 v = __half22float2(h[j]);
    f[2 * j] = v.x;
    f[2 * j + 1] = v.y;
  }
}
__device__ __forceinline__ void load8(float f[8], const float *p) {
  float4 a = *(const float4 *)p, b = *(const float4 *)(p + 4);
  f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w; f[4] = b.x; f[5] = b.y; f[6] = b.z; f[7] = b.w;
}

__device__ __forceinline__ float softcap_f(float s, float cap) { return cap > 0.0f ? cap * tanhf(s / cap) : s; }

/* ---- decode: split over the keys --------------------------------------------------------------------- */

/* a split's partials are written: counts it in at c (one counter per token and head group) and
 * returns true in every thread of the block that finished last of the ns splits, which then merges
 * and resets c; the fences order the partials before the count and the count before their reads */
__device__ __forceinline__ bool split_is_last(unsigned *c, int ns, int *flag) {
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) *flag = atomicAdd(c, 1u) == (unsigned)(ns - 1);
  __syncthreads();
  if (!*flag) return false;
  __threadfence();
  return true;
}

#define AD_WARPS 4
#define AD_G 4   /* query heads per block (a GQA group, or a slice of one) */
#define AD_DL 16 /* head dims per lane: HD / 16 lanes share one key */

/* Latency design (round 4): HD/16 lanes per key, each lane owning 16 dims (two 16-byte loads of K and
 * of V), so a warp has 32·16/HD keys in flight at once and each lane group runs its own online softmax
 * (no warp-wide reductions in the key loop: the only shuffles are the log2(HD/16) of the dot product).
 * Two keys per group per step, all four K/V loads issued before any math. The keys are split over
 * blocks (one key per group per block at least), so one sequence at short context still spreads
 * over tens of SMs; the group states merge in f32 (shuffles in the warp, shared memory over the
 * warps, the last block over the splits). The grid depends on the shapes only (graph-safe). */
__device__ __forceinline__ void load16(float f[16], const __half *p) {
  load8(f, p);
  load8(f + 8, p + 8);
}
__device__ __forceinline__ void load16(float f[16], const float *p) {
  load8(f, p);
  load8(f + 8, p + 8);
}

/* Gemma 4's post-projection step folded into the decode attention (POST instances of attn_decode_kernel and
 * attn_decode_smem_kernel; cu_g4_post_attention): q arrives raw, and warps that would have waited for g4_qkv_post's
 * launch run its arithmetic (g4_post.cuh) on the block's query heads, and in the split holding the new key of a layer
 * that writes the cache, on its k and v, writing the cache row (every block of that split writes the same bits).
 * One token a sequence (the decode step), so that the only new key a block sees is its own token's. */
struct ads_post {
  const __half *k, *v;   /* the raw k and v projections [n × n_kv·HD] (with kc) */
  __half *kc, *vc;       /* the cache the layer writes at its new keys (NULL: a KV-shared layer) */
  const void *qw, *kw;   /* q_norm, k_norm */
  int qwdt, kwdt, n_pairs;
  float eps, theta, factor;
};
/* the POST instances' inverse frequencies: the host's table (g4_rinv_make, as g4_qkv_post's), a kernel argument, so
 * that no double pow runs on the device (before the wait it still delays a block that starts only once the GEMV
 * before it leaves the SM); the other instances get an empty one */
struct ads_nofreq {};
template <bool POST>
using ads_freq = typename std::conditional<POST, g4_rinv, ads_nofreq>::type;

template <typename T, typename KT, int HD, bool POST = false>
__global__ __launch_bounds__(128) void attn_decode_kernel(T *out, const T *q, const KT *kc, const KT *vc,
                                                          const int32_t *pos, const int32_t *seq, const int32_t *bt,
                                                          int max_blocks, int bs, int n_heads, int n_kv, int G, int HG,
                                                          float scale, int window, float softcap, float *part,
                                                          unsigned *cnt, int NS, const ads_post pp,
                                                          const __grid_constant__ ads_freq<POST> rinv) {
  pdl_trigger();
  constexpr int LPK = HD / AD_DL;      /* lanes per key */
  constexpr int KG = 32 / LPK;         /* key groups per warp */
  constexpr int KPB = AD_WARPS * KG;   /* keys per block step */
  __shared__ __align__(16) float q_s[AD_G][HD];
  __shared__ float sm_m[AD_WARPS][AD_G], sm_l[AD_WARPS][AD_G];
  __shared__ float sm_acc[AD_WARPS][AD_G][HD];
  __shared__ float sw[AD_G][32];
  __shared__ int sm_last;
  const int t = blockIdx.x, kh = blockIdx.y / HG, hg = blockIdx.y % HG, s = blockIdx.z;
  const int h0 = kh * G + hg * AD_G, ng = min(AD_G, G - hg * AD_G);
  const int p = pos[t], sq = seq[t];
  const int lo = window > 0 ? max(0, p - window + 1) : 0, len = p - lo + 1;
  /* keys a split takes at least: one block step, and at head dim 512 two loop steps (16 keys), whose fixed costs (the
   * q rows, a 2 KB partial a head, the merge's reads) are 4x those at 128 while a key step costs one round trip: at
   * ~100 keys, 25 splits of 4 keys left the last block ~28 dependent round trips of partials to merge (bench/NOTES.md,
   * session 45) */
  constexpr int KMIN = HD >= 512 ? 4 * KPB : KPB;
  const int ns = min(NS, (len + KMIN - 1) / KMIN);
  if (s >= ns) return;
  const int chunk = (len + ns - 1) / ns, ks = lo + s * chunk, ke = min(p + 1, ks + chunk);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, kg = lane / LPK, sub = lane % LPK;
  const int64_t kvw = (int64_t)n_kv * HD;
  const int doff = kh * HD + sub * AD_DL;
  const int32_t *btr = bt + (int64_t)sq * max_blocks;
  /* cache slots of a step's two keys (a key past the end reads the block's first key instead) */
  auto slots = [&](int kb, int64_t &s0, int64_t &s1) {
    const int k0 = kb + kg, k1 = k0 + KPB;
    const int64_t sb = (int64_t)btr[kb / bs] * bs + kb % bs;
    s0 = k0 < ke ? (int64_t)btr[k0 / bs] * bs + k0 % bs : sb;
    s1 = k1 < ke ? (int64_t)btr[k1 / bs] * bs + k1 % bs : sb;
  };
  /* positions and block tables come from batch_upload, not from the kernel before: the first step's
   * slots are looked up before griddepcontrol.wait (launched with programmatic stream
   * serialization); q and the cache row of the new token are read after it */
  int kb = ks + warp * KG;
  int64_t ns0 = 0, ns1 = 0;
  if (kb < ke) slots(kb, ns0, ns1);
  /* POST: warp g turns query head h0 + g; in the split holding the new key (the last) of a layer that writes it,
   * warps 0 and 1 then turn its k and v and write the cache row, which the key loop reads after the barrier below.
   * The norm weights, sin and cos (the same for q and k) and the key's slot before the wait. */
  constexpr int NJ = HD / 32;
  const bool pkv = POST && pp.kc && ks <= p && p < ke && warp < 2; /* (not always the last split: chunks round up) */
  float pwq[QP_MAXJ], pwk[QP_MAXJ], psn[QP_MAXJ / 2], pcs[QP_MAXJ / 2], pdummy[QP_MAXJ / 2];
  int64_t pslot = 0;
  if constexpr (POST) {
    g4_post_pre(pwq, psn, pcs, pp.qw, pp.qwdt, true, p,
                [&](int i) { return rinv.v[i]; }, NJ,
                pp.n_pairs, lane);
    if (pkv) {
      g4_post_pre(pwk, pdummy, pdummy, warp == 0 ? pp.kw : NULL, pp.kwdt, false, p, [](int) { return 0.0f; }, NJ, 0,
                  lane);
      pslot = (int64_t)btr[p / bs] * bs + p % bs;
    }
  }
  pdl_wait();

  if constexpr (POST) {
    float px[QP_MAXJ], pk[QP_MAXJ];
    const __half *qsrc = (const __half *)q + ((int64_t)t * n_heads + h0 + warp) * HD;
    const __half *ksrc = (warp == 0 ? pp.k : pp.v) + ((int64_t)t * n_kv + kh) * HD;
#pragma unroll
    for (int j = 0; j < NJ; j++) { /* both rows' loads before either's arithmetic */
      px[j] = warp < ng ? __half2float(qsrc[lane + 32 * j]) : 0.0f;
      pk[j] = pkv ? __half2float(ksrc[lane + 32 * j]) : 0.0f;
    }
    static_assert(AD_WARPS == AD_G, "attn_decode POST: a warp per query head of the block");
    if (warp < ng) g4_post_apply<__half>(px, pwq, psn, pcs, NJ, HD, pp.n_pairs, pp.eps, true, lane);
#pragma unroll
    for (int j = 0; j < NJ; j++) q_s[warp][lane + 32 * j] = px[j] * scale; /* (a row past ng: zeros, as the plain) */
    if (pkv) {
      g4_post_apply<__half>(pk, pwk, psn, pcs, NJ, HD, pp.n_pairs, pp.eps, warp == 0, lane);
      __half *c = (warp == 0 ? pp.kc : pp.vc) + pslot * kvw + (int64_t)kh * HD;
#pragma unroll
      for (int j = 0; j < NJ; j++) c[lane + 32 * j] = __float2half_rn(pk[j]);
    }
  } else { /* q: every load issued before the first store (a strided loop waited a round trip per element: 16 at HD 512) */
    constexpr int QN = AD_G * HD / 128; /* elements a thread (the launch is 128 threads) */
    static_assert(AD_G * HD % 128 == 0 && QN > 0, "attn_decode's q loads: whole rounds of its 128 threads");
    float qv[QN];
#pragma unroll
    for (int j = 0; j < QN; j++) {
      const int i = threadIdx.x + 128 * j, g = i / HD, d = i % HD;
      qv[j] = g < ng ? ldf(q + ((int64_t)t * n_heads + h0 + g) * HD + d) * scale : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < QN; j++) {
      const int i = threadIdx.x + 128 * j;
      q_s[i / HD][i % HD] = qv[j];
    }
  }
  __syncthreads();

  float m[AD_G], l[AD_G], acc[AD_G][AD_DL];
#pragma unroll
  for (int g = 0; g < AD_G; g++) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int d = 0; d < AD_DL; d++) acc[g][d] = 0.0f;
  }
  /* the loop is warp-uniform (full-mask shuffles inside): a group past the end masks its keys and
   * reads the block's first valid key instead; the next step's slots are looked up before this
   * step's math */
  for (; kb < ke; kb += 2 * KPB) {
    const int k0 = kb + kg, k1 = k0 + KPB;
    const bool v0 = k0 < ke, v1 = k1 < ke;
    const int64_t s0 = ns0, s1 = ns1;
    float kf0[AD_DL], kf1[AD_DL], vf0[AD_DL], vf1[AD_DL];
    load16(kf0, kc + s0 * kvw + doff);
    load16(kf1, kc + s1 * kvw + doff);
    load16(vf0, vc + s0 * kvw + doff);
    load16(vf1, vc + s1 * kvw + doff);
    if (kb + 2 * KPB < ke) slots(kb + 2 * KPB, ns0, ns1);
    float sc0[AD_G], sc1[AD_G];
#pragma unroll
    for (int g = 0; g < AD_G; g++) {
      const float4 *qv = (const float4 *)&q_s[g][sub * AD_DL];
      float a0 = 0.0f, a1 = 0.0f, b0 = 0.0f, b1 = 0.0f;
#pragma unroll
      for (int j = 0; j < AD_DL / 4; j++) {
        float4 qq = qv[j];
        a0 = fmaf(qq.x, kf0[4 * j], fmaf(qq.y, kf0[4 * j + 1], a0));
        b0 = fmaf(qq.z, kf0[4 * j + 2], fmaf(qq.w, kf0[4 * j + 3], b0));
        a1 = fmaf(qq.x, kf1[4 * j], fmaf(qq.y, kf1[4 * j + 1], a1));
        b1 = fmaf(qq.z, kf1[4 * j + 2], fmaf(qq.w, kf1[4 * j + 3], b1));
      }
      sc0[g] = a0 + b0;
      sc1[g] = a1 + b1;
    }
#pragma unroll
    for (int o = 1; o < LPK; o <<= 1) {
#pragma unroll
      for (int g = 0; g < AD_G; g++) {
        sc0[g] += __shfl_xor_sync(0xffffffffu, sc0[g], o);
        sc1[g] += __shfl_xor_sync(0xffffffffu, sc1[g], o);
      }
    }
#pragma unroll
    for (int g = 0; g < AD_G; g++) {
      const float x0 = v0 ? softcap_f(sc0[g], softcap) : -INFINITY, x1 = v1 ? softcap_f(sc1[g], softcap) : -INFINITY;
      const float mn = fmaxf(m[g], fmaxf(x0, x1)); /* -inf only while the group has seen no key */
      const float al = m[g] > -INFINITY ? expf(m[g] - mn) : 0.0f, p0 = v0 ? expf(x0 - mn) : 0.0f,
                  p1 = v1 ? expf(x1 - mn) : 0.0f;
      l[g] = fmaf(l[g], al, p0 + p1);
      m[g] = mn;
#pragma unroll
      for (int d = 0; d < AD_DL; d++) acc[g][d] = fmaf(p1, vf1[d], fmaf(p0, vf0[d], acc[g][d] * al));
    }
  }
  /* merge the key groups of the warp (lanes with the same sub, xor over the group bits) */
#pragma unroll
  for (int o = LPK; o < 32; o <<= 1) {
#pragma unroll
    for (int g = 0; g < AD_G; g++) {
      const float mo = __shfl_xor_sync(0xffffffffu, m[g], o), lo_ = __shfl_xor_sync(0xffffffffu, l[g], o);
      const float M = fmaxf(m[g], mo);
      const float fs = m[g] > -INFINITY ? expf(m[g] - M) : 0.0f, fo = mo > -INFINITY ? expf(mo - M) : 0.0f;
      l[g] = l[g] * fs + lo_ * fo;
      m[g] = M;
#pragma unroll
      for (int d = 0; d < AD_DL; d++) acc[g][d] = acc[g][d] * fs + __shfl_xor_sync(0xffffffffu, acc[g][d], o) * fo;
    }
  }
  if (kg == 0) {
#pragma unroll
    for (int g = 0; g < AD_G; g++) {
      if (sub == 0) { sm_m[warp][g] = m[g]; sm_l[warp][g] = l[g]; }
#pragma unroll
      for (int d = 0; d < AD_DL; d++) sm_acc[warp][g][sub * AD_DL + d] = acc[g][d];
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < ng * HD; i += blockDim.x) {
    int g = i / HD, d = i % HD;
    float M = -INFINITY;
    for (int w = 0; w < AD_WARPS; w++) M = fmaxf(M, sm_m[w][g]);
    float L = 0.0f, A = 0.0f;
    if (M > -INFINITY)
      for (int w = 0; w < AD_WARPS; w++) {
        float f = sm_m[w][g] > -INFINITY ? expf(sm_m[w][g] - M) : 0.0f;
        L += sm_l[w][g] * f;
        A += sm_acc[w][g][d] * f;
      }
    int64_t row = (int64_t)t * n_heads + h0 + g;
    if (ns == 1) {
      stf(out + row * HD + d, A / L); /* L > 0: at least one key; NaN inputs stay NaN */
    } else {
      float *pp = part + (row * NS + s) * (HD + 2);
      pp[d] = A;
      if (d == 0) { pp[HD] = M; pp[HD + 1] = L; }
    }
  }
  if (ns == 1) return;
  unsigned *c = cnt + (int64_t)t * n_kv * HG + blockIdx.y;
  if (!split_is_last(c, ns, &sm_last)) return;
  /* the last block merges: one warp per head computes every split's weight exp(m_j - M) / L with
   * its lanes in parallel (NS <= 32), then each thread sums its dims over the splits with all loads
   * of one split independent (no chain of dependent L2 loads per output element) */
  for (int g = warp; g < AD_G; g += AD_WARPS) {
    float mj = -INFINITY, lj = 0.0f;
    if (g < ng && lane < ns) {
      const float *pp = part + (((int64_t)t * n_heads + h0 + g) * NS + lane) * (HD + 2);
      mj = __ldcg(pp + HD);
      lj = __ldcg(pp + HD + 1);
    }
    const float M = warp_max(mj);
    const float f = mj > -INFINITY ? expf(mj - M) : 0.0f;
    const float L = warp_sum(lj * f);
    sw[g][lane] = L != 0.0f ? f / L : 0.0f; /* a NaN L stays NaN */
  }
  __syncthreads();
  /* every dim of a thread (DT of them) in one pass over the splits, so that the loads of four splits for all of
   * them are in flight at once (a loop over the dims outside that one was DT chains of round trips); each sum
   * still runs over the splits in order, so the bits are the same. At head dim 512 (DT = 4) one dim a pass
   * (DP = 1): the one pass there cost the E4B 2 % after 1,570 tokens (bench/NOTES.md, session 47) */
  constexpr int NT = AD_WARPS * 32, DT = (HD + NT - 1) / NT; /* the block's threads; dims a thread */
  constexpr int DP = HD >= 512 ? 1 : DT;                     /* dims a pass over the splits */
  const float *pb = part + ((int64_t)t * n_heads + h0) * NS * (HD + 2) + threadIdx.x;
#pragma unroll 1
  for (int r0 = 0; r0 < DT; r0 += DP) {
    float A[DP][AD_G];
#pragma unroll
    for (int r = 0; r < DP; r++)
#pragma unroll
      for (int g = 0; g < AD_G; g++) A[r][g] = 0.0f;
#pragma unroll 4
    for (int j = 0; j < ns; j++) {
#pragma unroll
      for (int r = 0; r < DP; r++)
#pragma unroll
        for (int g = 0; g < AD_G; g++)
          if (g < ng && threadIdx.x + NT * (r0 + r) < HD)
            A[r][g] = fmaf(sw[g][j], __ldcg(pb + ((int64_t)g * NS + j) * (HD + 2) + NT * (r0 + r)), A[r][g]);
    }
#pragma unroll
    for (int r = 0; r < DP; r++)
#pragma unroll
      for (int g = 0; g < AD_G; g++)
        if (g < ng && threadIdx.x + NT * (r0 + r) < HD)
          stf(out + ((int64_t)t * n_heads + h0 + g) * HD + threadIdx.x + NT * (r0 + r), A[r][g]);
  }
  if (threadIdx.x == 0) *c = 0;
}

/* ---- decode, one query head per block, keys through shared memory ----------------------------------
 * attn_decode_smem: f16 q and cache, head_dim 64/128/256, up to 8 tokens (the decode path's widths).
 * Grid (token, query head, split). A block copies its slice's K and V rows into shared memory by
 * cp.async: the keys the batch did not write this step (positions below the first new position of
 * the token's sequence) before griddepcontrol.wait, so the copy overlaps the kernel before it, and
 * the new keys after. Then one thread per key computes the score (rows padded by 16 bytes: the
 * 16-byte reads of 8 threads hit 8 bank groups), the block reduces max and sum, and the threads sum
 * p·V per head dimension (ADS_THREADS / HD key subsets, added at the end). One slice (up to C keys,
 * most decode contexts) writes the output directly: no partials, no counter, no second pass. More
 * slices merge as attn_decode's do (partials, the last block). A slice longer than C keys (contexts
 * over NS·C) walks it C keys at a time with an online rescale, those copies after the wait.
 * Why (bench/NOTES.md, round 7): attn_decode cost ~10 µs per layer inside the decode chain at 71-199
 * keys: its key loads waited for griddepcontrol.wait, and its split merge added a round trip through
 * L2 (partials, fence, counter, reload) to every layer. */
#define ADS_THREADS 256

__device__ __forceinline__ float ads_block_max(float v, float *red) {
  v = warp_max(v);
  __syncthreads(); /* red is free (an earlier reduction's readers are done) */
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  v = red[0];
#pragma unroll
  for (int w = 1; w < ADS_THREADS / 32; w++) v = fmaxf(v, red[w]);
  return v;
}
__device__ __forceinline__ float ads_block_sum(float v, float *red) {
  v = warp_sum(v);
  __syncthreads();
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  v = 0.0f;
#pragma unroll
  for (int w = 0; w < ADS_THREADS / 32; w++) v += red[w];
  return v;
}

/* shared memory of one block: K and V rows of C keys (HD / 8 + 1 sixteen-byte units each), C scores */
static size_t ads_smem(int hd, int C) { return (size_t)C * ((size_t)2 * (hd / 8 + 1) * 16 + 4); }


/* MB: blocks an SM the registers are bounded for. 4 is 64 registers, what the plain bound gives (a plain
 * __launch_bounds__(256, 1) would allow 96); 5 is 48 (8-40 bytes of spills), which fits a block beside two 8-warp
 * GEMV blocks of ~100 registers (ads_launch) */
template <int HD, bool POST = false, int MB = 4>
__global__ __launch_bounds__(ADS_THREADS, MB) void attn_decode_smem_kernel(
    __half *out, const __half *q, const __half *kc, const __half *vc, const int32_t *pos, const int32_t *seq,
    const int32_t *bt, int max_blocks, int bs, int n_tokens, int n_heads, int n_kv, float scale, int window,
    float softcap, float *part, unsigned *cnt, int NS, int C, const ads_post pp,
    const __grid_constant__ ads_freq<POST> rinv CU_TRACE_PARAMS) {
  pdl_trigger();
  if (threadIdx.x == 0) { CU_TRACE(0); CU_TRACE(6); }
  constexpr int RW = HD / 8 + 1;        /* a key row in 16-byte units (one of padding) */
  constexpr int SUB = ADS_THREADS / HD; /* p·V: threads per head dimension, each a subset of the keys */
  extern __shared__ uint4 ads_sm[];
  uint4 *ks = ads_sm, *vs = ads_sm + (size_t)C * RW;
  float *ps = (float *)(vs + (size_t)C * RW); /* scores, then exp(score - max) */
  __shared__ __align__(16) float qs[HD];
  __shared__ float red[ADS_THREADS / 32], accs[SUB][HD], sw[32];
  __shared__ int sm_last;
  const int t = blockIdx.x, h = blockIdx.y, s = blockIdx.z, kh = h / (n_heads / n_kv);
  const int p = pos[t], sq = seq[t];
  const int lo = window > 0 ? max(0, p - window + 1) : 0, len = p - lo + 1;
  const int ns = min(NS, (len + C - 1) / C);
  if (s >= ns) return;
  const int chunk = (len + ns - 1) / ns, ke = min(p + 1, lo + s * chunk + chunk);
  int kb = lo + s * chunk;
  /* keys from this position on may be the batch's own (written by the kernel before) */
  int pnew = p;
  for (int i = 0; i < n_tokens; i++)
    if (seq[i] == sq) pnew = min(pnew, pos[i]);
  const int32_t *btr = bt + (int64_t)sq * max_blocks;
  const int64_t kvw = (int64_t)n_kv * HD;
  const __half *kbase = kc + (int64_t)kh * HD, *vbase = vc + (int64_t)kh * HD;
  /* copies the rows of keys [k0, k1) to their rows (key - kb) of the shared buffers */
  auto copy = [&](int k0, int k1) {
    for (int i = threadIdx.x; i < (k1 - k0) * (HD / 8); i += ADS_THREADS) {
      const int kp = k0 + i / (HD / 8), c = i % (HD / 8);
      const int64_t off = ((int64_t)btr[kp / bs] * bs + kp % bs) * kvw + c * 8;
      const int r = (kp - kb) * RW + c;
      cp_async16(ks + r, kbase + off, 16);
      cp_async16(vs + r, vbase + off, 16);
    }
    cp_async_commit();
  };
  int kn = min(C, ke - kb);
  copy(kb, min(kb + kn, pnew));
  /* POST: warp 0 turns q; in the split holding the new key (the last) of a layer that writes it, warps 1 and 2 its
   * k and v. Their norm weights, sin and cos and the key's slot before the wait. */
  constexpr int NJ = HD / 32;
  const int wid = (int)threadIdx.x / 32;
  const int role = !POST ? -1 : (wid == 0 ? 0 : (pp.kc && kb <= p && p < ke && wid <= 2 ? wid : -1));
  float px[QP_MAXJ], pw[QP_MAXJ], psn[QP_MAXJ / 2], pcs[QP_MAXJ / 2];
  int64_t pslot = 0;
  if constexpr (POST) {
    if (role >= 0) {
      g4_post_pre(pw, psn, pcs, role == 0 ? pp.qw : (role == 1 ? pp.kw : NULL), role == 0 ? pp.qwdt : pp.kwdt,
                  role < 2, p, [&](int i) { return rinv.v[i]; }, NJ, pp.n_pairs, threadIdx.x % 32);
      if (role > 0) pslot = (int64_t)btr[p / bs] * bs + p % bs;
    }
  }
  pdl_wait();
  if (threadIdx.x == 0) { CU_TRACE(1); CU_TRACE(3); }
  if constexpr (POST) {
    if (!pp.kc) copy(max(kb, pnew), kb + kn); /* a KV-shared layer: its source layer wrote the new key */
    if (role >= 0) {
      const int lane = threadIdx.x % 32;
      const __half *src = role == 0 ? q + ((int64_t)t * n_heads + h) * HD : (role == 1 ? pp.k : pp.v) + ((int64_t)t * n_kv + kh) * HD;
#pragma unroll
      for (int j = 0; j < NJ; j++) px[j] = __half2float(src[lane + 32 * j]);
      g4_post_apply<__half>(px, pw, psn, pcs, NJ, HD, pp.n_pairs, pp.eps, role < 2, lane);
      if (role == 0) {
#pragma unroll
        for (int j = 0; j < NJ; j++) qs[lane + 32 * j] = px[j] * scale;
      } else {
        __half *c = (role == 1 ? pp.kc : pp.vc) + pslot * kvw + (int64_t)kh * HD;
        __half *r = (__half *)((role == 1 ? ks : vs) + (size_t)(p - kb) * RW); /* its row, if in this pass */
#pragma unroll
        for (int j = 0; j < NJ; j++) {
          const __half v = __float2half_rn(px[j]);
          c[lane + 32 * j] = v;
          if (p - kb < kn) r[lane + 32 * j] = v;
        }
      }
    }
  } else {
    /* the new keys' copies first: a thread stores q only once its load has landed, and copies issued
     * after that store would start one round trip later */
    copy(max(kb, pnew), kb + kn);
    for (int d = threadIdx.x; d < HD; d += ADS_THREADS) qs[d] = __half2float(q[((int64_t)t * n_heads + h) * HD + d]) * scale;
  }
  const int d = threadIdx.x % HD, sub = threadIdx.x / HD;
  const __half *vh = (const __half *)vs;
  float M = -INFINITY, L = 0.0f, A = 0.0f; /* running max and sum (block-uniform), this thread's p·V */
#if HEARTH_TRACE
  bool tr_first = true;
#endif
  for (;;) {
    cp_async_wait<0>();
    __syncthreads();
#if HEARTH_TRACE
    if (tr_first && threadIdx.x == 0) CU_TRACE(4); /* q and the first keys in shared memory */
    tr_first = false;
#endif
    float mloc = -INFINITY;
    for (int k = threadIdx.x; k < kn; k += ADS_THREADS) {
      const uint4 *kr = ks + k * RW;
      float a0 = 0.0f, a1 = 0.0f;
      /* unrolled by 4, not fully: fully unrolled, the compiler keeps all of q in registers across keys
       * (HD of them: 191 registers at hd 128, 255 at 256), and a block then needs an SM with ~49 K
       * registers free, which the GEMV before it rarely leaves: its early copies could not start */
#pragma unroll 4
      for (int c = 0; c < HD / 8; c++) {
        const uint4 w = kr[c];
        const float4 q0 = *(const float4 *)&qs[8 * c], q1 = *(const float4 *)&qs[8 * c + 4];
        const float2 f0 = __half22float2(*(const __half2 *)&w.x), f1 = __half22float2(*(const __half2 *)&w.y);
        const float2 f2 = __half22float2(*(const __half2 *)&w.z), f3 = __half22float2(*(const __half2 *)&w.w);
        a0 = fmaf(q0.x, f0.x, fmaf(q0.y, f0.y, fmaf(q0.z, f1.x, fmaf(q0.w, f1.y, a0))));
        a1 = fmaf(q1.x, f2.x, fmaf(q1.y, f2.y, fmaf(q1.z, f3.x, fmaf(q1.w, f3.y, a1))));
      }
      const float sc = softcap_f(a0 + a1, softcap);
      ps[k] = sc;
      mloc = fmaxf(mloc, sc);
    }
    const float Mn = fmaxf(M, ads_block_max(mloc, red)); /* the barrier inside makes ps visible */
    float lsum = 0.0f;
    for (int k = threadIdx.x; k < kn; k += ADS_THREADS) {
      const float e = expf(ps[k] - Mn);
      ps[k] = e;
      lsum += e;
    }
    const float al = M > -INFINITY ? expf(M - Mn) : 0.0f;
    L = L * al + ads_block_sum(lsum, red);
    M = Mn;
    float a0 = 0.0f, a1 = 0.0f;
    int k = sub;
    for (; k + SUB < kn; k += 2 * SUB) {
      a0 = fmaf(ps[k], __half2float(vh[(size_t)k * RW * 8 + d]), a0);
      a1 = fmaf(ps[k + SUB], __half2float(vh[(size_t)(k + SUB) * RW * 8 + d]), a1);
    }
    if (k < kn) a0 = fmaf(ps[k], __half2float(vh[(size_t)k * RW * 8 + d]), a0);
    A = A * al + (a0 + a1);
    kb += kn;
    if (kb >= ke) break;
    kn = min(C, ke - kb);
    __syncthreads(); /* every thread is done with the buffers */
    copy(kb, kb + kn);
  }
  accs[sub][d] = A;
  __syncthreads();
  const int64_t row = (int64_t)t * n_heads + h;
  if (sub == 0) {
    float tot = 0.0f;
#pragma unroll
    for (int j = 0; j < SUB; j++) tot += accs[j][d];
    if (ns == 1) {
      out[row * HD + d] = __float2half_rn(tot / L); /* L >= 1: the max key contributes exp(0) */
    } else {
      float *pp = part + (row * NS + s) * (HD + 2);
      pp[d] = tot;
      if (d == 0) { pp[HD] = M; pp[HD + 1] = L; }
    }
  }
  if (ns == 1) {
    if (threadIdx.x % 32 == 0) CU_TRACE(2);
    return;
  }
  unsigned *cp = cnt + row;
  if (!split_is_last(cp, ns, &sm_last)) {
    if (threadIdx.x % 32 == 0) CU_TRACE(2);
    return;
  }
  /* the last block merges: warp 0 weighs the splits (ns <= 32), then one thread per dimension */
  if (threadIdx.x < 32) {
    float mj = -INFINITY, lj = 0.0f;
    if (threadIdx.x < ns) {
      const float *pp = part + (row * NS + threadIdx.x) * (HD + 2);
      mj = __ldcg(pp + HD);
      lj = __ldcg(pp + HD + 1);
    }
    const float Mx = warp_max(mj);
    const float f = mj > -INFINITY ? expf(mj - Mx) : 0.0f;
    const float Lx = warp_sum(lj * f);
    sw[threadIdx.x] = Lx != 0.0f ? f / Lx : 0.0f;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < HD; e += ADS_THREADS) {
    float a = 0.0f;
    for (int j = 0; j < ns; j++) a = fmaf(sw[j], __ldcg(part + (row * NS + j) * (HD + 2) + e), a);
    out[row * HD + e] = __float2half_rn(a);
  }
  if (threadIdx.x == 0) *cp = 0;
  if (threadIdx.x % 32 == 0) CU_TRACE(2);
}

/* ---- prefill: query tiles x key tiles -------------------------------------------------------------- */

#define AP_Q 32
#define AP_K 32

static size_t prefill_smem(int hd) { return (size_t)(3 * AP_Q * (hd + 4) + AP_Q * (AP_K + 1)) * sizeof(float); }

template <typename T, typename KT, int HD>
__global__ __launch_bounds__(128) void attn_prefill_kernel(T *out, const T *q, const KT *kc, const KT *vc,
                                                           const int32_t *pos, const int32_t *seq, const int32_t *bt,
                                                           int max_blocks, int bs, int n_tokens, int n_heads, int n_kv,
                                                           int G, float scale, int window, float softcap) {
  constexpr int LD = HD + 4, NO = HD / 16; /* float4 chunks of the output row per thread */
  extern __shared__ float sm[];
  float *Qs = sm, *Ks = Qs + AP_Q * LD, *Vs = Ks + AP_K * LD, *Ps = Vs + AP_K * LD;
  __shared__ int s_pos[AP_Q], s_lo[AP_Q], s_seq[AP_Q], s_done[AP_Q];
  __shared__ int s_seg, s_kmin, s_kmax;
  const int t0 = blockIdx.x * AP_Q, h = blockIdx.y, kh = h / G;
  const int tid = threadIdx.x, r = tid / 4, c4 = tid % 4;
  const int64_t kvw = (int64_t)n_kv * HD;

  if (tid < AP_Q) {
    int t = t0 + tid;
    if (t < n_tokens) {
      int p = pos[t];
      s_pos[tid] = p;
      s_seq[tid] = seq[t];
      s_lo[tid] = window > 0 ? max(0, p - window + 1) : 0;
      s_done[tid] = 0;
    } else {
      s_pos[tid] = -1; s_seq[tid] = -1; s_lo[tid] = 0; s_done[tid] = 1;
    }
  }
  for (int i = tid; i < AP_Q * HD; i += 128) {
    int rr = i / HD, d = i % HD, t = t0 + rr;
    Qs[rr * LD + d] = t < n_tokens ? ldf(q + ((int64_t)t * n_heads + h) * HD + d) * scale : 0.0f;
  }
  __syncthreads();

  for (;;) {
    if (tid == 0) {
      int seg = -1, kmin = 0x7fffffff, kmax = -1;
      for (int i = 0; i < AP_Q; i++)
        if (!s_done[i]) { seg = s_seq[i]; break; }
      if (seg >= 0)
        for (int i = 0; i < AP_Q; i++)
          if (!s_done[i] && s_seq[i] == seg) { kmin = min(kmin, s_lo[i]); kmax = max(kmax, s_pos[i]); }
      s_seg = seg; s_kmin = kmin; s_kmax = kmax;
    }
    __syncthreads();
    const int seg = s_seg;
    if (seg < 0) break;
    const int kmin = s_kmin, kmax = s_kmax;
    const bool active = !s_done[r] && s_seq[r] == seg;
    const int rp = s_pos[r], rlo = s_lo[r];
    const int32_t *btr = bt + (int64_t)seg * max_blocks;
    float m = -INFINITY, l = 0.0f, o[NO][4];
#pragma unroll
    for (int i = 0; i < NO; i++)
#pragma unroll
      for (int e = 0; e < 4; e++) o[i][e] = 0.0f;

    for (int kb = kmin; kb <= kmax; kb += AP_K) {
      __syncthreads();
      { /* key jj = tid/4 loads dims [c4*HD/4, +HD/4) of K and V */
        int jj = tid / 4, key = kb + jj;
        float *kd = Ks + jj * LD + c4 * (HD / 4), *vd = Vs + jj * LD + c4 * (HD / 4);
        if (key <= kmax) {
          int64_t slot = (int64_t)btr[key / bs] * bs + key % bs;
          const KT *kp = kc + slot * kvw + (int64_t)kh * HD + c4 * (HD / 4);
          const KT *vp = vc + slot * kvw + (int64_t)kh * HD + c4 * (HD / 4);
#pragma unroll 8
          for (int e = 0; e < HD / 4; e++) { kd[e] = ldf(kp + e); vd[e] = ldf(vp + e); }
        } else {
#pragma unroll 8
          for (int e = 0; e < HD / 4; e++) { kd[e] = 0.0f; vd[e] = 0.0f; }
        }
      }
      __syncthreads();
      float sc[AP_K / 4];
#pragma unroll
      for (int j = 0; j < AP_K / 4; j++) sc[j] = 0.0f;
      const float4 *qr = (const float4 *)(Qs + r * LD);
#pragma unroll 4
      for (int d4 = 0; d4 < HD / 4; d4++) {
        float4 qq = qr[d4];
#pragma unroll
        for (int j = 0; j < AP_K / 4; j++) {
          float4 kk = ((const float4 *)(Ks + (c4 + 4 * j) * LD))[d4];
          sc[j] = fmaf(qq.x, kk.x, fmaf(qq.y, kk.y, fmaf(qq.z, kk.z, fmaf(qq.w, kk.w, sc[j]))));
        }
      }
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < AP_K / 4; j++) {
        int key = kb + c4 + 4 * j;
        bool ok = active && key <= rp && key >= rlo && key <= kmax;
        sc[j] = ok ? softcap_f(sc[j], softcap) : -INFINITY;
        mx = fmaxf(mx, sc[j]);
      }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      float mn = fmaxf(m, mx);
      float al = mn == -INFINITY ? 1.0f : expf(m - mn);
      float ls = 0.0f;
#pragma unroll
      for (int j = 0; j < AP_K / 4; j++) {
        float pj = sc[j] == -INFINITY ? 0.0f : expf(sc[j] - mn);
        ls += pj;
        Ps[r * (AP_K + 1) + c4 + 4 * j] = pj;
      }
      ls += __shfl_xor_sync(0xffffffffu, ls, 1);
      ls += __shfl_xor_sync(0xffffffffu, ls, 2);
      l = l * al + ls;
      m = mn;
#pragma unroll
      for (int i = 0; i < NO; i++)
#pragma unroll
        for (int e = 0; e < 4; e++) o[i][e] *= al;
      __syncwarp();
#pragma unroll 4
      for (int jj = 0; jj < AP_K; jj++) {
        float pj = Ps[r * (AP_K + 1) + jj];
        const float4 *vr = (const float4 *)(Vs + jj * LD);
#pragma unroll
        for (int i = 0; i < NO; i++) {
          float4 vv = vr[c4 + 4 * i];
          o[i][0] = fmaf(pj, vv.x, o[i][0]);
          o[i][1] = fmaf(pj, vv.y, o[i][1]);
          o[i][2] = fmaf(pj, vv.z, o[i][2]);
          o[i][3] = fmaf(pj, vv.w, o[i][3]);
        }
      }
    }
    if (active) {
      T *orow = out + ((int64_t)(t0 + r) * n_heads + h) * HD;
      float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
      for (int i = 0; i < NO; i++)
#pragma unroll
        for (int e = 0; e < 4; e++) stf(orow + (c4 + 4 * i) * 4 + e, o[i][e] * inv);
    }
    __syncthreads();
    if (c4 == 0 && active) s_done[r] = 1;
    __syncthreads();
  }
}

/* ---- prefill on tensor cores (f16 q and cache, head_dim 64 / 128 / 256) ---------------------------- */

/* FlashAttention-2 forward over the paged cache. Grid (query head, 64-token query tile); 4 warps, each
 * owning 16 query rows of the tile. Q fragments are loaded once into registers by ldmatrix (head_dim
 * 256: re-read from shared memory per key tile, see am_shape); key tiles of 64 keys (32 at head_dim
 * 256) come through the block table by cp.async into double-buffered K and V tiles (rows padded by 16
 * bytes: ldmatrix conflict-free); S = Q·Kᵀ by mma m16n8k16, then scale,
 * soft-cap and the masks in f32 on the S fragments, online softmax in exp2 (log2 e folded into the
 * scale), and the S accumulators, rounded to f16, are reused directly as the A fragments of O += P·V
 * (V through ldmatrix.trans). The row max and sum live in the quad of lanes that owns a row (each lane
 * holds rows gid and gid + 8 of its warp's 16); the sum is reduced over the quad only at the end.
 *
 * One query head per block, not the G heads of a kv head packed as rows: a K/V tile is reused by the
 * block's 64 rows either way (packing only changes which rows share it, not how many), the causal
 * waste on the diagonal is the same, and packed rows would need a G-dependent row map (G = 7 leaves
 * 64 rows uneven). The query tiles run heaviest first (the last tile of a long prompt has the most
 * keys), which shortens the tail of the grid.
 *
 * A tile that holds tokens of several sequences walks them one "segment" (all rows of one sequence)
 * at a time over that sequence's key range; the softmax state of every row persists across the
 * segments (a row outside the segment sees only masked keys, which leave m, l and O unchanged), so the
 * output is written once at the end. A warp skips the key tiles that hold no key for any of its rows
 * in the segment (causal, window, no row of the segment) and skips the mask on tiles where every key
 * is valid for all its 16 rows. Keys past the segment's last position are zero-filled (never garbage:
 * a NaN in V would poison O through P = 0). */
#define AM_Q 64 /* query rows per block: 4 warps x 16 */

template <int HD>
struct am_shape {
  static constexpr int BK = HD >= 256 ? 32 : 64; /* keys per tile */
  static constexpr int LDS = HD + 8;             /* halves per smem row: +16 bytes, ldmatrix rows hit distinct banks */
  /* Q fragments held in registers (staged through the K stages); at 256 the O accumulator alone takes
   * 128 registers a lane, so Q stays in its own shared tile and is re-read per key tile */
  static constexpr bool QREG = HD <= 128;
  /* blocks per SM the registers must allow: at 3 (168 a lane) ptxas spills nothing for 64 and 128
   * (CUDA 13, sm_90), and shared memory (37 / 70 KB a block) allows 3; 256 takes 243 registers: 2; 512 (167 KB of
   * shared memory): 1 */
  static constexpr int MINB = HD <= 128 ? 3 : (HD <= 256 ? 2 : 1);
};

/* K and V tiles, two stages each (+ the Q tile from head_dim 256 on); vd: the value dims a block computes (vd < hd:
 * Gemma 4's 512, whose O accumulator would not fit in registers, runs as two blocks of 256 value dims, each computing
 * the whole Q·Kᵀ) */
static size_t prefill_mma_smem(int hd, int vd) {
  const int bk = hd >= 256 ? 32 : 64;
  return ((size_t)2 * bk * (hd + 8) + (size_t)2 * bk * (vd + 8) + (hd <= 128 ? 0 : (size_t)AM_Q * (hd + 8))) *
         sizeof(__half);
}

/* keys [kb, kb + BK) of the sequence whose block-table row is btr into stage buffers Kd, Vd; keys past
 * kmax are zero-filled. Warp w copies rows [w·BK/4, (w+1)·BK/4), a 16-byte chunk per lane per step
 * (a row is read by consecutive lanes); lane j < BK/4 looks up the cache slot of the warp's row j
 * (one block-table load and division per lane) and the lanes copying a row take it by shuffle. */
template <int HD, int VD = HD>
__device__ __forceinline__ void am_load_kv(__half *Kd, __half *Vd, const __half *kc, const __half *vc,
                                           const int32_t *btr, int bs, int64_t kvw, int kh, int kb, int kmax, int voff) {
  constexpr int BK = am_shape<HD>::BK, LDS = am_shape<HD>::LDS, CPR = HD / 8; /* 16-byte chunks per row */
  constexpr int RW = BK / 4;                                                   /* rows per warp */
  const int lane = threadIdx.x % 32, r0 = (threadIdx.x / 32) * RW;
  const int mykey = kb + r0 + lane;
  const int myslot = lane < RW && mykey <= kmax ? btr[mykey / bs] * bs + mykey % bs : 0;
  if constexpr (VD == HD && CPR <= 32) {
    constexpr int RPS = 32 / CPR; /* rows per step */
    const int ch = lane % CPR;
#pragma unroll
    for (int i = 0; i < RW / RPS; i++) {
      const int rr = i * RPS + lane / CPR, r = r0 + rr;
      const int slot = __shfl_sync(0xffffffffu, myslot, rr);
      const bool ok = kb + r <= kmax;
      const int64_t off = (int64_t)kh * HD + ch * 8 + (ok ? (int64_t)slot * kvw : 0);
      cp_async16(Kd + r * LDS + ch * 8, kc + off, ok ? 16 : 0);
      cp_async16(Vd + r * LDS + ch * 8, vc + off, ok ? 16 : 0);
    }
  } else { /* rows wider than a warp's 32 chunks, or V's value-dim slice [voff, voff + VD) alone */
    constexpr int CPRV = VD / 8, LDSV = VD + 8;
    static_assert(RW * CPR % 32 == 0 && RW * CPRV % 32 == 0, "whole warp steps (the shuffle needs every lane)");
#pragma unroll 4
    for (int i = lane; i < RW * CPR; i += 32) {
      const int rr = i / CPR, r = r0 + rr, ch = i % CPR;
      const int slot = __shfl_sync(0xffffffffu, myslot, rr);
      const bool ok = kb + r <= kmax;
      cp_async16(Kd + r * LDS + ch * 8, kc + (int64_t)kh * HD + ch * 8 + (ok ? (int64_t)slot * kvw : 0), ok ? 16 : 0);
    }
#pragma unroll 4
    for (int i = lane; i < RW * CPRV; i += 32) {
      const int rr = i / CPRV, r = r0 + rr, ch = i % CPRV;
      const int slot = __shfl_sync(0xffffffffu, myslot, rr);
      const bool ok = kb + r <= kmax;
      cp_async16(Vd + r * LDSV + ch * 8, vc + (int64_t)kh * HD + voff + ch * 8 + (ok ? (int64_t)slot * kvw : 0),
                 ok ? 16 : 0);
    }
  }
}

/* VD < HD: the block computes value dims [VD·blockIdx.z, VD·blockIdx.z + VD) of its rows (see prefill_mma_smem) */
template <int HD, int VD = HD>
__global__ __launch_bounds__(128, am_shape<HD>::MINB) void attn_prefill_mma_kernel(
    __half *out, const __half *q, const __half *kc, const __half *vc, const int32_t *pos, const int32_t *seq,
    const int32_t *bt, int max_blocks, int bs, int n_tokens, int n_heads, int n_kv, int G, float scale, int window,
    float softcap) {
  constexpr int BK = am_shape<HD>::BK, LDS = am_shape<HD>::LDS, CPR = HD / 8;
  constexpr bool QREG = am_shape<HD>::QREG;
  constexpr int KS = HD / 16; /* k16 steps of Q·Kᵀ over head_dim */
  constexpr int NT = BK / 8;  /* n8 key tiles of S */
  constexpr int DT = VD / 8;  /* n8 head_dim tiles of O */
  constexpr int LDSV = VD + 8;
  constexpr float LOG2E = 1.4426950408889634f;
  static_assert(VD == HD || !QREG, "a value-dim slice keeps Q in shared memory");
  extern __shared__ uint4 am_smem[];
  __half *Ks = (__half *)am_smem, *Vs = Ks + 2 * BK * LDS; /* [2][BK][LDS], [2][BK][LDSV] */
  __half *Qs = QREG ? Ks : Vs + 2 * BK * LDSV;              /* [64][LDS]: in the K stages (64 <= 2 BK) or after V */
  const int voff = VD * (int)blockIdx.z;
  __shared__ int s_seq[AM_Q], s_lo[AM_Q], s_hi[AM_Q], s_seg, s_kmin, s_kmax;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, gid = lane / 4, tig = lane % 4;
  const int h = blockIdx.x, kh = h / G, t0 = (gridDim.y - 1 - blockIdx.y) * AM_Q;
  const int64_t kvw = (int64_t)n_kv * HD;
  const bool capped = softcap > 0.0f;
  /* x = s·scale·log2e, or softcap·log2e·tanh(s·scale/softcap) */
  const float c1 = capped ? scale / softcap : scale * LOG2E, c2 = softcap * LOG2E;

  /* the Q tile (rows past n_tokens zero) */
#pragma unroll
  for (int c = tid; c < AM_Q * CPR; c += 128) {
    const int r = c / CPR, ch = c % CPR, t = t0 + r;
    const bool ok = t < n_tokens;
    cp_async16(Qs + r * LDS + ch * 8, q + (ok ? ((int64_t)t * n_heads + h) * HD + ch * 8 : 0), ok ? 16 : 0);
  }
  cp_async_commit();

  /* per row of the tile: sequence (-1 past n_tokens), first and last key */
  if (tid < AM_Q) {
    const int t = t0 + tid, hi = t < n_tokens ? pos[t] : -1;
    s_seq[tid] = t < n_tokens ? seq[t] : -1;
    s_hi[tid] = hi;
    s_lo[tid] = window > 0 ? max(0, hi - window + 1) : 0;
  }
  cp_async_wait<0>();
  __syncthreads();
  /* A fragments of the warp's 16 rows: matrices (rows 0-7, dims 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15) */
  const __half *Qw = Qs + (16 * warp + lane % 16) * LDS + (lane / 16) * 8;
  uint32_t qf[QREG ? KS : 1][4];
  if constexpr (QREG) {
#pragma unroll
    for (int kk = 0; kk < KS; kk++) ldmatrix_x4(qf[kk], Qw + kk * 16);
  }
  /* warp 0 picks the segments; its lane tracks rows lane and lane + 32 */
  bool done0 = s_seq[lane] < 0, done1 = s_seq[lane + 32] < 0;
  /* this lane's rows: a = 16·warp + gid, b = a + 8 */
  const int ra = 16 * warp + gid, rb = ra + 8;

  float o[DT][4];
#pragma unroll
  for (int i = 0; i < DT; i++)
#pragma unroll
    for (int e = 0; e < 4; e++) o[i][e] = 0.0f;
  float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.0f, l_b = 0.0f; /* l: this lane's part of the row sum */

  for (;;) {
    __syncthreads(); /* all warps are past the previous segment's tiles (or the Q fragments) and its s_seg */
    if (warp == 0) {
      const unsigned nd0 = __ballot_sync(0xffffffffu, !done0), nd1 = __ballot_sync(0xffffffffu, !done1);
      int sg = -1, kmin = 0, kmax = -1;
      if (nd0 | nd1) {
        sg = s_seq[nd0 ? __ffs(nd0) - 1 : 32 + __ffs(nd1) - 1]; /* the first row not done yet */
        const bool i0 = s_seq[lane] == sg, i1 = s_seq[lane + 32] == sg;
        kmin = __reduce_min_sync(0xffffffffu, min(i0 ? s_lo[lane] : INT_MAX, i1 ? s_lo[lane + 32] : INT_MAX));
        kmax = __reduce_max_sync(0xffffffffu, max(i0 ? s_hi[lane] : -1, i1 ? s_hi[lane + 32] : -1));
        done0 |= i0;
        done1 |= i1;
      }
      if (lane == 0) { s_seg = sg; s_kmin = kmin; s_kmax = kmax; }
    }
    __syncthreads();
    const int sg = s_seg, kmin = s_kmin, kmax = s_kmax;
    if (sg < 0) break;
    /* rows outside the segment get an empty key range [INT_MAX, -1] */
    const bool in_a = s_seq[ra] == sg, in_b = s_seq[rb] == sg;
    const int lo_a = in_a ? s_lo[ra] : INT_MAX, hi_a = in_a ? s_hi[ra] : -1;
    const int lo_b = in_b ? s_lo[rb] : INT_MAX, hi_b = in_b ? s_hi[rb] : -1;
    /* the warp's key range (skip) and the range valid for all its 16 rows (no mask); a row outside
     * the segment makes the latter empty */
    const int w_lo = __reduce_min_sync(0xffffffffu, min(lo_a, lo_b)),
              w_hi = __reduce_max_sync(0xffffffffu, max(hi_a, hi_b));
    const int w_lo_all = __reduce_max_sync(0xffffffffu, max(lo_a, lo_b)),
              w_hi_all = __reduce_min_sync(0xffffffffu, min(hi_a, hi_b));
    const int32_t *btr = bt + (int64_t)sg * max_blocks;
    const int n_kt = (kmax - kmin) / BK + 1;

    am_load_kv<HD, VD>(Ks, Vs, kc, vc, btr, bs, kvw, kh, kmin, kmax, voff);
    cp_async_commit();
    for (int it = 0; it < n_kt; it++) {
      const int kb = kmin + it * BK, st = it & 1;
      cp_async_wait<0>();
      __syncthreads(); /* tile it has landed; every warp is done with tile it - 1, whose stage is loaded next */
      if (it + 1 < n_kt)
        am_load_kv<HD, VD>(Ks + (st ^ 1) * BK * LDS, Vs + (st ^ 1) * BK * LDSV, kc, vc, btr, bs, kvw, kh, kb + BK, kmax,
                           voff);
      cp_async_commit();
      if (kb > w_hi || kb + BK - 1 < w_lo) continue; /* no key of this tile for any row of the warp */
      const __half *Kt = Ks + st * BK * LDS, *Vt = Vs + st * BK * LDSV;

      /* S = Q·Kᵀ: K rows (keys) are the col-major B operand as stored; one ldmatrix.x4 gives two n8
       * key tiles x k16: matrices (keys 0-7, dims 0-7), (0-7, 8-15), (8-15, 0-7), (8-15, 8-15) */
      float s[NT][4];
#pragma unroll
      for (int i = 0; i < NT; i++)
#pragma unroll
        for (int e = 0; e < 4; e++) s[i][e] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < KS; kk++) {
        uint32_t qa[4];
        if constexpr (QREG) {
#pragma unroll
          for (int e = 0; e < 4; e++) qa[e] = qf[kk][e];
        } else {
          ldmatrix_x4(qa, Qw + kk * 16);
        }
#pragma unroll
        for (int np = 0; np < NT / 2; np++) {
          uint32_t kf[4];
          ldmatrix_x4(kf, Kt + (np * 16 + (lane / 16) * 8 + lane % 8) * LDS + kk * 16 + ((lane / 8) % 2) * 8);
          mma_16816(s[2 * np], qa, kf);
          mma_16816(s[2 * np + 1], qa, kf + 2);
        }
      }
      /* s[nt][e]: row gid (e < 2) or gid + 8 (e >= 2), key kb + 8·nt + 2·tig + (e & 1) */
      if (capped) {
#pragma unroll
        for (int i = 0; i < NT; i++)
#pragma unroll
          for (int e = 0; e < 4; e++) s[i][e] = c2 * tanhf(s[i][e] * c1);
      } else {
#pragma unroll
        for (int i = 0; i < NT; i++)
#pragma unroll
          for (int e = 0; e < 4; e++) s[i][e] *= c1;
      }
      if (kb < w_lo_all || kb + BK - 1 > w_hi_all) {
#pragma unroll
        for (int i = 0; i < NT; i++)
#pragma unroll
          for (int e = 0; e < 4; e++) {
            const int key = kb + 8 * i + 2 * tig + (e & 1);
            if (e < 2 ? (key < lo_a || key > hi_a) : (key < lo_b || key > hi_b)) s[i][e] = -INFINITY;
          }
      }
      /* online softmax: new row max over the quad; a row that has seen no key keeps max -inf and
       * subtracts 0 instead (exp2(-inf) = 0: no NaN) */
      float mx_a = m_a, mx_b = m_b;
#pragma unroll
      for (int i = 0; i < NT; i++) {
        mx_a = fmaxf(mx_a, fmaxf(s[i][0], s[i][1]));
        mx_b = fmaxf(mx_b, fmaxf(s[i][2], s[i][3]));
      }
      mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 1));
      mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 2));
      mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 1));
      mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 2));
      const float base_a = mx_a == -INFINITY ? 0.0f : mx_a, base_b = mx_b == -INFINITY ? 0.0f : mx_b;
      const float al_a = exp2f(m_a - base_a), al_b = exp2f(m_b - base_b);
      m_a = mx_a;
      m_b = mx_b;
      float sum_a = 0.0f, sum_b = 0.0f;
#pragma unroll
      for (int i = 0; i < NT; i++) {
        s[i][0] = exp2f(s[i][0] - base_a);
        s[i][1] = exp2f(s[i][1] - base_a);
        s[i][2] = exp2f(s[i][2] - base_b);
        s[i][3] = exp2f(s[i][3] - base_b);
        sum_a += s[i][0] + s[i][1];
        sum_b += s[i][2] + s[i][3];
      }
      l_a = l_a * al_a + sum_a;
      l_b = l_b * al_b + sum_b;
#pragma unroll
      for (int i = 0; i < DT; i++) {
        o[i][0] *= al_a;
        o[i][1] *= al_a;
        o[i][2] *= al_b;
        o[i][3] *= al_b;
      }
      /* O += P·V: the accumulators of key tiles 2j, 2j + 1 are the A fragment of keys [16j, 16j + 16)
       * (a0: row gid, keys 2tig..; a1: row gid + 8; a2, a3: keys + 8); V rows (keys) are k-major, so
       * ldmatrix.trans: matrices (keys 0-7, dims 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15) */
#pragma unroll
      for (int j = 0; j < BK / 16; j++) {
        uint32_t pa[4];
        pa[0] = half2_bits(s[2 * j][0], s[2 * j][1]);
        pa[1] = half2_bits(s[2 * j][2], s[2 * j][3]);
        pa[2] = half2_bits(s[2 * j + 1][0], s[2 * j + 1][1]);
        pa[3] = half2_bits(s[2 * j + 1][2], s[2 * j + 1][3]);
#pragma unroll
        for (int dp = 0; dp < VD / 16; dp++) {
          uint32_t vf[4];
          ldmatrix_x4_trans(vf, Vt + (j * 16 + lane % 16) * LDSV + dp * 16 + (lane / 16) * 8);
          mma_16816(o[2 * dp], pa, vf);
          mma_16816(o[2 * dp + 1], pa, vf + 2);
        }
      }
    }
  }

  l_a += __shfl_xor_sync(0xffffffffu, l_a, 1);
  l_a += __shfl_xor_sync(0xffffffffu, l_a, 2);
  l_b += __shfl_xor_sync(0xffffffffu, l_b, 1);
  l_b += __shfl_xor_sync(0xffffffffu, l_b, 2);
  const float inv_a = l_a > 0.0f ? 1.0f / l_a : 0.0f, inv_b = l_b > 0.0f ? 1.0f / l_b : 0.0f;
  const int ta = t0 + ra, tb = t0 + rb;
  if (ta < n_tokens) {
    __half *orow = out + ((int64_t)ta * n_heads + h) * HD + voff + 2 * tig;
#pragma unroll
    for (int i = 0; i < DT; i++) *(uint32_t *)(orow + 8 * i) = half2_bits(o[i][0] * inv_a, o[i][1] * inv_a);
  }
  if (tb < n_tokens) {
    __half *orow = out + ((int64_t)tb * n_heads + h) * HD + voff + 2 * tig;
#pragma unroll
    for (int i = 0; i < DT; i++) *(uint32_t *)(orow + 8 * i) = half2_bits(o[i][2] * inv_b, o[i][3] * inv_b);
  }
}

/* ---- dispatch ------------------------------------------------------------------------------------------ */

template <typename T>
struct is_f16 { static constexpr bool value = false; };
template <>
struct is_f16<__half> { static constexpr bool value = true; };

/* Past 8 rows (a decode batch of 9..ADS_WIDE_MAX sequences) attention runs on attn_decode_smem too, one block a query
 * head and token, when every row has at most ADS_SHORT_LEN keys, with the most keys a pass that keeps all of the
 * nt × heads blocks resident at once (one wave). Why (bench/RESULTS.md, sessions 38-39): at those widths the split-key
 * kernel's splits round down to one or two and its merge is a second round trip; at 71-135 keys the one-wave choice
 * gave 3B x16 +5.9 % (192 keys a pass) and x32 +2.3 % (96), 0.5B x16 +11.5 % and x32 +5.3 % (H100, session 39).
 * Longer rows walk pass after pass in one block, where the split-key kernel spreads them (at 448-512 keys 3B x32
 * −8 %, at 1,570 −20 %): the runtime keeps graphs of their own for the short batches (batch_short_len), so a batch
 * crossing the length changes kernels between steps, never inside a graph. */
#define ADS_WIDE_MAX 32   /* x48/x64 gained nothing (one wave leaves 32-64 keys a pass) */
#define ADS_SHORT_LEN 256 /* the kernel at every length lost 3-8 % at 448-512 keys, 14-20 % at 1,570 */

/* backend.h batch_short_len: batches of 2..8 rows take attn_decode_smem at any length, so only wider ones differ (and
 * none in the exact mode, whose f32 activations never take it) */
int cu_attn_batch_short_len(struct hb_ctx *ctx, int n_tokens) {
  return !ctx->exact && n_tokens > 8 && n_tokens <= ADS_WIDE_MAX ? ADS_SHORT_LEN : 0;
}

/* tests: wide launches of attn_decode_smem (past 8 rows) on this context so far */
long cu_attn_wide_launches(const struct hb_ctx *ctx) { return ctx->ads_wide_n; }

/* blocks of attn_decode_smem<HD> with sm bytes of dynamic shared memory resident on one SM (0 on an error); the
 * kernel's limit is already raised to at least sm (ads_launch) */
template <int HD>
static int ads_resident(size_t sm) {
  int occ = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, attn_decode_smem_kernel<HD, false>, ADS_THREADS, sm) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return occ;
}

/* attn_decode_smem for a batch of f16 q and cache: returns 0 when it launched, 1 when the shapes need attn_decode.
 * Up to 8 rows: C (keys per pass) keeps a block's shared memory near 128 KB, so that one block still fits beside a
 * GEMV block of the kernel before and starts its copies early; NS (splits) gives the one-token step about two blocks
 * per SM at long contexts, and never more splits than the cache can hold keys for; both depend on shapes only
 * (graph-safe). 9..ADS_WIDE_MAX rows of at most ADS_SHORT_LEN keys each (above): one split, C for one wave. */
template <int HD>
static int ads_launch(struct hb_ctx *ctx, struct hb_tensor *out, const struct hb_tensor *q,
                      const struct hb_kv_layer *kv, const struct hb_batch *b, const struct hb_attn_params *p,
                      const ads_post *post = NULL) {
  /* step twins (hb_cuda_set_step_twins): every row with the one-token launch's keys a pass and splits */
  const int nt = b->n_tokens, wide = nt > 8 && !ctx->twin, lim = wide ? cu_attn_batch_short_len(ctx, nt) : 0;
  if (HD > ADS_THREADS || (wide && (!lim || !b->seq_len))) return 1;
  for (int i = 0; wide && i < b->n_seqs; i++)
    if (b->seq_len[i] > lim) return 1;
  int C = (int)((128 * 1024) / ads_smem(HD, 1)) / 32 * 32;
  if (C > 256) C = 256;
  while (C > 32 && ads_smem(HD, C) + 8 * 1024 > ctx->smem_optin) C -= 32;
  if (C < 32) return 1;
  /* the kernel's shared-memory limit is a process-wide attribute: always raised to this largest C's size, never
   * lowered for a smaller C, so that contexts launching it from other threads never see it below their size */
  /* the 48-register instance after a GEMV that holds two 8-warp blocks on most SMs (gemv_last_full): the
   * 64-register one could not enter beside them, and its pre-wait copies would wait for the GEMV to leave. H100,
   * session 47: 12B tg128 +3.7 % (+3.7 % after 600 tokens, ±0 after 1,570); after other GEMVs the spills cost
   * (E4B −1.2 % where it was taken always), so only there */
  const int r48 = !wide && ctx->gemv_last_full;
  const int smax = (int)ads_smem(HD, C);
  const auto attr = cudaFuncAttributeMaxDynamicSharedMemorySize;
  if (CU_OK(ctx, post ? (r48 ? cudaFuncSetAttribute(attn_decode_smem_kernel<HD, true, 5>, attr, smax)
                             : cudaFuncSetAttribute(attn_decode_smem_kernel<HD, true>, attr, smax))
                      : (r48 ? cudaFuncSetAttribute(attn_decode_smem_kernel<HD, false, 5>, attr, smax)
                             : cudaFuncSetAttribute(attn_decode_smem_kernel<HD, false>, attr, smax))))
    return 0;
  int NS = 1;
  if (wide) {
    const int64_t need = (int64_t)nt * p->n_heads;
    int64_t slots;
    while ((slots = (int64_t)ads_resident<HD>(ads_smem(HD, C)) * ctx->n_sm) < need && C > 32) C -= 32;
    if (slots < need) return 1;
  } else {
    int64_t cap = (int64_t)b->max_blocks * b->block_size;
    if (p->window > 0 && p->window < cap) cap = p->window;
    const int fill = 2 * ctx->n_sm / ((ctx->twin ? 1 : nt) * p->n_heads);
    NS = (int)((cap + C - 1) / C);
    if (NS > fill) NS = fill;
    NS = NS < 1 ? 1 : (NS > 32 ? 32 : NS);
  }
  size_t need_part = (size_t)nt * p->n_heads * NS * (HD + 2), need_cnt = (size_t)nt * p->n_heads;
  void *pp = ctx->attn_part, *cp = ctx->attn_cnt;
  if (cu_scratch(ctx, &pp, &ctx->attn_part_cap, need_part, sizeof(float), 0)) return 0;
  ctx->attn_part = (float *)pp;
  if (cu_scratch(ctx, &cp, &ctx->attn_cnt_cap, need_cnt, sizeof(unsigned), 1)) return 0;
  ctx->attn_cnt = (unsigned *)cp;
  const size_t sm = ads_smem(HD, C);
  ctx->ads_wide_n += wide;
  dim3 grid((unsigned)nt, (unsigned)p->n_heads, (unsigned)NS);
  const ads_post none = {};
  auto launch = [&](auto kern, auto freq) {
    cu_launch_pdl(ctx, "attn_decode_smem", kern, grid, dim3(ADS_THREADS), sm, (__half *)out->data,
                  (const __half *)q->data, (const __half *)kv->k.data, (const __half *)kv->v.data,
                  (const int32_t *)b->d_pos.data, (const int32_t *)b->d_seq.data,
                  (const int32_t *)b->d_block_table.data, b->max_blocks, b->block_size, nt, p->n_heads, p->n_kv_heads,
                  p->scale, p->window, p->softcap, ctx->attn_part, ctx->attn_cnt, NS, C, post ? *post : none,
                  freq CU_TRACE_ARGS(ctx, cu_trace_id(ctx, "attention hd%d n%d splits%d", HD, nt, NS)));
  };
  if (post) {
    g4_rinv rv;
    g4_rinv_make(&rv, post->n_pairs, HD, post->theta, post->factor);
    if (r48) launch(attn_decode_smem_kernel<HD, true, 5>, rv);
    else launch(attn_decode_smem_kernel<HD, true>, rv);
  } else {
    if (r48) launch(attn_decode_smem_kernel<HD, false, 5>, ads_nofreq{});
    else launch(attn_decode_smem_kernel<HD, false>, ads_nofreq{});
  }
  CU_LAUNCHED(ctx, "attn_decode_smem");
  return 0;
}

/* attn_decode (the split-key decode kernel) for any instantiated head dim */
template <typename T, typename KT, int HD>
static void attn_decode_launch(struct hb_ctx *ctx, struct hb_tensor *out, const struct hb_tensor *q,
                               const struct hb_kv_layer *kv, const struct hb_batch *b, const struct hb_attn_params *p,
                               const ads_post *post = NULL) {
  /* a POST instance only where cu_g4_post_attention sends one: f16 at head dim 512 (post is NULL otherwise) */
  constexpr bool P = is_f16<T>::value && is_f16<KT>::value && HD == 512;

  const int nt = b->n_tokens, G = p->n_heads / p->n_kv_heads;
  const int32_t *pos = (const int32_t *)b->d_pos.data, *seq = (const int32_t *)b->d_seq.data,
                *bt = (const int32_t *)b->d_block_table.data;
  const int HG = (G + AD_G - 1) / AD_G;
  const int base = nt * p->n_kv_heads * HG, base1 = (ctx->twin ? 1 : nt) * p->n_kv_heads * HG; /* twins: as one token */
  /* splits: as many as fill the blocks the GPU holds at once, rounded down, so that the launch is one wave (a second,
   * partial wave runs the kernel's whole chain of round trips again: at 32 tokens of the 3B, rounding up gave 3
   * splits, 384 blocks for 264 slots; rounded down, x32 +9 % on the H200, bench/RESULTS.md "Session 36") */
  int occ = 0;
  /* (the occupancy of the plain instance for both: the splits must not depend on the fold, or its bits would not be
   * the plain sequence's) */
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, attn_decode_kernel<T, KT, HD, false>, 128, 0) != cudaSuccess || occ < 1) {
    (void)cudaGetLastError();
    occ = 2;
  }
  int NS = occ * ctx->n_sm / base1;
  NS = NS < 1 ? 1 : (NS > 32 ? 32 : NS);
  size_t need_part = (size_t)nt * p->n_heads * NS * (HD + 2), need_cnt = (size_t)base;
  void *pp = ctx->attn_part, *cp = ctx->attn_cnt;
  if (cu_scratch(ctx, &pp, &ctx->attn_part_cap, need_part, sizeof(float), 0)) return;
  ctx->attn_part = (float *)pp;
  if (cu_scratch(ctx, &cp, &ctx->attn_cnt_cap, need_cnt, sizeof(unsigned), 1)) return;
  ctx->attn_cnt = (unsigned *)cp;
  dim3 grid((unsigned)nt, (unsigned)(p->n_kv_heads * HG), (unsigned)NS);
  const ads_post none = {};
  auto launch = [&](auto kern, auto freq) {
    cu_launch_pdl(ctx, "attn_decode", kern, grid, dim3(128), 0, (T *)out->data, (const T *)q->data,
                  (const KT *)kv->k.data, (const KT *)kv->v.data, pos, seq, bt, b->max_blocks, b->block_size,
                  p->n_heads, p->n_kv_heads, G, HG, p->scale, p->window, p->softcap, ctx->attn_part, ctx->attn_cnt, NS,
                  post ? *post : none, freq);
  };
  if constexpr (P) {
    if (post) {
      g4_rinv rv;
      g4_rinv_make(&rv, post->n_pairs, HD, post->theta, post->factor);
      launch(attn_decode_kernel<T, KT, HD, true>, rv);
      CU_LAUNCHED(ctx, "attn_decode");
      return;
    }
  }
  launch(attn_decode_kernel<T, KT, HD, false>, ads_nofreq{});
  CU_LAUNCHED(ctx, "attn_decode");
}

/* backend.h g4_post_attention: g4_qkv_post folded into the decode attention (the POST instances above) for a decode
 * step of one token a sequence, at head dims 64-256 on attn_decode_smem (Gemma 4's sliding layers) and 512 on
 * attn_decode (its full layers), so that a layer's decode has one launch fewer. 1, with nothing launched, where those
 * kernels would not take the batch (then g4_qkv_post and attention run). */
int cu_g4_post_attention(struct hb_ctx *ctx, struct hb_tensor *out, const struct hb_tensor *q, const struct hb_tensor *k,
                         const struct hb_tensor *v, const struct hb_tensor *q_norm, const struct hb_tensor *k_norm,
                         float eps, struct hb_kv_layer *kv_w, const struct hb_kv_layer *kv, const struct hb_batch *b,
                         const struct hb_attn_params *p, int n_pairs, float theta, float factor) {
  const int nt = b->n_tokens, hd = p->head_dim, nkv = p->n_kv_heads;
  if (nt <= 0 || nt > 8 || b->n_seqs != nt || ctx->twin || ctx->row_invariant || !b->d_pos.data) return 1;
  if ((hd != 64 && hd != 128 && hd != 256 && hd != 512) || nkv <= 0 || p->n_heads % nkv) return 1;
  if (q->dtype != HB_F16 || out->dtype != HB_F16 || kv->k.dtype != HB_F16 || kv->v.dtype != HB_F16 ||
      q->cols != (int64_t)p->n_heads * hd || out->cols != q->cols || q->rows < nt || out->rows < nt ||
      kv->head_dim != hd || kv->n_kv_heads != nkv || q_norm->rows * q_norm->cols != hd)
    return 1;
  if (kv_w && (kv_w->k.data != kv->k.data || kv_w->v.data != kv->v.data || !k || !v || !k_norm ||
               k->dtype != HB_F16 || v->dtype != HB_F16 || k->cols != (int64_t)nkv * hd || v->cols != k->cols ||
               k->rows < nt || v->rows < nt || k_norm->rows * k_norm->cols != hd))
    return 1;
  ads_post pp = {};
  if (kv_w) {
    pp.k = (const __half *)k->data;
    pp.v = (const __half *)v->data;
    pp.kc = (__half *)kv_w->k.data;
    pp.vc = (__half *)kv_w->v.data;
    pp.kw = k_norm->data;
    pp.kwdt = (int)k_norm->dtype;
  }
  pp.qw = q_norm->data;
  pp.qwdt = (int)q_norm->dtype;
  pp.n_pairs = n_pairs < 0 ? 0 : (n_pairs > hd / 2 ? hd / 2 : n_pairs); /* as rope_prop clamps it */
  pp.eps = eps;
  pp.theta = theta;
  pp.factor = factor;
  switch (hd) {
  case 64: return ads_launch<64>(ctx, out, q, kv, b, p, &pp);
  case 128: return ads_launch<128>(ctx, out, q, kv, b, p, &pp);
  case 256: return ads_launch<256>(ctx, out, q, kv, b, p, &pp);
  default: attn_decode_launch<__half, __half, 512>(ctx, out, q, kv, b, p, &pp); return 0; /* as attn_hd runs it */
  }
}

template <typename T, typename KT, int D>
static void attn_launch(struct hb_ctx *ctx, struct hb_tensor *out, const struct hb_tensor *q,
                        const struct hb_kv_layer *kv, const struct hb_batch *b, const struct hb_attn_params *p) {
  constexpr int HD = 32 * D;
  const int nt = b->n_tokens, G = p->n_heads / p->n_kv_heads;
  const int32_t *pos = (const int32_t *)b->d_pos.data, *seq = (const int32_t *)b->d_seq.data,
                *bt = (const int32_t *)b->d_block_table.data;
  /* row-invariant: one kernel for every batch; step twins: the decode kernels, as one-token steps */
  if ((nt >= 8 * (b->n_seqs > 0 ? b->n_seqs : 1) || ctx->row_invariant) && !ctx->twin) {
    if constexpr (is_f16<T>::value && is_f16<KT>::value && HD >= 64) {
      const size_t sm = prefill_mma_smem(HD, HD);
      if (sm <= ctx->smem_optin && (nt + AM_Q - 1) / AM_Q <= 65535) {
        if (CU_OK(ctx, cudaFuncSetAttribute(attn_prefill_mma_kernel<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            (int)sm)))
          return;
        dim3 grid((unsigned)p->n_heads, (unsigned)((nt + AM_Q - 1) / AM_Q));
        attn_prefill_mma_kernel<HD><<<grid, 128, sm, ctx->stream>>>(
            (__half *)out->data, (const __half *)q->data, (const __half *)kv->k.data, (const __half *)kv->v.data, pos,
            seq, bt, b->max_blocks, b->block_size, nt, p->n_heads, p->n_kv_heads, G, p->scale, p->window, p->softcap);
        CU_LAUNCHED(ctx, "attn_prefill_mma");
        return;
      }
    }
    size_t sm = prefill_smem(HD);
    if (sm > ctx->smem_optin) { CU_ARG(ctx, "attention: head_dim %d needs too much shared memory", HD); return; }
    if (CU_OK(ctx, cudaFuncSetAttribute(attn_prefill_kernel<T, KT, HD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int)sm)))
      return;
    dim3 grid((unsigned)((nt + AP_Q - 1) / AP_Q), (unsigned)p->n_heads);
    attn_prefill_kernel<T, KT, HD><<<grid, 128, sm, ctx->stream>>>(
        (T *)out->data, (const T *)q->data, (const KT *)kv->k.data, (const KT *)kv->v.data, pos, seq, bt,
        b->max_blocks, b->block_size, nt, p->n_heads, p->n_kv_heads, G, p->scale, p->window, p->softcap);
    CU_LAUNCHED(ctx, "attn_prefill");
    return;
  }
  if constexpr (is_f16<T>::value && is_f16<KT>::value && HD >= 64) {
    if (!ads_launch<HD>(ctx, out, q, kv, b, p)) return;
  }
  attn_decode_launch<T, KT, HD>(ctx, out, q, kv, b, p);
}

/* prefill at head_dim 512 on tensor cores: two blocks of 256 value dims per (head, 64-query tile), each computing the
 * whole Q·Kᵀ (1.5× the minimal tensor work, against attn_wide's SIMT loop). 1: not launched (shared memory). */
static int am_launch_512(struct hb_ctx *ctx, struct hb_tensor *out, const struct hb_tensor *q,
                         const struct hb_kv_layer *kv, const struct hb_batch *b, const struct hb_attn_params *p) {
  const int nt = b->n_tokens;
  const size_t sm = prefill_mma_smem(512, 256);
  if (sm > ctx->smem_optin || (nt + AM_Q - 1) / AM_Q > 65535) return 1;
  if (CU_OK(ctx, cudaFuncSetAttribute(attn_prefill_mma_kernel<512, 256>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      (int)sm)))
    return 0;
  dim3 grid((unsigned)p->n_heads, (unsigned)((nt + AM_Q - 1) / AM_Q), 2);
  attn_prefill_mma_kernel<512, 256><<<grid, 128, sm, ctx->stream>>>(
      (__half *)out->data, (const __half *)q->data, (const __half *)kv->k.data, (const __half *)kv->v.data,
      (const int32_t *)b->d_pos.data, (const int32_t *)b->d_seq.data, (const int32_t *)b->d_block_table.data,
      b->max_blocks, b->block_size, nt, p->n_heads, p->n_kv_heads, p->n_heads / p->n_kv_heads, p->scale, p->window,
      p->softcap);
  CU_LAUNCHED(ctx, "attn_prefill_mma");
  return 0;
}

template <typename T, typename KT>
static void attn_hd(struct hb_ctx *ctx, struct hb_tensor *out, const struct hb_tensor *q,
                    const struct hb_kv_layer *kv, const struct hb_batch *b, const struct hb_attn_params *p) {
  switch (p->head_dim) {
  case 32: attn_launch<T, KT, 1>(ctx, out, q, kv, b, p); break;
  case 64: attn_launch<T, KT, 2>(ctx, out, q, kv, b, p); break;
  case 128: attn_launch<T, KT, 4>(ctx, out, q, kv, b, p); break;
  case 256: attn_launch<T, KT, 8>(ctx, out, q, kv, b, p); break;
  case 512: /* Gemma 4's full layers: decode on the split-key kernel (one block per head took ~1 ms a layer at 1,570
             * keys, bench/NOTES.md session 27), prefill and row-invariant batches on attn_wide.cu's */
    if ((b->n_tokens < 8 * (b->n_seqs > 0 ? b->n_seqs : 1) && !ctx->row_invariant) || ctx->twin)
      attn_decode_launch<T, KT, 512>(ctx, out, q, kv, b, p);
    else if (!is_f16<T>::value || !is_f16<KT>::value || am_launch_512(ctx, out, q, kv, b, p))
      cu_attention_wide(ctx, out, q, kv, b, p); /* the exact (f32) path */
    break;
  default: cu_attention_wide(ctx, out, q, kv, b, p); /* other multiples of 32: attn_wide.cu */
  }
}

void cu_attention(struct hb_ctx *ctx, struct hb_tensor *out, const struct hb_tensor *q,
                  const struct hb_kv_layer *kv, const struct hb_batch *b, const struct hb_attn_params *p) {
  if (b->n_tokens <= 0) return;
  if (!b->d_pos.data || p->n_kv_heads <= 0 || p->n_heads % p->n_kv_heads || q->dtype != out->dtype ||
      q->cols != (int64_t)p->n_heads * p->head_dim || out->cols != q->cols || kv->k.dtype != kv->v.dtype ||
      kv->head_dim != p->head_dim || kv->n_kv_heads != p->n_kv_heads) {
    CU_ARG(ctx, "attention: shapes/dtypes (q cols %lld, heads %d/%d, hd %d) or batch not uploaded", (long long)q->cols,
           p->n_heads, p->n_kv_heads, p->head_dim);
    return;
  }
  /* (a row whose one-token step takes attn_o: cu_attn_o, which the model calls first, counts it) */
  if (ctx->twin) {
    const int hd = p->head_dim; /* others take attn_wide.cu's kernel, which has no one-token form */
    if (hd != 32 && hd != 64 && hd != 128 && hd != 256 && hd != 512) ctx->twin_bad++;
  }
  if (q->dtype == HB_F16 && kv->k.dtype == HB_F16) attn_hd<__half, __half>(ctx, out, q, kv, b, p);
  else if (q->dtype == HB_F32 && kv->k.dtype == HB_F32) attn_hd<float, float>(ctx, out, q, kv, b, p);
  else if (q->dtype == HB_F16 && kv->k.dtype == HB_F32) attn_hd<__half, float>(ctx, out, q, kv, b, p);
  else if (q->dtype == HB_F32 && kv->k.dtype == HB_F16) attn_hd<float, __half>(ctx, out, q, kv, b, p);
  else CU_ARG(ctx, "attention: dtypes q %d kv %d", (int)q->dtype, (int)kv->k.dtype);
}
