/* Fuzzes lazy grammars (compose.h: kite_gbnf_lazy). Input: grammar text, NUL, triggers one per line, NUL,
 * a subject. A refusal is one line; a lazy grammar parses exactly when the grammar does; it accepts any
 * subject that holds no trigger (free text) in the anywhere mode, and any subject that is free text
 * followed by a sentence of the grammar beginning with a trigger. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/compose.h"
#include "grammar/grammar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool holds(const uint8_t *s, size_t n, char **trig, size_t n_trig) {
    for (size_t t = 0; t < n_trig; t++) {
        size_t tl = strlen(trig[t]);
        for (size_t i = 0; i + tl <= n; i++)
            if (!memcmp(s + i, trig[t], tl)) return true;
    }
    return false;
}

static int32_t run(kite_gmatch *m, const uint8_t *s, size_t n) {
    int32_t st = kite_gmatch_start(m);
    return st < 0 ? st : kite_gmatch_step_bytes(m, st, s, n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 4096 || size < 1) return 0;
    bool at_start = data[0] & 1;
    data++, size--;
    const uint8_t *nul = memchr(data, 0, size);
    if (!nul) return 0;
    size_t glen = (size_t)(nul - data);
    const uint8_t *rest = nul + 1;
    size_t rlen = size - glen - 1;
    const uint8_t *nul2 = memchr(rest, 0, rlen);
    size_t tlen = nul2 ? (size_t)(nul2 - rest) : rlen;
    const uint8_t *subject = nul2 ? nul2 + 1 : rest + rlen;
    size_t slen = nul2 ? rlen - tlen - 1 : 0;
    char *tbuf = malloc(tlen + 1);
    if (!tbuf) return 0;
    memcpy(tbuf, rest, tlen);
    tbuf[tlen] = '\0';
    char *trig[KITE_LAZY_MAX_TRIGGERS + 2];
    size_t n_trig = 0;
    for (char *p = tbuf; n_trig < KITE_LAZY_MAX_TRIGGERS + 2;) {
        trig[n_trig++] = p;
        char *nl = strchr(p, '\n');
        if (!nl) break;
        *nl = '\0';
        p = nl + 1;
    }
    char *lazy = NULL;
    size_t n = 0;
    kite_error e = {0};
    if (kite_gbnf_lazy((const char *)data, glen, (const char *const *)trig, n_trig, at_start, &lazy, &n, &e)) {
        if (lazy || !e.msg[0] || strchr(e.msg, '\n')) abort();
        free(tbuf);
        return 0;
    }
    kite_gbnf *orig = NULL, *g = NULL;
    kite_error eo = {0}, el = {0};
    int ro = kite_gbnf_parse((const char *)data, glen, NULL, &orig, &eo);
    int rl = kite_gbnf_parse(lazy, n, NULL, &g, &el);
    if ((ro == KITE_OK) != (rl == KITE_OK)) abort();
    if (rl == KITE_OK) {
        kite_gmatch *m = NULL, *mo = NULL;
        if (!kite_gmatch_new(g, &m, &el) && !kite_gmatch_new(orig, &mo, &eo)) {
            int32_t st = run(m, subject, slen);
            if (!at_start && st != KITE_GSTATE_LIMIT && !holds(subject, slen, trig, n_trig)) {
                /* free text: valid UTF-8 without a trigger is accepted */
                kite_gbnf *any = NULL;
                kite_gmatch *ma = NULL;
                static const char ANY[] = "root ::= .*\n";
                if (!kite_gbnf_parse(ANY, sizeof ANY - 1, NULL, &any, &e) && !kite_gmatch_new(any, &ma, &e)) {
                    int32_t sa = run(ma, subject, slen);
                    if (sa >= 0 && kite_gmatch_accepting(ma, sa) && !(st >= 0 && kite_gmatch_accepting(m, st))) abort();
                }
                kite_gmatch_free(ma);
                kite_gbnf_free(any);
            }
            /* a sentence of the grammar that begins with a trigger is accepted after free text "x" */
            int32_t so = run(mo, subject, slen);
            bool starts = false;
            for (size_t t = 0; t < n_trig && !starts; t++)
                starts = strlen(trig[t]) <= slen && !memcmp(subject, trig[t], strlen(trig[t]));
            if (starts && so >= 0 && kite_gmatch_accepting(mo, so)) {
                int32_t s1 = run(m, subject, slen);
                if (s1 != KITE_GSTATE_LIMIT && !(s1 >= 0 && kite_gmatch_accepting(m, s1))) abort();
            }
        }
        kite_gmatch_free(m);
        kite_gmatch_free(mo);
    }
    kite_gbnf_free(orig);
    kite_gbnf_free(g);
    free(lazy);
    free(tbuf);
    return 0;
}
