/* EAGLE-3 draft heads: loading, the head's forward pass, and drafting (eagle3.h). */
#include "spec/eagle3.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "io/gguf.h"
#include "io/mmap.h"
#include "quant/types.h"
#include "spec/head.h"
#include "spec/spec.h"

/* Rows the head runs in one batch: a round of tree nodes (at most 8) or a chunk of committed rows. */
enum { EAGLE3_MAX_ROWS = 64 };
/* Feature rows kept below the head's cache front: a truncation up to this far back reruns only the
 * rows past it; a deeper one restarts the cache where the features start (fewer positions attended
 * to: drafts get worse, never the output). Bounds the rows' memory (3 x dim floats a position). */
enum { EAGLE3_FEATURE_SLACK = 256 };

struct kite_eagle3 {
    kite_mapped_file file;
    kite_gguf *g;
    const kite_kernel_set *ks;
    int32_t dim, n_heads, n_kv_heads, head_dim, ffn_dim;
    int32_t target_dim;                        /* width of one target feature row */
    int32_t layers[KITE_EAGLE3_N_FEATURES];    /* target layers whose inputs are fused, increasing */
    float rms_eps, rope_theta;
    bool norm_before_residual, norm_before_fc;
    bool has_embd, has_output;
    kite_tensor tok_embd;                      /* [n_vocab rows, dim] when has_embd (a view of the file) */
    kite_packed_matrix fc;                     /* [dim rows, 3 * target_dim] */
    kite_packed_matrix wq, wk, wv;             /* [heads * head_dim rows, 2 * dim]: over (embedding, g) normed */
    kite_packed_matrix wo;                     /* [dim rows, n_heads * head_dim] */
    kite_packed_matrix gate, up;               /* [ffn_dim rows, dim] */
    kite_packed_matrix down;                   /* [dim rows, ffn_dim] */
    kite_packed_matrix output;                 /* [n_vocab rows, dim] when has_output */
    float *attn_norm, *hidden_norm, *ffn_norm, *output_norm; /* [dim] */
    float *enc_norm;                           /* [3 * target_dim] when norm_before_fc */
    float *inv_freq;                           /* [head_dim / 2] */
    kite_weight_arena arena;                   /* the packed matrices (huge pages, as the target's) */
};

/* ---- loading ----------------------------------------------------------------------------------------- */

bool kite_eagle3_file_is_head(const char *path) { return kite_head_file_has_arch(path, "eagle3"); }

static kite_head_file head_file(kite_eagle3 *h) {
    return (kite_head_file){.what = "EAGLE-3 head", .g = h->g, .ks = h->ks, .arena = &h->arena};
}

static int load_matrix(kite_eagle3 *h, const char *name, int64_t cols, int64_t rows, kite_packed_matrix *m, kite_error *e) {
    kite_head_file f = head_file(h);
    return kite_head_load_matrix(&f, name, cols, rows, m, e);
}

/* One arena for every matrix of the head (packing falls back to allocations of its own past it). */
static int size_arena(kite_eagle3 *h, kite_error *e) {
    static const char *const names[] = {"fc.weight", "blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.attn_v.weight",
                                        "blk.0.attn_output.weight", "blk.0.ffn_gate.weight", "blk.0.ffn_up.weight",
                                        "blk.0.ffn_down.weight", "output.weight"};
    kite_head_file f = head_file(h);
    return kite_head_arena_init(&f, names, sizeof names / sizeof names[0], &h->arena, e);
}

static int load_vector(kite_eagle3 *h, const char *name, int64_t n, float **out, kite_error *e) {
    kite_head_file f = head_file(h);
    return kite_head_load_vector(&f, name, n, out, e);
}

static bool get_u32(const kite_gguf *g, const char *suffix, uint32_t *v) { return kite_head_get_u32(g, "eagle3", suffix, v); }

static int open_head(kite_eagle3 *h, const char *path, const void *data, size_t size, kite_error *e);

int kite_eagle3_open(kite_eagle3 **out, const char *path, kite_error *e) {
    *out = NULL;
    kite_eagle3 *h = calloc(1, sizeof *h);
    if (!h) return kite_fail(e, KITE_ERR_NOMEM, "out of memory");
    int st = kite_map_file(&h->file, path, e);
    if (st) { free(h); return st; }
    if ((st = open_head(h, path, h->file.data, h->file.size, e))) return st; /* h freed */
    *out = h;
    return KITE_OK;
}

int kite_eagle3_open_bytes(kite_eagle3 **out, const void *data, size_t size, kite_error *e) {
    *out = NULL;
    kite_eagle3 *h = calloc(1, sizeof *h);
    if (!h) return kite_fail(e, KITE_ERR_NOMEM, "out of memory");
    int st = open_head(h, "(memory)", data, size, e);
    if (st) return st;
    *out = h;
    return KITE_OK;
}

/* Parses and packs the head from data (which must outlive it); frees h on failure. */
static int open_head(kite_eagle3 *h, const char *path, const void *data, size_t size, kite_error *e) {
    h->ks = kite_kernels();
    int st;
    if ((st = kite_gguf_open(&h->g, data, size, e))) {
        char inner[sizeof e->msg];
        snprintf(inner, sizeof inner, "%s", e->msg);
        kite_eagle3_free(h);
        return kite_fail(e, st, "EAGLE-3 head %s: %s", path, inner);
    }
    const kite_gguf *g = h->g;
    uint32_t dim = 0, n_layers = 0, n_heads = 0, n_kv = 0, ffn = 0, tdim = 0, head_dim = 0;
    if (!get_u32(g, "embedding_length", &dim) || !get_u32(g, "block_count", &n_layers) ||
        !get_u32(g, "attention.head_count", &n_heads) || !get_u32(g, "feed_forward_length", &ffn) ||
        !get_u32(g, "target_hidden_size", &tdim)) {
        kite_eagle3_free(h);
        return kite_fail(e, KITE_ERR_FORMAT,
                         "EAGLE-3 head %s: missing one of eagle3.embedding_length, block_count, attention.head_count, "
                         "feed_forward_length, target_hidden_size",
                         path);
    }
    if (!get_u32(g, "attention.head_count_kv", &n_kv)) n_kv = n_heads;
    if (n_layers != 1 || dim == 0 || dim > 65536 || n_heads == 0 || n_heads > 1024 || n_kv == 0 || n_heads % n_kv != 0 ||
        ffn == 0 || ffn > (1u << 20) || tdim == 0 || tdim > 65536) {
        kite_eagle3_free(h);
        return kite_fail(e, KITE_ERR_FORMAT,
                         "EAGLE-3 head %s: bad shape (%u layers (must be 1), dim %u, %u heads, %u KV heads, FFN %u, target width %u)",
                         path, n_layers, dim, n_heads, n_kv, ffn, tdim);
    }
    if (!get_u32(g, "attention.key_length", &head_dim)) head_dim = dim / n_heads;
    if (head_dim == 0 || head_dim % 2 || head_dim > KITE_ATTN_MAX_HEAD_DIM || n_heads / n_kv > KITE_ATTN_MAX_Q) {
        kite_eagle3_free(h);
        return kite_fail(e, KITE_ERR_UNSUPPORTED, "EAGLE-3 head %s: head size %u with %u query heads per KV head is not supported",
                         path, head_dim, n_heads / n_kv);
    }
    h->dim = (int32_t)dim, h->n_heads = (int32_t)n_heads, h->n_kv_heads = (int32_t)n_kv, h->head_dim = (int32_t)head_dim;
    h->ffn_dim = (int32_t)ffn, h->target_dim = (int32_t)tdim;
    kite_gguf_vtype et;
    uint64_t n_ids = 0;
    if (!kite_gguf_get_arr(g, "eagle3.target_layers", &et, &n_ids) || n_ids != KITE_EAGLE3_N_FEATURES) {
        kite_eagle3_free(h);
        return kite_fail(e, KITE_ERR_FORMAT, "EAGLE-3 head %s: eagle3.target_layers must list exactly 3 target layers", path);
    }
    for (int k = 0; k < KITE_EAGLE3_N_FEATURES; k++) {
        int64_t id = -1;
        if (!kite_gguf_arr_i64(g, "eagle3.target_layers", (uint64_t)k, &id) || id < 0 || id > 65536) {
            kite_eagle3_free(h);
            return kite_fail(e, KITE_ERR_FORMAT, "EAGLE-3 head %s: eagle3.target_layers[%d] is not a layer id", path, k);
        }
        h->layers[k] = (int32_t)id;
    }
    h->rms_eps = 1e-5f;
    (void)kite_gguf_get_f32(g, "eagle3.attention.layer_norm_rms_epsilon", &h->rms_eps);
    h->rope_theta = 10000.0f;
    (void)kite_gguf_get_f32(g, "eagle3.rope.freq_base", &h->rope_theta);
    (void)kite_gguf_get_bool(g, "eagle3.norm_before_residual", &h->norm_before_residual);
    (void)kite_gguf_get_bool(g, "eagle3.norm_before_fc", &h->norm_before_fc);
    kite_gguf_str scaling;
    if ((kite_gguf_get_str(g, "eagle3.rope.scaling.type", &scaling) && !(scaling.len == 4 && !memcmp(scaling.ptr, "none", 4))) ||
        kite_gguf_find_tensor(g, "rope_freqs.weight") || kite_gguf_find_tensor(g, "blk.0.rope_freqs.weight")) {
        kite_eagle3_free(h);
        return kite_fail(e, KITE_ERR_UNSUPPORTED, "EAGLE-3 head %s: RoPE scaling is not supported yet", path);
    }
    if (kite_gguf_find_tensor(g, "d2t")) {
        kite_eagle3_free(h);
        return kite_fail(e, KITE_ERR_UNSUPPORTED, "EAGLE-3 head %s: a reduced draft vocabulary (d2t) is not supported yet", path);
    }
    int64_t D = dim, q_dim = (int64_t)n_heads * head_dim, kv_dim = (int64_t)n_kv * head_dim, F = 3 * (int64_t)tdim;
    const kite_head_file hf = head_file(h);
    if ((st = size_arena(h, e))) goto fail;
    if ((st = kite_head_load_embd_output(&hf, path, D, &h->tok_embd, &h->has_embd, &h->output, &h->has_output, e))) goto fail;
    if ((st = load_matrix(h, "fc.weight", F, D, &h->fc, e))) goto fail;
    if ((st = load_matrix(h, "blk.0.attn_q.weight", 2 * D, q_dim, &h->wq, e))) goto fail;
    if ((st = load_matrix(h, "blk.0.attn_k.weight", 2 * D, kv_dim, &h->wk, e))) goto fail;
    if ((st = load_matrix(h, "blk.0.attn_v.weight", 2 * D, kv_dim, &h->wv, e))) goto fail;
    if ((st = load_matrix(h, "blk.0.attn_output.weight", q_dim, D, &h->wo, e))) goto fail;
    if ((st = load_matrix(h, "blk.0.ffn_gate.weight", D, ffn, &h->gate, e))) goto fail;
    if ((st = load_matrix(h, "blk.0.ffn_up.weight", D, ffn, &h->up, e))) goto fail;
    if ((st = load_matrix(h, "blk.0.ffn_down.weight", ffn, D, &h->down, e))) goto fail;
    if ((st = load_vector(h, "blk.0.attn_norm.weight", D, &h->attn_norm, e))) goto fail;
    if ((st = load_vector(h, "blk.0.attn_norm_2.weight", D, &h->hidden_norm, e))) goto fail;
    if ((st = load_vector(h, "blk.0.ffn_norm.weight", D, &h->ffn_norm, e))) goto fail;
    if ((st = load_vector(h, "output_norm.weight", D, &h->output_norm, e))) goto fail;
    if (h->norm_before_fc && (st = load_vector(h, "enc.output_norm.weight", F, &h->enc_norm, e))) goto fail;
    if ((st = kite_head_inv_freq(h->rope_theta, head_dim, &h->inv_freq, e))) goto fail;
    return KITE_OK;
fail:;
    char inner[sizeof e->msg];
    snprintf(inner, sizeof inner, "%s", e->msg);
    kite_eagle3_free(h);
    return kite_fail(e, st, "%s", inner);
}

void kite_eagle3_free(kite_eagle3 *h) {
    if (!h) return;
    kite_packed_matrix *m[] = {&h->fc, &h->wq, &h->wk, &h->wv, &h->wo, &h->gate, &h->up, &h->down, &h->output};
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) kite_packed_matrix_free(m[i]);
    kite_weight_arena_free(&h->arena); /* after the matrices carved from it */
    free(h->attn_norm); free(h->hidden_norm); free(h->ffn_norm); free(h->output_norm); free(h->enc_norm); free(h->inv_freq);
    kite_gguf_free(h->g);
    if (h->file.data) kite_unmap_file(&h->file);
    free(h);
}

int32_t kite_eagle3_n_vocab(const kite_eagle3 *h) {
    return h->has_output ? (int32_t)h->output.rows : h->has_embd ? (int32_t)h->tok_embd.ne[1] : 0;
}
int32_t kite_eagle3_dim(const kite_eagle3 *h) { return h->dim; }
const int32_t *kite_eagle3_target_layers(const kite_eagle3 *h) { return h->layers; }

int kite_eagle3_check_target(const kite_eagle3 *h, const kite_weights *tw, kite_error *e) {
    const kite_hparams *hp = &tw->hp;
    if (h->target_dim != hp->dim)
        return kite_fail(e, KITE_ERR_INVALID_ARG, "the EAGLE-3 head reads target features of width %d, the model's width is %d",
                         h->target_dim, hp->dim);
    for (int k = 0; k < KITE_EAGLE3_N_FEATURES; k++) {
        if (h->layers[k] > hp->n_layers)
            return kite_fail(e, KITE_ERR_INVALID_ARG, "the EAGLE-3 head reads target layer %d, the model has %d layers", h->layers[k],
                             hp->n_layers);
        if (k > 0 && h->layers[k] <= h->layers[k - 1])
            return kite_fail(e, KITE_ERR_UNSUPPORTED, "the EAGLE-3 head's target layers (%d, %d, %d) do not increase", h->layers[0],
                             h->layers[1], h->layers[2]);
    }
    int32_t V = kite_eagle3_n_vocab(h);
    if (V != 0 && V != hp->n_vocab)
        return kite_fail(e, KITE_ERR_INVALID_ARG, "the EAGLE-3 head's vocabulary has %d tokens, the model's %d", V, hp->n_vocab);
    if (!h->has_embd && (!tw->tok_embd || tw->tok_embd->ne[0] != h->dim))
        return kite_fail(e, KITE_ERR_INVALID_ARG, "the EAGLE-3 head has no embedding and the model's (width %d) does not fit its width %d",
                         hp->dim, h->dim);
    if (!h->has_output && tw->output.cols != h->dim)
        return kite_fail(e, KITE_ERR_INVALID_ARG, "the EAGLE-3 head has no output layer and the model's (width %d) does not fit its width %d",
                         (int)tw->output.cols, h->dim);
    return KITE_OK;
}

/* ---- the head's forward pass ------------------------------------------------------------------------- */

struct kite_eagle3_run {
    const kite_eagle3 *h;
    const kite_weights *tw;     /* the target: its embedding and output when the head has none */
    const kite_tensor *embd;    /* the embedding in use */
    const kite_packed_matrix *output;
    int32_t V;
    int32_t n_ctx;
    int32_t cap_rows;           /* n_ctx committed rows, then one per tree node */
    float *k, *v;               /* [n_kv_heads][cap_rows][head_dim] */
    int32_t lo, D;              /* committed rows [lo, D) hold positions lo..D-1 */
    int32_t *seen;              /* [n_ctx + 1] the context the rows were run in: seen[p + 1] is the token the row
                                   of position p took, seen[0..lo] the tokens before the first row */
    float *g, *cat, *q, *kk, *vv, *att, *h1, *xn, *gate, *up, *pre; /* [EAGLE3_MAX_ROWS][width] scratch */
    float *erow;                /* [dim] an embedding row */
    void *act;
    size_t act_bytes;
    float *node_pre;            /* [KITE_MAX_DRAFT + 1][dim] pre-norm state of each tree node's row */
    int32_t *vis;               /* [EAGLE3_MAX_ROWS][cap_rows] visible rows */
    /* The pass being drafted (for the node callback). */
    int32_t P;
    kite_pool *pool;
};

int kite_eagle3_run_new(kite_eagle3_run **out, const kite_eagle3 *h, const kite_weights *tw, int32_t n_ctx, kite_error *e) {
    *out = NULL;
    kite_eagle3_run *r = calloc(1, sizeof *r);
    if (!r) return kite_fail(e, KITE_ERR_NOMEM, "out of memory");
    r->h = h, r->tw = tw, r->n_ctx = n_ctx;
    r->embd = h->has_embd ? &h->tok_embd : tw->tok_embd;
    r->output = h->has_output ? &h->output : &tw->output;
    r->V = (int32_t)r->output->rows;
    r->cap_rows = n_ctx + KITE_MAX_DRAFT + 1;
    size_t kvn = (size_t)h->n_kv_heads * (size_t)r->cap_rows * (size_t)h->head_dim;
    size_t R = EAGLE3_MAX_ROWS, D = (size_t)h->dim, F = 3 * (size_t)h->target_dim;
    size_t qd = (size_t)h->n_heads * h->head_dim, kvd = (size_t)h->n_kv_heads * h->head_dim;
    r->k = malloc(sizeof(float) * kvn);
    r->v = malloc(sizeof(float) * kvn);
    r->seen = malloc(sizeof(int32_t) * ((size_t)n_ctx + 1));
    r->g = malloc(sizeof(float) * R * (F > D ? F : D));
    r->cat = malloc(sizeof(float) * R * 2 * D);
    r->q = malloc(sizeof(float) * R * qd);
    r->kk = malloc(sizeof(float) * R * kvd);
    r->vv = malloc(sizeof(float) * R * kvd);
    r->att = malloc(sizeof(float) * R * qd);
    r->h1 = malloc(sizeof(float) * R * D);
    r->xn = malloc(sizeof(float) * R * D);
    r->gate = malloc(sizeof(float) * R * (size_t)h->ffn_dim);
    r->up = malloc(sizeof(float) * R * (size_t)h->ffn_dim);
    r->pre = malloc(sizeof(float) * R * D);
    r->erow = malloc(sizeof(float) * D);
    r->node_pre = malloc(sizeof(float) * (KITE_MAX_DRAFT + 1) * D);
    r->vis = malloc(sizeof(int32_t) * R * (size_t)r->cap_rows);
    const kite_packed_matrix *all[] = {&h->fc, &h->wq, &h->wo, &h->gate, &h->down, r->output};
    r->act_bytes = kite_head_act_bytes(h->ks, all, sizeof all / sizeof all[0], EAGLE3_MAX_ROWS);
    r->act = r->act_bytes ? malloc(r->act_bytes) : NULL;
    if (!r->k || !r->v || !r->seen || !r->g || !r->cat || !r->q || !r->kk || !r->vv || !r->att || !r->h1 || !r->xn ||
        !r->gate || !r->up || !r->pre || !r->erow || !r->node_pre || !r->vis || (r->act_bytes && !r->act)) {
        kite_eagle3_run_free(r);
        return kite_fail(e, KITE_ERR_NOMEM, "out of memory for the EAGLE-3 head's cache (%d positions)", n_ctx);
    }
    *out = r;
    return KITE_OK;
}

void kite_eagle3_run_free(kite_eagle3_run *r) {
    if (!r) return;
    free(r->k); free(r->v); free(r->seen); free(r->g); free(r->cat); free(r->q); free(r->kk); free(r->vv);
    free(r->att); free(r->h1); free(r->xn); free(r->gate); free(r->up); free(r->pre); free(r->erow); free(r->node_pre);
    free(r->vis); free(r->act);
    free(r);
}

void kite_eagle3_run_reset(kite_eagle3_run *r) { r->lo = r->D = 0; }

/* y[n][w.rows] = x[n][w.cols] W^T. */
static void mm(kite_eagle3_run *r, kite_pool *pool, const kite_packed_matrix *w, const float *x, int32_t n, float *y) {
    kite_head_mm(r->h->ks, r->act, pool, w, x, n, y);
}

#define rmsnorm kite_head_rmsnorm

/* llama.cpp's "norm" RoPE (dimension pairs 2i, 2i+1). */
static void rope(float *v, int32_t head_dim, const float *inv_freq, int32_t pos) { kite_head_rope(v, head_dim, inv_freq, pos, false); }

/* One batch of n rows: row i runs (token[i], hin[i]) at RoPE position pos[i] into cache row crow[i],
 * attending to the n_vis[i] cache rows r->vis + i * cap_rows (its own last). Pre-norm states go to
 * pre_out[i] and, for rows i >= first_logit, logits to logits[(i - first_logit)][V]. */
static void run_batch(kite_eagle3_run *r, kite_pool *pool, int32_t n, const int32_t *token, const float *hin,
                      const int32_t *pos, const int32_t *crow, const int32_t *n_vis, int32_t first_logit, float *logits,
                      float *pre_out) {
    const kite_eagle3 *h = r->h;
    const int32_t D = h->dim, hd = h->head_dim, qd = h->n_heads * hd, kvd = h->n_kv_heads * hd;
    const kite_type_traits *et = kite_type_get(r->embd->type);
    size_t erow_bytes = kite_type_row_bytes(r->embd->type, D);
    for (int32_t i = 0; i < n; i++) {
        et->to_float((const unsigned char *)r->embd->data + (size_t)token[i] * erow_bytes, r->erow, D);
        float *c = r->cat + (size_t)i * 2 * D;
        rmsnorm(c, r->erow, h->attn_norm, D, h->rms_eps);
        rmsnorm(c + D, hin + (size_t)i * D, h->hidden_norm, D, h->rms_eps);
    }
    mm(r, pool, &h->wq, r->cat, n, r->q);
    mm(r, pool, &h->wk, r->cat, n, r->kk);
    mm(r, pool, &h->wv, r->cat, n, r->vv);
    for (int32_t i = 0; i < n; i++) {
        for (int32_t hh = 0; hh < h->n_heads; hh++) rope(r->q + (size_t)i * qd + (size_t)hh * hd, hd, h->inv_freq, pos[i]);
        for (int32_t kh = 0; kh < h->n_kv_heads; kh++) {
            float *kr = r->kk + (size_t)i * kvd + (size_t)kh * hd;
            rope(kr, hd, h->inv_freq, pos[i]);
            size_t at = ((size_t)kh * r->cap_rows + (size_t)crow[i]) * hd;
            memcpy(r->k + at, kr, sizeof(float) * hd);
            memcpy(r->v + at, r->vv + (size_t)i * kvd + (size_t)kh * hd, sizeof(float) * hd);
        }
    }
    const int32_t group = h->n_heads / h->n_kv_heads;
    for (int32_t i = 0; i < n; i++)
        for (int32_t kh = 0; kh < h->n_kv_heads; kh++) {
            kite_attn_query a = {
                .q = r->q + (size_t)i * qd + (size_t)kh * group * hd, .n_q = group, .head_dim = hd,
                .k = r->k + (size_t)kh * r->cap_rows * hd, .v = r->v + (size_t)kh * r->cap_rows * hd,
                .kv_type = KITE_TYPE_F32, .row_bytes = sizeof(float) * (size_t)hd,
                .rows = r->vis + (size_t)i * r->cap_rows, .n_visible = n_vis[i], .scale = 1.0f / sqrtf((float)hd),
                .out = r->att + (size_t)i * qd + (size_t)kh * group * hd,
            };
            h->ks->attend(&a);
        }
    mm(r, pool, &h->wo, r->att, n, r->h1);
    for (int32_t i = 0; i < n; i++) { /* the residual: g itself, or its norm (norm_before_residual) */
        float *x = r->h1 + (size_t)i * D;
        const float *res = h->norm_before_residual ? r->cat + (size_t)i * 2 * D + D : hin + (size_t)i * D;
        for (int32_t j = 0; j < D; j++) x[j] += res[j];
        rmsnorm(r->xn + (size_t)i * D, x, h->ffn_norm, D, h->rms_eps);
    }
    mm(r, pool, &h->gate, r->xn, n, r->gate);
    mm(r, pool, &h->up, r->xn, n, r->up);
    for (int32_t i = 0; i < n; i++) h->ks->silu_mul(r->gate + (size_t)i * h->ffn_dim, r->up + (size_t)i * h->ffn_dim, h->ffn_dim);
    mm(r, pool, &h->down, r->gate, n, r->pre);
    for (int32_t i = 0; i < n; i++) {
        float *x = r->pre + (size_t)i * D;
        const float *f = r->h1 + (size_t)i * D;
        for (int32_t j = 0; j < D; j++) x[j] += f[j];
        memcpy(pre_out + (size_t)i * D, x, sizeof(float) * (size_t)D);
    }
    if (logits && first_logit < n) {
        int32_t m = n - first_logit;
        for (int32_t i = 0; i < m; i++) rmsnorm(r->xn + (size_t)i * D, r->pre + (size_t)(first_logit + i) * D, h->output_norm, D, h->rms_eps);
        mm(r, pool, r->output, r->xn, m, logits);
    }
}

/* g rows [n][dim] = fc(features [n][3 * target_dim]) (normed first with norm_before_fc). */
static void fuse(kite_eagle3_run *r, kite_pool *pool, const float *features, int32_t n, float *g) {
    const kite_eagle3 *h = r->h;
    const int64_t F = 3 * (int64_t)h->target_dim;
    if (h->norm_before_fc) {
        for (int32_t i = 0; i < n; i++) rmsnorm(r->g + (size_t)i * F, features + (size_t)i * F, h->enc_norm, F, h->rms_eps);
        features = r->g;
    }
    mm(r, pool, &h->fc, features, n, g);
}

/* Committed rows of positions pos0 .. pos0 + n - 1 (n <= EAGLE3_MAX_ROWS), causal from r->lo. */
static void run_committed(kite_eagle3_run *r, kite_pool *pool, const int32_t *token, const float *g, int32_t n, int32_t pos0,
                          float *logits_last, float *pre) {
    int32_t pos[EAGLE3_MAX_ROWS], n_vis[EAGLE3_MAX_ROWS];
    for (int32_t i = 0; i < n; i++) {
        pos[i] = pos0 + i;
        n_vis[i] = pos0 + i - r->lo + 1;
        int32_t *v = r->vis + (size_t)i * r->cap_rows;
        for (int32_t p = r->lo; p <= pos0 + i; p++) v[p - r->lo] = p;
        r->seen[pos0 + i + 1] = token[i];
    }
    run_batch(r, pool, n, token, g, pos, pos, n_vis, n - 1, logits_last, pre);
}

double kite_eagle3_one_step_ms(kite_eagle3_run *r, kite_pool *pool) {
    float *logits = malloc(sizeof(float) * (size_t)r->V), *pre = malloc(sizeof(float) * (size_t)r->h->dim);
    float *g = calloc((size_t)r->h->dim, sizeof(float));
    double best = INFINITY;
    if (logits && pre && g) {
        int32_t token = 0, lo = r->lo, D = r->D;
        r->lo = 0;
        for (int i = 0; i < 3; i++) {
            double t0 = kite_now_ms();
            run_committed(r, pool, &token, g, 1, 0, logits, pre);
            double t = kite_now_ms() - t0;
            if (t < best) best = t;
        }
        r->lo = lo;
        r->D = 0; /* row 0 was overwritten: the next draft rebuilds the cache */
        (void)D;
    }
    free(logits); free(pre); free(g);
    return best;
}

/* ---- drafting ---------------------------------------------------------------------------------------- */

/* kite_spec_grow_tree's callback: runs tree nodes [first, end), each at position P - 1 + depth, on the
 * pre-norm state of its parent's row, attending to the committed rows and its ancestors. */
static int run_nodes(void *ctx, kite_draft_tree *t, int32_t first, int32_t end, float *logits, kite_error *e) {
    (void)e;
    kite_eagle3_run *r = ctx;
    const int32_t D = r->h->dim;
    for (int32_t at = first; at < end; at += EAGLE3_MAX_ROWS) {
        int32_t n = end - at < EAGLE3_MAX_ROWS ? end - at : EAGLE3_MAX_ROWS;
        int32_t pos[EAGLE3_MAX_ROWS], crow[EAGLE3_MAX_ROWS], n_vis[EAGLE3_MAX_ROWS];
        for (int32_t i = 0; i < n; i++) {
            int32_t j = at + i;
            memcpy(r->g + (size_t)i * D, r->node_pre + (size_t)t->parent[j] * D, sizeof(float) * (size_t)D);
            pos[i] = r->P - 1 + t->depth[j];
            crow[i] = r->n_ctx + j;
            int32_t *v = r->vis + (size_t)i * r->cap_rows, nv = 0;
            for (int32_t p = r->lo; p < r->D; p++) v[nv++] = p;
            int32_t chain[KITE_MAX_DRAFT + 1], nc = 0; /* ancestors below the root, deepest first */
            for (int32_t a = t->parent[j]; a > 0; a = t->parent[a]) chain[nc++] = a;
            while (nc > 0) v[nv++] = r->n_ctx + chain[--nc];
            v[nv++] = crow[i];
            n_vis[i] = nv;
            t->fed[j] = true;
        }
        /* run_batch reads hin from r->g only before it overwrites g (fuse is not called here). */
        float *hin = malloc(sizeof(float) * (size_t)n * D);
        if (!hin) return kite_fail(e, KITE_ERR_NOMEM, "out of memory");
        memcpy(hin, r->g, sizeof(float) * (size_t)n * D);
        run_batch(r, r->pool, n, t->token + at, hin, pos, crow, n_vis, 0, logits + (size_t)(at - first) * r->V,
                  r->node_pre + (size_t)at * D);
        free(hin);
    }
    return KITE_OK;
}

int kite_eagle3_draft(kite_spec_state *st, kite_session *s, int32_t root, int32_t budget, const kite_gen_params *gp,
                      kite_draft_tree *t, kite_error *e) {
    kite_eagle3_run *r = st->eagle3;
    kite_features *f = &s->features;
    const int32_t P = s->n_past, Dm = r->h->dim, W = f->width;
    if (P < 1 || P > r->n_ctx || W != 3 * r->h->target_dim) return KITE_OK; /* nothing to draft from */
    /* Rows still valid: those whose context up to the token they took is the session's now (a
     * truncation, a new turn or another root change it); the root's own row (position P - 1) is always
     * run again. A row p is valid iff seen[0 .. p + 1] match. */
    int32_t D = r->D < P - 1 ? r->D : P - 1;
    for (int32_t q = 0; q <= D; q++)
        if (r->seen[q] != s->history[q]) { D = q > 0 ? q - 1 : 0; break; }
    /* Feature rows for [D, P) must be held; when they start later (capture began mid-context, a
     * truncation went below them), the cache restarts where they start. */
    if (f->n == 0 || f->pos0 + f->n < P) return KITE_OK;
    if (D < f->pos0 || D < r->lo) {
        r->lo = f->pos0;
        D = r->lo;
        memcpy(r->seen, s->history, sizeof(int32_t) * ((size_t)r->lo + 1));
    }
    if (r->lo >= P) return KITE_OK;
    r->D = D;
    float *root_logits = st->draft_logits; /* row 0: the root's children */
    int32_t tok[EAGLE3_MAX_ROWS];
    for (int32_t p = D; p < P; p += EAGLE3_MAX_ROWS) {
        int32_t n = P - p < EAGLE3_MAX_ROWS ? P - p : EAGLE3_MAX_ROWS;
        for (int32_t i = 0; i < n; i++) tok[i] = p + i + 1 < P ? s->history[p + i + 1] : root;
        float *g = malloc(sizeof(float) * (size_t)n * Dm), *pre = malloc(sizeof(float) * (size_t)n * Dm);
        if (!g || !pre) {
            free(g), free(pre);
            return kite_fail(e, KITE_ERR_NOMEM, "out of memory");
        }
        fuse(r, s->pool, f->rows + (size_t)(p - f->pos0) * W, n, g);
        bool last = p + n == P;
        run_committed(r, s->pool, tok, g, n, p, last ? root_logits : NULL, pre);
        if (last) memcpy(r->node_pre, pre + (size_t)(n - 1) * Dm, sizeof(float) * (size_t)Dm);
        free(g), free(pre);
        r->D = p + n;
    }
    if (r->D - EAGLE3_FEATURE_SLACK > f->pos0) kite_features_drop_before(f, r->D - EAGLE3_FEATURE_SLACK);
    t->fed[0] = true;
    r->P = P, r->pool = s->pool;
    return kite_spec_grow_tree(st, s, budget, gp, t, r->V, run_nodes, r, e);
}
