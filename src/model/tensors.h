/* What every loader produces: named tensors (views into mapped files) plus hyper-parameters.
 * Names are canonical, in GGUF's spelling: token_embd.weight, output_norm.weight, output.weight,
 * blk.N.{attn_norm,attn_q,attn_k,attn_v,attn_output,attn_q_norm,attn_k_norm,ffn_norm,ffn_gate,
 * ffn_up,ffn_down}.weight and blk.N.attn_{q,k,v}.bias; Gemma 3 adds blk.N.post_attention_norm.weight and
 * blk.N.post_ffw_norm.weight. Qwen3-MoE replaces ffn_{gate,up,down} by blk.N.ffn_gate_inp.weight (the router,
 * [dim, n_experts]) and the experts, either as llama.cpp's 3-D blk.N.ffn_{gate,up,down}_exps.weight or one
 * 2-D matrix per expert, blk.N.ffn_{gate,up,down}_exps.E.weight (Hugging Face folders), or gate and up fused
 * per expert in blk.N.ffn_gate_up_exps.weight (transformers 5). Loaders of other
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
} kite_hparams;

/* Whether layer l is a Gated DeltaNet (linear attention) layer of Qwen3.5. */
static inline bool kite_layer_is_recurrent(const kite_hparams *hp, int32_t l) {
    return hp->full_attn_interval > 0 && (l + 1) % hp->full_attn_interval != 0;
}

/* Whether layer l attends over a sliding window (a local layer) rather than the whole context. */
static inline bool kite_layer_is_local(const kite_hparams *hp, int32_t l) {
    return hp->sliding_window > 0 && hp->swa_period > 0 && l % hp->swa_period < hp->swa_period - 1;
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
