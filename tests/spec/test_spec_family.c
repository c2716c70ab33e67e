/* Speculative decoding stays exact on each family's layer structure, one ctest per `tiny-ARCH` shape
 * (argv[1]; tests/spec/tests.cmake registers them). For Gemma 3 (tiny-gemma3, argv[2] "--ring"):
 * sliding-window layers (window 8) mixed with a global one, GeGLU, post-norms. The target is
 * `kite gen-model --shape SHAPE` in F32 and the draft the same weights in Q8_0 (written here by
 * kite_write_random_model). The prompt (100 tokens) and
 * the 40 generated ones run far past the window and around the local layers' KV ring (8 - 1 + 64 rows
 * at a context of 512), so a drafted node whose window were cut from the wrong rows (a tree node's
 * ancestors, a chain's rows, a wrapped ring row) would change the output. For the n-gram
 * drafter and the draft model, chains and trees, budgets 1..12, greedy and seeded sampling (T 0.8 with
 * top-k/top-p, and T 1.0), the generated ids must equal plain decoding's; and plain decoding itself must
 * be the same in one pass per token as after a whole-prompt prefill split at odd lengths (batch
 * invariance of the windowed attention and the GeGLU kernel's tails). For LFM2 (tiny-lfm2, "--ring"): conv, conv,
 * attention, conv layers; each conv layer's rows ring over 3 - 1 + 64 positions, so the same runs check that a
 * drafted node's taps read its ancestors' rows, that commits move conv rows, and that truncating, copying and
 * saving past the ring's slack stay exact. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "spec_harness.h"

enum { GEN = 40, N_PROMPT = 100, MAX_GEN = 64, N_CTX = 512 };

static const char *g_shape = "tiny-gemma3";
static char g_target_path[128], g_draft_path[128];
static kite_model *g_target, *g_draft;
static int32_t g_prompt[N_PROMPT];

static int setup(void **state) {
    (void)state;
    if (spec_make_dir("family")) return -1;
    spec_path(g_target_path, "target.gguf");
    spec_path(g_draft_path, "draft.gguf");
    if (spec_write_model(g_target_path, g_shape, "f32", 7, NULL) || spec_write_model(g_draft_path, g_shape, "q8_0", 7, NULL)) return -1;
    g_target = spec_open_model(g_target_path);
    g_draft = spec_open_model(g_draft_path);
    if (!g_target || !g_draft) return -1;
    /* A prompt with a repeated phrase, so the n-gram drafter has something to propose. */
    for (int i = 0; i < N_PROMPT; i++) g_prompt[i] = 3 + (int32_t)((i % 10) * 37 + (i / 10) * 5) % 500;
    spec_h.target = g_target, spec_h.n_ctx = N_CTX, spec_h.prompt = g_prompt, spec_h.n_prompt = N_PROMPT;
    spec_h.gen = GEN, spec_h.seed = 4242;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    kite_model_free(g_target);
    kite_model_free(g_draft);
    spec_remove_dir();
    return 0;
}

/* The prompt fed in pieces of `chunk` tokens (0: all at once), then one generate call. */
static void generate(const kite_spec_params *spec, const kite_gen_params *gp, int chunk, spec_run *r) {
    kite_session *s = spec_session_with(spec);
    for (int at = 0; at < N_PROMPT;) {
        int n = chunk > 0 && N_PROMPT - at > chunk ? chunk : N_PROMPT - at;
        spec_prompt_with(s, g_prompt + at, n);
        at += n;
    }
    spec_gen(s, gp, r);
    kite_session_free(s);
}

static void test_plain_chunking_invariant(void **state) {
    (void)state;
    static const int chunks[] = {1, 3, 7, 13};
    for (int cfg = 0; cfg < 3; cfg++) {
        kite_gen_params gp = spec_gen_config(cfg);
        spec_run whole, split;
        generate(NULL, &gp, 0, &whole);
        assert_int_equal(whole.n, GEN);
        for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++) {
            generate(NULL, &gp, chunks[c], &split);
            char what[96];
            snprintf(what, sizeof what, "cfg %d prompt in chunks of %d", cfg, chunks[c]);
            spec_assert_same(&whole, &split, what);
        }
    }
}

static void test_speculation_exact(void **state) {
    (void)state;
    static const int32_t budgets[] = {1, 2, 3, 4, 8, 12}, widths[] = {1, 3};
    const spec_sweep_drafter drafters[2] = {{.name = "ngram", .kind = KITE_DRAFT_NGRAM, .check = SPEC_CHECK_NONE},
                                            {.name = "draft model", .kind = KITE_DRAFT_MODEL, .model = g_draft, .check = SPEC_CHECK_SOME}};
    spec_sweep sw = {.label = g_shape, .n_configs = 3, .config = spec_gen_config, .drafters = drafters, .n_drafters = 2,
                     .budgets = budgets, .n_budgets = 6, .widths = widths, .n_widths = 2};
    spec_sweep_run(&sw);
    print_message("%s: %lld speculative runs identical to plain, %lld of %lld drafted tokens accepted\n", g_shape,
                  (long long)sw.runs, (long long)sw.accepted, (long long)sw.drafted);
    assert_true(sw.accepted > 0);
}

/* The rings keep memory to the window: a session of 32768 positions holds the global layers' rows for
 * every position, each local layer's window - 1 + 64 rows (tiny-gemma3: 3 x 32768 rows in a flat cache),
 * each layer with its own heads (tiny-gemma4: local layers 2 KV heads of 32, the global one 1 of 64), and
 * each conv layer's conv_taps - 1 + 64 conv rows of dim f32 (tiny-lfm2), whatever the context. */
static void test_ring_memory_bounded(void **state) {
    (void)state;
    kite_session_params sp = kite_session_default_params();
    sp.n_ctx = 32768;
    sp.kv_type = KITE_KV_F16;
    kite_session *s = NULL;
    char err[512];
    if (kite_session_open(&s, g_target, &sp, err, sizeof err)) fail_msg("session: %s", err);
    kite_model_info info;
    kite_model_get_info(g_target, &info);
    assert_true((info.n_local_layers > 0 && info.sliding_window > 0) || info.n_conv_layers > 0);
    /* K and V, f16 */
    const uint64_t global_row = 2ull * 2 * (uint64_t)info.n_kv_heads * (uint64_t)info.head_dim;
    const uint64_t local_row = 2ull * 2 * (uint64_t)info.n_kv_heads_local * (uint64_t)info.head_dim_local;
    const uint64_t n_global = (uint64_t)(info.n_layers - info.n_local_layers - info.n_conv_layers);
    const uint64_t want = global_row * 32768ull * n_global +
                          local_row * (uint64_t)(info.sliding_window - 1 + 64) * (uint64_t)info.n_local_layers +
                          (uint64_t)info.n_conv_layers * (uint64_t)(info.conv_taps - 1 + 64) * (uint64_t)info.dim * 4;
    uint64_t got = kite_session_kv_bytes(s);
    print_message("%s cache at 32768 positions: %llu bytes (every layer's K/V for every position: %llu)\n", g_shape,
                  (unsigned long long)got,
                  (unsigned long long)(32768ull * (global_row * (uint64_t)(info.n_layers - info.n_local_layers) +
                                                   local_row * (uint64_t)info.n_local_layers)));
    assert_int_equal(got, want);
    kite_session_free(s);
}

/* Rewinding past what a ring still holds (truncate, copy_prefix), and saving and loading a session
 * whose rings have wrapped, give the same continuation as a fresh session fed the same tokens. */
static void fresh_continuation(int32_t n_prefix, const int32_t *history, spec_run *r) {
    memset(r, 0, sizeof *r);
    kite_session_params sp = kite_session_default_params();
    sp.n_ctx = N_CTX;
    kite_session *s = NULL;
    char err[512];
    if (kite_session_open(&s, g_target, &sp, err, sizeof err)) fail_msg("session: %s", err);
    if (kite_prompt(s, history, (size_t)n_prefix, err, sizeof err)) fail_msg("kite_prompt: %s", err);
    kite_gen_params gp = spec_gen_config(0);
    gp.max_tokens = 20;
    if (kite_generate(s, &gp, spec_collect, r, err, sizeof err)) fail_msg("kite_generate: %s", err);
    kite_session_free(s);
}

static void test_rewind_copy_save(void **state) {
    (void)state;
    kite_session_params sp = kite_session_default_params();
    sp.n_ctx = N_CTX;
    kite_session *a = NULL, *b = NULL;
    char err[512];
    if (kite_session_open(&a, g_target, &sp, err, sizeof err) || kite_session_open(&b, g_target, &sp, err, sizeof err))
        fail_msg("session: %s", err);
    kite_gen_params gp = spec_gen_config(0);
    gp.max_tokens = 20;
    spec_run r;
    memset(&r, 0, sizeof r);
    if (kite_prompt(a, g_prompt, N_PROMPT, err, sizeof err) || kite_generate(a, &gp, spec_collect, &r, err, sizeof err))
        fail_msg("a: %s", err);
    int32_t n_hist = 0;
    const int32_t *hist = kite_session_tokens(a, &n_hist);
    int32_t history[N_PROMPT + MAX_GEN];
    assert_true(n_hist == N_PROMPT + 20);
    memcpy(history, hist, sizeof(int32_t) * (size_t)n_hist);
    static const int32_t cuts[] = {110, 90, 30, 5};
    for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++) {
        spec_run want, got;
        fresh_continuation(cuts[c], history, &want);
        /* copy_prefix from a (whose rings hold only its last 71 positions) into b */
        if (kite_session_copy_prefix(b, a, cuts[c] - 1, err, sizeof err)) fail_msg("copy_prefix %d: %s", cuts[c], err);
        memset(&got, 0, sizeof got);
        if (kite_prompt(b, history + cuts[c] - 1, 1, err, sizeof err)) fail_msg("b: %s", err);
        if (kite_generate(b, &gp, spec_collect, &got, err, sizeof err)) fail_msg("b generate: %s", err);
        char what[64];
        snprintf(what, sizeof what, "copy_prefix to %d", cuts[c]);
        spec_assert_same(&want, &got, what);
    }
    /* save a (wrapped rings; its last generated token fed first, as a file holds only run tokens), load
     * into b, continue both */
    int32_t fed = 23;
    if (kite_prompt(a, &fed, 1, err, sizeof err)) fail_msg("a: %s", err);
    char path[128];
    spec_path(path, "session.bin");
    if (kite_session_save(a, path, err, sizeof err)) fail_msg("save: %s", err);
    if (kite_session_load(b, path, err, sizeof err)) fail_msg("load: %s", err);
    unlink(path);
    spec_run ra, rb;
    memset(&ra, 0, sizeof ra);
    memset(&rb, 0, sizeof rb);
    int32_t next = 17;
    if (kite_prompt(a, &next, 1, err, sizeof err) || kite_generate(a, &gp, spec_collect, &ra, err, sizeof err)) fail_msg("a: %s", err);
    if (kite_prompt(b, &next, 1, err, sizeof err) || kite_generate(b, &gp, spec_collect, &rb, err, sizeof err)) fail_msg("b: %s", err);
    spec_assert_same(&ra, &rb, "saved and loaded");
    /* truncate a far back (its rings lost that window: it runs the prefix again) */
    for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++) {
        spec_run want, got;
        fresh_continuation(cuts[c], history, &want);
        if (kite_session_truncate(a, cuts[c] - 1, err, sizeof err)) fail_msg("truncate %d: %s", cuts[c], err);
        memset(&got, 0, sizeof got);
        if (kite_prompt(a, history + cuts[c] - 1, 1, err, sizeof err)) fail_msg("a: %s", err);
        if (kite_generate(a, &gp, spec_collect, &got, err, sizeof err)) fail_msg("a generate: %s", err);
        char what[64];
        snprintf(what, sizeof what, "truncate to %d", cuts[c]);
        spec_assert_same(&want, &got, what);
    }
    kite_session_free(a);
    kite_session_free(b);
}

/* A rewind inside the last prompt pass (100 tokens run as 64 + 36, cut back to 80): a recurrent model
 * (Qwen3.5's DeltaNet) replays the kept rows 64..79 from the state saved at 64 instead of running the
 * prompt again; the continuation equals a fresh session's. */
static void test_rewind_within_pass(void **state) {
    (void)state;
    kite_session_params sp = kite_session_default_params();
    sp.n_ctx = N_CTX;
    kite_session *a = NULL;
    char err[512];
    if (kite_session_open(&a, g_target, &sp, err, sizeof err)) fail_msg("session: %s", err);
    if (kite_prompt(a, g_prompt, N_PROMPT, err, sizeof err)) fail_msg("a: %s", err);
    static const int32_t cuts[] = {80, 65, 99};
    for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++) {
        spec_run want, got;
        fresh_continuation(cuts[c], g_prompt, &want);
        if (kite_session_truncate(a, cuts[c] - 1, err, sizeof err)) fail_msg("truncate %d: %s", cuts[c], err);
        if (kite_prompt(a, g_prompt + cuts[c] - 1, 1, err, sizeof err)) fail_msg("a: %s", err);
        memset(&got, 0, sizeof got);
        kite_gen_params gp = spec_gen_config(0);
        gp.max_tokens = 20;
        if (kite_generate(a, &gp, spec_collect, &got, err, sizeof err)) fail_msg("a generate: %s", err);
        char what[64];
        snprintf(what, sizeof what, "truncate within the pass to %d", cuts[c]);
        spec_assert_same(&want, &got, what);
        /* back to the whole prompt for the next cut */
        if (kite_session_truncate(a, 0, err, sizeof err) || kite_prompt(a, g_prompt, N_PROMPT, err, sizeof err)) fail_msg("a: %s", err);
    }
    kite_session_free(a);
}

/* argv[1]: the gen-model shape (default tiny-gemma3); argv[2] "--ring": also the rings' memory bound
 * (tiny-gemma3's sliding window, tiny-lfm2's conv rows). */
int main(int argc, char **argv) {
    if (argc > 1) g_shape = argv[1];
    const bool ring = argc > 2 && strcmp(argv[2], "--ring") == 0;
    const struct CMUnitTest generic[] = {
        cmocka_unit_test(test_plain_chunking_invariant),
        cmocka_unit_test(test_speculation_exact),
        cmocka_unit_test(test_rewind_copy_save),
        cmocka_unit_test(test_rewind_within_pass),
    };
    const struct CMUnitTest windowed[] = {
        cmocka_unit_test(test_plain_chunking_invariant),
        cmocka_unit_test(test_speculation_exact),
        cmocka_unit_test(test_rewind_copy_save),
        cmocka_unit_test(test_rewind_within_pass),
        cmocka_unit_test(test_ring_memory_bounded),
    };
    return ring ? cmocka_run_group_tests(windowed, setup, teardown) : cmocka_run_group_tests(generic, setup, teardown);
}
