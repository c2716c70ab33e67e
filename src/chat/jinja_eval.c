/* The runtime of the Jinja interpreter: a port of @huggingface/jinja 0.5.11's Interpreter (values,
 * scopes, filters, tests, methods), keeping its JavaScript semantics where they differ from Python's
 * Jinja (numbers are doubles, booleans print as true/false, % keeps the dividend's sign, ...), so
 * renders match it byte for byte. Strings carry a per-byte origin (template or data). All memory comes
 * from one arena per render; budgets bound memory, output, steps and recursion. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <utf8proc.h>

#include "chat/jinja_internal.h"

typedef enum vkind { V_UNDEF, V_NULL, V_BOOL, V_INT, V_FLOAT, V_STR, V_ARRAY, V_OBJECT, V_NAMESPACE, V_FUNC } vkind;

static const char *TYPE_NAMES[] = {"UndefinedValue", "NullValue",   "BooleanValue",   "IntegerValue", "FloatValue",
                                   "StringValue",    "ArrayValue",  "ObjectValue",    "NamespaceValue", "FunctionValue"};

typedef struct jstr {
    const char *s;
    size_t len;
    const uint8_t *mask; /* per byte origin, or NULL: every byte has `origin` */
    uint8_t origin;
} jstr;

typedef struct jv jv;
typedef struct jarr {
    jv *v;
    size_t n, cap;
} jarr;
typedef struct jobj {
    jstr *keys;
    jv *vals;
    size_t n, cap;
} jobj;
typedef struct jenv jenv;
typedef struct jfunc jfunc;

struct jv {
    uint8_t kind;
    uint8_t sub; /* ARRAY: 1 = a tuple; OBJECT: 1 = keyword arguments */
    union {
        bool b;
        double n;
        jstr s;
        jarr *a;
        jobj *o;
        jfunc *f;
    };
};

typedef enum fkind { F_MACRO, F_CALLER, F_NAMESPACE, F_RAISE, F_RANGE, F_STRFTIME, F_METHOD } fkind;

struct jfunc {
    fkind kind;
    const jnode *node; /* MACRO / CALLER */
    jenv *env;         /* CALLER: the call statement's scope */
    jv self;           /* METHOD */
    const char *name;  /* METHOD */
};

struct jenv {
    jenv *parent;
    const char **names;
    size_t *lens;
    jv *vals;
    size_t n, cap;
};

typedef struct sb {
    char *s;
    uint8_t *m;
    size_t len, cap;
} sb;

typedef struct rt {
    jarena arena;
    jinja_limits lim;
    int64_t steps;
    int32_t depth;
    int ctl; /* 1 break, 2 continue pending */
    bool failed;
    int status;
    uint32_t line;
    char msg[440];
    int64_t now;
} rt;

#define UNDEF ((jv){.kind = V_UNDEF})
#define NUL ((jv){.kind = V_NULL})

static jv mkbool(bool b) { return (jv){.kind = V_BOOL, .b = b}; }
static jv mkint(double n) { return (jv){.kind = V_INT, .n = n}; }
static jv mkfloat(double n) { return (jv){.kind = V_FLOAT, .n = n}; }
static jv mkstr(jstr s) { return (jv){.kind = V_STR, .s = s}; }

static int fail(rt *r, uint32_t line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(rt *r, uint32_t line, const char *fmt, ...) {
    if (r->failed) return -1;
    r->failed = true;
    r->status = KITE_ERR_INVALID_ARG;
    r->line = line;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->msg, sizeof r->msg, fmt, ap);
    va_end(ap);
    return -1;
}

static void *al(rt *r, size_t n) {
    void *p = ja_alloc(&r->arena, n);
    if (!p && !r->failed) {
        r->failed = true;
        r->status = KITE_ERR_NOMEM;
        snprintf(r->msg, sizeof r->msg, "the render needs more than its memory budget (%zu bytes)", r->lim.max_memory_bytes);
    }
    return p;
}

/* ---- strings ---- */
static jstr lit(const char *s, size_t len) { return (jstr){s, len, NULL, JINJA_ORIGIN_TEMPLATE}; }
static jstr litz(const char *s) { return lit(s, strlen(s)); }
static inline uint8_t org_at(jstr s, size_t i) { return s.mask ? s.mask[i] : s.origin; }

static bool sb_reserve(rt *r, sb *b, size_t extra, uint32_t line) {
    if (b->len + extra > r->lim.max_output_bytes) {
        fail(r, line, "the rendered text exceeds %zu bytes", r->lim.max_output_bytes);
        return false;
    }
    if (b->len + extra <= b->cap) return true;
    size_t cap = b->cap ? b->cap * 2 : 64;
    while (cap < b->len + extra) cap *= 2;
    char *s = al(r, cap + 1);
    uint8_t *m = al(r, cap);
    if (!s || !m) return false;
    if (b->len) {
        memcpy(s, b->s, b->len);
        memcpy(m, b->m, b->len);
    }
    b->s = s;
    b->m = m;
    b->cap = cap;
    return true;
}

static bool sb_put(rt *r, sb *b, const char *s, size_t len, uint8_t origin, uint32_t line) {
    if (!sb_reserve(r, b, len, line)) return false;
    if (len) {
        memcpy(b->s + b->len, s, len);
        memset(b->m + b->len, origin, len);
    }
    b->len += len;
    return true;
}

static bool sb_str(rt *r, sb *b, jstr s, uint32_t line) {
    if (!sb_reserve(r, b, s.len, line)) return false;
    if (s.len) {
        memcpy(b->s + b->len, s.s, s.len);
        if (s.mask) memcpy(b->m + b->len, s.mask, s.len);
        else memset(b->m + b->len, s.origin, s.len);
    }
    b->len += s.len;
    return true;
}

static bool sb_sub(rt *r, sb *b, jstr s, size_t from, size_t n, uint32_t line) {
    jstr t = {s.s + from, n, s.mask ? s.mask + from : NULL, s.origin};
    return sb_str(r, b, t, line);
}

static jstr sb_done(sb *b) {
    if (!b->s) return lit("", 0);
    b->s[b->len] = 0;
    jstr s = {b->s, b->len, b->m, 0};
    bool uniform = true;
    for (size_t i = 1; i < b->len && uniform; i++) uniform = b->m[i] == b->m[0];
    if (uniform) {
        s.mask = NULL;
        s.origin = b->len ? b->m[0] : 0;
    }
    return s;
}

static bool str_eq(jstr a, jstr b) { return a.len == b.len && memcmp(a.s, b.s, a.len) == 0; }
static bool str_is(jstr a, const char *z) { return a.len == strlen(z) && memcmp(a.s, z, a.len) == 0; }

/* UTF-8 code points (sources are validated UTF-8). */
static size_t cp_len(const char *s, size_t n) {
    unsigned char c = (unsigned char)s[0];
    size_t k = c < 0x80 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
    return k <= n ? k : n;
}
static uint32_t cp_at(const char *s, size_t n, size_t *k) {
    utf8proc_int32_t cp = -1;
    utf8proc_ssize_t l = utf8proc_iterate((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &cp);
    if (l <= 0) {
        *k = 1;
        return 0xfffd;
    }
    *k = (size_t)l;
    return (uint32_t)cp;
}
static size_t utf16_len(jstr s) {
    size_t n = 0;
    for (size_t i = 0; i < s.len;) {
        size_t k = cp_len(s.s + i, s.len - i);
        n += k == 4 ? 2 : 1;
        i += k;
    }
    return n;
}

static size_t enc_utf8(uint32_t cp, char *o) {
    size_t n = 0;
    if (cp < 0x80) o[n++] = (char)cp;
    else if (cp < 0x800) {
        o[n++] = (char)(0xc0 | (cp >> 6));
        o[n++] = (char)(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        o[n++] = (char)(0xe0 | (cp >> 12));
        o[n++] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[n++] = (char)(0x80 | (cp & 0x3f));
    } else {
        o[n++] = (char)(0xf0 | (cp >> 18));
        o[n++] = (char)(0x80 | ((cp >> 12) & 0x3f));
        o[n++] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[n++] = (char)(0x80 | (cp & 0x3f));
    }
    return n;
}

/* Maps each code point (upper/lower case); each output character keeps its input's origin. */
static jv str_case(rt *r, jstr s, int mode /* 1 upper, 0 lower */, uint32_t line) {
    sb b = {0};
    for (size_t i = 0; i < s.len;) {
        size_t k;
        uint32_t cp = cp_at(s.s + i, s.len - i, &k);
        uint32_t m = (uint32_t)(mode ? utf8proc_toupper((utf8proc_int32_t)cp) : utf8proc_tolower((utf8proc_int32_t)cp));
        if (mode && cp == 0xdf) { /* JS's full mappings: sharp s -> SS, dotted I -> i + combining dot */
            if (!sb_put(r, &b, "SS", 2, org_at(s, i), line)) return UNDEF;
        } else if (!mode && cp == 0x130) {
            if (!sb_put(r, &b, "i\xcc\x87", 3, org_at(s, i), line)) return UNDEF;
        } else {
            char o[4];
            size_t n = enc_utf8(m, o);
            if (!sb_put(r, &b, o, n, org_at(s, i), line)) return UNDEF;
        }
        i += k;
    }
    return mkstr(sb_done(&b));
}

static size_t trim_start(jstr s) {
    size_t i = 0, w;
    while (i < s.len && (w = js_space_at(s.s + i, s.len - i)) > 0) i += w;
    return i;
}
static size_t trim_end(jstr s, size_t from) {
    size_t n = s.len, w;
    while (n > from && (w = js_space_before(s.s + from, n - from)) > 0) n -= w;
    return n;
}
static jstr substr(jstr s, size_t from, size_t to) {
    return (jstr){s.s + from, to - from, s.mask ? s.mask + from : NULL, s.origin};
}

/* ---- number and value printing ---- */
static bool put_number(rt *r, sb *b, double v, uint32_t line) {
    char buf[40];
    size_t n = js_number_to_string(v, buf);
    return sb_put(r, b, buf, n, JINJA_ORIGIN_TEMPLATE, line);
}

typedef struct json_opts {
    int indent; /* 0: none */
    bool ensure_ascii, sort_keys, has_seps;
    jstr item_sep, key_sep;
} json_opts;

static int locale_cmp(jstr a, jstr b);

static bool json_str_out(rt *r, sb *b, jstr s, bool ascii, uint32_t line) {
    if (!sb_put(r, b, "\"", 1, s.len ? org_at(s, 0) : s.origin, line)) return false;
    for (size_t i = 0; i < s.len;) {
        uint8_t o = org_at(s, i);
        unsigned char c = (unsigned char)s.s[i];
        char esc[16];
        size_t n = 0;
        size_t k = 1;
        if (c == '"') n = (size_t)snprintf(esc, sizeof esc, "\\\"");
        else if (c == '\\') n = (size_t)snprintf(esc, sizeof esc, "\\\\");
        else if (c == '\n') n = (size_t)snprintf(esc, sizeof esc, "\\n");
        else if (c == '\r') n = (size_t)snprintf(esc, sizeof esc, "\\r");
        else if (c == '\t') n = (size_t)snprintf(esc, sizeof esc, "\\t");
        else if (c == '\b') n = (size_t)snprintf(esc, sizeof esc, "\\b");
        else if (c == '\f') n = (size_t)snprintf(esc, sizeof esc, "\\f");
        else if (c < 0x20) n = (size_t)snprintf(esc, sizeof esc, "\\u%04x", c);
        else if (ascii && c >= 0x7f) {
            uint32_t cp = cp_at(s.s + i, s.len - i, &k);
            if (cp >= 0x10000) {
                uint32_t v = cp - 0x10000;
                n = (size_t)snprintf(esc, sizeof esc, "\\u%04x\\u%04x", 0xd800 + (v >> 10), 0xdc00 + (v & 0x3ff));
            } else n = (size_t)snprintf(esc, sizeof esc, "\\u%04x", cp);
        } else {
            k = cp_len(s.s + i, s.len - i);
            if (!sb_put(r, b, s.s + i, k, o, line)) return false;
            i += k;
            continue;
        }
        if (!sb_put(r, b, esc, n, o, line)) return false;
        i += k;
    }
    return sb_put(r, b, "\"", 1, s.len ? org_at(s, s.len - 1) : s.origin, line);
}

static bool put_indent(rt *r, sb *b, int indent, int depth, uint32_t line) {
    if (!sb_put(r, b, "\n", 1, 0, line)) return false;
    for (long i = 0; i < (long)indent * depth; i++)
        if (!sb_put(r, b, " ", 1, 0, line)) return false;
    return true;
}

static bool to_json(rt *r, sb *b, jv v, const json_opts *o, int depth, bool undef_null, uint32_t line) {
    if (++r->depth > r->lim.max_depth) return fail(r, line, "value nested too deeply"), false;
    bool ok = true;
    jstr item_sep = o->has_seps ? o->item_sep : o->indent ? litz(",") : litz(", ");
    jstr key_sep = o->has_seps ? o->key_sep : litz(": ");
    switch (v.kind) {
    case V_NULL: ok = sb_put(r, b, "null", 4, 0, line); break;
    case V_UNDEF: ok = undef_null ? sb_put(r, b, "null", 4, 0, line) : sb_put(r, b, "undefined", 9, 0, line); break;
    case V_INT:
    case V_FLOAT: ok = isfinite(v.n) ? put_number(r, b, v.n, line) : sb_put(r, b, "null", 4, 0, line); break;
    case V_BOOL: ok = v.b ? sb_put(r, b, "true", 4, 0, line) : sb_put(r, b, "false", 5, 0, line); break;
    case V_STR: ok = json_str_out(r, b, v.s, o->ensure_ascii, line); break;
    case V_ARRAY:
        if (v.sub) { /* the reference's toJSON has no case for TupleValue */
            ok = fail(r, line, "Cannot convert to JSON: TupleValue") == 0;
            break;
        }
        ok = sb_put(r, b, "[", 1, 0, line);
        for (size_t i = 0; ok && i < v.a->n; i++) {
            if (i) ok = sb_str(r, b, item_sep, line);
            if (ok && o->indent) ok = put_indent(r, b, o->indent, depth + 1, line);
            ok = ok && to_json(r, b, v.a->v[i], o, depth + 1, undef_null, line);
        }
        if (ok && o->indent && v.a->n) ok = put_indent(r, b, o->indent, depth, line);
        ok = ok && sb_put(r, b, "]", 1, 0, line);
        break;
    case V_OBJECT:
    case V_NAMESPACE: {
        jobj *ob = v.o;
        size_t *order = al(r, (ob->n + 1) * sizeof(size_t));
        if (!order) return false;
        for (size_t i = 0; i < ob->n; i++) order[i] = i;
        if (o->sort_keys) /* insertion sort: stable, objects are small */
            for (size_t i = 1; i < ob->n; i++) {
                size_t x = order[i], j = i;
                while (j > 0 && locale_cmp(ob->keys[order[j - 1]], ob->keys[x]) > 0) {
                    order[j] = order[j - 1];
                    j--;
                }
                order[j] = x;
            }
        ok = sb_put(r, b, "{", 1, 0, line);
        for (size_t i = 0; ok && i < ob->n; i++) {
            if (i) ok = sb_str(r, b, item_sep, line);
            if (ok && o->indent) ok = put_indent(r, b, o->indent, depth + 1, line);
            ok = ok && json_str_out(r, b, ob->keys[order[i]], o->ensure_ascii, line) && sb_str(r, b, key_sep, line) &&
                 to_json(r, b, ob->vals[order[i]], o, depth + 1, undef_null, line);
        }
        if (ok && o->indent && ob->n) ok = put_indent(r, b, o->indent, depth, line);
        ok = ok && sb_put(r, b, "}", 1, 0, line);
        break;
    }
    default: ok = fail(r, line, "Cannot convert to JSON: %s", TYPE_NAMES[v.kind]) == 0; break;
    }
    r->depth--;
    return ok;
}

/* RuntimeValue.toString(): what {{ }} prints. */
static bool print_value(rt *r, sb *b, jv v, uint32_t line) {
    static const json_opts plain = {0};
    switch (v.kind) {
    case V_STR: return sb_str(r, b, v.s, line);
    case V_INT: return put_number(r, b, v.n, line);
    case V_FLOAT:
        if (v.n == 0 && signbit(v.n)) return sb_put(r, b, "-0.0", 4, 0, line);
        if (isfinite(v.n) && v.n == floor(v.n) && fabs(v.n) < 1e21) {
            char buf[64];
            int n = snprintf(buf, sizeof buf, "%.1f", v.n);
            return sb_put(r, b, buf, (size_t)n, 0, line);
        }
        return put_number(r, b, v.n, line);
    case V_BOOL: return v.b ? sb_put(r, b, "true", 4, 0, line) : sb_put(r, b, "false", 5, 0, line);
    case V_NULL: return sb_put(r, b, "null", 4, 0, line);
    case V_UNDEF: return sb_put(r, b, "undefined", 9, 0, line);
    case V_ARRAY:
    case V_OBJECT:
    case V_NAMESPACE: return to_json(r, b, v, &plain, 0, false, line);
    case V_FUNC: return sb_put(r, b, "[function]", 10, 0, line);
    }
    return false;
}

/* String(x.value): how + and ~ and join see a value (1.0 is "1", a dict "[object Map]"). */
static bool raw_string(rt *r, sb *b, jv v, uint32_t line) {
    switch (v.kind) {
    case V_FLOAT: return put_number(r, b, v.n, line);
    case V_ARRAY:
        for (size_t i = 0; i < v.a->n; i++) {
            if (i && !sb_put(r, b, ",", 1, 0, line)) return false;
            if (!print_value(r, b, v.a->v[i], line)) return false;
        }
        return true;
    case V_OBJECT:
    case V_NAMESPACE: return sb_put(r, b, "[object Map]", 12, 0, line);
    default: return print_value(r, b, v, line);
    }
}

/* ---- truthiness and comparisons ---- */
static bool truthy(jv v) {
    switch (v.kind) {
    case V_UNDEF:
    case V_NULL: return false;
    case V_BOOL: return v.b;
    case V_INT:
    case V_FLOAT: return v.n != 0 && !isnan(v.n);
    case V_STR: return v.s.len > 0;
    case V_ARRAY: return v.a->n > 0;
    case V_OBJECT: return v.o->n > 0;
    default: return true;
    }
}

static bool is_num(jv v) { return v.kind == V_INT || v.kind == V_FLOAT; }

/* JS ToNumber(string). */
static double js_to_number(jstr s) {
    size_t a = trim_start(s), z = trim_end(s, a);
    if (z == a) return 0;
    char buf[128];
    size_t n = z - a;
    if (n >= sizeof buf) return NAN;
    memcpy(buf, s.s + a, n);
    buf[n] = 0;
    if (strcmp(buf, "Infinity") == 0 || strcmp(buf, "+Infinity") == 0) return INFINITY;
    if (strcmp(buf, "-Infinity") == 0) return -INFINITY;
    if (n > 2 && buf[0] == '0' && (buf[1] == 'x' || buf[1] == 'X' || buf[1] == 'o' || buf[1] == 'O' || buf[1] == 'b' || buf[1] == 'B')) {
        int base = (buf[1] == 'x' || buf[1] == 'X') ? 16 : (buf[1] == 'o' || buf[1] == 'O') ? 8 : 2;
        double v = 0;
        for (size_t i = 2; i < n; i++) {
            int d = buf[i] >= '0' && buf[i] <= '9' ? buf[i] - '0' : buf[i] >= 'a' && buf[i] <= 'f' ? buf[i] - 'a' + 10 : buf[i] >= 'A' && buf[i] <= 'F' ? buf[i] - 'A' + 10 : 99;
            if (d >= base) return NAN;
            v = v * base + d;
        }
        return v;
    }
    for (size_t i = 0; i < n; i++) /* only a decimal literal: digits, sign, point, exponent */
        if (!((buf[i] >= '0' && buf[i] <= '9') || buf[i] == '.' || buf[i] == 'e' || buf[i] == 'E' || buf[i] == '+' || buf[i] == '-')) return NAN;
    char *end;
    double v = strtod(buf, &end);
    return *end ? NAN : v;
}

/* JS == on the underlying values. */
static bool loose_eq(jv a, jv b) {
    bool an = a.kind == V_UNDEF || a.kind == V_NULL, bn = b.kind == V_UNDEF || b.kind == V_NULL;
    if (an || bn) return an && bn;
    if (a.kind == V_BOOL) a = mkint(a.b);
    if (b.kind == V_BOOL) b = mkint(b.b);
    if (is_num(a) && is_num(b)) return a.n == b.n;
    if (a.kind == V_STR && b.kind == V_STR) return str_eq(a.s, b.s);
    if (is_num(a) && b.kind == V_STR) return a.n == js_to_number(b.s);
    if (a.kind == V_STR && is_num(b)) return js_to_number(a.s) == b.n;
    if (a.kind >= V_ARRAY && b.kind >= V_ARRAY) {
        if (a.kind != b.kind && !((a.kind == V_OBJECT || a.kind == V_NAMESPACE) && (b.kind == V_OBJECT || b.kind == V_NAMESPACE))) return false;
        return a.kind == V_ARRAY ? a.a == b.a : a.kind == V_FUNC ? a.f == b.f : a.o == b.o;
    }
    return false;
}

/* JS === on the underlying values. */
static bool strict_eq(jv a, jv b) {
    if (a.kind == V_UNDEF || b.kind == V_UNDEF) return a.kind == b.kind;
    if (a.kind == V_NULL || b.kind == V_NULL) return a.kind == b.kind;
    if (is_num(a) && is_num(b)) return a.n == b.n;
    if (a.kind == V_BOOL && b.kind == V_BOOL) return a.b == b.b;
    if (a.kind == V_STR && b.kind == V_STR) return str_eq(a.s, b.s);
    return loose_eq(a, b) && a.kind >= V_ARRAY && b.kind >= V_ARRAY;
}

/* SameValueZero for unique(). */
static bool same_value(jv a, jv b) {
    if (is_num(a) && is_num(b) && isnan(a.n) && isnan(b.n)) return true;
    return strict_eq(a, b);
}

/* String.prototype.localeCompare, approximated by the Unicode collation's usual order: punctuation
 * before digits before letters, letters compared without case first, then lower before upper. */
static int coll_class(uint32_t c) {
    if (c < 0x80) {
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return 3;
        if (c >= '0' && c <= '9') return 2;
        return 1;
    }
    return 4;
}
static int locale_cmp(jstr a, jstr b) {
    size_t i = 0, j = 0;
    int tert = 0;
    while (i < a.len && j < b.len) {
        size_t ka, kb;
        uint32_t ca = cp_at(a.s + i, a.len - i, &ka), cb = cp_at(b.s + j, b.len - j, &kb);
        uint32_t la = (uint32_t)utf8proc_tolower((utf8proc_int32_t)ca), lb = (uint32_t)utf8proc_tolower((utf8proc_int32_t)cb);
        int xa = coll_class(ca), xb = coll_class(cb);
        if (xa != xb) return xa < xb ? -1 : 1;
        if (la != lb) return la < lb ? -1 : 1;
        if (!tert && ca != cb) tert = ca == la ? -1 : 1; /* lowercase first */
        i += ka;
        j += kb;
    }
    if (i < a.len) return 1;
    if (j < b.len) return -1;
    return tert;
}

/* compareRuntimeValues; returns 0 and sets *out, or -1 with an error. */
static int compare_values(rt *r, jv a, jv b, bool case_sensitive, int *out, uint32_t line) {
    if (a.kind == V_NULL && b.kind == V_NULL) return *out = 0, 0;
    if (a.kind == V_NULL || b.kind == V_NULL) return fail(r, line, "Cannot compare %s with %s", TYPE_NAMES[a.kind], TYPE_NAMES[b.kind]);
    if (a.kind == V_UNDEF && b.kind == V_UNDEF) return *out = 0, 0;
    if (a.kind == V_UNDEF || b.kind == V_UNDEF) return fail(r, line, "Cannot compare %s with %s", TYPE_NAMES[a.kind], TYPE_NAMES[b.kind]);
    bool an = is_num(a) || a.kind == V_BOOL, bn = is_num(b) || b.kind == V_BOOL;
    if (an && bn) {
        double x = a.kind == V_BOOL ? a.b : a.n, y = b.kind == V_BOOL ? b.b : b.n;
        *out = x < y ? -1 : x > y ? 1 : 0;
        return 0;
    }
    if (a.kind != b.kind) return fail(r, line, "Cannot compare different types: %s and %s", TYPE_NAMES[a.kind], TYPE_NAMES[b.kind]);
    if (a.kind != V_STR) return fail(r, line, "Cannot compare type: %s", TYPE_NAMES[a.kind]);
    jstr x = a.s, y = b.s;
    if (!case_sensitive) {
        jv lx = str_case(r, x, 0, line), ly = str_case(r, y, 0, line);
        if (r->failed) return -1;
        x = lx.s;
        y = ly.s;
    }
    /* JS < on strings compares UTF-16 code units; for text without surrogates that is code point order,
       which UTF-8 byte order preserves */
    size_t n = x.len < y.len ? x.len : y.len;
    int c = memcmp(x.s, y.s, n);
    *out = c < 0 ? -1 : c > 0 ? 1 : x.len < y.len ? -1 : x.len > y.len ? 1 : 0;
    return 0;
}

/* ---- containers ---- */
static jarr *arr_new(rt *r, size_t cap) {
    jarr *a = al(r, sizeof(jarr));
    if (!a) return NULL;
    if (cap) {
        if (!(a->v = al(r, cap * sizeof(jv)))) return NULL;
        a->cap = cap;
    }
    return a;
}
static bool arr_push(rt *r, jarr *a, jv v) {
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 4;
        jv *nv = al(r, cap * sizeof(jv));
        if (!nv) return false;
        if (a->n) memcpy(nv, a->v, a->n * sizeof(jv));
        a->v = nv;
        a->cap = cap;
    }
    a->v[a->n++] = v;
    return true;
}
static jv mkarr(jarr *a) { return (jv){.kind = V_ARRAY, .a = a}; }

static jobj *obj_new(rt *r) { return al(r, sizeof(jobj)); }
static jv *obj_get(jobj *o, jstr k) {
    for (size_t i = 0; i < o->n; i++)
        if (str_eq(o->keys[i], k)) return &o->vals[i];
    return NULL;
}
static bool obj_set(rt *r, jobj *o, jstr k, jv v) {
    jv *slot = obj_get(o, k);
    if (slot) {
        *slot = v;
        return true;
    }
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 4;
        jstr *nk = al(r, cap * sizeof(jstr));
        jv *nv = al(r, cap * sizeof(jv));
        if (!nk || !nv) return false;
        if (o->n) {
            memcpy(nk, o->keys, o->n * sizeof(jstr));
            memcpy(nv, o->vals, o->n * sizeof(jv));
        }
        o->keys = nk;
        o->vals = nv;
        o->cap = cap;
    }
    o->keys[o->n] = k;
    o->vals[o->n] = v;
    o->n++;
    return true;
}
static jv mkobj(jobj *o, vkind kind) { return (jv){.kind = (uint8_t)kind, .o = o}; }

static jv pair(rt *r, jv a, jv b) {
    jarr *p = arr_new(r, 2);
    if (!p) return UNDEF;
    p->v[0] = a;
    p->v[1] = b;
    p->n = 2;
    return mkarr(p);
}

static jv obj_items(rt *r, jobj *o) {
    jarr *a = arr_new(r, o->n);
    if (!a) return UNDEF;
    for (size_t i = 0; i < o->n; i++) {
        a->v[i] = pair(r, mkstr(o->keys[i]), o->vals[i]);
        if (r->failed) return UNDEF;
    }
    a->n = o->n;
    return mkarr(a);
}

/* ---- scopes ---- */
static jenv *env_new(rt *r, jenv *parent) {
    jenv *e = al(r, sizeof(jenv));
    if (e) e->parent = parent;
    return e;
}
static bool env_set(rt *r, jenv *e, const char *name, size_t len, jv v) {
    for (size_t i = 0; i < e->n; i++)
        if (e->lens[i] == len && memcmp(e->names[i], name, len) == 0) {
            e->vals[i] = v;
            return true;
        }
    if (e->n == e->cap) {
        size_t cap = e->cap ? e->cap * 2 : 8;
        const char **nn = al(r, cap * sizeof(char *));
        size_t *nl = al(r, cap * sizeof(size_t));
        jv *nv = al(r, cap * sizeof(jv));
        if (!nn || !nl || !nv) return false;
        if (e->n) {
            memcpy(nn, e->names, e->n * sizeof(char *));
            memcpy(nl, e->lens, e->n * sizeof(size_t));
            memcpy(nv, e->vals, e->n * sizeof(jv));
        }
        e->names = nn;
        e->lens = nl;
        e->vals = nv;
        e->cap = cap;
    }
    e->names[e->n] = name;
    e->lens[e->n] = len;
    e->vals[e->n] = v;
    e->n++;
    return true;
}
static bool env_has_own(jenv *e, const char *name, size_t len) {
    for (size_t i = 0; i < e->n; i++)
        if (e->lens[i] == len && memcmp(e->names[i], name, len) == 0) return true;
    return false;
}
static jv env_get(jenv *e, const char *name, size_t len) {
    for (; e; e = e->parent)
        for (size_t i = 0; i < e->n; i++)
            if (e->lens[i] == len && memcmp(e->names[i], name, len) == 0) return e->vals[i];
    return UNDEF;
}

/* ---- the interpreter ---- */
static jv eval(rt *r, const jnode *nd, jenv *env);
static bool exec_block(rt *r, jnode *const *body, size_t n, jenv *env, sb *out);

typedef struct args {
    jv *pos;
    size_t n_pos;
    jobj *kw; /* NULL when none */
} args;

static int eval_args(rt *r, jnode *const *list, size_t n, jenv *env, args *out) {
    out->pos = NULL;
    out->n_pos = 0;
    out->kw = NULL;
    jarr *pos = arr_new(r, n);
    if (!pos) return -1;
    for (size_t i = 0; i < n; i++) {
        const jnode *a = list[i];
        if (a->type == N_SPREAD) {
            jv v = eval(r, a->a, env);
            if (r->failed) return -1;
            if (v.kind != V_ARRAY) return fail(r, a->line, "Cannot unpack non-iterable type: %s", TYPE_NAMES[v.kind]);
            for (size_t k = 0; k < v.a->n; k++)
                if (!arr_push(r, pos, v.a->v[k])) return -1;
        } else if (a->type != N_KWARG && a->type != N_KWSPREAD) {
            jv v = eval(r, a, env);
            if (r->failed || !arr_push(r, pos, v)) return -1;
        }
    }
    for (size_t i = 0; i < n; i++) {
        const jnode *a = list[i];
        if (a->type == N_KWARG || a->type == N_KWSPREAD) {
            if (!out->kw && !(out->kw = obj_new(r))) return -1;
            if (a->type == N_KWARG) {
                jv v = eval(r, a->a, env);
                if (r->failed) return -1;
                jstr k = lit(a->str, a->len);
                if (obj_get(out->kw, k)) return fail(r, a->line, "Got multiple values for keyword argument '%.*s'", (int)a->len, a->str);
                if (!obj_set(r, out->kw, k, v)) return -1;
            } else {
                jv v = eval(r, a->a, env);
                if (r->failed) return -1;
                if (v.kind != V_OBJECT) return fail(r, a->line, "Argument after ** must be a mapping, not %s", TYPE_NAMES[v.kind]);
                for (size_t k = 0; k < v.o->n; k++) {
                    if (obj_get(out->kw, v.o->keys[k]))
                        return fail(r, a->line, "Got multiple values for keyword argument '%.*s'", (int)v.o->keys[k].len, v.o->keys[k].s);
                    if (!obj_set(r, out->kw, v.o->keys[k], v.o->vals[k])) return -1;
                }
            }
        }
    }
    out->pos = pos->v;
    out->n_pos = pos->n;
    return 0;
}

/* kwargs.get(name) ?? dflt: an argument given as an undefined variable is present (the reference's
 * UndefinedValue object is not nullish), so only a missing one takes the default */
static jv kwarg(const args *a, const char *name, jv dflt) {
    if (!a->kw) return dflt;
    jv *v = obj_get(a->kw, litz(name));
    return v ? *v : dflt;
}
/* args.at(i) ?? kwargs.get(name) ?? dflt */
static jv arg_or_kw(const args *a, size_t i, const char *name, jv dflt) {
    if (i < a->n_pos) return a->pos[i];
    return kwarg(a, name, dflt);
}
/* JS truthiness of a RuntimeValue's .value (arrays and maps are objects: always true) */
static bool js_truthy(jv v) {
    if (v.kind >= V_ARRAY) return true;
    return v.kind == V_STR ? v.s.len > 0 : v.kind == V_BOOL ? v.b : (v.kind == V_INT || v.kind == V_FLOAT) ? (v.n != 0 && !isnan(v.n)) : false;
}

/* The function's argument list as the reference hands it to functions: positional values plus, when
 * there are keyword arguments, a trailing KeywordArgumentsValue. */
static jv kwargs_value(jobj *kw) { return (jv){.kind = V_OBJECT, .sub = 1, .o = kw}; }

static jv call_function(rt *r, jv fn, args *a, jenv *env, uint32_t line);

/* bindMacroArguments */
static int bind_macro_args(rt *r, const char *display, jnode *const *params, size_t n_params, uint8_t special, args *a,
                           jenv *scope, uint32_t line) {
    jobj *kw = obj_new(r);
    if (!kw) return -1;
    if (a->kw)
        for (size_t i = 0; i < a->kw->n; i++)
            if (!obj_set(r, kw, a->kw->keys[i], a->kw->vals[i])) return -1;
    const jnode *pending[256];
    size_t n_pending = 0;
    for (size_t i = 0; i < n_params; i++) {
        const jnode *p = params[i];
        const char *name = p->str;
        size_t len = p->len;
        jv v = UNDEF;
        bool have = false;
        if (i < a->n_pos) {
            v = a->pos[i];
            have = true;
        }
        if (!have) {
            jstr k = lit(name, len);
            jv *kv = obj_get(kw, k);
            if (kv) {
                v = *kv;
                have = true;
                /* delete k */
                size_t idx = (size_t)(kv - kw->vals);
                memmove(kw->keys + idx, kw->keys + idx + 1, (kw->n - idx - 1) * sizeof(jstr));
                memmove(kw->vals + idx, kw->vals + idx + 1, (kw->n - idx - 1) * sizeof(jv));
                kw->n--;
            }
        }
        if (!have && p->type == N_KWARG) {
            if (n_pending >= 256) return fail(r, line, "too many default parameters");
            pending[n_pending++] = p;
        }
        if (!env_set(r, scope, name, len, v)) return -1;
    }
    if (special & 1) {
        if (!env_set(r, scope, "kwargs", 6, mkobj(kw, V_OBJECT))) return -1;
    } else if (kw->n > 0)
        return fail(r, line, "macro %s takes no keyword argument '%.*s'", display, (int)kw->keys[0].len, kw->keys[0].s);
    if (special & 2) {
        jarr *va = arr_new(r, 0);
        if (!va) return -1;
        for (size_t i = n_params; i < a->n_pos; i++)
            if (!arr_push(r, va, a->pos[i])) return -1;
        if (!env_set(r, scope, "varargs", 7, mkarr(va))) return -1;
    } else if (a->n_pos > n_params)
        return fail(r, line, "macro %s takes not more than %zu argument(s)", display, n_params);
    for (size_t i = 0; i < n_pending; i++) {
        jv v = eval(r, pending[i]->a, scope);
        if (r->failed || !env_set(r, scope, pending[i]->str, pending[i]->len, v)) return -1;
    }
    return 0;
}

static jv run_body(rt *r, jnode *const *body, size_t n, jenv *scope, uint32_t line) {
    sb out = {0};
    if (!exec_block(r, body, n, scope, &out)) return UNDEF;
    if (r->ctl) {
        r->ctl = 0;
        fail(r, line, "break or continue outside of a loop");
        return UNDEF;
    }
    return mkstr(sb_done(&out));
}

/* ---- strftime_now: only the directives the reference knows (%Y %m %d %b %B %H %M %%) ---- */
static jv strftime_now(rt *r, jstr fmt, uint32_t line) {
    static const char *MONTHS[] = {"January", "February", "March",     "April",   "May",      "June",
                                   "July",    "August",   "September", "October", "November", "December"};
    time_t t = (time_t)r->now;
    struct tm tm;
    if (!localtime_r(&t, &tm)) {
        fail(r, line, "strftime_now: the time cannot be converted");
        return UNDEF;
    }
    sb b = {0};
    for (size_t i = 0; i < fmt.len; i++) {
        if (fmt.s[i] == '%' && i + 1 < fmt.len && strchr("YmdbBHM%", fmt.s[i + 1])) {
            char buf[32];
            int n = 0;
            switch (fmt.s[i + 1]) {
            case 'Y': n = snprintf(buf, sizeof buf, "%d", tm.tm_year + 1900); break;
            case 'm': n = snprintf(buf, sizeof buf, "%02d", tm.tm_mon + 1); break;
            case 'd': n = snprintf(buf, sizeof buf, "%02d", tm.tm_mday); break;
            case 'b': n = snprintf(buf, sizeof buf, "%.3s", MONTHS[tm.tm_mon]); break;
            case 'B': n = snprintf(buf, sizeof buf, "%s", MONTHS[tm.tm_mon]); break;
            case 'H': n = snprintf(buf, sizeof buf, "%02d", tm.tm_hour); break;
            case 'M': n = snprintf(buf, sizeof buf, "%02d", tm.tm_min); break;
            default: n = snprintf(buf, sizeof buf, "%%"); break;
            }
            if (!sb_put(r, &b, buf, (size_t)n, 0, line)) return UNDEF;
            i++;
        } else if (!sb_put(r, &b, fmt.s + i, 1, org_at(fmt, i), line))
            return UNDEF;
    }
    return mkstr(sb_done(&b));
}

/* ---- string methods ---- */
static bool starts_with(jstr s, jstr p) { return p.len <= s.len && memcmp(s.s, p.s, p.len) == 0; }
static bool ends_with(jstr s, jstr p) { return p.len <= s.len && memcmp(s.s + s.len - p.len, p.s, p.len) == 0; }

static jv title_case(rt *r, jstr s, uint32_t line) { /* /\b\w/g -> upper */
    sb b = {0};
    if (!sb_str(r, &b, s, line)) return UNDEF;
    for (size_t i = 0; i < b.len; i++) {
        char c = b.s[i];
        bool w = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
        char p = i ? b.s[i - 1] : 0;
        bool pw = i && ((p >= 'a' && p <= 'z') || (p >= 'A' && p <= 'Z') || (p >= '0' && p <= '9') || p == '_');
        if (w && !pw && c >= 'a' && c <= 'z') b.s[i] = (char)(c - 32);
    }
    return mkstr(sb_done(&b));
}

static jv capitalize(rt *r, jstr s, uint32_t line) {
    if (s.len == 0) return mkstr(s);
    size_t k = cp_len(s.s, s.len);
    jv first = str_case(r, substr(s, 0, k), 1, line);
    if (r->failed) return UNDEF;
    sb b = {0};
    if (!sb_str(r, &b, first.s, line) || !sb_sub(r, &b, s, k, s.len - k, line)) return UNDEF;
    return mkstr(sb_done(&b));
}

/* replace(str, old, new, count): JS replaceAll with a global regex; an empty old matches between code points. */
static jv str_replace(rt *r, jstr s, jstr from, jstr to, double count, bool has_count, uint32_t line) {
    if (has_count && count == 0) return mkstr(s);
    double remaining = (!has_count || count < 0) ? INFINITY : count;
    sb b = {0};
    if (from.len == 0) {
        for (size_t i = 0;;) {
            if (remaining > 0) {
                if (!sb_str(r, &b, to, line)) return UNDEF;
                remaining--;
            }
            if (i >= s.len) break;
            size_t k = cp_len(s.s + i, s.len - i);
            if (!sb_sub(r, &b, s, i, k, line)) return UNDEF;
            i += k;
        }
        return mkstr(sb_done(&b));
    }
    size_t i = 0;
    while (i < s.len) {
        if (i + from.len <= s.len && memcmp(s.s + i, from.s, from.len) == 0) {
            if (remaining > 0) {
                if (!sb_str(r, &b, to, line)) return UNDEF;
                remaining--;
            } else if (!sb_sub(r, &b, s, i, from.len, line))
                return UNDEF;
            i += from.len;
            continue;
        }
        size_t k = cp_len(s.s + i, s.len - i);
        if (!sb_sub(r, &b, s, i, k, line)) return UNDEF;
        i += k;
    }
    return mkstr(sb_done(&b));
}

static jv str_split(rt *r, jstr s, jv sep, jv maxsplit, uint32_t line) {
    if (!(sep.kind == V_STR || sep.kind == V_NULL)) return fail(r, line, "sep argument must be a string or null"), UNDEF;
    if (maxsplit.kind != V_INT) return fail(r, line, "maxsplit argument must be a number"), UNDEF;
    double max = maxsplit.n;
    jarr *out = arr_new(r, 0);
    if (!out) return UNDEF;
    if (sep.kind != V_STR) {
        size_t start = trim_start(s);
        jstr text = substr(s, start, s.len);
        size_t i = 0;
        while (i < text.len) {
            size_t w;
            while (i < text.len && (w = js_space_at(text.s + i, text.len - i)) > 0) i += w;
            if (i >= text.len) break;
            size_t j = i;
            while (j < text.len && js_space_at(text.s + j, text.len - j) == 0) j += cp_len(text.s + j, text.len - j);
            if (max != -1 && (double)out->n >= max) {
                if (!arr_push(r, out, mkstr(substr(text, i, text.len)))) return UNDEF;
                break;
            }
            if (!arr_push(r, out, mkstr(substr(text, i, j)))) return UNDEF;
            i = j;
        }
        return mkarr(out);
    }
    jstr sp = sep.s;
    if (sp.len == 0) return fail(r, line, "empty separator"), UNDEF;
    size_t i = 0, start = 0;
    while (i + sp.len <= s.len) {
        if (memcmp(s.s + i, sp.s, sp.len) == 0) {
            if (!arr_push(r, out, mkstr(substr(s, start, i)))) return UNDEF;
            i += sp.len;
            start = i;
        } else i++;
    }
    if (!arr_push(r, out, mkstr(substr(s, start, s.len)))) return UNDEF;
    if (max != -1 && (double)out->n > max) {
        size_t keep = max < 0 ? 0 : (size_t)max;
        if (max < 0) { /* JS splice(negative) counts from the end */
            double k = (double)out->n + max;
            keep = k < 0 ? 0 : (size_t)k;
        }
        sb b = {0};
        for (size_t k = keep; k < out->n; k++) {
            if (k > keep && !sb_str(r, &b, sp, line)) return UNDEF;
            if (!sb_str(r, &b, out->v[k].s, line)) return UNDEF;
        }
        out->n = keep;
        if (!arr_push(r, out, mkstr(sb_done(&b)))) return UNDEF;
    }
    return mkarr(out);
}

static jv call_method(rt *r, jv self, const char *name, args *a, uint32_t line) {
    if (self.kind == V_STR) {
        jstr s = self.s;
        if (!strcmp(name, "upper")) return str_case(r, s, 1, line);
        if (!strcmp(name, "lower")) return str_case(r, s, 0, line);
        if (!strcmp(name, "strip")) {
            size_t st = trim_start(s);
            return mkstr(substr(s, st, trim_end(s, st)));
        }
        if (!strcmp(name, "lstrip")) return mkstr(substr(s, trim_start(s), s.len));
        if (!strcmp(name, "rstrip")) return mkstr(substr(s, 0, trim_end(s, 0)));
        if (!strcmp(name, "title")) return title_case(r, s, line);
        if (!strcmp(name, "capitalize")) return capitalize(r, s, line);
        if (!strcmp(name, "startswith") || !strcmp(name, "endswith")) {
            bool sw = name[0] == 's';
            if (a->n_pos == 0 && !a->kw) return fail(r, line, "%s() requires at least one argument", name), UNDEF;
            jv p = a->n_pos ? a->pos[0] : kwargs_value(a->kw);
            if (p.kind == V_STR) return mkbool(sw ? starts_with(s, p.s) : ends_with(s, p.s));
            if (p.kind == V_ARRAY) {
                for (size_t i = 0; i < p.a->n; i++) {
                    if (p.a->v[i].kind != V_STR) return fail(r, line, "%s() tuple elements must be strings", name), UNDEF;
                    if (sw ? starts_with(s, p.a->v[i].s) : ends_with(s, p.a->v[i].s)) return mkbool(true);
                }
                return mkbool(false);
            }
            return fail(r, line, "%s() argument must be a string or tuple of strings", name), UNDEF;
        }
        if (!strcmp(name, "split")) {
            jv sep = a->n_pos > 0 ? a->pos[0] : a->kw ? kwargs_value(a->kw) : NUL;
            jv max = a->n_pos > 1 ? a->pos[1] : (a->n_pos == 1 && a->kw) ? kwargs_value(a->kw) : mkint(-1);
            return str_split(r, s, sep, max, line);
        }
        if (!strcmp(name, "replace")) {
            size_t n = a->n_pos + (a->kw ? 1 : 0);
            if (n < 2) return fail(r, line, "replace() requires at least two arguments"), UNDEF;
            jv from = a->pos[0], to = a->n_pos > 1 ? a->pos[1] : kwargs_value(a->kw);
            if (from.kind != V_STR || to.kind != V_STR) return fail(r, line, "replace() arguments must be strings"), UNDEF;
            jv count = NUL;
            if (n > 2) {
                if (a->n_pos > 2) count = a->pos[2];
                else count = kwarg(a, "count", NUL);
            }
            if (count.kind != V_INT && count.kind != V_NULL) return fail(r, line, "replace() count argument must be a number or null"), UNDEF;
            return str_replace(r, s, from.s, to.s, count.n, count.kind == V_INT, line);
        }
    } else if (self.kind == V_OBJECT) {
        jobj *o = self.o;
        if (!strcmp(name, "get")) {
            jv key = a->n_pos > 0 ? a->pos[0] : a->kw ? kwargs_value(a->kw) : UNDEF;
            if (key.kind != V_STR) return fail(r, line, "Object key must be a string: got %s", TYPE_NAMES[key.kind]), UNDEF;
            jv *v = obj_get(o, key.s);
            if (v) return *v;
            if (a->n_pos > 1) return a->pos[1];
            return (a->n_pos == 1 && a->kw) ? kwargs_value(a->kw) : NUL;
        }
        if (!strcmp(name, "items")) return obj_items(r, o);
        if (!strcmp(name, "keys") || !strcmp(name, "values")) {
            jarr *out = arr_new(r, o->n);
            if (!out) return UNDEF;
            for (size_t i = 0; i < o->n; i++) out->v[i] = name[0] == 'k' ? mkstr(o->keys[i]) : o->vals[i];
            out->n = o->n;
            return mkarr(out);
        }
        if (!strcmp(name, "dictsort")) {
            /* positionalArgs exclude the keyword arguments value */
            jv cs = arg_or_kw(a, 0, "case_sensitive", mkbool(false)), by = arg_or_kw(a, 1, "by", mkstr(litz("key"))),
               rev = arg_or_kw(a, 2, "reverse", mkbool(false));
            if (cs.kind != V_BOOL) return fail(r, line, "case_sensitive must be a boolean"), UNDEF;
            if (by.kind != V_STR) return fail(r, line, "by must be a string"), UNDEF;
            if (!str_is(by.s, "key") && !str_is(by.s, "value")) return fail(r, line, "by must be either 'key' or 'value'"), UNDEF;
            if (rev.kind != V_BOOL) return fail(r, line, "reverse must be a boolean"), UNDEF;
            jv items = obj_items(r, o);
            if (r->failed) return UNDEF;
            size_t idx = str_is(by.s, "key") ? 0 : 1;
            jarr *it = items.a;
            for (size_t i = 1; i < it->n; i++) { /* stable insertion sort */
                jv x = it->v[i];
                size_t j = i;
                while (j > 0) {
                    int c = 0;
                    if (compare_values(r, it->v[j - 1].a->v[idx], x.a->v[idx], cs.b, &c, line)) return UNDEF;
                    if (rev.b) c = -c;
                    if (c <= 0) break;
                    it->v[j] = it->v[j - 1];
                    j--;
                }
                it->v[j] = x;
                r->steps += (int64_t)i;
            }
            return items;
        }
    }
    fail(r, line, "Cannot call something that is not a function");
    return UNDEF;
}

static jv call_function(rt *r, jv fn, args *a, jenv *env, uint32_t line) {
    if (fn.kind != V_FUNC) return fail(r, line, "Cannot call something that is not a function: got %s", TYPE_NAMES[fn.kind]), UNDEF;
    jfunc *f = fn.f;
    switch (f->kind) {
    case F_MACRO: {
        const jnode *m = f->node;
        jenv *scope = env_new(r, env);
        if (!scope) return UNDEF;
        char display[80];
        snprintf(display, sizeof display, "'%.*s'", (int)(m->len < 60 ? m->len : 60), m->str);
        if (bind_macro_args(r, display, m->list, m->n, m->special, a, scope, line)) return UNDEF;
        return run_body(r, m->list2, m->n2, scope, line);
    }
    case F_CALLER: {
        const jnode *c = f->node;
        jenv *scope = env_new(r, f->env);
        if (!scope) return UNDEF;
        if (bind_macro_args(r, "None", c->list, c->n, c->special, a, scope, line)) return UNDEF;
        return run_body(r, c->list2, c->n2, scope, line);
    }
    case F_NAMESPACE: {
        if (a->n_pos > 1) return fail(r, line, "namespace expected at most 1 argument, got %zu", a->n_pos), UNDEF;
        jobj *o = obj_new(r);
        if (!o) return UNDEF;
        if (a->n_pos == 1) {
            jv src = a->pos[0];
            if (src.kind == V_OBJECT) {
                for (size_t i = 0; i < src.o->n; i++)
                    if (!obj_set(r, o, src.o->keys[i], src.o->vals[i])) return UNDEF;
            } else if (src.kind == V_ARRAY) {
                for (size_t i = 0; i < src.a->n; i++) {
                    jv p = src.a->v[i];
                    jv k, v;
                    if (p.kind == V_ARRAY && p.a->n == 2) {
                        k = p.a->v[0];
                        v = p.a->v[1];
                    } else if (p.kind == V_STR && p.s.len == 2 && (unsigned char)p.s.s[0] < 0x80 && (unsigned char)p.s.s[1] < 0x80) {
                        k = mkstr(substr(p.s, 0, 1));
                        v = mkstr(substr(p.s, 1, 2));
                    } else return fail(r, line, "namespace expected an object or an iterable of [key, value] pairs"), UNDEF;
                    if (k.kind != V_STR) return fail(r, line, "namespace keys must be strings"), UNDEF;
                    if (!obj_set(r, o, k.s, v)) return UNDEF;
                }
            } else return fail(r, line, "'%s' object is not iterable", TYPE_NAMES[src.kind]), UNDEF;
        }
        if (a->kw)
            for (size_t i = 0; i < a->kw->n; i++)
                if (!obj_set(r, o, a->kw->keys[i], a->kw->vals[i])) return UNDEF;
        return mkobj(o, V_NAMESPACE);
    }
    case F_RAISE: {
        sb b = {0};
        jv m = a->n_pos ? a->pos[0] : a->kw ? mkstr(litz("[object Map]")) : UNDEF;
        if (m.kind == V_UNDEF) fail(r, line, "Error");
        else if (raw_string(r, &b, m, line)) {
            jstr s = sb_done(&b);
            fail(r, line, "%.*s", (int)(s.len < 400 ? s.len : 400), s.s);
        }
        return UNDEF;
    }
    case F_RANGE: {
        /* range(start, stop, step = 1) on the arguments' raw values: a missing or undefined stop makes
           start the stop; what is not a number compares as NaN, which gives an empty list */
        jv in[3] = {UNDEF, UNDEF, UNDEF};
        for (size_t i = 0; i < a->n_pos && i < 3; i++) in[i] = a->pos[i];
        if (a->kw && a->n_pos < 3) in[a->n_pos] = kwargs_value(a->kw);
        double v[3];
        for (int i = 0; i < 3; i++) {
            jv x = in[i];
            v[i] = is_num(x) ? x.n : x.kind == V_BOOL ? x.b : x.kind == V_NULL ? 0 : x.kind == V_STR ? js_to_number(x.s) : NAN;
        }
        double start = v[0], stop = v[1], step = in[2].kind == V_UNDEF ? 1 : v[2];
        if (in[1].kind == V_UNDEF) {
            stop = in[0].kind == V_UNDEF ? NAN : start;
            start = 0;
        }
        if (in[0].kind == V_STR || in[1].kind == V_STR || in[2].kind == V_STR)
            return fail(r, line, "range() arguments must be numbers"), UNDEF; /* JS would mix in string concatenation */
        if (step == 0) return fail(r, line, "range() step must not be zero"), UNDEF;
        double count = step > 0 ? ceil((stop - start) / step) : ceil((start - stop) / -step);
        if (isnan(count) || count < 0) count = 0;
        if (!(count <= (double)r->lim.max_steps)) return fail(r, line, "range() is too long"), UNDEF;
        jarr *out = arr_new(r, count > 0 ? (size_t)count : 0);
        if (!out) return UNDEF;
        for (double i = start; step > 0 ? i < stop : i > stop; i += step) {
            if ((double)out->n > count + 1) /* a step too small to move i at its magnitude */
                return fail(r, line, "range() does not advance (step %g at %g)", step, i), UNDEF;
            bool integral = i == floor(i);
            if (!arr_push(r, out, integral ? mkint(i) : mkfloat(i))) return UNDEF;
        }
        r->steps += (int64_t)out->n;
        return mkarr(out);
    }
    case F_STRFTIME: {
        jv fmt = a->n_pos ? a->pos[0] : UNDEF;
        if (fmt.kind != V_STR) return fail(r, line, "strftime_now() needs a format string"), UNDEF;
        return strftime_now(r, fmt.s, line);
    }
    case F_METHOD: return call_method(r, f->self, f->name, a, line);
    }
    return UNDEF;
}

static jv method(rt *r, jv self, const char *name) {
    jfunc *f = al(r, sizeof(jfunc));
    if (!f) return UNDEF;
    f->kind = F_METHOD;
    f->self = self;
    f->name = name;
    return (jv){.kind = V_FUNC, .f = f};
}

/* builtins.get(name) for strings, arrays and objects */
static jv builtin(rt *r, jv obj, jstr name) {
    static const char *STR_METHODS[] = {"upper", "lower", "strip", "title", "capitalize", "rstrip", "lstrip",
                                        "startswith", "endswith", "split", "replace"};
    static const char *OBJ_METHODS[] = {"get", "items", "keys", "values", "dictsort"};
    if (obj.kind == V_STR) {
        if (str_is(name, "length")) return mkint((double)utf16_len(obj.s));
        for (size_t i = 0; i < sizeof STR_METHODS / sizeof *STR_METHODS; i++)
            if (str_is(name, STR_METHODS[i])) return method(r, obj, STR_METHODS[i]);
    } else if (obj.kind == V_ARRAY) {
        if (str_is(name, "length")) return mkint((double)obj.a->n);
    } else if (obj.kind == V_OBJECT) {
        for (size_t i = 0; i < sizeof OBJ_METHODS / sizeof *OBJ_METHODS; i++)
            if (str_is(name, OBJ_METHODS[i])) return method(r, obj, OBJ_METHODS[i]);
    }
    return UNDEF;
}

/* the i-th code point of s (JS .at on UTF-16 units, approximated by code points) */
static jv str_at(jstr s, double idx) {
    size_t n = 0;
    for (size_t i = 0; i < s.len; i += cp_len(s.s + i, s.len - i)) n++;
    if (idx < 0) idx += (double)n;
    if (idx < 0 || idx >= (double)n) return UNDEF;
    size_t want = (size_t)idx, k = 0;
    for (size_t i = 0; i < s.len; k++) {
        size_t l = cp_len(s.s + i, s.len - i);
        if (k == want) return mkstr(substr(s, i, i + l));
        i += l;
    }
    return UNDEF;
}

static jv eval_member(rt *r, const jnode *nd, jenv *env);

/* utils.slice */
static int slice_bounds(double n, jv start, jv stop, jv step, double *s0, double *s1, double *st) {
    double step_v = step.kind == V_UNDEF ? 1 : step.n;
    double dir = step_v > 0 ? 1 : step_v < 0 ? -1 : 0;
    double a, b;
    if (dir >= 0) {
        a = start.kind == V_UNDEF ? 0 : start.n;
        a = a < 0 ? fmax(n + a, 0) : fmin(a, n);
        b = stop.kind == V_UNDEF ? n : stop.n;
        b = b < 0 ? fmax(n + b, 0) : fmin(b, n);
    } else {
        a = start.kind == V_UNDEF ? n - 1 : start.n;
        a = a < 0 ? fmax(n + a, -1) : fmin(a, n - 1);
        b = stop.kind == V_UNDEF ? -1 : stop.n;
        b = b < -1 ? fmax(n + b, -1) : fmin(b, n - 1);
    }
    *s0 = a;
    *s1 = b;
    *st = step_v;
    return dir == 0 ? -1 : 0; /* a zero step: the reference's loop condition 0 < 0 is false at once */
}

static jv eval_slice(rt *r, jv obj, const jnode *sl, jenv *env, uint32_t line) {
    if (obj.kind != V_ARRAY && obj.kind != V_STR) return fail(r, line, "Slice object must be an array or string"), UNDEF;
    jv start = sl->a ? eval(r, sl->a, env) : UNDEF;
    jv stop = sl->b ? eval(r, sl->b, env) : UNDEF;
    jv step = sl->c ? eval(r, sl->c, env) : UNDEF;
    if (r->failed) return UNDEF;
    if (!(start.kind == V_INT || start.kind == V_UNDEF)) return fail(r, line, "Slice start must be numeric or undefined"), UNDEF;
    if (!(stop.kind == V_INT || stop.kind == V_UNDEF)) return fail(r, line, "Slice stop must be numeric or undefined"), UNDEF;
    if (!(step.kind == V_INT || step.kind == V_UNDEF)) return fail(r, line, "Slice step must be numeric or undefined"), UNDEF;
    /* the elements: array items or string code points */
    size_t n = 0;
    size_t *offs = NULL;
    if (obj.kind == V_ARRAY) n = obj.a->n;
    else {
        for (size_t i = 0; i < obj.s.len; i += cp_len(obj.s.s + i, obj.s.len - i)) n++;
        if (!(offs = al(r, (n + 1) * sizeof(size_t)))) return UNDEF;
        size_t k = 0;
        for (size_t i = 0; i < obj.s.len; i += cp_len(obj.s.s + i, obj.s.len - i)) offs[k++] = i;
        offs[n] = obj.s.len;
    }
    double a, b, st;
    if (slice_bounds((double)n, start, stop, step, &a, &b, &st)) return obj.kind == V_ARRAY ? mkarr(arr_new(r, 0)) : mkstr(lit("", 0));
    double dir = st > 0 ? 1 : -1;
    if (obj.kind == V_ARRAY) {
        jarr *out = arr_new(r, 0);
        if (!out) return UNDEF;
        for (double i = a; dir * i < dir * b; i += st)
            if (!arr_push(r, out, obj.a->v[(size_t)i])) return UNDEF;
        return mkarr(out);
    }
    sb out = {0};
    for (double i = a; dir * i < dir * b; i += st) {
        size_t k = (size_t)i;
        if (!sb_sub(r, &out, obj.s, offs[k], offs[k + 1] - offs[k], line)) return UNDEF;
    }
    return mkstr(sb_done(&out));
}

static jv eval_member(rt *r, const jnode *nd, jenv *env) {
    jv obj = eval(r, nd->a, env);
    if (r->failed) return UNDEF;
    jv prop;
    if (nd->flag) {
        if (nd->b->type == N_SLICE) return eval_slice(r, obj, nd->b, env, nd->line);
        prop = eval(r, nd->b, env);
        if (r->failed) return UNDEF;
    } else if (nd->b->type == N_INT) prop = mkint(nd->b->num);
    else prop = mkstr(lit(nd->b->str, nd->b->len));
    if (obj.kind == V_OBJECT || obj.kind == V_NAMESPACE) {
        if (prop.kind != V_STR) return fail(r, nd->line, "Cannot access property with non-string: got %s", TYPE_NAMES[prop.kind]), UNDEF;
        jv *v = obj_get(obj.o, prop.s);
        if (v) return *v;
        return obj.kind == V_OBJECT ? builtin(r, obj, prop.s) : UNDEF;
    }
    if (obj.kind == V_ARRAY || obj.kind == V_STR) {
        if (prop.kind == V_INT) {
            if (obj.kind == V_STR) return str_at(obj.s, prop.n);
            double i = prop.n < 0 ? prop.n + (double)obj.a->n : prop.n;
            if (i < 0 || i >= (double)obj.a->n || i != floor(i)) return UNDEF;
            return obj.a->v[(size_t)i];
        }
        if (prop.kind == V_STR) return builtin(r, obj, prop.s);
        return fail(r, nd->line, "Cannot access property with non-string/non-number: got %s", TYPE_NAMES[prop.kind]), UNDEF;
    }
    if (prop.kind != V_STR) return fail(r, nd->line, "Cannot access property with non-string: got %s", TYPE_NAMES[prop.kind]), UNDEF;
    return UNDEF;
}

/* ---- binary operators ---- */
static jv concat(rt *r, jv a, jv b, uint32_t line) {
    sb out = {0};
    if (!raw_string(r, &out, a, line) || !raw_string(r, &out, b, line)) return UNDEF;
    return mkstr(sb_done(&out));
}

static bool str_contains(jstr hay, jstr needle) {
    if (needle.len == 0) return true;
    if (needle.len > hay.len) return false;
    return memmem(hay.s, hay.len, needle.s, needle.len) != NULL;
}

static const char *OP_NAMES[] = {"", "and", "or", "not", "in", "not in", "==", "!=", "<", ">", "<=", ">=",
                                 "+", "-", "~", "*", "/", "//", "%", "**"};

static jv eval_binary(rt *r, const jnode *nd, jenv *env) {
    jv left = eval(r, nd->a, env);
    if (r->failed) return UNDEF;
    if (nd->op == OP_AND) return truthy(left) ? eval(r, nd->b, env) : left;
    if (nd->op == OP_OR) return truthy(left) ? left : eval(r, nd->b, env);
    jv right = eval(r, nd->b, env);
    if (r->failed) return UNDEF;
    jop op = nd->op;
    uint32_t line = nd->line;
    if (op == OP_EQ) return mkbool(loose_eq(left, right));
    if (op == OP_NE) return mkbool(!loose_eq(left, right));
    if (left.kind == V_UNDEF || right.kind == V_UNDEF) {
        if (right.kind == V_UNDEF && (op == OP_IN || op == OP_NOT_IN)) return mkbool(op == OP_NOT_IN);
        return fail(r, line, "Cannot perform operation %s on undefined values", OP_NAMES[op]), UNDEF;
    }
    if (left.kind == V_NULL || right.kind == V_NULL) return fail(r, line, "Cannot perform operation on null values"), UNDEF;
    if (op == OP_CONCAT) return concat(r, left, right, line);
    bool ln = is_num(left) || left.kind == V_BOOL, rn = is_num(right) || right.kind == V_BOOL;
    if (op == OP_POW && ln && rn) {
        double a = left.kind == V_BOOL ? left.b : left.n, b = right.kind == V_BOOL ? right.b : right.n;
        if (a == 0 && b < 0) return fail(r, line, "0.0 cannot be raised to a negative power"), UNDEF;
        double res = pow(a, b);
        if (!isfinite(res)) return fail(r, line, "Exponentiation result is not a finite real number"), UNDEF;
        bool fl = left.kind == V_FLOAT || right.kind == V_FLOAT || b < 0;
        return fl ? mkfloat(res) : mkint(res);
    }
    if (is_num(left) && is_num(right)) {
        double a = left.n, b = right.n;
        bool fl = left.kind == V_FLOAT || right.kind == V_FLOAT;
        switch (op) {
        case OP_ADD: return fl ? mkfloat(a + b) : mkint(a + b);
        case OP_SUB: return fl ? mkfloat(a - b) : mkint(a - b);
        case OP_MUL: return fl ? mkfloat(a * b) : mkint(a * b);
        case OP_DIV: return mkfloat(a / b);
        case OP_FLOORDIV: return fl ? mkfloat(floor(a / b)) : mkint(floor(a / b));
        case OP_MOD: return fl ? mkfloat(fmod(a, b)) : mkint(fmod(a, b));
        case OP_LT: return mkbool(a < b);
        case OP_GT: return mkbool(a > b);
        case OP_GE: return mkbool(a >= b);
        case OP_LE: return mkbool(a <= b);
        default: break;
        }
    } else if (left.kind == V_ARRAY && right.kind == V_ARRAY) {
        if (op == OP_ADD) {
            jarr *out = arr_new(r, left.a->n + right.a->n);
            if (!out) return UNDEF;
            if (left.a->n) memcpy(out->v, left.a->v, left.a->n * sizeof(jv));
            if (right.a->n) memcpy(out->v + left.a->n, right.a->v, right.a->n * sizeof(jv));
            out->n = left.a->n + right.a->n;
            r->steps += (int64_t)out->n / 16;
            return mkarr(out);
        }
    } else if (right.kind == V_ARRAY) {
        bool member = false;
        for (size_t i = 0; i < right.a->n && !member; i++) member = strict_eq(right.a->v[i], left);
        r->steps += (int64_t)right.a->n / 16;
        if (op == OP_IN) return mkbool(member);
        if (op == OP_NOT_IN) return mkbool(!member);
    }
    if ((left.kind == V_STR || right.kind == V_STR) && op == OP_ADD) return concat(r, left, right, line);
    if (left.kind == V_STR && right.kind == V_STR) {
        if (op == OP_IN) return mkbool(str_contains(right.s, left.s));
        if (op == OP_NOT_IN) return mkbool(!str_contains(right.s, left.s));
    }
    if (left.kind == V_STR && right.kind == V_OBJECT) {
        if (op == OP_IN) return mkbool(obj_get(right.o, left.s) != NULL);
        if (op == OP_NOT_IN) return mkbool(obj_get(right.o, left.s) == NULL);
    }
    return fail(r, line, "Unknown operator \"%s\" between %s and %s", OP_NAMES[op], TYPE_NAMES[left.kind], TYPE_NAMES[right.kind]), UNDEF;
}

/* ---- tests ---- */
static int run_test(rt *r, jstr name, jv v, const jv *arg, bool *out, uint32_t line) {
    bool res;
    if (str_is(name, "boolean")) res = v.kind == V_BOOL;
    else if (str_is(name, "callable")) res = v.kind == V_FUNC;
    else if (str_is(name, "odd") || str_is(name, "even")) {
        if (v.kind != V_INT) return fail(r, line, "cannot %.*s on %s", (int)name.len, name.s, TYPE_NAMES[v.kind]);
        double m = fmod(v.n, 2);
        res = str_is(name, "odd") ? m != 0 : m == 0;
    } else if (str_is(name, "false")) res = v.kind == V_BOOL && !v.b;
    else if (str_is(name, "true")) res = v.kind == V_BOOL && v.b;
    else if (str_is(name, "none")) res = v.kind == V_NULL;
    else if (str_is(name, "string")) res = v.kind == V_STR;
    else if (str_is(name, "number")) res = is_num(v);
    else if (str_is(name, "integer")) res = v.kind == V_INT;
    else if (str_is(name, "iterable")) res = (v.kind == V_ARRAY && !v.sub) || v.kind == V_STR;
    else if (str_is(name, "mapping")) res = v.kind == V_OBJECT;
    else if (str_is(name, "sequence")) res = v.kind == V_ARRAY || v.kind == V_OBJECT || v.kind == V_STR;
    else if (str_is(name, "lower") || str_is(name, "upper")) {
        if (v.kind != V_STR) res = false;
        else {
            jv c = str_case(r, v.s, str_is(name, "upper"), line);
            if (r->failed) return -1;
            res = str_eq(c.s, v.s);
        }
    } else if (str_is(name, "defined")) res = v.kind != V_UNDEF;
    else if (str_is(name, "undefined")) res = v.kind == V_UNDEF;
    else if (str_is(name, "equalto") || str_is(name, "eq")) {
        if (!arg) return fail(r, line, "Cannot read properties of undefined (reading 'value')");
        res = strict_eq(v, *arg);
    } else return fail(r, line, "Unknown test: %.*s", (int)name.len, name.s);
    *out = res;
    return 0;
}

/* getAttributeValue: a dotted path through objects and array indices */
static jv attr_path(jv item, jstr path) {
    jv v = item;
    size_t i = 0;
    for (;;) {
        size_t j = i;
        while (j < path.len && path.s[j] != '.') j++;
        jstr part = substr(path, i, j);
        if (v.kind == V_OBJECT || v.kind == V_NAMESPACE) {
            jv *x = obj_get(v.o, part);
            v = x ? *x : UNDEF;
        } else if (v.kind == V_ARRAY) {
            /* parseInt: leading digits */
            size_t k = 0;
            while (k < part.len && (part.s[k] == ' ' || part.s[k] == '\t')) k++;
            bool neg = k < part.len && part.s[k] == '-';
            if (k < part.len && (part.s[k] == '-' || part.s[k] == '+')) k++;
            if (k >= part.len || part.s[k] < '0' || part.s[k] > '9' || neg) return UNDEF;
            double idx = 0;
            while (k < part.len && part.s[k] >= '0' && part.s[k] <= '9') idx = idx * 10 + (part.s[k++] - '0');
            if (idx >= (double)v.a->n) return UNDEF;
            v = v.a->v[(size_t)idx];
        } else return UNDEF;
        if (j >= path.len) break;
        i = j + 1;
    }
    return v;
}

/* parseInt(s, 10) / parseFloat(s) */
static double parse_int(jstr s) {
    size_t i = trim_start(s);
    bool neg = false;
    if (i < s.len && (s.s[i] == '-' || s.s[i] == '+')) neg = s.s[i++] == '-';
    if (i >= s.len || s.s[i] < '0' || s.s[i] > '9') return NAN;
    double v = 0;
    while (i < s.len && s.s[i] >= '0' && s.s[i] <= '9') v = v * 10 + (s.s[i++] - '0');
    return neg ? -v : v;
}
static double parse_float(jstr s) {
    size_t i = trim_start(s), st = i;
    if (i < s.len && (s.s[i] == '-' || s.s[i] == '+')) i++;
    if (s.len - i >= 8 && memcmp(s.s + i, "Infinity", 8) == 0) return s.s[st] == '-' ? -INFINITY : INFINITY;
    size_t d0 = i;
    while (i < s.len && s.s[i] >= '0' && s.s[i] <= '9') i++;
    size_t nd = i - d0;
    if (i < s.len && s.s[i] == '.') {
        i++;
        size_t f0 = i;
        while (i < s.len && s.s[i] >= '0' && s.s[i] <= '9') i++;
        nd += i - f0;
    }
    if (nd == 0) return NAN;
    if (i < s.len && (s.s[i] == 'e' || s.s[i] == 'E')) {
        size_t k = i + 1;
        if (k < s.len && (s.s[k] == '-' || s.s[k] == '+')) k++;
        if (k < s.len && s.s[k] >= '0' && s.s[k] <= '9') {
            while (k < s.len && s.s[k] >= '0' && s.s[k] <= '9') k++;
            i = k;
        }
    }
    char buf[128];
    size_t n = i - st;
    if (n >= sizeof buf) n = sizeof buf - 1;
    memcpy(buf, s.s + st, n);
    buf[n] = 0;
    return strtod(buf, NULL);
}

static jv indent_str(rt *r, jstr s, double width, bool first, bool blank, uint32_t line) {
    sb b = {0};
    size_t i = 0, ln = 0;
    for (;;) {
        size_t j = i;
        while (j < s.len && s.s[j] != '\n') j++;
        bool keep = (!first && ln == 0) || (!blank && j == i);
        if (!keep)
            for (double k = 0; k < width; k++)
                if (!sb_put(r, &b, " ", 1, 0, line)) return UNDEF;
        if (!sb_sub(r, &b, s, i, j - i, line)) return UNDEF;
        if (j >= s.len) break;
        if (!sb_sub(r, &b, s, j, 1, line)) return UNDEF;
        i = j + 1;
        ln++;
    }
    return mkstr(sb_done(&b));
}

/* stable merge sort of values with compareRuntimeValues */
typedef struct sort_ctx {
    rt *r;
    bool reverse, case_sensitive;
    jv attribute; /* UNDEF/NULL: the items themselves */
    uint32_t line;
} sort_ctx;

static jv sort_key(sort_ctx *c, jv item) {
    if (c->attribute.kind == V_STR) return attr_path(item, c->attribute.s);
    if (c->attribute.kind == V_INT) {
        char buf[40];
        size_t n = js_number_to_string(c->attribute.n, buf);
        char *s = al(c->r, n + 1);
        if (!s) return UNDEF;
        memcpy(s, buf, n + 1);
        return attr_path(item, lit(s, n));
    }
    return item;
}

static int sort_values(sort_ctx *c, jv *v, size_t n) {
    if (n < 2) return 0;
    jv *tmp = al(c->r, n * sizeof(jv));
    if (!tmp) return -1;
    for (size_t w = 1; w < n; w *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * w) {
            size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) {
                int cmp = 0;
                if (compare_values(c->r, sort_key(c, v[i]), sort_key(c, v[j]), c->case_sensitive, &cmp, c->line)) return -1;
                if (c->reverse) cmp = -cmp;
                tmp[k++] = cmp <= 0 ? v[i++] : v[j++];
            }
            while (i < mid) tmp[k++] = v[i++];
            while (j < hi) tmp[k++] = v[j++];
        }
        memcpy(v, tmp, n * sizeof(jv));
        c->r->steps += (int64_t)n;
    }
    return 0;
}

static jv apply_filter(rt *r, jv operand, const jnode *f, jenv *env) {
    uint32_t line = f->line;
    if (f->type == N_IDENT) {
        jstr name = lit(f->str, f->len);
        if (str_is(name, "safe")) return operand;
        if (str_is(name, "tojson")) {
            json_opts o = {0};
            sb b = {0};
            if (!to_json(r, &b, operand, &o, 0, true, line)) return UNDEF;
            return mkstr(sb_done(&b));
        }
        if (operand.kind == V_ARRAY) {
            jarr *a = operand.a;
            if (str_is(name, "list")) return operand;
            if (str_is(name, "first")) return a->n ? a->v[0] : UNDEF;
            if (str_is(name, "last")) return a->n ? a->v[a->n - 1] : UNDEF;
            if (str_is(name, "length")) return mkint((double)a->n);
            if (str_is(name, "reverse")) {
                jarr *o = arr_new(r, a->n);
                if (!o) return UNDEF;
                for (size_t i = 0; i < a->n; i++) o->v[i] = a->v[a->n - 1 - i];
                o->n = a->n;
                return mkarr(o);
            }
            if (str_is(name, "sort")) {
                jarr *o = arr_new(r, a->n);
                if (!o) return UNDEF;
                if (a->n) memcpy(o->v, a->v, a->n * sizeof(jv));
                o->n = a->n;
                sort_ctx c = {r, false, false, UNDEF, line};
                if (sort_values(&c, o->v, o->n)) return UNDEF;
                return mkarr(o);
            }
            if (str_is(name, "join")) {
                sb b = {0};
                for (size_t i = 0; i < a->n; i++) {
                    jv x = a->v[i];
                    if (x.kind == V_NULL || x.kind == V_UNDEF) continue;
                    if (!raw_string(r, &b, x, line)) return UNDEF;
                }
                return mkstr(sb_done(&b));
            }
            if (str_is(name, "string")) {
                json_opts o = {0};
                sb b = {0};
                if (!to_json(r, &b, operand, &o, 0, false, line)) return UNDEF;
                return mkstr(sb_done(&b));
            }
            if (str_is(name, "unique")) {
                jarr *o = arr_new(r, 0);
                if (!o) return UNDEF;
                for (size_t i = 0; i < a->n; i++) {
                    bool seen = false;
                    for (size_t k = 0; k < o->n && !seen; k++) seen = same_value(o->v[k], a->v[i]);
                    r->steps += (int64_t)o->n / 16;
                    if (!seen && !arr_push(r, o, a->v[i])) return UNDEF;
                }
                return mkarr(o);
            }
            return fail(r, line, "Unknown ArrayValue filter: %.*s", (int)name.len, name.s), UNDEF;
        }
        if (operand.kind == V_STR) {
            jstr s = operand.s;
            if (str_is(name, "length")) return mkint((double)utf16_len(s));
            if (str_is(name, "upper")) return str_case(r, s, 1, line);
            if (str_is(name, "lower")) return str_case(r, s, 0, line);
            if (str_is(name, "title")) return title_case(r, s, line);
            if (str_is(name, "capitalize")) return capitalize(r, s, line);
            if (str_is(name, "trim")) {
                size_t st = trim_start(s);
                return mkstr(substr(s, st, trim_end(s, st)));
            }
            if (str_is(name, "indent")) return indent_str(r, s, 4, false, false, line);
            if (str_is(name, "join") || str_is(name, "string")) return operand;
            if (str_is(name, "int")) {
                double v = parse_int(s);
                return mkint(isnan(v) ? 0 : v);
            }
            if (str_is(name, "float")) {
                double v = parse_float(s);
                return mkfloat(isnan(v) ? 0 : v);
            }
            return fail(r, line, "Unknown StringValue filter: %.*s", (int)name.len, name.s), UNDEF;
        }
        if (is_num(operand)) {
            if (str_is(name, "abs")) return operand.kind == V_INT ? mkint(fabs(operand.n)) : mkfloat(fabs(operand.n));
            if (str_is(name, "int")) return mkint(floor(operand.n));
            if (str_is(name, "float")) return mkfloat(operand.n);
            if (str_is(name, "string")) {
                sb b = {0};
                if (!print_value(r, &b, operand, line)) return UNDEF;
                return mkstr(sb_done(&b));
            }
            return fail(r, line, "Unknown NumericValue filter: %.*s", (int)name.len, name.s), UNDEF;
        }
        if (operand.kind == V_OBJECT) {
            if (str_is(name, "items")) return obj_items(r, operand.o);
            if (str_is(name, "length")) return mkint((double)operand.o->n);
            jv b = builtin(r, operand, name);
            if (b.kind == V_FUNC) {
                args none = {0};
                return call_function(r, b, &none, env, line);
            }
            if (b.kind != V_UNDEF) return b;
            return fail(r, line, "Unknown ObjectValue filter: %.*s", (int)name.len, name.s), UNDEF;
        }
        if (operand.kind == V_BOOL) {
            if (str_is(name, "bool")) return operand;
            if (str_is(name, "int")) return mkint(operand.b);
            if (str_is(name, "float")) return mkfloat(operand.b);
            if (str_is(name, "string")) return mkstr(litz(operand.b ? "true" : "false"));
            return fail(r, line, "Unknown BooleanValue filter: %.*s", (int)name.len, name.s), UNDEF;
        }
        return fail(r, line, "Cannot apply filter \"%.*s\" to type: %s", (int)name.len, name.s, TYPE_NAMES[operand.kind]), UNDEF;
    }
    if (f->type != N_CALL) return fail(r, line, "Unknown filter: %s", f->type == N_MEMBER ? "MemberExpression" : "Expression"), UNDEF;
    if (f->a->type != N_IDENT)
        return fail(r, line, "Unknown filter: %s", f->a->type == N_MEMBER ? "MemberExpression" : f->a->type == N_CALL ? "CallExpression" : "Expression"), UNDEF;
    jstr name = lit(f->a->str, f->a->len);
    args a;
    if (str_is(name, "tojson")) {
        if (eval_args(r, f->list, f->n, env, &a)) return UNDEF;
        json_opts o = {0};
        jv indent = kwarg(&a, "indent", NUL);
        if (!(indent.kind == V_INT || indent.kind == V_NULL)) return fail(r, line, "If set, indent must be a number"), UNDEF;
        if (indent.kind == V_INT) {
            if (indent.n < 0) return fail(r, line, "Invalid count value: %d", (int)indent.n), UNDEF;
            if (indent.n > 100000) return fail(r, line, "indent %g is too large", indent.n), UNDEF;
            o.indent = (int)indent.n;
        }
        jv ea = kwarg(&a, "ensure_ascii", mkbool(false));
        if (ea.kind != V_BOOL) return fail(r, line, "If set, ensure_ascii must be a boolean"), UNDEF;
        o.ensure_ascii = ea.kind == V_BOOL && ea.b;
        jv sk = kwarg(&a, "sort_keys", mkbool(false));
        if (sk.kind != V_BOOL) return fail(r, line, "If set, sort_keys must be a boolean"), UNDEF;
        o.sort_keys = sk.kind == V_BOOL && sk.b;
        jv seps = kwarg(&a, "separators", NUL);
        if (seps.kind == V_ARRAY) {
            if (seps.a->n != 2 || seps.a->v[0].kind != V_STR || seps.a->v[1].kind != V_STR) return fail(r, line, "separators must be a tuple of two strings"), UNDEF;
            o.has_seps = true;
            o.item_sep = seps.a->v[0].s;
            o.key_sep = seps.a->v[1].s;
        } else if (seps.kind != V_NULL)
            return fail(r, line, "If set, separators must be a tuple of two strings"), UNDEF;
        sb b = {0};
        if (!to_json(r, &b, operand, &o, 0, true, line)) return UNDEF;
        return mkstr(sb_done(&b));
    }
    if (str_is(name, "join")) {
        if (operand.kind != V_STR && operand.kind != V_ARRAY)
            return fail(r, line, "Cannot apply filter \"join\" to type: %s", TYPE_NAMES[operand.kind]), UNDEF;
        if (eval_args(r, f->list, f->n, env, &a)) return UNDEF;
        jv sep = arg_or_kw(&a, 0, "separator", mkstr(litz("")));
        if (sep.kind != V_STR) return fail(r, line, "separator must be a string"), UNDEF;
        sb b = {0};
        if (operand.kind == V_STR) {
            jstr s = operand.s;
            for (size_t i = 0; i < s.len;) {
                size_t k = cp_len(s.s + i, s.len - i);
                if (i && !sb_str(r, &b, sep.s, line)) return UNDEF;
                if (!sb_sub(r, &b, s, i, k, line)) return UNDEF;
                i += k;
            }
        } else
            for (size_t i = 0; i < operand.a->n; i++) {
                if (i && !sb_str(r, &b, sep.s, line)) return UNDEF;
                jv x = operand.a->v[i];
                if (x.kind != V_NULL && x.kind != V_UNDEF && !raw_string(r, &b, x, line)) return UNDEF;
            }
        return mkstr(sb_done(&b));
    }
    if (str_is(name, "int") || str_is(name, "float")) {
        bool is_int = str_is(name, "int");
        if (eval_args(r, f->list, f->n, env, &a)) return UNDEF;
        jv def = arg_or_kw(&a, 0, "default", is_int ? mkint(0) : mkfloat(0));
        if (operand.kind == V_STR) {
            double v = is_int ? parse_int(operand.s) : parse_float(operand.s);
            return isnan(v) ? def : is_int ? mkint(v) : mkfloat(v);
        }
        if (is_num(operand)) return operand;
        if (operand.kind == V_BOOL) return is_int ? mkint(operand.b) : mkfloat(operand.b);
        return fail(r, line, "Cannot apply filter \"%.*s\" to type: %s", (int)name.len, name.s, TYPE_NAMES[operand.kind]), UNDEF;
    }
    if (str_is(name, "default")) {
        if (eval_args(r, f->list, f->n, env, &a)) return UNDEF;
        jv def = a.n_pos > 0 ? a.pos[0] : mkstr(litz(""));
        jv boolean = a.n_pos > 1 ? a.pos[1] : kwarg(&a, "boolean", mkbool(false));
        if (boolean.kind != V_BOOL) return fail(r, line, "`default` filter flag must be a boolean"), UNDEF;
        if (operand.kind == V_UNDEF || (boolean.b && !truthy(operand))) return def;
        return operand;
    }
    if (operand.kind == V_ARRAY) {
        jarr *arr = operand.a;
        if (str_is(name, "sort")) {
            if (eval_args(r, f->list, f->n, env, &a)) return UNDEF;
            jv rev = arg_or_kw(&a, 0, "reverse", mkbool(false)), cs = arg_or_kw(&a, 1, "case_sensitive", mkbool(false)),
               attr = arg_or_kw(&a, 2, "attribute", NUL);
            if (rev.kind != V_BOOL) return fail(r, line, "reverse must be a boolean"), UNDEF;
            if (cs.kind != V_BOOL) return fail(r, line, "case_sensitive must be a boolean"), UNDEF;
            if (!(attr.kind == V_STR || attr.kind == V_INT || attr.kind == V_NULL))
                return fail(r, line, "attribute must be a string, integer, or null"), UNDEF;
            jarr *o = arr_new(r, arr->n);
            if (!o) return UNDEF;
            if (arr->n) memcpy(o->v, arr->v, arr->n * sizeof(jv));
            o->n = arr->n;
            sort_ctx c = {r, rev.b, cs.b, attr, line};
            if (sort_values(&c, o->v, o->n)) return UNDEF;
            return mkarr(o);
        }
        if (str_is(name, "selectattr") || str_is(name, "rejectattr")) {
            bool sel = str_is(name, "selectattr");
            for (size_t i = 0; i < arr->n; i++)
                if (arr->v[i].kind != V_OBJECT && arr->v[i].kind != V_NAMESPACE)
                    return fail(r, line, "`%.*s` can only be applied to array of objects", (int)name.len, name.s), UNDEF;
            for (size_t i = 0; i < f->n; i++)
                if (f->list[i]->type != N_STR) return fail(r, line, "arguments of `%.*s` must be strings", (int)name.len, name.s), UNDEF;
            if (f->n == 0) return fail(r, line, "Cannot read properties of undefined (reading 'value')"), UNDEF;
            jstr attr = lit(f->list[0]->str, f->list[0]->len);
            jv value;
            bool has_value = f->n > 2;
            if (has_value) value = mkstr(lit(f->list[2]->str, f->list[2]->len));
            jarr *o = arr_new(r, 0);
            if (!o) return UNDEF;
            for (size_t i = 0; i < arr->n; i++) {
                jv *x = obj_get(arr->v[i].o, attr);
                bool res = false;
                if (x) {
                    if (f->n > 1) {
                        if (run_test(r, lit(f->list[1]->str, f->list[1]->len), *x, has_value ? &value : NULL, &res, line)) return UNDEF;
                    } else res = truthy(*x);
                }
                if (res == sel && !arr_push(r, o, arr->v[i])) return UNDEF;
            }
            return mkarr(o);
        }
        if (str_is(name, "map")) {
            if (eval_args(r, f->list, f->n, env, &a)) return UNDEF;
            jv *attr = a.kw ? obj_get(a.kw, litz("attribute")) : NULL;
            if (!attr) return fail(r, line, "`map` expressions without `attribute` set are not currently supported."), UNDEF;
            if (attr->kind != V_STR) return fail(r, line, "attribute must be a string"), UNDEF;
            jv def = kwarg(&a, "default", UNDEF);
            jarr *o = arr_new(r, arr->n);
            if (!o) return UNDEF;
            for (size_t i = 0; i < arr->n; i++) {
                if (arr->v[i].kind != V_OBJECT && arr->v[i].kind != V_NAMESPACE) return fail(r, line, "items in map must be an object"), UNDEF;
                jv v = attr_path(arr->v[i], attr->s);
                o->v[i] = v.kind == V_UNDEF ? def : v;
            }
            o->n = arr->n;
            return mkarr(o);
        }
        return fail(r, line, "Unknown ArrayValue filter: %.*s", (int)name.len, name.s), UNDEF;
    }
    if (operand.kind == V_STR) {
        if (str_is(name, "indent")) {
            if (eval_args(r, f->list, f->n, env, &a)) return UNDEF;
            jv width = arg_or_kw(&a, 0, "width", mkint(4)), first = arg_or_kw(&a, 1, "first", mkbool(false)),
               blank = arg_or_kw(&a, 2, "blank", mkbool(false));
            if (width.kind != V_INT) return fail(r, line, "width must be a number"), UNDEF;
            if (width.n < 0) return fail(r, line, "Invalid count value: %g", width.n), UNDEF;
            if (width.n > 1024) return fail(r, line, "indent width %g is too large", width.n), UNDEF;
            return indent_str(r, operand.s, width.n, js_truthy(first), js_truthy(blank), line);
        }
        if (str_is(name, "replace")) {
            if (eval_args(r, f->list, f->n, env, &a)) return UNDEF;
            /* [...args, KeywordArgumentsValue(kwargs)]: always one more argument */
            args b = a;
            if (!b.kw && !(b.kw = obj_new(r))) return UNDEF;
            size_t n = a.n_pos + 1;
            if (n < 2) return fail(r, line, "replace() requires at least two arguments"), UNDEF;
            jv from = a.pos[0], to = a.n_pos > 1 ? a.pos[1] : kwargs_value(b.kw);
            if (from.kind != V_STR || to.kind != V_STR) return fail(r, line, "replace() arguments must be strings"), UNDEF;
            jv count = NUL;
            if (n > 2) {
                if (a.n_pos > 2) count = a.pos[2];
                else {
                    jv *c = obj_get(b.kw, litz("count"));
                    count = c ? *c : NUL;
                }
            }
            if (count.kind != V_INT && count.kind != V_NULL) return fail(r, line, "replace() count argument must be a number or null"), UNDEF;
            return str_replace(r, operand.s, from.s, to.s, count.n, count.kind == V_INT, line);
        }
        return fail(r, line, "Unknown StringValue filter: %.*s", (int)name.len, name.s), UNDEF;
    }
    if (operand.kind == V_OBJECT) {
        jv b = builtin(r, operand, name);
        if (b.kind == V_FUNC) {
            if (eval_args(r, f->list, f->n, env, &a)) return UNDEF;
            return call_function(r, b, &a, env, line);
        }
        return fail(r, line, "Unknown ObjectValue filter: %.*s", (int)name.len, name.s), UNDEF;
    }
    return fail(r, line, "Cannot apply filter \"%.*s\" to type: %s", (int)name.len, name.s, TYPE_NAMES[operand.kind]), UNDEF;
}

static jv eval(rt *r, const jnode *nd, jenv *env) {
    if (r->failed) return UNDEF;
    if (!nd) return UNDEF;
    if (++r->steps > r->lim.max_steps) return fail(r, nd->line, "the template ran longer than its step budget (%lld)", (long long)r->lim.max_steps), UNDEF;
    if (++r->depth > r->lim.max_depth) return fail(r, nd->line, "the template recursed too deeply (depth %d)", r->lim.max_depth), UNDEF;
    jv res = UNDEF;
    switch (nd->type) {
    case N_INT: res = mkint(nd->num); break;
    case N_FLOAT: res = mkfloat(nd->num); break;
    case N_STR:
    case N_TEXT: res = mkstr(lit(nd->str, nd->len)); break;
    case N_ARRAY:
    case N_TUPLE: {
        jarr *a = arr_new(r, nd->n);
        if (!a) break;
        for (size_t i = 0; i < nd->n && !r->failed; i++) a->v[a->n++] = eval(r, nd->list[i], env);
        res = mkarr(a);
        res.sub = nd->type == N_TUPLE;
        break;
    }
    case N_OBJECT: {
        jobj *o = obj_new(r);
        if (!o) break;
        for (size_t i = 0; i < nd->n && !r->failed; i++) {
            jv k = eval(r, nd->list[i], env);
            if (r->failed) break;
            if (k.kind != V_STR) {
                fail(r, nd->line, "Object keys must be strings: got %s", TYPE_NAMES[k.kind]);
                break;
            }
            jv v = eval(r, nd->list2[i], env);
            if (!r->failed) obj_set(r, o, k.s, v);
        }
        res = mkobj(o, V_OBJECT);
        break;
    }
    case N_IDENT: res = env_get(env, nd->str, nd->len); break;
    case N_CALL: {
        args a;
        if (eval_args(r, nd->list, nd->n, env, &a)) break;
        jv fn = eval(r, nd->a, env);
        if (r->failed) break;
        res = call_function(r, fn, &a, env, nd->line);
        break;
    }
    case N_MEMBER: res = eval_member(r, nd, env); break;
    case N_UNARY: {
        jv v = eval(r, nd->a, env);
        if (r->failed) break;
        if (nd->op == OP_NOT) res = mkbool(!truthy(v));
        else if (is_num(v) || v.kind == V_BOOL) {
            double x = v.kind == V_BOOL ? v.b : v.n;
            double y = nd->op == OP_SUB ? -x : x;
            res = v.kind == V_FLOAT ? mkfloat(y) : mkint(y);
        } else fail(r, nd->line, "Unknown operator \"%s\" for %s", nd->op == OP_SUB ? "-" : "+", TYPE_NAMES[v.kind]);
        break;
    }
    case N_BINARY: res = eval_binary(r, nd, env); break;
    case N_FILTER: {
        jv v = eval(r, nd->a, env);
        if (!r->failed) res = apply_filter(r, v, nd->b, env);
        break;
    }
    case N_TEST: {
        jv v = eval(r, nd->a, env);
        bool t;
        if (!r->failed && !run_test(r, lit(nd->str, nd->len), v, NULL, &t, nd->line)) res = mkbool(nd->flag ? !t : t);
        break;
    }
    case N_SELECT: {
        jv p = eval(r, nd->b, env);
        if (!r->failed && truthy(p)) res = eval(r, nd->a, env);
        break;
    }
    case N_TERNARY: {
        jv c = eval(r, nd->a, env);
        if (!r->failed) res = truthy(c) ? eval(r, nd->b, env) : eval(r, nd->c, env);
        break;
    }
    default: fail(r, nd->line, "this expression cannot be evaluated here"); break;
    }
    r->depth--;
    return r->failed ? UNDEF : res;
}

/* ---- statements ---- */
static bool assign_set(rt *r, const jnode *nd, jv rhs, jenv *env) {
    const jnode *t = nd->a;
    if (t->type == N_IDENT) return env_set(r, env, t->str, t->len, rhs);
    if (t->type == N_TUPLE) {
        if (rhs.kind != V_ARRAY) return fail(r, nd->line, "Cannot unpack non-iterable type in set: %s", TYPE_NAMES[rhs.kind]), false;
        if (rhs.a->n != t->n) return fail(r, nd->line, "Too %s items to unpack in set", t->n > rhs.a->n ? "few" : "many"), false;
        for (size_t i = 0; i < t->n; i++) {
            if (t->list[i]->type != N_IDENT) return fail(r, nd->line, "Cannot unpack to non-identifier in set"), false;
            if (!env_set(r, env, t->list[i]->str, t->list[i]->len, rhs.a->v[i])) return false;
        }
        return true;
    }
    if (t->type == N_MEMBER) {
        jv obj = eval(r, t->a, env);
        if (r->failed) return false;
        if (obj.kind != V_NAMESPACE) return fail(r, nd->line, "cannot assign attribute on non-namespace object"), false;
        if (t->b->type != N_IDENT) return fail(r, nd->line, "Cannot assign to member with non-identifier property"), false;
        return obj_set(r, obj.o, lit(t->b->str, t->b->len), rhs);
    }
    return fail(r, nd->line, "Invalid LHS inside assignment expression"), false;
}

static bool bind_loopvar(rt *r, const jnode *var, jv cur, jenv *scope, uint32_t line) {
    if (var->type == N_IDENT) return env_set(r, scope, var->str, var->len, cur);
    if (cur.kind != V_ARRAY || cur.sub) return fail(r, line, "Cannot unpack non-iterable type: %s", cur.kind == V_ARRAY ? "TupleValue" : TYPE_NAMES[cur.kind]), false;
    if (var->n != cur.a->n) return fail(r, line, "Too %s items to unpack", var->n > cur.a->n ? "few" : "many"), false;
    for (size_t j = 0; j < var->n; j++) {
        if (var->list[j]->type != N_IDENT) return fail(r, line, "Cannot unpack non-identifier type"), false;
        if (!env_set(r, scope, var->list[j]->str, var->list[j]->len, cur.a->v[j])) return false;
    }
    return true;
}

static bool exec_for(rt *r, const jnode *nd, jenv *env, sb *out) {
    jenv *scope = env_new(r, env);
    if (!scope) return false;
    jv it = eval(r, nd->b, scope);
    if (r->failed) return false;
    if (it.kind != V_ARRAY && it.kind != V_OBJECT)
        return fail(r, nd->line, "Expected iterable or object type in for loop: got %s", TYPE_NAMES[it.kind]), false;
    jarr *items = it.kind == V_ARRAY ? it.a : NULL;
    if (it.kind == V_OBJECT) {
        if (!(items = arr_new(r, it.o->n))) return false;
        for (size_t i = 0; i < it.o->n; i++) items->v[i] = mkstr(it.o->keys[i]);
        items->n = it.o->n;
    }
    /* the items the loop filter keeps */
    jarr *kept = items;
    if (nd->c) {
        if (!(kept = arr_new(r, 0))) return false;
        for (size_t i = 0; i < items->n; i++) {
            jenv *ls = env_new(r, scope);
            if (!ls || !bind_loopvar(r, nd->a, items->v[i], ls, nd->line)) return false;
            jv t = eval(r, nd->c, ls);
            if (r->failed) return false;
            if (truthy(t) && !arr_push(r, kept, items->v[i])) return false;
        }
    } else if (nd->a->type == N_TUPLE) {
        /* the reference checks every item's shape before the first iteration */
        for (size_t i = 0; i < items->n; i++) {
            jv cur = items->v[i];
            if (cur.kind != V_ARRAY || cur.sub)
                return fail(r, nd->line, "Cannot unpack non-iterable type: %s", cur.kind == V_ARRAY ? "TupleValue" : TYPE_NAMES[cur.kind]), false;
            if (nd->a->n != cur.a->n) return fail(r, nd->line, "Too %s items to unpack", nd->a->n > cur.a->n ? "few" : "many"), false;
        }
    }
    size_t n = kept->n;
    bool no_iteration = true;
    for (size_t i = 0; i < n; i++) {
        if (++r->steps > r->lim.max_steps) return fail(r, nd->line, "the template ran longer than its step budget (%lld)", (long long)r->lim.max_steps), false;
        jobj *loop = obj_new(r);
        if (!loop || !(loop->keys = al(r, 9 * sizeof(jstr))) || !(loop->vals = al(r, 9 * sizeof(jv)))) return false;
        loop->cap = 9; /* the nine loop variables, without regrowing */
        bool ok = obj_set(r, loop, litz("index"), mkint((double)i + 1)) && obj_set(r, loop, litz("index0"), mkint((double)i)) &&
                  obj_set(r, loop, litz("revindex"), mkint((double)(n - i))) && obj_set(r, loop, litz("revindex0"), mkint((double)(n - i - 1))) &&
                  obj_set(r, loop, litz("first"), mkbool(i == 0)) && obj_set(r, loop, litz("last"), mkbool(i == n - 1)) &&
                  obj_set(r, loop, litz("length"), mkint((double)n)) && obj_set(r, loop, litz("previtem"), i > 0 ? kept->v[i - 1] : UNDEF) &&
                  obj_set(r, loop, litz("nextitem"), i + 1 < n ? kept->v[i + 1] : UNDEF);
        if (!ok || !env_set(r, scope, "loop", 4, mkobj(loop, V_OBJECT))) return false;
        if (!bind_loopvar(r, nd->a, kept->v[i], scope, nd->line)) return false;
        size_t mark = out->len;
        if (!exec_block(r, nd->list, nd->n, scope, out)) return false;
        if (r->ctl) { /* the reference drops what the interrupted iteration wrote */
            int c = r->ctl;
            r->ctl = 0;
            out->len = mark;
            if (c == 1) break;
            continue;
        }
        no_iteration = false;
    }
    if (no_iteration) return exec_block(r, nd->list2, nd->n2, scope, out);
    return true;
}

static bool exec_stmt(rt *r, const jnode *nd, jenv *env, sb *out) {
    if (++r->steps > r->lim.max_steps) return fail(r, nd->line, "the template ran longer than its step budget (%lld)", (long long)r->lim.max_steps), false;
    switch (nd->type) {
    case N_TEXT: return sb_str(r, out, lit(nd->str, nd->len), nd->line);
    case N_COMMENT: return true;
    case N_BREAK: r->ctl = 1; return true;
    case N_CONTINUE: r->ctl = 2; return true;
    case N_IF: {
        jv t = eval(r, nd->a, env);
        if (r->failed) return false;
        return truthy(t) ? exec_block(r, nd->list, nd->n, env, out) : exec_block(r, nd->list2, nd->n2, env, out);
    }
    case N_FOR: return exec_for(r, nd, env, out);
    case N_SET: {
        jv rhs;
        if (nd->b) {
            rhs = eval(r, nd->b, env);
            if (r->failed) return false;
        } else {
            sb body = {0};
            if (!exec_block(r, nd->list, nd->n, env, &body)) return false;
            if (r->ctl) return true;
            rhs = mkstr(sb_done(&body));
        }
        return assign_set(r, nd, rhs, env);
    }
    case N_MACRO: {
        jfunc *f = al(r, sizeof(jfunc));
        if (!f) return false;
        f->kind = F_MACRO;
        f->node = nd;
        return env_set(r, env, nd->str, nd->len, (jv){.kind = V_FUNC, .f = f});
    }
    case N_CALLSTMT: {
        jfunc *caller = al(r, sizeof(jfunc));
        if (!caller) return false;
        caller->kind = F_CALLER;
        caller->node = nd;
        caller->env = env;
        args a;
        if (eval_args(r, nd->a->list, nd->a->n, env, &a)) return false;
        jv fn = eval(r, nd->a->a, env);
        if (r->failed) return false;
        if (fn.kind != V_FUNC) return fail(r, nd->line, "Cannot call something that is not a function: got %s", TYPE_NAMES[fn.kind]), false;
        /* macroArgs.push(KeywordArgumentsValue(macroKwargs)): builtins see it as a positional argument */
        if (fn.f->kind != F_MACRO && fn.f->kind != F_CALLER) {
            jarr *pos = arr_new(r, a.n_pos + 1);
            if (!pos) return false;
            if (a.n_pos) memcpy(pos->v, a.pos, a.n_pos * sizeof(jv));
            pos->n = a.n_pos;
            jobj *kw = a.kw ? a.kw : obj_new(r);
            if (!kw || !arr_push(r, pos, kwargs_value(kw))) return false;
            a.pos = pos->v;
            a.n_pos = pos->n;
            a.kw = NULL;
        }
        jenv *ne = env_new(r, env);
        if (!ne || !env_set(r, ne, "caller", 6, (jv){.kind = V_FUNC, .f = caller})) return false;
        jv v = call_function(r, fn, &a, ne, nd->line);
        if (r->failed) return false;
        return (v.kind == V_NULL || v.kind == V_UNDEF) ? true : print_value(r, out, v, nd->line);
    }
    case N_FILTERSTMT: {
        sb body = {0};
        if (!exec_block(r, nd->list, nd->n, env, &body)) return false;
        if (r->ctl) return true;
        jv v = apply_filter(r, mkstr(sb_done(&body)), nd->a, env);
        if (r->failed) return false;
        return (v.kind == V_NULL || v.kind == V_UNDEF) ? true : print_value(r, out, v, nd->line);
    }
    default: {
        jv v = eval(r, nd, env);
        if (r->failed) return false;
        return (v.kind == V_NULL || v.kind == V_UNDEF) ? true : print_value(r, out, v, nd->line);
    }
    }
}

static bool exec_block(rt *r, jnode *const *body, size_t n, jenv *env, sb *out) {
    if (++r->depth > r->lim.max_depth) return fail(r, n ? body[0]->line : 0, "the template recursed too deeply (depth %d)", r->lim.max_depth), false;
    bool ok = true;
    for (size_t i = 0; i < n && ok; i++) {
        ok = exec_stmt(r, body[i], env, out);
        if (r->ctl) break;
    }
    r->depth--;
    return ok && !r->failed;
}

/* ---- context from JSON ---- */
/* JS objects list integer-like keys ("0", "12") first, in numeric order, then the rest in insertion order. */
static bool index_key(const char *k, double *v) {
    size_t n = strlen(k);
    if (n == 0 || n > 10 || (n > 1 && k[0] == '0')) return false;
    double x = 0;
    for (size_t i = 0; i < n; i++) {
        if (k[i] < '0' || k[i] > '9') return false;
        x = x * 10 + (k[i] - '0');
    }
    if (x > 4294967294.0) return false;
    *v = x;
    return true;
}

static jv from_json(rt *r, const json_t *j, jinja_origin origin, int depth) {
    if (depth > 512) return fail(r, 0, "the context JSON is nested too deeply"), UNDEF;
    uint8_t o = origin == JINJA_ORIGIN_TEMPLATE ? 0 : 1;
    switch (json_typeof(j)) {
    case JSON_NULL: return NUL;
    case JSON_TRUE: return mkbool(true);
    case JSON_FALSE: return mkbool(false);
    case JSON_INTEGER: return mkint((double)json_integer_value(j));
    case JSON_REAL: {
        double v = json_real_value(j);
        return v == floor(v) && isfinite(v) ? mkint(v) : mkfloat(v);
    }
    case JSON_STRING: return mkstr((jstr){json_string_value(j), json_string_length(j), NULL, o});
    case JSON_ARRAY: {
        jarr *a = arr_new(r, json_array_size(j));
        if (!a) return UNDEF;
        for (size_t i = 0; i < json_array_size(j); i++) {
            jinja_origin child = origin == JINJA_ORIGIN_MESSAGES && depth == 0 ? JINJA_ORIGIN_MESSAGES : origin == JINJA_ORIGIN_MESSAGES ? JINJA_ORIGIN_DATA : origin;
            a->v[a->n++] = from_json(r, json_array_get(j, i), child, depth + 1);
            if (r->failed) return UNDEF;
        }
        return mkarr(a);
    }
    case JSON_OBJECT: {
        jobj *ob = obj_new(r);
        if (!ob) return UNDEF;
        size_t n = json_object_size(j);
        const char **keys = al(r, (n + 1) * sizeof(char *));
        const json_t **vals = al(r, (n + 1) * sizeof(json_t *));
        double *idx = al(r, (n + 1) * sizeof(double));
        if (!keys || !vals || !idx) return UNDEF;
        size_t k = 0, n_index = 0;
        const char *key;
        json_t *val;
        json_object_foreach((json_t *)j, key, val) {
            double x;
            if (index_key(key, &x)) { /* insert in numeric order among the index keys */
                size_t p = n_index;
                while (p > 0 && idx[p - 1] > x) p--;
                memmove(keys + p + 1, keys + p, (k - p) * sizeof(char *));
                memmove(vals + p + 1, vals + p, (k - p) * sizeof(json_t *));
                memmove(idx + p + 1, idx + p, (n_index - p) * sizeof(double));
                keys[p] = key;
                vals[p] = val;
                idx[p] = x;
                n_index++;
            } else {
                keys[k] = key;
                vals[k] = val;
            }
            k++;
        }
        for (size_t i = 0; i < k; i++) {
            bool is_role = origin == JINJA_ORIGIN_MESSAGES && depth == 1 && strcmp(keys[i], "role") == 0;
            jinja_origin child = is_role ? JINJA_ORIGIN_TEMPLATE : origin == JINJA_ORIGIN_MESSAGES ? JINJA_ORIGIN_DATA : origin;
            jv v = from_json(r, vals[i], child, depth + 1);
            if (r->failed) return UNDEF;
            if (!obj_set(r, ob, (jstr){keys[i], strlen(keys[i]), NULL, o}, v)) return UNDEF;
        }
        return mkobj(ob, V_OBJECT);
    }
    }
    return UNDEF;
}

jinja_limits jinja_default_limits(void) {
    return (jinja_limits){
        .max_output_bytes = 64u << 20,
        .max_memory_bytes = 256u << 20,
        .max_steps = 50000000,
        .max_depth = 600,
    };
}

int jinja_render(const jinja_template *t, const jinja_var *vars, size_t n_vars, int64_t now, const jinja_limits *limits,
                 char **text, uint8_t **mask, size_t *len, kite_error *e) {
    *text = NULL;
    *mask = NULL;
    *len = 0;
    rt *r = calloc(1, sizeof(rt));
    if (!r) return kite_fail(e, KITE_ERR_NOMEM, "chat template: out of memory");
    r->lim = limits ? *limits : jinja_default_limits();
    r->arena.budget = r->lim.max_memory_bytes;
    r->now = now;
    int status = KITE_OK;
    jenv *g = env_new(r, NULL);
    static const struct {
        const char *name;
        fkind kind;
    } FUNCS[] = {{"namespace", F_NAMESPACE}, {"raise_exception", F_RAISE}, {"range", F_RANGE}, {"strftime_now", F_STRFTIME}};
    bool ok = g != NULL;
    for (size_t i = 0; ok && i < sizeof FUNCS / sizeof *FUNCS; i++) {
        jfunc *f = al(r, sizeof(jfunc));
        ok = f != NULL;
        if (ok) {
            f->kind = FUNCS[i].kind;
            ok = env_set(r, g, FUNCS[i].name, strlen(FUNCS[i].name), (jv){.kind = V_FUNC, .f = f});
        }
    }
    ok = ok && env_set(r, g, "false", 5, mkbool(false)) && env_set(r, g, "true", 4, mkbool(true)) && env_set(r, g, "none", 4, NUL) &&
         env_set(r, g, "True", 4, mkbool(true)) && env_set(r, g, "False", 5, mkbool(false)) && env_set(r, g, "None", 4, NUL);
    for (size_t i = 0; ok && i < n_vars; i++) {
        size_t nl = strlen(vars[i].name);
        if (env_has_own(g, vars[i].name, nl)) {
            fail(r, 0, "Variable already declared: %s", vars[i].name);
            ok = false;
            break;
        }
        jv v = vars[i].value ? from_json(r, vars[i].value, vars[i].origin, 0) : UNDEF;
        ok = !r->failed && env_set(r, g, vars[i].name, nl, v);
    }
    sb out = {0};
    if (ok) ok = exec_block(r, t->body, t->n_body, g, &out);
    if (ok && r->ctl) ok = fail(r, 0, "break or continue outside of a loop") == 0;
    if (!ok || r->failed) {
        status = r->status ? r->status : KITE_ERR_INVALID_ARG;
        if (status == KITE_ERR_NOMEM) kite_fail(e, status, "chat template: %s", r->msg);
        else if (r->line) kite_fail(e, status, "chat template line %u: %s", r->line, r->msg);
        else kite_fail(e, status, "chat template: %s", r->msg);
    } else {
        *text = malloc(out.len + 1);
        *mask = malloc(out.len ? out.len : 1);
        if (!*text || !*mask) {
            free(*text);
            free(*mask);
            *text = NULL;
            *mask = NULL;
            status = kite_fail(e, KITE_ERR_NOMEM, "chat template: out of memory");
        } else {
            if (out.len) {
                memcpy(*text, out.s, out.len);
                memcpy(*mask, out.m, out.len);
            }
            (*text)[out.len] = 0;
            *len = out.len;
        }
    }
    ja_free_all(&r->arena);
    free(r);
    return status;
}

int jinja_compile(jinja_template **out, const char *source, size_t len, kite_error *e) {
    *out = NULL;
    if (!source && len) return kite_fail(e, KITE_ERR_INVALID_ARG, "chat template: no source");
    if (len > (4u << 20)) return kite_fail(e, KITE_ERR_INVALID_ARG, "chat template: %zu bytes is more than the 4 MiB allowed", len);
    for (size_t i = 0; i < len;) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)source + i, (utf8proc_ssize_t)(len - i), &cp);
        if (k <= 0) {
            size_t line = 1;
            for (size_t j = 0; j < i; j++) line += source[j] == '\n';
            return kite_fail(e, KITE_ERR_INVALID_ARG, "chat template line %zu: invalid UTF-8", line);
        }
        i += (size_t)k;
    }
    jinja_template *t = calloc(1, sizeof *t);
    if (!t) return kite_fail(e, KITE_ERR_NOMEM, "chat template: out of memory");
    t->arena.budget = (size_t)64 * len + (16u << 20);
    int rc = jinja_parse(t, source ? source : "", len, e);
    if (rc) {
        jinja_free(t);
        return rc;
    }
    *out = t;
    return KITE_OK;
}

void jinja_free(jinja_template *t) {
    if (!t) return;
    ja_free_all(&t->arena);
    free(t);
}
