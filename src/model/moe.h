/* The routed mixture-of-experts FFN (Qwen3-MoE): a router picks n_experts_used of n_experts SwiGLU
 * experts per token, and the token's FFN output is the weighted sum of their outputs.
 *
 * The math, as llama.cpp's build_moe_ffn with softmax gating (and transformers' Qwen3MoeSparseMoeBlock):
 *   logits = W_router x                     [n_experts]
 *   p      = softmax(logits)
 *   top    = the n_experts_used largest p, largest first (equal values: the lower expert index first)
 *   w_k    = p[top_k], divided by max(sum_k w_k, 2^-14) when expert_weights_norm (norm_topk_prob)
 *   out    = w_0 * E_top0(x) + w_1 * E_top1(x) + ...   summed in that order, f32
 *   E(x)   = W_down (silu(W_gate x) * (W_up x))
 * Batching: a pass's rows are grouped by expert, each expert's three products run once over all the rows
 * routed to it (a weight block read once for those rows). Each product's row depends only on its
 * input row (the kernels' batch invariance) and the weighted sum runs in slot order per row, so a row's
 * output is bit-identical whatever the batch holds and however many rows share its experts. */
#ifndef KITE_MODEL_MOE_H
#define KITE_MODEL_MOE_H

#include "base/threadpool.h"
#include "kernels/kernels.h"

/* Upper bounds the loaders enforce (llama.cpp's LLAMA_MAX_EXPERTS is 512). */
enum { KITE_MOE_MAX_EXPERTS = 512, KITE_MOE_MAX_USED = 64 };

/* One layer's experts. The matrices are packed like every other weight (their memory in the model's
 * arena, or views of the mapped file); views holds the per-expert slices of a 3-D GGUF tensor that were
 * packed (kept for views of the file, which point into them only through data). */
typedef struct kite_moe_layer {
    int32_t n_experts;
    kite_packed_matrix router;  /* [n_experts rows, dim] */
    kite_packed_matrix *gate;   /* [n_experts] each [expert_ffn rows, dim] */
    kite_packed_matrix *up;     /* [n_experts] each [expert_ffn rows, dim] */
    kite_packed_matrix *down;   /* [n_experts] each [dim rows, expert_ffn] */
    kite_tensor *views;         /* [3 * n_experts] gate, up, down slices of 3-D tensors, or NULL */
} kite_moe_layer;

void kite_moe_layer_free(kite_moe_layer *moe);

/* Per-pass work space of the MoE FFN, for up to max_batch rows (kite_forward_scratch.moe). */
typedef struct kite_moe_scratch {
    int32_t max_rows;      /* max_batch * n_experts_used routed (row, slot) pairs */
    float *logits;         /* [max_batch][n_experts] router logits */
    int32_t *expert;       /* [max_batch][n_used] chosen expert per row and slot */
    float *weight;         /* [max_batch][n_used] its weight */
    int32_t *count;        /* [n_experts] pairs routed to each expert in this pass */
    int32_t *start;        /* [n_experts + 1] first pair of each expert in the grouped order */
    int32_t *pair_row;     /* [max_rows] batch row of each grouped pair */
    int32_t *slot_pair;    /* [max_batch][n_used] grouped index of each (row, slot) */
    float *xg;             /* [max_rows][dim] inputs gathered by expert */
    float *gate, *up;      /* [max_rows][expert_ffn] */
    float *y;              /* [max_rows][dim] each pair's expert output */
    void *act;             /* quantized activations of max_rows rows of the widest input */
    size_t act_bytes;
} kite_moe_scratch;

int kite_moe_scratch_init(kite_moe_scratch *ms, int32_t max_batch, int32_t dim, int32_t n_experts, int32_t n_used,
                          int32_t expert_ffn, kite_error *e);
void kite_moe_scratch_free(kite_moe_scratch *ms);

/* The activation hook's shape (model.h's kite_act_hook_fn). */
typedef void (*kite_moe_hook_fn)(void *user_data, const char *weight_name, int32_t expert, const float *x, int32_t n_rows,
                                 int64_t n_cols);

/* Parameters of one layer's MoE FFN over n rows. */
typedef struct kite_moe_call {
    const kite_kernel_set *ks;
    const kite_moe_layer *moe;
    int32_t layer;            /* for the hook's weight names */
    int32_t dim, n_used, expert_ffn;
    bool norm_weights;        /* expert_weights_norm */
    kite_moe_hook_fn hook;    /* NULL, or called before each product with its input rows */
    void *hook_user_data;
} kite_moe_call;

/* out[b] = MoE(x[b]) for b < n ([n][dim] each; out may equal x). */
void kite_moe_ffn(const kite_moe_call *c, kite_moe_scratch *ms, kite_pool *pool, const float *x, float *out, int32_t n);

#endif
