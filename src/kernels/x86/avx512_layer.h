/* The vector layer of kernels/trellis_simd.h and kernels/kquant_simd.h on 16 AVX-512 lanes (VNNI dot), shared
 * by avx512.c (the K-quants) and avx512_vbmi.c (the trellis product, which adds its VBMI operations). Both
 * files are compiled with the AVX-512 flags (CMakeLists.txt). */
#ifndef KITE_KERNELS_X86_AVX512_LAYER_H
#define KITE_KERNELS_X86_AVX512_LAYER_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define KT_LANES 16
typedef __m512i kt_vi;
typedef __m512 kt_vf;
static inline int32_t kt_load_i32(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}
#define kt_load(p) _mm512_loadu_si512((const void *)(p))
#define kt_and(a, b) _mm512_and_si512(a, b)
#define kt_or(a, b) _mm512_or_si512(a, b)
#define kt_xor(a, b) _mm512_xor_si512(a, b)
#define kt_add(a, b) _mm512_add_epi32(a, b)
#define kt_sub(a, b) _mm512_sub_epi32(a, b)
#define kt_set1(x) _mm512_set1_epi32(x)
#define kt_zero() _mm512_setzero_si512()
#define kt_dot(acc, u, q) _mm512_dpbusd_epi32(acc, u, _mm512_set1_epi32(kt_load_i32(q)))
#define kt_f16(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(p)))
#define kt_cvt(v) _mm512_cvtepi32_ps(v)
#define kt_fmadd(a, b, c) _mm512_fmadd_ps(a, b, c)
#define kt_mulf(a, b) _mm512_mul_ps(a, b)
#define kt_set1f(x) _mm512_set1_ps(x)
#define kt_zerof() _mm512_setzero_ps()
#define kt_storef(p, v) _mm512_storeu_ps(p, v)
#define kt_prefetch(p) _mm_prefetch((const char *)(p), _MM_HINT_T0)

#endif
