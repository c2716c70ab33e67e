/* Importance-weighted row quantizers. The searches below are ggml's (ggml-quants.c: make_qx_quants,
 * make_qkx3_quants, make_qp_quants and the quantize_row_*_impl functions), re-derived so that every float
 * operation happens in the same order: the output must be byte-identical to ggml_quantize_chunk's. This
 * file is compiled with -ffp-contract=off (CMakeLists.txt) so no compiler fuses a multiply-add that ggml
 * rounds twice. */
#include "quant/quantize.h"

#include <math.h>
#include <string.h>

#include "base/fp16.h"
#include "quant/blocks.h"
#include "quant/trellis.h"
#include "quant/types.h"

/* Below this a group counts as all zeros (ggml's GROUP_MAX_EPS). */
#define ZERO_GROUP_EPS 1e-15f

static inline int clamp_int(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Round to nearest, ties to even, by adding 1.5 * 2^23 (ggml's nearest_int; |v| <= 2^22). */
static inline int round_nearest(float v) {
    float t = v + 12582912.f;
    int32_t bits;
    memcpy(&bits, &t, 4);
    return (bits & 0x007fffff) - 0x00400000;
}

static inline uint16_t to_half(float f) { return kite_f32_to_fp16(f); }
static inline float from_half(uint16_t h) { return kite_fp16_to_f32(h); }

/* Symmetric levels L[i] in [0, 2*nmax) (value = scale * (L - nmax)) minimising sum w[i] * err^2: the
 * scale from the largest magnitude, then 18 nearby trial scales, each refit by least squares. */
static float fit_symmetric(int n, int nmax, const float *x, int8_t *L, const float *w) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; ++i) {
        float ax = fabsf(x[i]);
        if (ax > amax) { amax = ax; max = x[i]; }
    }
    if (amax < ZERO_GROUP_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = (float)-nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        int l = clamp_int(round_nearest(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)(l + nmax);
        sumlx += w[i] * x[i] * (float)l;
        suml2 += w[i] * (float)l * (float)l;
    }
    float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int step = -9; step <= 9; ++step) {
        if (step == 0) continue;
        iscale = -((float)nmax + 0.1f * (float)step) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; ++i) {
            int l = clamp_int(round_nearest(iscale * x[i]), -nmax, nmax - 1);
            sumlx += w[i] * x[i] * (float)l;
            suml2 += w[i] * (float)l * (float)l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; ++i) L[i] = (int8_t)(nmax + clamp_int(round_nearest(iscale * x[i]), -nmax, nmax - 1));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* Asymmetric levels L[i] in [0, nmax] (value = scale * L - *neg_min) minimising sum w[i] * err^2 over
 * the range scale and nstep + 1 trial scales, each refit by weighted least squares (types.c). */
static float fit_affine(int n, int nmax, const float *x, const float *w, uint8_t *L, float *neg_min, uint8_t *trial,
                        float rmin, float rdelta, int nstep) {
    return kite_fit_affine_levels(n, nmax, x, w, L, neg_min, trial, rmin, rdelta, nstep, false);
}

/* Non-negative levels L[i] in [0, nmax] for non-negative x (the sub-block scales and mins of the
 * K-quants): best of 9 trial scales by weighted error, then up to 5 passes of per-element level changes
 * that raise the least-squares fit. */
static float fit_positive(int n, int nmax, const float *x, uint8_t *L, const float *w) {
    float max = 0;
    for (int i = 0; i < n; ++i) max = max > x[i] ? max : x[i];
    if (max < ZERO_GROUP_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = (float)nmax / max;
    for (int i = 0; i < n; ++i) L[i] = (uint8_t)round_nearest(iscale * x[i]);
    float scale = 1 / iscale;
    float best_err = 0;
    for (int i = 0; i < n; ++i) {
        float diff = x[i] - scale * (float)L[i];
        best_err += w[i] * diff * diff;
    }
    for (int step = -4; step <= 4; ++step) {
        if (step == 0) continue;
        float iscale_step = (0.1f * (float)step + (float)nmax) / max;
        float scale_step = 1 / iscale_step;
        float err = 0;
        for (int i = 0; i < n; ++i) {
            int l = round_nearest(iscale_step * x[i]);
            if (l > nmax) l = nmax;
            float diff = x[i] - scale_step * (float)l;
            err += w[i] * diff * diff;
        }
        if (err < best_err) {
            best_err = err;
            iscale = iscale_step;
        }
    }
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        int l = round_nearest(iscale * x[i]);
        if (l > nmax) l = nmax;
        L[i] = (uint8_t)l;
        sumlx += w[i] * x[i] * (float)l;
        suml2 += w[i] * (float)l * (float)l;
    }
    for (int pass = 0; pass < 5; ++pass) {
        int changed = 0;
        for (int i = 0; i < n; ++i) {
            float slx = sumlx - w[i] * x[i] * (float)L[i];
            float sl2 = suml2 - w[i] * (float)L[i] * (float)L[i];
            if (slx > 0 && sl2 > 0) {
                int new_l = round_nearest(x[i] * sl2 / slx);
                if (new_l > nmax) new_l = nmax;
                if (new_l != L[i]) {
                    slx += w[i] * x[i] * (float)new_l;
                    sl2 += w[i] * (float)new_l * (float)new_l;
                    if (slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (uint8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        ++changed;
                    }
                }
            }
        }
        if (!changed) break;
    }
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* Sum of squares in index order, as ggml accumulates it. */
static float sum_squares(const float *x, int64_t n) {
    float s = 0;
    for (int64_t i = 0; i < n; ++i) s += x[i] * x[i];
    return s;
}

/* ---- 32-element block types ------------------------------------------------------------------- */

static void q4_0_row(const float *x, void *dst, int64_t n, const float *qw) {
    kite_block_q4_0 *y = dst;
    const float sigma2 = sum_squares(x, n) / (float)n;
    float weight[32];
    int8_t L[32];
    for (int64_t ib = 0; ib < n / 32; ++ib) {
        const float *xb = x + 32 * ib, *wb = qw + 32 * ib;
        for (int j = 0; j < 32; ++j) weight[j] = wb[j] * sqrtf(sigma2 + xb[j] * xb[j]);
        y[ib].d = to_half(fit_symmetric(32, 8, xb, L, weight));
        for (int j = 0; j < 16; ++j) y[ib].qs[j] = (uint8_t)(L[j] | (L[j + 16] << 4));
    }
}

/* Q4_1 / Q5_1: per block of 32, importance weights w * sqrt(sigma^2 + x^2) (ggml's), affine levels in
 * [0, nmax], and store() packing the block's scale, minimum and levels. */
typedef void (*affine_store_fn)(void *dst, int64_t block, float d, float m, const uint8_t L[32]);
static void affine_row(const float *x, void *dst, int64_t n, const float *qw, int nmax, affine_store_fn store) {
    const float sigma2 = sum_squares(x, n) / (float)n;
    float weight[32], neg_min;
    uint8_t L[32], trial[32];
    for (int64_t ib = 0; ib < n / 32; ++ib) {
        const float *xb = x + 32 * ib, *wb = qw + 32 * ib;
        for (int j = 0; j < 32; ++j) weight[j] = wb[j] * sqrtf(sigma2 + xb[j] * xb[j]);
        float d = fit_affine(32, nmax, xb, weight, L, &neg_min, trial, -0.9f, 0.05f, 36);
        store(dst, ib, d, -neg_min, L);
    }
}

static void store_q4_1(void *dst, int64_t block, float d, float m, const uint8_t L[32]) {
    kite_block_q4_1 *y = (kite_block_q4_1 *)dst + block;
    y->d = to_half(d);
    y->m = to_half(m);
    for (int j = 0; j < 16; ++j) y->qs[j] = (uint8_t)(L[j] | (L[j + 16] << 4));
}

static void q4_1_row(const float *x, void *dst, int64_t n, const float *qw) { affine_row(x, dst, n, qw, 15, store_q4_1); }

/* Low nibbles into qs, fifth bits into the little-endian u32 qh (q5_0 and q5_1 share it). */
static void pack_5bit(const uint8_t *L, uint8_t qs[16], uint8_t qh_out[4]) {
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
        qs[j] = (uint8_t)((L[j] & 0x0F) | ((L[j + 16] & 0x0F) << 4));
        qh |= (uint32_t)((L[j] & 0x10u) >> 4) << j;
        qh |= (uint32_t)((L[j + 16] & 0x10u) >> 4) << (j + 16);
    }
    for (int b = 0; b < 4; ++b) qh_out[b] = (uint8_t)(qh >> (8 * b));
}

static void q5_0_row(const float *x, void *dst, int64_t n, const float *qw) {
    kite_block_q5_0 *y = dst;
    const float sigma2 = sum_squares(x, n) / (float)n;
    float weight[32];
    int8_t L[32];
    uint8_t U[32];
    for (int64_t ib = 0; ib < n / 32; ++ib) {
        const float *xb = x + 32 * ib, *wb = qw + 32 * ib;
        for (int j = 0; j < 32; ++j) weight[j] = wb[j] * sqrtf(sigma2 + xb[j] * xb[j]);
        y[ib].d = to_half(fit_symmetric(32, 16, xb, L, weight));
        for (int j = 0; j < 32; ++j) U[j] = (uint8_t)L[j];
        pack_5bit(U, y[ib].qs, y[ib].qh);
    }
}

static void store_q5_1(void *dst, int64_t block, float d, float m, const uint8_t L[32]) {
    kite_block_q5_1 *y = (kite_block_q5_1 *)dst + block;
    y->d = to_half(d);
    y->m = to_half(m);
    pack_5bit(L, y->qs, y->qh);
}

static void q5_1_row(const float *x, void *dst, int64_t n, const float *qw) { affine_row(x, dst, n, qw, 31, store_q5_1); }

/* ---- K-quants (super-blocks of 256) ------------------------------------------------------------ */

/* 2-bit levels of 256 elements into 64 bytes: per 128 elements, element 32*s + l in bits 2s of byte l. */
static void pack_2bit(const uint8_t *L, uint8_t qs[64]) {
    for (int j = 0; j < KITE_QK_K; j += 128)
        for (int l = 0; l < 32; ++l)
            qs[j / 4 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
}

static void q2_K_row(const float *x, void *dst, int64_t n, const float *qw) {
    kite_block_q2_K *y = dst;
    uint8_t L[KITE_QK_K], trial[16], Ls[16], Lm[16];
    float mins[16], scales[16], sw[16], weight[16];
    for (int64_t i = 0; i < n / KITE_QK_K; ++i, x += KITE_QK_K) {
        const float sigma2 = sum_squares(x, KITE_QK_K) / (float)KITE_QK_K;
        for (int j = 0; j < 16; ++j) {
            const float *wq = qw + KITE_QK_K * i + 16 * j;
            for (int l = 0; l < 16; ++l) weight[l] = wq[l] * sqrtf(sigma2 + x[16 * j + l] * x[16 * j + l]);
            sw[j] = 0;
            for (int l = 0; l < 16; ++l) sw[j] += weight[l];
            scales[j] = fit_affine(16, 3, x + 16 * j, weight, L + 16 * j, &mins[j], trial, -0.9f, 0.05f, 36);
        }
        float dm = fit_positive(16, 15, scales, Ls, sw);
        float mm = fit_positive(16, 15, mins, Lm, sw);
        y[i].d = to_half(dm);
        y[i].dmin = to_half(mm);
        dm = from_half(y[i].d);
        mm = from_half(y[i].dmin);
        for (int j = 0; j < 16; ++j) y[i].scales[j] = (uint8_t)(Ls[j] | (Lm[j] << 4));
        /* Requantize each element against the stored (rounded) scale and min. */
        for (int j = 0; j < 16; ++j) {
            const float d = dm * (float)(y[i].scales[j] & 0xF);
            if (d == 0) continue;
            const float m = mm * (float)(y[i].scales[j] >> 4);
            for (int ii = 0; ii < 16; ++ii)
                L[16 * j + ii] = (uint8_t)clamp_int(round_nearest((x[16 * j + ii] + m) / d), 0, 3);
        }
        pack_2bit(L, y[i].qs);
    }
}

static void q3_K_row(const float *x, void *dst, int64_t n, const float *qw) {
    kite_block_q3_K *y = dst;
    int8_t L[KITE_QK_K], Ls[16];
    float scales[16], weight[16], sw[16];
    for (int64_t i = 0; i < n / KITE_QK_K; ++i, x += KITE_QK_K) {
        const float sigma2 = 2 * sum_squares(x, KITE_QK_K) / (float)KITE_QK_K;
        for (int j = 0; j < 16; ++j) {
            const float *wq = qw + KITE_QK_K * i + 16 * j;
            for (int l = 0; l < 16; ++l) weight[l] = wq[l] * sqrtf(sigma2 + x[16 * j + l] * x[16 * j + l]);
            float sumw = 0;
            for (int l = 0; l < 16; ++l) sumw += weight[l];
            sw[j] = sumw;
            scales[j] = fit_symmetric(16, 4, x + 16 * j, L + 16 * j, weight);
        }
        memset(y[i].scales, 0, 12);
        float d_block = fit_symmetric(16, 32, scales, Ls, sw);
        for (int j = 0; j < 16; ++j) {
            int l = Ls[j];
            if (j < 8) y[i].scales[j] = (uint8_t)(l & 0xF);
            else y[i].scales[j - 8] |= (uint8_t)((l & 0xF) << 4);
            l >>= 4;
            y[i].scales[j % 4 + 8] |= (uint8_t)(l << (2 * (j / 4)));
        }
        y[i].d = to_half(d_block);
        for (int j = 0; j < 16; ++j) {
            int sc = j < 8 ? y[i].scales[j] & 0xF : y[i].scales[j - 8] >> 4;
            sc = (sc | (((y[i].scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32;
            const float d = from_half(y[i].d) * (float)sc;
            if (d == 0) continue;
            for (int ii = 0; ii < 16; ++ii)
                L[16 * j + ii] = (int8_t)(clamp_int(round_nearest(x[16 * j + ii] / d), -4, 3) + 4);
        }
        /* High bits: element 32*b + l in bit b of hmask[l]. */
        memset(y[i].hmask, 0, KITE_QK_K / 8);
        uint8_t U[KITE_QK_K];
        for (int j = 0; j < KITE_QK_K; ++j) {
            int l = L[j];
            if (l > 3) {
                y[i].hmask[j % 32] |= (uint8_t)(1u << (j / 32));
                l -= 4;
            }
            U[j] = (uint8_t)l;
        }
        pack_2bit(U, y[i].qs);
    }
}

/* Sub-block j's 6-bit scale and min from the 12 packed bytes of q4_K / q5_K. */
static void unpack_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* The shared part of q4_K and q5_K: weights, per-32 affine fits, 6-bit scales and mins, requantized
 * levels L[256] in [0, nmax]. */
static void kx_super_block(const float *x, const float *qw, int nmax, uint8_t *L, uint16_t *d_out, uint16_t *dmin_out,
                           uint8_t packed[12]) {
    uint8_t trial[32], Ls[8], Lm[8];
    float weights[32], sw[8], mins[8], scales[8];
    const float sigma2 = 2 * sum_squares(x, KITE_QK_K) / (float)KITE_QK_K;
    for (int j = 0; j < 8; ++j) {
        for (int l = 0; l < 32; ++l) weights[l] = qw[32 * j + l] * sqrtf(sigma2 + x[32 * j + l] * x[32 * j + l]);
        float sumw = 0;
        for (int l = 0; l < 32; ++l) sumw += weights[l];
        sw[j] = sumw;
        scales[j] = fit_affine(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], trial, -0.9f, 0.05f, 36);
    }
    float d_block = fit_positive(8, 63, scales, Ls, sw);
    float m_block = fit_positive(8, 63, mins, Lm, sw);
    for (int j = 0; j < 8; ++j) {
        uint8_t ls = Ls[j] < 63 ? Ls[j] : 63, lm = Lm[j] < 63 ? Lm[j] : 63;
        if (j < 4) {
            packed[j] = ls;
            packed[j + 4] = lm;
        } else {
            packed[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
            packed[j - 4] |= (uint8_t)((ls >> 4) << 6);
            packed[j] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    *d_out = to_half(d_block);
    *dmin_out = to_half(m_block);
    for (int j = 0; j < 8; ++j) {
        uint8_t sc, m;
        unpack_scale_min(j, packed, &sc, &m);
        const float d = from_half(*d_out) * (float)sc;
        if (d == 0) continue;
        const float dm = from_half(*dmin_out) * (float)m;
        for (int ii = 0; ii < 32; ++ii)
            L[32 * j + ii] = (uint8_t)clamp_int(round_nearest((x[32 * j + ii] + dm) / d), 0, nmax);
    }
}

static void q4_K_row(const float *x, void *dst, int64_t n, const float *qw) {
    kite_block_q4_K *y = dst;
    uint8_t L[KITE_QK_K];
    for (int64_t i = 0; i < n / KITE_QK_K; ++i, x += KITE_QK_K) {
        /* Ls/Lm never exceed 63 here (fit_positive caps at nmax), so the cap in kx_super_block is a no-op
         * for q4_K as in ggml. */
        kx_super_block(x, qw + KITE_QK_K * i, 15, L, &y[i].d, &y[i].dmin, y[i].scales);
        uint8_t *q = y[i].qs;
        for (int j = 0; j < KITE_QK_K; j += 64, q += 32)
            for (int l = 0; l < 32; ++l) q[l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
    }
}

static void q5_K_row(const float *x, void *dst, int64_t n, const float *qw) {
    kite_block_q5_K *y = dst;
    uint8_t L[KITE_QK_K];
    for (int64_t i = 0; i < n / KITE_QK_K; ++i, x += KITE_QK_K) {
        kx_super_block(x, qw + KITE_QK_K * i, 31, L, &y[i].d, &y[i].dmin, y[i].scales);
        uint8_t *qh = y[i].qh, *ql = y[i].qs;
        memset(qh, 0, KITE_QK_K / 8);
        uint8_t m1 = 1, m2 = 2;
        for (int base = 0; base < KITE_QK_K; base += 64, ql += 32, m1 = (uint8_t)(m1 << 2), m2 = (uint8_t)(m2 << 2)) {
            for (int j = 0; j < 32; ++j) {
                int l1 = L[base + j], l2 = L[base + j + 32];
                if (l1 > 15) { l1 -= 16; qh[j] |= m1; }
                if (l2 > 15) { l2 -= 16; qh[j] |= m2; }
                ql[j] = (uint8_t)(l1 | (l2 << 4));
            }
        }
    }
}

static void q6_K_row(const float *x, void *dst, int64_t n, const float *qw) {
    kite_block_q6_K *y = dst;
    int8_t L[KITE_QK_K];
    float scales[16];
    for (int64_t i = 0; i < n / KITE_QK_K; ++i, x += KITE_QK_K) {
        float max_scale = 0, max_abs_scale = 0;
        for (int ib = 0; ib < 16; ++ib) {
            /* q6_K weighs by the importance alone (ggml's sigma2 term is commented out there). */
            const float scale = fit_symmetric(16, 32, x + 16 * ib, L + 16 * ib, qw + KITE_QK_K * i + 16 * ib);
            scales[ib] = scale;
            if (fabsf(scale) > max_abs_scale) {
                max_abs_scale = fabsf(scale);
                max_scale = scale;
            }
        }
        if (max_abs_scale < ZERO_GROUP_EPS) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        const float iscale = -128.f / max_scale;
        y[i].d = to_half(1 / iscale);
        for (int ib = 0; ib < 16; ++ib) {
            int s = round_nearest(iscale * scales[ib]);
            y[i].scales[ib] = (int8_t)(s < 127 ? s : 127);
        }
        for (int j = 0; j < 16; ++j) {
            const float d = from_half(y[i].d) * (float)y[i].scales[j];
            if (d == 0) continue;
            for (int ii = 0; ii < 16; ++ii)
                L[16 * j + ii] = (int8_t)(clamp_int(round_nearest(x[16 * j + ii] / d), -32, 31) + 32);
        }
        uint8_t *ql = y[i].ql, *qh = y[i].qh;
        for (int j = 0; j < KITE_QK_K; j += 128, ql += 64, qh += 32) {
            for (int l = 0; l < 32; ++l) {
                const uint8_t a = (uint8_t)L[j + l], b = (uint8_t)L[j + l + 32];
                const uint8_t c = (uint8_t)L[j + l + 64], e = (uint8_t)L[j + l + 96];
                ql[l] = (uint8_t)((a & 0xF) | ((c & 0xF) << 4));
                ql[l + 32] = (uint8_t)((b & 0xF) | ((e & 0xF) << 4));
                qh[l] = (uint8_t)((a >> 4) | ((b >> 4) << 2) | ((c >> 4) << 4) | ((e >> 4) << 6));
            }
        }
    }
}

/* ---- dispatch ---------------------------------------------------------------------------------- */

bool kite_quantize_type_supported(uint32_t type) {
    switch (type) {
    case KITE_TYPE_F32: case KITE_TYPE_F16: case KITE_TYPE_BF16: case KITE_TYPE_Q4_0: case KITE_TYPE_Q4_1:
    case KITE_TYPE_Q5_0: case KITE_TYPE_Q5_1: case KITE_TYPE_Q8_0: case KITE_TYPE_Q2_K: case KITE_TYPE_Q3_K:
    case KITE_TYPE_Q4_K: case KITE_TYPE_Q5_K: case KITE_TYPE_Q6_K:
    case KITE_TYPE_KT2: case KITE_TYPE_KT2_5: case KITE_TYPE_KT3: case KITE_TYPE_KT2H: case KITE_TYPE_KT2_5H:
    case KITE_TYPE_KT3H:
        return true;
    default:
        return false;
    }
}

typedef void (*weighted_row_fn)(const float *x, void *y, int64_t n, const float *qw);

size_t kite_quantize_rows(uint32_t type, const float *src, void *dst, int64_t n_rows, int64_t n_per_row,
                          const float *imatrix) {
    if (!kite_quantize_type_supported(type) || n_rows < 0 || n_per_row <= 0) return 0;
    /* trellis types: whole groups of 16 rows, importance used as given (quant/trellis.h) */
    if (kite_is_trellis(type)) return n_rows == 0 ? 0 : kite_kt_quantize(type, src, dst, n_rows, n_per_row, imatrix);
    const kite_type_traits *tr = kite_type_get(type);
    const size_t row_bytes = kite_type_row_bytes(type, n_per_row);
    if (!tr || !tr->from_float || row_bytes == 0) return 0;
    weighted_row_fn weighted = NULL;
    if (imatrix) {
        switch (type) {
        case KITE_TYPE_Q4_0: weighted = q4_0_row; break;
        case KITE_TYPE_Q4_1: weighted = q4_1_row; break;
        case KITE_TYPE_Q5_0: weighted = q5_0_row; break;
        case KITE_TYPE_Q5_1: weighted = q5_1_row; break;
        case KITE_TYPE_Q2_K: weighted = q2_K_row; break;
        case KITE_TYPE_Q3_K: weighted = q3_K_row; break;
        case KITE_TYPE_Q4_K: weighted = q4_K_row; break;
        case KITE_TYPE_Q5_K: weighted = q5_K_row; break;
        case KITE_TYPE_Q6_K: weighted = q6_K_row; break;
        default: break; /* Q8_0 and the float types have no importance-weighted search */
        }
    }
    uint8_t *out = dst;
    for (int64_t r = 0; r < n_rows; ++r) {
        const float *row = src + r * n_per_row;
        if (weighted) weighted(row, out + (size_t)r * row_bytes, n_per_row, imatrix);
        else tr->from_float(row, out + (size_t)r * row_bytes, n_per_row);
    }
    return (size_t)n_rows * row_bytes;
}
