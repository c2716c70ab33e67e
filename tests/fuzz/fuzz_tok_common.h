/* Shared by the tokenizer fuzz targets: exercise a freshly loaded tokenizer (encode with and without
 * special tokens, decode, stream pieces) on fixed texts and on the input's own tail. */
#ifndef KITE_FUZZ_TOK_COMMON_H
#define KITE_FUZZ_TOK_COMMON_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tokenize/tokenizer.h"

static void fuzz_exercise_tokenizer(const kite_tokenizer *t, const uint8_t *data, size_t size) {
    static const char *const texts[] = {
        "", " ", "Hello world", "  leading\n\ttabs  ", "<|im_start|>user\nhi<|im_end|>", "<s>x</s><unk>",
        "\xC3\xA9t\xC3\xA9 \xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\x98\x80 123456", "it's 'RE \xE2\x96\x81\xE2\x96\x81",
        "a\xCC\x81", "\xFF bad",
    };
    size_t tail = size < 48 ? size : 48;
    for (size_t k = 0; k <= sizeof texts / sizeof texts[0]; k++) {
        const char *text = k < sizeof texts / sizeof texts[0] ? texts[k] : (const char *)data + size - tail;
        size_t len = k < sizeof texts / sizeof texts[0] ? strlen(text) : tail;
        for (int special = 0; special < 2; special++) {
            kite_error e = {0};
            int32_t *ids;
            size_t n;
            if (kite_tokenizer_encode(t, text, len, special, special, &ids, &n, &e) != KITE_OK) continue;
            char *back;
            size_t back_len;
            if (kite_tokenizer_decode(t, ids, n, &back, &back_len, &e) == KITE_OK) free(back);
            char piece[16];
            for (size_t i = 0; i < n; i++) (void)kite_tokenizer_piece(t, i ? ids[i - 1] : -1, ids[i], piece, sizeof piece);
            for (size_t i = 0; i < n; i++) (void)kite_tokenizer_is_eog(t, ids[i]);
            free(ids);
        }
    }
    (void)kite_tokenizer_piece(t, -1, kite_tokenizer_n_vocab(t), NULL, 0);
    (void)kite_tokenizer_bos(t);
    (void)kite_tokenizer_add_bos(t);
}

#endif
