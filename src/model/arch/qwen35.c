#include "model/arch/qwen35.h"

#include <stdio.h>
#include <string.h>

#include "quant/types.h"

enum { MAX_HEADS = 1024, MAX_HEAD = 1024, MAX_KERNEL = 16 };

static int key_u32(const kite_gguf *g, const char *path, const char *suffix, uint32_t lo, uint32_t hi, bool required,
                   int32_t *out, kite_error *e) {
    char key[128];
    snprintf(key, sizeof key, "qwen35.%s", suffix);
    uint32_t v;
    if (!kite_gguf_get_u32(g, key, &v)) {
        if (kite_gguf_has(g, key)) return kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: %s is not one integer", path, key);
        if (required) return kite_fail(e, KITE_ERR_FORMAT, "%s: missing key %s (a qwen35 file needs it)", path, key);
        return KITE_OK;
    }
    if (v < lo || v > hi) return kite_fail(e, KITE_ERR_FORMAT, "%s: %s = %u is out of range (%u..%u)", path, key, v, lo, hi);
    *out = (int32_t)v;
    return KITE_OK;
}

int kite_qwen35_gguf_hparams(const kite_gguf *g, const char *path, kite_hparams *hp, kite_error *e) {
    int st;
    int32_t inner = 0, nextn = 0;
    hp->full_attn_interval = 4;
    hp->n_rot = hp->head_dim;
    if ((st = key_u32(g, path, "ssm.conv_kernel", 1, MAX_KERNEL, true, &hp->dn_conv_kernel, e)) ||
        (st = key_u32(g, path, "ssm.state_size", 1, MAX_HEAD, true, &hp->dn_head_k_dim, e)) ||
        (st = key_u32(g, path, "ssm.group_count", 1, MAX_HEADS, true, &hp->dn_n_k_heads, e)) ||
        (st = key_u32(g, path, "ssm.time_step_rank", 1, MAX_HEADS, true, &hp->dn_n_v_heads, e)) ||
        (st = key_u32(g, path, "ssm.inner_size", 1, MAX_HEADS * MAX_HEAD, true, &inner, e)) ||
        (st = key_u32(g, path, "full_attention_interval", 1, 4096, false, &hp->full_attn_interval, e)) ||
        (st = key_u32(g, path, "rope.dimension_count", 2, (uint32_t)hp->head_dim, false, &hp->n_rot, e)) ||
        (st = key_u32(g, path, "nextn_predict_layers", 0, KITE_MAX_NEXTN_LAYERS, false, &nextn, e)))
        return st;
    if (kite_gguf_has(g, "qwen35.attention.recurrent_layers"))
        return kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: qwen35.attention.recurrent_layers (a per-layer pattern) is not supported; "
                         "kite follows full_attention_interval", path);
    if (hp->dn_n_v_heads % hp->dn_n_k_heads != 0 || inner % hp->dn_n_v_heads != 0)
        return kite_fail(e, KITE_ERR_FORMAT, "%s: %d value heads are not a multiple of %d key heads, or inner size %d of them",
                         path, hp->dn_n_v_heads, hp->dn_n_k_heads, inner);
    hp->dn_head_v_dim = inner / hp->dn_n_v_heads;
    if (nextn >= hp->n_layers)
        return kite_fail(e, KITE_ERR_FORMAT, "%s: %d next-token layers of %d blocks leave no trunk", path, nextn, hp->n_layers);
    hp->n_nextn_layers = nextn;
    hp->n_layers -= nextn;
    hp->attn_output_gate = true;
    hp->dn_v_grouped = false; /* the converter reordered the value heads to llama.cpp's tiled order */
    return KITE_OK;
}

const char *kite_qwen35_hf_layer_name(const char *hf_suffix) {
    static const struct { const char *hf, *canon; } names[] = {
        {"linear_attn.in_proj_qkv.weight", "attn_qkv.weight"}, {"linear_attn.in_proj_z.weight", "attn_gate.weight"},
        {"linear_attn.in_proj_b.weight", "ssm_beta.weight"},   {"linear_attn.in_proj_a.weight", "ssm_alpha.weight"},
        {"linear_attn.conv1d.weight", "ssm_conv1d.weight"},    {"linear_attn.dt_bias", "ssm_dt.bias"},
        {"linear_attn.A_log", "ssm_a_log"},                    {"linear_attn.norm.weight", "ssm_norm.weight"},
        {"linear_attn.out_proj.weight", "ssm_out.weight"},     {"post_attention_layernorm.weight", "post_attention_norm.weight"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(hf_suffix, names[i].hf) == 0) return names[i].canon;
    return NULL;
}

/* A tensor of `count` elements whose innermost dimension is ne0 (any split of the rest). */
static int check(const kite_source *src, const char *name, int64_t ne0, int64_t count, bool matrix, kite_error *e) {
    const kite_tensor *t = kite_source_find(src, name);
    if (!t) return kite_fail(e, KITE_ERR_FORMAT, "%s: required tensor %s is missing", src->format, name);
    int64_t n = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
    if (t->ne[0] != ne0 || n != count || (matrix && (t->ne[2] != 1 || t->ne[3] != 1)))
        return kite_fail(e, KITE_ERR_FORMAT, "%s: tensor %s has shape [%lld, %lld, %lld] but the hyper-parameters need %lld x %lld",
                         src->format, name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)ne0,
                         (long long)(count / ne0));
    const kite_type_traits *tr = kite_type_get(t->type);
    if (!t->data || !tr || !tr->to_float || ne0 % tr->block_size != 0)
        return kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: tensor %s: type %u is not supported here", src->format, name, t->type);
    return KITE_OK;
}

int kite_qwen35_validate(const kite_source *src, kite_error *e) {
    const kite_hparams *hp = &src->hp;
    if (hp->dn_conv_kernel < 1 || hp->dn_conv_kernel > MAX_KERNEL || hp->dn_head_k_dim < 1 || hp->dn_head_v_dim < 1 ||
        hp->dn_n_k_heads < 1 || hp->dn_n_v_heads % hp->dn_n_k_heads != 0 || hp->full_attn_interval < 1 ||
        hp->n_rot < 2 || hp->n_rot > hp->head_dim || hp->n_rot % 2 != 0 || hp->dn_head_k_dim != hp->dn_head_v_dim)
        return kite_fail(e, KITE_ERR_FORMAT, "%s: Gated DeltaNet hyper-parameters are inconsistent (conv %d, heads %d/%d of %d/%d, "
                         "interval %d, rotary %d of %d; k and v heads must be the same size)", src->format, hp->dn_conv_kernel,
                         hp->dn_n_k_heads, hp->dn_n_v_heads, hp->dn_head_k_dim, hp->dn_head_v_dim, hp->full_attn_interval,
                         hp->n_rot, hp->head_dim);
    const int64_t dim = hp->dim, q_dim = (int64_t)hp->n_heads * hp->head_dim, kv_dim = (int64_t)hp->n_kv_heads * hp->head_dim;
    const int64_t key_dim = (int64_t)hp->dn_n_k_heads * hp->dn_head_k_dim, value_dim = (int64_t)hp->dn_n_v_heads * hp->dn_head_v_dim;
    const int64_t conv_dim = 2 * key_dim + value_dim;
    char name[96];
    int st;
#define CHECK(suffix, ne0, count, matrix)                                                           \
    do {                                                                                            \
        snprintf(name, sizeof name, "blk.%d." suffix, l);                                           \
        if ((st = check(src, name, ne0, count, matrix, e))) return st;                              \
    } while (0)
    for (int32_t l = 0; l < hp->n_layers; l++) {
        CHECK("attn_norm.weight", dim, dim, false);
        CHECK("post_attention_norm.weight", dim, dim, false);
        CHECK("ffn_gate.weight", dim, dim * hp->ffn_dim, true);
        CHECK("ffn_up.weight", dim, dim * hp->ffn_dim, true);
        CHECK("ffn_down.weight", hp->ffn_dim, dim * hp->ffn_dim, true);
        if (kite_layer_is_recurrent(hp, l)) {
            CHECK("attn_qkv.weight", dim, dim * conv_dim, true);
            CHECK("attn_gate.weight", dim, dim * value_dim, true);
            CHECK("ssm_beta.weight", dim, dim * hp->dn_n_v_heads, true);
            CHECK("ssm_alpha.weight", dim, dim * hp->dn_n_v_heads, true);
            CHECK("ssm_conv1d.weight", hp->dn_conv_kernel, hp->dn_conv_kernel * conv_dim, false);
            CHECK("ssm_dt.bias", hp->dn_n_v_heads, hp->dn_n_v_heads, false);
            snprintf(name, sizeof name, "blk.%d.ssm_a", l);
            if (kite_source_find(src, name)) CHECK("ssm_a", hp->dn_n_v_heads, hp->dn_n_v_heads, false);
            else CHECK("ssm_a_log", hp->dn_n_v_heads, hp->dn_n_v_heads, false);
            CHECK("ssm_norm.weight", hp->dn_head_v_dim, hp->dn_head_v_dim, false);
            CHECK("ssm_out.weight", value_dim, dim * value_dim, true);
        } else {
            CHECK("attn_q.weight", dim, dim * 2 * q_dim, true);
            CHECK("attn_k.weight", dim, dim * kv_dim, true);
            CHECK("attn_v.weight", dim, dim * kv_dim, true);
            CHECK("attn_output.weight", q_dim, dim * q_dim, true);
            CHECK("attn_q_norm.weight", hp->head_dim, hp->head_dim, false);
            CHECK("attn_k_norm.weight", hp->head_dim, hp->head_dim, false);
        }
    }
#undef CHECK
    if (hp->n_experts != 0) return kite_fail(e, KITE_ERR_FORMAT, "%s: experts in a dense architecture", src->format);
    return KITE_OK;
}
