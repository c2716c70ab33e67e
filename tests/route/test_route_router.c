/* kite_router on the real stories260K model: opening (the local model timed, an unreachable remote a
 * warning naming its field or, with require_reachable, an error), the backends' states, a request body's
 * routing facts (prompt tokens against direct tokenization, with and without a chat template), explain,
 * and calibrate, whose scores are checked against an independent greedy walk over kite_eval's logits with
 * a log-softmax in double and numpy's linear quantile written out here. No API key reaches a log line or
 * an error. */
#include <jansson.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "route/route.h"
#include "test_util.h"

#define SECRET "sk-router-test-SECRET-31337"
#define MODEL "models/tinystories-tok512/stories260K.gguf"

static char g_dir[64];
static char g_logs[8192];

static void capture_log(kite_log_level level, const char *message, void *user_data) {
    (void)level, (void)user_data;
    size_t at = strlen(g_logs);
    snprintf(g_logs + at, sizeof g_logs - at, "%s\n", message);
}

/* Writes dir/name with the config text (MODEL_PATH replaced by the model's absolute path). */
static const char *write_config(const char *name, const char *text) {
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    const char *mark = strstr(text, "MODEL_PATH");
    if (mark) {
        fwrite(text, 1, (size_t)(mark - text), f);
        fputs(kite_test_data(MODEL), f);
        fputs(mark + strlen("MODEL_PATH"), f);
    } else {
        fputs(text, f);
    }
    fclose(f);
    return path;
}

/* Port 1 on loopback: nothing listens, connections are refused at once. */
static const char EXAMPLE[] =
    "{\"backends\": {"
    "   \"local\": {\"model\": \"MODEL_PATH\"},"
    "   \"cloud\": {\"url\": \"http://127.0.0.1:1/v1\", \"model\": \"big\", \"api_key_env\": \"ROUTER_TEST_KEY\","
    "             \"timeout_ms\": {\"connect\": 2000, \"first_token\": 10000, \"total\": 120000}}},"
    " \"rules\": ["
    "   {\"when\": {\"prompt_tokens_over\": 1500}, \"use\": \"cloud\"},"
    "   {\"when\": {\"segment\": [\"pro\"]}, \"use\": \"cloud\"},"
    "   {\"when\": {\"max_latency_ms_under\": 300}, \"use\": \"fastest\"},"
    "   {\"confidence\": {\"first_tokens\": 8, \"quantile\": 0.1, \"min_logprob\": -3.0}, \"else\": \"cloud\"},"
    "   {\"use\": \"local\", \"fallback\": \"cloud\"}]}";

static int setup(void **state) {
    (void)state;
    setenv("ROUTER_TEST_KEY", SECRET, 1);
    snprintf(g_dir, sizeof g_dir, "/tmp/kite_route_router_XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    kite_set_log_callback(capture_log, NULL);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    kite_set_log_callback(NULL, NULL);
    static const char *const names[] = {"example.json", "strict.json", "badmodel.json", "remote.json", "local.json"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char p[256];
        snprintf(p, sizeof p, "%s/%s", g_dir, names[i]);
        unlink(p);
    }
    rmdir(g_dir);
    return 0;
}

static kite_router *open_example(void) {
    kite_router *r = NULL;
    char err[512];
    kite_router_params p = kite_router_default_params();
    if (kite_router_open(&r, write_config("example.json", EXAMPLE), &p, err, sizeof err)) fail_msg("open: %s", err);
    return r;
}

static void test_open_and_states(void **state) {
    (void)state;
    g_logs[0] = 0;
    kite_router *r = open_example();
    assert_non_null(kite_router_local_model(r));
    assert_int_equal(r->local_backend, 0);
    /* the model was timed */
    assert_int_equal(r->local_latency.n_observed, 1);
    assert_true(r->local_latency.prefill_s_per_token > 0 && r->local_latency.decode_s_per_token > 0);
    assert_true(r->local_latency.fixed_s >= 0);
    /* the unreachable remote: a warning naming the field, and it starts in cooldown */
    assert_non_null(strstr(g_logs, "backends.cloud.url is unreachable at start"));
    assert_null(strstr(g_logs, SECRET));
    route_backend_state st[ROUTE_MAX_BACKENDS];
    route_router_states(r, st);
    kite_model_info info;
    kite_model_get_info(kite_router_local_model(r), &info);
    assert_true(st[0].available);
    assert_true(st[0].capable); /* a 1 MB model fits any machine that runs the tests */
    assert_int_equal(st[0].n_ctx, info.n_ctx_train < 4096 ? info.n_ctx_train : 4096);
    assert_false(st[1].available);
    assert_int_equal(st[1].n_ctx, 0);
    /* the counters start at zero */
    assert_int_equal(r->decisions_by_rule[0], 0);
    assert_int_equal(r->overflows, 0);
    kite_router_free(r);
}

static void test_open_errors(void **state) {
    (void)state;
    kite_router *r = (kite_router *)1;
    char err[512];
    g_logs[0] = 0;
    /* require_reachable: an error naming the field */
    const char *strict = write_config("strict.json",
        "{\"backends\": {\"cloud\": {\"url\": \"http://127.0.0.1:1/v1\", \"api_key_env\": \"ROUTER_TEST_KEY\", \"require_reachable\": true}}}");
    assert_int_equal(kite_router_open(&r, strict, NULL, err, sizeof err), KITE_ERR_IO);
    assert_null(r);
    assert_non_null(strstr(err, "router: backends.cloud.url: unreachable at start"));
    assert_null(strstr(err, SECRET));
    /* a model that does not open names backends.NAME.model */
    const char *bad = write_config("badmodel.json", "{\"backends\": {\"dev\": {\"model\": \"no/such/model.gguf\"}}}");
    assert_int_not_equal(kite_router_open(&r, bad, NULL, err, sizeof err), KITE_OK);
    assert_non_null(strstr(err, "router: backends.dev.model: "));
    /* config errors come through as they are */
    unsetenv("ROUTER_TEST_KEY");
    assert_int_equal(kite_router_open(&r, write_config("example.json", EXAMPLE), NULL, err, sizeof err), KITE_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "backends.cloud.api_key_env: the environment variable ROUTER_TEST_KEY (the API key) is not set"));
    setenv("ROUTER_TEST_KEY", SECRET, 1);
    assert_int_equal(kite_router_open(NULL, "x", NULL, err, sizeof err), KITE_ERR_INVALID_ARG);
    assert_null(strstr(g_logs, SECRET));
    kite_router_free(NULL);
}

static int32_t count_tokens(kite_model *m, const char *text, bool add_bos, bool special) {
    size_t n = 0;
    char err[256];
    int rc = kite_tokenize(m, text, strlen(text), add_bos, special, NULL, 0, &n, err, sizeof err);
    assert_true(rc == KITE_OK || rc == KITE_ERR_INVALID_ARG);
    return (int32_t)n;
}

static int info_of(kite_router *r, const char *body, route_request_info *info, char *route, char *user, kite_error *e) {
    return route_request_info_from_body(r, body, strlen(body), NULL, info, route, ROUTE_NAME_MAX, user, ROUTE_NAME_MAX, e);
}

static void test_request_info(void **state) {
    (void)state;
    kite_router *r = open_example();
    kite_model *m = kite_router_local_model(r);
    kite_model_info mi;
    kite_model_get_info(m, &mi);
    route_request_info info;
    char route[ROUTE_NAME_MAX], user[ROUTE_NAME_MAX];
    kite_error e = {0};
    /* a completion prompt: kite_tokenize with the model's BOS */
    assert_int_equal(info_of(r, "{\"prompt\": \"Once upon a time, there was a dog\", \"max_tokens\": 30, \"route\": \"remote\", "
                                "\"user\": \"alice\", \"max_latency_ms\": 250.5}", &info, route, user, &e), 0);
    assert_int_equal(info.prompt_tokens, count_tokens(m, "Once upon a time, there was a dog", mi.add_bos, false));
    assert_true(info.prompt_tokens > 5);
    assert_int_equal(info.max_tokens, 30);
    assert_string_equal(info.route, "remote");
    assert_string_equal(info.user, "alice");
    assert_true(info.max_latency_ms == 250.5);
    assert_null(info.segment);
    /* token ids count as themselves; max_completion_tokens wins over max_tokens */
    assert_int_equal(info_of(r, "{\"prompt\": [1, 2, 3, 4], \"max_tokens\": 9, \"max_completion_tokens\": 7}", &info, route, user, &e), 0);
    assert_int_equal(info.prompt_tokens, 4);
    assert_int_equal(info.max_tokens, 7);
    assert_null(info.route);
    assert_null(info.user);
    /* chat without a template (stories260K has none): the contents' text, joined by newlines */
    assert_null(r->local_template);
    const char *chat = "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
                       " {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"Tell me a story\"}]}]}";
    assert_int_equal(info_of(r, chat, &info, route, user, &e), 0);
    assert_int_equal(info.prompt_tokens, count_tokens(m, "Be brief.\nTell me a story", mi.add_bos, false));
    assert_int_equal(info.max_tokens, -1);
    /* with a template: the rendered conversation, as kite_chat_tokenize would give the server */
    static const char chatml[] = "{%- for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
                                 "'<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- endif %}";
    char err[256];
    assert_int_equal(kite_chat_template_from_text(&r->local_template, chatml, strlen(chatml), m, err, sizeof err), KITE_OK);
    assert_int_equal(info_of(r, "{\"messages\": [{\"role\": \"user\", \"content\": \"Hello\"}]}", &info, route, user, &e), 0);
    /* the tok512 vocabulary has no <|im_start|> token: the markup is plain text, and no BOS is added */
    assert_int_equal(info.prompt_tokens, count_tokens(m, "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n", false, true));
    kite_chat_template_free(r->local_template);
    r->local_template = NULL;
    /* a user name longer than the buffer is not kept */
    char longuser[200];
    snprintf(longuser, sizeof longuser, "{\"prompt\": \"x\", \"user\": \"%0150d\"}", 7);
    assert_int_equal(info_of(r, longuser, &info, route, user, &e), 0);
    assert_null(info.user);
    /* bad bodies: 400 naming the field */
    static const struct { const char *body, *want; } bad[] = {
        {"{\"prompt\": \"x\", \"route\": 5}", "route: expected a string"},
        {"{\"prompt\": \"x\", \"user\": []}", "user: expected a string"},
        {"{\"prompt\": \"x\", \"max_tokens\": 0}", "max_tokens: expected an integer >= 1"},
        {"{\"prompt\": \"x\", \"max_completion_tokens\": \"9\"}", "max_completion_tokens: expected an integer >= 1"},
        {"{\"prompt\": \"x\", \"max_latency_ms\": -1}", "max_latency_ms: expected a number"},
        {"{\"prompt\": {}}", "prompt: expected a string or an array of token ids"},
        {"{\"messages\": \"hi\"}", "messages: expected an array"},
        {"{\"model\": \"x\"}", "neither \"messages\" nor \"prompt\""},
        {"[1]", "not a JSON object"},
        {"{\"prompt\": ", "not JSON: line 1"},
        {"{\"prompt\": \"x\", \"route\": \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}", "route: longer than"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        kite_error be = {0};
        int st = info_of(r, bad[i].body, &info, route, user, &be);
        if (st != 400 || !strstr(be.msg, bad[i].want)) fail_msg("case %zu: %d %s (want %s)", i, st, be.msg, bad[i].want);
    }
    char deep[300] = "{\"prompt\": \"x\", \"a\": ";
    for (int i = 0; i < 70; i++) strcat(deep, "[");
    for (int i = 0; i < 70; i++) strcat(deep, "]");
    strcat(deep, "}");
    assert_int_equal(info_of(r, deep, &info, route, user, &e), 400);
    assert_non_null(strstr(e.msg, "nested more than"));
    kite_router_free(r);
}

static void test_request_info_without_local(void **state) {
    (void)state;
    kite_router *r = NULL;
    char err[512];
    const char *path = write_config("remote.json", "{\"backends\": {\"cloud\": {\"url\": \"http://127.0.0.1:1/v1\"}}}");
    assert_int_equal(kite_router_open(&r, path, NULL, err, sizeof err), KITE_OK);
    assert_null(kite_router_local_model(r));
    route_request_info info;
    char route[ROUTE_NAME_MAX], user[ROUTE_NAME_MAX];
    kite_error e = {0};
    /* bytes / 4 rounded up: 10 bytes -> 3 */
    assert_int_equal(info_of(r, "{\"prompt\": \"abcdefghij\"}", &info, route, user, &e), 0);
    assert_int_equal(info.prompt_tokens, 3);
    /* "abc" + "\n" + "defgh" = 9 bytes -> 3 */
    assert_int_equal(info_of(r, "{\"messages\": [{\"role\": \"user\", \"content\": \"abc\"}, {\"role\": \"user\", \"content\": \"defgh\"}]}",
                             &info, route, user, &e), 0);
    assert_int_equal(info.prompt_tokens, 3);
    /* the remote is in cooldown and is the only backend: a 503 in the decision */
    char *decision = NULL;
    assert_int_equal(kite_router_explain(r, "{\"prompt\": \"x\"}", 15, NULL, &decision, err, sizeof err), KITE_OK);
    json_t *o = json_loads(decision, 0, NULL);
    assert_int_equal(json_integer_value(json_object_get(o, "http_status")), 503);
    json_decref(o);
    kite_free(decision);
    double th;
    const char *p[] = {"x"};
    assert_int_equal(kite_router_calibrate(r, p, 1, 8, 0.1, 0.5, &th, NULL, err, sizeof err), KITE_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "needs a local backend"));
    kite_router_free(r);
}

static void test_explain(void **state) {
    (void)state;
    kite_router *r = open_example();
    char err[512], *decision = NULL;
    const char *body = "{\"messages\": [{\"role\": \"user\", \"content\": \"Once upon a time\"}], \"max_tokens\": 20}";
    assert_int_equal(kite_router_explain(r, body, strlen(body), "pro", &decision, err, sizeof err), KITE_OK);
    json_error_t je;
    json_t *o = json_loads(decision, 0, &je);
    assert_non_null(o);
    /* rule 1 matches the segment, the remote is in cooldown (its probe failed): local */
    assert_int_equal(json_integer_value(json_object_get(o, "http_status")), 200);
    assert_string_equal(json_string_value(json_object_get(o, "backend")), "local");
    assert_int_equal(json_integer_value(json_object_get(o, "rule")), 1);
    assert_string_equal(json_string_value(json_object_get(o, "reason")), "rule 1: segment pro; cloud is in cooldown, falling back to local");
    json_t *req = json_object_get(o, "request");
    kite_model_info mi;
    kite_model_get_info(kite_router_local_model(r), &mi);
    assert_int_equal(json_integer_value(json_object_get(req, "prompt_tokens")),
                     count_tokens(kite_router_local_model(r), "Once upon a time", mi.add_bos, false));
    assert_int_equal(json_integer_value(json_object_get(req, "max_tokens")), 20);
    assert_string_equal(json_string_value(json_object_get(req, "segment")), "pro");
    json_t *backends = json_object_get(o, "backends");
    assert_int_equal(json_array_size(backends), 2);
    assert_false(json_is_true(json_object_get(json_array_get(backends, 1), "available")));
    assert_true(json_real_value(json_object_get(json_object_get(o, "predicted_ms"), "local")) >= 0);
    assert_null(strstr(decision, SECRET));
    json_decref(o);
    kite_free(decision);
    /* an explicit route to a backend that does not exist: a 400 decision, not an error */
    const char *b2 = "{\"prompt\": \"x\", \"route\": \"gpu\"}";
    assert_int_equal(kite_router_explain(r, b2, strlen(b2), NULL, &decision, err, sizeof err), KITE_OK);
    o = json_loads(decision, 0, &je);
    assert_int_equal(json_integer_value(json_object_get(o, "http_status")), 400);
    json_decref(o);
    kite_free(decision);
    /* a bad body is an error */
    assert_int_equal(kite_router_explain(r, "{}", 2, NULL, &decision, err, sizeof err), KITE_ERR_INVALID_ARG);
    assert_null(decision);
    assert_non_null(strstr(err, "neither"));
    kite_router_free(r);
}

/* numpy.quantile(x, q), method "linear", written out independently of the library. */
static double numpy_linear_quantile(double *x, size_t n, double q) {
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && x[j - 1] > x[j]; j--) {
            double t = x[j];
            x[j] = x[j - 1];
            x[j - 1] = t;
        }
    double h = (double)(n - 1) * q;
    size_t lo = (size_t)floor(h);
    if (lo + 1 >= n) return x[n - 1];
    return x[lo] + (h - (double)lo) * (x[lo + 1] - x[lo]);
}

/* The score calibrate should give ids: greedy over kite_eval's logits (argmax, lower id on ties), the
 * chosen tokens' log-softmax in double, stopping after an end token, then the q-quantile. */
static double reference_score(kite_model *m, const int32_t *ids, size_t n, int k_tokens, double q) {
    kite_model_info mi;
    kite_model_get_info(m, &mi);
    kite_session_params sp = kite_session_default_params();
    sp.n_ctx = 512;
    sp.kv_type = KITE_KV_F16; /* what calibrate's session uses by default */
    kite_session *s = NULL;
    char err[256];
    assert_int_equal(kite_session_open(&s, m, &sp, err, sizeof err), KITE_OK);
    float *logits = malloc(n * (size_t)mi.n_vocab * sizeof *logits);
    assert_non_null(logits);
    assert_int_equal(kite_eval(s, ids, n, logits, err, sizeof err), KITE_OK);
    const float *row = logits + (n - 1) * (size_t)mi.n_vocab;
    float next[4096];
    assert_true(mi.n_vocab <= 4096);
    double lps[64];
    int got = 0;
    for (int k = 0; k < k_tokens; k++) {
        int32_t best = 0;
        for (int32_t v = 1; v < mi.n_vocab; v++)
            if (row[v] > row[best]) best = v;
        double sum = 0;
        for (int32_t v = 0; v < mi.n_vocab; v++) sum += exp((double)row[v] - (double)row[best]);
        lps[got++] = -log(sum); /* row[best] - logsumexp(row) */
        if (best == mi.eos_id) break;
        assert_int_equal(kite_eval(s, &best, 1, next, err, sizeof err), KITE_OK);
        row = next;
    }
    free(logits);
    kite_session_free(s);
    return numpy_linear_quantile(lps, (size_t)got, q);
}

static const char *const PROMPTS[] = {
    "Once upon a time",
    "The little dog ran to the",
    "Lily and Tom went to the park. They saw a big",
    "One day, a girl named Sue found a shiny",
    "The sun was hot and the",
    "Ben had a red ball. He",
};

static void check_calibration(kite_router *r, bool chat) {
    kite_model *m = kite_router_local_model(r);
    kite_model_info mi;
    kite_model_get_info(m, &mi);
    enum { N = sizeof PROMPTS / sizeof *PROMPTS };
    double scores[N], th, want[N];
    char err[512];
    assert_int_equal(kite_router_calibrate(r, PROMPTS, N, 8, 0.1, 0.5, &th, scores, err, sizeof err), KITE_OK);
    for (size_t i = 0; i < N; i++) {
        int32_t ids[256];
        size_t n = 0;
        if (chat) {
            char text[512];
            snprintf(text, sizeof text, "<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n", PROMPTS[i]);
            assert_int_equal(kite_tokenize(m, text, strlen(text), false, true, ids, 256, &n, err, sizeof err), KITE_OK);
        } else {
            assert_int_equal(kite_tokenize(m, PROMPTS[i], strlen(PROMPTS[i]), mi.add_bos, false, ids, 256, &n, err, sizeof err), KITE_OK);
        }
        want[i] = reference_score(m, ids, n, 8, 0.1);
        if (fabs(scores[i] - want[i]) > 2e-3) fail_msg("prompt %zu: score %.6f, reference %.6f", i, scores[i], want[i]);
        assert_true(scores[i] <= 0);
    }
    /* the threshold: the 0.5 quantile of the scores; h = 2.5 over 6 prompts, so 3 score below it */
    double sorted[N];
    memcpy(sorted, scores, sizeof sorted);
    assert_true(fabs(th - numpy_linear_quantile(sorted, N, 0.5)) < 1e-9);
    int below = 0;
    for (size_t i = 0; i < N; i++) below += scores[i] < th;
    assert_int_equal(below, 3);
    /* fraction 0: nothing below; fraction 1: the largest score, all others below */
    assert_int_equal(kite_router_calibrate(r, PROMPTS, N, 8, 0.1, 0.0, &th, NULL, err, sizeof err), KITE_OK);
    below = 0;
    for (size_t i = 0; i < N; i++) below += scores[i] < th;
    assert_int_equal(below, 0);
    assert_int_equal(kite_router_calibrate(r, PROMPTS, N, 8, 0.1, 1.0, &th, NULL, err, sizeof err), KITE_OK);
    assert_true(th == sorted[N - 1]);
}

static void test_calibrate(void **state) {
    (void)state;
    kite_router *r = open_example();
    check_calibration(r, false); /* stories260K has no chat template: plain completions of the prompt */
    static const char chatml[] = "{%- for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
                                 "'<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- endif %}";
    char err[512];
    assert_int_equal(kite_chat_template_from_text(&r->local_template, chatml, strlen(chatml), kite_router_local_model(r), err,
                                                  sizeof err), KITE_OK);
    check_calibration(r, true); /* with a template: a one-user-message chat */
    /* bad arguments */
    double th;
    assert_int_equal(kite_router_calibrate(r, PROMPTS, 1, 0, 0.1, 0.5, &th, NULL, err, sizeof err), KITE_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "first_tokens"));
    assert_int_equal(kite_router_calibrate(r, PROMPTS, 1, 8, 1.5, 0.5, &th, NULL, err, sizeof err), KITE_ERR_INVALID_ARG);
    assert_int_equal(kite_router_calibrate(r, PROMPTS, 1, 8, 0.1, -0.1, &th, NULL, err, sizeof err), KITE_ERR_INVALID_ARG);
    assert_int_equal(kite_router_calibrate(r, PROMPTS, 0, 8, 0.1, 0.5, &th, NULL, err, sizeof err), KITE_ERR_INVALID_ARG);
    assert_int_equal(kite_router_calibrate(NULL, PROMPTS, 1, 8, 0.1, 0.5, &th, NULL, err, sizeof err), KITE_ERR_INVALID_ARG);
    /* a prompt longer than the context */
    char *huge = malloc(40000);
    assert_non_null(huge);
    for (int i = 0; i < 39990; i += 5) memcpy(huge + i, "dog. ", 5);
    huge[39990] = 0;
    const char *hp[] = {"Once", huge};
    assert_int_equal(kite_router_calibrate(r, hp, 2, 8, 0.1, 0.5, &th, NULL, err, sizeof err), KITE_ERR_CONTEXT_FULL);
    assert_non_null(strstr(err, "prompt 1 has"));
    free(huge);
    kite_router_free(r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_open_and_states),
        cmocka_unit_test(test_open_errors),
        cmocka_unit_test(test_request_info),
        cmocka_unit_test(test_request_info_without_local),
        cmocka_unit_test(test_explain),
        cmocka_unit_test(test_calibrate),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
