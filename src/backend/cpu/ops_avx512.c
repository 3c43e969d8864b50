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

static void avx512_silu_mul_fast(float *o, const float *g, const float *u, int64_t n) {
  int64_t i = 0;
  const __m512 one = _mm512_set1_ps(1.0f);
  for (; i + 16 <= n; i += 16) {
    __m512 gv = _mm512_loadu_ps(g + i), uv = _mm512_loadu_ps(u + i);
    __m512 e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), gv));
    _mm512_storeu_ps(o + i, _mm512_mul_ps(_mm512_div_ps(gv, _mm512_add_ps(one, e)), uv));
  }
  if (i < n) {
    __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
    __m512 gv = _mm512_maskz_loadu_ps(m, g + i), uv = _mm512_maskz_loadu_ps(m, u + i);
    __m512 e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), gv));
    _mm512_mask_storeu_ps(o + i, m, _mm512_mul_ps(_mm512_div_ps(gv, _mm512_add_ps(one, e)), uv));
  }
}

/* two query rows (both with keys in this block) against one block: shared key/value loads and
 * twice the independent FMA chains of attn_row */
static inline __attribute__((always_inline)) void attn_row2(const float *qa, const float *qb, const __m512 *kt,
                                                            const float *const *vrow, int nk,
                                                            __mmask16 va, __mmask16 vb, float scale,
                                                            float *m_a, float *l_a, float *oa,
                                                            float *m_b, float *l_b, float *ob, const int NV) {
  /* each row's four chains over d mod 4, summed as attn_row sums them: a row's bits do not depend on whether it
   * was paired (batch invariance) */
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
  for (int d = 0; d < NV * 16; d += 4) {
    a0 = _mm512_fmadd_ps(_mm512_set1_ps(qa[d]), kt[d], a0);
    b0 = _mm512_fmadd_ps(_mm512_set1_ps(qb[d]), kt[d], b0);
    a1 = _mm512_fmadd_ps(_mm512_set1_ps(qa[d + 1]), kt[d + 1], a1);
    b1 = _mm512_fmadd_ps(_mm512_set1_ps(qb[d + 1]), kt[d + 1], b1);
    a2 = _mm512_fmadd_ps(_mm512_set1_ps(qa[d + 2]), kt[d + 2], a2);
    b2 = _mm512_fmadd_ps(_mm512_set1_ps(qb[d + 2]), kt[d + 2], b2);
    a3 = _mm512_fmadd_ps(_mm512_set1_ps(qa[d + 3]), kt[d + 3], a3);
    b3 = _mm512_fmadd_ps(_mm512_set1_ps(qb[d + 3]), kt[d + 3], b3);
  }
  __m512 sa = _mm512_mul_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)), _mm512_set1_ps(scale));
  __m512 sb = _mm512_mul_ps(_mm512_add_ps(_mm512_add_ps(b0, b1), _mm512_add_ps(b2, b3)), _mm512_set1_ps(scale));
  float ma = _mm512_mask_reduce_max_ps(va, sa), mb = _mm512_mask_reduce_max_ps(vb, sb);
  if (*m_a > ma) ma = *m_a;
  if (*m_b > mb) mb = *m_b;
  __m512 pa = _mm512_maskz_mov_ps(va, exp512(_mm512_sub_ps(sa, _mm512_set1_ps(ma))));
  __m512 pb = _mm512_maskz_mov_ps(vb, exp512(_mm512_sub_ps(sb, _mm512_set1_ps(mb))));
  float fa = *m_a == -INFINITY ? 0.0f : expf(*m_a - ma), fb = *m_b == -INFINITY ? 0.0f : expf(*m_b - mb);
  *l_a = *l_a * fa + _mm512_reduce_add_ps(pa);
  *l_b = *l_b * fb + _mm512_reduce_add_ps(pb);
  *m_a = ma;
  *m_b = mb;
  float pra[16] __attribute__((aligned(64))), prb[16] __attribute__((aligned(64)));
  _mm512_store_ps(pra, pa);
  _mm512_store_ps(prb, pb);
  __m512 acca[16], accb[16];
  for (int v = 0; v < NV; v++) {
    acca[v] = _mm512_mul_ps(_mm512_loadu_ps(oa + 16 * v), _mm512_set1_ps(fa));
    accb[v] = _mm512_mul_ps(_mm512_loadu_ps(ob + 16 * v), _mm512_set1_ps(fb));
  }
  for (int jj = 0; jj < nk; jj++) {
    __m512 pja = _mm512_set1_ps(pra[jj]), pjb = _mm512_set1_ps(prb[jj]);
    const float *vr = vrow[jj];
    for (int v = 0; v < NV; v++) {
      __m512 vv = _mm512_loadu_ps(vr + 16 * v);
      acca[v] = _mm512_fmadd_ps(pja, vv, acca[v]);
      accb[v] = _mm512_fmadd_ps(pjb, vv, accb[v]);
    }
  }
  for (int v = 0; v < NV; v++) {
    _mm512_storeu_ps(oa + 16 * v, acca[v]);
    _mm512_storeu_ps(ob + 16 * v, accb[v]);
  }
}

/* one query row against one block of <= 16 keys (transposed in kt[hd][16]); NV = hd / 16 */
static inline __attribute__((always_inline)) void attn_row(const float *q, const __m512 *kt,
                                                           const float *const *vrow, int nk,
                                                           __mmask16 valid, float scale, float softcap,
                                                           float *m_io, float *l_io, float *o,
                                                           const int NV) {
  __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  for (int d = 0; d < NV * 16; d += 4) {
    s0 = _mm512_fmadd_ps(_mm512_set1_ps(q[d]), kt[d], s0);
    s1 = _mm512_fmadd_ps(_mm512_set1_ps(q[d + 1]), kt[d + 1], s1);
    s2 = _mm512_fmadd_ps(_mm512_set1_ps(q[d + 2]), kt[d + 2], s2);
    s3 = _mm512_fmadd_ps(_mm512_set1_ps(q[d + 3]), kt[d + 3], s3);
  }
  __m512 s = _mm512_mul_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)), _mm512_set1_ps(scale));
  if (softcap > 0.0f) {
    float t[16];
    _mm512_storeu_ps(t, s);
    for (int jj = 0; jj < 16; jj++) t[jj] = softcap * tanhf(t[jj] / softcap);
    s = _mm512_loadu_ps(t);
  }
  float mold = *m_io;
  float mx = _mm512_mask_reduce_max_ps(valid, s);
  if (mold > mx) mx = mold;
  __m512 p = _mm512_maskz_mov_ps(valid, exp512(_mm512_sub_ps(s, _mm512_set1_ps(mx))));
  float f = mold == -INFINITY ? 0.0f : expf(mold - mx);
  *l_io = *l_io * f + _mm512_reduce_add_ps(p);
  *m_io = mx;
  float pr[16] __attribute__((aligned(64)));
  _mm512_store_ps(pr, p);
  __m512 vf = _mm512_set1_ps(f);
  for (int v0 = 0; v0 < NV; v0 += 16) { /* at most 16 accumulators at a time: head_dim 512 takes two passes */
    const int nv = NV - v0 < 16 ? NV - v0 : 16;
    __m512 acc[16];
    for (int v = 0; v < nv; v++) acc[v] = _mm512_mul_ps(_mm512_loadu_ps(o + 16 * (v0 + v)), vf);
    for (int jj = 0; jj < nk; jj++) {
      __m512 pj = _mm512_set1_ps(pr[jj]);
      const float *vr = vrow[jj] + 16 * v0;
      for (int v = 0; v < nv; v++) acc[v] = _mm512_fmadd_ps(pj, _mm512_loadu_ps(vr + 16 * v), acc[v]);
    }
    for (int v = 0; v < nv; v++) _mm512_storeu_ps(o + 16 * (v0 + v), acc[v]);
  }
}

static void avx512_attn_tile_fast(const struct cpu_attn_job *j, int t0, int t1, int kvh) {
  const int hd = j->head_dim, G = j->n_heads / j->n_kv_heads, M = (t1 - t0) * G, NV = hd / 16;
  const int64_t ldkv = (int64_t)j->n_kv_heads * hd;
  const int seq = j->seq[t0];
  float O[KERN_ATT_OBUF] __attribute__((aligned(64)));
  __m512 kt[KERN_ATT_MAX_HD]; /* the key block transposed: 32 KiB at head_dim 512 */
  const float *vrow[16];
  float mrow[KERN_ATT_OBUF / 16], lrow[KERN_ATT_OBUF / 16];
  int lo[KERN_ATT_OBUF / 16], hi[KERN_ATT_OBUF / 16];
  const float *qrow[KERN_ATT_OBUF / 16];
  int kmin, kmax;
  avx512_attn_rows(j, t0, M, kvh, lo, hi, mrow, lrow, qrow, &kmin, &kmax);
  memset(O, 0, (size_t)M * hd * sizeof *O);
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (int kb = kmin; kb <= kmax; kb += 16) {
    int nk = kmax - kb + 1 < 16 ? kmax - kb + 1 : 16;
    int32_t off[16];
    for (int jj = 0; jj < 16; jj++) {
      if (jj < nk) {
        int p = kb + jj;
        int64_t s = (int64_t)j->block_table[seq * j->max_blocks + p / j->block_size] * j->block_size + p % j->block_size;
        off[jj] = (int32_t)(s * ldkv + (int64_t)kvh * hd);
        vrow[jj] = j->v + off[jj];
      } else {
        off[jj] = 0;
        vrow[jj] = NULL;
      }
    }
    __m512i voff = _mm512_loadu_si512((const void *)off);
    __mmask16 km = (__mmask16)((1u << nk) - 1);
    for (int d = 0; d < hd; d++)
      kt[d] = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), km, _mm512_add_epi32(voff, _mm512_set1_epi32(d)), j->k, 4);
    __m512i kidx = _mm512_add_epi32(lane, _mm512_set1_epi32(kb));
    int pend = -1; /* a row waiting for a partner */
    for (int i = 0; i < M; i++) {
      if (kb > hi[i] || kb + nk - 1 < lo[i]) continue;
      __mmask16 valid = km & _mm512_cmpge_epi32_mask(kidx, _mm512_set1_epi32(lo[i])) &
                        _mm512_cmple_epi32_mask(kidx, _mm512_set1_epi32(hi[i]));
      if (j->softcap == 0.0f && (NV == 4 || NV == 8)) {
        if (pend < 0) { pend = i; continue; }
        int a = pend;
        pend = -1;
        __mmask16 va = km & _mm512_cmpge_epi32_mask(kidx, _mm512_set1_epi32(lo[a])) &
                       _mm512_cmple_epi32_mask(kidx, _mm512_set1_epi32(hi[a]));
        float *oa = O + (int64_t)a * hd, *ob = O + (int64_t)i * hd;
        if (NV == 4) attn_row2(qrow[a], qrow[i], kt, vrow, nk, va, valid, j->scale, &mrow[a], &lrow[a], oa, &mrow[i], &lrow[i], ob, 4);
        else attn_row2(qrow[a], qrow[i], kt, vrow, nk, va, valid, j->scale, &mrow[a], &lrow[a], oa, &mrow[i], &lrow[i], ob, 8);
        continue;
      }
      float *o = O + (int64_t)i * hd;
      switch (NV) {
      case 4: attn_row(qrow[i], kt, vrow, nk, valid, j->scale, j->softcap, &mrow[i], &lrow[i], o, 4); break;
      case 8: attn_row(qrow[i], kt, vrow, nk, valid, j->scale, j->softcap, &mrow[i], &lrow[i], o, 8); break;
      default: attn_row(qrow[i], kt, vrow, nk, valid, j->scale, j->softcap, &mrow[i], &lrow[i], o, NV); break;
      }
    }
    if (pend >= 0) {
      int i = pend;
      __mmask16 valid = km & _mm512_cmpge_epi32_mask(kidx, _mm512_set1_epi32(lo[i])) &
                        _mm512_cmple_epi32_mask(kidx, _mm512_set1_epi32(hi[i]));
      float *o = O + (int64_t)i * hd;
      if (NV == 4) attn_row(qrow[i], kt, vrow, nk, valid, j->scale, 0.0f, &mrow[i], &lrow[i], o, 4);
      else attn_row(qrow[i], kt, vrow, nk, valid, j->scale, 0.0f, &mrow[i], &lrow[i], o, 8);
    }
  }
  for (int i = 0; i < M; i++) {
    float *out = j->out + (qrow[i] - j->q);
    __m512 inv = _mm512_set1_ps(lrow[i] > 0.0f ? 1.0f / lrow[i] : 0.0f);
    for (int v = 0; v < NV; v++) _mm512_storeu_ps(out + 16 * v, _mm512_mul_ps(_mm512_loadu_ps(O + (int64_t)i * hd + 16 * v), inv));
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
        _mm_storeu_si128((__m128i *)(q + g * 128 + 16 * i), _mm512_cvtepi32_epi8(h));
        _mm_storeu_si128((__m128i *)(lo + g * 128 + 16 * i), _mm512_cvtepi32_epi8(l));
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
  .attn_tile = avx512_attn_tile_fast,
  .silu_mul = avx512_silu_mul_fast,
  .gelu_mul = avx512_gelu_mul,
};
#endif /* __x86_64__ */
