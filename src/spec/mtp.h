/* The MTP drafter: Qwen3.5's next-n block (model.h, kite_mtp_weights) drafting for its own trunk, as
 * llama.cpp's common_speculative_impl_draft_mtp does.
 *
 * The input convention (llama.cpp's graph_mtp and draft-mtp's process()): the head's row at position p
 * takes the pair (token x[p], h[p-1]) with RoPE at p and predicts x[p+1]; h[p-1] is the target's last
 * hidden state at p - 1 after output_norm (llama.cpp's h_nextn; kite captures the last layer's output
 * and applies output_norm here), and row 0 takes zeros (llama.cpp's first pending row), so the head's
 * cache holds the same rows as llama.cpp's. Rows of committed positions use the target's hidden states; a
 * drafted node deeper than the first takes its parent row's state after shared_head_norm instead (the
 * target has not run it yet), so those rows are dropped after the pass and rebuilt from the verified
 * states. The head keeps a KV cache of its own (f32). */
#ifndef KITE_SPEC_MTP_H
#define KITE_SPEC_MTP_H

#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"
#include "base/threadpool.h"

struct kite_weights;
struct kite_session;
struct kite_spec_state;
struct kite_draft_tree;
struct kite_gen_params;

/* Refuses (KITE_ERR_INVALID_ARG, saying so) a model without a next-n block. */
int kite_mtp_check_target(const struct kite_weights *target, kite_error *e);

/* A session's drafting state: the head's KV cache and scratch. */
typedef struct kite_mtp_run kite_mtp_run;
int kite_mtp_run_new(kite_mtp_run **out, const struct kite_weights *target, int32_t n_ctx, kite_error *e);
void kite_mtp_run_free(kite_mtp_run *r);
/* Forgets the head's cache (the next draft rebuilds it from the feature rows). */
void kite_mtp_run_reset(kite_mtp_run *r);

/* Committed rows of positions pos0 .. pos0 + n - 1 (n <= 64), causal over the cached rows from the
 * cache's start (pos0 = 0 restarts the cache): row i takes token[i] and hidden[i] ([n][dim], the
 * target's state after output_norm). Writes each row's logits to logits[n][V] when not NULL and its
 * state after shared_head_norm to h_out[n][dim] when not NULL. The tests' entry to the head's math. */
void kite_mtp_run_rows(kite_mtp_run *r, kite_pool *pool, const int32_t *token, const float *hidden, int32_t n, int32_t pos0,
                       float *logits, float *h_out);

/* The MTP drafter (spec.c calls it for KITE_DRAFT_MTP): brings the head's cache up to the session's
 * committed context from its feature rows, runs the root's row, and grows the tree under budget by
 * top-C expansion (kite_spec_grow_tree), running each round's new nodes in one batch. */
int kite_mtp_draft(struct kite_spec_state *st, struct kite_session *s, int32_t root, int32_t budget,
                   const struct kite_gen_params *gp, struct kite_draft_tree *t, kite_error *e);
/* Milliseconds of one head row with its output layer (the drafting cost before any is measured). */
double kite_mtp_one_step_ms(kite_mtp_run *r, kite_pool *pool);

#endif
