/* Philox4x32-10 (Salmon, Moraes, Dror, Shaw: "Parallel random numbers: as easy as 1, 2, 3", SC 2011)
 * and the per-(seed, position, token) uniform and Gumbel noise the sampler draws from.
 *
 * Counter layout for the sampler's noise: (position low 32 bits, position high 32 bits, token id, 0);
 * key: (seed low 32 bits, seed high 32 bits). Only out[0] is used, so every (seed, position, token)
 * has its own Philox block and the noise does not depend on the order tokens are visited in.
 *
 * Uniform: U = max(out[0] >> 8, 1) * 2^-24. The top 24 bits fit a float's significand exactly, so U
 * is exact and lies in [2^-24, 1 - 2^-24]: 0 (which would make -log(-log U) = -inf) is replaced by the
 * smallest step, and 1 is never reached. Everything after the integer step is computed in double so
 * the noise does not depend on a float libm's rounding, then rounded once to float. */
#include "sample/sampler.h"

#include <math.h>

#define PHILOX_M0 0xD2511F53u /* multiplier of counter word 0 */
#define PHILOX_M1 0xCD9E8D57u /* multiplier of counter word 2 */
#define PHILOX_W0 0x9E3779B9u /* Weyl increment of key word 0 (golden ratio) */
#define PHILOX_W1 0xBB67AE85u /* Weyl increment of key word 1 (sqrt(3) - 1) */
#define PHILOX_ROUNDS 10

void kite_philox4x32_10(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t c0 = counter[0], c1 = counter[1], c2 = counter[2], c3 = counter[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int round = 0; round < PHILOX_ROUNDS; round++) {
        if (round > 0) { /* the key schedule advances between rounds, not before the first */
            k0 += PHILOX_W0;
            k1 += PHILOX_W1;
        }
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

float kite_uniform(uint64_t seed, int64_t position, int32_t token) {
    uint64_t pos = (uint64_t)position; /* two's complement bits; positions are never negative in practice */
    const uint32_t counter[4] = {(uint32_t)pos, (uint32_t)(pos >> 32), (uint32_t)token, 0};
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint32_t out[4];
    kite_philox4x32_10(counter, key, out);
    uint32_t top24 = out[0] >> 8;
    if (top24 == 0) top24 = 1;
    return (float)top24 * 0x1p-24f;
}

float kite_gumbel(uint64_t seed, int64_t position, int32_t token) {
    double u = kite_uniform(seed, position, token);
    return (float)-log(-log(u));
}
