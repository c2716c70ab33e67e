/* llama.cpp's tokenizer test vectors (tokenizer-tests/ggml-vocab-*.gguf.{inp,out}, made by llama.cpp's
 * convert_hf_to_gguf_update.py with HF tokenizers, no BOS): every line must match, with parse_special off
 * and on (no test text spells a special token, so both must give the same ids), and decoding must give
 * the text back, also when decoded piece by piece as a stream. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "tok_test_util.h"

static kite_tokenizer *load(const char *rel, bool llama2c) {
    kite_error e = {0};
    kite_tokenizer *t = NULL;
    int rc;
    if (llama2c) {
        size_t n = 0;
        char *data = tt_slurp(kite_test_data(rel), &n);
        assert_non_null(data);
        rc = kite_tokenizer_from_llama2c(&t, data, n, 32000, &e);
        free(data);
    } else {
        rc = kite_tokenizer_from_file(&t, kite_test_data(rel), 0, &e);
    }
    if (rc) fail_msg("loading %s: %s", rel, e.msg);
    return t;
}

static void check_vectors(kite_tokenizer *t, const char *name) {
    tt_case *cases;
    size_t n = tt_load_vectors(name, &cases);
    assert_int_equal(n, 46); /* 46 texts; the .inp's trailing empty entry has no .out line */
    kite_error e = {0};
    for (size_t i = 0; i < n; i++) {
        for (int special = 0; special < 2; special++) {
            int32_t *ids;
            size_t n_ids;
            assert_int_equal(kite_tokenizer_encode(t, cases[i].text, cases[i].len, false, special, &ids, &n_ids, &e), KITE_OK);
            if (n_ids != cases[i].n_ids || memcmp(ids, cases[i].ids, n_ids * sizeof(int32_t)) != 0) {
                fprintf(stderr, "%s case %zu (parse_special %d): got", name, i, special);
                for (size_t k = 0; k < n_ids; k++) fprintf(stderr, " %d", ids[k]);
                fprintf(stderr, "\n  want");
                for (size_t k = 0; k < cases[i].n_ids; k++) fprintf(stderr, " %d", cases[i].ids[k]);
                fprintf(stderr, "\n");
                fail_msg("%s: case %zu differs", name, i);
            }
            /* whole-sequence decode gives the text back */
            char *text;
            size_t len;
            assert_int_equal(kite_tokenizer_decode(t, ids, n_ids, &text, &len, &e), KITE_OK);
            assert_int_equal(len, cases[i].len);
            assert_memory_equal(text, cases[i].text, len);
            assert_int_equal(text[len], '\0');
            /* streaming: pieces one at a time with the previous id, also after a BOS */
            char buf[4096];
            size_t at = 0;
            int32_t prev = kite_tokenizer_bos(t);
            for (size_t k = 0; k < n_ids; k++) {
                int32_t m = kite_tokenizer_piece(t, prev, ids[k], buf + at, sizeof buf - at);
                assert_true(m >= 0 && at + (size_t)m <= sizeof buf);
                at += (size_t)m;
                prev = ids[k];
            }
            assert_int_equal(at, cases[i].len);
            assert_memory_equal(buf, cases[i].text, at);
            free(text);
            free(ids);
        }
    }
    tt_free_vectors(cases, n);
}

static void test_llama_spm(void **state) {
    (void)state;
    kite_tokenizer *t = load("models/llama2-tokenizer/tokenizer.bin", true);
    assert_int_equal(kite_tokenizer_kind_of(t), KITE_TOKENIZER_SPM);
    assert_int_equal(kite_tokenizer_n_vocab(t), 32000);
    check_vectors(t, "llama-spm");
    kite_tokenizer_free(t);
}

static void test_llama_bpe(void **state) {
    (void)state;
    kite_tokenizer *t = load("models/tokenizers/llama3/tokenizer.json", false);
    assert_int_equal(kite_tokenizer_kind_of(t), KITE_TOKENIZER_BPE);
    assert_int_equal(kite_tokenizer_n_vocab(t), 128256);
    check_vectors(t, "llama-bpe");
    kite_tokenizer_free(t);
}

static void test_qwen2(void **state) {
    (void)state;
    kite_tokenizer *t = load("models/tokenizers/qwen3/tokenizer.json", false);
    assert_int_equal(kite_tokenizer_kind_of(t), KITE_TOKENIZER_BPE);
    assert_int_equal(kite_tokenizer_n_vocab(t), 151669);
    check_vectors(t, "qwen2");
    kite_tokenizer_free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama_spm),
        cmocka_unit_test(test_llama_bpe),
        cmocka_unit_test(test_qwen2),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
