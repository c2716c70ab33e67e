/* The text builder, code point spelling and code point sets shared by the GBNF compilers. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/compile_internal.h"

static bool gtext_reserve(gtext *t, size_t extra) {
    if (t->failed) return false;
    size_t limit = t->limit ? t->limit : GTEXT_MAX_BYTES;
    if (extra > limit || t->len > limit - extra) {
        t->failed = t->too_large = true;
        return false;
    }
    if (t->len + extra + 1 <= t->cap) return true;
    size_t cap = t->cap ? t->cap : 256;
    while (cap < t->len + extra + 1) cap *= 2;
    char *buf = realloc(t->buf, cap);
    if (!buf) {
        t->failed = true;
        return false;
    }
    t->buf = buf;
    t->cap = cap;
    return true;
}

void gtext_putn(gtext *t, const char *s, size_t n) {
    if (!gtext_reserve(t, n)) return;
    memcpy(t->buf + t->len, s, n);
    t->len += n;
    t->buf[t->len] = 0;
}

void gtext_puts(gtext *t, const char *s) { gtext_putn(t, s, strlen(s)); }

void gtext_printf(gtext *t, const char *fmt, ...) {
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) {
        t->failed = true;
        return;
    }
    if ((size_t)n < sizeof small) {
        gtext_putn(t, small, (size_t)n);
        return;
    }
    if (!gtext_reserve(t, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(t->buf + t->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    t->len += (size_t)n;
}

void gtext_free(gtext *t) {
    free(t->buf);
    *t = (gtext){.limit = t->limit};
}

char *gtext_take(gtext *t, size_t *len) {
    if (!t->buf) gtext_putn(t, "", 0);
    if (!t->buf) {
        t->buf = malloc(1);
        if (!t->buf) return NULL;
        t->buf[0] = 0;
    }
    char *out = t->buf;
    if (len) *len = t->len;
    *t = (gtext){.limit = t->limit};
    return out;
}

int gtext_check(const gtext *t, const char *what, kite_error *e) {
    if (!t->failed) return KITE_OK;
    if (t->too_large)
        return kite_fail(e, KITE_ERR_INVALID_ARG, "%s: the grammar would exceed %zu bytes", what,
                         (size_t)(t->limit ? t->limit : GTEXT_MAX_BYTES));
    return kite_fail(e, KITE_ERR_NOMEM, "%s: out of memory", what);
}

static void put_hex_cp(gtext *t, uint32_t cp) {
    if (cp <= 0xFF) gtext_printf(t, "\\x%02X", cp);
    else if (cp <= 0xFFFF) gtext_printf(t, "\\u%04X", cp);
    else gtext_printf(t, "\\U%08X", cp);
}

void gtext_literal_cp(gtext *t, uint32_t cp) {
    if (cp >= 0x20 && cp < 0x7F && cp != '"' && cp != '\\') {
        char c = (char)cp;
        gtext_putn(t, &c, 1);
    } else {
        put_hex_cp(t, cp);
    }
}

void gtext_class_cp(gtext *t, uint32_t cp) {
    /* Only letters and digits go bare: every other character could be class syntax (^ - ] \). */
    if ((cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) {
        char c = (char)cp;
        gtext_putn(t, &c, 1);
    } else {
        put_hex_cp(t, cp);
    }
}

bool utf8_decode(const char *s, size_t n, size_t *pos, uint32_t *cp) {
    size_t i = *pos;
    if (i >= n) return false;
    const unsigned char *u = (const unsigned char *)s;
    uint32_t c = u[i];
    size_t need;
    uint32_t min;
    if (c < 0x80) {
        *cp = c;
        *pos = i + 1;
        return true;
    } else if ((c & 0xE0) == 0xC0) {
        need = 1, min = 0x80, c &= 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
        need = 2, min = 0x800, c &= 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
        need = 3, min = 0x10000, c &= 0x07;
    } else {
        return false;
    }
    if (n - i - 1 < need) return false;
    for (size_t k = 1; k <= need; k++) {
        if ((u[i + k] & 0xC0) != 0x80) return false;
        c = (c << 6) | (u[i + k] & 0x3F);
    }
    if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return false;
    *cp = c;
    *pos = i + 1 + need;
    return true;
}

void gtext_literal(gtext *t, const char *s, size_t n) {
    gtext_putn(t, "\"", 1);
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        if (utf8_decode(s, n, &i, &cp)) {
            gtext_literal_cp(t, cp);
        } else {
            gtext_printf(t, "\\x%02X", (unsigned char)s[i]);
            i++;
        }
    }
    gtext_putn(t, "\"", 1);
}

void cp_set_add(cp_set *s, uint32_t lo, uint32_t hi) {
    if (s->failed || lo > hi) return;
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 8;
        cp_range *r = realloc(s->r, cap * sizeof *r);
        if (!r) {
            s->failed = true;
            return;
        }
        s->r = r;
        s->cap = cap;
    }
    s->r[s->n++] = (cp_range){lo, hi};
}

void cp_set_add_set(cp_set *s, const cp_set *other) {
    for (size_t i = 0; i < other->n; i++) cp_set_add(s, other->r[i].lo, other->r[i].hi);
    if (other->failed) s->failed = true;
}

static int compare_range(const void *pa, const void *pb) {
    const cp_range *a = pa, *b = pb;
    return (a->lo > b->lo) - (a->lo < b->lo);
}

void cp_set_normalize(cp_set *s) {
    if (s->n == 0) return;
    qsort(s->r, s->n, sizeof *s->r, compare_range);
    size_t w = 0;
    for (size_t i = 1; i < s->n; i++) {
        if (s->r[i].lo <= s->r[w].hi + 1) {
            if (s->r[i].hi > s->r[w].hi) s->r[w].hi = s->r[i].hi;
        } else {
            s->r[++w] = s->r[i];
        }
    }
    s->n = w + 1;
}

void cp_set_remove_surrogates(cp_set *s) {
    cp_set out = {0};
    for (size_t i = 0; i < s->n; i++) {
        cp_range r = s->r[i];
        if (r.hi < 0xD800 || r.lo > 0xDFFF) {
            cp_set_add(&out, r.lo, r.hi);
            continue;
        }
        if (r.lo < 0xD800) cp_set_add(&out, r.lo, 0xD7FF);
        if (r.hi > 0xDFFF) cp_set_add(&out, 0xE000, r.hi);
    }
    if (s->failed) out.failed = true;
    free(s->r);
    *s = out;
}

void cp_set_complement(cp_set *s) {
    cp_set out = {0};
    uint32_t next = 0;
    for (size_t i = 0; i < s->n; i++) {
        if (s->r[i].lo > next) cp_set_add(&out, next, s->r[i].lo - 1);
        next = s->r[i].hi + 1;
    }
    if (next <= 0x10FFFF) cp_set_add(&out, next, 0x10FFFF);
    if (s->failed) out.failed = true;
    free(s->r);
    *s = out;
    cp_set_remove_surrogates(s);
}

void cp_set_free(cp_set *s) {
    free(s->r);
    *s = (cp_set){0};
}

bool cp_set_contains(const cp_set *s, uint32_t cp) {
    for (size_t i = 0; i < s->n; i++)
        if (cp >= s->r[i].lo && cp <= s->r[i].hi) return true;
    return false;
}
