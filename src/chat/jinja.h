/* A Jinja interpreter for chat templates, matching the npm package @huggingface/jinja 0.5.11 (the
 * renderer Hugging Face's JavaScript stack uses): its lexer (with lstrip_blocks and trim_blocks on, as
 * its Template sets them), parser and runtime semantics, quirks included, so a template renders byte
 * for byte as it does there. Every string carries the origin of each byte (template text or caller
 * data) so the tokenizer can refuse to turn data into special tokens.
 *
 * A compiled template is immutable: many threads may render it at once. */
#ifndef KITE_CHAT_JINJA_H
#define KITE_CHAT_JINJA_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

typedef struct jinja_template jinja_template;

/* Where a context variable's strings come from. */
typedef enum jinja_origin {
    JINJA_ORIGIN_TEMPLATE = 0, /* trusted text, like the template's own literals (bos_token) */
    JINJA_ORIGIN_DATA = 1,     /* the caller's data: never becomes special tokens */
    JINJA_ORIGIN_MESSAGES = 2, /* data, except each message's "role" string, which templates splice into
                                  their own turn markers (Phi's '<|' + role + '|>'): roles are chosen by
                                  the caller, who may send any role anyway, so they forge nothing */
} jinja_origin;

typedef struct jinja_var {
    const char *name;
    const json_t *value;
    jinja_origin origin;
} jinja_var;

typedef struct jinja_limits {
    size_t max_output_bytes;  /* rendered text */
    size_t max_memory_bytes;  /* everything the render allocates */
    int64_t max_steps;        /* nodes evaluated plus loop iterations */
    int32_t max_depth;        /* nested evaluation (macro recursion, deep expressions) */
} jinja_limits;

jinja_limits jinja_default_limits(void);

/* Compiles source (UTF-8, any size up to 4 MiB). Syntax errors: "chat template line N: ...". */
int jinja_compile(jinja_template **out, const char *source, size_t len, kite_error *e);
void jinja_free(jinja_template *t);

/* Renders with the given variables (set in order; a name given twice is an error, as in the reference).
 * now: the time strftime_now formats (local time). *text is NUL-terminated, *mask holds one byte per
 * text byte (1 = the byte came from data); both malloc'd, freed by the caller. */
int jinja_render(const jinja_template *t, const jinja_var *vars, size_t n_vars, int64_t now,
                 const jinja_limits *limits, char **text, uint8_t **mask, size_t *len, kite_error *e);

#endif
