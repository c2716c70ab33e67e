/* See llama_lib.h. */
#include "llama_lib.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

/* Larger than the real struct, so a library whose struct grew cannot write past the caller's slot; the
 * fields are then read at the offsets llama_quantize_params declares. */
typedef struct params_slot { unsigned char bytes[512]; } params_slot;

static void quiet_log(int level, const char *text, void *user_data) {
    (void)level, (void)text, (void)user_data;
}

bool llama_lib_open(llama_lib *lib, const char *dir) {
    memset(lib, 0, sizeof *lib);
    char path[4096];
    snprintf(path, sizeof path, "%s/libggml-base.so", dir);
    lib->ggml_base = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    snprintf(path, sizeof path, "%s/libllama.v0.4.0.so", dir);
    if (lib->ggml_base) lib->llama = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib->ggml_base || !lib->llama) {
        snprintf(lib->error, sizeof lib->error, "cannot open llama.cpp's libraries in %s (run npm ci in tests/oracle): %s", dir, dlerror());
        return false;
    }
    params_slot (*defaults)(void);
    void (*log_set)(void (*)(int, const char *, void *), void *);
    *(void **)&lib->model_quantize = dlsym(lib->llama, "llama_model_quantize");
    *(void **)&defaults = dlsym(lib->llama, "llama_model_quantize_default_params");
    *(void **)&log_set = dlsym(lib->llama, "llama_log_set");
    *(void **)&lib->quantize_chunk = dlsym(lib->ggml_base, "ggml_quantize_chunk");
    if (!lib->model_quantize || !defaults || !log_set || !lib->quantize_chunk) {
        snprintf(lib->error, sizeof lib->error, "llama.cpp's libraries in %s lack a quantizer symbol", dir);
        return false;
    }
    log_set(quiet_log, NULL);
    params_slot slot = defaults();
    memcpy(&lib->defaults, slot.bytes, sizeof lib->defaults);
    const llama_quantize_params *d = &lib->defaults;
    /* The defaults llama-quant.cpp documents: Q8_0 (7), types by recipe (GGML_TYPE_COUNT = 43),
     * quantize_output_tensor only, no pointers, an 8 GiB buffer in the last field. */
    if (sizeof(llama_quantize_params) != 64 || d->nthread != 0 || d->ftype != 7 || d->output_tensor_type != 43 ||
        d->token_embedding_type != 43 || d->allow_requantize || !d->quantize_output_tensor || d->only_copy || d->pure ||
        d->keep_split || d->dry_run || d->imatrix || d->kv_overrides || d->tt_overrides || d->prune_layers ||
        d->max_buf_size != 8ull * 1024 * 1024 * 1024) {
        snprintf(lib->error, sizeof lib->error, "llama_model_quantize_params in %s does not have the layout this test declares", dir);
        return false;
    }
    return true;
}
