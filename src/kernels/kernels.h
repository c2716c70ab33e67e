/* Matrix kernels: weight matrices repacked once at load, activations quantized once per product, and
 * products y = W x over a batch of n activation rows that read each weight block once for all rows.
 *
 * One kernel set per CPU level (scalar reference, AVX2, AVX-512 with VNNI/BF16 where present, NEON
 * with dotprod), chosen once at start-up from CPU features; KITE_CPU=ref|avx2|avx512|neon forces a
 * level (a level the CPU lacks is refused with a log message and the best available is used).
 *
 * Exactness contract (batch invariance): y[b][r] depends only on weight row r and activation row b,
 * never on n, on b's slot, or on the row range a thread was given: every reduction runs in a fixed
 * order. Activations are quantized to int8 per block (32 elements for q4_0/q4_1/q5_0/q5_1/q8_0, 256 for
 * the K-quants; f32/f16/bf16 weights take float activations); the math every level follows is written
 * out in kernels_internal.h. The SIMD levels give the same bits as the reference (tests/kernels checks
 * it, along with the reference's error bound against a float product).
 *
 * Threads: pack runs once at load; quantize_act and matmul are reentrant (many threads may run matmul
 * on disjoint row ranges of one product, reading the same activation buffer). */
#ifndef KITE_KERNELS_KERNELS_H
#define KITE_KERNELS_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "model/tensors.h"

typedef enum kite_cpu_level {
    KITE_CPU_REF = 0,    /* portable C, the truth */
    KITE_CPU_AVX2 = 1,   /* AVX2 + FMA + F16C */
    KITE_CPU_AVX512 = 2, /* AVX-512 F/BW/VL (+ VNNI, + BF16 when present) */
    KITE_CPU_NEON = 3,   /* AArch64 NEON (+ dotprod when present) */
} kite_cpu_level;

/* A weight matrix in the layout its kernel reads best. rows x cols, cols = the input width.
 * Layouts (kernels_internal.h): the tensor's own rows (owned = NULL, a view: the reference set and
 * types a SIMD set does not accelerate), or rows interleaved in groups (a copy in owned). */
typedef struct kite_packed_matrix {
    uint32_t type;        /* kite_type of the source tensor */
    uint32_t layout;      /* kernel-set specific id of the packing */
    int64_t rows, cols;
    const void *data;     /* packed bytes */
    size_t n_bytes;
    void *owned;          /* allocation behind data, or NULL when data views the mapped file or a slice
                           * of a kite_weight_arena (freed with the arena) */
} kite_packed_matrix;

/* One allocation that a model's packed matrices are carved from, in transparent huge pages: with each
 * matrix in an allocation of its own, the small ones (K and V of a 1.1B Llama, 0.6 MiB) and the tail of
 * every other past its last whole 2 MiB sat in 4 KiB pages, where the hardware prefetchers stop at
 * every page (one-thread decode of the 1.1B Q4_0: Q/K/V 2.7-3.1 -> 2.2 ms per step with everything in
 * huge pages; the arena's decode +8%, median of four alternating pairs). */
typedef struct kite_weight_arena {
    uint8_t *base;   /* 2 MiB-aligned, advised into huge pages */
    size_t capacity; /* bytes */
    size_t used;     /* bytes handed out, each slice 64-byte aligned */
} kite_weight_arena;

/* Reserves capacity bytes (rounded up to 2 MiB; pages become resident as slices are written).
 * Returns KITE_OK or KITE_ERR_NOMEM. */
int kite_weight_arena_init(kite_weight_arena *a, size_t capacity, kite_error *e);
/* A 64-byte aligned slice of bytes, or NULL when the arena (or a) cannot hold it. */
void *kite_weight_arena_take(kite_weight_arena *a, size_t bytes);
void kite_weight_arena_free(kite_weight_arena *a);

/* Attention of the query heads that share one KV head, for one query row, over the KV cache (f16, f32,
 * or Q8_0 / Q4_0 blocks of 32: the values attended to are the blocks' dequantized elements exactly).
 * Keys are taken in tiles of KITE_ATTN_TILE visible rows with an online softmax (running max and sum,
 * rescaled per tile), so scratch stays O(tile) at any context length and each K/V row, read once per
 * tile, serves all n_q query heads of the group.
 * Exactness contract: out depends only on q, the visible rows' K/V values and their order, never on
 * where the rows sit in the cache or on other queries (a tree node attending to its ancestors gives the
 * same bits as plain decoding of the same prefix). SIMD levels agree with the reference within the
 * bound tests/kernels states, not bit for bit (their dot products and sums associate differently). */
#define KITE_ATTN_TILE 64
typedef struct kite_attn_query {
    const float *q;          /* [n_q][head_dim] query heads, rotated and contiguous */
    int32_t n_q;             /* query heads sharing this KV head (1..KITE_ATTN_MAX_Q) */
    int32_t head_dim;        /* elements per head */
    const void *k, *v;       /* cache rows of this KV head: row t starts at byte t * row_bytes */
    uint32_t kv_type;        /* KITE_TYPE_F16, F32, Q8_0 or Q4_0 (the last two: head_dim a multiple of 32) */
    size_t row_bytes;        /* bytes between consecutive cache rows (at least a row of head_dim elements) */
    const int32_t *rows;     /* visible cache rows in position order, or NULL for rows 0..n_visible-1 */
    int32_t n_visible;       /* >= 1 */
    float scale;             /* applied to q.k (1/sqrt(head_dim)) */
    float *out;              /* [n_q][head_dim] */
} kite_attn_query;
#define KITE_ATTN_MAX_Q 16
#define KITE_ATTN_MAX_HEAD_DIM 512 /* model validation refuses larger heads */

/* Gated DeltaNet (Qwen3.5's recurrent layers; model/deltanet.h has the recurrence): one head's state
 * M [hv][hk] over n tokens, per token M = e^g M; M += beta (v - M k) k^T; o = M q. The step-wise form
 * (decoding, drafted tree nodes, replays) runs it token by token; the chunked form (prefill) runs chunks
 * of KITE_DN_CHUNK tokens in the WY form (ref/ref_deltanet.c writes both out), the chunks counted from
 * the call's first token.
 * Exactness contract: a head's results depend only on its own state and rows, never on the other heads
 * or the thread that runs it; every sum runs in a fixed order, so a level gives the same bits on every
 * call (a tree node's step equals decoding's step). SIMD levels agree with the reference within the
 * bound tests/kernels states, not bit for bit (fused multiply-adds, vector exponentials). */
#define KITE_DN_CHUNK 64
typedef struct kite_dn_head {
    float *M;                      /* [hv][hk] the state, updated in place */
    int32_t hk, hv;                /* key and value head sizes (elements) */
    int32_t n;                     /* tokens */
    const float *q, *k;            /* token t's at q + t * qk_stride, k + t * qk_stride ([hk]; q unread when o is NULL) */
    const float *v;                /* token t's at v + t * v_stride ([hv]) */
    const float *g, *beta;         /* token t's at g[t * gb_stride], beta[t * gb_stride]; g <= 0 (log decay) */
    float *o;                      /* token t's output at o + t * o_stride ([hv]), or NULL (a replay) */
    int64_t qk_stride, v_stride, o_stride, gb_stride; /* floats */
} kite_dn_head;

/* Floats of the chunked form's work space: G, e^G, a row of factors, two sums; u; k^T, q^T; two Gram matrices. */
static inline size_t kite_dn_chunk_work_floats(int32_t hk, int32_t hv) {
    const size_t C = KITE_DN_CHUNK;
    return C * (5 + (size_t)hv + 2 * (size_t)hk + 2 * C);
}

typedef struct kite_kernel_set {
    kite_cpu_level level;
    const char *name;     /* "ref", "avx2", "avx512", "avx512-vnni", "neon", "neon-dotprod" */

    /* Repacks a weight tensor (ne[0] = cols, ne[1] = rows) for this set, into a slice of arena when it
     * is not NULL and has room (out->owned = NULL), else into an allocation of its own. */
    int (*pack)(const kite_tensor *t, kite_weight_arena *arena, kite_packed_matrix *out, kite_error *e);
    /* Bytes pack would take from an arena for t (0 when the packing is a view of t, or t is invalid). */
    size_t (*pack_bytes)(const kite_tensor *t);

    /* Bytes of the quantized-activation buffer for n rows of cols inputs against weights of `type`
     * (0 when the kernel reads float activations directly). */
    size_t (*act_bytes)(uint32_t type, int64_t cols, int32_t n);
    /* Quantizes activation rows [b0, b1) of x ([n][cols] floats) into act (layout private to the set).
     * Row b's quantization depends on row b alone. */
    void (*quantize_act)(uint32_t type, const float *x, int64_t cols, int32_t b0, int32_t b1, void *act);

    /* y[b * y_stride + r] = sum_k W[r][k] x[b][k] for r in [r0, r1), b in [0, n); other entries of y
     * are not written. act is the buffer quantize_act filled (for all n rows), x the float rows (for
     * kernels that read floats). Any r0 <= r1 works; multiples of row_block are fastest. */
    void (*matmul)(const kite_packed_matrix *w, const void *act, const float *x, int32_t n, float *y,
                   int64_t y_stride, int64_t r0, int64_t r1);

    /* Attention for one query row and KV head (see kite_attn_query). */
    void (*attend)(const kite_attn_query *a);

    /* gate[i] = silu(gate[i]) * up[i] for i in [0, n), silu(x) = x * sigmoid(x) through kite_silu's
     * steps (kernels_internal.h); levels agree within the bound tests/kernels states. */
    void (*silu_mul)(float *gate, const float *up, int64_t n);
    /* gate[i] = gelu(gate[i]) * up[i] (GeGLU, Gemma), gelu with the tanh approximation
     * 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), computed as x * sigmoid(2 sqrt(2/pi) x (1 + 0.044715 x^2))
     * with kite_silu's sigmoid steps. Each element's result depends only on its inputs (batch-invariant). */
    void (*gelu_mul)(float *gate, const float *up, int64_t n);

    /* Gated DeltaNet (kite_dn_head): the step-wise recurrence of one head over its n tokens; the chunked
     * form, work holding kite_dn_chunk_work_floats(hk, hv) floats. */
    void (*dn_steps)(const kite_dn_head *h);
    void (*dn_chunked)(const kite_dn_head *h, float *work);
    /* The causal conv1d of one row and SiLU: out[c] = silu(sum_t taps[t][c] w_t[t * n + c]) for c in [0, n),
     * t in [0, n_taps) in that order (w_t: the conv weights transposed, [n_taps][n]; taps[n_taps - 1] the row
     * itself). The reference's silu is x / (1 + e^-x); the SIMD levels take kite_silu's steps. */
    void (*dn_conv_silu)(const float *const *taps, const float *w_t, int32_t n_taps, int64_t n, float *out);

    /* y[i] = x[i] as IEEE half, rounded to nearest even (kite_f32_to_fp16's bits; a NaN stays a NaN),
     * for the f16 KV cache. */
    void (*f32_to_f16)(const float *x, uint16_t *y, int64_t n);

    /* Preferred granularity of row ranges handed to matmul (a multiple of 16 and of the set's row
     * interleave). */
    int32_t row_block;
} kite_kernel_set;

/* The set chosen for this process (CPU features and KITE_CPU), resolved on first use. */
const kite_kernel_set *kite_kernels(void);
/* A specific level, or NULL when this CPU or build cannot run it (tests iterate over levels). */
const kite_kernel_set *kite_kernels_for(kite_cpu_level level);

void kite_packed_matrix_free(kite_packed_matrix *m);

#endif
