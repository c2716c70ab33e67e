/* How the forward pass hands work to the thread pool, shared by model/forward.c and model/moe.c. */
#ifndef KITE_MODEL_POOL_WORK_H
#define KITE_MODEL_POOL_WORK_H

#include "base/threadpool.h"
#include "kernels/kernels.h"

/* Products and attention below this many multiply-adds run on the calling thread: handing them to the
 * pool costs both threads a round trip between cores (and the results' cache lines a move), which small
 * models paid on every product. With each thread owning a span of the tasks (base/threadpool.c), the
 * other thread takes its share of even a tiny job, and llama2xs-281K decoded at 17-22k tok/s in some
 * runs instead of 35-39k. 256K multiply-adds are a few microseconds on one core: 144 KB of Q4_0
 * weights at one row, or attention over ~128 positions for 32 heads of 64. */
#define KITE_HANDOFF_MIN_MACS ((int64_t)1 << 18)

/* Runs fn over [0, count) on the pool when the work (macs, multiply-adds) pays for the hand-off. */
static inline void kite_run_sized(kite_pool *pool, kite_pool_fn fn, void *ctx, int64_t count, int64_t macs) {
    if (count > 1 && macs >= KITE_HANDOFF_MIN_MACS && kite_pool_threads(pool) > 1) kite_pool_run(pool, fn, ctx, count);
    else
        for (int64_t t = 0; t < count; t++) fn(ctx, t, 0);
}

typedef struct kite_quantize_rows_job {
    const kite_kernel_set *ks;
    uint32_t type;
    const float *x;
    int64_t cols;
    void *act;
} kite_quantize_rows_job;

static inline void kite_quantize_rows_task(void *ctx, int64_t task, int thread) {
    (void)thread;
    const kite_quantize_rows_job *job = ctx;
    job->ks->quantize_act(job->type, job->x, job->cols, (int32_t)task, (int32_t)task + 1, job->act);
}

/* Rows [0, n) of x ([n][cols]) quantized into act for weights of `type` (act_bytes(type, cols, n) bytes),
 * by rows in parallel when there are several (~1 us a row). */
static inline void kite_quantize_rows(const kite_kernel_set *ks, kite_pool *pool, uint32_t type, const float *x, int64_t cols,
                                      int32_t n, void *act) {
    kite_quantize_rows_job qj = {.ks = ks, .type = type, .x = x, .cols = cols, .act = act};
    if (n >= 4 && kite_pool_threads(pool) > 1) kite_pool_run(pool, kite_quantize_rows_task, &qj, n);
    else ks->quantize_act(type, x, cols, 0, n, act);
}

#endif
