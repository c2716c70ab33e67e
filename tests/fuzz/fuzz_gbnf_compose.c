/* Fuzzes grammar composition: any text renamed under a prefix either fails as unterminated or gives text
 * that parses exactly when the original parses (with its start rule renamed), and both match the same
 * string; a literal of any valid UTF-8 text parses and matches that text. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/compose.h"
#include "grammar/grammar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int32_t run(kite_gmatch *m, const uint8_t *s, size_t n) {
    int32_t st = kite_gmatch_start(m);
    return st < 0 ? st : kite_gmatch_step_bytes(m, st, s, n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 4096) return 0;
    /* text = grammar; after the first NUL, a string to match */
    const uint8_t *nul = memchr(data, 0, size);
    size_t glen = nul ? (size_t)(nul - data) : size;
    const uint8_t *probe = nul ? nul + 1 : data + size;
    size_t plen = nul ? size - glen - 1 : 0;
    char *out = NULL;
    size_t n = 0;
    kite_error e = {0};
    if (kite_gbnf_prefix_rules((const char *)data, glen, "z9-", &out, &n, &e) == KITE_OK) {
        kite_gbnf *a = NULL, *b = NULL;
        kite_error ea = {0}, eb = {0};
        int ra = kite_gbnf_parse((const char *)data, glen, NULL, &a, &ea);
        int rb = kite_gbnf_parse(out, n, "z9-root", &b, &eb);
        if ((ra == KITE_OK) != (rb == KITE_OK)) abort();
        if (ra == KITE_OK) {
            kite_gmatch *ma, *mb;
            if (!kite_gmatch_new(a, &ma, &ea) && !kite_gmatch_new(b, &mb, &eb)) {
                int32_t sa = run(ma, probe, plen), sb = run(mb, probe, plen);
                if (sa != KITE_GSTATE_LIMIT && sb != KITE_GSTATE_LIMIT) {
                    if ((sa >= 0) != (sb >= 0)) abort();
                    if (sa >= 0 && kite_gmatch_accepting(ma, sa) != kite_gmatch_accepting(mb, sb)) abort();
                }
                kite_gmatch_free(ma);
                kite_gmatch_free(mb);
            }
        }
        kite_gbnf_free(a);
        kite_gbnf_free(b);
        free(out);
    }
    /* a literal of the probe (when it is UTF-8) matches exactly the probe */
    char *lit = kite_gbnf_literal((const char *)probe, plen);
    if (lit && plen > 0) {
        size_t ll = strlen(lit);
        char *g = malloc(ll + 16);
        if (g) {
            memcpy(g, "root ::= ", 9);
            memcpy(g + 9, lit, ll + 1);
            kite_gbnf *gb = NULL;
            if (kite_gbnf_parse(g, strlen(g), NULL, &gb, &e) != KITE_OK) abort();
            kite_gmatch *m;
            if (!kite_gmatch_new(gb, &m, &e)) {
                int32_t s = run(m, probe, plen);
                if (s != KITE_GSTATE_LIMIT && !(s >= 0 && kite_gmatch_accepting(m, s))) abort();
                kite_gmatch_free(m);
            }
            kite_gbnf_free(gb);
            free(g);
        }
    }
    free(lit);
    return 0;
}
