/* The lowered form of a GBNF grammar, shared by the parser (gbnf.c) and the matcher (matcher.c).
 *
 * A grammar is plain BNF over bytes. elems holds every alternative's body in turn, each ending in
 * GELEM_END; an element is a byte set (an index into sets) or a reference to a rule. A position in the
 * grammar is an index into elems. */
#ifndef KITE_GRAMMAR_INTERNAL_H
#define KITE_GRAMMAR_INTERNAL_H

#include <stdint.h>

#include "grammar/grammar.h"

/* Element encoding: >= 0 is byte set number e; GELEM_END ends an alternative; <= -2 references rule -2 - e. */
#define GELEM_END (-1)
#define GELEM_REF(rule) (-2 - (int32_t)(rule))
#define GELEM_IS_REF(e) ((e) <= -2)
#define GELEM_REF_RULE(e) ((uint32_t)(-2 - (e)))

typedef struct gbyteset {
    uint64_t bits[4]; /* bit b of bits[b >> 6]: byte b is in the set */
} gbyteset;

static inline bool gbyteset_has(const gbyteset *s, uint8_t b) { return (s->bits[b >> 6] >> (b & 63)) & 1; }

struct kite_gbnf {
    int32_t *elems;      /* [n_elems] all alternatives, each terminated by GELEM_END */
    uint32_t n_elems;
    uint32_t *alt_first; /* [n_alts] position of an alternative's first element */
    uint32_t n_alts;
    uint32_t *rule_alt;  /* [n_rules + 1] rule r's alternatives are rule_alt[r] .. rule_alt[r + 1] - 1 */
    uint32_t n_rules;
    gbyteset *sets;      /* [n_sets] distinct byte sets, none empty */
    uint32_t n_sets;
    uint32_t root;       /* the start rule */
    char **names;        /* [n_rules] a user rule's name; NULL for helper rules (groups, repetitions, classes) */
    int32_t *token_refs; /* [n_token_refs] distinct token ids the grammar references (<[id]>) */
    size_t n_token_refs;
};

#endif
