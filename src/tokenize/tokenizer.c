/* The tokenizer object: building it (shared by the loaders), encoding (special-token split, then the
 * SPM or BPE encoder), and decoding pieces. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "io/mmap.h"
#include "tokenize/merge_queue.h"

static const char k_space_marker[] = "\xE2\x96\x81"; /* "▁" U+2581, SentencePiece's space */

/* ---- building ---- */

int kite_tokenizer_alloc(kite_tokenizer **out, int32_t n_vocab, kite_error *e) {
    *out = NULL;
    if (n_vocab <= 0) return kite_fail(e, KITE_ERR_FORMAT, "tokenizer: empty vocabulary");
    kite_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return kite_fail(e, KITE_ERR_NOMEM, "tokenizer: out of memory");
    t->n_vocab = n_vocab;
    t->text_off = calloc((size_t)n_vocab + 1, sizeof(uint32_t));
    t->scores = calloc((size_t)n_vocab, sizeof(float));
    t->types = malloc((size_t)n_vocab);
    t->flags = calloc((size_t)n_vocab, 1);
    if (!t->text_off || !t->scores || !t->types || !t->flags) {
        kite_tokenizer_free(t);
        return kite_fail(e, KITE_ERR_NOMEM, "tokenizer: out of memory for %d tokens", n_vocab);
    }
    memset(t->types, KITE_TOKEN_NORMAL, (size_t)n_vocab);
    t->bos = t->eos = t->unk = -1;
    for (int i = 0; i < 256; i++) t->byte_token[i] = -1;
    *out = t;
    return KITE_OK;
}

int kite_tokenizer_set_texts(kite_tokenizer *t, const kite_span *texts, kite_error *e) {
    uint64_t total = 0;
    for (int32_t i = 0; i < t->n_vocab; i++) total += texts[i].len ? texts[i].len : 24;
    if (total >= UINT32_MAX) return kite_fail(e, KITE_ERR_FORMAT, "tokenizer: token texts total %llu bytes, too many",
                                              (unsigned long long)total);
    free(t->text_pool);
    t->text_pool = malloc((size_t)total + 1);
    if (!t->text_pool) return kite_fail(e, KITE_ERR_NOMEM, "tokenizer: out of memory for token texts");
    uint32_t off = 0;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        t->text_off[i] = off;
        if (texts[i].len) {
            memcpy(t->text_pool + off, texts[i].ptr, texts[i].len);
            off += (uint32_t)texts[i].len;
        } else {
            off += (uint32_t)snprintf(t->text_pool + off, 25, "[EMPTY_%d]", (int)i);
        }
    }
    t->text_off[t->n_vocab] = off;
    return KITE_OK;
}

static bool is_byte_token_text(kite_span s, unsigned *byte) {
    if (s.len != 6 || memcmp(s.ptr, "<0x", 3) != 0 || s.ptr[5] != '>') return false;
    unsigned v = 0;
    for (int k = 3; k < 5; k++) {
        char c = s.ptr[k];
        unsigned d;
        if (c >= '0' && c <= '9') d = (unsigned)(c - '0');
        else if (c >= 'A' && c <= 'F') d = (unsigned)(c - 'A' + 10);
        else if (c >= 'a' && c <= 'f') d = (unsigned)(c - 'a' + 10);
        else return false;
        v = v * 16 + d;
    }
    *byte = v;
    return true;
}

/* Texts llama.cpp (llama-vocab.cpp, as bundled with node-llama-cpp 3.21.1 and later) treats as end of
 * generation wherever they occur in a vocabulary, forcing them to control tokens; plus TinyStories'. */
static const char *const k_eog_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "<end_of_turn>",
    "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
    "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>", "<|end_story|>",
};

static int32_t find_cstr(const kite_tokenizer *t, const char *s) { return kite_vocab_find(t, s, strlen(s)); }

static bool is_eog_text(const kite_tokenizer *t, const char *s) {
    int32_t id = find_cstr(t, s);
    return id >= 0 && (t->flags[id] & KITE_TOKEN_FLAG_EOG);
}

/* Fill-in-the-middle tokens llama.cpp finds by spelling when the file names none: all become control
 * tokens, and the pad / repo / file-separator ones end generation. The first spelling present counts. */
static const char *const k_fim_texts[6][7] = {
    {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<PRE>", "<|code_prefix|>", "<|prefix|>", NULL},
    {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<SUF>", "<|code_suffix|>", "<|suffix|>", NULL},
    {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<MID>", "<|code_middle|>", "<|middle|>", NULL},
    {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", NULL},
    {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", NULL},
    {"<|file_sep|>", NULL},
};

/* EOG flags: EOS, the ids the source names, the spellings above, with llama.cpp's two exceptions.
 * fim_ids: [6] ids the source names for FIM prefix / suffix / middle / pad / repo / separator, -1 if none. */
static void mark_eog(kite_tokenizer *t, const int32_t *eog_extra, int n_eog_extra, const int32_t *fim_ids) {
    for (int f = 0; f < 6; f++) {
        int32_t id = fim_ids ? fim_ids[f] : -1;
        for (int k = 0; id < 0 && k_fim_texts[f][k]; k++) {
            id = find_cstr(t, k_fim_texts[f][k]);
            if (id >= 0) t->types[id] = KITE_TOKEN_CONTROL;
        }
        if (id >= 0 && id < t->n_vocab && f >= 3) t->flags[id] |= KITE_TOKEN_FLAG_EOG;
    }
    if (t->eos >= 0 && t->eos < t->n_vocab) t->flags[t->eos] |= KITE_TOKEN_FLAG_EOG;
    for (int i = 0; i < n_eog_extra; i++)
        if (eog_extra[i] >= 0 && eog_extra[i] < t->n_vocab) t->flags[eog_extra[i]] |= KITE_TOKEN_FLAG_EOG;
    for (size_t k = 0; k < sizeof k_eog_texts / sizeof k_eog_texts[0]; k++) {
        int32_t id = find_cstr(t, k_eog_texts[k]);
        if (id < 0) continue;
        t->flags[id] |= KITE_TOKEN_FLAG_EOG;
        t->types[id] = KITE_TOKEN_CONTROL;
    }
    /* gpt-oss: these always render, as user-defined tokens */
    static const char *const rendered[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"};
    for (size_t k = 0; k < sizeof rendered / sizeof rendered[0]; k++) {
        int32_t id = find_cstr(t, rendered[k]);
        if (id >= 0) t->types[id] = KITE_TOKEN_USER_DEFINED;
    }
    /* o200k_harmony / solar-open: "<|end|>" ends a message, not the generation */
    int32_t end = find_cstr(t, "<|end|>");
    bool has_call = is_eog_text(t, "<|call|>") || is_eog_text(t, "<|calls|>");
    if (end >= 0 && (t->flags[end] & KITE_TOKEN_FLAG_EOG) && has_call &&
        (is_eog_text(t, "<|return|>") || is_eog_text(t, "<|flush|>"))) {
        t->flags[end] &= (uint8_t)~KITE_TOKEN_FLAG_EOG;
        t->types[end] = KITE_TOKEN_USER_DEFINED;
    }
    /* gemma4 / paddleocr: "</s>" is ordinary text when "<|tool_response>" exists */
    int32_t s_end = find_cstr(t, "</s>");
    if (s_end >= 0 && s_end != t->eos && is_eog_text(t, "<|tool_response>")) {
        t->flags[s_end] &= (uint8_t)~KITE_TOKEN_FLAG_EOG;
        t->types[s_end] = KITE_TOKEN_NORMAL;
    }
}

static int cmp_special(const void *a, const void *b, void *ctx) {
    const kite_tokenizer *t = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint32_t lx = t->text_off[x + 1] - t->text_off[x], ly = t->text_off[y + 1] - t->text_off[y];
    if (lx != ly) return lx > ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

static void build_pieces(kite_tokenizer *t) {
    int byte_of_cp[0x100 + 68];
    for (uint32_t cp = 0; cp < 0x100 + 68; cp++) byte_of_cp[cp] = kite_bytelevel_byte(cp);
    uint32_t off = 0;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        t->piece_off[id] = off;
        kite_span s = kite_token_text(t, id);
        char *dst = t->piece_pool + off;
        size_t n = 0;
        unsigned byte;
        switch (t->types[id]) {
        case KITE_TOKEN_CONTROL:
            if (id != t->bos && id != t->eos) { memcpy(dst, s.ptr, s.len); n = s.len; }
            break;
        case KITE_TOKEN_UNKNOWN:
        case KITE_TOKEN_USER_DEFINED:
            memcpy(dst, s.ptr, s.len);
            n = s.len;
            break;
        case KITE_TOKEN_UNUSED:
            break;
        case KITE_TOKEN_BYTE:
            if (t->kind == KITE_TOKENIZER_SPM && is_byte_token_text(s, &byte)) {
                dst[n++] = (char)byte;
                break;
            }
            __attribute__((fallthrough)); /* spelled like a normal token */
        default:
            if (t->kind == KITE_TOKENIZER_SPM) {
                for (size_t i = 0; i < s.len;) {
                    if (t->escape_spaces && s.len - i >= 3 && memcmp(s.ptr + i, k_space_marker, 3) == 0) {
                        dst[n++] = ' ';
                        i += 3;
                    } else {
                        dst[n++] = s.ptr[i++];
                    }
                }
            } else {
                for (size_t i = 0; i < s.len;) {
                    size_t adv;
                    uint32_t cp = kite_utf8_decode(s.ptr + i, s.len - i, &adv);
                    int b = cp < 0x100 + 68 ? byte_of_cp[cp] : -1;
                    if (b >= 0) {
                        dst[n++] = (char)b;
                    } else { /* not a byte-level character: keep it as written */
                        memcpy(dst + n, s.ptr + i, adv);
                        n += adv;
                    }
                    i += adv;
                }
            }
            break;
        }
        off += (uint32_t)n;
    }
    t->piece_off[t->n_vocab] = off;
}

int kite_tokenizer_finish(kite_tokenizer *t, const int32_t *eog_extra, int n_eog_extra, const int32_t *fim_ids,
                          kite_error *e) {
    int rc = kite_vocab_build_map(t, e);
    if (rc) return rc;

    /* byte tokens */
    for (int b = 0; b < 256; b++) {
        if (t->kind == KITE_TOKENIZER_SPM) {
            char hex[8];
            snprintf(hex, sizeof hex, "<0x%02X>", b);
            int32_t id = kite_vocab_find(t, hex, 6);
            if (id < 0) {
                char c = (char)b;
                id = kite_vocab_find(t, &c, 1);
            }
            t->byte_token[b] = id;
        } else {
            size_t n = kite_utf8_encode(kite_bytelevel_cp((uint8_t)b), t->bytelevel_utf8[b]);
            t->bytelevel_len[b] = (uint8_t)n;
            t->byte_token[b] = kite_vocab_find(t, t->bytelevel_utf8[b], n);
        }
    }
    if (t->kind == KITE_TOKENIZER_SPM) {
        for (int32_t id = 0; id < t->n_vocab; id++) {
            unsigned byte;
            if ((t->types[id] == KITE_TOKEN_NORMAL || t->types[id] == KITE_TOKEN_UNDEFINED) &&
                is_byte_token_text(kite_token_text(t, id), &byte))
                t->types[id] = KITE_TOKEN_BYTE;
        }
    }

    mark_eog(t, eog_extra, n_eog_extra, fim_ids);

    /* tokens split out of the text before tokenizing: longest first */
    free(t->special_ids);
    t->special_ids = malloc((size_t)t->n_vocab * sizeof(int32_t));
    if (!t->special_ids) return kite_fail(e, KITE_ERR_NOMEM, "tokenizer: out of memory");
    t->n_special = 0;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        uint8_t ty = t->types[id];
        if (ty == KITE_TOKEN_CONTROL || ty == KITE_TOKEN_USER_DEFINED || ty == KITE_TOKEN_UNKNOWN)
            t->special_ids[t->n_special++] = id;
    }
    qsort_r(t->special_ids, (size_t)t->n_special, sizeof(int32_t), cmp_special, t);

    /* pieces never grow past the token text */
    free(t->piece_pool);
    free(t->piece_off);
    t->piece_pool = malloc((size_t)t->text_off[t->n_vocab] + 1);
    t->piece_off = malloc(((size_t)t->n_vocab + 1) * sizeof(uint32_t));
    if (!t->piece_pool || !t->piece_off) return kite_fail(e, KITE_ERR_NOMEM, "tokenizer: out of memory for pieces");
    build_pieces(t);
    return KITE_OK;
}

void kite_tokenizer_free(kite_tokenizer *t) {
    if (!t) return;
    free(t->text_pool);
    free(t->text_off);
    free(t->scores);
    free(t->types);
    free(t->flags);
    free(t->piece_pool);
    free(t->piece_off);
    free(t->vocab_map.slots);
    kite_merges_free(&t->merges);
    free(t->special_ids);
    kite_pretok_free(t);
    free(t);
}

/* ---- accessors ---- */

kite_tokenizer_kind kite_tokenizer_kind_of(const kite_tokenizer *t) { return t->kind; }
int32_t kite_tokenizer_n_vocab(const kite_tokenizer *t) { return t->n_vocab; }
int32_t kite_tokenizer_bos(const kite_tokenizer *t) { return t->bos; }
int32_t kite_tokenizer_eos(const kite_tokenizer *t) { return t->eos; }
bool kite_tokenizer_add_bos(const kite_tokenizer *t) { return t->add_bos && t->bos >= 0; }

bool kite_tokenizer_is_eog(const kite_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab && (t->flags[id] & KITE_TOKEN_FLAG_EOG);
}

int32_t kite_tokenizer_eog_ids(const kite_tokenizer *t, int32_t *ids, int32_t cap) {
    int32_t n = 0;
    for (int32_t id = 0; id < t->n_vocab && n < cap; id++)
        if (t->flags[id] & KITE_TOKEN_FLAG_EOG) ids[n++] = id;
    return n;
}

bool kite_tokenizer_is_control(const kite_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab && t->types[id] == KITE_TOKEN_CONTROL;
}

int32_t kite_tokenizer_token_id(const kite_tokenizer *t, const char *text, size_t len) {
    return kite_vocab_find(t, text, len);
}

const char *kite_tokenizer_token_text(const kite_tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->n_vocab) return NULL;
    kite_span s = kite_token_text(t, id);
    if (len) *len = s.len;
    return s.ptr;
}

bool kite_tokenizer_is_special(const kite_tokenizer *t, int32_t id) {
    if (id < 0 || id >= t->n_vocab) return false;
    uint8_t ty = t->types[id];
    return ty == KITE_TOKEN_CONTROL || ty == KITE_TOKEN_UNKNOWN;
}

/* ---- encoding ---- */

typedef struct fragment {
    size_t off, len; /* raw text span (when id < 0) */
    int32_t id;      /* >= 0: a special token split out of the text */
} fragment;

typedef struct fragments {
    fragment *v;
    size_t n, cap;
} fragments;

static int frag_push(fragments *f, size_t off, size_t len, int32_t id, kite_error *e) {
    if (f->n == f->cap) {
        void *p = f->v;
        int rc = kite_scratch_reserve(&p, &f->cap, f->n + 1, sizeof(fragment), e);
        if (rc) return rc;
        f->v = p;
    }
    f->v[f->n++] = (fragment){off, len, id};
    return KITE_OK;
}

/* llama.cpp's tokenizer_st_partition: for each special token, longest first, cut every occurrence out of
 * the remaining raw fragments. Control and unknown tokens only count when parse_special is set;
 * user-defined (added, non-special) tokens always do, as in llama.cpp and HF tokenizers. */
static int partition_specials(const kite_tokenizer *t, const char *text, size_t len, const uint8_t *data_mask,
                              bool parse_special, fragments *frags, kite_error *e) {
    int rc = KITE_OK;
    if (len > 0) rc = frag_push(frags, 0, len, -1, e);
    fragments next = {0};
    for (int32_t k = 0; k < t->n_special && !rc; k++) {
        int32_t id = t->special_ids[k];
        uint8_t ty = t->types[id];
        if (!parse_special && (ty == KITE_TOKEN_CONTROL || ty == KITE_TOKEN_UNKNOWN)) continue;
        kite_span tok = kite_token_text(t, id);
        if (tok.len == 0 || tok.len > len || !memmem(text, len, tok.ptr, tok.len)) continue;
        next.n = 0;
        for (size_t i = 0; i < frags->n && !rc; i++) {
            fragment f = frags->v[i];
            if (f.id >= 0) {
                rc = frag_push(&next, f.off, f.len, f.id, e);
                continue;
            }
            size_t base = f.off, base_len = f.len;
            size_t search = base; /* occurrences before this are data and stay text */
            while (base_len > 0 && !rc) {
                const char *m = memmem(text + search, base + base_len - search, tok.ptr, tok.len);
                if (!m) {
                    rc = frag_push(&next, base, base_len, -1, e);
                    break;
                }
                size_t match = (size_t)(m - text);
                if (data_mask && memchr(data_mask + match, 1, tok.len)) {
                    search = match + 1; /* spelled by the caller's data: plain text */
                    continue;
                }
                size_t left_len = match - base;
                if (t->flags[id] & KITE_TOKEN_FLAG_LSTRIP)
                    while (left_len > 0 && isspace((unsigned char)text[base + left_len - 1])) left_len--;
                if (left_len > 0) rc = frag_push(&next, base, left_len, -1, e);
                if (!rc) rc = frag_push(&next, match, tok.len, id, e);
                size_t right = match + tok.len, right_len = base + base_len - right;
                if (t->flags[id] & KITE_TOKEN_FLAG_RSTRIP)
                    while (right_len > 0 && isspace((unsigned char)text[right])) { right++; right_len--; }
                base = right;
                base_len = right_len;
                search = base;
            }
        }
        fragments tmp = *frags;
        *frags = next;
        next = tmp;
    }
    free(next.v);
    return rc;
}

typedef struct encode_ctx {
    const kite_tokenizer *t;
    kite_merge_scratch scratch;
    kite_ids out;
    kite_error *e;
    char *buf; size_t buf_cap; /* escaped / normalized text */
} encode_ctx;

static int encode_word(void *ctx, const char *word, size_t len) {
    encode_ctx *c = ctx;
    return kite_bpe_encode_word(c->t, word, len, &c->scratch, &c->out, c->e);
}

static int encode_spm_fragment(encode_ctx *c, const char *text, size_t len, bool add_prefix) {
    const kite_tokenizer *t = c->t;
    /* escaped text: optional "▁" prefix, spaces as "▁" (each space grows by 2 bytes) */
    size_t spaces = 0;
    if (t->escape_spaces)
        for (size_t i = 0; i < len; i++) spaces += text[i] == ' ';
    void *p = c->buf;
    int rc = kite_scratch_reserve(&p, &c->buf_cap, len + 2 * spaces + 4, 1, c->e);
    if (rc) return rc;
    c->buf = p;
    size_t n = 0;
    if (add_prefix) {
        memcpy(c->buf, k_space_marker, 3);
        n = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (t->escape_spaces && text[i] == ' ') {
            memcpy(c->buf + n, k_space_marker, 3);
            n += 3;
        } else {
            c->buf[n++] = text[i];
        }
    }
    if (t->algo == KITE_ALGO_SPM_SCORES) return kite_spm_encode(t, c->buf, n, &c->scratch, &c->out, c->e);
    if (!t->metaspace_split) return kite_bpe_encode_word(t, c->buf, n, &c->scratch, &c->out, c->e);
    /* HF Metaspace split: each word starts at a "▁" */
    size_t start = 0;
    for (size_t i = 1; i + 3 <= n; i++) {
        if (memcmp(c->buf + i, k_space_marker, 3) != 0) continue;
        rc = kite_bpe_encode_word(t, c->buf + start, i - start, &c->scratch, &c->out, c->e);
        if (rc) return rc;
        start = i;
        i += 2;
    }
    return kite_bpe_encode_word(t, c->buf + start, n - start, &c->scratch, &c->out, c->e);
}

static int encode_bpe_fragment(encode_ctx *c, const char *text, size_t len) {
    const kite_tokenizer *t = c->t;
    unsigned char *normalized = NULL;
    if (t->nfc) {
        bool ascii = true;
        for (size_t i = 0; i < len && ascii; i++) ascii = (unsigned char)text[i] < 0x80;
        if (!ascii) {
            utf8proc_ssize_t n = utf8proc_map((const utf8proc_uint8_t *)text, (utf8proc_ssize_t)len, &normalized,
                                              UTF8PROC_STABLE | UTF8PROC_COMPOSE);
            if (n < 0) return kite_fail(c->e, KITE_ERR_TOKENIZER, "tokenizer: NFC normalization failed: %s",
                                        utf8proc_errmsg(n));
            text = (const char *)normalized;
            len = (size_t)n;
        }
    }
    int rc = KITE_OK;
    if (t->bpe_prefix_space && len > 0 && text[0] != ' ') {
        void *p = c->buf;
        rc = kite_scratch_reserve(&p, &c->buf_cap, len + 1, 1, c->e);
        if (!rc) {
            c->buf = p;
            c->buf[0] = ' ';
            memcpy(c->buf + 1, text, len);
            text = c->buf;
            len++;
        }
    }
    if (!rc) rc = kite_pretok_split(t, text, len, encode_word, c, c->e);
    free(normalized);
    return rc;
}

static int encode(const kite_tokenizer *t, const char *text, size_t len, const uint8_t *data_mask, bool add_bos,
                  bool parse_special, int32_t **ids, size_t *n_ids, kite_error *e) {
    if (ids) *ids = NULL;
    if (n_ids) *n_ids = 0;
    if (!t || !ids || !n_ids || (!text && len))
        return kite_fail(e, KITE_ERR_INVALID_ARG, "tokenizer: encode needs a tokenizer, text and outputs");
    size_t bad = kite_utf8_validate(text, len);
    if (bad != len) return kite_fail(e, KITE_ERR_TOKENIZER, "invalid UTF-8 at byte %zu", bad);

    encode_ctx c = {.t = t, .e = e};
    fragments frags = {0};
    int rc = KITE_OK;
    if (add_bos && t->bos >= 0) rc = kite_ids_push(&c.out, t->bos, e);
    if (!rc) rc = partition_specials(t, text, len, data_mask, parse_special, &frags, e);
    bool prev_special = true; /* the start of the text counts as after a special token */
    for (size_t i = 0; i < frags.n && !rc; i++) {
        fragment f = frags.v[i];
        if (f.id >= 0) {
            rc = kite_ids_push(&c.out, f.id, e);
            prev_special = true;
            continue;
        }
        if (t->kind == KITE_TOKENIZER_SPM) {
            bool prefix = false;
            if (t->space_prefix == KITE_PREFIX_ALWAYS) prefix = prev_special;
            else if (t->space_prefix == KITE_PREFIX_FIRST) prefix = f.off == 0;
            if (prefix && t->prefix_unless_space && text[f.off] == ' ') prefix = false; /* HF Metaspace: not twice */
            rc = encode_spm_fragment(&c, text + f.off, f.len, prefix);
        } else {
            rc = encode_bpe_fragment(&c, text + f.off, f.len);
        }
        prev_special = false;
    }
    free(frags.v);
    free(c.buf);
    kite_merge_scratch_free(&c.scratch);
    if (rc) {
        free(c.out.v);
        return rc;
    }
    if (!c.out.v) {
        c.out.v = malloc(sizeof(int32_t));
        if (!c.out.v) return kite_fail(e, KITE_ERR_NOMEM, "tokenizer: out of memory");
    }
    *ids = c.out.v;
    *n_ids = c.out.n;
    return KITE_OK;
}

int kite_tokenizer_encode(const kite_tokenizer *t, const char *text, size_t len, bool add_bos, bool parse_special,
                          int32_t **ids, size_t *n_ids, kite_error *e) {
    return encode(t, text, len, NULL, add_bos, parse_special, ids, n_ids, e);
}

int kite_tokenizer_encode_masked(const kite_tokenizer *t, const char *text, size_t len, const uint8_t *data_mask,
                                 bool add_bos, int32_t **ids, size_t *n_ids, kite_error *e) {
    if (!data_mask && len) return kite_fail(e, KITE_ERR_INVALID_ARG, "tokenizer: encode_masked needs a mask");
    return encode(t, text, len, data_mask, add_bos, true, ids, n_ids, e);
}

/* ---- decoding ---- */

/* Whether the piece of a token after prev_id loses the dummy-prefix space the encoder put there. */
static bool drops_prefix_space(const kite_tokenizer *t, int32_t prev_id) {
    if (t->kind != KITE_TOKENIZER_SPM || t->space_prefix == KITE_PREFIX_NONE) return false;
    if (prev_id < 0) return true;
    if (prev_id >= t->n_vocab) return false;
    if (t->space_prefix == KITE_PREFIX_FIRST) return prev_id == t->bos;
    uint8_t ty = t->types[prev_id];
    return ty == KITE_TOKEN_CONTROL || ty == KITE_TOKEN_USER_DEFINED || ty == KITE_TOKEN_UNKNOWN;
}

bool kite_tokenizer_drops_space_after(const kite_tokenizer *t, int32_t prev_id) { return t && drops_prefix_space(t, prev_id); }

int32_t kite_tokenizer_piece(const kite_tokenizer *t, int32_t prev_id, int32_t id, char *buf, size_t cap) {
    if (!t || id < 0 || id >= t->n_vocab) return -1;
    const char *p = t->piece_pool + t->piece_off[id];
    size_t n = t->piece_off[id + 1] - t->piece_off[id];
    if (n > 0 && p[0] == ' ' && drops_prefix_space(t, prev_id)) {
        p++;
        n--;
    }
    if (buf && cap) memcpy(buf, p, n < cap ? n : cap);
    return (int32_t)n;
}

int kite_tokenizer_decode(const kite_tokenizer *t, const int32_t *ids, size_t n_ids, char **text, size_t *len,
                          kite_error *e) {
    if (text) *text = NULL;
    if (len) *len = 0;
    if (!t || !text || (!ids && n_ids)) return kite_fail(e, KITE_ERR_INVALID_ARG, "tokenizer: decode needs ids and an output");
    size_t total = 0;
    for (size_t i = 0; i < n_ids; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_vocab)
            return kite_fail(e, KITE_ERR_INVALID_ARG, "tokenizer: token id %d at position %zu is outside [0, %d)",
                             ids[i], i, t->n_vocab);
        total += t->piece_off[ids[i] + 1] - t->piece_off[ids[i]];
    }
    char *out = malloc(total + 1);
    if (!out) return kite_fail(e, KITE_ERR_NOMEM, "tokenizer: out of memory decoding %zu tokens", n_ids);
    size_t n = 0;
    for (size_t i = 0; i < n_ids; i++)
        n += (size_t)kite_tokenizer_piece(t, i ? ids[i - 1] : -1, ids[i], out + n, total - n);
    out[n] = '\0';
    *text = out;
    if (len) *len = n;
    return KITE_OK;
}

/* ---- files ---- */

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

int kite_tokenizer_from_file(kite_tokenizer **out, const char *path, int32_t n_vocab, kite_error *e) {
    *out = NULL;
    kite_mapped_file f = {0};
    int rc = kite_map_file(&f, path, e);
    if (rc) return rc;
    size_t i = 0;
    while (i < f.size && isspace(f.data[i])) i++;
    bool json = ends_with(path, ".json") || (i < f.size && f.data[i] == '{');
    if (!json && ends_with(path, ".model")) {
        rc = kite_tokenizer_from_spm_model(out, f.data, f.size, e);
        kite_unmap_file(&f);
        return rc;
    }
    if (!json) {
        rc = kite_tokenizer_from_llama2c(out, f.data, f.size, n_vocab, e);
        kite_unmap_file(&f);
        return rc;
    }
    /* tokenizer_config.json next to it, if any, supplies add_bos_token and the bos / eos tokens */
    char *config = NULL;
    size_t config_len = 0;
    const char *slash = strrchr(path, '/');
    size_t dir_len = slash ? (size_t)(slash - path + 1) : 0;
    char *config_path = malloc(dir_len + sizeof "tokenizer_config.json");
    if (!config_path) {
        kite_unmap_file(&f);
        return kite_fail(e, KITE_ERR_NOMEM, "tokenizer: out of memory");
    }
    memcpy(config_path, path, dir_len);
    memcpy(config_path + dir_len, "tokenizer_config.json", sizeof "tokenizer_config.json");
    kite_error ignored = {0};
    if (strcmp(config_path, path) != 0 && kite_read_file(config_path, &config, &config_len, 64u << 20, &ignored) != KITE_OK) {
        config = NULL;
        config_len = 0;
    }
    free(config_path);
    rc = kite_tokenizer_from_hf_json(out, (const char *)f.data, f.size, config, config_len, e);
    free(config);
    kite_unmap_file(&f);
    return rc;
}
