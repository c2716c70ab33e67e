/* Measuring a model's quality over a text, as llama.cpp's tools do (tools/perplexity, tools/imatrix):
 * perplexity, KL divergence against a reference model run side by side, and importance matrices
 * collected through the forward pass's activation hook. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/engine.h"
#include "quant/imatrix.h"

enum { DEFAULT_CHUNK = 512, MIN_CHUNK = 8 };

kite_quality_params kite_quality_default_params(void) {
    kite_quality_params p = {0};
    p.n_ctx = DEFAULT_CHUNK;
    return p;
}

kite_imatrix_params kite_imatrix_default_params(void) {
    kite_imatrix_params p = {0};
    p.quality = kite_quality_default_params();
    return p;
}

/* ---- the text in chunks ------------------------------------------------------------------------- */
typedef struct chunks {
    int32_t *tokens;   /* [n_tokens] the whole text, BOS first when the model adds one */
    size_t n_tokens;
    int32_t n_ctx;     /* tokens per chunk */
    int32_t n_chunks;  /* chunks evaluated */
    int32_t first;     /* n_ctx / 2: the first position whose logits are scored */
    int32_t bos;       /* replaces each chunk's first token, or -1 */
} chunks;

static int check_params(const kite_quality_params *p, kite_error *e) {
    if (p->n_ctx != 0 && (p->n_ctx < MIN_CHUNK || p->n_ctx > (1 << 20)))
        return kite_fail(e, KITE_ERR_INVALID_ARG, "chunk size %d is out of range (%d..%d)", p->n_ctx, MIN_CHUNK, 1 << 20);
    if (p->n_chunks < 0) return kite_fail(e, KITE_ERR_INVALID_ARG, "chunk count %d is negative", p->n_chunks);
    if (p->n_threads < 0 || p->n_threads > 1024)
        return kite_fail(e, KITE_ERR_INVALID_ARG, "thread count %d is out of range (0..1024)", p->n_threads);
    return KITE_OK;
}

static int make_chunks(const kite_model *m, const char *text, size_t len, const kite_quality_params *p, chunks *c,
                       kite_error *e) {
    memset(c, 0, sizeof *c);
    if (!text) return kite_fail(e, KITE_ERR_INVALID_ARG, "no text to evaluate");
    if (m->vocab_only || !m->tokenizer)
        return kite_fail(e, KITE_ERR_INVALID_ARG, "the model has no weights or no tokenizer to evaluate a text with");
    c->n_ctx = p->n_ctx ? p->n_ctx : DEFAULT_CHUNK;
    c->first = c->n_ctx / 2;
    bool add_bos = kite_tokenizer_add_bos(m->tokenizer);
    c->bos = add_bos ? kite_tokenizer_bos(m->tokenizer) : -1;
    int st = kite_tokenizer_encode(m->tokenizer, text, len, add_bos, p->parse_special, &c->tokens, &c->n_tokens, e);
    if (st) return st;
    /* llama.cpp asks for two chunks at least (so there is something past the first half to score, twice). */
    if (c->n_tokens < 2 * (size_t)c->n_ctx) {
        free(c->tokens);
        c->tokens = NULL;
        return kite_fail(e, KITE_ERR_INVALID_ARG,
                         "the text is too short: it tokenizes to %zu tokens, and chunks of %d tokens need at least %d "
                         "(two chunks)",
                         c->n_tokens, c->n_ctx, 2 * c->n_ctx);
    }
    size_t max_chunks = c->n_tokens / (size_t)c->n_ctx;
    c->n_chunks = (int32_t)(p->n_chunks > 0 && (size_t)p->n_chunks < max_chunks ? (size_t)p->n_chunks : max_chunks);
    return KITE_OK;
}

/* The ids of chunk i as evaluated: its first token replaced by BOS (when the model adds one). */
static void chunk_ids(const chunks *c, int32_t i, int32_t *ids) {
    memcpy(ids, c->tokens + (size_t)i * (size_t)c->n_ctx, sizeof *ids * (size_t)c->n_ctx);
    if (c->bos >= 0) ids[0] = c->bos;
}

static int open_session(kite_session **s, kite_model *m, const chunks *c, const kite_quality_params *p, kite_error *e) {
    kite_session_params sp = kite_session_default_params();
    sp.n_ctx = c->n_ctx;
    sp.n_threads = p->n_threads;
    sp.kv_type = p->kv_type;
    char msg[sizeof e->msg];
    int st = kite_session_open(s, m, &sp, msg, sizeof msg);
    if (st) return kite_fail(e, st, "%s", msg);
    return KITE_OK;
}

/* ---- per-token statistics -------------------------------------------------------------------------- */
/* ln of the softmax denominator of a row, in double: max + ln(sum exp(l - max)). *argmax gets the first
 * maximum. */
static double log_normalizer(const float *logits, int32_t n_vocab, int32_t *argmax) {
    float max = logits[0];
    int32_t at = 0;
    for (int32_t i = 1; i < n_vocab; i++)
        if (logits[i] > max) max = logits[i], at = i;
    double sum = 0.0;
    for (int32_t i = 0; i < n_vocab; i++) sum += exp((double)logits[i] - (double)max);
    if (argmax) *argmax = at;
    return (double)max + log(sum);
}

/* Sums for llama.cpp's kl_divergence_result. */
typedef struct kld_sums {
    double nll, nll2, nll_ref, nll_ref2, nll_nll_ref;
    double kld, kld2;
    double p_diff, p_diff2, p_diff4;
    int64_t same_top, count;
} kld_sums;

/* Mean and its standard error (0 for fewer than 11 values, as llama.cpp). */
static void mean_and_error(double sum, double sum2, int64_t count, double *mean, double *error) {
    *mean = *error = 0.0;
    if (count < 1) return;
    double f = sum / (double)count, df = sum2 / (double)count - f * f;
    *mean = f;
    *error = df > 0 && count > 10 ? sqrt(df / (double)(count - 1)) : 0.0;
}

static double covariance(double suma, double sumb, double sumab, int64_t count) {
    if (count < 10) return 0.0;
    double n = (double)count;
    return (sumab / n - (suma / n) * (sumb / n)) / (n - 1);
}

/* Linear interpolation at fraction * (n - 1) of sorted values (llama.cpp's percentile). */
static double quantile(const double *sorted, int64_t n, double fraction) {
    if (n <= 0) return 0.0;
    if (fraction <= 0) return sorted[0];
    if (fraction >= 1) return sorted[n - 1];
    double p = fraction * (double)(n - 1);
    int64_t ip = (int64_t)p;
    p -= (double)ip;
    int64_t next = ip + 1 < n ? ip + 1 : n - 1;
    return (1 - p) * sorted[ip] + p * sorted[next];
}

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double ppl_error_of(double sum_nll, double sum_nll2, int64_t count) {
    /* llama-perplexity: sqrt((E[nll^2] - E[nll]^2) / (count - 1)) * ppl */
    if (count < 2) return 0.0;
    double mean = sum_nll / (double)count, var = sum_nll2 / (double)count - mean * mean;
    return var > 0 ? sqrt(var / (double)(count - 1)) * exp(mean) : 0.0;
}

/* ---- the chunk loop ------------------------------------------------------------------------------- */
/* One pass over the chunks with one or two sessions: each chunk's first half is run without logits
 * (all logits when all_logits, for the imatrix's output head), then the second half in batches whose
 * logits rows go to score(). */
typedef struct chunk_loop {
    const chunks *c;
    kite_session *s[2];       /* the model, and the reference or NULL */
    bool all_logits;
    float *logits[2];         /* [KITE_PREFILL_CHUNK][n_vocab] per session */
    int32_t *ids;             /* [n_ctx] */
    int32_t n_vocab;
    /* score(loop, chunk ids, position j, logits rows at j of each session); target ids[j + 1]. */
    void (*score)(struct chunk_loop *, const int32_t *ids, int32_t j, const float *row_a, const float *row_b);
    void *state;
    const kite_quality_params *p;
    void (*fill_progress)(struct chunk_loop *, kite_quality_progress *);
} chunk_loop;

static int run_session_rows(kite_session *s, const int32_t *ids, int32_t n, float *logits, kite_error *e) {
    return kite_session_run_chain(s, ids, (size_t)n, logits, e);
}

static int run_chunks(chunk_loop *L, kite_error *e) {
    const chunks *c = L->c;
    double t0 = kite_now_ms();
    int64_t scored = 0;
    for (int32_t i = 0; i < c->n_chunks; i++) {
        chunk_ids(c, i, L->ids);
        for (int k = 0; k < 2 && L->s[k]; k++) kite_session_reset(L->s[k]);
        /* First half: context only. */
        for (int32_t b = 0; b < c->first; b += KITE_PREFILL_CHUNK) {
            int32_t nb = c->first - b < KITE_PREFILL_CHUNK ? c->first - b : KITE_PREFILL_CHUNK;
            for (int k = 0; k < 2 && L->s[k]; k++) {
                int st = run_session_rows(L->s[k], L->ids + b, nb, L->all_logits ? L->logits[k] : NULL, e);
                if (st) return st;
            }
        }
        /* Second half: the logits at positions first .. n_ctx-2 predict the next token. */
        for (int32_t b = c->first; b < c->n_ctx; b += KITE_PREFILL_CHUNK) {
            int32_t nb = c->n_ctx - b < KITE_PREFILL_CHUNK ? c->n_ctx - b : KITE_PREFILL_CHUNK;
            for (int k = 0; k < 2 && L->s[k]; k++) {
                int st = run_session_rows(L->s[k], L->ids + b, nb, L->logits[k], e);
                if (st) return st;
            }
            for (int32_t r = 0; r < nb; r++) {
                int32_t j = b + r;
                if (j >= c->n_ctx - 1) break;
                L->score(L, L->ids, j, L->logits[0] + (size_t)r * (size_t)L->n_vocab,
                         L->s[1] ? L->logits[1] + (size_t)r * (size_t)L->n_vocab : NULL);
                scored++;
            }
        }
        if (L->p->progress) {
            kite_quality_progress pr = {.chunk = i + 1, .n_chunks = c->n_chunks, .n_scored = scored, .ms = kite_now_ms() - t0};
            L->fill_progress(L, &pr);
            if (!L->p->progress(&pr, L->p->progress_user_data))
                return kite_fail(e, KITE_ERR_CANCELLED, "stopped after chunk %d of %d", i + 1, c->n_chunks);
        }
    }
    return KITE_OK;
}

static int loop_alloc(chunk_loop *L, int n_sessions, kite_error *e) {
    for (int k = 0; k < n_sessions; k++) {
        L->logits[k] = malloc(sizeof(float) * (size_t)KITE_PREFILL_CHUNK * (size_t)L->n_vocab);
        if (!L->logits[k]) return kite_fail(e, KITE_ERR_NOMEM, "out of memory for logits");
    }
    L->ids = malloc(sizeof *L->ids * (size_t)L->c->n_ctx);
    if (!L->ids) return kite_fail(e, KITE_ERR_NOMEM, "out of memory");
    return KITE_OK;
}

static void loop_free(chunk_loop *L) {
    free(L->logits[0]);
    free(L->logits[1]);
    free(L->ids);
    kite_session_free(L->s[0]);
    kite_session_free(L->s[1]);
}

/* ---- perplexity ----------------------------------------------------------------------------------- */
typedef struct ppl_state {
    double nll, nll2;
    int64_t count;
} ppl_state;

static void ppl_score(chunk_loop *L, const int32_t *ids, int32_t j, const float *row, const float *unused) {
    (void)unused;
    ppl_state *ps = L->state;
    double nll = log_normalizer(row, L->n_vocab, NULL) - (double)row[ids[j + 1]];
    ps->nll += nll;
    ps->nll2 += nll * nll;
    ps->count++;
}

static void ppl_progress(chunk_loop *L, kite_quality_progress *pr) {
    const ppl_state *ps = L->state;
    pr->ppl = ps->count ? exp(ps->nll / (double)ps->count) : 0.0;
}

static void ppl_finish(const ppl_state *ps, const chunks *c, kite_perplexity_result *r) {
    memset(r, 0, sizeof *r);
    r->n_scored = ps->count;
    r->n_chunks = c->n_chunks;
    r->n_text_tokens = (int64_t)c->n_tokens;
    r->mean_nll = ps->count ? ps->nll / (double)ps->count : 0.0;
    r->ppl = exp(r->mean_nll);
    r->ppl_error = ppl_error_of(ps->nll, ps->nll2, ps->count);
}

int kite_perplexity(kite_model *model, const char *text, size_t len, const kite_quality_params *params,
                    kite_perplexity_result *result, char *err, size_t err_size) {
    kite_error e = {0};
    kite_quality_params defaults = kite_quality_default_params();
    if (!params) params = &defaults;
    if (!model || !result) return kite_fail(&e, KITE_ERR_INVALID_ARG, "kite_perplexity: model and result must not be NULL"),
                                  kite_error_export(&e, err, err_size);
    memset(result, 0, sizeof *result);
    chunks c;
    int st = check_params(params, &e);
    if (!st) st = make_chunks(model, text, len, params, &c, &e);
    if (st) return kite_error_export(&e, err, err_size);
    ppl_state ps = {0};
    chunk_loop L = {.c = &c, .n_vocab = model->weights.hp.n_vocab, .score = ppl_score, .state = &ps, .p = params,
                    .fill_progress = ppl_progress};
    st = open_session(&L.s[0], model, &c, params, &e);
    if (!st) st = loop_alloc(&L, 1, &e);
    if (!st) st = run_chunks(&L, &e);
    if (!st) ppl_finish(&ps, &c, result);
    loop_free(&L);
    free(c.tokens);
    return kite_error_export(&e, err, err_size);
}

/* ---- KL divergence -------------------------------------------------------------------------------- */
typedef struct kld_state {
    kld_sums sums;
    double *kld_values;     /* [capacity] per scored token */
    double *p_diff_values;  /* [capacity] */
    int64_t capacity;
} kld_state;

static void kld_score(chunk_loop *L, const int32_t *ids, int32_t j, const float *row, const float *row_ref) {
    kld_state *ks = L->state;
    kld_sums *k = &ks->sums;
    const int32_t n = L->n_vocab, tok = ids[j + 1];
    int32_t top, top_ref;
    double lz = log_normalizer(row, n, &top), lz_ref = log_normalizer(row_ref, n, &top_ref);
    double nll = lz - (double)row[tok], nll_ref = lz_ref - (double)row_ref[tok];
    k->nll += nll;
    k->nll2 += nll * nll;
    k->nll_ref += nll_ref;
    k->nll_ref2 += nll_ref * nll_ref;
    k->nll_nll_ref += nll * nll_ref;
    /* KL(ref || model) = sum_i p_ref(i) (log p_ref(i) - log p(i)), every token of the vocabulary. */
    double kld = 0.0;
    for (int32_t i = 0; i < n; i++) {
        double log_p_ref = (double)row_ref[i] - lz_ref, log_p = (double)row[i] - lz;
        kld += exp(log_p_ref) * (log_p_ref - log_p);
    }
    k->kld += kld;
    k->kld2 += kld * kld;
    k->same_top += top == top_ref;
    double p_diff = exp(-nll) - exp(-nll_ref);
    k->p_diff += p_diff;
    k->p_diff2 += p_diff * p_diff;
    k->p_diff4 += p_diff * p_diff * p_diff * p_diff;
    if (k->count < ks->capacity) {
        ks->kld_values[k->count] = kld;
        ks->p_diff_values[k->count] = p_diff;
    }
    k->count++;
}

static void kld_running(const kld_sums *k, double *ln_ratio, double *ln_ratio_err, double *rms, double *rms_err) {
    double lp, lp_err, lb, lb_err;
    mean_and_error(k->nll, k->nll2, k->count, &lp, &lp_err);
    mean_and_error(k->nll_ref, k->nll_ref2, k->count, &lb, &lb_err);
    double cov = covariance(k->nll, k->nll_ref, k->nll_nll_ref, k->count);
    *ln_ratio = lp - lb;
    double v = lp_err * lp_err + lb_err * lb_err - 2.0 * cov;
    *ln_ratio_err = v > 0 ? sqrt(v) : 0.0;
    double mse, mse_err;
    mean_and_error(k->p_diff2, k->p_diff4, k->count, &mse, &mse_err);
    *rms = sqrt(mse);
    *rms_err = *rms > 0 ? 0.5 / *rms * mse_err : 0.0;
}

static void kld_progress(chunk_loop *L, kite_quality_progress *pr) {
    const kld_sums *k = &((const kld_state *)L->state)->sums;
    double err_unused, rms_err_unused, kld_err_unused;
    pr->ppl = k->count ? exp(k->nll / (double)k->count) : 0.0;
    kld_running(k, &pr->ln_ppl_ratio, &err_unused, &pr->p_diff_rms, &rms_err_unused);
    mean_and_error(k->kld, k->kld2, k->count, &pr->kld, &kld_err_unused);
    pr->same_top = k->count ? (double)k->same_top / (double)k->count : 0.0;
}

static void kld_finish(kld_state *ks, const chunks *c, kite_kld_result *r) {
    const kld_sums *k = &ks->sums;
    memset(r, 0, sizeof *r);
    r->n_scored = k->count;
    r->n_chunks = c->n_chunks;
    double lp, lp_err, lb, lb_err;
    mean_and_error(k->nll, k->nll2, k->count, &lp, &lp_err);
    mean_and_error(k->nll_ref, k->nll_ref2, k->count, &lb, &lb_err);
    r->ppl = exp(lp);
    r->ppl_error = r->ppl * lp_err;
    r->ppl_ref = exp(lb);
    r->ppl_ref_error = r->ppl_ref * lb_err;
    double cov = covariance(k->nll, k->nll_ref, k->nll_nll_ref, k->count);
    r->ln_ppl_correlation = lp_err > 0 && lb_err > 0 ? cov / (lp_err * lb_err) : 0.0;
    kld_running(k, &r->ln_ppl_ratio, &r->ln_ppl_ratio_error, &r->p_diff_rms, &r->p_diff_rms_error);
    r->ppl_ratio = exp(r->ln_ppl_ratio);
    r->ppl_ratio_error = r->ppl_ratio * r->ln_ppl_ratio_error;
    double ppl_cov = r->ppl * r->ppl_ref * cov;
    r->ppl_diff = r->ppl - r->ppl_ref;
    double v = r->ppl_error * r->ppl_error + r->ppl_ref_error * r->ppl_ref_error - 2.0 * ppl_cov;
    r->ppl_diff_error = v > 0 ? sqrt(v) : 0.0;
    mean_and_error(k->kld, k->kld2, k->count, &r->kld, &r->kld_error);
    mean_and_error(k->p_diff, k->p_diff2, k->count, &r->p_diff, &r->p_diff_error);
    r->same_top = k->count ? (double)k->same_top / (double)k->count : 0.0;
    r->same_top_error = k->count > 1 ? sqrt(r->same_top * (1.0 - r->same_top) / (double)(k->count - 1)) : 0.0;
    int64_t n = k->count < ks->capacity ? k->count : ks->capacity;
    qsort(ks->kld_values, (size_t)n, sizeof(double), compare_doubles);
    qsort(ks->p_diff_values, (size_t)n, sizeof(double), compare_doubles);
    static const double kq[KITE_KLD_N_QUANTILES] = KITE_KLD_QUANTILES;
    static const double pq[KITE_P_DIFF_N_QUANTILES] = KITE_P_DIFF_QUANTILES;
    for (int i = 0; i < KITE_KLD_N_QUANTILES; i++) r->kld_quantile[i] = quantile(ks->kld_values, n, kq[i]);
    for (int i = 0; i < KITE_P_DIFF_N_QUANTILES; i++) r->p_diff_quantile[i] = quantile(ks->p_diff_values, n, pq[i]);
}

/* Two models share a vocabulary when they have the same size and every token spells the same bytes;
 * the first id that differs is named. */
static int check_same_vocabulary(const kite_model *a, const kite_model *b, kite_error *e) {
    if (a->n_vocab != b->n_vocab || a->weights.hp.n_vocab != b->weights.hp.n_vocab)
        return kite_fail(e, KITE_ERR_INVALID_ARG,
                         "the models do not share a vocabulary: the model has %d tokens, the reference %d", a->n_vocab,
                         b->n_vocab);
    if (!a->tokenizer || !b->tokenizer) return KITE_OK;
    if (kite_tokenizer_n_vocab(a->tokenizer) != kite_tokenizer_n_vocab(b->tokenizer))
        return kite_fail(e, KITE_ERR_INVALID_ARG, "the models do not share a vocabulary: their tokenizers have %d and %d tokens",
                         kite_tokenizer_n_vocab(a->tokenizer), kite_tokenizer_n_vocab(b->tokenizer));
    char pa[256], pb[256];
    for (int32_t id = 0; id < kite_tokenizer_n_vocab(a->tokenizer); id++) {
        int32_t la = kite_tokenizer_piece(a->tokenizer, -1, id, pa, sizeof pa);
        int32_t lb = kite_tokenizer_piece(b->tokenizer, -1, id, pb, sizeof pb);
        if (la != lb || (la > 0 && memcmp(pa, pb, (size_t)(la < 256 ? la : 256)) != 0))
            return kite_fail(e, KITE_ERR_INVALID_ARG, "the models do not share a vocabulary: token %d is spelled differently",
                             id);
    }
    return KITE_OK;
}

int kite_kld(kite_model *model, kite_model *reference, const char *text, size_t len, const kite_quality_params *params,
             kite_kld_result *result, char *err, size_t err_size) {
    kite_error e = {0};
    kite_quality_params defaults = kite_quality_default_params();
    if (!params) params = &defaults;
    if (!model || !reference || !result)
        return kite_fail(&e, KITE_ERR_INVALID_ARG, "kite_kld: model, reference and result must not be NULL"),
               kite_error_export(&e, err, err_size);
    memset(result, 0, sizeof *result);
    int st = check_params(params, &e);
    if (!st && (model->vocab_only || reference->vocab_only))
        st = kite_fail(&e, KITE_ERR_INVALID_ARG, "kite_kld: a model was opened with vocab_only");
    if (!st) st = check_same_vocabulary(model, reference, &e);
    chunks c = {0};
    if (!st) st = make_chunks(reference, text, len, params, &c, &e);
    if (st) return kite_error_export(&e, err, err_size);
    kld_state ks = {0};
    chunk_loop L = {.c = &c, .n_vocab = model->weights.hp.n_vocab, .score = kld_score, .state = &ks, .p = params,
                    .fill_progress = kld_progress};
    ks.capacity = (int64_t)c.n_chunks * (c.n_ctx - 1 - c.first);
    ks.kld_values = malloc(sizeof(double) * (size_t)(ks.capacity ? ks.capacity : 1));
    ks.p_diff_values = malloc(sizeof(double) * (size_t)(ks.capacity ? ks.capacity : 1));
    if (!ks.kld_values || !ks.p_diff_values) st = kite_fail(&e, KITE_ERR_NOMEM, "out of memory");
    if (!st) st = open_session(&L.s[0], model, &c, params, &e);
    if (!st) st = open_session(&L.s[1], reference, &c, params, &e);
    if (!st) st = loop_alloc(&L, 2, &e);
    if (!st) st = run_chunks(&L, &e);
    if (!st) kld_finish(&ks, &c, result);
    loop_free(&L);
    free(ks.kld_values);
    free(ks.p_diff_values);
    free(c.tokens);
    return kite_error_export(&e, err, err_size);
}

/* ---- importance matrices -------------------------------------------------------------------------- */
/* The collector behind the activation hook: per weight, double sums of squares (llama.cpp sums in
 * float; double keeps long calibration runs exact to float precision) and the rows seen. */
typedef struct collected {
    char *name;
    int64_t n_cols;
    double *sum_sq;  /* [n_cols] */
    int64_t rows;
} collected;

typedef struct collector {
    collected *items;
    int64_t n, cap;
    bool process_output;
    int status;      /* the first failure inside the hook (out of memory, inconsistent sizes) */
    char msg[200];
} collector;

/* llama.cpp collects the products of the blocks (names beginning "blk.") and, with --process-output,
 * the output head "output.weight" (a tied head multiplies by token_embd.weight and is never collected).
 * It skips products of fewer than 16 rows, which only generation runs; every kite imatrix pass gives
 * all of a chunk's rows, as llama-imatrix's whole-chunk batches do, so every product is taken. */
static void collect(void *user_data, const char *name, int32_t expert, const float *x, int32_t n_rows, int64_t n_cols) {
    collector *c = user_data;
    if (c->status || expert >= 0) return; /* MoE models are refused before the run (kite_imatrix_compute) */
    if (strncmp(name, "blk.", 4) != 0 && !(c->process_output && !strcmp(name, "output.weight"))) return;
    collected *it = NULL;
    for (int64_t i = 0; i < c->n && !it; i++)
        if (!strcmp(c->items[i].name, name)) it = &c->items[i];
    if (!it) {
        if (c->n == c->cap) {
            int64_t cap = c->cap ? 2 * c->cap : 64;
            collected *grown = realloc(c->items, sizeof *grown * (size_t)cap);
            if (!grown) {
                c->status = KITE_ERR_NOMEM;
                snprintf(c->msg, sizeof c->msg, "out of memory collecting activations");
                return;
            }
            c->items = grown;
            c->cap = cap;
        }
        it = &c->items[c->n];
        it->name = strdup(name);
        it->sum_sq = calloc((size_t)n_cols, sizeof(double));
        it->n_cols = n_cols;
        it->rows = 0;
        if (!it->name || !it->sum_sq) {
            free(it->name);
            free(it->sum_sq);
            c->status = KITE_ERR_NOMEM;
            snprintf(c->msg, sizeof c->msg, "out of memory collecting activations");
            return;
        }
        c->n++;
    }
    if (it->n_cols != n_cols) {
        c->status = KITE_ERR_UNSUPPORTED;
        snprintf(c->msg, sizeof c->msg, "inconsistent input width for %.80s (%lld vs %lld)", name, (long long)it->n_cols,
                 (long long)n_cols);
        return;
    }
    for (int32_t r = 0; r < n_rows; r++) {
        const float *row = x + (size_t)r * (size_t)n_cols;
        for (int64_t j = 0; j < n_cols; j++) it->sum_sq[j] += (double)row[j] * row[j];
    }
    it->rows += n_rows;
}

static void collector_free(collector *c) {
    for (int64_t i = 0; i < c->n; i++) {
        free(c->items[i].name);
        free(c->items[i].sum_sq);
    }
    free(c->items);
    memset(c, 0, sizeof *c);
}

/* Frees what build_imatrix allocated (kite_imatrix_clear belongs to the reader). */
static void imatrix_release(kite_imatrix *m) {
    for (int64_t i = 0; i < m->n_entries; i++) {
        free(m->entries[i].name);
        free(m->entries[i].sum_sq);
        free(m->entries[i].counts);
    }
    free(m->entries);
    memset(m, 0, sizeof *m);
}

/* dataset: the caller's slot holding the dataset's name (or NULL), borrowed by m until it is released. */
static int build_imatrix(const collector *c, const chunks *ch, char **dataset, kite_imatrix *m, kite_error *e) {
    memset(m, 0, sizeof *m);
    m->entries = calloc((size_t)(c->n ? c->n : 1), sizeof *m->entries);
    if (!m->entries) return kite_fail(e, KITE_ERR_NOMEM, "out of memory");
    for (int64_t i = 0; i < c->n; i++) {
        kite_imatrix_entry *en = &m->entries[i];
        en->name = strdup(c->items[i].name);
        en->n_cols = c->items[i].n_cols;
        en->n_mat = 1;
        en->sum_sq = malloc(sizeof(float) * (size_t)en->n_cols);
        en->counts = malloc(sizeof(float));
        m->n_entries = i + 1;
        if (!en->name || !en->sum_sq || !en->counts) return kite_fail(e, KITE_ERR_NOMEM, "out of memory");
        for (int64_t j = 0; j < en->n_cols; j++) en->sum_sq[j] = (float)c->items[i].sum_sq[j];
        en->counts[0] = (float)c->items[i].rows;
    }
    m->datasets = *dataset ? dataset : NULL;
    m->n_datasets = *dataset ? 1 : 0;
    /* llama.cpp's chunk count: the rows a matrix saw over the chunk size. */
    m->chunk_count = ch->n_chunks;
    m->chunk_size = ch->n_ctx;
    return KITE_OK;
}

/* Whether the output can be created: a failure says so before the calibration run, not after it. */
static int check_writable(const char *path, kite_error *e) {
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return kite_fail(e, KITE_ERR_IO, "cannot write the output '%s': it exists and is not a regular file", path);
    size_t n = strlen(path) + 40;
    char *probe = malloc(n);
    if (!probe) return kite_fail(e, KITE_ERR_NOMEM, "out of memory");
    snprintf(probe, n, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(probe, "wb");
    int code = errno;
    if (f) {
        fclose(f);
        remove(probe);
    }
    free(probe);
    if (!f) return kite_fail(e, KITE_ERR_IO, "cannot create the output '%s': %s", path, strerror(code));
    return KITE_OK;
}

int kite_imatrix_compute(kite_model *model, const char *text, size_t len, const kite_imatrix_params *params,
                         kite_imatrix_result *result, char *err, size_t err_size) {
    kite_error e = {0};
    if (!model || !params || !result)
        return kite_fail(&e, KITE_ERR_INVALID_ARG, "kite_imatrix_compute: model, params and result must not be NULL"),
               kite_error_export(&e, err, err_size);
    memset(result, 0, sizeof *result);
    const kite_quality_params *qp = &params->quality;
    int st = check_params(qp, &e);
    if (!st && (!params->output_path || !*params->output_path))
        st = kite_fail(&e, KITE_ERR_INVALID_ARG, "kite_imatrix_compute: no output path");
    chunks c = {0};
    if (!st && model->weights.hp.n_experts > 0)
        st = kite_fail(&e, KITE_ERR_UNSUPPORTED, "imatrix: mixture-of-experts models (%d experts per layer) are not supported yet "
                       "(their 3-D expert matrices need per-expert sums)", model->weights.hp.n_experts);
    if (!st) st = make_chunks(model, text, len, qp, &c, &e);
    if (!st) st = check_writable(params->output_path, &e);
    if (st) {
        free(c.tokens);
        return kite_error_export(&e, err, err_size);
    }
    ppl_state ps = {0};
    collector col = {.process_output = params->process_output};
    chunk_loop L = {.c = &c, .n_vocab = model->weights.hp.n_vocab, .score = ppl_score, .state = &ps, .p = qp,
                    .fill_progress = ppl_progress, .all_logits = true};
    st = open_session(&L.s[0], model, &c, qp, &e);
    if (!st) st = loop_alloc(&L, 1, &e);
    if (!st) {
        L.s[0]->scratch.act_hook = collect;
        L.s[0]->scratch.act_hook_user_data = &col;
        st = run_chunks(&L, &e);
        L.s[0]->scratch.act_hook = NULL;
    }
    if (!st && col.status) st = kite_fail(&e, col.status, "imatrix: %s", col.msg);
    kite_imatrix m = {0};
    char *dataset = (char *)params->dataset; /* never written through: kite_imatrix's names are not const */
    if (!st) st = build_imatrix(&col, &c, &dataset, &m, &e);
    if (!st) st = kite_imatrix_write(&m, params->output_path, params->legacy_format, &e);
    if (!st) {
        kite_perplexity_result pr;
        ppl_finish(&ps, &c, &pr);
        result->n_chunks = c.n_chunks;
        result->n_entries = (int32_t)m.n_entries;
        result->ppl = pr.ppl;
        result->ppl_error = pr.ppl_error;
    }
    m.datasets = NULL;
    m.n_datasets = 0;
    imatrix_release(&m);
    collector_free(&col);
    loop_free(&L);
    free(c.tokens);
    return kite_error_export(&e, err, err_size);
}
