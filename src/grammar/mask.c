/* Token masks over a vocabulary trie (contract in mask.h). */
#include "grammar/mask.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { MAX_PIECE = 256 }; /* longest piece a grammar may allow: emit() assembles pieces in 256 bytes */

typedef enum token_class { TOKEN_NEVER = 0, TOKEN_TEXT = 1, TOKEN_EOG = 2 } token_class;

/* One trie node, in depth-first order: the node's subtree is [index, end). */
typedef struct trie_node {
    uint32_t end;       /* index past the subtree */
    uint32_t tok_start; /* its tokens: sorted_ids[tok_start .. tok_start + tok_count) */
    uint16_t tok_count;
    uint16_t depth;     /* bytes from the root (the root is 0) */
    uint8_t byte;       /* the byte on the edge from the parent */
} trie_node;

struct kite_vocab_index {
    int32_t n_vocab;        /* the model's logits */
    int32_t n_tok;          /* the tokenizer's ids (<= n_vocab counted for masks) */
    uint8_t *cls;           /* [n_vocab] token_class */
    trie_node *nodes;       /* [n_nodes] node 0 is the root */
    size_t n_nodes;
    int32_t *sorted_ids;    /* [n_text] TOKEN_TEXT ids by piece, so equal pieces share a node */
    int32_t n_text;
    int32_t *eog_ids;       /* [n_eog] */
    int32_t n_eog;
    uint32_t *piece_off;    /* [n_vocab + 1] mid-text pieces in pool */
    uint8_t *pool;
    uint16_t max_depth;
};

int32_t kite_vocab_index_n_vocab(const kite_vocab_index *vi) { return vi->n_vocab; }
size_t kite_vocab_index_n_nodes(const kite_vocab_index *vi) { return vi->n_nodes; }

void kite_vocab_index_free(kite_vocab_index *vi) {
    if (!vi) return;
    free(vi->cls);
    free(vi->nodes);
    free(vi->sorted_ids);
    free(vi->eog_ids);
    free(vi->piece_off);
    free(vi->pool);
    free(vi);
}

typedef struct sort_item {
    const uint8_t *p;
    uint32_t len;
    int32_t id;
} sort_item;

static int compare_pieces(const void *pa, const void *pb) {
    const sort_item *a = pa, *b = pb;
    uint32_t n = a->len < b->len ? a->len : b->len;
    int c = memcmp(a->p, b->p, n);
    if (c) return c;
    if (a->len != b->len) return a->len < b->len ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

int kite_vocab_index_build(const kite_tokenizer *t, int32_t n_vocab, kite_vocab_index **out, kite_error *e) {
    *out = NULL;
    if (!t) return kite_fail(e, KITE_ERR_INVALID_ARG, "grammar: the model has no tokenizer");
    int32_t n_tok = kite_tokenizer_n_vocab(t);
    if (n_vocab <= 0 || n_vocab > (1 << 24)) return kite_fail(e, KITE_ERR_INVALID_ARG, "grammar: vocabulary of %d tokens", n_vocab);
    if (n_tok > n_vocab) n_tok = n_vocab;
    kite_vocab_index *vi = calloc(1, sizeof *vi);
    if (!vi) return kite_fail(e, KITE_ERR_NOMEM, "grammar: out of memory for the vocabulary index");
    vi->n_vocab = n_vocab;
    vi->n_tok = n_tok;
    vi->cls = calloc((size_t)n_vocab, 1);
    vi->piece_off = calloc((size_t)n_vocab + 1, sizeof *vi->piece_off);
    vi->eog_ids = malloc(sizeof(int32_t) * ((size_t)n_tok + 1));
    if (!vi->cls || !vi->piece_off || !vi->eog_ids) goto nomem;
    /* Pieces as they appear mid-text: after a token whose successor keeps its leading space. */
    int32_t mid_prev = -1;
    for (int32_t id = 0; id < n_tok && mid_prev < 0; id++)
        if (!kite_tokenizer_drops_space_after(t, id)) mid_prev = id;
    size_t total = 0;
    for (int32_t id = 0; id < n_tok; id++) {
        int32_t len = kite_tokenizer_piece(t, mid_prev, id, NULL, 0);
        if (len > 0 && len <= MAX_PIECE) total += (size_t)len;
    }
    vi->pool = malloc(total ? total : 1);
    if (!vi->pool) goto nomem;
    size_t at = 0;
    for (int32_t id = 0; id < n_vocab; id++) {
        vi->piece_off[id] = (uint32_t)at;
        if (id >= n_tok) continue;
        if (kite_tokenizer_is_eog(t, id)) {
            vi->cls[id] = TOKEN_EOG;
            vi->eog_ids[vi->n_eog++] = id;
            continue;
        }
        if (kite_tokenizer_is_special(t, id)) continue;
        int32_t len = kite_tokenizer_piece(t, mid_prev, id, NULL, 0);
        if (len <= 0 || len > MAX_PIECE) continue;
        kite_tokenizer_piece(t, mid_prev, id, (char *)vi->pool + at, (size_t)len);
        at += (size_t)len;
        vi->cls[id] = TOKEN_TEXT;
        vi->n_text++;
    }
    vi->piece_off[n_vocab] = (uint32_t)at;
    /* Sort the text tokens by piece; the trie is then built in one pass, in depth-first order. */
    sort_item *items = malloc(sizeof *items * ((size_t)vi->n_text + 1));
    vi->sorted_ids = malloc(sizeof(int32_t) * ((size_t)vi->n_text + 1));
    /* At most one node per piece byte, plus the root. */
    vi->nodes = malloc(sizeof *vi->nodes * (total + 1));
    if (!items || !vi->sorted_ids || !vi->nodes) {
        free(items);
        goto nomem;
    }
    int32_t k = 0;
    for (int32_t id = 0; id < n_tok; id++)
        if (vi->cls[id] == TOKEN_TEXT)
            items[k++] = (sort_item){vi->pool + vi->piece_off[id], vi->piece_off[id + 1] - vi->piece_off[id], id};
    qsort(items, (size_t)k, sizeof *items, compare_pieces);
    uint32_t path[MAX_PIECE + 1]; /* node index at each depth of the current path */
    vi->nodes[0] = (trie_node){0};
    vi->n_nodes = 1;
    path[0] = 0;
    uint32_t depth = 0;
    const uint8_t *prev_p = NULL;
    uint32_t prev_len = 0;
    for (int32_t i = 0; i < k; i++) {
        vi->sorted_ids[i] = items[i].id;
        uint32_t lcp = 0, lim = items[i].len < prev_len ? items[i].len : prev_len;
        while (lcp < lim && items[i].p[lcp] == prev_p[lcp]) lcp++;
        if (lcp > depth) lcp = depth;
        while (depth > lcp) vi->nodes[path[depth--]].end = (uint32_t)vi->n_nodes;
        while (depth < items[i].len) {
            uint32_t n = (uint32_t)vi->n_nodes++;
            depth++;
            vi->nodes[n] = (trie_node){.byte = items[i].p[depth - 1], .depth = (uint16_t)depth, .tok_start = (uint32_t)i};
            path[depth] = n;
            if (depth > vi->max_depth) vi->max_depth = (uint16_t)depth;
        }
        trie_node *leaf = &vi->nodes[path[depth]];
        if (leaf->tok_count == 0) leaf->tok_start = (uint32_t)i;
        leaf->tok_count++;
        prev_p = items[i].p;
        prev_len = items[i].len;
    }
    while (depth > 0) vi->nodes[path[depth--]].end = (uint32_t)vi->n_nodes;
    vi->nodes[0].end = (uint32_t)vi->n_nodes;
    free(items);
    *out = vi;
    return KITE_OK;
nomem:
    kite_vocab_index_free(vi);
    return kite_fail(e, KITE_ERR_NOMEM, "grammar: out of memory for the vocabulary index");
}

/* ---- masks ---------------------------------------------------------------------------------------- */

typedef struct mask_slot {
    int64_t key;        /* state * 2 + (leading space dropped); -1 = free */
    uint64_t tick;      /* last use, for eviction of the least recently used */
    int32_t next;       /* next slot in the bucket's chain, -1 = end */
    int32_t n_allowed;
} mask_slot;

struct kite_gmask {
    kite_gmatch *m;
    const kite_vocab_index *vi;
    const kite_tokenizer *t;
    bool allow_eog;
    size_t words;               /* uint64 words per mask */
    int32_t cap;                /* slots at most */
    int32_t n_slots;            /* slots in use */
    mask_slot *slots;           /* [cap] */
    uint64_t *bits;             /* [cap][words], allocated as slots fill */
    int32_t cap_bits;           /* slots bits has room for */
    int32_t *buckets;           /* [n_buckets] head slot or -1 */
    uint32_t n_buckets;         /* power of two */
    uint64_t tick;
    int32_t *walk;              /* [max_depth + 1] matcher state at each depth of the walk */
    const int32_t *refs;        /* [n_refs] the tokens the grammar references by id (<[id]>), the grammar's */
    size_t n_refs;
    kite_gmask_stats stats;
};

int kite_gmask_new(const kite_gbnf *g, const kite_vocab_index *vi, const kite_tokenizer *t, bool allow_eog,
                   size_t cache_bytes, kite_gmask **out, kite_error *e) {
    *out = NULL;
    kite_gmask *gm = calloc(1, sizeof *gm);
    if (!gm) return kite_fail(e, KITE_ERR_NOMEM, "grammar: out of memory");
    int st = kite_gmatch_new(g, &gm->m, e);
    if (st) {
        free(gm);
        return st;
    }
    gm->vi = vi;
    gm->t = t;
    gm->allow_eog = allow_eog;
    gm->n_refs = kite_gbnf_token_refs(g, &gm->refs);
    gm->words = ((size_t)vi->n_vocab + 63) / 64;
    if (!cache_bytes) cache_bytes = (size_t)32 << 20;
    size_t cap = cache_bytes / (gm->words * 8);
    if (cap < 16) cap = 16;
    if (cap > 65536) cap = 65536;
    gm->cap = (int32_t)cap;
    gm->n_buckets = 16;
    while (gm->n_buckets < 2 * cap) gm->n_buckets *= 2;
    gm->slots = malloc(sizeof *gm->slots * cap);
    gm->buckets = malloc(sizeof *gm->buckets * gm->n_buckets);
    gm->walk = malloc(sizeof *gm->walk * ((size_t)vi->max_depth + 1));
    if (!gm->slots || !gm->buckets || !gm->walk) {
        kite_gmask_free(gm);
        return kite_fail(e, KITE_ERR_NOMEM, "grammar: out of memory");
    }
    for (uint32_t b = 0; b < gm->n_buckets; b++) gm->buckets[b] = -1;
    *out = gm;
    return KITE_OK;
}

void kite_gmask_free(kite_gmask *gm) {
    if (!gm) return;
    kite_gmatch_free(gm->m);
    free(gm->slots);
    free(gm->bits);
    free(gm->buckets);
    free(gm->walk);
    free(gm);
}

kite_gmatch *kite_gmask_matcher(kite_gmask *gm) { return gm->m; }
int32_t kite_gmask_start(kite_gmask *gm) { return kite_gmatch_start(gm->m); }
void kite_gmask_get_stats(const kite_gmask *gm, kite_gmask_stats *out) { *out = gm->stats; }

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static inline void set_bit(uint64_t *bits, int32_t id) { bits[id >> 6] |= (uint64_t)1 << (id & 63); }

/* The state after token id as a token reference (<[id]>) in state, or < 0. */
static int32_t ref_step(kite_gmask *gm, int32_t state, int32_t id) {
    const uint8_t bytes[4] = {0xFF, (uint8_t)(id >> 16), (uint8_t)(id >> 8), (uint8_t)id};
    return kite_gmatch_step_bytes(gm->m, state, bytes, 4);
}

static bool is_ref(const kite_gmask *gm, int32_t id) {
    for (size_t r = 0; r < gm->n_refs; r++)
        if (gm->refs[r] == id) return true;
    return false;
}

/* The trie walk: bits gets every token allowed after state (drop: the previous token makes the next
 * one lose its leading space). Returns the count, or -1 on a matcher limit. */
static int32_t compute_mask(kite_gmask *gm, int32_t state, bool drop, uint64_t *bits) {
    const kite_vocab_index *vi = gm->vi;
    memset(bits, 0, gm->words * sizeof *bits);
    if (state < 0) return 0;
    int32_t count = 0;
    if (gm->allow_eog && kite_gmatch_accepting(gm->m, state))
        for (int32_t i = 0; i < vi->n_eog; i++) set_bit(bits, vi->eog_ids[i]), count++;
    int32_t *walk = gm->walk;
    walk[0] = state;
    const trie_node *nodes = vi->nodes;
    int64_t steps = 0;
    for (uint32_t i = 1; i < vi->n_nodes;) {
        const trie_node *nd = &nodes[i];
        int32_t from = walk[nd->depth - 1];
        if (drop && nd->depth == 1 && nd->byte == ' ') {
            /* The space is not written: its subtree continues from the state itself, and a token that is
             * only a space writes nothing (an empty piece is never allowed). */
            walk[1] = from;
            i++;
            continue;
        }
        if (nd->byte == 0xFF) { /* a token reference's first byte: text may never spell one */
            i = nd->end;
            continue;
        }
        int32_t to = kite_gmatch_step(gm->m, from, nd->byte);
        steps++;
        if (to < 0) {
            if (to == KITE_GSTATE_LIMIT) {
                gm->stats.steps += steps;
                return -1;
            }
            i = nd->end;
            continue;
        }
        walk[nd->depth] = to;
        for (uint32_t k = 0; k < nd->tok_count; k++) set_bit(bits, vi->sorted_ids[nd->tok_start + k]);
        count += nd->tok_count;
        i++;
    }
    gm->stats.steps += steps;
    /* the tokens referenced by id, where their reference may follow */
    for (size_t r = 0; r < gm->n_refs; r++) {
        int32_t id = gm->refs[r];
        if (id >= vi->n_vocab || kite_gmask_bit(bits, id)) continue;
        int32_t to = ref_step(gm, state, id);
        if (to == KITE_GSTATE_LIMIT) return -1;
        if (to >= 0) set_bit(bits, id), count++;
    }
    return count;
}

static uint32_t hash_key(int64_t key) {
    uint64_t h = (uint64_t)key * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(h >> 32);
}

static void unlink_slot(kite_gmask *gm, int32_t s) {
    uint32_t b = hash_key(gm->slots[s].key) & (gm->n_buckets - 1);
    for (int32_t *p = &gm->buckets[b]; *p >= 0; p = &gm->slots[*p].next)
        if (*p == s) {
            *p = gm->slots[s].next;
            return;
        }
}

const uint64_t *kite_gmask_allowed(kite_gmask *gm, int32_t state, int32_t prev, int32_t *n_allowed, kite_error *e) {
    bool drop = kite_tokenizer_drops_space_after(gm->t, prev);
    int64_t key = state < 0 ? -2 : (int64_t)state * 2 + (drop ? 1 : 0);
    uint32_t b = hash_key(key) & (gm->n_buckets - 1);
    gm->tick++;
    for (int32_t s = gm->buckets[b]; s >= 0; s = gm->slots[s].next)
        if (gm->slots[s].key == key) {
            gm->slots[s].tick = gm->tick;
            gm->stats.hits++;
            if (n_allowed) *n_allowed = gm->slots[s].n_allowed;
            return gm->bits + (size_t)s * gm->words;
        }
    int32_t s;
    if (gm->n_slots < gm->cap) {
        s = gm->n_slots;
        if (s >= gm->cap_bits) {
            int32_t grown = gm->cap_bits ? gm->cap_bits * 2 : 16;
            if (grown > gm->cap) grown = gm->cap;
            uint64_t *nb = realloc(gm->bits, sizeof(uint64_t) * gm->words * (size_t)grown);
            if (!nb) {
                kite_fail(e, KITE_ERR_NOMEM, "grammar: out of memory for token masks");
                return NULL;
            }
            gm->bits = nb;
            gm->cap_bits = grown;
        }
        gm->n_slots++;
    } else {
        s = 0;
        for (int32_t i = 1; i < gm->n_slots; i++)
            if (gm->slots[i].tick < gm->slots[s].tick) s = i;
        unlink_slot(gm, s);
    }
    uint64_t *bits = gm->bits + (size_t)s * gm->words;
    double t0 = now_ms();
    int32_t count = compute_mask(gm, state, drop, bits);
    gm->stats.compute_ms += now_ms() - t0;
    gm->stats.computed++;
    if (count < 0) {
        /* The slot is left free (its key unlinked, so it is never found). */
        gm->slots[s] = (mask_slot){.key = -3, .tick = 0, .next = -1};
        const kite_error *me = kite_gmatch_error(gm->m);
        if (me && me->status) *e = *me;
        else kite_fail(e, KITE_ERR_NOMEM, "grammar: the matcher hit a resource limit");
        return NULL;
    }
    gm->slots[s] = (mask_slot){.key = key, .tick = gm->tick, .next = gm->buckets[b], .n_allowed = count};
    gm->buckets[b] = s;
    if (n_allowed) *n_allowed = count;
    return bits;
}

void kite_gmask_apply(const uint64_t *bits, float *logits, int32_t n_vocab) {
    /* Only the refused tokens are visited: one ctz per refused bit, whole words skipped when all pass. */
    int32_t full = n_vocab / 64;
    for (int32_t w = 0; w < full; w++) {
        uint64_t refused = ~bits[w];
        float *row = logits + (size_t)w * 64;
        if (refused == ~(uint64_t)0) {
            for (int i = 0; i < 64; i++) row[i] = -INFINITY;
            continue;
        }
        while (refused) {
            row[__builtin_ctzll(refused)] = -INFINITY;
            refused &= refused - 1;
        }
    }
    for (int32_t i = full * 64; i < n_vocab; i++)
        if (!kite_gmask_bit(bits, i)) logits[i] = -INFINITY;
}

int32_t kite_gmask_advance(kite_gmask *gm, int32_t state, int32_t prev, int32_t id) {
    const kite_vocab_index *vi = gm->vi;
    if (state < 0 || id < 0 || id >= vi->n_vocab) return KITE_GSTATE_DEAD;
    if (gm->n_refs && is_ref(gm, id)) {
        /* referenced: the reference where it may follow, else (a text token) its text */
        int32_t to = ref_step(gm, state, id);
        if (to >= 0 || to == KITE_GSTATE_LIMIT || vi->cls[id] != TOKEN_TEXT) return to;
    }
    if (vi->cls[id] == TOKEN_EOG)
        return gm->allow_eog && kite_gmatch_accepting(gm->m, state) ? KITE_GSTATE_ENDED : KITE_GSTATE_DEAD;
    if (vi->cls[id] != TOKEN_TEXT) return KITE_GSTATE_DEAD;
    char piece[MAX_PIECE];
    int32_t len = kite_tokenizer_piece(gm->t, prev, id, piece, sizeof piece);
    if (len <= 0 || len > MAX_PIECE || memchr(piece, 0xFF, (size_t)len)) return KITE_GSTATE_DEAD;
    return kite_gmatch_step_bytes(gm->m, state, (const uint8_t *)piece, (size_t)len);
}

bool kite_gmask_done(kite_gmask *gm, int32_t state) {
    if (state == KITE_GSTATE_ENDED) return true;
    return state >= 0 && kite_gmatch_accepting(gm->m, state) && !kite_gmatch_can_continue(gm->m, state);
}

/* The longest token whose mid-text piece is a prefix of bytes[0..n), or -1. */
static int32_t longest_token(const kite_vocab_index *vi, const uint8_t *bytes, size_t n, size_t *len) {
    int32_t best = -1;
    uint32_t node = 0;
    for (size_t d = 0; d < n; d++) {
        uint32_t c = node + 1, found = 0;
        while (c < vi->nodes[node].end) {
            if (vi->nodes[c].byte == bytes[d]) {
                found = c;
                break;
            }
            c = vi->nodes[c].end;
        }
        if (!found) break;
        node = found;
        const trie_node *nd = &vi->nodes[node];
        if (nd->tok_count) {
            /* Equal pieces: the highest id, which is the merged token rather than a byte-fallback one. */
            best = vi->sorted_ids[nd->tok_start + nd->tok_count - 1];
            *len = d + 1;
        }
    }
    return best;
}

int32_t kite_gmask_forced_tokens(kite_gmask *gm, int32_t state, int32_t prev, int32_t *ids, int32_t cap) {
    enum { MAX_FORCED = 128 };
    uint8_t forced[MAX_FORCED];
    size_t n = 0;
    int32_t s = state;
    while (n < MAX_FORCED && s >= 0 && !kite_gmatch_accepting(gm->m, s)) {
        uint64_t bits[4];
        kite_gmatch_allowed_bytes(gm->m, s, bits);
        int count = __builtin_popcountll(bits[0]) + __builtin_popcountll(bits[1]) + __builtin_popcountll(bits[2]) +
                    __builtin_popcountll(bits[3]);
        if (count != 1) break;
        int byte = 0;
        for (int w = 0; w < 4; w++)
            if (bits[w]) byte = w * 64 + __builtin_ctzll(bits[w]);
        if (byte == 0xFF) {
            /* a token reference: drafted as that token when it comes first and its id is forced too */
            if (n > 0 || cap <= 0) break;
            int32_t id = 0, t = kite_gmatch_step(gm->m, s, 0xFF);
            for (int b = 0; b < 3 && t >= 0; b++) {
                uint64_t nb[4];
                kite_gmatch_allowed_bytes(gm->m, t, nb);
                if (__builtin_popcountll(nb[0]) + __builtin_popcountll(nb[1]) + __builtin_popcountll(nb[2]) +
                        __builtin_popcountll(nb[3]) != 1)
                    return 0;
                int v = 0;
                for (int w = 0; w < 4; w++)
                    if (nb[w]) v = w * 64 + __builtin_ctzll(nb[w]);
                id = id << 8 | v;
                t = kite_gmatch_step(gm->m, t, (uint8_t)v);
            }
            if (t < 0 || id >= gm->vi->n_vocab || gm->vi->cls[id] == TOKEN_EOG || kite_gmask_advance(gm, state, prev, id) < 0) return 0;
            ids[0] = id;
            return 1;
        }
        forced[n++] = (uint8_t)byte;
        s = kite_gmatch_step(gm->m, s, (uint8_t)byte);
    }
    if (n == 0 || cap <= 0) return 0;
    /* The tokenizer's own encoding, kept while each token is allowed in turn. */
    int32_t k = 0;
    int32_t *enc = NULL;
    size_t n_enc = 0;
    kite_error ignored = {0};
    if (!kite_tokenizer_encode(gm->t, (const char *)forced, n, false, false, &enc, &n_enc, &ignored)) {
        int32_t st = state, p = prev;
        for (size_t i = 0; i < n_enc && k < cap; i++) {
            int32_t next = kite_gmask_advance(gm, st, p, enc[i]);
            if (next < 0) break;
            ids[k++] = enc[i];
            st = next;
            p = enc[i];
        }
    }
    free(enc);
    if (k > 0) return k;
    /* Longest match over the trie, for encodings that do not fit (a dummy-prefix space). */
    size_t at = 0;
    int32_t st = state, p = prev;
    while (at < n && k < cap) {
        size_t len = 0;
        int32_t id = longest_token(gm->vi, forced + at, n - at, &len);
        if (id < 0) break;
        if (kite_tokenizer_piece(gm->t, p, id, NULL, 0) != (int32_t)len) break; /* a dropped space: stop */
        int32_t next = kite_gmask_advance(gm, st, p, id);
        if (next < 0) break;
        ids[k++] = id;
        st = next;
        p = id;
        at += len;
    }
    return k;
}
