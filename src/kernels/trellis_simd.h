/* The trellis types' product (quant/trellis.h), written once for every SIMD level: kt_matmul(...)
 * computes exactly kite_ref_matmul_trellis (kernels/ref/ref_trellis.c), bit for bit. Included by each
 * level's file, which first defines its vector layer:
 *
 *   KT_LANES                 32-bit lanes per vector (16, 8, 4; divides 16, the tile's rows)
 *   kt_vi, kt_vf             integer and float vectors of KT_LANES lanes
 *   KT_BIAS                  what kt_tab_load adds to every level: 64 where the dot takes unsigned weight
 *                            bytes (x86: dpbusd, maddubs; levels + 64 are in [1, 127]), 0 where it is signed
 *   kt_tab, kt_tab_load()    the two 64-entry tables in registers: .q = kite_kt_q + KT_BIAS, .p = kite_kt_p
 *   kt_load(p)               KT_LANES uint32 at p
 *   kt_shrd(a, b, sh)        per lane (a >> sh) | (b << (32 - sh)), 0 < sh < 32
 *   kt_field(w, c0, c1, c2, c3)  byte i of every lane = bits [c_i, c_i + 8) of the lane (c_i <= 24); only
 *                            the low 6 bits of each byte are used
 *   kt_lut(t, idx)           per byte t[idx & 63] (t: .q or .p)
 *   kt_xor(a, b), kt_add, kt_sub, kt_set1(x), kt_zero()
 *   kt_dot(acc, u, q)        acc + per lane sum over its 4 bytes u_i * q[i], q: 4 int8 activations
 *   kt_f16(p)                KT_LANES IEEE halves at p as floats
 *   kt_cvt(v), kt_fmadd(a, b, c), kt_mulf, kt_set1f(x), kt_zerof(), kt_storef(p, v)
 *   kt_prefetch(p)
 *
 * Per row group (16 rows, KT_LANES at a time) and up to 4 activation rows: for every block and column group
 * of 4 (c = 0..63), the lanes' 32 stream bits from the group's start (one word, or two and a funnel
 * shift), the low 6-bit halves of the four columns' states (kt_field), their high halves (kt_field again
 * for KT2_5; for KT2 and KT3 a funnel shift of this and the next group's low bytes), two lookups and an
 * XOR make the level bytes of KT_LANES rows x 4 columns, reused for every activation row (one dot each
 * against 4 consecutive activations). On AVX-512 VBMI that is 1 vpmultishiftqb + 2 vpermb on the shuffle
 * port per 64 weights (KT2, KT3). */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "kernels/layer_rows.h"
#include "quant/trellis.h"

#ifndef KT_TARGET
#define KT_TARGET
#endif
#define KT_INLINE static inline __attribute__((always_inline)) KT_TARGET
#define KT_TILE_B 4  /* activation rows per pass over the weights */
#define KT_PREFETCH_TILES 2
/* Independent integer accumulators per activation row: with one activation row, a single chain of dots
 * waits on the dot's latency (5 cycles on AVX-512 VNNI) instead of the decode's throughput. Their sum is
 * exact (int32), so the result does not depend on the split. */
#define KT_CHAINS(NB) ((NB) == 1 ? 4 : (NB) == 2 ? 2 : 1)

/* Type parameters as compile-time functions of T = 0 (KT2), 1 (KT2_5), 2 (KT3): trellis.c's table. */
KT_INLINE int kt_gbits(const int T) { return 8 + 2 * T; }
KT_INLINE int kt_words(const int T) { return 16 + 4 * T; }
KT_INLINE int kt_pos(const int T, const int i) { return T == 0 ? 2 * i : T == 1 ? 5 * (i / 2) + 2 * (i & 1) : 3 * i; }

/* Lanes lane0.. 's 32 stream bits from column group c's start. */
KT_INLINE kt_vi kt_stream(const uint8_t *tile, int c, int lane0, const int T) {
    const int b = kt_gbits(T) * (c % KT_GROUPS), m = b >> 5, sh = b & 31;
    const kt_vi lo = kt_load(tile + ((size_t)m * KT_ROWS + (size_t)lane0) * 4);
    return sh ? kt_shrd(lo, kt_load(tile + ((size_t)((m + 1) % kt_words(T)) * KT_ROWS + (size_t)lane0) * 4), sh) : lo;
}

/* The low index bytes (bits [pos_i, pos_i + 8) of the stream bits w, for the 4 columns of a group). */
KT_INLINE kt_vi kt_low(kt_vi w, const int T) { return kt_field(w, kt_pos(T, 0), kt_pos(T, 1), kt_pos(T, 2), kt_pos(T, 3)); }

/* Where a column's high index half (bits 6..11 of its state) starts at another column's own bits (KT2:
 * 3 columns on, KT3: 2), it is that column's low index byte: one funnel shift of this group's and the
 * next group's low bytes (by 24 or 16 bits) instead of a second field extraction. 0: KT2_5, no such column. */
KT_INLINE int kt_carry(const int T) { return T == 0 ? 24 : T == 2 ? 16 : 0; }

/* The level bytes (+ KT_BIAS) of the 4 columns of a group, from its low index bytes a, the next group's
 * a_next (KT2, KT3) or its stream bits w (KT2_5). */
KT_INLINE kt_vi kt_levels(const kt_tab *t, kt_vi a, kt_vi a_next, kt_vi w, const int T) {
    const kt_vi hi = kt_carry(T) ? kt_shrd(a, a_next, kt_carry(T))
                                 : kt_field(w, kt_pos(T, 0) + KT_HALF, kt_pos(T, 1) + KT_HALF, kt_pos(T, 2) + KT_HALF,
                                            kt_pos(T, 3) + KT_HALF);
    return kt_lut(t->q, kt_xor(a, kt_lut(t->p, hi)));
}

/* One row group of 16 rows x NB activation rows from b0. */
KT_INLINE void kt_tile(const uint8_t *tiles, int64_t n_blocks, const uint8_t *act, const kite_act_geom *ag, int32_t b0,
                       float *y, int64_t y_stride, int64_t row0, int64_t r0, int64_t r1, const int T, const int NB) {
    const size_t tile_bytes = (size_t)kt_words(T) * 64 + 32;
    enum { CH = KT_ROWS / KT_LANES };
    const kt_tab tab = kt_tab_load();
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
        /* past the last block too: the next row group's tiles follow (a prefetch never faults) */
        for (size_t o = 0; o < tile_bytes; o += 64) kt_prefetch(tile + KT_PREFETCH_TILES * tile_bytes + o);
        int32_t xsum[KT_TILE_B];
        float dx[KT_TILE_B];
        const int8_t *qblk[KT_TILE_B];
#pragma GCC unroll 4
        for (int b = 0; b < NB; b++) {
            int16_t s32[8];
            memcpy(s32, arow[b] + ag->off_sum32 + (size_t)blk * 16, 16);
            xsum[b] = 0;
            for (int s = 0; s < 8; s++) xsum[b] += s32[s];
            memcpy(&dx[b], arow[b] + ag->off_d + (size_t)blk * 4, 4);
            qblk[b] = (const int8_t *)arow[b] + blk * KT_BLOCK;
        }
#pragma GCC unroll 4
        for (int h = 0; h < CH; h++) {
            const int lane0 = h * KT_LANES;
            kt_vi isum[KT_TILE_B][KT_CHAINS(NB)];
#pragma GCC unroll 4
            for (int b = 0; b < NB; b++)
                for (int c = 0; c < KT_CHAINS(NB); c++) isum[b][c] = kt_zero();
            /* fully unrolled: every word index and funnel-shift count is a constant (a runtime count costs a
             * broadcast on the shuffle port, which the lookups need) */
            kt_vi a = kt_carry(T) ? kt_low(kt_stream(tile, 0, lane0, T), T) : kt_zero(); /* carried: KT2, KT3 */
#pragma GCC unroll 64
            for (int c = 0; c < KT_GROUPS; c++) {
                kt_vi u;
                if (kt_carry(T)) {
                    const kt_vi a_next = kt_low(kt_stream(tile, c + 1, lane0, T), T);
                    u = kt_levels(&tab, a, a_next, a, T);
                    a = a_next;
                } else {
                    const kt_vi w = kt_stream(tile, c, lane0, T);
                    u = kt_levels(&tab, kt_low(w, T), kt_zero(), w, T); /* a_next unused without a carry */
                }
#pragma GCC unroll 4
                for (int b = 0; b < NB; b++) isum[b][c % KT_CHAINS(NB)] = kt_dot(isum[b][c % KT_CHAINS(NB)], u, qblk[b] + 4 * c);
            }
            const kt_vf d = kt_f16(tile + (size_t)kt_words(T) * 64 + 2 * lane0);
#pragma GCC unroll 4
            for (int b = 0; b < NB; b++) {
                kt_vi is = KT_BIAS ? kt_sub(isum[b][0], kt_set1(KT_BIAS * xsum[b])) : isum[b][0];
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
    KT_TARGET static void name(const uint8_t *tiles, int64_t nbk, const uint8_t *act, const kite_act_geom *ag, int32_t b0, \
                               int nb, float *y, int64_t ys, int64_t row0, int64_t r0, int64_t r1) {                    \
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

/* kite_kernel_set.matmul for a trellis matrix (w->data: the file's tiles; a rotated variant's activations
 * come rotated from quantize_act, so its product is the plain type's). */
KT_TARGET static void kt_matmul(const kite_packed_matrix *w, const void *act, int32_t n, float *y, int64_t y_stride,
                                int64_t r0, int64_t r1) {
    const kite_kt_params *p = kite_kt_params_of(w->type);
    if (!p) return;
    if (r0 < 0) r0 = 0;
    if (r1 > w->rows) r1 = w->rows;
    if (r0 >= r1 || n <= 0) return;
    const kite_act_geom ag = kite_act_geometry(KITE_FAMILY_K, w->cols);
    const int64_t nbk = w->cols / KT_BLOCK;
    void (*run)(const uint8_t *, int64_t, const uint8_t *, const kite_act_geom *, int32_t, int, float *, int64_t, int64_t,
                int64_t, int64_t) = p->code == 0 ? kt_run_kt2 : p->code == 1 ? kt_run_kt2_5 : kt_run_kt3;
    for (int64_t gr = r0 / KT_ROWS; gr * KT_ROWS < r1; gr++) {
        const uint8_t *tiles = (const uint8_t *)w->data + (size_t)gr * (size_t)nbk * p->tile_bytes;
        for (int32_t b0 = 0; b0 < n; b0 += KT_TILE_B)
            run(tiles, nbk, act, &ag, b0, n - b0 < KT_TILE_B ? n - b0 : KT_TILE_B, y, y_stride, gr * KT_ROWS, r0, r1);
    }
}
