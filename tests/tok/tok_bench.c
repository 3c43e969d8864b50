/* tests/tok/tok_bench.c — tokenizer speed (a benchmark, not a test; never registered in CTest).
 *
 *   tok_bench DIR FILE...   loads DIR/tokenizer.json (best of 3 load times), then encodes each
 *                           FILE as one string on one thread (best of 5) and prints MB/s and
 *                           tokens/s. Used for bench/RESULTS.md against HF `tokenizers`
 *                           (tests/oracle/tok_oracle.py measures that side).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tok/tokenizer.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: tok_bench TOKENIZER_DIR FILE...\n");
    return 2;
  }
  struct hearth_err err = {0};
  struct tok *t = NULL;
  double best_load = 1e9;
  for (int r = 0; r < 3; r++) {
    double t0 = now();
    if (tok_load_dir(argv[1], &t, &err)) {
      fprintf(stderr, "tok_bench: %s\n", err.msg);
      return 1;
    }
    double dt = now() - t0;
    if (dt < best_load) best_load = dt;
    if (r < 2) tok_free(t);
  }
  printf("load %s: %.1f ms\n", argv[1], best_load * 1e3);
  for (int f = 2; f < argc; f++) {
    FILE *fp = fopen(argv[f], "rb");
    if (!fp) { perror(argv[f]); return 1; }
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (!buf || fread(buf, 1, (size_t)n, fp) != (size_t)n) { fprintf(stderr, "read failed\n"); return 1; }
    fclose(fp);
    double best = 1e9;
    int ntok = 0;
    for (int r = 0; r < 5; r++) {
      int32_t *ids;
      double t0 = now();
      if (tok_encode(t, buf, (size_t)n, 0, 1, &ids, &ntok, &err)) { fprintf(stderr, "tok_bench: %s\n", err.msg); return 1; }
      double dt = now() - t0;
      if (dt < best) best = dt;
      free(ids);
    }
    printf("encode %s: %ld bytes, %d tokens, %.2f MB/s, %.0f tok/s\n", argv[f], n, ntok, (double)n / best / 1e6,
           ntok / best);
    free(buf);
  }
  tok_free(t);
  return 0;
}
