/* tools/bandwidth_probe.c — measures this machine's memory read bandwidth: each thread sums its
 * slice of a large buffer (larger than any cache). The result is the decode floor's denominator. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

double bench_bandwidth_probe(int threads, int mib);

struct slice { const uint64_t *p; size_t n; uint64_t sum; };

static void *reader(void *arg) {
  struct slice *s = arg;
  uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
  for (size_t i = 0; i + 4 <= s->n; i += 4) { a0 += s->p[i]; a1 += s->p[i + 1]; a2 += s->p[i + 2]; a3 += s->p[i + 3]; }
  s->sum = a0 + a1 + a2 + a3;
  return NULL;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double bench_bandwidth_probe(int threads, int mib) {
  if (threads <= 0) threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
  if (threads > 64) threads = 64;
  size_t n = (size_t)mib * 1048576 / 8;
  uint64_t *buf = malloc(n * 8);
  if (!buf) return 0;
  for (size_t i = 0; i < n; i++) buf[i] = i * 0x9e3779b97f4a7c15ull;
  double best = 0;
  for (int rep = 0; rep < 5; rep++) {
    pthread_t th[64];
    struct slice sl[64];
    double t0 = now_s();
    for (int t = 0; t < threads; t++) {
      sl[t].p = buf + n / threads * t;
      sl[t].n = n / threads;
      pthread_create(&th[t], NULL, reader, &sl[t]);
    }
    for (int t = 0; t < threads; t++) pthread_join(th[t], NULL);
    double gbs = (double)n * 8 / (now_s() - t0) / 1e9;
    if (gbs > best) best = gbs;
  }
  free(buf);
  return best;
}
