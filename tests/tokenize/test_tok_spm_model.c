/* SentencePiece .model files (protobuf ModelProto): Llama-2's tokenizer.model against llama.cpp's test
 * vectors (made with HF tokenizers) and against the llama2.c export of the same vocabulary (every
 * piece's text and score, every test text's ids); tok512.model against tok512.bin on random text; the
 * loader's refusals (unigram models, other normalizers, truncated or malformed protobuf), every prefix of a
 * real file (an error or a tokenizer, never a crash); add_dummy_prefix. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "tok_test_util.h"

static kite_tokenizer *load_model_file(const char *rel) {
    kite_error e = {0};
    kite_tokenizer *t = NULL;
    if (kite_tokenizer_from_file(&t, kite_test_data(rel), 0, &e)) fail_msg("loading %s: %s", rel, e.msg);
    return t;
}

static kite_tokenizer *load_bin(const char *rel) {
    kite_error e = {0};
    kite_tokenizer *t = NULL;
    size_t n = 0;
    char *data = tt_slurp(kite_test_data(rel), &n);
    assert_non_null(data);
    if (kite_tokenizer_from_llama2c(&t, data, n, 0, &e)) fail_msg("loading %s: %s", rel, e.msg);
    free(data);
    return t;
}

/* Same pieces (texts), same special ids, same ids for text. */
static void assert_same_vocab(const kite_tokenizer *a, const kite_tokenizer *b) {
    assert_int_equal(kite_tokenizer_n_vocab(a), kite_tokenizer_n_vocab(b));
    assert_int_equal(kite_tokenizer_bos(a), kite_tokenizer_bos(b));
    assert_int_equal(kite_tokenizer_eos(a), kite_tokenizer_eos(b));
    for (int32_t id = 0; id < kite_tokenizer_n_vocab(a); id++) {
        size_t la = 0, lb = 0;
        const char *ta = kite_tokenizer_token_text(a, id, &la), *tb = kite_tokenizer_token_text(b, id, &lb);
        if (la != lb || memcmp(ta, tb, la)) fail_msg("piece %d: '%.*s' vs '%.*s'", id, (int)la, ta, (int)lb, tb);
    }
}

static void assert_same_ids(const kite_tokenizer *a, const kite_tokenizer *b, const char *text, size_t len) {
    kite_error e = {0};
    int32_t *ia, *ib;
    size_t na, nb;
    assert_int_equal(kite_tokenizer_encode(a, text, len, true, true, &ia, &na, &e), KITE_OK);
    assert_int_equal(kite_tokenizer_encode(b, text, len, true, true, &ib, &nb, &e), KITE_OK);
    if (na != nb || memcmp(ia, ib, na * sizeof *ia)) fail_msg("ids differ for '%.*s'", (int)len, text);
    free(ia);
    free(ib);
}

static void test_llama2_model_vectors(void **state) {
    (void)state;
    kite_tokenizer *t = load_model_file("models/llama2-tokenizer/tokenizer.model");
    kite_tokenizer *bin = load_bin("models/llama2-tokenizer/tokenizer.bin");
    assert_int_equal(kite_tokenizer_kind_of(t), KITE_TOKENIZER_SPM);
    assert_int_equal(kite_tokenizer_n_vocab(t), 32000);
    assert_true(kite_tokenizer_add_bos(t));
    assert_same_vocab(t, bin);
    tt_case *cases;
    size_t n = tt_load_vectors("llama-spm", &cases);
    assert_int_equal(n, 46);
    kite_error e = {0};
    for (size_t i = 0; i < n; i++) {
        int32_t *ids;
        size_t n_ids;
        assert_int_equal(kite_tokenizer_encode(t, cases[i].text, cases[i].len, false, false, &ids, &n_ids, &e), KITE_OK);
        if (n_ids != cases[i].n_ids || memcmp(ids, cases[i].ids, n_ids * sizeof(int32_t)) != 0) fail_msg("llama-spm case %zu differs", i);
        char *text;
        size_t len;
        assert_int_equal(kite_tokenizer_decode(t, ids, n_ids, &text, &len, &e), KITE_OK);
        assert_int_equal(len, cases[i].len);
        assert_memory_equal(text, cases[i].text, len);
        free(text);
        free(ids);
        assert_same_ids(t, bin, cases[i].text, cases[i].len);
    }
    tt_free_vectors(cases, n);
    kite_tokenizer_free(t);
    kite_tokenizer_free(bin);
}

static void test_tok512_model_equals_bin(void **state) {
    (void)state;
    kite_tokenizer *t = load_model_file("models/tinystories-tok512/tok512.model");
    kite_tokenizer *bin = load_bin("models/tinystories-tok512/tok512.bin");
    assert_same_vocab(t, bin);
    uint64_t seed = 0x5eed;
    char buf[512];
    static const char *const specials[] = {"<s>", "</s>", "<unk>"};
    for (int i = 0; i < 300; i++) {
        size_t len = tt_random_text(&seed, buf, sizeof buf, specials, 3);
        assert_same_ids(t, bin, buf, len);
    }
    kite_tokenizer_free(t);
    kite_tokenizer_free(bin);
}

static char *corpus_file(const char *name, size_t *size) {
    const char *src = getenv("KITE_SOURCE_DIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/fuzz/corpus/spm_model/%s", src ? src : "..", name);
    char *data = tt_slurp(path, size);
    if (!data) fail_msg("cannot read %s", path);
    return data;
}

static int load_corpus(const char *name, kite_tokenizer **t, kite_error *e) {
    size_t size = 0;
    char *data = corpus_file(name, &size);
    int rc = kite_tokenizer_from_spm_model(t, data, size, e);
    free(data);
    return rc;
}

static void test_refusals_and_options(void **state) {
    (void)state;
    static const struct { const char *file; int status; const char *needle; } cases[] = {
        {"unigram.model", KITE_ERR_UNSUPPORTED, "unigram"},
        {"nfkc.model", KITE_ERR_UNSUPPORTED, "nmt_nfkc"},
        {"truncated.model", KITE_ERR_FORMAT, "byte"},
        {"overlong_varint.model", KITE_ERR_FORMAT, "byte"},
        {"group_wire.model", KITE_ERR_FORMAT, "wire type"},
        {"empty.model", KITE_ERR_FORMAT, "empty"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        kite_tokenizer *t = NULL;
        kite_error e = {0};
        int rc = load_corpus(cases[i].file, &t, &e);
        if (rc != cases[i].status || !strstr(e.msg, cases[i].needle)) fail_msg("%s: status %d, '%s'", cases[i].file, rc, e.msg);
        assert_null(t);
    }
    /* The toy model: 19 pieces; with the dummy prefix "the" is "▁the", without it "t" "he". */
    kite_tokenizer *with = NULL, *without = NULL, *no_ids = NULL;
    kite_error e = {0};
    assert_int_equal(load_corpus("toy_bpe.model", &with, &e), KITE_OK);
    assert_int_equal(load_corpus("no_dummy_prefix.model", &without, &e), KITE_OK);
    assert_int_equal(kite_tokenizer_n_vocab(with), 19);
    int32_t *ids;
    size_t n;
    int32_t the = kite_tokenizer_token_id(with, "\xE2\x96\x81the", 6), t_ = kite_tokenizer_token_id(with, "t", 1),
            he = kite_tokenizer_token_id(with, "he", 2);
    assert_true(the > 0 && t_ > 0 && he > 0);
    assert_int_equal(kite_tokenizer_encode(with, "the", 3, false, false, &ids, &n, &e), KITE_OK);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], the);
    free(ids);
    assert_int_equal(kite_tokenizer_encode(without, "the", 3, false, false, &ids, &n, &e), KITE_OK);
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], t_);
    assert_int_equal(ids[1], he);
    free(ids);
    /* Byte fallback: 'A' has no piece but <0x41>. */
    assert_int_equal(kite_tokenizer_encode(with, "A", 1, false, false, &ids, &n, &e), KITE_OK);
    assert_true(n >= 1 && ids[n - 1] == kite_tokenizer_token_id(with, "<0x41>", 6));
    free(ids);
    /* unk / bos -1 (absent), eos out of range: none. */
    assert_int_equal(load_corpus("no_ids.model", &no_ids, &e), KITE_OK);
    assert_int_equal(kite_tokenizer_bos(no_ids), -1);
    assert_int_equal(kite_tokenizer_eos(no_ids), -1);
    kite_tokenizer_free(with);
    kite_tokenizer_free(without);
    kite_tokenizer_free(no_ids);
}

/* Every prefix of a real .model is an error or a tokenizer (a prefix ending between pieces is a valid
 * protobuf with fewer pieces), never a crash or an out-of-bounds read (ASan). */
static void test_every_prefix(void **state) {
    (void)state;
    size_t size = 0;
    char *data = tt_slurp(kite_test_data("models/tinystories-tok512/tok512.model"), &size);
    assert_non_null(data);
    int ok = 0, refused = 0;
    for (size_t len = 0; len < size; len++) {
        char *copy = malloc(len ? len : 1); /* exactly len bytes: ASan sees any read past them */
        memcpy(copy, data, len);
        kite_tokenizer *t = NULL;
        kite_error e = {0};
        int rc = kite_tokenizer_from_spm_model(&t, copy, len, &e);
        if (rc == KITE_OK) ok++, kite_tokenizer_free(t);
        else if (rc == KITE_ERR_FORMAT && e.msg[0]) refused++;
        else fail_msg("prefix of %zu bytes: status %d (%s)", len, rc, e.msg);
        free(copy);
    }
    /* The file holds the pieces, the trainer spec, the normalizer spec: the one prefix that loads ends
     * between the last two (without its normalizer spec, the defaults apply). */
    assert_int_equal(ok, 1);
    assert_int_equal(refused, (int)size - 1);
    free(data);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama2_model_vectors),
        cmocka_unit_test(test_tok512_model_equals_bin),
        cmocka_unit_test(test_refusals_and_options),
        cmocka_unit_test(test_every_prefix),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
