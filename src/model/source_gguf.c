/* GGUF model files: hyper-parameters from "<arch>.*" keys, tensors already under canonical names. */
#include <stdio.h>
#include <string.h>

#include "model/arch/gemma3.h"
#include "model/source.h"
#include "model/validate.h"
#include "quant/types.h"

static bool gguf_str_eq(kite_gguf_str s, const char *lit) { return s.len == strlen(lit) && memcmp(s.ptr, lit, s.len) == 0; }

static bool arch_u32(const kite_gguf *g, const char *arch, const char *suffix, uint32_t *v) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return kite_gguf_get_u32(g, key, v);
}

static bool arch_f32(const kite_gguf *g, const char *arch, const char *suffix, float *v) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return kite_gguf_get_f32(g, key, v);
}

static int required_u32(const kite_gguf *g, const char *path, const char *arch, const char *suffix, uint32_t max,
                        int32_t *out, kite_error *e) {
    uint32_t v;
    if (!arch_u32(g, arch, suffix, &v)) return kite_fail(e, KITE_ERR_FORMAT, "%s: missing or non-integer key %s.%s", path, arch, suffix);
    if (v == 0 || v > max) return kite_fail(e, KITE_ERR_FORMAT, "%s: %s.%s = %u is out of range (1..%u)", path, arch, suffix, v, max);
    *out = (int32_t)v;
    return KITE_OK;
}

int kite_source_open_gguf(kite_source *src, const char *path, kite_error *e) {
    memset(src, 0, sizeof *src);
    snprintf(src->format, sizeof src->format, "gguf");
    src->bos_id = src->eos_id = -1;
    src->gen_defaults = kite_gen_default_params();
    int st = kite_map_file(&src->maps[0], path, e);
    if (st) return st;
    src->n_maps = 1;
    if ((st = kite_gguf_open(&src->gguf, src->maps[0].data, src->maps[0].size, e))) {
        char inner[sizeof e->msg];
        snprintf(inner, sizeof inner, "%s", e->msg);
        kite_fail(e, st, "%s: %s", path, inner);
        goto fail;
    }
    const kite_gguf *g = src->gguf;
    kite_gguf_str arch_str;
    if (!kite_gguf_get_str(g, "general.architecture", &arch_str)) {
        st = kite_fail(e, KITE_ERR_FORMAT, "%s: missing general.architecture", path);
        goto fail;
    }
    char arch[64];
    snprintf(arch, sizeof arch, "%.*s", (int)(arch_str.len < 63 ? arch_str.len : 63), arch_str.ptr);
    kite_hparams *hp = &src->hp;
    if (gguf_str_eq(arch_str, "llama")) {
        hp->arch = KITE_ARCH_LLAMA;
        hp->rope_layout = KITE_ROPE_INTERLEAVED; /* llama.cpp's converter permutes q/k for this layout */
    } else if (gguf_str_eq(arch_str, "qwen2")) {
        hp->arch = KITE_ARCH_QWEN2;
        hp->rope_layout = KITE_ROPE_HALF;
    } else if (gguf_str_eq(arch_str, "qwen3")) {
        hp->arch = KITE_ARCH_QWEN3;
        hp->rope_layout = KITE_ROPE_HALF;
    } else if (gguf_str_eq(arch_str, "gemma3")) {
        hp->arch = KITE_ARCH_GEMMA3;
        hp->rope_layout = KITE_ROPE_HALF; /* llama.cpp's NEOX type, no q/k permutation */
    } else {
        st = kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: unsupported architecture '%s'; kite runs llama, qwen2, qwen3, gemma3", path, arch);
        goto fail;
    }
    const uint32_t big = 1u << 20;
    if ((st = required_u32(g, path, arch, "embedding_length", big, &hp->dim, e)) ||
        (st = required_u32(g, path, arch, "block_count", 4096, &hp->n_layers, e)) ||
        (st = required_u32(g, path, arch, "feed_forward_length", big, &hp->ffn_dim, e)) ||
        (st = required_u32(g, path, arch, "attention.head_count", 4096, &hp->n_heads, e)))
        goto fail;
    uint32_t v;
    hp->n_kv_heads = arch_u32(g, arch, "attention.head_count_kv", &v) ? (int32_t)v : hp->n_heads;
    hp->head_dim = arch_u32(g, arch, "attention.key_length", &v) ? (int32_t)v : hp->dim / hp->n_heads;
    hp->n_ctx_train = arch_u32(g, arch, "context_length", &v) ? (int32_t)v : 2048;
    if (!arch_f32(g, arch, "attention.layer_norm_rms_epsilon", &hp->rms_eps)) hp->rms_eps = 1e-5f;
    if (!arch_f32(g, arch, "rope.freq_base", &hp->rope_theta)) hp->rope_theta = 10000.0f;
    if (hp->n_kv_heads <= 0 || hp->n_heads % hp->n_kv_heads != 0 || hp->head_dim <= 0 || hp->head_dim % 2 != 0 ||
        hp->head_dim > 4096 || hp->n_ctx_train <= 0 || !(hp->rms_eps > 0) || !(hp->rope_theta > 0)) {
        st = kite_fail(e, KITE_ERR_FORMAT, "%s: inconsistent attention hyper-parameters (heads %d, kv heads %d, head dim %d)",
                       path, hp->n_heads, hp->n_kv_heads, hp->head_dim);
        goto fail;
    }
    if (arch_u32(g, arch, "rope.dimension_count", &v) && (int32_t)v != hp->head_dim) {
        st = kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: partial RoPE (%u of %d dimensions) is not supported", path, v, hp->head_dim);
        goto fail;
    }
    if (hp->arch == KITE_ARCH_GEMMA3 && (st = kite_gemma3_gguf_hparams(g, path, hp, e))) goto fail;
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    kite_gguf_str scaling;
    if (kite_gguf_get_str(g, key, &scaling) && !gguf_str_eq(scaling, "none")) {
        if (gguf_str_eq(scaling, "linear") && arch_f32(g, arch, "rope.scaling.factor", &hp->rope_factor) && hp->rope_factor > 0) {
            hp->rope_scaling = KITE_ROPE_SCALING_LINEAR;
        } else {
            st = kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: RoPE scaling '%.*s' is not supported", path, (int)scaling.len, scaling.ptr);
            goto fail;
        }
    }

    for (int64_t i = 0; i < kite_gguf_n_tensors(g); i++) {
        const kite_gguf_tensor *t = kite_gguf_tensor_at(g, i);
        char name[96];
        if (t->name.len >= sizeof name) continue; /* longer than any canonical name */
        memcpy(name, t->name.ptr, t->name.len);
        name[t->name.len] = 0;
        if (!kite_source_add_tensor(src, name, t->type, t->n_dims, t->ne, t->data, t->n_bytes, e)) { st = e->status; goto fail; }
    }
    const kite_tensor *embd = kite_source_find(src, "token_embd.weight");
    if (!embd) { st = kite_fail(e, KITE_ERR_FORMAT, "%s: missing tensor token_embd.weight", path); goto fail; }
    hp->n_vocab = (int32_t)embd->ne[1];
    if (arch_u32(g, arch, "vocab_size", &v) && (int64_t)v != embd->ne[1]) {
        st = kite_fail(e, KITE_ERR_FORMAT, "%s: %s.vocab_size %u disagrees with token_embd.weight rows %lld", path, arch, v,
                       (long long)embd->ne[1]);
        goto fail;
    }
    hp->tied_embeddings = kite_source_find(src, "output.weight") == NULL;
    if (kite_gguf_get_u32(g, "tokenizer.ggml.bos_token_id", &v)) src->bos_id = (int32_t)v;
    if (kite_gguf_get_u32(g, "tokenizer.ggml.eos_token_id", &v)) src->eos_id = (int32_t)v;
    if ((st = kite_source_validate(src, e))) {
        char inner[sizeof e->msg];
        snprintf(inner, sizeof inner, "%s", e->msg);
        kite_fail(e, st, "%s: %s", path, inner);
        goto fail;
    }
    return KITE_OK;
fail:
    kite_source_close(src);
    return st;
}
