/* JSON Schema to GBNF, checked against ajv (tests/grammar_compile/ajv_check.mjs, ajv 8 + ajv-formats).
 *
 * Soundness: for every schema of the corpus (the files in schemas/) and every applicable case of the
 * JSON-Schema-Test-Suite (npm json-schema-test-suite, draft 4 files whose keywords mean the same in
 * draft 7), random sentences of the compiled grammar must all validate. The suite's instances that the
 * grammar accepts must validate too (its invalid instances are adversarial: each one the grammar
 * accepted would be a soundness bug).
 * Completeness: each corpus file's "valid" texts must be accepted by the grammar and its "invalid" ones
 * rejected; ajv checks in the same run that the fixture itself is right (valid ones valid, invalid ones
 * invalid), so no expectation here rests on the compiler's own output.
 * Then malformed and unsatisfiable schemas, with the message fragment (JSON pointer) each must name. */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "grammar/compile.h"
#include "gwalk.h"

enum { SAMPLES_PER_SCHEMA = 200, SAMPLES_PER_SUITE_SCHEMA = 40, SOFT_MAX_BYTES = 400 };

static const char *source_dir(void) {
    const char *d = getenv("KITE_SOURCE_DIR");
    return d ? d : ".";
}

static int compare_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static char *dump_compact(json_t *v) { return json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_PRESERVE_ORDER); }

/* Random sentences of w appended to list (as JSON strings of the text). Returns how many were made. */
static size_t add_samples(gwalk *w, uint64_t seed, size_t count, json_t *list, const char *name) {
    uint64_t rng = seed;
    gwalk_buf buf = {0};
    size_t made = 0;
    for (size_t i = 0; i < count; i++) {
        if (!gwalk_sample(w, &rng, SOFT_MAX_BYTES, &buf)) {
            fail_msg("%s: random walk %zu found no way to finish", name, i);
        }
        json_t *s = json_stringn(buf.p, buf.n);
        if (!s) fail_msg("%s: a sample is not valid UTF-8: %.200s", name, buf.p);
        json_array_append_new(list, s);
        made++;
    }
    free(buf.p);
    return made;
}

static size_t total_samples, total_fixture_valid, total_fixture_invalid;

static void test_corpus(void **state) {
    (void)state;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/tests/grammar_compile/schemas", source_dir());
    DIR *d = opendir(dir);
    assert_non_null(d);
    char *names[512];
    size_t n_names = 0;
    struct dirent *ent;
    while ((ent = readdir(d)) && n_names < 512) {
        size_t len = strlen(ent->d_name);
        if (len > 5 && !strcmp(ent->d_name + len - 5, ".json")) names[n_names++] = strdup(ent->d_name);
    }
    closedir(d);
    qsort(names, n_names, sizeof *names, compare_names);
    assert_true(n_names >= 30);
    json_t *cases = json_array();
    for (size_t i = 0; i < n_names; i++) {
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        json_error_t jerr;
        json_t *fixture = json_load_file(path, JSON_PRESERVE_ORDER, &jerr);
        if (!fixture) fail_msg("%s: %s", names[i], jerr.text);
        json_t *schema = json_object_get(fixture, "schema");
        assert_non_null(schema);
        char *text = dump_compact(schema);
        char *gbnf = NULL;
        size_t gbnf_len = 0;
        kite_error e = {0};
        if (kite_json_schema_to_gbnf(text, strlen(text), &gbnf, &gbnf_len, &e)) fail_msg("%s: %s", names[i], e.msg);
        gwalk w;
        if (!gwalk_open(&w, gbnf, &e)) fail_msg("%s: the GBNF does not parse: %s\n%s", names[i], e.msg, gbnf);
        json_t *valid = json_array(), *invalid = json_array();
        size_t k;
        json_t *t;
        json_array_foreach(json_object_get(fixture, "valid"), k, t) {
            const char *s = json_string_value(t);
            assert_non_null(s);
            int acc = gwalk_accepts(&w, s, json_string_length(t));
            if (acc != 1) fail_msg("%s: the grammar rejects valid instance %zu: %s\n%s", names[i], k, s, gbnf);
            json_array_append(valid, t);
            total_fixture_valid++;
        }
        json_array_foreach(json_object_get(fixture, "invalid"), k, t) {
            const char *s = json_string_value(t);
            assert_non_null(s);
            int acc = gwalk_accepts(&w, s, json_string_length(t));
            if (acc != 0) fail_msg("%s: the grammar accepts invalid instance %zu: %s\n%s", names[i], k, s, gbnf);
            json_array_append(invalid, t);
            total_fixture_invalid++;
        }
        total_samples += add_samples(&w, 0x5EED0000u + i, SAMPLES_PER_SCHEMA, valid, names[i]);
        json_array_append_new(cases, json_pack("{s:s, s:O, s:o, s:o}", "name", names[i], "schema", schema, "must_be_valid", valid,
                                               "must_be_invalid", invalid));
        gwalk_close(&w);
        free(gbnf);
        free(text);
        json_decref(fixture);
        free(names[i]);
    }
    char out[] = "/tmp/kite_schema_cases_XXXXXX";
    int fd = mkstemp(out);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(json_dump_file(cases, out, JSON_COMPACT), 0);
    json_decref(cases);
    char script[4096];
    snprintf(script, sizeof script, "%s/tests/grammar_compile/ajv_check.mjs", source_dir());
    int status = gwalk_run_node(script, out);
    printf("corpus: %zu schemas, %zu random samples, %zu valid and %zu invalid fixture instances\n", n_names, total_samples,
           total_fixture_valid, total_fixture_invalid);
    if (!getenv("KITE_GRAMMAR_KEEP")) unlink(out); /* KITE_GRAMMAR_KEEP=1 keeps the cases for a look */
    else printf("kept %s\n", out);
    assert_int_equal(status, 0);
}

/* The JSON-Schema-Test-Suite's draft-4 files whose keywords mean the same under ajv's draft 7. oneOf
 * schemas whose branches may overlap are rejected (they are skipped here, test_rejected covers the
 * message); the disjoint ones compile and their samples must validate under oneOf. */
static const char *const SUITE_FILES[] = {"type", "enum", "properties", "required", "additionalProperties", "items",
                                          "additionalItems", "minItems", "maxItems", "minLength", "maxLength",
                                          "pattern", "minimum", "maximum", "anyOf", "oneOf", "allOf", "ref",
                                          "definitions", "default"};

static void test_test_suite(void **state) {
    (void)state;
    json_t *cases = json_array();
    size_t n_groups = 0, n_compiled = 0, n_valid = 0, n_valid_accepted = 0, n_invalid = 0, n_invalid_rejected = 0, n_samples = 0;
    for (size_t f = 0; f < sizeof SUITE_FILES / sizeof *SUITE_FILES; f++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/tests/oracle/node_modules/json-schema-test-suite/tests/draft4/%s.json", source_dir(), SUITE_FILES[f]);
        json_error_t jerr;
        json_t *groups = json_load_file(path, JSON_PRESERVE_ORDER, &jerr);
        if (!groups) fail_msg("%s: %s (run `npm ci` in tests/oracle)", path, jerr.text);
        size_t g;
        json_t *group;
        json_array_foreach(groups, g, group) {
            n_groups++;
            json_t *schema = json_object_get(group, "schema");
            char *text = dump_compact(schema);
            char *gbnf = NULL;
            kite_error e = {0};
            int rc = kite_json_schema_to_gbnf(text, strlen(text), &gbnf, NULL, &e);
            free(text);
            if (rc) continue; /* unsupported or unsatisfiable here: the negative tests cover the messages */
            gwalk w;
            if (!gwalk_open(&w, gbnf, &e)) {
                /* recursion without a base case is the parser's to reject; anything else is a bug */
                if (!strstr(e.msg, "finish")) fail_msg("%s #%zu: the GBNF does not parse: %s\n%s", SUITE_FILES[f], g, e.msg, gbnf);
                free(gbnf);
                continue;
            }
            n_compiled++;
            json_t *accepted = json_array();
            size_t k;
            json_t *test;
            json_array_foreach(json_object_get(group, "tests"), k, test) {
                char *data = dump_compact(json_object_get(test, "data"));
                int acc = gwalk_accepts(&w, data, strlen(data));
                assert_true(acc >= 0);
                bool want = json_is_true(json_object_get(test, "valid"));
                if (want) n_valid++, n_valid_accepted += acc == 1;
                else n_invalid++, n_invalid_rejected += acc == 0;
                if (acc == 1) json_array_append_new(accepted, json_string(data));
                free(data);
            }
            char name[256];
            snprintf(name, sizeof name, "suite %s #%zu %s", SUITE_FILES[f], g, json_string_value(json_object_get(group, "description")));
            n_samples += add_samples(&w, 0xA11CE000u + f * 100 + g, SAMPLES_PER_SUITE_SCHEMA, accepted, name);
            json_array_append_new(cases, json_pack("{s:s, s:O, s:o}", "name", name, "schema", schema, "must_be_valid", accepted));
            gwalk_close(&w);
            free(gbnf);
        }
        json_decref(groups);
    }
    char out[] = "/tmp/kite_suite_cases_XXXXXX";
    int fd = mkstemp(out);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(json_dump_file(cases, out, JSON_COMPACT), 0);
    json_decref(cases);
    char script[4096];
    snprintf(script, sizeof script, "%s/tests/grammar_compile/ajv_check.mjs", source_dir());
    int status = gwalk_run_node(script, out);
    printf("test suite: %zu schemas, %zu compiled; valid instances accepted %zu/%zu, invalid rejected %zu/%zu; %zu random samples\n",
           n_groups, n_compiled, n_valid_accepted, n_valid, n_invalid_rejected, n_invalid, n_samples);
    unlink(out);
    assert_int_equal(status, 0);
    assert_true(n_compiled >= 40);
}

/* Each schema must be refused, with a message holding the fragment (usually the JSON pointer). */
static void test_rejected(void **state) {
    (void)state;
    static const struct {
        const char *schema, *fragment;
    } cases[] = {
        {"{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}", "/minItems"},
        {"{\"type\":\"integer\",\"minimum\":10,\"maximum\":5}", "/minimum"},
        {"{\"type\":\"integer\",\"minimum\":1.5,\"maximum\":1.7}", "no integer"},
        {"{\"type\":\"number\",\"exclusiveMinimum\":1,\"maximum\":1}", "/exclusiveMinimum"},
        {"{\"properties\":{\"a\":{\"type\":\"string\",\"minLength\":5,\"maxLength\":2}}}", "/properties/a/minLength"},
        {"{\"enum\":[]}", "/enum"},
        {"{\"type\":\"string\",\"enum\":[1,2]}", "/enum"},
        {"{\"type\":[]}", "/type"},
        {"{\"type\":\"strnig\"}", "unknown type"},
        {"{\"properties\":{\"x\":{\"not\":{}}}}", "/properties/x/not"},
        {"{\"type\":\"array\",\"uniqueItems\":true}", "/uniqueItems"},
        {"{\"type\":\"object\",\"required\":[\"a\"],\"additionalProperties\":false}", "/required"},
        {"{\"type\":\"object\",\"properties\":{\"a\":false},\"required\":[\"a\"]}", "/properties/a"},
        {"{\"$ref\":\"#/$defs/missing\"}", "/$ref"},
        {"{\"$ref\":\"http://example.com/s.json\"}", "only local references"},
        {"{\"allOf\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}", "no type in common"},
        {"{\"type\":\"string\",\"pattern\":\"(a\"}", "/pattern"},
        {"{\"type\":\"string\",\"pattern\":\"(?=a)b\"}", "lookaround"},
        {"{\"type\":\"string\",\"format\":\"hostname-ish\"}", "/format"},
        {"{\"type\":\"array\",\"items\":[{\"type\":\"string\"}],\"additionalItems\":false,\"minItems\":2}", "/minItems"},
        {"{\"anyOf\":[]}", "/anyOf"},
        {"{\"anyOf\":[false,false]}", "/anyOf"},
        /* oneOf whose branches may both match: a grammar cannot say "only one" */
        {"{\"oneOf\":[{\"type\":\"integer\"},{\"minimum\":2}]}", "oneOf branches 0 and 1 may both match"},
        {"{\"oneOf\":[{\"type\":\"number\"},{\"type\":\"integer\"}]}", "/oneOf"},
        {"{\"oneOf\":[{\"type\":\"string\"},false,{\"type\":\"null\"},{}]}", "oneOf branches 0 and 3"},
        {"{\"type\":\"object\",\"oneOf\":[{\"properties\":{\"a\":{\"type\":\"string\"}}},{\"properties\":{\"b\":{}}}]}",
         "oneOf branches 0 and 1"},
        {"{\"oneOf\":[{\"properties\":{\"k\":{\"const\":1}},\"required\":[\"k\"]},{\"properties\":{\"k\":{\"const\":1.0}},"
         "\"required\":[\"k\"]}]}",
         "provably disjoint"},
        {"false", "matches no value"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}", "invalid JSON at 1:"},
        {"{\"type\":\"string\",\"minLength\":-1}", "/minLength"},
        {"{\"type\":\"number\",\"multipleOf\":2}", "/multipleOf"},
        {"{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/a\",\"type\":\"object\"}},\"$ref\":\"#/$defs/a\"}", "levels deep"},
        {"{\"items\":{\"items\":{\"items\":{\"items\":{\"items\":{\"items\":{\"items\":{\"items\":{\"items\":{\"items\":{"
         "\"items\":{\"items\":{\"items\":{\"items\":{\"items\":{\"items\":{\"items\":{\"items\":{\"items\":{\"items\":{"
         "\"items\":{\"items\":{\"items\":{\"items\":{\"items\":{\"items\":{\"items\":{\"items\":{\"items\":{\"items\":{"
         "\"items\":{\"items\":{\"items\":{\"items\":{\"items\":{\"items\":{\"items\":{\"items\":{\"items\":{\"items\":{"
         "\"items\":{\"items\":{\"items\":{\"items\":{\"items\":{\"items\":{\"items\":{\"items\":{\"items\":{\"items\":{"
         "\"items\":{\"items\":{\"items\":{\"items\":{\"items\":{\"items\":{\"items\":{\"items\":{\"items\":{\"items\":{"
         "\"items\":{\"items\":{\"items\":{\"items\":{\"items\":{}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}",
         "levels deep"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *gbnf = NULL;
        kite_error e = {0};
        int rc = kite_json_schema_to_gbnf(cases[i].schema, strlen(cases[i].schema), &gbnf, NULL, &e);
        if (rc == 0) fail_msg("case %zu was accepted: %s\n%s", i, cases[i].schema, gbnf);
        assert_null(gbnf);
        if (!strstr(e.msg, cases[i].fragment)) fail_msg("case %zu: message \"%s\" lacks \"%s\"", i, e.msg, cases[i].fragment);
        assert_null(strchr(e.msg, '\n'));
    }
}

/* Recursion through $ref with a base case compiles and parses; without one, the GBNF parser refuses it. */
static void test_recursion_base_case(void **state) {
    (void)state;
    const char *finite = "{\"$defs\":{\"t\":{\"type\":\"object\",\"properties\":{\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/t\"}}}}},"
                         "\"$ref\":\"#/$defs/t\"}";
    const char *infinite = "{\"$defs\":{\"t\":{\"type\":\"object\",\"properties\":{\"kid\":{\"$ref\":\"#/$defs/t\"}},\"required\":[\"kid\"]}},"
                           "\"$ref\":\"#/$defs/t\"}";
    char *gbnf = NULL;
    kite_error e = {0};
    assert_int_equal(kite_json_schema_to_gbnf(finite, strlen(finite), &gbnf, NULL, &e), 0);
    gwalk w;
    assert_true(gwalk_open(&w, gbnf, &e));
    const char *doc = "{\"kids\":[{},{\"kids\":[{\"kids\":[]}]}]}";
    assert_int_equal(gwalk_accepts(&w, doc, strlen(doc)), 1);
    gwalk_close(&w);
    free(gbnf);
    assert_int_equal(kite_json_schema_to_gbnf(infinite, strlen(infinite), &gbnf, NULL, &e), 0);
    kite_gbnf *g = NULL;
    assert_int_not_equal(kite_gbnf_parse(gbnf, strlen(gbnf), NULL, &g, &e), 0);
    assert_null(g);
    free(gbnf);
}

/* The json_object grammar: objects of any JSON inside, nothing else at the top. */
static void test_json_object(void **state) {
    (void)state;
    gwalk w;
    kite_error e = {0};
    assert_true(gwalk_open(&w, kite_json_object_gbnf(), &e));
    const char *yes[] = {"{}", "{\"a\":1}", "{ \"a\" : [1, 2.5e-3, \"x\\n\\u00e9\", true, null, {\"b\": {}}] }", "{\n  \"k\": \"v\"\n}"};
    const char *no[] = {"[]", "1", "\"s\"", "{", "{\"a\":}", "{\"a\":1,}", "{'a':1}", "{\"a\":01}", "{\"a\":\"\\ud800\"}", " {}"};
    for (size_t i = 0; i < sizeof yes / sizeof *yes; i++) assert_int_equal(gwalk_accepts(&w, yes[i], strlen(yes[i])), 1);
    for (size_t i = 0; i < sizeof no / sizeof *no; i++) assert_int_equal(gwalk_accepts(&w, no[i], strlen(no[i])), 0);
    /* and what it generates is JSON objects, per ajv against {"type":"object"} */
    json_t *samples = json_array();
    size_t n = add_samples(&w, 77, 300, samples, "json_object");
    json_t *cases = json_pack("[{s:s, s:{s:s}, s:o}]", "name", "json_object", "schema", "type", "object", "must_be_valid", samples);
    char out[] = "/tmp/kite_json_object_XXXXXX";
    int fd = mkstemp(out);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(json_dump_file(cases, out, JSON_COMPACT), 0);
    json_decref(cases);
    char script[4096];
    snprintf(script, sizeof script, "%s/tests/grammar_compile/ajv_check.mjs", source_dir());
    int status = gwalk_run_node(script, out);
    unlink(out);
    assert_int_equal(status, 0);
    assert_int_equal(n, 300);
    gwalk_close(&w);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_corpus),
        cmocka_unit_test(test_test_suite),
        cmocka_unit_test(test_rejected),
        cmocka_unit_test(test_recursion_base_case),
        cmocka_unit_test(test_json_object),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
