/* Forced tool calls as a grammar (tool_grammar.h): each tool's parameters schema compiled to GBNF under a
 * rule prefix of its own (t0-, t1-, ...), framed by the format's call markup, the tools as alternatives. */
#include "chat/tool_grammar.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/compile.h"
#include "grammar/compile_internal.h"
#include "grammar/compose.h"

/* Appends "call-<i> ::= PREFIX t<i>-root SUFFIX" and tool i's rules to out. */
static int add_tool(kite_tool_format format, json_t *fn, size_t i, gtext *out, gtext *alts, kite_error *e) {
    const char *name = json_string_value(json_object_get(fn, "name"));
    json_t *params = json_object_get(fn, "parameters");
    char *schema = params && !json_is_null(params) ? json_dumps(params, JSON_COMPACT | JSON_ENCODE_ANY)
                                                    : strdup("{\"type\": \"object\"}");
    if (!schema) return kite_fail(e, KITE_ERR_NOMEM, "out of memory");
    char *gbnf = NULL, *prefixed = NULL, *open = NULL, *close = NULL, *open_lit = NULL, *close_lit = NULL;
    size_t gbnf_len = 0;
    kite_error inner = {0};
    int st = kite_json_schema_to_gbnf(schema, strlen(schema), &gbnf, &gbnf_len, &inner);
    free(schema);
    if (st) {
        kite_fail(e, st, "tools[%zu].function.parameters: %s", i, inner.msg);
        goto done;
    }
    char rule_prefix[32];
    snprintf(rule_prefix, sizeof rule_prefix, "t%zu-", i);
    if ((st = kite_gbnf_prefix_rules(gbnf, gbnf_len, rule_prefix, &prefixed, NULL, e))) goto done;
    if ((st = kite_tool_call_frame(format, name, &open, NULL, &close, &inner))) {
        kite_fail(e, st, "tools[%zu].function.name: %s", i, inner.msg);
        goto done;
    }
    open_lit = kite_gbnf_literal(open, strlen(open));
    close_lit = kite_gbnf_literal(close, strlen(close));
    if (!open_lit || !close_lit) {
        st = kite_fail(e, KITE_ERR_INVALID_ARG, "tools[%zu]: the call markup is not valid UTF-8", i);
        goto done;
    }
    gtext_printf(out, "call-%zu ::= %s t%zu-root %s\n%s\n", i, open_lit, i, close_lit, prefixed);
    gtext_printf(alts, "%scall-%zu", alts->len ? " | " : "", i);
done:
    free(gbnf);
    free(prefixed);
    free(open);
    free(close);
    free(open_lit);
    free(close_lit);
    return st;
}

int kite_tool_grammar(kite_tool_format format, const char *tools_json, const char *force_name, char **gbnf,
                      size_t *gbnf_len, kite_error *e) {
    *gbnf = NULL;
    if (gbnf_len) *gbnf_len = 0;
    json_error_t jerr;
    json_t *tools = tools_json ? json_loads(tools_json, 0, &jerr) : NULL;
    if (!json_is_array(tools)) {
        json_decref(tools);
        return kite_fail(e, KITE_ERR_INVALID_ARG, "tools must be a JSON array of tool definitions");
    }
    gtext out = {0}, alts = {0};
    int st = KITE_OK;
    for (size_t i = 0; i < json_array_size(tools) && !st; i++) {
        json_t *fn = json_object_get(json_array_get(tools, i), "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        if (!name) {
            st = kite_fail(e, KITE_ERR_INVALID_ARG, "tools[%zu].function.name must be a string", i);
            break;
        }
        if (force_name && strcmp(force_name, name)) continue;
        st = add_tool(format, fn, i, &out, &alts, e);
    }
    json_decref(tools);
    if (!st && alts.len == 0)
        st = kite_fail(e, KITE_ERR_INVALID_ARG, force_name ? "no tool is named '%s'" : "there are no tools%s", force_name ? force_name : "");
    if (!st) {
        gtext_printf(&out, "root ::= %s\n", alts.buf);
        st = gtext_check(&out, "tool-call grammar", e);
    }
    gtext_free(&alts);
    if (st) {
        gtext_free(&out);
        return st;
    }
    *gbnf = gtext_take(&out, gbnf_len);
    return KITE_OK;
}
