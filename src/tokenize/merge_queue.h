/* The symbol chain and priority queue shared by the SPM and BPE encoders: symbols are spans of a word
 * linked left to right; candidate merges of neighbours wait in a binary heap ordered by key (highest
 * first), then by left position (leftmost first), which is the order llama.cpp and HF tokenizers use. */
#ifndef KITE_TOKENIZE_MERGE_QUEUE_H
#define KITE_TOKENIZE_MERGE_QUEUE_H

#include <stdlib.h>

#include "tokenize/tokenizer_internal.h"

typedef struct kite_symbol {
    int32_t prev, next; /* neighbours in the chain, -1 at the ends */
    uint32_t start;     /* byte offset of the span in the word */
    uint32_t len;       /* span length in bytes; 0 once merged into its left neighbour */
    int32_t id;         /* token id of the span, -1 if it is no token */
} kite_symbol;

typedef struct kite_bigram {
    double key;      /* SPM: the merged token's score; BPE: -rank */
    int32_t left;    /* symbol indices */
    int32_t right;
    uint32_t size;   /* left.len + right.len when queued: a mismatch later means the bigram is stale */
    int32_t id;      /* token id of the merged span */
} kite_bigram;

static inline bool kite_bigram_before(const kite_bigram *a, const kite_bigram *b) {
    return a->key > b->key || (a->key == b->key && a->left < b->left);
}

static inline int kite_scratch_reserve(void **buf, size_t *cap, size_t need, size_t elem, kite_error *e) {
    if (need <= *cap) return KITE_OK;
    size_t n = *cap ? *cap : 64;
    while (n < need) {
        if (n > SIZE_MAX / 2 / elem) return kite_fail(e, KITE_ERR_NOMEM, "tokenizer: text too long");
        n *= 2;
    }
    void *p = realloc(*buf, n * elem);
    if (!p) return kite_fail(e, KITE_ERR_NOMEM, "tokenizer: out of memory (%zu bytes)", n * elem);
    *buf = p;
    *cap = n;
    return KITE_OK;
}

typedef struct kite_heap {
    kite_bigram *v;
    size_t n;
    kite_merge_scratch *s;
} kite_heap;

static inline int kite_heap_push(kite_heap *h, kite_bigram b, kite_error *e) {
    if (h->n + 1 > h->s->heap_cap) {
        int rc = kite_scratch_reserve(&h->s->heap, &h->s->heap_cap, h->n + 1, sizeof(kite_bigram), e);
        if (rc) return rc;
        h->v = h->s->heap;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!kite_bigram_before(&b, &h->v[parent])) break;
        h->v[i] = h->v[parent];
        i = parent;
    }
    h->v[i] = b;
    return KITE_OK;
}

static inline kite_bigram kite_heap_pop(kite_heap *h) {
    kite_bigram top = h->v[0];
    kite_bigram last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && kite_bigram_before(&h->v[c + 1], &h->v[c])) c++;
        if (!kite_bigram_before(&h->v[c], &last)) break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n > 0) h->v[i] = last;
    return top;
}

#endif
