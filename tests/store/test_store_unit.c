/* The store's pure parts: SHA-256 against the FIPS 180-4 / NIST examples, pull-name parsing and
 * normalisation, quantization tags and split names, the index reader's recovery, and the GGUF choice. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/sha256.h"
#include "store/store_internal.h"

static void hex_of(const void *data, size_t len, char out[65]) {
    kite_sha256 s;
    kite_sha256_init(&s);
    kite_sha256_update(&s, data, len);
    kite_sha256_hex(&s, out);
}

static void test_sha256_vectors(void **state) {
    (void)state;
    char hex[65];
    hex_of("", 0, hex);
    assert_string_equal(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    hex_of("abc", 3, hex);
    assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    hex_of(two, strlen(two), hex);
    assert_string_equal(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    const char *four = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu";
    hex_of(four, strlen(four), hex);
    assert_string_equal(hex, "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
    /* one million 'a', fed in uneven pieces: the streaming state across block boundaries */
    kite_sha256 s;
    kite_sha256_init(&s);
    char a[997];
    memset(a, 'a', sizeof a);
    size_t left = 1000000;
    for (size_t step = 1; left; step = step % 997 + 7) {
        size_t n = step < left ? step : left;
        if (n > sizeof a) n = sizeof a;
        kite_sha256_update(&s, a, n);
        left -= n;
    }
    kite_sha256_hex(&s, hex);
    assert_string_equal(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

static void test_names(void **state) {
    (void)state;
    store_ref r;
    kite_error e = {0};
    assert_int_equal(store_parse_name("TheBloke/Llama-2-7B-GGUF", &r, &e), KITE_OK);
    assert_int_equal(r.kind, STORE_REF_HUB);
    assert_string_equal(r.repo, "TheBloke/Llama-2-7B-GGUF");
    assert_string_equal(r.revision, "main");
    assert_string_equal(r.name, "TheBloke/Llama-2-7B-GGUF");
    assert_int_equal(store_parse_name("hf.co/u/r@main:q4_k_m", &r, &e), KITE_OK);
    assert_string_equal(r.quant, "Q4_K_M");
    assert_string_equal(r.name, "u/r:Q4_K_M");
    /* found by fuzz_store_index: prefixes stacked, so the normal form re-parses to itself */
    assert_int_equal(store_parse_name("hf://hf.co/u/r/x.gguf", &r, &e), KITE_OK);
    assert_string_equal(r.name, "u/r/x.gguf");
    assert_int_equal(store_parse_name("u/r@v1.0/dir/f.gguf", &r, &e), KITE_OK);
    assert_string_equal(r.revision, "v1.0");
    assert_string_equal(r.file, "dir/f.gguf");
    assert_string_equal(r.name, "u/r@v1.0/dir/f.gguf");
    assert_int_equal(store_parse_name("https://example.com/a/b.gguf?download=1", &r, &e), KITE_OK);
    assert_int_equal(r.kind, STORE_REF_URL);
    assert_string_equal(r.file, "b.gguf");
    static const char *const bad[] = {"", "u", "u/", "/r", "u/r/", "u/r:", "u/r@", "u/r@/x", "u/../x", "u/r/../x", "u/r/a//b",
                                      ".u/r", "u/r.", "u r/x", "u/r:Q4-K", "https://", "https://host", "https://host/", "u/r\n",
                                      "u/r@a..b", "u/r?x"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        e.msg[0] = 0;
        assert_int_equal(store_parse_name(bad[i], &r, &e), KITE_ERR_INVALID_ARG);
        assert_non_null(strstr(e.msg, "model name") ? e.msg : strstr(e.msg, "URL"));
    }
    char d1[256], d2[256];
    store_name_dir("a/b_c", d1, sizeof d1);
    store_name_dir("a_b/c", d2, sizeof d2);
    assert_string_not_equal(d1, d2);
    store_name_dir("../../x", d1, sizeof d1);
    assert_null(strchr(d1, '/'));
    assert_true(d1[0] != '.');
}

static void test_quant_and_split(void **state) {
    (void)state;
    assert_true(store_name_has_quant("dir/Model-Q4_K_M.gguf", "Q4_K_M"));
    assert_true(store_name_has_quant("model.q4_k_m.gguf", "Q4_K_M"));
    assert_false(store_name_has_quant("model-Q4_K_M.gguf", "Q4_K"));
    assert_false(store_name_has_quant("model-IQ4_XS.gguf", "Q4_XS"));
    assert_true(store_name_has_quant("m-Q8_0-00001-of-00002.gguf", "Q8_0"));
    int part, count;
    assert_true(store_split_part("x/m-Q8_0-00002-of-00003.gguf", &part, &count));
    assert_int_equal(part, 2);
    assert_int_equal(count, 3);
    assert_false(store_split_part("m-00004-of-00003.gguf", &part, &count));
    assert_false(store_split_part("m-0001-of-00003.gguf", &part, &count));
    assert_false(store_split_part("-00001-of-00003.gguf", &part, &count));
}

static void test_index_recovery(void **state) {
    (void)state;
    store_index ix;
    size_t dropped;
    kite_error e = {0};
    const char *good = "{\"version\":1,\"models\":[{\"name\":\"b/c\",\"path\":\"f.gguf\",\"size\":3,\"files\":[{\"path\":\"f.gguf\",\"size\":3,\"sha256\":\"\"}]},"
                       "{\"name\":\"a/x\",\"path\":\"../f.gguf\",\"size\":3,\"files\":[{\"path\":\"f.gguf\",\"size\":3}]},"
                       "{\"name\":\"a/y\",\"path\":\"f.gguf\",\"size\":4,\"files\":[{\"path\":\"f.gguf\",\"size\":3}]},"
                       "{\"name\":\"a/z\",\"path\":\"f.gguf\",\"size\":3,\"files\":[{\"path\":\"f.gguf\",\"size\":3,\"sha256\":\"XYZ\"}]},"
                       "{\"name\":\"b/c\",\"path\":\"f.gguf\",\"size\":3,\"files\":[{\"path\":\"f.gguf\",\"size\":3}]},"
                       "{\"name\":\"a/a\",\"path\":\".\",\"size\":3,\"files\":[{\"path\":\"config.json\",\"size\":3}]}, 7]}";
    assert_int_equal(store_index_parse(good, strlen(good), &ix, &dropped, &e), KITE_OK);
    assert_int_equal(ix.n, 2);      /* b/c and a/a; the rest are bad or duplicated */
    assert_int_equal(dropped, 5);
    assert_string_equal(ix.entries[0].name, "a/a"); /* sorted */
    char *text = store_index_dump(&ix);
    assert_non_null(text);
    store_index again;
    assert_int_equal(store_index_parse(text, strlen(text), &again, &dropped, &e), KITE_OK);
    assert_int_equal(again.n, 2);
    assert_int_equal(dropped, 0);
    free(text);
    store_index_clear(&again);
    store_index_clear(&ix);
    const char *truncated = "{\"version\":1,\"models\":[{\"name\":\"b/c\",\"pa";
    assert_int_equal(store_index_parse(truncated, strlen(truncated), &ix, &dropped, &e), KITE_ERR_FORMAT);
    assert_non_null(strstr(e.msg, "line 1, column"));
    assert_int_equal(store_index_parse("[]", 2, &ix, &dropped, &e), KITE_ERR_FORMAT);
}

static void test_choose(void **state) {
    (void)state;
    hub_file files[] = {
        {"README.md", 10, ""},
        {"m-Q2_K.gguf", 300, "a"},
        {"m-Q4_K_M.gguf", 500, "b"},
        {"m-Q5_K_M.gguf", 560, "c"},
        {"m-F16-00001-of-00002.gguf", 600, "d"},
        {"m-F16-00002-of-00002.gguf", 600, "e"},
        {"m-Q8_0-00001-of-00002.gguf", 400, "f"}, /* an incomplete set is never chosen */
        {"mmproj-F16.gguf", 100, "g"},
    };
    hub_listing l = {files, sizeof files / sizeof *files, ""};
    size_t pick[16], n;
    char model[256], reason[512];
    kite_error e = {0};
    store_ref r;
    store_parse_name("u/m", &r, &e);
    /* 60% of 2000 = 1200: the F16 set (1200) does not fit (strictly under); Q5_K_M is largest, but Q4_K_M
     * is within 15% of it */
    assert_int_equal(hub_choose(&r, &l, 2000, pick, &n, model, sizeof model, reason, sizeof reason, &e), KITE_OK);
    assert_string_equal(model, "m-Q4_K_M.gguf");
    /* 60% of 3000 = 1800: the F16 split set, both parts in order */
    assert_int_equal(hub_choose(&r, &l, 3000, pick, &n, model, sizeof model, reason, sizeof reason, &e), KITE_OK);
    assert_int_equal(n, 2);
    assert_string_equal(model, "m-F16-00001-of-00002.gguf");
    assert_string_equal(files[pick[1]].path, "m-F16-00002-of-00002.gguf");
    /* 60% of 600 = 360: only Q2_K */
    assert_int_equal(hub_choose(&r, &l, 600, pick, &n, model, sizeof model, reason, sizeof reason, &e), KITE_OK);
    assert_string_equal(model, "m-Q2_K.gguf");
    assert_int_equal(hub_choose(&r, &l, 100, pick, &n, model, sizeof model, reason, sizeof reason, &e), KITE_ERR_UNSUPPORTED);
    store_parse_name("u/m:f16", &r, &e);
    assert_int_equal(hub_choose(&r, &l, 100, pick, &n, model, sizeof model, reason, sizeof reason, &e), KITE_OK);
    assert_int_equal(n, 2);
    store_parse_name("u/m/m-F16-00002-of-00002.gguf", &r, &e);
    assert_int_equal(hub_choose(&r, &l, 100, pick, &n, model, sizeof model, reason, sizeof reason, &e), KITE_OK);
    assert_int_equal(n, 2);
    assert_string_equal(model, "m-F16-00001-of-00002.gguf");
    store_parse_name("u/m:Q3_K", &r, &e);
    assert_int_equal(hub_choose(&r, &l, 100, pick, &n, model, sizeof model, reason, sizeof reason, &e), KITE_ERR_NOT_FOUND);
    store_parse_name("u/m/nope.gguf", &r, &e);
    assert_int_equal(hub_choose(&r, &l, 100, pick, &n, model, sizeof model, reason, sizeof reason, &e), KITE_ERR_NOT_FOUND);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sha256_vectors), cmocka_unit_test(test_names), cmocka_unit_test(test_quant_and_split),
        cmocka_unit_test(test_index_recovery), cmocka_unit_test(test_choose),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
