/* The public chat-template API (kite.h): a model's template found and compiled, the context Hugging
 * Face's apply_chat_template passes built from the caller's JSON, rendered by the Jinja interpreter,
 * and tokenized so that only the template's own text can become special tokens. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chat/chat_internal.h"
#include "chat/tool_template.h"
#include "engine/engine.h"
#include "io/mmap.h"
#include "tokenize/tokenizer.h"

struct kite_chat_template {
    jinja_template *jt;
    char *bos_token, *eos_token; /* the model tokenizer's spellings, "" without one */
    bool has_fixed_time;
    int64_t fixed_time;
    jinja_limits limits;
    kite_tool_template_info tool_info; /* the tool-call format and reasoning markup its source shows */
};

enum { MAX_TEMPLATE_BYTES = 4 << 20, MAX_CONFIG_BYTES = 64 << 20 };

void kite_free(void *ptr) { free(ptr); }

kite_chat_params kite_chat_default_params(void) {
    return (kite_chat_params){.messages_json = NULL, .tools_json = NULL, .documents_json = NULL, .kwargs_json = NULL, .add_generation_prompt = true,
                               .continue_final_message = false, .family_tool_shapes = false};
}

void kite_chat_template_set_fixed_time(kite_chat_template *tmpl, int64_t unix_seconds) {
    tmpl->has_fixed_time = true;
    tmpl->fixed_time = unix_seconds;
}

void kite_chat_template_set_limits(kite_chat_template *tmpl, const jinja_limits *limits) { tmpl->limits = *limits; }

static char *dup_token(const kite_model *model, int32_t id) {
    size_t len = 0;
    const char *s = NULL;
    if (model && model->tokenizer && id >= 0) s = kite_tokenizer_token_text(model->tokenizer, id, &len);
    char *out = malloc(len + 1);
    if (!out) return NULL;
    if (s && len) memcpy(out, s, len);
    out[len] = 0;
    return out;
}

static int make_template(kite_chat_template **out, const char *source, size_t len, const kite_model *model, kite_error *e) {
    *out = NULL;
    kite_chat_template *t = calloc(1, sizeof *t);
    if (!t) return kite_fail(e, KITE_ERR_NOMEM, "chat template: out of memory");
    t->limits = jinja_default_limits();
    int rc = jinja_compile(&t->jt, source, len, e);
    if (rc) {
        free(t);
        return rc;
    }
    t->tool_info = kite_tool_detect(source, len, NULL, 0);
    const kite_tokenizer *tok = model ? model->tokenizer : NULL;
    t->bos_token = dup_token(model, tok ? kite_tokenizer_bos(tok) : -1);
    t->eos_token = dup_token(model, tok ? kite_tokenizer_eos(tok) : -1);
    if (!t->bos_token || !t->eos_token) {
        kite_chat_template_free(t);
        return kite_fail(e, KITE_ERR_NOMEM, "chat template: out of memory");
    }
    *out = t;
    return KITE_OK;
}

int kite_chat_template_from_text(kite_chat_template **out, const char *source, size_t source_len, const kite_model *model,
                                 char *err, size_t err_size) {
    kite_error e = {0};
    if (!out || (!source && source_len)) {
        if (out) *out = NULL;
        kite_fail(&e, KITE_ERR_INVALID_ARG, "kite_chat_template_from_text: out and source are required");
        return kite_error_export(&e, err, err_size);
    }
    make_template(out, source ? source : "", source_len, model, &e);
    return kite_error_export(&e, err, err_size);
}

kite_tool_template_info kite_chat_template_tool_info(const kite_chat_template *tmpl) {
    return tmpl ? tmpl->tool_info : (kite_tool_template_info){.format = KITE_TOOL_FORMAT_NONE};
}

void kite_chat_template_free(kite_chat_template *tmpl) {
    if (!tmpl) return;
    jinja_free(tmpl->jt);
    free(tmpl->bos_token);
    free(tmpl->eos_token);
    free(tmpl);
}

/* tokenizer_config.json's chat_template: a string, or a list of {name, template}. */
static int template_from_config(const char *path, const char *name, char **text, size_t *len, kite_error *e) {
    char *data = NULL;
    size_t size = 0;
    int rc = kite_read_file(path, &data, &size, MAX_CONFIG_BYTES, e);
    if (rc) return rc;
    json_error_t jerr;
    /* Integers as reals: HF configs carry model_max_length = 1e30-ish integers, past what jansson holds. */
    json_t *root = json_loadb(data, size, JSON_DECODE_INT_AS_REAL, &jerr);
    free(data);
    if (!root) return kite_fail(e, KITE_ERR_FORMAT, "%s: not valid JSON (line %d: %s)", path, jerr.line, jerr.text);
    if (!json_is_object(root)) {
        json_decref(root);
        return kite_fail(e, KITE_ERR_FORMAT, "%s: the top level is not a JSON object", path);
    }
    json_t *ct = json_object_get(root, "chat_template");
    const char *want = name ? name : "default";
    const json_t *found = NULL;
    if (json_is_string(ct)) {
        if (!name || strcmp(name, "default") == 0) found = ct;
    } else if (json_is_array(ct)) {
        size_t i;
        json_t *item;
        json_array_foreach(ct, i, item) {
            json_t *n = json_object_get(item, "name"), *tx = json_object_get(item, "template");
            if (!json_is_string(n) || !json_is_string(tx)) {
                json_decref(root);
                return kite_fail(e, KITE_ERR_FORMAT, "%s: chat_template[%zu] is not a {name, template} pair of strings", path, i);
            }
            if (strcmp(json_string_value(n), want) == 0) found = tx;
        }
    } else if (ct) {
        json_decref(root);
        return kite_fail(e, KITE_ERR_FORMAT, "%s: chat_template is neither a string nor a list of {name, template}", path);
    }
    if (!found) {
        json_decref(root);
        if (!ct) return kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: the model has no chat template (no chat_template key)", path);
        return kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: the model has no chat template named \"%s\"", path, want);
    }
    *len = json_string_length(found);
    *text = malloc(*len + 1);
    if (!*text) {
        json_decref(root);
        return kite_fail(e, KITE_ERR_NOMEM, "out of memory");
    }
    memcpy(*text, json_string_value(found), *len + 1);
    json_decref(root);
    return KITE_OK;
}

int kite_chat_template_open(kite_chat_template **out, const kite_model *model, const char *name, char *err, size_t err_size) {
    kite_error e = {0};
    if (out) *out = NULL;
    if (!out || !model) {
        kite_fail(&e, KITE_ERR_INVALID_ARG, "kite_chat_template_open: out and model are required");
        return kite_error_export(&e, err, err_size);
    }
    if (name && (!*name || strlen(name) > 200)) {
        kite_fail(&e, KITE_ERR_INVALID_ARG, "kite_chat_template_open: a template name must be 1 to 200 bytes");
        return kite_error_export(&e, err, err_size);
    }
    if (kite_model_refuse_drafter(model, &e)) return kite_error_export(&e, err, err_size);
    const kite_source *src = &model->src;
    char *text = NULL;
    size_t len = 0;
    int rc = KITE_OK;
    if (src->gguf) {
        char key[256];
        if (name && strcmp(name, "default") != 0) snprintf(key, sizeof key, "tokenizer.chat_template.%s", name);
        else snprintf(key, sizeof key, "tokenizer.chat_template");
        kite_gguf_str s;
        if (!kite_gguf_get_str(src->gguf, key, &s)) {
            rc = kite_fail(&e, KITE_ERR_UNSUPPORTED, "the model has no chat template (no %s in its GGUF metadata)%s", key,
                           name ? "" : "; give one with --chat-template FILE");
        } else if (s.len > MAX_TEMPLATE_BYTES) {
            rc = kite_fail(&e, KITE_ERR_FORMAT, "%s is %llu bytes, more than the %d allowed", key, (unsigned long long)s.len, MAX_TEMPLATE_BYTES);
        } else if (!(text = malloc(s.len + 1))) {
            rc = kite_fail(&e, KITE_ERR_NOMEM, "out of memory");
        } else {
            memcpy(text, s.ptr, s.len);
            text[s.len] = 0;
            len = s.len;
        }
    } else if (src->chat_template_jinja[0] && (!name || strcmp(name, "default") == 0)) {
        rc = kite_read_file(src->chat_template_jinja, &text, &len, MAX_TEMPLATE_BYTES, &e);
    } else if (src->tokenizer_config_json[0]) {
        rc = template_from_config(src->tokenizer_config_json, name, &text, &len, &e);
    } else {
        rc = kite_fail(&e, KITE_ERR_UNSUPPORTED, "the model has no chat template (no chat_template.jinja or tokenizer_config.json); give one with --chat-template FILE");
    }
    if (rc == KITE_OK) rc = make_template(out, text, len, model, &e);
    free(text);
    return kite_error_export(&e, err, err_size);
}

/* Parses one of the caller's JSON inputs; what names it in messages. */
static int parse_input(const char *json, const char *what, json_t **out, kite_error *e) {
    json_error_t jerr;
    /* numbers as doubles, as JSON.parse reads them for the reference (a huge integer is not an error) */
    *out = json_loads(json, JSON_DECODE_INT_AS_REAL, &jerr);
    if (!*out) return kite_fail(e, KITE_ERR_INVALID_ARG, "%s is not valid JSON (line %d column %d: %s)", what, jerr.line, jerr.column, jerr.text);
    return KITE_OK;
}

static int check_messages(const json_t *messages, kite_error *e) {
    if (!json_is_array(messages)) return kite_fail(e, KITE_ERR_INVALID_ARG, "messages must be a JSON array of message objects");
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m) {
        if (!json_is_object(m)) return kite_fail(e, KITE_ERR_INVALID_ARG, "messages[%zu] is not an object", i);
        if (!json_is_string(json_object_get(m, "role")))
            return kite_fail(e, KITE_ERR_INVALID_ARG, "messages[%zu] has no \"role\" string", i);
        json_t *c = json_object_get(m, "content");
        if (c && !json_is_string(c) && !json_is_null(c) && !json_is_array(c))
            return kite_fail(e, KITE_ERR_INVALID_ARG, "messages[%zu].content must be a string, null or a list of content parts", i);
    }
    return KITE_OK;
}

/* continue_final_message: the rendered text ends right after the last message's content, as HF cuts it
 * (its last occurrence; HF looks for the content stripped of surrounding whitespace, which is the
 * fallback here: the exact content is tried first, so a reply cut after a space keeps the space where the
 * template writes content as given). */
static int cut_after_final_message(const json_t *messages, const char *text, size_t *len, kite_error *e) {
    size_t n = json_array_size(messages);
    const json_t *last = n ? json_array_get(messages, n - 1) : NULL;
    const char *role = last ? json_string_value(json_object_get(last, "role")) : NULL;
    const json_t *content = last ? json_object_get(last, "content") : NULL;
    if (!role || strcmp(role, "assistant") != 0 || !json_is_string(content))
        return kite_fail(e, KITE_ERR_INVALID_ARG,
                         "continue_final_message: the last message must be an assistant turn with string content");
    const char *c = json_string_value(content);
    size_t c_len = json_string_length(content);
    for (int pass = 0; pass < 2; pass++) {
        const char *needle = c;
        size_t needle_len = c_len;
        if (pass == 1) {
            while (needle_len && strchr(" \t\n\r", needle[0])) needle++, needle_len--;
            while (needle_len && strchr(" \t\n\r", needle[needle_len - 1])) needle_len--;
        }
        if (needle_len == 0) continue;
        for (size_t at = *len >= needle_len ? *len - needle_len + 1 : 0; at-- > 0;) {
            if (memcmp(text + at, needle, needle_len) == 0) {
                *len = at + needle_len;
                return KITE_OK;
            }
        }
    }
    if (c_len == 0 || strspn(c, " \t\n\r") == c_len)
        return kite_fail(e, KITE_ERR_INVALID_ARG, "continue_final_message: the assistant turn to continue is empty");
    return kite_fail(e, KITE_ERR_INVALID_ARG,
                     "continue_final_message: the template did not write the last message's content, so it cannot be continued");
}

int kite_chat_render_masked(const kite_chat_template *tmpl, const kite_chat_params *params, char **text, uint8_t **mask,
                            size_t *len, kite_error *e) {
    *text = NULL;
    *mask = NULL;
    *len = 0;
    if (!tmpl || !params) return kite_fail(e, KITE_ERR_INVALID_ARG, "kite_chat_render: template and params are required");
    if (!params->messages_json) return kite_fail(e, KITE_ERR_INVALID_ARG, "kite_chat_render: messages_json is required");
    json_t *messages = NULL, *tools = NULL, *documents = NULL, *kwargs = NULL;
    json_t *agp = NULL, *bos = NULL, *eos = NULL;
    char *family_messages = NULL, *family_tools = NULL;
    kite_chat_params adapted = *params;
    if (params->family_tool_shapes) {
        int st = kite_tool_template_inputs(tmpl->tool_info.format, params->messages_json, params->tools_json, &family_messages,
                                           &family_tools, e);
        if (st) return st;
        if (family_messages) adapted.messages_json = family_messages;
        if (family_tools) adapted.tools_json = family_tools;
        params = &adapted;
    }
    int rc = parse_input(params->messages_json, "messages", &messages, e);
    if (!rc) rc = check_messages(messages, e);
    if (!rc && params->tools_json) {
        rc = parse_input(params->tools_json, "tools", &tools, e);
        if (!rc && !json_is_array(tools) && !json_is_null(tools)) rc = kite_fail(e, KITE_ERR_INVALID_ARG, "tools must be a JSON array of tool definitions");
    }
    if (!rc && params->documents_json) {
        rc = parse_input(params->documents_json, "documents", &documents, e);
        if (!rc && !json_is_array(documents) && !json_is_null(documents)) rc = kite_fail(e, KITE_ERR_INVALID_ARG, "documents must be a JSON array");
    }
    if (!rc && params->kwargs_json) {
        rc = parse_input(params->kwargs_json, "kwargs", &kwargs, e);
        if (!rc && !json_is_object(kwargs)) rc = kite_fail(e, KITE_ERR_INVALID_ARG, "kwargs must be a JSON object of template variables");
    }
    if (!rc) {
        /* As transformers calls render(): messages, tools and documents (None when not given),
           add_generation_prompt, the special tokens, then chat_template_kwargs overriding any of them. */
        agp = json_boolean(params->add_generation_prompt);
        bos = json_string(tmpl->bos_token);
        eos = json_string(tmpl->eos_token);
        size_t n_kw = kwargs ? json_object_size(kwargs) : 0;
        jinja_var *vars = calloc(6 + n_kw, sizeof *vars);
        if (!agp || !bos || !eos || !vars) rc = kite_fail(e, KITE_ERR_NOMEM, "out of memory");
        else {
            json_t *null = json_null();
            size_t n = 0;
            vars[n++] = (jinja_var){"messages", messages, JINJA_ORIGIN_MESSAGES};
            vars[n++] = (jinja_var){"tools", tools ? tools : null, JINJA_ORIGIN_DATA};
            vars[n++] = (jinja_var){"documents", documents ? documents : null, JINJA_ORIGIN_DATA};
            vars[n++] = (jinja_var){"add_generation_prompt", agp, JINJA_ORIGIN_TEMPLATE};
            vars[n++] = (jinja_var){"bos_token", bos, JINJA_ORIGIN_TEMPLATE};
            vars[n++] = (jinja_var){"eos_token", eos, JINJA_ORIGIN_TEMPLATE};
            if (kwargs) {
                const char *key;
                json_t *val;
                json_object_foreach(kwargs, key, val) {
                    size_t k = 0;
                    while (k < n && strcmp(vars[k].name, key) != 0) k++;
                    vars[k] = (jinja_var){key, val, JINJA_ORIGIN_DATA};
                    if (k == n) n++;
                }
            }
            int64_t now = tmpl->has_fixed_time ? tmpl->fixed_time : (int64_t)time(NULL);
            rc = jinja_render(tmpl->jt, vars, n, now, &tmpl->limits, text, mask, len, e);
            if (!rc && params->continue_final_message) rc = cut_after_final_message(messages, *text, len, e);
        }
        free(vars);
    }
    json_decref(messages);
    json_decref(tools);
    json_decref(documents);
    json_decref(kwargs);
    free(family_messages);
    free(family_tools);
    json_decref(agp);
    json_decref(bos);
    json_decref(eos);
    return rc;
}

int kite_chat_render(const kite_chat_template *tmpl, const kite_chat_params *params, char **text, size_t *len, char *err,
                     size_t err_size) {
    kite_error e = {0};
    if (text) *text = NULL;
    if (len) *len = 0;
    if (!text || !len) {
        kite_fail(&e, KITE_ERR_INVALID_ARG, "kite_chat_render: text and len are required");
        return kite_error_export(&e, err, err_size);
    }
    uint8_t *mask = NULL;
    kite_chat_render_masked(tmpl, params, text, &mask, len, &e);
    free(mask);
    return kite_error_export(&e, err, err_size);
}

int kite_chat_tokenize(const kite_chat_template *tmpl, const kite_model *model, const kite_chat_params *params, int32_t **ids,
                       size_t *n_ids, char *err, size_t err_size) {
    kite_error e = {0};
    if (ids) *ids = NULL;
    if (n_ids) *n_ids = 0;
    if (!ids || !n_ids || !model) {
        kite_fail(&e, KITE_ERR_INVALID_ARG, "kite_chat_tokenize: model, ids and n_ids are required");
        return kite_error_export(&e, err, err_size);
    }
    if (!model->tokenizer) {
        kite_fail(&e, KITE_ERR_TOKENIZER, "kite_chat_tokenize: the model has no tokenizer");
        return kite_error_export(&e, err, err_size);
    }
    char *text = NULL;
    uint8_t *mask = NULL;
    size_t len = 0;
    if (kite_chat_render_masked(tmpl, params, &text, &mask, &len, &e) == KITE_OK)
        kite_tokenizer_encode_masked(model->tokenizer, text, len, mask, false, ids, n_ids, &e);
    free(text);
    free(mask);
    return kite_error_export(&e, err, err_size);
}
