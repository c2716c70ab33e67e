/* Random-weight Llama-3 / Qwen2 / Qwen3 models as GGUF (llama.cpp's layout) and as a Hugging Face folder.
 * See random_model.h. The GGUF conventions followed here are those of llama.cpp's convert_hf_to_gguf.py:
 *   - Llama: q/k rows permuted so that llama.cpp's interleaved ("norm") RoPE equals HF's rotate-half;
 *     Llama-3 scaling stored as rope_freqs.weight, one divisor per rotated pair.
 *   - Qwen2/Qwen3: no permutation (NEOX RoPE is rotate-half).
 *   - Tokenizer: tokenizer.ggml.model "gpt2", tokens by id (holes and padding rows as "[PAD<id>]",
 *     type UNUSED), added tokens CONTROL when special or shaped like <|...|>, else USER_DEFINED. */
#include "random_model.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fp16.h"
#include "io/gguf.h"
#include "quant/types.h"

/* llama.cpp's token types (llama_token_type / gguf.TokenType). */
enum { TOKEN_NORMAL = 1, TOKEN_CONTROL = 3, TOKEN_USER_DEFINED = 4, TOKEN_UNUSED = 5 };

bool oracle_default_spec(const char *arch, oracle_spec *s) {
    memset(s, 0, sizeof *s);
    if (strcmp(arch, "llama") == 0) {
        /* Llama-3.2 shape in miniature: tied embeddings, GQA 2:1, Llama-3 RoPE scaling. The original
         * context (256) is small so that the scaled pairs turn by visibly different angles within the
         * first hundred positions: ignoring the scaling must show. */
        *s = (oracle_spec){
            .arch = "llama", .hf_model_type = "llama", .hf_class = "LlamaForCausalLM", .tokenizer_pre = "llama-bpe",
            .bos_text = "<|begin_of_text|>", .eos_text = "<|end_of_text|>", .add_bos = true,
            .dim = 128, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .head_dim = 32, .ffn_dim = 384,
            .n_vocab = 128256, .n_ctx_train = 2048, .rms_eps = 1e-5f, .rope_theta = 500000.0f,
            .llama3_rope = true, .rope_factor = 8.0f, .rope_low_freq_factor = 1.0f, .rope_high_freq_factor = 4.0f,
            .rope_orig_ctx = 256, .tied_embeddings = true, .seed = 0x11a3a3ull,
        };
        return true;
    }
    if (strcmp(arch, "qwen2") == 0) {
        /* Qwen2 with q/k/v biases, 4 query heads sharing one kv head, untied output, F16 embeddings.
         * 151936 rows as Qwen's configs say: the tokenizer's 151669 tokens plus padding. */
        *s = (oracle_spec){
            .arch = "qwen2", .hf_model_type = "qwen2", .hf_class = "Qwen2ForCausalLM", .tokenizer_pre = "qwen2",
            .bos_text = "<|endoftext|>", .eos_text = "<|im_end|>", .add_bos = false,
            .dim = 64, .n_layers = 2, .n_heads = 4, .n_kv_heads = 1, .head_dim = 16, .ffn_dim = 160,
            .n_vocab = 151936, .n_ctx_train = 512, .rms_eps = 1e-6f, .rope_theta = 1000000.0f,
            .qkv_bias = true, .tied_embeddings = false, .f16_embeddings = true, .seed = 0x9e2ull,
        };
        return true;
    }
    if (strcmp(arch, "gemma3") == 0) {
        /* Gemma 3 in miniature: layer 0 local (window 16, RoPE base 10000), layer 1 global (base 1e6 with
         * linear scaling 8, as Gemma 3 4B), head_dim 32 given explicitly (4 x 32 != dim 64), tied. The
         * prompts run to ~90 positions, far past the window. The Qwen3 tokenizer stands in for Gemma's
         * SentencePiece one (the architecture does not depend on the vocabulary). */
        *s = (oracle_spec){
            .arch = "gemma3", .hf_model_type = "gemma3_text", .hf_class = "Gemma3ForCausalLM", .tokenizer_pre = "qwen2",
            .bos_text = "<|endoftext|>", .eos_text = "<|im_end|>", .add_bos = false,
            .dim = 64, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .head_dim = 32, .explicit_head_dim = true,
            .ffn_dim = 192, .n_vocab = 151936, .n_ctx_train = 512, .rms_eps = 1e-6f, .rope_theta = 1000000.0f,
            .qk_norm = true, .tied_embeddings = true, .sliding_window = 16, .swa_period = 2, .rope_linear_factor = 8.0f,
            .seed = 0x6e3a3ull,
        };
        return true;
    }
    if (strcmp(arch, "muse-glimmer") == 0) {
        /* Muse Glimmer in miniature: layer 0 sliding (window 16, RoPE), layer 1 full attention (no RoPE), the
         * sigmoid output gate, QK-norm with qk_scale_factor 1.6, post-norms, untied output with multiplier 0.8 and
         * a soft-cap of 4 that bends the larger logits. */
        *s = (oracle_spec){
            .arch = "muse-glimmer", .hf_model_type = "muse_glimmer", .hf_class = "MuseGlimmerForConditionalGeneration",
            .tokenizer_pre = "qwen2", .bos_text = "<|endoftext|>", .eos_text = "<|im_end|>", .add_bos = false,
            .dim = 64, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .head_dim = 32, .explicit_head_dim = true,
            .ffn_dim = 192, .n_vocab = 151936, .n_ctx_train = 512, .rms_eps = 1e-6f, .rope_theta = 10000.0f,
            .qk_norm = true, .tied_embeddings = false, .sliding_window = 16, .swa_period = 2, .softcap = 4.0f,
            .logit_scale = 0.8f, .qk_scale = 1.6f, .seed = 0x6117ull,
        };
        return true;
    }
    if (strcmp(arch, "gemma4") == 0) {
        /* Gemma 4 in miniature, as the 31B's config: local layers (0, 1) with head size 32 and 2 KV heads (window 16,
         * RoPE base 10000, whole head), global layer 2 with head size 64 and 1 KV head, k_eq_v (no v_proj), and
         * proportional RoPE (a quarter of the pairs rotated; base 1000 rather than the 31B's 1e6, so the pairs
         * the divisors stop would turn by radians within the prompts); layer scalars, soft-cap 5, tied. */
        *s = (oracle_spec){
            .arch = "gemma4", .hf_model_type = "gemma4_text", .hf_class = "Gemma4ForCausalLM", .tokenizer_pre = "qwen2",
            .bos_text = "<|endoftext|>", .eos_text = "<|im_end|>", .add_bos = false,
            .dim = 64, .n_layers = 3, .n_heads = 4, .n_kv_heads = 1, .head_dim = 64, .explicit_head_dim = true,
            .ffn_dim = 192, .n_vocab = 151936, .n_ctx_train = 512, .rms_eps = 1e-6f, .rope_theta = 1000.0f,
            .qk_norm = true, .tied_embeddings = true, .sliding_window = 16, .swa_period = 3, .head_dim_swa = 32,
            .n_kv_heads_swa = 2, .rope_theta_swa = 10000.0f, .partial_rotary_global = 0.25f, .k_eq_v = true,
            .layer_scalar = true, .softcap = 5.0f, .seed = 0x6e4a4ull,
        };
        return true;
    }
    if (strcmp(arch, "qwen3moe") == 0) {
        /* Qwen3-MoE: Qwen3's attention, then 8 experts of 64 with 2 per token in each of 2 layers (the dense
         * feed_forward_length, 128, is written as the converter does and unused). */
        *s = (oracle_spec){
            .arch = "qwen3moe", .hf_model_type = "qwen3_moe", .hf_class = "Qwen3MoeForCausalLM", .tokenizer_pre = "qwen2",
            .bos_text = "<|endoftext|>", .eos_text = "<|im_end|>", .add_bos = false,
            .dim = 64, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .head_dim = 32, .explicit_head_dim = true,
            .ffn_dim = 128, .n_vocab = 151936, .n_ctx_train = 512, .rms_eps = 1e-6f, .rope_theta = 1000000.0f,
            .qk_norm = true, .tied_embeddings = true, .n_experts = 8, .n_experts_used = 2, .expert_ffn_dim = 64,
            .seed = 0x3e0eull,
        };
        return true;
    }
    if (strcmp(arch, "qwen35") == 0) {
        /* Qwen3.5: layers 0-1 and 3-4 Gated DeltaNet (2 key heads, 4 value heads of 16: the value-head order
         * matters), 2 and 5 gated attention (4 heads of 32, 8 dimensions rotated), tied embeddings. */
        *s = (oracle_spec){
            .arch = "qwen35", .hf_model_type = "qwen3_5_text", .hf_class = "Qwen3_5ForCausalLM", .tokenizer_pre = "qwen2",
            .bos_text = "<|endoftext|>", .eos_text = "<|im_end|>", .add_bos = false,
            .dim = 64, .n_layers = 6, .n_heads = 4, .n_kv_heads = 2, .head_dim = 32, .explicit_head_dim = true,
            .ffn_dim = 128, .n_vocab = 151936, .n_ctx_train = 512, .rms_eps = 1e-6f, .rope_theta = 10000000.0f,
            .qk_norm = true, .tied_embeddings = true, .full_attn_interval = 3, .n_rot = 8,
            .dn_n_k = 2, .dn_n_v = 4, .dn_head = 16, .dn_kernel = 4, .seed = 0x35e5ull,
        };
        return true;
    }
    if (strcmp(arch, "lfm2") == 0) {
        /* LFM2 in miniature: conv, conv, attention, conv (two convs in a row, one after attention), 3 taps, GQA 2:1
         * with QK-norm, head_dim = dim / heads as LFM2 has, tied. config.json's intermediate_size 288 is adjusted to
         * 64 * ceil(int(2 * 288 / 3) / 64) = 192, as the converter and transformers do. */
        *s = (oracle_spec){
            .arch = "lfm2", .hf_model_type = "lfm2", .hf_class = "Lfm2ForCausalLM", .tokenizer_pre = "qwen2",
            .bos_text = "<|endoftext|>", .eos_text = "<|im_end|>", .add_bos = false,
            .dim = 64, .n_layers = 4, .n_heads = 4, .n_kv_heads = 2, .head_dim = 16,
            .ffn_dim = 192, .n_vocab = 151936, .n_ctx_train = 512, .rms_eps = 1e-5f, .rope_theta = 1000000.0f,
            .qk_norm = true, .tied_embeddings = true, .layer_kinds = "ccac", .conv_taps = 3, .hf_ffn_dim = 288,
            .seed = 0x1f2ull,
        };
        return true;
    }
    if (strcmp(arch, "qwen3") == 0) {
        /* Qwen3: QK-norm, head_dim 32 given explicitly (4 heads x 32 = 128 != dim 64), tied embeddings. */
        *s = (oracle_spec){
            .arch = "qwen3", .hf_model_type = "qwen3", .hf_class = "Qwen3ForCausalLM", .tokenizer_pre = "qwen2",
            .bos_text = "<|endoftext|>", .eos_text = "<|im_end|>", .add_bos = false,
            .dim = 64, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .head_dim = 32, .explicit_head_dim = true,
            .ffn_dim = 192, .n_vocab = 151936, .n_ctx_train = 512, .rms_eps = 1e-6f, .rope_theta = 1000000.0f,
            .qk_norm = true, .tied_embeddings = true, .seed = 0x93e3ull,
        };
        return true;
    }
    return false;
}

/* ---- errors ---------------------------------------------------------------------------------- */

typedef struct errbuf {
    char *buf;
    size_t size;
} errbuf;

static int fail(errbuf *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(errbuf *e, const char *fmt, ...) {
    if (e->buf && e->size) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->buf, e->size, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* ---- random numbers: splitmix64 and Box-Muller (deterministic, platform-independent) ------------ */

typedef struct rng {
    uint64_t state;
} rng;

static uint64_t rng_next(rng *r) {
    uint64_t z = (r->state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in (0, 1). */
static double rng_uniform(rng *r) { return ((double)(rng_next(r) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

static double rng_normal(rng *r) {
    double u1 = rng_uniform(r), u2 = rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

/* ---- weights in Hugging Face layout -------------------------------------------------------------- */

/* One tensor under its HF name, row-major [rows][cols] (cols innermost), or a vector (rows = 1). */
typedef struct hf_tensor {
    char hf_name[96];
    char gguf_name[96];
    int32_t rows, cols;     /* a vector has rows = 0 */
    bool f16;               /* stored as F16 in both files */
    int permute_heads;      /* > 0: Llama q/k, permuted for the GGUF with this many heads */
    bool hf_minus_one;      /* a Gemma norm weight: data is the GGUF's w + 1, the HF file gets data - 1 */
    bool hf_3d;             /* the HF shape is [rows, 1, cols], the GGUF's [rows, cols] (a conv1d weight) */
    bool gguf_negexp;       /* the GGUF gets -exp(data) (Qwen3.5's A_log) */
    bool gguf_zero;         /* ... or zeros (the decay control) */
    int v_reorder;          /* Qwen3.5: 1 = rows from v_start on, 2 = columns, are value heads of v_head rows/columns,
                               reordered for the GGUF from grouped (by key head) to tiled order */
    int32_t v_start, v_head;
    bool gguf_only;         /* written by the converter, absent from the HF folder (Muse Glimmer's q/k norms) */
    int32_t n_stacked;      /* > 0: the first of this many experts' matrices (consecutive tensors) that the GGUF
                               stacks into one 3-D tensor under this gguf_name; -1: a later one of them */
    float *data;            /* [rows or 1][cols], already rounded to F16 when f16 */
} hf_tensor;

typedef struct model_weights {
    hf_tensor *t;
    int n, cap;
} model_weights;

static void weights_free(model_weights *w) {
    for (int i = 0; i < w->n; i++) free(w->t[i].data);
    free(w->t);
    memset(w, 0, sizeof *w);
}

/* Adds a tensor whose elements are mean + std * N(0,1), drawn from a stream seeded by (seed, index),
 * so each tensor's values do not depend on the others. */
static hf_tensor *add_tensor(model_weights *w, uint64_t seed, const char *hf_name, const char *gguf_name, int32_t rows,
                             int32_t cols, double mean, double std, errbuf *e) {
    if (w->n == w->cap) {
        int cap = w->cap ? 2 * w->cap : 32;
        hf_tensor *t = realloc(w->t, (size_t)cap * sizeof *t);
        if (!t) { fail(e, "out of memory"); return NULL; }
        w->t = t;
        w->cap = cap;
    }
    hf_tensor *t = &w->t[w->n];
    memset(t, 0, sizeof *t);
    snprintf(t->hf_name, sizeof t->hf_name, "%s", hf_name);
    snprintf(t->gguf_name, sizeof t->gguf_name, "%s", gguf_name);
    t->rows = rows;
    t->cols = cols;
    size_t count = (size_t)(rows ? rows : 1) * (size_t)cols;
    t->data = malloc(count * sizeof(float));
    if (!t->data) { fail(e, "out of memory for %s (%zu floats)", hf_name, count); return NULL; }
    rng r = {seed * 0x2545f4914f6cdd1dull + (uint64_t)w->n * 0x9e3779b97f4a7c15ull + 1};
    for (size_t i = 0; i < count; i++) t->data[i] = (float)(mean + std * rng_normal(&r));
    w->n++;
    return t;
}

static void round_to_f16(hf_tensor *t) {
    size_t count = (size_t)(t->rows ? t->rows : 1) * (size_t)t->cols;
    for (size_t i = 0; i < count; i++) t->data[i] = kite_fp16_to_f32(kite_f32_to_fp16(t->data[i]));
    t->f16 = true;
}

/* Qwen3.5's layers under their HF names (transformers' Qwen3_5ForCausalLM) and the converter's GGUF names. */
static int make_weights_qwen35(const oracle_spec *s, model_weights *w, errbuf *e) {
    const double dim = s->dim, embd_std = 2.5 / sqrt(dim);
    const int32_t q_rows = s->n_heads * s->head_dim, kv_rows = s->n_kv_heads * s->head_dim;
    const int32_t key_dim = s->dn_n_k * s->dn_head, value_dim = s->dn_n_v * s->dn_head, conv_dim = 2 * key_dim + value_dim;
    char hf[96], gg[96];
    hf_tensor *t;
    if (!add_tensor(w, s->seed, "model.embed_tokens.weight", "token_embd.weight", s->n_vocab, s->dim, 0.0, embd_std, e)) return -1;
    for (int32_t l = 0; l < s->n_layers; l++) {
#define ADD(hf_suffix, gguf_suffix, rows, cols, mean, std)                                                   \
        (snprintf(hf, sizeof hf, "model.layers.%d.%s", l, hf_suffix),                                        \
         snprintf(gg, sizeof gg, "blk.%d.%s", l, gguf_suffix),                                               \
         (t = add_tensor(w, s->seed, hf, gg, rows, cols, mean, std, e)))
#define V_ROWS(start, head) (t->v_reorder = 1, t->v_start = (start), t->v_head = (head))
        if (!ADD("input_layernorm.weight", "attn_norm.weight", 0, s->dim, 1.0, 0.1)) return -1;
        t->hf_minus_one = true;
        if ((l + 1) % s->full_attn_interval != 0) {
            if (!ADD("linear_attn.in_proj_qkv.weight", "attn_qkv.weight", conv_dim, s->dim, 0.0, 1.0 / sqrt(dim))) return -1;
            V_ROWS(2 * key_dim, s->dn_head);
            if (!ADD("linear_attn.in_proj_z.weight", "attn_gate.weight", value_dim, s->dim, 0.0, 1.0 / sqrt(dim))) return -1;
            V_ROWS(0, s->dn_head);
            /* b spreads over a few units so beta = sigmoid(b) ranges over (0, 1); zeroed for the control. */
            double beta_std = s->variant == ORACLE_VARIANT_BETA_IGNORED ? 0.0 : 2.0 / sqrt(dim);
            if (!ADD("linear_attn.in_proj_b.weight", "ssm_beta.weight", s->dn_n_v, s->dim, 0.0, beta_std)) return -1;
            V_ROWS(0, 1);
            if (!ADD("linear_attn.in_proj_a.weight", "ssm_alpha.weight", s->dn_n_v, s->dim, 0.0, 1.0 / sqrt(dim))) return -1;
            V_ROWS(0, 1);
            if (!ADD("linear_attn.conv1d.weight", "ssm_conv1d.weight", conv_dim, s->dn_kernel, 0.0, 0.6)) return -1;
            t->hf_3d = true;
            V_ROWS(2 * key_dim, s->dn_head);
            if (!ADD("linear_attn.dt_bias", "ssm_dt.bias", 0, s->dn_n_v, 0.0, 0.5)) return -1;
            t->v_reorder = 2, t->v_start = 0, t->v_head = 1;
            /* A = exp(A_log) near 0.2, so g = -A softplus(a + dt) keeps some memory over tens of tokens. */
            bool no_decay = s->variant == ORACLE_VARIANT_DECAY_IGNORED;
            if (!ADD("linear_attn.A_log", "ssm_a", 0, s->dn_n_v, -1.5, 0.5)) return -1;
            t->gguf_negexp = true;
            t->gguf_zero = no_decay;
            t->v_reorder = 2, t->v_start = 0, t->v_head = 1;
            if (!ADD("linear_attn.norm.weight", "ssm_norm.weight", 0, s->dn_head, 1.0, 0.1)) return -1;
            if (!ADD("linear_attn.out_proj.weight", "ssm_out.weight", s->dim, value_dim, 0.0, 1.5 * embd_std / sqrt(value_dim)))
                return -1;
            t->v_reorder = 2, t->v_start = 0, t->v_head = s->dn_head;
        } else {
            const double qk_std = 1.0 / sqrt(dim);
            if (!ADD("self_attn.q_proj.weight", "attn_q.weight", 2 * q_rows, s->dim, 0.0, qk_std)) return -1;
            if (s->variant == ORACLE_VARIANT_NO_OUTPUT_GATE) /* each head's rows: [q | gate] */
                for (int32_t h = 0; h < s->n_heads; h++)
                    memset(t->data + ((size_t)(2 * h + 1) * s->head_dim) * (size_t)s->dim, 0,
                           sizeof(float) * (size_t)s->head_dim * (size_t)s->dim);
            if (!ADD("self_attn.k_proj.weight", "attn_k.weight", kv_rows, s->dim, 0.0, qk_std)) return -1;
            if (!ADD("self_attn.v_proj.weight", "attn_v.weight", kv_rows, s->dim, 0.0, 1.0 / sqrt(dim))) return -1;
            if (!ADD("self_attn.q_norm.weight", "attn_q_norm.weight", 0, s->head_dim, 1.6, 0.2)) return -1;
            t->hf_minus_one = true;
            if (!ADD("self_attn.k_norm.weight", "attn_k_norm.weight", 0, s->head_dim, 1.6, 0.2)) return -1;
            t->hf_minus_one = true;
            if (!ADD("self_attn.o_proj.weight", "attn_output.weight", s->dim, q_rows, 0.0, 1.5 * embd_std / sqrt(q_rows))) return -1;
        }
        if (!ADD("post_attention_layernorm.weight", "post_attention_norm.weight", 0, s->dim, 1.0, 0.1)) return -1;
        t->hf_minus_one = true;
        if (!ADD("mlp.gate_proj.weight", "ffn_gate.weight", s->ffn_dim, s->dim, 0.0, 1.0 / sqrt(dim))) return -1;
        if (!ADD("mlp.up_proj.weight", "ffn_up.weight", s->ffn_dim, s->dim, 0.0, 1.0 / sqrt(dim))) return -1;
        if (!ADD("mlp.down_proj.weight", "ffn_down.weight", s->dim, s->ffn_dim, 0.0, 2.5 * embd_std / sqrt(s->ffn_dim))) return -1;
#undef V_ROWS
#undef ADD
    }
    if (!(t = add_tensor(w, s->seed, "model.norm.weight", "output_norm.weight", 0, s->dim, 1.0, 0.1, e))) return -1;
    t->hf_minus_one = true;
    /* The published checkpoints are Qwen3_5ForConditionalGeneration: the language model under model.language_model. */
    for (int i = 0; i < w->n; i++) {
        char name[96];
        snprintf(name, sizeof name, "model.language_model.%s", w->t[i].hf_name + strlen("model."));
        snprintf(w->t[i].hf_name, sizeof w->t[i].hf_name, "%s", name);
    }
    return 0;
}

/* convert_hf_to_gguf.py's _reorder_v_heads: value heads grouped by key head (k0: v0..v{r-1}, k1: ...) become
 * tiled (v0 of every key head, then v1, ...): new head j * n_k + kh holds old head kh * r + j. Rows (v_reorder
 * 1, from v_start) or columns (2) of v_head each. */
static float *reorder_v(const hf_tensor *t, int32_t n_k, int32_t n_v) {
    const int32_t rows = t->rows ? t->rows : 1, r = n_v / n_k;
    float *out = malloc(sizeof(float) * (size_t)rows * (size_t)t->cols);
    if (!out) return NULL;
    memcpy(out, t->data, sizeof(float) * (size_t)rows * (size_t)t->cols);
    for (int32_t kh = 0; kh < n_k; kh++)
        for (int32_t j = 0; j < r; j++) {
            const int32_t from = kh * r + j, to = j * n_k + kh;
            if (t->v_reorder == 1)
                memcpy(out + ((size_t)t->v_start + (size_t)to * t->v_head) * t->cols,
                       t->data + ((size_t)t->v_start + (size_t)from * t->v_head) * t->cols, sizeof(float) * (size_t)t->v_head * t->cols);
            else
                for (int32_t row = 0; row < rows; row++)
                    memcpy(out + (size_t)row * t->cols + t->v_start + (size_t)to * t->v_head,
                           t->data + (size_t)row * t->cols + t->v_start + (size_t)from * t->v_head, sizeof(float) * (size_t)t->v_head);
        }
    return out;
}

/* LFM2's layers and final norm, under Hugging Face's names (transformers' Lfm2 modeling) and llama.cpp's. The
 * conv's B, C and x come out of in_proj near unit size, so B * x and C * conv are too, and its taps (about 0.6
 * each, mean 0) differ enough per channel that their order matters. */
static int make_lfm2_layers(const oracle_spec *s, model_weights *w, errbuf *e) {
    const double dim = s->dim, ffn = s->ffn_dim, embd_std = 2.5 / sqrt(dim);
    const int32_t kv_rows = s->n_kv_heads * s->head_dim;
    char hf[96], gg[96];
    hf_tensor *t;
    for (int32_t l = 0; l < s->n_layers; l++) {
#define ADD(hf_suffix, gguf_suffix, rows, cols, mean, std)                                                   \
        (snprintf(hf, sizeof hf, "model.layers.%d.%s", l, hf_suffix),                                        \
         snprintf(gg, sizeof gg, "blk.%d.%s", l, gguf_suffix),                                               \
         (t = add_tensor(w, s->seed, hf, gg, rows, cols, mean, std, e)))
        if (!ADD("operator_norm.weight", "attn_norm.weight", 0, s->dim, 1.0, 0.1)) return -1;
        if (s->layer_kinds[l] == 'c') {
            if (!ADD("conv.in_proj.weight", "shortconv.in_proj.weight", 3 * s->dim, s->dim, 0.0, 1.0 / sqrt(dim))) return -1;
            if (!ADD("conv.conv.weight", "shortconv.conv.weight", s->dim, s->conv_taps, 0.0, 0.6)) return -1;
            t->hf_3d = true;
            if (!ADD("conv.out_proj.weight", "shortconv.out_proj.weight", s->dim, s->dim, 0.0, 1.5 * embd_std / sqrt(dim))) return -1;
        } else {
            if (!ADD("self_attn.q_proj.weight", "attn_q.weight", s->dim, s->dim, 0.0, 1.0 / sqrt(dim))) return -1;
            if (!ADD("self_attn.k_proj.weight", "attn_k.weight", kv_rows, s->dim, 0.0, 1.0 / sqrt(dim))) return -1;
            if (!ADD("self_attn.v_proj.weight", "attn_v.weight", kv_rows, s->dim, 0.0, 1.0 / sqrt(dim))) return -1;
            if (!ADD("self_attn.q_layernorm.weight", "attn_q_norm.weight", 0, s->head_dim, 1.6, 0.2)) return -1;
            if (!ADD("self_attn.k_layernorm.weight", "attn_k_norm.weight", 0, s->head_dim, 1.6, 0.2)) return -1;
            if (!ADD("self_attn.out_proj.weight", "attn_output.weight", s->dim, s->dim, 0.0, 1.5 * embd_std / sqrt(dim))) return -1;
        }
        if (!ADD("ffn_norm.weight", "ffn_norm.weight", 0, s->dim, 1.0, 0.1)) return -1;
        if (!ADD("feed_forward.w1.weight", "ffn_gate.weight", s->ffn_dim, s->dim, 0.0, 1.0 / sqrt(dim))) return -1;
        if (!ADD("feed_forward.w3.weight", "ffn_up.weight", s->ffn_dim, s->dim, 0.0, 1.0 / sqrt(dim))) return -1;
        if (!ADD("feed_forward.w2.weight", "ffn_down.weight", s->dim, s->ffn_dim, 0.0, 2.5 * embd_std / sqrt(ffn))) return -1;
#undef ADD
    }
    if (!add_tensor(w, s->seed, "model.embedding_norm.weight", "token_embd_norm.weight", 0, s->dim, 1.0, 0.1, e)) return -1;
    return 0;
}

/* Scales are chosen so that the next-token distribution has real entropy (logits with a standard
 * deviation near 2.5 over the vocabulary) and depends on the context as much as on the last token:
 * the attention and MLP outputs are about as large as the embedding in the residual stream, and
 * attention scores spread over a few units so RoPE angles, biases and norms change which positions win. */
/* Whether layer l is a sliding-window one (period - 1 local layers, then a global one). */
static bool spec_local(const oracle_spec *s, int32_t l) {
    return s->sliding_window > 0 && s->swa_period > 0 && l % s->swa_period < s->swa_period - 1;
}
static int32_t spec_head_dim(const oracle_spec *s, int32_t l) {
    return spec_local(s, l) && s->head_dim_swa > 0 ? s->head_dim_swa : s->head_dim;
}
static int32_t spec_kv_heads(const oracle_spec *s, int32_t l) {
    return spec_local(s, l) && s->n_kv_heads_swa > 0 ? s->n_kv_heads_swa : s->n_kv_heads;
}

static int make_weights(const oracle_spec *s, model_weights *w, errbuf *e) {
    const double dim = s->dim, ffn = s->ffn_dim;
    const double embd_std = 2.5 / sqrt(dim);
    if (strcmp(s->arch, "qwen35") == 0) return make_weights_qwen35(s, w, e);
    const bool glimmer = strcmp(s->arch, "muse-glimmer") == 0, gemma4 = strcmp(s->arch, "gemma4") == 0;
    /* q/k permuted for interleaved RoPE in the GGUF (Muse Glimmer's converter un-permutes them alike) */
    const bool llama = strcmp(s->arch, "llama") == 0 || glimmer;
    const bool gemma = strcmp(s->arch, "gemma3") == 0; /* norms stored as w + 1 in the GGUF, w in the HF folder */
    const bool post_norms = gemma || glimmer || gemma4;
    char hf[96], gg[96];
    hf_tensor *t;
    if (!(t = add_tensor(w, s->seed, "model.embed_tokens.weight", "token_embd.weight", s->n_vocab, s->dim, 0.0, embd_std, e)))
        return -1;
    if (s->f16_embeddings) round_to_f16(t);
    if (s->layer_kinds) return make_lfm2_layers(s, w, e);
    for (int32_t l = 0; l < s->n_layers; l++) {
        const int32_t hd = spec_head_dim(s, l), q_rows = s->n_heads * hd, kv_rows = spec_kv_heads(s, l) * hd;
        const double qw = q_rows;
#define ADD(hf_suffix, gguf_suffix, rows, cols, mean, std)                                                   \
        (snprintf(hf, sizeof hf, "model.layers.%d.%s", l, hf_suffix),                                        \
         snprintf(gg, sizeof gg, "blk.%d.%s", l, gguf_suffix),                                               \
         (t = add_tensor(w, s->seed, hf, gg, rows, cols, mean, std, e)))
        if (!ADD("input_layernorm.weight", "attn_norm.weight", 0, s->dim, 1.0, 0.1)) return -1;
        t->hf_minus_one = gemma || glimmer;
        /* Raw q/k have unit-ish variance per component; with QK-norm the norm weights (about 1.6)
         * set the scale instead, so skipping the norm changes the attention temperature. */
        double qk_std = (s->qk_norm ? 1.0 : 1.5) / sqrt(dim);
        if (!ADD("self_attn.q_proj.weight", "attn_q.weight", q_rows, s->dim, 0.0, qk_std)) return -1;
        if (llama) t->permute_heads = s->n_heads;
        if (!ADD("self_attn.k_proj.weight", "attn_k.weight", kv_rows, s->dim, 0.0, qk_std)) return -1;
        if (llama) t->permute_heads = s->n_kv_heads;
        if (!(gemma4 && s->k_eq_v && !spec_local(s, l)) &&
            !ADD("self_attn.v_proj.weight", "attn_v.weight", kv_rows, s->dim, 0.0, 1.0 / sqrt(dim)))
            return -1;
        if (glimmer) { /* the output gate's logits spread over a couple of units: the gate varies per element */
            double zero = s->variant == ORACLE_VARIANT_NO_ATTN_GATE ? 0.0 : 1.0;
            if (!ADD("self_attn.gate_proj.weight", "attn_gate.weight", q_rows, s->dim, 0.0, zero * 2.0 / sqrt(dim))) return -1;
        }
        if (s->qkv_bias) {
            double zero = s->variant == ORACLE_VARIANT_ZERO_QKV_BIAS ? 0.0 : 1.0;
            if (!ADD("self_attn.q_proj.bias", "attn_q.bias", 0, q_rows, 0.0, 0.6 * zero)) return -1;
            if (!ADD("self_attn.k_proj.bias", "attn_k.bias", 0, kv_rows, 0.0, 0.6 * zero)) return -1;
            if (!ADD("self_attn.v_proj.bias", "attn_v.bias", 0, kv_rows, 0.0, 0.4 * zero)) return -1;
        }
        if (glimmer) {
            /* Synthesized by the converter from qk_scale_factor: q_norm = the factor, k_norm = 1. */
            if (!ADD("self_attn.q_norm.weight", "attn_q_norm.weight", 0, hd, s->qk_scale, 0.0)) return -1;
            t->gguf_only = true;
            if (!ADD("self_attn.k_norm.weight", "attn_k_norm.weight", 0, hd, 1.0, 0.0)) return -1;
            t->gguf_only = true;
        } else if (s->qk_norm) {
            bool unit = s->variant == ORACLE_VARIANT_UNIT_QK_NORM;
            /* Gemma 4 scores q.k unscaled: weights near hd^-1/4 keep the scores within a few units. */
            double mean = gemma4 ? pow(hd, -0.25) : 1.6;
            if (!ADD("self_attn.q_norm.weight", "attn_q_norm.weight", 0, hd, unit ? 1.0 : mean, unit ? 0.0 : mean / 8)) return -1;
            t->hf_minus_one = gemma;
            if (!ADD("self_attn.k_norm.weight", "attn_k_norm.weight", 0, hd, unit ? 1.0 : mean, unit ? 0.0 : mean / 8)) return -1;
            t->hf_minus_one = gemma;
        }
        if (!ADD("self_attn.o_proj.weight", "attn_output.weight", s->dim, q_rows, 0.0, 1.5 * embd_std / sqrt(qw))) return -1;
        if (post_norms) {
            /* Gemma's norms of the attention output, the FFN input and the FFN output. */
            if (!ADD("post_attention_layernorm.weight", "post_attention_norm.weight", 0, s->dim, 1.0, 0.1)) return -1;
            t->hf_minus_one = !gemma4;
            if (!ADD("pre_feedforward_layernorm.weight", "ffn_norm.weight", 0, s->dim, 1.0, 0.1)) return -1;
            t->hf_minus_one = !gemma4;
            if (!ADD("post_feedforward_layernorm.weight", "post_ffw_norm.weight", 0, s->dim, 1.0, 0.1)) return -1;
            t->hf_minus_one = !gemma4;
        } else if (!ADD("post_attention_layernorm.weight", "ffn_norm.weight", 0, s->dim, 1.0, 0.1)) {
            return -1;
        }
        if (s->n_experts > 0) {
            /* The router's logits spread over a few units so the top-2 choice is clear and its weights differ
             * from an even split; each expert is as large as a dense FFN of its width. */
            if (!ADD("mlp.gate.weight", "ffn_gate_inp.weight", s->n_experts, s->dim, 0.0, 2.0 / sqrt(dim))) return -1;
            static const char *const hf_kind[3] = {"gate_proj", "up_proj", "down_proj"};
            static const char *const gguf_kind[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
            const double fx = s->expert_ffn_dim;
            for (int k = 0; k < 3; k++)
                for (int32_t x = 0; x < s->n_experts; x++) {
                    char hf_suffix[64], gguf_suffix[64];
                    snprintf(hf_suffix, sizeof hf_suffix, "mlp.experts.%d.%s.weight", x, hf_kind[k]);
                    snprintf(gguf_suffix, sizeof gguf_suffix, "%s.weight", gguf_kind[k]);
                    int32_t rows = k == 2 ? s->dim : s->expert_ffn_dim, cols = k == 2 ? s->expert_ffn_dim : s->dim;
                    double std = k == 2 ? 2.5 * embd_std / sqrt(fx) : 1.0 / sqrt(dim);
                    if (!ADD(hf_suffix, gguf_suffix, rows, cols, 0.0, std)) return -1;
                    t->n_stacked = x == 0 ? s->n_experts : -1;
                }
        } else {
            if (!ADD("mlp.gate_proj.weight", "ffn_gate.weight", s->ffn_dim, s->dim, 0.0, 1.0 / sqrt(dim))) return -1;
            if (!ADD("mlp.up_proj.weight", "ffn_up.weight", s->ffn_dim, s->dim, 0.0, 1.0 / sqrt(dim))) return -1;
            if (!ADD("mlp.down_proj.weight", "ffn_down.weight", s->dim, s->ffn_dim, 0.0, 2.5 * embd_std / sqrt(ffn))) return -1;
        }
        if (gemma4 && s->layer_scalar) {
            /* one scalar per layer, far from 1 (3, 0.25, 3, ...) so the residual mix changes visibly: the stream
             * entering the global layer 2 is small, so that layer weighs much in the logits */
            if (!ADD("layer_scalar", "layer_output_scale.weight", 0, 1, 0.0, 0.0)) return -1;
            t->data[0] = l % 2 ? 0.25f : 3.0f;
        }
#undef ADD
    }
    if (!(t = add_tensor(w, s->seed, "model.norm.weight", "output_norm.weight", 0, s->dim, 1.0, 0.1, e))) return -1;
    t->hf_minus_one = gemma; /* Muse Glimmer's converter shifts only the layer norms */
    if (!s->tied_embeddings && !add_tensor(w, s->seed, "lm_head.weight", "output.weight", s->n_vocab, s->dim, 0.0, embd_std, e))
        return -1;
    return 0;
}

/* convert_hf_to_gguf.py's LlamaModel.permute: within each head, HF rows [half0 | half1] become
 * interleaved pairs, so GGUF row h*hd + 2i + s holds HF row h*hd + s*hd/2 + i. */
static float *permute_rows(const hf_tensor *t, int32_t n_heads) {
    float *out = malloc((size_t)t->rows * (size_t)t->cols * sizeof(float));
    if (!out) return NULL;
    int32_t hd = t->rows / n_heads, half = hd / 2;
    for (int32_t h = 0; h < n_heads; h++)
        for (int32_t i = 0; i < half; i++)
            for (int32_t s = 0; s < 2; s++)
                memcpy(out + ((size_t)h * hd + 2 * i + s) * t->cols, t->data + ((size_t)h * hd + s * half + i) * t->cols,
                       (size_t)t->cols * sizeof(float));
    return out;
}

/* convert_hf_to_gguf.py's Llama-3 rope factors: per rotated pair, the divisor of its frequency
 * (1 for short wavelengths, factor for long ones, a smooth blend between). The base frequencies are
 * float32 as in the converter (torch float32 arange and power). */
static void llama3_rope_factors(const oracle_spec *s, float *factors) {
    int32_t half = s->head_dim / 2;
    double low_wavelen = s->rope_orig_ctx / (double)s->rope_low_freq_factor;
    double high_wavelen = s->rope_orig_ctx / (double)s->rope_high_freq_factor;
    for (int32_t i = 0; i < half; i++) {
        float freq = 1.0f / powf(s->rope_theta, (float)(2 * i) / (float)s->head_dim);
        double wavelen = 2.0 * M_PI / (double)freq;
        if (wavelen < high_wavelen) {
            factors[i] = 1.0f;
        } else if (wavelen > low_wavelen) {
            factors[i] = s->rope_factor;
        } else {
            double smooth = (s->rope_orig_ctx / wavelen - s->rope_low_freq_factor) /
                            (double)(s->rope_high_freq_factor - s->rope_low_freq_factor);
            factors[i] = (float)(1.0 / ((1.0 - smooth) / s->rope_factor + smooth));
        }
    }
}

/* ---- tokenizer ------------------------------------------------------------------------------- */

struct oracle_vocab {
    char **tokens;    /* [n_vocab] */
    int32_t *types;   /* [n_vocab] */
    char **merges;    /* [n_merges] "a b" */
    size_t n_merges;
    int32_t n_vocab;
    int32_t bos, eos;
};
typedef struct oracle_vocab vocab;

static void vocab_free(vocab *v) {
    if (v->tokens)
        for (int32_t i = 0; i < v->n_vocab; i++) free(v->tokens[i]);
    for (size_t i = 0; i < v->n_merges; i++) free(v->merges[i]);
    free(v->tokens);
    free(v->types);
    free(v->merges);
    memset(v, 0, sizeof *v);
}

static bool looks_special(const char *s) {
    size_t n = strlen(s);
    return n >= 4 && strncmp(s, "<|", 2) == 0 && strcmp(s + n - 2, "|>") == 0;
}

static int set_token(vocab *v, int64_t id, const char *text, int32_t type, const char *path, errbuf *e) {
    if (id < 0 || id >= v->n_vocab) return fail(e, "%s: token id %lld is outside the model's %d rows", path, (long long)id, v->n_vocab);
    if (v->tokens[id]) {
        if (strcmp(v->tokens[id], text) == 0) return 0; /* an added token that is also in the vocab */
        return fail(e, "%s: id %lld names both '%s' and '%s'", path, (long long)id, v->tokens[id], text);
    }
    if (!(v->tokens[id] = strdup(text))) return fail(e, "out of memory");
    v->types[id] = type;
    return 0;
}

static int load_vocab(const oracle_spec *s, const char *tokenizer_dir, vocab *v, errbuf *e) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", tokenizer_dir);
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root) return fail(e, "%s: %s (line %d)", path, jerr.text, jerr.line);
    int rc = -1;
    v->n_vocab = s->n_vocab;
    v->bos = v->eos = -1;
    v->tokens = calloc((size_t)v->n_vocab, sizeof *v->tokens);
    v->types = calloc((size_t)v->n_vocab, sizeof *v->types);
    json_t *model = json_object_get(root, "model");
    json_t *tokens = json_object_get(model, "vocab");
    json_t *merges = json_object_get(model, "merges");
    json_t *added = json_object_get(root, "added_tokens");
    if (!v->tokens || !v->types) { fail(e, "out of memory"); goto done; }
    if (!json_is_object(tokens) || !json_is_array(merges) || !json_is_array(added)) {
        fail(e, "%s: expected model.vocab (object), model.merges and added_tokens (arrays)", path);
        goto done;
    }
    const char *key;
    json_t *val;
    json_object_foreach(tokens, key, val) {
        if (!json_is_integer(val)) { fail(e, "%s: vocab entry '%s' is not an integer", path, key); goto done; }
        if (set_token(v, json_integer_value(val), key, TOKEN_NORMAL, path, e)) goto done;
    }
    size_t i;
    json_array_foreach(added, i, val) {
        json_t *id = json_object_get(val, "id"), *content = json_object_get(val, "content");
        if (!json_is_integer(id) || !json_is_string(content)) { fail(e, "%s: added_tokens[%zu] lacks id/content", path, i); goto done; }
        const char *text = json_string_value(content);
        int32_t type = json_is_true(json_object_get(val, "special")) || looks_special(text) ? TOKEN_CONTROL : TOKEN_USER_DEFINED;
        /* Added tokens override the plain vocab entry's type when both exist. */
        int64_t tid = json_integer_value(id);
        if (tid >= 0 && tid < v->n_vocab && v->tokens[tid] && strcmp(v->tokens[tid], text) == 0) {
            v->types[tid] = type;
            continue;
        }
        if (set_token(v, tid, text, type, path, e)) goto done;
        if (strcmp(text, s->bos_text) == 0) v->bos = (int32_t)tid;
        if (strcmp(text, s->eos_text) == 0) v->eos = (int32_t)tid;
    }
    if (v->bos < 0 || v->eos < 0) { fail(e, "%s: BOS '%s' or EOS '%s' not among the added tokens", path, s->bos_text, s->eos_text); goto done; }
    for (int32_t id = 0; id < v->n_vocab; id++) {
        if (v->tokens[id]) continue;
        char pad[32];
        snprintf(pad, sizeof pad, "[PAD%d]", id);
        if (set_token(v, id, pad, TOKEN_UNUSED, path, e)) goto done;
    }
    v->n_merges = json_array_size(merges);
    v->merges = calloc(v->n_merges ? v->n_merges : 1, sizeof *v->merges);
    if (!v->merges) { fail(e, "out of memory"); goto done; }
    json_array_foreach(merges, i, val) {
        /* Llama-3 stores "a b"; Qwen stores ["a", "b"]. GGUF wants "a b". */
        if (json_is_string(val)) {
            v->merges[i] = strdup(json_string_value(val));
        } else if (json_is_array(val) && json_array_size(val) == 2 && json_is_string(json_array_get(val, 0)) &&
                   json_is_string(json_array_get(val, 1))) {
            const char *a = json_string_value(json_array_get(val, 0)), *b = json_string_value(json_array_get(val, 1));
            size_t n = strlen(a) + strlen(b) + 2;
            if ((v->merges[i] = malloc(n))) snprintf(v->merges[i], n, "%s %s", a, b);
        } else {
            fail(e, "%s: merges[%zu] is neither a string nor a pair of strings", path, i);
            goto done;
        }
        if (!v->merges[i]) { fail(e, "out of memory"); goto done; }
    }
    rc = 0;
done:
    json_decref(root);
    if (rc) vocab_free(v);
    return rc;
}

/* ---- GGUF ------------------------------------------------------------------------------------- */

static int write_gguf(const oracle_spec *s, const model_weights *w, const vocab *v, const char *path, errbuf *e) {
    kite_gguf_writer *g = kite_gguf_writer_new();
    if (!g) return fail(e, "out of memory");
    char key[128];
#define KEY(suffix) (snprintf(key, sizeof key, "%s.%s", s->arch, suffix), key)
    kite_gguf_w_str(g, "general.architecture", s->arch);
    kite_gguf_w_str(g, "general.name", "kite oracle random model");
    kite_gguf_w_u32(g, "general.file_type", s->f16_embeddings ? 1 : 0); /* ALL_F32 / MOSTLY_F16 */
    kite_gguf_w_u32(g, KEY("context_length"), (uint32_t)s->n_ctx_train);
    kite_gguf_w_u32(g, KEY("embedding_length"), (uint32_t)s->dim);
    kite_gguf_w_u32(g, KEY("block_count"), (uint32_t)s->n_layers);
    kite_gguf_w_u32(g, KEY("feed_forward_length"), (uint32_t)s->ffn_dim);
    kite_gguf_w_u32(g, KEY("attention.head_count"), (uint32_t)s->n_heads);
    if (s->layer_kinds) { /* conversion/lfm2.py: 0 KV heads marks a conv layer */
        int32_t kv[64];
        for (int32_t l = 0; l < s->n_layers && l < 64; l++) kv[l] = s->layer_kinds[l] == 'c' ? 0 : s->n_kv_heads;
        kite_gguf_w_arr_i32(g, KEY("attention.head_count_kv"), kv, (uint64_t)s->n_layers);
        kite_gguf_w_u32(g, KEY("shortconv.l_cache"), (uint32_t)s->conv_taps);
        kite_gguf_w_u32(g, KEY("vocab_size"), (uint32_t)s->n_vocab);
    } else if (s->n_kv_heads_swa > 0) { /* Gemma4Model: one count per layer */
        int32_t counts[64];
        for (int32_t l = 0; l < s->n_layers && l < 64; l++) counts[l] = spec_kv_heads(s, l);
        kite_gguf_w_arr_i32(g, KEY("attention.head_count_kv"), counts, (uint64_t)s->n_layers);
    } else {
        kite_gguf_w_u32(g, KEY("attention.head_count_kv"), (uint32_t)s->n_kv_heads);
    }
    kite_gguf_w_f32(g, KEY("rope.freq_base"), s->rope_theta);
    kite_gguf_w_f32(g, KEY("attention.layer_norm_rms_epsilon"), s->rms_eps);
    if (s->explicit_head_dim) {
        kite_gguf_w_u32(g, KEY("attention.key_length"), (uint32_t)s->head_dim);
        kite_gguf_w_u32(g, KEY("attention.value_length"), (uint32_t)s->head_dim);
    }
    if (strcmp(s->arch, "llama") == 0) {
        kite_gguf_w_u32(g, KEY("rope.dimension_count"), (uint32_t)s->head_dim);
        kite_gguf_w_u32(g, KEY("vocab_size"), (uint32_t)s->n_vocab);
    }
    if (strcmp(s->arch, "gemma3") == 0) {
        /* As Gemma3Model.set_gguf_parameters: the window (its pattern is llama.cpp's default 6 unless given,
         * so a model of another period must say it) and linear scaling of the global layers. */
        uint32_t window = s->variant == ORACLE_VARIANT_WIDE_WINDOW ? 4096u : (uint32_t)s->sliding_window;
        if (window) kite_gguf_w_u32(g, KEY("attention.sliding_window"), window);
        if (s->swa_period != 6) kite_gguf_w_u32(g, KEY("attention.sliding_window_pattern"), (uint32_t)s->swa_period);
        if (s->rope_linear_factor > 0.0f) {
            kite_gguf_w_str(g, KEY("rope.scaling.type"), "linear");
            kite_gguf_w_f32(g, KEY("rope.scaling.factor"), s->rope_linear_factor);
        }
    }
    if (strcmp(s->arch, "qwen35") == 0) { /* as Qwen3NextModel / _Qwen35MRopeMixin.set_gguf_parameters */
        const int32_t half = s->n_rot / 2, sections[4] = {half - 2 * (half / 3), half / 3, half / 3, 0};
        kite_gguf_w_u32(g, KEY("rope.dimension_count"), (uint32_t)s->n_rot);
        kite_gguf_w_arr_i32(g, KEY("rope.dimension_sections"), sections, 4);
        kite_gguf_w_u32(g, KEY("ssm.conv_kernel"), (uint32_t)s->dn_kernel);
        kite_gguf_w_u32(g, KEY("ssm.state_size"), (uint32_t)s->dn_head);
        kite_gguf_w_u32(g, KEY("ssm.group_count"), (uint32_t)s->dn_n_k);
        kite_gguf_w_u32(g, KEY("ssm.time_step_rank"), (uint32_t)s->dn_n_v);
        kite_gguf_w_u32(g, KEY("ssm.inner_size"), (uint32_t)(s->dn_n_v * s->dn_head));
        kite_gguf_w_u32(g, KEY("full_attention_interval"), (uint32_t)s->full_attn_interval);
    }
    if (strcmp(s->arch, "muse-glimmer") == 0 || strcmp(s->arch, "gemma4") == 0) {
        /* MuseGlimmerModel / Gemma4Model.set_gguf_parameters: the window, the per-layer pattern, the soft-cap */
        uint32_t window = s->variant == ORACLE_VARIANT_WIDE_WINDOW ? 4096u : (uint32_t)s->sliding_window;
        kite_gguf_w_u32(g, KEY("attention.sliding_window"), window);
        uint8_t local[64];
        for (int32_t l = 0; l < s->n_layers && l < 64; l++) local[l] = spec_local(s, l);
        kite_gguf_w_arr_bool(g, KEY("attention.sliding_window_pattern"), local, (uint64_t)s->n_layers);
        if (s->softcap > 0.0f && s->variant != ORACLE_VARIANT_NO_SOFTCAP) kite_gguf_w_f32(g, KEY("final_logit_softcapping"), s->softcap);
        if (s->logit_scale > 0.0f) kite_gguf_w_f32(g, KEY("logit_scale"), s->logit_scale);
    }
    if (strcmp(s->arch, "gemma4") == 0) {
        kite_gguf_w_u32(g, KEY("attention.shared_kv_layers"), 0);
        kite_gguf_w_u32(g, KEY("embedding_length_per_layer_input"), 0);
        kite_gguf_w_u32(g, KEY("attention.key_length_swa"), (uint32_t)s->head_dim_swa);
        kite_gguf_w_u32(g, KEY("attention.value_length_swa"), (uint32_t)s->head_dim_swa);
        kite_gguf_w_u32(g, KEY("rope.dimension_count"), (uint32_t)s->head_dim);
        kite_gguf_w_u32(g, KEY("rope.dimension_count_swa"), (uint32_t)s->head_dim_swa);
        kite_gguf_w_f32(g, KEY("rope.freq_base_swa"), s->rope_theta_swa);
    }
    if (s->n_experts > 0) { /* as Qwen2MoeModel.set_gguf_parameters (the counts from TextModel's) */
        kite_gguf_w_u32(g, KEY("expert_count"), (uint32_t)s->n_experts);
        kite_gguf_w_u32(g, KEY("expert_used_count"), (uint32_t)s->n_experts_used);
        kite_gguf_w_u32(g, KEY("expert_feed_forward_length"), (uint32_t)s->expert_ffn_dim);
    }
#undef KEY
    kite_gguf_w_str(g, "tokenizer.ggml.model", "gpt2");
    kite_gguf_w_str(g, "tokenizer.ggml.pre", s->tokenizer_pre);
    kite_gguf_w_arr_str(g, "tokenizer.ggml.tokens", (const char *const *)v->tokens, (uint64_t)v->n_vocab);
    kite_gguf_w_arr_i32(g, "tokenizer.ggml.token_type", v->types, (uint64_t)v->n_vocab);
    kite_gguf_w_arr_str(g, "tokenizer.ggml.merges", (const char *const *)v->merges, v->n_merges);
    kite_gguf_w_u32(g, "tokenizer.ggml.bos_token_id", (uint32_t)v->bos);
    kite_gguf_w_u32(g, "tokenizer.ggml.eos_token_id", (uint32_t)v->eos);
    kite_gguf_w_bool(g, "tokenizer.ggml.add_bos_token", s->add_bos);
    kite_gguf_w_bool(g, "tokenizer.ggml.add_eos_token", false);

    int rc = 0;
    for (int i = 0; i < w->n && rc == 0; i++) {
        const hf_tensor *t = &w->t[i];
        if (t->n_stacked < 0) continue; /* written with the group's first */
        if (s->variant == ORACLE_VARIANT_NO_LAYER_SCALAR && strstr(t->gguf_name, "layer_output_scale")) continue;
        int64_t ne[3] = {t->cols, t->rows, t->n_stacked > 0 ? t->n_stacked : 1};
        uint32_t n_dims = t->n_stacked > 0 ? 3 : t->rows ? 2 : 1;
        size_t count = (size_t)(t->rows ? t->rows : 1) * (size_t)t->cols;
        float *permuted = NULL;
        const float *src = t->data;
        if (t->n_stacked > 0) { /* torch.stack of the experts' matrices: expert x's rows after expert x-1's */
            if (!(permuted = malloc(count * (size_t)t->n_stacked * sizeof(float)))) { rc = fail(e, "out of memory"); break; }
            for (int32_t x = 0; x < t->n_stacked; x++) memcpy(permuted + count * (size_t)x, w->t[i + x].data, count * sizeof(float));
            src = permuted;
            count *= (size_t)t->n_stacked;
        } else if (t->permute_heads > 0) {
            if (!(permuted = permute_rows(t, t->permute_heads))) { rc = fail(e, "out of memory"); break; }
            src = permuted;
        } else if (t->v_reorder && s->dn_n_v != s->dn_n_k) {
            if (!(permuted = reorder_v(t, s->dn_n_k, s->dn_n_v))) { rc = fail(e, "out of memory"); break; }
            src = permuted;
        } else if (t->hf_3d && s->variant == ORACLE_VARIANT_CONV_REVERSED) {
            if (!(permuted = malloc(count * sizeof(float)))) { rc = fail(e, "out of memory"); break; }
            for (int32_t r = 0; r < t->rows; r++)
                for (int32_t k = 0; k < t->cols; k++) permuted[(size_t)r * t->cols + k] = t->data[(size_t)r * t->cols + t->cols - 1 - k];
            src = permuted;
        }
        if (t->gguf_negexp) {
            float *neg = malloc(count * sizeof *neg);
            if (!neg) { free(permuted); rc = fail(e, "out of memory"); break; }
            for (size_t k = 0; k < count; k++) neg[k] = t->gguf_zero ? 0.0f : -expf(src[k]);
            free(permuted);
            src = permuted = neg;
        }
        const char *gguf_name = t->gguf_name;
        if (t->f16) {
            uint16_t *h = malloc(count * sizeof *h);
            if (!h) { free(permuted); rc = fail(e, "out of memory"); break; }
            for (size_t k = 0; k < count; k++) h[k] = kite_f32_to_fp16(src[k]);
            kite_gguf_w_tensor(g, gguf_name, KITE_TYPE_F16, n_dims, ne, h, count * sizeof *h);
            free(h);
        } else {
            kite_gguf_w_tensor(g, gguf_name, KITE_TYPE_F32, n_dims, ne, src, count * sizeof(float));
        }
        free(permuted);
    }
    if (rc == 0 && s->llama3_rope && s->variant != ORACLE_VARIANT_NO_ROPE_SCALING) {
        float factors[512];
        int64_t ne[1] = {s->head_dim / 2};
        if (s->head_dim / 2 > 512) rc = fail(e, "head_dim %d too large", s->head_dim);
        else {
            llama3_rope_factors(s, factors);
            kite_gguf_w_tensor(g, "rope_freqs.weight", KITE_TYPE_F32, 1, ne, factors, (uint64_t)ne[0] * sizeof(float));
        }
    }
    if (rc == 0 && s->partial_rotary_global > 0.0f && s->variant != ORACLE_VARIANT_NO_PROPORTIONAL_ROPE) {
        /* Gemma4Model.generate_extra_tensors: per pair of a global head, 1 for the rotated ones, 1e30 for the rest */
        float factors[512];
        int32_t half = s->head_dim / 2, rotated = (int32_t)(s->head_dim * s->partial_rotary_global / 2);
        int64_t ne[1] = {half};
        for (int32_t i = 0; i < half && i < 512; i++) factors[i] = i < rotated ? 1.0f : 1e30f;
        kite_gguf_w_tensor(g, "rope_freqs.weight", KITE_TYPE_F32, 1, ne, factors, (uint64_t)half * sizeof(float));
    }
    if (rc == 0) {
        kite_error ke = {0};
        if (kite_gguf_writer_save(g, path, &ke)) rc = fail(e, "%s: %s", path, ke.msg);
    }
    kite_gguf_writer_free(g);
    return rc;
}

/* ---- Hugging Face folder ---------------------------------------------------------------------- */

static int copy_file(const char *from, const char *to, bool optional, errbuf *e) {
    FILE *in = fopen(from, "rb");
    if (!in) return optional ? 0 : fail(e, "cannot open %s: %s", from, strerror(errno));
    FILE *out = fopen(to, "wb");
    if (!out) {
        fclose(in);
        return fail(e, "cannot create %s: %s", to, strerror(errno));
    }
    char buf[1 << 16];
    size_t n;
    bool ok = true;
    while (ok && (n = fread(buf, 1, sizeof buf, in)) > 0) ok = fwrite(buf, 1, n, out) == n;
    if (ferror(in)) ok = false;
    fclose(in);
    if (fclose(out) != 0) ok = false;
    return ok ? 0 : fail(e, "copying %s to %s failed", from, to);
}

static int write_config(const oracle_spec *s, const vocab *v, const char *dir, errbuf *e) {
    json_t *c = json_object();
    json_object_set_new(c, "architectures", json_pack("[s]", s->hf_class));
    json_object_set_new(c, "model_type", json_string(s->hf_model_type));
    json_object_set_new(c, "hidden_size", json_integer(s->dim));
    json_object_set_new(c, "intermediate_size", json_integer(s->hf_ffn_dim ? s->hf_ffn_dim : s->ffn_dim));
    json_object_set_new(c, "num_hidden_layers", json_integer(s->n_layers));
    json_object_set_new(c, "num_attention_heads", json_integer(s->n_heads));
    json_object_set_new(c, "num_key_value_heads", json_integer(s->n_kv_heads));
    if (s->explicit_head_dim) json_object_set_new(c, "head_dim", json_integer(s->head_dim));
    json_object_set_new(c, "vocab_size", json_integer(s->n_vocab));
    json_object_set_new(c, "max_position_embeddings", json_integer(s->n_ctx_train));
    /* float -> double is exact, and jansson prints round-trip digits, so the reader gets the same float. */
    json_object_set_new(c, "rms_norm_eps", json_real((double)s->rms_eps));
    json_object_set_new(c, "rope_theta", json_real((double)s->rope_theta));
    if (s->rope_linear_factor > 0.0f)
        json_object_set_new(c, "rope_scaling", json_pack("{s:s, s:f}", "rope_type", "linear", "factor", (double)s->rope_linear_factor));
    else if (s->llama3_rope && s->variant != ORACLE_VARIANT_NO_ROPE_SCALING)
        json_object_set_new(c, "rope_scaling",
                            json_pack("{s:s, s:f, s:f, s:f, s:i}", "rope_type", "llama3", "factor", (double)s->rope_factor,
                                      "low_freq_factor", (double)s->rope_low_freq_factor, "high_freq_factor",
                                      (double)s->rope_high_freq_factor, "original_max_position_embeddings",
                                      s->rope_orig_ctx));
    else
        json_object_set_new(c, "rope_scaling", json_null());
    json_object_set_new(c, "tie_word_embeddings", json_boolean(s->tied_embeddings));
    json_object_set_new(c, "bos_token_id", json_integer(v->bos));
    json_object_set_new(c, "eos_token_id", json_integer(v->eos));
    if (strcmp(s->arch, "gemma3") == 0) {
        /* transformers' Gemma3TextConfig keys; query_pre_attn_scalar = head_dim, as llama.cpp assumes. */
        json_object_set_new(c, "hidden_activation", json_string("gelu_pytorch_tanh"));
        json_object_set_new(c, "query_pre_attn_scalar", json_integer(s->head_dim));
        json_object_set_new(c, "sliding_window", json_integer(s->sliding_window));
        json_object_set_new(c, "sliding_window_pattern", json_integer(s->swa_period));
        json_object_set_new(c, "rope_local_base_freq", json_real(10000.0));
        json_object_set_new(c, "final_logit_softcapping", json_null());
        json_object_set_new(c, "attn_logit_softcapping", json_null());
    } else if (strcmp(s->arch, "gemma4") == 0) {
        /* transformers' Gemma4TextConfig keys, as the 31B's config.json spells them */
        json_object_set_new(c, "hidden_activation", json_string("gelu_pytorch_tanh"));
        json_object_set_new(c, "sliding_window", json_integer(s->sliding_window));
        json_object_set_new(c, "global_head_dim", json_integer(s->head_dim));
        json_object_set_new(c, "head_dim", json_integer(s->head_dim_swa));
        json_object_set_new(c, "num_key_value_heads", json_integer(s->n_kv_heads_swa));
        json_object_set_new(c, "num_global_key_value_heads", json_integer(s->n_kv_heads));
        json_object_set_new(c, "attention_k_eq_v", json_boolean(s->k_eq_v));
        json_object_set_new(c, "final_logit_softcapping", json_real((double)s->softcap));
        json_object_set_new(c, "num_kv_shared_layers", json_integer(0));
        json_object_set_new(c, "hidden_size_per_layer_input", json_integer(0));
        json_object_set_new(c, "enable_moe_block", json_false());
        json_object_set_new(c, "use_double_wide_mlp", json_false());
        json_object_del(c, "rope_theta");
        json_object_del(c, "rope_scaling");
        json_object_set_new(c, "rope_parameters",
                            json_pack("{s:{s:s, s:f}, s:{s:s, s:f, s:f}}", "sliding_attention", "rope_type", "default", "rope_theta",
                                      (double)s->rope_theta_swa, "full_attention", "rope_type", "proportional",
                                      "partial_rotary_factor", (double)s->partial_rotary_global, "rope_theta", (double)s->rope_theta));
    } else if (strcmp(s->arch, "muse-glimmer") == 0) {
        json_object_set_new(c, "hidden_act", json_string("silu"));
        json_object_set_new(c, "sliding_window", json_integer(s->sliding_window));
        json_object_set_new(c, "final_logit_softcapping", json_real((double)s->softcap));
        json_object_set_new(c, "output_multiplier", json_real((double)s->logit_scale));
        json_object_set_new(c, "qk_scale_factor", json_real((double)s->qk_scale));
    } else {
        json_object_set_new(c, "hidden_act", json_string("silu"));
    }
    if (strcmp(s->arch, "gemma4") == 0 || strcmp(s->arch, "muse-glimmer") == 0) {
        json_t *types = json_array();
        for (int32_t l = 0; l < s->n_layers; l++)
            json_array_append_new(types, json_string(spec_local(s, l) ? "sliding_attention" : "full_attention"));
        json_object_set_new(c, "layer_types", types);
    }
    json_object_set_new(c, "torch_dtype", json_string("float32"));
    if (strcmp(s->arch, "llama") == 0) {
        json_object_set_new(c, "attention_bias", json_false());
        json_object_set_new(c, "mlp_bias", json_false());
    }
    if (strcmp(s->arch, "qwen35") == 0) { /* transformers' Qwen3_5TextConfig (rope in rope_parameters, as transformers 5) */
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
    }
    if (s->layer_kinds) { /* transformers' Lfm2Config */
        json_object_del(c, "rms_norm_eps");
        json_object_del(c, "tie_word_embeddings");
        json_object_set_new(c, "norm_eps", json_real((double)s->rms_eps));
        json_object_set_new(c, "block_ff_dim", json_integer(s->hf_ffn_dim));
        json_object_set_new(c, "block_auto_adjust_ff_dim", json_true());
        json_object_set_new(c, "block_ffn_dim_multiplier", json_real(1.0));
        json_object_set_new(c, "block_multiple_of", json_integer(64));
        json_object_set_new(c, "conv_L_cache", json_integer(s->conv_taps));
        json_object_set_new(c, "conv_bias", json_false());
        json_object_set_new(c, "tie_embedding", json_boolean(s->tied_embeddings));
        json_t *types = json_array();
        for (int32_t l = 0; l < s->n_layers; l++) json_array_append_new(types, json_string(s->layer_kinds[l] == 'c' ? "conv" : "full_attention"));
        json_object_set_new(c, "layer_types", types);
    }
    if (s->n_experts > 0) { /* transformers' Qwen3MoeConfig */
        json_object_set_new(c, "num_experts", json_integer(s->n_experts));
        json_object_set_new(c, "num_experts_per_tok", json_integer(s->n_experts_used));
        json_object_set_new(c, "moe_intermediate_size", json_integer(s->expert_ffn_dim));
        json_object_set_new(c, "norm_topk_prob", json_boolean(s->variant != ORACLE_VARIANT_MOE_UNNORMALISED));
        json_object_set_new(c, "decoder_sparse_step", json_integer(1));
        json_object_set_new(c, "mlp_only_layers", json_array());
    }
    if (strcmp(s->arch, "qwen2") == 0 || strcmp(s->arch, "qwen3") == 0 || strcmp(s->arch, "qwen3moe") == 0) {
        json_object_set_new(c, "use_sliding_window", json_false());
        json_object_set_new(c, "attention_bias", json_boolean(s->qkv_bias));
    }
    if (strcmp(s->arch, "qwen35") == 0) { /* as published: the text model's config inside the vision-language one */
        json_t *outer = json_object();
        json_object_set_new(outer, "architectures", json_pack("[s]", "Qwen3_5ForConditionalGeneration"));
        json_object_set_new(outer, "model_type", json_string("qwen3_5"));
        json_object_set_new(outer, "tie_word_embeddings", json_boolean(s->tied_embeddings));
        json_object_del(c, "tie_word_embeddings");
        json_object_set_new(outer, "vision_config", json_pack("{s:s, s:i}", "model_type", "qwen3_5", "depth", 1));
        json_object_set_new(outer, "text_config", c);
        c = outer;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    int rc = json_dump_file(c, path, JSON_INDENT(2) | JSON_REAL_PRECISION(17)) == 0 ? 0 : fail(e, "cannot write %s", path);
    json_decref(c);
    return rc;
}

/* safetensors: u64 little-endian header length, JSON header (padded with spaces to 8 bytes), data. */
static int write_safetensors(const model_weights *w, const char *dir, errbuf *e) {
    json_t *h = json_object();
    json_object_set_new(h, "__metadata__", json_pack("{s:s}", "format", "pt"));
    uint64_t offset = 0;
    for (int i = 0; i < w->n; i++) {
        const hf_tensor *t = &w->t[i];
        if (t->gguf_only) continue;
        uint64_t count = (uint64_t)(t->rows ? t->rows : 1) * (uint64_t)t->cols;
        uint64_t bytes = count * (t->f16 ? 2 : 4);
        json_t *shape = t->hf_3d ? json_pack("[i, i, i]", t->rows, 1, t->cols)
                        : t->rows ? json_pack("[i, i]", t->rows, t->cols) : json_pack("[i]", t->cols);
        json_object_set_new(h, t->hf_name,
                            json_pack("{s:s, s:o, s:[I, I]}", "dtype", t->f16 ? "F16" : "F32", "shape", shape, "data_offsets",
                                      (json_int_t)offset, (json_int_t)(offset + bytes)));
        offset += bytes;
    }
    char *text = json_dumps(h, JSON_COMPACT);
    json_decref(h);
    if (!text) return fail(e, "out of memory");
    size_t len = strlen(text), padded = (len + 7) / 8 * 8;
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "wb");
    if (!f) {
        free(text);
        return fail(e, "cannot create %s: %s", path, strerror(errno));
    }
    uint8_t le[8];
    for (int i = 0; i < 8; i++) le[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    bool ok = fwrite(le, 1, 8, f) == 8 && fwrite(text, 1, len, f) == len;
    for (size_t i = len; ok && i < padded; i++) ok = fputc(' ', f) != EOF;
    free(text);
    for (int i = 0; ok && i < w->n; i++) {
        const hf_tensor *t = &w->t[i];
        if (t->gguf_only) continue;
        size_t count = (size_t)(t->rows ? t->rows : 1) * (size_t)t->cols;
        if (t->f16) {
            uint16_t *half = malloc(count * sizeof *half);
            if (!half) { ok = false; break; }
            for (size_t k = 0; k < count; k++) half[k] = kite_f32_to_fp16(t->data[k]);
            ok = fwrite(half, sizeof *half, count, f) == count;
            free(half);
        } else if (t->hf_minus_one) {
            float *shifted = malloc(count * sizeof *shifted);
            if (!shifted) { ok = false; break; }
            for (size_t k = 0; k < count; k++) shifted[k] = t->data[k] - 1.0f; /* exact for w in [0.5, 2] */
            ok = fwrite(shifted, sizeof(float), count, f) == count;
            free(shifted);
        } else {
            ok = fwrite(t->data, sizeof(float), count, f) == count;
        }
    }
    if (fclose(f) != 0) ok = false;
    return ok ? 0 : fail(e, "writing %s failed", path);
}

static int write_hf(const oracle_spec *s, const model_weights *w, const vocab *v, const char *tokenizer_dir,
                    const char *dir, errbuf *e) {
    if (write_config(s, v, dir, e) || write_safetensors(w, dir, e)) return -1;
    char from[4096], to[4096];
    snprintf(from, sizeof from, "%s/tokenizer.json", tokenizer_dir);
    snprintf(to, sizeof to, "%s/tokenizer.json", dir);
    if (copy_file(from, to, false, e)) return -1;
    snprintf(from, sizeof from, "%s/tokenizer_config.json", tokenizer_dir);
    snprintf(to, sizeof to, "%s/tokenizer_config.json", dir);
    return copy_file(from, to, true, e);
}

int oracle_vocab_load(oracle_vocab **out, const oracle_spec *spec, const char *tokenizer_dir, char *err, size_t err_size) {
    errbuf e = {err, err_size};
    if (err && err_size) err[0] = 0;
    *out = NULL;
    vocab *v = calloc(1, sizeof *v);
    if (!v) return fail(&e, "out of memory");
    if (load_vocab(spec, tokenizer_dir, v, &e)) {
        free(v);
        return -1;
    }
    *out = v;
    return 0;
}

void oracle_vocab_free(oracle_vocab *v) {
    if (!v) return;
    vocab_free(v);
    free(v);
}

int oracle_write_model(const oracle_spec *s, const oracle_vocab *v, const char *tokenizer_dir, const char *gguf_path,
                       const char *hf_dir, char *err, size_t err_size) {
    errbuf e = {err, err_size};
    if (err && err_size) err[0] = 0;
    if (s->head_dim % 2 || s->n_heads % s->n_kv_heads || (s->f16_embeddings && s->tied_embeddings))
        return fail(&e, "inconsistent spec for %s", s->arch);
    if (v->n_vocab != s->n_vocab) return fail(&e, "the vocabulary has %d tokens, the %s spec %d", v->n_vocab, s->arch, s->n_vocab);
    model_weights w = {0};
    int rc = -1;
    if (make_weights(s, &w, &e)) goto done;
    if (gguf_path && write_gguf(s, &w, v, gguf_path, &e)) goto done;
    if (hf_dir && write_hf(s, &w, v, tokenizer_dir, hf_dir, &e)) goto done;
    rc = 0;
done:
    weights_free(&w);
    return rc;
}
