/* A small read-only JSON parser for tokenizer.json: one pass, nodes in one growing array, strings left in
 * place when they hold no escapes. jansson spends over a second on the 10 MB Llama-3 / Qwen files (a
 * malloc per value); this takes about a tenth of that. Strict RFC 8259: UTF-8 checked, surrogate pairs
 * joined, lone surrogates and control characters rejected, nesting limited. */
#ifndef KITE_TOKENIZE_JSON_LITE_H
#define KITE_TOKENIZE_JSON_LITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

typedef enum kj_type { KJ_NULL = 0, KJ_FALSE, KJ_TRUE, KJ_NUMBER, KJ_STRING, KJ_ARRAY, KJ_OBJECT } kj_type;

typedef struct kj_node {
    const char *key;  /* member name when the parent is an object (not NUL-terminated), else NULL */
    union {
        const char *str; /* KJ_STRING: the decoded bytes (not NUL-terminated) */
        uint32_t first;  /* KJ_ARRAY / KJ_OBJECT: index of the first child (0 = none) */
        double num;      /* KJ_NUMBER when !is_int */
        int64_t ival;    /* KJ_NUMBER when is_int: an integer that fits int64 */
    };
    uint32_t key_len;
    uint32_t len;     /* KJ_STRING: bytes; KJ_ARRAY / KJ_OBJECT: number of children */
    uint32_t next;    /* index of the next sibling (0 = none) */
    uint8_t type;     /* kj_type */
    bool is_int;
} kj_node;

typedef struct kj_doc {
    kj_node *nodes;   /* nodes[0] stands for "absent" (type null), nodes[KJ_ROOT] is the document */
    uint32_t n_nodes;
    char **pools;     /* decoded strings */
    size_t n_pools;
} kj_doc;

/* Parses text[0..len). `what` names the file in error messages ("tokenizer.json"). */
int kj_parse(kj_doc *doc, const char *text, size_t len, const char *what, kite_error *e);
void kj_free(kj_doc *doc);

#define KJ_ROOT 1u

/* Index helpers: index 0 stands for "absent", so lookups chain without checks. */
static inline const kj_node *kj_at(const kj_doc *d, uint32_t i) { return i ? &d->nodes[i] : NULL; }
/* Member `key` of object node i (the last one if repeated), or 0. */
uint32_t kj_get(const kj_doc *d, uint32_t obj, const char *key);
/* Element k of array node i, or 0. */
uint32_t kj_index(const kj_doc *d, uint32_t arr, uint32_t k);
static inline kj_type kj_type_of(const kj_doc *d, uint32_t i) { return i ? (kj_type)d->nodes[i].type : KJ_NULL; }
/* A string node's text as a NUL-free check: true and (ptr, len) when node i is a string. */
bool kj_string(const kj_doc *d, uint32_t i, const char **s, size_t *len);
bool kj_string_is(const kj_doc *d, uint32_t i, const char *want);
/* true / false for booleans, fallback otherwise. */
bool kj_bool(const kj_doc *d, uint32_t i, bool fallback);

#endif
