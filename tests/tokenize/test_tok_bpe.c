/* Byte-level BPE: Qwen3 and Llama-3 tokenizer.json (special and added tokens, EOG, NFC, ignore_merges),
 * small hand-made tokenizer.json files, speed, and the GGUF "gpt2" path: a GGUF written from the
 * tokenizer.json data the way llama.cpp's converter does must tokenize exactly like the json. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <unistd.h>

#include <jansson.h>

#include "io/gguf.h"
#include "io/mmap.h"
#include "tok_gguf_writer.h"
#include "tok_test_util.h"

#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

static kite_tokenizer *g_qwen, *g_llama;

static kite_tokenizer *load_file(const char *rel, double *seconds) {
    kite_error e = {0};
    kite_tokenizer *t = NULL;
    double t0 = tt_now();
    if (kite_tokenizer_from_file(&t, kite_test_data(rel), 0, &e)) fail_msg("%s: %s", rel, e.msg);
    if (seconds) *seconds = tt_now() - t0;
    return t;
}

static kite_tokenizer *from_json(const char *json, kite_error *e) {
    kite_tokenizer *t = NULL;
    int rc = kite_tokenizer_from_hf_json(&t, json, strlen(json), NULL, 0, e);
    if (rc) assert_null(t);
    return t;
}

static void encode(const kite_tokenizer *t, const char *text, bool bos, bool special, int32_t **ids, size_t *n) {
    kite_error e = {0};
    if (kite_tokenizer_encode(t, text, strlen(text), bos, special, ids, n, &e)) fail_msg("encode: %s", e.msg);
}

static bool contains(const int32_t *ids, size_t n, int32_t id) {
    for (size_t i = 0; i < n; i++)
        if (ids[i] == id) return true;
    return false;
}

static int setup(void **state) {
    (void)state;
    double tq, tl;
    g_qwen = load_file("models/tokenizers/qwen3/tokenizer.json", &tq);
    g_llama = load_file("models/tokenizers/llama3/tokenizer.json", &tl);
    fprintf(stderr, "load: qwen3 tokenizer.json %.3f s, llama3 tokenizer.json %.3f s\n", tq, tl);
    /* 9-11 MB with 150k-280k merges: must stay well under two seconds in an optimized build */
    if (!SANITIZED) {
        assert_true(tq < 2.0);
        assert_true(tl < 2.0);
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    kite_tokenizer_free(g_qwen);
    kite_tokenizer_free(g_llama);
    return 0;
}

static void test_qwen3_special_tokens(void **state) {
    (void)state;
    kite_tokenizer *t = g_qwen;
    int32_t *user, *ids;
    size_t n_user, n;
    encode(t, "user", false, false, &user, &n_user);
    assert_true(n_user >= 1);
    encode(t, "<|im_start|>user", false, true, &ids, &n);
    assert_int_equal(n, 1 + n_user);
    assert_int_equal(ids[0], 151644);
    assert_memory_equal(ids + 1, user, n_user * sizeof *ids);
    free(ids);
    /* parse_special off: the spelling is ordinary text */
    encode(t, "<|im_start|>user", false, false, &ids, &n);
    assert_false(contains(ids, n, 151644));
    assert_true(n > 1 + n_user);
    char *back;
    size_t len;
    kite_error e = {0};
    assert_int_equal(kite_tokenizer_decode(t, ids, n, &back, &len, &e), KITE_OK);
    assert_string_equal(back, "<|im_start|>user");
    free(back);
    free(ids);
    /* "<think>" is an added token with "special": false: split out either way, as HF and llama.cpp do */
    for (int special = 0; special < 2; special++) {
        encode(t, "a<think>b", false, special, &ids, &n);
        assert_int_equal(n, 3);
        assert_int_equal(ids[1], 151667);
        free(ids);
    }
    assert_true(kite_tokenizer_is_special(t, 151644));
    assert_false(kite_tokenizer_is_special(t, 151667));
    /* EOG: <|endoftext|> and <|im_end|> (also eos, from tokenizer_config.json) */
    assert_int_equal(kite_tokenizer_eos(t), 151645);
    assert_int_equal(kite_tokenizer_bos(t), -1);
    assert_false(kite_tokenizer_add_bos(t));
    assert_true(kite_tokenizer_is_eog(t, 151643));
    assert_true(kite_tokenizer_is_eog(t, 151645));
    assert_false(kite_tokenizer_is_eog(t, 151644));
    assert_false(kite_tokenizer_is_eog(t, 9707));
    assert_false(kite_tokenizer_is_eog(t, 200000));
    /* pieces: special tokens give their text, EOS nothing, normal tokens their bytes */
    char buf[64];
    assert_int_equal(kite_tokenizer_piece(t, -1, 151644, buf, sizeof buf), 12);
    assert_memory_equal(buf, "<|im_start|>", 12);
    assert_int_equal(kite_tokenizer_piece(t, -1, 151645, buf, sizeof buf), 0);
    assert_int_equal(kite_tokenizer_piece(t, -1, 21927, buf, sizeof buf), 6); /* " Hello" (qwen2 vectors) */
    assert_memory_equal(buf, " Hello", 6);
    /* a chat turn */
    const char *chat = "<|im_start|>system\nYou are kind.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n";
    encode(t, chat, false, true, &ids, &n);
    int n_start = 0, n_end = 0;
    for (size_t i = 0; i < n; i++) {
        n_start += ids[i] == 151644;
        n_end += ids[i] == 151645;
    }
    assert_int_equal(n_start, 3);
    assert_int_equal(n_end, 2);
    free(ids);
    free(user);
}

static void test_qwen3_nfc(void **state) {
    (void)state;
    int32_t *a, *b;
    size_t na, nb;
    encode(g_qwen, "Cafe\xCC\x81 e\xCC\x81t\xC3\xA9", false, false, &a, &na); /* decomposed é */
    encode(g_qwen, "Caf\xC3\xA9 \xC3\xA9t\xC3\xA9", false, false, &b, &nb);   /* precomposed */
    assert_int_equal(na, nb);
    assert_memory_equal(a, b, na * sizeof *a);
    free(a);
    free(b);
}

static void test_llama3_tokens(void **state) {
    (void)state;
    kite_tokenizer *t = g_llama;
    assert_int_equal(kite_tokenizer_bos(t), 128000); /* tokenizer_config.json */
    assert_int_equal(kite_tokenizer_eos(t), 128001);
    assert_true(kite_tokenizer_is_eog(t, 128001));
    assert_true(kite_tokenizer_is_eog(t, 128009)); /* <|eot_id|> */
    assert_false(kite_tokenizer_is_eog(t, 128000));
    int32_t *ids;
    size_t n;
    encode(t, "<|begin_of_text|>Hello", false, true, &ids, &n);
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], 128000);
    assert_int_equal(ids[1], 9906);
    free(ids);
    encode(t, "Hello", true, false, &ids, &n);
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], 128000);
    free(ids);
    assert_int_equal(kite_tokenizer_token_id(t, "<|eot_id|>", 10), 128009);
    assert_int_equal(kite_tokenizer_token_id(t, "no such token!", 14), -1);
    size_t len;
    const char *s = kite_tokenizer_token_text(t, 22691, &len); /* " Hello" in GPT-2 characters */
    assert_int_equal(len, 7);
    assert_memory_equal(s, "\xC4\xA0Hello", 7);
}

/* Encoding cost grows about linearly with text length, also for one huge word and long runs of spaces. */
static void test_long_texts(void **state) {
    (void)state;
    size_t big = SANITIZED ? 1 << 18 : 1 << 20;
    char *text = malloc(4 * big + 1);
    uint64_t seed = 7;
    size_t len = 0;
    while (len < 4 * big - 512) len += tt_random_text(&seed, text + len, 512, NULL, 0);
    text[len] = '\0';
    size_t quarter = len / 4;
    while ((text[quarter] & 0xC0) == 0x80) quarter--; /* cut at a character boundary */
    kite_tokenizer *ts[2] = {g_qwen, g_llama};
    for (int k = 0; k < 2; k++) {
        kite_error e = {0};
        int32_t *ids;
        size_t n;
        double t0 = tt_now();
        assert_int_equal(kite_tokenizer_encode(ts[k], text, quarter, false, false, &ids, &n, &e), KITE_OK);
        double t1 = tt_now();
        free(ids);
        assert_int_equal(kite_tokenizer_encode(ts[k], text, len, false, false, &ids, &n, &e), KITE_OK);
        double t2 = tt_now();
        free(ids);
        fprintf(stderr, "encode %zu bytes: %.3f s, %zu bytes: %.3f s\n", quarter, t1 - t0, len, t2 - t1);
        assert_true(t2 - t1 < 10 * (t1 - t0) + 0.05);
    }
    /* one huge word, a huge run of spaces, of one digit, of newlines */
    const char fill[] = {'q', ' ', '7', '\n'};
    for (int f = 0; f < 4; f++) {
        memset(text, fill[f], big);
        for (int k = 0; k < 2; k++) {
            kite_error e = {0};
            int32_t *ids;
            size_t n;
            double t0 = tt_now();
            assert_int_equal(kite_tokenizer_encode(ts[k], text, big, false, false, &ids, &n, &e), KITE_OK);
            char *back;
            size_t back_len;
            assert_int_equal(kite_tokenizer_decode(ts[k], ids, n, &back, &back_len, &e), KITE_OK);
            assert_int_equal(back_len, big);
            assert_memory_equal(back, text, big);
            free(back);
            free(ids);
            if (!SANITIZED) assert_true(tt_now() - t0 < 5.0);
        }
    }
    free(text);
}

/* ignore_merges (Llama-3): a pre-token that is a vocabulary token is taken whole, even when the merges
 * would not build it. Vocabulary a b c ab abc bc, one merge "b c": "abc" -> [a, bc] normally, [abc] with it. */
static void test_ignore_merges(void **state) {
    (void)state;
    const char *fmt =
        "{\"model\": {\"type\": \"BPE\", \"ignore_merges\": %s, \"vocab\": {\"a\": 0, \"b\": 1, \"c\": 2, \"ab\": 3, "
        "\"abc\": 4, \"bc\": 5, \"\\u0120\": 6}, \"merges\": [\"b c\"]},"
        " \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": true}}";
    char json[512];
    for (int ignore = 0; ignore < 2; ignore++) {
        snprintf(json, sizeof json, fmt, ignore ? "true" : "false");
        kite_error e = {0};
        kite_tokenizer *t = from_json(json, &e);
        if (!t) fail_msg("%s", e.msg);
        int32_t *ids;
        size_t n;
        encode(t, "abc", false, false, &ids, &n);
        if (ignore) {
            assert_int_equal(n, 1);
            assert_int_equal(ids[0], 4);
        } else {
            assert_int_equal(n, 2);
            assert_int_equal(ids[0], 0);
            assert_int_equal(ids[1], 5);
        }
        free(ids);
        /* bytes missing from this toy vocabulary are dropped, not a crash */
        encode(t, "xyz abc", false, false, &ids, &n);
        free(ids);
        kite_tokenizer_free(t);
    }
}

/* A split pattern that matches the empty string at the end of the text (found by fuzz_tokenizer_json:
 * the pre-tokenizer stepped over "one more character" there and read a byte past the text). The text
 * sits in a buffer of exactly its length, so the sanitizer build sees any read past it. */
static void test_split_empty_match_at_end(void **state) {
    (void)state;
    const char *json =
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2, \"\\u0120\": 3}, \"merges\": [\"a b\"]},"
        " \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\":"
        " \"\\\\s*(?!\\\\S)\"}, \"behavior\": \"Isolated\", \"invert\": false}, {\"type\": \"ByteLevel\","
        " \"add_prefix_space\": false, \"use_regex\": false}]}}";
    kite_error e = {0};
    kite_tokenizer *t = from_json(json, &e);
    if (!t) fail_msg("%s", e.msg);
    static const struct { const char *text; size_t n; int32_t want[3]; } cases[] = {
        {"ab", 1, {2}},          /* the only match is empty, at the end */
        {"ab  ", 3, {2, 3, 3}},  /* a match of the trailing spaces, then the end */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        size_t len = strlen(cases[c].text);
        char *text = malloc(len);
        assert_non_null(text);
        memcpy(text, cases[c].text, len);
        int32_t *ids;
        size_t n;
        if (kite_tokenizer_encode(t, text, len, false, false, &ids, &n, &e)) fail_msg("encode: %s", e.msg);
        assert_int_equal(n, cases[c].n);
        assert_memory_equal(ids, cases[c].want, sizeof(int32_t) * n);
        free(ids);
        free(text);
    }
    kite_tokenizer_free(t);
}

/* Hand-made SentencePiece-style tokenizer.json: Metaspace pre-tokenizer, byte fallback, merge order. */
static void test_small_spm_json(void **state) {
    (void)state;
    const char *json =
        "{\"added_tokens\": [{\"id\": 0, \"content\": \"<unk>\", \"special\": true},"
        " {\"id\": 1, \"content\": \"<s>\", \"special\": true}, {\"id\": 2, \"content\": \"</s>\", \"special\": true}],"
        " \"pre_tokenizer\": {\"type\": \"Metaspace\", \"replacement\": \"\\u2581\", \"prepend_scheme\": \"first\", \"split\": false},"
        " \"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<s>\", \"type_id\": 0}},"
        " {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}], \"special_tokens\": {\"<s>\": {\"id\": \"<s>\", \"ids\": [1], \"tokens\": [\"<s>\"]}}},"
        " \"model\": {\"type\": \"BPE\", \"byte_fallback\": true, \"unk_token\": \"<unk>\", \"vocab\": {\"<unk>\": 0, \"<s>\": 1,"
        " \"</s>\": 2, \"<0x0A>\": 3, \"<0xC3>\": 4, \"<0xA9>\": 5, \"\\u2581\": 6, \"h\": 7, \"i\": 8, \"\\u2581h\": 9, \"hi\": 10,"
        " \"\\u2581hi\": 11}, \"merges\": [\"h i\", \"\\u2581 h\", \"\\u2581 hi\"]}}";
    kite_error e = {0};
    kite_tokenizer *t = from_json(json, &e);
    if (!t) fail_msg("%s", e.msg);
    assert_int_equal(kite_tokenizer_kind_of(t), KITE_TOKENIZER_SPM);
    assert_int_equal(kite_tokenizer_bos(t), 1);
    assert_true(kite_tokenizer_add_bos(t));
    assert_int_equal(kite_tokenizer_eos(t), -1);     /* no eos named anywhere, */
    assert_true(kite_tokenizer_is_eog(t, 2));        /* but llama.cpp ends generation at "</s>" by its spelling */
    int32_t *ids;
    size_t n;
    /* rank 0 "h i" first, then "▁ hi": ▁hi; "é" is not a token: its two bytes */
    encode(t, "hi\n\xC3\xA9 hi", true, false, &ids, &n);
    const int32_t want[] = {1, 11, 3, 4, 5, 11};
    assert_int_equal(n, 6);
    assert_memory_equal(ids, want, sizeof want);
    char *back;
    size_t len;
    assert_int_equal(kite_tokenizer_decode(t, ids, n, &back, &len, &e), KITE_OK);
    assert_string_equal(back, "hi\n\xC3\xA9 hi");
    free(back);
    free(ids);
    kite_tokenizer_free(t);
}

static void test_json_errors(void **state) {
    (void)state;
    static const struct { const char *json; int status; const char *needle; } cases[] = {
        {"", KITE_ERR_FORMAT, "tokenizer.json"},
        {"[1, 2]", KITE_ERR_FORMAT, "top level"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}", KITE_ERR_FORMAT, "tokenizer.json"},
        {"{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"a\": 0}}}", KITE_ERR_UNSUPPORTED, "WordPiece"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -1}, \"merges\": []}, \"pre_tokenizer\": {\"type\": \"ByteLevel\"}}",
         KITE_ERR_FORMAT, "\"a\""},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 99999999}, \"merges\": []}, \"pre_tokenizer\": {\"type\": \"ByteLevel\"}}",
         KITE_ERR_FORMAT, "99999999"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"pre_tokenizer\": {\"type\": \"Digits\"}}",
         KITE_ERR_UNSUPPORTED, "Digits"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"normalizer\": {\"type\": \"NFKD\"},"
         " \"pre_tokenizer\": {\"type\": \"ByteLevel\"}}", KITE_ERR_UNSUPPORTED, "NFKD"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"ab\"]}, \"pre_tokenizer\": {\"type\": \"ByteLevel\"}}",
         KITE_ERR_FORMAT, "merge 0"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"pre_tokenizer\": {\"type\": \"Sequence\","
         " \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": \"(unclosed\"}, \"behavior\": \"Isolated\"},"
         " {\"type\": \"ByteLevel\", \"use_regex\": false}]}}",
         KITE_ERR_FORMAT, "split pattern"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}", KITE_ERR_UNSUPPORTED, "ByteLevel"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"\\ud800\": 0}}}", KITE_ERR_FORMAT, "surrogate"},
        {"{\"a\": \"\xC3\x28\"}", KITE_ERR_FORMAT, "UTF-8"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kite_error e = {0};
        kite_tokenizer *t = NULL;
        int rc = kite_tokenizer_from_hf_json(&t, cases[i].json, strlen(cases[i].json), NULL, 0, &e);
        if (rc != cases[i].status || !strstr(e.msg, cases[i].needle))
            fail_msg("case %zu: status %d, message \"%s\"", i, rc, e.msg);
        assert_null(t);
    }
}

static kite_tokenizer *load_gguf_path(const char *path, kite_error *e, int *rc) {
    kite_mapped_file f;
    kite_tokenizer *t = NULL;
    *rc = kite_map_file(&f, path, e);
    if (*rc) return NULL;
    kite_gguf *g = NULL;
    *rc = kite_gguf_open(&g, f.data, f.size, e);
    if (!*rc) *rc = kite_tokenizer_from_gguf(&t, g, e);
    kite_gguf_free(g);
    kite_unmap_file(&f);
    return t;
}

static void compare_gguf_with_json(const kite_tokenizer *js, const char *json_rel, const char *config_rel,
                                   const char *pre, const char *vectors, const char *const *specials, size_t n_specials) {
    char path[256];
    snprintf(path, sizeof path, "/tmp/kite_test_tok_%d_%s.gguf", (int)getpid(), pre);
    write_gguf_from_json(json_rel, config_rel, pre, path, false);
    kite_error e = {0};
    int rc;
    double t0 = tt_now();
    kite_tokenizer *gg = load_gguf_path(path, &e, &rc);
    fprintf(stderr, "GGUF %s tokenizer load %.3f s\n", pre, tt_now() - t0);
    unlink(path);
    if (rc) fail_msg("%s", e.msg);
    assert_int_equal(kite_tokenizer_kind_of(gg), KITE_TOKENIZER_BPE);
    assert_int_equal(kite_tokenizer_n_vocab(gg), kite_tokenizer_n_vocab(js));
    assert_int_equal(kite_tokenizer_bos(gg), kite_tokenizer_bos(js));
    assert_int_equal(kite_tokenizer_eos(gg), kite_tokenizer_eos(js));
    for (int32_t id = 0; id < kite_tokenizer_n_vocab(js); id++) {
        assert_int_equal(kite_tokenizer_is_eog(gg, id), kite_tokenizer_is_eog(js, id));
        assert_int_equal(kite_tokenizer_is_special(gg, id), kite_tokenizer_is_special(js, id));
        char a[256], b[256];
        int32_t na = kite_tokenizer_piece(gg, -1, id, a, sizeof a), nb = kite_tokenizer_piece(js, -1, id, b, sizeof b);
        assert_int_equal(na, nb);
        assert_memory_equal(a, b, (size_t)na < sizeof a ? (size_t)na : sizeof a);
    }
    /* llama.cpp's vectors through the GGUF path */
    tt_case *cases;
    size_t n_cases = tt_load_vectors(vectors, &cases);
    assert_int_equal(n_cases, 46);
    for (size_t i = 0; i < n_cases; i++) {
        int32_t *ids;
        size_t n;
        assert_int_equal(kite_tokenizer_encode(gg, cases[i].text, cases[i].len, false, false, &ids, &n, &e), KITE_OK);
        assert_int_equal(n, cases[i].n_ids);
        assert_memory_equal(ids, cases[i].ids, n * sizeof *ids);
        free(ids);
    }
    tt_free_vectors(cases, n_cases);
    /* random text with special-token spellings, all flag combinations */
    uint64_t seed = 0xC0FFEE;
    char text[512];
    for (int i = 0; i < (SANITIZED ? 1500 : 4000); i++) {
        size_t len = tt_random_text(&seed, text, sizeof text, specials, n_specials);
        bool bos = i & 1, special = (i >> 1) & 1;
        int32_t *a, *b;
        size_t na, nb;
        assert_int_equal(kite_tokenizer_encode(gg, text, len, bos, special, &a, &na, &e), KITE_OK);
        assert_int_equal(kite_tokenizer_encode(js, text, len, bos, special, &b, &nb, &e), KITE_OK);
        if (na != nb || memcmp(a, b, na * sizeof *a)) fail_msg("%s: GGUF and tokenizer.json differ on \"%s\"", pre, text);
        if (!special) { /* parsed BOS / EOS would decode to nothing */
            char *back;
            size_t back_len;
            assert_int_equal(kite_tokenizer_decode(gg, a, na, &back, &back_len, &e), KITE_OK);
            assert_int_equal(back_len, len);
            assert_memory_equal(back, text, len);
            free(back);
        }
        free(a);
        free(b);
    }
    kite_tokenizer_free(gg);
}

static void test_gguf_llama3_equals_json(void **state) {
    (void)state;
    static const char *const specials[] = {"<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>",
                                           "<|reserved_special_token_5|>", "<|"};
    compare_gguf_with_json(g_llama, "models/tokenizers/llama3/tokenizer.json", "models/tokenizers/llama3/tokenizer_config.json",
                           "llama-bpe", "llama-bpe", specials, 6);
}

static void test_gguf_qwen_equals_json(void **state) {
    (void)state;
    static const char *const specials[] = {"<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>",
                                           "<tool_call>", "<|vision_pad|>", "<|im"};
    compare_gguf_with_json(g_qwen, "models/tokenizers/qwen3/tokenizer.json", "models/tokenizers/qwen3/tokenizer_config.json",
                           "qwen2", "qwen2", specials, 8);
}

/* GGUF errors: unknown model or pre-tokenizer names are named in the message; missing merges. */
static void test_gguf_errors(void **state) {
    (void)state;
    static const struct { const char *model, *pre; bool merges; int status; const char *needle; } cases[] = {
        {"gpt2", "smaug-bpe-x", true, KITE_ERR_UNSUPPORTED, "\"smaug-bpe-x\""},
        {"bert", "default", true, KITE_ERR_UNSUPPORTED, "\"bert\""},
        {"gpt2", "qwen2", false, KITE_ERR_FORMAT, "tokenizer.ggml.merges"},
        {"gpt2", "gpt-2", true, KITE_OK, ""},
        {"gpt2", NULL, true, KITE_OK, ""},
    };
    const char *tokens[] = {"a", "b", "ab", "\xC4\xA0", "<|endoftext|>"};
    const int32_t types[] = {1, 1, 1, 1, 3};
    const char *merges[] = {"a b"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kite_gguf_writer *w = kite_gguf_writer_new();
        kite_gguf_w_str(w, "tokenizer.ggml.model", cases[i].model);
        if (cases[i].pre) kite_gguf_w_str(w, "tokenizer.ggml.pre", cases[i].pre);
        kite_gguf_w_arr_str(w, "tokenizer.ggml.tokens", tokens, 5);
        kite_gguf_w_arr_i32(w, "tokenizer.ggml.token_type", types, 5);
        if (cases[i].merges) kite_gguf_w_arr_str(w, "tokenizer.ggml.merges", merges, 1);
        char path[256];
        snprintf(path, sizeof path, "/tmp/kite_test_tok_err_%d.gguf", (int)getpid());
        kite_error e = {0};
        assert_int_equal(kite_gguf_writer_save(w, path, &e), KITE_OK);
        kite_gguf_writer_free(w);
        int rc;
        kite_tokenizer *t = load_gguf_path(path, &e, &rc);
        unlink(path);
        if (rc != cases[i].status || !strstr(e.msg, cases[i].needle)) fail_msg("case %zu: %d \"%s\"", i, rc, e.msg);
        if (!rc) {
            int32_t *ids;
            size_t n;
            encode(t, "ab ab<|endoftext|>", false, true, &ids, &n);
            const int32_t want[] = {2, 3, 2, 4}; /* "ab", then " ab" = "Ġ" + "ab", then <|endoftext|> */
            assert_int_equal(n, 4);
            assert_memory_equal(ids, want, sizeof want);
            assert_true(kite_tokenizer_is_eog(t, 4));
            free(ids);
            kite_tokenizer_free(t);
        } else {
            assert_null(t);
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qwen3_special_tokens),
        cmocka_unit_test(test_qwen3_nfc),
        cmocka_unit_test(test_llama3_tokens),
        cmocka_unit_test(test_long_texts),
        cmocka_unit_test(test_ignore_merges),
        cmocka_unit_test(test_split_empty_match_at_end),
        cmocka_unit_test(test_small_spm_json),
        cmocka_unit_test(test_json_errors),
        cmocka_unit_test(test_gguf_errors),
        cmocka_unit_test(test_gguf_llama3_equals_json),
        cmocka_unit_test(test_gguf_qwen_equals_json),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
