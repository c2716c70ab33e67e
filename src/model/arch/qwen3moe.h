/* Qwen3-MoE (Qwen3-30B-A3B, 235B-A22B): Qwen3's attention (QK-norm, NEOX RoPE, GQA) with every layer's
 * FFN replaced by routed experts (model/moe.h runs them). What differs from Qwen3, in one place:
 * hyper-parameters, tensor names, validation and binding of the router and the experts. */
#ifndef KITE_MODEL_ARCH_QWEN3MOE_H
#define KITE_MODEL_ARCH_QWEN3MOE_H

#include "io/gguf.h"
#include "model/moe.h"
#include "model/source.h"

/* After the common "qwen3moe.*" keys are in *hp: expert_count (1..512), expert_used_count (1..64, at
 * most expert_count), expert_feed_forward_length (default feed_forward_length / expert_used_count, as
 * llama.cpp); a per-layer array for either count is refused. llama.cpp divides the top-k probabilities
 * by their sum for every qwen3moe file (its graph passes norm_w = true whatever the metadata says), so
 * expert_weights_norm is set. path starts every error message. */
int kite_qwen3moe_gguf_hparams(const kite_gguf *g, const char *path, kite_hparams *hp, kite_error *e);

/* The canonical suffix of a Qwen3MoeForCausalLM layer tensor (hf_suffix after "model.layers.N."):
 * mlp.gate.weight -> ffn_gate_inp.weight, mlp.experts.E.{gate,up,down}_proj.weight ->
 * ffn_{gate,up,down}_exps.E.weight; transformers 5's fused mlp.experts.gate_up_proj ([E, 2 x ffn, dim]:
 * each expert's gate rows, then its up rows) -> ffn_gate_up_exps.weight and mlp.experts.down_proj ->
 * ffn_down_exps.weight (llama.cpp's 3-D layout). Returns 1 with out filled, 0 for a name that is not the
 * MoE's (Qwen3's table then applies), -2 for an MoE weight kite cannot run (a shared expert, biases). */
int kite_qwen3moe_hf_layer_name(const char *hf_suffix, char *out, size_t out_size);

/* Checks every layer's router and experts (either form of tensors.h) against *hp: shapes, one type per
 * layer and kind of matrix, sizes of the 3-D tensors, no expert index past n_experts. */
int kite_qwen3moe_validate(const kite_source *src, kite_error *e);

/* Fills moe for layer l of src (validated) and hands each matrix to pack (the binder's packing list):
 * the router, then gate, up and down of each expert (3-D tensors cut into per-expert views kept in
 * moe->views). */
typedef int (*kite_pack_add_fn)(void *ctx, const kite_tensor *t, kite_packed_matrix *out, kite_error *e);
int kite_qwen3moe_bind_layer(const kite_source *src, int32_t l, kite_moe_layer *moe, kite_pack_add_fn pack, void *ctx,
                             kite_error *e);

#endif
