/* kite's trellis-coded low-bit weight types KT2, KT2_5 and KT3 (2.0625, 2.5625 and 3.0625 bits per weight).
 *
 * ---- The code ------------------------------------------------------------------------------------------
 * A tail-biting bitshift trellis per row and 256-column block: the block's columns j = 0..255 own k_j bits
 * each of a circular bitstream (KT2: k = 2; KT3: k = 3; KT2_5: k = 2 for even j, 3 for odd j, so 640
 * bits), column j owning bits [pos_j, pos_j + k_j). Column j's trellis state is the L-bit window
 *     s_j = stream bits [pos_j, pos_j + L)   (modulo the stream length; bit pos_j is the state's bit 0)
 * (L = 12), so consecutive columns share L - k bits, and its int8 level is
 *     level(s) = sum of the four bytes of ((s * KT_MUL + KT_ADD) mod 2^32) & 0x3f3f3f3f, minus 126
 * (four 6-bit values: a near-Gaussian level in [-126, 126], std ~36.9). The weight is d * level(s_j) with
 * one fp16 scale d per row and block. Decoding a level is a shift, an AND, a multiply-add and an AND on a
 * 32-bit lane, and its product with int8 activations is one dpbusd / maddubs / sdot of the masked bytes
 * against the broadcast activation (the -126 comes out through the activation sums), so the trellis
 * feeds the same int8 dot products as kite's other types.
 *
 * ---- The file layout (what every kernel reads; the file is mapped, never repacked) -------------------
 * Rows are taken 16 at a time (a row group; matrices need rows % 16 == 0 and cols % 256 == 0). The
 * tensor is a sequence of tiles, tile (row group gr, block b) at byte ((gr * n_blocks) + b) * tile_bytes,
 * n_blocks = cols / 256. A tile, for lanes r = 0..15 (row 16 gr + r):
 *     for column group g = 0..31 (columns 8g .. 8g + 7, bits [8 K g, 8 K (g + 1)) of each lane's stream,
 *     K = mean bits per column):
 *         uint16 u[16]                 the group's first 16 stream bits of lane r
 *         KT2_5: uint8 rem[8]          its last 4 bits: lane r < 8 in the low nibble of rem[r], lane
 *                                      r >= 8 in the high nibble of rem[r - 8]
 *         KT3:   uint8 rem[16]         its last 8 bits
 *     fp16 d[16]                       the lanes' scales
 * tile_bytes = 1056 (KT2), 1312 (KT2_5), 1568 (KT3) for 4096 weights. The 32-bit word
 *     W_g = u_g | rem_g << 16 | u_{g+1} << (16 + rem bits)      (g + 1 taken modulo 32: tail-biting)
 * holds stream bits [8 K g, 8 K g + 32) and s_j = (W_g >> (pos_j - 8 K g)) & (2^L - 1) for the columns of
 * group g (the largest offset plus L is 26 bits for KT2, 29 for KT2_5; KT3's last column, at offset 21,
 * reads (W_g >> 16 | u_{g+1} << 8) >> 5 instead).
 *
 * ---- GGUF type ids ---------------------------------------------------------------------------------------
 * 0x4B540004 (KT2), 0x4B540005 (KT2_5), 0x4B540006 (KT3): "KT" in the high 16 bits, twice the bits per
 * weight below. ggml numbers its types densely from 0 (under 64 in 2026), so these cannot collide with
 * ggml's; llama.cpp refuses such a file (unknown type) rather than misreading it. */
#ifndef KITE_QUANT_TRELLIS_H
#define KITE_QUANT_TRELLIS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "quant/types.h"

#define KITE_TYPE_KT2 0x4B540004u
#define KITE_TYPE_KT2_5 0x4B540005u
#define KITE_TYPE_KT3 0x4B540006u

#define KT_BLOCK 256      /* columns per block */
#define KT_ROWS 16        /* rows per row group */
#define KT_GROUPS 32      /* column groups of 8 per block */
#define KT_MUL 89226354u  /* level hash (ik_llama.cpp's KT constants) */
#define KT_ADD 64248484u
#define KT_MASK 0x3f3f3f3fu
#define KT_LEVEL_OFFSET 126

typedef struct kite_kt_params {
    uint32_t type;
    const char *name;     /* "kt2", "kt2_5", "kt3" */
    int L;                /* state bits */
    int rem_bits;         /* bits of a column group past its first 16: 0, 4, 8 */
    int group_bits;       /* 16 + rem_bits */
    uint8_t k[8];         /* bits of column 8g + j */
    uint8_t pos[8];       /* offset of column 8g + j within its group's bits */
    size_t group_bytes;   /* bytes of one column group in a tile: 32, 40, 48 */
    size_t tile_bytes;    /* KT_GROUPS * group_bytes + 32 */
} kite_kt_params;

/* NULL for a type that is not a trellis type. */
const kite_kt_params *kite_kt_params_of(uint32_t type);
static inline bool kite_is_trellis(uint32_t type) {
    return type == KITE_TYPE_KT2 || type == KITE_TYPE_KT2_5 || type == KITE_TYPE_KT3;
}

/* The traits of a trellis type (block 256 elements, block_bytes = tile_bytes / 16; to_float and
 * from_float are NULL: a row is not contiguous, use the functions below). */
const kite_type_traits *kite_kt_traits(uint32_t type);

static inline int32_t kite_kt_level(uint32_t s) {
    uint32_t x = (s * KT_MUL + KT_ADD) & KT_MASK;
    return (int32_t)((x & 0xff) + ((x >> 8) & 0xff) + ((x >> 16) & 0xff) + (x >> 24)) - KT_LEVEL_OFFSET;
}

/* The state of column j (0..255) of lane r in a tile. */
uint32_t kite_kt_state(const kite_kt_params *p, const uint8_t *tile, int r, int j);

/* Quantizes rows [0, n_rows) x cols of src (row-major floats; n_rows % 16 == 0, cols % 256 == 0) into dst
 * (n_rows * cols / 256 * tile_bytes / 16 bytes). imatrix: NULL (plain squared error) or [cols] importance
 * per column (the squared error of column c is weighed by imatrix[c]). Returns bytes written, 0 on bad
 * arguments. Thread-safe (each call allocates its own scratch). */
size_t kite_kt_quantize(uint32_t type, const float *src, void *dst, int64_t n_rows, int64_t cols, const float *imatrix);

/* Row-major floats [n_rows][cols] of a trellis tensor (n_rows % 16 == 0). Returns false on bad arguments. */
bool kite_kt_dequantize(uint32_t type, const void *data, int64_t n_rows, int64_t cols, float *dst);

/* One row r of a trellis tensor as floats [cols]. */
void kite_kt_dequantize_row(uint32_t type, const void *data, int64_t cols, int64_t r, float *dst);

#endif
