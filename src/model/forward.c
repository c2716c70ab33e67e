/* The batched forward pass for the Llama family (Llama 1/2/3, Qwen2 with QKV bias, Qwen3 with QK-norm)
 * and Gemma 3 (scaled embedding, post-norms, GeGLU, sliding-window layers, soft-capped logits), Qwen3-MoE's routed
 * experts and LFM2's short gated convolution layers (model/arch/lfm2.h).
 * One code path for prefill (n = chunk), decode (n = 1) and, later, verification of drafted tokens.
 * Plain C, multi-threaded over output rows and attention heads. Every reduction runs in a fixed
 * order that does not depend on n or on a row's slot, so results are batch-invariant. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "model/arch/lfm2.h"
#include "model/model.h"
#include "model/moe.h"
#include "model/pool_work.h"
#include "quant/types.h"

/* Up to three products that share one input x: the activations are quantized once and one pool job
 * covers every matrix's row ranges, so Q/K/V (and gate/up) cost one hand-off instead of three. */
enum { MATMUL_MAX_PARTS = 4 };
typedef struct matmul_part {
    const kite_packed_matrix *w; /* [rows, cols] */
    float *y;                    /* [n][y_stride], row r of the weight writes column r */
    int64_t y_stride;
    int64_t first_task;          /* tasks before this part's */
} matmul_part;

typedef struct matmul_job {
    const kite_kernel_set *ks;
    matmul_part parts[MATMUL_MAX_PARTS];
    int n_parts;
    const void *act;       /* x quantized by ks->quantize_act, or NULL for float kernels */
    const float *x;        /* [n][cols] */
    int32_t n;
} matmul_job;

static void matmul_task(void *ctx, int64_t task, int thread) {
    (void)thread;
    const matmul_job *job = ctx;
    int p = job->n_parts - 1;
    while (p > 0 && task < job->parts[p].first_task) p--;
    const matmul_part *part = &job->parts[p];
    int64_t r0 = (task - part->first_task) * job->ks->row_block, r1 = r0 + job->ks->row_block;
    if (r1 > part->w->rows) r1 = part->w->rows;
    job->ks->matmul(part->w, job->act, job->x, job->n, part->y, part->y_stride, r0, r1);
}

/* y_i[b][0..rows_i) = W_i x[b] for b < n and each of the n_parts matrices, which must share type and
 * cols (one quantization of x serves them all; callers with mixed types call once per matrix). The
 * activations are quantized once (by rows in parallel when there are several), then the threads take
 * row ranges of row_block rows. Each (row, b) result depends only on that row and x[b] (the kernels'
 * batch invariance), so grouping products changes no bits. */
static void matmul_parts(kite_pool *pool, kite_forward_scratch *s, const kite_kernel_set *ks, const matmul_part *parts,
                         int n_parts, const float *x, int32_t n) {
    const kite_packed_matrix *w = parts[0].w;
    size_t need = ks->act_bytes(w->type, w->cols, n);
    void *act = NULL;
    if (need) {
        /* scratch_init sized act for max_batch rows of the widest input of any type (checked here so a
         * mismatch is a visible bug, not an overflow). */
        if (need > s->act_bytes) {
            kite_log(KITE_LOG_ERROR, "matmul: activation scratch of %zu bytes is smaller than %zu", s->act_bytes, need);
            return;
        }
        act = s->act;
        kite_quantize_rows(ks, pool, w->type, x, w->cols, n, act);
    }
    matmul_job job = {.ks = ks, .n_parts = n_parts, .act = act, .x = x, .n = n};
    int64_t tasks = 0, macs = 0;
    for (int p = 0; p < n_parts; p++) {
        job.parts[p] = parts[p];
        job.parts[p].first_task = tasks;
        tasks += (parts[p].w->rows + ks->row_block - 1) / ks->row_block;
        macs += parts[p].w->rows * parts[p].w->cols * n;
    }
    kite_run_sized(pool, matmul_task, &job, tasks, macs);
}

static void matmul(kite_pool *pool, kite_forward_scratch *s, const kite_kernel_set *ks, const kite_packed_matrix *w,
                   const float *x, float *y, int64_t y_stride, int32_t n) {
    matmul_part part = {.w = w, .y = y, .y_stride = y_stride};
    matmul_parts(pool, s, ks, &part, 1, x, n);
}

/* Products sharing x: grouped when the matrices agree on type and cols (Q4_K_M files mix types). */
static void matmul_shared_input(kite_pool *pool, kite_forward_scratch *s, const kite_kernel_set *ks,
                                const matmul_part *parts, int n_parts, const float *x, int32_t n) {
    bool same = true;
    for (int p = 1; p < n_parts; p++)
        same = same && parts[p].w->type == parts[0].w->type && parts[p].w->cols == parts[0].w->cols;
    if (same) {
        matmul_parts(pool, s, ks, parts, n_parts, x, n);
        return;
    }
    for (int p = 0; p < n_parts; p++) matmul_parts(pool, s, ks, &parts[p], 1, x, n);
}

/* The activation hook, when set: a product's input rows under its weight's GGUF name (layer < 0: a
 * weight outside the blocks). */
static void observe(const kite_forward_scratch *s, int32_t layer, const char *role, const float *x, int32_t n, int64_t cols) {
    char name[64];
    if (layer >= 0) snprintf(name, sizeof name, "blk.%d.%s.weight", (int)layer, role);
    else snprintf(name, sizeof name, "%s.weight", role);
    s->act_hook(s->act_hook_user_data, name, -1, x, n, cols);
}

/* weight NULL: the plain normalisation (Gemma 4's V norm, Muse Glimmer's embedding norm). */
static void rmsnorm(float *out, const float *x, const float *weight, int64_t n, float eps) {
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float scale = (float)(1.0 / sqrt(ss / (double)n + (double)eps));
    if (!weight) {
        for (int64_t i = 0; i < n; i++) out[i] = x[i] * scale;
        return;
    }
    for (int64_t i = 0; i < n; i++) out[i] = x[i] * scale * weight[i];
}

/* The rotation of absolute position pos: cos and sin of pos * inv_freq[i] for i < half. Every head of
 * a row shares it (computing it per head cost 40 sincos calls where one table serves). */
static void rope_table(int32_t pos, const float *inv_freq, int32_t half, float *cos_out, float *sin_out) {
    for (int32_t i = 0; i < half; i++) {
        float angle = (float)pos * inv_freq[i];
        cos_out[i] = cosf(angle);
        sin_out[i] = sinf(angle);
    }
}

/* Rotates the first rope_dim elements of one head's vector by a rope_table (partial RoPE leaves the rest,
 * as ggml's rope with n_dims below the head size). */
static void rope(float *v, int32_t rope_dim, const float *c, const float *sn, kite_rope_layout layout) {
    int32_t half = rope_dim / 2;
    for (int32_t i = 0; i < half; i++) {
        int32_t a = layout == KITE_ROPE_INTERLEAVED ? 2 * i : i;
        int32_t b = layout == KITE_ROPE_INTERLEAVED ? 2 * i + 1 : i + half;
        float x0 = v[a], x1 = v[b];
        v[a] = x0 * c[i] - x1 * sn[i];
        v[b] = x0 * sn[i] + x1 * c[i];
    }
}

/* ---- element-wise steps between the products, spread over the pool ------------------------------------
 * Each task's arithmetic is the same whichever thread runs it and however many rows there are, so
 * these change no bits, only how long a prefill or a verification pass waits on one core. */

/* Runs fn over [0, count) on the pool when there is more than one task, inline otherwise (a hand-off
 * costs more than one row's work): kite_run_sized with work that always pays. */
static void run_each(kite_pool *pool, kite_pool_fn fn, void *ctx, int64_t count) {
    kite_run_sized(pool, fn, ctx, count, KITE_HANDOFF_MIN_MACS);
}

/* x[src] += xn[src] (when add), then xn[b] = rmsnorm(x[src]) * weight, where src = rows[b] (or b when
 * rows is NULL): the output norm gathers the rows whose logits are wanted to the front of xn. */
typedef struct residual_norm_job {
    float *x, *xn;         /* [n][dim] */
    const float *weight;   /* [dim] */
    int64_t dim;
    float eps;
    bool add;
    const int32_t *rows;   /* [count] source row of each output row, in increasing order; NULL = identity */
} residual_norm_job;

static void residual_norm_task(void *ctx, int64_t b, int thread) {
    (void)thread;
    const residual_norm_job *j = ctx;
    int64_t src = j->rows ? j->rows[b] : b;
    float *x = j->x + src * j->dim;
    if (j->add) {
        const float *r = j->xn + src * j->dim;
        for (int64_t i = 0; i < j->dim; i++) x[i] += r[i];
    }
    rmsnorm(j->xn + b * j->dim, x, j->weight, j->dim, j->eps);
}

/* A gather (rows != NULL) has rows[b] >= b, increasing: run in order, task b reads row rows[b] >= b
 * and writes row b, which no later task reads. It runs serially (a few rows: the last of each
 * sequence); in parallel, a task could overwrite a row another has yet to read. */
static void residual_norm(kite_pool *pool, float *x, float *xn, const float *weight, int64_t dim, float eps, bool add,
                          const int32_t *rows, int32_t count) {
    residual_norm_job j = {.x = x, .xn = xn, .weight = weight, .dim = dim, .eps = eps, .add = add, .rows = rows};
    if (rows) {
        for (int32_t b = 0; b < count; b++) residual_norm_task(&j, b, 0);
        return;
    }
    run_each(pool, residual_norm_task, &j, count);
}

/* xn[b] = rmsnorm(xn[b]) * weight in place: Gemma's norms of the attention and FFN outputs before they
 * join the residual stream. */
typedef struct post_norm_job {
    float *xn;             /* [n][dim] */
    const float *weight;   /* [dim] */
    int64_t dim;
    float eps;
} post_norm_job;

static void post_norm_task(void *ctx, int64_t b, int thread) {
    (void)thread;
    const post_norm_job *j = ctx;
    rmsnorm(j->xn + b * j->dim, j->xn + b * j->dim, j->weight, j->dim, j->eps);
}

static void post_norm(kite_pool *pool, float *xn, const float *weight, int64_t dim, float eps, int32_t n) {
    if (!weight) return;
    post_norm_job j = {.xn = xn, .weight = weight, .dim = dim, .eps = eps};
    run_each(pool, post_norm_task, &j, n);
}

/* gate = silu(gate) * up over [n * ffn) by the kernel set, in chunks of SILU_CHUNK elements (so the
 * ffn elements of a single decoded row are shared between the threads too). */
#define SILU_CHUNK 2048
typedef struct silu_job {
    const kite_kernel_set *ks;
    bool gelu;      /* GeGLU (Gemma) instead of SwiGLU */
    float *gate;
    const float *up;
    int64_t count;
} silu_job;

static void silu_task(void *ctx, int64_t t, int thread) {
    (void)thread;
    const silu_job *j = ctx;
    int64_t i0 = t * SILU_CHUNK, i1 = (t + 1) * SILU_CHUNK < j->count ? (t + 1) * SILU_CHUNK : j->count;
    if (j->gelu) j->ks->gelu_mul(j->gate + i0, j->up + i0, i1 - i0);
    else j->ks->silu_mul(j->gate + i0, j->up + i0, i1 - i0);
}

typedef struct attention_job {
    const kite_kernel_set *ks;
    const kite_hparams *hp;
    const kite_forward_seq *seqs;
    const int32_t *row_seq;  /* [n] sequence of each batch row */
    const int32_t *row0;     /* [n_seqs] first batch row of each sequence */
    int32_t layer;
    const float *q;          /* [n][n_heads*head_dim], rotated */
    float *out;              /* [n][n_heads*head_dim] */
    int32_t *slots;          /* [n_threads][n_ctx] cache rows a tree node attends to, in position order */
    int32_t n_ctx;
    int32_t n;               /* batch rows */
    int32_t window;          /* a sliding-window layer: positions seen, the row's own included; 0 = all */
    float scale;             /* score scale */
} attention_job;

/* The cache rows tree node `node` of sequence q sees, in position order: the committed prefix, then
 * its ancestors in the batch (node j lives in row pos0 + j), then itself. Plain decoding sees the same
 * keys in the same order, so a drafted node's result is bit-identical to decoding its prefix token by
 * token. */
static int32_t tree_visible_rows(const kite_forward_seq *q, int32_t node, int32_t *slots) {
    int32_t n = 0;
    for (int32_t t = 0; t < q->pos0; t++) slots[n++] = t;
    int32_t depth = 0;
    for (int32_t j = node; j >= 0; j = q->parent[j]) depth++;
    n += depth;
    int32_t at = n;
    for (int32_t j = node; j >= 0; j = q->parent[j]) slots[--at] = q->pos0 + j;
    return n;
}

/* One task = one batch row and one KV head: the query heads sharing that KV head go through the
 * kernel together (in chunks of KITE_ATTN_MAX_Q), so each K/V row is read once for all of them.
 * Tasks run head by head (task = kvh * n + row), so consecutive tasks of a thread read the same head's
 * keys and values while they are in its cache (batch row by batch row, the 8 heads of a 1.1B Llama
 * cycled 1 MiB of f16 cache per layer through a 1 MiB L2 in a 512-token prefill). Each row reads the
 * cache of its own sequence. */
static void attention_task(void *ctx, int64_t task, int thread) {
    const attention_job *job = ctx;
    const kite_hparams *hp = job->hp;
    const int32_t hd = kite_layer_head_dim(hp, job->layer), q_width = hp->n_heads * hd;
    const int32_t group = hp->n_heads / kite_layer_kv_heads(hp, job->layer);
    const int32_t row = (int32_t)(task % job->n), kvh = (int32_t)(task / job->n);
    const int32_t si = job->row_seq[row];
    const kite_forward_seq *q = &job->seqs[si];
    const int32_t b = row - job->row0[si];
    const size_t head_base = kite_kv_offset(q->kv, job->layer, kvh, 0);
    const size_t row_bytes = q->kv->layer_row_bytes[job->layer];
    kite_attn_query a = {
        .head_dim = hd, .k = (const char *)q->kv->k + head_base, .v = (const char *)q->kv->v + head_base,
        .kv_type = q->kv->type, .row_bytes = row_bytes, .scale = job->scale,
    };
    /* Either way the visible rows are listed in position order, entry i at position i, so a window keeps
     * the last `window` entries: a drafted node and plain decoding see the same rows in the same order. */
    if (kite_kv_is_ring(q->kv, job->layer)) {
        /* A ring: the window's positions, each at its row. */
        int32_t *slots = job->slots + (int64_t)thread * job->n_ctx;
        int32_t n_vis = q->parent ? tree_visible_rows(q, q->first + b, slots) : q->pos0 + q->first + b + 1;
        int32_t skip = job->window > 0 && n_vis > job->window ? n_vis - job->window : 0;
        const int32_t ring = q->kv->layer_rows[job->layer];
        for (int32_t i = skip; i < n_vis; i++) slots[i - skip] = (q->parent ? slots[i] : i) % ring;
        a.rows = slots;
        a.n_visible = n_vis - skip;
    } else if (q->parent) {
        int32_t *slots = job->slots + (int64_t)thread * job->n_ctx;
        a.n_visible = tree_visible_rows(q, q->first + b, slots);
        int32_t skip = job->window > 0 && a.n_visible > job->window ? a.n_visible - job->window : 0;
        a.rows = slots + skip;
        a.n_visible -= skip;
    } else {
        a.n_visible = q->pos0 + q->first + b + 1; /* a chain: rows 0 .. its own, contiguous */
        int32_t skip = job->window > 0 && a.n_visible > job->window ? a.n_visible - job->window : 0;
        size_t skip_bytes = (size_t)skip * row_bytes;
        a.k = (const char *)a.k + skip_bytes;
        a.v = (const char *)a.v + skip_bytes;
        a.n_visible -= skip;
    }
    for (int32_t h0 = 0; h0 < group; h0 += KITE_ATTN_MAX_Q) {
        int64_t at = (int64_t)row * q_width + (int64_t)(kvh * group + h0) * hd;
        a.q = job->q + at;
        a.out = job->out + at;
        a.n_q = group - h0 < KITE_ATTN_MAX_Q ? group - h0 : KITE_ATTN_MAX_Q;
        job->ks->attend(&a);
    }
}

/* Per batch row after the Q/K/V products: biases, QK-norm, rotation, and the row's K and V stored into
 * its sequence's cache at its position. */
typedef struct qkv_row_job {
    const kite_hparams *hp;
    const kite_layer_weights *L;
    const float *rope_inv_freq;
    const int32_t *pos;      /* [n] absolute positions */
    float *q, *k, *v;        /* [n][q_width], [n][kv_dim], [n][kv_dim] */
    const kite_forward_seq *seqs;
    const int32_t *row_seq;  /* [n] sequence of each batch row */
    const int32_t *row0;     /* [n_seqs] first batch row of each sequence */
    const kite_kernel_set *ks; /* f32_to_f16 for an f16 cache */
    int32_t layer;
    const float *q_gate;     /* Qwen3.5: [n][n_heads][q | gate] from the doubled q projection, or NULL */
    float *attn_gate;        /* [n][q_width] the gates, split off */
} qkv_row_job;

static void qkv_row_task(void *ctx, int64_t b, int thread) {
    (void)thread;
    const qkv_row_job *j = ctx;
    const kite_hparams *hp = j->hp;
    const kite_layer_weights *L = j->L;
    const int32_t hd = kite_layer_head_dim(hp, j->layer), n_kv = kite_layer_kv_heads(hp, j->layer);
    const int32_t q_width = hp->n_heads * hd, kv_dim = n_kv * hd, rope_dim = kite_layer_rope_dim(hp, j->layer);
    float *q = j->q + b * q_width, *k = j->k + b * kv_dim, *v = j->v + b * kv_dim;
    if (j->q_gate)
        for (int32_t h = 0; h < hp->n_heads; h++) {
            const float *qg = j->q_gate + (b * hp->n_heads + h) * 2 * (int64_t)hd;
            memcpy(q + h * hd, qg, sizeof(float) * (size_t)hd);
            memcpy(j->attn_gate + b * q_width + h * hd, qg + hd, sizeof(float) * (size_t)hd);
        }
    if (L->v_from_k) memcpy(v, k, sizeof(float) * (size_t)kv_dim); /* Gemma 4 k_eq_v: V is the raw K projection */
    if (L->q_bias) for (int32_t i = 0; i < q_width; i++) q[i] += L->q_bias[i];
    if (L->k_bias) for (int32_t i = 0; i < kv_dim; i++) k[i] += L->k_bias[i];
    if (L->v_bias) for (int32_t i = 0; i < kv_dim; i++) v[i] += L->v_bias[i];
    float rc[KITE_ATTN_MAX_HEAD_DIM / 2], rs[KITE_ATTN_MAX_HEAD_DIM / 2]; /* validate.c caps head_dim */
    if (rope_dim > 0) rope_table(j->pos[b], j->rope_inv_freq, rope_dim / 2, rc, rs);
    for (int32_t h = 0; h < hp->n_heads; h++) {
        if (L->q_norm) rmsnorm(q + h * hd, q + h * hd, L->q_norm, hd, hp->rms_eps);
        if (rope_dim > 0) rope(q + h * hd, rope_dim, rc, rs, hp->rope_layout);
    }
    for (int32_t h = 0; h < n_kv; h++) {
        if (L->k_norm) rmsnorm(k + h * hd, k + h * hd, L->k_norm, hd, hp->rms_eps);
        if (rope_dim > 0) rope(k + h * hd, rope_dim, rc, rs, hp->rope_layout);
        if (hp->v_norm) rmsnorm(v + h * hd, v + h * hd, NULL, hd, hp->rms_eps);
    }
    const int32_t si = j->row_seq[b];
    const kite_forward_seq *sq = &j->seqs[si];
    const kite_kv_cache *kv = sq->kv;
    const int32_t cache_row = kite_kv_row(kv, j->layer, sq->pos0 + sq->first + ((int32_t)b - j->row0[si]));
    for (int32_t h = 0; h < n_kv; h++) {
        size_t at = kite_kv_offset(kv, j->layer, h, cache_row);
        if (kv->type == KITE_TYPE_F32) {
            memcpy((char *)kv->k + at, k + h * hd, sizeof(float) * (size_t)hd);
            memcpy((char *)kv->v + at, v + h * hd, sizeof(float) * (size_t)hd);
        } else if (kv->type == KITE_TYPE_F16) {
            j->ks->f32_to_f16(k + h * hd, (uint16_t *)((char *)kv->k + at), hd);
            j->ks->f32_to_f16(v + h * hd, (uint16_t *)((char *)kv->v + at), hd);
        } else {
            /* Q8_0 / Q4_0: the reference rounding, a row at a time (its blocks depend on the row alone) */
            const kite_type_traits *t = kite_type_get(kv->type);
            t->from_float(k + h * hd, (char *)kv->k + at, hd);
            t->from_float(v + h * hd, (char *)kv->v + at, hd);
        }
    }
}

/* LFM2's conv layer, per batch row (model/arch/lfm2.h), in two steps over the pool: every row first stores its
 * u = B * x in its sequence's conv ring at its node's row (pos0 + node, as K/V rows), then every row sums its
 * taps, which may read rows the same pass stored (a chain's previous tokens, a tree node's ancestors). */
typedef struct conv_row_job {
    const kite_layer_weights *L;
    const kite_forward_seq *seqs;
    const int32_t *row_seq;  /* [n] sequence of each batch row */
    const int32_t *row0;     /* [n_seqs] first batch row of each sequence */
    float *bcx;              /* [n][3 dim]: B, C, x */
    float *y;                /* [n][dim] */
    int32_t dim, taps, layer;
} conv_row_job;

static void conv_store_task(void *ctx, int64_t b, int thread) {
    (void)thread;
    const conv_row_job *j = ctx;
    const int32_t si = j->row_seq[b];
    const kite_forward_seq *q = &j->seqs[si];
    const float *bx = j->bcx + b * 3 * j->dim, *x = bx + 2 * j->dim;
    float *u = kite_kv_conv_row(q->kv, j->layer, q->pos0 + q->first + ((int32_t)b - j->row0[si]));
    for (int32_t c = 0; c < j->dim; c++) u[c] = bx[c] * x[c];
}

/* The conv rows of node `node`'s taps, the oldest first (NULL before position 0): the node itself, then its
 * ancestors in the pass (a tree) or the rows before it (a chain), then the committed positions. */
static void conv_tap_rows(const kite_forward_seq *q, int32_t layer, int32_t node, int32_t taps, const float **rows) {
    int32_t k = taps - 1, row = q->pos0 + node; /* the cache row of the current tap */
    while (k >= 0) {
        rows[k--] = row >= 0 ? kite_kv_conv_row(q->kv, layer, row) : NULL;
        if (row >= q->pos0 && q->parent) row = q->pos0 + q->parent[row - q->pos0]; /* a tree node: its parent's row */
        else row--;                                                             /* a chain, or the committed context */
    }
}

static void conv_apply_task(void *ctx, int64_t b, int thread) {
    (void)thread;
    const conv_row_job *j = ctx;
    const int32_t si = j->row_seq[b], taps = j->taps, dim = j->dim;
    const kite_forward_seq *q = &j->seqs[si];
    const float *rows[KITE_LFM2_MAX_TAPS];
    conv_tap_rows(q, j->layer, q->first + ((int32_t)b - j->row0[si]), taps, rows);
    const float *C = j->bcx + b * 3 * dim + dim, *w = j->L->conv_kernel;
    float *y = j->y + b * dim;
    for (int32_t c = 0; c < dim; c++) {
        float sum = 0.0f; /* llama.cpp's ggml_ssm_conv order: the oldest tap first */
        for (int32_t k = 0; k < taps; k++)
            if (rows[k]) sum += rows[k][c] * w[(int64_t)c * taps + k];
        y[c] = C[c] * sum;
    }
}

/* Capture k of every batch row: x (+ add, when not NULL), [n][dim] each. */
static void capture_rows(kite_forward_scratch *s, int32_t k, const float *x, const float *add, int32_t n, int32_t dim) {
    for (int32_t r = 0; r < n; r++) {
        float *dst = s->captured + ((int64_t)r * s->n_capture + k) * dim;
        const float *a = x + (int64_t)r * dim;
        if (!add) {
            memcpy(dst, a, sizeof(float) * (size_t)dim);
            continue;
        }
        const float *b = add + (int64_t)r * dim;
        for (int32_t i = 0; i < dim; i++) dst[i] = a[i] + b[i];
    }
}

/* A Gated DeltaNet layer (Qwen3.5) over the batch, xn (normed) in, xn (after out_proj) out: the four
 * products of the normed input at once, the mixer per sequence (each over its own state), out_proj. */
static void deltanet_layer(const kite_weights *w, const kite_layer_weights *L, int32_t l, kite_forward_scratch *s,
                           kite_pool *pool, const kite_forward_seq *seqs, int32_t n_seqs, int32_t n) {
    const kite_hparams *hp = &w->hp;
    const int32_t nv = hp->dn_n_v_heads, vd = nv * hp->dn_head_v_dim;
    const int32_t conv_dim = 2 * hp->dn_n_k_heads * hp->dn_head_k_dim + vd;
    const matmul_part parts[4] = {{.w = &L->w_qkv, .y = s->dn_conv, .y_stride = conv_dim},
                                  {.w = &L->w_z, .y = s->dn_z, .y_stride = vd},
                                  {.w = &L->w_beta, .y = s->dn_b, .y_stride = nv},
                                  {.w = &L->w_alpha, .y = s->dn_alpha, .y_stride = nv}};
    if (s->act_hook) {
        observe(s, l, "attn_qkv", s->xn, n, hp->dim);
        observe(s, l, "attn_gate", s->xn, n, hp->dim);
        observe(s, l, "ssm_beta", s->xn, n, hp->dim);
        observe(s, l, "ssm_alpha", s->xn, n, hp->dim);
    }
    matmul_shared_input(pool, s, w->kernels, parts, 4, s->xn, n);
    for (int32_t si = 0, r = 0; si < n_seqs; r += seqs[si].n, si++)
        kite_dn_mix(w->kernels, &L->dn, seqs[si].kv->dn, l, &s->dn_plans[si], s->dn, pool, s->dn_conv + (int64_t)r * conv_dim,
                    s->dn_z + (int64_t)r * vd, s->dn_alpha + (int64_t)r * nv, s->dn_b + (int64_t)r * nv, s->dn_out + (int64_t)r * vd);
    if (s->act_hook) observe(s, l, "ssm_out", s->dn_out, n, vd);
    matmul(pool, s, w->kernels, &L->w_ssm_out, s->dn_out, s->xn, hp->dim, n);
}

int32_t kite_forward_multi(const kite_weights *w, kite_forward_scratch *s, kite_pool *pool, const kite_forward_seq *seqs,
                           int32_t n_seqs, float *logits) {
    const kite_hparams *hp = &w->hp;
    int32_t dim = hp->dim, hd_max = kite_max_head_dim(hp);
    int32_t ffn = hp->ffn_dim;

    /* Batch rows: the sequences' tokens one after the other. Absolute positions: a chain runs pos0,
     * pos0+1, ...; a tree node sits at pos0 + its depth. */
    int32_t *pos = s->positions, *row_seq = s->row_seq, *row0 = s->seq_row0, *out_rows = s->out_rows;
    int32_t n = 0, n_out = 0;
    int64_t attn_macs = 0;
    for (int32_t si = 0; si < n_seqs; si++) {
        const kite_forward_seq *q = &seqs[si];
        row0[si] = n;
        for (int32_t b = 0; b < q->n; b++, n++) {
            int32_t depth = 0;
            if (q->parent)
                for (int32_t j = q->parent[q->first + b]; j >= 0; j = q->parent[j]) depth++;
            pos[n] = q->pos0 + (q->parent ? depth : q->first + b);
            row_seq[n] = si;
            if (q->want_logits == KITE_LOGITS_ALL || (q->want_logits == KITE_LOGITS_LAST && b == q->n - 1)) out_rows[n_out++] = n;
        }
        if ((q->kv->ring_rows > 0 || q->kv->conv_rows > 0) && q->pos0 + q->first + q->n > q->kv->ring_high)
            q->kv->ring_high = q->pos0 + q->first + q->n;
        if (q->kv->dn) kite_dn_plan_pass(q->kv->dn, q->parent, q->first, q->n, q->pos0, &s->dn_plans[si]);
        /* QK and AV over up to pos0 + first + n positions (a tree sees fewer). */
        attn_macs += 2 * (int64_t)q->n * hp->n_heads * hd_max * (q->pos0 + q->first + q->n);
    }
    if (n == 0) return 0;

    /* Embedding rows. */
    const kite_type_traits *et = kite_type_get(w->tok_embd->type);
    size_t erow = kite_type_row_bytes(w->tok_embd->type, dim);
    for (int32_t si = 0, r = 0; si < n_seqs; si++)
        for (int32_t b = 0; b < seqs[si].n; b++, r++)
            et->to_float((const unsigned char *)w->tok_embd->data + (size_t)seqs[si].tokens[b] * erow, s->x + (int64_t)r * dim,
                         dim);
    if (hp->embd_scale != 0.0f)
        for (int64_t i = 0; i < (int64_t)n * dim; i++) s->x[i] *= hp->embd_scale;
    if (hp->embd_norm) /* Muse Glimmer: the embedding row normalised, without weight */
        for (int32_t r = 0; r < n; r++) rmsnorm(s->x + (int64_t)r * dim, s->x + (int64_t)r * dim, NULL, dim, hp->rms_eps);
    const float post_eps = hp->post_norm_eps > 0.0f ? hp->post_norm_eps : hp->rms_eps;

    int32_t next_capture = 0; /* index into s->capture_layer of the next layer to capture */
    bool pending = false;     /* xn holds the previous layer's FFN output, still to join the residual stream x */
    for (int32_t l = 0; l < hp->n_layers; l++) {
        const kite_layer_weights *L = &w->layers[l];
        const int32_t hd = kite_layer_head_dim(hp, l), q_width = hp->n_heads * hd, kv_dim = kite_layer_kv_heads(hp, l) * hd;
        /* The previous layer's down projection (in xn) joins the residual stream here. */
        residual_norm(pool, s->x, s->xn, L->attn_norm, dim, hp->rms_eps, pending, NULL, n);
        if (next_capture < s->n_capture && s->capture_layer[next_capture] == l) capture_rows(s, next_capture++, s->x, NULL, n, dim);
        if (kite_layer_is_recurrent(hp, l)) {
            deltanet_layer(w, L, l, s, pool, seqs, n_seqs, n);
        } else if (kite_layer_is_conv(hp, l)) {
            /* LFM2's short convolution: in_proj, the taps over the conv rings, out_proj into xn */
            if (s->act_hook) observe(s, l, "shortconv.in_proj", s->xn, n, dim);
            matmul(pool, s, w->kernels, &L->conv_in, s->xn, s->conv_bcx, 3 * (int64_t)dim, n);
            conv_row_job cj = {.L = L, .seqs = seqs, .row_seq = row_seq, .row0 = row0, .bcx = s->conv_bcx, .y = s->conv_y,
                               .dim = dim, .taps = hp->conv_taps, .layer = l};
            run_each(pool, conv_store_task, &cj, n);
            run_each(pool, conv_apply_task, &cj, n);
            if (s->act_hook) observe(s, l, "shortconv.out_proj", s->conv_y, n, dim);
            matmul(pool, s, w->kernels, &L->conv_out, s->conv_y, s->xn, dim, n);
        } else {
        const bool gated = hp->attn_output_gate;
        const matmul_part qkv[3] = {{.w = &L->wq, .y = gated ? s->q_gate : s->q, .y_stride = gated ? 2 * q_width : q_width},
                                    {.w = &L->wk, .y = s->k, .y_stride = kv_dim},
                                    {.w = &L->wv, .y = s->v, .y_stride = kv_dim}};
        const int n_qkv = L->v_from_k ? 2 : 3;
        if (s->act_hook) {
            observe(s, l, "attn_q", s->xn, n, dim);
            observe(s, l, "attn_k", s->xn, n, dim);
            if (!L->v_from_k) observe(s, l, "attn_v", s->xn, n, dim);
        }
        matmul_shared_input(pool, s, w->kernels, qkv, n_qkv, s->xn, n);
        if (L->w_attn_gate.rows > 0) { /* Muse Glimmer's output gate, from the same normed input */
            if (s->act_hook) observe(s, l, "attn_gate", s->xn, n, dim);
            matmul(pool, s, w->kernels, &L->w_attn_gate, s->xn, s->gate, q_width, n);
        }
        const bool local = kite_layer_is_local(hp, l);
        qkv_row_job qj = {.hp = hp, .L = L, .rope_inv_freq = local ? w->rope_inv_freq_local : w->rope_inv_freq, .pos = pos, .q = s->q, .k = s->k,
                          .v = s->v, .seqs = seqs, .row_seq = row_seq, .row0 = row0, .ks = w->kernels, .layer = l,
                          .q_gate = gated ? s->q_gate : NULL, .attn_gate = s->attn_gate};
        run_each(pool, qkv_row_task, &qj, n);
        attention_job aj = {
            .ks = w->kernels, .hp = hp, .seqs = seqs, .row_seq = row_seq, .row0 = row0, .layer = l,
            .q = s->q, .out = s->att_out, .slots = s->slots, .n_ctx = s->n_ctx, .n = n,
            .window = local ? hp->sliding_window : 0,
            .scale = hp->attn_scale > 0.0f ? hp->attn_scale : 1.0f / sqrtf((float)hd),
        };
        kite_run_sized(pool, attention_task, &aj, (int64_t)n * kite_layer_kv_heads(hp, l), attn_macs);
        if (gated) /* Qwen3.5: the gate from the doubled q projection */
            for (int64_t i = 0; i < (int64_t)n * q_width; i++) s->att_out[i] *= 1.0f / (1.0f + expf(-s->attn_gate[i]));
        if (L->w_attn_gate.rows > 0) /* out *= sigmoid(gate), as llama.cpp's ggml_sigmoid then ggml_mul */
            for (int64_t i = 0; i < (int64_t)n * q_width; i++) s->att_out[i] *= 1.0f / (1.0f + expf(-s->gate[i]));
        /* Output projection into xn, then the residual add and the FFN norm. */
        if (s->act_hook) observe(s, l, "attn_output", s->att_out, n, q_width);
        matmul(pool, s, w->kernels, &L->wo, s->att_out, s->xn, dim, n);
        }
        post_norm(pool, s->xn, L->post_attn_norm, dim, post_eps, n);
        residual_norm(pool, s->x, s->xn, L->ffn_norm, dim, hp->rms_eps, true, NULL, n);
        if (L->moe) { /* routed experts (Qwen3-MoE), xn in and out */
            const kite_moe_call mc = {.ks = w->kernels, .moe = L->moe, .layer = l, .dim = dim, .n_used = hp->n_experts_used,
                                      .expert_ffn = hp->expert_ffn_dim, .norm_weights = hp->expert_weights_norm,
                                      .hook = s->act_hook, .hook_user_data = s->act_hook_user_data};
            kite_moe_ffn(&mc, s->moe, pool, s->xn, s->xn, n);
        } else {
        const matmul_part gate_up[2] = {{.w = &L->w_gate, .y = s->gate, .y_stride = ffn},
                                        {.w = &L->w_up, .y = s->up, .y_stride = ffn}};
        if (s->act_hook) {
            observe(s, l, "ffn_gate", s->xn, n, dim);
            observe(s, l, "ffn_up", s->xn, n, dim);
        }
        matmul_shared_input(pool, s, w->kernels, gate_up, 2, s->xn, n);
        silu_job sj = {.ks = w->kernels, .gelu = hp->ffn_act == KITE_FFN_GELU_TANH, .gate = s->gate, .up = s->up, .count = (int64_t)n * ffn};
        run_each(pool, silu_task, &sj, (sj.count + SILU_CHUNK - 1) / SILU_CHUNK);
        if (s->act_hook) observe(s, l, "ffn_down", s->gate, n, ffn);
        matmul(pool, s, w->kernels, &L->w_down, s->gate, s->xn, dim, n);
        }
        post_norm(pool, s->xn, L->post_ffn_norm, dim, post_eps, n);
        pending = true;
        if (L->out_scale != 0.0f) { /* Gemma 4's layer_scalar: (x + ffn out) * scalar, as llama.cpp's ggml_mul */
            for (int64_t i = 0; i < (int64_t)n * dim; i++) s->x[i] = (s->x[i] + s->xn[i]) * L->out_scale;
            pending = false;
        }
    }

    for (int32_t si = 0; si < n_seqs; si++)
        if (seqs[si].kv->dn) kite_dn_finish_pass(seqs[si].kv->dn, &s->dn_plans[si]);

    /* The last layer's output: x + xn, summed as residual_norm sums it (the same float additions). */
    if (next_capture < s->n_capture && s->capture_layer[next_capture] == hp->n_layers)
        capture_rows(s, next_capture, s->x, pending ? s->xn : NULL, n, dim);

    /* The last down projection joins the residual stream of the rows whose logits are wanted (the
     * stream itself is not needed after this pass: the cache holds every row's K and V), gathered to
     * the front of xn; then one product over them all. */
    if (n_out == 0) return 0;
    bool identity = out_rows[n_out - 1] == n_out - 1; /* increasing and distinct: rows 0 .. n_out-1 */
    residual_norm(pool, s->x, s->xn, w->output_norm, dim, hp->rms_eps, pending, identity ? NULL : out_rows, n_out);
    if (s->act_hook) observe(s, -1, hp->tied_embeddings ? "token_embd" : "output", s->xn, n_out, dim);
    matmul(pool, s, w->kernels, &w->output, s->xn, logits, hp->n_vocab, n_out);
    if (hp->logit_scale != 0.0f) /* Muse Glimmer's output multiplier, before the soft-cap as in llama.cpp */
        for (int64_t i = 0; i < (int64_t)n_out * hp->n_vocab; i++) logits[i] *= hp->logit_scale;
    if (hp->final_logit_softcap > 0.0f) {
        /* As llama.cpp: scale by 1/c, tanh, scale by c (Gemma 2; Gemma 3 configs have none). */
        const float c = hp->final_logit_softcap, inv_c = 1.0f / c;
        for (int64_t i = 0; i < (int64_t)n_out * hp->n_vocab; i++) logits[i] = c * tanhf(logits[i] * inv_c);
    }
    return n_out;
}

void kite_forward(const kite_weights *w, kite_kv_cache *kv, kite_forward_scratch *s, kite_pool *pool,
                  const int32_t *tokens, const int32_t *parent, int32_t first, int32_t n, int32_t pos0, float *logits,
                  bool all_logits) {
    kite_forward_seq seq = {
        .kv = kv, .tokens = tokens, .parent = parent, .first = first, .n = n, .pos0 = pos0,
        .want_logits = !logits ? KITE_LOGITS_NONE : all_logits ? KITE_LOGITS_ALL : KITE_LOGITS_LAST,
    };
    kite_forward_multi(w, s, pool, &seq, 1, logits);
}

int kite_forward_scratch_init(kite_forward_scratch *s, const kite_hparams *hp, int32_t max_batch, int32_t n_threads,
                              int32_t n_ctx, kite_error *e) {
    memset(s, 0, sizeof *s);
    s->max_batch = max_batch;
    s->n_threads = n_threads;
    s->n_ctx = n_ctx;
    int64_t dim = hp->dim, q_width = (int64_t)hp->n_heads * kite_max_head_dim(hp), kv_dim = kite_max_kv_width(hp);
    /* gate also holds Muse Glimmer's attention gate, one q row per batch row */
    int64_t gate_width = hp->ffn_dim > q_width ? hp->ffn_dim : q_width;
    int64_t widest = dim;
    if (hp->ffn_dim > widest) widest = hp->ffn_dim;
    if (q_width > widest) widest = q_width;
    if (hp->full_attn_interval > 0) { /* out_proj's input */
        int64_t vd = (int64_t)hp->dn_n_v_heads * hp->dn_head_v_dim;
        if (vd > widest) widest = vd;
    }
    /* Quantized activations: the largest of the 32-block and 256-block formats over the widest input. */
    const kite_kernel_set *ks = kite_kernels();
    int64_t widest_k = (widest + 255) / 256 * 256;
    s->act_bytes = ks->act_bytes(KITE_TYPE_Q8_0, widest_k, max_batch);
    size_t act_k = ks->act_bytes(KITE_TYPE_Q4_K, widest_k, max_batch);
    if (act_k > s->act_bytes) s->act_bytes = act_k;
    s->act_bytes = (s->act_bytes + 63) / 64 * 64;
    s->x = calloc((size_t)(max_batch * dim), sizeof(float));
    s->xn = calloc((size_t)(max_batch * dim), sizeof(float));
    s->q = calloc((size_t)(max_batch * q_width), sizeof(float));
    s->k = calloc((size_t)(max_batch * kv_dim), sizeof(float));
    s->v = calloc((size_t)(max_batch * kv_dim), sizeof(float));
    s->att_out = calloc((size_t)(max_batch * q_width), sizeof(float));
    s->gate = calloc((size_t)max_batch * (size_t)gate_width, sizeof(float));
    s->up = calloc((size_t)max_batch * (size_t)hp->ffn_dim, sizeof(float));
    s->slots = calloc((size_t)n_threads * (size_t)n_ctx, sizeof(int32_t));
    s->positions = calloc((size_t)max_batch, sizeof(int32_t));
    s->row_seq = calloc((size_t)max_batch, sizeof(int32_t));
    s->seq_row0 = calloc((size_t)max_batch, sizeof(int32_t));
    s->out_rows = calloc((size_t)max_batch, sizeof(int32_t));
    s->act = s->act_bytes ? aligned_alloc(64, s->act_bytes) : NULL;
    if (hp->conv_taps > 0) {
        s->conv_bcx = calloc((size_t)max_batch * 3 * (size_t)dim, sizeof(float));
        s->conv_y = calloc((size_t)max_batch * (size_t)dim, sizeof(float));
        if (!s->conv_bcx || !s->conv_y) {
            kite_forward_scratch_free(s);
            return kite_fail(e, KITE_ERR_NOMEM, "out of memory for activations (batch %d, context %d)", max_batch, n_ctx);
        }
    }
    if (!s->x || !s->xn || !s->q || !s->k || !s->v || !s->att_out || !s->gate || !s->up || !s->slots ||
        !s->positions || !s->row_seq || !s->seq_row0 || !s->out_rows || (s->act_bytes && !s->act)) {
        kite_forward_scratch_free(s);
        return kite_fail(e, KITE_ERR_NOMEM, "out of memory for activations (batch %d, context %d)", max_batch, n_ctx);
    }
    if (hp->full_attn_interval > 0) {
        kite_dn_dims d;
        kite_dn_dims_from(hp, &d);
        const size_t rows = (size_t)max_batch, vd = (size_t)d.n_v * (size_t)d.head_v;
        s->q_gate = calloc(rows * 2 * (size_t)q_width, sizeof(float));
        s->attn_gate = calloc(rows * (size_t)q_width, sizeof(float));
        s->dn_conv = calloc(rows * (size_t)d.conv_dim, sizeof(float));
        s->dn_z = calloc(rows * vd, sizeof(float));
        s->dn_out = calloc(rows * vd, sizeof(float));
        s->dn_alpha = calloc(rows * (size_t)d.n_v, sizeof(float));
        s->dn_b = calloc(rows * (size_t)d.n_v, sizeof(float));
        s->dn_plans = calloc(rows, sizeof *s->dn_plans);
        s->dn = calloc(1, sizeof *s->dn);
        int st = !s->q_gate || !s->attn_gate || !s->dn_conv || !s->dn_z || !s->dn_out || !s->dn_alpha || !s->dn_b || !s->dn_plans || !s->dn
                     ? kite_fail(e, KITE_ERR_NOMEM, "out of memory for activations")
                     : kite_dn_scratch_init(s->dn, &d, max_batch > KITE_KV_MAX_PASS ? max_batch : KITE_KV_MAX_PASS, n_threads, e);
        if (st) {
            kite_forward_scratch_free(s);
            return st;
        }
    }
    if (hp->n_experts > 0) {
        int st = (s->moe = calloc(1, sizeof *s->moe)) ? kite_moe_scratch_init(s->moe, max_batch, hp->dim, hp->n_experts,
                                                                             hp->n_experts_used, hp->expert_ffn_dim, e)
                                                      : kite_fail(e, KITE_ERR_NOMEM, "out of memory");
        if (st) {
            kite_forward_scratch_free(s);
            return st;
        }
    }
    return KITE_OK;
}

int kite_forward_scratch_set_capture(kite_forward_scratch *s, const kite_hparams *hp, const int32_t *layers, int32_t n,
                                     kite_error *e) {
    if (n < 0 || n > KITE_MAX_CAPTURE)
        return kite_fail(e, KITE_ERR_INVALID_ARG, "%d layers to capture: at most %d", (int)n, KITE_MAX_CAPTURE);
    for (int32_t k = 0; k < n; k++)
        if (layers[k] < 0 || layers[k] > hp->n_layers || (k > 0 && layers[k] <= layers[k - 1]))
            return kite_fail(e, KITE_ERR_INVALID_ARG,
                             "layer %d to capture: layers must increase and lie in 0..%d (the model's layer count)",
                             (int)layers[k], (int)hp->n_layers);
    free(s->captured);
    s->captured = NULL;
    s->n_capture = 0;
    if (n == 0) return KITE_OK;
    s->captured = calloc((size_t)s->max_batch * (size_t)n * (size_t)hp->dim, sizeof(float));
    if (!s->captured) return kite_fail(e, KITE_ERR_NOMEM, "out of memory for captured hidden states");
    memcpy(s->capture_layer, layers, sizeof *layers * (size_t)n);
    s->n_capture = n;
    return KITE_OK;
}

void kite_forward_scratch_free(kite_forward_scratch *s) {
    free(s->captured);
    free(s->x); free(s->xn); free(s->q); free(s->k); free(s->v); free(s->att_out);
    free(s->gate); free(s->up); free(s->slots); free(s->positions); free(s->act);
    free(s->row_seq); free(s->seq_row0); free(s->out_rows);
    free(s->conv_bcx); free(s->conv_y);
    kite_moe_scratch_free(s->moe);
    free(s->moe);
    free(s->q_gate); free(s->attn_gate); free(s->dn_conv); free(s->dn_z); free(s->dn_out); free(s->dn_alpha); free(s->dn_b);
    free(s->dn_plans);
    if (s->dn) kite_dn_scratch_free(s->dn);
    free(s->dn);
    memset(s, 0, sizeof *s);
}

static const uint32_t kv_element_type[] = {[KITE_KV_F16] = KITE_TYPE_F16, [KITE_KV_F32] = KITE_TYPE_F32,
                                           [KITE_KV_Q8_0] = KITE_TYPE_Q8_0, [KITE_KV_Q4_0] = KITE_TYPE_Q4_0};

size_t kite_kv_row_bytes(kite_kv_type type, int32_t head_dim) {
    if ((unsigned)type >= sizeof kv_element_type / sizeof *kv_element_type || head_dim <= 0) return 0;
    return kite_type_row_bytes(kv_element_type[type], head_dim);
}

int kite_kv_cache_init(kite_kv_cache *kv, const kite_hparams *hp, int32_t n_ctx, kite_kv_type type, kite_error *e) {
    memset(kv, 0, sizeof *kv);
    if ((unsigned)type >= sizeof kv_element_type / sizeof *kv_element_type)
        return kite_fail(e, KITE_ERR_INVALID_ARG, "KV cache type %d is not one of f16, f32, q8_0, q4_0", (int)type);
    size_t row_bytes = kite_kv_row_bytes(type, hp->head_dim);
    for (int32_t l = 0; l < hp->n_layers && row_bytes; l++)
        if (!kite_kv_row_bytes(type, kite_layer_head_dim(hp, l))) row_bytes = 0;
    if (row_bytes == 0)
        return kite_fail(e, KITE_ERR_INVALID_ARG,
                         "KV cache type %s needs a head size that is a multiple of 32; this model's heads have %d elements "
                         "(use f16 or f32)", kite_kv_type_name(type), hp->head_dim_local > 0 ? hp->head_dim_local : hp->head_dim);
    kv->n_ctx = n_ctx;
    kv->n_kv_heads = hp->n_kv_heads;
    kv->head_dim = hp->head_dim;
    kv->type = kv_element_type[type];
    kv->kv_type = type;
    kv->row_bytes = row_bytes;
    kv->n_layers = hp->n_layers;
    kv->window = hp->sliding_window;
    int64_t ring = hp->sliding_window > 0 ? (int64_t)hp->sliding_window - 1 + KITE_KV_MAX_PASS : 0;
    kv->ring_rows = ring > 0 && ring < n_ctx ? (int32_t)ring : 0;
    kv->layer_rows = calloc((size_t)hp->n_layers, sizeof *kv->layer_rows);
    kv->layer_base = calloc((size_t)hp->n_layers, sizeof *kv->layer_base);
    kv->layer_kv_heads = calloc((size_t)hp->n_layers, sizeof *kv->layer_kv_heads);
    kv->layer_row_bytes = calloc((size_t)hp->n_layers, sizeof *kv->layer_row_bytes);
    if (!kv->layer_rows || !kv->layer_base || !kv->layer_kv_heads || !kv->layer_row_bytes) {
        kite_kv_cache_free(kv);
        return kite_fail(e, KITE_ERR_NOMEM, "out of memory");
    }
    size_t bytes = 0; /* of k (or of v) over all layers and heads */
    int32_t n_conv = 0;
    kv->conv_index = calloc((size_t)hp->n_layers, sizeof *kv->conv_index);
    if (!kv->conv_index) {
        kite_kv_cache_free(kv);
        return kite_fail(e, KITE_ERR_NOMEM, "out of memory");
    }
    for (int32_t l = 0; l < hp->n_layers; l++) {
        kv->conv_index[l] = kite_layer_is_conv(hp, l) ? n_conv++ : -1;
        if (kite_layer_is_conv(hp, l)) { /* conv rows instead of K/V (below) */
            kv->layer_rows[l] = 0;
            kv->layer_base[l] = bytes;
            continue;
        }
        kv->layer_rows[l] = kv->ring_rows > 0 && kite_layer_is_local(hp, l) ? kv->ring_rows : n_ctx;
        kv->layer_kv_heads[l] = kite_layer_kv_heads(hp, l);
        kv->layer_row_bytes[l] = kite_kv_row_bytes(type, kite_layer_head_dim(hp, l));
        kv->layer_base[l] = bytes;
        bytes += (size_t)kv->layer_kv_heads[l] * (size_t)kv->layer_rows[l] * kv->layer_row_bytes[l];
    }
    kv->bytes = 2 * bytes;
    int dst = kite_dn_state_init(&kv->dn, hp, KITE_KV_MAX_PASS, e);
    if (dst) {
        kite_kv_cache_free(kv);
        return dst;
    }
    if (kv->dn) kv->bytes += kv->dn->bytes;
    kv->k = calloc(bytes ? bytes : 1, 1);
    kv->v = calloc(bytes ? bytes : 1, 1);
    if (n_conv > 0) {
        kv->conv_taps = hp->conv_taps;
        kv->conv_dim = hp->dim;
        kv->conv_rows = hp->conv_taps - 1 + KITE_KV_MAX_PASS;
        size_t conv_floats = (size_t)n_conv * (size_t)kv->conv_rows * (size_t)kv->conv_dim;
        kv->conv = calloc(conv_floats, sizeof(float));
        kv->bytes += conv_floats * sizeof(float);
        if (!kv->conv) {
            kite_kv_cache_free(kv);
            return kite_fail(e, KITE_ERR_NOMEM, "out of memory for the conv rows of %d layers", n_conv);
        }
    }
    if (!kv->k || !kv->v) {
        kite_kv_cache_free(kv);
        return kite_fail(e, KITE_ERR_NOMEM, "out of memory for a KV cache of %d tokens (%.1f MiB)", n_ctx,
                         2.0 * (double)bytes / 1048576.0);
    }
    return KITE_OK;
}

void kite_kv_commit(kite_kv_cache *kv, int32_t n_layers, int32_t pos0, const int32_t *nodes, int32_t n_nodes) {
    kite_dn_commit(kv->dn, pos0, nodes, n_nodes);
    char *k = kv->k, *v = kv->v;
    /* A ring maps the pass's rows pos0 .. pos0 + KITE_KV_MAX_PASS - 1 to distinct rows, so the moves are
     * the same as in a flat layer. */
    for (int32_t i = 0; i < n_nodes; i++) {
        int32_t from = pos0 + nodes[i], to = pos0 + i;
        if (from == to) continue;
        for (int32_t l = 0; l < n_layers; l++) {
            if (!kite_kv_layer_has_kv(kv, l)) { /* a conv layer: its conv row moves the same way */
                memmove(kite_kv_conv_row(kv, l, to), kite_kv_conv_row(kv, l, from), sizeof(float) * (size_t)kv->conv_dim);
                continue;
            }
            for (int32_t h = 0; h < kv->layer_kv_heads[l]; h++) {
                const size_t head_bytes = kv->layer_row_bytes[l];
                size_t at_to = kite_kv_offset(kv, l, h, kite_kv_row(kv, l, to));
                size_t at_from = kite_kv_offset(kv, l, h, kite_kv_row(kv, l, from));
                memmove(k + at_to, k + at_from, head_bytes);
                memmove(v + at_to, v + at_from, head_bytes);
            }
        }
    }
}

bool kite_kv_can_rewind(kite_kv_cache *kv, int32_t n_past) {
    if (!kite_dn_can_rewind(kv->dn, n_past)) return false;
    if (kv->ring_rows == 0 && kv->conv_rows == 0) return true;
    if (n_past <= 0) {
        kv->ring_high = 0;
        kv->conv_held_from = 0;
        return true;
    }
    if (kv->ring_rows > 0) {
        int32_t first_needed = n_past - kv->window + 1 > 0 ? n_past - kv->window + 1 : 0;
        if (first_needed < kv->ring_high - kv->ring_rows) return false;
    }
    if (kv->conv_rows > 0) { /* the taps before n_past: positions n_past - (taps - 1) .. n_past - 1 */
        int32_t first_needed = n_past - (kv->conv_taps - 1) > 0 ? n_past - (kv->conv_taps - 1) : 0;
        if (first_needed < kv->ring_high - kv->conv_rows || first_needed < kv->conv_held_from) return false;
    }
    return true;
}

/* The conv rows of the positions before n that the taps read next (the last taps - 1), from src to dst;
 * dst then holds nothing older (conv_held_from). */
static void conv_copy_window(kite_kv_cache *dst, const kite_kv_cache *src, int32_t n) {
    if (src->conv_rows == 0) return;
    int32_t p0 = n - (src->conv_taps - 1) > 0 ? n - (src->conv_taps - 1) : 0;
    for (int32_t l = 0; l < src->n_layers; l++) {
        if (src->conv_index[l] < 0) continue;
        for (int32_t p = p0; p < n; p++)
            memcpy(kite_kv_conv_row(dst, l, p), kite_kv_conv_row(src, l, p), sizeof(float) * (size_t)src->conv_dim);
    }
    dst->conv_held_from = p0;
}

void kite_kv_copy_prefix(kite_kv_cache *dst, const kite_kv_cache *src, int32_t n) {
    if (dst->dn && src->dn) kite_dn_copy(dst->dn, src->dn);
    conv_copy_window(dst, src, n);
    for (int32_t l = 0; l < src->n_layers; l++) {
        if (!kite_kv_layer_has_kv(src, l)) continue; /* a conv layer (conv_copy_window) */
        const size_t head_bytes = src->layer_row_bytes[l];
        bool ring = kite_kv_is_ring(src, l) || kite_kv_is_ring(dst, l);
        int32_t keep = kite_kv_is_ring(dst, l) ? dst->layer_rows[l] : n;
        if (kite_kv_is_ring(src, l) && src->layer_rows[l] < keep) keep = src->layer_rows[l];
        int32_t p0 = ring && n > keep ? n - keep : 0;
        for (int32_t h = 0; h < src->layer_kv_heads[l]; h++) {
            if (!ring) { /* flat to flat: one block */
                memcpy((char *)dst->k + kite_kv_offset(dst, l, h, 0), (const char *)src->k + kite_kv_offset(src, l, h, 0),
                       head_bytes * (size_t)n);
                memcpy((char *)dst->v + kite_kv_offset(dst, l, h, 0), (const char *)src->v + kite_kv_offset(src, l, h, 0),
                       head_bytes * (size_t)n);
                continue;
            }
            for (int32_t p = p0; p < n; p++) {
                size_t to = kite_kv_offset(dst, l, h, kite_kv_row(dst, l, p)), from = kite_kv_offset(src, l, h, kite_kv_row(src, l, p));
                memcpy((char *)dst->k + to, (const char *)src->k + from, head_bytes);
                memcpy((char *)dst->v + to, (const char *)src->v + from, head_bytes);
            }
        }
    }
    dst->ring_high = n;
}

void kite_kv_cache_free(kite_kv_cache *kv) {
    kite_dn_state_free(kv->dn);
    free(kv->k);
    free(kv->v);
    free(kv->layer_rows);
    free(kv->layer_base);
    free(kv->conv_index);
    free(kv->conv);
    free(kv->layer_kv_heads);
    free(kv->layer_row_bytes);
    memset(kv, 0, sizeof *kv);
}
