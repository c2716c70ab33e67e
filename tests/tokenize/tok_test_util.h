/* Helpers for the tokenizer tests: reading files, llama.cpp's vocab test vectors, random test text. */
#ifndef KITE_TEST_TOK_UTIL_H
#define KITE_TEST_TOK_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "test_util.h"
#include "tokenize/tokenizer.h"

static inline char *tt_slurp(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) buf[n] = '\0';
    if (size) *size = (size_t)n;
    return buf;
}

static inline double tt_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* llama.cpp's test vectors: .inp holds texts separated by "\n__ggml_vocab_test__\n" (the file ends with
 * one), .out one line of space-separated ids per text. */
typedef struct tt_case {
    char *text;
    size_t len;
    int32_t *ids;
    size_t n_ids;
} tt_case;

static inline size_t tt_load_vectors(const char *name, tt_case **out) {
    char inp_rel[256], out_rel[256];
    snprintf(inp_rel, sizeof inp_rel, "models/tokenizer-tests/ggml-vocab-%s.gguf.inp", name);
    snprintf(out_rel, sizeof out_rel, "models/tokenizer-tests/ggml-vocab-%s.gguf.out", name);
    char *inp = tt_slurp(kite_test_data(inp_rel), NULL);
    char *outs = tt_slurp(kite_test_data(out_rel), NULL);
    if (!inp || !outs) {
        free(inp);
        free(outs);
        *out = NULL;
        return 0;
    }
    static const char sep[] = "\n__ggml_vocab_test__\n";
    size_t n = 0, cap = 64;
    tt_case *cases = calloc(cap, sizeof *cases);
    char *ip = inp, *op = outs;
    for (;;) {
        char *hit = strstr(ip, sep);
        char *nl = strchr(op, '\n');
        if (!hit || !nl) break;
        if (n == cap) cases = realloc(cases, (cap *= 2) * sizeof *cases);
        tt_case *c = &cases[n++];
        c->len = (size_t)(hit - ip);
        c->text = malloc(c->len + 1);
        memcpy(c->text, ip, c->len);
        c->text[c->len] = '\0';
        c->ids = malloc((size_t)(nl - op + 1) * sizeof(int32_t));
        c->n_ids = 0;
        for (char *p = op; p < nl;) {
            char *end;
            long v = strtol(p, &end, 10);
            if (end == p) break;
            c->ids[c->n_ids++] = (int32_t)v;
            p = end;
        }
        ip = hit + strlen(sep);
        op = nl + 1;
    }
    free(inp);
    free(outs);
    *out = cases;
    return n;
}

static inline void tt_free_vectors(tt_case *cases, size_t n) {
    for (size_t i = 0; i < n; i++) {
        free(cases[i].text);
        free(cases[i].ids);
    }
    free(cases);
}

/* Deterministic random text: words, spaces, newlines, tabs, digits, punctuation, contractions, accented
 * Latin, Cyrillic, CJK, emoji and (optionally) the given special-token spellings. Only precomposed (NFC)
 * characters, so NFC normalization leaves it unchanged. */
static inline uint64_t tt_rand(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static inline size_t tt_random_text(uint64_t *seed, char *buf, size_t cap, const char *const *specials,
                                    size_t n_specials) {
    static const char *const pieces[] = {
        "the", "The", "little", "girl", "Once", "upon", "a", "time", "dog", "Hello", "world", "don't", "I'm",
        "they'll", "we've", "you'd", "she's", "it'S", "'RE", "e", "tion", "ing", "pre", "xyz", "Qwen", "llama",
        " ", " ", " ", " ", "  ", "   ", "\n", "\n\n", "\t", " \n", "\r\n", ".", ",", "!", "?", ";", ":", "'",
        "\"", "(", ")", "[", "]", "{", "}", "-", "--", "...", "/", "\\", "#", "$", "%", "&", "*", "+", "=", "<",
        ">", "|", "~", "`", "@", "^", "_", "0", "1", "7", "42", "123", "2024", "3.14", "1,000", "99999",
        "\xC3\xA9t\xC3\xA9", "na\xC3\xAFve", "\xC3\x84pfel", "stra\xC3\x9F" "e", "C\xE1\xBB\xAD" "a",
        "\xD0\xBF\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82", "\xE4\xBD\xA0\xE5\xA5\xBD", "\xE4\xB8\x96\xE7\x95\x8C",
        "\xE3\x81\x93\xE3\x82\x93", "\xED\x95\x9C\xEA\xB5\xAD", "\xF0\x9F\x98\x80", "\xF0\x9F\xA6\x99",
        "\xE2\x9C\x85", "\xE2\x80\x94", "\xC2\xA0", "\xE3\x80\x80", "\xEF\xBD\x9E", "\xE2\x96\x81",
        "\xC2\xBD", "\xE2\x80\x8B", "\xD8\xB9\xD8\xB1\xD8\xA8\xD9\x8A",
    };
    size_t n_pieces = sizeof pieces / sizeof pieces[0];
    size_t len = 0;
    size_t target = 1 + tt_rand(seed) % (cap > 400 ? 400 : cap - 1);
    while (len < target) {
        const char *p;
        if (n_specials && tt_rand(seed) % 23 == 0) p = specials[tt_rand(seed) % n_specials];
        else p = pieces[tt_rand(seed) % n_pieces];
        size_t n = strlen(p);
        if (len + n >= cap) break;
        memcpy(buf + len, p, n);
        len += n;
    }
    buf[len] = '\0';
    return len;
}

#endif
