/* Tensor element types and their traits. Type ids are GGML's, so GGUF files need no translation. */
#ifndef KITE_QUANT_TYPES_H
#define KITE_QUANT_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum kite_type {
    KITE_TYPE_F32 = 0,
    KITE_TYPE_F16 = 1,
    KITE_TYPE_Q4_0 = 2,
    KITE_TYPE_Q4_1 = 3,
    KITE_TYPE_Q5_0 = 6,
    KITE_TYPE_Q5_1 = 7,
    KITE_TYPE_Q8_0 = 8,
    KITE_TYPE_Q8_1 = 9,
    KITE_TYPE_Q2_K = 10,
    KITE_TYPE_Q3_K = 11,
    KITE_TYPE_Q4_K = 12,
    KITE_TYPE_Q5_K = 13,
    KITE_TYPE_Q6_K = 14,
    KITE_TYPE_Q8_K = 15,
    KITE_TYPE_BF16 = 30,
    KITE_TYPE_COUNT = 40, /* upper bound on ids, for tables */
} kite_type;

typedef struct kite_type_traits {
    const char *name;     /* as llama.cpp spells it: "f32", "q4_K", ... */
    int32_t block_size;   /* elements per block */
    size_t block_bytes;   /* bytes per block */
    /* n elements (a multiple of block_size) from blocks at src to floats at dst. */
    void (*to_float)(const void *src, float *dst, int64_t n);
    /* Quantizes n floats (a multiple of block_size) into blocks at dst (reference rounding, as ggml's
     * *_ref quantizers). NULL where kite has no quantizer for the type. */
    void (*from_float)(const float *src, void *dst, int64_t n);
} kite_type_traits;

/* NULL for an id kite does not know (including ids GGUF defines but kite does not run). */
const kite_type_traits *kite_type_get(uint32_t type);

/* Bytes of a row of n elements; 0 if n is not a multiple of the block size or the type is unknown. */
size_t kite_type_row_bytes(uint32_t type, int64_t n);

/* Scalar reference dot product of one stored row (n elements) with float x: the truth the SIMD
 * kernels are tested against. Accumulates in double per block and in float across blocks.
 * Exact order: the row is cut into chunks (one block; 32 elements for f32/f16/bf16, the last chunk
 * possibly shorter); each chunk is dequantized with to_float into w, then
 *     chunk_sum = sum over j in increasing order of (double)w[j] * (double)x[j]   (a double, from 0.0)
 *     total     = total + (float)chunk_sum                                       (a float, from 0.0f)
 * chunk by chunk in row order; returns total. 0 for an unknown type or n not a multiple of the block. */
float kite_ref_dot(uint32_t type, const void *row, const float *x, int64_t n);

/* Asymmetric levels x ~ scale * L - *the_min with L in [0, nmax] (ggml's make_qkx2_quants, and with
 * use_mad false and importance weights its make_qkx3_quants): the range's scale, then nstep + 1 trial
 * scales (rmin + rdelta * k + nmax over the range), each refit by weighted least squares, keeping the
 * least sum of weights[i] * |err| (use_mad) or * err^2. Laux: [n] scratch. Returns the scale. */
float kite_fit_affine_levels(int n, int nmax, const float *x, const float *weights, uint8_t *L, float *the_min, uint8_t *Laux,
                             float rmin, float rdelta, int nstep, bool use_mad);

#endif
