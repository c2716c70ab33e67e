/* The Gumbel-max sampler draws from softmax(processed logits / T): a chi-square goodness-of-fit test.
 *
 * Each configuration draws N = 200000 tokens from a 16-token vocabulary with a fixed seed, one draw per
 * position 0..N-1 (the noise at different positions is independent). The expected frequencies come from
 * an independent reference in this file: penalties and bias by hand, the masks by their textbook
 * definitions on a full sort, then softmax(logits / T) in double over the survivors.
 * Pearson's statistic over the surviving tokens has (survivors - 1) degrees of freedom; the test fails
 * when its p-value, the regularized upper incomplete gamma Q(dof/2, chi2/2), is below 1e-4 (for 15 dof
 * that is chi2 > ~44.3). Masked tokens must never be drawn. Seeds are fixed, so the outcome is fixed. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kite.h"
#include "sample/sampler.h"

#define VOCAB 16
#define DRAWS 200000
#define P_VALUE_THRESHOLD 1e-4

static const float base_logits[VOCAB] = {1.9f,  -0.4f, 0.8f, 1.2f, -1.5f, 0.1f,  2.3f,  -0.9f,
                                         0.5f,  1.6f,  -0.2f, 0.0f, -1.1f, 0.95f, 0.3f, -0.6f};

/* ---- chi-square p-value: Q(a, x) = Gamma(a, x) / Gamma(a) -------------------------------------- */
static double regularized_gamma_q(double a, double x) {
    if (x <= 0.0) return 1.0;
    double log_prefactor = a * log(x) - x - lgamma(a);
    if (x < a + 1.0) { /* series for P(a, x) */
        double term = 1.0 / a, sum = term;
        for (int n = 1; n < 10000; n++) {
            term *= x / (a + n);
            sum += term;
            if (term < sum * 1e-17) break;
        }
        return 1.0 - sum * exp(log_prefactor);
    }
    /* continued fraction for Q(a, x) (modified Lentz) */
    const double tiny = 1e-300;
    double b = x + 1.0 - a, c = 1.0 / tiny, d = 1.0 / b, h = d;
    for (int i = 1; i < 10000; i++) {
        double an = -i * (i - a);
        b += 2.0;
        d = an * d + b;
        if (fabs(d) < tiny) d = tiny;
        c = b + an / c;
        if (fabs(c) < tiny) c = tiny;
        d = 1.0 / d;
        double delta = d * c;
        h *= delta;
        if (fabs(delta - 1.0) < 1e-16) break;
    }
    return exp(log_prefactor) * h;
}

static void test_chi_square_p_value_reference_points(void **state) {
    (void)state;
    /* Published chi-square table values: upper 1e-4 quantiles for 1, 10 and 15 dof (and the 5% one
     * for 15 dof), and Q(1, x) = exp(-x) exactly. */
    assert_true(fabs(regularized_gamma_q(0.5, 15.137 / 2) - 1e-4) < 2e-6);
    assert_true(fabs(regularized_gamma_q(5.0, 35.564 / 2) - 1e-4) < 2e-6);
    assert_true(fabs(regularized_gamma_q(7.5, 44.263 / 2) - 1e-4) < 2e-6);
    assert_true(fabs(regularized_gamma_q(7.5, 24.996 / 2) - 0.05) < 1e-4);
    assert_true(fabs(regularized_gamma_q(1.0, 3.0) - exp(-3.0)) < 1e-12);
}

/* ---- reference processing ------------------------------------------------------------------------- */
typedef struct config {
    const char *name;
    float temperature;
    int top_k;
    float top_p, min_p;
    float repeat_penalty, presence_penalty;
    const int32_t *history;
    size_t n_history;
    kite_logit_bias bias[2];
    size_t n_bias;
    int expected_survivors; /* worked out by hand from base_logits, as a check on the reference itself */
} config;

static const float *rank_keys;
static int compare_rank_reference(const void *pa, const void *pb) {
    int a = *(const int *)pa, b = *(const int *)pb;
    if (rank_keys[a] != rank_keys[b]) return rank_keys[a] > rank_keys[b] ? -1 : 1;
    return (a > b) - (a < b);
}

/* expected[t]: the probability of drawing t (0 for masked tokens). Returns the number of survivors. */
static int reference_distribution(const config *c, double expected[VOCAB]) {
    float logits[VOCAB];
    memcpy(logits, base_logits, sizeof logits);
    for (size_t i = 0; i < c->n_bias; i++) logits[c->bias[i].token] += c->bias[i].bias;
    int seen[VOCAB] = {0};
    for (size_t i = 0; i < c->n_history; i++) seen[c->history[i]] = 1;
    for (int t = 0; t < VOCAB; t++) {
        if (!seen[t]) continue;
        logits[t] = logits[t] > 0 ? logits[t] / c->repeat_penalty : logits[t] * c->repeat_penalty;
        logits[t] -= c->presence_penalty;
    }
    int order[VOCAB];
    for (int t = 0; t < VOCAB; t++) order[t] = t;
    rank_keys = logits;
    qsort(order, VOCAB, sizeof order[0], compare_rank_reference);
    int n_keep = VOCAB;
    if (c->top_k > 0 && c->top_k < n_keep) n_keep = c->top_k;
    double max = logits[order[0]], z = 0.0;
    for (int i = 0; i < n_keep; i++) z += exp(logits[order[i]] - max);
    if (c->top_p < 1.0f) {
        double cumulative = 0.0;
        for (int i = 0; i < n_keep; i++) {
            cumulative += exp(logits[order[i]] - max) / z;
            if (cumulative >= c->top_p) {
                n_keep = i + 1;
                break;
            }
        }
    }
    while (n_keep > 1 && exp(logits[order[n_keep - 1]] - max) < c->min_p) n_keep--;

    double zt = 0.0;
    for (int i = 0; i < n_keep; i++) zt += exp((logits[order[i]] - max) / c->temperature);
    memset(expected, 0, VOCAB * sizeof expected[0]);
    for (int i = 0; i < n_keep; i++) expected[order[i]] = exp((logits[order[i]] - max) / c->temperature) / zt;
    return n_keep;
}

static void draw_counts(const config *c, uint64_t seed, long counts[VOCAB]) {
    kite_gen_params p = kite_gen_default_params();
    p.temperature = c->temperature;
    p.top_k = c->top_k;
    p.top_p = c->top_p;
    p.min_p = c->min_p;
    p.repeat_penalty = c->repeat_penalty;
    p.presence_penalty = c->presence_penalty;
    p.frequency_penalty = 0.0f;
    p.penalty_last_n = -1;
    p.logit_bias = c->bias;
    p.n_logit_bias = c->n_bias;
    p.seed = seed;
    assert_int_equal(kite_gen_params_check(&p, VOCAB, NULL, 0), KITE_OK);
    memset(counts, 0, VOCAB * sizeof counts[0]);
    for (int64_t pos = 0; pos < DRAWS; pos++) {
        float logits[VOCAB];
        memcpy(logits, base_logits, sizeof logits);
        int32_t t = kite_sample(&p, logits, VOCAB, c->history, c->n_history, pos);
        assert_true(t >= 0 && t < VOCAB);
        counts[t]++;
    }
}

/* Returns the p-value of Pearson's chi-square; asserts masked tokens were never drawn. */
static double chi_square_p_value(const long counts[VOCAB], const double expected[VOCAB], double *statistic, int *dof) {
    double chi2 = 0.0;
    int cells = 0;
    for (int t = 0; t < VOCAB; t++) {
        if (expected[t] == 0.0) {
            if (counts[t] != 0) fail_msg("masked token %d drawn %ld times", t, counts[t]);
            continue;
        }
        double e = expected[t] * DRAWS;
        assert_true(e >= 5.0); /* the chi-square approximation needs enough expected counts per cell */
        chi2 += (counts[t] - e) * (counts[t] - e) / e;
        cells++;
    }
    *statistic = chi2;
    *dof = cells - 1;
    return *dof > 0 ? regularized_gamma_q(*dof / 2.0, chi2 / 2.0) : 1.0;
}

static const int32_t repeated[] = {6, 6, 3, 11};

static const config configs[] = {
    /* no masks: all 16 tokens */
    {"T=0.7", 0.7f, 0, 1.0f, 0.0f, 1.0f, 0.0f, NULL, 0, {{0, 0}}, 0, 16},
    {"T=1.0", 1.0f, 0, 1.0f, 0.0f, 1.0f, 0.0f, NULL, 0, {{0, 0}}, 0, 16},
    /* top-k 10: logits 2.3 1.9 1.6 1.2 0.95 0.8 0.5 0.3 0.1 0.0 survive */
    {"T=0.7 top_k=10", 0.7f, 10, 1.0f, 0.0f, 1.0f, 0.0f, NULL, 0, {{0, 0}}, 0, 10},
    /* top-p 0.8 on the T=1 probabilities (cumulative 0.264 0.440 0.571 0.659 0.727 0.786 0.829): 7 survive,
     * at either temperature (at T=0.7 probabilities the cut would come earlier) */
    {"T=1.0 top_p=0.8", 1.0f, 0, 0.8f, 0.0f, 1.0f, 0.0f, NULL, 0, {{0, 0}}, 0, 7},
    {"T=0.7 top_p=0.8", 0.7f, 0, 0.8f, 0.0f, 1.0f, 0.0f, NULL, 0, {{0, 0}}, 0, 7},
    /* everything at once: bias +1 on token 4 (-1.5 -> -0.5), -0.5 on token 9 (1.6 -> 1.1); history 6, 6, 3, 11
     * with repeat penalty 1.5 and presence 0.2 (2.3 -> 1.333, 1.2 -> 0.6, 0.0 -> -0.2); top-k 12 keeps
     * 1.9 1.333 1.1 0.95 0.8 0.6 0.5 0.3 0.1 -0.2 -0.2 -0.4; top-p 0.9 over those (cumulative ... 0.820 0.871
     * 0.913) keeps 9; min-p 0.25 (logit >= 1.9 - ln 4 = 0.514) keeps 6 */
    {"T=1.0 all processors", 1.0f, 12, 0.9f, 0.25f, 1.5f, 0.2f, repeated, 4, {{4, 1.0f}, {9, -0.5f}}, 2, 6},
    {"T=0.7 all processors", 0.7f, 12, 0.9f, 0.25f, 1.5f, 0.2f, repeated, 4, {{4, 1.0f}, {9, -0.5f}}, 2, 6},
};

static void test_sampler_matches_softmax(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof configs / sizeof configs[0]; i++) {
        const config *c = &configs[i];
        double expected[VOCAB];
        int survivors = reference_distribution(c, expected);
        assert_int_equal(survivors, c->expected_survivors);
        long counts[VOCAB];
        draw_counts(c, 0x5EED0000ull + i, counts);
        double chi2;
        int dof;
        double p_value = chi_square_p_value(counts, expected, &chi2, &dof);
        print_message("%-22s chi2 = %7.2f, dof = %2d, p = %.4f\n", c->name, chi2, dof, p_value);
        if (p_value < P_VALUE_THRESHOLD) fail_msg("%s: chi2 %.2f with %d dof, p = %.3g", c->name, chi2, dof, p_value);
    }
}

/* The test has power: draws at T = 0.7 are rejected against the T = 1.0 distribution, and draws with
 * top-k against the unmasked one (a masked token expected but never drawn). */
static void test_chi_square_detects_wrong_distribution(void **state) {
    (void)state;
    double expected_hot[VOCAB];
    reference_distribution(&configs[1], expected_hot);
    long counts[VOCAB];
    draw_counts(&configs[0], 0x5EED0000ull, counts);
    double chi2;
    int dof;
    double p_value = chi_square_p_value(counts, expected_hot, &chi2, &dof);
    print_message("T=0.7 draws vs T=1.0 softmax: chi2 = %.1f, p = %.3g\n", chi2, p_value);
    assert_true(p_value < 1e-10);
}

/* Plain determinism of the sampler: same seed and position, same token; the seed matters. */
static void test_sampler_determinism(void **state) {
    (void)state;
    kite_gen_params p = kite_gen_default_params();
    p.temperature = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    int differ = 0;
    for (int64_t pos = 0; pos < 1000; pos++) {
        float a[VOCAB], b[VOCAB];
        memcpy(a, base_logits, sizeof a);
        memcpy(b, base_logits, sizeof b);
        int32_t first = kite_sample(&p, a, VOCAB, NULL, 0, pos);
        assert_int_equal(kite_sample(&p, b, VOCAB, NULL, 0, pos), first);
        p.seed++;
        memcpy(b, base_logits, sizeof b);
        differ += kite_sample(&p, b, VOCAB, NULL, 0, pos) != first;
        p.seed--;
    }
    /* with two independent draws the tokens coincide with probability sum p^2 ~ 0.1 */
    assert_true(differ > 800);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chi_square_p_value_reference_points),
        cmocka_unit_test(test_sampler_matches_softmax),
        cmocka_unit_test(test_chi_square_detects_wrong_distribution),
        cmocka_unit_test(test_sampler_determinism),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
