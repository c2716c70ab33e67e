/* kite gen-model --shape eagle3 --target TARGET.gguf: a random-weight EAGLE-3 head that fits the target,
 * in llama.cpp's tensor names and metadata (architecture "eagle3", as its converter writes a head for
 * Llama 3.1 8B): the target's width, heads and FFN size, its tokenizer (copied), an output layer of its
 * own over the whole vocabulary (no d2t), the target's embedding borrowed (no token_embd), and target
 * layers [2, L/2, L-3] as the converter derives them (for targets under 6 layers [0, L/2, L-1], and
 * [0, 1, 2] for 2 layers: 2 is the last layer's output, which llama.cpp's llama graph does not expose). Weights
 * come from the random-model stream (kite_random_model_row), quantized with the reference quantizers. */
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

static uint32_t matrix_type(const char *type, kite_error *e, bool *ok) {
    static const struct { const char *name; uint32_t t; } k[] = {
        {"f32", KITE_TYPE_F32}, {"f16", KITE_TYPE_F16}, {"bf16", KITE_TYPE_BF16}, {"q8_0", KITE_TYPE_Q8_0}, {"q4_0", KITE_TYPE_Q4_0}};
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        if (!strcmp(type, k[i].name)) { *ok = true; return k[i].t; }
    *ok = false;
    kite_fail(e, KITE_ERR_INVALID_ARG, "random EAGLE-3 head: type '%s' is not one of f32, f16, bf16, q8_0, q4_0", type);
    return 0;
}

static int add_tensor(kite_gguf_writer *w, uint64_t seed, const char *name, uint32_t type, int64_t cols, int64_t rows,
                      kite_error *e) {
    if (rows == 1) type = KITE_TYPE_F32; /* norms */
    const kite_type_traits *tr = kite_type_get(type);
    if (cols % tr->block_size)
        return kite_fail(e, KITE_ERR_UNSUPPORTED, "random EAGLE-3 head: %s has rows of %lld, not a multiple of %s's block of %d",
                         name, (long long)cols, tr->name, tr->block_size);
    size_t row_bytes = kite_type_row_bytes(type, cols);
    unsigned char *data = malloc(row_bytes * (size_t)rows);
    float *row = malloc(sizeof(float) * (size_t)cols);
    if (!data || !row) {
        free(data), free(row);
        return kite_fail(e, KITE_ERR_NOMEM, "random EAGLE-3 head: out of memory for %s", name);
    }
    for (int64_t r = 0; r < rows; r++) {
        kite_random_model_row(seed, name, r, row, cols);
        tr->from_float(row, data + (size_t)r * row_bytes, cols);
    }
    int64_t ne[2] = {cols, rows};
    kite_gguf_w_tensor(w, name, type, rows > 1 ? 2 : 1, ne, data, row_bytes * (size_t)rows);
    free(data), free(row);
    return KITE_OK;
}

int kite_write_random_eagle3(const char *path, const kite_random_model_params *params, kite_error *e) {
    if (!params->target_path)
        return kite_fail(e, KITE_ERR_INVALID_ARG, "random EAGLE-3 head: --target TARGET.gguf is needed (the head must fit a target)");
    bool ok;
    uint32_t type = matrix_type(params->type ? params->type : "f32", e, &ok);
    if (!ok) return e->status;
    kite_mapped_file f;
    int st = kite_map_file(&f, params->target_path, e);
    if (st) return st;
    kite_gguf *g = NULL;
    kite_gguf_writer *w = NULL;
    if (f.size < 4 || memcmp(f.data, "GGUF", 4) != 0) {
        st = kite_fail(e, KITE_ERR_FORMAT, "random EAGLE-3 head: target %s is not a GGUF file", params->target_path);
        goto done;
    }
    if ((st = kite_gguf_open(&g, f.data, f.size, e))) goto done;
    kite_gguf_str a;
    char arch[64];
    if (!kite_gguf_get_str(g, "general.architecture", &a) || a.len >= sizeof arch) {
        st = kite_fail(e, KITE_ERR_FORMAT, "random EAGLE-3 head: target %s has no general.architecture", params->target_path);
        goto done;
    }
    memcpy(arch, a.ptr, a.len);
    arch[a.len] = 0;
    uint32_t dim = 0, L = 0, n_heads = 0, n_kv = 0, ffn = 0, head_dim = 0, n_ctx = 4096;
    float theta = 10000.0f, eps = 1e-5f;
    const kite_gguf_tensor *embd = kite_gguf_find_tensor(g, "token_embd.weight");
    if (!target_u32(g, arch, "embedding_length", &dim) || !target_u32(g, arch, "block_count", &L) ||
        !target_u32(g, arch, "attention.head_count", &n_heads) || !target_u32(g, arch, "feed_forward_length", &ffn) || !embd ||
        n_heads == 0 || L == 0) {
        st = kite_fail(e, KITE_ERR_FORMAT, "random EAGLE-3 head: target %s lacks its width, layers, heads, FFN or embedding",
                       params->target_path);
        goto done;
    }
    if (!target_u32(g, arch, "attention.head_count_kv", &n_kv)) n_kv = n_heads;
    if (!target_u32(g, arch, "attention.key_length", &head_dim)) head_dim = dim / n_heads;
    (void)target_u32(g, arch, "context_length", &n_ctx);
    char key[128];
    snprintf(key, sizeof key, "%s.rope.freq_base", arch);
    (void)kite_gguf_get_f32(g, key, &theta);
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", arch);
    (void)kite_gguf_get_f32(g, key, &eps);
    int64_t V = embd->ne[1];
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
    for (int64_t i = 0; i < kite_gguf_n_kv(g); i++) { /* the target's tokenizer, as the converter copies it */
        kite_gguf_str k = kite_gguf_key(g, i);
        if (k.len > 10 && !memcmp(k.ptr, "tokenizer.", 10)) kite_gguf_w_copy_kv(w, g, i);
    }
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
        if ((st = add_tensor(w, (uint64_t)u, plan[i].name, type, plan[i].cols, plan[i].rows, e))) goto done;
    }
    st = kite_gguf_writer_save(w, path, e);
    if (!st && params->progress) params->progress(1.0f, params->progress_user_data);
done:
    kite_gguf_writer_free(w);
    kite_gguf_free(g);
    kite_unmap_file(&f);
    return st;
}
