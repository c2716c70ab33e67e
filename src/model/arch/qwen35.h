/* Qwen3.5 / 3.6 dense (llama.cpp's "qwen35"): Gated DeltaNet layers (model/deltanet.h) with a gated
 * full-attention layer every full_attention_interval layers (QK-norm, partial NEOX RoPE, a sigmoid output
 * gate from the doubled q projection), dense SwiGLU FFNs. What differs from Qwen3, in one place:
 * hyper-parameters, tensor names and validation. The multi-token-prediction layers after the trunk are
 * not run. */
#ifndef KITE_MODEL_ARCH_QWEN35_H
#define KITE_MODEL_ARCH_QWEN35_H

#include "io/gguf.h"
#include "model/source.h"

/* After the common "qwen35.*" keys are in *hp: ssm.{conv_kernel,state_size,group_count,time_step_rank,
 * inner_size}, full_attention_interval (default 4, as llama.cpp), rope.dimension_count (the rotated
 * part of a head), nextn_predict_layers (taken off block_count). A file with attention.recurrent_layers
 * (a per-layer pattern) is refused. */
int kite_qwen35_gguf_hparams(const kite_gguf *g, const char *path, kite_hparams *hp, kite_error *e);

/* The canonical suffix of a Qwen3_5ForCausalLM layer tensor (after "model.layers.N."): linear_attn.
 * {in_proj_qkv, in_proj_z, in_proj_b, in_proj_a, conv1d, dt_bias, A_log, norm, out_proj} -> attn_qkv,
 * attn_gate, ssm_beta, ssm_alpha, ssm_conv1d, ssm_dt.bias, ssm_a_log (HF's raw A_log; GGUF's ssm_a holds
 * -exp(A_log)), ssm_norm, ssm_out; post_attention_layernorm -> post_attention_norm (the FFN's input norm,
 * named as the converter names it). NULL for another name. */
const char *kite_qwen35_hf_layer_name(const char *hf_suffix);

/* Every layer's tensors against *hp (attention layers: attn_q of 2 x n_heads x head_dim rows). */
int kite_qwen35_validate(const kite_source *src, kite_error *e);

#endif
