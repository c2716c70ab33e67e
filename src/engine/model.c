/* Opening a model: detect the format, load its source, bind weights, attach a tokenizer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/engine.h"
#include "grammar/mask.h"
#include "quant/types.h"
#include "spec/dflash.h"
#include "spec/eagle3.h"

kite_model_params kite_model_default_params(void) {
    kite_model_params p = {0};
    return p;
}

static bool has_suffix(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static int open_source(kite_source *src, const char *path, kite_error *e) {
    struct stat st;
    if (stat(path, &st) != 0) return kite_fail(e, KITE_ERR_IO, "cannot open %s: no such file or folder", path);
    if (S_ISDIR(st.st_mode) || has_suffix(path, ".safetensors") || has_suffix(path, ".json")) return kite_source_open_hf(src, path, e);
    FILE *f = fopen(path, "rb");
    if (!f) return kite_fail(e, KITE_ERR_IO, "cannot open %s", path);
    unsigned char magic[4] = {0};
    size_t got = fread(magic, 1, 4, f);
    fclose(f);
    if (got == 4 && memcmp(magic, "GGUF", 4) == 0) return kite_source_open_gguf(src, path, e);
    if (got < 4) return kite_fail(e, KITE_ERR_FORMAT, "%s: file too short (%zu bytes) to be a model", path, got);
    /* llama2.c legacy checkpoints have no magic: the loader validates the header instead. */
    return kite_source_open_llama2c(src, path, e);
}

static int open_tokenizer(kite_model *m, const char *model_path, const char *tokenizer_path, kite_error *e) {
    int st;
    if (tokenizer_path) {
        if (has_suffix(tokenizer_path, ".json")) {
            /* A tokenizer_config.json beside it names BOS/EOS and add_bos_token, as in a Hugging Face folder
             * (Llama-3's tokenizer.json alone has no BOS: its post-processor is plain ByteLevel). */
            char *json = NULL, *config = NULL;
            size_t len = 0, config_len = 0;
            if ((st = kite_read_file(tokenizer_path, &json, &len, (size_t)1 << 30, e))) return st;
            char config_path[4096];
            const char *slash = strrchr(tokenizer_path, '/');
            int dir_len = slash ? (int)(slash - tokenizer_path + 1) : 0;
            int n = snprintf(config_path, sizeof config_path, "%.*stokenizer_config.json", dir_len, tokenizer_path);
            if (n > 0 && (size_t)n < sizeof config_path && access(config_path, R_OK) == 0 &&
                (st = kite_read_file(config_path, &config, &config_len, (size_t)64 << 20, e))) {
                free(json);
                return st;
            }
            st = kite_tokenizer_from_hf_json_for(&m->tokenizer, json, len, config, config_len, m->n_vocab, e);
            free(json);
            free(config);
        } else if (has_suffix(tokenizer_path, ".model")) {
            kite_mapped_file f;
            if ((st = kite_map_file(&f, tokenizer_path, e))) return st;
            st = kite_tokenizer_from_spm_model(&m->tokenizer, f.data, f.size, e);
            kite_unmap_file(&f);
        } else {
            kite_mapped_file f;
            if ((st = kite_map_file(&f, tokenizer_path, e))) return st;
            /* Every entry is read: a .bin holding more tokens than the model's vocabulary belongs to another
             * model (its first n_vocab entries would tokenize, silently wrong). */
            st = kite_tokenizer_from_llama2c(&m->tokenizer, f.data, f.size, 0, e);
            kite_unmap_file(&f);
            if (!st && m->n_vocab > 0 && kite_tokenizer_n_vocab(m->tokenizer) != m->n_vocab)
                return kite_fail(e, KITE_ERR_TOKENIZER, "tokenizer %s has %d tokens but the model's vocabulary has %d: it belongs to another model",
                                 tokenizer_path, kite_tokenizer_n_vocab(m->tokenizer), m->n_vocab);
        }
    } else if (m->src.gguf) {
        st = kite_tokenizer_from_gguf(&m->tokenizer, m->src.gguf, e);
    } else if (m->src.tokenizer_json[0]) {
        char *json = NULL, *config = NULL;
        size_t len = 0, config_len = 0;
        if ((st = kite_read_file(m->src.tokenizer_json, &json, &len, (size_t)1 << 30, e))) return st;
        if (m->src.tokenizer_config_json[0] &&
            (st = kite_read_file(m->src.tokenizer_config_json, &config, &config_len, (size_t)64 << 20, e))) {
            free(json);
            return st;
        }
        st = kite_tokenizer_from_hf_json_for(&m->tokenizer, json, len, config, config_len, m->n_vocab, e);
        free(json);
        free(config);
    } else {
        return kite_fail(e, KITE_ERR_TOKENIZER, "%s has no tokenizer: pass one with --tokenizer PATH (a llama2.c tokenizer .bin or a tokenizer.json)",
                         model_path);
    }
    if (st) {
        char inner[sizeof e->msg];
        snprintf(inner, sizeof inner, "%s", e->msg);
        return kite_fail(e, st, "tokenizer of %s: %s", tokenizer_path ? tokenizer_path : model_path, inner);
    }
    if (m->n_vocab > 0 && kite_tokenizer_n_vocab(m->tokenizer) > m->n_vocab)
        return kite_fail(e, KITE_ERR_FORMAT, "tokenizer %s has %d tokens but the model's vocabulary has %d: it belongs to another model",
                         tokenizer_path ? tokenizer_path : model_path, kite_tokenizer_n_vocab(m->tokenizer), m->n_vocab);
    return KITE_OK;
}

int kite_model_open(kite_model **out, const char *path, const kite_model_params *params, char *err, size_t err_size) {
    kite_error e = {0};
    kite_model_params defaults = kite_model_default_params();
    if (!params) params = &defaults;
    if (out) *out = NULL;
    if (!out || (!path && !(params->vocab_only && params->tokenizer_path))) {
        kite_fail(&e, KITE_ERR_INVALID_ARG, "kite_model_open: model and path must not be NULL");
        return kite_error_export(&e, err, err_size);
    }
    kite_model *m = calloc(1, sizeof *m);
    if (!m) {
        kite_fail(&e, KITE_ERR_NOMEM, "out of memory");
        return kite_error_export(&e, err, err_size);
    }
    m->vocab_only = params->vocab_only;
    pthread_mutex_init(&m->cost_lock, NULL);
    pthread_mutex_init(&m->vocab_lock, NULL);
    int st = KITE_OK;
    if (path && kite_dflash_file_is_drafter(path)) {
        /* A DFlash drafter: likewise a drafter only, with the target's tokenizer (opened whole even for
         * vocab_only, the drafter being its own description: kite inspect). */
        if ((st = kite_dflash_open(&m->dflash, path, &e))) {
            kite_model_free(m);
            return kite_error_export(&e, err, err_size);
        }
        m->n_vocab = kite_dflash_n_vocab(m->dflash);
        m->n_threads = params->n_threads > 0 ? params->n_threads : kite_cpu_count();
        m->gen_defaults = kite_gen_default_params();
        kite_log(KITE_LOG_INFO, "loaded %s: a DFlash drafter, %d layers, dim %d, block %d", path, kite_dflash_n_layers(m->dflash),
                 kite_dflash_dim(m->dflash), kite_dflash_block_size(m->dflash));
        *out = m;
        return KITE_OK;
    }
    if (path && kite_eagle3_file_is_head(path)) {
        /* An EAGLE-3 head: a drafter only (kite_spec_params.draft_model), with the target's tokenizer. */
        if ((st = kite_eagle3_open(&m->eagle3, path, &e))) {
            kite_model_free(m);
            return kite_error_export(&e, err, err_size);
        }
        m->n_vocab = kite_eagle3_n_vocab(m->eagle3);
        m->n_threads = params->n_threads > 0 ? params->n_threads : kite_cpu_count();
        m->gen_defaults = kite_gen_default_params();
        kite_log(KITE_LOG_INFO, "loaded %s: an EAGLE-3 draft head, dim %d", path, kite_eagle3_dim(m->eagle3));
        *out = m;
        return KITE_OK;
    }
    if (path) {
        if ((st = open_source(&m->src, path, &e))) { free(m); return kite_error_export(&e, err, err_size); }
        m->n_vocab = m->src.hp.n_vocab;
    }
    if (!m->vocab_only) st = kite_weights_bind(&m->weights, &m->src, params->progress, params->progress_user_data, &e);
    if (!st) st = open_tokenizer(m, path ? path : params->tokenizer_path, params->tokenizer_path, &e);
    if (st) {
        kite_model_free(m);
        return kite_error_export(&e, err, err_size);
    }
    if (!path) m->n_vocab = kite_tokenizer_n_vocab(m->tokenizer);
    m->n_threads = params->n_threads > 0 ? params->n_threads : kite_cpu_count();
    m->gen_defaults = path ? m->src.gen_defaults : kite_gen_default_params();
    kite_log(KITE_LOG_INFO, "loaded %s: %s, %d layers, dim %d, vocab %d", path ? path : params->tokenizer_path,
             m->src.format, m->src.hp.n_layers, m->src.hp.dim, m->n_vocab);
    *out = m;
    return KITE_OK;
}

void kite_model_free(kite_model *m) {
    if (!m) return;
    kite_tokenizer_free(m->tokenizer);
    kite_eagle3_free(m->eagle3);
    kite_dflash_free(m->dflash);
    kite_weights_free(&m->weights);
    kite_source_close(&m->src);
    pthread_mutex_destroy(&m->cost_lock);
    pthread_mutex_destroy(&m->vocab_lock);
    kite_vocab_index_free(m->vocab_index);
    free(m);
}

static const char *arch_name(kite_arch a) {
    switch (a) {
    case KITE_ARCH_LLAMA: return "llama";
    case KITE_ARCH_QWEN2: return "qwen2";
    case KITE_ARCH_QWEN3: return "qwen3";
    case KITE_ARCH_GEMMA3: return "gemma3";
    case KITE_ARCH_QWEN3MOE: return "qwen3moe";
    case KITE_ARCH_LFM2: return "lfm2";
    case KITE_ARCH_GEMMA4: return "gemma4";
    case KITE_ARCH_MUSE_GLIMMER: return "muse-glimmer";
    case KITE_ARCH_QWEN35: return "qwen35";
    }
    return "unknown";
}

void kite_model_get_info(const kite_model *m, kite_model_info *info) {
    memset(info, 0, sizeof *info);
    if (m->eagle3 || m->dflash) { /* a drafter: no source of its own */
        snprintf(info->architecture, sizeof info->architecture, "%s", m->eagle3 ? "eagle3" : "dflash");
        snprintf(info->format, sizeof info->format, "gguf");
        snprintf(info->tokenizer, sizeof info->tokenizer, "none");
        info->n_vocab = m->n_vocab;
        info->dim = m->eagle3 ? kite_eagle3_dim(m->eagle3) : kite_dflash_dim(m->dflash);
        info->n_layers = m->eagle3 ? 1 : kite_dflash_n_layers(m->dflash);
        info->bos_id = info->eos_id = -1;
        info->draft_mask_token = -1;
        const int32_t *layers = NULL;
        int32_t n = 3;
        if (m->eagle3) {
            layers = kite_eagle3_target_layers(m->eagle3);
        } else {
            layers = kite_dflash_target_layers(m->dflash, &n);
            info->draft_block_size = kite_dflash_block_size(m->dflash);
            info->draft_mask_token = kite_dflash_mask_token(m->dflash);
            info->draft_selector_top_k = kite_dflash_selector_top_k(m->dflash);
            info->draft_markov_rank = kite_dflash_markov_rank(m->dflash);
        }
        const int32_t cap = (int32_t)(sizeof info->draft_target_layers / sizeof info->draft_target_layers[0]);
        info->n_draft_target_layers = n < cap ? n : cap;
        for (int32_t i = 0; i < info->n_draft_target_layers; i++) info->draft_target_layers[i] = layers[i];
        return;
    }
    const kite_hparams *hp = &m->src.hp;
    snprintf(info->architecture, sizeof info->architecture, "%s", m->src.n_tensors ? arch_name(hp->arch) : "none");
    snprintf(info->format, sizeof info->format, "%s", m->src.format);
    snprintf(info->tokenizer, sizeof info->tokenizer, "%s",
             !m->tokenizer ? "none" : kite_tokenizer_kind_of(m->tokenizer) == KITE_TOKENIZER_SPM ? "spm" : "bpe");
    info->n_vocab = m->n_vocab;
    info->dim = hp->dim;
    info->n_layers = hp->n_layers;
    info->n_heads = hp->n_heads;
    info->n_kv_heads = hp->n_kv_heads;
    info->head_dim = hp->head_dim;
    info->ffn_dim = hp->ffn_dim;
    info->n_experts = hp->n_experts;
    info->n_experts_used = hp->n_experts_used;
    info->expert_ffn_dim = hp->expert_ffn_dim;
    info->n_recurrent_layers = 0;
    for (int32_t l = 0; l < hp->n_layers; l++) info->n_recurrent_layers += kite_layer_is_recurrent(hp, l);
    info->recurrent_k_heads = hp->dn_n_k_heads;
    info->recurrent_v_heads = hp->dn_n_v_heads;
    info->recurrent_head_dim = hp->dn_head_k_dim;
    info->n_mtp_layers = hp->n_nextn_layers;
    for (int32_t l = 0; l < hp->n_layers; l++) info->n_conv_layers += kite_layer_is_conv(hp, l);
    info->conv_taps = info->n_conv_layers > 0 ? hp->conv_taps : 0;
    info->sliding_window = hp->sliding_window;
    info->n_local_layers = 0;
    info->head_dim_local = hp->head_dim;
    info->n_kv_heads_local = hp->n_kv_heads;
    for (int32_t l = 0; l < hp->n_layers; l++)
        if (kite_layer_is_local(hp, l)) {
            info->n_local_layers++;
            info->head_dim_local = kite_layer_head_dim(hp, l);
            info->n_kv_heads_local = kite_layer_kv_heads(hp, l);
        }
    info->n_ctx_train = hp->n_ctx_train;
    info->rope_theta = hp->rope_theta;
    info->rms_eps = hp->rms_eps;
    info->tied_embeddings = hp->tied_embeddings;
    info->bos_id = m->tokenizer ? kite_tokenizer_bos(m->tokenizer) : -1;
    info->eos_id = m->tokenizer ? kite_tokenizer_eos(m->tokenizer) : -1;
    info->add_bos = m->tokenizer ? kite_tokenizer_add_bos(m->tokenizer) : false;
    info->n_tensors = m->src.n_tensors;
    for (int32_t i = 0; i < m->src.n_tensors; i++) {
        const kite_tensor *t = &m->src.tensors[i];
        info->n_params += t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
        info->weight_bytes += t->n_bytes;
    }
}

int kite_model_tensor(const kite_model *m, int32_t index, kite_tensor_desc *desc) {
    if (!m || !desc || index < 0 || index >= m->src.n_tensors) return KITE_ERR_INVALID_ARG;
    const kite_tensor *t = &m->src.tensors[index];
    const kite_type_traits *tr = kite_type_get(t->type);
    desc->name = t->name;
    desc->type_name = tr ? tr->name : "?";
    desc->n_dims = (int32_t)t->n_dims;
    for (int i = 0; i < 4; i++) desc->shape[i] = t->ne[i];
    desc->n_bytes = t->n_bytes;
    return KITE_OK;
}

kite_gen_params kite_model_gen_params(const kite_model *m) { return m->gen_defaults; }

int kite_model_refuse_drafter(const kite_model *m, kite_error *e) {
    if (!m->eagle3 && !m->dflash) return KITE_OK;
    return kite_fail(e, KITE_ERR_INVALID_ARG, "the file is %s, not a model to run: it drafts for its target model "
                     "(kite run --model TARGET --draft THIS_FILE; kite_spec_params.draft_model), with the target's tokenizer",
                     m->eagle3 ? "an EAGLE-3 draft head" : "a DFlash drafter");
}

/* A drafter (or a model opened without one) has no tokenizer to encode or decode with: say which. */
static int no_tokenizer(const kite_model *m, kite_error *e) {
    if (m->tokenizer) return KITE_OK;
    int rc = kite_model_refuse_drafter(m, e);
    return rc ? rc : kite_fail(e, KITE_ERR_TOKENIZER, "the model has no tokenizer");
}

int kite_tokenize(const kite_model *m, const char *text, size_t text_len, bool add_bos, bool parse_special, int32_t *ids,
                  size_t capacity, size_t *n_ids, char *err, size_t err_size) {
    kite_error e = {0};
    int32_t *tmp = NULL;
    size_t n = 0;
    if (n_ids) *n_ids = 0;
    if (!m || (!text && text_len)) {
        kite_fail(&e, KITE_ERR_INVALID_ARG, "kite_tokenize: model and text must not be NULL");
        return kite_error_export(&e, err, err_size);
    }
    if (no_tokenizer(m, &e)) return kite_error_export(&e, err, err_size);
    if (kite_tokenizer_encode(m->tokenizer, text ? text : "", text_len, add_bos, parse_special, &tmp, &n, &e))
        return kite_error_export(&e, err, err_size);
    if (n_ids) *n_ids = n;
    if (n > capacity) {
        free(tmp);
        if (capacity == 0 && !ids) return KITE_OK; /* measuring */
        kite_fail(&e, KITE_ERR_INVALID_ARG, "kite_tokenize: %zu ids do not fit in a buffer of %zu", n, capacity);
        return kite_error_export(&e, err, err_size);
    }
    if (n) memcpy(ids, tmp, n * sizeof *ids);
    free(tmp);
    return KITE_OK;
}

int kite_detokenize(const kite_model *m, const int32_t *ids, size_t n_ids, char *text, size_t capacity, size_t *n_bytes,
                    char *err, size_t err_size) {
    kite_error e = {0};
    char *tmp = NULL;
    size_t len = 0;
    if (n_bytes) *n_bytes = 0;
    if (!m || (!ids && n_ids)) {
        kite_fail(&e, KITE_ERR_INVALID_ARG, "kite_detokenize: model and ids must not be NULL");
        return kite_error_export(&e, err, err_size);
    }
    for (size_t i = 0; i < n_ids; i++)
        if (ids[i] < 0 || ids[i] >= m->n_vocab) {
            kite_fail(&e, KITE_ERR_INVALID_ARG, "token id %d at index %zu is outside the vocabulary (0..%d)", ids[i], i,
                      m->n_vocab - 1);
            return kite_error_export(&e, err, err_size);
        }
    if (no_tokenizer(m, &e) || kite_tokenizer_decode(m->tokenizer, ids, n_ids, &tmp, &len, &e))
        return kite_error_export(&e, err, err_size);
    if (n_bytes) *n_bytes = len;
    if (text && capacity) {
        size_t copy = len < capacity ? len : capacity;
        memcpy(text, tmp, copy);
        if (copy < capacity) text[copy] = 0;
    }
    free(tmp);
    return KITE_OK;
}
