/* Sessions: the context (KV cache and token history), prompt processing, generation, statistics. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/engine.h"
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
    if (model->vocab_only) {
        kite_fail(&e, KITE_ERR_INVALID_ARG, "kite_session_open: the model was opened with vocab_only");
        return kite_error_export(&e, err, err_size);
    }
    const kite_hparams *hp = &model->weights.hp;
    int32_t n_ctx = params->n_ctx > 0 ? params->n_ctx : (hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096);
    if (params->kv_type != KITE_KV_F16 && params->kv_type != KITE_KV_F32) {
        kite_fail(&e, KITE_ERR_INVALID_ARG, "KV cache type %d is not KITE_KV_F16 or KITE_KV_F32", (int)params->kv_type);
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
    int st = kite_kv_cache_init(&s->kv, hp, n_ctx, params->kv_type == KITE_KV_F32, &e);
    if (!st) st = kite_forward_scratch_init(&s->scratch, hp, KITE_PREFILL_CHUNK, n_threads, n_ctx, &e);
    if (!st) {
        s->pool = kite_pool_new(n_threads);
        s->history = calloc((size_t)n_ctx, sizeof *s->history);
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
    free(s);
}

void kite_session_reset(kite_session *s) {
    if (!s) return;
    kite_spec_remember(&s->spec, s->history, (size_t)s->n_past);
    s->n_past = 0;
    s->unfed_token = -1;
    s->have_logits = false;
    memset(&s->stats, 0, sizeof s->stats);
    atomic_store(&s->cancel, false);
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
    /* The K/V rows past n_past stay in memory but are never read: attention only looks below the
     * current position, and new tokens overwrite them. */
    s->n_past = n_past;
    s->have_logits = false;
    return KITE_OK;
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

/* Streams generated tokens: text assembly across UTF-8 boundaries, stop conditions, counters. */
typedef struct emitter {
    kite_session *s;
    const kite_gen_params *params;
    kite_token_fn on_token;
    void *user_data;
    char pending[256];  /* bytes of an incomplete UTF-8 character carried to the next token */
    size_t n_pending;
    int32_t prev;       /* the token before, for SentencePiece's leading-space rule */
    int64_t generated;
    double t_start, t_first;
    bool stop;          /* max_tokens, an end token, or the callback said so */
} emitter;

static void emit(emitter *em, int32_t id) {
    kite_session *s = em->s;
    const kite_model *m = s->model;
    em->generated++;
    if (em->generated == 1) {
        em->t_first = kite_now_ms();
        /* The prompt's processing plus the wait for this first token. */
        s->stats.ttft_ms = s->last_prompt_ms + (em->t_first - em->t_start);
        s->last_prompt_ms = 0;
    }
    bool end = !em->params->ignore_eos && kite_tokenizer_is_eog(m->tokenizer, id);
    bool last = end || em->generated >= em->params->max_tokens;
    char piece[256];
    int32_t len = end ? 0 : kite_tokenizer_piece(m->tokenizer, em->prev, id, piece, sizeof piece);
    if (len < 0) len = 0;
    if (len > (int32_t)sizeof piece) len = (int32_t)sizeof piece; /* no real token is this long */
    char text[512];
    memcpy(text, em->pending, em->n_pending);
    memcpy(text + em->n_pending, piece, (size_t)len);
    size_t total = em->n_pending + (size_t)len;
    size_t ready = last ? total : utf8_complete_prefix(text, total); /* the last token flushes what is held */
    em->n_pending = total - ready;
    if (em->n_pending > sizeof em->pending) em->n_pending = 0; /* cannot happen for valid text: drop, never overflow */
    memcpy(em->pending, text + ready, em->n_pending);
    bool keep_going = em->on_token ? em->on_token(id, text, ready, em->user_data) : true;
    em->prev = id;
    /* The newest token is run lazily (by the next pass, prompt or generate call), so the last one of
     * a reply costs nothing unless the conversation goes on. */
    s->unfed_token = id;
    em->stop = last || !keep_going;
}

static bool emit_for_walk(void *user_data, int32_t token) {
    emitter *em = user_data;
    emit(em, token);
    return !em->stop;
}

/* One pass: draft a tree below the root (the unfed token), verify it in one batched forward pass,
 * and walk it: at each node the target's token is sampled exactly as plain decoding would sample it
 * at that position; the walk moves to the child holding that token, else stops. Emits every token
 * on the path and commits the path's K/V. A tree with no children is a plain decoding step. */
static int pass(kite_session *s, emitter *em, int32_t *sample_buf, kite_error *e) {
    const kite_model *m = s->model;
    const kite_gen_params *gp = em->params;
    kite_spec_state *sp = &s->spec;
    int32_t V = m->n_vocab, P = s->n_past, root = s->unfed_token;
    if (P >= s->n_ctx) return kite_fail(e, KITE_ERR_CONTEXT_FULL, "the context of %d tokens is full", s->n_ctx);
    int32_t room = s->n_ctx - P - 1; /* drafted nodes that fit after the root */
    int32_t max_budget = KITE_MAX_DRAFT < room ? KITE_MAX_DRAFT : room;
    int32_t budget = sp->params.drafter == KITE_DRAFT_NONE ? 0 : kite_spec_choose_budget(sp, s, max_budget);
    kite_draft_tree tree;
    double t0 = kite_now_ms();
    int rc = kite_spec_draft(sp, s, root, budget, gp, &tree, e);
    if (rc) return rc;
    double t1 = kite_now_ms();
    s->unfed_token = -1;
    kite_forward(&m->weights, &s->kv, &s->scratch, s->pool, tree.token, tree.n > 1 ? tree.parent : NULL, 0, tree.n, P,
                 s->tree_logits, true);
    double t2 = kite_now_ms();

    int32_t path[KITE_MAX_DRAFT + 1];
    int32_t n_path = kite_spec_walk(sp, gp, &tree, s->tree_logits, V, s->history, P, (float *)sample_buf, emit_for_walk, em, path);
    kite_kv_commit(&s->kv, m->weights.hp.n_layers, P, path, n_path);
    s->n_past = P + n_path;
    s->have_logits = false; /* the logits of the new root are not computed yet */
    if (sp->params.drafter != KITE_DRAFT_NONE) {
        kite_spec_commit(sp, &tree, path, n_path, P);
        kite_spec_observe(sp, &tree, path, n_path);
        if (budget > 0) kite_spec_observe_draft_cost(sp, (t1 - t0 - sp->last_catch_up_ms) / budget); /* catching up is not drafting */
        if (tree.n > 1) kite_spec_learned_store(sp, s->model); /* after both estimates moved */
        double t3 = kite_now_ms();
        s->stats.target_passes++;
        s->stats.drafted += tree.n - 1;
        s->stats.accepted += n_path - 1;
        s->stats.draft_ms += t1 - t0;
        s->stats.verify_ms += t3 - t1;
        for (int32_t j = 1; j < tree.n; j++) s->stats.drafted_by_depth[tree.depth[j] - 1]++;
        for (int32_t i = 1; i < n_path; i++) s->stats.accepted_by_depth[i - 1]++;
    }
    (void)t2;
    return KITE_OK;
}

int kite_generate(kite_session *s, const kite_gen_params *params, kite_token_fn on_token, void *user_data, char *err,
                  size_t err_size) {
    kite_error e = {0};
    if (!s || !params)
        return kite_fail(&e, KITE_ERR_INVALID_ARG, "session and parameters must not be NULL"), kite_error_export(&e, err, err_size);
    const kite_model *m = s->model;
    int32_t n_vocab = m->n_vocab;
    if (kite_gen_params_check(params, n_vocab, e.msg, sizeof e.msg)) {
        e.status = KITE_ERR_INVALID_ARG;
        return kite_error_export(&e, err, err_size);
    }
    if (params->max_tokens < 0)
        return kite_fail(&e, KITE_ERR_INVALID_ARG, "max_tokens must be >= 0, got %d", params->max_tokens),
               kite_error_export(&e, err, err_size);
    if (s->unfed_token < 0 && !s->have_logits)
        return kite_fail(&e, KITE_ERR_INVALID_ARG, "kite_generate needs a context: call kite_prompt first"),
               kite_error_export(&e, err, err_size);
    int32_t *sample_buf = malloc(sizeof(float) * (size_t)n_vocab);
    if (!sample_buf) return kite_fail(&e, KITE_ERR_NOMEM, "out of memory"), kite_error_export(&e, err, err_size);
    emitter em = {
        .s = s, .params = params, .on_token = on_token, .user_data = user_data, .t_start = kite_now_ms(),
        .prev = s->unfed_token >= 0 ? s->unfed_token : s->n_past > 0 ? s->history[s->n_past - 1] : -1,
    };
    s->spec.gen_start_pos = s->n_past + (s->unfed_token >= 0 ? 1 : 0);
    int st = KITE_OK;
    if (params->max_tokens > 0 && s->unfed_token < 0) {
        /* The first token comes from the prompt's logits. */
        memcpy(sample_buf, s->logits, sizeof(float) * (size_t)n_vocab);
        emit(&em, kite_sample(params, (float *)sample_buf, n_vocab, s->history, (size_t)s->n_past, s->n_past));
    }
    while (!em.stop && em.generated < params->max_tokens) {
        if (atomic_load(&s->cancel)) {
            atomic_store(&s->cancel, false);
            st = kite_fail(&e, KITE_ERR_CANCELLED, "cancelled");
            break;
        }
        if ((st = pass(s, &em, sample_buf, &e))) break;
    }
    double t_end = kite_now_ms();
    free(sample_buf);
    s->stats.generated_tokens += em.generated;
    if (em.generated > 1) s->stats.decode_ms += t_end - em.t_first;
    int64_t passes = s->stats.target_passes;
    s->stats.tau = passes > 0 ? (double)(s->stats.accepted + passes) / (double)passes : 0;
    (void)st;
    return kite_error_export(&e, err, err_size);
}

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
