/* Regular expressions to GBNF (kite_regex_to_gbnf, and JSON Schema "pattern" through regex_compile_expr).
 *
 * The subset is ECMAScript's with the u flag (code points, not UTF-16 units), so node's
 * `new RegExp("^(?:" + p + ")$", "u")` is the reference the tests compare against:
 *   literals (UTF-8), escapes \n \r \t \f \v \0 \cX \xHH \uHHHH (surrogate pairs joined) \u{H..} and
 *   \ before a syntax character ^ $ \ . * + ? ( ) [ ] { } | /; . (any code point but \n \r U+2028 U+2029);
 *   classes [..] and [^..] with ranges, and \d \w \s \D \W \S inside or outside them ([\b] is backspace);
 *   groups (...), (?:...), (?<name>...); alternation |; quantifiers * + ? {m} {m,} {m,n} with m, n <= 1000
 *   (a lazy ? after one is accepted and ignored: a grammar has no preference among matches);
 *   the anchors ^ and $ only at the start and end of a top-level alternative.
 * Rejected with an error naming the byte offset: backreferences (\1, \k<..>), lookaround ((?=, (?!,
 * (?<=, (?<!), word boundaries (\b \B), property escapes (\p{..}), flags groups, lone surrogates, and
 * anything the u flag makes a syntax error (a lone { } or ], an unknown escape).
 *
 * A full match (kite_regex_to_gbnf) treats the anchors as no-ops. A search (a schema "pattern", which
 * JSON Schema applies unanchored) puts any-text before an alternative without ^ and after one without $.
 * The output is a single expression (no helper rules): sequences, ( | ) groups and GBNF repetitions. */
#include <stdlib.h>
#include <string.h>

#include "grammar/compile.h"
#include "grammar/compile_internal.h"

enum {
    RX_MAX_DEPTH = 60,      /* nested groups: each may emit two GBNF groups, and GBNF allows 256 */
    RX_MAX_NODES = 100000,  /* AST nodes */
    RX_MAX_REPEAT = 1000,   /* m and n in {m,n} */
    RX_MAX_PATTERN = 1 << 20,
};
#define RX_UNBOUNDED UINT32_MAX

typedef enum rx_kind {
    RX_EMPTY,  /* matches only the empty string */
    RX_NONE,   /* matches nothing (an empty class) */
    RX_SET,    /* one code point from set */
    RX_SEQ,    /* kids in order */
    RX_ALT,    /* one of kids */
    RX_REPEAT, /* kids[0] from min to max times (max RX_UNBOUNDED = no limit) */
} rx_kind;

typedef struct rx_node {
    rx_kind kind;
    cp_set set;
    struct rx_node **kids;
    size_t n_kids, cap_kids;
    uint32_t min, max;
    bool optional; /* RX_ALT: the empty string is one more alternative */
} rx_node;

typedef struct rx_parser {
    const char *s;
    size_t n, pos;
    int depth;
    size_t n_nodes;
    const char *who;
    kite_error *e;
    int status; /* first failure, KITE_OK while none */
} rx_parser;

/* A top-level alternative with its anchors. */
typedef struct rx_branch {
    rx_node *body;
    bool anchored_start, anchored_end;
} rx_branch;

static void rx_free(rx_node *node) {
    if (!node) return;
    for (size_t i = 0; i < node->n_kids; i++) rx_free(node->kids[i]);
    free(node->kids);
    cp_set_free(&node->set);
    free(node);
}

static int rx_error(rx_parser *p, size_t at, const char *what) {
    if (p->status == KITE_OK) p->status = kite_fail(p->e, KITE_ERR_INVALID_ARG, "%s: %s at byte %zu", p->who, what, at);
    return p->status;
}

static rx_node *rx_new(rx_parser *p, rx_kind kind) {
    if (p->status) return NULL;
    if (++p->n_nodes > RX_MAX_NODES) {
        rx_error(p, p->pos, "the regex is too large (more than 100000 elements)");
        return NULL;
    }
    rx_node *node = calloc(1, sizeof *node);
    if (!node) {
        p->status = kite_fail(p->e, KITE_ERR_NOMEM, "%s: out of memory", p->who);
        return NULL;
    }
    node->kind = kind;
    return node;
}

static bool rx_add_kid(rx_parser *p, rx_node *parent, rx_node *kid) {
    if (parent->n_kids == parent->cap_kids) {
        size_t cap = parent->cap_kids ? parent->cap_kids * 2 : 4;
        rx_node **kids = realloc(parent->kids, cap * sizeof *kids);
        if (!kids) {
            rx_free(kid);
            p->status = kite_fail(p->e, KITE_ERR_NOMEM, "%s: out of memory", p->who);
            return false;
        }
        parent->kids = kids;
        parent->cap_kids = cap;
    }
    parent->kids[parent->n_kids++] = kid;
    return true;
}

static bool rx_set_ok(rx_parser *p, const cp_set *set) {
    if (!set->failed) return true;
    if (p->status == KITE_OK) p->status = kite_fail(p->e, KITE_ERR_NOMEM, "%s: out of memory", p->who);
    return false;
}

/* \d \w \s and their complements, added to set. */
static void add_class_escape(cp_set *set, char c) {
    cp_set tmp = {0};
    switch (c | 0x20) {
    case 'd': cp_set_add(&tmp, '0', '9'); break;
    case 'w':
        cp_set_add(&tmp, '0', '9');
        cp_set_add(&tmp, 'A', 'Z');
        cp_set_add(&tmp, '_', '_');
        cp_set_add(&tmp, 'a', 'z');
        break;
    default: /* 's': ECMAScript's WhiteSpace and LineTerminator */
        cp_set_add(&tmp, 0x09, 0x0D);
        cp_set_add(&tmp, 0x20, 0x20);
        cp_set_add(&tmp, 0xA0, 0xA0);
        cp_set_add(&tmp, 0x1680, 0x1680);
        cp_set_add(&tmp, 0x2000, 0x200A);
        cp_set_add(&tmp, 0x2028, 0x2029);
        cp_set_add(&tmp, 0x202F, 0x202F);
        cp_set_add(&tmp, 0x205F, 0x205F);
        cp_set_add(&tmp, 0x3000, 0x3000);
        cp_set_add(&tmp, 0xFEFF, 0xFEFF);
        break;
    }
    cp_set_normalize(&tmp);
    if (c >= 'A' && c <= 'Z') cp_set_complement(&tmp);
    cp_set_add_set(set, &tmp);
    cp_set_free(&tmp);
}

static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Reads exactly `count` hex digits at p->pos; -1 if they are not there. */
static long read_hex(rx_parser *p, int count) {
    if (p->n - p->pos < (size_t)count) return -1;
    long v = 0;
    for (int i = 0; i < count; i++) {
        int h = hex_value(p->s[p->pos + (size_t)i]);
        if (h < 0) return -1;
        v = v * 16 + h;
    }
    p->pos += (size_t)count;
    return v;
}

/* \u escapes: \uHHHH (a surrogate pair of two escapes is one code point) or \u{H...}. p->pos is after 'u'. */
static bool parse_unicode_escape(rx_parser *p, size_t start, uint32_t *cp) {
    if (p->pos < p->n && p->s[p->pos] == '{') {
        p->pos++;
        uint32_t v = 0;
        size_t digits = 0;
        while (p->pos < p->n && hex_value(p->s[p->pos]) >= 0) {
            v = v * 16 + (uint32_t)hex_value(p->s[p->pos]);
            if (v > 0x10FFFF) break;
            p->pos++;
            digits++;
        }
        if (!digits || v > 0x10FFFF || p->pos >= p->n || p->s[p->pos] != '}') {
            rx_error(p, start, "invalid \\u{...} escape");
            return false;
        }
        p->pos++;
        if (v >= 0xD800 && v <= 0xDFFF) {
            rx_error(p, start, "a lone surrogate is not supported");
            return false;
        }
        *cp = v;
        return true;
    }
    long v = read_hex(p, 4);
    if (v < 0) {
        rx_error(p, start, "invalid \\u escape");
        return false;
    }
    if (v >= 0xD800 && v <= 0xDBFF && p->n - p->pos >= 6 && p->s[p->pos] == '\\' && p->s[p->pos + 1] == 'u') {
        size_t save = p->pos;
        p->pos += 2;
        long low = read_hex(p, 4);
        if (low >= 0xDC00 && low <= 0xDFFF) {
            *cp = 0x10000 + (((uint32_t)v - 0xD800) << 10) + ((uint32_t)low - 0xDC00);
            return true;
        }
        p->pos = save;
    }
    if (v >= 0xD800 && v <= 0xDFFF) {
        rx_error(p, start, "a lone surrogate is not supported");
        return false;
    }
    *cp = (uint32_t)v;
    return true;
}

/* One escape at p->pos (the backslash). Either a single code point (*cp, returns 1) or a class escape
 * added to set (returns 2); 0 on error. in_class allows \b (backspace) and \-. */
static int parse_escape(rx_parser *p, bool in_class, uint32_t *cp, cp_set *set) {
    size_t start = p->pos;
    p->pos++;
    if (p->pos >= p->n) {
        rx_error(p, start, "the pattern ends in a backslash");
        return 0;
    }
    char c = p->s[p->pos++];
    switch (c) {
    case 'd': case 'D': case 'w': case 'W': case 's': case 'S': add_class_escape(set, c); return 2;
    case 'n': *cp = '\n'; return 1;
    case 'r': *cp = '\r'; return 1;
    case 't': *cp = '\t'; return 1;
    case 'f': *cp = '\f'; return 1;
    case 'v': *cp = '\v'; return 1;
    case '0':
        if (p->pos < p->n && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') {
            rx_error(p, start, "octal escapes are not supported");
            return 0;
        }
        *cp = 0;
        return 1;
    case 'c':
        if (p->pos < p->n && ((p->s[p->pos] | 0x20) >= 'a' && (p->s[p->pos] | 0x20) <= 'z')) {
            *cp = (uint32_t)(p->s[p->pos++] & 0x1F);
            return 1;
        }
        rx_error(p, start, "invalid \\c escape");
        return 0;
    case 'x': {
        long v = read_hex(p, 2);
        if (v < 0) {
            rx_error(p, start, "invalid \\x escape");
            return 0;
        }
        *cp = (uint32_t)v;
        return 1;
    }
    case 'u': return parse_unicode_escape(p, start, cp) ? 1 : 0;
    case 'b':
        if (in_class) {
            *cp = 0x08;
            return 1;
        }
        rx_error(p, start, "word boundaries (\\b) are not supported");
        return 0;
    case 'B': rx_error(p, start, "word boundaries (\\B) are not supported"); return 0;
    case 'k': rx_error(p, start, "backreferences are not supported"); return 0;
    case 'p': case 'P': rx_error(p, start, "unicode property escapes are not supported"); return 0;
    case '-':
        if (in_class) {
            *cp = '-';
            return 1;
        }
        break;
    default:
        if (c >= '1' && c <= '9') {
            rx_error(p, start, "backreferences are not supported");
            return 0;
        }
        if (strchr("^$\\.*+?()[]{}|/", c)) {
            *cp = (uint32_t)(unsigned char)c;
            return 1;
        }
        break;
    }
    rx_error(p, start, "invalid escape");
    return 0;
}

/* One code point of the pattern's own text at p->pos. */
static bool parse_literal_cp(rx_parser *p, uint32_t *cp) {
    if (!utf8_decode(p->s, p->n, &p->pos, cp)) {
        rx_error(p, p->pos, "invalid UTF-8");
        return false;
    }
    return true;
}

static rx_node *parse_class(rx_parser *p) {
    size_t start = p->pos;
    p->pos++; /* [ */
    bool negate = p->pos < p->n && p->s[p->pos] == '^';
    if (negate) p->pos++;
    rx_node *node = rx_new(p, RX_SET);
    if (!node) return NULL;
    for (;;) {
        if (p->pos >= p->n) {
            rx_error(p, start, "unterminated character class");
            break;
        }
        if (p->s[p->pos] == ']') {
            p->pos++;
            break;
        }
        size_t atom_at = p->pos;
        uint32_t lo = 0;
        int got;
        if (p->s[p->pos] == '\\') got = parse_escape(p, true, &lo, &node->set);
        else got = parse_literal_cp(p, &lo) ? 1 : 0;
        if (!got) break;
        bool is_range = p->pos + 1 < p->n && p->s[p->pos] == '-' && p->s[p->pos + 1] != ']';
        if (!is_range) {
            if (got == 1) cp_set_add(&node->set, lo, lo);
            continue;
        }
        if (got == 2) {
            rx_error(p, atom_at, "a class escape cannot start a range");
            break;
        }
        p->pos++; /* - */
        size_t hi_at = p->pos;
        uint32_t hi = 0;
        cp_set dummy = {0};
        if (p->s[p->pos] == '\\') got = parse_escape(p, true, &hi, &dummy);
        else got = parse_literal_cp(p, &hi) ? 1 : 0;
        bool escape_set = dummy.n > 0;
        cp_set_free(&dummy);
        if (!got) break;
        if (got == 2 || escape_set) {
            rx_error(p, hi_at, "a class escape cannot end a range");
            break;
        }
        if (lo > hi) {
            rx_error(p, atom_at, "range out of order in character class");
            break;
        }
        cp_set_add(&node->set, lo, hi);
    }
    cp_set_normalize(&node->set);
    if (negate) cp_set_complement(&node->set);
    else cp_set_remove_surrogates(&node->set);
    if (p->status || !rx_set_ok(p, &node->set)) {
        rx_free(node);
        return NULL;
    }
    if (node->set.n == 0) node->kind = RX_NONE;
    return node;
}

static rx_node *parse_alternation(rx_parser *p, bool top, rx_branch **branches, size_t *n_branches);

/* A decimal count in a {m,n} quantifier; false if none is there. */
static bool parse_count(rx_parser *p, uint32_t *out) {
    size_t digits = 0;
    uint64_t v = 0;
    while (p->pos < p->n && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') {
        if (v <= RX_MAX_REPEAT) v = v * 10 + (uint64_t)(p->s[p->pos] - '0');
        p->pos++;
        digits++;
    }
    *out = v > RX_MAX_REPEAT ? RX_MAX_REPEAT + 1 : (uint32_t)v;
    return digits > 0;
}

/* A quantifier at p->pos, if any: sets *min and *max and returns true. */
static bool parse_quantifier(rx_parser *p, uint32_t *min, uint32_t *max) {
    if (p->pos >= p->n) return false;
    size_t start = p->pos;
    char c = p->s[p->pos];
    if (c == '*') *min = 0, *max = RX_UNBOUNDED;
    else if (c == '+') *min = 1, *max = RX_UNBOUNDED;
    else if (c == '?') *min = 0, *max = 1;
    else if (c == '{') {
        p->pos++;
        if (!parse_count(p, min)) {
            rx_error(p, start, "invalid quantifier (a lone { must be escaped)");
            return false;
        }
        *max = *min;
        if (p->pos < p->n && p->s[p->pos] == ',') {
            p->pos++;
            if (!parse_count(p, max)) *max = RX_UNBOUNDED;
        }
        if (p->pos >= p->n || p->s[p->pos] != '}') {
            rx_error(p, start, "invalid quantifier (a lone { must be escaped)");
            return false;
        }
        if (*min > RX_MAX_REPEAT || (*max != RX_UNBOUNDED && *max > RX_MAX_REPEAT)) {
            rx_error(p, start, "repetition count over 1000");
            return false;
        }
        if (*max < *min) {
            rx_error(p, start, "numbers out of order in {m,n} quantifier");
            return false;
        }
    } else {
        return false;
    }
    p->pos++;
    if (p->pos < p->n && p->s[p->pos] == '?') p->pos++; /* lazy: same language */
    return true;
}

/* One atom (without its quantifier), or NULL with p->status set. */
static rx_node *parse_atom(rx_parser *p) {
    size_t start = p->pos;
    char c = p->s[p->pos];
    switch (c) {
    case '(': {
        p->pos++;
        if (p->pos < p->n && p->s[p->pos] == '?') {
            if (p->pos + 1 < p->n && p->s[p->pos + 1] == ':') {
                p->pos += 2;
            } else if (p->pos + 2 < p->n && p->s[p->pos + 1] == '<' && p->s[p->pos + 2] != '=' && p->s[p->pos + 2] != '!') {
                p->pos += 2;
                size_t name_at = p->pos;
                while (p->pos < p->n && (p->s[p->pos] == '_' || p->s[p->pos] == '$' ||
                                         (p->s[p->pos] >= '0' && p->s[p->pos] <= '9') ||
                                         ((p->s[p->pos] | 0x20) >= 'a' && (p->s[p->pos] | 0x20) <= 'z')))
                    p->pos++;
                if (p->pos == name_at || p->pos >= p->n || p->s[p->pos] != '>' || (p->s[name_at] >= '0' && p->s[name_at] <= '9')) {
                    rx_error(p, start, "invalid group name");
                    return NULL;
                }
                p->pos++;
            } else if (p->pos + 1 < p->n && (p->s[p->pos + 1] == '=' || p->s[p->pos + 1] == '!' || p->s[p->pos + 1] == '<')) {
                rx_error(p, start, "lookaround assertions are not supported");
                return NULL;
            } else {
                rx_error(p, start, "unsupported group syntax (?");
                return NULL;
            }
        }
        if (++p->depth > RX_MAX_DEPTH) {
            rx_error(p, start, "groups nested too deeply (more than 60)");
            return NULL;
        }
        rx_node *inner = parse_alternation(p, false, NULL, NULL);
        p->depth--;
        if (!inner) return NULL;
        if (p->pos >= p->n || p->s[p->pos] != ')') {
            rx_free(inner);
            rx_error(p, start, "unterminated group");
            return NULL;
        }
        p->pos++;
        return inner;
    }
    case '[': return parse_class(p);
    case '.': {
        p->pos++;
        rx_node *node = rx_new(p, RX_SET);
        if (!node) return NULL;
        cp_set_add(&node->set, '\n', '\n');
        cp_set_add(&node->set, '\r', '\r');
        cp_set_add(&node->set, 0x2028, 0x2029);
        cp_set_normalize(&node->set);
        cp_set_complement(&node->set);
        if (!rx_set_ok(p, &node->set)) {
            rx_free(node);
            return NULL;
        }
        return node;
    }
    case '*': case '+': case '?': rx_error(p, start, "nothing to repeat"); return NULL;
    case '{': rx_error(p, start, "nothing to repeat (a lone { must be escaped)"); return NULL;
    case '}': rx_error(p, start, "a lone } must be escaped"); return NULL;
    case ']': rx_error(p, start, "a lone ] must be escaped"); return NULL;
    case '^': rx_error(p, start, "the anchor ^ is only supported at the start of the pattern"); return NULL;
    case '$': rx_error(p, start, "the anchor $ is only supported at the end of the pattern"); return NULL;
    default: break;
    }
    rx_node *node = rx_new(p, RX_SET);
    if (!node) return NULL;
    uint32_t cp = 0;
    int got = c == '\\' ? parse_escape(p, false, &cp, &node->set) : (parse_literal_cp(p, &cp) ? 1 : 0);
    if (got == 1) cp_set_add(&node->set, cp, cp);
    cp_set_normalize(&node->set);
    if (!got || !rx_set_ok(p, &node->set)) {
        rx_free(node);
        return NULL;
    }
    return node;
}

/* A sequence up to | or ) or the end. At the top level, ^ may open it and $ close it. */
static rx_node *parse_sequence(rx_parser *p, bool top, bool *anchored_start, bool *anchored_end) {
    rx_node *seq = rx_new(p, RX_SEQ);
    if (!seq) return NULL;
    if (top && p->pos < p->n && p->s[p->pos] == '^') {
        *anchored_start = true;
        p->pos++;
    }
    while (p->pos < p->n && p->s[p->pos] != '|' && p->s[p->pos] != ')') {
        if (top && p->s[p->pos] == '$' && (p->pos + 1 == p->n || p->s[p->pos + 1] == '|')) {
            *anchored_end = true;
            p->pos++;
            break;
        }
        rx_node *atom = parse_atom(p);
        if (!atom) break;
        uint32_t min, max;
        if (parse_quantifier(p, &min, &max)) {
            if (p->pos < p->n && strchr("*+?", p->s[p->pos])) {
                rx_free(atom);
                rx_error(p, p->pos, "nothing to repeat");
                break;
            }
            rx_node *rep = rx_new(p, RX_REPEAT);
            if (!rep) {
                rx_free(atom);
                break;
            }
            rep->min = min;
            rep->max = max;
            if (!rx_add_kid(p, rep, atom)) {
                rx_free(rep);
                break;
            }
            atom = rep;
        }
        if (p->status) {
            rx_free(atom);
            break;
        }
        if (!rx_add_kid(p, seq, atom)) break;
    }
    if (p->status) {
        rx_free(seq);
        return NULL;
    }
    return seq;
}

/* Alternatives up to ) or the end. At the top level each alternative is recorded in *branches. */
static rx_node *parse_alternation(rx_parser *p, bool top, rx_branch **branches, size_t *n_branches) {
    rx_node *alt = rx_new(p, RX_ALT);
    if (!alt) return NULL;
    for (;;) {
        bool anchored_start = false, anchored_end = false;
        rx_node *seq = parse_sequence(p, top, &anchored_start, &anchored_end);
        if (!seq) break;
        if (top) {
            rx_branch *grown = realloc(*branches, (*n_branches + 1) * sizeof **branches);
            if (!grown) {
                rx_free(seq);
                p->status = kite_fail(p->e, KITE_ERR_NOMEM, "%s: out of memory", p->who);
                break;
            }
            *branches = grown;
            grown[(*n_branches)++] = (rx_branch){seq, anchored_start, anchored_end};
        } else if (!rx_add_kid(p, alt, seq)) {
            break;
        }
        if (p->pos < p->n && p->s[p->pos] == '|') {
            p->pos++;
            continue;
        }
        break;
    }
    if (p->status) {
        rx_free(alt);
        return NULL;
    }
    return alt;
}

/* Rewrites node bottom-up so EMPTY and NONE appear only at the root: a sequence drops EMPTY kids and is
 * NONE with a NONE kid, an alternation drops NONE kids and is marked optional when a kid is EMPTY, and
 * one-kid sequences and alternations collapse to the kid. */
static rx_node *rx_simplify(rx_node *node) {
    for (size_t i = 0; i < node->n_kids; i++) node->kids[i] = rx_simplify(node->kids[i]);
    if (node->kind == RX_SEQ || node->kind == RX_ALT) {
        bool any_none = false, any_empty = false;
        size_t w = 0;
        for (size_t i = 0; i < node->n_kids; i++) {
            rx_node *kid = node->kids[i];
            if (kid->kind == RX_NONE) any_none = true;
            if (kid->kind == RX_EMPTY) any_empty = true;
            bool drop = node->kind == RX_SEQ ? kid->kind == RX_EMPTY : (kid->kind == RX_NONE || kid->kind == RX_EMPTY);
            if (drop) rx_free(kid);
            else node->kids[w++] = kid;
        }
        node->n_kids = w;
        if (node->kind == RX_SEQ && any_none) {
            for (size_t i = 0; i < node->n_kids; i++) rx_free(node->kids[i]);
            node->n_kids = 0;
            node->kind = RX_NONE;
            return node;
        }
        if (node->n_kids == 0) {
            node->kind = node->kind == RX_SEQ || any_empty ? RX_EMPTY : RX_NONE;
            return node;
        }
        if (node->n_kids == 1 && !(node->kind == RX_ALT && any_empty)) {
            rx_node *kid = node->kids[0];
            node->n_kids = 0;
            rx_free(node);
            return kid;
        }
        if (node->kind == RX_ALT && any_empty) node->optional = true;
        return node;
    }
    if (node->kind == RX_REPEAT) {
        rx_node *kid = node->kids[0];
        if (node->max == 0 || kid->kind == RX_EMPTY || (kid->kind == RX_NONE && node->min == 0)) {
            rx_free(kid);
            node->n_kids = 0;
            node->kind = RX_EMPTY;
        } else if (kid->kind == RX_NONE) {
            rx_free(kid);
            node->n_kids = 0;
            node->kind = RX_NONE;
        } else if (node->min == 1 && node->max == 1) {
            node->n_kids = 0;
            rx_free(node);
            return kid;
        }
    }
    return node;
}

/* A JSON string's spelling of one code point that must be escaped (", \ and controls). */
static void emit_json_escaped_cp(gtext *out, uint32_t cp) {
    /* The GBNF literal of the JSON escape: "\\" is one backslash of output. */
    switch (cp) {
    case '"': gtext_puts(out, "\"\\\\\\\"\""); return;
    case '\\': gtext_puts(out, "\"\\\\\\\\\""); return;
    case '\n': gtext_puts(out, "\"\\\\n\""); return;
    case '\r': gtext_puts(out, "\"\\\\r\""); return;
    case '\t': gtext_puts(out, "\"\\\\t\""); return;
    case '\b': gtext_puts(out, "\"\\\\b\""); return;
    case '\f': gtext_puts(out, "\"\\\\f\""); return;
    default: gtext_printf(out, "\"\\\\u%04x\"", cp); return;
    }
}

static void emit_class(gtext *out, const cp_set *set) {
    if (set->n == 1 && set->r[0].lo == set->r[0].hi) {
        gtext_puts(out, "\"");
        gtext_literal_cp(out, set->r[0].lo);
        gtext_puts(out, "\"");
        return;
    }
    gtext_puts(out, "[");
    for (size_t i = 0; i < set->n; i++) {
        gtext_class_cp(out, set->r[i].lo);
        if (set->r[i].hi != set->r[i].lo) {
            gtext_puts(out, "-");
            gtext_class_cp(out, set->r[i].hi);
        }
    }
    gtext_puts(out, "]");
}

static void emit_set(gtext *out, const cp_set *set, regex_mode mode) {
    if (mode == REGEX_RAW) {
        emit_class(out, set);
        return;
    }
    /* In a JSON string, code points that need no escape are written as themselves; ", \ and the
     * controls as their escapes (the short form where JSON has one, else \u00xx). */
    cp_set plain = {0};
    uint32_t special[34];
    size_t n_special = 0;
    for (size_t i = 0; i < set->n; i++) {
        for (uint32_t cp = set->r[i].lo; cp <= set->r[i].hi && cp < 0x20; cp++) special[n_special++] = cp;
        uint32_t lo = set->r[i].lo < 0x20 ? 0x20 : set->r[i].lo;
        if (lo > set->r[i].hi) continue;
        /* split around " (0x22) and \ (0x5C) */
        uint32_t cuts[2] = {'"', '\\'};
        uint32_t from = lo;
        for (int k = 0; k < 2; k++) {
            uint32_t cut = cuts[k];
            if (cut >= from && cut <= set->r[i].hi) {
                if (cut > from) cp_set_add(&plain, from, cut - 1);
                special[n_special++] = cut;
                from = cut + 1;
            }
        }
        if (from <= set->r[i].hi) cp_set_add(&plain, from, set->r[i].hi);
    }
    size_t n_alts = n_special + (plain.n ? 1 : 0);
    if (n_alts > 1) gtext_puts(out, "(");
    bool first = true;
    if (plain.n) {
        emit_class(out, &plain);
        first = false;
    }
    for (size_t i = 0; i < n_special; i++) {
        if (!first) gtext_puts(out, " | ");
        emit_json_escaped_cp(out, special[i]);
        first = false;
    }
    if (n_alts > 1) gtext_puts(out, ")");
    if (plain.failed) out->failed = true;
    cp_set_free(&plain);
}

/* One code point written as itself (no JSON escape needed in a JSON string). */
static bool is_plain_char(const rx_node *node, regex_mode mode) {
    if (node->kind != RX_SET || node->set.n != 1 || node->set.r[0].lo != node->set.r[0].hi) return false;
    uint32_t cp = node->set.r[0].lo;
    return mode == REGEX_RAW || (cp >= 0x20 && cp != '"' && cp != '\\');
}

static void emit_node(gtext *out, const rx_node *node, regex_mode mode) {
    switch (node->kind) {
    case RX_EMPTY:
    case RX_NONE: break; /* only at the root, handled by the caller */
    case RX_SET: emit_set(out, &node->set, mode); break;
    case RX_SEQ:
        for (size_t i = 0; i < node->n_kids;) {
            if (i) gtext_puts(out, " ");
            if (!is_plain_char(node->kids[i], mode)) {
                emit_node(out, node->kids[i++], mode);
                continue;
            }
            /* a run of single characters is one literal: "abc", not "a" "b" "c" */
            gtext_puts(out, "\"");
            for (; i < node->n_kids && is_plain_char(node->kids[i], mode); i++) gtext_literal_cp(out, node->kids[i]->set.r[0].lo);
            gtext_puts(out, "\"");
        }
        break;
    case RX_ALT:
        gtext_puts(out, "(");
        for (size_t i = 0; i < node->n_kids; i++) {
            if (i) gtext_puts(out, " | ");
            emit_node(out, node->kids[i], mode);
        }
        gtext_puts(out, node->optional ? ")?" : ")");
        break;
    case RX_REPEAT: {
        const rx_node *kid = node->kids[0];
        /* a class or literal needs no parentheses; an alternation brings its own */
        bool group = kid->kind == RX_SEQ || (kid->kind == RX_ALT && kid->optional);
        if (group) gtext_puts(out, "(");
        emit_node(out, kid, mode);
        if (group) gtext_puts(out, ")");
        if (node->min == 0 && node->max == 1) gtext_puts(out, "?");
        else if (node->min == 0 && node->max == RX_UNBOUNDED) gtext_puts(out, "*");
        else if (node->min == 1 && node->max == RX_UNBOUNDED) gtext_puts(out, "+");
        else if (node->max == RX_UNBOUNDED) gtext_printf(out, "{%u,}", node->min);
        else if (node->min == node->max) gtext_printf(out, "{%u}", node->min);
        else gtext_printf(out, "{%u,%u}", node->min, node->max);
        break;
    }
    }
}

int regex_compile_expr(const char *pattern, size_t len, regex_mode mode, bool search, const char *any_char_rule,
                       const char *who, gtext *out, kite_error *e) {
    rx_parser p = {.s = pattern, .n = len, .who = who, .e = e};
    if (len > RX_MAX_PATTERN) return kite_fail(e, KITE_ERR_INVALID_ARG, "%s: the pattern is over 1 MiB", who);
    rx_branch *branches = NULL;
    size_t n_branches = 0;
    rx_node *unused = parse_alternation(&p, true, &branches, &n_branches);
    rx_free(unused);
    if (!p.status && p.pos < p.n) rx_error(&p, p.pos, "unmatched )");
    for (size_t i = 0; i < n_branches && !p.status; i++) branches[i].body = rx_simplify(branches[i].body);
    /* Each branch becomes: [any*] body [any*] (search) or body (full match). */
    gtext expr = {0};
    size_t n_alts = 0;
    bool any_empty = false;
    for (size_t i = 0; i < n_branches && !p.status; i++) {
        rx_branch *b = &branches[i];
        if (!b->body || b->body->kind == RX_NONE) continue;
        bool prefix = search && !b->anchored_start, suffix = search && !b->anchored_end;
        bool body = b->body->kind != RX_EMPTY;
        if (!prefix && !suffix && !body) {
            any_empty = true;
            continue;
        }
        if (n_alts++) gtext_puts(&expr, " | ");
        if (prefix) gtext_printf(&expr, "%s*", any_char_rule);
        if (body) {
            if (prefix) gtext_puts(&expr, " ");
            emit_node(&expr, b->body, mode);
        }
        if (suffix && (prefix && !body)) {
            /* any* any* is any*: nothing more */
        } else if (suffix) {
            gtext_printf(&expr, " %s*", any_char_rule);
        }
    }
    int rc = p.status;
    if (!rc && n_alts == 0 && !any_empty)
        rc = kite_fail(e, KITE_ERR_INVALID_ARG, "%s: the regex matches no string (an empty class) at byte 0", who);
    if (!rc) {
        if (n_alts == 0) gtext_puts(out, "\"\"");
        else if (any_empty) gtext_printf(out, "(%s)?", expr.buf);
        else if (n_alts > 1) gtext_printf(out, "(%s)", expr.buf);
        else gtext_puts(out, expr.buf);
        if (expr.failed) out->failed = expr.failed, out->too_large = expr.too_large;
        rc = gtext_check(out, who, e);
    }
    gtext_free(&expr);
    for (size_t i = 0; i < n_branches; i++) rx_free(branches[i].body);
    free(branches);
    return rc;
}

int kite_regex_to_gbnf(const char *pattern, size_t len, char **gbnf, size_t *gbnf_len, kite_error *e) {
    if (!gbnf || (!pattern && len)) return kite_fail(e, KITE_ERR_INVALID_ARG, "regex: pattern and gbnf are required");
    *gbnf = NULL;
    if (gbnf_len) *gbnf_len = 0;
    gtext out = {0};
    gtext_puts(&out, "root ::= ");
    int rc = regex_compile_expr(pattern ? pattern : "", len, REGEX_RAW, false, NULL, "regex", &out, e);
    if (rc) {
        gtext_free(&out);
        return rc;
    }
    gtext_puts(&out, "\n");
    rc = gtext_check(&out, "regex", e);
    if (rc) {
        gtext_free(&out);
        return rc;
    }
    *gbnf = gtext_take(&out, gbnf_len);
    return *gbnf ? KITE_OK : kite_fail(e, KITE_ERR_NOMEM, "regex: out of memory");
}
