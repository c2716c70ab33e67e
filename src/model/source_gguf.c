/* GGUF model files: hyper-parameters from "<arch>.*" keys, tensors already under canonical names. */
#include <stdio.h>
#include <string.h>

#include "model/arch/gemma3.h"
#include "model/arch/qwen35.h"
#include "model/arch/lfm2.h"
#include "model/arch/gemma4.h"
#include "model/arch/qwen3moe.h"
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
    char key[128];
    kite_gguf_vtype type;
    uint64_t n;
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    if (kite_gguf_get_arr(g, key, &type, &n))
        return kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: %s is a per-layer array; kite supports one value for every layer", path, key);
    if (!arch_u32(g, arch, suffix, &v)) return kite_fail(e, KITE_ERR_FORMAT, "%s: missing or non-integer key %s.%s", path, arch, suffix);
    if (v == 0 || v > max) return kite_fail(e, KITE_ERR_FORMAT, "%s: %s.%s = %u is out of range (1..%u)", path, arch, suffix, v, max);
    *out = (int32_t)v;
    return KITE_OK;
}

static int add_tensors(kite_source *src, const kite_gguf *g, kite_error *e) {
    for (int64_t i = 0; i < kite_gguf_n_tensors(g); i++) {
        const kite_gguf_tensor *t = kite_gguf_tensor_at(g, i);
        char name[96];
        if (t->name.len >= sizeof name) continue; /* longer than any canonical name */
        memcpy(name, t->name.ptr, t->name.len);
        name[t->name.len] = 0;
        if (!kite_source_add_tensor(src, name, t->type, t->n_dims, t->ne, t->data, t->n_bytes, e)) return e->status;
    }
    return KITE_OK;
}

/* A split model (llama.cpp's gguf-split: name-00001-of-0000N.gguf): the first part holds the metadata
 * and some tensors, with split.no = 0, split.count = N and split.tensors.count = all tensors; parts
 * 2..N hold the other tensors (each with its split.no). All are mapped and read as one model. */
static int open_split_parts(kite_source *src, const char *path, kite_error *e) {
    const kite_gguf *g = src->gguf;
    uint32_t count = 0, no = 0, n_total = 0;
    if (!kite_gguf_get_u32(g, "split.count", &count) || count <= 1) return KITE_OK;
    kite_gguf_get_u32(g, "split.no", &no);
    const uint32_t max_parts = (uint32_t)(sizeof src->maps / sizeof src->maps[0]);
    if (count > max_parts) return kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: split into %u files; kite reads at most %u", path, count, max_parts);
    size_t len = strlen(path);
    char suffix[32];
    snprintf(suffix, sizeof suffix, "-%05u-of-%05u.gguf", no + 1, count);
    size_t slen = strlen(suffix);
    if (len < slen || strcmp(path + len - slen, suffix))
        return kite_fail(e, KITE_ERR_FORMAT, "%s: part %u of a split model of %u files, but its name does not end in %s", path, no + 1, count, suffix);
    if (no != 0) {
        return kite_fail(e, KITE_ERR_INVALID_ARG, "%s is part %u of a split model: open the first part, %.*s-00001-of-%05u.gguf",
                         path, no + 1, (int)(len - slen), path, count);
    }
    for (uint32_t part = 2; part <= count; part++) {
        char part_path[4096];
        snprintf(part_path, sizeof part_path, "%.*s-%05u-of-%05u.gguf", (int)(len - slen), path, part, count);
        kite_mapped_file *m = &src->maps[src->n_maps];
        int st = kite_map_file(m, part_path, e);
        if (st) return kite_fail(e, st, "%s: part %u of %u of the split model is missing or unreadable: %s", path, part, count, e->msg);
        src->n_maps++;
        kite_gguf *pg = NULL;
        if ((st = kite_gguf_open(&pg, m->data, m->size, e))) {
            char inner[sizeof e->msg];
            snprintf(inner, sizeof inner, "%s", e->msg);
            return kite_fail(e, st, "%s: %s", part_path, inner);
        }
        uint32_t pno = UINT32_MAX, pcount = 0;
        if (!kite_gguf_get_u32(pg, "split.no", &pno) || pno != part - 1 || !kite_gguf_get_u32(pg, "split.count", &pcount) || pcount != count) {
            kite_gguf_free(pg);
            return kite_fail(e, KITE_ERR_FORMAT, "%s: split.no / split.count do not say part %u of %u", part_path, part, count);
        }
        st = add_tensors(src, pg, e); /* tensor data lives in the mapping, not in the parsed header */
        kite_gguf_free(pg);
        if (st) return st;
    }
    if (kite_gguf_get_u32(g, "split.tensors.count", &n_total) && (int64_t)n_total != src->n_tensors)
        return kite_fail(e, KITE_ERR_FORMAT, "%s: split.tensors.count is %u but the %u parts hold %d tensors", path, n_total, count, src->n_tensors);
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
    uint32_t split_no = 0, split_count = 0;
    if (kite_gguf_get_u32(g, "split.no", &split_no) && split_no > 0 && kite_gguf_get_u32(g, "split.count", &split_count)) {
        /* later parts carry no metadata: only the first part opens the model */
        st = open_split_parts(src, path, e);
        goto fail;
    }
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
    } else if (gguf_str_eq(arch_str, "qwen3moe")) {
        hp->arch = KITE_ARCH_QWEN3MOE;
        hp->rope_layout = KITE_ROPE_HALF;
    } else if (gguf_str_eq(arch_str, "qwen35")) {
        hp->arch = KITE_ARCH_QWEN35;
        hp->rope_layout = KITE_ROPE_HALF; /* NEOX (IMROPE, whose sections see one text position) */
    } else if (gguf_str_eq(arch_str, "qwen35moe") || gguf_str_eq(arch_str, "qwen3next")) {
        st = kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: architecture '%s' (Gated DeltaNet with routed experts) is not supported yet; "
                       "kite runs the dense qwen35", path, arch);
        goto fail;
    } else if (gguf_str_eq(arch_str, "gemma3")) {
        hp->arch = KITE_ARCH_GEMMA3;
        hp->rope_layout = KITE_ROPE_HALF; /* llama.cpp's NEOX type, no q/k permutation */
    } else if (gguf_str_eq(arch_str, "gemma4")) {
        hp->arch = KITE_ARCH_GEMMA4;
        hp->rope_layout = KITE_ROPE_HALF; /* NEOX */
    } else if (gguf_str_eq(arch_str, "muse-glimmer")) {
        hp->arch = KITE_ARCH_MUSE_GLIMMER;
        hp->rope_layout = KITE_ROPE_INTERLEAVED; /* llama.cpp's NORM type; the converter un-permutes HF's q/k */
    } else if (gguf_str_eq(arch_str, "lfm2")) {
        hp->arch = KITE_ARCH_LFM2;
        hp->rope_layout = KITE_ROPE_HALF; /* llama.cpp's NEOX type */
    } else {
        st = kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: unsupported architecture '%s'; kite runs llama, qwen2, qwen3, qwen3moe, qwen35, gemma3, "
                       "gemma4, muse-glimmer, lfm2", path, arch);
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
    {
        char key[128];
        kite_gguf_vtype type;
        uint64_t n;
        snprintf(key, sizeof key, "%s.attention.head_count_kv", arch);
        int64_t first;
        /* per layer (Gemma 4's converter): the first layer's count here, the per-kind counts in arch/gemma4.c;
         * LFM2's (0 marking a conv layer) are read by arch/lfm2.c */
        if (hp->arch != KITE_ARCH_LFM2 && kite_gguf_get_arr(g, key, &type, &n)) {
            if (hp->arch != KITE_ARCH_GEMMA4) {
                st = kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: per-layer %s is not supported for %s", path, key, arch);
                goto fail;
            }
            hp->n_kv_heads = n > 0 && kite_gguf_arr_i64(g, key, 0, &first) && first > 0 && first <= hp->n_heads ? (int32_t)first : 0;
        }
    }
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
    if (hp->arch != KITE_ARCH_QWEN35 && arch_u32(g, arch, "rope.dimension_count", &v) && (int32_t)v != hp->head_dim) {
        st = kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: partial RoPE (%u of %d dimensions) is not supported", path, v, hp->head_dim);
        goto fail;
    }
    if (hp->arch == KITE_ARCH_GEMMA3 && (st = kite_gemma3_gguf_hparams(g, path, hp, e))) goto fail;
    if (hp->arch == KITE_ARCH_GEMMA4 && (st = kite_gemma4_gguf_hparams(g, path, hp, e))) goto fail;
    if (hp->arch == KITE_ARCH_MUSE_GLIMMER && (st = kite_muse_glimmer_gguf_hparams(g, path, hp, e))) goto fail;
    if (hp->arch == KITE_ARCH_QWEN3MOE && (st = kite_qwen3moe_gguf_hparams(g, path, hp, e))) goto fail;
    if (hp->arch == KITE_ARCH_QWEN35 && (st = kite_qwen35_gguf_hparams(g, path, hp, e))) goto fail;
    if (hp->arch == KITE_ARCH_LFM2 && (st = kite_lfm2_gguf_hparams(g, path, hp, e))) goto fail;
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

    if ((st = add_tensors(src, g, e)) || (st = open_split_parts(src, path, e))) goto fail;
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
