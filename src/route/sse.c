/* The incremental Server-Sent Events parser (contract in route.h), after the WHATWG HTML standard's
 * "Interpreting an event stream" (§9.2.6):
 *   - the stream is UTF-8; one leading BOM (EF BB BF) is skipped, even when it arrives split across feeds;
 *     invalid sequences become U+FFFD as the standard's "UTF-8 decode" makes them (applied per field value:
 *     line ends and ':' are ASCII, so decoding line by line gives what decoding the whole stream would);
 *   - a line ends at CR LF, LF or CR; a CR LF pair split across two feeds counts once;
 *   - a blank line dispatches: an empty data buffer dispatches nothing (and clears the event type), else
 *     its last LF is removed and the event goes to the callback; data and event type are then cleared;
 *   - a line starting with ':' is a comment; otherwise the field name runs to the first ':' and the value
 *     follows it, with one leading space removed (a line without ':' is a field with an empty value);
 *   - "data" appends value + LF; "event" sets the type; "id" sets the last event id unless the value
 *     holds a NUL (the id persists across events, as the standard's last-event-ID buffer does); "retry"
 *     with a value of one or more ASCII digits sets the reconnection time (saturating; reported on the
 *     next dispatched event); any other field is ignored.
 * Memory is bounded: one event's data by max_event_bytes, one line by max_event_bytes + LINE_SLACK (a
 * comment line is skipped without being buffered, whatever its length). Every offset in an error is the
 * byte offset in the whole stream, so the same input fails the same way however it is split. */
#include "route/route.h"

#include <stdlib.h>
#include <string.h>

enum {
    DEFAULT_MAX_EVENT_BYTES = 8 << 20,
    LINE_SLACK = 64,                 /* room for a field name and ": " beyond the largest data value */
};

/* A growing byte buffer with a hard cap. */
typedef struct sse_buf {
    char *bytes;
    size_t len, cap;
} sse_buf;

struct route_sse_parser {
    size_t max_event_bytes;
    size_t max_line_bytes;
    sse_buf line;                    /* the current line, without its end */
    bool line_is_comment;            /* the current line started with ':' (its bytes are not kept) */
    bool line_pending;               /* bytes of a line not yet ended have arrived */
    bool after_cr;                   /* the last byte was CR: an LF next is the same line end */
    uint8_t bom_matched;             /* BOM bytes seen at the start so far (0..3) */
    bool bom_done;                   /* the start of the stream has been checked for a BOM */
    sse_buf data;                    /* data buffer: values + LF each */
    sse_buf event_type;
    sse_buf last_id;
    bool fields_pending;             /* a field line was seen since the last blank line */
    int64_t retry_ms;                /* -1, or the retry value set since the last dispatch */
    uint64_t offset;                 /* bytes of the stream consumed before the current feed position */
    bool failed;                     /* an earlier feed failed on a limit: the parser stays failed */
};

static bool buf_reserve(sse_buf *b, size_t need) {
    if (need <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need) cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    char *p = realloc(b->bytes, cap);
    if (!p) return false;
    b->bytes = p;
    b->cap = cap;
    return true;
}

static bool buf_append(sse_buf *b, const char *s, size_t n) {
    if (!buf_reserve(b, b->len + n + 1)) return false;
    memcpy(b->bytes + b->len, s, n);
    b->len += n;
    b->bytes[b->len] = 0;
    return true;
}

/* The standard's UTF-8 decoder with replacement, bytes in, UTF-8 out: valid sequences are copied, each
 * maximal invalid subpart becomes U+FFFD. out needs 3 * n bytes. Returns the bytes written. */
static size_t utf8_sanitize(const unsigned char *in, size_t n, char *out) {
    static const char REPLACEMENT[3] = {(char)0xEF, (char)0xBF, (char)0xBD};
    size_t o = 0, start = 0;
    int needed = 0, seen = 0;
    unsigned lower = 0x80, upper = 0xBF;
    for (size_t i = 0; i < n; i++) {
        unsigned b = in[i];
        if (needed == 0) {
            start = i;
            if (b <= 0x7F) {
                out[o++] = (char)b;
            } else if (b >= 0xC2 && b <= 0xDF) {
                needed = 1;
            } else if (b >= 0xE0 && b <= 0xEF) {
                if (b == 0xE0) lower = 0xA0;
                if (b == 0xED) upper = 0x9F;
                needed = 2;
            } else if (b >= 0xF0 && b <= 0xF4) {
                if (b == 0xF0) lower = 0x90;
                if (b == 0xF4) upper = 0x8F;
                needed = 3;
            } else {
                memcpy(out + o, REPLACEMENT, 3);
                o += 3;
            }
            continue;
        }
        if (b < lower || b > upper) {
            /* the sequence so far is one invalid subpart; this byte starts afresh */
            needed = seen = 0;
            lower = 0x80;
            upper = 0xBF;
            memcpy(out + o, REPLACEMENT, 3);
            o += 3;
            i--;
            continue;
        }
        lower = 0x80;
        upper = 0xBF;
        if (++seen == needed) {
            memcpy(out + o, in + start, i + 1 - start);
            o += i + 1 - start;
            needed = seen = 0;
        }
    }
    if (needed) {
        memcpy(out + o, REPLACEMENT, 3);
        o += 3;
    }
    return o;
}

/* Sets b to the sanitized value (b's content replaced). */
static bool buf_set_sanitized(sse_buf *b, const char *value, size_t n) {
    if (n > (SIZE_MAX - 1) / 3 || !buf_reserve(b, 3 * n + 1)) return false;
    b->len = utf8_sanitize((const unsigned char *)value, n, b->bytes);
    b->bytes[b->len] = 0;
    return true;
}

route_sse_parser *route_sse_new(size_t max_event_bytes) {
    route_sse_parser *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->max_event_bytes = max_event_bytes ? max_event_bytes : DEFAULT_MAX_EVENT_BYTES;
    p->max_line_bytes = p->max_event_bytes > SIZE_MAX - LINE_SLACK ? SIZE_MAX : p->max_event_bytes + LINE_SLACK;
    p->retry_ms = -1;
    return p;
}

void route_sse_free(route_sse_parser *p) {
    if (!p) return;
    free(p->line.bytes);
    free(p->data.bytes);
    free(p->event_type.bytes);
    free(p->last_id.bytes);
    free(p);
}

static kite_status dispatch(route_sse_parser *p, route_sse_fn fn, void *user_data, kite_error *e) {
    p->fields_pending = false;
    if (p->data.len == 0) {
        p->event_type.len = 0;
        p->retry_ms = -1;
        return KITE_OK;
    }
    p->data.len--; /* the last LF */
    p->data.bytes[p->data.len] = 0;
    route_sse_event ev = {
        .event = p->event_type.len ? p->event_type.bytes : "",
        .data = p->data.bytes,
        .data_len = p->data.len,
        .id = p->last_id.len ? p->last_id.bytes : "",
        .retry_ms = p->retry_ms,
    };
    int stop = fn ? fn(&ev, user_data) : 0;
    p->data.len = 0;
    p->event_type.len = 0;
    p->retry_ms = -1;
    if (stop) return kite_fail(e, KITE_ERR_CANCELLED, "sse: stopped by the event callback at byte %llu",
                               (unsigned long long)p->offset);
    return KITE_OK;
}

static kite_status fail_limit(route_sse_parser *p, kite_error *e, const char *what, size_t limit) {
    p->failed = true;
    return kite_fail(e, KITE_ERR_INVALID_ARG, "sse: %s longer than %zu bytes at byte %llu", what, limit,
                     (unsigned long long)p->offset);
}

static kite_status process_line(route_sse_parser *p, route_sse_fn fn, void *user_data, kite_error *e) {
    bool comment = p->line_is_comment;
    size_t n = p->line.len;
    p->line.len = 0;
    p->line_is_comment = false;
    p->line_pending = false;
    if (comment) return KITE_OK;
    if (n == 0) return dispatch(p, fn, user_data, e);
    const char *line = p->line.bytes;
    const char *colon = memchr(line, ':', n);
    size_t name_len = colon ? (size_t)(colon - line) : n;
    const char *value = colon ? colon + 1 : line + n;
    size_t value_len = (size_t)(line + n - value);
    if (value_len && value[0] == ' ') {
        value++;
        value_len--;
    }
    p->fields_pending = true;
    if (name_len == 4 && memcmp(line, "data", 4) == 0) {
        /* the decoded value is at least value_len bytes: a quick bound first, the exact one after */
        if (value_len + 1 > p->max_event_bytes - p->data.len || p->data.len + 1 > p->max_event_bytes)
            return fail_limit(p, e, "event data", p->max_event_bytes);
        if (!buf_reserve(&p->data, p->data.len + 3 * value_len + 2))
            return kite_fail(e, KITE_ERR_NOMEM, "sse: out of memory");
        size_t got = utf8_sanitize((const unsigned char *)value, value_len, p->data.bytes + p->data.len);
        if (p->data.len + got + 1 > p->max_event_bytes) return fail_limit(p, e, "event data", p->max_event_bytes);
        p->data.len += got;
        p->data.bytes[p->data.len++] = '\n';
        p->data.bytes[p->data.len] = 0;
    } else if (name_len == 5 && memcmp(line, "event", 5) == 0) {
        if (!buf_set_sanitized(&p->event_type, value, value_len)) return kite_fail(e, KITE_ERR_NOMEM, "sse: out of memory");
    } else if (name_len == 2 && memcmp(line, "id", 2) == 0) {
        if (!memchr(value, 0, value_len) && !buf_set_sanitized(&p->last_id, value, value_len))
            return kite_fail(e, KITE_ERR_NOMEM, "sse: out of memory");
    } else if (name_len == 5 && memcmp(line, "retry", 5) == 0) {
        bool digits = value_len > 0;
        int64_t ms = 0;
        for (size_t i = 0; i < value_len && digits; i++) {
            if (value[i] < '0' || value[i] > '9') digits = false;
            else ms = ms > (INT64_MAX - 9) / 10 ? INT64_MAX : ms * 10 + (value[i] - '0');
        }
        if (digits) p->retry_ms = ms;
    }
    return KITE_OK;
}

/* Takes bytes of the current line (no CR or LF among them). */
static kite_status take_line_bytes(route_sse_parser *p, const char *s, size_t n, kite_error *e) {
    if (n == 0) return KITE_OK;
    if (!p->line_pending && s[0] == ':') p->line_is_comment = true;
    p->line_pending = true;
    if (p->line_is_comment) return KITE_OK;
    if (n > p->max_line_bytes - p->line.len) {
        p->offset += p->max_line_bytes - p->line.len; /* the byte that went past the limit */
        return fail_limit(p, e, "line", p->max_line_bytes);
    }
    if (!buf_append(&p->line, s, n)) return kite_fail(e, KITE_ERR_NOMEM, "sse: out of memory");
    return KITE_OK;
}

kite_status route_sse_feed(route_sse_parser *p, const char *bytes, size_t n, route_sse_fn fn, void *user_data,
                           kite_error *e) {
    static const unsigned char BOM[3] = {0xEF, 0xBB, 0xBF};
    if (!p || (!bytes && n)) return kite_fail(e, KITE_ERR_INVALID_ARG, "sse: parser and bytes are required");
    if (p->failed) return kite_fail(e, KITE_ERR_INVALID_ARG, "sse: the stream already failed");
    size_t i = 0;
    while (!p->bom_done && i < n) {
        if ((unsigned char)bytes[i] == BOM[p->bom_matched]) {
            i++;
            p->offset++;
            if (++p->bom_matched == 3) p->bom_done = true;
            continue;
        }
        /* not a BOM: the bytes that looked like its start are ordinary text of the first line */
        p->bom_done = true;
        kite_status st = take_line_bytes(p, (const char *)BOM, p->bom_matched, e);
        if (st != KITE_OK) return st;
    }
    while (i < n) {
        if (p->after_cr) {
            p->after_cr = false;
            if (bytes[i] == '\n') {
                i++;
                p->offset++;
                continue;
            }
        }
        size_t j = i;
        while (j < n && bytes[j] != '\r' && bytes[j] != '\n') j++;
        kite_status st = take_line_bytes(p, bytes + i, j - i, e);
        if (st != KITE_OK) return st;
        p->offset += j - i;
        if (j == n) break;
        p->after_cr = bytes[j] == '\r';
        p->offset++;
        i = j + 1;
        st = process_line(p, fn, user_data, e);
        if (st != KITE_OK) return st;
    }
    return KITE_OK;
}

bool route_sse_finish(route_sse_parser *p) {
    if (!p) return true;
    bool between_events = !p->fields_pending && !(p->line_pending && !p->line_is_comment);
    /* what is left is discarded; the parser is ready for a new stream */
    p->line.len = p->data.len = p->event_type.len = p->last_id.len = 0;
    p->line_is_comment = p->line_pending = p->after_cr = p->fields_pending = p->failed = false;
    p->bom_matched = 0;
    p->bom_done = false;
    p->retry_ms = -1;
    p->offset = 0;
    return between_events;
}
