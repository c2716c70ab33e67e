/* Byte buffers, UTF-8 repair for JSON strings, SSE framing, the clock. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chat/reply.h"
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

bool serve_buf_printf(serve_buf *b, const char *fmt, ...) {
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) return false;
    if ((size_t)n < sizeof small) return serve_buf_append(b, small, (size_t)n);
    char *big = malloc((size_t)n + 1);
    if (!big) return false;
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    bool ok = serve_buf_append(b, big, (size_t)n);
    free(big);
    return ok;
}

void serve_buf_free(serve_buf *b) {
    free(b->data);
    *b = (serve_buf){0};
}

json_t *serve_json_text(const char *bytes, size_t n) { return kite_json_text_lossy(bytes, n); }

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
