/* kite's trellis-coded low-bit weight types KT2, KT2_5 and KT3 (2.0625, 2.5625 and 3.0625 bits per weight),
 * and their rotated variants KT2H, KT2_5H and KT3H.
 *
 * ---- The code ------------------------------------------------------------------------------------------
 * A tail-biting bitshift trellis per row and 256-column block: the block's columns j = 0..255 own k_j bits
 * each of a circular bitstream (KT2: k = 2; KT3: k = 3; KT2_5: k = 2 for even j, 3 for odd j, so 640
 * bits), column j owning bits [pos_j, pos_j + k_j). Column j's trellis state is the L-bit window
 *     s_j = stream bits [pos_j, pos_j + L)   (modulo the stream length; bit pos_j is the state's bit 0)
 * (L = 12), so consecutive columns share L - k bits, and its int8 level comes from two 64-entry tables:
 *     level(s) = KT_Q[(s & 63) ^ KT_P[s >> 6]],   KT_P[h] = 11 h mod 64
 * KT_Q holds 64 Student-t(8) quantiles (in [-63, 63]); KT_P scatters the high half of the state over the
 * quantiles. Because 11 is odd, the 2^k successors of a state (which differ in the top k bits of s)
 * always land in 2^k different quarters (k = 2) or eighths (k = 3) of the quantile table, as in a
 * trellis-coded quantizer's set partition, while the carries of the multiplication keep the map
 * nonlinear (a linear map, e.g. KT_P[h] = h, doubles the error). The weight is d * level(s_j), one fp16
 * scale d per row and block. Decoding 64 weights on AVX-512 VBMI is a vpmultishiftqb or two (the 6-bit
 * halves of 64 windows), two vpermb and an XOR; the level bytes then go into the same int8 dot products as
 * kite's other types (dpbusd / maddubs / sdot against 4 consecutive activations). This replaced a
 * multiplicative hash (ik_llama.cpp's KT constants: 5-6 operations per 16 weights) at the same
 * rate-distortion (bench/trellis_rd).
 *
 * ---- Rotated variants (KT2H, KT2_5H, KT3H) -----------------------------------------------------------
 * The same code applied to each 256-column block of a row after a randomized Hadamard rotation,
 *     w' = H S w / 16     (H: the 256 x 256 Sylvester Hadamard matrix of +-1, S: fixed random signs)
 * which spreads a block's outliers over all its columns, so heavy-tailed blocks look Gaussian to the
 * code. The product needs the activations in the same basis, x' = H S x / 16 (H S / 16 is orthogonal, so
 * w . x = w' . x'): the rotated types' activation quantizer rotates each 256-column block before the
 * usual int8 quantization, and the matrix kernels are the plain types' own. A per-column importance
 * (imatrix) does not survive the rotation (every rotated column mixes all 256), so the quantizer
 * (kite_kt_choose) encodes a sample of each matrix both ways and keeps the variant with the lower
 * importance-weighted error in the original basis.
 *
 * ---- The file layout (what every kernel reads; the file is mapped, never repacked) -------------------
 * Rows are taken 16 at a time (a row group; matrices need rows % 16 == 0 and cols % 256 == 0). The
 * tensor is a sequence of tiles, tile (row group gr, block b) at byte ((gr * n_blocks) + b) * tile_bytes,
 * n_blocks = cols / 256. A tile, for lanes r = 0..15 (row 16 gr + r):
 *     uint32 word[m][16]   m = 0 .. n_words - 1: stream bits [32 m, 32 m + 32) of lane r at word[m][r]
 *                          (bit i of the word is stream bit 32 m + i); n_words = 16, 20, 24
 *     fp16 d[16]           the lanes' scales
 * tile_bytes = 1056 (KT2), 1312 (KT2_5), 1568 (KT3) for 4096 weights. Columns come in groups of 4
 * (c = 0..63, columns 4c .. 4c + 3) of group_bits = 8, 10, 12 bits; group c starts at stream bit
 * group_bits * c and column 4c + i at group_bits * c + pos_i, pos = {0,2,4,6}, {0,2,5,7}, {0,3,6,9}.
 * The 32 stream bits from a group's start (two words and a funnel shift) hold all four columns' windows
 * (the last ends at bit 9 + 12 = 21).
 *
 * ---- GGUF type ids ---------------------------------------------------------------------------------------
 * 0x4B540034 (KT2), 0x4B540035 (KT2_5), 0x4B540036 (KT3): "KT" in the high 16 bits, the code's version (3)
 * and twice the bits per weight below; the rotated variants have 'H' (0x48) in the third byte:
 * 0x4B544834..6. ggml numbers its types densely from 0 (under 64 in 2026), so these cannot collide with
 * ggml's; llama.cpp refuses such a file (unknown type) rather than misreading it. Earlier codes are
 * refused by name (kite_kt_retired_code), so a file of an old code is never misread with these tables:
 * 0x4B540004..6 the first (a multiplicative hash; 2026-12-02 .. 12-07), 0x4B540024..6 the second
 * (random KT_P; 2026-12-07). */
#ifndef KITE_QUANT_TRELLIS_H
#define KITE_QUANT_TRELLIS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "quant/types.h"

#define KITE_TYPE_KT2 0x4B540034u
#define KITE_TYPE_KT2_5 0x4B540035u
#define KITE_TYPE_KT3 0x4B540036u
#define KITE_TYPE_KT2H 0x4B544834u
#define KITE_TYPE_KT2_5H 0x4B544835u
#define KITE_TYPE_KT3H 0x4B544836u

/* The version of an earlier trellis code of kite whose ids these are (1 or 2; io/gguf.c refuses such a
 * tensor by name), 0 for any other type. */
static inline int kite_kt_retired_code(uint32_t type) {
    return type >= 0x4B540004u && type <= 0x4B540006u ? 1 : type >= 0x4B540024u && type <= 0x4B540026u ? 2 : 0;
}

#define KT_BLOCK 256      /* columns per block */
#define KT_ROWS 16        /* rows per row group */
#define KT_GROUPS 64      /* column groups of 4 per block */
#define KT_L 12           /* state bits */
#define KT_HALF 6         /* bits of each table index */

/* The level tables (trellis.c): KT_Q[i] = 63 t8((i + 0.5) / 64) / t8(63.5 / 64) rounded (t8: the Student-t
 * quantile with 8 degrees of freedom), KT_P[i] = 11 i mod 64 (kept as a table: the kernels load it). */
extern const int8_t kite_kt_q[64];
extern const uint8_t kite_kt_p[64];

typedef struct kite_kt_params {
    uint32_t type;
    const char *name;     /* "kt2", "kt2_5", "kt3", "kt2h", "kt2_5h", "kt3h" */
    int code;             /* 0: 2 bits per column, 1: 2 and 3 alternating, 2: 3 bits (the kernels' T) */
    bool rotated;         /* the H variant: blocks in the rotated basis, activations rotated to match */
    int group_bits;       /* stream bits of a column group of 4: 8, 10, 12 */
    uint8_t k[4];         /* bits of column 4c + i */
    uint8_t pos[4];       /* offset of column 4c + i within its group's bits */
    int n_words;          /* 32-bit words of a lane's stream: 16, 20, 24 */
    size_t tile_bytes;    /* 64 n_words + 32 */
} kite_kt_params;

/* NULL for a type that is not a trellis type. */
const kite_kt_params *kite_kt_params_of(uint32_t type);
static inline bool kite_is_trellis(uint32_t type) {
    return type == KITE_TYPE_KT2 || type == KITE_TYPE_KT2_5 || type == KITE_TYPE_KT3 || type == KITE_TYPE_KT2H ||
           type == KITE_TYPE_KT2_5H || type == KITE_TYPE_KT3H;
}
static inline bool kite_kt_is_rotated(uint32_t type) {
    return type == KITE_TYPE_KT2H || type == KITE_TYPE_KT2_5H || type == KITE_TYPE_KT3H;
}
/* The rotated variant of a plain trellis type and back (other types: returned as they are). */
uint32_t kite_kt_rotated_type(uint32_t type);
uint32_t kite_kt_plain_type(uint32_t type);

/* y = H S x / 16 over one 256-column block (the rotated basis), and its inverse x = S H y / 16. Only
 * additions, subtractions, sign flips and the exact scaling by 1/16, in a fixed order: every caller (the
 * activation quantizer of each SIMD level, the encoder, the decoder) gets the same bits. x and y may alias. */
void kite_kt_rotate(const float *x, float *y);
void kite_kt_unrotate(const float *y, float *x);
/* The signs S: bit j % 64 of word j / 64 set means column j is negated. */
extern const uint64_t kite_kt_signs[4];

/* The traits of a trellis type (block 256 elements, block_bytes = tile_bytes / 16; to_float and
 * from_float are NULL: a row is not contiguous, use the functions below). */
const kite_type_traits *kite_kt_traits(uint32_t type);

static inline int32_t kite_kt_level(uint32_t s) { return kite_kt_q[(s & 63) ^ kite_kt_p[(s >> KT_HALF) & 63]]; }

/* The state of column j (0..255) of lane r in a tile. */
uint32_t kite_kt_state(const kite_kt_params *p, const uint8_t *tile, int r, int j);

/* Quantizes rows [0, n_rows) x cols of src (row-major floats; n_rows % 16 == 0, cols % 256 == 0) into dst
 * (n_rows * cols / 256 * tile_bytes / 16 bytes). imatrix: NULL (plain squared error) or [cols] importance
 * per column (the squared error of column c is weighed by imatrix[c]). Returns bytes written, 0 on bad
 * arguments. Thread-safe (each call allocates its own scratch). */
size_t kite_kt_quantize(uint32_t type, const float *src, void *dst, int64_t n_rows, int64_t cols, const float *imatrix);

/* Plain or rotated for one matrix: encodes a sample of up to 4 row groups of src (evenly spread) as type and
 * as its rotated variant (or back), dequantizes both, and returns the variant with the lower squared error
 * in the original basis, each column weighed by imatrix (NULL: 1). The errors (per weight) go to
 * err_plain / err_rotated when not NULL. Returns 0 on bad arguments (as kite_kt_quantize) or no memory. */
uint32_t kite_kt_choose(uint32_t type, const float *src, int64_t n_rows, int64_t cols, const float *imatrix,
                        double *err_plain, double *err_rotated);

/* Row-major floats [n_rows][cols] of a trellis tensor (n_rows % 16 == 0). Returns false on bad arguments. */
bool kite_kt_dequantize(uint32_t type, const void *data, int64_t n_rows, int64_t cols, float *dst);

/* One row r of a trellis tensor as floats [cols]. */
void kite_kt_dequantize_row(uint32_t type, const void *data, int64_t cols, int64_t r, float *dst);

#endif
