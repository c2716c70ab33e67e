/* The file-level quantizer's internals that tests reach: the per-tensor type recipe and a fault hook. */
#ifndef KITE_QUANT_QUANTIZE_MODEL_H
#define KITE_QUANT_QUANTIZE_MODEL_H

#include <stdbool.h>
#include <stdint.h>

/* A file type (llama.cpp's llama_ftype): its name, id and the type most tensors get. */
typedef struct kite_ftype_info {
    const char *name;      /* "Q4_K_M" */
    int32_t id;            /* llama_ftype, written as general.file_type */
    uint32_t base_type;    /* kite_type */
} kite_ftype_info;

/* NULL for an unknown name (case-insensitive; "Q4_K" means Q4_K_M, "Q3_K" Q3_K_M, "Q5_K" Q5_K_M). */
const kite_ftype_info *kite_ftype_find(const char *name);

/* Test hook: when set, it is called with the temporary file's path after the whole file was written and
 * before the rename; returning false makes that write count as failed (as a full disk would). */
extern bool (*kite_quantize_write_hook)(const char *tmp_path);

#endif
