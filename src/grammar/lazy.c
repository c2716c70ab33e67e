/* Lazy grammars (compose.h: kite_gbnf_lazy): the free text before a trigger as rules of an automaton over
 * the triggers' characters, the grammar after it under a prefix of its own. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/compile_internal.h"
#include "grammar/compose.h"

enum { MAX_NODES = KITE_LAZY_MAX_TRIGGERS * KITE_LAZY_MAX_TRIGGER_CHARS + 1 };

/* The triggers as code points and the distinct proper prefixes of them (the automaton's states). */
typedef struct lazy_automaton {
    uint32_t cps[KITE_LAZY_MAX_TRIGGERS][KITE_LAZY_MAX_TRIGGER_CHARS];
    size_t len[KITE_LAZY_MAX_TRIGGERS];
    size_t n_triggers;
    /* State k is the prefix cps[node_trigger[k]][0..node_len[k]); state 0 is the empty prefix. */
    size_t node_trigger[MAX_NODES], node_len[MAX_NODES];
    size_t n_nodes;
    uint32_t alphabet[MAX_NODES]; /* the distinct code points of the triggers */
    size_t n_alphabet;
} lazy_automaton;

/* s[0..n) equals a whole trigger. */
static bool is_trigger(const lazy_automaton *a, const uint32_t *s, size_t n) {
    for (size_t t = 0; t < a->n_triggers; t++)
        if (a->len[t] == n && !memcmp(a->cps[t], s, n * sizeof *s)) return true;
    return false;
}

/* The state whose prefix is s[0..n), or -1. */
static long node_of(const lazy_automaton *a, const uint32_t *s, size_t n) {
    for (size_t k = 0; k < a->n_nodes; k++)
        if (a->node_len[k] == n && !memcmp(a->cps[a->node_trigger[k]], s, n * sizeof *s)) return (long)k;
    return -1;
}

/* The state after code point c in state k: the longest suffix of the text that is a proper prefix of a
 * trigger; -1 when the text now ends with a whole trigger (free text may not hold one). anchored: no
 * suffixes (the text is matched from its start), and -2 when the text stops being a trigger prefix. */
static long next_node(const lazy_automaton *a, size_t k, uint32_t c, bool anchored) {
    uint32_t s[KITE_LAZY_MAX_TRIGGER_CHARS + 1];
    size_t n = a->node_len[k];
    memcpy(s, a->cps[a->node_trigger[k]], n * sizeof *s);
    s[n++] = c;
    if (anchored) {
        if (is_trigger(a, s, n)) return -1;
        long to = node_of(a, s, n);
        return to >= 0 ? to : -2;
    }
    for (size_t from = 0; from < n; from++)
        if (is_trigger(a, s + from, n - from)) return -1;
    for (size_t from = 0; from < n; from++) {
        long to = node_of(a, s + from, n - from);
        if (to >= 0) return to;
    }
    return 0;
}

static void put_class(gtext *t, cp_set *set) {
    gtext_puts(t, "[");
    for (size_t i = 0; i < set->n; i++) {
        gtext_class_cp(t, set->r[i].lo);
        if (set->r[i].hi != set->r[i].lo) {
            gtext_puts(t, "-");
            gtext_class_cp(t, set->r[i].hi);
        }
    }
    gtext_puts(t, "]");
}

/* Rules "lazy-free-K" (unanchored) or "lazy-start-K" (anchored) for every state. */
static void put_states(gtext *t, const lazy_automaton *a, bool anchored) {
    const char *name = anchored ? "lazy-start" : "lazy-free";
    for (size_t k = 0; k < a->n_nodes; k++) {
        gtext_printf(t, "%s-%zu ::= \"\"", name, k);
        /* the characters no trigger holds keep the text free (back to the empty prefix); at the start,
         * whitespace belongs to lazy-ws: free text proper begins at its first other character */
        cp_set others = {0};
        for (size_t i = 0; i < a->n_alphabet; i++) cp_set_add(&others, a->alphabet[i], a->alphabet[i]);
        if (anchored && k == 0)
            for (const char *w = " \t\n\r"; *w; w++) cp_set_add(&others, (uint32_t)*w, (uint32_t)*w);
        cp_set_normalize(&others);
        cp_set_complement(&others);
        for (size_t i = 0; i < a->n_alphabet; i++) {
            uint32_t c = a->alphabet[i];
            if (anchored && k == 0 && (c == ' ' || c == '\t' || c == '\n' || c == '\r')) continue;
            long to = next_node(a, k, c, anchored);
            if (to == -1) continue; /* the character completes a trigger: only the grammar may write it */
            gtext_puts(t, " | \"");
            gtext_literal_cp(t, c);
            if (to == -2) gtext_puts(t, "\" lazy-any");
            else gtext_printf(t, "\" %s-%ld", name, to);
        }
        if (others.failed) t->failed = true;
        if (others.n) {
            gtext_puts(t, " | ");
            put_class(t, &others);
            gtext_printf(t, anchored ? " lazy-any" : " %s-0", name);
        }
        cp_set_free(&others);
        gtext_puts(t, "\n");
    }
}

int kite_gbnf_lazy(const char *gbnf, size_t len, const char *const *triggers, size_t n_triggers, bool at_start, char **out,
                   size_t *out_len, kite_error *e) {
    *out = NULL;
    if (out_len) *out_len = 0;
    if (!gbnf || !triggers || n_triggers == 0 || n_triggers > KITE_LAZY_MAX_TRIGGERS)
        return kite_fail(e, KITE_ERR_INVALID_ARG, "lazy grammar: between 1 and %d triggers are needed, got %zu",
                         KITE_LAZY_MAX_TRIGGERS, n_triggers);
    lazy_automaton *a = calloc(1, sizeof *a);
    if (!a) return kite_fail(e, KITE_ERR_NOMEM, "lazy grammar: out of memory");
    int st = KITE_OK;
    a->n_triggers = n_triggers;
    a->n_nodes = 1; /* the empty prefix */
    for (size_t t = 0; t < n_triggers && !st; t++) {
        const char *s = triggers[t];
        size_t n = s ? strlen(s) : 0, pos = 0;
        if (!n) {
            st = kite_fail(e, KITE_ERR_INVALID_ARG, "lazy grammar: trigger %zu is empty", t);
            break;
        }
        while (pos < n) {
            uint32_t cp;
            if (a->len[t] == KITE_LAZY_MAX_TRIGGER_CHARS) {
                st = kite_fail(e, KITE_ERR_INVALID_ARG, "lazy grammar: trigger %zu is longer than %d characters", t,
                               KITE_LAZY_MAX_TRIGGER_CHARS);
                break;
            }
            size_t at = pos;
            if (!utf8_decode(s, n, &pos, &cp)) {
                st = kite_fail(e, KITE_ERR_INVALID_ARG, "lazy grammar: trigger %zu is not valid UTF-8 at byte %zu", t, at);
                break;
            }
            a->cps[t][a->len[t]++] = cp;
        }
        if (st) break;
        for (size_t k = 0; k < a->len[t]; k++) {
            uint32_t c = a->cps[t][k];
            bool seen = false;
            for (size_t i = 0; i < a->n_alphabet && !seen; i++) seen = a->alphabet[i] == c;
            if (!seen) a->alphabet[a->n_alphabet++] = c;
        }
    }
    /* The states: every distinct proper prefix of a trigger (non-empty; 0 is the empty one). */
    for (size_t t = 0; t < n_triggers && !st; t++)
        for (size_t k = 1; k < a->len[t]; k++)
            if (node_of(a, a->cps[t], k) < 0) {
                a->node_trigger[a->n_nodes] = t;
                a->node_len[a->n_nodes++] = k;
            }
    char *body = NULL;
    if (!st) st = kite_gbnf_prefix_rules(gbnf, len, "lazy-g-", &body, NULL, e);
    gtext t = {0};
    if (!st) {
        if (at_start) {
            gtext_puts(&t, "root ::= lazy-ws lazy-start-0 | lazy-ws lazy-g-root\n"
                           "lazy-ws ::= [ \\t\\n\\r]*\n"
                           "lazy-any ::= .*\n");
        } else {
            gtext_puts(&t, "root ::= lazy-free-0 | lazy-free-0 lazy-g-root\n");
        }
        put_states(&t, a, at_start);
        gtext_puts(&t, body);
        gtext_puts(&t, "\n");
        st = gtext_check(&t, "lazy grammar", e);
    }
    free(body);
    free(a);
    if (st) {
        gtext_free(&t);
        return st;
    }
    *out = gtext_take(&t, out_len);
    return KITE_OK;
}
