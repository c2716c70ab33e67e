/* Test helper: builds safetensors files byte by byte from the format spec (u64 LE header length,
 * JSON header, data section), so tests exercise the parser against independently made files. */
#ifndef KITE_TEST_ST_WRITER_H
#define KITE_TEST_ST_WRITER_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct st_buf {
    unsigned char *data;
    size_t size;
} st_buf;

/* header: the JSON text (offsets relative to the data section); payload: data bytes appended. */
static inline st_buf st_build(const char *header, const void *payload, size_t payload_size) {
    size_t n = strlen(header);
    st_buf b = {malloc(8 + n + payload_size + 1), 8 + n + payload_size};
    for (int i = 0; i < 8; i++) b.data[i] = (unsigned char)((uint64_t)n >> (8 * i));
    memcpy(b.data + 8, header, n);
    if (payload_size) memcpy(b.data + 8 + n, payload, payload_size);
    return b;
}

/* A tensor for st_build_tensors: HF shape (outermost first), F32 data (or NULL for a ramp). */
typedef struct st_tensor {
    const char *name;
    const char *dtype;  /* "F32" etc.; element size taken as 4 for F32, else 2 */
    int n_dims;
    int64_t shape[4];
} st_tensor;

/* Lays tensors out back to back (header padded with spaces to a multiple of 8 bytes, as the
 * reference writer does). Data: element i of tensor k holds (float)(k * 1000 + i) for F32. */
static inline st_buf st_build_tensors(const st_tensor *ts, int n) {
    size_t cap = 256 + (size_t)n * 256, len = 0;
    char *h = malloc(cap);
    len += (size_t)snprintf(h + len, cap - len, "{\"__metadata__\":{\"format\":\"pt\"}");
    uint64_t offset = 0;
    for (int k = 0; k < n; k++) {
        uint64_t count = 1;
        for (int d = 0; d < ts[k].n_dims; d++) count *= (uint64_t)ts[k].shape[d];
        uint64_t bytes = count * (strcmp(ts[k].dtype, "F32") == 0 ? 4 : 2);
        len += (size_t)snprintf(h + len, cap - len, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[", ts[k].name, ts[k].dtype);
        for (int d = 0; d < ts[k].n_dims; d++)
            len += (size_t)snprintf(h + len, cap - len, "%s%lld", d ? "," : "", (long long)ts[k].shape[d]);
        len += (size_t)snprintf(h + len, cap - len, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)offset,
                                (unsigned long long)(offset + bytes));
        offset += bytes;
    }
    len += (size_t)snprintf(h + len, cap - len, "}");
    while ((8 + len) % 8) h[len++] = ' ';
    h[len] = 0;
    unsigned char *payload = calloc(1, offset ? offset : 1);
    uint64_t pos = 0;
    for (int k = 0; k < n; k++) {
        uint64_t count = 1;
        for (int d = 0; d < ts[k].n_dims; d++) count *= (uint64_t)ts[k].shape[d];
        size_t esize = strcmp(ts[k].dtype, "F32") == 0 ? 4 : 2;
        if (esize == 4)
            for (uint64_t i = 0; i < count; i++) {
                float v = (float)(k * 1000 + (int)i);
                memcpy(payload + pos + i * 4, &v, 4);
            }
        pos += count * esize;
    }
    st_buf b = st_build(h, payload, offset);
    free(h);
    free(payload);
    return b;
}

static inline int st_write_file(const char *path, const void *data, size_t size) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = size ? fwrite(data, 1, size, f) : 0;
    return fclose(f) == 0 && w == size ? 0 : -1;
}

#endif
