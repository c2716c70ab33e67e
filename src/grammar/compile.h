/* Compilers to GBNF text: JSON Schema, regular expressions, and the fixed json_object grammar.
 *
 * Each output is llama.cpp-style GBNF with start rule "root", parsed by kite_gbnf_parse (grammar.h).
 * The policies a schema compiles under (whitespace, key order, defaults, which keywords are enforced)
 * are described at the top of json_schema.c; the regex subset at the top of regex.c. */
#ifndef KITE_GRAMMAR_COMPILE_H
#define KITE_GRAMMAR_COMPILE_H

#include <stddef.h>

#include "base/error.h"

/* JSON Schema (draft 2020-12 / 07 keywords that a grammar can express) to GBNF text with start rule "root".
 * *gbnf is malloc'd, NUL-terminated. Unsatisfiable or unsupported schemas are rejected with a message
 * naming the JSON pointer of the offending keyword (e.g. "/properties/age/minimum"). */
int kite_json_schema_to_gbnf(const char *schema, size_t len, char **gbnf, size_t *gbnf_len, kite_error *e);

/* A regular expression (ECMAScript-like subset) to GBNF matching exactly the strings the regex matches
 * in full. Errors name the byte offset. */
int kite_regex_to_gbnf(const char *pattern, size_t len, char **gbnf, size_t *gbnf_len, kite_error *e);

/* GBNF for any JSON value whose top level is an object (json_object mode). */
const char *kite_json_object_gbnf(void);

#endif
