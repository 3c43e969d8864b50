/* backend/cpu/ops_avx2.c — AVX2 (+FMA, F16C) kernels over the q4x16 layout: the same arithmetic as
 * ops_avx512.c with 8-row half blocks (one ymm = rows 0-7 or rows 8-15 of a 64-byte chunk) and
 * PMADDUBSW + PMADDWD in place of VPDPBUSD (u8 nibbles <= 15 times s8 activation planes: the 16-bit
 * pair sums cannot saturate). Built without -mavxvnni (CMakeLists.txt), so the set runs on every AVX2 CPU.
 * Also the flash attention and SiLU of kern_impl.h vectorized with AVX2.
 *
 * ops_avxvnni.c compiles this file again with AVX2_VNNI = 1: the "avx2-vnni" set, for CPUs with AVX-VNNI but no
 * AVX-512 (Intel Alder Lake and later client cores). There the planes' integer dots are VEX VPDPBUSD (planes_dot)
 * for every batch size, and the int16 prefill below is left out. Same integers, same f32 steps: same bits. */
#ifndef AVX2_VNNI
#define AVX2_VNNI 0
#endif
#if defined(__x86_64__)
#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/q4x16.h"
#include "base/cpu_features.h"

#define KERN_NAME(x) avx2_##x
#include "backend/cpu/kern_impl.h"

static inline float hmax8(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}

static inline int32_t hsum8i(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

/* 32 int32 -> 32 int8 in order: packs work per 128-bit lane, then fix the lane order */
static inline void store32_i8(int8_t *o, const __m256i *q) {
  __m256i p01 = _mm256_packs_epi32(q[0], q[1]), p23 = _mm256_packs_epi32(q[2], q[3]);
  __m256i b = _mm256_packs_epi16(p01, p23);
  b = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256((__m256i *)o, b);
}

static void avx2_q8_quantize(const float *x, int64_t ldx, int t0, int t1, const struct cpu_q8 *a) {
  const int64_t cols = a->cols, G = cols / 128;
  const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256i lim = _mm256_set1_epi32(Q8_VMAX), nlim = _mm256_set1_epi32(-Q8_VMAX),
                half = _mm256_set1_epi32(128);
  const float vmax = (float)Q8_VMAX;
  for (int t = t0; t < t1; t++) {
    const float *xt = x + t * ldx;
    int8_t *q = a->q + t * cols, *lo = a->lo + t * cols;
    for (int64_t g = 0; g < G; g++) {
      const float *xg = xt + g * 128;
      __m256 m = _mm256_setzero_ps();
      for (int i = 0; i < 16; i++) m = _mm256_max_ps(m, _mm256_and_ps(_mm256_loadu_ps(xg + 8 * i), absmask));
      float amax = hmax8(m);
      float id = amax > 0.0f ? vmax / amax : 0.0f;
      __m256 vid = _mm256_set1_ps(id);
      __m256i sum = _mm256_setzero_si256();
      for (int i = 0; i < 16; i += 4) {
        __m256i qh[4], ql[4], vv[4];
        for (int k = 0; k < 4; k++) {
          __m256i v = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xg + 8 * (i + k)), vid));
          v = _mm256_max_epi32(_mm256_min_epi32(v, lim), nlim);
          sum = _mm256_add_epi32(sum, v);
          vv[k] = v;
          qh[k] = _mm256_srai_epi32(_mm256_add_epi32(v, half), 8);
          ql[k] = _mm256_sub_epi32(v, _mm256_slli_epi32(qh[k], 8));
        }
        store32_i8(q + g * 128 + 8 * i, qh);
        store32_i8(lo + g * 128 + 8 * i, ql);
        if (a->v16) { /* packs work per 128-bit lane: 0xd8 puts the four 64-bit quarters back in order */
          int16_t *o = a->v16 + t * cols + g * 128 + 8 * i;
          _mm256_storeu_si256((__m256i *)o, _mm256_permute4x64_epi64(_mm256_packs_epi32(vv[0], vv[1]), 0xd8));
          _mm256_storeu_si256((__m256i *)(o + 16), _mm256_permute4x64_epi64(_mm256_packs_epi32(vv[2], vv[3]), 0xd8));
        }
      }
      a->s[t * G + g] = amax / vmax;
      a->c[t * G + g] = -8 * hsum8i(sum);
    }
  }
}

static inline __m256i bc32(const int8_t *p) {
  int32_t v;
  memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

/* acc + the exact integer dot of 8 rows' 16 k (two chunks: nibble vectors lo0/hi0, lo1/hi1) with one token's
 * planes at h8 (hi) and l8 (lo): 256 * sum(u * hi) + sum(u * lo). Without VNNI: PMADDUBSW pair sums of the two
 * chunks added in 16 bits (|u * hi| pairs <= 2*15*127, |u * lo| pairs <= 2*15*128: four stay below 15,400),
 * then PMADDWD widens the hi plane with a factor 256 and the lo plane with 1. With AVX-VNNI: four VPDPBUSD per
 * plane from zero (|sum| <= 16 * 15 * 128), the hi sum shifted by 8. */
static inline __attribute__((always_inline)) __m256i planes_dot(__m256i acc, __m256i lo0, __m256i hi0, __m256i lo1,
                                                                __m256i hi1, const int8_t *h8, const int8_t *l8) {
#if AVX2_VNNI
  const __m256i z = _mm256_setzero_si256();
  __m256i sh = _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(z, lo0, bc32(h8)), hi0, bc32(h8 + 4));
  __m256i sl = _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(z, lo0, bc32(l8)), hi0, bc32(l8 + 4));
  sh = _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(sh, lo1, bc32(h8 + 8)), hi1, bc32(h8 + 12));
  sl = _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(sl, lo1, bc32(l8 + 8)), hi1, bc32(l8 + 12));
  return _mm256_add_epi32(acc, _mm256_add_epi32(_mm256_slli_epi32(sh, 8), sl));
#else
  const __m256i ones = _mm256_set1_epi16(1), k256 = _mm256_set1_epi16(256);
  __m256i ph = _mm256_add_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(lo0, bc32(h8)), _mm256_maddubs_epi16(hi0, bc32(h8 + 4))),
                                _mm256_add_epi16(_mm256_maddubs_epi16(lo1, bc32(h8 + 8)), _mm256_maddubs_epi16(hi1, bc32(h8 + 12))));
  __m256i pl = _mm256_add_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(lo0, bc32(l8)), _mm256_maddubs_epi16(hi0, bc32(l8 + 4))),
                                _mm256_add_epi16(_mm256_maddubs_epi16(lo1, bc32(l8 + 8)), _mm256_maddubs_epi16(hi1, bc32(l8 + 12))));
  return _mm256_add_epi32(acc, _mm256_add_epi32(_mm256_madd_epi16(ph, k256), _mm256_madd_epi16(pl, ones)));
#endif
}

/* One 8-row half block (h = 0 or 1) of a 16-row block against 2 <= T <= 4 tokens (the AVX2 set: batches of 2..11
 * tokens, larger ones take w16_tile below; the avx2-vnni set: every batch of 2 or more; one token: block_one). Per token one int32 accumulator of the exact integer dot 256*sum(u*hi) +
 * sum(u*lo) + c (planes_dot): one accumulator per token (not one per plane) leaves registers for the 4-token
 * tile; ~10 % faster than two accumulators (bench/RESULTS.md, issue 35). */
/* A decode (T = 1, block_one below) streams the weights from memory once, prefetching every 64-byte line
 * DEC_PREFETCH_AMD bytes ahead on AMD, DEC_PREFETCH on other vendors (on into the next block: a thread's blocks are
 * contiguous).
 * One thread over the 136 MB LM head (Zen 5, HEARTH_CPU=avx2, machine busy): 18-19 GB/s without,
 * 30-31 GB/s at +8 KiB, 29.6 at +12 KiB. Since decode takes a block in one pass (2026-12-04, Xeon model 167, 2
 * threads, 0.5B tg128): 86-88 tok/s at +1 KiB, 91-92 at +2 KiB, 89-92 at +4 KiB, 87 at +8 and +16 KiB; 3B tg48:
 * 14.8-15.0 at +2 KiB, 14.0-14.6 at +4, 11.1-11.4 at +8, 11.7-11.8 at +12.
 * Prefetching never faults past the end of the weights. */
#ifndef DEC_PREFETCH
#define DEC_PREFETCH 2048
#endif
/* Zen 5 (session 42, the 32-k decode step): 3B tg48 at 2 threads, HEARTH_CPU=avx2, 8 KiB against 2 KiB
 * (bench/cpu_pairs.sh, 8 pairs): 1.094 [0.966..1.112] and 1.048 [0.923..1.134]. The Xeon above lost 25 % at +8 KiB. */
#ifndef DEC_PREFETCH_AMD
#define DEC_PREFETCH_AMD 8192
#endif

static inline __attribute__((always_inline)) void half_tile(const uint8_t *qp, const uint16_t *dp,
                                                            const struct cpu_q8 *a, int t0, const int T,
                                                            int64_t G, int h, __m256 *res) {
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  const int64_t cols = a->cols;
  __m256 facc[4];
  for (int t = 0; t < T; t++) facc[t] = _mm256_setzero_ps();
  for (int64_t g = 0; g < G; g++) {
    __m256i acc[4];
    const int8_t *xh[4], *xl[4];
    for (int t = 0; t < T; t++) {
      acc[t] = _mm256_set1_epi32(a->c[(t0 + t) * G + g]);
      xh[t] = a->q + (t0 + t) * cols + g * 128;
      xl[t] = a->lo + (t0 + t) * cols + g * 128;
    }
    const uint8_t *qg = qp + g * 1024 + h * 32;
    for (int c = 0; c < 16; c += 2) {
      __m256i v0 = _mm256_loadu_si256((const __m256i *)(qg + c * 64));
      __m256i v1 = _mm256_loadu_si256((const __m256i *)(qg + c * 64 + 64));
      __m256i lo0 = _mm256_and_si256(v0, m4), hi0 = _mm256_and_si256(_mm256_srli_epi16(v0, 4), m4);
      __m256i lo1 = _mm256_and_si256(v1, m4), hi1 = _mm256_and_si256(_mm256_srli_epi16(v1, 4), m4);
      for (int t = 0; t < T; t++) acc[t] = planes_dot(acc[t], lo0, hi0, lo1, hi1, xh[t] + c * 8, xl[t] + c * 8);
    }
    __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(dp + g * 16 + h * 8)));
    for (int t = 0; t < T; t++) {
      __m256 sc = _mm256_mul_ps(d, _mm256_set1_ps(a->s[(t0 + t) * G + g]));
      facc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[t]), sc, facc[t]);
    }
  }
  for (int t = 0; t < T; t++) res[t] = facc[t];
}

/* rows [base, base + 8) of T tokens from r[t] into out, only those inside [r0, r1) */
static inline void store_rows8(float *out, int64_t ldo, int t0, int T, int64_t base, int64_t r0, int64_t r1,
                               const __m256 *r) {
  for (int t = 0; t < T; t++) {
    float *o = out + (int64_t)(t0 + t) * ldo;
    if (base >= r0 && base + 8 <= r1) {
      _mm256_storeu_ps(o + base, r[t]);
    } else {
      float tmp[8];
      _mm256_storeu_ps(tmp, r[t]);
      for (int l = 0; l < 8; l++)
        if (base + l >= r0 && base + l < r1) o[base + l] = tmp[l];
    }
  }
}

/* acc += prod in 16 bits (VPADDW), kept in acc's register: gcc 12 reassociates a chain of _mm256_add_epi16 into a
 * tree and spills its partial sums (block_one's 32-k step: ~30 stack stores a pass without this) */
#define ACC_ADDW(acc, prod) __asm__("vpaddw %1, %0, %0" : "+x"(acc) : "x"(prod))

/* One token against a whole 16-row block (decode): half_tile's arithmetic for both halves in one pass over the
 * block's bytes, so that the weight stream from memory never pauses. Two passes (rows 0-7, then 8-15 from cache)
 * left memory idle during the second: decode at 62-66 % of the probed floor on 2 threads. Same integer sums and
 * f32 steps per row as half_tile, so the same bits.
 * Without VNNI a step takes 32 k (four chunks): per half and plane eight PMADDUBSW pair sums added in 16 bits (|u *
 * s8| pairs <= 2*15*128 = 3,840: eight stay below 32,767) before one PMADDWD, so the widening and the 32-bit adds
 * are paid once per 32 k instead of per 16, and each activation broadcast serves both halves at once (session 42:
 * one thread, the 3B's 4,864 x 2,048 gate shape from L3: 61 -> 69 GMAC/s; 3B tg48 at 2 threads +2.6 %, paired). */

static inline __attribute__((always_inline)) void block_one(const uint8_t *qp, const uint16_t *dp, const struct cpu_q8 *a,
                                                            int t, int64_t G, int pf, __m256 *res) {
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  const int64_t cols = a->cols;
  __m256 f0 = _mm256_setzero_ps(), f1 = _mm256_setzero_ps();
  for (int64_t g = 0; g < G; g++) {
    __m256i acc[2];
    acc[0] = acc[1] = _mm256_set1_epi32(a->c[t * G + g]);
    const int8_t *xh = a->q + t * cols + g * 128, *xl = a->lo + t * cols + g * 128;
    const uint8_t *qg = qp + g * 1024;
#if !AVX2_VNNI
    for (int c = 0; c < 16; c += 4) {
      for (int i = 0; i < 4; i++) _mm_prefetch((const char *)(qg + (c + i) * 64 + pf), _MM_HINT_T0);
      __m256i ph0, pl0, ph1, pl1;
#pragma GCC unroll 4
      for (int i = 0; i < 4; i++) {
        const int8_t *h8 = xh + (c + i) * 8, *l8 = xl + (c + i) * 8;
        const __m256i v0 = _mm256_loadu_si256((const __m256i *)(qg + (c + i) * 64)),
                      v1 = _mm256_loadu_si256((const __m256i *)(qg + (c + i) * 64 + 32));
        const __m256i a0 = _mm256_and_si256(v0, m4), b0 = _mm256_and_si256(_mm256_srli_epi16(v0, 4), m4);
        const __m256i a1 = _mm256_and_si256(v1, m4), b1 = _mm256_and_si256(_mm256_srli_epi16(v1, 4), m4);
        const __m256i xh0 = bc32(h8), xh1 = bc32(h8 + 4), xl0 = bc32(l8), xl1 = bc32(l8 + 4);
        if (i == 0) {
          ph0 = _mm256_maddubs_epi16(a0, xh0);
          ph1 = _mm256_maddubs_epi16(a1, xh0);
          pl0 = _mm256_maddubs_epi16(a0, xl0);
          pl1 = _mm256_maddubs_epi16(a1, xl0);
        } else {
          ACC_ADDW(ph0, _mm256_maddubs_epi16(a0, xh0));
          ACC_ADDW(ph1, _mm256_maddubs_epi16(a1, xh0));
          ACC_ADDW(pl0, _mm256_maddubs_epi16(a0, xl0));
          ACC_ADDW(pl1, _mm256_maddubs_epi16(a1, xl0));
        }
        ACC_ADDW(ph0, _mm256_maddubs_epi16(b0, xh1));
        ACC_ADDW(ph1, _mm256_maddubs_epi16(b1, xh1));
        ACC_ADDW(pl0, _mm256_maddubs_epi16(b0, xl1));
        ACC_ADDW(pl1, _mm256_maddubs_epi16(b1, xl1));
      }
      const __m256i ones = _mm256_set1_epi16(1), k256 = _mm256_set1_epi16(256);
      acc[0] = _mm256_add_epi32(acc[0], _mm256_add_epi32(_mm256_madd_epi16(ph0, k256), _mm256_madd_epi16(pl0, ones)));
      acc[1] = _mm256_add_epi32(acc[1], _mm256_add_epi32(_mm256_madd_epi16(ph1, k256), _mm256_madd_epi16(pl1, ones)));
    }
#else
    for (int c = 0; c < 16; c += 2) {
      _mm_prefetch((const char *)(qg + c * 64 + pf), _MM_HINT_T0);
      _mm_prefetch((const char *)(qg + c * 64 + 64 + pf), _MM_HINT_T0);
      const int8_t *h8 = xh + c * 8, *l8 = xl + c * 8;
      for (int h = 0; h < 2; h++) {
        __m256i v0 = _mm256_loadu_si256((const __m256i *)(qg + c * 64 + h * 32));
        __m256i v1 = _mm256_loadu_si256((const __m256i *)(qg + c * 64 + 64 + h * 32));
        __m256i lo0 = _mm256_and_si256(v0, m4), hi0 = _mm256_and_si256(_mm256_srli_epi16(v0, 4), m4);
        __m256i lo1 = _mm256_and_si256(v1, m4), hi1 = _mm256_and_si256(_mm256_srli_epi16(v1, 4), m4);
        acc[h] = planes_dot(acc[h], lo0, hi0, lo1, hi1, h8, l8);
      }
    }
#endif
    __m256 sc = _mm256_set1_ps(a->s[t * G + g]);
    f0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[0]), _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(dp + g * 16))), sc), f0);
    f1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[1]), _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(dp + g * 16 + 8))), sc), f1);
  }
  res[0] = f0;
  res[1] = f1;
}

static void avx2_matmul_planes(const struct cpu_q4 *w, const struct cpu_q8 *a, int n, int64_t r0,
                               int64_t r1, float *out, int64_t ldo) {
  if (r0 >= r1 || n <= 0) return;
  const int64_t G = w->cols / 128, b0 = r0 / 16, b1 = (r1 + 15) / 16;
  int64_t panel = (256 * 1024) / (w->cols * 8);
  if (panel < 1) panel = 1;
  const int pf = cpu_features_get()->amd ? DEC_PREFETCH_AMD : DEC_PREFETCH;
  __m256 res[4];
  for (int64_t p0 = b0; p0 < b1; p0 += panel) {
    int64_t p1 = p0 + panel < b1 ? p0 + panel : b1;
    for (int t0 = 0; t0 < n; t0 += 4) {
      int T = n - t0 < 4 ? n - t0 : 4;
      for (int64_t b = p0; b < p1; b++) {
        const uint8_t *qp = q4x16_quants(w, b);
        const uint16_t *dp = q4x16_scales(w, b);
        if (T == 1) { /* both halves in one pass */
          block_one(qp, dp, a, t0, G, pf, res);
          store_rows8(out, ldo, t0, 1, b * 16, r0, r1, res);
          store_rows8(out, ldo, t0, 1, b * 16 + 8, r0, r1, res + 1);
          continue;
        }
        for (int h = 0; h < 2; h++) {
          int64_t base = b * 16 + h * 8;
          if (base + 8 <= r0 || base >= r1) continue;
          switch (T) {
          case 2: half_tile(qp, dp, a, t0, 2, G, h, res); break;
          case 3: half_tile(qp, dp, a, t0, 3, G, h, res); break;
          default: half_tile(qp, dp, a, t0, 4, G, h, res); break;
          }
          store_rows8(out, ldo, t0, T, base, r0, r1, res);
        }
      }
    }
  }
}


#if !AVX2_VNNI
/* ---- prefill: the weights as int16, one PMADDWD per 16 products ------------------------------------------------------
 * Why: with two int8 planes a 16-bit product costs a PMADDUBSW per plane and the planes' sums a PMADDWD each to
 * widen (10 multiply-port instructions and 8 adds per token and 128 products, half_tile above). With the nibbles
 * widened to int16 and v itself in int16 (cpu_q8.v16), PMADDWD forms the 32-bit pair sums directly: 8 multiplies
 * and 8 adds. Widening the nibbles costs about two tokens' worth of work per block, so it pays from a few tokens
 * on and is done once per block for all the tokens of the call: from 12 tokens on it is even or ahead (one thread,
 * 0.5B shapes: 0.4x of the planes at 2 tokens, 0.85x at 6-8, 1.03-1.08x at 12, 1.07-1.14x at 16, 1.25-1.35x at 64-512).
 * Same integers per (row, token, group) as half_tile — S = c + sum(u * v), exact in int32 — and the same f32 steps
 * in the same order, so a token's outputs are the same bits by either path, alone or in any batch. */
#ifndef W16_MIN_TOKENS
#define W16_MIN_TOKENS 12
#endif
#define W16_T 6 /* tokens a tile: 12 int32 accumulators, 2 weight vectors, a broadcast, a product */
#define W16_PANEL_BYTES (256 * 1024)   /* widened blocks per panel: half of a Zen 3 core's L2 */

/* Block b's nibbles for all K, widened: for chunk c (the block's k = 8c .. 8c + 7) four pair steps p (k = 8c + 2p,
 * +1), each two ymm (rows 0-7, rows 8-15) whose 32-bit lane r holds (u[r][k], u[r][k + 1]) as int16, k low.
 * The q4x16 chunk holds, per row, 4 bytes: the low nibbles are k 0-3 of the chunk, the high ones k 4-7. */
static void w16_unpack(const uint8_t *qp, int64_t G, int16_t *dst) {
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  const __m256i pairs = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15,
                                         0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
  for (int64_t c = 0; c < G * 16; c++)
    for (int h = 0; h < 2; h++) {
      __m256i v = _mm256_loadu_si256((const __m256i *)(qp + c * 64 + h * 32));
      /* per 128-bit lane (4 rows): the rows' (k0, k1) bytes, then their (k2, k3); 0xd8 joins the lanes' halves so
       * the low 128 bits are rows 0-7's first pair and the high 128 their second */
      __m256i lo = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(_mm256_and_si256(v, m4), pairs), 0xd8);
      __m256i hi = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4), pairs), 0xd8);
      int16_t *o = dst + c * 128 + h * 16; /* pair step p of chunk c at (4c + p) * 32 int16 */
      _mm256_store_si256((__m256i *)(o + 0), _mm256_cvtepu8_epi16(_mm256_castsi256_si128(lo)));
      _mm256_store_si256((__m256i *)(o + 32), _mm256_cvtepu8_epi16(_mm256_extracti128_si256(lo, 1)));
      _mm256_store_si256((__m256i *)(o + 64), _mm256_cvtepu8_epi16(_mm256_castsi256_si128(hi)));
      _mm256_store_si256((__m256i *)(o + 96), _mm256_cvtepu8_epi16(_mm256_extracti128_si256(hi, 1)));
    }
}

/* acc += prod (VPADDD) written so that the sum stays in acc's register: gcc 12 adds into the product's register
 * and copies it back, 8 extra moves a step of w16_tile and ~25 % of its time */
#define ACC_ADD(acc, prod) __asm__("vpaddd %1, %0, %0" : "+x"(acc) : "x"(prod))

static inline __m256i bc16x2(const int16_t *p) {
  int32_t v;
  memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

/* One widened 16-row block against T <= W16_T tokens; res[h * W16_T + t] = rows 8h .. 8h + 7 of token t0 + t
 * (memory: the registers hold the integer accumulators). */
static inline __attribute__((always_inline)) void w16_tile(const int16_t *wb, const uint16_t *dp, const struct cpu_q8 *a,
                                                           int t0, const int T, int64_t G, __m256 *res) {
  const int64_t cols = a->cols;
  for (int t = 0; t < T; t++) res[t] = res[W16_T + t] = _mm256_setzero_ps();
  for (int64_t g = 0; g < G; g++) {
    __m256i acc0[W16_T], acc1[W16_T];
    const int16_t *xv[W16_T];
#pragma GCC unroll 6
    for (int t = 0; t < T; t++) {
      acc0[t] = acc1[t] = _mm256_set1_epi32(a->c[(t0 + t) * G + g]);
      xv[t] = a->v16 + (t0 + t) * cols + g * 128;
    }
    const int16_t *wg = wb + g * 2048;
    for (int p = 0; p < 64; p++) {
      __m256i w0 = _mm256_load_si256((const __m256i *)(wg + p * 32)),
              w1 = _mm256_load_si256((const __m256i *)(wg + p * 32 + 16));
#pragma GCC unroll 6
    for (int t = 0; t < T; t++) {
        __m256i b = bc16x2(xv[t] + 2 * p);
        ACC_ADD(acc0[t], _mm256_madd_epi16(w0, b));
        ACC_ADD(acc1[t], _mm256_madd_epi16(w1, b));
      }
    }
    __m256 d0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(dp + g * 16))),
           d1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(dp + g * 16 + 8)));
#pragma GCC unroll 6
    for (int t = 0; t < T; t++) {
      __m256 s = _mm256_set1_ps(a->s[(t0 + t) * G + g]);
      res[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc0[t]), _mm256_mul_ps(d0, s), res[t]);
      res[W16_T + t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc1[t]), _mm256_mul_ps(d1, s), res[W16_T + t]);
    }
  }
}

static int avx2_matmul_w16(const struct cpu_q4 *w, const struct cpu_q8 *a, int n, int64_t r0, int64_t r1, float *out,
                           int64_t ldo) {
  const int64_t cols = w->cols, G = cols / 128, b0 = r0 / 16, b1 = (r1 + 15) / 16;
  const size_t per_blk = (size_t)cols * 32;
  int64_t panel = (int64_t)(W16_PANEL_BYTES / per_blk);
  if (panel < 1) panel = 1;
  if (panel > b1 - b0) panel = b1 - b0;
  int16_t *scr = aligned_alloc(64, (size_t)panel * per_blk);
  if (!scr) return -1;
  __m256 res[2 * W16_T];
  for (int64_t p0 = b0; p0 < b1; p0 += panel) {
    const int64_t p1 = p0 + panel < b1 ? p0 + panel : b1;
    for (int64_t b = p0; b < p1; b++) w16_unpack(q4x16_quants(w, b), G, scr + (size_t)(b - p0) * per_blk / 2);
    for (int t0 = 0; t0 < n; t0 += W16_T) {
      const int T = n - t0 < W16_T ? n - t0 : W16_T;
      for (int64_t b = p0; b < p1; b++) {
        const int16_t *wb = scr + (size_t)(b - p0) * per_blk / 2;
        const uint16_t *dp = q4x16_scales(w, b);
        switch (T) {
        case 1: w16_tile(wb, dp, a, t0, 1, G, res); break;
        case 2: w16_tile(wb, dp, a, t0, 2, G, res); break;
        case 3: w16_tile(wb, dp, a, t0, 3, G, res); break;
        case 4: w16_tile(wb, dp, a, t0, 4, G, res); break;
        case 5: w16_tile(wb, dp, a, t0, 5, G, res); break;
        default: w16_tile(wb, dp, a, t0, W16_T, G, res); break;
        }
        store_rows8(out, ldo, t0, T, b * 16, r0, r1, res);
        store_rows8(out, ldo, t0, T, b * 16 + 8, r0, r1, res + W16_T);
      }
    }
  }
  free(scr);
  return 0;
}

static void avx2_matmul_q4q8(const struct cpu_q4 *w, const struct cpu_q8 *a, int n, int64_t r0, int64_t r1,
                             float *out, int64_t ldo) {
  if (r0 >= r1 || n <= 0) return;
  if (n >= W16_MIN_TOKENS && a->v16 && avx2_matmul_w16(w, a, n, r0, r1, out, ldo) == 0) return;
  avx2_matmul_planes(w, a, n, r0, r1, out, ldo); /* few tokens, no v16 or no scratch: the same bits */
}
#else
/* On AVX-VNNI the planes' VPDPBUSD chains beat the int16 path at every batch size (one thread, 0.5B shapes: 75-81
 * GMAC/s at 16-512 tokens against 64 for VPDPWSSD on widened weights, 70 for the AVX2 set's PMADDWD): no v16. */
#define avx2_matmul_q4q8 avx2_matmul_planes
#endif

/* ---- attention: the flash tile of kern_impl.h written with AVX2 intrinsics ----------------------------------------
 * Why: gcc kept much of kern_impl.h's tile scalar on AVX2 (the softmax and the score arrays went through the stack
 * one float at a time), and at pp512 on the 0.5B it took 30 % of the time against the matmul's 42 % (perf, session
 * 29). Same algorithm and order per row as kern_impl.h: keys 16 at a time, transposed; per row a score per key as one
 * FMA chain over the head dims, the online softmax with the same exp polynomial, then O = O·f + Σ p·v over the keys
 * in order. Four rows' score chains run side by side to hide the FMA latency; the arithmetic of a row does not
 * depend on its neighbours, so the result does not depend on the tile (batch invariance). Soft-capped heads
 * (Gemma 4) keep kern_impl.h's tile. */
static inline __m256 avx2_exp8(__m256 x) { /* kern_impl.h's expf, eight lanes */
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.3f));
  const __m256 big = _mm256_set1_ps(12582912.0f);
  __m256 fn = _mm256_sub_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), big), big);
  __m256 r = _mm256_fnmadd_ps(fn, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(fn, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  __m256 y = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
  __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(fn), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

static inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

#define A2_KB 16
_Static_assert(A2_KB == KERN_ATT_KB, "attn_rows aligns the first key block to KERN_ATT_KB");
static void avx2_attn_tile_fast(const struct cpu_attn_job *j, int t0, int t1, int kvh) {
  const int hd = j->head_dim, G = j->n_heads / j->n_kv_heads, M = (t1 - t0) * G;
  if (j->softcap > 0.0f || M * hd > KERN_ATT_OBUF || hd > KERN_ATT_MAX_HD || hd % 16) {
    avx2_attn_tile(j, t0, t1, kvh); /* kern_impl.h's tile */
    return;
  }
  const int64_t ldkv = (int64_t)j->n_kv_heads * hd;
  const int seq = j->seq[t0];
  float O[KERN_ATT_OBUF] __attribute__((aligned(32)));
  float KT[KERN_ATT_MAX_HD * A2_KB] __attribute__((aligned(32)));
  const float *vrow[A2_KB];
  float mrow[KERN_ATT_OBUF / 16], lrow[KERN_ATT_OBUF / 16];
  int lo[KERN_ATT_OBUF / 16], hi[KERN_ATT_OBUF / 16];
  const float *qrow[KERN_ATT_OBUF / 16];
  int kmin, kmax;
  avx2_attn_rows(j, t0, M, kvh, lo, hi, mrow, lrow, qrow, &kmin, &kmax);
  memset(O, 0, (size_t)M * hd * sizeof *O);
  const __m256i lane0 = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), lane1 = _mm256_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15);
  const __m256 ninf = _mm256_set1_ps(-INFINITY), vscale = _mm256_set1_ps(j->scale);
  for (int kb = kmin; kb <= kmax; kb += A2_KB) {
    const int nk = kmax - kb + 1 < A2_KB ? kmax - kb + 1 : A2_KB;
    for (int jj = 0; jj < A2_KB; jj++) {
      if (jj < nk) {
        const int p = kb + jj;
        const int64_t sl = (int64_t)j->block_table[seq * j->max_blocks + p / j->block_size] * j->block_size + p % j->block_size;
        const float *kr = j->k + sl * ldkv + (int64_t)kvh * hd;
        vrow[jj] = j->v + sl * ldkv + (int64_t)kvh * hd;
        for (int d = 0; d < hd; d++) KT[d * A2_KB + jj] = kr[d];
      } else {
        vrow[jj] = NULL;
        for (int d = 0; d < hd; d++) KT[d * A2_KB + jj] = 0.0f;
      }
    }
    const __m256i k0 = _mm256_add_epi32(lane0, _mm256_set1_epi32(kb)), k1 = _mm256_add_epi32(lane1, _mm256_set1_epi32(kb));
    const __m256i kend = _mm256_set1_epi32(kb + nk - 1);
    /* the rows this key block touches, four at a time for the score chains */
    int rows[KERN_ATT_OBUF / 16], nr = 0;
    for (int i = 0; i < M; i++)
      if (!(kb > hi[i] || kb + nk - 1 < lo[i])) rows[nr++] = i;
    for (int r0 = 0; r0 < nr; r0 += 4) {
      const int R = nr - r0 < 4 ? nr - r0 : 4;
      __m256 s0[4], s1[4];
      for (int r = 0; r < 4; r++) s0[r] = s1[r] = _mm256_setzero_ps();
      const float *qp[4];
      for (int r = 0; r < 4; r++) qp[r] = qrow[rows[r0 + (r < R ? r : 0)]];
      for (int d = 0; d < hd; d++) {
        const __m256 a = _mm256_load_ps(KT + d * A2_KB), b = _mm256_load_ps(KT + d * A2_KB + 8);
        for (int r = 0; r < 4; r++) {
          const __m256 qd = _mm256_broadcast_ss(qp[r] + d);
          s0[r] = _mm256_fmadd_ps(qd, a, s0[r]);
          s1[r] = _mm256_fmadd_ps(qd, b, s1[r]);
        }
      }
      for (int r = 0; r < R; r++) {
        const int i = rows[r0 + r];
        __m256 x0 = _mm256_mul_ps(s0[r], vscale), x1 = _mm256_mul_ps(s1[r], vscale);
        const __m256i l = _mm256_set1_epi32(lo[i] - 1), h = _mm256_set1_epi32(hi[i] + 1);
        /* valid: lo <= key <= hi and key <= kb + nk - 1 */
        const __m256 v0 = _mm256_castsi256_ps(_mm256_and_si256(_mm256_and_si256(_mm256_cmpgt_epi32(k0, l), _mm256_cmpgt_epi32(h, k0)),
                                                               _mm256_cmpgt_epi32(_mm256_add_epi32(kend, _mm256_set1_epi32(1)), k0)));
        const __m256 v1 = _mm256_castsi256_ps(_mm256_and_si256(_mm256_and_si256(_mm256_cmpgt_epi32(k1, l), _mm256_cmpgt_epi32(h, k1)),
                                                               _mm256_cmpgt_epi32(_mm256_add_epi32(kend, _mm256_set1_epi32(1)), k1)));
        x0 = _mm256_blendv_ps(ninf, x0, v0);
        x1 = _mm256_blendv_ps(ninf, x1, v1);
        const float mx = fmaxf(mrow[i], hmax8(_mm256_max_ps(x0, x1)));
        const float f = mrow[i] == -INFINITY ? 0.0f : avx2_expf(mrow[i] - mx);
        const __m256 vmx = _mm256_set1_ps(mx);
        const __m256 p0 = _mm256_and_ps(avx2_exp8(_mm256_sub_ps(x0, vmx)), v0), p1 = _mm256_and_ps(avx2_exp8(_mm256_sub_ps(x1, vmx)), v1);
        lrow[i] = lrow[i] * f + hsum8(_mm256_add_ps(p0, p1));
        mrow[i] = mx;
        float pr[A2_KB] __attribute__((aligned(32)));
        _mm256_store_ps(pr, p0);
        _mm256_store_ps(pr + 8, p1);
        float *o = O + (int64_t)i * hd;
        const __m256 vf = _mm256_set1_ps(f);
        for (int d0 = 0; d0 < hd; d0 += 64) { /* eight vectors of the output row at a time */
          const int nv = hd - d0 < 64 ? (hd - d0) / 8 : 8;
          __m256 acc[8];
          for (int v = 0; v < nv; v++) acc[v] = _mm256_mul_ps(_mm256_loadu_ps(o + d0 + 8 * v), vf);
          for (int jj = 0; jj < nk; jj++) {
            const __m256 pj = _mm256_set1_ps(pr[jj]);
            const float *vr = vrow[jj] + d0;
            for (int v = 0; v < nv; v++) acc[v] = _mm256_fmadd_ps(pj, _mm256_loadu_ps(vr + 8 * v), acc[v]);
          }
          for (int v = 0; v < nv; v++) _mm256_storeu_ps(o + d0 + 8 * v, acc[v]);
        }
      }
    }
  }
  for (int i = 0; i < M; i++) {
    float *out = j->out + (qrow[i] - j->q);
    const __m256 inv = _mm256_set1_ps(lrow[i] > 0.0f ? 1.0f / lrow[i] : 0.0f);
    for (int d = 0; d < hd; d += 8) _mm256_storeu_ps(out + d, _mm256_mul_ps(_mm256_loadu_ps(O + (int64_t)i * hd + d), inv));
  }
}


/* silu_mul with the eight-lane exp (kern_impl.h's version went through the stack: 5 % of pp512 after the attention
 * above, perf, session 29); the same expression per element: g / (1 + exp(-g)) * u */
static void avx2_silu_mul_fast(float *o, const float *g, const float *u, int64_t n) {
  int64_t i = 0;
  const __m256 one = _mm256_set1_ps(1.0f);
  for (; i + 8 <= n; i += 8) {
    const __m256 gv = _mm256_loadu_ps(g + i), uv = _mm256_loadu_ps(u + i);
    const __m256 e = avx2_exp8(_mm256_sub_ps(_mm256_setzero_ps(), gv));
    _mm256_storeu_ps(o + i, _mm256_mul_ps(_mm256_div_ps(gv, _mm256_add_ps(one, e)), uv));
  }
  for (; i < n; i++) o[i] = g[i] / (1.0f + avx2_expf(-g[i])) * u[i];
}

#if AVX2_VNNI
const struct cpu_kernels cpu_kernels_avxvnni = {
  .name = "avx2-vnni",
#else
const struct cpu_kernels cpu_kernels_avx2 = {
  .name = "avx2",
#endif
  .matmul_q4 = NULL,
  .matmul_bf16 = NULL,
  .matmul_f32 = NULL,
  .q4_pack = q4x16_pack,
  .q4_free_packed = q4x16_free,
  .q4_row = q4x16_row,
  .q8_quantize = avx2_q8_quantize,
  .matmul_q4q8 = avx2_matmul_q4q8,
#if AVX2_VNNI
  .q8_v16 = 0,
#else
  .q8_v16 = W16_MIN_TOKENS,
#endif
  .attn_tile = avx2_attn_tile_fast,
  .silu_mul = avx2_silu_mul_fast,
  .gelu_mul = avx2_gelu_mul,
};
#endif /* __x86_64__ */
