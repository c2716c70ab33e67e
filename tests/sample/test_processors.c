/* Logit processors against hand-computed expectations, greedy selection, parameter validation, and the
 * processors and sampler on a 152k vocabulary against naive references. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "kite.h"
#include "sample/sampler.h"

/* Every processor off, greedy. */
static kite_gen_params plain_params(void) {
    kite_gen_params p = kite_gen_default_params();
    p.temperature = 0.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.repeat_penalty = 1.0f;
    p.presence_penalty = 0.0f;
    p.frequency_penalty = 0.0f;
    return p;
}

static void assert_logits_equal(const float *got, const float *expected, int n) {
    for (int i = 0; i < n; i++) {
        if (isinf(expected[i])) {
            if (!(isinf(got[i]) && got[i] == expected[i])) fail_msg("logit %d: got %g, want %g", i, got[i], expected[i]);
        } else if (fabsf(got[i] - expected[i]) > 1e-6f * fmaxf(1.0f, fabsf(expected[i]))) {
            fail_msg("logit %d: got %.9g, want %.9g", i, got[i], expected[i]);
        }
    }
}

/* Asserts exactly the tokens in keep[] (1 = kept) are finite and kept ones are unchanged. */
static void assert_kept(const float *processed, const float *original, const int *keep, int n) {
    for (int i = 0; i < n; i++) {
        if (keep[i]) {
            if (processed[i] != original[i]) fail_msg("token %d should be kept unchanged: %g -> %g", i, original[i], processed[i]);
        } else if (processed[i] != -INFINITY) {
            fail_msg("token %d should be masked, has %g", i, processed[i]);
        }
    }
}

static void test_defaults(void **state) {
    (void)state;
    kite_gen_params p = kite_gen_default_params();
    assert_int_equal(p.max_tokens, 256);
    assert_true(p.temperature == 0.8f && p.top_k == 40 && p.top_p == 0.95f && p.min_p == 0.05f);
    assert_true(p.repeat_penalty == 1.0f && p.penalty_last_n == 64);
    assert_true(p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f);
    assert_true(p.seed == 0xC0FFEEu);
    assert_null(p.logit_bias);
    assert_int_equal(p.n_logit_bias, 0);
    assert_false(p.ignore_eos);
    char err[256];
    assert_int_equal(kite_gen_params_check(&p, 32000, err, sizeof err), KITE_OK);
    assert_string_equal(err, "");
}

static void expect_check_error(const kite_gen_params *p, int32_t n_vocab, const char *expected_message) {
    char err[256] = "unset";
    assert_int_equal(kite_gen_params_check(p, n_vocab, err, sizeof err), KITE_ERR_INVALID_ARG);
    if (!strstr(err, expected_message)) fail_msg("message '%s' lacks '%s'", err, expected_message);
}

static void test_params_check(void **state) {
    (void)state;
    kite_gen_params p;
    const kite_gen_params base = kite_gen_default_params();

    p = base; p.top_p = 1.5f;
    expect_check_error(&p, 100, "top_p must be in (0, 1], got 1.5");
    p = base; p.top_p = 0.0f;
    expect_check_error(&p, 100, "top_p must be in (0, 1], got 0");
    p = base; p.top_p = NAN;
    expect_check_error(&p, 100, "top_p");
    p = base; p.temperature = -0.1f;
    expect_check_error(&p, 100, "temperature");
    p = base; p.temperature = INFINITY;
    expect_check_error(&p, 100, "temperature");
    p = base; p.temperature = NAN;
    expect_check_error(&p, 100, "temperature");
    p = base; p.max_tokens = -1;
    expect_check_error(&p, 100, "max_tokens must be >= 0, got -1");
    p = base; p.top_k = -3;
    expect_check_error(&p, 100, "top_k must be >= 0 (0 = off), got -3");
    p = base; p.min_p = 1.25f;
    expect_check_error(&p, 100, "min_p must be in [0, 1], got 1.25");
    p = base; p.min_p = -0.5f;
    expect_check_error(&p, 100, "min_p");
    p = base; p.repeat_penalty = 0.0f;
    expect_check_error(&p, 100, "repeat_penalty");
    p = base; p.repeat_penalty = NAN;
    expect_check_error(&p, 100, "repeat_penalty");
    p = base; p.penalty_last_n = -2;
    expect_check_error(&p, 100, "penalty_last_n must be >= -1");
    p = base; p.presence_penalty = INFINITY;
    expect_check_error(&p, 100, "presence_penalty");
    p = base; p.frequency_penalty = NAN;
    expect_check_error(&p, 100, "frequency_penalty");
    p = base; p.n_logit_bias = 2;
    expect_check_error(&p, 100, "logit_bias is NULL but n_logit_bias is 2");
    kite_logit_bias bad_token[] = {{5, 1.0f}, {100, 1.0f}};
    p = base; p.logit_bias = bad_token; p.n_logit_bias = 2;
    expect_check_error(&p, 100, "logit_bias[1].token must be in [0, 100), got 100");
    kite_logit_bias negative_token[] = {{-1, 1.0f}};
    p = base; p.logit_bias = negative_token; p.n_logit_bias = 1;
    expect_check_error(&p, 100, "logit_bias[0].token");
    kite_logit_bias nan_bias[] = {{3, NAN}};
    p = base; p.logit_bias = nan_bias; p.n_logit_bias = 1;
    expect_check_error(&p, 100, "logit_bias[0].bias");
    kite_logit_bias plus_inf_bias[] = {{3, INFINITY}};
    p = base; p.logit_bias = plus_inf_bias; p.n_logit_bias = 1;
    expect_check_error(&p, 100, "logit_bias[0].bias");
    p = base;
    expect_check_error(&p, 0, "n_vocab");
    expect_check_error(NULL, 100, "NULL");

    /* accepted edge values */
    kite_logit_bias ban[] = {{99, -INFINITY}, {0, -3.0f}};
    p = base; p.logit_bias = ban; p.n_logit_bias = 2; p.top_p = 1.0f; p.min_p = 1.0f; p.temperature = 0.0f;
    p.top_k = 0; p.penalty_last_n = -1; p.presence_penalty = -2.0f; p.max_tokens = 0;
    assert_int_equal(kite_gen_params_check(&p, 100, NULL, 0), KITE_OK);
    /* a tiny err buffer is still NUL-terminated */
    char tiny[4];
    p = base; p.top_p = 2.0f;
    assert_int_equal(kite_gen_params_check(&p, 100, tiny, sizeof tiny), KITE_ERR_INVALID_ARG);
    assert_string_equal(tiny, "top");
}

static void test_logit_bias(void **state) {
    (void)state;
    kite_gen_params p = plain_params();
    kite_logit_bias bias[] = {{0, 2.5f}, {3, -1.0f}, {0, 0.5f}};
    p.logit_bias = bias;
    p.n_logit_bias = 3;
    float logits[4] = {1, 2, 3, 4};
    kite_process_logits(&p, logits, 4, NULL, 0);
    assert_logits_equal(logits, (const float[]){4, 2, 3, 3}, 4);

    /* the bias changes the greedy choice: 4 vs 3 vs 3 -> token 0 */
    float logits2[4] = {1, 2, 3, 4};
    assert_int_equal(kite_sample(&p, logits2, 4, NULL, 0, 0), 0);

    /* -inf bans a token even when it is the argmax, sampled or greedy */
    kite_logit_bias ban[] = {{1, -INFINITY}};
    p.logit_bias = ban;
    p.n_logit_bias = 1;
    float logits3[3] = {0, 10, 1};
    assert_int_equal(kite_sample(&p, logits3, 3, NULL, 0, 0), 2);
    p.temperature = 1.0f;
    for (int64_t pos = 0; pos < 200; pos++) {
        float l[3] = {0, 10, 1};
        assert_int_not_equal(kite_sample(&p, l, 3, NULL, 0, pos), 1);
    }
}

static void test_repetition_penalty(void **state) {
    (void)state;
    kite_gen_params p = plain_params();
    p.repeat_penalty = 2.0f;
    p.penalty_last_n = -1;
    /* history holds 0, 1 (twice) and 3; 9 and -5 are outside the vocabulary and ignored */
    const int32_t history[] = {0, 1, 9, 1, -5, 3};
    float logits[5] = {2, -1, 0.5f, 3, 0};
    kite_process_logits(&p, logits, 5, history, 6);
    /* positive logits divided, negative multiplied, absent tokens untouched; repeats count once */
    assert_logits_equal(logits, (const float[]){1, -2, 0.5f, 1.5f, 0}, 5);

    /* window of the last 2 tokens: only -5 and 3 */
    p.penalty_last_n = 2;
    float logits2[5] = {2, -1, 0.5f, 3, 0};
    kite_process_logits(&p, logits2, 5, history, 6);
    assert_logits_equal(logits2, (const float[]){2, -1, 0.5f, 1.5f, 0}, 5);

    /* window of 3: 1, -5, 3 */
    p.penalty_last_n = 3;
    float logits3[5] = {2, -1, 0.5f, 3, 0};
    kite_process_logits(&p, logits3, 5, history, 6);
    assert_logits_equal(logits3, (const float[]){2, -2, 0.5f, 1.5f, 0}, 5);

    /* window 0 turns the penalties off; a window larger than the history takes all of it */
    p.penalty_last_n = 0;
    float logits4[5] = {2, -1, 0.5f, 3, 0};
    kite_process_logits(&p, logits4, 5, history, 6);
    assert_logits_equal(logits4, (const float[]){2, -1, 0.5f, 3, 0}, 5);
    p.penalty_last_n = 1000;
    float logits5[5] = {2, -1, 0.5f, 3, 0};
    kite_process_logits(&p, logits5, 5, history, 6);
    assert_logits_equal(logits5, (const float[]){1, -2, 0.5f, 1.5f, 0}, 5);

    /* a penalty turns the greedy choice: 3 / 1.1 = 2.73 < 2.9 */
    p.repeat_penalty = 1.1f;
    p.penalty_last_n = 64;
    const int32_t said_zero[] = {0};
    float logits6[2] = {3.0f, 2.9f};
    assert_int_equal(kite_sample(&p, logits6, 2, said_zero, 1, 5), 1);
    float logits7[2] = {3.0f, 2.9f};
    assert_int_equal(kite_sample(&p, logits7, 2, NULL, 0, 5), 0);
}

static void test_presence_frequency(void **state) {
    (void)state;
    kite_gen_params p = plain_params();
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    p.penalty_last_n = 64;
    const int32_t history[] = {1, 4, 1, 2, 4, 1}; /* counts: 1 x3, 4 x2, 2 x1 */
    float logits[5] = {1, 1, 1, 1, 1};
    kite_process_logits(&p, logits, 5, history, 6);
    /* 1 - (count * 0.25 + 0.5) */
    assert_logits_equal(logits, (const float[]){1, -0.25f, 0.25f, 1, 0}, 5);

    /* with a repetition penalty of 2 first: 1 / 2 - (count * 0.25 + 0.5) */
    p.repeat_penalty = 2.0f;
    float logits2[5] = {1, 1, 1, 1, 1};
    kite_process_logits(&p, logits2, 5, history, 6);
    assert_logits_equal(logits2, (const float[]){1, -0.75f, -0.25f, 1, -0.5f}, 5);
}

static void test_top_k(void **state) {
    (void)state;
    kite_gen_params p = plain_params();
    const float original[6] = {1, 5, 3, 3, 3, 0};
    float logits[6];

    /* three tokens tie at 3 for the last two places: the lower ids win */
    p.top_k = 3;
    memcpy(logits, original, sizeof logits);
    kite_process_logits(&p, logits, 6, NULL, 0);
    assert_kept(logits, original, (const int[]){0, 1, 1, 1, 0, 0}, 6);

    p.top_k = 1;
    memcpy(logits, original, sizeof logits);
    kite_process_logits(&p, logits, 6, NULL, 0);
    assert_kept(logits, original, (const int[]){0, 1, 0, 0, 0, 0}, 6);

    /* k >= vocabulary, and k = 0, keep everything */
    p.top_k = 6;
    memcpy(logits, original, sizeof logits);
    kite_process_logits(&p, logits, 6, NULL, 0);
    assert_kept(logits, original, (const int[]){1, 1, 1, 1, 1, 1}, 6);
    p.top_k = 0;
    memcpy(logits, original, sizeof logits);
    kite_process_logits(&p, logits, 6, NULL, 0);
    assert_kept(logits, original, (const int[]){1, 1, 1, 1, 1, 1}, 6);

    /* already-banned tokens do not count towards k */
    p.top_k = 2;
    const float with_banned[4] = {-INFINITY, 1, -INFINITY, 0};
    memcpy(logits, with_banned, sizeof with_banned);
    kite_process_logits(&p, logits, 4, NULL, 0);
    assert_kept(logits, with_banned, (const int[]){0, 1, 0, 1}, 4);

    /* ties in a bigger vocabulary: 100 tokens all equal, keep the 10 lowest ids */
    float flat[100], flat_original[100];
    int keep[100];
    for (int i = 0; i < 100; i++) {
        flat[i] = flat_original[i] = 0.5f;
        keep[i] = i < 10;
    }
    p.top_k = 10;
    kite_process_logits(&p, flat, 100, NULL, 0);
    assert_kept(flat, flat_original, keep, 100);
}

static void test_top_p(void **state) {
    (void)state;
    kite_gen_params p = plain_params();
    /* probabilities 0.2, 0.5, 0.3 (rank order: 1, 2, 0) */
    const float original[3] = {logf(0.2f), logf(0.5f), logf(0.3f)};
    const struct {
        float top_p;
        int keep[3];
    } cases[] = {
        {0.01f, {0, 1, 0}}, {0.49f, {0, 1, 0}}, {0.51f, {0, 1, 1}}, {0.79f, {0, 1, 1}},
        {0.81f, {1, 1, 1}}, {1.0f, {1, 1, 1}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        float logits[3];
        memcpy(logits, original, sizeof logits);
        p.top_p = cases[c].top_p;
        kite_process_logits(&p, logits, 3, NULL, 0);
        assert_kept(logits, original, cases[c].keep, 3);
    }

    /* top-p renormalises over the top-k survivors: probabilities 0.1, 0.4, 0.2, 0.3.
     * Alone, top_p 0.55 keeps 1 and 3 (0.4 < 0.55 <= 0.7); after top_k 2 the survivors have 4/7 and 3/7,
     * and 4/7 = 0.571 >= 0.55 keeps token 1 only. */
    const float four[4] = {logf(0.1f), logf(0.4f), logf(0.2f), logf(0.3f)};
    float logits[4];
    p.top_p = 0.55f;
    p.top_k = 0;
    memcpy(logits, four, sizeof logits);
    kite_process_logits(&p, logits, 4, NULL, 0);
    assert_kept(logits, four, (const int[]){0, 1, 0, 1}, 4);
    p.top_k = 2;
    memcpy(logits, four, sizeof logits);
    kite_process_logits(&p, logits, 4, NULL, 0);
    assert_kept(logits, four, (const int[]){0, 1, 0, 0}, 4);
    p.top_p = 0.6f; /* 4/7 < 0.6: both survivors */
    memcpy(logits, four, sizeof logits);
    kite_process_logits(&p, logits, 4, NULL, 0);
    assert_kept(logits, four, (const int[]){0, 1, 0, 1}, 4);

    /* equal probabilities at the boundary: the lower id comes first in the prefix */
    const float tied[4] = {0, 1, 1, 0}; /* p ~ 0.134, 0.366, 0.366, 0.134 */
    p.top_k = 0;
    p.top_p = 0.5f;
    memcpy(logits, tied, sizeof logits);
    kite_process_logits(&p, logits, 4, NULL, 0);
    assert_kept(logits, tied, (const int[]){0, 1, 1, 0}, 4);
    p.top_p = 0.8f; /* 0.732 < 0.8: one of the two 0.134s, the lower id */
    memcpy(logits, tied, sizeof logits);
    kite_process_logits(&p, logits, 4, NULL, 0);
    assert_kept(logits, tied, (const int[]){1, 1, 1, 0}, 4);
}

static void test_min_p(void **state) {
    (void)state;
    kite_gen_params p = plain_params();
    /* probabilities 0.5, 0.3, 0.1, 0.06, 0.04 */
    const float original[5] = {logf(0.5f), logf(0.3f), logf(0.1f), logf(0.06f), logf(0.04f)};
    float logits[5];
    p.min_p = 0.1f; /* drop p < 0.05 */
    memcpy(logits, original, sizeof logits);
    kite_process_logits(&p, logits, 5, NULL, 0);
    assert_kept(logits, original, (const int[]){1, 1, 1, 1, 0}, 5);
    p.min_p = 0.25f; /* drop p < 0.125 */
    memcpy(logits, original, sizeof logits);
    kite_process_logits(&p, logits, 5, NULL, 0);
    assert_kept(logits, original, (const int[]){1, 1, 0, 0, 0}, 5);
    p.min_p = 1.0f; /* only the maximum */
    memcpy(logits, original, sizeof logits);
    kite_process_logits(&p, logits, 5, NULL, 0);
    assert_kept(logits, original, (const int[]){1, 0, 0, 0, 0}, 5);

    /* the same cut through the sorted paths: after top-k (5 of 6) and after top-p (0.99 keeps 0..4) */
    const float six[6] = {logf(0.5f), logf(0.3f), logf(0.1f), logf(0.06f), logf(0.04f), logf(1e-4f)};
    float logits6[6];
    p.min_p = 0.1f;
    p.top_k = 5;
    memcpy(logits6, six, sizeof logits6);
    kite_process_logits(&p, logits6, 6, NULL, 0);
    assert_kept(logits6, six, (const int[]){1, 1, 1, 1, 0, 0}, 6);
    p.top_k = 0;
    p.top_p = 0.99f;
    memcpy(logits6, six, sizeof logits6);
    kite_process_logits(&p, logits6, 6, NULL, 0);
    assert_kept(logits6, six, (const int[]){1, 1, 1, 1, 0, 0}, 6);
}

static void test_greedy(void **state) {
    (void)state;
    kite_gen_params p = plain_params();
    float a[4] = {1, 3, 3, 2};
    assert_int_equal(kite_sample(&p, a, 4, NULL, 0, 0), 1); /* tie goes to the lower id */
    float b[5] = {-5, -2, -7, -2, -3};
    assert_int_equal(kite_sample(&p, b, 5, NULL, 0, 0), 1);
    /* masks never change the greedy choice */
    p.top_k = 2;
    p.top_p = 0.3f;
    p.min_p = 0.5f;
    float c[5] = {0.1f, 0.7f, 0.7f, 0.2f, 0.69f};
    assert_int_equal(kite_sample(&p, c, 5, NULL, 0, 0), 1);
    /* NaN is never chosen; +inf is */
    p = plain_params();
    float d[3] = {NAN, 1, 2};
    assert_int_equal(kite_sample(&p, d, 3, NULL, 0, 0), 2);
    assert_true(d[0] == -INFINITY);
    float e[3] = {1, INFINITY, 2};
    assert_int_equal(kite_sample(&p, e, 3, NULL, 0, 0), 1);
    /* everything banned: the lowest id, deterministically */
    float f[3] = {-INFINITY, -INFINITY, -INFINITY};
    assert_int_equal(kite_sample(&p, f, 3, NULL, 0, 0), 0);
    p.temperature = 0.7f;
    float g[3] = {-INFINITY, -INFINITY, -INFINITY};
    assert_int_equal(kite_sample(&p, g, 3, NULL, 0, 9), 0);
    /* a single surviving token is always chosen when sampling */
    for (int64_t pos = 0; pos < 100; pos++) {
        float h[4] = {-INFINITY, -INFINITY, 0.5f, -INFINITY};
        assert_int_equal(kite_sample(&p, h, 4, NULL, 0, pos), 2);
    }
}

/* Exact score ties when sampling go to the lower id too. Two tokens whose uniforms collide at a
 * position (24-bit values: among 20000 tokens about a dozen pairs collide) have equal noise, so with
 * equal logits their scores tie exactly. */
static int compare_u32_pair(const void *pa, const void *pb) {
    const uint32_t *a = pa, *b = pb;
    if (a[0] != b[0]) return (a[0] > b[0]) - (a[0] < b[0]);
    return (a[1] > b[1]) - (a[1] < b[1]);
}

static void test_sampled_tie_goes_to_lower_id(void **state) {
    (void)state;
    enum { N = 20000 };
    const uint64_t seed = 4242;
    const int64_t position = 31;
    uint32_t (*pairs)[2] = malloc(N * sizeof *pairs);
    assert_non_null(pairs);
    for (uint32_t t = 0; t < N; t++) {
        pairs[t][0] = (uint32_t)(kite_uniform(seed, position, (int32_t)t) * 16777216.0f);
        pairs[t][1] = t;
    }
    qsort(pairs, N, sizeof *pairs, compare_u32_pair);
    int32_t low = -1, high = -1;
    for (int i = 1; i < N && low < 0; i++) {
        if (pairs[i][0] == pairs[i - 1][0]) {
            low = (int32_t)pairs[i - 1][1];
            high = (int32_t)pairs[i][1];
        }
    }
    free(pairs);
    assert_true(low >= 0 && low < high);
    assert_true(kite_gumbel(seed, position, low) == kite_gumbel(seed, position, high));

    kite_gen_params p = plain_params();
    p.temperature = 0.9f;
    p.seed = seed;
    float *logits = malloc((size_t)(high + 1) * sizeof *logits);
    assert_non_null(logits);
    for (int32_t t = 0; t <= high; t++) logits[t] = -INFINITY;
    logits[low] = logits[high] = 1.5f;
    assert_int_equal(kite_sample(&p, logits, high + 1, NULL, 0, position), low);
    free(logits);
}

/* ---- 152k vocabulary ------------------------------------------------------------------------------ */
#define BIG_VOCAB 152064

static uint64_t lcg_state;
static double lcg_uniform(void) {
    lcg_state = lcg_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(lcg_state >> 11) * 0x1p-53;
}

static const float *rank_keys;
static int compare_rank_reference(const void *pa, const void *pb) {
    int a = *(const int *)pa, b = *(const int *)pb;
    if (rank_keys[a] != rank_keys[b]) return rank_keys[a] > rank_keys[b] ? -1 : 1;
    return (a > b) - (a < b);
}

/* keep[t] = 1 for survivors, by the textbook definitions on a full sort. */
static void reference_masks(const float *logits, int n, int top_k, double top_p, double min_p, int *keep) {
    int *order = malloc((size_t)n * sizeof *order);
    assert_non_null(order);
    for (int i = 0; i < n; i++) order[i] = i;
    rank_keys = logits;
    qsort(order, (size_t)n, sizeof *order, compare_rank_reference);
    int n_keep = n;
    while (n_keep > 0 && logits[order[n_keep - 1]] == -INFINITY) n_keep--;
    if (top_k > 0 && top_k < n_keep) n_keep = top_k;
    double max = logits[order[0]], z = 0.0;
    for (int i = 0; i < n_keep; i++) z += exp(logits[order[i]] - max);
    double cumulative = 0.0;
    for (int i = 0; i < n_keep && top_p < 1.0; i++) {
        cumulative += exp(logits[order[i]] - max) / z;
        if (cumulative >= top_p) {
            n_keep = i + 1;
            break;
        }
    }
    while (n_keep > 1 && exp(logits[order[n_keep - 1]] - max) < min_p) n_keep--;
    memset(keep, 0, (size_t)n * sizeof *keep);
    for (int i = 0; i < n_keep; i++) keep[order[i]] = 1;
    free(order);
}

/* Brute force Gumbel-max over every surviving token. */
static int32_t reference_sample(const float *processed, int n, float temperature, uint64_t seed, int64_t pos) {
    int32_t best = -1;
    float best_score = 0;
    for (int t = 0; t < n; t++) {
        if (processed[t] == -INFINITY) continue;
        float score = processed[t] / temperature + kite_gumbel(seed, pos, t);
        if (best < 0 || score > best_score) {
            best = t;
            best_score = score;
        }
    }
    return best < 0 ? 0 : best;
}

static void fill_big(float *logits, int kind) {
    for (int t = 0; t < BIG_VOCAB; t++) {
        double u = lcg_uniform() + lcg_uniform() + lcg_uniform() - 1.5; /* roughly normal, sd 0.5 */
        switch (kind) {
        case 0: logits[t] = (float)(6.0 * u); break;          /* spread like a model's logits */
        case 1: logits[t] = (float)(0.5 * u); break;          /* nearly flat */
        default: logits[t] = t == 77 ? 10.0f : (float)(0.01 * u); break; /* one spike over a flat floor */
        }
        if (kind == 0 && t % 1000 == 0) logits[t] = 12.0f + (float)(t % 7); /* some clear leaders, some tied */
    }
}

static void test_big_vocab_masks(void **state) {
    (void)state;
    float *logits = malloc(BIG_VOCAB * sizeof *logits);
    float *original = malloc(BIG_VOCAB * sizeof *original);
    int *keep = malloc(BIG_VOCAB * sizeof *keep);
    assert_true(logits && original && keep);
    const struct {
        int kind, top_k;
        float top_p, min_p;
    } cases[] = {
        {0, 40, 0.95f, 0.05f}, {0, 0, 0.95f, 0.0f}, {0, 0, 0.999f, 0.0f}, {0, 0, 1.0f, 0.01f},
        {0, 500, 1.0f, 0.0f},  {0, 100000, 0.9f, 0.0f}, {1, 0, 0.95f, 0.0f}, {1, 40, 0.95f, 0.05f},
        {1, 0, 0.5f, 0.0f},   {2, 0, 0.5f, 0.0f},      {2, 0, 0.95f, 0.0f}, {2, 20, 1.0f, 0.0f},
    };
    lcg_state = 12345;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        fill_big(original, cases[c].kind);
        kite_gen_params p = plain_params();
        p.top_k = cases[c].top_k;
        p.top_p = cases[c].top_p;
        p.min_p = cases[c].min_p;
        memcpy(logits, original, BIG_VOCAB * sizeof *logits);
        kite_process_logits(&p, logits, BIG_VOCAB, NULL, 0);
        reference_masks(original, BIG_VOCAB, p.top_k, p.top_p, p.min_p, keep);
        int n_kept = 0;
        for (int t = 0; t < BIG_VOCAB; t++) n_kept += keep[t];
        print_message("case %zu: %d kept\n", c, n_kept);
        assert_kept(logits, original, keep, BIG_VOCAB);
    }
    free(logits);
    free(original);
    free(keep);
}

static double seconds_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void test_big_vocab_sampling_matches_brute_force(void **state) {
    (void)state;
    float *original = malloc(BIG_VOCAB * sizeof *original);
    float *logits = malloc(BIG_VOCAB * sizeof *logits);
    float *processed = malloc(BIG_VOCAB * sizeof *processed);
    assert_true(original && logits && processed);
    lcg_state = 999;
    fill_big(original, 0);
    const int32_t history[] = {0, 1000, 1000, 5000, 77, 123456};
    const struct {
        float temperature;
        int top_k;
        float top_p, min_p, repeat_penalty;
    } cases[] = {
        {0.8f, 40, 0.95f, 0.05f, 1.0f}, /* the defaults */
        {1.0f, 0, 1.0f, 0.0f, 1.1f},    /* no masks: the bound-and-skip scan over the whole vocabulary */
        {3.0f, 0, 1.0f, 0.0f, 1.0f},    /* hot: many tokens within reach of the noise */
        {0.3f, 0, 0.9f, 0.0f, 1.3f},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        kite_gen_params p = plain_params();
        p.temperature = cases[c].temperature;
        p.top_k = cases[c].top_k;
        p.top_p = cases[c].top_p;
        p.min_p = cases[c].min_p;
        p.repeat_penalty = cases[c].repeat_penalty;
        p.seed = 0xABCDEF0123ull + c;
        double elapsed = 0.0;
        const int n_positions = 20;
        for (int64_t pos = 0; pos < n_positions; pos++) {
            memcpy(processed, original, BIG_VOCAB * sizeof *processed);
            kite_process_logits(&p, processed, BIG_VOCAB, history, 6);
            int32_t expected = reference_sample(processed, BIG_VOCAB, p.temperature, p.seed, pos * 31 + 5);
            memcpy(logits, original, BIG_VOCAB * sizeof *logits);
            double start = seconds_now();
            int32_t got = kite_sample(&p, logits, BIG_VOCAB, history, 6, pos * 31 + 5);
            elapsed += seconds_now() - start;
            assert_int_equal(got, expected);
            assert_memory_equal(logits, processed, BIG_VOCAB * sizeof *logits);
        }
        print_message("case %zu: %.2f ms per kite_sample over %d tokens\n", c, 1e3 * elapsed / n_positions, BIG_VOCAB);
    }
    free(original);
    free(logits);
    free(processed);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_params_check),
        cmocka_unit_test(test_logit_bias),
        cmocka_unit_test(test_repetition_penalty),
        cmocka_unit_test(test_presence_frequency),
        cmocka_unit_test(test_top_k),
        cmocka_unit_test(test_top_p),
        cmocka_unit_test(test_min_p),
        cmocka_unit_test(test_greedy),
        cmocka_unit_test(test_sampled_tie_goes_to_lower_id),
        cmocka_unit_test(test_big_vocab_masks),
        cmocka_unit_test(test_big_vocab_sampling_matches_brute_force),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
