/* Gated DeltaNet (Qwen3.5's linear-attention layers): the recurrent state of a sequence, and the mixer
 * that turns a layer's projected rows into its output before out_proj.
 *
 * Per layer and value head h the state is a matrix M [head_v][head_k]; per token t (after the causal
 * conv1d over q|k|v, SiLU, L2-normalised q and k, q scaled by head_k^-1/2):
 *     M = exp(g_t) M;   M += beta_t (v_t - M k_t) k_t^T;   o_t = M q_t
 * with g = ssm_a * softplus(alpha + dt_bias) (ssm_a = -exp(A_log)) and beta = sigmoid(b), then
 * o = rmsnorm(o) * ssm_norm * silu(z) per head. Value head h reads key head h % n_k (llama.cpp's GGUF,
 * whose converter reorders the value heads to that tiled order) or h / (n_v / n_k) (Hugging Face).
 *
 * Prefill (a chain of several rows) runs the chunk-parallel form (chunks of KITE_DN_CHUNK, the WY /
 * forward-substitution form of the delta rule), decoding and drafted trees the step-wise recurrence
 * (so a verified node equals plain decoding bit for bit).
 *
 * The state of a sequence lives beside its KV cache (kite_kv_cache.dn). It cannot be rewound by
 * dropping rows, so it keeps a base state (at base_pos) and the inputs of the rows after it (conv input
 * row, g and beta per layer): a later pass reaches any position in [base_pos, base_pos + n_rows] by
 * replaying those rows from the base; a drafted tree's rows are kept per node until its commit picks
 * the accepted path. A rewind further back is refused (kite_dn_can_rewind), and the session then runs
 * the history again. */
#ifndef KITE_MODEL_DELTANET_H
#define KITE_MODEL_DELTANET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "base/threadpool.h"
#include "kernels/kernels.h"
#include "model/tensors.h"

/* The shape of every recurrent layer of a model. */
typedef struct kite_dn_dims {
    int32_t n_k, n_v;          /* key heads (ssm.group_count), value heads (ssm.time_step_rank) */
    int32_t head_k, head_v;    /* per head (ssm.state_size; inner_size / n_v) */
    int32_t kernel;            /* conv1d width */
    int32_t conv_dim;          /* 2 * n_k * head_k + n_v * head_v: q | k | v */
    bool v_grouped;            /* value head h reads key head h / (n_v / n_k) (HF order) instead of h % n_k */
    float eps;                 /* of the L2 norms and the output RMSNorm */
} kite_dn_dims;

void kite_dn_dims_from(const kite_hparams *hp, kite_dn_dims *d);

/* A recurrent layer's small weights, f32 (owned by kite_weights). */
typedef struct kite_dn_weights {
    float *conv;     /* [conv_dim][kernel], tap kernel-1 multiplies the current row */
    float *conv_t;   /* [kernel][conv_dim] the same, transposed (the conv kernel's layout) */
    float *dt_bias;  /* [n_v] */
    float *a;        /* [n_v] -exp(A_log) */
    float *norm;     /* [head_v] */
} kite_dn_weights;

typedef struct kite_dn_state {
    kite_dn_dims d;
    int32_t n_layers;
    int32_t *slot;        /* [n_layers] index among the recurrent layers, -1 for an attention layer */
    int32_t n_rec;
    size_t block_floats;  /* one layer's state: (kernel - 1) conv rows, then n_v matrices head_v x head_k */
    float *blocks;        /* [2][n_rec][block_floats] */
    size_t row_floats;    /* one layer's row: conv_dim conv inputs, n_v g, n_v beta */
    int32_t max_rows;     /* rows kept: KITE_KV_MAX_PASS */
    float *rows;          /* [max_rows][n_rec][row_floats] */
    int base;             /* block set (0/1) holding the state at base_pos */
    int32_t base_pos;
    int32_t n_rows;       /* rows after base_pos held (positions base_pos .. base_pos + n_rows - 1) */
    int32_t n_tree;       /* > 0: rows hold the nodes of a tree pass at base_pos, not yet committed */
    bool head_ahead;      /* block set 1 - base holds the state at base_pos + n_rows */
    size_t bytes;
} kite_dn_state;

/* NULL (KITE_OK) for a model without recurrent layers. */
int kite_dn_state_init(kite_dn_state **out, const kite_hparams *hp, int32_t max_rows, kite_error *e);
void kite_dn_state_free(kite_dn_state *st);

/* Whether a pass may start at n_past (pure: the state is rebuilt lazily by the next pass). */
bool kite_dn_can_rewind(const kite_dn_state *st, int32_t n_past);
/* dst takes src's whole state (same model); dst's next pass starts where src could. */
void kite_dn_copy(kite_dn_state *dst, const kite_dn_state *src);
/* After a tree pass at pos0: keeps the accepted nodes' rows (root first) as positions pos0, pos0+1, ...
 * After a chain pass: keeps its first n_nodes rows (nodes must be 0, 1, ...). */
void kite_dn_commit(kite_dn_state *st, int32_t pos0, const int32_t *nodes, int32_t n_nodes);

/* One pass of one sequence over the recurrent layers. */
typedef struct kite_dn_plan {
    bool tree;          /* parent != NULL */
    bool zero;          /* start from the empty state (position 0) */
    int32_t replay;     /* rows replayed from the base block before the pass */
    int read;           /* block set holding the state the pass starts from (after the replay) */
    int32_t row0;       /* the pass's first row's index in st->rows */
    int32_t pos0;       /* position of the starting state */
    const int32_t *parent; /* tree parents, indexed by node (row index) */
    int32_t first, n;
} kite_dn_plan;

/* Before the layers: where the pass starts (logs an error and starts from zero if it cannot). */
void kite_dn_plan_pass(kite_dn_state *st, const int32_t *parent, int32_t first, int32_t n, int32_t pos0, kite_dn_plan *plan);
/* After the layers. */
void kite_dn_finish_pass(kite_dn_state *st, const kite_dn_plan *plan);

/* Work space of the mixer for up to max_rows rows. */
typedef struct kite_dn_scratch {
    int32_t max_rows;
    float *q, *k, *v;       /* [max_rows][n_v][head], per value head (key heads repeated) after conv, SiLU, norms */
    float *g, *beta;        /* [max_rows][n_v] */
    float *o;               /* [max_rows][n_v * head_v] */
    float *stack;           /* tree passes: [depth + 1][n_v][head_v * head_k] states along the current path */
    int32_t stack_cap;
    int32_t *order, *depth; /* [max_rows] */
    int n_threads;
    float *work;            /* [n_threads][...] per-thread chunk work space */
    size_t work_floats;
} kite_dn_scratch;

int kite_dn_scratch_init(kite_dn_scratch *sc, const kite_dn_dims *d, int32_t max_rows, int n_threads, kite_error *e);
void kite_dn_scratch_free(kite_dn_scratch *sc);

/* The mixer of recurrent layer `layer` for one sequence's n rows: conv_in [n][conv_dim] (the qkv
 * projection), z [n][n_v * head_v], alpha and b [n][n_v] (projections) in; out [n][n_v * head_v] (before
 * out_proj). conv_in, alpha and b are rows of the batch, strided by the given strides. ks: the kernels of
 * the recurrence and the conv (kite_dn_head). */
void kite_dn_mix(const kite_kernel_set *ks, const kite_dn_weights *W, kite_dn_state *st, int32_t layer, const kite_dn_plan *plan, kite_dn_scratch *sc,
                 kite_pool *pool, const float *conv_in, const float *z, const float *alpha, const float *b, float *out);

/* Reference pieces (the reference kernel set's), exposed for the unit test (tests/model/test_deltanet.c): one head's step-wise and
 * chunked recurrence over n tokens from state M [head_v][head_k] (updated in place); q, k [n][head_k],
 * v, o [n][head_v], g, beta [n]. work: kite_dn_chunk_work_floats(head_k, head_v) floats. */
void kite_dn_head_steps(float *M, int32_t hk, int32_t hv, const float *q, const float *k, const float *v, const float *g,
                        const float *beta, int32_t n, float *o);
void kite_dn_head_chunked(float *M, int32_t hk, int32_t hv, const float *q, const float *k, const float *v, const float *g,
                          const float *beta, int32_t n, float *o, float *work);

#endif
