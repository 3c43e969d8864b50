/* quant/q4_avx2.c — q4_quantize_row with AVX2: the same bytes as the scalar reference
 * (q4_quantize_row_ref in q4.c), eight weights at a time. Load-time only (the whole model passes
 * through here once), so the aim is fewer cycles per weight, not a new format: every step below is
 * the scalar step on eight lanes (IEEE division, not a reciprocal; truncation then the fraction
 * test for round-half-away), which is what makes the bytes identical. The test that they are lives
 * in tests/unit/test_base.c (group q4_avx2). Compiled with -mavx2 (CMakeLists.txt, *_avx2.c). */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "base/half.h"
#include "quant/q4.h"

/* The weight of largest magnitude in x[0..128), first on ties, sign kept; 0.0f (not -0.0f) when
 * every weight is ±0, as the scalar scan's strict > leaves it. */
static float group_extreme(const float *x) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 mx = _mm256_setzero_ps();
  for (int i = 0; i < Q4_GROUP; i += 8) mx = _mm256_max_ps(mx, _mm256_and_ps(_mm256_loadu_ps(x + i), abs_mask));
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
  const float am = _mm_cvtss_f32(h);
  if (am == 0.0f) return 0.0f;
  const __m256 amv = _mm256_set1_ps(am);
  for (int i = 0; i < Q4_GROUP; i += 8) {
    int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_and_ps(_mm256_loadu_ps(x + i), abs_mask), amv, _CMP_EQ_OQ));
    if (hit) return x[i + __builtin_ctz((unsigned)hit)];
  }
  return 0.0f; /* not reached: am is one of the |x[i]| */
}

void q4_quantize_row_avx2(const float *w, int64_t cols, uint8_t *qs, uint16_t *d) {
  const __m256 lo16 = _mm256_set1_ps(-16.0f), hi16 = _mm256_set1_ps(16.0f);
  const __m256 half = _mm256_set1_ps(0.5f), mhalf = _mm256_set1_ps(-0.5f);
  const __m256i qmin = _mm256_set1_epi32(-8), qmax = _mm256_set1_epi32(7), eight = _mm256_set1_epi32(8);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t g = 0; g < cols / Q4_GROUP; g++) {
    const float *x = w + g * Q4_GROUP;
    uint16_t dh = f32_to_f16(group_extreme(x) / -8.0f);
    float df = f16_to_f32(dh);
    d[g] = dh;
    uint8_t *o = qs + g * (Q4_GROUP / 2);
    if (df == 0.0f) {
      memset(o, 0x88, Q4_GROUP / 2); /* q = 0 everywhere, stored as 8 | 8 << 4 */
      continue;
    }
    const __m256 dv = _mm256_set1_ps(df);
    uint8_t q[Q4_GROUP]; /* q + 8, one byte per weight */
    for (int i = 0; i < Q4_GROUP; i += 32) {
      __m256i v32[4];
      for (int k = 0; k < 4; k++) {
        __m256 v = _mm256_div_ps(_mm256_loadu_ps(x + i + 8 * k), dv);
        v = _mm256_max_ps(_mm256_min_ps(v, hi16), lo16);
        __m256i t = _mm256_cvttps_epi32(v);
        __m256 f = _mm256_sub_ps(v, _mm256_cvtepi32_ps(t));
        /* compare masks are -1 where true: t += (f >= 0.5) - (f <= -0.5) */
        t = _mm256_sub_epi32(t, _mm256_castps_si256(_mm256_cmp_ps(f, half, _CMP_GE_OQ)));
        t = _mm256_add_epi32(t, _mm256_castps_si256(_mm256_cmp_ps(f, mhalf, _CMP_LE_OQ)));
        t = _mm256_min_epi32(_mm256_max_epi32(t, qmin), qmax);
        v32[k] = _mm256_add_epi32(t, eight); /* 0..15 */
      }
      /* 32 x int32 -> 32 bytes in order: the packs interleave 128-bit lanes, the permute undoes it */
      __m256i p16a = _mm256_packs_epi32(v32[0], v32[1]), p16b = _mm256_packs_epi32(v32[2], v32[3]);
      __m256i p8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p16a, p16b), order);
      _mm256_storeu_si256((__m256i *)(q + i), p8);
    }
    /* nibble pairs: byte j = q[2j] | q[2j+1] << 4, via 16-bit lanes (q[2j+1] is the high byte) */
    const __m128i lowbyte = _mm_set1_epi16(0x00ff);
    for (int i = 0; i < Q4_GROUP; i += 16) {
      __m128i b = _mm_loadu_si128((const __m128i *)(q + i));
      __m128i y = _mm_and_si128(_mm_or_si128(b, _mm_srli_epi16(b, 4)), lowbyte);
      _mm_storel_epi64((__m128i *)(o + i / 2), _mm_packus_epi16(y, y));
    }
  }
}
