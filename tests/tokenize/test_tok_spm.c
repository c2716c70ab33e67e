/* SentencePiece-style tokenizers: the llama2.c .bin loader, GGUF "llama" and HF tokenizer.json with byte
 * fallback. References: the same vocabulary from two files (tok512.bin vs stories260K.gguf), the prompt
 * ids in reference_greedy.json, llama.cpp's token ids for "▁Hello" (15043) and "<0x0A>" (13) in Llama-2. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <jansson.h>

#include "io/gguf.h"
#include "io/mmap.h"
#include "tok_test_util.h"

static kite_tokenizer *load_llama2c(const char *rel, int32_t n_vocab) {
    size_t n = 0;
    char *data = tt_slurp(kite_test_data(rel), &n);
    assert_non_null(data);
    kite_error e = {0};
    kite_tokenizer *t = NULL;
    if (kite_tokenizer_from_llama2c(&t, data, n, n_vocab, &e)) fail_msg("%s: %s", rel, e.msg);
    free(data);
    return t;
}

static kite_tokenizer *load_gguf(const char *rel) {
    kite_error e = {0};
    kite_mapped_file f;
    if (kite_map_file(&f, kite_test_data(rel), &e)) fail_msg("%s", e.msg);
    kite_gguf *g = NULL;
    if (kite_gguf_open(&g, f.data, f.size, &e)) fail_msg("%s", e.msg);
    kite_tokenizer *t = NULL;
    if (kite_tokenizer_from_gguf(&t, g, &e)) fail_msg("%s", e.msg);
    kite_gguf_free(g);
    kite_unmap_file(&f); /* the tokenizer keeps its own copies */
    return t;
}

static kite_tokenizer *load_file(const char *rel) {
    kite_error e = {0};
    kite_tokenizer *t = NULL;
    if (kite_tokenizer_from_file(&t, kite_test_data(rel), 0, &e)) fail_msg("%s: %s", rel, e.msg);
    return t;
}

static void encode(const kite_tokenizer *t, const char *text, bool bos, bool special, int32_t **ids, size_t *n) {
    kite_error e = {0};
    if (kite_tokenizer_encode(t, text, strlen(text), bos, special, ids, n, &e)) fail_msg("encode: %s", e.msg);
}

static void expect_ids(const kite_tokenizer *t, const char *text, bool bos, bool special, const int32_t *want,
                       size_t n_want) {
    int32_t *ids;
    size_t n;
    encode(t, text, bos, special, &ids, &n);
    if (n != n_want || memcmp(ids, want, n * sizeof *ids)) {
        fprintf(stderr, "\"%s\": got", text);
        for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
        fprintf(stderr, "\n");
        fail_msg("ids differ for \"%s\"", text);
    }
    free(ids);
}

static void expect_round_trip(const kite_tokenizer *t, const char *text, size_t len) {
    kite_error e = {0};
    int32_t *ids;
    size_t n;
    assert_int_equal(kite_tokenizer_encode(t, text, len, true, false, &ids, &n, &e), KITE_OK);
    char *back;
    size_t back_len;
    assert_int_equal(kite_tokenizer_decode(t, ids, n, &back, &back_len, &e), KITE_OK);
    if (back_len != len || memcmp(back, text, len)) fail_msg("round trip of \"%s\" gave \"%s\"", text, back);
    free(back);
    free(ids);
}

/* tok512.bin (llama2.c) and stories260K.gguf hold the same 512-piece vocabulary: every token, score-driven
 * merge and byte fallback must come out the same from both loaders. */
static void test_tok512_gguf_equals_llama2c(void **state) {
    (void)state;
    kite_tokenizer *a = load_llama2c("models/tinystories-tok512/tok512.bin", 512);
    kite_tokenizer *b = load_gguf("models/tinystories-tok512/stories260K.gguf");
    assert_int_equal(kite_tokenizer_n_vocab(a), 512);
    assert_int_equal(kite_tokenizer_n_vocab(b), 512);
    for (int32_t id = 0; id < 512; id++) {
        size_t la, lb;
        const char *sa = kite_tokenizer_token_text(a, id, &la), *sb = kite_tokenizer_token_text(b, id, &lb);
        if (la != lb || memcmp(sa, sb, la)) fail_msg("token %d spelled differently", id);
        assert_int_equal(kite_tokenizer_is_eog(a, id), kite_tokenizer_is_eog(b, id));
        char pa[64], pb[64];
        int32_t na = kite_tokenizer_piece(a, 100, id, pa, sizeof pa), nb = kite_tokenizer_piece(b, 100, id, pb, sizeof pb);
        assert_int_equal(na, nb);
        assert_memory_equal(pa, pb, (size_t)na);
    }
    assert_int_equal(kite_tokenizer_bos(a), 1);
    assert_int_equal(kite_tokenizer_bos(b), 1);
    assert_int_equal(kite_tokenizer_eos(a), 2);
    assert_int_equal(kite_tokenizer_eos(b), 2);
    assert_true(kite_tokenizer_add_bos(a) && kite_tokenizer_add_bos(b));
    assert_true(kite_tokenizer_is_eog(a, 2) && !kite_tokenizer_is_eog(a, 1));

    static const char *const specials[] = {"<s>", "</s>", "<unk>"};
    uint64_t seed = 0x5eed5eedULL;
    char text[512];
    for (int i = 0; i < 3000; i++) {
        size_t len = tt_random_text(&seed, text, sizeof text, specials, 3);
        bool bos = i & 1, special = (i >> 1) & 1;
        int32_t *ia, *ib;
        size_t na, nb;
        kite_error e = {0};
        assert_int_equal(kite_tokenizer_encode(a, text, len, bos, special, &ia, &na, &e), KITE_OK);
        assert_int_equal(kite_tokenizer_encode(b, text, len, bos, special, &ib, &nb, &e), KITE_OK);
        if (na != nb || memcmp(ia, ib, na * sizeof *ia)) fail_msg("loaders disagree on \"%s\"", text);
        free(ia);
        free(ib);
    }
    kite_tokenizer_free(a);
    kite_tokenizer_free(b);
}

/* reference_greedy.json's prompt ids (BOS = 1 first): from tok512.bin, stories260K.gguf, and the
 * TinyStories-656K tokenizer.json (BPE merges by rank with byte fallback, Prepend + Replace normalizer). */
static void test_reference_prompt_ids(void **state) {
    (void)state;
    json_error_t jerr;
    json_t *root = json_load_file(kite_test_data("models/reference_greedy.json"), 0, &jerr);
    assert_non_null(root);
    json_t *cases = json_object_get(root, "cases");
    size_t i, checked = 0, checked_656k = 0;
    json_t *c;
    json_array_foreach(cases, i, c) {
        const char *prompt = json_string_value(json_object_get(c, "prompt"));
        const char *tok = json_string_value(json_object_get(c, "tokenizer"));
        const char *model = json_string_value(json_object_get(c, "model"));
        json_t *want = json_object_get(c, "prompt_ids");
        assert_non_null(prompt);
        assert_non_null(tok);
        char rel[256];
        kite_tokenizer *t;
        if (strstr(model, ".gguf") && strstr(tok, "tok512")) {
            snprintf(rel, sizeof rel, "models/%s", model); /* the GGUF's own vocabulary */
            t = load_gguf(rel);
        } else if (strstr(tok, ".bin")) {
            snprintf(rel, sizeof rel, "models/%s", tok);
            t = load_llama2c(rel, 512);
        } else {
            snprintf(rel, sizeof rel, "models/%s", tok);
            t = load_file(rel);
            checked_656k++;
        }
        assert_true(kite_tokenizer_add_bos(t));
        assert_int_equal(kite_tokenizer_bos(t), 1);
        int32_t *ids;
        size_t n;
        encode(t, prompt, kite_tokenizer_add_bos(t), false, &ids, &n);
        assert_int_equal(n, json_array_size(want));
        for (size_t k = 0; k < n; k++)
            if (ids[k] != json_integer_value(json_array_get(want, k)))
                fail_msg("%s \"%s\": id %zu is %d, want %lld", tok, prompt, k, ids[k],
                         (long long)json_integer_value(json_array_get(want, k)));
        /* and back: BOS gives nothing, the dummy-prefix space is dropped */
        char *back;
        size_t back_len;
        kite_error e = {0};
        assert_int_equal(kite_tokenizer_decode(t, ids, n, &back, &back_len, &e), KITE_OK);
        assert_string_equal(back, prompt);
        free(back);
        free(ids);
        kite_tokenizer_free(t);
        checked++;
    }
    assert_int_equal(checked, 19);
    assert_int_equal(checked_656k, 8);
    json_decref(root);
}

static void test_656k_tokenizer(void **state) {
    (void)state;
    kite_tokenizer *t = load_file("models/tinystories-656k/tokenizer.json");
    assert_int_equal(kite_tokenizer_kind_of(t), KITE_TOKENIZER_SPM);
    assert_int_equal(kite_tokenizer_n_vocab(t), 2048);
    assert_int_equal(kite_tokenizer_eos(t), 2); /* tokenizer_config.json: <|end_story|> */
    assert_true(kite_tokenizer_is_eog(t, 2));
    assert_false(kite_tokenizer_is_eog(t, 1));
    /* special tokens split out only with parse_special; a new "▁" prefix follows each */
    int32_t *plain, *with_special;
    size_t n_plain, n_special;
    encode(t, "<|end_story|>Once", false, false, &plain, &n_plain);
    encode(t, "<|end_story|>Once", false, true, &with_special, &n_special);
    assert_true(n_plain > 2);
    for (size_t i = 0; i < n_plain; i++) assert_int_not_equal(plain[i], 2);
    int32_t *once;
    size_t n_once;
    encode(t, "Once", false, false, &once, &n_once);
    assert_int_equal(n_special, 1 + n_once);
    assert_int_equal(with_special[0], 2);
    assert_memory_equal(with_special + 1, once, n_once * sizeof *once);
    free(plain);
    free(with_special);
    free(once);
    /* no <0xNN> tokens in this vocabulary: unknown characters become <unk> (fuse_unk joins neighbours);
     * 80 is "▁" */
    expect_ids(t, "\xF0\x9F\x98\x80\xF0\x9F\x98\x80", false, false, (const int32_t[]){80, 0}, 2);
    expect_round_trip(t, "Once upon a time, there was a little girl named Lily.", 52);
    expect_round_trip(t, "  Tom  and\nhis dog.", 19);
    kite_tokenizer_free(t);
}

static void test_llama2_pieces(void **state) {
    (void)state;
    kite_tokenizer *t = load_llama2c("models/llama2-tokenizer/tokenizer.bin", 32000);
    char buf[32];
    /* 15043 = "▁Hello": the dummy-prefix space goes at the start and after BOS, stays elsewhere */
    assert_int_equal(kite_tokenizer_piece(t, -1, 15043, buf, sizeof buf), 5);
    assert_memory_equal(buf, "Hello", 5);
    assert_int_equal(kite_tokenizer_piece(t, 1, 15043, buf, sizeof buf), 5);
    assert_int_equal(kite_tokenizer_piece(t, 15043, 15043, buf, sizeof buf), 6);
    assert_memory_equal(buf, " Hello", 6);
    /* 13 = <0x0A>: a byte token gives its byte */
    assert_int_equal(kite_tokenizer_piece(t, 15043, 13, buf, sizeof buf), 1);
    assert_int_equal(buf[0], '\n');
    /* BOS and EOS give nothing; <unk> gives its text */
    assert_int_equal(kite_tokenizer_piece(t, -1, 1, buf, sizeof buf), 0);
    assert_int_equal(kite_tokenizer_piece(t, 15043, 2, buf, sizeof buf), 0);
    assert_int_equal(kite_tokenizer_piece(t, 15043, 0, buf, sizeof buf), 5);
    assert_memory_equal(buf, "<unk>", 5);
    /* out of range, and a short buffer still reports the full length */
    assert_int_equal(kite_tokenizer_piece(t, -1, 32000, buf, sizeof buf), -1);
    assert_int_equal(kite_tokenizer_piece(t, -1, -5, buf, sizeof buf), -1);
    memset(buf, 'x', sizeof buf);
    assert_int_equal(kite_tokenizer_piece(t, 15043, 15043, buf, 3), 6);
    assert_memory_equal(buf, " He", 3);
    assert_int_equal(buf[3], 'x');
    /* special parsing: "<s>" is BOS only when asked */
    expect_ids(t, "<s>", false, true, (const int32_t[]){1}, 1);
    int32_t *ids;
    size_t n;
    encode(t, "<s>", false, false, &ids, &n);
    assert_true(n > 1);
    for (size_t i = 0; i < n; i++) assert_int_not_equal(ids[i], 1);
    free(ids);
    /* after a special token the text gets a new dummy prefix: "<s>Hello" -> BOS, ▁Hello */
    expect_ids(t, "<s>Hello", false, true, (const int32_t[]){1, 15043}, 2);
    expect_ids(t, "Hello", true, false, (const int32_t[]){1, 15043}, 2);
    /* decode rejects ids outside the vocabulary */
    kite_error e = {0};
    char *text;
    size_t len;
    assert_int_equal(kite_tokenizer_decode(t, (const int32_t[]){15043, 32000}, 2, &text, &len, &e), KITE_ERR_INVALID_ARG);
    assert_non_null(strstr(e.msg, "32000"));
    assert_null(text);
    /* round trips (no literal "▁" in the text: it decodes to a space) */
    uint64_t seed = 42;
    char buf2[512];
    for (int i = 0; i < 500; i++) {
        size_t l = tt_random_text(&seed, buf2, sizeof buf2, NULL, 0);
        if (strstr(buf2, "\xE2\x96\x81")) continue;
        expect_round_trip(t, buf2, l);
    }
    kite_tokenizer_free(t);
}

static void test_invalid_utf8_and_empty(void **state) {
    (void)state;
    kite_tokenizer *t = load_llama2c("models/tinystories-tok512/tok512.bin", 512);
    static const struct { const char *text; size_t len; size_t bad; } bad[] = {
        {"\xFF", 1, 0},
        {"abc\xC3", 4, 3},           /* truncated 2-byte sequence */
        {"ab\xC0\xAF", 4, 2},        /* overlong '/' */
        {"a\xE0\x80\xAF", 4, 1},     /* overlong 3-byte */
        {"xy\xED\xA0\x80z", 6, 2},   /* UTF-16 surrogate */
        {"\xF4\x90\x80\x80", 4, 0},  /* above U+10FFFF */
        {"ok \x80", 4, 3},           /* stray continuation byte */
        {"\xC3\xA9\xE2\x82", 4, 2},  /* valid é then a truncated euro sign */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kite_error e = {0};
        int32_t *ids = (int32_t *)&e;
        size_t n = 7;
        assert_int_equal(kite_tokenizer_encode(t, bad[i].text, bad[i].len, true, true, &ids, &n, &e), KITE_ERR_TOKENIZER);
        char want[64];
        snprintf(want, sizeof want, "invalid UTF-8 at byte %zu", bad[i].bad);
        assert_string_equal(e.msg, want);
        assert_null(ids);
        assert_int_equal(n, 0);
    }
    /* empty text: nothing, or just BOS */
    kite_error e = {0};
    int32_t *ids;
    size_t n;
    assert_int_equal(kite_tokenizer_encode(t, "", 0, false, true, &ids, &n, &e), KITE_OK);
    assert_int_equal(n, 0);
    free(ids);
    assert_int_equal(kite_tokenizer_encode(t, NULL, 0, true, false, &ids, &n, &e), KITE_OK);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], 1);
    char *text;
    size_t len = 99;
    assert_int_equal(kite_tokenizer_decode(t, ids, 0, &text, &len, &e), KITE_OK);
    assert_int_equal(len, 0);
    assert_string_equal(text, "");
    free(text);
    free(ids);
    kite_tokenizer_free(t);
}

/* Broken llama2.c files are clean errors, never crashes. */
static void test_llama2c_errors(void **state) {
    (void)state;
    size_t size = 0;
    char *data = tt_slurp(kite_test_data("models/tinystories-tok512/tok512.bin"), &size);
    assert_non_null(data);
    kite_error e = {0};
    kite_tokenizer *t = (kite_tokenizer *)&e;
    assert_int_equal(kite_tokenizer_from_llama2c(&t, data, 3, 512, &e), KITE_ERR_FORMAT);
    assert_null(t);
    assert_int_equal(kite_tokenizer_from_llama2c(&t, data, size - 1, 512, &e), KITE_ERR_FORMAT);
    assert_int_equal(kite_tokenizer_from_llama2c(&t, data, size, 513, &e), KITE_ERR_FORMAT);
    assert_non_null(strstr(e.msg, "512"));
    /* a negative token length */
    char *bad = malloc(size);
    memcpy(bad, data, size);
    int32_t neg = -3;
    memcpy(bad + 4 + 4, &neg, 4);
    assert_int_equal(kite_tokenizer_from_llama2c(&t, bad, size, 512, &e), KITE_ERR_FORMAT);
    /* a length past the end */
    int32_t huge = 1 << 30;
    memcpy(bad + 4 + 4, &huge, 4);
    assert_int_equal(kite_tokenizer_from_llama2c(&t, bad, size, 512, &e), KITE_ERR_FORMAT);
    free(bad);
    /* n_vocab <= 0 reads every entry; fewer than the file holds is fine too */
    assert_int_equal(kite_tokenizer_from_llama2c(&t, data, size, 0, &e), KITE_OK);
    assert_int_equal(kite_tokenizer_n_vocab(t), 512);
    kite_tokenizer_free(t);
    assert_int_equal(kite_tokenizer_from_llama2c(&t, data, size, 300, &e), KITE_OK);
    assert_int_equal(kite_tokenizer_n_vocab(t), 300);
    kite_tokenizer_free(t);
    free(data);
    kite_tokenizer_free(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tok512_gguf_equals_llama2c),
        cmocka_unit_test(test_reference_prompt_ids),
        cmocka_unit_test(test_656k_tokenizer),
        cmocka_unit_test(test_llama2_pieces),
        cmocka_unit_test(test_invalid_utf8_and_empty),
        cmocka_unit_test(test_llama2c_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
