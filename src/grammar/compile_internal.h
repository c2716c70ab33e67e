/* Shared pieces of the GBNF compilers (json_schema.c, regex.c): a bounded text builder, GBNF
 * spelling of code points, sets of code points, and the regex compiler as an expression emitter. */
#ifndef KITE_GRAMMAR_COMPILE_INTERNAL_H
#define KITE_GRAMMAR_COMPILE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

/* Output past this many bytes is refused (a schema or regex that would need more is rejected). */
#define GTEXT_MAX_BYTES (8u << 20)

/* A growing NUL-terminated string. Appends past `limit` or failed allocations set `failed` and are
 * dropped, so a caller checks once at the end (gtext_check) instead of after every append. */
typedef struct gtext {
    char *buf;
    size_t len, cap;
    size_t limit; /* bytes; 0 = GTEXT_MAX_BYTES */
    bool failed;
    bool too_large; /* failed because of the limit (else out of memory) */
} gtext;

void gtext_putn(gtext *t, const char *s, size_t n);
void gtext_puts(gtext *t, const char *s);
void gtext_printf(gtext *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void gtext_free(gtext *t);
/* Takes the buffer (never NULL on success: "" for an empty text); the builder is left empty. */
char *gtext_take(gtext *t, size_t *len);
/* KITE_OK, or fails e naming `what` when the text overflowed or memory ran out. */
int gtext_check(const gtext *t, const char *what, kite_error *e);

/* One code point inside a GBNF "..." literal or [...] class, escaped where needed. */
void gtext_literal_cp(gtext *t, uint32_t cp);
void gtext_class_cp(gtext *t, uint32_t cp);
/* A GBNF "..." literal of the UTF-8 bytes s[0..n) (invalid UTF-8 is written byte by byte as \xHH,
 * which the caller must avoid: callers pass validated text). */
void gtext_literal(gtext *t, const char *s, size_t n);

/* A set of code points as sorted, disjoint, non-adjacent inclusive ranges. */
typedef struct cp_range {
    uint32_t lo, hi;
} cp_range;
typedef struct cp_set {
    cp_range *r;
    size_t n, cap;
    bool failed; /* an allocation failed */
} cp_set;

void cp_set_add(cp_set *s, uint32_t lo, uint32_t hi);
void cp_set_add_set(cp_set *s, const cp_set *other);
void cp_set_normalize(cp_set *s);
/* Complement over the Unicode scalar values (0..0x10FFFF without surrogates); s must be normalized. */
void cp_set_complement(cp_set *s);
void cp_set_remove_surrogates(cp_set *s);
void cp_set_free(cp_set *s);
bool cp_set_contains(const cp_set *s, uint32_t cp);

/* Decodes one UTF-8 scalar value at s[*pos..n) and advances *pos; false (pos unchanged) when invalid. */
bool utf8_decode(const char *s, size_t n, size_t *pos, uint32_t *cp);

/* How a regex's characters are written in the output. */
typedef enum regex_mode {
    REGEX_RAW = 0,         /* as the UTF-8 text itself (kite_regex_to_gbnf) */
    REGEX_JSON_STRING = 1, /* as the content of a JSON string: " \ and controls escaped (schema "pattern") */
} regex_mode;

/* Compiles pattern[0..len) to one GBNF expression appended to out (no rules are defined).
 * search = JSON Schema "pattern" semantics: an unanchored branch may have any text before / after it;
 * otherwise (full match) the anchors ^ and $ are no-ops. any_char_rule names the rule for one arbitrary
 * character in the output's encoding (used for the unanchored prefix/suffix in search mode).
 * Errors name the byte offset, prefixed by `who` (e.g. "regex" or "json schema: /pattern"). */
int regex_compile_expr(const char *pattern, size_t len, regex_mode mode, bool search, const char *any_char_rule,
                       const char *who, gtext *out, kite_error *e);

#endif
