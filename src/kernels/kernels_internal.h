/* Shared internals of the kernel sets: the quantized-activation formats (one format for every level, so
 * the SIMD quantizers are tested byte for byte against the reference), the row-interleaved packed
 * weight layout, and the integer decoding of weight blocks used by the reference and the packers.
 *
 * ---- The math (every level computes exactly this; see tests/kernels) --------------------------------
 * Activations: each row of x is cut into blocks (32 elements for the 32-block weight types, 256 for the
 * K-quants). Block amax = max |x_j|, d_x = amax / 127 (float), id = 1 / d_x (0 when d_x = 0), and
 * q_j = round-to-nearest-even(clamp(x_j * id, -127, 127)) as int8; integer sums of q are kept per block
 * (32-blocks) or per 16 and per 32 elements (K-quants). Every level computes these bytes identically.
 *
 * 32-block weights (w_j = d * v_j, or d * v_j + m for q4_1/q5_1; v_j the integer value of the block):
 *     isum = sum_j v_j q_j                                  (exact int32)
 *     acc  = fma((float)isum, d * d_x, acc)
 *     acc  = fma((float)xsum, m * d_x, acc)                 (q4_1, q5_1 only; xsum = sum_j q_j)
 * K-quants (w_j = d * sc_s * v_j - dmin * m_s, s the sub-block of j):
 *     A = sum_s sc_s sum_{j in s} v_j q_j,  B = sum_s m_s sum_{j in s} q_j      (exact int32)
 *     acc = fma((float)A, d * d_x, acc);  acc = fma(-(float)B, dmin * d_x, acc)  (B term when m exists)
 * Floats (f32, f16, bf16; activations stay f32): acc = fma(w_k, x_k, acc) for k = 0, 1, ... in order.
 * acc starts at 0 for each (weight row, activation row) and blocks are taken in order, so the result
 * is a fixed sequence of float operations: any level, any batch size n, slot b or row range gives the
 * same bits (the integer parts are exact whatever order a SIMD kernel sums them in). The only error
 * against the exact product sum_j w_j x_j is the activation rounding (|x_j - d_x q_j| <= d_x / 2) plus
 * float rounding of the per-block products and the accumulation. */
#ifndef KITE_KERNELS_INTERNAL_H
#define KITE_KERNELS_INTERNAL_H

#include <stdbool.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/kernels.h"
#include "quant/blocks.h"
#include "quant/types.h"
#include "quant/trellis.h"

#define KITE_ACT_ALIGN 64

static inline size_t kite_round_up(size_t v, size_t to) { return (v + to - 1) / to * to; }

/* ---- Weight type families ------------------------------------------------------------------------ */

typedef enum kite_family {
    KITE_FAMILY_NONE = 0,  /* not a matrix type kite runs */
    KITE_FAMILY_FLOAT = 1, /* f32, f16, bf16: float activations */
    KITE_FAMILY_B32 = 2,   /* q4_0, q4_1, q5_0, q5_1, q8_0: 32-element activation blocks */
    KITE_FAMILY_K = 3,     /* q2_K .. q6_K: 256-element activation blocks */
} kite_family;

static inline kite_family kite_type_family(uint32_t type) {
    switch (type) {
    case KITE_TYPE_F32: case KITE_TYPE_F16: case KITE_TYPE_BF16: return KITE_FAMILY_FLOAT;
    case KITE_TYPE_Q4_0: case KITE_TYPE_Q4_1: case KITE_TYPE_Q5_0: case KITE_TYPE_Q5_1: case KITE_TYPE_Q8_0:
        return KITE_FAMILY_B32;
    case KITE_TYPE_Q2_K: case KITE_TYPE_Q3_K: case KITE_TYPE_Q4_K: case KITE_TYPE_Q5_K: case KITE_TYPE_Q6_K:
    case KITE_TYPE_KT2: case KITE_TYPE_KT2_5: case KITE_TYPE_KT3: /* trellis: 256-element activation blocks */
    case KITE_TYPE_KT2H: case KITE_TYPE_KT2_5H: case KITE_TYPE_KT3H: /* the same, each block rotated (kite_kt_rotate) */
        return KITE_FAMILY_K;
    default: return KITE_FAMILY_NONE;
    }
}

/* ---- Activation formats -------------------------------------------------------------------------- *
 * 32-block rows (nb = cols / 32), each row KITE_ACT_ALIGN-aligned within the buffer:
 *     int8_t qs[nb * 32]; float d[nb]; int32_t sum[nb];
 * K rows (nsb = cols / 256):
 *     int8_t qs[nsb * 256]; float d[nsb]; int16_t sum16[nsb * 16]; int16_t sum32[nsb * 8]; */

typedef struct kite_act_geom {
    int64_t n_blocks;   /* blocks per row */
    int32_t block;      /* elements per block: 32 or 256 */
    size_t off_d;       /* byte offset of the float scales within a row */
    size_t off_sum;     /* byte offset of sum (b32) or sum16 (K) */
    size_t off_sum32;   /* K only: byte offset of sum32 */
    size_t row_bytes;   /* bytes per row, a multiple of KITE_ACT_ALIGN */
} kite_act_geom;

static inline kite_act_geom kite_act_geometry(kite_family f, int64_t cols) {
    kite_act_geom g = {0};
    if (f == KITE_FAMILY_B32) {
        g.block = 32;
        g.n_blocks = cols / 32;
        g.off_d = (size_t)g.n_blocks * 32;
        g.off_sum = g.off_d + (size_t)g.n_blocks * 4;
        g.row_bytes = kite_round_up(g.off_sum + (size_t)g.n_blocks * 4, KITE_ACT_ALIGN);
    } else if (f == KITE_FAMILY_K) {
        g.block = 256;
        g.n_blocks = cols / 256;
        g.off_d = (size_t)g.n_blocks * 256;
        g.off_sum = g.off_d + (size_t)g.n_blocks * 4;
        g.off_sum32 = g.off_sum + (size_t)g.n_blocks * 32;
        g.row_bytes = kite_round_up(g.off_sum32 + (size_t)g.n_blocks * 16, KITE_ACT_ALIGN);
    }
    return g;
}

/* Bytes of the activation buffer for n rows of cols (shared act_bytes of every set). */
size_t kite_act_bytes_common(uint32_t type, int64_t cols, int32_t n);

/* The reference activation quantizer (the definition; SIMD quantizers must give the same bytes). */
void kite_ref_quantize_act(uint32_t type, const float *x, int64_t cols, int32_t b0, int32_t b1, void *act);

/* ---- Integer decoding of weight blocks -------------------------------------------------------------- */

/* One 32-block: w_j = d * v[j] (+ m for q4_1/q5_1, has_min set). */
typedef struct kite_b32_ints {
    float d, m;
    bool has_min;
    int8_t v[32];
} kite_b32_ints;
void kite_decode_b32(uint32_t type, const void *block, kite_b32_ints *out);

/* One K super-block: w_j = d * sc[j / sub] * v[j] - dmin * m[j / sub] (has_min for q2_K, q4_K, q5_K). */
typedef struct kite_k_ints {
    float d, dmin;
    bool has_min;
    int32_t sub;        /* elements per sub-block: 16 or 32 */
    int8_t v[256];
    int16_t sc[16];
    int16_t m[16];
} kite_k_ints;
void kite_decode_k(uint32_t type, const void *block, kite_k_ints *out);

/* ---- Packed layouts -------------------------------------------------------------------------------- *
 * KITE_LAYOUT_RAW: data views the tensor's rows as stored (the reference set; owned = NULL).
 * KITE_LAYOUT_INTERLEAVED: rows in groups of G (16 for AVX-512, 8 for AVX2, 4 for NEON); the last group
 * is padded with zero rows. Group g occupies group_bytes at data + g * group_bytes (a multiple of 64):
 * its n_blocks blocks one after another, block_bytes = q_bytes + s_bytes each, a block's quant bytes
 * first and its scales right after them. One sequential stream per group is what the hardware
 * prefetchers follow best: with the scales in a region of their own, a decode step (one activation
 * row) streamed Q4_0 at 55-65% of the read bandwidth of a plain sequential pass over the same bytes;
 * inline, without software prefetch, at 85-90% (kite_kernel_bench, 1.1B shapes).
 * A "vector" below is 4 * G bytes: byte 4r + i holds element 4j + i of row r for one 4-element
 * column group j (the layout a dot-of-4 instruction with a broadcast activation word consumes).
 *   f32/f16/bf16: block = 1 column: G values (the G rows of that column) in the source format.
 *   q8_0: 8 vectors (column groups 0..7) of int8 values; with KITE_PACK_Q8_OFFSET stored as v + 128 (u8).
 *         scales: G fp16 d.
 *   q4_0: 4 vectors, vector p holds column group p in the low nibbles and p + 4 in the high nibbles
 *         (nibbles as stored, v + 8). scales: G fp16 d.
 *   q4_1: nibble vectors as q4_0 (v in 0..15). scales: G fp16 d, then G fp16 m.
 *   q5_0, q5_1: nibble vectors of the low 4 bits of v + 16 (q5_0) or v (q5_1), then one vector whose
 *         byte holds in bit j the fifth bit of column group j's element. scales as q4_0 / q4_1.
 *   q2_K: per 16-column sub-block s, one vector of 2-bit fields: column group 4s + j in bits 2j..2j+1 (v in
 *         0..3). scales: per pair of sub-blocks p = 0..7, G pairs of the block's scale bytes (sc | m << 4 of
 *         sub-blocks 2p, 2p+1); then G fp16 d and G fp16 dmin (as many bytes as the file's blocks).
 *   q3_K: per 32 columns (sub-blocks 2t, 2t+1): two vectors of the low 2 bits of v + 4 as q2_K's, then one
 *         vector whose byte holds in bit k the high bit of column group 8t + k. scales: per pair of
 *         sub-blocks p = 0..7, G pairs (sc_2p, sc_2p+1) of int8 (-32..31), then G fp16 d (as q6_K's).
 *   q4_K: per 32-column sub-block s, 4 nibble vectors as q4_0 (v in 0..15). scales: for pairs of
 *         sub-blocks p = 0..3, G pairs (sc_2p, sc_2p+1) of u8, then G pairs (m_2p, m_2p+1) of u8;
 *         then G fp16 d and G fp16 dmin.
 *   q5_K: as q4_K, then per sub-block one vector whose byte holds in bit j the fifth bit of column group
 *         j's element (v = nibble + 16 * bit). scales as q4_K.
 *   q6_K: per 32 columns (sub-blocks 2t, 2t+1): 4 nibble vectors (low 4 bits of v + 32), then 2 vectors
 *         of the high 2 bits: vector h holds column group 4h + j in bits 2j..2j+1. scales: per pair of
 *         sub-blocks p = 0..7, G pairs (sc_2p, sc_2p+1) of int8, then G fp16 d. */
enum {
    KITE_LAYOUT_RAW = 0,
    KITE_LAYOUT_INTERLEAVED = 0x100, /* | G | flags */
    KITE_PACK_Q8_OFFSET = 0x1000,
};

typedef struct kite_pack_geom {
    int32_t G;          /* rows per group */
    int64_t n_groups;
    int64_t n_blocks;   /* per row */
    size_t q_bytes;     /* quant bytes per block per group */
    size_t s_bytes;     /* scale bytes per block per group (after the block's quant bytes) */
    size_t block_bytes; /* q_bytes + s_bytes: stride between a group's blocks */
    size_t group_bytes; /* multiple of 64 */
} kite_pack_geom;

/* Geometry for type with rows x cols in groups of G; false if the type has no interleaved form. */
bool kite_pack_geometry(uint32_t type, int64_t rows, int64_t cols, int32_t G, kite_pack_geom *g);

/* Validates t as a matrix of a supported type (shape, byte size, block multiple). */
int kite_check_matrix(const kite_tensor *t, kite_error *e);

/* Packs t into the interleaved layout with G rows per group (flags: KITE_PACK_Q8_OFFSET), into a slice of
 * arena when it has room (arena may be NULL). */
int kite_pack_interleaved(const kite_tensor *t, int32_t G, uint32_t flags, kite_weight_arena *arena,
                          kite_packed_matrix *out, kite_error *e);
/* Bytes kite_pack_interleaved takes for t with G rows per group (0 if t has no such layout). */
size_t kite_pack_interleaved_bytes(const kite_tensor *t, int32_t G);

/* Memory for packed weights (released with free()): 2 MiB-aligned and advised into transparent huge
 * pages from 2 MiB up, 64-byte aligned below. */
void *kite_alloc_weights(size_t bytes);

/* The reference set's entry points, which the SIMD sets use for types they do not accelerate. */
int kite_ref_pack(const kite_tensor *t, kite_weight_arena *arena, kite_packed_matrix *out, kite_error *e);
size_t kite_ref_pack_bytes(const kite_tensor *t); /* 0: the reference views its tensors */
void kite_ref_matmul(const kite_packed_matrix *w, const void *act, const float *x, int32_t n, float *y,
                     int64_t y_stride, int64_t r0, int64_t r1);
/* The trellis types' reference product (ref/ref_trellis.c; every level reads the file's tiles as they lie). */
void kite_ref_matmul_trellis(const kite_packed_matrix *w, const void *act, int32_t n, float *y, int64_t y_stride,
                             int64_t r0, int64_t r1);

/* ---- Attention (kite_attn_query) ---------------------------------------------------------------------- */

/* exp(x) for the softmax, x <= 0 (scores minus their running max): Cephes' expf reduction and degree-6
 * polynomial, 0 below -87 (where expf would be subnormal), about 2 ulp. The SIMD levels evaluate the
 * same steps with fused multiply-adds (so their bits may differ from these in the last place; plain
 * multiply-adds here, because fmaf is a slow library call on CPUs without FMA). */
static inline float kite_attn_exp(float x) {
    if (!(x >= -87.0f)) return 0.0f;
    float n = nearbyintf(x * 1.44269504088896341f);
    float r = n * -0.693359375f + x;
    r = n * 2.12194440e-4f + r;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    float y = p * (r * r) + r + 1.0f;
    uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, 4);
    return y * scale;
}

void kite_ref_attend(const kite_attn_query *a);

/* silu(x) = x * sigmoid(x), with the exponential only of -|x| (kite_attn_exp's range): sigmoid(x) =
 * 1 / (1 + e) for x >= 0 and e / (1 + e) below, e = exp(-|x|). The SIMD levels take the same steps on
 * vectors (expf per element had been 5-8% of a 512-token prefill). NaN stays NaN. */
static inline float kite_silu(float x) {
    const float e = kite_attn_exp(-fabsf(x));
    return x * ((x >= 0.0f ? 1.0f : e) / (1.0f + e));
}
void kite_ref_silu_mul(float *gate, const float *up, int64_t n);

/* gelu with the tanh approximation as x * sigmoid(z), z = 2 sqrt(2/pi) x (1 + 0.044715 x^2) (the same
 * function: 0.5 (1 + tanh(u)) = sigmoid(2u)), the sigmoid as in kite_silu. The SIMD levels take the same
 * steps on vectors. */
#define KITE_GELU_2C 1.5957691216057308f /* 2 sqrt(2 / pi) */
#define KITE_GELU_A 0.044715f
static inline float kite_gelu_tanh(float x) {
    const float z = KITE_GELU_2C * x * (1.0f + KITE_GELU_A * x * x);
    const float e = kite_attn_exp(-fabsf(z));
    return x * ((z >= 0.0f ? 1.0f : e) / (1.0f + e));
}
void kite_ref_gelu_mul(float *gate, const float *up, int64_t n);
void kite_ref_f32_to_f16(const float *x, uint16_t *y, int64_t n);

/* Gated DeltaNet's reference kernels (ref/ref_deltanet.c; kite_kernel_set.dn_steps, dn_chunked, dn_conv_silu). */
void kite_ref_dn_steps(const kite_dn_head *h);
void kite_ref_dn_chunked(const kite_dn_head *h, float *work);
void kite_ref_dn_conv_silu(const float *const *taps, const float *w_t, int32_t n_taps, int64_t n, float *out);

/* The sets. NULL where the build has no such set (other architecture). */
const kite_kernel_set *kite_kernels_ref(void);
const kite_kernel_set *kite_kernels_avx2(void);
const kite_kernel_set *kite_kernels_avx512(void); /* needs AVX-512 F/BW/VL + VNNI */
/* Whether the AVX-512 set's 32-block products of 24 activation rows and more run on the AMX-INT8 tiles
 * (when the build, CPU and OS have them and KITE_AMX is not 0 in the environment; same bits as the
 * VNNI tiles). want = false forces the VNNI tiles, want = true probes again (tests cover both paths);
 * returns whether AMX is in use afterwards. Not thread-safe against concurrent matmuls. */
bool kite_avx512_amx_set(bool want);
/* The AVX-512 set's trellis product (quant/trellis.h) runs avx512_vbmi.c's kernel where the CPU has VBMI and
 * VBMI2, else the AVX2 set's (same bits). want = false forces the AVX2 one, want = true probes again; returns
 * whether the VBMI kernel is in use afterwards (tests cover both). Not thread-safe against matmuls. */
bool kite_avx512_vbmi_set(bool want);
void kite_avx512_vbmi_trellis_matmul(const kite_packed_matrix *w, const void *act, int32_t n, float *y, int64_t y_stride,
                                     int64_t r0, int64_t r1);
const kite_kernel_set *kite_kernels_neon(void);

#endif
