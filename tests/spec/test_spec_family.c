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
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "kite.h"

enum { GEN = 40, N_PROMPT = 100, MAX_GEN = 64, MAX_BUDGET = 12, N_CTX = 512 };

static const char *g_shape = "tiny-gemma3";
static char g_dir[64];
static char g_target_path[128], g_draft_path[128];
static kite_model *g_target, *g_draft;
static int32_t g_prompt[N_PROMPT];

static kite_model *open_model(const char *path) {
    char err[512];
    kite_model_params mp = kite_model_default_params();
    mp.n_threads = 1;
    kite_model *m = NULL;
    if (kite_model_open(&m, path, &mp, err, sizeof err)) {
        fprintf(stderr, "cannot open %s: %s\n", path, err);
        return NULL;
    }
    return m;
}

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/kite-spec-family-XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    snprintf(g_target_path, sizeof g_target_path, "%s/target.gguf", g_dir);
    snprintf(g_draft_path, sizeof g_draft_path, "%s/draft.gguf", g_dir);
    char err[512];
    kite_random_model_params rp = {.shape = g_shape, .type = "f32", .seed = 7};
    if (kite_write_random_model(g_target_path, &rp, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    rp.type = "q8_0";
    if (kite_write_random_model(g_draft_path, &rp, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    g_target = open_model(g_target_path);
    g_draft = open_model(g_draft_path);
    if (!g_target || !g_draft) return -1;
    /* A prompt with a repeated phrase, so the n-gram drafter has something to propose. */
    for (int i = 0; i < N_PROMPT; i++) g_prompt[i] = 3 + (int32_t)((i % 10) * 37 + (i / 10) * 5) % 500;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    kite_model_free(g_target);
    kite_model_free(g_draft);
    unlink(g_target_path);
    unlink(g_draft_path);
    rmdir(g_dir);
    return 0;
}

typedef struct run_result {
    int32_t ids[MAX_GEN];
    int n;
    kite_stats stats;
} run_result;

static bool collect(int32_t id, const char *text, size_t len, void *user) {
    (void)text, (void)len;
    run_result *r = user;
    if (r->n < MAX_GEN) r->ids[r->n] = id;
    r->n++;
    return true;
}

static kite_gen_params gen_config(int which) {
    kite_gen_params gp = kite_gen_default_params();
    gp.max_tokens = GEN;
    gp.ignore_eos = true;
    gp.seed = 4242 + (uint64_t)which;
    gp.top_k = 0, gp.top_p = 1.0f, gp.min_p = 0.0f;
    if (which == 1) gp.temperature = 0.8f, gp.top_k = 40, gp.top_p = 0.9f;
    else if (which == 2) gp.temperature = 1.0f;
    else gp.temperature = 0.0f;
    return gp;
}

/* The prompt fed in pieces of `chunk` tokens (0: all at once), then one generate call. */
static void generate(const kite_spec_params *spec, const kite_gen_params *gp, int chunk, run_result *r) {
    memset(r, 0, sizeof *r);
    kite_session_params sp = kite_session_default_params();
    sp.n_ctx = N_CTX;
    sp.n_threads = 1;
    kite_session *s = NULL;
    char err[512];
    if (kite_session_open(&s, g_target, &sp, err, sizeof err)) fail_msg("session: %s", err);
    if (spec && kite_session_set_spec(s, spec, err, sizeof err)) fail_msg("kite_session_set_spec: %s", err);
    for (int at = 0; at < N_PROMPT;) {
        int n = chunk > 0 && N_PROMPT - at > chunk ? chunk : N_PROMPT - at;
        if (kite_prompt(s, g_prompt + at, (size_t)n, err, sizeof err)) fail_msg("kite_prompt: %s", err);
        at += n;
    }
    if (kite_generate(s, gp, collect, r, err, sizeof err)) fail_msg("kite_generate: %s", err);
    kite_session_stats(s, &r->stats);
    kite_session_free(s);
}

static void assert_same(const run_result *want, const run_result *got, const char *what) {
    int at = 0;
    while (at < want->n && at < got->n && want->ids[at] == got->ids[at]) at++;
    if (want->n != got->n || at < want->n)
        fail_msg("%s: %d tokens vs plain %d, first difference at %d", what, got->n, want->n, at);
}

static void test_plain_chunking_invariant(void **state) {
    (void)state;
    static const int chunks[] = {1, 3, 7, 13};
    for (int cfg = 0; cfg < 3; cfg++) {
        kite_gen_params gp = gen_config(cfg);
        run_result whole, split;
        generate(NULL, &gp, 0, &whole);
        assert_int_equal(whole.n, GEN);
        for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++) {
            generate(NULL, &gp, chunks[c], &split);
            char what[96];
            snprintf(what, sizeof what, "cfg %d prompt in chunks of %d", cfg, chunks[c]);
            assert_same(&whole, &split, what);
        }
    }
}

static void test_speculation_exact(void **state) {
    (void)state;
    int64_t drafted = 0, accepted = 0, runs = 0;
    for (int cfg = 0; cfg < 3; cfg++) {
        kite_gen_params gp = gen_config(cfg);
        run_result plain, got;
        generate(NULL, &gp, 0, &plain);
        assert_int_equal(plain.n, GEN);
        for (int32_t b = 1; b <= MAX_BUDGET; b += (b < 4 ? 1 : 4)) {
            for (int d = 0; d < 2; d++) {
                for (int32_t w = 1; w <= 3; w += 2) {
                    kite_spec_params sp = kite_spec_default_params();
                    sp.drafter = d == 0 ? KITE_DRAFT_NGRAM : KITE_DRAFT_MODEL;
                    sp.draft_model = d == 0 ? NULL : g_draft;
                    sp.budget = b;
                    sp.tree_width = w;
                    generate(&sp, &gp, 0, &got);
                    char what[128];
                    snprintf(what, sizeof what, "cfg %d %s budget %d width %d", cfg, d == 0 ? "ngram" : "draft model", b, w);
                    assert_same(&plain, &got, what);
                    if (d == 1) assert_true(got.stats.drafted > 0);
                    drafted += got.stats.drafted, accepted += got.stats.accepted, runs++;
                }
            }
        }
    }
    print_message("%s: %lld speculative runs identical to plain, %lld of %lld drafted tokens accepted\n", g_shape,
                  (long long)runs, (long long)accepted, (long long)drafted);
    assert_true(accepted > 0);
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
static void fresh_continuation(int32_t n_prefix, const int32_t *history, run_result *r) {
    memset(r, 0, sizeof *r);
    kite_session_params sp = kite_session_default_params();
    sp.n_ctx = N_CTX;
    kite_session *s = NULL;
    char err[512];
    if (kite_session_open(&s, g_target, &sp, err, sizeof err)) fail_msg("session: %s", err);
    if (kite_prompt(s, history, (size_t)n_prefix, err, sizeof err)) fail_msg("kite_prompt: %s", err);
    kite_gen_params gp = gen_config(0);
    gp.max_tokens = 20;
    if (kite_generate(s, &gp, collect, r, err, sizeof err)) fail_msg("kite_generate: %s", err);
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
    kite_gen_params gp = gen_config(0);
    gp.max_tokens = 20;
    run_result r;
    memset(&r, 0, sizeof r);
    if (kite_prompt(a, g_prompt, N_PROMPT, err, sizeof err) || kite_generate(a, &gp, collect, &r, err, sizeof err))
        fail_msg("a: %s", err);
    int32_t n_hist = 0;
    const int32_t *hist = kite_session_tokens(a, &n_hist);
    int32_t history[N_PROMPT + MAX_GEN];
    assert_true(n_hist == N_PROMPT + 20);
    memcpy(history, hist, sizeof(int32_t) * (size_t)n_hist);
    static const int32_t cuts[] = {110, 90, 30, 5};
    for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++) {
        run_result want, got;
        fresh_continuation(cuts[c], history, &want);
        /* copy_prefix from a (whose rings hold only its last 71 positions) into b */
        if (kite_session_copy_prefix(b, a, cuts[c] - 1, err, sizeof err)) fail_msg("copy_prefix %d: %s", cuts[c], err);
        memset(&got, 0, sizeof got);
        if (kite_prompt(b, history + cuts[c] - 1, 1, err, sizeof err)) fail_msg("b: %s", err);
        if (kite_generate(b, &gp, collect, &got, err, sizeof err)) fail_msg("b generate: %s", err);
        char what[64];
        snprintf(what, sizeof what, "copy_prefix to %d", cuts[c]);
        assert_same(&want, &got, what);
    }
    /* save a (wrapped rings; its last generated token fed first, as a file holds only run tokens), load
     * into b, continue both */
    int32_t fed = 23;
    if (kite_prompt(a, &fed, 1, err, sizeof err)) fail_msg("a: %s", err);
    char path[160];
    snprintf(path, sizeof path, "%s/session.bin", g_dir);
    if (kite_session_save(a, path, err, sizeof err)) fail_msg("save: %s", err);
    if (kite_session_load(b, path, err, sizeof err)) fail_msg("load: %s", err);
    unlink(path);
    run_result ra, rb;
    memset(&ra, 0, sizeof ra);
    memset(&rb, 0, sizeof rb);
    int32_t next = 17;
    if (kite_prompt(a, &next, 1, err, sizeof err) || kite_generate(a, &gp, collect, &ra, err, sizeof err)) fail_msg("a: %s", err);
    if (kite_prompt(b, &next, 1, err, sizeof err) || kite_generate(b, &gp, collect, &rb, err, sizeof err)) fail_msg("b: %s", err);
    assert_same(&ra, &rb, "saved and loaded");
    /* truncate a far back (its rings lost that window: it runs the prefix again) */
    for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++) {
        run_result want, got;
        fresh_continuation(cuts[c], history, &want);
        if (kite_session_truncate(a, cuts[c] - 1, err, sizeof err)) fail_msg("truncate %d: %s", cuts[c], err);
        memset(&got, 0, sizeof got);
        if (kite_prompt(a, history + cuts[c] - 1, 1, err, sizeof err)) fail_msg("a: %s", err);
        if (kite_generate(a, &gp, collect, &got, err, sizeof err)) fail_msg("a generate: %s", err);
        char what[64];
        snprintf(what, sizeof what, "truncate to %d", cuts[c]);
        assert_same(&want, &got, what);
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
        run_result want, got;
        fresh_continuation(cuts[c], g_prompt, &want);
        if (kite_session_truncate(a, cuts[c] - 1, err, sizeof err)) fail_msg("truncate %d: %s", cuts[c], err);
        if (kite_prompt(a, g_prompt + cuts[c] - 1, 1, err, sizeof err)) fail_msg("a: %s", err);
        memset(&got, 0, sizeof got);
        kite_gen_params gp = gen_config(0);
        gp.max_tokens = 20;
        if (kite_generate(a, &gp, collect, &got, err, sizeof err)) fail_msg("a generate: %s", err);
        char what[64];
        snprintf(what, sizeof what, "truncate within the pass to %d", cuts[c]);
        assert_same(&want, &got, what);
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
