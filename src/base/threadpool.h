/* base/threadpool.h — a fixed pool of worker threads for CPU kernels.
 *
 * threadpool_run(pool, fn, arg) calls fn(arg, i, n) once for every i in [0, n) where n is the
 * pool's thread count (the calling thread is worker 0) and returns when all calls have returned.
 * Workers spin on an atomic generation counter before sleeping, so back-to-back kernels (a decode
 * step is hundreds of them) pay neither a futex wake nor a lock: the mutex and condition variable
 * are touched only when a worker has actually gone to sleep. threadpool_barrier() lets the n calls
 * of one job meet in the middle (e.g. quantize activations, then multiply). No allocation after
 * create. One caller at a time per pool. */
#ifndef HEARTH_BASE_THREADPOOL_H
#define HEARTH_BASE_THREADPOOL_H

struct threadpool;
typedef void (*threadpool_fn)(void *arg, int ith, int nth);

/* n_threads <= 0 means the number of online CPUs. Returns NULL on allocation failure. */
struct threadpool *threadpool_create(int n_threads);
void threadpool_free(struct threadpool *p);
int threadpool_size(const struct threadpool *p);
void threadpool_run(struct threadpool *p, threadpool_fn fn, void *arg);
/* Like threadpool_run, but fn(arg, i, n) runs only on the threads that are awake to take part:
 * the caller always, a worker only if it arrives before the caller has finished its own call.
 * fn must therefore hand out its work dynamically (an atomic counter in arg) and never wait for a
 * particular i; ith is still unique among the calls. Returns when every started call has
 * returned. On a machine with more runnable threads than cores this keeps a descheduled worker
 * from stalling every kernel. */
void threadpool_run_dynamic(struct threadpool *p, threadpool_fn fn, void *arg);
/* Inside a job: returns once all n calls of the job have reached it. Every call must reach it the
 * same number of times. NULL or a pool of one thread: no-op. */
void threadpool_barrier(struct threadpool *p);

/* Splits [0, total) into nth nearly equal parts, aligned to `align`; part ith is [*lo, *hi). */
void threadpool_split(long total, int ith, int nth, long align, long *lo, long *hi);
#endif
