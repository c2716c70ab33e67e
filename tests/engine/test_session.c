/* Sessions through the public API: batch invariance, seeded sampling, cancel, context limits,
 * statistics, tokenize/detokenize, argument checks. Uses stories260K (GGUF) from KITE_TEST_DATA. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kite.h"
#include "test_util.h"

static kite_model *g_model;

static int setup(void **state) {
    (void)state;
    char err[512];
    kite_model_params mp = kite_model_default_params();
    mp.n_threads = 2;
    if (kite_model_open(&g_model, kite_test_data("models/tinystories-tok512/stories260K.gguf"), &mp, err, sizeof err)) {
        fprintf(stderr, "cannot open stories260K.gguf: %s\n", err);
        return -1;
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    kite_model_free(g_model);
    return 0;
}

static size_t encode(const char *text, int32_t *ids, size_t cap) {
    size_t n = 0;
    char err[256];
    assert_int_equal(kite_tokenize(g_model, text, strlen(text), true, false, ids, cap, &n, err, sizeof err), KITE_OK);
    return n;
}

/* A row's logits are bit-identical whether computed in one batch, in uneven chunks, or one token at a
 * time (the property speculative decoding relies on). */
static void test_batch_invariance(void **state) {
    (void)state;
    kite_model_info info;
    kite_model_get_info(g_model, &info);
    int32_t ids[256];
    size_t n = encode("Once upon a time, there was a little girl named Lily. She loved to play outside in the park with "
                      "her friends, and one day she found a shiny red ball under a big green tree.", ids, 256);
    assert_true(n > 40);
    size_t V = (size_t)info.n_vocab;
    float *batched = malloc(sizeof(float) * V * n), *single = malloc(sizeof(float) * V * n);
    char err[256];
    for (int threads = 1; threads <= 2; threads++) {
        kite_session_params sp = kite_session_default_params();
        sp.n_threads = threads;
        kite_session *a, *b;
        assert_int_equal(kite_session_open(&a, g_model, &sp, err, sizeof err), KITE_OK);
        assert_int_equal(kite_session_open(&b, g_model, &sp, err, sizeof err), KITE_OK);
        assert_int_equal(kite_eval(a, ids, n, batched, err, sizeof err), KITE_OK);
        /* Uneven chunks: 1, 2, 3, ... tokens. */
        size_t at = 0;
        for (size_t chunk = 1; at < n; chunk++) {
            size_t m = chunk < n - at ? chunk : n - at;
            assert_int_equal(kite_eval(b, ids + at, m, single + at * V, err, sizeof err), KITE_OK);
            at += m;
        }
        assert_int_equal(memcmp(batched, single, sizeof(float) * V * n), 0);
        kite_session_free(a);
        kite_session_free(b);
    }
    free(batched);
    free(single);
}

typedef struct collected { int32_t ids[512]; int n; char text[4096]; size_t len; int stop_after; } collected;

static bool collect(int32_t id, const char *text, size_t len, void *user) {
    collected *c = user;
    c->ids[c->n++] = id;
    if (c->len + len < sizeof c->text) { memcpy(c->text + c->len, text, len); c->len += len; }
    return c->stop_after == 0 || c->n < c->stop_after;
}

static void generate(const kite_gen_params *gp, const char *prompt, collected *out, int expect_status) {
    char err[256];
    kite_session *s;
    assert_int_equal(kite_session_open(&s, g_model, NULL, err, sizeof err), KITE_OK);
    int32_t ids[128];
    size_t n = encode(prompt, ids, 128);
    assert_int_equal(kite_prompt(s, ids, n, err, sizeof err), KITE_OK);
    assert_int_equal(kite_generate(s, gp, collect, out, err, sizeof err), expect_status);
    kite_session_free(s);
}

static void test_seeded_sampling(void **state) {
    (void)state;
    kite_gen_params gp = kite_gen_default_params();
    gp.temperature = 1.0f;
    gp.top_k = 0;
    gp.top_p = 1.0f;
    gp.min_p = 0.0f;
    gp.max_tokens = 40;
    gp.ignore_eos = true;
    gp.seed = 1234;
    collected a = {0}, b = {0}, c = {0};
    generate(&gp, "Once upon a time", &a, KITE_OK);
    generate(&gp, "Once upon a time", &b, KITE_OK);
    gp.seed = 98765;
    generate(&gp, "Once upon a time", &c, KITE_OK);
    assert_int_equal(a.n, 40);
    assert_memory_equal(a.ids, b.ids, sizeof(int32_t) * 40);
    assert_true(memcmp(a.ids, c.ids, sizeof(int32_t) * 40) != 0);
    /* The streamed text is the detokenized ids. */
    char text[4096];
    size_t len = 0;
    char err[256];
    assert_int_equal(kite_detokenize(g_model, a.ids, (size_t)a.n, text, sizeof text, &len, err, sizeof err), KITE_OK);
    assert_int_equal(len, a.len);
    assert_memory_equal(text, a.text, len);
}

/* skip_special: TinyStories-656K spells its end marker in plain pieces ("<|" "end" "_story" "|>") before its
 * end token. Without skip_special the text holds the marker; with it, generation ends where the marker
 * begins (finish stop), the text is the plain text up to it and the ids are a prefix of the plain run's. A
 * control token that is no end token (<|start_story|>, forced by a logit bias) prints nothing. */
static void test_skip_special(void **state) {
    (void)state;
    char err[512];
    kite_model *m;
    kite_model_params mp = kite_model_default_params();
    mp.n_threads = 2;
    assert_int_equal(kite_model_open(&m, kite_test_data("models/tinystories-656k/tinystories-656k-q8_0.gguf"), &mp, err, sizeof err), KITE_OK);
    int32_t prompt[16];
    size_t n_prompt = 0;
    assert_int_equal(kite_tokenize(m, "Once upon a time", 16, true, false, prompt, 16, &n_prompt, err, sizeof err), KITE_OK);
    kite_gen_params gp = kite_gen_default_params();
    gp.temperature = 0;
    gp.max_tokens = 300;
    collected plain = {0}, clean = {0}, forced = {0};
    collected *runs[3] = {&plain, &clean, &forced};
    kite_finish_reason finish[3];
    kite_logit_bias bias = {1, 100.0f};
    for (int r = 0; r < 3; r++) {
        kite_session *s;
        assert_int_equal(kite_session_open(&s, m, NULL, err, sizeof err), KITE_OK);
        assert_int_equal(kite_prompt(s, prompt, n_prompt, err, sizeof err), KITE_OK);
        gp.skip_special = r > 0;
        if (r == 2) gp.logit_bias = &bias, gp.n_logit_bias = 1, gp.max_tokens = 4;
        assert_int_equal(kite_generate(s, &gp, collect, runs[r], err, sizeof err), KITE_OK);
        finish[r] = kite_session_finish_reason(s);
        kite_session_free(s);
    }
    plain.text[plain.len] = 0;
    clean.text[clean.len] = 0;
    const char *marker = strstr(plain.text, "<|end_story|>");
    assert_non_null(marker); /* the case under test: the model writes the marker as text */
    assert_int_equal(clean.len, (size_t)(marker - plain.text));
    assert_memory_equal(clean.text, plain.text, clean.len);
    assert_null(strstr(clean.text, "<|"));
    assert_int_equal(finish[1], KITE_FINISH_STOP);
    assert_true(clean.n < plain.n);
    assert_memory_equal(clean.ids, plain.ids, sizeof(int32_t) * (size_t)clean.n);
    assert_int_equal(forced.n, 4);
    for (int i = 0; i < 4; i++) assert_int_equal(forced.ids[i], 1);
    assert_int_equal(forced.len, 0);
    kite_model_free(m);
}

/* A llama2.c tokenizer .bin of another vocabulary (Llama-2's 32000 pieces for stories260K's 512) is refused. */
static void test_mismatched_llama2c_tokenizer(void **state) {
    (void)state;
    char err[512];
    kite_model *m = NULL;
    kite_model_params mp = kite_model_default_params();
    mp.tokenizer_path = kite_test_data("models/llama2-tokenizer/tokenizer.bin");
    assert_int_equal(kite_model_open(&m, kite_test_data("models/tinystories-tok512/stories260K.bin"), &mp, err, sizeof err),
                     KITE_ERR_TOKENIZER);
    assert_null(m);
    assert_non_null(strstr(err, "32000"));
    assert_non_null(strstr(err, "512"));
    mp.tokenizer_path = kite_test_data("models/tinystories-tok512/tok512.bin");
    assert_int_equal(kite_model_open(&m, kite_test_data("models/tinystories-tok512/stories260K.bin"), &mp, err, sizeof err), KITE_OK);
    kite_model_free(m);
}

static void test_callback_stop_and_cancel(void **state) {
    (void)state;
    kite_gen_params gp = kite_gen_default_params();
    gp.temperature = 0;
    gp.max_tokens = 50;
    gp.ignore_eos = true;
    collected a = {.stop_after = 5};
    generate(&gp, "Once upon a time", &a, KITE_OK);
    assert_int_equal(a.n, 5);

    char err[256];
    kite_session *s;
    assert_int_equal(kite_session_open(&s, g_model, NULL, err, sizeof err), KITE_OK);
    int32_t ids[64];
    size_t n = encode("Once", ids, 64);
    kite_cancel(s);
    assert_int_equal(kite_prompt(s, ids, n, err, sizeof err), KITE_ERR_CANCELLED);
    assert_non_null(strstr(err, "cancel"));
    /* The cancel is consumed: the next call runs. */
    assert_int_equal(kite_prompt(s, ids, n, err, sizeof err), KITE_OK);
    kite_session_free(s);
}

static void test_context_limits(void **state) {
    (void)state;
    char err[256];
    kite_session_params sp = kite_session_default_params();
    sp.n_ctx = 16;
    kite_session *s;
    assert_int_equal(kite_session_open(&s, g_model, &sp, err, sizeof err), KITE_OK);
    assert_int_equal(kite_session_n_ctx(s), 16);
    int32_t ids[64];
    size_t n = encode("Once upon a time there was a little girl named Lily who loved the park", ids, 64);
    assert_true(n > 16);
    assert_int_equal(kite_prompt(s, ids, n, err, sizeof err), KITE_ERR_CONTEXT_FULL);
    assert_int_equal(kite_session_n_past(s), 0); /* nothing was half-applied */
    assert_int_equal(kite_prompt(s, ids, 10, err, sizeof err), KITE_OK);
    kite_gen_params gp = kite_gen_default_params();
    gp.temperature = 0;
    gp.max_tokens = 100;
    gp.ignore_eos = true;
    collected c = {0};
    assert_int_equal(kite_generate(s, &gp, collect, &c, err, sizeof err), KITE_ERR_CONTEXT_FULL);
    assert_int_equal(c.n, 7); /* 6 more positions fill the context, then the 7th token is emitted from them */
    kite_session_free(s);
}

static void test_stats(void **state) {
    (void)state;
    char err[256];
    kite_session *s;
    assert_int_equal(kite_session_open(&s, g_model, NULL, err, sizeof err), KITE_OK);
    int32_t ids[64];
    size_t n = encode("Once upon a time", ids, 64);
    assert_int_equal(kite_prompt(s, ids, n, err, sizeof err), KITE_OK);
    kite_gen_params gp = kite_gen_default_params();
    gp.temperature = 0;
    gp.max_tokens = 20;
    gp.ignore_eos = true;
    assert_int_equal(kite_generate(s, &gp, NULL, NULL, err, sizeof err), KITE_OK);
    kite_stats st;
    kite_session_stats(s, &st);
    assert_int_equal(st.prompt_tokens, (int64_t)n);
    assert_int_equal(st.generated_tokens, 20);
    assert_true(st.prefill_ms > 0 && st.ttft_ms >= st.prefill_ms && st.decode_ms > 0);
    assert_true(st.prefill_tok_s > 0 && st.decode_tok_s > 0);
    kite_session_reset(s);
    assert_int_equal(kite_session_n_past(s), 0);
    kite_session_stats(s, &st);
    assert_int_equal(st.generated_tokens, 0);
    kite_session_free(s);
}

static void test_bad_arguments(void **state) {
    (void)state;
    char err[256];
    kite_session *s;
    assert_int_equal(kite_session_open(&s, g_model, NULL, err, sizeof err), KITE_OK);
    int32_t bad[2] = {1, 100000};
    assert_int_equal(kite_prompt(s, bad, 2, err, sizeof err), KITE_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "100000"));
    kite_gen_params gp = kite_gen_default_params();
    assert_int_equal(kite_generate(s, &gp, NULL, NULL, err, sizeof err), KITE_ERR_INVALID_ARG); /* no context yet */
    int32_t one = 1;
    assert_int_equal(kite_prompt(s, &one, 1, err, sizeof err), KITE_OK);
    gp.top_p = 2.0f;
    assert_int_equal(kite_generate(s, &gp, NULL, NULL, err, sizeof err), KITE_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "top_p"));
    kite_session_free(s);
    kite_model *m = NULL;
    assert_int_equal(kite_model_open(&m, NULL, NULL, err, sizeof err), KITE_ERR_INVALID_ARG);
    assert_null(m);
    assert_int_equal(kite_model_open(&m, "/nonexistent/model.gguf", NULL, err, sizeof err), KITE_ERR_IO);
    assert_non_null(strstr(err, "/nonexistent/model.gguf"));
    kite_model_free(NULL);
    kite_session_free(NULL);
    /* Invalid UTF-8 is refused by the tokenizer. */
    size_t n = 0;
    assert_int_equal(kite_tokenize(g_model, "a\xff", 2, true, false, NULL, 0, &n, err, sizeof err), KITE_ERR_TOKENIZER);
}

static void test_model_info(void **state) {
    (void)state;
    kite_model_info in;
    kite_model_get_info(g_model, &in);
    /* shared/models/README.md: dim 64, hidden 172, 5 layers, 8 heads, 4 kv heads, vocab 512. */
    assert_string_equal(in.architecture, "llama");
    assert_string_equal(in.format, "gguf");
    assert_int_equal(in.dim, 64);
    assert_int_equal(in.ffn_dim, 172);
    assert_int_equal(in.n_layers, 5);
    assert_int_equal(in.n_heads, 8);
    assert_int_equal(in.n_kv_heads, 4);
    assert_int_equal(in.n_vocab, 512);
    assert_int_equal(in.bos_id, 1);
    assert_int_equal(in.eos_id, 2);
    kite_tensor_desc d;
    bool found = false;
    for (int32_t i = 0; i < in.n_tensors; i++) {
        assert_int_equal(kite_model_tensor(g_model, i, &d), KITE_OK);
        if (!strcmp(d.name, "blk.0.ffn_gate.weight")) {
            found = true;
            assert_int_equal(d.shape[0], 64);
            assert_int_equal(d.shape[1], 172);
            assert_int_equal(d.n_bytes, 64 * 172 * 4);
        }
    }
    assert_true(found);
    assert_int_equal(kite_model_tensor(g_model, in.n_tensors, &d), KITE_ERR_INVALID_ARG);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batch_invariance), cmocka_unit_test(test_seeded_sampling),
        cmocka_unit_test(test_callback_stop_and_cancel), cmocka_unit_test(test_context_limits),
        cmocka_unit_test(test_stats), cmocka_unit_test(test_bad_arguments), cmocka_unit_test(test_model_info),
        cmocka_unit_test(test_skip_special), cmocka_unit_test(test_mismatched_llama2c_tokenizer),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
