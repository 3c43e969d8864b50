/* backend/cpu/kern_impl.h — flash-style attention and SiLU written once in plain C with fixed-width
 * inner loops, included by each ISA file (ops_generic.c, ops_avx2.c, ops_avx512.c) so the compiler
 * vectorizes it with that file's flags. The including file defines KERN_NAME(x) to give the
 * functions ISA-specific names (SiLU and GELU-tanh gating too). Deliberately no intrinsics here: the arithmetic is identical on
 * every ISA up to the compiler's choice of vector width (no fast-math: no reassociation).
 *
 * Attention for a tile of query tokens of one sequence and one KV head: all query heads that share
 * that KV head (GQA) and all tokens of the tile form up to KERN_ATT_ROWS query rows, so each key
 * and value vector is read once per tile ("streams the KV cache once"). Keys are taken 16 at a
 * time, transposed into a small buffer so scores for 16 keys are one vector FMA chain per query;
 * the softmax is the online (running max / running sum) form. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "backend/cpu/cpu_kernels.h"

#include "backend/cpu/kern_limits.h"

/* exp(x) for x <= 0 mostly (softmax, sigmoid): Cephes-style range reduction + degree-5
 * polynomial, ~2 ulp; x is clamped to [-87.3, 88.3]. Written to vectorize. */
static inline float KERN_NAME(expf)(float x) {
  x = x < -87.3f ? -87.3f : x > 88.3f ? 88.3f : x;
  float fn = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round to nearest */
  float r = x - fn * 0.693359375f;
  r = r - fn * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  float y = p * (r * r) + r + 1.0f;
  int32_t e = ((int32_t)fn + 127) << 23;
  float sc;
  memcpy(&sc, &e, 4);
  return y * sc;
}

static inline void KERN_NAME(silu_mul)(float *o, const float *g, const float *u, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    float e[16];
    for (int k = 0; k < 16; k++) e[k] = KERN_NAME(expf)(-g[i + k]);
    for (int k = 0; k < 16; k++) o[i + k] = g[i + k] / (1.0f + e[k]) * u[i + k];
  }
  for (; i < n; i++) o[i] = g[i] / (1.0f + KERN_NAME(expf)(-g[i])) * u[i];
}

/* o[i] = gelu_tanh(g[i]) * u[i] with gelu_tanh(x) = 0.5 x (1 + tanh(a)), a = sqrt(2/pi) (x + 0.044715 x^3), written
 * as x / (1 + exp(-2a)) (0.5 (1 + tanh(a)) = 1 / (1 + exp(-2a)): one exp, and no cancellation where tanh(a) is near
 * -1). Within a few ulp of the tanhf form; libm's tanhf behind it was ~20 % of Gemma 4 E2B's CPU prefill. */
static inline void KERN_NAME(gelu_mul)(float *o, const float *g, const float *u, int64_t n) {
  const float m2k = -2.0f * 0.7978845608028654f;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    float e[16];
    for (int k = 0; k < 16; k++) {
      float x = g[i + k];
      e[k] = KERN_NAME(expf)(m2k * (x + 0.044715f * x * x * x));
    }
    for (int k = 0; k < 16; k++) o[i + k] = g[i + k] / (1.0f + e[k]) * u[i + k];
  }
  for (; i < n; i++) {
    float x = g[i];
    o[i] = x / (1.0f + KERN_NAME(expf)(m2k * (x + 0.044715f * x * x * x))) * u[i];
  }
}

static inline int64_t KERN_NAME(slot)(const struct cpu_attn_job *j, int seq, int p) {
  return (int64_t)j->block_table[seq * j->max_blocks + p / j->block_size] * j->block_size +
         p % j->block_size;
}

/* The M query rows of a tile (row i: token t0 + i / G, query head kvh * G + i % G, G query heads a KV head): the
 * key range [lo, hi] each row sees (its position, cut by the sliding window), the online softmax's running max
 * and sum set to their start, its query vector (qrow may be NULL), and the union of the ranges [*kmin, *kmax].
 * Shared by this tile and the ISA files' own tiles. */
static inline void KERN_NAME(attn_rows)(const struct cpu_attn_job *j, int t0, int M, int kvh, int *lo, int *hi,
                                        float *mrow, float *lrow, const float **qrow, int *kmin, int *kmax) {
  const int G = j->n_heads / j->n_kv_heads, hd = j->head_dim;
  const int64_t ldq = (int64_t)j->n_heads * hd;
  *kmin = 1 << 30;
  *kmax = -1;
  for (int i = 0; i < M; i++) {
    int t = t0 + i / G, p = j->pos[t];
    lo[i] = j->window > 0 && p - j->window + 1 > 0 ? p - j->window + 1 : 0;
    hi[i] = p;
    if (lo[i] < *kmin) *kmin = lo[i];
    if (hi[i] > *kmax) *kmax = hi[i];
    mrow[i] = -INFINITY;
    lrow[i] = 0.0f;
    if (qrow) qrow[i] = j->q + t * ldq + (int64_t)(kvh * G + i % G) * hd;
  }
  /* Key blocks start on multiples of KERN_ATT_KB (every tile's step), not at the tile's first key: a row's online
   * softmax then groups its keys the same whichever rows share its tile (batch invariance; with a sliding window the
   * tile's first key is the earliest of its rows'). Keys below a row's lo are masked; those below kmin lie in blocks
   * the row's keys share or that kv_ring_stage maps, so they are real cache rows. */
  *kmin -= *kmin % KERN_ATT_KB;
}

static inline void KERN_NAME(attn_tile)(const struct cpu_attn_job *j, int t0, int t1, int kvh) {
  const int hd = j->head_dim, G = j->n_heads / j->n_kv_heads, M = (t1 - t0) * G;
  const int64_t ldq = (int64_t)j->n_heads * hd, ldkv = (int64_t)j->n_kv_heads * hd;
  const int seq = j->seq[t0];
  float O[KERN_ATT_OBUF] __attribute__((aligned(64)));
  float KT[KERN_ATT_MAX_HD * KERN_ATT_KB] __attribute__((aligned(64)));
  const float *vrow[KERN_ATT_KB];
  float mrow[KERN_ATT_OBUF / 16], lrow[KERN_ATT_OBUF / 16];
  int lo[KERN_ATT_OBUF / 16], hi[KERN_ATT_OBUF / 16];
  if (M * hd > KERN_ATT_OBUF || hd > KERN_ATT_MAX_HD || hd % 16) return; /* the backend sizes tiles */
  int kmin, kmax;
  KERN_NAME(attn_rows)(j, t0, M, kvh, lo, hi, mrow, lrow, NULL, &kmin, &kmax);
  memset(O, 0, (size_t)M * hd * sizeof *O);
  for (int kb = kmin; kb <= kmax; kb += KERN_ATT_KB) {
    int nk = kmax - kb + 1 < KERN_ATT_KB ? kmax - kb + 1 : KERN_ATT_KB;
    for (int jj = 0; jj < KERN_ATT_KB; jj++) {
      if (jj < nk) {
        int64_t s = KERN_NAME(slot)(j, seq, kb + jj);
        const float *kr = j->k + s * ldkv + (int64_t)kvh * hd;
        vrow[jj] = j->v + s * ldkv + (int64_t)kvh * hd;
        for (int d = 0; d < hd; d++) KT[d * KERN_ATT_KB + jj] = kr[d];
      } else {
        vrow[jj] = NULL;
        for (int d = 0; d < hd; d++) KT[d * KERN_ATT_KB + jj] = 0.0f;
      }
    }
    for (int i = 0; i < M; i++) {
      if (kb > hi[i] || kb + nk - 1 < lo[i]) continue;
      int t = t0 + i / G, h = kvh * G + i % G;
      const float *q = j->q + t * ldq + (int64_t)h * hd;
      float s[KERN_ATT_KB], pr[KERN_ATT_KB];
      for (int jj = 0; jj < KERN_ATT_KB; jj++) s[jj] = 0.0f;
      for (int d = 0; d < hd; d++) {
        float qd = q[d];
        for (int jj = 0; jj < KERN_ATT_KB; jj++) s[jj] += qd * KT[d * KERN_ATT_KB + jj];
      }
      for (int jj = 0; jj < KERN_ATT_KB; jj++) s[jj] *= j->scale;
      if (j->softcap > 0.0f)
        for (int jj = 0; jj < KERN_ATT_KB; jj++) s[jj] = j->softcap * tanhf(s[jj] / j->softcap);
      float mx = mrow[i];
      for (int jj = 0; jj < KERN_ATT_KB; jj++) {
        int kp = kb + jj;
        if (jj >= nk || kp < lo[i] || kp > hi[i]) s[jj] = -INFINITY;
        mx = s[jj] > mx ? s[jj] : mx;
      }
      float f = mrow[i] == -INFINITY ? 0.0f : KERN_NAME(expf)(mrow[i] - mx);
      float sum = 0.0f;
      for (int jj = 0; jj < KERN_ATT_KB; jj++) {
        float e = KERN_NAME(expf)(s[jj] - mx);
        pr[jj] = s[jj] == -INFINITY ? 0.0f : e;
      }
      for (int jj = 0; jj < KERN_ATT_KB; jj++) sum += pr[jj];
      lrow[i] = lrow[i] * f + sum;
      mrow[i] = mx;
      float *o = O + (int64_t)i * hd;
      for (int d0 = 0; d0 < hd; d0 += 16) {
        float acc[16];
        for (int e = 0; e < 16; e++) acc[e] = o[d0 + e] * f;
        for (int jj = 0; jj < nk; jj++) {
          float pj = pr[jj];
          const float *vr = vrow[jj] + d0;
          for (int e = 0; e < 16; e++) acc[e] += pj * vr[e];
        }
        for (int e = 0; e < 16; e++) o[d0 + e] = acc[e];
      }
    }
  }
  for (int i = 0; i < M; i++) {
    int t = t0 + i / G, h = kvh * G + i % G;
    float *out = j->out + t * ldq + (int64_t)h * hd;
    float inv = lrow[i] > 0.0f ? 1.0f / lrow[i] : 0.0f;
    for (int d = 0; d < hd; d++) out[d] = O[(int64_t)i * hd + d] * inv;
  }
}
