/* Philox4x32-10 against the Random123 known-answer vectors, and the uniform / Gumbel noise built on it. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "sample/sampler.h"

/* Random123 tests/kat_vectors, the three "philox4x32 10" lines: counter[4] key[2] -> result[4]. */
static const struct {
    uint32_t counter[4];
    uint32_t key[2];
    uint32_t expected[4];
} kat[] = {
    {{0x00000000, 0x00000000, 0x00000000, 0x00000000}, {0x00000000, 0x00000000},
     {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
    {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff},
     {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
    {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0},
     {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
};

static void test_known_answers(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof kat / sizeof kat[0]; i++) {
        uint32_t out[4];
        kite_philox4x32_10(kat[i].counter, kat[i].key, out);
        for (int w = 0; w < 4; w++) assert_int_equal(out[w], kat[i].expected[w]);
    }
}

/* The documented mapping: counter (pos lo, pos hi, token, 0), key (seed lo, seed hi),
 * U = max(out[0] >> 8, 1) * 2^-24. */
static double reference_uniform(uint64_t seed, int64_t position, int32_t token) {
    uint64_t pos = (uint64_t)position;
    const uint32_t counter[4] = {(uint32_t)pos, (uint32_t)(pos >> 32), (uint32_t)token, 0};
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint32_t out[4];
    kite_philox4x32_10(counter, key, out);
    uint32_t top = out[0] >> 8;
    return (top ? top : 1) / 16777216.0;
}

static void test_uniform_mapping_and_range(void **state) {
    (void)state;
    const double lo = 1.0 / 16777216.0, hi = 1.0 - 1.0 / 16777216.0;
    double sum = 0.0, sum_sq = 0.0;
    size_t n = 0;
    const uint64_t seeds[] = {0, 1, 0xC0FFEE, 0xFFFFFFFFFFFFFFFFull, 0x123456789ABCDEFull};
    for (size_t s = 0; s < sizeof seeds / sizeof seeds[0]; s++) {
        for (int64_t pos = 0; pos < 400; pos++) {
            for (int32_t tok = 0; tok < 100; tok++) {
                int64_t position = pos * 7919 + (s == 4 ? ((int64_t)1 << 40) : 0);
                float u = kite_uniform(seeds[s], position, tok);
                assert_true((double)u == reference_uniform(seeds[s], position, tok));
                assert_true(u >= lo && u <= hi);
                sum += u;
                sum_sq += (double)u * u;
                n++;
            }
        }
    }
    /* 200k uniforms: mean 1/2 with sd 0.2887/sqrt(n) ~ 6.5e-4; variance 1/12. Bounds are ~7 sd. */
    double mean = sum / (double)n, var = sum_sq / (double)n - mean * mean;
    assert_true(fabs(mean - 0.5) < 0.005);
    assert_true(fabs(var - 1.0 / 12.0) < 0.003);
}

static void test_gumbel_is_minus_log_minus_log_u(void **state) {
    (void)state;
    for (int32_t tok = 0; tok < 1000; tok++) {
        double u = kite_uniform(42, 17, tok);
        double expected = -log(-log(u));
        float g = kite_gumbel(42, 17, tok);
        assert_true(fabs((double)g - expected) <= 1e-6 * fmax(1.0, fabs(expected)));
        assert_true(isfinite(g) && g < 17.0f);
    }
    /* Extremes of U give finite noise: U = 1 - 2^-24 bounds G above by ~16.64. */
    assert_true(-log(-log(1.0 - 1.0 / 16777216.0)) < 17.0);
}

static void test_determinism(void **state) {
    (void)state;
    /* same inputs, same value */
    for (int i = 0; i < 100; i++) {
        assert_true(kite_uniform(7, i, 3) == kite_uniform(7, i, 3));
        assert_true(kite_gumbel(7, i, 3) == kite_gumbel(7, i, 3));
    }
    /* different positions, tokens, seeds (including only the high halves) give different values */
    int same_pos = 0, same_tok = 0, same_seed = 0, same_seed_hi = 0, same_pos_hi = 0;
    for (int i = 0; i < 1000; i++) {
        same_pos += kite_uniform(7, i, 3) == kite_uniform(7, i + 1, 3);
        same_tok += kite_uniform(7, i, 3) == kite_uniform(7, i, 4);
        same_seed += kite_uniform(7, i, 3) == kite_uniform(8, i, 3);
        same_seed_hi += kite_uniform(7, i, 3) == kite_uniform(7 + ((uint64_t)1 << 32), i, 3);
        same_pos_hi += kite_uniform(7, i, 3) == kite_uniform(7, i + ((int64_t)1 << 32), 3);
    }
    /* a coincidence has probability 2^-24 per pair */
    assert_true(same_pos <= 1 && same_tok <= 1 && same_seed <= 1 && same_seed_hi <= 1 && same_pos_hi <= 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_answers),
        cmocka_unit_test(test_uniform_mapping_and_range),
        cmocka_unit_test(test_gumbel_is_minus_log_minus_log_u),
        cmocka_unit_test(test_determinism),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
