/* quant/q4.c — the int4 group-128 quantizer: the scalar reference and the dispatch to the SIMD
 * kernel (q4_avx2.c) that load uses. Runs once per weight at load. */
#include "quant/q4.h"

#include <math.h>
#include <string.h>

#include "base/cpu_features.h"
#include "base/half.h"

void q4_quantize_row(const float *w, int64_t cols, uint8_t *qs, uint16_t *d) {
  if (cpu_features_get()->avx2) q4_quantize_row_avx2(w, cols, qs, d);
  else q4_quantize_row_ref(w, cols, qs, d);
}

void q4_quantize_row_ref(const float *w, int64_t cols, uint8_t *qs, uint16_t *d) {
  for (int64_t g = 0; g < cols / Q4_GROUP; g++) {
    const float *x = w + g * Q4_GROUP;
    float m = 0.0f, am = 0.0f;
    for (int i = 0; i < Q4_GROUP; i++) {
      float a = fabsf(x[i]);
      if (a > am) { am = a; m = x[i]; } /* strict >: first on ties */
    }
    uint16_t dh = f32_to_f16(m / -8.0f);
    float df = f16_to_f32(dh);
    d[g] = dh;
    uint8_t *o = qs + g * (Q4_GROUP / 2);
    int8_t q[Q4_GROUP];
    if (df == 0.0f) {
      memset(q, 0, sizeof q);
    } else {
      /* round half away from zero, as roundf, but branch-free so the loop vectorizes: v is
       * clamped first (the result is clamped to [-8, 7] anyway), then truncated, and the fraction
       * (exact in f32 for |v| < 2^23) decides the step away from zero. */
      for (int i = 0; i < Q4_GROUP; i++) {
        float v = x[i] / df;
        v = v < -16.0f ? -16.0f : v > 16.0f ? 16.0f : v;
        int t = (int)v;
        float f = v - (float)t;
        t += (f >= 0.5f) - (f <= -0.5f);
        q[i] = (int8_t)(t < -8 ? -8 : t > 7 ? 7 : t);
      }
    }
    for (int i = 0; i < Q4_GROUP; i += 2) o[i / 2] = (uint8_t)((q[i] + 8) | ((q[i + 1] + 8) << 4));
  }
}

void q4_dequantize_row(const uint8_t *qs, const uint16_t *d, int64_t cols, float *out) {
  for (int64_t g = 0; g < cols / Q4_GROUP; g++) {
    float df = f16_to_f32(d[g]);
    const uint8_t *b = qs + g * (Q4_GROUP / 2);
    for (int i = 0; i < Q4_GROUP / 2; i++) {
      out[g * Q4_GROUP + 2 * i] = (float)((int)(b[i] & 15) - 8) * df;
      out[g * Q4_GROUP + 2 * i + 1] = (float)((int)(b[i] >> 4) - 8) * df;
    }
  }
}
