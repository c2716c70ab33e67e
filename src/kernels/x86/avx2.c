/* AVX2 (+FMA, F16C) kernel set. Weights are packed 8 rows to a group (kernels_internal.h): one ymm
 * holds 4 consecutive columns of 8 rows. Without VNNI the dot of 4 is vpmaddubsw (u8 x s8 -> pairs
 * of s16) then vpmaddwd with ones (-> s32): q4_0 nibbles (<= 15) let eight column groups add up in
 * 16 bits before one vpmaddwd; q8_0 uses the sign trick (|w| x sign(x, w)) so no pair saturates.
 * Integer parts are exact, the float steps follow kernels_internal.h, so results are bit-identical
 * to the reference and batch-invariant. q4_1, q5_0, q5_1, q2_K and q3_K use the reference.
 *
 * Compiled with -mavx2 -mfma -mf16c (CMakeLists.txt). */
#include <immintrin.h>
#include <string.h>

#include "kernels/kernels_internal.h"

#define G8 8
#define TILE_B 4 /* activation rows per tile */
#define INLINE static inline __attribute__((always_inline))

static const uint32_t LAYOUT8 = (uint32_t)KITE_LAYOUT_INTERLEAVED | G8;

typedef int32_t unaligned_i32 __attribute__((aligned(1), may_alias));
INLINE int32_t load_i32(const void *p) { return *(const unaligned_i32 *)p; }
INLINE float load_f32(const void *p) { float v; memcpy(&v, p, 4); return v; }

/* Software prefetch of every cache line of [p, p + bytes): the packed groups are long contiguous runs,
 * and the hardware prefetchers do not keep enough lines in flight once a block takes many cycles.
 * Measured with kite_kernel_bench (--level avx2) on the 1.1B shapes, 2 threads, inline layout: at one
 * activation row q4_0 26-28 -> 32-34 GB/s, q8_0 33-35 -> 43 GB/s, q4_K 16-19 -> 30 GB/s, q6_K 17-21 ->
 * 33 GB/s. (This set needs it at one row where AVX-512 does not: it spends more cycles per byte.) */
INLINE void prefetch_lines(const void *p, size_t bytes) {
    for (size_t o = 0; o < bytes; o += 64) _mm_prefetch((const char *)p + o, _MM_HINT_T0);
}
/* How far ahead: 16 blocks of a 32-block type (4-8 KiB), 2 blocks of a K-quant (4-6 KiB), 64 columns
 * of a float type. */
#define PREFETCH_B32 16
#define PREFETCH_K 2
#define PREFETCH_FLOAT 64
INLINE __m256i bcast32(const void *p) { return _mm256_set1_epi32(load_i32(p)); }

/* ---- activation quantization (same bytes as kite_ref_quantize_act) ---------------------------------------- */

/* 32 floats at x with id -> 32 int8 at q (in order); returns the int32 sums of elements 0..15 and 16..31. */
INLINE void quant32(const float *x, __m256 id, int8_t *q, int32_t *sum_lo, int32_t *sum_hi) {
    const __m256 hi = _mm256_set1_ps(127.0f), lo = _mm256_set1_ps(-127.0f);
    __m256i i[4];
    for (int k = 0; k < 4; k++) {
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + 8 * k), id);
        v = _mm256_min_ps(hi, _mm256_max_ps(lo, v));
        i[k] = _mm256_cvtps_epi32(v); /* MXCSR default: nearest, ties to even */
    }
    __m256i s0 = _mm256_add_epi32(i[0], i[1]), s1 = _mm256_add_epi32(i[2], i[3]);
    __m256i h = _mm256_hadd_epi32(s0, s1); /* [s0 pairs(0..3) s1 pairs(0..3) | s0 pairs(4..7) s1 pairs(4..7)] */
    h = _mm256_hadd_epi32(h, h);
    __m128i t = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    *sum_lo = _mm_extract_epi32(t, 0);
    *sum_hi = _mm_extract_epi32(t, 1);
    __m256i p01 = _mm256_packs_epi32(i[0], i[1]), p23 = _mm256_packs_epi32(i[2], i[3]);
    __m256i p = _mm256_packs_epi16(p01, p23);
    p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)q, p);
}

static float block_scale(const float *x, int len, float *id_out) {
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 m = _mm256_setzero_ps();
    for (int j = 0; j < len; j += 8) m = _mm256_max_ps(m, _mm256_and_ps(abs_mask, _mm256_loadu_ps(x + j)));
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    float amax = _mm_cvtss_f32(h);
    float d = amax / 127.0f;
    *id_out = d != 0.0f ? 1.0f / d : 0.0f;
    return d;
}

static void avx2_quantize_act(uint32_t type, const float *x, int64_t cols, int32_t b0, int32_t b1, void *act) {
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
            __m256 idv = _mm256_set1_ps(id);
            memcpy(row + g.off_d + (size_t)blk * 4, &d, 4);
            if (f == KITE_FAMILY_B32) {
                int32_t lo, hi;
                quant32(xb, idv, q, &lo, &hi);
                int32_t sum = lo + hi;
                memcpy(row + g.off_sum + (size_t)blk * 4, &sum, 4);
            } else {
                int16_t s16[16], s32[8];
                for (int s = 0; s < 8; s++) {
                    int32_t lo, hi;
                    quant32(xb + 32 * s, idv, q + 32 * s, &lo, &hi);
                    s16[2 * s] = (int16_t)lo;
                    s16[2 * s + 1] = (int16_t)hi;
                    s32[s] = (int16_t)(lo + hi);
                }
                memcpy(row + g.off_sum + (size_t)blk * 32, s16, 32);
                memcpy(row + g.off_sum32 + (size_t)blk * 16, s32, 16);
            }
        }
    }
}

/* ---- tiles ---------------------------------------------------------------------------------------------------- */

typedef struct tile_ctx {
    const uint8_t *act;
    kite_act_geom ag;
    const float *x;
    int64_t cols;
    float *y;
    int64_t y_stride;
} tile_ctx;

/* Stores the rows of an 8-row group that fall in [r0, r1). */
INLINE void store_rows(const tile_ctx *c, int32_t b, int64_t row0, int64_t r0, int64_t r1, __m256 v) {
    float *dst = c->y + (int64_t)b * c->y_stride + row0;
    if (row0 >= r0 && row0 + 8 <= r1) {
        _mm256_storeu_ps(dst, v);
        return;
    }
    float tmp[8];
    _mm256_storeu_ps(tmp, v);
    for (int i = 0; i < 8; i++)
        if (row0 + i >= r0 && row0 + i < r1) dst[i] = tmp[i];
}

INLINE void tile_b32(bool q4, const uint8_t *grp, const kite_pack_geom *g, const tile_ctx *c, int32_t b0, const int NB,
                     int64_t row0, int64_t r0, int64_t r1) {
    const __m256i low4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    __m256 acc[TILE_B];
    const uint8_t *arow[TILE_B];
#pragma GCC unroll 4
    for (int b = 0; b < NB; b++) {
        acc[b] = _mm256_setzero_ps();
        arow[b] = c->act + (size_t)(b0 + b) * c->ag.row_bytes;
    }
    for (int64_t blk = 0; blk < g->n_blocks; blk++) {
        const uint8_t *q = grp + (size_t)blk * g->block_bytes; /* its scales follow at q + q_bytes */
        prefetch_lines(q + PREFETCH_B32 * g->block_bytes, g->block_bytes);
        __m256i w[8];
        if (q4) {
#pragma GCC unroll 4
            for (int p = 0; p < 4; p++) {
                __m256i v = _mm256_loadu_si256((const __m256i *)(q + 32 * p));
                w[p] = _mm256_and_si256(v, low4);
                w[p + 4] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
            }
        } else {
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++) w[j] = _mm256_loadu_si256((const __m256i *)(q + 32 * j));
        }
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(q + g->q_bytes)));
#pragma GCC unroll 4
        for (int b = 0; b < NB; b++) {
            const uint8_t *xq = arow[b] + blk * 32;
            __m256i isum;
            if (q4) {
                /* Eight column groups of nibble x int8 pairs (|pair| <= 3810) add up safely in 16 bits. */
                __m256i s = _mm256_maddubs_epi16(w[0], bcast32(xq + 0));
#pragma GCC unroll 8
                for (int j = 1; j < 8; j++) s = _mm256_add_epi16(s, _mm256_maddubs_epi16(w[j], bcast32(xq + 4 * j)));
                isum = _mm256_sub_epi32(_mm256_madd_epi16(s, ones), _mm256_set1_epi32(8 * load_i32(arow[b] + c->ag.off_sum + blk * 4)));
            } else {
                __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();
#pragma GCC unroll 8
                for (int j = 0; j < 8; j += 2) {
                    __m256i x0 = bcast32(xq + 4 * j), x1 = bcast32(xq + 4 * j + 4);
                    __m256i p0 = _mm256_maddubs_epi16(_mm256_sign_epi8(w[j], w[j]), _mm256_sign_epi8(x0, w[j]));
                    __m256i p1 = _mm256_maddubs_epi16(_mm256_sign_epi8(w[j + 1], w[j + 1]), _mm256_sign_epi8(x1, w[j + 1]));
                    s0 = _mm256_add_epi32(s0, _mm256_madd_epi16(p0, ones));
                    s1 = _mm256_add_epi32(s1, _mm256_madd_epi16(p1, ones));
                }
                isum = _mm256_add_epi32(s0, s1);
            }
            __m256 scale = _mm256_mul_ps(dw, _mm256_set1_ps(load_f32(arow[b] + c->ag.off_d + blk * 4)));
            acc[b] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), scale, acc[b]);
        }
    }
#pragma GCC unroll 4
    for (int b = 0; b < NB; b++) store_rows(c, b0 + b, row0, r0, r1, acc[b]);
}

/* ---- K-quants ------------------------------------------------------------------------------------------------ *
 * Per sub-block the column groups' maddubs pairs add up in 16 bits (q4_K: 8 groups of |pair| <= 3810;
 * q5_K: 4 of <= 7874; q6_K: 2 of <= 16002), then one vpmaddwd against the row's scale duplicated in
 * both halves of its dword multiplies and widens at once: sum_s sc_s * isum_s, exact in int32. */

/* Per-row dwords (sc, sc) for sub-block `odd` of a pair, from G pairs (sc_even, sc_odd) widened to int16. */
INLINE __m256i dup_scale(__m256i pairs16, bool odd) {
    return odd ? _mm256_shufflehi_epi16(_mm256_shufflelo_epi16(pairs16, 0xF5), 0xF5)
               : _mm256_shufflehi_epi16(_mm256_shufflelo_epi16(pairs16, 0xA0), 0xA0);
}

INLINE __m256i bit_to_4(__m256i h, int j) {
    __m256i s = j <= 4 ? _mm256_slli_epi16(h, 4 - j) : _mm256_srli_epi16(h, j - 4);
    return _mm256_and_si256(s, _mm256_set1_epi8(0x10));
}

INLINE __m256i bits2_to_4(__m256i h, int j) {
    __m256i s = j < 3 ? _mm256_slli_epi16(h, 4 - 2 * j) : _mm256_srli_epi16(h, 2);
    return _mm256_and_si256(s, _mm256_set1_epi8(0x30));
}

INLINE void tile_q45k(bool q5, const uint8_t *grp, const kite_pack_geom *g, const tile_ctx *c, int32_t b0, const int NB,
                      int64_t row0, int64_t r0, int64_t r1) {
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    __m256 acc[TILE_B];
    const uint8_t *arow[TILE_B];
#pragma GCC unroll 4
    for (int b = 0; b < NB; b++) {
        acc[b] = _mm256_setzero_ps();
        arow[b] = c->act + (size_t)(b0 + b) * c->ag.row_bytes;
    }
    for (int64_t blk = 0; blk < g->n_blocks; blk++) {
        const uint8_t *qb = grp + (size_t)blk * g->block_bytes, *sb = qb + g->q_bytes;
        /* The block PREFETCH_K ahead is requested an eighth per sub-block (below). */
        __m256i A[TILE_B];
#pragma GCC unroll 4
        for (int b = 0; b < NB; b++) A[b] = _mm256_setzero_si256();
        for (int s = 0; s < 8; s++) {
            __m256i w[8];
            prefetch_lines(qb + PREFETCH_K * g->block_bytes + (size_t)s * (g->block_bytes / 8), g->block_bytes / 8);
            const uint8_t *q = qb + (size_t)s * 128;
#pragma GCC unroll 4
            for (int p = 0; p < 4; p++) {
                __m256i v = _mm256_loadu_si256((const __m256i *)(q + 32 * p));
                w[p] = _mm256_and_si256(v, low4);
                w[p + 4] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
            }
            if (q5) {
                __m256i h = _mm256_loadu_si256((const __m256i *)(qb + 1024 + (size_t)s * 32));
#pragma GCC unroll 8
                for (int j = 0; j < 8; j++) w[j] = _mm256_or_si256(w[j], bit_to_4(h, j));
            }
            __m256i scp = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(sb + (size_t)(s / 2) * 16)));
            __m256i sc = dup_scale(scp, s & 1);
#pragma GCC unroll 4
            for (int b = 0; b < NB; b++) {
                const uint8_t *xq = arow[b] + blk * 256 + s * 32;
                if (q5) {
                    __m256i s0 = _mm256_maddubs_epi16(w[0], bcast32(xq + 0)), s1 = _mm256_maddubs_epi16(w[4], bcast32(xq + 16));
#pragma GCC unroll 3
                    for (int j = 1; j < 4; j++) {
                        s0 = _mm256_add_epi16(s0, _mm256_maddubs_epi16(w[j], bcast32(xq + 4 * j)));
                        s1 = _mm256_add_epi16(s1, _mm256_maddubs_epi16(w[j + 4], bcast32(xq + 16 + 4 * j)));
                    }
                    A[b] = _mm256_add_epi32(A[b], _mm256_add_epi32(_mm256_madd_epi16(s0, sc), _mm256_madd_epi16(s1, sc)));
                } else {
                    __m256i s0 = _mm256_maddubs_epi16(w[0], bcast32(xq + 0));
#pragma GCC unroll 8
                    for (int j = 1; j < 8; j++) s0 = _mm256_add_epi16(s0, _mm256_maddubs_epi16(w[j], bcast32(xq + 4 * j)));
                    A[b] = _mm256_add_epi32(A[b], _mm256_madd_epi16(s0, sc));
                }
            }
        }
        __m256i mp[4];
#pragma GCC unroll 4
        for (int p = 0; p < 4; p++) mp[p] = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(sb + 64 + (size_t)p * 16)));
        const __m256 dv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(sb + 128)));
        const __m256 dminv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(sb + 144)));
#pragma GCC unroll 4
        for (int b = 0; b < NB; b++) {
            const uint8_t *s32 = arow[b] + c->ag.off_sum32 + blk * 16;
            __m256i B = _mm256_add_epi32(_mm256_add_epi32(_mm256_madd_epi16(mp[0], bcast32(s32 + 0)), _mm256_madd_epi16(mp[1], bcast32(s32 + 4))),
                                         _mm256_add_epi32(_mm256_madd_epi16(mp[2], bcast32(s32 + 8)), _mm256_madd_epi16(mp[3], bcast32(s32 + 12))));
            __m256 dx = _mm256_set1_ps(load_f32(arow[b] + c->ag.off_d + blk * 4));
            acc[b] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(A[b]), _mm256_mul_ps(dv, dx), acc[b]);
            acc[b] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(B), _mm256_mul_ps(dminv, dx), acc[b]);
        }
    }
#pragma GCC unroll 4
    for (int b = 0; b < NB; b++) store_rows(c, b0 + b, row0, r0, r1, acc[b]);
}

INLINE void tile_q6k(const uint8_t *grp, const kite_pack_geom *g, const tile_ctx *c, int32_t b0, const int NB, int64_t row0,
                     int64_t r0, int64_t r1) {
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    __m256 acc[TILE_B];
    const uint8_t *arow[TILE_B];
#pragma GCC unroll 4
    for (int b = 0; b < NB; b++) {
        acc[b] = _mm256_setzero_ps();
        arow[b] = c->act + (size_t)(b0 + b) * c->ag.row_bytes;
    }
    for (int64_t blk = 0; blk < g->n_blocks; blk++) {
        const uint8_t *qb = grp + (size_t)blk * g->block_bytes, *sb = qb + g->q_bytes;
        /* The block PREFETCH_K ahead is requested an eighth per sub-block (below). */
        __m256i A[TILE_B];
#pragma GCC unroll 4
        for (int b = 0; b < NB; b++) A[b] = _mm256_setzero_si256();
        for (int t = 0; t < 8; t++) {
            __m256i w[8];
            prefetch_lines(qb + PREFETCH_K * g->block_bytes + (size_t)t * (g->block_bytes / 8), g->block_bytes / 8);
            const uint8_t *q = qb + (size_t)t * 192;
            __m256i h0 = _mm256_loadu_si256((const __m256i *)(q + 128)), h1 = _mm256_loadu_si256((const __m256i *)(q + 160));
#pragma GCC unroll 4
            for (int p = 0; p < 4; p++) {
                __m256i v = _mm256_loadu_si256((const __m256i *)(q + 32 * p));
                w[p] = _mm256_or_si256(_mm256_and_si256(v, low4), bits2_to_4(h0, p));
                w[p + 4] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), low4), bits2_to_4(h1, p));
            }
            __m256i scp = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(sb + (size_t)t * 16)));
            __m256i sc0 = dup_scale(scp, false), sc1 = dup_scale(scp, true);
#pragma GCC unroll 4
            for (int b = 0; b < NB; b++) {
                const uint8_t *xq = arow[b] + blk * 256 + t * 32;
                __m256i e0 = _mm256_add_epi16(_mm256_maddubs_epi16(w[0], bcast32(xq + 0)), _mm256_maddubs_epi16(w[1], bcast32(xq + 4)));
                __m256i e1 = _mm256_add_epi16(_mm256_maddubs_epi16(w[2], bcast32(xq + 8)), _mm256_maddubs_epi16(w[3], bcast32(xq + 12)));
                __m256i o0 = _mm256_add_epi16(_mm256_maddubs_epi16(w[4], bcast32(xq + 16)), _mm256_maddubs_epi16(w[5], bcast32(xq + 20)));
                __m256i o1 = _mm256_add_epi16(_mm256_maddubs_epi16(w[6], bcast32(xq + 24)), _mm256_maddubs_epi16(w[7], bcast32(xq + 28)));
                __m256i even = _mm256_add_epi32(_mm256_madd_epi16(e0, sc0), _mm256_madd_epi16(e1, sc0));
                __m256i odd = _mm256_add_epi32(_mm256_madd_epi16(o0, sc1), _mm256_madd_epi16(o1, sc1));
                A[b] = _mm256_add_epi32(A[b], _mm256_add_epi32(even, odd));
            }
        }
        const __m256 dv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(sb + 128)));
#pragma GCC unroll 4
        for (int b = 0; b < NB; b++) {
            /* C = sum_s sc_s * sum16_s from int16 pairs; A - 32 C undoes the +32 of the stored values. */
            const uint8_t *s16 = arow[b] + c->ag.off_sum + blk * 32;
            __m256i C = _mm256_setzero_si256();
#pragma GCC unroll 8
            for (int p = 0; p < 8; p++)
                C = _mm256_add_epi32(C, _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(sb + (size_t)p * 16))),
                                                          bcast32(s16 + 4 * p)));
            __m256i Af = _mm256_sub_epi32(A[b], _mm256_slli_epi32(C, 5));
            __m256 dx = _mm256_set1_ps(load_f32(arow[b] + c->ag.off_d + blk * 4));
            acc[b] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(Af), _mm256_mul_ps(dv, dx), acc[b]);
        }
    }
#pragma GCC unroll 4
    for (int b = 0; b < NB; b++) store_rows(c, b0 + b, row0, r0, r1, acc[b]);
}

INLINE __m256 load_w8(uint32_t type, const uint8_t *p) {
    if (type == KITE_TYPE_F32) return _mm256_loadu_ps((const float *)p);
    __m128i h = _mm_loadu_si128((const __m128i *)p);
    if (type == KITE_TYPE_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* NG groups (1 or 2) x NB activation rows: acc = fma(w_k, x_k, acc) over k in order. */
INLINE void tile_float(uint32_t type, const uint8_t *grp, const kite_pack_geom *g, const tile_ctx *c, int32_t b0,
                       const int NG, const int NB, int64_t row0, int64_t r0, int64_t r1) {
    __m256 acc[2][TILE_B];
    const float *xr[TILE_B];
#pragma GCC unroll 4
    for (int b = 0; b < NB; b++) {
        acc[0][b] = _mm256_setzero_ps();
        acc[1][b] = _mm256_setzero_ps();
        xr[b] = c->x + (size_t)(b0 + b) * (size_t)c->cols;
    }
    const size_t qb = g->q_bytes;
    const uint8_t *grp1 = grp + g->group_bytes;
    for (int64_t k = 0; k < c->cols; k++) {
        _mm_prefetch((const char *)grp + (size_t)(k + PREFETCH_FLOAT) * qb, _MM_HINT_T0);
        if (NG > 1) _mm_prefetch((const char *)grp1 + (size_t)(k + PREFETCH_FLOAT) * qb, _MM_HINT_T0);
        __m256 w0 = load_w8(type, grp + (size_t)k * qb);
        __m256 w1 = NG > 1 ? load_w8(type, grp1 + (size_t)k * qb) : w0;
#pragma GCC unroll 4
        for (int b = 0; b < NB; b++) {
            __m256 xv = _mm256_set1_ps(xr[b][k]);
            acc[0][b] = _mm256_fmadd_ps(w0, xv, acc[0][b]);
            if (NG > 1) acc[1][b] = _mm256_fmadd_ps(w1, xv, acc[1][b]);
        }
    }
#pragma GCC unroll 4
    for (int b = 0; b < NB; b++) {
        store_rows(c, b0 + b, row0, r0, r1, acc[0][b]);
        if (NG > 1) store_rows(c, b0 + b, row0 + G8, r0, r1, acc[1][b]);
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
static void run_q4_k(const uint8_t *grp, const kite_pack_geom *g, const tile_ctx *c, int32_t b0, int nb, int ng, int64_t row0,
                     int64_t r0, int64_t r1) {
    (void)ng;
#define CALL(N) tile_q45k(false, grp, g, c, b0, N, row0, r0, r1)
    TILE_SWITCH(nb, CALL)
#undef CALL
}
static void run_q5_k(const uint8_t *grp, const kite_pack_geom *g, const tile_ctx *c, int32_t b0, int nb, int ng, int64_t row0,
                     int64_t r0, int64_t r1) {
    (void)ng;
#define CALL(N) tile_q45k(true, grp, g, c, b0, N, row0, r0, r1)
    TILE_SWITCH(nb, CALL)
#undef CALL
}
static void run_q6_k(const uint8_t *grp, const kite_pack_geom *g, const tile_ctx *c, int32_t b0, int nb, int ng, int64_t row0,
                     int64_t r0, int64_t r1) {
    (void)ng;
#define CALL(N) tile_q6k(grp, g, c, b0, N, row0, r0, r1)
    TILE_SWITCH(nb, CALL)
#undef CALL
}
#define FLOAT_RUNNER(name, TYPE)                                                                                          \
    static void name(const uint8_t *grp, const kite_pack_geom *g, const tile_ctx *c, int32_t b0, int nb, int ng,         \
                     int64_t row0, int64_t r0, int64_t r1) {                                                              \
        if (ng > 1) {                                                                                                     \
            switch (nb) {                                                                                                 \
            case 1: tile_float(TYPE, grp, g, c, b0, 2, 1, row0, r0, r1); break;                                           \
            case 2: tile_float(TYPE, grp, g, c, b0, 2, 2, row0, r0, r1); break;                                           \
            case 3: tile_float(TYPE, grp, g, c, b0, 2, 3, row0, r0, r1); break;                                           \
            default: tile_float(TYPE, grp, g, c, b0, 2, 4, row0, r0, r1); break;                                          \
            }                                                                                                             \
        } else {                                                                                                          \
            switch (nb) {                                                                                                 \
            case 1: tile_float(TYPE, grp, g, c, b0, 1, 1, row0, r0, r1); break;                                           \
            case 2: tile_float(TYPE, grp, g, c, b0, 1, 2, row0, r0, r1); break;                                           \
            case 3: tile_float(TYPE, grp, g, c, b0, 1, 3, row0, r0, r1); break;                                           \
            default: tile_float(TYPE, grp, g, c, b0, 1, 4, row0, r0, r1); break;                                          \
            }                                                                                                             \
        }                                                                                                                 \
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

static int avx2_pack(const kite_tensor *t, kite_weight_arena *arena, kite_packed_matrix *out, kite_error *e) {
    if (t && !accelerated(t->type)) return kite_ref_pack(t, arena, out, e);
    return kite_pack_interleaved(t, G8, 0, arena, out, e);
}

static size_t avx2_pack_bytes(const kite_tensor *t) {
    return t && accelerated(t->type) ? kite_pack_interleaved_bytes(t, G8) : 0;
}

/* ---- trellis types (kernels/trellis_simd.h on 8 lanes; maddubs dot) ------------------------------------------ */
#define KT_LANES 8
typedef __m256i kt_vi;
typedef __m256 kt_vf;
#define KT_BIAS 64
/* A 64-entry byte table as four 16-byte quarters, each in both 128-bit halves (vpshufb looks up within one). */
typedef struct kt_lut64 {
    __m256i v[4];
} kt_lut64;
typedef struct kt_tab {
    kt_lut64 q, p;
} kt_tab;
static inline kt_tab kt_tab_load(void) {
    int8_t q[64];
    for (int i = 0; i < 64; i++) q[i] = (int8_t)(kite_kt_q[i] + KT_BIAS);
    kt_tab t;
    for (int k = 0; k < 4; k++) {
        t.q.v[k] = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(q + 16 * k)));
        t.p.v[k] = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(kite_kt_p + 16 * k)));
    }
    return t;
}
/* t[idx & 63]: a lookup in each quarter, then bits 4 and 5 of the index (moved to bit 7) pick among them. */
INLINE __m256i kt_lut_avx2(const kt_lut64 *t, __m256i idx) {
    const __m256i x = _mm256_and_si256(idx, _mm256_set1_epi8(63));
    const __m256i b4 = _mm256_slli_epi16(x, 3), b5 = _mm256_slli_epi16(x, 2);
    const __m256i v01 = _mm256_blendv_epi8(_mm256_shuffle_epi8(t->v[0], x), _mm256_shuffle_epi8(t->v[1], x), b4);
    const __m256i v23 = _mm256_blendv_epi8(_mm256_shuffle_epi8(t->v[2], x), _mm256_shuffle_epi8(t->v[3], x), b4);
    return _mm256_blendv_epi8(v01, v23, b5);
}
INLINE __m256i kt_shift(__m256i w, int s) { return s >= 0 ? _mm256_slli_epi32(w, s) : _mm256_srli_epi32(w, -s); }
/* byte i of each lane from w shifted so that bit c_i lands on bit 8 i */
INLINE __m256i kt_field_avx2(__m256i w, int c0, int c1, int c2, int c3) {
    const __m256i b0 = _mm256_and_si256(kt_shift(w, -c0), _mm256_set1_epi32(0xff));
    const __m256i b1 = _mm256_and_si256(kt_shift(w, 8 - c1), _mm256_set1_epi32(0xff00));
    const __m256i b2 = _mm256_and_si256(kt_shift(w, 16 - c2), _mm256_set1_epi32(0xff0000));
    const __m256i b3 = _mm256_and_si256(kt_shift(w, 24 - c3), _mm256_set1_epi32((int32_t)0xff000000u));
    return _mm256_or_si256(_mm256_or_si256(b0, b1), _mm256_or_si256(b2, b3));
}
#define kt_load(p) _mm256_loadu_si256((const __m256i *)(const void *)(p))
#define kt_shrd(a, b, sh) _mm256_or_si256(_mm256_srli_epi32(a, sh), _mm256_slli_epi32(b, 32 - (sh)))
#define kt_field(w, c0, c1, c2, c3) kt_field_avx2(w, c0, c1, c2, c3)
#define kt_lut(t, idx) kt_lut_avx2(&(t), idx)
#define kt_xor(a, b) _mm256_xor_si256(a, b)
#define kt_add(a, b) _mm256_add_epi32(a, b)
#define kt_sub(a, b) _mm256_sub_epi32(a, b)
#define kt_set1(x) _mm256_set1_epi32(x)
#define kt_zero() _mm256_setzero_si256()
/* level + 64 <= 127 times |q| <= 127: a maddubs pair stays under 2^15 */
#define kt_dot(acc, u, q) \
    _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, _mm256_set1_epi32(load_i32(q))), _mm256_set1_epi16(1)))
#define kt_f16(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
#define kt_cvt(v) _mm256_cvtepi32_ps(v)
#define kt_fmadd(a, b, c) _mm256_fmadd_ps(a, b, c)
#define kt_mulf(a, b) _mm256_mul_ps(a, b)
#define kt_set1f(x) _mm256_set1_ps(x)
#define kt_zerof() _mm256_setzero_ps()
#define kt_storef(p, v) _mm256_storeu_ps(p, v)
#define kt_prefetch(p) _mm_prefetch((const char *)(p), _MM_HINT_T0)
#include "kernels/trellis_simd.h"

/* ---- q4_1, q5_0, q5_1, q2_K, q3_K (kernels/kquant_simd.h on the layer above; maddubs) ---------------------- */
#define kt_and(a, b) _mm256_and_si256(a, b)
#define kt_or(a, b) _mm256_or_si256(a, b)
#define kt_srli(a, n) _mm256_srli_epi32(a, n)
#define kt_slli(a, n) _mm256_slli_epi32(a, n)
#define kt_mul(a, b) _mm256_mullo_epi32(a, b)
#define kt_u8x2(p) _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(p)))
#define kt_i8x2(p) _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(p)))
#define kt_srai(a, n) _mm256_srai_epi32(a, n)
/* (sc, sc) as 16-bit halves */
#define kt_scale(sc) _mm256_or_si256(_mm256_and_si256(sc, _mm256_set1_epi32(0xFFFF)), _mm256_slli_epi32(sc, 16))
INLINE __m256i kt_sdot4_avx2(__m256i acc, const __m256i *w, const int8_t *q, __m256i sc2) {
    const __m256i s01 = _mm256_add_epi16(_mm256_maddubs_epi16(w[0], bcast32(q)), _mm256_maddubs_epi16(w[1], bcast32(q + 4)));
    const __m256i s23 = _mm256_add_epi16(_mm256_maddubs_epi16(w[2], bcast32(q + 8)), _mm256_maddubs_epi16(w[3], bcast32(q + 12)));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_add_epi16(s01, s23), sc2));
}
#define kt_sdot4(acc, w, q, sc) kt_sdot4_avx2(acc, w, q, sc)
#define kt_dot16(acc, a, p) _mm256_add_epi32(acc, _mm256_madd_epi16(a, _mm256_set1_epi32(load_i32(p))))
#define KQ_B32 1
#include "kernels/kquant_simd.h"

static void avx2_matmul(const kite_packed_matrix *w, const void *act, const float *x, int32_t n, float *y,
                        int64_t y_stride, int64_t r0, int64_t r1) {
    if (kite_is_trellis(w->type)) {
        kt_matmul(w, act, n, y, y_stride, r0, r1);
        return;
    }
    if (w->layout != LAYOUT8) {
        kite_ref_matmul(w, act, x, n, y, y_stride, r0, r1);
        return;
    }
    if (w->type == KITE_TYPE_Q4_1 || w->type == KITE_TYPE_Q5_0 || w->type == KITE_TYPE_Q5_1 || w->type == KITE_TYPE_Q2_K ||
        w->type == KITE_TYPE_Q3_K) { /* kernels/kquant_simd.h (q4_K..q6_K: below) */
        kq_matmul(w, act, n, y, y_stride, r0, r1);
        return;
    }
    if (r0 < 0) r0 = 0;
    if (r1 > w->rows) r1 = w->rows;
    if (r0 >= r1 || n <= 0) return;
    kite_pack_geom g;
    kite_pack_geometry(w->type, w->rows, w->cols, G8, &g);
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
    case KITE_TYPE_Q4_K: run = run_q4_k; break;
    case KITE_TYPE_Q5_K: run = run_q5_k; break;
    case KITE_TYPE_Q6_K: run = run_q6_k; break;
    default: return;
    }
    const uint8_t *base = w->data;
    int64_t g0 = r0 / G8, g1 = (r1 + G8 - 1) / G8;
    for (int64_t grp = g0; grp < g1;) {
        int ng = f == KITE_FAMILY_FLOAT && grp + 1 < g1 ? 2 : 1;
        for (int32_t b0 = 0; b0 < n; b0 += TILE_B)
            run(base + (size_t)grp * g.group_bytes, &g, &c, b0, n - b0 < TILE_B ? n - b0 : TILE_B, ng, grp * G8, r0, r1);
        grp += ng;
    }
}

/* ---- attention (kite_attn_query; the reference's math with 8-lane vectors) -------------------------------- */

INLINE float hsum8(__m256 v) {
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x = _mm_add_ss(x, _mm_movehdup_ps(x));
    return _mm_cvtss_f32(x);
}
INLINE float hmax8(__m256 v) {
    __m128 x = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_max_ps(x, _mm_movehl_ps(x, x));
    x = _mm_max_ss(x, _mm_movehdup_ps(x));
    return _mm_cvtss_f32(x);
}
INLINE __m256 fp16x8(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }

/* kite_attn_exp on 8 lanes: the same steps, with fused multiply-adds. */
INLINE __m256 exp8(__m256 x) {
    const __m256 live = _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_GE_OQ);
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-0.693359375f), x);
    r = _mm256_fmadd_ps(n, _mm256_set1_ps(2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    __m256 y = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
    /* Lanes below -87 may hold garbage exponents here; the mask zeroes them. */
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_and_ps(live, _mm256_mul_ps(y, _mm256_castsi256_ps(e)));
}

/* Lane j = the sum of v[j]'s lanes: horizontal pair sums within 128-bit halves (lanes 0+1 and 2+3, then
 * those two), then the halves. The same tree for every j. */
INLINE __m256 hsum8_rows(const __m256 *v) {
    const __m256 a = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
    const __m256 b = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
    return _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
}

/* The shared driver (kernels/attend_simd.h) on this set's vectors. */
#define AV_LANES 8
#define AV_VCHUNK 2 /* 16 registers: 8 accumulators, the values and a broadcast */
typedef __m256 av_t;
#define av_zero() _mm256_setzero_ps()
#define av_set1(x) _mm256_set1_ps(x)
#define av_load(p) _mm256_loadu_ps(p)
#define av_store(p, v) _mm256_storeu_ps(p, v)
#define av_fmadd(a, b, c) _mm256_fmadd_ps(a, b, c)
#define av_mul(a, b) _mm256_mul_ps(a, b)
#define av_add(a, b) _mm256_add_ps(a, b)
#define av_sub(a, b) _mm256_sub_ps(a, b)
#define av_max(a, b) _mm256_max_ps(a, b)
#define av_hsum(v) hsum8(v)
#define av_hsum_rows(v) hsum8_rows(v)
#define av_hmax(v) hmax8(v)
#define av_exp(v) exp8(v)
#define av_f16(p) fp16x8(p)
#define av_i8(p) _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(p))))
#define av_u4(p, HI) u4x8(p, HI)
INLINE __m256 u4x8(const uint8_t *p, bool hi) {
    __m128i b = _mm_loadl_epi64((const __m128i *)p);
    if (hi) b = _mm_srli_epi16(b, 4);
    b = _mm_sub_epi8(_mm_and_si128(b, _mm_set1_epi8(0x0F)), _mm_set1_epi8(8));
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
}
#include "kernels/attend_simd.h"

static void avx2_attend(const kite_attn_query *a) {
    if (av_attend_fits(a)) av_attend(a);
    else kite_ref_attend(a);
}

/* kite_silu on 8 lanes. The tail runs the same vector steps on a padded copy, so an element's result
 * never depends on where it sits in the call: the forward pass hands the kernel [B x ffn] at once, and a
 * scalar tail had given the last row of an odd-sized batch other bits than the same row in a longer one
 * (continuous batching promises every row the bits it gets alone). */
static inline __m256 silu_mul8(__m256 x, __m256 up) {
    const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
    const __m256 e = exp8(_mm256_or_ps(x, sign)); /* -|x| */
    const __m256 num = _mm256_blendv_ps(e, one, _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GE_OQ));
    return _mm256_mul_ps(_mm256_mul_ps(x, _mm256_div_ps(num, _mm256_add_ps(one, e))), up);
}

static void avx2_silu_mul(float *gate, const float *up, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(gate + i, silu_mul8(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
    if (i < n) {
        float g[8] = {0}, u[8] = {0};
        memcpy(g, gate + i, sizeof(float) * (size_t)(n - i));
        memcpy(u, up + i, sizeof(float) * (size_t)(n - i));
        _mm256_storeu_ps(g, silu_mul8(_mm256_loadu_ps(g), _mm256_loadu_ps(u)));
        memcpy(gate + i, g, sizeof(float) * (size_t)(n - i));
    }
}

/* kite_gelu_tanh on 8 lanes (x * sigmoid(z) with silu_mul8's sigmoid); the tail on a padded copy, as there. */
static inline __m256 gelu_mul8(__m256 x, __m256 up) {
    const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
    const __m256 x2 = _mm256_mul_ps(x, x);
    const __m256 z = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(KITE_GELU_2C), x),
                                   _mm256_add_ps(one, _mm256_mul_ps(_mm256_set1_ps(KITE_GELU_A), x2)));
    const __m256 e = exp8(_mm256_or_ps(z, sign)); /* -|z| */
    const __m256 num = _mm256_blendv_ps(e, one, _mm256_cmp_ps(z, _mm256_setzero_ps(), _CMP_GE_OQ));
    return _mm256_mul_ps(_mm256_mul_ps(x, _mm256_div_ps(num, _mm256_add_ps(one, e))), up);
}

static void avx2_gelu_mul(float *gate, const float *up, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(gate + i, gelu_mul8(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
    if (i < n) {
        float g[8] = {0}, u[8] = {0};
        memcpy(g, gate + i, sizeof(float) * (size_t)(n - i));
        memcpy(u, up + i, sizeof(float) * (size_t)(n - i));
        _mm256_storeu_ps(g, gelu_mul8(_mm256_loadu_ps(g), _mm256_loadu_ps(u)));
        memcpy(gate + i, g, sizeof(float) * (size_t)(n - i));
    }
}

/* F16C's vcvtps2ph rounds to nearest even like kite_f32_to_fp16; the tail in scalar steps. */
static void avx2_f32_to_f16(const float *x, uint16_t *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    kite_ref_f32_to_f16(x + i, y + i, n - i);
}

/* kite_silu on 8 lanes (silu_mul8's steps, times an exact 1), for the DeltaNet kernels. */
#define av_silu(v) silu_mul8(v, _mm256_set1_ps(1.0f))
#include "kernels/deltanet_simd.h"

static void avx2_dn_steps(const kite_dn_head *h) {
    if (dn_fits(h)) dn_steps(h);
    else kite_ref_dn_steps(h);
}
static void avx2_dn_chunked(const kite_dn_head *h, float *work) {
    if (dn_fits(h)) dn_chunked(h, work);
    else kite_ref_dn_chunked(h, work);
}

static const kite_kernel_set avx2_set = {
    .level = KITE_CPU_AVX2,
    .name = "avx2",
    .pack = avx2_pack,
    .pack_bytes = avx2_pack_bytes,
    .act_bytes = kite_act_bytes_common,
    .quantize_act = avx2_quantize_act,
    .matmul = avx2_matmul,
    .attend = avx2_attend,
    .silu_mul = avx2_silu_mul,
    .gelu_mul = avx2_gelu_mul,
    .f32_to_f16 = avx2_f32_to_f16,
    .dn_steps = avx2_dn_steps,
    .dn_chunked = avx2_dn_chunked,
    .dn_conv_silu = dn_conv_silu,
    .row_block = 32,
};

const kite_kernel_set *kite_kernels_avx2(void) { return &avx2_set; }
