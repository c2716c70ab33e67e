/* Importance matrices: per input column of each weight matrix, the sum of squared activations seen
 * over calibration text (llama.cpp's imatrix). Quantizers weight each column's rounding error by it.
 *
 * Files in either of llama.cpp's formats are read: the GGUF form that current llama-imatrix writes
 * (general.type "imatrix"; per matrix the tensors "<name>.in_sum2" [n_cols x n_mat] and
 * "<name>.counts" [n_mat]; imatrix.datasets, imatrix.chunk_count, imatrix.chunk_size) and the legacy
 * binary .dat form (entries of name, ncall, values; then the chunk count and dataset name). */
#ifndef KITE_QUANT_IMATRIX_H
#define KITE_QUANT_IMATRIX_H

#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"

typedef struct kite_imatrix_entry {
    char *name;      /* the weight tensor's GGUF name, e.g. "blk.0.attn_q.weight" (owned) */
    int64_t n_cols;  /* input columns: ne[0] of the weight */
    int64_t n_mat;   /* matrices: experts for a 3-D MoE weight, 1 for a dense one */
    float *sum_sq;   /* [n_mat][n_cols] sums of squared activations (owned) */
    float *counts;   /* [n_mat] number of activation rows summed into each matrix (owned) */
} kite_imatrix_entry;

typedef struct kite_imatrix {
    kite_imatrix_entry *entries;  /* [n_entries] (owned) */
    int64_t n_entries;
    char **datasets;              /* [n_datasets] names of the calibration files (owned) */
    int32_t n_datasets;
    int32_t chunk_count;          /* chunks of calibration text processed */
    int32_t chunk_size;           /* tokens per chunk */
} kite_imatrix;

/* Reads a file in either format (detected by its magic) into *out (zeroed first). Every size and
 * count is validated; a bad file is a clear error naming the byte offset or tensor. */
kite_status kite_imatrix_read(kite_imatrix *out, const char *path, kite_error *e);

/* Writes m as GGUF (legacy_dat false, llama.cpp's current default) or as the legacy .dat form,
 * under a temporary name renamed into place when complete. */
kite_status kite_imatrix_write(const kite_imatrix *m, const char *path, bool legacy_dat, kite_error *e);

/* The entry for a weight tensor, or NULL. */
const kite_imatrix_entry *kite_imatrix_find(const kite_imatrix *m, const char *tensor_name);

/* Frees everything m owns and zeroes it; a zeroed m is a no-op. */
void kite_imatrix_clear(kite_imatrix *m);

#endif
