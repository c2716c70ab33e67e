/* The 2- and 3-bit K-quants' product (q2_K, q3_K), written once for every SIMD level: kq_matmul(...)
 * computes exactly the reference's K-quant product (kernels/ref/ref.c matmul_k, the math in
 * kernels_internal.h), bit for bit, on the interleaved layout with G = KT_LANES rows per group (the q2_K
 * and q3_K entries of kernels_internal.h's layout list). Included by each level's file, which first defines
 * the vector layer of kernels/trellis_simd.h (KT_LANES, kt_vi, kt_vf, kt_load, kt_add, kt_sub, kt_set1,
 * kt_zero, kt_dot, kt_f16, kt_cvt, kt_fmadd, kt_mulf, kt_set1f, kt_zerof, kt_storef, kt_prefetch) and:
 *
 *   kt_and(a, b), kt_or(a, b)
 *   kt_srli(a, n), kt_slli(a, n)   per 32-bit lane shifts by a constant 0 < n < 32
 *   kt_mul(a, b)                   per lane a * b, low 32 bits
 *   kt_u8(p), kt_i8(p)             KT_LANES bytes at p, zero- or sign-extended to the lanes
 *   kt_u8x2(p)                     2 KT_LANES bytes at p, zero-extended to 16-bit halves: lane i holds bytes
 *                                  2i (low half) and 2i + 1 (high half)
 *   kt_dot16(acc, a, p)            acc + per lane a.lo * p[0] + a.hi * p[1] (16-bit halves, p: 2 int16)
 *   KQ_TILE_B (optional)           activation rows per pass over the weights (default 4)
 *
 * kt_dot multiplies unsigned weight bytes (here 0..3 or 0..7) by 4 signed activations, which every
 * level's dot (vpdpbusd, maddubs, sdot) does exactly for these ranges.
 *
 * Per row group and up to KQ_TILE_B activation rows, for each 16-column sub-block s: one vector of 2-bit
 * fields gives the 4 column groups' weight bytes ((w >> 2j) & 3, plus for q3_K the high bit of each
 * element moved to bit 2, so u = v + 4 in 0..7), four dots make the sub-block's integer sum per row, and
 * sc_s (the lanes' scales, widened from one byte per row) weighs it into A. q2_K adds m_s * sum16_s into
 * B, a 16-bit pair dot per two sub-blocks (their scale bytes lie as pairs per row); q3_K starts each
 * sub-block's sum at -4 sum16_s, which turns u back into v. */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#ifndef KT_TARGET
#define KT_TARGET
#endif
#define KQ_INLINE static inline __attribute__((always_inline)) KT_TARGET
#ifndef KQ_TILE_B
#define KQ_TILE_B 4 /* activation rows per pass over the weights */
#endif
#define KQ_PREFETCH_BLOCKS 2 /* blocks ahead (whole blocks: q2_K 21 lines at G = 16) */

/* Bits 2j..2j+1 of every byte (32-bit shifts: what crosses from the next byte is masked off). */
KQ_INLINE kt_vi kq_bits2(kt_vi w, const int j) { return kt_and(j ? kt_srli(w, 2 * j) : w, kt_set1(0x03030303)); }
/* Bit k of every byte, moved to bit 2. */
KQ_INLINE kt_vi kq_bit_to_2(kt_vi h, const int k) {
    const kt_vi s = k < 2 ? kt_slli(h, 2 - k) : k > 2 ? kt_srli(h, k - 2) : h;
    return kt_and(s, kt_set1(0x04040404));
}

KQ_INLINE void kq_store_rows(float *dst, int64_t row0, int64_t r0, int64_t r1, kt_vf v) {
    if (row0 >= r0 && row0 + KT_LANES <= r1) {
        kt_storef(dst + row0, v);
        return;
    }
    float tmp[KT_LANES];
    kt_storef(tmp, v);
    for (int i = 0; i < KT_LANES; i++)
        if (row0 + i >= r0 && row0 + i < r1) dst[row0 + i] = tmp[i];
}

/* One row group (KT_LANES rows from row0) x NB activation rows from b0. Q3: q3_K, else q2_K. */
KQ_INLINE void kq_tile(const uint8_t *grp, const kite_pack_geom *g, const uint8_t *act, const kite_act_geom *ag, int32_t b0,
                       float *y, int64_t y_stride, int64_t row0, int64_t r0, int64_t r1, const bool Q3, const int NB) {
    enum { G = KT_LANES, V = 4 * KT_LANES };
    kt_vf acc[KQ_TILE_B];
    const uint8_t *arow[KQ_TILE_B];
#pragma GCC unroll 8
    for (int b = 0; b < NB; b++) {
        arow[b] = act + (size_t)(b0 + b) * ag->row_bytes;
        acc[b] = kt_zerof();
    }
    for (int64_t blk = 0; blk < g->n_blocks; blk++) {
        const uint8_t *qb = grp + (size_t)blk * g->block_bytes, *sb = qb + g->q_bytes;
        if (blk + KQ_PREFETCH_BLOCKS < g->n_blocks)
            for (size_t o = 0; o < g->block_bytes; o += 64) kt_prefetch(qb + KQ_PREFETCH_BLOCKS * g->block_bytes + o);
        kt_vi A[KQ_TILE_B], B[KQ_TILE_B];
        int16_t sum16[KQ_TILE_B][16];
#pragma GCC unroll 8
        for (int b = 0; b < NB; b++) {
            A[b] = kt_zero();
            B[b] = kt_zero();
            if (Q3) memcpy(sum16[b], arow[b] + ag->off_sum + (size_t)blk * 32, 32);
        }
#pragma GCC unroll 8
        for (int t = 0; t < 8; t++) { /* sub-blocks 2t, 2t + 1 */
            const kt_vi hv = Q3 ? kt_load(qb + (size_t)(3 * t + 2) * V) : kt_zero();
            /* q2_K: the pair's scale bytes (sc | m << 4) as 16-bit halves of each lane */
            const kt_vi pair = Q3 ? kt_zero() : kt_u8x2(sb + (size_t)t * 2 * G);
            if (!Q3) {
                const kt_vi m = kt_and(kt_srli(pair, 4), kt_set1(0x000F000F));
#pragma GCC unroll 8
                for (int b = 0; b < NB; b++) B[b] = kt_dot16(B[b], m, arow[b] + ag->off_sum + (size_t)blk * 32 + 4 * t);
            }
#pragma GCC unroll 2
            for (int k = 0; k < 2; k++) {
                const int s = 2 * t + k;
                const kt_vi lo = kt_load(qb + (size_t)(Q3 ? 3 * t + k : s) * V);
                kt_vi u[4];
#pragma GCC unroll 4
                for (int j = 0; j < 4; j++) u[j] = Q3 ? kt_or(kq_bits2(lo, j), kq_bit_to_2(hv, 4 * k + j)) : kq_bits2(lo, j);
                const kt_vi sc = Q3 ? kt_i8(sb + (size_t)s * G) : kt_and(k ? kt_srli(pair, 16) : pair, kt_set1(15));
#pragma GCC unroll 8
                for (int b = 0; b < NB; b++) {
                    const int8_t *xq = (const int8_t *)arow[b] + blk * 256 + 16 * s;
                    kt_vi i0 = Q3 ? kt_set1(-4 * (int32_t)sum16[b][s]) : kt_zero(), i1 = kt_zero();
                    i0 = kt_dot(i0, u[0], xq + 0);
                    i1 = kt_dot(i1, u[1], xq + 4);
                    i0 = kt_dot(i0, u[2], xq + 8);
                    i1 = kt_dot(i1, u[3], xq + 12);
                    A[b] = kt_add(A[b], kt_mul(kt_add(i0, i1), sc));
                }
            }
        }
        const kt_vf d = kt_f16(sb + 16 * G), dmin = Q3 ? kt_zerof() : kt_f16(sb + 18 * G);
#pragma GCC unroll 8
        for (int b = 0; b < NB; b++) {
            float dx;
            memcpy(&dx, arow[b] + ag->off_d + (size_t)blk * 4, 4);
            const kt_vf vdx = kt_set1f(dx);
            acc[b] = kt_fmadd(kt_cvt(A[b]), kt_mulf(d, vdx), acc[b]);
            /* -(float)B: the negation is exact either side of the conversion */
            if (!Q3) acc[b] = kt_fmadd(kt_cvt(kt_sub(kt_zero(), B[b])), kt_mulf(dmin, vdx), acc[b]);
        }
    }
#pragma GCC unroll 8
    for (int b = 0; b < NB; b++) kq_store_rows(y + (int64_t)(b0 + b) * y_stride, row0, r0, r1, acc[b]);
}

#if KQ_TILE_B > 4
#define KQ_WIDE_TILES(Q3)                                                                                              \
    case 5: kq_tile(grp, g, act, ag, b0, y, ys, row0, r0, r1, Q3, 5); break;                                           \
    case 6: kq_tile(grp, g, act, ag, b0, y, ys, row0, r0, r1, Q3, 6); break;                                           \
    case 7: kq_tile(grp, g, act, ag, b0, y, ys, row0, r0, r1, Q3, 7); break;                                           \
    case 8: kq_tile(grp, g, act, ag, b0, y, ys, row0, r0, r1, Q3, 8); break;
#else
#define KQ_WIDE_TILES(Q3)
#endif
#define KQ_RUNNER(name, Q3)                                                                                            \
    KT_TARGET static void name(const uint8_t *grp, const kite_pack_geom *g, const uint8_t *act, const kite_act_geom *ag, \
                               int32_t b0, int nb, float *y, int64_t ys, int64_t row0, int64_t r0, int64_t r1) {       \
        switch (nb) {                                                                                                  \
        case 1: kq_tile(grp, g, act, ag, b0, y, ys, row0, r0, r1, Q3, 1); break;                                       \
        case 2: kq_tile(grp, g, act, ag, b0, y, ys, row0, r0, r1, Q3, 2); break;                                       \
        case 3: kq_tile(grp, g, act, ag, b0, y, ys, row0, r0, r1, Q3, 3); break;                                       \
        case 4: kq_tile(grp, g, act, ag, b0, y, ys, row0, r0, r1, Q3, 4); break;                                       \
        KQ_WIDE_TILES(Q3)                                                                                              \
        default: break;                                                                                                \
        }                                                                                                              \
    }
KQ_RUNNER(kq_run_q2_k, false)
KQ_RUNNER(kq_run_q3_k, true)

/* kite_kernel_set.matmul for a q2_K or q3_K matrix packed with G = KT_LANES. The n rows go in the fewest
 * tiles of at most KQ_TILE_B, as even as possible (a tile's size changes no bits). */
KT_TARGET static void kq_matmul(const kite_packed_matrix *w, const void *act, int32_t n, float *y, int64_t y_stride,
                                int64_t r0, int64_t r1) {
    if (r0 < 0) r0 = 0;
    if (r1 > w->rows) r1 = w->rows;
    if (r0 >= r1 || n <= 0) return;
    kite_pack_geom g;
    if (!kite_pack_geometry(w->type, w->rows, w->cols, KT_LANES, &g)) return;
    const kite_act_geom ag = kite_act_geometry(KITE_FAMILY_K, w->cols);
    void (*run)(const uint8_t *, const kite_pack_geom *, const uint8_t *, const kite_act_geom *, int32_t, int, float *, int64_t,
                int64_t, int64_t, int64_t) = w->type == KITE_TYPE_Q3_K ? kq_run_q3_k : kq_run_q2_k;
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
