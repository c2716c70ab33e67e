/* Lazy grammars (src/grammar/compose.h: kite_gbnf_lazy) against their definition, checked by brute force
 * with PCRE2 deciding the grammar part: a text is accepted iff it is free text holding no trigger (strstr
 * on every trigger), or such free text followed by a full match of the grammar (a PCRE2 pattern written
 * beside its GBNF); a prefix is viable iff its free part holds no trigger or some split leaves a partial
 * match of the grammar. Random triggers over a small alphabet with shared and overlapping prefixes and
 * multi-byte characters, random subjects; both modes (anywhere and at_start). Then the bad inputs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "grammar/compose.h"
#include "grammar/grammar.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rng(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* The characters triggers and subjects are made of (UTF-8): a tiny alphabet makes triggers occur. */
static const char *const CHARS[] = {"a", "b", "<", ">", " ", "\xc3\xa9", "\xe6\x97\xa5"};
enum { N_CHARS = sizeof CHARS / sizeof CHARS[0] };

/* What follows the trigger in the grammar, as GBNF and as the equivalent PCRE2 pattern. */
static const char *const TAIL_GBNF[] = {"\"\"", "[ab]{1,3} \">\"", "(\"a\" | \"\\u65E5\")* \"b\"", "\" \" [^ ]+"};
static const char *const TAIL_RE[] = {"", "[ab]{1,3}>", "(?:a|\\x{65E5})*b", " [^ ]+"};
enum { N_TAILS = sizeof TAIL_GBNF / sizeof TAIL_GBNF[0] };

static void random_text(char *out, size_t cap, int min_chars, int max_chars) {
    int n = min_chars + (int)(rng() % (uint64_t)(max_chars - min_chars + 1));
    out[0] = '\0';
    for (int i = 0; i < n; i++) {
        const char *c = CHARS[rng() % N_CHARS];
        if (strlen(out) + strlen(c) < cap) strcat(out, c);
    }
}

/* PCRE2 spelling of UTF-8 text (every character escaped by code point). */
static void re_literal(const char *s, char *out, size_t cap) {
    out[0] = '\0';
    for (size_t i = 0; s[i];) {
        unsigned char c = (unsigned char)s[i];
        uint32_t cp;
        size_t n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
        cp = n == 1 ? c : c & (0x7F >> n);
        for (size_t k = 1; k < n; k++) cp = (cp << 6) | ((unsigned char)s[i + k] & 0x3F);
        char tmp[16];
        snprintf(tmp, sizeof tmp, "\\x{%X}", cp);
        if (strlen(out) + strlen(tmp) < cap) strcat(out, tmp);
        i += n;
    }
}

static bool has_trigger(const char *s, size_t n, char triggers[][32], size_t n_triggers) {
    for (size_t t = 0; t < n_triggers; t++) {
        size_t tl = strlen(triggers[t]);
        for (size_t i = 0; i + tl <= n; i++)
            if (!memcmp(s + i, triggers[t], tl)) return true;
    }
    return false;
}

static bool starts_with_trigger(const char *s, size_t n, char triggers[][32], size_t n_triggers) {
    for (size_t t = 0; t < n_triggers; t++) {
        size_t tl = strlen(triggers[t]);
        if (tl <= n && !memcmp(s, triggers[t], tl)) return true;
    }
    return false;
}

/* The definition: full (accepted) or viable (a prefix of an accepted text) for subject s[0..n). */
static bool reference(const char *s, size_t n, bool viable, bool at_start, char triggers[][32], size_t n_triggers,
                      pcre2_code *body, pcre2_match_data *md) {
    if (at_start) {
        size_t w = 0;
        while (w < n && (s[w] == ' ' || s[w] == '\t' || s[w] == '\n' || s[w] == '\r')) w++;
        /* free: the text after the whitespace does not begin with a trigger (it may still be one's prefix) */
        if (!starts_with_trigger(s + w, n - w, triggers, n_triggers)) return true;
        for (size_t j = 0; j <= w; j++) {
            int rc = pcre2_match(body, (PCRE2_SPTR)(s + j), n - j, 0, viable ? PCRE2_PARTIAL_HARD : 0, md, NULL);
            if (rc >= 0 || (viable && rc == PCRE2_ERROR_PARTIAL)) return true;
        }
        return false;
    }
    if (!has_trigger(s, n, triggers, n_triggers)) return true;
    for (size_t i = 0; i <= n; i++) {
        if (has_trigger(s, i, triggers, n_triggers)) break; /* longer free parts hold one too */
        int rc = pcre2_match(body, (PCRE2_SPTR)(s + i), n - i, 0, viable ? PCRE2_PARTIAL_HARD : 0, md, NULL);
        if (rc >= 0 || (viable && rc == PCRE2_ERROR_PARTIAL)) return true;
    }
    return false;
}

static void test_lazy_against_definition(void **state) {
    (void)state;
    pcre2_match_data *md = pcre2_match_data_create(8, NULL);
    size_t checked = 0, accepted = 0, fired = 0;
    for (int round = 0; round < 400; round++) {
        char triggers[3][32];
        const char *tp[3];
        size_t n_triggers = 1 + rng() % 3;
        for (size_t t = 0; t < n_triggers; t++) {
            do random_text(triggers[t], sizeof triggers[t], 1, 3);
            while (triggers[t][0] == ' '); /* a trigger never begins with whitespace (at_start skips it) */
            tp[t] = triggers[t];
        }
        bool at_start = rng() % 3 == 0;
        size_t tail = rng() % N_TAILS;
        /* the grammar: a trigger then the tail */
        char gbnf[512], re[1024];
        snprintf(gbnf, sizeof gbnf, "root ::= trig tail\ntail ::= %s\ntrig ::= ", TAIL_GBNF[tail]);
        snprintf(re, sizeof re, "(?:");
        for (size_t t = 0; t < n_triggers; t++) {
            char *lit = kite_gbnf_literal(triggers[t], strlen(triggers[t]));
            assert_non_null(lit);
            char rl[256];
            re_literal(triggers[t], rl, sizeof rl);
            snprintf(gbnf + strlen(gbnf), sizeof gbnf - strlen(gbnf), "%s%s", t ? " | " : "", lit);
            snprintf(re + strlen(re), sizeof re - strlen(re), "%s%s", t ? "|" : "", rl);
            free(lit);
        }
        snprintf(gbnf + strlen(gbnf), sizeof gbnf - strlen(gbnf), "\n");
        snprintf(re + strlen(re), sizeof re - strlen(re), ")%s\\z", TAIL_RE[tail]);
        int errcode;
        PCRE2_SIZE erroff;
        pcre2_code *body = pcre2_compile((PCRE2_SPTR)re, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_ANCHORED, &errcode, &erroff, NULL);
        if (!body) fail_msg("pcre2 rejects %s", re);

        char *lazy = NULL;
        size_t lazy_len = 0;
        kite_error e = {0};
        if (kite_gbnf_lazy(gbnf, strlen(gbnf), tp, n_triggers, at_start, &lazy, &lazy_len, &e))
            fail_msg("lazy grammar failed: %s\n%s", e.msg, gbnf);
        kite_gbnf *g = NULL;
        kite_gmatch *m = NULL;
        if (kite_gbnf_parse(lazy, lazy_len, NULL, &g, &e)) fail_msg("lazy grammar does not parse: %s\n%s", e.msg, lazy);
        assert_int_equal(kite_gmatch_new(g, &m, &e), KITE_OK);
        for (int k = 0; k < 80; k++) {
            char subject[128];
            size_t bounds[16], n_bounds = 0;
            /* half the subjects hold a trigger and text after it */
            if (k % 2) {
                char pre[48], post[48];
                random_text(pre, sizeof pre, 0, 5);
                random_text(post, sizeof post, 0, 4);
                snprintf(subject, sizeof subject, "%s%s%s", pre, triggers[rng() % n_triggers], post);
            } else {
                random_text(subject, sizeof subject, 0, 9);
            }
            size_t len = strlen(subject);
            for (size_t i = 1; i <= len; i++)
                if (i == len || ((unsigned char)subject[i] & 0xC0) != 0x80) bounds[n_bounds < 16 ? n_bounds++ : 15] = i;
            bool want = reference(subject, len, false, at_start, triggers, n_triggers, body, md);
            int32_t st = kite_gmatch_step_bytes(m, kite_gmatch_start(m), (const uint8_t *)subject, len);
            assert_int_not_equal(st, KITE_GSTATE_LIMIT);
            if (kite_gmatch_accepting(m, st) != want)
                fail_msg("triggers %zu at_start %d, grammar:\n%s\nsubject \"%s\": want %d\nlazy:\n%s", n_triggers, at_start, gbnf,
                         subject, want, lazy);
            accepted += want;
            fired += want && has_trigger(subject, len, triggers, n_triggers) && !at_start;
            checked++;
            for (size_t b = 0; b < n_bounds; b++) {
                bool viable = reference(subject, bounds[b], true, at_start, triggers, n_triggers, body, md);
                int32_t ps = kite_gmatch_step_bytes(m, kite_gmatch_start(m), (const uint8_t *)subject, bounds[b]);
                assert_int_not_equal(ps, KITE_GSTATE_LIMIT);
                if ((ps >= 0) != viable)
                    fail_msg("triggers %zu at_start %d, grammar:\n%s\nprefix \"%.*s\": viable %d, state %d", n_triggers, at_start, gbnf,
                             (int)bounds[b], subject, viable, ps);
            }
        }
        kite_gmatch_free(m);
        kite_gbnf_free(g);
        free(lazy);
        pcre2_code_free(body);
    }
    pcre2_match_data_free(md);
    print_message("%zu subjects, %zu accepted, %zu of them calls after free text\n", checked, accepted, fired);
    assert_true(accepted > checked / 10);
    assert_true(fired > checked / 50);
}

/* Free text stays cheap: a long text without a trigger keeps the matcher's states few (the automaton's
 * states, not one per byte). */
static void test_lazy_free_text_states(void **state) {
    (void)state;
    const char *trig[] = {"<tool_call>"};
    static const char body[] = "root ::= \"<tool_call>\" [0-9]+ \"</tool_call>\"\n";
    char *lazy = NULL;
    size_t n = 0;
    kite_error e = {0};
    assert_int_equal(kite_gbnf_lazy(body, strlen(body), trig, 1, false, &lazy, &n, &e), KITE_OK);
    kite_gbnf *g = NULL;
    kite_gmatch *m = NULL;
    assert_int_equal(kite_gbnf_parse(lazy, n, NULL, &g, &e), KITE_OK);
    assert_int_equal(kite_gmatch_new(g, &m, &e), KITE_OK);
    int32_t st = kite_gmatch_start(m), max_state = st;
    static const char text[] = "Let me check <tool the weather <tool_cal in Paris; \xe6\x97\xa5\xe6\x9c\xac <<tool_call";
    for (int rep = 0; rep < 200; rep++)
        for (size_t i = 0; i + 1 < sizeof text; i++) {
            st = kite_gmatch_step(m, st, (uint8_t)text[i]);
            assert_true(st >= 0);
            if (st > max_state) max_state = st;
        }
    assert_true(max_state < 64);
    st = kite_gmatch_step_bytes(m, st, (const uint8_t *)">42</tool_call>", 15);
    assert_true(kite_gmatch_accepting(m, st));
    assert_false(kite_gmatch_can_continue(m, st));
    /* the trigger then anything the grammar refuses is dead */
    assert_true(kite_gmatch_step_bytes(m, kite_gmatch_start(m), (const uint8_t *)"hi <tool_call>x", 15) < 0);
    kite_gmatch_free(m);
    kite_gbnf_free(g);
    free(lazy);
}

static void test_lazy_bad_input(void **state) {
    (void)state;
    static const char body[] = "root ::= \"x\"\n";
    char *out = NULL;
    kite_error e = {0};
    const char *empty[] = {""};
    assert_int_equal(kite_gbnf_lazy(body, strlen(body), empty, 1, false, &out, NULL, &e), KITE_ERR_INVALID_ARG);
    assert_non_null(strstr(e.msg, "trigger 0 is empty"));
    const char *bad_utf8[] = {"ok", "a\xff"};
    assert_int_equal(kite_gbnf_lazy(body, strlen(body), bad_utf8, 2, false, &out, NULL, &e), KITE_ERR_INVALID_ARG);
    assert_non_null(strstr(e.msg, "trigger 1 is not valid UTF-8 at byte 1"));
    char longest[KITE_LAZY_MAX_TRIGGER_CHARS + 2];
    memset(longest, 'a', sizeof longest - 1);
    longest[sizeof longest - 1] = '\0';
    const char *too_long[] = {longest};
    assert_int_equal(kite_gbnf_lazy(body, strlen(body), too_long, 1, false, &out, NULL, &e), KITE_ERR_INVALID_ARG);
    assert_int_equal(kite_gbnf_lazy(body, strlen(body), too_long, 0, false, &out, NULL, &e), KITE_ERR_INVALID_ARG);
    assert_int_equal(kite_gbnf_lazy(body, strlen(body), too_long, KITE_LAZY_MAX_TRIGGERS + 1, false, &out, NULL, &e),
                     KITE_ERR_INVALID_ARG);
    /* a grammar that is not GBNF is refused when the result is parsed, naming its position */
    const char *ok[] = {"x"};
    static const char broken[] = "root ::= \"x\n";
    assert_int_equal(kite_gbnf_lazy(broken, strlen(broken), ok, 1, false, &out, NULL, &e), KITE_ERR_FORMAT);
    assert_null(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lazy_against_definition),
        cmocka_unit_test(test_lazy_free_text_states),
        cmocka_unit_test(test_lazy_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
