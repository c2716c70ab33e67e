#include "model/arch/gemma4.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/arch/gemma3.h"

enum { MAX_WINDOW = 1 << 24 };

static bool key_u32(const kite_gguf *g, const char *arch, const char *suffix, uint32_t *v) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return kite_gguf_get_u32(g, key, v);
}

static bool key_f32(const kite_gguf *g, const char *arch, const char *suffix, float *v) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return kite_gguf_get_f32(g, key, v);
}

static bool key_has(const kite_gguf *g, const char *arch, const char *suffix) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return kite_gguf_has(g, key);
}

/* The window (required, as llama.cpp's get_key) and the local/global pattern into hp->layer_local:
 * a per-layer bool array, or (Muse Glimmer: period_ok) one integer n for llama.cpp's set_swa_pattern(n)
 * (layer l local iff n == 0 or l % n < n - 1), default_period when absent (0: the key is required). */
static int read_pattern(const kite_gguf *g, const char *path, const char *arch, bool period_ok, uint32_t default_period,
                        kite_hparams *hp, kite_error *e) {
    uint32_t v;
    if (!key_u32(g, arch, "attention.sliding_window", &v) || v == 0 || v > MAX_WINDOW)
        return kite_fail(e, KITE_ERR_FORMAT, "%s: %s.attention.sliding_window is missing or out of range (1..%d)", path, arch,
                         MAX_WINDOW);
    hp->sliding_window = (int32_t)v;
    if (hp->n_layers > KITE_MAX_LAYER_PATTERN)
        return kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: %d layers; kite's per-layer attention pattern holds at most %d", path,
                         hp->n_layers, KITE_MAX_LAYER_PATTERN);
    char key[128];
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", arch);
    kite_gguf_vtype type;
    uint64_t n;
    hp->local_by_layer = true;
    hp->swa_period = 0;
    if (kite_gguf_get_arr(g, key, &type, &n)) {
        if (n != (uint64_t)hp->n_layers)
            return kite_fail(e, KITE_ERR_FORMAT, "%s: %s has %llu entries for %d layers", path, key, (unsigned long long)n,
                             hp->n_layers);
        for (int32_t l = 0; l < hp->n_layers; l++) {
            bool local;
            if (!kite_gguf_arr_bool(g, key, (uint64_t)l, &local))
                return kite_fail(e, KITE_ERR_FORMAT, "%s: %s is not an array of booleans", path, key);
            hp->layer_local[l] = local;
        }
        return KITE_OK;
    }
    uint32_t period = default_period;
    if (kite_gguf_has(g, key)) {
        if (!period_ok || !kite_gguf_get_u32(g, key, &period) || period > 4096)
            return kite_fail(e, KITE_ERR_FORMAT, "%s: %s is not %s", path, key,
                             period_ok ? "a per-layer boolean array or an integer period up to 4096" : "a per-layer boolean array");
    } else if (default_period == 0) {
        return kite_fail(e, KITE_ERR_FORMAT, "%s: missing %s (the per-layer sliding-window pattern)", path, key);
    }
    for (int32_t l = 0; l < hp->n_layers; l++) hp->layer_local[l] = period == 0 || (uint32_t)l % period < period - 1;
    return KITE_OK;
}

static int read_softcap(const kite_gguf *g, const char *path, const char *arch, kite_hparams *hp, kite_error *e) {
    float cap = 0.0f;
    hp->final_logit_softcap = 0.0f;
    if (key_f32(g, arch, "final_logit_softcapping", &cap)) {
        if (!(cap >= 0.0f) || !isfinite(cap))
            return kite_fail(e, KITE_ERR_FORMAT, "%s: %s.final_logit_softcapping = %g must not be negative", path, arch, (double)cap);
        hp->final_logit_softcap = cap;
    }
    return KITE_OK;
}

static int refuse_rope_scaling(const kite_gguf *g, const char *path, const char *arch, kite_error *e) {
    if (key_has(g, arch, "rope.scaling.type") || key_has(g, arch, "rope.scaling.factor"))
        return kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: RoPE scaling on %s is not supported", path, arch);
    return KITE_OK;
}

int kite_gemma4_gguf_hparams(const kite_gguf *g, const char *path, kite_hparams *hp, kite_error *e) {
    const char *arch = "gemma4";
    uint32_t v;
    int st;
    /* What the dense text models do not have, refused by name. */
    if (key_u32(g, arch, "attention.shared_kv_layers", &v) && v > 0)
        return kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: Gemma 4 KV sharing across layers (%u shared layers, E2B/E4B) is not "
                         "supported", path, v);
    if (key_u32(g, arch, "embedding_length_per_layer_input", &v) && v > 0)
        return kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: Gemma 4 per-layer embeddings (%u per layer, E2B/E4B) are not supported",
                         path, v);
    if ((key_u32(g, arch, "expert_count", &v) && v > 0) || key_has(g, arch, "expert_feed_forward_length"))
        return kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: Gemma 4 mixture of experts (26B-A4B) is not supported", path);
    if ((st = read_pattern(g, path, arch, false, 0, hp, e)) || (st = read_softcap(g, path, arch, hp, e)) ||
        (st = refuse_rope_scaling(g, path, arch, e)))
        return st;
    /* Head sizes: key_length (global layers, in hp->head_dim already) and key_length_swa; values alike. */
    uint32_t kl = (uint32_t)hp->head_dim, vl = kl, kl_swa = kl, vl_swa;
    key_u32(g, arch, "attention.value_length", &vl);
    key_u32(g, arch, "attention.key_length_swa", &kl_swa);
    vl_swa = kl_swa;
    key_u32(g, arch, "attention.value_length_swa", &vl_swa);
    if (vl != kl || vl_swa != kl_swa)
        return kite_fail(e, KITE_ERR_FORMAT, "%s: Gemma 4 needs key and value heads of one size (global %u / %u, sliding %u / %u)",
                         path, kl, vl, kl_swa, vl_swa);
    if (kl_swa == 0 || kl_swa % 2 || kl_swa > 4096)
        return kite_fail(e, KITE_ERR_FORMAT, "%s: gemma4.attention.key_length_swa = %u is not an even size up to 4096", path, kl_swa);
    hp->head_dim_local = (int32_t)kl_swa;
    /* KV heads: one count, or one per layer (the converter writes the sliding and the global count per layer). */
    char key[128];
    snprintf(key, sizeof key, "%s.attention.head_count_kv", arch);
    kite_gguf_vtype type;
    uint64_t n;
    if (kite_gguf_get_arr(g, key, &type, &n)) {
        if (n != (uint64_t)hp->n_layers)
            return kite_fail(e, KITE_ERR_FORMAT, "%s: %s has %llu entries for %d layers", path, key, (unsigned long long)n, hp->n_layers);
        int64_t local = 0, global = 0;
        for (int32_t l = 0; l < hp->n_layers; l++) {
            int64_t h;
            if (!kite_gguf_arr_i64(g, key, (uint64_t)l, &h) || h <= 0 || h > hp->n_heads || hp->n_heads % h)
                return kite_fail(e, KITE_ERR_FORMAT, "%s: %s[%d] is not a divisor of the %d heads", path, key, (int)l, hp->n_heads);
            int64_t *want = kite_layer_is_local(hp, l) ? &local : &global;
            if (*want && *want != h)
                return kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: %s differs between layers of one kind (sliding or global)", path, key);
            *want = h;
        }
        hp->n_kv_heads = (int32_t)(global ? global : local);
        hp->n_kv_heads_local = (int32_t)(local ? local : global);
    }
    /* Local layers' rotated dimensions (partial RoPE) and base; global layers rotate the whole head with the
     * proportional divisors of rope_freqs.weight. */
    uint32_t rot_swa = kl_swa;
    key_u32(g, arch, "rope.dimension_count_swa", &rot_swa);
    if (rot_swa == 0 || rot_swa % 2 || rot_swa > kl_swa)
        return kite_fail(e, KITE_ERR_FORMAT, "%s: gemma4.rope.dimension_count_swa = %u is not an even count up to %u", path, rot_swa,
                         kl_swa);
    hp->rope_dim_local = (int32_t)rot_swa;
    hp->rope_theta_local = 10000.0f; /* llama_hparams' rope_freq_base_train_swa default */
    float base;
    if (key_f32(g, arch, "rope.freq_base_swa", &base)) {
        if (!(base > 0.0f) || !isfinite(base))
            return kite_fail(e, KITE_ERR_FORMAT, "%s: gemma4.rope.freq_base_swa = %g must be positive", path, (double)base);
        hp->rope_theta_local = base;
    }
    hp->ffn_act = KITE_FFN_GELU_TANH;
    hp->embd_scale = sqrtf((float)hp->dim);
    hp->attn_scale = 1.0f; /* llama.cpp: f_attention_scale = 1 (Gemma 4's self.scaling = 1) */
    hp->norm_weight_offset = 0.0f;
    hp->v_norm = true;
    return KITE_OK;
}

int kite_muse_glimmer_gguf_hparams(const kite_gguf *g, const char *path, kite_hparams *hp, kite_error *e) {
    const char *arch = "muse-glimmer";
    int st;
    if ((st = read_pattern(g, path, arch, true, 4, hp, e)) || (st = read_softcap(g, path, arch, hp, e)) ||
        (st = refuse_rope_scaling(g, path, arch, e)))
        return st;
    uint32_t vl = (uint32_t)hp->head_dim;
    key_u32(g, arch, "attention.value_length", &vl);
    if ((int32_t)vl != hp->head_dim)
        return kite_fail(e, KITE_ERR_FORMAT, "%s: Muse Glimmer needs key and value heads of one size (%d / %u)", path, hp->head_dim, vl);
    float scale;
    if (!key_f32(g, arch, "logit_scale", &scale) || !(scale > 0.0f) || !isfinite(scale))
        return kite_fail(e, KITE_ERR_FORMAT, "%s: muse-glimmer.logit_scale is missing or not positive", path);
    hp->logit_scale = scale;
    hp->rope_theta_local = hp->rope_theta; /* rope_freq_base_train_swa = rope_freq_base_train unless given */
    float base;
    if (key_f32(g, arch, "rope.freq_base_swa", &base)) {
        if (!(base > 0.0f) || !isfinite(base))
            return kite_fail(e, KITE_ERR_FORMAT, "%s: muse-glimmer.rope.freq_base_swa = %g must be positive", path, (double)base);
        hp->rope_theta_local = base;
    }
    hp->rope_global_none = true; /* NoPE on full-attention layers */
    hp->embd_norm = true;
    hp->post_norm_eps = 1e-8f;
    hp->ffn_act = KITE_FFN_SILU;
    hp->norm_weight_offset = 0.0f;
    return KITE_OK;
}

const char *kite_gemma4_hf_layer_name(kite_arch arch, const char *hf_suffix) {
    if (arch == KITE_ARCH_GEMMA4 && strcmp(hf_suffix, "layer_scalar") == 0) return "layer_output_scale.weight";
    if (arch == KITE_ARCH_MUSE_GLIMMER && strcmp(hf_suffix, "self_attn.gate_proj.weight") == 0) return "attn_gate.weight";
    return kite_gemma3_hf_layer_name(hf_suffix);
}
