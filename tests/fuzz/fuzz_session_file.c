/* Fuzz target: a session file (kite_session_file_parse) against fixed small shapes: 2 layers, 1 KV
 * head, head dim 4, vocabulary 16, f16 or f32, fingerprint 0x0123456789abcdef, at most 64 tokens; the
 * same with 80 bytes of recurrent state (Qwen3.5's) after the K/V; and with layer 1 an LFM2 conv layer
 * (no K/V; the conv rows, 8 f32, of the last 2 positions). The corpus holds valid files of the first
 * shape and broken ones. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "engine/engine.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const kite_session_file_shape shapes[] = {
        {.fingerprint = 0x0123456789abcdefULL, .kv_type = KITE_KV_F16, .n_layers = 2, .n_kv_heads = 1, .head_dim = 4, .n_vocab = 16},
        {.fingerprint = 0x0123456789abcdefULL, .kv_type = KITE_KV_F32, .n_layers = 2, .n_kv_heads = 1, .head_dim = 4, .n_vocab = 16},
        {.fingerprint = 0x0123456789abcdefULL, .kv_type = KITE_KV_F32, .n_layers = 2, .n_kv_heads = 1, .head_dim = 4, .n_vocab = 16,
         .dn_bytes = 80},
        {.fingerprint = 0x0123456789abcdefULL, .kv_type = KITE_KV_F16, .n_layers = 2, .n_kv_heads = 1, .head_dim = 4, .n_vocab = 16,
         .n_conv_layers = 1, .conv_dim = 8, .conv_keep = 2},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        kite_error e = {0};
        kite_session_file_view v;
        if (kite_session_file_parse(data, size, &shapes[i], 64, &v, &e) == KITE_OK) {
            /* Everything the view points at lies inside the input. */
            volatile uint8_t sink = 0;
            const kite_session_file_shape *x = &shapes[i];
            size_t keep = (size_t)(v.n_tokens < x->conv_keep ? v.n_tokens : x->conv_keep);
            size_t kv_bytes = 2 * (size_t)(x->n_layers - x->n_conv_layers) * 1 * (size_t)v.n_tokens * 4 * (x->kv_type == KITE_KV_F32 ? 4 : 2) +
                              (size_t)x->n_conv_layers * keep * (size_t)x->conv_dim * 4;
            for (size_t k = 0; k < 4 * (size_t)v.n_tokens; k++) sink ^= v.tokens[k];
            for (size_t k = 0; k < kv_bytes; k++) sink ^= v.kv[k];
            for (size_t k = 0; v.dn && k < shapes[i].dn_bytes; k++) sink ^= v.dn[k];
            (void)sink;
        }
    }
    return 0;
}
