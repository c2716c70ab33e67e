/* AArch64 NEON kernel set with the dot-product extension (sdot). Weights are packed 4 rows to a group
 * (kernels_internal.h): one 128-bit register holds 4 consecutive columns of 4 rows, and
 * vdotq_laneq_s32 against one 4-byte word of the activations yields the 4 row partial sums. Integer
 * parts are exact and the float steps follow kernels_internal.h (vfmaq_f32 is a fused multiply-add,
 * like fmaf), so results are bit-identical to the reference and batch-invariant.
 * Accelerated: q8_0, q4_0, f32, f16, bf16. The K-quants and q4_1/q5_0/q5_1 use the reference.
 * CPUs without dotprod (HWCAP_ASIMDDP) do not get this set (dispatch falls back to the reference).
 *
 * Compiled with -march=armv8.2-a+dotprod (CMakeLists.txt). */
#include <arm_neon.h>
#include <math.h>
#include <string.h>

#include "kernels/kernels_internal.h"

#define G4 4
#define TILE_B 4
#define INLINE static inline __attribute__((always_inline))

static const uint32_t LAYOUT4 = (uint32_t)KITE_LAYOUT_INTERLEAVED | G4;

INLINE float load_f32(const void *p) { float v; memcpy(&v, p, 4); return v; }

/* ---- activation quantization (same bytes as kite_ref_quantize_act) ---------------------------------------- */

/* 16 floats -> 16 int8 at q; returns their sum. */
INLINE int32_t quant16(const float *x, float id, int8_t *q) {
    const float32x4_t hi = vdupq_n_f32(127.0f), lo = vdupq_n_f32(-127.0f);
    int32x4_t i[4];
    for (int k = 0; k < 4; k++) {
        float32x4_t v = vmulq_n_f32(vld1q_f32(x + 4 * k), id);
        v = vminq_f32(hi, vmaxq_f32(lo, v));
        i[k] = vcvtnq_s32_f32(v); /* nearest, ties to even */
    }
    int16x8_t h0 = vcombine_s16(vmovn_s32(i[0]), vmovn_s32(i[1]));
    int16x8_t h1 = vcombine_s16(vmovn_s32(i[2]), vmovn_s32(i[3]));
    vst1q_s8(q, vcombine_s8(vmovn_s16(h0), vmovn_s16(h1)));
    return vaddvq_s32(vaddq_s32(vaddq_s32(i[0], i[1]), vaddq_s32(i[2], i[3])));
}

static float block_scale(const float *x, int len, float *id_out) {
    float32x4_t m = vdupq_n_f32(0.0f);
    for (int j = 0; j < len; j += 4) m = vmaxq_f32(m, vabsq_f32(vld1q_f32(x + j)));
    float amax = vmaxvq_f32(m);
    float d = amax / 127.0f;
    *id_out = d != 0.0f ? 1.0f / d : 0.0f;
    return d;
}

static void neon_quantize_act(uint32_t type, const float *x, int64_t cols, int32_t b0, int32_t b1, void *act) {
    kite_family f = kite_type_family(type);
    if (f != KITE_FAMILY_B32 && f != KITE_FAMILY_K) return;
    kite_act_geom g = kite_act_geometry(f, cols);
    const bool rotate = kite_kt_is_rotated(type); /* a rotated trellis type: blocks in its basis (quant/trellis.h) */
    float rotated[256];
    for (int32_t b = b0; b < b1; b++) {
        uint8_t *row = (uint8_t *)act + (size_t)b * g.row_bytes;
        const float *xr = x + (size_t)b * (size_t)cols;
        int8_t *qs = (int8_t *)row;
        for (int64_t blk = 0; blk < g.n_blocks; blk++) {
            const float *xb = xr + blk * g.block;
            if (rotate) {
                kite_kt_rotate(xb, rotated);
                xb = rotated;
            }
            int8_t *q = qs + blk * g.block;
            float id;
            float d = block_scale(xb, g.block, &id);
            memcpy(row + g.off_d + (size_t)blk * 4, &d, 4);
            if (f == KITE_FAMILY_B32) {
                int32_t sum = quant16(xb, id, q) + quant16(xb + 16, id, q + 16);
                memcpy(row + g.off_sum + (size_t)blk * 4, &sum, 4);
            } else {
                int16_t s16[16], s32[8];
                for (int s = 0; s < 16; s++) s16[s] = (int16_t)quant16(xb + 16 * s, id, q + 16 * s);
                for (int s = 0; s < 8; s++) s32[s] = (int16_t)(s16[2 * s] + s16[2 * s + 1]);
                memcpy(row + g.off_sum + (size_t)blk * 32, s16, 32);
                memcpy(row + g.off_sum32 + (size_t)blk * 16, s32, 16);
            }
        }
    }
}

/* ---- tiles ------------------------------------------------------------------------------------------------------ */

typedef struct tile_ctx {
    const uint8_t *act;
    kite_act_geom ag;
    const float *x;
    int64_t cols;
    float *y;
    int64_t y_stride;
} tile_ctx;

INLINE void store_rows(const tile_ctx *c, int32_t b, int64_t row0, int64_t r0, int64_t r1, float32x4_t v) {
    float *dst = c->y + (int64_t)b * c->y_stride + row0;
    if (row0 >= r0 && row0 + 4 <= r1) {
        vst1q_f32(dst, v);
        return;
    }
    float tmp[4];
    vst1q_f32(tmp, v);
    for (int i = 0; i < 4; i++)
        if (row0 + i >= r0 && row0 + i < r1) dst[i] = tmp[i];
}

INLINE void tile_b32(bool q4, const uint8_t *grp, const kite_pack_geom *g, const tile_ctx *c, int32_t b0, const int NB,
                     int64_t row0, int64_t r0, int64_t r1) {
    const uint8x16_t low4 = vdupq_n_u8(0x0F);
    const int8x16_t eight = vdupq_n_s8(8);
    float32x4_t acc[TILE_B];
    const uint8_t *arow[TILE_B];
    for (int b = 0; b < NB; b++) {
        acc[b] = vdupq_n_f32(0.0f);
        arow[b] = c->act + (size_t)(b0 + b) * c->ag.row_bytes;
    }
    for (int64_t blk = 0; blk < g->n_blocks; blk++) {
        const uint8_t *q = grp + (size_t)blk * g->block_bytes; /* its scales follow at q + q_bytes */
        __builtin_prefetch(q + 8 * g->block_bytes);
        int8x16_t w[8];
        if (q4) {
            for (int p = 0; p < 4; p++) {
                uint8x16_t v = vld1q_u8(q + 16 * p);
                w[p] = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(v, low4)), eight);
                w[p + 4] = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(v, 4)), eight);
            }
        } else {
            for (int j = 0; j < 8; j++) w[j] = vld1q_s8((const int8_t *)q + 16 * j);
        }
        uint16_t dh[4];
        memcpy(dh, q + g->q_bytes, 8);
        const float32x4_t dw = vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(dh)));
        for (int b = 0; b < NB; b++) {
            const int8_t *xq = (const int8_t *)arow[b] + blk * 32;
            int8x16_t x0 = vld1q_s8(xq), x1 = vld1q_s8(xq + 16);
            int32x4_t i0 = vdupq_n_s32(0), i1 = vdupq_n_s32(0);
            i0 = vdotq_laneq_s32(i0, w[0], x0, 0);
            i1 = vdotq_laneq_s32(i1, w[1], x0, 1);
            i0 = vdotq_laneq_s32(i0, w[2], x0, 2);
            i1 = vdotq_laneq_s32(i1, w[3], x0, 3);
            i0 = vdotq_laneq_s32(i0, w[4], x1, 0);
            i1 = vdotq_laneq_s32(i1, w[5], x1, 1);
            i0 = vdotq_laneq_s32(i0, w[6], x1, 2);
            i1 = vdotq_laneq_s32(i1, w[7], x1, 3);
            float32x4_t scale = vmulq_n_f32(dw, load_f32(arow[b] + c->ag.off_d + blk * 4));
            acc[b] = vfmaq_f32(acc[b], vcvtq_f32_s32(vaddq_s32(i0, i1)), scale);
        }
    }
    for (int b = 0; b < NB; b++) store_rows(c, b0 + b, row0, r0, r1, acc[b]);
}

INLINE float32x4_t load_w4(uint32_t type, const uint8_t *p) {
    if (type == KITE_TYPE_F32) return vld1q_f32((const float *)p);
    uint16_t h[4];
    memcpy(h, p, 8);
    uint16x4_t v = vld1_u16(h);
    if (type == KITE_TYPE_F16) return vcvt_f32_f16(vreinterpret_f16_u16(v));
    return vreinterpretq_f32_u32(vshll_n_u16(v, 16));
}

/* NG groups (1 or 2) x NB activation rows: acc = fma(w_k, x_k, acc) over k in order. */
INLINE void tile_float(uint32_t type, const uint8_t *grp, const kite_pack_geom *g, const tile_ctx *c, int32_t b0,
                       const int NG, const int NB, int64_t row0, int64_t r0, int64_t r1) {
    float32x4_t acc[2][TILE_B];
    const float *xr[TILE_B];
    for (int b = 0; b < NB; b++) {
        acc[0][b] = vdupq_n_f32(0.0f);
        acc[1][b] = vdupq_n_f32(0.0f);
        xr[b] = c->x + (size_t)(b0 + b) * (size_t)c->cols;
    }
    const size_t qb = g->q_bytes;
    const uint8_t *grp1 = grp + g->group_bytes;
    for (int64_t k = 0; k < c->cols; k++) {
        float32x4_t w0 = load_w4(type, grp + (size_t)k * qb);
        float32x4_t w1 = NG > 1 ? load_w4(type, grp1 + (size_t)k * qb) : w0;
        for (int b = 0; b < NB; b++) {
            float32x4_t xv = vdupq_n_f32(xr[b][k]);
            acc[0][b] = vfmaq_f32(acc[0][b], w0, xv);
            if (NG > 1) acc[1][b] = vfmaq_f32(acc[1][b], w1, xv);
        }
    }
    for (int b = 0; b < NB; b++) {
        store_rows(c, b0 + b, row0, r0, r1, acc[0][b]);
        if (NG > 1) store_rows(c, b0 + b, row0 + G4, r0, r1, acc[1][b]);
    }
}

#define TILE_SWITCH(nb, CALL) \
    switch (nb) {              \
    case 1: CALL(1); break;    \
    case 2: CALL(2); break;    \
    case 3: CALL(3); break;    \
    default: CALL(4); break;   \
    }

typedef void (*runner)(const uint8_t *, const kite_pack_geom *, const tile_ctx *, int32_t, int, int, int64_t, int64_t, int64_t);

static void run_q8_0(const uint8_t *grp, const kite_pack_geom *g, const tile_ctx *c, int32_t b0, int nb, int ng, int64_t row0,
                     int64_t r0, int64_t r1) {
    (void)ng;
#define CALL(N) tile_b32(false, grp, g, c, b0, N, row0, r0, r1)
    TILE_SWITCH(nb, CALL)
#undef CALL
}
static void run_q4_0(const uint8_t *grp, const kite_pack_geom *g, const tile_ctx *c, int32_t b0, int nb, int ng, int64_t row0,
                     int64_t r0, int64_t r1) {
    (void)ng;
#define CALL(N) tile_b32(true, grp, g, c, b0, N, row0, r0, r1)
    TILE_SWITCH(nb, CALL)
#undef CALL
}
#define FLOAT_RUNNER(name, TYPE)                                                                                \
    static void name(const uint8_t *grp, const kite_pack_geom *g, const tile_ctx *c, int32_t b0, int nb, int ng, \
                     int64_t row0, int64_t r0, int64_t r1) {                                                    \
        if (ng > 1) {                                                                                           \
            switch (nb) {                                                                                       \
            case 1: tile_float(TYPE, grp, g, c, b0, 2, 1, row0, r0, r1); break;                                 \
            case 2: tile_float(TYPE, grp, g, c, b0, 2, 2, row0, r0, r1); break;                                 \
            case 3: tile_float(TYPE, grp, g, c, b0, 2, 3, row0, r0, r1); break;                                 \
            default: tile_float(TYPE, grp, g, c, b0, 2, 4, row0, r0, r1); break;                                \
            }                                                                                                   \
        } else {                                                                                                \
            switch (nb) {                                                                                       \
            case 1: tile_float(TYPE, grp, g, c, b0, 1, 1, row0, r0, r1); break;                                 \
            case 2: tile_float(TYPE, grp, g, c, b0, 1, 2, row0, r0, r1); break;                                 \
            case 3: tile_float(TYPE, grp, g, c, b0, 1, 3, row0, r0, r1); break;                                 \
            default: tile_float(TYPE, grp, g, c, b0, 1, 4, row0, r0, r1); break;                                \
            }                                                                                                   \
        }                                                                                                       \
    }
FLOAT_RUNNER(run_f32, KITE_TYPE_F32)
FLOAT_RUNNER(run_f16, KITE_TYPE_F16)
FLOAT_RUNNER(run_bf16, KITE_TYPE_BF16)

static bool accelerated(uint32_t type) {
    return type == KITE_TYPE_F32 || type == KITE_TYPE_F16 || type == KITE_TYPE_BF16 || type == KITE_TYPE_Q8_0 ||
           type == KITE_TYPE_Q4_0 || type == KITE_TYPE_Q4_1 || type == KITE_TYPE_Q5_0 || type == KITE_TYPE_Q5_1 ||
           type == KITE_TYPE_Q2_K || type == KITE_TYPE_Q3_K || type == KITE_TYPE_Q4_K || type == KITE_TYPE_Q5_K ||
           type == KITE_TYPE_Q6_K; /* the trellis types are read as they lie (a view) */
}

static int neon_pack(const kite_tensor *t, kite_weight_arena *arena, kite_packed_matrix *out, kite_error *e) {
    if (t && !accelerated(t->type)) return kite_ref_pack(t, arena, out, e);
    return kite_pack_interleaved(t, G4, 0, arena, out, e);
}

static size_t neon_pack_bytes(const kite_tensor *t) {
    return t && accelerated(t->type) ? kite_pack_interleaved_bytes(t, G4) : 0;
}

/* ---- trellis types (kernels/trellis_simd.h on 4 lanes; SDOT) ------------------------------------------------ */
#define KT_LANES 4
typedef uint32x4_t kt_vi;
typedef float32x4_t kt_vf;
#define KT_BIAS 0 /* sdot is signed x signed: the levels as they are */
typedef struct kt_tab {
    uint8x16x4_t q, p;
} kt_tab;
static inline kt_tab kt_tab_load(void) {
    kt_tab t;
    t.q = vld1q_u8_x4((const uint8_t *)kite_kt_q);
    t.p = vld1q_u8_x4(kite_kt_p);
    return t;
}
static inline uint32x4_t kt_shift(uint32x4_t w, int s) { return vshlq_u32(w, vdupq_n_s32(s)); }
/* byte i of each lane from w shifted so that bit c_i lands on bit 8 i */
static inline uint32x4_t kt_field_neon(uint32x4_t w, int c0, int c1, int c2, int c3) {
    const uint32x4_t b0 = vandq_u32(kt_shift(w, -c0), vdupq_n_u32(0xff));
    const uint32x4_t b1 = vandq_u32(kt_shift(w, 8 - c1), vdupq_n_u32(0xff00));
    const uint32x4_t b2 = vandq_u32(kt_shift(w, 16 - c2), vdupq_n_u32(0xff0000));
    const uint32x4_t b3 = vandq_u32(kt_shift(w, 24 - c3), vdupq_n_u32(0xff000000u));
    return vorrq_u32(vorrq_u32(b0, b1), vorrq_u32(b2, b3));
}
static inline uint32x4_t kt_lut_neon(uint8x16x4_t t, uint32x4_t idx) {
    return vreinterpretq_u32_u8(vqtbl4q_u8(t, vandq_u8(vreinterpretq_u8_u32(idx), vdupq_n_u8(63))));
}
static inline uint32x4_t kt_dot_neon(uint32x4_t acc, uint32x4_t u, const int8_t *q) {
    uint32_t v;
    memcpy(&v, q, 4);
    return vreinterpretq_u32_s32(
        vdotq_s32(vreinterpretq_s32_u32(acc), vreinterpretq_s8_u32(u), vreinterpretq_s8_u32(vdupq_n_u32(v))));
}
#define kt_load(p) vld1q_u32((const uint32_t *)(const void *)(p))
#define kt_shrd(a, b, sh) vorrq_u32(kt_shift(a, -(sh)), kt_shift(b, 32 - (sh)))
#define kt_field(w, c0, c1, c2, c3) kt_field_neon(w, c0, c1, c2, c3)
#define kt_lut(t, idx) kt_lut_neon(t, idx)
#define kt_xor(a, b) veorq_u32(a, b)
#define kt_add(a, b) vaddq_u32(a, b)
#define kt_sub(a, b) vsubq_u32(a, b)
#define kt_set1(x) vdupq_n_u32((uint32_t)(x))
#define kt_zero() vdupq_n_u32(0)
#define kt_dot(acc, u, q) kt_dot_neon(acc, u, q)
#define kt_f16(p) vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16((const uint16_t *)(const void *)(p))))
#define kt_cvt(v) vcvtq_f32_s32(vreinterpretq_s32_u32(v))
#define kt_fmadd(a, b, c) vfmaq_f32(c, a, b)
#define kt_mulf(a, b) vmulq_f32(a, b)
#define kt_set1f(x) vdupq_n_f32(x)
#define kt_zerof() vdupq_n_f32(0.0f)
#define kt_storef(p, v) vst1q_f32(p, v)
#define kt_prefetch(p) __builtin_prefetch(p)
#include "kernels/trellis_simd.h"

/* ---- q4_1, q5_0, q5_1 and the K-quants (kernels/kquant_simd.h on the layer above; sdot) ------------------ */
static inline uint32x4_t kt_dot16_neon(uint32x4_t acc, uint32x4_t a, const void *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    const int16x8_t x = vreinterpretq_s16_u32(a), q = vreinterpretq_s16_u32(vdupq_n_u32(v));
    /* products of the 8 halves, then adjacent pairs (lane i: halves 2i, 2i + 1) */
    const int32x4_t pairs = vpaddq_s32(vmull_s16(vget_low_s16(x), vget_low_s16(q)), vmull_high_s16(x, q));
    return vaddq_u32(acc, vreinterpretq_u32_s32(pairs));
}
#define kt_and(a, b) vandq_u32(a, b)
#define kt_or(a, b) vorrq_u32(a, b)
static inline uint32x4_t kt_sdot4_neon(uint32x4_t acc, const uint32x4_t *w, const int8_t *q, uint32x4_t sc) {
    uint32x4_t i0 = kt_dot_neon(vdupq_n_u32(0), w[0], q), i1 = kt_dot_neon(vdupq_n_u32(0), w[1], q + 4);
    i0 = kt_dot_neon(i0, w[2], q + 8);
    i1 = kt_dot_neon(i1, w[3], q + 12);
    return vmlaq_u32(acc, vaddq_u32(i0, i1), sc);
}
#define kt_scale(sc) (sc)
#define kt_sdot4(acc, w, q, sc) kt_sdot4_neon(acc, w, q, sc)
#define kt_u8x2(p) vreinterpretq_u32_u16(vmovl_u8(vld1_u8((const uint8_t *)(const void *)(p))))
#define kt_i8x2(p) vreinterpretq_u32_s16(vmovl_s8(vld1_s8((const int8_t *)(const void *)(p))))
#define kt_srai(a, n) vreinterpretq_u32_s32(vshlq_s32(vreinterpretq_s32_u32(a), vdupq_n_s32(-(n))))
#define kt_dot16(acc, a, p) kt_dot16_neon(acc, a, p)
#define kt_srli(a, n) kt_shift(a, -(n))
#define kt_slli(a, n) kt_shift(a, n)
#define kt_mul(a, b) vmulq_u32(a, b)
#define KQ_B32 1
#include "kernels/kquant_simd.h"

static void neon_matmul(const kite_packed_matrix *w, const void *act, const float *x, int32_t n, float *y,
                        int64_t y_stride, int64_t r0, int64_t r1) {
    if (kite_is_trellis(w->type)) {
        kt_matmul(w, act, n, y, y_stride, r0, r1);
        return;
    }
    if (w->layout != LAYOUT4) {
        kite_ref_matmul(w, act, x, n, y, y_stride, r0, r1);
        return;
    }
    if (w->type == KITE_TYPE_Q4_1 || w->type == KITE_TYPE_Q5_0 || w->type == KITE_TYPE_Q5_1 ||
        kite_type_family(w->type) == KITE_FAMILY_K) { /* kernels/kquant_simd.h (the trellis types went above) */
        kq_matmul(w, act, n, y, y_stride, r0, r1);
        return;
    }
    if (r0 < 0) r0 = 0;
    if (r1 > w->rows) r1 = w->rows;
    if (r0 >= r1 || n <= 0) return;
    kite_pack_geom g;
    kite_pack_geometry(w->type, w->rows, w->cols, G4, &g);
    tile_ctx c = {.act = act, .x = x, .cols = w->cols, .y = y, .y_stride = y_stride};
    kite_family f = kite_type_family(w->type);
    if (f != KITE_FAMILY_FLOAT) c.ag = kite_act_geometry(f, w->cols);
    runner run;
    switch (w->type) {
    case KITE_TYPE_F32: run = run_f32; break;
    case KITE_TYPE_F16: run = run_f16; break;
    case KITE_TYPE_BF16: run = run_bf16; break;
    case KITE_TYPE_Q8_0: run = run_q8_0; break;
    case KITE_TYPE_Q4_0: run = run_q4_0; break;
    default: return;
    }
    const uint8_t *base = w->data;
    int64_t g0 = r0 / G4, g1 = (r1 + G4 - 1) / G4;
    for (int64_t grp = g0; grp < g1;) {
        int ng = f == KITE_FAMILY_FLOAT && grp + 1 < g1 ? 2 : 1;
        for (int32_t b0 = 0; b0 < n; b0 += TILE_B)
            run(base + (size_t)grp * g.group_bytes, &g, &c, b0, n - b0 < TILE_B ? n - b0 : TILE_B, ng, grp * G4, r0, r1);
        grp += ng;
    }
}

/* ---- attention (kite_attn_query; the reference's math with 4-lane vectors) -------------------------------- */

/* kite_attn_exp on 4 lanes: the same steps, with fused multiply-adds. */
INLINE float32x4_t exp4(float32x4_t x) {
    const uint32x4_t live = vcgeq_f32(x, vdupq_n_f32(-87.0f));
    const float32x4_t n = vrndnq_f32(vmulq_n_f32(x, 1.44269504088896341f));
    float32x4_t r = vfmaq_f32(x, n, vdupq_n_f32(-0.693359375f));
    r = vfmaq_f32(r, n, vdupq_n_f32(2.12194440e-4f));
    float32x4_t p = vdupq_n_f32(1.9875691500e-4f);
    p = vfmaq_f32(vdupq_n_f32(1.3981999507e-3f), p, r);
    p = vfmaq_f32(vdupq_n_f32(8.3334519073e-3f), p, r);
    p = vfmaq_f32(vdupq_n_f32(4.1665795894e-2f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.6666665459e-1f), p, r);
    p = vfmaq_f32(vdupq_n_f32(5.0000001201e-1f), p, r);
    float32x4_t y = vaddq_f32(vfmaq_f32(r, p, vmulq_f32(r, r)), vdupq_n_f32(1.0f));
    int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
    float32x4_t out = vmulq_f32(y, vreinterpretq_f32_s32(e));
    return vreinterpretq_f32_u32(vandq_u32(live, vreinterpretq_u32_f32(out)));
}

/* Lane j = the sum of v[j]'s lanes, as (0+1)+(2+3) for every j. */
static inline float32x4_t hsum4_rows(const float32x4_t *v) {
    return vpaddq_f32(vpaddq_f32(v[0], v[1]), vpaddq_f32(v[2], v[3]));
}

/* The shared driver (kernels/attend_simd.h) on this set's vectors. */
#define AV_LANES 4
#define AV_VCHUNK 4
typedef float32x4_t av_t;
#define av_zero() vdupq_n_f32(0.0f)
#define av_set1(x) vdupq_n_f32(x)
#define av_load(p) vld1q_f32(p)
#define av_store(p, v) vst1q_f32(p, v)
#define av_fmadd(a, b, c) vfmaq_f32(c, a, b)
#define av_mul(a, b) vmulq_f32(a, b)
#define av_add(a, b) vaddq_f32(a, b)
#define av_sub(a, b) vsubq_f32(a, b)
#define av_max(a, b) vmaxq_f32(a, b)
#define av_hsum(v) vaddvq_f32(v)
#define av_hsum_rows(v) hsum4_rows(v)
#define av_hmax(v) vmaxvq_f32(v)
#define av_exp(v) exp4(v)
#define av_f16(p) vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p)))
#define av_i8(p) i8x4((const int8_t *)(p))
#define av_u4(p, HI) u4x4(p, HI)
/* Four bytes only: a wider load could run past the last block of the cache. */
INLINE float32x4_t i8x4(const int8_t *p) {
    int32_t w;
    memcpy(&w, p, 4);
    const int16x8_t h = vmovl_s8(vreinterpret_s8_s32(vdup_n_s32(w)));
    return vcvtq_f32_s32(vmovl_s16(vget_low_s16(h)));
}
INLINE float32x4_t u4x4(const uint8_t *p, bool hi) {
    uint32_t w;
    memcpy(&w, p, 4);
    uint8x8_t b = vreinterpret_u8_u32(vdup_n_u32(w));
    b = hi ? vshr_n_u8(b, 4) : vand_u8(b, vdup_n_u8(0x0F));
    const int16x8_t h = vsubq_s16(vreinterpretq_s16_u16(vmovl_u8(b)), vdupq_n_s16(8));
    return vcvtq_f32_s32(vmovl_s16(vget_low_s16(h)));
}
#include "kernels/attend_simd.h"

static void neon_attend(const kite_attn_query *a) {
    if (av_attend_fits(a)) av_attend(a);
    else kite_ref_attend(a);
}

/* kite_silu on 4 lanes; the tail on a padded copy with the same steps (see avx2_silu_mul: an element's
 * bits must not depend on its place in the call). */
static inline float32x4_t silu_mul4(float32x4_t x, float32x4_t up) {
    const float32x4_t one = vdupq_n_f32(1.0f);
    const float32x4_t e = exp4(vnegq_f32(vabsq_f32(x)));
    const float32x4_t num = vbslq_f32(vcgeq_f32(x, vdupq_n_f32(0.0f)), one, e);
    return vmulq_f32(vmulq_f32(x, vdivq_f32(num, vaddq_f32(one, e))), up);
}

static void neon_silu_mul(float *gate, const float *up, int64_t n) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(gate + i, silu_mul4(vld1q_f32(gate + i), vld1q_f32(up + i)));
    if (i < n) {
        float g[4] = {0}, u[4] = {0};
        memcpy(g, gate + i, sizeof(float) * (size_t)(n - i));
        memcpy(u, up + i, sizeof(float) * (size_t)(n - i));
        vst1q_f32(g, silu_mul4(vld1q_f32(g), vld1q_f32(u)));
        memcpy(gate + i, g, sizeof(float) * (size_t)(n - i));
    }
}

/* kite_gelu_tanh on 4 lanes; the tail on a padded copy with the same steps (as neon_silu_mul). */
static inline float32x4_t gelu_mul4(float32x4_t x, float32x4_t up) {
    const float32x4_t one = vdupq_n_f32(1.0f);
    const float32x4_t z = vmulq_f32(vmulq_f32(vdupq_n_f32(KITE_GELU_2C), x),
                                    vaddq_f32(one, vmulq_f32(vdupq_n_f32(KITE_GELU_A), vmulq_f32(x, x))));
    const float32x4_t e = exp4(vnegq_f32(vabsq_f32(z)));
    const float32x4_t num = vbslq_f32(vcgeq_f32(z, vdupq_n_f32(0.0f)), one, e);
    return vmulq_f32(vmulq_f32(x, vdivq_f32(num, vaddq_f32(one, e))), up);
}

static void neon_gelu_mul(float *gate, const float *up, int64_t n) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(gate + i, gelu_mul4(vld1q_f32(gate + i), vld1q_f32(up + i)));
    if (i < n) {
        float g[4] = {0}, u[4] = {0};
        memcpy(g, gate + i, sizeof(float) * (size_t)(n - i));
        memcpy(u, up + i, sizeof(float) * (size_t)(n - i));
        vst1q_f32(g, gelu_mul4(vld1q_f32(g), vld1q_f32(u)));
        memcpy(gate + i, g, sizeof(float) * (size_t)(n - i));
    }
}

/* FCVTN rounds by FPCR, nearest even unless a caller changed it; the tail in scalar steps. */
static void neon_f32_to_f16(const float *x, uint16_t *y, int64_t n) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1_u16(y + i, vreinterpret_u16_f16(vcvt_f16_f32(vld1q_f32(x + i))));
    kite_ref_f32_to_f16(x + i, y + i, n - i);
}

/* kite_silu on 4 lanes (silu_mul4's steps, times an exact 1), for the DeltaNet kernels. */
#define av_silu(v) silu_mul4(v, vdupq_n_f32(1.0f))
#include "kernels/deltanet_simd.h"

static void neon_dn_steps(const kite_dn_head *h) {
    if (dn_fits(h)) dn_steps(h);
    else kite_ref_dn_steps(h);
}
static void neon_dn_chunked(const kite_dn_head *h, float *work) {
    if (dn_fits(h)) dn_chunked(h, work);
    else kite_ref_dn_chunked(h, work);
}

static const kite_kernel_set neon_set = {
    .level = KITE_CPU_NEON,
    .name = "neon-dotprod",
    .pack = neon_pack,
    .pack_bytes = neon_pack_bytes,
    .act_bytes = kite_act_bytes_common,
    .quantize_act = neon_quantize_act,
    .matmul = neon_matmul,
    .attend = neon_attend,
    .silu_mul = neon_silu_mul,
    .gelu_mul = neon_gelu_mul,
    .f32_to_f16 = neon_f32_to_f16,
    .dn_steps = neon_dn_steps,
    .dn_chunked = neon_dn_chunked,
    .dn_conv_silu = dn_conv_silu,
    .row_block = 32,
};

const kite_kernel_set *kite_kernels_neon(void) { return &neon_set; }
