/* The imatrix reader over bytes already in memory (for the fuzz target and for tests). */
#ifndef KITE_QUANT_IMATRIX_PARSE_H
#define KITE_QUANT_IMATRIX_PARSE_H

#include <stddef.h>

#include "quant/imatrix.h"

/* As kite_imatrix_read, over data[0..size); `what` names the input in messages (a path). */
kite_status kite_imatrix_parse(kite_imatrix *out, const void *data, size_t size, const char *what, kite_error *e);

/* Entry e's importance vector as llama-quantize feeds it to the quantizer: per matrix, sum_sq / count,
 * or 1 for every column of a matrix whose count is 0. out has n_cols * n_mat floats. */
void kite_imatrix_means(const kite_imatrix_entry *entry, float *out);

#endif
