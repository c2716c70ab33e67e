/* OpenAI request parsing: jansson does the JSON, this file the shape and the ranges (see openai.h). */
#include "serve/openai.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

kite_openai_limits kite_openai_default_limits(void) {
    return (kite_openai_limits){
        .max_json_depth = 64, .max_messages = 1024, .max_stop = 16, .max_stop_bytes = 256, .max_logit_bias = 1024};
}

int kite_openai_set_error(kite_openai_error *error, int http_status, const char *type, const char *param,
                          const char *code, const char *fmt, ...) {
    if (!error) return http_status;
    error->http_status = http_status;
    snprintf(error->type, sizeof error->type, "%s", type ? type : "invalid_request_error");
    snprintf(error->param, sizeof error->param, "%s", param ? param : "");
    snprintf(error->code, sizeof error->code, "%s", code ? code : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(error->message, sizeof error->message, fmt, ap);
    va_end(ap);
    return http_status;
}

#define BAD_PARAM(param, ...) kite_openai_set_error(error, 400, "invalid_request_error", param, NULL, __VA_ARGS__)

int32_t kite_openai_json_depth(const char *text, size_t len, int32_t limit) {
    int32_t depth = 0, deepest = 0;
    bool in_string = false;
    for (size_t i = 0; i < len; i++) {
        char c = text[i];
        if (in_string) {
            if (c == '\\') i++; /* the escaped character can be neither a quote nor the end of the string */
            else if (c == '"') in_string = false;
            continue;
        }
        if (c == '"') in_string = true;
        else if (c == '[' || c == '{') {
            if (++depth > deepest) deepest = depth;
            if (deepest > limit) return limit + 1;
        } else if (c == ']' || c == '}') {
            depth--;
        }
    }
    return deepest;
}

/* A present field: NULL when absent or null (OpenAI treats an explicit null as "not given"). */
static json_t *field(json_t *obj, const char *key) {
    json_t *v = json_object_get(obj, key);
    return json_is_null(v) ? NULL : v;
}

/* An integer-valued number (jansson reads 3.0 as a real) within [lo, hi]. Returns 0 when absent. */
static int get_int(json_t *root, const char *key, long long lo, long long hi, long long *out, bool *present,
                   kite_openai_error *error) {
    json_t *v = field(root, key);
    *present = false;
    if (!v) return 0;
    long long x;
    if (json_is_integer(v)) {
        x = json_integer_value(v);
    } else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) && fabs(json_real_value(v)) < 9e15) {
        x = (long long)json_real_value(v);
    } else {
        return BAD_PARAM(key, "'%s' must be an integer", key);
    }
    if (x < lo || x > hi) return BAD_PARAM(key, "'%s' must be between %lld and %lld, got %lld", key, lo, hi, x);
    *out = x;
    *present = true;
    return 0;
}

/* A number within [lo, hi]; *out stays NAN when absent. */
static int get_float(json_t *root, const char *key, double lo, double hi, bool lo_open, float *out,
                     kite_openai_error *error) {
    json_t *v = field(root, key);
    if (!v) return 0;
    if (!json_is_number(v)) return BAD_PARAM(key, "'%s' must be a number", key);
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi) || (lo_open && x == lo))
        return BAD_PARAM(key, "'%s' must be %s %g and <= %g, got %g", key, lo_open ? ">" : ">=", lo, hi, x);
    *out = (float)x;
    return 0;
}

static int get_bool(json_t *root, const char *key, bool *out, kite_openai_error *error) {
    json_t *v = field(root, key);
    if (!v) return 0;
    if (!json_is_boolean(v)) return BAD_PARAM(key, "'%s' must be a boolean", key);
    *out = json_is_true(v);
    return 0;
}

static char *dup_bytes(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

#define NOMEM() kite_openai_set_error(error, 500, "server_error", NULL, NULL, "out of memory")

/* An assistant message's tool_calls as OpenAI sends them ({"id", "type": "function", "function": {"name",
 * "arguments": a JSON text}}) get their arguments parsed into a JSON value, since templates write them
 * with tojson (Hugging Face's convention: arguments are a mapping), as llama.cpp's server does too;
 * arguments that are not valid JSON stay the string they were. */
static int normalize_tool_calls(json_t *msg, size_t index, int32_t max_depth, kite_openai_error *error) {
    json_t *calls = json_object_get(msg, "tool_calls");
    if (!calls || json_is_null(calls)) return 0;
    char param[64];
    snprintf(param, sizeof param, "messages[%zu].tool_calls", index);
    if (!json_is_array(calls)) return BAD_PARAM(param, "'%s' must be an array", param);
    json_t *copy = json_deep_copy(calls);
    if (!copy || json_object_set_new(msg, "tool_calls", copy)) return NOMEM();
    for (size_t i = 0; i < json_array_size(copy); i++) {
        json_t *call = json_array_get(copy, i);
        snprintf(param, sizeof param, "messages[%zu].tool_calls[%zu]", index, i);
        json_t *fn = json_is_object(call) ? json_object_get(call, "function") : NULL;
        if (!json_is_object(fn) || !json_is_string(json_object_get(fn, "name")))
            return BAD_PARAM(param, "'%s' must be {\"type\": \"function\", \"function\": {\"name\", \"arguments\"}}", param);
        json_t *args = json_object_get(fn, "arguments");
        /* jansson recurses once per level: the nesting inside the string is bounded first, like the body's */
        if (json_is_string(args) && kite_openai_json_depth(json_string_value(args), json_string_length(args), max_depth) <= max_depth) {
            json_t *parsed = json_loadb(json_string_value(args), json_string_length(args), JSON_DECODE_ANY, NULL);
            if (parsed && json_object_set_new(fn, "arguments", parsed)) return NOMEM();
        }
    }
    return 0;
}

/* messages: an array of {role, content (string | null | text parts), ...}, rewritten so every content
 * is a string (templates index content as a string) and "developer" reads "system". */
static int parse_messages(json_t *root, const kite_openai_limits *limits, kite_openai_request *req,
                          kite_openai_error *error) {
    json_t *messages = field(root, "messages");
    if (!messages) return BAD_PARAM("messages", "'messages' is required");
    if (!json_is_array(messages)) return BAD_PARAM("messages", "'messages' must be an array");
    size_t n = json_array_size(messages);
    if (n == 0) return BAD_PARAM("messages", "'messages' must hold at least one message");
    if (n > (size_t)limits->max_messages)
        return BAD_PARAM("messages", "'messages' holds %zu messages; this server accepts at most %d", n,
                         limits->max_messages);
    json_t *out = json_array();
    if (!out) return NOMEM();
    char param[64];
    for (size_t i = 0; i < n; i++) {
        json_t *msg = json_array_get(messages, i);
        snprintf(param, sizeof param, "messages[%zu]", i);
        if (!json_is_object(msg)) {
            json_decref(out);
            return BAD_PARAM(param, "'%s' must be an object", param);
        }
        json_t *role = json_object_get(msg, "role");
        snprintf(param, sizeof param, "messages[%zu].role", i);
        if (!json_is_string(role)) {
            json_decref(out);
            return BAD_PARAM(param, "'%s' must be one of 'system', 'developer', 'user', 'assistant', 'tool'", param);
        }
        const char *r = json_string_value(role);
        if (strcmp(r, "system") && strcmp(r, "developer") && strcmp(r, "user") && strcmp(r, "assistant") &&
            strcmp(r, "tool")) {
            json_decref(out);
            return BAD_PARAM(param, "'%s' must be one of 'system', 'developer', 'user', 'assistant', 'tool', got '%.40s'",
                             param, r);
        }
        json_t *copy = json_copy(msg); /* shallow: the other keys (name, tool_calls, ...) go to the template as given */
        if (!copy || json_array_append_new(out, copy)) {
            json_decref(out);
            return NOMEM();
        }
        if (!strcmp(r, "developer")) json_object_set_new(copy, "role", json_string("system"));
        int rc = normalize_tool_calls(copy, i, limits->max_json_depth, error);
        if (rc) {
            json_decref(out);
            return rc;
        }
        json_t *content = json_object_get(msg, "content");
        snprintf(param, sizeof param, "messages[%zu].content", i);
        if (json_is_string(content)) continue;
        if (!content || json_is_null(content)) {
            /* An assistant turn that only calls tools has no content: templates get "" (most of them
             * trim or concatenate content, which a null breaks; "" tests false like a null) */
            if (!strcmp(r, "assistant") && json_object_get(msg, "tool_calls")) {
                json_object_set_new(copy, "content", json_string(""));
                continue;
            }
            json_decref(out);
            return BAD_PARAM(param, "'%s' is required: a string or an array of text parts", param);
        }
        if (!json_is_array(content)) {
            json_decref(out);
            return BAD_PARAM(param, "'%s' must be a string or an array of text parts", param);
        }
        size_t total = 0, n_parts = json_array_size(content);
        for (size_t p = 0; p < n_parts; p++) {
            json_t *part = json_array_get(content, p);
            json_t *type = json_is_object(part) ? json_object_get(part, "type") : NULL;
            json_t *text = json_is_object(part) ? json_object_get(part, "text") : NULL;
            snprintf(param, sizeof param, "messages[%zu].content[%zu]", i, p);
            if (!json_is_string(type)) {
                json_decref(out);
                return BAD_PARAM(param, "'%s' must be an object with a 'type'", param);
            }
            if (strcmp(json_string_value(type), "text")) {
                json_decref(out);
                return BAD_PARAM(param, "'%s' has type '%.40s'; this server accepts only 'text' parts", param,
                                 json_string_value(type));
            }
            if (!json_is_string(text)) {
                json_decref(out);
                return BAD_PARAM(param, "'%s.text' must be a string", param);
            }
            total += json_string_length(text);
        }
        char *joined = malloc(total + 1);
        if (!joined) {
            json_decref(out);
            return NOMEM();
        }
        size_t at = 0;
        for (size_t p = 0; p < n_parts; p++) {
            json_t *text = json_object_get(json_array_get(content, p), "text");
            memcpy(joined + at, json_string_value(text), json_string_length(text));
            at += json_string_length(text);
        }
        json_t *s = json_stringn_nocheck(joined, total); /* parts were valid UTF-8, so is their join */
        free(joined);
        if (!s || json_object_set_new(copy, "content", s)) {
            json_decref(out);
            return NOMEM();
        }
    }
    req->messages_json = json_dumps(out, JSON_COMPACT);
    req->n_messages = n;
    json_decref(out);
    if (!req->messages_json) return NOMEM();

    json_t *kwargs = field(root, "chat_template_kwargs");
    if (kwargs) {
        if (!json_is_object(kwargs)) return BAD_PARAM("chat_template_kwargs", "'chat_template_kwargs' must be an object");
        req->kwargs_json = json_dumps(kwargs, JSON_COMPACT);
        if (!req->kwargs_json) return NOMEM();
    }
    return 0;
}

static int parse_id_list(json_t *list, const char *param, kite_openai_request *req, kite_openai_error *error) {
    size_t n = json_array_size(list);
    req->prompt_ids = malloc((n ? n : 1) * sizeof *req->prompt_ids);
    if (!req->prompt_ids) return NOMEM();
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(list, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX)
            return BAD_PARAM(param, "'%s' must hold token ids (non-negative integers)", param);
        req->prompt_ids[i] = (int32_t)json_integer_value(v);
    }
    req->n_prompt_ids = n;
    return 0;
}

/* prompt: a string, a list of one string, a list of token ids, or a list of one list of token ids. */
static int parse_prompt(json_t *root, kite_openai_request *req, kite_openai_error *error) {
    json_t *prompt = field(root, "prompt");
    if (!prompt) return BAD_PARAM("prompt", "'prompt' is required");
    if (json_is_array(prompt)) {
        size_t n = json_array_size(prompt);
        if (n == 0) return BAD_PARAM("prompt", "'prompt' must not be empty");
        json_t *first = json_array_get(prompt, 0);
        if (json_is_integer(first)) return parse_id_list(prompt, "prompt", req, error);
        if (n > 1)
            return BAD_PARAM("prompt", "'prompt' holds %zu prompts; this server takes one prompt per request", n);
        if (json_is_array(first)) {
            if (json_array_size(first) == 0) return BAD_PARAM("prompt", "'prompt' must not be empty");
            return parse_id_list(first, "prompt", req, error);
        }
        prompt = first;
    }
    if (!json_is_string(prompt))
        return BAD_PARAM("prompt", "'prompt' must be a string, a list of one string, or a list of token ids");
    req->prompt_len = json_string_length(prompt);
    req->prompt_text = dup_bytes(json_string_value(prompt), req->prompt_len);
    return req->prompt_text ? 0 : NOMEM();
}

static int parse_stop(json_t *root, const kite_openai_limits *limits, kite_openai_request *req,
                      kite_openai_error *error) {
    json_t *stop = field(root, "stop");
    if (!stop) return 0;
    size_t n = json_is_array(stop) ? json_array_size(stop) : 1;
    if (!json_is_string(stop) && !json_is_array(stop))
        return BAD_PARAM("stop", "'stop' must be a string or an array of strings");
    if (n > (size_t)limits->max_stop)
        return BAD_PARAM("stop", "'stop' holds %zu strings; this server accepts at most %d", n, limits->max_stop);
    req->stop = calloc(n ? n : 1, sizeof *req->stop);
    if (!req->stop) return NOMEM();
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_is_array(stop) ? json_array_get(stop, i) : stop;
        if (!json_is_string(s)) return BAD_PARAM("stop", "'stop' must be a string or an array of strings");
        size_t len = json_string_length(s);
        if (len == 0) return BAD_PARAM("stop", "'stop' strings must not be empty");
        if (len > (size_t)limits->max_stop_bytes)
            return BAD_PARAM("stop", "'stop' strings must be at most %d bytes", limits->max_stop_bytes);
        if (memchr(json_string_value(s), 0, len)) return BAD_PARAM("stop", "'stop' strings must not hold NUL");
        req->stop[i] = dup_bytes(json_string_value(s), len);
        if (!req->stop[i]) return NOMEM();
        req->n_stop = i + 1;
    }
    return 0;
}

static int parse_logit_bias(json_t *root, const kite_openai_limits *limits, kite_openai_request *req,
                            kite_openai_error *error) {
    json_t *bias = field(root, "logit_bias");
    if (!bias) return 0;
    if (!json_is_object(bias)) return BAD_PARAM("logit_bias", "'logit_bias' must be an object of token id -> bias");
    size_t n = json_object_size(bias);
    if (n > (size_t)limits->max_logit_bias)
        return BAD_PARAM("logit_bias", "'logit_bias' holds %zu entries; this server accepts at most %d", n,
                         limits->max_logit_bias);
    req->logit_bias = calloc(n ? n : 1, sizeof *req->logit_bias);
    if (!req->logit_bias) return NOMEM();
    const char *key;
    json_t *value;
    json_object_foreach(bias, key, value) {
        char *end;
        long long id = strtoll(key, &end, 10);
        if (end == key || *end || key[0] == '-' || key[0] == '+' || key[0] == ' ' || id > INT32_MAX)
            return BAD_PARAM("logit_bias", "'logit_bias' keys must be token ids, got '%.40s'", key);
        if (!json_is_number(value) || !(json_number_value(value) >= -100 && json_number_value(value) <= 100))
            return BAD_PARAM("logit_bias", "'logit_bias' values must be numbers between -100 and 100");
        req->logit_bias[req->n_logit_bias++] = (kite_logit_bias){.token = (int32_t)id, .bias = (float)json_number_value(value)};
    }
    return 0;
}

/* A function name as OpenAI accepts them: 1..64 of [a-zA-Z0-9_-] (a name is pasted into grammars and
 * templates, so nothing else gets through). */
static bool valid_tool_name(const char *name, size_t len) {
    if (len == 0 || len > 64) return false;
    for (size_t i = 0; i < len; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return false;
    }
    return true;
}

/* tools: [{"type": "function", "function": {"name", "description"?, "parameters"? (a JSON Schema object),
 * "strict"?}}]; tool_choice: "none" | "auto" | "required" | {"type": "function", "function": {"name"}};
 * parallel_tool_calls: a boolean. */
static int parse_tools(json_t *root, const kite_openai_limits *limits, kite_openai_request *req,
                       kite_openai_error *error) {
    req->parallel_tool_calls = true;
    int rc = get_bool(root, "parallel_tool_calls", &req->parallel_tool_calls, error);
    if (rc) return rc;
    json_t *tools = field(root, "tools");
    json_t *choice = field(root, "tool_choice");
    char param[64];
    if (tools) {
        if (!json_is_array(tools)) return BAD_PARAM("tools", "'tools' must be an array of tool definitions");
        size_t n = json_array_size(tools);
        if (n > (size_t)limits->max_messages)
            return BAD_PARAM("tools", "'tools' holds %zu tools; this server accepts at most %d", n, limits->max_messages);
        req->tool_names = calloc(n ? n : 1, sizeof *req->tool_names);
        if (!req->tool_names) return NOMEM();
        for (size_t i = 0; i < n; i++) {
            json_t *tool = json_array_get(tools, i);
            snprintf(param, sizeof param, "tools[%zu]", i);
            json_t *type = json_is_object(tool) ? json_object_get(tool, "type") : NULL;
            if (!json_is_string(type) || strcmp(json_string_value(type), "function"))
                return BAD_PARAM(param, "'%s' must be an object with \"type\": \"function\"", param);
            json_t *fn = json_object_get(tool, "function");
            snprintf(param, sizeof param, "tools[%zu].function", i);
            if (!json_is_object(fn)) return BAD_PARAM(param, "'%s' must be an object", param);
            json_t *name = json_object_get(fn, "name");
            snprintf(param, sizeof param, "tools[%zu].function.name", i);
            if (!json_is_string(name) || !valid_tool_name(json_string_value(name), json_string_length(name)))
                return BAD_PARAM(param, "'%s' must be a string of 1 to 64 letters, digits, '_' or '-'", param);
            for (size_t k = 0; k < i; k++)
                if (!strcmp(req->tool_names[k], json_string_value(name)))
                    return BAD_PARAM(param, "'%s': two tools are named '%s'", param, json_string_value(name));
            json_t *parameters = field(fn, "parameters");
            snprintf(param, sizeof param, "tools[%zu].function.parameters", i);
            if (parameters && !json_is_object(parameters))
                return BAD_PARAM(param, "'%s' must be a JSON Schema object", param);
            json_t *description = field(fn, "description");
            snprintf(param, sizeof param, "tools[%zu].function.description", i);
            if (description && !json_is_string(description)) return BAD_PARAM(param, "'%s' must be a string", param);
            req->tool_names[i] = dup_bytes(json_string_value(name), json_string_length(name));
            if (!req->tool_names[i]) return NOMEM();
            req->n_tools = i + 1;
        }
        if (n > 0) {
            req->tools_json = json_dumps(tools, JSON_COMPACT);
            if (!req->tools_json) return NOMEM();
        }
    }
    if (!choice) return 0;
    if (json_is_string(choice)) {
        const char *c = json_string_value(choice);
        if (!strcmp(c, "none")) req->tool_choice = KITE_OPENAI_TOOLS_NONE;
        else if (!strcmp(c, "auto")) req->tool_choice = KITE_OPENAI_TOOLS_AUTO;
        else if (!strcmp(c, "required")) req->tool_choice = KITE_OPENAI_TOOLS_REQUIRED;
        else return BAD_PARAM("tool_choice", "'tool_choice' must be 'none', 'auto', 'required' or a function, got '%.40s'", c);
    } else if (json_is_object(choice)) {
        json_t *fn = json_object_get(choice, "function");
        json_t *name = json_is_object(fn) ? json_object_get(fn, "name") : NULL;
        if (!json_is_string(name))
            return BAD_PARAM("tool_choice", "'tool_choice' must be {\"type\": \"function\", \"function\": {\"name\": ...}}");
        size_t k = 0;
        while (k < req->n_tools && strcmp(req->tool_names[k], json_string_value(name))) k++;
        if (k == req->n_tools)
            return BAD_PARAM("tool_choice", "'tool_choice' names the function '%.64s', which is not among 'tools'",
                             json_string_value(name));
        req->tool_choice = KITE_OPENAI_TOOLS_NAMED;
        req->tool_choice_name = dup_bytes(json_string_value(name), json_string_length(name));
        if (!req->tool_choice_name) return NOMEM();
    } else {
        return BAD_PARAM("tool_choice", "'tool_choice' must be a string or an object");
    }
    if (req->tool_choice >= KITE_OPENAI_TOOLS_REQUIRED && req->n_tools == 0)
        return BAD_PARAM("tool_choice", "'tool_choice' asks for a tool call, but 'tools' is empty");
    return 0;
}

/* response_format, and the "grammar" / "json_schema" extensions llama.cpp's server reads too: at most one. */
static int parse_format(json_t *root, kite_openai_request *req, kite_openai_error *error) {
    json_t *format = field(root, "response_format");
    json_t *grammar = field(root, "grammar");
    json_t *schema = field(root, "json_schema");
    int given = (format != NULL) + (grammar != NULL) + (schema != NULL);
    if (given > 1) return BAD_PARAM(grammar ? "grammar" : "json_schema", "give one of 'response_format', 'grammar' and 'json_schema'");
    if (grammar) {
        if (!json_is_string(grammar) || json_string_length(grammar) == 0)
            return BAD_PARAM("grammar", "'grammar' must be a non-empty string of GBNF");
        req->format = KITE_OPENAI_FORMAT_GRAMMAR;
        req->format_text = dup_bytes(json_string_value(grammar), json_string_length(grammar));
        return req->format_text ? 0 : NOMEM();
    }
    if (format) {
        json_t *type = json_is_object(format) ? json_object_get(format, "type") : NULL;
        if (!json_is_string(type))
            return BAD_PARAM("response_format", "'response_format' must be an object with a 'type'");
        const char *t = json_string_value(type);
        if (!strcmp(t, "text")) return 0;
        if (!strcmp(t, "json_object")) {
            req->format = KITE_OPENAI_FORMAT_JSON_OBJECT;
            return 0;
        }
        if (strcmp(t, "json_schema"))
            return BAD_PARAM("response_format.type", "'response_format.type' must be 'text', 'json_object' or 'json_schema', got '%.40s'", t);
        json_t *js = json_object_get(format, "json_schema");
        if (!json_is_object(js))
            return BAD_PARAM("response_format.json_schema", "'response_format.json_schema' must be an object with a 'schema'");
        json_t *name = field(js, "name");
        if (name && !json_is_string(name))
            return BAD_PARAM("response_format.json_schema.name", "'response_format.json_schema.name' must be a string");
        json_t *strict = field(js, "strict");
        if (strict && !json_is_boolean(strict))
            return BAD_PARAM("response_format.json_schema.strict", "'response_format.json_schema.strict' must be a boolean");
        if (name) {
            req->format_name = dup_bytes(json_string_value(name), json_string_length(name));
            if (!req->format_name) return NOMEM();
        }
        schema = field(js, "schema");
        if (!schema) { /* OpenAI requires it; without one any JSON object will do */
            req->format = KITE_OPENAI_FORMAT_JSON_OBJECT;
            return 0;
        }
        if (!json_is_object(schema) && !json_is_boolean(schema))
            return BAD_PARAM("response_format.json_schema.schema", "'response_format.json_schema.schema' must be a JSON Schema object");
    } else if (schema && !json_is_object(schema) && !json_is_boolean(schema)) {
        return BAD_PARAM("json_schema", "'json_schema' must be a JSON Schema object");
    }
    if (!schema) return 0;
    req->format = KITE_OPENAI_FORMAT_JSON_SCHEMA;
    req->format_text = json_dumps(schema, JSON_COMPACT | JSON_ENCODE_ANY);
    return req->format_text ? 0 : NOMEM();
}

static int parse_fields(kite_openai_endpoint endpoint, json_t *root, const kite_openai_limits *limits,
                        kite_openai_request *req, kite_openai_error *error) {
    int rc;
    bool present;
    long long v;
    json_t *model = field(root, "model");
    if (model) {
        if (!json_is_string(model)) return BAD_PARAM("model", "'model' must be a string");
        req->model = dup_bytes(json_string_value(model), json_string_length(model));
        if (!req->model) return NOMEM();
    }
    if (endpoint == KITE_OPENAI_CHAT) {
        if ((rc = parse_messages(root, limits, req, error))) return rc;
    } else {
        if ((rc = parse_prompt(root, req, error))) return rc;
        if ((rc = get_bool(root, "parse_special", &req->parse_special, error))) return rc;
    }
    if ((rc = get_int(root, "max_tokens", 1, INT32_MAX, &v, &present, error))) return rc;
    if (present) req->max_tokens = (int32_t)v;
    if ((rc = get_int(root, "max_completion_tokens", 1, INT32_MAX, &v, &present, error))) return rc;
    if (present) req->max_tokens = (int32_t)v;
    if ((rc = get_int(root, "n", 1, 1, &v, &present, error))) {
        if (error) snprintf(error->message, sizeof error->message, "'n' must be 1: this server returns one choice per request");
        return rc;
    }
    if ((rc = get_float(root, "temperature", 0, 2, false, &req->temperature, error))) return rc;
    if ((rc = get_float(root, "top_p", 0, 1, false, &req->top_p, error))) return rc;
    if ((rc = get_int(root, "top_k", 0, INT32_MAX, &v, &present, error))) return rc;
    if (present) req->top_k = (int32_t)v;
    if ((rc = get_float(root, "min_p", 0, 1, false, &req->min_p, error))) return rc;
    if ((rc = get_float(root, "presence_penalty", -2, 2, false, &req->presence_penalty, error))) return rc;
    if ((rc = get_float(root, "frequency_penalty", -2, 2, false, &req->frequency_penalty, error))) return rc;
    if ((rc = get_float(root, "repeat_penalty", 0, 10, true, &req->repetition_penalty, error))) return rc;
    if ((rc = get_float(root, "repetition_penalty", 0, 10, true, &req->repetition_penalty, error))) return rc;
    json_t *seed = field(root, "seed");
    if (seed) {
        if (!json_is_integer(seed)) return BAD_PARAM("seed", "'seed' must be an integer");
        req->seed = (uint64_t)json_integer_value(seed);
        req->has_seed = true;
    }
    if ((rc = parse_stop(root, limits, req, error))) return rc;
    if ((rc = parse_logit_bias(root, limits, req, error))) return rc;
    if ((rc = get_bool(root, "ignore_eos", &req->ignore_eos, error))) return rc;
    if ((rc = get_bool(root, "skip_special_tokens", &req->skip_special_tokens, error))) return rc;
    if ((rc = get_bool(root, "return_token_ids", &req->return_token_ids, error))) return rc;
    if ((rc = get_bool(root, "stream", &req->stream, error))) return rc;
    json_t *options = field(root, "stream_options");
    if (options) {
        if (!json_is_object(options)) return BAD_PARAM("stream_options", "'stream_options' must be an object");
        json_t *usage = field(options, "include_usage");
        if (usage && !json_is_boolean(usage))
            return BAD_PARAM("stream_options.include_usage", "'stream_options.include_usage' must be a boolean");
        req->include_usage = json_is_true(usage);
    }
    if ((rc = parse_format(root, req, error))) return rc;
    if (endpoint == KITE_OPENAI_CHAT && (rc = parse_tools(root, limits, req, error))) return rc;
    if (req->tool_choice >= KITE_OPENAI_TOOLS_REQUIRED && req->format != KITE_OPENAI_FORMAT_TEXT)
        return BAD_PARAM("tool_choice", "a required tool call cannot be combined with 'response_format' or 'grammar'");
    json_t *user = field(root, "user");
    if (user && !json_is_string(user)) return BAD_PARAM("user", "'user' must be a string");

    if (endpoint == KITE_OPENAI_CHAT) {
        if ((rc = get_bool(root, "logprobs", &req->logprobs, error))) return rc;
        if ((rc = get_int(root, "top_logprobs", 0, KITE_MAX_TOP_LOGPROBS, &v, &present, error))) return rc;
        if (present) {
            if (!req->logprobs) return BAD_PARAM("top_logprobs", "'top_logprobs' needs 'logprobs' set to true");
            req->top_logprobs = (int32_t)v;
        }
    } else {
        /* completions: logprobs is the number of alternatives (0 = the chosen token's only) */
        if ((rc = get_int(root, "logprobs", 0, KITE_MAX_TOP_LOGPROBS, &v, &present, error))) return rc;
        if (present) {
            req->logprobs = true;
            req->top_logprobs = (int32_t)v;
        }
        bool echo = false;
        if ((rc = get_bool(root, "echo", &echo, error))) return rc;
        if (echo) return BAD_PARAM("echo", "'echo' is not supported by this server");
        json_t *suffix = field(root, "suffix");
        if (suffix) return BAD_PARAM("suffix", "'suffix' is not supported by this server");
        if ((rc = get_int(root, "best_of", 1, 1, &v, &present, error))) {
            if (error) snprintf(error->message, sizeof error->message, "'best_of' must be 1");
            return rc;
        }
    }
    return 0;
}

int kite_openai_parse_request(kite_openai_endpoint endpoint, const char *body, size_t len,
                              const kite_openai_limits *limits, kite_openai_request *req, kite_openai_error *error) {
    memset(req, 0, sizeof *req);
    req->endpoint = endpoint;
    req->parse_special = true;
    req->skip_special_tokens = true;
    req->max_tokens = -1;
    req->top_k = -1;
    req->temperature = req->top_p = req->min_p = NAN;
    req->presence_penalty = req->frequency_penalty = req->repetition_penalty = NAN;
    kite_openai_limits lim = limits ? *limits : kite_openai_default_limits();
    if (!body || len == 0) return BAD_PARAM(NULL, "the request body is empty; send a JSON object");
    /* jansson recurses once per level: check the nesting before it parses */
    if (kite_openai_json_depth(body, len, lim.max_json_depth) > lim.max_json_depth)
        return BAD_PARAM(NULL, "the request JSON nests deeper than %d levels", lim.max_json_depth);
    json_error_t jerr;
    json_t *root = json_loadb(body, len, 0, &jerr);
    if (!root)
        return BAD_PARAM(NULL, "the request body is not valid JSON (line %d, column %d): %s", jerr.line, jerr.column,
                         jerr.text);
    int rc;
    if (!json_is_object(root)) rc = BAD_PARAM(NULL, "the request body must be a JSON object");
    else rc = parse_fields(endpoint, root, &lim, req, error);
    json_decref(root);
    if (rc) kite_openai_request_free(req);
    return rc;
}

void kite_openai_request_free(kite_openai_request *req) {
    if (!req) return;
    free(req->model);
    free(req->messages_json);
    free(req->kwargs_json);
    free(req->prompt_text);
    free(req->prompt_ids);
    for (size_t i = 0; i < req->n_stop; i++) free(req->stop[i]);
    free(req->stop);
    free(req->logit_bias);
    free(req->format_text);
    free(req->format_name);
    free(req->tools_json);
    for (size_t i = 0; i < req->n_tools; i++) free(req->tool_names[i]);
    free(req->tool_names);
    free(req->tool_choice_name);
    kite_openai_endpoint endpoint = req->endpoint;
    memset(req, 0, sizeof *req);
    req->endpoint = endpoint;
}
