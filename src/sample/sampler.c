/* Logit processors and Gumbel-max sampling (contract in sampler.h).
 *
 * Every ordering decision uses one total order over (logit, id): a higher logit ranks first, and equal
 * logits rank by lower id. Because no two tokens compare equal, any sort or selection gives the same
 * result whatever its stability, and top-k ties at the boundary go to the lower id.
 *
 * Processing, in order:
 *   1. logit bias: logits[token] += bias (a -inf bias bans the token);
 *   2. penalties over the last penalty_last_n history tokens (-1 = all), llama.cpp style: for each
 *      distinct in-vocabulary token with count c in the window, logit = logit > 0 ? logit / r : logit * r,
 *      then logit -= c * frequency_penalty + presence_penalty;
 *   3. NaN becomes -inf and +inf becomes FLT_MAX, so the order above is total and softmax stays finite;
 *   4. masks, on softmax(logits) without temperature, llama.cpp's order: top-k keeps the k first tokens;
 *      top-p keeps the shortest prefix (renormalised over the top-k survivors) whose probability reaches
 *      top_p; min-p drops tokens with p < min_p * p_max. The first-ranked token always survives.
 * Sums of exp(logit - max) are taken in double over a fixed order (index order for the whole vocabulary,
 * rank order for a top-k set), so the result never depends on the path taken to find it. */
#include "sample/sampler.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

/* Larger than any value kite_gumbel returns: U <= 1 - 2^-24 gives G <= -log(-log(1 - 2^-24)) ~ 16.64. */
#define GUMBEL_UPPER_BOUND 17.0f

typedef struct ranked_logit {
    float logit;
    int32_t id;
} ranked_logit;

static bool ranks_before(ranked_logit a, ranked_logit b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

static int compare_rank(const void *pa, const void *pb) {
    const ranked_logit *a = pa, *b = pb;
    if (ranks_before(*a, *b)) return -1;
    if (ranks_before(*b, *a)) return 1;
    return 0;
}

static int compare_int32(const void *pa, const void *pb) {
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    return (a > b) - (a < b);
}

static void swap_ranked(ranked_logit *a, ranked_logit *b) {
    ranked_logit t = *a;
    *a = *b;
    *b = t;
}

/* Rearranges a[0..n) so that a[0..k) holds the k first-ranked elements (in no particular order).
 * Quickselect with a median-of-three pivot; after a bounded number of rounds it sorts what is left,
 * so the worst case stays O(n log n). */
static void select_first_k(ranked_logit *a, size_t n, size_t k) {
    size_t lo = 0, hi = n; /* invariant: a[0..lo) rank before a[lo..hi), which rank before a[hi..n) */
    int rounds_left = 64;
    while (lo < k && k < hi && hi - lo > 16) {
        if (rounds_left-- == 0) break;
        size_t mid = lo + (hi - lo) / 2, last = hi - 1;
        /* move the median of a[lo], a[mid], a[last] to a[last] as the pivot */
        if (ranks_before(a[mid], a[lo])) swap_ranked(&a[mid], &a[lo]);
        if (ranks_before(a[last], a[lo])) swap_ranked(&a[last], &a[lo]);
        if (ranks_before(a[mid], a[last])) swap_ranked(&a[mid], &a[last]);
        ranked_logit pivot = a[last];
        size_t split = lo;
        for (size_t j = lo; j < last; j++) {
            if (ranks_before(a[j], pivot)) swap_ranked(&a[split++], &a[j]);
        }
        swap_ranked(&a[split], &a[last]); /* a[split] is the pivot, in its final rank */
        if (k <= split) {
            hi = split;
        } else if (k == split + 1) {
            return;
        } else {
            lo = split + 1;
        }
    }
    if (lo < k && k < hi) qsort(a + lo, hi - lo, sizeof *a, compare_rank);
}

static int32_t argmax_lowest_id(const float *logits, int32_t n_vocab) {
    int32_t best = 0;
    for (int32_t t = 1; t < n_vocab; t++) {
        if (logits[t] > logits[best]) best = t;
    }
    return best;
}

static bool keeps_min_p(float logit, float max_logit, float min_p) {
    return exp((double)logit - (double)max_logit) >= (double)min_p;
}

/* Length of the shortest prefix of sorted[0..n) whose weights exp(logit - max) sum to at least
 * target, or 0 when the whole array falls short. */
static size_t top_p_prefix(const ranked_logit *sorted, size_t n, float max_logit, double target) {
    double cumulative = 0.0;
    for (size_t i = 0; i < n; i++) {
        cumulative += exp((double)sorted[i].logit - (double)max_logit);
        if (cumulative >= target) return i + 1;
    }
    return 0;
}

static void apply_logit_bias(const kite_gen_params *p, float *logits, int32_t n_vocab) {
    if (!p->logit_bias) return;
    for (size_t i = 0; i < p->n_logit_bias; i++) {
        int32_t token = p->logit_bias[i].token;
        if (token >= 0 && token < n_vocab) logits[token] += p->logit_bias[i].bias;
    }
}

static void apply_penalties(const kite_gen_params *p, float *logits, int32_t n_vocab, const int32_t *history,
                            size_t n_history) {
    if (p->repeat_penalty == 1.0f && p->presence_penalty == 0.0f && p->frequency_penalty == 0.0f) return;
    if (!history || n_history == 0 || p->penalty_last_n == 0) return;
    size_t window = n_history;
    if (p->penalty_last_n > 0 && (size_t)p->penalty_last_n < window) window = (size_t)p->penalty_last_n;

    int32_t *ids = malloc(window * sizeof *ids);
    if (!ids) {
        kite_log(KITE_LOG_WARN, "sampler: out of memory counting %zu history tokens; penalties skipped", window);
        return;
    }
    memcpy(ids, history + (n_history - window), window * sizeof *ids);
    qsort(ids, window, sizeof *ids, compare_int32);
    for (size_t i = 0; i < window;) {
        size_t run_end = i + 1;
        while (run_end < window && ids[run_end] == ids[i]) run_end++;
        int32_t token = ids[i];
        if (token >= 0 && token < n_vocab) {
            float count = (float)(run_end - i);
            float logit = logits[token];
            if (p->repeat_penalty != 1.0f) logit = logit > 0.0f ? logit / p->repeat_penalty : logit * p->repeat_penalty;
            logit -= count * p->frequency_penalty + p->presence_penalty;
            logits[token] = logit;
        }
        i = run_end;
    }
    free(ids);
}

static void sanitize(float *logits, int32_t n_vocab) {
    for (int32_t t = 0; t < n_vocab; t++) {
        if (isnan(logits[t])) logits[t] = -INFINITY;
        else if (logits[t] == INFINITY) logits[t] = FLT_MAX;
    }
}

static void apply_masks(const kite_gen_params *p, float *logits, int32_t n_vocab) {
    bool use_top_k = p->top_k > 0;
    bool use_top_p = p->top_p < 1.0f;
    bool use_min_p = p->min_p > 0.0f;
    if (!use_top_k && !use_top_p && !use_min_p) return;

    float max_logit = -INFINITY;
    size_t n_finite = 0;
    for (int32_t t = 0; t < n_vocab; t++) {
        if (logits[t] > -INFINITY) {
            n_finite++;
            if (logits[t] > max_logit) max_logit = logits[t];
        }
    }
    if (n_finite <= 1) return;
    if (use_top_k && (size_t)p->top_k >= n_finite) use_top_k = false;
    if (!use_top_k && !use_top_p) { /* min-p alone is a threshold on the logit: no ordering needed */
        for (int32_t t = 0; t < n_vocab; t++) {
            if (logits[t] > -INFINITY && !keeps_min_p(logits[t], max_logit, p->min_p)) logits[t] = -INFINITY;
        }
        return;
    }

    ranked_logit *ranked = malloc(n_finite * sizeof *ranked);
    if (!ranked) {
        /* Every mask keeps the first-ranked token, so keeping only it never admits a filtered token. */
        kite_log(KITE_LOG_WARN, "sampler: out of memory ranking %zu logits; keeping only the top token", n_finite);
        int32_t top = argmax_lowest_id(logits, n_vocab);
        for (int32_t t = 0; t < n_vocab; t++) {
            if (t != top) logits[t] = -INFINITY;
        }
        return;
    }

    /* ranked[0..n_keep) will hold the surviving tokens, sorted by rank. */
    size_t n_keep = 0;
    double weight_sum = 0.0; /* sum of exp(logit - max) over the top-k survivors (or the whole vocabulary) */
    if (use_top_k) {
        for (int32_t t = 0; t < n_vocab; t++) {
            if (logits[t] > -INFINITY) ranked[n_keep++] = (ranked_logit){logits[t], t};
        }
        n_keep = (size_t)p->top_k;
        select_first_k(ranked, n_finite, n_keep);
        qsort(ranked, n_keep, sizeof *ranked, compare_rank);
        for (size_t i = 0; i < n_keep; i++) weight_sum += exp((double)ranked[i].logit - (double)max_logit);
    } else {
        for (int32_t t = 0; t < n_vocab; t++) {
            if (logits[t] > -INFINITY) weight_sum += exp((double)logits[t] - (double)max_logit);
        }
    }

    if (use_top_p) {
        double target = (double)p->top_p * weight_sum;
        if (use_top_k) {
            size_t prefix = top_p_prefix(ranked, n_keep, max_logit, target);
            if (prefix > 0) n_keep = prefix; /* else rounding left the sum short: keep all k */
        } else {
            /* The top-p set is a prefix of the rank order, and so is {logit >= max - margin}: sort only
             * that, widening the margin (finally to everything) until the prefix ends inside it. The walk
             * over the prefix is the same whichever margin found it. */
            static const double margins[] = {8.0, 24.0, 64.0, INFINITY};
            for (size_t m = 0; m < sizeof margins / sizeof margins[0]; m++) {
                size_t n_candidates = 0;
                for (int32_t t = 0; t < n_vocab; t++) {
                    if (logits[t] > -INFINITY && (double)logits[t] >= (double)max_logit - margins[m]) {
                        ranked[n_candidates++] = (ranked_logit){logits[t], t};
                    }
                }
                qsort(ranked, n_candidates, sizeof *ranked, compare_rank);
                size_t prefix = top_p_prefix(ranked, n_candidates, max_logit, target);
                if (prefix > 0 || n_candidates == n_finite) {
                    n_keep = prefix > 0 ? prefix : n_candidates;
                    break;
                }
            }
        }
    }

    if (use_min_p) { /* a threshold on the logit cuts the sorted prefix; the first token always passes */
        while (n_keep > 1 && !keeps_min_p(ranked[n_keep - 1].logit, max_logit, p->min_p)) n_keep--;
    }

    ranked_logit last_kept = ranked[n_keep - 1];
    for (int32_t t = 0; t < n_vocab; t++) {
        if (logits[t] > -INFINITY && ranks_before(last_kept, (ranked_logit){logits[t], t})) logits[t] = -INFINITY;
    }
    free(ranked);
}

void kite_process_logits(const kite_gen_params *p, float *logits, int32_t n_vocab, const int32_t *history,
                         size_t n_history) {
    if (!p || !logits || n_vocab <= 0) return;
    apply_logit_bias(p, logits, n_vocab);
    apply_penalties(p, logits, n_vocab, history, n_history);
    sanitize(logits, n_vocab);
    apply_masks(p, logits, n_vocab);
}

int32_t kite_sample(const kite_gen_params *p, float *logits, int32_t n_vocab, const int32_t *history,
                    size_t n_history, int64_t position) {
    if (!p || !logits || n_vocab <= 0) return -1;
    kite_process_logits(p, logits, n_vocab, history, n_history);
    int32_t top = argmax_lowest_id(logits, n_vocab);
    if (!(p->temperature > 0.0f) || logits[top] == -INFINITY) return top;

    /* Gumbel-max: argmax of logit / T + G. The greedy token gives a first score; any token whose
     * scaled logit plus the largest possible noise is below it cannot win, so its noise is never drawn.
     * fl(x + 17) >= fl(x + g) for every g <= 17, so the skip is exact, and ties still go to the lower id. */
    const float temperature = p->temperature;
    int32_t best_id = top;
    float best_score = logits[top] / temperature + kite_gumbel(p->seed, position, top);
    for (int32_t t = 0; t < n_vocab; t++) {
        if (t == top || !(logits[t] > -INFINITY)) continue;
        float scaled = logits[t] / temperature;
        if (scaled + GUMBEL_UPPER_BOUND < best_score) continue;
        float score = scaled + kite_gumbel(p->seed, position, t);
        if (score > best_score || (score == best_score && t < best_id)) {
            best_score = score;
            best_id = t;
        }
    }
    return best_id;
}

__attribute__((format(printf, 3, 4))) static int check_fail(char *err, size_t err_size, const char *fmt, ...) {
    if (err && err_size > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_size, fmt, ap);
        va_end(ap);
    }
    return KITE_ERR_INVALID_ARG;
}

int kite_gen_params_check(const kite_gen_params *p, int32_t n_vocab, char *err, size_t err_size) {
    if (err && err_size > 0) err[0] = '\0';
    if (!p) return check_fail(err, err_size, "generation parameters are NULL");
    if (n_vocab <= 0) return check_fail(err, err_size, "n_vocab must be > 0, got %d", (int)n_vocab);
    if (p->max_tokens < 0) return check_fail(err, err_size, "max_tokens must be >= 0, got %d", (int)p->max_tokens);
    if (!(isfinite(p->temperature) && p->temperature >= 0.0f))
        return check_fail(err, err_size, "temperature must be finite and >= 0 (0 = greedy), got %g",
                          (double)p->temperature);
    if (p->top_k < 0) return check_fail(err, err_size, "top_k must be >= 0 (0 = off), got %d", (int)p->top_k);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return check_fail(err, err_size, "top_p must be in (0, 1], got %g", (double)p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return check_fail(err, err_size, "min_p must be in [0, 1], got %g", (double)p->min_p);
    if (!(isfinite(p->repeat_penalty) && p->repeat_penalty > 0.0f))
        return check_fail(err, err_size, "repeat_penalty must be finite and > 0 (1 = off), got %g",
                          (double)p->repeat_penalty);
    if (p->penalty_last_n < -1)
        return check_fail(err, err_size, "penalty_last_n must be >= -1 (-1 = whole context), got %d",
                          (int)p->penalty_last_n);
    if (!isfinite(p->presence_penalty))
        return check_fail(err, err_size, "presence_penalty must be finite, got %g", (double)p->presence_penalty);
    if (!isfinite(p->frequency_penalty))
        return check_fail(err, err_size, "frequency_penalty must be finite, got %g", (double)p->frequency_penalty);
    if (p->n_logit_bias > 0 && !p->logit_bias)
        return check_fail(err, err_size, "logit_bias is NULL but n_logit_bias is %zu", p->n_logit_bias);
    for (size_t i = 0; i < p->n_logit_bias; i++) {
        const kite_logit_bias *b = &p->logit_bias[i];
        if (b->token < 0 || b->token >= n_vocab)
            return check_fail(err, err_size, "logit_bias[%zu].token must be in [0, %d), got %d", i, (int)n_vocab,
                              (int)b->token);
        if (isnan(b->bias) || b->bias == INFINITY)
            return check_fail(err, err_size, "logit_bias[%zu].bias must be finite or -inf (ban), got %g", i,
                              (double)b->bias);
    }
    if (p->n_stop > 0 && !p->stop) return check_fail(err, err_size, "stop is NULL but n_stop is %zu", p->n_stop);
    if (p->n_stop > KITE_MAX_STOP)
        return check_fail(err, err_size, "at most %d stop strings, got %zu", KITE_MAX_STOP, p->n_stop);
    for (size_t i = 0; i < p->n_stop; i++) {
        if (!p->stop[i] || !p->stop[i][0]) return check_fail(err, err_size, "stop[%zu] is NULL or empty", i);
        if (strlen(p->stop[i]) > KITE_MAX_STOP_BYTES)
            return check_fail(err, err_size, "stop[%zu] is longer than %d bytes", i, KITE_MAX_STOP_BYTES);
    }
    if (p->top_logprobs < 0 || p->top_logprobs > KITE_MAX_TOP_LOGPROBS)
        return check_fail(err, err_size, "top_logprobs must be in [0, %d], got %d", KITE_MAX_TOP_LOGPROBS,
                          (int)p->top_logprobs);
    return KITE_OK;
}
