/* base/threadpool.h — a fixed pool of worker threads for CPU kernels.
 *
 * threadpool_run(pool, fn, arg) calls fn(arg, i, n) once for every i in [0, n) where n is the
 * pool's thread count (the calling thread is worker 0) and returns when all calls have returned.
 * Workers spin briefly on an atomic generation counter before sleeping, so back-to-back kernels
 * (a decode step is hundreds of them) do not pay a futex wake each. No allocation after create.
 * One caller at a time per pool. */
#ifndef HEARTH_BASE_THREADPOOL_H
#define HEARTH_BASE_THREADPOOL_H

struct threadpool;
typedef void (*threadpool_fn)(void *arg, int ith, int nth);

/* n_threads <= 0 means the number of online CPUs. Returns NULL on allocation failure. */
struct threadpool *threadpool_create(int n_threads);
void threadpool_free(struct threadpool *p);
int threadpool_size(const struct threadpool *p);
void threadpool_run(struct threadpool *p, threadpool_fn fn, void *arg);

/* Splits [0, total) into nth nearly equal parts, aligned to `align`; part ith is [*lo, *hi). */
void threadpool_split(long total, int ith, int nth, long align, long *lo, long *hi);
#endif
