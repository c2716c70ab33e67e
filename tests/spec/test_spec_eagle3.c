/* EAGLE-3 heads in kite, on the `tiny` random target (dim 256, 2 layers, F32) and a random head written
 * for it by `kite gen-model --shape eagle3 --target` (kite_write_random_model):
 *   - hidden-state capture: the feature rows a session keeps (inputs of layers 0, 1 and 2) after
 *     speculative decoding (n-gram drafter, chains and trees) are bit-for-bit those after plain
 *     decoding, and again after a truncation and more decoding;
 *   - exactness: with the head drafting, greedy and seeded sampling (T 0.8 top-k/top-p, T 1.0),
 *     chains and trees, budgets 1..32, the generated ids equal plain decoding's, and drafts were made;
 *   - the head's own cache: a draft from the incrementally kept cache equals, bit for bit, the draft
 *     from a cache rebuilt from scratch out of the session's feature rows (after generation and after a
 *     truncation), so the cache stays in step with the accepted path;
 *   - bad input: a head for another target (width 128) and a truncated head file are refused with a
 *     clear message, and the session then decodes exactly as plain;
 *   - continuous batching: sessions drafting with the head stepped together by kite_batch (as kite serve
 *     runs them) give plain decoding's tokens and keep plain decoding's feature rows. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spec/eagle3.h"
#include "spec_harness.h"

enum { GEN = 40, N_PROMPT = 60, N_CTX = 512 };

static char g_target_path[128], g_head_path[128], g_other_path[128], g_other_head_path[128], g_cut_path[128];
static kite_model *g_target, *g_head;
static int32_t g_prompt[N_PROMPT];

static int setup(void **state) {
    (void)state;
    if (spec_make_dir("eagle3")) return -1;
    spec_path(g_target_path, "target.gguf");
    spec_path(g_head_path, "head.gguf");
    spec_path(g_other_path, "other.gguf");
    spec_path(g_other_head_path, "other-head.gguf");
    spec_path(g_cut_path, "cut-head.gguf");
    if (spec_write_model(g_target_path, "tiny", "f32", 11, NULL) || spec_write_model(g_head_path, "eagle3", "f32", 11, g_target_path) ||
        spec_write_model(g_other_path, "tiny-gemma3", "f32", 11, NULL) ||
        spec_write_model(g_other_head_path, "eagle3", "f32", 11, g_other_path))
        return -1;
    /* The head without its last 1000 bytes. */
    if (spec_write_truncated(g_head_path, g_cut_path, 1000)) return -1;
    g_target = spec_open_model(g_target_path);
    g_head = spec_open_model(g_head_path);
    if (!g_target || !g_head) return -1;
    for (int i = 0; i < N_PROMPT; i++) g_prompt[i] = 3 + (int32_t)((i % 10) * 37 + (i / 10) * 5) % 500;
    spec_h.target = g_target, spec_h.n_ctx = N_CTX, spec_h.prompt = g_prompt, spec_h.n_prompt = N_PROMPT;
    spec_h.gen = GEN, spec_h.seed = 777;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    kite_model_free(g_target);
    kite_model_free(g_head);
    spec_remove_dir();
    return 0;
}

static kite_spec_params spec_of(kite_drafter d, int32_t budget, int32_t width) {
    return spec_params(d, d == KITE_DRAFT_EAGLE3 ? g_head : NULL, budget, width);
}

/* ---- capture ------------------------------------------------------------------------------------- */

static void capture_run(const kite_spec_params *sp, int truncate_to, kite_session **out) {
    kite_session *s = spec_session_with(sp);
    static const int32_t layers[3] = {0, 1, 2};
    kite_error e = {0};
    if (kite_session_set_capture(s, layers, 3, &e)) fail_msg("capture: %s", e.msg);
    spec_prompt(s);
    kite_gen_params gp = spec_gen_config(0); /* greedy: the random model repeats itself, the n-gram drafter is accepted */
    spec_run r;
    spec_gen(s, &gp, &r);
    if (truncate_to > 0) {
        char err[256];
        if (kite_session_truncate(s, truncate_to, err, sizeof err)) fail_msg("truncate: %s", err);
        spec_prompt_with(s, g_prompt + 3, 5);
        gp.seed++;
        spec_gen(s, &gp, &r);
    }
    *out = s;
}

static void test_capture_matches_plain(void **state) {
    (void)state;
    for (int truncated = 0; truncated < 2; truncated++) {
        int cut = truncated ? N_PROMPT + GEN - 13 : 0;
        kite_session *plain;
        capture_run(NULL, cut, &plain);
        /* The prompt and every generated token but the last (not yet run) hold a row. */
        assert_int_equal(plain->features.n, plain->n_past);
        static const int32_t budgets[] = {3, 8, 16}, widths[] = {1, 2, 4};
        for (int b = 0; b < 3; b++)
            for (int w = 0; w < 3; w++) {
                kite_spec_params sp = spec_of(KITE_DRAFT_NGRAM, budgets[b], widths[w]);
                kite_session *spec;
                capture_run(&sp, cut, &spec);
                char what[96];
                snprintf(what, sizeof what, "n-gram budget %d width %d%s", budgets[b], widths[w], truncated ? " after truncation" : "");
                if (spec->stats.accepted == 0 && !truncated) fail_msg("%s: no drafted token was accepted", what);
                spec_assert_same_features(plain, spec, 3 * 256, what);
                kite_session_free(spec);
            }
        kite_session_free(plain);
    }
}

/* ---- exactness ----------------------------------------------------------------------------------- */

static bool skip_budget_2(int config, int drafter, int32_t budget) {
    (void)drafter;
    return config > 0 && budget == 2; /* keeps the sanitizer build short */
}

static void test_exact_with_head(void **state) {
    (void)state;
    static const int32_t budgets[] = {1, 2, 5, 8, 16, 32}, widths[] = {1, 3};
    const spec_sweep_drafter head = {.name = "head", .kind = KITE_DRAFT_EAGLE3, .model = g_head, .check = SPEC_CHECK_BUDGET};
    spec_sweep sw = {.label = "EAGLE-3", .n_configs = 3, .config = spec_gen_config, .drafters = &head, .n_drafters = 1,
                     .budgets = budgets, .n_budgets = 6, .widths = widths, .n_widths = 2, .skip_case = skip_budget_2};
    spec_sweep_run(&sw);
    /* Rejection verification reads the head's distributions: identical to plain when greedy, and the
     * same tokens again for a seed when sampling (exact in distribution only, so not plain's). */
    kite_spec_params rejection = spec_of(KITE_DRAFT_EAGLE3, 6, 1);
    spec_check_rejection(&rejection, spec_gen_config, "EAGLE-3");
    /* The head passed as a plain draft model drafts as a head too. */
    kite_gen_params gp = spec_gen_config(0);
    spec_run plain, got;
    spec_run_prompt(NULL, &gp, &plain);
    kite_spec_params sp = spec_of(KITE_DRAFT_EAGLE3, 4, 2);
    sp.drafter = KITE_DRAFT_MODEL;
    kite_session *s = spec_session_with(&sp);
    assert_int_equal(s->spec.params.drafter, KITE_DRAFT_EAGLE3);
    spec_prompt(s);
    spec_gen(s, &gp, &got);
    spec_assert_same(&plain, &got, "EAGLE-3 head given as a draft model");
    kite_session_free(s);
}

/* Past the head's feature slack (256 positions): the session keeps a bounded number of feature rows,
 * and after a truncation deeper than them (the cache restarts where the features start) output stays
 * plain decoding's. */
static void test_long_context_and_deep_truncation(void **state) {
    (void)state;
    kite_spec_params sp = spec_of(KITE_DRAFT_EAGLE3, 4, 2);
    spec_check_long_context(&sp, spec_gen_config);
}

/* ---- the head's cache ----------------------------------------------------------------------------- */

static void draft_now(kite_session *s, bool rebuild, kite_draft_tree *t, float *logits) {
    if (rebuild) kite_eagle3_run_reset(s->spec.eagle3);
    spec_draft_now(s, spec_gen_config, t);
    memcpy(logits, s->spec.draft_logits, sizeof(float) * (size_t)t->n * (size_t)g_target->n_vocab);
}

static void test_cache_in_step(void **state) {
    (void)state;
    int32_t V = g_target->n_vocab;
    float *a = malloc(sizeof(float) * (KITE_MAX_DRAFT + 1) * (size_t)V), *b = malloc(sizeof(float) * (KITE_MAX_DRAFT + 1) * (size_t)V);
    assert_non_null(a);
    assert_non_null(b);
    for (int truncated = 0; truncated < 2; truncated++) {
        kite_spec_params sp = spec_of(KITE_DRAFT_EAGLE3, 6, 2);
        kite_session *s = spec_session_to_draft_from(&sp, spec_gen_config(1), truncated, NULL);
        kite_draft_tree kept, rebuilt;
        draft_now(s, false, &kept, a);
        draft_now(s, true, &rebuilt, b);
        spec_assert_same_tree(&kept, &rebuilt, 13);
        /* Rows of the nodes that were run (all but the last round's). */
        for (int32_t j = 0; j < kept.n; j++)
            if (kept.fed[j] && memcmp(a + (size_t)j * V, b + (size_t)j * V, sizeof(float) * (size_t)V))
                fail_msg("draft logits of node %d differ between the kept and the rebuilt cache%s", j, truncated ? " (truncated)" : "");
        /* A token of the context changed under the cache (as a truncation and another continuation
         * would): the kept cache sees it and reruns the rows from there, as a rebuild does; and the
         * draft differs from before (negative control: the comparison can fail). */
        s->history[N_PROMPT / 2] ^= 1;
        draft_now(s, false, &kept, a);
        draft_now(s, true, &rebuilt, b);
        s->history[N_PROMPT / 2] ^= 1;
        assert_memory_equal(a, b, sizeof(float) * (size_t)V);
        draft_now(s, true, &rebuilt, b);
        assert_true(memcmp(a, b, sizeof(float) * (size_t)V) != 0);
        kite_session_free(s);
    }
    free(a);
    free(b);
}

/* ---- bad input ------------------------------------------------------------------------------------ */

static void test_bad_heads_refused(void **state) {
    (void)state;
    kite_model *other = spec_open_model(g_other_head_path);
    assert_non_null(other);
    kite_spec_params sp = spec_of(KITE_DRAFT_EAGLE3, 4, 1);
    sp.draft_model = other;
    kite_session *s = spec_refused(&sp, "width 128", "256");
    kite_gen_params gp = spec_gen_config(1);
    spec_assert_plain_after(s, &gp, "after a refused head");
    kite_model_free(other);

    kite_model_params mp = kite_model_default_params();
    kite_model *cut = NULL;
    char err[512] = "";
    assert_int_not_equal(kite_model_open(&cut, g_cut_path, &mp, err, sizeof err), KITE_OK);
    assert_null(cut);
    if (!strstr(err, "cut-head.gguf")) fail_msg("truncated head refused with '%s'", err);

    /* A head is not a model to decode with. */
    kite_session_params ssp = kite_session_default_params();
    kite_session *hs = NULL;
    assert_int_not_equal(kite_session_open(&hs, g_head, &ssp, err, sizeof err), KITE_OK);
    assert_non_null(strstr(err, "EAGLE-3"));
}

/* ---- continuous batching ------------------------------------------------------------------------ */

/* Sessions drafting with the head, stepped together by kite_batch (as kite serve runs them) from prompts
 * of different lengths: each one's tokens equal plain decoding's alone, and each keeps exactly the
 * feature rows a plain session capturing the head's layers keeps (the batch's pass captures them for
 * every session's rows; without that, the head would read rows of another session or none). */
static void test_batch_with_head(void **state) {
    (void)state;
    const kite_spec_params sp[3] = {spec_of(KITE_DRAFT_EAGLE3, 8, 1), spec_of(KITE_DRAFT_EAGLE3, 4, 1),
                                    spec_of(KITE_DRAFT_EAGLE3, 4, 3)};
    spec_check_batch(sp, spec_gen_config, 3 * 256, "the head");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_capture_matches_plain),
        cmocka_unit_test(test_exact_with_head),
        cmocka_unit_test(test_long_context_and_deep_truncation),
        cmocka_unit_test(test_cache_in_step),
        cmocka_unit_test(test_bad_heads_refused),
        cmocka_unit_test(test_batch_with_head),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
