/* bench/cpu_kb.c — one int4 matmul (matmul_q4q8) on one thread, min over repetitions (issue 35 item 1).
 *   cc -O2 -march=native -Isrc -Iinclude bench/cpu_kb.c build-cpu/libhearth.a -lm -lpthread -o /tmp/cpu_kb
 *   /tmp/cpu_kb ROWS COLS N [REPS]     (KSET=avx2 for the AVX2 set; DUMP=file writes the outputs) */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/q4x16.h"
#include "quant/q4.h"
static uint64_t rng = 0x1234567;
static float frand(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
  return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f; }
static double now(void) { struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return ts.tv_sec + ts.tv_nsec * 1e-9; }
int main(int argc, char **argv) {
  int64_t rows = atoll(argv[1]), cols = atoll(argv[2]); int n = atoi(argv[3]); int reps = argc > 4 ? atoi(argv[4]) : 20;
  const struct cpu_kernels *k = getenv("KSET") && !strcmp(getenv("KSET"), "avx2") ? &cpu_kernels_avx2 : &cpu_kernels_avx512;
  struct cpu_q4 w = {rows, cols, malloc(rows * cols / 2), malloc(rows * cols / 128 * 2), NULL};
  float *row = malloc(cols * 4);
  for (int64_t r = 0; r < rows; r++) { for (int64_t c = 0; c < cols; c++) row[c] = frand(); q4_quantize_row(row, cols, w.qs + r * cols / 2, w.d + r * cols / 128); }
  q4x16_repack(&w);
  float *x = malloc((size_t)n * cols * 4); for (int64_t i = 0; i < n * cols; i++) x[i] = frand();
  struct cpu_q8 a = {.q = malloc(n * cols), .lo = malloc(n * cols), .s = malloc(n * cols / 128 * 4), .c = malloc(n * cols / 128 * 4),
                     .cols = cols, .v16 = malloc(n * cols * 2), .tiles = NULL};
  k->q8_quantize(x, cols, 0, n, &a);
  float *out = malloc((size_t)n * rows * 4);
  double best = 1e9;
  for (int i = 0; i < reps; i++) { double t = now(); k->matmul_q4q8(&w, &a, n, 0, rows, out, rows); t = now() - t; if (t < best) best = t; }
  double sum = 0; for (int64_t i = 0; i < n * rows; i++) sum += out[i] * (double)((i % 7) + 1);
  double macs = (double)rows * cols * n;
  printf("%s %lldx%lld n=%d: %.3f ms  %.1f GMAC/s  %.1f GB/s  chk=%.9g\n", k->name, (long long)rows, (long long)cols, n, best * 1e3, macs / best * 1e-9, rows * cols / 2.0 / best * 1e-9, sum);
  if (getenv("DUMP")) { FILE *f = fopen(getenv("DUMP"), "wb"); fwrite(out, 4, (size_t)n * rows, f); fclose(f); }
  return 0;
}
