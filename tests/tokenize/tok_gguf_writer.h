/* Writes a vocabulary-only GGUF ("gpt2" tokenizer) from a tokenizer.json the way llama.cpp's
 * convert_hf_to_gguf.py does: tokens by id, token_type 1 for the vocabulary, 3 for added tokens marked
 * special, 4 for other added tokens, merges as "left right" strings, bos / eos ids from
 * tokenizer_config.json. Read with jansson, independently of kite's own tokenizer.json reader. */
#ifndef KITE_TEST_TOK_GGUF_WRITER_H
#define KITE_TEST_TOK_GGUF_WRITER_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "io/gguf.h"
#include "test_util.h"

static inline void write_gguf_from_json(const char *json_rel, const char *config_rel, const char *pre, const char *path,
                                        bool llama_hparams) {
    json_error_t jerr;
    json_t *root = json_load_file(kite_test_data(json_rel), 0, &jerr);
    if (!root) fail_msg("%s: %s", json_rel, jerr.text);
    json_t *config = json_load_file(kite_test_data(config_rel), JSON_DECODE_INT_AS_REAL, &jerr);
    json_t *vocab = json_object_get(json_object_get(root, "model"), "vocab");
    json_t *merges = json_object_get(json_object_get(root, "model"), "merges");
    json_t *added = json_object_get(root, "added_tokens");
    size_t n = json_object_size(vocab);
    size_t i;
    json_t *a;
    json_array_foreach(added, i, a) {
        size_t id = (size_t)json_integer_value(json_object_get(a, "id"));
        if (id + 1 > n) n = id + 1;
    }
    const char **tokens = calloc(n, sizeof *tokens);
    int32_t *types = calloc(n, sizeof *types);
    const char *key;
    json_t *value;
    json_object_foreach(vocab, key, value) {
        tokens[json_integer_value(value)] = key;
        types[json_integer_value(value)] = 1; /* normal */
    }
    int32_t bos = -1, eos = -1;
    json_array_foreach(added, i, a) {
        size_t id = (size_t)json_integer_value(json_object_get(a, "id"));
        tokens[id] = json_string_value(json_object_get(a, "content"));
        types[id] = json_is_true(json_object_get(a, "special")) ? 3 : 4; /* control : user-defined */
        const char *bos_text = json_string_value(json_object_get(config, "bos_token"));
        const char *eos_text = json_string_value(json_object_get(config, "eos_token"));
        if (bos_text && strcmp(bos_text, tokens[id]) == 0) bos = (int32_t)id;
        if (eos_text && strcmp(eos_text, tokens[id]) == 0) eos = (int32_t)id;
    }
    for (size_t k = 0; k < n; k++) assert_non_null(tokens[k]);
    size_t n_merges = json_array_size(merges);
    char **merge_text = calloc(n_merges, sizeof *merge_text);
    json_array_foreach(merges, i, a) {
        if (json_is_string(a)) {
            merge_text[i] = strdup(json_string_value(a));
        } else {
            const char *l = json_string_value(json_array_get(a, 0)), *r = json_string_value(json_array_get(a, 1));
            merge_text[i] = malloc(strlen(l) + strlen(r) + 2);
            sprintf(merge_text[i], "%s %s", l, r);
        }
    }
    kite_gguf_writer *w = kite_gguf_writer_new();
    assert_non_null(w);
    kite_gguf_w_str(w, "general.architecture", "llama");
    kite_gguf_w_str(w, "tokenizer.ggml.model", "gpt2");
    kite_gguf_w_str(w, "tokenizer.ggml.pre", pre);
    kite_gguf_w_arr_str(w, "tokenizer.ggml.tokens", tokens, n);
    kite_gguf_w_arr_i32(w, "tokenizer.ggml.token_type", types, n);
    kite_gguf_w_arr_str(w, "tokenizer.ggml.merges", (const char *const *)merge_text, n_merges);
    if (bos >= 0) kite_gguf_w_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)bos);
    if (eos >= 0) kite_gguf_w_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)eos);
    kite_gguf_w_bool(w, "tokenizer.ggml.add_bos_token", false);
    if (llama_hparams) { /* enough for llama.cpp to load the file with vocab_only */
        kite_gguf_w_u32(w, "llama.context_length", 256);
        kite_gguf_w_u32(w, "llama.embedding_length", 64);
        kite_gguf_w_u32(w, "llama.block_count", 1);
        kite_gguf_w_u32(w, "llama.feed_forward_length", 128);
        kite_gguf_w_u32(w, "llama.attention.head_count", 4);
        kite_gguf_w_u32(w, "llama.attention.head_count_kv", 4);
        kite_gguf_w_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
        kite_gguf_w_u32(w, "llama.vocab_size", (uint32_t)n);
    }
    kite_error e = {0};
    if (kite_gguf_writer_save(w, path, &e)) fail_msg("writing %s: %s", path, e.msg);
    kite_gguf_writer_free(w);
    for (size_t k = 0; k < n_merges; k++) free(merge_text[k]);
    free(merge_text);
    free(tokens);
    free(types);
    json_decref(config);
    json_decref(root);
}


#endif
