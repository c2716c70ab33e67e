/* A persistent pool of worker threads: one pool per session, created once; each parallel step hands
 * the workers a task range without creating threads (workers spin briefly, then sleep). */
#ifndef KITE_BASE_THREADPOOL_H
#define KITE_BASE_THREADPOOL_H

#include <stdint.h>

typedef struct kite_pool kite_pool;

/* Runs fn(ctx, task, thread) for task in [0, n_tasks); thread in [0, n_threads) identifies the
 * caller's slot (for per-thread scratch). Each thread runs a contiguous span of the tasks in
 * order, then takes the rest of the other spans from their ends (threadpool.c). */
typedef void (*kite_pool_fn)(void *ctx, int64_t task, int thread);

/* n_threads >= 1 includes the calling thread; returns NULL on failure. */
kite_pool *kite_pool_new(int n_threads);
void kite_pool_free(kite_pool *pool);
int kite_pool_threads(const kite_pool *pool);
/* Blocks until every task has run. Not reentrant. */
void kite_pool_run(kite_pool *pool, kite_pool_fn fn, void *ctx, int64_t n_tasks);

/* Number of online CPUs (at least 1). */
int kite_cpu_count(void);

#endif
