#include "model/arch/gemma3.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

const char *const kite_gemma3_extra_layer_norms[] = {"post_attention_norm.weight", "post_ffw_norm.weight", NULL};

const char *kite_gemma3_hf_layer_name(const char *hf_suffix) {
    static const struct { const char *hf, *canon; } names[] = {
        {"post_attention_layernorm.weight", "post_attention_norm.weight"},
        {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
        {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(hf_suffix, names[i].hf) == 0) return names[i].canon;
    return NULL;
}

enum { MAX_WINDOW = 1 << 24, MAX_PERIOD = 4096 };

int kite_gemma3_gguf_hparams(const kite_gguf *g, const char *path, kite_hparams *hp, kite_error *e) {
    hp->ffn_act = KITE_FFN_GELU_TANH;
    hp->embd_scale = sqrtf((float)hp->dim);
    hp->norm_weight_offset = 0.0f;
    const float query_pre_attn_scalar = hp->n_layers == 62 ? (float)(hp->dim / hp->n_heads) : (float)hp->head_dim;
    hp->attn_scale = 1.0f / sqrtf(query_pre_attn_scalar);
    uint32_t v;
    hp->sliding_window = 0;
    hp->swa_period = 6;
    hp->rope_theta_local = 10000.0f;
    if (kite_gguf_get_u32(g, "gemma3.attention.sliding_window", &v) && v > 0) {
        if (v > MAX_WINDOW)
            return kite_fail(e, KITE_ERR_FORMAT, "%s: gemma3.attention.sliding_window = %u is out of range (1..%d)", path, v,
                             MAX_WINDOW);
        hp->sliding_window = (int32_t)v;
        if (kite_gguf_get_u32(g, "gemma3.attention.sliding_window_pattern", &v)) {
            if (v > MAX_PERIOD)
                return kite_fail(e, KITE_ERR_FORMAT, "%s: gemma3.attention.sliding_window_pattern = %u is out of range (0..%d)",
                                 path, v, MAX_PERIOD);
            hp->swa_period = (int32_t)v;
        } else if (kite_gguf_has(g, "gemma3.attention.sliding_window_pattern")) {
            return kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: gemma3.attention.sliding_window_pattern is not one integer (a "
                             "per-layer array is not supported)", path);
        }
        float base;
        if (kite_gguf_get_f32(g, "gemma3.rope.freq_base_swa", &base)) {
            if (!(base > 0.0f) || !isfinite(base))
                return kite_fail(e, KITE_ERR_FORMAT, "%s: gemma3.rope.freq_base_swa = %g must be positive", path, (double)base);
            hp->rope_theta_local = base;
        }
    }
    float cap;
    hp->final_logit_softcap = 0.0f;
    if (kite_gguf_get_f32(g, "gemma3.final_logit_softcapping", &cap)) {
        if (!(cap >= 0.0f) || !isfinite(cap))
            return kite_fail(e, KITE_ERR_FORMAT, "%s: gemma3.final_logit_softcapping = %g must not be negative", path, (double)cap);
        hp->final_logit_softcap = cap;
    }
    return KITE_OK;
}
