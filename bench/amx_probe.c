/* bench/amx_probe.c — what bounds the AMX int8 matmul (ops_amx.c), on tile instructions alone: TDPBSSD's peak,
 * then the per-128-column group of cpu_amx_matmul_q4q8 (4 accumulators zeroed, 2 x 64-column steps of 4 tile loads
 * and 4 TDPBSSD, 4 tile stores), without the zeroing and stores, with A and B from L2, and with the VNNI-style fold
 * of the previous group's sums in between (bench/RESULTS.md "Session 33"). Needs a CPU with AMX-INT8; one thread.
 *   gcc -O2 -mavx512f -mavx512bw -mavx512dq -mf16c -mfma -mamx-tile -mamx-int8 bench/amx_probe.c -o /tmp/amx_probe */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}
struct cfg {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};
static int32_t hs[2][2][16][16] __attribute__((aligned(64))), ls[2][2][16][16] __attribute__((aligned(64)));
static float res[2][16][16] __attribute__((aligned(64))), sc[4096];
static uint16_t dsc[4096];

/* one group: zero the 4 accumulators, 2 steps of (A hi, A lo, B0, B1) loads and 4 TDPBSSD, optionally the fold of the
 * previous group's stored sums, then the 4 tile stores; A and B advance through buffers of asz / bsz bytes */
static double group_ns(const int8_t *A, size_t asz, const int8_t *B, size_t bsz, int zero_store, int fold, long n) {
  size_t ao = 0, bo = 0;
  const double t0 = now();
  for (long i = 0; i < n; i++) {
    const int cur = (int)(i & 1), g = (int)(i % 7);
    if (zero_store) { _tile_zero(4); _tile_zero(5); _tile_zero(6); _tile_zero(7); }
    for (int s = 0; s < 2; s++) {
      _tile_loadd(0, A + ao, 64); _tile_loadd(1, A + ao + 1024, 64); ao = (ao + 2048) % asz;
      _tile_loadd(2, B + bo, 64); _tile_dpbssd(4, 0, 2); _tile_dpbssd(5, 1, 2);
      _tile_loadd(3, B + bo + 1024, 64); bo = (bo + 2048) % bsz; _tile_dpbssd(6, 0, 3); _tile_dpbssd(7, 1, 3);
    }
    if (fold)
      for (int b = 0; b < 2; b++) {
        const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(dsc + g * 16 + b * 128)));
        for (int t = 0; t < 16; t++) {
          const __m512i h = _mm512_load_si512(hs[cur ^ 1][b][t]), l = _mm512_load_si512(ls[cur ^ 1][b][t]);
          const __m512i S = _mm512_add_epi32(_mm512_slli_epi32(h, 8), l);
          const __m512 s = _mm512_mul_ps(d, _mm512_set1_ps(sc[t * 7 + g]));
          _mm512_store_ps(res[b][t], _mm512_fmadd_ps(_mm512_cvtepi32_ps(S), s, _mm512_load_ps(res[b][t])));
        }
      }
    if (zero_store) {
      _tile_stored(4, hs[cur][0], 64); _tile_stored(5, ls[cur][0], 64);
      _tile_stored(6, hs[cur][1], 64); _tile_stored(7, ls[cur][1], 64);
    }
  }
  return (now() - t0) / n * 1e9;
}

int main(void) {
  if (syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */)) {
    fprintf(stderr, "no AMX tile data for this process\n");
    return 1;
  }
  struct cfg c __attribute__((aligned(64)));
  memset(&c, 0, sizeof c);
  c.palette = 1;
  for (int i = 0; i < 8; i++) {
    c.colsb[i] = 64;
    c.rows[i] = 16;
  }
  _tile_loadconfig(&c);
  for (int i = 0; i < 4096; i++) { sc[i] = 1e-3f; dsc[i] = 0x2000; }
  const size_t big = 512 * 1024;
  int8_t *A = aligned_alloc(64, big), *B = aligned_alloc(64, big);
  memset(A, 1, big);
  memset(B, 1, big);
  _tile_loadd(0, A, 64); _tile_loadd(1, A + 1024, 64); _tile_loadd(2, B, 64); _tile_loadd(3, B + 1024, 64);
  const long n = 2000000;
  double t0 = now();
  for (long i = 0; i < n; i++) { _tile_dpbssd(4, 0, 2); _tile_dpbssd(5, 1, 2); _tile_dpbssd(6, 0, 3); _tile_dpbssd(7, 1, 3); }
  const double dt = now() - t0;
  printf("TDPBSSD alone: %.1f M/s (%.0f G int8 MACs/s)\n", 4.0 * n / dt * 1e-6, 4.0 * n * 16384 / dt * 1e-9);
  printf("a group, A and B in L1, zero + stores: %.0f ns per 8 TDPBSSD\n", group_ns(A, 8192, B, 8192, 1, 0, n));
  printf("a group, A and B in L1, accumulating: %.0f ns\n", group_ns(A, 8192, B, 8192, 0, 0, n));
  printf("a group, A 28 KiB, B 512 KiB (L2), zero + stores: %.0f ns\n", group_ns(A, 28 * 1024, B, big, 1, 0, n));
  printf("the same with the fold of the previous group: %.0f ns\n", group_ns(A, 28 * 1024, B, big, 1, 1, n / 2));
  _tile_release();
  free(A);
  free(B);
  return 0;
}
