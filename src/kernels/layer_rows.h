/* What the templates over the vector layer (kernels/trellis_simd.h, kernels/kquant_simd.h) share, defined once
 * per translation unit on that unit's layer (KT_LANES, kt_vf, kt_storef): storing a vector of KT_LANES rows'
 * results where they fall in the row range [r0, r1). */
#ifndef KITE_KERNELS_LAYER_ROWS_H
#define KITE_KERNELS_LAYER_ROWS_H

#include <stdint.h>

#ifndef KT_TARGET
#define KT_TARGET
#endif

static inline __attribute__((always_inline)) KT_TARGET void kt_store_rows(float *dst, int64_t row0, int64_t r0, int64_t r1,
                                                                         kt_vf v) {
    if (row0 >= r0 && row0 + KT_LANES <= r1) {
        kt_storef(dst + row0, v);
        return;
    }
    float tmp[KT_LANES];
    kt_storef(tmp, v);
    for (int i = 0; i < KT_LANES; i++)
        if (row0 + i >= r0 && row0 + i < r1) dst[row0 + i] = tmp[i];
}

#endif
