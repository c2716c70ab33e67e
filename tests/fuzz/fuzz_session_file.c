/* Fuzz target: a session file (kite_session_file_parse) against a fixed small shape: 2 layers, 1 KV
 * head, head dim 4, vocabulary 16, f16, fingerprint 0x0123456789abcdef, at most 64 tokens (and the same
 * in f32, and with 80 bytes of recurrent state, Qwen3.5's, after the K/V). The corpus holds valid files
 * of that shape and broken ones. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "engine/engine.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const kite_session_file_shape shapes[3] = {
        {.fingerprint = 0x0123456789abcdefULL, .kv_type = KITE_KV_F16, .n_layers = 2, .n_kv_heads = 1, .head_dim = 4, .n_vocab = 16},
        {.fingerprint = 0x0123456789abcdefULL, .kv_type = KITE_KV_F32, .n_layers = 2, .n_kv_heads = 1, .head_dim = 4, .n_vocab = 16},
        {.fingerprint = 0x0123456789abcdefULL, .kv_type = KITE_KV_F32, .n_layers = 2, .n_kv_heads = 1, .head_dim = 4, .n_vocab = 16,
         .dn_bytes = 80},
    };
    for (int i = 0; i < 3; i++) {
        kite_error e = {0};
        kite_session_file_view v;
        if (kite_session_file_parse(data, size, &shapes[i], 64, &v, &e) == KITE_OK) {
            /* Everything the view points at lies inside the input. */
            volatile uint8_t sink = 0;
            size_t kv_bytes = 2 * 2 * 1 * (size_t)v.n_tokens * 4 * (i ? 4 : 2);
            for (size_t k = 0; k < 4 * (size_t)v.n_tokens; k++) sink ^= v.tokens[k];
            for (size_t k = 0; k < kv_bytes; k++) sink ^= v.kv[k];
            for (size_t k = 0; v.dn && k < shapes[i].dn_bytes; k++) sink ^= v.dn[k];
            (void)sink;
        }
    }
    return 0;
}
