/* GGML block layouts, byte for byte as stored in GGUF files (little-endian). Halves are IEEE fp16 bit
 * patterns (see base/fp16.h). A row of n elements of a block type is n / KITE_QK_* consecutive blocks.
 *
 * Dequantized value of element j (see quant/types.c for the exact float expression order):
 *   q4_0: d * (q - 8)            q4_1: d * q + m          q5_0: d * (q - 16)      q5_1: d * q + m
 *   q8_0: d * q                  q8_1: d * q (s = d * sum q, for dot kernels)
 *   q2_K: d * sc * q - dmin * m  (16 sub-blocks of 16; 4-bit sc and m; 2-bit q)
 *   q3_K: d * (sc - 32) * (q - 4) (16 sub-blocks of 16; 6-bit sc; 3-bit q = 2 low bits + hmask bit)
 *   q4_K: d * sc * q - dmin * m  (8 sub-blocks of 32; 6-bit sc and m packed in 12 bytes; 4-bit q)
 *   q5_K: as q4_K with a fifth bit of q in qh
 *   q6_K: d * sc * (q - 32)      (16 sub-blocks of 16; int8 sc; 6-bit q = 4 low bits in ql + 2 in qh)
 *   q8_K: d * q                  (float d; bsums = sums of q over groups of 16) */
#ifndef KITE_QUANT_BLOCKS_H
#define KITE_QUANT_BLOCKS_H

#include <assert.h>
#include <stdint.h>

#define KITE_QK4_0 32
#define KITE_QK4_1 32
#define KITE_QK5_0 32
#define KITE_QK5_1 32
#define KITE_QK8_0 32
#define KITE_QK8_1 32
#define KITE_QK_K 256
#define KITE_K_SCALE_SIZE 12

typedef struct kite_block_q4_0 {
    uint16_t d;                  /* fp16 scale */
    uint8_t qs[KITE_QK4_0 / 2];  /* element j in the low nibble of qs[j], element j + 16 in the high nibble */
} kite_block_q4_0;

typedef struct kite_block_q4_1 {
    uint16_t d;                  /* fp16 scale */
    uint16_t m;                  /* fp16 offset (the block minimum) */
    uint8_t qs[KITE_QK4_1 / 2];  /* nibbles as q4_0 */
} kite_block_q4_1;

typedef struct kite_block_q5_0 {
    uint16_t d;                  /* fp16 scale */
    uint8_t qh[4];               /* little-endian u32: bit j is the fifth bit of element j */
    uint8_t qs[KITE_QK5_0 / 2];  /* low 4 bits, nibbles as q4_0 */
} kite_block_q5_0;

typedef struct kite_block_q5_1 {
    uint16_t d;                  /* fp16 scale */
    uint16_t m;                  /* fp16 offset */
    uint8_t qh[4];               /* as q5_0 */
    uint8_t qs[KITE_QK5_1 / 2];
} kite_block_q5_1;

typedef struct kite_block_q8_0 {
    uint16_t d;                  /* fp16 scale */
    int8_t qs[KITE_QK8_0];
} kite_block_q8_0;

typedef struct kite_block_q8_1 {
    uint16_t d;                  /* fp16 scale */
    uint16_t s;                  /* fp16 d * sum(qs) */
    int8_t qs[KITE_QK8_1];
} kite_block_q8_1;

typedef struct kite_block_q2_K {
    uint8_t scales[KITE_QK_K / 16]; /* sub-block j: scale in the low nibble, min in the high nibble */
    uint8_t qs[KITE_QK_K / 4];      /* 2-bit quants: per 128 elements, 32 bytes; element 32*s + l in bits 2s of byte l */
    uint16_t d;                     /* fp16 super-block scale of the scales */
    uint16_t dmin;                  /* fp16 super-block scale of the mins */
} kite_block_q2_K;

typedef struct kite_block_q3_K {
    uint8_t hmask[KITE_QK_K / 8];   /* high bit of each quant: element 32*b + l in bit b of hmask[l] */
    uint8_t qs[KITE_QK_K / 4];      /* low 2 bits, laid out as q2_K */
    uint8_t scales[12];             /* 16 6-bit scales: low nibbles in bytes 0..7, high 2 bits in bytes 8..11 */
    uint16_t d;                     /* fp16 super-block scale */
} kite_block_q3_K;

typedef struct kite_block_q4_K {
    uint16_t d;                     /* fp16 super-block scale of the scales */
    uint16_t dmin;                  /* fp16 super-block scale of the mins */
    uint8_t scales[KITE_K_SCALE_SIZE]; /* 8 6-bit scales and 8 6-bit mins (see get_scale_min_k4 in types.c) */
    uint8_t qs[KITE_QK_K / 2];      /* per 64 elements, 32 bytes: low nibbles first 32, high nibbles next 32 */
} kite_block_q4_K;

typedef struct kite_block_q5_K {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[KITE_K_SCALE_SIZE]; /* as q4_K */
    uint8_t qh[KITE_QK_K / 8];      /* fifth bit: element 32*b + l in bit b of qh[l] */
    uint8_t qs[KITE_QK_K / 2];      /* low 4 bits, as q4_K */
} kite_block_q5_K;

typedef struct kite_block_q6_K {
    uint8_t ql[KITE_QK_K / 2];      /* low 4 bits */
    uint8_t qh[KITE_QK_K / 4];      /* high 2 bits */
    int8_t scales[KITE_QK_K / 16];  /* 8-bit sub-block scales */
    uint16_t d;                     /* fp16 super-block scale */
} kite_block_q6_K;

typedef struct kite_block_q8_K {
    float d;                        /* f32 scale */
    int8_t qs[KITE_QK_K];
    int16_t bsums[KITE_QK_K / 16];  /* sum of qs over each group of 16 */
} kite_block_q8_K;

static_assert(sizeof(kite_block_q4_0) == 18, "q4_0 block size");
static_assert(sizeof(kite_block_q4_1) == 20, "q4_1 block size");
static_assert(sizeof(kite_block_q5_0) == 22, "q5_0 block size");
static_assert(sizeof(kite_block_q5_1) == 24, "q5_1 block size");
static_assert(sizeof(kite_block_q8_0) == 34, "q8_0 block size");
static_assert(sizeof(kite_block_q8_1) == 36, "q8_1 block size");
static_assert(sizeof(kite_block_q2_K) == 84, "q2_K block size");
static_assert(sizeof(kite_block_q3_K) == 110, "q3_K block size");
static_assert(sizeof(kite_block_q4_K) == 144, "q4_K block size");
static_assert(sizeof(kite_block_q5_K) == 176, "q5_K block size");
static_assert(sizeof(kite_block_q6_K) == 210, "q6_K block size");
static_assert(sizeof(kite_block_q8_K) == 292, "q8_K block size");

#endif
