/* backend/cuda/attn_wide.cu — attention over the paged KV cache for the head dims attention.cu's kernels
 * are not instantiated for (Gemma 4's full layers: head_dim 512; any multiple of 32 up to 1024). Correctness
 * before speed: one block per (token, query head), 4 warps; keys in tiles of 32: each warp scores 8 of them
 * (a warp-wide dot product, lanes over the head dims), then every thread updates the online softmax of the
 * tile and accumulates the weighted values of its own dims (threads over dims: coalesced V reads). f32
 * arithmetic whatever the storage type. The grid depends on the batch's shape only and the key range is read
 * on the device (b->d_pos), so a captured decode graph replays correctly as the context grows. The kernels the
 * other head dims take (attention.cu) are not touched. */
#include <math.h>

#include "backend/cuda/cuda_common.cuh"

#define AW_THREADS 128
#define AW_TILE 32
#define AW_MAXD 8 /* dims per thread: head_dim <= AW_THREADS * AW_MAXD */

template <typename T, typename KT>
__global__ __launch_bounds__(AW_THREADS) void attn_wide_kernel(T *out, const T *q, const KT *kc, const KT *vc,
                                                               const int32_t *pos, const int32_t *seq,
                                                               const int32_t *bt, int max_blocks, int bs, int n_heads,
                                                               int n_kv, int hd, float scale, int window,
                                                               float softcap) {
  extern __shared__ float q_s[]; /* [hd] */
  __shared__ float s_sc[AW_TILE];
  const int t = blockIdx.x, h = blockIdx.y, kh = h / (n_heads / n_kv);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int p = pos[t], lo = window > 0 ? max(0, p - window + 1) : 0;
  const int32_t *btr = bt + (int64_t)seq[t] * max_blocks;
  const int64_t kvw = (int64_t)n_kv * hd, hoff = (int64_t)kh * hd;
  for (int d = tid; d < hd; d += AW_THREADS) q_s[d] = ldf(q + ((int64_t)t * n_heads + h) * hd + d) * scale;
  __syncthreads();
  float m = -INFINITY, l = 0.0f, acc[AW_MAXD];
#pragma unroll
  for (int i = 0; i < AW_MAXD; i++) acc[i] = 0.0f;
  for (int kb = lo; kb <= p; kb += AW_TILE) {
    for (int j = warp; j < AW_TILE; j += AW_THREADS / 32) { /* warp-uniform: key is the same in all lanes */
      const int key = kb + j;
      float s = -INFINITY;
      if (key <= p) {
        const KT *kp = kc + ((int64_t)btr[key / bs] * bs + key % bs) * kvw + hoff;
        float dot = 0.0f;
        for (int d = lane; d < hd; d += 32) dot = fmaf(q_s[d], ldf(kp + d), dot);
        dot = warp_sum(dot);
        s = softcap > 0.0f ? softcap * tanhf(dot / softcap) : dot;
      }
      if (lane == 0) s_sc[j] = s;
    }
    __syncthreads();
    float mx = -INFINITY;
    for (int j = 0; j < AW_TILE; j++) mx = fmaxf(mx, s_sc[j]);
    const float mn = fmaxf(m, mx); /* key kb <= p is always scored: mn is finite (or NaN from NaN inputs) */
    const float al = m == -INFINITY ? 0.0f : expf(m - mn);
    l *= al;
#pragma unroll
    for (int i = 0; i < AW_MAXD; i++) acc[i] *= al;
    const int nk = min(AW_TILE, p - kb + 1);
    for (int j = 0; j < nk; j++) {
      const int key = kb + j;
      const float pj = expf(s_sc[j] - mn);
      l += pj;
      const KT *vp = vc + ((int64_t)btr[key / bs] * bs + key % bs) * kvw + hoff;
#pragma unroll
      for (int i = 0; i < AW_MAXD; i++) {
        const int d = tid + i * AW_THREADS;
        if (d < hd) acc[i] = fmaf(pj, ldf(vp + d), acc[i]);
      }
    }
    m = mn;
    __syncthreads(); /* s_sc is rewritten by the next tile */
  }
  T *o = out + ((int64_t)t * n_heads + h) * hd;
#pragma unroll
  for (int i = 0; i < AW_MAXD; i++) {
    const int d = tid + i * AW_THREADS;
    if (d < hd) stf(o + d, acc[i] / l); /* l >= 1: the newest key weighs exp(0) at least once */
  }
}

int cu_attention_wide_covers(int head_dim) {
  return head_dim > 0 && head_dim % 32 == 0 && head_dim <= AW_THREADS * AW_MAXD;
}

template <typename T, typename KT>
static void wide_launch(struct hb_ctx *ctx, struct hb_tensor *out, const struct hb_tensor *q,
                        const struct hb_kv_layer *kv, const struct hb_batch *b, const struct hb_attn_params *p) {
  dim3 grid((unsigned)b->n_tokens, (unsigned)p->n_heads);
  attn_wide_kernel<T, KT><<<grid, AW_THREADS, (size_t)p->head_dim * sizeof(float), ctx->stream>>>(
      (T *)out->data, (const T *)q->data, (const KT *)kv->k.data, (const KT *)kv->v.data,
      (const int32_t *)b->d_pos.data, (const int32_t *)b->d_seq.data, (const int32_t *)b->d_block_table.data,
      b->max_blocks, b->block_size, p->n_heads, p->n_kv_heads, p->head_dim, p->scale, p->window, p->softcap);
  CU_LAUNCHED(ctx, "attn_wide");
}

/* shapes and dtypes were checked by cu_attention */
void cu_attention_wide(struct hb_ctx *ctx, struct hb_tensor *out, const struct hb_tensor *q,
                       const struct hb_kv_layer *kv, const struct hb_batch *b, const struct hb_attn_params *p) {
  if (!cu_attention_wide_covers(p->head_dim) || p->n_heads > 65535) { /* grid (tokens, heads) */
    CU_ARG(ctx, "attention: head_dim %d (supported: multiples of 32 up to %d)", p->head_dim, AW_THREADS * AW_MAXD);
    return;
  }
  if (q->dtype == HB_F16 && kv->k.dtype == HB_F16) wide_launch<__half, __half>(ctx, out, q, kv, b, p);
  else if (q->dtype == HB_F32 && kv->k.dtype == HB_F32) wide_launch<float, float>(ctx, out, q, kv, b, p);
  else if (q->dtype == HB_F16 && kv->k.dtype == HB_F32) wide_launch<__half, float>(ctx, out, q, kv, b, p);
  else if (q->dtype == HB_F32 && kv->k.dtype == HB_F16) wide_launch<float, __half>(ctx, out, q, kv, b, p);
  else CU_ARG(ctx, "attention: dtypes q %d kv %d", (int)q->dtype, (int)kv->k.dtype);
}
