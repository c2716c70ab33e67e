/* llama2.c legacy (version 0) checkpoints, parsed from memory so the parser can be fuzzed.
 * Layout (all little-endian): 7 int32 {dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size,
 * seq_len} (vocab_size < 0 means the classifier is not shared with the embedding), then f32 arrays:
 * token_embedding [vocab][dim], rms_att [L][dim], wq [L][dim][dim], wk [L][kv_dim][dim],
 * wv [L][kv_dim][dim], wo [L][dim][dim], rms_ffn [L][dim], w1 [L][hidden][dim], w2 [L][dim][hidden],
 * w3 [L][hidden][dim], rms_final [dim], freq_cis_real [seq_len][head_size/2], freq_cis_imag (same),
 * and wcls [vocab][dim] when unshared. The file must be exactly that long. */
#ifndef KITE_MODEL_SOURCE_LLAMA2C_H
#define KITE_MODEL_SOURCE_LLAMA2C_H

#include <stddef.h>

#include "model/source.h"

/* The magic of llama2.c's newer "version 1/2" exports ("ak42" read as a little-endian uint32). */
#define KITE_LLAMA2C_MAGIC 0x616b3432u

/* Fills src->hp and src->tensors with views into data[0..size) (which must outlive src; nothing is
 * mapped or copied) and validates them with kite_source_validate. `label` starts error messages.
 * src must be zeroed by the caller; on failure the caller releases it with kite_source_close. */
int kite_llama2c_parse(kite_source *src, const void *data, size_t size, const char *label, kite_error *e);

#endif
