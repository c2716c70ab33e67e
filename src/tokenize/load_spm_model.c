/* SentencePiece ModelProto (.model, protobuf): the pieces (text, score, type), the trainer's model type,
 * byte fallback and special ids, the normalizer's name and add_dummy_prefix. Only BPE models with the
 * identity normalizer are taken (Llama-2's tokenizer.model, llama2.c's trained tok*.model): they tokenize
 * as their GGUF conversion does (SPM scores, byte fallback). The parser reads two fixed levels of
 * messages (no recursion) and checks every length against the bytes left. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tokenize/tokenizer_internal.h"

/* A byte range being read; at is the offset from the start of the file (for messages). */
typedef struct pb_reader {
    const unsigned char *p;
    size_t at, end; /* offsets into p: [at, end) is left to read */
} pb_reader;

/* Reads a varint (at most 10 bytes). False when truncated or overlong. */
static bool pb_varint(pb_reader *r, uint64_t *out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (r->at >= r->end) return false;
        unsigned char c = r->p[r->at++];
        if (shift == 63 && c > 1) return false; /* more than 64 bits */
        v |= (uint64_t)(c & 0x7F) << shift;
        if (c < 0x80) {
            *out = v;
            return true;
        }
    }
    return false;
}

typedef struct pb_field {
    uint32_t number;
    uint32_t wire;          /* 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32 */
    uint64_t value;         /* varint, or the fixed32 / fixed64 bits */
    size_t data, len;       /* wire 2: the payload's offset and length */
} pb_field;

/* The next field of the message r reads. 0 at the end, 1 with *f set, -1 on malformed input (e says where). */
static int pb_next(pb_reader *r, pb_field *f, const char *what, kite_error *e) {
    if (r->at >= r->end) return 0;
    size_t start = r->at;
    uint64_t key;
    if (!pb_varint(r, &key)) return kite_fail(e, KITE_ERR_FORMAT, "sentencepiece model: %s: bad field key at byte %zu", what, start), -1;
    f->number = (uint32_t)(key >> 3);
    f->wire = (uint32_t)(key & 7);
    if (f->number == 0 || key >> 32)
        return kite_fail(e, KITE_ERR_FORMAT, "sentencepiece model: %s: bad field number at byte %zu", what, start), -1;
    switch (f->wire) {
    case 0:
        if (!pb_varint(r, &f->value))
            return kite_fail(e, KITE_ERR_FORMAT, "sentencepiece model: %s: truncated varint at byte %zu", what, r->at), -1;
        return 1;
    case 1:
    case 5: {
        size_t n = f->wire == 1 ? 8 : 4;
        if (r->end - r->at < n)
            return kite_fail(e, KITE_ERR_FORMAT, "sentencepiece model: %s: truncated field at byte %zu", what, r->at), -1;
        f->value = 0;
        for (size_t i = 0; i < n; i++) f->value |= (uint64_t)r->p[r->at + i] << (8 * i);
        r->at += n;
        return 1;
    }
    case 2: {
        uint64_t len;
        if (!pb_varint(r, &len) || len > r->end - r->at)
            return kite_fail(e, KITE_ERR_FORMAT, "sentencepiece model: %s: field %u at byte %zu runs past its message", what,
                             f->number, start),
                   -1;
        f->data = r->at;
        f->len = (size_t)len;
        r->at += (size_t)len;
        return 1;
    }
    default:
        return kite_fail(e, KITE_ERR_FORMAT, "sentencepiece model: %s: wire type %u at byte %zu is not supported", what, f->wire,
                         start),
               -1;
    }
}

static float bits_to_float(uint64_t bits) {
    uint32_t b = (uint32_t)bits;
    float v;
    memcpy(&v, &b, 4);
    return v;
}

/* SentencePiece's piece types (ModelProto.SentencePiece.Type) are numbered as GGUF's token types. */
enum { SP_NORMAL = 1, SP_BYTE = 6 };
enum { SP_MODEL_UNIGRAM = 1, SP_MODEL_BPE = 2 };
enum { SP_MAX_PIECES = 1 << 22 };

int kite_tokenizer_from_spm_model(kite_tokenizer **out, const void *data, size_t size, kite_error *e) {
    if (!out) return kite_fail(e, KITE_ERR_INVALID_ARG, "sentencepiece model: no output");
    *out = NULL;
    if (!data || size == 0) return kite_fail(e, KITE_ERR_FORMAT, "sentencepiece model: the file is empty");
    /* First pass: count the pieces and read the trainer and normalizer specs. */
    pb_reader top = {data, 0, size};
    pb_field f;
    int more;
    size_t n_pieces = 0;
    int64_t model_type = SP_MODEL_UNIGRAM; /* the proto's default */
    int64_t ids[3] = {0, 1, 2};           /* unk, bos, eos: the proto's defaults */
    bool add_dummy_prefix = true;
    char normalizer[32] = "";
    bool have_trainer = false;
    while ((more = pb_next(&top, &f, "model", e)) == 1) {
        if (f.number == 1 && f.wire == 2) {
            if (++n_pieces > SP_MAX_PIECES) return kite_fail(e, KITE_ERR_FORMAT, "sentencepiece model: more than %d pieces", SP_MAX_PIECES);
        } else if (f.number == 2 && f.wire == 2) {
            have_trainer = true;
            pb_reader tr = {data, f.data, f.data + f.len};
            pb_field g;
            int m;
            while ((m = pb_next(&tr, &g, "trainer_spec", e)) == 1) {
                if (g.wire != 0) continue;
                if (g.number == 3) model_type = (int64_t)g.value;
                else if (g.number >= 40 && g.number <= 42) ids[g.number - 40] = (int32_t)(uint32_t)g.value; /* int32, -1 as 2^64-1 */
            }
            if (m < 0) return e->status;
        } else if (f.number == 3 && f.wire == 2) {
            pb_reader nr = {data, f.data, f.data + f.len};
            pb_field g;
            int m;
            while ((m = pb_next(&nr, &g, "normalizer_spec", e)) == 1) {
                if (g.number == 1 && g.wire == 2) {
                    size_t n = g.len < sizeof normalizer - 1 ? g.len : sizeof normalizer - 1;
                    memcpy(normalizer, (const char *)data + g.data, n);
                    normalizer[n] = 0;
                } else if (g.number == 3 && g.wire == 0) {
                    add_dummy_prefix = g.value != 0;
                }
            }
            if (m < 0) return e->status;
        }
    }
    if (more < 0) return e->status;
    if (n_pieces == 0) return kite_fail(e, KITE_ERR_FORMAT, "sentencepiece model: no pieces (is this a SentencePiece .model file?)");
    if (!have_trainer) return kite_fail(e, KITE_ERR_FORMAT, "sentencepiece model: no trainer_spec (is this a SentencePiece .model file?)");
    if (model_type != SP_MODEL_BPE)
        return kite_fail(e, KITE_ERR_UNSUPPORTED, "sentencepiece model: model type %lld is not supported (only BPE, type 2%s)",
                         (long long)model_type, model_type == SP_MODEL_UNIGRAM ? "; this is a unigram model" : "");
    if (normalizer[0] && strcmp(normalizer, "identity"))
        return kite_fail(e, KITE_ERR_UNSUPPORTED, "sentencepiece model: normalizer '%s' is not supported (only identity)", normalizer);

    kite_tokenizer *t;
    int rc = kite_tokenizer_alloc(&t, (int32_t)n_pieces, e);
    if (rc) return rc;
    kite_span *texts = malloc(n_pieces * sizeof *texts);
    if (!texts) {
        kite_tokenizer_free(t);
        return kite_fail(e, KITE_ERR_NOMEM, "sentencepiece model: out of memory for %zu pieces", n_pieces);
    }
    /* Second pass: the pieces. */
    top = (pb_reader){data, 0, size};
    size_t id = 0;
    while (!rc && (more = pb_next(&top, &f, "model", e)) == 1) {
        if (f.number != 1 || f.wire != 2) continue;
        if (id >= n_pieces) break; /* cannot happen: the first pass counted these very fields */
        size_t piece_at = f.data;
        pb_reader pr = {data, f.data, f.data + f.len};
        pb_field g;
        int m;
        bool have_text = false;
        texts[id] = (kite_span){NULL, 0};
        t->scores[id] = 0;
        t->types[id] = SP_NORMAL;
        while ((m = pb_next(&pr, &g, "piece", e)) == 1) {
            if (g.number == 1 && g.wire == 2) {
                texts[id] = (kite_span){(const char *)data + g.data, g.len};
                have_text = true;
            } else if (g.number == 2 && g.wire == 5) {
                t->scores[id] = bits_to_float(g.value);
            } else if (g.number == 3 && g.wire == 0) {
                t->types[id] = g.value >= KITE_TOKEN_NORMAL && g.value <= KITE_TOKEN_BYTE ? (uint8_t)g.value : KITE_TOKEN_UNDEFINED;
            }
        }
        if (m < 0) rc = e->status;
        else if (!have_text) rc = kite_fail(e, KITE_ERR_FORMAT, "sentencepiece model: piece %zu (byte %zu) has no text", id, piece_at);
        else if (isnan(t->scores[id])) rc = kite_fail(e, KITE_ERR_FORMAT, "sentencepiece model: piece %zu (byte %zu) has a NaN score", id, piece_at);
        else if (kite_utf8_validate(texts[id].ptr, texts[id].len) != texts[id].len)
            rc = kite_fail(e, KITE_ERR_FORMAT, "sentencepiece model: piece %zu (byte %zu) is not valid UTF-8", id, piece_at);
        id++;
    }
    if (!rc && more < 0) rc = e->status;
    if (!rc) rc = kite_tokenizer_set_texts(t, texts, e);
    free(texts);
    if (!rc) {
        t->kind = KITE_TOKENIZER_SPM;
        t->algo = KITE_ALGO_SPM_SCORES;
        t->escape_spaces = true;
        t->space_prefix = add_dummy_prefix ? KITE_PREFIX_ALWAYS : KITE_PREFIX_NONE;
        t->add_bos = true;
        int32_t n = (int32_t)n_pieces;
        t->unk = ids[0] >= 0 && ids[0] < n ? (int32_t)ids[0] : -1;
        t->bos = ids[1] >= 0 && ids[1] < n ? (int32_t)ids[1] : -1;
        t->eos = ids[2] >= 0 && ids[2] < n ? (int32_t)ids[2] : -1;
        rc = kite_tokenizer_finish(t, NULL, 0, NULL, e);
    }
    if (rc) {
        kite_tokenizer_free(t);
        return rc;
    }
    *out = t;
    return KITE_OK;
}
