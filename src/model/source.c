/* Generic helpers shared by the loaders (GGUF, safetensors, llama2.c). */
#include "model/source.h"

#include <stdlib.h>
#include <string.h>

/* Capacity is implicit: 64 slots, doubled whenever the count reaches a power of two >= 64. */
static int reserve_slot(kite_source *src, kite_error *e) {
    int32_t n = src->n_tensors;
    bool full = n == 0 || (n >= 64 && (n & (n - 1)) == 0);
    if (!full) return KITE_OK;
    if (n >= (1 << 20)) return kite_fail(e, KITE_ERR_FORMAT, "%s: more than %d tensors", src->format, 1 << 20);
    size_t cap = n == 0 ? 64 : (size_t)n * 2;
    kite_tensor *grown = realloc(src->tensors, cap * sizeof *grown);
    if (!grown) return kite_fail(e, KITE_ERR_NOMEM, "out of memory for the tensor table");
    src->tensors = grown;
    return KITE_OK;
}

static uint32_t name_hash(const char *s) {
    uint32_t h = 2166136261u; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

static void index_insert(int32_t *table, uint32_t cap, const char *name, int32_t i) {
    for (uint32_t at = name_hash(name) & (cap - 1);; at = (at + 1) & (cap - 1))
        if (!table[at]) {
            table[at] = i + 1;
            return;
        }
}

/* Keeps the table at most half full (rebuilt at twice the size when it would pass that). */
static int index_reserve(kite_source *src, kite_error *e) {
    uint64_t need = 2 * ((uint64_t)src->n_tensors + 1);
    if (need <= src->name_index_cap) return KITE_OK;
    uint32_t cap = src->name_index_cap ? src->name_index_cap : 256;
    while (cap < need) cap *= 2;
    int32_t *table = calloc(cap, sizeof *table);
    if (!table) return kite_fail(e, KITE_ERR_NOMEM, "out of memory for the tensor table");
    for (int32_t i = 0; i < src->n_tensors; i++) index_insert(table, cap, src->tensors[i].name, i);
    free(src->name_index);
    src->name_index = table;
    src->name_index_cap = cap;
    return KITE_OK;
}

kite_tensor *kite_source_add_tensor(kite_source *src, const char *name, uint32_t type, uint32_t n_dims,
                                    const int64_t *ne, const void *data, uint64_t n_bytes, kite_error *e) {
    size_t len = strlen(name);
    if (len == 0 || len >= sizeof src->tensors[0].name) {
        kite_fail(e, KITE_ERR_FORMAT, "%s: tensor name '%.96s' is empty or longer than %zu bytes", src->format, name,
                  sizeof src->tensors[0].name - 1);
        return NULL;
    }
    if (n_dims < 1 || n_dims > 4) {
        kite_fail(e, KITE_ERR_FORMAT, "%s: tensor '%s' has %u dimensions (1..4 allowed)", src->format, name, n_dims);
        return NULL;
    }
    for (uint32_t i = 0; i < n_dims; i++) {
        if (ne[i] < 1) {
            kite_fail(e, KITE_ERR_FORMAT, "%s: tensor '%s' has dimension %u = %lld", src->format, name, i, (long long)ne[i]);
            return NULL;
        }
    }
    if (kite_source_find(src, name)) {
        kite_fail(e, KITE_ERR_FORMAT, "%s: tensor '%s' appears twice", src->format, name);
        return NULL;
    }
    if (reserve_slot(src, e) || index_reserve(src, e)) return NULL;
    kite_tensor *t = &src->tensors[src->n_tensors++];
    memset(t, 0, sizeof *t);
    memcpy(t->name, name, len + 1);
    t->type = type;
    t->n_dims = n_dims;
    for (int i = 0; i < 4; i++) t->ne[i] = (uint32_t)i < n_dims ? ne[i] : 1;
    t->n_bytes = n_bytes;
    t->data = data;
    index_insert(src->name_index, src->name_index_cap, t->name, src->n_tensors - 1);
    return t;
}

const kite_tensor *kite_source_find(const kite_source *src, const char *name) {
    if (src->name_index_cap) {
        for (uint32_t at = name_hash(name) & (src->name_index_cap - 1);; at = (at + 1) & (src->name_index_cap - 1)) {
            int32_t i = src->name_index[at] - 1;
            if (i < 0) return NULL;
            if (strcmp(src->tensors[i].name, name) == 0) return &src->tensors[i];
        }
    }
    for (int32_t i = 0; i < src->n_tensors; i++)
        if (strcmp(src->tensors[i].name, name) == 0) return &src->tensors[i];
    return NULL;
}

void kite_source_close(kite_source *src) {
    if (!src) return;
    free(src->tensors);
    free(src->name_index);
    if (src->gguf) kite_gguf_free(src->gguf);
    for (int32_t i = 0; i < src->n_maps && i < (int32_t)(sizeof src->maps / sizeof src->maps[0]); i++)
        kite_unmap_file(&src->maps[i]);
    for (int32_t i = 0; i < src->n_buffers && i < (int32_t)(sizeof src->buffers / sizeof src->buffers[0]); i++)
        free(src->buffers[i]);
    memset(src, 0, sizeof *src);
}
