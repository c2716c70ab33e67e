/* The MTP drafter over Qwen3.5's next-n block: the head's forward pass and drafting (mtp.h). The cache
 * bookkeeping follows the EAGLE-3 head's (spec/eagle3.c), whose row convention this shares. */
#include "spec/mtp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "quant/types.h"
#include "spec/head.h"
#include "spec/spec.h"

/* Rows the head runs in one batch: a round of tree nodes or a chunk of committed rows. */
enum { MTP_MAX_ROWS = 64 };
/* Feature rows kept below the head's cache front (as EAGLE3_FEATURE_SLACK): a truncation up to this far
 * back reruns only the rows past it. */
enum { MTP_FEATURE_SLACK = 256 };

int kite_mtp_check_target(const kite_weights *tw, kite_error *e) {
    if (!tw->mtp)
        return kite_fail(e, KITE_ERR_INVALID_ARG,
                         "the model has no next-n (MTP) layers: the MTP drafter needs a Qwen3.5 model that carries its "
                         "next-n block (a GGUF with qwen35.nextn_predict_layers > 0 and blk.N.nextn.*, or a Hugging Face "
                         "folder with mtp.* weights)");
    return KITE_OK;
}

struct kite_mtp_run {
    const kite_weights *tw;
    const kite_mtp_weights *m;
    const kite_packed_matrix *output;  /* the head's LM head: its own, or the trunk's */
    int32_t V, dim, n_heads, n_kv_heads, head_dim, ffn_dim, n_rot;
    bool neox;
    int32_t n_ctx;
    int32_t cap_rows;           /* n_ctx committed rows, then one per tree node */
    float *k, *v;               /* [n_kv_heads][cap_rows][head_dim] */
    int32_t lo, D;              /* committed rows [lo, D) hold positions lo..D-1 */
    int32_t *seen;              /* [n_ctx + 1] the context the rows were run in (as the EAGLE-3 head's) */
    float *hin, *cat, *x, *xn, *qg, *q, *gate_a, *kk, *vv, *att, *gate, *up, *hout; /* [MTP_MAX_ROWS][width] */
    float *erow;                /* [dim] an embedding row */
    void *act;
    size_t act_bytes;
    float *node_h;              /* [KITE_MAX_DRAFT + 1][dim] each tree node's row state after shared_head_norm */
    int32_t *vis;               /* [MTP_MAX_ROWS][cap_rows] visible rows */
    int32_t P;                  /* the pass being drafted (for the node callback) */
    kite_pool *pool;
};

int kite_mtp_run_new(kite_mtp_run **out, const kite_weights *tw, int32_t n_ctx, kite_error *e) {
    *out = NULL;
    int st = kite_mtp_check_target(tw, e);
    if (st) return st;
    const kite_hparams *hp = &tw->hp;
    kite_mtp_run *r = calloc(1, sizeof *r);
    if (!r) return kite_fail(e, KITE_ERR_NOMEM, "out of memory");
    r->tw = tw, r->m = tw->mtp, r->n_ctx = n_ctx;
    r->output = r->m->head.rows > 0 ? &r->m->head : &tw->output;
    r->V = (int32_t)r->output->rows;
    r->dim = hp->dim, r->n_heads = hp->n_heads, r->n_kv_heads = hp->n_kv_heads, r->head_dim = hp->head_dim;
    r->ffn_dim = hp->ffn_dim, r->n_rot = hp->n_rot > 0 ? hp->n_rot : hp->head_dim, r->neox = hp->rope_layout == KITE_ROPE_HALF;
    r->cap_rows = n_ctx + KITE_MAX_DRAFT + 1;
    size_t kvn = (size_t)r->n_kv_heads * (size_t)r->cap_rows * (size_t)r->head_dim;
    size_t R = MTP_MAX_ROWS, D = (size_t)r->dim, F = (size_t)r->ffn_dim;
    size_t qd = (size_t)r->n_heads * r->head_dim, kvd = (size_t)r->n_kv_heads * r->head_dim;
    r->k = malloc(sizeof(float) * kvn);
    r->v = malloc(sizeof(float) * kvn);
    r->seen = malloc(sizeof(int32_t) * ((size_t)n_ctx + 1));
    r->hin = malloc(sizeof(float) * R * D);
    r->cat = malloc(sizeof(float) * R * 2 * D);
    r->x = malloc(sizeof(float) * R * D);
    r->xn = malloc(sizeof(float) * R * D);
    r->qg = malloc(sizeof(float) * R * 2 * qd);
    r->q = malloc(sizeof(float) * R * qd);
    r->gate_a = malloc(sizeof(float) * R * qd);
    r->kk = malloc(sizeof(float) * R * kvd);
    r->vv = malloc(sizeof(float) * R * kvd);
    r->att = malloc(sizeof(float) * R * qd);
    r->gate = malloc(sizeof(float) * R * F);
    r->up = malloc(sizeof(float) * R * F);
    r->hout = malloc(sizeof(float) * R * D);
    r->erow = malloc(sizeof(float) * D);
    r->node_h = malloc(sizeof(float) * (KITE_MAX_DRAFT + 1) * D);
    r->vis = malloc(sizeof(int32_t) * R * (size_t)r->cap_rows);
    const kite_layer_weights *L = &r->m->block;
    const kite_packed_matrix *all[] = {&r->m->eh_proj, &L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down, r->output};
    r->act_bytes = kite_head_act_bytes(tw->kernels, all, sizeof all / sizeof all[0], MTP_MAX_ROWS);
    r->act = r->act_bytes ? malloc(r->act_bytes) : NULL;
    if (!r->k || !r->v || !r->seen || !r->hin || !r->cat || !r->x || !r->xn || !r->qg || !r->q || !r->gate_a || !r->kk ||
        !r->vv || !r->att || !r->gate || !r->up || !r->hout || !r->erow || !r->node_h || !r->vis || (r->act_bytes && !r->act)) {
        kite_mtp_run_free(r);
        return kite_fail(e, KITE_ERR_NOMEM, "out of memory for the MTP head's cache (%d positions)", n_ctx);
    }
    *out = r;
    return KITE_OK;
}

void kite_mtp_run_free(kite_mtp_run *r) {
    if (!r) return;
    free(r->k); free(r->v); free(r->seen); free(r->hin); free(r->cat); free(r->x); free(r->xn); free(r->qg); free(r->q);
    free(r->gate_a); free(r->kk); free(r->vv); free(r->att); free(r->gate); free(r->up); free(r->hout); free(r->erow);
    free(r->node_h); free(r->vis); free(r->act);
    free(r);
}

void kite_mtp_run_reset(kite_mtp_run *r) { r->lo = r->D = 0; }

static void mm(kite_mtp_run *r, kite_pool *pool, const kite_packed_matrix *w, const float *x, int32_t n, float *y) {
    kite_head_mm(r->tw->kernels, r->act, pool, w, x, n, y);
}

/* One batch of n rows: row i runs (token[i], hin[i]) with RoPE at pos[i] into cache row crow[i],
 * attending to the n_vis[i] cache rows r->vis + i * cap_rows (its own last), as llama.cpp's graph_mtp.
 * States after shared_head_norm go to h_out[i] and, for rows i >= first_logit, logits to
 * logits[(i - first_logit)][V]. hin may not alias r's scratch. */
static void run_batch(kite_mtp_run *r, kite_pool *pool, int32_t n, const int32_t *token, const float *hin, const int32_t *pos,
                      const int32_t *crow, const int32_t *n_vis, int32_t first_logit, float *logits, float *h_out) {
    const kite_mtp_weights *m = r->m;
    const kite_layer_weights *L = &m->block;
    const kite_kernel_set *ks = r->tw->kernels;
    const float eps = r->tw->hp.rms_eps;
    const int32_t D = r->dim, hd = r->head_dim, qd = r->n_heads * hd, kvd = r->n_kv_heads * hd, F = r->ffn_dim;
    const kite_type_traits *et = kite_type_get(m->embd->type);
    const size_t erow_bytes = kite_type_row_bytes(m->embd->type, D);
    for (int32_t i = 0; i < n; i++) { /* concat(enorm(embedding), hnorm(h)): the embedding first */
        et->to_float((const unsigned char *)m->embd->data + (size_t)token[i] * erow_bytes, r->erow, D);
        float *c = r->cat + (size_t)i * 2 * D;
        kite_head_rmsnorm(c, r->erow, m->enorm, D, eps);
        kite_head_rmsnorm(c + D, hin + (size_t)i * D, m->hnorm, D, eps);
    }
    mm(r, pool, &m->eh_proj, r->cat, n, r->x);
    for (int32_t i = 0; i < n; i++) kite_head_rmsnorm(r->xn + (size_t)i * D, r->x + (size_t)i * D, L->attn_norm, D, eps);
    mm(r, pool, &L->wq, r->xn, n, r->qg);
    mm(r, pool, &L->wk, r->xn, n, r->kk);
    mm(r, pool, &L->wv, r->xn, n, r->vv);
    for (int32_t i = 0; i < n; i++) {
        for (int32_t h = 0; h < r->n_heads; h++) { /* each head's q, then its gate (the doubled projection) */
            const float *src = r->qg + (size_t)i * 2 * qd + (size_t)h * 2 * hd;
            float *q = r->q + (size_t)i * qd + (size_t)h * hd;
            kite_head_rmsnorm(q, src, L->q_norm, hd, eps);
            memcpy(r->gate_a + (size_t)i * qd + (size_t)h * hd, src + hd, sizeof(float) * (size_t)hd);
            kite_head_rope(q, r->n_rot, r->tw->rope_inv_freq, pos[i], r->neox);
        }
        for (int32_t kh = 0; kh < r->n_kv_heads; kh++) {
            float *kr = r->kk + (size_t)i * kvd + (size_t)kh * hd;
            kite_head_rmsnorm(kr, kr, L->k_norm, hd, eps);
            kite_head_rope(kr, r->n_rot, r->tw->rope_inv_freq, pos[i], r->neox);
            size_t at = ((size_t)kh * r->cap_rows + (size_t)crow[i]) * hd;
            memcpy(r->k + at, kr, sizeof(float) * hd);
            memcpy(r->v + at, r->vv + (size_t)i * kvd + (size_t)kh * hd, sizeof(float) * hd);
        }
    }
    const int32_t group = r->n_heads / r->n_kv_heads;
    const float scale = r->tw->hp.attn_scale > 0.0f ? r->tw->hp.attn_scale : 1.0f / sqrtf((float)hd);
    for (int32_t i = 0; i < n; i++)
        for (int32_t kh = 0; kh < r->n_kv_heads; kh++) {
            kite_attn_query a = {
                .q = r->q + (size_t)i * qd + (size_t)kh * group * hd, .n_q = group, .head_dim = hd,
                .k = r->k + (size_t)kh * r->cap_rows * hd, .v = r->v + (size_t)kh * r->cap_rows * hd,
                .kv_type = KITE_TYPE_F32, .row_bytes = sizeof(float) * (size_t)hd,
                .rows = r->vis + (size_t)i * r->cap_rows, .n_visible = n_vis[i], .scale = scale,
                .out = r->att + (size_t)i * qd + (size_t)kh * group * hd,
            };
            ks->attend(&a);
        }
    for (int64_t i = 0; i < (int64_t)n * qd; i++) r->att[i] *= 1.0f / (1.0f + expf(-r->gate_a[i]));
    mm(r, pool, &L->wo, r->att, n, r->xn);
    for (int32_t i = 0; i < n; i++) { /* residual, then post_attention_norm before the FFN */
        float *x = r->x + (size_t)i * D;
        const float *o = r->xn + (size_t)i * D;
        for (int32_t j = 0; j < D; j++) x[j] += o[j];
        kite_head_rmsnorm(r->xn + (size_t)i * D, x, L->ffn_norm, D, eps);
    }
    mm(r, pool, &L->w_gate, r->xn, n, r->gate);
    mm(r, pool, &L->w_up, r->xn, n, r->up);
    for (int32_t i = 0; i < n; i++) ks->silu_mul(r->gate + (size_t)i * F, r->up + (size_t)i * F, F);
    mm(r, pool, &L->w_down, r->gate, n, r->xn);
    for (int32_t i = 0; i < n; i++) {
        float *x = r->x + (size_t)i * D;
        const float *f = r->xn + (size_t)i * D;
        for (int32_t j = 0; j < D; j++) x[j] += f[j];
        kite_head_rmsnorm(r->hout + (size_t)i * D, x, m->head_norm, D, eps);
    }
    if (h_out) memcpy(h_out, r->hout, sizeof(float) * (size_t)n * D);
    if (logits && first_logit < n) mm(r, pool, r->output, r->hout + (size_t)first_logit * D, n - first_logit, logits);
}

/* Committed rows of positions pos0 .. pos0 + n - 1 (n <= MTP_MAX_ROWS), causal from r->lo. */
static void run_committed(kite_mtp_run *r, kite_pool *pool, const int32_t *token, const float *hidden, int32_t n, int32_t pos0,
                          int32_t first_logit, float *logits, float *h_out) {
    int32_t pos[MTP_MAX_ROWS], n_vis[MTP_MAX_ROWS];
    for (int32_t i = 0; i < n; i++) {
        pos[i] = pos0 + i;
        n_vis[i] = pos0 + i - r->lo + 1;
        int32_t *v = r->vis + (size_t)i * r->cap_rows;
        for (int32_t p = r->lo; p <= pos0 + i; p++) v[p - r->lo] = p;
        r->seen[pos0 + i] = token[i];
    }
    run_batch(r, pool, n, token, hidden, pos, pos, n_vis, first_logit, logits, h_out);
}

void kite_mtp_run_rows(kite_mtp_run *r, kite_pool *pool, const int32_t *token, const float *hidden, int32_t n, int32_t pos0,
                       float *logits, float *h_out) {
    if (n <= 0 || n > MTP_MAX_ROWS || pos0 < 0 || pos0 + n > r->n_ctx) return;
    if (pos0 == 0 || pos0 < r->lo) r->lo = pos0;
    run_committed(r, pool, token, hidden, n, pos0, 0, logits, h_out);
    r->D = pos0 + n;
}

double kite_mtp_one_step_ms(kite_mtp_run *r, kite_pool *pool) {
    float *logits = malloc(sizeof(float) * (size_t)r->V), *h = calloc((size_t)r->dim, sizeof(float));
    double best = INFINITY;
    if (logits && h) {
        int32_t token = 0;
        r->lo = 0;
        for (int i = 0; i < 3; i++) {
            double t0 = kite_now_ms();
            run_committed(r, pool, &token, h, 1, 0, 0, logits, NULL);
            double t = kite_now_ms() - t0;
            if (t < best) best = t;
        }
        r->D = 0; /* row 0 was overwritten: the next draft rebuilds the cache */
    }
    free(logits); free(h);
    return best;
}

/* kite_spec_grow_tree's callback: runs tree nodes [first, end), each in the row of position P + depth,
 * on the state of its parent's row, attending to the committed rows and its ancestors. */
static int run_nodes(void *ctx, kite_draft_tree *t, int32_t first, int32_t end, float *logits, kite_error *e) {
    kite_mtp_run *r = ctx;
    const int32_t D = r->dim;
    float *hin = malloc(sizeof(float) * (size_t)MTP_MAX_ROWS * D);
    if (!hin) return kite_fail(e, KITE_ERR_NOMEM, "out of memory");
    for (int32_t at = first; at < end; at += MTP_MAX_ROWS) {
        int32_t n = end - at < MTP_MAX_ROWS ? end - at : MTP_MAX_ROWS;
        int32_t pos[MTP_MAX_ROWS], crow[MTP_MAX_ROWS], n_vis[MTP_MAX_ROWS];
        for (int32_t i = 0; i < n; i++) {
            int32_t j = at + i;
            memcpy(hin + (size_t)i * D, r->node_h + (size_t)t->parent[j] * D, sizeof(float) * (size_t)D);
            pos[i] = r->P + t->depth[j];
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
        run_batch(r, r->pool, n, t->token + at, hin, pos, crow, n_vis, 0, logits + (size_t)(at - first) * r->V,
                  r->node_h + (size_t)at * D);
    }
    free(hin);
    return KITE_OK;
}

int kite_mtp_draft(kite_spec_state *st, kite_session *s, int32_t root, int32_t budget, const kite_gen_params *gp,
                   kite_draft_tree *t, kite_error *e) {
    kite_mtp_run *r = st->mtp;
    kite_features *f = &s->features;
    const int32_t P = s->n_past, Dm = r->dim, W = f->width;
    if (P < 1 || P >= r->n_ctx || W != Dm) return KITE_OK; /* nothing to draft from, or no room */
    /* Rows still valid: those whose context up to the token they took is the session's now (the
     * EAGLE-3 head's rule); the root's own row (position P) is always run again. */
    int32_t D = r->D < P ? r->D : P;
    for (int32_t q = 0; q < D; q++)
        if (r->seen[q] != s->history[q]) { D = q; break; }
    if (f->n == 0 || f->pos0 + f->n < P) return KITE_OK;
    /* the first row to run, D, reads the feature row D - 1 (row 0 reads none): rows whose features are
     * gone restart the cache just past the oldest one kept */
    if ((D > 0 ? D - 1 : 0) < f->pos0 || D < r->lo) {
        r->lo = f->pos0 == 0 ? 0 : f->pos0 + 1;
        D = r->lo;
        memcpy(r->seen, s->history, sizeof(int32_t) * (size_t)r->lo);
    }
    if (r->lo > P) return KITE_OK;
    r->D = D;
    const float *output_norm = s->model->weights.output_norm;
    const float eps = s->model->weights.hp.rms_eps;
    float *h = malloc(sizeof(float) * (size_t)MTP_MAX_ROWS * Dm), *hout = malloc(sizeof(float) * (size_t)MTP_MAX_ROWS * Dm);
    if (!h || !hout) {
        free(h), free(hout);
        return kite_fail(e, KITE_ERR_NOMEM, "out of memory");
    }
    int32_t tok[MTP_MAX_ROWS];
    for (int32_t p = D; p <= P; p += MTP_MAX_ROWS) {
        int32_t n = P + 1 - p < MTP_MAX_ROWS ? P + 1 - p : MTP_MAX_ROWS;
        for (int32_t i = 0; i < n; i++) {
            tok[i] = p + i < P ? s->history[p + i] : root;
            /* the captured last-layer output of the position before, normed as the trunk's logits are
             * (llama.cpp's h_nextn); position 0 has none: zeros, as llama.cpp's first pending row */
            if (p + i == 0) memset(h, 0, sizeof(float) * (size_t)Dm);
            else kite_head_rmsnorm(h + (size_t)i * Dm, f->rows + (size_t)(p + i - 1 - f->pos0) * W, output_norm, Dm, eps);
        }
        bool last = p + n == P + 1;
        run_committed(r, s->pool, tok, h, n, p, last ? n - 1 : n, last ? st->draft_logits : NULL, hout);
        if (last) memcpy(r->node_h, hout + (size_t)(n - 1) * Dm, sizeof(float) * (size_t)Dm);
        r->D = p + n;
    }
    free(h), free(hout);
    if (r->D - MTP_FEATURE_SLACK > f->pos0) kite_features_drop_before(f, r->D - MTP_FEATURE_SLACK);
    t->fed[0] = true;
    r->P = P, r->pool = s->pool;
    return kite_spec_grow_tree(st, s, budget, gp, t, r->V, run_nodes, r, e);
}
