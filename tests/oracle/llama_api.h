/* node-llama-cpp's prebuilt libllama, dlopen'ed, with the few calls the EAGLE-3, DFlash and MTP comparisons need
 * (types from the bundled source's llama.h). The functions of llama.cpp's src/llama-ext.h are C++
 * declarations: they are looked up by their mangled names, whose signatures are plain C types. */
#ifndef KITE_TESTS_ORACLE_LLAMA_API_H
#define KITE_TESTS_ORACLE_LLAMA_API_H

#include <stdbool.h>
#include <stddef.h>

#include "llama.h"

typedef struct llama_api {
    void *ggml, *llama;
    void (*backend_init)(void);
    void (*log_set)(ggml_log_callback, void *);
    struct llama_model_params (*model_default_params)(void);
    struct llama_context_params (*context_default_params)(void);
    struct llama_model *(*model_load)(const char *, struct llama_model_params);
    void (*model_free)(struct llama_model *);
    struct llama_context *(*init_from_model)(struct llama_model *, struct llama_context_params);
    void (*free_ctx)(struct llama_context *);
    int32_t (*decode)(struct llama_context *, struct llama_batch);
    int32_t (*encode)(struct llama_context *, struct llama_batch);
    float *(*get_logits_ith)(struct llama_context *, int32_t);
    void (*ggml_load_all_from_path)(const char *);
    void (*set_causal_attn)(struct llama_context *, bool);
    /* src/llama-ext.h */
    void (*set_layer_inp)(struct llama_context *, uint32_t, bool);
    float *(*get_layer_inp)(struct llama_context *, uint32_t);
    void (*set_nextn)(struct llama_context *, bool, bool);
    float *(*get_nextn)(struct llama_context *);
    float *(*get_nextn_ith)(struct llama_context *, int32_t);
    const int32_t *(*target_layer_ids)(const struct llama_model *);
    uint32_t (*target_layer_ids_n)(const struct llama_model *);
    int32_t (*dflash_selector_top_k)(const struct llama_model *);
} llama_api;


/* Opens the libraries in dir, loads the CPU backends, quiets the log. Non-zero (why says what is
 * missing) on failure. */
int llama_api_open(llama_api *api, const char *dir, char *why, size_t why_size);

/* Context parameters for comparing with kite: 256 positions, batches of 256, one thread, f32 K and V
 * caches and flash attention off (with llama.cpp's defaults, f16 caches and flash attention on CPU, the
 * queries are rounded to f16, ~1e-3 of the features). */
struct llama_context_params llama_api_exact_context(const llama_api *api);
/* A batch of n rows on sequence 0, zeroed: with token ids when tokens, with embd floats a row when embd
 * > 0 (llama.cpp reads the ids when both are given). llama_api_batch_free frees it. */
struct llama_batch llama_api_batch(int32_t n, bool tokens, int32_t embd);
void llama_api_batch_free(struct llama_batch *b);
/* The index of the largest of x[0 .. n) (the first of equals). */
int32_t llama_api_argmax(const float *x, int32_t n);

#endif
