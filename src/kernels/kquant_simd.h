/* The K-quants' product (q2_K, q3_K, q4_K, q5_K, q6_K), written once for every SIMD level: kq_matmul(...)
 * computes exactly the reference's K-quant product (kernels/ref/ref.c matmul_k, the math in
 * kernels_internal.h), bit for bit, on the interleaved layout with G = KT_LANES rows per group (the K-quant
 * entries of kernels_internal.h's layout list). Every level runs q2_K and q3_K here; NEON also q4_K..q6_K.
 * AVX2 and AVX-512 keep their own q4_K..q6_K tiles, which measured faster (kite_kernel_bench, 2048 x 8192,
 * 2 threads, 2026-12-07: AVX2 q5_K / q6_K 4-8% at n = 1; AVX-512 q4_K..q6_K 5-12% at n = 16, equal at n = 1).
 * Included by each level's file, which first defines the vector layer of kernels/trellis_simd.h (KT_LANES,
 * kt_vi, kt_vf, kt_load, kt_add, kt_sub, kt_set1, kt_zero, kt_dot, kt_f16, kt_cvt, kt_fmadd, kt_mulf,
 * kt_set1f, kt_zerof, kt_storef, kt_prefetch) and:
 *
 *   kt_and(a, b), kt_or(a, b)
 *   kt_srli(a, n), kt_slli(a, n), kt_srai(a, n)   per 32-bit lane shifts by a constant 0 < n < 32
 *   kt_mul(a, b)                   per lane a * b, low 32 bits
 *   kt_u8x2(p), kt_i8x2(p)         2 KT_LANES bytes at p, zero- or sign-extended to 16-bit halves: lane i
 *                                  holds bytes 2i (low half) and 2i + 1 (high half)
 *   kt_dot16(acc, a, p)            acc + per lane a.lo * p[0] + a.hi * p[1] (16-bit halves, p: 2 int16)
 *   kt_scale(sc)                   the lanes' int32 scales (|sc| < 2^15) in the form kt_sdot4 takes
 *   kt_sdot4(acc, w, q, sc)        acc + sc * sum_{j < 4} (per lane dot of w[j] with q[4j..4j+3]), for weight
 *                                  bytes w <= 31: AVX2 adds the maddubs pairs in 16 bits (8 products of at most
 *                                  31 * 127 each fit) and multiplies by (sc, sc) with one vpmaddwd; VNNI and
 *                                  sdot chain in 32 bits and multiply
 *   KQ_TILE_B (optional)           activation rows per pass over the weights (default 4)
 *   KQ_B32 (optional)              kq_matmul also takes q4_1, q5_0 and q5_1
 *
 * The dots multiply unsigned weight bytes u (0..63) by signed activations, which every level's dot
 * (vpdpbusd, maddubs, sdot) does exactly for these ranges.
 *
 * Per row group and up to KQ_TILE_B activation rows, for each 32 columns of a block: kq_unpack gives the 8
 * column groups' weight bytes u (2-bit fields, nibbles, plus the high bits: u = v + offset, offset 4 for
 * q3_K, 32 for q6_K, else 0), the row's scales weigh the sub-blocks' integer sums into A. At the block's end
 * one pass of 16-bit pair dots of the per-row scale bytes (laid as pairs in every layout) against the
 * activations' sums makes the second integer: B = sum_s m_s xsum_s for the types with mins, or
 * C = sum_s sc_s sum16_s, which takes the offset off A (sum_s sc_s sum (u - offset) q = A - offset C). */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "kernels/layer_rows.h"

#ifndef KT_TARGET
#define KT_TARGET
#endif
#define KQ_INLINE static inline __attribute__((always_inline)) KT_TARGET
#ifndef KQ_TILE_B
#define KQ_TILE_B 4 /* activation rows per pass over the weights */
#endif
#if KQ_TILE_B != 4 && KQ_TILE_B != 8
#error "KQ_TILE_B: 4 or 8 (the runners below have those cases)"
#endif
#define KQ_PREFETCH_BLOCKS 2 /* blocks ahead (q2_K: 21 lines at G = 16), an eighth of one per 32 columns */

/* Bits [from, from + width) of every byte moved to [to, to + width), the rest 0 (32-bit shifts: what
 * crosses from a neighbouring byte is masked off). */
KQ_INLINE kt_vi kq_move(kt_vi w, const int from, const int to, const int width) {
    const int32_t mask = (int32_t)(0x01010101u * (((1u << width) - 1) << to));
    const kt_vi s = to > from ? kt_slli(w, to - from) : from > to ? kt_srli(w, from - to) : w;
    return kt_and(s, kt_set1(mask));
}

/* Types as compile-time T: */
enum { KQ_Q2 = 0, KQ_Q3 = 1, KQ_Q4 = 2, KQ_Q5 = 3, KQ_Q6 = 4 };
KQ_INLINE bool kq_sub16(const int T) { return T == KQ_Q2 || T == KQ_Q3 || T == KQ_Q6; } /* else 32-column sub-blocks */
KQ_INLINE bool kq_has_min(const int T) { return T == KQ_Q2 || T == KQ_Q4 || T == KQ_Q5; }

/* The weight bytes u of the 8 column groups of 32-column unit t (0..7) of a block at qb. */
KQ_INLINE void kq_unpack(const uint8_t *qb, int t, kt_vi w[8], const int T) {
    enum { V = 4 * KT_LANES };
    if (T == KQ_Q2 || T == KQ_Q3) {
        const kt_vi lo0 = kt_load(qb + (size_t)(T == KQ_Q3 ? 3 * t : 2 * t) * V);
        const kt_vi lo1 = kt_load(qb + (size_t)(T == KQ_Q3 ? 3 * t + 1 : 2 * t + 1) * V);
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            w[j] = kq_move(lo0, 2 * j, 0, 2);
            w[4 + j] = kq_move(lo1, 2 * j, 0, 2);
        }
        if (T == KQ_Q3) {
            const kt_vi hv = kt_load(qb + (size_t)(3 * t + 2) * V);
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) w[k] = kt_or(w[k], kq_move(hv, k, 2, 1));
        }
    } else {
        const uint8_t *q = qb + (size_t)t * (T == KQ_Q6 ? 6 : 4) * V;
#pragma GCC unroll 4
        for (int p = 0; p < 4; p++) {
            const kt_vi v = kt_load(q + (size_t)p * V);
            w[p] = kq_move(v, 0, 0, 4);
            w[p + 4] = kq_move(v, 4, 0, 4);
        }
        if (T == KQ_Q5) {
            const kt_vi h = kt_load(qb + (size_t)(32 + t) * V);
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++) w[j] = kt_or(w[j], kq_move(h, j, 4, 1));
        }
        if (T == KQ_Q6) {
            const kt_vi h0 = kt_load(q + 4 * (size_t)V), h1 = kt_load(q + 5 * (size_t)V);
#pragma GCC unroll 4
            for (int p = 0; p < 4; p++) {
                w[p] = kt_or(w[p], kq_move(h0, 2 * p, 4, 2));
                w[p + 4] = kt_or(w[p + 4], kq_move(h1, 2 * p, 4, 2));
            }
        }
    }
}

/* One row group (KT_LANES rows from row0) x NB activation rows from b0, type T. */
KQ_INLINE void kq_tile(const uint8_t *grp, const kite_pack_geom *g, const uint8_t *act, const kite_act_geom *ag, int32_t b0,
                       float *y, int64_t y_stride, int64_t row0, int64_t r0, int64_t r1, const int T, const int NB) {
    enum { G = KT_LANES };
    kt_vf acc[KQ_TILE_B];
    const uint8_t *arow[KQ_TILE_B];
#pragma GCC unroll 8
    for (int b = 0; b < NB; b++) {
        arow[b] = act + (size_t)(b0 + b) * ag->row_bytes;
        acc[b] = kt_zerof();
    }
    for (int64_t blk = 0; blk < g->n_blocks; blk++) {
        const uint8_t *qb = grp + (size_t)blk * g->block_bytes, *sb = qb + g->q_bytes;
        /* the block KQ_PREFETCH_BLOCKS ahead, an eighth per 32 columns (a burst of all its lines at once stalled);
         * past the group's last block too: the next group follows (a prefetch never faults) */
        const uint8_t *ahead = qb + KQ_PREFETCH_BLOCKS * g->block_bytes;
        const size_t eighth = kite_round_up(g->block_bytes, 8 * 64) / 8;
        kt_vi A[KQ_TILE_B];
#pragma GCC unroll 8
        for (int b = 0; b < NB; b++) A[b] = kt_zero();
        for (int t = 0; t < 8; t++) { /* 32 columns: sub-blocks 2t, 2t + 1 (16 columns) or sub-block t (32) */
            for (size_t o = (size_t)t * eighth; o < (size_t)(t + 1) * eighth && o < g->block_bytes; o += 64) kt_prefetch(ahead + o);
            kt_vi w[8];
            kq_unpack(qb, t, w, T);
            kt_vi sc0, sc1; /* the lanes' scales of the unit's first and second 16 columns (equal for 32) */
            if (T == KQ_Q2) {
                const kt_vi pair = kt_u8x2(sb + (size_t)t * 2 * G); /* sc | m << 4 of sub-blocks 2t, 2t + 1 */
                sc0 = kt_and(pair, kt_set1(15));
                sc1 = kt_and(kt_srli(pair, 16), kt_set1(15));
            } else if (T == KQ_Q3 || T == KQ_Q6) {
                const kt_vi pair = kt_i8x2(sb + (size_t)t * 2 * G);
                sc0 = kt_srai(kt_slli(pair, 16), 16);
                sc1 = kt_srai(pair, 16);
            } else {
                const kt_vi pair = kt_u8x2(sb + (size_t)(t / 2) * 2 * G);
                sc0 = sc1 = (t & 1) ? kt_srli(pair, 16) : kt_and(pair, kt_set1(0xFFFF));
            }
            if (T != KQ_Q6) { /* weight bytes <= 31: kt_sdot4 */
                sc0 = kt_scale(sc0);
                sc1 = kt_scale(sc1);
#pragma GCC unroll 8
                for (int b = 0; b < NB; b++) {
                    const int8_t *xq = (const int8_t *)arow[b] + blk * 256 + 32 * t;
                    A[b] = kt_sdot4(A[b], w, xq, sc0);
                    A[b] = kt_sdot4(A[b], w + 4, xq + 16, sc1);
                }
                continue;
            }
            /* q6_K (weight bytes up to 63): 32-bit dot chains */
#pragma GCC unroll 8
            for (int b = 0; b < NB; b++) {
                const int8_t *xq = (const int8_t *)arow[b] + blk * 256 + 32 * t;
                kt_vi i0 = kt_zero(), i1 = kt_zero();
#pragma GCC unroll 4
                for (int j = 0; j < 4; j++) {
                    i0 = kt_dot(i0, w[j], xq + 4 * j);
                    i1 = kt_dot(i1, w[4 + j], xq + 16 + 4 * j);
                }
                A[b] = kt_add(A[b], kt_add(kt_mul(i0, sc0), kt_mul(i1, sc1)));
            }
        }
        /* The block's second integer: B = sum_s m_s xsum_s (q2_K, q4_K, q5_K), or C = sum_s sc_s sum16_s, which
         * takes the offset off A (q3_K, q6_K: sum_s sc_s sum (u - offset) q = A - offset C). 16-bit pair dots of
         * the scale bytes (as pairs per row in every layout) against the activations' sums of those sub-blocks. */
        kt_vi mv[8];
        const int n_pairs = kq_sub16(T) ? 8 : 4;
        const size_t sums_at = kq_sub16(T) ? ag->off_sum + (size_t)blk * 32 : ag->off_sum32 + (size_t)blk * 16;
#pragma GCC unroll 8
        for (int p = 0; p < n_pairs; p++)
            mv[p] = T == KQ_Q2 ? kt_and(kt_srli(kt_u8x2(sb + (size_t)p * 2 * G), 4), kt_set1(0x000F000F))
                  : T == KQ_Q3 || T == KQ_Q6 ? kt_i8x2(sb + (size_t)p * 2 * G)
                                             : kt_u8x2(sb + 8 * (size_t)G + (size_t)p * 2 * G);
        const kt_vf d = kt_f16(sb + 16 * G), dmin = kq_has_min(T) ? kt_f16(sb + 18 * G) : kt_zerof();
#pragma GCC unroll 8
        for (int b = 0; b < NB; b++) {
            kt_vi X = kt_zero();
#pragma GCC unroll 8
            for (int p = 0; p < n_pairs; p++) X = kt_dot16(X, mv[p], arow[b] + sums_at + 4 * (size_t)p);
            float dx;
            memcpy(&dx, arow[b] + ag->off_d + (size_t)blk * 4, 4);
            const kt_vf vdx = kt_set1f(dx);
            if (!kq_has_min(T)) A[b] = kt_sub(A[b], kt_slli(X, T == KQ_Q3 ? 2 : 5)); /* offset 4 or 32 */
            acc[b] = kt_fmadd(kt_cvt(A[b]), kt_mulf(d, vdx), acc[b]);
            /* -(float)B: the negation is exact either side of the conversion */
            if (kq_has_min(T)) acc[b] = kt_fmadd(kt_cvt(kt_sub(kt_zero(), X)), kt_mulf(dmin, vdx), acc[b]);
        }
    }
#pragma GCC unroll 8
    for (int b = 0; b < NB; b++) kt_store_rows(y + (int64_t)(b0 + b) * y_stride, row0, r0, r1, acc[b]);
}

#ifdef KQ_B32 /* defined by the levels that take these from here */
/* ---- q4_1, q5_0, q5_1 (32-element blocks) ------------------------------------------------------------------- *
 * The levels whose own tiles lack them (AVX2, NEON) run these here: per block the 8 column groups' weight
 * bytes u (nibbles, plus the fifth bit for q5_0 / q5_1; v = u - 16 for q5_0), isum = sum u q - 16 xsum
 * (q5_0), then acc = fma(isum, d dx, acc) and, with a min, acc = fma(xsum, m dx, acc): the reference's steps. */
#define KQ_PREFETCH_B32 12 /* blocks ahead */

KQ_INLINE void kq_b32_tile(const uint8_t *grp, const kite_pack_geom *g, const uint8_t *act, const kite_act_geom *ag, int32_t b0,
                           float *y, int64_t y_stride, int64_t row0, int64_t r0, int64_t r1, const uint32_t type, const int NB) {
    enum { G = KT_LANES, V = 4 * KT_LANES };
    const bool q5 = type != KITE_TYPE_Q4_1, has_min = type != KITE_TYPE_Q5_0;
    const uint32_t offset = type == KITE_TYPE_Q5_0 ? 16u : 0u;
    const kt_vi one = kt_scale(kt_set1(1));
    kt_vf acc[KQ_TILE_B];
    const uint8_t *arow[KQ_TILE_B];
#pragma GCC unroll 8
    for (int b = 0; b < NB; b++) {
        arow[b] = act + (size_t)(b0 + b) * ag->row_bytes;
        acc[b] = kt_zerof();
    }
    for (int64_t blk = 0; blk < g->n_blocks; blk++) {
        const uint8_t *qb = grp + (size_t)blk * g->block_bytes, *sb = qb + g->q_bytes;
        if (blk + KQ_PREFETCH_B32 < g->n_blocks)
            for (size_t o = 0; o < g->block_bytes; o += 64) kt_prefetch(qb + KQ_PREFETCH_B32 * g->block_bytes + o);
        kt_vi w[8];
#pragma GCC unroll 4
        for (int p = 0; p < 4; p++) {
            const kt_vi v = kt_load(qb + (size_t)p * V);
            w[p] = kq_move(v, 0, 0, 4);
            w[p + 4] = kq_move(v, 4, 0, 4);
        }
        if (q5) {
            const kt_vi h = kt_load(qb + 4 * (size_t)V);
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++) w[j] = kt_or(w[j], kq_move(h, j, 4, 1));
        }
        const kt_vf d = kt_f16(sb), m = has_min ? kt_f16(sb + 2 * G) : kt_zerof();
#pragma GCC unroll 8
        for (int b = 0; b < NB; b++) {
            const int8_t *xq = (const int8_t *)arow[b] + blk * 32;
            int32_t xsum;
            float dx;
            memcpy(&xsum, arow[b] + ag->off_sum + (size_t)blk * 4, 4);
            memcpy(&dx, arow[b] + ag->off_d + (size_t)blk * 4, 4);
            /* wrapping like the lanes' own sums (a NaN row quantizes to sums of INT_MIN: no UB) */
            kt_vi isum = kt_set1((int32_t)(0u - offset * (uint32_t)xsum));
            isum = kt_sdot4(isum, w, xq, one);
            isum = kt_sdot4(isum, w + 4, xq + 16, one);
            const kt_vf vdx = kt_set1f(dx);
            acc[b] = kt_fmadd(kt_cvt(isum), kt_mulf(d, vdx), acc[b]);
            if (has_min) acc[b] = kt_fmadd(kt_set1f((float)xsum), kt_mulf(m, vdx), acc[b]);
        }
    }
#pragma GCC unroll 8
    for (int b = 0; b < NB; b++) kt_store_rows(y + (int64_t)(b0 + b) * y_stride, row0, r0, r1, acc[b]);
}

#endif

#if KQ_TILE_B > 4
#define KQ_WIDE_TILES(TILE, ARG)                                                                                        \
    case 5: TILE(grp, g, act, ag, b0, y, ys, row0, r0, r1, ARG, 5); break;                                             \
    case 6: TILE(grp, g, act, ag, b0, y, ys, row0, r0, r1, ARG, 6); break;                                             \
    case 7: TILE(grp, g, act, ag, b0, y, ys, row0, r0, r1, ARG, 7); break;                                             \
    case 8: TILE(grp, g, act, ag, b0, y, ys, row0, r0, r1, ARG, 8); break;
#else
#define KQ_WIDE_TILES(TILE, ARG)
#endif
/* A tile function for every tile size up to KQ_TILE_B (compile-time NB). */
#define KQ_RUNNER(name, TILE, ARG)                                                                                      \
    KT_TARGET static void name(const uint8_t *grp, const kite_pack_geom *g, const uint8_t *act, const kite_act_geom *ag,   \
                               int32_t b0, int nb, float *y, int64_t ys, int64_t row0, int64_t r0, int64_t r1) {         \
        switch (nb) {                                                                                                    \
        case 1: TILE(grp, g, act, ag, b0, y, ys, row0, r0, r1, ARG, 1); break;                                           \
        case 2: TILE(grp, g, act, ag, b0, y, ys, row0, r0, r1, ARG, 2); break;                                           \
        case 3: TILE(grp, g, act, ag, b0, y, ys, row0, r0, r1, ARG, 3); break;                                           \
        case 4: TILE(grp, g, act, ag, b0, y, ys, row0, r0, r1, ARG, 4); break;                                           \
        KQ_WIDE_TILES(TILE, ARG)                                                                                         \
        default: break; /* kq_matmul never asks for more than KQ_TILE_B */                                              \
        }                                                                                                                \
    }
KQ_RUNNER(kq_run_q2_k, kq_tile, KQ_Q2)
KQ_RUNNER(kq_run_q3_k, kq_tile, KQ_Q3)
KQ_RUNNER(kq_run_q4_k, kq_tile, KQ_Q4)
KQ_RUNNER(kq_run_q5_k, kq_tile, KQ_Q5)
KQ_RUNNER(kq_run_q6_k, kq_tile, KQ_Q6)
#ifdef KQ_B32
KQ_RUNNER(kq_run_q4_1, kq_b32_tile, KITE_TYPE_Q4_1)
KQ_RUNNER(kq_run_q5_0, kq_b32_tile, KITE_TYPE_Q5_0)
KQ_RUNNER(kq_run_q5_1, kq_b32_tile, KITE_TYPE_Q5_1)
#endif

/* kite_kernel_set.matmul for a matrix of a type above packed with G = KT_LANES. The n rows go in the fewest
 * tiles of at most KQ_TILE_B, as even as possible (a tile's size changes no bits). */
KT_TARGET static void kq_matmul(const kite_packed_matrix *w, const void *act, int32_t n, float *y, int64_t y_stride,
                                int64_t r0, int64_t r1) {
    if (r0 < 0) r0 = 0;
    if (r1 > w->rows) r1 = w->rows;
    if (r0 >= r1 || n <= 0) return;
    kite_pack_geom g;
    if (!kite_pack_geometry(w->type, w->rows, w->cols, KT_LANES, &g)) return;
    const kite_act_geom ag = kite_act_geometry(kite_type_family(w->type), w->cols);
    void (*run)(const uint8_t *, const kite_pack_geom *, const uint8_t *, const kite_act_geom *, int32_t, int, float *, int64_t,
                int64_t, int64_t, int64_t) = NULL;
    switch (w->type) {
    case KITE_TYPE_Q2_K: run = kq_run_q2_k; break;
    case KITE_TYPE_Q3_K: run = kq_run_q3_k; break;
    case KITE_TYPE_Q4_K: run = kq_run_q4_k; break;
    case KITE_TYPE_Q5_K: run = kq_run_q5_k; break;
    case KITE_TYPE_Q6_K: run = kq_run_q6_k; break;
#ifdef KQ_B32
    case KITE_TYPE_Q4_1: run = kq_run_q4_1; break;
    case KITE_TYPE_Q5_0: run = kq_run_q5_0; break;
    case KITE_TYPE_Q5_1: run = kq_run_q5_1; break;
#endif
    default: return;
    }
    const int32_t n_tiles = (n + KQ_TILE_B - 1) / KQ_TILE_B, tile_lo = n / n_tiles, n_bigger = n % n_tiles;
    for (int64_t gr = r0 / KT_LANES; gr * KT_LANES < r1; gr++) {
        const uint8_t *grp = (const uint8_t *)w->data + (size_t)gr * g.group_bytes;
        for (int32_t t = 0, b0 = 0; t < n_tiles; t++) {
            const int32_t nb = tile_lo + (t < n_bigger ? 1 : 0);
            run(grp, &g, act, &ag, b0, nb, y, y_stride, gr * KT_LANES, r0, r1);
            b0 += nb;
        }
    }
}
