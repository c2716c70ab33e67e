/* Helpers shared by kite template, kite chat and kite run --chat (see chat_common.h). */
#include "chat_common.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *kite_cli_read_file(const char *path, size_t *len, char *err, size_t err_size) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, err_size, "cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf) break;
        if (n + 1 >= cap) {
            char *nb = cap > (SIZE_MAX >> 2) ? NULL : realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - 1 - n, f);
        n += got;
        if (got == 0) break;
    }
    if (!buf) {
        fclose(f);
        snprintf(err, err_size, "out of memory reading %s", path);
        return NULL;
    }
    if (ferror(f)) {
        snprintf(err, err_size, "cannot read %s: %s", path, strerror(errno));
        fclose(f);
        free(buf);
        return NULL;
    }
    fclose(f);
    buf[n] = '\0';
    if (len) *len = n;
    return buf;
}

int kite_cli_open_template(kite_chat_template **out, const kite_model *model, const char *template_file,
                           const char *name, char *err, size_t err_size) {
    *out = NULL;
    if (!template_file) {
        if (!model) {
            snprintf(err, err_size, "a chat template needs a model (--model PATH) or a template file (--chat-template FILE)");
            return KITE_ERR_INVALID_ARG;
        }
        return kite_chat_template_open(out, model, name, err, err_size);
    }
    size_t len = 0;
    char *source = kite_cli_read_file(template_file, &len, err, err_size);
    if (!source) return KITE_ERR_IO;
    char lib_err[512];
    int st = kite_chat_template_from_text(out, source, len, model, lib_err, sizeof lib_err);
    free(source);
    /* The library's message names the template line; the file name tells which template. */
    if (st) snprintf(err, err_size, "%s: %s", template_file, lib_err);
    return st;
}

int kite_cli_check_messages(const json_t *messages, const char *what, char *err, size_t err_size) {
    if (!json_is_array(messages)) {
        snprintf(err, err_size, "%s: the messages must be a JSON array", what);
        return KITE_ERR_FORMAT;
    }
    size_t i;
    const json_t *m;
    json_array_foreach(messages, i, m) {
        if (!json_is_object(m)) {
            snprintf(err, err_size, "%s: message %zu is not a JSON object", what, i + 1);
            return KITE_ERR_FORMAT;
        }
        const json_t *role = json_object_get(m, "role");
        if (!json_is_string(role) || json_string_length(role) == 0) {
            snprintf(err, err_size, "%s: message %zu has no \"role\" string", what, i + 1);
            return KITE_ERR_FORMAT;
        }
        const json_t *content = json_object_get(m, "content");
        const json_t *tool_calls = json_object_get(m, "tool_calls");
        if (!content && !tool_calls) {
            snprintf(err, err_size, "%s: message %zu (%s) has no \"content\"", what, i + 1, json_string_value(role));
            return KITE_ERR_FORMAT;
        }
        if (content && !json_is_string(content) && !json_is_array(content) && !json_is_null(content)) {
            snprintf(err, err_size, "%s: message %zu (%s): \"content\" must be a string, an array of content parts or null",
                     what, i + 1, json_string_value(role));
            return KITE_ERR_FORMAT;
        }
        if (tool_calls && !json_is_array(tool_calls) && !json_is_null(tool_calls)) {
            snprintf(err, err_size, "%s: message %zu (%s): \"tool_calls\" must be an array", what, i + 1,
                     json_string_value(role));
            return KITE_ERR_FORMAT;
        }
    }
    return KITE_OK;
}

int kite_cli_parse_conversation(const char *text, size_t len, const char *what, json_t **messages, json_t **tools,
                                char *err, size_t err_size) {
    *messages = NULL;
    if (tools) *tools = NULL;
    json_error_t je;
    /* Duplicate keys are refused: which one a template would see is not defined. */
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
    if (!root) {
        snprintf(err, err_size, "%s:%d:%d: invalid JSON: %s", what, je.line, je.column, je.text);
        return KITE_ERR_FORMAT;
    }
    json_t *msgs = NULL, *tl = NULL;
    if (json_is_array(root)) {
        msgs = root;
    } else if (json_is_object(root)) {
        msgs = json_object_get(root, "messages");
        tl = json_object_get(root, "tools");
        if (!msgs) {
            snprintf(err, err_size, "%s: the object has no \"messages\" array", what);
            json_decref(root);
            return KITE_ERR_FORMAT;
        }
        if (tl && !json_is_array(tl) && !json_is_null(tl)) {
            snprintf(err, err_size, "%s: \"tools\" must be an array of tool definitions", what);
            json_decref(root);
            return KITE_ERR_FORMAT;
        }
        if (json_is_null(tl)) tl = NULL;
    } else {
        snprintf(err, err_size, "%s: expected an array of messages or an object with \"messages\"", what);
        json_decref(root);
        return KITE_ERR_FORMAT;
    }
    int st = kite_cli_check_messages(msgs, what, err, err_size);
    if (st) {
        json_decref(root);
        return st;
    }
    *messages = json_incref(msgs);
    if (tools && tl) *tools = json_incref(tl);
    json_decref(root);
    return KITE_OK;
}

int kite_cli_load_conversation(const char *path, json_t **messages, json_t **tools, char *err, size_t err_size) {
    *messages = NULL;
    if (tools) *tools = NULL;
    size_t len = 0;
    char *text = kite_cli_read_file(path, &len, err, err_size);
    if (!text) return KITE_ERR_IO;
    int st = kite_cli_parse_conversation(text, len, path, messages, tools, err, err_size);
    free(text);
    return st;
}

char *kite_cli_json_text(const json_t *value) {
    return json_dumps(value, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY | JSON_REAL_PRECISION(17));
}

json_t *kite_cli_load_tools(const char *path, char *err, size_t err_size) {
    json_error_t je;
    json_t *tools = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!tools) {
        if (je.line < 0) snprintf(err, err_size, "cannot read %s: %s", path, je.text);
        else snprintf(err, err_size, "%s:%d:%d: invalid JSON: %s", path, je.line, je.column, je.text);
        return NULL;
    }
    if (!json_is_array(tools)) {
        json_decref(tools);
        snprintf(err, err_size, "%s: the tools must be a JSON array of tool definitions", path);
        return NULL;
    }
    return tools;
}
