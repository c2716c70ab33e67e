#include "io/hf_config.h"

#include "model/arch/gemma3.h"
#include "model/arch/qwen35.h"
#include "model/arch/lfm2.h"
#include "model/arch/gemma4.h"
#include "model/arch/qwen3moe.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* Limits well above any real model of the supported families; they keep products of dimensions
 * far from overflow and turn garbage into a clear message instead of a huge allocation. */
enum {
    MAX_DIM = 1 << 16,
    MAX_FFN = 1 << 20,
    MAX_LAYERS = 1024,
    MAX_HEADS = 1024,
    MAX_HEAD_DIM = 1024,
};

/* Absent and null both mean "not given". */
static const json_t *field(const json_t *obj, const char *key) {
    const json_t *v = json_object_get(obj, key);
    return json_is_null(v) ? NULL : v;
}

/* Reads an integer field in [lo, hi]. Absent: *out = dflt and ok if !required. */
static int get_int(const json_t *obj, const char *key, int64_t lo, int64_t hi, bool required, int64_t dflt,
                   int64_t *out, const char *label, kite_error *e) {
    const json_t *v = field(obj, key);
    if (!v) {
        if (required) return kite_fail(e, KITE_ERR_FORMAT, "%s: missing \"%s\"", label, key);
        *out = dflt;
        return KITE_OK;
    }
    if (!json_is_integer(v)) return kite_fail(e, KITE_ERR_FORMAT, "%s: \"%s\" is not an integer", label, key);
    json_int_t i = json_integer_value(v);
    if (i < lo || i > hi)
        return kite_fail(e, KITE_ERR_FORMAT, "%s: \"%s\" = %lld is outside [%lld, %lld]", label, key, (long long)i,
                         (long long)lo, (long long)hi);
    *out = i;
    return KITE_OK;
}

/* Reads a number field (integer or real). Range: lo < x (or lo <= x if lo_inclusive), x <= hi. */
static int get_num(const json_t *obj, const char *key, double lo, bool lo_inclusive, double hi, double dflt,
                   double *out, bool *given, const char *label, kite_error *e) {
    const json_t *v = field(obj, key);
    if (given) *given = v != NULL;
    if (!v) {
        *out = dflt;
        return KITE_OK;
    }
    if (!json_is_number(v)) return kite_fail(e, KITE_ERR_FORMAT, "%s: \"%s\" is not a number", label, key);
    double x = json_number_value(v);
    if (!isfinite(x) || (lo_inclusive ? x < lo : x <= lo) || x > hi)
        return kite_fail(e, KITE_ERR_FORMAT, "%s: \"%s\" = %g is outside %c%g, %g]", label, key, x,
                         lo_inclusive ? '[' : '(', lo, hi);
    /* kite keeps these as float: a value that would flush to zero there breaks the range above */
    if (x != 0.0 && (float)x == 0.0f)
        return kite_fail(e, KITE_ERR_FORMAT, "%s: \"%s\" = %g is too small for a 32-bit float", label, key, x);
    *out = x;
    return KITE_OK;
}

/* bos/eos: an integer, a list of integers (the first counts), or null/absent (-1). */
static int get_token_id(const json_t *obj, const char *key, int32_t *out, bool *given, const char *label,
                        kite_error *e) {
    const json_t *v = field(obj, key);
    *given = false;
    if (!v) return KITE_OK;
    if (json_is_array(v)) {
        if (json_array_size(v) == 0) return KITE_OK;
        v = json_array_get(v, 0);
    }
    if (!json_is_integer(v))
        return kite_fail(e, KITE_ERR_FORMAT, "%s: \"%s\" is not an integer or a list of integers", label, key);
    json_int_t i = json_integer_value(v);
    if (i > INT32_MAX) return kite_fail(e, KITE_ERR_FORMAT, "%s: \"%s\" = %lld is too large", label, key, (long long)i);
    *out = i < 0 ? -1 : (int32_t)i;
    *given = true;
    return KITE_OK;
}

static json_t *load_object(const char *text, size_t len, const char *label, kite_error *e) {
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        kite_fail(e, KITE_ERR_FORMAT, "%s: invalid JSON: %s (line %d, column %d)", label, jerr.text, jerr.line, jerr.column);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        kite_fail(e, KITE_ERR_FORMAT, "%s: not a JSON object", label);
        return NULL;
    }
    return root;
}

static int parse_arch(const json_t *root, kite_arch *arch, const char *label, kite_error *e) {
    static const struct { const char *model_type, *class_name; kite_arch arch; } known[] = {
        {"llama", "LlamaForCausalLM", KITE_ARCH_LLAMA},
        {"qwen2", "Qwen2ForCausalLM", KITE_ARCH_QWEN2},
        {"qwen3", "Qwen3ForCausalLM", KITE_ARCH_QWEN3},
        {"gemma3_text", "Gemma3ForCausalLM", KITE_ARCH_GEMMA3},
        {"qwen3_moe", "Qwen3MoeForCausalLM", KITE_ARCH_QWEN3MOE},
        {"qwen3_5_text", "Qwen3_5ForCausalLM", KITE_ARCH_QWEN35},
        {"lfm2", "Lfm2ForCausalLM", KITE_ARCH_LFM2},
        {"gemma4_text", "Gemma4ForCausalLM", KITE_ARCH_GEMMA4},
        {"gemma4", "Gemma4ForConditionalGeneration", KITE_ARCH_GEMMA4},
        {"muse_glimmer", "MuseGlimmerForConditionalGeneration", KITE_ARCH_MUSE_GLIMMER},
    };
    const size_t n_known = sizeof known / sizeof known[0];
    const json_t *mt = field(root, "model_type");
    if (json_is_string(mt)) {
        const char *s = json_string_value(mt);
        for (size_t i = 0; i < n_known; i++)
            if (strcmp(s, known[i].model_type) == 0) { *arch = known[i].arch; return KITE_OK; }
        return kite_fail(e, KITE_ERR_UNSUPPORTED,
                         "%s: unsupported architecture '%.64s' (model_type in config.json); kite runs llama, qwen2, qwen3, qwen3_moe, qwen3_5_text, gemma3_text, gemma4(_text), muse_glimmer, lfm2",
                         label, s);
    }
    if (mt) return kite_fail(e, KITE_ERR_FORMAT, "%s: \"model_type\" is not a string", label);
    const json_t *archs = field(root, "architectures");
    const json_t *first = json_is_array(archs) ? json_array_get(archs, 0) : NULL;
    if (!json_is_string(first))
        return kite_fail(e, KITE_ERR_FORMAT, "%s: neither \"model_type\" nor \"architectures\" names the architecture", label);
    const char *s = json_string_value(first);
    for (size_t i = 0; i < n_known; i++)
        if (strcmp(s, known[i].class_name) == 0) { *arch = known[i].arch; return KITE_OK; }
    return kite_fail(e, KITE_ERR_UNSUPPORTED,
                     "%s: unsupported architecture '%.64s' (architectures in config.json); kite runs llama, qwen2, qwen3, qwen3_moe, qwen3_5_text, gemma3_text, gemma4(_text), muse_glimmer, lfm2",
                     label, s);
}

static int parse_rope_scaling(const json_t *root, kite_hparams *hp, const char *label, kite_error *e) {
    hp->rope_scaling = KITE_ROPE_SCALING_NONE;
    hp->rope_factor = 1.0f;
    hp->rope_low_freq_factor = 1.0f;
    hp->rope_high_freq_factor = 1.0f;
    hp->rope_orig_ctx = hp->n_ctx_train;
    const json_t *rs = field(root, "rope_scaling");
    if (!rs) return KITE_OK;
    if (!json_is_object(rs)) return kite_fail(e, KITE_ERR_FORMAT, "%s: \"rope_scaling\" is not an object or null", label);
    const json_t *type = field(rs, "rope_type");
    if (!type) type = field(rs, "type"); /* older transformers spelling */
    if (!json_is_string(type))
        return kite_fail(e, KITE_ERR_FORMAT, "%s: \"rope_scaling\" has no string \"rope_type\" or \"type\"", label);
    const char *name = json_string_value(type);
    double factor = 0.0, low = 0.0, high = 0.0;
    int64_t orig = 0;
    int rc;
    if (strcmp(name, "default") == 0) return KITE_OK;
    if (strcmp(name, "linear") == 0) {
        if ((rc = get_num(rs, "factor", 0.0, false, 1e6, 0.0, &factor, NULL, label, e))) return rc;
        if (!field(rs, "factor")) return kite_fail(e, KITE_ERR_FORMAT, "%s: linear \"rope_scaling\" needs \"factor\"", label);
        hp->rope_scaling = KITE_ROPE_SCALING_LINEAR;
        hp->rope_factor = (float)factor;
        return KITE_OK;
    }
    if (strcmp(name, "llama3") == 0) {
        static const char *const needed[] = {"factor", "low_freq_factor", "high_freq_factor",
                                             "original_max_position_embeddings"};
        for (size_t i = 0; i < 4; i++)
            if (!field(rs, needed[i]))
                return kite_fail(e, KITE_ERR_FORMAT, "%s: llama3 \"rope_scaling\" needs \"%s\"", label, needed[i]);
        if ((rc = get_num(rs, "factor", 0.0, false, 1e6, 0.0, &factor, NULL, label, e))) return rc;
        if ((rc = get_num(rs, "low_freq_factor", 0.0, false, 1e6, 0.0, &low, NULL, label, e))) return rc;
        if ((rc = get_num(rs, "high_freq_factor", 0.0, false, 1e6, 0.0, &high, NULL, label, e))) return rc;
        if ((rc = get_int(rs, "original_max_position_embeddings", 1, INT32_MAX, true, 0, &orig, label, e))) return rc;
        if (high <= low)
            return kite_fail(e, KITE_ERR_FORMAT, "%s: llama3 rope_scaling needs high_freq_factor (%g) > low_freq_factor (%g)",
                             label, high, low);
        hp->rope_scaling = KITE_ROPE_SCALING_LLAMA3;
        hp->rope_factor = (float)factor;
        hp->rope_low_freq_factor = (float)low;
        hp->rope_high_freq_factor = (float)high;
        hp->rope_orig_ctx = (int32_t)orig;
        return KITE_OK;
    }
    return kite_fail(e, KITE_ERR_UNSUPPORTED,
                     "%s: unsupported rope_scaling type '%.32s'; kite supports llama3 and linear", label, name);
}

/* Gemma 3's keys, as transformers' Gemma3TextConfig reads them (its defaults where absent), after the
 * common fields are in *hp: hidden_activation gelu_pytorch_tanh, query_pre_attn_scalar (256),
 * sliding_window (4096), layer_types or sliding_window_pattern (6: five sliding layers, then a full one),
 * rope_local_base_freq (10000), final_logit_softcapping (none), attn_logit_softcapping (must be none),
 * head_dim 256, rope_theta 1e6 and tie_word_embeddings true. The RMSNorm weights are stored as w for
 * x * (1 + w): norm_weight_offset 1. */
static int parse_gemma3(const json_t *root, kite_hparams *hp, const char *label, kite_error *e) {
    int rc;
    const json_t *act = field(root, "hidden_activation");
    if (!act) act = field(root, "hidden_act");
    if (act && (!json_is_string(act) || (strcmp(json_string_value(act), "gelu_pytorch_tanh") != 0 &&
                                         strcmp(json_string_value(act), "gelu_tanh") != 0)))
        return kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: hidden_activation '%.32s' is not supported; kite runs gelu_pytorch_tanh",
                         label, json_is_string(act) ? json_string_value(act) : "?");
    if (field(root, "attn_logit_softcapping"))
        return kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: \"attn_logit_softcapping\" is not supported (Gemma 3 has none)", label);
    int64_t head_dim = 0, window = 0, period = 6;
    double scalar = 0.0, local_base = 0.0, cap = 0.0, theta = 0.0;
    if (!field(root, "head_dim")) {
        if ((rc = get_int(root, "head_dim", 2, MAX_HEAD_DIM, false, 256, &head_dim, label, e))) return rc;
        hp->head_dim = (int32_t)head_dim;
    }
    if (!field(root, "rope_theta")) {
        if ((rc = get_num(root, "rope_theta", 0.0, false, 1e12, 1e6, &theta, NULL, label, e))) return rc;
        hp->rope_theta = (float)theta;
    }
    if (!field(root, "tie_word_embeddings")) hp->tied_embeddings = true;
    if ((rc = get_num(root, "query_pre_attn_scalar", 0.0, false, 1e9, 256.0, &scalar, NULL, label, e))) return rc;
    if ((rc = get_int(root, "sliding_window", 1, 1 << 24, false, 4096, &window, label, e))) return rc;
    if ((rc = get_num(root, "rope_local_base_freq", 0.0, false, 1e12, 10000.0, &local_base, NULL, label, e))) return rc;
    if ((rc = get_num(root, "final_logit_softcapping", 0.0, false, 1e9, 0.0, &cap, NULL, label, e))) return rc;
    const json_t *types = field(root, "layer_types");
    if (types) {
        /* Kite runs a periodic pattern: layer l global iff l % period == period - 1. */
        if (!json_is_array(types) || (int64_t)json_array_size(types) != hp->n_layers)
            return kite_fail(e, KITE_ERR_FORMAT, "%s: \"layer_types\" is not a list of %d strings", label, hp->n_layers);
        period = 0;
        for (size_t l = 0; l < json_array_size(types); l++) {
            const json_t *t = json_array_get(types, l);
            const char *name = json_is_string(t) ? json_string_value(t) : "";
            if (strcmp(name, "full_attention") == 0) { period = (int64_t)l + 1; break; }
            if (strcmp(name, "sliding_attention") != 0)
                return kite_fail(e, KITE_ERR_FORMAT, "%s: layer_types[%zu] is neither \"sliding_attention\" nor "
                                 "\"full_attention\"", label, l);
        }
        for (size_t l = 0; l < json_array_size(types); l++) {
            const char *name = json_string_value(json_array_get(types, l));
            bool local = period == 0 || (int64_t)l % period < period - 1;
            if (!name || strcmp(name, local ? "sliding_attention" : "full_attention") != 0)
                return kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: layer_types[%zu] breaks the periodic pattern of %lld layers kite "
                                 "supports", label, l, (long long)period);
        }
    } else {
        if ((rc = get_int(root, "sliding_window_pattern", 0, 4096, false, 6, &period, label, e))) return rc;
    }
    hp->ffn_act = KITE_FFN_GELU_TANH;
    hp->embd_scale = sqrtf((float)hp->dim);
    hp->attn_scale = (float)(1.0 / sqrt(scalar));
    hp->final_logit_softcap = (float)cap;
    hp->norm_weight_offset = 1.0f;
    hp->sliding_window = (int32_t)window;
    hp->swa_period = (int32_t)period;
    hp->rope_theta_local = (float)local_base;
    return KITE_OK;
}

/* LFM2's keys, as transformers' Lfm2Config and llama.cpp's converter read them, after the common fields are
 * in *hp: norm_eps (1e-5) for rms_norm_eps; the FFN width from intermediate_size (block_ff_dim first, as the
 * converter) adjusted when block_auto_adjust_ff_dim (default true): int(2 ffn / 3), times
 * block_ffn_dim_multiplier (1.0) truncated, rounded up to block_multiple_of (256); conv_L_cache (3);
 * layer_types ("conv" / "full_attention"), or else full_attn_idxs (older configs); conv_bias must be false;
 * tie_embedding / tie_word_embeddings default true. */
static int parse_lfm2(const json_t *root, kite_hparams *hp, const char *label, kite_error *e) {
    int rc;
    double eps = 0.0, mult = 1.0;
    int64_t ffn = hp->ffn_dim, multiple = 256, taps = 3;
    bool given = false;
    if ((rc = get_num(root, "norm_eps", 0.0, false, 1.0, 1e-5, &eps, &given, label, e))) return rc;
    if (given || !field(root, "rms_norm_eps")) hp->rms_eps = (float)eps;
    if ((rc = get_int(root, "block_ff_dim", 1, MAX_FFN, false, ffn, &ffn, label, e))) return rc;
    const json_t *adjust = field(root, "block_auto_adjust_ff_dim");
    if (adjust && !json_is_boolean(adjust))
        return kite_fail(e, KITE_ERR_FORMAT, "%s: \"block_auto_adjust_ff_dim\" is not a boolean", label);
    if (!adjust || json_is_true(adjust)) {
        if ((rc = get_num(root, "block_ffn_dim_multiplier", 0.0, false, 64.0, 1.0, &mult, NULL, label, e))) return rc;
        if ((rc = get_int(root, "block_multiple_of", 1, MAX_FFN, false, 256, &multiple, label, e))) return rc;
        ffn = (int64_t)(2.0 * (double)ffn / 3.0);
        ffn = (int64_t)(mult * (double)ffn);
        ffn = multiple * ((ffn + multiple - 1) / multiple);
        if (ffn < 1 || ffn > MAX_FFN)
            return kite_fail(e, KITE_ERR_FORMAT, "%s: the adjusted FFN width %lld is out of range", label, (long long)ffn);
    }
    hp->ffn_dim = (int32_t)ffn;
    if ((rc = get_int(root, "conv_L_cache", 2, KITE_LFM2_MAX_TAPS, false, 3, &taps, label, e))) return rc;
    if (json_is_true(field(root, "conv_bias")))
        return kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: \"conv_bias\": true is not supported (llama.cpp has none)", label);
    if (hp->n_layers > KITE_MAX_CONV_LAYERS)
        return kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: %d layers; kite runs LFM2 models of up to %d", label, hp->n_layers,
                         KITE_MAX_CONV_LAYERS);
    hp->conv_taps = (int32_t)taps;
    memset(hp->conv_layers, 0, sizeof hp->conv_layers);
    const json_t *types = field(root, "layer_types"), *idxs = field(root, "full_attn_idxs");
    if (types) {
        if (!json_is_array(types) || (int64_t)json_array_size(types) != hp->n_layers)
            return kite_fail(e, KITE_ERR_FORMAT, "%s: \"layer_types\" is not a list of %d strings", label, hp->n_layers);
        for (size_t l = 0; l < json_array_size(types); l++) {
            const json_t *t = json_array_get(types, l);
            const char *name = json_is_string(t) ? json_string_value(t) : "";
            if (strcmp(name, "conv") == 0) hp->conv_layers[l / 64] |= (uint64_t)1 << (l % 64);
            else if (strcmp(name, "full_attention") != 0)
                return kite_fail(e, KITE_ERR_FORMAT, "%s: layer_types[%zu] is neither \"conv\" nor \"full_attention\"", label, l);
        }
    } else if (idxs) {
        if (!json_is_array(idxs)) return kite_fail(e, KITE_ERR_FORMAT, "%s: \"full_attn_idxs\" is not a list", label);
        for (int32_t l = 0; l < hp->n_layers; l++) hp->conv_layers[l / 64] |= (uint64_t)1 << (l % 64);
        for (size_t i = 0; i < json_array_size(idxs); i++) {
            const json_t *v = json_array_get(idxs, i);
            if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= hp->n_layers)
                return kite_fail(e, KITE_ERR_FORMAT, "%s: full_attn_idxs[%zu] is not a layer index below %d", label, i, hp->n_layers);
            json_int_t l = json_integer_value(v);
            hp->conv_layers[l / 64] &= ~((uint64_t)1 << (l % 64));
        }
    } else {
        return kite_fail(e, KITE_ERR_FORMAT, "%s: neither \"layer_types\" nor \"full_attn_idxs\" says which layers attend", label);
    }
    const json_t *tie = field(root, "tie_word_embeddings");
    if (!tie) tie = field(root, "tie_embedding");
    if (tie && !json_is_boolean(tie)) return kite_fail(e, KITE_ERR_FORMAT, "%s: \"tie_embedding\" is not a boolean", label);
    hp->tied_embeddings = !tie || json_is_true(tie);
    return KITE_OK;
}

/* layer_types (required here) into hp->layer_local: "sliding_attention" or "full_attention" per layer. */
static int parse_layer_types(const json_t *root, kite_hparams *hp, const char *label, kite_error *e) {
    const json_t *types = field(root, "layer_types");
    if (!json_is_array(types) || (int64_t)json_array_size(types) != hp->n_layers)
        return kite_fail(e, KITE_ERR_FORMAT, "%s: \"layer_types\" is not a list of %d strings", label, hp->n_layers);
    if (hp->n_layers > KITE_MAX_LAYER_PATTERN)
        return kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: %d layers; kite's per-layer attention pattern holds at most %d", label,
                         hp->n_layers, KITE_MAX_LAYER_PATTERN);
    hp->local_by_layer = true;
    hp->swa_period = 0;
    for (size_t l = 0; l < json_array_size(types); l++) {
        const json_t *t = json_array_get(types, l);
        const char *name = json_is_string(t) ? json_string_value(t) : "";
        bool local = strcmp(name, "sliding_attention") == 0;
        if (!local && strcmp(name, "full_attention") != 0)
            return kite_fail(e, KITE_ERR_FORMAT, "%s: layer_types[%zu] is neither \"sliding_attention\" nor \"full_attention\"",
                             label, l);
        hp->layer_local[l] = local;
    }
    return KITE_OK;
}

/* Gemma 4's text keys (transformers' Gemma4TextConfig; Gemma4ForConditionalGeneration nests them in
 * text_config), as Gemma4Model.set_gguf_parameters converts them: head_dim / num_key_value_heads are the
 * sliding layers', global_head_dim / num_global_key_value_heads the full-attention layers' (default: the
 * same), layer_types, sliding_window, rope_parameters.{sliding_attention, full_attention} (rope_theta,
 * partial_rotary_factor; the full layers' "proportional" type turns only that fraction of the pairs),
 * final_logit_softcapping, attention_k_eq_v (the global layers' missing v_proj says it too). Norm weights
 * as stored (x * w). Refused by name: num_kv_shared_layers, hidden_size_per_layer_input (E2B/E4B),
 * enable_moe_block (26B-A4B), use_double_wide_mlp. */
static int parse_gemma4(const json_t *root, kite_hparams *hp, const char *label, kite_error *e) {
    int rc;
    const json_t *act = field(root, "hidden_activation");
    if (!act) act = field(root, "hidden_act");
    if (act && (!json_is_string(act) || (strcmp(json_string_value(act), "gelu_pytorch_tanh") != 0 &&
                                         strcmp(json_string_value(act), "gelu_tanh") != 0)))
        return kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: hidden_activation '%.32s' is not supported; kite runs gelu_pytorch_tanh",
                         label, json_is_string(act) ? json_string_value(act) : "?");
    int64_t shared = 0, per_layer = 0, global_hd = 0, global_kv = 0, window = 0;
    if ((rc = get_int(root, "num_kv_shared_layers", 0, MAX_LAYERS, false, 0, &shared, label, e))) return rc;
    if (shared > 0)
        return kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: Gemma 4 KV sharing across layers (num_kv_shared_layers %lld) is not supported",
                         label, (long long)shared);
    const json_t *ple = field(root, "hidden_size_per_layer_input");
    if (ple && (rc = get_int(root, "hidden_size_per_layer_input", 0, MAX_DIM, false, 0, &per_layer, label, e))) return rc;
    if (per_layer > 0)
        return kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: Gemma 4 per-layer embeddings (hidden_size_per_layer_input %lld) are not supported",
                         label, (long long)per_layer);
    if (json_is_true(field(root, "enable_moe_block")))
        return kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: Gemma 4 mixture of experts (enable_moe_block) is not supported", label);
    if (json_is_true(field(root, "use_double_wide_mlp")))
        return kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: Gemma 4 per-layer FFN widths (use_double_wide_mlp) are not supported", label);
    if (field(root, "attn_logit_softcapping"))
        return kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: \"attn_logit_softcapping\" is not supported (Gemma 4 has none)", label);
    if ((rc = get_int(root, "global_head_dim", 2, KITE_ATTN_MAX_HEAD_DIM, false, hp->head_dim, &global_hd, label, e))) return rc;
    if ((rc = get_int(root, "num_global_key_value_heads", 1, hp->n_heads, false, hp->n_kv_heads, &global_kv, label, e))) return rc;
    if (global_hd % 2 || hp->n_heads % global_kv)
        return kite_fail(e, KITE_ERR_FORMAT, "%s: global_head_dim %lld must be even and num_global_key_value_heads %lld divide the "
                         "%d heads", label, (long long)global_hd, (long long)global_kv, hp->n_heads);
    if ((rc = get_int(root, "sliding_window", 1, 1 << 24, true, 0, &window, label, e))) return rc;
    if ((rc = parse_layer_types(root, hp, label, e))) return rc;
    double cap = 0.0, local_base = 10000.0, local_part = 1.0, global_base = 1e6, global_part = 1.0;
    if ((rc = get_num(root, "final_logit_softcapping", 0.0, true, 1e9, 0.0, &cap, NULL, label, e))) return rc;
    const json_t *rp = field(root, "rope_parameters");
    const json_t *rp_local = rp ? field(rp, "sliding_attention") : NULL, *rp_global = rp ? field(rp, "full_attention") : NULL;
    if (rp && (!json_is_object(rp_local) || !json_is_object(rp_global)))
        return kite_fail(e, KITE_ERR_FORMAT, "%s: \"rope_parameters\" needs \"sliding_attention\" and \"full_attention\" objects", label);
    if (rp_local) {
        const json_t *type = field(rp_local, "rope_type");
        if (type && (!json_is_string(type) || strcmp(json_string_value(type), "default") != 0))
            return kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: sliding layers' rope_type must be \"default\"", label);
        if ((rc = get_num(rp_local, "rope_theta", 0.0, false, 1e12, 10000.0, &local_base, NULL, label, e)) ||
            (rc = get_num(rp_local, "partial_rotary_factor", 0.0, false, 1.0, 1.0, &local_part, NULL, label, e)))
            return rc;
    }
    if (rp_global) {
        const json_t *type = field(rp_global, "rope_type");
        const char *name = json_is_string(type) ? json_string_value(type) : "default";
        if (strcmp(name, "proportional") != 0 && strcmp(name, "default") != 0)
            return kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: full-attention layers' rope_type '%.32s' is not supported (proportional, "
                             "default)", label, name);
        if ((rc = get_num(rp_global, "rope_theta", 0.0, false, 1e12, 1e6, &global_base, NULL, label, e)) ||
            (rc = get_num(rp_global, "partial_rotary_factor", 0.0, false, 1.0, 1.0, &global_part, NULL, label, e)))
            return rc;
        if (strcmp(name, "default") == 0 && global_part != 1.0)
            return kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: partial RoPE of type default on full-attention layers is not supported", label);
    }
    int64_t local_rot = (int64_t)((double)hp->head_dim * local_part);
    if (local_rot < 2 || local_rot % 2)
        return kite_fail(e, KITE_ERR_FORMAT, "%s: sliding layers rotate %lld dimensions (must be even and at least 2)", label,
                         (long long)local_rot);
    if (!field(root, "tie_word_embeddings")) hp->tied_embeddings = true;
    /* the common fields read head_dim / num_key_value_heads: the sliding layers' */
    hp->head_dim_local = hp->head_dim;
    hp->n_kv_heads_local = hp->n_kv_heads;
    hp->head_dim = (int32_t)global_hd;
    hp->n_kv_heads = (int32_t)global_kv;
    hp->rope_dim_local = (int32_t)local_rot;
    hp->rope_theta = (float)global_base;
    hp->rope_theta_local = (float)local_base;
    hp->rope_global_fraction = global_part < 1.0 ? (float)global_part : 0.0f;
    hp->sliding_window = (int32_t)window;
    hp->final_logit_softcap = (float)cap;
    hp->ffn_act = KITE_FFN_GELU_TANH;
    hp->embd_scale = sqrtf((float)hp->dim);
    hp->attn_scale = 1.0f;
    hp->norm_weight_offset = 0.0f;
    hp->v_norm = true;
    return KITE_OK;
}

/* Muse Glimmer's keys, as MuseGlimmerModel.set_gguf_parameters / modify_tensors convert them:
 * sliding_window, layer_types, final_logit_softcapping, output_multiplier, qk_scale_factor (all required),
 * rope_theta for the sliding layers (the full ones take no RoPE); the four layer norms are stored as w for
 * x * (1 + w), the final norm as w. */
static int parse_muse_glimmer(const json_t *root, kite_hparams *hp, const char *label, kite_error *e) {
    int rc;
    int64_t window = 0;
    double cap = 0.0, mult = 0.0, qk = 0.0;
    if ((rc = get_int(root, "sliding_window", 1, 1 << 24, true, 0, &window, label, e)) ||
        (rc = get_num(root, "final_logit_softcapping", 0.0, true, 1e9, 0.0, &cap, NULL, label, e)) ||
        (rc = get_num(root, "output_multiplier", 0.0, false, 1e9, 0.0, &mult, NULL, label, e)) ||
        (rc = get_num(root, "qk_scale_factor", 0.0, false, 1e9, 0.0, &qk, NULL, label, e)) ||
        (rc = parse_layer_types(root, hp, label, e)))
        return rc;
    if (!field(root, "output_multiplier") || !field(root, "qk_scale_factor"))
        return kite_fail(e, KITE_ERR_FORMAT, "%s: Muse Glimmer needs \"output_multiplier\" and \"qk_scale_factor\"", label);
    hp->sliding_window = (int32_t)window;
    hp->final_logit_softcap = (float)cap;
    hp->logit_scale = (float)mult;
    hp->qk_scale_factor = (float)qk;
    hp->rope_theta_local = hp->rope_theta;
    hp->rope_global_none = true;
    hp->embd_norm = true;
    hp->post_norm_eps = 1e-8f;
    hp->norm_weight_offset = 1.0f;
    return KITE_OK;
}

/* Qwen3-MoE's keys, as transformers' Qwen3MoeConfig reads them: num_experts, num_experts_per_tok,
 * moe_intermediate_size (all required here), norm_topk_prob (default false, as transformers; Qwen3-30B-A3B
 * sets true), and every layer sparse: decoder_sparse_step 1 and no mlp_only_layers (dense layers in
 * between are not supported). */
static int parse_qwen3moe(const json_t *root, kite_hparams *hp, const char *label, kite_error *e) {
    int rc;
    int64_t experts = 0, used = 0, ffn = 0, step = 1;
    if ((rc = get_int(root, "num_experts", 1, KITE_MOE_MAX_EXPERTS, true, 0, &experts, label, e))) return rc;
    if ((rc = get_int(root, "num_experts_per_tok", 1, experts < KITE_MOE_MAX_USED ? experts : KITE_MOE_MAX_USED, true, 0, &used,
                      label, e)))
        return rc;
    if ((rc = get_int(root, "moe_intermediate_size", 1, MAX_FFN, true, 0, &ffn, label, e))) return rc;
    if ((rc = get_int(root, "decoder_sparse_step", 0, MAX_LAYERS, false, 1, &step, label, e))) return rc;
    const json_t *dense = field(root, "mlp_only_layers");
    if (step != 1 || (dense && (!json_is_array(dense) || json_array_size(dense) != 0)))
        return kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: dense layers among the MoE layers (decoder_sparse_step %lld, mlp_only_layers) "
                         "are not supported", label, (long long)step);
    const json_t *norm = field(root, "norm_topk_prob");
    if (norm && !json_is_boolean(norm)) return kite_fail(e, KITE_ERR_FORMAT, "%s: \"norm_topk_prob\" is not a boolean", label);
    hp->n_experts = (int32_t)experts;
    hp->n_experts_used = (int32_t)used;
    hp->expert_ffn_dim = (int32_t)ffn;
    hp->expert_weights_norm = json_is_true(norm);
    return KITE_OK;
}

/* Qwen3.5's keys, as transformers' Qwen3_5TextConfig: linear_{conv_kernel_dim, key_head_dim, value_head_dim,
 * num_key_heads, num_value_heads}, full_attention_interval (default 4) and layer_types (which must follow
 * it), attn_output_gate (default true; false is not supported), RoPE in rope_parameters (transformers 5)
 * or at the top level: rope_theta and partial_rotary_factor (default 0.25), mtp_num_hidden_layers (the
 * next-n blocks under mtp.*; default 0). Value heads stay in HF's order (grouped by key head) and the norms
 * but linear_attn.norm are x * (1 + w). */
static int parse_qwen35(const json_t *root, kite_hparams *hp, const char *label, kite_error *e) {
    int rc;
    int64_t kernel = 0, hk = 0, hv = 0, nk = 0, nv = 0, interval = 4, mtp = 0;
    if ((rc = get_int(root, "linear_conv_kernel_dim", 1, 16, true, 0, &kernel, label, e)) ||
        (rc = get_int(root, "linear_key_head_dim", 1, MAX_HEAD_DIM, true, 0, &hk, label, e)) ||
        (rc = get_int(root, "linear_value_head_dim", 1, MAX_HEAD_DIM, true, 0, &hv, label, e)) ||
        (rc = get_int(root, "linear_num_key_heads", 1, MAX_HEADS, true, 0, &nk, label, e)) ||
        (rc = get_int(root, "linear_num_value_heads", 1, MAX_HEADS, true, 0, &nv, label, e)) ||
        (rc = get_int(root, "full_attention_interval", 1, MAX_LAYERS, false, 4, &interval, label, e)) ||
        (rc = get_int(root, "mtp_num_hidden_layers", 0, KITE_MAX_NEXTN_LAYERS, false, 0, &mtp, label, e)))
        return rc;
    if (nv % nk != 0) return kite_fail(e, KITE_ERR_FORMAT, "%s: %lld value heads are not a multiple of %lld key heads", label,
                                       (long long)nv, (long long)nk);
    const json_t *types = field(root, "layer_types");
    if (types) {
        if (!json_is_array(types) || (int64_t)json_array_size(types) != hp->n_layers)
            return kite_fail(e, KITE_ERR_FORMAT, "%s: \"layer_types\" is not a list of %d layer types", label, hp->n_layers);
        for (int32_t l = 0; l < hp->n_layers; l++) {
            const char *t = json_string_value(json_array_get(types, (size_t)l));
            const bool linear = (l + 1) % interval != 0;
            if (!t || strcmp(t, linear ? "linear_attention" : "full_attention") != 0)
                return kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: layer_types[%d] = %s; kite supports a full-attention layer every "
                                 "full_attention_interval (%lld) layers only", label, l, t ? t : "?", (long long)interval);
        }
    }
    const json_t *gate = field(root, "attn_output_gate");
    if (gate && !json_is_true(gate))
        return kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: \"attn_output_gate\": false is not supported", label);
    const json_t *rp = field(root, "rope_parameters");
    if (rp && !json_is_object(rp)) return kite_fail(e, KITE_ERR_FORMAT, "%s: \"rope_parameters\" is not an object", label);
    const json_t *rope = rp ? rp : root;
    double theta = hp->rope_theta, partial = 0.25;
    if ((rc = get_num(rope, "rope_theta", 0.0, false, 1e12, hp->rope_theta, &theta, NULL, label, e)) ||
        (rc = get_num(rope, "partial_rotary_factor", 0.0, false, 1.0, 0.25, &partial, NULL, label, e)))
        return rc;
    const json_t *type = rp ? field(rp, "rope_type") : NULL;
    if (type && (!json_is_string(type) || strcmp(json_string_value(type), "default") != 0))
        return kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: rope_type '%.32s' is not supported for qwen3_5_text", label,
                         json_is_string(type) ? json_string_value(type) : "?");
    const int32_t rot = (int32_t)((double)hp->head_dim * partial); /* as the converter's int(head_dim * factor) */
    if (rot < 2 || rot % 2 != 0) return kite_fail(e, KITE_ERR_FORMAT, "%s: partial_rotary_factor %g gives %d rotated dimensions",
                                                  label, partial, rot);
    hp->rope_theta = (float)theta;
    hp->n_rot = rot;
    hp->dn_conv_kernel = (int32_t)kernel;
    hp->dn_head_k_dim = (int32_t)hk;
    hp->dn_head_v_dim = (int32_t)hv;
    hp->dn_n_k_heads = (int32_t)nk;
    hp->dn_n_v_heads = (int32_t)nv;
    hp->dn_v_grouped = true;
    hp->full_attn_interval = (int32_t)interval;
    hp->n_nextn_layers = (int32_t)mtp; /* checked against the folder's mtp.* tensors (source_hf.c) */
    hp->attn_output_gate = true;
    hp->norm_weight_offset = 1.0f;
    return KITE_OK;
}

int kite_hf_parse_config(const char *text, size_t len, const char *label, kite_hparams *hp, int32_t *bos_id,
                         int32_t *eos_id, kite_error *e) {
    memset(hp, 0, sizeof *hp);
    *bos_id = -1;
    *eos_id = -1;
    json_t *doc = load_object(text, len, label, e);
    if (!doc) return e ? e->status : KITE_ERR_FORMAT;
    json_t *root = doc;
    int rc;
    int64_t dim = 0, ffn = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0, vocab = 0, ctx = 0;
    double eps = 0.0, theta = 0.0;
    /* Qwen3.5's checkpoints are the vision-language Qwen3_5ForConditionalGeneration: the language model's
     * config sits in text_config (its weights under model.language_model., kite_hf_canonical_name_arch). */
    const json_t *cfg = root, *mt = field(root, "model_type"), *text_config = field(root, "text_config");
    if (json_is_string(mt) && strcmp(json_string_value(mt), "qwen3_5") == 0) {
        if (!json_is_object(text_config)) {
            rc = kite_fail(e, KITE_ERR_FORMAT, "%s: model_type qwen3_5 without a \"text_config\" object", label);
            goto done;
        }
        cfg = text_config;
    } else if (json_is_string(mt) && strcmp(json_string_value(mt), "qwen3_5_moe") == 0) {
        rc = kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: qwen3_5_moe (Gated DeltaNet with routed experts) is not supported yet; kite runs "
                       "the dense qwen3_5", label);
        goto done;
    }
    if ((rc = parse_arch(cfg, &hp->arch, label, e))) goto done;
    /* Gemma 4 / Muse Glimmer ForConditionalGeneration: the text model's keys are in text_config (the vision
     * and audio towers' weights are not read: kite runs the text model) */
    if ((hp->arch == KITE_ARCH_GEMMA4 || hp->arch == KITE_ARCH_MUSE_GLIMMER) && json_is_object(text_config)) cfg = text_config;

    const json_t *act = field(cfg, "hidden_act");
    if (act && hp->arch != KITE_ARCH_GEMMA3 && hp->arch != KITE_ARCH_GEMMA4 && (!json_is_string(act) || strcmp(json_string_value(act), "silu") != 0)) {
        rc = kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: hidden_act '%.32s' is not supported; kite runs silu", label,
                       json_is_string(act) ? json_string_value(act) : "?");
        goto done;
    }
    if (json_is_true(field(cfg, "mlp_bias"))) {
        rc = kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: \"mlp_bias\": true is not supported", label);
        goto done;
    }
    if (json_is_true(field(cfg, "use_sliding_window"))) {
        rc = kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: \"use_sliding_window\": true is not supported", label);
        goto done;
    }

    if ((rc = get_int(cfg, "hidden_size", 1, MAX_DIM, true, 0, &dim, label, e))) goto done;
    if ((rc = get_int(cfg, "intermediate_size", 1, MAX_FFN, true, 0, &ffn, label, e))) goto done;
    if ((rc = get_int(cfg, "num_hidden_layers", 1, MAX_LAYERS, true, 0, &layers, label, e))) goto done;
    if ((rc = get_int(cfg, "num_attention_heads", 1, MAX_HEADS, true, 0, &heads, label, e))) goto done;
    if ((rc = get_int(cfg, "num_key_value_heads", 1, heads, false, heads, &kv_heads, label, e))) goto done;
    if (heads % kv_heads != 0) {
        rc = kite_fail(e, KITE_ERR_FORMAT, "%s: num_attention_heads %lld is not a multiple of num_key_value_heads %lld",
                       label, (long long)heads, (long long)kv_heads);
        goto done;
    }
    if (field(cfg, "head_dim")) {
        if ((rc = get_int(cfg, "head_dim", 2, MAX_HEAD_DIM, true, 0, &head_dim, label, e))) goto done;
    } else {
        if (dim % heads != 0) {
            rc = kite_fail(e, KITE_ERR_FORMAT,
                           "%s: hidden_size %lld is not a multiple of num_attention_heads %lld and head_dim is not given",
                           label, (long long)dim, (long long)heads);
            goto done;
        }
        head_dim = dim / heads;
    }
    if (head_dim % 2 != 0 || head_dim > MAX_HEAD_DIM) {
        rc = kite_fail(e, KITE_ERR_FORMAT, "%s: head_dim %lld must be even and at most %d (RoPE rotates pairs)", label,
                       (long long)head_dim, MAX_HEAD_DIM);
        goto done;
    }
    if ((rc = get_int(cfg, "vocab_size", 1, INT32_MAX, true, 0, &vocab, label, e))) goto done;
    if ((rc = get_int(cfg, "max_position_embeddings", 1, INT32_MAX, false, 2048, &ctx, label, e))) goto done;
    if ((rc = get_num(cfg, "rms_norm_eps", 0.0, false, 1.0, 1e-6, &eps, NULL, label, e))) goto done;
    if ((rc = get_num(cfg, "rope_theta", 0.0, false, 1e12, 10000.0, &theta, NULL, label, e))) goto done;
    const json_t *tie = field(cfg, "tie_word_embeddings");
    if (!tie) tie = field(root, "tie_word_embeddings");
    if (tie && !json_is_boolean(tie)) {
        rc = kite_fail(e, KITE_ERR_FORMAT, "%s: \"tie_word_embeddings\" is not a boolean", label);
        goto done;
    }

    hp->n_vocab = (int32_t)vocab;
    hp->dim = (int32_t)dim;
    hp->n_layers = (int32_t)layers;
    hp->n_heads = (int32_t)heads;
    hp->n_kv_heads = (int32_t)kv_heads;
    hp->head_dim = (int32_t)head_dim;
    hp->ffn_dim = (int32_t)ffn;
    hp->n_ctx_train = (int32_t)ctx;
    hp->rms_eps = (float)eps;
    hp->rope_theta = (float)theta;
    hp->rope_layout = KITE_ROPE_HALF;
    hp->tied_embeddings = json_is_true(tie);
    if (hp->arch == KITE_ARCH_GEMMA3 && (rc = parse_gemma3(cfg, hp, label, e))) goto done;
    if (hp->arch == KITE_ARCH_QWEN3MOE && (rc = parse_qwen3moe(cfg, hp, label, e))) goto done;
    if (hp->arch == KITE_ARCH_QWEN35 && (rc = parse_qwen35(cfg, hp, label, e))) goto done;
    if (hp->arch == KITE_ARCH_LFM2 && (rc = parse_lfm2(cfg, hp, label, e))) goto done;
    if (hp->arch == KITE_ARCH_GEMMA4 && (rc = parse_gemma4(cfg, hp, label, e))) goto done;
    if (hp->arch == KITE_ARCH_MUSE_GLIMMER && (rc = parse_muse_glimmer(cfg, hp, label, e))) goto done;
    if ((rc = parse_rope_scaling(cfg, hp, label, e))) goto done;

    bool given;
    if ((rc = get_token_id(root, "bos_token_id", bos_id, &given, label, e))) goto done;
    if (!given && cfg != root && (rc = get_token_id(cfg, "bos_token_id", bos_id, &given, label, e))) goto done;
    if ((rc = get_token_id(root, "eos_token_id", eos_id, &given, label, e))) goto done;
    if (!given && cfg != root && (rc = get_token_id(cfg, "eos_token_id", eos_id, &given, label, e))) goto done;
    if (*bos_id >= hp->n_vocab || *eos_id >= hp->n_vocab) {
        rc = kite_fail(e, KITE_ERR_FORMAT, "%s: bos_token_id %d / eos_token_id %d not below vocab_size %d", label,
                       *bos_id, *eos_id, hp->n_vocab);
        goto done;
    }
done:
    json_decref(doc);
    if (rc) {
        memset(hp, 0, sizeof *hp);
        *bos_id = *eos_id = -1;
    }
    return rc;
}

int kite_hf_parse_generation_config(const char *text, size_t len, const char *label, kite_gen_params *p,
                                    int32_t *bos_id, int32_t *eos_id, kite_error *e) {
    json_t *root = load_object(text, len, label, e);
    if (!root) return e ? e->status : KITE_ERR_FORMAT;
    kite_gen_params out = *p;
    double x = 0.0;
    int64_t k = 0;
    bool given;
    int rc;
    if ((rc = get_num(root, "temperature", 0.0, true, 1e6, out.temperature, &x, NULL, label, e))) goto done;
    out.temperature = (float)x;
    if ((rc = get_int(root, "top_k", 0, INT32_MAX, false, out.top_k, &k, label, e))) goto done;
    out.top_k = (int32_t)k;
    if ((rc = get_num(root, "top_p", 0.0, false, 1.0, out.top_p, &x, NULL, label, e))) goto done;
    out.top_p = (float)x;
    if ((rc = get_num(root, "min_p", 0.0, true, 1.0, out.min_p, &x, NULL, label, e))) goto done;
    out.min_p = (float)x;
    if ((rc = get_num(root, "repetition_penalty", 0.0, false, 1e6, out.repeat_penalty, &x, NULL, label, e))) goto done;
    out.repeat_penalty = (float)x;
    const json_t *sample = field(root, "do_sample");
    if (sample && !json_is_boolean(sample)) {
        rc = kite_fail(e, KITE_ERR_FORMAT, "%s: \"do_sample\" is not a boolean", label);
        goto done;
    }
    if (json_is_false(sample)) out.temperature = 0.0f;
    int32_t id = -1;
    if ((rc = get_token_id(root, "bos_token_id", &id, &given, label, e))) goto done;
    if (given && bos_id) *bos_id = id;
    if ((rc = get_token_id(root, "eos_token_id", &id, &given, label, e))) goto done;
    if (given && eos_id) *eos_id = id;
    *p = out;
done:
    json_decref(root);
    return rc;
}

/* Parses the decimal layer number at s (no sign, no leading zeros) up to '.', into *layer. */
static bool parse_layer(const char *s, const char **rest, int64_t *layer) {
    int64_t v = 0;
    const char *c = s;
    if (*c < '0' || *c > '9') return false;
    if (*c == '0' && c[1] != '.') return false;
    while (*c >= '0' && *c <= '9') {
        v = v * 10 + (*c - '0');
        if (v > 1000000) return false;
        c++;
    }
    if (*c != '.') return false;
    *layer = v;
    *rest = c + 1;
    return true;
}

int kite_hf_canonical_name(const char *hf_name, int32_t n_layers, char *out, size_t out_size) {
    return kite_hf_canonical_name_arch(KITE_ARCH_LLAMA, hf_name, n_layers, out, out_size);
}

int kite_hf_canonical_name_arch(kite_arch arch, const char *hf_name, int32_t n_layers, char *out, size_t out_size) {
    static const struct { const char *hf, *canon; } globals[] = {
        {"model.embed_tokens.weight", "token_embd.weight"},
        {"model.norm.weight", "output_norm.weight"},
        {"lm_head.weight", "output.weight"},
    };
    /* canon NULL: a weight kite has no place for, which would silently change the model if ignored. */
    static const struct { const char *hf, *canon; } per_layer[] = {
        {"input_layernorm.weight", "attn_norm.weight"},
        {"self_attn.q_proj.weight", "attn_q.weight"},
        {"self_attn.k_proj.weight", "attn_k.weight"},
        {"self_attn.v_proj.weight", "attn_v.weight"},
        {"self_attn.o_proj.weight", "attn_output.weight"},
        {"self_attn.q_proj.bias", "attn_q.bias"},
        {"self_attn.k_proj.bias", "attn_k.bias"},
        {"self_attn.v_proj.bias", "attn_v.bias"},
        {"self_attn.o_proj.bias", NULL},
        {"self_attn.q_norm.weight", "attn_q_norm.weight"},
        {"self_attn.k_norm.weight", "attn_k_norm.weight"},
        {"post_attention_layernorm.weight", "ffn_norm.weight"},
        {"mlp.gate_proj.weight", "ffn_gate.weight"},
        {"mlp.up_proj.weight", "ffn_up.weight"},
        {"mlp.down_proj.weight", "ffn_down.weight"},
        {"mlp.gate_proj.bias", NULL},
        {"mlp.up_proj.bias", NULL},
        {"mlp.down_proj.bias", NULL},
    };
    if (arch == KITE_ARCH_LFM2 && strcmp(hf_name, "model.embedding_norm.weight") == 0)
        return snprintf(out, out_size, "token_embd_norm.weight") < (int)out_size; /* the final norm, llama.cpp's name */
    char unwrapped[256];
    /* Qwen3.5's, Gemma 4's and Muse Glimmer's ForConditionalGeneration checkpoints keep the text model under
     * model.language_model. (the converter maps it as model.); the vision / audio towers are not kite's to run */
    const char *lm = "model.language_model.";
    if ((arch == KITE_ARCH_QWEN35 || arch == KITE_ARCH_GEMMA4 || arch == KITE_ARCH_MUSE_GLIMMER) &&
        strncmp(hf_name, lm, strlen(lm)) == 0) {
        if (snprintf(unwrapped, sizeof unwrapped, "model.%s", hf_name + strlen(lm)) >= (int)sizeof unwrapped) return -1;
        hf_name = unwrapped;
    }
    for (size_t i = 0; i < sizeof globals / sizeof globals[0]; i++)
        if (strcmp(hf_name, globals[i].hf) == 0) return snprintf(out, out_size, "%s", globals[i].canon) < (int)out_size;
    if (arch == KITE_ARCH_QWEN35) { /* the next-n (MTP) blocks, after the trunk's layers */
        const char *mtp = strncmp(hf_name, "mtp.", 4) == 0 ? hf_name + 4 : strncmp(hf_name, "model.mtp.", 10) == 0 ? hf_name + 10 : NULL;
        if (mtp) {
            static const struct { const char *hf, *canon; } head[] = {
                {"fc.weight", "nextn.eh_proj.weight"}, {"pre_fc_norm_embedding.weight", "nextn.enorm.weight"},
                {"pre_fc_norm_hidden.weight", "nextn.hnorm.weight"}, {"norm.weight", "nextn.shared_head_norm.weight"},
            };
            for (size_t i = 0; i < sizeof head / sizeof head[0]; i++)
                if (strcmp(mtp, head[i].hf) == 0) return snprintf(out, out_size, "blk.%d.%s", (int)n_layers, head[i].canon) < (int)out_size;
            const char *rest;
            int64_t block;
            if (strncmp(mtp, "layers.", 7) != 0 || !parse_layer(mtp + 7, &rest, &block)) return -2;
            if (block >= KITE_MAX_NEXTN_LAYERS) return -1;
            /* a decoder layer's tensors, named as layer n_layers + block of the trunk */
            char as_layer[256];
            if (snprintf(as_layer, sizeof as_layer, "model.layers.%d.%s", (int)(n_layers + block), rest) >= (int)sizeof as_layer) return -2;
            return kite_hf_canonical_name_arch(arch, as_layer, n_layers + (int32_t)block + 1, out, out_size);
        }
    }
    const char *prefix = "model.layers.";
    if (strncmp(hf_name, prefix, strlen(prefix)) != 0) return 0;
    const char *rest;
    int64_t layer;
    if (!parse_layer(hf_name + strlen(prefix), &rest, &layer)) return -1;
    if (arch == KITE_ARCH_QWEN3MOE) {
        char moe[64];
        int r = kite_qwen3moe_hf_layer_name(rest, moe, sizeof moe);
        if (r < 0) return r;
        if (r == 1) {
            if (layer >= n_layers) return -1;
            int n = snprintf(out, out_size, "blk.%d.%s", (int)layer, moe);
            return n > 0 && (size_t)n < out_size ? 1 : -1;
        }
    }
    if (arch == KITE_ARCH_LFM2) {
        bool unsupported = false;
        const char *lfm2 = kite_lfm2_hf_layer_name(rest, &unsupported);
        if (unsupported) return layer < n_layers ? -2 : -1;
        if (lfm2) {
            if (layer >= n_layers) return -1;
            int n = snprintf(out, out_size, "blk.%d.%s", (int)layer, lfm2);
            return n > 0 && (size_t)n < out_size ? 1 : -1;
        }
    }
    const char *gemma = arch == KITE_ARCH_GEMMA3 ? kite_gemma3_hf_layer_name(rest)
                        : arch == KITE_ARCH_QWEN35                                   ? kite_qwen35_hf_layer_name(rest)
                        : arch == KITE_ARCH_GEMMA4 || arch == KITE_ARCH_MUSE_GLIMMER ? kite_gemma4_hf_layer_name(arch, rest)
                                                                                     : NULL;
    if (gemma) {
        if (layer >= n_layers) return -1;
        int n = snprintf(out, out_size, "blk.%d.%s", (int)layer, gemma);
        return n > 0 && (size_t)n < out_size ? 1 : -1;
    }
    for (size_t i = 0; i < sizeof per_layer / sizeof per_layer[0]; i++) {
        if (strcmp(rest, per_layer[i].hf) != 0) continue;
        if (layer >= n_layers) return -1;
        if (!per_layer[i].canon) return -2;
        int n = snprintf(out, out_size, "blk.%d.%s", (int)layer, per_layer[i].canon);
        return n > 0 && (size_t)n < out_size ? 1 : -1;
    }
    return 0;
}
