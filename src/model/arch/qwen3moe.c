#include "model/arch/qwen3moe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant/types.h"

static int expert_u32(const kite_gguf *g, const char *path, const char *key, uint32_t lo, uint32_t hi, bool required,
                      int32_t *out, kite_error *e) {
    uint32_t v;
    if (!kite_gguf_get_u32(g, key, &v)) {
        if (kite_gguf_has(g, key))
            return kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: %s is not one integer (a per-layer array is not supported)", path, key);
        if (required) return kite_fail(e, KITE_ERR_FORMAT, "%s: missing key %s (a qwen3moe file needs it)", path, key);
        return KITE_OK;
    }
    if (v < lo || v > hi) return kite_fail(e, KITE_ERR_FORMAT, "%s: %s = %u is out of range (%u..%u)", path, key, v, lo, hi);
    *out = (int32_t)v;
    return KITE_OK;
}

int kite_qwen3moe_gguf_hparams(const kite_gguf *g, const char *path, kite_hparams *hp, kite_error *e) {
    int st;
    if ((st = expert_u32(g, path, "qwen3moe.expert_count", 1, KITE_MOE_MAX_EXPERTS, true, &hp->n_experts, e))) return st;
    uint32_t max_used = hp->n_experts < KITE_MOE_MAX_USED ? (uint32_t)hp->n_experts : KITE_MOE_MAX_USED;
    if ((st = expert_u32(g, path, "qwen3moe.expert_used_count", 1, max_used, true, &hp->n_experts_used, e))) return st;
    hp->expert_ffn_dim = hp->ffn_dim / hp->n_experts_used;
    if ((st = expert_u32(g, path, "qwen3moe.expert_feed_forward_length", 1, 1u << 20, false, &hp->expert_ffn_dim, e))) return st;
    if (hp->expert_ffn_dim < 1)
        return kite_fail(e, KITE_ERR_FORMAT, "%s: no qwen3moe.expert_feed_forward_length and feed_forward_length %d < %d experts used",
                         path, hp->ffn_dim, hp->n_experts_used);
    hp->expert_weights_norm = true;
    return KITE_OK;
}

/* Parses "E.rest" (E decimal, no leading zeros) into *index and *rest. */
static bool parse_index(const char *s, int64_t *index, const char **rest) {
    int64_t v = 0;
    const char *c = s;
    if (*c < '0' || *c > '9' || (*c == '0' && c[1] != '.')) return false;
    for (; *c >= '0' && *c <= '9'; c++)
        if ((v = v * 10 + (*c - '0')) > 1000000) return false;
    if (*c != '.') return false;
    *index = v;
    *rest = c + 1;
    return true;
}

int kite_qwen3moe_hf_layer_name(const char *hf_suffix, char *out, size_t out_size) {
    int n = -1;
    if (strcmp(hf_suffix, "mlp.gate.weight") == 0) {
        n = snprintf(out, out_size, "ffn_gate_inp.weight");
    } else if (!strcmp(hf_suffix, "mlp.experts.gate_up_proj") || !strcmp(hf_suffix, "mlp.experts.gate_up_proj.weight")) {
        n = snprintf(out, out_size, "ffn_gate_up_exps.weight"); /* transformers 5's fused experts, [E, 2 x ffn, dim] */
    } else if (!strcmp(hf_suffix, "mlp.experts.down_proj") || !strcmp(hf_suffix, "mlp.experts.down_proj.weight")) {
        n = snprintf(out, out_size, "ffn_down_exps.weight"); /* [E, dim, ffn]: llama.cpp's 3-D layout */
    } else if (strncmp(hf_suffix, "mlp.experts.", 12) == 0) {
        static const struct { const char *hf, *canon; } kinds[] = {
            {"gate_proj.weight", "ffn_gate_exps"}, {"up_proj.weight", "ffn_up_exps"}, {"down_proj.weight", "ffn_down_exps"}};
        int64_t x;
        const char *rest;
        if (!parse_index(hf_suffix + 12, &x, &rest)) return -2; /* fused mlp.experts.gate_up_proj and the like */
        for (size_t k = 0; k < 3; k++)
            if (strcmp(rest, kinds[k].hf) == 0) n = snprintf(out, out_size, "%s.%lld.weight", kinds[k].canon, (long long)x);
        if (n < 0) return -2; /* biases */
    } else if (strncmp(hf_suffix, "mlp.shared_expert", 17) == 0 || strncmp(hf_suffix, "mlp.gate.", 9) == 0) {
        return -2;
    } else {
        return 0;
    }
    return n > 0 && (size_t)n < out_size ? 1 : -2;
}

static const char *const KINDS[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};

/* Layer l's fused gate and up experts (an HF folder of transformers 5), or NULL. */
static const kite_tensor *fused_gate_up(const kite_source *src, int32_t l) {
    char name[96];
    snprintf(name, sizeof name, "blk.%d.ffn_gate_up_exps.weight", l);
    return kite_source_find(src, name);
}

/* rows x cols of kind k's per-expert matrix. */
static void kind_shape(const kite_hparams *hp, int k, int64_t *rows, int64_t *cols) {
    *rows = k == 2 ? hp->dim : hp->expert_ffn_dim;
    *cols = k == 2 ? hp->expert_ffn_dim : hp->dim;
}

static int check_matrix_type(const kite_source *src, const kite_tensor *t, int64_t cols, kite_error *e) {
    const kite_type_traits *tr = kite_type_get(t->type);
    if (!tr || !tr->to_float || cols % tr->block_size != 0)
        return kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: tensor %s: type %u with rows of %lld is not supported", src->format, t->name,
                         t->type, (long long)cols);
    return KITE_OK;
}

int kite_qwen3moe_validate(const kite_source *src, kite_error *e) {
    const kite_hparams *hp = &src->hp;
    if (hp->n_experts < 1 || hp->n_experts > KITE_MOE_MAX_EXPERTS || hp->n_experts_used < 1 ||
        hp->n_experts_used > hp->n_experts || hp->n_experts_used > KITE_MOE_MAX_USED || hp->expert_ffn_dim < 1)
        return kite_fail(e, KITE_ERR_FORMAT, "%s: %d experts, %d used per token, expert FFN %d are inconsistent (1..%d experts, "
                         "1..%d used)", src->format, hp->n_experts, hp->n_experts_used, hp->expert_ffn_dim, KITE_MOE_MAX_EXPERTS,
                         KITE_MOE_MAX_USED);
    char name[96];
    for (int32_t l = 0; l < hp->n_layers; l++) {
        snprintf(name, sizeof name, "blk.%d.ffn_gate_inp.weight", l);
        const kite_tensor *r = kite_source_find(src, name);
        if (!r) return kite_fail(e, KITE_ERR_FORMAT, "%s: required tensor %s (the router) is missing", src->format, name);
        if (r->ne[0] != hp->dim || r->ne[1] != hp->n_experts || r->ne[2] != 1 || r->ne[3] != 1)
            return kite_fail(e, KITE_ERR_FORMAT, "%s: tensor %s has shape [%lld, %lld, %lld] but the router needs [%d, %d]",
                             src->format, name, (long long)r->ne[0], (long long)r->ne[1], (long long)r->ne[2], hp->dim,
                             hp->n_experts);
        int st = check_matrix_type(src, r, hp->dim, e);
        if (st) return st;
        for (int k = 0; k < 3; k++) {
            int64_t rows, cols;
            kind_shape(hp, k, &rows, &cols);
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, KINDS[k]);
            const kite_tensor *t = kite_source_find(src, name);
            if (!t && k < 2 && (t = fused_gate_up(src, l))) { /* [E][gate rows, then up rows][dim] */
                if (t->ne[0] != cols || t->ne[1] != 2 * rows || t->ne[2] != hp->n_experts || t->ne[3] != 1)
                    return kite_fail(e, KITE_ERR_FORMAT, "%s: tensor %s has shape [%lld, %lld, %lld] but the hyper-parameters "
                                     "need [%lld, %lld, %d]", src->format, t->name, (long long)t->ne[0], (long long)t->ne[1],
                                     (long long)t->ne[2], (long long)cols, (long long)(2 * rows), hp->n_experts);
                if ((st = check_matrix_type(src, t, cols, e))) return st;
                if (!t->data || t->n_bytes != kite_type_row_bytes(t->type, cols) * (uint64_t)(2 * rows) * (uint64_t)hp->n_experts)
                    return kite_fail(e, KITE_ERR_FORMAT, "%s: tensor %s holds %llu bytes, not %d experts' gate and up", src->format,
                                     t->name, (unsigned long long)t->n_bytes, hp->n_experts);
                continue;
            }
            if (t) { /* llama.cpp's 3-D form */
                if (t->ne[0] != cols || t->ne[1] != rows || t->ne[2] != hp->n_experts || t->ne[3] != 1)
                    return kite_fail(e, KITE_ERR_FORMAT, "%s: tensor %s has shape [%lld, %lld, %lld] but the hyper-parameters "
                                     "need [%lld, %lld, %d]", src->format, name, (long long)t->ne[0], (long long)t->ne[1],
                                     (long long)t->ne[2], (long long)cols, (long long)rows, hp->n_experts);
                if ((st = check_matrix_type(src, t, cols, e))) return st;
                size_t per_expert = kite_type_row_bytes(t->type, cols) * (size_t)rows;
                if (!t->data || t->n_bytes != per_expert * (uint64_t)hp->n_experts)
                    return kite_fail(e, KITE_ERR_FORMAT, "%s: tensor %s holds %llu bytes, not %d experts of %zu", src->format, name,
                                     (unsigned long long)t->n_bytes, hp->n_experts, per_expert);
                continue;
            }
            uint32_t type = 0;
            for (int32_t x = 0; x < hp->n_experts; x++) { /* one matrix per expert */
                snprintf(name, sizeof name, "blk.%d.%s.%d.weight", l, KINDS[k], x);
                const kite_tensor *m = kite_source_find(src, name);
                if (!m)
                    return kite_fail(e, KITE_ERR_FORMAT, "%s: layer %d has neither blk.%d.%s.weight nor expert %d's %s", src->format,
                                     l, l, KINDS[k], x, name);
                if (m->ne[0] != cols || m->ne[1] != rows || m->ne[2] != 1 || m->ne[3] != 1)
                    return kite_fail(e, KITE_ERR_FORMAT, "%s: tensor %s has shape [%lld, %lld] but the hyper-parameters need "
                                     "[%lld, %lld]", src->format, name, (long long)m->ne[0], (long long)m->ne[1], (long long)cols,
                                     (long long)rows);
                if ((st = check_matrix_type(src, m, cols, e))) return st;
                if (x > 0 && m->type != type)
                    return kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: the experts of blk.%d.%s differ in type (kite runs one type per "
                                     "layer and matrix)", src->format, l, KINDS[k]);
                type = m->type;
            }
        }
    }
    /* No expert past the count (its weights would be silently unused). */
    for (int32_t i = 0; i < src->n_tensors; i++) {
        const char *s = src->tensors[i].name;
        int l = 0, x = 0, used = 0;
        char kind[32];
        if (sscanf(s, "blk.%d.%31[a-z_].%d.weight%n", &l, kind, &x, &used) == 3 && used > 0 && s[used] == 0 &&
            strstr(kind, "_exps") && (x < 0 || x >= hp->n_experts))
            return kite_fail(e, KITE_ERR_FORMAT, "%s: tensor %s names expert %d of a model with %d", src->format, s, x, hp->n_experts);
    }
    return KITE_OK;
}

int kite_qwen3moe_bind_layer(const kite_source *src, int32_t l, kite_moe_layer *moe, kite_pack_add_fn pack, void *ctx,
                             kite_error *e) {
    const kite_hparams *hp = &src->hp;
    const int32_t E = hp->n_experts;
    memset(moe, 0, sizeof *moe);
    moe->n_experts = E;
    moe->gate = calloc((size_t)E, sizeof *moe->gate);
    moe->up = calloc((size_t)E, sizeof *moe->up);
    moe->down = calloc((size_t)E, sizeof *moe->down);
    if (!moe->gate || !moe->up || !moe->down) return kite_fail(e, KITE_ERR_NOMEM, "out of memory");
    char name[96];
    snprintf(name, sizeof name, "blk.%d.ffn_gate_inp.weight", l);
    int st = pack(ctx, kite_source_find(src, name), &moe->router, e);
    if (st) return st;
    kite_packed_matrix *outs[3] = {moe->gate, moe->up, moe->down};
    for (int k = 0; k < 3; k++) {
        int64_t rows, cols;
        kind_shape(hp, k, &rows, &cols);
        snprintf(name, sizeof name, "blk.%d.%s.weight", l, KINDS[k]);
        const kite_tensor *t = kite_source_find(src, name);
        /* fused: expert x holds its gate rows then its up rows, so kind k's slice is half of the expert's */
        const bool fused = !t && k < 2 && (t = fused_gate_up(src, l)) != NULL;
        if (t && !moe->views && !(moe->views = calloc(3 * (size_t)E, sizeof *moe->views)))
            return kite_fail(e, KITE_ERR_NOMEM, "out of memory");
        for (int32_t x = 0; x < E; x++) {
            const kite_tensor *m;
            if (t) { /* expert x's slice of the 3-D tensor: a 2-D view of its bytes */
                kite_tensor *v = &moe->views[k * E + x];
                *v = *t;
                snprintf(v->name, sizeof v->name, "blk.%d.%s.%d.weight", l, KINDS[k], x);
                v->n_dims = 2;
                v->ne[1] = rows;
                v->ne[2] = 1;
                uint64_t per_expert = t->n_bytes / (uint64_t)E;
                v->n_bytes = fused ? per_expert / 2 : per_expert;
                v->data = (const char *)t->data + (size_t)x * per_expert + (fused && k == 1 ? v->n_bytes : 0);
                m = v;
            } else {
                snprintf(name, sizeof name, "blk.%d.%s.%d.weight", l, KINDS[k], x);
                m = kite_source_find(src, name);
            }
            if ((st = pack(ctx, m, &outs[k][x], e))) return st;
        }
    }
    return KITE_OK;
}
