/* bench/cpu_kb2.c — a decode step's int4 matmuls of the Qwen2.5-0.5B shapes (24 x q,k,v,o,gate,up,down + the
 * LM head; random weights) on 2 threads with a spin barrier after each matmul: the kernels' bandwidth without the
 * engine. Static halves by default, DYN=1: chunks from one shared counter (the pre-issue-35 scheme).
 *   cc -O2 -march=native -Isrc -Iinclude bench/cpu_kb2.c build-cpu/libhearth.a -lm -lpthread -o /tmp/cpu_kb2
 *   /tmp/cpu_kb2 [LAYERS=24] [LM_HEAD=1] */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/q4x16.h"
#include "quant/q4.h"
/* decode-like: L layers of (q,k,v,o,gate,up,down) + LM head, 2 threads, barrier after each matmul */
static double now(void) { struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return ts.tv_sec + ts.tv_nsec * 1e-9; }
static struct cpu_q4 *W; static int nw; static struct cpu_q8 A[2][2]; static float *out; static pthread_barrier_t bar; static int reps = 10;
static const struct cpu_kernels *k;
static struct cpu_q4 mk(int64_t rows, int64_t cols) {
  struct cpu_q4 w = {rows, cols, malloc(rows * cols / 2), calloc(rows * cols / 128, 2), NULL};
  for (int64_t i = 0; i < rows * cols / 2; i++) w.qs[i] = (uint8_t)(i * 2654435761u >> 13);
  for (int64_t i = 0; i < rows * cols / 128; i++) w.d[i] = 0x2000;
  q4x16_repack(&w); return w;
}
static double tmin = 1e9;
static int64_t ctr[2000];
static volatile int bcount, bgen;
static void spin_bar(void) {
  int g = bgen;
  if (__atomic_add_fetch(&bcount, 1, __ATOMIC_ACQ_REL) == 2) { bcount = 0; __atomic_add_fetch(&bgen, 1, __ATOMIC_RELEASE); return; }
  while (__atomic_load_n(&bgen, __ATOMIC_ACQUIRE) == g) __builtin_ia32_pause();
}
static void *thr(void *arg) {
  int ith = (int)(long)arg;
  for (int r = 0; r < reps; r++) {
    pthread_barrier_wait(&bar);
    if (ith == 0) memset(ctr, 0, sizeof ctr);
    pthread_barrier_wait(&bar);
    double t = now();
    for (int i = 0; i < nw; i++) {
      int64_t nb = (W[i].rows + 15) / 16, mid = (nb / 2) * 16;
      const struct cpu_q8 *a = &A[ith][W[i].cols == 896 ? 0 : 1];
      if (getenv("DYN")) {
        int64_t per = nb / 16; if (per < 1) per = 1; int64_t rc = 16 * per, nch = (W[i].rows + rc - 1) / rc;
        for (;;) { int64_t c = __atomic_fetch_add(&ctr[i], 1, __ATOMIC_RELAXED); if (c >= nch) break;
          int64_t lo = c * rc, hi = lo + rc < W[i].rows ? lo + rc : W[i].rows; k->matmul_q4q8(&W[i], a, 1, lo, hi, out, W[i].rows); }
      } else if (ith == 0) k->matmul_q4q8(&W[i], a, 1, 0, mid, out, W[i].rows);
      else k->matmul_q4q8(&W[i], a, 1, mid, W[i].rows, out, W[i].rows);
      spin_bar();
    }
    t = now() - t;
    if (ith == 0 && t < tmin) tmin = t;
  }
  return NULL;
}
int main(int argc, char **argv) {
  int L = argc > 1 ? atoi(argv[1]) : 24;
  k = &cpu_kernels_avx512;
  W = malloc(sizeof *W * (7 * L + 1));
  double bytes = 0;
  for (int l = 0; l < L; l++) {
    int64_t sh[7][2] = {{896, 896}, {128, 896}, {128, 896}, {896, 896}, {4864, 896}, {4864, 896}, {896, 4864}};
    for (int j = 0; j < 7; j++) { W[nw++] = mk(sh[j][0], sh[j][1]); bytes += sh[j][0] * sh[j][1] * 0.5 * (1 + 1.0 / 32); }
  }
  if (argc < 3 || atoi(argv[2])) { W[nw++] = mk(151936, 896); bytes += 151936 * 896 * 0.5 * (1 + 1.0 / 32); }
  float *x = malloc(4864 * 4); for (int i = 0; i < 4864; i++) x[i] = (float)((i * 7) % 13) - 6.0f;
  for (int t = 0; t < 2; t++) for (int c = 0; c < 2; c++) {
    int64_t cols = c ? 4864 : 896;
    A[t][c] = (struct cpu_q8){.q = malloc(cols), .lo = malloc(cols), .s = malloc(cols / 128 * 4), .c = malloc(cols / 128 * 4), .cols = cols};
    k->q8_quantize(x, cols, 0, 1, &A[t][c]);
  }
  out = malloc(151936 * 4);
  pthread_barrier_init(&bar, NULL, 2);
  pthread_t th; pthread_create(&th, NULL, thr, (void *)1L); thr((void *)0L); pthread_join(th, NULL);
  printf("%d matmuls, %.1f MB: %.3f ms/token = %.1f GB/s = %.1f tok/s\n", nw, bytes / 1e6, tmin * 1e3, bytes / tmin * 1e-9, 1 / tmin);
  return 0;
}
