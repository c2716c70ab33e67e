/* GBNF composition (compose.h). The lexer here knows only what it must step over to find rule names:
 * comments (# to the end of the line), "..." literals and [...] classes with their backslash escapes, and
 * {m,n} counts, whose digits would otherwise read as names. Each ends where gbnf.c's parser ends it. */
#include "grammar/compose.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/compile_internal.h"

static bool name_char(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* The end of the quoted span opened at text[at] (closing quote included), or 0 when it never closes. */
static size_t span_end(const char *text, size_t len, size_t at, char close) {
    for (size_t i = at + 1; i < len; i++) {
        if (text[i] == '\\') i++;
        else if (text[i] == close) return i + 1;
    }
    return 0;
}

int kite_gbnf_prefix_rules(const char *gbnf, size_t len, const char *prefix, char **out, size_t *out_len, kite_error *e) {
    *out = NULL;
    if (out_len) *out_len = 0;
    gtext t = {0};
    size_t plen = strlen(prefix);
    for (size_t i = 0; i < len;) {
        unsigned char c = (unsigned char)gbnf[i];
        size_t end = i + 1;
        if (c == '#') { /* a comment ends at a line break, CR or LF, as the parser ends it */
            while (end < len && gbnf[end] != '\n' && gbnf[end] != '\r') end++;
        } else if (c == '"' || c == '[') {
            end = span_end(gbnf, len, i, c == '"' ? '"' : ']');
            if (!end) {
                gtext_free(&t);
                return kite_fail(e, KITE_ERR_FORMAT, "grammar: unterminated %s at byte %zu", c == '"' ? "literal" : "class", i);
            }
        } else if (c == '<') { /* a token reference <[id]> or <text>: not a rule name */
            while (end < len && gbnf[end] != '>' && gbnf[end] != '\n') end++;
            if (end < len && gbnf[end] == '>') end++;
        } else if (c == '{') {
            while (end < len && gbnf[end] != '}') end++;
            if (end < len) end++;
        } else if (name_char(c)) {
            while (end < len && name_char((unsigned char)gbnf[end])) end++;
            gtext_putn(&t, prefix, plen);
        }
        gtext_putn(&t, gbnf + i, end - i);
        i = end;
    }
    int st = gtext_check(&t, "composed grammar", e);
    if (st) {
        gtext_free(&t);
        return st;
    }
    *out = gtext_take(&t, out_len);
    return KITE_OK;
}

char *kite_gbnf_literal(const char *s, size_t n) {
    gtext t = {0};
    gtext_puts(&t, "\"");
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        if (!utf8_decode(s, n, &i, &cp)) { /* a literal spells code points: a lone byte has no spelling */
            gtext_free(&t);
            return NULL;
        }
        gtext_literal_cp(&t, cp);
    }
    gtext_puts(&t, "\"");
    if (t.failed) {
        gtext_free(&t);
        return NULL;
    }
    return gtext_take(&t, NULL);
}

int kite_gbnf_resolve_tokens(const char *gbnf, size_t len, kite_token_lookup_fn lookup, void *user, char **out,
                             size_t *out_len, kite_error *e) {
    *out = NULL;
    if (out_len) *out_len = 0;
    gtext t = {0};
    for (size_t i = 0; i < len;) {
        unsigned char c = (unsigned char)gbnf[i];
        size_t end = i + 1;
        if (c == '#') {
            while (end < len && gbnf[end] != '\n' && gbnf[end] != '\r') end++;
        } else if (c == '"' || c == '[') {
            end = span_end(gbnf, len, i, c == '"' ? '"' : ']');
            if (!end) end = len; /* the parser names the unterminated span */
        } else if (c == '<' && i + 1 < len && gbnf[i + 1] != '[') {
            while (end < len && gbnf[end] != '>' && gbnf[end] != '\n') end++;
            if (end < len && gbnf[end] == '>') {
                end++;
                int32_t id = lookup(user, gbnf + i, end - i);
                if (id < 0) {
                    gtext_free(&t);
                    bool printable = end - i <= 64;
                    for (size_t k = i; k < end && printable; k++) printable = gbnf[k] >= 0x20 && gbnf[k] < 0x7F;
                    if (!printable) /* an error stays one line */
                        return kite_fail(e, KITE_ERR_FORMAT, "grammar: the token reference at byte %zu is not a token of this model's vocabulary", i);
                    return kite_fail(e, KITE_ERR_FORMAT, "grammar: %.*s at byte %zu is not a token of this model's vocabulary",
                                     (int)(end - i), gbnf + i, i);
                }
                gtext_printf(&t, "<[%d]>", (int)id);
                i = end;
                continue;
            }
        }
        gtext_putn(&t, gbnf + i, end - i);
        i = end;
    }
    int st = gtext_check(&t, "grammar", e);
    if (st) {
        gtext_free(&t);
        return st;
    }
    *out = gtext_take(&t, out_len);
    return KITE_OK;
}
