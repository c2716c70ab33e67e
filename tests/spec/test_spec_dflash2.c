/* DFlash-2 drafters (gated block convolutions and a candidate selector) in kite, on the `tiny` random
 * target (dim 256, 2 layers, F32) and random drafters written for it by `kite gen-model --shape
 * dflash2[-bN][-causal] --target` (kite_write_random_model; llama.cpp's names and metadata, the
 * lattice and chain checked against llama.cpp in tests/oracle/test_dflash_llamacpp.c):
 *   - exactness: with the drafter drafting (blocks 16 and 32, non-causal, and a causal block of 16),
 *     greedy and seeded sampling (T 0.8 top-k/top-p, T 1.0, penalties), chains and trees (width 3),
 *     budgets 1..32, the generated ids equal plain decoding's, drafts were made as deep as the block
 *     allows, and some drafted tokens were accepted (an oracle target: the drafter's own greedy walk
 *     is fed back as the prompt, so a drafter that follows its lattice is accepted);
 *   - the drafts are the lattice's: a greedy chain is the walk over kite's lattice (best successor of the
 *     previous choice), every tree node is a candidate of its row, and sampled drafts stay among the
 *     candidates (negative control: the rows' argmaxes are not the walk everywhere);
 *   - bad files: selector_rank / selector_top_k / conv keys missing, top-k too large for the width,
 *     a group size that does not divide the width, a codebook of another rank, a missing selector
 *     tensor, a conv base of the wrong shape, and a truncated file are refused with a clear message. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spec/dflash.h"
#include "spec_harness.h"

enum { N_PROMPT = SPEC_BLOCK_PROMPT };
enum { B16, B32, CAUSAL, N_DRAFTERS };
static const char *const SHAPES[N_DRAFTERS] = {"dflash2", "dflash2-b32", "dflash2-causal"};

static char g_target_path[128], g_drafter_path[N_DRAFTERS][128], g_bad_path[128];
static kite_model *g_drafter[N_DRAFTERS];
static int32_t g_prompt[N_PROMPT];

static int setup(void **state) {
    (void)state;
    if (spec_block_setup("dflash2", SHAPES, N_DRAFTERS, g_target_path, g_drafter_path, g_drafter, g_prompt)) return -1;
    spec_path(g_bad_path, "bad.gguf");
    return 0;
}

static int teardown(void **state) {
    (void)state;
    spec_block_teardown(g_drafter, N_DRAFTERS);
    return 0;
}

enum { N_CONFIGS = 4 }; /* greedy, T 0.8 top-k/top-p, T 1.0, penalties */

static kite_spec_params spec_of(int drafter, int32_t budget, int32_t width) {
    return spec_params(KITE_DRAFT_DFLASH, g_drafter[drafter], budget, width);
}

/* ---- exactness ----------------------------------------------------------------------------------- */

static bool skip_short(int config, int drafter, int32_t budget) {
    (void)config;
    return drafter != B16 && (budget == 1 || budget == 2 || budget == 15); /* keeps ASan short */
}

static void test_exact_with_dflash2(void **state) {
    (void)state;
    static const int32_t budgets[] = {1, 2, 4, 8, 15, 16, 32}, widths[] = {1, 3};
    spec_sweep_drafter drafters[N_DRAFTERS];
    for (int d = 0; d < N_DRAFTERS; d++)
        drafters[d] = (spec_sweep_drafter){.name = SHAPES[d], .kind = KITE_DRAFT_DFLASH, .model = g_drafter[d],
                                           .max_depth = kite_dflash_block_size(g_drafter[d]->dflash) - 1, .check = SPEC_CHECK_BUDGET};
    spec_sweep sw = {.label = "DFlash-2", .n_configs = N_CONFIGS, .config = spec_gen_config_penalties, .drafters = drafters,
                     .n_drafters = N_DRAFTERS, .budgets = budgets, .n_budgets = sizeof budgets / sizeof budgets[0],
                     .widths = widths, .n_widths = 2, .skip_case = skip_short};
    spec_sweep_run(&sw);
    fprintf(stderr, "DFlash-2 exactness runs: %lld drafted, %lld accepted\n", (long long)sw.drafted, (long long)sw.accepted);
}

/* A prompt the drafter agrees with: the greedy walk of its lattice from a root, appended to the prompt
 * again and again, so that the target (which reads the same context) has seen the continuations the
 * drafter will propose; then exactness and acceptance on it. */
static void test_accepted_on_repeated_walk(void **state) {
    (void)state;
    enum { REP = 6, BLK = 15 };
    int32_t ids[N_PROMPT + REP * (BLK + 1)];
    memcpy(ids, g_prompt, sizeof(int32_t) * 20);
    int32_t n = 20;
    /* The drafter's greedy chain after the first 20 tokens, from the root 7. */
    kite_spec_params sp = spec_of(B16, BLK, 1);
    kite_session *s = spec_session_with(&sp);
    spec_prompt_with(s, ids, n);
    kite_gen_params gp = spec_gen_config_penalties(0);
    kite_draft_tree t;
    kite_error e = {0};
    if (kite_spec_draft(&s->spec, s, 7, BLK, &gp, &t, &e)) fail_msg("%s", e.msg);
    assert_int_equal(t.n, BLK + 1);
    kite_session_free(s);
    for (int r = 0; r < REP; r++) {
        ids[n++] = 7;
        for (int32_t j = 1; j < t.n; j++) ids[n++] = t.token[j];
    }
    int64_t accepted = 0;
    for (int cfg = 0; cfg < 2; cfg++) {
        kite_gen_params g = spec_gen_config_penalties(cfg == 0 ? 0 : 2);
        spec_run plain, got;
        spec_run_with(NULL, ids, n, &g, &plain);
        for (int w = 1; w <= 3; w += 2) {
            sp = spec_of(B16, 8, w);
            spec_run_with(&sp, ids, n, &g, &got);
            spec_assert_same(&plain, &got, cfg ? "repeated walk, sampled" : "repeated walk, greedy");
            accepted += got.stats.accepted;
        }
    }
    fprintf(stderr, "DFlash-2 on its own repeated walk: %lld drafted tokens accepted\n", (long long)accepted);
    if (accepted == 0) fail_msg("no drafted token accepted even on the drafter's own continuation");
}

/* ---- the drafts are the lattice's ---------------------------------------------------------------------- */

static int32_t cand_index(const int32_t *cand, int32_t K, int32_t row, int32_t tok) {
    for (int32_t j = 0; j < K; j++) if (cand[(size_t)row * K + j] == tok) return j;
    return -1;
}

static void test_drafts_follow_lattice(void **state) {
    (void)state;
    const int32_t V = spec_h.target->n_vocab;
    int off_argmax = 0;
    for (int d = 0; d < N_DRAFTERS; d++) {
        for (int cfg = 0; cfg < 3; cfg++)
            for (int w = 1; w <= 3; w += 2) {
                const int32_t B = kite_dflash_block_size(g_drafter[d]->dflash), budget = w == 1 ? B - 1 : 20;
                kite_spec_params sp = spec_of(d, budget, w);
                kite_session *s = spec_session_with(&sp);
                spec_prompt_with(s, g_prompt, N_PROMPT - 10 * cfg);
                kite_gen_params gp = spec_gen_config_penalties(cfg);
                kite_draft_tree t;
                kite_error e = {0};
                int32_t root = 11 + 5 * cfg;
                if (kite_spec_draft(&s->spec, s, root, budget, &gp, &t, &e)) fail_msg("%s", e.msg);
                const int32_t *cand = NULL;
                int32_t rows = 0, K = 0;
                const float *lat = kite_dflash_last_lattice(s->spec.dflash, &cand, &rows, &K);
                const float *logits = kite_dflash_last_logits(s->spec.dflash, &rows);
                assert_int_equal(K, 8);
                assert_true(t.n > 1);
                for (int32_t j = 1; j < t.n; j++) {
                    int32_t dj = t.depth[j], pj = t.parent[j];
                    int32_t c = cand_index(cand, K, dj, t.token[j]);
                    if (c < 0) fail_msg("%s: node %d (depth %d) token %d is not a candidate of its row", SHAPES[d], j, dj, t.token[j]);
                    if (w == 1 && cfg == 0) { /* greedy chain: the best successor of the previous choice */
                        int32_t p = dj == 1 ? 0 : cand_index(cand, K, dj - 1, t.token[pj]);
                        assert_true(p >= 0);
                        const float *sc = lat + ((size_t)dj * K + p) * K;
                        int32_t best = 0;
                        for (int32_t q = 1; q < K; q++) if (sc[q] > sc[best]) best = q;
                        if (best != c) fail_msg("%s: greedy node %d is candidate %d, the lattice's best is %d", SHAPES[d], j, c, best);
                        const float *lg = logits + (size_t)(dj - 1) * V;
                        int32_t am = 0;
                        for (int32_t v = 1; v < V; v++) if (lg[v] > lg[am]) am = v;
                        if (am != t.token[j]) off_argmax++;
                    }
                }
                kite_session_free(s);
            }
    }
    fprintf(stderr, "greedy DFlash-2 chains: %d tokens are not their row's argmax (the walk decides them)\n", off_argmax);
    if (off_argmax == 0) fail_msg("negative control: the walk never differs from the rows' argmaxes");
}

/* ---- bad files ------------------------------------------------------------------------------------ */

static void refused(const spec_edit *ed, const char *want1, const char *want2) {
    if (spec_write_edited(g_drafter_path[B16], g_bad_path, ed)) fail_msg("cannot write the edited drafter");
    kite_model_params mp = kite_model_default_params();
    kite_model *m = NULL;
    char err[512] = "";
    int st = kite_model_open(&m, g_bad_path, &mp, err, sizeof err);
    if (st == KITE_OK) {
        /* Some mismatches only show against the target. */
        kite_session *s = spec_open_session();
        kite_spec_params sp = spec_of(B16, 8, 1);
        sp.draft_model = m;
        st = kite_session_set_spec(s, &sp, err, sizeof err);
        kite_session_free(s);
        kite_model_free(m);
    }
    if (st == KITE_OK) fail_msg("an edited DFlash-2 drafter (expecting '%s') was accepted", want1);
    if (!strstr(err, want1) || (want2 && !strstr(err, want2))) fail_msg("refused with '%s', expected '%s' and '%s'", err, want1, want2 ? want2 : "");
}

static void test_bad_files_refused(void **state) {
    (void)state;
    /* The unedited copy loads (the edits are what is refused). */
    spec_edit none = {0};
    assert_int_equal(spec_write_edited(g_drafter_path[B16], g_bad_path, &none), 0);
    kite_model *m = spec_open_model(g_bad_path);
    assert_non_null(m);
    assert_int_equal(kite_dflash_selector_top_k(m->dflash), 8);
    kite_model_free(m);

    refused(&(spec_edit){.drop_key = "dflash.selector_rank"}, "selector_rank", "rank 0 missing");
    refused(&(spec_edit){.drop_key = "dflash.selector_top_k"}, "selector_top_k", "top-k 0 missing");
    refused(&(spec_edit){.drop_key = "dflash.conv_kernel_size"}, "conv_kernel_size", "kernel 0 missing");
    refused(&(spec_edit){.set_key = "dflash.selector_top_k", .set_value = 0}, "all positive", NULL);
    refused(&(spec_edit){.set_key = "dflash.selector_top_k", .set_value = 16}, "inconsistent DFlash-2 metadata", "272");
    refused(&(spec_edit){.set_key = "dflash.conv_group_size", .set_value = 24}, "multiple of conv_group_size 24", NULL);
    refused(&(spec_edit){.set_key = "dflash.selector_rank", .set_value = 16}, "selector_predecessor.weight is [32, 512], expected [16", NULL);
    refused(&(spec_edit){.set_key = "dflash.conv_kernel_size", .set_value = 3}, "blk.0.attn_conv_proj.weight", "expected [256, 96]");
    refused(&(spec_edit){.drop_tensor = "selector_hidden.weight"}, "selector_hidden.weight is missing", NULL);
    refused(&(spec_edit){.drop_tensor = "blk.1.ffn_conv_base"}, "blk.1.ffn_conv_base is missing", NULL);
    refused(&(spec_edit){.reshape = "blk.0.attn_conv_base", .reshape_ne = {256, 4, 1}, .reshape_dims = 2}, "blk.0.attn_conv_base is [256, 4, 1]",
            "expected [256, 4, 2]");
    refused(&(spec_edit){.reshape = "selector_successor.weight", .reshape_ne = {32, 500}, .reshape_dims = 2},
            "selector_successor.weight is [32, 500], expected [32, 512]", NULL);
    /* Only the selector's key: not a DFlash-1 drafter either. */
    refused(&(spec_edit){.drop_key = "dflash.conv_group_size"}, "DFlash-2 drafter needs", "group 0 missing");

    /* Truncated: the file without its last 1000 bytes. */
    assert_int_equal(spec_write_truncated(g_drafter_path[B16], g_bad_path, 1000), 0);
    kite_model_params mp = kite_model_default_params();
    char err[512] = "";
    assert_int_not_equal(kite_model_open(&m, g_bad_path, &mp, err, sizeof err), KITE_OK);
    assert_null(m);
    if (!strstr(err, "bad.gguf")) fail_msg("truncated DFlash-2 drafter refused with '%s'", err);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_with_dflash2),
        cmocka_unit_test(test_accepted_on_repeated_walk),
        cmocka_unit_test(test_drafts_follow_lattice),
        cmocka_unit_test(test_bad_files_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
