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
#include "io/gguf.h"
#include "io/mmap.h"
#include "kite.h"
#include "quant/types.h"
#include "spec/dflash.h"

enum { GEN = 40, N_PROMPT = 60, MAX_GEN = 320, N_CTX = 512 };
enum { B16, B32, CAUSAL, N_DRAFTERS };
static const char *const SHAPES[N_DRAFTERS] = {"dflash", "dflash-b32", "dflash-causal"};

static char g_dir[64];
static char g_target_path[128], g_drafter_path[N_DRAFTERS][128], g_other_path[128], g_other_drafter_path[128];
static char g_l4_path[128], g_l4_drafter_path[128], g_cut_path[128], g_vocab_path[128];
static kite_model *g_target, *g_drafter[N_DRAFTERS];
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

/* The drafter at src with an output layer of its own over a vocabulary 8 tokens short. */
static int write_short_vocab(const char *src, const char *dst) {
    kite_mapped_file f;
    kite_error e = {0};
    if (kite_map_file(&f, src, &e)) return -1;
    kite_gguf *g = NULL;
    if (kite_gguf_open(&g, f.data, f.size, &e)) return -1;
    kite_gguf_writer *w = kite_gguf_writer_new();
    for (int64_t i = 0; i < kite_gguf_n_kv(g); i++) kite_gguf_w_copy_kv(w, g, i);
    for (int64_t i = 0; i < kite_gguf_n_tensors(g); i++) {
        const kite_gguf_tensor *t = kite_gguf_tensor_at(g, i);
        char name[96];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        kite_gguf_w_tensor(w, name, t->type, t->n_dims, t->ne, t->data, t->n_bytes);
    }
    int64_t ne[2] = {256, 512 - 8};
    float *out = calloc((size_t)(ne[0] * ne[1]), sizeof(float));
    kite_gguf_w_tensor(w, "output.weight", KITE_TYPE_F32, 2, ne, out, sizeof(float) * (size_t)(ne[0] * ne[1]));
    int st = kite_gguf_writer_save(w, dst, &e);
    free(out);
    kite_gguf_writer_free(w);
    kite_gguf_free(g);
    kite_unmap_file(&f);
    return st ? -1 : 0;
}

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/kite-spec-dflash-XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    snprintf(g_target_path, sizeof g_target_path, "%s/target.gguf", g_dir);
    for (int d = 0; d < N_DRAFTERS; d++) snprintf(g_drafter_path[d], sizeof g_drafter_path[d], "%s/drafter%d.gguf", g_dir, d);
    snprintf(g_other_path, sizeof g_other_path, "%s/other.gguf", g_dir);
    snprintf(g_other_drafter_path, sizeof g_other_drafter_path, "%s/other-drafter.gguf", g_dir);
    snprintf(g_l4_path, sizeof g_l4_path, "%s/l4.gguf", g_dir);
    snprintf(g_l4_drafter_path, sizeof g_l4_drafter_path, "%s/l4-drafter.gguf", g_dir);
    snprintf(g_cut_path, sizeof g_cut_path, "%s/cut-drafter.gguf", g_dir);
    snprintf(g_vocab_path, sizeof g_vocab_path, "%s/vocab-drafter.gguf", g_dir);
    if (write_model(g_target_path, "tiny", NULL) || write_model(g_other_path, "tiny-gemma3", NULL) ||
        write_model(g_other_drafter_path, "dflash", g_other_path) || write_model(g_l4_path, "tiny-l4", NULL) ||
        write_model(g_l4_drafter_path, "dflash", g_l4_path))
        return -1;
    for (int d = 0; d < N_DRAFTERS; d++)
        if (write_model(g_drafter_path[d], SHAPES[d], g_target_path)) return -1;
    if (write_short_vocab(g_drafter_path[B16], g_vocab_path)) return -1;
    /* The drafter without its last 1000 bytes. */
    FILE *in = fopen(g_drafter_path[B16], "rb"), *out = fopen(g_cut_path, "wb");
    if (!in || !out) return -1;
    fseek(in, 0, SEEK_END);
    long size = ftell(in);
    fseek(in, 0, SEEK_SET);
    for (long i = 0; i < size - 1000; i++) fputc(fgetc(in), out);
    fclose(in);
    fclose(out);
    g_target = open_model(g_target_path);
    if (!g_target) return -1;
    for (int d = 0; d < N_DRAFTERS; d++)
        if (!(g_drafter[d] = open_model(g_drafter_path[d]))) return -1;
    for (int i = 0; i < N_PROMPT; i++) g_prompt[i] = 3 + (int32_t)((i % 10) * 37 + (i / 10) * 5) % 500;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    kite_model_free(g_target);
    for (int d = 0; d < N_DRAFTERS; d++) kite_model_free(g_drafter[d]), unlink(g_drafter_path[d]);
    const char *paths[] = {g_target_path, g_other_path, g_other_drafter_path, g_l4_path, g_l4_drafter_path, g_cut_path, g_vocab_path};
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

enum { N_CONFIGS = 4 };
static kite_gen_params gen_config(int which) {
    kite_gen_params gp = kite_gen_default_params();
    gp.max_tokens = GEN;
    gp.ignore_eos = true;
    gp.seed = 777 + (uint64_t)which;
    gp.top_k = 0, gp.top_p = 1.0f, gp.min_p = 0.0f;
    if (which == 1) gp.temperature = 0.8f, gp.top_k = 40, gp.top_p = 0.9f;
    else if (which == 2) gp.temperature = 1.0f;
    else if (which == 3) gp.temperature = 0.7f, gp.repeat_penalty = 1.3f, gp.presence_penalty = 0.4f, gp.frequency_penalty = 0.2f,
                         gp.penalty_last_n = 32;
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

static kite_spec_params spec_of(int drafter, int32_t budget, int32_t width) {
    kite_spec_params sp = kite_spec_default_params();
    sp.drafter = KITE_DRAFT_DFLASH;
    sp.draft_model = g_drafter[drafter];
    sp.budget = budget;
    sp.tree_width = width;
    return sp;
}

static void set_spec(kite_session *s, const kite_spec_params *sp) {
    char err[512];
    if (kite_session_set_spec(s, sp, err, sizeof err)) fail_msg("kite_session_set_spec: %s", err);
}

static void plain_run(const kite_gen_params *gp, run_result *r) {
    kite_session *s = open_session();
    prompt(s);
    gen(s, gp, r);
    kite_session_free(s);
}

/* ---- exactness ----------------------------------------------------------------------------------- */

static void test_exact_with_dflash(void **state) {
    (void)state;
    static const int32_t budgets[] = {1, 4, 8, 15, 16, 32}, widths[] = {1, 3};
    int64_t accepted = 0;
    for (int cfg = 0; cfg < N_CONFIGS; cfg++) {
        kite_gen_params gp = gen_config(cfg);
        run_result plain;
        plain_run(&gp, &plain);
        assert_int_equal(plain.n, GEN);
        for (int d = 0; d < N_DRAFTERS; d++)
            for (int b = 0; b < 6; b++)
                for (int w = 0; w < 2; w++) {
                    if (d != B16 && (budgets[b] == 1 || budgets[b] == 4 || budgets[b] == 15)) continue; /* keeps ASan short */
                    kite_session *s = open_session();
                    kite_spec_params sp = spec_of(d, budgets[b], widths[w]);
                    set_spec(s, &sp);
                    prompt(s);
                    run_result got;
                    gen(s, &gp, &got);
                    char what[128];
                    snprintf(what, sizeof what, "DFlash %s config %d budget %d width %d", SHAPES[d], cfg, budgets[b], widths[w]);
                    assert_same(&plain, &got, what);
                    /* Every pass drafts the budget, as deep as the block reaches (block - 1 tokens). */
                    int32_t depth = kite_dflash_block_size(g_drafter[d]->dflash) - 1;
                    int32_t want = widths[w] == 1 && budgets[b] > depth ? depth : budgets[b];
                    if (got.stats.target_passes < 1 || got.stats.drafted < (int64_t)want * (got.stats.target_passes - 1))
                        fail_msg("%s: only %lld tokens drafted in %lld passes", what, (long long)got.stats.drafted,
                                 (long long)got.stats.target_passes);
                    if (widths[w] == 1 && got.stats.drafted_by_depth[depth] != 0) fail_msg("%s: drafted past the block", what);
                    accepted += got.stats.accepted;
                    kite_session_free(s);
                }
    }
    fprintf(stderr, "drafted tokens accepted over the exactness runs: %lld\n", (long long)accepted);
    /* Rejection verification reads the drafter's distributions: identical to plain when greedy, and the
     * same tokens again for a seed when sampling. */
    for (int cfg = 0; cfg < 2; cfg++) {
        kite_gen_params gp = gen_config(cfg == 0 ? 0 : 2);
        run_result plain, a, b;
        plain_run(&gp, &plain);
        for (int k = 0; k < 2; k++) {
            kite_session *s = open_session();
            kite_spec_params sp = spec_of(B16, 6, 1);
            sp.verify = KITE_VERIFY_REJECTION;
            set_spec(s, &sp);
            prompt(s);
            gen(s, &gp, k ? &b : &a);
            kite_session_free(s);
        }
        assert_same(&a, &b, "DFlash rejection verification, run twice");
        if (cfg == 0) assert_same(&plain, &a, "DFlash rejection verification, greedy");
        assert_true(a.stats.drafted > 0);
    }
    /* The drafter passed as a plain draft model drafts as DFlash; the adaptive budget drafts with it. */
    kite_gen_params gp = gen_config(1);
    run_result plain, got;
    plain_run(&gp, &plain);
    for (int adaptive = 0; adaptive < 2; adaptive++) {
        kite_session *s = open_session();
        kite_spec_params sp = spec_of(B16, adaptive ? 0 : 4, 2);
        sp.drafter = KITE_DRAFT_MODEL;
        set_spec(s, &sp);
        assert_int_equal(s->spec.params.drafter, KITE_DRAFT_DFLASH);
        assert_int_equal(s->spec.draft_block_rows, 16); /* the controller costs a pass by its block's rows */
        prompt(s);
        gen(s, &gp, &got);
        assert_same(&plain, &got, adaptive ? "DFlash, adaptive budget" : "DFlash drafter given as a draft model");
        kite_session_free(s);
    }
}

/* Past the feature slack (256 positions): bounded feature rows, and after a truncation deeper than them
 * (the cache restarts where the rows start) output stays plain decoding's. */
static void long_run(bool speculative, run_result *first, run_result *second, int32_t *held) {
    kite_session *s = open_session();
    if (speculative) {
        kite_spec_params sp = spec_of(B16, 8, 2);
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
    assert_int_equal(held_plain, 0); /* nothing captured without the drafter */
    if (held_spec > 256 + 64) fail_msg("%d feature rows held past the slack", held_spec);
    assert_true(held_spec > 0);
    free(r);
}

/* ---- the drafter's cache --------------------------------------------------------------------------- */

static void draft_now(kite_session *s, bool rebuild, kite_draft_tree *t, float *logits) {
    kite_error e = {0};
    if (rebuild) kite_dflash_run_reset(s->spec.dflash);
    int32_t root = s->gen.cur_id;
    kite_gen_params gp = gen_config(1);
    if (kite_spec_draft(&s->spec, s, root, 12, &gp, t, &e)) fail_msg("draft: %s", e.msg);
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
        kite_session *s = open_session();
        kite_spec_params sp = spec_of(B16, 6, 2);
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
        if (memcmp(a, b, sizeof(float) * 12 * (size_t)V))
            fail_msg("block logits differ between the kept and the re-injected cache%s", truncated ? " (truncated)" : "");
        /* A token of the context changed under the cache (as a truncation and another continuation
         * would; its feature row stays, so only the check of the tokens can see it): the kept cache
         * re-injects from there, as a rebuild does. */
        s->history[N_PROMPT / 2] ^= 1;
        int32_t D_before = N_PROMPT / 2;
        draft_now(s, false, &kept, a);
        draft_now(s, true, &rebuilt, b);
        s->history[N_PROMPT / 2] ^= 1;
        assert_memory_equal(a, b, sizeof(float) * 12 * (size_t)V);
        (void)D_before;
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
    kite_gen_params gp = gen_config(1);
    run_result plain, after;
    plain_run(&gp, &plain);
    kite_model *d = open_model(path);
    assert_non_null(d);
    kite_session *s = open_session();
    kite_spec_params sp = spec_of(B16, 8, 2);
    sp.draft_model = d;
    char err[512] = "";
    assert_int_not_equal(kite_session_set_spec(s, &sp, err, sizeof err), KITE_OK);
    if (!strstr(err, want1) || !strstr(err, want2)) fail_msg("%s refused with '%s'", path, err);
    assert_int_equal(s->features.width, 0); /* nothing captured for a refused drafter */
    assert_int_equal(s->spec.params.drafter, KITE_DRAFT_NONE);
    prompt(s);
    gen(s, &gp, &after);
    assert_same(&plain, &after, "after a refused drafter");
    kite_session_free(s);
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
        kite_spec_params sp = spec_of(B16, i == 0 ? 15 : 6, i == 2 ? 3 : 1);
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
        if (got[i].stats.drafted == 0) fail_msg("session %d: DFlash drafted nothing", i);
        kite_session *plain = open_session();
        kite_error e = {0};
        if (kite_session_set_capture(plain, s[i]->scratch.capture_layer, s[i]->scratch.n_capture, &e)) fail_msg("capture: %s", e.msg);
        if (kite_prompt(plain, g_prompt + 7 * i, N_PROMPT - 7 * i, err, sizeof err)) fail_msg("kite_prompt: %s", err);
        gen(plain, &gp[i], &want);
        char what[64];
        snprintf(what, sizeof what, "batched session %d (setting %d)", i, i);
        assert_same(&want, &got[i], what);
        const kite_features *fa = &plain->features, *fb = &s[i]->features;
        if (fa->width != fb->width || fa->pos0 != fb->pos0 || fa->n != fb->n)
            fail_msg("%s: features width %d pos0 %d n %d vs plain %d %d %d", what, fb->width, fb->pos0, fb->n, fa->width, fa->pos0, fa->n);
        if (memcmp(fa->rows, fb->rows, sizeof(float) * (size_t)fa->n * (size_t)fa->width))
            fail_msg("%s: feature rows differ from plain decoding's", what);
        kite_session_free(plain);
        kite_session_free(s[i]);
    }
    kite_batch_free(batch);
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
