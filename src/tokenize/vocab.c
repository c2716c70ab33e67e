/* Vocabulary hash tables: token text -> id, and BPE merge pairs -> (rank, merged id). Open addressing
 * with linear probing, sized to at most half full, so loading 280k merges is a few hash lookups each. */
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "tokenize/tokenizer_internal.h"

uint64_t kite_hash_bytes(const void *data, size_t len) {
    const unsigned char *p = data;
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (len * 0x100000001B3ULL);
    while (len >= 8) {
        uint64_t k;
        memcpy(&k, p, 8);
        h = (h ^ kite_hash_mix64(k)) * 0x9FB21C651E98DF25ULL;
        p += 8;
        len -= 8;
    }
    uint64_t tail = 0;
    for (size_t i = 0; i < len; i++) tail |= (uint64_t)p[i] << (8 * i);
    h = (h ^ kite_hash_mix64(tail ^ 0x5bd1e995)) * 0x9FB21C651E98DF25ULL;
    return kite_hash_mix64(h);
}

/* Smallest power of two >= 2 * n (and >= 16); 0 if it would not fit in 32 bits. */
static uint32_t table_capacity(size_t n) {
    uint64_t cap = 16;
    while (cap < 2 * (uint64_t)n) cap <<= 1;
    return cap > (1ULL << 31) ? 0 : (uint32_t)cap;
}

int kite_vocab_build_map(kite_tokenizer *t, kite_error *e) {
    uint32_t cap = table_capacity((size_t)t->n_vocab);
    if (!cap) return kite_fail(e, KITE_ERR_FORMAT, "tokenizer: vocabulary of %d tokens is too large", t->n_vocab);
    free(t->vocab_map.slots);
    t->vocab_map.slots = malloc((size_t)cap * sizeof(int32_t));
    if (!t->vocab_map.slots) return kite_fail(e, KITE_ERR_NOMEM, "tokenizer: out of memory for the vocabulary map");
    memset(t->vocab_map.slots, 0xFF, (size_t)cap * sizeof(int32_t));
    t->vocab_map.mask = cap - 1;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        kite_span s = kite_token_text(t, id);
        uint32_t i = (uint32_t)kite_hash_bytes(s.ptr, s.len) & t->vocab_map.mask;
        for (;;) {
            int32_t other = t->vocab_map.slots[i];
            if (other < 0) {
                t->vocab_map.slots[i] = id;
                break;
            }
            kite_span o = kite_token_text(t, other);
            if (o.len == s.len && memcmp(o.ptr, s.ptr, s.len) == 0) {
                t->vocab_map.slots[i] = id; /* a later duplicate wins, as llama.cpp's token_to_id[word] = i */
                break;
            }
            i = (i + 1) & t->vocab_map.mask;
        }
    }
    return KITE_OK;
}

int32_t kite_vocab_find(const kite_tokenizer *t, const char *s, size_t len) {
    if (!t->vocab_map.slots) return -1;
    uint32_t i = (uint32_t)kite_hash_bytes(s, len) & t->vocab_map.mask;
    for (;;) {
        int32_t id = t->vocab_map.slots[i];
        if (id < 0) return -1;
        kite_span o = kite_token_text(t, id);
        if (o.len == len && memcmp(o.ptr, s, len) == 0) return id;
        i = (i + 1) & t->vocab_map.mask;
    }
}

int kite_merges_init(kite_merge_map *m, size_t expected, kite_error *e) {
    uint32_t cap = table_capacity(expected);
    if (!cap) return kite_fail(e, KITE_ERR_FORMAT, "tokenizer: %zu merges is too many", expected);
    m->keys = malloc((size_t)cap * sizeof(uint64_t));
    m->ranks = malloc((size_t)cap * sizeof(int32_t));
    m->results = malloc((size_t)cap * sizeof(int32_t));
    if (!m->keys || !m->ranks || !m->results) {
        kite_merges_free(m);
        return kite_fail(e, KITE_ERR_NOMEM, "tokenizer: out of memory for %zu merges", expected);
    }
    memset(m->keys, 0xFF, (size_t)cap * sizeof(uint64_t));
    m->mask = cap - 1;
    m->count = 0;
    return KITE_OK;
}

static int merges_grow(kite_merge_map *m, kite_error *e) {
    kite_merge_map bigger = {0};
    int rc = kite_merges_init(&bigger, (size_t)(m->mask + 1), e);
    if (rc) return rc;
    for (uint32_t i = 0; i <= m->mask; i++) {
        if (m->keys[i] == UINT64_MAX) continue;
        uint32_t j = (uint32_t)kite_hash_mix64(m->keys[i]) & bigger.mask;
        while (bigger.keys[j] != UINT64_MAX) j = (j + 1) & bigger.mask;
        bigger.keys[j] = m->keys[i];
        bigger.ranks[j] = m->ranks[i];
        bigger.results[j] = m->results[i];
    }
    bigger.count = m->count;
    kite_merges_free(m);
    *m = bigger;
    return KITE_OK;
}

int kite_merges_add(kite_merge_map *m, int32_t left, int32_t right, int32_t rank, int32_t result, kite_error *e) {
    if ((uint64_t)(m->count + 1) * 2 > (uint64_t)m->mask + 1) {
        int rc = merges_grow(m, e);
        if (rc) return rc;
    }
    uint64_t key = ((uint64_t)(uint32_t)left << 32) | (uint32_t)right;
    uint32_t i = (uint32_t)kite_hash_mix64(key) & m->mask;
    while (m->keys[i] != UINT64_MAX) {
        if (m->keys[i] == key) return KITE_OK; /* the first rank of a pair wins */
        i = (i + 1) & m->mask;
    }
    m->keys[i] = key;
    m->ranks[i] = rank;
    m->results[i] = result;
    m->count++;
    return KITE_OK;
}

bool kite_merges_find(const kite_merge_map *m, int32_t left, int32_t right, int32_t *rank, int32_t *result) {
    if (!m->keys || left < 0 || right < 0) return false;
    uint64_t key = ((uint64_t)(uint32_t)left << 32) | (uint32_t)right;
    uint32_t i = (uint32_t)kite_hash_mix64(key) & m->mask;
    for (;;) {
        uint64_t k = m->keys[i];
        if (k == UINT64_MAX) return false;
        if (k == key) {
            *rank = m->ranks[i];
            *result = m->results[i];
            return true;
        }
        i = (i + 1) & m->mask;
    }
}

void kite_merges_free(kite_merge_map *m) {
    free(m->keys);
    free(m->ranks);
    free(m->results);
    m->keys = NULL;
    m->ranks = NULL;
    m->results = NULL;
    m->mask = 0;
    m->count = 0;
}

int kite_merges_add_text(kite_tokenizer *t, const char *left, size_t left_len, const char *right, size_t right_len,
                         int32_t rank, size_t *skipped, kite_error *e) {
    int32_t l = kite_vocab_find(t, left, left_len);
    int32_t r = kite_vocab_find(t, right, right_len);
    int32_t merged = -1;
    if (l >= 0 && r >= 0) {
        char stack_buf[256];
        size_t n = left_len + right_len;
        char *buf = n <= sizeof stack_buf ? stack_buf : malloc(n);
        if (!buf) return kite_fail(e, KITE_ERR_NOMEM, "tokenizer: out of memory reading merges");
        memcpy(buf, left, left_len);
        memcpy(buf + left_len, right, right_len);
        merged = kite_vocab_find(t, buf, n);
        if (buf != stack_buf) free(buf);
    }
    if (merged < 0) {
        (*skipped)++;
        return KITE_OK;
    }
    return kite_merges_add(&t->merges, l, r, rank, merged, e);
}
