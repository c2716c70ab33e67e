/* A model source: the hyper-parameters and canonical tensors one checkpoint provides, whatever its
 * format, plus what must stay alive while they are used. See tensors.h for the canonical names. */
#ifndef KITE_MODEL_SOURCE_H
#define KITE_MODEL_SOURCE_H

#include "io/gguf.h"
#include "io/mmap.h"
#include "model/tensors.h"

typedef struct kite_source {
    kite_hparams hp;
    kite_tensor *tensors;  /* n_tensors, malloc'd; data points into maps or buffers */
    int32_t n_tensors;
    int32_t *name_index;   /* [name_index_cap] open-addressing table of tensor index + 1 by name hash (0: empty), so
                              finding one of a Hugging Face MoE folder's ~19k tensors is not a scan of them all */
    uint32_t name_index_cap; /* a power of two, at least twice n_tensors; 0 while there is no table */
    char format[16];       /* "gguf", "safetensors", "llama2c" */

    kite_mapped_file maps[64]; /* files kept mapped while the tensors are in use */
    int32_t n_maps;
    void *buffers[16];         /* converted tensor data owned by the source (e.g. repacked) */
    int32_t n_buffers;

    kite_gguf *gguf;           /* GGUF only: its metadata holds the tokenizer */
    char tokenizer_json[4096]; /* HF only: path of tokenizer.json, "" if the folder has none */
    char tokenizer_config_json[4096]; /* HF only: path of tokenizer_config.json, "" if none */
    char chat_template_jinja[4096];   /* HF only: path of chat_template.jinja, "" if none (the chat
                                         template is read from it, else from tokenizer_config.json) */

    /* Sampling defaults from generation_config.json (HF), overlaid on kite_gen_default_params(). */
    kite_gen_params gen_defaults;
    int32_t bos_id, eos_id;    /* from config.json when given there, else -1 */
} kite_source;

/* Each fills *src (zeroing it first) or fails with a one-line message naming the file and the fault;
 * on failure nothing needs closing. */
int kite_source_open_gguf(kite_source *src, const char *path, kite_error *e);
/* path: a Hugging Face folder, or a .safetensors file / model.safetensors.index.json inside one. */
int kite_source_open_hf(kite_source *src, const char *path, kite_error *e);
/* A llama2.c legacy (version 0) checkpoint. */
int kite_source_open_llama2c(kite_source *src, const char *path, kite_error *e);
void kite_source_close(kite_source *src);

/* Helpers for loaders. */
kite_tensor *kite_source_add_tensor(kite_source *src, const char *name, uint32_t type, uint32_t n_dims,
                                    const int64_t *ne, const void *data, uint64_t n_bytes, kite_error *e);
const kite_tensor *kite_source_find(const kite_source *src, const char *name);

#endif
