/* Continuous batching: one forward pass over many sessions of one model per step. Each generating
 * session contributes its next decoding pass (the unfed token, or its drafted chain or tree) and each
 * prefilling session a chunk of its queued prompt; kite_forward_multi runs them all at once, every row
 * over its own session's cache. The kernels are batch-invariant, so each session's logits, and so its
 * tokens, are bit-identical to what kite_prompt and kite_generate give it alone. */
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"

/* What one session does in a step. */
typedef enum step_kind { STEP_NONE = 0, STEP_DECODE, STEP_PREFILL } step_kind;

typedef struct step_work {
    step_kind kind;
    kite_pass pass;      /* STEP_DECODE: the drafted tree */
    int32_t chunk;       /* STEP_PREFILL: prompt tokens in this step */
    bool prompt_ends;    /* STEP_PREFILL: the chunk ends the queued prompt (its last row has logits) */
} step_work;

struct kite_batch {
    kite_model *model;
    int32_t max_tokens;          /* rows per pass */
    int32_t n_ctx;               /* largest session context it steps */
    kite_forward_scratch scratch; /* [max_tokens rows] */
    kite_pool *pool;
    float *logits;               /* [max_tokens][n_vocab] the pass's logits rows */
    step_work *work;             /* [cap_sessions] */
    kite_forward_seq *seqs;      /* [cap_sessions] */
    size_t cap_sessions;
};

/* Whether the batch's pass captures what session s's learned drafter reads (the same layers). */
static bool captures_for(const kite_batch *b, const kite_session *s) {
    const kite_forward_scratch *own = &s->scratch;
    return s->features.width > 0 && own->n_capture > 0 && own->n_capture == b->scratch.n_capture &&
           !memcmp(own->capture_layer, b->scratch.capture_layer, sizeof *own->capture_layer * (size_t)own->n_capture);
}

/* Sets the pass's capture to the layers the sessions' learned drafters (EAGLE-3, DFlash) read, or to
 * none (no cost) when no session reads any. Sessions that share a drafter (kite serve) read the same
 * layers; a session whose drafter reads others gets no rows this step, which its drafter sees as a
 * gap in the rows (it restarts them), never as wrong rows. */
static void capture_for_step(kite_batch *b, kite_session *const *sessions, size_t n) {
    const kite_forward_scratch *want = NULL;
    for (size_t i = 0; i < n && !want; i++)
        if (sessions[i] && sessions[i]->gen.busy && sessions[i]->features.width > 0 && sessions[i]->scratch.n_capture > 0)
            want = &sessions[i]->scratch;
    if (!want) {
        if (b->scratch.n_capture) (void)kite_forward_scratch_set_capture(&b->scratch, &b->model->weights.hp, NULL, 0, NULL);
        return;
    }
    if (want->n_capture == b->scratch.n_capture &&
        !memcmp(want->capture_layer, b->scratch.capture_layer, sizeof *want->capture_layer * (size_t)want->n_capture))
        return;
    kite_error e = {0};
    if (kite_forward_scratch_set_capture(&b->scratch, &b->model->weights.hp, want->capture_layer, want->n_capture, &e))
        kite_log(KITE_LOG_WARN, "batch: hidden states not captured: %s", e.msg); /* n_capture is 0 again: no rows */
}

kite_batch_params kite_batch_default_params(void) {
    kite_batch_params p = {0};
    return p;
}

int kite_batch_open(kite_batch **out, kite_model *model, const kite_batch_params *params, char *err, size_t err_size) {
    kite_error e = {0};
    kite_batch_params defaults = kite_batch_default_params();
    if (!params) params = &defaults;
    if (out) *out = NULL;
    if (!out || !model)
        return kite_fail(&e, KITE_ERR_INVALID_ARG, "kite_batch_open: batch and model must not be NULL"), kite_error_export(&e, err, err_size);
    if (model->vocab_only)
        return kite_fail(&e, KITE_ERR_INVALID_ARG, "kite_batch_open: the model was opened with vocab_only"),
               kite_error_export(&e, err, err_size);
    if (params->max_tokens < 0 || params->max_tokens > 4096)
        return kite_fail(&e, KITE_ERR_INVALID_ARG, "batch max_tokens %d is out of range (0..4096)", params->max_tokens),
               kite_error_export(&e, err, err_size);
    if (params->n_ctx < 0 || params->n_ctx > (1 << 22))
        return kite_fail(&e, KITE_ERR_INVALID_ARG, "batch context %d is out of range (0..%d)", params->n_ctx, 1 << 22),
               kite_error_export(&e, err, err_size);
    if (params->n_threads < 0 || params->n_threads > 1024)
        return kite_fail(&e, KITE_ERR_INVALID_ARG, "thread count %d is out of range (0..1024)", params->n_threads),
               kite_error_export(&e, err, err_size);
    kite_batch *b = calloc(1, sizeof *b);
    if (!b) return kite_fail(&e, KITE_ERR_NOMEM, "out of memory"), kite_error_export(&e, err, err_size);
    b->model = model;
    /* Room for a prompt chunk and a few full drafts by default; kite_batch_step grows nothing. */
    b->max_tokens = params->max_tokens > 0 ? params->max_tokens : 256;
    b->n_ctx = params->n_ctx > 0 ? params->n_ctx : 4096;
    int32_t n_threads = params->n_threads > 0 ? params->n_threads : model->n_threads;
    const kite_hparams *hp = &model->weights.hp;
    int st = kite_forward_scratch_init(&b->scratch, hp, b->max_tokens, n_threads, b->n_ctx, &e);
    if (!st) {
        b->pool = kite_pool_new(n_threads);
        b->logits = malloc(sizeof(float) * (size_t)b->max_tokens * (size_t)model->n_vocab);
        if (!b->pool || !b->logits) st = kite_fail(&e, KITE_ERR_NOMEM, "out of memory for a batch of %d tokens", b->max_tokens);
    }
    if (st) {
        kite_batch_free(b);
        return kite_error_export(&e, err, err_size);
    }
    *out = b;
    return KITE_OK;
}

void kite_batch_free(kite_batch *b) {
    if (!b) return;
    kite_forward_scratch_free(&b->scratch);
    kite_pool_free(b->pool);
    free(b->logits);
    free(b->work);
    free(b->seqs);
    free(b);
}

/* Ends s's work with status st and message e (st may be KITE_OK). */
static void end_work(kite_session *s, int st, const kite_error *e) { kite_session_gen_end(s, st, e); }

int kite_batch_step(kite_batch *b, kite_session *const *sessions, size_t n, char *err, size_t err_size) {
    kite_error e = {0};
    if (!b || (n && !sessions))
        return kite_fail(&e, KITE_ERR_INVALID_ARG, "kite_batch_step: batch and sessions must not be NULL"),
               kite_error_export(&e, err, err_size);
    for (size_t i = 0; i < n; i++) {
        const kite_session *s = sessions[i];
        if (!s) continue;
        if (s->model != b->model)
            return kite_fail(&e, KITE_ERR_INVALID_ARG, "kite_batch_step: session %zu belongs to another model", i),
                   kite_error_export(&e, err, err_size);
        if (s->n_ctx > b->n_ctx)
            return kite_fail(&e, KITE_ERR_INVALID_ARG, "kite_batch_step: session %zu has a context of %d, the batch was opened for %d",
                             i, s->n_ctx, b->n_ctx),
                   kite_error_export(&e, err, err_size);
        for (size_t j = 0; j < i; j++)
            if (sessions[j] == s)
                return kite_fail(&e, KITE_ERR_INVALID_ARG, "kite_batch_step: session %zu is listed twice", i),
                       kite_error_export(&e, err, err_size);
    }
    if (n > b->cap_sessions) {
        step_work *work = realloc(b->work, n * sizeof *work);
        if (work) b->work = work;
        kite_forward_seq *seqs = realloc(b->seqs, n * sizeof *seqs);
        if (seqs) b->seqs = seqs;
        if (!work || !seqs) return kite_fail(&e, KITE_ERR_NOMEM, "out of memory"), kite_error_export(&e, err, err_size);
        b->cap_sessions = n;
    }
    step_work *work = b->work;
    memset(work, 0, n * sizeof *work);
    int32_t rows_left = b->max_tokens;

    /* Decoding passes first: a generating session's next token never waits behind a prompt. */
    for (size_t i = 0; i < n; i++) {
        kite_session *s = sessions[i];
        if (!s || !s->gen.busy) continue;
        kite_generation *g = &s->gen;
        kite_error se = {0};
        if (atomic_load(&s->cancel)) {
            atomic_store(&s->cancel, false);
            kite_fail(&se, KITE_ERR_CANCELLED, "cancelled");
            end_work(s, se.status, &se);
            continue;
        }
        if (g->queue_done < g->n_queue) continue; /* still prefilling: below */
        if (g->need_first) {
            g->need_first = false;
            kite_session_gen_first(s);
        }
        if (g->stop) {
            end_work(s, KITE_OK, NULL);
            continue;
        }
        if (rows_left < 1) continue; /* waits for the next step */
        if (kite_session_pass_draft(s, rows_left, &work[i].pass, &se)) {
            end_work(s, se.status, &se);
            continue;
        }
        work[i].kind = STEP_DECODE;
        rows_left -= work[i].pass.tree.n;
    }
    /* Prompt chunks fill the rest, first session first. */
    for (size_t i = 0; i < n && rows_left > 0; i++) {
        kite_session *s = sessions[i];
        if (!s || !s->gen.busy || work[i].kind != STEP_NONE) continue;
        kite_generation *g = &s->gen;
        size_t left = g->n_queue - g->queue_done;
        if (left == 0) continue;
        work[i].kind = STEP_PREFILL;
        work[i].chunk = left < (size_t)rows_left ? (int32_t)left : rows_left;
        if (work[i].chunk > KITE_KV_MAX_PASS) work[i].chunk = KITE_KV_MAX_PASS; /* a sliding-window ring's slack */
        work[i].prompt_ends = (size_t)work[i].chunk == left;
        rows_left -= work[i].chunk;
    }

    /* One pass over every session's rows. */
    int32_t n_seqs = 0;
    for (size_t i = 0; i < n; i++) {
        kite_session *s = sessions[i];
        if (work[i].kind == STEP_DECODE) {
            kite_draft_tree *t = &work[i].pass.tree;
            b->seqs[n_seqs++] = (kite_forward_seq){
                .kv = &s->kv, .tokens = t->token, .parent = t->n > 1 ? t->parent : NULL, .first = 0, .n = t->n,
                .pos0 = work[i].pass.pos0, .want_logits = KITE_LOGITS_ALL,
            };
        } else if (work[i].kind == STEP_PREFILL) {
            b->seqs[n_seqs++] = (kite_forward_seq){
                .kv = &s->kv, .tokens = s->gen.queue + s->gen.queue_done, .parent = NULL, .first = 0, .n = work[i].chunk,
                .pos0 = s->n_past, .want_logits = work[i].prompt_ends ? KITE_LOGITS_LAST : KITE_LOGITS_NONE,
            };
        }
    }
    if (n_seqs == 0) return KITE_OK;
    capture_for_step(b, sessions, n);
    kite_forward_multi(&b->model->weights, &b->scratch, b->pool, b->seqs, n_seqs, b->logits);

    /* Each session takes its rows of logits, in the order of the sequences, and its captured rows. */
    const float *row = b->logits;
    size_t V = (size_t)b->model->n_vocab;
    int32_t token_row = 0; /* the session's first row of the pass */
    for (size_t i = 0; i < n; i++) {
        kite_session *s = sessions[i];
        kite_generation *g = s ? &s->gen : NULL;
        const float *captured = NULL;
        if (work[i].kind != STEP_NONE && captures_for(b, s))
            captured = b->scratch.captured + (size_t)token_row * (size_t)s->features.width;
        if (work[i].kind == STEP_DECODE) {
            token_row += work[i].pass.tree.n;
            work[i].pass.captured = captured;
            kite_session_pass_walk(s, &work[i].pass, row);
            row += (size_t)work[i].pass.tree.n * V;
            if (g->stop || g->error.status) end_work(s, KITE_OK, NULL);
        } else if (work[i].kind == STEP_PREFILL) {
            token_row += work[i].chunk;
            kite_error fe = {0};
            if (kite_session_features_append(s, captured, NULL, work[i].chunk, &fe)) /* the drafter finds rows missing */
                kite_log(KITE_LOG_WARN, "%s", fe.msg);
            memcpy(s->history + s->n_past, g->queue + g->queue_done, sizeof(int32_t) * (size_t)work[i].chunk);
            s->n_past += work[i].chunk;
            g->queue_done += (size_t)work[i].chunk;
            if (!work[i].prompt_ends) continue;
            memcpy(s->logits, row, sizeof(float) * V);
            row += V;
            s->have_logits = true;
            kite_error se = {0};
            if (kite_session_prompt_done(s, &se)) {
                end_work(s, se.status, &se);
                continue;
            }
            if (g->stop || g->error.status) end_work(s, KITE_OK, NULL);
        }
    }
    return KITE_OK;
}
