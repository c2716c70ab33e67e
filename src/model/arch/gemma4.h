/* Gemma 4 (dense text models) and Muse Glimmer: what they add to Gemma 3's layout (model/arch/gemma3.h), as
 * llama.cpp's gemma4.cpp and muse-glimmer.cpp compute it. model/forward.c runs both from kite_hparams:
 *   Gemma 4:      per-layer local/global pattern, different head sizes (and KV head counts) on local and
 *                 global layers, proportional RoPE on global layers (rope_freqs.weight divisors: 1 for the
 *                 rotated pairs, 1e30 for the rest), partial RoPE on local ones, attention scale 1, an
 *                 unweighted RMSNorm of V, k_eq_v layers (no attn_v: V is K's projection), the per-layer
 *                 output scalar, GeGLU, embedding scale sqrt(dim), optional final soft-cap.
 *   Muse Glimmer: per-layer pattern (or a period), RoPE (interleaved) on sliding layers only, QK-norm,
 *                 sigmoid attention-output gate, post-norms with epsilon 1e-8, an unweighted RMSNorm of the
 *                 embedding, SwiGLU, logit scale then final soft-cap.
 * What kite cannot run is refused with the feature's name: Gemma 4's per-layer embeddings (E2B/E4B), KV
 * sharing across layers, experts (26B-A4B), per-layer FFN widths. */
#ifndef KITE_MODEL_ARCH_GEMMA4_H
#define KITE_MODEL_ARCH_GEMMA4_H

#include "io/gguf.h"
#include "model/tensors.h"

/* After the common "<arch>.*" keys are in *hp (dim, heads, head_dim = key_length, layers, rope.freq_base,
 * epsilon): the "gemma4.*" keys as llama_model_gemma4::load_arch_hparams and llama_model::load_hparams read
 * them. path starts every error message. */
int kite_gemma4_gguf_hparams(const kite_gguf *g, const char *path, kite_hparams *hp, kite_error *e);
/* The same for "muse-glimmer.*" (llama_model_muse_glimmer::load_arch_hparams). */
int kite_muse_glimmer_gguf_hparams(const kite_gguf *g, const char *path, kite_hparams *hp, kite_error *e);

/* The canonical suffix of a Gemma 4 / Muse Glimmer Hugging Face layer tensor suffix (after
 * "model.layers.N."), where it differs from Llama's (Gemma 3's norms, layer_scalar, the attention gate);
 * NULL when the name is Llama's. */
const char *kite_gemma4_hf_layer_name(kite_arch arch, const char *hf_suffix);

#endif
