/* DSpark drafters (a DFlash block with a Markov head conditioned per tree node and a confidence head) in
 * kite, on the `tiny` random target (dim 256, 2 layers, F32) and random drafters written for it by `kite
 * gen-model --shape dflash-dspark[-bN][-causal][-bonus] --target` (kite_write_random_model; llama.cpp's
 * names and metadata; chains and confidences checked against llama.cpp in tests/oracle/test_dflash_llamacpp.c):
 *   - exactness: drafting from the anchor (block 16) and with a bonus anchor (block 8, causal), greedy and
 *     seeded sampling (T 0.8 top-k/top-p, T 1.0, penalties), chains and trees (width 3), budgets 1..32:
 *     the generated ids equal plain decoding's and every pass drafted as the budget and block allow;
 *   - the confidence threshold (draft_p_min, llama.cpp's --spec-draft-p-min): output unchanged, fewer
 *     tokens drafted as it rises, none at all at 1 (the sigmoid stays below it), every drafted node's
 *     parent at or above it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spec/dflash.h"
#include "spec_harness.h"

enum { N_PROMPT = SPEC_BLOCK_PROMPT };
enum { ANCHOR, BONUS, N_DRAFTERS };
static const char *const SHAPES[N_DRAFTERS] = {"dflash-dspark", "dflash-dspark-b8-causal-bonus"};

static char g_target_path[128], g_drafter_path[N_DRAFTERS][128];
static kite_model *g_drafter[N_DRAFTERS];
static int32_t g_prompt[N_PROMPT];

static int setup(void **state) {
    (void)state;
    return spec_block_setup("dspark", SHAPES, N_DRAFTERS, g_target_path, g_drafter_path, g_drafter, g_prompt);
}

static int teardown(void **state) {
    (void)state;
    spec_block_teardown(g_drafter, N_DRAFTERS);
    return 0;
}

enum { N_CONFIGS = 4 }; /* greedy, T 0.8 top-k/top-p, T 1.0, penalties */

static void test_exact_with_dspark(void **state) {
    (void)state;
    static const int32_t budgets[] = {1, 4, 8, 16, 32}, widths[] = {1, 3};
    spec_sweep_drafter drafters[N_DRAFTERS];
    for (int d = 0; d < N_DRAFTERS; d++) {
        const kite_dflash *h = g_drafter[d]->dflash;
        assert_true(kite_dflash_markov_rank(h) > 0 && kite_dflash_has_confidence(h));
        /* from the anchor every row of the block drafts; with a bonus anchor the rows after it */
        const int32_t deepest = kite_dflash_block_size(h) - (kite_dflash_from_anchor(h) ? 0 : 1);
        drafters[d] = (spec_sweep_drafter){.name = SHAPES[d], .kind = KITE_DRAFT_DFLASH, .model = g_drafter[d],
                                           .max_depth = deepest, .check = SPEC_CHECK_BUDGET};
    }
    assert_true(kite_dflash_from_anchor(g_drafter[ANCHOR]->dflash) && !kite_dflash_from_anchor(g_drafter[BONUS]->dflash));
    spec_sweep sw = {.label = "DSpark", .n_configs = N_CONFIGS, .config = spec_gen_config_penalties, .drafters = drafters,
                     .n_drafters = N_DRAFTERS, .budgets = budgets, .n_budgets = sizeof budgets / sizeof budgets[0],
                     .widths = widths, .n_widths = 2};
    spec_sweep_run(&sw);
    fprintf(stderr, "DSpark exactness runs: %lld drafted, %lld accepted\n", (long long)sw.drafted, (long long)sw.accepted);
}

/* The drafted tree of one pass with threshold p_min: every node with children has confidence >= p_min. */
static int32_t drafted_with(int d, float p_min, int32_t width, int cfg) {
    kite_spec_params sp = spec_params(KITE_DRAFT_DFLASH, g_drafter[d], 16, width);
    sp.draft_p_min = p_min;
    kite_session *s = spec_session_with(&sp);
    spec_prompt_with(s, g_prompt, N_PROMPT - 10 * cfg);
    kite_gen_params gp = spec_gen_config_penalties(cfg);
    kite_draft_tree t;
    kite_error e = {0};
    if (kite_spec_draft(&s->spec, s, 11 + 5 * cfg, 16, &gp, &t, &e)) fail_msg("%s", e.msg);
    const float *conf = kite_dflash_last_confidence(s->spec.dflash);
    assert_non_null(conf);
    for (int32_t j = 1; j < t.n; j++)
        if (conf[t.parent[j]] < p_min)
            fail_msg("%s, p_min %g: node %d hangs under node %d of confidence %g", SHAPES[d], (double)p_min, j, t.parent[j],
                     (double)conf[t.parent[j]]);
    kite_session_free(s);
    return t.n - 1;
}

static void test_confidence_threshold(void **state) {
    (void)state;
    /* the random drafter's confidences lie around 0.5-0.65: thresholds through them */
    static const float thresholds[] = {0.0f, 0.55f, 0.6f, 0.65f, 1.0f};
    enum { N_T = sizeof thresholds / sizeof thresholds[0] };
    int64_t total[N_T] = {0};
    for (int d = 0; d < N_DRAFTERS; d++) {
        const kite_dflash *h = g_drafter[d]->dflash;
        const int32_t deepest = kite_dflash_block_size(h) - (kite_dflash_from_anchor(h) ? 0 : 1);
        for (int cfg = 0; cfg < 3; cfg++)
            for (int32_t w = 1; w <= 3; w += 2)
                for (int k = 0; k < N_T; k++) {
                    int32_t n = drafted_with(d, thresholds[k], w, cfg);
                    if (k == 0) assert_int_equal(n, w == 1 && deepest < 16 ? deepest : 16); /* off: the budget (a chain: the block) */
                    if (k == N_T - 1) assert_int_equal(n, 0);
                    total[k] += n;
                }
    }
    for (int k = 1; k < N_T; k++)
        if (total[k] > total[k - 1]) fail_msg("p_min %g drafted %lld tokens, more than %g's %lld", (double)thresholds[k],
                                              (long long)total[k], (double)thresholds[k - 1], (long long)total[k - 1]);
    fprintf(stderr, "DSpark tokens drafted over 12 passes by p_min");
    for (int k = 0; k < N_T; k++) fprintf(stderr, " %g: %lld%s", (double)thresholds[k], (long long)total[k], k + 1 < N_T ? "," : "\n");
    if (!(total[2] < total[0] && total[2] > 0)) fail_msg("p_min %g should cut some drafts and keep some: the gate is not tested", (double)thresholds[2]);
    /* and the output stays plain decoding's, greedy and sampled, chains and trees */
    for (int cfg = 0; cfg < 3; cfg++) {
        kite_gen_params gp = spec_gen_config_penalties(cfg);
        spec_run plain, got;
        spec_run_prompt(NULL, &gp, &plain);
        for (int d = 0; d < N_DRAFTERS; d++)
            for (int32_t w = 1; w <= 3; w += 2) {
                kite_spec_params sp = spec_params(KITE_DRAFT_DFLASH, g_drafter[d], 8, w);
                sp.draft_p_min = thresholds[1];
                spec_run_prompt(&sp, &gp, &got);
                spec_assert_same(&plain, &got, "DSpark with a confidence threshold");
                if (got.stats.drafted == 0) fail_msg("%s width %d: nothing drafted under p_min %g", SHAPES[d], w, (double)thresholds[1]);
            }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_with_dspark),
        cmocka_unit_test(test_confidence_threshold),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
