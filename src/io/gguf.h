/* GGUF v2/v3 reader (over bytes already in memory, so it can be fuzzed) and writer.
 * Every offset, size, count and string length is checked against the buffer before use. */
#ifndef KITE_IO_GGUF_H
#define KITE_IO_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

typedef enum kite_gguf_vtype {
    KITE_GGUF_UINT8 = 0, KITE_GGUF_INT8 = 1, KITE_GGUF_UINT16 = 2, KITE_GGUF_INT16 = 3,
    KITE_GGUF_UINT32 = 4, KITE_GGUF_INT32 = 5, KITE_GGUF_FLOAT32 = 6, KITE_GGUF_BOOL = 7,
    KITE_GGUF_STRING = 8, KITE_GGUF_ARRAY = 9, KITE_GGUF_UINT64 = 10, KITE_GGUF_INT64 = 11,
    KITE_GGUF_FLOAT64 = 12,
} kite_gguf_vtype;

/* A string inside the mapped file: not NUL-terminated. */
typedef struct kite_gguf_str { const char *ptr; uint64_t len; } kite_gguf_str;

typedef struct kite_gguf_tensor {
    kite_gguf_str name;
    uint32_t type;          /* a kite_type id, validated known */
    uint32_t n_dims;        /* 1..4 */
    int64_t ne[4];          /* ne[0] innermost (row length); unused dims are 1 */
    uint64_t offset;        /* from the start of the file, validated in bounds and aligned */
    uint64_t n_bytes;       /* validated: offset + n_bytes <= file size */
    const void *data;       /* = file bytes + offset */
} kite_gguf_tensor;

typedef struct kite_gguf kite_gguf;

/* Parses a whole GGUF file held in data[0..size). data must outlive the handle. */
int kite_gguf_open(kite_gguf **out, const void *data, size_t size, kite_error *e);
void kite_gguf_free(kite_gguf *g);

uint32_t kite_gguf_version(const kite_gguf *g);
uint32_t kite_gguf_alignment(const kite_gguf *g);

/* Metadata. Keys are looked up exactly. Getters return false when the key is absent or its type does
 * not convert (integers convert among themselves when the value fits; floats from float32/float64). */
int64_t kite_gguf_n_kv(const kite_gguf *g);
kite_gguf_str kite_gguf_key(const kite_gguf *g, int64_t i);
bool kite_gguf_has(const kite_gguf *g, const char *key);
bool kite_gguf_get_u32(const kite_gguf *g, const char *key, uint32_t *v);
bool kite_gguf_get_i64(const kite_gguf *g, const char *key, int64_t *v);
bool kite_gguf_get_f32(const kite_gguf *g, const char *key, float *v);
bool kite_gguf_get_bool(const kite_gguf *g, const char *key, bool *v);
bool kite_gguf_get_str(const kite_gguf *g, const char *key, kite_gguf_str *v);
/* Arrays: element type and count; elements read with the accessors below (index checked). */
bool kite_gguf_get_arr(const kite_gguf *g, const char *key, kite_gguf_vtype *elem_type, uint64_t *n);
bool kite_gguf_arr_str(const kite_gguf *g, const char *key, uint64_t i, kite_gguf_str *v);
bool kite_gguf_arr_f32(const kite_gguf *g, const char *key, uint64_t i, float *v);   /* from f32 or f64 */
bool kite_gguf_arr_i64(const kite_gguf *g, const char *key, uint64_t i, int64_t *v); /* from any int */
bool kite_gguf_arr_bool(const kite_gguf *g, const char *key, uint64_t i, bool *v);  /* from a bool array only */

/* Tensors. */
int64_t kite_gguf_n_tensors(const kite_gguf *g);
const kite_gguf_tensor *kite_gguf_tensor_at(const kite_gguf *g, int64_t i);
const kite_gguf_tensor *kite_gguf_find_tensor(const kite_gguf *g, const char *name);

/* ---- writer (tests, the random-model generator, quantizers) ----
 * Calls never fail on their own: the first bad call (duplicate key or tensor name, unknown type, a size
 * that does not match the shape, a tensor name of 64 bytes or more, out of memory) is remembered, later
 * calls are ignored, and kite_gguf_writer_save reports it. A NULL writer makes every call a no-op. Keys
 * and tensors are written in call order; tensor data is copied, so the writer holds the whole model. */
typedef struct kite_gguf_writer kite_gguf_writer;
kite_gguf_writer *kite_gguf_writer_new(void); /* NULL on allocation failure */
void kite_gguf_writer_free(kite_gguf_writer *w);
void kite_gguf_w_u32(kite_gguf_writer *w, const char *key, uint32_t v);
void kite_gguf_w_i32(kite_gguf_writer *w, const char *key, int32_t v);
void kite_gguf_w_f32(kite_gguf_writer *w, const char *key, float v);
void kite_gguf_w_bool(kite_gguf_writer *w, const char *key, bool v);
void kite_gguf_w_str(kite_gguf_writer *w, const char *key, const char *v);
void kite_gguf_w_arr_str(kite_gguf_writer *w, const char *key, const char *const *v, uint64_t n);
void kite_gguf_w_arr_f32(kite_gguf_writer *w, const char *key, const float *v, uint64_t n);
void kite_gguf_w_arr_i32(kite_gguf_writer *w, const char *key, const int32_t *v, uint64_t n);
void kite_gguf_w_arr_bool(kite_gguf_writer *w, const char *key, const uint8_t *v, uint64_t n); /* each 0 or 1 */
/* Copies key i of g (any value type, arrays included) as it is. */
void kite_gguf_w_copy_kv(kite_gguf_writer *w, const kite_gguf *g, int64_t i);
/* Copies n_bytes of already-encoded data of the given type and shape (ne[0] innermost). */
void kite_gguf_w_tensor(kite_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims, const int64_t *ne,
                        const void *data, uint64_t n_bytes);
/* Writes GGUF v3 with 32-byte alignment. */
int kite_gguf_writer_save(kite_gguf_writer *w, const char *path, kite_error *e);

#endif
