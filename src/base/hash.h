/* A 64-bit mixer for hash tables and ids: MurmurHash3's finalizer (fmix64), a bijection of 64-bit words
 * whose every output bit depends on every input bit. */
#ifndef KITE_BASE_HASH_H
#define KITE_BASE_HASH_H

#include <stdint.h>

static inline uint64_t kite_hash_mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

#endif
