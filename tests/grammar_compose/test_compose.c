/* Grammar composition: rule names renamed under a prefix (and nothing else: literals, classes, comments
 * and counts that spell names stay as they are), checked by matching the same strings before and after;
 * GBNF literals of arbitrary UTF-8 text match exactly that text; the forced tool-call grammar accepts a
 * call whose arguments follow the tool's schema (checked by parsing it back with the tool-call parser)
 * and refuses arguments the schema does not allow. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "chat/tool_grammar.h"
#include "grammar/compose.h"
#include "grammar/grammar.h"

static kite_gmatch *matcher_of(const char *gbnf, kite_gbnf **g) {
    kite_error e = {0};
    if (kite_gbnf_parse(gbnf, strlen(gbnf), NULL, g, &e)) fail_msg("grammar does not parse: %s\n%s", e.msg, gbnf);
    kite_gmatch *m;
    assert_int_equal(kite_gmatch_new(*g, &m, &e), KITE_OK);
    return m;
}

static bool accepts(kite_gmatch *m, const char *text) {
    int32_t s = kite_gmatch_step_bytes(m, kite_gmatch_start(m), (const uint8_t *)text, strlen(text));
    return s >= 0 && kite_gmatch_accepting(m, s);
}

static void test_prefix_rules(void **state) {
    (void)state;
    /* names inside a literal, a class, a comment and a count must not be touched */
    const char *src = "# root value list: names in a comment\n"
                      "root ::= value (\",\" value){0,3} \"root\" [a-z-]\n"
                      "value ::= \"\\\"value\\\"\" | digit+ | \"x\" ws-1\n"
                      "digit ::= [0-9]\n"
                      "ws-1 ::= [ \\t]?\n";
    char *out = NULL;
    size_t n = 0;
    kite_error e = {0};
    assert_int_equal(kite_gbnf_prefix_rules(src, strlen(src), "t0-", &out, &n, &e), KITE_OK);
    assert_int_equal(n, strlen(out));
    assert_non_null(strstr(out, "t0-root ::= t0-value"));
    assert_non_null(strstr(out, "t0-ws-1 ::= [ \\t]?"));
    assert_non_null(strstr(out, "\"root\" [a-z-]"));
    assert_non_null(strstr(out, "{0,3}"));
    assert_non_null(strstr(out, "# root value list"));
    /* the renamed grammar (started at its renamed root) matches exactly what the original matches */
    char *wrapped = malloc(strlen(out) + 32);
    strcpy(wrapped, out);
    strcat(wrapped, "root ::= t0-root\n");
    kite_gbnf *ga, *gb;
    kite_gmatch *a = matcher_of(src, &ga), *b = matcher_of(wrapped, &gb);
    const char *cases[] = {"\"value\"rootq", "12,3,\"value\",x rootz", "x\troot-", "1,2,3,4,5rootq", "rootq", "\"value\"root",
                           "7root9"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (accepts(a, cases[i]) != accepts(b, cases[i])) fail_msg("renaming changed the language on \"%s\"", cases[i]);
    assert_true(accepts(b, "12,3,\"value\",x rootz"));
    assert_false(accepts(b, "1,2,3,4,5rootq")); /* at most 3 repeats, as before */
    kite_gmatch_free(a);
    kite_gmatch_free(b);
    kite_gbnf_free(ga);
    kite_gbnf_free(gb);
    free(wrapped);
    free(out);
    /* not GBNF: an unterminated literal or class */
    assert_int_not_equal(kite_gbnf_prefix_rules("root ::= \"abc", 13, "p-", &out, NULL, &e), KITE_OK);
    assert_non_null(strstr(e.msg, "unterminated literal"));
    assert_null(out);
    assert_int_not_equal(kite_gbnf_prefix_rules("root ::= [abc", 13, "p-", &out, NULL, &e), KITE_OK);
    assert_non_null(strstr(e.msg, "unterminated class"));
}

static void test_literal(void **state) {
    (void)state;
    const char *texts[] = {"<tool_call>\n{\"name\": \"f\", \"arguments\": ", "back\\slash \"quoted\"\t\r\n", "名前 émoji 😀 [TOOL_CALLS]",
                           "\x01\x1f control"};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        char *lit = kite_gbnf_literal(texts[i], strlen(texts[i]));
        assert_non_null(lit);
        char *g = malloc(strlen(lit) + 16);
        strcpy(g, "root ::= ");
        strcat(g, lit);
        kite_gbnf *gb;
        kite_gmatch *m = matcher_of(g, &gb);
        assert_true(accepts(m, texts[i]));
        /* exactly that text: one byte less or one more is refused */
        char *shorter = strdup(texts[i]);
        shorter[strlen(shorter) - 1] = 0;
        assert_false(accepts(m, shorter));
        char *longer = malloc(strlen(texts[i]) + 2);
        strcpy(longer, texts[i]);
        strcat(longer, "x");
        assert_false(accepts(m, longer));
        free(shorter);
        free(longer);
        kite_gmatch_free(m);
        kite_gbnf_free(gb);
        free(g);
        free(lit);
    }
    assert_null(kite_gbnf_literal("\xff\xfe", 2)); /* not UTF-8: no literal spells it */
}

/* A random walk through the grammar's sentences (each step a random allowed byte, stopping once
 * accepting with some probability): every such sentence must be a call the parser reads back. */
static size_t random_sentence(kite_gmatch *m, uint64_t *rng, char *out, size_t cap) {
    int32_t s = kite_gmatch_start(m);
    size_t n = 0;
    while (n + 1 < cap) {
        *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
        if (kite_gmatch_accepting(m, s) && ((*rng >> 33) % 4 == 0 || !kite_gmatch_can_continue(m, s))) break;
        uint64_t bits[4];
        kite_gmatch_allowed_bytes(m, s, bits);
        int allowed[256], k = 0;
        for (int b = 0; b < 256; b++)
            if ((bits[b >> 6] >> (b & 63)) & 1) allowed[k++] = b;
        assert_true(k > 0);
        /* prefer the end of a string or number so sentences stay short */
        int b = allowed[(*rng >> 40) % (uint64_t)k];
        s = kite_gmatch_step(m, s, (uint8_t)b);
        assert_true(s >= 0);
        out[n++] = (char)b;
    }
    out[n] = 0;
    return kite_gmatch_accepting(m, s) ? n : 0;
}

static void test_tool_grammar(void **state) {
    (void)state;
    const char *tools = "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
                        "\"properties\":{\"unit\":{\"enum\":[\"c\",\"f\"]},\"n\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":3}},"
                        "\"required\":[\"unit\",\"n\"],\"additionalProperties\":false}}},"
                        "{\"type\":\"function\",\"function\":{\"name\":\"ping\"}}]";
    kite_tool_format formats[] = {KITE_TOOL_FORMAT_HERMES, KITE_TOOL_FORMAT_LLAMA3, KITE_TOOL_FORMAT_MISTRAL,
                                  KITE_TOOL_FORMAT_DEEPSEEK, KITE_TOOL_FORMAT_GRANITE, KITE_TOOL_FORMAT_GENERIC,
                                  KITE_TOOL_FORMAT_COMMAND_R, KITE_TOOL_FORMAT_GLM4};
    uint64_t rng = 42;
    for (size_t f = 0; f < sizeof formats / sizeof formats[0]; f++) {
        for (int named = 0; named < 2; named++) {
            char *gbnf = NULL;
            kite_error e = {0};
            if (kite_tool_grammar(formats[f], tools, named ? "get_weather" : NULL, &gbnf, NULL, &e))
                fail_msg("%s: %s", kite_tool_format_name(formats[f]), e.msg);
            kite_gbnf *g;
            kite_gmatch *m = matcher_of(gbnf, &g);
            int seen_ping = 0, checked = 0;
            for (int trial = 0; trial < 40; trial++) {
                char text[2048];
                size_t n = random_sentence(m, &rng, text, sizeof text);
                if (!n) continue;
                checked++;
                kite_tool_parse p;
                assert_int_equal(kite_tool_parse_text(&(kite_tool_parse_options){.format = formats[f]}, text, n, &p, &e), KITE_OK);
                if (p.n_calls != 1 || p.problem[0])
                    fail_msg("%s: the forced text is not one call: %s (%s)", kite_tool_format_name(formats[f]), text, p.problem);
                if (named) assert_string_equal(p.calls[0].name, "get_weather");
                if (!strcmp(p.calls[0].name, "ping")) seen_ping++;
                else {
                    /* the schema: unit c|f, n in 1..3, nothing else */
                    const char *a = p.calls[0].arguments;
                    assert_true(strstr(a, "\"unit\":\"c\"") || strstr(a, "\"unit\":\"f\""));
                    assert_true(strstr(a, "\"n\":1") || strstr(a, "\"n\":2") || strstr(a, "\"n\":3"));
                }
                kite_tool_parse_clear(&p);
            }
            assert_true(checked >= 20);
            if (!named) assert_true(seen_ping > 0); /* "required": either tool */
            kite_gmatch_free(m);
            kite_gbnf_free(g);
            free(gbnf);
        }
    }
    /* tool_choice auto in the formats whose triggers are their own: Command R's "Action:" anywhere, GLM-4's
     * name lines at the start; once triggered, only a call of the tools completes the text */
    static const struct { kite_tool_format format; const char *text; bool accepted; } lazy[] = {
        {KITE_TOOL_FORMAT_GLM4, "Hello there.", true},
        {KITE_TOOL_FORMAT_GLM4, "ping\n{}", true},
        {KITE_TOOL_FORMAT_GLM4, "\nget_weather\n{\"unit\": \"c\", \"n\": 2}", true},
        {KITE_TOOL_FORMAT_GLM4, "get_weather\n{\"unit\": \"k\", \"n\": 2}", false},
        {KITE_TOOL_FORMAT_GLM4, "ping\nhello", false},
        {KITE_TOOL_FORMAT_GLM4, "So: ping\nhello", true}, /* not at the start: free */
        {KITE_TOOL_FORMAT_COMMAND_R, "I will look it up. Action: ```json\n[{\"tool_name\": \"ping\", \"parameters\": {}}]\n```", true},
        {KITE_TOOL_FORMAT_COMMAND_R, "Action: maybe later", false},
        {KITE_TOOL_FORMAT_COMMAND_R, "No tools needed.", true},
    };
    for (size_t i = 0; i < sizeof lazy / sizeof lazy[0]; i++) {
        char *lg = NULL;
        kite_error le = {0};
        if (kite_tool_grammar_lazy(lazy[i].format, tools, false, &lg, NULL, &le)) fail_msg("lazy %zu: %s", i, le.msg);
        kite_gbnf *g;
        kite_gmatch *m = matcher_of(lg, &g);
        int32_t st = kite_gmatch_step_bytes(m, kite_gmatch_start(m), (const uint8_t *)lazy[i].text, strlen(lazy[i].text));
        bool ok = st >= 0 && kite_gmatch_accepting(m, st);
        if (ok != lazy[i].accepted) fail_msg("lazy %zu (%s): '%s' accepted=%d", i, kite_tool_format_name(lazy[i].format), lazy[i].text, ok);
        kite_gmatch_free(m);
        kite_gbnf_free(g);
        free(lg);
    }
    /* errors name the tool */
    char *gbnf = NULL;
    kite_error e = {0};
    const char *bad = "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"array\",\"minItems\":2,\"maxItems\":1}}}]";
    assert_int_not_equal(kite_tool_grammar(KITE_TOOL_FORMAT_HERMES, bad, NULL, &gbnf, NULL, &e), KITE_OK);
    assert_non_null(strstr(e.msg, "tools[0].function.parameters"));
    assert_int_not_equal(kite_tool_grammar(KITE_TOOL_FORMAT_HERMES, tools, "nope", &gbnf, NULL, &e), KITE_OK);
    assert_non_null(strstr(e.msg, "no tool is named 'nope'"));
    assert_int_not_equal(kite_tool_grammar(KITE_TOOL_FORMAT_HERMES, "{}", NULL, &gbnf, NULL, &e), KITE_OK);
    assert_null(gbnf);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prefix_rules),
        cmocka_unit_test(test_literal),
        cmocka_unit_test(test_tool_grammar),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
