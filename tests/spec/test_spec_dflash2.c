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
static const char *const SHAPES[N_DRAFTERS] = {"dflash2", "dflash2-b32", "dflash2-causal"};

static char g_dir[64], g_target_path[128], g_drafter_path[N_DRAFTERS][128], g_bad_path[128];
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

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/kite-spec-dflash2-XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    snprintf(g_target_path, sizeof g_target_path, "%s/target.gguf", g_dir);
    snprintf(g_bad_path, sizeof g_bad_path, "%s/bad.gguf", g_dir);
    if (write_model(g_target_path, "tiny", NULL)) return -1;
    for (int d = 0; d < N_DRAFTERS; d++) {
        snprintf(g_drafter_path[d], sizeof g_drafter_path[d], "%s/drafter%d.gguf", g_dir, d);
        if (write_model(g_drafter_path[d], SHAPES[d], g_target_path)) return -1;
    }
    if (!(g_target = open_model(g_target_path))) return -1;
    for (int d = 0; d < N_DRAFTERS; d++)
        if (!(g_drafter[d] = open_model(g_drafter_path[d]))) return -1;
    for (int i = 0; i < N_PROMPT; i++) g_prompt[i] = 3 + (int32_t)((i % 10) * 37 + (i / 10) * 5) % 500;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    kite_model_free(g_target);
    for (int d = 0; d < N_DRAFTERS; d++) kite_model_free(g_drafter[d]), unlink(g_drafter_path[d]);
    unlink(g_target_path), unlink(g_bad_path);
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

static void prompt_with(kite_session *s, const int32_t *ids, int32_t n) {
    char err[512];
    if (kite_prompt(s, ids, (size_t)n, err, sizeof err)) fail_msg("kite_prompt: %s", err);
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

static void plain_run(const int32_t *ids, int32_t n, const kite_gen_params *gp, run_result *r) {
    kite_session *s = open_session();
    prompt_with(s, ids, n);
    gen(s, gp, r);
    kite_session_free(s);
}

/* ---- exactness ----------------------------------------------------------------------------------- */

static void test_exact_with_dflash2(void **state) {
    (void)state;
    static const int32_t budgets[] = {1, 2, 4, 8, 15, 16, 32}, widths[] = {1, 3};
    enum { N_BUDGETS = sizeof budgets / sizeof budgets[0] };
    int64_t accepted = 0, drafted = 0;
    for (int cfg = 0; cfg < N_CONFIGS; cfg++) {
        kite_gen_params gp = gen_config(cfg);
        run_result plain;
        plain_run(g_prompt, N_PROMPT, &gp, &plain);
        assert_int_equal(plain.n, GEN);
        for (int d = 0; d < N_DRAFTERS; d++)
            for (int b = 0; b < N_BUDGETS; b++)
                for (int w = 0; w < 2; w++) {
                    if (d != B16 && (budgets[b] == 1 || budgets[b] == 2 || budgets[b] == 15)) continue; /* keeps ASan short */
                    kite_session *s = open_session();
                    kite_spec_params sp = spec_of(d, budgets[b], widths[w]);
                    set_spec(s, &sp);
                    prompt_with(s, g_prompt, N_PROMPT);
                    run_result got;
                    gen(s, &gp, &got);
                    char what[128];
                    snprintf(what, sizeof what, "DFlash-2 %s config %d budget %d width %d", SHAPES[d], cfg, budgets[b], widths[w]);
                    assert_same(&plain, &got, what);
                    int32_t depth = kite_dflash_block_size(g_drafter[d]->dflash) - 1;
                    int32_t want = widths[w] == 1 && budgets[b] > depth ? depth : budgets[b];
                    if (got.stats.target_passes < 1 || got.stats.drafted < (int64_t)want * (got.stats.target_passes - 1))
                        fail_msg("%s: only %lld tokens drafted in %lld passes", what, (long long)got.stats.drafted,
                                 (long long)got.stats.target_passes);
                    if (widths[w] == 1 && got.stats.drafted_by_depth[depth] != 0) fail_msg("%s: drafted past the block", what);
                    accepted += got.stats.accepted, drafted += got.stats.drafted;
                    kite_session_free(s);
                }
    }
    fprintf(stderr, "DFlash-2 exactness runs: %lld drafted, %lld accepted\n", (long long)drafted, (long long)accepted);
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
    kite_session *s = open_session();
    kite_spec_params sp = spec_of(B16, BLK, 1);
    set_spec(s, &sp);
    prompt_with(s, ids, n);
    kite_gen_params gp = gen_config(0);
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
        kite_gen_params g = gen_config(cfg == 0 ? 0 : 2);
        run_result plain, got;
        plain_run(ids, n, &g, &plain);
        for (int w = 1; w <= 3; w += 2) {
            s = open_session();
            sp = spec_of(B16, 8, w);
            set_spec(s, &sp);
            prompt_with(s, ids, n);
            gen(s, &g, &got);
            assert_same(&plain, &got, cfg ? "repeated walk, sampled" : "repeated walk, greedy");
            accepted += got.stats.accepted;
            kite_session_free(s);
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
    const int32_t V = g_target->n_vocab;
    int off_argmax = 0;
    for (int d = 0; d < N_DRAFTERS; d++) {
        for (int cfg = 0; cfg < 3; cfg++)
            for (int w = 1; w <= 3; w += 2) {
                kite_session *s = open_session();
                const int32_t B = kite_dflash_block_size(g_drafter[d]->dflash), budget = w == 1 ? B - 1 : 20;
                kite_spec_params sp = spec_of(d, budget, w);
                set_spec(s, &sp);
                prompt_with(s, g_prompt, N_PROMPT - 10 * cfg);
                kite_gen_params gp = gen_config(cfg);
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

typedef struct edit {
    const char *drop_key;    /* a key left out */
    const char *set_key;     /* a u32 key set to set_value */
    uint32_t set_value;
    const char *drop_tensor; /* a tensor left out */
    const char *reshape;     /* a tensor written with ne reshape_ne (its data cut or padded with zeros) */
    int64_t reshape_ne[3];
    uint32_t reshape_dims;
} edit;

static int write_edited(const char *src, const char *dst, const edit *ed) {
    kite_mapped_file f;
    kite_error e = {0};
    if (kite_map_file(&f, src, &e)) return -1;
    kite_gguf *g = NULL;
    if (kite_gguf_open(&g, f.data, f.size, &e)) return -1;
    kite_gguf_writer *w = kite_gguf_writer_new();
    for (int64_t i = 0; i < kite_gguf_n_kv(g); i++) {
        kite_gguf_str k = kite_gguf_key(g, i);
        if (ed->drop_key && k.len == strlen(ed->drop_key) && !memcmp(k.ptr, ed->drop_key, k.len)) continue;
        if (ed->set_key && k.len == strlen(ed->set_key) && !memcmp(k.ptr, ed->set_key, k.len)) continue;
        kite_gguf_w_copy_kv(w, g, i);
    }
    if (ed->set_key) kite_gguf_w_u32(w, ed->set_key, ed->set_value);
    void *pad = NULL;
    for (int64_t i = 0; i < kite_gguf_n_tensors(g); i++) {
        const kite_gguf_tensor *t = kite_gguf_tensor_at(g, i);
        char name[96];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        if (ed->drop_tensor && !strcmp(name, ed->drop_tensor)) continue;
        if (ed->reshape && !strcmp(name, ed->reshape)) {
            size_t n = sizeof(float);
            for (uint32_t k = 0; k < ed->reshape_dims; k++) n *= (size_t)ed->reshape_ne[k];
            pad = calloc(1, n);
            memcpy(pad, t->data, n < t->n_bytes ? n : t->n_bytes);
            kite_gguf_w_tensor(w, name, KITE_TYPE_F32, ed->reshape_dims, ed->reshape_ne, pad, n);
            continue;
        }
        kite_gguf_w_tensor(w, name, t->type, t->n_dims, t->ne, t->data, t->n_bytes);
    }
    int st = kite_gguf_writer_save(w, dst, &e);
    free(pad);
    kite_gguf_writer_free(w);
    kite_gguf_free(g);
    kite_unmap_file(&f);
    return st ? -1 : 0;
}

static void refused(const edit *ed, const char *want1, const char *want2) {
    if (write_edited(g_drafter_path[B16], g_bad_path, ed)) fail_msg("cannot write the edited drafter");
    kite_model_params mp = kite_model_default_params();
    kite_model *m = NULL;
    char err[512] = "";
    int st = kite_model_open(&m, g_bad_path, &mp, err, sizeof err);
    if (st == KITE_OK) {
        /* Some mismatches only show against the target. */
        kite_session *s = open_session();
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
    edit none = {0};
    assert_int_equal(write_edited(g_drafter_path[B16], g_bad_path, &none), 0);
    kite_model *m = open_model(g_bad_path);
    assert_non_null(m);
    assert_int_equal(kite_dflash_selector_top_k(m->dflash), 8);
    kite_model_free(m);

    refused(&(edit){.drop_key = "dflash.selector_rank"}, "selector_rank", "rank 0 missing");
    refused(&(edit){.drop_key = "dflash.selector_top_k"}, "selector_top_k", "top-k 0 missing");
    refused(&(edit){.drop_key = "dflash.conv_kernel_size"}, "conv_kernel_size", "kernel 0 missing");
    refused(&(edit){.set_key = "dflash.selector_top_k", .set_value = 0}, "all positive", NULL);
    refused(&(edit){.set_key = "dflash.selector_top_k", .set_value = 16}, "inconsistent DFlash-2 metadata", "272");
    refused(&(edit){.set_key = "dflash.conv_group_size", .set_value = 24}, "multiple of conv_group_size 24", NULL);
    refused(&(edit){.set_key = "dflash.selector_rank", .set_value = 16}, "selector_predecessor.weight is [32, 512], expected [16", NULL);
    refused(&(edit){.set_key = "dflash.conv_kernel_size", .set_value = 3}, "blk.0.attn_conv_proj.weight", "expected [256, 96]");
    refused(&(edit){.drop_tensor = "selector_hidden.weight"}, "selector_hidden.weight is missing", NULL);
    refused(&(edit){.drop_tensor = "blk.1.ffn_conv_base"}, "blk.1.ffn_conv_base is missing", NULL);
    refused(&(edit){.reshape = "blk.0.attn_conv_base", .reshape_ne = {256, 4, 1}, .reshape_dims = 2}, "blk.0.attn_conv_base is [256, 4, 1]",
            "expected [256, 4, 2]");
    refused(&(edit){.reshape = "selector_successor.weight", .reshape_ne = {32, 500}, .reshape_dims = 2},
            "selector_successor.weight is [32, 500], expected [32, 512]", NULL);
    /* Only the selector's key: not a DFlash-1 drafter either. */
    refused(&(edit){.drop_key = "dflash.conv_group_size"}, "DFlash-2 drafter needs", "group 0 missing");

    /* Truncated: the file without its last 1000 bytes. */
    FILE *in = fopen(g_drafter_path[B16], "rb"), *out = fopen(g_bad_path, "wb");
    assert_non_null(in);
    assert_non_null(out);
    fseek(in, 0, SEEK_END);
    long size = ftell(in);
    fseek(in, 0, SEEK_SET);
    for (long i = 0; i < size - 1000; i++) fputc(fgetc(in), out);
    fclose(in), fclose(out);
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
