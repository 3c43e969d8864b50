/* bench/mem_read.c — what this machine's memory gives a plain streaming read: THREADS threads each sum their slice
 * of a 1 GiB buffer (2 MiB-aligned, MADV_HUGEPAGE, as the CPU backend's weights) with four 64-byte AVX-512 loads
 * per step and no software prefetch; best of 7 passes. `hearth bench --probe` (tools/bandwidth_probe.c) is a
 * scalar sum that includes thread start-up and reads less; this is the ceiling a decode kernel's stream is
 * compared with (bench/RESULTS.md, session 37). Run it right before and after the runs it is compared with:
 * on the KVM machines this project gets, the figure moves by tens of per cent within minutes.
 *   gcc -O2 -mavx512f bench/mem_read.c -o /tmp/mem_read -lpthread && /tmp/mem_read 1 && /tmp/mem_read 2 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

struct slice { const uint8_t *p; size_t n; long long sum; };

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static void *reader(void *arg) {
  struct slice *s = arg;
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 256 <= s->n; i += 256) {
    a0 = _mm512_add_epi64(a0, _mm512_load_si512(s->p + i));
    a1 = _mm512_add_epi64(a1, _mm512_load_si512(s->p + i + 64));
    a2 = _mm512_add_epi64(a2, _mm512_load_si512(s->p + i + 128));
    a3 = _mm512_add_epi64(a3, _mm512_load_si512(s->p + i + 192));
  }
  s->sum = _mm512_reduce_add_epi64(_mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)));
  return NULL;
}

int main(int argc, char **argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 1;
  if (threads < 1 || threads > 64) threads = 1;
  const size_t n = (size_t)1 << 30, per = n / (size_t)threads / 256 * 256;
  uint8_t *buf = aligned_alloc((size_t)1 << 21, n);
  if (!buf) return 1;
  (void)madvise(buf, n, MADV_HUGEPAGE);
  for (size_t i = 0; i < n; i += 8) *(uint64_t *)(buf + i) = i * 0x9e3779b97f4a7c15ull;
  double best = 0;
  long long sink = 0;
  for (int rep = 0; rep < 7; rep++) {
    pthread_t th[64];
    struct slice sl[64];
    double t0 = now();
    for (int t = 0; t < threads; t++) {
      sl[t] = (struct slice){buf + per * (size_t)t, per, 0};
      pthread_create(&th[t], NULL, reader, &sl[t]);
    }
    for (int t = 0; t < threads; t++) pthread_join(th[t], NULL), sink += sl[t].sum;
    double gbs = (double)per * threads / (now() - t0) / 1e9;
    if (gbs > best) best = gbs;
  }
  printf("%d thread(s): %.1f GB/s (plain AVX-512 read, best of 7; checksum %lld)\n", threads, best, sink & 0xff);
  free(buf);
  return 0;
}
