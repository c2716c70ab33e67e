/* Fuzzes the regex compiler: the input is a pattern. Compiling must never crash or hang; a pattern that
 * compiles gives GBNF that kite_gbnf_parse accepts (a regex has no recursion, so only the parser's size
 * limits may refuse it), and the schema form (the same pattern as a JSON Schema "pattern") compiles and
 * parses the same way. A refusal is one line naming the byte offset. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/compile.h"
#include "grammar/grammar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_parses(const char *gbnf, size_t len) {
    kite_gbnf *g = NULL;
    kite_error e = {0};
    if (kite_gbnf_parse(gbnf, len, NULL, &g, &e) != KITE_OK) {
        if (!strstr(e.msg, "limit")) abort();
        return;
    }
    kite_gmatch *m = NULL;
    if (kite_gmatch_new(g, &m, &e) == KITE_OK) kite_gmatch_free(m);
    kite_gbnf_free(g);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *gbnf = NULL;
    size_t len = 0;
    kite_error e = {0};
    int rc = kite_regex_to_gbnf((const char *)data, size, &gbnf, &len, &e);
    if (rc != KITE_OK) {
        if (gbnf || !strstr(e.msg, "byte") || strchr(e.msg, '\n')) abort();
        return 0;
    }
    if (!gbnf || strlen(gbnf) != len) abort();
    check_parses(gbnf, len);
    free(gbnf);
    /* as a schema pattern (valid UTF-8 without NUL only: jansson reads no \u0000 in schema text) */
    if (memchr(data, 0, size)) return 0;
    json_t *s = json_stringn((const char *)data, size);
    if (!s) return 0;
    json_t *schema = json_pack("{s:s, s:o}", "type", "string", "pattern", s);
    char *text = schema ? json_dumps(schema, JSON_COMPACT) : NULL;
    json_decref(schema);
    if (!text) return 0;
    if (kite_json_schema_to_gbnf(text, strlen(text), &gbnf, &len, &e) == KITE_OK) {
        check_parses(gbnf, len);
        free(gbnf);
    } else if (!strstr(e.msg, "limit") && !strstr(e.msg, "exceed")) {
        abort(); /* the pattern compiled on its own, so it must compile inside a schema */
    }
    free(text);
    return 0;
}
