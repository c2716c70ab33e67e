/* kite's GGUF tokenizers against llama.cpp itself (node-llama-cpp 3.21.1, through llamacpp_tokenize.mjs):
 * Llama-3 ("gpt2", pre "llama-bpe") and Qwen ("gpt2", pre "qwen2") vocabularies written as GGUF from the
 * shared tokenizer.json files, and stories260K.gguf ("llama" SPM). Several thousand texts (random mixes of
 * words, whitespace runs, digits, punctuation, contractions, many scripts, emoji, special-token spellings,
 * and edge cases such as U+0085, U+017F after an apostrophe, combining marks, control characters) must
 * give the same ids with parse_special off and on. Fails when node or node-llama-cpp is missing: CI installs them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <unistd.h>

#include "io/mmap.h"
#include "tok_gguf_writer.h"
#include "tok_test_util.h"

static void compare(const char *gguf, const char *ids_path, json_t *strings) {
    kite_error e = {0};
    kite_mapped_file f;
    if (kite_map_file(&f, gguf, &e)) fail_msg("%s", e.msg);
    kite_gguf *g = NULL;
    if (kite_gguf_open(&g, f.data, f.size, &e)) fail_msg("%s", e.msg);
    kite_tokenizer *t = NULL;
    if (kite_tokenizer_from_gguf(&t, g, &e)) fail_msg("%s", e.msg);
    kite_gguf_free(g);
    kite_unmap_file(&f);
    json_error_t jerr;
    json_t *ref = json_load_file(ids_path, 0, &jerr);
    if (!ref) fail_msg("%s: %s", ids_path, jerr.text);
    size_t mismatches = 0, total = 0;
    for (int special = 0; special < 2; special++) {
        json_t *all = json_object_get(ref, special ? "special" : "plain");
        assert_int_equal(json_array_size(all), json_array_size(strings));
        for (size_t i = 0; i < json_array_size(strings); i++) {
            json_t *s = json_array_get(strings, i), *want = json_array_get(all, i);
            int32_t *ids;
            size_t n;
            assert_int_equal(kite_tokenizer_encode(t, json_string_value(s), json_string_length(s), false, special, &ids, &n, &e),
                             KITE_OK);
            bool same = n == json_array_size(want);
            for (size_t k = 0; same && k < n; k++) same = ids[k] == json_integer_value(json_array_get(want, k));
            if (!same && mismatches++ < 5) {
                char *shown = json_dumps(s, JSON_ENCODE_ANY | JSON_ENSURE_ASCII);
                fprintf(stderr, "%s parse_special=%d: %s\n  kite:", gguf, special, shown);
                for (size_t k = 0; k < n; k++) fprintf(stderr, " %d", ids[k]);
                fprintf(stderr, "\n  llama.cpp:");
                for (size_t k = 0; k < json_array_size(want); k++)
                    fprintf(stderr, " %lld", (long long)json_integer_value(json_array_get(want, k)));
                fprintf(stderr, "\n");
                free(shown);
            }
            total++;
            free(ids);
        }
    }
    fprintf(stderr, "%s: %zu texts, %zu differ from llama.cpp\n", gguf, total, mismatches);
    assert_int_equal(mismatches, 0);
    /* the same end-of-generation set */
    json_t *eog = json_object_get(ref, "eog");
    if (json_is_array(eog)) {
        size_t k = 0, n_eog = 0;
        for (int32_t id = 0; id < kite_tokenizer_n_vocab(t); id++) {
            bool want = k < json_array_size(eog) && json_integer_value(json_array_get(eog, k)) == id;
            if (want) k++;
            n_eog += kite_tokenizer_is_eog(t, id);
            if (kite_tokenizer_is_eog(t, id) != want) fail_msg("%s: token %d is%s EOG in llama.cpp", gguf, id, want ? "" : " not");
        }
        assert_int_equal(k, json_array_size(eog));
        fprintf(stderr, "%s: %zu EOG tokens, as in llama.cpp\n", gguf, n_eog);
    }
    json_decref(ref);
    kite_tokenizer_free(t);
}

static void test_gguf_tokenizers_match_llama_cpp(void **state) {
    (void)state;
    const char *src = getenv("KITE_SOURCE_DIR");
    /* llama.cpp is the reference here: without it the test fails (CI installs it). */
    if (!src || system("node --version > /dev/null 2>&1") != 0)
        fail_msg("node or KITE_SOURCE_DIR is missing: install node and run npm ci in tests/oracle");
    char dir[128];
    snprintf(dir, sizeof dir, "/tmp/kite_tok_llamacpp_%d", (int)getpid());
    char path[8][256];
    snprintf(path[0], sizeof path[0], "%s/llama-bpe.gguf", dir);
    snprintf(path[1], sizeof path[1], "%s/qwen2.gguf", dir);
    snprintf(path[2], sizeof path[2], "%s/texts.json", dir);
    snprintf(path[3], sizeof path[3], "%s/request.json", dir);
    snprintf(path[4], sizeof path[4], "%s/llama-bpe.ids.json", dir);
    snprintf(path[5], sizeof path[5], "%s/qwen2.ids.json", dir);
    snprintf(path[6], sizeof path[6], "%s/spm.ids.json", dir);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
    assert_int_equal(system(cmd), 0);
    write_gguf_from_json("models/tokenizers/llama3/tokenizer.json", "models/tokenizers/llama3/tokenizer_config.json",
                         "llama-bpe", path[0], true);
    write_gguf_from_json("models/tokenizers/qwen3/tokenizer.json", "models/tokenizers/qwen3/tokenizer_config.json",
                         "qwen2", path[1], true);
    const char *spm = kite_test_data("models/tinystories-tok512/stories260K.gguf");

    static const char *const specials[] = {"<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|im_start|>",
                                           "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>", "<|",
                                           "<s>", "</s>", "<unk>"};
    static const char *const edge[] = {
        "it'\xC5\xBF ok", "x'\xE2\x84\xAA y", "a\xC2\x85" "b \xC2\x85\xC2\x85 c", "e\xCC\x81\xCC\x81 ", "\x01\x02 \x7F",
        "   \t\t\n\n  \r\r\n x", "\xE2\x80\xA8\xE2\x80\xA9 z", "\xEF\xBB\xBF" "bom", "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9",
        "\xE0\xA4\xA8\xE0\xA4\xAE\xE0\xA4\xB8\xE0\xA5\x8D\xE0\xA4\xA4\xE0\xA5\x87", "1234567890123",
        "\xD9\xA1\xD9\xA2\xD9\xA3 \xE2\x85\xAB", "A\xC2\xA0" "B\xE2\x80\x83" "C", "'s's'S'Ll'VE", "\xF3\xA0\x80\x81 tag",
        "\xEF\xBF\xBD\xEF\xBF\xBF", "<|im_start|><|im_start|>user<|im_end|>", " <s> </s>  <unk>", "\xE2\x96\x81\xE2\x96\x81x",
        "", " ", "\n", "\t\n \t",
    };
    json_t *strings = json_array();
    uint64_t seed = 0xA11CE;
    char text[600];
    for (int i = 0; i < 2500; i++) {
        size_t len = tt_random_text(&seed, text, sizeof text, specials, sizeof specials / sizeof specials[0]);
        json_array_append_new(strings, json_stringn(text, len));
    }
    for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++) json_array_append_new(strings, json_string(edge[i]));
    assert_int_equal(json_dump_file(strings, path[2], 0), 0);
    FILE *req = fopen(path[3], "w");
    assert_non_null(req);
    fprintf(req, "{\"strings\": \"%s\", \"jobs\": [{\"model\": \"%s\", \"out\": \"%s\", \"n_vocab\": 128256},"
                 " {\"model\": \"%s\", \"out\": \"%s\", \"n_vocab\": 151669}, {\"model\": \"%s\", \"out\": \"%s\", \"n_vocab\": 512}]}\n",
            path[2], path[0], path[4], path[1], path[5], spm, path[6]);
    fclose(req);
    snprintf(cmd, sizeof cmd, "node %s/tests/tokenize/llamacpp_tokenize.mjs %s", src, path[3]);
    double t0 = tt_now();
    int status = system(cmd);
    fprintf(stderr, "llama.cpp tokenized in %.1f s (status %d)\n", tt_now() - t0, status);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 3)
        fail_msg("node-llama-cpp is not installed: run npm ci in tests/oracle (scripts/test.sh does)");
    assert_int_equal(status, 0);
    compare(path[0], path[4], strings);
    compare(path[1], path[5], strings);
    compare(spm, path[6], strings);
    json_decref(strings);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gguf_tokenizers_match_llama_cpp),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
