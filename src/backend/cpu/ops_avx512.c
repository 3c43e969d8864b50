/* backend/cpu/ops_avx512.c — AVX-512 (F/BW/VL + VNNI) kernels: 16-bit activation quantization and
 * the int4 x (2 x int8) matmul over the q4x16 layout, plus the flash attention and SiLU of kern_impl.h
 * vectorized with this file's flags.
 *
 * matmul: two 16-row blocks of W against T tokens at a time (T <= 4). Per 64-byte chunk (16 rows x
 * 8 columns), the nibbles are split into two vectors of unsigned bytes and VPDPBUSD multiplies
 * them with 4 activation bytes broadcast from memory, once per activation plane (hi, lo: struct
 * cpu_q8), so the unpacked weights are reused for all T tokens and both planes, and each
 * broadcast for both blocks. The int32 sums
 * start at c = -8*sum(v) (the unsigned-nibble offset), and 256*hi_sum + lo_sum at the end of each
 * 128-group is the exact integer dot of the signed weights with the 16-bit activations; one convert and one
 * FMA with (weight scale x activation scale) folds it into the f32 result. Row blocks are taken
 * in panels of ~256 KiB so the panel stays in L2 while every token tile passes over it.
 * Integer sums are exact and the f32 accumulation order per output is fixed, so the result does
 * not depend on how rows are split among threads. */
#if defined(__x86_64__)
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/q4x16.h"

#define KERN_NAME(x) avx512_##x
#include "backend/cpu/kern_impl.h"

/* ---- attention (intrinsics; same algorithm as kern_impl.h's) ------------------------------ */

/* exp(x), Cephes range reduction + degree-5 polynomial, scaled with VSCALEFPS */
static inline __m512 exp512(__m512 x) {
  x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(88.3f)), _mm512_set1_ps(-87.3f));
  __m512 fn = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(fn, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(fn, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  __m512 y = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(y, fn);
}

/* 1 / x: VRCP14PS and one Newton step (relative error ~2^-27: within an ulp of the division, whose ~16-cycle
 * throughput made SiLU 3.7 % of a W5 run) */
static inline __m512 rcp512(__m512 x) {
  const __m512 r = _mm512_rcp14_ps(x);
  return _mm512_mul_ps(r, _mm512_fnmadd_ps(x, r, _mm512_set1_ps(2.0f)));
}

static void avx512_silu_mul_fast(float *o, const float *g, const float *u, int64_t n) {
  int64_t i = 0;
  const __m512 one = _mm512_set1_ps(1.0f);
  for (; i + 16 <= n; i += 16) {
    __m512 gv = _mm512_loadu_ps(g + i), uv = _mm512_loadu_ps(u + i);
    __m512 e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), gv));
    _mm512_storeu_ps(o + i, _mm512_mul_ps(_mm512_mul_ps(gv, rcp512(_mm512_add_ps(one, e))), uv));
  }
  if (i < n) {
    __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
    __m512 gv = _mm512_maskz_loadu_ps(m, g + i), uv = _mm512_maskz_loadu_ps(m, u + i);
    __m512 e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), gv));
    _mm512_mask_storeu_ps(o + i, m, _mm512_mul_ps(_mm512_mul_ps(gv, rcp512(_mm512_add_ps(one, e))), uv));
  }
}

/* Attention with the query rows in the vector lanes: a tile's M rows (tokens x the G query heads of one KV head) go in
 * groups of 16, one row per lane, against blocks of 16 keys read straight from the cache rows (no transposition, no
 * gathers of K or V). Per block and group: 16 score vectors (score of key jj for the 16 rows) as FMA chains over
 * head_dim, the online softmax on whole vectors (max, exp, sum and the rescale per lane: no horizontal reductions,
 * no scalar exp), and O^T (head_dim vectors of 16 rows) += p_jj x broadcast v_jj. Session 33 measured the row-major
 * tile it replaces at ~10 MACs a cycle on W5's shape (attention 21 % of W5 on the AMX set).
 *
 * Batch invariance: lanes never mix, so a row's bits depend only on its query, its keys and its key range: keys go
 * in blocks at multiples of 16 (attn_rows), and a row whose range misses a block leaves its state untouched (masked
 * updates), exactly as if it had been alone. Decode tiles (M = G rows) use the same path. */
#define RL_MAXG ((KERN_ATT_OBUF / 16 + 15) / 16 + 1) /* row groups of a tile at head_dim 16 */
#define RL_BUF (KERN_ATT_OBUF + 15 * KERN_ATT_MAX_HD) /* rows rounded up to whole groups, times head_dim */

/* r[i] = row i of a 16 x 16 block -> r[d] = column d (the 16 rows' element d) */
static inline __attribute__((always_inline)) void tr16x16(__m512 *r) {
  __m512 t[16];
  for (int i = 0; i < 8; i++) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; i++) { /* u[4i + k]: column k + 4c of rows 4i..4i+3 in 128-bit chunk c */
    const __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]),
                  c = _mm512_castps_pd(t[4 * i + 2]), d = _mm512_castps_pd(t[4 * i + 3]);
    r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  for (int k = 0; k < 4; k++) {
    const __m512 v = _mm512_shuffle_f32x4(r[k], r[4 + k], 0x44), w = _mm512_shuffle_f32x4(r[8 + k], r[12 + k], 0x44);
    const __m512 v2 = _mm512_shuffle_f32x4(r[k], r[4 + k], 0xee), w2 = _mm512_shuffle_f32x4(r[8 + k], r[12 + k], 0xee);
    t[k] = _mm512_shuffle_f32x4(v, w, 0x88);
    t[k + 4] = _mm512_shuffle_f32x4(v, w, 0xdd);
    t[k + 8] = _mm512_shuffle_f32x4(v2, w2, 0x88);
    t[k + 12] = _mm512_shuffle_f32x4(v2, w2, 0xdd);
  }
  for (int i = 0; i < 16; i++) r[i] = t[i];
}

/* eight keys' scores for the 16 rows of a group: one FMA chain per key over head_dim, in order; kb: the block's keys
 * as contiguous rows of HD */
static inline __attribute__((always_inline)) void rl_scores8(const float *qt, const float *kb, __m512 *S, const int HD) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  for (int d = 0; d < HD; d++) {
    const __m512 qv = _mm512_load_ps(qt + 16 * d);
    const float *k = kb + d;
    a0 = _mm512_fmadd_ps(qv, _mm512_set1_ps(k[0]), a0);
    a1 = _mm512_fmadd_ps(qv, _mm512_set1_ps(k[HD]), a1);
    a2 = _mm512_fmadd_ps(qv, _mm512_set1_ps(k[2 * HD]), a2);
    a3 = _mm512_fmadd_ps(qv, _mm512_set1_ps(k[3 * HD]), a3);
    a4 = _mm512_fmadd_ps(qv, _mm512_set1_ps(k[4 * HD]), a4);
    a5 = _mm512_fmadd_ps(qv, _mm512_set1_ps(k[5 * HD]), a5);
    a6 = _mm512_fmadd_ps(qv, _mm512_set1_ps(k[6 * HD]), a6);
    a7 = _mm512_fmadd_ps(qv, _mm512_set1_ps(k[7 * HD]), a7);
  }
  S[0] = a0; S[1] = a1; S[2] = a2; S[3] = a3; S[4] = a4; S[5] = a5; S[6] = a6; S[7] = a7;
}

/* O^T[d0 .. d0 + 16) of a group: acc = O^T * f, then + p_jj * v_jj[d] over the keys in order; stored on the lanes
 * that had a key in the block */
static inline __attribute__((always_inline)) void rl_pv16(float *ot, const __m512 *P, const float *const *vr, int nk,
                                                          int d0, __m512 f, __mmask16 upd) {
  __m512 acc[16];
  for (int dd = 0; dd < 16; dd++) acc[dd] = _mm512_mul_ps(_mm512_load_ps(ot + 16 * (d0 + dd)), f);
  for (int jj = 0; jj < nk; jj++) {
    const __m512 p = P[jj];
    const float *v = vr[jj] + d0;
    __asm__("" : "+r"(v)); /* one pointer, 16 immediate offsets (else gcc keeps the 16 offsets d0 + dd live, and spills) */
    for (int dd = 0; dd < 16; dd++) acc[dd] = _mm512_fmadd_ps(p, _mm512_set1_ps(v[dd]), acc[dd]);
  }
  for (int dd = 0; dd < 16; dd++) _mm512_mask_store_ps(ot + 16 * (d0 + dd), upd, acc[dd]);
}

/* the tile for head_dim HD (a constant where the caller instantiates it: the key rows' offsets become immediates) */
static inline __attribute__((always_inline)) void rl_tile(const struct cpu_attn_job *j, int t0, int t1, int kvh,
                                                          const int HD) {
  const int G = j->n_heads / j->n_kv_heads, M = (t1 - t0) * G, NG = (M + 15) / 16;
  const int64_t ldkv = (int64_t)j->n_kv_heads * HD;
  const int seq = j->seq[t0];
  static _Thread_local float QT[RL_BUF] __attribute__((aligned(64))), OT[RL_BUF] __attribute__((aligned(64))),
      KB[16 * KERN_ATT_MAX_HD] __attribute__((aligned(64)));
  /* each row's key range and query (kern_impl.h's attn_rows; its online-softmax start values go unused here), and
   * the key range of the tile, whose first block it puts on a multiple of 16 */
  int lo[KERN_ATT_OBUF / 16], hi[KERN_ATT_OBUF / 16], kmin, kmax;
  float mrow[KERN_ATT_OBUF / 16], lrow[KERN_ATT_OBUF / 16];
  const float *qrow[KERN_ATT_OBUF / 16];
  avx512_attn_rows(j, t0, M, kvh, lo, hi, mrow, lrow, qrow, &kmin, &kmax);
  __m512i lov[RL_MAXG], hiv[RL_MAXG];
  __m512 mv[RL_MAXG], lv[RL_MAXG];
  int glo[RL_MAXG], ghi[RL_MAXG];
  for (int g = 0; g < NG; g++) {
    int32_t gl[16], gh[16];
    glo[g] = 1 << 30;
    ghi[g] = -1;
    for (int l = 0; l < 16; l++) {
      const int i = 16 * g + l;
      gl[l] = i < M ? lo[i] : 1 << 30; /* a lane past the tile: no key is ever in its range */
      gh[l] = i < M ? hi[i] : -1;
      if (gl[l] < glo[g]) glo[g] = gl[l];
      if (gh[l] > ghi[g]) ghi[g] = gh[l];
    }
    lov[g] = _mm512_loadu_si512((const void *)gl);
    hiv[g] = _mm512_loadu_si512((const void *)gh);
    mv[g] = _mm512_set1_ps(-INFINITY);
    lv[g] = _mm512_setzero_ps();
    float *qt = QT + (int64_t)g * HD * 16, *ot = OT + (int64_t)g * HD * 16;
    for (int c0 = 0; c0 < HD; c0 += 16) { /* the group's queries, transposed: qt[d][lane] */
      __m512 r[16];
      for (int l = 0; l < 16; l++) r[l] = 16 * g + l < M ? _mm512_loadu_ps(qrow[16 * g + l] + c0) : _mm512_setzero_ps();
      tr16x16(r);
      for (int dd = 0; dd < 16; dd++) {
        _mm512_store_ps(qt + 16 * (c0 + dd), r[dd]);
        _mm512_store_ps(ot + 16 * (c0 + dd), _mm512_setzero_ps());
      }
    }
  }
  const __m512 vscale = _mm512_set1_ps(j->scale), ninf = _mm512_set1_ps(-INFINITY);
  const float *vr[16];
  for (int kb = kmin; kb <= kmax; kb += 16) {
    const int nk = kmax - kb + 1 < 16 ? kmax - kb + 1 : 16;
    for (int jj = 0; jj < nk; jj++) { /* the block's keys as contiguous rows (any finite values past nk: masked) */
      const int p = kb + jj;
      const int64_t sl = avx512_slot(j, seq, p);
      const float *kr = j->k + sl * ldkv + (int64_t)kvh * HD;
      vr[jj] = j->v + sl * ldkv + (int64_t)kvh * HD;
      for (int d = 0; d < HD; d += 16) _mm512_store_ps(KB + jj * HD + d, _mm512_loadu_ps(kr + d));
    }
    for (int g = 0; g < NG; g++) {
      if (kb > ghi[g] || kb + nk - 1 < glo[g]) continue;
      const float *qt = QT + (int64_t)g * HD * 16;
      __m512 S[16], P[16];
      rl_scores8(qt, KB, S, HD);
      if (nk > 8) rl_scores8(qt, KB + 8 * HD, S + 8, HD);
      else
        for (int jj = 8; jj < 16; jj++) S[jj] = ninf;
      __m512 mx = mv[g];
      __mmask16 valid[16], upd = 0;
      for (int jj = 0; jj < 16; jj++) {
        const __m512i kp = _mm512_set1_epi32(kb + jj);
        valid[jj] = jj < nk ? _mm512_cmple_epi32_mask(lov[g], kp) & _mm512_cmpge_epi32_mask(hiv[g], kp) : 0;
        upd |= valid[jj];
        S[jj] = _mm512_mul_ps(S[jj], vscale);
        if (j->softcap > 0.0f && valid[jj]) {
          float t[16] __attribute__((aligned(64)));
          _mm512_store_ps(t, S[jj]);
          for (int l = 0; l < 16; l++) t[l] = j->softcap * tanhf(t[l] / j->softcap);
          S[jj] = _mm512_load_ps(t);
        }
        mx = _mm512_mask_max_ps(mx, valid[jj], mx, S[jj]);
      }
      /* lanes with a key here: f = exp(m_old - m_new) (0 on a row's first block), p = exp(s - m_new) on its keys */
      const __mmask16 seen = _mm512_cmp_ps_mask(mv[g], ninf, _CMP_NEQ_OQ);
      const __m512 f = _mm512_maskz_mov_ps(seen, exp512(_mm512_sub_ps(mv[g], mx)));
      for (int jj = 0; jj < 16; jj++) P[jj] = _mm512_maskz_mov_ps(valid[jj], exp512(_mm512_sub_ps(S[jj], mx)));
      __m512 s8[8], s4[4];
      for (int a = 0; a < 8; a++) s8[a] = _mm512_add_ps(P[a], P[a + 8]);
      for (int a = 0; a < 4; a++) s4[a] = _mm512_add_ps(s8[a], s8[a + 4]);
      const __m512 sum = _mm512_add_ps(_mm512_add_ps(s4[0], s4[2]), _mm512_add_ps(s4[1], s4[3]));
      lv[g] = _mm512_mask_mov_ps(lv[g], upd, _mm512_add_ps(_mm512_mul_ps(lv[g], f), sum));
      mv[g] = _mm512_mask_mov_ps(mv[g], upd, mx);
      float *ot = OT + (int64_t)g * HD * 16;
      for (int d0 = 0; d0 < HD; d0 += 16) rl_pv16(ot, P, vr, nk, d0, f, upd);
    }
  }
  for (int g = 0; g < NG; g++) { /* O / l, transposed back into the rows */
    const __m512 inv = _mm512_maskz_div_ps(_mm512_cmp_ps_mask(lv[g], _mm512_setzero_ps(), _CMP_GT_OQ),
                                           _mm512_set1_ps(1.0f), lv[g]);
    const float *ot = OT + (int64_t)g * HD * 16;
    for (int c0 = 0; c0 < HD; c0 += 16) {
      __m512 r[16];
      for (int dd = 0; dd < 16; dd++) r[dd] = _mm512_mul_ps(_mm512_load_ps(ot + 16 * (c0 + dd)), inv);
      tr16x16(r);
      for (int l = 0; l < 16; l++)
        if (16 * g + l < M) _mm512_storeu_ps(j->out + (qrow[16 * g + l] - j->q) + c0, r[l]);
    }
  }
}

static void avx512_attn_tile_fast(const struct cpu_attn_job *j, int t0, int t1, int kvh) {
  const int hd = j->head_dim;
  if ((t1 - t0) * (j->n_heads / j->n_kv_heads) * hd > KERN_ATT_OBUF || hd > KERN_ATT_MAX_HD || hd % 16) return;
  switch (hd) { /* the same arithmetic in every instance: only the addressing differs */
  case 64: rl_tile(j, t0, t1, kvh, 64); break;
  case 128: rl_tile(j, t0, t1, kvh, 128); break;
  case 256: rl_tile(j, t0, t1, kvh, 256); break;
  case 512: rl_tile(j, t0, t1, kvh, 512); break;
  default: rl_tile(j, t0, t1, kvh, hd); break;
  }
}

static void avx512_q8_quantize(const float *x, int64_t ldx, int t0, int t1, const struct cpu_q8 *a) {
  const int64_t cols = a->cols, G = cols / 128;
  const __m512 absmask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  const __m512i lim = _mm512_set1_epi32(Q8_VMAX), nlim = _mm512_set1_epi32(-Q8_VMAX),
                half = _mm512_set1_epi32(128);
  const float vmax = (float)Q8_VMAX;
  for (int t = t0; t < t1; t++) {
    const float *xt = x + t * ldx;
    int8_t *q = a->q + t * cols, *lo = a->lo + t * cols;
    for (int64_t g = 0; g < G; g++) {
      const float *xg = xt + g * 128;
      __m512 v[8], m = _mm512_setzero_ps();
      for (int i = 0; i < 8; i++) {
        v[i] = _mm512_loadu_ps(xg + 16 * i);
        m = _mm512_max_ps(m, _mm512_and_ps(v[i], absmask));
      }
      float amax = _mm512_reduce_max_ps(m);
      float id = amax > 0.0f ? vmax / amax : 0.0f;
      __m512 vid = _mm512_set1_ps(id);
      __m512i sum = _mm512_setzero_si512();
      for (int i = 0; i < 8; i++) {
        __m512i qi = _mm512_cvtps_epi32(_mm512_mul_ps(v[i], vid));
        qi = _mm512_max_epi32(_mm512_min_epi32(qi, lim), nlim);
        sum = _mm512_add_epi32(sum, qi);
        __m512i h = _mm512_srai_epi32(_mm512_add_epi32(qi, half), 8);
        __m512i l = _mm512_sub_epi32(qi, _mm512_slli_epi32(h, 8));
        const __m128i hb = _mm512_cvtepi32_epi8(h), lb = _mm512_cvtepi32_epi8(l);
        _mm_storeu_si128((__m128i *)(q + g * 128 + 16 * i), hb);
        _mm_storeu_si128((__m128i *)(lo + g * 128 + 16 * i), lb);
        if (a->tiles) {
          int8_t *tp = a->tiles + q8_tile_off(t, g, i / 4, G) + 16 * (i % 4);
          _mm_storeu_si128((__m128i *)tp, hb);
          _mm_storeu_si128((__m128i *)(tp + 1024), lb);
        }
        if (a->v16) _mm256_storeu_si256((__m256i *)(a->v16 + t * cols + g * 128 + 16 * i), _mm512_cvtepi32_epi16(qi));
      }
      a->s[t * G + g] = amax / vmax;
      a->c[t * G + g] = -8 * _mm512_reduce_add_epi32(sum);
    }
  }
}

static inline __m512i bc32(const int8_t *p) {
  int32_t v;
  memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

/* NB 16-row blocks (1 or 2) against T tokens (both compile-time constants after inlining): per
 * (block, token) two integer accumulators, one per activation plane (hi, lo); the offset c starts
 * the lo one. The unpacked nibbles of a chunk serve all T tokens and each activation broadcast
 * serves all NB blocks. The f32 results live in res[b * T + t] (memory, not registers: the integer
 * accumulators need them) and take one FMA per group, in group order. */
static inline __attribute__((always_inline)) void blk_tile(const uint8_t *qp, int64_t bstride,
                                                           const uint16_t *dp, int64_t dstride,
                                                           const struct cpu_q8 *a, int t0, const int T,
                                                           const int NB, int64_t G, __m512 *res) {
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  const int64_t cols = a->cols;
  const int8_t *xh = a->q + t0 * cols, *xl = a->lo + t0 * cols;
  for (int i = 0; i < NB * T; i++) res[i] = _mm512_setzero_ps();
  for (int64_t g = 0; g < G; g++) {
    __m512i ah[2][4], al[2][4];
    for (int t = 0; t < T; t++) {
      __m512i c0 = _mm512_set1_epi32(a->c[(t0 + t) * G + g]);
      for (int b = 0; b < NB; b++) {
        al[b][t] = c0;
        ah[b][t] = _mm512_setzero_si512();
      }
    }
    const int8_t *gh = xh + g * 128, *gl = xl + g * 128;
    const uint8_t *qg = qp + g * 1024;
    for (int c = 0; c < 16; c++) {
      __m512i lo[2], hi[2];
      for (int b = 0; b < NB; b++) {
        __m512i v = _mm512_loadu_si512((const void *)(qg + b * bstride + c * 64));
        lo[b] = _mm512_and_si512(v, m4);
        hi[b] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
      }
      for (int t = 0; t < T; t++) {
        __m512i h0 = bc32(gh + t * cols + c * 8), l0 = bc32(gl + t * cols + c * 8);
        __m512i h1 = bc32(gh + t * cols + c * 8 + 4), l1 = bc32(gl + t * cols + c * 8 + 4);
        for (int b = 0; b < NB; b++) {
          ah[b][t] = _mm512_dpbusd_epi32(ah[b][t], lo[b], h0);
          al[b][t] = _mm512_dpbusd_epi32(al[b][t], lo[b], l0);
          ah[b][t] = _mm512_dpbusd_epi32(ah[b][t], hi[b], h1);
          al[b][t] = _mm512_dpbusd_epi32(al[b][t], hi[b], l1);
        }
      }
    }
    for (int b = 0; b < NB; b++) {
      __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(dp + b * dstride + g * 16)));
      for (int t = 0; t < T; t++) {
        __m512i S = _mm512_add_epi32(_mm512_slli_epi32(ah[b][t], 8), al[b][t]);
        __m512 sc = _mm512_mul_ps(d, _mm512_set1_ps(a->s[(t0 + t) * G + g]));
        res[b * T + t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S), sc, res[b * T + t]);
      }
    }
  }
}

/* Decode streams the weights from memory once: every 64-byte line is prefetched DEC_PREFETCH bytes
 * ahead (the blocks of a thread's range are contiguous, so this runs into the next block). Measured
 * on Zen 5, one thread over the 136 MB LM head: 46 GB/s with the former two prefetches per
 * 1 KiB group at +4 KiB, 50-54 at +8 KiB, 53-57 at +12 KiB, 52-55 at +16 KiB, 50 at +24 KiB. A
 * prefetch past the end of the weights is harmless (it never faults). */
#define DEC_PREFETCH 12288

typedef int32_t i32u __attribute__((may_alias, aligned(1)));

/* Decode (one token): nb 16-row blocks at a time; per block four chains (hi/lo plane x low/high
 * nibble). High nibbles are taken as 16*u (mask 0xF0, no shift): those sums are exact multiples of
 * 16 and are divided back at the end of the group. The driver uses nb = 1: with nb = 2 (two
 * streams a block apart) one thread read the LM head at 20 GB/s instead of 53. */
static inline __attribute__((always_inline)) void blk_one(const uint8_t *qp, int64_t bstride,
                                                          const uint16_t *dp, int64_t dstride,
                                                          const struct cpu_q8 *a, int t0, int64_t G,
                                                          const int nb, __m512 *res) {
  const __m512i m4 = _mm512_set1_epi8(0x0f), m4h = _mm512_set1_epi8((char)0xf0);
  const int8_t *xh = a->q + t0 * a->cols, *xl = a->lo + t0 * a->cols;
  __m512 facc[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
  for (int64_t g = 0; g < G; g++) {
    __m512i hl[2], hh[2], ll[2], lh[2];
    for (int b = 0; b < nb; b++) {
      hl[b] = hh[b] = lh[b] = _mm512_setzero_si512();
      ll[b] = _mm512_set1_epi32(a->c[t0 * G + g]);
    }
    const int8_t *gh = xh + g * 128, *gl = xl + g * 128;
    /* unrolled: gcc's rolled loop carried the four accumulators through 8 register moves a 64-byte line
     * (24 instructions where 12 do the work); unrolled, 3B tg64 on Zen 5 went +11 % at 2 threads and +18 %
     * at 1 (interleaved pairs, bench/RESULTS.md session 37): the stream keeps more lines in flight */
#pragma GCC unroll 16
    for (int c = 0; c < 16; c++) {
      __m512i bh0 = _mm512_set1_epi32(*(const i32u *)(gh + c * 8)), bh1 = _mm512_set1_epi32(*(const i32u *)(gh + c * 8 + 4));
      __m512i bl0 = _mm512_set1_epi32(*(const i32u *)(gl + c * 8)), bl1 = _mm512_set1_epi32(*(const i32u *)(gl + c * 8 + 4));
      for (int b = 0; b < nb; b++) {
        _mm_prefetch((const char *)(qp + b * bstride + g * 1024 + c * 64 + DEC_PREFETCH), _MM_HINT_T0);
        __m512i v = _mm512_loadu_si512((const void *)(qp + b * bstride + g * 1024 + c * 64));
        __m512i n0 = _mm512_and_si512(v, m4), n1 = _mm512_and_si512(v, m4h);
        hl[b] = _mm512_dpbusd_epi32(hl[b], n0, bh0);
        ll[b] = _mm512_dpbusd_epi32(ll[b], n0, bl0);
        hh[b] = _mm512_dpbusd_epi32(hh[b], n1, bh1);
        lh[b] = _mm512_dpbusd_epi32(lh[b], n1, bl1);
      }
    }
    for (int b = 0; b < nb; b++) {
      __m512i sh = _mm512_add_epi32(hl[b], _mm512_srai_epi32(hh[b], 4));
      __m512i sl = _mm512_add_epi32(ll[b], _mm512_srai_epi32(lh[b], 4));
      __m512i s = _mm512_add_epi32(_mm512_slli_epi32(sh, 8), sl);
      __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(dp + b * dstride + g * 16)));
      facc[b] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(d, _mm512_set1_ps(a->s[t0 * G + g])), facc[b]);
    }
  }
  for (int b = 0; b < nb; b++) res[b] = facc[b];
}

static inline void store_rows(float *out, int64_t ldo, int T, int64_t blk, int64_t r0, int64_t r1,
                              const __m512 *res) {
  int64_t base = blk * 16;
  if (base >= r0 && base + 16 <= r1) {
    for (int t = 0; t < T; t++) _mm512_storeu_ps(out + t * ldo + base, res[t]);
  } else {
    int64_t lo = base > r0 ? base : r0, hi = base + 16 < r1 ? base + 16 : r1;
    __mmask16 m = (__mmask16)(((1u << (hi - base)) - 1) & ~((1u << (lo - base)) - 1));
    for (int t = 0; t < T; t++) _mm512_mask_storeu_ps(out + t * ldo + base, m, res[t]);
  }
}

static void avx512_matmul_q4q8(const struct cpu_q4 *w, const struct cpu_q8 *a, int n, int64_t r0,
                               int64_t r1, float *out, int64_t ldo) {
  if (r0 >= r1 || n <= 0) return;
  const int64_t G = w->cols / 128, b0 = r0 / 16, b1 = (r1 + 15) / 16;
  const int64_t bstride = w->cols * 8, dstride = G * 16;
  __m512 res[8];
  if (n == 1) { /* bit-identical to blk_tile with T = 1: exact integer sums, same f32 steps */
    for (int64_t b = b0; b < b1; b++) {
      blk_one(q4x16_quants(w, b), bstride, q4x16_scales(w, b), dstride, a, 0, G, 1, res);
      store_rows(out, ldo, 1, b, r0, r1, res);
    }
    return;
  }
  /* prefill: tiles of 2 row blocks x 4 tokens (16 integer accumulators; measured against 1 x 8,
   * 2 x 5 and 2 x 6 on Zen 5: bench/RESULTS.md) over panels of ~256 KiB of weights */
  int64_t panel = (256 * 1024) / bstride;
  if (panel < 2) panel = 2;
  for (int64_t p0 = b0; p0 < b1; p0 += panel) {
    int64_t p1 = p0 + panel < b1 ? p0 + panel : b1;
    for (int t0 = 0; t0 < n; t0 += 4) {
      int T = n - t0 < 4 ? n - t0 : 4;
      for (int64_t b = p0; b < p1; b += 2) {
        const uint8_t *qp = q4x16_quants(w, b);
        const uint16_t *dp = q4x16_scales(w, b);
        int nb = p1 - b < 2 ? 1 : 2;
#define TILE(NB)                                                                                   \
  switch (T) {                                                                                     \
  case 1: blk_tile(qp, bstride, dp, dstride, a, t0, 1, NB, G, res); break;                         \
  case 2: blk_tile(qp, bstride, dp, dstride, a, t0, 2, NB, G, res); break;                         \
  case 3: blk_tile(qp, bstride, dp, dstride, a, t0, 3, NB, G, res); break;                         \
  default: blk_tile(qp, bstride, dp, dstride, a, t0, 4, NB, G, res); break;                        \
  }
        if (nb == 2) TILE(2) else TILE(1)
#undef TILE
        for (int bb = 0; bb < nb; bb++)
          store_rows(out + (int64_t)t0 * ldo, ldo, T, b + bb, r0, r1, res + bb * T);
      }
    }
  }
}

const struct cpu_kernels cpu_kernels_avx512 = {
  .name = "avx512-vnni",
  .matmul_q4 = NULL,
  .matmul_bf16 = NULL,
  .matmul_f32 = NULL,
  .q4_pack = q4x16_pack,
  .q4_free_packed = q4x16_free,
  .q4_row = q4x16_row,
  .q8_quantize = avx512_q8_quantize,
  .matmul_q4q8 = avx512_matmul_q4q8,
  .attn_tile = avx512_attn_tile_fast,
  .silu_mul = avx512_silu_mul_fast,
  .gelu_mul = avx512_gelu_mul,
};

/* the same set with the prefill matmul on AMX tiles (ops_amx.c; bit-identical results) */
const struct cpu_kernels cpu_kernels_amx = {
  .name = "avx512-amx",
  .matmul_q4 = NULL,
  .matmul_bf16 = NULL,
  .matmul_f32 = NULL,
  .q4_pack = q4x16_pack,
  .q4_free_packed = q4x16_free,
  .q4_row = q4x16_row,
  .q8_quantize = avx512_q8_quantize,
  .matmul_q4q8 = cpu_amx_matmul_q4q8,
  .q8_tiles = CPU_AMX_MIN_TOKENS,
  .attn_tile = avx512_attn_tile_fast,
  .silu_mul = avx512_silu_mul_fast,
  .gelu_mul = avx512_gelu_mul,
};
#endif /* __x86_64__ */
