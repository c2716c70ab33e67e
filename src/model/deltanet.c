/* Gated DeltaNet: recurrent state, chunked and step-wise recurrence, tree verification (deltanet.h). */
#include "model/deltanet.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/pool_work.h"

void kite_dn_dims_from(const kite_hparams *hp, kite_dn_dims *d) {
    d->n_k = hp->dn_n_k_heads;
    d->n_v = hp->dn_n_v_heads;
    d->head_k = hp->dn_head_k_dim;
    d->head_v = hp->dn_head_v_dim;
    d->kernel = hp->dn_conv_kernel;
    d->conv_dim = 2 * d->n_k * d->head_k + d->n_v * d->head_v;
    d->v_grouped = hp->dn_v_grouped;
    d->eps = hp->rms_eps;
}

/* ---- the recurrence of one head ------------------------------------------------------------------ */

/* The kernels (kernels/kernels.h: kite_dn_head) run one head's recurrence, step-wise or chunked; the
 * reference (kernels/ref/ref_deltanet.c) is the truth every level is tested against. */

void kite_dn_head_steps(float *M, int32_t hk, int32_t hv, const float *q, const float *k, const float *v, const float *g,
                        const float *beta, int32_t n, float *o) {
    const kite_dn_head h = {.M = M, .hk = hk, .hv = hv, .n = n, .q = q, .k = k, .v = v, .g = g, .beta = beta, .o = o,
                            .qk_stride = hk, .v_stride = hv, .o_stride = hv, .gb_stride = 1};
    kite_kernels_for(KITE_CPU_REF)->dn_steps(&h);
}

void kite_dn_head_chunked(float *M, int32_t hk, int32_t hv, const float *q, const float *k, const float *v, const float *g,
                          const float *beta, int32_t n, float *o, float *work) {
    const kite_dn_head h = {.M = M, .hk = hk, .hv = hv, .n = n, .q = q, .k = k, .v = v, .g = g, .beta = beta, .o = o,
                            .qk_stride = hk, .v_stride = hv, .o_stride = hv, .gb_stride = 1};
    kite_kernels_for(KITE_CPU_REF)->dn_chunked(&h, work);
}

/* ---- the state ---------------------------------------------------------------------------------- */

static size_t state_floats(const kite_dn_dims *d) { return (size_t)d->n_v * (size_t)d->head_v * (size_t)d->head_k; }
static size_t window_floats(const kite_dn_dims *d) { return (size_t)(d->kernel - 1) * (size_t)d->conv_dim; }

int kite_dn_state_init(kite_dn_state **out, const kite_hparams *hp, int32_t max_rows, kite_error *e) {
    *out = NULL;
    int32_t n_rec = 0;
    for (int32_t l = 0; l < hp->n_layers; l++) n_rec += kite_layer_is_recurrent(hp, l);
    if (n_rec == 0) return KITE_OK;
    kite_dn_state *st = calloc(1, sizeof *st);
    if (!st) return kite_fail(e, KITE_ERR_NOMEM, "out of memory");
    kite_dn_dims_from(hp, &st->d);
    st->n_layers = hp->n_layers;
    st->n_rec = n_rec;
    st->slot = calloc((size_t)hp->n_layers, sizeof *st->slot);
    st->block_floats = window_floats(&st->d) + state_floats(&st->d);
    st->row_floats = (size_t)st->d.conv_dim + 2 * (size_t)st->d.n_v;
    st->max_rows = max_rows;
    st->blocks = calloc(2 * (size_t)n_rec * st->block_floats, sizeof(float));
    st->rows = calloc((size_t)max_rows * (size_t)n_rec * st->row_floats, sizeof(float));
    st->bytes = sizeof(float) * (2 * (size_t)n_rec * st->block_floats + (size_t)max_rows * (size_t)n_rec * st->row_floats);
    if (!st->slot || !st->blocks || !st->rows) {
        const double mib = (double)st->bytes / 1048576.0;
        kite_dn_state_free(st);
        return kite_fail(e, KITE_ERR_NOMEM, "out of memory for the recurrent state (%.1f MiB)", mib);
    }
    for (int32_t l = 0, r = 0; l < hp->n_layers; l++) st->slot[l] = kite_layer_is_recurrent(hp, l) ? r++ : -1;
    *out = st;
    return KITE_OK;
}

void kite_dn_state_free(kite_dn_state *st) {
    if (!st) return;
    free(st->slot);
    free(st->blocks);
    free(st->rows);
    free(st);
}

static float *block(const kite_dn_state *st, int set, int32_t slot) {
    return st->blocks + ((size_t)set * (size_t)st->n_rec + (size_t)slot) * st->block_floats;
}

static float *row_at(const kite_dn_state *st, int32_t row, int32_t slot) {
    return st->rows + ((size_t)row * (size_t)st->n_rec + (size_t)slot) * st->row_floats;
}

bool kite_dn_can_rewind(const kite_dn_state *st, int32_t n_past) {
    if (!st || n_past <= 0) return true;
    if (st->n_tree > 0) return n_past == st->base_pos;
    return n_past >= st->base_pos && n_past <= st->base_pos + st->n_rows;
}

void kite_dn_copy(kite_dn_state *dst, const kite_dn_state *src) {
    memcpy(dst->blocks, src->blocks, sizeof(float) * 2 * (size_t)src->n_rec * src->block_floats);
    memcpy(dst->rows, src->rows, sizeof(float) * (size_t)src->max_rows * (size_t)src->n_rec * src->row_floats);
    dst->base = src->base;
    dst->base_pos = src->base_pos;
    dst->n_rows = src->n_rows;
    dst->n_tree = src->n_tree;
    dst->head_ahead = src->head_ahead;
}

void kite_dn_commit(kite_dn_state *st, int32_t pos0, const int32_t *nodes, int32_t n_nodes) {
    if (!st) return;
    if (st->n_tree > 0) {
        if (st->base_pos != pos0) {
            kite_log(KITE_LOG_ERROR, "deltanet: commit at %d of a tree drafted at %d", (int)pos0, (int)st->base_pos);
            return;
        }
        /* nodes increase along a path (parent < child) and nodes[i] >= i: moving in order never
         * overwrites a row still to be read. */
        for (int32_t i = 0; i < n_nodes; i++)
            if (nodes[i] != i) memmove(row_at(st, i, 0), row_at(st, nodes[i], 0), sizeof(float) * (size_t)st->n_rec * st->row_floats);
        st->n_rows = n_nodes;
        st->n_tree = 0;
        st->head_ahead = false;
        return;
    }
    if (pos0 != st->base_pos) return; /* nothing of this pass */
    for (int32_t i = 0; i < n_nodes; i++)
        if (nodes[i] != i) kite_log(KITE_LOG_ERROR, "deltanet: commit of a chain with node %d at %d", (int)nodes[i], (int)i);
    if (n_nodes < st->n_rows) {
        st->n_rows = n_nodes;
        st->head_ahead = false; /* the next pass replays the kept rows from the base */
    }
}

void kite_dn_plan_pass(kite_dn_state *st, const int32_t *parent, int32_t first, int32_t n, int32_t pos0, kite_dn_plan *plan) {
    memset(plan, 0, sizeof *plan);
    plan->tree = parent != NULL;
    plan->parent = parent;
    plan->first = first;
    plan->n = n;
    if (plan->tree && first > 0) {
        plan->read = st->base;
        plan->pos0 = pos0;
        if (st->n_tree != first || st->base_pos != pos0) {
            kite_log(KITE_LOG_ERROR, "deltanet: tree nodes from %d at %d, but the state holds %d nodes at %d", (int)first, (int)pos0,
                     (int)st->n_tree, (int)st->base_pos);
            plan->zero = true;
        }
        return;
    }
    const int32_t T = pos0 + (plan->tree ? 0 : first);
    plan->pos0 = T;
    if (T == 0) {
        plan->zero = true;
        plan->read = st->base;
    } else if (st->n_tree == 0 && st->head_ahead && T == st->base_pos + st->n_rows) {
        plan->read = 1 - st->base;
    } else if (T == st->base_pos) {
        plan->read = st->base;
    } else if (st->n_tree == 0 && T > st->base_pos && T <= st->base_pos + st->n_rows) {
        plan->read = 1 - st->base;
        plan->replay = T - st->base_pos;
    } else {
        kite_log(KITE_LOG_ERROR, "deltanet: a pass at %d, but the state reaches %d .. %d only", (int)T, (int)st->base_pos,
                 (int)(st->base_pos + st->n_rows));
        plan->zero = true;
        plan->read = st->base;
    }
}

void kite_dn_finish_pass(kite_dn_state *st, const kite_dn_plan *plan) {
    if (plan->tree && plan->first > 0) {
        st->n_tree = plan->first + plan->n;
        return;
    }
    st->base = plan->read;
    st->base_pos = plan->pos0;
    if (plan->tree) {
        st->n_rows = 0;
        st->n_tree = plan->n;
        st->head_ahead = false;
    } else {
        st->n_rows = plan->n;
        st->n_tree = 0;
        st->head_ahead = true;
    }
}

/* ---- scratch -------------------------------------------------------------------------------------- */

int kite_dn_scratch_init(kite_dn_scratch *sc, const kite_dn_dims *d, int32_t max_rows, int n_threads, kite_error *e) {
    memset(sc, 0, sizeof *sc);
    sc->max_rows = max_rows;
    sc->n_threads = n_threads > 0 ? n_threads : 1;
    size_t rows = (size_t)max_rows, nv = (size_t)d->n_v;
    sc->q = malloc(sizeof(float) * rows * nv * (size_t)d->head_k);
    sc->k = malloc(sizeof(float) * rows * nv * (size_t)d->head_k);
    sc->v = malloc(sizeof(float) * rows * nv * (size_t)d->head_v);
    sc->g = malloc(sizeof(float) * rows * nv);
    sc->beta = malloc(sizeof(float) * rows * nv);
    sc->o = malloc(sizeof(float) * rows * nv * (size_t)d->head_v);
    sc->order = malloc(sizeof(int32_t) * rows);
    sc->depth = malloc(sizeof(int32_t) * rows);
    sc->work_floats = kite_dn_chunk_work_floats(d->head_k, d->head_v);
    if (sc->work_floats < (size_t)d->conv_dim) sc->work_floats = (size_t)d->conv_dim; /* conv_row's row of conv outputs */
    sc->work = malloc(sizeof(float) * sc->work_floats * (size_t)sc->n_threads);
    if (!sc->q || !sc->k || !sc->v || !sc->g || !sc->beta || !sc->o || !sc->order || !sc->depth || !sc->work) {
        kite_dn_scratch_free(sc);
        return kite_fail(e, KITE_ERR_NOMEM, "out of memory for the recurrent layers' work space");
    }
    return KITE_OK;
}

void kite_dn_scratch_free(kite_dn_scratch *sc) {
    free(sc->q); free(sc->k); free(sc->v); free(sc->g); free(sc->beta); free(sc->o);
    free(sc->stack); free(sc->order); free(sc->depth); free(sc->work);
    memset(sc, 0, sizeof *sc);
}

/* ---- the mixer ------------------------------------------------------------------------------------ */

static float silu(float x) { return x / (1.0f + expf(-x)); }

/* As ggml_softplus: log(1 + e^x), x itself above 20. */
static float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* x / max(|x|, eps), as ggml_l2_norm. */
static void l2_normalize(float *x, int32_t n, float eps, float scale) {
    float ss = 0.0f;
    for (int32_t i = 0; i < n; i++) ss += x[i] * x[i];
    float norm = sqrtf(ss);
    const float inv = scale / (norm > eps ? norm : eps);
    for (int32_t i = 0; i < n; i++) x[i] *= inv;
}

/* The key head value head h reads. */
static int32_t key_head(const kite_dn_dims *d, int32_t h) {
    return d->v_grouped ? h / (d->n_v / d->n_k) : h % d->n_k;
}

/* One row through the conv (taps[k] the conv input k - (kernel-1) steps back, taps[kernel-1] the row itself),
 * SiLU, the split into q | k | v, and the L2 norms; q, k [n_v][head_k] and v [n_v][head_v] per value head.
 * q may be NULL (a replay needs only k and v). */
static void conv_row(const kite_kernel_set *ks, const kite_dn_dims *d, const float *conv_t, const float *const *taps, float *q,
                     float *k, float *v, float *tmp) {
    ks->dn_conv_silu(taps, conv_t, d->kernel, d->conv_dim, tmp);
    const int32_t key_dim = d->n_k * d->head_k;
    const float q_scale = 1.0f / sqrtf((float)d->head_k);
    for (int32_t kh = 0; kh < d->n_k; kh++) {
        l2_normalize(tmp + kh * d->head_k, d->head_k, d->eps, q_scale);
        l2_normalize(tmp + key_dim + kh * d->head_k, d->head_k, d->eps, 1.0f);
    }
    for (int32_t h = 0; h < d->n_v; h++) {
        const int32_t kh = key_head(d, h);
        if (q) memcpy(q + (size_t)h * d->head_k, tmp + kh * d->head_k, sizeof(float) * (size_t)d->head_k);
        memcpy(k + (size_t)h * d->head_k, tmp + key_dim + kh * d->head_k, sizeof(float) * (size_t)d->head_k);
    }
    memcpy(v, tmp + 2 * key_dim, sizeof(float) * (size_t)d->n_v * (size_t)d->head_v);
}

/* Shifts row into a state block's conv window (oldest first). */
static void window_push(const kite_dn_dims *d, float *win, const float *row) {
    const size_t cd = (size_t)d->conv_dim;
    if (d->kernel < 2) return;
    memmove(win, win + cd, sizeof(float) * cd * (size_t)(d->kernel - 2));
    memcpy(win + cd * (size_t)(d->kernel - 2), row, sizeof(float) * cd);
}

/* Replays stored rows [0, n) of layer slot from state block src into dst (src != dst). */
static void replay(const kite_kernel_set *ks, const kite_dn_state *st, const kite_dn_weights *W, int32_t slot, const float *src,
                   float *dst, int32_t n, kite_dn_scratch *sc) {
    const kite_dn_dims *d = &st->d;
    memcpy(dst, src, sizeof(float) * st->block_floats);
    float *win = dst, *M = dst + window_floats(d);
    float *k = sc->k, *v = sc->v, *tmp = sc->work; /* one row's worth of each (thread 0's work space) */
    const float *taps[64];
    for (int32_t r = 0; r < n; r++) {
        const float *row = row_at(st, r, slot);
        for (int32_t t = 0; t < d->kernel - 1; t++) taps[t] = win + (size_t)t * d->conv_dim;
        taps[d->kernel - 1] = row;
        conv_row(ks, d, W->conv_t, taps, NULL, k, v, tmp);
        const float *g = row + d->conv_dim, *beta = g + d->n_v;
        const size_t hs = (size_t)d->head_v * d->head_k;
        for (int32_t h = 0; h < d->n_v; h++) {
            const kite_dn_head one = {.M = M + hs * h, .hk = d->head_k, .hv = d->head_v, .n = 1, .k = k + (size_t)h * d->head_k,
                                      .v = v + (size_t)h * d->head_v, .g = g + h, .beta = beta + h};
            ks->dn_steps(&one); /* the step decoding took (o NULL: q unread) */
        }
        window_push(d, win, row);
    }
}

typedef struct mix_job {
    const kite_kernel_set *ks;
    const kite_dn_state *st;
    const kite_dn_dims *d;
    const kite_dn_weights *W;
    const kite_dn_plan *plan;
    kite_dn_scratch *sc;
    int32_t slot;
    const float *read;    /* the state block the pass starts from */
    float *write;         /* chain: the block its end state goes to */
    int32_t n_rows;       /* rows conv'd: n (chain) or first + n (tree) */
    const float *z;
    float *out;
} mix_job;

/* Conv input k steps back from row r of the pass, into taps (a chain's earlier rows, a tree node's
 * ancestors, then the starting state's window). */
static void gather_taps(const mix_job *j, int32_t r, const float **taps) {
    const kite_dn_dims *d = j->d;
    const int32_t K = d->kernel;
    const float *win = j->read;
    taps[K - 1] = row_at(j->st, j->plan->tree ? r : j->plan->row0 + r, j->slot);
    if (!j->plan->tree) {
        for (int32_t back = 1; back < K; back++)
            taps[K - 1 - back] = r - back >= 0 ? row_at(j->st, r - back, j->slot) : win + (size_t)(K - 1 - (back - r)) * d->conv_dim;
        return;
    }
    int32_t node = r, back = 1;
    for (; back < K; back++) {
        node = node >= 0 ? j->plan->parent[node] : -1;
        if (node < 0) break;
        taps[K - 1 - back] = row_at(j->st, node, j->slot);
    }
    for (int32_t m = 1; back < K; back++, m++) taps[K - 1 - back] = win + (size_t)(K - 1 - m) * d->conv_dim;
}

static void conv_task(void *ctx, int64_t r, int thread) {
    const mix_job *j = ctx;
    const kite_dn_dims *d = j->d;
    const float *taps[64];
    gather_taps(j, (int32_t)r, taps);
    float *tmp = j->sc->work + (size_t)thread * j->sc->work_floats; /* conv_dim <= work_floats is checked at init */
    const size_t qk = (size_t)d->n_v * d->head_k;
    conv_row(j->ks, d, j->W->conv_t, taps, j->sc->q + qk * r, j->sc->k + qk * r, j->sc->v + (size_t)d->n_v * d->head_v * r, tmp);
}

static void chain_head_task(void *ctx, int64_t h, int thread) {
    const mix_job *j = ctx;
    const kite_dn_dims *d = j->d;
    const size_t hs = (size_t)d->head_v * d->head_k;
    float *M = j->write + window_floats(d) + hs * h;
    memcpy(M, j->read + window_floats(d) + hs * h, sizeof(float) * hs);
    const int64_t qs = (int64_t)d->n_v * d->head_k, vs = (int64_t)d->n_v * d->head_v;
    const kite_dn_head r = {.M = M, .hk = d->head_k, .hv = d->head_v, .n = j->n_rows, .q = j->sc->q + h * d->head_k,
                            .k = j->sc->k + h * d->head_k, .v = j->sc->v + h * d->head_v, .g = j->sc->g + h, .beta = j->sc->beta + h,
                            .o = j->sc->o + h * d->head_v, .qk_stride = qs, .v_stride = vs, .o_stride = vs, .gb_stride = d->n_v};
    if (j->n_rows > 1) j->ks->dn_chunked(&r, j->sc->work + (size_t)thread * j->sc->work_floats);
    else j->ks->dn_steps(&r);
}

/* A tree, head h: nodes in depth-first order, each stepping from its parent's state on a stack (level 0:
 * the starting state), so each node costs one step, as decoding it would. */
static void tree_head_task(void *ctx, int64_t h, int thread) {
    (void)thread;
    const mix_job *j = ctx;
    const kite_dn_dims *d = j->d;
    const size_t hs = (size_t)d->head_v * d->head_k;
    const int64_t qs = (int64_t)d->n_v * d->head_k, vs = (int64_t)d->n_v * d->head_v;
    float *stack = j->sc->stack + (size_t)h * hs * (size_t)j->sc->stack_cap;
    const float *M0 = j->read + window_floats(d) + hs * h;
    for (int32_t i = 0; i < j->n_rows; i++) {
        const int32_t node = j->sc->order[i], depth = j->sc->depth[node];
        const float *from = depth == 0 ? M0 : stack + hs * (size_t)(depth - 1);
        float *M = stack + hs * (size_t)depth;
        memcpy(M, from, sizeof(float) * hs);
        const bool out = node >= j->plan->first;
        const kite_dn_head one = {.M = M, .hk = d->head_k, .hv = d->head_v, .n = 1, .q = j->sc->q + node * qs + h * d->head_k,
                                  .k = j->sc->k + node * qs + h * d->head_k, .v = j->sc->v + node * vs + h * d->head_v,
                                  .g = j->sc->g + (size_t)node * d->n_v + h, .beta = j->sc->beta + (size_t)node * d->n_v + h,
                                  .o = out ? j->sc->o + (node - j->plan->first) * vs + h * d->head_v : NULL};
        j->ks->dn_steps(&one);
    }
}

/* out = rmsnorm(o) * norm * silu(z), per value head of each output row. */
static void gate_task(void *ctx, int64_t b, int thread) {
    (void)thread;
    const mix_job *j = ctx;
    const kite_dn_dims *d = j->d;
    const int64_t vd = (int64_t)d->n_v * d->head_v;
    for (int32_t h = 0; h < d->n_v; h++) {
        const float *o = j->sc->o + b * vd + h * d->head_v, *z = j->z + b * vd + h * d->head_v;
        float *y = j->out + b * vd + h * d->head_v;
        double ss = 0.0;
        for (int32_t i = 0; i < d->head_v; i++) ss += (double)o[i] * o[i];
        const float scale = (float)(1.0 / sqrt(ss / (double)d->head_v + (double)d->eps));
        for (int32_t i = 0; i < d->head_v; i++) y[i] = o[i] * scale * j->W->norm[i] * silu(z[i]);
    }
}

/* Depth-first preorder of nodes [0, count) (children in index order) and each node's depth. */
static void tree_order(const int32_t *parent, int32_t count, int32_t *order, int32_t *depth) {
    int32_t n = 0, stack[64], top = 0;
    for (int32_t r = count - 1; r >= 0; r--)
        if (parent[r] < 0) stack[top++] = r;
    while (top > 0) {
        int32_t node = stack[--top];
        depth[node] = parent[node] < 0 ? 0 : depth[parent[node]] + 1;
        order[n++] = node;
        for (int32_t c = count - 1; c > node; c--)
            if (parent[c] == node) stack[top++] = c;
    }
}

void kite_dn_mix(const kite_kernel_set *ks, const kite_dn_weights *W, kite_dn_state *st, int32_t layer, const kite_dn_plan *plan, kite_dn_scratch *sc,
                 kite_pool *pool, const float *conv_in, const float *z, const float *alpha, const float *b, float *out) {
    const kite_dn_dims *d = &st->d;
    const int32_t slot = st->slot[layer];
    float *read = block(st, plan->read, slot), *base = block(st, st->base, slot);
    if (plan->zero) memset(read, 0, sizeof(float) * st->block_floats);
    else if (plan->replay > 0) replay(ks, st, W, slot, base, read, plan->replay, sc);
    /* The pass's rows: conv inputs, g and beta, kept for replays and the tree's commit. */
    const int32_t row0 = plan->tree ? plan->first : 0;
    const int64_t cd = d->conv_dim;
    for (int32_t r = 0; r < plan->n; r++) {
        float *row = row_at(st, row0 + r, slot), *g = row + cd, *beta = g + d->n_v;
        memcpy(row, conv_in + r * cd, sizeof(float) * (size_t)cd);
        for (int32_t h = 0; h < d->n_v; h++) {
            g[h] = W->a[h] * softplus(alpha[(int64_t)r * d->n_v + h] + W->dt_bias[h]);
            beta[h] = 1.0f / (1.0f + expf(-b[(int64_t)r * d->n_v + h]));
        }
    }
    const int32_t n_rows = plan->tree ? plan->first + plan->n : plan->n;
    for (int32_t r = 0; r < n_rows; r++) {
        const float *row = row_at(st, r, slot);
        memcpy(sc->g + (size_t)r * d->n_v, row + cd, sizeof(float) * (size_t)d->n_v);
        memcpy(sc->beta + (size_t)r * d->n_v, row + cd + d->n_v, sizeof(float) * (size_t)d->n_v);
    }
    mix_job j = {.ks = ks, .st = st, .d = d, .W = W, .plan = plan, .sc = sc, .slot = slot, .read = read, .n_rows = n_rows, .z = z, .out = out};
    const int64_t conv_macs = (int64_t)n_rows * cd * d->kernel;
    kite_run_sized(pool, conv_task, &j, n_rows, conv_macs);
    const int64_t head_macs = 4 * (int64_t)n_rows * d->n_v * d->head_v * d->head_k;
    if (!plan->tree) {
        j.write = block(st, 1 - plan->read, slot);
        kite_run_sized(pool, chain_head_task, &j, d->n_v, head_macs);
        /* The end state's conv window: the last kernel - 1 conv inputs. */
        float *win = j.write;
        for (int32_t m = 1; m < d->kernel; m++) {
            const float *src = plan->n - m >= 0 ? row_at(st, plan->n - m, slot) : read + (size_t)(d->kernel - 1 - (m - plan->n)) * cd;
            memcpy(win + (size_t)(d->kernel - 1 - m) * cd, src, sizeof(float) * (size_t)cd);
        }
    } else {
        tree_order(plan->parent, n_rows, sc->order, sc->depth);
        int32_t max_depth = 0;
        for (int32_t r = 0; r < n_rows; r++) max_depth = sc->depth[r] > max_depth ? sc->depth[r] : max_depth;
        if (max_depth + 1 > sc->stack_cap) {
            const size_t hs = (size_t)d->head_v * d->head_k;
            float *grown = realloc(sc->stack, sizeof(float) * hs * (size_t)d->n_v * (size_t)(max_depth + 1));
            if (!grown) {
                kite_log(KITE_LOG_ERROR, "deltanet: out of memory for a tree of depth %d", (int)max_depth + 1);
                memset(out, 0, sizeof(float) * (size_t)plan->n * (size_t)d->n_v * (size_t)d->head_v);
                return;
            }
            sc->stack = grown;
            sc->stack_cap = max_depth + 1;
        }
        kite_run_sized(pool, tree_head_task, &j, d->n_v, head_macs);
    }
    kite_run_sized(pool, gate_task, &j, plan->n, (int64_t)plan->n * d->n_v * d->head_v * 8);
}
