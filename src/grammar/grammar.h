/* GBNF grammars and a byte-level matcher over them (the core of constrained decoding).
 *
 * kite_gbnf_parse reads llama.cpp's GBNF language and lowers it to plain BNF over bytes: repetitions
 * become helper rules (x{m,n} = m copies then n-m nested optionals, x* = a right-recursive rule), and a
 * character class over code points becomes alternatives of byte-range sequences (UTF-8 split, surrogates
 * excluded), so a token's bytes can be fed one at a time even when a token ends inside a character.
 *
 * kite_gmatch is a pushdown matcher: a parse stack is a hash-consed persistent list of positions in rule
 * bodies (equal stacks are one node), a state is the sorted set of stacks reachable after the bytes so far,
 * interned into an int32 id. Each state caches its transitions (a few inline entries, then a 256-entry row
 * once more bytes are stepped), so stepping from a seen (state, byte) is an array read. Work and memory
 * are bounded (stacks per state, states, bytes): hitting a bound gives KITE_GSTATE_LIMIT and an error
 * naming the bound, never a hang.
 *
 * Unlike llama.cpp, cycles through nullable tails (such as ("a"?)*) are accepted: the closure visits each
 * (position, stack) pair once. Token references (<think>, <[id]>) are rejected: matching is on bytes. */
#ifndef KITE_GRAMMAR_GRAMMAR_H
#define KITE_GRAMMAR_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

/* A parsed GBNF grammar (llama.cpp's syntax: rules `name ::= ...`, alternatives |, sequences,
 * groups ( ), literals "..." with escapes \n \t \r \\ \" \xHH \uHHHH \UHHHHHHHH, character classes
 * [a-z], [^...], ., repetition * + ? {m} {m,} {m,n}, comments #). Immutable once parsed;
 * character classes over code points are compiled to UTF-8 byte ranges, so matching is byte-level. */
typedef struct kite_gbnf kite_gbnf;

/* Fixed limits of the parser (inputs past them are rejected with a message naming the limit). */
#define KITE_GBNF_MAX_TEXT (16u << 20)    /* bytes of grammar text */
#define KITE_GBNF_MAX_RULES (1u << 17)    /* rules, including the helper rules of groups and repetitions */
#define KITE_GBNF_MAX_ELEMENTS (1u << 22) /* elements (byte sets, references, ends) over all rules */
#define KITE_GBNF_MAX_NESTING 256         /* depth of nested ( ) groups */
#define KITE_GBNF_MAX_REPEAT 10000        /* m and n in x{m,n} */

/* Parses text[0..len). root names the start rule (NULL = "root"). Errors name line:column.
 * Rejects undefined rules, left recursion (direct or indirect), rules that can never finish
 * (recursion without a base case), and inputs past fixed limits (rules, elements, nesting). */
int kite_gbnf_parse(const char *text, size_t len, const char *root, kite_gbnf **out, kite_error *e);
void kite_gbnf_free(kite_gbnf *g);
/* Number of rules after lowering (user rules plus helper rules), for diagnostics. */
size_t kite_gbnf_n_rules(const kite_gbnf *g);

/* A matcher over one grammar: the parse states it has seen, each interned and named by an int32 id,
 * so a state is copied by copying its id (a drafted tree keeps one id per node). Transitions are
 * cached. Used by one thread at a time; the grammar must outlive it. */
typedef struct kite_gmatch kite_gmatch;
enum { KITE_GSTATE_DEAD = -1,   /* the byte is not allowed here */
       KITE_GSTATE_LIMIT = -2 }; /* a resource limit was hit (too many parse stacks or states):
                                    kite_gmatch_error says which; treat as an error, not a rejection */
int kite_gmatch_new(const kite_gbnf *g, kite_gmatch **out, kite_error *e);
void kite_gmatch_free(kite_gmatch *m);
int32_t kite_gmatch_start(kite_gmatch *m);                              /* state before any byte */
int32_t kite_gmatch_step(kite_gmatch *m, int32_t state, uint8_t byte);  /* state after one more byte, or < 0 */
/* State after bytes[0..n) from `state` (stops at the first byte that is not allowed: < 0). */
int32_t kite_gmatch_step_bytes(kite_gmatch *m, int32_t state, const uint8_t *bytes, size_t n);
bool kite_gmatch_accepting(const kite_gmatch *m, int32_t state);  /* the bytes so far form a complete sentence */
bool kite_gmatch_can_continue(kite_gmatch *m, int32_t state);     /* at least one byte may follow */
const kite_error *kite_gmatch_error(const kite_gmatch *m);        /* why the last KITE_GSTATE_LIMIT */

/* Token references (llama.cpp's <[id]>): a terminal matched by a token, not by text. The matcher sees
 * it as the bytes 0xFF, id >> 16, id >> 8, id (no UTF-8 text holds 0xFF); token masks (mask.h) allow
 * the token itself where those bytes may follow, and never a text token whose bytes spell them. The
 * distinct ids a grammar references: */
size_t kite_gbnf_token_refs(const kite_gbnf *g, const int32_t **ids);

/* Additions beyond the fixed API (for the token-mask builder and tests). */

/* The bytes that may follow `state`: bit b of bits[b >> 6] is set when byte b is allowed (every allowed
 * byte leads to a live state, since every rule can finish). Costs one pass over the state's stacks. */
void kite_gmatch_allowed_bytes(const kite_gmatch *m, int32_t state, uint64_t bits[4]);

/* Bounds of one matcher. Defaults: 4096 stacks per state, 1 << 20 states, 256 MiB. */
typedef struct kite_gmatch_limits {
    uint32_t max_stacks_per_state; /* parse stacks in one state (ambiguity) */
    uint32_t max_states;           /* interned states */
    size_t max_bytes;              /* memory of nodes, states and transition rows */
} kite_gmatch_limits;
kite_gmatch_limits kite_gmatch_default_limits(void);
/* Applies to states built from now on (existing states stay valid). */
void kite_gmatch_set_limits(kite_gmatch *m, const kite_gmatch_limits *limits);
/* States interned so far and memory held (bytes), for diagnostics and benchmarks. */
size_t kite_gmatch_n_states(const kite_gmatch *m);
size_t kite_gmatch_memory(const kite_gmatch *m);

#endif
