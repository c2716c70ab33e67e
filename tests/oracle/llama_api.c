/* See llama_api.h. */
#include "llama_api.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

static void quiet(enum ggml_log_level level, const char *text, void *user) {
    (void)level, (void)text, (void)user;
}

#define SYM(lib, field, name)                                                                       \
    do {                                                                                            \
        *(void **)&api->field = dlsym(lib, name);                                                  \
        if (!api->field) { snprintf(why, why_size, "libllama in %s lacks %s", dir, name); return -1; } \
    } while (0)

int llama_api_open(llama_api *api, const char *dir, char *why, size_t why_size) {
    memset(api, 0, sizeof *api);
    char path[4096];
    snprintf(path, sizeof path, "%s/libggml.v0.4.0.so", dir);
    api->ggml = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    snprintf(path, sizeof path, "%s/libllama.v0.4.0.so", dir);
    api->llama = api->ggml ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
    if (!api->llama) {
        snprintf(why, why_size, "cannot open llama.cpp's libraries in %s (run npm ci in tests/oracle): %s", dir, dlerror());
        return -1;
    }
    SYM(api->ggml, ggml_load_all_from_path, "ggml_backend_load_all_from_path");
    SYM(api->llama, backend_init, "llama_backend_init");
    SYM(api->llama, log_set, "llama_log_set");
    SYM(api->llama, model_default_params, "llama_model_default_params");
    SYM(api->llama, context_default_params, "llama_context_default_params");
    SYM(api->llama, model_load, "llama_model_load_from_file");
    SYM(api->llama, model_free, "llama_model_free");
    SYM(api->llama, init_from_model, "llama_init_from_model");
    SYM(api->llama, free_ctx, "llama_free");
    SYM(api->llama, decode, "llama_decode");
    SYM(api->llama, encode, "llama_encode");
    SYM(api->llama, get_logits_ith, "llama_get_logits_ith");
    SYM(api->llama, set_causal_attn, "llama_set_causal_attn");
    SYM(api->llama, set_layer_inp, "_Z30llama_set_embeddings_layer_inpP13llama_contextjb");
    SYM(api->llama, get_layer_inp, "_Z30llama_get_embeddings_layer_inpP13llama_contextj");
    SYM(api->llama, set_nextn, "_Z26llama_set_embeddings_nextnP13llama_contextbb");
    SYM(api->llama, get_nextn, "_Z26llama_get_embeddings_nextnP13llama_context");
    SYM(api->llama, get_nextn_ith, "_Z30llama_get_embeddings_nextn_ithP13llama_contexti");
    SYM(api->llama, target_layer_ids, "_Z28llama_model_target_layer_idsPK11llama_model");
    SYM(api->llama, target_layer_ids_n, "_Z30llama_model_target_layer_ids_nPK11llama_model");
    SYM(api->llama, dflash_selector_top_k, "_Z33llama_model_dflash_selector_top_kPK11llama_model");
    api->log_set(quiet, NULL);
    api->ggml_load_all_from_path(dir);
    api->backend_init();
    return 0;
}

