/* IEEE half and bfloat16 conversions (scalar, exact; round-to-nearest-even on the way down). */
#ifndef KITE_BASE_FP16_H
#define KITE_BASE_FP16_H

#include <stdint.h>
#include <string.h>

static inline float kite_f32_from_bits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t kite_bits_from_f32(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

static inline float kite_fp16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    if (exp == 0) {
        if (mant == 0) return kite_f32_from_bits(sign);
        /* subnormal: value = mant * 2^-24 */
        float v = (float)mant * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    if (exp == 31) return kite_f32_from_bits(sign | 0x7f800000u | (mant << 13));
    return kite_f32_from_bits(sign | ((exp + 112) << 23) | (mant << 13));
}

static inline uint16_t kite_f32_to_fp16(float f) {
    uint32_t x = kite_bits_from_f32(f);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t absx = x & 0x7fffffff;
    if (absx >= 0x7f800000u) return (uint16_t)(sign | 0x7c00 | (absx > 0x7f800000u ? 0x200 : 0));
    if (absx >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* rounds to >= 65520: inf */
    if (absx < 0x38800000u) { /* below the smallest normal half: subnormal or zero */
        float a = kite_f32_from_bits(absx) * 16777216.0f; /* in units of 2^-24 */
        uint32_t m = (uint32_t)a;
        float rem = a - (float)m;
        if (rem > 0.5f || (rem == 0.5f && (m & 1))) m++;
        return (uint16_t)(sign | m);
    }
    uint32_t mant = absx & 0x7fffff, exp = (absx >> 23) - 112;
    uint32_t h = (exp << 10) | (mant >> 13);
    uint32_t rest = mant & 0x1fff;
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) h++;
    return (uint16_t)(sign | h);
}

static inline float kite_bf16_to_f32(uint16_t b) { return kite_f32_from_bits((uint32_t)b << 16); }

static inline uint16_t kite_f32_to_bf16(float f) {
    uint32_t x = kite_bits_from_f32(f);
    if ((x & 0x7fffffff) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40); /* quiet NaN */
    x += 0x7fff + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

#endif
