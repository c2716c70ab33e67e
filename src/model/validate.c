#include "model/validate.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kernels/kernels.h"
#include "model/arch/qwen35.h"
#include "model/arch/lfm2.h"
#include "model/arch/qwen3moe.h"

static void format_shape(char *buf, size_t size, uint32_t n_dims, const int64_t *ne) {
    int pos = snprintf(buf, size, "[");
    for (uint32_t i = 0; i < n_dims && pos > 0 && (size_t)pos < size; i++)
        pos += snprintf(buf + pos, size - (size_t)pos, "%s%lld", i ? ", " : "", (long long)ne[i]);
    if (pos > 0 && (size_t)pos < size) snprintf(buf + pos, size - (size_t)pos, "]");
}

/* Compares t's shape with want (n_want dims), treating trailing dims of 1 as absent. */
static bool shape_matches(const kite_tensor *t, uint32_t n_want, const int64_t *want) {
    for (uint32_t i = 0; i < 4; i++) {
        int64_t have = i < t->n_dims ? t->ne[i] : 1;
        int64_t need = i < n_want ? want[i] : 1;
        if (have != need) return false;
    }
    return true;
}

static int check_tensor(const kite_source *src, const char *name, bool required, uint32_t n_dims, int64_t ne0,
                        int64_t ne1, kite_error *e) {
    const kite_tensor *t = kite_source_find(src, name);
    if (!t) {
        if (required) return kite_fail(e, KITE_ERR_FORMAT, "%s: required tensor %s is missing", src->format, name);
        return KITE_OK;
    }
    int64_t want[2] = {ne0, ne1};
    if (!shape_matches(t, n_dims, want)) {
        char have_s[96], want_s[96];
        format_shape(have_s, sizeof have_s, t->n_dims, t->ne);
        format_shape(want_s, sizeof want_s, n_dims, want);
        return kite_fail(e, KITE_ERR_FORMAT, "%s: tensor %s has shape %s but the hyper-parameters need %s (ne order, innermost first)",
                         src->format, name, have_s, want_s);
    }
    if (!t->data || t->n_bytes == 0)
        return kite_fail(e, KITE_ERR_FORMAT, "%s: tensor %s has no data", src->format, name);
    return KITE_OK;
}

static int check_hparams(const kite_source *src, kite_error *e) {
    const kite_hparams *hp = &src->hp;
    if (hp->n_vocab < 1 || hp->dim < 1 || hp->n_layers < 1 || hp->n_heads < 1 || hp->n_kv_heads < 1 ||
        hp->head_dim < 1 || hp->ffn_dim < 1 || hp->n_ctx_train < 1)
        return kite_fail(e, KITE_ERR_FORMAT,
                         "%s: hyper-parameters must be positive (vocab %d, dim %d, layers %d, heads %d, kv heads %d, "
                         "head_dim %d, ffn %d, ctx %d)", src->format, hp->n_vocab, hp->dim, hp->n_layers, hp->n_heads,
                         hp->n_kv_heads, hp->head_dim, hp->ffn_dim, hp->n_ctx_train);
    if (hp->n_heads % hp->n_kv_heads != 0)
        return kite_fail(e, KITE_ERR_FORMAT, "%s: %d heads is not a multiple of %d kv heads", src->format, hp->n_heads,
                         hp->n_kv_heads);
    if (hp->head_dim % 2 != 0)
        return kite_fail(e, KITE_ERR_FORMAT, "%s: head_dim %d is odd (RoPE rotates pairs)", src->format, hp->head_dim);
    if (hp->head_dim > KITE_ATTN_MAX_HEAD_DIM)
        return kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: head_dim %d is larger than the %d kite's attention supports",
                         src->format, hp->head_dim, KITE_ATTN_MAX_HEAD_DIM);
    if ((int64_t)hp->n_heads * hp->head_dim > (1 << 20))
        return kite_fail(e, KITE_ERR_FORMAT, "%s: %d heads x head_dim %d is implausibly large", src->format, hp->n_heads,
                         hp->head_dim);
    if (!(hp->rms_eps > 0.0f) || !isfinite(hp->rms_eps))
        return kite_fail(e, KITE_ERR_FORMAT, "%s: rms_eps %g must be positive", src->format, (double)hp->rms_eps);
    if (!(hp->rope_theta > 0.0f) || !isfinite(hp->rope_theta))
        return kite_fail(e, KITE_ERR_FORMAT, "%s: rope_theta %g must be positive", src->format, (double)hp->rope_theta);
    if (hp->rope_scaling != KITE_ROPE_SCALING_NONE && (!(hp->rope_factor > 0.0f) || !isfinite(hp->rope_factor)))
        return kite_fail(e, KITE_ERR_FORMAT, "%s: rope scaling factor %g must be positive", src->format,
                         (double)hp->rope_factor);
    if (hp->sliding_window < 0 || hp->swa_period < 0 ||
        (hp->sliding_window > 0 && (!(hp->rope_theta_local > 0.0f) || !isfinite(hp->rope_theta_local))))
        return kite_fail(e, KITE_ERR_FORMAT, "%s: sliding window %d, pattern %d, local RoPE base %g are inconsistent",
                         src->format, hp->sliding_window, hp->swa_period, (double)hp->rope_theta_local);
    if (hp->conv_taps != 0 && (hp->arch != KITE_ARCH_LFM2 || hp->conv_taps < 2 || hp->conv_taps > KITE_LFM2_MAX_TAPS ||
                               hp->n_layers > KITE_MAX_CONV_LAYERS))
        return kite_fail(e, KITE_ERR_FORMAT, "%s: conv layers of %d taps in %d layers are not supported (LFM2: 2..%d taps, up to %d layers)",
                         src->format, hp->conv_taps, hp->n_layers, KITE_LFM2_MAX_TAPS, KITE_MAX_CONV_LAYERS);
    for (int32_t l = 0; l < hp->n_layers; l++) {
        const int32_t hd = kite_layer_head_dim(hp, l), kvh = kite_layer_kv_heads(hp, l), rot = kite_layer_rope_dim(hp, l);
        if (hd < 2 || hd % 2 || hd > KITE_ATTN_MAX_HEAD_DIM || kvh < 1 || hp->n_heads % kvh || rot < 0 || rot % 2 || rot > hd)
            return kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: layer %d: head size %d (at most %d, even), %d kv heads for %d heads, "
                             "%d rotated dimensions are not supported", src->format, (int)l, hd, KITE_ATTN_MAX_HEAD_DIM, kvh,
                             hp->n_heads, rot);
    }
    if (!(hp->logit_scale >= 0.0f) || !isfinite(hp->logit_scale) || !(hp->post_norm_eps >= 0.0f) || !isfinite(hp->post_norm_eps))
        return kite_fail(e, KITE_ERR_FORMAT, "%s: logit scale %g or post-norm epsilon %g is invalid", src->format,
                         (double)hp->logit_scale, (double)hp->post_norm_eps);
    if (!(hp->final_logit_softcap >= 0.0f) || !isfinite(hp->final_logit_softcap) || !(hp->attn_scale >= 0.0f) ||
        !isfinite(hp->attn_scale) || !(hp->embd_scale >= 0.0f) || !isfinite(hp->embd_scale))
        return kite_fail(e, KITE_ERR_FORMAT, "%s: soft-cap %g, attention scale %g or embedding scale %g is invalid",
                         src->format, (double)hp->final_logit_softcap, (double)hp->attn_scale, (double)hp->embd_scale);
    return KITE_OK;
}

int kite_source_validate(const kite_source *src, kite_error *e) {
    const kite_hparams *hp = &src->hp;
    int rc = check_hparams(src, e);
    if (rc) return rc;
    if ((rc = check_tensor(src, "token_embd.weight", true, 2, hp->dim, hp->n_vocab, e))) return rc;
    const bool lfm2 = hp->arch == KITE_ARCH_LFM2;
    if ((rc = check_tensor(src, lfm2 ? "token_embd_norm.weight" : "output_norm.weight", true, 1, hp->dim, 1, e))) return rc;
    if ((rc = check_tensor(src, "output.weight", false, 2, hp->dim, hp->n_vocab, e))) return rc;
    if (!kite_source_find(src, "output.weight") && !hp->tied_embeddings)
        return kite_fail(e, KITE_ERR_FORMAT, "%s: output.weight is missing and the embeddings are not tied", src->format);

    if (hp->arch == KITE_ARCH_QWEN35) return kite_qwen35_validate(src, e);
    const bool gemma4 = hp->arch == KITE_ARCH_GEMMA4, glimmer = hp->arch == KITE_ARCH_MUSE_GLIMMER;
    const bool gemma3 = hp->arch == KITE_ARCH_GEMMA3 || gemma4 || glimmer; /* the post-norms */
    if (glimmer && !kite_source_find(src, "output.weight"))
        return kite_fail(e, KITE_ERR_FORMAT, "%s: Muse Glimmer needs output.weight (llama.cpp does not tie it)", src->format);
    const bool moe = hp->arch == KITE_ARCH_QWEN3MOE; /* routed experts instead of ffn_{gate,up,down} */
    const bool need_bias = hp->arch == KITE_ARCH_QWEN2, need_qk_norm = hp->arch == KITE_ARCH_QWEN3 || gemma3 || moe || lfm2;
    char name[96];
#define CHECK(suffix, required, n_dims, ne0, ne1)                                              \
    do {                                                                                       \
        snprintf(name, sizeof name, "blk.%d." suffix, layer);                                  \
        if ((rc = check_tensor(src, name, required, n_dims, ne0, ne1, e))) return rc;          \
    } while (0)
    for (int32_t layer = 0; layer < hp->n_layers; layer++) {
        const int32_t head_dim = kite_layer_head_dim(hp, layer);
        const int64_t q_dim = (int64_t)hp->n_heads * head_dim, kv_dim = (int64_t)kite_layer_kv_heads(hp, layer) * head_dim;
        CHECK("attn_norm.weight", true, 1, hp->dim, 1);
        CHECK("ffn_norm.weight", true, 1, hp->dim, 1);
        CHECK("ffn_gate.weight", !moe, 2, hp->dim, hp->ffn_dim);
        CHECK("ffn_up.weight", !moe, 2, hp->dim, hp->ffn_dim);
        CHECK("ffn_down.weight", !moe, 2, hp->ffn_dim, hp->dim);
        if (kite_layer_is_conv(hp, layer)) { /* LFM2's short convolution instead of attention */
            CHECK("shortconv.in_proj.weight", true, 2, hp->dim, 3 * (int64_t)hp->dim);
            CHECK("shortconv.out_proj.weight", true, 2, hp->dim, hp->dim);
            /* llama.cpp's converter squeezes Hugging Face's [dim, 1, L] to [dim, L] */
            snprintf(name, sizeof name, "blk.%d.shortconv.conv.weight", layer);
            const kite_tensor *t = kite_source_find(src, name);
            const int64_t hf_shape[3] = {hp->conv_taps, 1, hp->dim};
            if (!t || !shape_matches(t, 3, hf_shape)) CHECK("shortconv.conv.weight", true, 2, hp->conv_taps, hp->dim);
            else if (!t->data || t->n_bytes == 0) return kite_fail(e, KITE_ERR_FORMAT, "%s: tensor %s has no data", src->format, name);
            continue;
        }
        CHECK("attn_q.weight", true, 2, hp->dim, q_dim);
        CHECK("attn_k.weight", true, 2, hp->dim, kv_dim);
        CHECK("attn_v.weight", !gemma4, 2, hp->dim, kv_dim); /* Gemma 4's k_eq_v layers have none */
        CHECK("attn_gate.weight", glimmer, 2, hp->dim, q_dim);
        CHECK("layer_output_scale.weight", false, 1, 1, 1);
        CHECK("attn_output.weight", true, 2, q_dim, hp->dim);
        CHECK("attn_q.bias", need_bias, 1, q_dim, 1);
        CHECK("attn_k.bias", need_bias, 1, kv_dim, 1);
        CHECK("attn_v.bias", need_bias, 1, kv_dim, 1);
        /* Muse Glimmer's HF checkpoints have none (qk_scale_factor stands for them) */
        CHECK("attn_q_norm.weight", need_qk_norm && hp->qk_scale_factor == 0.0f, 1, head_dim, 1);
        CHECK("attn_k_norm.weight", need_qk_norm && hp->qk_scale_factor == 0.0f, 1, head_dim, 1);
        CHECK("post_attention_norm.weight", gemma3, 1, hp->dim, 1);
        CHECK("post_ffw_norm.weight", gemma3, 1, hp->dim, 1);
    }
#undef CHECK
    if (moe) return kite_qwen3moe_validate(src, e);
    if (hp->n_experts != 0) return kite_fail(e, KITE_ERR_FORMAT, "%s: experts in a dense architecture", src->format);
    return KITE_OK;
}
