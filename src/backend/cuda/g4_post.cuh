/* backend/cuda/g4_post.cuh — one warp's share of Gemma 4's per-head post-projection step (backend.h g4_qkv_post:
 * rmsnorm with the head's norm weights, proportional RoPE, rounded to the activation type as the plain kernels
 * round), split into what can run before griddepcontrol.wait (the norm weights, the rotation's sin and cos) and
 * what needs the head's values. Two kernels run it: gemma4_fused.cu's g4_qkv_post and attention.cu's decode
 * attention with the step folded in (cu_g4_post_attention). One definition keeps their bits the same, and the
 * plain ops' (rmsnorm_kernel: lane-strided sum then warp_sum; rope_prop_kernel: rope_prop_lo / _hi). Lane l holds
 * dims l + 32 j, so a rotation pair (i, i + hd/2) sits in one lane when hd/2 is a multiple of 32. */
#pragma once

#include "backend/cuda/cuda_common.cuh"

#define QP_MAXJ 16 /* values per lane: head_dim <= 512 */

/* the inverse frequencies 1 / theta^(2i/hd) / factor, i < n_pairs, made on the host by rope_prop_kernel's formula
 * (rope_pow: pow in double, rounded to float), so the kernel has no double pow on its chain; a kernel argument */
struct g4_rinv { float v[256]; };

/* the host's table (n_pairs already clamped to [0, hd/2]) */
static inline void g4_rinv_make(g4_rinv *r, int n_pairs, int hd, float theta, float factor) {
  for (int i = 0; i < n_pairs; i++) /* rope_prop_kernel's expression, with rope_pow's pow in double on the host */
    r->v[i] = 1.0f / (float)pow((double)theta, (double)((float)(2 * i) / (float)hd)) / factor;
}

/* before the wait: the lane's norm weights (w NULL: none, v's norm) and, when rot, the sin and cos of its pairs at
 * position p; freq(i) is pair i's inverse frequency (the host's table, or rope_pow's expression on the device) */
template <typename F>
__device__ __forceinline__ void g4_post_pre(float wn[QP_MAXJ], float sn[QP_MAXJ / 2], float cs[QP_MAXJ / 2],
                                            const void *w, int wdt, bool rot, int p, F freq, int nj, int n_pairs,
                                            int lane) {
#pragma unroll
  for (int j = 0; j < QP_MAXJ; j++) wn[j] = w && j < nj ? ld_any(w, wdt, lane + 32 * j) + 0.0f : 1.0f;
#pragma unroll
  for (int j = 0; j < QP_MAXJ / 2; j++) {
    sn[j] = 0.0f;
    cs[j] = 1.0f;
    if (rot && 2 * j < nj && lane + 32 * j < n_pairs) sincosf((float)p * freq(lane + 32 * j), &sn[j], &cs[j]);
  }
}

/* after it: x[j] (j < nj = hd / 32) holds the head's values; normed (·wn), rounded to T, turned when rot, rounded
 * to T again */
template <typename T>
__device__ __forceinline__ void g4_post_apply(float x[QP_MAXJ], const float wn[QP_MAXJ], const float sn[QP_MAXJ / 2],
                                              const float cs[QP_MAXJ / 2], int nj, int hd, int n_pairs, float eps,
                                              bool rot, int lane) {
  float ss = 0.0f;
#pragma unroll
  for (int j = 0; j < QP_MAXJ; j++)
    if (j < nj) ss += x[j] * x[j];
  ss = warp_sum(ss);
  const float inv = rsqrtf(ss / (float)hd + eps);
#pragma unroll
  for (int j = 0; j < QP_MAXJ; j++)
    if (j < nj) x[j] = rnd<T>(x[j] * inv * wn[j]);
  if (!rot) return;
#pragma unroll
  for (int j = 0; j < QP_MAXJ / 2; j++) { /* pairs (i, i + hd/2), i < n_pairs */
    const int i = lane + 32 * j;
    if (2 * j >= nj || i >= n_pairs) continue;
    const int j2 = j + hd / 64;
    const float a = x[j], b = x[j2];
    x[j] = rnd<T>(rope_prop_lo(a, b, cs[j], sn[j]));
    x[j2] = rnd<T>(rope_prop_hi(a, b, cs[j], sn[j]));
  }
}
