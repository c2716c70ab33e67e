/* SentencePiece-style BPE as llama.cpp's SPM tokenizer does it: start from single characters, then
 * repeatedly merge the adjacent pair whose concatenation is the vocabulary token with the highest score
 * (leftmost first on ties); characters that never form a token fall back to their <0xNN> byte tokens.
 * The text arrives already escaped ("▁" for spaces, dummy prefix included). O(n log n) in its length. */
#include "tokenize/merge_queue.h"

static int spm_try_bigram(const kite_tokenizer *t, const char *text, kite_symbol *syms, kite_heap *h, int32_t left,
                          int32_t right, kite_error *e) {
    if (left < 0 || right < 0) return KITE_OK;
    uint32_t size = syms[left].len + syms[right].len;
    int32_t id = kite_vocab_find(t, text + syms[left].start, size);
    if (id < 0) return KITE_OK;
    kite_bigram b = {(double)t->scores[id], left, right, size, id};
    return kite_heap_push(h, b, e);
}

static int spm_emit(const kite_tokenizer *t, const char *text, const kite_symbol *sym, kite_ids *out,
                    kite_error *e) {
    int32_t id = kite_vocab_find(t, text + sym->start, sym->len);
    if (id >= 0) return kite_ids_push(out, id, e);
    /* Not a token: one byte token per byte (llama.cpp's resegment falls back the same way). */
    for (uint32_t k = 0; k < sym->len; k++) {
        int32_t b = t->byte_token[(unsigned char)text[sym->start + k]];
        if (b < 0) b = t->unk;
        if (b < 0) continue;
        int rc = kite_ids_push(out, b, e);
        if (rc) return rc;
    }
    return KITE_OK;
}

int kite_spm_encode(const kite_tokenizer *t, const char *text, size_t len, kite_merge_scratch *s, kite_ids *out,
                    kite_error *e) {
    if (len == 0) return KITE_OK;
    if (len > UINT32_MAX / 2) return kite_fail(e, KITE_ERR_INVALID_ARG, "tokenizer: text of %zu bytes is too long", len);
    int rc = kite_scratch_reserve(&s->syms, &s->syms_cap, len, sizeof(kite_symbol), e);
    if (rc) return rc;
    kite_symbol *syms = s->syms;
    int32_t n = 0;
    for (size_t off = 0; off < len;) {
        size_t clen = kite_utf8_len((unsigned char)text[off]);
        if (clen > len - off) clen = len - off;
        syms[n] = (kite_symbol){n - 1, off + clen == len ? -1 : n + 1, (uint32_t)off, (uint32_t)clen, -1};
        off += clen;
        n++;
    }
    kite_heap h = {s->heap, 0, s};
    for (int32_t i = 1; i < n; i++) {
        rc = spm_try_bigram(t, text, syms, &h, i - 1, i, e);
        if (rc) return rc;
    }
    while (h.n > 0) {
        kite_bigram b = kite_heap_pop(&h);
        kite_symbol *l = &syms[b.left], *r = &syms[b.right];
        if (l->len == 0 || r->len == 0 || l->len + r->len != b.size) continue; /* stale */
        l->len += r->len;
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0) syms[r->next].prev = b.left;
        rc = spm_try_bigram(t, text, syms, &h, l->prev, b.left, e);
        if (!rc) rc = spm_try_bigram(t, text, syms, &h, b.left, l->next, e);
        if (rc) return rc;
    }
    for (int32_t i = 0; i != -1; i = syms[i].next) {
        rc = spm_emit(t, text, &syms[i], out, e);
        if (rc) return rc;
    }
    return KITE_OK;
}
