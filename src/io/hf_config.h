/* Hugging Face config.json and generation_config.json, parsed from text into kite's structures,
 * plus the translation of HF tensor names to kite's canonical (GGUF-style) names. */
#ifndef KITE_IO_HF_CONFIG_H
#define KITE_IO_HF_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "kite.h"
#include "model/tensors.h"

/* Parses config.json text[0..len) into *hp. `label` (e.g. the path) starts every error message.
 * Architectures: model_type "llama"/"qwen2"/"qwen3", or, without model_type, architectures[0]
 * LlamaForCausalLM/Qwen2ForCausalLM/Qwen3ForCausalLM; anything else is KITE_ERR_UNSUPPORTED.
 * Defaults when a field is absent (as transformers' LlamaConfig/Qwen2Config/Qwen3Config):
 * num_key_value_heads = num_attention_heads, head_dim = hidden_size / num_attention_heads,
 * rope_theta = 10000, rms_norm_eps = 1e-6, max_position_embeddings = 2048, tie_word_embeddings = false.
 * hp->rope_layout is KITE_ROPE_HALF (HF checkpoints keep q/k in rotate-half order).
 * bos_id / eos_id get bos_token_id / eos_token_id, or -1 when absent or null. eos_token_id may be a
 * list (several end tokens): the first is taken. */
int kite_hf_parse_config(const char *text, size_t len, const char *label, kite_hparams *hp, int32_t *bos_id,
                         int32_t *eos_id, kite_error *e);

/* Overlays generation_config.json text[0..len) on *p: temperature, top_k, top_p, min_p,
 * repetition_penalty (-> repeat_penalty); "do_sample": false forces temperature 0 (greedy), while an
 * absent do_sample leaves the temperature as given (transformers would default to greedy, but files
 * with only "_from_model_config" carry no sampling intent). Fields absent or null keep *p's values.
 * bos_id / eos_id (may be NULL) are set only when the file gives them (first entry of a list). */
int kite_hf_parse_generation_config(const char *text, size_t len, const char *label, kite_gen_params *p,
                                    int32_t *bos_id, int32_t *eos_id, kite_error *e);

/* Translates an HF tensor name (model.layers.3.self_attn.q_proj.weight) into the canonical name
 * (blk.3.attn_q.weight) in out[out_size]. Returns 1 when translated, 0 for a name kite does not use
 * (e.g. rotary_emb.inv_freq), -1 when the layer number is not a plain integer below n_layers, -2 for
 * a weight kite cannot run (o_proj or MLP biases), which must not be silently dropped. */
int kite_hf_canonical_name(const char *hf_name, int32_t n_layers, char *out, size_t out_size);
/* The same for architecture arch: Gemma 3's norms around attention and FFN have names of their own
 * (kite_gemma3_hf_layer_name). Qwen3.5's next-n blocks (mtp.layers.B.*, mtp.{fc, pre_fc_norm_embedding,
 * pre_fc_norm_hidden, norm}) become blk.{n_layers + B}.* and blk.{n_layers}.nextn.{eh_proj, enorm, hnorm,
 * shared_head_norm}, as convert_hf_to_gguf.py names them; another mtp.* name is -2. */
int kite_hf_canonical_name_arch(kite_arch arch, const char *hf_name, int32_t n_layers, char *out, size_t out_size);

#endif
