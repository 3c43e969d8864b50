/* backend/cuda/norm_row.cuh — the arithmetic of one RMSNorm row, out = x / sqrt(mean(x^2) + eps) * (w + w_offset),
 * shared by the rmsnorm kernels (norm_rope.cu) and the split-K finish that folds the norm after it (matmul_q4.cu): one
 * definition, so both give the same bits.
 *
 * CG: read x through L2 only (ld.global.cg). The folded finish reads a row that other blocks of the same launch wrote;
 * this multiprocessor's L1 may still hold lines of it from before (the finish's residual add read them), and L1 is not
 * kept coherent with other multiprocessors' stores. */
#pragma once

#include "backend/cuda/cuda_common.cuh"

template <bool CG>
__device__ __forceinline__ float nr_ld(const float *p) {
  return CG ? __ldcg(p) : *p;
}
template <bool CG>
__device__ __forceinline__ float nr_ld(const __half *p) {
  return CG ? __half2float(__ushort_as_half(__ldcg((const unsigned short *)p))) : __half2float(*p);
}
template <bool CG>
__device__ __forceinline__ uint4 nr_ld16(const void *p) {
  return CG ? __ldcg((const uint4 *)p) : *(const uint4 *)p;
}

/* narrow rows (d < 1024): one warp walks the row (lane = its lane) */
template <typename T, bool CG>
__device__ __forceinline__ void rmsnorm_warp_row(T *o, const T *xr, const void *w, int wdt, int d, float eps,
                                                 float w_offset, int lane) {
  float ss = 0.0f;
  for (int j = lane; j < d; j += 32) {
    float v = nr_ld<CG>(xr + j);
    ss += v * v;
  }
  ss = warp_sum(ss);
  float inv = rsqrtf(ss / (float)d + eps);
  for (int j = lane; j < d; j += 32) stf(o + j, nr_ld<CG>(xr + j) * inv * (ld_any(w, wdt, j) + w_offset));
}

/* wide rows (d >= 1024): the whole 256-thread block on one row, f16 rows with d % 8 == 0 16 bytes a load; s_ss: 8
 * floats of shared memory. Ends without a barrier after its last read of s_ss: a caller that runs it again on the same
 * s_ss syncs first. */
template <typename T, bool CG>
__device__ __forceinline__ void rmsnorm_block_row(T *o, const T *xr, const void *w, int wdt, int d, float eps,
                                                  float w_offset, float *s_ss) {
  const bool vec = sizeof(T) == 2 && d % 8 == 0;
  float ss = 0.0f;
  if (vec) {
    for (int j = threadIdx.x * 8; j < d; j += 256 * 8) {
      uint4 u = nr_ld16<CG>(xr + j);
      const __half2 *h = (const __half2 *)&u;
#pragma unroll
      for (int k = 0; k < 4; k++) {
        float2 f = __half22float2(h[k]);
        ss += f.x * f.x + f.y * f.y;
      }
    }
  } else {
    for (int j = threadIdx.x; j < d; j += 256) {
      float v = nr_ld<CG>(xr + j);
      ss += v * v;
    }
  }
  ss = warp_sum(ss);
  if (threadIdx.x % 32 == 0) s_ss[threadIdx.x / 32] = ss;
  __syncthreads();
  float tot = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; i++) tot += s_ss[i];
  const float inv = rsqrtf(tot / (float)d + eps);
  if constexpr (sizeof(T) == 2) {
    /* the scaling pass 16 bytes of x a load as well, the weights 16 or 32 bytes: the 2-byte loop was a chain of
     * d / 256 round trips a thread (8 at d = 2,048), the most of this kernel's time in a decode step of 32 rows */
    if (vec && (wdt == HB_F32 || wdt == HB_F16) && ((uintptr_t)w & 15) == 0) {
      for (int j = threadIdx.x * 8; j < d; j += 256 * 8) {
        const uint4 u = nr_ld16<CG>(xr + j);
        const __half *h = (const __half *)&u;
        float wv[8];
        if (wdt == HB_F32) {
          const float4 a = *(const float4 *)((const float *)w + j), b = *(const float4 *)((const float *)w + j + 4);
          wv[0] = a.x; wv[1] = a.y; wv[2] = a.z; wv[3] = a.w; wv[4] = b.x; wv[5] = b.y; wv[6] = b.z; wv[7] = b.w;
        } else {
          const uint4 wu = *(const uint4 *)((const __half *)w + j);
          const __half *wh = (const __half *)&wu;
#pragma unroll
          for (int k = 0; k < 8; k++) wv[k] = __half2float(wh[k]);
        }
        uint4 ov;
        __half *oh = (__half *)&ov;
#pragma unroll
        for (int k = 0; k < 8; k++) oh[k] = __float2half_rn(__half2float(h[k]) * inv * (wv[k] + w_offset));
        *(uint4 *)(o + j) = ov;
      }
      return;
    }
  }
  for (int j = threadIdx.x; j < d; j += 256) stf(o + j, nr_ld<CG>(xr + j) * inv * (ld_any(w, wdt, j) + w_offset));
}
