/* kite_write_random_model: GGUF files of real model shapes with random weights, for benchmarks.
 *
 * Weights are drawn row by row from a counter-based stream keyed by (seed, tensor name, row), so the
 * file does not depend on the thread count, and quantized on all cores with the reference quantizers
 * (kite_type_get(t)->from_float). Types follow llama.cpp's recipes: "q4_0" and "q8_0" quantize every
 * matrix, the embedding and the output included (llama-quantize --pure; the figures in
 * docs/PERFORMANCE.md assume this); "q4_k_m" is llama-quantize's Q4_K_M (Q4_K, with Q6_K for the
 * output matrix (or the tied embedding) and for attn_v / ffn_down in the layers use_more_bits picks).
 * "kt2", "kt2_5", "kt3" and "kt2_5_m" follow kite quantize's trellis recipe (quant/trellis.h), for speed
 * measurements only: a trellis matrix is its first row group (16 rows) encoded and repeated, since the
 * Viterbi encoder would take about an hour for a 1.1B model. Norm weights are 1 and stay f32.
 *
 * The tokenizer goes into the file as tokenizer.ggml.* so llama.cpp loads it too: a llama2.c
 * tokenizer .bin becomes an SPM ("llama") vocabulary with scores and token types; a byte-level BPE
 * tokenizer.json becomes a "gpt2" vocabulary with merges; a SentencePiece-style one (byte fallback: Gemma 3's)
 * an SPM vocabulary with scores rebuilt from its merges (vocab_from_hf_spm); without one, a byte-only SPM vocabulary
 * (<unk>, <s>, </s>, <0x00>..<0xFF>) is written. A vocabulary smaller than the shape's is padded with
 * "<pad_N>" tokens (type unused). */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/fp16.h"
#include "base/threadpool.h"
#include "engine/random_model.h"
#include "io/gguf.h"
#include "io/mmap.h"
#include "model/tensors.h"
#include "quant/trellis.h"
#include "quant/types.h"

/* ---- shapes ----------------------------------------------------------------------------------- */
typedef struct model_shape {
    const char *name;
    const char *arch;      /* general.architecture */
    int32_t dim, n_layers, n_heads, n_kv_heads, head_dim, ffn_dim;
    int32_t n_vocab;       /* 0: the tokenizer's (tiny) */
    int32_t n_ctx;
    float rope_theta, rms_eps;
    bool tied, qk_norm;
    int32_t sliding_window, swa_period; /* gemma3: local layers' window and the pattern's period (0: none) */
    int32_t n_experts, n_experts_used, expert_ffn_dim; /* qwen3moe: routed experts replace the dense FFN (0: none) */
    float weight_scale;    /* matrices' values are KITE_RANDOM_WEIGHT_STD x this (0: 1); norms stay 1 */
    /* qwen35: a gated full-attention layer every full_attn_interval layers, Gated DeltaNet layers between
     * (conv width, key and value heads of dn_head each, then the rotated part of an attention head). */
    int32_t full_attn_interval, dn_kernel, dn_n_k, dn_n_v, dn_head, n_rot;
    const char *layer_kinds; /* lfm2: one letter per layer, 'c' a short conv block, 'a' attention (NULL: all attend) */
    int32_t conv_taps;       /* lfm2: the conv's kernel length (shortconv.l_cache) */
    struct { /* features of one family or a few (designated initializers); zero elsewhere */
        int32_t head_dim_swa, n_kv_heads_swa; /* gemma4: local layers' head size and KV heads (global: head_dim, n_kv_heads) */
        float rope_theta_swa;                 /* gemma4: local layers' RoPE base */
        float partial_rotary_global;          /* gemma4: proportional RoPE fraction (rope_freqs.weight: 1, then 1e30) */
        bool k_eq_v;                          /* gemma4: global layers without attn_v */
        float softcap, logit_scale;           /* gemma4 / muse-glimmer: final soft-cap; muse-glimmer's output multiplier */
        float layer_scalar[2];                /* gemma4: layer l's output scalar is layer_scalar[l % 2] (0: 1) */
        float qk_scale;                       /* muse-glimmer: qk_scale_factor, which the converter writes as the GGUF's
                                                 q_norm (k_norm 1); the HF folder has no q/k norms (0: 1) */
        bool qkv_bias;                        /* qwen2: attn_{q,k,v}.bias */
        bool f16_embd;                        /* qwen2: token_embd stored F16 in an f32 file and in the HF folder (untied) */
        struct { float factor, low_freq, high_freq; int32_t orig_ctx; } llama3; /* llama: Llama-3 RoPE scaling as
                                                 rope_freqs.weight divisors (config rope_scaling "llama3"); factor 0: none */
        float rope_linear;                    /* gemma3: the global layers' linear RoPE scaling factor (0: none) */
    } family;
    /* qwen35: next-n (MTP) blocks after the trunk, as llama.cpp's converter writes them (block_count = n_layers +
     * n_nextn, nextn_predict_layers = n_nextn): a gated full-attention block plus blk.L.nextn.{eh_proj, enorm, hnorm,
     * shared_head_norm}, the embedding and output borrowed from the trunk. 0: none. */
    int32_t n_nextn;
} model_shape;

static bool shape_layer_is_conv(const model_shape *s, int l) { return s->layer_kinds && s->layer_kinds[l] == 'c'; }

static const model_shape k_shapes[] = {
    /* TinyLlama-1.1B's layout with the FFN of the project's issue (8192 rather than TinyLlama's 5632). */
    {"llama-1.1b", "llama", 2048, 16, 32, 8, 64, 8192, 32000, 2048, 10000.0f, 1e-5f, false, false, 0, 0, 0, 0, 0, 0.0f, 0, 0, 0, 0, 0, 0, NULL, 0, {0}, 0},
    {"qwen3-0.6b", "qwen3", 1024, 28, 16, 8, 128, 3072, 151936, 40960, 1000000.0f, 1e-6f, true, true, 0, 0, 0, 0, 0, 0.0f, 0, 0, 0, 0, 0, 0, NULL, 0, {0}, 0},
    /* Tests: Qwen3 in miniature (QK-norm, head size 64 with dim 128, tied); weights 8x the default deviation. */
    {"tiny-qwen3", "qwen3", 128, 2, 4, 2, 64, 256, 0, 512, 1000000.0f, 1e-6f, true, true, 0, 0, 0, 0, 0, 8.0f, 0, 0, 0, 0, 0, 0, NULL, 0, {0}, 0},
    /* Tests: Llama 3.2 in miniature (GQA 2:1, tied) with Llama-3 RoPE scaling (factor 8, low 1, high 4) over an original
     * context of 256, so that the scaled pairs turn by visibly different angles within the first hundred positions;
     * weights 8x the default deviation. */
    {"tiny-llama3", "llama", 128, 2, 4, 2, 32, 384, 0, 2048, 500000.0f, 1e-5f, true, false, 0, 0, 0, 0, 0, 8.0f, 0, 0, 0, 0, 0, 0, NULL, 0,
     {.llama3 = {8.0f, 1.0f, 4.0f, 256}}, 0},
    /* Tests: Qwen2 in miniature: q/k/v biases, 4 query heads on one KV head, untied output, F16 embeddings, 151936 rows as
     * Qwen's configs have (the tokenizer's tokens, then padding); weights 8x the default deviation. */
    {"tiny-qwen2", "qwen2", 64, 2, 4, 1, 16, 160, 151936, 512, 1000000.0f, 1e-6f, false, false, 0, 0, 0, 0, 0, 8.0f, 0, 0, 0, 0, 0, 0, NULL, 0,
     {.qkv_bias = true, .f16_embd = true}, 0},
    {"llama-3.2-1b", "llama", 2048, 16, 32, 8, 64, 8192, 128256, 131072, 500000.0f, 1e-5f, true, false, 0, 0, 0, 0, 0, 0.0f, 0, 0, 0, 0, 0, 0, NULL, 0, {0}, 0},
    {"tiny", "llama", 256, 2, 4, 2, 64, 512, 0, 512, 10000.0f, 1e-5f, false, false, 0, 0, 0, 0, 0, 0.0f, 0, 0, 0, 0, 0, 0, NULL, 0, {0}, 0},
    /* tiny with 4 layers: an EAGLE-3 head for it reads layer inputs only (0, 2, 3), as llama.cpp's llama graph exposes. */
    {"tiny-l4", "llama", 256, 4, 4, 2, 64, 512, 0, 512, 10000.0f, 1e-5f, false, false, 0, 0, 0, 0, 0, 0.0f, 0, 0, 0, 0, 0, 0, NULL, 0, {0}, 0},
    /* Gemma 3 1B: 26 layers, five sliding-window layers (window 512) for each global one. */
    {"gemma3-1b", "gemma3", 1152, 26, 4, 1, 256, 6912, 262144, 32768, 1000000.0f, 1e-6f, true, true, 512, 6, 0, 0, 0, 0.0f, 0, 0, 0, 0, 0, 0, NULL, 0, {0}, 0},
    /* Tests: layers 0-1 local (window 8, RoPE base 10000), layer 2 global (base 1e6 with linear scaling 8, as Gemma 3
     * 4B's); weights 8x the default deviation so greedy choices are not near-ties. */
    {"tiny-gemma3", "gemma3", 128, 3, 4, 2, 64, 384, 0, 512, 1000000.0f, 1e-6f, true, true, 8, 3, 0, 0, 0, 8.0f, 0, 0, 0, 0, 0, 0, NULL, 0,
     {.rope_linear = 8.0f}, 0},
    /* Qwen3-30B-A3B's layer (128 experts of 768, 8 per token, the dense feed_forward_length 6144 unused) with 4 of
     * its 48 layers: the real shape of every product for benchmarks, at 1/12 of the size (2.7B weights). */
    {"qwen3moe-a3b-4l", "qwen3moe", 2048, 4, 32, 4, 128, 6144, 151936, 40960, 1000000.0f, 1e-6f, false, true, 0, 0,
     128, 8, 768, 0.0f, 0, 0, 0, 0, 0, 0, NULL, 0, {0}, 0},
    /* Tests: 8 experts of 64, 2 per token; weights 8x the default deviation (0.16) so the router's and the output's
     * logits spread over units (greedy choices and expert choices are not near-ties). */
    {"tiny-qwen3moe", "qwen3moe", 128, 2, 4, 2, 32, 256, 0, 512, 1000000.0f, 1e-6f, true, true, 0, 0, 8, 2, 64, 8.0f, 0, 0, 0, 0, 0, 0, NULL, 0, {0}, 0},
    /* Qwen3.5-0.8B's published config: 24 layers, every fourth gated attention (8 heads of 256, 2 KV heads, a
     * quarter of each head rotated), the others Gated DeltaNet (16 key and 16 value heads of 128, conv 4). */
    {"qwen3.5-0.8b", "qwen35", 1024, 24, 8, 2, 256, 3584, 248320, 262144, 10000000.0f, 1e-6f, true, true, 0, 0, 0, 0, 0, 0.0f,
     4, 4, 16, 16, 128, 64, NULL, 0, {0}, 0},
    /* Tests: layers 0-2 DeltaNet (2 key heads, 4 value heads of 16), layer 3 attention (8 of 32 rotated). */
    {"tiny-qwen35", "qwen35", 128, 4, 4, 2, 32, 256, 0, 512, 10000000.0f, 1e-6f, true, true, 0, 0, 0, 0, 0, 8.0f,
     4, 4, 2, 4, 16, 8, NULL, 0, {0}, 0},
    /* tiny-qwen35 with one next-n (MTP) block: the drafter's test shape. */
    {"tiny-qwen35-mtp", "qwen35", 128, 4, 4, 2, 32, 256, 0, 512, 10000000.0f, 1e-6f, true, true, 0, 0, 0, 0, 0, 8.0f,
     4, 4, 2, 4, 16, 8, NULL, 0, {0}, 1},
    /* qwen3.5-0.8b with its one MTP block (mtp_num_hidden_layers 1 in the published config). */
    {"qwen3.5-0.8b-mtp", "qwen35", 1024, 24, 8, 2, 256, 3584, 248320, 262144, 10000000.0f, 1e-6f, true, true, 0, 0, 0, 0, 0, 0.0f,
     4, 4, 16, 16, 128, 64, NULL, 0, {0}, 1},
    /* LFM2-350M (LiquidAI/LFM2-350M's config.json): 16 layers, attention at 2, 5, 8, 10, 12, 14, the rest short
     * convolutions of 3 taps; intermediate_size 6656 adjusted as llama.cpp's converter does (block_auto_adjust_ff_dim:
     * 256 * ceil(int(2 * 6656 / 3) / 256) = 4608), vocabulary 65536, tied embeddings. */
    {"lfm2-350m", "lfm2", 1024, 16, 16, 8, 64, 4608, 65536, 128000, 1000000.0f, 1e-5f, true, true, 0, 0, 0, 0, 0, 0.0f,
     0, 0, 0, 0, 0, 0, "ccaccaccacacacac", 3, {0}, 0},
    /* Tests: conv, conv, attention, conv (two convs in a row, a conv after attention); weights 8x the default
     * deviation so greedy choices are not near-ties. */
    {"tiny-lfm2", "lfm2", 128, 4, 4, 2, 32, 256, 0, 512, 1000000.0f, 1e-5f, true, true, 0, 0, 0, 0, 0, 8.0f, 0, 0, 0, 0, 0, 0, "ccac", 3, {0}, 0},
    /* Gemma 4 31B's layer shapes (heads 32; local layers head size 256 with 16 KV heads, window 1024; global ones 512
     * with 4 KV heads, k_eq_v, proportional RoPE over a quarter of the pairs) with 6 of its 60 layers (five local,
     * one global): every product's real shape for benchmarks. */
    {"gemma4-31b-6l", "gemma4", 5376, 6, 32, 4, 512, 21504, 262144, 262144, 1000000.0f, 1e-6f, true, true, 1024, 6, 0, 0, 0,
     0.0f, 0, 0, 0, 0, 0, 0, NULL, 0, {.head_dim_swa = 256, .n_kv_heads_swa = 16, .rope_theta_swa = 10000.0f, .partial_rotary_global = 0.25f,
            .k_eq_v = true, .softcap = 30.0f}, 0},
    /* Tests: layers 0-1 local (window 8, head size 32, 2 KV heads), layer 2 global (head size 64, 1 KV head, k_eq_v,
     * proportional RoPE; base 1000 rather than the 31B's 1e6, so the pairs the divisors stop would turn by radians within
     * a hundred positions), layer scalars 3, 0.25, 3 (far from 1, so ignoring them shows), soft-cap 5; weights 8x the default
     * deviation so greedy choices are not near-ties and the logits (deviation about 1.8) reach where the soft-cap bends them. */
    {"tiny-gemma4", "gemma4", 128, 3, 4, 1, 64, 384, 0, 512, 1000.0f, 1e-6f, true, true, 8, 3, 0, 0, 0, 8.0f, 0, 0, 0, 0, 0, 0, NULL, 0,
     {.head_dim_swa = 32, .n_kv_heads_swa = 2, .rope_theta_swa = 10000.0f, .partial_rotary_global = 0.25f, .k_eq_v = true,
      .softcap = 5.0f, .layer_scalar = {3.0f, 0.25f}}, 0},
    /* Tests: Muse Glimmer's pattern (three sliding layers with RoPE, then a full one without), window 8, the output
     * gate, qk_scale_factor 1.6, untied output with multiplier 0.5 and soft-cap 5 (the logits reach about 5, so it bends
     * them and leaving it out shows); weights 8x the default deviation. */
    {"tiny-muse-glimmer", "muse-glimmer", 128, 4, 4, 2, 32, 384, 0, 512, 10000.0f, 1e-6f, false, true, 8, 4, 0, 0, 0, 8.0f, 0, 0, 0, 0, 0, 0, NULL, 0,
     {.softcap = 5.0f, .logit_scale = 0.5f, .qk_scale = 1.6f}, 0},
};

enum { TINY_DEFAULT_VOCAB = 512 };

/* ---- types ------------------------------------------------------------------------------------ */
typedef enum model_type { MT_F32, MT_F16, MT_BF16, MT_Q8_0, MT_Q4_0, MT_Q4_K_M, MT_KT2, MT_KT2_5, MT_KT3, MT_KT2_5_M } model_type;

static const struct {
    const char *name;
    model_type type;
    uint32_t file_type; /* llama_ftype, for general.file_type */
} k_types[] = {
    {"f32", MT_F32, 0}, {"f16", MT_F16, 1}, {"bf16", MT_BF16, 32},
    {"q8_0", MT_Q8_0, 7}, {"q4_0", MT_Q4_0, 2}, {"q4_k_m", MT_Q4_K_M, 15},
    /* kite's trellis types (quant/trellis.h) with kite quantize's recipe; file types as it writes them */
    {"kt2", MT_KT2, 0x4B540034}, {"kt2_5", MT_KT2_5, 0x4B540035}, {"kt3", MT_KT3, 0x4B540036}, {"kt2_5_m", MT_KT2_5_M, 0x4B540135},
};

static bool is_trellis_model(model_type mt) { return mt == MT_KT2 || mt == MT_KT2_5 || mt == MT_KT3 || mt == MT_KT2_5_M; }

/* kite quantize's trellis recipe (quant/quantize_model.c): layer matrices get the file's type (KT2_5_M: KT3 for
 * attention and ffn_down, KT2 for the rest), unless the trellis layout does not fit them (Q4_K, then Q5_0 / F16).
 * Always the rotated variant, the slower of the two (its activations are rotated for every product), where
 * kite quantize picks per matrix. */
static uint32_t trellis_matrix_type(model_type mt, const char *name, const int64_t ne[3]) {
    uint32_t t = mt == MT_KT2 ? KITE_TYPE_KT2H : mt == MT_KT2_5 ? KITE_TYPE_KT2_5H : mt == MT_KT3 ? KITE_TYPE_KT3H
               : (strstr(name, ".attn_") || strstr(name, ".ffn_down")) ? KITE_TYPE_KT3H : KITE_TYPE_KT2H;
    if (ne[0] % KT_BLOCK != 0 || ne[1] % KT_ROWS != 0 || ne[2] != 1) t = KITE_TYPE_Q4_K;
    if (t == KITE_TYPE_Q4_K && ne[0] % 256 != 0) t = ne[0] % 32 == 0 ? KITE_TYPE_Q5_0 : KITE_TYPE_F16;
    return t;
}

/* llama.cpp's use_more_bits: the first and last eighth of the layers and every third in between. */
static bool use_more_bits(int i_layer, int n_layers) {
    return i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2;
}

typedef enum tensor_role { ROLE_NORM, ROLE_EMBD, ROLE_OUTPUT, ROLE_ATTN_V, ROLE_FFN_DOWN, ROLE_MATRIX, ROLE_ROUTER, ROLE_CONV, ROLE_BIAS } tensor_role;

static uint32_t storage_type(model_type mt, tensor_role role, int layer, int n_layers, bool tied) {
    /* llama-quantize keeps the MoE router (ffn_gate_inp), LFM2's conv taps (rows of 3) and biases in F32, as the norms. */
    if (role == ROLE_NORM || role == ROLE_ROUTER || role == ROLE_CONV || role == ROLE_BIAS) return KITE_TYPE_F32;
    switch (mt) {
    case MT_F32: return KITE_TYPE_F32;
    case MT_F16: return KITE_TYPE_F16;
    case MT_BF16: return KITE_TYPE_BF16;
    case MT_Q8_0: return KITE_TYPE_Q8_0;
    case MT_Q4_0: return KITE_TYPE_Q4_0;
    case MT_KT2: case MT_KT2_5: case MT_KT3: case MT_KT2_5_M: /* matrices: trellis_matrix_type, by name */
        if (role == ROLE_OUTPUT || (role == ROLE_EMBD && tied)) return KITE_TYPE_Q6_K;
        return KITE_TYPE_Q4_K;
    case MT_Q4_K_M:
        if (role == ROLE_OUTPUT || (role == ROLE_EMBD && tied)) return KITE_TYPE_Q6_K;
        if ((role == ROLE_ATTN_V || role == ROLE_FFN_DOWN) && use_more_bits(layer, n_layers)) return KITE_TYPE_Q6_K;
        return KITE_TYPE_Q4_K;
    }
    return KITE_TYPE_F32;
}

/* ---- the value stream ------------------------------------------------------------------------- */
static uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static uint64_t fnv1a64(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

static bool is_norm_name(const char *name) {
    size_t n = strlen(name), k = strlen("norm.weight");
    return n >= k && strcmp(name + n - k, "norm.weight") == 0;
}

/* The stream itself: mean 0, deviation KITE_RANDOM_WEIGHT_STD, whatever the name. */
static void random_stream_row(uint64_t seed, const char *name, int64_t row, float *out, int64_t n);

void kite_random_model_row(uint64_t seed, const char *name, int64_t row, float *out, int64_t n) {
    if (is_norm_name(name)) {
        for (int64_t i = 0; i < n; i++) out[i] = 1.0f;
        return;
    }
    random_stream_row(seed, name, row, out, n);
}

static void random_stream_row(uint64_t seed, const char *name, int64_t row, float *out, int64_t n) {
    /* xorshift64* seeded per row; each draw gives four 16-bit uniforms whose sum (Irwin-Hall, n = 4:
     * mean 2, variance 1/3 in units of 65536) is scaled to the target deviation. */
    uint64_t state = splitmix64(splitmix64(seed ^ fnv1a64(name)) + (uint64_t)row);
    if (state == 0) state = 1;
    const float scale = KITE_RANDOM_WEIGHT_STD * 1.7320508f / 65536.0f; /* sqrt(3) / 65536 */
    for (int64_t i = 0; i < n; i++) {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        uint64_t r = state * 0x2545F4914F6CDD1Dull;
        int32_t sum = (int32_t)(r & 0xffff) + (int32_t)((r >> 16) & 0xffff) + (int32_t)((r >> 32) & 0xffff) +
                      (int32_t)(r >> 48);
        out[i] = (float)(sum - 131070) * scale;
    }
}

/* ---- the tokenizer to embed ------------------------------------------------------------------- */
typedef struct vocab {
    const char *model;  /* tokenizer.ggml.model: "llama" or "gpt2" */
    const char *pre;    /* tokenizer.ggml.pre for gpt2, or NULL */
    int32_t n;          /* tokens, after padding */
    char **tokens;      /* [n] owned NUL-terminated texts */
    float *scores;      /* [n] or NULL */
    int32_t *types;     /* [n] GGUF token types */
    char **merges;      /* [n_merges] owned "left right" */
    uint64_t n_merges;
    int32_t bos, eos, unk, pad; /* -1 when absent */
    bool add_bos;
    int add_space_prefix;  /* tokenizer.ggml.add_space_prefix: 0 false, 1 true, -1 not written */
    char *chat_template;   /* tokenizer.chat_template (tokenizer_config.json's), or NULL */
} vocab;

enum { TOK_NORMAL = 1, TOK_UNKNOWN = 2, TOK_CONTROL = 3, TOK_USER_DEFINED = 4, TOK_UNUSED = 5, TOK_BYTE = 6 };

static void vocab_free(vocab *v) {
    for (int32_t i = 0; v->tokens && i < v->n; i++) free(v->tokens[i]);
    for (uint64_t i = 0; v->merges && i < v->n_merges; i++) free(v->merges[i]);
    free(v->tokens);
    free(v->scores);
    free(v->types);
    free(v->merges);
    free(v->chat_template);
    memset(v, 0, sizeof *v);
}

static int vocab_alloc(vocab *v, int32_t n, bool scores, kite_error *e) {
    v->n = n;
    v->tokens = calloc((size_t)n, sizeof *v->tokens);
    v->types = calloc((size_t)n, sizeof *v->types);
    v->scores = scores ? calloc((size_t)n, sizeof *v->scores) : NULL;
    if (!v->tokens || !v->types || (scores && !v->scores)) return kite_fail(e, KITE_ERR_NOMEM, "random model: out of memory for %d tokens", n);
    return KITE_OK;
}

static char *dup_bytes(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

/* Fills token slots that are still empty (ids no source token claimed, and the shape's extra
 * rows) with "<pad_N>", type unused. */
static int vocab_pad(vocab *v, int32_t n_total, kite_error *e) {
    if (n_total > v->n) {
        char **t = realloc(v->tokens, (size_t)n_total * sizeof *t);
        if (t) v->tokens = t;
        int32_t *ty = t ? realloc(v->types, (size_t)n_total * sizeof *ty) : NULL;
        if (ty) v->types = ty;
        float *sc = v->scores && ty ? realloc(v->scores, (size_t)n_total * sizeof *sc) : NULL;
        if (sc) v->scores = sc;
        if (!t || !ty || (v->scores && !sc)) return kite_fail(e, KITE_ERR_NOMEM, "random model: out of memory padding the vocabulary");
        for (int32_t i = v->n; i < n_total; i++) {
            v->tokens[i] = NULL;
            v->types[i] = 0;
            if (v->scores) v->scores[i] = 0;
        }
        v->n = n_total;
    }
    for (int32_t i = 0; i < v->n; i++) {
        if (v->tokens[i]) continue;
        char buf[32];
        snprintf(buf, sizeof buf, "<pad_%d>", i);
        if (!(v->tokens[i] = strdup(buf))) return kite_fail(e, KITE_ERR_NOMEM, "random model: out of memory");
        v->types[i] = TOK_UNUSED;
        if (v->scores) v->scores[i] = -1e9f;
    }
    return KITE_OK;
}

/* <unk>, <s>, </s> and the 256 byte tokens: every text tokenizes (as bytes), and llama.cpp accepts it. */
static int vocab_bytes_only(vocab *v, kite_error *e) {
    int st = vocab_alloc(v, 3 + 256, true, e);
    if (st) return st;
    const char *specials[3] = {"<unk>", "<s>", "</s>"};
    for (int i = 0; i < 3; i++) {
        v->tokens[i] = strdup(specials[i]);
        v->types[i] = i == 0 ? TOK_UNKNOWN : TOK_CONTROL;
    }
    for (int b = 0; b < 256; b++) {
        char buf[8];
        snprintf(buf, sizeof buf, "<0x%02X>", b);
        v->tokens[3 + b] = strdup(buf);
        v->types[3 + b] = TOK_BYTE;
    }
    for (int i = 0; i < v->n; i++)
        if (!v->tokens[i]) return kite_fail(e, KITE_ERR_NOMEM, "random model: out of memory");
    v->model = "llama";
    v->unk = 0, v->bos = 1, v->eos = 2;
    v->add_bos = true;
    return KITE_OK;
}

static bool is_byte_token(const char *s, size_t n) {
    static const char hex[] = "0123456789ABCDEF";
    return n == 6 && memcmp(s, "<0x", 3) == 0 && strchr(hex, s[3]) && strchr(hex, s[4]) && s[3] && s[4] && s[5] == '>';
}

/* llama2.c tokenizer .bin: int32 max_token_len, then per id f32 score, int32 len, len bytes. Spaces
 * are stored as ' ' and BOS / EOS as "\n<s>\n" / "\n</s>\n"; GGUF wants SentencePiece's spelling. */
static int vocab_from_llama2c(vocab *v, const char *path, const unsigned char *p, size_t size, kite_error *e) {
    if (size < 4) return kite_fail(e, KITE_ERR_FORMAT, "%s: %zu bytes is too short for a llama2.c tokenizer", path, size);
    size_t off = 4, count = 0;
    while (off < size) {
        int32_t len;
        if (size - off < 8) return kite_fail(e, KITE_ERR_FORMAT, "%s: token %zu header truncated at byte %zu", path, count, off);
        memcpy(&len, p + off + 4, 4);
        if (len < 0 || (size_t)len > size - off - 8)
            return kite_fail(e, KITE_ERR_FORMAT, "%s: token %zu length %d runs past the end of the file", path, count, len);
        if (memchr(p + off + 8, 0, (size_t)len)) return kite_fail(e, KITE_ERR_FORMAT, "%s: token %zu contains a NUL byte", path, count);
        off += 8 + (size_t)len;
        if (++count > (1u << 24)) return kite_fail(e, KITE_ERR_FORMAT, "%s: more than 16M tokens", path);
    }
    if (count < 3) return kite_fail(e, KITE_ERR_FORMAT, "%s: %zu tokens; a llama2.c tokenizer has <unk>, <s>, </s> first", path, count);
    int st = vocab_alloc(v, (int32_t)count, true, e);
    if (st) return st;
    off = 4;
    for (size_t id = 0; id < count; id++) {
        int32_t len;
        memcpy(&v->scores[id], p + off, 4);
        memcpy(&len, p + off + 4, 4);
        const char *s = (const char *)p + off + 8;
        off += 8 + (size_t)len;
        if (!isfinite(v->scores[id])) return kite_fail(e, KITE_ERR_FORMAT, "%s: token %zu has a non-finite score", path, id);
        if ((id == 1 || id == 2) && len >= 4 && s[0] == '\n' && s[len - 1] == '\n') s++, len -= 2;
        char *t = malloc((size_t)len * 3 + 1), *w = t;
        if (!t) return kite_fail(e, KITE_ERR_NOMEM, "random model: out of memory");
        for (int32_t k = 0; k < len; k++) {
            if (s[k] == ' ') memcpy(w, "\xE2\x96\x81", 3), w += 3; /* U+2581 */
            else *w++ = s[k];
        }
        *w = 0;
        v->tokens[id] = t;
        v->types[id] = id == 0 ? TOK_UNKNOWN : id <= 2 ? TOK_CONTROL : is_byte_token(t, (size_t)(w - t)) ? TOK_BYTE : TOK_NORMAL;
    }
    v->model = "llama";
    v->unk = 0, v->bos = 1, v->eos = 2;
    v->add_bos = true;
    return KITE_OK;
}

static int32_t vocab_find(const vocab *v, const char *text) {
    for (int32_t i = 0; i < v->n; i++)
        if (v->tokens[i] && strcmp(v->tokens[i], text) == 0) return i;
    return -1;
}

/* The converter's does_token_look_special: added tokens it makes control although they are not marked special. */
static bool looks_special(const char *s, size_t n) {
    static const char *const named[] = {"<pad>", "<mask>", "<2mass>", "[@BOS@]"};
    for (size_t k = 0; k < sizeof named / sizeof named[0]; k++)
        if (strcmp(s, named[k]) == 0) return true;
    const bool bar = n >= 4 && strncmp(s, "<|", 2) == 0 && strcmp(s + n - 2, "|>") == 0;
    const bool wide_bar = n >= 8 && strncmp(s, "<\xEF\xBD\x9C", 4) == 0 && strcmp(s + n - 4, "\xEF\xBD\x9C>") == 0; /* <｜...｜> */
    const bool unused = n >= 8 && strncmp(s, "<unused", 7) == 0 && s[n - 1] == '>';
    return bar || wide_bar || unused;
}

/* The first added token whose content is tokenizer_config.json's `key` (a string or {"content": ...}), as gguf-py's
 * SpecialVocab picks it; -1 when absent. */
static int32_t config_special(const json_t *config, const json_t *added, const char *key) {
    const json_t *entry = json_object_get(config, key);
    if (json_is_object(entry)) entry = json_object_get(entry, "content");
    if (!json_is_string(entry)) return -1;
    size_t i;
    json_t *a;
    json_array_foreach(added, i, a)
        if (json_is_string(json_object_get(a, "content")) && json_equal(json_object_get(a, "content"), (json_t *)entry))
            return (int32_t)json_integer_value(json_object_get(a, "id"));
    return -1;
}

/* A SentencePiece-style BPE tokenizer.json (byte_fallback: Gemma 3's, Llama-2 conversions) becomes the "llama" (SPM)
 * vocabulary llama.cpp's converter writes from the checkpoint's tokenizer.model (_create_vocab_sentencepiece, then
 * SpecialVocab): the pieces by id, <0xNN> byte tokens, the unk_token unknown; the added tokens (the list
 * tokenizer_config.json's added_tokens_decoder repeats) control when special or shaped like control tokens, else
 * user-defined with "\u2581" turned back into spaces, all scored -1000; BOS, EOS, UNK, PAD, add_bos_token and the chat
 * template from tokenizer_config.json. Added tokens past model.vocab are left out, as the converter drops ids past the
 * config's vocab_size (Gemma 3's <image_soft_token>, id 262144, lies past the 262144 rows of Gemma 3 1B).
 * tokenizer.model itself is not at hand, so the scores are rebuilt from the merges: transformers lists them in
 * decreasing score of the piece each makes, so a piece scores minus the rank of the first merge making it, which
 * orders llama.cpp's merges (highest score first) as the ranks order Hugging Face's. Pieces no merge makes (single
 * characters, bytes) score 0, which SPM never compares. */
static int vocab_from_hf_spm(vocab *v, const char *path, const json_t *root, const json_t *config, kite_error *e) {
    const json_t *model = json_object_get(root, "model"), *jv = json_object_get(model, "vocab"), *jm = json_object_get(model, "merges");
    const json_t *added = json_object_get(root, "added_tokens"), *norm = json_object_get(root, "normalizer");
    const json_t *pre = json_object_get(root, "pre_tokenizer");
    /* spaces become "\u2581" (Replace), maybe after a "\u2581" prefix (Prepend); a Split on " " then finds none */
    bool replace = false, prepend = false;
    const json_t *norms = json_is_object(norm) && json_is_string(json_object_get(norm, "type")) &&
                                  strcmp(json_string_value(json_object_get(norm, "type")), "Sequence") == 0
                              ? json_object_get(norm, "normalizers")
                              : NULL;
    for (size_t k = 0; k < (norms ? json_array_size(norms) : json_is_object(norm) ? 1 : 0); k++) {
        const json_t *n = norms ? json_array_get(norms, k) : norm;
        const char *type = json_string_value(json_object_get(n, "type"));
        const char *content = json_string_value(json_object_get(n, "content")), *prep = json_string_value(json_object_get(n, "prepend"));
        const char *pattern = json_string_value(json_object_get(json_object_get(n, "pattern"), "String"));
        if (type && strcmp(type, "Replace") == 0 && pattern && content && !strcmp(pattern, " ") && !strcmp(content, "\xE2\x96\x81"))
            replace = true;
        else if (type && strcmp(type, "Prepend") == 0 && prep && strcmp(prep, "\xE2\x96\x81") == 0)
            prepend = true;
        else
            return kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: normalizer %s is not supported in a SentencePiece-style tokenizer.json", path, type ? type : "(untyped)");
    }
    const char *pre_type = json_string_value(json_object_get(pre, "type"));
    const char *pre_pattern = json_string_value(json_object_get(json_object_get(pre, "pattern"), "String"));
    if (!replace || (!json_is_null(pre) && pre && !(pre_type && strcmp(pre_type, "Split") == 0 && pre_pattern && !strcmp(pre_pattern, " "))))
        return kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: only a SentencePiece-style tokenizer.json whose normalizer turns spaces into \"\u2581\" "
                         "(and no pre-tokenizer but a Split on spaces) is supported", path);
    int64_t max_id = -1;
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)jv, key, val) {
        if (!json_is_integer(val) || json_integer_value(val) < 0 || json_integer_value(val) >= (1 << 20))
            return kite_fail(e, KITE_ERR_FORMAT, "%s: model.vocab[\"%.40s\"] is not an id in 0..1M", path, key);
        if (json_integer_value(val) > max_id) max_id = json_integer_value(val);
    }
    if (max_id < 0) return kite_fail(e, KITE_ERR_FORMAT, "%s: empty vocabulary", path);
    int st = vocab_alloc(v, (int32_t)max_id + 1, true, e);
    if (st) return st;
    const char *unk = json_string_value(json_object_get(model, "unk_token"));
    json_object_foreach((json_t *)jv, key, val) {
        int32_t id = (int32_t)json_integer_value(val);
        free(v->tokens[id]);
        if (!(v->tokens[id] = strdup(key))) return kite_fail(e, KITE_ERR_NOMEM, "random model: out of memory");
        v->types[id] = unk && strcmp(key, unk) == 0 ? TOK_UNKNOWN : is_byte_token(key, strlen(key)) ? TOK_BYTE : TOK_NORMAL;
    }
    size_t i;
    json_array_foreach((json_t *)jm, i, val) {
        const char *a = NULL, *b = NULL;
        if (json_is_array(val) && json_array_size(val) == 2) {
            a = json_string_value(json_array_get(val, 0)), b = json_string_value(json_array_get(val, 1));
        } else if (json_is_string(val)) {
            const char *m = json_string_value(val), *sp = m[0] ? strchr(m + 1, ' ') : NULL;
            if (sp) { /* "a b" */
                char buf[1024];
                snprintf(buf, sizeof buf, "%.*s%s", (int)(sp - m), m, sp + 1);
                const json_t *id = json_object_get(jv, buf);
                if (id && v->scores[json_integer_value(id)] == 0.0f) v->scores[json_integer_value(id)] = -(float)(i + 1);
                continue;
            }
        }
        if (!a || !b) return kite_fail(e, KITE_ERR_FORMAT, "%s: model.merges[%zu] is neither \"a b\" nor [\"a\", \"b\"]", path, i);
        char buf[1024];
        if ((size_t)snprintf(buf, sizeof buf, "%s%s", a, b) >= sizeof buf) continue; /* longer than any piece */
        const json_t *id = json_object_get(jv, buf);
        /* rank + 1: the first merge's piece must score below the never-merged 0 too */
        if (id && v->scores[json_integer_value(id)] == 0.0f) v->scores[json_integer_value(id)] = -(float)(i + 1);
    }
    json_array_foreach((json_t *)added, i, val) {
        json_t *jid = json_object_get(val, "id"), *content = json_object_get(val, "content");
        if (!json_is_integer(jid) || json_integer_value(jid) < 0 || !json_is_string(content) ||
            memchr(json_string_value(content), 0, json_string_length(content)))
            return kite_fail(e, KITE_ERR_FORMAT, "%s: added_tokens[%zu] needs an id and a content string without NUL", path, i);
        if (json_integer_value(jid) >= v->n) continue; /* past the vocabulary: left out, as the converter does */
        const int32_t id = (int32_t)json_integer_value(jid);
        const char *text = json_string_value(content);
        const size_t n = json_string_length(content);
        const bool control = json_is_true(json_object_get(val, "special")) || looks_special(text, n);
        char *t = malloc(n + 1), *w = t;
        if (!t) return kite_fail(e, KITE_ERR_NOMEM, "random model: out of memory");
        for (size_t k = 0; k < n; k++) { /* a user-defined token's "\u2581" back to a space ("pre-normalize user-defined spaces") */
            if (!control && k + 3 <= n && memcmp(text + k, "\xE2\x96\x81", 3) == 0) *w++ = ' ', k += 2;
            else *w++ = text[k];
        }
        *w = 0;
        free(v->tokens[id]);
        v->tokens[id] = t;
        v->types[id] = control ? TOK_CONTROL : TOK_USER_DEFINED;
        v->scores[id] = -1000.0f;
    }
    for (int32_t id = 0; id < v->n; id++)
        if (!v->tokens[id]) { /* an id nobody names: the converter's [PADn] */
            char buf[32];
            snprintf(buf, sizeof buf, "[PAD%d]", id);
            if (!(v->tokens[id] = strdup(buf))) return kite_fail(e, KITE_ERR_NOMEM, "random model: out of memory");
            v->types[id] = TOK_UNUSED;
            v->scores[id] = -10000.0f;
        }
    v->model = "llama";
    v->pre = "default";
    v->add_space_prefix = prepend;
    /* llama.cpp's SPM defaults (bos 1, eos 2, unk 0, add_bos), then what tokenizer_config.json names */
    v->bos = v->n > 1 ? 1 : -1, v->eos = v->n > 2 ? 2 : -1, v->unk = unk ? vocab_find(v, unk) : 0;
    v->add_bos = true;
    if (config) {
        int32_t id;
        if ((id = config_special(config, added, "bos_token")) >= 0 && id < v->n) v->bos = id;
        if ((id = config_special(config, added, "eos_token")) >= 0 && id < v->n) v->eos = id;
        if ((id = config_special(config, added, "unk_token")) >= 0 && id < v->n) v->unk = id;
        if ((id = config_special(config, added, "pad_token")) >= 0 && id < v->n) v->pad = id;
        if (json_is_boolean(json_object_get(config, "add_bos_token"))) v->add_bos = json_is_true(json_object_get(config, "add_bos_token"));
        const char *tmpl = json_string_value(json_object_get(config, "chat_template"));
        if (tmpl && !(v->chat_template = strdup(tmpl))) return kite_fail(e, KITE_ERR_NOMEM, "random model: out of memory");
    }
    return KITE_OK;
}

/* A byte-level BPE tokenizer.json (Llama-3, Qwen2/3, GPT-2 style): model.vocab, model.merges (as
 * "a b" strings or ["a", "b"] pairs) and added_tokens. */
static int vocab_from_hf_json(vocab *v, const char *path, const char *text, size_t len, const char *config_path, const char *arch,
                              kite_error *e) {
    json_error_t je;
    json_t *root = json_loadb(text, len, 0, &je);
    if (!root) return kite_fail(e, KITE_ERR_FORMAT, "%s: invalid JSON at line %d: %s", path, je.line, je.text);
    int st = KITE_OK;
    json_t *model = json_object_get(root, "model");
    json_t *type = json_object_get(model, "type");
    json_t *jv = json_object_get(model, "vocab");
    json_t *jm = json_object_get(model, "merges");
    json_t *added = json_object_get(root, "added_tokens");
    if (!json_is_object(model)) {
        st = kite_fail(e, KITE_ERR_FORMAT, "%s: no \"model\" object: not a tokenizer.json", path);
        goto done;
    }
    if (!json_is_string(type) || strcmp(json_string_value(type), "BPE") != 0) {
        st = kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: model.type is not \"BPE\"; only byte-level BPE tokenizer.json files are supported", path);
        goto done;
    }
    if (!json_is_object(jv) || !json_is_array(jm)) {
        st = kite_fail(e, KITE_ERR_FORMAT, "%s: model.vocab must be an object and model.merges an array", path);
        goto done;
    }
    if (json_is_true(json_object_get(model, "byte_fallback"))) {
        /* its tokenizer_config.json when there is one (integers as reals: Llama-3's model_max_length exceeds int64) */
        json_t *config = config_path && access(config_path, R_OK) == 0 ? json_load_file(config_path, JSON_DECODE_INT_AS_REAL, &je) : NULL;
        if (config_path && access(config_path, R_OK) == 0 && !config)
            st = kite_fail(e, KITE_ERR_FORMAT, "%s: invalid JSON at line %d: %s", config_path, je.line, je.text);
        else
            st = vocab_from_hf_spm(v, path, root, config, e);
        json_decref(config);
        goto done;
    }
    /* Highest id among the vocabulary and the added tokens decides the size. */
    int64_t max_id = -1;
    const char *key;
    json_t *val;
    json_object_foreach(jv, key, val) {
        if (!json_is_integer(val) || json_integer_value(val) < 0 || json_integer_value(val) >= (1 << 20)) {
            st = kite_fail(e, KITE_ERR_FORMAT, "%s: model.vocab[\"%.40s\"] is not an id in 0..1M", path, key);
            goto done;
        }
        if (json_integer_value(val) > max_id) max_id = json_integer_value(val);
    }
    size_t i;
    json_array_foreach(added, i, val) {
        json_t *id = json_object_get(val, "id"), *content = json_object_get(val, "content");
        if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) >= (1 << 20) || !json_is_string(content)) {
            st = kite_fail(e, KITE_ERR_FORMAT, "%s: added_tokens[%zu] needs an id in 0..1M and a content string", path, i);
            goto done;
        }
        if (json_integer_value(id) > max_id) max_id = json_integer_value(id);
    }
    if (max_id < 0) {
        st = kite_fail(e, KITE_ERR_FORMAT, "%s: empty vocabulary", path);
        goto done;
    }
    if ((st = vocab_alloc(v, (int32_t)max_id + 1, false, e))) goto done;
    json_object_foreach(jv, key, val) {
        int32_t id = (int32_t)json_integer_value(val);
        free(v->tokens[id]);
        if (!(v->tokens[id] = strdup(key))) { st = kite_fail(e, KITE_ERR_NOMEM, "random model: out of memory"); goto done; }
        v->types[id] = TOK_NORMAL;
    }
    json_array_foreach(added, i, val) {
        int32_t id = (int32_t)json_integer_value(json_object_get(val, "id"));
        size_t n = json_string_length(json_object_get(val, "content"));
        const char *content = json_string_value(json_object_get(val, "content"));
        if (memchr(content, 0, n)) { st = kite_fail(e, KITE_ERR_FORMAT, "%s: added_tokens[%zu] contains a NUL", path, i); goto done; }
        free(v->tokens[id]);
        if (!(v->tokens[id] = dup_bytes(content, n))) { st = kite_fail(e, KITE_ERR_NOMEM, "random model: out of memory"); goto done; }
        /* as the converter: special, or shaped like <|...|> (does_token_look_special), is control */
        const bool looks_special = n >= 4 && strncmp(content, "<|", 2) == 0 && strcmp(content + n - 2, "|>") == 0;
        v->types[id] = json_is_true(json_object_get(val, "special")) || looks_special ? TOK_CONTROL : TOK_USER_DEFINED;
    }
    v->n_merges = json_array_size(jm);
    v->merges = calloc(v->n_merges ? v->n_merges : 1, sizeof *v->merges);
    if (!v->merges) { st = kite_fail(e, KITE_ERR_NOMEM, "random model: out of memory for %llu merges", (unsigned long long)v->n_merges); goto done; }
    json_array_foreach(jm, i, val) {
        const char *a, *b;
        size_t na, nb;
        if (json_is_string(val)) {
            a = json_string_value(val), na = json_string_length(val), b = NULL, nb = 0;
        } else if (json_is_array(val) && json_array_size(val) == 2 && json_is_string(json_array_get(val, 0)) &&
                   json_is_string(json_array_get(val, 1))) {
            a = json_string_value(json_array_get(val, 0)), na = json_string_length(json_array_get(val, 0));
            b = json_string_value(json_array_get(val, 1)), nb = json_string_length(json_array_get(val, 1));
        } else {
            st = kite_fail(e, KITE_ERR_FORMAT, "%s: model.merges[%zu] is neither \"a b\" nor [\"a\", \"b\"]", path, i);
            goto done;
        }
        char *m = malloc(na + nb + 2);
        if (!m) { st = kite_fail(e, KITE_ERR_NOMEM, "random model: out of memory"); goto done; }
        memcpy(m, a, na);
        if (b) m[na] = ' ', memcpy(m + na + 1, b, nb), m[na + 1 + nb] = 0;
        else m[na] = 0;
        if (strlen(m) != (b ? na + nb + 1 : na)) { free(m); st = kite_fail(e, KITE_ERR_FORMAT, "%s: model.merges[%zu] contains a NUL", path, i); goto done; }
        v->merges[i] = m;
    }
    v->model = "gpt2";
    v->unk = -1;
    /* Special tokens and the pre-tokenizer, as llama.cpp's converter names them for these families. */
    int32_t begin = vocab_find(v, "<|begin_of_text|>"), endoftext = vocab_find(v, "<|endoftext|>");
    if (begin >= 0) {
        v->pre = "llama-bpe";
        v->bos = begin;
        v->eos = vocab_find(v, "<|end_of_text|>");
        v->add_bos = true;
    } else if (endoftext >= 0 && (vocab_find(v, "<|im_start|>") >= 0 || strcmp(arch, "qwen3") == 0)) {
        v->pre = "qwen2";
        v->bos = endoftext;
        int32_t im_end = vocab_find(v, "<|im_end|>");
        v->eos = im_end >= 0 ? im_end : endoftext;
        v->add_bos = false;
    } else {
        v->pre = "gpt-2";
        v->bos = v->eos = endoftext;
        v->add_bos = false;
    }
done:
    json_decref(root);
    return st;
}

static int load_vocab(vocab *v, const char *path, const char *arch, kite_error *e) {
    memset(v, 0, sizeof *v);
    v->bos = v->eos = v->unk = v->pad = -1;
    v->add_space_prefix = -1;
    if (!path) return vocab_bytes_only(v, e);
    kite_mapped_file f;
    int st = kite_map_file(&f, path, e);
    if (st) return st;
    size_t k = 0;
    while (k < f.size && k < 64 && (f.data[k] == ' ' || f.data[k] == '\n' || f.data[k] == '\r' || f.data[k] == '\t')) k++;
    if (k < f.size && f.data[k] == '{') {
        char config_path[4096]; /* tokenizer_config.json beside it (the SentencePiece path reads it) */
        const char *slash = strrchr(path, '/');
        snprintf(config_path, sizeof config_path, "%.*stokenizer_config.json", slash ? (int)(slash - path + 1) : 0, path);
        st = vocab_from_hf_json(v, path, (const char *)f.data, f.size, config_path, arch, e);
    } else {
        st = vocab_from_llama2c(v, path, f.data, f.size, e);
    }
    kite_unmap_file(&f);
    if (st) vocab_free(v);
    return st;
}

/* ---- the tensors ------------------------------------------------------------------------------ */
typedef struct tensor_plan {
    char name[64];
    uint32_t type;
    int64_t ne[3];   /* ne[0] = row length (inputs), ne[1] = rows; ne[1] = 1 for vectors; ne[2] experts (else 1) */
    uint32_t n_dims;
    float scale;     /* values x this (1: as kite_random_model_row draws them) */
    bool negexp;     /* values v become -exp(v) (qwen35's ssm_a) */
    float constant;  /* != 0: every value is this instead (Gemma 4's layer scalars) */
    int32_t rotated; /* > 0: rope_freqs.weight of proportional RoPE: 1 for the first `rotated` pairs, 1e30 after */
    float norm_std;  /* > 0, norm weights only: norm_mean + values of this deviation rather than 1 (kite_random_model_extras) */
    float norm_mean; /* with norm_std */
    bool reversed;   /* each row's values in reverse order (the conv-reversed defect) */
    bool llama3_freqs; /* rope_freqs.weight of Llama-3 scaling: each pair's frequency divisor (from shape) */
    bool zero;       /* every value 0 (a defect); an -exp(A_log) tensor: A_log -inf before the -exp */
    int32_t zero_odd_blocks; /* > 0: rows in odd blocks of this many are 0 (qwen35's gate rows of attn_q: a defect) */
    const model_shape *shape;
} tensor_plan;

typedef struct quant_job {
    const tensor_plan *t;
    uint64_t seed;
    unsigned char *out;
    size_t row_bytes;
    int64_t rows_per_task;
    float *scratch;   /* [n_threads][ne[0]] */
    void (*from_float)(const float *, void *, int64_t);
} quant_job;

static void plan_row(const tensor_plan *t, uint64_t seed, int64_t r, float *row, bool negexp);

static void quant_task(void *ctx, int64_t task, int thread) {
    const quant_job *job = ctx;
    int64_t cols = job->t->ne[0], r0 = task * job->rows_per_task, r1 = r0 + job->rows_per_task;
    if (r1 > job->t->ne[1] * job->t->ne[2]) r1 = job->t->ne[1] * job->t->ne[2]; /* an expert tensor: rows of all experts */
    float *row = job->scratch + (size_t)thread * (size_t)cols;
    for (int64_t r = r0; r < r1; r++) {
        plan_row(job->t, job->seed, r, row, true);
        job->from_float(row, job->out + (size_t)r * job->row_bytes, cols);
    }
}

static int plan_tensors(const model_shape *s, int32_t n_vocab, model_type mt, kite_random_defect defect, tensor_plan **out, int *n_out,
                        kite_error *e) {
    int cap = 4 + (s->n_layers + s->n_nextn) * 20, n = 0;
    tensor_plan *p = calloc((size_t)cap, sizeof *p);
    if (!p) return kite_fail(e, KITE_ERR_NOMEM, "random model: out of memory");
    const bool gemma4 = strcmp(s->arch, "gemma4") == 0, glimmer = strcmp(s->arch, "muse-glimmer") == 0;
#define ADD(role, layer, cols, rows, ...)                                                          \
    do {                                                                                           \
        tensor_plan *t = &p[n++];                                                                  \
        snprintf(t->name, sizeof t->name, __VA_ARGS__);                                            \
        t->type = storage_type(mt, role, layer, s->n_layers, s->tied);                             \
        t->ne[0] = cols, t->ne[1] = rows, t->ne[2] = 1, t->n_dims = (rows) > 1 ? 2 : 1;            \
        t->scale = role == ROLE_NORM || s->weight_scale == 0.0f ? 1.0f : s->weight_scale;          \
        t->shape = s;                                                                              \
    } while (0)
    ADD(ROLE_EMBD, 0, s->dim, n_vocab, "token_embd.weight");
    if (s->family.f16_embd && mt == MT_F32) p[n - 1].type = KITE_TYPE_F16; /* as the converter keeps an F16 checkpoint's */
    for (int l = 0; l < s->n_layers; l++) {
        const bool local = s->sliding_window > 0 && s->swa_period > 0 && l % s->swa_period < s->swa_period - 1;
        const int32_t hd = local && s->family.head_dim_swa ? s->family.head_dim_swa : s->head_dim;
        const int32_t q_dim = s->n_heads * hd, kv_dim = (local && s->family.n_kv_heads_swa ? s->family.n_kv_heads_swa : s->n_kv_heads) * hd;
        if (s->full_attn_interval > 0) { /* qwen35 */
            ADD(ROLE_NORM, l, s->dim, 1, "blk.%d.attn_norm.weight", l);
            ADD(ROLE_NORM, l, s->dim, 1, "blk.%d.post_attention_norm.weight", l);
            if ((l + 1) % s->full_attn_interval != 0) {
                const int32_t key_dim = s->dn_n_k * s->dn_head, value_dim = s->dn_n_v * s->dn_head;
                ADD(ROLE_MATRIX, l, s->dim, 2 * key_dim + value_dim, "blk.%d.attn_qkv.weight", l);
                ADD(ROLE_MATRIX, l, s->dim, value_dim, "blk.%d.attn_gate.weight", l);
                ADD(ROLE_MATRIX, l, s->dim, s->dn_n_v, "blk.%d.ssm_beta.weight", l);
                ADD(ROLE_MATRIX, l, s->dim, s->dn_n_v, "blk.%d.ssm_alpha.weight", l);
                ADD(ROLE_ROUTER, l, s->dn_kernel, 2 * key_dim + value_dim, "blk.%d.ssm_conv1d.weight", l);
                ADD(ROLE_ROUTER, l, s->dn_n_v, 1, "blk.%d.ssm_dt.bias", l);
                ADD(ROLE_ROUTER, l, s->dn_n_v, 1, "blk.%d.ssm_a", l);
                p[n - 1].negexp = true;
                ADD(ROLE_NORM, l, s->dn_head, 1, "blk.%d.ssm_norm.weight", l);
                ADD(ROLE_MATRIX, l, value_dim, s->dim, "blk.%d.ssm_out.weight", l);
            } else {
                ADD(ROLE_MATRIX, l, s->dim, 2 * q_dim, "blk.%d.attn_q.weight", l);
                ADD(ROLE_MATRIX, l, s->dim, kv_dim, "blk.%d.attn_k.weight", l);
                ADD(ROLE_ATTN_V, l, s->dim, kv_dim, "blk.%d.attn_v.weight", l);
                ADD(ROLE_NORM, l, s->head_dim, 1, "blk.%d.attn_q_norm.weight", l);
                ADD(ROLE_NORM, l, s->head_dim, 1, "blk.%d.attn_k_norm.weight", l);
                ADD(ROLE_MATRIX, l, q_dim, s->dim, "blk.%d.attn_output.weight", l);
            }
            ADD(ROLE_MATRIX, l, s->dim, s->ffn_dim, "blk.%d.ffn_gate.weight", l);
            ADD(ROLE_MATRIX, l, s->dim, s->ffn_dim, "blk.%d.ffn_up.weight", l);
            ADD(ROLE_FFN_DOWN, l, s->ffn_dim, s->dim, "blk.%d.ffn_down.weight", l);
            continue;
        }
        ADD(ROLE_NORM, l, s->dim, 1, "blk.%d.attn_norm.weight", l);
        if (shape_layer_is_conv(s, l)) { /* llama.cpp's lfm2 names and layouts */
            ADD(ROLE_MATRIX, l, s->dim, 3 * s->dim, "blk.%d.shortconv.in_proj.weight", l);
            ADD(ROLE_CONV, l, s->conv_taps, s->dim, "blk.%d.shortconv.conv.weight", l);
            ADD(ROLE_MATRIX, l, s->dim, s->dim, "blk.%d.shortconv.out_proj.weight", l);
            ADD(ROLE_NORM, l, s->dim, 1, "blk.%d.ffn_norm.weight", l);
            ADD(ROLE_MATRIX, l, s->dim, s->ffn_dim, "blk.%d.ffn_gate.weight", l);
            ADD(ROLE_MATRIX, l, s->dim, s->ffn_dim, "blk.%d.ffn_up.weight", l);
            ADD(ROLE_FFN_DOWN, l, s->ffn_dim, s->dim, "blk.%d.ffn_down.weight", l);
            continue;
        }
        ADD(ROLE_MATRIX, l, s->dim, q_dim, "blk.%d.attn_q.weight", l);
        ADD(ROLE_MATRIX, l, s->dim, kv_dim, "blk.%d.attn_k.weight", l);
        if (!(s->family.k_eq_v && !local)) ADD(ROLE_ATTN_V, l, s->dim, kv_dim, "blk.%d.attn_v.weight", l);
        if (s->family.qkv_bias) { /* half as large as the projection's output for an input of unit RMS, so dropping them shows */
            const float bias_scale = sqrtf((float)s->dim) / 2.0f;
            ADD(ROLE_BIAS, l, q_dim, 1, "blk.%d.attn_q.bias", l);
            p[n - 1].scale *= bias_scale;
            ADD(ROLE_BIAS, l, kv_dim, 1, "blk.%d.attn_k.bias", l);
            p[n - 1].scale *= bias_scale;
            ADD(ROLE_BIAS, l, kv_dim, 1, "blk.%d.attn_v.bias", l);
            p[n - 1].scale *= bias_scale;
        }
        if (glimmer) ADD(ROLE_MATRIX, l, s->dim, q_dim, "blk.%d.attn_gate.weight", l);
        if (s->qk_norm) {
            ADD(ROLE_NORM, l, hd, 1, "blk.%d.attn_q_norm.weight", l);
            if (glimmer) p[n - 1].constant = s->family.qk_scale > 0.0f ? s->family.qk_scale : 1.0f; /* the converter's, from qk_scale_factor */
            ADD(ROLE_NORM, l, hd, 1, "blk.%d.attn_k_norm.weight", l);
            if (glimmer) p[n - 1].constant = 1.0f;
        }
        if (gemma4 && defect != KITE_RANDOM_DEFECT_NO_LAYER_SCALAR) {
            ADD(ROLE_NORM, l, 1, 1, "blk.%d.layer_output_scale.weight", l);
            p[n - 1].constant = s->family.layer_scalar[l % 2] != 0.0f ? s->family.layer_scalar[l % 2] : 1.0f;
        }
        ADD(ROLE_MATRIX, l, q_dim, s->dim, "blk.%d.attn_output.weight", l);
        ADD(ROLE_NORM, l, s->dim, 1, "blk.%d.ffn_norm.weight", l);
        if (s->n_experts > 0) {
            /* llama.cpp's layout: the router [dim, experts] and 3-D expert tensors [cols, rows, experts]. */
            ADD(ROLE_ROUTER, l, s->dim, s->n_experts, "blk.%d.ffn_gate_inp.weight", l);
            ADD(ROLE_MATRIX, l, s->dim, s->expert_ffn_dim, "blk.%d.ffn_gate_exps.weight", l);
            p[n - 1].ne[2] = s->n_experts, p[n - 1].n_dims = 3;
            ADD(ROLE_MATRIX, l, s->dim, s->expert_ffn_dim, "blk.%d.ffn_up_exps.weight", l);
            p[n - 1].ne[2] = s->n_experts, p[n - 1].n_dims = 3;
            ADD(ROLE_FFN_DOWN, l, s->expert_ffn_dim, s->dim, "blk.%d.ffn_down_exps.weight", l);
            p[n - 1].ne[2] = s->n_experts, p[n - 1].n_dims = 3;
        } else {
            ADD(ROLE_MATRIX, l, s->dim, s->ffn_dim, "blk.%d.ffn_gate.weight", l);
            ADD(ROLE_MATRIX, l, s->dim, s->ffn_dim, "blk.%d.ffn_up.weight", l);
            ADD(ROLE_FFN_DOWN, l, s->ffn_dim, s->dim, "blk.%d.ffn_down.weight", l);
        }
        if (strcmp(s->arch, "gemma3") == 0 || gemma4 || glimmer) {
            ADD(ROLE_NORM, l, s->dim, 1, "blk.%d.post_attention_norm.weight", l);
            ADD(ROLE_NORM, l, s->dim, 1, "blk.%d.post_ffw_norm.weight", l);
        }
    }
    for (int l = s->n_layers; l < s->n_layers + s->n_nextn; l++) { /* qwen35's next-n blocks: gated attention + nextn.* */
        const int32_t q_dim = s->n_heads * s->head_dim, kv_dim = s->n_kv_heads * s->head_dim;
        ADD(ROLE_NORM, l, s->dim, 1, "blk.%d.attn_norm.weight", l);
        ADD(ROLE_NORM, l, s->dim, 1, "blk.%d.post_attention_norm.weight", l);
        ADD(ROLE_MATRIX, l, s->dim, 2 * q_dim, "blk.%d.attn_q.weight", l);
        ADD(ROLE_MATRIX, l, s->dim, kv_dim, "blk.%d.attn_k.weight", l);
        ADD(ROLE_ATTN_V, l, s->dim, kv_dim, "blk.%d.attn_v.weight", l);
        ADD(ROLE_NORM, l, s->head_dim, 1, "blk.%d.attn_q_norm.weight", l);
        ADD(ROLE_NORM, l, s->head_dim, 1, "blk.%d.attn_k_norm.weight", l);
        ADD(ROLE_MATRIX, l, q_dim, s->dim, "blk.%d.attn_output.weight", l);
        ADD(ROLE_MATRIX, l, s->dim, s->ffn_dim, "blk.%d.ffn_gate.weight", l);
        ADD(ROLE_MATRIX, l, s->dim, s->ffn_dim, "blk.%d.ffn_up.weight", l);
        ADD(ROLE_FFN_DOWN, l, s->ffn_dim, s->dim, "blk.%d.ffn_down.weight", l);
        ADD(ROLE_MATRIX, l, 2 * s->dim, s->dim, "blk.%d.nextn.eh_proj.weight", l);
        ADD(ROLE_NORM, l, s->dim, 1, "blk.%d.nextn.enorm.weight", l);
        ADD(ROLE_NORM, l, s->dim, 1, "blk.%d.nextn.hnorm.weight", l);
        ADD(ROLE_NORM, l, s->dim, 1, "blk.%d.nextn.shared_head_norm.weight", l);
    }
    ADD(ROLE_NORM, 0, s->dim, 1, "%s", s->layer_kinds ? "token_embd_norm.weight" : "output_norm.weight");
    if (!s->tied) ADD(ROLE_OUTPUT, 0, s->dim, n_vocab, "output.weight");
    if (s->family.partial_rotary_global > 0.0f) {
        ADD(ROLE_NORM, 0, s->head_dim / 2, 1, "rope_freqs.weight");
        p[n - 1].rotated = (int32_t)(s->head_dim * s->family.partial_rotary_global / 2);
    } else if (s->family.llama3.factor > 0.0f) {
        ADD(ROLE_NORM, 0, s->head_dim / 2, 1, "rope_freqs.weight");
        p[n - 1].llama3_freqs = true;
    }
#undef ADD
    for (int i = 0; i < n; i++) {
        const kite_type_traits *tr = kite_type_get(p[i].type);
        if (!tr || !tr->from_float || p[i].ne[0] % tr->block_size != 0) {
            int st = kite_fail(e, KITE_ERR_UNSUPPORTED, "random model: %s has rows of %lld, not a multiple of %s's block of %d",
                               p[i].name, (long long)p[i].ne[0], tr ? tr->name : "?", tr ? tr->block_size : 0);
            free(p);
            return st;
        }
    }
    *out = p;
    *n_out = n;
    return KITE_OK;
}

static void write_metadata(kite_gguf_writer *w, const model_shape *s, int32_t n_vocab, const char *type_name,
                           uint32_t file_type, uint64_t seed, const vocab *v) {
    char key[96], name[128];
    kite_gguf_w_str(w, "general.architecture", s->arch);
    snprintf(name, sizeof name, "kite random %s %s seed %llu", s->name, type_name, (unsigned long long)seed);
    kite_gguf_w_str(w, "general.name", name);
    kite_gguf_w_u32(w, "general.file_type", file_type);
    kite_gguf_w_u32(w, "general.quantization_version", 2);
#define ARCH_KEY(suffix) (snprintf(key, sizeof key, "%s.%s", s->arch, suffix), key)
    kite_gguf_w_u32(w, ARCH_KEY("context_length"), (uint32_t)s->n_ctx);
    kite_gguf_w_u32(w, ARCH_KEY("embedding_length"), (uint32_t)s->dim);
    kite_gguf_w_u32(w, ARCH_KEY("block_count"), (uint32_t)(s->n_layers + s->n_nextn));
    if (s->n_nextn > 0) kite_gguf_w_u32(w, ARCH_KEY("nextn_predict_layers"), (uint32_t)s->n_nextn);
    kite_gguf_w_u32(w, ARCH_KEY("feed_forward_length"), (uint32_t)s->ffn_dim);
    kite_gguf_w_u32(w, ARCH_KEY("attention.head_count"), (uint32_t)s->n_heads);
    if (s->layer_kinds) { /* llama.cpp's lfm2: per-layer KV heads, 0 for a conv layer */
        int32_t kv[64];
        for (int l = 0; l < s->n_layers && l < 64; l++) kv[l] = shape_layer_is_conv(s, l) ? 0 : s->n_kv_heads;
        kite_gguf_w_arr_i32(w, ARCH_KEY("attention.head_count_kv"), kv, (uint64_t)s->n_layers);
        kite_gguf_w_u32(w, ARCH_KEY("shortconv.l_cache"), (uint32_t)s->conv_taps);
    } else if (!s->family.n_kv_heads_swa) {
        kite_gguf_w_u32(w, ARCH_KEY("attention.head_count_kv"), (uint32_t)s->n_kv_heads);
    }
    kite_gguf_w_u32(w, ARCH_KEY("attention.key_length"), (uint32_t)s->head_dim);
    kite_gguf_w_u32(w, ARCH_KEY("attention.value_length"), (uint32_t)s->head_dim);
    kite_gguf_w_u32(w, ARCH_KEY("rope.dimension_count"), (uint32_t)(s->n_rot > 0 ? s->n_rot : s->head_dim));
    if (s->full_attn_interval > 0) { /* as Qwen3_5TextModel writes them */
        const int32_t half = s->n_rot / 2, sections[4] = {half - 2 * (half / 3), half / 3, half / 3, 0};
        kite_gguf_w_arr_i32(w, ARCH_KEY("rope.dimension_sections"), sections, 4);
        kite_gguf_w_u32(w, ARCH_KEY("ssm.conv_kernel"), (uint32_t)s->dn_kernel);
        kite_gguf_w_u32(w, ARCH_KEY("ssm.state_size"), (uint32_t)s->dn_head);
        kite_gguf_w_u32(w, ARCH_KEY("ssm.group_count"), (uint32_t)s->dn_n_k);
        kite_gguf_w_u32(w, ARCH_KEY("ssm.time_step_rank"), (uint32_t)s->dn_n_v);
        kite_gguf_w_u32(w, ARCH_KEY("ssm.inner_size"), (uint32_t)(s->dn_n_v * s->dn_head));
        kite_gguf_w_u32(w, ARCH_KEY("full_attention_interval"), (uint32_t)s->full_attn_interval);
    }
    kite_gguf_w_f32(w, ARCH_KEY("rope.freq_base"), s->rope_theta);
    kite_gguf_w_f32(w, ARCH_KEY("attention.layer_norm_rms_epsilon"), s->rms_eps);
    kite_gguf_w_u32(w, ARCH_KEY("vocab_size"), (uint32_t)n_vocab);
    if (s->n_experts > 0) {
        kite_gguf_w_u32(w, ARCH_KEY("expert_count"), (uint32_t)s->n_experts);
        kite_gguf_w_u32(w, ARCH_KEY("expert_used_count"), (uint32_t)s->n_experts_used);
        kite_gguf_w_u32(w, ARCH_KEY("expert_feed_forward_length"), (uint32_t)s->expert_ffn_dim);
    }
    const bool per_layer = strcmp(s->arch, "gemma4") == 0 || strcmp(s->arch, "muse-glimmer") == 0;
    if (s->family.rope_linear > 0.0f) { /* as Gemma3Model.set_gguf_parameters: the global layers' scaling */
        kite_gguf_w_str(w, ARCH_KEY("rope.scaling.type"), "linear");
        kite_gguf_w_f32(w, ARCH_KEY("rope.scaling.factor"), s->family.rope_linear);
    }
    if (s->sliding_window > 0) {
        kite_gguf_w_u32(w, ARCH_KEY("attention.sliding_window"), (uint32_t)s->sliding_window);
        if (!per_layer) kite_gguf_w_u32(w, ARCH_KEY("attention.sliding_window_pattern"), (uint32_t)s->swa_period);
    }
    if (per_layer) { /* as Gemma4Model / MuseGlimmerModel: the pattern and KV heads per layer */
        uint8_t local[KITE_MAX_LAYER_PATTERN];
        int32_t kv_heads[KITE_MAX_LAYER_PATTERN];
        for (int32_t l = 0; l < s->n_layers && l < KITE_MAX_LAYER_PATTERN; l++) {
            local[l] = s->sliding_window > 0 && s->swa_period > 0 && l % s->swa_period < s->swa_period - 1;
            kv_heads[l] = local[l] && s->family.n_kv_heads_swa ? s->family.n_kv_heads_swa : s->n_kv_heads;
        }
        kite_gguf_w_arr_bool(w, ARCH_KEY("attention.sliding_window_pattern"), local, (uint64_t)s->n_layers);
        if (s->family.n_kv_heads_swa) kite_gguf_w_arr_i32(w, ARCH_KEY("attention.head_count_kv"), kv_heads, (uint64_t)s->n_layers);
        if (s->family.softcap > 0.0f) kite_gguf_w_f32(w, ARCH_KEY("final_logit_softcapping"), s->family.softcap);
        if (s->family.logit_scale > 0.0f) kite_gguf_w_f32(w, ARCH_KEY("logit_scale"), s->family.logit_scale);
    }
    if (s->family.head_dim_swa) {
        kite_gguf_w_u32(w, ARCH_KEY("attention.key_length_swa"), (uint32_t)s->family.head_dim_swa);
        kite_gguf_w_u32(w, ARCH_KEY("attention.value_length_swa"), (uint32_t)s->family.head_dim_swa);
        kite_gguf_w_u32(w, ARCH_KEY("rope.dimension_count_swa"), (uint32_t)s->family.head_dim_swa);
        kite_gguf_w_f32(w, ARCH_KEY("rope.freq_base_swa"), s->family.rope_theta_swa);
        kite_gguf_w_u32(w, ARCH_KEY("attention.shared_kv_layers"), 0);
        kite_gguf_w_u32(w, ARCH_KEY("embedding_length_per_layer_input"), 0);
    }
#undef ARCH_KEY
    kite_gguf_w_str(w, "tokenizer.ggml.model", v->model);
    if (v->pre) kite_gguf_w_str(w, "tokenizer.ggml.pre", v->pre);
    kite_gguf_w_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v->tokens, (uint64_t)v->n);
    if (v->scores) kite_gguf_w_arr_f32(w, "tokenizer.ggml.scores", v->scores, (uint64_t)v->n);
    kite_gguf_w_arr_i32(w, "tokenizer.ggml.token_type", v->types, (uint64_t)v->n);
    if (v->merges) kite_gguf_w_arr_str(w, "tokenizer.ggml.merges", (const char *const *)v->merges, v->n_merges);
    if (v->bos >= 0) kite_gguf_w_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)v->bos);
    if (v->eos >= 0) kite_gguf_w_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)v->eos);
    if (v->unk >= 0) kite_gguf_w_u32(w, "tokenizer.ggml.unknown_token_id", (uint32_t)v->unk);
    if (v->pad >= 0) kite_gguf_w_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)v->pad);
    kite_gguf_w_bool(w, "tokenizer.ggml.add_bos_token", v->add_bos);
    kite_gguf_w_bool(w, "tokenizer.ggml.add_eos_token", false);
    if (v->add_space_prefix >= 0) kite_gguf_w_bool(w, "tokenizer.ggml.add_space_prefix", v->add_space_prefix == 1);
    if (v->chat_template) kite_gguf_w_str(w, "tokenizer.chat_template", v->chat_template);
}

/* ---- the Hugging Face folder ------------------------------------------------------------------ */
/* params->hf_dir: the same weights (before quantization) as a Hugging Face folder, under transformers' names,
 * undoing what llama.cpp's converter does to a checkpoint: Llama's (and Muse Glimmer's) q/k rows permuted back
 * to rotate-half order, Gemma 3's norms (Muse Glimmer's layer norms, Qwen3.5's but the DeltaNet's output norm)
 * stored as w - 1, Qwen3.5's value heads in HF's grouped order and its decay as A_log, stacked experts split,
 * conv taps as [channels, 1, taps]. Tensors are F32 (a shape's F16 embedding F16, as in its GGUF), so kite gives
 * the GGUF's logits for the folder when the GGUF is f32 too. config.json has the family's model_type and architectures; tokenizer.json (and a
 * tokenizer_config.json beside it) are copied from params->tokenizer_path. */
typedef struct hf_item {
    char name[112];
    int plan;                 /* the tensor_plan this comes from */
    int n_dims;
    int64_t shape[3];         /* HF order, outermost first */
    int64_t rows, cols;       /* rows: the product of all but the last dimension */
    int64_t row0;             /* first plan row (an expert of a stacked tensor) */
    int32_t permute_heads;    /* > 0: rows in rotate-half order from the GGUF's interleaved pairs, per head */
    int v_reorder;            /* qwen35: 1 rows from v_start, 2 columns from v_start, in value heads of v_head */
    int64_t v_start, v_head;
    bool minus_one;           /* the GGUF holds w + 1 */
    bool a_log;               /* the GGUF holds -exp(A_log): write the value before -exp */
    bool f16;                 /* stored F16, as the GGUF's (the shape's F16 embedding) */
} hf_item;

/* The HF value head held in GGUF value head g (convert_hf_to_gguf.py's _reorder_v_heads: GGUF head j * n_k + kh
 * holds HF head kh * r + j); inverted here: HF head hh = kh * r + j comes from GGUF head j * n_k + kh. */
static int64_t hf_v_source(const model_shape *s, int64_t start, int64_t head, int64_t i) {
    if (i < start || s->dn_n_v == s->dn_n_k) return i;
    const int64_t r = s->dn_n_v / s->dn_n_k, q = i - start, hh = q / head, kh = hh / r, j = hh % r;
    return start + (j * s->dn_n_k + kh) * head + q % head;
}

static bool hf_arch_is(const model_shape *s, const char *arch) { return strcmp(s->arch, arch) == 0; }

/* The HF name (after "model.layers.L.", or whole for the non-layer tensors) of a plan tensor; NULL: not in the
 * folder (rope_freqs, Muse Glimmer's synthesized q/k norms). */
static const char *hf_suffix(const model_shape *s, const char *g, int *minus_one) {
    const bool gemma3 = hf_arch_is(s, "gemma3"), glimmer = hf_arch_is(s, "muse-glimmer"), qwen35 = hf_arch_is(s, "qwen35");
    const bool lfm2 = s->layer_kinds != NULL, post_norms = gemma3 || glimmer || hf_arch_is(s, "gemma4");
    static const struct { const char *gguf, *hf, *lfm2; } k[] = {
        {"attn_norm.weight", "input_layernorm.weight", "operator_norm.weight"},
        {"attn_q.weight", "self_attn.q_proj.weight", NULL}, {"attn_k.weight", "self_attn.k_proj.weight", NULL},
        {"attn_v.weight", "self_attn.v_proj.weight", NULL}, {"attn_q.bias", "self_attn.q_proj.bias", NULL},
        {"attn_k.bias", "self_attn.k_proj.bias", NULL}, {"attn_v.bias", "self_attn.v_proj.bias", NULL},
        {"attn_output.weight", "self_attn.o_proj.weight", "self_attn.out_proj.weight"},
        {"attn_q_norm.weight", "self_attn.q_norm.weight", "self_attn.q_layernorm.weight"},
        {"attn_k_norm.weight", "self_attn.k_norm.weight", "self_attn.k_layernorm.weight"},
        {"post_attention_norm.weight", "post_attention_layernorm.weight", NULL},
        {"post_ffw_norm.weight", "post_feedforward_layernorm.weight", NULL},
        {"ffn_gate.weight", "mlp.gate_proj.weight", "feed_forward.w1.weight"}, {"ffn_up.weight", "mlp.up_proj.weight", "feed_forward.w3.weight"},
        {"ffn_down.weight", "mlp.down_proj.weight", "feed_forward.w2.weight"}, {"ffn_gate_inp.weight", "mlp.gate.weight", NULL},
        {"layer_output_scale.weight", "layer_scalar", NULL},
        {"shortconv.in_proj.weight", NULL, "conv.in_proj.weight"}, {"shortconv.conv.weight", NULL, "conv.conv.weight"},
        {"shortconv.out_proj.weight", NULL, "conv.out_proj.weight"},
        {"attn_qkv.weight", "linear_attn.in_proj_qkv.weight", NULL}, {"ssm_beta.weight", "linear_attn.in_proj_b.weight", NULL},
        {"ssm_alpha.weight", "linear_attn.in_proj_a.weight", NULL}, {"ssm_conv1d.weight", "linear_attn.conv1d.weight", NULL},
        {"ssm_dt.bias", "linear_attn.dt_bias", NULL}, {"ssm_a", "linear_attn.A_log", NULL},
        {"ssm_norm.weight", "linear_attn.norm.weight", NULL}, {"ssm_out.weight", "linear_attn.out_proj.weight", NULL},
        {"token_embd.weight", "embed_tokens.weight", "embed_tokens.weight"}, {"output_norm.weight", "norm.weight", NULL},
        {"token_embd_norm.weight", NULL, "embedding_norm.weight"}, {"output.weight", "lm_head.weight", "lm_head.weight"},
    };
    *minus_one = 0;
    if (strcmp(g, "attn_gate.weight") == 0) return qwen35 ? "linear_attn.in_proj_z.weight" : "self_attn.gate_proj.weight";
    if (strcmp(g, "ffn_norm.weight") == 0) {
        *minus_one = gemma3 || glimmer;
        return lfm2 ? "ffn_norm.weight" : post_norms ? "pre_feedforward_layernorm.weight" : "post_attention_layernorm.weight";
    }
    if (glimmer && (strcmp(g, "attn_q_norm.weight") == 0 || strcmp(g, "attn_k_norm.weight") == 0)) return NULL;
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        if (strcmp(g, k[i].gguf) != 0) continue;
        const bool is_norm = is_norm_name(g) && strcmp(g, "ssm_norm.weight") != 0 && strcmp(g, "token_embd_norm.weight") != 0;
        *minus_one = is_norm && (gemma3 || (qwen35 && strcmp(g, "ffn_norm.weight") != 0) ||
                                 (glimmer && strcmp(g, "output_norm.weight") != 0));
        return lfm2 && k[i].lfm2 ? k[i].lfm2 : k[i].hf;
    }
    return NULL;
}

/* A next-n (MTP) head tensor's name under mtp. (convert_hf_to_gguf.py's _QwenMtpMixin maps mtp.{fc,
 * pre_fc_norm_embedding, pre_fc_norm_hidden, norm} to blk.{n_layers}.nextn.*, adding 1 to the norms); NULL for
 * another tensor. */
static const char *hf_nextn_suffix(const char *g) {
    static const struct { const char *gguf, *hf; } k[] = {
        {"nextn.eh_proj.weight", "fc.weight"}, {"nextn.enorm.weight", "pre_fc_norm_embedding.weight"},
        {"nextn.hnorm.weight", "pre_fc_norm_hidden.weight"}, {"nextn.shared_head_norm.weight", "norm.weight"},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        if (strcmp(g, k[i].gguf) == 0) return k[i].hf;
    return NULL;
}

/* The folder's tensors, in plan order (a stacked expert tensor becomes one per expert; Qwen3.5's next-n blocks
 * blk.{n_layers + B}.* go under mtp.layers.B. and the head's own tensors under mtp.). */
static int hf_items(const model_shape *s, const tensor_plan *plan, int n_plan, hf_item **out, int *n_out, kite_error *e) {
    int cap = n_plan + (s->n_experts > 0 ? 3 * s->n_layers * s->n_experts : 0), n = 0;
    hf_item *items = calloc((size_t)cap, sizeof *items);
    if (!items) return kite_fail(e, KITE_ERR_NOMEM, "random model: out of memory");
    const char *prefix = hf_arch_is(s, "qwen35") ? "model.language_model." : "model.";
    const bool permute = hf_arch_is(s, "llama") || hf_arch_is(s, "muse-glimmer");
    const int64_t key_dim = (int64_t)s->dn_n_k * s->dn_head;
    for (int i = 0; i < n_plan; i++) {
        const tensor_plan *t = &plan[i];
        int layer = -1, used = 0, minus_one = 0;
        if (sscanf(t->name, "blk.%d.%n", &layer, &used) != 1 || used == 0) layer = -1, used = 0;
        const bool exps = t->ne[2] > 1; /* named below, one per expert */
        const bool mtp = layer >= s->n_layers;
        const char *g = t->name + used, *nextn = mtp ? hf_nextn_suffix(g) : NULL;
        const char *suffix = exps ? "" : nextn ? nextn : hf_suffix(s, g, &minus_one);
        if (!suffix) continue;
        if (nextn) minus_one = is_norm_name(g);
        for (int64_t x = 0; x < (exps ? t->ne[2] : 1); x++) {
            hf_item *h = &items[n++];
            h->plan = i;
            h->minus_one = minus_one;
            h->cols = t->ne[0];
            h->rows = t->ne[1];
            h->row0 = x * t->ne[1];
            if (exps) { /* "ffn_gate_exps.weight" -> "mlp.experts.X.gate_proj.weight" */
                const char *kind = strstr(g, "gate") ? "gate_proj" : strstr(g, "up") ? "up_proj" : "down_proj";
                snprintf(h->name, sizeof h->name, "%slayers.%d.mlp.experts.%lld.%s.weight", prefix, layer, (long long)x, kind);
            } else if (nextn) {
                snprintf(h->name, sizeof h->name, "mtp.%s", suffix);
            } else if (mtp) {
                snprintf(h->name, sizeof h->name, "mtp.layers.%d.%s", layer - s->n_layers, suffix);
            } else if (layer >= 0 && strcmp(suffix, "lm_head.weight") != 0) {
                snprintf(h->name, sizeof h->name, "%slayers.%d.%s", prefix, layer, suffix);
            } else {
                snprintf(h->name, sizeof h->name, "%s%s", strcmp(suffix, "lm_head.weight") == 0 ? "" : prefix, suffix);
            }
            const bool conv = strcmp(g, "shortconv.conv.weight") == 0 || strcmp(g, "ssm_conv1d.weight") == 0;
            if (conv) h->n_dims = 3, h->shape[0] = h->rows, h->shape[1] = 1, h->shape[2] = h->cols;
            else if (t->n_dims == 1) h->n_dims = 1, h->shape[0] = h->cols;
            else h->n_dims = 2, h->shape[0] = h->rows, h->shape[1] = h->cols;
            if (permute && (strcmp(g, "attn_q.weight") == 0 || strcmp(g, "attn_k.weight") == 0)) {
                const bool local = s->sliding_window > 0 && s->swa_period > 0 && layer % s->swa_period < s->swa_period - 1;
                const int32_t hd = local && s->family.head_dim_swa ? s->family.head_dim_swa : s->head_dim;
                h->permute_heads = (int32_t)(h->rows / hd);
            }
            if (strcmp(g, "attn_qkv.weight") == 0 || strcmp(g, "ssm_conv1d.weight") == 0) h->v_reorder = 1, h->v_start = 2 * key_dim, h->v_head = s->dn_head;
            if (strcmp(g, "attn_gate.weight") == 0 && s->full_attn_interval > 0) h->v_reorder = 1, h->v_head = s->dn_head;
            if (strcmp(g, "ssm_beta.weight") == 0 || strcmp(g, "ssm_alpha.weight") == 0) h->v_reorder = 1, h->v_head = 1;
            if (strcmp(g, "ssm_dt.bias") == 0 || strcmp(g, "ssm_a") == 0) h->v_reorder = 2, h->v_head = 1;
            if (strcmp(g, "ssm_out.weight") == 0) h->v_reorder = 2, h->v_head = s->dn_head;
            h->a_log = t->negexp;
            h->f16 = t->type == KITE_TYPE_F16 && s->family.f16_embd && strcmp(g, "token_embd.weight") == 0;
        }
    }
    *out = items;
    *n_out = n;
    return KITE_OK;
}

/* convert_hf_to_gguf.py's Llama-3 rope factors (LlamaModel.generate_extra_tensors): per rotated pair, the divisor of
 * its frequency (1 for short wavelengths, factor for long ones, a smooth blend between); the base frequencies in
 * float32 as the converter's torch arange and power. */
static void llama3_rope_divisors(const model_shape *s, float *out, int64_t half) {
    const double low_wavelen = s->family.llama3.orig_ctx / (double)s->family.llama3.low_freq;
    const double high_wavelen = s->family.llama3.orig_ctx / (double)s->family.llama3.high_freq;
    for (int64_t i = 0; i < half; i++) {
        const float freq = 1.0f / powf(s->rope_theta, (float)(2 * i) / (float)s->head_dim);
        const double wavelen = 2.0 * M_PI / (double)freq;
        if (wavelen < high_wavelen) {
            out[i] = 1.0f;
        } else if (wavelen > low_wavelen) {
            out[i] = s->family.llama3.factor;
        } else {
            const double smooth = (s->family.llama3.orig_ctx / wavelen - s->family.llama3.low_freq) /
                                  (double)(s->family.llama3.high_freq - s->family.llama3.low_freq);
            out[i] = (float)(1.0 / ((1.0 - smooth) / s->family.llama3.factor + smooth));
        }
    }
}

/* Row r of a plan tensor as the GGUF holds it before quantization (negexp false: before -exp). */
static void plan_row(const tensor_plan *t, uint64_t seed, int64_t r, float *row, bool negexp) {
    const int64_t cols = t->ne[0];
    kite_random_model_row(seed, t->name, r, row, cols);
    if (t->norm_std > 0.0f) {
        random_stream_row(seed, t->name, r, row, cols);
        for (int64_t i = 0; i < cols; i++) row[i] = t->norm_mean + row[i] * (t->norm_std / KITE_RANDOM_WEIGHT_STD);
    }
    if (t->reversed)
        for (int64_t i = 0, j = cols - 1; i < j; i++, j--) {
            const float x = row[i];
            row[i] = row[j], row[j] = x;
        }
    if (t->constant != 0.0f)
        for (int64_t i = 0; i < cols; i++) row[i] = t->constant;
    if (t->rotated > 0)
        for (int64_t i = 0; i < cols; i++) row[i] = i < t->rotated ? 1.0f : 1e30f;
    if (t->llama3_freqs) llama3_rope_divisors(t->shape, row, cols);
    if (t->scale != 1.0f)
        for (int64_t i = 0; i < cols; i++) row[i] *= t->scale;
    if (t->zero || (t->zero_odd_blocks > 0 && r / t->zero_odd_blocks % 2 == 1))
        for (int64_t i = 0; i < cols; i++) row[i] = t->negexp && !negexp ? -INFINITY : 0.0f; /* -exp(-inf) = 0 */
    else if (t->negexp && negexp) /* a DeltaNet decay rate, stored as the converter stores it: -exp(A_log) */
        for (int64_t i = 0; i < cols; i++) row[i] = -expf(row[i]);
}

static int hf_copy_file(const char *from, const char *to, bool optional, kite_error *e) {
    FILE *in = fopen(from, "rb");
    if (!in) return optional ? KITE_OK : kite_fail(e, KITE_ERR_IO, "random model: cannot open %s: %s", from, strerror(errno));
    FILE *out = fopen(to, "wb");
    if (!out) {
        fclose(in);
        return kite_fail(e, KITE_ERR_IO, "random model: cannot create %s: %s", to, strerror(errno));
    }
    char buf[1 << 16];
    size_t n;
    bool ok = true;
    while (ok && (n = fread(buf, 1, sizeof buf, in)) > 0) ok = fwrite(buf, 1, n, out) == n;
    if (ferror(in)) ok = false;
    fclose(in);
    if (fclose(out) != 0) ok = false;
    return ok ? KITE_OK : kite_fail(e, KITE_ERR_IO, "random model: copying %s to %s failed", from, to);
}

static bool hf_layer_local(const model_shape *s, int32_t l) {
    return s->sliding_window > 0 && s->swa_period > 0 && l % s->swa_period < s->swa_period - 1;
}

/* config.json as transformers' config class of the family spells it. */
static int hf_write_config(const model_shape *s, int32_t n_vocab, const vocab *v, kite_random_defect defect, const char *dir,
                           kite_error *e) {
    const bool gemma3 = hf_arch_is(s, "gemma3"), gemma4 = hf_arch_is(s, "gemma4"), glimmer = hf_arch_is(s, "muse-glimmer");
    const bool qwen35 = hf_arch_is(s, "qwen35"), lfm2 = s->layer_kinds != NULL;
    static const struct { const char *arch, *model_type, *cls; } k_classes[] = {
        {"llama", "llama", "LlamaForCausalLM"}, {"qwen2", "qwen2", "Qwen2ForCausalLM"}, {"qwen3", "qwen3", "Qwen3ForCausalLM"}, {"qwen3moe", "qwen3_moe", "Qwen3MoeForCausalLM"},
        {"gemma3", "gemma3_text", "Gemma3ForCausalLM"}, {"gemma4", "gemma4_text", "Gemma4ForCausalLM"},
        {"muse-glimmer", "muse_glimmer", "MuseGlimmerForConditionalGeneration"}, {"qwen35", "qwen3_5_text", "Qwen3_5ForCausalLM"},
        {"lfm2", "lfm2", "Lfm2ForCausalLM"},
    };
    const char *model_type = NULL, *cls = NULL;
    for (size_t i = 0; i < sizeof k_classes / sizeof k_classes[0]; i++)
        if (hf_arch_is(s, k_classes[i].arch)) model_type = k_classes[i].model_type, cls = k_classes[i].cls;
    if (!model_type) return kite_fail(e, KITE_ERR_UNSUPPORTED, "random model: no Hugging Face layout for architecture %s", s->arch);
    json_t *c = json_object();
    json_object_set_new(c, "architectures", json_pack("[s]", cls));
    json_object_set_new(c, "model_type", json_string(model_type));
    json_object_set_new(c, "hidden_size", json_integer(s->dim));
    json_object_set_new(c, "intermediate_size", json_integer(s->ffn_dim));
    json_object_set_new(c, "num_hidden_layers", json_integer(s->n_layers));
    json_object_set_new(c, "num_attention_heads", json_integer(s->n_heads));
    json_object_set_new(c, "num_key_value_heads", json_integer(s->n_kv_heads));
    json_object_set_new(c, "head_dim", json_integer(s->head_dim));
    json_object_set_new(c, "vocab_size", json_integer(n_vocab));
    json_object_set_new(c, "max_position_embeddings", json_integer(s->n_ctx));
    /* float -> double is exact, and jansson prints round-trip digits, so the reader gets the same float. */
    json_object_set_new(c, "rms_norm_eps", json_real((double)s->rms_eps));
    json_object_set_new(c, "rope_theta", json_real((double)s->rope_theta));
    if (s->family.llama3.factor > 0.0f)
        json_object_set_new(c, "rope_scaling",
                            json_pack("{s:s, s:f, s:f, s:f, s:i}", "rope_type", "llama3", "factor", (double)s->family.llama3.factor,
                                      "low_freq_factor", (double)s->family.llama3.low_freq, "high_freq_factor",
                                      (double)s->family.llama3.high_freq, "original_max_position_embeddings", s->family.llama3.orig_ctx));
    else if (s->family.rope_linear > 0.0f)
        json_object_set_new(c, "rope_scaling", json_pack("{s:s, s:f}", "rope_type", "linear", "factor", (double)s->family.rope_linear));
    else
        json_object_set_new(c, "rope_scaling", json_null());
    json_object_set_new(c, "tie_word_embeddings", json_boolean(s->tied));
    if (v->bos >= 0) json_object_set_new(c, "bos_token_id", json_integer(v->bos));
    if (v->eos >= 0) json_object_set_new(c, "eos_token_id", json_integer(v->eos));
    json_object_set_new(c, "torch_dtype", json_string("float32"));
    if (gemma3) { /* Gemma3TextConfig; query_pre_attn_scalar = head_dim and local base 10000, as llama.cpp assumes */
        json_object_set_new(c, "hidden_activation", json_string("gelu_pytorch_tanh"));
        json_object_set_new(c, "query_pre_attn_scalar", json_integer(s->head_dim));
        json_object_set_new(c, "sliding_window", json_integer(s->sliding_window));
        json_object_set_new(c, "sliding_window_pattern", json_integer(s->swa_period));
        json_object_set_new(c, "rope_local_base_freq", json_real(10000.0));
        json_object_set_new(c, "final_logit_softcapping", json_null());
        json_object_set_new(c, "attn_logit_softcapping", json_null());
    } else if (gemma4) { /* Gemma4TextConfig, as the 31B's config.json spells it */
        json_object_set_new(c, "hidden_activation", json_string("gelu_pytorch_tanh"));
        json_object_set_new(c, "sliding_window", json_integer(s->sliding_window));
        json_object_set_new(c, "global_head_dim", json_integer(s->head_dim));
        json_object_set_new(c, "head_dim", json_integer(s->family.head_dim_swa));
        json_object_set_new(c, "num_key_value_heads", json_integer(s->family.n_kv_heads_swa));
        json_object_set_new(c, "num_global_key_value_heads", json_integer(s->n_kv_heads));
        json_object_set_new(c, "attention_k_eq_v", json_boolean(s->family.k_eq_v));
        json_object_set_new(c, "final_logit_softcapping", s->family.softcap > 0.0f ? json_real((double)s->family.softcap) : json_null());
        json_object_set_new(c, "num_kv_shared_layers", json_integer(0));
        json_object_set_new(c, "hidden_size_per_layer_input", json_integer(0));
        json_object_set_new(c, "enable_moe_block", json_false());
        json_object_set_new(c, "use_double_wide_mlp", json_false());
        json_object_del(c, "rope_theta");
        json_object_del(c, "rope_scaling");
        json_object_set_new(c, "rope_parameters",
                            s->family.partial_rotary_global > 0.0f
                                ? json_pack("{s:{s:s, s:f}, s:{s:s, s:f, s:f}}", "sliding_attention", "rope_type", "default", "rope_theta",
                                            (double)s->family.rope_theta_swa, "full_attention", "rope_type", "proportional",
                                            "partial_rotary_factor", (double)s->family.partial_rotary_global, "rope_theta", (double)s->rope_theta)
                                : json_pack("{s:{s:s, s:f}, s:{s:s, s:f}}", "sliding_attention", "rope_type", "default", "rope_theta",
                                            (double)s->family.rope_theta_swa, "full_attention", "rope_type", "default", "rope_theta",
                                            (double)s->rope_theta));
    } else if (glimmer) { /* the q/k norms the converter synthesizes from qk_scale_factor are 1 here */
        json_object_set_new(c, "hidden_act", json_string("silu"));
        json_object_set_new(c, "sliding_window", json_integer(s->sliding_window));
        json_object_set_new(c, "final_logit_softcapping", s->family.softcap > 0.0f ? json_real((double)s->family.softcap) : json_null());
        json_object_set_new(c, "output_multiplier", json_real((double)(s->family.logit_scale > 0.0f ? s->family.logit_scale : 1.0f)));
        json_object_set_new(c, "qk_scale_factor", json_real((double)(s->family.qk_scale > 0.0f ? s->family.qk_scale : 1.0f)));
    } else {
        json_object_set_new(c, "hidden_act", json_string("silu"));
    }
    if (gemma4 || glimmer) {
        json_t *types = json_array();
        for (int32_t l = 0; l < s->n_layers; l++) json_array_append_new(types, json_string(hf_layer_local(s, l) ? "sliding_attention" : "full_attention"));
        json_object_set_new(c, "layer_types", types);
    }
    if (hf_arch_is(s, "llama")) {
        json_object_set_new(c, "attention_bias", json_false());
        json_object_set_new(c, "mlp_bias", json_false());
    }
    if (qwen35) { /* Qwen3_5TextConfig (rope in rope_parameters, as transformers 5) */
        json_object_del(c, "rope_theta");
        json_object_del(c, "rope_scaling");
        json_object_set_new(c, "rope_parameters",
                            json_pack("{s:s, s:f, s:f, s:b, s:[i, i, i]}", "rope_type", "default", "rope_theta", (double)s->rope_theta,
                                      "partial_rotary_factor", (double)s->n_rot / s->head_dim, "mrope_interleaved", 1,
                                      "mrope_section", s->n_rot / 2 - 2 * (s->n_rot / 6), s->n_rot / 6, s->n_rot / 6));
        json_object_set_new(c, "linear_conv_kernel_dim", json_integer(s->dn_kernel));
        json_object_set_new(c, "linear_key_head_dim", json_integer(s->dn_head));
        json_object_set_new(c, "linear_value_head_dim", json_integer(s->dn_head));
        json_object_set_new(c, "linear_num_key_heads", json_integer(s->dn_n_k));
        json_object_set_new(c, "linear_num_value_heads", json_integer(s->dn_n_v));
        json_object_set_new(c, "full_attention_interval", json_integer(s->full_attn_interval));
        json_t *types = json_array();
        for (int32_t l = 0; l < s->n_layers; l++)
            json_array_append_new(types, json_string((l + 1) % s->full_attn_interval ? "linear_attention" : "full_attention"));
        json_object_set_new(c, "layer_types", types);
        json_object_set_new(c, "attn_output_gate", json_true());
        json_object_set_new(c, "attention_bias", json_false());
        if (s->n_nextn > 0) json_object_set_new(c, "mtp_num_hidden_layers", json_integer(s->n_nextn));
    }
    if (lfm2) { /* Lfm2Config, the FFN width given as is */
        json_object_del(c, "rms_norm_eps");
        json_object_del(c, "tie_word_embeddings");
        json_object_set_new(c, "norm_eps", json_real((double)s->rms_eps));
        json_object_set_new(c, "block_ff_dim", json_integer(s->ffn_dim));
        json_object_set_new(c, "block_auto_adjust_ff_dim", json_false());
        json_object_set_new(c, "conv_L_cache", json_integer(s->conv_taps));
        json_object_set_new(c, "conv_bias", json_false());
        json_object_set_new(c, "tie_embedding", json_boolean(s->tied));
        json_t *types = json_array();
        for (int32_t l = 0; l < s->n_layers; l++) json_array_append_new(types, json_string(shape_layer_is_conv(s, l) ? "conv" : "full_attention"));
        json_object_set_new(c, "layer_types", types);
    }
    if (s->n_experts > 0) { /* Qwen3MoeConfig */
        json_object_set_new(c, "num_experts", json_integer(s->n_experts));
        json_object_set_new(c, "num_experts_per_tok", json_integer(s->n_experts_used));
        json_object_set_new(c, "moe_intermediate_size", json_integer(s->expert_ffn_dim));
        json_object_set_new(c, "norm_topk_prob", json_boolean(defect != KITE_RANDOM_DEFECT_MOE_UNNORMALISED));
        json_object_set_new(c, "decoder_sparse_step", json_integer(1));
        json_object_set_new(c, "mlp_only_layers", json_array());
    }
    if (hf_arch_is(s, "qwen2") || hf_arch_is(s, "qwen3") || hf_arch_is(s, "qwen3moe")) {
        json_object_set_new(c, "use_sliding_window", json_false());
        json_object_set_new(c, "attention_bias", json_boolean(s->family.qkv_bias));
    }
    if (qwen35) { /* as published: the text model's config inside the vision-language one */
        json_t *outer = json_object();
        json_object_set_new(outer, "architectures", json_pack("[s]", "Qwen3_5ForConditionalGeneration"));
        json_object_set_new(outer, "model_type", json_string("qwen3_5"));
        json_object_set_new(outer, "tie_word_embeddings", json_boolean(s->tied));
        json_object_del(c, "tie_word_embeddings");
        json_object_set_new(outer, "vision_config", json_pack("{s:s, s:i}", "model_type", "qwen3_5", "depth", 1));
        json_object_set_new(outer, "text_config", c);
        c = outer;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    int st = json_dump_file(c, path, JSON_INDENT(2) | JSON_REAL_PRECISION(17)) == 0
                 ? KITE_OK : kite_fail(e, KITE_ERR_IO, "random model: cannot write %s", path);
    json_decref(c);
    return st;
}

/* model.safetensors: u64 little-endian header length, the JSON header (padded with spaces to 8 bytes), F32 data
 * streamed row by row. */
static int hf_write_safetensors(const tensor_plan *plan, const hf_item *items, int n_items, const model_shape *s, uint64_t seed,
                                const char *dir, kite_error *e) {
    json_t *h = json_object();
    json_object_set_new(h, "__metadata__", json_pack("{s:s}", "format", "pt"));
    uint64_t offset = 0;
    int64_t max_cols = 0;
    for (int i = 0; i < n_items; i++) {
        const hf_item *t = &items[i];
        uint64_t bytes = (uint64_t)t->rows * (uint64_t)t->cols * (t->f16 ? 2 : 4);
        json_t *shape = json_array();
        for (int d = 0; d < t->n_dims; d++) json_array_append_new(shape, json_integer(t->shape[d]));
        json_object_set_new(h, t->name, json_pack("{s:s, s:o, s:[I, I]}", "dtype", t->f16 ? "F16" : "F32", "shape", shape, "data_offsets",
                                                  (json_int_t)offset, (json_int_t)(offset + bytes)));
        offset += bytes;
        if (t->cols > max_cols) max_cols = t->cols;
    }
    char *text = json_dumps(h, JSON_COMPACT);
    json_decref(h);
    float *src = malloc((size_t)max_cols * sizeof *src), *dst = malloc((size_t)max_cols * sizeof *dst);
    uint16_t *half = malloc((size_t)max_cols * sizeof *half);
    if (!text || !src || !dst || !half) {
        free(text), free(src), free(dst), free(half);
        return kite_fail(e, KITE_ERR_NOMEM, "random model: out of memory");
    }
    size_t len = strlen(text), padded = (len + 7) / 8 * 8;
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "wb");
    bool ok = f != NULL;
    if (ok) {
        uint8_t le[8];
        for (int i = 0; i < 8; i++) le[i] = (uint8_t)((uint64_t)padded >> (8 * i));
        ok = fwrite(le, 1, 8, f) == 8 && fwrite(text, 1, len, f) == len;
        for (size_t i = len; ok && i < padded; i++) ok = fputc(' ', f) != EOF;
    }
    for (int i = 0; ok && i < n_items; i++) {
        const hf_item *t = &items[i];
        const tensor_plan *p = &plan[t->plan];
        for (int64_t r = 0; ok && r < t->rows; r++) {
            int64_t from = r;
            if (t->permute_heads > 0) { /* GGUF row h*hd + 2i + s holds HF row h*hd + s*hd/2 + i (LlamaModel.permute) */
                const int64_t hd = t->rows / t->permute_heads, half = hd / 2, head = r / hd, k = r % hd;
                from = head * hd + 2 * (k % half) + k / half;
            }
            if (t->v_reorder == 1) from = hf_v_source(s, t->v_start, t->v_head, r);
            plan_row(p, seed, t->row0 + from, src, !t->a_log);
            for (int64_t c = 0; c < t->cols; c++) {
                float x = src[t->v_reorder == 2 ? hf_v_source(s, t->v_start, t->v_head, c) : c];
                dst[c] = t->minus_one ? x - 1.0f : x;
            }
            if (t->f16) { /* rounded as the GGUF's F16 rows are */
                for (int64_t c = 0; c < t->cols; c++) half[c] = kite_f32_to_fp16(dst[c]);
                ok = fwrite(half, sizeof *half, (size_t)t->cols, f) == (size_t)t->cols;
            } else {
                ok = fwrite(dst, sizeof *dst, (size_t)t->cols, f) == (size_t)t->cols;
            }
        }
    }
    if (f && fclose(f) != 0) ok = false;
    free(text), free(src), free(dst), free(half);
    return ok ? KITE_OK : kite_fail(e, KITE_ERR_IO, "random model: writing %s failed", path);
}

static int write_hf_folder(const char *dir, const model_shape *s, const tensor_plan *plan, int n_plan, int32_t n_vocab,
                           const vocab *v, const kite_random_model_params *params, kite_random_defect defect, kite_error *e) {
    const char *tok = params->tokenizer_path;
    size_t tl = tok ? strlen(tok) : 0;
    if (!tok || tl < 5 || strcmp(tok + tl - 5, ".json") != 0)
        return kite_fail(e, KITE_ERR_INVALID_ARG, "random model: a Hugging Face folder needs a tokenizer.json (--tokenizer) to copy");
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return kite_fail(e, KITE_ERR_IO, "random model: cannot create %s: %s", dir, strerror(errno));
    hf_item *items = NULL;
    int n_items = 0, st;
    if ((st = hf_items(s, plan, n_plan, &items, &n_items, e))) return st;
    if ((st = hf_write_config(s, n_vocab, v, defect, dir, e)) || (st = hf_write_safetensors(plan, items, n_items, s, params->seed, dir, e))) goto done;
    char to[4096], from[4096];
    snprintf(to, sizeof to, "%s/tokenizer.json", dir);
    if ((st = hf_copy_file(tok, to, false, e))) goto done;
    const char *slash = strrchr(tok, '/');
    snprintf(from, sizeof from, "%.*stokenizer_config.json", slash ? (int)(slash - tok + 1) : 0, tok);
    snprintf(to, sizeof to, "%s/tokenizer_config.json", dir);
    st = hf_copy_file(from, to, true, e);
done:
    free(items);
    return st;
}

static void report(const kite_random_model_params *p, float fraction) {
    if (p->progress) p->progress(fraction, p->progress_user_data);
}

static bool name_has(const char *name, const char *part) { return strstr(name, part) != NULL; }

/* The extras on the planned tensors: norm weights drawn around 1, then the defect. */
static void apply_extras(tensor_plan *plan, int n, const kite_random_model_extras *x) {
    for (int i = 0; i < n; i++) {
        tensor_plan *t = &plan[i];
        const bool qk = name_has(t->name, "attn_q_norm.") || name_has(t->name, "attn_k_norm.");
        if (x->norm_std > 0.0f && is_norm_name(t->name)) {
            t->norm_std = qk && x->qk_norm_std > 0.0f ? x->qk_norm_std : x->norm_std;
            t->norm_mean = qk && x->qk_norm_mean > 0.0f ? x->qk_norm_mean : 1.0f;
        }
        if (x->defect == KITE_RANDOM_DEFECT_UNIT_QK_NORM && qk) t->norm_std = 0.0f; /* back to 1 */
        if (x->defect == KITE_RANDOM_DEFECT_CONV_REVERSED && name_has(t->name, "shortconv.conv.")) t->reversed = true;
        const bool qwen35 = t->shape->full_attn_interval > 0;
        if ((x->defect == KITE_RANDOM_DEFECT_ZERO_QKV_BIAS && name_has(t->name, ".bias") && name_has(t->name, ".attn_")) ||
            (x->defect == KITE_RANDOM_DEFECT_BETA_IGNORED && name_has(t->name, ".ssm_beta.")) ||
            (x->defect == KITE_RANDOM_DEFECT_DECAY_IGNORED && name_has(t->name, ".ssm_a")) ||
            (x->defect == KITE_RANDOM_DEFECT_NO_ATTN_GATE && !qwen35 && name_has(t->name, ".attn_gate.")))
            t->zero = true;
        if (x->defect == KITE_RANDOM_DEFECT_NO_OUTPUT_GATE && qwen35 && name_has(t->name, ".attn_q.weight"))
            t->zero_odd_blocks = t->shape->head_dim; /* each head's rows are [q | gate] */
    }
}

int kite_write_random_model(const char *path, const kite_random_model_params *params, char *err, size_t err_size) {
    return kite_write_random_model_ex(path, params, NULL, err, err_size);
}

int kite_write_random_model_ex(const char *path, const kite_random_model_params *params, const kite_random_model_extras *extras,
                               char *err, size_t err_size) {
    kite_error e = {0};
    if (!path || !params || !params->shape || (!params->type && strcmp(params->shape, "eagle3") != 0 && strncmp(params->shape, "dflash", 6) != 0))
        return kite_fail(&e, KITE_ERR_INVALID_ARG, "random model: path, params, shape and type must not be NULL"),
               kite_error_export(&e, err, err_size);
    if (strncmp(params->shape, "dflash", 6) == 0) { /* a drafter for a given target (random_drafter.c) */
        kite_write_random_dflash(path, params, &e);
        return kite_error_export(&e, err, err_size);
    }
    if (strcmp(params->shape, "eagle3") == 0) { /* a drafter for a given target (random_drafter.c) */
        kite_write_random_eagle3(path, params, &e);
        return kite_error_export(&e, err, err_size);
    }
    const model_shape *shape = NULL;
    for (size_t i = 0; i < sizeof k_shapes / sizeof k_shapes[0]; i++)
        if (strcmp(params->shape, k_shapes[i].name) == 0) shape = &k_shapes[i];
    if (!shape)
        return kite_fail(&e, KITE_ERR_INVALID_ARG, "random model: unknown shape '%s' (known: llama-1.1b, qwen3-0.6b, tiny-qwen3, tiny-llama3, tiny-qwen2, llama-3.2-1b, tiny, tiny-l4, gemma3-1b, "
                         "tiny-gemma3, qwen3moe-a3b-4l, tiny-qwen3moe, qwen3.5-0.8b(-mtp), tiny-qwen35(-mtp), lfm2-350m, tiny-lfm2, gemma4-31b-6l, tiny-gemma4, tiny-muse-glimmer, eagle3, dflash)",
                         params->shape),
               kite_error_export(&e, err, err_size);
    int type_index = -1;
    for (size_t i = 0; i < sizeof k_types / sizeof k_types[0]; i++)
        if (strcmp(params->type, k_types[i].name) == 0) type_index = (int)i;
    if (type_index < 0)
        return kite_fail(&e, KITE_ERR_INVALID_ARG, "random model: unknown type '%s' (known: f32, f16, bf16, q8_0, q4_0, q4_k_m, kt2, kt2_5, kt3, kt2_5_m)",
                         params->type),
               kite_error_export(&e, err, err_size);

    vocab v;
    int st = load_vocab(&v, params->tokenizer_path, shape->arch, &e);
    if (st) return kite_error_export(&e, err, err_size);
    int32_t n_vocab = shape->n_vocab ? shape->n_vocab : (params->tokenizer_path ? v.n : TINY_DEFAULT_VOCAB);
    tensor_plan *plan = NULL;
    int n_tensors = 0;
    kite_gguf_writer *w = NULL;
    kite_pool *pool = NULL;
    float *scratch = NULL;
    if (v.n > n_vocab) {
        st = kite_fail(&e, KITE_ERR_INVALID_ARG, "random model: the tokenizer %s has %d tokens, more than the %s shape's vocabulary of %d",
                       params->tokenizer_path, v.n, shape->name, n_vocab);
        goto done;
    }
    if ((st = vocab_pad(&v, n_vocab, &e))) goto done;
    /* the defects that live in the metadata (and in what the shape plans) */
    const kite_random_defect defect = extras ? extras->defect : KITE_RANDOM_DEFECT_NONE;
    model_shape eff = *shape;
    if (defect == KITE_RANDOM_DEFECT_NO_ROPE_SCALING) eff.family.llama3.factor = 0.0f;
    if (defect == KITE_RANDOM_DEFECT_WIDE_WINDOW) eff.sliding_window = 4096;
    if (defect == KITE_RANDOM_DEFECT_NO_SOFTCAP) eff.family.softcap = 0.0f;
    if (defect == KITE_RANDOM_DEFECT_NO_PROPORTIONAL_ROPE) eff.family.partial_rotary_global = 0.0f;
    shape = &eff;
    if ((st = plan_tensors(shape, n_vocab, k_types[type_index].type, defect, &plan, &n_tensors, &e))) goto done;
    if (extras) apply_extras(plan, n_tensors, extras);

    w = kite_gguf_writer_new();
    int n_threads = kite_cpu_count();
    pool = kite_pool_new(n_threads);
    int64_t max_cols = 0;
    double total_elems = 0, done_elems = 0;
    for (int i = 0; i < n_tensors; i++) {
        if (plan[i].ne[0] > max_cols) max_cols = plan[i].ne[0];
        total_elems += (double)plan[i].ne[0] * (double)plan[i].ne[1] * (double)plan[i].ne[2];
    }
    scratch = malloc((size_t)n_threads * (size_t)max_cols * sizeof *scratch);
    if (!w || !pool || !scratch) {
        st = kite_fail(&e, KITE_ERR_NOMEM, "random model: out of memory");
        goto done;
    }
    if (is_trellis_model(k_types[type_index].type))
        for (int i = 0; i < n_tensors; i++)
            if (plan[i].type == KITE_TYPE_Q4_K && strncmp(plan[i].name, "blk.", 4) == 0)
                plan[i].type = trellis_matrix_type(k_types[type_index].type, plan[i].name, plan[i].ne);
    write_metadata(w, shape, n_vocab, k_types[type_index].name, k_types[type_index].file_type, params->seed, &v);
    report(params, 0.0f);
    for (int i = 0; i < n_tensors; i++) {
        const tensor_plan *t = &plan[i];
        size_t row_bytes = kite_type_row_bytes(t->type, t->ne[0]);
        size_t n_bytes = row_bytes * (size_t)t->ne[1] * (size_t)t->ne[2];
        unsigned char *data = malloc(n_bytes);
        if (!data) {
            st = kite_fail(&e, KITE_ERR_NOMEM, "random model: out of memory for %s (%zu bytes)", t->name, n_bytes);
            goto done;
        }
        quant_job job = {
            .t = t, .seed = params->seed, .out = data, .row_bytes = row_bytes, .scratch = scratch,
            .from_float = kite_type_get(t->type)->from_float,
        };
        job.rows_per_task = 65536 / t->ne[0] > 0 ? 65536 / t->ne[0] : 1;
        if (kite_is_trellis(t->type)) {
            /* For speed measurements only: the first row group is encoded and repeated (the Viterbi encoder
             * takes ~3 us per weight, an hour for a 1.1B model), so rows repeat every 16. */
            float *rows16 = malloc(sizeof(float) * (size_t)t->ne[0] * KT_ROWS);
            if (!rows16) {
                free(data);
                st = kite_fail(&e, KITE_ERR_NOMEM, "random model: out of memory for %s", t->name);
                goto done;
            }
            for (int64_t r = 0; r < KT_ROWS; r++) plan_row(t, params->seed, r, rows16 + r * t->ne[0], true);
            const size_t group_bytes = row_bytes * KT_ROWS;
            kite_kt_quantize(t->type, rows16, data, KT_ROWS, t->ne[0], NULL);
            for (int64_t r = KT_ROWS; r < t->ne[1]; r += KT_ROWS) memcpy(data + (size_t)r * row_bytes, data, group_bytes);
            free(rows16);
        } else {
            kite_pool_run(pool, quant_task, &job, (t->ne[1] * t->ne[2] + job.rows_per_task - 1) / job.rows_per_task);
        }
        kite_gguf_w_tensor(w, t->name, t->type, t->n_dims, t->ne, data, n_bytes);
        free(data);
        done_elems += (double)t->ne[0] * (double)t->ne[1] * (double)t->ne[2];
        report(params, (float)(0.9 * done_elems / total_elems)); /* the last tenth is writing the file */
    }
    if ((st = kite_gguf_writer_save(w, path, &e))) goto done;
    if (params->hf_dir && (st = write_hf_folder(params->hf_dir, shape, plan, n_tensors, n_vocab, &v, params, defect, &e))) goto done;
    report(params, 1.0f);
done:
    free(scratch);
    kite_pool_free(pool);
    kite_gguf_writer_free(w);
    free(plan);
    vocab_free(&v);
    return kite_error_export(&e, err, err_size);
}
