/* kite gen-model --shape eagle3|dflash --target TARGET.gguf: random-weight learned drafters that fit a
 * target, in llama.cpp's tensor names and metadata. Both take the target's width, heads and FFN size
 * and its tokenizer (copied, as the converters copy it); weights come from the random-model stream
 * (kite_random_model_row), quantized with the reference quantizers.
 *
 * eagle3 (as llama.cpp's converter writes a head for Llama 3.1 8B): an output layer of its own over the
 * whole vocabulary (no d2t), the target's embedding borrowed (no token_embd), and target layers
 * [2, L/2, L-3] as the converter derives them (for targets under 6 layers [0, L/2, L-1], and [0, 1, 2]
 * for 2 layers: 2 is the last layer's output, which llama.cpp's llama graph does not expose).
 *
 * dflash (as the converter writes z-lab's DFlash drafters): as many decoder layers as target layers
 * read, chosen as DFlash's build_target_layer_ids does (1 .. L-3 evenly, the converter's +1 making them
 * layer inputs) for targets of 8 layers or more, else spread over [0, L-1]; 2 to 5 of them (L/7
 * rounded); the target's embedding and output borrowed (no token_embd, no output, as z-lab's files);
 * the mask token the target's last token; block size 16 unless the shape says "dflash-bN"; non-causal
 * unless it says "-causal". "dflash2[-bN][-causal]" adds DFlash-2's gated convolutions (kernel 4,
 * groups of 16 channels; blk.N.{attn,ffn}_conv_base [dim, 4, 2] and _conv_proj.weight) and selector
 * (rank 32, top 8: selector_predecessor / selector_successor [32, n_vocab] of unit scale, selector_hidden [dim, 32])
 * with the keys dflash.conv_kernel_size, conv_group_size, selector_rank, selector_top_k.
 * "dflash-dspark[-bN][-causal][-bonus]" adds DSpark's Markov head (markov_w1 / markov_w2 [32, n_vocab],
 * unit scale) and confidence head (conf_proj.weight [dim + 32], conf_proj.bias), drafting from the
 * anchor (dflash.sample_from_anchor true) unless "-bonus". */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/random_model.h"
#include "io/gguf.h"
#include "io/mmap.h"
#include "kite.h"
#include "quant/types.h"

static bool target_u32(const kite_gguf *g, const char *arch, const char *suffix, uint32_t *v) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return kite_gguf_get_u32(g, key, v);
}

static uint32_t matrix_type(const char *what, const char *type, kite_error *e, bool *ok) {
    static const struct { const char *name; uint32_t t; } k[] = {
        {"f32", KITE_TYPE_F32}, {"f16", KITE_TYPE_F16}, {"bf16", KITE_TYPE_BF16}, {"q8_0", KITE_TYPE_Q8_0}, {"q4_0", KITE_TYPE_Q4_0}};
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        if (!strcmp(type, k[i].name)) { *ok = true; return k[i].t; }
    *ok = false;
    kite_fail(e, KITE_ERR_INVALID_ARG, "%s: type '%s' is not one of f32, f16, bf16, q8_0, q4_0", what, type);
    return 0;
}

/* A tensor of rows x cols written as [cols, rows] (planes > 1: [cols, rows / planes, planes]). */
static int add_tensor_planes(const char *what, kite_gguf_writer *w, uint64_t seed, const char *name, uint32_t type, int64_t cols,
                             int64_t rows, int64_t planes, float scale, kite_error *e) {
    if (rows == 1) type = KITE_TYPE_F32; /* norms */
    const kite_type_traits *tr = kite_type_get(type);
    if (cols % tr->block_size)
        return kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: %s has rows of %lld, not a multiple of %s's block of %d",
                         what, name, (long long)cols, tr->name, tr->block_size);
    size_t row_bytes = kite_type_row_bytes(type, cols);
    unsigned char *data = malloc(row_bytes * (size_t)rows);
    float *row = malloc(sizeof(float) * (size_t)cols);
    if (!data || !row) {
        free(data), free(row);
        return kite_fail(e, KITE_ERR_NOMEM, "%s: out of memory for %s", what, name);
    }
    for (int64_t r = 0; r < rows; r++) {
        kite_random_model_row(seed, name, r, row, cols);
        if (scale != 1.0f)
            for (int64_t c = 0; c < cols; c++) row[c] *= scale;
        tr->from_float(row, data + (size_t)r * row_bytes, cols);
    }
    int64_t ne[3] = {cols, rows / planes, planes};
    kite_gguf_w_tensor(w, name, type, planes > 1 ? 3 : rows > 1 ? 2 : 1, ne, data, row_bytes * (size_t)rows);
    free(data), free(row);
    return KITE_OK;
}

static int add_tensor(const char *what, kite_gguf_writer *w, uint64_t seed, const char *name, uint32_t type, int64_t cols,
                      int64_t rows, kite_error *e) {
    return add_tensor_planes(what, w, seed, name, type, cols, rows, 1, 1.0f, e);
}

/* The target's shape, read from its GGUF file (g stays open for the tokenizer's keys). */
typedef struct target_shape {
    kite_mapped_file f;
    kite_gguf *g;
    char arch[64];
    uint32_t dim, L, n_heads, n_kv, ffn, head_dim, n_ctx;
    float theta, eps;
    int64_t V;
} target_shape;

static void target_close(target_shape *t) {
    kite_gguf_free(t->g);
    if (t->f.data) kite_unmap_file(&t->f);
}

static int target_open(const char *what, const char *path, target_shape *t, kite_error *e) {
    memset(t, 0, sizeof *t);
    if (!path) return kite_fail(e, KITE_ERR_INVALID_ARG, "%s: --target TARGET.gguf is needed (the drafter must fit a target)", what);
    int st = kite_map_file(&t->f, path, e);
    if (st) return st;
    if (t->f.size < 4 || memcmp(t->f.data, "GGUF", 4) != 0) {
        target_close(t);
        return kite_fail(e, KITE_ERR_FORMAT, "%s: target %s is not a GGUF file", what, path);
    }
    if ((st = kite_gguf_open(&t->g, t->f.data, t->f.size, e))) { target_close(t); return st; }
    kite_gguf_str a;
    if (!kite_gguf_get_str(t->g, "general.architecture", &a) || a.len >= sizeof t->arch) {
        target_close(t);
        return kite_fail(e, KITE_ERR_FORMAT, "%s: target %s has no general.architecture", what, path);
    }
    memcpy(t->arch, a.ptr, a.len);
    t->arch[a.len] = 0;
    t->n_ctx = 4096, t->theta = 10000.0f, t->eps = 1e-5f;
    const kite_gguf_tensor *embd = kite_gguf_find_tensor(t->g, "token_embd.weight");
    if (!target_u32(t->g, t->arch, "embedding_length", &t->dim) || !target_u32(t->g, t->arch, "block_count", &t->L) ||
        !target_u32(t->g, t->arch, "attention.head_count", &t->n_heads) || !target_u32(t->g, t->arch, "feed_forward_length", &t->ffn) ||
        !embd || t->n_heads == 0 || t->L == 0) {
        target_close(t);
        return kite_fail(e, KITE_ERR_FORMAT, "%s: target %s lacks its width, layers, heads, FFN or embedding", what, path);
    }
    if (!target_u32(t->g, t->arch, "attention.head_count_kv", &t->n_kv)) t->n_kv = t->n_heads;
    if (!target_u32(t->g, t->arch, "attention.key_length", &t->head_dim)) t->head_dim = t->dim / t->n_heads;
    (void)target_u32(t->g, t->arch, "context_length", &t->n_ctx);
    char key[128];
    snprintf(key, sizeof key, "%s.rope.freq_base", t->arch);
    (void)kite_gguf_get_f32(t->g, key, &t->theta);
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", t->arch);
    (void)kite_gguf_get_f32(t->g, key, &t->eps);
    t->V = embd->ne[1];
    return KITE_OK;
}

/* The target's tokenizer keys, as the converters copy them (but `skip`, which the drafter writes). */
static void copy_tokenizer(kite_gguf_writer *w, const kite_gguf *g, const char *skip) {
    for (int64_t i = 0; i < kite_gguf_n_kv(g); i++) {
        kite_gguf_str k = kite_gguf_key(g, i);
        if (skip && k.len == strlen(skip) && !memcmp(k.ptr, skip, k.len)) continue;
        if (k.len > 10 && !memcmp(k.ptr, "tokenizer.", 10)) kite_gguf_w_copy_kv(w, g, i);
    }
}

int kite_write_random_eagle3(const char *path, const kite_random_model_params *params, kite_error *e) {
    static const char what[] = "random EAGLE-3 head";
    bool ok;
    uint32_t type = matrix_type(what, params->type ? params->type : "f32", e, &ok);
    if (!ok) return e->status;
    target_shape ts;
    int st = target_open(what, params->target_path, &ts, e);
    if (st) return st;
    kite_gguf_writer *w = NULL;
    const kite_gguf *g = ts.g;
    const char *arch = ts.arch;
    const uint32_t dim = ts.dim, L = ts.L, n_heads = ts.n_heads, n_kv = ts.n_kv, ffn = ts.ffn, head_dim = ts.head_dim, n_ctx = ts.n_ctx;
    const float theta = ts.theta, eps = ts.eps;
    const int64_t V = ts.V;
    int32_t layers[3] = {2, (int32_t)L / 2, (int32_t)L - 3};
    if (L < 6) layers[0] = 0, layers[1] = (int32_t)L / 2, layers[2] = L >= 3 ? (int32_t)L - 1 : (int32_t)L;
    w = kite_gguf_writer_new();
    if (!w) { st = kite_fail(e, KITE_ERR_NOMEM, "out of memory"); goto done; }
    char name[128];
    kite_gguf_w_str(w, "general.architecture", "eagle3");
    snprintf(name, sizeof name, "kite random eagle3 head for %s seed %llu", arch, (unsigned long long)params->seed);
    kite_gguf_w_str(w, "general.name", name);
    kite_gguf_w_u32(w, "eagle3.context_length", n_ctx);
    kite_gguf_w_u32(w, "eagle3.embedding_length", dim);
    kite_gguf_w_u32(w, "eagle3.block_count", 1);
    kite_gguf_w_u32(w, "eagle3.feed_forward_length", ffn);
    kite_gguf_w_u32(w, "eagle3.attention.head_count", n_heads);
    kite_gguf_w_u32(w, "eagle3.attention.head_count_kv", n_kv);
    kite_gguf_w_u32(w, "eagle3.attention.key_length", head_dim);
    kite_gguf_w_u32(w, "eagle3.attention.value_length", head_dim);
    kite_gguf_w_u32(w, "eagle3.rope.dimension_count", head_dim);
    kite_gguf_w_f32(w, "eagle3.rope.freq_base", theta);
    kite_gguf_w_f32(w, "eagle3.attention.layer_norm_rms_epsilon", eps);
    kite_gguf_w_u32(w, "eagle3.vocab_size", (uint32_t)V);
    kite_gguf_w_arr_i32(w, "eagle3.target_layers", layers, 3);
    kite_gguf_w_u32(w, "eagle3.target_hidden_size", dim);
    kite_gguf_w_bool(w, "eagle3.norm_before_residual", false);
    kite_gguf_w_bool(w, "eagle3.norm_before_fc", false);
    copy_tokenizer(w, g, NULL);
    const int64_t D = dim, qd = (int64_t)n_heads * head_dim, kvd = (int64_t)n_kv * head_dim, u = params->seed;
    struct { const char *name; int64_t cols, rows; } plan[] = {
        {"fc.weight", 3 * D, D},
        {"blk.0.attn_norm.weight", D, 1},
        {"blk.0.attn_norm_2.weight", D, 1},
        {"blk.0.attn_q.weight", 2 * D, qd},
        {"blk.0.attn_k.weight", 2 * D, kvd},
        {"blk.0.attn_v.weight", 2 * D, kvd},
        {"blk.0.attn_output.weight", qd, D},
        {"blk.0.ffn_norm.weight", D, 1},
        {"blk.0.ffn_gate.weight", D, ffn},
        {"blk.0.ffn_up.weight", D, ffn},
        {"blk.0.ffn_down.weight", ffn, D},
        {"output_norm.weight", D, 1},
        {"output.weight", D, V},
    };
    for (size_t i = 0; i < sizeof plan / sizeof plan[0]; i++) {
        if (params->progress) params->progress((float)i / (float)(sizeof plan / sizeof plan[0]), params->progress_user_data);
        if ((st = add_tensor(what, w, (uint64_t)u, plan[i].name, type, plan[i].cols, plan[i].rows, e))) goto done;
    }
    st = kite_gguf_writer_save(w, path, e);
    if (!st && params->progress) params->progress(1.0f, params->progress_user_data);
done:
    kite_gguf_writer_free(w);
    target_close(&ts);
    return st;
}

int kite_write_random_dflash(const char *path, const kite_random_model_params *params, kite_error *e) {
    static const char what[] = "random DFlash drafter";
    /* "dflash", "dflash-bN", "dflash-causal", "dflash-bN-causal"; "dflash2..." the same with DFlash-2's
     * convolutions and selector */
    int32_t block = 16;
    bool causal = false;
    const char *rest = params->shape + 6;
    const bool v2 = *rest == '2';
    if (v2) rest++;
    const bool dspark = !v2 && !strncmp(rest, "-dspark", 7);
    if (dspark) rest += 7;
    if (!strncmp(rest, "-b", 2)) {
        char *end;
        long b = strtol(rest + 2, &end, 10);
        if (end == rest + 2 || b < 2 || b > 64)
            return kite_fail(e, KITE_ERR_INVALID_ARG, "%s: shape '%s': the block size after -b must be 2..64", what, params->shape);
        block = (int32_t)b;
        rest = end;
    }
    bool bonus = false;
    if (!strncmp(rest, "-causal", 7)) causal = true, rest += 7;
    if (dspark && !strcmp(rest, "-bonus")) bonus = true, rest += 6;
    if (*rest)
        return kite_fail(e, KITE_ERR_INVALID_ARG, "%s: unknown shape '%s' (dflash[2|-dspark][-bN][-causal], dflash-dspark[-bN][-causal]-bonus)", what,
                         params->shape);
    bool ok;
    uint32_t type = matrix_type(what, params->type ? params->type : "f32", e, &ok);
    if (!ok) return e->status;
    target_shape ts;
    int st = target_open(what, params->target_path, &ts, e);
    if (st) return st;
    const int32_t L = (int32_t)ts.L;
    int32_t n = (L + 3) / 7;
    n = n < 2 ? 2 : n > 5 ? 5 : n;
    if (n > L) n = L;
    int32_t layers[5];
    for (int32_t i = 0; i < n; i++) {
        if (L >= 8) /* DFlash's build_target_layer_ids over 1 .. L - 3, plus the converter's 1 */
            layers[i] = 1 + (int32_t)lround(1.0 + (double)i * (double)(L - 4) / (double)(n - 1 > 0 ? n - 1 : 1));
        else
            layers[i] = n == 1 ? L / 2 : (int32_t)lround((double)i * (double)(L - 1) / (double)(n - 1));
    }
    kite_gguf_writer *w = kite_gguf_writer_new();
    if (!w) { st = kite_fail(e, KITE_ERR_NOMEM, "out of memory"); goto done; }
    char name[160];
    kite_gguf_w_str(w, "general.architecture", "dflash");
    snprintf(name, sizeof name, "kite random dflash drafter for %s seed %llu", ts.arch, (unsigned long long)params->seed);
    kite_gguf_w_str(w, "general.name", name);
    kite_gguf_w_u32(w, "dflash.context_length", ts.n_ctx);
    kite_gguf_w_u32(w, "dflash.embedding_length", ts.dim);
    kite_gguf_w_u32(w, "dflash.block_count", (uint32_t)n);
    kite_gguf_w_u32(w, "dflash.feed_forward_length", ts.ffn);
    kite_gguf_w_u32(w, "dflash.attention.head_count", ts.n_heads);
    kite_gguf_w_u32(w, "dflash.attention.head_count_kv", ts.n_kv);
    kite_gguf_w_u32(w, "dflash.attention.key_length", ts.head_dim);
    kite_gguf_w_u32(w, "dflash.attention.value_length", ts.head_dim);
    kite_gguf_w_f32(w, "dflash.rope.freq_base", ts.theta);
    kite_gguf_w_f32(w, "dflash.attention.layer_norm_rms_epsilon", ts.eps);
    kite_gguf_w_u32(w, "dflash.block_size", (uint32_t)block);
    kite_gguf_w_arr_i32(w, "dflash.target_layers", layers, (uint64_t)n);
    kite_gguf_w_bool(w, "dflash.attention.causal", causal);
    /* DFlash-2: kernel 4 over groups of 16 channels, a rank-32 selector over the top 8 candidates */
    const uint32_t conv_kernel = 4, conv_group = ts.dim % 16 == 0 ? 16 : 1, sel_rank = 32, sel_top_k = 8;
    if (dspark) {
        kite_gguf_w_bool(w, "dflash.sample_from_anchor", !bonus);
        kite_gguf_w_bool(w, "dflash.has_confidence_head", true);
    }
    if (v2) {
        if (ts.dim < sel_top_k * (sel_top_k + 1)) {
            st = kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: the target's width %u is under DFlash-2's lattice row of %u", what, ts.dim,
                           sel_top_k * (sel_top_k + 1));
            goto done;
        }
        kite_gguf_w_u32(w, "dflash.conv_kernel_size", conv_kernel);
        kite_gguf_w_u32(w, "dflash.conv_group_size", conv_group);
        kite_gguf_w_u32(w, "dflash.selector_rank", sel_rank);
        kite_gguf_w_u32(w, "dflash.selector_top_k", sel_top_k);
    }
    copy_tokenizer(w, ts.g, "tokenizer.ggml.mask_token_id");
    kite_gguf_w_u32(w, "tokenizer.ggml.mask_token_id", (uint32_t)(ts.V - 1));
    const int64_t D = ts.dim, qd = (int64_t)ts.n_heads * ts.head_dim, kvd = (int64_t)ts.n_kv * ts.head_dim, hd = ts.head_dim;
    const int64_t u = (int64_t)params->seed;
    if ((st = add_tensor(what, w, (uint64_t)u, "fc.weight", type, (int64_t)n * D, D, e))) goto done;
    if ((st = add_tensor(what, w, (uint64_t)u, "enc.output_norm.weight", type, D, 1, e))) goto done;
    for (int32_t l = 0; l < n; l++) {
        if (params->progress) params->progress((float)l / (float)n, params->progress_user_data);
        struct { const char *kind; int64_t cols, rows; } plan[] = {
            {"attn_norm", D, 1}, {"attn_q", D, qd}, {"attn_k", D, kvd}, {"attn_v", D, kvd}, {"attn_output", qd, D},
            {"attn_q_norm", hd, 1}, {"attn_k_norm", hd, 1}, {"ffn_norm", D, 1}, {"ffn_gate", D, ts.ffn}, {"ffn_up", D, ts.ffn},
            {"ffn_down", ts.ffn, D},
        };
        for (size_t i = 0; i < sizeof plan / sizeof plan[0]; i++) {
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, plan[i].kind);
            if ((st = add_tensor(what, w, (uint64_t)u, name, type, plan[i].cols, plan[i].rows, e))) goto done;
        }
        for (int c = 0; v2 && c < 2; c++) {
            const char *which = c == 0 ? "attn" : "ffn";
            snprintf(name, sizeof name, "blk.%d.%s_conv_base", l, which); /* llama.cpp's name has no .weight */
            if ((st = add_tensor_planes(what, w, (uint64_t)u, name, KITE_TYPE_F32, D, 2 * (int64_t)conv_kernel, 2, 1.0f, e))) goto done;
            snprintf(name, sizeof name, "blk.%d.%s_conv_proj.weight", l, which);
            if ((st = add_tensor(what, w, (uint64_t)u, name, type, D, 2 * (int64_t)conv_kernel * (D / conv_group), e))) goto done;
        }
    }
    if ((st = add_tensor(what, w, (uint64_t)u, "output_norm.weight", type, D, 1, e))) goto done;
    if (dspark) { /* a Markov head of rank 32, of unit scale (it weighs as much as the logits), and the confidence head */
        const int64_t mr = 32;
        if ((st = add_tensor_planes(what, w, (uint64_t)u, "markov_w1.weight", type, mr, ts.V, 1, 50.0f, e))) goto done;
        if ((st = add_tensor_planes(what, w, (uint64_t)u, "markov_w2.weight", type, mr, ts.V, 1, 50.0f, e))) goto done;
        if ((st = add_tensor(what, w, (uint64_t)u, "conf_proj.weight", KITE_TYPE_F32, D + mr, 1, e))) goto done;
        if ((st = add_tensor(what, w, (uint64_t)u, "conf_proj.bias", KITE_TYPE_F32, 1, 1, e))) goto done;
    }
    if (v2) {
        /* Codebooks of unit scale (50 x the stream's 0.02), so that the pair scores weigh as much as the
         * logits and the selector's walk is not the rows' argmaxes. */
        if ((st = add_tensor_planes(what, w, (uint64_t)u, "selector_predecessor.weight", type, sel_rank, ts.V, 1, 50.0f, e))) goto done;
        if ((st = add_tensor_planes(what, w, (uint64_t)u, "selector_successor.weight", type, sel_rank, ts.V, 1, 50.0f, e))) goto done;
        if ((st = add_tensor(what, w, (uint64_t)u, "selector_hidden.weight", type, D, sel_rank, e))) goto done;
    }
    st = kite_gguf_writer_save(w, path, e);
    if (!st && params->progress) params->progress(1.0f, params->progress_user_data);
done:
    kite_gguf_writer_free(w);
    target_close(&ts);
    return st;
}
