#include "base/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

struct kite_pool {
    int n_threads;              /* including the caller */
    pthread_t *workers;         /* n_threads - 1 */
    pthread_mutex_t mutex;
    pthread_cond_t wake;
    /* The current job. `generation` is odd while the caller rewrites the job and even once it is
     * published; a worker joins a job only by raising `active` while the generation it saw is still
     * current, and the caller rewrites a job only after `active` drops to zero. So a worker that wakes
     * late never reads a half-written job, and the caller never waits for a worker that is asleep:
     * it waits for the tasks to be done, whoever did them. */
    kite_pool_fn fn;
    void *ctx;
    int64_t n_tasks;
    atomic_int_fast64_t next_task;
    atomic_int_fast64_t done_tasks;
    atomic_int active;
    atomic_uint generation;
    atomic_bool stop;
};

typedef struct { kite_pool *pool; int index; } worker_arg;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static void run_tasks(kite_pool *p, int thread) {
    for (;;) {
        int64_t t = atomic_fetch_add(&p->next_task, 1);
        if (t >= p->n_tasks) break;
        p->fn(p->ctx, t, thread);
        atomic_fetch_add(&p->done_tasks, 1);
    }
}

static void *worker_main(void *arg) {
    worker_arg *wa = arg;
    kite_pool *p = wa->pool;
    int index = wa->index;
    free(wa);
    unsigned seen = 0;
    for (;;) {
        /* Spin a little: consecutive matmuls arrive microseconds apart during decoding. */
        unsigned gen = atomic_load(&p->generation);
        for (int spin = 0; (gen == seen || (gen & 1)) && spin < 20000 && !atomic_load(&p->stop); spin++) {
            cpu_relax();
            gen = atomic_load(&p->generation);
        }
        if (gen == seen || (gen & 1)) {
            pthread_mutex_lock(&p->mutex);
            while (((gen = atomic_load(&p->generation)) == seen || (gen & 1)) && !atomic_load(&p->stop))
                pthread_cond_wait(&p->wake, &p->mutex);
            pthread_mutex_unlock(&p->mutex);
        }
        if (atomic_load(&p->stop)) return NULL;
        seen = gen;
        atomic_fetch_add(&p->active, 1);
        if (atomic_load(&p->generation) == gen) run_tasks(p, index);
        atomic_fetch_sub(&p->active, 1);
    }
}

kite_pool *kite_pool_new(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    kite_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n_threads = n_threads;
    pthread_mutex_init(&p->mutex, NULL);
    pthread_cond_init(&p->wake, NULL);
    p->workers = calloc((size_t)n_threads, sizeof *p->workers);
    if (!p->workers) { free(p); return NULL; }
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (!wa || (wa->pool = p, wa->index = i, pthread_create(&p->workers[i - 1], NULL, worker_main, wa)) != 0) {
            free(wa);
            p->n_threads = i; /* free() joins the ones that started */
            kite_pool_free(p);
            return NULL;
        }
    }
    return p;
}

void kite_pool_free(kite_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mutex);
    atomic_store(&p->stop, true);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mutex);
    for (int i = 1; i < p->n_threads; i++) pthread_join(p->workers[i - 1], NULL);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->mutex);
    free(p->workers);
    free(p);
}

int kite_pool_threads(const kite_pool *p) { return p->n_threads; }

void kite_pool_run(kite_pool *p, kite_pool_fn fn, void *ctx, int64_t n_tasks) {
    if (n_tasks <= 0) return;
    if (p->n_threads == 1 || n_tasks == 1) {
        for (int64_t t = 0; t < n_tasks; t++) fn(ctx, t, 0);
        return;
    }
    atomic_fetch_add(&p->generation, 1); /* odd: the job is being rewritten */
    while (atomic_load(&p->active) > 0) cpu_relax();
    p->fn = fn;
    p->ctx = ctx;
    p->n_tasks = n_tasks;
    atomic_store(&p->next_task, 0);
    atomic_store(&p->done_tasks, 0);
    pthread_mutex_lock(&p->mutex);
    atomic_fetch_add(&p->generation, 1); /* even: published */
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mutex);
    run_tasks(p, 0);
    while (atomic_load(&p->done_tasks) < n_tasks) cpu_relax();
}

int kite_cpu_count(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}
