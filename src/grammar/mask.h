/* Token masks: which tokens of a model's vocabulary a grammar allows next.
 *
 * kite_vocab_index is built once per model (cached in struct kite_model): every token's output bytes
 * as they appear mid-text (kite_tokenizer_piece after an ordinary token) in a byte trie stored in
 * depth-first order, so a whole subtree is skipped by one jump. Control and unknown tokens and tokens
 * with empty pieces are never allowed by a grammar; end-of-generation tokens are allowed exactly when
 * the text so far is a complete sentence.
 *
 * kite_gmask is one generation's matcher (kite_gmatch) plus a bounded cache of masks by state. A mask
 * is computed by walking the trie while stepping the matcher byte by byte from the state, skipping the
 * subtree under any byte the grammar refuses.
 *
 * SentencePiece's dummy prefix: after BOS or a control token, a token's leading space is not written
 * (kite_tokenizer_drops_space_after). A mask for such a previous token walks the trie's space subtree
 * from the state itself (the space is not fed), so masks always match the text emit() produces. */
#ifndef KITE_GRAMMAR_MASK_H
#define KITE_GRAMMAR_MASK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "grammar/grammar.h"
#include "tokenize/tokenizer.h"

typedef struct kite_vocab_index kite_vocab_index;

/* Indexes the tokenizer's vocabulary for a model of n_vocab logits (ids past the tokenizer's are never
 * allowed). */
int kite_vocab_index_build(const kite_tokenizer *t, int32_t n_vocab, kite_vocab_index **out, kite_error *e);
void kite_vocab_index_free(kite_vocab_index *vi);
int32_t kite_vocab_index_n_vocab(const kite_vocab_index *vi);
size_t kite_vocab_index_n_nodes(const kite_vocab_index *vi); /* trie nodes, root included */

enum { KITE_GSTATE_ENDED = -3 }; /* after an end-of-generation token: nothing follows */

typedef struct kite_gmask kite_gmask;

typedef struct kite_gmask_stats {
    int64_t computed;        /* masks computed by a trie walk (first visits, and re-visits after eviction) */
    int64_t hits;            /* masks answered from the cache */
    double compute_ms;       /* time in trie walks */
    int64_t steps;           /* matcher steps the walks took */
} kite_gmask_stats;

/* One generation's constraint. allow_eog: end-of-generation tokens may end the text once it is
 * complete (false under ignore_eos: then the text ends only where the grammar allows nothing more).
 * Masks are cached up to cache_bytes (0 = 32 MiB; at least 16 masks). Borrows g, vi and t. */
int kite_gmask_new(const kite_gbnf *g, const kite_vocab_index *vi, const kite_tokenizer *t, bool allow_eog,
                   size_t cache_bytes, kite_gmask **out, kite_error *e);
void kite_gmask_free(kite_gmask *gm);
kite_gmatch *kite_gmask_matcher(kite_gmask *gm);
int32_t kite_gmask_start(kite_gmask *gm);

/* The tokens allowed after `state` when the previous token was prev (-1 at the start): a bitset of
 * ceil(n_vocab / 64) words, bit id of word id / 64, valid until the next call. *n_allowed gets the
 * number of allowed tokens. NULL when the matcher hit a resource limit (e says which). state may be
 * KITE_GSTATE_ENDED (nothing allowed). */
const uint64_t *kite_gmask_allowed(kite_gmask *gm, int32_t state, int32_t prev, int32_t *n_allowed, kite_error *e);
/* Sets logits[i] = -INFINITY for every token not in bits (n_vocab entries). */
void kite_gmask_apply(const uint64_t *bits, float *logits, int32_t n_vocab);
static inline bool kite_gmask_bit(const uint64_t *bits, int32_t id) { return (bits[id >> 6] >> (id & 63)) & 1u; }

/* The state after token id follows prev in `state`: >= 0, KITE_GSTATE_ENDED after an allowed end
 * token, KITE_GSTATE_DEAD when the grammar does not allow the token there (exactly when its mask bit
 * is clear), KITE_GSTATE_LIMIT on a resource limit. */
int32_t kite_gmask_advance(kite_gmask *gm, int32_t state, int32_t prev, int32_t id);

/* The text is complete and the grammar allows no further byte. */
bool kite_gmask_done(kite_gmask *gm, int32_t state);

/* Forced continuation: while the grammar allows exactly one byte after the state (and the text is
 * not complete), that byte is forced. Writes up to cap tokens whose bytes spell a prefix of the forced
 * text and are each allowed in turn (the tokenizer's encoding of the text; a longest-match over the
 * trie when that encoding does not fit, e.g. SentencePiece's dummy prefix), returns their count. */
int32_t kite_gmask_forced_tokens(kite_gmask *gm, int32_t state, int32_t prev, int32_t *ids, int32_t cap);

void kite_gmask_get_stats(const kite_gmask *gm, kite_gmask_stats *out);

#endif
