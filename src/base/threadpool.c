/* base/threadpool.c — persistent workers with a spin-then-sleep wait and a spinning barrier.
 *
 * Wake-up protocol: the caller bumps `gen` (seq_cst), then looks at `sleepers`; a worker that gives
 * up spinning takes the mutex, increments `sleepers` (seq_cst) and re-reads `gen` before waiting.
 * One of the two always sees the other's write, so a wake-up is never lost, and the common case
 * (workers still spinning) costs one atomic add and no lock. Spinning yields the core now and then
 * so an oversubscribed machine (more threads than free cores) still makes progress. */
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
  /* job g is described by jobs[g & 1]: the caller fills the slot of g + 1 while a late worker may
   * still be reading the slot of g, and a worker re-reads gen after reading a slot, so a slot it
   * read was not being rewritten for a later job (the caller writes slots only after publishing
   * the previous gen, with release stores). (atomic fields) */
  struct {
    threadpool_fn fn;
    void *arg;
    int dynamic;     /* the job was started by threadpool_run_dynamic */
  } jobs[2];
  unsigned gen;      /* bumped for each job (atomic) */
  int sleepers;      /* workers blocked on cv (atomic) */
  int stop;          /* (atomic) */
  /* each on its own cache line: written by every thread */
  _Alignas(64) int pending;      /* workers still running the current job (atomic) */
  _Alignas(64) int dyn_ctl;      /* dynamic jobs: see DYN_* (atomic) */
  _Alignas(64) int bar_count;    /* threads arrived at the current barrier (atomic) */
  _Alignas(64) unsigned bar_gen; /* barrier generation (atomic) */
};

struct worker_arg {
  struct threadpool *p;
  int ith;
};

enum {
  SPIN_ITERS = 200000, YIELD_EVERY = 1024,
  /* dyn_ctl = job tag (low 14 bits of gen) << 16 | closed bit << 15 | calls in progress */
  DYN_TAG_SHIFT = 16, DYN_TAG_MASK = 0x3fff, DYN_CLOSED = 1 << 15, DYN_COUNT_MASK = 0x7fff,
};

static void *worker_main(void *varg) {
  struct worker_arg *wa = varg;
  struct threadpool *p = wa->p;
  int ith = wa->ith;
  free(wa);
  unsigned seen = 0;
  for (;;) {
    unsigned g;
    int spins = 0;
    while ((g = __atomic_load_n(&p->gen, __ATOMIC_SEQ_CST)) == seen) {
      if (++spins < SPIN_ITERS) {
        if (spins % YIELD_EVERY == 0) sched_yield(); /* oversubscribed: let the producer run */
        else CPU_RELAX();
        continue;
      }
      pthread_mutex_lock(&p->mu);
      __atomic_add_fetch(&p->sleepers, 1, __ATOMIC_SEQ_CST);
      while (__atomic_load_n(&p->gen, __ATOMIC_SEQ_CST) == seen && !__atomic_load_n(&p->stop, __ATOMIC_SEQ_CST))
        pthread_cond_wait(&p->cv, &p->mu);
      __atomic_sub_fetch(&p->sleepers, 1, __ATOMIC_SEQ_CST);
      pthread_mutex_unlock(&p->mu);
      spins = 0;
    }
    seen = g;
    if (__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE)) return NULL;
    /* read the job's description, then make sure it is still job g (a dynamic job may have been
     * closed and replaced meanwhile; a static job cannot: its caller waits for us). Reading one
     * shared slot here was a race: a worker late for dynamic job g could read the description of
     * static job g + 1 while the caller wrote it, still see gen == g, run it as job g and then
     * again as g + 1 (pending dropped twice, the caller returned while a call still ran). */
    int slot = (int)(g & 1);
    int dyn = __atomic_load_n(&p->jobs[slot].dynamic, __ATOMIC_RELAXED);
    threadpool_fn fn = __atomic_load_n(&p->jobs[slot].fn, __ATOMIC_RELAXED);
    void *arg = __atomic_load_n(&p->jobs[slot].arg, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (__atomic_load_n(&p->gen, __ATOMIC_SEQ_CST) != g) continue; /* a dynamic job we missed */
    if (dyn) {
      /* join unless the caller has already closed job g */
      int want = (int)(g & DYN_TAG_MASK) << DYN_TAG_SHIFT;
      int c = __atomic_load_n(&p->dyn_ctl, __ATOMIC_ACQUIRE);
      for (;;) {
        if ((c & ~DYN_COUNT_MASK) != want) break; /* closed, or another job */
        if (__atomic_compare_exchange_n(&p->dyn_ctl, &c, c + 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
          fn(arg, ith, p->n);
          __atomic_sub_fetch(&p->dyn_ctl, 1, __ATOMIC_ACQ_REL);
          break;
        }
      }
      continue;
    }
    fn(arg, ith, p->n);
    __atomic_sub_fetch(&p->pending, 1, __ATOMIC_ACQ_REL);
  }
}

struct threadpool *threadpool_create(int n_threads) {
  if (n_threads <= 0) {
    long c = sysconf(_SC_NPROCESSORS_ONLN);
    n_threads = c > 0 ? (int)c : 1;
  }
  struct threadpool *p = aligned_alloc(64, (sizeof(struct threadpool) + 63) & ~(size_t)63);
  if (!p) return NULL;
  *p = (struct threadpool){0};
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
  __atomic_store_n(&p->stop, 1, __ATOMIC_SEQ_CST);
  __atomic_add_fetch(&p->gen, 1, __ATOMIC_SEQ_CST);
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  for (int i = 1; i < p->n; i++) pthread_join(p->threads[i], NULL);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->cv);
  free(p->threads);
  free(p);
}

int threadpool_size(const struct threadpool *p) { return p ? p->n : 1; }

/* Describes job g in its slot. Release stores: a worker that reads one of them also sees the
 * publication of g - 1 when it re-reads gen, so it cannot mistake them for job g - 2. */
static void publish(struct threadpool *p, unsigned g, threadpool_fn fn, void *arg, int dynamic) {
  int slot = (int)(g & 1);
  __atomic_store_n(&p->jobs[slot].fn, fn, __ATOMIC_RELEASE);
  __atomic_store_n(&p->jobs[slot].arg, arg, __ATOMIC_RELEASE);
  __atomic_store_n(&p->jobs[slot].dynamic, dynamic, __ATOMIC_RELEASE);
}

void threadpool_run(struct threadpool *p, threadpool_fn fn, void *arg) {
  if (!p || p->n == 1) {
    fn(arg, 0, 1);
    return;
  }
  unsigned g = __atomic_load_n(&p->gen, __ATOMIC_RELAXED) + 1;
  publish(p, g, fn, arg, 0);
  __atomic_store_n(&p->pending, p->n - 1, __ATOMIC_RELEASE);
  __atomic_store_n(&p->gen, g, __ATOMIC_SEQ_CST);
  if (__atomic_load_n(&p->sleepers, __ATOMIC_SEQ_CST) > 0) {
    pthread_mutex_lock(&p->mu);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
  }
  fn(arg, 0, p->n);
  /* spin, then yield: with more threads than free cores the last worker needs our core */
  for (int spins = 0; __atomic_load_n(&p->pending, __ATOMIC_ACQUIRE) > 0; spins++) {
    if (spins < 4096) CPU_RELAX();
    else sched_yield();
  }
}

void threadpool_run_dynamic(struct threadpool *p, threadpool_fn fn, void *arg) {
  if (!p || p->n == 1) {
    fn(arg, 0, 1);
    return;
  }
  unsigned g = __atomic_load_n(&p->gen, __ATOMIC_RELAXED) + 1;
  publish(p, g, fn, arg, 1);
  __atomic_store_n(&p->dyn_ctl, (int)(g & DYN_TAG_MASK) << DYN_TAG_SHIFT, __ATOMIC_RELEASE);
  __atomic_store_n(&p->gen, g, __ATOMIC_SEQ_CST);
  if (__atomic_load_n(&p->sleepers, __ATOMIC_SEQ_CST) > 0) {
    pthread_mutex_lock(&p->mu);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
  }
  fn(arg, 0, p->n);
  __atomic_fetch_or(&p->dyn_ctl, DYN_CLOSED, __ATOMIC_ACQ_REL);
  for (int spins = 0; (__atomic_load_n(&p->dyn_ctl, __ATOMIC_ACQUIRE) & DYN_COUNT_MASK) > 0; spins++) {
    if (spins < 4096) CPU_RELAX();
    else sched_yield();
  }
}

void threadpool_barrier(struct threadpool *p) {
  if (!p || p->n == 1) return;
  unsigned g = __atomic_load_n(&p->bar_gen, __ATOMIC_ACQUIRE);
  if (__atomic_add_fetch(&p->bar_count, 1, __ATOMIC_ACQ_REL) == p->n) {
    __atomic_store_n(&p->bar_count, 0, __ATOMIC_RELAXED);
    __atomic_add_fetch(&p->bar_gen, 1, __ATOMIC_RELEASE);
    return;
  }
  for (int spins = 0; __atomic_load_n(&p->bar_gen, __ATOMIC_ACQUIRE) == g; spins++) {
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
