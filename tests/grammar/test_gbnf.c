/* The GBNF parser and the byte-level matcher (src/grammar/grammar.h).
 *
 * Independent references: jansson decides JSON validity for a JSON grammar over a corpus of valid and
 * invalid snippets and their random mutations; utf8proc decides UTF-8 validity for `.`; PCRE2 (full and
 * partial matching) decides acceptance and viability of every prefix for random regular grammars, built
 * together with the equivalent regular expression. The rest: grammars covering llama.cpp's examples'
 * constructs, repetition bounds, accepting vs can_continue, malformed grammars with their messages and
 * positions, and the matcher's resource limits. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include "grammar/grammar.h"

/* ---- helpers ---------------------------------------------------------------------------------- */

typedef struct compiled {
    kite_gbnf *g;
    kite_gmatch *m;
} compiled;

static compiled compile_ok(const char *text) {
    compiled c = {0};
    kite_error e = {0};
    int rc = kite_gbnf_parse(text, strlen(text), NULL, &c.g, &e);
    if (rc) fail_msg("grammar did not parse: %s\n--- grammar:\n%s", e.msg, text);
    assert_int_equal(kite_gmatch_new(c.g, &c.m, &e), KITE_OK);
    return c;
}

static void compiled_free(compiled *c) {
    kite_gmatch_free(c->m);
    kite_gbnf_free(c->g);
}

/* State after feeding n bytes of s from the start state. */
static int32_t feed(kite_gmatch *m, const void *s, size_t n) {
    return kite_gmatch_step_bytes(m, kite_gmatch_start(m), s, n);
}

static bool accepts(kite_gmatch *m, const char *s) { return kite_gmatch_accepting(m, feed(m, s, strlen(s))); }

/* ---- grammars covering the constructs of llama.cpp's grammars/ folder (written for this test) --- */

static const char JSON_GRAMMAR[] =
    "# JSON (RFC 8259), any value at the top; escapes with surrogate pairs checked\n"
    "root    ::= ws value ws\n"
    "value   ::= object | array | string | number | \"true\" | \"false\" | \"null\"\n"
    "object  ::= \"{\" ws ( member ( ws \",\" ws member )* ws )? \"}\"\n"
    "member  ::= string ws \":\" ws value\n"
    "array   ::= \"[\" ws ( value ( ws \",\" ws value )* ws )? \"]\"\n"
    "string  ::= \"\\\"\" (\n"
    "              [^\"\\\\\\x00-\\x1F] |\n"
    "              \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" uescape )\n"
    "            )* \"\\\"\"\n"
    "uescape ::= [0-9a-cA-Ce-fE-F] hex{3} | [dD] [0-7] hex hex |\n"
    "            [dD] [89abAB] hex hex \"\\\\u\" [dD] [c-fC-F] hex hex   # a surrogate pair\n"
    "hex     ::= [0-9a-fA-F]\n"
    "number  ::= \"-\"? ( \"0\" | [1-9] [0-9]* ) ( \".\" [0-9]+ )? ( [eE] [-+]? [0-9]+ )?\n"
    "ws      ::= [ \\t\\n\\r]*\n";

static const char ARITHMETIC_GRAMMAR[] =
    "root  ::= (line)+\n"
    "line  ::= sum \"=\" sp sum \"\\n\"\n"
    "sum   ::= prod ([-+] sp prod)*\n"
    "prod  ::= atom ([*/] sp atom)*\n"
    "atom  ::= name | digits | \"(\" sp sum \")\" sp\n"
    "name  ::= [a-z] [a-z0-9_]* sp\n"
    "digits ::= [0-9]+ sp\n"
    "sp    ::= [ \\t]*\n";

static const char CHESS_GRAMMAR[] =
    "root ::= \"1. \" turn ([1-9] [0-9]? \". \" turn)+\n"
    "turn ::= move \" \" move \"\\n\"\n"
    "move ::= (pawn | piece | castle) [+#]?\n"
    "piece ::= [NBKQR] [a-h]? [1-8]? \"x\"? [a-h] [1-8]\n"
    "pawn ::= ([a-h] \"x\")? [a-h] [1-8] (\"=\" [NBKQR])?\n"
    "castle ::= \"O-O\" \"-O\"?\n";

static const char LIST_GRAMMAR[] = "root ::= entry+\n"
                                   "entry ::= \"* \" [^\\r\\n\\x0b\\x0c\\x85\\u2028\\u2029]+ \"\\n\"\n";

static const char CJK_GRAMMAR[] = "root ::= word (\" \" word)*\n"
                                  "word ::= (kana | han | mark)+\n"
                                  "kana ::= [ぁ-ゟ] | [\\u30A0-\\u30FF]\n"
                                  "han ::= [一-鿿]\n"
                                  "mark ::= [、-〾]\n";

static const char C_LIKE_GRAMMAR[] =
    "root ::= (fn)*\n"
    "fn ::= type id \"(\" (type id)? \")\" \"{\" stmt* \"}\"\n"
    "type ::= (\"int\" | \"char\") \" \"\n"
    "id ::= [a-zA-Z_] [a-zA-Z_0-9]*\n"
    "stmt ::=\n"
    "    ( id \"=\" expr \";\" ) |\n"
    "    ( \"while\" \"(\" expr \")\" \"{\" stmt* \"}\" ) |\n"
    "    ( \"return \" expr \";\" ) |\n"
    "    ( \"/*\" ( [^*] | (\"*\" [^/]) )* \"*/\" )\n"
    "expr ::= term ((\"+\" | \"-\") term)*\n"
    "term ::= factor((\"*\" | \"/\") factor)*\n"
    "factor ::= id | [0-9]+ | \"-\" factor | \"(\" expr \")\"\n";

static const char PUNCT_GRAMMAR[] = "root ::= sym+\n"
                                    "sym ::= [!\"#$%&'()*+,-./:;<=>?@[\\\\\\]^_`{|}~]\n";

static void test_example_grammars(void **state) {
    (void)state;
    static const struct {
        const char *grammar, *yes[3], *no[3];
    } cases[] = {
        {JSON_GRAMMAR, {"{\"a\": [1, -2.5e3, \"x\\u00e9\"], \"b\": null}", " [true,false] ", "\"\\ud83d\\ude00\""},
         {"{\"a\":}", "[1,]", "\"\\udc00\""}},
        {ARITHMETIC_GRAMMAR, {"a + b=c\n", "x1 * (2 + y)=42\n", "a=b\nc=d\n"}, {"a=\n", "+a=b\n", "a=b"}},
        {CHESS_GRAMMAR, {"1. e4 e5\n2. Nf3 Nc6\n", "1. d4 d5\n2. c4 dxc4\n3. O-O O-O-O+\n", "1. a1 a2\n9. e8=Q Kxe8#\n"},
         {"1. e4 e5\n", "1. e9 e5\n2. a1 a1\n", "2. e4 e5\n2. a1 a1\n"}},
        {LIST_GRAMMAR, {"* one\n* two\n", "* caf\xc3\xa9 \xe6\x97\xa5\n", "* x\n"}, {"* \n", "*  a\r\n", "* a\xe2\x80\xa8\n"}},
        {CJK_GRAMMAR, {"ひらがな カタカナ", "漢字、かな", "一鿿"}, {"abc", "漢字 ", "\xe4\xb7\xbf"}},
        {C_LIKE_GRAMMAR, {"int f(){}", "int main(char c){x=1+2*3;while(x){x=x-1;}return x;}", "char g(){/* a*b */}"},
         {"int f()", "int f(){x=;}", "float f(){}"}},
        {PUNCT_GRAMMAR, {"!\"#$%&'()*+,-./", ":;<=>?@[\\]^_`{|}~", "-"}, {"a", " ", ""}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        compiled c = compile_ok(cases[i].grammar);
        for (int k = 0; k < 3; k++) {
            if (!accepts(c.m, cases[i].yes[k])) fail_msg("grammar %zu rejects \"%s\"", i, cases[i].yes[k]);
            if (accepts(c.m, cases[i].no[k])) fail_msg("grammar %zu accepts \"%s\"", i, cases[i].no[k]);
        }
        compiled_free(&c);
    }
}

/* ---- JSON against jansson ---------------------------------------------------------------------- */

static const char *const JSON_CORPUS[] = {
    "{}", "[]", "0", "-0", "1.5", "-12.25e+3", "1E5", "0.5e-2", "true", "false", "null", "\"\"", "\"abc\"",
    " {\"a\" : 1 , \"b\":[true, false, null]} ", "{\"k\":{\"n\":{\"m\":[[],[{}]]}}}", "[1,2,3,4,5]",
    "\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"", "\"\\u0041\\u00e9\\u4e2d\"", "\"\\ud83d\\ude00\"", "\"caf\xc3\xa9 \xe6\x97\xa5\xf0\x9f\x98\x80\"",
    "\"\x7f\"", "[\"a\",{\"b\":\"c\"},-1,2.0]", "\n\t[ 1 ]\r\n", "{\"a\":\"\\u0000\"}",
    /* invalid */
    "", " ", "{", "}", "[1,]", "[,1]", "{\"a\"}", "{\"a\":}", "{a:1}", "{'a':1}", "01", "1.", ".5", "+1", "-",
    "1e", "1e+", "0x10", "tru", "nulll", "\"abc", "\"\\x\"", "\"\\u12\"", "\"\\ud800\"", "\"\\udc00\"",
    "\"\\ud800\\u0041\"", "\"a\tb\"", "\"\x01\"", "[1 2]", "{\"a\":1,}", "{\"a\":1 \"b\":2}", "[1]]", "{}{}",
    "\"\xc3\x28\"", "\"\xed\xa0\x80\"", "\"\xc0\xaf\"", "\"\xf4\x90\x80\x80\"", "\"\xff\"", "NaN", "[-]",
    "\"\\U0041\"", "{\"a\":[}", "[\"\x00\"]",
};

static bool jansson_accepts(const char *s, size_t n) {
    json_error_t err;
    json_t *v = json_loadb(s, n, JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);
    json_decref(v);
    return v != NULL;
}

/* jansson also rejects well-formed numbers past the range of a double or an int64 ("real number
 * overflow", "too big integer"): a range limit, not syntax, so such documents are not compared. */
static bool jansson_range_error(const char *s, size_t n) {
    json_error_t err;
    json_t *v = json_loadb(s, n, JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);
    json_decref(v);
    return !v && (strstr(err.text, "overflow") || strstr(err.text, "too big"));
}

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;
static uint64_t rng(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* Compares one document; false when it was skipped for a jansson range error. */
static bool check_json_doc(kite_gmatch *m, const char *s, size_t n) {
    if (jansson_range_error(s, n)) return false;
    bool want = jansson_accepts(s, n);
    int32_t st = kite_gmatch_start(m);
    for (size_t i = 0; i < n && st >= 0; i++) {
        st = kite_gmatch_step(m, st, (uint8_t)s[i]);
        /* a prefix of a valid document is viable */
        if (want && st < 0) fail_msg("grammar rejects byte %zu of valid JSON (len %zu) \"%.*s\"", i, n, (int)n, s);
    }
    assert_true(st != KITE_GSTATE_LIMIT);
    bool got = kite_gmatch_accepting(m, st);
    if (got != want)
        fail_msg("grammar %s, jansson %s: \"%.*s\"", got ? "accepts" : "rejects", want ? "accepts" : "rejects", (int)n, s);
    return true;
}

static void test_json_against_jansson(void **state) {
    (void)state;
    compiled c = compile_ok(JSON_GRAMMAR);
    size_t n_corpus = sizeof JSON_CORPUS / sizeof JSON_CORPUS[0];
    size_t valid = 0, checked = 0;
    for (size_t i = 0; i < n_corpus; i++) {
        size_t n = strlen(JSON_CORPUS[i]);
        if (i == n_corpus - 1) n = 5; /* the last one holds a NUL byte inside a string */
        assert_true(check_json_doc(c.m, JSON_CORPUS[i], n));
        valid += jansson_accepts(JSON_CORPUS[i], n);
    }
    assert_true(valid >= 20 && n_corpus - valid >= 30); /* both sides of the corpus are exercised */
    static const char alphabet[] = "{}[],:\"\\/ \t\n0123456789-+.eEuabfnrtlsd\x01\x7f\xc3\xa9\xed\xa0\xff";
    char buf[256];
    size_t mutants_valid = 0;
    for (int round = 0; round < 20000; round++) {
        const char *src = JSON_CORPUS[rng() % (n_corpus - 1)];
        size_t n = strlen(src);
        memcpy(buf, src, n);
        int edits = 1 + (int)(rng() % 3);
        for (int k = 0; k < edits; k++) {
            uint64_t r = rng();
            size_t at = n ? (size_t)(r >> 8) % (n + 1) : 0;
            char ch = alphabet[(r >> 40) % (sizeof alphabet - 1)];
            switch (r % 3) {
            case 0: /* insert */
                if (n + 1 >= sizeof buf) break;
                memmove(buf + at + 1, buf + at, n - at);
                buf[at] = ch;
                n++;
                break;
            case 1: /* delete */
                if (at < n) {
                    memmove(buf + at, buf + at + 1, n - at - 1);
                    n--;
                }
                break;
            default: /* replace */
                if (at < n) buf[at] = ch;
                break;
            }
        }
        if (!check_json_doc(c.m, buf, n)) continue;
        mutants_valid += jansson_accepts(buf, n);
        checked++;
    }
    assert_true(checked > 19000); /* range errors are rare */
    assert_true(mutants_valid > 500 && mutants_valid < checked - 500);
    compiled_free(&c);
}

/* ---- UTF-8 ------------------------------------------------------------------------------------- */

/* `.` accepts exactly the byte strings that are one valid UTF-8 character (utf8proc decides). */
static void test_any_char_is_utf8(void **state) {
    (void)state;
    compiled one = compile_ok("root ::= .\n");
    compiled many = compile_ok("root ::= .*\n");
    uint8_t b[8];
    for (int round = 0; round < 200000; round++) {
        size_t n = 1 + rng() % 4;
        for (size_t i = 0; i < n; i++) {
            uint64_t r = rng();
            /* bias towards lead and continuation bytes so valid characters are common */
            b[i] = (uint8_t)(i == 0 ? ((r & 3) ? 0xC0 + (r >> 8) % 0x38 : r >> 16) : ((r & 7) ? 0x80 + (r >> 8) % 0x40 : r >> 16));
        }
        utf8proc_int32_t cp;
        utf8proc_ssize_t used = utf8proc_iterate(b, (utf8proc_ssize_t)n, &cp);
        bool want = used == (utf8proc_ssize_t)n;
        int32_t st = feed(one.m, b, n);
        if (kite_gmatch_accepting(one.m, st) != want) fail_msg("`.` on %zu bytes starting 0x%02X: want %d", n, b[0], want);
        /* a whole string of characters: valid iff utf8proc decodes it to the end */
        bool valid = true;
        for (size_t i = 0; i < n && valid;) {
            utf8proc_ssize_t k = utf8proc_iterate(b + i, (utf8proc_ssize_t)(n - i), &cp);
            if (k <= 0) valid = false;
            else i += (size_t)k;
        }
        assert_int_equal(kite_gmatch_accepting(many.m, feed(many.m, b, n)), valid);
    }
    /* every code point, encoded by utf8proc, is one `.`; surrogates cannot be encoded, so exhaustive */
    for (int32_t cp = 0; cp <= 0x10FFFF; cp++) {
        if (cp >= 0xD800 && cp <= 0xDFFF) continue;
        utf8proc_ssize_t n = utf8proc_encode_char(cp, b);
        assert_true(kite_gmatch_accepting(one.m, feed(one.m, b, (size_t)n)));
    }
    compiled_free(&one);
    compiled_free(&many);
}

/* Classes over code points: for a set of classes, every code point is accepted iff a direct test of the
 * class's intervals says so; bytes of a character fed one by one (mid-character states can continue but
 * never accept). */
static void test_classes_over_code_points(void **state) {
    (void)state;
    static const struct {
        const char *grammar;
        bool negated;
        uint32_t ranges[4][2];
    } cases[] = {
        {"root ::= [一-鿿]\n", false, {{0x4E00, 0x9FFF}}},
        {"root ::= [^\"\\\\]\n", true, {{'"', '"'}, {'\\', '\\'}}},
        {"root ::= [^\"\\\\\\x7F\\x00-\\x1F]\n", true, {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}, {0x7F, 0x7F}}},
        {"root ::= [a-z\\u00e0-\\u00ff\\U0001F600-\\U0001F64F]\n", false, {{'a', 'z'}, {0xE0, 0xFF}, {0x1F600, 0x1F64F}}},
        {"root ::= [^\\u0800-\\uFFFF]\n", true, {{0x800, 0xFFFF}}},
        {"root ::= [\\x80-\\U0010FFFF]\n", false, {{0x80, 0x10FFFF}}},
        {"root ::= [\\uD7FF\\uE000]\n", false, {{0xD7FF, 0xD7FF}, {0xE000, 0xE000}}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        compiled c = compile_ok(cases[i].grammar);
        int32_t start = kite_gmatch_start(c.m);
        for (int32_t cp = 0; cp <= 0x10FFFF; cp++) {
            if (cp >= 0xD800 && cp <= 0xDFFF) continue;
            bool in = false;
            for (int k = 0; k < 4; k++)
                if (cases[i].ranges[k][1] && (uint32_t)cp >= cases[i].ranges[k][0] && (uint32_t)cp <= cases[i].ranges[k][1])
                    in = true;
            if (cases[i].negated) in = !in;
            uint8_t b[4];
            utf8proc_ssize_t n = utf8proc_encode_char(cp, b);
            int32_t st = start;
            for (utf8proc_ssize_t k = 0; k < n - 1 && st >= 0; k++) {
                st = kite_gmatch_step(c.m, st, b[k]);
                if (st >= 0) assert_false(kite_gmatch_accepting(c.m, st));
                if (st >= 0) assert_true(kite_gmatch_can_continue(c.m, st));
            }
            st = kite_gmatch_step(c.m, st, b[n - 1]);
            if (kite_gmatch_accepting(c.m, st) != in) fail_msg("%s on U+%04X: want %d", cases[i].grammar, cp, in);
            assert_int_not_equal(st, KITE_GSTATE_LIMIT);
        }
        compiled_free(&c);
    }
}

/* ---- repetitions, alternatives, accepting vs can_continue ------------------------------------- */

typedef struct accept_case {
    const char *grammar;
    const char *input;
    int expect; /* 1 accepting and can continue, 2 accepting and final, 0 viable not accepting, -1 dead */
} accept_case;

static void check_accept_cases(const accept_case *cases, size_t n) {
    for (size_t i = 0; i < n; i++) {
        compiled c = compile_ok(cases[i].grammar);
        int32_t st = feed(c.m, cases[i].input, strlen(cases[i].input));
        int got = st == KITE_GSTATE_DEAD ? -1
                  : kite_gmatch_accepting(c.m, st) ? (kite_gmatch_can_continue(c.m, st) ? 1 : 2)
                                                   : 0;
        if (got == 0) assert_true(kite_gmatch_can_continue(c.m, st)); /* a live state that does not accept goes on */
        if (got != cases[i].expect)
            fail_msg("case %zu: grammar `%s` on \"%s\": got %d, want %d", i, cases[i].grammar, cases[i].input, got,
                     cases[i].expect);
        compiled_free(&c);
    }
}

static void test_repetition_bounds(void **state) {
    (void)state;
    static const accept_case cases[] = {
        {"root ::= \"a\"{3,5}", "aa", 0},      {"root ::= \"a\"{3,5}", "aaa", 1},    {"root ::= \"a\"{3,5}", "aaaa", 1},
        {"root ::= \"a\"{3,5}", "aaaaa", 2},   {"root ::= \"a\"{3,5}", "aaaaaa", -1}, {"root ::= \"a\"{3}", "aa", 0},
        {"root ::= \"a\"{3}", "aaa", 2},       {"root ::= \"a\"{3}", "aaaa", -1},    {"root ::= \"a\"{2,}", "a", 0},
        {"root ::= \"a\"{2,}", "aa", 1},       {"root ::= \"a\"{2,}", "aaaaaaaaaa", 1}, {"root ::= \"a\"{0,2}", "", 1},
        {"root ::= \"a\"{0,2}", "aa", 2},      {"root ::= \"a\"{0,2}", "aaa", -1},   {"root ::= \"a\"{0}", "", 2},
        {"root ::= \"a\"{0} \"b\"", "b", 2},   {"root ::= \"a\"{0,0}", "a", -1},     {"root ::= \"ab\"{2}", "abab", 2},
        {"root ::= \"ab\"{2}", "aba", 0},      {"root ::= (\"x\" | \"yz\"){1,2}", "yzx", 2}, {"root ::= (\"x\" | \"yz\"){1,2}", "y", 0},
        {"root ::= \"a\"*", "", 1},            {"root ::= \"a\"+", "", 0},           {"root ::= \"a\"+", "aaa", 1},
        {"root ::= \"a\"?", "a", 2},           {"root ::= \"a\"? \"b\"", "ab", 2},   {"root ::= \"a\"? \"b\"", "b", 2},
        {"root ::= \"a\"{ 1 , 2 }", "aa", 2},  {"root ::= [0-9]{4}", "2024", 2},     {"root ::= [0-9]{4}", "20x", -1},
        {"root ::= \"é\"{2}", "é\xc3", 0},     {"root ::= \"é\"{2}", "éé", 2},       {"root ::= \"a\"{2}{3}", "aaaaaa", 2},
        {"root ::= \"a\"{2}{3}", "aaaaa", 0},  {"root ::= (\"a\"?)*", "aaa", 1},     {"root ::= (\"a\"* \"b\"?)*", "abba", 1},
        {"root ::= \"a\"{9999,10000}", "a", 0},
        /* alternatives, empty ones included */
        {"root ::= \"a\" | ", "", 1},          {"root ::= \"a\" | ", "a", 2},        {"root ::= | \"a\"", "a", 2},
        {"root ::= ()", "", 2},                {"root ::= (|\"a\"|) \"b\"", "b", 2}, {"root ::= \"\"", "", 2},            {"root ::= \"\"* \"a\"", "a", 2},
        {"root ::= ()+ \"a\"", "a", 2},
        {"root ::= \"ab\" | \"a\"", "a", 1},   {"root ::= \"ab\" | \"a\"", "ab", 2}, {"root ::= \"ab\" | \"a\"", "b", -1},
        {"root ::= x\nx ::= y | \"x\"\ny ::= x | \"y\"", "y", 2}, /* a cycle of tail calls (unit rules) */
        {"root ::= a\na ::= \"(\" a \")\" | \"\"", "((()))", 2}, {"root ::= a\na ::= \"(\" a \")\" | \"\"", "(()", 0},
        {"root ::= a\na ::= \"(\" a \")\" | \"\"", "())", -1},
        /* layout: comments, newlines inside groups and after |, CRLF */
        {"# c\nroot ::= ( \"a\" # x\n  \"b\" )\n# end", "ab", 2}, {"root ::= \"a\" |\n  \"b\"\r\n", "b", 2},
        {"root ::= \"\\x41\\u00e9\\U0001F600\\t\\\\\\\"\\[\\]\\-\"", "A\xc3\xa9\xf0\x9f\x98\x80\t\\\"[]-", 2},
        {"root ::= [\\]\\-\\[]+", "]-[", 1},   {"root ::= [a-]", "-", 2},             {"root ::= [^]", "\xe2\x82\xac", 2},
        {"root ::= .", "\n", 2},               {"root ::= [-a]", "-", 2},
    };
    check_accept_cases(cases, sizeof cases / sizeof cases[0]);
}

static void test_start_rule_and_states(void **state) {
    (void)state;
    static const char text[] = "root ::= \"r\"\nother ::= \"o\"+\n";
    kite_gbnf *g = NULL;
    kite_error e = {0};
    assert_int_equal(kite_gbnf_parse(text, strlen(text), "other", &g, &e), KITE_OK);
    kite_gmatch *m = NULL;
    assert_int_equal(kite_gmatch_new(g, &m, &e), KITE_OK);
    int32_t s0 = kite_gmatch_start(m);
    assert_int_equal(kite_gmatch_start(m), s0);
    assert_int_equal(kite_gmatch_step(m, s0, 'r'), KITE_GSTATE_DEAD);
    int32_t s1 = kite_gmatch_step(m, s0, 'o');
    int32_t s2 = kite_gmatch_step(m, s1, 'o');
    assert_true(s1 >= 0);
    assert_int_equal(s1, s2); /* o+ after one o and after two is the same set of stacks: one state */
    assert_int_equal(kite_gmatch_step(m, s2, 'o'), s1); /* cached */
    uint64_t bits[4];
    kite_gmatch_allowed_bytes(m, s0, bits);
    assert_true(bits[0] == 0 && bits[1] == (1ull << ('o' - 64)) && bits[2] == 0 && bits[3] == 0);
    assert_int_equal(kite_gmatch_step(m, KITE_GSTATE_DEAD, 'o'), KITE_GSTATE_DEAD);
    assert_int_equal(kite_gmatch_step(m, 12345, 'o'), KITE_GSTATE_LIMIT);
    assert_false(kite_gmatch_accepting(m, -1));
    assert_false(kite_gmatch_can_continue(m, -1));
    kite_gmatch_free(m);
    kite_gbnf_free(g);
    assert_int_equal(kite_gbnf_parse(text, strlen(text), "nothere", &g, &e), KITE_ERR_FORMAT);
    assert_non_null(strstr(e.msg, "no rule named 'nothere'"));
    assert_null(g);
}

/* Every byte from every state along a document, stepped twice (the second answer comes from the inline
 * entries or the row the first filled): the same state both times, live exactly for the allowed bytes,
 * and a state reached again by the same bytes from a fresh matcher has the same acceptance. */
static void test_transition_cache(void **state) {
    (void)state;
    compiled c = compile_ok(JSON_GRAMMAR);
    static const char doc[] = "{\"k\": [1, -2.5e+3, \"x\\u00e9\xe6\x97\xa5\"], \"n\": {\"t\": true}}";
    int32_t st = kite_gmatch_start(c.m);
    for (size_t i = 0; i < sizeof doc - 1; i++) {
        uint64_t bits[4];
        kite_gmatch_allowed_bytes(c.m, st, bits);
        int32_t first[256];
        for (int b = 0; b < 256; b++) {
            first[b] = kite_gmatch_step(c.m, st, (uint8_t)b);
            assert_int_not_equal(first[b], KITE_GSTATE_LIMIT);
            assert_int_equal(first[b] >= 0, (int)((bits[b >> 6] >> (b & 63)) & 1));
        }
        for (int b = 255; b >= 0; b--) assert_int_equal(kite_gmatch_step(c.m, st, (uint8_t)b), first[b]);
        st = kite_gmatch_step(c.m, st, (uint8_t)doc[i]);
        assert_true(st >= 0);
    }
    assert_true(kite_gmatch_accepting(c.m, st));
    compiled fresh = compile_ok(JSON_GRAMMAR);
    assert_true(accepts(fresh.m, doc));
    compiled_free(&fresh);
    compiled_free(&c);
}

/* ---- random regular grammars against PCRE2 ------------------------------------------------------ */

typedef struct strbuf {
    char *s;
    size_t n, cap;
} strbuf;

static void sb_putn(strbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        b->cap = (b->n + n + 1) * 2;
        b->s = realloc(b->s, b->cap);
        assert_non_null(b->s);
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

static void sb_printf(strbuf *b, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    sb_putn(b, tmp, (size_t)n);
}

/* Code points the generator draws from: ASCII, 2-, 3- and 4-byte characters, and range edges. */
static const uint32_t POOL[] = {'a', 'b', 'c', 'z', '-', '\n', '"', 0xE9, 0x7FF, 0x800, 0x65E5, 0xFFFF, 0x1F600, 0x10FFFF};
#define POOL_N (sizeof POOL / sizeof POOL[0])

/* GBNF literal spelling of a code point: raw UTF-8 or an escape, chosen at random. */
static void gbnf_char(strbuf *g, uint32_t cp, bool in_class) {
    uint8_t b[4];
    bool special = cp == '"' || cp == '\\' || cp == '\n' || (in_class && (cp == ']' || cp == '-' || cp == '^'));
    if (special || rng() % 2) {
        if (cp < 0x100) sb_printf(g, "\\x%02X", cp);
        else if (cp < 0x10000) sb_printf(g, "\\u%04X", cp);
        else sb_printf(g, "\\U%08X", cp);
    } else {
        sb_putn(g, (const char *)b, (size_t)utf8proc_encode_char((utf8proc_int32_t)cp, b));
    }
}

typedef struct gen_ctx {
    strbuf rules; /* extra named rules r0, r1, ... */
    int n_rules;
} gen_ctx;

/* Writes a random expression as GBNF into g and as an equivalent PCRE2 pattern into r. */
static void gen_expr(gen_ctx *ctx, strbuf *g, strbuf *r, int depth) {
    int kind = (int)(rng() % (depth > 3 ? 3 : 7));
    if (kind == 0) { /* literal of 1-3 characters */
        int n = 1 + (int)(rng() % 3);
        sb_putn(g, "\"", 1);
        sb_putn(r, "(?:", 3);
        for (int i = 0; i < n; i++) {
            uint32_t cp = POOL[rng() % POOL_N];
            gbnf_char(g, cp, false);
            sb_printf(r, "\\x{%X}", cp);
        }
        sb_putn(g, "\"", 1);
        sb_putn(r, ")", 1);
    } else if (kind == 1) { /* class */
        bool neg = rng() % 3 == 0;
        sb_putn(g, neg ? "[^" : "[", neg ? 2 : 1);
        sb_putn(r, neg ? "[^" : "[", neg ? 2 : 1);
        int n = 1 + (int)(rng() % 3);
        for (int i = 0; i < n; i++) {
            uint32_t lo = POOL[rng() % POOL_N], hi = POOL[rng() % POOL_N];
            if (hi < lo) {
                uint32_t t = lo;
                lo = hi;
                hi = t;
            }
            gbnf_char(g, lo, true);
            sb_printf(r, "\\x{%X}", lo);
            if (hi != lo) {
                sb_putn(g, "-", 1);
                gbnf_char(g, hi, true);
                sb_printf(r, "-\\x{%X}", hi);
            }
        }
        sb_putn(g, "]", 1);
        sb_putn(r, "]", 1);
    } else if (kind == 2) {
        sb_putn(g, ".", 1);
        sb_putn(r, ".", 1);
    } else if (kind == 3 || kind == 4) { /* sequence or alternation in a group */
        int n = 1 + (int)(rng() % 3);
        sb_putn(g, "(", 1);
        sb_putn(r, "(?:", 3);
        for (int i = 0; i < n; i++) {
            if (i) {
                sb_putn(g, kind == 3 ? " " : " | ", kind == 3 ? 1 : 3);
                if (kind == 4) sb_putn(r, "|", 1);
            }
            if (kind == 4 && rng() % 5 == 0) continue; /* an empty alternative */
            gen_expr(ctx, g, r, depth + 1);
        }
        sb_putn(g, ")", 1);
        sb_putn(r, ")", 1);
    } else if (kind == 5) { /* repetition */
        sb_putn(g, "(", 1);
        sb_putn(r, "(?:", 3);
        gen_expr(ctx, g, r, depth + 1);
        sb_putn(g, ")", 1);
        sb_putn(r, ")", 1);
        static const char *const ops[] = {"*", "+", "?", "{2}", "{0,2}", "{1,3}", "{2,}", "{0}"};
        const char *op = ops[rng() % 8];
        sb_putn(g, op, strlen(op));
        sb_putn(r, op, strlen(op));
    } else { /* a named rule */
        int id = ctx->n_rules++;
        strbuf body = {0};
        sb_putn(r, "(?:", 3);
        gen_expr(ctx, &body, r, depth + 1);
        sb_putn(r, ")", 1);
        sb_printf(&ctx->rules, "r%d ::= %s\n", id, body.s);
        sb_printf(g, "r%d", id);
        free(body.s);
    }
}

/* A random string of pool characters, or a mutation-free sample is not needed: short strings over a
 * small pool hit accepted strings often enough. */
static size_t gen_subject(uint8_t *out, size_t *boundaries, size_t *n_bounds) {
    int n = (int)(rng() % 6);
    size_t len = 0;
    *n_bounds = 0;
    for (int i = 0; i < n; i++) {
        len += (size_t)utf8proc_encode_char((utf8proc_int32_t)POOL[rng() % POOL_N], out + len);
        boundaries[(*n_bounds)++] = len;
    }
    return len;
}

static void test_regular_grammars_against_pcre2(void **state) {
    (void)state;
    pcre2_match_data *md = pcre2_match_data_create(16, NULL);
    size_t total_accepts = 0, total = 0;
    for (int round = 0; round < 600; round++) {
        gen_ctx ctx = {0};
        strbuf g = {0}, r = {0};
        sb_putn(&g, "root ::= ", 9);
        sb_putn(&r, "(?:", 3);
        gen_expr(&ctx, &g, &r, 0);
        sb_putn(&g, "\n", 1);
        sb_putn(&r, ")\\z", 3);
        if (ctx.rules.s) sb_putn(&g, ctx.rules.s, ctx.rules.n);
        int errcode;
        PCRE2_SIZE erroff;
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)r.s, r.n, PCRE2_UTF | PCRE2_DOTALL | PCRE2_ANCHORED, &errcode, &erroff, NULL);
        if (!re) fail_msg("pcre2 rejects %s", r.s);
        compiled c = compile_ok(g.s);
        for (int k = 0; k < 60; k++) {
            uint8_t subject[64];
            size_t bounds[8], n_bounds;
            size_t len = gen_subject(subject, bounds, &n_bounds);
            int full = pcre2_match(re, subject, len, 0, 0, md, NULL);
            bool want = full >= 0;
            int32_t st = feed(c.m, subject, len);
            assert_int_not_equal(st, KITE_GSTATE_LIMIT);
            if (kite_gmatch_accepting(c.m, st) != want)
                fail_msg("grammar:\n%sregex: %s\nsubject \"%.*s\": pcre2 %d", g.s, r.s, (int)len, subject, want);
            total_accepts += want;
            total++;
            /* every prefix at a character boundary: viable for the grammar iff pcre2 finds a partial or full match */
            for (size_t b = 0; b < n_bounds; b++) {
                int part = pcre2_match(re, subject, bounds[b], 0, PCRE2_PARTIAL_HARD, md, NULL);
                bool viable = part >= 0 || part == PCRE2_ERROR_PARTIAL;
                int32_t ps = feed(c.m, subject, bounds[b]);
                if ((ps >= 0) != viable)
                    fail_msg("grammar:\n%sregex: %s\nprefix \"%.*s\": pcre2 viable %d, matcher state %d", g.s, r.s,
                             (int)bounds[b], subject, viable, ps);
            }
        }
        compiled_free(&c);
        pcre2_code_free(re);
        free(g.s);
        free(r.s);
        free(ctx.rules.s);
    }
    pcre2_match_data_free(md);
    assert_true(total_accepts > total / 50); /* the comparison covers accepted strings too */
}

/* ---- malformed grammars ------------------------------------------------------------------------ */

/* Token references in llama.cpp's syntax (<[id]>, as in its tests/test-grammar-parser.cpp): the token's
 * terminal is the 4 bytes 0xFF id>>16 id>>8 id, which no UTF-8 text holds; the grammar lists the ids. */
static void test_token_references(void **state) {
    (void)state;
    compiled c = compile_ok("root ::= \"a\" <[151657]> (<[5]> | \"b\")* <[0]>?\n");
    const uint8_t ref[] = {'a', 0xFF, 0x02, 0x50, 0x69, 0xFF, 0, 0, 5, 'b', 0xFF, 0, 0, 0};
    assert_false(kite_gmatch_accepting(c.m, feed(c.m, ref, 1)));
    assert_true(kite_gmatch_accepting(c.m, feed(c.m, ref, 5)));
    assert_true(kite_gmatch_accepting(c.m, feed(c.m, ref, 9)));
    assert_true(kite_gmatch_accepting(c.m, feed(c.m, ref, 10)));
    assert_true(kite_gmatch_accepting(c.m, feed(c.m, ref, sizeof ref)));
    assert_true(feed(c.m, ref, 3) >= 0);
    const uint8_t wrong[] = {'a', 0xFF, 0x02, 0x50, 0x6A};
    assert_true(feed(c.m, wrong, sizeof wrong) < 0);
    assert_true(feed(c.m, "ab", 2) < 0); /* the token, not text, comes after "a" */
    const int32_t *ids = NULL;
    size_t n = kite_gbnf_token_refs(c.g, &ids);
    assert_int_equal(n, 3);
    assert_int_equal(ids[0], 151657);
    assert_int_equal(ids[1], 5);
    assert_int_equal(ids[2], 0);
    compiled_free(&c);
    compiled none = compile_ok("root ::= \"<[1]>\" [<>]\n"); /* in a literal or class: text */
    assert_int_equal(kite_gbnf_token_refs(none.g, NULL), 0);
    assert_true(accepts(none.m, "<[1]>>"));
    compiled_free(&none);
}

static void test_bad_grammars(void **state) {
    (void)state;
    static const struct {
        const char *text;
        const char *fragment; /* in the message */
        const char *where;    /* " at L:C" suffix, or NULL when the error has no position */
    } cases[] = {
        {"root ::= \"a\"\nfoo \"b\"", "expected ::= after rule name 'foo', found '\"'", "2:5"},
        {"root ::= foo", "undefined rule 'foo'", "1:10"},
        {"root ::= \"日本\" foo", "undefined rule 'foo'", "1:15"},
        {"root ::= a\na ::= b | \"x\" c\nb ::= \"y\"", "undefined rule 'c'", "2:15"},
        {"root ::= (\"a\"", "expected ')' to close the group opened at 1:10, found end of input", "1:14"},
        {"root ::= (\"a\"\n\n", "expected ')' to close the group opened at 1:10", "3:1"},
        {"root ::= \"abc", "unterminated string literal", "1:10"},
        {"root ::= [abc", "unterminated character class", "1:10"},
        {"root ::= [z-a]", "character range U+007A-U+0061 is reversed", "1:11"},
        {"root ::= *", "nothing to repeat before '*'", "1:10"},
        {"root ::= \"a\" | +", "nothing to repeat before '+'", "1:16"},
        {"root ::= \"a\"{3,2}", "repetition {3,2} has its maximum below its minimum", "1:13"},
        {"root ::= \"a\"{0,100000}", "repetition count past the limit of 10000", "1:16"},
        {"root ::= \"a\"{99999999999999999999999}", "repetition count past the limit", "1:14"},
        {"root ::= \"a\"{1", "expected ',' or '}' in repetition, found end of input", "1:15"},
        {"root ::= \"a\"{1,2", "expected '}' to close the repetition", "1:17"},
        {"root ::= \"a\"{x}", "expected a number in repetition, found 'x'", "1:14"},
        {"root ::= \"\\q\"", "unknown escape '\\' followed by 'q'", "1:11"},
        {"root ::= \"\\x4\"", "expected 2 hex digits after \\x", "1:14"},
        {"root ::= \"\\uD800\"", "U+D800 is a surrogate", "1:11"},
        {"root ::= [\\uDFFF]", "U+DFFF is a surrogate", "1:11"},
        {"root ::= \"\\U00110000\"", "code point U+110000 is past U+10FFFF", "1:11"},
        {"root ::= \"a\" )", "unmatched ')' in rule 'root'", "1:14"},
        {"root ::= \"a\" ]", "expected newline or end of input after rule 'root', found ']'", "1:14"},
        {"a ::= \"x\"", "no rule named 'root' (the start rule)", NULL},
        {"root ::= a\na ::= a \"x\" | \"y\"", "left recursion: rule 'a' can begin with itself", "2:1"},
        {"root ::= a\na ::= b \"x\"\nb ::= \"y\" | a", "left recursion: rule 'a'", "2:1"},
        {"root ::= n root \"x\" | \"y\"\nn ::= \"z\"?", "left recursion: rule 'root'", "1:1"},
        {"root ::= (\"a\"? root \"b\")?", "left recursion: rule 'root'", "1:1"},
        {"root ::= \"a\" root", "rule 'root' can never finish", "1:1"},
        {"root ::= x\nx ::= \"(\" x \")\"", "rule 'x' can never finish", "2:1"},
        {"root ::= [^\\x00-\\U0010FFFF]", "character class matches no character", "1:10"},
        {"root ::= []", "character class matches no character", "1:10"},
        {"root ::= <think>", "token reference <think>: only <[id]> is understood without a vocabulary", "1:10"},
        {"root ::= !<[12]>", "negated token references (!<...>) are not supported", "1:10"},
        {"root ::= \"a\" <[12", "token reference: expected <[id]> with a decimal id", "1:14"},
        {"root ::= <[]>", "token reference: expected <[id]> with a decimal id", "1:10"},
        {"root ::= <[12]", "token reference: expected '>' after <[id]", "1:10"},
        {"root ::= <[16777216]>", "token reference: id 16777216 is past the largest vocabulary", "1:10"},
        {"root ::= \"a\"\nroot ::= \"b\"", "rule 'root' is defined twice (first at 1:1)", "2:1"},
        {"root ::= \"\xff\"", "invalid UTF-8 byte 0xFF", "1:11"},
        {"root ::= [\xc3", "truncated UTF-8 character", "1:11"},
        {"root ::= \"\xed\xa0\x80\"", "invalid UTF-8 sequence", "1:11"},
        {"", "the grammar has no rules", NULL},
        {"  # only a comment\n", "the grammar has no rules", NULL},
        {"::= \"a\"", "expected a rule name, found ':'", "1:1"},
        {"root := \"a\"", "expected ::= after rule name 'root', found ':'", "1:6"},
        {"root ::= \"a\" \"b\" \n | \"c\"", "expected a rule name, found '|'", "2:2"},
        {"root ::= \"a\"{1000}{1000}{10}", "grammar too large (more than 4194304 elements", "1:25"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kite_gbnf *g = (kite_gbnf *)&g; /* must be reset to NULL */
        kite_error e = {0};
        int rc = kite_gbnf_parse(cases[i].text, strlen(cases[i].text), NULL, &g, &e);
        if (rc != KITE_ERR_FORMAT) fail_msg("case %zu `%s`: rc %d (%s)", i, cases[i].text, rc, e.msg);
        assert_null(g);
        if (!strstr(e.msg, cases[i].fragment)) fail_msg("case %zu: message \"%s\" lacks \"%s\"", i, e.msg, cases[i].fragment);
        if (cases[i].where) {
            char suffix[32];
            snprintf(suffix, sizeof suffix, " at %s", cases[i].where);
            size_t ml = strlen(e.msg), sl = strlen(suffix);
            if (ml < sl || strcmp(e.msg + ml - sl, suffix) != 0)
                fail_msg("case %zu: message \"%s\" does not end with \"%s\"", i, e.msg, suffix);
        }
        assert_null(strchr(e.msg, '\n'));
    }
}

static void test_parser_limits(void **state) {
    (void)state;
    kite_gbnf *g = NULL;
    kite_error e = {0};
    /* nesting: 256 groups parse, 257 do not */
    strbuf t = {0};
    for (int depth = 256; depth <= 257; depth++) {
        t.n = 0;
        sb_putn(&t, "root ::= ", 9);
        for (int i = 0; i < depth; i++) sb_putn(&t, "(", 1);
        sb_putn(&t, "\"a\" | \"b\"", 9);
        for (int i = 0; i < depth; i++) sb_putn(&t, ")", 1);
        int rc = kite_gbnf_parse(t.s, t.n, NULL, &g, &e);
        if (depth == 256) {
            assert_int_equal(rc, KITE_OK);
            compiled c = {g, NULL};
            assert_int_equal(kite_gmatch_new(g, &c.m, &e), KITE_OK);
            assert_true(accepts(c.m, "b"));
            compiled_free(&c);
        } else {
            assert_int_equal(rc, KITE_ERR_FORMAT);
            assert_non_null(strstr(e.msg, "groups nested deeper than 256 at 1:266"));
        }
    }
    /* a long chain of rules (recursion-free checks: the SCC pass is iterative) */
    t.n = 0;
    for (int i = 0; i < 60000; i++) sb_printf(&t, "r%d ::= \"x\" r%d | \"y\"\n", i, i + 1);
    sb_printf(&t, "r60000 ::= \"z\"\nroot ::= r0\n");
    assert_int_equal(kite_gbnf_parse(t.s, t.n, NULL, &g, &e), KITE_OK);
    kite_gbnf_free(g);
    /* left-corner chain of 60000 rules closing a cycle: found without recursion */
    t.n = 0;
    for (int i = 0; i < 60000; i++) sb_printf(&t, "r%d ::= r%d \"x\" | \"y\"\n", i, (i + 1) % 60000);
    sb_printf(&t, "root ::= r0\n");
    assert_int_equal(kite_gbnf_parse(t.s, t.n, NULL, &g, &e), KITE_ERR_FORMAT);
    assert_non_null(strstr(e.msg, "left recursion: rule 'r0'"));
    /* too many rules */
    t.n = 0;
    sb_printf(&t, "root ::= (\"a\" | \"b\"){10000} (\"a\" | \"b\"){10000} (\"a\" | \"b\"){0,10000}");
    for (int i = 0; i < 14; i++) sb_printf(&t, " (\"a\" | \"b\"){0,10000}");
    assert_int_equal(kite_gbnf_parse(t.s, t.n, NULL, &g, &e), KITE_ERR_FORMAT);
    assert_non_null(strstr(e.msg, "more than 131072 rules"));
    /* text length */
    assert_int_equal(kite_gbnf_parse("root ::= \"a\"", (size_t)KITE_GBNF_MAX_TEXT + 1, NULL, &g, &e), KITE_ERR_FORMAT);
    assert_non_null(strstr(e.msg, "past the limit"));
    /* arguments */
    assert_int_equal(kite_gbnf_parse(NULL, 3, NULL, &g, &e), KITE_ERR_INVALID_ARG);
    assert_int_equal(kite_gbnf_parse("root ::= \"a\"", 12, NULL, NULL, &e), KITE_ERR_INVALID_ARG);
    /* NUL bytes in the text are characters like others: in a literal they match a NUL byte */
    static const char nul_text[] = "root ::= \"a\0b\"";
    assert_int_equal(kite_gbnf_parse(nul_text, sizeof nul_text - 1, NULL, &g, &e), KITE_OK);
    kite_gmatch *m = NULL;
    assert_int_equal(kite_gmatch_new(g, &m, &e), KITE_OK);
    assert_true(kite_gmatch_accepting(m, feed(m, "a\0b", 3)));
    kite_gmatch_free(m);
    kite_gbnf_free(g);
    static const char nul_outside[] = "root ::= \"a\"\0";
    assert_int_equal(kite_gbnf_parse(nul_outside, sizeof nul_outside - 1, NULL, &g, &e), KITE_ERR_FORMAT);
    assert_non_null(strstr(e.msg, "found byte 0x00 at 1:13"));
    free(t.s);
}

/* ---- matcher limits ---------------------------------------------------------------------------- */

static void test_matcher_limits(void **state) {
    (void)state;
    /* after n x's the stack remembers which of y / z closes each: 2^n distinct stacks */
    compiled c = compile_ok("root ::= a\na ::= \"x\" a \"y\" | \"x\" a \"z\" | \"\"\n");
    int32_t st = kite_gmatch_start(c.m);
    int n = 0;
    while (st >= 0 && n < 40) {
        st = kite_gmatch_step(c.m, st, 'x');
        n++;
    }
    assert_int_equal(st, KITE_GSTATE_LIMIT);
    /* after k x's: 2^k closing sequences c, each with stacks {x.. over c, x.. over c, c}: 3 * 2^10 = 3072
     * fit in 4096, 3 * 2^11 do not */
    assert_int_equal(n, 11);
    assert_non_null(strstr(kite_gmatch_error(c.m)->msg, "too many parse stacks in one state"));
    compiled_free(&c);

    /* states: a counter grammar makes a new state per byte */
    c = compile_ok("root ::= a\na ::= \"(\" a \")\" | \"\"\n");
    kite_gmatch_limits lim = kite_gmatch_default_limits();
    lim.max_states = 10;
    kite_gmatch_set_limits(c.m, &lim);
    st = kite_gmatch_start(c.m);
    n = 0;
    while (st >= 0 && n < 100) {
        st = kite_gmatch_step(c.m, st, '(');
        n++;
    }
    assert_int_equal(st, KITE_GSTATE_LIMIT);
    assert_int_equal(kite_gmatch_n_states(c.m), 10);
    assert_non_null(strstr(kite_gmatch_error(c.m)->msg, "too many grammar states"));
    /* raising the limit lets the same step through: limits are not cached */
    lim.max_states = 1000;
    kite_gmatch_set_limits(c.m, &lim);
    st = kite_gmatch_step_bytes(c.m, kite_gmatch_start(c.m), (const uint8_t *)"((((((((((((", 12);
    assert_true(st >= 0);
    assert_true(kite_gmatch_accepting(c.m, kite_gmatch_step_bytes(c.m, st, (const uint8_t *)"))))))))))))", 12)));
    /* memory */
    lim.max_bytes = kite_gmatch_memory(c.m) + 4096;
    kite_gmatch_set_limits(c.m, &lim);
    uint8_t open[200];
    memset(open, '(', sizeof open);
    assert_int_equal(kite_gmatch_step_bytes(c.m, st, open, sizeof open), KITE_GSTATE_LIMIT);
    assert_non_null(strstr(kite_gmatch_error(c.m)->msg, "memory budget"));
    assert_true(kite_gmatch_memory(c.m) <= lim.max_bytes);
    compiled_free(&c);

    /* work: 6000 empty alternatives are 6000 distinct closure items but no stack; with 16 stacks per
     * state the work bound is 16 * 64 + 4096 = 5120 items */
    strbuf t = {0};
    sb_printf(&t, "root ::= a \"y\"\na ::= ");
    for (int i = 0; i < 6000; i++) sb_printf(&t, "\"\" | ");
    sb_printf(&t, "\"x\"\n");
    c = compile_ok(t.s);
    lim = kite_gmatch_default_limits();
    lim.max_stacks_per_state = 16;
    kite_gmatch_set_limits(c.m, &lim);
    assert_int_equal(kite_gmatch_start(c.m), KITE_GSTATE_LIMIT);
    assert_non_null(strstr(kite_gmatch_error(c.m)->msg, "too much work in one step"));
    lim.max_stacks_per_state = 4096;
    kite_gmatch_set_limits(c.m, &lim);
    assert_true(accepts(c.m, "xy") && accepts(c.m, "y"));
    compiled_free(&c);
    free(t.s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_example_grammars),
        cmocka_unit_test(test_json_against_jansson),
        cmocka_unit_test(test_any_char_is_utf8),
        cmocka_unit_test(test_classes_over_code_points),
        cmocka_unit_test(test_repetition_bounds),
        cmocka_unit_test(test_start_rule_and_states),
        cmocka_unit_test(test_transition_cache),
        cmocka_unit_test(test_regular_grammars_against_pcre2),
        cmocka_unit_test(test_token_references),
        cmocka_unit_test(test_bad_grammars),
        cmocka_unit_test(test_parser_limits),
        cmocka_unit_test(test_matcher_limits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
