#include "io/safetensors.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "quant/types.h"

/* Maps a safetensors dtype to a kite type and its element size; false for dtypes kite does not run. */
static bool dtype_to_type(const char *dtype, uint32_t *type, uint64_t *elem_size) {
    if (strcmp(dtype, "F32") == 0) { *type = KITE_TYPE_F32; *elem_size = 4; return true; }
    if (strcmp(dtype, "F16") == 0) { *type = KITE_TYPE_F16; *elem_size = 2; return true; }
    if (strcmp(dtype, "BF16") == 0) { *type = KITE_TYPE_BF16; *elem_size = 2; return true; }
    return false;
}

/* A JSON integer >= 0 (jansson keeps integers as long long, so no value exceeds INT64_MAX). */
static bool json_get_u64(const json_t *v, uint64_t *out) {
    if (!json_is_integer(v)) return false;
    json_int_t i = json_integer_value(v);
    if (i < 0) return false;
    *out = (uint64_t)i;
    return true;
}

static int parse_entry(kite_safetensors_tensor *t, const char *name, const json_t *desc, const unsigned char *base,
                       uint64_t data_start, uint64_t data_size, const char *label, kite_error *e) {
    if (!json_is_object(desc)) return kite_fail(e, KITE_ERR_FORMAT, "%s: tensor '%s': entry is not an object", label, name);
    const json_t *jdtype = json_object_get(desc, "dtype");
    const json_t *jshape = json_object_get(desc, "shape");
    const json_t *joffs = json_object_get(desc, "data_offsets");
    if (!json_is_string(jdtype)) return kite_fail(e, KITE_ERR_FORMAT, "%s: tensor '%s': missing or non-string \"dtype\"", label, name);
    if (!json_is_array(jshape)) return kite_fail(e, KITE_ERR_FORMAT, "%s: tensor '%s': missing or non-array \"shape\"", label, name);
    if (!json_is_array(joffs) || json_array_size(joffs) != 2)
        return kite_fail(e, KITE_ERR_FORMAT, "%s: tensor '%s': \"data_offsets\" must be an array of 2 integers", label, name);

    const char *dtype = json_string_value(jdtype);
    uint64_t elem_size = 0;
    if (!dtype_to_type(dtype, &t->type, &elem_size))
        return kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %.32s; kite reads F32, F16 and BF16", label, name, dtype);

    size_t n_dims = json_array_size(jshape);
    if (n_dims < 1 || n_dims > 4)
        return kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: tensor '%s' has %zu dimensions; kite reads 1 to 4", label, name, n_dims);
    t->n_dims = (uint32_t)n_dims;
    for (int i = 0; i < 4; i++) t->ne[i] = 1;
    uint64_t n_elems = 1;
    for (size_t i = 0; i < n_dims; i++) {
        uint64_t d;
        if (!json_get_u64(json_array_get(jshape, i), &d) || d == 0)
            return kite_fail(e, KITE_ERR_FORMAT, "%s: tensor '%s': shape[%zu] is not a positive integer", label, name, i);
        if (n_elems > UINT64_MAX / d)
            return kite_fail(e, KITE_ERR_FORMAT, "%s: tensor '%s': shape overflows 64 bits", label, name);
        n_elems *= d;
        t->ne[n_dims - 1 - i] = (int64_t)d; /* JSON lists the outermost dimension first */
    }
    if (n_elems > UINT64_MAX / elem_size)
        return kite_fail(e, KITE_ERR_FORMAT, "%s: tensor '%s': byte size overflows 64 bits", label, name);
    uint64_t want_bytes = n_elems * elem_size;

    uint64_t begin, end;
    if (!json_get_u64(json_array_get(joffs, 0), &begin) || !json_get_u64(json_array_get(joffs, 1), &end))
        return kite_fail(e, KITE_ERR_FORMAT, "%s: tensor '%s': data_offsets are not non-negative integers", label, name);
    if (begin > end || end > data_size)
        return kite_fail(e, KITE_ERR_FORMAT,
                         "%s: tensor '%s': data_offsets [%llu, %llu) outside the data section of %llu bytes (truncated file?)",
                         label, name, (unsigned long long)begin, (unsigned long long)end, (unsigned long long)data_size);
    if (end - begin != want_bytes)
        return kite_fail(e, KITE_ERR_FORMAT, "%s: tensor '%s': data_offsets span %llu bytes but its shape and dtype need %llu",
                         label, name, (unsigned long long)(end - begin), (unsigned long long)want_bytes);
    t->offset = data_start + begin;
    t->n_bytes = want_bytes;
    t->data = base + t->offset;
    t->name = strdup(name);
    if (!t->name) return kite_fail(e, KITE_ERR_NOMEM, "%s: out of memory", label);
    return KITE_OK;
}

static int compare_by_offset(const void *a, const void *b) {
    const kite_safetensors_tensor *x = *(const kite_safetensors_tensor *const *)a;
    const kite_safetensors_tensor *y = *(const kite_safetensors_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Rejects tensors whose byte ranges overlap: each must own its bytes. */
static int check_no_overlap(kite_safetensors *st, const char *label, kite_error *e) {
    if (st->n_tensors < 2) return KITE_OK;
    kite_safetensors_tensor **order = malloc((size_t)st->n_tensors * sizeof *order);
    if (!order) return kite_fail(e, KITE_ERR_NOMEM, "%s: out of memory", label);
    for (int64_t i = 0; i < st->n_tensors; i++) order[i] = &st->tensors[i];
    qsort(order, (size_t)st->n_tensors, sizeof *order, compare_by_offset);
    int rc = KITE_OK;
    for (int64_t i = 1; i < st->n_tensors; i++) {
        const kite_safetensors_tensor *prev = order[i - 1], *cur = order[i];
        if (prev->offset + prev->n_bytes > cur->offset) {
            rc = kite_fail(e, KITE_ERR_FORMAT, "%s: tensors '%s' and '%s' overlap in the data section", label, prev->name,
                           cur->name);
            break;
        }
    }
    free(order);
    return rc;
}

int kite_safetensors_parse(kite_safetensors *st, const void *data, size_t size, const char *label, kite_error *e) {
    memset(st, 0, sizeof *st);
    const unsigned char *bytes = data;
    if (size < 8) return kite_fail(e, KITE_ERR_FORMAT, "%s: %zu bytes is too short for a safetensors file", label, size);
    uint64_t header_size = 0;
    for (int i = 7; i >= 0; i--) header_size = (header_size << 8) | bytes[i];
    if (header_size > KITE_SAFETENSORS_MAX_HEADER)
        return kite_fail(e, KITE_ERR_FORMAT, "%s: header length %llu exceeds the %u-byte limit (not a safetensors file?)",
                         label, (unsigned long long)header_size, KITE_SAFETENSORS_MAX_HEADER);
    if (header_size < 2 || header_size > size - 8)
        return kite_fail(e, KITE_ERR_FORMAT, "%s: header length %llu does not fit in a file of %zu bytes", label,
                         (unsigned long long)header_size, size);
    if (bytes[8] != '{')
        return kite_fail(e, KITE_ERR_FORMAT, "%s: header does not start with '{' (not a safetensors file?)", label);

    json_error_t jerr;
    json_t *root = json_loadb((const char *)bytes + 8, (size_t)header_size, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) return kite_fail(e, KITE_ERR_FORMAT, "%s: header JSON: %s (at byte %d)", label, jerr.text, jerr.position);
    int rc = KITE_OK;
    if (!json_is_object(root)) {
        rc = kite_fail(e, KITE_ERR_FORMAT, "%s: header is not a JSON object", label);
        goto done;
    }
    size_t n_entries = json_object_size(root);
    st->tensors = calloc(n_entries ? n_entries : 1, sizeof *st->tensors);
    if (!st->tensors) { rc = kite_fail(e, KITE_ERR_NOMEM, "%s: out of memory", label); goto done; }
    st->header_size = header_size;
    uint64_t data_start = 8 + header_size;
    uint64_t data_size = (uint64_t)size - data_start;
    const char *key;
    json_t *value;
    json_object_foreach(root, key, value) {
        if (strcmp(key, "__metadata__") == 0) continue;
        if (key[0] == 0) { rc = kite_fail(e, KITE_ERR_FORMAT, "%s: a tensor has an empty name", label); goto done; }
        rc = parse_entry(&st->tensors[st->n_tensors], key, value, bytes, data_start, data_size, label, e);
        if (rc) goto done;
        st->n_tensors++;
    }
    rc = check_no_overlap(st, label, e);
done:
    json_decref(root);
    if (rc) kite_safetensors_free(st);
    return rc;
}

void kite_safetensors_free(kite_safetensors *st) {
    if (!st) return;
    for (int64_t i = 0; i < st->n_tensors; i++) free(st->tensors[i].name);
    free(st->tensors);
    memset(st, 0, sizeof *st);
}

const kite_safetensors_tensor *kite_safetensors_find(const kite_safetensors *st, const char *name) {
    for (int64_t i = 0; i < st->n_tensors; i++)
        if (strcmp(st->tensors[i].name, name) == 0) return &st->tensors[i];
    return NULL;
}
