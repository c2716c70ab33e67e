/* The routed MoE FFN: see moe.h for the math and why its results are batch-invariant. */
#include "model/moe.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/pool_work.h"
#include "quant/types.h"

void kite_moe_layer_free(kite_moe_layer *moe) {
    if (!moe) return;
    kite_packed_matrix_free(&moe->router);
    for (int32_t x = 0; x < moe->n_experts; x++) {
        if (moe->gate) kite_packed_matrix_free(&moe->gate[x]);
        if (moe->up) kite_packed_matrix_free(&moe->up[x]);
        if (moe->down) kite_packed_matrix_free(&moe->down[x]);
    }
    free(moe->gate);
    free(moe->up);
    free(moe->down);
    free(moe->views);
    memset(moe, 0, sizeof *moe);
}

int kite_moe_scratch_init(kite_moe_scratch *ms, int32_t max_batch, int32_t dim, int32_t n_experts, int32_t n_used,
                          int32_t expert_ffn, kite_error *e) {
    memset(ms, 0, sizeof *ms);
    const size_t rows = (size_t)max_batch * (size_t)n_used;
    ms->max_rows = (int32_t)rows;
    const int64_t widest = dim > expert_ffn ? dim : expert_ffn, widest_k = (widest + 255) / 256 * 256;
    const kite_kernel_set *ks = kite_kernels();
    size_t a8 = ks->act_bytes(KITE_TYPE_Q8_0, widest_k, (int32_t)rows), ak = ks->act_bytes(KITE_TYPE_Q4_K, widest_k, (int32_t)rows);
    ms->act_bytes = ((a8 > ak ? a8 : ak) + 63) / 64 * 64;
    ms->logits = calloc((size_t)max_batch * (size_t)n_experts, sizeof(float));
    ms->expert = calloc(rows, sizeof(int32_t));
    ms->weight = calloc(rows, sizeof(float));
    ms->count = calloc((size_t)n_experts, sizeof(int32_t));
    ms->start = calloc((size_t)n_experts + 1, sizeof(int32_t));
    ms->pair_row = calloc(rows, sizeof(int32_t));
    ms->slot_pair = calloc(rows, sizeof(int32_t));
    ms->xg = calloc(rows * (size_t)dim, sizeof(float));
    ms->gate = calloc(rows * (size_t)expert_ffn, sizeof(float));
    ms->up = calloc(rows * (size_t)expert_ffn, sizeof(float));
    ms->y = calloc(rows * (size_t)dim, sizeof(float));
    ms->act = ms->act_bytes ? aligned_alloc(64, ms->act_bytes) : NULL;
    if (!ms->logits || !ms->expert || !ms->weight || !ms->count || !ms->start || !ms->pair_row || !ms->slot_pair ||
        !ms->xg || !ms->gate || !ms->up || !ms->y || (ms->act_bytes && !ms->act)) {
        kite_moe_scratch_free(ms);
        return kite_fail(e, KITE_ERR_NOMEM, "out of memory for the MoE activations (batch %d, %d experts per token)", max_batch,
                         n_used);
    }
    return KITE_OK;
}

void kite_moe_scratch_free(kite_moe_scratch *ms) {
    if (!ms) return;
    free(ms->logits); free(ms->expert); free(ms->weight); free(ms->count); free(ms->start);
    free(ms->pair_row); free(ms->slot_pair); free(ms->xg); free(ms->gate); free(ms->up); free(ms->y);
    free(ms->act);
    memset(ms, 0, sizeof *ms);
}


/* ---- products over groups of rows: one pool job for all experts' matrices of one kind ------------ */

typedef struct product_part {
    const kite_packed_matrix *w; /* [rows, cols] */
    const void *act;             /* the part's rows within the quantized buffer, or NULL for float kernels */
    const float *x;              /* [m][cols] */
    int32_t m;
    float *y;                    /* [m][y_stride] */
    int64_t y_stride;
    int64_t first_task;
} product_part;

typedef struct product_job {
    const kite_kernel_set *ks;
    const product_part *parts;
    int32_t n_parts;
} product_job;

static void product_task(void *ctx, int64_t task, int thread) {
    (void)thread;
    const product_job *j = ctx;
    int32_t lo = 0, hi = j->n_parts - 1; /* the last part whose first_task <= task */
    while (lo < hi) {
        int32_t mid = (lo + hi + 1) / 2;
        if (j->parts[mid].first_task <= task) lo = mid;
        else hi = mid - 1;
    }
    const product_part *p = &j->parts[lo];
    int64_t r0 = (task - p->first_task) * j->ks->row_block, r1 = r0 + j->ks->row_block;
    if (r1 > p->w->rows) r1 = p->w->rows;
    j->ks->matmul(p->w, p->act, p->x, p->m, p->y, p->y_stride, r0, r1);
}

/* Quantizes rows [0, n) of x for weights of `type` into ms->act; NULL when the kernels read floats.
 * Row r's bytes start at act_bytes(type, cols, r) (each row is a whole number of aligned bytes), so
 * an expert's rows are a contiguous piece of the buffer. */
static void *quantize_rows(const kite_kernel_set *ks, kite_moe_scratch *ms, kite_pool *pool, uint32_t type, const float *x,
                           int64_t cols, int32_t n) {
    size_t need = ks->act_bytes(type, cols, n);
    if (!need) return NULL;
    if (need > ms->act_bytes) {
        kite_log(KITE_LOG_ERROR, "moe: activation scratch of %zu bytes is smaller than %zu", ms->act_bytes, need);
        return NULL;
    }
    kite_quantize_rows(ks, pool, type, x, cols, n, ms->act);
    return ms->act;
}

/* For each expert x with rows routed to it and each of the n_sets matrix sets w[s] (sharing the input):
 * y[s] rows [start, start + count) = w[s][x] times those rows of in, the grouped rows ([total][cols]).
 * One quantization of in and one pool job serve all the sets (gate and up); all experts of a set share
 * a type (the validator checks), and sets of different types go one at a time. */
static void expert_products(const kite_moe_call *c, kite_moe_scratch *ms, kite_pool *pool, const kite_packed_matrix *const *w,
                            float *const *y, int n_sets, const float *in, int64_t cols, int64_t y_stride, int32_t total,
                            product_part *parts) {
    const kite_kernel_set *ks = c->ks;
    if (n_sets == 2 && w[0][0].type != w[1][0].type) {
        expert_products(c, ms, pool, w, y, 1, in, cols, y_stride, total, parts);
        expert_products(c, ms, pool, w + 1, y + 1, 1, in, cols, y_stride, total, parts);
        return;
    }
    const void *act = quantize_rows(ks, ms, pool, w[0][0].type, in, cols, total);
    if (ks->act_bytes(w[0][0].type, cols, total) && !act) return;
    int32_t n_parts = 0;
    int64_t tasks = 0, macs = 0;
    for (int32_t x = 0; x < c->moe->n_experts; x++) {
        int32_t m = ms->count[x];
        if (m == 0) continue;
        int32_t r0 = ms->start[x];
        for (int s = 0; s < n_sets; s++) {
            const kite_packed_matrix *wx = &w[s][x];
            parts[n_parts++] = (product_part){
                .w = wx, .act = act ? (const char *)act + ks->act_bytes(wx->type, cols, r0) : NULL,
                .x = in + (int64_t)r0 * cols, .m = m, .y = y[s] + (int64_t)r0 * y_stride, .y_stride = y_stride,
                .first_task = tasks,
            };
            tasks += (wx->rows + ks->row_block - 1) / ks->row_block;
            macs += wx->rows * cols * m;
        }
    }
    product_job job = {.ks = ks, .parts = parts, .n_parts = n_parts};
    if (n_parts) kite_run_sized(pool, product_task, &job, tasks, macs);
}

/* gate = silu(gate) * up in chunks, as forward.c's SwiGLU. */
#define MOE_SILU_CHUNK 2048
typedef struct silu_job {
    const kite_kernel_set *ks;
    float *gate;
    const float *up;
    int64_t count;
} silu_job;

static void silu_task(void *ctx, int64_t t, int thread) {
    (void)thread;
    const silu_job *j = ctx;
    int64_t i0 = t * MOE_SILU_CHUNK, i1 = i0 + MOE_SILU_CHUNK < j->count ? i0 + MOE_SILU_CHUNK : j->count;
    j->ks->silu_mul(j->gate + i0, j->up + i0, i1 - i0);
}

/* The router's choice for one row: softmax in f32 over a double sum (as ggml's soft_max), the top n_used
 * probabilities largest first (ties: the lower index), optionally divided by their f32 sum. */
static void route_row(const float *logits, int32_t n_experts, int32_t n_used, bool norm, int32_t *expert, float *weight) {
    float max = logits[0];
    for (int32_t x = 1; x < n_experts; x++)
        if (logits[x] > max) max = logits[x];
    float p[KITE_MOE_MAX_EXPERTS];
    double sum = 0.0;
    for (int32_t x = 0; x < n_experts; x++) {
        p[x] = expf(logits[x] - max);
        sum += (double)p[x];
    }
    const float inv = (float)(1.0 / sum);
    for (int32_t x = 0; x < n_experts; x++) p[x] *= inv;
    int32_t n = 0;
    for (int32_t x = 0; x < n_experts; x++) {
        if (n == n_used && !(p[x] > weight[n - 1])) continue;
        int32_t at = n < n_used ? n++ : n - 1; /* the last slot is dropped when full */
        while (at > 0 && p[x] > weight[at - 1]) {
            weight[at] = weight[at - 1];
            expert[at] = expert[at - 1];
            at--;
        }
        weight[at] = p[x];
        expert[at] = x;
    }
    if (!norm) return;
    float s = 0.0f;
    for (int32_t k = 0; k < n_used; k++) s += weight[k];
    if (s < 6.103515625e-5f) s = 6.103515625e-5f; /* llama.cpp's clamp: the smallest normal f16 */
    for (int32_t k = 0; k < n_used; k++) weight[k] /= s;
}

static void hook(const kite_moe_call *c, const char *role, int32_t expert, const float *x, int32_t n, int64_t cols) {
    char name[64];
    snprintf(name, sizeof name, "blk.%d.%s.weight", (int)c->layer, role);
    c->hook(c->hook_user_data, name, expert, x, n, cols);
}

void kite_moe_ffn(const kite_moe_call *c, kite_moe_scratch *ms, kite_pool *pool, const float *x, float *out, int32_t n) {
    const kite_moe_layer *moe = c->moe;
    const int32_t E = moe->n_experts, K = c->n_used, dim = c->dim, ffn = c->expert_ffn;
    const int32_t total = n * K;
    if (total > ms->max_rows) {
        kite_log(KITE_LOG_ERROR, "moe: %d rows exceed the scratch's %d", (int)n, (int)(ms->max_rows / K));
        return;
    }
    product_part parts[2 * KITE_MOE_MAX_EXPERTS];

    /* 1. Router logits for every row, then each row's experts and weights. */
    if (c->hook) hook(c, "ffn_gate_inp", -1, x, n, dim);
    {
        const void *act = quantize_rows(c->ks, ms, pool, moe->router.type, x, dim, n);
        parts[0] = (product_part){.w = &moe->router, .act = act, .x = x, .m = n, .y = ms->logits, .y_stride = E};
        product_job job = {.ks = c->ks, .parts = parts, .n_parts = 1};
        kite_run_sized(pool, product_task, &job, (E + c->ks->row_block - 1) / c->ks->row_block, (int64_t)E * dim * n);
    }
    memset(ms->count, 0, sizeof(int32_t) * (size_t)E);
    for (int32_t b = 0; b < n; b++) {
        route_row(ms->logits + (int64_t)b * E, E, K, c->norm_weights, ms->expert + (int64_t)b * K, ms->weight + (int64_t)b * K);
        for (int32_t k = 0; k < K; k++) ms->count[ms->expert[b * K + k]]++;
    }

    /* 2. Group the (row, slot) pairs by expert, rows in increasing order within an expert. */
    ms->start[0] = 0;
    for (int32_t e = 0; e < E; e++) ms->start[e + 1] = ms->start[e] + ms->count[e];
    int32_t fill[KITE_MOE_MAX_EXPERTS];
    memcpy(fill, ms->start, sizeof(int32_t) * (size_t)E);
    for (int32_t b = 0; b < n; b++)
        for (int32_t k = 0; k < K; k++) {
            int32_t at = fill[ms->expert[b * K + k]]++;
            ms->pair_row[at] = b;
            ms->slot_pair[b * K + k] = at;
            memcpy(ms->xg + (int64_t)at * dim, x + (int64_t)b * dim, sizeof(float) * (size_t)dim);
        }

    /* 3. Each expert's gate and up over its rows, SwiGLU, down. */
    if (c->hook)
        for (int32_t e = 0; e < E; e++)
            if (ms->count[e]) {
                hook(c, "ffn_gate_exps", e, ms->xg + (int64_t)ms->start[e] * dim, ms->count[e], dim);
                hook(c, "ffn_up_exps", e, ms->xg + (int64_t)ms->start[e] * dim, ms->count[e], dim);
            }
    const kite_packed_matrix *gate_up[2] = {moe->gate, moe->up}, *down[1] = {moe->down};
    float *gate_up_out[2] = {ms->gate, ms->up}, *down_out[1] = {ms->y};
    expert_products(c, ms, pool, gate_up, gate_up_out, 2, ms->xg, dim, ffn, total, parts);
    silu_job sj = {.ks = c->ks, .gate = ms->gate, .up = ms->up, .count = (int64_t)total * ffn};
    int64_t chunks = (sj.count + MOE_SILU_CHUNK - 1) / MOE_SILU_CHUNK;
    kite_run_sized(pool, silu_task, &sj, chunks, chunks > 1 ? KITE_HANDOFF_MIN_MACS : 0);
    if (c->hook)
        for (int32_t e = 0; e < E; e++)
            if (ms->count[e]) hook(c, "ffn_down_exps", e, ms->gate + (int64_t)ms->start[e] * ffn, ms->count[e], ffn);
    expert_products(c, ms, pool, down, down_out, 1, ms->gate, ffn, dim, total, parts);

    /* 4. Each row's weighted sum over its slots, in slot order (llama.cpp: w_k * y_k rounded, then added). */
    for (int32_t b = 0; b < n; b++) {
        float *o = out + (int64_t)b * dim;
        const float w0 = ms->weight[b * K];
        const float *y0 = ms->y + (int64_t)ms->slot_pair[b * K] * dim;
        for (int32_t i = 0; i < dim; i++) o[i] = w0 * y0[i];
        for (int32_t k = 1; k < K; k++) {
            const float wk = ms->weight[b * K + k];
            const float *yk = ms->y + (int64_t)ms->slot_pair[b * K + k] * dim;
            for (int32_t i = 0; i < dim; i++) {
                float term = wk * yk[i];
                o[i] += term;
            }
        }
    }
}
