/* f16 activations x int4 weights, f32 FMA (AVX2), over the q4x16 layout; out-of-tree candidate for
 * the issue 35 speed table. x is rounded to f16 once per token (kept as f32 values), the nibble offset
 * folded as -8 * sum(x) per group. Tile: 8 rows (half block) x T <= 4 tokens. */
#include <immintrin.h>
#include <stdint.h>
#include "backend/cpu/q4x16.h"
void f16_quantize(const float *x, int n, int64_t cols, float *xr, float *sx) {
  for (int t = 0; t < n; t++)
    for (int64_t g = 0; g < cols / 128; g++) {
      float s = 0;
      for (int i = 0; i < 128; i += 8) {
        __m256 v = _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + t * cols + g * 128 + i), 0));
        _mm256_storeu_ps(xr + t * cols + g * 128 + i, v);
        float b[8]; _mm256_storeu_ps(b, v); for (int k = 0; k < 8; k++) s += b[k];
      }
      sx[t * (cols / 128) + g] = s;
    }
}
static inline __attribute__((always_inline)) void tile(const uint8_t *qp, const uint16_t *dp, const float *xr, const float *sx,
    int64_t cols, int t0, const int T, int h, __m256 *res) {
  const int64_t G = cols / 128;
  const __m256i m4 = _mm256_set1_epi32(0xf);
  __m256 facc[4];
  for (int t = 0; t < T; t++) facc[t] = _mm256_setzero_ps();
  for (int64_t g = 0; g < G; g++) {
    __m256 acc[4], acc2[4];
    for (int t = 0; t < T; t++) { acc[t] = _mm256_set1_ps(-8.0f * sx[(t0 + t) * G + g]); acc2[t] = _mm256_setzero_ps(); }
    const uint8_t *qg = qp + g * 1024 + h * 32;
    for (int c = 0; c < 16; c++) {
      __m256i v = _mm256_loadu_si256((const __m256i *)(qg + c * 64));
      __m256 w[8];
      for (int j = 0; j < 4; j++) {
        w[j] = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(v, 8 * j), m4));
        w[4 + j] = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(v, 8 * j + 4), m4));
      }
      for (int t = 0; t < T; t++) {
        const float *xk = xr + (t0 + t) * cols + g * 128 + c * 8;
        for (int j = 0; j < 8; j += 2) {
          acc[t] = _mm256_fmadd_ps(w[j], _mm256_broadcast_ss(xk + j), acc[t]);
          acc2[t] = _mm256_fmadd_ps(w[j + 1], _mm256_broadcast_ss(xk + j + 1), acc2[t]);
        }
      }
    }
    __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(dp + g * 16 + h * 8)));
    for (int t = 0; t < T; t++) facc[t] = _mm256_fmadd_ps(_mm256_add_ps(acc[t], acc2[t]), d, facc[t]);
  }
  for (int t = 0; t < T; t++) res[t] = facc[t];
}
void f16_matmul(const struct cpu_q4 *w, const float *xr, const float *sx, int n, float *out, int64_t ldo) {
  int64_t nblk = (w->rows + 15) / 16, panel = (256 * 1024) / (w->cols * 8);
  if (panel < 1) panel = 1;
  __m256 res[4];
  for (int64_t p0 = 0; p0 < nblk; p0 += panel) {
    int64_t p1 = p0 + panel < nblk ? p0 + panel : nblk;
    for (int t0 = 0; t0 < n; t0 += 4) {
      int T = n - t0 < 4 ? n - t0 : 4;
      for (int64_t b = p0; b < p1; b++)
        for (int h = 0; h < 2; h++) {
          const uint8_t *qp = q4x16_quants(w, b); const uint16_t *dp = q4x16_scales(w, b);
          switch (T) { case 1: tile(qp, dp, xr, sx, w->cols, t0, 1, h, res); break; case 2: tile(qp, dp, xr, sx, w->cols, t0, 2, h, res); break;
                       case 3: tile(qp, dp, xr, sx, w->cols, t0, 3, h, res); break; default: tile(qp, dp, xr, sx, w->cols, t0, 4, h, res); }
          for (int t = 0; t < T; t++) _mm256_storeu_ps(out + (t0 + t) * ldo + b * 16 + h * 8, res[t]);
        }
    }
  }
}
