/* The public reply API (kite.h: kite_chat_reply_*, kite_chat_parse_reply, kite_grammar_open_tool_call):
 * the template's tool-call format (kite_chat_template_tool_info) picks the parser of tool_calls.h and the
 * call frame of tool_grammar.h, the paths `kite serve` takes. A reply streams through a kite_tool_stream
 * for its parts and is kept whole, so that its message is kite_tool_parse_text's parse of the whole
 * text once at the end (the same parts, by the parser's contract, and no rebuilding per delta). */
#include "chat/reply.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "chat/chat_internal.h"
#include "chat/tool_grammar.h"

enum { MAX_REPLY_BYTES = 256 << 20 }; /* a reply kept whole: far beyond any context's worth of text */

/* Length of the valid UTF-8 sequence starting at s (n bytes left), or 0 if it is not one. */
static size_t utf8_sequence(const unsigned char *s, size_t n) {
    unsigned char c = s[0];
    if (c < 0x80) return 1;
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F; /* no surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        return 0;
    }
    if (n < len) return 0;
    if (s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xBF) return 0;
    return len;
}

json_t *kite_json_text_lossy(const char *bytes, size_t n) {
    const unsigned char *s = (const unsigned char *)(bytes ? bytes : "");
    size_t i = 0, len;
    while (i < n && (len = utf8_sequence(s + i, n - i))) i += len;
    if (i == n) return json_stringn_nocheck((const char *)s, n);
    /* Invalid UTF-8 from byte i on: each bad byte becomes the 3 bytes of U+FFFD. */
    if (n > (SIZE_MAX - 1) / 3) return NULL;
    char *clean = malloc(n * 3 + 1);
    if (!clean) return NULL;
    memcpy(clean, s, i);
    size_t out = i;
    while (i < n) {
        if ((len = utf8_sequence(s + i, n - i))) {
            memcpy(clean + out, s + i, len);
            out += len;
            i += len;
        } else {
            memcpy(clean + out, "\xEF\xBF\xBD", 3);
            out += 3;
            i++;
        }
    }
    json_t *j = json_stringn_nocheck(clean, out);
    free(clean);
    return j;
}

json_t *kite_tool_message_json(const kite_tool_parse *p) {
    /* jansson's _new setters take the value's reference even when they fail (a NULL object or value), so
     * the failures are gathered and the whole is dropped once */
    json_t *m = json_object();
    int bad = json_object_set_new(m, "role", json_string("assistant"));
    json_t *content = p->n_calls > 0 && p->content_len == 0 ? json_null() : kite_json_text_lossy(p->content, p->content_len);
    bad |= json_object_set_new(m, "content", content);
    if (p->reasoning_len) bad |= json_object_set_new(m, "reasoning_content", kite_json_text_lossy(p->reasoning, p->reasoning_len));
    if (p->n_calls) {
        json_t *calls = json_array();
        for (size_t i = 0; i < p->n_calls; i++) {
            const kite_tool_call *c = &p->calls[i];
            json_t *call = json_object(), *fn = json_object();
            bad |= json_object_set_new(fn, "name", kite_json_text_lossy(c->name, strlen(c->name)));
            bad |= json_object_set_new(fn, "arguments", kite_json_text_lossy(c->arguments, c->arguments_len));
            bad |= json_object_set_new(call, "id", json_string(c->id));
            bad |= json_object_set_new(call, "type", json_string("function"));
            bad |= json_object_set_new(call, "function", fn);
            bad |= json_array_append_new(calls, call);
        }
        bad |= json_object_set_new(m, "tool_calls", calls);
    }
    if (bad) {
        json_decref(m);
        return NULL;
    }
    return m;
}

/* ---- kite_chat_reply ---- */

struct kite_chat_reply {
    kite_tool_parse_options options; /* the stream's, and the whole text's parse at the end */
    kite_tool_stream *stream;
    char *text; /* the reply so far: text[0..len) */
    size_t len, cap;
    bool finished;
};

kite_chat_reply_params kite_chat_reply_default_params(void) {
    return (kite_chat_reply_params){.tool_calls = false, .prompt = NULL, .prompt_len = 0, .id_seed = 0};
}

int kite_chat_reply_open(kite_chat_reply **out, const kite_chat_template *tmpl, const kite_chat_reply_params *params,
                         char *err, size_t err_size) {
    kite_error e = {0};
    if (out) *out = NULL;
    if (!out || !tmpl || (params && params->prompt_len && !params->prompt)) {
        kite_fail(&e, KITE_ERR_INVALID_ARG, "kite_chat_reply_open: out and tmpl are required");
        return kite_error_export(&e, err, err_size);
    }
    kite_chat_reply_params p = params ? *params : kite_chat_reply_default_params();
    kite_tool_template_info info = kite_chat_template_tool_info(tmpl);
    kite_chat_reply *r = calloc(1, sizeof *r);
    if (!r) {
        kite_fail(&e, KITE_ERR_NOMEM, "kite_chat_reply_open: out of memory");
        return kite_error_export(&e, err, err_size);
    }
    r->options = kite_tool_parse_default_options(p.tool_calls ? info.format : KITE_TOOL_FORMAT_NONE);
    r->options.think = info.think;
    r->options.id_seed = p.id_seed;
    r->options.starts_in_think = info.think && p.prompt && kite_tool_prompt_opens_think(p.prompt, p.prompt_len);
    if (kite_tool_stream_new(&r->options, &r->stream, &e)) {
        free(r);
        return kite_error_export(&e, err, err_size);
    }
    *out = r;
    return KITE_OK;
}

void kite_chat_reply_free(kite_chat_reply *r) {
    if (!r) return;
    kite_tool_stream_free(r->stream);
    free(r->text);
    free(r);
}

typedef struct relay {
    kite_chat_reply_fn fn;
    void *user_data;
} relay;

static bool relay_event(const kite_tool_event *ev, void *user_data) {
    const relay *to = user_data;
    if (!to->fn) return true;
    switch (ev->kind) {
    case KITE_TOOL_EVENT_CONTENT: return to->fn(KITE_REPLY_CONTENT, -1, ev->text, ev->len, to->user_data);
    case KITE_TOOL_EVENT_REASONING: return to->fn(KITE_REPLY_REASONING, -1, ev->text, ev->len, to->user_data);
    case KITE_TOOL_EVENT_CALL_START: return to->fn(KITE_REPLY_CALL_START, ev->index, ev->name, strlen(ev->name), to->user_data);
    case KITE_TOOL_EVENT_ARGUMENTS: return to->fn(KITE_REPLY_CALL_ARGUMENTS, ev->index, ev->text, ev->len, to->user_data);
    case KITE_TOOL_EVENT_CALL_END: return to->fn(KITE_REPLY_CALL_END, ev->index, "", 0, to->user_data);
    }
    return true;
}

int kite_chat_reply_feed(kite_chat_reply *r, const char *text, size_t len, kite_chat_reply_fn fn, void *user_data,
                         char *err, size_t err_size) {
    kite_error e = {0};
    if (!r || (!text && len)) kite_fail(&e, KITE_ERR_INVALID_ARG, "kite_chat_reply_feed: reply and text are required");
    else if (r->finished) kite_fail(&e, KITE_ERR_INVALID_ARG, "kite_chat_reply_feed: the reply has finished");
    else if (len > MAX_REPLY_BYTES - r->len) kite_fail(&e, KITE_ERR_INVALID_ARG, "kite_chat_reply_feed: the reply is over %d bytes", MAX_REPLY_BYTES);
    if (e.status || len == 0) return kite_error_export(&e, err, err_size);
    if (r->len + len + 1 > r->cap) {
        size_t cap = r->cap ? r->cap : 1024;
        while (cap < r->len + len + 1) cap *= 2;
        char *t = realloc(r->text, cap);
        if (!t) {
            kite_fail(&e, KITE_ERR_NOMEM, "kite_chat_reply_feed: out of memory");
            return kite_error_export(&e, err, err_size);
        }
        r->text = t;
        r->cap = cap;
    }
    memcpy(r->text + r->len, text, len);
    r->len += len;
    relay to = {fn, user_data};
    kite_tool_stream_feed(r->stream, text, len, relay_event, &to, &e);
    return kite_error_export(&e, err, err_size);
}

int kite_chat_reply_finish(kite_chat_reply *r, kite_chat_reply_fn fn, void *user_data, char **message_json, char *err,
                           size_t err_size) {
    kite_error e = {0};
    if (message_json) *message_json = NULL;
    if (!r) kite_fail(&e, KITE_ERR_INVALID_ARG, "kite_chat_reply_finish: reply is required");
    else if (r->finished) kite_fail(&e, KITE_ERR_INVALID_ARG, "kite_chat_reply_finish: the reply has finished");
    if (e.status) return kite_error_export(&e, err, err_size);
    r->finished = true;
    relay to = {fn, user_data};
    if (kite_tool_stream_finish(r->stream, relay_event, &to, &e) || !message_json) return kite_error_export(&e, err, err_size);
    kite_tool_parse parse;
    if (kite_tool_parse_text(&r->options, r->text, r->len, &parse, &e)) return kite_error_export(&e, err, err_size);
    json_t *m = kite_tool_message_json(&parse);
    kite_tool_parse_clear(&parse);
    *message_json = m ? json_dumps(m, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(m);
    if (!*message_json) kite_fail(&e, KITE_ERR_NOMEM, "kite_chat_reply_finish: out of memory");
    return kite_error_export(&e, err, err_size);
}

const char *kite_chat_reply_problem(const kite_chat_reply *r) { return r ? kite_tool_stream_problem(r->stream) : NULL; }

int kite_chat_parse_reply(const kite_chat_template *tmpl, const kite_chat_reply_params *params, const char *text,
                          size_t len, char **message_json, char *err, size_t err_size) {
    if (message_json) *message_json = NULL;
    kite_chat_reply *r = NULL;
    int st = kite_chat_reply_open(&r, tmpl, params, err, err_size);
    if (!st) st = kite_chat_reply_feed(r, text, len, NULL, NULL, err, err_size);
    if (!st) st = kite_chat_reply_finish(r, NULL, NULL, message_json, err, err_size);
    kite_chat_reply_free(r);
    return st;
}

/* ---- forcing a call ---- */

int kite_grammar_open_tool_call(kite_grammar **out, const kite_model *model, const kite_chat_template *tmpl,
                                const char *tools_json, const char *tool_name, char *err, size_t err_size) {
    kite_error e = {0};
    if (out) *out = NULL;
    if (!out || !model || !tmpl) {
        kite_fail(&e, KITE_ERR_INVALID_ARG, "kite_grammar_open_tool_call: out, model and tmpl are required");
        return kite_error_export(&e, err, err_size);
    }
    kite_tool_format format = kite_chat_template_tool_info(tmpl).format;
    if (format == KITE_TOOL_FORMAT_NONE) {
        kite_fail(&e, KITE_ERR_UNSUPPORTED, "this model's chat template (tool-call format '%s') cannot be made to call a tool",
                  kite_tool_format_name(format));
        return kite_error_export(&e, err, err_size);
    }
    char *gbnf = NULL;
    size_t n = 0;
    /* harmony's markers are control tokens in gpt-oss's vocabulary: token references; in a vocabulary
     * without them (a test model's), text, which the parser reads the same */
    bool markers = format == KITE_TOOL_FORMAT_HARMONY;
    if (kite_tool_grammar_marked(format, tools_json, tool_name, markers, &gbnf, &n, &e)) return kite_error_export(&e, err, err_size);
    char msg[512];
    int st = kite_grammar_open(out, model, KITE_GRAMMAR_GBNF, gbnf, n, msg, sizeof msg);
    free(gbnf);
    if (st && !(st == KITE_ERR_FORMAT && markers && strstr(msg, "is not a token of this model"))) {
        kite_fail(&e, st, "%s", msg);
        return kite_error_export(&e, err, err_size);
    }
    if (st) {
        gbnf = NULL;
        if (kite_tool_grammar_marked(format, tools_json, tool_name, false, &gbnf, &n, &e)) return kite_error_export(&e, err, err_size);
        st = kite_grammar_open(out, model, KITE_GRAMMAR_GBNF, gbnf, n, err, err_size);
        free(gbnf);
    }
    return st;
}

int kite_grammar_open_tool_auto(kite_grammar **out, const kite_model *model, const kite_chat_template *tmpl,
                                const char *tools_json, bool parallel_calls, char *err, size_t err_size) {
    kite_error e = {0};
    if (out) *out = NULL;
    if (!out || !model || !tmpl) {
        kite_fail(&e, KITE_ERR_INVALID_ARG, "kite_grammar_open_tool_auto: out, model and tmpl are required");
        return kite_error_export(&e, err, err_size);
    }
    char *gbnf = NULL;
    size_t n = 0;
    if (kite_tool_grammar_lazy(kite_chat_template_tool_info(tmpl).format, tools_json, parallel_calls, &gbnf, &n, &e))
        return kite_error_export(&e, err, err_size);
    int st = kite_grammar_open(out, model, KITE_GRAMMAR_GBNF, gbnf, n, err, err_size);
    free(gbnf);
    return st;
}
