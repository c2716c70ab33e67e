/* Sessions: the context (KV cache and token history), prompt processing, generation, statistics. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/engine.h"
#include "grammar/mask.h"
#include "sample/sampler.h"

double kite_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

kite_session_params kite_session_default_params(void) {
    kite_session_params p = {0};
    return p;
}

int kite_session_open(kite_session **out, kite_model *model, const kite_session_params *params, char *err, size_t err_size) {
    kite_error e = {0};
    kite_session_params defaults = kite_session_default_params();
    if (!params) params = &defaults;
    if (out) *out = NULL;
    if (!out || !model) {
        kite_fail(&e, KITE_ERR_INVALID_ARG, "kite_session_open: session and model must not be NULL");
        return kite_error_export(&e, err, err_size);
    }
    if (kite_model_refuse_drafter(model, &e)) return kite_error_export(&e, err, err_size);
    if (model->vocab_only) {
        kite_fail(&e, KITE_ERR_INVALID_ARG, "kite_session_open: the model was opened with vocab_only");
        return kite_error_export(&e, err, err_size);
    }
    const kite_hparams *hp = &model->weights.hp;
    int32_t n_ctx = params->n_ctx > 0 ? params->n_ctx : (hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096);
    if (!kite_kv_type_name(params->kv_type)) {
        kite_fail(&e, KITE_ERR_INVALID_ARG, "KV cache type %d is not one of KITE_KV_F16, F32, Q8_0, Q4_0", (int)params->kv_type);
        return kite_error_export(&e, err, err_size);
    }
    if (params->n_ctx < 0 || n_ctx > (1 << 22)) {
        kite_fail(&e, KITE_ERR_INVALID_ARG, "context size %d is out of range (1..%d)", params->n_ctx, 1 << 22);
        return kite_error_export(&e, err, err_size);
    }
    if (params->n_threads < 0 || params->n_threads > 1024) {
        kite_fail(&e, KITE_ERR_INVALID_ARG, "thread count %d is out of range (0..1024)", params->n_threads);
        return kite_error_export(&e, err, err_size);
    }
    int32_t n_threads = params->n_threads > 0 ? params->n_threads : model->n_threads;
    kite_session *s = calloc(1, sizeof *s);
    if (!s) {
        kite_fail(&e, KITE_ERR_NOMEM, "out of memory");
        return kite_error_export(&e, err, err_size);
    }
    s->model = model;
    s->n_ctx = n_ctx;
    s->unfed_token = -1;
    int st = kite_kv_cache_init(&s->kv, hp, n_ctx, params->kv_type, &e);
    if (!st) st = kite_forward_scratch_init(&s->scratch, hp, KITE_PREFILL_CHUNK, n_threads, n_ctx, &e);
    if (!st) {
        s->pool = kite_pool_new(n_threads);
        s->history = calloc((size_t)n_ctx + 1, sizeof *s->history); /* + a generated token not yet run */
        s->logits = calloc((size_t)hp->n_vocab, sizeof *s->logits);
        s->tree_logits = malloc(sizeof(float) * (size_t)hp->n_vocab * (KITE_MAX_DRAFT + 1));
        if (!s->pool || !s->history || !s->logits || !s->tree_logits)
            st = kite_fail(&e, KITE_ERR_NOMEM, "out of memory for a session");
    }
    if (st) {
        kite_session_free(s);
        return kite_error_export(&e, err, err_size);
    }
    *out = s;
    return KITE_OK;
}

void kite_session_free(kite_session *s) {
    if (!s) return;
    kite_spec_free(&s->spec);
    if (!s->pool_borrowed) kite_pool_free(s->pool);
    kite_kv_cache_free(&s->kv);
    kite_forward_scratch_free(&s->scratch);
    free(s->history);
    free(s->logits);
    free(s->tree_logits);
    free(s->gen.sample_buf);
    free(s->gen.held);
    free(s->gen.queue);
    kite_gmask_free(s->gen.gmask);
    free(s->features.rows);
    free(s);
}

void kite_session_reset(kite_session *s) {
    if (!s) return;
    kite_spec_remember(&s->spec, s->history, (size_t)s->n_past);
    s->n_past = 0;
    (void)kite_kv_can_rewind(&s->kv, 0); /* forgets the rings' history */
    kite_features_truncate(&s->features, 0);
    s->unfed_token = -1;
    s->have_logits = false;
    memset(&s->stats, 0, sizeof s->stats);
    atomic_store(&s->cancel, false);
    if (s->gen.busy) {
        kite_error e = {0};
        kite_fail(&e, KITE_ERR_CANCELLED, "the session was reset");
        kite_session_gen_end(s, e.status, &e);
    }
    s->gen.finish = KITE_FINISH_NONE;
}

/* Features (engine.h): rows of positions at or past n_past are forgotten. */
void kite_features_truncate(kite_features *f, int32_t n_past) {
    if (n_past <= f->pos0) {
        f->pos0 = n_past;
        f->n = 0;
    } else if (n_past < f->pos0 + f->n) {
        f->n = n_past - f->pos0;
    }
}

void kite_features_drop_before(kite_features *f, int32_t pos) {
    int32_t drop = pos - f->pos0;
    if (drop <= 0) return;
    if (drop >= f->n) {
        f->pos0 = pos;
        f->n = 0;
        return;
    }
    memmove(f->rows, f->rows + (size_t)drop * (size_t)f->width, sizeof(float) * (size_t)(f->n - drop) * (size_t)f->width);
    f->pos0 = pos;
    f->n -= drop;
}

int kite_session_features_append(kite_session *s, const float *captured, const int32_t *rows, int32_t count, kite_error *e) {
    kite_features *f = &s->features;
    if (f->width == 0 || count <= 0 || !captured) return KITE_OK;
    if (f->n == 0 || f->pos0 + f->n != s->n_past) {
        f->pos0 = s->n_past;
        f->n = 0;
    }
    if (f->n + count > f->cap) {
        int32_t cap = f->cap ? f->cap : 64;
        while (cap < f->n + count) cap *= 2;
        float *grown = realloc(f->rows, sizeof(float) * (size_t)cap * (size_t)f->width);
        if (!grown) return kite_fail(e, KITE_ERR_NOMEM, "out of memory for %d positions of hidden states", (int)cap);
        f->rows = grown;
        f->cap = cap;
    }
    for (int32_t i = 0; i < count; i++)
        memcpy(f->rows + (size_t)(f->n + i) * (size_t)f->width,
               captured + (size_t)(rows ? rows[i] : i) * (size_t)f->width, sizeof(float) * (size_t)f->width);
    f->n += count;
    return KITE_OK;
}

int kite_session_set_capture(kite_session *s, const int32_t *layers, int32_t n, kite_error *e) {
    int st = kite_forward_scratch_set_capture(&s->scratch, &s->model->weights.hp, layers, n, e);
    if (st) return st;
    s->features.width = n * s->model->weights.hp.dim;
    s->features.pos0 = s->n_past;
    s->features.n = 0;
    free(s->features.rows);
    s->features.rows = NULL;
    s->features.cap = 0;
    return KITE_OK;
}

/* Rebuilds the cache for s->history[0, n) by running it again from position 0 (the rings forgotten). */
static int rerun_prefix(kite_session *s, int32_t n, kite_error *e) {
    int32_t *ids = malloc(sizeof *ids * (size_t)(n > 0 ? n : 1));
    if (!ids) return kite_fail(e, KITE_ERR_NOMEM, "out of memory");
    memcpy(ids, s->history, sizeof *ids * (size_t)n);
    s->n_past = 0;
    (void)kite_kv_can_rewind(&s->kv, 0);
    int st = n > 0 ? kite_session_run_chain(s, ids, (size_t)n, NULL, e) : KITE_OK;
    free(ids);
    return st;
}

int kite_session_truncate(kite_session *s, int32_t n_past, char *err, size_t err_size) {
    kite_error e = {0};
    if (!s) return kite_fail(&e, KITE_ERR_INVALID_ARG, "session must not be NULL"), kite_error_export(&e, err, err_size);
    /* A generated token not yet run counts as part of the context. */
    int32_t visible = s->n_past + (s->unfed_token >= 0 ? 1 : 0);
    if (n_past < 0 || n_past > visible)
        return kite_fail(&e, KITE_ERR_INVALID_ARG, "cannot truncate to %d tokens: the context holds %d", n_past, visible),
               kite_error_export(&e, err, err_size);
    if (n_past == visible) return KITE_OK;
    s->unfed_token = -1;
    kite_features_truncate(&s->features, n_past);
    /* The K/V rows past n_past stay in memory but are never read: attention only looks below the
     * current position, and new tokens overwrite them. A sliding-window ring that no longer holds the
     * window before n_past (the session went on for more than the ring's slack) is rebuilt by running
     * the history again from the start: exact, at the cost of a prefill. */
    s->have_logits = false;
    if (kite_kv_can_rewind(&s->kv, n_past)) {
        s->n_past = n_past;
        return KITE_OK;
    }
    int st = rerun_prefix(s, n_past, &e);
    s->have_logits = false; /* as after any truncation: the next prompt gives at least one token */
    return st ? kite_error_export(&e, err, err_size) : KITE_OK;
}

int32_t kite_session_n_past(const kite_session *s) { return s ? s->n_past + (s->unfed_token >= 0 ? 1 : 0) : 0; }
int32_t kite_session_n_ctx(const kite_session *s) { return s ? s->n_ctx : 0; }

void kite_cancel(kite_session *s) {
    if (s) atomic_store(&s->cancel, true);
}

static int check_tokens(const kite_session *s, const int32_t *ids, size_t n, kite_error *e) {
    if (n && !ids) return kite_fail(e, KITE_ERR_INVALID_ARG, "token ids must not be NULL");
    int32_t n_vocab = s->model->weights.hp.n_vocab;
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= n_vocab)
            return kite_fail(e, KITE_ERR_INVALID_ARG, "token id %d at index %zu is outside the vocabulary (0..%d)", ids[i], i,
                             n_vocab - 1);
    if ((size_t)s->n_past + n > (size_t)s->n_ctx)
        return kite_fail(e, KITE_ERR_CONTEXT_FULL, "%zu tokens do not fit in the context: %d of %d positions are free", n,
                         s->n_ctx - s->n_past, s->n_ctx);
    return KITE_OK;
}


/* Runs the token generated last, if it has not been run yet. */
static int feed_unfed(kite_session *s, kite_error *e) {
    if (s->unfed_token < 0) return KITE_OK;
    if (s->n_past >= s->n_ctx) return kite_fail(e, KITE_ERR_CONTEXT_FULL, "the context of %d tokens is full", s->n_ctx);
    int32_t id = s->unfed_token;
    s->unfed_token = -1;
    return kite_session_run_chain(s, &id, 1, NULL, e);
}

/* Runs ids through the model in chunks; logits (if not NULL) get one row per id. */
int kite_session_run_chain(kite_session *s, const int32_t *ids, size_t n, float *all_logits, kite_error *e) {
    const kite_weights *w = &s->model->weights;
    int32_t n_vocab = w->hp.n_vocab;
    for (size_t done = 0; done < n;) {
        if (atomic_load(&s->cancel)) {
            atomic_store(&s->cancel, false);
            return kite_fail(e, KITE_ERR_CANCELLED, "cancelled");
        }
        int32_t chunk = (int32_t)(n - done < KITE_PREFILL_CHUNK ? n - done : KITE_PREFILL_CHUNK);
        bool last = done + (size_t)chunk == n;
        float *out = all_logits ? all_logits + done * (size_t)n_vocab : (last ? s->logits : NULL);
        kite_forward(w, &s->kv, &s->scratch, s->pool, ids + done, NULL, 0, chunk, s->n_past, out, all_logits != NULL);
        int st = kite_session_features_append(s, s->scratch.captured, NULL, chunk, e);
        if (st) return st;
        memcpy(s->history + s->n_past, ids + done, sizeof *ids * (size_t)chunk);
        s->n_past += chunk;
        done += (size_t)chunk;
        if (last && all_logits) memcpy(s->logits, out + (size_t)(chunk - 1) * n_vocab, sizeof(float) * (size_t)n_vocab);
    }
    if (n) s->have_logits = true;
    return KITE_OK;
}

int kite_prompt(kite_session *s, const int32_t *ids, size_t n_ids, char *err, size_t err_size) {
    kite_error e = {0};
    if (!s) return kite_fail(&e, KITE_ERR_INVALID_ARG, "session must not be NULL"), kite_error_export(&e, err, err_size);
    if (s->gen.busy)
        return kite_fail(&e, KITE_ERR_INVALID_ARG, "the session is busy with work queued by kite_session_start"),
               kite_error_export(&e, err, err_size);
    double t0 = kite_now_ms();
    int st = feed_unfed(s, &e);
    if (!st) st = check_tokens(s, ids, n_ids, &e);
    if (!st) st = kite_session_run_chain(s, ids, n_ids, NULL, &e);
    if (!st) st = kite_spec_catch_up(&s->spec, s, &e);
    if (!st) {
        s->stats.prompt_tokens += (int64_t)n_ids;
        s->last_prompt_ms = kite_now_ms() - t0;
        s->stats.prefill_ms += s->last_prompt_ms;
    }
    return kite_error_export(&e, err, err_size);
}

int kite_eval(kite_session *s, const int32_t *ids, size_t n_ids, float *logits, char *err, size_t err_size) {
    kite_error e = {0};
    if (!s || (!logits && n_ids))
        return kite_fail(&e, KITE_ERR_INVALID_ARG, "session and logits must not be NULL"), kite_error_export(&e, err, err_size);
    if (s->gen.busy)
        return kite_fail(&e, KITE_ERR_INVALID_ARG, "the session is busy with work queued by kite_session_start"),
               kite_error_export(&e, err, err_size);
    int st = feed_unfed(s, &e);
    if (!st) st = check_tokens(s, ids, n_ids, &e);
    if (!st) st = kite_session_run_chain(s, ids, n_ids, logits, &e);
    return kite_error_export(&e, err, err_size);
}

/* Length of the longest prefix of buf[0..n) that ends on a complete UTF-8 character (or holds an
 * invalid sequence, which is passed through rather than held forever). */
static size_t utf8_complete_prefix(const char *buf, size_t n) {
    size_t i = n, back = 0;
    while (i > 0 && back < 4) {
        unsigned char c = (unsigned char)buf[i - 1];
        if ((c & 0xC0) != 0x80) { /* a lead byte or ASCII */
            size_t need = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
            return back + 1 >= need ? n : i - 1;
        }
        i--;
        back++;
    }
    return n;
}

/* ---- generation: token emission -------------------------------------------------------------- */

/* Length of the longest suffix of text[0..n) that is a proper prefix of one of the stop strings: text
 * that may still become a stop string once more tokens arrive. */
static size_t stop_prefix_suffix(const kite_generation *g, const char *text, size_t n) {
    const kite_gen_params *p = &g->params;
    size_t best = 0;
    for (size_t i = 0; i < p->n_stop + (size_t)g->n_end_text; i++) {
        const char *stop = i < p->n_stop ? p->stop[i] : g->end_text[i - p->n_stop];
        size_t len = i < p->n_stop ? strlen(stop) : g->end_text_len[i - p->n_stop];
        size_t max = len - 1 < n ? len - 1 : n;
        for (size_t k = max; k > best; k--)
            if (!memcmp(text + n - k, stop, k)) {
                best = k;
                break;
            }
    }
    return best;
}

/* Offset of the earliest stop string in text[0..n), or n when none occurs. */
static size_t stop_find(const kite_generation *g, const char *text, size_t n) {
    const kite_gen_params *p = &g->params;
    size_t first = n;
    for (size_t i = 0; i < p->n_stop + (size_t)g->n_end_text; i++) {
        const char *stop = i < p->n_stop ? p->stop[i] : g->end_text[i - p->n_stop];
        size_t len = i < p->n_stop ? strlen(stop) : g->end_text_len[i - p->n_stop];
        const char *hit = memmem(text, n, stop, len);
        if (hit && (size_t)(hit - text) < first) first = (size_t)(hit - text);
    }
    return first;
}

static void deliver(kite_session *s, int32_t id, const char *text, size_t len) {
    kite_generation *g = &s->gen;
    if (g->on_token && !g->on_token(id, text, len, g->user_data)) {
        g->stop = true;
        if (g->finish == KITE_FINISH_NONE) g->finish = KITE_FINISH_CALLBACK;
    }
}

/* ---- generation: the grammar ----------------------------------------------------------------------- */

/* Moves the grammar's live state past token id (end: an end token; last: no token follows anyway).
 * Returns true when the text is complete and nothing can follow it (the grammar allows no further byte,
 * or no token of the vocabulary continues it); *failed on an error (g->error says which). Checking the
 * next mask here, not at the next sampling, lets this token's emission flush the held text. */
static bool grammar_advance(kite_session *s, int32_t id, bool end, bool last, bool *failed) {
    kite_generation *g = &s->gen;
    int32_t next = end ? KITE_GSTATE_ENDED : kite_gmask_advance(g->gmask, g->gstate, g->prev, id);
    if (next == KITE_GSTATE_LIMIT || next == KITE_GSTATE_DEAD) {
        const kite_error *me = kite_gmatch_error(kite_gmask_matcher(g->gmask));
        if (next == KITE_GSTATE_LIMIT && me && me->status) g->error = *me;
        else kite_fail(&g->error, KITE_ERR_INVALID_ARG, "grammar: token %d is not allowed after %lld generated tokens", id,
                       (long long)g->generated - 1);
        *failed = true;
        return false;
    }
    g->gstate = next;
    if (end || last) return false;
    if (kite_gmask_done(g->gmask, next)) return true;
    int32_t n_allowed = 0;
    if (!kite_gmask_allowed(g->gmask, next, id, &n_allowed, &g->error)) {
        *failed = true;
        return false;
    }
    if (n_allowed > 0) return false;
    if (kite_gmatch_accepting(kite_gmask_matcher(g->gmask), next)) return true;
    kite_fail(&g->error, KITE_ERR_UNSUPPORTED,
              "grammar: no token of the vocabulary continues the text after %lld generated tokens (the vocabulary lacks "
              "bytes the grammar needs next)",
              (long long)g->generated);
    *failed = true;
    return false;
}

/* Sets the logits of the tokens the grammar does not allow at the live state to -inf. False when none
 * is allowed (the generation is then over: grammar_advance or gen_begin has said why). */
static bool grammar_mask(kite_session *s, float *logits) {
    kite_generation *g = &s->gen;
    if (!g->gmask) return true;
    double t0 = kite_now_ms();
    int32_t n_allowed = 0;
    const uint64_t *bits = kite_gmask_allowed(g->gmask, g->gstate, g->prev, &n_allowed, &g->error);
    if (!bits || n_allowed == 0) {
        if (!bits) g->finish = KITE_FINISH_ERROR;
        else if (g->finish == KITE_FINISH_NONE) g->finish = KITE_FINISH_STOP;
        g->stop = true;
        return false;
    }
    kite_gmask_apply(bits, logits, s->model->n_vocab);
    s->stats.grammar_ms += kite_now_ms() - t0;
    return true;
}

static bool mask_for_walk(void *user_data, float *logits) { return grammar_mask(user_data, logits); }

/* Emits one generated token: counters, end and length checks, text assembly across UTF-8 boundaries,
 * stop strings, the callback. logits: the raw logits the token was chosen from (log-probabilities). */
static void emit(kite_session *s, int32_t id, const float *logits) {
    kite_generation *g = &s->gen;
    const kite_model *m = s->model;
    const kite_gen_params *gp = &g->params;
    g->generated++;
    if (g->generated == 1) {
        g->t_first = kite_now_ms();
        /* The prompt's processing plus the wait for this first token. */
        s->stats.ttft_ms = s->last_prompt_ms + (g->t_first - g->t_start);
        s->last_prompt_ms = 0;
    }
    bool end = !gp->ignore_eos && kite_tokenizer_is_eog(m->tokenizer, id);
    bool last = end || g->generated >= gp->max_tokens;
    char piece[256];
    /* Under skip_special, control tokens (BOS, <|im_start|>, ...) stand for no text, as end tokens never do. */
    bool silent = end || (gp->skip_special && kite_tokenizer_is_control(m->tokenizer, id));
    int32_t len = silent ? 0 : kite_tokenizer_piece(m->tokenizer, g->prev, id, piece, sizeof piece);
    if (len < 0) len = 0;
    if (len > (int32_t)sizeof piece) len = (int32_t)sizeof piece; /* no real token is this long */
    char text[512];
    memcpy(text, g->pending, g->n_pending);
    memcpy(text + g->n_pending, piece, (size_t)len);
    size_t total = g->n_pending + (size_t)len;
    size_t ready = last ? total : utf8_complete_prefix(text, total); /* the last token flushes what is held */
    g->n_pending = total - ready;
    if (g->n_pending > sizeof g->pending) g->n_pending = 0; /* cannot happen for valid text: drop, never overflow */
    memcpy(g->pending, text + ready, g->n_pending);
    bool grammar_done = false, grammar_failed = false;
    if (g->gmask) {
        double t0 = kite_now_ms();
        grammar_done = grammar_advance(s, id, end, last, &grammar_failed);
        s->stats.grammar_ms += kite_now_ms() - t0;
    }
    if (grammar_done || grammar_failed) {
        last = true;
        ready = total; /* flush what is held: nothing follows */
        g->n_pending = 0;
    }
    g->prev = id;
    /* The newest token is run lazily (by the next pass, prompt or generate call), so the last one of
     * a reply costs nothing unless the conversation goes on. */
    s->unfed_token = id;
    g->cur_logits = logits;
    g->cur_id = id;
    if (grammar_failed) g->finish = KITE_FINISH_ERROR;
    else if (end || grammar_done) g->finish = KITE_FINISH_STOP;
    else if (last) g->finish = KITE_FINISH_LENGTH;
    g->stop = last;

    if (gp->n_stop == 0 && g->n_end_text == 0) {
        deliver(s, id, text, ready);
    } else {
        /* Complete text joins what is held back; a stop string ends generation before it; text that
         * may still begin one stays held. */
        if (g->n_held + ready > g->cap_held || !g->held) { /* a first token of no text still needs the buffer */
            size_t cap = (g->n_held + ready) * 2 + 64;
            char *grown = realloc(g->held, cap);
            if (!grown) {
                kite_fail(&g->error, KITE_ERR_NOMEM, "out of memory holding text for stop strings");
                g->stop = true;
                g->finish = KITE_FINISH_ERROR;
                g->cur_logits = NULL;
                return;
            }
            g->held = grown;
            g->cap_held = cap;
        }
        memcpy(g->held + g->n_held, text, ready);
        g->n_held += ready;
        size_t at = stop_find(g, g->held, g->n_held);
        size_t out;
        if (at < g->n_held) {
            out = at;
            g->n_held = 0;
            g->stop = true;
            g->finish = KITE_FINISH_STOP;
        } else {
            out = last ? g->n_held : g->n_held - stop_prefix_suffix(g, g->held, g->n_held);
        }
        deliver(s, id, g->held, out);
        if (g->n_held >= out) {
            memmove(g->held, g->held + out, g->n_held - out);
            g->n_held -= out;
        }
    }
    g->cur_logits = NULL;
}

static bool emit_for_walk(void *user_data, int32_t token, const float *logits) {
    kite_session *s = user_data;
    emit(s, token, logits);
    return !s->gen.stop;
}

int kite_session_token_logprobs(const kite_session *s, kite_logprobs *out) {
    if (!s || !out || !s->gen.cur_logits || !s->gen.params.logprobs) return KITE_ERR_INVALID_ARG;
    const float *row = s->gen.cur_logits;
    int32_t V = s->model->n_vocab, id = s->gen.cur_id;
    float max = -INFINITY;
    for (int32_t t = 0; t < V; t++)
        if (row[t] > max) max = row[t];
    double sum = 0;
    for (int32_t t = 0; t < V; t++) sum += exp((double)row[t] - (double)max);
    double log_z = (double)max + log(sum);
    memset(out, 0, sizeof *out);
    out->id = id;
    out->logprob = (float)((double)row[id] - log_z);
    /* Top alternatives by insertion into a short sorted list (k <= 20): higher logit first, then the
     * lower id. */
    int32_t k = s->gen.params.top_logprobs;
    for (int32_t t = 0; t < V && k > 0; t++) {
        float v = row[t];
        int32_t n = out->n_top;
        if (n == k && !(v > out->top[n - 1].logprob)) continue;
        int32_t at = n < k ? n : k - 1;
        while (at > 0 && v > out->top[at - 1].logprob) {
            out->top[at] = out->top[at - 1];
            at--;
        }
        out->top[at].id = t;
        out->top[at].logprob = v;
        if (n < k) out->n_top++;
    }
    for (int32_t i = 0; i < out->n_top; i++) out->top[i].logprob = (float)((double)out->top[i].logprob - log_z);
    return KITE_OK;
}

/* ---- generation: passes ----------------------------------------------------------------------- */

/* The first half of a pass: draft a tree below the root (the unfed token). A tree with no children is
 * a plain decoding step. max_nodes caps the tree (root included) for a batch with little room left. */
static int pass_draft(kite_session *s, int32_t max_nodes, kite_pass *ps, kite_error *e) {
    kite_spec_state *sp = &s->spec;
    int32_t P = s->n_past;
    if (P >= s->n_ctx) return kite_fail(e, KITE_ERR_CONTEXT_FULL, "the context of %d tokens is full", s->n_ctx);
    int32_t room = s->n_ctx - P - 1; /* drafted nodes that fit after the root */
    int32_t max_budget = KITE_MAX_DRAFT < room ? KITE_MAX_DRAFT : room;
    if (max_budget > max_nodes - 1) max_budget = max_nodes - 1;
    if (max_budget < 0) max_budget = 0;
    kite_generation *g = &s->gen;
    ps->forced = 0;
    /* Under a grammar the drafter drafts only allowed tokens, from the live state after the root. */
    sp->gmask = g->gmask;
    sp->groot = g->gstate;
    if (g->gmask && sp->params.drafter != KITE_DRAFT_NONE && !sp->params.no_forced_drafts && max_budget > 0) {
        /* Text the grammar forces is drafted for free (the walk verifies it like any draft). */
        int32_t ids[KITE_MAX_DRAFT];
        ps->forced = kite_gmask_forced_tokens(g->gmask, g->gstate, s->unfed_token, ids, max_budget);
        if (ps->forced > 0) {
            /* A draft model continues after the forced text, within the room left. */
            ps->budget = sp->params.drafter == KITE_DRAFT_MODEL && max_budget > ps->forced
                             ? kite_spec_choose_budget(sp, s, max_budget - ps->forced)
                             : 0;
            ps->t0 = kite_now_ms(); /* after the choice, which may measure the cost curve */
            int rc = kite_spec_draft_after(sp, s, s->unfed_token, ids, ps->forced, ps->budget, &g->params, &ps->tree, e);
            if (rc) return rc;
        }
    }
    if (!ps->forced) {
        ps->budget = sp->params.drafter == KITE_DRAFT_NONE || max_budget == 0 ? 0 : kite_spec_choose_budget(sp, s, max_budget);
        ps->t0 = kite_now_ms();
        int rc = kite_spec_draft(sp, s, s->unfed_token, ps->budget, &g->params, &ps->tree, e);
        if (rc) return rc;
    }
    ps->t1 = kite_now_ms();
    ps->pos0 = P;
    ps->captured = NULL;
    s->unfed_token = -1;
    return KITE_OK;
}

/* The second half: walk the verified tree (tree_logits: the target's logits after each node): at each
 * node the target's token is sampled exactly as plain decoding would sample it at that position; the
 * walk moves to the child holding that token, else stops. Emits every token on the path and commits
 * the path's K/V. */
static void pass_walk(kite_session *s, kite_pass *ps, const float *tree_logits) {
    const kite_model *m = s->model;
    kite_spec_state *sp = &s->spec;
    kite_draft_tree *tree = &ps->tree;
    int32_t P = ps->pos0;
    int32_t path[KITE_MAX_DRAFT + 1];
    int32_t n_path = kite_spec_walk(sp, &s->gen.params, tree, tree_logits, m->n_vocab, s->history, P, s->gen.sample_buf,
                                    emit_for_walk, s->gen.gmask ? mask_for_walk : NULL, s, path);
    kite_kv_commit(&s->kv, m->weights.hp.n_layers, P, path, n_path);
    kite_error fe = {0};
    if (kite_session_features_append(s, ps->captured, path, n_path, &fe)) /* out of memory: the drafter finds its rows missing */
        kite_log(KITE_LOG_WARN, "%s", fe.msg);
    s->n_past = P + n_path;
    s->have_logits = false; /* the logits of the new root are not computed yet */
    if (sp->params.drafter != KITE_DRAFT_NONE) {
        kite_spec_commit(sp, tree, path, n_path, P);
        /* The grammar's forced text says nothing about the drafter: the controller does not learn from it. */
        if (!ps->forced) kite_spec_observe(sp, tree, path, n_path);
        if (ps->budget > 0) /* catching up is not drafting */
            kite_spec_observe_draft_cost(sp, ps->t1 - ps->t0 - sp->last_catch_up_ms, ps->budget);
        if (tree->n > 1 && !ps->forced) kite_spec_learned_store(sp, s->model); /* after both estimates moved */
        double t3 = kite_now_ms();
        s->stats.target_passes++;
        s->stats.drafted += tree->n - 1;
        s->stats.accepted += n_path - 1;
        s->stats.draft_ms += ps->t1 - ps->t0;
        s->stats.verify_ms += t3 - ps->t1;
        for (int32_t j = 1; j < tree->n; j++) s->stats.drafted_by_depth[tree->depth[j] - 1]++;
        for (int32_t i = 1; i < n_path; i++) s->stats.accepted_by_depth[i - 1]++;
    }
}

/* ---- generation: begin and end ------------------------------------------------------------------ */

static int gen_check(kite_session *s, const kite_gen_params *params, kite_error *e) {
    if (kite_gen_params_check(params, s->model->n_vocab, e->msg, sizeof e->msg)) return e->status = KITE_ERR_INVALID_ARG;
    if (params->max_tokens < 0) return kite_fail(e, KITE_ERR_INVALID_ARG, "max_tokens must be >= 0, got %d", params->max_tokens);
    if (s->gen.busy) return kite_fail(e, KITE_ERR_INVALID_ARG, "the session is busy with work queued by kite_session_start");
    if (params->grammar && params->grammar->model != s->model)
        return kite_fail(e, KITE_ERR_INVALID_ARG, "the grammar was opened for another model (its vocabulary may differ)");
    return KITE_OK;
}

static int gen_begin(kite_session *s, const kite_gen_params *params, kite_token_fn on_token, void *user_data, kite_error *e) {
    kite_generation *g = &s->gen;
    if (!g->sample_buf && !(g->sample_buf = malloc(sizeof(float) * (size_t)s->model->n_vocab)))
        return kite_fail(e, KITE_ERR_NOMEM, "out of memory");
    g->active = true;
    g->params = *params;
    g->on_token = on_token;
    g->user_data = user_data;
    g->n_pending = 0;
    g->n_held = 0;
    g->generated = 0;
    g->stop = false;
    g->finish = KITE_FINISH_NONE;
    g->cur_logits = NULL;
    memset(&g->error, 0, sizeof g->error);
    /* skip_special: the spellings of the end tokens end generation like stop strings, for a model that
     * writes its end marker in plain pieces ("<|" "end" "_story" "|>") before (or instead of) the token. */
    g->n_end_text = 0;
    if (params->skip_special && !params->ignore_eos) {
        int32_t eog[KITE_MAX_END_TEXT];
        int32_t n_eog = kite_tokenizer_eog_ids(s->model->tokenizer, eog, KITE_MAX_END_TEXT);
        for (int32_t i = 0; i < n_eog; i++) {
            size_t len = 0;
            const char *text = kite_tokenizer_token_text(s->model->tokenizer, eog[i], &len);
            /* Only marker-like spellings: a short or plain-word end token would cut ordinary text. */
            if (!text || len < 3 || !kite_tokenizer_is_control(s->model->tokenizer, eog[i])) continue;
            g->end_text[g->n_end_text] = text;
            g->end_text_len[g->n_end_text++] = len;
        }
    }
    g->t_start = kite_now_ms();
    g->t_first = 0;
    g->prev = s->unfed_token >= 0 ? s->unfed_token : s->n_past > 0 ? s->history[s->n_past - 1] : -1;
    s->spec.gen_start_pos = s->n_past + (s->unfed_token >= 0 ? 1 : 0);
    kite_gmask_free(g->gmask);
    g->gmask = NULL;
    if (params->grammar) {
        const kite_grammar *gr = params->grammar;
        int st = kite_gmask_new(gr->gbnf, gr->vocab, s->model->tokenizer, !params->ignore_eos, 0, &g->gmask, e);
        if (st) {
            g->active = false;
            return st;
        }
        g->gstate = kite_gmask_start(g->gmask);
        int32_t n_allowed = 0;
        if (g->gstate < 0) {
            const kite_error *me = kite_gmatch_error(kite_gmask_matcher(g->gmask));
            if (me && me->status) *e = *me;
            else kite_fail(e, KITE_ERR_INVALID_ARG, "grammar: no start state");
        } else if (!kite_gmask_allowed(g->gmask, g->gstate, g->prev, &n_allowed, e)) {
            /* e says why */
        } else if (n_allowed == 0 && !kite_gmatch_accepting(kite_gmask_matcher(g->gmask), g->gstate)) {
            kite_fail(e, KITE_ERR_UNSUPPORTED, "grammar: no token of the vocabulary can begin the text (the vocabulary lacks "
                                               "bytes the grammar needs first)");
        } else if (n_allowed == 0 || kite_gmask_done(g->gmask, g->gstate)) {
            g->stop = true; /* only the empty text is allowed */
            g->finish = KITE_FINISH_STOP;
        }
        if (e->status) {
            kite_gmask_free(g->gmask);
            g->gmask = NULL;
            g->active = false;
            return e->status;
        }
    }
    if (params->max_tokens == 0 && !g->stop) {
        g->stop = true;
        g->finish = KITE_FINISH_LENGTH;
    }
    return KITE_OK;
}

/* The first token comes from the prompt's logits (when no token is waiting to be run). */
static void gen_first(kite_session *s) {
    kite_generation *g = &s->gen;
    if (g->stop || s->unfed_token >= 0) return;
    int32_t V = s->model->n_vocab;
    memcpy(g->sample_buf, s->logits, sizeof(float) * (size_t)V);
    if (!grammar_mask(s, g->sample_buf)) return;
    emit(s, kite_sample(&g->params, g->sample_buf, V, s->history, (size_t)s->n_past, s->n_past), s->logits);
}

/* Ends the generation with status st (KITE_OK, or why it stopped early). */
static void gen_end(kite_session *s, int st, const kite_error *e) {
    kite_generation *g = &s->gen;
    double t_end = kite_now_ms();
    s->stats.generated_tokens += g->generated;
    if (g->generated > 1) s->stats.decode_ms += t_end - g->t_first;
    int64_t passes = s->stats.target_passes;
    s->stats.tau = passes > 0 ? (double)(s->stats.accepted + passes) / (double)passes : 0;
    if (g->error.status) {
        st = g->error.status;
        e = &g->error;
    }
    if (st == KITE_ERR_CANCELLED) g->finish = KITE_FINISH_CANCELLED;
    else if (st == KITE_ERR_CONTEXT_FULL) g->finish = KITE_FINISH_LENGTH;
    else if (st) g->finish = KITE_FINISH_ERROR;
    if (st && e) g->result = *e;
    else memset(&g->result, 0, sizeof g->result);
    g->active = false;
    g->busy = false;
    g->n_held = 0;
    if (g->gmask) {
        kite_gmask_stats gs;
        kite_gmask_get_stats(g->gmask, &gs);
        s->stats.grammar_masks += gs.computed;
        s->stats.grammar_mask_ms += gs.compute_ms;
        s->stats.grammar_mask_hits += gs.hits;
    }
    kite_gmask_free(g->gmask);
    g->gmask = NULL;
}

int kite_generate(kite_session *s, const kite_gen_params *params, kite_token_fn on_token, void *user_data, char *err,
                  size_t err_size) {
    kite_error e = {0};
    if (!s || !params)
        return kite_fail(&e, KITE_ERR_INVALID_ARG, "session and parameters must not be NULL"), kite_error_export(&e, err, err_size);
    if (gen_check(s, params, &e)) return kite_error_export(&e, err, err_size);
    if (s->unfed_token < 0 && !s->have_logits)
        return kite_fail(&e, KITE_ERR_INVALID_ARG, "kite_generate needs a context: call kite_prompt first"),
               kite_error_export(&e, err, err_size);
    if (gen_begin(s, params, on_token, user_data, &e)) return kite_error_export(&e, err, err_size);
    gen_first(s);
    int st = KITE_OK;
    while (!s->gen.stop) {
        if (atomic_load(&s->cancel)) {
            atomic_store(&s->cancel, false);
            st = kite_fail(&e, KITE_ERR_CANCELLED, "cancelled");
            break;
        }
        kite_pass ps;
        if ((st = pass_draft(s, KITE_MAX_DRAFT + 1, &ps, &e))) break;
        kite_forward(&s->model->weights, &s->kv, &s->scratch, s->pool, ps.tree.token, ps.tree.n > 1 ? ps.tree.parent : NULL, 0,
                     ps.tree.n, ps.pos0, s->tree_logits, true);
        ps.captured = s->scratch.captured;
        pass_walk(s, &ps, s->tree_logits);
    }
    gen_end(s, st, &e);
    return kite_error_export(st ? &e : &s->gen.error, err, err_size);
}

kite_finish_reason kite_session_finish_reason(const kite_session *s) { return s ? s->gen.finish : KITE_FINISH_NONE; }

uint64_t kite_session_kv_bytes(const kite_session *s) { return s ? (uint64_t)s->kv.bytes : 0; }

const int32_t *kite_session_tokens(const kite_session *s, int32_t *n) {
    if (!s) {
        if (n) *n = 0;
        return NULL;
    }
    /* history has room for n_ctx + 1 tokens: the unfed token sits at n_past <= n_ctx. */
    if (s->unfed_token >= 0) s->history[s->n_past] = s->unfed_token;
    if (n) *n = kite_session_n_past(s);
    return s->history;
}

const char *kite_kv_type_name(kite_kv_type type) {
    switch (type) {
    case KITE_KV_F16: return "f16";
    case KITE_KV_F32: return "f32";
    case KITE_KV_Q8_0: return "q8_0";
    case KITE_KV_Q4_0: return "q4_0";
    }
    return NULL;
}

bool kite_kv_type_from_name(const char *name, kite_kv_type *type) {
    static const kite_kv_type all[] = {KITE_KV_F16, KITE_KV_F32, KITE_KV_Q8_0, KITE_KV_Q4_0};
    for (size_t i = 0; name && i < sizeof all / sizeof *all; i++)
        if (!strcmp(name, kite_kv_type_name(all[i]))) {
            *type = all[i];
            return true;
        }
    return false;
}

int kite_session_copy_prefix(kite_session *dst, const kite_session *src, int32_t n_tokens, char *err, size_t err_size) {
    kite_error e = {0};
    if (!dst || !src) return kite_fail(&e, KITE_ERR_INVALID_ARG, "sessions must not be NULL"), kite_error_export(&e, err, err_size);
    if (dst == src) return kite_session_truncate(dst, n_tokens, err, err_size);
    if (dst->model != src->model)
        return kite_fail(&e, KITE_ERR_INVALID_ARG, "kite_session_copy_prefix: the sessions belong to different models"),
               kite_error_export(&e, err, err_size);
    if (dst->kv.type != src->kv.type)
        return kite_fail(&e, KITE_ERR_INVALID_ARG, "kite_session_copy_prefix: the sessions' KV caches differ in type"),
               kite_error_export(&e, err, err_size);
    /* A busy source is fine between batch steps: its committed rows do not move until its next pass. */
    if (dst->gen.busy)
        return kite_fail(&e, KITE_ERR_INVALID_ARG, "kite_session_copy_prefix: the destination session is busy"),
               kite_error_export(&e, err, err_size);
    int32_t visible = kite_session_n_past(src);
    if (n_tokens < 0 || n_tokens > visible || n_tokens > dst->n_ctx)
        return kite_fail(&e, KITE_ERR_INVALID_ARG, "cannot copy %d tokens: the source holds %d and the destination's context is %d",
                         n_tokens, visible, dst->n_ctx),
               kite_error_export(&e, err, err_size);
    /* Rows the source has run; its unfed token (if within the prefix) stays unfed in dst too. */
    int32_t rows = n_tokens < src->n_past ? n_tokens : src->n_past;
    memcpy(dst->history, src->history, sizeof(int32_t) * (size_t)rows);
    /* A source whose rings no longer hold the window before the prefix: dst runs the prefix itself. */
    kite_kv_cache probe = src->kv; /* kite_kv_can_rewind may reset ring_high of a copy only */
    if (!kite_kv_can_rewind(&probe, rows)) {
        dst->unfed_token = -1;
        dst->have_logits = false;
        if (rerun_prefix(dst, rows, &e)) return kite_error_export(&e, err, err_size);
    } else {
        kite_kv_copy_prefix(&dst->kv, &src->kv, rows);
    }
    dst->n_past = rows;
    dst->unfed_token = n_tokens > rows ? src->unfed_token : -1;
    dst->have_logits = false;
    return KITE_OK;
}

/* ---- continuous batching: queued work ---------------------------------------------------------- */

int kite_session_start(kite_session *s, const int32_t *ids, size_t n_ids, const kite_gen_params *params, kite_token_fn on_token,
                       void *user_data, char *err, size_t err_size) {
    kite_error e = {0};
    if (!s || !params)
        return kite_fail(&e, KITE_ERR_INVALID_ARG, "session and parameters must not be NULL"), kite_error_export(&e, err, err_size);
    if (gen_check(s, params, &e)) return kite_error_export(&e, err, err_size);
    if (check_tokens(s, ids, n_ids, &e)) return kite_error_export(&e, err, err_size);
    kite_generation *g = &s->gen;
    bool unfed = s->unfed_token >= 0;
    if (n_ids == 0 && !unfed && !s->have_logits)
        return kite_fail(&e, KITE_ERR_INVALID_ARG, "kite_session_start needs prompt tokens or a context to continue"),
               kite_error_export(&e, err, err_size);
    /* A waiting generated token is run first, as kite_prompt runs it. */
    size_t need = n_ids + (unfed && n_ids ? 1 : 0);
    if ((size_t)s->n_past + need > (size_t)s->n_ctx)
        return kite_fail(&e, KITE_ERR_CONTEXT_FULL, "%zu tokens do not fit in the context: %d of %d positions are free", need,
                         s->n_ctx - s->n_past, s->n_ctx),
               kite_error_export(&e, err, err_size);
    if (need > g->cap_queue) {
        int32_t *grown = realloc(g->queue, need * sizeof *grown);
        if (!grown) return kite_fail(&e, KITE_ERR_NOMEM, "out of memory"), kite_error_export(&e, err, err_size);
        g->queue = grown;
        g->cap_queue = need;
    }
    g->n_queue = 0;
    if (unfed && n_ids) {
        g->queue[g->n_queue++] = s->unfed_token;
        s->unfed_token = -1;
    }
    if (n_ids) memcpy(g->queue + g->n_queue, ids, n_ids * sizeof *ids);
    g->n_queue += n_ids;
    g->queue_done = 0;
    g->prompt_tokens = (int64_t)n_ids;
    g->t_queued = kite_now_ms();
    if (gen_begin(s, params, on_token, user_data, &e)) return kite_error_export(&e, err, err_size);
    g->need_first = g->n_queue == 0 && s->unfed_token < 0; /* continue from the existing logits */
    g->busy = true;
    atomic_store(&s->cancel, false);
    return KITE_OK;
}

bool kite_session_busy(const kite_session *s) { return s && s->gen.busy; }

int kite_session_result(const kite_session *s, char *err, size_t err_size) {
    if (!s) {
        kite_error e = {0};
        return kite_fail(&e, KITE_ERR_INVALID_ARG, "session must not be NULL"), kite_error_export(&e, err, err_size);
    }
    return kite_error_export(&s->gen.result, err, err_size);
}

int32_t kite_session_pending_prompt(const kite_session *s) {
    return s && s->gen.busy ? (int32_t)(s->gen.n_queue - s->gen.queue_done) : 0;
}

/* The prompt queue of s is done: statistics, the draft model's catch-up, then the first token. */
int kite_session_prompt_done(kite_session *s, kite_error *e) {
    kite_generation *g = &s->gen;
    int st = kite_spec_catch_up(&s->spec, s, e);
    if (st) return st;
    s->stats.prompt_tokens += g->prompt_tokens;
    s->last_prompt_ms = kite_now_ms() - g->t_queued;
    s->stats.prefill_ms += s->last_prompt_ms;
    g->t_start = kite_now_ms();
    g->prev = s->history[s->n_past - 1]; /* as gen_begin sees it after kite_prompt */
    s->spec.gen_start_pos = s->n_past;
    gen_first(s);
    return KITE_OK;
}

/* Entry points for engine/batch.c. */
void kite_session_gen_first(kite_session *s) { gen_first(s); }
int kite_session_pass_draft(kite_session *s, int32_t max_nodes, kite_pass *ps, kite_error *e) { return pass_draft(s, max_nodes, ps, e); }
void kite_session_pass_walk(kite_session *s, kite_pass *ps, const float *tree_logits) { pass_walk(s, ps, tree_logits); }
void kite_session_gen_end(kite_session *s, int st, const kite_error *e) { gen_end(s, st, e); }

int kite_session_set_spec(kite_session *s, const kite_spec_params *params, char *err, size_t err_size) {
    kite_error e = {0};
    if (!s || !params)
        return kite_fail(&e, KITE_ERR_INVALID_ARG, "session and parameters must not be NULL"), kite_error_export(&e, err, err_size);
    kite_spec_state next;
    if (kite_spec_init(&next, s, params, &e)) return kite_error_export(&e, err, err_size);
    /* Keep the n-gram corpus across settings. */
    next.corpus = s->spec.corpus;
    next.n_corpus = s->spec.n_corpus;
    next.cap_corpus = s->spec.cap_corpus;
    s->spec.corpus = NULL;
    kite_spec_free(&s->spec);
    s->spec = next;
    return KITE_OK;
}

void kite_session_stats(const kite_session *s, kite_stats *out) {
    memset(out, 0, sizeof *out);
    if (!s) return;
    *out = s->stats;
    out->prefill_tok_s = out->prefill_ms > 0 ? (double)out->prompt_tokens / (out->prefill_ms / 1e3) : 0;
    /* The first token of each generate call comes from the prompt's logits; decode speed counts the rest. */
    int64_t decoded = out->generated_tokens > 0 ? out->generated_tokens - 1 : 0;
    out->decode_tok_s = out->decode_ms > 0 ? (double)decoded / (out->decode_ms / 1e3) : 0;
}
