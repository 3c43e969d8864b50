/* backend/cpu/ops_amx.c — the int4 x 16-bit-activation matmul on AMX tiles (Intel Sapphire Rapids and later),
 * for prefill-sized batches; everything else is the AVX-512 VNNI set's (ops_avx512.c).
 *
 * The arithmetic is the VNNI kernel's, bit for bit: per output row r, token t and 128-group g the exact integer
 *   S = c[t][g] + 256 * sum(u * hi) + sum(u * lo)          (u = the weight nibble in [0, 15], cpu_kernels.h)
 * and then acc = fma((float)S, d[r][g] * s[t][g], acc) in group order from 0. Integer sums do not depend on the
 * order they are formed in, and the f32 steps are the same ops on the same values, so a token gets the same bits
 * from this kernel as from the VNNI one, alone or in any batch (test_cpu_kernels: matmul_exact,
 * batch_invariance).
 *
 * (the nibbles enter the tiles as signed weights u - 8, which folds c into the sums: the same integers).
 * Mapping onto TDPBSSD (C[m][n] += sum_k A[m][k] * B[k][n], signed bytes, int32 sums):
 *   - A = the activations, one token per tile row: 64 consecutive bytes of a plane (hi or lo), from the planes'
 *     copy in tile order (cpu_q8.tiles, which the quantizer writes: each A tile one contiguous KiB; loaded at
 *     row stride cols straight from the planes, the tiles of K = 4,864 fell out of L2 at 512 tokens);
 *   - B = 64 columns of one 16-row weight block, as 16 rows of "4 bytes for each of the 16 weight rows" (a
 *     K-quad per tile row). The q4x16 layout (q4x16.h) already holds exactly that: the low nibbles of a 64-byte
 *     chunk are the quad k = 8c..8c+3 of the 16 rows, the high nibbles the quad 8c+4..8c+7. So B is the chunks'
 *     nibbles masked apart and stored in order (no transpose).
 * A block pair's B tiles for the whole K range are unpacked once into a scratch buffer (cols * 16 bytes a
 * block) and reused by every 16-token tile. Per 128-group and token tile the 8 tiles are: A hi, A lo, B of
 * block 0 and 1, and the hi / lo sums of both blocks; after the group's two 64-column steps the four sums go
 * to memory and the VNNI epilogue (shift, add, convert, one FMA) folds them into the f32 results.
 *
 * The process must be granted the tile data state first (base/cpu_features.c asks for it); each call loads its
 * thread's tile configuration and releases the tiles at its end, so a thread never holds AMX state between
 * calls. */
#if defined(__x86_64__)
#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/q4x16.h"

/* Fewer tokens than this go to the VNNI kernel (same bits): unpacking a block pair's B tiles costs about what
 * the VNNI kernel needs for a few tokens, and the tiles' fixed cost is per 16 tokens. Measured (one thread, 0.5B
 * gate/up and down): AMX 0.43-0.7x of VNNI at 2-4 tokens, even at 6, 1.2-1.26x at 8, 1.6x at 12, 1.8x at 16. */
#define AMX_MIN_TOKENS CPU_AMX_MIN_TOKENS
/* unpacked weights of one panel (see cpu_amx_matmul_q4q8): a quarter of a 2 MiB L2 (128 KiB panels: -25 % on the
 * 0.5B's gate/up at 512 tokens; 1 MiB: the same as 512 KiB) */
#define AMX_PANEL_BYTES (512 * 1024)

/* tile numbers: literal macros, since gcc's tile intrinsics paste their argument into the instruction text;
 * the wrappers below expand them first */
#define T_AH 0
#define T_AL 1
#define T_B0 2
#define T_B1 3
#define T_H0 4
#define T_L0 5
#define T_H1 6
#define T_L1 7
#define TZERO(t) _tile_zero(t)
#define TLOAD(t, p, stride) _tile_loadd(t, p, stride)
#define TSTORE(t, p, stride) _tile_stored(t, p, stride)
#define TDP(c, a, b) _tile_dpbssd(c, a, b)

struct amx_tilecfg {
  uint8_t palette, start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};

/* every tile 64 bytes wide; the B tiles 16 rows (64 columns as quads), the others one row per token (m) */
static void amx_config(int m) {
  struct amx_tilecfg c __attribute__((aligned(64)));
  memset(&c, 0, sizeof c);
  c.palette = 1;
  for (int i = 0; i < 8; i++) {
    c.colsb[i] = 64;
    c.rows[i] = (uint8_t)(i == T_B0 || i == T_B1 ? 16 : m);
  }
  _tile_loadconfig(&c);
}

/* the B tiles of one row block for all of K: tile (g, s) = columns 128g + 64s .. +63, its row 2j the low
 * nibbles of chunk 8s + j, row 2j + 1 the high nibbles, each as the signed weight u - 8 in [-8, 7] (so the sums
 * need no offset term: sum((u - 8) * v) = sum(u * v) + c, the same integer) */
static void amx_unpack(const uint8_t *qp, int64_t G, uint8_t *dst) {
  const __m512i m4 = _mm512_set1_epi8(0x0f), k8 = _mm512_set1_epi8(8);
  for (int64_t c = 0; c < G * 16; c++) { /* chunk c of the block: group c / 16, step (c % 16) / 8 */
    __m512i v = _mm512_loadu_si512((const void *)(qp + c * 64));
    _mm512_store_si512((void *)(dst + c * 128), _mm512_sub_epi8(_mm512_and_si512(v, m4), k8));
    _mm512_store_si512((void *)(dst + c * 128 + 64), _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(v, 4), m4), k8));
  }
}

/* cpu_q8.tiles from the planes, for a caller whose quantizer did not fill it */
static void amx_pack_a(const struct cpu_q8 *a, int n, int64_t G, int8_t *dst) {
  for (int t = 0; t < n; t++)
    for (int64_t g = 0; g < G; g++)
      for (int s = 0; s < 2; s++) {
        const int64_t o = (int64_t)t * a->cols + g * 128 + s * 64, d = q8_tile_off(t, g, s, G);
        _mm512_store_si512((void *)(dst + d), _mm512_loadu_si512((const void *)(a->q + o)));
        _mm512_store_si512((void *)(dst + d + 1024), _mm512_loadu_si512((const void *)(a->lo + o)));
      }
}

/* folds one group's integer sums of NB blocks x m tokens into res[b][t] (16 rows each) */
static inline __attribute__((always_inline)) void amx_fold(const int32_t (*hs)[16][16], const int32_t (*ls)[16][16],
                                                           const uint16_t *dp0, const uint16_t *dp1, const struct cpu_q8 *a,
                                                           int t0, int m, int64_t G, int64_t g, const int NB,
                                                           __m512 (*res)[16]) {
  for (int b = 0; b < NB; b++) {
    const uint16_t *dp = b ? dp1 : dp0;
    __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(dp + g * 16)));
    for (int t = 0; t < m; t++) {
      __m512i h = _mm512_load_si512((const void *)hs[b][t]), l = _mm512_load_si512((const void *)ls[b][t]);
      __m512i S = _mm512_add_epi32(_mm512_slli_epi32(h, 8), l);
      __m512 sc = _mm512_mul_ps(d, _mm512_set1_ps(a->s[(t0 + t) * G + g]));
      res[b][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S), sc, res[b][t]);
    }
  }
}

/* NB (1 or 2) row blocks, whose B tiles are at bt0 / bt1, against tokens [t0, t0 + m) (the tiles configured
 * for m rows). Software-pipelined by one group: group g's multiplies are issued before group g - 1's sums are
 * folded (those were stored to the other half of a double buffer), so that the tile unit and the vector units
 * may work at the same time (a lag of 2 or 3 groups measured the same). Measured on a Sapphire-Rapids-class Xeon (one thread, 0.5B gate/up, 512 tokens):
 * 13.4 ms in all, 10.1-10.3 ms with any one of the folds, the tile stores or the multiplies left out, 5.0 ms with
 * no tile instruction at all; so the overlap is partial and the folds (per group, inherent to the per-group
 * scales) are what is left to win. */
static inline __attribute__((always_inline)) void amx_tile(const uint8_t *bt0, const uint8_t *bt1, const uint16_t *dp0,
                                                           const uint16_t *dp1, const struct cpu_q8 *a, const int8_t *ap,
                                                           int t0, int m, int64_t G, const int NB, __m512 (*res)[16]) {
  int32_t hs[2][2][16][16] __attribute__((aligned(64))), ls[2][2][16][16] __attribute__((aligned(64)));
  for (int b = 0; b < NB; b++)
    for (int t = 0; t < m; t++) res[b][t] = _mm512_setzero_ps();
  for (int64_t g = 0; g <= G; g++) {
    const int cur = (int)(g & 1);
    if (g < G) {
      TZERO(T_H0);
      TZERO(T_L0);
      if (NB == 2) {
        TZERO(T_H1);
        TZERO(T_L1);
      }
      for (int s = 0; s < 2; s++) {
        const int64_t bo = (g * 2 + s) * 1024;
        TLOAD(T_AH, ap + bo * 2, 64);
        TLOAD(T_AL, ap + bo * 2 + 1024, 64);
        TLOAD(T_B0, bt0 + bo, 64);
        TDP(T_H0, T_AH, T_B0);
        TDP(T_L0, T_AL, T_B0);
        if (NB == 2) {
          TLOAD(T_B1, bt1 + bo, 64);
          TDP(T_H1, T_AH, T_B1);
          TDP(T_L1, T_AL, T_B1);
        }
      }
    }
    if (g > 0)
      amx_fold((const int32_t(*)[16][16])hs[cur ^ 1], (const int32_t(*)[16][16])ls[cur ^ 1], dp0, dp1, a, t0, m, G,
               g - 1, NB, res);
    if (g < G) {
      TSTORE(T_H0, hs[cur][0], 64);
      TSTORE(T_L0, ls[cur][0], 64);
      if (NB == 2) {
        TSTORE(T_H1, hs[cur][1], 64);
        TSTORE(T_L1, ls[cur][1], 64);
      }
    }
  }
}

static void amx_store(float *out, int64_t ldo, int t0, int m, int64_t blk, int64_t r0, int64_t r1, const __m512 *res) {
  int64_t base = blk * 16, lo = base > r0 ? base : r0, hi = base + 16 < r1 ? base + 16 : r1;
  __mmask16 mk = (__mmask16)(((1u << (hi - base)) - 1) & ~((1u << (lo - base)) - 1));
  for (int t = 0; t < m; t++) _mm512_mask_storeu_ps(out + (int64_t)(t0 + t) * ldo + base, mk, res[t]);
}

void cpu_amx_matmul_q4q8(const struct cpu_q4 *w, const struct cpu_q8 *a, int n, int64_t r0, int64_t r1, float *out,
                         int64_t ldo) {
  if (r0 >= r1 || n <= 0) return;
  const int64_t cols = w->cols, G = cols / 128, b0 = r0 / 16, b1 = (r1 + 15) / 16;
  const size_t per_blk = (size_t)cols * 16;
  /* a panel: the row blocks whose unpacked B tiles fit AMX_PANEL_BYTES (at least a pair); every token tile
   * passes over the panel, so its stores stay within the same 16 output rows (pages) and its A tiles in L1/L2 */
  int64_t panel = (int64_t)(AMX_PANEL_BYTES / per_blk) & ~(int64_t)1;
  if (panel < 2) panel = 2;
  if (panel > b1 - b0) panel = b1 - b0;
  uint8_t *scr = n >= AMX_MIN_TOKENS ? aligned_alloc(64, (size_t)panel * per_blk) : NULL;
  /* the activations in tile order: the quantizer's copy (the backend's batches), else made here (direct callers) */
  int8_t *own = scr && !a->tiles ? aligned_alloc(64, q8_tiles_bytes(n, G)) : NULL;
  const int8_t *apk = a->tiles ? a->tiles : own;
  if (!scr || !apk) { /* few tokens, or no scratch: the VNNI kernel, same bits */
    free(scr);
    cpu_kernels_avx512.matmul_q4q8(w, a, n, r0, r1, out, ldo);
    return;
  }
  if (own) amx_pack_a(a, n, G, own);
  __m512 res[2][16];
  int cfg_m = 0;
  for (int64_t p0 = b0; p0 < b1; p0 += panel) {
    const int64_t p1 = p0 + panel < b1 ? p0 + panel : b1;
    for (int64_t b = p0; b < p1; b++) amx_unpack(q4x16_quants(w, b), G, scr + (size_t)(b - p0) * per_blk);
    for (int t0 = 0; t0 < n; t0 += 16) {
      const int m = n - t0 < 16 ? n - t0 : 16;
      if (m != cfg_m) {
        amx_config(m);
        cfg_m = m;
      }
      for (int64_t b = p0; b < p1; b += 2) {
        const uint8_t *bt = scr + (size_t)(b - p0) * per_blk;
        const uint16_t *dp0 = q4x16_scales(w, b);
        const int nb = p1 - b >= 2 ? 2 : 1;
        /* full tiles with a constant row count, so the folds' loops unroll */
        const int8_t *ap = apk + (size_t)(t0 / 16) * (size_t)G * 4096;
        if (nb == 2 && m == 16) amx_tile(bt, bt + per_blk, dp0, q4x16_scales(w, b + 1), a, ap, t0, 16, G, 2, res);
        else if (nb == 2) amx_tile(bt, bt + per_blk, dp0, q4x16_scales(w, b + 1), a, ap, t0, m, G, 2, res);
        else amx_tile(bt, bt, dp0, dp0, a, ap, t0, m, G, 1, res);
        for (int bb = 0; bb < nb; bb++) amx_store(out, ldo, t0, m, b + bb, r0, r1, res[bb]);
      }
    }
  }
  _tile_release();
  free(scr);
  free(own);
}

#endif /* __x86_64__ */
