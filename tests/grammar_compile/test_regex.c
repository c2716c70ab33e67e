/* Regular expressions to GBNF, checked against node's RegExp (regex_check.mjs: u flag, `^(?:p)$`).
 *
 * For each pattern the grammar's answer on many strings must equal RegExp's: hand-written probes,
 * random sentences of the grammar (soundness: RegExp must match every one), and mutations of those
 * (a code point deleted, inserted, replaced or a piece repeated: mostly near misses, which is where
 * a wrong grammar shows). Then the schema "pattern" form (an unanchored search inside a JSON string),
 * and malformed or unsupported patterns with the byte offset each error must name. */
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

enum { SAMPLES = 60, MUTATIONS = 120, SOFT_MAX_BYTES = 80 };

static const char *source_dir(void) {
    const char *d = getenv("KITE_SOURCE_DIR");
    return d ? d : ".";
}

typedef struct regex_case {
    const char *pattern;
    const char *probes[12]; /* NULL-terminated */
} regex_case;

static const regex_case CASES[] = {
    {"abc", {"abc", "ab", "abcd", "", "ABC"}},
    {"a|b|", {"", "a", "b", "ab", "c"}},
    {"^[a-z]+\\d{2,3}$", {"ab12", "a123", "a1", "a1234", "12", "Ab12"}},
    {"(?:ab|cd)*x?", {"", "ab", "abcdx", "x", "xx", "abc"}},
    {"[^\"\\\\]+", {"abc", "a\"b", "\\", "é😀", ""}},
    {".", {"a", "\n", "\r", "\xe2\x80\xa8", "é", "😀", "ab", ""}},
    {"\\s\\S\\w\\W\\d\\D", {" a_ 1x", "\ta0-9b", "  a 1x", "\xc2\xa0" "b_!5z"}},
    {"(a|)+b", {"b", "ab", "aab", "a", ""}},
    {"a{3}", {"aaa", "aa", "aaaa"}},
    {"a{2,}b{0,2}", {"aa", "aaab", "aabbb", "a", "aabb"}},
    {"(?<year>\\d{4})-(?<m>0[1-9]|1[0-2])", {"2024-01", "2024-12", "2024-13", "2024-00", "24-01"}},
    {"[a-cx-z0-2_\\-]*", {"", "ax0_-", "d", "abc-"}},
    {"[\\d.]+(e[+-]?\\d+)?", {"1.5", "1e5", "1e+5", "e5", "1.e-3", ""}},
    {"colou?r|gr[ae]y", {"color", "colour", "gray", "grey", "graey", "colr"}},
    {"\\u00e9\\u{1F600}\\x41\\n\\t", {"é😀A\n\t", "é😀a\n\t"}},
    {"[\\u0400-\\u04FF]+", {"привет", "hello", "п"}},
    {"(?:[01]\\d|2[0-3]):[0-5]\\d", {"00:00", "23:59", "24:00", "9:30", "12:60"}},
    {"\\.\\*\\+\\?\\(\\)\\[\\]\\{\\}\\|\\^\\$\\/\\\\", {".*+?()[]{}|^$/\\", "x"}},
    {"[^a-z]?", {"", "A", "a", "AB"}},
    {"((a|b)c)*?d+?", {"d", "acbcd", "acd dd", "cd"}},
    {"[\\b]\\cJ\\0", {"\b\n", "\b\n\0"}},
    {"^$", {"", "a"}},
    {"x*|^y+$", {"", "xx", "yy", "xy"}},
    {"[😀-😂]{1,2}", {"😀", "😁😂", "😃", ""}},
    {"(a(b(c(d(e)?)?)?)?)?", {"", "a", "abcde", "abd", "abcdef"}},
};

/* Code point boundaries of s[0..n) (bytes that are not UTF-8 continuation bytes), into pos; returns count. */
static size_t boundaries(const char *s, size_t n, size_t *pos) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)s[i] & 0xC0) != 0x80) pos[k++] = i;
    pos[k] = n;
    return k;
}

/* A near miss of s: one random edit on code point boundaries, into out (valid UTF-8 stays valid). */
static void mutate(const char *s, size_t n, uint64_t *rng, const char *pattern, gwalk_buf *out) {
    static const char *const inserts[] = {"a", "b", "z", "A", "0", "9", "_", "-", ".", " ", "\n", "é", "😀", "\"", "\\", "x", "y"};
    size_t *pos = malloc((n + 2) * sizeof *pos);
    size_t k = boundaries(s, n, pos);
    out->n = 0;
    gwalk_push(out, 0);
    out->n = 0;
    unsigned op = (unsigned)(gwalk_rand(rng) % 4);
    size_t at = k ? (size_t)(gwalk_rand(rng) % (k + 1)) : 0;
    char ins[8];
    /* inserted characters come from the pattern itself half the time (likely to matter) */
    size_t plen = strlen(pattern);
    if (plen && gwalk_rand(rng) % 2) {
        ins[0] = pattern[gwalk_rand(rng) % plen];
        ins[1] = 0;
        if ((unsigned char)ins[0] >= 0x80) strcpy(ins, "q");
    } else {
        strcpy(ins, inserts[gwalk_rand(rng) % (sizeof inserts / sizeof *inserts)]);
    }
    size_t cut_from = at < k ? pos[at] : n, cut_to = at < k ? pos[at + 1] : n;
    for (size_t i = 0; i < n; i++) {
        if (i == cut_from && op == 1) { /* insert before */
            for (const char *c = ins; *c; c++) gwalk_push(out, (uint8_t)*c);
        }
        if (i >= cut_from && i < cut_to && (op == 0 || op == 2)) { /* delete or replace */
            if (op == 2 && i == cut_from)
                for (const char *c = ins; *c; c++) gwalk_push(out, (uint8_t)*c);
            continue;
        }
        gwalk_push(out, (uint8_t)s[i]);
        if (op == 3 && i + 1 == cut_to) /* repeat the code point */
            for (size_t j = cut_from; j < cut_to; j++) gwalk_push(out, (uint8_t)s[j]);
    }
    if (cut_from == n && (op == 1 || op == 2))
        for (const char *c = ins; *c; c++) gwalk_push(out, (uint8_t)*c);
    free(pos);
}

static void add_case(json_t *list, gwalk *w, const char *s, size_t n) {
    int acc = gwalk_accepts(w, s, n);
    assert_true(acc >= 0);
    json_t *str = json_stringn(s, n);
    assert_non_null(str);
    json_array_append_new(list, json_pack("{s:o, s:b}", "s", str, "accepted", acc == 1));
}

static void test_against_regexp(void **state) {
    (void)state;
    json_t *items = json_array();
    size_t n_strings = 0, n_samples = 0;
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++) {
        const regex_case *rc = &CASES[i];
        char *gbnf = NULL;
        kite_error e = {0};
        if (kite_regex_to_gbnf(rc->pattern, strlen(rc->pattern), &gbnf, NULL, &e)) fail_msg("%s: %s", rc->pattern, e.msg);
        gwalk w;
        if (!gwalk_open(&w, gbnf, &e)) fail_msg("%s: the GBNF does not parse: %s\n%s", rc->pattern, e.msg, gbnf);
        json_t *list = json_array();
        for (size_t k = 0; k < 12 && rc->probes[k]; k++) add_case(list, &w, rc->probes[k], strlen(rc->probes[k]));
        uint64_t rng = 0xC0FFEE00u + i;
        gwalk_buf sample = {0}, mutant = {0};
        for (size_t k = 0; k < SAMPLES; k++) {
            if (!gwalk_sample(&w, &rng, SOFT_MAX_BYTES, &sample)) fail_msg("%s: a random walk found no way to finish", rc->pattern);
            add_case(list, &w, sample.p, sample.n);
            n_samples++;
            for (size_t m = 0; m < MUTATIONS / SAMPLES; m++) {
                mutate(sample.p, sample.n, &rng, rc->pattern, &mutant);
                add_case(list, &w, mutant.p, mutant.n);
            }
        }
        free(sample.p);
        free(mutant.p);
        n_strings += json_array_size(list);
        json_array_append_new(items, json_pack("{s:s, s:o}", "pattern", rc->pattern, "cases", list));
        gwalk_close(&w);
        free(gbnf);
    }
    char out[] = "/tmp/kite_regex_cases_XXXXXX";
    int fd = mkstemp(out);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(json_dump_file(items, out, JSON_COMPACT), 0);
    json_decref(items);
    char script[4096];
    snprintf(script, sizeof script, "%s/tests/grammar_compile/regex_check.mjs", source_dir());
    int status = gwalk_run_node(script, out);
    printf("regex: %zu strings compared with RegExp (%zu random samples)\n", n_strings, n_samples);
    unlink(out);
    assert_int_equal(status, 0);
}

/* The schema form: "pattern" is a search (unanchored sides match anything) over the decoded string. */
static void test_schema_pattern(void **state) {
    (void)state;
    static const struct {
        const char *schema;
        const char *yes[6], *no[6];
    } cases[] = {
        {"{\"type\":\"string\",\"pattern\":\"ab\"}", {"\"ab\"", "\"xaby\"", "\"\\n ab \\\"\""}, {"\"a\"", "\"ba\"", "ab"}},
        {"{\"type\":\"string\",\"pattern\":\"^ab\"}", {"\"ab\"", "\"abc\""}, {"\"xab\""}},
        {"{\"type\":\"string\",\"pattern\":\"b$\"}", {"\"ab\"", "\"b\""}, {"\"ba\""}},
        {"{\"type\":\"string\",\"pattern\":\"^a\\\"\\\\\\\\$\"}", {"\"a\\\"\\\\\""}, {"\"a\\\"\\\\x\"", "\"a\"\\\\\""}},
        {"{\"type\":\"string\",\"pattern\":\"^\\\\s$\"}", {"\" \"", "\"\\n\"", "\"\\t\""}, {"\"\\\\s\"", "\"\n\""}},
        {"{\"type\":\"string\",\"pattern\":\"^x|y$\"}", {"\"xa\"", "\"ay\""}, {"\"ax\"", "\"ya\""}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *gbnf = NULL;
        kite_error e = {0};
        if (kite_json_schema_to_gbnf(cases[i].schema, strlen(cases[i].schema), &gbnf, NULL, &e)) fail_msg("%s", e.msg);
        gwalk w;
        if (!gwalk_open(&w, gbnf, &e)) fail_msg("%s\n%s", e.msg, gbnf);
        for (size_t k = 0; k < 6 && cases[i].yes[k]; k++)
            if (gwalk_accepts(&w, cases[i].yes[k], strlen(cases[i].yes[k])) != 1)
                fail_msg("case %zu rejects %s\n%s", i, cases[i].yes[k], gbnf);
        for (size_t k = 0; k < 6 && cases[i].no[k]; k++)
            if (gwalk_accepts(&w, cases[i].no[k], strlen(cases[i].no[k])) != 0)
                fail_msg("case %zu accepts %s\n%s", i, cases[i].no[k], gbnf);
        gwalk_close(&w);
        free(gbnf);
    }
}

static void test_rejected(void **state) {
    (void)state;
    static const struct {
        const char *pattern, *fragment;
    } cases[] = {
        {"(a", "unterminated group at byte 0"},
        {"a)", "unmatched ) at byte 1"},
        {"a(?=b)", "lookaround assertions are not supported at byte 1"},
        {"(?<!x)y", "lookaround assertions are not supported at byte 0"},
        {"(a)\\1", "backreferences are not supported at byte 3"},
        {"(?<n>a)\\k<n>", "backreferences are not supported at byte 7"},
        {"\\bword", "word boundaries (\\b) are not supported at byte 0"},
        {"*a", "nothing to repeat at byte 0"},
        {"a**", "nothing to repeat at byte 2"},
        {"a{2,1}", "out of order in {m,n} quantifier at byte 1"},
        {"a{1001}", "over 1000 at byte 1"},
        {"a{,3}", "at byte 1"},
        {"[z-a]", "range out of order in character class at byte 1"},
        {"[a-\\d]", "cannot end a range at byte 3"},
        {"[abc", "unterminated character class at byte 0"},
        {"a^b", "at byte 1"},
        {"a$b", "at byte 1"},
        {"(^a)", "at byte 1"},
        {"\\p{L}", "property escapes are not supported at byte 0"},
        {"\\q", "invalid escape at byte 0"},
        {"ab\\", "ends in a backslash at byte 2"},
        {"\\uD800", "lone surrogate is not supported at byte 0"},
        {"\\x4", "invalid \\x escape at byte 0"},
        {"a]", "a lone ] must be escaped at byte 1"},
        {"a}", "a lone } must be escaped at byte 1"},
        {"(?i)a", "unsupported group syntax (? at byte 0"},
        {"\\01", "octal escapes are not supported at byte 0"},
        {"[]", "matches no string"},
        {"a\xff", "invalid UTF-8 at byte 1"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *gbnf = NULL;
        kite_error e = {0};
        int rc = kite_regex_to_gbnf(cases[i].pattern, strlen(cases[i].pattern), &gbnf, NULL, &e);
        if (rc == 0) fail_msg("case %zu (%s) was accepted:\n%s", i, cases[i].pattern, gbnf);
        assert_null(gbnf);
        if (!strstr(e.msg, cases[i].fragment)) fail_msg("case %zu (%s): message \"%s\" lacks \"%s\"", i, cases[i].pattern, e.msg, cases[i].fragment);
    }
    /* nesting and size bounds: refused, not a crash */
    char deep[512];
    size_t n = 0;
    for (int i = 0; i < 150; i++) deep[n++] = '(';
    deep[n++] = 'a';
    for (int i = 0; i < 150; i++) deep[n++] = ')';
    char *gbnf = NULL;
    kite_error e = {0};
    assert_int_not_equal(kite_regex_to_gbnf(deep, n, &gbnf, NULL, &e), 0);
    assert_non_null(strstr(e.msg, "nested too deeply"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_regexp),
        cmocka_unit_test(test_schema_pattern),
        cmocka_unit_test(test_rejected),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
