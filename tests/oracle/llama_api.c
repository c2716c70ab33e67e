/* See llama_api.h. */
#include "llama_api.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
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


struct llama_context_params llama_api_exact_context(const llama_api *api) {
    struct llama_context_params cp = api->context_default_params();
    cp.n_ctx = 256, cp.n_batch = 256, cp.n_ubatch = 256, cp.n_threads = 1, cp.n_threads_batch = 1;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.type_k = cp.type_v = GGML_TYPE_F32;
    return cp;
}

struct llama_batch llama_api_batch(int32_t n, bool tokens, int32_t embd) {
    struct llama_batch b = {0};
    b.n_tokens = n;
    b.token = tokens ? calloc((size_t)n, sizeof *b.token) : NULL;
    b.embd = embd > 0 ? calloc((size_t)n * (size_t)embd, sizeof(float)) : NULL;
    b.pos = calloc((size_t)n, sizeof *b.pos);
    b.n_seq_id = calloc((size_t)n, sizeof *b.n_seq_id);
    b.seq_id = calloc((size_t)n, sizeof *b.seq_id);
    b.logits = calloc((size_t)n, sizeof *b.logits);
    static llama_seq_id seq0 = 0;
    for (int32_t i = 0; i < n; i++) b.n_seq_id[i] = 1, b.seq_id[i] = &seq0;
    return b;
}

void llama_api_batch_free(struct llama_batch *b) {
    free(b->token); free(b->embd); free(b->pos); free(b->n_seq_id); free(b->seq_id); free(b->logits);
}

int32_t llama_api_argmax(const float *x, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++) if (x[i] > x[best]) best = i;
    return best;
}
