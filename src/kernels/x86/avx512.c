/* AVX-512 (F/BW/VL + VNNI) kernel set. Weights are packed 16 rows to a group (kernels_internal.h):
 * one zmm holds 4 consecutive columns of 16 rows, so vpdpbusd against a broadcast 4-byte activation
 * word yields 16 row partial sums at once, and the same weight registers serve up to 8 activation rows
 * (a 16 x 8 tile; n = 1 is the same code with one activation row, streaming the weights once).
 * Integer parts are exact; the float steps per (row, activation row) follow kernels_internal.h in the
 * same order as the reference, so results are bit-identical to it and independent of n, slot and
 * row range. q2_K and q3_K use the reference (raw layout).
 *
 * Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512vnni -mavx2 -mfma -mf16c (CMakeLists.txt). */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/kernels_internal.h"

#define G16 16
#define TILE_B 8 /* activation rows per tile */
#define INLINE static inline __attribute__((always_inline))

static const uint32_t LAYOUT16 = (uint32_t)KITE_LAYOUT_INTERLEAVED | G16;

INLINE int32_t load_i32(const void *p) { int32_t v; memcpy(&v, p, 4); return v; }
INLINE float load_f32(const void *p) { float v; memcpy(&v, p, 4); return v; }

/* Software prefetch of every cache line of [p, p + bytes): the packed groups are long contiguous runs,
 * and the hardware prefetchers do not keep enough lines in flight once a block takes many cycles (a
 * batch of activation rows, or one row of a K-quant's 2-3 KiB block). Measured with kite_kernel_bench
 * on the 1.1B shapes, 2 threads, inline layout (kernels_internal.h): q4_K at one row 35 -> 55 GB/s,
 * q6_K 38 -> 56 GB/s (the probe's bandwidth); Q4_0 over 8 rows 14 -> 24 GB/s (separate-scale layout).
 * The 32-block types at one row stream as fast without it (the hardware follows their short blocks:
 * 86-90% of a plain read of the same bytes, and prefetching cost 5-20%), so they skip it there. */
INLINE void prefetch_lines(const void *p, size_t bytes) {
    for (size_t o = 0; o < bytes; o += 64) _mm_prefetch((const char *)p + o, _MM_HINT_T0);
}
/* How far ahead: 12 blocks of a 32-block type (3.4-6.4 KiB), 2 blocks of a K-quant (4-6 KiB), 64
 * columns of a float type. For the 32-block types with the inline layout, 12 against 16 (kernel bench,
 * 8192 x 2048, 2 threads, 3 alternating runs): q4_0 over 8 / 16 / 64 rows +3-4% / +4% / +2-3%, 4 rows
 * the same; 8 was as good at 8 rows and worse at 4; none was 25-30% slower from 4 rows on. */
#define PREFETCH_B32 12
#define PREFETCH_K 2
#define PREFETCH_FLOAT 64
/* An unaligned, aliasing int32 view, so the broadcast folds into vpdpbusd's {1to16} memory operand. */
typedef int32_t unaligned_i32 __attribute__((aligned(1), may_alias));
INLINE __m512i bcast32(const void *p) { return _mm512_set1_epi32(*(const unaligned_i32 *)p); }
INLINE __m512 fp16x16(const void *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }

/* ---- activation quantization (same bytes as kite_ref_quantize_act) ---------------------------------------- */

/* Quantizes 16 floats with id, returning their int32 values; stores the int8s at q. */
INLINE __m512i quant16(const float *x, __m512 id, int8_t *q) {
    const __m512 hi = _mm512_set1_ps(127.0f), lo = _mm512_set1_ps(-127.0f);
    __m512 v = _mm512_mul_ps(_mm512_loadu_ps(x), id);
    v = _mm512_min_ps(hi, _mm512_max_ps(lo, v));
    __m512i i = _mm512_cvtps_epi32(v); /* MXCSR default: nearest, ties to even */
    _mm_storeu_si128((__m128i *)q, _mm512_cvtepi32_epi8(i));
    return i;
}

INLINE float block_scale(const float *x, int len, float *id_out) {
    __m512 m = _mm512_setzero_ps();
    for (int j = 0; j < len; j += 16) m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(x + j)));
    float amax = _mm512_reduce_max_ps(m);
    float d = amax / 127.0f;
    *id_out = d != 0.0f ? 1.0f / d : 0.0f;
    return d;
}

static void avx512_quantize_act(uint32_t type, const float *x, int64_t cols, int32_t b0, int32_t b1, void *act) {
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
            __m512 idv = _mm512_set1_ps(id);
            memcpy(row + g.off_d + (size_t)blk * 4, &d, 4);
            if (f == KITE_FAMILY_B32) {
                __m512i s = _mm512_add_epi32(quant16(xb, idv, q), quant16(xb + 16, idv, q + 16));
                int32_t sum = _mm512_reduce_add_epi32(s);
                memcpy(row + g.off_sum + (size_t)blk * 4, &sum, 4);
            } else {
                int16_t s16[16], s32[8];
                for (int s = 0; s < 16; s++) s16[s] = (int16_t)_mm512_reduce_add_epi32(quant16(xb + 16 * s, idv, q + 16 * s));
                for (int s = 0; s < 8; s++) s32[s] = (int16_t)(s16[2 * s] + s16[2 * s + 1]);
                memcpy(row + g.off_sum + (size_t)blk * 32, s16, 32);
                memcpy(row + g.off_sum32 + (size_t)blk * 16, s32, 16);
            }
        }
    }
}

/* ---- shared tile plumbing ------------------------------------------------------------------------------------ */

typedef struct tile_ctx {
    const uint8_t *act;   /* activation buffer */
    kite_act_geom ag;
    const float *x;       /* float activations */
    int64_t cols;
    float *y;
    int64_t y_stride;
} tile_ctx;

INLINE void store_rows(const tile_ctx *c, int32_t b, int64_t row0, __mmask16 mask, __m512 v) {
    _mm512_mask_storeu_ps(c->y + (int64_t)b * c->y_stride + row0, mask, v);
}

INLINE __mmask16 row_mask(int64_t row0, int64_t r0, int64_t r1) {
    uint32_t m = 0xffff;
    if (r0 > row0) m &= 0xffffu << (r0 - row0);
    if (r1 < row0 + 16) m &= (1u << (r1 - row0)) - 1u;
    return (__mmask16)m;
}

/* The first min(n, 16) lanes (a loop's tail under a mask). */
INLINE __mmask16 first_lanes(int64_t n) { return n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1u); }

/* ---- q8_0 and q4_0 --------------------------------------------------------------------------------------------- */

/* Bits of column group j (a bit per byte at position j for q5_K high bits) moved to bit 4. */
INLINE __m512i bit_to_4(__m512i h, int j) {
    __m512i s = j <= 4 ? _mm512_slli_epi16(h, (unsigned)(4 - j)) : _mm512_srli_epi16(h, (unsigned)(j - 4));
    return _mm512_and_si512(s, _mm512_set1_epi8(0x10));
}

/* One 16-row group x NB activation rows of a 32-block type. q8_0: 8 vectors of v + 128 per block;
 * q4_0/q4_1: 4 nibble vectors; q5_0/q5_1: 4 nibble vectors and a vector of fifth bits. The stored
 * values are v + off (off = 128, 8, 16 or 0), so isum = dot - off * xsum.
 *
 * From NB = 3 rows on (draft verification, prefill) the pass is bound by the vector ports, so each
 * (block, activation row) is kept to the 11 vector operations it needs: 8 vpdpbusd in one chain
 * (the rows give the parallelism), the conversion, d * d_x and the fma. The offset term -off * xsum
 * is computed for a chunk of blocks and rows with a few vector shifts and enters the chain as a
 * broadcast from memory (a load, not a vector operation); d_x is a broadcast operand too. Up to
 * TILE_B32 rows share one unpacking of the weights (12 accumulators + 8 weight vectors fit the 32
 * registers). With 1-2 rows (decode, bound by memory) the chain stays split in two for latency. */
#define TILE_B32 12     /* activation rows per tile for the 32-block types */
#define OFFSET_CHUNK 32 /* blocks per chunk of precomputed offset terms */
INLINE void tile_b32(uint32_t type, const uint8_t *grp, const kite_pack_geom *g, const tile_ctx *c, int32_t b0,
                     const int NB, int64_t row0, __mmask16 mask) {
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    const bool q4 = type != KITE_TYPE_Q8_0, q5 = type == KITE_TYPE_Q5_0 || type == KITE_TYPE_Q5_1;
    const bool has_min = type == KITE_TYPE_Q4_1 || type == KITE_TYPE_Q5_1;
    const int32_t offset = type == KITE_TYPE_Q8_0 ? -128 : type == KITE_TYPE_Q4_0 ? -8 : type == KITE_TYPE_Q5_0 ? -16 : 0;
    /* offset = -(1 << offset_shift): offset * xsum wraps like -(xsum << shift) in uint32 */
    const int offset_shift = type == KITE_TYPE_Q8_0 ? 7 : type == KITE_TYPE_Q4_0 ? 3 : 4;
    const bool split_chain = NB <= 2;
    __m512 acc[TILE_B32];
    const uint8_t *arow[TILE_B32];
    int32_t off_terms[TILE_B32][OFFSET_CHUNK] __attribute__((aligned(64)));
#pragma GCC unroll 16
    for (int b = 0; b < NB; b++) {
        acc[b] = _mm512_setzero_ps();
        arow[b] = c->act + (size_t)(b0 + b) * c->ag.row_bytes;
    }
    for (int64_t chunk = 0; chunk < g->n_blocks; chunk += OFFSET_CHUNK) {
        const int64_t chunk_end = chunk + OFFSET_CHUNK < g->n_blocks ? chunk + OFFSET_CHUNK : g->n_blocks;
        if (!split_chain && offset) {
#pragma GCC unroll 16
            for (int b = 0; b < NB; b++)
                for (int64_t k = chunk; k < chunk_end; k += 16) {
                    const __mmask16 m = first_lanes(chunk_end - k);
                    const __m512i xs = _mm512_maskz_loadu_epi32(m, arow[b] + c->ag.off_sum + k * 4);
                    _mm512_store_si512(&off_terms[b][k - chunk],
                                       _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(xs, (unsigned)offset_shift)));
                }
        }
        for (int64_t blk = chunk; blk < chunk_end; blk++) {
            const uint8_t *q = grp + (size_t)blk * g->block_bytes; /* its scales follow at q + q_bytes */
            if (NB > 1) prefetch_lines(q + PREFETCH_B32 * g->block_bytes, g->block_bytes); /* see prefetch_lines */
            __m512i w[8];
            if (q4) {
#pragma GCC unroll 4
                for (int p = 0; p < 4; p++) {
                    __m512i v = _mm512_loadu_si512(q + 64 * p);
                    w[p] = _mm512_and_si512(v, low4);
                    w[p + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
                }
                if (q5) {
                    __m512i h = _mm512_loadu_si512(q + 256);
#pragma GCC unroll 8
                    for (int j = 0; j < 8; j++) w[j] = _mm512_or_si512(w[j], bit_to_4(h, j));
                }
            } else {
#pragma GCC unroll 8
                for (int j = 0; j < 8; j++) w[j] = _mm512_loadu_si512(q + 64 * j);
            }
            const uint8_t *sb = q + g->q_bytes;
            const __m512 dw = fp16x16(sb);
            const __m512 mw = has_min ? fp16x16(sb + 32) : dw;
#pragma GCC unroll 16
            for (int b = 0; b < NB; b++) {
                const uint8_t *xq = arow[b] + blk * 32;
                const int32_t xsum = load_i32(arow[b] + c->ag.off_sum + blk * 4);
                __m512i isum;
                if (split_chain) {
                    /* wrapping like the lanes' own int32 sums (a NaN row quantizes to sums of INT_MIN: no UB) */
                    __m512i i0 = offset ? _mm512_set1_epi32((int32_t)((uint32_t)offset * (uint32_t)xsum)) : _mm512_setzero_si512();
                    __m512i i1 = _mm512_setzero_si512();
                    i0 = _mm512_dpbusd_epi32(i0, w[0], bcast32(xq + 0));
                    i1 = _mm512_dpbusd_epi32(i1, w[1], bcast32(xq + 4));
                    i0 = _mm512_dpbusd_epi32(i0, w[2], bcast32(xq + 8));
                    i1 = _mm512_dpbusd_epi32(i1, w[3], bcast32(xq + 12));
                    i0 = _mm512_dpbusd_epi32(i0, w[4], bcast32(xq + 16));
                    i1 = _mm512_dpbusd_epi32(i1, w[5], bcast32(xq + 20));
                    i0 = _mm512_dpbusd_epi32(i0, w[6], bcast32(xq + 24));
                    i1 = _mm512_dpbusd_epi32(i1, w[7], bcast32(xq + 28));
                    isum = _mm512_add_epi32(i0, i1);
                } else {
                    isum = offset ? bcast32(&off_terms[b][blk - chunk]) : _mm512_setzero_si512();
#pragma GCC unroll 8
                    for (int j = 0; j < 8; j++) isum = _mm512_dpbusd_epi32(isum, w[j], bcast32(xq + 4 * j));
                }
                const __m512 dx = _mm512_set1_ps(load_f32(arow[b] + c->ag.off_d + blk * 4));
                acc[b] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(dw, dx), acc[b]);
                if (has_min) acc[b] = _mm512_fmadd_ps(_mm512_set1_ps((float)xsum), _mm512_mul_ps(mw, dx), acc[b]);
            }
        }
    }
#pragma GCC unroll 16
    for (int b = 0; b < NB; b++) store_rows(c, b0 + b, row0, mask, acc[b]);
}

/* ---- q4_K, q5_K ----------------------------------------------------------------------------------------------- */

INLINE void tile_q45k(bool q5, const uint8_t *grp, const kite_pack_geom *g, const tile_ctx *c, int32_t b0, const int NB,
                      int64_t row0, __mmask16 mask) {
    const __m512i low4 = _mm512_set1_epi8(0x0F), low16 = _mm512_set1_epi32(0xFFFF);
    __m512 acc[TILE_B];
    const uint8_t *arow[TILE_B];
#pragma GCC unroll 8
    for (int b = 0; b < NB; b++) {
        acc[b] = _mm512_setzero_ps();
        arow[b] = c->act + (size_t)(b0 + b) * c->ag.row_bytes;
    }
    for (int64_t blk = 0; blk < g->n_blocks; blk++) {
        const uint8_t *qb = grp + (size_t)blk * g->block_bytes, *sb = qb + g->q_bytes;
        /* The block PREFETCH_K ahead is requested an eighth per sub-block (below). */
        __m512i A[TILE_B];
#pragma GCC unroll 8
        for (int b = 0; b < NB; b++) A[b] = _mm512_setzero_si512();
        for (int s = 0; s < 8; s++) {
            __m512i w[8];
            prefetch_lines(qb + PREFETCH_K * g->block_bytes + (size_t)s * (g->block_bytes / 8), g->block_bytes / 8);
            const uint8_t *q = qb + (size_t)s * 256;
#pragma GCC unroll 4
            for (int p = 0; p < 4; p++) {
                __m512i v = _mm512_loadu_si512(q + 64 * p);
                w[p] = _mm512_and_si512(v, low4);
                w[p + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
            }
            if (q5) {
                __m512i h = _mm512_loadu_si512(qb + 2048 + (size_t)s * 64);
#pragma GCC unroll 8
                for (int j = 0; j < 8; j++) w[j] = _mm512_or_si512(w[j], bit_to_4(h, j));
            }
            /* sc pair p = s / 2 for 16 rows as u8 pairs; this sub-block's scale is the low or high one. */
            __m512i scw = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(sb + (size_t)(s / 2) * 32)));
            __m512i sc = (s & 1) ? _mm512_srli_epi32(scw, 16) : _mm512_and_si512(scw, low16);
#pragma GCC unroll 8
            for (int b = 0; b < NB; b++) {
                const uint8_t *xq = arow[b] + blk * 256 + s * 32;
                __m512i i0 = _mm512_setzero_si512(), i1 = _mm512_setzero_si512();
                i0 = _mm512_dpbusd_epi32(i0, w[0], bcast32(xq + 0));
                i1 = _mm512_dpbusd_epi32(i1, w[1], bcast32(xq + 4));
                i0 = _mm512_dpbusd_epi32(i0, w[2], bcast32(xq + 8));
                i1 = _mm512_dpbusd_epi32(i1, w[3], bcast32(xq + 12));
                i0 = _mm512_dpbusd_epi32(i0, w[4], bcast32(xq + 16));
                i1 = _mm512_dpbusd_epi32(i1, w[5], bcast32(xq + 20));
                i0 = _mm512_dpbusd_epi32(i0, w[6], bcast32(xq + 24));
                i1 = _mm512_dpbusd_epi32(i1, w[7], bcast32(xq + 28));
                A[b] = _mm512_add_epi32(A[b], _mm512_mullo_epi32(_mm512_add_epi32(i0, i1), sc));
            }
        }
        __m512i mp[4];
#pragma GCC unroll 4
        for (int p = 0; p < 4; p++) mp[p] = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(sb + 128 + (size_t)p * 32)));
        const __m512 dv = fp16x16(sb + 256), dminv = fp16x16(sb + 288);
#pragma GCC unroll 8
        for (int b = 0; b < NB; b++) {
            const uint8_t *s32 = arow[b] + c->ag.off_sum32 + blk * 16;
            __m512i B = _mm512_setzero_si512();
            B = _mm512_dpwssd_epi32(B, mp[0], bcast32(s32 + 0));
            B = _mm512_dpwssd_epi32(B, mp[1], bcast32(s32 + 4));
            B = _mm512_dpwssd_epi32(B, mp[2], bcast32(s32 + 8));
            B = _mm512_dpwssd_epi32(B, mp[3], bcast32(s32 + 12));
            __m512 dx = _mm512_set1_ps(load_f32(arow[b] + c->ag.off_d + blk * 4));
            acc[b] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(A[b]), _mm512_mul_ps(dv, dx), acc[b]);
            acc[b] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(B), _mm512_mul_ps(dminv, dx), acc[b]);
        }
    }
#pragma GCC unroll 8
    for (int b = 0; b < NB; b++) store_rows(c, b0 + b, row0, mask, acc[b]);
}

/* ---- q6_K -------------------------------------------------------------------------------------------------------- */

/* High 2 bits of column group j (bits 2j..2j+1 of each byte, j in 0..3) moved to bits 4..5. */
INLINE __m512i bits2_to_4(__m512i h, int j) {
    __m512i s = j < 3 ? _mm512_slli_epi16(h, (unsigned)(4 - 2 * j)) : _mm512_srli_epi16(h, 2);
    return _mm512_and_si512(s, _mm512_set1_epi8(0x30));
}

INLINE void tile_q6k(const uint8_t *grp, const kite_pack_geom *g, const tile_ctx *c, int32_t b0, const int NB,
                     int64_t row0, __mmask16 mask) {
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    __m512 acc[TILE_B];
    const uint8_t *arow[TILE_B];
#pragma GCC unroll 8
    for (int b = 0; b < NB; b++) {
        acc[b] = _mm512_setzero_ps();
        arow[b] = c->act + (size_t)(b0 + b) * c->ag.row_bytes;
    }
    for (int64_t blk = 0; blk < g->n_blocks; blk++) {
        const uint8_t *qb = grp + (size_t)blk * g->block_bytes, *sb = qb + g->q_bytes;
        /* The block PREFETCH_K ahead is requested an eighth per sub-block (below). */
        __m512i A[TILE_B];
#pragma GCC unroll 8
        for (int b = 0; b < NB; b++) A[b] = _mm512_setzero_si512();
        for (int t = 0; t < 8; t++) {
            __m512i w[8];
            prefetch_lines(qb + PREFETCH_K * g->block_bytes + (size_t)t * (g->block_bytes / 8), g->block_bytes / 8);
            const uint8_t *q = qb + (size_t)t * 384;
            __m512i h0 = _mm512_loadu_si512(q + 256), h1 = _mm512_loadu_si512(q + 320);
#pragma GCC unroll 4
            for (int p = 0; p < 4; p++) {
                __m512i v = _mm512_loadu_si512(q + 64 * p);
                w[p] = _mm512_or_si512(_mm512_and_si512(v, low4), bits2_to_4(h0, p));
                w[p + 4] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(v, 4), low4), bits2_to_4(h1, p));
            }
            __m512i scw = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(sb + (size_t)t * 32)));
            __m512i sc0 = _mm512_srai_epi32(_mm512_slli_epi32(scw, 16), 16), sc1 = _mm512_srai_epi32(scw, 16);
#pragma GCC unroll 8
            for (int b = 0; b < NB; b++) {
                const uint8_t *xq = arow[b] + blk * 256 + t * 32;
                __m512i i0 = _mm512_setzero_si512(), i1 = _mm512_setzero_si512();
                i0 = _mm512_dpbusd_epi32(i0, w[0], bcast32(xq + 0));
                i1 = _mm512_dpbusd_epi32(i1, w[4], bcast32(xq + 16));
                i0 = _mm512_dpbusd_epi32(i0, w[1], bcast32(xq + 4));
                i1 = _mm512_dpbusd_epi32(i1, w[5], bcast32(xq + 20));
                i0 = _mm512_dpbusd_epi32(i0, w[2], bcast32(xq + 8));
                i1 = _mm512_dpbusd_epi32(i1, w[6], bcast32(xq + 24));
                i0 = _mm512_dpbusd_epi32(i0, w[3], bcast32(xq + 12));
                i1 = _mm512_dpbusd_epi32(i1, w[7], bcast32(xq + 28));
                A[b] = _mm512_add_epi32(A[b], _mm512_add_epi32(_mm512_mullo_epi32(i0, sc0), _mm512_mullo_epi32(i1, sc1)));
            }
        }
        const __m512 dv = fp16x16(sb + 256);
#pragma GCC unroll 8
        for (int b = 0; b < NB; b++) {
            /* C = sum_s sc_s * sum16_s, from int16 pairs (sc_2p, sc_2p+1) against (sum16_2p, sum16_2p+1). */
            const uint8_t *s16 = arow[b] + c->ag.off_sum + blk * 32;
            __m512i C0 = _mm512_setzero_si512(), C1 = _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int p = 0; p < 8; p += 2) {
                C0 = _mm512_dpwssd_epi32(C0, _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(sb + (size_t)p * 32))),
                                         bcast32(s16 + 4 * p));
                C1 = _mm512_dpwssd_epi32(C1, _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(sb + (size_t)(p + 1) * 32))),
                                         bcast32(s16 + 4 * (p + 1)));
            }
            __m512i Af = _mm512_sub_epi32(A[b], _mm512_slli_epi32(_mm512_add_epi32(C0, C1), 5));
            __m512 dx = _mm512_set1_ps(load_f32(arow[b] + c->ag.off_d + blk * 4));
            acc[b] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(Af), _mm512_mul_ps(dv, dx), acc[b]);
        }
    }
#pragma GCC unroll 8
    for (int b = 0; b < NB; b++) store_rows(c, b0 + b, row0, mask, acc[b]);
}

/* ---- floats: f32, f16, bf16 ---------------------------------------------------------------------------------------- */

INLINE __m512 load_w16(uint32_t type, const uint8_t *p) {
    if (type == KITE_TYPE_F32) return _mm512_loadu_ps(p);
    __m256i h = _mm256_loadu_si256((const __m256i *)p);
    if (type == KITE_TYPE_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* NG groups (1 or 2, consecutive) x NB activation rows: acc = fma(w_k, x_k, acc) over k in order. */
INLINE void tile_float(uint32_t type, const uint8_t *grp, const kite_pack_geom *g, const tile_ctx *c, int32_t b0,
                       const int NG, const int NB, int64_t row0, __mmask16 mask0, __mmask16 mask1) {
    __m512 acc[2][TILE_B];
    const float *xr[TILE_B];
#pragma GCC unroll 8
    for (int b = 0; b < NB; b++) {
        acc[0][b] = _mm512_setzero_ps();
        acc[1][b] = _mm512_setzero_ps();
        xr[b] = c->x + (size_t)(b0 + b) * (size_t)c->cols;
    }
    const size_t qb = g->q_bytes;
    const uint8_t *grp1 = grp + g->group_bytes;
    for (int64_t k = 0; k < c->cols; k++) {
        _mm_prefetch((const char *)grp + (size_t)(k + PREFETCH_FLOAT) * qb, _MM_HINT_T0);
        if (NG > 1) _mm_prefetch((const char *)grp1 + (size_t)(k + PREFETCH_FLOAT) * qb, _MM_HINT_T0);
        __m512 w0 = load_w16(type, grp + (size_t)k * qb);
        __m512 w1 = NG > 1 ? load_w16(type, grp1 + (size_t)k * qb) : w0;
#pragma GCC unroll 8
        for (int b = 0; b < NB; b++) {
            __m512 xv = _mm512_set1_ps(xr[b][k]);
            acc[0][b] = _mm512_fmadd_ps(w0, xv, acc[0][b]);
            if (NG > 1) acc[1][b] = _mm512_fmadd_ps(w1, xv, acc[1][b]);
        }
    }
#pragma GCC unroll 8
    for (int b = 0; b < NB; b++) {
        store_rows(c, b0 + b, row0, mask0, acc[0][b]);
        if (NG > 1) store_rows(c, b0 + b, row0 + 16, mask1, acc[1][b]);
    }
}

/* ---- dispatch over tiles ---------------------------------------------------------------------------------------- */

#define TILE_SWITCH(nb, CALL) \
    switch (nb) {              \
    case 1: CALL(1); break;    \
    case 2: CALL(2); break;    \
    case 3: CALL(3); break;    \
    case 4: CALL(4); break;    \
    case 5: CALL(5); break;    \
    case 6: CALL(6); break;    \
    case 7: CALL(7); break;    \
    default: CALL(8); break;   \
    }

#define B32_RUNNER(name, TYPE)                                                                                        \
    static void name(const uint8_t *grp, const kite_pack_geom *g, const tile_ctx *c, int32_t b0, int nb, int64_t row0, \
                     __mmask16 m) {                                                                                   \
        switch (nb) {                                                                                                 \
        case 1: tile_b32(TYPE, grp, g, c, b0, 1, row0, m); break;                                                     \
        case 2: tile_b32(TYPE, grp, g, c, b0, 2, row0, m); break;                                                     \
        case 3: tile_b32(TYPE, grp, g, c, b0, 3, row0, m); break;                                                     \
        case 4: tile_b32(TYPE, grp, g, c, b0, 4, row0, m); break;                                                     \
        case 5: tile_b32(TYPE, grp, g, c, b0, 5, row0, m); break;                                                     \
        case 6: tile_b32(TYPE, grp, g, c, b0, 6, row0, m); break;                                                     \
        case 7: tile_b32(TYPE, grp, g, c, b0, 7, row0, m); break;                                                     \
        case 8: tile_b32(TYPE, grp, g, c, b0, 8, row0, m); break;                                                     \
        case 9: tile_b32(TYPE, grp, g, c, b0, 9, row0, m); break;                                                     \
        case 10: tile_b32(TYPE, grp, g, c, b0, 10, row0, m); break;                                                   \
        case 11: tile_b32(TYPE, grp, g, c, b0, 11, row0, m); break;                                                   \
        default: tile_b32(TYPE, grp, g, c, b0, 12, row0, m); break;                                                   \
        }                                                                                                             \
    }
B32_RUNNER(run_q8_0, KITE_TYPE_Q8_0)
B32_RUNNER(run_q4_0, KITE_TYPE_Q4_0)
B32_RUNNER(run_q4_1, KITE_TYPE_Q4_1)
B32_RUNNER(run_q5_0, KITE_TYPE_Q5_0)
B32_RUNNER(run_q5_1, KITE_TYPE_Q5_1)
static void run_q4_k(const uint8_t *grp, const kite_pack_geom *g, const tile_ctx *c, int32_t b0, int nb, int64_t row0, __mmask16 m) {
#define CALL(N) tile_q45k(false, grp, g, c, b0, N, row0, m)
    TILE_SWITCH(nb, CALL)
#undef CALL
}
static void run_q5_k(const uint8_t *grp, const kite_pack_geom *g, const tile_ctx *c, int32_t b0, int nb, int64_t row0, __mmask16 m) {
#define CALL(N) tile_q45k(true, grp, g, c, b0, N, row0, m)
    TILE_SWITCH(nb, CALL)
#undef CALL
}
static void run_q6_k(const uint8_t *grp, const kite_pack_geom *g, const tile_ctx *c, int32_t b0, int nb, int64_t row0, __mmask16 m) {
#define CALL(N) tile_q6k(grp, g, c, b0, N, row0, m)
    TILE_SWITCH(nb, CALL)
#undef CALL
}

#define FLOAT_RUNNER(name, TYPE)                                                                                    \
    static void name(const uint8_t *grp, const kite_pack_geom *g, const tile_ctx *c, int32_t b0, int nb, int ng,   \
                     int64_t row0, __mmask16 m0, __mmask16 m1) {                                                    \
        if (ng > 1) {                                                                                               \
            switch (nb) {                                                                                           \
            case 1: tile_float(TYPE, grp, g, c, b0, 2, 1, row0, m0, m1); break;                                     \
            case 2: tile_float(TYPE, grp, g, c, b0, 2, 2, row0, m0, m1); break;                                     \
            case 3: tile_float(TYPE, grp, g, c, b0, 2, 3, row0, m0, m1); break;                                     \
            case 4: tile_float(TYPE, grp, g, c, b0, 2, 4, row0, m0, m1); break;                                     \
            case 5: tile_float(TYPE, grp, g, c, b0, 2, 5, row0, m0, m1); break;                                     \
            case 6: tile_float(TYPE, grp, g, c, b0, 2, 6, row0, m0, m1); break;                                     \
            case 7: tile_float(TYPE, grp, g, c, b0, 2, 7, row0, m0, m1); break;                                     \
            default: tile_float(TYPE, grp, g, c, b0, 2, 8, row0, m0, m1); break;                                    \
            }                                                                                                       \
        } else {                                                                                                    \
            switch (nb) {                                                                                           \
            case 1: tile_float(TYPE, grp, g, c, b0, 1, 1, row0, m0, 0); break;                                      \
            case 2: tile_float(TYPE, grp, g, c, b0, 1, 2, row0, m0, 0); break;                                      \
            case 3: tile_float(TYPE, grp, g, c, b0, 1, 3, row0, m0, 0); break;                                      \
            case 4: tile_float(TYPE, grp, g, c, b0, 1, 4, row0, m0, 0); break;                                      \
            case 5: tile_float(TYPE, grp, g, c, b0, 1, 5, row0, m0, 0); break;                                      \
            case 6: tile_float(TYPE, grp, g, c, b0, 1, 6, row0, m0, 0); break;                                      \
            case 7: tile_float(TYPE, grp, g, c, b0, 1, 7, row0, m0, 0); break;                                      \
            default: tile_float(TYPE, grp, g, c, b0, 1, 8, row0, m0, 0); break;                                     \
            }                                                                                                       \
        }                                                                                                           \
    }
FLOAT_RUNNER(run_f32, KITE_TYPE_F32)
FLOAT_RUNNER(run_f16, KITE_TYPE_F16)
FLOAT_RUNNER(run_bf16, KITE_TYPE_BF16)

typedef void (*quant_runner)(const uint8_t *, const kite_pack_geom *, const tile_ctx *, int32_t, int, int64_t, __mmask16);
typedef void (*float_runner)(const uint8_t *, const kite_pack_geom *, const tile_ctx *, int32_t, int, int, int64_t,
                             __mmask16, __mmask16);

static bool accelerated(uint32_t type) {
    switch (type) {
    case KITE_TYPE_F32: case KITE_TYPE_F16: case KITE_TYPE_BF16:
    case KITE_TYPE_Q8_0: case KITE_TYPE_Q4_0: case KITE_TYPE_Q4_1: case KITE_TYPE_Q5_0: case KITE_TYPE_Q5_1:
    case KITE_TYPE_Q2_K: case KITE_TYPE_Q3_K: case KITE_TYPE_Q4_K: case KITE_TYPE_Q5_K: case KITE_TYPE_Q6_K:
        return true;
    default:
        return false;
    }
}

static int avx512_pack(const kite_tensor *t, kite_weight_arena *arena, kite_packed_matrix *out, kite_error *e) {
    if (t && !accelerated(t->type)) return kite_ref_pack(t, arena, out, e);
    return kite_pack_interleaved(t, G16, t && t->type == KITE_TYPE_Q8_0 ? KITE_PACK_Q8_OFFSET : 0, arena, out, e);
}

static size_t avx512_pack_bytes(const kite_tensor *t) {
    return t && accelerated(t->type) ? kite_pack_interleaved_bytes(t, G16) : 0;
}

/* ---- AMX-INT8 for the 32-block types (Sapphire Rapids on) ------------------------------------------------------ *
 * On these cores every 512-bit vector operation takes the one vector port the vpdpbusd also needs
 * (measured: each vpaddd, fma or cvt added to a loop of independent vpdpbusd costs a cycle), so a
 * VNNI tile spends 11 operations per (block, activation row), 8 of them on the dot product. The AMX
 * tile unit does the integer dot products instead: per block, the group's 16 rows are unpacked once
 * to signed int8 (v itself, no offset term), stored as the B tile (its 8 rows of 64 bytes are
 * exactly the packed layout's 8 column-group vectors), the activation rows are loaded straight from
 * the activation buffer as A tiles (32 bytes of a block per row, stride row_bytes), and tdpbssd gives
 * isum for up to 16 rows x 16 weight rows per tile; two A/C tile pairs serve up to 32 rows per
 * unpacking (prefill and wide batches; see AMX_MIN_ROWS). What stays on the vector port per (block, row) is the float step: conversion, d * d_x
 * and the fma (plus the min term of q4_1 / q5_1), in the order of kernels_internal.h. isum is the same
 * exact int32 as the VNNI chain's (whose offset term -off * xsum cancels the stored offset mod 2^32,
 * off being even), so the bits are those of the reference for any n, slot and row range.
 * Safety: the tiles are used only when the CPU reports AMX-TILE and AMX-INT8, the OS saves the tile
 * state (XCR0 bits 17-18) and Linux grants this process the tile data (arch_prctl ARCH_REQ_XCOMP_PERM
 * for XFEATURE_XTILEDATA, asked once per process; it fails e.g. on kernels before 5.16 or when a
 * thread's sigaltstack is too small for the larger signal frame); any "no" leaves the VNNI tiles, which
 * give the same bits, without a message above debug. KITE_AMX=0 in the environment turns them off
 * (the kernel set stays avx512-vnni); KITE_CPU=avx2 or ref never reach this file. The tile
 * configuration is per thread state: amx_matmul loads it (ldtilecfg) in whichever thread calls it,
 * every call, and releases the tiles before returning, so worker threads need no setup of their own. */
/* gcc spells the -mamx-* macros __AMX_TILE__ / __AMX_INT8__, clang __AMXTILE__ / __AMXINT8__. */
#if defined(__linux__) && (defined(__AMX_TILE__) || defined(__AMXTILE__)) && (defined(__AMX_INT8__) || defined(__AMXINT8__))
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <cpuid.h>
#include "base/error.h"
#define KITE_HAVE_AMX 1
/* From here on the tiles beat the VNNI ones. Each block's tile sequence (a B tile just written by
 * vector stores, the product, its result read back by vector loads) costs some 150 cycles of latency
 * that neither a second tile set for the next block nor the out-of-order core hid, so below ~24 rows
 * the VNNI tiles stay faster (kite_kernel_bench, q4_0 512 x 2048 in cache, 1 thread, best of 3-4 on a
 * busy machine, GOP/s VNNI / AMX: 9 rows 178 / 110, 16 172 / 158, 32 135-155 / 225-230). */
#define AMX_MIN_ROWS 24
#define AMX_MAX_ROWS 32 /* two A/C tile pairs of 16 rows */
#define ARCH_REQ_XCOMP_PERM_ 0x1023 /* <asm/prctl.h>, Linux 5.16 */
#define XFEATURE_XTILEDATA_ 18

static atomic_int amx_state; /* 0 not probed, 1 usable, -1 not */

static bool amx_probe(void) {
    const char *env = getenv("KITE_AMX");
    if (env && !strcmp(env, "0")) return false;
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !((c >> 27) & 1)) return false; /* OSXSAVE: xgetbv is allowed */
    if (__get_cpuid_max(0, NULL) < 7) return false;
    __cpuid_count(7, 0, a, b, c, d);
    if (!((d >> 24) & 1) || !((d >> 25) & 1)) return false; /* AMX-TILE, AMX-INT8 */
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & (3u << 17)) != (3u << 17)) return false; /* XTILECFG and XTILEDATA state enabled by the OS */
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM_, XFEATURE_XTILEDATA_) != 0) {
        kite_log(KITE_LOG_DEBUG, "AMX: Linux refused the tile state (arch_prctl); using the VNNI tiles");
        return false;
    }
    kite_log(KITE_LOG_DEBUG, "AMX-INT8 tiles in use for the 32-block types from %d rows (KITE_AMX=0 turns them off)",
             AMX_MIN_ROWS);
    return true;
}

static bool amx_on(void) {
    int s = atomic_load_explicit(&amx_state, memory_order_relaxed);
    if (s == 0) {
        s = amx_probe() ? 1 : -1;
        atomic_store(&amx_state, s);
    }
    return s > 0;
}

bool kite_avx512_amx_set(bool want) {
    if (!want) {
        atomic_store(&amx_state, -1);
        return false;
    }
    atomic_store(&amx_state, amx_probe() ? 1 : -1);
    return amx_on();
}

typedef struct amx_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_config;

/* Tiles: 0, 1 = C (isum, rows x 16 int32), 2, 3 = A (activation rows x 32 bytes), 4 = B (8 x 64). */
static void amx_configure(int nb0, int nb1) {
    amx_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    cfg.rows[0] = (uint8_t)nb0, cfg.colsb[0] = 64;
    cfg.rows[2] = (uint8_t)nb0, cfg.colsb[2] = 32;
    if (nb1 > 0) {
        cfg.rows[1] = (uint8_t)nb1, cfg.colsb[1] = 64;
        cfg.rows[3] = (uint8_t)nb1, cfg.colsb[3] = 32;
    }
    cfg.rows[4] = 8, cfg.colsb[4] = 64;
    _tile_loadconfig(&cfg);
}

/* A block's 16 weight rows as signed int8 v (the B tile: 8 rows of 64 bytes) at wt. */
INLINE void amx_unpack(uint32_t type, const uint8_t *q, int8_t *wt) {
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    const bool q4 = type != KITE_TYPE_Q8_0, q5 = type == KITE_TYPE_Q5_0 || type == KITE_TYPE_Q5_1;
    const int stored_offset = type == KITE_TYPE_Q8_0 ? 128 : type == KITE_TYPE_Q4_0 ? 8 : type == KITE_TYPE_Q5_0 ? 16 : 0;
    __m512i w[8];
    if (q4) {
#pragma GCC unroll 4
        for (int p = 0; p < 4; p++) {
            __m512i v = _mm512_loadu_si512(q + 64 * p);
            w[p] = _mm512_and_si512(v, low4);
            w[p + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
        }
        if (q5) {
            __m512i h = _mm512_loadu_si512(q + 256);
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++) w[j] = _mm512_or_si512(w[j], bit_to_4(h, j));
        }
    } else {
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) w[j] = _mm512_loadu_si512(q + 64 * j);
    }
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) {
        if (stored_offset) w[j] = _mm512_sub_epi8(w[j], _mm512_set1_epi8((char)stored_offset));
        _mm512_store_si512(wt + 64 * j, w[j]);
    }
}

/* The float step of one block for nb rows from b0 (isum[b] the block's 16 sums of row b). */
INLINE void amx_float_step(uint32_t type, const uint8_t *sb, const tile_ctx *c, int32_t b0, int nb, int64_t blk,
                           int32_t (*isum)[16], __m512 *acc) {
    const bool has_min = type == KITE_TYPE_Q4_1 || type == KITE_TYPE_Q5_1;
    const __m512 dw = fp16x16(sb);
    const __m512 mw = has_min ? fp16x16(sb + 32) : dw;
    for (int b = 0; b < nb; b++) {
        const uint8_t *arow = c->act + (size_t)(b0 + b) * c->ag.row_bytes;
        const __m512 dx = _mm512_set1_ps(load_f32(arow + c->ag.off_d + blk * 4));
        acc[b] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(isum[b])), _mm512_mul_ps(dw, dx), acc[b]);
        if (has_min) {
            const int32_t xsum = load_i32(arow + c->ag.off_sum + blk * 4);
            acc[b] = _mm512_fmadd_ps(_mm512_set1_ps((float)xsum), _mm512_mul_ps(mw, dx), acc[b]);
        }
    }
}

/* One 16-row group x nb0 + nb1 activation rows from b0 (the tiles configured for nb0, nb1). */
INLINE void amx_tile_b32(uint32_t type, const uint8_t *grp, const kite_pack_geom *g, const tile_ctx *c, int32_t b0,
                         int nb0, int nb1, int64_t row0, __mmask16 mask) {
    const int nb = nb0 + nb1;
    __m512 acc[AMX_MAX_ROWS];
    int32_t isum[AMX_MAX_ROWS][16] __attribute__((aligned(64)));
    int8_t wt[8 * 64] __attribute__((aligned(64)));
    for (int b = 0; b < nb; b++) acc[b] = _mm512_setzero_ps();
    const uint8_t *act0 = c->act + (size_t)b0 * c->ag.row_bytes, *act1 = act0 + (size_t)nb0 * c->ag.row_bytes;
    const long stride = (long)c->ag.row_bytes;
    for (int64_t blk = 0; blk < g->n_blocks; blk++) {
        const uint8_t *q = grp + (size_t)blk * g->block_bytes;
        prefetch_lines(q + PREFETCH_B32 * g->block_bytes, g->block_bytes);
        amx_unpack(type, q, wt);
        _tile_loadd(4, wt, 64);
        _tile_loadd(2, act0 + blk * 32, stride);
        _tile_zero(0);
        _tile_dpbssd(0, 2, 4);
        _tile_stored(0, isum[0], 64);
        if (nb1 > 0) {
            _tile_loadd(3, act1 + blk * 32, stride);
            _tile_zero(1);
            _tile_dpbssd(1, 3, 4);
            _tile_stored(1, isum[nb0], 64);
        }
        amx_float_step(type, q + g->q_bytes, c, b0, nb, blk, isum, acc);
    }
    for (int b = 0; b < nb; b++) store_rows(c, b0 + b, row0, mask, acc[b]);
}

#define AMX_RUNNER(name, TYPE)                                                                                     \
    static void name(const uint8_t *grp, const kite_pack_geom *g, const tile_ctx *c, int32_t b0, int nb0, int nb1, \
                     int64_t row0, __mmask16 m) {                                                                  \
        amx_tile_b32(TYPE, grp, g, c, b0, nb0, nb1, row0, m);                                                      \
    }
AMX_RUNNER(amx_q8_0, KITE_TYPE_Q8_0)
AMX_RUNNER(amx_q4_0, KITE_TYPE_Q4_0)
AMX_RUNNER(amx_q4_1, KITE_TYPE_Q4_1)
AMX_RUNNER(amx_q5_0, KITE_TYPE_Q5_0)
AMX_RUNNER(amx_q5_1, KITE_TYPE_Q5_1)
typedef void (*amx_runner)(const uint8_t *, const kite_pack_geom *, const tile_ctx *, int32_t, int, int, int64_t, __mmask16);

/* Rows in the fewest tiles of at most AMX_MAX_ROWS, each as two even halves; the tiles outermost, so
 * the configuration changes at most once per tile size. */
static void amx_matmul(amx_runner run, const uint8_t *base, const kite_pack_geom *g, const tile_ctx *c, int32_t n,
                       int64_t g0, int64_t g1, int64_t r0, int64_t r1) {
    const int32_t n_tiles = (n + AMX_MAX_ROWS - 1) / AMX_MAX_ROWS, tile_lo = n / n_tiles, n_bigger = n % n_tiles;
    int cfg0 = -1, cfg1 = -1;
    for (int32_t t = 0, b0 = 0; t < n_tiles; t++) {
        const int32_t nb = tile_lo + (t < n_bigger ? 1 : 0), nb0 = (nb + 1) / 2, nb1 = nb - nb0;
        if (nb0 != cfg0 || nb1 != cfg1) {
            amx_configure(nb0, nb1);
            cfg0 = nb0, cfg1 = nb1;
        }
        for (int64_t grp = g0; grp < g1; grp++)
            run(base + (size_t)grp * g->group_bytes, g, c, b0, nb0, nb1, grp * G16, row_mask(grp * G16, r0, r1));
        b0 += nb;
    }
    _tile_release();
}
#else
bool kite_avx512_amx_set(bool want) { (void)want; return false; }
#endif

/* ---- trellis types: avx512_vbmi.c where the CPU has VBMI and VBMI2, else the AVX2 product (same bits) ------- */
#include <cpuid.h>
#include <stdatomic.h>
static atomic_int vbmi_state; /* 0 not probed, 1 usable, -1 not */

static bool vbmi_probe(void) {
    unsigned a, b, c, d;
    if (__get_cpuid_max(0, NULL) < 7) return false;
    __cpuid_count(7, 0, a, b, c, d);
    return ((c >> 1) & 1) && ((c >> 6) & 1); /* AVX512_VBMI, AVX512_VBMI2 (ZMM state: checked by the level) */
}

bool kite_avx512_vbmi_set(bool want) {
    atomic_store(&vbmi_state, want && vbmi_probe() ? 1 : -1);
    return atomic_load(&vbmi_state) > 0;
}

static void trellis_matmul(const kite_packed_matrix *w, const void *act, const float *x, int32_t n, float *y,
                           int64_t y_stride, int64_t r0, int64_t r1) {
    int s = atomic_load_explicit(&vbmi_state, memory_order_relaxed);
    if (s == 0) {
        s = vbmi_probe() ? 1 : -1;
        atomic_store(&vbmi_state, s);
    }
    if (s > 0) kite_avx512_vbmi_trellis_matmul(w, act, n, y, y_stride, r0, r1);
    else kite_kernels_avx2()->matmul(w, act, x, n, y, y_stride, r0, r1);
}

/* ---- q2_K, q3_K (kernels/kquant_simd.h on x86/avx512_layer.h plus the operations below; vpdpbusd) --------- */
#include "kernels/x86/avx512_layer.h"
#define kt_srli(a, n) _mm512_srli_epi32(a, n)
#define kt_slli(a, n) _mm512_slli_epi32(a, n)
#define kt_mul(a, b) _mm512_mullo_epi32(a, b)
#define kt_u8x2(p) _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(const void *)(p)))
#define kt_i8x2(p) _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(const void *)(p)))
#define kt_srai(a, n) _mm512_srai_epi32(a, n)
#define kt_dot16(acc, a, p) _mm512_dpwssd_epi32(acc, a, _mm512_set1_epi32(kt_load_i32(p)))
#define KQ_TILE_B 8
#define kt_scale(sc) (sc)
INLINE __m512i kt_sdot4_avx512(__m512i acc, const __m512i *w, const int8_t *q, __m512i sc) {
    const __m512i i0 = kt_dot(kt_dot(kt_zero(), w[0], q), w[2], q + 8), i1 = kt_dot(kt_dot(kt_zero(), w[1], q + 4), w[3], q + 12);
    return kt_add(acc, kt_mul(kt_add(i0, i1), sc));
}
#define kt_sdot4(acc, w, q, sc) kt_sdot4_avx512(acc, w, q, sc)
#include "kernels/kquant_simd.h"

static void avx512_matmul(const kite_packed_matrix *w, const void *act, const float *x, int32_t n, float *y,
                          int64_t y_stride, int64_t r0, int64_t r1) {
    if (kite_is_trellis(w->type)) {
        trellis_matmul(w, act, x, n, y, y_stride, r0, r1);
        return;
    }
    if ((w->layout & ~(uint32_t)KITE_PACK_Q8_OFFSET) != LAYOUT16) {
        kite_ref_matmul(w, act, x, n, y, y_stride, r0, r1);
        return;
    }
    if (w->type == KITE_TYPE_Q2_K || w->type == KITE_TYPE_Q3_K) { /* kernels/kquant_simd.h (q4_K..q6_K: below) */
        kq_matmul(w, act, n, y, y_stride, r0, r1);
        return;
    }
    if (r0 < 0) r0 = 0;
    if (r1 > w->rows) r1 = w->rows;
    if (r0 >= r1 || n <= 0) return;
    kite_pack_geom g;
    kite_pack_geometry(w->type, w->rows, w->cols, G16, &g);
    tile_ctx c = {.act = act, .x = x, .cols = w->cols, .y = y, .y_stride = y_stride};
    kite_family f = kite_type_family(w->type);
    if (f != KITE_FAMILY_FLOAT) c.ag = kite_act_geometry(f, w->cols);
    const uint8_t *base = w->data;
    int64_t g0 = r0 / G16, g1 = (r1 + G16 - 1) / G16;
    if (f == KITE_FAMILY_FLOAT) {
        float_runner run = w->type == KITE_TYPE_F32 ? run_f32 : w->type == KITE_TYPE_F16 ? run_f16 : run_bf16;
        for (int64_t grp = g0; grp < g1;) {
            int ng = grp + 1 < g1 ? 2 : 1;
            __mmask16 m0 = row_mask(grp * G16, r0, r1), m1 = ng > 1 ? row_mask((grp + 1) * G16, r0, r1) : 0;
            for (int32_t b0 = 0; b0 < n; b0 += TILE_B)
                run(base + (size_t)grp * g.group_bytes, &g, &c, b0, n - b0 < TILE_B ? n - b0 : TILE_B, ng, grp * G16, m0, m1);
            grp += ng;
        }
        return;
    }
#ifdef KITE_HAVE_AMX
    if (f == KITE_FAMILY_B32 && n >= AMX_MIN_ROWS && amx_on()) {
        amx_runner run = w->type == KITE_TYPE_Q8_0 ? amx_q8_0 : w->type == KITE_TYPE_Q4_0 ? amx_q4_0
                         : w->type == KITE_TYPE_Q4_1 ? amx_q4_1 : w->type == KITE_TYPE_Q5_0 ? amx_q5_0 : amx_q5_1;
        amx_matmul(run, base, &g, &c, n, g0, g1, r0, r1);
        return;
    }
#endif
    quant_runner run = NULL;
    switch (w->type) {
    case KITE_TYPE_Q8_0: run = run_q8_0; break;
    case KITE_TYPE_Q4_0: run = run_q4_0; break;
    case KITE_TYPE_Q4_1: run = run_q4_1; break;
    case KITE_TYPE_Q5_0: run = run_q5_0; break;
    case KITE_TYPE_Q5_1: run = run_q5_1; break;
    case KITE_TYPE_Q4_K: run = run_q4_k; break;
    case KITE_TYPE_Q5_K: run = run_q5_k; break;
    case KITE_TYPE_Q6_K: run = run_q6_k; break;
    default: return;
    }
    /* The n rows in the fewest tiles of at most max_tile rows, their sizes as even as possible (9 rows
     * as 5 + 4 rather than 8 + 1: a one-row tile streams the whole group for one row with no
     * parallelism between rows). Which tile a row lands in changes no bits (kernels_internal.h). */
    const int32_t max_tile = f == KITE_FAMILY_B32 ? TILE_B32 : TILE_B;
    const int32_t n_tiles = (n + max_tile - 1) / max_tile, tile_lo = n / n_tiles, n_bigger = n % n_tiles;
    for (int64_t grp = g0; grp < g1; grp++) {
        __mmask16 m = row_mask(grp * G16, r0, r1);
        for (int32_t t = 0, b0 = 0; t < n_tiles; t++) {
            const int32_t nb = tile_lo + (t < n_bigger ? 1 : 0);
            run(base + (size_t)grp * g.group_bytes, &g, &c, b0, nb, grp * G16, m);
            b0 += nb;
        }
    }
}

/* ---- attention (kite_attn_query; the reference's math with 16-lane vectors) ------------------------------- */

/* kite_attn_exp on 16 lanes: the same steps, with fused multiply-adds. */
INLINE __m512 exp16(__m512 x) {
    const __mmask16 live = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_GE_OQ);
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-0.693359375f), x);
    r = _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    __m512 y = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
    __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_maskz_mov_ps(live, _mm512_mul_ps(y, _mm512_castsi512_ps(e)));
}

/* Lane j = the sum of v[j]'s lanes: pairs of rows interleaved and added within 128-bit quarters (lanes
 * 0+2 and 1+3, then those two), then the quarters (0+1 and 2+3, then those two). The same tree for
 * every j. */
INLINE __m512 hsum16_rows(const __m512 *v) {
    __m512 s1[8], s2[4];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) s1[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
        s2[i] = _mm512_add_ps(_mm512_shuffle_ps(s1[2 * i], s1[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                              _mm512_shuffle_ps(s1[2 * i], s1[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    /* s2[i]: rows 4i..4i+3 in lanes 0..3 of each quarter, one partial sum per quarter. */
    const __m512 s3a = _mm512_add_ps(_mm512_shuffle_f32x4(s2[0], s2[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                     _mm512_shuffle_f32x4(s2[0], s2[1], _MM_SHUFFLE(3, 1, 3, 1)));
    const __m512 s3b = _mm512_add_ps(_mm512_shuffle_f32x4(s2[2], s2[3], _MM_SHUFFLE(2, 0, 2, 0)),
                                     _mm512_shuffle_f32x4(s2[2], s2[3], _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm512_add_ps(_mm512_shuffle_f32x4(s3a, s3b, _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_f32x4(s3a, s3b, _MM_SHUFFLE(3, 1, 3, 1)));
}

/* The shared driver (kernels/attend_simd.h) on this set's vectors. */
#define AV_LANES 16
#define AV_VCHUNK 4
typedef __m512 av_t;
#define av_zero() _mm512_setzero_ps()
#define av_set1(x) _mm512_set1_ps(x)
#define av_load(p) _mm512_loadu_ps(p)
#define av_store(p, v) _mm512_storeu_ps(p, v)
#define av_fmadd(a, b, c) _mm512_fmadd_ps(a, b, c)
#define av_mul(a, b) _mm512_mul_ps(a, b)
#define av_add(a, b) _mm512_add_ps(a, b)
#define av_sub(a, b) _mm512_sub_ps(a, b)
#define av_max(a, b) _mm512_max_ps(a, b)
#define av_hsum(v) _mm512_reduce_add_ps(v)
#define av_hsum_rows(v) hsum16_rows(v)
#define av_hmax(v) _mm512_reduce_max_ps(v)
#define av_exp(v) exp16(v)
#define av_f16(p) fp16x16(p)
#define av_i8(p) _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(p))))
#define av_u4(p, HI) u4x16(p, HI)
INLINE __m512 u4x16(const uint8_t *p, bool hi) {
    __m128i b = _mm_loadu_si128((const __m128i *)p);
    if (hi) b = _mm_srli_epi16(b, 4);
    b = _mm_sub_epi8(_mm_and_si128(b, _mm_set1_epi8(0x0F)), _mm_set1_epi8(8));
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b));
}
#include "kernels/attend_simd.h"

static void avx512_attend(const kite_attn_query *a) {
    /* Heads of 8, 24, 40... elements take the AVX2 kernel (this CPU has AVX2), others the reference. */
    if (av_attend_fits(a)) av_attend(a);
    else if (a->head_dim % 8 == 0 && a->head_dim <= KITE_ATTN_MAX_HEAD_DIM) kite_kernels_avx2()->attend(a);
    else kite_ref_attend(a);
}

/* kite_silu on 16 lanes (the tail under a mask). */
static void avx512_silu_mul(float *gate, const float *up, int64_t n) {
    const __m512 one = _mm512_set1_ps(1.0f);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = first_lanes(n - i);
        const __m512 x = _mm512_maskz_loadu_ps(m, gate + i);
        const __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_abs_ps(x)));
        const __m512 num = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GE_OQ), e, one);
        const __m512 s = _mm512_mul_ps(x, _mm512_div_ps(num, _mm512_add_ps(one, e)));
        _mm512_mask_storeu_ps(gate + i, m, _mm512_mul_ps(s, _mm512_maskz_loadu_ps(m, up + i)));
    }
}

/* kite_gelu_tanh on 16 lanes (the tail under a mask). */
static void avx512_gelu_mul(float *gate, const float *up, int64_t n) {
    const __m512 one = _mm512_set1_ps(1.0f);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = first_lanes(n - i);
        const __m512 x = _mm512_maskz_loadu_ps(m, gate + i);
        const __m512 z = _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(KITE_GELU_2C), x),
                                       _mm512_add_ps(one, _mm512_mul_ps(_mm512_set1_ps(KITE_GELU_A), _mm512_mul_ps(x, x))));
        const __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_abs_ps(z)));
        const __m512 num = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(z, _mm512_setzero_ps(), _CMP_GE_OQ), e, one);
        const __m512 s = _mm512_mul_ps(x, _mm512_div_ps(num, _mm512_add_ps(one, e)));
        _mm512_mask_storeu_ps(gate + i, m, _mm512_mul_ps(s, _mm512_maskz_loadu_ps(m, up + i)));
    }
}

/* vcvtps2ph rounds to nearest even like kite_f32_to_fp16 (the tail under a mask). */
static void avx512_f32_to_f16(const float *x, uint16_t *y, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = first_lanes(n - i);
        const __m256i h = _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm256_mask_storeu_epi16(y + i, m, h);
    }
}

/* kite_silu on 16 lanes, for the DeltaNet kernels. */
INLINE __m512 silu16(__m512 x) {
    const __m512 one = _mm512_set1_ps(1.0f);
    const __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_abs_ps(x)));
    const __m512 num = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GE_OQ), e, one);
    return _mm512_mul_ps(x, _mm512_div_ps(num, _mm512_add_ps(one, e)));
}
#define av_silu(v) silu16(v)
#include "kernels/deltanet_simd.h"

static void avx512_dn_steps(const kite_dn_head *h) {
    if (dn_fits(h)) dn_steps(h);
    else kite_ref_dn_steps(h);
}
static void avx512_dn_chunked(const kite_dn_head *h, float *work) {
    if (dn_fits(h)) dn_chunked(h, work);
    else kite_ref_dn_chunked(h, work);
}

static const kite_kernel_set avx512_set = {
    .level = KITE_CPU_AVX512,
    .name = "avx512-vnni",
    .pack = avx512_pack,
    .pack_bytes = avx512_pack_bytes,
    .act_bytes = kite_act_bytes_common,
    .quantize_act = avx512_quantize_act,
    .matmul = avx512_matmul,
    .attend = avx512_attend,
    .silu_mul = avx512_silu_mul,
    .gelu_mul = avx512_gelu_mul,
    .f32_to_f16 = avx512_f32_to_f16,
    .dn_steps = avx512_dn_steps,
    .dn_chunked = avx512_dn_chunked,
    .dn_conv_silu = dn_conv_silu,
    .row_block = 64,
};

const kite_kernel_set *kite_kernels_avx512(void) { return &avx512_set; }
