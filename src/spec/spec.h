/* Speculative decoding: drafters (n-gram, draft model, oracle), the draft tree, the budget controller.
 * The verification walk lives in engine/session.c beside plain decoding, which is its special case.
 * Algorithm and invariants: shared docs/SPECULATIVE.md. */
#ifndef KITE_SPEC_SPEC_H
#define KITE_SPEC_SPEC_H

#include "kite.h"
#include "base/error.h"

struct kite_session;
struct kite_gmask;

/* Batch sizes at which the pass cost curve is measured (spec.c). */
#define KITE_N_COST_POINTS 11
/* Block rows at which a DFlash drafter's cost is measured (spec.c). */
#define KITE_N_BLOCK_POINTS 9

/* A tree of drafted tokens. Node 0 is the root: the last emitted token, not yet run by the target,
 * at absolute position pos0. A chain is a tree with one child per node. */
typedef struct kite_draft_tree {
    int32_t n;                                 /* nodes, root included: 1 .. KITE_MAX_DRAFT + 1 */
    int32_t token[KITE_MAX_DRAFT + 1];
    int32_t parent[KITE_MAX_DRAFT + 1];        /* parent[0] = -1; parent[j] < j */
    int32_t depth[KITE_MAX_DRAFT + 1];         /* depth[0] = 0 */
    float logq[KITE_MAX_DRAFT + 1];            /* cumulative draft log-probability (0 at the root) */
    float q_token[KITE_MAX_DRAFT + 1];         /* q(token[j]) under its parent's draft distribution */
    bool fed[KITE_MAX_DRAFT + 1];              /* the draft model has this node's K/V */
} kite_draft_tree;

/* Drafter state of a session. */
typedef struct kite_spec_state {
    kite_spec_params params;
    struct kite_session *draft;   /* KITE_DRAFT_MODEL: a session on the draft model (sharing our pool) */
    struct kite_eagle3_run *eagle3; /* KITE_DRAFT_EAGLE3: the head's cache and scratch (spec/eagle3.h) */
    struct kite_dflash_run *dflash; /* KITE_DRAFT_DFLASH: the drafter's cache and scratch (spec/dflash.h) */
    struct kite_mtp_run *mtp;     /* KITE_DRAFT_MTP: the next-n head's cache and scratch (spec/mtp.h) */
    int32_t max_depth;            /* > 0: kite_spec_grow_tree expands no node this deep (a DFlash block's last row) */
    float *draft_logits;          /* [KITE_MAX_DRAFT + 1][n_vocab] draft logits per tree node */
    float *draft_q;               /* [KITE_MAX_DRAFT + 1][n_vocab] draft distributions (rejection) */
    float *work;                  /* [n_vocab] scratch */
    int32_t *hist;                /* [n_ctx + KITE_MAX_DRAFT + 1] draft model: a node's history for the penalties */
    int32_t *corpus;              /* tokens of earlier conversations of this session (n-gram source) */
    size_t n_corpus, cap_corpus;
    int64_t gen_start_pos;        /* oracle: position of the first generated token */
    /* Budget controller. */
    double accept_rate[KITE_MAX_DRAFT]; /* running estimate of P(node at depth d+1 accepted | parent accepted) */
    int32_t observed[KITE_MAX_DRAFT];   /* passes that informed accept_rate[d], while its step is 1/(n+2) */
    double draft_ms_per_token;          /* running estimate of drafting cost per drafted token (not DFlash) */
    int32_t draft_block_rows;           /* > 0 (DFlash): a pass drafting k tokens runs one block of
                                           min(k + 1, draft_block_rows) rows, whatever the tree's shape */
    /* DFlash: one block's time at KITE_BLOCK_ROW_POINTS rows (spec.c), measured when drafting starts,
     * and the running ratio of drafting passes as observed to that curve. A block has a large part that
     * does not depend on its rows (the drafter's weights are read once, new context rows injected): on
     * the 1.1B shape at 2 threads (AVX-512) ~2.2 ms for 3 rows, 3.3 for 9, 5.9 for 16. A price per row
     * put none of it on short blocks, and the controller chose 5-token chains where 8 decode faster. */
    double draft_block_ms[KITE_N_BLOCK_POINTS];
    double draft_block_scale;
    int32_t draft_cost_observed;        /* drafting passes that informed the estimate, while its step is 1/(n+1) */
    int32_t plain_streak;               /* passes in a row the controller chose not to draft */
    int32_t probe_interval;             /* plain passes before the next one-token probe (KITE_PROBE_MIN or more,
                                           doubling to KITE_PROBE_MAX) */
    int32_t explore_count;              /* drafting passes since the last one drafted a token deeper */
    /* The controller's last choice, reused while no estimate and not the room for drafting changed
     * (plain steps learn nothing): recomputing it took the model's cost-curve lock and a pass over all
     * budgets on every token, ~0.5% of decoding a 281K-parameter model. */
    bool choice_valid;
    int32_t choice_max_budget, choice_best_k, choice_min_interval;
    bool choice_could_pay;              /* drafting would pay at this cost if every draft were accepted */
    double last_catch_up_ms;            /* of the last kite_spec_draft: feeding the draft model the tokens
                                           decoded plainly since it last drafted (not drafting proper) */
    /* The grammar the next draft must follow (set by the session before each pass; NULL = none):
     * every drafted token is allowed at its parent's state, the root's being groot. */
    struct kite_gmask *gmask;
    int32_t groot;
} kite_spec_state;

int kite_spec_init(kite_spec_state *st, struct kite_session *s, const kite_spec_params *p, kite_error *e);
void kite_spec_free(kite_spec_state *st);
/* Remembers the session's tokens before a reset, for the n-gram drafter. */
void kite_spec_remember(kite_spec_state *st, const int32_t *tokens, size_t n);

/* Budget for the next pass (0 = plain step), from the measured cost curve and acceptance. */
int32_t kite_spec_choose_budget(kite_spec_state *st, struct kite_session *s, int32_t max_budget);
/* An input of the choice was set by hand (tests): choose afresh next pass. */
static inline void kite_spec_estimates_changed(kite_spec_state *st) { st->choice_valid = false; }
/* Learns the drafting cost from one drafting pass of `budget` tokens that took ms (catching up aside). */
void kite_spec_observe_draft_cost(kite_spec_state *st, double ms, int32_t budget);
/* Learns from one pass: tree drafted, path accepted (node indices, root first). */
void kite_spec_observe(kite_spec_state *st, const kite_draft_tree *t, const int32_t *path, int32_t n_path);

/* Brings the draft model's committed context in step with the target's (a no-op without a draft
 * model). kite_prompt calls it, so the prompt's cost on the draft counts as prefill, not as drafting
 * (where the controller would take it for the price of every drafted token). */
int kite_spec_catch_up(kite_spec_state *st, struct kite_session *s, kite_error *e);
/* Builds the tree for a pass rooted at `root` (position = the session's committed length). */
int kite_spec_draft(kite_spec_state *st, struct kite_session *s, int32_t root, int32_t budget, const kite_gen_params *gp,
                    kite_draft_tree *t, kite_error *e);
/* kite_spec_draft below a chain root -> prefix[0] -> ... -> prefix[n_prefix - 1] drafted by the caller (a
 * grammar's forced text): the draft model continues it with up to budget more tokens (the other
 * drafters leave the chain as it is). */
int kite_spec_draft_after(kite_spec_state *st, struct kite_session *s, int32_t root, const int32_t *prefix, int32_t n_prefix,
                          int32_t budget, const kite_gen_params *gp, kite_draft_tree *t, kite_error *e);
/* A chain root -> ids[0] -> ... -> ids[n - 1] (n <= KITE_MAX_DRAFT), drafted by the caller (a grammar's
 * forced text). */
void kite_spec_draft_chain(kite_draft_tree *t, int32_t root, const int32_t *ids, int32_t n);
/* Runs tree nodes [first, end) through a drafter, writing their draft logits to logits[end - first][V]. */
typedef int (*kite_spec_run_nodes_fn)(void *ctx, kite_draft_tree *t, int32_t first, int32_t end, float *logits, kite_error *e);
/* Grows t (whose nodes' draft logits are in st->draft_logits; the last one is expanded first) best-first
 * to budget drafted tokens by top-C expansion under the shared noise (spec.c, draft_model's comment),
 * calling run_nodes on each round's new nodes but the last. */
int kite_spec_grow_tree(kite_spec_state *st, struct kite_session *s, int32_t budget, const kite_gen_params *gp,
                        kite_draft_tree *t, int32_t V, kite_spec_run_nodes_fn run_nodes, void *run_ctx, kite_error *e);
/* Keeps the draft model's cache in step with the accepted path of the last pass. */
void kite_spec_commit(kite_spec_state *st, const kite_draft_tree *t, const int32_t *path, int32_t n_path, int32_t pos0);

/* Called by the walk for every token it emits, with the target's raw logits at its position ([V], for
 * log-probabilities); returns false to end the walk there (an end token, max_tokens, a stop string,
 * or the caller's callback said stop). */
typedef bool (*kite_spec_emit_fn)(void *user_data, int32_t token, const float *logits);
/* Called by the walk before it samples at a node, with a copy of the target's logits there ([V]): sets
 * the logits of the tokens a constraint (a grammar, whose live state the emit callback advanced to
 * this node) does not allow to -inf. Returns false when no token may follow: the walk ends there
 * without sampling. */
typedef bool (*kite_spec_mask_fn)(void *user_data, float *logits);

/* The verification walk (docs/SPECULATIVE.md): from the root, samples the target's token y at node n
 * exactly as plain decoding samples position P + depth(n) + 1 (same processors over the committed
 * tokens plus n's ancestors, same noise), emits it, and moves to the child of n drafted with token y;
 * ends when there is none or emit returns false. With rejection verification (T > 0) a chain node's
 * child is accepted with probability min(1, p/q) instead, and a rejection emits a residual sample.
 *   tree_logits: [t->n][V] the target's logits after each node (the verification pass)
 *   history:     [P + t->n] tokens; [0, P) committed; the walk writes the path's tokens at [P, ...)
 *   sample_buf:  [V] scratch
 *   path:        [t->n] gets the visited nodes, root first (their K/V are the ones to keep)
 *   mask:        NULL, or applied to the logits at every node before sampling (user_data is emit's)
 * Returns the number of nodes on the path (>= 1), which is also the number of tokens emitted, except
 * when mask refuses every token: at the root nothing is emitted (1 is returned); at a later node the
 * node is dropped from the path (its token was emitted and is the one the cache has not run).
 * Kept apart from the session so tests can drive it with synthetic logits. */
int32_t kite_spec_walk(kite_spec_state *st, const kite_gen_params *gp, const kite_draft_tree *t, const float *tree_logits,
                       int32_t V, int32_t *history, int32_t P, float *sample_buf, kite_spec_emit_fn emit,
                       kite_spec_mask_fn mask, void *user_data, int32_t *path);

/* Standard speculative sampling at one chain node: accepts the drafted token x with probability
 * min(1, p(x) / q(x)), else returns a sample of normalize(max(0, p - q)). p = softmax(processed
 * target logits / T); draft_logq = log q over the vocabulary, or NULL for a drafter that proposes x
 * with certainty (n-gram, oracle). Exact in distribution; not seed-identical to plain sampling. */
int32_t kite_spec_rejection_step(kite_spec_state *st, const kite_gen_params *gp, const float *target_logits, int32_t V,
                                 const int32_t *history, size_t n_history, int64_t pos, int32_t draft_token,
                                 const float *draft_logq, bool *accepted);

/* Plain passes between one-token probes while the controller does not draft (doubling from MIN, or
 * from where probes cost at most SHARE of plain decoding when that is later, to MAX). */
#define KITE_PROBE_MIN 16
#define KITE_PROBE_MAX 1024
#define KITE_PROBE_SHARE 0.005
/* Every KITE_EXPLORE_EVERY-th drafting pass drafts one token deeper than the controller's choice, so
 * the acceptance estimate of that depth is refreshed (else one unlucky run of rejections there can
 * keep the chains short for the rest of the session). */
#define KITE_EXPLORE_EVERY 8

/* Stores the session's learned acceptance in the model, for the next session with the same drafter. */
void kite_spec_learned_store(const kite_spec_state *st, struct kite_model *m);

/* Cost of one target pass over B tokens, in ms (measured once per model and thread count). */
double kite_spec_pass_cost(struct kite_session *s, int32_t B);

#endif
