/* The trellis types' product on AVX-512 VBMI/VBMI2 (Ice Lake, Sapphire Rapids, Zen 4 and later): the
 * vector layer of kernels/trellis_simd.h on 16 lanes (x86/avx512_layer.h plus the operations below). vpmultishiftqb takes the 6-bit halves of 64 states
 * at once, vpermb looks both tables up, vpdpbusd multiplies. Compiled with the AVX-512 flags plus
 * -mavx512vbmi -mavx512vbmi2 (CMakeLists.txt); avx512.c calls it only where cpuid shows both, and falls
 * back to the AVX2 product (same bits) on AVX-512 CPUs without them (Skylake-X, Cascade Lake). */
#include <immintrin.h>

#include "kernels/kernels_internal.h"
#include "kernels/x86/avx512_layer.h" /* the shared 16-lane operations; the VBMI ones below */

#define KT_BIAS 64
typedef struct kt_tab {
    __m512i q, p;
} kt_tab;
static inline kt_tab kt_tab_load(void) {
    int8_t q[64];
    for (int i = 0; i < 64; i++) q[i] = (int8_t)(kite_kt_q[i] + KT_BIAS);
    return (kt_tab){_mm512_loadu_si512(q), _mm512_loadu_si512(kite_kt_p)};
}
#define kt_shrd(a, b, sh) _mm512_shrdv_epi32(a, b, _mm512_set1_epi32(sh))
/* Every qword holds two lanes: the low one's offsets c_i, the high one's 32 + c_i. */
#define kt_field(w, c0, c1, c2, c3)                                                                                     \
    _mm512_multishift_epi64_epi8(                                                                                        \
        _mm512_set1_epi64((long long)((uint64_t)(c0) | (uint64_t)(c1) << 8 | (uint64_t)(c2) << 16 | (uint64_t)(c3) << 24 | \
                                      (uint64_t)(32 + (c0)) << 32 | (uint64_t)(32 + (c1)) << 40 |                          \
                                      (uint64_t)(32 + (c2)) << 48 | (uint64_t)(32 + (c3)) << 56)),                         \
        w)
#define kt_lut(t, idx) _mm512_permutexvar_epi8(idx, t)
#include "kernels/trellis_simd.h"

void kite_avx512_vbmi_trellis_matmul(const kite_packed_matrix *w, const void *act, int32_t n, float *y, int64_t y_stride,
                                     int64_t r0, int64_t r1) {
    kt_matmul(w, act, n, y, y_stride, r0, r1);
}
