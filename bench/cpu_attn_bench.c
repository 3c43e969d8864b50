/* bench/cpu_attn_bench.c — the CPU attention tile alone, on the shape of a W5 record: one sequence of N new tokens
 * after P cached ones (the shared instruction), tiles of up to 16 tokens as cpu_attention forms them, one thread,
 * each set timed over >= 1 s, two rounds interleaved. Useful MACs = rows x keys seen x head_dim x 2 (QK and PV).
 * Build against a Release build of the library:
 *   gcc -O2 -Isrc -Iinclude bench/cpu_attn_bench.c build-rel/libhearth.a -lm -lpthread -o /tmp/attb
 *   /tmp/attb 14 2 64 300 25      # heads kv_heads head_dim past new: Qwen2.5-0.5B under W5's instruction
 *   /tmp/attb 16 2 128 300 25     # Qwen2.5-3B */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/kern_limits.h"
#include "base/cpu_features.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  if (argc < 6) {
    fprintf(stderr, "usage: %s HEADS KV_HEADS HEAD_DIM PAST NEW\n", argv[0]);
    return 2;
  }
  const int nh = atoi(argv[1]), nkv = atoi(argv[2]), hd = atoi(argv[3]), past = atoi(argv[4]), n = atoi(argv[5]);
  const int bs = 16, G = nh / nkv, mb = (past + n + bs - 1) / bs;
  const struct cpu_features *f = cpu_features_get();
  int32_t *bt = malloc(sizeof(int32_t) * (size_t)mb), *pos = malloc(sizeof(int32_t) * (size_t)n),
          *seq = calloc((size_t)n, sizeof(int32_t));
  for (int i = 0; i < mb; i++) bt[i] = (i * 5 + 2) % mb;
  for (int t = 0; t < n; t++) pos[t] = past + t;
  const int64_t ldkv = (int64_t)nkv * hd, ldq = (int64_t)nh * hd, nkvf = (int64_t)mb * bs * ldkv;
  float *k = malloc(sizeof(float) * (size_t)nkvf), *v = malloc(sizeof(float) * (size_t)nkvf),
        *q = malloc(sizeof(float) * (size_t)(n * ldq)), *o = malloc(sizeof(float) * (size_t)(n * ldq));
  srand(1);
  for (int64_t i = 0; i < nkvf; i++) {
    k[i] = rand() / (float)RAND_MAX - 0.5f;
    v[i] = rand() / (float)RAND_MAX - 0.5f;
  }
  for (int64_t i = 0; i < n * ldq; i++) q[i] = 2.0f * (rand() / (float)RAND_MAX - 0.5f);
  struct cpu_attn_job j = {q, o, k, v, pos, seq, bt, mb, bs, nh, nkv, hd, 0, 1.0f / sqrtf((float)hd), 0.0f};
  int tq = KERN_ATT_OBUF / (G * hd);
  if (tq > 16) tq = 16;
  double macs = 0;
  for (int t = 0; t < n; t++) macs += (double)nh * (pos[t] + 1) * hd * 2;
  const struct cpu_kernels *ks[3];
  int nk = 0;
  ks[nk++] = &cpu_kernels_avx2;
  if (f->avx512f && f->avx512bw && f->avx512vl && f->avx512vnni) ks[nk++] = &cpu_kernels_avx512;
  for (int rep = 0; rep < 2; rep++)
    for (int s = 0; s < nk; s++) {
      double t0 = now();
      int it = 0;
      do {
        for (int kvh = 0; kvh < nkv; kvh++)
          for (int a = 0; a < n; a += tq) ks[s]->attn_tile(&j, a, a + tq < n ? a + tq : n, kvh);
        it++;
      } while (now() - t0 < 1.0);
      const double dt = (now() - t0) / it;
      printf("%-12s heads %d/%d hd %d, %d new after %d: %.1f us, %.1f GMAC/s\n", ks[s]->name, nh, nkv, hd, n, past,
             dt * 1e6, macs / dt * 1e-9);
    }
  free(bt); free(pos); free(seq); free(k); free(v); free(q); free(o);
  return 0;
}
