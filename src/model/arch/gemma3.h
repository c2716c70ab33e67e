/* Gemma 3: what differs from the Llama layout, in one place (docs/DESIGN.md's model/arch/). The layer
 * structure (pre- and post-norms around attention and FFN, GeGLU, QK-norm, embedding scale, sliding-window
 * and global layers with their own RoPE bases, optional final soft-cap) is run by model/forward.c from the
 * kite_hparams fields these functions fill. */
#ifndef KITE_MODEL_ARCH_GEMMA3_H
#define KITE_MODEL_ARCH_GEMMA3_H

#include "io/gguf.h"
#include "model/tensors.h"

/* After the common "gemma3.*" keys are in *hp (dim, heads, head_dim, layers, rope.freq_base, epsilon):
 * the Gemma keys as llama.cpp reads them: attention.sliding_window (absent or 0: every layer global),
 * attention.sliding_window_pattern (default 6), rope.freq_base_swa (default 10000),
 * final_logit_softcapping (default none). The converter stores norm weights as w + 1 (no offset at
 * load), writes no query_pre_attn_scalar, and llama.cpp scales queries by head_dim^-1/2 (27B, 62 layers:
 * (dim / heads)^-1/2): so does kite. path starts every error message. */
int kite_gemma3_gguf_hparams(const kite_gguf *g, const char *path, kite_hparams *hp, kite_error *e);

/* The canonical suffix (after "blk.N.") of a Gemma 3 Hugging Face layer tensor suffix (after
 * "model.layers.N."), where it differs from Llama's: Gemma's post_attention_layernorm normalizes the
 * attention output (Llama's is the FFN's pre-norm). NULL when the name is Llama's. */
const char *kite_gemma3_hf_layer_name(const char *hf_suffix);

/* The Gemma-only per-layer tensors ("blk.N." suffixes, each [dim]), NULL-terminated. */
extern const char *const kite_gemma3_extra_layer_norms[];

#endif
