/* Fuzzes the GBNF parser and the matcher: the input is grammar text, then (after the first NUL byte)
 * bytes to match. Parsing must fail with a one-line message naming a position or succeed; matching must
 * stay within small limits and keep its invariants: a live state accepts or can continue, the bytes
 * kite_gmatch_allowed_bytes reports are exactly those that step to a live state, and a cached step
 * returns what the first step did. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t text_len = nul ? (size_t)(nul - data) : size;
    const uint8_t *subject = nul ? nul + 1 : NULL;
    size_t subject_len = nul ? size - text_len - 1 : 0;
    kite_gbnf *g = NULL;
    kite_error e = {0};
    if (kite_gbnf_parse((const char *)data, text_len, NULL, &g, &e) != KITE_OK) {
        if (g || !e.msg[0] || strchr(e.msg, '\n')) abort();
        return 0;
    }
    kite_gmatch *m = NULL;
    if (kite_gmatch_new(g, &m, &e) != KITE_OK) abort();
    kite_gmatch_limits lim = {.max_stacks_per_state = 256, .max_states = 2048, .max_bytes = 8u << 20};
    kite_gmatch_set_limits(m, &lim);
    int32_t st = kite_gmatch_start(m);
    for (size_t i = 0; st >= 0 && i <= subject_len; i++) {
        if (!kite_gmatch_accepting(m, st) && !kite_gmatch_can_continue(m, st)) abort();
        uint64_t bits[4];
        kite_gmatch_allowed_bytes(m, st, bits);
        if (((bits[0] | bits[1] | bits[2] | bits[3]) != 0) != kite_gmatch_can_continue(m, st)) abort();
        /* check the allowed set against stepping, for the next byte and a couple of others */
        uint8_t probes[3] = {i < subject_len ? subject[i] : 0, (uint8_t)(i * 31 + 7), (uint8_t)(0x80 + i)};
        for (int k = 0; k < 3; k++) {
            int32_t next = kite_gmatch_step(m, st, probes[k]);
            if (next == KITE_GSTATE_LIMIT) {
                if (!kite_gmatch_error(m)->msg[0]) abort();
                continue;
            }
            bool allowed = (bits[probes[k] >> 6] >> (probes[k] & 63)) & 1;
            if ((next >= 0) != allowed) abort();
            if (kite_gmatch_step(m, st, probes[k]) != next) abort();
        }
        if (i == subject_len) break;
        st = kite_gmatch_step(m, st, subject[i]);
    }
    if (kite_gmatch_memory(m) > lim.max_bytes + (1u << 16)) abort();
    kite_gmatch_free(m);
    kite_gbnf_free(g);
    return 0;
}
