/* Tool-call parsing (contract in tool_calls.h).
 *
 * One byte-driven state machine serves both the whole parse and the stream: every decision depends only
 * on the bytes seen so far, never on where the chunks were split, and kite_tool_parse_text is the stream
 * fed once. Three pieces:
 *   - a marker matcher: text that is a proper prefix of one of the current mode's markers waits in
 *     `pend` until the next byte decides it;
 *   - a JSON scanner (byte at a time, bounded depth) that validates the call objects and routes their
 *     parts: the name string is decoded, the arguments are copied without insignificant whitespace;
 *   - a region hold: from a call's opener until the call starts (its name is known), the raw bytes wait
 *     in `hold`, so that markup which never becomes a call comes back as content byte for byte.
 * Events are gathered into one pending text delta (kind, call index) that is sent when the kind changes,
 * before any other event, and at the end of each feed (keeping back an incomplete UTF-8 character). */
#include "chat/tool_calls.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"

enum {
    MAX_JSON_DEPTH = 128,         /* nesting of a call object and its arguments */
    MAX_HOLD_BYTES = 1 << 20,     /* markup held before a call's name is known */
    MAX_NAME_BYTES = 1024,        /* a tool name (decoded) */
    MAX_HEADER_BYTES = 1024,      /* a harmony message header, a DeepSeek call header */
    MAX_PYCALL_BYTES = 1 << 20,   /* a Llama built-in call held to the end */
    MAX_KEY_BYTES = 32,           /* call-object keys that matter are short; longer ones are "other" */
};

/* ---- growable bytes ---- */

typedef struct buf {
    char *p;
    size_t len, cap;
} buf;

static bool buf_reserve(buf *b, size_t extra) {
    if (b->len + extra + 1 <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->len + extra + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) return false;
    b->p = p;
    b->cap = cap;
    return true;
}

static bool buf_put(buf *b, const void *p, size_t n) {
    if (!n) return true;
    if (!buf_reserve(b, n)) return false;
    memcpy(b->p + b->len, p, n);
    b->len += n;
    b->p[b->len] = 0;
    return true;
}

static bool buf_putc(buf *b, char c) { return buf_put(b, &c, 1); }
static bool buf_puts(buf *b, const char *s) { return buf_put(b, s, strlen(s)); }
static void buf_free(buf *b) {
    free(b->p);
    *b = (buf){0};
}

static bool is_ws(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* Bytes at the end of p[0..n) that begin a UTF-8 character still missing its last bytes (0 when the text
 * ends on a character boundary or on bytes that can never complete one). */
static size_t utf8_incomplete_tail(const char *p, size_t n) {
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        unsigned char c = (unsigned char)p[n - back];
        if ((c & 0xC0) == 0x80) continue;
        size_t need = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xC2 && c <= 0xDF ? 2 : 1;
        return need > back ? back : 0;
    }
    return 0;
}

static void utf8_put(buf *b, uint32_t cp, bool *ok) {
    char t[4];
    size_t n;
    if (cp < 0x80) {
        t[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        t[0] = (char)(0xC0 | (cp >> 6));
        t[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        t[0] = (char)(0xE0 | (cp >> 12));
        t[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        t[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        t[0] = (char)(0xF0 | (cp >> 18));
        t[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        t[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        t[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    if (!buf_put(b, t, n)) *ok = false;
}

/* ---- the JSON scanner ---- */

/* What a JSON value is to the call parser. */
typedef enum jrole {
    JR_SKIP = 0, /* validated, ignored */
    JR_ARGS,     /* the arguments: copied compact (or, for a string, decoded and then compacted) */
    JR_NAME,     /* the function name: a string, decoded */
    JR_CALL,     /* an object that is one call */
    JR_FUNC,     /* {"function": {...}} inside a call: its keys count for that call */
    JR_LIST,     /* an array of calls */
    JR_TOP,      /* GENERIC's top object: {"tool_calls": [...]} or one call */
} jrole;

typedef enum jstate {
    JS_VALUE,     /* a value must start */
    JS_OBJ_FIRST, /* after '{': a key or '}' */
    JS_OBJ_KEY,   /* after ',' in an object: a key */
    JS_COLON,
    JS_OBJ_NEXT,  /* after a member: ',' or '}' */
    JS_ARR_FIRST, /* after '[': a value or ']' */
    JS_ARR_NEXT,
    JS_STRING,
    JS_STR_ESC,
    JS_STR_U,
    JS_NUMBER,
    JS_LITERAL,
    JS_DONE,      /* the top value is complete (trailing whitespace allowed) */
} jstate;

typedef enum jresult { JRES_OK = 0, JRES_DONE, JRES_ERROR } jresult;

typedef struct jframe {
    bool is_object;
    uint8_t role; /* jrole */
} jframe;

struct kite_tool_stream;

typedef struct jscan {
    jstate state;
    jframe stack[MAX_JSON_DEPTH];
    int depth;
    jrole next_role;     /* the role of the value about to start */
    jrole top_role;
    bool strict;         /* a tentative call: unknown keys before the call starts mean "not a call" */
    /* strings */
    bool str_is_key;
    jrole str_role;
    uint32_t u_acc, hi_surrogate;
    int u_left;
    bool key_long;
    char key[MAX_KEY_BYTES + 1];
    size_t key_len;
    buf str;             /* the decoded name or string arguments */
    /* numbers and literals */
    int num_phase;
    const char *lit;
    int lit_pos;
    /* arguments */
    int args_mode;       /* 0 none, 1 copying a non-string value, 2 decoding a string value */
    int args_depth;      /* stack depth at which the arguments value began */
    buf *args_out;       /* compact arguments go here when there is no owner (string arguments recompacted) */
    struct kite_tool_stream *owner;
    const char *error;   /* why the last JRES_ERROR */
    bool nomem;
} jscan;

static void js_init(jscan *js, jrole top, bool strict, struct kite_tool_stream *owner, buf *args_out) {
    buf keep = js->str;
    keep.len = 0;
    memset(js, 0, sizeof *js);
    js->str = keep;
    js->state = JS_VALUE;
    js->next_role = top;
    js->top_role = top;
    js->strict = strict;
    js->owner = owner;
    js->args_out = args_out;
    js->args_depth = -1;
}

/* Hooks into the call parser (defined with the stream). Each returns false to fail the scan. */
static bool hook_key(jscan *js, jrole frame_role, jrole *value_role);
static bool hook_value_start(jscan *js, jrole role);
static bool hook_name(jscan *js, const char *name, size_t len);
static void hook_args_bytes(jscan *js, const char *p, size_t n);
static bool hook_object_end(jscan *js, jrole role);

static void js_args_put(jscan *js, const char *p, size_t n) {
    if (js->owner) hook_args_bytes(js, p, n);
    else if (js->args_out && !buf_put(js->args_out, p, n)) js->nomem = true;
}

static jresult js_fail(jscan *js, const char *why) {
    js->error = why;
    return JRES_ERROR;
}

static bool recompact(const char *p, size_t n, buf *out);

/* A value ended at the current depth. */
static jresult js_value_end(jscan *js, jrole role) {
    if (js->args_mode && js->depth == js->args_depth) {
        if (js->args_mode == 2) {
            /* Arguments given as a string: its text is the arguments (compacted when it is JSON). */
            buf compact = {0};
            if (recompact(js->str.p ? js->str.p : "", js->str.len, &compact)) js_args_put(js, compact.p, compact.len);
            else js_args_put(js, js->str.p ? js->str.p : "", js->str.len);
            buf_free(&compact);
        }
        js->args_mode = 0;
        js->args_depth = -1;
    }
    if (role == JR_NAME && !hook_name(js, js->str.p ? js->str.p : "", js->str.len)) return js_fail(js, "bad name");
    if (js->depth == 0) {
        js->state = JS_DONE;
        return JRES_DONE;
    }
    js->state = js->stack[js->depth - 1].is_object ? JS_OBJ_NEXT : JS_ARR_NEXT;
    return JRES_OK;
}

static jresult js_begin_value(jscan *js, unsigned char c) {
    jrole role = js->next_role;
    js->next_role = JR_SKIP;
    if (role == JR_NAME && c != '"') return js_fail(js, "the name is not a string");
    if ((role == JR_CALL || role == JR_FUNC || role == JR_TOP) && c != '{') return js_fail(js, "a call is not an object");
    if (role == JR_LIST && c != '[') return js_fail(js, "the calls are not a list");
    if (!hook_value_start(js, role)) return js_fail(js, "not a call");
    if (role == JR_ARGS && !js->args_mode) {
        js->args_depth = js->depth;
        js->args_mode = c == '"' ? 2 : 1;
    }
    switch (c) {
    case '{':
    case '[':
        if (js->depth >= MAX_JSON_DEPTH) return js_fail(js, "JSON nested too deep");
        js->stack[js->depth++] = (jframe){.is_object = c == '{', .role = (uint8_t)role};
        js->state = c == '{' ? JS_OBJ_FIRST : JS_ARR_FIRST;
        return JRES_OK;
    case '"':
        js->state = JS_STRING;
        js->str_is_key = false;
        js->str_role = js->args_mode == 2 && js->depth == js->args_depth ? JR_ARGS : role;
        js->str.len = 0;
        js->hi_surrogate = 0;
        return JRES_OK;
    case 't': js->lit = "true"; break;
    case 'f': js->lit = "false"; break;
    case 'n': js->lit = "null"; break;
    default:
        if (c == '-' || (c >= '0' && c <= '9')) {
            js->state = JS_NUMBER;
            js->num_phase = c == '-' ? 0 : c == '0' ? 1 : 2;
            js->str_role = role;
            return JRES_OK;
        }
        return js_fail(js, "not a JSON value");
    }
    js->state = JS_LITERAL;
    js->lit_pos = 1;
    js->str_role = role;
    return JRES_OK;
}

/* A decoded string byte (name, string arguments or key). */
static void js_str_byte(jscan *js, const char *p, size_t n) {
    if (js->str_is_key) {
        if (js->key_len + n > MAX_KEY_BYTES) js->key_long = true;
        else {
            memcpy(js->key + js->key_len, p, n);
            js->key_len += n;
        }
        return;
    }
    if (js->str_role == JR_NAME || js->str_role == JR_ARGS) {
        if (js->str_role == JR_NAME && js->str.len + n > MAX_NAME_BYTES) return;
        if (!buf_put(&js->str, p, n)) js->nomem = true;
    }
}

static void js_str_cp(jscan *js, uint32_t cp) {
    buf t = {0};
    char tmp[8];
    bool ok = true;
    t.p = tmp;
    t.cap = sizeof tmp;
    utf8_put(&t, cp, &ok);
    js_str_byte(js, tmp, t.len);
}

static jresult js_string_end(jscan *js) {
    if (js->hi_surrogate) js_str_cp(js, 0xFFFD);
    js->hi_surrogate = 0;
    if (js->str_is_key) {
        js->key[js->key_len] = 0;
        js->state = JS_COLON;
        return JRES_OK;
    }
    return js_value_end(js, js->str_role);
}

static bool number_can_end(int phase) { return phase == 1 || phase == 2 || phase == 4 || phase == 7; }

static jresult js_byte_inner(jscan *js, unsigned char c, bool *consumed) {
    *consumed = true;
    switch (js->state) {
    case JS_DONE:
        if (is_ws(c)) return JRES_DONE;
        *consumed = false;
        return JRES_DONE;
    case JS_VALUE:
        if (is_ws(c)) return JRES_OK;
        return js_begin_value(js, c);
    case JS_ARR_FIRST:
        if (is_ws(c)) return JRES_OK;
        if (c == ']') {
            js->depth--;
            jrole role = js->stack[js->depth].role;
            if (!hook_object_end(js, role)) return js_fail(js, "bad list");
            return js_value_end(js, role);
        }
        js->next_role = js->stack[js->depth - 1].role == JR_LIST && !js->args_mode ? JR_CALL : JR_SKIP;
        return js_begin_value(js, c);
    case JS_ARR_NEXT:
        if (is_ws(c)) return JRES_OK;
        if (c == ',') {
            js->state = JS_VALUE;
            js->next_role = js->stack[js->depth - 1].role == JR_LIST && !js->args_mode ? JR_CALL : JR_SKIP;
            return JRES_OK;
        }
        if (c == ']') {
            js->depth--;
            jrole role = js->stack[js->depth].role;
            if (!hook_object_end(js, role)) return js_fail(js, "bad list");
            return js_value_end(js, role);
        }
        return js_fail(js, "expected ',' or ']'");
    case JS_OBJ_FIRST:
    case JS_OBJ_KEY:
        if (is_ws(c)) return JRES_OK;
        if (c == '}' && js->state == JS_OBJ_FIRST) {
            js->depth--;
            jrole role = js->stack[js->depth].role;
            if (!hook_object_end(js, role)) return js_fail(js, "not a call");
            return js_value_end(js, role);
        }
        if (c != '"') return js_fail(js, "expected a key");
        js->state = JS_STRING;
        js->str_is_key = true;
        js->key_len = 0;
        js->key_long = false;
        js->hi_surrogate = 0;
        return JRES_OK;
    case JS_COLON: {
        if (is_ws(c)) return JRES_OK;
        if (c != ':') return js_fail(js, "expected ':'");
        jrole frame = js->stack[js->depth - 1].role;
        jrole role = JR_SKIP;
        if (!js->args_mode && (frame == JR_CALL || frame == JR_FUNC || frame == JR_TOP)) {
            if (!hook_key(js, frame, &role)) return js_fail(js, "not a call");
        }
        js->next_role = role;
        js->state = JS_VALUE;
        return JRES_OK;
    }
    case JS_OBJ_NEXT:
        if (is_ws(c)) return JRES_OK;
        if (c == ',') {
            js->state = JS_OBJ_KEY;
            return JRES_OK;
        }
        if (c == '}') {
            js->depth--;
            jrole role = js->stack[js->depth].role;
            if (!hook_object_end(js, role)) return js_fail(js, "not a call");
            return js_value_end(js, role);
        }
        return js_fail(js, "expected ',' or '}'");
    case JS_STRING:
        if (c == '"') return js_string_end(js);
        if (c == '\\') {
            js->state = JS_STR_ESC;
            return JRES_OK;
        }
        if (c < 0x20) return js_fail(js, "control character in a string");
        if (js->hi_surrogate) {
            js_str_cp(js, 0xFFFD);
            js->hi_surrogate = 0;
        }
        js_str_byte(js, (const char *)&c, 1);
        return JRES_OK;
    case JS_STR_ESC: {
        const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
        const char *hit = c ? strchr(from, c) : NULL;
        if (c == 'u') {
            js->state = JS_STR_U;
            js->u_left = 4;
            js->u_acc = 0;
            return JRES_OK;
        }
        if (!hit) return js_fail(js, "bad escape in a string");
        if (js->hi_surrogate) {
            js_str_cp(js, 0xFFFD);
            js->hi_surrogate = 0;
        }
        js_str_byte(js, to + (hit - from), 1);
        js->state = JS_STRING;
        return JRES_OK;
    }
    case JS_STR_U: {
        int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (v < 0) return js_fail(js, "bad \\u escape in a string");
        js->u_acc = js->u_acc * 16 + (uint32_t)v;
        if (--js->u_left) return JRES_OK;
        js->state = JS_STRING;
        uint32_t u = js->u_acc;
        if (u >= 0xD800 && u <= 0xDBFF) {
            if (js->hi_surrogate) js_str_cp(js, 0xFFFD);
            js->hi_surrogate = u;
        } else if (u >= 0xDC00 && u <= 0xDFFF) {
            if (js->hi_surrogate) js_str_cp(js, 0x10000 + ((js->hi_surrogate - 0xD800) << 10) + (u - 0xDC00));
            else js_str_cp(js, 0xFFFD);
            js->hi_surrogate = 0;
        } else {
            if (js->hi_surrogate) js_str_cp(js, 0xFFFD);
            js->hi_surrogate = 0;
            js_str_cp(js, u);
        }
        return JRES_OK;
    }
    case JS_NUMBER: {
        bool digit = c >= '0' && c <= '9';
        int p = js->num_phase, next = -1;
        switch (p) {
        case 0: next = c == '0' ? 1 : digit ? 2 : -1; break;
        case 1: next = c == '.' ? 3 : (c == 'e' || c == 'E') ? 5 : -1; break;
        case 2: next = digit ? 2 : c == '.' ? 3 : (c == 'e' || c == 'E') ? 5 : -1; break;
        case 3: next = digit ? 4 : -1; break;
        case 4: next = digit ? 4 : (c == 'e' || c == 'E') ? 5 : -1; break;
        case 5: next = digit ? 7 : (c == '+' || c == '-') ? 6 : -1; break;
        case 6: next = digit ? 7 : -1; break;
        case 7: next = digit ? 7 : -1; break;
        }
        if (next >= 0) {
                js->num_phase = next;
            return JRES_OK;
        }
        if (!number_can_end(p)) return js_fail(js, "bad number");
        *consumed = false;
        return js_value_end(js, js->str_role);
    }
    case JS_LITERAL:
        if ((char)c != js->lit[js->lit_pos]) return js_fail(js, "bad literal");
        if (js->lit[++js->lit_pos]) return JRES_OK;
        return js_value_end(js, js->str_role);
    }
    return js_fail(js, "bad state");
}

/* One byte. *consumed is false when the byte ended a number and must be read again (the scanner is then
 * in the state after the number), or when it follows a complete top value. Inside the arguments, every
 * byte of the value except whitespace between tokens is copied out as it is consumed. */
static jresult js_byte(jscan *js, unsigned char c, bool *consumed) {
    int before = js->args_mode;
    bool in_string = js->state == JS_STRING || js->state == JS_STR_ESC || js->state == JS_STR_U;
    jresult r = js_byte_inner(js, c, consumed);
    if (r != JRES_ERROR && *consumed && (before == 1 || (before == 0 && js->args_mode == 1)) && (in_string || !is_ws(c)))
        js_args_put(js, (const char *)&c, 1);
    return r;
}

/* Arguments that arrived as a JSON string: its text compacted, when it is one JSON value. */
static bool recompact(const char *p, size_t n, buf *out) {
    jscan js = {0};
    js_init(&js, JR_ARGS, false, NULL, out);
    jresult r = JRES_OK;
    for (size_t i = 0; i < n;) {
        bool consumed, was_done = js.state == JS_DONE;
        r = js_byte(&js, (unsigned char)p[i], &consumed);
        if (r == JRES_ERROR) break;
        if (!consumed && was_done) {
            r = JRES_ERROR; /* text after the value */
            break;
        }
        if (consumed) i++;
    }
    if (r != JRES_ERROR && js.state == JS_NUMBER && number_can_end(js.num_phase)) r = js_value_end(&js, JR_ARGS);
    bool ok = r == JRES_DONE && !js.nomem;
    buf_free(&js.str);
    if (!ok) out->len = 0;
    return ok;
}

/* ---- the stream ---- */

typedef enum mode {
    M_CONTENT,
    M_REASONING,
    M_OPEN,        /* after an opener: whitespace, then '{' (a call) or '[' (a list), or a format's other forms */
    M_JSON,        /* the JSON scanner has the bytes */
    M_AFTER,       /* after a call's JSON: whitespace, then the format's closer */
    M_SKIP,        /* after a broken call: dropped up to a closer (or the end) */
    M_BARE_NAME,   /* MISTRAL_ARGS: the name up to [ARGS] (or [CALL_ID]) */
    M_CALL_ID,     /* MISTRAL_ARGS: [CALL_ID]... up to [ARGS] */
    M_PYCALL,      /* LLAMA3: <|python_tag|>tool.call(...) held to the end */
    M_DS_BLOCK,    /* DeepSeek: between calls inside the block */
    M_DS_HEADER,   /* DeepSeek: <｜tool▁call▁begin｜> up to <｜tool▁sep｜> */
    M_DS_NAME,     /* DeepSeek: after "function<｜tool▁sep｜>", the name up to the newline */
    M_DS_FENCE,    /* DeepSeek: the ```json line before the arguments */
    M_H_HEADER,    /* harmony: a message header up to <|message|> */
    M_H_BODY,      /* harmony: a text body (content or reasoning) */
    M_GLM_NAME,    /* GLM-4: the reply's first line, a call's name if a newline and '{' follow */
    M_GLM_GAP,     /* GLM-4: after the name's newline, whitespace up to the arguments' '{' */
} mode;

/* Markers, by what they do. */
enum marker_id {
    MK_THINK_OPEN, MK_THINK_CLOSE,
    MK_HERMES_OPEN, MK_HERMES_CLOSE,
    MK_PYTHON_TAG,
    MK_JSON_OPEN,     /* '{' at the start of the reply (LLAMA3, GENERIC) */
    MK_MISTRAL_OPEN, MK_MISTRAL_ARGS, MK_MISTRAL_CALL_ID,
    MK_GRANITE_OPEN,
    MK_DS_CALLS_BEGIN, MK_DS_CALLS_END, MK_DS_CALL_BEGIN, MK_DS_CALL_END, MK_DS_SEP,
    MK_H_END, MK_H_CALL, MK_H_RETURN, MK_H_START,
    MK_CR_ACTION,
    MK_COUNT
};

static const char *const MARKER_TEXT[MK_COUNT] = {
    [MK_THINK_OPEN] = "<think>", [MK_THINK_CLOSE] = "</think>",
    [MK_HERMES_OPEN] = "<tool_call>", [MK_HERMES_CLOSE] = "</tool_call>",
    [MK_PYTHON_TAG] = "<|python_tag|>",
    [MK_JSON_OPEN] = "{",
    [MK_MISTRAL_OPEN] = "[TOOL_CALLS]", [MK_MISTRAL_ARGS] = "[ARGS]", [MK_MISTRAL_CALL_ID] = "[CALL_ID]",
    [MK_GRANITE_OPEN] = "<|tool_call|>",
    [MK_DS_CALLS_BEGIN] = "<\xef\xbd\x9ctool\xe2\x96\x81""calls\xe2\x96\x81""begin\xef\xbd\x9c>",
    [MK_DS_CALLS_END] = "<\xef\xbd\x9ctool\xe2\x96\x81""calls\xe2\x96\x81""end\xef\xbd\x9c>",
    [MK_DS_CALL_BEGIN] = "<\xef\xbd\x9ctool\xe2\x96\x81""call\xe2\x96\x81""begin\xef\xbd\x9c>",
    [MK_DS_CALL_END] = "<\xef\xbd\x9ctool\xe2\x96\x81""call\xe2\x96\x81""end\xef\xbd\x9c>",
    [MK_DS_SEP] = "<\xef\xbd\x9ctool\xe2\x96\x81sep\xef\xbd\x9c>",
    [MK_H_END] = "<|end|>", [MK_H_CALL] = "<|call|>", [MK_H_RETURN] = "<|return|>", [MK_H_START] = "<|start|>",
    [MK_CR_ACTION] = "Action:",
};

enum { MAX_MARKERS = 8, MAX_MARKER_BYTES = 32 };

typedef struct call_state {
    buf name;
    buf args;             /* compact arguments so far */
    size_t args_sent;     /* bytes of args already sent as ARGUMENTS */
    bool has_name, args_seen, started;
    int32_t index;
} call_state;

struct kite_tool_stream {
    kite_tool_parse_options opt; /* format: the parser's (DEEPSEEK_V3_1 parses as DEEPSEEK) */
    kite_tool_format id_format;  /* the caller's, for the ids */
    mode mode;
    bool finished, cancelled, nomem;
    uint64_t pos;              /* offset of the byte being read, in the whole text */
    /* the event being gathered */
    kite_tool_event_fn fn;
    void *user;
    int out_kind;              /* -1: none */
    int32_t out_index;
    buf out;
    /* content and reasoning whitespace */
    buf content_ws, reasoning_ws;
    bool content_after_markup, reasoning_after_markup;
    bool reply_started;        /* non-whitespace text was written (content or reasoning), or a call */
    bool json_open_ok;         /* LLAMA3/GENERIC: a '{' now would open a tentative call */
    bool think_done;
    /* markers */
    char pend[MAX_MARKER_BYTES];
    size_t pend_len;
    /* the region of one call (or list of calls) */
    bool holding;              /* the call has not started: hold keeps the raw bytes */
    bool tentative;            /* opened by '{' alone: failing is silent */
    bool in_list;              /* the region holds a list (more calls may follow) */
    buf hold;
    uint64_t region_pos;
    call_state call;
    bool call_open;            /* a started call not yet ended */
    int32_t n_calls;
    jscan js;
    buf after;                 /* M_AFTER: bytes of a closer matched so far */
    size_t after_matched;
    buf header;                /* DeepSeek call header, harmony message header, Mistral name, the Llama built-in call */
    int harmony_channel;       /* M_H_BODY: KITE_TOOL_EVENT_CONTENT or _REASONING */
    int ds_fence;              /* M_DS_FENCE (and COMMAND_R's M_OPEN): 0 line start, 1..3 backticks seen, 4 in the info word, 5 past it */
    bool cr_fenced;            /* COMMAND_R: the call list opened a code fence, so ``` closes it */
    int skip_after;            /* M_AFTER / after the JSON: what closes the call in this mode */
    /* the replay queue: bytes read again after a closer did not match */
    buf replay;
    size_t replay_at;
    char problem[512];
};

static void set_problem(kite_tool_stream *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_problem(kite_tool_stream *s, const char *fmt, ...) {
    if (s->problem[0]) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->problem, sizeof s->problem, fmt, ap);
    va_end(ap);
}

/* ---- events ---- */

static void send(kite_tool_stream *s, const kite_tool_event *ev) {
    if (s->cancelled || !s->fn) return;
    if (!s->fn(ev, s->user)) s->cancelled = true;
}

/* Sends the gathered text; keep_partial keeps an incomplete UTF-8 character back. */
static void flush_text(kite_tool_stream *s, bool keep_partial) {
    if (s->out_kind < 0 || !s->out.len) return;
    size_t keep = keep_partial ? utf8_incomplete_tail(s->out.p, s->out.len) : 0;
    size_t n = s->out.len - keep;
    if (n) {
        kite_tool_event ev = {.kind = (kite_tool_event_kind)s->out_kind, .index = s->out_index, .text = s->out.p, .len = n};
        send(s, &ev);
        memmove(s->out.p, s->out.p + n, keep);
        s->out.len = keep;
    }
}

static void emit_text(kite_tool_stream *s, int kind, int32_t index, const char *p, size_t n) {
    if (!n) return;
    if (s->out.len && (s->out_kind != kind || s->out_index != index)) flush_text(s, false);
    s->out.len = s->out.len && s->out_kind == kind && s->out_index == index ? s->out.len : 0;
    s->out_kind = kind;
    s->out_index = index;
    if (!buf_put(&s->out, p, n)) s->nomem = true;
}

static void emit_event(kite_tool_stream *s, const kite_tool_event *ev) {
    flush_text(s, false);
    s->out.len = 0;
    send(s, ev);
}

/* Content: whitespace waits, so that the whitespace touching markup can be dropped. */
static void content_text(kite_tool_stream *s, const char *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (is_ws(c)) {
            if (!s->content_after_markup && !buf_putc(&s->content_ws, (char)c)) s->nomem = true;
            continue;
        }
        if (s->json_open_ok && c == ';' && s->content_after_markup) continue; /* Llama's "call; call" */
        s->content_after_markup = false;
        s->reply_started = true;
        s->json_open_ok = false;
        emit_text(s, KITE_TOOL_EVENT_CONTENT, -1, s->content_ws.p, s->content_ws.len);
        s->content_ws.len = 0;
        size_t j = i + 1;
        while (j < n && !is_ws((unsigned char)p[j])) j++;
        emit_text(s, KITE_TOOL_EVENT_CONTENT, -1, p + i, j - i);
        i = j - 1;
    }
}

static void reasoning_text(kite_tool_stream *s, const char *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (is_ws(c)) {
            if (!s->reasoning_after_markup && !buf_putc(&s->reasoning_ws, (char)c)) s->nomem = true;
            continue;
        }
        s->reasoning_after_markup = false;
        s->reply_started = true;
        emit_text(s, KITE_TOOL_EVENT_REASONING, -1, s->reasoning_ws.p, s->reasoning_ws.len);
        s->reasoning_ws.len = 0;
        emit_text(s, KITE_TOOL_EVENT_REASONING, -1, p + i, 1);
    }
}

/* ---- calls ---- */

static void reset_call(kite_tool_stream *s) {
    s->call.name.len = 0;
    s->call.args.len = 0;
    s->call.args_sent = 0;
    s->call.has_name = s->call.args_seen = s->call.started = false;
    s->call.index = -1;
}

static void send_args(kite_tool_stream *s) {
    if (!s->call.started || s->call.args_sent >= s->call.args.len) return;
    emit_text(s, KITE_TOOL_EVENT_ARGUMENTS, s->call.index, s->call.args.p + s->call.args_sent,
              s->call.args.len - s->call.args_sent);
    s->call.args_sent = s->call.args.len;
}

static void start_call(kite_tool_stream *s) {
    if (s->call.started) return;
    s->holding = false;
    s->hold.len = 0;
    s->content_ws.len = 0;
    s->reply_started = true;
    s->json_open_ok = false;
    s->call.started = true;
    s->call_open = true;
    s->call.index = s->n_calls++;
    char id[KITE_TOOL_ID_MAX];
    kite_tool_call_id(s->id_format, s->opt.id_prefix, s->opt.id_seed, (uint32_t)s->call.index, id);
    if (!buf_putc(&s->call.name, 0)) s->nomem = true;
    s->call.name.len--;
    kite_tool_event ev = {.kind = KITE_TOOL_EVENT_CALL_START, .index = s->call.index, .id = id,
                          .name = s->call.name.p ? s->call.name.p : ""};
    emit_event(s, &ev);
    send_args(s);
}

static void end_call(kite_tool_stream *s) {
    if (!s->call_open) return;
    if (!s->call.args.len && !buf_puts(&s->call.args, "{}")) s->nomem = true;
    send_args(s);
    kite_tool_event ev = {.kind = KITE_TOOL_EVENT_CALL_END, .index = s->call.index};
    emit_event(s, &ev);
    s->call_open = false;
    reset_call(s);
}

static bool key_is(const jscan *js, const char *k) { return !js->key_long && strcmp(js->key, k) == 0; }

static bool hook_key(jscan *js, jrole frame, jrole *role) {
    kite_tool_stream *s = js->owner;
    *role = JR_SKIP;
    if (!s) return true;
    if (frame == JR_TOP && key_is(js, "tool_calls")) {
        *role = JR_LIST;
        return !s->call.has_name && !s->call.args_seen;
    }
    if (key_is(js, "name") || (s->opt.format == KITE_TOOL_FORMAT_COMMAND_R && key_is(js, "tool_name")))
        *role = s->call.has_name ? JR_SKIP : JR_NAME;
    else if (key_is(js, "arguments") || key_is(js, "parameters")) *role = s->call.args_seen ? JR_SKIP : JR_ARGS;
    else if (key_is(js, "function")) *role = frame == JR_FUNC ? JR_SKIP : JR_FUNC;
    else if (key_is(js, "id") || key_is(js, "type")) *role = JR_SKIP;
    else if (js->strict && !s->call.started) return false;
    return true;
}

static bool hook_value_start(jscan *js, jrole role) {
    kite_tool_stream *s = js->owner;
    if (!s) return true;
    if (role == JR_CALL || role == JR_TOP) {
        if (s->call_open) end_call(s);
        reset_call(s);
    } else if (role == JR_ARGS && !js->args_mode) {
        s->call.args_seen = true;
        if (s->call.has_name) start_call(s);
    }
    return true;
}

static bool hook_name(jscan *js, const char *name, size_t len) {
    kite_tool_stream *s = js->owner;
    if (!s) return true;
    if (!len || memchr(name, 0, len)) return false;
    s->call.name.len = 0;
    if (!buf_put(&s->call.name, name, len)) s->nomem = true;
    s->call.has_name = true;
    if (s->call.args_seen) start_call(s);
    return true;
}

static void hook_args_bytes(jscan *js, const char *p, size_t n) {
    kite_tool_stream *s = js->owner;
    if (!buf_put(&s->call.args, p, n)) s->nomem = true;
    send_args(s);
}

static bool hook_object_end(jscan *js, jrole role) {
    kite_tool_stream *s = js->owner;
    if (!s) return true;
    if (role == JR_CALL || role == JR_TOP) {
        if (role == JR_TOP && !s->call.has_name && !s->call.args_seen && s->n_calls && !s->holding) return true;
        if (!s->call.has_name) return false;
        start_call(s);
        end_call(s);
    } else if (role == JR_LIST) {
        if (s->holding) return false; /* an empty list is no call */
    }
    return true;
}

/* ---- modes ---- */

static void start_region(kite_tool_stream *s, const char *opener, size_t n, bool tentative) {
    s->holding = true;
    s->tentative = tentative;
    s->hold.len = 0;
    s->region_pos = s->pos + 1 - n;
    if (!buf_put(&s->hold, opener, n)) s->nomem = true;
    reset_call(s);
}

/* Markup that never became a call: its bytes are content, as written. */
static void fail_region(kite_tool_stream *s, const char *why) {
    if (!s->tentative) set_problem(s, "byte %llu: tool-call markup at byte %llu is not a call (%s); kept as content",
                                   (unsigned long long)s->pos, (unsigned long long)s->region_pos, why);
    s->holding = false;
    s->mode = M_CONTENT;
    s->json_open_ok = false;
    /* Bytes still waiting in pend are the hold's last ones: they are read again in content mode. */
    buf h = s->hold;
    s->hold = (buf){0};
    size_t n = h.len > s->pend_len ? h.len - s->pend_len : 0;
    s->content_after_markup = false;
    content_text(s, h.p ? h.p : "", n);
    h.len = 0;
    s->hold = h;
    reset_call(s);
}

/* A started call broke: it ends with what was valid, the rest of its markup is dropped. */
static void break_call(kite_tool_stream *s, const char *why) {
    set_problem(s, "byte %llu: tool call %d: %s; the call ends there", (unsigned long long)s->pos,
                s->call_open ? s->call.index : s->n_calls - 1, why);
    end_call(s);
    s->mode = M_SKIP;
    s->pend_len = 0;
}

/* A call region's markup broke: before any call started it is content, after, the rest is dropped. */
static void region_error(kite_tool_stream *s, const char *why) {
    if (s->holding) fail_region(s, why);
    else break_call(s, why);
}

static void back_to_content(kite_tool_stream *s) {
    s->mode = M_CONTENT;
    s->pend_len = 0;
    s->content_after_markup = true;
    s->content_ws.len = 0;
    s->json_open_ok = s->opt.format == KITE_TOOL_FORMAT_LLAMA3 || s->opt.format == KITE_TOOL_FORMAT_GENERIC;
}

/* The markers the current mode looks for. */
static size_t mode_markers(const kite_tool_stream *s, int *ids) {
    size_t n = 0;
    kite_tool_format f = s->opt.format;
    switch (s->mode) {
    case M_CONTENT:
        if (s->opt.think && !s->think_done && !s->reply_started) ids[n++] = MK_THINK_OPEN;
        if (f == KITE_TOOL_FORMAT_HERMES) ids[n++] = MK_HERMES_OPEN;
        if (f == KITE_TOOL_FORMAT_LLAMA3) ids[n++] = MK_PYTHON_TAG;
        if ((f == KITE_TOOL_FORMAT_LLAMA3 || f == KITE_TOOL_FORMAT_GENERIC) && s->json_open_ok) ids[n++] = MK_JSON_OPEN;
        if (f == KITE_TOOL_FORMAT_MISTRAL || f == KITE_TOOL_FORMAT_MISTRAL_ARGS) ids[n++] = MK_MISTRAL_OPEN;
        if (f == KITE_TOOL_FORMAT_GRANITE) ids[n++] = MK_GRANITE_OPEN;
        if (f == KITE_TOOL_FORMAT_COMMAND_R) ids[n++] = MK_CR_ACTION;
        if (f == KITE_TOOL_FORMAT_DEEPSEEK) {
            ids[n++] = MK_DS_CALLS_BEGIN;
            ids[n++] = MK_DS_CALL_BEGIN;
        }
        break;
    case M_REASONING: ids[n++] = MK_THINK_CLOSE; break;
    case M_SKIP:
        if (f == KITE_TOOL_FORMAT_HERMES) ids[n++] = MK_HERMES_CLOSE;
        if (f == KITE_TOOL_FORMAT_DEEPSEEK) {
            ids[n++] = MK_DS_CALL_END;
            ids[n++] = MK_DS_CALLS_END;
        }
        if (f == KITE_TOOL_FORMAT_HARMONY) {
            ids[n++] = MK_H_END;
            ids[n++] = MK_H_CALL;
            ids[n++] = MK_H_RETURN;
            ids[n++] = MK_H_START;
        }
        break;
    case M_BARE_NAME:
        ids[n++] = MK_MISTRAL_ARGS;
        ids[n++] = MK_MISTRAL_CALL_ID;
        break;
    case M_CALL_ID: ids[n++] = MK_MISTRAL_ARGS; break;
    case M_DS_BLOCK:
        ids[n++] = MK_DS_CALL_BEGIN;
        ids[n++] = MK_DS_CALLS_END;
        break;
    case M_DS_HEADER: ids[n++] = MK_DS_SEP; break;
    case M_H_BODY:
        ids[n++] = MK_H_END;
        ids[n++] = MK_H_CALL;
        ids[n++] = MK_H_RETURN;
        ids[n++] = MK_H_START;
        break;
    default: break;
    }
    return n;
}

static void on_plain(kite_tool_stream *s, unsigned char c, bool *consumed);
static void on_marker(kite_tool_stream *s, int id);

/* Feeds c through the current mode's markers: bytes that cannot begin a marker go to on_plain in order;
 * a completed marker goes to on_marker. Modes may change on the way: each step reads the markers anew. */
static void match_byte(kite_tool_stream *s, unsigned char c) {
    s->pend[s->pend_len++] = (char)c;
    while (s->pend_len) {
        int ids[MAX_MARKERS];
        size_t n = mode_markers(s, ids);
        bool prefix = false;
        for (size_t i = 0; i < n; i++) {
            const char *m = MARKER_TEXT[ids[i]];
            size_t ml = strlen(m);
            if (s->pend_len <= ml && !memcmp(m, s->pend, s->pend_len)) {
                if (s->pend_len == ml) {
                    s->pend_len = 0;
                    on_marker(s, ids[i]);
                    return;
                }
                prefix = true;
            }
        }
        if (prefix) return;
        /* pend[0] begins no marker: it is plain text of this mode. */
        unsigned char first = (unsigned char)s->pend[0];
        mode before = s->mode;
        bool consumed = true;
        on_plain(s, first, &consumed);
        if (consumed) {
            memmove(s->pend, s->pend + 1, --s->pend_len);
        } else if (s->mode == before) {
            /* a mode that refuses the byte must change mode; never loop */
            memmove(s->pend, s->pend + 1, --s->pend_len);
        }
    }
}

static bool mode_uses_markers(mode m) {
    return m == M_CONTENT || m == M_REASONING || m == M_SKIP || m == M_BARE_NAME || m == M_CALL_ID || m == M_DS_BLOCK ||
           m == M_DS_HEADER || m == M_H_BODY;
}

static void begin_json(kite_tool_stream *s, jrole top, bool strict) {
    js_init(&s->js, top, strict, s, NULL);
    s->mode = M_JSON;
}

static void step(kite_tool_stream *s, unsigned char c);

/* After a call's JSON: the closer this format expects ("" = none). */
static const char *closer_after_json(const kite_tool_stream *s) {
    switch (s->opt.format) {
    case KITE_TOOL_FORMAT_HERMES: return MARKER_TEXT[MK_HERMES_CLOSE];
    case KITE_TOOL_FORMAT_DEEPSEEK: return MARKER_TEXT[MK_DS_CALL_END];
    case KITE_TOOL_FORMAT_COMMAND_R: return s->cr_fenced ? "```" : "";
    default: return "";
    }
}

static void json_done(kite_tool_stream *s) {
    if (s->call_open) end_call(s);
    kite_tool_format f = s->opt.format;
    s->holding = false;
    s->hold.len = 0;
    if (f == KITE_TOOL_FORMAT_HERMES || f == KITE_TOOL_FORMAT_DEEPSEEK || f == KITE_TOOL_FORMAT_HARMONY ||
        (f == KITE_TOOL_FORMAT_COMMAND_R && s->cr_fenced)) {
        s->mode = M_AFTER;
        s->after.len = 0;
        s->after_matched = 0;
        s->ds_fence = 0;
    } else {
        back_to_content(s);
    }
}

/* Bytes read again from the start of the replay queue (a closer that did not match). */
static void replay_bytes(kite_tool_stream *s, const char *p, size_t n, uint64_t first_pos) {
    buf q = {0};
    if (!buf_put(&q, p, n) || !buf_put(&q, s->replay.p ? s->replay.p + s->replay_at : "", s->replay.len - s->replay_at)) {
        s->nomem = true;
        buf_free(&q);
        return;
    }
    buf_free(&s->replay);
    s->replay = q;
    s->replay_at = 0;
    s->pos = first_pos - 1; /* the feed loop advances pos before each byte */
}

static void after_json_byte(kite_tool_stream *s, unsigned char c) {
    kite_tool_format f = s->opt.format;
    if (f == KITE_TOOL_FORMAT_HARMONY) {
        /* whitespace, then a body end */
        if (is_ws(c)) return;
        s->mode = M_SKIP;
        s->pend_len = 0;
        if (c != '<') set_problem(s, "byte %llu: text after tool call %d's arguments is dropped", (unsigned long long)s->pos,
                                  s->n_calls - 1);
        match_byte(s, c);
        return;
    }
    const char *closer = closer_after_json(s);
    size_t cl = strlen(closer);
    if (!buf_putc(&s->after, (char)c)) s->nomem = true;
    if (s->after_matched == 0 && is_ws(c)) return;
    if (f == KITE_TOOL_FORMAT_DEEPSEEK && s->after_matched == 0 && c == '`') {
        if (++s->ds_fence <= 3) return;
    }
    if (s->after_matched < cl && (char)c == closer[s->after_matched]) {
        if (++s->after_matched == cl) {
            s->after.len = 0;
            if (f == KITE_TOOL_FORMAT_DEEPSEEK) {
                s->mode = M_DS_BLOCK;
                s->pend_len = 0;
            } else {
                back_to_content(s);
            }
        }
        return;
    }
    /* Not the closer: the call stands, the bytes since its JSON are read again as what follows. */
    set_problem(s, "byte %llu: tool call %d is not closed by %s", (unsigned long long)s->pos, s->n_calls - 1, closer);
    buf a = s->after;
    s->after = (buf){0};
    uint64_t first = s->pos + 1 - a.len;
    if (f == KITE_TOOL_FORMAT_DEEPSEEK) {
        s->mode = M_DS_BLOCK;
        s->pend_len = 0;
    } else {
        back_to_content(s);
    }
    /* whitespace right after the call stays dropped */
    size_t skip = 0;
    while (skip < a.len && is_ws((unsigned char)a.p[skip])) skip++;
    replay_bytes(s, a.p + skip, a.len - skip, first + skip);
    a.len = 0;
    s->after = a;
}

/* A mode's plain (non-marker) byte. */
static void on_plain(kite_tool_stream *s, unsigned char c, bool *consumed) {
    *consumed = true;
    switch (s->mode) {
    case M_CONTENT: content_text(s, (const char *)&c, 1); return;
    case M_REASONING: reasoning_text(s, (const char *)&c, 1); return;
    case M_SKIP: return;
    case M_H_BODY: emit_text(s, s->harmony_channel, -1, (const char *)&c, 1); return;
    case M_BARE_NAME:
        if (is_ws(c) && !s->header.len) return;
        if (c == '{' || c == '[' || c == '"' || c < 0x20 || s->header.len >= MAX_NAME_BYTES) {
            fail_region(s, "a call name must be followed by [ARGS]");
            *consumed = false;
            return;
        }
        if (!buf_putc(&s->header, (char)c)) s->nomem = true;
        return;
    case M_CALL_ID: return;
    case M_DS_BLOCK:
        if (is_ws(c)) return;
        /* neither another call nor the block's end: the block is over; this is content again */
        if (s->holding) {
            fail_region(s, "no call in the tool-call block");
        } else {
            set_problem(s, "byte %llu: the tool-call block is not closed", (unsigned long long)s->pos);
            size_t keep = s->pend_len; /* the waiting bytes are read again as content */
            back_to_content(s);
            s->pend_len = keep;
        }
        *consumed = false;
        return;
    case M_DS_HEADER:
        if (s->header.len >= MAX_HEADER_BYTES) {
            region_error(s, "the call header is too long");
            *consumed = false;
            return;
        }
        if (!buf_putc(&s->header, (char)c)) s->nomem = true;
        return;
    default: *consumed = false; return;
    }
}

static void trim(const char **p, size_t *n) {
    while (*n && is_ws((unsigned char)**p)) (*p)++, (*n)--;
    while (*n && is_ws((unsigned char)(*p)[*n - 1])) (*n)--;
}

/* A DeepSeek call's name is in s->header (the line after "function<｜tool▁sep｜>", or V3.1's text before
 * the separator): the call starts, and its arguments follow after an optional code fence. A header
 * without a name (or one spanning lines) is the region's error `problem`. */
static void ds_start_call(kite_tool_stream *s, const char *problem) {
    const char *h = s->header.p ? s->header.p : "";
    size_t hl = s->header.len;
    trim(&h, &hl);
    if (!hl || memchr(h, '\n', hl)) {
        region_error(s, problem);
        return;
    }
    reset_call(s);
    if (!buf_put(&s->call.name, h, hl)) s->nomem = true;
    s->call.has_name = true;
    s->mode = M_DS_FENCE;
    s->ds_fence = 0;
}

static void on_marker(kite_tool_stream *s, int id) {
    const char *text = MARKER_TEXT[id];
    size_t tl = strlen(text);
    switch (id) {
    case MK_THINK_OPEN:
        s->mode = M_REASONING;
        s->content_ws.len = 0;
        s->reasoning_after_markup = true;
        return;
    case MK_THINK_CLOSE:
        s->think_done = true;
        s->reasoning_ws.len = 0;
        s->mode = M_CONTENT;
        s->content_after_markup = true;
        s->reply_started = false; /* a JSON call may open the answer */
        s->json_open_ok = s->opt.format == KITE_TOOL_FORMAT_LLAMA3 || s->opt.format == KITE_TOOL_FORMAT_GENERIC;
        return;
    case MK_HERMES_OPEN:
    case MK_GRANITE_OPEN:
    case MK_MISTRAL_OPEN:
    case MK_PYTHON_TAG:
    case MK_CR_ACTION:
        start_region(s, text, tl, false);
        s->mode = M_OPEN;
        s->header.len = 0;
        s->skip_after = id;
        s->ds_fence = 0;
        s->cr_fenced = false;
        return;
    case MK_JSON_OPEN:
        start_region(s, text, tl, true);
        begin_json(s, s->opt.format == KITE_TOOL_FORMAT_GENERIC ? JR_TOP : JR_CALL, true);
        {
            bool consumed;
            if (js_byte(&s->js, '{', &consumed) == JRES_ERROR) fail_region(s, "bad JSON");
        }
        return;
    case MK_DS_CALLS_BEGIN:
        start_region(s, text, tl, false);
        s->mode = M_DS_BLOCK;
        return;
    case MK_DS_CALL_BEGIN:
        if (s->mode == M_CONTENT) start_region(s, text, tl, false);
        s->mode = M_DS_HEADER;
        s->header.len = 0;
        return;
    case MK_DS_CALLS_END:
        if (s->holding) {
            fail_region(s, "a tool-call block without calls");
            s->content_after_markup = true;
            return;
        }
        back_to_content(s);
        return;
    case MK_DS_SEP: {
        const char *h = s->header.p ? s->header.p : "";
        size_t hl = s->header.len;
        trim(&h, &hl);
        if (hl == 8 && !memcmp(h, "function", 8)) {
            s->mode = M_DS_NAME;
            s->header.len = 0;
            return;
        }
        /* V3.1: the header is the name, the arguments follow the separator */
        ds_start_call(s, "no call name before the separator");
        return;
    }
    case MK_DS_CALL_END:
        /* M_SKIP: the broken call's end */
        s->mode = M_DS_BLOCK;
        return;
    case MK_HERMES_CLOSE:
        back_to_content(s);
        return;
    case MK_MISTRAL_CALL_ID:
        s->mode = M_CALL_ID;
        return;
    case MK_MISTRAL_ARGS: {
        const char *h = s->header.p ? s->header.p : "";
        size_t hl = s->header.len;
        trim(&h, &hl);
        if (!hl) {
            fail_region(s, "no call name before [ARGS]");
            return;
        }
        reset_call(s);
        if (!buf_put(&s->call.name, h, hl)) s->nomem = true;
        s->call.has_name = true;
        begin_json(s, JR_ARGS, false);
        return;
    }
    case MK_H_END:
    case MK_H_CALL:
    case MK_H_RETURN:
        s->mode = M_H_HEADER;
        s->header.len = 0;
        return;
    case MK_H_START:
        s->mode = M_H_HEADER;
        s->header.len = 0;
        return;
    }
}

/* ---- harmony headers ---- */

/* The word after `key` in h (up to whitespace or '<'), or NULL. */
static const char *header_word(const char *h, size_t hl, const char *key, size_t *wl) {
    size_t kl = strlen(key);
    for (size_t i = 0; i + kl <= hl; i++) {
        if (memcmp(h + i, key, kl)) continue;
        if (key[0] == 't' && i > 0 && !is_ws((unsigned char)h[i - 1]) && h[i - 1] != '>') continue;
        size_t j = i + kl;
        while (j < hl && !is_ws((unsigned char)h[j]) && h[j] != '<') j++;
        *wl = j - i - kl;
        return h + i + kl;
    }
    return NULL;
}

static void harmony_header_byte(kite_tool_stream *s, unsigned char c) {
    static const char MSG[] = "<|message|>";
    const size_t ml = sizeof MSG - 1;
    if (!buf_putc(&s->header, (char)c)) s->nomem = true;
    if (s->header.len < ml || memcmp(s->header.p + s->header.len - ml, MSG, ml)) {
        if (s->header.len > MAX_HEADER_BYTES) {
            /* not a header: the model wrote plain text; it is content */
            buf h = s->header;
            s->header = (buf){0};
            set_problem(s, "byte %llu: no harmony message header; the text is content", (unsigned long long)s->pos);
            emit_text(s, KITE_TOOL_EVENT_CONTENT, -1, h.p, h.len);
            h.len = 0;
            s->header = h;
            s->mode = M_H_BODY;
            s->harmony_channel = KITE_TOOL_EVENT_CONTENT;
        }
        return;
    }
    const char *h = s->header.p;
    size_t hl = s->header.len - ml;
    size_t rl = 0, cl = 0;
    const char *recipient = header_word(h, hl, "to=", &rl);
    const char *channel = header_word(h, hl, "<|channel|>", &cl);
    s->header.len = 0;
    if (recipient && rl && !(rl == 3 && !memcmp(recipient, "all", 3)) && !(rl == 4 && !memcmp(recipient, "user", 4))) {
        if (rl > 10 && !memcmp(recipient, "functions.", 10)) recipient += 10, rl -= 10;
        reset_call(s);
        if (!buf_put(&s->call.name, recipient, rl)) s->nomem = true;
        s->call.has_name = true;
        begin_json(s, JR_ARGS, false);
        return;
    }
    s->mode = M_H_BODY;
    s->pend_len = 0;
    s->harmony_channel = channel && cl == 8 && !memcmp(channel, "analysis", 8) ? KITE_TOOL_EVENT_REASONING : KITE_TOOL_EVENT_CONTENT;
}

/* ---- Llama built-in calls: tool.call(key="value", n=1) ---- */

static void skip_ws(const char *p, size_t n, size_t *i) {
    while (*i < n && is_ws((unsigned char)p[*i])) (*i)++;
}

static bool is_ident(unsigned char c, bool first) {
    return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (!first && c >= '0' && c <= '9');
}

static void json_escape_into(buf *b, const char *p, size_t n, bool *ok) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        char t[8];
        if (c == '"' || c == '\\') snprintf(t, sizeof t, "\\%c", c);
        else if (c == '\n') snprintf(t, sizeof t, "\\n");
        else if (c == '\t') snprintf(t, sizeof t, "\\t");
        else if (c == '\r') snprintf(t, sizeof t, "\\r");
        else if (c < 0x20) snprintf(t, sizeof t, "\\u%04x", c);
        else t[0] = (char)c, t[1] = 0;
        if (!buf_puts(b, t)) *ok = false;
    }
}

/* Parses `name.call(k=v, ...)` with Python string, number, True/False/None values into name and compact
 * JSON arguments. */
static bool parse_pycall(const char *p, size_t n, buf *name, buf *args) {
    size_t i = 0;
    skip_ws(p, n, &i);
    size_t s0 = i;
    while (i < n && (is_ident((unsigned char)p[i], i == s0) || (p[i] == '.' && i > s0))) i++;
    if (i - s0 < 6 || memcmp(p + i - 5, ".call", 5)) return false;
    bool ok = buf_put(name, p + s0, i - s0 - 5);
    skip_ws(p, n, &i);
    if (i >= n || p[i++] != '(') return false;
    ok = ok && buf_putc(args, '{');
    bool first = true;
    for (;;) {
        skip_ws(p, n, &i);
        if (i < n && p[i] == ')') {
            i++;
            break;
        }
        if (!first) {
            if (i >= n || p[i++] != ',') return false;
            skip_ws(p, n, &i);
            if (i < n && p[i] == ')') {
                i++;
                break;
            }
        }
        size_t k0 = i;
        while (i < n && is_ident((unsigned char)p[i], i == k0)) i++;
        if (i == k0) return false;
        size_t k1 = i;
        skip_ws(p, n, &i);
        if (i >= n || p[i++] != '=') return false;
        skip_ws(p, n, &i);
        if (i >= n) return false;
        ok = ok && buf_puts(args, first ? "\"" : ",\"") && buf_put(args, p + k0, k1 - k0) && buf_puts(args, "\":");
        first = false;
        if (p[i] == '"' || p[i] == '\'') {
            char q = p[i++];
            ok = ok && buf_putc(args, '"');
            while (i < n && p[i] != q) {
                if (p[i] == '\\' && i + 1 < n) {
                    char e = p[i + 1], d = e == 'n' ? '\n' : e == 't' ? '\t' : e;
                    json_escape_into(args, &d, 1, &ok);
                    i += 2;
                } else {
                    json_escape_into(args, p + i, 1, &ok);
                    i++;
                }
            }
            if (i >= n) return false;
            i++;
            ok = ok && buf_putc(args, '"');
        } else {
            size_t v0 = i;
            while (i < n && p[i] != ',' && p[i] != ')' && !is_ws((unsigned char)p[i])) i++;
            const char *v = p + v0;
            size_t vl = i - v0;
            if (vl == 4 && !memcmp(v, "True", 4)) ok = ok && buf_puts(args, "true");
            else if (vl == 5 && !memcmp(v, "False", 5)) ok = ok && buf_puts(args, "false");
            else if (vl == 4 && !memcmp(v, "None", 4)) ok = ok && buf_puts(args, "null");
            else {
                buf num = {0};
                bool valid = recompact(v, vl, &num) && num.len && (num.p[0] == '-' || (num.p[0] >= '0' && num.p[0] <= '9'));
                ok = ok && valid && buf_put(args, num.p, num.len);
                buf_free(&num);
                if (!valid) return false;
            }
        }
    }
    skip_ws(p, n, &i);
    ok = ok && buf_putc(args, '}');
    return ok && i == n;
}

static void finish_pycall(kite_tool_stream *s) {
    buf name = {0}, args = {0};
    const char *p = s->header.p ? s->header.p : "";
    size_t n = s->header.len;
    /* the end-of-message tokens, when the caller's stop handling left them in */
    static const char *const ENDS[] = {"<|eom_id|>", "<|eot_id|>"};
    for (size_t k = 0; k < 2; k++) {
        size_t el = strlen(ENDS[k]);
        if (n >= el && !memcmp(p + n - el, ENDS[k], el)) n -= el;
    }
    if (parse_pycall(p, n, &name, &args)) {
        reset_call(s);
        if (!buf_put(&s->call.name, name.p, name.len) || !buf_put(&s->call.args, args.p, args.len)) s->nomem = true;
        s->call.has_name = s->call.args_seen = true;
        start_call(s);
        end_call(s);
    } else {
        /* the code interpreter's form: the text after the tag is Python code */
        bool ok = true;
        reset_call(s);
        ok = buf_puts(&s->call.name, "python") && buf_puts(&s->call.args, "{\"code\":\"");
        const char *q = p;
        size_t ql = n;
        trim(&q, &ql);
        json_escape_into(&s->call.args, q, ql, &ok);
        ok = ok && buf_puts(&s->call.args, "\"}");
        if (!ok) s->nomem = true;
        s->call.has_name = s->call.args_seen = true;
        start_call(s);
        end_call(s);
    }
    buf_free(&name);
    buf_free(&args);
    s->header.len = 0;
    back_to_content(s);
}

/* ---- the byte loop ---- */

/* A byte of a GLM-4 call name (the bare names kite_tool_call_frame lets GLM4 carry). */
static bool is_glm_name_byte(unsigned char c) { return is_ident(c, false) || c == '-' || c == '.'; }

static void step(kite_tool_stream *s, unsigned char c) {
    for (int guard = 0; guard < 8; guard++) {
        if (s->holding && s->hold.len > MAX_HOLD_BYTES) fail_region(s, "too long before the call's name");
        mode m = s->mode;
        if (mode_uses_markers(m)) {
            if (s->holding && m != M_CONTENT && !buf_putc(&s->hold, (char)c)) s->nomem = true;
            match_byte(s, c);
            return;
        }
        switch (m) {
        case M_OPEN:
            if (s->skip_after == MK_CR_ACTION && s->ds_fence < 5) {
                /* Command R: an optional ```json line before the list */
                if (c == '`' && s->ds_fence < 3) {
                    if (!buf_putc(&s->hold, (char)c)) s->nomem = true;
                    s->ds_fence++;
                    return;
                }
                if (s->ds_fence == 3 || s->ds_fence == 4) {
                    if (!buf_putc(&s->hold, (char)c)) s->nomem = true;
                    if (c == '\n') s->ds_fence = 5, s->cr_fenced = true;
                    else s->ds_fence = 4;
                    return;
                }
                if (s->ds_fence != 0) {
                    fail_region(s, "a broken code fence");
                    continue;
                }
            }
            if (is_ws(c)) {
                if (!buf_putc(&s->hold, (char)c)) s->nomem = true;
                return;
            }
            if (s->skip_after == MK_PYTHON_TAG && c != '{') {
                if (!buf_putc(&s->hold, (char)c)) s->nomem = true;
                s->mode = M_PYCALL;
                s->header.len = 0;
                if (!buf_putc(&s->header, (char)c)) s->nomem = true;
                return;
            }
            if (s->skip_after == MK_MISTRAL_OPEN && c != '[' && c != '{') {
                s->mode = M_BARE_NAME;
                s->header.len = 0;
                continue;
            }
            if (c == '{' || c == '[') {
                s->in_list = c == '[';
                begin_json(s, c == '[' ? JR_LIST : JR_CALL, false);
                continue;
            }
            fail_region(s, "no JSON after the opener");
            continue;
        case M_JSON: {
            bool consumed = true;
            jresult r = js_byte(&s->js, c, &consumed);
            if (s->js.nomem) s->nomem = true;
            if (r != JRES_ERROR && consumed && s->holding && !buf_putc(&s->hold, (char)c)) s->nomem = true;
            if (r == JRES_ERROR) {
                if (s->holding) {
                    fail_region(s, s->js.error); /* c is read again as content */
                    continue;
                }
                char why[160];
                snprintf(why, sizeof why, "the arguments are not valid JSON (%s)", s->js.error);
                break_call(s, why);
                if (s->opt.format == KITE_TOOL_FORMAT_HARMONY || s->opt.format == KITE_TOOL_FORMAT_DEEPSEEK ||
                    s->opt.format == KITE_TOOL_FORMAT_HERMES)
                    continue; /* c may begin the closer */
                return;
            }
            if (r == JRES_DONE) {
                if (s->holding) {
                    /* a complete object that never made a call (the hooks refuse most such cases) */
                    fail_region(s, "no call in the JSON");
                    if (!consumed) continue;
                    return;
                }
                if (s->opt.format == KITE_TOOL_FORMAT_HARMONY || s->opt.format == KITE_TOOL_FORMAT_MISTRAL_ARGS ||
                    s->js.top_role == JR_ARGS) {
                    if (s->call_open) end_call(s);
                }
                json_done(s);
            }
            if (!consumed) continue;
            return;
        }
        case M_AFTER: after_json_byte(s, c); return;
        case M_PYCALL:
            if (!buf_putc(&s->hold, (char)c) || !buf_putc(&s->header, (char)c)) s->nomem = true;
            if (s->header.len > MAX_PYCALL_BYTES) fail_region(s, "the built-in call is too long");
            return;
        case M_DS_NAME:
            if (s->holding && !buf_putc(&s->hold, (char)c)) s->nomem = true;
            if (c != '\n') {
                if (s->header.len >= MAX_NAME_BYTES) {
                    region_error(s, "the call name is too long");
                    return;
                }
                if (!buf_putc(&s->header, (char)c)) s->nomem = true;
                return;
            }
            ds_start_call(s, "no call name");
            return;
        case M_DS_FENCE:
            /* optional ```json (or ```) line, then the arguments */
            if (s->ds_fence < 4 && c == '`' && s->ds_fence < 3) {
                if (s->holding && !buf_putc(&s->hold, (char)c)) s->nomem = true;
                s->ds_fence++;
                return;
            }
            if (s->ds_fence == 3 || s->ds_fence == 4) {
                if (s->holding && !buf_putc(&s->hold, (char)c)) s->nomem = true;
                s->ds_fence = c == '\n' ? 5 : 4;
                return;
            }
            if (s->ds_fence != 0 && s->ds_fence != 5) {
                region_error(s, "a broken code fence");
                continue;
            }
            if (is_ws(c)) {
                if (s->holding && !buf_putc(&s->hold, (char)c)) s->nomem = true;
                return;
            }
            begin_json(s, JR_ARGS, false);
            continue;
        case M_H_HEADER: harmony_header_byte(s, c); return;
        case M_GLM_NAME:
            if (is_ws(c) && !s->header.len) {
                /* whitespace before the name line (a plain answer starts with a newline) */
                if (!s->holding) {
                    start_region(s, (const char *)&c, 1, true);
                    s->header.len = 0;
                } else if (!buf_putc(&s->hold, (char)c)) {
                    s->nomem = true;
                }
                return;
            }
            if (is_glm_name_byte(c) && s->header.len < MAX_NAME_BYTES) {
                if (!s->holding) {
                    start_region(s, (const char *)&c, 1, true);
                    s->header.len = 0;
                } else if (!buf_putc(&s->hold, (char)c)) {
                    s->nomem = true;
                }
                if (!buf_putc(&s->header, (char)c)) s->nomem = true;
                return;
            }
            if (c == '\n' && s->header.len) {
                if (!buf_putc(&s->hold, (char)c)) s->nomem = true;
                s->mode = M_GLM_GAP;
                return;
            }
            /* not a name line: the reply is content (what was held comes back as written) */
            if (s->holding) fail_region(s, "not a GLM-4 call");
            else s->mode = M_CONTENT;
            continue;
        case M_GLM_GAP:
            if (is_ws(c)) {
                if (!buf_putc(&s->hold, (char)c)) s->nomem = true;
                return;
            }
            if (c == '{') {
                reset_call(s);
                if (!buf_put(&s->call.name, s->header.p, s->header.len)) s->nomem = true;
                s->call.has_name = true;
                s->header.len = 0;
                begin_json(s, JR_ARGS, false);
                continue;
            }
            fail_region(s, "no arguments after the name line");
            continue;
        default: return;
        }
    }
}

static int feed_bytes(kite_tool_stream *s, const char *text, size_t len) {
    for (size_t i = 0; i < len && !s->cancelled && !s->nomem; i++) {
        s->pos++;
        step(s, (unsigned char)text[i]);
        while (s->replay_at < s->replay.len && !s->cancelled && !s->nomem) {
            unsigned char c = (unsigned char)s->replay.p[s->replay_at++];
            s->pos++;
            step(s, c);
        }
        s->replay.len = s->replay_at = 0;
    }
    return 0;
}

/* ---- public ---- */

const char *kite_tool_format_name(kite_tool_format format) {
    static const char *const names[KITE_TOOL_FORMAT_COUNT] = {"none", "generic", "hermes", "llama3", "mistral",
                                                             "mistral_args", "harmony", "deepseek", "granite",
                                                             "deepseek_v3_1", "command_r", "glm4"};
    return (unsigned)format < KITE_TOOL_FORMAT_COUNT ? names[format] : "?";
}

kite_tool_parse_options kite_tool_parse_default_options(kite_tool_format format) {
    return (kite_tool_parse_options){.format = format, .think = false, .starts_in_think = false, .id_prefix = NULL, .id_seed = 0};
}

size_t kite_tool_call_id(kite_tool_format format, const char *prefix, uint64_t seed, uint32_t index, char *out) {
    static const char ALNUM[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    bool mistral = format == KITE_TOOL_FORMAT_MISTRAL || format == KITE_TOOL_FORMAT_MISTRAL_ARGS;
    if (!prefix) prefix = mistral ? "" : "call_";
    size_t n = strnlen(prefix, KITE_TOOL_ID_MAX - 32);
    memcpy(out, prefix, n);
    if (mistral) {
        /* 62^9 values: (mix(seed) + index) mod 62^9 differs for every index below 62^9 */
        const uint64_t space = 13537086546263552ull; /* 62^9 */
        uint64_t v = (kite_hash_mix64(seed) % space + index) % space;
        for (int i = 8; i >= 0; i--) {
            out[n + (size_t)i] = ALNUM[v % 62];
            v /= 62;
        }
        n += 9;
    } else {
        /* mix is a bijection of 64-bit words, so distinct (seed ^ index * odd) give distinct words, and 11
         * base-62 digits hold any 64-bit word: the first 11 characters already differ */
        uint64_t v = kite_hash_mix64(seed ^ ((uint64_t)index * 0x9E3779B97F4A7C15ull)), w = kite_hash_mix64(v + 1), x = kite_hash_mix64(v + 2);
        for (int i = 10; i >= 0; i--) {
            out[n + (size_t)i] = ALNUM[v % 62];
            v /= 62;
        }
        for (int i = 11; i < 24; i++) {
            out[n + (size_t)i] = ALNUM[(i < 18 ? w : x) % 62];
            if (i < 18) w /= 62;
            else x /= 62;
        }
        n += 24;
    }
    out[n] = 0;
    return n;
}

int kite_tool_stream_new(const kite_tool_parse_options *options, kite_tool_stream **out, kite_error *e) {
    if (!out) return kite_fail(e, KITE_ERR_INVALID_ARG, "kite_tool_stream_new: out is required");
    *out = NULL;
    if (!options || (unsigned)options->format >= KITE_TOOL_FORMAT_COUNT)
        return kite_fail(e, KITE_ERR_INVALID_ARG, "kite_tool_stream_new: no options or an unknown format");
    kite_tool_stream *s = calloc(1, sizeof *s);
    if (!s) return kite_fail(e, KITE_ERR_NOMEM, "tool calls: out of memory");
    s->opt = *options;
    s->id_format = options->format;
    if (s->opt.format == KITE_TOOL_FORMAT_DEEPSEEK_V3_1) s->opt.format = KITE_TOOL_FORMAT_DEEPSEEK;
    s->out_kind = -1;
    s->out_index = -1;
    s->pos = (uint64_t)-1;
    reset_call(s);
    if (options->format == KITE_TOOL_FORMAT_HARMONY) {
        s->mode = M_H_HEADER;
    } else {
        s->mode = options->think && options->starts_in_think ? M_REASONING
                  : options->format == KITE_TOOL_FORMAT_GLM4 ? M_GLM_NAME
                                                              : M_CONTENT;
        s->reasoning_after_markup = true;
        s->json_open_ok = options->format == KITE_TOOL_FORMAT_LLAMA3 || options->format == KITE_TOOL_FORMAT_GENERIC;
    }
    *out = s;
    return KITE_OK;
}

void kite_tool_stream_free(kite_tool_stream *s) {
    if (!s) return;
    buf_free(&s->out);
    buf_free(&s->content_ws);
    buf_free(&s->reasoning_ws);
    buf_free(&s->hold);
    buf_free(&s->call.name);
    buf_free(&s->call.args);
    buf_free(&s->js.str);
    buf_free(&s->after);
    buf_free(&s->header);
    buf_free(&s->replay);
    free(s);
}

static int stream_status(kite_tool_stream *s, kite_error *e) {
    if (s->nomem) return kite_fail(e, KITE_ERR_NOMEM, "tool calls: out of memory");
    if (s->cancelled) return kite_fail(e, KITE_ERR_CANCELLED, "tool calls: the event callback stopped the stream");
    return KITE_OK;
}

int kite_tool_stream_feed(kite_tool_stream *s, const char *text, size_t len, kite_tool_event_fn fn, void *user_data,
                          kite_error *e) {
    if (!s || (!text && len)) return kite_fail(e, KITE_ERR_INVALID_ARG, "kite_tool_stream_feed: no stream or no text");
    if (s->finished) return kite_fail(e, KITE_ERR_INVALID_ARG, "kite_tool_stream_feed: the stream is finished");
    int st = stream_status(s, e);
    if (st) return st;
    s->fn = fn;
    s->user = user_data;
    feed_bytes(s, text, len);
    flush_text(s, true);
    return stream_status(s, e);
}

int kite_tool_stream_finish(kite_tool_stream *s, kite_tool_event_fn fn, void *user_data, kite_error *e) {
    if (!s) return kite_fail(e, KITE_ERR_INVALID_ARG, "kite_tool_stream_finish: no stream");
    if (s->finished) return kite_fail(e, KITE_ERR_INVALID_ARG, "kite_tool_stream_finish: the stream is finished");
    int st = stream_status(s, e);
    if (st) return st;
    s->fn = fn;
    s->user = user_data;
    s->finished = true;
    s->pos++;
    /* Bytes waiting for a marker are text of their mode (inside a held region they are in the hold). */
    if (s->pend_len) {
        mode m = s->mode;
        if (m == M_CONTENT) content_text(s, s->pend, s->pend_len);
        else if (m == M_REASONING) reasoning_text(s, s->pend, s->pend_len);
        else if (m == M_H_BODY) emit_text(s, s->harmony_channel, -1, s->pend, s->pend_len);
        s->pend_len = 0;
    }
    if (s->mode == M_PYCALL) finish_pycall(s);
    if (s->mode == M_JSON && s->js.state == JS_NUMBER && number_can_end(s->js.num_phase)) {
        /* a number at the very end completes its value */
        jresult r = js_value_end(&s->js, s->js.str_role);
        if (r == JRES_DONE && !s->holding) {
            if (s->call_open && (s->opt.format == KITE_TOOL_FORMAT_HARMONY || s->js.top_role == JR_ARGS)) end_call(s);
            json_done(s);
        }
    }
    if (s->holding) {
        fail_region(s, "the text ends first");
    } else if (s->call_open) {
        bool complete = s->mode == M_JSON && s->js.state == JS_DONE;
        if (!complete) set_problem(s, "byte %llu: the text ends inside tool call %d", (unsigned long long)s->pos, s->call.index);
        end_call(s);
    }
    if (s->mode == M_H_HEADER && s->header.len) {
        const char *h = s->header.p;
        if (!memmem(h, s->header.len, "<|", 2)) emit_text(s, KITE_TOOL_EVENT_CONTENT, -1, h, s->header.len);
        else set_problem(s, "byte %llu: the text ends inside a harmony message header", (unsigned long long)s->pos);
        s->header.len = 0;
    }
    if (s->content_ws.len && !s->content_after_markup && s->mode != M_SKIP)
        emit_text(s, KITE_TOOL_EVENT_CONTENT, -1, s->content_ws.p, s->content_ws.len);
    s->content_ws.len = 0;
    if (s->reasoning_ws.len && s->mode == M_REASONING) emit_text(s, KITE_TOOL_EVENT_REASONING, -1, s->reasoning_ws.p, s->reasoning_ws.len);
    s->reasoning_ws.len = 0;
    flush_text(s, false);
    return stream_status(s, e);
}

const char *kite_tool_stream_problem(const kite_tool_stream *s) { return s && s->problem[0] ? s->problem : NULL; }
int32_t kite_tool_stream_call_count(const kite_tool_stream *s) { return s ? s->n_calls : 0; }

/* ---- whole text ---- */

typedef struct collector {
    buf content, reasoning;
    kite_tool_call *calls;
    size_t n_calls, cap;
    buf args; /* of the open call */
    bool nomem;
} collector;

static bool collect(const kite_tool_event *ev, void *user) {
    collector *c = user;
    switch (ev->kind) {
    case KITE_TOOL_EVENT_CONTENT: if (!buf_put(&c->content, ev->text, ev->len)) c->nomem = true; break;
    case KITE_TOOL_EVENT_REASONING: if (!buf_put(&c->reasoning, ev->text, ev->len)) c->nomem = true; break;
    case KITE_TOOL_EVENT_CALL_START: {
        if (c->n_calls == c->cap) {
            size_t cap = c->cap ? c->cap * 2 : 4;
            kite_tool_call *p = realloc(c->calls, cap * sizeof *p);
            if (!p) {
                c->nomem = true;
                return false;
            }
            c->calls = p;
            c->cap = cap;
        }
        kite_tool_call *call = &c->calls[c->n_calls++];
        memset(call, 0, sizeof *call);
        snprintf(call->id, sizeof call->id, "%s", ev->id);
        call->name = strdup(ev->name);
        if (!call->name) c->nomem = true;
        c->args.len = 0;
        break;
    }
    case KITE_TOOL_EVENT_ARGUMENTS: if (!buf_put(&c->args, ev->text, ev->len)) c->nomem = true; break;
    case KITE_TOOL_EVENT_CALL_END: {
        kite_tool_call *call = &c->calls[c->n_calls - 1];
        call->arguments = malloc(c->args.len + 1);
        if (!call->arguments) {
            c->nomem = true;
            break;
        }
        if (c->args.len) memcpy(call->arguments, c->args.p, c->args.len);
        call->arguments[c->args.len] = 0;
        call->arguments_len = c->args.len;
        break;
    }
    }
    return !c->nomem;
}

void kite_tool_parse_clear(kite_tool_parse *p) {
    if (!p) return;
    free(p->content);
    free(p->reasoning);
    for (size_t i = 0; i < p->n_calls; i++) {
        free(p->calls[i].name);
        free(p->calls[i].arguments);
    }
    free(p->calls);
    memset(p, 0, sizeof *p);
}

static char *take(buf *b) {
    if (!b->p && !buf_reserve(b, 0)) return NULL;
    b->p[b->len] = 0;
    char *p = b->p;
    *b = (buf){0};
    return p;
}

int kite_tool_parse_text(const kite_tool_parse_options *options, const char *text, size_t len, kite_tool_parse *out,
                         kite_error *e) {
    if (!out) return kite_fail(e, KITE_ERR_INVALID_ARG, "kite_tool_parse_text: out is required");
    memset(out, 0, sizeof *out);
    if (!text && len) return kite_fail(e, KITE_ERR_INVALID_ARG, "kite_tool_parse_text: no text");
    kite_tool_stream *s;
    int rc = kite_tool_stream_new(options, &s, e);
    if (rc) return rc;
    collector c = {0};
    rc = kite_tool_stream_feed(s, text ? text : "", len, collect, &c, e);
    if (!rc) rc = kite_tool_stream_finish(s, collect, &c, e);
    if (!rc && c.nomem) rc = kite_fail(e, KITE_ERR_NOMEM, "tool calls: out of memory");
    if (!rc) {
        out->content_len = c.content.len;
        out->reasoning_len = c.reasoning.len;
        out->content = take(&c.content);
        out->reasoning = take(&c.reasoning);
        out->calls = c.calls;
        out->n_calls = c.n_calls;
        c.calls = NULL;
        if (kite_tool_stream_problem(s)) snprintf(out->problem, sizeof out->problem, "%s", kite_tool_stream_problem(s));
        for (size_t i = 0; i < out->n_calls; i++)
            if (!out->calls[i].arguments) rc = KITE_ERR_NOMEM;
        if (!out->content || !out->reasoning) rc = KITE_ERR_NOMEM;
        if (rc) {
            kite_tool_parse_clear(out);
            kite_fail(e, KITE_ERR_NOMEM, "tool calls: out of memory");
        }
    }
    if (c.calls) {
        for (size_t i = 0; i < c.n_calls; i++) {
            free(c.calls[i].name);
            free(c.calls[i].arguments);
        }
        free(c.calls);
    }
    buf_free(&c.content);
    buf_free(&c.reasoning);
    buf_free(&c.args);
    kite_tool_stream_free(s);
    return rc;
}

/* ---- detection ---- */

static bool has(const char *src, size_t len, const char *needle) {
    return src && memmem(src, len, needle, strlen(needle)) != NULL;
}

kite_tool_template_info kite_tool_detect(const char *src, size_t len, const char *const *special, size_t n_special) {
    kite_tool_template_info info = {.format = KITE_TOOL_FORMAT_GENERIC, .think = false};
    if (!src) len = 0;
    info.think = has(src, len, "<think>") || has(src, len, "</think>");
    if (has(src, len, "<|channel|>") && has(src, len, "<|message|>")) info.format = KITE_TOOL_FORMAT_HARMONY;
    else if (has(src, len, MARKER_TEXT[MK_DS_CALLS_BEGIN]) || has(src, len, MARKER_TEXT[MK_DS_CALL_BEGIN]))
        info.format = has(src, len, "```json") ? KITE_TOOL_FORMAT_DEEPSEEK : KITE_TOOL_FORMAT_DEEPSEEK_V3_1;
    else if (has(src, len, "[TOOL_CALLS]")) info.format = has(src, len, "[ARGS]") ? KITE_TOOL_FORMAT_MISTRAL_ARGS : KITE_TOOL_FORMAT_MISTRAL;
    else if (has(src, len, "parameter_definitions") || (has(src, len, "Action:") && has(src, len, "\"tool_name\"")))
        info.format = KITE_TOOL_FORMAT_COMMAND_R;
    else if (has(src, len, "<tool_call>")) info.format = KITE_TOOL_FORMAT_HERMES;
    else if (has(src, len, "<|tool_call|>")) info.format = KITE_TOOL_FORMAT_GRANITE;
    else if (has(src, len, "<|python_tag|>") ||
             (has(src, len, "<|start_header_id|>") && (has(src, len, "\"parameters\": ") || has(src, len, "ipython"))))
        info.format = KITE_TOOL_FORMAT_LLAMA3;
    else if (has(src, len, "[gMASK]") && has(src, len, "tools") && has(src, len, "metadata"))
        info.format = KITE_TOOL_FORMAT_GLM4; /* GLM-4: tools on a message, the call's name in the assistant's metadata */
    if (info.format != KITE_TOOL_FORMAT_GENERIC || !special) return info;
    for (size_t i = 0; i < n_special; i++) {
        const char *t = special[i];
        if (!t) continue;
        if (!strcmp(t, "<|channel|>")) info.format = KITE_TOOL_FORMAT_HARMONY;
        else if (!strcmp(t, MARKER_TEXT[MK_DS_CALLS_BEGIN])) info.format = KITE_TOOL_FORMAT_DEEPSEEK;
        else if (!strcmp(t, "[TOOL_CALLS]")) info.format = KITE_TOOL_FORMAT_MISTRAL;
        else if (!strcmp(t, "<tool_call>")) info.format = KITE_TOOL_FORMAT_HERMES;
        else if (!strcmp(t, "<|python_tag|>")) info.format = KITE_TOOL_FORMAT_LLAMA3;
        else if (!strcmp(t, "<|tool_call|>")) info.format = KITE_TOOL_FORMAT_GRANITE;
        else continue;
        break;
    }
    for (size_t i = 0; i < n_special && !info.think; i++)
        if (special[i] && !strcmp(special[i], "<think>")) info.think = true;
    return info;
}

bool kite_tool_prompt_opens_think(const char *prompt, size_t len) {
    if (!prompt) return false;
    const char *open = NULL;
    for (const char *p = prompt; (p = memmem(p, len - (size_t)(p - prompt), "<think>", 7)); p += 7) open = p;
    if (!open) return false;
    size_t rest = len - (size_t)(open - prompt) - 7;
    const char *after = open + 7;
    if (memmem(after, rest, "</think>", 8)) return false;
    for (size_t i = 0; i < rest; i++)
        if (!is_ws((unsigned char)after[i])) return false;
    return true;
}

/* ---- forcing a call ---- */

static bool valid_utf8(const char *p, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)p[i];
        size_t need = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
        if (!need || i + need > n) return false;
        for (size_t k = 1; k < need; k++)
            if (((unsigned char)p[i + k] & 0xC0) != 0x80) return false;
        if (need == 3) {
            unsigned char d = (unsigned char)p[i + 1];
            if ((c == 0xE0 && d < 0xA0) || (c == 0xED && d > 0x9F)) return false;
        }
        if (need == 4) {
            unsigned char d = (unsigned char)p[i + 1];
            if ((c == 0xF0 && d < 0x90) || (c == 0xF4 && d > 0x8F)) return false;
        }
        i += need;
    }
    return true;
}

int kite_tool_call_frame(kite_tool_format format, const char *name, char **prefix, char **name_to_args, char **suffix,
                         kite_error *e) {
    if (prefix) *prefix = NULL;
    if (name_to_args) *name_to_args = NULL;
    if (suffix) *suffix = NULL;
    const char *open, *between, *close;
    bool json_name = true;
    switch (format) {
    case KITE_TOOL_FORMAT_GENERIC: open = "{\"name\": \""; between = "\", \"arguments\": "; close = "}"; break;
    case KITE_TOOL_FORMAT_HERMES: open = "<tool_call>\n{\"name\": \""; between = "\", \"arguments\": "; close = "}\n</tool_call>"; break;
    case KITE_TOOL_FORMAT_LLAMA3: open = "{\"name\": \""; between = "\", \"parameters\": "; close = "}"; break;
    case KITE_TOOL_FORMAT_MISTRAL: open = "[TOOL_CALLS][{\"name\": \""; between = "\", \"arguments\": "; close = "}]"; break;
    case KITE_TOOL_FORMAT_MISTRAL_ARGS: open = "[TOOL_CALLS]"; between = "[ARGS]"; close = ""; json_name = false; break;
    case KITE_TOOL_FORMAT_HARMONY:
        open = "<|channel|>commentary to=functions.";
        between = " <|constrain|>json<|message|>";
        close = "<|call|>";
        json_name = false;
        break;
    case KITE_TOOL_FORMAT_DEEPSEEK:
        open = "<\xef\xbd\x9ctool\xe2\x96\x81""calls\xe2\x96\x81""begin\xef\xbd\x9c><\xef\xbd\x9ctool\xe2\x96\x81""call\xe2\x96\x81"
               "begin\xef\xbd\x9c>function<\xef\xbd\x9ctool\xe2\x96\x81sep\xef\xbd\x9c>";
        between = "\n```json\n";
        close = "\n```<\xef\xbd\x9ctool\xe2\x96\x81""call\xe2\x96\x81""end\xef\xbd\x9c><\xef\xbd\x9ctool\xe2\x96\x81"
                "calls\xe2\x96\x81""end\xef\xbd\x9c>";
        json_name = false;
        break;
    case KITE_TOOL_FORMAT_GRANITE: open = "<|tool_call|>[{\"name\": \""; between = "\", \"arguments\": "; close = "}]"; break;
    case KITE_TOOL_FORMAT_COMMAND_R:
        open = "Action: ```json\n[{\"tool_name\": \"";
        between = "\", \"parameters\": ";
        close = "}]\n```";
        break;
    case KITE_TOOL_FORMAT_GLM4: open = ""; between = "\n"; close = ""; json_name = false; break;
    case KITE_TOOL_FORMAT_DEEPSEEK_V3_1:
        open = "<\xef\xbd\x9ctool\xe2\x96\x81""calls\xe2\x96\x81""begin\xef\xbd\x9c><\xef\xbd\x9ctool\xe2\x96\x81""call\xe2\x96\x81"
               "begin\xef\xbd\x9c>";
        between = "<\xef\xbd\x9ctool\xe2\x96\x81sep\xef\xbd\x9c>";
        close = "<\xef\xbd\x9ctool\xe2\x96\x81""call\xe2\x96\x81""end\xef\xbd\x9c><\xef\xbd\x9ctool\xe2\x96\x81"
                "calls\xe2\x96\x81""end\xef\xbd\x9c>";
        json_name = false;
        break;
    default: return kite_fail(e, KITE_ERR_INVALID_ARG, "tool-call frame: format %s has no tool calls", kite_tool_format_name(format));
    }
    buf b = {0};
    bool ok = buf_puts(&b, open);
    if (name) {
        size_t n = strlen(name);
        if (!n || !valid_utf8(name, n))
            return buf_free(&b), kite_fail(e, KITE_ERR_INVALID_ARG, "tool-call frame: the name is empty or not UTF-8");
        for (size_t i = 0; i < n; i++) {
            unsigned char c = (unsigned char)name[i];
            if (c < 0x20 || (!json_name && (c == ' ' || c == '<' || c == '[' || c == '\n')) ||
                (format == KITE_TOOL_FORMAT_GLM4 && !is_glm_name_byte(c)))
                return buf_free(&b), kite_fail(e, KITE_ERR_INVALID_ARG, "tool-call frame: the name holds a character %s cannot carry at byte %zu",
                                                kite_tool_format_name(format), i);
        }
        if (json_name) json_escape_into(&b, name, n, &ok);
        else ok = ok && buf_put(&b, name, n);
        ok = ok && buf_puts(&b, between);
    }
    char *pre = ok ? take(&b) : NULL;
    char *mid = ok ? strdup(between) : NULL, *suf = ok ? strdup(close) : NULL;
    if (!pre || !mid || !suf) {
        buf_free(&b);
        free(pre);
        free(mid);
        free(suf);
        return kite_fail(e, KITE_ERR_NOMEM, "tool-call frame: out of memory");
    }
    if (prefix) *prefix = pre;
    else free(pre);
    if (name_to_args) *name_to_args = mid;
    else free(mid);
    if (suffix) *suffix = suf;
    else free(suf);
    return KITE_OK;
}
