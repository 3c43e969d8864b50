/* backend/cuda/sample.cu — token selection on the device: greedy argmax (first index on ties) and
 * the log-probability of the chosen id, one block per logits row, so only ids (and the requested
 * logprobs) cross the bus. Top-k/top-p sampling is not here yet (bench/NOTES.md). */
#include <math.h>

#include "backend/cuda/cuda_common.cuh"

template <typename T>
__global__ __launch_bounds__(1024) void argmax_kernel(const T *logits, int64_t vocab, int32_t *ids, void *lp, int lp_half) {
  pdl_trigger();
  __shared__ float s_v[32];
  __shared__ int s_i[32];
  __shared__ float s_sum[32];
  const T *row = logits + (int64_t)blockIdx.x * vocab;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float best = -INFINITY;
  int bi = 0x7fffffff;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
    float v = ldf(row + i);
    if (v > best) { best = v; bi = (int)i; } /* i increases: the first max stays */
  }
  for (int o = 16; o > 0; o >>= 1) {
    float ov = __shfl_xor_sync(0xffffffffu, best, o);
    int oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (ov > best || (ov == best && oi < bi)) { best = ov; bi = oi; }
  }
  if (lane == 0) { s_v[warp] = best; s_i[warp] = bi; }
  __syncthreads();
  if (warp == 0) {
    int nw = blockDim.x / 32;
    best = lane < nw ? s_v[lane] : -INFINITY;
    bi = lane < nw ? s_i[lane] : 0x7fffffff;
    for (int o = 16; o > 0; o >>= 1) {
      float ov = __shfl_xor_sync(0xffffffffu, best, o);
      int oi = __shfl_xor_sync(0xffffffffu, bi, o);
      if (ov > best || (ov == best && oi < bi)) { best = ov; bi = oi; }
    }
    if (lane == 0) { s_v[0] = best; s_i[0] = bi; }
  }
  __syncthreads();
  const float mx = s_v[0];
  if (!lp) {
    if (threadIdx.x == 0) ids[blockIdx.x] = s_i[0];
    return;
  }
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) sum += expf(ldf(row + i) - mx);
  sum = warp_sum(sum);
  if (lane == 0) s_sum[warp] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    float tot = 0.0f;
    for (int w = 0; w < (int)blockDim.x / 32; w++) tot += s_sum[w];
    ids[blockIdx.x] = s_i[0];
    float v = -logf(tot); /* log_softmax at the max: (mx - mx) - log(sum) */
    if (lp_half) ((__half *)lp)[blockIdx.x] = __float2half_rn(v);
    else ((float *)lp)[blockIdx.x] = v;
  }
}

void cu_argmax(struct hb_ctx *ctx, const struct hb_tensor *logits, int n, struct hb_tensor *ids,
               struct hb_tensor *logprobs) {
  if (n <= 0) return;
  if (ids->dtype != HB_I32 || ids->rows * ids->cols < n || logits->rows < n ||
      (logprobs && ((logprobs->dtype != HB_F32 && logprobs->dtype != HB_F16) || logprobs->rows * logprobs->cols < n))) {
    CU_ARG(ctx, "argmax: ids must be I32 and logprobs F32 with >= %d elements", n);
    return;
  }
  void *lp = logprobs ? logprobs->data : NULL;
  int lph = logprobs && logprobs->dtype == HB_F16;
  if (logits->dtype == HB_F16)
    argmax_kernel<__half><<<n, 1024, 0, ctx->stream>>>((const __half *)logits->data, logits->cols,
                                                       (int32_t *)ids->data, lp, lph);
  else if (logits->dtype == HB_F32)
    argmax_kernel<float><<<n, 1024, 0, ctx->stream>>>((const float *)logits->data, logits->cols, (int32_t *)ids->data,
                                                      lp, lph);
  else { CU_ARG(ctx, "argmax: logits dtype %d", (int)logits->dtype); return; }
  CU_LAUNCHED(ctx, "argmax");
}
