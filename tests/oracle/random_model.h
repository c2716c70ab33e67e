/* Small random-weight models of the Llama-3, Qwen2 and Qwen3 families, written twice: as a GGUF file
 * laid out the way llama.cpp's convert_hf_to_gguf.py lays one out (so llama.cpp can run it), and as a
 * Hugging Face folder (config.json, model.safetensors with HF tensor names, the tokenizer files).
 * Both hold the same weights, so kite must give the same logits for either, and llama.cpp's
 * probabilities for the GGUF are an independent reference for kite's.
 *
 * The vocabulary is a real tokenizer's (tokenizer.json from ../shared/models/tokenizers), written
 * into the GGUF metadata as the converter does ("gpt2" model, byte-level token strings, token types,
 * "a b" merges, BOS/EOS ids). */
#ifndef KITE_ORACLE_RANDOM_MODEL_H
#define KITE_ORACLE_RANDOM_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Deliberate defects, written into the GGUF only, for negative controls: a run of the same weights
 * with one feature missing must disagree with llama.cpp by more than the test's bound. */
typedef enum oracle_variant {
    ORACLE_VARIANT_NONE = 0,
    ORACLE_VARIANT_NO_ROPE_SCALING = 1, /* llama: rope_freqs.weight left out (Llama-3 scaling ignored) */
    ORACLE_VARIANT_ZERO_QKV_BIAS = 2,   /* qwen2: q/k/v biases all zero (as if the bias were dropped) */
    ORACLE_VARIANT_UNIT_QK_NORM = 3,    /* qwen3: q_norm/k_norm weights all one (norm weights ignored) */
    ORACLE_VARIANT_WIDE_WINDOW = 4,     /* gemma3: sliding window 4096 (the window ignored, all else intact) */
    ORACLE_VARIANT_MOE_UNNORMALISED = 5,/* qwen3moe, HF folder only: norm_topk_prob false (top-k weights not divided
                                           by their sum, which llama.cpp always does for qwen3moe) */
    ORACLE_VARIANT_NO_OUTPUT_GATE = 6,  /* qwen35: the gate rows of attn_q zero (sigmoid 1/2 everywhere: no gating) */
    ORACLE_VARIANT_BETA_IGNORED = 7,    /* qwen35: ssm_beta zero (beta 1/2 for every token and head) */
    ORACLE_VARIANT_DECAY_IGNORED = 8,   /* qwen35: ssm_a zero (g = 0: the DeltaNet state never decays) */
    ORACLE_VARIANT_CONV_REVERSED = 9,   /* lfm2: every channel's conv taps in reverse order (newest tap on the oldest
                                           position), all else intact */
    ORACLE_VARIANT_NO_ATTN_GATE = 10,    /* muse-glimmer: attn_gate all zero (sigmoid 0.5 everywhere: after the post-norm the
                                           same as no gate at all) */
    ORACLE_VARIANT_NO_SOFTCAP = 11,      /* muse-glimmer, gemma4: final_logit_softcapping left out */
    ORACLE_VARIANT_NO_PROPORTIONAL_ROPE = 12, /* gemma4: rope_freqs.weight left out (global layers rotate every pair) */
    ORACLE_VARIANT_NO_LAYER_SCALAR = 13, /* gemma4: layer_output_scale.weight left out (scalars ignored) */
} oracle_variant;

typedef struct oracle_spec {
    const char *arch;          /* "llama", "qwen2" or "qwen3" (GGUF general.architecture) */
    const char *hf_model_type; /* config.json model_type */
    const char *hf_class;      /* config.json architectures[0] */
    const char *tokenizer_pre; /* tokenizer.ggml.pre: "llama-bpe" or "qwen2" */
    const char *bos_text;      /* BOS token's text, looked up in tokenizer.json */
    const char *eos_text;      /* EOS token's text */
    bool add_bos;              /* tokenizer.ggml.add_bos_token */
    int32_t dim;               /* residual width */
    int32_t n_layers;
    int32_t n_heads;
    int32_t n_kv_heads;
    int32_t head_dim;          /* per head; may differ from dim / n_heads (Qwen3) */
    bool explicit_head_dim;    /* write attention.key_length/value_length and config head_dim */
    int32_t ffn_dim;
    int32_t n_vocab;           /* embedding rows: the tokenizer's count, or more (padded like Qwen) */
    int32_t n_ctx_train;       /* context_length / max_position_embeddings */
    float rms_eps;
    float rope_theta;
    bool llama3_rope;          /* Llama-3 RoPE scaling (rope_freqs.weight / config rope_scaling) */
    float rope_factor;         /* llama3: factor */
    float rope_low_freq_factor;
    float rope_high_freq_factor;
    int32_t rope_orig_ctx;     /* llama3: original_max_position_embeddings */
    bool qkv_bias;             /* Qwen2: q/k/v projections have biases */
    bool qk_norm;              /* Qwen3: per-head RMSNorm of q and k before RoPE */
    bool tied_embeddings;      /* no output.weight / lm_head.weight */
    bool f16_embeddings;       /* token_embd / embed_tokens stored as F16 (only when not tied, so the
                                  output matmul stays F32 in both engines) */
    /* Gemma 3 (arch "gemma3"): GeGLU, post-norms, embedding scale, QK-norm; norm weights written as w + 1
     * in the GGUF (as the converter does) and as w in the HF folder (for x * (1 + w)). */
    int32_t sliding_window;    /* local layers' window, 0 = none */
    int32_t swa_period;        /* sliding_window_pattern: period - 1 local layers, then a global one */
    float rope_linear_factor;  /* global layers' linear RoPE scaling factor, 0 = none */
    /* Qwen3-MoE (arch "qwen3moe"): every layer's FFN is n_experts SwiGLU experts of expert_ffn_dim, top
     * n_experts_used with normalised weights; GGUF stacks them into ffn_{gate,up,down}_exps (3-D) as the
     * converter does, the HF folder keeps mlp.experts.E.{gate,up,down}_proj and the router mlp.gate. */
    int32_t n_experts;
    int32_t n_experts_used;
    int32_t expert_ffn_dim;
    /* Qwen3.5 (arch "qwen35"): a gated attention layer (q_proj doubled per head into [q | gate], QK-norm,
     * the first n_rot dimensions of a head rotated) every full_attn_interval layers, Gated DeltaNet layers
     * between (dn_n_k key and dn_n_v value heads of dn_head, conv of dn_kernel); norms (but the DeltaNet's
     * output norm) stored as w + 1 in the GGUF and w in the HF folder; the GGUF's value heads reordered from
     * HF's grouped order to llama.cpp's tiled one and A_log stored as -exp(A_log), as the converter does. */
    int32_t full_attn_interval;
    int32_t n_rot;
    int32_t dn_n_k, dn_n_v, dn_head, dn_kernel;
    /* LFM2 (arch "lfm2"): layer_kinds says per layer 'c' (a short gated conv of conv_taps taps) or 'a' (GQA
     * attention with QK-norm); Hugging Face's names (operator_norm, feed_forward.w1/w3/w2, self_attn.out_proj,
     * q/k_layernorm, conv.{in_proj,conv,out_proj}, model.embedding_norm last); the GGUF as conversion/lfm2.py
     * writes it (per-layer head_count_kv with 0 for conv layers, shortconv.l_cache, the conv squeezed to
     * [dim, L], token_embd_norm). config.json's intermediate_size is hf_ffn_dim, which block_auto_adjust_ff_dim
     * (multiple of 64) turns into ffn_dim. */
    const char *layer_kinds;
    int32_t conv_taps;
    int32_t hf_ffn_dim;
    /* Gemma 4 (arch "gemma4") and Muse Glimmer (arch "muse-glimmer"): the local/global pattern is written per
     * layer (a bool array, from config.json's layer_types) with sliding_window and swa_period as above. */
    int32_t head_dim_swa;      /* gemma4: local layers' head size (head_dim is the global layers'), 0 = head_dim */
    int32_t n_kv_heads_swa;    /* gemma4: local layers' KV heads, 0 = n_kv_heads */
    float rope_theta_swa;      /* gemma4: local layers' RoPE base */
    float partial_rotary_global; /* gemma4: proportional RoPE of global layers (rotated fraction of the pairs) */
    bool k_eq_v;               /* gemma4: global layers have no v_proj (V = K's projection) */
    bool layer_scalar;         /* gemma4: per-layer output scalars */
    float softcap;             /* muse-glimmer, gemma4: final logit soft-cap, 0 = none */
    float logit_scale;         /* muse-glimmer: output multiplier */
    float qk_scale;            /* muse-glimmer: qk_scale_factor (the GGUF's q_norm weights) */
    uint64_t seed;
    oracle_variant variant;
} oracle_spec;

/* The spec the oracle test uses for arch "llama", "qwen2", "qwen3", "gemma3", "qwen3moe" or "lfm2"; false for another name. */
bool oracle_default_spec(const char *arch, oracle_spec *spec);

/* The vocabulary as GGUF metadata wants it, read from tokenizer_dir/tokenizer.json (the slow part of
 * writing a model, so it can be shared by several models of one tokenizer and size: spec's n_vocab,
 * bos_text and eos_text). Returns 0, or -1 with a one-line message in err. */
typedef struct oracle_vocab oracle_vocab;
int oracle_vocab_load(oracle_vocab **out, const oracle_spec *spec, const char *tokenizer_dir, char *err, size_t err_size);
void oracle_vocab_free(oracle_vocab *vocab);

/* Writes the model with vocab (loaded for an equivalent spec). gguf_path and hf_dir may each be NULL to
 * skip that output; hf_dir must exist, and gets copies of tokenizer_dir's tokenizer.json and
 * tokenizer_config.json. Returns 0, or -1 with a one-line message in err. */
int oracle_write_model(const oracle_spec *spec, const oracle_vocab *vocab, const char *tokenizer_dir,
                       const char *gguf_path, const char *hf_dir, char *err, size_t err_size);

#endif
