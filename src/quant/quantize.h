/* Row quantizers with importance weights, bit-compatible with ggml's quantize_q* (ggml_quantize_chunk).
 *
 * Without an importance vector every type rounds as ggml's *_ref quantizers (the from_float of
 * quant/types.c), exactly as ggml_quantize_chunk does. With one (imatrix: the mean squared activation
 * of each of the n_per_row input columns), the block search weighs each element's squared error by
 * imatrix[col] * sqrt(sigma2 + x^2) (Q4_0/Q4_1/Q5_0/Q5_1/Q2_K/Q3_K/Q4_K/Q5_K) or by imatrix[col]
 * alone (Q6_K), as ggml's *_impl functions do. Q8_0, F16, BF16 and F32 ignore it. */
#ifndef KITE_QUANT_QUANTIZE_H
#define KITE_QUANT_QUANTIZE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* True for the types kite_quantize_rows writes. */
bool kite_quantize_type_supported(uint32_t type);

/* Quantizes n_rows rows of n_per_row floats (n_per_row a multiple of the type's block size) from src
 * into dst (n_rows * kite_type_row_bytes(type, n_per_row) bytes). imatrix: NULL or [n_per_row].
 * Returns the bytes written, 0 for an unsupported type or a row that does not fit the blocks. */
size_t kite_quantize_rows(uint32_t type, const float *src, void *dst, int64_t n_rows, int64_t n_per_row,
                          const float *imatrix);

#endif
