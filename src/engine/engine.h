/* The objects behind kite.h's opaque handles. */
#ifndef KITE_ENGINE_ENGINE_H
#define KITE_ENGINE_ENGINE_H

#include <pthread.h>
#include <stdatomic.h>

#include "model/model.h"
#include "spec/spec.h"
#include "tokenize/tokenizer.h"

struct kite_model {
    kite_source src;        /* mapped files and canonical tensors */
    kite_weights weights;   /* tensors bound to layers (unset when vocab_only or an EAGLE-3 head) */
    struct kite_eagle3 *eagle3; /* an EAGLE-3 draft head (spec/eagle3.h): only a drafter, never a session's model */
    struct kite_dflash *dflash; /* a DFlash block drafter (spec/dflash.h): likewise */
    bool vocab_only;        /* only the tokenizer is usable */
    int32_t n_vocab;        /* the model's vocabulary (rows of the embedding), or the tokenizer's */
    kite_tokenizer *tokenizer;
    int32_t n_threads;      /* default for sessions */
    kite_gen_params gen_defaults;
    /* Speculative decoding's cost curve: ms per target pass at the controller's batch sizes (spec.c),
     * measured per thread count by the sessions that need it, the larger batches only once some chain
     * that long could pay. */
    pthread_mutex_t cost_lock;
    int32_t cost_threads;   /* threads the curve was measured with; 0 = not measured */
    int32_t cost_points;    /* leading points of pass_cost_ms measured for cost_threads (the rest unset) */
    double pass_cost_ms[KITE_N_COST_POINTS]; /* one verification pass at each of the spec controller's points */
    /* Acceptance by depth that the model's latest speculative session learned, with the drafter it
     * belongs to (under cost_lock): a new session with the same drafter starts from it, not from the
     * prior, so short generations do not each pay for learning that a drafter is poor. */
    bool have_learned;
    kite_spec_params learned_for;           /* drafter, draft model and oracle error rate it was learned with */
    double learned_accept[KITE_MAX_DRAFT];
    int32_t learned_observed[KITE_MAX_DRAFT];
    double learned_draft_ms;                /* and its drafting cost: per drafted token, or (DFlash) */
    double learned_block_ms[KITE_N_BLOCK_POINTS], learned_block_scale; /* its block curve and the ratio to it */
    /* Grammar masks: the vocabulary's byte trie, built by the first kite_grammar_open (under vocab_lock). */
    pthread_mutex_t vocab_lock;
    struct kite_vocab_index *vocab_index;
};

/* A grammar bound to a model (engine/grammar.c). */
struct kite_grammar {
    const kite_model *model;
    struct kite_gbnf *gbnf;
    const struct kite_vocab_index *vocab;   /* the model's */
};

enum { KITE_PREFILL_CHUNK = 64 }; /* tokens per forward pass while processing a prompt */
enum { KITE_MAX_END_TEXT = 8 };    /* end-token spellings a generation watches for (skip_special) */

/* A generation under way: kite_generate's loop, or work queued by kite_session_start for
 * kite_batch_step. */
typedef struct kite_generation {
    bool active;                /* begun and not ended */
    bool busy;                  /* kite_session_start work not finished */
    kite_gen_params params;     /* the caller's (its arrays borrowed) */
    kite_token_fn on_token;
    void *user_data;
    char pending[256];          /* bytes of an incomplete UTF-8 character carried to the next token */
    size_t n_pending;
    char *held;                 /* [cap_held] complete text held back while it may begin a stop string */
    const char *end_text[KITE_MAX_END_TEXT]; /* params.skip_special: end tokens' spellings (the tokenizer's), stops too */
    size_t end_text_len[KITE_MAX_END_TEXT];
    int32_t n_end_text;
    size_t n_held, cap_held;
    int32_t prev;               /* the token before, for SentencePiece's leading-space rule */
    int64_t generated;
    double t_start, t_first;    /* ms (kite_now_ms) */
    bool stop;                  /* an end token, max_tokens, a stop string, or the callback said so */
    kite_finish_reason finish;
    const float *cur_logits;    /* [n_vocab] raw logits of the token being delivered (inside the callback) */
    int32_t cur_id;
    float *sample_buf;          /* [n_vocab] */
    kite_error error;           /* a failure inside emission (out of memory) */
    kite_error result;          /* status of the latest ended generation */
    struct kite_gmask *gmask;   /* params.grammar's matcher and mask cache for this generation, or NULL */
    int32_t gstate;             /* matcher state after the text generated so far (KITE_GSTATE_ENDED after an end token) */
    /* kite_session_start: the prompt queued for batch steps. */
    int32_t *queue;             /* [cap_queue] */
    size_t n_queue, queue_done, cap_queue;
    int64_t prompt_tokens;      /* the caller's ids among the queue (a waiting token is not counted) */
    double t_queued;            /* ms */
    bool need_first;            /* the first token is to be sampled from the existing logits */
} kite_generation;

/* Target hidden states a learned drafter reads (EAGLE-3, DFlash): for each committed position p in
 * [pos0, pos0 + n), the captured inputs of the drafter's layers (kite_forward_scratch.capture_layer),
 * width = n_capture * dim floats, capture k of a row at row + k * dim. Kept for the accepted path only:
 * a verification pass appends the rows of the nodes the walk accepted, in order; a truncation below
 * pos0 + n drops the rows past it. The drafter consumes rows with kite_features_drop_before. */
typedef struct kite_features {
    int32_t width;   /* floats per position; 0: nothing is captured (no learned drafter) */
    int32_t pos0;    /* position of rows[0] */
    int32_t n;       /* positions held */
    int32_t cap;     /* positions rows has room for */
    float *rows;     /* [cap][width] */
} kite_features;

/* Starts (n > 0) or stops capturing the inputs of the given target layers (kite_forward_scratch_set_capture)
 * in every later pass of the session; the feature rows start empty at the current context length. */
int kite_session_set_capture(struct kite_session *s, const int32_t *layers, int32_t n, kite_error *e);
/* Appends captured rows (captured[r * width], as kite_forward_scratch.captured) of batch rows
 * rows[0..count) (NULL: 0..count-1) as the positions from s->n_past on. Rows that do not follow the
 * held ones (positions were run without capture in between) replace them. */
int kite_session_features_append(struct kite_session *s, const float *captured, const int32_t *rows, int32_t count,
                                 kite_error *e);
/* Forgets the feature rows of positions below pos (the drafter has consumed them). */
void kite_features_drop_before(kite_features *f, int32_t pos);
/* Forgets the feature rows of positions at or past n_past. */
void kite_features_truncate(kite_features *f, int32_t n_past);

/* One pass of a generating session: the drafted tree and its timing. */
typedef struct kite_pass {
    kite_draft_tree tree;
    int32_t budget;             /* drafted tokens asked of the drafter */
    int32_t forced;             /* > 0: the tree is this many tokens of the grammar's forced text, not the drafter's */
    int32_t pos0;               /* committed context before the pass */
    double t0, t1;              /* drafting start and end, ms */
    const float *captured;      /* the verification pass's captured hidden states (kite_forward_scratch.captured of
                                   the scratch that ran it, at the pass's first row), or NULL: none */
} kite_pass;

struct kite_session {
    kite_model *model;
    kite_kv_cache kv;
    kite_forward_scratch scratch;
    kite_pool *pool;
    bool pool_borrowed;      /* a draft session runs on its target's pool */
    int32_t n_ctx;
    int32_t n_past;          /* tokens whose K/V are in the cache */
    int32_t *history;        /* [n_ctx] the tokens at positions 0..n_past-1 */
    float *logits;           /* [n_vocab] after the last token of the context */
    bool have_logits;
    int32_t unfed_token;     /* generated last and not yet run through the model, or -1 */
    atomic_bool cancel;
    kite_stats stats;
    double last_prompt_ms;   /* duration of the latest kite_prompt, counted into the next ttft */
    kite_spec_state spec;    /* drafter and budget controller (drafter NONE: plain decoding) */
    float *tree_logits;      /* [KITE_MAX_DRAFT + 1][n_vocab] target logits of a verification pass */
    kite_features features;  /* target hidden states of committed positions, for a learned drafter */
    kite_generation gen;
};

/* Session files (session_file.c). What a file must match to load into a session. */
enum { KITE_SESSION_HEADER_BYTES = 48 };
typedef struct kite_session_file_shape {
    uint64_t fingerprint;   /* kite_model_fingerprint of the session's model */
    kite_kv_type kv_type;
    int32_t n_layers, n_kv_heads, head_dim, n_vocab; /* n_kv_heads, head_dim: the global layers' (Gemma 4's local
                                                        layers differ; the fingerprint covers them) */
    uint64_t token_row_bytes; /* K bytes of one token over every layer and KV head; 0: n_layers x n_kv_heads rows of
                                 head_dim */
    uint64_t dn_bytes;      /* the recurrent state after the K/V (Qwen3.5's DeltaNet layers, kite_dn_state), or 0 */
    /* LFM2: layers that are conv layers (no K/V rows in the file) and what each keeps instead: the conv rows
     * (conv_dim f32) of the last conv_keep positions (the taps' window, conv_taps - 1). 0 elsewhere. */
    int32_t n_conv_layers, conv_dim, conv_keep;
} kite_session_file_shape;
typedef struct kite_session_file_view {
    int32_t n_tokens;
    const unsigned char *tokens; /* [n_tokens] int32, little-endian, unaligned */
    const unsigned char *kv;     /* K then V: [attention layers][n_kv_heads][n_tokens][head_dim] elements each, then
                                    [n_conv_layers][min(n_tokens, conv_keep)][conv_dim] f32 conv rows */
    const unsigned char *dn;     /* dn_bytes of recurrent state (its four-int32 header checked), or NULL */
} kite_session_file_view;
/* A hash of the model's shape, tensor table and a sample of every tensor's bytes. */
uint64_t kite_model_fingerprint(const kite_model *m);
/* KITE_OK for a model; for a drafter (a DFlash drafter or an EAGLE-3 head, which only draft for a target)
 * the error that says so and how to use it, for whatever needs a model to run (sessions, tokenizer, template). */
int kite_model_refuse_drafter(const kite_model *m, kite_error *e);
/* Validates a whole session file held in memory against x (and at most max_tokens tokens); out points into data. */
int kite_session_file_parse(const void *data, size_t size, const kite_session_file_shape *x, int32_t max_tokens,
                            kite_session_file_view *out, kite_error *e);

/* For engine/batch.c (session.c). */
int kite_session_prompt_done(kite_session *s, kite_error *e);
void kite_session_gen_first(kite_session *s);
int kite_session_pass_draft(kite_session *s, int32_t max_nodes, kite_pass *ps, kite_error *e);
void kite_session_pass_walk(kite_session *s, kite_pass *ps, const float *tree_logits);
void kite_session_gen_end(kite_session *s, int st, const kite_error *e);

/* Runs ids as a chain after the context (no checks); logits, if not NULL, gets one row per id. */
int kite_session_run_chain(kite_session *s, const int32_t *ids, size_t n, float *logits, kite_error *e);

double kite_now_ms(void);

#endif
