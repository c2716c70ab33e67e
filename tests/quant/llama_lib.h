/* llama.cpp's own quantizer as a test oracle: libllama / libggml-base from node-llama-cpp's prebuilt
 * binaries (tests/oracle/node_modules), opened with dlopen. The few declarations below restate this
 * exact version's llama.h / ggml.h (node-llama-cpp 3.21.1, llama.cpp "v0.4.0" bundle); llama_lib_open
 * checks the parameter struct's layout against the defaults the library itself returns. */
#ifndef KITE_TEST_LLAMA_LIB_H
#define KITE_TEST_LLAMA_LIB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* struct llama_model_imatrix_data */
typedef struct llama_imatrix_data {
    const char *name;
    const float *data;
    size_t size;   /* floats */
} llama_imatrix_data;

/* struct llama_model_quantize_params (64 bytes on LP64) */
typedef struct llama_quantize_params {
    int32_t nthread;
    int32_t ftype;                 /* enum llama_ftype */
    int32_t output_tensor_type;    /* enum ggml_type; GGML_TYPE_COUNT (43) = by recipe */
    int32_t token_embedding_type;
    bool allow_requantize, quantize_output_tensor, only_copy, pure, keep_split, dry_run;
    const llama_imatrix_data *imatrix; /* terminated by a NULL name */
    const void *kv_overrides;
    const void *tt_overrides;
    const int32_t *prune_layers;
    size_t max_buf_size;
} llama_quantize_params;

typedef struct llama_lib {
    void *llama, *ggml_base;
    uint32_t (*model_quantize)(const char *in, const char *out, const llama_quantize_params *p);
    size_t (*quantize_chunk)(int type, const float *src, void *dst, int64_t start, int64_t nrows, int64_t n_per_row,
                             const float *imatrix);
    llama_quantize_params defaults;
    char error[512];
} llama_lib;

/* Opens the libraries in dir; false with lib->error set when they or a symbol are missing, or the
 * defaults do not have the expected layout. */
bool llama_lib_open(llama_lib *lib, const char *dir);

#endif
