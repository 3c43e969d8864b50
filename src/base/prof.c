/* base/prof.c — the counters of prof.h */
#include "base/prof.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

static const char *const NAMES[PROF_N] = {"tokenize", "engine step", "engine post", "label scoring",
                                          "forward enqueue", "forward wait", "embed pass", "embed round",
                                          "session prepare", "disk cache read", "disk cache upload",
                                          "step blocks", "step keying"};
static const char *const UNITS[PROF_N] = {"tokens", "tokens", "rows",   "prompts", "tokens", "rows",
                                          "tokens", "inputs", "tokens", "blocks",  "blocks",
                                          "sessions", "sessions"};
static _Atomic unsigned long long g_ns[PROF_N], g_calls[PROF_N], g_units[PROF_N];
static atomic_int g_on = -1; /* -1: not read yet */

int prof_on(void) {
  int on = atomic_load_explicit(&g_on, memory_order_relaxed);
  if (on < 0) {
    const char *v = getenv("HEARTH_PROFILE");
    on = v && *v && *v != '0';
    atomic_store(&g_on, on);
  }
  return on;
}

double prof_now(void) {
  if (!prof_on()) return 0;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void prof_add(enum prof_slot s, double t0, long units) {
  if (!prof_on() || s < 0 || s >= PROF_N) return;
  double dt = prof_now() - t0;
  atomic_fetch_add(&g_ns[s], (unsigned long long)(dt > 0 ? dt * 1e9 : 0));
  atomic_fetch_add(&g_calls[s], 1ULL);
  atomic_fetch_add(&g_units[s], (unsigned long long)(units > 0 ? units : 0));
}

void prof_dump(FILE *f) {
  if (!prof_on()) return;
  fprintf(f, "| span | calls | seconds | ms a call | units |\n| --- | ---: | ---: | ---: | ---: |\n");
  for (int i = 0; i < PROF_N; i++) {
    unsigned long long c = atomic_load(&g_calls[i]);
    if (!c) continue;
    double s = (double)atomic_load(&g_ns[i]) * 1e-9;
    fprintf(f, "| %s | %llu | %.3f | %.3f | %llu %s |\n", NAMES[i], c, s, 1e3 * s / (double)c,
            atomic_load(&g_units[i]), UNITS[i]);
  }
}
