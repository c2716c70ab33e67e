/* kite_write_random_model and kite_hw_probe.
 *
 * The random model is checked from the outside: the file is parsed with the GGUF reader, its
 * hyper-parameters compared with the shape's published values, every tensor's type with llama.cpp's
 * recipe for the type (worked out by hand below for the tiny shape), its stored rows dequantized and
 * compared with the generator's stream within the quantization error bound of the type, and the
 * embedded tokenizer checked against llama.cpp's own tokenizer test vectors (shared/models/
 * tokenizer-tests), which only a faithful copy of the vocabulary reproduces. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "engine/random_model.h"
#include "io/gguf.h"
#include "io/mmap.h"
#include "kite.h"
#include "quant/trellis.h"
#include "quant/types.h"
#include "test_util.h"

static char g_dir[256];

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/kite-test-random-model-XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static const char *tmp_path(const char *name) {
    static char buf[4][512];
    static int slot;
    char *out = buf[slot++ & 3];
    snprintf(out, 512, "%s/%s", g_dir, name);
    return out;
}

static int write_model(const char *path, const char *shape, const char *type, const char *tokenizer, uint64_t seed,
                       char *err, size_t err_size) {
    kite_random_model_params p = {.shape = shape, .type = type, .tokenizer_path = tokenizer, .seed = seed};
    return kite_write_random_model(path, &p, err, err_size);
}

typedef struct opened {
    kite_mapped_file file;
    kite_gguf *g;
} opened;

static void open_gguf(opened *o, const char *path) {
    kite_error e = {0};
    if (kite_map_file(&o->file, path, &e)) fail_msg("map %s: %s", path, e.msg);
    if (kite_gguf_open(&o->g, o->file.data, o->file.size, &e)) fail_msg("parse %s: %s", path, e.msg);
}

static void close_gguf(opened *o) {
    kite_gguf_free(o->g);
    kite_unmap_file(&o->file);
}

static uint32_t get_u32(const kite_gguf *g, const char *key) {
    uint32_t v = 0;
    if (!kite_gguf_get_u32(g, key, &v)) fail_msg("missing %s", key);
    return v;
}

/* Largest error the type's rounding may make on a block whose largest magnitude is amax. */
static double block_error_bound(uint32_t type, double amax, double value) {
    switch (type) {
    case KITE_TYPE_F32: return 0;
    case KITE_TYPE_F16: return fabs(value) * 0x1p-11 + 0x1p-24;
    case KITE_TYPE_BF16: return fabs(value) * 0x1p-8;
    /* d = amax/127, values rounded to nearest, d stored as fp16 (relative error 2^-11, times |q| <= 127) */
    case KITE_TYPE_Q8_0: return amax / 127.0 * (0.5 + 127.0 / 2048.0) * 1.001 + 1e-7;
    /* d = amax/8; the end opposite to the largest clamps from 8 to 7 (one step); |q| <= 8 */
    case KITE_TYPE_Q4_0: return amax / 8.0 * (1.0 + 8.0 / 2048.0) * 1.001 + 1e-7;
    default: return -1;                                             /* K-quants: checked by RMS below */
    }
}

/* Every tensor's stored rows against the generator: elementwise bounds for the simple types, an RMS
 * bound for the K-quants (their scales are searched, so no tidy per-element bound exists). */
static void check_values(const kite_gguf *g, uint64_t seed) {
    for (int64_t i = 0; i < kite_gguf_n_tensors(g); i++) {
        const kite_gguf_tensor *t = kite_gguf_tensor_at(g, i);
        char name[96];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        const kite_type_traits *tr = kite_type_get(t->type);
        assert_non_null(tr);
        int64_t cols = t->ne[0], rows = t->ne[1];
        size_t row_bytes = kite_type_row_bytes(t->type, cols);
        float *want = malloc((size_t)cols * sizeof *want), *got = malloc((size_t)cols * sizeof *got);
        assert_non_null(want);
        assert_non_null(got);
        int64_t check_rows[3] = {0, rows / 2, rows - 1};
        for (int k = 0; k < 3; k++) {
            int64_t r = check_rows[k];
            kite_random_model_row(seed, name, r, want, cols);
            tr->to_float((const unsigned char *)t->data + (size_t)r * row_bytes, got, cols);
            if (strstr(name, "norm.weight")) {
                assert_int_equal(t->type, KITE_TYPE_F32);
                for (int64_t c = 0; c < cols; c++) assert_true(got[c] == 1.0f);
                continue;
            }
            double err2 = 0, ref2 = 0;
            for (int64_t b0 = 0; b0 < cols; b0 += 32) {
                double amax = 0;
                for (int64_t c = b0; c < b0 + 32 && c < cols; c++) amax = fmax(amax, fabs(want[c]));
                for (int64_t c = b0; c < b0 + 32 && c < cols; c++) {
                    double d = fabs((double)got[c] - want[c]), bound = block_error_bound(t->type, amax, want[c]);
                    if (bound >= 0 && d > bound)
                        fail_msg("%s row %lld col %lld: stored %g, generated %g (bound %g)", name, (long long)r, (long long)c,
                                 got[c], want[c], bound);
                    err2 += d * d;
                    ref2 += (double)want[c] * want[c];
                }
            }
            /* 4-bit K-quants keep the RMS error well under a quarter of the signal, 6-bit under 5%. */
            double limit = t->type == KITE_TYPE_Q4_K ? 0.25 : t->type == KITE_TYPE_Q6_K ? 0.05 : 0.2;
            if (!(sqrt(err2 / ref2) < limit)) fail_msg("%s row %lld: relative RMS error %g", name, (long long)r, sqrt(err2 / ref2));
            /* and the weights look like the promised distribution: mean 0, std 0.02 */
            double sum = 0, sum2 = 0;
            for (int64_t c = 0; c < cols; c++) sum += want[c], sum2 += (double)want[c] * want[c];
            double mean = sum / (double)cols, sd = sqrt(sum2 / (double)cols - mean * mean);
            assert_true(fabs(mean) < 0.004);
            assert_true(fabs(sd - KITE_RANDOM_WEIGHT_STD) < 0.004);
        }
        free(want);
        free(got);
    }
}

static uint32_t tensor_type(const kite_gguf *g, const char *name) {
    const kite_gguf_tensor *t = kite_gguf_find_tensor(g, name);
    if (!t) fail_msg("missing tensor %s", name);
    return t->type;
}

/* kite opens the model at path and generates 4 tokens greedily. */
static void generates_4(const char *path) {
    char err[512];
    kite_model *m = NULL;
    kite_model_params mp = kite_model_default_params();
    mp.n_threads = 2;
    if (kite_model_open(&m, path, &mp, err, sizeof err)) fail_msg("open %s: %s", path, err);
    kite_session *sess = NULL;
    assert_int_equal(kite_session_open(&sess, m, NULL, err, sizeof err), KITE_OK);
    int32_t prompt[4] = {1, 40, 41, 42};
    assert_int_equal(kite_prompt(sess, prompt, 4, err, sizeof err), KITE_OK);
    kite_gen_params gp = kite_gen_default_params();
    gp.temperature = 0;
    gp.max_tokens = 4;
    gp.ignore_eos = true;
    assert_int_equal(kite_generate(sess, &gp, NULL, NULL, err, sizeof err), KITE_OK);
    kite_stats st;
    kite_session_stats(sess, &st);
    assert_int_equal(st.generated_tokens, 4);
    kite_session_free(sess);
    kite_model_free(m);
}

/* The tiny shape in every type: the layout, the recipe, the values, and kite runs it. */
static void test_tiny_all_types(void **state) {
    (void)state;
    static const char *types[] = {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_k_m"};
    static const uint32_t matrix_type[] = {KITE_TYPE_F32, KITE_TYPE_F16, KITE_TYPE_BF16, KITE_TYPE_Q8_0, KITE_TYPE_Q4_0, KITE_TYPE_Q4_K};
    static const uint32_t file_type[] = {0, 1, 32, 7, 2, 15}; /* llama_ftype */
    for (int i = 0; i < 6; i++) {
        char err[512], file[64];
        snprintf(file, sizeof file, "tiny-%s.gguf", types[i]);
        const char *path = tmp_path(file);
        if (write_model(path, "tiny", types[i], NULL, 7, err, sizeof err)) fail_msg("%s: %s", types[i], err);
        opened o;
        open_gguf(&o, path);
        const kite_gguf *g = o.g;
        kite_gguf_str arch;
        assert_true(kite_gguf_get_str(g, "general.architecture", &arch));
        assert_int_equal(arch.len, 5);
        assert_memory_equal(arch.ptr, "llama", 5);
        assert_int_equal(get_u32(g, "general.file_type"), file_type[i]);
        assert_int_equal(get_u32(g, "llama.embedding_length"), 256);
        assert_int_equal(get_u32(g, "llama.block_count"), 2);
        assert_int_equal(get_u32(g, "llama.attention.head_count"), 4);
        assert_int_equal(get_u32(g, "llama.attention.head_count_kv"), 2);
        assert_int_equal(get_u32(g, "llama.feed_forward_length"), 512);
        /* bytes-only vocabulary padded to 512: <unk> <s> </s> <0x00>..<0xFF> <pad_259>.. */
        uint64_t n_tok;
        kite_gguf_vtype vt;
        assert_true(kite_gguf_get_arr(g, "tokenizer.ggml.tokens", &vt, &n_tok));
        assert_int_equal(n_tok, 512);
        kite_gguf_str s;
        assert_true(kite_gguf_arr_str(g, "tokenizer.ggml.tokens", 3 + 0x41, &s));
        assert_int_equal(s.len, 6);
        assert_memory_equal(s.ptr, "<0x41>", 6);
        assert_true(kite_gguf_arr_str(g, "tokenizer.ggml.tokens", 300, &s));
        assert_int_equal(s.len, 9);
        assert_memory_equal(s.ptr, "<pad_300>", 9);
        int64_t type_of_300;
        assert_true(kite_gguf_arr_i64(g, "tokenizer.ggml.token_type", 300, &type_of_300));
        assert_int_equal(type_of_300, 5);
        /* 1 embedding + 2 layers x 9 + output norm + output */
        assert_int_equal(kite_gguf_n_tensors(g), 1 + 2 * 9 + 2);
        const kite_gguf_tensor *embd = kite_gguf_find_tensor(g, "token_embd.weight");
        assert_non_null(embd);
        assert_int_equal(embd->ne[0], 256);
        assert_int_equal(embd->ne[1], 512);
        const kite_gguf_tensor *k = kite_gguf_find_tensor(g, "blk.1.attn_k.weight");
        assert_non_null(k);
        assert_int_equal(k->ne[0], 256);
        assert_int_equal(k->ne[1], 2 * 64);
        if (i < 5) {
            assert_int_equal(tensor_type(g, "token_embd.weight"), matrix_type[i]);
            assert_int_equal(tensor_type(g, "output.weight"), matrix_type[i]);
            assert_int_equal(tensor_type(g, "blk.0.attn_v.weight"), matrix_type[i]);
        } else {
            /* Q4_K_M with 2 layers: use_more_bits(i, 2) is true for layer 1 only (i >= 7*2/8 = 1), so
             * layer 1's attn_v and ffn_down are Q6_K; the output is Q6_K; an untied embedding Q4_K. */
            assert_int_equal(tensor_type(g, "token_embd.weight"), KITE_TYPE_Q4_K);
            assert_int_equal(tensor_type(g, "output.weight"), KITE_TYPE_Q6_K);
            assert_int_equal(tensor_type(g, "blk.0.attn_v.weight"), KITE_TYPE_Q4_K);
            assert_int_equal(tensor_type(g, "blk.0.ffn_down.weight"), KITE_TYPE_Q4_K);
            assert_int_equal(tensor_type(g, "blk.1.attn_v.weight"), KITE_TYPE_Q6_K);
            assert_int_equal(tensor_type(g, "blk.1.ffn_down.weight"), KITE_TYPE_Q6_K);
            assert_int_equal(tensor_type(g, "blk.1.attn_q.weight"), KITE_TYPE_Q4_K);
        }
        assert_int_equal(tensor_type(g, "blk.0.attn_norm.weight"), KITE_TYPE_F32);
        check_values(g, 7);
        close_gguf(&o);

        generates_4(path);
    }
}

/* The trellis types for speed (kt2_5_m): kite quantize's recipe, the first row group of each trellis matrix
 * encoded from the stream (within the round-trip bound of test_trellis) and repeated, and kite runs it. */
static void test_tiny_trellis(void **state) {
    (void)state;
    char err[512];
    const char *path = tmp_path("tiny-kt2_5_m.gguf");
    if (write_model(path, "tiny", "kt2_5_m", NULL, 7, err, sizeof err)) fail_msg("kt2_5_m: %s", err);
    opened o;
    open_gguf(&o, path);
    const kite_gguf *g = o.g;
    assert_int_equal(get_u32(g, "general.file_type"), 0x4B540135u);
    assert_int_equal(tensor_type(g, "token_embd.weight"), KITE_TYPE_Q4_K);
    assert_int_equal(tensor_type(g, "output.weight"), KITE_TYPE_Q6_K);
    assert_int_equal(tensor_type(g, "blk.0.attn_q.weight"), KITE_TYPE_KT3H);
    assert_int_equal(tensor_type(g, "blk.1.ffn_down.weight"), KITE_TYPE_KT3H);
    assert_int_equal(tensor_type(g, "blk.0.ffn_gate.weight"), KITE_TYPE_KT2H);
    assert_int_equal(tensor_type(g, "blk.0.attn_norm.weight"), KITE_TYPE_F32);
    const kite_gguf_tensor *t = kite_gguf_find_tensor(g, "blk.0.ffn_up.weight");
    assert_non_null(t);
    assert_int_equal(t->type, KITE_TYPE_KT2H);
    const int64_t cols = t->ne[0], rows = t->ne[1];
    const size_t group = t->n_bytes / (size_t)(rows / KT_ROWS);
    for (int64_t r = KT_ROWS; r < rows; r += KT_ROWS)
        assert_memory_equal((const uint8_t *)t->data + (size_t)(r / KT_ROWS) * group, t->data, group);
    float *want = malloc(sizeof(float) * (size_t)cols), *got = malloc(sizeof(float) * (size_t)cols);
    double e = 0, v = 0;
    for (int64_t r = 0; r < KT_ROWS; r++) {
        kite_random_model_row(7, "blk.0.ffn_up.weight", r, want, cols);
        kite_kt_dequantize_row(KITE_TYPE_KT2H, t->data, cols, r, got);
        for (int64_t c = 0; c < cols; c++) e += ((double)want[c] - got[c]) * ((double)want[c] - got[c]), v += (double)want[c] * want[c];
    }
    print_message("kt2 rows 0..15 of blk.0.ffn_up: mse/var %.4f\n", e / v);
    assert_true(e / v < 0.085);
    free(want), free(got);
    close_gguf(&o);
    generates_4(path);
}

/* Same seed, same bytes; another seed, other weights; thread count does not enter. */
static void test_deterministic(void **state) {
    (void)state;
    char err[512];
    const char *a = tmp_path("det-a.gguf"), *b = tmp_path("det-b.gguf"), *c = tmp_path("det-c.gguf");
    assert_int_equal(write_model(a, "tiny", "q8_0", NULL, 11, err, sizeof err), KITE_OK);
    assert_int_equal(write_model(b, "tiny", "q8_0", NULL, 11, err, sizeof err), KITE_OK);
    assert_int_equal(write_model(c, "tiny", "q8_0", NULL, 12, err, sizeof err), KITE_OK);
    opened oa, ob, oc;
    open_gguf(&oa, a);
    open_gguf(&ob, b);
    open_gguf(&oc, c);
    assert_int_equal(oa.file.size, ob.file.size);
    assert_memory_equal(oa.file.data, ob.file.data, oa.file.size);
    const kite_gguf_tensor *ta = kite_gguf_find_tensor(oa.g, "blk.0.ffn_up.weight");
    const kite_gguf_tensor *tc = kite_gguf_find_tensor(oc.g, "blk.0.ffn_up.weight");
    assert_non_null(ta);
    assert_non_null(tc);
    assert_int_equal(ta->n_bytes, tc->n_bytes);
    assert_true(memcmp(ta->data, tc->data, ta->n_bytes) != 0);
    close_gguf(&oa);
    close_gguf(&ob);
    close_gguf(&oc);
    /* different tensors and rows draw different values */
    float r0[64], r1[64], r2[64];
    kite_random_model_row(1, "blk.0.attn_q.weight", 0, r0, 64);
    kite_random_model_row(1, "blk.0.attn_q.weight", 1, r1, 64);
    kite_random_model_row(1, "blk.0.attn_k.weight", 0, r2, 64);
    assert_true(memcmp(r0, r1, sizeof r0) != 0);
    assert_true(memcmp(r0, r2, sizeof r0) != 0);
}

/* llama.cpp's test vectors (no BOS), tokenized with the vocabulary kite copied into the GGUF. */
typedef struct vec_case { char *text; size_t len; int32_t ids[256]; size_t n_ids; } vec_case;

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)size + 1);
    if (buf && fread(buf, 1, (size_t)size, f) != (size_t)size) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) buf[size] = 0, *n = (size_t)size;
    return buf;
}

static size_t load_vectors(const char *name, vec_case *cases, size_t cap) {
    char rel[128];
    size_t n_in, n_out;
    snprintf(rel, sizeof rel, "models/tokenizer-tests/ggml-vocab-%s.gguf.inp", name);
    char *in = slurp(kite_test_data(rel), &n_in);
    snprintf(rel, sizeof rel, "models/tokenizer-tests/ggml-vocab-%s.gguf.out", name);
    char *out = slurp(kite_test_data(rel), &n_out);
    assert_non_null(in);
    assert_non_null(out);
    const char *sep = "\n__ggml_vocab_test__\n";
    size_t n = 0;
    char *p = in, *q = out;
    while (n < cap) {
        char *end = strstr(p, sep);
        if (!end) break;
        cases[n].len = (size_t)(end - p);
        cases[n].text = malloc(cases[n].len + 1);
        memcpy(cases[n].text, p, cases[n].len);
        cases[n].text[cases[n].len] = 0;
        p = end + strlen(sep);
        char *eol = strchr(q, '\n');
        assert_non_null(eol);
        *eol = 0;
        cases[n].n_ids = 0;
        for (char *tok = strtok(q, " "); tok; tok = strtok(NULL, " ")) cases[n].ids[cases[n].n_ids++] = (int32_t)atoi(tok);
        q = eol + 1;
        n++;
    }
    free(in);
    free(out);
    return n;
}

static void check_tokenizer(const char *shape, const char *tokenizer_rel, const char *vectors, int32_t expect_vocab) {
    char err[512], file[64];
    snprintf(file, sizeof file, "tok-%s.gguf", vectors);
    const char *path = tmp_path(file);
    if (write_model(path, shape, "q8_0", kite_test_data(tokenizer_rel), 3, err, sizeof err)) fail_msg("%s: %s", vectors, err);
    kite_model *m = NULL;
    kite_model_params mp = kite_model_default_params();
    mp.vocab_only = true;
    if (kite_model_open(&m, path, &mp, err, sizeof err)) fail_msg("open: %s", err);
    kite_model_info info;
    kite_model_get_info(m, &info);
    assert_int_equal(info.n_vocab, expect_vocab);
    static vec_case cases[64];
    size_t n = load_vectors(vectors, cases, 64);
    assert_int_equal(n, 46);
    for (size_t i = 0; i < n; i++) {
        int32_t ids[512];
        size_t n_ids = 0;
        assert_int_equal(kite_tokenize(m, cases[i].text, cases[i].len, false, false, ids, 512, &n_ids, err, sizeof err), KITE_OK);
        if (n_ids != cases[i].n_ids || memcmp(ids, cases[i].ids, n_ids * sizeof *ids) != 0)
            fail_msg("%s case %zu ('%s'): %zu ids, want %zu", vectors, i, cases[i].text, n_ids, cases[i].n_ids);
        free(cases[i].text);
    }
    kite_model_free(m);
    unlink(path);
}

static void test_tokenizer_llama2(void **state) {
    (void)state;
    check_tokenizer("tiny", "models/llama2-tokenizer/tokenizer.bin", "llama-spm", 32000);
}

static void test_tokenizer_llama3(void **state) {
    (void)state;
    check_tokenizer("tiny", "models/tokenizers/llama3/tokenizer.json", "llama-bpe", 128256);
}

static void test_tokenizer_qwen3(void **state) {
    (void)state;
    check_tokenizer("tiny", "models/tokenizers/qwen3/tokenizer.json", "qwen2", 151669);
}

/* A SentencePiece-style tokenizer.json (byte fallback, "▁" for spaces: TinyStories-656K's) becomes an SPM ("llama")
 * vocabulary: its tokens, token types and special ids equal those llama.cpp's converter wrote into the model's own GGUF
 * (tinystories-656k-q8_0.gguf). Not the scores: without a tokenizer.model the converter writes -1000 for every
 * token, the writer ranks pieces by the merges (their order is checked by the oracle's Gemma 3 tokenization). */
static void test_tokenizer_spm_json(void **state) {
    (void)state;
    char err[512];
    const char *path = tmp_path("spm-json.gguf");
    assert_int_equal(write_model(path, "tiny", "f32", kite_test_data("models/tinystories-656k/tokenizer.json"), 1, err, sizeof err), KITE_OK);
    opened ours, ref;
    open_gguf(&ours, path);
    open_gguf(&ref, kite_test_data("models/tinystories-656k/tinystories-656k-q8_0.gguf"));
    kite_gguf_str a, b;
    assert_true(kite_gguf_get_str(ours.g, "tokenizer.ggml.model", &a) && kite_gguf_get_str(ref.g, "tokenizer.ggml.model", &b));
    assert_true(a.len == b.len && memcmp(a.ptr, b.ptr, a.len) == 0);
    kite_gguf_vtype ty;
    uint64_t n_ours = 0, n_ref = 0;
    assert_true(kite_gguf_get_arr(ours.g, "tokenizer.ggml.tokens", &ty, &n_ours) && kite_gguf_get_arr(ref.g, "tokenizer.ggml.tokens", &ty, &n_ref));
    assert_int_equal(n_ours, n_ref);
    for (uint64_t i = 0; i < n_ref; i++) {
        int64_t ta = 0, tb = 0;
        assert_true(kite_gguf_arr_str(ours.g, "tokenizer.ggml.tokens", i, &a) && kite_gguf_arr_str(ref.g, "tokenizer.ggml.tokens", i, &b));
        if (a.len != b.len || memcmp(a.ptr, b.ptr, a.len) != 0) fail_msg("token %llu differs from the converter's", (unsigned long long)i);
        assert_true(kite_gguf_arr_i64(ours.g, "tokenizer.ggml.token_type", i, &ta) && kite_gguf_arr_i64(ref.g, "tokenizer.ggml.token_type", i, &tb));
        if (ta != tb) fail_msg("token %llu has type %lld, the converter's %lld", (unsigned long long)i, (long long)ta, (long long)tb);
    }
    static const char *const ids[] = {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.unknown_token_id",
                                      "tokenizer.ggml.padding_token_id"};
    for (size_t k = 0; k < sizeof ids / sizeof ids[0]; k++) assert_int_equal(get_u32(ours.g, ids[k]), get_u32(ref.g, ids[k]));
    bool add_ours = false, add_ref = true;
    assert_true(kite_gguf_get_bool(ours.g, "tokenizer.ggml.add_bos_token", &add_ours) &&
                kite_gguf_get_bool(ref.g, "tokenizer.ggml.add_bos_token", &add_ref));
    assert_int_equal(add_ours, add_ref);
    close_gguf(&ours);
    close_gguf(&ref);
    unlink(path);
}

static void expect_error(int status, const char *err, int want_status, const char *want_text) {
    assert_int_equal(status, want_status);
    if (!strstr(err, want_text)) fail_msg("error '%s' does not mention '%s'", err, want_text);
    assert_null(strchr(err, '\n'));
}

static void test_bad_args(void **state) {
    (void)state;
    char err[512];
    const char *path = tmp_path("bad.gguf");
    expect_error(write_model(path, "llama-7b", "q4_0", NULL, 1, err, sizeof err), err, KITE_ERR_INVALID_ARG, "llama-7b");
    expect_error(write_model(path, "tiny", "q3_k", NULL, 1, err, sizeof err), err, KITE_ERR_INVALID_ARG, "q3_k");
    expect_error(write_model(path, "tiny", "q4_0", "/nonexistent/tokenizer.bin", 1, err, sizeof err), err, KITE_ERR_IO,
                 "/nonexistent/tokenizer.bin");
    /* Llama-3's 128256 tokens do not fit the 32000 rows of the llama-1.1b shape */
    expect_error(write_model(path, "llama-1.1b", "q4_0", kite_test_data("models/tokenizers/llama3/tokenizer.json"), 1, err, sizeof err),
                 err, KITE_ERR_INVALID_ARG, "128256");
    /* a file that is neither tokenizer format */
    expect_error(write_model(path, "tiny", "q4_0", kite_test_data("models/tinystories-656k/config.json"), 1, err, sizeof err), err,
                 KITE_ERR_FORMAT, "config.json");
    expect_error(write_model("/nonexistent-dir/x.gguf", "tiny", "q4_0", NULL, 1, err, sizeof err), err, KITE_ERR_IO, "/nonexistent-dir/x.gguf");
    kite_random_model_params p = {0};
    expect_error(kite_write_random_model(path, &p, err, sizeof err), err, KITE_ERR_INVALID_ARG, "shape");
    expect_error(kite_write_random_model(NULL, NULL, err, sizeof err), err, KITE_ERR_INVALID_ARG, "NULL");
    assert_int_equal(access(path, F_OK), -1); /* nothing was written */
}

static void test_hw_probe(void **state) {
    (void)state;
    char err[512];
    kite_hw_info hw;
    assert_int_equal(kite_hw_probe(2, 0.3, &hw, err, sizeof err), KITE_OK);
    assert_true(hw.kernels[0] != 0);
    assert_true(hw.n_cpus >= 1);
    assert_int_equal(hw.n_threads, 2);
    assert_true(hw.read_gbs_1t > 0.1 && hw.read_gbs_1t < 10000);
    assert_true(hw.read_gbs > 0.1 && hw.read_gbs < 10000);
    /* Positive and finite only: unoptimized sanitizer builds on a loaded machine run the loops at a
     * few GOP/s, and speed is not what this test is about. */
    if (!(hw.int8_gops_1t > 0.01 && hw.int8_gops > 0.01 && hw.f32_gflops > 0.01))
        fail_msg("int8 %g GOP/s (1 thread %g), fp32 %g GFLOP/s", hw.int8_gops, hw.int8_gops_1t, hw.f32_gflops);
    assert_true(hw.int8_gops_1t < 1e5 && hw.int8_gops < 1e6 && hw.f32_gflops < 1e6);
    assert_int_equal(kite_hw_probe(0, 0.1, &hw, err, sizeof err), KITE_OK);
    assert_int_equal(hw.n_threads, hw.n_cpus);
    expect_error(kite_hw_probe(-1, 0, &hw, err, sizeof err), err, KITE_ERR_INVALID_ARG, "n_threads");
    expect_error(kite_hw_probe(1, -1, &hw, err, sizeof err), err, KITE_ERR_INVALID_ARG, "seconds");
    expect_error(kite_hw_probe(1, 0, NULL, err, sizeof err), err, KITE_ERR_INVALID_ARG, "info");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiny_all_types),   cmocka_unit_test(test_tiny_trellis), cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_tokenizer_llama2), cmocka_unit_test(test_tokenizer_llama3),
        cmocka_unit_test(test_tokenizer_qwen3),  cmocka_unit_test(test_tokenizer_spm_json), cmocka_unit_test(test_bad_args),
        cmocka_unit_test(test_hw_probe),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
