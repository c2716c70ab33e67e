/* safetensors reader over bytes already in memory (so it can be fuzzed).
 * Layout: u64 little-endian header length N, N bytes of JSON (an object: tensor name ->
 * {"dtype", "shape", "data_offsets": [begin, end)}, plus an ignored "__metadata__"), then the data
 * section; offsets are relative to the start of the data section. Every field is validated against
 * the buffer: offsets in range, no two tensors overlapping, end - begin == product(shape) * element
 * size (with overflow checks). Only F32, F16 and BF16 are accepted (KITE_ERR_UNSUPPORTED otherwise). */
#ifndef KITE_IO_SAFETENSORS_H
#define KITE_IO_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

/* Headers longer than this are refused: real ones are a few hundred KB at most. */
#define KITE_SAFETENSORS_MAX_HEADER (100u * 1000u * 1000u)

typedef struct kite_safetensors_tensor {
    char *name;        /* NUL-terminated, owned by the kite_safetensors */
    uint32_t type;     /* KITE_TYPE_F32, KITE_TYPE_F16 or KITE_TYPE_BF16 */
    uint32_t n_dims;   /* 1..4 */
    int64_t ne[4];     /* ne[0] innermost = the last entry of the JSON shape; unused dims are 1 */
    uint64_t offset;   /* bytes from the start of the file */
    uint64_t n_bytes;  /* = product(ne) * element size */
    const void *data;  /* = file bytes + offset */
} kite_safetensors_tensor;

typedef struct kite_safetensors {
    kite_safetensors_tensor *tensors; /* n_tensors, in the JSON's order */
    int64_t n_tensors;
    uint64_t header_size;             /* N, the JSON's length in bytes */
} kite_safetensors;

/* Parses a whole safetensors file held in data[0..size); data must outlive *st. `label` (e.g. the
 * path) starts every error message. On failure *st is left empty (nothing to free). */
int kite_safetensors_parse(kite_safetensors *st, const void *data, size_t size, const char *label, kite_error *e);
void kite_safetensors_free(kite_safetensors *st);
const kite_safetensors_tensor *kite_safetensors_find(const kite_safetensors *st, const char *name);

#endif
