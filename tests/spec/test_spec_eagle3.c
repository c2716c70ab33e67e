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
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "engine/engine.h"
#include "kite.h"
#include "spec/eagle3.h"

enum { GEN = 40, N_PROMPT = 60, MAX_GEN = 320, N_CTX = 512 };

static char g_dir[64];
static char g_target_path[128], g_head_path[128], g_other_path[128], g_other_head_path[128], g_cut_path[128];
static kite_model *g_target, *g_head;
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

static int write_model(const char *path, const char *shape, const char *target) {
    char err[512];
    kite_random_model_params rp = {.shape = shape, .type = "f32", .seed = 11, .target_path = target};
    if (kite_write_random_model(path, &rp, err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", path, err);
        return -1;
    }
    return 0;
}

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/kite-spec-eagle3-XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    snprintf(g_target_path, sizeof g_target_path, "%s/target.gguf", g_dir);
    snprintf(g_head_path, sizeof g_head_path, "%s/head.gguf", g_dir);
    snprintf(g_other_path, sizeof g_other_path, "%s/other.gguf", g_dir);
    snprintf(g_other_head_path, sizeof g_other_head_path, "%s/other-head.gguf", g_dir);
    snprintf(g_cut_path, sizeof g_cut_path, "%s/cut-head.gguf", g_dir);
    if (write_model(g_target_path, "tiny", NULL) || write_model(g_head_path, "eagle3", g_target_path) ||
        write_model(g_other_path, "tiny-gemma3", NULL) || write_model(g_other_head_path, "eagle3", g_other_path))
        return -1;
    /* The head without its last 1000 bytes. */
    FILE *in = fopen(g_head_path, "rb"), *out = fopen(g_cut_path, "wb");
    if (!in || !out) return -1;
    fseek(in, 0, SEEK_END);
    long size = ftell(in);
    fseek(in, 0, SEEK_SET);
    for (long i = 0; i < size - 1000; i++) fputc(fgetc(in), out);
    fclose(in);
    fclose(out);
    g_target = open_model(g_target_path);
    g_head = open_model(g_head_path);
    if (!g_target || !g_head) return -1;
    for (int i = 0; i < N_PROMPT; i++) g_prompt[i] = 3 + (int32_t)((i % 10) * 37 + (i / 10) * 5) % 500;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    kite_model_free(g_target);
    kite_model_free(g_head);
    const char *paths[] = {g_target_path, g_head_path, g_other_path, g_other_head_path, g_cut_path};
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) unlink(paths[i]);
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
    gp.seed = 777 + (uint64_t)which;
    gp.top_k = 0, gp.top_p = 1.0f, gp.min_p = 0.0f;
    if (which == 1) gp.temperature = 0.8f, gp.top_k = 40, gp.top_p = 0.9f;
    else if (which == 2) gp.temperature = 1.0f;
    else gp.temperature = 0.0f;
    return gp;
}

static kite_session *open_session(void) {
    kite_session_params sp = kite_session_default_params();
    sp.n_ctx = N_CTX;
    sp.n_threads = 1;
    kite_session *s = NULL;
    char err[512];
    if (kite_session_open(&s, g_target, &sp, err, sizeof err)) fail_msg("session: %s", err);
    return s;
}

static void gen(kite_session *s, const kite_gen_params *gp, run_result *r) {
    memset(r, 0, sizeof *r);
    char err[512];
    if (kite_generate(s, gp, collect, r, err, sizeof err)) fail_msg("kite_generate: %s", err);
    kite_session_stats(s, &r->stats);
}

static void prompt(kite_session *s) {
    char err[512];
    if (kite_prompt(s, g_prompt, N_PROMPT, err, sizeof err)) fail_msg("kite_prompt: %s", err);
}

static void assert_same(const run_result *want, const run_result *got, const char *what) {
    int at = 0;
    while (at < want->n && at < got->n && want->ids[at] == got->ids[at]) at++;
    if (want->n != got->n || at < want->n) fail_msg("%s: %d tokens vs plain %d, first difference at %d", what, got->n, want->n, at);
}

static kite_spec_params spec_of(kite_drafter d, int32_t budget, int32_t width) {
    kite_spec_params sp = kite_spec_default_params();
    sp.drafter = d;
    sp.draft_model = d == KITE_DRAFT_EAGLE3 ? g_head : NULL;
    sp.budget = budget;
    sp.tree_width = width;
    return sp;
}

static void set_spec(kite_session *s, const kite_spec_params *sp) {
    char err[512];
    if (kite_session_set_spec(s, sp, err, sizeof err)) fail_msg("kite_session_set_spec: %s", err);
}

/* ---- capture ------------------------------------------------------------------------------------- */

static void capture_run(const kite_spec_params *sp, int truncate_to, kite_session **out) {
    kite_session *s = open_session();
    if (sp) set_spec(s, sp);
    static const int32_t layers[3] = {0, 1, 2};
    kite_error e = {0};
    if (kite_session_set_capture(s, layers, 3, &e)) fail_msg("capture: %s", e.msg);
    prompt(s);
    kite_gen_params gp = gen_config(0); /* greedy: the random model repeats itself, the n-gram drafter is accepted */
    run_result r;
    gen(s, &gp, &r);
    if (truncate_to > 0) {
        char err[256];
        if (kite_session_truncate(s, truncate_to, err, sizeof err)) fail_msg("truncate: %s", err);
        if (kite_prompt(s, g_prompt + 3, 5, err, sizeof err)) fail_msg("kite_prompt: %s", err);
        gp.seed++;
        gen(s, &gp, &r);
    }
    *out = s;
}

static void assert_same_features(const kite_session *a, const kite_session *b, const char *what) {
    const kite_features *fa = &a->features, *fb = &b->features;
    if (fa->width != fb->width || fa->pos0 != fb->pos0 || fa->n != fb->n)
        fail_msg("%s: features width %d pos0 %d n %d vs plain width %d pos0 %d n %d", what, fb->width, fb->pos0, fb->n, fa->width,
                 fa->pos0, fa->n);
    assert_int_equal(fa->width, 3 * 256);
    for (int32_t p = 0; p < fa->n; p++)
        if (memcmp(fa->rows + (size_t)p * fa->width, fb->rows + (size_t)p * fb->width, sizeof(float) * (size_t)fa->width))
            fail_msg("%s: the feature row of position %d differs from plain decoding's", what, fa->pos0 + p);
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
                assert_same_features(plain, spec, what);
                kite_session_free(spec);
            }
        kite_session_free(plain);
    }
}

/* ---- exactness ----------------------------------------------------------------------------------- */

static void test_exact_with_head(void **state) {
    (void)state;
    static const int32_t budgets[] = {1, 2, 5, 8, 16, 32}, widths[] = {1, 3};
    for (int cfg = 0; cfg < 3; cfg++) {
        kite_gen_params gp = gen_config(cfg);
        run_result plain;
        kite_session *s = open_session();
        prompt(s);
        gen(s, &gp, &plain);
        kite_session_free(s);
        assert_int_equal(plain.n, GEN);
        for (int b = 0; b < 6; b++)
            for (int w = 0; w < 2; w++) {
                if (cfg > 0 && budgets[b] == 2) continue; /* keeps the sanitizer build short */
                s = open_session();
                kite_spec_params sp = spec_of(KITE_DRAFT_EAGLE3, budgets[b], widths[w]);
                set_spec(s, &sp);
                prompt(s);
                run_result got;
                gen(s, &gp, &got);
                char what[96];
                snprintf(what, sizeof what, "EAGLE-3 config %d budget %d width %d", cfg, budgets[b], widths[w]);
                assert_same(&plain, &got, what);
                if (got.stats.target_passes < 1 || got.stats.drafted < (int64_t)budgets[b] * (got.stats.target_passes - 1))
                    fail_msg("%s: only %lld tokens drafted", what, (long long)got.stats.drafted);
                kite_session_free(s);
            }
    }
    /* Rejection verification reads the head's distributions: identical to plain when greedy, and the
     * same tokens again for a seed when sampling (exact in distribution only, so not plain's). */
    for (int cfg = 0; cfg < 2; cfg++) {
        kite_gen_params gp = gen_config(cfg == 0 ? 0 : 2);
        run_result plain, a, b;
        kite_session *s = open_session();
        prompt(s);
        gen(s, &gp, &plain);
        kite_session_free(s);
        for (int k = 0; k < 2; k++) {
            s = open_session();
            kite_spec_params sp = spec_of(KITE_DRAFT_EAGLE3, 6, 1);
            sp.verify = KITE_VERIFY_REJECTION;
            set_spec(s, &sp);
            prompt(s);
            gen(s, &gp, k ? &b : &a);
            kite_session_free(s);
        }
        assert_same(&a, &b, "EAGLE-3 rejection verification, run twice");
        if (cfg == 0) assert_same(&plain, &a, "EAGLE-3 rejection verification, greedy");
        assert_true(a.stats.drafted > 0);
    }
    /* The head passed as a plain draft model drafts as a head too. */
    kite_gen_params gp = gen_config(0);
    kite_session *s = open_session();
    prompt(s);
    run_result plain, got;
    gen(s, &gp, &plain);
    kite_session_free(s);
    s = open_session();
    kite_spec_params sp = spec_of(KITE_DRAFT_EAGLE3, 4, 2);
    sp.drafter = KITE_DRAFT_MODEL;
    set_spec(s, &sp);
    assert_int_equal(s->spec.params.drafter, KITE_DRAFT_EAGLE3);
    prompt(s);
    gen(s, &gp, &got);
    assert_same(&plain, &got, "EAGLE-3 head given as a draft model");
    kite_session_free(s);
}

/* Past the head's feature slack (256 positions): the session keeps a bounded number of feature rows,
 * and after a truncation deeper than them (the cache restarts where the features start) output stays
 * plain decoding's. */
static void long_run(bool speculative, run_result *first, run_result *second, int32_t *held) {
    kite_session *s = open_session();
    if (speculative) {
        kite_spec_params sp = spec_of(KITE_DRAFT_EAGLE3, 4, 2);
        set_spec(s, &sp);
    }
    prompt(s);
    kite_gen_params gp = gen_config(1);
    gp.max_tokens = 300;
    gen(s, &gp, first);
    *held = s->features.n;
    char err[256];
    if (kite_session_truncate(s, 20, err, sizeof err)) fail_msg("truncate: %s", err);
    if (kite_prompt(s, g_prompt + 7, 5, err, sizeof err)) fail_msg("kite_prompt: %s", err);
    gp.max_tokens = GEN;
    gen(s, &gp, second);
    kite_session_free(s);
}

static void test_long_context_and_deep_truncation(void **state) {
    (void)state;
    run_result *r = calloc(4, sizeof *r);
    assert_non_null(r);
    int32_t held_plain, held_spec;
    long_run(false, &r[0], &r[1], &held_plain);
    long_run(true, &r[2], &r[3], &held_spec);
    assert_int_equal(r[0].n, 300);
    assert_same(&r[0], &r[2], "300 tokens, past the feature slack");
    assert_same(&r[1], &r[3], "after a truncation below the feature rows");
    assert_int_equal(held_plain, 0);                          /* nothing captured without the head */
    if (held_spec > 256 + 64) fail_msg("%d feature rows held past the slack", held_spec);
    assert_true(held_spec > 0);
    free(r);
}

/* ---- the head's cache ----------------------------------------------------------------------------- */

static void draft_now(kite_session *s, bool rebuild, kite_draft_tree *t, float *logits) {
    kite_error e = {0};
    if (rebuild) kite_eagle3_run_reset(s->spec.eagle3);
    int32_t root = s->gen.cur_id;
    kite_gen_params gp = gen_config(1);
    if (kite_spec_draft(&s->spec, s, root, 12, &gp, t, &e)) fail_msg("draft: %s", e.msg);
    memcpy(logits, s->spec.draft_logits, sizeof(float) * (size_t)t->n * (size_t)g_target->n_vocab);
}

static void test_cache_in_step(void **state) {
    (void)state;
    int32_t V = g_target->n_vocab;
    float *a = malloc(sizeof(float) * (KITE_MAX_DRAFT + 1) * (size_t)V), *b = malloc(sizeof(float) * (KITE_MAX_DRAFT + 1) * (size_t)V);
    assert_non_null(a);
    assert_non_null(b);
    for (int truncated = 0; truncated < 2; truncated++) {
        kite_session *s = open_session();
        kite_spec_params sp = spec_of(KITE_DRAFT_EAGLE3, 6, 2);
        set_spec(s, &sp);
        prompt(s);
        kite_gen_params gp = gen_config(1);
        run_result r;
        gen(s, &gp, &r);
        if (truncated) {
            char err[256];
            if (kite_session_truncate(s, N_PROMPT + 9, err, sizeof err)) fail_msg("truncate: %s", err);
            if (kite_prompt(s, g_prompt + 3, 5, err, sizeof err)) fail_msg("kite_prompt: %s", err);
            gp.max_tokens = 11;
            gen(s, &gp, &r);
        }
        s->gen.cur_id = r.ids[r.n - 1]; /* the root: the last emitted token */
        kite_draft_tree kept, rebuilt;
        draft_now(s, false, &kept, a);
        draft_now(s, true, &rebuilt, b);
        assert_int_equal(kept.n, 13);
        assert_int_equal(kept.n, rebuilt.n);
        for (int32_t j = 0; j < kept.n; j++) {
            assert_int_equal(kept.token[j], rebuilt.token[j]);
            assert_int_equal(kept.parent[j], rebuilt.parent[j]);
        }
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
    kite_gen_params gp = gen_config(1);
    run_result plain, after;
    kite_session *s = open_session();
    prompt(s);
    gen(s, &gp, &plain);
    kite_session_free(s);

    kite_model *other = open_model(g_other_head_path);
    assert_non_null(other);
    s = open_session();
    kite_spec_params sp = spec_of(KITE_DRAFT_EAGLE3, 4, 1);
    sp.draft_model = other;
    char err[512] = "";
    assert_int_not_equal(kite_session_set_spec(s, &sp, err, sizeof err), KITE_OK);
    if (!strstr(err, "width 128") || !strstr(err, "256")) fail_msg("mismatched head refused with '%s'", err);
    assert_int_equal(s->features.width, 0); /* nothing captured for a refused head */
    prompt(s);
    gen(s, &gp, &after);
    assert_same(&plain, &after, "after a refused head");
    kite_session_free(s);
    kite_model_free(other);

    kite_model_params mp = kite_model_default_params();
    kite_model *cut = NULL;
    err[0] = 0;
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
    enum { N_SESS = 3 };
    kite_batch_params bp = kite_batch_default_params();
    bp.n_ctx = N_CTX;
    bp.n_threads = 1;
    kite_batch *batch = NULL;
    char err[512];
    if (kite_batch_open(&batch, g_target, &bp, err, sizeof err)) fail_msg("kite_batch_open: %s", err);
    kite_session *s[N_SESS];
    kite_gen_params gp[N_SESS];
    static run_result got[N_SESS], want;
    for (int i = 0; i < N_SESS; i++) {
        s[i] = open_session();
        kite_spec_params sp = spec_of(KITE_DRAFT_EAGLE3, i == 0 ? 8 : 4, i == 2 ? 3 : 1);
        set_spec(s[i], &sp);
        gp[i] = gen_config(i);
        memset(&got[i], 0, sizeof got[i]);
        if (kite_session_start(s[i], g_prompt + 7 * i, N_PROMPT - 7 * i, &gp[i], collect, &got[i], err, sizeof err))
            fail_msg("kite_session_start: %s", err);
    }
    for (int steps = 0;; steps++) {
        bool busy = false;
        for (int i = 0; i < N_SESS; i++) busy |= kite_session_busy(s[i]);
        if (!busy) break;
        if (steps > 4 * (N_PROMPT + GEN)) fail_msg("the batch did not finish");
        if (kite_batch_step(batch, s, N_SESS, err, sizeof err)) fail_msg("kite_batch_step: %s", err);
    }
    for (int i = 0; i < N_SESS; i++) {
        if (kite_session_result(s[i], err, sizeof err)) fail_msg("session %d: %s", i, err);
        kite_session_stats(s[i], &got[i].stats);
        if (got[i].stats.drafted == 0) fail_msg("session %d: the head drafted nothing", i);
        kite_session *plain = open_session();
        kite_error e = {0};
        if (kite_session_set_capture(plain, s[i]->scratch.capture_layer, s[i]->scratch.n_capture, &e)) fail_msg("capture: %s", e.msg);
        if (kite_prompt(plain, g_prompt + 7 * i, N_PROMPT - 7 * i, err, sizeof err)) fail_msg("kite_prompt: %s", err);
        gen(plain, &gp[i], &want);
        char what[64];
        snprintf(what, sizeof what, "batched session %d (setting %d)", i, i);
        assert_same(&want, &got[i], what);
        assert_same_features(plain, s[i], what);
        kite_session_free(plain);
        kite_session_free(s[i]);
    }
    kite_batch_free(batch);
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
