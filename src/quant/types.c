/* Tensor type traits, dequantizers and reference quantizers.
 *
 * Every to_float reproduces llama.cpp's dequantize_row_* bit for bit: same integer decoding, same float
 * operations in the same order (this file must not be built with -ffast-math or FMA contraction).
 * Every from_float reproduces ggml's quantize_row_*_ref for finite inputs (the *_ref quantizers, not the
 * importance-weighted ones), so files written here match llama-quantize's reference path. Non-finite
 * inputs give some valid block (never undefined behaviour) but no promised values.
 *
 * Blocks are copied to locals with memcpy, so rows may sit at any address (GGUF alignment can be 1). */
#include "quant/types.h"

/* Bit-exactness needs every multiply and add rounded separately, even when a build enables FMA. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <float.h>
#include <math.h>
#include <string.h>

#include "base/fp16.h"
#include "quant/blocks.h"
#include "quant/trellis.h"

#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))
#define GROUP_MAX_EPS 1e-15f

static inline float h2f(uint16_t h) { return kite_fp16_to_f32(h); }
static inline uint16_t f2h(float f) { return kite_f32_to_fp16(f); }

/* Round to nearest (ties to even) for |v| <= 2^22, by the float-adding trick ggml uses; other inputs
 * give a wrong but defined value, as in ggml. */
static inline int nearest_int(float v) {
    float t = v + 12582912.f;
    int32_t i;
    memcpy(&i, &t, 4);
    return (i & 0x007fffff) - 0x00400000;
}

/* C's float-to-integer truncation, defined for every input (NaN and out-of-range give 0). */
static inline int trunc_int(float v) { return (v > -129.f && v < 256.f) ? (int)v : 0; }

/* ---- plain floats ------------------------------------------------------------------------------- */

static void f32_to_float(const void *src, float *dst, int64_t n) { memcpy(dst, src, (size_t)n * 4); }
static void f32_from_float(const float *src, void *dst, int64_t n) { memcpy(dst, src, (size_t)n * 4); }

static void f16_to_float(const void *src, float *dst, int64_t n) {
    const uint8_t *p = src;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        dst[i] = kite_fp16_to_f32(h);
    }
}
static void f16_from_float(const float *src, void *dst, int64_t n) {
    uint8_t *p = dst;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h = kite_f32_to_fp16(src[i]);
        memcpy(p + 2 * i, &h, 2);
    }
}

static void bf16_to_float(const void *src, float *dst, int64_t n) {
    const uint8_t *p = src;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        dst[i] = kite_bf16_to_f32(h);
    }
}
static void bf16_from_float(const float *src, void *dst, int64_t n) {
    uint8_t *p = dst;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h = kite_f32_to_bf16(src[i]);
        memcpy(p + 2 * i, &h, 2);
    }
}

/* ---- 32-element blocks -------------------------------------------------------------------------- */

static void q4_0_to_float(const void *src, float *y, int64_t n) {
    for (int64_t i = 0; i < n / KITE_QK4_0; i++) {
        kite_block_q4_0 b;
        memcpy(&b, (const uint8_t *)src + i * sizeof b, sizeof b);
        const float d = h2f(b.d);
        for (int j = 0; j < 16; j++) {
            const int x0 = (b.qs[j] & 0x0F) - 8;
            const int x1 = (b.qs[j] >> 4) - 8;
            y[i * 32 + j] = x0 * d;
            y[i * 32 + j + 16] = x1 * d;
        }
    }
}

static void q4_0_from_float(const float *x, void *dst, int64_t n) {
    for (int64_t i = 0; i < n / KITE_QK4_0; i++) {
        const float *xb = x + i * 32;
        float amax = 0.0f, max = 0.0f; /* largest magnitude, and the value carrying it (with its sign) */
        for (int j = 0; j < 32; j++)
            if (amax < fabsf(xb[j])) { amax = fabsf(xb[j]); max = xb[j]; }
        const float d = max / -8;
        const float id = d ? 1.0f / d : 0.0f;
        kite_block_q4_0 b;
        b.d = f2h(d);
        for (int j = 0; j < 16; j++) {
            const float x0 = xb[j] * id, x1 = xb[j + 16] * id;
            const uint8_t xi0 = (uint8_t)MIN(15, (int8_t)trunc_int(x0 + 8.5f));
            const uint8_t xi1 = (uint8_t)MIN(15, (int8_t)trunc_int(x1 + 8.5f));
            b.qs[j] = (uint8_t)(xi0 | (xi1 << 4));
        }
        memcpy((uint8_t *)dst + i * sizeof b, &b, sizeof b);
    }
}

static void q4_1_to_float(const void *src, float *y, int64_t n) {
    for (int64_t i = 0; i < n / KITE_QK4_1; i++) {
        kite_block_q4_1 b;
        memcpy(&b, (const uint8_t *)src + i * sizeof b, sizeof b);
        const float d = h2f(b.d), m = h2f(b.m);
        for (int j = 0; j < 16; j++) {
            const int x0 = b.qs[j] & 0x0F, x1 = b.qs[j] >> 4;
            y[i * 32 + j] = x0 * d + m;
            y[i * 32 + j + 16] = x1 * d + m;
        }
    }
}

static void q4_1_from_float(const float *x, void *dst, int64_t n) {
    for (int64_t i = 0; i < n / KITE_QK4_1; i++) {
        const float *xb = x + i * 32;
        float min = FLT_MAX, max = -FLT_MAX;
        for (int j = 0; j < 32; j++) {
            if (xb[j] < min) min = xb[j];
            if (xb[j] > max) max = xb[j];
        }
        const float d = (max - min) / 15;
        const float id = d ? 1.0f / d : 0.0f;
        kite_block_q4_1 b;
        b.d = f2h(d);
        b.m = f2h(min);
        for (int j = 0; j < 16; j++) {
            const float x0 = (xb[j] - min) * id, x1 = (xb[j + 16] - min) * id;
            const uint8_t xi0 = (uint8_t)MIN(15, (int8_t)trunc_int(x0 + 0.5f));
            const uint8_t xi1 = (uint8_t)MIN(15, (int8_t)trunc_int(x1 + 0.5f));
            b.qs[j] = (uint8_t)(xi0 | (xi1 << 4));
        }
        memcpy((uint8_t *)dst + i * sizeof b, &b, sizeof b);
    }
}

static void q5_0_to_float(const void *src, float *y, int64_t n) {
    for (int64_t i = 0; i < n / KITE_QK5_0; i++) {
        kite_block_q5_0 b;
        memcpy(&b, (const uint8_t *)src + i * sizeof b, sizeof b);
        const float d = h2f(b.d);
        uint32_t qh;
        memcpy(&qh, b.qh, 4);
        for (int j = 0; j < 16; j++) {
            const uint8_t xh0 = (uint8_t)(((qh >> j) << 4) & 0x10);
            const uint8_t xh1 = (uint8_t)((qh >> (j + 12)) & 0x10);
            const int32_t x0 = ((b.qs[j] & 0x0F) | xh0) - 16;
            const int32_t x1 = ((b.qs[j] >> 4) | xh1) - 16;
            y[i * 32 + j] = x0 * d;
            y[i * 32 + j + 16] = x1 * d;
        }
    }
}

static void q5_0_from_float(const float *x, void *dst, int64_t n) {
    for (int64_t i = 0; i < n / KITE_QK5_0; i++) {
        const float *xb = x + i * 32;
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < 32; j++)
            if (amax < fabsf(xb[j])) { amax = fabsf(xb[j]); max = xb[j]; }
        const float d = max / -16;
        const float id = d ? 1.0f / d : 0.0f;
        kite_block_q5_0 b;
        b.d = f2h(d);
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            const float x0 = xb[j] * id, x1 = xb[j + 16] * id;
            const uint8_t xi0 = (uint8_t)MIN(31, (int8_t)trunc_int(x0 + 16.5f));
            const uint8_t xi1 = (uint8_t)MIN(31, (int8_t)trunc_int(x1 + 16.5f));
            b.qs[j] = (uint8_t)((xi0 & 0x0F) | ((xi1 & 0x0F) << 4));
            qh |= ((xi0 & 0x10u) >> 4) << j;
            qh |= ((xi1 & 0x10u) >> 4) << (j + 16);
        }
        memcpy(b.qh, &qh, 4);
        memcpy((uint8_t *)dst + i * sizeof b, &b, sizeof b);
    }
}

static void q5_1_to_float(const void *src, float *y, int64_t n) {
    for (int64_t i = 0; i < n / KITE_QK5_1; i++) {
        kite_block_q5_1 b;
        memcpy(&b, (const uint8_t *)src + i * sizeof b, sizeof b);
        const float d = h2f(b.d), m = h2f(b.m);
        uint32_t qh;
        memcpy(&qh, b.qh, 4);
        for (int j = 0; j < 16; j++) {
            const uint8_t xh0 = (uint8_t)(((qh >> j) << 4) & 0x10);
            const uint8_t xh1 = (uint8_t)((qh >> (j + 12)) & 0x10);
            const int x0 = (b.qs[j] & 0x0F) | xh0;
            const int x1 = (b.qs[j] >> 4) | xh1;
            y[i * 32 + j] = x0 * d + m;
            y[i * 32 + j + 16] = x1 * d + m;
        }
    }
}

static void q5_1_from_float(const float *x, void *dst, int64_t n) {
    for (int64_t i = 0; i < n / KITE_QK5_1; i++) {
        const float *xb = x + i * 32;
        float min = FLT_MAX, max = -FLT_MAX;
        for (int j = 0; j < 32; j++) {
            if (xb[j] < min) min = xb[j];
            if (xb[j] > max) max = xb[j];
        }
        const float d = (max - min) / 31;
        const float id = d ? 1.0f / d : 0.0f;
        kite_block_q5_1 b;
        b.d = f2h(d);
        b.m = f2h(min);
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            const float x0 = (xb[j] - min) * id, x1 = (xb[j + 16] - min) * id;
            const uint8_t xi0 = (uint8_t)trunc_int(x0 + 0.5f);
            const uint8_t xi1 = (uint8_t)trunc_int(x1 + 0.5f);
            b.qs[j] = (uint8_t)((xi0 & 0x0F) | ((xi1 & 0x0F) << 4));
            qh |= ((xi0 & 0x10u) >> 4) << j;
            qh |= ((xi1 & 0x10u) >> 4) << (j + 16);
        }
        memcpy(b.qh, &qh, 4);
        memcpy((uint8_t *)dst + i * sizeof b, &b, sizeof b);
    }
}

static void q8_0_to_float(const void *src, float *y, int64_t n) {
    for (int64_t i = 0; i < n / KITE_QK8_0; i++) {
        kite_block_q8_0 b;
        memcpy(&b, (const uint8_t *)src + i * sizeof b, sizeof b);
        const float d = h2f(b.d);
        for (int j = 0; j < 32; j++) y[i * 32 + j] = b.qs[j] * d;
    }
}

static void q8_0_from_float(const float *x, void *dst, int64_t n) {
    for (int64_t i = 0; i < n / KITE_QK8_0; i++) {
        const float *xb = x + i * 32;
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) amax = MAX(amax, fabsf(xb[j]));
        const float d = amax / 127;
        const float id = d ? 1.0f / d : 0.0f;
        kite_block_q8_0 b;
        b.d = f2h(d);
        for (int j = 0; j < 32; j++) b.qs[j] = (int8_t)trunc_int(roundf(xb[j] * id));
        memcpy((uint8_t *)dst + i * sizeof b, &b, sizeof b);
    }
}

static void q8_1_to_float(const void *src, float *y, int64_t n) {
    for (int64_t i = 0; i < n / KITE_QK8_1; i++) {
        kite_block_q8_1 b;
        memcpy(&b, (const uint8_t *)src + i * sizeof b, sizeof b);
        const float d = h2f(b.d);
        for (int j = 0; j < 32; j++) y[i * 32 + j] = b.qs[j] * d;
    }
}

static void q8_1_from_float(const float *x, void *dst, int64_t n) {
    for (int64_t i = 0; i < n / KITE_QK8_1; i++) {
        const float *xb = x + i * 32;
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) amax = MAX(amax, fabsf(xb[j]));
        const float d = amax / 127;
        const float id = d ? 1.0f / d : 0.0f;
        kite_block_q8_1 b;
        b.d = f2h(d);
        int sum = 0;
        for (int j = 0; j < 16; j++) {
            b.qs[j] = (int8_t)trunc_int(roundf(xb[j] * id));
            b.qs[j + 16] = (int8_t)trunc_int(roundf(xb[j + 16] * id));
            sum += b.qs[j] + b.qs[j + 16];
        }
        b.s = f2h(sum * d);
        memcpy((uint8_t *)dst + i * sizeof b, &b, sizeof b);
    }
}

/* ---- k-quant helpers (ggml's scale search, reproduced step for step) ---------------------------- */

/* Symmetric quantization of n values to [-nmax, nmax-1] (stored as L + nmax) with a scale search that
 * maximizes sum(w*x*l)^2 / sum(w*l^2) with w = x^2 (rmse_type 1), trying 18 nudged scales. */
static float make_qx_quants(int n, int nmax, const float *x, int8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; ++i) {
        float ax = fabsf(x[i]);
        if (ax > amax) { amax = ax; max = x[i]; }
    }
    if (amax < GROUP_MAX_EPS) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        return 0.f;
    }
    float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        int l = nearest_int(iscale * x[i]);
        l = MAX(-nmax, MIN(nmax - 1, l));
        L[i] = (int8_t)(l + nmax);
        float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; ++is) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; ++i) {
            int l = nearest_int(iscale * x[i]);
            l = MAX(-nmax, MIN(nmax - 1, l));
            float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; ++i) {
                int l = nearest_int(iscale * x[i]);
                L[i] = (int8_t)(nmax + MAX(-nmax, MIN(nmax - 1, l)));
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* Symmetric 3-bit quantization with up to 5 passes of coordinate descent on the weighted error (w = x^2). */
static float make_q3_quants(int n, int nmax, const float *x, int8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; ++i) {
        float ax = fabsf(x[i]);
        if (ax > amax) { amax = ax; max = x[i]; }
    }
    if (amax < GROUP_MAX_EPS) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        return 0.f;
    }
    float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        int l = nearest_int(iscale * x[i]);
        l = MAX(-nmax, MIN(nmax - 1, l));
        L[i] = (int8_t)l;
        float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    for (int itry = 0; itry < 5; ++itry) {
        int n_changed = 0;
        for (int i = 0; i < n; ++i) {
            float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * L[i];
            if (slx > 0) {
                float sl2 = suml2 - w * L[i] * L[i];
                int new_l = nearest_int(x[i] * sl2 / slx);
                new_l = MAX(-nmax, MIN(nmax - 1, new_l));
                if (new_l != L[i]) {
                    slx += w * x[i] * new_l;
                    sl2 += w * new_l * new_l;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        ++n_changed;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    for (int i = 0; i < n; ++i) L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

float kite_fit_affine_levels(int n, int nmax, const float *x, const float *weights, uint8_t *L, float *the_min,
                              uint8_t *Laux, float rmin, float rdelta, int nstep, bool use_mad) {
    float min = x[0], max = x[0];
    float sum_w = weights[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        *the_min = -min;
        return 0.f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; ++i) {
        int l = nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)MAX(0, MIN(nmax, l));
        float diff = scale * L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        best_error += weights[i] * diff;
    }
    if (nstep < 1) {
        *the_min = -min;
        return scale;
    }
    for (int is = 0; is <= nstep; ++is) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; ++i) {
            int l = nearest_int(iscale * (x[i] - min));
            l = MAX(0, MIN(nmax, l));
            Laux[i] = (uint8_t)l;
            float w = weights[i];
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; ++i) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                diff = use_mad ? fabsf(diff) : diff * diff;
                cur_error += weights[i] * diff;
            }
            if (cur_error < best_error) {
                for (int i = 0; i < n; ++i) L[i] = Laux[i];
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

/* Sub-block j's 6-bit scale and min from the 12 packed bytes of q4_K/q5_K: sub-blocks 0..3 keep theirs
 * in the low 6 bits of bytes j and j+4; sub-blocks 4..7 keep the low 4 bits in byte j+4 (scale low
 * nibble, min high nibble) and the high 2 bits in the top bits of bytes j-4 (scale) and j (min). */
static inline void get_scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4));
    }
}

static void pack_scale_min_k4(uint8_t scales[12], int j, uint8_t ls, uint8_t lm) {
    if (j < 4) {
        scales[j] = ls;
        scales[j + 4] = lm;
    } else {
        scales[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
        scales[j - 4] |= (uint8_t)((ls >> 4) << 6);
        scales[j - 0] |= (uint8_t)((lm >> 4) << 6);
    }
}

/* ---- q2_K ----------------------------------------------------------------------------------------- */

static void q2_K_to_float(const void *src, float *y, int64_t n) {
    for (int64_t i = 0; i < n / KITE_QK_K; i++) {
        kite_block_q2_K b;
        memcpy(&b, (const uint8_t *)src + i * sizeof b, sizeof b);
        const float d = h2f(b.d), min = h2f(b.dmin);
        const uint8_t *q = b.qs;
        int is = 0;
        for (int n128 = 0; n128 < KITE_QK_K; n128 += 128) {
            int shift = 0;
            for (int j = 0; j < 4; ++j) {
                uint8_t sc = b.scales[is++];
                float dl = d * (sc & 0xF), ml = min * (sc >> 4);
                for (int l = 0; l < 16; ++l) *y++ = dl * ((int8_t)((q[l] >> shift) & 3)) - ml;
                sc = b.scales[is++];
                dl = d * (sc & 0xF);
                ml = min * (sc >> 4);
                for (int l = 0; l < 16; ++l) *y++ = dl * ((int8_t)((q[l + 16] >> shift) & 3)) - ml;
                shift += 2;
            }
            q += 32;
        }
    }
}

static void q2_K_from_float(const float *x, void *dst, int64_t n) {
    uint8_t L[KITE_QK_K], Laux[16];
    float weights[16], mins[KITE_QK_K / 16], scales[KITE_QK_K / 16];
    const float q4scale = 15.f;
    for (int64_t i = 0; i < n / KITE_QK_K; i++, x += KITE_QK_K) {
        kite_block_q2_K b;
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < KITE_QK_K / 16; ++j) {
            for (int l = 0; l < 16; ++l) weights[l] = fabsf(x[16 * j + l]);
            scales[j] = kite_fit_affine_levels(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, true);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        if (max_scale > 0) {
            float iscale = q4scale / max_scale;
            for (int j = 0; j < KITE_QK_K / 16; ++j) b.scales[j] = (uint8_t)nearest_int(iscale * scales[j]);
            b.d = f2h(max_scale / q4scale);
        } else {
            for (int j = 0; j < KITE_QK_K / 16; ++j) b.scales[j] = 0;
            b.d = f2h(0.f);
        }
        if (max_min > 0) {
            float iscale = q4scale / max_min;
            for (int j = 0; j < KITE_QK_K / 16; ++j) b.scales[j] |= (uint8_t)(nearest_int(iscale * mins[j]) << 4);
            b.dmin = f2h(max_min / q4scale);
        } else {
            b.dmin = f2h(0.f);
        }
        for (int j = 0; j < KITE_QK_K / 16; ++j) {
            const float d = h2f(b.d) * (b.scales[j] & 0xF);
            if (!d) continue;
            const float dm = h2f(b.dmin) * (b.scales[j] >> 4);
            for (int ii = 0; ii < 16; ++ii) {
                int l = nearest_int((x[16 * j + ii] + dm) / d);
                L[16 * j + ii] = (uint8_t)MAX(0, MIN(3, l));
            }
        }
        for (int j = 0; j < KITE_QK_K; j += 128)
            for (int l = 0; l < 32; ++l)
                b.qs[j / 4 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
        memcpy((uint8_t *)dst + i * sizeof b, &b, sizeof b);
    }
}

/* ---- q3_K ----------------------------------------------------------------------------------------- */

/* The 16 signed 6-bit scales (stored + 32) of a q3_K block, unpacked. */
static void q3_K_unpack_scales(const uint8_t packed[12], int8_t out[16]) {
    for (int j = 0; j < 16; j++) {
        int lo = j < 8 ? (packed[j] & 0xF) : (packed[j - 8] >> 4);
        int hi = (packed[8 + j % 4] >> (2 * (j / 4))) & 3;
        out[j] = (int8_t)((lo | (hi << 4)) - 32);
    }
}

static void q3_K_to_float(const void *src, float *y, int64_t n) {
    for (int64_t i = 0; i < n / KITE_QK_K; i++) {
        kite_block_q3_K b;
        memcpy(&b, (const uint8_t *)src + i * sizeof b, sizeof b);
        const float d_all = h2f(b.d);
        int8_t scales[16];
        q3_K_unpack_scales(b.scales, scales);
        const uint8_t *q = b.qs, *hm = b.hmask;
        uint8_t m = 1;
        int is = 0;
        for (int n128 = 0; n128 < KITE_QK_K; n128 += 128) {
            int shift = 0;
            for (int j = 0; j < 4; ++j) {
                float dl = d_all * scales[is++];
                for (int l = 0; l < 16; ++l)
                    *y++ = dl * ((int8_t)((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4));
                dl = d_all * scales[is++];
                for (int l = 0; l < 16; ++l)
                    *y++ = dl * ((int8_t)((q[l + 16] >> shift) & 3) - ((hm[l + 16] & m) ? 0 : 4));
                shift += 2;
                m = (uint8_t)(m << 1);
            }
            q += 32;
        }
    }
}

static void q3_K_from_float(const float *x, void *dst, int64_t n) {
    int8_t L[KITE_QK_K];
    float scales[KITE_QK_K / 16];
    for (int64_t i = 0; i < n / KITE_QK_K; i++, x += KITE_QK_K) {
        kite_block_q3_K b;
        float max_scale = 0, amax = 0;
        for (int j = 0; j < KITE_QK_K / 16; ++j) {
            scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
            float scale = fabsf(scales[j]);
            if (scale > amax) { amax = scale; max_scale = scales[j]; }
        }
        memset(b.scales, 0, 12);
        if (max_scale) {
            float iscale = -32.f / max_scale;
            for (int j = 0; j < KITE_QK_K / 16; ++j) {
                int8_t l = (int8_t)nearest_int(iscale * scales[j]);
                l = (int8_t)(MAX(-32, MIN(31, l)) + 32);
                if (j < 8) b.scales[j] = (uint8_t)(l & 0xF);
                else b.scales[j - 8] |= (uint8_t)((l & 0xF) << 4);
                l >>= 4;
                b.scales[j % 4 + 8] |= (uint8_t)(l << (2 * (j / 4)));
            }
            b.d = f2h(1 / iscale);
        } else {
            b.d = f2h(0.f);
        }
        int8_t sc[16];
        q3_K_unpack_scales(b.scales, sc);
        for (int j = 0; j < KITE_QK_K / 16; ++j) {
            float d = h2f(b.d) * sc[j];
            if (!d) continue;
            for (int ii = 0; ii < 16; ++ii) {
                int l = nearest_int(x[16 * j + ii] / d);
                L[16 * j + ii] = (int8_t)(MAX(-4, MIN(3, l)) + 4);
            }
        }
        /* The high bit of element j goes to bit j/32 of hmask[j%32]. */
        memset(b.hmask, 0, sizeof b.hmask);
        int m = 0;
        uint8_t hm = 1;
        for (int j = 0; j < KITE_QK_K; ++j) {
            if (L[j] > 3) {
                b.hmask[m] |= hm;
                L[j] -= 4;
            }
            if (++m == KITE_QK_K / 8) {
                m = 0;
                hm = (uint8_t)(hm << 1);
            }
        }
        for (int j = 0; j < KITE_QK_K; j += 128)
            for (int l = 0; l < 32; ++l)
                b.qs[j / 4 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
        memcpy((uint8_t *)dst + i * sizeof b, &b, sizeof b);
    }
}

/* ---- q4_K, q5_K ----------------------------------------------------------------------------------- */

static void q4_K_to_float(const void *src, float *y, int64_t n) {
    for (int64_t i = 0; i < n / KITE_QK_K; i++) {
        kite_block_q4_K b;
        memcpy(&b, (const uint8_t *)src + i * sizeof b, sizeof b);
        const float d = h2f(b.d), min = h2f(b.dmin);
        const uint8_t *q = b.qs;
        int is = 0;
        uint8_t sc, m;
        for (int j = 0; j < KITE_QK_K; j += 64) {
            get_scale_min_k4(is + 0, b.scales, &sc, &m);
            const float d1 = d * sc, m1 = min * m;
            get_scale_min_k4(is + 1, b.scales, &sc, &m);
            const float d2 = d * sc, m2 = min * m;
            for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0xF) - m1;
            for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
            q += 32;
            is += 2;
        }
    }
}

/* Shared by q4_K (nmax 15, 20 steps from -1) and q5_K (nmax 31, 15 steps from -0.5): per 32-element
 * sub-block scale and min, then 6-bit super-block quantization of both, then requantization of L. */
static void kx_quantize_super_block(const float *x, int nmax, float rmin, int nstep, uint8_t scales_out[12],
                                    uint16_t *d_out, uint16_t *dmin_out, uint8_t L[KITE_QK_K]) {
    uint8_t Laux[32];
    float weights[32], mins[KITE_QK_K / 32], scales[KITE_QK_K / 32];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < KITE_QK_K / 32; ++j) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
        float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; ++l) weights[l] = av_x + fabsf(x[32 * j + l]);
        scales[j] = kite_fit_affine_levels(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin, 0.1f, nstep, false);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    memset(scales_out, 0, 12);
    for (int j = 0; j < KITE_QK_K / 32; ++j) {
        uint8_t ls = (uint8_t)nearest_int(inv_scale * scales[j]);
        uint8_t lm = (uint8_t)nearest_int(inv_min * mins[j]);
        pack_scale_min_k4(scales_out, j, MIN(63, ls), MIN(63, lm));
    }
    *d_out = f2h(max_scale / 63.f);
    *dmin_out = f2h(max_min / 63.f);
    uint8_t sc, m;
    for (int j = 0; j < KITE_QK_K / 32; ++j) {
        get_scale_min_k4(j, scales_out, &sc, &m);
        const float d = h2f(*d_out) * sc;
        if (!d) continue;
        const float dm = h2f(*dmin_out) * m;
        for (int ii = 0; ii < 32; ++ii) {
            int l = nearest_int((x[32 * j + ii] + dm) / d);
            L[32 * j + ii] = (uint8_t)MAX(0, MIN(nmax, l));
        }
    }
}

static void q4_K_from_float(const float *x, void *dst, int64_t n) {
    uint8_t L[KITE_QK_K];
    for (int64_t i = 0; i < n / KITE_QK_K; i++, x += KITE_QK_K) {
        kite_block_q4_K b;
        kx_quantize_super_block(x, 15, -1.f, 20, b.scales, &b.d, &b.dmin, L);
        uint8_t *q = b.qs;
        for (int j = 0; j < KITE_QK_K; j += 64) {
            for (int l = 0; l < 32; ++l) q[l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
            q += 32;
        }
        memcpy((uint8_t *)dst + i * sizeof b, &b, sizeof b);
    }
}

static void q5_K_to_float(const void *src, float *y, int64_t n) {
    for (int64_t i = 0; i < n / KITE_QK_K; i++) {
        kite_block_q5_K b;
        memcpy(&b, (const uint8_t *)src + i * sizeof b, sizeof b);
        const float d = h2f(b.d), min = h2f(b.dmin);
        const uint8_t *ql = b.qs, *qh = b.qh;
        int is = 0;
        uint8_t sc, m, u1 = 1, u2 = 2;
        for (int j = 0; j < KITE_QK_K; j += 64) {
            get_scale_min_k4(is + 0, b.scales, &sc, &m);
            const float d1 = d * sc, m1 = min * m;
            get_scale_min_k4(is + 1, b.scales, &sc, &m);
            const float d2 = d * sc, m2 = min * m;
            for (int l = 0; l < 32; ++l) *y++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; ++l) *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
            ql += 32;
            is += 2;
            u1 = (uint8_t)(u1 << 2);
            u2 = (uint8_t)(u2 << 2);
        }
    }
}

static void q5_K_from_float(const float *x, void *dst, int64_t n) {
    uint8_t L[KITE_QK_K];
    for (int64_t i = 0; i < n / KITE_QK_K; i++, x += KITE_QK_K) {
        kite_block_q5_K b;
        kx_quantize_super_block(x, 31, -0.5f, 15, b.scales, &b.d, &b.dmin, L);
        uint8_t *qh = b.qh, *ql = b.qs;
        memset(qh, 0, sizeof b.qh);
        uint8_t m1 = 1, m2 = 2;
        for (int n64 = 0; n64 < KITE_QK_K; n64 += 64) {
            for (int j = 0; j < 32; ++j) {
                int l1 = L[n64 + j], l2 = L[n64 + j + 32];
                if (l1 > 15) { l1 -= 16; qh[j] |= m1; }
                if (l2 > 15) { l2 -= 16; qh[j] |= m2; }
                ql[j] = (uint8_t)(l1 | (l2 << 4));
            }
            m1 = (uint8_t)(m1 << 2);
            m2 = (uint8_t)(m2 << 2);
            ql += 32;
        }
        memcpy((uint8_t *)dst + i * sizeof b, &b, sizeof b);
    }
}

/* ---- q6_K ----------------------------------------------------------------------------------------- */

static void q6_K_to_float(const void *src, float *y, int64_t n) {
    for (int64_t i = 0; i < n / KITE_QK_K; i++) {
        kite_block_q6_K b;
        memcpy(&b, (const uint8_t *)src + i * sizeof b, sizeof b);
        const float d = h2f(b.d);
        const uint8_t *ql = b.ql, *qh = b.qh;
        const int8_t *sc = b.scales;
        for (int n128 = 0; n128 < KITE_QK_K; n128 += 128) {
            for (int l = 0; l < 32; ++l) {
                int is = l / 16;
                const int8_t q1 = (int8_t)((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int8_t q2 = (int8_t)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int8_t q3 = (int8_t)((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int8_t q4 = (int8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l + 0] = d * sc[is + 0] * q1;
                y[l + 32] = d * sc[is + 2] * q2;
                y[l + 64] = d * sc[is + 4] * q3;
                y[l + 96] = d * sc[is + 6] * q4;
            }
            y += 128;
            ql += 64;
            qh += 32;
            sc += 8;
        }
    }
}

static void q6_K_from_float(const float *x, void *dst, int64_t n) {
    int8_t L[KITE_QK_K];
    float scales[KITE_QK_K / 16];
    for (int64_t i = 0; i < n / KITE_QK_K; i++, x += KITE_QK_K) {
        kite_block_q6_K b;
        float max_scale = 0, max_abs_scale = 0;
        for (int ib = 0; ib < KITE_QK_K / 16; ++ib) {
            const float scale = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
            scales[ib] = scale;
            if (fabsf(scale) > max_abs_scale) {
                max_abs_scale = fabsf(scale);
                max_scale = scale;
            }
        }
        if (max_abs_scale < GROUP_MAX_EPS) {
            memset(&b, 0, sizeof b);
            memcpy((uint8_t *)dst + i * sizeof b, &b, sizeof b);
            continue;
        }
        float iscale = -128.f / max_scale;
        b.d = f2h(1 / iscale);
        for (int ib = 0; ib < KITE_QK_K / 16; ++ib) b.scales[ib] = (int8_t)MIN(127, nearest_int(iscale * scales[ib]));
        for (int j = 0; j < KITE_QK_K / 16; ++j) {
            float d = h2f(b.d) * b.scales[j];
            if (!d) continue;
            for (int ii = 0; ii < 16; ++ii) {
                int l = nearest_int(x[16 * j + ii] / d);
                L[16 * j + ii] = (int8_t)(MAX(-32, MIN(31, l)) + 32);
            }
        }
        uint8_t *ql = b.ql, *qh = b.qh;
        for (int j = 0; j < KITE_QK_K; j += 128) {
            for (int l = 0; l < 32; ++l) {
                const uint8_t q1 = L[j + l + 0] & 0xF, q2 = L[j + l + 32] & 0xF;
                const uint8_t q3 = L[j + l + 64] & 0xF, q4 = L[j + l + 96] & 0xF;
                ql[l + 0] = (uint8_t)(q1 | (q3 << 4));
                ql[l + 32] = (uint8_t)(q2 | (q4 << 4));
                qh[l] = (uint8_t)((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
                                  ((L[j + l + 96] >> 4) << 6));
            }
            ql += 64;
            qh += 32;
        }
        memcpy((uint8_t *)dst + i * sizeof b, &b, sizeof b);
    }
}

/* ---- q8_K ----------------------------------------------------------------------------------------- */

static void q8_K_to_float(const void *src, float *y, int64_t n) {
    for (int64_t i = 0; i < n / KITE_QK_K; i++) {
        kite_block_q8_K b;
        memcpy(&b, (const uint8_t *)src + i * sizeof b, sizeof b);
        for (int j = 0; j < KITE_QK_K; ++j) *y++ = b.d * b.qs[j];
    }
}

static void q8_K_from_float(const float *x, void *dst, int64_t n) {
    for (int64_t i = 0; i < n / KITE_QK_K; i++, x += KITE_QK_K) {
        kite_block_q8_K b;
        memset(&b, 0, sizeof b);
        float max = 0, amax = 0;
        for (int j = 0; j < KITE_QK_K; ++j) {
            float ax = fabsf(x[j]);
            if (ax > amax) { amax = ax; max = x[j]; }
        }
        if (amax) {
            const float iscale = -127.f / max;
            for (int j = 0; j < KITE_QK_K; ++j) b.qs[j] = (int8_t)MIN(127, nearest_int(iscale * x[j]));
            for (int j = 0; j < KITE_QK_K / 16; ++j) {
                int sum = 0;
                for (int ii = 0; ii < 16; ++ii) sum += b.qs[j * 16 + ii];
                b.bsums[j] = (int16_t)sum;
            }
            b.d = 1 / iscale;
        }
        memcpy((uint8_t *)dst + i * sizeof b, &b, sizeof b);
    }
}

/* ---- the table ------------------------------------------------------------------------------------ */

static const kite_type_traits traits[KITE_TYPE_COUNT] = {
    [KITE_TYPE_F32] = {"f32", 1, 4, f32_to_float, f32_from_float},
    [KITE_TYPE_F16] = {"f16", 1, 2, f16_to_float, f16_from_float},
    [KITE_TYPE_BF16] = {"bf16", 1, 2, bf16_to_float, bf16_from_float},
    [KITE_TYPE_Q4_0] = {"q4_0", KITE_QK4_0, sizeof(kite_block_q4_0), q4_0_to_float, q4_0_from_float},
    [KITE_TYPE_Q4_1] = {"q4_1", KITE_QK4_1, sizeof(kite_block_q4_1), q4_1_to_float, q4_1_from_float},
    [KITE_TYPE_Q5_0] = {"q5_0", KITE_QK5_0, sizeof(kite_block_q5_0), q5_0_to_float, q5_0_from_float},
    [KITE_TYPE_Q5_1] = {"q5_1", KITE_QK5_1, sizeof(kite_block_q5_1), q5_1_to_float, q5_1_from_float},
    [KITE_TYPE_Q8_0] = {"q8_0", KITE_QK8_0, sizeof(kite_block_q8_0), q8_0_to_float, q8_0_from_float},
    [KITE_TYPE_Q8_1] = {"q8_1", KITE_QK8_1, sizeof(kite_block_q8_1), q8_1_to_float, q8_1_from_float},
    [KITE_TYPE_Q2_K] = {"q2_K", KITE_QK_K, sizeof(kite_block_q2_K), q2_K_to_float, q2_K_from_float},
    [KITE_TYPE_Q3_K] = {"q3_K", KITE_QK_K, sizeof(kite_block_q3_K), q3_K_to_float, q3_K_from_float},
    [KITE_TYPE_Q4_K] = {"q4_K", KITE_QK_K, sizeof(kite_block_q4_K), q4_K_to_float, q4_K_from_float},
    [KITE_TYPE_Q5_K] = {"q5_K", KITE_QK_K, sizeof(kite_block_q5_K), q5_K_to_float, q5_K_from_float},
    [KITE_TYPE_Q6_K] = {"q6_K", KITE_QK_K, sizeof(kite_block_q6_K), q6_K_to_float, q6_K_from_float},
    [KITE_TYPE_Q8_K] = {"q8_K", KITE_QK_K, sizeof(kite_block_q8_K), q8_K_to_float, q8_K_from_float},
};

const kite_type_traits *kite_type_get(uint32_t type) {
    if (kite_is_trellis(type)) return kite_kt_traits(type);
    return (type < KITE_TYPE_COUNT && traits[type].name) ? &traits[type] : NULL;
}

size_t kite_type_row_bytes(uint32_t type, int64_t n) {
    const kite_type_traits *t = kite_type_get(type);
    if (!t || n < 0 || n % t->block_size != 0) return 0;
    return (size_t)(n / t->block_size) * t->block_bytes;
}

/* Elements per accumulation chunk of kite_ref_dot: the block, or 32 for the unblocked float types. */
#define KITE_REF_DOT_FLOAT_CHUNK 32

float kite_ref_dot(uint32_t type, const void *row, const float *x, int64_t n) {
    const kite_type_traits *t = kite_type_get(type);
    if (!t || !t->to_float || n <= 0 || n % t->block_size != 0) return 0.0f;
    const int64_t chunk = t->block_size > 1 ? t->block_size : KITE_REF_DOT_FLOAT_CHUNK;
    float w[KITE_QK_K];
    float total = 0.0f;
    for (int64_t start = 0; start < n; start += chunk) {
        const int64_t len = MIN(chunk, n - start);
        t->to_float((const uint8_t *)row + (start / t->block_size) * (int64_t)t->block_bytes, w, len);
        double sum = 0.0;
        for (int64_t j = 0; j < len; j++) sum += (double)w[j] * (double)x[start + j];
        total += (float)sum;
    }
    return total;
}
