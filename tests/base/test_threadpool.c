/* The thread pool: every task of a job runs exactly once, on a valid thread slot, whatever the
 * thread and task counts; a thread that stalls in its own span has the rest of it taken by the
 * others; consecutive jobs (the decode pattern: hundreds per token) never mix. */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <cmocka.h>

#include "base/threadpool.h"

enum { MAX_TASKS = 5000, MAX_THREADS = 8 };

typedef struct count_job {
    atomic_int runs[MAX_TASKS];     /* times each task ran */
    atomic_int by_thread[MAX_THREADS];
    atomic_int bad_thread;          /* a thread slot outside [0, n_threads) */
    int n_threads;
    int stall_thread;               /* this slot sleeps in every task (-1: none) */
    int job_id, *last_job_seen;     /* tasks record the job they belong to */
} count_job;

static void count_task(void *ctx, int64_t task, int thread) {
    count_job *j = ctx;
    if (thread < 0 || thread >= j->n_threads) {
        atomic_fetch_add(&j->bad_thread, 1);
        return;
    }
    atomic_fetch_add(&j->runs[task], 1);
    atomic_fetch_add(&j->by_thread[thread], 1);
    if (thread == j->stall_thread) {
        struct timespec ts = {0, 2 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

static void check_job(kite_pool *pool, int n_threads, int64_t n_tasks, int stall_thread) {
    count_job *j = calloc(1, sizeof *j);
    assert_non_null(j);
    j->n_threads = n_threads;
    j->stall_thread = stall_thread;
    kite_pool_run(pool, count_task, j, n_tasks);
    assert_int_equal(atomic_load(&j->bad_thread), 0);
    for (int64_t t = 0; t < n_tasks; t++) assert_int_equal(atomic_load(&j->runs[t]), 1);
    for (int64_t t = n_tasks; t < MAX_TASKS; t++) assert_int_equal(atomic_load(&j->runs[t]), 0);
    int total = 0;
    for (int i = 0; i < MAX_THREADS; i++) total += atomic_load(&j->by_thread[i]);
    assert_int_equal(total, (int)n_tasks);
    if (stall_thread >= 0 && n_threads > 1 && n_tasks >= 64 * n_threads) {
        /* The stalled slot sleeps 2 ms per task; the others finish their spans in microseconds and
         * take the rest of its span, so it runs fewer than the n_tasks / n_threads of its own span
         * (a quarter of the span, 32 ms, is the margin for a worker that is slow to wake). */
        assert_true(atomic_load(&j->by_thread[stall_thread]) < n_tasks / n_threads * 3 / 4);
    }
    free(j);
}

static void test_every_task_once(void **state) {
    (void)state;
    static const int threads[] = {1, 2, 3, 4, 8};
    static const int64_t tasks[] = {0, 1, 2, 3, 7, 64, 65, 1000, MAX_TASKS};
    for (size_t a = 0; a < sizeof threads / sizeof *threads; a++) {
        kite_pool *pool = kite_pool_new(threads[a]);
        assert_non_null(pool);
        assert_int_equal(kite_pool_threads(pool), threads[a]);
        for (size_t b = 0; b < sizeof tasks / sizeof *tasks; b++) check_job(pool, threads[a], tasks[b], -1);
        kite_pool_free(pool);
    }
}

static void test_stalled_thread_span_is_taken(void **state) {
    (void)state;
    for (int n_threads = 2; n_threads <= 3; n_threads++) {
        kite_pool *pool = kite_pool_new(n_threads);
        assert_non_null(pool);
        /* Slot 0 is the caller: stalling it leaves its span to the workers; stalling the last worker
         * leaves its span to the caller. */
        check_job(pool, n_threads, 64 * n_threads, 0);
        check_job(pool, n_threads, 64 * n_threads, n_threads - 1);
        kite_pool_free(pool);
    }
}

typedef struct seq_job {
    atomic_long sum;
} seq_job;

static void add_task(void *ctx, int64_t task, int thread) {
    (void)thread;
    atomic_fetch_add(&((seq_job *)ctx)->sum, (long)task + 1);
}

static void test_many_consecutive_jobs(void **state) {
    (void)state;
    kite_pool *pool = kite_pool_new(2);
    assert_non_null(pool);
    for (int job = 0; job < 20000; job++) {
        seq_job j = {0};
        int64_t n = 1 + job % 97;
        kite_pool_run(pool, add_task, &j, n);
        assert_int_equal(atomic_load(&j.sum), n * (n + 1) / 2);
    }
    kite_pool_free(pool);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_task_once),
        cmocka_unit_test(test_stalled_thread_span_is_taken),
        cmocka_unit_test(test_many_consecutive_jobs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
