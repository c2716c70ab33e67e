/* The SSE parser against the WHATWG HTML standard's event-stream examples (§9.2.6, written out by hand
 * here from the standard's text, not from the parser's output), line ends of every kind, the CR LF pair
 * split across feeds, the BOM, ids, retry, comments, every split of a multi-event stream into two and
 * three feeds, and the limits. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "route/route.h"

enum { MAX_EVENTS = 32 };

typedef struct seen_event {
    char event[64];
    char data[256];
    size_t data_len;
    char id[64];
    int64_t retry_ms;
} seen_event;

typedef struct seen {
    seen_event ev[MAX_EVENTS];
    int n;
    int stop_at;                  /* return non-zero at this event (-1 = never) */
} seen;

static int collect(const route_sse_event *ev, void *user_data) {
    seen *s = user_data;
    assert_true(s->n < MAX_EVENTS);
    seen_event *o = &s->ev[s->n++];
    assert_true(ev->data_len < sizeof o->data);
    assert_int_equal(ev->data[ev->data_len], 0);
    snprintf(o->event, sizeof o->event, "%s", ev->event);
    memcpy(o->data, ev->data, ev->data_len);
    o->data[ev->data_len] = 0;
    o->data_len = ev->data_len;
    snprintf(o->id, sizeof o->id, "%s", ev->id);
    o->retry_ms = ev->retry_ms;
    return s->n - 1 == s->stop_at;
}

/* Feeds text (n bytes) cut at the given offsets; returns whether finish said "between events". */
static bool feed_split(const char *text, size_t n, const size_t *cuts, int n_cuts, seen *out, size_t max_event) {
    memset(out, 0, sizeof *out);
    out->stop_at = -1;
    route_sse_parser *p = route_sse_new(max_event);
    assert_non_null(p);
    size_t at = 0;
    for (int i = 0; i <= n_cuts; i++) {
        size_t end = i < n_cuts ? cuts[i] : n;
        kite_error e = {0};
        assert_int_equal(route_sse_feed(p, text + at, end - at, collect, out, &e), KITE_OK);
        at = end;
    }
    bool between = route_sse_finish(p);
    route_sse_free(p);
    return between;
}

static bool feed_all(const char *text, seen *out) { return feed_split(text, strlen(text), NULL, 0, out, 0); }

static void expect_event(const seen *s, int i, const char *event, const char *data, const char *id) {
    assert_true(i < s->n);
    assert_string_equal(s->ev[i].event, event);
    assert_string_equal(s->ev[i].data, data);
    assert_int_equal(s->ev[i].data_len, strlen(data));
    assert_string_equal(s->ev[i].id, id);
}

static void test_spec_examples(void **state) {
    (void)state;
    seen s;
    /* three data lines make one event, joined by LF */
    assert_true(feed_all("data: YHOO\ndata: +2\ndata: 10\n\n", &s));
    assert_int_equal(s.n, 1);
    expect_event(&s, 0, "", "YHOO\n+2\n10", "");

    /* a comment, ids (an "id" with no value resets the last id), one leading space removed, no more */
    assert_true(feed_all(": test stream\n\ndata: first event\nid: 1\n\ndata:second event\nid\n\ndata:  third event\n\n", &s));
    assert_int_equal(s.n, 3);
    expect_event(&s, 0, "", "first event", "1");
    expect_event(&s, 1, "", "second event", "");
    expect_event(&s, 2, "", " third event", "");

    /* "data" alone appends an LF: the first block is one empty event, the second one LF; the last block
       is not terminated by a blank line and is dropped */
    assert_false(feed_all("data\n\ndata\ndata\n\ndata:", &s));
    assert_int_equal(s.n, 2);
    expect_event(&s, 0, "", "", "");
    expect_event(&s, 1, "", "\n", "");

    /* with or without the space, the same event */
    assert_true(feed_all("data:test\n\ndata: test\n\n", &s));
    assert_int_equal(s.n, 2);
    expect_event(&s, 0, "", "test", "");
    expect_event(&s, 1, "", "test", "");

    /* event types, reset after each dispatch */
    assert_true(feed_all("event: add\ndata: 73857293\n\nevent: remove\ndata: 2153\n\nevent: add\ndata: 113411\n\ndata: plain\n\n", &s));
    assert_int_equal(s.n, 4);
    expect_event(&s, 0, "add", "73857293", "");
    expect_event(&s, 1, "remove", "2153", "");
    expect_event(&s, 2, "add", "113411", "");
    expect_event(&s, 3, "", "plain", "");
}

static void test_fields(void **state) {
    (void)state;
    seen s;
    /* an event with an empty data buffer is not dispatched, and its type is forgotten */
    assert_true(feed_all("event: foo\n\ndata: x\n\n", &s));
    assert_int_equal(s.n, 1);
    expect_event(&s, 0, "", "x", "");

    /* field names are case-sensitive; unknown fields ignored; a colon in the value is kept */
    assert_true(feed_all("Data: no\nfoo: bar\ndata: a:b\n\n", &s));
    assert_int_equal(s.n, 1);
    expect_event(&s, 0, "", "a:b", "");

    /* ids persist across events; an id holding NUL is ignored */
    static const char with_nul[] = "id: 7\ndata: a\n\nid: x\0y\ndata: b\n\ndata: c\n\n";
    feed_split(with_nul, sizeof with_nul - 1, NULL, 0, &s, 0);
    assert_int_equal(s.n, 3);
    expect_event(&s, 0, "", "a", "7");
    expect_event(&s, 1, "", "b", "7");
    expect_event(&s, 2, "", "c", "7");

    /* retry: digits only, reported on the next event and not after */
    assert_true(feed_all("retry: 1500\ndata: a\n\nretry: 15a0\ndata: b\n\nretry:\ndata: c\n\ndata: d\n\n", &s));
    assert_int_equal(s.n, 4);
    assert_int_equal(s.ev[0].retry_ms, 1500);
    assert_int_equal(s.ev[1].retry_ms, -1);
    assert_int_equal(s.ev[2].retry_ms, -1);
    assert_int_equal(s.ev[3].retry_ms, -1);

    /* NUL inside data is data */
    static const char nul_data[] = "data: a\0b\n\n";
    feed_split(nul_data, sizeof nul_data - 1, NULL, 0, &s, 0);
    assert_int_equal(s.n, 1);
    assert_int_equal(s.ev[0].data_len, 3);
    assert_memory_equal(s.ev[0].data, "a\0b", 3);

    /* invalid UTF-8 becomes U+FFFD, one per maximal invalid subpart (the standard's UTF-8 decode) */
    assert_true(feed_all("data: \xff|\xe2\x82|\xe2\x82\xac|\xed\xa0\x80\n\n", &s));
    assert_int_equal(s.n, 1);
    assert_string_equal(s.ev[0].data, "\xef\xbf\xbd|\xef\xbf\xbd|\xe2\x82\xac|\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
}

static void test_line_ends_and_bom(void **state) {
    (void)state;
    seen s;
    /* LF, CR LF and CR alike */
    assert_true(feed_all("data: a\r\ndata: b\rdata: c\n\r\ndata: d\r\r", &s));
    assert_int_equal(s.n, 2);
    expect_event(&s, 0, "", "a\nb\nc", "");
    expect_event(&s, 1, "", "d", "");

    /* a CR LF split across two feeds is one line end (two would make a blank line and two events) */
    const char *text = "data: a\r\ndata: b\r\n\r\n";
    size_t cut = 8; /* between the first CR and its LF */
    assert_int_equal(text[cut - 1], '\r');
    feed_split(text, strlen(text), &cut, 1, &s, 0);
    assert_int_equal(s.n, 1);
    expect_event(&s, 0, "", "a\nb", "");

    /* a CR then, in the next feed, a line that does not start with LF */
    const char *cr_text = "data: a\rdata: b\r\r";
    size_t cr_cut = 8;
    feed_split(cr_text, strlen(cr_text), &cr_cut, 1, &s, 0);
    assert_int_equal(s.n, 1);
    expect_event(&s, 0, "", "a\nb", "");

    /* one leading BOM is skipped, even split across feeds; a second is part of the field name */
    const char *bom = "\xef\xbb\xbf" "data: x\n\n";
    for (size_t c = 0; c <= 3; c++) {
        feed_split(bom, strlen(bom), &c, 1, &s, 0);
        assert_int_equal(s.n, 1);
        expect_event(&s, 0, "", "x", "");
    }
    assert_true(feed_all("\xef\xbb\xbf\xef\xbb\xbf" "data: x\n\ndata: y\n\n", &s));
    assert_int_equal(s.n, 1);
    expect_event(&s, 0, "", "y", "");
    /* the start of a BOM that is not one is text: here a field name that is not "data" */
    const char half_bom[] = "\xef\xbb" "data: x\n\ndata: y\n\n";
    size_t one = 1;
    feed_split(half_bom, sizeof half_bom - 1, &one, 1, &s, 0);
    assert_int_equal(s.n, 1);
    expect_event(&s, 0, "", "y", "");

    /* finish: cut inside an event, inside a line, or between events (a trailing comment is fine) */
    assert_false(feed_all("data: a\n\ndata: b\n", &s));
    assert_int_equal(s.n, 1);
    assert_false(feed_all("data: a\n\ndat", &s));
    assert_true(feed_all("data: a\n\n: keep-alive", &s));
}

/* Every split of a stream with every feature into two feeds, and into three, gives the events written
 * out here. */
static void test_every_split(void **state) {
    (void)state;
    static const char text[] = "\xef\xbb\xbf: hello\r\n"
                               "event: add\r\nid: 42\r\ndata: {\"a\": 1}\r\ndata:two\r\n\r\n"
                               "retry: 250\rdata: \xe2\x82\xac\r\r"
                               "data\n\n"
                               "event: e\nid\ndata:  sp\n\n"
                               "data: tail";
    size_t n = sizeof text - 1;
    seen ref;
    feed_split(text, n, NULL, 0, &ref, 0);
    assert_int_equal(ref.n, 4);
    expect_event(&ref, 0, "add", "{\"a\": 1}\ntwo", "42");
    expect_event(&ref, 1, "", "\xe2\x82\xac", "42");
    assert_int_equal(ref.ev[1].retry_ms, 250);
    expect_event(&ref, 2, "", "", "42");
    expect_event(&ref, 3, "e", " sp", "");
    seen s;
    for (size_t a = 0; a <= n; a++) {
        assert_false(feed_split(text, n, &a, 1, &s, 0));
        assert_int_equal(s.n, ref.n);
        assert_memory_equal(s.ev, ref.ev, sizeof ref.ev[0] * (size_t)ref.n);
        for (size_t b = a; b <= n; b++) {
            size_t cuts[2] = {a, b};
            feed_split(text, n, cuts, 2, &s, 0);
            assert_int_equal(s.n, ref.n);
            assert_memory_equal(s.ev, ref.ev, sizeof ref.ev[0] * (size_t)ref.n);
        }
    }
    /* byte by byte */
    size_t cuts[sizeof text];
    for (size_t i = 0; i < n; i++) cuts[i] = i + 1;
    feed_split(text, n, cuts, (int)n - 1, &s, 0);
    assert_int_equal(s.n, ref.n);
    assert_memory_equal(s.ev, ref.ev, sizeof ref.ev[0] * (size_t)ref.n);
}

static void test_limits_and_stop(void **state) {
    (void)state;
    kite_error e = {0};
    seen s = {.stop_at = -1};
    /* data within the bound: 15 bytes + its LF = 16 */
    route_sse_parser *p = route_sse_new(16);
    assert_int_equal(route_sse_feed(p, "data: 0123456789abcde\n\n", 23, collect, &s, &e), KITE_OK);
    assert_int_equal(s.n, 1);
    /* two lines that together pass it */
    const char *two = "data: 01234567\ndata: 89abcdef\n\n";
    assert_int_equal(route_sse_feed(p, two, strlen(two), collect, &s, &e), KITE_ERR_INVALID_ARG);
    assert_non_null(strstr(e.msg, "event data longer than 16 bytes"));
    assert_non_null(strstr(e.msg, "byte 53")); /* after the second line's LF: 23 + 30 */
    /* the parser stays failed */
    assert_int_equal(route_sse_feed(p, "data: x\n\n", 9, collect, &s, &e), KITE_ERR_INVALID_ARG);
    assert_int_equal(s.n, 1);
    route_sse_free(p);

    /* one line longer than max + 64, even with no data field, and wherever it is split */
    char line[200];
    memset(line, 'x', sizeof line);
    memcpy(line, "foo:", 4);
    for (size_t step = 1; step <= 200; step += 199) {
        p = route_sse_new(16);
        kite_status st = KITE_OK;
        for (size_t at = 0; at < sizeof line && st == KITE_OK; at += step)
            st = route_sse_feed(p, line + at, step < sizeof line - at ? step : sizeof line - at, collect, &s, &e);
        assert_int_equal(st, KITE_ERR_INVALID_ARG);
        assert_non_null(strstr(e.msg, "line longer than 80 bytes at byte 80"));
        route_sse_free(p);
    }
    /* a comment line of any length is skipped without being kept */
    p = route_sse_new(16);
    line[0] = ':';
    for (int i = 0; i < 100; i++) assert_int_equal(route_sse_feed(p, line, sizeof line, collect, &s, &e), KITE_OK);
    assert_int_equal(route_sse_feed(p, "\ndata: ok\n\n", 11, collect, &s, &e), KITE_OK);
    assert_int_equal(s.n, 2);
    assert_string_equal(s.ev[1].data, "ok");
    route_sse_free(p);

    /* the callback stops the parse */
    p = route_sse_new(0);
    seen st = {.stop_at = 0};
    assert_int_equal(route_sse_feed(p, "data: a\n\ndata: b\n\n", 18, collect, &st, &e), KITE_ERR_CANCELLED);
    assert_int_equal(st.n, 1);
    route_sse_free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spec_examples), cmocka_unit_test(test_fields), cmocka_unit_test(test_line_ends_and_bom),
        cmocka_unit_test(test_every_split),   cmocka_unit_test(test_limits_and_stop),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
