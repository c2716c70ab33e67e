/* Byte buffers, UTF-8 repair for JSON strings, SSE framing, the clock. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve/server.h"

bool serve_buf_append(serve_buf *b, const char *bytes, size_t n) {
    if (n == 0) return true;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *d = realloc(b->data, cap);
        if (!d) return false;
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, bytes, n);
    b->len += n;
    b->data[b->len] = 0;
    return true;
}

void serve_buf_free(serve_buf *b) {
    free(b->data);
    *b = (serve_buf){0};
}

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

json_t *serve_json_text(const char *bytes, size_t n) {
    const unsigned char *s = (const unsigned char *)bytes;
    bool valid = true;
    for (size_t i = 0; i < n;) {
        size_t len = utf8_sequence(s + i, n - i);
        if (!len) { valid = false; break; }
        i += len;
    }
    if (valid) return json_stringn_nocheck(bytes, n);
    serve_buf b = {0};
    bool ok = true;
    for (size_t i = 0; i < n && ok;) {
        size_t len = utf8_sequence(s + i, n - i);
        if (!len) {
            ok = serve_buf_append(&b, "\xEF\xBF\xBD", 3); /* U+FFFD */
            i++;
        } else {
            ok = serve_buf_append(&b, bytes + i, len);
            i += len;
        }
    }
    json_t *j = ok ? json_stringn_nocheck(b.data ? b.data : "", b.len) : NULL;
    serve_buf_free(&b);
    return j;
}

bool serve_sse_append(serve_buf *b, const json_t *event) {
    char *text = json_dumps(event, JSON_COMPACT);
    if (!text) return false;
    bool ok = serve_buf_append(b, "data: ", 6) && serve_buf_append(b, text, strlen(text)) && serve_buf_append(b, "\n\n", 2);
    free(text);
    return ok;
}

double serve_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void serve_cond_init(pthread_cond_t *cv) {
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &attr);
    pthread_condattr_destroy(&attr);
}
