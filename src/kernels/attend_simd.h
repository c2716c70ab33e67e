/* The attention driver every SIMD kernel set shares (kite_attn_query; the reference's math in
 * ref/ref.c, vectorized): av_attend(a). Included once by each set's file, which first defines its
 * vector type and operations:
 *
 *   AV_LANES               floats per vector (16, 8, 4); head_dim must be a multiple of it
 *   av_t                   the vector type
 *   av_zero(), av_set1(x), av_load(p), av_store(p, v)
 *   av_fmadd(a, b, c)      a * b + c (fused)
 *   av_mul, av_add, av_sub, av_max
 *   av_hsum(v), av_hmax(v) horizontal sum and max
 *   av_hsum_rows(v)        from an array of AV_LANES vectors, the vector whose lane j is the sum of v[j]'s
 *                          lanes, added in the same tree for every j (so a score's bits never depend on
 *                          which lane its key row falls in)
 *   av_exp(v)              kite_attn_exp per lane (0 for lanes below -87, -inf included)
 *   av_f16(p)              AV_LANES IEEE halves at p, as floats
 *   av_i8(p)               AV_LANES signed bytes at p, as floats
 *   av_u4(p, HI)           AV_LANES bytes at p, their low (HI false) or high nibbles minus 8, as floats
 *   AV_VCHUNK              value vectors per head kept in registers across a tile (AV_VCHUNK x 4 heads
 *                          accumulators)
 *
 * Per tile of KITE_ATTN_TILE visible rows: the scores of each query head against AV_LANES key rows at a
 * time (one vector of dot-product partials per row, then one transposed reduction: ~3 operations per
 * score instead of a horizontal sum each, which had made attention cost ~25 cycles per head and
 * position), the online-softmax update per head (tile max, rescale of the running sum and output),
 * then the weighted values, AV_VCHUNK vectors of up to 4 heads kept in registers across the tile's rows
 * (independent accumulation chains; each output element still sums its rows in order). A head's
 * operations never depend on the other heads in its call or on where its rows sit in the cache
 * (tests/kernels checks both bit for bit). */

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "base/fp16.h"

#define AV_INLINE static inline __attribute__((always_inline))

/* The cache's element types, as constants each driver below is specialised on. */
enum { AV_KV_F16 = 0, AV_KV_F32 = 1, AV_KV_Q8_0 = 2, AV_KV_Q4_0 = 3 };

/* AV_LANES cache elements of row from element d, as floats. A quantized block is an f16 scale then 32
 * codes (Q8_0: bytes; Q4_0: element j < 16 in the low nibble of byte j, j >= 16 in the high nibble of
 * byte j - 16); AV_LANES divides 32, so the lanes never straddle two blocks. The product code * scale
 * is the reference dequantizer's, so the floats are the same bits. */
AV_INLINE av_t av_kv(const void *row, int32_t d, const int KVT) {
    if (KVT == AV_KV_F32) return av_load((const float *)row + d);
    if (KVT == AV_KV_F16) return av_f16((const uint16_t *)row + d);
    const uint8_t *block = (const uint8_t *)row + (size_t)(d / 32) * (KVT == AV_KV_Q8_0 ? 34 : 18);
    uint16_t scale_bits;
    memcpy(&scale_bits, block, sizeof scale_bits);
    const av_t scale = av_set1(kite_fp16_to_f32(scale_bits));
    const int32_t o = d % 32;
    if (KVT == AV_KV_Q8_0) return av_mul(av_i8((const int8_t *)block + 2 + o), scale);
    return o < 16 ? av_mul(av_u4(block + 2 + o, false), scale) : av_mul(av_u4(block + 2 + (o - 16), true), scale);
}

/* Scores of one query head against AV_LANES key rows converted to floats, row j at k + j * AV_KSTRIDE
 * (a constant stride, so one pointer addresses them all), one per lane. */
#define AV_KSTRIDE KITE_ATTN_MAX_HEAD_DIM
AV_INLINE av_t av_scores_rows(const float *q, int32_t hd, const float *k) {
    av_t acc[AV_LANES];
#pragma GCC unroll 16
    for (int j = 0; j < AV_LANES; j++) acc[j] = av_zero();
    for (int32_t d = 0; d < hd; d += AV_LANES) {
        const av_t qv = av_load(q + d);
#pragma GCC unroll 16
        for (int j = 0; j < AV_LANES; j++) acc[j] = av_fmadd(qv, av_load(k + j * AV_KSTRIDE + d), acc[j]);
    }
    return av_hsum_rows(acc);
}

/* out[i][d0 .. d0 + NC * AV_LANES) += sum_t p[i][t] v_t for NQ heads over one tile. */
AV_INLINE void av_values(const void *const *vrows, int32_t nt, const float *p, int32_t p_stride, float *out, int32_t hd,
                         int32_t d0, const int NQ, const int NC, const int KVT) {
    av_t acc[4][AV_VCHUNK];
#pragma GCC unroll 4
    for (int i = 0; i < NQ; i++)
#pragma GCC unroll 4
        for (int c = 0; c < NC; c++) acc[i][c] = av_load(out + (int64_t)i * hd + d0 + c * AV_LANES);
    for (int32_t t = 0; t < nt; t++) {
        av_t vv[AV_VCHUNK];
#pragma GCC unroll 4
        for (int c = 0; c < NC; c++) vv[c] = av_kv(vrows[t], d0 + c * AV_LANES, KVT);
#pragma GCC unroll 4
        for (int i = 0; i < NQ; i++) {
            const av_t pv = av_set1(p[(int64_t)i * p_stride + t]);
#pragma GCC unroll 4
            for (int c = 0; c < NC; c++) acc[i][c] = av_fmadd(pv, vv[c], acc[i][c]);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < NQ; i++)
#pragma GCC unroll 4
        for (int c = 0; c < NC; c++) av_store(out + (int64_t)i * hd + d0 + c * AV_LANES, acc[i][c]);
}

/* Heads [i, nq) in calls of 4, 3, 2 or 1 (NQ is a constant in each, so the loops above unroll). */
#define AV_BY_FOURS(CALL)                   \
    do {                                    \
        int32_t i = 0;                      \
        for (; i + 4 <= nq; i += 4) CALL(4); \
        switch (nq - i) {                   \
        case 3: CALL(3); break;             \
        case 2: CALL(2); break;             \
        case 1: CALL(1); break;             \
        default: break;                     \
        }                                   \
    } while (0)

/* Cache row of visible position t (through the row list for tree nodes). */
AV_INLINE const void *av_row(const kite_attn_query *a, const void *base, int32_t t, const int KVT) {
    const int64_t r = a->rows ? a->rows[t] : t;
    (void)KVT;
    return (const char *)base + (size_t)r * a->row_bytes;
}

/* Every line of a row. One KV head's rows are contiguous (kite_kv_cache is head-major) but the
 * hardware prefetchers alone keep too few lines in flight for this loop: after 1000 positions (the
 * cache far out of L2), 8.5 -> 4.6 ns per query head and position with it, 4.0 -> 4.5 ns in cache
 * (one thread, 16 layers x 8 KV heads x 4 query heads of 64, f16). */
AV_INLINE void av_prefetch_row(const void *p, size_t bytes) {
    for (size_t o = 0; o < bytes; o += 64) __builtin_prefetch((const char *)p + o, 0, 3);
}

/* HD: the head size as a constant (64, 128: every loop over it unrolls), or 0 to read it from a. */
AV_INLINE void av_attend_hd(const kite_attn_query *a, const int KVT, const int32_t HD) {
    const int32_t hd = HD ? HD : a->head_dim, nq = a->n_q;
    const size_t row_bytes = KVT == AV_KV_F32 ? (size_t)hd * sizeof(float)
                             : KVT == AV_KV_F16 ? (size_t)hd * sizeof(uint16_t)
                             : (size_t)(hd / 32) * (KVT == AV_KV_Q8_0 ? 34 : 18); /* what a row's elements take */
    float m[KITE_ATTN_MAX_Q], l[KITE_ATTN_MAX_Q];
    _Alignas(64) float s[KITE_ATTN_MAX_Q][KITE_ATTN_TILE];
    _Alignas(64) float kconv[AV_LANES * AV_KSTRIDE]; /* AV_LANES key rows as floats */
    const void *krows[KITE_ATTN_TILE], *vrows[KITE_ATTN_TILE];
    for (int32_t i = 0; i < nq; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
        memset(a->out + (int64_t)i * hd, 0, sizeof(float) * (size_t)hd);
    }
    for (int32_t t0 = 0; t0 < a->n_visible; t0 += KITE_ATTN_TILE) {
        const int32_t nt = a->n_visible - t0 < KITE_ATTN_TILE ? a->n_visible - t0 : KITE_ATTN_TILE;
        const int32_t nt_padded = (nt + AV_LANES - 1) / AV_LANES * AV_LANES; /* KITE_ATTN_TILE is a multiple */
        for (int32_t t = 0; t < nt; t++) {
            krows[t] = av_row(a, a->k, t0 + t, KVT);
            vrows[t] = av_row(a, a->v, t0 + t, KVT);
        }
        for (int32_t t = nt; t < nt_padded; t++) krows[t] = krows[nt - 1]; /* padding lanes: scored, then dropped */
        const av_t scale = av_set1(a->scale);
        for (int32_t t = 0; t < nt_padded; t += AV_LANES) {
            /* The next AV_LANES key rows and these rows' values (read after the tile's scores) are requested
             * now: see av_prefetch_row. */
            for (int32_t j = 0; j < AV_LANES; j++) {
                const int32_t ahead = t0 + t + AV_LANES + j;
                if (ahead < a->n_visible) av_prefetch_row(av_row(a, a->k, ahead, KVT), row_bytes);
                if (t + j < nt) av_prefetch_row(vrows[t + j], row_bytes);
            }
            /* The key rows, converted once for all the query heads. */
#pragma GCC unroll 16
            for (int j = 0; j < AV_LANES; j++)
                for (int32_t d = 0; d < hd; d += AV_LANES) av_store(kconv + j * AV_KSTRIDE + d, av_kv(krows[t + j], d, KVT));
            for (int32_t i = 0; i < nq; i++) av_store(&s[i][t], av_mul(av_scores_rows(a->q + (int64_t)i * hd, hd, kconv), scale));
        }
        for (int32_t i = 0; i < nq; i++) {
            for (int32_t t = nt; t < nt_padded; t++) s[i][t] = -INFINITY; /* padding: max ignores it, exp gives 0 */
            av_t mx = av_set1(-INFINITY);
            for (int32_t t = 0; t < nt_padded; t += AV_LANES) mx = av_max(mx, av_load(&s[i][t]));
            const float mt = av_hmax(mx), mn = mt > m[i] ? mt : m[i];
            const float f = kite_attn_exp(m[i] - mn);
            const av_t mnv = av_set1(mn);
            av_t sum = av_zero();
            for (int32_t t = 0; t < nt_padded; t += AV_LANES) {
                av_t p = av_exp(av_sub(av_load(&s[i][t]), mnv));
                av_store(&s[i][t], p);
                sum = av_add(sum, p);
            }
            l[i] = l[i] * f + av_hsum(sum);
            m[i] = mn;
            float *o = a->out + (int64_t)i * hd;
            const av_t fv = av_set1(f);
            for (int32_t d = 0; d < hd; d += AV_LANES) av_store(o + d, av_mul(av_load(o + d), fv));
        }
        int32_t d0 = 0;
        for (; d0 + AV_VCHUNK * AV_LANES <= hd; d0 += AV_VCHUNK * AV_LANES) {
#define AV_VALUES(NQ) av_values(vrows, nt, s[i], KITE_ATTN_TILE, a->out + (int64_t)i * hd, hd, d0, NQ, AV_VCHUNK, KVT)
            AV_BY_FOURS(AV_VALUES);
#undef AV_VALUES
        }
        for (; d0 < hd; d0 += AV_LANES) {
#define AV_VALUES(NQ) av_values(vrows, nt, s[i], KITE_ATTN_TILE, a->out + (int64_t)i * hd, hd, d0, NQ, 1, KVT)
            AV_BY_FOURS(AV_VALUES);
#undef AV_VALUES
        }
    }
    for (int32_t i = 0; i < nq; i++) {
        const av_t inv = av_set1(1.0f / l[i]);
        float *o = a->out + (int64_t)i * hd;
        for (int32_t d = 0; d < hd; d += AV_LANES) av_store(o + d, av_mul(av_load(o + d), inv));
    }
}

AV_INLINE void av_attend_type(const kite_attn_query *a, const int KVT) {
    if (a->head_dim == 64) av_attend_hd(a, KVT, 64);
    else if (a->head_dim == 128) av_attend_hd(a, KVT, 128);
    else av_attend_hd(a, KVT, 0);
}

/* Whether av_attend takes this query: a head size of whole vectors (whole blocks for a quantized cache). */
AV_INLINE bool av_attend_fits(const kite_attn_query *a) {
    if (a->head_dim % AV_LANES != 0 || a->head_dim > KITE_ATTN_MAX_HEAD_DIM) return false;
    if (a->kv_type == KITE_TYPE_F32 || a->kv_type == KITE_TYPE_F16) return true;
    return (a->kv_type == KITE_TYPE_Q8_0 || a->kv_type == KITE_TYPE_Q4_0) && a->head_dim % 32 == 0;
}

/* One query (av_attend_fits true), on the driver specialised for its cache type. */
AV_INLINE void av_attend(const kite_attn_query *a) {
    switch (a->kv_type) {
    case KITE_TYPE_F32: av_attend_type(a, AV_KV_F32); break;
    case KITE_TYPE_Q8_0: av_attend_type(a, AV_KV_Q8_0); break;
    case KITE_TYPE_Q4_0: av_attend_type(a, AV_KV_Q4_0); break;
    default: av_attend_type(a, AV_KV_F16); break;
    }
}

#undef AV_BY_FOURS
#undef AV_INLINE
