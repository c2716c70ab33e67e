/* Tool-call parsing against the real templates: every assistant tool-call turn in tool_call_cases.json
 * (rendered by @huggingface/jinja from OpenAI tool_calls messages, tool_call_cases.mjs) must parse back
 * to the same calls (names, and arguments equal as JSON values), content and reasoning, and the
 * template's family must be the one kite_tool_detect reads from its source. For each of those texts and
 * each hand-written one (harmony, Mistral [ARGS], Llama built-ins, GENERIC, malformed outputs), the
 * stream fed at every split point (and byte by byte, and in random pieces) must give exactly the whole
 * parse, with well-ordered events and deltas that never end inside a UTF-8 character. */
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "chat/tool_calls.h"
#include "chat/tool_template.h"
#include "kite.h"

static const char *source_dir(void) {
    const char *d = getenv("KITE_SOURCE_DIR");
    return d ? d : ".";
}

static char *read_text(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = malloc((size_t)n + 1);
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) {
        free(p);
        p = NULL;
    }
    fclose(f);
    if (p) p[n] = 0;
    if (len) *len = (size_t)n;
    return p;
}

static kite_tool_format format_from_name(const char *name) {
    for (int f = 0; f < KITE_TOOL_FORMAT_COUNT; f++)
        if (!strcmp(kite_tool_format_name((kite_tool_format)f), name)) return (kite_tool_format)f;
    fail_msg("unknown format %s", name);
    return KITE_TOOL_FORMAT_NONE;
}

/* ---- the streamed result, gathered and checked for order ---- */

typedef struct gathered {
    char *content, *reasoning;
    size_t content_len, reasoning_len;
    int n_calls;
    char ids[64][KITE_TOOL_ID_MAX];
    char *names[64];
    char *args[64];
    size_t args_len[64];
    bool ended[64];
    int open; /* the call between START and END, or -1 */
    bool bad_order, bad_utf8;
    char why[200];
} gathered;

static void append(char **p, size_t *len, const char *t, size_t n) {
    *p = realloc(*p, *len + n + 1);
    memcpy(*p + *len, t, n);
    *len += n;
    (*p)[*len] = 0;
}

static bool utf8_valid(const char *p, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)p[i];
        size_t need = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
        if (!need || i + need > n) return false;
        for (size_t k = 1; k < need; k++)
            if (((unsigned char)p[i + k] & 0xC0) != 0x80) return false;
        i += need;
    }
    return true;
}

static bool gather(const kite_tool_event *ev, void *user) {
    gathered *g = user;
    bool text = ev->kind == KITE_TOOL_EVENT_CONTENT || ev->kind == KITE_TOOL_EVENT_REASONING || ev->kind == KITE_TOOL_EVENT_ARGUMENTS;
    if (text && (!ev->len || !ev->text)) g->bad_order = true, snprintf(g->why, sizeof g->why, "an empty delta");
    if (text && !utf8_valid(ev->text, ev->len)) g->bad_utf8 = true;
    switch (ev->kind) {
    case KITE_TOOL_EVENT_CONTENT:
        if (ev->index != -1) g->bad_order = true;
        append(&g->content, &g->content_len, ev->text, ev->len);
        break;
    case KITE_TOOL_EVENT_REASONING:
        if (ev->index != -1) g->bad_order = true;
        append(&g->reasoning, &g->reasoning_len, ev->text, ev->len);
        break;
    case KITE_TOOL_EVENT_CALL_START:
        if (g->open >= 0 || ev->index != g->n_calls || g->n_calls >= 64 || !ev->id || !ev->name) {
            g->bad_order = true;
            snprintf(g->why, sizeof g->why, "call start %d while %d open, %d calls", ev->index, g->open, g->n_calls);
            return true;
        }
        snprintf(g->ids[g->n_calls], KITE_TOOL_ID_MAX, "%s", ev->id);
        g->names[g->n_calls] = strdup(ev->name);
        g->open = g->n_calls++;
        break;
    case KITE_TOOL_EVENT_ARGUMENTS:
        if (ev->index != g->open || g->open < 0) {
            g->bad_order = true;
            snprintf(g->why, sizeof g->why, "arguments for %d while %d open", ev->index, g->open);
            return true;
        }
        append(&g->args[g->open], &g->args_len[g->open], ev->text, ev->len);
        break;
    case KITE_TOOL_EVENT_CALL_END:
        if (ev->index != g->open || g->open < 0) {
            g->bad_order = true;
            snprintf(g->why, sizeof g->why, "end of %d while %d open", ev->index, g->open);
            return true;
        }
        g->ended[g->open] = true;
        g->open = -1;
        break;
    }
    return true;
}

static void gathered_free(gathered *g) {
    free(g->content);
    free(g->reasoning);
    for (int i = 0; i < g->n_calls; i++) {
        free(g->names[i]);
        free(g->args[i]);
    }
}

/* Feeds text in the pieces cuts[0..n_cuts) (increasing offsets) and finishes. */
static void stream_pieces(const kite_tool_parse_options *o, const char *text, size_t len, const size_t *cuts, size_t n_cuts,
                          gathered *g, char *problem, size_t problem_size) {
    memset(g, 0, sizeof *g);
    g->open = -1;
    kite_tool_stream *s = NULL;
    kite_error e = {0};
    assert_int_equal(kite_tool_stream_new(o, &s, &e), KITE_OK);
    size_t at = 0;
    for (size_t i = 0; i <= n_cuts; i++) {
        size_t end = i < n_cuts ? cuts[i] : len;
        assert_int_equal(kite_tool_stream_feed(s, text + at, end - at, gather, g, &e), KITE_OK);
        at = end;
    }
    assert_int_equal(kite_tool_stream_finish(s, gather, g, &e), KITE_OK);
    assert_int_equal(kite_tool_stream_call_count(s), g->n_calls);
    snprintf(problem, problem_size, "%s", kite_tool_stream_problem(s) ? kite_tool_stream_problem(s) : "");
    kite_tool_stream_free(s);
}

/* The streamed result must be the whole parse. */
static void expect_same(const kite_tool_parse *whole, const gathered *g, const char *problem, const char *label, size_t cut) {
    if (g->bad_order) fail_msg("%s (cut %zu): events out of order: %s", label, cut, g->why);
    if (g->open != -1) fail_msg("%s (cut %zu): a call was left open", label, cut);
    const char *c = g->content ? g->content : "", *r = g->reasoning ? g->reasoning : "";
    if (g->content_len != whole->content_len || memcmp(c, whole->content, whole->content_len))
        fail_msg("%s (cut %zu): content '%s' streamed, '%s' whole", label, cut, c, whole->content);
    if (g->reasoning_len != whole->reasoning_len || memcmp(r, whole->reasoning, whole->reasoning_len))
        fail_msg("%s (cut %zu): reasoning '%s' streamed, '%s' whole", label, cut, r, whole->reasoning);
    if ((size_t)g->n_calls != whole->n_calls) fail_msg("%s (cut %zu): %d calls streamed, %zu whole", label, cut, g->n_calls, whole->n_calls);
    for (int i = 0; i < g->n_calls; i++) {
        const kite_tool_call *w = &whole->calls[i];
        const char *a = g->args[i] ? g->args[i] : "";
        if (!g->ended[i]) fail_msg("%s (cut %zu): call %d never ended", label, cut, i);
        if (strcmp(g->ids[i], w->id) || strcmp(g->names[i], w->name) || g->args_len[i] != w->arguments_len ||
            memcmp(a, w->arguments, w->arguments_len))
            fail_msg("%s (cut %zu): call %d streamed %s %s %s, whole %s %s %s", label, cut, i, g->ids[i], g->names[i], a, w->id,
                     w->name, w->arguments);
    }
    if (strcmp(problem, whole->problem)) fail_msg("%s (cut %zu): problem '%s' streamed, '%s' whole", label, cut, problem, whole->problem);
}

static uint64_t rng_state = 0x1234567;
static uint64_t rng(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* Whole parse, then every two-piece split, byte by byte, and random pieces: all the same. */
static void check_streaming(const kite_tool_parse_options *o, const char *text, size_t len, const kite_tool_parse *whole,
                            const char *label) {
    gathered g;
    char problem[512];
    bool valid = utf8_valid(text, len);
    for (size_t cut = 0; cut <= len; cut++) {
        stream_pieces(o, text, len, &cut, 1, &g, problem, sizeof problem);
        expect_same(whole, &g, problem, label, cut);
        if (valid && g.bad_utf8) fail_msg("%s (cut %zu): a delta ends inside a UTF-8 character", label, cut);
        gathered_free(&g);
    }
    size_t *cuts = malloc((len + 1) * sizeof *cuts);
    for (size_t i = 0; i < len; i++) cuts[i] = i + 1;
    stream_pieces(o, text, len, cuts, len ? len - 1 : 0, &g, problem, sizeof problem);
    expect_same(whole, &g, problem, label, (size_t)-1);
    if (valid && g.bad_utf8) fail_msg("%s (byte by byte): a delta ends inside a UTF-8 character", label);
    gathered_free(&g);
    for (int round = 0; round < 20; round++) {
        size_t n = 0, at = 0;
        while (len && at < len) {
            at += 1 + rng() % 7;
            if (at < len) cuts[n++] = at;
        }
        stream_pieces(o, text, len, cuts, n, &g, problem, sizeof problem);
        expect_same(whole, &g, problem, label, (size_t)-2);
        gathered_free(&g);
    }
    free(cuts);
}

static void parse(const kite_tool_parse_options *o, const char *text, kite_tool_parse *p) {
    kite_error e = {0};
    assert_int_equal(kite_tool_parse_text(o, text, strlen(text), p, &e), KITE_OK);
    assert_non_null(p->content);
    assert_non_null(p->reasoning);
    assert_int_equal(strlen(p->content), p->content_len);
}

/* Arguments text equal to the expected JSON value, and compact (no whitespace between tokens: the
 * value's own compact dump has the same length). */
static void expect_arguments(const char *label, int i, const char *got, const json_t *want) {
    json_error_t jerr;
    json_t *v = json_loads(got, JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL, &jerr);
    if (!v) fail_msg("%s: call %d arguments are not JSON: %s (%s)", label, i, got, jerr.text);
    json_t *w = json_deep_copy(want);
    /* integers as reals on both sides, as the JSON text was read */
    char *wt = json_dumps(w, JSON_COMPACT | JSON_ENCODE_ANY);
    json_t *w2 = json_loads(wt, JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL, &jerr);
    if (!json_equal(v, w2)) fail_msg("%s: call %d arguments %s, expected %s", label, i, got, wt);
    for (const char *p = got; *p; p++) {
        if (*p == '"') { /* skip strings */
            for (p++; *p && *p != '"'; p++)
                if (*p == '\\' && p[1]) p++;
            continue;
        }
        if (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r') fail_msg("%s: call %d arguments not compact: %s", label, i, got);
    }
    free(wt);
    json_decref(v);
    json_decref(w);
    json_decref(w2);
}

/* ---- the template renders ---- */

static json_t *load_cases(void) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/chat/tool_call_cases.json", source_dir());
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root) fail_msg("%s: %s", path, jerr.text);
    return root;
}

static char *template_source(const json_t *t) {
    const char *embedded = json_string_value(json_object_get(t, "source"));
    if (embedded) return strdup(embedded);
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/chat_golden/templates/%s.jinja", source_dir(), json_string_value(json_object_get(t, "name")));
    char *s = read_text(path, NULL);
    if (!s) fail_msg("cannot read %s", path);
    return s;
}

static void test_detect_case_templates(void **state) {
    (void)state;
    json_t *root = load_cases();
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(root, "templates"), i, t) {
        char *src = template_source(t);
        kite_tool_template_info info = kite_tool_detect(src, strlen(src), NULL, 0);
        const char *name = json_string_value(json_object_get(t, "name"));
        if (info.format != format_from_name(json_string_value(json_object_get(t, "format"))))
            fail_msg("%s: detected %s", name, kite_tool_format_name(info.format));
        if (info.think != json_is_true(json_object_get(t, "think"))) fail_msg("%s: think %d", name, info.think);
        free(src);
    }
    json_decref(root);
}

/* Every template in the golden corpus, tools or not: the family its text shows. */
static void test_detect_golden_templates(void **state) {
    (void)state;
    static const struct { const char *name; kite_tool_format format; bool think; } want[] = {
        {"chatglm3", KITE_TOOL_FORMAT_GENERIC, false},      {"cogito", KITE_TOOL_FORMAT_HERMES, false},
        {"command_r_plus", KITE_TOOL_FORMAT_GENERIC, false}, {"command_r_plus_tool_use", KITE_TOOL_FORMAT_COMMAND_R, false},
        {"deepseek_r1", KITE_TOOL_FORMAT_DEEPSEEK, true},   {"deepseek_v3", KITE_TOOL_FORMAT_DEEPSEEK, false},
        {"gemma3", KITE_TOOL_FORMAT_GENERIC, false},         {"glm4", KITE_TOOL_FORMAT_GLM4, false},
        {"granite3_3", KITE_TOOL_FORMAT_GRANITE, true},      {"internlm2", KITE_TOOL_FORMAT_GENERIC, false},
        {"llama3", KITE_TOOL_FORMAT_GENERIC, false},         {"llama3_2", KITE_TOOL_FORMAT_LLAMA3, false},
        {"mistral_nemo", KITE_TOOL_FORMAT_MISTRAL, false},   {"phi4", KITE_TOOL_FORMAT_GENERIC, false},
        {"qwen2_5", KITE_TOOL_FORMAT_HERMES, false},         {"qwen3", KITE_TOOL_FORMAT_HERMES, true},
        {"smollm2", KITE_TOOL_FORMAT_GENERIC, false},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        char path[4096];
        size_t len;
        snprintf(path, sizeof path, "%s/tests/chat_golden/templates/%s.jinja", source_dir(), want[i].name);
        char *src = read_text(path, &len);
        if (!src) fail_msg("cannot read %s", path);
        kite_tool_template_info info = kite_tool_detect(src, len, NULL, 0);
        if (info.format != want[i].format || info.think != want[i].think)
            fail_msg("%s: detected %s think=%d", want[i].name, kite_tool_format_name(info.format), info.think);
        free(src);
    }
    /* a template that shows nothing: the vocabulary's special tokens decide */
    const char *specials[] = {"<|im_start|>", "<tool_call>", "</tool_call>", "<think>"};
    kite_tool_template_info info = kite_tool_detect("{{ messages }}", 14, specials, 4);
    assert_int_equal(info.format, KITE_TOOL_FORMAT_HERMES);
    assert_true(info.think);
    const char *mistral[] = {"[INST]", "[TOOL_CALLS]"};
    assert_int_equal(kite_tool_detect("{{ messages }}", 14, mistral, 2).format, KITE_TOOL_FORMAT_MISTRAL);
    const char *harmony[] = {"<|start|>", "<|channel|>", "<|message|>"};
    assert_int_equal(kite_tool_detect(NULL, 0, harmony, 3).format, KITE_TOOL_FORMAT_HARMONY);
    assert_int_equal(kite_tool_detect(NULL, 0, NULL, 0).format, KITE_TOOL_FORMAT_GENERIC);
}

static void test_template_renders(void **state) {
    (void)state;
    json_t *root = load_cases();
    size_t i, n = 0;
    json_t *c;
    json_array_foreach(json_object_get(root, "cases"), i, c) {
        const char *id = json_string_value(json_object_get(c, "id"));
        const char *text = json_string_value(json_object_get(c, "text"));
        kite_tool_parse_options o = kite_tool_parse_default_options(format_from_name(json_string_value(json_object_get(c, "format"))));
        o.think = json_is_true(json_object_get(c, "think"));
        o.starts_in_think = json_is_true(json_object_get(c, "prompt_opens_think"));
        o.id_seed = i;
        kite_tool_parse p;
        parse(&o, text, &p);
        if (p.problem[0]) fail_msg("%s: problem %s", id, p.problem);
        if (strcmp(p.content, json_string_value(json_object_get(c, "content"))))
            fail_msg("%s: content '%s', expected '%s'", id, p.content, json_string_value(json_object_get(c, "content")));
        if (strcmp(p.reasoning, json_string_value(json_object_get(c, "reasoning"))))
            fail_msg("%s: reasoning '%s', expected '%s'", id, p.reasoning, json_string_value(json_object_get(c, "reasoning")));
        json_t *calls = json_object_get(c, "calls");
        if (p.n_calls != json_array_size(calls)) fail_msg("%s: %zu calls, expected %zu", id, p.n_calls, json_array_size(calls));
        for (size_t k = 0; k < p.n_calls; k++) {
            json_t *w = json_array_get(calls, k);
            if (strcmp(p.calls[k].name, json_string_value(json_object_get(w, "name"))))
                fail_msg("%s: call %zu is %s", id, k, p.calls[k].name);
            expect_arguments(id, (int)k, p.calls[k].arguments, json_object_get(w, "arguments"));
            assert_int_equal(strncmp(p.calls[k].id, "call_", 5) == 0, o.format != KITE_TOOL_FORMAT_MISTRAL);
            for (size_t j = 0; j < k; j++) assert_string_not_equal(p.calls[k].id, p.calls[j].id);
        }
        check_streaming(&o, text, strlen(text), &p, id);
        kite_tool_parse_clear(&p);
        n++;
    }
    assert_true(n >= 100);
    json_decref(root);
}

/* ---- the public reply API (kite.h) over the same cases ---- */

typedef struct reply_parts {
    char *content, *reasoning, *names, *args;
    size_t content_len, reasoning_len, names_len, args_len;
    int starts, ends;
} reply_parts;

static bool on_part(kite_chat_reply_part part, int32_t call, const char *text, size_t len, void *user) {
    reply_parts *r = user;
    switch (part) {
    case KITE_REPLY_CONTENT: append(&r->content, &r->content_len, text, len); break;
    case KITE_REPLY_REASONING: append(&r->reasoning, &r->reasoning_len, text, len); break;
    case KITE_REPLY_CALL_START:
        assert_int_equal(call, r->starts++);
        assert_int_equal(strlen(text), len);
        append(&r->names, &r->names_len, text, len);
        append(&r->names, &r->names_len, "\n", 1);
        break;
    case KITE_REPLY_CALL_ARGUMENTS:
        assert_int_equal(call, r->starts - 1);
        append(&r->args, &r->args_len, text, len);
        break;
    case KITE_REPLY_CALL_END:
        assert_int_equal(call, r->ends++);
        append(&r->args, &r->args_len, "\n", 1);
        break;
    }
    return true;
}

/* Each case through kite_chat_reply, with the case's template (its family read from the source, as the
 * server reads it), fed in pieces: the parts streamed and the finished OpenAI message both say what the
 * template rendered; kite_chat_parse_reply gives the same message. */
static void test_public_reply_api(void **state) {
    (void)state;
    json_t *root = load_cases();
    size_t i, n = 0;
    json_t *c;
    json_array_foreach(json_object_get(root, "cases"), i, c) {
        const char *id = json_string_value(json_object_get(c, "id"));
        const char *text = json_string_value(json_object_get(c, "text"));
        const char *want_content = json_string_value(json_object_get(c, "content"));
        const char *want_reasoning = json_string_value(json_object_get(c, "reasoning"));
        json_t *want_calls = json_object_get(c, "calls");
        const json_t *t = NULL;
        size_t k;
        json_t *each;
        json_array_foreach(json_object_get(root, "templates"), k, each)
            if (!strcmp(json_string_value(json_object_get(each, "name")), json_string_value(json_object_get(c, "template")))) t = each;
        if (!t) fail_msg("%s: no template", id);
        char *src = template_source(t), err[512];
        kite_chat_template *tmpl = NULL;
        if (kite_chat_template_from_text(&tmpl, src, strlen(src), NULL, err, sizeof err)) fail_msg("%s: %s", id, err);
        free(src);
        kite_chat_reply_params rp = kite_chat_reply_default_params();
        rp.tool_calls = true;
        rp.id_seed = i;
        if (json_is_true(json_object_get(c, "prompt_opens_think"))) {
            rp.prompt = "<|Assistant|><think>\n";
            rp.prompt_len = strlen(rp.prompt);
        }
        kite_chat_reply *reply = NULL;
        assert_int_equal(kite_chat_reply_open(&reply, tmpl, &rp, err, sizeof err), KITE_OK);
        reply_parts parts = {0};
        size_t len = strlen(text), step = 1 + i % 7;
        for (size_t at = 0; at < len; at += step)
            assert_int_equal(kite_chat_reply_feed(reply, text + at, at + step <= len ? step : len - at, on_part, &parts, err, sizeof err), KITE_OK);
        char *message_text = NULL, *whole_text = NULL;
        assert_int_equal(kite_chat_reply_finish(reply, on_part, &parts, &message_text, err, sizeof err), KITE_OK);
        assert_null(kite_chat_reply_problem(reply));
        assert_int_equal(kite_chat_reply_feed(reply, "x", 1, NULL, NULL, err, sizeof err), KITE_ERR_INVALID_ARG);
        kite_chat_reply_free(reply);
        assert_int_equal(kite_chat_parse_reply(tmpl, &rp, text, len, &whole_text, err, sizeof err), KITE_OK);
        assert_string_equal(message_text, whole_text);

        json_t *m = json_loads(message_text, 0, NULL);
        assert_non_null(m);
        assert_string_equal(json_string_value(json_object_get(m, "role")), "assistant");
        json_t *content = json_object_get(m, "content");
        size_t n_calls = json_array_size(want_calls);
        if (n_calls && !*want_content) assert_true(json_is_null(content));
        else if (strcmp(json_string_value(content), want_content)) fail_msg("%s: content %s", id, message_text);
        json_t *reasoning = json_object_get(m, "reasoning_content");
        if (*want_reasoning ? !reasoning || strcmp(json_string_value(reasoning), want_reasoning) : reasoning != NULL)
            fail_msg("%s: reasoning %s", id, message_text);
        json_t *calls = json_object_get(m, "tool_calls");
        if (json_array_size(calls) != n_calls || (!n_calls && calls)) fail_msg("%s: calls %s", id, message_text);
        char *names = NULL, *args = NULL;
        size_t names_len = 0, args_len = 0;
        for (k = 0; k < n_calls; k++) {
            json_t *call = json_array_get(calls, k), *fn = json_object_get(call, "function");
            assert_string_equal(json_string_value(json_object_get(call, "type")), "function");
            assert_true(json_string_length(json_object_get(call, "id")) >= 9);
            const char *name = json_string_value(json_object_get(fn, "name"));
            if (strcmp(name, json_string_value(json_object_get(json_array_get(want_calls, k), "name")))) fail_msg("%s: call %zu %s", id, k, name);
            const char *a = json_string_value(json_object_get(fn, "arguments"));
            expect_arguments(id, (int)k, a, json_object_get(json_array_get(want_calls, k), "arguments"));
            append(&names, &names_len, name, strlen(name));
            append(&names, &names_len, "\n", 1);
            append(&args, &args_len, a, strlen(a));
            append(&args, &args_len, "\n", 1);
        }
        /* the streamed parts are the message's */
        assert_string_equal(parts.content ? parts.content : "", want_content);
        assert_string_equal(parts.reasoning ? parts.reasoning : "", want_reasoning);
        assert_string_equal(parts.names ? parts.names : "", names ? names : "");
        assert_string_equal(parts.args ? parts.args : "", args ? args : "");
        assert_int_equal(parts.starts, (int)n_calls);
        assert_int_equal(parts.ends, (int)n_calls);
        free(names);
        free(args);
        free(parts.content);
        free(parts.reasoning);
        free(parts.names);
        free(parts.args);
        json_decref(m);
        kite_free(message_text);
        kite_free(whole_text);
        kite_chat_template_free(tmpl);
        n++;
    }
    assert_true(n >= 100);
    /* without tool_calls the same markup is content */
    kite_chat_template *tmpl = NULL;
    const char *src = "{% for m in messages %}<tool_call>{{ m.content }}{% endfor %}";
    assert_int_equal(kite_chat_template_from_text(&tmpl, src, strlen(src), NULL, NULL, 0), KITE_OK);
    const char *call = "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>";
    char *message = NULL;
    assert_int_equal(kite_chat_parse_reply(tmpl, NULL, call, strlen(call), &message, NULL, 0), KITE_OK);
    json_t *m = json_loads(message, 0, NULL);
    assert_string_equal(json_string_value(json_object_get(m, "content")), call);
    assert_null(json_object_get(m, "tool_calls"));
    json_decref(m);
    kite_free(message);
    /* invalid UTF-8 becomes U+FFFD in the message */
    assert_int_equal(kite_chat_parse_reply(tmpl, NULL, "a\xff" "b", 3, &message, NULL, 0), KITE_OK);
    assert_string_equal(message, "{\"role\":\"assistant\",\"content\":\"a\xEF\xBF\xBD" "b\"}");
    kite_free(message);
    kite_chat_template_free(tmpl);
    json_decref(root);
}

/* The frame a grammar forces must be how the template itself begins a call. */
static void test_frame_matches_templates(void **state) {
    (void)state;
    json_t *root = load_cases();
    size_t i, checked = 0;
    json_t *c;
    json_array_foreach(json_object_get(root, "cases"), i, c) {
        const char *text = json_string_value(json_object_get(c, "text"));
        if (json_string_length(json_object_get(c, "content")) || json_string_length(json_object_get(c, "reasoning"))) continue;
        if (!strncmp(text, "<think>", 7)) continue;
        kite_tool_format f = format_from_name(json_string_value(json_object_get(c, "format")));
        const char *name = json_string_value(json_object_get(json_array_get(json_object_get(c, "calls"), 0), "name"));
        char *prefix = NULL, *any = NULL, *between = NULL;
        kite_error e = {0};
        assert_int_equal(kite_tool_call_frame(f, name, &prefix, NULL, NULL, &e), KITE_OK);
        assert_int_equal(kite_tool_call_frame(f, NULL, &any, &between, NULL, &e), KITE_OK);
        if (strncmp(text, prefix, strlen(prefix)))
            fail_msg("%s: the template starts '%.80s', the frame '%s'", json_string_value(json_object_get(c, "id")), text, prefix);
        /* with no name: prefix + name + name_to_args is the named prefix */
        char joined[512];
        snprintf(joined, sizeof joined, "%s%s%s", any, name, between);
        assert_string_equal(joined, prefix);
        free(prefix);
        free(any);
        free(between);
        checked++;
    }
    assert_true(checked >= 40);
    json_decref(root);
}

/* prefix + arguments + suffix parses back to the call, in every format. */
static void test_frame_round_trip(void **state) {
    (void)state;
    const char *args = "{\"city\": \"S\xc3\xa3o Paulo\", \"days\": [1, 2], \"opts\": {\"metric\": true}}";
    const char *compact = "{\"city\":\"S\xc3\xa3o Paulo\",\"days\":[1,2],\"opts\":{\"metric\":true}}";
    for (int f = KITE_TOOL_FORMAT_GENERIC; f < KITE_TOOL_FORMAT_COUNT; f++) {
        char *prefix, *suffix;
        kite_error e = {0};
        assert_int_equal(kite_tool_call_frame((kite_tool_format)f, "get_forecast", &prefix, NULL, &suffix, &e), KITE_OK);
        char text[1024];
        snprintf(text, sizeof text, "%s%s%s", prefix, args, suffix);
        kite_tool_parse_options o = kite_tool_parse_default_options((kite_tool_format)f);
        kite_tool_parse p;
        parse(&o, text, &p);
        if (p.n_calls != 1 || strcmp(p.calls[0].name, "get_forecast") || strcmp(p.calls[0].arguments, compact) || p.content_len ||
            p.problem[0])
            fail_msg("%s: '%s' gave %zu calls, content '%s', problem '%s'", kite_tool_format_name((kite_tool_format)f), text,
                     p.n_calls, p.content, p.problem);
        check_streaming(&o, text, strlen(text), &p, text);
        kite_tool_parse_clear(&p);
        free(prefix);
        free(suffix);
    }
    kite_error e = {0};
    char *x = (char *)1;
    assert_int_equal(kite_tool_call_frame(KITE_TOOL_FORMAT_NONE, "f", &x, NULL, NULL, &e), KITE_ERR_INVALID_ARG);
    assert_null(x);
    assert_int_equal(kite_tool_call_frame(KITE_TOOL_FORMAT_HARMONY, "bad name", &x, NULL, NULL, &e), KITE_ERR_INVALID_ARG);
    assert_non_null(strstr(e.msg, "byte 3"));
    assert_int_equal(kite_tool_call_frame(KITE_TOOL_FORMAT_HERMES, "\xff", &x, NULL, NULL, &e), KITE_ERR_INVALID_ARG);
    /* a JSON-string name is escaped */
    assert_int_equal(kite_tool_call_frame(KITE_TOOL_FORMAT_HERMES, "a\"b", &x, NULL, NULL, &e), KITE_OK);
    assert_string_equal(x, "<tool_call>\n{\"name\": \"a\\\"b\", \"arguments\": ");
    free(x);
}

/* ---- hand-written texts ---- */

typedef struct hand_case {
    const char *label;
    kite_tool_format format;
    bool think, starts_in_think;
    const char *text;
    const char *content, *reasoning;
    int n_calls;
    const char *calls[3][2]; /* name, compact arguments */
    bool problem;
} hand_case;

#define DS_CALLS_BEGIN "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define DS_CALLS_END "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "end\xef\xbd\x9c>"
#define DS_CALL_BEGIN "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define DS_CALL_END "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c>"
#define DS_SEP "<\xef\xbd\x9ctool\xe2\x96\x81sep\xef\xbd\x9c>"

/* Harmony texts follow OpenAI's harmony format description (openai/harmony, "The harmony response
 * format"): the reply after "<|start|>assistant". */
static const hand_case HAND[] = {
    {"harmony analysis then call", KITE_TOOL_FORMAT_HARMONY, false, false,
     "<|channel|>analysis<|message|>User asks for the weather. Call get_weather.<|end|><|start|>assistant<|channel|>commentary "
     "to=functions.get_weather <|constrain|>json<|message|>{\"location\": \"Tokyo\"}<|call|>",
     "", "User asks for the weather. Call get_weather.", 1, {{"get_weather", "{\"location\":\"Tokyo\"}"}}, false},
    {"harmony final", KITE_TOOL_FORMAT_HARMONY, false, false,
     "<|channel|>analysis<|message|>2+2 is 4.<|end|><|start|>assistant<|channel|>final<|message|>The answer is 4.<|return|>",
     "The answer is 4.", "2+2 is 4.", 0, {{0}}, false},
    {"harmony recipient before channel, no stop token", KITE_TOOL_FORMAT_HARMONY, false, false,
     " to=functions.get_time<|channel|>commentary json<|message|>{\"timezone\":\"UTC\"}", "", "", 1,
     {{"get_time", "{\"timezone\":\"UTC\"}"}}, false},
    {"harmony preamble then call", KITE_TOOL_FORMAT_HARMONY, false, false,
     "<|channel|>commentary<|message|>Checking two cities.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather "
     "<|constrain|>json<|message|>{\"location\":\"Oslo\"}<|call|>",
     "Checking two cities.", "", 1, {{"get_weather", "{\"location\":\"Oslo\"}"}}, false},
    {"harmony plain text", KITE_TOOL_FORMAT_HARMONY, false, false, "Just words.", "Just words.", "", 0, {{0}}, false},
    {"harmony broken arguments", KITE_TOOL_FORMAT_HARMONY, false, false,
     "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\": tru}<|call|>", "", "", 1, {{"f", "{\"a\":tru"}}, true},
    {"mistral args form", KITE_TOOL_FORMAT_MISTRAL_ARGS, false, false, "[TOOL_CALLS]get_weather[ARGS]{\"location\": \"Paris\"}", "",
     "", 1, {{"get_weather", "{\"location\":\"Paris\"}"}}, false},
    {"mistral args form, two calls and a call id", KITE_TOOL_FORMAT_MISTRAL_ARGS, false, false,
     "[TOOL_CALLS]get_weather[CALL_ID]a1B2c3D4e[ARGS]{\"location\": \"Paris\"}[TOOL_CALLS]get_time[ARGS]{}", "", "", 2,
     {{"get_weather", "{\"location\":\"Paris\"}"}, {"get_time", "{}"}}, false},
    {"mistral list with content before", KITE_TOOL_FORMAT_MISTRAL, false, false,
     "Sure.[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {\"x\": [1, 2.5e-3]}}]", "Sure.", "", 1, {{"f", "{\"x\":[1,2.5e-3]}"}}, false},
    {"mistral bare name without [ARGS]", KITE_TOOL_FORMAT_MISTRAL_ARGS, false, false, "[TOOL_CALLS]f {\"a\":1}",
     "[TOOL_CALLS]f {\"a\":1}", "", 0, {{0}}, true},
    {"llama built-in call", KITE_TOOL_FORMAT_LLAMA3, false, false, "<|python_tag|>brave_search.call(query=\"weather in Paris\")", "", "",
     1, {{"brave_search", "{\"query\":\"weather in Paris\"}"}}, false},
    {"llama built-in call with several values", KITE_TOOL_FORMAT_LLAMA3, false, false,
     "<|python_tag|>wolfram_alpha.call(query='2+2 \"x\"', n=3, exact=True, none=None)<|eom_id|>", "", "", 1,
     {{"wolfram_alpha", "{\"query\":\"2+2 \\\"x\\\"\",\"n\":3,\"exact\":true,\"none\":null}"}}, false},
    {"llama code interpreter", KITE_TOOL_FORMAT_LLAMA3, false, false, "<|python_tag|>import math\nprint(math.pi)", "", "", 1,
     {{"python", "{\"code\":\"import math\\nprint(math.pi)\"}"}}, false},
    {"llama JSON after the tag", KITE_TOOL_FORMAT_LLAMA3, false, false,
     "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"location\": \"Paris\"}}", "", "", 1,
     {{"get_weather", "{\"location\":\"Paris\"}"}}, false},
    {"llama two calls", KITE_TOOL_FORMAT_LLAMA3, false, false,
     "{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"k\": \"v\"}}", "", "", 2,
     {{"a", "{}"}, {"b", "{\"k\":\"v\"}"}}, false},
    {"llama JSON that is not a call", KITE_TOOL_FORMAT_LLAMA3, false, false, "{\"answer\": 42, \"name\": \"x\"}",
     "{\"answer\": 42, \"name\": \"x\"}", "", 0, {{0}}, false},
    {"llama name without arguments then another key", KITE_TOOL_FORMAT_LLAMA3, false, false, "{\"name\": \"Bob\", \"age\": 3}",
     "{\"name\": \"Bob\", \"age\": 3}", "", 0, {{0}}, false},
    {"llama JSON later in the text is content", KITE_TOOL_FORMAT_LLAMA3, false, false,
     "Here: {\"name\": \"f\", \"parameters\": {}}", "Here: {\"name\": \"f\", \"parameters\": {}}", "", 0, {{0}}, false},
    {"generic one call", KITE_TOOL_FORMAT_GENERIC, false, false, "{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}",
     "", "", 1, {{"get_weather", "{\"location\":\"Paris\"}"}}, false},
    {"generic tool_calls list", KITE_TOOL_FORMAT_GENERIC, false, false,
     "{\"tool_calls\": [{\"name\": \"a\", \"arguments\": {}}, {\"id\": \"x\", \"type\": \"function\", \"function\": {\"name\": \"b\", "
     "\"arguments\": \"{\\\"x\\\": 1}\"}}]}",
     "", "", 2, {{"a", "{}"}, {"b", "{\"x\":1}"}}, false},
    {"generic arguments before the name", KITE_TOOL_FORMAT_GENERIC, false, false, "{\"arguments\": {\"q\": [true, null]}, \"name\": \"s\"}",
     "", "", 1, {{"s", "{\"q\":[true,null]}"}}, false},
    {"generic plain JSON answer", KITE_TOOL_FORMAT_GENERIC, false, false, "{\"result\": 42}", "{\"result\": 42}", "", 0, {{0}}, false},
    {"granite list", KITE_TOOL_FORMAT_GRANITE, false, false,
     "<|tool_call|>[{\"arguments\": {\"location\": \"Paris\"}, \"name\": \"get_weather\"}]", "", "", 1,
     {{"get_weather", "{\"location\":\"Paris\"}"}}, false},
    {"deepseek two calls, text after the block", KITE_TOOL_FORMAT_DEEPSEEK, false, false,
     DS_CALLS_BEGIN DS_CALL_BEGIN "function" DS_SEP "a\n```json\n{\"x\": 1}\n```" DS_CALL_END "\n" DS_CALL_BEGIN "function" DS_SEP
     "b\n```json\n{}\n```" DS_CALL_END DS_CALLS_END " Done.",
     "Done.", "", 2, {{"a", "{\"x\":1}"}, {"b", "{}"}}, false},
    {"deepseek V3.1 form", KITE_TOOL_FORMAT_DEEPSEEK_V3_1, false, false,
     DS_CALLS_BEGIN DS_CALL_BEGIN "get_time" DS_SEP "{\"timezone\": \"UTC\"}" DS_CALL_END DS_CALLS_END, "", "", 1,
     {{"get_time", "{\"timezone\":\"UTC\"}"}}, false},
    {"deepseek reasoning then a call", KITE_TOOL_FORMAT_DEEPSEEK, true, true,
     "Need the tool.\n</think>\n\n" DS_CALLS_BEGIN DS_CALL_BEGIN "function" DS_SEP "a\n```json\n{}\n```" DS_CALL_END DS_CALLS_END, "",
     "Need the tool.", 1, {{"a", "{}"}}, false},
    {"think block then content", KITE_TOOL_FORMAT_HERMES, true, false, "<think>\nStep one.\nStep two.\n</think>\n\nHello!", "Hello!",
     "Step one.\nStep two.", 0, {{0}}, false},
    {"think never closed", KITE_TOOL_FORMAT_HERMES, true, false, "<think>\nStill thinking", "", "Still thinking", 0, {{0}}, false},
    {"think tag later is content", KITE_TOOL_FORMAT_HERMES, true, false, "Hi <think>x</think>", "Hi <think>x</think>", "", 0, {{0}}, false},
    {"think off: tags are content", KITE_TOOL_FORMAT_HERMES, false, false, "<think>x</think>y", "<think>x</think>y", "", 0, {{0}}, false},
    {"plain text is kept byte for byte", KITE_TOOL_FORMAT_HERMES, false, false, "  Hello,\n world! \xe6\x9d\xb1\xe4\xba\xac \xf0\x9f\x98\x80  \n",
     "  Hello,\n world! \xe6\x9d\xb1\xe4\xba\xac \xf0\x9f\x98\x80  \n", "", 0, {{0}}, false},
    {"marker prefix at the end is content", KITE_TOOL_FORMAT_HERMES, false, false, "a <tool_ca", "a <tool_ca", "", 0, {{0}}, false},
    {"hermes unknown tool name is kept", KITE_TOOL_FORMAT_HERMES, false, false,
     "<tool_call>\n{\"name\": \"no_such_tool\", \"arguments\": {}}\n</tool_call>", "", "", 1, {{"no_such_tool", "{}"}}, false},
    {"hermes unterminated before the name", KITE_TOOL_FORMAT_HERMES, false, false, "Hi.\n<tool_call>\n{\"name\": \"get_wea",
     "Hi.\n<tool_call>\n{\"name\": \"get_wea", "", 0, {{0}}, true},
    {"hermes unterminated in the arguments", KITE_TOOL_FORMAT_HERMES, false, false,
     "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": \"x y", "", "", 1, {{"f", "{\"a\":\"x y"}}, true},
    {"hermes bad JSON before the name", KITE_TOOL_FORMAT_HERMES, false, false, "<tool_call>\nnot json\n</tool_call>",
     "<tool_call>\nnot json\n</tool_call>", "", 0, {{0}}, true},
    {"hermes bad JSON in the arguments", KITE_TOOL_FORMAT_HERMES, false, false,
     "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1,,}}\n</tool_call>\nafter", "after", "", 1, {{"f", "{\"a\":1,"}}, true},
    {"hermes name is not a string", KITE_TOOL_FORMAT_HERMES, false, false, "<tool_call>{\"name\": 5}</tool_call>",
     "<tool_call>{\"name\": 5}</tool_call>", "", 0, {{0}}, true},
    {"hermes missing closer, then text", KITE_TOOL_FORMAT_HERMES, false, false,
     "<tool_call>{\"name\":\"f\",\"arguments\":{}} trailing", "trailing", "", 1, {{"f", "{}"}}, true},
    {"hermes second call right after the first", KITE_TOOL_FORMAT_HERMES, false, false,
     "<tool_call>{\"name\":\"f\",\"arguments\":{}}<tool_call>{\"name\":\"g\",\"arguments\":{}}</tool_call>", "", "", 2,
     {{"f", "{}"}, {"g", "{}"}}, true},
    {"hermes opener twice", KITE_TOOL_FORMAT_HERMES, false, false,
     "<tool_call>\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"s\": \"\\u00e9\\ud83d\\ude00\"}}\n</tool_call>", "<tool_call>", "", 1,
     {{"f", "{\"s\":\"\\u00e9\\ud83d\\ude00\"}"}}, true},
    {"hermes string arguments that are not JSON", KITE_TOOL_FORMAT_HERMES, false, false,
     "<tool_call>\n{\"name\": \"f\", \"arguments\": \"just words\"}\n</tool_call>", "", "", 1, {{"f", "just words"}}, false},
    /* Command R+: as its tool_use template asks ("Write 'Action:' followed by a json-formatted list of actions") */
    {"command r list in a fence", KITE_TOOL_FORMAT_COMMAND_R, false, false,
     "Action: ```json\n[\n    {\n        \"tool_name\": \"internet_search\",\n        \"parameters\": {\n            \"query\": \"oslo weather\"\n"
     "        }\n    },\n    {\"tool_name\": \"get_time\", \"parameters\": {}}\n]\n```",
     "", "", 2, {{"internet_search", "{\"query\":\"oslo weather\"}"}, {"get_time", "{}"}}, false},
    {"command r without a fence, text before", KITE_TOOL_FORMAT_COMMAND_R, false, false,
     "Let me look.\nAction: [{\"tool_name\": \"f\", \"parameters\": {\"a\": 1}}]", "Let me look.", "", 1, {{"f", "{\"a\":1}"}}, false},
    {"command r single object", KITE_TOOL_FORMAT_COMMAND_R, false, false,
     "Action: ```json\n{\"tool_name\": \"f\", \"parameters\": {}}\n```\nDone.", "Done.", "", 1, {{"f", "{}"}}, false},
    {"command r fence not closed", KITE_TOOL_FORMAT_COMMAND_R, false, false,
     "Action: ```json\n[{\"tool_name\": \"f\", \"parameters\": {}}] after", "after", "", 1, {{"f", "{}"}}, true},
    {"command r action word without JSON", KITE_TOOL_FORMAT_COMMAND_R, false, false, "Action: none needed.", "Action: none needed.", "",
     0, {{0}}, true},
    {"command r tool_name is only this format's key", KITE_TOOL_FORMAT_MISTRAL, false, false,
     "[TOOL_CALLS][{\"tool_name\": \"f\", \"parameters\": {}}]", "[TOOL_CALLS][{\"tool_name\": \"f\", \"parameters\": {}}]", "", 0,
     {{0}}, true},
    /* GLM-4: <|assistant|>{metadata}\n{content}, the call's name as the metadata, its arguments as the content */
    {"glm4 call", KITE_TOOL_FORMAT_GLM4, false, false, "get_weather\n{\"location\": \"Beijing\", \"unit\": \"celsius\"}", "", "", 1,
     {{"get_weather", "{\"location\":\"Beijing\",\"unit\":\"celsius\"}"}}, false},
    {"glm4 plain answer keeps its newline", KITE_TOOL_FORMAT_GLM4, false, false, "\nHello! How can I help?", "\nHello! How can I help?", "",
     0, {{0}}, false},
    {"glm4 first line with a space is content", KITE_TOOL_FORMAT_GLM4, false, false, "Sure thing\n{\"a\": 1}", "Sure thing\n{\"a\": 1}", "",
     0, {{0}}, false},
    {"glm4 name line without arguments is content", KITE_TOOL_FORMAT_GLM4, false, false, "Paris\nis the capital.",
     "Paris\nis the capital.", "", 0, {{0}}, false},
    {"glm4 call after whitespace", KITE_TOOL_FORMAT_GLM4, false, false, "\n get_time\n\n {}", "", "", 1, {{"get_time", "{}"}}, false},
    {"glm4 whitespace only", KITE_TOOL_FORMAT_GLM4, false, false, "\n \n", "\n \n", "", 0, {{0}}, false},
    {"glm4 one word is content", KITE_TOOL_FORMAT_GLM4, false, false, "Yes", "Yes", "", 0, {{0}}, false},
    {"glm4 broken arguments", KITE_TOOL_FORMAT_GLM4, false, false, "f\n{\"a\": [1,}", "", "", 1, {{"f", "{\"a\":[1,"}}, true},
    {"none: markup is content", KITE_TOOL_FORMAT_NONE, false, false, "<tool_call>{\"name\":\"f\"}</tool_call>",
     "<tool_call>{\"name\":\"f\"}</tool_call>", "", 0, {{0}}, false},
};

static void test_hand_cases(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof HAND / sizeof HAND[0]; i++) {
        const hand_case *h = &HAND[i];
        kite_tool_parse_options o = kite_tool_parse_default_options(h->format);
        o.think = h->think;
        o.starts_in_think = h->starts_in_think;
        o.id_seed = 42;
        kite_tool_parse p;
        parse(&o, h->text, &p);
        if (strcmp(p.content, h->content)) fail_msg("%s: content '%s', expected '%s'", h->label, p.content, h->content);
        if (strcmp(p.reasoning, h->reasoning)) fail_msg("%s: reasoning '%s', expected '%s'", h->label, p.reasoning, h->reasoning);
        if ((int)p.n_calls != h->n_calls) fail_msg("%s: %zu calls, expected %d (problem: %s)", h->label, p.n_calls, h->n_calls, p.problem);
        for (int k = 0; k < h->n_calls; k++)
            if (strcmp(p.calls[k].name, h->calls[k][0]) || strcmp(p.calls[k].arguments, h->calls[k][1]))
                fail_msg("%s: call %d is %s %s, expected %s %s", h->label, k, p.calls[k].name, p.calls[k].arguments, h->calls[k][0],
                         h->calls[k][1]);
        if (!!p.problem[0] != h->problem) fail_msg("%s: problem '%s'", h->label, p.problem);
        if (p.problem[0] && !strstr(p.problem, "byte ")) fail_msg("%s: the problem names no offset: %s", h->label, p.problem);
        check_streaming(&o, h->text, strlen(h->text), &p, h->label);
        kite_tool_parse_clear(&p);
    }
}

/* Deep nesting, long runs and bytes that are not UTF-8: a bounded, clear result. */
static void test_hostile_inputs(void **state) {
    (void)state;
    size_t n = 5000;
    char *text = malloc(n + 64);
    strcpy(text, "<tool_call>{\"name\":\"f\",\"arguments\":");
    size_t at = strlen(text);
    memset(text + at, '[', n);
    text[at + n] = 0;
    kite_tool_parse_options o = kite_tool_parse_default_options(KITE_TOOL_FORMAT_HERMES);
    kite_tool_parse p;
    parse(&o, text, &p);
    assert_int_equal(p.n_calls, 1);
    assert_non_null(strstr(p.problem, "nested too deep"));
    kite_tool_parse_clear(&p);
    /* a generic reply of nested arrays is content */
    o.format = KITE_TOOL_FORMAT_GENERIC;
    memset(text, '[', n);
    text[n] = 0;
    parse(&o, text, &p);
    assert_int_equal(p.n_calls, 0);
    assert_string_equal(p.content, text);
    kite_tool_parse_clear(&p);
    free(text);
    const char bad[] = "\xff\xfe<tool_call>\xc3{\"name\":\"\xff\",\"arguments\":{\"a\":\"\xc3\"}}</tool_call>\xe2\x82";
    o.format = KITE_TOOL_FORMAT_HERMES;
    parse(&o, bad, &p);
    check_streaming(&o, bad, sizeof bad - 1, &p, "not UTF-8");
    kite_tool_parse_clear(&p);
}

static bool stop_at_first(const kite_tool_event *ev, void *user) {
    (void)ev;
    (*(int *)user)++;
    return false;
}

/* The families whose templates read another shape than OpenAI's (tool_template.h): adapted, the template
 * shows the tools to the model, and the assistant turn it renders for an OpenAI tool_calls message is
 * markup the parser reads back to the same call (the template's own writing, not the frame's); the tool's
 * answer reaches the prompt. Unadapted, Command R+'s template cannot render OpenAI tools at all. */
static char *render_with(kite_chat_template *t, kite_tool_format f, const char *messages, const char *tools, bool agp, bool adapt) {
    (void)f; /* the template's own format decides */
    char *text = NULL, err[512];
    kite_chat_params cp = kite_chat_default_params();
    cp.messages_json = messages;
    cp.tools_json = tools;
    cp.add_generation_prompt = agp;
    cp.family_tool_shapes = adapt;
    size_t len;
    if (kite_chat_render(t, &cp, &text, &len, err, sizeof err)) text = NULL;
    return text;
}

static void test_family_template_inputs(void **state) {
    (void)state;
    static const char TOOLS[] =
        "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Weather in a city.\",\"parameters\":{\"type\":"
        "\"object\",\"properties\":{\"location\":{\"type\":\"string\",\"description\":\"The city\"},\"days\":{\"type\":\"integer\"}},"
        "\"required\":[\"location\"]}}}]";
    static const char ASK[] = "[{\"role\":\"user\",\"content\":\"Weather in Oslo?\"}]";
    static const char CALLED[] =
        "[{\"role\":\"user\",\"content\":\"Weather in Oslo?\"},{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":"
        "\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"location\\\": \\\"Oslo\\\", "
        "\\\"days\\\": 2}\"}}]}]";
    static const char ANSWERED[] =
        "[{\"role\":\"user\",\"content\":\"Weather in Oslo?\"},{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":"
        "\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"location\\\": \\\"Oslo\\\"}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"content\":\"rain, 4 C\"}]";
    /* the assistant turn opens with `opener` (its last one in a render without a generation prompt) and
     * runs to end_of_turn (or the end) */
    static const struct { const char *name; kite_tool_format format; const char *shows_tool, *opener, *end_of_turn; } fam[] = {
        {"command_r_plus_tool_use", KITE_TOOL_FORMAT_COMMAND_R, "def get_weather(location: str, days: Optional[int] = None)",
         "<|CHATBOT_TOKEN|>", "<|END_OF_TURN_TOKEN|>"},
        {"glm4", KITE_TOOL_FORMAT_GLM4, "## get_weather", "<|assistant|>", NULL},
    };
    for (size_t i = 0; i < sizeof fam / sizeof fam[0]; i++) {
        char path[4096], err[512];
        size_t len;
        snprintf(path, sizeof path, "%s/tests/chat_golden/templates/%s.jinja", source_dir(), fam[i].name);
        char *src = read_text(path, &len);
        if (!src) fail_msg("cannot read %s", path);
        kite_chat_template *t;
        assert_int_equal(kite_chat_template_from_text(&t, src, len, NULL, err, sizeof err), KITE_OK);
        free(src);
        char *prompt = render_with(t, fam[i].format, ASK, TOOLS, true, true);
        if (!prompt || !strstr(prompt, fam[i].shows_tool)) fail_msg("%s: the prompt does not show the tool: %s", fam[i].name, prompt);
        char *turn = render_with(t, fam[i].format, CALLED, TOOLS, false, true);
        assert_non_null(turn);
        char *reply = NULL;
        for (char *at = turn; (at = strstr(at, fam[i].opener)); at++) reply = at + strlen(fam[i].opener);
        if (!reply) fail_msg("%s: no assistant turn in %s", fam[i].name, turn);
        if (fam[i].end_of_turn && strstr(reply, fam[i].end_of_turn)) *strstr(reply, fam[i].end_of_turn) = 0;
        kite_tool_parse_options o = kite_tool_parse_default_options(fam[i].format);
        kite_tool_parse p;
        parse(&o, reply, &p);
        if (p.n_calls != 1 || strcmp(p.calls[0].name, "get_weather") || strcmp(p.calls[0].arguments, "{\"location\":\"Oslo\",\"days\":2}") ||
            p.content_len || p.problem[0])
            fail_msg("%s: the template's call turn '%s' parsed to %zu calls, content '%s', problem '%s'", fam[i].name, reply, p.n_calls,
                     p.content, p.problem);
        check_streaming(&o, reply, strlen(reply), &p, fam[i].name);
        kite_tool_parse_clear(&p);
        char *answered = render_with(t, fam[i].format, ANSWERED, TOOLS, true, true);
        if (!answered || !strstr(answered, "rain, 4 C")) fail_msg("%s: the tool's answer is not in the prompt: %s", fam[i].name, answered);
        kite_free(prompt);
        kite_free(turn);
        kite_free(answered);
        /* other formats: nothing changes */
        char *m = (char *)1, *tl = (char *)1;
        kite_error e = {0};
        assert_int_equal(kite_tool_template_inputs(KITE_TOOL_FORMAT_HERMES, CALLED, TOOLS, &m, &tl, &e), KITE_OK);
        assert_null(m);
        assert_null(tl);
        if (fam[i].format == KITE_TOOL_FORMAT_COMMAND_R) assert_null(render_with(t, fam[i].format, ASK, TOOLS, true, false));
        kite_chat_template_free(t);
    }
}

static void test_ids_and_api(void **state) {
    (void)state;
    char a[KITE_TOOL_ID_MAX], b[KITE_TOOL_ID_MAX];
    for (uint32_t i = 0; i < 2000; i++) {
        kite_tool_call_id(KITE_TOOL_FORMAT_HERMES, NULL, 7, i, a);
        kite_tool_call_id(KITE_TOOL_FORMAT_HERMES, NULL, 7, i + 1, b);
        assert_int_equal(strlen(a), 29);
        assert_memory_equal(a, "call_", 5);
        assert_string_not_equal(a, b);
        size_t n = kite_tool_call_id(KITE_TOOL_FORMAT_MISTRAL, NULL, 7, i, a);
        assert_int_equal(n, 9);
        for (size_t k = 0; k < n; k++) assert_true((a[k] >= '0' && a[k] <= '9') || (a[k] >= 'a' && a[k] <= 'z') || (a[k] >= 'A' && a[k] <= 'Z'));
        kite_tool_call_id(KITE_TOOL_FORMAT_MISTRAL, NULL, 7, i + 1, b);
        assert_string_not_equal(a, b);
    }
    kite_tool_call_id(KITE_TOOL_FORMAT_HERMES, "req42-", 1, 0, a);
    assert_memory_equal(a, "req42-", 6);
    kite_tool_call_id(KITE_TOOL_FORMAT_HERMES, NULL, 1, 0, a);
    kite_tool_call_id(KITE_TOOL_FORMAT_HERMES, NULL, 2, 0, b);
    assert_string_not_equal(a, b);

    assert_true(kite_tool_prompt_opens_think("<|Assistant|><think>\n", 21));
    assert_false(kite_tool_prompt_opens_think("<think>\n\n</think>\n\n", 19));
    assert_false(kite_tool_prompt_opens_think("<think>x", 8));
    assert_false(kite_tool_prompt_opens_think("assistant\n", 10));

    /* a callback that says stop */
    kite_tool_parse_options o = kite_tool_parse_default_options(KITE_TOOL_FORMAT_HERMES);
    kite_tool_stream *s;
    kite_error e = {0};
    assert_int_equal(kite_tool_stream_new(&o, &s, &e), KITE_OK);
    int calls = 0;
    assert_int_equal(kite_tool_stream_feed(s, "hello", 5, stop_at_first, &calls, &e), KITE_ERR_CANCELLED);
    assert_int_equal(calls, 1);
    assert_int_equal(kite_tool_stream_feed(s, "more", 4, stop_at_first, &calls, &e), KITE_ERR_CANCELLED);
    kite_tool_stream_free(s);
    /* feeding after finish, bad arguments */
    assert_int_equal(kite_tool_stream_new(&o, &s, &e), KITE_OK);
    assert_int_equal(kite_tool_stream_finish(s, NULL, NULL, &e), KITE_OK);
    assert_int_equal(kite_tool_stream_feed(s, "x", 1, NULL, NULL, &e), KITE_ERR_INVALID_ARG);
    kite_tool_stream_free(s);
    o.format = (kite_tool_format)99;
    assert_int_equal(kite_tool_stream_new(&o, &s, &e), KITE_ERR_INVALID_ARG);
    assert_null(s);
    kite_tool_stream_free(NULL);
    kite_tool_parse_clear(NULL);
}

/* Deltas come as soon as they are known: a call starts once its name and the start of its arguments
 * are in, its arguments flow as they are written, and content that cannot be a marker is not held. */
static void test_incremental(void **state) {
    (void)state;
    static const struct { kite_tool_format format; const char *first, *second; const char *args_after_first; } cases[] = {
        {KITE_TOOL_FORMAT_HERMES, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, ", "2]}}\n</tool_call>", "{\"a\":[1,"},
        {KITE_TOOL_FORMAT_MISTRAL, "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"a\"", ": 2}}]", "{\"a\""},
        {KITE_TOOL_FORMAT_HARMONY, "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\": \"x", "y\"}<|call|>",
         "{\"a\":\"x"},
        {KITE_TOOL_FORMAT_LLAMA3, "{\"name\": \"f\", \"parameters\": {\"a\": tr", "ue}}", "{\"a\":tr"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kite_tool_parse_options o = kite_tool_parse_default_options(cases[i].format);
        kite_tool_stream *s;
        kite_error e = {0};
        gathered g;
        memset(&g, 0, sizeof g);
        g.open = -1;
        assert_int_equal(kite_tool_stream_new(&o, &s, &e), KITE_OK);
        assert_int_equal(kite_tool_stream_feed(s, cases[i].first, strlen(cases[i].first), gather, &g, &e), KITE_OK);
        assert_int_equal(g.n_calls, 1);
        assert_string_equal(g.names[0], "f");
        assert_string_equal(g.args[0] ? g.args[0] : "", cases[i].args_after_first);
        assert_int_equal(kite_tool_stream_feed(s, cases[i].second, strlen(cases[i].second), gather, &g, &e), KITE_OK);
        assert_int_equal(kite_tool_stream_finish(s, gather, &g, &e), KITE_OK);
        assert_true(g.ended[0]);
        kite_tool_stream_free(s);
        gathered_free(&g);
    }
    /* content: only a possible marker waits */
    kite_tool_parse_options o = kite_tool_parse_default_options(KITE_TOOL_FORMAT_HERMES);
    kite_tool_stream *s;
    kite_error e = {0};
    gathered g;
    memset(&g, 0, sizeof g);
    g.open = -1;
    assert_int_equal(kite_tool_stream_new(&o, &s, &e), KITE_OK);
    assert_int_equal(kite_tool_stream_feed(s, "Hello <tool", 11, gather, &g, &e), KITE_OK);
    assert_string_equal(g.content, "Hello");
    assert_int_equal(kite_tool_stream_feed(s, "box> \xe6\x9d", 7, gather, &g, &e), KITE_OK);
    assert_string_equal(g.content, "Hello <toolbox> "); /* the space, not half a character */
    assert_int_equal(kite_tool_stream_feed(s, "\xb1", 1, gather, &g, &e), KITE_OK);
    assert_string_equal(g.content, "Hello <toolbox> \xe6\x9d\xb1");
    kite_tool_stream_free(s);
    gathered_free(&g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_detect_case_templates), cmocka_unit_test(test_detect_golden_templates),
        cmocka_unit_test(test_template_renders),      cmocka_unit_test(test_frame_matches_templates),
        cmocka_unit_test(test_frame_round_trip),      cmocka_unit_test(test_hand_cases),
        cmocka_unit_test(test_hostile_inputs),        cmocka_unit_test(test_ids_and_api),
        cmocka_unit_test(test_incremental), cmocka_unit_test(test_family_template_inputs),           cmocka_unit_test(test_public_reply_api),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
