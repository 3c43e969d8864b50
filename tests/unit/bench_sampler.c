/* tests/unit/bench_sampler.c — the host sampler's time for one draw from a flat row (a random-weight model's), the
 * sampler (runtime/sampler.c) beside the pre-split copy (sampler_ref.c: qsort of the head), and whether both drew
 * the same ids. Usage: bench_sampler V TEMP TOP_P [MIN_P]; prints one markdown row: V, T, top-p, min-p,
 * ms median (min-max) of the old and the new sampler over 31 draws. Not a test: bench/RESULTS.md. */
#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "hearth.h"
#include "unit/sampler_ref.h"

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}
static int cmp_d(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  if (argc < 4) { fprintf(stderr, "usage: bench_sampler V TEMP TOP_P [MIN_P]\n"); return 2; }
  const int V = atoi(argv[1]), R = 31;
  if (V <= 0) return 2;
  struct hearth_sampling p;
  hearth_sampling_default(&p);
  p.temperature = (float)atof(argv[2]);
  p.top_p = (float)atof(argv[3]);
  p.min_p = argc > 4 ? (float)atof(argv[4]) : 0.0f;
  p.seed = 1;
  float *row = malloc((size_t)V * sizeof *row);
  uint64_t x = 88172645463325252ull;
  for (int i = 0; i < V; i++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; row[i] = (float)(x >> 40) / 8388608.0f - 1.0f; }
  struct hearth_sampler *s = NULL;
  struct ref_sampler *r = NULL;
  struct hearth_err err = {0};
  if (hearth_sampler_new(&p, V, &s, &err) || ref_sampler_new(&p, V, &r, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
  double tn[31], to[31];
  int same = 1;
  for (int k = 0; k < R; k++) {
    double t0 = now_s();
    const int32_t a = hearth_sampler_sample(s, row, NULL, 0);
    tn[k] = now_s() - t0;
    t0 = now_s();
    const int32_t b = ref_sampler_sample(r, row, NULL, 0);
    to[k] = now_s() - t0;
    same &= a == b;
  }
  qsort(tn, R, sizeof *tn, cmp_d);
  qsort(to, R, sizeof *to, cmp_d);
  printf("| %d | %g | %g | %g | %.2f (%.2f-%.2f) | %.2f (%.2f-%.2f) | %s |\n", V, (double)p.temperature, (double)p.top_p,
         (double)p.min_p, to[R / 2] * 1e3, to[0] * 1e3, to[R - 1] * 1e3, tn[R / 2] * 1e3, tn[0] * 1e3, tn[R - 1] * 1e3,
         same ? "same ids" : "IDS DIFFER");
  hearth_sampler_free(s);
  ref_sampler_free(r);
  free(row);
  return same ? 0 : 1;
}
