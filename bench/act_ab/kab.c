/* kernel A/B: 8-bit (one plane) vs 16-bit (two planes) activations, same weights, one thread,
 * alternating, min of reps. Built against the tree of 5d2e4e8 (both modes still there). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <math.h>
#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/q4x16.h"
#include "quant/q4.h"
extern const struct cpu_kernels cpu_kernels_avx2_new;
void f16_quantize(const float *x, int n, int64_t cols, float *xr, float *sx);
void f16_matmul(const struct cpu_q4 *w, const float *xr, const float *sx, int n, float *out, int64_t ldo);
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
static uint64_t rng = 88172645463325252ull;
static float fr(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2 - 1; }
int main(int argc, char **argv) {
  const struct cpu_kernels *k = !strcmp(argv[1], "avx512") ? &cpu_kernels_avx512 : &cpu_kernels_avx2;
  int64_t rows = atol(argv[2]), cols = atol(argv[3]);
  int n = atoi(argv[4]), reps = atoi(argv[5]);
  struct cpu_q4 w = {rows, cols, malloc(rows * cols / 2), malloc(rows * cols / 128 * 2), NULL};
  float *row = malloc(cols * 4);
  for (int64_t r = 0; r < rows; r++) { for (int64_t c = 0; c < cols; c++) row[c] = fr(); q4_quantize_row(row, cols, w.qs + r * cols / 2, w.d + r * cols / 128); }
  q4x16_repack(&w);
  float *x = malloc((size_t)n * cols * 4), *o = malloc((size_t)n * rows * 4);
  for (int64_t i = 0; i < n * cols; i++) x[i] = fr();
  struct cpu_q8 a = {aligned_alloc(64, n * cols), aligned_alloc(64, n * cols), malloc(n * cols / 128 * 4), malloc(n * cols / 128 * 4), cols};
  int8_t *lo = a.lo;
  double best[3] = {1e9, 1e9, 1e9}, bnew = 1e9;
  float *xr = malloc((size_t)n * cols * 4), *sx = malloc(n * cols / 128 * 4), *o2 = malloc((size_t)n * rows * 4);
  int f16 = k == &cpu_kernels_avx2;
  for (int it = 0; it < reps; it++) {
    if (f16) {
      double t0 = now();
      f16_quantize(x, n, cols, xr, sx);
      f16_matmul(&w, xr, sx, n, o2, rows);
      double dt = now() - t0;
      if (dt < best[2]) best[2] = dt;
    }
    for (int m = 0; m < 2; m++) {
      int mode = (it & 1) ? 1 - m : m; /* ABBA */
      a.lo = mode ? lo : NULL;
      double t0 = now();
      k->q8_quantize(x, cols, 0, n, &a);
      k->matmul_q4q8(&w, &a, n, 0, rows, o, rows);
      double dt = now() - t0;
      if (dt < best[mode]) best[mode] = dt;
    }
    if (f16) { /* the tree's new AVX2 16-bit kernel (d246557+) */
      a.lo = lo;
      double t0 = now();
      cpu_kernels_avx2_new.q8_quantize(x, cols, 0, n, &a);
      cpu_kernels_avx2_new.matmul_q4q8(&w, &a, n, 0, rows, o2, rows);
      double dt = now() - t0;
      if (dt < bnew) bnew = dt;
    }
  }
  if (f16) printf("new avx2 16-bit %.3f ms: new16/old8 %.3f\n", bnew * 1e3, best[0] / bnew);
  if (f16) { double e = 0, m = 0; for (int64_t i = 0; i < n * rows; i++) { double d = o2[i] - o[i]; e = d * d > e ? d * d : e; m = o[i] * o[i] > m ? o[i] * o[i] : m; }
    printf("f16 (avx2 FMA) %.3f ms, f16/8-bit speed ratio %.3f, f16/16-bit %.3f (max |f16 - q16| %.2g of max |out| %.2g)\n", best[2] * 1e3, best[0] / best[2], best[1] / best[2], sqrt(e), sqrt(m)); }
  printf("%s %lldx%lld n=%d: 8-bit %.3f ms, 16-bit %.3f ms, 16/8 speed ratio %.3f\n", k->name, (long long)rows, (long long)cols, n,
         best[0] * 1e3, best[1] * 1e3, best[0] / best[1]);
  return 0;
}
