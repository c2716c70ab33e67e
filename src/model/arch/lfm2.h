/* LFM2 / LFM2.5 (Liquid AI): a hybrid of short gated convolution blocks and GQA attention layers (QK-norm,
 * NEOX RoPE), each followed by a SwiGLU FFN, with the final norm named token_embd_norm.weight (Hugging Face's
 * model.embedding_norm, applied after the last layer) and tied embeddings. A conv layer, as llama.cpp's
 * src/models/lfm2.cpp runs it, for the operator-normed input h of one position t:
 *   [B, C, x] = in_proj h          (in_proj: [3 dim, dim], the three chunks in that order)
 *   u_t = B * x                    (element-wise; the conv's input, kept per position in the cache)
 *   v_t[c] = sum_k w[c][k] u_{t-(L-1)+k}[c]   (depthwise causal conv of L taps; u before position 0 is 0)
 *   out = out_proj (C * v_t)
 * What differs from the Llama layout is here (hyper-parameters, names); model/validate.c checks the tensors and
 * model/forward.c runs it. */
#ifndef KITE_MODEL_ARCH_LFM2_H
#define KITE_MODEL_ARCH_LFM2_H

#include "io/gguf.h"
#include "model/tensors.h"

/* The longest conv kernel kite accepts (LFM2 uses 3). */
enum { KITE_LFM2_MAX_TAPS = 16 };

/* After the common "lfm2.*" keys are in *hp: lfm2.shortconv.l_cache (2..KITE_LFM2_MAX_TAPS, required) and
 * lfm2.attention.head_count_kv, llama.cpp's per-layer array in which 0 marks a conv layer (the other
 * entries must agree: they become n_kv_heads). A sliding window (LFM2 files with attention.sliding_window)
 * and more than KITE_MAX_CONV_LAYERS layers are refused. path starts every error message. */
int kite_lfm2_gguf_hparams(const kite_gguf *g, const char *path, kite_hparams *hp, kite_error *e);

/* The canonical suffix (after "blk.N.") of an Lfm2ForCausalLM layer tensor suffix (after "model.layers.N."),
 * or NULL when the name is not LFM2's own (Llama's table then applies): operator_norm -> attn_norm,
 * feed_forward.w1/w3/w2 -> ffn_gate/up/down, self_attn.out_proj -> attn_output, q/k_layernorm ->
 * attn_q/k_norm, conv.in_proj/conv/out_proj -> shortconv.*. *unsupported is set for a weight kite cannot
 * run (the conv's optional biases, conv_bias true). */
const char *kite_lfm2_hf_layer_name(const char *hf_suffix, bool *unsupported);

#endif
