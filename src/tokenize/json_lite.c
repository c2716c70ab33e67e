#include "tokenize/json_lite.h"

#include <stdlib.h>
#include <string.h>

#define KJ_MAX_DEPTH 128

typedef struct kj_parser {
    const char *p, *end, *start;
    kj_doc *doc;
    uint32_t cap;
    const char *what;
    kite_error *e;
} kj_parser;

static int kj_err(kj_parser *ps, const char *msg) {
    return kite_fail(ps->e, KITE_ERR_FORMAT, "%s: %s at byte %zu", ps->what, msg, (size_t)(ps->p - ps->start));
}

static void skip_ws(kj_parser *ps) {
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\n' || *ps->p == '\r' || *ps->p == '\t')) ps->p++;
}

static int new_node(kj_parser *ps, uint32_t *idx) {
    kj_doc *d = ps->doc;
    if (d->n_nodes == ps->cap) {
        if (ps->cap >= (1u << 30)) return kj_err(ps, "too many values");
        /* first guess from the text size (one value per 16 bytes is typical of tokenizer.json) */
        uint32_t cap = ps->cap ? ps->cap * 2 : (uint32_t)((size_t)(ps->end - ps->start) / 16 < (1u << 29) ? (size_t)(ps->end - ps->start) / 16 + 64 : (1u << 29));
        kj_node *n = realloc(d->nodes, (size_t)cap * sizeof *n);
        if (!n) return kite_fail(ps->e, KITE_ERR_NOMEM, "%s: out of memory", ps->what);
        d->nodes = n;
        ps->cap = cap;
    }
    *idx = d->n_nodes++;
    memset(&d->nodes[*idx], 0, sizeof(kj_node));
    return KITE_OK;
}

static int hex4(const char *p, uint32_t *v) {
    uint32_t x = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        x <<= 4;
        if (c >= '0' && c <= '9') x |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f') x |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') x |= (uint32_t)(c - 'A' + 10);
        else return -1;
    }
    *v = x;
    return 0;
}

/* Validates one UTF-8 sequence at p (p < end); returns its length or 0. */
static size_t utf8_seq(const unsigned char *p, const unsigned char *end) {
    unsigned char c = p[0];
    size_t n;
    uint32_t cp, min;
    if (c >= 0xC2 && c <= 0xDF) { n = 2; cp = c & 0x1F; min = 0x80; }
    else if (c >= 0xE0 && c <= 0xEF) { n = 3; cp = c & 0x0F; min = 0x800; }
    else if (c >= 0xF0 && c <= 0xF4) { n = 4; cp = c & 0x07; min = 0x10000; }
    else return 0;
    if ((size_t)(end - p) < n) return 0;
    for (size_t k = 1; k < n; k++) {
        if ((p[k] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (p[k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return n;
}

static size_t put_utf8(uint32_t cp, char *out) {
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) { out[0] = (char)(0xC0 | (cp >> 6)); out[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12)); out[1] = (char)(0x80 | ((cp >> 6) & 0x3F)); out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18)); out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Parses a string at ps->p (on the opening quote). */
static int parse_string(kj_parser *ps, const char **out, uint32_t *out_len) {
    const unsigned char *p = (const unsigned char *)ps->p + 1, *end = (const unsigned char *)ps->end;
    const unsigned char *s = p;
    bool escaped = false;
    /* first pass: find the end, validate, note escapes */
    while (p < end && *p != '"') {
        if (*p == '\\') {
            escaped = true;
            if (end - p < 2) break;
            p += 2;
            continue;
        }
        if (*p < 0x20) { ps->p = (const char *)p; return kj_err(ps, "control character in string"); }
        if (*p < 0x80) { p++; continue; }
        size_t n = utf8_seq(p, end);
        if (!n) { ps->p = (const char *)p; return kj_err(ps, "invalid UTF-8 in string"); }
        p += n;
    }
    if (p >= end) { ps->p = (const char *)s - 1; return kj_err(ps, "unterminated string"); }
    size_t raw_len = (size_t)(p - s);
    if (raw_len > UINT32_MAX) return kj_err(ps, "string too long");
    if (!escaped) {
        *out = (const char *)s;
        *out_len = (uint32_t)raw_len;
        ps->p = (const char *)p + 1;
        return KITE_OK;
    }
    char *buf = malloc(raw_len + 1);
    char **pools = buf ? realloc(ps->doc->pools, (ps->doc->n_pools + 1) * sizeof(char *)) : NULL;
    if (!pools) {
        free(buf);
        return kite_fail(ps->e, KITE_ERR_NOMEM, "%s: out of memory", ps->what);
    }
    ps->doc->pools = pools;
    pools[ps->doc->n_pools++] = buf;
    size_t n = 0;
    for (const unsigned char *q = s; q < p;) {
        if (*q != '\\') { buf[n++] = (char)*q++; continue; }
        ps->p = (const char *)q;
        char c = (char)q[1];
        q += 2;
        switch (c) {
        case '"': buf[n++] = '"'; break;
        case '\\': buf[n++] = '\\'; break;
        case '/': buf[n++] = '/'; break;
        case 'b': buf[n++] = '\b'; break;
        case 'f': buf[n++] = '\f'; break;
        case 'n': buf[n++] = '\n'; break;
        case 'r': buf[n++] = '\r'; break;
        case 't': buf[n++] = '\t'; break;
        case 'u': {
            uint32_t cp;
            if (p - q < 4 || hex4((const char *)q, &cp)) return kj_err(ps, "bad \\u escape");
            q += 4;
            if (cp >= 0xDC00 && cp <= 0xDFFF) return kj_err(ps, "lone low surrogate");
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                uint32_t lo;
                if (p - q < 6 || q[0] != '\\' || q[1] != 'u' || hex4((const char *)q + 2, &lo) || lo < 0xDC00 || lo > 0xDFFF)
                    return kj_err(ps, "lone high surrogate");
                q += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            n += put_utf8(cp, buf + n); /* never longer than its escape */
            break;
        }
        default: return kj_err(ps, "bad escape");
        }
    }
    *out = buf;
    *out_len = (uint32_t)n;
    ps->p = (const char *)p + 1;
    return KITE_OK;
}

static int parse_number(kj_parser *ps, kj_node *node) {
    const char *p = ps->p, *s = p;
    if (p < ps->end && *p == '-') p++;
    if (p >= ps->end) return kj_err(ps, "bad number");
    if (*p == '0') p++;
    else if (*p >= '1' && *p <= '9') while (p < ps->end && *p >= '0' && *p <= '9') p++;
    else return kj_err(ps, "bad number");
    bool integer = true;
    if (p < ps->end && *p == '.') {
        integer = false;
        p++;
        if (p >= ps->end || *p < '0' || *p > '9') return kj_err(ps, "bad number");
        while (p < ps->end && *p >= '0' && *p <= '9') p++;
    }
    if (p < ps->end && (*p == 'e' || *p == 'E')) {
        integer = false;
        p++;
        if (p < ps->end && (*p == '+' || *p == '-')) p++;
        if (p >= ps->end || *p < '0' || *p > '9') return kj_err(ps, "bad number");
        while (p < ps->end && *p >= '0' && *p <= '9') p++;
    }
    char buf[64];
    size_t n = (size_t)(p - s);
    node->type = KJ_NUMBER;
    if (integer) {
        bool neg = *s == '-';
        int64_t v = 0;
        node->is_int = true;
        for (const char *q = s + neg; q < p && node->is_int; q++) {
            int d = *q - '0';
            if (v > (INT64_MAX - d) / 10) node->is_int = false;
            else v = v * 10 + d;
        }
        if (node->is_int) node->ival = neg ? -v : v;
    }
    if (!node->is_int) {
        if (n >= sizeof buf) n = sizeof buf - 1; /* enough digits for a double */
        memcpy(buf, s, n);
        buf[n] = '\0';
        node->num = strtod(buf, NULL);
    }
    ps->p = p;
    return KITE_OK;
}

static int parse_value(kj_parser *ps, uint32_t idx, int depth);

static int parse_container(kj_parser *ps, uint32_t idx, int depth, bool object) {
    if (depth >= KJ_MAX_DEPTH) return kj_err(ps, "nesting too deep");
    ps->doc->nodes[idx].type = object ? KJ_OBJECT : KJ_ARRAY;
    ps->p++;
    skip_ws(ps);
    uint32_t prev = 0, count = 0;
    if (ps->p < ps->end && *ps->p == (object ? '}' : ']')) {
        ps->p++;
        return KITE_OK;
    }
    for (;;) {
        const char *key = NULL;
        uint32_t key_len = 0;
        if (object) {
            if (ps->p >= ps->end || *ps->p != '"') return kj_err(ps, "expected a member name");
            int rc = parse_string(ps, &key, &key_len);
            if (rc) return rc;
            skip_ws(ps);
            if (ps->p >= ps->end || *ps->p != ':') return kj_err(ps, "expected ':'");
            ps->p++;
        }
        uint32_t child;
        int rc = new_node(ps, &child);
        if (rc) return rc;
        ps->doc->nodes[child].key = key;
        ps->doc->nodes[child].key_len = key_len;
        if (prev) ps->doc->nodes[prev].next = child;
        else ps->doc->nodes[idx].first = child;
        prev = child;
        if (count == UINT32_MAX) return kj_err(ps, "too many elements");
        count++;
        rc = parse_value(ps, child, depth + 1);
        if (rc) return rc;
        skip_ws(ps);
        if (ps->p >= ps->end) return kj_err(ps, "unterminated container");
        if (*ps->p == ',') {
            ps->p++;
            skip_ws(ps);
            continue;
        }
        if (*ps->p == (object ? '}' : ']')) {
            ps->p++;
            break;
        }
        return kj_err(ps, object ? "expected ',' or '}'" : "expected ',' or ']'");
    }
    ps->doc->nodes[idx].len = count;
    return KITE_OK;
}

static int parse_value(kj_parser *ps, uint32_t idx, int depth) {
    skip_ws(ps);
    if (ps->p >= ps->end) return kj_err(ps, "unexpected end");
    char c = *ps->p;
    size_t left = (size_t)(ps->end - ps->p);
    switch (c) {
    case '{': return parse_container(ps, idx, depth, true);
    case '[': return parse_container(ps, idx, depth, false);
    case '"': {
        const char *s;
        uint32_t n;
        int rc = parse_string(ps, &s, &n);
        if (rc) return rc;
        ps->doc->nodes[idx].type = KJ_STRING;
        ps->doc->nodes[idx].str = s;
        ps->doc->nodes[idx].len = n;
        return KITE_OK;
    }
    case 't':
        if (left < 4 || memcmp(ps->p, "true", 4)) return kj_err(ps, "bad literal");
        ps->doc->nodes[idx].type = KJ_TRUE;
        ps->p += 4;
        return KITE_OK;
    case 'f':
        if (left < 5 || memcmp(ps->p, "false", 5)) return kj_err(ps, "bad literal");
        ps->doc->nodes[idx].type = KJ_FALSE;
        ps->p += 5;
        return KITE_OK;
    case 'n':
        if (left < 4 || memcmp(ps->p, "null", 4)) return kj_err(ps, "bad literal");
        ps->doc->nodes[idx].type = KJ_NULL;
        ps->p += 4;
        return KITE_OK;
    default:
        return parse_number(ps, &ps->doc->nodes[idx]);
    }
}

int kj_parse(kj_doc *doc, const char *text, size_t len, const char *what, kite_error *e) {
    memset(doc, 0, sizeof *doc);
    kj_parser ps = {text, text + len, text, doc, 0, what, e};
    if (!text) return kite_fail(e, KITE_ERR_FORMAT, "%s: empty", what);
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) ps.p += 3; /* a UTF-8 byte order mark */
    uint32_t absent, root; /* node 0 stands for "absent"; the root is node 1 */
    int rc = new_node(&ps, &absent);
    if (!rc) rc = new_node(&ps, &root);
    if (!rc) rc = parse_value(&ps, root, 0);
    if (!rc) {
        skip_ws(&ps);
        if (ps.p != ps.end) rc = kj_err(&ps, "trailing characters");
    }
    if (rc) kj_free(doc);
    return rc;
}

void kj_free(kj_doc *doc) {
    for (size_t i = 0; i < doc->n_pools; i++) free(doc->pools[i]);
    free(doc->pools);
    free(doc->nodes);
    memset(doc, 0, sizeof *doc);
}

uint32_t kj_get(const kj_doc *d, uint32_t obj, const char *key) {
    if (kj_type_of(d, obj) != KJ_OBJECT) return 0;
    size_t n = strlen(key);
    uint32_t found = 0;
    for (uint32_t c = d->nodes[obj].first; c; c = d->nodes[c].next)
        if (d->nodes[c].key_len == n && memcmp(d->nodes[c].key, key, n) == 0) found = c;
    return found;
}

uint32_t kj_index(const kj_doc *d, uint32_t arr, uint32_t k) {
    if (kj_type_of(d, arr) != KJ_ARRAY) return 0;
    uint32_t c = d->nodes[arr].first;
    while (c && k--) c = d->nodes[c].next;
    return c;
}

bool kj_string(const kj_doc *d, uint32_t i, const char **s, size_t *len) {
    if (kj_type_of(d, i) != KJ_STRING) return false;
    *s = d->nodes[i].str;
    *len = d->nodes[i].len;
    return true;
}

bool kj_string_is(const kj_doc *d, uint32_t i, const char *want) {
    const char *s;
    size_t n;
    return kj_string(d, i, &s, &n) && n == strlen(want) && memcmp(s, want, n) == 0;
}

bool kj_bool(const kj_doc *d, uint32_t i, bool fallback) {
    kj_type t = kj_type_of(d, i);
    return t == KJ_TRUE ? true : t == KJ_FALSE ? false : fallback;
}
