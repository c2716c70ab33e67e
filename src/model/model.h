/* A loaded model: hyper-parameters, weights bound to layers, and the batched forward pass. */
#ifndef KITE_MODEL_MODEL_H
#define KITE_MODEL_MODEL_H

#include "base/threadpool.h"
#include "kernels/kernels.h"
#include "model/deltanet.h"
#include "model/source.h"

typedef struct kite_layer_weights {
    /* Small vectors, converted to f32 at load (owned by kite_weights). */
    float *attn_norm;   /* [dim] */
    float *ffn_norm;    /* [dim] */
    float *q_bias;      /* [n_heads * head_dim] or NULL (Qwen2) */
    float *k_bias;      /* [n_kv_heads * head_dim] or NULL */
    float *v_bias;      /* [n_kv_heads * head_dim] or NULL */
    float *q_norm;      /* [head_dim] or NULL (Qwen3 per-head RMSNorm) */
    float *k_norm;      /* [head_dim] or NULL */
    float *post_attn_norm; /* [dim] or NULL (Gemma 3: RMSNorm of the attention output before the residual add) */
    float *post_ffn_norm;  /* [dim] or NULL (Gemma 3: RMSNorm of the FFN output before the residual add) */
    /* Matrices packed at load for the kernel set in kite_weights.kernels (rows x cols = output x input). */
    kite_packed_matrix wq;      /* [n_heads*head_dim rows, dim] */
    kite_packed_matrix wk;      /* [n_kv_heads*head_dim rows, dim] */
    kite_packed_matrix wv;      /* [n_kv_heads*head_dim rows, dim] */
    kite_packed_matrix wo;      /* [dim rows, n_heads*head_dim] */
    kite_packed_matrix w_gate;  /* [ffn_dim rows, dim] */
    kite_packed_matrix w_up;    /* [ffn_dim rows, dim] */
    kite_packed_matrix w_down;  /* [dim rows, ffn_dim] */
    /* LFM2's conv layers (model/arch/lfm2.h) instead of wq/wk/wv/wo and the QK-norms; else empty / NULL. */
    kite_packed_matrix conv_in;  /* [3 dim rows (B, C, x), dim] */
    kite_packed_matrix conv_out; /* [dim rows, dim] */
    float *conv_kernel;          /* [dim][conv_taps]: channel c's taps, the oldest position first */
    struct kite_moe_layer *moe; /* routed experts instead of w_gate/w_up/w_down (Qwen3-MoE, model/moe.h), or NULL */
    /* A Gated DeltaNet layer (Qwen3.5, kite_layer_is_recurrent) instead of wq/wk/wv/wo: */
    kite_packed_matrix w_qkv;   /* [conv_dim rows, dim]: the conv1d's input, q | k | v */
    kite_packed_matrix w_z;     /* [n_v * head_v rows, dim]: the output gate */
    kite_packed_matrix w_beta;  /* [n_v rows, dim] */
    kite_packed_matrix w_alpha; /* [n_v rows, dim] */
    kite_packed_matrix w_ssm_out; /* [dim rows, n_v * head_v] */
    kite_dn_weights dn;         /* conv taps, dt bias, A, output norm (f32, owned) */
    /* Muse Glimmer: the attention output gate, out *= sigmoid(w_attn_gate x) before wo ([n_heads*head_dim rows,
     * dim]); rows = 0 when the model has none. */
    kite_packed_matrix w_attn_gate;
    bool v_from_k;      /* Gemma 4 k_eq_v layer: no wv, V is the K projection (before K's norm and RoPE) */
    float out_scale;    /* Gemma 4's layer_scalar: the layer's output (residual stream) multiplied by it; 0 = none */
} kite_layer_weights;

/* Qwen3.5's next-n (multi-token prediction) block, stored after the trunk as blk.{n_layers}.* (llama.cpp's
 * converter; its graph_mtp): the row of a token x and the target's hidden state h (after output_norm) is
 * eh_proj(concat(enorm(emb(x)), hnorm(h))), then a gated full-attention block (block: attn_norm, the doubled
 * wq with each head's gate after it, wk, wv, q/k norms, wo, ffn_norm = post_attention_norm, gate/up/down),
 * then head_norm and the LM head. Run only by the MTP drafter (spec/mtp.h). */
typedef struct kite_mtp_weights {
    kite_layer_weights block;
    kite_packed_matrix eh_proj;   /* [dim rows, 2 * dim]: over (enorm(embedding), hnorm(hidden)) */
    float *enorm, *hnorm;         /* [dim] */
    float *head_norm;             /* [dim] nextn.shared_head_norm, else a copy of output_norm */
    const kite_tensor *embd;      /* [n_vocab rows, dim] nextn.embed_tokens (a view), or the trunk's token_embd */
    kite_packed_matrix head;      /* [n_vocab rows, dim] nextn.shared_head_head; rows = 0: the trunk's output */
} kite_mtp_weights;

typedef struct kite_weights {
    kite_hparams hp;
    const kite_kernel_set *kernels; /* the set the matrices are packed for (kite_kernels() at load) */
    const kite_tensor *tok_embd;  /* [n_vocab rows, dim], a view of the source for row lookups */
    kite_packed_matrix output;    /* [n_vocab rows, dim]; packed from tok_embd when tied */
    float *output_norm;           /* [dim] */
    kite_layer_weights *layers;   /* [n_layers] */
    float *rope_inv_freq;         /* [head_dim / 2] radians per position of global layers, scaling (or Gemma 4's
                                     proportional-RoPE divisors, rope_freqs.weight) applied */
    float *rope_inv_freq_local;   /* [rope dims of a local layer / 2] for sliding-window layers (base rope_theta_local,
                                     unscaled), or NULL when there are none */
    kite_mtp_weights *mtp;        /* Qwen3.5's next-n block (hp.n_nextn_layers > 0), else NULL */
    kite_weight_arena arena;      /* the packed matrices' memory (kernels.h) */
} kite_weights;

/* Binds a validated source's canonical tensors; converts the small vectors; packs the matrices for
 * kite_kernels() (progress, if not NULL, hears the fraction done). A matrix packed into a copy has its
 * pages in the mapped file released (MADV_DONTNEED on the page-aligned interior), so one resident copy
 * remains; the embedding stays mapped for row lookups (and is packed as a second copy when the output
 * matrix is tied to it). */
int kite_weights_bind(kite_weights *w, const kite_source *src, kite_progress_fn progress, void *progress_user_data,
                      kite_error *e);
void kite_weights_free(kite_weights *w);

/* Rows one forward pass may add past a sequence's committed context (first + n of kite_forward): a
 * prompt chunk (KITE_PREFILL_CHUNK), a draft tree (1 + KITE_MAX_DRAFT nodes), a batch's prompt chunk
 * (kite_batch caps it here). A sliding-window layer's ring holds window - 1 + this many rows, so a pass
 * never overwrites a row that one of its own nodes still sees. */
enum { KITE_KV_MAX_PASS = 64 };

/* Key/value cache of one session, [n_layers][n_kv_heads][rows of the layer] rows of head_dim elements:
 * IEEE f16 (as llama.cpp keeps it by default; rounded to nearest even from the f32 projections), f32, or
 * Q8_0 / Q4_0 blocks of 32 (quantized by the reference quantizers of quant/types.c, row by row). Head-major,
 * so that one attention task (a KV head) streams its rows contiguously: with all heads of a position
 * side by side, a head's 128-byte slices sat 1 KiB apart and attention after 1000 positions ran at a
 * third of its in-cache speed. */
typedef struct kite_kv_cache {
    int32_t n_ctx;
    int32_t n_kv_heads;  /* of global layers (uniform models: every layer) */
    int32_t head_dim;    /* of global layers */
    uint32_t type;       /* element type: KITE_TYPE_F16, F32, Q8_0 or Q4_0 (quant/types.h) */
    kite_kv_type kv_type;/* the same as the public enum */
    size_t row_bytes;    /* bytes of one head's row of head_dim elements (global layers) */
    int32_t *layer_kv_heads;   /* [n_layers] KV heads of each layer */
    size_t *layer_row_bytes;   /* [n_layers] bytes of one head's row in each layer */
    void *k;
    void *v;
    /* Sliding-window layers (Gemma 3) keep a ring: position p lives in row p % ring_rows, so their memory
     * follows the window, not the context. Global layers keep n_ctx rows, position p in row p. */
    int32_t n_layers;
    int32_t *layer_rows;  /* [n_layers] n_ctx, or ring_rows for a sliding-window layer */
    size_t *layer_base;   /* [n_layers] byte offset of the layer's first row (all heads of the layers before it) */
    int32_t window;       /* the model's sliding window (0: none) */
    int32_t ring_rows;    /* window - 1 + KITE_KV_MAX_PASS when that is below n_ctx, else 0 (no ring) */
    int32_t ring_high;    /* 1 + the highest position written to the rings: a position p is still held iff
                             p >= ring_high - ring_rows */
    /* LFM2's conv layers keep no K/V (layer_rows 0) but the conv's input rows u_p (model/arch/lfm2.h), f32 of
     * conv_dim, in a ring of conv_rows = conv_taps - 1 + KITE_KV_MAX_PASS rows per conv layer (position p in
     * row p % conv_rows), as a sliding-window layer keeps its K/V: a pass writes one row per node, a tree
     * node's taps read its ancestors' rows, and commit, rewind, copy and save treat them like K/V rows. */
    int32_t conv_taps;    /* 0: no conv layers */
    int32_t conv_dim;
    int32_t conv_rows;
    int32_t conv_held_from; /* the conv rings hold no position below this (a copied or loaded context holds only
                               the taps' window before its end); 0 after a pass from position 0 */
    int32_t *conv_index;  /* [n_layers] the layer's ring among the conv layers, or -1 */
    float *conv;          /* [conv layers][conv_rows][conv_dim] */
    size_t bytes;         /* k and v together, the recurrent state and the conv rows */
    kite_dn_state *dn;    /* Qwen3.5's Gated DeltaNet layers' state (model/deltanet.h), or NULL */
} kite_kv_cache;

/* Whether layer keeps K/V rows (an attention layer; LFM2's conv layers keep conv rows instead). */
static inline bool kite_kv_layer_has_kv(const kite_kv_cache *kv, int32_t layer) { return kv->layer_rows[layer] > 0; }

/* Layer's conv row of position pos ([conv_dim] floats); layer must be a conv layer. */
static inline float *kite_kv_conv_row(const kite_kv_cache *kv, int32_t layer, int32_t pos) {
    return kv->conv + ((size_t)kv->conv_index[layer] * (size_t)kv->conv_rows + (size_t)(pos % kv->conv_rows)) * (size_t)kv->conv_dim;
}

/* Byte offset of (layer, KV head, cache row) in k or v; row from kite_kv_row. */
static inline size_t kite_kv_offset(const kite_kv_cache *kv, int32_t layer, int32_t head, int32_t row) {
    return kv->layer_base[layer] + ((size_t)head * (size_t)kv->layer_rows[layer] + (size_t)row) * kv->layer_row_bytes[layer];
}

/* Whether layer's rows are a ring (kite_kv_cache); layer must keep K/V (kite_kv_layer_has_kv). */
static inline bool kite_kv_is_ring(const kite_kv_cache *kv, int32_t layer) { return kv->layer_rows[layer] < kv->n_ctx; }

/* The cache row of position pos in layer. */
static inline int32_t kite_kv_row(const kite_kv_cache *kv, int32_t layer, int32_t pos) {
    return kite_kv_is_ring(kv, layer) ? pos % kv->layer_rows[layer] : pos;
}

/* Whether a context of n_past positions can continue from the cache (and so a session may rewind to
 * it): every ring still holds the window before n_past. Rewinding to 0 always can (and forgets the
 * rings' history). */
bool kite_kv_can_rewind(kite_kv_cache *kv, int32_t n_past);

/* Copies the rows of positions [0, n) from src to dst (same model and type), as far as dst's rings keep
 * them; src must hold them (kite_kv_can_rewind(src, n)). */
void kite_kv_copy_prefix(kite_kv_cache *dst, const kite_kv_cache *src, int32_t n);

/* Bytes of one head's row of head_dim elements in a cache of the type; 0 for an unknown type or a
 * quantized one and a head size that is not a multiple of 32. */
size_t kite_kv_row_bytes(kite_kv_type type, int32_t head_dim);

/* Sliding-window layers get rings when the window is smaller than the context (kite_kv_cache). Fails
 * with KITE_ERR_INVALID_ARG for a quantized type and a head size that is not a multiple of 32. */
int kite_kv_cache_init(kite_kv_cache *kv, const kite_hparams *hp, int32_t n_ctx, kite_kv_type type, kite_error *e);
void kite_kv_cache_free(kite_kv_cache *kv);

/* The activation hook (kite imatrix): called before a product with its input rows, x[n_rows][n_cols]
 * (contiguous), and its weight's GGUF name ("blk.3.ffn_down.weight"; the output head is "output.weight",
 * or "token_embd.weight" when tied, as llama.cpp names them). expert is the MoE expert's index, or -1
 * for a dense weight. Runs on the thread calling the forward pass, once per product. */
typedef void (*kite_act_hook_fn)(void *user_data, const char *weight_name, int32_t expert, const float *x, int32_t n_rows,
                                 int64_t n_cols);

/* Layers whose inputs one pass can capture (kite_forward_scratch). */
enum { KITE_MAX_CAPTURE = 8 };

/* Scratch activations for batches of up to max_batch tokens. */
typedef struct kite_forward_scratch {
    int32_t max_batch;
    int32_t n_threads;
    int32_t n_ctx;
    float *x;       /* [max_batch][dim] residual stream */
    float *xn;      /* [max_batch][dim] normed input */
    float *q;       /* [max_batch][n_heads*head_dim] */
    float *k;       /* [max_batch][kv_dim] */
    float *v;       /* [max_batch][kv_dim] */
    float *att_out; /* [max_batch][n_heads*head_dim] */
    float *gate;    /* [max_batch][ffn_dim] */
    float *up;      /* [max_batch][ffn_dim] */
    float *conv_bcx; /* [max_batch][3 dim] LFM2's in_proj output (B, C, x) when the model has conv layers, else NULL */
    float *conv_y;   /* [max_batch][dim] C * conv, the out_proj's input */
    int32_t *slots; /* [n_threads][n_ctx] cache rows one node attends to */
    int32_t *positions; /* [max_batch] absolute position of each batch row */
    int32_t *row_seq;   /* [max_batch] sequence of each batch row (kite_forward_multi) */
    int32_t *seq_row0;  /* [max_batch] first batch row of each sequence */
    int32_t *out_rows;  /* [max_batch] batch rows whose logits are computed, in order */
    void *act;      /* [act_bytes] activations quantized for the matrix kernels (one product at a time) */
    size_t act_bytes; /* enough for max_batch rows of the widest matrix input, any weight type */
    kite_act_hook_fn act_hook; /* NULL (the default; costs one test per product) or the session's observer */
    void *act_hook_user_data;
    struct kite_moe_scratch *moe; /* the MoE FFN's work space (model/moe.h) when the model has experts, else NULL */
    /* Qwen3.5: the doubled q projection [max_batch][2 * n_heads * head_dim], the attention gate
     * [max_batch][n_heads * head_dim], the DeltaNet projections (conv input [max_batch][conv_dim], z and the
     * mixer's output [max_batch][n_v * head_v], alpha and b [max_batch][n_v]) and the mixer's work space. */
    float *q_gate, *attn_gate, *dn_conv, *dn_z, *dn_out, *dn_alpha, *dn_b;
    kite_dn_scratch *dn;
    kite_dn_plan *dn_plans; /* [max_batch] one per sequence of a pass */
    /* Hidden-state capture for learned drafters (EAGLE-3, DFlash read the inputs of a few target layers,
     * as llama.cpp's llama_set_embeddings_layer_inp). n_capture = 0 (the default) costs nothing. */
    int32_t n_capture;
    int32_t capture_layer[KITE_MAX_CAPTURE]; /* increasing, each in [0, n_layers]: the input of that layer (0: the
                                                scaled embedding; n_layers: the last layer's output, before the
                                                final norm) */
    float *captured; /* [max_batch][n_capture][dim]: after a pass, batch row r's capture k at
                        captured + (r * n_capture + k) * dim, for every row of the pass (not only the
                        rows whose logits were wanted) */
} kite_forward_scratch;

/* Starts (n > 0) or stops (n = 0) capturing the inputs of the given layers in every later pass on this
 * scratch. Fails with KITE_ERR_INVALID_ARG for more than KITE_MAX_CAPTURE layers or a layer outside
 * [0, n_layers] or not increasing. */
int kite_forward_scratch_set_capture(kite_forward_scratch *s, const kite_hparams *hp, const int32_t *layers, int32_t n,
                                     kite_error *e);

int kite_forward_scratch_init(kite_forward_scratch *s, const kite_hparams *hp, int32_t max_batch, int32_t n_threads,
                              int32_t n_ctx, kite_error *e);
void kite_forward_scratch_free(kite_forward_scratch *s);

/* Runs a batch of n tokens after the committed context of pos0 tokens. The batch holds nodes
 * first .. first+n-1 of a chain or a tree that starts right after the committed context; node j's
 * K/V go to cache row pos0 + j. first + n <= max rows of the cache after pos0.
 *   parent == NULL: a chain (prefill, decode): node j sits at position pos0 + j and sees the committed
 *                   rows and nodes 0..j.
 *   parent != NULL: a tree (drafted tokens): parent[j] < j is node j's parent, or -1 for a child of
 *                   the committed context; node j sits at position pos0 + depth(j) and sees the
 *                   committed rows, its ancestors and itself (ancestor-only mask). Nodes before
 *                   `first` must already be in the cache (an earlier call).
 * logits: NULL, or [n][n_vocab] when all_logits, else [n_vocab] for the last token only.
 * Each row's result is independent of n and of its slot (fixed reduction order). */
void kite_forward(const kite_weights *w, kite_kv_cache *kv, kite_forward_scratch *s, kite_pool *pool,
                  const int32_t *tokens, const int32_t *parent, int32_t first, int32_t n, int32_t pos0, float *logits,
                  bool all_logits);

/* Which rows of a sequence get logits. */
typedef enum kite_logits_want { KITE_LOGITS_NONE = 0, KITE_LOGITS_LAST = 1, KITE_LOGITS_ALL = 2 } kite_logits_want;

/* One sequence of a multi-sequence pass: a batch of n tokens after its own cache's committed context,
 * with kite_forward's meaning of tokens, parent, first and pos0. */
typedef struct kite_forward_seq {
    kite_kv_cache *kv;
    const int32_t *tokens;     /* [n] */
    const int32_t *parent;     /* NULL (a chain) or tree parents indexed by node, [first + n] */
    int32_t first;
    int32_t n;
    int32_t pos0;
    kite_logits_want want_logits;
} kite_forward_seq;

/* Runs several sequences, each over its own KV cache, in one pass: the products see all their rows at
 * once (each weight block read once for every sequence), attention reads each row's own cache. The
 * sequences' rows together must fit the scratch (max_batch), and a tree sequence's visible rows its
 * n_ctx. logits gets the wanted rows, sequence after sequence, [returned count][n_vocab]. Each row's
 * result is bit-identical to running its sequence alone (batch invariance). */
int32_t kite_forward_multi(const kite_weights *w, kite_forward_scratch *s, kite_pool *pool, const kite_forward_seq *seqs,
                           int32_t n_seqs, float *logits);

/* After a tree pass at pos0: keeps the accepted nodes (batch indices, root first, each the child of
 * the one before) as rows pos0, pos0+1, ... by moving only those rows; rejected rows are left behind
 * past the committed length, never visible again. */
void kite_kv_commit(kite_kv_cache *kv, int32_t n_layers, int32_t pos0, const int32_t *nodes, int32_t n_nodes);

#endif
