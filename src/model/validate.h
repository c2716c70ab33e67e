/* Shape checks every loader runs on its kite_source before a model is built from it. */
#ifndef KITE_MODEL_VALIDATE_H
#define KITE_MODEL_VALIDATE_H

#include "model/source.h"

/* Checks the hyper-parameters (positive, heads divisible, ...) and that every tensor the
 * architecture needs exists with the shape hp implies; a message names the tensor and both shapes.
 * Required: token_embd, output_norm, and per layer attn_norm, attn_q/k/v/output, ffn_norm,
 * ffn_gate/up/down; QWEN2 also attn_{q,k,v}.bias, QWEN3 also attn_q_norm/attn_k_norm. Optional:
 * output (absent means tied embeddings: hp.tied_embeddings must then be set), biases for LLAMA.
 * Shapes in ne order (innermost first): a projection of out x in is [in, out]. Trailing dimensions
 * of 1 are ignored (a norm stored as [dim, 1] passes). */
int kite_source_validate(const kite_source *src, kite_error *e);

#endif
