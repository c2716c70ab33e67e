/* Deterministic test inputs for the quantizer tests, built only from integer arithmetic and exact
 * float conversions, so any program (kite's tests, or a throwaway harness around ggml) produces the
 * same floats bit for bit. */
#ifndef KITE_TEST_QUANT_INPUTS_H
#define KITE_TEST_QUANT_INPUTS_H

#include <math.h>
#include <stdint.h>
#include <string.h>

typedef struct qi_rng { uint64_t s; } qi_rng;

static inline uint32_t qi_next(qi_rng *r) { /* 64-bit LCG (Knuth MMIX), top 32 bits */
    r->s = r->s * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(r->s >> 32);
}

/* Uniform in [-1, 1): a 24-bit integer scaled by 2^-23, exact in float. */
static inline float qi_uniform(qi_rng *r) {
    return (float)((int32_t)(qi_next(r) >> 8) - (1 << 23)) * (1.0f / 8388608.0f);
}

enum { QI_KINDS = 6 };

/* n floats of one of QI_KINDS distributions:
 *   0 uniform [-1, 1);  1 weight-like: sum of 4 uniforms times 1/32;
 *   2 uniform / 2 with every 16-element group 5 mod 7 zero and every 97th element times 8 (outliers);
 *   3 all positive: |u| + 1/8;  4 tiny: u * 2^-20;  5 integers in [-8, 8]. */
static inline void qi_fill(float *x, int64_t n, int kind, uint64_t seed) {
    qi_rng r = {seed * 0x9E3779B97F4A7C15ull + (uint64_t)kind};
    for (int64_t i = 0; i < n; i++) {
        float u = qi_uniform(&r);
        switch (kind) {
        case 0: x[i] = u; break;
        case 1: x[i] = (u + qi_uniform(&r) + qi_uniform(&r) + qi_uniform(&r)) * (1.0f / 32.0f); break;
        case 2: x[i] = ((i / 16) % 7 == 5) ? 0.0f : (i % 97 == 0 ? u * 4.0f : u * 0.5f); break;
        case 3: x[i] = fabsf(u) + 0.125f; break;
        case 4: x[i] = u * (1.0f / 1048576.0f); break;
        default: x[i] = (float)((int)(qi_next(&r) % 17) - 8); break;
        }
    }
}

/* FNV-1a over bytes. */
static inline uint64_t qi_hash(const void *p, size_t n, uint64_t h) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}
#define QI_HASH_SEED 1469598103934665603ull

/* Hash of floats with every NaN mapped to one pattern (NaN payloads are not part of the contract). */
static inline uint64_t qi_hash_floats(const float *y, int64_t n) {
    uint64_t h = QI_HASH_SEED;
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &y[i], 4);
        if (y[i] != y[i]) u = 0x7fc00000u;
        h = qi_hash(&u, 4, h);
    }
    return h;
}

/* n random bytes. */
static inline void qi_bytes(uint8_t *p, size_t n, uint64_t seed) {
    qi_rng r = {seed};
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(qi_next(&r) >> 24);
}

#endif
