/* Tokenizers: SentencePiece-style BPE with byte fallback ("spm") and byte-level BPE ("bpe", GPT-2 /
 * Llama-3 / Qwen). Built from GGUF metadata, a Hugging Face tokenizer.json, or a llama2.c
 * tokenizer .bin. Encoding is exact against llama.cpp's and HF's; decoding gives back the text. */
#ifndef KITE_TOKENIZE_TOKENIZER_H
#define KITE_TOKENIZE_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "io/gguf.h"

typedef struct kite_tokenizer kite_tokenizer;

typedef enum kite_tokenizer_kind { KITE_TOKENIZER_SPM = 0, KITE_TOKENIZER_BPE = 1 } kite_tokenizer_kind;

/* From tokenizer.ggml.* keys (model "llama" = spm, "gpt2" = bpe; pre-tokenizer from tokenizer.ggml.pre).
 * Keys read: tokenizer.ggml.model, .tokens (required), .scores, .token_type, .merges (required for "gpt2",
 * strings "left right"), .bos_token_id, .eos_token_id, .unknown_token_id, .eot_token_id, .eom_token_id,
 * .fim_{pre,suf,mid,pad,rep,sep}_token_id, .add_bos_token, .add_space_prefix (spm; default true), .pre. Accepted tokenizer.ggml.pre values (write one
 * of these when making a GGUF): "llama-bpe" / "llama3" / "llama-v3" (Llama-3 split regex, ignore_merges,
 * BOS by default), "qwen2" / "deepseek-r1-qwen" (Qwen2 regex), "gpt-2" / "default" / absent (GPT-2 regex).
 * Any other value is KITE_ERR_UNSUPPORTED naming it. */
int kite_tokenizer_from_gguf(kite_tokenizer **out, const kite_gguf *g, kite_error *e);
/* From the text of a tokenizer.json, and optionally of tokenizer_config.json (add_bos_token,
 * bos/eos tokens); config may be NULL. */
int kite_tokenizer_from_hf_json(kite_tokenizer **out, const char *json, size_t json_len, const char *config_json,
                                size_t config_len, kite_error *e);
/* The same for a model of model_n_vocab embedding rows (<= 0: unknown): added tokens with ids from model_n_vocab on
 * are left out, as llama.cpp's converter leaves them out of the GGUF. */
int kite_tokenizer_from_hf_json_for(kite_tokenizer **out, const char *json, size_t json_len, const char *config_json,
                                    size_t config_len, int32_t model_n_vocab, kite_error *e);
/* From a llama2.c tokenizer .bin (int32 max_token_len, then per id: f32 score, int32 len, bytes).
 * n_vocab: the model's vocabulary size (the file does not say); n_vocab <= 0 reads entries until the
 * end of the file. BOS = 1, EOS = 2 as in llama2.c. */
int kite_tokenizer_from_llama2c(kite_tokenizer **out, const void *data, size_t size, int32_t n_vocab, kite_error *e);
/* From a SentencePiece ModelProto (.model): BPE models with the identity normalizer (Llama-2's tokenizer.model,
 * llama2.c's tok*.model); pieces, scores and types as stored, unk / bos / eos from the trainer spec,
 * add_dummy_prefix from the normalizer spec. Unigram models and other normalizers are KITE_ERR_UNSUPPORTED. */
int kite_tokenizer_from_spm_model(kite_tokenizer **out, const void *data, size_t size, kite_error *e);
/* From a file: a tokenizer.json (by its name or a leading '{'; a tokenizer_config.json in the same folder is
 * read too when present), a SentencePiece .model (by its name), or else a llama2.c tokenizer .bin (n_vocab as above; <= 0 reads every entry). */
int kite_tokenizer_from_file(kite_tokenizer **out, const char *path, int32_t n_vocab, kite_error *e);
void kite_tokenizer_free(kite_tokenizer *t);

kite_tokenizer_kind kite_tokenizer_kind_of(const kite_tokenizer *t);
int32_t kite_tokenizer_n_vocab(const kite_tokenizer *t);
int32_t kite_tokenizer_bos(const kite_tokenizer *t);   /* -1 if none */
int32_t kite_tokenizer_eos(const kite_tokenizer *t);   /* -1 if none */
bool kite_tokenizer_add_bos(const kite_tokenizer *t);  /* whether prompts get BOS by default */
/* End of generation: EOS, and end-of-turn tokens such as <|eot_id|>, <|im_end|>, <|endoftext|>: the same
 * set llama.cpp builds (EOS, EOT / EOM / FIM pad / repo / separator ids, and tokens spelled like its list,
 * e.g. Qwen's "</s>"), plus TinyStories' <|end_story|>. */
bool kite_tokenizer_is_eog(const kite_tokenizer *t, int32_t id);

/* Token id spelled exactly text[0..len) in the vocabulary's own spelling (e.g. "<|im_start|>"), or -1. */
int32_t kite_tokenizer_token_id(const kite_tokenizer *t, const char *text, size_t len);
/* The vocabulary's spelling of id (not NUL-terminated; length in *len), or NULL if out of range. */
const char *kite_tokenizer_token_text(const kite_tokenizer *t, int32_t id, size_t *len);
/* Whether id is a control or unknown token (BOS, EOS, <|im_start|>, ...). */
bool kite_tokenizer_is_special(const kite_tokenizer *t, int32_t id);
/* Whether id is a control token (BOS, EOS, <|im_start|>, ...; not unknown, not user-defined). */
bool kite_tokenizer_is_control(const kite_tokenizer *t, int32_t id);
/* The end-of-generation tokens (kite_tokenizer_is_eog), lowest id first: writes at most cap, returns the count written. */
int32_t kite_tokenizer_eog_ids(const kite_tokenizer *t, int32_t *ids, int32_t cap);

/* Encodes UTF-8 text (invalid UTF-8 is KITE_ERR_TOKENIZER). parse_special: text spelling a special /
 * added token (e.g. "<|im_start|>") becomes that token; user-defined added tokens (HF added tokens with
 * "special": false, GGUF token_type 4, e.g. Qwen3's "<think>") are split out whatever parse_special says,
 * as llama.cpp and HF do. *ids is malloc'd (non-NULL on success, even for 0 ids); the caller frees it. */
int kite_tokenizer_encode(const kite_tokenizer *t, const char *text, size_t len, bool add_bos, bool parse_special,
                          int32_t **ids, size_t *n_ids, kite_error *e);

/* kite_tokenizer_encode with parse_special, except that a special or added token whose spelling
 * overlaps a byte with data_mask[i] = 1 (text that came from a chat's messages, not its template) is
 * not split out: those bytes are encoded as plain text. data_mask holds one byte per text byte; with
 * every byte 0 the ids equal kite_tokenizer_encode(..., parse_special = true). */
int kite_tokenizer_encode_masked(const kite_tokenizer *t, const char *text, size_t len, const uint8_t *data_mask,
                                 bool add_bos, int32_t **ids, size_t *n_ids, kite_error *e);

/* The bytes token `id` stands for in the output text (byte-fallback tokens give their byte, "▁"
 * becomes a space, byte-level BPE maps back to raw bytes; special tokens give their text, BOS/EOS
 * give nothing). Writes at most cap bytes and returns the full length, or -1 for an id out of range.
 * prev_id: the token before (-1 at the start), so SentencePiece can drop the space it added in
 * front of the first word, as llama.cpp does. */
int32_t kite_tokenizer_piece(const kite_tokenizer *t, int32_t prev_id, int32_t id, char *buf, size_t cap);
/* Whether kite_tokenizer_piece drops the leading space of the token after prev_id (SentencePiece's
 * dummy prefix after BOS or a control token; never for byte-level BPE). Grammar masks use it to know
 * which spelling of a space-led token the output will get. */
bool kite_tokenizer_drops_space_after(const kite_tokenizer *t, int32_t prev_id);

/* Whole-sequence decode into a malloc'd NUL-terminated string (length in *len): the pieces back to back,
 * without HF's clean_up_tokenization_spaces, so that decode(encode(text)) == text. Thread-safe, like
 * encoding: a tokenizer is immutable once built. */
int kite_tokenizer_decode(const kite_tokenizer *t, const int32_t *ids, size_t n_ids, char **text, size_t *len,
                          kite_error *e);

#endif
