/* BPE by merge rank, as HF tokenizers' BPE model and llama.cpp's BPE tokenizer do it: start from one
 * symbol per byte (byte-level vocabularies) or per character (SentencePiece-style vocabularies, with
 * byte fallback or <unk>), then repeatedly apply the adjacent pair with the lowest merge rank (leftmost
 * first on ties). A binary heap keeps each word O(n log n). */
#include <string.h>

#include "tokenize/merge_queue.h"

int kite_ids_push(kite_ids *ids, int32_t id, kite_error *e) {
    if (ids->n == ids->cap) {
        void *p = ids->v;
        int rc = kite_scratch_reserve(&p, &ids->cap, ids->n + 1, sizeof(int32_t), e);
        if (rc) return rc;
        ids->v = p;
    }
    ids->v[ids->n++] = id;
    return KITE_OK;
}

void kite_merge_scratch_free(kite_merge_scratch *s) {
    free(s->syms);
    free(s->heap);
    free(s->buf);
    memset(s, 0, sizeof *s);
}

static int bpe_try_bigram(const kite_tokenizer *t, kite_symbol *syms, kite_heap *h, int32_t left, int32_t right,
                          kite_error *e) {
    if (left < 0 || right < 0) return KITE_OK;
    int32_t rank, merged;
    if (!kite_merges_find(&t->merges, syms[left].id, syms[right].id, &rank, &merged)) return KITE_OK;
    kite_bigram b = {-(double)rank, left, right, syms[left].len + syms[right].len, merged};
    return kite_heap_push(h, b, e);
}

/* Byte-level: the word spelled in GPT-2 characters, for the whole-word lookup of ignore_merges. */
static int bytelevel_spelling(const kite_tokenizer *t, const char *word, size_t len, kite_merge_scratch *s,
                              size_t *out_len, kite_error *e) {
    void *buf = s->buf;
    int rc = kite_scratch_reserve(&buf, &s->buf_cap, 2 * len, 1, e);
    if (rc) return rc;
    s->buf = buf;
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char b = (unsigned char)word[i];
        memcpy(s->buf + n, t->bytelevel_utf8[b], t->bytelevel_len[b]);
        n += t->bytelevel_len[b];
    }
    *out_len = n;
    return KITE_OK;
}

/* Initial symbols of a SentencePiece-style word: one per character; characters outside the vocabulary
 * become their byte tokens (if all exist) or <unk>, fused with a preceding <unk> when fuse_unk is set. */
static int32_t chars_to_symbols(const kite_tokenizer *t, const char *word, size_t len, kite_symbol *syms) {
    int32_t n = 0;
    bool prev_unk = false;
    for (size_t off = 0; off < len;) {
        size_t clen = kite_utf8_len((unsigned char)word[off]);
        if (clen > len - off) clen = len - off;
        int32_t id = kite_vocab_find(t, word + off, clen);
        if (id >= 0) {
            syms[n++] = (kite_symbol){0, 0, (uint32_t)off, (uint32_t)clen, id};
            prev_unk = false;
        } else {
            bool all_bytes = t->byte_fallback;
            for (size_t k = 0; k < clen && all_bytes; k++) all_bytes = t->byte_token[(unsigned char)word[off + k]] >= 0;
            if (all_bytes) {
                for (size_t k = 0; k < clen; k++)
                    syms[n++] = (kite_symbol){0, 0, (uint32_t)(off + k), 1, t->byte_token[(unsigned char)word[off + k]]};
                prev_unk = false;
            } else if (t->unk >= 0) {
                if (t->fuse_unk && prev_unk) {
                    syms[n - 1].len += (uint32_t)clen;
                } else {
                    syms[n++] = (kite_symbol){0, 0, (uint32_t)off, (uint32_t)clen, t->unk};
                }
                prev_unk = true;
            }
            /* no byte tokens and no <unk>: the character is dropped (HF would refuse the text) */
        }
        off += clen;
    }
    return n;
}

int kite_bpe_encode_word(const kite_tokenizer *t, const char *word, size_t len, kite_merge_scratch *s, kite_ids *out,
                         kite_error *e) {
    if (len == 0) return KITE_OK;
    if (len > UINT32_MAX / 4) return kite_fail(e, KITE_ERR_INVALID_ARG, "tokenizer: word of %zu bytes is too long", len);
    bool bytelevel = t->kind == KITE_TOKENIZER_BPE;
    int rc;
    if (t->ignore_merges) {
        int32_t whole;
        if (bytelevel) {
            size_t n;
            rc = bytelevel_spelling(t, word, len, s, &n, e);
            if (rc) return rc;
            whole = kite_vocab_find(t, s->buf, n);
        } else {
            whole = kite_vocab_find(t, word, len);
        }
        if (whole >= 0) return kite_ids_push(out, whole, e);
    }
    rc = kite_scratch_reserve(&s->syms, &s->syms_cap, len, sizeof(kite_symbol), e);
    if (rc) return rc;
    kite_symbol *syms = s->syms;
    int32_t n;
    if (bytelevel) {
        for (size_t i = 0; i < len; i++)
            syms[i] = (kite_symbol){0, 0, (uint32_t)i, 1, t->byte_token[(unsigned char)word[i]]};
        n = (int32_t)len;
    } else {
        n = chars_to_symbols(t, word, len, syms);
    }
    for (int32_t i = 0; i < n; i++) {
        syms[i].prev = i - 1;
        syms[i].next = i + 1 < n ? i + 1 : -1;
    }
    kite_heap h = {s->heap, 0, s};
    for (int32_t i = 1; i < n; i++) {
        rc = bpe_try_bigram(t, syms, &h, i - 1, i, e);
        if (rc) return rc;
    }
    while (h.n > 0) {
        kite_bigram b = kite_heap_pop(&h);
        kite_symbol *l = &syms[b.left], *r = &syms[b.right];
        if (l->len == 0 || r->len == 0 || l->len + r->len != b.size) continue; /* stale */
        l->len += r->len;
        l->id = b.id;
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0) syms[r->next].prev = b.left;
        rc = bpe_try_bigram(t, syms, &h, l->prev, b.left, e);
        if (!rc) rc = bpe_try_bigram(t, syms, &h, b.left, l->next, e);
        if (rc) return rc;
    }
    for (int32_t i = 0; n > 0 && i != -1; i = syms[i].next) {
        int32_t id = syms[i].id >= 0 ? syms[i].id : t->unk;
        if (id < 0) continue; /* a byte missing from a broken byte-level vocabulary */
        rc = kite_ids_push(out, id, e);
        if (rc) return rc;
    }
    return KITE_OK;
}
