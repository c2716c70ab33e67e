/* What every loader produces: named tensors (views into mapped files) plus hyper-parameters.
 * Names are canonical, in GGUF's spelling: token_embd.weight, output_norm.weight, output.weight,
 * blk.N.{attn_norm,attn_q,attn_k,attn_v,attn_output,attn_q_norm,attn_k_norm,ffn_norm,ffn_gate,
 * ffn_up,ffn_down}.weight and blk.N.attn_{q,k,v}.bias; Gemma 3 adds blk.N.post_attention_norm.weight and
 * blk.N.post_ffw_norm.weight; Muse Glimmer blk.N.attn_gate.weight (the output gate), Gemma 4
 * blk.N.layer_output_scale.weight (one scalar) and rope_freqs.weight (proportional RoPE divisors), and its
 * k_eq_v layers have no attn_v. Qwen3-MoE replaces ffn_{gate,up,down} by blk.N.ffn_gate_inp.weight (the router,
 * [dim, n_experts]) and the experts, either as llama.cpp's 3-D blk.N.ffn_{gate,up,down}_exps.weight or one
 * 2-D matrix per expert, blk.N.ffn_{gate,up,down}_exps.E.weight (Hugging Face folders), or gate and up fused
 * per expert in blk.N.ffn_gate_up_exps.weight (transformers 5). LFM2's conv layers have
 * blk.N.shortconv.{in_proj,conv,out_proj}.weight instead of attn_{q,k,v,output,q_norm,k_norm}, and its final
 * norm is token_embd_norm.weight (llama.cpp's name), not output_norm.weight. Loaders of other
 * formats translate. */
#ifndef KITE_MODEL_TENSORS_H
#define KITE_MODEL_TENSORS_H

#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"

/* Values reserved ahead of the code for the families being added side by side (issue 15), so their
 * branches do not collide. */
typedef enum kite_arch {
    KITE_ARCH_LLAMA = 0,
    KITE_ARCH_QWEN2 = 1,
    KITE_ARCH_QWEN3 = 2,
    KITE_ARCH_GEMMA3 = 3,
    KITE_ARCH_QWEN3MOE = 4,
    KITE_ARCH_LFM2 = 5,
    KITE_ARCH_GEMMA4 = 6,
    KITE_ARCH_MUSE_GLIMMER = 7,
    KITE_ARCH_QWEN35 = 8,
} kite_arch;

/* The FFN's gate activation: SiLU (SwiGLU: Llama, Qwen) or GELU with the tanh approximation (GeGLU: Gemma). */
/* Layers a hybrid model with convolution blocks (LFM2) may have: conv_layers is a bit set of this size. */
enum { KITE_MAX_CONV_LAYERS = 256 };
/* Layers a per-layer local/global pattern can describe (llama.cpp's sliding_window_pattern array). */
enum { KITE_MAX_LAYER_PATTERN = 512 };
/* Qwen3.5's next-n (MTP) blocks a file may declare (nextn_predict_layers, mtp_num_hidden_layers); kite drafts with the first. */
enum { KITE_MAX_NEXTN_LAYERS = 16 };

typedef enum kite_ffn_act { KITE_FFN_SILU = 0, KITE_FFN_GELU_TANH = 1 } kite_ffn_act;

/* How RoPE pairs the dimensions of a head:
 *   INTERLEAVED: (x[2i], x[2i+1]) rotate together (llama2.c, llama.cpp's "norm" type, Llama GGUF
 *                whose converter permuted q/k);
 *   HALF:        (x[i], x[i + head_dim/2]) rotate together (Hugging Face "rotate_half", NEOX;
 *                Qwen GGUF files). */
typedef enum kite_rope_layout { KITE_ROPE_INTERLEAVED = 0, KITE_ROPE_HALF = 1 } kite_rope_layout;

typedef enum kite_rope_scaling { KITE_ROPE_SCALING_NONE = 0, KITE_ROPE_SCALING_LLAMA3 = 1, KITE_ROPE_SCALING_LINEAR = 2 } kite_rope_scaling;

typedef struct kite_hparams {
    kite_arch arch;
    int32_t n_vocab;
    int32_t dim;          /* residual width */
    int32_t n_layers;
    int32_t n_heads;
    int32_t n_kv_heads;
    int32_t head_dim;     /* per head; q has n_heads * head_dim rows, k/v n_kv_heads * head_dim */
    int32_t ffn_dim;
    int32_t n_ctx_train;
    float rms_eps;
    float rope_theta;
    kite_rope_layout rope_layout;
    kite_rope_scaling rope_scaling;
    float rope_factor;            /* llama3 and linear scaling */
    float rope_low_freq_factor;   /* llama3 */
    float rope_high_freq_factor;  /* llama3 */
    int32_t rope_orig_ctx;        /* llama3: original_max_position_embeddings */
    bool tied_embeddings;         /* output.weight absent: the embedding is reused */
    /* Gemma 3 (zero elsewhere: each 0 means "as Llama does"). */
    kite_ffn_act ffn_act;
    float embd_scale;             /* embedding rows are multiplied by this (Gemma: sqrt(dim)); 0 = 1 */
    float attn_scale;             /* attention scores' scale (Gemma: query_pre_attn_scalar^-1/2); 0 = head_dim^-1/2 */
    float final_logit_softcap;    /* logits = c * tanh(logits / c) with c this; 0 = none (Gemma 2 had it, Gemma 3 not) */
    float norm_weight_offset;     /* added to every RMSNorm weight at load: 1 for Hugging Face Gemma's x * (1 + w);
                                     0 for GGUF, whose converter stored w + 1 */
    int32_t sliding_window;       /* positions a local layer attends to, its own included; 0 = every layer global */
    int32_t swa_period;           /* layer l is local iff l % swa_period < swa_period - 1 (Gemma 3: 6, five local then one
                                     global); used only when sliding_window > 0 */
    float rope_theta_local;       /* RoPE base of local layers, which take no RoPE scaling (Gemma 3: 10000) */
    /* Qwen3-MoE (0 elsewhere: a dense FFN): every layer's FFN is n_experts routed SwiGLU experts of
     * expert_ffn_dim, n_experts_used of them per token (model/arch/qwen3moe.h). */
    int32_t n_experts;
    int32_t n_experts_used;       /* top-k */
    int32_t expert_ffn_dim;       /* each expert's intermediate width */
    bool expert_weights_norm;     /* the top-k probabilities are divided by their sum (HF norm_topk_prob; llama.cpp
                                     always does for qwen3moe GGUF files) */
    /* Qwen3.5 (0 elsewhere): Gated DeltaNet layers between gated full-attention layers (model/deltanet.h). */
    int32_t n_rot;                /* RoPE turns the first n_rot dimensions of a head (partial rotary); 0 = head_dim */
    bool attn_output_gate;        /* attn_q gives [q | gate] per head (2 x head_dim rows each); the attention
                                     output is multiplied by sigmoid(gate) before attn_output */
    int32_t full_attn_interval;   /* layer l is full attention iff (l + 1) % interval == 0, else Gated DeltaNet;
                                     0 = no recurrent layers */
    int32_t dn_conv_kernel;       /* causal conv1d width (ssm.conv_kernel) */
    int32_t dn_head_k_dim;        /* q/k head size (ssm.state_size) */
    int32_t dn_head_v_dim;        /* v head size (ssm.inner_size / n_v) */
    int32_t dn_n_k_heads;         /* key heads (ssm.group_count) */
    int32_t dn_n_v_heads;         /* value heads (ssm.time_step_rank), a multiple of the key heads */
    bool dn_v_grouped;            /* value head h reads key head h / (n_v / n_k) (Hugging Face's order); false:
                                     h % n_k (llama.cpp's converter reorders the value heads to that) */
    int32_t n_nextn_layers;       /* multi-token-prediction layers stored after the n_layers (not run) */
    /* LFM2 (0 elsewhere: every layer attends): the layers marked in conv_layers are short gated convolutions
     * of conv_taps taps (model/arch/lfm2.h) instead of attention. */
    int32_t conv_taps;            /* the conv's kernel length L (LFM2: conv_L_cache = 3) */
    uint64_t conv_layers[KITE_MAX_CONV_LAYERS / 64]; /* bit l: layer l is a conv layer */
    /* Gemma 4 and Muse Glimmer (zero / false elsewhere: "as Llama / Gemma 3 do"). */
    bool local_by_layer;          /* layer_local[] says which layers are local (llama.cpp's per-layer
                                     sliding_window_pattern array) instead of swa_period */
    uint8_t layer_local[KITE_MAX_LAYER_PATTERN]; /* [n_layers] 1 = sliding-window layer, when local_by_layer */
    int32_t head_dim_local;       /* head size of local layers (Gemma 4: 256 while global layers have head_dim 512);
                                     0 = head_dim */
    int32_t n_kv_heads_local;     /* KV heads of local layers (Gemma 4 31B: 16 local, 4 global); 0 = n_kv_heads */
    int32_t rope_dim_local;       /* rotated dimensions of a local head (partial RoPE: pairs (i, i + rope_dim/2) for
                                     i < rope_dim/2, the rest pass through); 0 = the whole head */
    bool rope_global_none;        /* global layers take no RoPE (Muse Glimmer: NoPE on full-attention layers) */
    bool v_norm;                  /* V gets an RMSNorm without weight before the cache (Gemma 4) */
    bool embd_norm;               /* the embedding row gets an RMSNorm without weight (Muse Glimmer) */
    float post_norm_eps;          /* epsilon of the post-attention / post-FFN norms; 0 = rms_eps (Muse Glimmer: 1e-8) */
    float logit_scale;            /* logits multiplied by this before the soft-cap (Muse Glimmer's output multiplier);
                                     0 = 1 */
    float rope_global_fraction;   /* Gemma 4 from config.json: proportional RoPE on global layers, only this fraction
                                     of the pairs turns (GGUF files carry it as rope_freqs.weight); 0 = all */
    float qk_scale_factor;        /* Muse Glimmer from config.json: q_norm weights (k_norm: 1) when the checkpoint has
                                     none (its converter synthesizes them); 0 = not given */
} kite_hparams;

/* Whether layer l is a Gated DeltaNet (linear attention) layer of Qwen3.5. */
static inline bool kite_layer_is_recurrent(const kite_hparams *hp, int32_t l) {
    return hp->full_attn_interval > 0 && (l + 1) % hp->full_attn_interval != 0;
}

/* Whether layer l is a short convolution block (LFM2) rather than attention. */
static inline bool kite_layer_is_conv(const kite_hparams *hp, int32_t l) {
    return hp->conv_taps > 0 && l >= 0 && l < KITE_MAX_CONV_LAYERS && (hp->conv_layers[l / 64] >> (l % 64) & 1u);
}

/* Whether layer l attends over a sliding window (a local layer) rather than the whole context. */
static inline bool kite_layer_is_local(const kite_hparams *hp, int32_t l) {
    if (hp->sliding_window <= 0) return false;
    if (hp->local_by_layer) return l >= 0 && l < KITE_MAX_LAYER_PATTERN && hp->layer_local[l];
    return hp->swa_period > 0 && l % hp->swa_period < hp->swa_period - 1;
}

/* Layer l's head size and KV head count (local layers may differ: Gemma 4). */
static inline int32_t kite_layer_head_dim(const kite_hparams *hp, int32_t l) {
    return hp->head_dim_local > 0 && kite_layer_is_local(hp, l) ? hp->head_dim_local : hp->head_dim;
}
static inline int32_t kite_layer_kv_heads(const kite_hparams *hp, int32_t l) {
    return hp->n_kv_heads_local > 0 && kite_layer_is_local(hp, l) ? hp->n_kv_heads_local : hp->n_kv_heads;
}
/* Rotated dimensions of layer l's heads: 0 for a layer without RoPE. */
static inline int32_t kite_layer_rope_dim(const kite_hparams *hp, int32_t l) {
    if (kite_layer_is_local(hp, l)) return hp->rope_dim_local > 0 ? hp->rope_dim_local : kite_layer_head_dim(hp, l);
    return hp->rope_global_none ? 0 : hp->n_rot > 0 ? hp->n_rot : hp->head_dim; /* Qwen3.5: partial rotary */
}
/* The largest head size and the widest q (n_heads * head size) and k/v (kv heads * head size) rows of any layer. */
static inline int32_t kite_max_head_dim(const kite_hparams *hp) {
    return hp->head_dim_local > hp->head_dim ? hp->head_dim_local : hp->head_dim;
}
static inline int64_t kite_max_kv_width(const kite_hparams *hp) {
    int64_t g = (int64_t)hp->n_kv_heads * hp->head_dim;
    int64_t l = (int64_t)(hp->n_kv_heads_local > 0 ? hp->n_kv_heads_local : hp->n_kv_heads) *
                (hp->head_dim_local > 0 ? hp->head_dim_local : hp->head_dim);
    return g > l ? g : l;
}
typedef struct kite_tensor {
    char name[96];       /* canonical name, NUL-terminated */
    uint32_t type;       /* kite_type */
    uint32_t n_dims;
    int64_t ne[4];       /* ne[0] innermost; a weight matrix of out x in has ne[0] = in, ne[1] = out */
    uint64_t n_bytes;
    const void *data;    /* into a mapped file or a buffer owned by the loader */
} kite_tensor;

#endif
