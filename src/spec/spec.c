/* Drafters, draft trees and the budget controller for speculative decoding. */
#include "spec/spec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "grammar/mask.h"
#include "sample/sampler.h"
#include "spec/dflash.h"
#include "spec/eagle3.h"
#include "spec/mtp.h"

/* Distinct noise streams derived from the user's seed, so the rejection verifier's coin flips and
 * the oracle's corruptions never reuse the Gumbel noise of the target's own samples. */
#define SEED_REJECT_ACCEPT 0x9E3779B97F4A7C15ull
#define SEED_REJECT_RESIDUAL 0xD1B54A32D192ED03ull
#define SEED_DRAFT_SAMPLE 0xA0761D6478BD642Full
#define SEED_ORACLE 0xE7037ED1A0B428DBull

kite_spec_params kite_spec_default_params(void) {
    kite_spec_params p = {0};
    p.drafter = KITE_DRAFT_NONE;
    p.budget = 0;
    p.tree_width = 1;
    p.verify = KITE_VERIFY_GUMBEL;
    return p;
}

/* ---- state -------------------------------------------------------------------------------------- */

/* Two models share a vocabulary when they have the same size and every token spells the same bytes. */
static bool same_vocabulary(const kite_model *a, const kite_model *b) {
    if (a->n_vocab != b->n_vocab) return false;
    if (!a->tokenizer || !b->tokenizer) return a->tokenizer == b->tokenizer;
    if (kite_tokenizer_n_vocab(a->tokenizer) != kite_tokenizer_n_vocab(b->tokenizer)) return false;
    char pa[256], pb[256];
    for (int32_t id = 0; id < kite_tokenizer_n_vocab(a->tokenizer); id++) {
        int32_t la = kite_tokenizer_piece(a->tokenizer, -1, id, pa, sizeof pa);
        int32_t lb = kite_tokenizer_piece(b->tokenizer, -1, id, pb, sizeof pb);
        if (la != lb || (la > 0 && memcmp(pa, pb, (size_t)(la < 256 ? la : 256)) != 0)) return false;
    }
    return true;
}

/* Milliseconds of one forward pass over ids[0..B) in the rows past s's committed context (which no
 * one reads: nothing is committed). logits: every row's (as verification computes), or NULL. */
static double timed_pass(kite_session *s, const int32_t *ids, int32_t B, float *logits) {
    double t0 = kite_now_ms();
    kite_forward(&s->model->weights, &s->kv, &s->scratch, s->pool, ids, NULL, 0, B, s->n_past, logits, logits != NULL);
    return kite_now_ms() - t0;
}

/* A draft model's time for one token (the best of three passes in its fresh session): the drafting
 * cost the controller assumes until it has measured drafting. */
static double one_token_ms(kite_session *d) {
    const int32_t token = 0;
    double best = INFINITY;
    for (int i = 0; i < 3; i++) {
        double t = timed_pass(d, &token, 1, d->logits); /* with the output layer, as drafting needs */
        if (t < best) best = t;
    }
    return best;
}

/* Block rows of the DFlash cost curve: dense where a 16-row block's chains are chosen; a block of
 * fewer rows takes its own size for the points past it. */
static const int32_t BLOCK_ROW_POINTS[KITE_N_BLOCK_POINTS] = {2, 3, 5, 7, 9, 13, 17, 33, 64};

/* The rows of the curve's point k for the state's block size. */
static int32_t block_point_rows(const kite_spec_state *st, int k) {
    return BLOCK_ROW_POINTS[k] < st->draft_block_rows ? BLOCK_ROW_POINTS[k] : st->draft_block_rows;
}

/* A DFlash block's time at each point (the best of three runs, in rounds over the points as
 * measure_costs does), a point above a later one lowered to it. */
static void measure_block_costs(kite_spec_state *st, kite_pool *pool) {
    for (int k = 0; k < KITE_N_BLOCK_POINTS; k++) st->draft_block_ms[k] = INFINITY;
    for (int round = 0; round < 3; round++)
        for (int k = 0; k < KITE_N_BLOCK_POINTS; k++) {
            if (k > 0 && block_point_rows(st, k) == block_point_rows(st, k - 1)) continue;
            double t = kite_dflash_block_ms(st->dflash, pool, block_point_rows(st, k));
            if (t < st->draft_block_ms[k]) st->draft_block_ms[k] = t;
        }
    for (int k = 1; k < KITE_N_BLOCK_POINTS; k++)
        if (block_point_rows(st, k) == block_point_rows(st, k - 1)) st->draft_block_ms[k] = st->draft_block_ms[k - 1];
    for (int k = KITE_N_BLOCK_POINTS - 2; k >= 0; k--)
        if (st->draft_block_ms[k + 1] < st->draft_block_ms[k]) st->draft_block_ms[k] = st->draft_block_ms[k + 1];
    st->draft_block_scale = 1.0;
    char curve[512];
    int at = 0;
    for (int k = 0; k < KITE_N_BLOCK_POINTS && at < (int)sizeof curve; k++)
        if (k == 0 || block_point_rows(st, k) != block_point_rows(st, k - 1))
            at += snprintf(curve + at, sizeof curve - (size_t)at, "%s%d: %.3f", k ? ", " : "", block_point_rows(st, k), st->draft_block_ms[k]);
    kite_log(KITE_LOG_INFO, "DFlash block cost (ms) by rows: %s", curve);
}

int kite_spec_init(kite_spec_state *st, kite_session *s, const kite_spec_params *p, kite_error *e) {
    memset(st, 0, sizeof *st);
    if (p->drafter < KITE_DRAFT_NONE || p->drafter > KITE_DRAFT_MTP)
        return kite_fail(e, KITE_ERR_INVALID_ARG, "unknown drafter %d", (int)p->drafter);
    if (p->budget < 0 || p->budget > KITE_MAX_DRAFT)
        return kite_fail(e, KITE_ERR_INVALID_ARG, "speculative budget %d is out of range (1..%d, or 0 for auto)", p->budget,
                         KITE_MAX_DRAFT);
    if (p->tree_width < 1 || p->tree_width > 8)
        return kite_fail(e, KITE_ERR_INVALID_ARG, "tree width %d is out of range (1..8)", p->tree_width);
    if (p->verify != KITE_VERIFY_GUMBEL && p->verify != KITE_VERIFY_REJECTION)
        return kite_fail(e, KITE_ERR_INVALID_ARG, "unknown verification mode %d", (int)p->verify);
    if (p->verify == KITE_VERIFY_REJECTION && p->tree_width != 1)
        return kite_fail(e, KITE_ERR_INVALID_ARG, "rejection verification works on chains: use tree width 1");
    if (!(p->draft_p_min >= 0.0f && p->draft_p_min <= 1.0f))
        return kite_fail(e, KITE_ERR_INVALID_ARG, "draft p_min %g is out of range (0 = off, or up to 1)", (double)p->draft_p_min);
    if (p->drafter == KITE_DRAFT_ORACLE && (!p->oracle_ids || !(p->oracle_error_rate >= 0 && p->oracle_error_rate <= 1)))
        return kite_fail(e, KITE_ERR_INVALID_ARG, "the oracle drafter needs oracle ids and an error rate in [0, 1]");
    int32_t V = s->model->n_vocab;
    if (p->drafter == KITE_DRAFT_ORACLE)
        for (size_t i = 0; i < p->n_oracle_ids; i++)
            if (p->oracle_ids[i] < 0 || p->oracle_ids[i] >= V)
                return kite_fail(e, KITE_ERR_INVALID_ARG, "oracle id %d at index %zu is outside the vocabulary (0..%d)",
                                 p->oracle_ids[i], i, V - 1);
    st->params = *p;
    /* A draft "model" that is an EAGLE-3 head (kite_model_open recognises the architecture) drafts as one. */
    if (p->drafter == KITE_DRAFT_MODEL && p->draft_model && p->draft_model->eagle3) st->params.drafter = KITE_DRAFT_EAGLE3;
    /* So does a DFlash drafter (architecture dflash). */
    if (p->drafter == KITE_DRAFT_MODEL && p->draft_model && p->draft_model->dflash) st->params.drafter = KITE_DRAFT_DFLASH;
    /* Benchmarks: the oracle with a DFlash drafter as draft_model runs (and is charged for) the drafter's
     * pass, then proposes its own tokens instead: a known acceptance at the drafter's real cost. */
    bool oracle_dflash = p->drafter == KITE_DRAFT_ORACLE && p->draft_model && p->draft_model->dflash;
    if (st->params.drafter == KITE_DRAFT_DFLASH || oracle_dflash) {
        if (!p->draft_model || !p->draft_model->dflash)
            return kite_fail(e, KITE_ERR_INVALID_ARG, "the DFlash drafter needs a DFlash drafter (GGUF architecture dflash) as draft_model");
        int rc = kite_dflash_check_target(p->draft_model->dflash, &s->model->weights, e);
        if (!rc) rc = kite_dflash_run_new(&st->dflash, p->draft_model->dflash, &s->model->weights, s->n_ctx, e);
        if (rc) { kite_spec_free(st); return rc; }
        st->draft_block_rows = kite_dflash_block_size(p->draft_model->dflash);
    } else if (st->params.drafter == KITE_DRAFT_EAGLE3) {
        if (!p->draft_model || !p->draft_model->eagle3)
            return kite_fail(e, KITE_ERR_INVALID_ARG, "the EAGLE-3 drafter needs an EAGLE-3 head (GGUF architecture eagle3) as draft_model");
        int rc = kite_eagle3_check_target(p->draft_model->eagle3, &s->model->weights, e);
        if (!rc) rc = kite_eagle3_run_new(&st->eagle3, p->draft_model->eagle3, &s->model->weights, s->n_ctx, e);
        if (rc) { kite_spec_free(st); return rc; }
    } else if (p->drafter == KITE_DRAFT_MTP) {
        int rc = kite_mtp_run_new(&st->mtp, &s->model->weights, s->n_ctx, e);
        if (rc) { kite_spec_free(st); return rc; }
    } else if (p->drafter == KITE_DRAFT_MODEL) {
        if (!p->draft_model) return kite_fail(e, KITE_ERR_INVALID_ARG, "the model drafter needs a draft model");
        if (p->draft_model->vocab_only) return kite_fail(e, KITE_ERR_INVALID_ARG, "the draft model was opened with vocab_only");
        if (!same_vocabulary(s->model, p->draft_model))
            return kite_fail(e, KITE_ERR_INVALID_ARG,
                             "the draft model's vocabulary (%d tokens) differs from the model's (%d tokens): a drafter must "
                             "share the target's tokenizer",
                             p->draft_model->n_vocab, V);
        kite_session_params sp = kite_session_default_params();
        sp.n_ctx = s->n_ctx;
        sp.n_threads = 1; /* a pool of one; it borrows the target's pool below */
        /* The target's type where the draft's heads take it (the drafter's cache never changes the output) */
        sp.kv_type = kite_kv_row_bytes(s->kv.kv_type, p->draft_model->weights.hp.head_dim) ? s->kv.kv_type : KITE_KV_F16;
        char err[512];
        if (kite_session_open(&st->draft, p->draft_model, &sp, err, sizeof err)) {
            kite_spec_free(st);
            return kite_fail(e, KITE_ERR_NOMEM, "draft session: %s", err);
        }
        kite_forward_scratch_free(&st->draft->scratch);
        int rc = kite_forward_scratch_init(&st->draft->scratch, &p->draft_model->weights.hp, KITE_PREFILL_CHUNK,
                                           kite_pool_threads(s->pool), s->n_ctx, e);
        if (rc) { kite_spec_free(st); return rc; }
        kite_pool_free(st->draft->pool);
        st->draft->pool = s->pool;
        st->draft->pool_borrowed = true;
    }
    if (st->params.drafter == KITE_DRAFT_MODEL || st->params.drafter == KITE_DRAFT_EAGLE3 || st->dflash || st->mtp) {
        st->hist = malloc(sizeof(int32_t) * ((size_t)s->n_ctx + KITE_MAX_DRAFT + 1));
        if (!st->hist) {
            kite_spec_free(st);
            return kite_fail(e, KITE_ERR_NOMEM, "out of memory for speculative decoding");
        }
    }
    st->draft_logits = malloc(sizeof(float) * (size_t)V * (KITE_MAX_DRAFT + 1));
    st->draft_q = malloc(sizeof(float) * (size_t)V * (KITE_MAX_DRAFT + 1));
    st->work = malloc(sizeof(float) * (size_t)V);
    if (!st->draft_logits || !st->draft_q || !st->work) {
        kite_spec_free(st);
        return kite_fail(e, KITE_ERR_NOMEM, "out of memory for speculative decoding");
    }
    /* Start from what the model's last session with this drafter learned; else optimistic about
     * acceptance (the controller drafts at first and learns quickly), and for a draft model at its cost
     * of one token. Starting that at 0 had each new session draft with a 656K-parameter Q8_0 draft
     * (130 us per drafted token, 2.4x a target step) until the running estimate caught up: 0.63-0.73x
     * of plain decoding over 128-token generations. */
    for (int d = 0; d < KITE_MAX_DRAFT; d++) st->accept_rate[d] = 0.6;
    kite_model *m = s->model;
    pthread_mutex_lock(&m->cost_lock);
    bool learned = m->have_learned && m->learned_for.drafter == st->params.drafter && m->learned_for.draft_model == p->draft_model &&
                   m->learned_for.oracle_error_rate == p->oracle_error_rate && m->learned_for.draft_p_min == p->draft_p_min;
    if (learned) {
        memcpy(st->accept_rate, m->learned_accept, sizeof st->accept_rate);
        memcpy(st->observed, m->learned_observed, sizeof st->observed);
        st->draft_ms_per_token = m->learned_draft_ms;
        memcpy(st->draft_block_ms, m->learned_block_ms, sizeof st->draft_block_ms);
        st->draft_block_scale = m->learned_block_scale;
        st->draft_cost_observed = 9; /* a measured estimate: moving averages from here */
    }
    pthread_mutex_unlock(&m->cost_lock);
    if (!learned && st->draft) st->draft_ms_per_token = one_token_ms(st->draft);
    if (!learned && st->eagle3) st->draft_ms_per_token = kite_eagle3_one_step_ms(st->eagle3, s->pool);
    if (!learned && st->mtp) st->draft_ms_per_token = kite_mtp_one_step_ms(st->mtp, s->pool);
    if (!learned && st->dflash) measure_block_costs(st, s->pool);
    /* The target's hidden states are captured only while a learned drafter reads them (last: nothing
     * above may fail after the session changed). */
    const int32_t *layers = NULL;
    int32_t n_layers = 0;
    if (st->eagle3) layers = kite_eagle3_target_layers(p->draft_model->eagle3), n_layers = KITE_EAGLE3_N_FEATURES;
    if (st->dflash) layers = kite_dflash_target_layers(p->draft_model->dflash, &n_layers);
    const int32_t last_layer = s->model->weights.hp.n_layers; /* MTP: the last layer's output (normed by the drafter) */
    if (st->mtp) layers = &last_layer, n_layers = 1;
    bool reads_nothing = st->params.drafter <= KITE_DRAFT_ORACLE; /* the drafters that read no hidden states */
    if (st->eagle3 || st->dflash || st->mtp || (reads_nothing && s->features.width > 0)) {
        int rc = kite_session_set_capture(s, layers, n_layers, e);
        if (rc) { kite_spec_free(st); return rc; }
    }
    return KITE_OK;
}

void kite_spec_learned_store(const kite_spec_state *st, kite_model *m) {
    pthread_mutex_lock(&m->cost_lock);
    m->have_learned = true;
    m->learned_for = st->params;
    memcpy(m->learned_accept, st->accept_rate, sizeof m->learned_accept);
    memcpy(m->learned_observed, st->observed, sizeof m->learned_observed);
    m->learned_draft_ms = st->draft_ms_per_token;
    memcpy(m->learned_block_ms, st->draft_block_ms, sizeof m->learned_block_ms);
    m->learned_block_scale = st->draft_block_scale;
    pthread_mutex_unlock(&m->cost_lock);
}

void kite_spec_free(kite_spec_state *st) {
    if (!st) return;
    kite_session_free(st->draft);
    kite_eagle3_run_free(st->eagle3);
    kite_dflash_run_free(st->dflash);
    kite_mtp_run_free(st->mtp);
    free(st->draft_logits);
    free(st->draft_q);
    free(st->work);
    free(st->corpus);
    free(st->hist);
    memset(st, 0, sizeof *st);
}

void kite_spec_remember(kite_spec_state *st, const int32_t *tokens, size_t n) {
    enum { MAX_CORPUS = 1 << 20 };
    if (n == 0) return;
    if (n > MAX_CORPUS) { tokens += n - MAX_CORPUS; n = MAX_CORPUS; }
    if (st->n_corpus + n > MAX_CORPUS) { /* keep the most recent */
        size_t drop = st->n_corpus + n - MAX_CORPUS;
        memmove(st->corpus, st->corpus + drop, (st->n_corpus - drop) * sizeof *st->corpus);
        st->n_corpus -= drop;
    }
    if (st->n_corpus + n > st->cap_corpus) {
        size_t cap = (st->n_corpus + n) * 2;
        int32_t *nc = realloc(st->corpus, cap * sizeof *nc);
        if (!nc) return; /* the corpus is only a source of guesses */
        st->corpus = nc;
        st->cap_corpus = cap;
    }
    memcpy(st->corpus + st->n_corpus, tokens, n * sizeof *tokens);
    st->n_corpus += n;
}

/* ---- cost model ----------------------------------------------------------------------------------- */

/* Dense where budgets are usually chosen: the curve bends where batches stop being bandwidth-bound. */
static const int32_t COST_POINTS[KITE_N_COST_POINTS] = {1, 2, 3, 4, 5, 6, 8, 12, 16, 24, KITE_MAX_DRAFT + 1};
enum { N_COST_POINTS = KITE_N_COST_POINTS };

/* The curve is measured lazily: points [0, FIRST_COST_POINTS) (passes of 1-4 tokens) before the
 * controller first chooses, a longer batch's point only once best_chain finds that a chain that long
 * could pay on the optimistic extension of what is measured (see extend_curve). The whole curve costs
 * ~2.4 s on the 1.1B shape at 2 threads (five rounds, passes up to 33 tokens): paid up front, it made
 * `kite run --draft` with a drafter that is never accepted decode 128 tokens at 22 tok/s against plain
 * decoding's 38. The first four points cost ~0.5 s there. */
enum { FIRST_COST_POINTS = 4 };

/* The number of leading points that cover a pass over B tokens (its own point and the ones below). */
static int points_for(int32_t B) {
    for (int k = 0; k < N_COST_POINTS; k++)
        if (B <= COST_POINTS[k]) return k + 1;
    return N_COST_POINTS;
}

/* Measures one pass over B tokens at points [from, to), in rows past the committed context (which no
 * one reads), taking the best of five rounds. A round passes over every point in turn, so a busy moment of
 * the machine (bandwidth here moves by 2x within seconds) falls on all batch sizes alike instead of
 * on a few consecutive ones: with five runs per point in a row, one run of the controller saw a steep
 * curve, chose chains of 3 and decoded 2.26x faster than plain, the next 2.64x. The pass computes every
 * row's logits, as verification does (the output matrix is a large part of a small model). */
static void measure_costs(kite_session *s, double *ms, int from, int to) {
    kite_model *m = s->model;
    int32_t room = s->n_ctx - s->n_past;
    float *logits = malloc(sizeof(float) * (size_t)(KITE_MAX_DRAFT + 1) * (size_t)m->n_vocab);
    int32_t ids[KITE_MAX_DRAFT + 1];
    for (int i = 0; i <= KITE_MAX_DRAFT; i++) ids[i] = (int32_t)((i * 7919) % m->n_vocab);
    for (int k = from; k < to; k++) ms[k] = INFINITY;
    for (int round = 0; round < 5; round++) {
        for (int k = from; k < to; k++) {
            int32_t B = COST_POINTS[k];
            if (B > room) continue;
            double t = timed_pass(s, ids, B, logits);
            if (t < ms[k]) ms[k] = t;
        }
    }
    /* No room to measure a point: extrapolate linearly from the one before. */
    for (int k = from; k < to; k++)
        if (COST_POINTS[k] > room) ms[k] = k > 0 ? ms[k - 1] * (double)COST_POINTS[k] / COST_POINTS[k - 1] : 1.0;
    free(logits);
    /* A pass over more tokens never costs less: a point above a later one was inflated by a busy
     * moment (these machines are noisy), so it takes the later one's time. Spikes would otherwise
     * steer the controller away from budgets that pay. */
    for (int k = to - 2; k >= 0; k--)
        if (ms[k + 1] < ms[k]) ms[k] = ms[k + 1];
}

/* The points past the n measured ones, extended along the line through the last two (flat after one):
 * at most what they cost, the curve being flat while passes are bound by reading the weights and
 * steeper once they are bound by arithmetic. So a chain priced on the extension is never priced
 * above its real cost, and one that does not pay there would not pay on the measured curve either. */
static void extend_curve(double *ms, int n) {
    const double slope = n >= 2 ? (ms[n - 1] - ms[n - 2]) / (COST_POINTS[n - 1] - COST_POINTS[n - 2]) : 0.0;
    for (int k = n; k < N_COST_POINTS; k++) ms[k] = ms[n - 1] + (slope > 0 ? slope : 0.0) * (COST_POINTS[k] - COST_POINTS[n - 1]);
}

/* The model's cost curve with at least `need` leading points measured (measured now if they are not
 * yet, for this thread count), the rest extended (extend_curve), copied out under one lock. Returns the
 * number of measured points. */
static int cost_curve(kite_session *s, double *ms, int need) {
    kite_model *m = s->model;
    int32_t threads = kite_pool_threads(s->pool);
    if (need > N_COST_POINTS) need = N_COST_POINTS;
    pthread_mutex_lock(&m->cost_lock);
    if (m->cost_threads != threads) m->cost_threads = threads, m->cost_points = 0;
    if (m->cost_points < need) {
        measure_costs(s, m->pass_cost_ms, m->cost_points, need);
        m->cost_points = need;
        char curve[512];
        int at = 0;
        for (int k = 0; k < need && at < (int)sizeof curve; k++)
            at += snprintf(curve + at, sizeof curve - (size_t)at, "%s%d: %.3f", k ? ", " : "", COST_POINTS[k], m->pass_cost_ms[k]);
        kite_log(KITE_LOG_INFO, "verification pass cost (ms) by batch: %s", curve);
    }
    const int measured = m->cost_points;
    memcpy(ms, m->pass_cost_ms, sizeof m->pass_cost_ms);
    pthread_mutex_unlock(&m->cost_lock);
    extend_curve(ms, measured);
    return measured;
}

/* T(B) by linear interpolation between the measured points. */
static double curve_at(const double *ms, int32_t B) {
    for (int k = 0; k < N_COST_POINTS; k++) {
        if (B <= COST_POINTS[k]) {
            if (k == 0 || B == COST_POINTS[k]) return ms[k];
            double f = (double)(B - COST_POINTS[k - 1]) / (COST_POINTS[k] - COST_POINTS[k - 1]);
            return ms[k - 1] + f * (ms[k] - ms[k - 1]);
        }
    }
    return ms[N_COST_POINTS - 1];
}

double kite_spec_pass_cost(kite_session *s, int32_t B) {
    double ms[N_COST_POINTS];
    cost_curve(s, ms, points_for(B));
    return curve_at(ms, B);
}

/* ---- budget controller ---------------------------------------------------------------------------- */

/* A DFlash block of the given rows by its measured curve (linear between the points), before scaling. */
static double block_curve_at(const kite_spec_state *st, int32_t rows) {
    for (int k = 0; k < KITE_N_BLOCK_POINTS; k++) {
        const int32_t at = block_point_rows(st, k);
        if (rows > at) continue;
        if (k == 0 || rows == at) return st->draft_block_ms[k];
        const int32_t before = block_point_rows(st, k - 1);
        return st->draft_block_ms[k - 1] + (st->draft_block_ms[k] - st->draft_block_ms[k - 1]) * (rows - before) / (at - before);
    }
    return st->draft_block_ms[KITE_N_BLOCK_POINTS - 1];
}

/* The rows of the DFlash block that drafts k tokens. */
static int32_t block_rows_for(const kite_spec_state *st, int32_t k) { return k + 1 < st->draft_block_rows ? k + 1 : st->draft_block_rows; }

/* The estimated time of a pass drafting k tokens (k >= 1), in ms: a DFlash block, or k drafted tokens. */
static double drafting_ms(const kite_spec_state *st, int32_t k) {
    if (st->draft_block_rows <= 0) return st->draft_ms_per_token * k;
    return st->draft_block_scale * block_curve_at(st, block_rows_for(st, k));
}

/* The chain length (0 = none) that maximises expected tokens per millisecond, and the smallest probe
 * interval (see kite_spec_choose_budget). */
static int32_t best_chain(const kite_spec_state *st, kite_session *s, int32_t max_budget, int32_t *min_interval_out,
                          bool *could_pay_out) {
    /* Tokens per millisecond for a chain of k drafted tokens: E[tokens] = 1 + sum_j prod_{i<=j} a_i,
     * cost = T(k + 1) + drafting. Trees are costed as chains of the same node count. */
    double curve[N_COST_POINTS];
    int32_t best_k = 0;
    bool could_pay = false;
    /* Priced on the measured points and their optimistic extension: if the best chain's pass lies past
     * the measured points, measure up to it and choose again (each round measures more, so this ends). */
    for (int need = FIRST_COST_POINTS;;) {
        const int measured = cost_curve(s, curve, need);
        const double plain_rate = 1.0 / curve_at(curve, 1);
        double best_rate = plain_rate;
        best_k = 0;
        /* Would some chain beat plain decoding at these costs if every draft were accepted? If not, no
         * acceptance a probe could find would change the choice (a draft model as slow as the target). */
        could_pay = false;
        /* A depth no pass has drafted yet takes the rate of the deepest one observed (not the prior): with
         * the prior, a controller that settled on short chains would never find out that longer ones pay. */
        double expected = 1.0, reach = 1.0, deepest_rate = st->accept_rate[0];
        for (int32_t k = 1; k <= max_budget; k++) {
            if (st->observed[k - 1] > 0) deepest_rate = st->accept_rate[k - 1];
            reach *= st->observed[k - 1] > 0 ? st->accept_rate[k - 1] : deepest_rate;
            expected += reach;
            double cost = curve_at(curve, k + 1) + drafting_ms(st, k);
            double rate = expected / cost;
            if (rate > best_rate * 1.0001) { best_rate = rate; best_k = k; }
            if ((double)(k + 1) / cost > plain_rate * 1.0001) could_pay = true;
        }
        need = points_for(best_k + 1);
        if (need <= measured) break;
    }
    /* A probe is a two-token pass, T(2) - T(1) more than a plain one: probes start KITE_PROBE_SHARE of
     * plain decoding apart (16 passes on the 1.1B shape, where T(2)/T(1) ~ 1.05-1.1; ~115 on
     * llama2xs-281K, where it is 1.57 and probing every 16 passes made n-gram decoding 2% slower than
     * plain). */
    const double probe_extra = curve_at(curve, 2) / curve_at(curve, 1) - 1.0;
    int32_t min_interval = KITE_PROBE_MIN;
    const double probe_spacing = probe_extra / KITE_PROBE_SHARE; /* passes per probe for the share */
    if (probe_spacing > min_interval)
        min_interval = probe_spacing >= KITE_PROBE_MAX ? KITE_PROBE_MAX : (int32_t)ceil(probe_spacing);
    *min_interval_out = min_interval;
    *could_pay_out = could_pay;
    return best_k;
}

int32_t kite_spec_choose_budget(kite_spec_state *st, kite_session *s, int32_t max_budget) {
    if (max_budget <= 0) return 0;
    if (st->params.budget > 0) return st->params.budget < max_budget ? st->params.budget : max_budget;
    if (!st->choice_valid || st->choice_max_budget != max_budget) {
        st->choice_best_k = best_chain(st, s, max_budget, &st->choice_min_interval, &st->choice_could_pay);
        st->choice_max_budget = max_budget;
        st->choice_valid = true;
    }
    const int32_t best_k = st->choice_best_k, min_interval = st->choice_min_interval;
    /* Re-probe now and then so a drafter that was poor earlier can win back its place. The interval
     * doubles after each probe that did not bring drafting back, so a drafter that stays useless costs
     * almost nothing; drafting again resets it to min_interval (see best_chain). */
    if (st->probe_interval < min_interval) st->probe_interval = min_interval;
    if (best_k == 0 && st->choice_could_pay && ++st->plain_streak >= st->probe_interval) {
        st->plain_streak = 0;
        st->probe_interval = st->probe_interval < KITE_PROBE_MAX / 2 ? 2 * st->probe_interval : KITE_PROBE_MAX;
        return 1;
    }
    if (best_k > 0) st->plain_streak = 0, st->probe_interval = min_interval;
    /* Explore one depth further now and then: the depth just past the chosen chain is only learned
     * when drafted. In one oracle run (80% acceptance everywhere) its estimate dipped after a few
     * rejections, chains stayed at 3 and the speed-up was 2.38x where chains of 4-5 gave 2.54x. */
    if (best_k > 0 && best_k < max_budget && ++st->explore_count >= KITE_EXPLORE_EVERY) {
        st->explore_count = 0;
        return best_k + 1;
    }
    return best_k;
}

/* Step for a running estimate already informed n times: the mean of the first observations (with
 * `prior` pseudo-observations for the starting value), then a moving average with step 0.1, so a
 * session learns its drafter within a few passes and still follows changes. Counts n while averaging. */
static double estimate_step(int32_t *n, double prior) {
    const double step = 1.0 / (*n + prior + 1.0);
    if (step < 0.1) return 0.1;
    (*n)++;
    return step;
}

void kite_spec_observe(kite_spec_state *st, const kite_draft_tree *t, const int32_t *path, int32_t n_path) {
    /* For each depth, was some node there drafted with its parent accepted, and was one accepted?
     * The prior counts as one observation. */
    for (int32_t d = 1; d < KITE_MAX_DRAFT + 1; d++) {
        bool drafted_under_accepted = false;
        for (int32_t j = 1; j < t->n; j++)
            if (t->depth[j] == d && d - 1 < n_path && t->parent[j] == path[d - 1]) drafted_under_accepted = true;
        if (!drafted_under_accepted) break;
        bool accepted = d < n_path;
        st->choice_valid = false; /* an estimate moves */
        const double step = estimate_step(&st->observed[d - 1], 1.0);
        st->accept_rate[d - 1] += step * ((accepted ? 1.0 : 0.0) - st->accept_rate[d - 1]);
    }
}

/* ---- drafters ------------------------------------------------------------------------------------- */

static void tree_root(kite_draft_tree *t, int32_t root) {
    memset(t, 0, sizeof *t);
    t->n = 1;
    t->token[0] = root;
    t->parent[0] = -1;
}

static int32_t tree_add(kite_draft_tree *t, int32_t parent, int32_t token, float logq, float q_token) {
    int32_t j = t->n++;
    t->token[j] = token;
    t->parent[j] = parent;
    t->depth[j] = t->depth[parent] + 1;
    t->logq[j] = logq;
    t->q_token[j] = q_token;
    return j;
}

/* Where the suffix of ctx[0..n) of length len occurred before, most recent first: returns the end
 * index (exclusive) of an occurrence in src[0..src_len) with end <= before and a token after it, or -1. */
static int64_t find_occurrence(const int32_t *src, int64_t src_len, int64_t before, const int32_t *suffix, int64_t len) {
    int64_t last = before < src_len - 1 ? before : src_len - 1;
    for (int64_t end = last; end >= len; end--)
        if (src[end - len] == suffix[0] && memcmp(src + end - len, suffix, (size_t)len * sizeof *src) == 0) return end;
    return -1;
}

/* N-gram drafter: the continuation of the most recent earlier occurrence of the context's longest
 * suffix (4 tokens down to 1), in the context itself and then in the session's earlier
 * conversations. With tree width C > 1, up to C occurrences with distinct next tokens become
 * branches (longer suffix matches first, then shorter ones), and the budget is shared among them
 * level by level: C chains of about budget / C tokens, not one chain that takes the whole budget
 * and C - 1 branches left empty. */
static void draft_ngram(kite_spec_state *st, kite_session *s, int32_t root, int32_t budget, kite_draft_tree *t) {
    int64_t n = (int64_t)s->n_past + 1;
    if (n > s->n_ctx) return;
    int32_t *ctx = s->history; /* room for n_ctx tokens: the root sits at n_past while we search */
    int32_t saved = ctx[s->n_past];
    ctx[s->n_past] = root;
    typedef struct { const int32_t *src; int64_t at, len; } branch; /* the continuation src[at, at + len) */
    branch br[8];
    int32_t n_br = 0, width = st->params.tree_width < 8 ? st->params.tree_width : 8;
    for (int64_t len = n - 1 < 4 ? n - 1 : 4; len >= 1 && n_br < width; len--) {
        const int32_t *suffix = ctx + n - len;
        for (int source = 0; source < 2 && n_br < width; source++) {
            const int32_t *src = source == 0 ? ctx : st->corpus;
            /* In the context an occurrence ends before the suffix does (it may overlap it). */
            int64_t src_len = source == 0 ? n : (int64_t)st->n_corpus;
            for (int64_t before = src_len - 1; n_br < width;) {
                int64_t at = find_occurrence(src, src_len, before, suffix, len);
                if (at < 0) break;
                before = at - 1;
                bool dup = false;
                for (int32_t k = 0; k < n_br; k++)
                    if (br[k].src[br[k].at] == src[at]) dup = true;
                if (!dup) br[n_br++] = (branch){src, at, src_len - at};
            }
        }
    }
    int32_t take[8] = {0}, total = 0;
    for (bool grew = true; grew && total < budget;) {
        grew = false;
        for (int32_t k = 0; k < n_br && total < budget; k++)
            if (take[k] < br[k].len) { take[k]++; total++; grew = true; }
    }
    for (int32_t k = 0; k < n_br; k++) {
        int32_t parent = 0;
        for (int32_t i = 0; i < take[k]; i++) parent = tree_add(t, parent, br[k].src[br[k].at + i], 0.0f, 1.0f);
    }
    ctx[s->n_past] = saved;
}

/* Oracle drafter (benchmarks): the continuation a plain run produced, each token corrupted with the
 * given probability. */
static void draft_oracle(kite_spec_state *st, kite_session *s, int32_t budget, uint64_t seed, kite_draft_tree *t) {
    int32_t parent = 0;
    for (int32_t d = 1; d <= budget; d++) {
        int64_t pos = s->n_past + d; /* position of the drafted token */
        int64_t idx = pos - st->gen_start_pos;
        if (idx < 0 || (size_t)idx >= st->params.n_oracle_ids) break;
        int32_t tok = st->params.oracle_ids[idx];
        int32_t V = s->model->n_vocab;
        if (kite_uniform(seed ^ SEED_ORACLE, pos, 0) < st->params.oracle_error_rate && V > 1) {
            /* Any other token, uniformly: an offset in [1, V-1] never maps back onto tok. */
            int32_t offset = 1 + (int32_t)(kite_uniform(seed ^ SEED_ORACLE, pos, 1) * (float)(V - 1));
            if (offset > V - 1) offset = V - 1;
            tok = (int32_t)(((int64_t)tok + offset) % V);
        }
        parent = tree_add(t, parent, tok, 0.0f, 1.0f);
    }
}

/* Draft-model logits processed like the target's (same penalties over the node's own history, same
 * masks), as log-probabilities at the sampling temperature (T = 1 when greedy). */
static void draft_logq(kite_spec_state *st, int32_t V, const kite_gen_params *gp, const float *logits,
                       const uint64_t *allowed, const int32_t *history, size_t n_history, float *logq) {
    memcpy(logq, logits, sizeof(float) * (size_t)V);
    if (allowed) kite_gmask_apply(allowed, logq, V); /* the grammar's mask at the node, as the target's */
    kite_process_logits(gp, logq, V, history, n_history);
    float T = gp->temperature > 0 ? gp->temperature : 1.0f;
    float mx = -INFINITY;
    for (int32_t i = 0; i < V; i++) if (logq[i] > mx) mx = logq[i];
    double sum = 0;
    for (int32_t i = 0; i < V; i++) sum += logq[i] == -INFINITY ? 0.0 : exp((double)(logq[i] - mx) / T);
    float lse = (float)log(sum);
    for (int32_t i = 0; i < V; i++) logq[i] = logq[i] == -INFINITY ? -INFINITY : (logq[i] - mx) / T - lse;
    (void)st;
}

void kite_spec_observe_draft_cost(kite_spec_state *st, double ms, int32_t budget) {
    if (budget < 1) budget = 1;
    /* The first measurements replace the starting guess (a draft model's forward pass alone, which
     * misses the draft distributions and the choice of children: 30 us against 190 us per token for
     * TinyStories-656K's Q8_0 draft). A DFlash pass scales its curve, whose shape stays as measured. */
    const double step = estimate_step(&st->draft_cost_observed, 0.0);
    if (st->draft_block_rows > 0) {
        const double base = block_curve_at(st, block_rows_for(st, budget));
        if (base > 0) st->draft_block_scale += step * (ms / base - st->draft_block_scale);
    } else {
        st->draft_ms_per_token += step * (ms / budget - st->draft_ms_per_token);
    }
    st->choice_valid = false;
}

int kite_spec_catch_up(kite_spec_state *st, kite_session *s, kite_error *e) {
    kite_session *d = st->draft;
    if (!d) return KITE_OK;
    int32_t P = s->n_past, common = 0;
    int32_t limit = d->n_past < P ? d->n_past : P;
    while (common < limit && d->history[common] == s->history[common]) common++;
    if (!kite_kv_can_rewind(&d->kv, common)) common = 0; /* its rings lost the window: run it all again */
    if (common == 0) (void)kite_kv_can_rewind(&d->kv, 0);
    d->n_past = common;
    d->unfed_token = -1;
    return common < P ? kite_session_run_chain(d, s->history + common, (size_t)(P - common), NULL, e) : KITE_OK;
}

/* Draft model: grows the tree best-first. The candidates are the top-C children of every node whose
 * draft logits are known, by log q(t) + G(seed, position, t) (the target's own noise field, so a
 * drafter equal to the target is always accepted; plain log q when greedy; an independent sample for
 * rejection verification). A node's value is its estimated chance to lie on the accepted path: the
 * product over its path of, for a first child, the depth's running acceptance rate a (under the
 * shared noise the first child is the target's own token unless p and q disagree there), and for a
 * later child, 1 - a shared among the other children in proportion to q. Cumulative log q alone
 * would rank a likely sibling above the sampled child's descendants, whose q may be small at T = 1
 * but which are accepted almost surely when q is close to p. Each round adds up to C candidates of
 * highest value, whatever their depth (values only fall along a path), a node's children in the
 * order of their noisy scores, and runs them through the draft model in one batch to expand them
 * next round. The last round's nodes are not run (nobody needs their logits). */
/* The draft model's forward pass as kite_spec_grow_tree's node runner. */
static int run_draft_nodes(void *ctx, kite_draft_tree *t, int32_t first, int32_t end, float *logits, kite_error *e) {
    (void)e;
    kite_spec_state *st = ctx;
    kite_session *d = st->draft;
    kite_forward(&d->model->weights, &d->kv, &d->scratch, d->pool, t->token + first, t->parent, first, end - first,
                 d->n_past, logits, true);
    for (int32_t j = first; j < end; j++) t->fed[j] = true;
    return KITE_OK;
}

static int draft_model(kite_spec_state *st, kite_session *s, int32_t root, int32_t budget, const kite_gen_params *gp,
                       kite_draft_tree *t, kite_error *e) {
    kite_session *d = st->draft;
    int32_t P = s->n_past;
    double t0 = kite_now_ms();
    int rc = kite_spec_catch_up(st, s, e); /* after plain steps; the prompt itself was fed by kite_prompt */
    if (rc) return rc;
    st->last_catch_up_ms = kite_now_ms() - t0;
    /* The root, and the chain the caller put below it (a grammar's forced text), in one pass. */
    (void)root;
    int32_t n0 = t->n;
    kite_forward(&d->model->weights, &d->kv, &d->scratch, d->pool, t->token, t->parent, 0, n0, P, st->draft_logits, true);
    for (int32_t j = 0; j < n0; j++) t->fed[j] = true;
    return kite_spec_grow_tree(st, s, budget, gp, t, d->model->n_vocab, run_draft_nodes, st, e);
}

int kite_spec_grow_tree(kite_spec_state *st, kite_session *s, int32_t budget, const kite_gen_params *gp, kite_draft_tree *t,
                        int32_t V, kite_spec_run_nodes_fn run_nodes, void *run_ctx, kite_error *e) {
    int32_t P = s->n_past;
    int32_t n0 = t->n;
    int32_t width = st->params.tree_width;
    bool rejection = st->params.verify == KITE_VERIFY_REJECTION;
    uint64_t seed = rejection ? gp->seed ^ SEED_DRAFT_SAMPLE : gp->seed;
    /* The penalties look at the committed tokens and the node's path, like the target's; without
     * penalties the history is not read at all. */
    bool penalties = gp->repeat_penalty != 1.0f || gp->presence_penalty != 0.0f || gp->frequency_penalty != 0.0f;
    int32_t window = 0; /* committed tokens the penalties see */
    if (penalties && gp->penalty_last_n != 0) window = gp->penalty_last_n < 0 || gp->penalty_last_n > P ? P : gp->penalty_last_n;
    typedef struct { int32_t parent; int32_t rank; int32_t token; float logq; float q; float log_reach; } cand;
    cand cands[(KITE_MAX_DRAFT + 1) * 8]; /* each node adds at most 8 candidates, once */
    float log_reach[KITE_MAX_DRAFT + 1] = {0}; /* per node: log of its estimated chance to be on the accepted path */
    int32_t n_cands = 0;
    int32_t next_rank[KITE_MAX_DRAFT + 1] = {0}; /* per node: rank of its next child to add */
    int32_t expand_first = n0 - 1, expand_end = n0; /* nodes run last round: their children become candidates */
    int32_t gstate[KITE_MAX_DRAFT + 1];              /* under a grammar: the matcher state after each node */
    gstate[0] = st->groot;
    for (int32_t j = 1; j < n0; j++)
        gstate[j] = st->gmask ? kite_gmask_advance(st->gmask, gstate[j - 1], t->token[j - 1], t->token[j]) : 0;
    while (t->n - 1 < budget) {
        for (int32_t j = expand_first; j < expand_end; j++) {
            if (st->max_depth > 0 && t->depth[j] >= st->max_depth) continue; /* the drafter has nothing this deep */
            const uint64_t *allowed = NULL;
            if (st->gmask) {
                int32_t n_allowed = 0;
                kite_error ignored = {0}; /* a matcher limit here only stops this branch; the walk reports it if it matters */
                allowed = gstate[j] >= 0 ? kite_gmask_allowed(st->gmask, gstate[j], t->token[j], &n_allowed, &ignored) : NULL;
                if (!allowed || n_allowed == 0) continue;
            }
            int32_t nh = window, path_len = t->depth[j] + 1;
            memcpy(st->hist, s->history + P - window, sizeof(int32_t) * (size_t)window);
            nh += path_len;
            for (int32_t k = j, at = nh - 1; k >= 0; k = t->parent[k]) st->hist[at--] = t->token[k];
            float *logq = st->draft_q + (size_t)j * V;
            draft_logq(st, V, gp, st->draft_logits + (size_t)j * V, allowed, st->hist, (size_t)nh, logq);
            int64_t pos = (int64_t)P + t->depth[j] + 1;
            /* Top-C by score, C small: repeated selection. */
            int32_t picked[8];
            for (int32_t c = 0; c < width; c++) {
                int32_t best = -1;
                float best_score = -INFINITY;
                for (int32_t v = 0; v < V; v++) {
                    if (logq[v] == -INFINITY) continue;
                    bool taken = false;
                    for (int32_t q = 0; q < c; q++) if (picked[q] == v) taken = true;
                    if (taken) continue;
                    float score = gp->temperature > 0 ? logq[v] + kite_gumbel(seed, pos, v) : logq[v];
                    if (score > best_score) { best_score = score; best = v; }
                }
                if (best < 0) break;
                picked[c] = best;
                /* Under the shared noise the first child is the target's token unless q and p disagree
                 * there (about the depth's running acceptance rate a); the others share the rest, by q. */
                double a = st->accept_rate[t->depth[j] < KITE_MAX_DRAFT ? t->depth[j] : KITE_MAX_DRAFT - 1];
                a = a < 0.02 ? 0.02 : a > 0.98 ? 0.98 : a;
                double others = 1.0 - exp((double)logq[picked[0]]);
                double share = c == 0 ? a : (1.0 - a) * exp((double)logq[best]) / (others > 1e-6 ? others : 1e-6);
                cands[n_cands++] = (cand){j, c, best, t->logq[j] + logq[best], expf(logq[best]),
                                          log_reach[j] + (float)log(share > 1e-30 ? share : 1e-30)};
            }
        }
        if (n_cands == 0) break;
        int32_t room = budget - (t->n - 1), take = width < room ? width : room;
        int32_t new_first = t->n;
        float round_best = INFINITY;
        for (int32_t added = 0; added < take; added++) {
            /* A node's children enter in the order of their noisy scores, so its sampled child (the
             * target's own token when q = p) comes first even when the budget is tight. Ties go to
             * the earlier candidate, so a parent's ties come before its children's. */
            int32_t best = -1;
            for (int32_t c = 0; c < n_cands; c++)
                if (cands[c].rank == next_rank[cands[c].parent] && (best < 0 || cands[c].log_reach > cands[best].log_reach)) best = c;
            if (best < 0) break;
            /* One round takes nodes about as likely as its best one; a much less likely node waits,
             * as the children of this round's nodes may beat it (a chain, when the drafter is sure). */
            if (round_best == INFINITY) round_best = cands[best].log_reach;
            else if (cands[best].log_reach < round_best - 0.6931472f /* ln 2 */) break;
            next_rank[cands[best].parent]++;
            int32_t node = tree_add(t, cands[best].parent, cands[best].token, cands[best].logq, cands[best].q);
            log_reach[node] = cands[best].log_reach;
            if (st->gmask) {
                int32_t p = cands[best].parent;
                gstate[node] = kite_gmask_advance(st->gmask, gstate[p], t->token[p], cands[best].token);
            }
            memmove(cands + best, cands + best + 1, sizeof(cand) * (size_t)(n_cands - best - 1));
            n_cands--;
        }
        int32_t new_end = t->n;
        if (t->n - 1 >= budget) break; /* done; the last round's nodes stay unfed */
        /* Run the new nodes to get their logits. */
        int rc = run_nodes(run_ctx, t, new_first, new_end, st->draft_logits + (size_t)new_first * V, e);
        if (rc) return rc;
        expand_first = new_first;
        expand_end = new_end;
    }
    return KITE_OK;
}

/* Drops every node whose token the grammar does not allow at its parent's state, with its subtree
 * (an n-gram or oracle chain is cut at its first invalid token). Node order is kept, so parents stay
 * before their children. */
static void tree_constrain(kite_spec_state *st, kite_draft_tree *t) {
    int32_t state[KITE_MAX_DRAFT + 1], remap[KITE_MAX_DRAFT + 1];
    state[0] = st->groot;
    remap[0] = 0;
    int32_t n = 1;
    for (int32_t j = 1; j < t->n; j++) {
        remap[j] = -1;
        int32_t p = t->parent[j];
        if (remap[p] < 0 || state[p] < 0) continue; /* under a dropped node, or after an end token */
        int32_t next = kite_gmask_advance(st->gmask, state[p], t->token[p], t->token[j]);
        if (next < 0 && next != KITE_GSTATE_ENDED) continue;
        state[j] = next;
        remap[j] = n;
        t->token[n] = t->token[j];
        t->parent[n] = remap[p];
        t->depth[n] = t->depth[j];
        t->logq[n] = t->logq[j];
        t->q_token[n] = t->q_token[j];
        t->fed[n] = t->fed[j];
        n++;
    }
    t->n = n;
}

void kite_spec_draft_chain(kite_draft_tree *t, int32_t root, const int32_t *ids, int32_t n) {
    tree_root(t, root);
    int32_t parent = 0;
    for (int32_t i = 0; i < n && i < KITE_MAX_DRAFT; i++) parent = tree_add(t, parent, ids[i], 0.0f, 1.0f);
}

int kite_spec_draft(kite_spec_state *st, kite_session *s, int32_t root, int32_t budget, const kite_gen_params *gp,
                    kite_draft_tree *t, kite_error *e) {
    return kite_spec_draft_after(st, s, root, NULL, 0, budget, gp, t, e);
}

int kite_spec_draft_after(kite_spec_state *st, kite_session *s, int32_t root, const int32_t *prefix, int32_t n_prefix,
                          int32_t budget, const kite_gen_params *gp, kite_draft_tree *t, kite_error *e) {
    kite_spec_draft_chain(t, root, prefix, n_prefix);
    st->last_catch_up_ms = 0.0;
    if (n_prefix > 0) {
        /* Only the draft model continues a forced chain: it sees the chain's tokens in the same pass. */
        if (budget <= 0 || st->params.drafter != KITE_DRAFT_MODEL) return KITE_OK;
        if (budget > KITE_MAX_DRAFT - (t->n - 1)) budget = KITE_MAX_DRAFT - (t->n - 1);
        return budget > 0 ? draft_model(st, s, root, t->n - 1 + budget, gp, t, e) : KITE_OK;
    }
    if (budget <= 0) return KITE_OK;
    switch (st->params.drafter) {
    case KITE_DRAFT_NGRAM: draft_ngram(st, s, root, budget, t); break;
    case KITE_DRAFT_ORACLE:
        if (st->dflash) { /* the DFlash pass is paid for, its tree replaced by the oracle's chain */
            int rc = kite_dflash_draft(st, s, root, budget, gp, t, e);
            if (rc) return rc;
            kite_spec_draft_chain(t, root, NULL, 0);
        }
        draft_oracle(st, s, budget, gp->seed, t);
        break;
    case KITE_DRAFT_MODEL: return draft_model(st, s, root, budget, gp, t, e); /* masks as it drafts */
    case KITE_DRAFT_EAGLE3: return kite_eagle3_draft(st, s, root, budget, gp, t, e); /* masks as it drafts */
    case KITE_DRAFT_DFLASH: return kite_dflash_draft(st, s, root, budget, gp, t, e);  /* masks as it drafts */
    case KITE_DRAFT_MTP: return kite_mtp_draft(st, s, root, budget, gp, t, e);        /* masks as it drafts */
    default: return KITE_OK;
    }
    if (st->gmask) tree_constrain(st, t);
    return KITE_OK;
}

void kite_spec_commit(kite_spec_state *st, const kite_draft_tree *t, const int32_t *path, int32_t n_path, int32_t pos0) {
    kite_session *d = st->draft;
    if (!d || d->n_past != pos0) return;
    int32_t fed = 0;
    while (fed < n_path && t->fed[path[fed]]) fed++;
    kite_kv_commit(&d->kv, d->model->weights.hp.n_layers, pos0, path, fed);
    for (int32_t i = 0; i < fed; i++) d->history[pos0 + i] = t->token[path[i]];
    d->n_past = pos0 + fed;
}

/* ---- rejection verification ------------------------------------------------------------------------ */

int32_t kite_spec_rejection_step(kite_spec_state *st, const kite_gen_params *gp, const float *target_logits, int32_t V,
                                 const int32_t *history, size_t n_history, int64_t pos, int32_t draft_token,
                                 const float *draft_logq, bool *accepted) {
    /* p = softmax(processed logits / T), the distribution plain sampling draws from. */
    float *p = st->work;
    memcpy(p, target_logits, sizeof(float) * (size_t)V);
    kite_process_logits(gp, p, V, history, n_history);
    float mx = -INFINITY;
    for (int32_t t = 0; t < V; t++) if (p[t] > mx) mx = p[t];
    double sum = 0;
    for (int32_t t = 0; t < V; t++) {
        p[t] = p[t] == -INFINITY ? 0.0f : (float)exp((double)(p[t] - mx) / gp->temperature);
        sum += p[t];
    }
    for (int32_t t = 0; t < V; t++) p[t] = (float)(p[t] / sum);
    double q_x = draft_logq ? exp((double)draft_logq[draft_token]) : 1.0;
    double u = kite_uniform(gp->seed ^ SEED_REJECT_ACCEPT, pos, draft_token);
    if (q_x > 0 && u < (double)p[draft_token] / q_x) {
        *accepted = true;
        return draft_token;
    }
    *accepted = false;
    /* Resample from the residual max(0, p - q), normalized. */
    double total = 0;
    for (int32_t t = 0; t < V; t++) {
        double q = draft_logq ? exp((double)draft_logq[t]) : (t == draft_token ? 1.0 : 0.0);
        double r = (double)p[t] - q;
        p[t] = r > 0 ? (float)r : 0.0f;
        total += p[t];
    }
    if (!(total > 0)) return draft_token;
    double target = kite_uniform(gp->seed ^ SEED_REJECT_RESIDUAL, pos, 0) * total, acc = 0;
    int32_t last_nonzero = draft_token;
    for (int32_t t = 0; t < V; t++) {
        if (p[t] <= 0) continue;
        last_nonzero = t;
        acc += p[t];
        if (acc >= target) return t;
    }
    return last_nonzero;
}

/* ---- the walk --------------------------------------------------------------------------------------- */

int32_t kite_spec_walk(kite_spec_state *st, const kite_gen_params *gp, const kite_draft_tree *t, const float *tree_logits,
                       int32_t V, int32_t *history, int32_t P, float *sample_buf, kite_spec_emit_fn emit,
                       kite_spec_mask_fn mask, void *user_data, int32_t *path) {
    bool rejection = st->params.verify == KITE_VERIFY_REJECTION && gp->temperature > 0 && t->n > 1;
    int32_t n_path = 0, node = 0;
    for (;;) {
        path[n_path++] = node;
        history[P + t->depth[node]] = t->token[node];
        int64_t pos = (int64_t)P + t->depth[node] + 1; /* where the sampled token will sit */
        const float *row = tree_logits + (size_t)node * V;
        int32_t child = -1, y;
        const float *target = row; /* the logits sampled from: the row, or its masked copy */
        if (mask) {
            memcpy(sample_buf, row, sizeof(float) * (size_t)V);
            if (!mask(user_data, sample_buf)) {
                if (n_path > 1) n_path--;
                break;
            }
            target = sample_buf;
        }
        if (rejection) {
            for (int32_t j = node + 1; j < t->n; j++)
                if (t->parent[j] == node) { child = j; break; }
        }
        if (child >= 0) {
            bool accepted = false;
            const float *draft_logq = st->params.drafter == KITE_DRAFT_MODEL || st->params.drafter == KITE_DRAFT_EAGLE3 ||
                                         st->params.drafter == KITE_DRAFT_DFLASH || st->params.drafter == KITE_DRAFT_MTP
                                          ? st->draft_q + (size_t)node * V : NULL;
            y = kite_spec_rejection_step(st, gp, target, V, history, (size_t)pos, pos, t->token[child], draft_logq, &accepted);
            if (!accepted) child = -1;
        } else {
            if (!mask) memcpy(sample_buf, row, sizeof(float) * (size_t)V);
            y = kite_sample(gp, sample_buf, V, history, (size_t)pos, pos);
            for (int32_t j = node + 1; j < t->n; j++)
                if (t->parent[j] == node && t->token[j] == y) { child = j; break; }
        }
        bool go_on = emit(user_data, y, row);
        if (!go_on || child < 0) break;
        node = child;
    }
    return n_path;
}
