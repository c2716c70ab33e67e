/* Fuzzes the SSE parser: the first input byte picks the event bound (small ones reach the limit checks),
 * the rest is the stream. Feeding it in one call, byte by byte, and in pieces whose sizes come from the
 * input itself must give the same events, the same status and the same error message (offsets are of the
 * whole stream, so a limit fails at the same byte however the input is split) and the same answer from
 * route_sse_finish. Every event's data is NUL-terminated at data_len and is valid UTF-8. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "route/route.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct record {
    char *bytes;
    size_t len, cap;
} record;

static void put(record *r, const void *p, size_t n) {
    if (r->len + n > r->cap) {
        size_t cap = (r->len + n) * 2 + 64;
        char *b = realloc(r->bytes, cap);
        if (!b) abort();
        r->bytes = b;
        r->cap = cap;
    }
    memcpy(r->bytes + r->len, p, n);
    r->len += n;
}

static bool valid_utf8(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t k = (c >= 0xC2 && c <= 0xDF) ? 1 : (c >= 0xE0 && c <= 0xEF) ? 2 : (c >= 0xF0 && c <= 0xF4) ? 3 : 0;
        if (k == 0 || i + k >= n) return false;
        unsigned lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80;
        unsigned hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
        for (size_t j = 1; j <= k; j++) {
            unsigned b = s[i + j];
            if (b < (j == 1 ? lo : 0x80u) || b > (j == 1 ? hi : 0xBFu)) return false;
        }
        i += k + 1;
    }
    return true;
}

static int on_event(const route_sse_event *ev, void *user_data) {
    record *r = user_data;
    if (!ev->event || !ev->data || !ev->id || ev->data[ev->data_len] != 0) abort();
    if (!valid_utf8((const unsigned char *)ev->data, ev->data_len)) abort();
    if (!valid_utf8((const unsigned char *)ev->event, strlen(ev->event))) abort();
    put(r, ev->event, strlen(ev->event) + 1);
    put(r, &ev->data_len, sizeof ev->data_len);
    put(r, ev->data, ev->data_len);
    put(r, ev->id, strlen(ev->id) + 1);
    put(r, &ev->retry_ms, sizeof ev->retry_ms);
    return 0;
}

/* mode 0: one call; 1: byte by byte; 2: pieces sized by the input's bytes. */
static void run(const uint8_t *s, size_t n, size_t max_event, int mode, record *r) {
    route_sse_parser *p = route_sse_new(max_event);
    if (!p) abort();
    kite_error e = {0};
    kite_status st = KITE_OK;
    size_t at = 0;
    while (at < n && st == KITE_OK) {
        size_t step = mode == 0 ? n : mode == 1 ? 1 : (size_t)(s[at] % 7) + 1;
        if (step > n - at) step = n - at;
        st = route_sse_feed(p, (const char *)s + at, step, on_event, r, &e);
        at += step;
    }
    if (st == KITE_OK && n == 0) st = route_sse_feed(p, "", 0, on_event, r, &e);
    int32_t status = st;
    put(r, &status, sizeof status);
    if (st != KITE_OK) {
        if (!e.msg[0]) abort();
        put(r, e.msg, strlen(e.msg) + 1);
    } else {
        bool between = route_sse_finish(p);
        put(r, &between, sizeof between);
    }
    route_sse_free(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    size_t max_event = data[0] % 4 == 0 ? 0 : (size_t)8 << (data[0] % 8);
    record r[3] = {{0}};
    for (int mode = 0; mode < 3; mode++) run(data + 1, size - 1, max_event, mode, &r[mode]);
    for (int mode = 1; mode < 3; mode++)
        if (r[mode].len != r[0].len || memcmp(r[mode].bytes, r[0].bytes, r[0].len) != 0) abort();
    for (int mode = 0; mode < 3; mode++) free(r[mode].bytes);
    return 0;
}
