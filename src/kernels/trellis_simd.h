/* The trellis types' product (quant/trellis.h), written once for every SIMD level: kt_matmul(...)
 * computes exactly kite_ref_matmul_trellis (kernels/ref/ref_trellis.c), bit for bit. Included by each
 * level's file, which first defines its vector layer:
 *
 *   KT_LANES                 32-bit lanes per vector (16, 8, 4; divides 16, the tile's rows)
 *   kt_vi, kt_vf             integer and float vectors of KT_LANES lanes
 *   kt_u16(p), kt_u8(p)      KT_LANES uint16 / uint8 at p, zero-extended to lanes
 *   kt_nib(p, lane0)         the KT2_5 remainder nibbles of lanes lane0 .. lane0 + KT_LANES - 1 (tile layout:
 *                            lane r < 8 in the low nibble of p[r], r >= 8 in the high nibble of p[r - 8])
 *   kt_srli(v, n), kt_slli(v, n), kt_and, kt_or, kt_add, kt_sub, kt_mullo, kt_set1(x), kt_zero()
 *   kt_dot2(acc, x0, x1, q)  acc + per lane sum over the 4 bytes of x0 of byte * q[0] and the same for x1 and
 *                            the next column's activation (the bytes are <= 63: no maddubs pair saturates).
 *                            q points at int8 activations KT_QSTRIDE bytes apart (1 by default)
 *   KT_QSTRIDE 4 (optional)  the layer wants each activation byte four times (one 32-bit broadcast from memory
 *                            feeds the dot instead of a byte shuffle): the header copies each block's 256
 *                            activations that way with kt_rep4(dst, src) (64 bytes to 256) before using them
 *   kt_f16(p)                KT_LANES IEEE halves at p as floats
 *   kt_cvt(v), kt_fmadd(a, b, c), kt_mulf, kt_set1f(x), kt_zerof(), kt_storef(p, v)
 *   kt_prefetch(p)
 *
 * Per row group (16 rows, KT_LANES at a time) and up to 4 activation rows: for every block, per column
 * group the lanes' 32-bit stream words (two 16-bit loads, a remainder), then per column a shift, an AND,
 * a multiply-add and an AND make the level bytes of KT_LANES rows at once, reused for every activation
 * row (one dot instruction each). */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "quant/trellis.h"

#define KT_INLINE static inline __attribute__((always_inline))
#define KT_TILE_B 4  /* activation rows per pass over the weights */
#define KT_PREFETCH_TILES 2
#ifndef KT_QSTRIDE
#define KT_QSTRIDE 1
#endif
/* Independent integer accumulators per activation row: with one activation row, a single chain of dots
 * waits on the dot's latency (5 cycles on AVX-512 VNNI) instead of the decode's throughput. Their sum is
 * exact (int32), so the result does not depend on the split. */
#define KT_CHAINS(NB) ((NB) == 1 ? 4 : (NB) == 2 ? 2 : 1)

/* Type parameters as compile-time functions of T = 0 (KT2), 1 (KT2_5), 2 (KT3): trellis.c's table. */
KT_INLINE int kt_L(const int T) { (void)T; return 12; }
KT_INLINE int kt_gbits(const int T) { return 16 + 4 * T; }
KT_INLINE size_t kt_gbytes(const int T) { return 32 + 8 * (size_t)T; }
KT_INLINE int kt_pos(const int T, const int j) { return T == 0 ? 2 * j : T == 1 ? 5 * (j / 2) + 2 * (j & 1) : 3 * j; }

/* The lanes' stream bits [8 K g, 8 K g + 32) in w and, for KT3's last column, bits [8 K g + 16, + 48) in w2. */
KT_INLINE kt_vi kt_word(const uint8_t *tile, int g, int lane0, const int T, kt_vi *w2) {
    const uint8_t *grp = tile + (size_t)g * kt_gbytes(T);
    const uint8_t *nxt = tile + (size_t)((g + 1) & (KT_GROUPS - 1)) * kt_gbytes(T);
    const kt_vi un = kt_u16(nxt + 2 * lane0);
    kt_vi w = kt_or(kt_u16(grp + 2 * lane0), kt_slli(un, kt_gbits(T)));
    if (T == 1) w = kt_or(w, kt_slli(kt_nib(grp + 32, lane0), 16));
    if (T == 2) {
        w = kt_or(w, kt_slli(kt_u8(grp + 32 + lane0), 16));
        *w2 = kt_or(kt_srli(w, 16), kt_slli(un, 8));
    } else {
        *w2 = w;
    }
    return w;
}

/* Column j's level bytes; columns whose window passes bit 32 of w read w2 (16 bits further on). */
KT_INLINE kt_vi kt_bytes(kt_vi w, kt_vi w2, const int T, const int j) {
    const bool far = kt_pos(T, j) + kt_L(T) > 32;
    const int off = far ? kt_pos(T, j) - 16 : kt_pos(T, j);
    kt_vi s = kt_srli(far ? w2 : w, off);
    if (off + kt_L(T) < 32) s = kt_and(s, kt_set1((int32_t)((1u << kt_L(T)) - 1)));
    return kt_and(kt_add(kt_mullo(s, kt_set1((int32_t)KT_MUL)), kt_set1((int32_t)KT_ADD)), kt_set1((int32_t)KT_MASK));
}

KT_INLINE void kt_store_rows(float *dst, int64_t row0, int64_t r0, int64_t r1, kt_vf v) {
    if (row0 >= r0 && row0 + KT_LANES <= r1) {
        kt_storef(dst + row0, v);
        return;
    }
    float tmp[KT_LANES];
    kt_storef(tmp, v);
    for (int i = 0; i < KT_LANES; i++)
        if (row0 + i >= r0 && row0 + i < r1) dst[row0 + i] = tmp[i];
}

/* One row group of 16 rows x NB activation rows from b0. */
KT_INLINE void kt_tile(const uint8_t *tiles, int64_t n_blocks, const uint8_t *act, const kite_act_geom *ag, int32_t b0,
                       float *y, int64_t y_stride, int64_t row0, int64_t r0, int64_t r1, const int T, const int NB) {
    const size_t tile_bytes = KT_GROUPS * kt_gbytes(T) + 32;
    enum { CH = KT_ROWS / KT_LANES };
    kt_vf acc[CH][KT_TILE_B];
    const uint8_t *arow[KT_TILE_B];
#pragma GCC unroll 4
    for (int b = 0; b < NB; b++) {
        arow[b] = act + (size_t)(b0 + b) * ag->row_bytes;
#pragma GCC unroll 4
        for (int h = 0; h < CH; h++) acc[h][b] = kt_zerof();
    }
    for (int64_t blk = 0; blk < n_blocks; blk++) {
        const uint8_t *tile = tiles + (size_t)blk * tile_bytes;
        if (blk + KT_PREFETCH_TILES < n_blocks)
            for (size_t o = 0; o < tile_bytes; o += 64) kt_prefetch(tile + KT_PREFETCH_TILES * tile_bytes + o);
        int32_t xsum[KT_TILE_B];
        float dx[KT_TILE_B];
        const int8_t *qblk[KT_TILE_B];
#if KT_QSTRIDE == 4
        _Alignas(64) int8_t qrep[KT_TILE_B][4 * KT_BLOCK];
#endif
#pragma GCC unroll 4
        for (int b = 0; b < NB; b++) {
            int16_t s32[8];
            memcpy(s32, arow[b] + ag->off_sum32 + (size_t)blk * 16, 16);
            xsum[b] = 0;
            for (int s = 0; s < 8; s++) xsum[b] += s32[s];
            memcpy(&dx[b], arow[b] + ag->off_d + (size_t)blk * 4, 4);
            qblk[b] = (const int8_t *)arow[b] + blk * KT_BLOCK;
#if KT_QSTRIDE == 4
            for (int o = 0; o < KT_BLOCK; o += 64) kt_rep4(qrep[b] + 4 * o, qblk[b] + o);
            qblk[b] = qrep[b];
#endif
        }
#pragma GCC unroll 4
        for (int h = 0; h < CH; h++) {
            const int lane0 = h * KT_LANES;
            kt_vi isum[KT_TILE_B][KT_CHAINS(NB)];
#pragma GCC unroll 4
            for (int b = 0; b < NB; b++)
                for (int c = 0; c < KT_CHAINS(NB); c++) isum[b][c] = kt_zero();
            for (int g = 0; g < KT_GROUPS; g++) {
                kt_vi w2;
                const kt_vi w = kt_word(tile, g, lane0, T, &w2);
#pragma GCC unroll 4
                for (int j = 0; j < 8; j += 2) {
                    const kt_vi x0 = kt_bytes(w, w2, T, j), x1 = kt_bytes(w, w2, T, j + 1);
                    const int c = (j / 2) % KT_CHAINS(NB);
#pragma GCC unroll 4
                    for (int b = 0; b < NB; b++)
                        isum[b][c] = kt_dot2(isum[b][c], x0, x1, qblk[b] + KT_QSTRIDE * (8 * g + j));
                }
            }
            const kt_vf d = kt_f16(tile + KT_GROUPS * kt_gbytes(T) + 2 * lane0);
#pragma GCC unroll 4
            for (int b = 0; b < NB; b++) {
                kt_vi is = kt_sub(isum[b][0], kt_set1(KT_LEVEL_OFFSET * xsum[b]));
                for (int c = 1; c < KT_CHAINS(NB); c++) is = kt_add(is, isum[b][c]);
                acc[h][b] = kt_fmadd(kt_cvt(is), kt_mulf(d, kt_set1f(dx[b])), acc[h][b]);
            }
        }
    }
#pragma GCC unroll 4
    for (int b = 0; b < NB; b++)
#pragma GCC unroll 4
        for (int h = 0; h < CH; h++) kt_store_rows(y + (int64_t)(b0 + b) * y_stride, row0 + h * KT_LANES, r0, r1, acc[h][b]);
}

#define KT_RUNNER(name, T)                                                                                              \
    static void name(const uint8_t *tiles, int64_t nbk, const uint8_t *act, const kite_act_geom *ag, int32_t b0, int nb, \
                     float *y, int64_t ys, int64_t row0, int64_t r0, int64_t r1) {                                      \
        switch (nb) {                                                                                                    \
        case 1: kt_tile(tiles, nbk, act, ag, b0, y, ys, row0, r0, r1, T, 1); break;                                      \
        case 2: kt_tile(tiles, nbk, act, ag, b0, y, ys, row0, r0, r1, T, 2); break;                                      \
        case 3: kt_tile(tiles, nbk, act, ag, b0, y, ys, row0, r0, r1, T, 3); break;                                      \
        default: kt_tile(tiles, nbk, act, ag, b0, y, ys, row0, r0, r1, T, 4); break;                                     \
        }                                                                                                                \
    }
KT_RUNNER(kt_run_kt2, 0)
KT_RUNNER(kt_run_kt2_5, 1)
KT_RUNNER(kt_run_kt3, 2)

/* kite_kernel_set.matmul for a trellis matrix (w->data: the file's tiles). */
static void kt_matmul(const kite_packed_matrix *w, const void *act, int32_t n, float *y, int64_t y_stride, int64_t r0,
                      int64_t r1) {
    const kite_kt_params *p = kite_kt_params_of(w->type);
    if (!p) return;
    if (r0 < 0) r0 = 0;
    if (r1 > w->rows) r1 = w->rows;
    if (r0 >= r1 || n <= 0) return;
    const kite_act_geom ag = kite_act_geometry(KITE_FAMILY_K, w->cols);
    const int64_t nbk = w->cols / KT_BLOCK;
    void (*run)(const uint8_t *, int64_t, const uint8_t *, const kite_act_geom *, int32_t, int, float *, int64_t, int64_t,
                int64_t, int64_t) = w->type == KITE_TYPE_KT2 ? kt_run_kt2 : w->type == KITE_TYPE_KT2_5 ? kt_run_kt2_5 : kt_run_kt3;
    for (int64_t gr = r0 / KT_ROWS; gr * KT_ROWS < r1; gr++) {
        const uint8_t *tiles = (const uint8_t *)w->data + (size_t)gr * (size_t)nbk * p->tile_bytes;
        for (int32_t b0 = 0; b0 < n; b0 += KT_TILE_B)
            run(tiles, nbk, act, &ag, b0, n - b0 < KT_TILE_B ? n - b0 : KT_TILE_B, y, y_stride, gr * KT_ROWS, r0, r1);
    }
}
