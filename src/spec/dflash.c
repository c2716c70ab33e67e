/* DFlash block drafters: loading, the injection of target features, the block pass, drafting
 * (dflash.h). The file-reading and row pieces are the learned drafters' shared ones (spec/head.h). */
#include "spec/dflash.h"

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

/* Feature rows injected in one batch (the block itself is at most KITE_DFLASH_MAX_BLOCK rows). */
enum { DFLASH_INJECT_ROWS = 64, DFLASH_MAX_ROWS = 64 };
/* Feature rows kept below the cache front, as EAGLE-3's (a short truncation re-injects only the rows
 * past it; a deeper one restarts the cache where the rows start: drafts get worse, never the output). */
enum { DFLASH_FEATURE_SLACK = 256 };

/* DFlash-2 lets each block row mix the rows before it in the block (llama.cpp's build_dflash2_conv): a
 * causal depthwise convolution of conv_kernel taps whose weights are a learned base plus per-row
 * coefficients (one per group of conv_group channels) projected from the row itself. "in" (side 0)
 * is applied to the block norm's output, "out" (side 1) to the sub-layer's, both with the coefficients
 * projected from the norm's output. */
typedef struct dflash_conv {
    kite_packed_matrix proj; /* [2 * kernel * groups rows, dim]: coefficients [side][tap][group] */
    float *base;             /* [2][kernel][dim] */
} dflash_conv;

typedef struct dflash_layer {
    kite_packed_matrix wq, wk, wv, wo, gate, up, down;
    float *attn_norm, *ffn_norm, *q_norm, *k_norm; /* [dim], [dim], [head_dim], [head_dim] */
    dflash_conv attn_conv, ffn_conv;               /* DFlash-2 only */
} dflash_layer;

enum { KITE_DFLASH_MAX_TOP_K = 32 };

struct kite_dflash {
    kite_mapped_file file;
    kite_gguf *g;
    const kite_kernel_set *ks;
    int32_t dim, n_layers, n_heads, n_kv_heads, head_dim, ffn_dim;
    int32_t n_target_layers;
    int32_t target_layers[KITE_DFLASH_MAX_TARGET_LAYERS]; /* inputs of these target layers, increasing */
    int32_t block_size;    /* rows of a block: the root and block_size - 1 masks */
    int32_t mask_token;    /* tokenizer.ggml.mask_token_id */
    bool causal;           /* dflash.attention.causal: block rows attend only up to themselves */
    float rms_eps, rope_theta;
    bool has_embd, has_output;
    kite_tensor tok_embd;  /* [n_vocab rows, dim] when has_embd (a view of the file) */
    kite_packed_matrix fc; /* [dim rows, n_target_layers * dim] */
    kite_packed_matrix output;
    float *enc_norm, *output_norm, *inv_freq;
    dflash_layer *layers;  /* [n_layers] */
    kite_weight_arena arena;
    /* DFlash-2 (a selector head): top_k > 0. Row i's candidates are its logits' top_k tokens; a
     * candidate c after predecessor p scores logit(c) + succ[c] . (pred[p] * (sel_hidden h_i)). */
    int32_t conv_kernel, conv_group;       /* dflash.conv_kernel_size, dflash.conv_group_size */
    int32_t sel_rank, sel_top_k;           /* dflash.selector_rank, dflash.selector_top_k */
    float logit_scale, softcap;            /* dflash.logit_scale (0: none), dflash.final_logit_softcapping */
    kite_tensor sel_prev, sel_next;        /* [n_vocab rows, rank] (views of the file) */
    kite_packed_matrix sel_hidden;         /* [rank rows, dim] */
    /* DSpark (a Markov head, markov_w1.weight present): the children of a node with token t take their
     * row's logits plus markov_w2 (markov_w1[t]) * w2_scale; from_anchor (dflash.sample_from_anchor,
     * default true): the root's children take row 0 (the root's own row), else row 1 as DFlash. The
     * optional confidence head: sigmoid(conf_w . [h_row; markov_w1[t]] + conf_b). */
    int32_t markov_rank;                   /* 0: no Markov head */
    bool from_anchor, has_conf;
    kite_tensor markov_w1;                 /* [n_vocab rows, markov_rank] (a view of the file) */
    kite_packed_matrix markov_w2;          /* [n_vocab rows, markov_rank] */
    float markov_w2_scale, conf_b;
    float *conf_w;                         /* [dim + markov_rank] */
};

/* ---- loading ----------------------------------------------------------------------------------------- */

bool kite_dflash_file_is_drafter(const char *path) { return kite_head_file_has_arch(path, "dflash"); }

static bool get_u32(const kite_gguf *g, const char *suffix, uint32_t *v) { return kite_head_get_u32(g, "dflash", suffix, v); }

static int open_drafter(kite_dflash *h, const char *path, const void *data, size_t size, kite_error *e);

int kite_dflash_open(kite_dflash **out, const char *path, kite_error *e) {
    *out = NULL;
    kite_dflash *h = calloc(1, sizeof *h);
    if (!h) return kite_fail(e, KITE_ERR_NOMEM, "out of memory");
    int st = kite_map_file(&h->file, path, e);
    if (st) { free(h); return st; }
    if ((st = open_drafter(h, path, h->file.data, h->file.size, e))) return st; /* h freed */
    *out = h;
    return KITE_OK;
}

int kite_dflash_open_bytes(kite_dflash **out, const void *data, size_t size, kite_error *e) {
    *out = NULL;
    kite_dflash *h = calloc(1, sizeof *h);
    if (!h) return kite_fail(e, KITE_ERR_NOMEM, "out of memory");
    int st = open_drafter(h, "(memory)", data, size, e);
    if (st) return st;
    *out = h;
    return KITE_OK;
}

/* The variants llama.cpp loads under "dflash" that kite does not run: what names each. */
static const char *unsupported_variant(const kite_gguf *g) {
    uint32_t u = 0;
    if (get_u32(g, "hyper_connection.count", &u) && u > 0)
        return "a DeepSeek-V4 DSpark drafter (hyper-connections, MLA, experts) is not supported yet";
    if (kite_gguf_find_tensor(g, "markov_w1.weight") && kite_gguf_find_tensor(g, "selector_hidden.weight"))
        return "a drafter with both a DSpark Markov head and a DFlash-2 selector is not supported";
    if (kite_gguf_find_tensor(g, "d2t")) return "a reduced draft vocabulary (d2t) is not supported yet";
    if ((get_u32(g, "attention.sliding_window", &u) && u > 0)) return "sliding-window attention is not supported yet";
    if (kite_gguf_find_tensor(g, "blk.0.attn_sinks.weight")) return "attention sinks are not supported yet";
    kite_gguf_vtype et;
    uint64_t n = 0;
    if (kite_gguf_get_arr(g, "dflash.rope.dimension_sections", &et, &n))
        for (uint64_t i = 0; i < n; i++) {
            int64_t v = 0;
            if (kite_gguf_arr_i64(g, "dflash.rope.dimension_sections", i, &v) && v != 0)
                return "an M-RoPE drafter (rope sections) is not supported yet";
        }
    kite_gguf_str s;
    if (kite_gguf_get_str(g, "dflash.rope.scaling.type", &s) && !(s.len == 4 && !memcmp(s.ptr, "none", 4)))
        return "RoPE scaling is not supported yet";
    if (kite_gguf_find_tensor(g, "rope_freqs.weight")) return "RoPE scaling is not supported yet";
    return NULL;
}

/* The DFlash-2 convolution base `name` [dim, kernel, 2] as floats [2][kernel][dim]. */
static int load_conv_base(const kite_head_file *f, const char *name, int64_t dim, int32_t kernel, float **out, kite_error *e) {
    const kite_gguf_tensor *t = kite_gguf_find_tensor(f->g, name);
    if (!t) return kite_fail(e, KITE_ERR_FORMAT, "%s: tensor %s is missing", f->what, name);
    const kite_type_traits *tr = kite_type_get(t->type);
    if (!tr || !tr->to_float) return kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: tensor %s has a type kite cannot read", f->what, name);
    if (t->ne[0] != dim || t->ne[1] != kernel || t->ne[2] != 2 || t->ne[3] != 1 || dim % tr->block_size)
        return kite_fail(e, KITE_ERR_FORMAT, "%s: tensor %s is [%lld, %lld, %lld], expected [%lld, %d, 2]", f->what, name,
                         (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)dim, kernel);
    size_t n = (size_t)dim * (size_t)kernel * 2;
    *out = malloc(sizeof(float) * n);
    if (!*out) return kite_fail(e, KITE_ERR_NOMEM, "%s: out of memory", f->what);
    size_t row_bytes = kite_type_row_bytes(t->type, dim);
    for (int32_t r = 0; r < 2 * kernel; r++)
        tr->to_float((const unsigned char *)t->data + (size_t)r * row_bytes, *out + (size_t)r * (size_t)dim, dim);
    return KITE_OK;
}

/* Parses and packs the drafter from data (which must outlive it); frees h on failure. */
static int open_drafter(kite_dflash *h, const char *path, const void *data, size_t size, kite_error *e) {
    h->ks = kite_kernels();
    int st;
    if ((st = kite_gguf_open(&h->g, data, size, e))) {
        char inner[sizeof e->msg];
        snprintf(inner, sizeof inner, "%s", e->msg);
        kite_dflash_free(h);
        return kite_fail(e, st, "DFlash drafter %s: %s", path, inner);
    }
    const kite_gguf *g = h->g;
    const char *variant = unsupported_variant(g);
    if (variant) {
        kite_dflash_free(h);
        return kite_fail(e, KITE_ERR_UNSUPPORTED, "DFlash drafter %s: %s", path, variant);
    }
    uint32_t dim = 0, n_layers = 0, n_heads = 0, n_kv = 0, ffn = 0, head_dim = 0, block = 16;
    if (!get_u32(g, "embedding_length", &dim) || !get_u32(g, "block_count", &n_layers) ||
        !get_u32(g, "attention.head_count", &n_heads) || !get_u32(g, "feed_forward_length", &ffn)) {
        kite_dflash_free(h);
        return kite_fail(e, KITE_ERR_FORMAT,
                         "DFlash drafter %s: missing one of dflash.embedding_length, block_count, attention.head_count, "
                         "feed_forward_length",
                         path);
    }
    if (!get_u32(g, "attention.head_count_kv", &n_kv)) n_kv = n_heads;
    (void)get_u32(g, "block_size", &block);
    if (n_layers == 0 || n_layers > 64 || dim == 0 || dim > 65536 || n_heads == 0 || n_heads > 1024 || n_kv == 0 ||
        n_heads % n_kv != 0 || ffn == 0 || ffn > (1u << 20) || block < 2 || block > KITE_DFLASH_MAX_BLOCK) {
        kite_dflash_free(h);
        return kite_fail(e, KITE_ERR_FORMAT,
                         "DFlash drafter %s: bad shape (%u layers, dim %u, %u heads, %u KV heads, FFN %u, block size %u (2..%d))",
                         path, n_layers, dim, n_heads, n_kv, ffn, block, KITE_DFLASH_MAX_BLOCK);
    }
    if (!get_u32(g, "attention.key_length", &head_dim)) head_dim = dim / n_heads;
    uint32_t v_len = head_dim;
    (void)get_u32(g, "attention.value_length", &v_len);
    if (head_dim == 0 || head_dim % 2 || head_dim > KITE_ATTN_MAX_HEAD_DIM || v_len != head_dim || n_heads / n_kv > KITE_ATTN_MAX_Q) {
        kite_dflash_free(h);
        return kite_fail(e, KITE_ERR_UNSUPPORTED,
                         "DFlash drafter %s: head size %u (values %u) with %u query heads per KV head is not supported", path,
                         head_dim, v_len, n_heads / n_kv);
    }
    h->dim = (int32_t)dim, h->n_layers = (int32_t)n_layers, h->n_heads = (int32_t)n_heads, h->n_kv_heads = (int32_t)n_kv;
    h->head_dim = (int32_t)head_dim, h->ffn_dim = (int32_t)ffn, h->block_size = (int32_t)block;
    kite_gguf_vtype et;
    uint64_t n_ids = 0;
    if (!kite_gguf_get_arr(g, "dflash.target_layers", &et, &n_ids) || n_ids == 0 || n_ids > KITE_DFLASH_MAX_TARGET_LAYERS) {
        kite_dflash_free(h);
        return kite_fail(e, KITE_ERR_FORMAT, "DFlash drafter %s: dflash.target_layers must list 1 to %d target layers", path,
                         KITE_DFLASH_MAX_TARGET_LAYERS);
    }
    h->n_target_layers = (int32_t)n_ids;
    for (int32_t k = 0; k < h->n_target_layers; k++) {
        int64_t id = -1;
        if (!kite_gguf_arr_i64(g, "dflash.target_layers", (uint64_t)k, &id) || id < 0 || id > 65536 ||
            (k > 0 && id <= h->target_layers[k - 1])) {
            kite_dflash_free(h);
            return kite_fail(e, KITE_ERR_FORMAT, "DFlash drafter %s: dflash.target_layers[%d] is not a layer id above the one before",
                             path, k);
        }
        h->target_layers[k] = (int32_t)id;
    }
    int64_t mask = -1;
    if (!kite_gguf_get_i64(g, "tokenizer.ggml.mask_token_id", &mask) || mask < 0 || mask > (1 << 30)) {
        kite_dflash_free(h);
        return kite_fail(e, KITE_ERR_FORMAT, "DFlash drafter %s: no mask token (tokenizer.ggml.mask_token_id)", path);
    }
    h->mask_token = (int32_t)mask;
    h->rms_eps = 1e-6f;
    (void)kite_gguf_get_f32(g, "dflash.attention.layer_norm_rms_epsilon", &h->rms_eps);
    h->rope_theta = 10000.0f;
    (void)kite_gguf_get_f32(g, "dflash.rope.freq_base", &h->rope_theta);
    (void)kite_gguf_get_bool(g, "dflash.attention.causal", &h->causal);
    uint32_t rope_dims = head_dim;
    if (get_u32(g, "rope.dimension_count", &rope_dims) && rope_dims != head_dim) {
        kite_dflash_free(h);
        return kite_fail(e, KITE_ERR_UNSUPPORTED, "DFlash drafter %s: partial RoPE (%u of %u dimensions) is not supported yet", path,
                         rope_dims, head_dim);
    }
    /* DFlash-2: any of its keys or tensors makes the file one, and then all are required (llama.cpp
     * refuses the file with "DFlash2 model is missing conv/selector metadata" otherwise). */
    {
        uint32_t kernel = 0, group = 0, rank = 0, top_k = 0;
        bool has_kernel = get_u32(g, "conv_kernel_size", &kernel), has_group = get_u32(g, "conv_group_size", &group);
        bool has_rank = get_u32(g, "selector_rank", &rank), has_top_k = get_u32(g, "selector_top_k", &top_k);
        bool has_tensors = kite_gguf_find_tensor(g, "selector_hidden.weight") || kite_gguf_find_tensor(g, "selector_predecessor.weight") ||
                           kite_gguf_find_tensor(g, "selector_successor.weight") || kite_gguf_find_tensor(g, "blk.0.attn_conv_proj.weight");
        if (has_kernel || has_group || has_rank || has_top_k || has_tensors) {
            if (!has_kernel || !has_group || !has_rank || !has_top_k || kernel == 0 || group == 0 || rank == 0 || top_k == 0) {
                kite_dflash_free(h);
                return kite_fail(e, KITE_ERR_FORMAT,
                                 "DFlash drafter %s: a DFlash-2 drafter needs dflash.conv_kernel_size, conv_group_size, selector_rank and "
                                 "selector_top_k, all positive (kernel %u%s, group %u%s, rank %u%s, top-k %u%s)",
                                 path, kernel, has_kernel ? "" : " missing", group, has_group ? "" : " missing", rank,
                                 has_rank ? "" : " missing", top_k, has_top_k ? "" : " missing");
            }
            if (dim % group != 0 || kernel > KITE_DFLASH_MAX_BLOCK || rank > 65536 || top_k > KITE_DFLASH_MAX_TOP_K ||
                (uint64_t)dim < (uint64_t)top_k * (top_k + 1)) {
                kite_dflash_free(h);
                return kite_fail(e, KITE_ERR_FORMAT,
                                 "DFlash drafter %s: inconsistent DFlash-2 metadata: width %u must be a multiple of conv_group_size %u and at "
                                 "least selector_top_k (k + 1) = %llu (llama.cpp's lattice row), kernel %u at most %d, top-k %u at most %d",
                                 path, dim, group, (unsigned long long)top_k * (top_k + 1), kernel, KITE_DFLASH_MAX_BLOCK, top_k,
                                 KITE_DFLASH_MAX_TOP_K);
            }
            h->conv_kernel = (int32_t)kernel, h->conv_group = (int32_t)group, h->sel_rank = (int32_t)rank, h->sel_top_k = (int32_t)top_k;
            (void)kite_gguf_get_f32(g, "dflash.logit_scale", &h->logit_scale);
            (void)kite_gguf_get_f32(g, "dflash.final_logit_softcapping", &h->softcap);
            if (!isfinite(h->logit_scale) || !isfinite(h->softcap) || h->softcap < 0) {
                const double scale = h->logit_scale, softcap = h->softcap; /* read before h is freed */
                kite_dflash_free(h);
                return kite_fail(e, KITE_ERR_FORMAT, "DFlash drafter %s: bad logit scale %g or softcapping %g", path, scale, softcap);
            }
        }
    }
    h->layers = calloc(n_layers, sizeof *h->layers);
    if (!h->layers) { kite_dflash_free(h); return kite_fail(e, KITE_ERR_NOMEM, "out of memory"); }
    int64_t D = dim, qd = (int64_t)n_heads * head_dim, kvd = (int64_t)n_kv * head_dim, F = (int64_t)n_ids * dim;
    kite_head_file hf = {.what = "DFlash drafter", .g = g, .ks = h->ks, .arena = &h->arena};
    {
        enum { PER_LAYER = 7 };
        static const char *const kinds[PER_LAYER] = {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"};
        char (*names)[48] = malloc(sizeof *names * ((size_t)n_layers * PER_LAYER + 2));
        const char **list = malloc(sizeof *list * ((size_t)n_layers * PER_LAYER + 2));
        if (!names || !list) {
            free(names), free(list);
            kite_dflash_free(h);
            return kite_fail(e, KITE_ERR_NOMEM, "out of memory");
        }
        size_t n = 0;
        for (uint32_t l = 0; l < n_layers; l++)
            for (int k = 0; k < PER_LAYER; k++) snprintf(names[n], sizeof names[n], "blk.%u.%s.weight", l, kinds[k]), list[n] = names[n], n++;
        list[n++] = "fc.weight";
        list[n++] = "output.weight";
        st = kite_head_arena_init(&hf, list, n, &h->arena, e);
        free(names), free(list);
        if (st) goto fail;
    }
    const kite_gguf_tensor *t;
    if ((st = kite_head_load_embd_output(&hf, path, D, &h->tok_embd, &h->has_embd, &h->output, &h->has_output, e))) goto fail;
    {
        const kite_gguf_tensor *fc = kite_gguf_find_tensor(g, "fc.weight");
        if (fc && fc->ne[0] != F) {
            st = kite_fail(e, KITE_ERR_FORMAT,
                           "DFlash drafter %s: fc.weight reads %lld features, %d target layers of its width %u make %lld (llama.cpp "
                           "requires the target's width to be the drafter's)",
                           path, (long long)fc->ne[0], h->n_target_layers, dim, (long long)F);
            goto fail;
        }
    }
    if ((st = kite_head_load_matrix(&hf, "fc.weight", F, D, &h->fc, e))) goto fail;
    if ((st = kite_head_load_vector(&hf, "enc.output_norm.weight", D, &h->enc_norm, e))) goto fail;
    if ((st = kite_head_load_vector(&hf, "output_norm.weight", D, &h->output_norm, e))) goto fail;
    for (uint32_t l = 0; l < n_layers; l++) {
        dflash_layer *L = &h->layers[l];
        char name[64];
#define MAT(field, kind, cols, rows)                                                   \
        snprintf(name, sizeof name, "blk.%u.%s.weight", l, kind);                      \
        if ((st = kite_head_load_matrix(&hf, name, cols, rows, &L->field, e))) goto fail;
#define VEC(field, kind, n)                                                            \
        snprintf(name, sizeof name, "blk.%u.%s.weight", l, kind);                      \
        if ((st = kite_head_load_vector(&hf, name, n, &L->field, e))) goto fail;
        MAT(wq, "attn_q", D, qd)
        MAT(wk, "attn_k", D, kvd)
        MAT(wv, "attn_v", D, kvd)
        MAT(wo, "attn_output", qd, D)
        MAT(gate, "ffn_gate", D, ffn)
        MAT(up, "ffn_up", D, ffn)
        MAT(down, "ffn_down", ffn, D)
        VEC(attn_norm, "attn_norm", D)
        VEC(ffn_norm, "ffn_norm", D)
        VEC(q_norm, "attn_q_norm", head_dim)
        VEC(k_norm, "attn_k_norm", head_dim)
#undef MAT
#undef VEC
        if (h->sel_top_k > 0) {
            const int64_t projected = 2 * (int64_t)h->conv_kernel * (D / h->conv_group);
            dflash_conv *convs[2] = {&L->attn_conv, &L->ffn_conv};
            static const char *const which[2] = {"attn", "ffn"};
            for (int c = 0; c < 2; c++) {
                snprintf(name, sizeof name, "blk.%u.%s_conv_proj.weight", l, which[c]);
                if ((st = kite_head_load_matrix(&hf, name, D, projected, &convs[c]->proj, e))) goto fail;
                snprintf(name, sizeof name, "blk.%u.%s_conv_base", l, which[c]); /* no .weight: llama.cpp's name */
                if ((st = load_conv_base(&hf, name, D, h->conv_kernel, &convs[c]->base, e))) goto fail;
            }
        }
    }
    if (kite_gguf_find_tensor(g, "markov_w1.weight")) {
        const kite_gguf_tensor *w1 = kite_gguf_find_tensor(g, "markov_w1.weight");
        if (w1->ne[0] < 1 || w1->ne[0] > 65536) {
            st = kite_fail(e, KITE_ERR_FORMAT, "DFlash drafter %s: markov_w1.weight has a rank of %lld", path, (long long)w1->ne[0]);
            goto fail;
        }
        h->markov_rank = (int32_t)w1->ne[0];
        int64_t V = h->has_output ? h->output.rows : h->has_embd ? h->tok_embd.ne[1] : 0;
        if ((st = kite_head_find(&hf, "markov_w1.weight", h->markov_rank, V, true, &t, e))) goto fail;
        h->markov_w1 = kite_head_as_tensor(t);
        if ((st = kite_head_load_matrix(&hf, "markov_w2.weight", h->markov_rank, t->ne[1], &h->markov_w2, e))) goto fail;
        h->markov_w2_scale = 1.0f;
        if ((st = kite_head_find(&hf, "markov_w2.scale", 1, 1, false, &t, e))) goto fail;
        if (t) kite_type_get(t->type)->to_float(t->data, &h->markov_w2_scale, 1);
        h->from_anchor = true;
        (void)kite_gguf_get_bool(g, "dflash.sample_from_anchor", &h->from_anchor);
        const kite_gguf_tensor *cw = kite_gguf_find_tensor(g, "conf_proj.weight");
        if (cw) {
            if (cw->ne[0] != D + h->markov_rank || cw->ne[1] != 1 || cw->ne[2] != 1 || cw->ne[3] != 1 || !kite_type_get(cw->type) ||
                !kite_type_get(cw->type)->to_float || (D + h->markov_rank) % kite_type_get(cw->type)->block_size) {
                st = kite_fail(e, KITE_ERR_FORMAT, "DFlash drafter %s: conf_proj.weight is [%lld, %lld], expected [%lld, 1]", path,
                               (long long)cw->ne[0], (long long)cw->ne[1], (long long)(D + h->markov_rank));
                goto fail;
            }
            h->conf_w = malloc(sizeof(float) * (size_t)(D + h->markov_rank));
            if (!h->conf_w) { st = kite_fail(e, KITE_ERR_NOMEM, "out of memory"); goto fail; }
            kite_type_get(cw->type)->to_float(cw->data, h->conf_w, D + h->markov_rank);
            if ((st = kite_head_find(&hf, "conf_proj.bias", 1, 1, false, &t, e))) goto fail;
            if (t) kite_type_get(t->type)->to_float(t->data, &h->conf_b, 1);
            h->has_conf = true;
        }
    }
    if (h->sel_top_k > 0) {
        int64_t V = h->has_output ? h->output.rows : h->has_embd ? h->tok_embd.ne[1] : 0;
        if ((st = kite_head_find(&hf, "selector_predecessor.weight", h->sel_rank, V, true, &t, e))) goto fail;
        h->sel_prev = kite_head_as_tensor(t);
        if ((st = kite_head_find(&hf, "selector_successor.weight", h->sel_rank, t->ne[1], true, &t, e))) goto fail;
        h->sel_next = kite_head_as_tensor(t);
        if ((st = kite_head_load_matrix(&hf, "selector_hidden.weight", D, h->sel_rank, &h->sel_hidden, e))) goto fail;
        if (h->sel_prev.ne[1] < h->sel_top_k || h->mask_token >= h->sel_prev.ne[1]) {
            st = kite_fail(e, KITE_ERR_FORMAT, "DFlash drafter %s: the selector's codebooks have %lld tokens (top-k %d, mask token %d)", path,
                           (long long)h->sel_prev.ne[1], h->sel_top_k, h->mask_token);
            goto fail;
        }
    }
    if ((st = kite_head_inv_freq(h->rope_theta, head_dim, &h->inv_freq, e))) goto fail;
    return KITE_OK;
fail:;
    char inner[sizeof e->msg];
    snprintf(inner, sizeof inner, "%s", e->msg);
    kite_dflash_free(h);
    return kite_fail(e, st, "%s", inner);
}

void kite_dflash_free(kite_dflash *h) {
    if (!h) return;
    if (h->layers)
        for (int32_t l = 0; l < h->n_layers; l++) {
            dflash_layer *L = &h->layers[l];
            kite_packed_matrix *m[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->gate, &L->up, &L->down};
            for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) kite_packed_matrix_free(m[i]);
            free(L->attn_norm); free(L->ffn_norm); free(L->q_norm); free(L->k_norm);
            kite_packed_matrix_free(&L->attn_conv.proj), kite_packed_matrix_free(&L->ffn_conv.proj);
            free(L->attn_conv.base); free(L->ffn_conv.base);
        }
    free(h->layers);
    kite_packed_matrix_free(&h->fc);
    kite_packed_matrix_free(&h->output);
    kite_packed_matrix_free(&h->sel_hidden);
    kite_packed_matrix_free(&h->markov_w2);
    free(h->conf_w);
    kite_weight_arena_free(&h->arena); /* after the matrices carved from it */
    free(h->enc_norm); free(h->output_norm); free(h->inv_freq);
    kite_gguf_free(h->g);
    if (h->file.data) kite_unmap_file(&h->file);
    free(h);
}

int32_t kite_dflash_n_vocab(const kite_dflash *h) {
    return h->has_output ? (int32_t)h->output.rows : h->has_embd ? (int32_t)h->tok_embd.ne[1] : 0;
}
int32_t kite_dflash_dim(const kite_dflash *h) { return h->dim; }
int32_t kite_dflash_n_layers(const kite_dflash *h) { return h->n_layers; }
int32_t kite_dflash_block_size(const kite_dflash *h) { return h->block_size; }
int32_t kite_dflash_mask_token(const kite_dflash *h) { return h->mask_token; }
int32_t kite_dflash_selector_top_k(const kite_dflash *h) { return h->sel_top_k; }
int32_t kite_dflash_markov_rank(const kite_dflash *h) { return h->markov_rank; }
bool kite_dflash_from_anchor(const kite_dflash *h) { return h->markov_rank > 0 && h->from_anchor; }
bool kite_dflash_has_confidence(const kite_dflash *h) { return h->has_conf; }
const int32_t *kite_dflash_target_layers(const kite_dflash *h, int32_t *n) {
    *n = h->n_target_layers;
    return h->target_layers;
}

int kite_dflash_check_target(const kite_dflash *h, const kite_weights *tw, kite_error *e) {
    const kite_hparams *hp = &tw->hp;
    if (h->dim != hp->dim)
        return kite_fail(e, KITE_ERR_INVALID_ARG,
                         "the DFlash drafter reads target features of width %d (its own), the model's width is %d", h->dim, hp->dim);
    for (int32_t k = 0; k < h->n_target_layers; k++)
        if (h->target_layers[k] > hp->n_layers)
            return kite_fail(e, KITE_ERR_INVALID_ARG, "the DFlash drafter reads target layer %d, the model has %d layers",
                             h->target_layers[k], hp->n_layers);
    int32_t V = kite_dflash_n_vocab(h);
    if (V != 0 && V != hp->n_vocab)
        return kite_fail(e, KITE_ERR_INVALID_ARG, "the DFlash drafter's vocabulary has %d tokens, the model's %d", V, hp->n_vocab);
    if (h->mask_token >= hp->n_vocab)
        return kite_fail(e, KITE_ERR_INVALID_ARG, "the DFlash drafter's mask token %d is outside the model's vocabulary (%d tokens)",
                         h->mask_token, hp->n_vocab);
    if (!h->has_embd && (!tw->tok_embd || tw->tok_embd->ne[0] != h->dim))
        return kite_fail(e, KITE_ERR_INVALID_ARG, "the DFlash drafter has no embedding and the model's (width %d) does not fit its width %d",
                         hp->dim, h->dim);
    if (h->markov_rank > 0 && (h->markov_w1.ne[1] != hp->n_vocab || h->markov_w2.rows != hp->n_vocab))
        return kite_fail(e, KITE_ERR_INVALID_ARG, "the DSpark drafter's Markov head covers %lld and %lld tokens, the model's vocabulary %d",
                         (long long)h->markov_w1.ne[1], (long long)h->markov_w2.rows, hp->n_vocab);
    if (h->sel_top_k > 0 && h->sel_prev.ne[1] != hp->n_vocab)
        return kite_fail(e, KITE_ERR_INVALID_ARG, "the DFlash-2 drafter's selector codebooks have %lld tokens, the model's vocabulary %d",
                         (long long)h->sel_prev.ne[1], hp->n_vocab);
    if (!h->has_output && tw->output.cols != h->dim)
        return kite_fail(e, KITE_ERR_INVALID_ARG,
                         "the DFlash drafter has no output layer and the model's (width %d) does not fit its width %d",
                         (int)tw->output.cols, h->dim);
    return KITE_OK;
}

/* ---- the drafter's passes ---------------------------------------------------------------------------- */

struct kite_dflash_run {
    const kite_dflash *h;
    const kite_tensor *embd;    /* the embedding in use (the drafter's or the target's) */
    const kite_packed_matrix *output;
    int32_t V;
    int32_t n_ctx;
    int32_t cap_rows;           /* n_ctx injected rows, then the block's */
    float *k, *v;               /* [n_layers][n_kv_heads][cap_rows][head_dim] */
    int32_t lo, D;              /* injected rows [lo, D) hold positions lo .. D - 1 */
    int32_t *seen;              /* [n_ctx] seen[p]: the token at p when row p was injected (rows below lo: the
                                   tokens then; a row is valid while seen[0 .. p] are the session's) */
    float *x, *xn, *q, *kk, *vv, *att, *h1, *gate, *up, *g; /* [DFLASH_MAX_ROWS][width] scratch */
    int32_t *vis;               /* [cap_rows] visible rows: injected, then the block's */
    float *logits;              /* [KITE_DFLASH_MAX_BLOCK - 1][V]: the last block's rows 1 .. n - 1 */
    int32_t last_rows;          /* rows of the last block */
    void *act;
    /* The pass being drafted (for the node callback). */
    int32_t max_depth;
    /* DFlash-2: the convolutions' coefficients and output, the selector's lattice of the last block. */
    float *dyn_attn, *dyn_ffn, *conv_out; /* [DFLASH_MAX_ROWS][2 * kernel * groups], the same, [DFLASH_MAX_ROWS][dim] */
    float *sel_gate, *sel_row;            /* [DFLASH_MAX_ROWS][rank], [2][top_k][rank] */
    int32_t *cand;                        /* [block][top_k]: row i's candidates (row 0 unused) */
    float *lattice;                       /* [block][top_k][top_k]: row i, predecessor p (a candidate of row i - 1;
                                             row 1: the root, every p alike), candidate j */
    /* DSpark: the first block row with logits (0 from the anchor, else 1), the Markov head's scratch,
     * conf_h[i] = conf_w[0 .. dim) . h_(row0 + i), and each drafted node's confidence for its children. */
    int32_t row0;
    kite_pool *pool;                      /* the drafting session's (for the node callback) */
    float *w1row, *conf_h;                /* [markov_rank], [block] */
    float node_conf[KITE_MAX_DRAFT + 1];
    float p_min; /* the drafting session's draft_p_min (kite_spec_params) */
};

int kite_dflash_run_new(kite_dflash_run **out, const kite_dflash *h, const kite_weights *tw, int32_t n_ctx, kite_error *e) {
    *out = NULL;
    kite_dflash_run *r = calloc(1, sizeof *r);
    if (!r) return kite_fail(e, KITE_ERR_NOMEM, "out of memory");
    r->h = h, r->n_ctx = n_ctx;
    r->embd = h->has_embd ? &h->tok_embd : tw->tok_embd;
    r->output = h->has_output ? &h->output : &tw->output;
    r->V = (int32_t)r->output->rows;
    r->cap_rows = n_ctx + h->block_size;
    size_t kvn = (size_t)h->n_layers * (size_t)h->n_kv_heads * (size_t)r->cap_rows * (size_t)h->head_dim;
    size_t R = DFLASH_MAX_ROWS, D = (size_t)h->dim, F = (size_t)h->n_target_layers * (size_t)h->dim;
    size_t qd = (size_t)h->n_heads * h->head_dim, kvd = (size_t)h->n_kv_heads * h->head_dim;
    r->k = malloc(sizeof(float) * kvn);
    r->v = malloc(sizeof(float) * kvn);
    r->seen = malloc(sizeof(int32_t) * ((size_t)n_ctx + 1));
    r->x = malloc(sizeof(float) * R * D);
    r->xn = malloc(sizeof(float) * R * D);
    r->q = malloc(sizeof(float) * R * qd);
    r->kk = malloc(sizeof(float) * R * kvd);
    r->vv = malloc(sizeof(float) * R * kvd);
    r->att = malloc(sizeof(float) * R * qd);
    r->h1 = malloc(sizeof(float) * R * D);
    r->gate = malloc(sizeof(float) * R * (size_t)h->ffn_dim);
    r->up = malloc(sizeof(float) * R * (size_t)h->ffn_dim);
    r->g = malloc(sizeof(float) * R * F);
    r->vis = malloc(sizeof(int32_t) * (size_t)r->cap_rows);
    r->logits = malloc(sizeof(float) * (size_t)h->block_size * (size_t)r->V);
    r->row0 = kite_dflash_from_anchor(h) ? 0 : 1;
    const kite_packed_matrix *all[3 + 9 * 64];
    size_t n_all = 0;
    all[n_all++] = &h->fc, all[n_all++] = r->output;
    for (int32_t l = 0; l < h->n_layers; l++) {
        const dflash_layer *L = &h->layers[l];
        all[n_all++] = &L->wq, all[n_all++] = &L->wk, all[n_all++] = &L->wv, all[n_all++] = &L->wo;
        all[n_all++] = &L->gate, all[n_all++] = &L->up, all[n_all++] = &L->down;
    }
    bool v2_ok = true;
    if (h->markov_rank > 0) {
        r->w1row = malloc(sizeof(float) * (size_t)h->markov_rank);
        r->conf_h = calloc((size_t)h->block_size, sizeof(float));
        v2_ok = r->w1row && r->conf_h;
        all[n_all++] = &h->markov_w2;
    }
    if (v2_ok && h->sel_top_k > 0) {
        const size_t projected = 2 * (size_t)h->conv_kernel * (size_t)(h->dim / h->conv_group), K = (size_t)h->sel_top_k;
        r->dyn_attn = malloc(sizeof(float) * R * projected);
        r->dyn_ffn = malloc(sizeof(float) * R * projected);
        r->conv_out = malloc(sizeof(float) * R * D);
        r->sel_gate = malloc(sizeof(float) * R * (size_t)h->sel_rank);
        r->sel_row = malloc(sizeof(float) * 2 * K * (size_t)h->sel_rank);
        r->cand = calloc((size_t)h->block_size * K, sizeof(int32_t));
        r->lattice = calloc((size_t)h->block_size * K * K, sizeof(float));
        v2_ok = v2_ok && r->dyn_attn && r->dyn_ffn && r->conv_out && r->sel_gate && r->sel_row && r->cand && r->lattice;
        all[n_all++] = &h->sel_hidden;
        for (int32_t l = 0; l < h->n_layers && n_all + 2 <= sizeof all / sizeof all[0]; l++)
            all[n_all++] = &h->layers[l].attn_conv.proj, all[n_all++] = &h->layers[l].ffn_conv.proj;
    }
    size_t act_bytes = kite_head_act_bytes(h->ks, all, n_all, DFLASH_MAX_ROWS);
    r->act = act_bytes ? malloc(act_bytes) : NULL;
    if (!v2_ok || !r->k || !r->v || !r->seen || !r->x || !r->xn || !r->q || !r->kk || !r->vv || !r->att || !r->h1 || !r->gate || !r->up ||
        !r->g || !r->vis || !r->logits || (act_bytes && !r->act)) {
        kite_dflash_run_free(r);
        return kite_fail(e, KITE_ERR_NOMEM, "out of memory for the DFlash drafter's cache (%d positions)", n_ctx);
    }
    *out = r;
    return KITE_OK;
}

void kite_dflash_run_free(kite_dflash_run *r) {
    if (!r) return;
    free(r->k); free(r->v); free(r->seen); free(r->x); free(r->xn); free(r->q); free(r->kk); free(r->vv); free(r->att);
    free(r->h1); free(r->gate); free(r->up); free(r->g); free(r->vis); free(r->logits); free(r->act);
    free(r->dyn_attn); free(r->dyn_ffn); free(r->conv_out); free(r->sel_gate); free(r->sel_row); free(r->cand); free(r->lattice);
    free(r->w1row); free(r->conf_h);
    free(r);
}

void kite_dflash_run_reset(kite_dflash_run *r) { r->lo = r->D = 0; }

const float *kite_dflash_last_logits(const kite_dflash_run *r, int32_t *n_rows) {
    *n_rows = r->last_rows;
    return r->logits;
}

const float *kite_dflash_last_lattice(const kite_dflash_run *r, const int32_t **cand, int32_t *n_rows, int32_t *top_k) {
    *cand = r->cand, *n_rows = r->last_rows, *top_k = r->h->sel_top_k;
    return r->lattice;
}

static void mm(kite_dflash_run *r, kite_pool *pool, const kite_packed_matrix *w, const float *x, int32_t n, float *y) {
    kite_head_mm(r->h->ks, r->act, pool, w, x, n, y);
}

static float *cache_k(kite_dflash_run *r, int32_t layer, int32_t kv_head) {
    return r->k + ((size_t)layer * r->h->n_kv_heads + (size_t)kv_head) * (size_t)r->cap_rows * (size_t)r->h->head_dim;
}
static float *cache_v(kite_dflash_run *r, int32_t layer, int32_t kv_head) {
    return r->v + ((size_t)layer * r->h->n_kv_heads + (size_t)kv_head) * (size_t)r->cap_rows * (size_t)r->h->head_dim;
}

/* Per head: RMSNorm over the head (weights w) and RoPE at pos; K heads also go to cache row crow of
 * the layer (crow < 0: queries, kept where they are). */
static void norm_rope_store(kite_dflash_run *r, float *heads, int32_t n_heads, const float *w, int32_t pos, int32_t layer,
                            int32_t crow) {
    const kite_dflash *h = r->h;
    for (int32_t hh = 0; hh < n_heads; hh++) {
        float *x = heads + (size_t)hh * h->head_dim;
        kite_head_rmsnorm(x, x, w, h->head_dim, h->rms_eps);
        kite_head_rope(x, h->head_dim, h->inv_freq, pos, true);
        if (crow >= 0) memcpy(cache_k(r, layer, hh) + (size_t)crow * h->head_dim, x, sizeof(float) * (size_t)h->head_dim);
    }
}

/* Stores the V heads of one row into cache row crow of the layer. */
static void store_v(kite_dflash_run *r, const float *heads, int32_t layer, int32_t crow) {
    const int32_t hd = r->h->head_dim;
    for (int32_t kh = 0; kh < r->h->n_kv_heads; kh++)
        memcpy(cache_v(r, layer, kh) + (size_t)crow * hd, heads + (size_t)kh * hd, sizeof(float) * (size_t)hd);
}

/* Injects feature rows features[n][n_target_layers * dim] of positions pos0 .. pos0 + n - 1 (n <=
 * DFLASH_INJECT_ROWS) into cache rows of the same numbers. */
static void inject(kite_dflash_run *r, kite_pool *pool, const float *features, int32_t n, int32_t pos0) {
    const kite_dflash *h = r->h;
    const int32_t D = h->dim, kvd = h->n_kv_heads * h->head_dim;
    mm(r, pool, &h->fc, features, n, r->x);
    for (int32_t i = 0; i < n; i++) kite_head_rmsnorm(r->x + (size_t)i * D, r->x + (size_t)i * D, h->enc_norm, D, h->rms_eps);
    for (int32_t l = 0; l < h->n_layers; l++) {
        const dflash_layer *L = &h->layers[l];
        mm(r, pool, &L->wk, r->x, n, r->kk);
        mm(r, pool, &L->wv, r->x, n, r->vv);
        for (int32_t i = 0; i < n; i++) {
            store_v(r, r->vv + (size_t)i * kvd, l, pos0 + i);
            norm_rope_store(r, r->kk + (size_t)i * kvd, h->n_kv_heads, L->k_norm, pos0 + i, l, pos0 + i);
        }
    }
}

typedef struct attend_job {
    kite_dflash_run *r;
    int32_t layer, n, n_ctx_rows;
} attend_job;

/* Task i * n_kv + kh: block row i's queries of KV head kh over the visible rows. */
static void attend_task(void *ctx, int64_t task, int thread) {
    (void)thread;
    const attend_job *j = ctx;
    kite_dflash_run *r = j->r;
    const kite_dflash *h = r->h;
    const int32_t hd = h->head_dim, qd = h->n_heads * hd, group = h->n_heads / h->n_kv_heads;
    int32_t i = (int32_t)(task / h->n_kv_heads), kh = (int32_t)(task % h->n_kv_heads);
    kite_attn_query a = {
        .q = r->q + (size_t)i * qd + (size_t)kh * group * hd, .n_q = group, .head_dim = hd,
        .k = cache_k(r, j->layer, kh), .v = cache_v(r, j->layer, kh), .kv_type = KITE_TYPE_F32,
        .row_bytes = sizeof(float) * (size_t)hd, .rows = r->vis,
        .n_visible = j->n_ctx_rows + (h->causal ? i + 1 : j->n), .scale = 1.0f / sqrtf((float)hd),
        .out = r->att + (size_t)i * qd + (size_t)kh * group * hd,
    };
    h->ks->attend(&a);
}

/* DFlash-2's convolution of block rows hid[n][dim] (out[n][dim]; not hid): row t, channel c of group
 * g = c / conv_group sums over taps k <= t (w(t, k) = dyn[t][side][k][g] + base[side][k][c]) w * hid[t - k][c],
 * tap by tap as llama.cpp adds them. */
static void conv_rows(const kite_dflash *h, const float *hid, const float *dyn, const float *base, int side, int32_t n, float *out) {
    const int32_t D = h->dim, K = h->conv_kernel, G = D / h->conv_group;
    const size_t proj = 2 * (size_t)K * (size_t)G;
    for (int32_t t = 0; t < n; t++) {
        float *o = out + (size_t)t * D;
        const float *coef = dyn + (size_t)t * proj + (size_t)side * K * G;
        for (int32_t c = 0; c < D; c++) {
            const int32_t grp = c / h->conv_group;
            float acc = 0.0f;
            for (int32_t k = 0; k < K && k <= t; k++) {
                float w = coef[(size_t)k * G + grp] + base[((size_t)side * K + k) * D + c];
                acc += w * hid[(size_t)(t - k) * D + c];
            }
            o[c] = acc;
        }
    }
}

/* A codebook row (selector_predecessor / selector_successor) of token tok as floats [rank]. */
static void codebook_row(const kite_tensor *t, int32_t tok, int32_t rank, float *out) {
    size_t rb = kite_type_row_bytes(t->type, rank);
    kite_type_get(t->type)->to_float((const unsigned char *)t->data + (size_t)tok * rb, out, rank);
}

/* DFlash-2's selector over the block's rows 1 .. n - 1 (logits in r->logits, the final-normed rows in
 * r->xn): each row's top_k candidates (by logit, larger first, ties to the smaller id) and the lattice
 * score of every (predecessor, candidate) pair (llama.cpp's build_dflash2_selector). */
static void run_selector(kite_dflash_run *r, kite_pool *pool, int32_t root, int32_t n) {
    const kite_dflash *h = r->h;
    const int32_t K = h->sel_top_k, R = h->sel_rank, V = r->V;
    mm(r, pool, &h->sel_hidden, r->xn, n - 1, r->sel_gate);
    memset(r->cand, 0, sizeof(int32_t) * (size_t)K);
    memset(r->lattice, 0, sizeof(float) * (size_t)K * K);
    float *cond = r->sel_row, *next = r->sel_row + (size_t)K * R;
    for (int32_t i = 1; i < n; i++) {
        const float *lg = r->logits + (size_t)(i - 1) * V;
        int32_t *cand = r->cand + (size_t)i * K;
        int32_t m = 0;
        for (int32_t v = 0; v < V; v++) { /* insertion into the sorted top K */
            if (m == K && !(lg[v] > lg[cand[K - 1]])) continue;
            int32_t at = m < K ? m++ : K - 1;
            while (at > 0 && lg[v] > lg[cand[at - 1]]) { cand[at] = cand[at - 1]; at--; }
            cand[at] = v;
        }
        const float *gate = r->sel_gate + (size_t)(i - 1) * R;
        const int32_t n_pred = i == 1 ? 1 : K;
        for (int32_t p = 0; p < n_pred; p++) {
            codebook_row(&h->sel_prev, i == 1 ? root : r->cand[(size_t)(i - 1) * K + p], R, cond + (size_t)p * R);
            for (int32_t c = 0; c < R; c++) cond[(size_t)p * R + c] *= gate[c];
        }
        for (int32_t j = 0; j < K; j++) {
            codebook_row(&h->sel_next, cand[j], R, next);
            for (int32_t p = 0; p < K; p++) {
                const float *cp = cond + (size_t)(i == 1 ? 0 : p) * R;
                double dot = 0.0;
                for (int32_t c = 0; c < R; c++) dot += (double)next[c] * cp[c];
                r->lattice[((size_t)i * K + p) * K + j] = (float)dot + lg[cand[j]];
            }
        }
    }
}

/* The block: tokens [root, mask x (n - 1)] at positions P .. P + n - 1 over injected rows [lo, P);
 * logits of rows 1 .. n - 1 into r->logits. */
static void run_block(kite_dflash_run *r, kite_pool *pool, int32_t root, int32_t n, int32_t P) {
    const kite_dflash *h = r->h;
    const int32_t D = h->dim, hd = h->head_dim, qd = h->n_heads * hd, kvd = h->n_kv_heads * hd;
    const kite_type_traits *et = kite_type_get(r->embd->type);
    size_t erow_bytes = kite_type_row_bytes(r->embd->type, D);
    for (int32_t i = 0; i < n; i++)
        et->to_float((const unsigned char *)r->embd->data + (size_t)(i == 0 ? root : h->mask_token) * erow_bytes, r->x + (size_t)i * D, D);
    int32_t nv = 0;
    for (int32_t p = r->lo; p < P; p++) r->vis[nv++] = p;
    for (int32_t i = 0; i < n; i++) r->vis[nv + i] = r->n_ctx + i;
    for (int32_t l = 0; l < h->n_layers; l++) {
        const dflash_layer *L = &h->layers[l];
        for (int32_t i = 0; i < n; i++) kite_head_rmsnorm(r->xn + (size_t)i * D, r->x + (size_t)i * D, L->attn_norm, D, h->rms_eps);
        if (h->sel_top_k > 0) {
            mm(r, pool, &L->attn_conv.proj, r->xn, n, r->dyn_attn);
            conv_rows(h, r->xn, r->dyn_attn, L->attn_conv.base, 0, n, r->conv_out);
            memcpy(r->xn, r->conv_out, sizeof(float) * (size_t)n * D);
        }
        mm(r, pool, &L->wq, r->xn, n, r->q);
        mm(r, pool, &L->wk, r->xn, n, r->kk);
        mm(r, pool, &L->wv, r->xn, n, r->vv);
        for (int32_t i = 0; i < n; i++) {
            store_v(r, r->vv + (size_t)i * kvd, l, r->n_ctx + i);
            norm_rope_store(r, r->q + (size_t)i * qd, h->n_heads, L->q_norm, P + i, l, -1);
            norm_rope_store(r, r->kk + (size_t)i * kvd, h->n_kv_heads, L->k_norm, P + i, l, r->n_ctx + i);
        }
        attend_job j = {r, l, n, nv};
        int64_t tasks = (int64_t)n * h->n_kv_heads;
        if (pool && kite_pool_threads(pool) > 1 && tasks > 1) kite_pool_run(pool, attend_task, &j, tasks);
        else
            for (int64_t t = 0; t < tasks; t++) attend_task(&j, t, 0);
        mm(r, pool, &L->wo, r->att, n, r->h1);
        if (h->sel_top_k > 0) {
            conv_rows(h, r->h1, r->dyn_attn, L->attn_conv.base, 1, n, r->conv_out);
            memcpy(r->h1, r->conv_out, sizeof(float) * (size_t)n * D);
        }
        for (int32_t i = 0; i < n; i++) {
            float *x = r->x + (size_t)i * D;
            const float *o = r->h1 + (size_t)i * D;
            for (int32_t c = 0; c < D; c++) x[c] += o[c];
            kite_head_rmsnorm(r->xn + (size_t)i * D, x, L->ffn_norm, D, h->rms_eps);
        }
        if (h->sel_top_k > 0) {
            mm(r, pool, &L->ffn_conv.proj, r->xn, n, r->dyn_ffn);
            conv_rows(h, r->xn, r->dyn_ffn, L->ffn_conv.base, 0, n, r->conv_out);
            memcpy(r->xn, r->conv_out, sizeof(float) * (size_t)n * D);
        }
        mm(r, pool, &L->gate, r->xn, n, r->gate);
        mm(r, pool, &L->up, r->xn, n, r->up);
        for (int32_t i = 0; i < n; i++) h->ks->silu_mul(r->gate + (size_t)i * h->ffn_dim, r->up + (size_t)i * h->ffn_dim, h->ffn_dim);
        mm(r, pool, &L->down, r->gate, n, r->h1);
        if (h->sel_top_k > 0) {
            conv_rows(h, r->h1, r->dyn_ffn, L->ffn_conv.base, 1, n, r->conv_out);
            memcpy(r->h1, r->conv_out, sizeof(float) * (size_t)n * D);
        }
        for (int32_t i = 0; i < n; i++) {
            float *x = r->x + (size_t)i * D;
            const float *f = r->h1 + (size_t)i * D;
            for (int32_t c = 0; c < D; c++) x[c] += f[c];
        }
    }
    const int32_t row0 = r->row0;
    for (int32_t i = row0; i < n; i++)
        kite_head_rmsnorm(r->xn + (size_t)(i - row0) * D, r->x + (size_t)i * D, h->output_norm, D, h->rms_eps);
    mm(r, pool, r->output, r->xn, n - row0, r->logits);
    r->last_rows = n;
    if (h->has_conf)
        for (int32_t i = 0; i < n - row0; i++) {
            double dot = 0.0;
            for (int32_t c = 0; c < D; c++) dot += (double)h->conf_w[c] * r->xn[(size_t)i * D + c];
            r->conf_h[i] = (float)dot;
        }
    if (h->sel_top_k > 0) { /* DFlash-2's logits feed the selector, with the target's output transforms (llama.cpp) */
        size_t cells = (size_t)(n - 1) * (size_t)r->V;
        if (h->logit_scale != 0.0f)
            for (size_t c = 0; c < cells; c++) r->logits[c] *= h->logit_scale;
        if (h->softcap > 0.0f)
            for (size_t c = 0; c < cells; c++) r->logits[c] = tanhf(r->logits[c] / h->softcap) * h->softcap;
        run_selector(r, pool, root, n);
    }
}

double kite_dflash_block_ms(kite_dflash_run *r, kite_pool *pool, int32_t n) {
    if (n < 2) n = 2;
    if (n > r->h->block_size) n = r->h->block_size;
    int32_t lo = r->lo, D = r->D;
    r->lo = 0;
    double best = INFINITY;
    for (int i = 0; i < 3; i++) {
        double t0 = kite_now_ms();
        run_block(r, pool, 0, n, 0);
        double t = kite_now_ms() - t0;
        if (t < best) best = t;
    }
    r->lo = lo, r->D = D; /* the block's rows are past the injected ones: those stay valid */
    return best;
}

/* ---- drafting ---------------------------------------------------------------------------------------- */

/* kite_spec_grow_tree's callback: a node at depth d takes the block's row d + 1 (no pass). */
static int block_rows_as_nodes(void *ctx, kite_draft_tree *t, int32_t first, int32_t end, float *logits, kite_error *e) {
    (void)e;
    kite_dflash_run *r = ctx;
    for (int32_t j = first; j < end; j++) {
        int32_t d = t->depth[j] < r->max_depth ? t->depth[j] : r->max_depth - 1; /* deeper nodes are not expanded */
        memcpy(logits + (size_t)(j - first) * r->V, r->logits + (size_t)d * r->V, sizeof(float) * (size_t)r->V);
        t->fed[j] = true;
    }
    return KITE_OK;
}

/* DFlash-2: the distribution of the children of a node at depth d whose token is tok, over the
 * lattice row d + 1: its candidates scored after tok (tok's index among row d's candidates; the root
 * at d = 0), every other token -inf. The greedy chain is then llama.cpp's walk (the best successor of
 * the previous choice), and a tree takes the next-best successors. */
static void lattice_as_logits(const kite_dflash_run *r, int32_t d, int32_t tok, float *out) {
    const int32_t K = r->h->sel_top_k;
    int32_t p = 0;
    if (d > 0)
        for (int32_t j = 0; j < K; j++)
            if (r->cand[(size_t)d * K + j] == tok) { p = j; break; }
    for (int32_t v = 0; v < r->V; v++) out[v] = -INFINITY;
    for (int32_t j = 0; j < K; j++) out[r->cand[(size_t)(d + 1) * K + j]] = r->lattice[((size_t)(d + 1) * K + p) * K + j];
}

static int lattice_rows_as_nodes(void *ctx, kite_draft_tree *t, int32_t first, int32_t end, float *logits, kite_error *e) {
    (void)e;
    kite_dflash_run *r = ctx;
    for (int32_t j = first; j < end; j++) {
        int32_t d = t->depth[j] < r->max_depth ? t->depth[j] : r->max_depth - 1; /* deeper nodes are not expanded */
        lattice_as_logits(r, d, t->token[j], logits + (size_t)(j - first) * r->V);
        t->fed[j] = true;
    }
    return KITE_OK;
}

/* DSpark: the children's logits of a node at depth d with token tok: row0 + d's logits plus the Markov
 * bias markov_w2 (markov_w1[tok]) * scale (llama.cpp's build_dspark_markov_head conditions on the
 * greedy chain's previous token; a tree node conditions on its own), and its confidence. */
static void markov_logits(kite_dflash_run *r, kite_pool *pool, int32_t d, int32_t tok, float *out, float *conf) {
    const kite_dflash *h = r->h;
    const int32_t R = h->markov_rank;
    codebook_row(&h->markov_w1, tok, R, r->w1row);
    mm(r, pool, &h->markov_w2, r->w1row, 1, out);
    const float *base = r->logits + (size_t)d * r->V;
    for (int32_t v = 0; v < r->V; v++) out[v] = base[v] + out[v] * h->markov_w2_scale;
    if (h->has_conf) {
        double dot = r->conf_h[d] + (double)h->conf_b;
        for (int32_t c = 0; c < R; c++) dot += (double)h->conf_w[h->dim + c] * r->w1row[c];
        *conf = 1.0f / (1.0f + expf(-(float)dot));
    }
}

/* A node whose confidence is below the session's draft_p_min drafts no children (llama.cpp's DSpark
 * draft stops at the first row below --spec-draft-p-min): its children's logits all -inf. */
static void gate_by_confidence(const kite_dflash_run *r, float conf, float *logits) {
    if (!r->h->has_conf || !(r->p_min > 0.0f) || !(conf < r->p_min)) return;
    for (int32_t v = 0; v < r->V; v++) logits[v] = -INFINITY;
}

static int markov_rows_as_nodes(void *ctx, kite_draft_tree *t, int32_t first, int32_t end, float *logits, kite_error *e) {
    (void)e;
    kite_dflash_run *r = ctx;
    for (int32_t j = first; j < end; j++) {
        int32_t d = t->depth[j] < r->max_depth ? t->depth[j] : r->max_depth - 1; /* deeper nodes are not expanded */
        float *out = logits + (size_t)(j - first) * r->V;
        markov_logits(r, r->pool, d, t->token[j], out, &r->node_conf[j]);
        gate_by_confidence(r, r->node_conf[j], out);
        t->fed[j] = true;
    }
    return KITE_OK;
}

const float *kite_dflash_last_confidence(const kite_dflash_run *r) { return r->h->has_conf ? r->node_conf : NULL; }

int kite_dflash_draft(kite_spec_state *st, kite_session *s, int32_t root, int32_t budget, const kite_gen_params *gp,
                      kite_draft_tree *t, kite_error *e) {
    kite_dflash_run *r = st->dflash;
    kite_features *f = &s->features;
    const int32_t P = s->n_past, W = r->h->n_target_layers * r->h->dim;
    if (P < 1 || P > r->n_ctx || f->width != W) return KITE_OK; /* nothing to draft from */
    /* Injected rows still valid: those whose context up to their position is the session's now (a
     * truncation or a new turn changes it). */
    int32_t D = r->D < P ? r->D : P;
    for (int32_t q = 0; q < D; q++)
        if (r->seen[q] != s->history[q]) { D = q; break; }
    /* Feature rows for [D, P) must be held; when they start later (capture began mid-context, a
     * truncation went below them), the cache restarts where they start. */
    if (f->n == 0 || f->pos0 + f->n < P) return KITE_OK;
    if (D < f->pos0 || D < r->lo) {
        r->lo = f->pos0;
        D = r->lo;
        memcpy(r->seen, s->history, sizeof(int32_t) * (size_t)r->lo);
    }
    if (r->lo >= P) return KITE_OK;
    for (int32_t p = D; p < P; p += DFLASH_INJECT_ROWS) {
        int32_t n = P - p < DFLASH_INJECT_ROWS ? P - p : DFLASH_INJECT_ROWS;
        inject(r, s->pool, f->rows + (size_t)(p - f->pos0) * W, n, p);
        memcpy(r->seen + p, s->history + p, sizeof(int32_t) * (size_t)n);
    }
    r->D = P;
    if (r->D - DFLASH_FEATURE_SLACK > f->pos0) kite_features_drop_before(f, r->D - DFLASH_FEATURE_SLACK);
    /* One block of budget + 1 rows at most (llama.cpp's n_max + 1), so a short budget costs less. */
    /* From the anchor (DSpark) the block's every row drafts: budget rows. */
    int32_t n = budget + r->row0 < r->h->block_size ? budget + r->row0 : r->h->block_size;
    if (n < r->row0 + 1) n = r->row0 + 1;
    run_block(r, s->pool, root, n, P);
    r->max_depth = n - r->row0;
    r->pool = s->pool;
    const bool v2 = r->h->sel_top_k > 0, markov = r->h->markov_rank > 0;
    if (v2) lattice_as_logits(r, 0, root, st->draft_logits);
    else if (markov) {
        r->p_min = st->params.draft_p_min;
        markov_logits(r, s->pool, 0, root, st->draft_logits, &r->node_conf[0]);
        gate_by_confidence(r, r->node_conf[0], st->draft_logits);
    } else {
        memcpy(st->draft_logits, r->logits, sizeof(float) * (size_t)r->V); /* the root's children: row 1 */
    }
    t->fed[0] = true;
    st->max_depth = r->max_depth;
    int rc = kite_spec_grow_tree(st, s, budget, gp, t, r->V,
                                 v2 ? lattice_rows_as_nodes : markov ? markov_rows_as_nodes : block_rows_as_nodes, r, e);
    st->max_depth = 0;
    return rc;
}
