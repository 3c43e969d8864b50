/* backend/cuda/gemv_x.cuh — the decode GEMV's activation layout in shared memory (gemv_q4.cu).
 *
 * x of token t as f16 in shared memory: [n][K]; within each 32-run the 16 half2 words are stored in
 * the order 0,4,1,5,2,6,3,7, 8,12,9,13,10,14,11,15 (the pairs one B fragment takes), and the 16-byte
 * chunk c of run R sits at chunk c ^ swz(R, t), so that the 8 lanes of a load phase (4 runs × 2
 * tokens) hit 8 different bank groups. */
#ifndef HEARTH_BACKEND_CUDA_GEMV_X_CUH
#define HEARTH_BACKEND_CUDA_GEMV_X_CUH

#include <cuda_fp16.h>
#include <stdint.h>

__device__ __forceinline__ int gemv_swz(int R, int t) { return ((R >> 1) ^ (t << 1)) & 3; }

/* chunk k8 (8 elements) of one token's x into `run` (the 32-run holding it, whose swizzle is sw). FOLD (the folded
 * int4 offset, gemv_q4.cu's offset fold): odd chunks are stored / 16, and the chunk's share of its group's correction
 * (1032 Σ x of even chunks, 72 Σ x of odd ones, from the stored values) is returned; 0 otherwise */
template <bool FOLD>
__device__ __forceinline__ float gemv_put_chunk(uint32_t *run, int k8, int sw, uint4 v) {
  float cs = 0.0f;
  if (FOLD) {
    __half2 *h = (__half2 *)&v;
    const bool odd = k8 & 1;
#pragma unroll
    for (int e = 0; e < 4; e++) {
      if (odd) h[e] = __hmul2(h[e], __half2half2(__ushort_as_half((unsigned short)0x2C00))); /* 1/16 */
      const float2 f = __half22float2(h[e]);
      cs += f.x + f.y;
    }
    cs *= odd ? 72.0f * 16.0f : 1032.0f;
  }
  const uint32_t wv[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int e = 0; e < 4; e++) {
    const int w = (k8 % 4) * 4 + e, pos = (w & 8) | ((w & 3) << 1) | ((w >> 2) & 1);
    run[(((pos >> 2) ^ sw) << 2) | (pos & 3)] = wv[e];
  }
  return cs;
}

#endif
