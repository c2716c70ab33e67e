/* A raw GGUF byte builder for tests: writes any field, valid or not, so the reader can be fed files the
 * kite writer would never produce (other value types, bad counts, bad offsets). Little-endian host assumed. */
#ifndef KITE_TEST_GGUF_BUILDER_H
#define KITE_TEST_GGUF_BUILDER_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct gb {
    uint8_t *p;
    size_t len, cap;
} gb;

static inline void gb_bytes(gb *b, const void *src, size_t n) {
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n) cap *= 2;
        b->p = realloc(b->p, cap);
        if (!b->p) abort();
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, src, n);
    b->len += n;
}
static inline void gb_u8(gb *b, uint8_t v) { gb_bytes(b, &v, 1); }
static inline void gb_u16(gb *b, uint16_t v) { gb_bytes(b, &v, 2); }
static inline void gb_u32(gb *b, uint32_t v) { gb_bytes(b, &v, 4); }
static inline void gb_u64(gb *b, uint64_t v) { gb_bytes(b, &v, 8); }
static inline void gb_f32(gb *b, float v) { gb_bytes(b, &v, 4); }
static inline void gb_f64(gb *b, double v) { gb_bytes(b, &v, 8); }
static inline void gb_str(gb *b, const char *s) {
    gb_u64(b, strlen(s));
    gb_bytes(b, s, strlen(s));
}
static inline void gb_header(gb *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    gb_bytes(b, "GGUF", 4);
    gb_u32(b, version);
    gb_u64(b, n_tensors);
    gb_u64(b, n_kv);
}
/* Key and value type; the caller appends the value. */
static inline void gb_key(gb *b, const char *key, uint32_t type) {
    gb_str(b, key);
    gb_u32(b, type);
}
/* Tensor info with n_dims dims from ne. */
static inline void gb_tensor(gb *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t offset) {
    gb_str(b, name);
    gb_u32(b, n_dims);
    for (uint32_t i = 0; i < n_dims; i++) gb_u64(b, ne[i]);
    gb_u32(b, type);
    gb_u64(b, offset);
}
static inline void gb_pad(gb *b, size_t align) {
    while (b->len % align) gb_u8(b, 0);
}
static inline void gb_zeros(gb *b, size_t n) {
    for (size_t i = 0; i < n; i++) gb_u8(b, 0);
}
static inline void gb_free(gb *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

#endif
