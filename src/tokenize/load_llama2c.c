/* llama2.c tokenizer .bin: int32 max_token_len, then for each id: f32 score, int32 len, len bytes of text.
 * Spaces are written as ' ' (SentencePiece's "▁" in the original model) and BOS / EOS as "\n<s>\n" /
 * "\n</s>\n"; they are brought to the GGUF spelling so both sources tokenize identically. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tokenize/tokenizer_internal.h"

static int32_t read_i32(const unsigned char *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

int kite_tokenizer_from_llama2c(kite_tokenizer **out, const void *data, size_t size, int32_t n_vocab, kite_error *e) {
    if (!out) return kite_fail(e, KITE_ERR_INVALID_ARG, "llama2.c tokenizer: no output");
    *out = NULL;
    const unsigned char *p = data;
    if (!p || size < 4) return kite_fail(e, KITE_ERR_FORMAT, "llama2.c tokenizer: file of %zu bytes has no header", size);
    int32_t max_len = read_i32(p);
    if (max_len < 0) return kite_fail(e, KITE_ERR_FORMAT, "llama2.c tokenizer: max_token_len %d is negative", max_len);

    /* first pass: count and check entries */
    size_t off = 4, count = 0, escaped_bytes = 0;
    while (off < size && (n_vocab <= 0 || count < (size_t)n_vocab)) {
        if (size - off < 8)
            return kite_fail(e, KITE_ERR_FORMAT, "llama2.c tokenizer: token %zu header truncated at byte %zu", count, off);
        float score;
        memcpy(&score, p + off, 4);
        int32_t len = read_i32(p + off + 4);
        if (isnan(score)) return kite_fail(e, KITE_ERR_FORMAT, "llama2.c tokenizer: token %zu score is NaN", count);
        if (len < 0 || (size_t)len > size - off - 8)
            return kite_fail(e, KITE_ERR_FORMAT, "llama2.c tokenizer: token %zu length %d runs past the end of the file",
                             count, len);
        for (int32_t k = 0; k < len; k++) escaped_bytes += p[off + 8 + k] == ' ' ? 3 : 1;
        off += 8 + (size_t)len;
        count++;
    }
    if (n_vocab > 0 && count < (size_t)n_vocab)
        return kite_fail(e, KITE_ERR_FORMAT, "llama2.c tokenizer: has %zu tokens, the model needs %d", count, n_vocab);
    if (count == 0) return kite_fail(e, KITE_ERR_FORMAT, "llama2.c tokenizer: no tokens");
    if (count > INT32_MAX) return kite_fail(e, KITE_ERR_FORMAT, "llama2.c tokenizer: too many tokens");

    kite_tokenizer *t;
    int rc = kite_tokenizer_alloc(&t, (int32_t)count, e);
    if (rc) return rc;
    kite_span *texts = malloc(count * sizeof *texts);
    char *spelled = malloc(escaped_bytes + 1);
    if (!texts || !spelled) {
        rc = kite_fail(e, KITE_ERR_NOMEM, "llama2.c tokenizer: out of memory");
        goto done;
    }
    off = 4;
    size_t w = 0;
    for (size_t id = 0; id < count; id++) {
        memcpy(&t->scores[id], p + off, 4);
        int32_t len = read_i32(p + off + 4);
        const unsigned char *s = p + off + 8;
        off += 8 + (size_t)len;
        if ((id == 1 || id == 2) && len >= 4 && s[0] == '\n' && s[len - 1] == '\n' && s[1] == '<') {
            s++; /* "\n<s>\n" -> "<s>" */
            len -= 2;
        }
        texts[id].ptr = spelled + w;
        for (int32_t k = 0; k < len; k++) {
            if (s[k] == ' ') {
                memcpy(spelled + w, "\xE2\x96\x81", 3);
                w += 3;
            } else {
                spelled[w++] = (char)s[k];
            }
        }
        texts[id].len = (size_t)(spelled + w - texts[id].ptr);
    }
    rc = kite_tokenizer_set_texts(t, texts, e);
    if (rc) goto done;
    t->kind = KITE_TOKENIZER_SPM;
    t->algo = KITE_ALGO_SPM_SCORES;
    t->space_prefix = KITE_PREFIX_ALWAYS;
    t->escape_spaces = true;
    t->add_bos = true;
    t->types[0] = KITE_TOKEN_UNKNOWN;
    t->unk = 0;
    if (count > 1) t->bos = 1, t->types[1] = KITE_TOKEN_CONTROL;
    if (count > 2) t->eos = 2, t->types[2] = KITE_TOKEN_CONTROL;
    rc = kite_tokenizer_finish(t, NULL, 0, NULL, e);
done:
    free(texts);
    free(spelled);
    if (rc) {
        kite_tokenizer_free(t);
        return rc;
    }
    *out = t;
    return KITE_OK;
}
