/* SHA-256 (FIPS 180-4), streaming: the store checks downloads against the hub's LFS oids with it. */
#ifndef KITE_BASE_SHA256_H
#define KITE_BASE_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct kite_sha256 {
    uint32_t h[8];        /* chaining state */
    uint64_t n_bytes;     /* bytes hashed so far */
    uint8_t block[64];    /* pending input, n_bytes % 64 of it used */
} kite_sha256;

void kite_sha256_init(kite_sha256 *s);
void kite_sha256_update(kite_sha256 *s, const void *data, size_t len);
/* Writes the 32-byte digest; s must be re-initialised before reuse. */
void kite_sha256_final(kite_sha256 *s, uint8_t digest[32]);
/* The digest as 64 lower-case hex digits and a NUL. */
void kite_sha256_hex(kite_sha256 *s, char hex[65]);

#endif
