/* What each backend is predicted to take (contract in route.h).
 *
 * Predicted wall time of a request with P prompt tokens and C completion tokens, in milliseconds:
 *   local:                      1000 * (fixed_s + P * prefill_s_per_token + C * decode_s_per_token)
 *                               (speeds measured at open by route_measure_local, then averaged with what
 *                               local answers took (route_latency_observe_local); an unmeasured model,
 *                               all zero, predicts 0 ms: the router measures by default)
 *   remote, observed:           1000 * (ewma_ttft_s + C * ewma_s_per_token)
 *   remote, nothing observed:   timeout.first_token_ms + C * 50 ms, a pessimistic guess, so that an
 *                               endpoint the router has not yet seen answer never looks faster than a
 *                               measured local model; the first real answers replace it.
 * The remote's time to first token holds its prefill, which the averages learn from the prompts it sees.
 * Averages: x <- x + 0.2 * (sample - x), the first sample taken as is. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "route/route.h"

enum { UNOBSERVED_MS_PER_TOKEN = 50, MEASURE_PROMPT_TOKENS = 32, MEASURE_DECODE_TOKENS = 8 };
#define EWMA_ALPHA 0.2

double route_latency_predict_ms(const route_latency *l, const route_backend *b, int32_t prompt_tokens,
                                int32_t completion_tokens) {
    double p = prompt_tokens > 0 ? prompt_tokens : 0, c = completion_tokens > 0 ? completion_tokens : 0;
    if (b->kind == ROUTE_BACKEND_LOCAL)
        return 1000.0 * (l->fixed_s + p * l->prefill_s_per_token + c * l->decode_s_per_token);
    if (l->n_observed > 0) return 1000.0 * (l->ewma_ttft_s + c * l->ewma_s_per_token);
    return (double)b->timeout.first_token_ms + c * UNOBSERVED_MS_PER_TOKEN;
}

static void ewma(double *avg, double sample, bool first) {
    *avg = first ? sample : *avg + EWMA_ALPHA * (sample - *avg);
}

/* A sample that is negative or not finite (nothing measured, e.g. a one-token answer has no per-token time)
 * leaves its average as it was. */
void route_latency_observe(route_latency *l, double ttft_s, double s_per_token) {
    bool ok_ttft = isfinite(ttft_s) && ttft_s >= 0, ok_tok = isfinite(s_per_token) && s_per_token >= 0;
    if (!ok_ttft && !ok_tok) return;
    bool first = l->n_observed == 0;
    if (ok_ttft) ewma(&l->ewma_ttft_s, ttft_s, first);
    if (ok_tok) ewma(&l->ewma_s_per_token, s_per_token, first || l->ewma_s_per_token == 0);
    l->n_observed++;
}

void route_latency_observe_local(route_latency *l, int32_t prefilled_tokens, double ttft_s, double s_per_token) {
    /* The prefill share of the wait: what is left after the fixed overhead, per computed prompt token. */
    if (prefilled_tokens > 0 && isfinite(ttft_s) && ttft_s >= 0)
        ewma(&l->prefill_s_per_token, fmax(0.0, ttft_s - l->fixed_s) / prefilled_tokens, l->prefill_s_per_token == 0);
    if (isfinite(s_per_token) && s_per_token > 0) ewma(&l->decode_s_per_token, s_per_token, l->decode_s_per_token == 0);
}

/* Prefills ids[0..n) from an empty context and returns its time (kite's own statistics), in ms. */
static int timed_prefill(kite_session *s, const int32_t *ids, size_t n, double *ms, kite_error *e) {
    char err[256];
    kite_session_reset(s);
    if (kite_prompt(s, ids, n, err, sizeof err)) return kite_fail(e, KITE_ERR_INVALID_ARG, "router: measuring the local model: %s", err);
    kite_stats st;
    kite_session_stats(s, &st);
    *ms = st.prefill_ms;
    return KITE_OK;
}

kite_status route_measure_local(kite_model *m, int32_t n_threads, route_latency *out, kite_error *e) {
    memset(out, 0, sizeof *out);
    kite_model_info info;
    kite_model_get_info(m, &info);
    kite_session_params sp = kite_session_default_params();
    sp.n_ctx = MEASURE_PROMPT_TOKENS + MEASURE_DECODE_TOKENS + 8;
    sp.n_threads = n_threads;
    kite_session *s = NULL;
    char err[256];
    if (kite_session_open(&s, m, &sp, err, sizeof err))
        return kite_fail(e, KITE_ERR_INVALID_ARG, "router: measuring the local model: %s", err);
    /* Ordinary text, so the passes look like a request's; repeated to the length needed. */
    static const char text[] = "The quick brown fox jumps over the lazy dog while the children play in the park. ";
    int32_t ids[MEASURE_PROMPT_TOKENS];
    size_t n = 0, got = 0;
    int rc = KITE_OK;
    int32_t piece[128];
    if (kite_tokenize(m, text, sizeof text - 1, false, false, piece, 128, &got, err, sizeof err) || got == 0) {
        for (got = 0; got < 16; got++) piece[got] = (int32_t)(got % (size_t)info.n_vocab);
    }
    if (info.bos_id >= 0 && info.add_bos) ids[n++] = info.bos_id;
    while (n < MEASURE_PROMPT_TOKENS) ids[n] = piece[n % got], n++;
    double warm_ms = 0, one_ms = 0, full_ms = 0;
    if ((rc = timed_prefill(s, ids, MEASURE_PROMPT_TOKENS, &warm_ms, e))) goto done; /* warm-up: pages in the weights */
    if ((rc = timed_prefill(s, ids, 1, &one_ms, e))) goto done;
    if ((rc = timed_prefill(s, ids, MEASURE_PROMPT_TOKENS, &full_ms, e))) goto done;
    /* Two points of t(P) = fixed + P * per_token. */
    double per_token = (full_ms - one_ms) / (MEASURE_PROMPT_TOKENS - 1);
    if (per_token <= 0) per_token = full_ms / MEASURE_PROMPT_TOKENS;
    out->prefill_s_per_token = per_token / 1000.0;
    out->fixed_s = fmax(0.0, one_ms - per_token) / 1000.0;
    kite_gen_params gp = kite_gen_default_params();
    gp.temperature = 0;
    gp.max_tokens = MEASURE_DECODE_TOKENS;
    gp.ignore_eos = true;
    if (kite_generate(s, &gp, NULL, NULL, err, sizeof err)) {
        rc = kite_fail(e, KITE_ERR_INVALID_ARG, "router: measuring the local model: %s", err);
        goto done;
    }
    kite_stats st;
    kite_session_stats(s, &st);
    /* decode_ms covers the tokens after the first; the first one's wait is part of ttft. */
    if (st.generated_tokens > 1) out->decode_s_per_token = st.decode_ms / (double)(st.generated_tokens - 1) / 1000.0;
    else out->decode_s_per_token = (st.ttft_ms - st.prefill_ms) / 1000.0;
    if (out->decode_s_per_token < 0) out->decode_s_per_token = 0;
    out->n_observed = 1;
done:
    kite_session_free(s);
    return rc;
}
