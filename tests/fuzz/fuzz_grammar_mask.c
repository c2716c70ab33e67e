/* Fuzzes the token masks (src/grammar/mask.c) differentially: the input is a GBNF grammar. Over a
 * fixed SentencePiece-style vocabulary (byte tokens, words with and without a leading space, special
 * tokens, pieces sharing prefixes), random walks compare every state's mask with a brute-force
 * reference (each token's piece stepped through a matcher of its own), after BOS (the dummy-prefix
 * space dropped) and mid-text; the forced-text tokens must each be allowed in turn. Any disagreement
 * aborts. Work is bounded: grammars that hit the matcher's limits stop the walk. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "grammar/mask.h"
#include "tokenize/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static kite_tokenizer *g_tok;
static kite_vocab_index *g_vi;
static int32_t g_n_vocab;

/* A llama2.c tokenizer .bin: int32 max_len, then per id f32 score, int32 len, bytes. */
static void build_vocab(void) {
    static const char *const words[] = {
        "<unk>", "<s>", "</s>", "\xe2\x96\x81", "\xe2\x96\x81the", "\xe2\x96\x81\x61", "ab", "abc", "abcd", "{\"", "\":", "\"",
        "\",", "\"}", "true", "false", "null", "\xe2\x96\x81{", "{", "}", "[", "]", ",", ":", "0", "12", "123", "-", ".",
        "e", "E", "+", "\xe2\x96\x81\"", "\\n", "\\", "\xce\xb1", "\xce\xb1\xce\xb2", "\xe4\xb8\x80", "\xf0\x9f\x98\x80",
        "name", "\xe2\x96\x81name", "age", "\xe2\x96\x81\xe2\x96\x81", "\n", "\n\n", "x", "xy", "xyz", "hello", "\xe2\x96\x81hello",
    };
    enum { N_WORDS = sizeof words / sizeof words[0] };
    int32_t n = N_WORDS + 256;
    size_t cap = 4 + (size_t)n * (8 + 16), at = 0;
    unsigned char *buf = malloc(cap);
    if (!buf) abort();
    int32_t max_len = 16;
    memcpy(buf, &max_len, 4), at = 4;
    for (int32_t id = 0; id < n; id++) {
        char text[16];
        int32_t len;
        if (id < 3) len = (int32_t)strlen(words[id]), memcpy(text, words[id], (size_t)len);
        else if (id < 3 + 256) len = snprintf(text, sizeof text, "<0x%02X>", id - 3);
        else len = (int32_t)strlen(words[id - 256]), memcpy(text, words[id - 256], (size_t)len);
        float score = (float)-id;
        memcpy(buf + at, &score, 4), at += 4;
        memcpy(buf + at, &len, 4), at += 4;
        memcpy(buf + at, text, (size_t)len), at += (size_t)len;
    }
    kite_error e = {0};
    if (kite_tokenizer_from_llama2c(&g_tok, buf, at, n, &e)) abort();
    free(buf);
    g_n_vocab = n + 3; /* three padding rows past the tokenizer's, never allowed */
    if (kite_vocab_index_build(g_tok, g_n_vocab, &g_vi, &e)) abort();
}

static bool brute_force(kite_gmatch *m, int32_t state, int32_t prev, int32_t id) {
    if (id >= kite_tokenizer_n_vocab(g_tok)) return false;
    if (kite_tokenizer_is_eog(g_tok, id)) return kite_gmatch_accepting(m, state);
    if (kite_tokenizer_is_special(g_tok, id)) return false;
    char piece[64];
    int32_t len = kite_tokenizer_piece(g_tok, prev, id, piece, sizeof piece);
    if (len <= 0 || len > (int32_t)sizeof piece) return false;
    int32_t s = kite_gmatch_step_bytes(m, state, (const uint8_t *)piece, (size_t)len);
    if (s == KITE_GSTATE_LIMIT) return true; /* the caller stops the walk at a limit */
    return s >= 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_tok) build_vocab();
    if (size > 4096) return 0;
    kite_gbnf *g = NULL;
    kite_error e = {0};
    if (kite_gbnf_parse((const char *)data, size, NULL, &g, &e) != KITE_OK) return 0;
    kite_gmask *gm = NULL;
    kite_gmatch *ref = NULL;
    if (kite_gmask_new(g, g_vi, g_tok, true, 1, &gm, &e) != KITE_OK || kite_gmatch_new(g, &ref, &e) != KITE_OK) abort();
    /* small limits keep every input fast */
    kite_gmatch_limits lim = {.max_stacks_per_state = 256, .max_states = 4096, .max_bytes = 16u << 20};
    kite_gmatch_set_limits(kite_gmask_matcher(gm), &lim);
    kite_gmatch_set_limits(ref, &lim);
    uint32_t rng = 2166136261u;
    for (size_t i = 0; i < size; i++) rng = (rng ^ data[i]) * 16777619u;
    for (int walk = 0; walk < 3; walk++) {
        int32_t state = kite_gmask_start(gm), rs = kite_gmatch_start(ref);
        if (state < 0 || rs < 0) break;
        int32_t prev = walk == 0 ? kite_tokenizer_bos(g_tok) : 300;
        for (int step = 0; step < 12; step++) {
            int32_t n_allowed = 0;
            const uint64_t *bits = kite_gmask_allowed(gm, state, prev, &n_allowed, &e);
            if (!bits) goto done; /* a matcher limit */
            int32_t allowed[512], n_ref = 0;
            for (int32_t id = 0; id < g_n_vocab; id++) {
                bool want = brute_force(ref, rs, prev, id);
                if (want != kite_gmask_bit(bits, id)) {
                    if (kite_gmatch_error(ref)->status) goto done; /* the reference hit a limit */
                    abort();
                }
                if (want) allowed[n_ref++] = id;
            }
            if (n_ref != n_allowed) abort();
            /* forced tokens are allowed one after another */
            int32_t forced[8];
            int32_t n_forced = kite_gmask_forced_tokens(gm, state, prev, forced, 8);
            int32_t fs = state, fp = prev;
            for (int32_t k = 0; k < n_forced; k++) {
                int32_t next = kite_gmask_advance(gm, fs, fp, forced[k]);
                if (next < 0 && next != KITE_GSTATE_LIMIT) abort();
                if (next < 0) break;
                fs = next, fp = forced[k];
            }
            if (n_ref == 0) break;
            rng = rng * 1103515245u + 12345u;
            int32_t id = allowed[(rng >> 8) % (uint32_t)n_ref];
            if (kite_tokenizer_is_eog(g_tok, id)) break;
            char piece[64];
            int32_t len = kite_tokenizer_piece(g_tok, prev, id, piece, sizeof piece);
            state = kite_gmask_advance(gm, state, prev, id);
            rs = kite_gmatch_step_bytes(ref, rs, (const uint8_t *)piece, (size_t)len);
            if (state < 0 || rs < 0) {
                if (state == KITE_GSTATE_LIMIT || rs == KITE_GSTATE_LIMIT) break;
                abort();
            }
            prev = id;
        }
    }
done:
    kite_gmatch_free(ref);
    kite_gmask_free(gm);
    kite_gbnf_free(g);
    return 0;
}
