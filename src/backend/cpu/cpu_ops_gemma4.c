/* backend/cpu/cpu_ops_gemma4.c — GELU-tanh gating, scaling, logit soft-capping and proportional RoPE
 * (Gemma 4) as plain f32 loops: elementwise work that is small beside the matmuls; SIMD can come later. */
#include "backend/cpu/cpu_ops_gemma4.h"

#include <math.h>

void cpu_gelu_mul_rows(struct hb_tensor *out, const struct hb_tensor *gate, const struct hb_tensor *up, int up_col0,
                       int t0, int t1, void (*fast)(float *o, const float *g, const float *u, int64_t n)) {
  int64_t w = gate->cols;
  const float k = 0.7978845608028654f; /* sqrt(2 / pi) */
  for (int t = t0; t < t1; t++) {
    const float *g = (const float *)gate->data + (int64_t)t * w;
    const float *u = (const float *)up->data + (int64_t)t * up->cols + up_col0;
    float *o = (float *)out->data + (int64_t)t * w;
    if (fast) {
      fast(o, g, u, w);
      continue;
    }
    for (int64_t j = 0; j < w; j++) {
      float x = g[j];
      o[j] = 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x))) * u[j];
    }
  }
}

void cpu_scale(struct hb_ctx *c, struct hb_tensor *x, float s, int n) {
  (void)c;
  float *a = x->data;
  for (int64_t i = 0, m = (int64_t)n * x->cols; i < m; i++) a[i] *= s;
}

void cpu_softcap(struct hb_ctx *c, struct hb_tensor *x, float cap, int n) {
  (void)c;
  float *a = x->data;
  for (int64_t i = 0, m = (int64_t)n * x->cols; i < m; i++) a[i] = cap * tanhf(a[i] / cap);
}

void cpu_rope_prop(struct hb_ctx *c, struct hb_tensor *x, const struct hb_batch *b, int n_heads, int head_dim,
                   int n_pairs, float theta, float factor) {
  int half = head_dim / 2;
  if (n_pairs > half) n_pairs = half;
  float inv_freq[512];
  if (n_pairs > 512) n_pairs = 512; /* head_dim <= HF_MAX_HEAD_DIM (1024) */
  /* as transformers builds it in f32: 1 / theta^(2i / head_dim), then / factor */
  for (int i = 0; i < n_pairs; i++) inv_freq[i] = 1.0f / powf(theta, (float)(2 * i) / (float)head_dim) / factor;
  cpu_rope_rotate(c, x, b, n_heads, head_dim, half, n_pairs, inv_freq);
}
