/* Lexer and parser of the Jinja interpreter: a port of @huggingface/jinja 0.5.11's preprocess(),
 * tokenize() and parse(), keeping their rules (and their errors) so the same templates are accepted
 * and produce the same tree. Positions are tracked back to the source so errors name its line. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja_internal.h"

/* ---- arena ---- */
void *ja_alloc(jarena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    if (a->head && a->head->cap - a->head->used >= n) {
        void *p = a->head->data + a->head->used;
        a->head->used += n;
        return p;
    }
    size_t cap = n > 65536 ? n : 65536;
    if (a->head && a->head->cap >= 65536 && cap < a->head->cap * 2 && a->head->cap * 2 <= (64u << 20) && n <= a->head->cap)
        cap = a->head->cap * 2;
    if (a->budget && (a->total + cap > a->budget)) {
        if (a->total + n + sizeof(jchunk) > a->budget) return NULL;
        cap = n;
    }
    jchunk *c = calloc(1, sizeof(jchunk) + cap);
    if (!c) return NULL;
    c->cap = cap;
    c->used = n;
    c->next = a->head;
    a->head = c;
    a->total += cap + sizeof(jchunk);
    return c->data;
}

void ja_free_all(jarena *a) {
    jchunk *c = a->head;
    while (c) {
        jchunk *next = c->next;
        free(c);
        c = next;
    }
    a->head = NULL;
    a->total = 0;
}

/* ---- JavaScript whitespace (/\s/): ASCII \t\n\v\f\r and space plus Unicode spaces ---- */
static bool js_space_cp(uint32_t c) {
    return c == 0x09 || c == 0x0a || c == 0x0b || c == 0x0c || c == 0x0d || c == 0x20 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000 ||
           c == 0xfeff;
}

size_t js_space_at(const char *s, size_t n) {
    if (n == 0) return 0;
    unsigned char c = (unsigned char)s[0];
    if (c < 0x80) return js_space_cp(c) ? 1 : 0;
    if (c == 0xc2 && n >= 2 && (unsigned char)s[1] == 0xa0) return 2;
    if ((c == 0xe1 || c == 0xe2 || c == 0xe3 || c == 0xef) && n >= 3) {
        uint32_t cp = ((uint32_t)(c & 0x0f) << 12) | ((uint32_t)((unsigned char)s[1] & 0x3f) << 6) |
                      ((unsigned char)s[2] & 0x3f);
        if (((unsigned char)s[1] & 0xc0) == 0x80 && ((unsigned char)s[2] & 0xc0) == 0x80 && js_space_cp(cp)) return 3;
    }
    return 0;
}

size_t js_space_before(const char *s, size_t n) {
    if (n >= 1 && js_space_at(s + n - 1, 1) == 1) return 1;
    if (n >= 2 && js_space_at(s + n - 2, 2) == 2) return 2;
    if (n >= 3 && js_space_at(s + n - 3, 3) == 3) return 3;
    return 0;
}

/* ---- Number.prototype.toString ---- */
size_t js_number_to_string(double v, char *buf) {
    if (isnan(v)) return (size_t)snprintf(buf, 32, "NaN");
    if (isinf(v)) return (size_t)snprintf(buf, 32, v < 0 ? "-Infinity" : "Infinity");
    if (v == 0) return (size_t)snprintf(buf, 32, "0");
    char tmp[40];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, v);
        if (strtod(tmp, NULL) == v) break;
    }
    if (prec > 17) prec = 17;
    /* tmp: [-]d[.ddd]e[+-]XX */
    char digits[24];
    int nd = 0;
    const char *p = tmp;
    bool neg = false;
    if (*p == '-') {
        neg = true;
        p++;
    }
    while (*p && *p != 'e') {
        if (*p >= '0' && *p <= '9') digits[nd++] = *p;
        p++;
    }
    int exp10 = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    int n = exp10 + 1; /* the decimal point sits after n digits */
    char *o = buf;
    if (neg) *o++ = '-';
    if (nd <= n && n <= 21) {
        memcpy(o, digits, (size_t)nd);
        o += nd;
        for (int i = nd; i < n; i++) *o++ = '0';
    } else if (0 < n && n <= 21) {
        memcpy(o, digits, (size_t)n);
        o += n;
        *o++ = '.';
        memcpy(o, digits + n, (size_t)(nd - n));
        o += nd - n;
    } else if (-6 < n && n <= 0) {
        *o++ = '0';
        *o++ = '.';
        for (int i = 0; i < -n; i++) *o++ = '0';
        memcpy(o, digits, (size_t)nd);
        o += nd;
    } else {
        *o++ = digits[0];
        if (nd > 1) {
            *o++ = '.';
            memcpy(o, digits + 1, (size_t)(nd - 1));
            o += nd - 1;
        }
        o += snprintf(o, 8, "e%c%d", n - 1 >= 0 ? '+' : '-', abs(n - 1));
    }
    *o = 0;
    return (size_t)(o - buf);
}

/* ---- preprocessing, with every byte's source offset kept for line numbers ---- */
typedef struct pbuf {
    char *s;
    uint32_t *off;
    size_t len;
} pbuf;

typedef struct lexer {
    jarena *arena;
    kite_error *e;
    const char *source;
    size_t source_len;
    uint32_t *line_starts; /* offset of each source line's first byte */
    size_t n_lines;
    pbuf src;
    jtok *toks;
    size_t n, cap;
    bool failed;
} lexer;

static uint32_t line_of(const lexer *lx, uint32_t off) {
    size_t lo = 0, hi = lx->n_lines; /* the last line starting at or before off */
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (lx->line_starts[mid] <= off) lo = mid;
        else hi = mid;
    }
    return (uint32_t)lo + 1;
}

static int lex_fail(lexer *lx, uint32_t line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int lex_fail(lexer *lx, uint32_t line, const char *fmt, ...) {
    if (lx->failed) return -1;
    lx->failed = true;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    kite_fail(lx->e, KITE_ERR_FORMAT, "chat template line %u: %s", line, msg);
    return -1;
}

static int nomem(lexer *lx) {
    if (lx->failed) return -1;
    lx->failed = true;
    kite_fail(lx->e, KITE_ERR_NOMEM, "chat template: out of memory");
    return -1;
}

static bool pbuf_new(lexer *lx, pbuf *b, size_t cap) {
    b->s = ja_alloc(lx->arena, cap + 1);
    b->off = ja_alloc(lx->arena, (cap + 1) * sizeof(uint32_t));
    b->len = 0;
    return b->s && b->off;
}

static inline void pbuf_put(pbuf *b, const pbuf *from, size_t i) {
    b->s[b->len] = from->s[i];
    b->off[b->len] = from->off[i];
    b->len++;
}

/* lstrip_blocks: /^[ \t]*({[#%-])/gm -> "$1" (JS ^ with m: after \n, \r, U+2028, U+2029). */
static int pre_lstrip(lexer *lx) {
    pbuf in = lx->src, out;
    if (!pbuf_new(lx, &out, in.len)) return nomem(lx);
    size_t i = 0;
    while (i < in.len) {
        bool line_start = i == 0 || in.s[i - 1] == '\n' || in.s[i - 1] == '\r' ||
                          (i >= 3 && (unsigned char)in.s[i - 3] == 0xe2 && (unsigned char)in.s[i - 2] == 0x80 &&
                           ((unsigned char)in.s[i - 1] == 0xa8 || (unsigned char)in.s[i - 1] == 0xa9));
        if (line_start) {
            size_t j = i;
            while (j < in.len && (in.s[j] == ' ' || in.s[j] == '\t')) j++;
            if (j > i && j + 1 < in.len && in.s[j] == '{' && (in.s[j + 1] == '#' || in.s[j + 1] == '%' || in.s[j + 1] == '-')) {
                i = j;
                continue;
            }
        }
        pbuf_put(&out, &in, i);
        i++;
    }
    lx->src = out;
    return 0;
}

/* trim_blocks: /([#%-]})\n/g -> "$1". */
static int pre_trim(lexer *lx) {
    pbuf in = lx->src, out;
    if (!pbuf_new(lx, &out, in.len)) return nomem(lx);
    size_t i = 0;
    while (i < in.len) {
        if (i + 2 < in.len && (in.s[i] == '#' || in.s[i] == '%' || in.s[i] == '-') && in.s[i + 1] == '}' && in.s[i + 2] == '\n') {
            pbuf_put(&out, &in, i);
            pbuf_put(&out, &in, i + 1);
            i += 3;
            continue;
        }
        pbuf_put(&out, &in, i);
        i++;
    }
    lx->src = out;
    return 0;
}

static size_t skip_ws(const pbuf *b, size_t i) {
    size_t k;
    while (i < b->len && (k = js_space_at(b->s + i, b->len - i)) > 0) i += k;
    return i;
}

/* /(\s*){%(-?)\s*(?:end)?generation\s*(-?)%}(\s*)/gs -> (lstrip ? "" : before) + (rstrip ? "" : after):
 * the {% generation %} markers HF uses for assistant masks render as nothing. Returns the end of the
 * tag at q (just past "%}") or 0 when q does not start one. */
static size_t generation_tag(const pbuf *b, size_t q, bool *lstrip, bool *rstrip) {
    size_t i = q + 2;
    *lstrip = *rstrip = false;
    if (i < b->len && b->s[i] == '-') {
        *lstrip = true;
        i++;
    }
    i = skip_ws(b, i);
    if (i + 3 <= b->len && memcmp(b->s + i, "end", 3) == 0 && i + 13 <= b->len && memcmp(b->s + i + 3, "generation", 10) == 0)
        i += 3;
    if (i + 10 > b->len || memcmp(b->s + i, "generation", 10) != 0) return 0;
    i = skip_ws(b, i + 10);
    if (i < b->len && b->s[i] == '-') {
        *rstrip = true;
        i++;
    }
    if (i + 2 > b->len || b->s[i] != '%' || b->s[i + 1] != '}') return 0;
    return i + 2;
}

static int pre_generation(lexer *lx) {
    pbuf in = lx->src, out;
    if (!pbuf_new(lx, &out, in.len)) return nomem(lx);
    size_t p = 0, q = 0;
    while (q + 1 < in.len) {
        bool ls, rs;
        size_t end;
        if (in.s[q] == '{' && in.s[q + 1] == '%' && (end = generation_tag(&in, q, &ls, &rs)) > 0) {
            size_t k = q, w;
            while (k > p && (w = js_space_before(in.s + p, k - p)) > 0) k -= w;
            size_t after = skip_ws(&in, end);
            for (size_t i = p; i < k; i++) pbuf_put(&out, &in, i);
            if (!ls)
                for (size_t i = k; i < q; i++) pbuf_put(&out, &in, i);
            if (!rs)
                for (size_t i = end; i < after; i++) pbuf_put(&out, &in, i);
            p = q = after;
            continue;
        }
        q++;
    }
    for (size_t i = p; i < in.len; i++) pbuf_put(&out, &in, i);
    lx->src = out;
    return 0;
}

/* ---- tokenize() ---- */
static int push_tok(lexer *lx, jtok_type type, const char *s, size_t len, size_t pos) {
    if (lx->n == lx->cap) {
        size_t cap = lx->cap ? lx->cap * 2 : 256;
        jtok *t = ja_alloc(lx->arena, cap * sizeof(jtok));
        if (!t) return nomem(lx);
        if (lx->n) memcpy(t, lx->toks, lx->n * sizeof(jtok));
        lx->toks = t;
        lx->cap = cap;
    }
    uint32_t off = pos < lx->src.len ? lx->src.off[pos] : (uint32_t)lx->source_len;
    lx->toks[lx->n++] = (jtok){type, line_of(lx, off), s, len};
    return 0;
}

static uint32_t line_at(const lexer *lx, size_t pos) {
    return line_of(lx, pos < lx->src.len ? lx->src.off[pos] : (uint32_t)lx->source_len);
}

static bool starts(const pbuf *b, size_t i, const char *lit) {
    size_t n = strlen(lit);
    return i + n <= b->len && memcmp(b->s + i, lit, n) == 0;
}

static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_word(char c) { return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }

static void strip_trailing_ws(lexer *lx) {
    if (lx->n == 0 || lx->toks[lx->n - 1].type != T_TEXT) return;
    jtok *t = &lx->toks[lx->n - 1];
    size_t w;
    while (t->len > 0 && (w = js_space_before(t->s, t->len)) > 0) t->len -= w;
    if (t->len == 0) lx->n--;
}

static void put_utf8(char *o, size_t *n, uint32_t cp) {
    if (cp < 0x80) o[(*n)++] = (char)cp;
    else if (cp < 0x800) {
        o[(*n)++] = (char)(0xc0 | (cp >> 6));
        o[(*n)++] = (char)(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        o[(*n)++] = (char)(0xe0 | (cp >> 12));
        o[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[(*n)++] = (char)(0x80 | (cp & 0x3f));
    } else {
        o[(*n)++] = (char)(0xf0 | (cp >> 18));
        o[(*n)++] = (char)(0x80 | ((cp >> 12) & 0x3f));
        o[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[(*n)++] = (char)(0x80 | (cp & 0x3f));
    }
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* A string literal's body from *pos (just past the quote) up to the closing quote, unescaped. */
static int lex_string(lexer *lx, size_t *pos, char quote) {
    const pbuf *b = &lx->src;
    size_t i = *pos, start = i;
    char *o = ja_alloc(lx->arena, b->len - i + 1);
    if (!o) return nomem(lx);
    size_t n = 0;
    uint32_t pending_hi = 0; /* a \uD800-\uDBFF waiting for its low half */
    for (;;) {
        if (i >= b->len) return lex_fail(lx, line_at(lx, start), "Unexpected end of input");
        char c = b->s[i];
        if (c == quote) break;
        if (c == '\\') {
            i++;
            if (i >= b->len) return lex_fail(lx, line_at(lx, i - 1), "Unexpected end of input");
            char esc = b->s[i++];
            if (esc == 'x' || esc == 'u') {
                size_t hl = esc == 'x' ? 2 : 4;
                uint32_t cp = 0;
                if (i + hl > b->len) return lex_fail(lx, line_at(lx, i), "Invalid hexadecimal escape sequence: \\%c", esc);
                for (size_t k = 0; k < hl; k++) {
                    int h = hexval(b->s[i + k]);
                    if (h < 0) return lex_fail(lx, line_at(lx, i), "Invalid hexadecimal escape sequence: \\%c%.*s", esc, (int)hl, b->s + i);
                    cp = cp * 16 + (uint32_t)h;
                }
                i += hl;
                if (pending_hi && cp >= 0xdc00 && cp <= 0xdfff) {
                    put_utf8(o, &n, 0x10000 + ((pending_hi - 0xd800) << 10) + (cp - 0xdc00));
                    pending_hi = 0;
                    continue;
                }
                if (pending_hi) put_utf8(o, &n, 0xfffd);
                pending_hi = 0;
                if (cp >= 0xd800 && cp <= 0xdbff) pending_hi = cp;
                else if (cp >= 0xdc00 && cp <= 0xdfff) put_utf8(o, &n, 0xfffd);
                else put_utf8(o, &n, cp);
                continue;
            }
            if (pending_hi) put_utf8(o, &n, 0xfffd);
            pending_hi = 0;
            char un;
            switch (esc) {
            case 'n': un = '\n'; break;
            case 't': un = '\t'; break;
            case 'r': un = '\r'; break;
            case 'b': un = '\b'; break;
            case 'f': un = '\f'; break;
            case 'v': un = '\v'; break;
            case '\'': un = '\''; break;
            case '"': un = '"'; break;
            case '\\': un = '\\'; break;
            default: return lex_fail(lx, line_at(lx, i - 1), "Unexpected escaped character: %c", esc);
            }
            o[n++] = un;
            continue;
        }
        if (pending_hi) put_utf8(o, &n, 0xfffd);
        pending_hi = 0;
        o[n++] = c;
        i++;
        if (i >= b->len) return lex_fail(lx, line_at(lx, start), "Unexpected end of input");
    }
    if (pending_hi) put_utf8(o, &n, 0xfffd);
    o[n] = 0;
    if (push_tok(lx, T_STR, o, n, start)) return -1;
    *pos = i + 1;
    return 0;
}

static const struct {
    const char *seq;
    jtok_type type;
} ORDERED_MAPPING[] = {
    {"{%", T_OSTMT}, {"%}", T_CSTMT}, {"{{", T_OEXPR}, {"}}", T_CEXPR}, {"(", T_OPAREN}, {")", T_CPAREN},
    {"{", T_OCURLY}, {"}", T_CCURLY}, {"[", T_OSQ}, {"]", T_CSQ}, {",", T_COMMA}, {".", T_DOT}, {":", T_COLON},
    {"|", T_PIPE}, {"<=", T_CMP}, {">=", T_CMP}, {"==", T_CMP}, {"!=", T_CMP}, {"<", T_CMP}, {">", T_CMP},
    {"+", T_ADD}, {"-", T_ADD}, {"~", T_ADD}, {"**", T_POW}, {"*", T_MUL}, {"//", T_MUL}, {"/", T_MUL},
    {"%", T_MUL}, {"=", T_EQUALS},
};

static int lex(lexer *lx) {
    const pbuf *b = &lx->src;
    const char *s = b->s;
    size_t len = b->len, cur = 0;
    int curly_depth = 0;
    while (cur < len) {
        jtok_type last = lx->n ? lx->toks[lx->n - 1].type : (jtok_type)-1;
        if ((int)last == -1 || last == T_CSTMT || last == T_CEXPR || last == T_COMMENT) {
            size_t start = cur;
            while (cur < len && !(s[cur] == '{' && cur + 1 < len && (s[cur + 1] == '%' || s[cur + 1] == '{' || s[cur + 1] == '#'))) cur++;
            if (cur > start) {
                if (push_tok(lx, T_TEXT, s + start, cur - start, start)) return -1;
                continue;
            }
        }
        if (s[cur] == '{' && cur + 1 < len && s[cur + 1] == '#') {
            size_t open = cur;
            cur += 2;
            bool strip_before = cur < len && s[cur] == '-';
            if (strip_before) cur++;
            size_t cstart = cur;
            while (!(cur < len && s[cur] == '#' && cur + 1 < len && s[cur + 1] == '}')) {
                if (cur + 2 >= len) return lex_fail(lx, line_at(lx, open), "Missing end of comment tag");
                cur++;
            }
            size_t clen = cur - cstart;
            bool strip_after = clen > 0 && s[cstart + clen - 1] == '-';
            if (strip_after) clen--;
            if (strip_before) strip_trailing_ws(lx);
            if (push_tok(lx, T_COMMENT, s + cstart, clen, open)) return -1;
            cur += 2;
            if (strip_after) cur = skip_ws(b, cur);
            continue;
        }
        if (starts(b, cur, "{%-")) {
            strip_trailing_ws(lx);
            if (push_tok(lx, T_OSTMT, "{%", 2, cur)) return -1;
            cur += 3;
            continue;
        }
        if (starts(b, cur, "{{-")) {
            strip_trailing_ws(lx);
            if (push_tok(lx, T_OEXPR, "{{", 2, cur)) return -1;
            curly_depth = 0;
            cur += 3;
            continue;
        }
        { /* consumeWhile(isWhitespace): reaching the end inside is an error */
            size_t w;
            while (cur < len && (w = js_space_at(s + cur, len - cur)) > 0) {
                cur += w;
                if (cur >= len) return lex_fail(lx, line_at(lx, len - 1), "Unexpected end of input");
            }
        }
        if (starts(b, cur, "-%}")) {
            if (push_tok(lx, T_CSTMT, "%}", 2, cur)) return -1;
            cur = skip_ws(b, cur + 3);
            continue;
        }
        if (starts(b, cur, "-}}")) {
            if (push_tok(lx, T_CEXPR, "}}", 2, cur)) return -1;
            cur = skip_ws(b, cur + 3);
            continue;
        }
        char ch = s[cur];
        if (ch == '-' || ch == '+') {
            jtok_type l2 = lx->n ? lx->toks[lx->n - 1].type : (jtok_type)-1;
            if ((int)l2 == -1 || l2 == T_TEXT) return lex_fail(lx, line_at(lx, cur), "Unexpected character: %c", ch);
            if (!(l2 == T_IDENT || l2 == T_NUM || l2 == T_STR || l2 == T_CPAREN || l2 == T_CSQ)) {
                size_t start = cur;
                cur++;
                while (cur < len && is_digit(s[cur])) {
                    cur++;
                    if (cur >= len) return lex_fail(lx, line_at(lx, start), "Unexpected end of input");
                }
                size_t ndig = cur - start - 1;
                if (ndig > 0 && cur + 1 < len && s[cur] == '.' && is_digit(s[cur + 1])) {
                    cur++;
                    while (cur < len && is_digit(s[cur])) {
                        cur++;
                        if (cur >= len) return lex_fail(lx, line_at(lx, start), "Unexpected end of input");
                    }
                }
                if (push_tok(lx, ndig > 0 ? T_NUM : T_UNARY, s + start, cur - start, start)) return -1;
                continue;
            }
        }
        bool matched = false;
        for (size_t k = 0; k < sizeof ORDERED_MAPPING / sizeof ORDERED_MAPPING[0]; k++) {
            if (ORDERED_MAPPING[k].type == T_CEXPR && curly_depth > 0) continue;
            if (starts(b, cur, ORDERED_MAPPING[k].seq)) {
                jtok_type ty = ORDERED_MAPPING[k].type;
                size_t sl = strlen(ORDERED_MAPPING[k].seq);
                if (push_tok(lx, ty, s + cur, sl, cur)) return -1;
                if (ty == T_OEXPR) curly_depth = 0;
                else if (ty == T_OCURLY) curly_depth++;
                else if (ty == T_CCURLY) curly_depth--;
                cur += sl;
                matched = true;
                break;
            }
        }
        if (matched) continue;
        if (ch == '\'' || ch == '"') {
            cur++;
            if (lex_string(lx, &cur, ch)) return -1;
            continue;
        }
        if (is_digit(ch)) {
            size_t start = cur;
            while (cur < len && is_digit(s[cur])) {
                cur++;
                if (cur >= len) return lex_fail(lx, line_at(lx, start), "Unexpected end of input");
            }
            jtok_type l3 = lx->n ? lx->toks[lx->n - 1].type : (jtok_type)-1;
            if (l3 != T_DOT && cur + 1 < len && s[cur] == '.' && is_digit(s[cur + 1])) {
                cur++;
                while (cur < len && is_digit(s[cur])) {
                    cur++;
                    if (cur >= len) return lex_fail(lx, line_at(lx, start), "Unexpected end of input");
                }
            }
            if (push_tok(lx, T_NUM, s + start, cur - start, start)) return -1;
            continue;
        }
        if (is_word(ch)) {
            size_t start = cur;
            while (cur < len && is_word(s[cur])) {
                cur++;
                if (cur >= len) return lex_fail(lx, line_at(lx, start), "Unexpected end of input");
            }
            if (push_tok(lx, T_IDENT, s + start, cur - start, start)) return -1;
            continue;
        }
        if ((unsigned char)ch >= 0x80) {
            size_t k = 1;
            while (cur + k < len && k < 4 && ((unsigned char)s[cur + k] & 0xc0) == 0x80) k++;
            return lex_fail(lx, line_at(lx, cur), "Unexpected character: %.*s", (int)k, s + cur);
        }
        return lex_fail(lx, line_at(lx, cur), "Unexpected character: %c", ch);
    }
    return 0;
}

/* ---- parse() ---- */
#define MAX_PARSE_DEPTH 200

typedef struct parser {
    lexer *lx;
    jtok *t;
    size_t n, cur;
    int depth;
} parser;

static const char *TOKEN_NAMES[] = {
    "Text", "NumericLiteral", "StringLiteral", "Identifier", "Equals", "OpenParen", "CloseParen", "OpenStatement",
    "CloseStatement", "OpenExpression", "CloseExpression", "OpenSquareBracket", "CloseSquareBracket",
    "OpenCurlyBracket", "CloseCurlyBracket", "Comma", "Dot", "Colon", "Pipe", "AdditiveBinaryOperator",
    "MultiplicativeBinaryOperator", "ExponentiationBinaryOperator", "ComparisonBinaryOperator", "UnaryOperator",
    "Comment",
};

static uint32_t cur_line(const parser *p) {
    if (p->cur < p->n) return p->t[p->cur].line;
    return p->n ? p->t[p->n - 1].line : 1;
}

static jnode *pfail(parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static jnode *pfail(parser *p, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    lex_fail(p->lx, cur_line(p), "%s", msg);
    return NULL;
}
#define PFAIL(p, ...) pfail((p), __VA_ARGS__)

static jnode *mk(parser *p, jnode_type type, uint32_t line) {
    jnode *nd = ja_alloc(p->lx->arena, sizeof(jnode));
    if (!nd) {
        nomem(p->lx);
        return NULL;
    }
    nd->type = type;
    nd->line = line;
    return nd;
}

typedef struct nlist {
    jnode **v;
    size_t n, cap;
} nlist;

static bool nl_push(parser *p, nlist *l, jnode *nd) {
    if (!nd) return false;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        jnode **v = ja_alloc(p->lx->arena, cap * sizeof(jnode *));
        if (!v) {
            nomem(p->lx);
            return false;
        }
        if (l->n) memcpy(v, l->v, l->n * sizeof(jnode *));
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = nd;
    return true;
}

static bool is(const parser *p, jtok_type a) { return p->cur < p->n && p->t[p->cur].type == a; }
static bool is_ident(const parser *p, size_t at, const char *name) {
    size_t k = p->cur + at;
    return k < p->n && p->t[k].type == T_IDENT && p->t[k].len == strlen(name) && memcmp(p->t[k].s, name, p->t[k].len) == 0;
}
static bool is_statement(const parser *p, const char *a, const char *b, const char *c) {
    if (!(p->cur < p->n && p->t[p->cur].type == T_OSTMT)) return false;
    return is_ident(p, 1, a) || (b && is_ident(p, 1, b)) || (c && is_ident(p, 1, c));
}

static bool expect(parser *p, jtok_type type, const char *what) {
    if (p->cur >= p->n) {
        lex_fail(p->lx, cur_line(p), "Parser Error: %s. unexpected end of template", what);
        return false;
    }
    jtok *t = &p->t[p->cur++];
    if (t->type != type) {
        lex_fail(p->lx, t->line, "Parser Error: %s. %s !== %s.", what, TOKEN_NAMES[t->type], TOKEN_NAMES[type]);
        return false;
    }
    return true;
}

static bool expect_ident(parser *p, const char *name) {
    if (!is_ident(p, 0, name)) {
        lex_fail(p->lx, cur_line(p), "Expected %s", name);
        return false;
    }
    p->cur++;
    return true;
}

static jnode *parse_any(parser *p);
static jnode *parse_expression(parser *p);
static jnode *parse_primary(parser *p);
static bool parse_args(parser *p, nlist *out, bool parameters);

static bool need(parser *p) {
    if (p->cur >= p->n) {
        lex_fail(p->lx, cur_line(p), "Unexpected end of template");
        return false;
    }
    return true;
}

/* Statements until one of the names opens a statement. */
static bool parse_body(parser *p, nlist *body, const char *a, const char *b, const char *c) {
    while (!is_statement(p, a, b, c)) {
        if (!need(p)) return false;
        if (!nl_push(p, body, parse_any(p))) return false;
    }
    return true;
}

static jnode *parse_expression_sequence(parser *p, bool primary) {
    uint32_t line = cur_line(p);
    jnode *first = primary ? parse_primary(p) : parse_expression(p);
    if (!first) return NULL;
    if (!is(p, T_COMMA)) return first;
    nlist l = {0};
    if (!nl_push(p, &l, first)) return NULL;
    while (true) {
        p->cur++;
        if (!nl_push(p, &l, primary ? parse_primary(p) : parse_expression(p))) return NULL;
        if (!is(p, T_COMMA)) break;
    }
    jnode *t = mk(p, N_TUPLE, line);
    if (!t) return NULL;
    t->list = l.v;
    t->n = l.n;
    return t;
}

static jnode *parse_set(parser *p, uint32_t line) {
    jnode *nd = mk(p, N_SET, line);
    if (!nd || !(nd->a = parse_expression_sequence(p, false))) return NULL;
    if (is(p, T_EQUALS)) {
        p->cur++;
        if (!(nd->b = parse_expression_sequence(p, false))) return NULL;
    } else {
        if (!expect(p, T_CSTMT, "Expected %} token")) return NULL;
        nlist body = {0};
        if (!parse_body(p, &body, "endset", NULL, NULL)) return NULL;
        nd->list = body.v;
        nd->n = body.n;
        if (!expect(p, T_OSTMT, "Expected {% token") || !expect_ident(p, "endset")) return NULL;
    }
    if (!expect(p, T_CSTMT, "Expected closing statement token")) return NULL;
    return nd;
}

static jnode *parse_if(parser *p, uint32_t line) {
    jnode *nd = mk(p, N_IF, line);
    if (!nd || !(nd->a = parse_expression(p))) return NULL;
    if (!expect(p, T_CSTMT, "Expected closing statement token")) return NULL;
    nlist body = {0}, alt = {0};
    if (!parse_body(p, &body, "elif", "else", "endif")) return NULL;
    if (is_statement(p, "elif", NULL, NULL)) {
        uint32_t l2 = cur_line(p);
        p->cur += 2;
        if (++p->depth > MAX_PARSE_DEPTH) return PFAIL(p, "template nested too deeply");
        jnode *r = parse_if(p, l2);
        p->depth--;
        if (!nl_push(p, &alt, r)) return NULL;
    } else if (is_statement(p, "else", NULL, NULL)) {
        p->cur += 2;
        if (!expect(p, T_CSTMT, "Expected closing statement token")) return NULL;
        if (!parse_body(p, &alt, "endif", NULL, NULL)) return NULL;
    }
    nd->list = body.v;
    nd->n = body.n;
    nd->list2 = alt.v;
    nd->n2 = alt.n;
    return nd;
}

/* findAccessedSpecialMacroArguments, simplified: does the body name kwargs / varargs without
 * declaring them? (bit 1: kwargs, bit 2: varargs) */
static uint8_t declared_special(jnode *target) {
    if (!target) return 0;
    if (target->type == N_IDENT) {
        if (target->len == 6 && memcmp(target->str, "kwargs", 6) == 0) return 1;
        if (target->len == 7 && memcmp(target->str, "varargs", 7) == 0) return 2;
        return 0;
    }
    uint8_t r = 0;
    if (target->type == N_TUPLE)
        for (size_t i = 0; i < target->n; i++) r |= declared_special(target->list[i]);
    return r;
}

static uint8_t param_special(jnode **args, size_t n) {
    uint8_t r = 0;
    for (size_t i = 0; i < n; i++) {
        jnode *a = args[i];
        if (a->type == N_KWARG) {
            if (a->len == 6 && memcmp(a->str, "kwargs", 6) == 0) r |= 1;
            if (a->len == 7 && memcmp(a->str, "varargs", 7) == 0) r |= 2;
        } else r |= declared_special(a);
    }
    return r;
}

static void visit_special(jnode *nd, uint8_t *declared, uint8_t *accessed, int depth) {
    if (!nd || depth > 400) return;
    switch (nd->type) {
    case N_IDENT: {
        uint8_t s = declared_special(nd);
        if (s && !(*declared & s)) *accessed |= s;
        return;
    }
    case N_FOR: *declared |= declared_special(nd->a); break;
    case N_SET: *declared |= declared_special(nd->a); break;
    case N_MACRO: *declared |= param_special(nd->list, nd->n); break;
    case N_CALLSTMT: *declared |= param_special(nd->list, nd->n); break;
    case N_MEMBER:
        visit_special(nd->a, declared, accessed, depth + 1);
        if (nd->flag) visit_special(nd->b, declared, accessed, depth + 1);
        return;
    case N_TEST: visit_special(nd->a, declared, accessed, depth + 1); return;
    case N_FILTER:
        visit_special(nd->a, declared, accessed, depth + 1);
        if (nd->b && nd->b->type == N_CALL)
            for (size_t i = 0; i < nd->b->n; i++) visit_special(nd->b->list[i], declared, accessed, depth + 1);
        return;
    case N_KWARG: visit_special(nd->a, declared, accessed, depth + 1); return;
    default: break;
    }
    if (nd->type != N_FOR && nd->type != N_SET) visit_special(nd->a, declared, accessed, depth + 1);
    visit_special(nd->b, declared, accessed, depth + 1);
    visit_special(nd->c, declared, accessed, depth + 1);
    if (nd->type == N_MACRO || nd->type == N_CALLSTMT) {
        for (size_t i = 0; i < nd->n; i++)
            if (nd->list[i]->type == N_KWARG) visit_special(nd->list[i]->a, declared, accessed, depth + 1);
    } else
        for (size_t i = 0; i < nd->n; i++) visit_special(nd->list[i], declared, accessed, depth + 1);
    for (size_t i = 0; i < nd->n2; i++) visit_special(nd->list2[i], declared, accessed, depth + 1);
}

static uint8_t find_special(jnode **params, size_t n_params, jnode **body, size_t n_body) {
    uint8_t declared = param_special(params, n_params), accessed = 0;
    for (size_t i = 0; i < n_body; i++) visit_special(body[i], &declared, &accessed, 0);
    return accessed;
}

static jnode *parse_macro(parser *p, uint32_t line) {
    jnode *name = parse_primary(p);
    if (!name) return NULL;
    if (name->type != N_IDENT) return PFAIL(p, "Expected identifier following macro statement");
    jnode *nd = mk(p, N_MACRO, line);
    if (!nd) return NULL;
    nd->str = name->str;
    nd->len = name->len;
    nlist args = {0}, body = {0};
    if (!parse_args(p, &args, true)) return NULL;
    if (!expect(p, T_CSTMT, "Expected closing statement token")) return NULL;
    if (!parse_body(p, &body, "endmacro", NULL, NULL)) return NULL;
    nd->list = args.v;
    nd->n = args.n;
    nd->list2 = body.v;
    nd->n2 = body.n;
    nd->special = find_special(args.v, args.n, body.v, body.n);
    return nd;
}

static jnode *parse_for(parser *p, uint32_t line) {
    jnode *nd = mk(p, N_FOR, line);
    if (!nd || !(nd->a = parse_expression_sequence(p, true))) return NULL;
    if (nd->a->type != N_IDENT && nd->a->type != N_TUPLE)
        return PFAIL(p, "Expected identifier/tuple for the loop variable");
    if (!is_ident(p, 0, "in")) return PFAIL(p, "Expected `in` keyword following loop variable");
    p->cur++;
    jnode *it = parse_expression(p);
    if (!it) return NULL;
    if (it->type == N_SELECT) {
        nd->b = it->a;
        nd->c = it->b;
    } else nd->b = it;
    if (!expect(p, T_CSTMT, "Expected closing statement token")) return NULL;
    nlist body = {0}, alt = {0};
    if (!parse_body(p, &body, "endfor", "else", NULL)) return NULL;
    if (is_statement(p, "else", NULL, NULL)) {
        p->cur += 2;
        if (!expect(p, T_CSTMT, "Expected closing statement token")) return NULL;
        if (!parse_body(p, &alt, "endfor", NULL, NULL)) return NULL;
    }
    nd->list = body.v;
    nd->n = body.n;
    nd->list2 = alt.v;
    nd->n2 = alt.n;
    return nd;
}

static jnode *parse_call_expression(parser *p, jnode *callee);

static jnode *parse_statement(parser *p) {
    uint32_t line = cur_line(p);
    if (!expect(p, T_OSTMT, "Expected opening statement token")) return NULL;
    if (!need(p)) return NULL;
    if (p->t[p->cur].type != T_IDENT) return PFAIL(p, "Unknown statement, got %s", TOKEN_NAMES[p->t[p->cur].type]);
    jtok *name = &p->t[p->cur];
#define NAME_IS(lit) (name->len == strlen(lit) && memcmp(name->s, lit, name->len) == 0)
    jnode *r = NULL;
    if (NAME_IS("set")) {
        p->cur++;
        return parse_set(p, line);
    }
    if (NAME_IS("if")) {
        p->cur++;
        if (!(r = parse_if(p, line))) return NULL;
        if (!expect(p, T_OSTMT, "Expected {% token") || !expect_ident(p, "endif") || !expect(p, T_CSTMT, "Expected %} token")) return NULL;
        return r;
    }
    if (NAME_IS("macro")) {
        p->cur++;
        if (!(r = parse_macro(p, line))) return NULL;
        if (!expect(p, T_OSTMT, "Expected {% token") || !expect_ident(p, "endmacro") || !expect(p, T_CSTMT, "Expected %} token")) return NULL;
        return r;
    }
    if (NAME_IS("for")) {
        p->cur++;
        if (!(r = parse_for(p, line))) return NULL;
        if (!expect(p, T_OSTMT, "Expected {% token") || !expect_ident(p, "endfor") || !expect(p, T_CSTMT, "Expected %} token")) return NULL;
        return r;
    }
    if (NAME_IS("call")) {
        p->cur++;
        jnode *nd = mk(p, N_CALLSTMT, line);
        if (!nd) return NULL;
        nlist params = {0}, args = {0}, body = {0};
        if (is(p, T_OPAREN)) {
            nd->flag = true;
            if (!parse_args(p, &params, true)) return NULL;
        }
        jnode *callee = parse_primary(p);
        if (!callee) return NULL;
        if (callee->type != N_IDENT) return PFAIL(p, "Expected identifier following call statement");
        if (!parse_args(p, &args, false)) return NULL;
        if (!expect(p, T_CSTMT, "Expected closing statement token")) return NULL;
        if (!parse_body(p, &body, "endcall", NULL, NULL)) return NULL;
        if (!expect(p, T_OSTMT, "Expected '{%'") || !expect_ident(p, "endcall") || !expect(p, T_CSTMT, "Expected closing statement token")) return NULL;
        jnode *call = mk(p, N_CALL, line);
        if (!call) return NULL;
        call->a = callee;
        call->list = args.v;
        call->n = args.n;
        nd->a = call;
        nd->list = params.v;
        nd->n = params.n;
        nd->list2 = body.v;
        nd->n2 = body.n;
        nd->special = find_special(params.v, params.n, body.v, body.n);
        return nd;
    }
    if (NAME_IS("break") || NAME_IS("continue")) {
        bool brk = NAME_IS("break");
        p->cur++;
        if (!expect(p, T_CSTMT, "Expected closing statement token")) return NULL;
        return mk(p, brk ? N_BREAK : N_CONTINUE, line);
    }
    if (NAME_IS("filter")) {
        p->cur++;
        jnode *nd = mk(p, N_FILTERSTMT, line);
        if (!nd) return NULL;
        jnode *f = parse_primary(p);
        if (!f) return NULL;
        if (f->type == N_IDENT && is(p, T_OPAREN) && !(f = parse_call_expression(p, f))) return NULL;
        nd->a = f;
        if (!expect(p, T_CSTMT, "Expected closing statement token")) return NULL;
        nlist body = {0};
        if (!parse_body(p, &body, "endfilter", NULL, NULL)) return NULL;
        if (!expect(p, T_OSTMT, "Expected '{%'") || !expect_ident(p, "endfilter") || !expect(p, T_CSTMT, "Expected '%}'")) return NULL;
        nd->list = body.v;
        nd->n = body.n;
        return nd;
    }
    return PFAIL(p, "Unknown statement type: %.*s", (int)name->len, name->s);
#undef NAME_IS
}

static jnode *parse_any(parser *p) {
    if (!need(p)) return NULL;
    if (++p->depth > MAX_PARSE_DEPTH) return PFAIL(p, "template nested too deeply");
    jtok *t = &p->t[p->cur];
    jnode *r = NULL;
    switch (t->type) {
    case T_COMMENT:
        p->cur++;
        r = mk(p, N_COMMENT, t->line);
        break;
    case T_TEXT:
        p->cur++;
        if ((r = mk(p, N_TEXT, t->line))) {
            r->str = t->s;
            r->len = t->len;
        }
        break;
    case T_OSTMT: r = parse_statement(p); break;
    case T_OEXPR:
        p->cur++;
        r = parse_expression(p);
        if (r && !expect(p, T_CEXPR, "Expected closing expression token")) r = NULL;
        break;
    default: r = PFAIL(p, "Unexpected token type: %s", TOKEN_NAMES[t->type]);
    }
    p->depth--;
    return r;
}

static jnode *binary(parser *p, jop op, jnode *l, jnode *r, uint32_t line) {
    if (!l || !r) return NULL;
    jnode *nd = mk(p, N_BINARY, line);
    if (!nd) return NULL;
    nd->op = op;
    nd->a = l;
    nd->b = r;
    return nd;
}

static jnode *parse_or(parser *p);

static jnode *parse_if_expression(parser *p) {
    jnode *a = parse_or(p);
    if (!a) return NULL;
    if (is_ident(p, 0, "if")) {
        uint32_t line = cur_line(p);
        p->cur++;
        jnode *test = parse_or(p);
        if (!test) return NULL;
        if (is_ident(p, 0, "else")) {
            p->cur++;
            jnode *f = parse_if_expression(p);
            jnode *nd = mk(p, N_TERNARY, line);
            if (!f || !nd) return NULL;
            nd->a = test;
            nd->b = a;
            nd->c = f;
            return nd;
        }
        jnode *nd = mk(p, N_SELECT, line);
        if (!nd) return NULL;
        nd->a = a;
        nd->b = test;
        return nd;
    }
    return a;
}

static jnode *parse_expression(parser *p) {
    if (++p->depth > MAX_PARSE_DEPTH) return PFAIL(p, "expression nested too deeply");
    jnode *r = parse_if_expression(p);
    p->depth--;
    return r;
}

static jnode *parse_not(parser *p);
static jnode *parse_and(parser *p) {
    jnode *l = parse_not(p);
    while (l && is_ident(p, 0, "and")) {
        uint32_t line = cur_line(p);
        p->cur++;
        l = binary(p, OP_AND, l, parse_not(p), line);
    }
    return l;
}

static jnode *parse_or(parser *p) {
    jnode *l = parse_and(p);
    while (l && is_ident(p, 0, "or")) {
        uint32_t line = cur_line(p);
        p->cur++;
        l = binary(p, OP_OR, l, parse_and(p), line);
    }
    return l;
}

static jnode *parse_comparison(parser *p);
static jnode *parse_not(parser *p) {
    jnode *right = NULL;
    while (is_ident(p, 0, "not")) {
        uint32_t line = cur_line(p);
        p->cur++;
        if (++p->depth > MAX_PARSE_DEPTH) return PFAIL(p, "expression nested too deeply");
        jnode *arg = parse_not(p);
        p->depth--;
        if (!arg) return NULL;
        if (!(right = mk(p, N_UNARY, line))) return NULL;
        right->op = OP_NOT;
        right->a = arg;
    }
    return right ? right : parse_comparison(p);
}

static jnode *parse_additive(parser *p);
static jnode *parse_comparison(parser *p) {
    jnode *l = parse_additive(p);
    while (l) {
        uint32_t line = cur_line(p);
        jop op;
        if (is_ident(p, 0, "not") && is_ident(p, 1, "in")) {
            op = OP_NOT_IN;
            p->cur += 2;
        } else if (is_ident(p, 0, "in")) {
            op = OP_IN;
            p->cur++;
        } else if (is(p, T_CMP)) {
            jtok *t = &p->t[p->cur++];
            op = t->s[0] == '=' ? OP_EQ : t->s[0] == '!' ? OP_NE : t->s[0] == '<' ? (t->len == 2 ? OP_LE : OP_LT) : (t->len == 2 ? OP_GE : OP_GT);
        } else break;
        l = binary(p, op, l, parse_additive(p), line);
    }
    return l;
}

static jnode *parse_multiplicative(parser *p);
static jnode *parse_additive(parser *p) {
    jnode *l = parse_multiplicative(p);
    while (l && is(p, T_ADD)) {
        jtok *t = &p->t[p->cur++];
        jop op = t->s[0] == '+' ? OP_ADD : t->s[0] == '-' ? OP_SUB : OP_CONCAT;
        l = binary(p, op, l, parse_multiplicative(p), t->line);
    }
    return l;
}

static jnode *parse_power(parser *p);
static jnode *parse_multiplicative(parser *p) {
    jnode *l = parse_power(p);
    while (l && is(p, T_MUL)) {
        jtok *t = &p->t[p->cur++];
        jop op = t->s[0] == '*' ? OP_MUL : t->s[0] == '%' ? OP_MOD : t->len == 2 ? OP_FLOORDIV : OP_DIV;
        l = binary(p, op, l, parse_power(p), t->line);
    }
    return l;
}

static jnode *parse_test(parser *p);
static jnode *parse_power(parser *p) {
    jnode *l = parse_test(p);
    while (l && is(p, T_POW)) {
        jtok *t = &p->t[p->cur++];
        l = binary(p, OP_POW, l, parse_test(p), t->line);
    }
    return l;
}

static jnode *parse_filter(parser *p);
static jnode *parse_test(parser *p) {
    jnode *operand = parse_filter(p);
    while (operand && is_ident(p, 0, "is")) {
        uint32_t line = cur_line(p);
        p->cur++;
        bool negate = is_ident(p, 0, "not");
        if (negate) p->cur++;
        jnode *f = parse_primary(p);
        if (!f) return NULL;
        if (f->type != N_IDENT) return PFAIL(p, "Expected identifier for the test");
        jnode *nd = mk(p, N_TEST, line);
        if (!nd) return NULL;
        nd->a = operand;
        nd->flag = negate;
        nd->str = f->str;
        nd->len = f->len;
        operand = nd;
    }
    return operand;
}

static jnode *parse_unary_sign(parser *p);
static jnode *parse_filter(parser *p) {
    jnode *operand = parse_unary_sign(p);
    while (operand && is(p, T_PIPE)) {
        uint32_t line = cur_line(p);
        p->cur++;
        jnode *f = parse_primary(p);
        if (!f) return NULL;
        if (f->type != N_IDENT) return PFAIL(p, "Expected identifier for the filter");
        if (is(p, T_OPAREN) && !(f = parse_call_expression(p, f))) return NULL;
        jnode *nd = mk(p, N_FILTER, line);
        if (!nd) return NULL;
        nd->a = operand;
        nd->b = f;
        operand = nd;
    }
    return operand;
}

static jnode *parse_member(parser *p, jnode *object);

static jnode *parse_unary_sign(parser *p) {
    if (p->cur < p->n) {
        jtok *t = &p->t[p->cur];
        if ((t->type == T_UNARY || t->type == T_ADD) && t->len == 1 && (t->s[0] == '-' || t->s[0] == '+')) {
            p->cur++;
            if (++p->depth > MAX_PARSE_DEPTH) return PFAIL(p, "expression nested too deeply");
            jnode *arg = parse_unary_sign(p);
            p->depth--;
            jnode *nd = arg ? mk(p, N_UNARY, t->line) : NULL;
            if (!nd) return NULL;
            nd->op = t->s[0] == '-' ? OP_SUB : OP_ADD;
            nd->a = arg;
            return nd;
        }
    }
    jnode *m = parse_primary(p);
    if (!m || !(m = parse_member(p, m))) return NULL;
    if (is(p, T_OPAREN)) return parse_call_expression(p, m);
    return m;
}

static jnode *parse_call_expression(parser *p, jnode *callee) {
    for (;;) {
        jnode *nd = mk(p, N_CALL, cur_line(p));
        if (!nd) return NULL;
        nlist args = {0};
        if (!parse_args(p, &args, false)) return NULL;
        nd->a = callee;
        nd->list = args.v;
        nd->n = args.n;
        if (!(nd = parse_member(p, nd))) return NULL;
        if (!is(p, T_OPAREN)) return nd;
        callee = nd;
    }
}

static bool parse_args(parser *p, nlist *out, bool parameters) {
    if (!expect(p, T_OPAREN, "Expected opening parenthesis for arguments list")) return false;
    bool saw_kw = false, saw_spread = false;
    while (!is(p, T_CPAREN)) {
        if (!need(p)) return false;
        uint32_t line = cur_line(p);
        bool kw_spread = is(p, T_POW);
        bool pos_spread = is(p, T_MUL) && p->t[p->cur].len == 1 && p->t[p->cur].s[0] == '*';
        if (parameters && (kw_spread || pos_spread)) {
            PFAIL(p, "Argument unpacking is not allowed in parameter declarations");
            return false;
        }
        if (kw_spread) {
            p->cur++;
            jnode *nd = mk(p, N_KWSPREAD, line);
            if (!nd || !(nd->a = parse_expression(p)) || !nl_push(p, out, nd)) return false;
            if (is(p, T_COMMA)) p->cur++;
            if (!is(p, T_CPAREN)) {
                PFAIL(p, "Expected closing parenthesis: `**` must be applied to the final argument");
                return false;
            }
            break;
        }
        jnode *arg;
        if (pos_spread) {
            if (saw_spread) {
                PFAIL(p, "Only one `*` argument unpacking is allowed");
                return false;
            }
            saw_spread = true;
            p->cur++;
            if (!(arg = mk(p, N_SPREAD, line)) || !(arg->a = parse_expression(p))) return false;
        } else {
            if (!(arg = parse_expression(p))) return false;
            if (is(p, T_EQUALS)) {
                p->cur++;
                if (arg->type != N_IDENT) {
                    PFAIL(p, parameters ? "Expected identifier for parameter declaration" : "Expected identifier for keyword argument");
                    return false;
                }
                jnode *kw = mk(p, N_KWARG, line);
                if (!kw) return false;
                kw->str = arg->str;
                kw->len = arg->len;
                if (!(kw->a = parse_expression(p))) return false;
                arg = kw;
            }
            if (parameters) {
                if (arg->type != N_IDENT && arg->type != N_KWARG) {
                    PFAIL(p, "Expected identifier for parameter declaration");
                    return false;
                }
                for (size_t i = 0; i < out->n; i++)
                    if (out->v[i]->len == arg->len && memcmp(out->v[i]->str, arg->str, arg->len) == 0) {
                        PFAIL(p, "Duplicate parameter name: %.*s", (int)arg->len, arg->str);
                        return false;
                    }
            }
            if (arg->type == N_KWARG) saw_kw = true;
            else if (saw_kw) {
                PFAIL(p, parameters ? "Non-default argument follows default argument" : "Positional arguments must come before keyword arguments");
                return false;
            } else if (saw_spread) {
                PFAIL(p, "Positional arguments must not follow `*` argument unpacking");
                return false;
            }
        }
        if (!nl_push(p, out, arg)) return false;
        if (is(p, T_COMMA)) p->cur++;
    }
    return expect(p, T_CPAREN, "Expected closing parenthesis for arguments list");
}

static jnode *parse_subscript(parser *p) {
    jnode *slices[3] = {0};
    size_t n = 0;
    bool is_slice = false;
    uint32_t line = cur_line(p);
    while (!is(p, T_CSQ)) {
        if (!need(p)) return NULL;
        if (n >= 3) return PFAIL(p, "Expected 0-3 arguments for slice expression");
        if (is(p, T_COLON)) {
            slices[n++] = NULL;
            p->cur++;
            is_slice = true;
        } else {
            if (!(slices[n++] = parse_expression(p))) return NULL;
            if (is(p, T_COLON)) {
                p->cur++;
                is_slice = true;
            }
        }
    }
    if (n == 0) return PFAIL(p, "Expected at least one argument for member/slice expression");
    if (is_slice) {
        jnode *nd = mk(p, N_SLICE, line);
        if (!nd) return NULL;
        nd->a = slices[0];
        nd->b = slices[1];
        nd->c = slices[2];
        return nd;
    }
    return slices[0];
}

static jnode *parse_member(parser *p, jnode *object) {
    while (is(p, T_DOT) || is(p, T_OSQ)) {
        jtok *op = &p->t[p->cur++];
        jnode *nd = mk(p, N_MEMBER, op->line);
        if (!nd) return NULL;
        nd->a = object;
        nd->flag = op->type == T_OSQ;
        if (nd->flag) {
            if (!(nd->b = parse_subscript(p))) return NULL;
            if (!expect(p, T_CSQ, "Expected closing square bracket")) return NULL;
        } else {
            if (!(nd->b = parse_primary(p))) return NULL;
            if (nd->b->type != N_IDENT && nd->b->type != N_INT)
                return PFAIL(p, "Expected identifier or integer following dot operator");
        }
        object = nd;
    }
    return object;
}

static jnode *parse_primary(parser *p) {
    if (!need(p)) return NULL;
    jtok *t = &p->t[p->cur++];
    jnode *nd;
    switch (t->type) {
    case T_NUM: {
        bool is_float = memchr(t->s, '.', t->len) != NULL;
        if (!(nd = mk(p, is_float ? N_FLOAT : N_INT, t->line))) return NULL;
        char buf[64];
        size_t l = t->len < 63 ? t->len : 63;
        memcpy(buf, t->s, l);
        buf[l] = 0;
        nd->num = strtod(buf, NULL);
        return nd;
    }
    case T_STR: {
        if (!(nd = mk(p, N_STR, t->line))) return NULL;
        nd->str = t->s;
        nd->len = t->len;
        if (is(p, T_STR)) { /* adjacent literals concatenate */
            size_t total = t->len, k = p->cur;
            while (k < p->n && p->t[k].type == T_STR) total += p->t[k++].len;
            char *s = ja_alloc(p->lx->arena, total + 1);
            if (!s) return nomem(p->lx), NULL;
            memcpy(s, t->s, t->len);
            size_t o = t->len;
            while (is(p, T_STR)) {
                memcpy(s + o, p->t[p->cur].s, p->t[p->cur].len);
                o += p->t[p->cur].len;
                p->cur++;
            }
            nd->str = s;
            nd->len = o;
        }
        return nd;
    }
    case T_IDENT:
        if (!(nd = mk(p, N_IDENT, t->line))) return NULL;
        nd->str = t->s;
        nd->len = t->len;
        return nd;
    case T_OPAREN: {
        if (++p->depth > MAX_PARSE_DEPTH) return PFAIL(p, "expression nested too deeply");
        jnode *e = parse_expression_sequence(p, false);
        p->depth--;
        if (!e || !expect(p, T_CPAREN, "Expected closing parenthesis")) return NULL;
        return e;
    }
    case T_OSQ: {
        if (++p->depth > MAX_PARSE_DEPTH) return PFAIL(p, "expression nested too deeply");
        nlist v = {0};
        while (!is(p, T_CSQ)) {
            if (!need(p) || !nl_push(p, &v, parse_expression(p))) return NULL;
            if (is(p, T_COMMA)) p->cur++;
        }
        p->cur++;
        p->depth--;
        if (!(nd = mk(p, N_ARRAY, t->line))) return NULL;
        nd->list = v.v;
        nd->n = v.n;
        return nd;
    }
    case T_OCURLY: {
        if (++p->depth > MAX_PARSE_DEPTH) return PFAIL(p, "expression nested too deeply");
        nlist keys = {0}, vals = {0};
        while (!is(p, T_CCURLY)) {
            if (!need(p) || !nl_push(p, &keys, parse_expression(p))) return NULL;
            if (!expect(p, T_COLON, "Expected colon between key and value in object literal")) return NULL;
            if (!nl_push(p, &vals, parse_expression(p))) return NULL;
            if (is(p, T_COMMA)) p->cur++;
        }
        p->cur++;
        p->depth--;
        if (!(nd = mk(p, N_OBJECT, t->line))) return NULL;
        nd->list = keys.v;
        nd->n = keys.n;
        nd->list2 = vals.v;
        nd->n2 = vals.n;
        return nd;
    }
    default: /* the token is consumed: name its own line, not the next token's */
        lex_fail(p->lx, t->line, "Unexpected token: %s", TOKEN_NAMES[t->type]);
        return NULL;
    }
}

int jinja_parse(jinja_template *t, const char *source, size_t len, kite_error *e) {
    lexer lx = {.arena = &t->arena, .e = e, .source = source, .source_len = len};
    size_t n_lines = 1;
    for (size_t i = 0; i < len; i++) n_lines += source[i] == '\n';
    lx.line_starts = ja_alloc(&t->arena, n_lines * sizeof(uint32_t));
    if (!lx.line_starts || !pbuf_new(&lx, &lx.src, len)) return nomem(&lx), (e ? e->status : KITE_ERR_NOMEM);
    lx.line_starts[0] = 0;
    lx.n_lines = 1;
    for (size_t i = 0; i < len; i++)
        if (source[i] == '\n') lx.line_starts[lx.n_lines++] = (uint32_t)(i + 1);
    memcpy(lx.src.s, source, len);
    for (size_t i = 0; i < len; i++) lx.src.off[i] = (uint32_t)i;
    lx.src.len = len;
    if (lx.src.len > 0 && lx.src.s[lx.src.len - 1] == '\n') lx.src.len--;
    if (pre_lstrip(&lx) || pre_trim(&lx) || pre_generation(&lx) || lex(&lx)) return e ? e->status : KITE_ERR_FORMAT;
    parser p = {.lx = &lx, .t = lx.toks, .n = lx.n};
    nlist body = {0};
    while (p.cur < p.n)
        if (!nl_push(&p, &body, parse_any(&p))) return e ? e->status : KITE_ERR_FORMAT;
    t->body = body.v;
    t->n_body = body.n;
    return KITE_OK;
}
