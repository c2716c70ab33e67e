/* Fuzzes the JSON Schema compiler: the input is schema text. Compiling must never crash or hang; a
 * schema that compiles gives NUL-terminated GBNF of the stated length that kite_gbnf_parse accepts,
 * except for the two faults only the parser checks (recursion with no base case, and a grammar past
 * the parser's size limits). A parsed grammar then runs a short walk through the matcher. A refusal
 * is one line naming where (JSON pointer or line:column). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/compile.h"
#include "grammar/grammar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *gbnf = NULL;
    size_t len = 0;
    kite_error e = {0};
    if (kite_json_schema_to_gbnf((const char *)data, size, &gbnf, &len, &e) != KITE_OK) {
        if (gbnf || !e.msg[0] || strchr(e.msg, '\n')) abort();
        return 0;
    }
    if (!gbnf || strlen(gbnf) != len) abort();
    kite_gbnf *g = NULL;
    if (kite_gbnf_parse(gbnf, len, NULL, &g, &e) != KITE_OK) {
        if (!strstr(e.msg, "can never finish") && !strstr(e.msg, "limit")) abort();
        free(gbnf);
        return 0;
    }
    kite_gmatch *m = NULL;
    if (kite_gmatch_new(g, &m, &e) == KITE_OK) {
        kite_gmatch_limits lim = kite_gmatch_default_limits();
        lim.max_states = 4096;
        lim.max_bytes = 64u << 20;
        kite_gmatch_set_limits(m, &lim);
        /* walk: at each step the lowest allowed byte after the input's next byte (wrapping) */
        int32_t s = kite_gmatch_start(m);
        for (size_t i = 0; i < 256 && s >= 0; i++) {
            uint64_t bits[4];
            kite_gmatch_allowed_bytes(m, s, bits);
            unsigned want = size ? data[i % size] : 0, pick = 256;
            for (unsigned k = 0; k < 256 && pick == 256; k++) {
                unsigned b = (want + k) & 255;
                if (bits[b >> 6] >> (b & 63) & 1) pick = b;
            }
            if (pick == 256) break;
            s = kite_gmatch_step(m, s, (uint8_t)pick);
            if (s == KITE_GSTATE_DEAD) abort(); /* an allowed byte must lead somewhere */
        }
        kite_gmatch_free(m);
    }
    kite_gbnf_free(g);
    free(gbnf);
    return 0;
}
