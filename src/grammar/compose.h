/* Putting GBNF texts together: several compiled grammars in one text (each's rules under a prefix of its
 * own, so their helper rules cannot collide) joined by rules written around them, such as a tool call's
 * markup around the JSON its arguments schema compiles to (chat/tool_grammar.c). */
#ifndef KITE_GRAMMAR_COMPOSE_H
#define KITE_GRAMMAR_COMPOSE_H

#include <stddef.h>

#include "base/error.h"

/* gbnf[0..len) with every rule name, where defined and where referenced, written prefix + name (comments,
 * literals, classes and repetition counts untouched). *out is malloc'd and NUL-terminated. Fails on an
 * unterminated literal or class (the text is not GBNF). */
int kite_gbnf_prefix_rules(const char *gbnf, size_t len, const char *prefix, char **out, size_t *out_len, kite_error *e);

/* A GBNF "..." literal matching exactly the UTF-8 text s[0..n) (", \ and control characters escaped).
 * malloc'd and NUL-terminated; NULL when s is not valid UTF-8 (a literal spells code points) or out of
 * memory. */
char *kite_gbnf_literal(const char *s, size_t n);

#endif
