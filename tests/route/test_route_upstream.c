/* The upstream client against tests/route/fault_server.mjs run by node on loopback (a fake OpenAI
 * streaming upstream whose answer text the test chooses, and the same script as a fault-injecting proxy
 * in front of it): each fault class, retries (counted by the server's /__stats) for 500 and for 429 with
 * Retry-After (and the wait honoured), first-token, total and connect timeouts within a bound, cancel,
 * cooldown after failures and the probe bringing the backend back (one prober at a time), a refused
 * connection in cooldown at once, keep-alive (the server counts TCP connections), 4 concurrent threads,
 * and the API key reaching the server but never a message. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <curl/curl.h>
#include <jansson.h>

#include "route/route.h"

extern char **environ;

static const char KEY[] = "sk-test-SECRET-4242";
static const char TEXT[] = "The quick brown fox jumps over the lazy dog.";
static const char BODY[] = "{\"model\":\"big\",\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";

typedef struct server {
    pid_t pid;
    int port;
    int lifeline;                 /* the server's stdin: closing it ends the server */
} server;

static server fake, proxy;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_s(double s) {
    struct timespec ts = {.tv_sec = (time_t)s, .tv_nsec = (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

static int start_server(server *s, const char *upstream) {
    const char *node = getenv("KITE_NODE") ? getenv("KITE_NODE") : "node";
    const char *src = getenv("KITE_SOURCE_DIR") ? getenv("KITE_SOURCE_DIR") : ".";
    char script[4096];
    snprintf(script, sizeof script, "%s/tests/route/fault_server.mjs", src);
    int out[2], in[2];
    if (pipe(out) != 0 || pipe(in) != 0) return -1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_addclose(&fa, in[1]);
    posix_spawn_file_actions_addclose(&fa, out[0]);
    char *argv[12];
    int a = 0;
    argv[a++] = (char *)node;
    argv[a++] = script;
    argv[a++] = "--port";
    argv[a++] = "0";
    argv[a++] = "--lifeline";
    argv[a++] = "--text";
    argv[a++] = (char *)TEXT;
    if (upstream) {
        argv[a++] = "--upstream";
        argv[a++] = (char *)upstream;
    }
    argv[a] = NULL;
    int rc = posix_spawnp(&s->pid, node, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(in[0]);
    close(out[1]);
    if (rc != 0) {
        fprintf(stderr, "cannot start %s: %s\n", node, strerror(rc));
        return -1;
    }
    s->lifeline = in[1];
    char line[128];
    size_t n = 0;
    while (n + 1 < sizeof line) {
        ssize_t got = read(out[0], line + n, 1);
        if (got <= 0) break;
        if (line[n] == '\n') break;
        n++;
    }
    line[n] = 0;
    close(out[0]);
    if (sscanf(line, "listening %d", &s->port) != 1) {
        fprintf(stderr, "fault_server said '%s'\n", line);
        return -1;
    }
    return 0;
}

static void stop_server(server *s) {
    if (s->pid <= 0) return;
    close(s->lifeline);
    kill(s->pid, SIGTERM);
    waitpid(s->pid, NULL, 0);
    s->pid = 0;
}

/* ---- the control API through plain libcurl ---------------------------------------------------- */

static size_t grow(char *p, size_t size, size_t nmemb, void *user) {
    size_t n = size * nmemb;
    char **buf = user;
    size_t len = *buf ? strlen(*buf) : 0;
    char *b = realloc(*buf, len + n + 1);
    assert_non_null(b);
    memcpy(b + len, p, n);
    b[len + n] = 0;
    *buf = b;
    return n;
}

static json_t *control(const server *s, const char *path, const char *post_body) {
    char url[256];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", s->port, path);
    CURL *h = curl_easy_init();
    char *answer = NULL;
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, grow);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &answer);
    if (post_body) curl_easy_setopt(h, CURLOPT_POSTFIELDS, post_body);
    assert_int_equal(curl_easy_perform(h), CURLE_OK);
    curl_easy_cleanup(h);
    json_t *j = json_loads(answer, 0, NULL);
    free(answer);
    assert_non_null(j);
    return j;
}

static void set_fault(const server *s, const char *mode, int count) {
    char body[256];
    snprintf(body, sizeof body, "{\"mode\":\"%s\",\"count\":%d}", mode, count);
    json_decref(control(s, "/__fault", body));
}

static void reset_server(const server *s) { json_decref(control(s, "/__reset", "{}")); }

static json_int_t stat_requests(const server *s, const char *path) {
    json_t *j = control(s, "/__stats", NULL);
    json_int_t n = json_integer_value(json_object_get(json_object_get(j, "requests"), path));
    json_decref(j);
    return n;
}

static json_int_t stat_connections(const server *s) {
    json_t *j = control(s, "/__stats", NULL);
    json_int_t n = json_integer_value(json_object_get(j, "connections"));
    json_decref(j);
    return n;
}

/* ---- the client under test -------------------------------------------------------------------- */

static route_backend backend_for(int port) {
    static char urls[8][64];
    static int next;
    char *url = urls[next++ % 8];
    snprintf(url, 64, "http://127.0.0.1:%d/v1", port);
    return (route_backend){
        .name = "cloud", .kind = ROUTE_BACKEND_REMOTE, .url = url, .remote_model = "big",
        .api_key = (char *)KEY, .timeout = {.connect_ms = 300, .first_token_ms = 400, .total_ms = 4000},
        .max_retries = 2, .retry_base_ms = 40, .failures_to_cooldown = 2, .cooldown_ms = 300};
}

static route_upstream *open_upstream(const route_backend *b) {
    route_upstream *u = NULL;
    kite_error e = {0};
    assert_int_equal(route_upstream_open(&u, b, &e), KITE_OK);
    return u;
}

typedef struct collected {
    char text[1024];
    int chunks;
    int stop_after;               /* the callback returns 1 after this many chunks (0 = never) */
} collected;

static int on_chunk(const char *json, size_t len, void *user_data) {
    collected *c = user_data;
    json_error_t err;
    json_t *j = json_loadb(json, len, 0, &err);
    assert_non_null(j);
    json_t *choice = json_array_get(json_object_get(j, "choices"), 0);
    json_t *content = json_object_get(json_object_get(choice, "delta"), "content");
    if (!content) content = json_object_get(choice, "text");
    if (json_is_string(content)) strncat(c->text, json_string_value(content), sizeof c->text - strlen(c->text) - 1);
    json_decref(j);
    c->chunks++;
    return c->stop_after && c->chunks >= c->stop_after;
}

static route_upstream_result stream(route_upstream *u, collected *c, const atomic_bool *cancel) {
    route_upstream_result res;
    route_upstream_stream(u, "/chat/completions", BODY, strlen(BODY), on_chunk, c, cancel, &res);
    assert_null(strstr(res.message, KEY));
    return res;
}

static void test_ok_stream(void **state) {
    (void)state;
    reset_server(&fake);
    route_backend b = backend_for(fake.port);
    route_upstream *u = open_upstream(&b);
    collected c = {0};
    route_upstream_result res = stream(u, &c, NULL);
    assert_int_equal(res.fault, ROUTE_OK);
    assert_string_equal(c.text, TEXT);
    assert_string_equal(res.finish_reason, "stop");
    assert_true(res.got_first_token);
    assert_int_equal(res.http_status, 200);
    assert_int_equal(res.completion_tokens, 9); /* the nine words, one chunk each */
    assert_int_equal(res.n_retries, 0);
    assert_true(res.ttft_s > 0 && res.ttft_s < res.total_s);
    assert_string_equal(res.message, "");
    /* the key went in the Authorization header */
    json_t *st = control(&fake, "/__stats", NULL);
    json_t *auth = json_object_get(st, "authorization");
    assert_int_equal(json_array_size(auth), 1);
    char want[64];
    snprintf(want, sizeof want, "Bearer %s", KEY);
    assert_string_equal(json_string_value(json_array_get(auth, 0)), want);
    json_decref(st);
    /* the legacy completions endpoint: choices[].text */
    collected c2 = {0};
    const char *legacy = "{\"stream\":true,\"prompt\":\"x\"}";
    route_upstream_stream(u, "/completions", legacy, strlen(legacy), on_chunk, &c2, NULL, &res);
    assert_int_equal(res.fault, ROUTE_OK);
    assert_string_equal(c2.text, TEXT);
    route_latency lat;
    route_upstream_get_latency(u, &lat);
    assert_int_equal(lat.n_observed, 2);
    assert_true(lat.ewma_ttft_s > 0 && lat.ewma_ttft_s < 1.0);
    route_upstream_counters k;
    route_upstream_get_counters(u, &k);
    assert_int_equal(k.requests, 2);
    assert_int_equal(k.failures, 0);
    assert_int_equal(k.faults[ROUTE_OK], 2);
    assert_false(k.in_cooldown);
    route_upstream_free(u);
}

static void test_keep_alive(void **state) {
    (void)state;
    route_backend b = backend_for(fake.port);
    route_upstream *u = open_upstream(&b);
    reset_server(&fake); /* the reset's own connection is counted: start from what it left */
    json_int_t before = stat_connections(&fake);
    for (int i = 0; i < 5; i++) {
        collected c = {0};
        assert_int_equal(stream(u, &c, NULL).fault, ROUTE_OK);
    }
    json_int_t after = stat_connections(&fake);
    assert_int_equal(stat_requests(&fake, "/v1/chat/completions"), 5);
    /* one connection for the five requests (each control call above and below is a fresh connection) */
    assert_int_equal(after - before - 1, 1);
    route_upstream_free(u);
}

static void test_5xx_retries(void **state) {
    (void)state;
    reset_server(&fake);
    route_backend b = backend_for(fake.port);
    b.failures_to_cooldown = 10;
    route_upstream *u = open_upstream(&b);
    set_fault(&fake, "status=500", -1);
    collected c = {0};
    route_upstream_result res = stream(u, &c, NULL);
    assert_int_equal(res.fault, ROUTE_FAULT_HTTP_5XX);
    assert_int_equal(res.http_status, 500);
    assert_int_equal(res.n_retries, 2);
    assert_int_equal(c.chunks, 0);
    assert_non_null(strstr(res.message, "fault injected: status 500"));
    assert_int_equal(stat_requests(&fake, "/v1/chat/completions"), 3);
    /* one 500, then the stream: answered on the retry */
    set_fault(&fake, "status=503", 1);
    res = stream(u, &c, NULL);
    assert_int_equal(res.fault, ROUTE_OK);
    assert_int_equal(res.n_retries, 1);
    assert_string_equal(c.text, TEXT);
    assert_int_equal(stat_requests(&fake, "/v1/chat/completions"), 5);
    route_upstream_counters k;
    route_upstream_get_counters(u, &k);
    assert_int_equal(k.requests, 2);
    assert_int_equal(k.failures, 1);
    assert_int_equal(k.retries, 3);
    assert_int_equal(k.faults[ROUTE_FAULT_HTTP_5XX], 4); /* attempts */
    assert_int_equal(k.faults[ROUTE_OK], 1);
    route_upstream_free(u);
}

static void test_rate_limited(void **state) {
    (void)state;
    reset_server(&fake);
    route_backend b = backend_for(fake.port);
    b.failures_to_cooldown = 10;
    route_upstream *u = open_upstream(&b);
    /* Retry-After: 1 is waited (the backoff alone would be 20-40 ms) */
    set_fault(&fake, "status=429,retry-after=1", 1);
    collected c = {0};
    double t0 = now_s();
    route_upstream_result res = stream(u, &c, NULL);
    double took = now_s() - t0;
    assert_int_equal(res.fault, ROUTE_OK);
    assert_int_equal(res.n_retries, 1);
    assert_string_equal(c.text, TEXT);
    assert_true(took >= 1.0 && took < 2.0);
    /* a Retry-After past the total timeout: given up at once, RATE_LIMITED with its value */
    set_fault(&fake, "status=429,retry-after=30", 1);
    t0 = now_s();
    res = stream(u, &c, NULL);
    took = now_s() - t0;
    assert_int_equal(res.fault, ROUTE_FAULT_RATE_LIMITED);
    assert_int_equal(res.retry_after_ms, 30000);
    assert_int_equal(res.n_retries, 0);
    assert_true(took < 0.5);
    assert_int_equal(stat_requests(&fake, "/v1/chat/completions"), 3);
    /* the same as an HTTP-date (one-second resolution) */
    set_fault(&fake, "status=429,retry-after-date=30", 1);
    res = stream(u, &c, NULL);
    assert_int_equal(res.fault, ROUTE_FAULT_RATE_LIMITED);
    assert_true(res.retry_after_ms >= 28000 && res.retry_after_ms <= 31000);
    route_upstream_free(u);
}

static void test_4xx_and_key(void **state) {
    (void)state;
    reset_server(&fake);
    route_backend b = backend_for(fake.port);
    route_upstream *u = open_upstream(&b);
    set_fault(&fake, "status=400", 1);
    collected c = {0};
    route_upstream_result res = stream(u, &c, NULL);
    assert_int_equal(res.fault, ROUTE_FAULT_HTTP_4XX);
    assert_int_equal(res.http_status, 400);
    assert_int_equal(res.n_retries, 0);
    assert_non_null(strstr(res.message, "fault injected: status 400"));
    assert_int_equal(stat_requests(&fake, "/v1/chat/completions"), 1);
    /* an upstream that quotes the key back: the message keeps the rest, not the key */
    set_fault(&fake, "status=401,echo-auth", 1);
    res = stream(u, &c, NULL); /* stream() asserts the key is absent */
    assert_int_equal(res.fault, ROUTE_FAULT_HTTP_4XX);
    assert_non_null(strstr(res.message, "Incorrect API key provided: Bearer [key]"));
    route_upstream_counters k;
    route_upstream_get_counters(u, &k);
    assert_false(k.in_cooldown); /* a bad request says nothing about the backend's health */
    route_upstream_free(u);
}

static void test_malformed(void **state) {
    (void)state;
    reset_server(&fake);
    route_backend b = backend_for(fake.port);
    b.failures_to_cooldown = 10;
    route_upstream *u = open_upstream(&b);
    static const char *modes[] = {"malformed-after=2", "not-sse", "error-event-after=1"};
    static const int delivered[] = {2, 0, 1};
    for (int i = 0; i < 3; i++) {
        set_fault(&fake, modes[i], 1);
        collected c = {0};
        route_upstream_result res = stream(u, &c, NULL);
        assert_int_equal(res.fault, ROUTE_FAULT_MALFORMED);
        assert_int_equal(c.chunks, delivered[i]);
        assert_int_equal(res.n_retries, 0);
    }
    assert_int_equal(stat_requests(&fake, "/v1/chat/completions"), 3);
    set_fault(&fake, "error-event-after=1", 1);
    collected c = {0};
    route_upstream_result res = stream(u, &c, NULL);
    assert_non_null(strstr(res.message, "fault injected: error event"));
    route_upstream_free(u);
}

static void test_cut(void **state) {
    (void)state;
    reset_server(&fake);
    route_backend b = backend_for(fake.port);
    b.failures_to_cooldown = 10;
    route_upstream *u = open_upstream(&b);
    /* cut after 3 events: the role chunk and two words reached the caller, so no retry */
    set_fault(&fake, "cut-after=3", 1);
    collected c = {0};
    route_upstream_result res = stream(u, &c, NULL);
    assert_int_equal(res.fault, ROUTE_FAULT_CUT);
    assert_int_equal(c.chunks, 3);
    assert_string_equal(c.text, "The quick");
    assert_true(res.got_first_token);
    assert_int_equal(res.n_retries, 0);
    /* cut before any event: retried, and every try cut */
    set_fault(&fake, "cut-after=0", -1);
    collected c2 = {0};
    res = stream(u, &c2, NULL);
    assert_int_equal(res.fault, ROUTE_FAULT_CUT);
    assert_int_equal(res.n_retries, 2);
    assert_int_equal(c2.chunks, 0);
    /* a clean end with neither [DONE] nor a finish_reason */
    set_fault(&fake, "no-done", -1);
    collected c3 = {0};
    res = stream(u, &c3, NULL);
    assert_int_equal(res.fault, ROUTE_FAULT_CUT);
    assert_string_equal(c3.text, TEXT);
    /* closed before the headers, once: the retry answers */
    set_fault(&fake, "close-before-headers", 1);
    collected c4 = {0};
    res = stream(u, &c4, NULL);
    assert_int_equal(res.fault, ROUTE_OK);
    assert_int_equal(res.n_retries, 1);
    assert_string_equal(c4.text, TEXT);
    assert_int_equal(stat_requests(&fake, "/v1/chat/completions"), 1 + 3 + 1 + 2);
    route_upstream_free(u);
}

static void test_timeouts(void **state) {
    (void)state;
    reset_server(&fake);
    route_backend b = backend_for(fake.port);
    b.failures_to_cooldown = 10;
    route_upstream *u = open_upstream(&b);
    /* headers then silence, and silence before the headers: the first-token timeout (400 ms) */
    static const char *modes[] = {"hang", "hang-before-headers"};
    for (int i = 0; i < 2; i++) {
        set_fault(&fake, modes[i], 1);
        collected c = {0};
        double t0 = now_s();
        route_upstream_result res = stream(u, &c, NULL);
        double took = now_s() - t0;
        assert_int_equal(res.fault, ROUTE_FAULT_FIRST_TOKEN_TIMEOUT);
        assert_int_equal(res.n_retries, 0);
        assert_true(took >= 0.4 && took < 0.7);
    }
    route_upstream_free(u);
    /* 150 ms per event, 800 ms in all: the total timeout, after the first tokens */
    b.timeout.total_ms = 800;
    u = open_upstream(&b);
    set_fault(&fake, "slow=150", 1);
    collected c = {0};
    double t0 = now_s();
    route_upstream_result res = stream(u, &c, NULL);
    double took = now_s() - t0;
    assert_int_equal(res.fault, ROUTE_FAULT_TOTAL_TIMEOUT);
    assert_true(res.got_first_token);
    assert_true(c.chunks >= 3 && c.chunks <= 6);
    if (!(took >= 0.79 && took < 1.1)) fprintf(stderr, "took %.3f s, %d chunks, %s\n", took, c.chunks, res.message);
    assert_true(took >= 0.79 && took < 1.1);
    route_upstream_free(u);
}

static void test_connect_timeout(void **state) {
    (void)state;
    /* a listener whose accept queue is full: the kernel drops further SYNs, so connect() just waits */
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(lfd, (struct sockaddr *)&addr, sizeof addr), 0);
    assert_int_equal(listen(lfd, 0), 0);
    socklen_t alen = sizeof addr;
    getsockname(lfd, (struct sockaddr *)&addr, &alen);
    int fillers[4];
    for (int i = 0; i < 4; i++) {
        fillers[i] = socket(AF_INET, SOCK_STREAM, 0);
        fcntl(fillers[i], F_SETFL, O_NONBLOCK);
        connect(fillers[i], (struct sockaddr *)&addr, sizeof addr);
    }
    sleep_s(0.05);
    route_backend b = backend_for(ntohs(addr.sin_port));
    b.max_retries = 0;
    route_upstream *u = open_upstream(&b);
    collected c = {0};
    double t0 = now_s();
    route_upstream_result res = stream(u, &c, NULL);
    double took = now_s() - t0;
    if (!(took >= 0.29 && took < 0.6)) fprintf(stderr, "took %.3f s, %s\n", took, res.message);
    assert_int_equal(res.fault, ROUTE_FAULT_CONNECT_TIMEOUT);
    assert_true(took >= 0.29 && took < 0.6);
    route_upstream_free(u);
    for (int i = 0; i < 4; i++) close(fillers[i]);
    close(lfd);
}

static void test_refused(void **state) {
    (void)state;
    /* a port nobody listens on: bound, then closed */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(fd, (struct sockaddr *)&addr, sizeof addr), 0);
    socklen_t alen = sizeof addr;
    getsockname(fd, (struct sockaddr *)&addr, &alen);
    close(fd);
    route_backend b = backend_for(ntohs(addr.sin_port));
    b.failures_to_cooldown = 5;
    b.cooldown_ms = 60000;
    route_upstream *u = open_upstream(&b);
    assert_true(route_upstream_available(u));
    collected c = {0};
    double t0 = now_s();
    route_upstream_result res = stream(u, &c, NULL);
    assert_int_equal(res.fault, ROUTE_FAULT_CONNECT);
    assert_int_equal(res.n_retries, 0);
    assert_true(now_s() - t0 < 0.2);
    /* in cooldown at once, after one failure of the five it would otherwise take */
    route_upstream_counters k;
    route_upstream_get_counters(u, &k);
    assert_true(k.in_cooldown);
    assert_int_equal(k.cooldowns, 1);
    assert_int_equal(k.faults[ROUTE_FAULT_CONNECT], 1);
    assert_false(route_upstream_available(u));
    /* the probe names what failed */
    kite_error e = {0};
    assert_int_equal(route_upstream_probe(u, &e), KITE_ERR_IO);
    assert_non_null(strstr(e.msg, "/v1/models"));
    route_upstream_free(u);
}

static void *cancel_later(void *arg) {
    sleep_s(0.5);
    atomic_store((atomic_bool *)arg, true);
    return NULL;
}

static void test_cancel(void **state) {
    (void)state;
    reset_server(&fake);
    route_backend b = backend_for(fake.port);
    b.timeout.first_token_ms = 2000;
    route_upstream *u = open_upstream(&b);
    /* *cancel set from another thread at 500 ms, while the server is silent for 300 ms between events */
    set_fault(&fake, "slow=300", 1);
    atomic_bool cancel = false;
    collected c = {0};
    pthread_t th;
    double t0 = now_s();
    assert_int_equal(pthread_create(&th, NULL, cancel_later, &cancel), 0);
    route_upstream_result res = stream(u, &c, &cancel);
    double took = now_s() - t0;
    pthread_join(th, NULL);
    assert_int_equal(res.fault, ROUTE_FAULT_CANCELLED);
    assert_true(took >= 0.5 && took < 0.5 + 0.12); /* polled every 50 ms */
    assert_int_equal(c.chunks, 1);
    /* cancelled before the headers arrive (the first-token timeout is 2 s) */
    set_fault(&fake, "hang-before-headers", 1);
    atomic_store(&cancel, false);
    t0 = now_s();
    assert_int_equal(pthread_create(&th, NULL, cancel_later, &cancel), 0);
    res = stream(u, &c, &cancel);
    took = now_s() - t0;
    pthread_join(th, NULL);
    assert_int_equal(res.fault, ROUTE_FAULT_CANCELLED);
    assert_true(took >= 0.5 && took < 0.5 + 0.12);
    /* already cancelled: nothing is sent */
    json_int_t sent = stat_requests(&fake, "/v1/chat/completions");
    res = stream(u, &c, &cancel);
    assert_int_equal(res.fault, ROUTE_FAULT_CANCELLED);
    assert_int_equal(stat_requests(&fake, "/v1/chat/completions"), sent);
    /* the chunk callback stops it */
    collected c2 = {.stop_after = 2};
    res = stream(u, &c2, NULL);
    assert_int_equal(res.fault, ROUTE_FAULT_CANCELLED);
    assert_int_equal(c2.chunks, 2);
    route_upstream_counters k;
    route_upstream_get_counters(u, &k);
    assert_int_equal(k.failures, 0); /* a cancel is not the backend's failure */
    route_upstream_free(u);
}

typedef struct worker {
    route_upstream *u;
    int ok;
} worker;

static void *run_worker(void *arg) {
    worker *w = arg;
    for (int i = 0; i < 3; i++) {
        collected c = {0};
        route_upstream_result res;
        route_upstream_stream(w->u, "/chat/completions", BODY, strlen(BODY), on_chunk, &c, NULL, &res);
        if (res.fault == ROUTE_OK && strcmp(c.text, TEXT) == 0) w->ok++;
    }
    return NULL;
}

static void test_concurrent(void **state) {
    (void)state;
    route_backend b = backend_for(fake.port);
    route_upstream *u = open_upstream(&b);
    reset_server(&fake);
    set_fault(&fake, "slow=5", -1); /* so the four overlap */
    json_int_t before = stat_connections(&fake);
    worker w[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (worker){.u = u};
        assert_int_equal(pthread_create(&th[i], NULL, run_worker, &w[i]), 0);
    }
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    set_fault(&fake, "ok", 0);
    for (int i = 0; i < 4; i++) assert_int_equal(w[i].ok, 3);
    assert_int_equal(stat_requests(&fake, "/v1/chat/completions"), 12);
    /* at most one connection per concurrent stream (the three control calls since are one each) */
    assert_true(stat_connections(&fake) - before - 3 <= 4);
    route_upstream_counters k;
    route_upstream_get_counters(u, &k);
    assert_int_equal(k.requests, 12);
    assert_int_equal(k.faults[ROUTE_OK], 12);
    route_latency lat;
    route_upstream_get_latency(u, &lat);
    assert_int_equal(lat.n_observed, 12);
    assert_true(lat.ewma_s_per_token > 0.004 && lat.ewma_s_per_token < 0.1); /* about 5 ms per event */
    route_upstream_free(u);
}

/* The script as a proxy in front of the fake: the stream passes through unchanged, faults come from its
 * own control endpoint, and the upstream sees the forwarded requests (with the key). */
static void test_proxy(void **state) {
    (void)state;
    char origin[64];
    snprintf(origin, sizeof origin, "http://127.0.0.1:%d", fake.port);
    assert_int_equal(start_server(&proxy, origin), 0);
    reset_server(&fake);
    route_backend b = backend_for(proxy.port);
    b.failures_to_cooldown = 10;
    route_upstream *u = open_upstream(&b);
    collected c = {0};
    route_upstream_result res = stream(u, &c, NULL);
    assert_int_equal(res.fault, ROUTE_OK);
    assert_string_equal(c.text, TEXT);
    set_fault(&proxy, "cut-after=4", 1);
    collected c2 = {0};
    res = stream(u, &c2, NULL);
    assert_int_equal(res.fault, ROUTE_FAULT_CUT);
    assert_string_equal(c2.text, "The quick brown");
    set_fault(&proxy, "status=502", 1);
    res = stream(u, &c2, NULL);
    assert_int_equal(res.fault, ROUTE_OK);
    assert_int_equal(res.n_retries, 1);
    assert_int_equal(stat_requests(&proxy, "/v1/chat/completions"), 4);
    assert_int_equal(stat_requests(&fake, "/v1/chat/completions"), 3); /* the 502 never went upstream */
    json_t *st = control(&fake, "/__stats", NULL);
    assert_int_equal(json_array_size(json_object_get(st, "authorization")), 1);
    json_decref(st);
    kite_error e = {0};
    assert_int_equal(route_upstream_probe(u, &e), KITE_OK);
    assert_int_equal(stat_requests(&fake, "/v1/models"), 1);
    route_upstream_free(u);
    stop_server(&proxy);
}

typedef struct prober {
    route_upstream *u;
    bool available;
    double took;
} prober;

static void *probe_worker(void *arg) {
    prober *p = arg;
    double t0 = now_s();
    p->available = route_upstream_available(p->u);
    p->took = now_s() - t0;
    return NULL;
}

static void test_cooldown_and_probe(void **state) {
    (void)state;
    reset_server(&fake);
    route_backend b = backend_for(fake.port);
    b.max_retries = 0;
    route_upstream *u = open_upstream(&b);
    set_fault(&fake, "status=500", 2);
    collected c = {0};
    assert_int_equal(stream(u, &c, NULL).fault, ROUTE_FAULT_HTTP_5XX);
    assert_true(route_upstream_available(u)); /* one failure of two */
    assert_int_equal(stream(u, &c, NULL).fault, ROUTE_FAULT_HTTP_5XX);
    assert_false(route_upstream_available(u)); /* in cooldown, no probe yet */
    assert_int_equal(stat_requests(&fake, "/v1/models"), 0);
    /* after the cooldown, a probe that fails: another cooldown */
    set_fault(&fake, "probe-down", 1);
    sleep_s(0.35);
    assert_false(route_upstream_available(u));
    assert_int_equal(stat_requests(&fake, "/v1/models"), 1);
    assert_false(route_upstream_available(u));
    assert_int_equal(stat_requests(&fake, "/v1/models"), 1);
    /* after it, a probe that answers: back */
    sleep_s(0.35);
    assert_true(route_upstream_available(u));
    assert_int_equal(stat_requests(&fake, "/v1/models"), 2);
    assert_true(route_upstream_available(u));
    assert_int_equal(stat_requests(&fake, "/v1/models"), 2);
    route_upstream_counters k;
    route_upstream_get_counters(u, &k);
    assert_int_equal(k.cooldowns, 1); /* the failed probe prolonged the same cooldown */
    assert_int_equal(k.probes, 2);
    assert_int_equal(k.probe_failures, 1);
    assert_false(k.in_cooldown);
    assert_int_equal(stream(u, &c, NULL).fault, ROUTE_OK);
    /* in cooldown again; when it ends, four threads ask at once while the probe hangs: one probes (for its
       600 ms limit, twice the connect timeout), the others hear "unavailable" at once */
    set_fault(&fake, "status=500", 2);
    assert_int_equal(stream(u, &c, NULL).fault, ROUTE_FAULT_HTTP_5XX);
    assert_int_equal(stream(u, &c, NULL).fault, ROUTE_FAULT_HTTP_5XX);
    sleep_s(0.35);
    set_fault(&fake, "probe-hang", 1);
    prober p[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        p[i] = (prober){.u = u};
        assert_int_equal(pthread_create(&th[i], NULL, probe_worker, &p[i]), 0);
    }
    int slow = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_false(p[i].available);
        if (p[i].took > 0.5) slow++;
        else assert_true(p[i].took < 0.1);
    }
    assert_int_equal(slow, 1);
    assert_int_equal(stat_requests(&fake, "/v1/models"), 3);
    route_upstream_free(u);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ok_stream),   cmocka_unit_test(test_keep_alive), cmocka_unit_test(test_5xx_retries),
        cmocka_unit_test(test_rate_limited), cmocka_unit_test(test_4xx_and_key), cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_cut),          cmocka_unit_test(test_timeouts),  cmocka_unit_test(test_connect_timeout),
        cmocka_unit_test(test_refused),      cmocka_unit_test(test_cancel),    cmocka_unit_test(test_cooldown_and_probe),
        cmocka_unit_test(test_concurrent),   cmocka_unit_test(test_proxy),
    };
    signal(SIGPIPE, SIG_IGN);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    if (start_server(&fake, NULL) != 0) return 1;
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    stop_server(&fake);
    stop_server(&proxy);
    curl_global_cleanup();
    return failed;
}
