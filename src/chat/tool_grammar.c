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

/* GBNF for the markup text s: literals, and with control_markers each <|name|> as a token reference
 * (resolved against the vocabulary when the grammar is opened). NULL when s is not UTF-8. */
static char *markup_gbnf(const char *s, bool control_markers) {
    if (!control_markers) return kite_gbnf_literal(s, strlen(s));
    gtext t = {0};
    const char *at = s;
    while (*at) {
        const char *open = strstr(at, "<|"), *close = open ? strstr(open + 2, "|>") : NULL;
        const char *text_end = close ? open : at + strlen(at);
        if (text_end > at) {
            char *lit = kite_gbnf_literal(at, (size_t)(text_end - at));
            if (!lit) return gtext_free(&t), NULL;
            gtext_printf(&t, "%s%s", t.len ? " " : "", lit);
            free(lit);
        }
        if (!close) break;
        gtext_printf(&t, "%s%.*s", t.len ? " " : "", (int)(close + 2 - open), open);
        at = close + 2;
    }
    if (!t.len) gtext_puts(&t, "\"\"");
    if (t.failed) return gtext_free(&t), NULL;
    return gtext_take(&t, NULL);
}

/* Appends "call-<i> ::= PREFIX t<i>-root SUFFIX" and tool i's rules to out. */
static int add_tool(kite_tool_format format, json_t *fn, size_t i, bool control_markers, gtext *out, gtext *alts, kite_error *e) {
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
    open_lit = markup_gbnf(open, control_markers);
    close_lit = markup_gbnf(close, control_markers);
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

/* One call (or, with many, one or more separated by a newline) of force_name or any tool. */
static int tool_grammar(kite_tool_format format, const char *tools_json, const char *force_name, bool many,
                        bool control_markers, char **gbnf, size_t *gbnf_len, kite_error *e) {
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
        st = add_tool(format, fn, i, control_markers, &out, &alts, e);
    }
    json_decref(tools);
    if (!st && alts.len == 0)
        st = kite_fail(e, KITE_ERR_INVALID_ARG, force_name ? "no tool is named '%s'" : "there are no tools%s", force_name ? force_name : "");
    if (!st) {
        if (many) gtext_printf(&out, "root ::= call ( \"\\n\" call )*\ncall ::= %s\n", alts.buf);
        else gtext_printf(&out, "root ::= %s\n", alts.buf);
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

int kite_tool_grammar(kite_tool_format format, const char *tools_json, const char *force_name, char **gbnf,
                      size_t *gbnf_len, kite_error *e) {
    return tool_grammar(format, tools_json, force_name, false, false, gbnf, gbnf_len, e);
}

int kite_tool_grammar_marked(kite_tool_format format, const char *tools_json, const char *force_name, bool control_markers,
                             char **gbnf, size_t *gbnf_len, kite_error *e) {
    return tool_grammar(format, tools_json, force_name, false, control_markers, gbnf, gbnf_len, e);
}

/* What starts a call in each format's text, as the parser (tool_calls.c) recognizes it. */
static size_t call_triggers(kite_tool_format format, const char **triggers, bool *at_start) {
    *at_start = false;
    switch (format) {
    case KITE_TOOL_FORMAT_HERMES: triggers[0] = "<tool_call>"; return 1;
    case KITE_TOOL_FORMAT_MISTRAL:
    case KITE_TOOL_FORMAT_MISTRAL_ARGS: triggers[0] = "[TOOL_CALLS]"; return 1;
    case KITE_TOOL_FORMAT_GRANITE: triggers[0] = "<|tool_call|>"; return 1;
    case KITE_TOOL_FORMAT_COMMAND_R: triggers[0] = "Action:"; return 1;
    case KITE_TOOL_FORMAT_DEEPSEEK:
    case KITE_TOOL_FORMAT_DEEPSEEK_V3_1:
        /* a call block may also open with its first call's marker alone */
        triggers[0] = "<\xef\xbd\x9ctool\xe2\x96\x81""calls\xe2\x96\x81""begin\xef\xbd\x9c>";
        triggers[1] = "<\xef\xbd\x9ctool\xe2\x96\x81""call\xe2\x96\x81""begin\xef\xbd\x9c>";
        return 2;
    case KITE_TOOL_FORMAT_LLAMA3:
    case KITE_TOOL_FORMAT_GENERIC:
        /* the reply is a call when it is a JSON object: any object at its start, whatever its first key */
        *at_start = true;
        triggers[0] = "{";
        return 1;
    default: return 0;
    }
}

/* GLM-4's triggers: "NAME\n" for each tool, at the start. */
static int glm4_triggers(const char *tools_json, const char **triggers, char **owned, size_t *n, bool *at_start, kite_error *e) {
    *n = 0;
    *at_start = true;
    json_t *tools = tools_json ? json_loads(tools_json, 0, NULL) : NULL;
    int st = KITE_OK;
    if (!json_is_array(tools)) st = kite_fail(e, KITE_ERR_INVALID_ARG, "tools must be a JSON array of tool definitions");
    for (size_t i = 0; !st && i < json_array_size(tools); i++) {
        const char *name = json_string_value(json_object_get(json_object_get(json_array_get(tools, i), "function"), "name"));
        if (!name) continue; /* tool_grammar reports it */
        if (*n == KITE_LAZY_MAX_TRIGGERS || strlen(name) + 1 > KITE_LAZY_MAX_TRIGGER_CHARS) {
            st = kite_fail(e, KITE_ERR_UNSUPPORTED, "GLM-4 tool calls under tool_choice auto: at most %d tools with names of at most %d bytes",
                           KITE_LAZY_MAX_TRIGGERS, KITE_LAZY_MAX_TRIGGER_CHARS - 1);
            break;
        }
        size_t len = strlen(name);
        owned[*n] = malloc(len + 2);
        if (!owned[*n]) {
            st = kite_fail(e, KITE_ERR_NOMEM, "out of memory");
            break;
        }
        memcpy(owned[*n], name, len);
        memcpy(owned[*n] + len, "\n", 2);
        triggers[*n] = owned[*n];
        (*n)++;
    }
    json_decref(tools);
    return st;
}

int kite_tool_grammar_lazy(kite_tool_format format, const char *tools_json, bool parallel, char **gbnf, size_t *gbnf_len,
                           kite_error *e) {
    *gbnf = NULL;
    if (gbnf_len) *gbnf_len = 0;
    const char *triggers[KITE_LAZY_MAX_TRIGGERS];
    char *owned[KITE_LAZY_MAX_TRIGGERS] = {0};
    bool at_start;
    size_t n_triggers = call_triggers(format, triggers, &at_start);
    int st = KITE_OK;
    if (format == KITE_TOOL_FORMAT_GLM4) /* a call is a tool's name line at the start of the reply */
        st = glm4_triggers(tools_json, triggers, owned, &n_triggers, &at_start, e);
    if (!st && !n_triggers)
        st = kite_fail(e, KITE_ERR_UNSUPPORTED, "tool-call format '%s' has no lazy grammar", kite_tool_format_name(format));
    char *calls = NULL;
    size_t calls_len = 0;
    if (!st) st = tool_grammar(format, tools_json, NULL, parallel && format == KITE_TOOL_FORMAT_HERMES, false, &calls, &calls_len, e);
    if (!st) st = kite_gbnf_lazy(calls, calls_len, triggers, n_triggers, at_start, gbnf, gbnf_len, e);
    free(calls);
    for (size_t i = 0; i < KITE_LAZY_MAX_TRIGGERS; i++) free(owned[i]);
    return st;
}
