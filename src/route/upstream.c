/* The OpenAI-compatible upstream client over libcurl (contract in route.h).
 *
 * Transfers. Each transfer runs on a pool slot: a curl multi handle with one easy handle in it, driven by
 * this file's own loop (curl_multi_perform, then curl_multi_poll for at most POLL_MS). The loop is what
 * enforces the first-token and total deadlines and polls *cancel every POLL_MS (50 ms): curl's own
 * progress callback runs only about once a second while a connection is silent, too coarse for a 50 ms
 * cancel, and a loop of our own also tells the timeouts apart without decoding curl's error codes.
 * curl enforces the connect timeout (CURLOPT_CONNECTTIMEOUT_MS: DNS, TCP and TLS).
 *
 * Keep-alive. A multi handle keeps the connections its transfers used in its own cache, so a slot that
 * goes back to the pool keeps its live connection for the next request. Slots are a LIFO stack under
 * the upstream's mutex (the most recently used slot, whose connection is the most likely still open,
 * goes out first); up to POOL_KEEP idle slots are kept, more concurrent requests get fresh slots that
 * are closed after use. A CURLSH sharing CURL_LOCK_DATA_CONNECT between threads would be the other way,
 * but libcurl 7.x documents it as not thread-safe (known bug 11.11, curl issue #4915), and a handle
 * per slot needs no locking inside curl at all.
 *
 * First token. "Sent" is when curl reports the request's pre-transfer point (CURLINFO_PRETRANSFER_TIME_T:
 * connected, TLS done, the request going out); the first token is the first chunk with non-empty
 * content, reasoning content, text (completions) or a tool call. The first-token deadline runs from sent.
 *
 * Retries, only while nothing has reached the caller's callback: 5xx, 429, a connect timeout, a stream
 * cut before its first chunk. A refused / unreachable connection is not retried: it puts the backend in
 * cooldown at once (the machine is likely offline, and the caller falls back without further waits).
 * Backoff before retry k (0-based): retry_base_ms * 2^k, "equal jitter" (a uniform draw in [d/2, d]),
 * at least the Retry-After the server gave; when that wait would pass the total deadline the request
 * ends at once with the last fault.
 *
 * Health counts one outcome per route_upstream_stream call: OK resets the consecutive failures; 4xx and
 * cancel leave them; every other fault adds one, and failures_to_cooldown of them in a row (or one connect
 * failure) start a cooldown. A failed probe starts a cooldown too (or prolongs the current one: counted
 * once), a probe answered 200 ends it. counters.faults[] counts attempts (so retried faults each show),
 * failures the requests that ended in a fault other than cancel (4xx included), the rest requests. The API key is only ever in the Authorization header list, which is wiped before it
 * is freed; curl's verbose output stays off, and messages quoting the upstream are scrubbed of the key. */
#include "route/route.h"

#include <curl/curl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

enum {
    POLL_MS = 50,                     /* cancel / deadline polling period */
    POOL_KEEP = 8,                    /* idle slots (each with its kept-alive connection) kept */
    ERROR_BODY_MAX = 64 << 10,        /* bytes of a non-200 body read for its error message */
    RETRY_AFTER_CAP_MS = 3600 * 1000, /* a larger Retry-After is taken as an hour */
    DONE_GRACE_MS = 250,              /* after [DONE], how long the response may take to end */
    SSE_EVENT_MAX = 4 << 20,          /* bytes of one SSE event (one chunk's JSON) */
};

typedef struct upstream_slot {
    CURLM *multi;
    CURL *easy;
    struct upstream_slot *next;
} upstream_slot;

struct route_upstream {
    const route_backend *b;
    char *base_url;                   /* the backend's url without a trailing slash; + path per request */
    char *models_url;                 /* url + "/models" (the health probe) */
    route_timeouts timeout;           /* the backend's, defaults filled in */
    int32_t max_retries, retry_base_ms, failures_to_cooldown, cooldown_ms;
    pthread_mutex_t mu;               /* guards everything below */
    upstream_slot *idle;              /* LIFO stack of idle slots */
    int32_t n_idle;
    int32_t consecutive_failures;
    bool in_cooldown;
    int64_t cooldown_until_ms;        /* monotonic */
    bool probing;                     /* a health probe is running (others see the backend unavailable) */
    route_upstream_counters counters;
    route_latency latency;
    uint64_t jitter_state;
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_status = CURLE_FAILED_INIT;

static void init_curl_once(void) { curl_init_status = curl_global_init(CURL_GLOBAL_DEFAULT); }

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_ms(int64_t ms) {
    if (ms <= 0) return;
    struct timespec ts = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

static bool cancelled(const atomic_bool *cancel) { return cancel && atomic_load(cancel); }

const char *route_fault_name(route_fault f) {
    switch (f) {
    case ROUTE_OK: return "ok";
    case ROUTE_FAULT_CONNECT: return "connect";
    case ROUTE_FAULT_CONNECT_TIMEOUT: return "connect_timeout";
    case ROUTE_FAULT_FIRST_TOKEN_TIMEOUT: return "first_token_timeout";
    case ROUTE_FAULT_TOTAL_TIMEOUT: return "total_timeout";
    case ROUTE_FAULT_RATE_LIMITED: return "rate_limited";
    case ROUTE_FAULT_HTTP_5XX: return "http_5xx";
    case ROUTE_FAULT_HTTP_4XX: return "http_4xx";
    case ROUTE_FAULT_MALFORMED: return "malformed";
    case ROUTE_FAULT_CUT: return "cut";
    case ROUTE_FAULT_CANCELLED: return "cancelled";
    }
    return "unknown";
}

/* ---- messages without the key ------------------------------------------------------------------ */

/* Replaces every occurrence of the backend's key in s (NUL-terminated, capacity cap) with "[key]". */
static void scrub_key(const route_upstream *u, char *s, size_t cap) {
    const char *key = u->b->api_key;
    size_t klen = key ? strlen(key) : 0;
    if (klen == 0) return;
    char *from = s, *hit;
    while ((hit = strstr(from, key)) != NULL) {
        char rest[sizeof ((route_upstream_result *)0)->message];
        snprintf(rest, sizeof rest, "%s", hit + klen);
        snprintf(hit, cap - (size_t)(hit - s), "[key]%s", rest);
        from = hit + strlen("[key]") < s + cap ? hit + strlen("[key]") : s + cap - 1;
    }
}

static void set_message(const route_upstream *u, route_upstream_result *res, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_message(const route_upstream *u, route_upstream_result *res, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(res->message, sizeof res->message, fmt, ap);
    va_end(ap);
    for (char *c = res->message; *c; c++)
        if (*c == '\n' || *c == '\r') *c = ' ';
    scrub_key(u, res->message, sizeof res->message);
}

/* ---- pool --------------------------------------------------------------------------------------- */

static upstream_slot *slot_acquire(route_upstream *u) {
    pthread_mutex_lock(&u->mu);
    upstream_slot *s = u->idle;
    if (s) {
        u->idle = s->next;
        u->n_idle--;
    }
    pthread_mutex_unlock(&u->mu);
    if (s) return s;
    s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->multi = curl_multi_init();
    s->easy = curl_easy_init();
    if (!s->multi || !s->easy) {
        if (s->multi) curl_multi_cleanup(s->multi);
        if (s->easy) curl_easy_cleanup(s->easy);
        free(s);
        return NULL;
    }
    return s;
}

static void slot_destroy(upstream_slot *s) {
    curl_multi_cleanup(s->multi);
    curl_easy_cleanup(s->easy);
    free(s);
}

static void slot_release(route_upstream *u, upstream_slot *s) {
    pthread_mutex_lock(&u->mu);
    if (u->n_idle < POOL_KEEP) {
        s->next = u->idle;
        u->idle = s;
        u->n_idle++;
        s = NULL;
    }
    pthread_mutex_unlock(&u->mu);
    if (s) slot_destroy(s);
}

/* ---- one transfer ------------------------------------------------------------------------------- */

typedef struct transfer {
    route_upstream *u;
    upstream_slot *slot;
    route_upstream_result *res;
    route_chunk_fn fn;
    void *user_data;
    bool streaming_post;              /* false for the probe (GET, body discarded) */
    /* response */
    bool checked_head;                /* status and content type looked at (first body byte) */
    long status;
    bool is_sse;
    int32_t retry_after_ms;           /* this response's, -1 if none */
    char *body;                       /* a non-200 body (bounded) */
    size_t body_len;
    route_sse_parser *sse;
    /* stream state */
    route_fault fault;                /* set by the callbacks to stop the transfer; ROUTE_OK = go on */
    bool delivered;                   /* fn was called */
    bool done;                        /* data: [DONE] seen */
    int64_t done_at_ms;
    bool saw_finish;
    int64_t content_chunks;
    int64_t usage_tokens;             /* -1 = not sent */
    double sent_s, first_token_s, last_token_s; /* 0 = not yet */
    double start_s;
} transfer;

static void note_sent(transfer *t) {
    if (t->sent_s > 0) return;
    curl_off_t pre = 0;
    if (curl_easy_getinfo(t->slot->easy, CURLINFO_PRETRANSFER_TIME_T, &pre) == CURLE_OK && pre > 0)
        t->sent_s = t->start_s + (double)pre * 1e-6;
}

/* Retry-After: delta-seconds or an HTTP-date, in ms from now, capped; -1 when unparseable. */
static int32_t parse_retry_after(const char *v, size_t n) {
    char buf[128];
    while (n && (*v == ' ' || *v == '\t')) v++, n--;
    while (n && (v[n - 1] == ' ' || v[n - 1] == '\t' || v[n - 1] == '\r' || v[n - 1] == '\n')) n--;
    if (n == 0 || n >= sizeof buf) return -1;
    memcpy(buf, v, n);
    buf[n] = 0;
    bool digits = true;
    int64_t secs = 0;
    for (size_t i = 0; i < n; i++) {
        if (buf[i] < '0' || buf[i] > '9') {
            digits = false;
            break;
        }
        if (secs < RETRY_AFTER_CAP_MS / 1000) secs = secs * 10 + (buf[i] - '0');
    }
    if (!digits) {
        time_t when = curl_getdate(buf, NULL);
        if (when == (time_t)-1) return -1;
        time_t now = time(NULL);
        secs = when > now ? (int64_t)(when - now) : 0;
    }
    int64_t ms = secs * 1000;
    return (int32_t)(ms > RETRY_AFTER_CAP_MS ? RETRY_AFTER_CAP_MS : ms);
}

static size_t on_header(char *line, size_t size, size_t nitems, void *userdata) {
    transfer *t = userdata;
    size_t n = size * nitems;
    if (n >= 5 && memcmp(line, "HTTP/", 5) == 0) {
        t->retry_after_ms = -1; /* a new response (after a 100 Continue, say) */
    } else if (n > 12 && strncasecmp(line, "retry-after:", 12) == 0) {
        t->retry_after_ms = parse_retry_after(line + 12, n - 12);
    }
    return n;
}

/* A non-empty string member. */
static bool has_text(json_t *obj, const char *key) {
    json_t *v = json_object_get(obj, key);
    return json_is_string(v) && json_string_length(v) > 0;
}

/* One SSE event of a 200 stream. */
static int on_event(const route_sse_event *ev, void *user_data) {
    transfer *t = user_data;
    route_upstream *u = t->u;
    if (t->done) return 0; /* nothing after [DONE] counts */
    if (ev->data_len == 6 && memcmp(ev->data, "[DONE]", 6) == 0) {
        t->done = true;
        t->done_at_ms = now_ms();
        return 0;
    }
    json_error_t jerr;
    json_t *chunk = json_loadb(ev->data, ev->data_len, JSON_REJECT_DUPLICATES, &jerr);
    if (!chunk || !json_is_object(chunk)) {
        t->fault = ROUTE_FAULT_MALFORMED;
        if (chunk) set_message(u, t->res, "upstream: a stream chunk is not a JSON object");
        else set_message(u, t->res, "upstream: bad JSON in a stream chunk at %d:%d: %s", jerr.line, jerr.column, jerr.text);
        json_decref(chunk);
        return 1;
    }
    json_t *error = json_object_get(chunk, "error");
    if (error || strcmp(ev->event, "error") == 0) {
        json_t *msg = json_is_object(error) ? json_object_get(error, "message") : error;
        t->fault = ROUTE_FAULT_MALFORMED;
        set_message(u, t->res, "upstream: error in the stream: %s",
                    json_is_string(msg) ? json_string_value(msg) : "(no message)");
        json_decref(chunk);
        return 1;
    }
    bool token = false;
    json_t *choices = json_object_get(chunk, "choices");
    size_t i;
    json_t *choice;
    json_array_foreach(choices, i, choice) {
        json_t *delta = json_object_get(choice, "delta");
        if (has_text(choice, "text") ||
            (json_is_object(delta) && (has_text(delta, "content") || has_text(delta, "reasoning_content") ||
                                       has_text(delta, "reasoning") ||
                                       json_array_size(json_object_get(delta, "tool_calls")) > 0)))
            token = true;
        json_t *finish = json_object_get(choice, "finish_reason");
        if (json_is_string(finish)) {
            t->saw_finish = true;
            snprintf(t->res->finish_reason, sizeof t->res->finish_reason, "%s", json_string_value(finish));
        }
    }
    json_t *usage = json_object_get(chunk, "usage");
    json_t *ct = json_is_object(usage) ? json_object_get(usage, "completion_tokens") : NULL;
    if (json_is_integer(ct) && json_integer_value(ct) >= 0) t->usage_tokens = json_integer_value(ct);
    json_decref(chunk);
    if (token) {
        double now = now_s();
        note_sent(t);
        if (t->first_token_s == 0) t->first_token_s = now;
        t->last_token_s = now;
        t->content_chunks++;
        t->res->got_first_token = true;
    }
    t->delivered = true;
    if (t->fn && t->fn(ev->data, ev->data_len, t->user_data) != 0) {
        t->fault = ROUTE_FAULT_CANCELLED;
        set_message(u, t->res, "upstream: stopped by the chunk callback");
        return 1;
    }
    return 0;
}

static size_t on_body(char *bytes, size_t size, size_t nmemb, void *userdata) {
    transfer *t = userdata;
    size_t n = size * nmemb;
    if (!t->checked_head) {
        t->checked_head = true;
        curl_easy_getinfo(t->slot->easy, CURLINFO_RESPONSE_CODE, &t->status);
        char *ctype = NULL;
        curl_easy_getinfo(t->slot->easy, CURLINFO_CONTENT_TYPE, &ctype);
        t->is_sse = ctype && strncasecmp(ctype, "text/event-stream", 17) == 0;
        note_sent(t);
        if (t->streaming_post && t->status == 200 && !t->is_sse) {
            t->fault = ROUTE_FAULT_MALFORMED;
            set_message(t->u, t->res, "upstream: a 200 answer of type %.60s, not text/event-stream",
                        ctype ? ctype : "(none)");
            return 0;
        }
    }
    if (!t->streaming_post || t->status != 200) {
        /* an error body (or the probe's), kept up to ERROR_BODY_MAX for its message */
        size_t keep = t->body_len < ERROR_BODY_MAX ? ERROR_BODY_MAX - t->body_len : 0;
        if (keep > n) keep = n;
        if (keep && t->streaming_post) {
            char *p = realloc(t->body, t->body_len + keep + 1);
            if (!p) return 0;
            t->body = p;
            memcpy(t->body + t->body_len, bytes, keep);
            t->body_len += keep;
            t->body[t->body_len] = 0;
        }
        return n;
    }
    kite_error e = {0};
    kite_status st = route_sse_feed(t->sse, bytes, n, on_event, t, &e);
    if (st == KITE_OK) return n;
    if (t->fault == ROUTE_OK) {
        t->fault = ROUTE_FAULT_MALFORMED;
        set_message(t->u, t->res, "upstream: %s", e.msg);
    }
    return 0;
}

typedef struct transfer_limits {
    int64_t first_token_ms;           /* from sent; <= 0 = none */
    int64_t deadline_ms;              /* monotonic, the total deadline */
} transfer_limits;

/* Runs the slot's configured easy handle to completion (or a deadline, cancel, a callback's stop).
 * Returns the fault; the caller classifies a ROUTE_OK further by status and stream state. *curl_code
 * gets curl's result. */
static route_fault run_transfer(transfer *t, const transfer_limits *lim, const atomic_bool *cancel,
                                CURLcode *curl_code, char *errbuf) {
    CURLM *m = t->slot->multi;
    CURL *h = t->slot->easy;
    *curl_code = CURLE_OK;
    if (curl_multi_add_handle(m, h) != CURLM_OK) {
        *curl_code = CURLE_FAILED_INIT;
        return ROUTE_FAULT_CONNECT;
    }
    route_fault fault = ROUTE_OK;
    bool finished = false;
    for (;;) {
        int running = 0;
        if (curl_multi_perform(m, &running) != CURLM_OK) {
            *curl_code = CURLE_FAILED_INIT;
            fault = ROUTE_FAULT_CONNECT;
            break;
        }
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(m, &left)) != NULL)
            if (msg->msg == CURLMSG_DONE && msg->easy_handle == h) {
                *curl_code = msg->data.result;
                finished = true;
            }
        if (finished || !running) break;
        if (t->fault != ROUTE_OK) break; /* a callback stopped it (curl will report a write error) */
        if (cancelled(cancel)) {
            fault = ROUTE_FAULT_CANCELLED;
            snprintf(errbuf, CURL_ERROR_SIZE, "cancelled");
            break;
        }
        int64_t now = now_ms();
        note_sent(t);
        if (t->done && now - t->done_at_ms > DONE_GRACE_MS) break; /* [DONE] came; the rest is of no use */
        if (lim->first_token_ms > 0 && t->sent_s > 0 && t->first_token_s == 0 && t->streaming_post &&
            (now_s() - t->sent_s) * 1000.0 > (double)lim->first_token_ms &&
            !(t->checked_head && t->status != 200)) {
            fault = ROUTE_FAULT_FIRST_TOKEN_TIMEOUT;
            snprintf(errbuf, CURL_ERROR_SIZE, "no first token within %lld ms", (long long)lim->first_token_ms);
            break;
        }
        if (now >= lim->deadline_ms) {
            fault = t->sent_s > 0 ? ROUTE_FAULT_TOTAL_TIMEOUT : ROUTE_FAULT_CONNECT_TIMEOUT;
            snprintf(errbuf, CURL_ERROR_SIZE, "timed out");
            break;
        }
        int64_t wait = lim->deadline_ms - now;
        curl_multi_poll(m, NULL, 0, (int)(wait < POLL_MS ? (wait > 0 ? wait : 1) : POLL_MS), NULL);
    }
    /* removing an unfinished transfer closes its connection; a finished one's stays in the cache */
    curl_multi_remove_handle(m, h);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, NULL); /* errbuf is the caller's stack: let curl forget it */
    return fault;
}

/* Sets the options every transfer shares. */
static void setup_common(route_upstream *u, CURL *h, transfer *t, char *errbuf, const char *url) {
    curl_easy_reset(h);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_VERBOSE, 0L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 1L);
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
#if LIBCURL_VERSION_NUM >= 0x075500
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
#else
    curl_easy_setopt(h, CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)u->timeout.connect_ms);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, t);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, t);
}

static bool is_connect_failure(CURLcode c) {
    return c == CURLE_COULDNT_CONNECT || c == CURLE_COULDNT_RESOLVE_HOST || c == CURLE_COULDNT_RESOLVE_PROXY ||
           c == CURLE_SSL_CONNECT_ERROR || c == CURLE_PEER_FAILED_VERIFICATION || c == CURLE_UNSUPPORTED_PROTOCOL ||
           c == CURLE_URL_MALFORMAT;
}

/* The OpenAI error JSON's error.message (or the start of a body that is not JSON), into res->message. */
static void message_from_body(route_upstream *u, transfer *t, const char *what) {
    const char *text = NULL;
    json_t *doc = t->body ? json_loadb(t->body, t->body_len, 0, NULL) : NULL;
    json_t *error = json_object_get(doc, "error");
    json_t *msg = json_is_object(error) ? json_object_get(error, "message") : error;
    if (json_is_string(msg)) text = json_string_value(msg);
    else if (!doc && t->body) text = t->body;
    set_message(u, t->res, "upstream: %s %ld: %.200s", what, t->status, text ? text : "(no message)");
    json_decref(doc);
}

/* Wipes and frees a header list holding the key. */
static void free_headers(struct curl_slist *headers) {
    for (struct curl_slist *s = headers; s; s = s->next) {
        volatile char *p = (volatile char *)s->data;
        while (*p) *p++ = 0;
    }
    curl_slist_free_all(headers);
}

static bool add_header(struct curl_slist **list, const char *header) {
    struct curl_slist *l = curl_slist_append(*list, header);
    if (!l) return false;
    *list = l;
    return true;
}

/* Authorization: Bearer KEY when the backend has a key (the probe needs it too: an OpenAI-compatible
 * server's /v1/models is behind the same key). The copy is wiped before it is freed. */
static bool add_auth_header(route_upstream *u, struct curl_slist **headers) {
    if (!u->b->api_key || !u->b->api_key[0]) return true;
    size_t klen = strlen(u->b->api_key);
    char *auth = malloc(klen + 32);
    if (!auth) return false;
    snprintf(auth, klen + 32, "Authorization: Bearer %s", u->b->api_key);
    bool ok = add_header(headers, auth);
    memset(auth, 0, klen + 32);
    free(auth);
    return ok;
}

/* One attempt of a streaming POST. */
static route_fault attempt_stream(route_upstream *u, const char *url, const char *body, size_t len,
                                  route_chunk_fn fn, void *user_data, const atomic_bool *cancel, int64_t deadline_ms,
                                  route_upstream_result *res, transfer *t) {
    char errbuf[CURL_ERROR_SIZE] = {0};
    memset(t, 0, sizeof *t);
    t->usage_tokens = -1;
    upstream_slot *slot = slot_acquire(u);
    if (!slot) {
        set_message(u, res, "upstream: out of memory");
        return ROUTE_FAULT_CONNECT;
    }
    *t = (transfer){.u = u, .slot = slot, .res = res, .fn = fn, .user_data = user_data, .streaming_post = true,
                    .retry_after_ms = -1, .usage_tokens = -1, .start_s = now_s()};
    t->sse = route_sse_new(SSE_EVENT_MAX);
    struct curl_slist *headers = NULL;
    bool headers_ok = t->sse != NULL && add_header(&headers, "Content-Type: application/json") &&
                      add_header(&headers, "Accept: text/event-stream") &&
                      add_header(&headers, "Expect:"); /* no wait for a 100 Continue */
    headers_ok = headers_ok && add_auth_header(u, &headers);
    if (!headers_ok) {
        free_headers(headers);
        route_sse_free(t->sse);
        slot_release(u, slot);
        set_message(u, res, "upstream: out of memory");
        return ROUTE_FAULT_CONNECT;
    }
    CURL *h = slot->easy;
    setup_common(u, h, t, errbuf, url);
    curl_easy_setopt(h, CURLOPT_POST, 1L);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    transfer_limits lim = {.first_token_ms = u->timeout.first_token_ms, .deadline_ms = deadline_ms};
    CURLcode code;
    route_fault fault = run_transfer(t, &lim, cancel, &code, errbuf);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &t->status);
    curl_off_t connect_us = 0;
    curl_easy_getinfo(h, CURLINFO_CONNECT_TIME_T, &connect_us);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, NULL);
    free_headers(headers);
    res->http_status = (int)t->status;
    if (t->status == 429 || t->status == 503) res->retry_after_ms = t->retry_after_ms;
    if (t->fault != ROUTE_OK) {
        fault = t->fault; /* message already set */
    } else if (fault != ROUTE_OK) {
        set_message(u, res, "upstream: %s: %s", route_fault_name(fault), errbuf);
    } else if (t->done || t->saw_finish) {
        fault = ROUTE_OK;
    } else if (code != CURLE_OK && code != CURLE_PARTIAL_FILE && code != CURLE_RECV_ERROR &&
               code != CURLE_GOT_NOTHING && code != CURLE_SEND_ERROR) {
        if (code == CURLE_OPERATION_TIMEDOUT && connect_us == 0) fault = ROUTE_FAULT_CONNECT_TIMEOUT;
        else if (code == CURLE_OPERATION_TIMEDOUT) fault = ROUTE_FAULT_TOTAL_TIMEOUT;
        else if (is_connect_failure(code)) fault = ROUTE_FAULT_CONNECT;
        else fault = ROUTE_FAULT_CUT;
        set_message(u, res, "upstream: %s: %s", route_fault_name(fault), errbuf[0] ? errbuf : curl_easy_strerror(code));
    } else if (t->status == 429) {
        fault = ROUTE_FAULT_RATE_LIMITED;
        message_from_body(u, t, "rate limited, status");
    } else if (t->status >= 500) {
        fault = ROUTE_FAULT_HTTP_5XX;
        message_from_body(u, t, "status");
    } else if (t->status != 200 && t->status != 0) {
        fault = t->status >= 400 ? ROUTE_FAULT_HTTP_4XX : ROUTE_FAULT_MALFORMED;
        message_from_body(u, t, "status");
    } else {
        fault = ROUTE_FAULT_CUT;
        set_message(u, res, "upstream: the stream ended without [DONE] or a finish_reason%s%s",
                    code != CURLE_OK ? ": " : "", code != CURLE_OK ? (errbuf[0] ? errbuf : curl_easy_strerror(code)) : "");
    }
    free(t->body);
    t->body = NULL;
    route_sse_free(t->sse);
    t->sse = NULL;
    if (fault == ROUTE_OK || fault == ROUTE_FAULT_HTTP_4XX || fault == ROUTE_FAULT_RATE_LIMITED ||
        fault == ROUTE_FAULT_HTTP_5XX)
        slot_release(u, slot); /* the connection is sound: keep it */
    else {
        /* a cut, timed-out or cancelled transfer's connection is gone or suspect: start afresh */
        slot_destroy(slot);
    }
    t->slot = NULL;
    return fault;
}

/* ---- health ------------------------------------------------------------------------------------- */

static void enter_cooldown_locked(route_upstream *u) {
    if (!u->in_cooldown) u->counters.cooldowns++;
    u->in_cooldown = true;
    u->cooldown_until_ms = now_ms() + u->cooldown_ms;
}

static void record_outcome(route_upstream *u, route_fault f) {
    pthread_mutex_lock(&u->mu);
    if (f == ROUTE_OK) {
        u->consecutive_failures = 0;
    } else if (f != ROUTE_FAULT_HTTP_4XX && f != ROUTE_FAULT_CANCELLED) {
        u->counters.failures++;
        u->consecutive_failures++;
        if (f == ROUTE_FAULT_CONNECT || u->consecutive_failures >= u->failures_to_cooldown) enter_cooldown_locked(u);
    } else if (f == ROUTE_FAULT_HTTP_4XX) {
        u->counters.failures++;
    }
    pthread_mutex_unlock(&u->mu);
}

static void observe_latency_locked(route_latency *l, double ttft_s, double s_per_token) {
    const double alpha = 0.2;
    if (l->n_observed == 0) {
        l->ewma_ttft_s = ttft_s;
        l->ewma_s_per_token = s_per_token;
    } else {
        l->ewma_ttft_s += alpha * (ttft_s - l->ewma_ttft_s);
        l->ewma_s_per_token += alpha * (s_per_token - l->ewma_s_per_token);
    }
    l->n_observed++;
}

/* ---- API ---------------------------------------------------------------------------------------- */

static char *join(const char *a, const char *b) {
    size_t na = strlen(a), nb = strlen(b);
    char *s = malloc(na + nb + 1);
    if (!s) return NULL;
    memcpy(s, a, na);
    memcpy(s + na, b, nb + 1);
    return s;
}

kite_status route_upstream_open(route_upstream **out, const route_backend *b, kite_error *e) {
    if (!out || !b) return kite_fail(e, KITE_ERR_INVALID_ARG, "route_upstream_open: out and b are required");
    *out = NULL;
    if (b->kind != ROUTE_BACKEND_REMOTE || !b->url || !b->url[0])
        return kite_fail(e, KITE_ERR_INVALID_ARG, "backend %s: not a remote backend with a url", b->name);
    if (strncmp(b->url, "http://", 7) != 0 && strncmp(b->url, "https://", 8) != 0)
        return kite_fail(e, KITE_ERR_INVALID_ARG, "backends.%s.url: must start with http:// or https://", b->name);
    pthread_once(&curl_once, init_curl_once);
    if (curl_init_status != CURLE_OK)
        return kite_fail(e, KITE_ERR_IO, "libcurl: global init failed: %s", curl_easy_strerror(curl_init_status));
    route_upstream *u = calloc(1, sizeof *u);
    if (!u) return kite_fail(e, KITE_ERR_NOMEM, "upstream: out of memory");
    u->b = b;
    size_t n = strlen(b->url);
    u->base_url = malloc(n + 1);
    if (u->base_url) {
        memcpy(u->base_url, b->url, n + 1);
        while (n > 0 && u->base_url[n - 1] == '/') u->base_url[--n] = 0; /* the base, without a trailing slash */
    }
    u->models_url = u->base_url ? join(u->base_url, "/models") : NULL;
    if (!u->models_url || pthread_mutex_init(&u->mu, NULL) != 0) {
        free(u->base_url);
        free(u->models_url);
        free(u);
        return kite_fail(e, KITE_ERR_NOMEM, "upstream: out of memory");
    }
    u->timeout.connect_ms = b->timeout.connect_ms > 0 ? b->timeout.connect_ms : 2000;
    u->timeout.first_token_ms = b->timeout.first_token_ms > 0 ? b->timeout.first_token_ms : 10000;
    u->timeout.total_ms = b->timeout.total_ms > 0 ? b->timeout.total_ms : 120000;
    u->max_retries = b->max_retries >= 0 ? b->max_retries : 2;
    u->retry_base_ms = b->retry_base_ms > 0 ? b->retry_base_ms : 200;
    u->failures_to_cooldown = b->failures_to_cooldown > 0 ? b->failures_to_cooldown : 3;
    u->cooldown_ms = b->cooldown_ms > 0 ? b->cooldown_ms : 30000;
    u->jitter_state = (uint64_t)now_ms() * 0x9E3779B97F4A7C15ull ^ (uint64_t)(uintptr_t)u;
    *out = u;
    return KITE_OK;
}

void route_upstream_free(route_upstream *u) {
    if (!u) return;
    while (u->idle) {
        upstream_slot *s = u->idle;
        u->idle = s->next;
        slot_destroy(s);
    }
    pthread_mutex_destroy(&u->mu);
    free(u->base_url);
    free(u->models_url);
    free(u);
}

/* A uniform draw in [0, 1) (splitmix64 under the mutex). */
static double jitter_draw(route_upstream *u) {
    pthread_mutex_lock(&u->mu);
    uint64_t z = (u->jitter_state += 0x9E3779B97F4A7C15ull);
    pthread_mutex_unlock(&u->mu);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

static bool retryable(route_fault f) {
    return f == ROUTE_FAULT_HTTP_5XX || f == ROUTE_FAULT_RATE_LIMITED || f == ROUTE_FAULT_CONNECT_TIMEOUT ||
           f == ROUTE_FAULT_CUT;
}

void route_upstream_stream(route_upstream *u, const char *path, const char *body, size_t len, route_chunk_fn fn,
                           void *user_data, const atomic_bool *cancel, route_upstream_result *res) {
    route_upstream_result scratch;
    if (!res) res = &scratch;
    memset(res, 0, sizeof *res);
    res->retry_after_ms = -1;
    if (!u || !path || !body) {
        res->fault = ROUTE_FAULT_MALFORMED;
        snprintf(res->message, sizeof res->message, "upstream: u, path and body are required");
        return;
    }
    double start = now_s();
    int64_t deadline = now_ms() + u->timeout.total_ms;
    pthread_mutex_lock(&u->mu);
    u->counters.requests++;
    pthread_mutex_unlock(&u->mu);
    char *url = join(u->base_url, path);
    if (!url) {
        res->fault = ROUTE_FAULT_CONNECT;
        set_message(u, res, "upstream: out of memory");
        return;
    }
    transfer t = {.usage_tokens = -1};
    route_fault fault = ROUTE_OK;
    for (int32_t k = 0;; k++) {
        res->retry_after_ms = -1;
        res->message[0] = 0;
        if (cancelled(cancel)) {
            fault = ROUTE_FAULT_CANCELLED;
            set_message(u, res, "upstream: cancelled before the request was sent");
            break;
        }
        fault = attempt_stream(u, url, body, len, fn, user_data, cancel, deadline, res, &t);
        pthread_mutex_lock(&u->mu);
        u->counters.faults[fault]++;
        pthread_mutex_unlock(&u->mu);
        if (fault == ROUTE_OK || t.delivered || !retryable(fault) || k >= u->max_retries) break;
        int64_t backoff = (int64_t)u->retry_base_ms << (k < 20 ? k : 20);
        int64_t wait = backoff / 2 + (int64_t)(jitter_draw(u) * (double)(backoff - backoff / 2));
        if (res->retry_after_ms > wait) wait = res->retry_after_ms; /* 429, or a 503 that gave one */
        if (now_ms() + wait >= deadline) {
            char was[sizeof res->message];
            snprintf(was, sizeof was, "%s", res->message);
            set_message(u, res, "%s (no retry: the wait of %lld ms passes the total timeout)", was, (long long)wait);
            break;
        }
        bool stop = false;
        for (int64_t until = now_ms() + wait; now_ms() < until;) {
            if (cancelled(cancel)) {
                stop = true;
                break;
            }
            int64_t left = until - now_ms();
            sleep_ms(left < POLL_MS ? left : POLL_MS);
        }
        if (stop) {
            fault = ROUTE_FAULT_CANCELLED;
            set_message(u, res, "upstream: cancelled while waiting to retry");
            break;
        }
        res->n_retries++;
        pthread_mutex_lock(&u->mu);
        u->counters.retries++;
        pthread_mutex_unlock(&u->mu);
    }
    free(url);
    double end = now_s();
    res->fault = fault;
    res->total_s = end - start;
    res->completion_tokens = t.usage_tokens >= 0 ? t.usage_tokens : t.content_chunks;
    if (t.first_token_s > 0 && t.sent_s > 0) res->ttft_s = t.first_token_s - t.sent_s;
    if (fault == ROUTE_OK) res->message[0] = 0;
    record_outcome(u, fault);
    if (fault == ROUTE_OK && t.first_token_s > 0 && t.sent_s > 0) {
        double per_token = t.content_chunks > 1 ? (t.last_token_s - t.first_token_s) / (double)(t.content_chunks - 1) : 0.0;
        pthread_mutex_lock(&u->mu);
        observe_latency_locked(&u->latency, res->ttft_s, per_token);
        pthread_mutex_unlock(&u->mu);
    }
}

kite_status route_upstream_probe(route_upstream *u, kite_error *e) {
    if (!u) return kite_fail(e, KITE_ERR_INVALID_ARG, "route_upstream_probe: u is required");
    route_upstream_result res = {.retry_after_ms = -1};
    char errbuf[CURL_ERROR_SIZE] = {0};
    kite_status st = KITE_OK;
    upstream_slot *slot = slot_acquire(u);
    if (!slot) return kite_fail(e, KITE_ERR_NOMEM, "upstream: out of memory");
    transfer t = {.u = u, .slot = slot, .res = &res, .retry_after_ms = -1, .start_s = now_s()};
    setup_common(u, slot->easy, &t, errbuf, u->models_url);
    curl_easy_setopt(slot->easy, CURLOPT_HTTPGET, 1L);
    struct curl_slist *headers = NULL;
    if (!add_auth_header(u, &headers)) {
        slot_release(u, slot);
        return kite_fail(e, KITE_ERR_NOMEM, "upstream: out of memory");
    }
    curl_easy_setopt(slot->easy, CURLOPT_HTTPHEADER, headers);
    /* the probe is cheap: it gets the connect timeout for connecting and as much again for the answer */
    transfer_limits lim = {.first_token_ms = 0, .deadline_ms = now_ms() + 2 * (int64_t)u->timeout.connect_ms};
    CURLcode code;
    route_fault fault = run_transfer(&t, &lim, NULL, &code, errbuf);
    long status = 0;
    curl_easy_getinfo(slot->easy, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_setopt(slot->easy, CURLOPT_HTTPHEADER, NULL);
    free_headers(headers);
    if (fault != ROUTE_OK)
        st = kite_fail(e, KITE_ERR_IO, "backend %s: health probe GET %s: %s", u->b->name, u->models_url,
                       fault == ROUTE_FAULT_CONNECT_TIMEOUT ? "connect timed out" : "no answer in time");
    else if (code != CURLE_OK)
        st = kite_fail(e, KITE_ERR_IO, "backend %s: health probe GET %s: %s", u->b->name, u->models_url,
                       errbuf[0] ? errbuf : curl_easy_strerror(code));
    else if (status != 200)
        st = kite_fail(e, KITE_ERR_IO, "backend %s: health probe GET %s: status %ld", u->b->name, u->models_url, status);
    if (st == KITE_OK) slot_release(u, slot);
    else slot_destroy(slot);
    pthread_mutex_lock(&u->mu);
    u->counters.probes++;
    if (st == KITE_OK) {
        u->in_cooldown = false;
        u->consecutive_failures = 0;
    } else {
        u->counters.probe_failures++;
        enter_cooldown_locked(u);
    }
    pthread_mutex_unlock(&u->mu);
    return st;
}

bool route_upstream_available(route_upstream *u) {
    if (!u) return false;
    pthread_mutex_lock(&u->mu);
    if (!u->in_cooldown) {
        pthread_mutex_unlock(&u->mu);
        return true;
    }
    if (u->probing || now_ms() < u->cooldown_until_ms) {
        pthread_mutex_unlock(&u->mu);
        return false;
    }
    u->probing = true;
    pthread_mutex_unlock(&u->mu);
    kite_error e = {0};
    bool up = route_upstream_probe(u, &e) == KITE_OK;
    pthread_mutex_lock(&u->mu);
    u->probing = false;
    pthread_mutex_unlock(&u->mu);
    return up;
}

void route_upstream_get_counters(route_upstream *u, route_upstream_counters *out) {
    if (!out) return;
    memset(out, 0, sizeof *out);
    if (!u) return;
    pthread_mutex_lock(&u->mu);
    *out = u->counters;
    out->in_cooldown = u->in_cooldown;
    pthread_mutex_unlock(&u->mu);
}

void route_upstream_get_latency(route_upstream *u, route_latency *out) {
    if (!out) return;
    memset(out, 0, sizeof *out);
    if (!u) return;
    pthread_mutex_lock(&u->mu);
    *out = u->latency;
    pthread_mutex_unlock(&u->mu);
}
