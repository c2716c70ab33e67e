/* Putting GBNF texts together: several compiled grammars in one text (each's rules under a prefix of its
 * own, so their helper rules cannot collide) joined by rules written around them, such as a tool call's
 * markup around the JSON its arguments schema compiles to (chat/tool_grammar.c). */
#ifndef KITE_GRAMMAR_COMPOSE_H
#define KITE_GRAMMAR_COMPOSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

/* gbnf[0..len) with every rule name, where defined and where referenced, written prefix + name (comments,
 * literals, classes and repetition counts untouched). *out is malloc'd and NUL-terminated. Fails on an
 * unterminated literal or class (the text is not GBNF). */
int kite_gbnf_prefix_rules(const char *gbnf, size_t len, const char *prefix, char **out, size_t *out_len, kite_error *e);

/* A GBNF "..." literal matching exactly the UTF-8 text s[0..n) (", \ and control characters escaped).
 * malloc'd and NUL-terminated; NULL when s is not valid UTF-8 (a literal spells code points) or out of
 * memory. */
char *kite_gbnf_literal(const char *s, size_t n);

/* Lazy grammars (llama.cpp's grammar_lazy with trigger words, as one grammar): free text until the
 * text reaches a trigger, then the grammar from the trigger on. The text is either free text in which
 * no trigger occurs, or such free text followed by a sentence of gbnf[0..len) that begins with a trigger
 * (sentences that begin otherwise can never be reached). With at_start, a trigger counts only at the
 * start of the text, after optional whitespace (space, tab, CR, LF): text that begins otherwise is free
 * to its end, triggers included. Free text is any valid UTF-8 (a byte grammar cannot allow less than
 * whole characters, and a grammar allows no control token). The free part is an automaton over the
 * triggers' characters (each state the longest suffix of the text that is a proper prefix of a
 * trigger), so the matcher's states stay few and their masks are cached like any others. Triggers:
 * 1..KITE_LAZY_MAX_TRIGGERS non-empty UTF-8 strings of at most KITE_LAZY_MAX_TRIGGER_CHARS characters.
 * The grammar's rules are renamed under "lazy-g-". *out is malloc'd and NUL-terminated. */
/* Token references spelled by text (llama.cpp's <think>, <|channel|>) rewritten as <[id]>: lookup gives
 * the id of the one token whose text is text[0..n) (the brackets included), or -1, which fails naming
 * the reference and its byte offset. Literals, classes and comments are left alone. */
typedef int32_t (*kite_token_lookup_fn)(void *user, const char *text, size_t n);
int kite_gbnf_resolve_tokens(const char *gbnf, size_t len, kite_token_lookup_fn lookup, void *user, char **out,
                             size_t *out_len, kite_error *e);

enum { KITE_LAZY_MAX_TRIGGERS = 16, KITE_LAZY_MAX_TRIGGER_CHARS = 64 };
int kite_gbnf_lazy(const char *gbnf, size_t len, const char *const *triggers, size_t n_triggers, bool at_start, char **out,
                   size_t *out_len, kite_error *e);

#endif
