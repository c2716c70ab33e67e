/* Internals shared by the tokenizer sources: the tokenizer struct, the vocabulary hash tables,
 * UTF-8 helpers, the pre-tokenizer and the loaders' common finishing step. */
#ifndef KITE_TOKENIZE_TOKENIZER_INTERNAL_H
#define KITE_TOKENIZE_TOKENIZER_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenize/tokenizer.h"

/* Token types, numbered as GGUF's tokenizer.ggml.token_type (and llama.cpp's llama_token_type). */
typedef enum kite_token_type {
    KITE_TOKEN_UNDEFINED = 0,
    KITE_TOKEN_NORMAL = 1,
    KITE_TOKEN_UNKNOWN = 2,
    KITE_TOKEN_CONTROL = 3,
    KITE_TOKEN_USER_DEFINED = 4,
    KITE_TOKEN_UNUSED = 5,
    KITE_TOKEN_BYTE = 6,
} kite_token_type;

/* Per-token flags. */
enum {
    KITE_TOKEN_FLAG_LSTRIP = 1, /* when split out as a special token, whitespace on its left is dropped */
    KITE_TOKEN_FLAG_RSTRIP = 2, /* ... and on its right */
    KITE_TOKEN_FLAG_EOG = 4,    /* ends generation */
};

/* How words are turned into tokens. */
typedef enum kite_tokenizer_algo {
    KITE_ALGO_SPM_SCORES = 0, /* llama.cpp's SPM: repeatedly merge the adjacent pair whose concatenation is the
                                 highest-scoring vocabulary token; leftovers fall back to <0xNN> tokens */
    KITE_ALGO_BPE_RANKS = 1,  /* BPE merges by rank (HF tokenizers / llama.cpp BPE) */
} kite_tokenizer_algo;

/* When SentencePiece-style text gets the dummy-prefix "▁" (U+2581) in front. */
typedef enum kite_space_prefix {
    KITE_PREFIX_NONE = 0,
    KITE_PREFIX_ALWAYS = 1, /* at the start of the text and after every special token (llama.cpp, HF Prepend) */
    KITE_PREFIX_FIRST = 2,  /* at the start of the text only (HF Metaspace prepend_scheme "first") */
} kite_space_prefix;

/* A byte string not owned by its holder. */
typedef struct kite_span {
    const char *ptr;
    size_t len;
} kite_span;

/* Token text -> id, open addressing (linear probing) over token ids; the texts live in the tokenizer. */
typedef struct kite_text_map {
    int32_t *slots; /* [mask + 1] token id or -1 for empty */
    uint32_t mask;  /* capacity - 1 (capacity a power of two, at least twice the count) */
} kite_text_map;

/* (left id, right id) -> (rank, merged id), open addressing. */
typedef struct kite_merge_map {
    uint64_t *keys;   /* [mask + 1] (left << 32 | right), or UINT64_MAX for empty */
    int32_t *ranks;   /* [mask + 1] merge rank: lower merges first */
    int32_t *results; /* [mask + 1] token id of the merged pair */
    uint32_t mask;
    uint32_t count;
} kite_merge_map;

#define KITE_PRETOK_MAX_REGEX 4

struct kite_tokenizer {
    kite_tokenizer_kind kind;
    kite_tokenizer_algo algo;
    int32_t n_vocab;

    /* Token texts in the tokenizer's own spelling: "▁" for spaces in SPM vocabularies, GPT-2's byte-to-unicode
     * characters in byte-level BPE vocabularies, raw text for special / added tokens. */
    char *text_pool;     /* all texts back to back */
    uint32_t *text_off;  /* [n_vocab + 1] byte offsets into text_pool */
    float *scores;       /* [n_vocab] SPM scores (0 when the source has none) */
    uint8_t *types;      /* [n_vocab] kite_token_type */
    uint8_t *flags;      /* [n_vocab] KITE_TOKEN_FLAG_* */

    /* Decoded output bytes of each token (what kite_tokenizer_piece writes, before the dummy-prefix rule). */
    char *piece_pool;
    uint32_t *piece_off; /* [n_vocab + 1] */

    kite_text_map vocab_map;
    kite_merge_map merges;   /* KITE_ALGO_BPE_RANKS only */
    int32_t byte_token[256]; /* SPM: the <0xNN> fallback token of each byte; BPE: the token spelling byte b's
                                GPT-2 character; -1 if absent */
    char bytelevel_utf8[256][2];  /* BPE: UTF-8 of byte b's GPT-2 character (all below U+0800) */
    uint8_t bytelevel_len[256];   /* its length: 1 or 2 */

    int32_t bos, eos, unk;   /* -1 if none */
    bool add_bos;            /* prompts get BOS by default */
    kite_space_prefix space_prefix; /* SPM only */
    bool escape_spaces;      /* SPM: ' ' becomes "▁" before tokenizing */
    bool metaspace_split;    /* SPM + ranks: words are split in front of each "▁" (HF Metaspace split=true) */
    bool prefix_unless_space;/* SPM: no dummy prefix when the text already starts with a space (HF Metaspace) */
    bool ignore_merges;      /* BPE: a pre-token that is itself a vocabulary token is emitted whole (Llama-3) */
    bool byte_fallback;      /* ranks: characters missing from the vocabulary become <0xNN> tokens */
    bool fuse_unk;           /* ranks without byte fallback: consecutive unknown characters make one <unk> */
    bool nfc;                /* BPE: NFC-normalize text before pre-tokenizing (HF normalizer "NFC") */
    bool bpe_prefix_space;   /* BPE: HF ByteLevel add_prefix_space: a space in front of text not starting with one */

    int32_t *special_ids;    /* control / user-defined / unknown tokens, longest text first */
    int32_t n_special;

    /* Byte-level BPE pre-tokenizer: regexes applied in sequence, each splitting every piece from the previous
     * one into its matches and the gaps between them (HF Split, behavior "Isolated"). */
    void *regex[KITE_PRETOK_MAX_REGEX]; /* pcre2_code_8 * */
    int n_regex;
};

/* ---- UTF-8 (utf8.c) ---- */
/* Returns len if s[0..len) is valid UTF-8 (shortest forms, no surrogates, at most U+10FFFF), else the
 * offset of the first bad byte. */
size_t kite_utf8_validate(const char *s, size_t len);
/* Length of the UTF-8 sequence starting with lead byte c (1 for stray continuation bytes). */
static inline size_t kite_utf8_len(unsigned char c) {
    return c < 0x80 ? 1 : c < 0xC0 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}
/* Decodes one code point from valid UTF-8 at s (n bytes available); *adv gets its length. */
uint32_t kite_utf8_decode(const char *s, size_t n, size_t *adv);
/* Encodes cp into out[0..4); returns the length. */
size_t kite_utf8_encode(uint32_t cp, char *out);
/* GPT-2's byte-to-unicode table: the code point standing for byte b in byte-level BPE token texts. */
uint32_t kite_bytelevel_cp(uint8_t b);
/* Inverse: the byte a code point stands for, or -1. */
int kite_bytelevel_byte(uint32_t cp);

/* ---- hash tables (vocab.c) ---- */
uint64_t kite_hash_bytes(const void *data, size_t len);
/* Builds the text -> id map over all tokens (later ids win on duplicate texts, as in llama.cpp). */
int kite_vocab_build_map(kite_tokenizer *t, kite_error *e);
/* Token id spelled exactly s[0..len), or -1. */
int32_t kite_vocab_find(const kite_tokenizer *t, const char *s, size_t len);
static inline kite_span kite_token_text(const kite_tokenizer *t, int32_t id) {
    kite_span s = {t->text_pool + t->text_off[id], (size_t)(t->text_off[id + 1] - t->text_off[id])};
    return s;
}
int kite_merges_init(kite_merge_map *m, size_t expected, kite_error *e);
/* Adds a merge unless the pair is already there (the first rank wins, as in llama.cpp). */
int kite_merges_add(kite_merge_map *m, int32_t left, int32_t right, int32_t rank, int32_t result, kite_error *e);
/* Looks up a pair: true with *rank and *result set if present. */
bool kite_merges_find(const kite_merge_map *m, int32_t left, int32_t right, int32_t *rank, int32_t *result);
void kite_merges_free(kite_merge_map *m);
/* Parses a merge written "left right" (split at the first space after the first byte, as llama.cpp does)
 * and adds it; merges naming texts outside the vocabulary are skipped (*skipped incremented). */
int kite_merges_add_text(kite_tokenizer *t, const char *left, size_t left_len, const char *right, size_t right_len,
                         int32_t rank, size_t *skipped, kite_error *e);

/* ---- building (tokenizer.c) ---- */
/* Allocates a tokenizer with n_vocab tokens: texts unset, types NORMAL, scores 0, ids -1. */
int kite_tokenizer_alloc(kite_tokenizer **out, int32_t n_vocab, kite_error *e);
/* Copies the token texts (texts[i] for id i) into the tokenizer's pool. An empty text becomes
 * "[EMPTY_<id>]" as in llama.cpp. */
int kite_tokenizer_set_texts(kite_tokenizer *t, const kite_span *texts, kite_error *e);
/* After texts, types, scores, flags, ids and options are set: builds the text map, byte tokens,
 * EOG set, special-token list and pieces. eog_extra: extra EOG ids (n_eog_extra of them, -1 ignored);
 * fim_ids: NULL or [6] FIM prefix / suffix / middle / pad / repo / separator ids the source names (-1 none). */
int kite_tokenizer_finish(kite_tokenizer *t, const int32_t *eog_extra, int n_eog_extra, const int32_t *fim_ids,
                          kite_error *e);

/* ---- pre-tokenizer (pretokenize.c) ---- */
/* Compiles a split pattern (PCRE2, UTF | UCP, JIT when available) into t->regex[t->n_regex++]. */
int kite_pretok_add_regex(kite_tokenizer *t, const char *pattern, size_t len, kite_error *e);
void kite_pretok_free(kite_tokenizer *t);
typedef int (*kite_word_fn)(void *ctx, const char *word, size_t len);
/* Calls fn for each pre-token of text[0..len) in order (the whole text when there are no regexes). */
int kite_pretok_split(const kite_tokenizer *t, const char *text, size_t len, kite_word_fn fn, void *ctx,
                      kite_error *e);
extern const char kite_regex_gpt2[];   /* GPT-2 (llama.cpp's "gpt-2" pre-tokenizer) */
extern const char kite_regex_gpt2_hf[];/* HF ByteLevel use_regex: GPT-2's with a final |\s+ */
extern const char kite_regex_llama3[]; /* llama.cpp's Llama-3 pattern (ASCII-only contractions) */
extern const char kite_regex_qwen2[];  /* llama.cpp's Qwen2 pattern */

/* ---- encoders (spm.c, bpe.c) ---- */
/* A growable id array. */
typedef struct kite_ids {
    int32_t *v;
    size_t n, cap;
} kite_ids;
int kite_ids_push(kite_ids *ids, int32_t id, kite_error *e);

/* Scratch space an encoder reuses across words. */
typedef struct kite_merge_scratch {
    void *syms;   size_t syms_cap;   /* kite_symbol */
    void *heap;   size_t heap_cap;   /* kite_bigram */
    char *buf;    size_t buf_cap;    /* text */
} kite_merge_scratch;
void kite_merge_scratch_free(kite_merge_scratch *s);

/* SPM scores over text already escaped ("▁" for spaces, dummy prefix included). */
int kite_spm_encode(const kite_tokenizer *t, const char *text, size_t len, kite_merge_scratch *s, kite_ids *out,
                    kite_error *e);
/* Rank merges over one word of raw text: byte-level (each byte one symbol) for KITE_TOKENIZER_BPE, or one
 * symbol per character with byte fallback / unk for SentencePiece-style vocabularies. */
int kite_bpe_encode_word(const kite_tokenizer *t, const char *word, size_t len, kite_merge_scratch *s, kite_ids *out,
                         kite_error *e);

#endif
