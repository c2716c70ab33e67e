/* The reference product for the trellis types (quant/trellis.h), the definition the SIMD levels match
 * bit for bit: per weight row r, activation row b (256-element activation blocks, kernels_internal.h)
 * and block,
 *     isum = sum_j level(s_j) q_j                     (exact int32: |level| <= 126, |q| <= 127)
 *     acc  = fma((float)isum, d * d_x, acc)           blocks in order, acc from 0
 * The weights are read where they lie (the file's tiles; no packing). */
#include <math.h>
#include <string.h>

#include "base/fp16.h"
#include "kernels/kernels_internal.h"
#include "quant/trellis.h"

#if defined(__x86_64__) && ((defined(__GNUC__) && !defined(__clang__)) || (defined(__clang__) && __clang_major__ >= 14))
#define REF_CLONES __attribute__((target_clones("fma", "default")))
#else
#define REF_CLONES
#endif

/* The clones are static (clang emits the resolver of an external target_clones function only where it is
 * called); kite_ref_matmul_trellis below is the plain entry point. */
REF_CLONES static void matmul_trellis(const kite_packed_matrix *w, const void *act, int32_t n, float *y, int64_t y_stride,
                                      int64_t r0, int64_t r1) {
    const kite_kt_params *p = kite_kt_params_of(w->type);
    if (!p) return;
    if (r0 < 0) r0 = 0;
    if (r1 > w->rows) r1 = w->rows;
    const kite_act_geom g = kite_act_geometry(KITE_FAMILY_K, w->cols);
    const int64_t nb = w->cols / KT_BLOCK;
    int8_t lvl[KT_BLOCK];
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *tiles = (const uint8_t *)w->data + (size_t)(r / KT_ROWS) * (size_t)nb * p->tile_bytes;
        const int lane = (int)(r % KT_ROWS);
        for (int32_t b = 0; b < n; b++) {
            const uint8_t *arow = (const uint8_t *)act + (size_t)b * g.row_bytes;
            float acc = 0.0f;
            for (int64_t blk = 0; blk < nb; blk++) {
                const uint8_t *tile = tiles + (size_t)blk * p->tile_bytes;
                for (int j = 0; j < KT_BLOCK; j++) lvl[j] = (int8_t)kite_kt_level(kite_kt_state(p, tile, lane, j));
                const int8_t *q = (const int8_t *)arow + blk * KT_BLOCK;
                int32_t isum = 0;
                for (int j = 0; j < KT_BLOCK; j++) isum += lvl[j] * q[j];
                uint16_t h;
                memcpy(&h, tile + (size_t)p->n_words * 64 + 2 * lane, 2);
                float dx;
                memcpy(&dx, arow + g.off_d + (size_t)blk * 4, 4);
                const float scale = kite_fp16_to_f32(h) * dx;
                acc = fmaf((float)isum, scale, acc);
            }
            y[(int64_t)b * y_stride + r] = acc;
        }
    }
}

void kite_ref_matmul_trellis(const kite_packed_matrix *w, const void *act, int32_t n, float *y, int64_t y_stride, int64_t r0,
                             int64_t r1) {
    matmul_trellis(w, act, n, y, y_stride, r0, r1);
}
