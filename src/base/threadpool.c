/* base/threadpool.c — persistent workers with a spin-then-sleep wait. */
#include "base/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

struct threadpool {
  int n;
  pthread_t *threads;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  threadpool_fn fn;
  void *arg;
  unsigned gen;     /* bumped for each job (atomic) */
  int pending;      /* workers still running the current job (atomic) */
  int stop;
};

struct worker_arg {
  struct threadpool *p;
  int ith;
};

enum { SPIN_ITERS = 200000 };

static void *worker_main(void *varg) {
  struct worker_arg *wa = varg;
  struct threadpool *p = wa->p;
  int ith = wa->ith;
  free(wa);
  unsigned seen = 0;
  for (;;) {
    unsigned g;
    int spins = 0;
    while ((g = __atomic_load_n(&p->gen, __ATOMIC_ACQUIRE)) == seen) {
      if (++spins < SPIN_ITERS) {
        if (spins % 1024 == 0) sched_yield(); /* oversubscribed: let the producer run */
        else CPU_RELAX();
        continue;
      }
      pthread_mutex_lock(&p->mu);
      while (__atomic_load_n(&p->gen, __ATOMIC_ACQUIRE) == seen && !p->stop)
        pthread_cond_wait(&p->cv, &p->mu);
      pthread_mutex_unlock(&p->mu);
      spins = 0;
      if (p->stop) return NULL;
    }
    if (p->stop) return NULL;
    seen = g;
    p->fn(p->arg, ith, p->n);
    __atomic_sub_fetch(&p->pending, 1, __ATOMIC_ACQ_REL);
  }
}

struct threadpool *threadpool_create(int n_threads) {
  if (n_threads <= 0) {
    long c = sysconf(_SC_NPROCESSORS_ONLN);
    n_threads = c > 0 ? (int)c : 1;
  }
  struct threadpool *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->n = n_threads;
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv, NULL);
  p->threads = calloc((size_t)n_threads, sizeof *p->threads);
  if (!p->threads) { free(p); return NULL; }
  for (int i = 1; i < n_threads; i++) {
    struct worker_arg *wa = malloc(sizeof *wa);
    if (!wa) { p->n = i; threadpool_free(p); return NULL; }
    wa->p = p;
    wa->ith = i;
    if (pthread_create(&p->threads[i], NULL, worker_main, wa)) {
      free(wa);
      p->n = i;
      threadpool_free(p);
      return NULL;
    }
  }
  return p;
}

void threadpool_free(struct threadpool *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  p->stop = 1;
  __atomic_add_fetch(&p->gen, 1, __ATOMIC_ACQ_REL);
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  for (int i = 1; i < p->n; i++) pthread_join(p->threads[i], NULL);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->cv);
  free(p->threads);
  free(p);
}

int threadpool_size(const struct threadpool *p) { return p ? p->n : 1; }

void threadpool_run(struct threadpool *p, threadpool_fn fn, void *arg) {
  if (!p || p->n == 1) {
    fn(arg, 0, 1);
    return;
  }
  p->fn = fn;
  p->arg = arg;
  __atomic_store_n(&p->pending, p->n - 1, __ATOMIC_RELEASE);
  pthread_mutex_lock(&p->mu);
  __atomic_add_fetch(&p->gen, 1, __ATOMIC_ACQ_REL);
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  fn(arg, 0, p->n);
  /* spin, then yield: with more threads than free cores the last worker needs our core */
  for (int spins = 0; __atomic_load_n(&p->pending, __ATOMIC_ACQUIRE) > 0; spins++) {
    if (spins < 4096) CPU_RELAX();
    else sched_yield();
  }
}

void threadpool_split(long total, int ith, int nth, long align, long *lo, long *hi) {
  if (align < 1) align = 1;
  long units = (total + align - 1) / align;
  long per = units / nth, extra = units % nth;
  long u0 = ith * per + (ith < extra ? ith : extra);
  long u1 = u0 + per + (ith < extra ? 1 : 0);
  *lo = u0 * align < total ? u0 * align : total;
  *hi = u1 * align < total ? u1 * align : total;
}
