/* The GBNF parser: llama.cpp's grammar language to BNF over bytes (grammar_internal.h).
 *
 * Layout rules follow llama.cpp: a rule is `name ::= alternatives`; outside parentheses a newline ends
 * the rule unless it follows `|`; inside parentheses newlines are free; `#` starts a comment to the end
 * of the line. Lowering:
 *   - a literal becomes the UTF-8 bytes of its code points, one single-byte set each;
 *   - a character class (a set of code points, minus surrogates) becomes one byte set when it is all
 *     ASCII, else a helper rule whose alternatives are byte-set sequences (UTF-8 range splitting);
 *   - a group with one alternative is inlined, one with several becomes a helper rule;
 *   - x{m,n} becomes m copies of x then a chain of n - m helpers o_k ::= x o_(k-1) | (no ambiguity);
 *     x{m,} becomes m copies then s ::= x s | ; * + ? are {0,} {1,} {0,1}.
 * Then checks: every referenced rule defined, the start rule present, every rule can finish (a base case
 * exists), and no left recursion (a rule that can begin with itself with something left to match after). */
#include "grammar/grammar_internal.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- growable int32 vectors ------------------------------------------------------------------- */

typedef struct ivec {
    int32_t *v;
    size_t n, cap;
} ivec;

static bool ivec_reserve(ivec *a, size_t extra) {
    if (a->n + extra <= a->cap) return true;
    size_t cap = a->cap ? a->cap : 8;
    while (cap < a->n + extra) cap *= 2;
    int32_t *v = realloc(a->v, cap * sizeof *v);
    if (!v) return false;
    a->v = v;
    a->cap = cap;
    return true;
}

/* ---- the parser ------------------------------------------------------------------------------- */

typedef struct brule {
    char *name;      /* user rules; NULL for helpers */
    uint32_t owner;  /* the user rule a helper was made for (itself for a user rule), for messages */
    size_t def_at;   /* byte offset of the definition (of the group or class, for a helper) */
    size_t ref_at;   /* byte offset of the first reference (user rules; for "undefined rule") */
    bool defined;
    ivec body;       /* alternatives, each ending in GELEM_END */
} brule;

typedef struct gparser {
    const char *text;
    size_t len, pos;
    kite_error *e;
    brule *rules;
    size_t n_rules, cap_rules;
    uint32_t *name_slots; /* open addressing over user rule names: rule index + 1, 0 = empty */
    size_t name_cap;
    gbyteset *sets;
    size_t n_sets, cap_sets;
    uint32_t *set_slots;  /* open addressing over sets: set index + 1 */
    size_t set_cap;
    size_t n_elems;       /* elements over all bodies and pending sequences, against the limit */
    int depth;            /* open groups */
    int32_t any_char_rule; /* the helper for `.`, made once (-1 until then) */
    uint32_t current;     /* the user rule being parsed */
    int32_t *refs;        /* distinct token ids referenced by <[id]> */
    size_t n_refs, cap_refs;
} gparser;

/* 1-based line and column (in code points) of byte offset off. */
static void line_col(const char *text, size_t len, size_t off, size_t *line, size_t *col) {
    size_t l = 1, c = 1;
    if (off > len) off = len;
    for (size_t i = 0; i < off; i++) {
        if (text[i] == '\n') {
            l++;
            c = 1;
        } else if (((unsigned char)text[i] & 0xC0) != 0x80) {
            c++;
        }
    }
    *line = l;
    *col = c;
}

/* Fails with "gbnf: <message> at L:C" for byte offset off. */
__attribute__((format(printf, 3, 4))) static int fail_at(gparser *p, size_t off, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    size_t line, col;
    line_col(p->text, p->len, off, &line, &col);
    return kite_fail(p->e, KITE_ERR_FORMAT, "gbnf: %s at %zu:%zu", msg, line, col);
}

static int nomem(gparser *p) { return kite_fail(p->e, KITE_ERR_NOMEM, "gbnf: out of memory"); }

/* A short printable description of the byte at off, for "found ..." in messages. */
static const char *describe(const gparser *p, size_t off, char buf[16]) {
    if (off >= p->len) return "end of input";
    unsigned char c = (unsigned char)p->text[off];
    if (c == '\n') return "newline";
    if (c == '\r') return "carriage return";
    if (c >= 0x21 && c < 0x7F) snprintf(buf, 16, "'%c'", c);
    else snprintf(buf, 16, "byte 0x%02X", c);
    return buf;
}

static bool is_word_char(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

static int peek(const gparser *p) { return p->pos < p->len ? (unsigned char)p->text[p->pos] : -1; }

/* Skips blanks and comments; newlines too when newline_ok. */
static void skip_space(gparser *p, bool newline_ok) {
    while (p->pos < p->len) {
        char c = p->text[p->pos];
        if (c == ' ' || c == '\t' || (newline_ok && (c == '\r' || c == '\n'))) {
            p->pos++;
        } else if (c == '#') {
            while (p->pos < p->len && p->text[p->pos] != '\n' && p->text[p->pos] != '\r') p->pos++;
        } else {
            break;
        }
    }
}

static int count_elems(gparser *p, size_t extra, size_t at) {
    if (extra > KITE_GBNF_MAX_ELEMENTS || p->n_elems + extra > KITE_GBNF_MAX_ELEMENTS)
        return fail_at(p, at, "grammar too large (more than %u elements after expanding repetitions)",
                       KITE_GBNF_MAX_ELEMENTS);
    p->n_elems += extra;
    return KITE_OK;
}

static int push_elem(gparser *p, ivec *out, int32_t e, size_t at) {
    int rc = count_elems(p, 1, at);
    if (rc) return rc;
    if (!ivec_reserve(out, 1)) return nomem(p);
    out->v[out->n++] = e;
    return KITE_OK;
}

/* A new rule (a helper when name is NULL); its index in *id. */
static int new_rule(gparser *p, const char *name, size_t name_len, size_t at, uint32_t *id) {
    if (p->n_rules >= KITE_GBNF_MAX_RULES)
        return fail_at(p, at, "grammar too large (more than %u rules after expanding groups and repetitions)",
                       KITE_GBNF_MAX_RULES);
    if (p->n_rules == p->cap_rules) {
        size_t cap = p->cap_rules ? p->cap_rules * 2 : 64;
        brule *r = realloc(p->rules, cap * sizeof *r);
        if (!r) return nomem(p);
        p->rules = r;
        p->cap_rules = cap;
    }
    brule *r = &p->rules[p->n_rules];
    memset(r, 0, sizeof *r);
    if (name) {
        r->name = malloc(name_len + 1);
        if (!r->name) return nomem(p);
        memcpy(r->name, name, name_len);
        r->name[name_len] = 0;
        r->owner = (uint32_t)p->n_rules;
    } else {
        r->owner = p->current;
        r->defined = true;
    }
    r->def_at = at;
    r->ref_at = at;
    *id = (uint32_t)p->n_rules++;
    return KITE_OK;
}

static uint64_t hash_bytes(const void *data, size_t n) {
    const unsigned char *s = data;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

/* The user rule called text[at .. at + n), created (undefined) at its first mention. */
static int rule_by_name(gparser *p, size_t at, size_t n, uint32_t *id) {
    const char *name = p->text + at;
    if (p->name_cap == 0 || (p->n_rules + 1) * 2 > p->name_cap) {
        size_t cap = p->name_cap ? p->name_cap * 2 : 256;
        while ((p->n_rules + 1) * 2 > cap) cap *= 2;
        uint32_t *slots = calloc(cap, sizeof *slots);
        if (!slots) return nomem(p);
        for (size_t r = 0; r < p->n_rules; r++) {
            if (!p->rules[r].name) continue;
            size_t i = hash_bytes(p->rules[r].name, strlen(p->rules[r].name)) & (cap - 1);
            while (slots[i]) i = (i + 1) & (cap - 1);
            slots[i] = (uint32_t)r + 1;
        }
        free(p->name_slots);
        p->name_slots = slots;
        p->name_cap = cap;
    }
    size_t i = hash_bytes(name, n) & (p->name_cap - 1);
    while (p->name_slots[i]) {
        const char *other = p->rules[p->name_slots[i] - 1].name;
        if (strlen(other) == n && memcmp(other, name, n) == 0) {
            *id = p->name_slots[i] - 1;
            return KITE_OK;
        }
        i = (i + 1) & (p->name_cap - 1);
    }
    int rc = new_rule(p, name, n, at, id);
    if (rc) return rc;
    p->name_slots[i] = *id + 1;
    return KITE_OK;
}

/* The number of byte set s, interned. */
static int intern_set(gparser *p, const gbyteset *s, int32_t *id) {
    if (p->set_cap == 0 || (p->n_sets + 1) * 2 > p->set_cap) {
        size_t cap = p->set_cap ? p->set_cap * 2 : 256;
        uint32_t *slots = calloc(cap, sizeof *slots);
        if (!slots) return nomem(p);
        for (size_t k = 0; k < p->n_sets; k++) {
            size_t i = hash_bytes(&p->sets[k], sizeof(gbyteset)) & (cap - 1);
            while (slots[i]) i = (i + 1) & (cap - 1);
            slots[i] = (uint32_t)k + 1;
        }
        free(p->set_slots);
        p->set_slots = slots;
        p->set_cap = cap;
    }
    size_t i = hash_bytes(s, sizeof *s) & (p->set_cap - 1);
    while (p->set_slots[i]) {
        if (memcmp(&p->sets[p->set_slots[i] - 1], s, sizeof *s) == 0) {
            *id = (int32_t)(p->set_slots[i] - 1);
            return KITE_OK;
        }
        i = (i + 1) & (p->set_cap - 1);
    }
    if (p->n_sets == p->cap_sets) {
        size_t cap = p->cap_sets ? p->cap_sets * 2 : 64;
        gbyteset *v = realloc(p->sets, cap * sizeof *v);
        if (!v) return nomem(p);
        p->sets = v;
        p->cap_sets = cap;
    }
    p->sets[p->n_sets] = *s;
    p->set_slots[i] = (uint32_t)p->n_sets + 1;
    *id = (int32_t)p->n_sets++;
    return KITE_OK;
}

static void set_add_range(gbyteset *s, unsigned lo, unsigned hi) {
    for (unsigned b = lo; b <= hi; b++) s->bits[b >> 6] |= 1ull << (b & 63);
}

static int byte_elem(gparser *p, unsigned lo, unsigned hi, int32_t *elem) {
    gbyteset s = {{0}};
    set_add_range(&s, lo, hi);
    return intern_set(p, &s, elem);
}

static int utf8_encode(uint32_t cp, unsigned char out[4]) {
    if (cp < 0x80) {
        out[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (unsigned char)(0xC0 | (cp >> 6));
        out[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (unsigned char)(0xE0 | (cp >> 12));
        out[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (unsigned char)(0xF0 | (cp >> 18));
    out[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Decodes one strict UTF-8 character of the grammar text at p->pos (no overlongs, no surrogates). */
static int decode_utf8(gparser *p, uint32_t *cp) {
    const unsigned char *s = (const unsigned char *)p->text + p->pos;
    size_t left = p->len - p->pos;
    unsigned char c = s[0];
    int n;
    uint32_t v, min;
    if (c < 0x80) {
        *cp = c;
        p->pos++;
        return KITE_OK;
    } else if (c >= 0xC2 && c <= 0xDF) {
        n = 2, v = c & 0x1F, min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3, v = c & 0x0F, min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4, v = c & 0x07, min = 0x10000;
    } else {
        return fail_at(p, p->pos, "invalid UTF-8 byte 0x%02X", c);
    }
    if (left < (size_t)n) return fail_at(p, p->pos, "truncated UTF-8 character");
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return fail_at(p, p->pos, "invalid UTF-8 sequence");
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return fail_at(p, p->pos, "invalid UTF-8 sequence");
    *cp = v;
    p->pos += (size_t)n;
    return KITE_OK;
}

/* One character of a literal or class: an escape or a UTF-8 character; its code point in *cp. */
static int parse_char(gparser *p, uint32_t *cp) {
    size_t at = p->pos;
    if (p->pos >= p->len) return fail_at(p, at, "unexpected end of input");
    if (p->text[p->pos] != '\\') return decode_utf8(p, cp);
    if (p->pos + 1 >= p->len) return fail_at(p, at, "unexpected end of input after '\\'");
    char c = p->text[p->pos + 1];
    int digits = 0;
    switch (c) {
    case 'x': digits = 2; break;
    case 'u': digits = 4; break;
    case 'U': digits = 8; break;
    case 'n': *cp = '\n'; break;
    case 't': *cp = '\t'; break;
    case 'r': *cp = '\r'; break;
    case '\\': case '"': case '[': case ']': case '-': *cp = (unsigned char)c; break;
    default: {
        char buf[16];
        p->pos++;
        return fail_at(p, at, "unknown escape '\\' followed by %s", describe(p, p->pos, buf));
    }
    }
    p->pos += 2;
    if (!digits) return KITE_OK;
    uint32_t v = 0;
    for (int i = 0; i < digits; i++) {
        int h = peek(p);
        if (h >= '0' && h <= '9') h -= '0';
        else if (h >= 'a' && h <= 'f') h -= 'a' - 10;
        else if (h >= 'A' && h <= 'F') h -= 'A' - 10;
        else return fail_at(p, p->pos, "expected %d hex digits after \\%c", digits, c);
        v = (v << 4) | (uint32_t)h;
        p->pos++;
    }
    if (v > 0x10FFFF) return fail_at(p, at, "code point U+%X is past U+10FFFF", v);
    if (v >= 0xD800 && v <= 0xDFFF) return fail_at(p, at, "U+%04X is a surrogate, not a character", v);
    *cp = v;
    return KITE_OK;
}

/* ---- character classes: code point intervals to UTF-8 byte-set sequences ---------------------- */

typedef struct cp_range {
    uint32_t lo, hi;
} cp_range;

typedef struct cp_ranges {
    cp_range *v;
    size_t n, cap;
} cp_ranges;

static bool ranges_push(cp_ranges *r, uint32_t lo, uint32_t hi) {
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 16;
        cp_range *v = realloc(r->v, cap * sizeof *v);
        if (!v) return false;
        r->v = v;
        r->cap = cap;
    }
    r->v[r->n++] = (cp_range){lo, hi};
    return true;
}

static int compare_range(const void *a, const void *b) {
    const cp_range *x = a, *y = b;
    return (x->lo > y->lo) - (x->lo < y->lo);
}

/* Sorts and merges r in place, complements it over the code points when negated, and drops surrogates. */
static bool normalize_ranges(cp_ranges *r, bool negated) {
    if (r->n > 1) qsort(r->v, r->n, sizeof *r->v, compare_range);
    size_t k = 0;
    for (size_t i = 0; i < r->n; i++) {
        if (k && r->v[i].lo <= r->v[k - 1].hi + 1) {
            if (r->v[i].hi > r->v[k - 1].hi) r->v[k - 1].hi = r->v[i].hi;
        } else {
            r->v[k++] = r->v[i];
        }
    }
    r->n = k;
    cp_ranges out = {0};
    uint32_t next = 0; /* complement: the first code point not yet covered */
    for (size_t i = 0; i <= r->n; i++) {
        uint32_t lo, hi;
        if (negated) {
            if (i < r->n) {
                if (r->v[i].lo == 0) {
                    next = r->v[i].hi + 1;
                    continue;
                }
                lo = next, hi = r->v[i].lo - 1;
                next = r->v[i].hi + 1;
            } else {
                if (next > 0x10FFFF) break;
                lo = next, hi = 0x10FFFF;
            }
            if (lo > hi) continue;
        } else {
            if (i == r->n) break;
            lo = r->v[i].lo, hi = r->v[i].hi;
        }
        /* cut out the surrogates D800-DFFF */
        if (lo < 0xD800 && hi > 0xDFFF) {
            if (!ranges_push(&out, lo, 0xD7FF) || !ranges_push(&out, 0xE000, hi)) goto oom;
        } else if (lo >= 0xD800 && hi <= 0xDFFF) {
            continue;
        } else if (lo >= 0xD800 && lo <= 0xDFFF) {
            if (!ranges_push(&out, 0xE000, hi)) goto oom;
        } else if (hi >= 0xD800 && hi <= 0xDFFF) {
            if (!ranges_push(&out, lo, 0xD7FF)) goto oom;
        } else {
            if (!ranges_push(&out, lo, hi)) goto oom;
        }
    }
    free(r->v);
    *r = out;
    return true;
oom:
    free(out.v);
    return false;
}

/* A UTF-8 sequence of byte ranges: n bytes, byte i in [lo[i], hi[i]]. */
typedef struct utf8_seq {
    int n;
    unsigned char lo[4], hi[4];
} utf8_seq;

typedef struct seq_list {
    utf8_seq *v;
    size_t n, cap;
} seq_list;

/* Appends the byte-range sequences covering code points lo..hi, which encode in the same number of
 * bytes: split until every continuation byte spans a full or aligned range, then each piece is a product. */
static bool split_utf8(seq_list *out, uint32_t lo, uint32_t hi, int depth) {
    if (depth > 16) return false; /* cannot happen: each split aligns one more 6-bit level */
    unsigned char a[4], b[4];
    int n = utf8_encode(lo, a);
    for (int i = 1; i < n; i++) {
        uint32_t mask = (1u << (6 * i)) - 1;
        if ((lo & ~mask) != (hi & ~mask)) {
            if ((lo & mask) != 0)
                return split_utf8(out, lo, lo | mask, depth + 1) && split_utf8(out, (lo | mask) + 1, hi, depth + 1);
            if ((hi & mask) != mask)
                return split_utf8(out, lo, (hi & ~mask) - 1, depth + 1) && split_utf8(out, hi & ~mask, hi, depth + 1);
        }
    }
    utf8_encode(hi, b);
    if (out->n == out->cap) {
        size_t cap = out->cap ? out->cap * 2 : 16;
        utf8_seq *v = realloc(out->v, cap * sizeof *v);
        if (!v) return false;
        out->v = v;
        out->cap = cap;
    }
    utf8_seq *s = &out->v[out->n++];
    s->n = n;
    for (int i = 0; i < n; i++) s->lo[i] = a[i], s->hi[i] = b[i];
    return true;
}

/* Orders sequences by length, then by their tail (bytes 1..n-1), then by first byte, so sequences that
 * differ only in the first byte end up adjacent and merge into one alternative. */
static int compare_seq(const void *pa, const void *pb) {
    const utf8_seq *a = pa, *b = pb;
    if (a->n != b->n) return a->n - b->n;
    for (int i = 1; i < a->n; i++) {
        if (a->lo[i] != b->lo[i]) return a->lo[i] - b->lo[i];
        if (a->hi[i] != b->hi[i]) return a->hi[i] - b->hi[i];
    }
    return a->lo[0] - b->lo[0];
}

/* Appends to out the element for a class (sorted, merged, surrogate-free ranges): one byte set when the
 * class is single-byte, else a reference to a new helper rule with one alternative per byte-set sequence. */
static int emit_class(gparser *p, const cp_ranges *r, size_t at, ivec *out) {
    if (r->n == 0) return fail_at(p, at, "character class matches no character");
    seq_list seqs = {0};
    int rc = KITE_OK;
    gbyteset ascii = {{0}};
    bool has_ascii = false;
    for (size_t i = 0; i < r->n; i++) {
        static const uint32_t bounds[4][2] = {{0, 0x7F}, {0x80, 0x7FF}, {0x800, 0xFFFF}, {0x10000, 0x10FFFF}};
        for (int k = 0; k < 4; k++) {
            uint32_t lo = r->v[i].lo > bounds[k][0] ? r->v[i].lo : bounds[k][0];
            uint32_t hi = r->v[i].hi < bounds[k][1] ? r->v[i].hi : bounds[k][1];
            if (lo > hi) continue;
            if (k == 0) {
                set_add_range(&ascii, lo, hi);
                has_ascii = true;
            } else if (!split_utf8(&seqs, lo, hi, 0)) {
                rc = nomem(p);
                goto done;
            }
        }
    }
    int32_t elem;
    if (seqs.n == 0) {
        rc = intern_set(p, &ascii, &elem);
        if (!rc) rc = push_elem(p, out, elem, at);
        goto done;
    }
    qsort(seqs.v, seqs.n, sizeof *seqs.v, compare_seq);
    uint32_t helper;
    if ((rc = new_rule(p, NULL, 0, at, &helper))) goto done;
    ivec body = {0};
    if (has_ascii) {
        if ((rc = intern_set(p, &ascii, &elem)) || (rc = push_elem(p, &body, elem, at)) ||
            (rc = push_elem(p, &body, GELEM_END, at)))
            goto body_done;
    }
    for (size_t i = 0; i < seqs.n;) {
        /* seqs[i .. j) share the tail: their first bytes form one set */
        size_t j = i + 1;
        while (j < seqs.n && seqs.v[j].n == seqs.v[i].n &&
               memcmp(seqs.v[j].lo + 1, seqs.v[i].lo + 1, (size_t)seqs.v[i].n - 1) == 0 &&
               memcmp(seqs.v[j].hi + 1, seqs.v[i].hi + 1, (size_t)seqs.v[i].n - 1) == 0)
            j++;
        gbyteset first = {{0}};
        for (size_t k = i; k < j; k++) set_add_range(&first, seqs.v[k].lo[0], seqs.v[k].hi[0]);
        if ((rc = intern_set(p, &first, &elem)) || (rc = push_elem(p, &body, elem, at))) goto body_done;
        for (int b = 1; b < seqs.v[i].n; b++) {
            if ((rc = byte_elem(p, seqs.v[i].lo[b], seqs.v[i].hi[b], &elem)) || (rc = push_elem(p, &body, elem, at)))
                goto body_done;
        }
        if ((rc = push_elem(p, &body, GELEM_END, at))) goto body_done;
        i = j;
    }
    rc = push_elem(p, out, GELEM_REF(helper), at);
body_done:
    p->rules[helper].body = body;
done:
    free(seqs.v);
    return rc;
}

/* ---- sequences, alternatives, repetitions ---------------------------------------------------- */

static int parse_alternates(gparser *p, ivec *out, bool nested);

/* Rewrites the symbol out[start .. out->n) as its repetition {min,max} (max < 0: unbounded). */
static int repeat_symbol(gparser *p, ivec *out, size_t start, long min, long max, size_t at) {
    size_t sym_len = out->n - start;
    if (sym_len == 0) return KITE_OK; /* "" or () repeated: still the empty string */
    long n_opt = max < 0 ? 1 : max - min;
    /* elements: (min - 1) more inline copies, then per helper one copy, a reference and two ends */
    size_t needed = (size_t)(min > 0 ? min - 1 : 0) * sym_len + (size_t)n_opt * (sym_len + 3) + 1;
    if (needed > KITE_GBNF_MAX_ELEMENTS || p->n_elems + needed > KITE_GBNF_MAX_ELEMENTS)
        return fail_at(p, at, "grammar too large (more than %u elements after expanding repetitions)",
                       KITE_GBNF_MAX_ELEMENTS);
    int rc = KITE_OK;
    int32_t *sym = malloc(sym_len * sizeof *sym);
    if (!sym) return nomem(p);
    memcpy(sym, out->v + start, sym_len * sizeof *sym);
    if (min == 0) {
        out->n = start;
        p->n_elems -= sym_len;
    } else {
        for (long i = 1; i < min && !rc; i++) {
            if ((rc = count_elems(p, sym_len, at))) break;
            if (!ivec_reserve(out, sym_len)) {
                rc = nomem(p);
                break;
            }
            memcpy(out->v + out->n, sym, sym_len * sizeof *sym);
            out->n += sym_len;
        }
    }
    uint32_t last = 0;
    for (long i = 0; i < n_opt && !rc; i++) {
        uint32_t h;
        if ((rc = new_rule(p, NULL, 0, at, &h))) break;
        ivec *body = &p->rules[h].body;
        if (!ivec_reserve(body, sym_len + 3)) {
            rc = nomem(p);
            break;
        }
        memcpy(body->v, sym, sym_len * sizeof *sym);
        body->n = sym_len;
        if (max < 0) body->v[body->n++] = GELEM_REF(h); /* s ::= x s | */
        else if (i > 0) body->v[body->n++] = GELEM_REF(last); /* o_i ::= x o_(i-1) | */
        body->v[body->n++] = GELEM_END;
        body->v[body->n++] = GELEM_END; /* the empty alternative */
        if ((rc = count_elems(p, body->n, at))) break;
        last = h;
    }
    if (!rc && n_opt > 0) rc = push_elem(p, out, GELEM_REF(last), at);
    free(sym);
    return rc;
}

static int parse_count(gparser *p, long *v) {
    size_t at = p->pos;
    int c = peek(p);
    if (c < '0' || c > '9') {
        char buf[16];
        return fail_at(p, at, "expected a number in repetition, found %s", describe(p, at, buf));
    }
    long x = 0;
    while ((c = peek(p)) >= '0' && c <= '9') {
        if (x <= KITE_GBNF_MAX_REPEAT) x = x * 10 + (c - '0');
        p->pos++;
    }
    if (x > KITE_GBNF_MAX_REPEAT)
        return fail_at(p, at, "repetition count past the limit of %d", KITE_GBNF_MAX_REPEAT);
    *v = x;
    return KITE_OK;
}

static int parse_literal(gparser *p, ivec *out) {
    size_t open = p->pos++;
    for (;;) {
        if (p->pos >= p->len) return fail_at(p, open, "unterminated string literal");
        if (p->text[p->pos] == '"') break;
        uint32_t cp;
        int rc = parse_char(p, &cp);
        if (rc) return rc;
        unsigned char bytes[4];
        int n = utf8_encode(cp, bytes);
        for (int i = 0; i < n; i++) {
            int32_t elem;
            if ((rc = byte_elem(p, bytes[i], bytes[i], &elem)) || (rc = push_elem(p, out, elem, open))) return rc;
        }
    }
    p->pos++;
    return KITE_OK;
}

static int parse_class(gparser *p, ivec *out) {
    size_t open = p->pos++;
    bool negated = false;
    if (peek(p) == '^') {
        negated = true;
        p->pos++;
    }
    cp_ranges r = {0};
    int rc = KITE_OK;
    for (;;) {
        if (p->pos >= p->len) {
            rc = fail_at(p, open, "unterminated character class");
            goto done;
        }
        if (p->text[p->pos] == ']') break;
        size_t item = p->pos;
        uint32_t lo = 0, hi = 0; /* (set by parse_char; initialised for compilers that cannot see it) */
        if ((rc = parse_char(p, &lo))) goto done;
        hi = lo;
        if (peek(p) == '-' && p->pos + 1 < p->len && p->text[p->pos + 1] != ']') {
            p->pos++;
            if ((rc = parse_char(p, &hi))) goto done;
            if (hi < lo) {
                rc = fail_at(p, item, "character range U+%04X-U+%04X is reversed", lo, hi);
                goto done;
            }
        }
        if (!ranges_push(&r, lo, hi)) {
            rc = nomem(p);
            goto done;
        }
    }
    p->pos++;
    if (!normalize_ranges(&r, negated)) {
        rc = nomem(p);
        goto done;
    }
    rc = emit_class(p, &r, open, out);
done:
    free(r.v);
    return rc;
}

/* <[id]>: a token by id, spelled as 0xFF and the id's three bytes (big-endian). No UTF-8 text holds
 * 0xFF, so text never matches it: masks allow the token itself there (mask.c). <text> is a token
 * spelled by its text, which only a vocabulary resolves (kite_gbnf_resolve_tokens). */
static int parse_token_ref(gparser *p, ivec *out) {
    size_t open = p->pos++;
    if (peek(p) != '[') {
        /* quoted when it is a short printable <...> (an error stays one line) */
        size_t end = open + 1;
        while (end < p->len && end - open < 48 && p->text[end] >= 0x20 && p->text[end] < 0x7F && p->text[end] != '>') end++;
        if (end < p->len && p->text[end] == '>')
            return fail_at(p, open, "token reference %.*s: only <[id]> is understood without a vocabulary", (int)(end - open + 1),
                           p->text + open);
        return fail_at(p, open, "token reference: only <[id]> is understood without a vocabulary");
    }
    p->pos++;
    long id = 0;
    size_t digits = 0;
    while (p->pos < p->len && p->text[p->pos] >= '0' && p->text[p->pos] <= '9') {
        if (id < (1L << 24)) id = id * 10 + (p->text[p->pos] - '0');
        p->pos++;
        digits++;
    }
    if (!digits || peek(p) != ']') return fail_at(p, open, "token reference: expected <[id]> with a decimal id");
    p->pos++;
    if (peek(p) != '>') return fail_at(p, open, "token reference: expected '>' after <[id]");
    p->pos++;
    if (id >= (1L << 24)) return fail_at(p, open, "token reference: id %ld is past the largest vocabulary (2^24)", id);
    const uint8_t bytes[4] = {0xFF, (uint8_t)(id >> 16), (uint8_t)(id >> 8), (uint8_t)id};
    for (int i = 0; i < 4; i++) {
        int32_t elem;
        int rc = byte_elem(p, bytes[i], bytes[i], &elem);
        if (rc || (rc = push_elem(p, out, elem, open))) return rc;
    }
    for (size_t i = 0; i < p->n_refs; i++)
        if (p->refs[i] == (int32_t)id) return KITE_OK;
    if (p->n_refs == p->cap_refs) {
        size_t cap = p->cap_refs ? p->cap_refs * 2 : 8;
        int32_t *grown = realloc(p->refs, cap * sizeof *grown);
        if (!grown) return nomem(p);
        p->refs = grown;
        p->cap_refs = cap;
    }
    p->refs[p->n_refs++] = (int32_t)id;
    return KITE_OK;
}

static int parse_sequence(gparser *p, ivec *out, bool nested) {
    size_t last_start = out->n; /* where the last symbol began, for a following repetition */
    bool has_symbol = false;
    int rc = KITE_OK;
    for (;;) {
        int c = peek(p);
        size_t at = p->pos;
        size_t sym_start = out->n;
        if (c == '"') {
            rc = parse_literal(p, out);
        } else if (c == '[') {
            rc = parse_class(p, out);
        } else if (c == '.') {
            p->pos++;
            if (p->any_char_rule < 0) {
                cp_ranges all = {0};
                if (!ranges_push(&all, 0, 0x10FFFF) || !normalize_ranges(&all, false)) {
                    free(all.v);
                    return nomem(p);
                }
                ivec tmp = {0};
                rc = emit_class(p, &all, at, &tmp);
                free(all.v);
                if (!rc) p->any_char_rule = (int32_t)GELEM_REF_RULE(tmp.v[0]);
                p->n_elems -= tmp.n;
                free(tmp.v);
            }
            if (!rc) rc = push_elem(p, out, GELEM_REF(p->any_char_rule), at);
        } else if (c == '(') {
            if (p->depth >= KITE_GBNF_MAX_NESTING)
                return fail_at(p, at, "groups nested deeper than %d", KITE_GBNF_MAX_NESTING);
            p->depth++;
            p->pos++;
            skip_space(p, true);
            ivec sub = {0};
            rc = parse_alternates(p, &sub, true);
            p->depth--;
            if (!rc && peek(p) != ')') {
                char buf[16];
                size_t l, col;
                line_col(p->text, p->len, at, &l, &col);
                rc = fail_at(p, p->pos, "expected ')' to close the group opened at %zu:%zu, found %s", l, col,
                             describe(p, p->pos, buf));
            }
            if (!rc) {
                p->pos++;
                size_t ends = 0;
                for (size_t i = 0; i < sub.n; i++) ends += sub.v[i] == GELEM_END;
                if (ends == 1) { /* one alternative: inline it */
                    p->n_elems -= sub.n;
                    if (!ivec_reserve(out, sub.n)) rc = nomem(p);
                    else if (!(rc = count_elems(p, sub.n - 1, at))) {
                        memcpy(out->v + out->n, sub.v, (sub.n - 1) * sizeof *sub.v);
                        out->n += sub.n - 1;
                    }
                    free(sub.v);
                } else {
                    uint32_t h;
                    rc = new_rule(p, NULL, 0, at, &h);
                    if (!rc) {
                        p->rules[h].body = sub;
                        rc = push_elem(p, out, GELEM_REF(h), at);
                    } else {
                        free(sub.v);
                    }
                }
            } else {
                free(sub.v);
            }
        } else if (c >= 0 && is_word_char((unsigned char)c)) {
            while (p->pos < p->len && is_word_char((unsigned char)p->text[p->pos])) p->pos++;
            uint32_t id;
            rc = rule_by_name(p, at, p->pos - at, &id);
            if (!rc) rc = push_elem(p, out, GELEM_REF(id), at);
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (!has_symbol) return fail_at(p, at, "nothing to repeat before '%c'", c);
            long min = 0, max = -1;
            p->pos++;
            if (c == '+') min = 1;
            else if (c == '?') max = 1;
            else if (c == '{') {
                skip_space(p, nested);
                if ((rc = parse_count(p, &min))) return rc;
                skip_space(p, nested);
                if (peek(p) == '}') {
                    max = min;
                } else if (peek(p) == ',') {
                    p->pos++;
                    skip_space(p, nested);
                    if (peek(p) >= '0' && peek(p) <= '9') {
                        if ((rc = parse_count(p, &max))) return rc;
                        skip_space(p, nested);
                    }
                    if (peek(p) != '}') {
                        char buf[16];
                        return fail_at(p, p->pos, "expected '}' to close the repetition, found %s",
                                       describe(p, p->pos, buf));
                    }
                    if (max >= 0 && max < min)
                        return fail_at(p, at, "repetition {%ld,%ld} has its maximum below its minimum", min, max);
                } else {
                    char buf[16];
                    return fail_at(p, p->pos, "expected ',' or '}' in repetition, found %s", describe(p, p->pos, buf));
                }
                p->pos++;
            }
            rc = repeat_symbol(p, out, last_start, min, max, at);
            sym_start = last_start; /* a further repetition applies to the whole result */
        } else if (c == '<') {
            rc = parse_token_ref(p, out);
        } else if (c == '!') {
            return fail_at(p, at, "negated token references (!<...>) are not supported");
        } else {
            break;
        }
        if (rc) return rc;
        last_start = sym_start;
        has_symbol = true;
        skip_space(p, nested);
    }
    return KITE_OK;
}

static int parse_alternates(gparser *p, ivec *out, bool nested) {
    int rc = parse_sequence(p, out, nested);
    if (!rc) rc = push_elem(p, out, GELEM_END, p->pos);
    while (!rc && peek(p) == '|') {
        p->pos++;
        skip_space(p, true);
        rc = parse_sequence(p, out, nested);
        if (!rc) rc = push_elem(p, out, GELEM_END, p->pos);
    }
    return rc;
}

static int parse_rule(gparser *p) {
    size_t at = p->pos;
    char buf[16];
    while (p->pos < p->len && is_word_char((unsigned char)p->text[p->pos])) p->pos++;
    if (p->pos == at) return fail_at(p, at, "expected a rule name, found %s", describe(p, at, buf));
    uint32_t id;
    int rc = rule_by_name(p, at, p->pos - at, &id);
    if (rc) return rc;
    skip_space(p, false);
    if (p->len - p->pos < 3 || memcmp(p->text + p->pos, "::=", 3) != 0)
        return fail_at(p, p->pos, "expected ::= after rule name '%s', found %s", p->rules[id].name,
                       describe(p, p->pos, buf));
    if (p->rules[id].defined) {
        size_t l, c;
        line_col(p->text, p->len, p->rules[id].def_at, &l, &c);
        return fail_at(p, at, "rule '%s' is defined twice (first at %zu:%zu)", p->rules[id].name, l, c);
    }
    p->rules[id].defined = true;
    p->rules[id].def_at = at;
    p->current = id;
    p->pos += 3;
    skip_space(p, true);
    ivec body = {0};
    rc = parse_alternates(p, &body, false);
    p->rules[id].body = body; /* parse_alternates made no rule pointer stale for `id` after this */
    if (rc) return rc;
    int c = peek(p);
    if (c == '\r' || c == '\n') {
        p->pos++;
    } else if (c == ')') {
        return fail_at(p, p->pos, "unmatched ')' in rule '%s'", p->rules[id].name);
    } else if (c >= 0) {
        return fail_at(p, p->pos, "expected newline or end of input after rule '%s', found %s", p->rules[id].name,
                       describe(p, p->pos, buf));
    }
    skip_space(p, true);
    return KITE_OK;
}

/* ---- checks on the lowered grammar ----------------------------------------------------------- */

/* Name and definition position of rule r for messages: a helper reports the user rule it belongs to. */
static const char *rule_label(const gparser *p, uint32_t r) { return p->rules[p->rules[r].owner].name; }

/* Marks in flag[] the rules that derive the empty string (nullable, count_sets = false) or some finite
 * string (productive, count_sets = true), in time linear in the grammar: an alternative fires when
 * its last pending reference resolves. */
static int close_rules(gparser *p, const kite_gbnf *g, const uint32_t *alt_rule, bool productive, bool *flag) {
    uint32_t *pending = calloc(g->n_alts ? g->n_alts : 1, sizeof *pending);
    uint32_t *occ_start = calloc((size_t)g->n_rules + 1, sizeof *occ_start);
    uint32_t *queue = malloc(((size_t)g->n_rules + 1) * sizeof *queue);
    uint32_t *occ = NULL;
    int rc = KITE_OK;
    if (!pending || !occ_start || !queue) {
        rc = nomem(p);
        goto done;
    }
    size_t n_refs = 0;
    for (uint32_t a = 0; a < g->n_alts; a++) {
        for (uint32_t i = g->alt_first[a]; g->elems[i] != GELEM_END; i++) {
            int32_t e = g->elems[i];
            if (GELEM_IS_REF(e)) {
                pending[a]++;
                occ_start[GELEM_REF_RULE(e)]++;
                n_refs++;
            } else if (!productive) {
                pending[a] = UINT32_MAX / 2; /* a byte set is never empty */
            }
        }
    }
    occ = malloc((n_refs ? n_refs : 1) * sizeof *occ);
    if (!occ) {
        rc = nomem(p);
        goto done;
    }
    /* occ_start as exclusive prefix sums, then fill occurrences (alternative indices) */
    uint32_t sum = 0;
    for (uint32_t r = 0; r <= g->n_rules; r++) {
        uint32_t c = occ_start[r];
        occ_start[r] = sum;
        sum += c;
    }
    for (uint32_t a = 0; a < g->n_alts; a++)
        for (uint32_t i = g->alt_first[a]; g->elems[i] != GELEM_END; i++)
            if (GELEM_IS_REF(g->elems[i])) occ[occ_start[GELEM_REF_RULE(g->elems[i])]++] = a;
    /* occ_start[r] is now the end of r's occurrences; the start is the end of r - 1 */
    size_t head = 0, tail = 0;
    memset(flag, 0, g->n_rules * sizeof *flag);
    for (uint32_t a = 0; a < g->n_alts; a++) {
        if (pending[a] == 0 && !flag[alt_rule[a]]) {
            flag[alt_rule[a]] = true;
            queue[tail++] = alt_rule[a];
        }
    }
    while (head < tail) {
        uint32_t r = queue[head++];
        for (uint32_t k = r ? occ_start[r - 1] : 0; k < occ_start[r]; k++) {
            uint32_t a = occ[k];
            if (--pending[a] == 0 && !flag[alt_rule[a]]) {
                flag[alt_rule[a]] = true;
                queue[tail++] = alt_rule[a];
            }
        }
    }
done:
    free(pending);
    free(occ_start);
    free(queue);
    free(occ);
    return rc;
}

/* Left recursion: in the left-corner graph (r -> s when s can come first in r, after nullable elements),
 * a cycle is harmless only if each edge is a tail call (s last in its alternative: no stack growth).
 * Finds strongly connected components (iterative Tarjan) and rejects any non-tail edge inside one. */
typedef struct lc_edge {
    uint32_t to;
    bool tail;
} lc_edge;

static int check_left_recursion(gparser *p, const kite_gbnf *g, const bool *nullable) {
    int rc = KITE_OK;
    uint32_t n = g->n_rules;
    uint32_t *edge_start = calloc((size_t)n + 1, sizeof *edge_start);
    lc_edge *edges = NULL;
    uint32_t *index = malloc((size_t)n * sizeof *index), *low = malloc((size_t)n * sizeof *low);
    uint32_t *comp = malloc((size_t)n * sizeof *comp), *stack = malloc((size_t)n * sizeof *stack);
    uint32_t *call = malloc((size_t)n * sizeof *call), *call_edge = malloc((size_t)n * sizeof *call_edge);
    bool *on_stack = calloc(n ? n : 1, sizeof *on_stack);
    if (!edge_start || !index || !low || !comp || !stack || !call || !call_edge || !on_stack) {
        rc = nomem(p);
        goto done;
    }
    /* count, then fill the left-corner edges of each rule */
    size_t n_edges = 0;
    for (int pass = 0; pass < 2; pass++) {
        size_t k = 0;
        for (uint32_t r = 0; r < n; r++) {
            if (pass == 1) edge_start[r] = (uint32_t)k;
            for (uint32_t a = g->rule_alt[r]; a < g->rule_alt[r + 1]; a++) {
                for (uint32_t i = g->alt_first[a]; g->elems[i] != GELEM_END; i++) {
                    int32_t e = g->elems[i];
                    if (!GELEM_IS_REF(e)) break;
                    if (pass == 1) edges[k] = (lc_edge){GELEM_REF_RULE(e), g->elems[i + 1] == GELEM_END};
                    k++;
                    if (!nullable[GELEM_REF_RULE(e)]) break;
                }
            }
        }
        if (pass == 0) {
            n_edges = k;
            edges = malloc((n_edges ? n_edges : 1) * sizeof *edges);
            if (!edges) {
                rc = nomem(p);
                goto done;
            }
        } else {
            edge_start[n] = (uint32_t)k;
        }
    }
    const uint32_t unvisited = UINT32_MAX;
    for (uint32_t r = 0; r < n; r++) index[r] = unvisited;
    uint32_t counter = 0, sp = 0, n_comp = 0;
    for (uint32_t root = 0; root < n; root++) {
        if (index[root] != unvisited) continue;
        uint32_t depth = 0;
        call[depth] = root;
        call_edge[depth] = edge_start[root];
        index[root] = low[root] = counter++;
        stack[sp++] = root;
        on_stack[root] = true;
        while (true) {
            uint32_t v = call[depth];
            if (call_edge[depth] < edge_start[v + 1]) {
                uint32_t w = edges[call_edge[depth]++].to;
                if (index[w] == unvisited) {
                    depth++;
                    call[depth] = w;
                    call_edge[depth] = edge_start[w];
                    index[w] = low[w] = counter++;
                    stack[sp++] = w;
                    on_stack[w] = true;
                } else if (on_stack[w] && index[w] < low[v]) {
                    low[v] = index[w];
                }
                continue;
            }
            if (low[v] == index[v]) {
                uint32_t w;
                do {
                    w = stack[--sp];
                    on_stack[w] = false;
                    comp[w] = n_comp;
                } while (w != v);
                n_comp++;
            }
            if (depth == 0) break;
            depth--;
            uint32_t parent = call[depth];
            if (low[v] < low[parent]) low[parent] = low[v];
        }
    }
    /* report the offending rule defined first in the text */
    uint32_t worst = UINT32_MAX;
    for (uint32_t r = 0; r < n; r++)
        for (uint32_t k = edge_start[r]; k < edge_start[r + 1]; k++)
            if (!edges[k].tail && comp[edges[k].to] == comp[r] &&
                (worst == UINT32_MAX || p->rules[r].def_at < p->rules[worst].def_at))
                worst = r;
    if (worst != UINT32_MAX) {
        uint32_t owner = p->rules[worst].owner;
        rc = fail_at(p, p->rules[owner].def_at,
                     "left recursion: rule '%s' can begin with itself without consuming input", rule_label(p, worst));
    }
done:
    free(edge_start);
    free(edges);
    free(index);
    free(low);
    free(comp);
    free(stack);
    free(call);
    free(call_edge);
    free(on_stack);
    return rc;
}

static void free_parser(gparser *p) {
    for (size_t r = 0; r < p->n_rules; r++) {
        free(p->rules[r].name);
        free(p->rules[r].body.v);
    }
    free(p->rules);
    free(p->name_slots);
    free(p->sets);
    free(p->set_slots);
    free(p->refs);
}

void kite_gbnf_free(kite_gbnf *g) {
    if (!g) return;
    if (g->names)
        for (uint32_t r = 0; r < g->n_rules; r++) free(g->names[r]);
    free(g->names);
    free(g->elems);
    free(g->alt_first);
    free(g->rule_alt);
    free(g->sets);
    free(g->token_refs);
    free(g);
}

size_t kite_gbnf_n_rules(const kite_gbnf *g) { return g ? g->n_rules : 0; }

/* Moves the parser's rules into the flat arrays of a kite_gbnf. */
static int flatten(gparser *p, kite_gbnf *g) {
    size_t n_elems = 0, n_alts = 0;
    for (size_t r = 0; r < p->n_rules; r++) {
        n_elems += p->rules[r].body.n;
        for (size_t i = 0; i < p->rules[r].body.n; i++) n_alts += p->rules[r].body.v[i] == GELEM_END;
    }
    g->n_rules = (uint32_t)p->n_rules;
    g->n_elems = (uint32_t)n_elems;
    g->n_alts = (uint32_t)n_alts;
    g->elems = malloc((n_elems ? n_elems : 1) * sizeof *g->elems);
    g->alt_first = malloc((n_alts ? n_alts : 1) * sizeof *g->alt_first);
    g->rule_alt = malloc((p->n_rules + 1) * sizeof *g->rule_alt);
    g->names = calloc(p->n_rules ? p->n_rules : 1, sizeof *g->names);
    g->sets = malloc((p->n_sets ? p->n_sets : 1) * sizeof *g->sets);
    if (!g->elems || !g->alt_first || !g->rule_alt || !g->names || !g->sets) return nomem(p);
    if (p->n_sets) memcpy(g->sets, p->sets, p->n_sets * sizeof *g->sets);
    g->n_sets = (uint32_t)p->n_sets;
    size_t e = 0, a = 0;
    for (size_t r = 0; r < p->n_rules; r++) {
        g->rule_alt[r] = (uint32_t)a;
        const ivec *b = &p->rules[r].body;
        for (size_t i = 0; i < b->n; i++) {
            if (i == 0 || b->v[i - 1] == GELEM_END) g->alt_first[a++] = (uint32_t)(e + i);
        }
        if (b->n) memcpy(g->elems + e, b->v, b->n * sizeof *b->v);
        e += b->n;
    }
    g->rule_alt[p->n_rules] = (uint32_t)a;
    return KITE_OK;
}

int kite_gbnf_parse(const char *text, size_t len, const char *root, kite_gbnf **out, kite_error *e) {
    if (!out) return kite_fail(e, KITE_ERR_INVALID_ARG, "gbnf: no output pointer");
    *out = NULL;
    if (!text && len) return kite_fail(e, KITE_ERR_INVALID_ARG, "gbnf: no grammar text");
    if (len > KITE_GBNF_MAX_TEXT)
        return kite_fail(e, KITE_ERR_FORMAT, "gbnf: grammar text of %zu bytes is past the limit of %u", len,
                         KITE_GBNF_MAX_TEXT);
    if (!root) root = "root";
    gparser p = {.text = text ? text : "", .len = len, .e = e, .any_char_rule = -1};
    kite_gbnf *g = calloc(1, sizeof *g);
    bool *nullable = NULL, *productive = NULL;
    uint32_t *alt_rule = NULL;
    int rc = g ? KITE_OK : nomem(&p);
    if (!rc) {
        skip_space(&p, true);
        if (p.pos >= p.len) rc = kite_fail(e, KITE_ERR_FORMAT, "gbnf: the grammar has no rules");
    }
    while (!rc && p.pos < p.len) rc = parse_rule(&p);
    if (rc) goto done;
    /* every referenced rule defined: report the earliest reference */
    size_t undefined = SIZE_MAX;
    for (size_t r = 0; r < p.n_rules; r++)
        if (!p.rules[r].defined && (undefined == SIZE_MAX || p.rules[r].ref_at < p.rules[undefined].ref_at))
            undefined = r;
    if (undefined != SIZE_MAX) {
        rc = fail_at(&p, p.rules[undefined].ref_at, "undefined rule '%s'", p.rules[undefined].name);
        goto done;
    }
    uint32_t root_id = UINT32_MAX;
    for (size_t r = 0; r < p.n_rules; r++)
        if (p.rules[r].name && strcmp(p.rules[r].name, root) == 0) root_id = (uint32_t)r;
    if (root_id == UINT32_MAX) {
        rc = kite_fail(e, KITE_ERR_FORMAT, "gbnf: no rule named '%s' (the start rule)", root);
        goto done;
    }
    if ((rc = flatten(&p, g))) goto done;
    g->root = root_id;
    nullable = malloc(((size_t)g->n_rules + 1) * sizeof *nullable);
    productive = malloc(((size_t)g->n_rules + 1) * sizeof *productive);
    alt_rule = malloc(((size_t)g->n_alts + 1) * sizeof *alt_rule);
    if (!nullable || !productive || !alt_rule) {
        rc = nomem(&p);
        goto done;
    }
    for (uint32_t r = 0; r < g->n_rules; r++)
        for (uint32_t a = g->rule_alt[r]; a < g->rule_alt[r + 1]; a++) alt_rule[a] = r;
    if ((rc = close_rules(&p, g, alt_rule, true, productive))) goto done;
    size_t stuck = SIZE_MAX;
    for (uint32_t r = 0; r < g->n_rules; r++)
        if (!productive[r] && (stuck == SIZE_MAX || p.rules[r].def_at < p.rules[stuck].def_at)) stuck = r;
    if (stuck != SIZE_MAX) {
        /* every alternative of a rule that cannot finish references another such rule: follow those
         * references until one repeats, which names the recursion itself rather than a rule that uses it */
        bool *walked = nullable; /* free scratch until the nullable pass */
        memset(walked, 0, g->n_rules * sizeof *walked);
        uint32_t r = (uint32_t)stuck;
        while (!walked[r]) {
            walked[r] = true;
            uint32_t next = r;
            for (uint32_t i = g->alt_first[g->rule_alt[r]]; g->elems[i] != GELEM_END; i++)
                if (GELEM_IS_REF(g->elems[i]) && !productive[GELEM_REF_RULE(g->elems[i])]) {
                    next = GELEM_REF_RULE(g->elems[i]);
                    break;
                }
            r = next;
        }
        rc = fail_at(&p, p.rules[p.rules[r].owner].def_at,
                     "rule '%s' can never finish: every alternative recurses without a base case", rule_label(&p, r));
        goto done;
    }
    if ((rc = close_rules(&p, g, alt_rule, false, nullable))) goto done;
    if ((rc = check_left_recursion(&p, g, nullable))) goto done;
done:
    /* the names move into g only now: the messages above read them from p.rules */
    free(nullable);
    free(productive);
    free(alt_rule);
    if (rc) {
        kite_gbnf_free(g);
    } else {
        for (uint32_t r = 0; r < g->n_rules; r++) {
            g->names[r] = p.rules[r].name;
            p.rules[r].name = NULL;
        }
        g->token_refs = p.refs;
        g->n_token_refs = p.n_refs;
        p.refs = NULL;
        *out = g;
    }
    free_parser(&p);
    return rc;
}

size_t kite_gbnf_token_refs(const kite_gbnf *g, const int32_t **ids) {
    if (ids) *ids = g ? g->token_refs : NULL;
    return g ? g->n_token_refs : 0;
}
