/* Fuzzes the tool-call parsers: byte 0 picks the format (low 4 bits, modulo the format count: COMMAND_R
 * is 10, GLM4 11) and the think flags (bits 4 and 5), byte 1 seeds the split points, the rest is the
 * model's text. The text is parsed whole, then streamed in pseudo-random pieces and byte by byte: every
 * stream must give exactly the whole parse (content, reasoning, calls, problem), its events must be well
 * ordered, and nothing may crash or hang. The whole parse as an OpenAI message (kite_tool_message_json,
 * what kite_chat_reply_finish and the server answer) must be JSON that dumps and reloads, with the
 * parse's text wherever that text is valid UTF-8. */
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chat/reply.h"
#include "chat/tool_calls.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct streamed {
    char *content, *reasoning, *args;
    size_t content_len, reasoning_len, args_len;
    size_t n_calls;
    int open;
    const kite_tool_parse *whole;
} streamed;

static void append(char **p, size_t *len, const char *t, size_t n) {
    char *q = realloc(*p, *len + n + 1);
    if (!q) abort();
    memcpy(q + *len, t, n);
    *len += n;
    q[*len] = 0;
    *p = q;
}

static bool on_event(const kite_tool_event *ev, void *user) {
    streamed *s = user;
    switch (ev->kind) {
    case KITE_TOOL_EVENT_CONTENT:
        if (!ev->len || s->open >= 0) abort();
        append(&s->content, &s->content_len, ev->text, ev->len);
        break;
    case KITE_TOOL_EVENT_REASONING:
        if (!ev->len || s->open >= 0) abort();
        append(&s->reasoning, &s->reasoning_len, ev->text, ev->len);
        break;
    case KITE_TOOL_EVENT_CALL_START: {
        if (s->open >= 0 || (size_t)ev->index != s->n_calls || s->n_calls >= s->whole->n_calls) abort();
        const kite_tool_call *w = &s->whole->calls[s->n_calls];
        if (strcmp(ev->id, w->id) || strcmp(ev->name, w->name)) abort();
        s->open = ev->index;
        s->args_len = 0;
        s->n_calls++;
        break;
    }
    case KITE_TOOL_EVENT_ARGUMENTS:
        if (!ev->len || ev->index != s->open) abort();
        append(&s->args, &s->args_len, ev->text, ev->len);
        break;
    case KITE_TOOL_EVENT_CALL_END: {
        if (ev->index != s->open) abort();
        const kite_tool_call *w = &s->whole->calls[s->open];
        if (s->args_len != w->arguments_len || (w->arguments_len && memcmp(s->args, w->arguments, w->arguments_len))) abort();
        s->open = -1;
        break;
    }
    }
    return true;
}

static void stream_and_compare(const kite_tool_parse_options *o, const char *text, size_t len, uint32_t seed, bool bytewise,
                               const kite_tool_parse *whole) {
    kite_tool_stream *st = NULL;
    kite_error e = {0};
    if (kite_tool_stream_new(o, &st, &e) != KITE_OK) abort();
    streamed s = {.open = -1, .whole = whole};
    size_t at = 0;
    while (at < len) {
        seed = seed * 1103515245u + 12345u;
        size_t n = bytewise ? 1 : 1 + (seed >> 16) % 13;
        if (n > len - at) n = len - at;
        if (kite_tool_stream_feed(st, text + at, n, on_event, &s, &e) != KITE_OK) abort();
        at += n;
    }
    if (kite_tool_stream_finish(st, on_event, &s, &e) != KITE_OK) abort();
    const char *problem = kite_tool_stream_problem(st);
    if (strcmp(problem ? problem : "", whole->problem)) abort();
    if (s.open != -1 || s.n_calls != whole->n_calls) abort();
    if (s.content_len != whole->content_len || (s.content_len && memcmp(s.content, whole->content, s.content_len))) abort();
    if (s.reasoning_len != whole->reasoning_len || (s.reasoning_len && memcmp(s.reasoning, whole->reasoning, s.reasoning_len)))
        abort();
    kite_tool_stream_free(st);
    free(s.content);
    free(s.reasoning);
    free(s.args);
}

/* s[0..n) as the message carries it: the same bytes when they are valid UTF-8 (jansson says), else only
 * longer (each bad byte became three). */
static void check_text(const json_t *j, const char *s, size_t n) {
    if (!json_is_string(j)) abort();
    json_t *probe = json_stringn(s, n);
    if (probe ? json_string_length(j) != n || memcmp(json_string_value(j), s, n) : json_string_length(j) <= n) abort();
    json_decref(probe);
}

static void check_message(const kite_tool_parse *p) {
    json_t *m = kite_tool_message_json(p);
    if (!m) abort();
    char *dumped = json_dumps(m, JSON_COMPACT);
    json_t *again = dumped ? json_loads(dumped, JSON_ALLOW_NUL, NULL) : NULL; /* a model may write NUL bytes */
    if (!again || !json_equal(m, again)) abort();
    json_t *content = json_object_get(m, "content");
    if (p->n_calls && !p->content_len) {
        if (!json_is_null(content)) abort();
    } else {
        check_text(content, p->content, p->content_len);
    }
    json_t *reasoning = json_object_get(m, "reasoning_content");
    if (p->reasoning_len) check_text(reasoning, p->reasoning, p->reasoning_len);
    else if (reasoning) abort();
    json_t *calls = json_object_get(m, "tool_calls");
    if (json_array_size(calls) != p->n_calls || (!p->n_calls && calls)) abort();
    for (size_t i = 0; i < p->n_calls; i++) {
        json_t *fn = json_object_get(json_array_get(calls, i), "function");
        check_text(json_object_get(fn, "name"), p->calls[i].name, strlen(p->calls[i].name));
        check_text(json_object_get(fn, "arguments"), p->calls[i].arguments, p->calls[i].arguments_len);
        if (strcmp(json_string_value(json_object_get(json_array_get(calls, i), "id")), p->calls[i].id)) abort();
    }
    free(dumped);
    json_decref(again);
    json_decref(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    kite_tool_parse_options o = kite_tool_parse_default_options((kite_tool_format)((data[0] & 15) % KITE_TOOL_FORMAT_COUNT));
    o.think = data[0] & 16;
    o.starts_in_think = data[0] & 32;
    o.id_seed = data[1];
    const char *text = (const char *)data + 2;
    size_t len = size - 2;
    kite_tool_parse whole;
    kite_error e = {0};
    if (kite_tool_parse_text(&o, text, len, &whole, &e) != KITE_OK) abort();
    if (!whole.content || !whole.reasoning || whole.content[whole.content_len] || whole.reasoning[whole.reasoning_len]) abort();
    /* content and reasoning are made of the input's bytes: never longer than it */
    if (whole.content_len + whole.reasoning_len > len) abort();
    check_message(&whole);
    stream_and_compare(&o, text, len, data[1], false, &whole);
    if (len <= 4096) stream_and_compare(&o, text, len, 0, true, &whole);
    kite_tool_parse_clear(&whole);
    return 0;
}
