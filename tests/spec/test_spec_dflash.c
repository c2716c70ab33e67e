/* DFlash block drafters in kite, on the `tiny` random target (dim 256, 2 layers, F32) and random
 * drafters written for it by `kite gen-model --shape dflash[-bN][-causal] --target` (kite_write_random_model):
 *   - exactness: with the drafter drafting (blocks of 16 and 32, non-causal, and a causal block of 16),
 *     greedy and seeded sampling (T 0.8 top-k/top-p, T 1.0) and penalties, chains and trees (width 3),
 *     budgets 1..32, the generated ids equal plain decoding's, and drafts were made (as deep as the
 *     block allows); rejection verification greedy equals plain, and repeats itself for a seed;
 *   - the drafter's cache: a draft from the incrementally kept injected rows equals, bit for bit, the
 *     draft from rows injected afresh from the session's feature rows (after generation, after a
 *     truncation, after a changed context token; negative control: the changed context changes it);
 *   - past the feature slack and after a truncation below the held rows, output is plain decoding's;
 *   - bad input: a drafter for another target (width 128), one reading a target layer the target does
 *     not have, one whose output's vocabulary differs, and a truncated file are refused with a clear
 *     message, nothing is captured, and the session then decodes exactly as plain;
 *   - continuous batching: sessions drafting with DFlash stepped together by kite_batch (as kite serve
 *     runs them) give plain decoding's tokens and keep plain decoding's feature rows. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spec/dflash.h"
#include "spec_harness.h"

enum { GEN = 40, N_PROMPT = 60, N_CTX = 512 };
enum { B16, B32, CAUSAL, N_DRAFTERS };
static const char *const SHAPES[N_DRAFTERS] = {"dflash", "dflash-b32", "dflash-causal"};

static char g_target_path[128], g_drafter_path[N_DRAFTERS][128], g_other_path[128], g_other_drafter_path[128];
static char g_l4_path[128], g_l4_drafter_path[128], g_cut_path[128], g_vocab_path[128];
static kite_model *g_target, *g_drafter[N_DRAFTERS];
static int32_t g_prompt[N_PROMPT];

static int setup(void **state) {
    (void)state;
    if (spec_make_dir("dflash")) return -1;
    spec_path(g_target_path, "target.gguf");
    for (int d = 0; d < N_DRAFTERS; d++) snprintf(g_drafter_path[d], sizeof g_drafter_path[d], "%s/drafter%d.gguf", spec_h.dir, d);
    spec_path(g_other_path, "other.gguf");
    spec_path(g_other_drafter_path, "other-drafter.gguf");
    spec_path(g_l4_path, "l4.gguf");
    spec_path(g_l4_drafter_path, "l4-drafter.gguf");
    spec_path(g_cut_path, "cut-drafter.gguf");
    spec_path(g_vocab_path, "vocab-drafter.gguf");
    if (spec_write_model(g_target_path, "tiny", "f32", 11, NULL) || spec_write_model(g_other_path, "tiny-gemma3", "f32", 11, NULL) ||
        spec_write_model(g_other_drafter_path, "dflash", "f32", 11, g_other_path) ||
        spec_write_model(g_l4_path, "tiny-l4", "f32", 11, NULL) || spec_write_model(g_l4_drafter_path, "dflash", "f32", 11, g_l4_path))
        return -1;
    for (int d = 0; d < N_DRAFTERS; d++)
        if (spec_write_model(g_drafter_path[d], SHAPES[d], "f32", 11, g_target_path)) return -1;
    /* The drafter with an output layer of its own over a vocabulary 8 tokens short. */
    if (spec_write_edited(g_drafter_path[B16], g_vocab_path, &(spec_edit){.add_zeros = "output.weight", .add_ne = {256, 512 - 8}}))
        return -1;
    /* The drafter without its last 1000 bytes. */
    if (spec_write_truncated(g_drafter_path[B16], g_cut_path, 1000)) return -1;
    g_target = spec_open_model(g_target_path);
    if (!g_target) return -1;
    for (int d = 0; d < N_DRAFTERS; d++)
        if (!(g_drafter[d] = spec_open_model(g_drafter_path[d]))) return -1;
    for (int i = 0; i < N_PROMPT; i++) g_prompt[i] = 3 + (int32_t)((i % 10) * 37 + (i / 10) * 5) % 500;
    spec_h.target = g_target, spec_h.n_ctx = N_CTX, spec_h.prompt = g_prompt, spec_h.n_prompt = N_PROMPT;
    spec_h.gen = GEN, spec_h.seed = 777;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    kite_model_free(g_target);
    for (int d = 0; d < N_DRAFTERS; d++) kite_model_free(g_drafter[d]);
    spec_remove_dir();
    return 0;
}

enum { N_CONFIGS = 4 }; /* greedy, T 0.8 top-k/top-p, T 1.0, penalties */

static kite_spec_params spec_of(int drafter, int32_t budget, int32_t width) {
    return spec_params(KITE_DRAFT_DFLASH, g_drafter[drafter], budget, width);
}

/* ---- exactness ----------------------------------------------------------------------------------- */

static bool skip_short(int config, int drafter, int32_t budget) {
    (void)config;
    return drafter != B16 && (budget == 1 || budget == 4 || budget == 15); /* keeps ASan short */
}

static void test_exact_with_dflash(void **state) {
    (void)state;
    static const int32_t budgets[] = {1, 4, 8, 15, 16, 32}, widths[] = {1, 3};
    spec_sweep_drafter drafters[N_DRAFTERS];
    for (int d = 0; d < N_DRAFTERS; d++)
        drafters[d] = (spec_sweep_drafter){.name = SHAPES[d], .kind = KITE_DRAFT_DFLASH, .model = g_drafter[d],
                                           .max_depth = kite_dflash_block_size(g_drafter[d]->dflash) - 1, .check = SPEC_CHECK_BUDGET};
    spec_sweep sw = {.label = "DFlash", .n_configs = N_CONFIGS, .config = spec_gen_config_penalties, .drafters = drafters,
                     .n_drafters = N_DRAFTERS, .budgets = budgets, .n_budgets = 6, .widths = widths, .n_widths = 2,
                     .skip_case = skip_short};
    spec_sweep_run(&sw);
    fprintf(stderr, "drafted tokens accepted over the exactness runs: %lld\n", (long long)sw.accepted);
    /* Rejection verification reads the drafter's distributions: identical to plain when greedy, and the
     * same tokens again for a seed when sampling. */
    kite_spec_params rejection = spec_of(B16, 6, 1);
    spec_check_rejection(&rejection, spec_gen_config_penalties, "DFlash");
    /* The drafter passed as a plain draft model drafts as DFlash; the adaptive budget drafts with it. */
    kite_gen_params gp = spec_gen_config_penalties(1);
    spec_run plain, got;
    spec_run_prompt(NULL, &gp, &plain);
    for (int adaptive = 0; adaptive < 2; adaptive++) {
        kite_spec_params sp = spec_of(B16, adaptive ? 0 : 4, 2);
        sp.drafter = KITE_DRAFT_MODEL;
        kite_session *s = spec_session_with(&sp);
        assert_int_equal(s->spec.params.drafter, KITE_DRAFT_DFLASH);
        assert_int_equal(s->spec.draft_block_rows, 16); /* the controller costs a pass by its block's rows */
        spec_prompt(s);
        spec_gen(s, &gp, &got);
        spec_assert_same(&plain, &got, adaptive ? "DFlash, adaptive budget" : "DFlash drafter given as a draft model");
        kite_session_free(s);
    }
}

/* Past the feature slack (256 positions): bounded feature rows, and after a truncation deeper than them
 * (the cache restarts where the rows start) output stays plain decoding's. */
static void test_long_context_and_deep_truncation(void **state) {
    (void)state;
    kite_spec_params sp = spec_of(B16, 8, 2);
    spec_check_long_context(&sp, spec_gen_config_penalties);
}

/* ---- the drafter's cache --------------------------------------------------------------------------- */

static void draft_now(kite_session *s, bool rebuild, kite_draft_tree *t, float *logits) {
    if (rebuild) kite_dflash_run_reset(s->spec.dflash);
    spec_draft_now(s, spec_gen_config_penalties, t);
    int32_t rows = 0;
    const float *lg = kite_dflash_last_logits(s->spec.dflash, &rows);
    assert_int_equal(rows, 13);
    memcpy(logits, lg, sizeof(float) * 12 * (size_t)g_target->n_vocab);
}

static void test_cache_in_step(void **state) {
    (void)state;
    int32_t V = g_target->n_vocab;
    float *a = malloc(sizeof(float) * 12 * (size_t)V), *b = malloc(sizeof(float) * 12 * (size_t)V);
    assert_non_null(a);
    assert_non_null(b);
    for (int truncated = 0; truncated < 2; truncated++) {
        kite_spec_params sp = spec_of(B16, 6, 2);
        kite_session *s = spec_session_to_draft_from(&sp, spec_gen_config_penalties(1), truncated, NULL);
        kite_draft_tree kept, rebuilt;
        draft_now(s, false, &kept, a);
        draft_now(s, true, &rebuilt, b);
        spec_assert_same_tree(&kept, &rebuilt, 13);
        if (memcmp(a, b, sizeof(float) * 12 * (size_t)V))
            fail_msg("block logits differ between the kept and the re-injected cache%s", truncated ? " (truncated)" : "");
        /* A token of the context changed under the cache (as a truncation and another continuation
         * would; its feature row stays, so only the check of the tokens can see it): the kept cache
         * re-injects from there, as a rebuild does. */
        s->history[N_PROMPT / 2] ^= 1;
        draft_now(s, false, &kept, a);
        draft_now(s, true, &rebuilt, b);
        s->history[N_PROMPT / 2] ^= 1;
        assert_memory_equal(a, b, sizeof(float) * 12 * (size_t)V);
        /* Negative control: another root gives another block. */
        s->gen.cur_id ^= 1;
        draft_now(s, false, &kept, b);
        assert_true(memcmp(a, b, sizeof(float) * 12 * (size_t)V) != 0);
        kite_session_free(s);
    }
    free(a);
    free(b);
}

/* ---- bad input ------------------------------------------------------------------------------------ */

static void refused_then_plain(const char *path, const char *want1, const char *want2) {
    kite_model *d = spec_open_model(path);
    assert_non_null(d);
    kite_spec_params sp = spec_of(B16, 8, 2);
    sp.draft_model = d;
    kite_session *s = spec_refused(&sp, want1, want2);
    assert_int_equal(s->spec.params.drafter, KITE_DRAFT_NONE);
    kite_gen_params gp = spec_gen_config_penalties(1);
    spec_assert_plain_after(s, &gp, "after a refused drafter");
    kite_model_free(d);
}

static void test_bad_drafters_refused(void **state) {
    (void)state;
    refused_then_plain(g_other_drafter_path, "width 128", "256");   /* written for tiny-gemma3 */
    refused_then_plain(g_l4_drafter_path, "target layer 3", "2 layers"); /* written for tiny-l4 */
    refused_then_plain(g_vocab_path, "vocabulary has 504", "512");

    kite_model_params mp = kite_model_default_params();
    kite_model *cut = NULL;
    char err[512] = "";
    assert_int_not_equal(kite_model_open(&cut, g_cut_path, &mp, err, sizeof err), KITE_OK);
    assert_null(cut);
    if (!strstr(err, "cut-drafter.gguf")) fail_msg("truncated drafter refused with '%s'", err);

    /* A drafter is not a model to decode with. */
    kite_session_params ssp = kite_session_default_params();
    kite_session *hs = NULL;
    assert_int_not_equal(kite_session_open(&hs, g_drafter[B16], &ssp, err, sizeof err), KITE_OK);
    assert_non_null(strstr(err, "DFlash"));
}

/* ---- continuous batching ------------------------------------------------------------------------ */

static void test_batch_with_dflash(void **state) {
    (void)state;
    const kite_spec_params sp[3] = {spec_of(B16, 15, 1), spec_of(B16, 6, 1), spec_of(B16, 6, 3)};
    spec_check_batch(sp, spec_gen_config_penalties, 0, "DFlash");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_with_dflash),
        cmocka_unit_test(test_long_context_and_deep_truncation),
        cmocka_unit_test(test_cache_in_step),
        cmocka_unit_test(test_bad_drafters_refused),
        cmocka_unit_test(test_batch_with_dflash),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
