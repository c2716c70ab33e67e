#include "model/arch/lfm2.h"

#include <stdio.h>
#include <string.h>

int kite_lfm2_gguf_hparams(const kite_gguf *g, const char *path, kite_hparams *hp, kite_error *e) {
    uint32_t taps = 0;
    if (!kite_gguf_get_u32(g, "lfm2.shortconv.l_cache", &taps))
        return kite_fail(e, KITE_ERR_FORMAT, "%s: missing or non-integer key lfm2.shortconv.l_cache", path);
    if (taps < 2 || taps > KITE_LFM2_MAX_TAPS)
        return kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: lfm2.shortconv.l_cache = %u is outside 2..%d", path, taps, KITE_LFM2_MAX_TAPS);
    if (hp->n_layers > KITE_MAX_CONV_LAYERS)
        return kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: %d layers; kite runs LFM2 models of up to %d", path, hp->n_layers,
                         KITE_MAX_CONV_LAYERS);
    uint32_t window = 0;
    if (kite_gguf_get_u32(g, "lfm2.attention.sliding_window", &window) && window > 0)
        return kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: LFM2 with a sliding window (%u) is not supported", path, window);
    hp->conv_taps = (int32_t)taps;
    memset(hp->conv_layers, 0, sizeof hp->conv_layers);
    kite_gguf_vtype type;
    uint64_t n = 0;
    if (!kite_gguf_get_arr(g, "lfm2.attention.head_count_kv", &type, &n)) {
        /* one integer for every layer (or absent): no conv layers, every layer attends */
        if (kite_gguf_has(g, "lfm2.attention.head_count_kv") && !kite_gguf_get_u32(g, "lfm2.attention.head_count_kv", &taps))
            return kite_fail(e, KITE_ERR_FORMAT, "%s: lfm2.attention.head_count_kv is neither an integer nor an array", path);
        return KITE_OK;
    }
    if (n != (uint64_t)hp->n_layers)
        return kite_fail(e, KITE_ERR_FORMAT, "%s: lfm2.attention.head_count_kv has %llu entries for %d layers", path,
                         (unsigned long long)n, hp->n_layers);
    int64_t kv_heads = 0;
    for (uint64_t l = 0; l < n; l++) {
        int64_t v;
        if (!kite_gguf_arr_i64(g, "lfm2.attention.head_count_kv", l, &v) || v < 0 || v > hp->n_heads)
            return kite_fail(e, KITE_ERR_FORMAT, "%s: lfm2.attention.head_count_kv[%llu] is not an integer in 0..%d", path,
                             (unsigned long long)l, hp->n_heads);
        if (v == 0) {
            hp->conv_layers[l / 64] |= (uint64_t)1 << (l % 64);
            continue;
        }
        if (kv_heads != 0 && v != kv_heads)
            return kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: attention layers with %lld and %lld KV heads (one count is supported)",
                             path, (long long)kv_heads, (long long)v);
        kv_heads = v;
    }
    /* every layer a conv layer: n_kv_heads stays n_heads, unused */
    if (kv_heads > 0) hp->n_kv_heads = (int32_t)kv_heads;
    return KITE_OK;
}

const char *kite_lfm2_hf_layer_name(const char *hf_suffix, bool *unsupported) {
    static const struct { const char *hf, *canon; } names[] = {
        {"operator_norm.weight", "attn_norm.weight"},
        {"ffn_norm.weight", "ffn_norm.weight"},
        {"feed_forward.w1.weight", "ffn_gate.weight"},
        {"feed_forward.w3.weight", "ffn_up.weight"},
        {"feed_forward.w2.weight", "ffn_down.weight"},
        {"self_attn.out_proj.weight", "attn_output.weight"},
        {"self_attn.q_layernorm.weight", "attn_q_norm.weight"},
        {"self_attn.k_layernorm.weight", "attn_k_norm.weight"},
        {"conv.in_proj.weight", "shortconv.in_proj.weight"},
        {"conv.conv.weight", "shortconv.conv.weight"},
        {"conv.out_proj.weight", "shortconv.out_proj.weight"},
        {"conv.in_proj.bias", NULL},
        {"conv.conv.bias", NULL},
        {"conv.out_proj.bias", NULL},
    };
    *unsupported = false;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (strcmp(hf_suffix, names[i].hf) != 0) continue;
        *unsupported = names[i].canon == NULL;
        return names[i].canon;
    }
    return NULL;
}
