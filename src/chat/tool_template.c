/* OpenAI tool shapes rewritten for the templates that read another one (contract in tool_template.h). */
#include "chat/tool_template.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Cohere's parameter_definitions type names (Python's), from a JSON Schema "type". */
static const char *python_type(const json_t *schema) {
    const char *t = json_string_value(json_object_get(schema, "type"));
    if (!t) return "Any";
    if (!strcmp(t, "string")) return "str";
    if (!strcmp(t, "integer")) return "int";
    if (!strcmp(t, "number")) return "float";
    if (!strcmp(t, "boolean")) return "bool";
    if (!strcmp(t, "array")) return "List";
    if (!strcmp(t, "object")) return "Dict";
    return "Any";
}

static bool listed(const json_t *required, const char *name) {
    size_t i;
    json_t *v;
    json_array_foreach(required, i, v) if (json_is_string(v) && !strcmp(json_string_value(v), name)) return true;
    return false;
}

/* Adds name, description and parameter_definitions to each OpenAI tool that has none. */
static bool cohere_tools(json_t *tools) {
    bool changed = false;
    size_t i;
    json_t *tool;
    json_array_foreach(tools, i, tool) {
        json_t *fn = json_object_get(tool, "function");
        if (!json_is_object(tool) || !json_is_object(fn) || json_object_get(tool, "parameter_definitions")) continue;
        json_t *params = json_object_get(fn, "parameters"), *props = json_object_get(params, "properties");
        json_t *required = json_object_get(params, "required"), *defs = json_object();
        const char *key;
        json_t *prop;
        json_object_foreach(props, key, prop) {
            const char *d = json_string_value(json_object_get(prop, "description"));
            json_object_set_new(defs, key, json_pack("{s:s, s:s, s:b}", "description", d ? d : "", "type", python_type(prop),
                                                     "required", listed(required, key)));
        }
        const char *name = json_string_value(json_object_get(fn, "name")), *d = json_string_value(json_object_get(fn, "description"));
        if (!json_object_get(tool, "name")) json_object_set_new(tool, "name", json_string(name ? name : ""));
        if (!json_object_get(tool, "description")) json_object_set_new(tool, "description", json_string(d ? d : ""));
        json_object_set_new(tool, "parameter_definitions", defs);
        changed = true;
    }
    return changed;
}

/* A call's arguments as a JSON value: OpenAI sends a string holding JSON (kept as a string if it is not). */
static json_t *arguments_value(const json_t *fn) {
    json_t *a = json_object_get(fn, "arguments");
    if (json_is_string(a)) {
        json_t *v = json_loads(json_string_value(a), JSON_DECODE_ANY, NULL);
        return v ? v : json_incref(a);
    }
    return a ? json_incref(a) : json_object();
}

static char *arguments_text(const json_t *fn) {
    json_t *a = json_object_get(fn, "arguments");
    if (json_is_string(a)) return strdup(json_string_value(a));
    return json_dumps(a ? a : json_object(), JSON_COMPACT | JSON_ENCODE_ANY);
}

static bool cohere_messages(json_t *messages) {
    bool changed = false;
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        json_t *calls = json_object_get(m, "tool_calls"), *content = json_object_get(m, "content");
        if (role && !strcmp(role, "assistant") && json_is_array(calls) && json_array_size(calls)) {
            json_t *list = json_array();
            size_t k;
            json_t *c;
            json_array_foreach(calls, k, c) {
                json_t *fn = json_object_get(c, "function");
                const char *name = json_string_value(json_object_get(fn, "name"));
                json_array_append_new(list, json_pack("{s:s, s:o}", "tool_name", name ? name : "", "parameters", arguments_value(fn)));
            }
            char *action = json_dumps(list, JSON_INDENT(4) | JSON_ENCODE_ANY);
            json_decref(list);
            if (!action) continue;
            const char *text = json_is_string(content) ? json_string_value(content) : "";
            size_t n = strlen(text) + strlen(action) + 32;
            char *joined = malloc(n);
            if (joined) {
                snprintf(joined, n, "%s%sAction: ```json\n%s\n```", text, *text ? "\n" : "", action);
                json_object_set_new(m, "content", json_string(joined));
                changed = true;
            }
            free(joined);
            free(action);
        } else if (role && !strcmp(role, "tool") && json_is_string(content)) {
            const char *text = json_string_value(content);
            size_t n = strlen(text) + 32;
            char *wrapped = malloc(n);
            if (!wrapped) continue;
            snprintf(wrapped, n, "<results>\n%s\n</results>", text);
            json_object_set_new(m, "role", json_string("system"));
            json_object_set_new(m, "content", json_string(wrapped));
            free(wrapped);
            changed = true;
        }
    }
    return changed;
}

static bool glm4_messages(json_t *messages, json_t *tools) {
    bool changed = false, carried = false;
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m) if (json_object_get(m, "tools")) carried = true;
    if (!carried && json_array_size(tools) && json_is_object(json_array_get(messages, 0))) {
        json_object_set(json_array_get(messages, 0), "tools", tools);
        changed = true;
    }
    for (i = 0; i < json_array_size(messages); i++) {
        m = json_array_get(messages, i);
        const char *role = json_string_value(json_object_get(m, "role"));
        json_t *calls = json_object_get(m, "tool_calls"), *content = json_object_get(m, "content");
        if (role && !strcmp(role, "tool")) {
            json_object_set_new(m, "role", json_string("observation"));
            changed = true;
        } else if (role && !strcmp(role, "assistant") && json_is_array(calls) && json_array_size(calls)) {
            /* the turn's text (if any) stays; each call follows as its own assistant message */
            json_incref(calls);
            bool has_text = json_is_string(content) && json_string_length(content);
            if (has_text) json_object_del(m, "tool_calls");
            else json_array_remove(messages, i--);
            size_t at = i + 1, k;
            json_t *c;
            json_array_foreach(calls, k, c) {
                json_t *fn = json_object_get(c, "function");
                const char *name = json_string_value(json_object_get(fn, "name"));
                char *args = arguments_text(fn);
                json_array_insert_new(messages, at++,
                                      json_pack("{s:s, s:s, s:s}", "role", "assistant", "metadata", name ? name : "", "content",
                                                args ? args : "{}"));
                free(args);
            }
            i = at - 1;
            json_decref(calls);
            changed = true;
        }
    }
    return changed;
}

int kite_tool_template_inputs(kite_tool_format format, const char *messages_json, const char *tools_json, char **messages_out,
                              char **tools_out, kite_error *e) {
    *messages_out = NULL;
    *tools_out = NULL;
    if (format != KITE_TOOL_FORMAT_COMMAND_R && format != KITE_TOOL_FORMAT_GLM4) return KITE_OK;
    json_t *messages = messages_json ? json_loads(messages_json, 0, NULL) : NULL;
    json_t *tools = tools_json ? json_loads(tools_json, 0, NULL) : NULL;
    if (!json_is_array(messages) || (tools && !json_is_array(tools))) {
        json_decref(messages);
        json_decref(tools);
        return KITE_OK;
    }
    bool messages_changed, tools_changed = false;
    if (format == KITE_TOOL_FORMAT_COMMAND_R) {
        tools_changed = tools && cohere_tools(tools);
        messages_changed = cohere_messages(messages);
    } else {
        messages_changed = glm4_messages(messages, tools);
    }
    int rc = KITE_OK;
    if (messages_changed && !(*messages_out = json_dumps(messages, JSON_COMPACT))) rc = KITE_ERR_NOMEM;
    if (tools_changed && !(*tools_out = json_dumps(tools, JSON_COMPACT))) rc = KITE_ERR_NOMEM;
    json_decref(messages);
    json_decref(tools);
    if (rc) {
        free(*messages_out);
        free(*tools_out);
        *messages_out = *tools_out = NULL;
        return kite_fail(e, rc, "tool template inputs: out of memory");
    }
    return KITE_OK;
}
