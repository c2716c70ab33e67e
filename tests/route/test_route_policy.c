/* The routing decision as a table (request and backend states -> attempts, rule, reason, status), the
 * latency model with hand-computed figures, the confidence statistic against numpy's linear quantile
 * (values derived by hand in the comments), and the plan's JSON. */
#include <jansson.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "route/route.h"

/* The example (without the key variable) plus a user mapping. */
static const char EXAMPLE[] =
    "{\"backends\": {"
    "   \"local\": {\"model\": \"m.gguf\"},"
    "   \"cloud\": {\"url\": \"http://127.0.0.1:9000/v1\", \"model\": \"big\","
    "             \"timeout_ms\": {\"connect\": 2000, \"first_token\": 10000, \"total\": 120000}}},"
    " \"segments\": {\"users\": {\"alice\": [\"pro\"]}},"
    " \"rules\": ["
    "   {\"when\": {\"prompt_tokens_over\": 1500}, \"use\": \"cloud\"},"
    "   {\"when\": {\"segment\": [\"pro\"]}, \"use\": \"cloud\"},"
    "   {\"when\": {\"max_latency_ms_under\": 300}, \"use\": \"fastest\"},"
    "   {\"confidence\": {\"first_tokens\": 8, \"quantile\": 0.1, \"min_logprob\": -3.0}, \"else\": \"cloud\"},"
    "   {\"use\": \"local\", \"fallback\": \"cloud\"}]}";

/* Three backends: local, cloud, backup (config order), rules exercising fallbacks and passes. */
static const char THREE[] =
    "{\"backends\": {\"local\": {\"model\": \"m.gguf\"}, \"cloud\": {\"url\": \"http://c/v1\"}, \"backup\": {\"url\": \"http://b/v1\"}},"
    " \"defaults\": {\"max_latency_ms\": 250},"
    " \"rules\": ["
    "   {\"when\": {\"segment\": [\"gold\"]}, \"use\": \"cloud\", \"fallback\": [\"backup\"]},"
    "   {\"when\": {\"segment\": [\"x\"]}, \"use\": \"cloud\", \"fallback\": []},"
    "   {\"when\": {\"prompt_tokens_under\": 10}, \"use\": \"backup\"},"
    "   {\"when\": {\"prompt_tokens_over\": 100, \"segment\": [\"beta\"]}, \"use\": \"cloud\", \"fallback\": [\"backup\", \"local\"]},"
    "   {\"when\": {\"max_latency_ms_under\": 200}, \"use\": \"fastest\"},"
    "   {\"use\": \"local\"}]}";

static const char NO_RULES[] = "{\"backends\": {\"cloud\": {\"url\": \"http://c/v1\"}, \"local\": {\"model\": \"m.gguf\"}}, \"explicit\": false}";
static const char ONLY_CONDITIONAL[] =
    "{\"backends\": {\"cloud\": {\"url\": \"http://c/v1\"}, \"local\": {\"model\": \"m.gguf\"}},"
    " \"rules\": [{\"when\": {\"prompt_tokens_over\": 1000}, \"use\": \"local\"}]}";

typedef enum { S_OK = 0, S_DOWN = 1, S_INCAPABLE = 2 } state_kind;

typedef struct policy_case {
    const char *what;
    const char *config;
    /* request */
    int32_t prompt_tokens, max_tokens;
    const char *user, *segment, *route;
    double max_latency_ms;
    /* states: per backend in config order */
    state_kind kind[3];
    int32_t n_ctx[3];            /* 0 = the defaults below (local 2048, remotes 0) */
    double decode_s_per_token;   /* local's; 0 = 0.01 */
    double remote_ttft_s;        /* 0 = 0.5 */
    bool remote_unobserved;
    /* expected */
    int http_status;
    const char *attempts;        /* names joined by ',' */
    int32_t rule;
    const char *reason;          /* exact */
    bool confidence;
} policy_case;

/* Latency used below unless a case says otherwise: local fixed 10 ms + 1 ms per prompt token + 10 ms per
 * completion token; remotes observed: 500 ms to first token + 20 ms per token. With 100 prompt tokens and
 * max_tokens 10: local 10 + 100 + 100 = 210 ms, remote 500 + 200 = 700 ms. */
static const policy_case CASES[] = {
    {"length rule", EXAMPLE, 1803, -1, NULL, NULL, NULL, 0, {S_OK, S_OK}, {0}, 0, 0, false,
     0, "cloud,local", 0, "rule 0: prompt 1803 tokens > 1500", false},
    {"length rule at the boundary does not fire", EXAMPLE, 1500, 10, NULL, NULL, NULL, 0, {S_OK, S_OK}, {0}, 0, 0, false,
     0, "local,cloud", 3, "rule 3: confidence gate on local (first 8 tokens, q0.1 of logprobs < -3 -> cloud)", true},
    {"segment header", EXAMPLE, 100, 10, NULL, "pro", NULL, 0, {S_OK, S_OK}, {0}, 0, 0, false,
     0, "cloud,local", 1, "rule 1: segment pro", false},
    {"segment header, a list with spaces", EXAMPLE, 100, 10, NULL, "free , pro", NULL, 0, {S_OK, S_OK}, {0}, 0, 0, false,
     0, "cloud,local", 1, "rule 1: segment pro", false},
    {"segment from the user mapping", EXAMPLE, 100, 10, "alice", NULL, NULL, 0, {S_OK, S_OK}, {0}, 0, 0, false,
     0, "cloud,local", 1, "rule 1: segment pro", false},
    {"an unmapped user has no tags", EXAMPLE, 100, 10, "bob", "free", NULL, 0, {S_OK, S_OK}, {0}, 0, 0, false,
     0, "local,cloud", 3, "rule 3: confidence gate on local (first 8 tokens, q0.1 of logprobs < -3 -> cloud)", true},
    {"budget: local is fastest", EXAMPLE, 100, 10, NULL, NULL, NULL, 250, {S_OK, S_OK}, {0}, 0, 0, false,
     0, "local,cloud", 2, "rule 2: budget 250 ms: local 210 ms, cloud 700 ms", false},
    /* decode 0.1 s/token: local 10 + 100 + 1000 = 1110 ms against the remote's 700 ms */
    {"budget: a slow local loses", EXAMPLE, 100, 10, NULL, NULL, NULL, 250, {S_OK, S_OK}, {0}, 0.1, 0, false,
     0, "cloud,local", 2, "rule 2: budget 250 ms: local 1110 ms, cloud 700 ms", false},
    /* remote ttft 0.02 s: 20 + 200 = 220 ms against local 210 ms: local is fastest anyway */
    /* remote ttft 0.001 s: 1 + 200 = 201 ms; local 210 ms is within 5% (211.05) and wins the tie */
    {"budget: a tie within 5% goes local", EXAMPLE, 100, 10, NULL, NULL, NULL, 150, {S_OK, S_OK}, {0}, 0, 0.001, false,
     0, "local,cloud", 2, "rule 2: budget 150 ms: local 210 ms, cloud 201 ms (local within 5%)", false},
    /* local decode 0.011: 10 + 100 + 110 = 220 ms; remote ttft 0.001: 201 ms; beyond 5% (211.05): the remote */
    {"budget: beyond 5% the remote wins", EXAMPLE, 100, 10, NULL, NULL, NULL, 150, {S_OK, S_OK}, {0}, 0.011, 0.001, false,
     0, "cloud,local", 2, "rule 2: budget 150 ms: local 220 ms, cloud 201 ms", false},
    /* budget 299: local (210 ms) meets it even though the remote (ttft 0.001: 201 ms... beyond the tie
       at decode 0.011: local 220 ms) is faster */
    {"budget: local that meets the budget wins", EXAMPLE, 100, 10, NULL, NULL, NULL, 299, {S_OK, S_OK}, {0}, 0.011, 0.001, false,
     0, "local,cloud", 2, "rule 2: budget 299 ms: local 220 ms, cloud 201 ms (local meets the budget)", false},
    /* a remote never observed: 10000 ms first token + 10 * 50 ms */
    {"budget: an unobserved remote is predicted from its timeouts", EXAMPLE, 100, 10, NULL, NULL, NULL, 250, {S_OK, S_OK}, {0}, 0.1, 0, true,
     0, "local,cloud", 2, "rule 2: budget 250 ms: local 1110 ms, cloud 10500 ms", false},
    {"budget above the rule's bound does not fire", EXAMPLE, 100, 10, NULL, NULL, NULL, 300, {S_OK, S_OK}, {0}, 0, 0, false,
     0, "local,cloud", 3, "rule 3: confidence gate on local (first 8 tokens, q0.1 of logprobs < -3 -> cloud)", true},
    {"confidence: the gate's else in cooldown", EXAMPLE, 100, 10, NULL, NULL, NULL, 0, {S_OK, S_DOWN}, {0}, 0, 0, false,
     0, "local", 3, "rule 3: confidence gate: cloud is in cooldown, answering from local without the gate", false},
    {"confidence: local not capable", EXAMPLE, 100, 10, NULL, NULL, NULL, 0, {S_INCAPABLE, S_OK}, {0}, 0, 0, false,
     0, "cloud", 3, "rule 3: confidence gate: local is not capable on this device, answering from cloud", false},
    {"length rule with the remote in cooldown falls back", EXAMPLE, 1803, -1, NULL, NULL, NULL, 0, {S_OK, S_DOWN}, {0}, 0, 0, false,
     0, "local", 0, "rule 0: prompt 1803 tokens > 1500; cloud is in cooldown, falling back to local", false},
    /* 1000 + 1 > 512: local set aside, the confidence gate runs on it no more */
    {"context fit: local too small", EXAMPLE, 1000, -1, NULL, NULL, NULL, 0, {S_OK, S_OK}, {512, 0}, 0, 0, false,
     0, "cloud", 3, "rule 3: confidence gate: local cannot fit 1000 tokens (ctx 512), answering from cloud", false},
    {"context fit counts max_tokens", EXAMPLE, 1000, 100, NULL, NULL, NULL, 0, {S_OK, S_OK}, {1050, 0}, 0, 0, false,
     0, "cloud", 3, "rule 3: confidence gate: local cannot fit 1000 + 100 tokens (ctx 1050), answering from cloud", false},
    {"context fit: a prompt exactly filling the context fits", EXAMPLE, 1000, 48, NULL, NULL, NULL, 0, {S_OK, S_OK}, {1048, 0}, 0, 0, false,
     0, "local,cloud", 3, "rule 3: confidence gate on local (first 8 tokens, q0.1 of logprobs < -3 -> cloud)", true},
    {"fits no backend: 400", EXAMPLE, 5000, -1, NULL, NULL, NULL, 0, {S_OK, S_OK}, {2048, 4096}, 0, 0, false,
     400, "", -1, "prompt 5000 tokens fits no backend: local ctx 2048, cloud max_context 4096", false},
    {"fits no backend with max_tokens: 400", EXAMPLE, 2000, 100, NULL, NULL, NULL, 0, {S_OK, S_OK}, {2048, 2050}, 0, 0, false,
     400, "", -1, "prompt 2000 tokens + 100 to generate fits no backend: local ctx 2048, cloud max_context 2050", false},
    {"fits, but all down: 503", EXAMPLE, 100, -1, NULL, NULL, NULL, 0, {S_DOWN, S_DOWN}, {0}, 0, 0, false,
     503, "", -1, "no backend can take the request: local is not loaded, cloud is in cooldown", false},
    {"explicit remote", EXAMPLE, 100, 10, NULL, NULL, "remote", 0, {S_OK, S_OK}, {0}, 0, 0, false,
     0, "cloud,local", -1, "explicit: route=remote", false},
    {"explicit local beats the length rule", EXAMPLE, 1803, -1, NULL, NULL, "local", 0, {S_OK, S_OK}, {0}, 0, 0, false,
     0, "local,cloud", -1, "explicit: route=local", false},
    {"explicit by name", EXAMPLE, 100, -1, NULL, "pro", "cloud", 0, {S_OK, S_OK}, {0}, 0, 0, false,
     0, "cloud,local", -1, "explicit: route=cloud", false},
    {"explicit remote in cooldown falls back", EXAMPLE, 100, -1, NULL, NULL, "remote", 0, {S_OK, S_DOWN}, {0}, 0, 0, false,
     0, "local", -1, "explicit: route=remote: cloud is in cooldown, falling back to local", false},
    {"explicit local that cannot fit falls back", EXAMPLE, 1000, -1, NULL, NULL, "local", 0, {S_OK, S_OK}, {512, 0}, 0, 0, false,
     0, "cloud", -1, "explicit: route=local: local cannot fit 1000 tokens (ctx 512), falling back to cloud", false},
    {"explicit unknown name: 400", EXAMPLE, 100, -1, NULL, NULL, "gpu", 0, {S_OK, S_OK}, {0}, 0, 0, false,
     400, "", -1, "explicit: route=gpu names no backend", false},
    {"explicit, a value that is no name is not quoted", EXAMPLE, 100, -1, NULL, NULL, "a b\"c", 0, {S_OK, S_OK}, {0}, 0, 0, false,
     400, "", -1, "explicit: route=(not a name) names no backend", false},
    {"explicit is ignored when the config disables it", NO_RULES, 100, -1, NULL, NULL, "local", 0, {S_OK, S_OK}, {0}, 0, 0, false,
     0, "cloud,local", -1, "no rules: first usable backend cloud", false},
    {"no rule matches: the first usable backend", ONLY_CONDITIONAL, 100, -1, NULL, NULL, NULL, 0, {S_OK, S_OK}, {0}, 0, 0, false,
     0, "cloud,local", -1, "no rule matched: first usable backend cloud", false},
    {"no rule matches, the first in cooldown", ONLY_CONDITIONAL, 100, -1, NULL, NULL, NULL, 0, {S_DOWN, S_OK}, {0}, 0, 0, false,
     0, "local", -1, "no rule matched: first usable backend local", false},
    {"explicit remote: the first usable remote", THREE, 100, 10, NULL, NULL, "remote", 0, {S_OK, S_DOWN, S_OK}, {0}, 0, 0, false,
     0, "backup,local", -1, "explicit: route=remote", false},
    {"a rule's fallback list replaces the default", THREE, 100, 10, NULL, "gold", NULL, 0, {S_OK, S_OK, S_OK}, {0}, 0, 0, false,
     0, "cloud,backup", 0, "rule 0: segment gold", false},
    {"fallback list, chosen down", THREE, 100, 10, NULL, "gold", NULL, 0, {S_OK, S_DOWN, S_OK}, {0}, 0, 0, false,
     0, "backup", 0, "rule 0: segment gold; cloud is in cooldown, falling back to backup", false},
    /* rule 0's only fallback is down as well: the rule is passed over; rule 4 (budget 250 < 200? no), rule 5 */
    {"fallback list all down: the rule is passed over", THREE, 100, 10, NULL, "gold", NULL, 0, {S_OK, S_DOWN, S_DOWN}, {0}, 0, 0, false,
     0, "local", 5, "rule 5: always", false},
    {"an empty fallback list", THREE, 100, 10, NULL, "x", NULL, 0, {S_OK, S_OK, S_OK}, {0}, 0, 0, false,
     0, "cloud", 1, "rule 1: segment x", false},
    {"default fallbacks in config order", THREE, 5, 10, NULL, NULL, NULL, 0, {S_OK, S_OK, S_OK}, {0}, 0, 0, false,
     0, "backup,local,cloud", 2, "rule 2: prompt 5 tokens < 10", false},
    {"two conditions", THREE, 101, 10, NULL, "beta", NULL, 0, {S_OK, S_OK, S_OK}, {0}, 0, 0, false,
     0, "cloud,backup,local", 3, "rule 3: prompt 101 tokens > 100, segment beta", false},
    {"two conditions, one fails", THREE, 100, 10, NULL, "beta", NULL, 0, {S_OK, S_OK, S_OK}, {0}, 0, 0, false,
     0, "local,cloud,backup", 5, "rule 5: always", false},
    /* budget from the request (150 < 200) beats the config's default (250): fastest over three */
    {"fastest over three, the request's budget", THREE, 100, 10, NULL, NULL, NULL, 150, {S_OK, S_OK, S_OK}, {0}, 0.1, 0, false,
     0, "cloud,local,backup", 4, "rule 4: budget 150 ms: local 1110 ms, cloud 700 ms, backup 700 ms", false},
    {"the config's default budget (250) does not fire < 200", THREE, 100, 10, NULL, NULL, NULL, 0, {S_OK, S_OK, S_OK}, {0}, 0.1, 0, false,
     0, "local,cloud,backup", 5, "rule 5: always", false},
    {"local not loaded", THREE, 100, 10, NULL, NULL, NULL, 0, {S_DOWN, S_OK, S_OK}, {0}, 0, 0, false,
     0, "cloud,backup", 5, "rule 5: always; local is not loaded, falling back to cloud", false},
};

static route_config parse_or_die(const char *json) {
    route_config cfg;
    kite_error e = {0};
    if (route_config_parse(json, strlen(json), NULL, &cfg, &e)) fail_msg("config: %s", e.msg);
    return cfg;
}

static void fill_states(const route_config *cfg, const policy_case *c, route_backend_state *st) {
    memset(st, 0, sizeof(route_backend_state) * ROUTE_MAX_BACKENDS);
    for (int32_t i = 0; i < cfg->n_backends; i++) {
        bool local = cfg->backends[i].kind == ROUTE_BACKEND_LOCAL;
        st[i].available = c->kind[i] != S_DOWN;
        st[i].capable = c->kind[i] != S_INCAPABLE;
        st[i].n_ctx = c->n_ctx[i] ? c->n_ctx[i] : local ? 2048 : 0;
        if (local) {
            st[i].latency = (route_latency){.fixed_s = 0.010, .prefill_s_per_token = 0.001,
                                            .decode_s_per_token = c->decode_s_per_token ? c->decode_s_per_token : 0.01,
                                            .n_observed = 1};
        } else if (!c->remote_unobserved) {
            st[i].latency = (route_latency){.ewma_ttft_s = c->remote_ttft_s ? c->remote_ttft_s : 0.5, .ewma_s_per_token = 0.02,
                                            .n_observed = 5};
        }
    }
}

static void test_decision_table(void **state) {
    (void)state;
    for (size_t k = 0; k < sizeof CASES / sizeof *CASES; k++) {
        const policy_case *c = &CASES[k];
        route_config cfg = parse_or_die(c->config);
        route_backend_state st[ROUTE_MAX_BACKENDS];
        fill_states(&cfg, c, st);
        route_request_info req = {.prompt_tokens = c->prompt_tokens, .max_tokens = c->max_tokens, .user = c->user,
                                  .segment = c->segment, .route = c->route, .max_latency_ms = c->max_latency_ms};
        route_plan plan;
        route_decide(&cfg, st, &req, &plan);
        char attempts[256] = "";
        for (int32_t i = 0; i < plan.n_attempts; i++)
            snprintf(attempts + strlen(attempts), sizeof attempts - strlen(attempts), "%s%s", i ? "," : "",
                     cfg.backends[plan.attempts[i]].name);
        if (plan.http_status != c->http_status || strcmp(attempts, c->attempts) || plan.rule != c->rule ||
            strcmp(plan.reason, c->reason) || plan.confidence != c->confidence)
            fail_msg("case %zu (%s):\n  got  %d [%s] rule %d conf %d \"%s\"\n  want %d [%s] rule %d conf %d \"%s\"", k, c->what,
                     plan.http_status, attempts, plan.rule, plan.confidence, plan.reason, c->http_status, c->attempts, c->rule,
                     c->confidence, c->reason);
        if (plan.confidence) {
            assert_int_equal(plan.conf_first_tokens, 8);
            assert_true(plan.conf_quantile == 0.1);
            assert_true(plan.conf_min_logprob == -3.0);
            assert_int_equal(plan.conf_else_backend, 1);
        }
        route_config_free(&cfg);
    }
}

/* Every plan, whatever its input, lists distinct, usable backends, at most ROUTE_MAX_ATTEMPTS. */
static void test_attempts_are_usable_and_distinct(void **state) {
    (void)state;
    static const char *const configs[] = {EXAMPLE, THREE, NO_RULES, ONLY_CONDITIONAL};
    static const char *const routes[] = {NULL, "local", "remote", "cloud", "backup", "zzz"};
    static const char *const segs[] = {NULL, "pro", "gold", "x", "beta"};
    for (size_t ci = 0; ci < 4; ci++) {
        route_config cfg = parse_or_die(configs[ci]);
        for (int mask = 0; mask < 27; mask++)
            for (int32_t prompt = 0; prompt < 3000; prompt += 499)
                for (size_t ri = 0; ri < 6; ri++)
                    for (size_t si = 0; si < 5; si++) {
                        policy_case c = {0};
                        for (int i = 0, m = mask; i < 3; i++, m /= 3) c.kind[i] = (state_kind)(m % 3);
                        route_backend_state st[ROUTE_MAX_BACKENDS];
                        fill_states(&cfg, &c, st);
                        route_request_info req = {.prompt_tokens = prompt, .max_tokens = -1, .segment = segs[si],
                                                  .route = routes[ri], .max_latency_ms = prompt % 2 ? 100 : 0};
                        route_plan plan;
                        route_decide(&cfg, st, &req, &plan);
                        assert_true(plan.reason[0] != 0);
                        if (plan.http_status) {
                            assert_int_equal(plan.n_attempts, 0);
                            continue;
                        }
                        assert_true(plan.n_attempts >= 1 && plan.n_attempts <= ROUTE_MAX_ATTEMPTS);
                        for (int32_t i = 0; i < plan.n_attempts; i++) {
                            int32_t b = plan.attempts[i];
                            assert_true(b >= 0 && b < cfg.n_backends);
                            assert_true(st[b].available && (cfg.backends[b].kind == ROUTE_BACKEND_REMOTE || st[b].capable));
                            for (int32_t j = 0; j < i; j++) assert_int_not_equal(plan.attempts[j], b);
                        }
                    }
        route_config_free(&cfg);
    }
}

static void test_plan_json(void **state) {
    (void)state;
    route_config cfg = parse_or_die(EXAMPLE);
    policy_case c = {0};
    route_backend_state st[ROUTE_MAX_BACKENDS];
    fill_states(&cfg, &c, st);
    route_request_info req = {.prompt_tokens = 100, .max_tokens = 10};
    route_plan plan;
    route_decide(&cfg, st, &req, &plan);
    char *text = route_plan_json(&cfg, &plan);
    assert_non_null(text);
    json_error_t je;
    json_t *o = json_loads(text, 0, &je);
    assert_non_null(o);
    assert_int_equal(json_integer_value(json_object_get(o, "http_status")), 200);
    assert_string_equal(json_string_value(json_object_get(o, "backend")), "local");
    assert_int_equal(json_integer_value(json_object_get(o, "rule")), 3);
    assert_string_equal(json_string_value(json_object_get(o, "reason")), plan.reason);
    json_t *att = json_object_get(o, "attempts");
    assert_int_equal(json_array_size(att), 2);
    assert_string_equal(json_string_value(json_array_get(att, 1)), "cloud");
    json_t *conf = json_object_get(o, "confidence");
    assert_int_equal(json_integer_value(json_object_get(conf, "first_tokens")), 8);
    assert_true(json_real_value(json_object_get(conf, "min_logprob")) == -3.0);
    assert_string_equal(json_string_value(json_object_get(conf, "else")), "cloud");
    /* 10 + 100 + 100 ms and 500 + 200 ms (fill_states' speeds) */
    assert_true(fabs(json_real_value(json_object_get(json_object_get(o, "predicted_ms"), "local")) - 210.0) < 1e-6);
    assert_true(fabs(json_real_value(json_object_get(json_object_get(o, "predicted_ms"), "cloud")) - 700.0) < 1e-6);
    json_decref(o);
    free(text);
    /* A 400 has no backend and no rule. */
    req.prompt_tokens = 5000;
    st[0].n_ctx = 2048;
    st[1].n_ctx = 4096;
    route_decide(&cfg, st, &req, &plan);
    text = route_plan_json(&cfg, &plan);
    o = json_loads(text, 0, &je);
    assert_int_equal(json_integer_value(json_object_get(o, "http_status")), 400);
    assert_true(json_is_null(json_object_get(o, "backend")));
    assert_true(json_is_null(json_object_get(o, "rule")));
    assert_true(json_is_null(json_object_get(o, "confidence")));
    json_decref(o);
    free(text);
    route_config_free(&cfg);
}

static void test_latency(void **state) {
    (void)state;
    route_backend local = {.kind = ROUTE_BACKEND_LOCAL};
    route_backend remote = {.kind = ROUTE_BACKEND_REMOTE, .timeout = {.connect_ms = 2000, .first_token_ms = 8000, .total_ms = 60000}};
    route_latency l = {.fixed_s = 0.01, .prefill_s_per_token = 0.002, .decode_s_per_token = 0.02, .n_observed = 1};
    /* 1000 * (0.01 + 100 * 0.002 + 50 * 0.02) = 10 + 200 + 1000 */
    assert_true(fabs(route_latency_predict_ms(&l, &local, 100, 50) - 1210.0) < 1e-9);
    assert_true(fabs(route_latency_predict_ms(&l, &local, -3, 0) - 10.0) < 1e-9); /* negatives count as 0 */
    route_latency r = {0};
    /* unobserved: 8000 + 50 * 50 */
    assert_true(fabs(route_latency_predict_ms(&r, &remote, 100, 50) - 10500.0) < 1e-9);
    route_latency_observe(&r, 0.5, 0.02); /* the first sample is taken as is */
    assert_int_equal(r.n_observed, 1);
    assert_true(fabs(r.ewma_ttft_s - 0.5) < 1e-12 && fabs(r.ewma_s_per_token - 0.02) < 1e-12);
    route_latency_observe(&r, 1.0, 0.04); /* 0.5 + 0.2 * 0.5 = 0.6; 0.02 + 0.2 * 0.02 = 0.024 */
    assert_true(fabs(r.ewma_ttft_s - 0.6) < 1e-12 && fabs(r.ewma_s_per_token - 0.024) < 1e-12);
    route_latency_observe(&r, -1, NAN); /* nothing measured: unchanged */
    assert_int_equal(r.n_observed, 2);
    route_latency_observe(&r, 0.1, -1); /* ttft only: 0.6 + 0.2 * (0.1 - 0.6) = 0.5 */
    assert_true(fabs(r.ewma_ttft_s - 0.5) < 1e-12 && fabs(r.ewma_s_per_token - 0.024) < 1e-12);
    /* observed: 1000 * (0.5 + 50 * 0.024) = 500 + 1200 */
    assert_true(fabs(route_latency_predict_ms(&r, &remote, 100, 50) - 1700.0) < 1e-9);

    /* A local answer refines the measured speeds: 100 prompt tokens computed, first token after 0.31 s,
     * 0.03 s per further token. Prefill sample (0.31 - 0.01) / 100 = 0.003: 0.002 + 0.2 * 0.001 = 0.0022;
     * decode 0.02 + 0.2 * 0.01 = 0.022; fixed_s stays. */
    route_latency_observe_local(&l, 100, 0.31, 0.03);
    assert_true(fabs(l.prefill_s_per_token - 0.0022) < 1e-12 && fabs(l.decode_s_per_token - 0.022) < 1e-12);
    assert_true(l.fixed_s == 0.01);
    /* 1000 * (0.01 + 100 * 0.0022 + 50 * 0.022) = 10 + 220 + 1100 */
    assert_true(fabs(route_latency_predict_ms(&l, &local, 100, 50) - 1330.0) < 1e-9);
    /* Everything from the prefix cache, a one-token answer, garbage: nothing moves. */
    route_latency before = l;
    route_latency_observe_local(&l, 0, 0.5, -1);
    route_latency_observe_local(&l, 10, NAN, INFINITY);
    route_latency_observe_local(&l, 10, -1, 0);
    assert_memory_equal(&l, &before, sizeof l);
    /* A wait shorter than the fixed overhead counts as no prefill time, not a negative one. */
    route_latency_observe_local(&l, 10, 0.001, -1);
    assert_true(fabs(l.prefill_s_per_token - 0.8 * 0.0022) < 1e-12);
}

static void test_quantile(void **state) {
    (void)state;
    /* numpy.quantile(x, q) (method "linear"): sort x, h = (n - 1) q, x[floor h] + frac(h) (x[floor h + 1] - x[floor h]). */
    const float a[] = {-1, -2, -3, -4};
    /* sorted -4 -3 -2 -1; q 0.1: h = 0.3, -4 + 0.3 * 1 = -3.7 */
    assert_true(fabs(route_logprob_quantile(a, 4, 0.1) - (-3.7)) < 1e-6);
    /* q 0.5: h = 1.5, -3 + 0.5 = -2.5 */
    assert_true(fabs(route_logprob_quantile(a, 4, 0.5) - (-2.5)) < 1e-6);
    assert_true(route_logprob_quantile(a, 4, 0) == -4);
    assert_true(route_logprob_quantile(a, 4, 1) == -1);
    assert_true(route_logprob_quantile(a, 4, -0.5) == -4); /* q clamped to [0, 1] */
    assert_true(route_logprob_quantile(a, 4, 7) == -1);
    /* q 2/3: h = 2, exactly x[2] = -2 */
    assert_true(fabs(route_logprob_quantile(a, 4, 2.0 / 3.0) - (-2.0)) < 1e-6);
    const float b[] = {-0.5f, -0.1f, -2.0f, -0.3f, -1.0f};
    /* sorted -2 -1 -0.5 -0.3 -0.1; q 0.25: h = 1, -1; q 0.9: h = 3.6, -0.3 + 0.6 * 0.2 = -0.18 */
    assert_true(fabs(route_logprob_quantile(b, 5, 0.25) - (-1.0)) < 1e-6);
    assert_true(fabs(route_logprob_quantile(b, 5, 0.9) - (-0.18)) < 1e-6);
    const float one[] = {-0.7f};
    assert_true(fabs(route_logprob_quantile(one, 1, 0.3) - (-0.7)) < 1e-6);
    assert_true(isnan(route_logprob_quantile(one, 0, 0.5)));
    /* 100 values -i/10 (i = 0..99), more than the 64 kept on the stack: sorted -9.9 .. 0; q 0.1: h = 9.9,
       x[9] = -9.0, x[10] = -8.9: -9.0 + 0.9 * 0.1 = -8.91 */
    float c[100];
    for (int i = 0; i < 100; i++) c[i] = -(float)i / 10.0f;
    assert_true(fabs(route_logprob_quantile(c, 100, 0.1) - (-8.91)) < 1e-5);
    /* -inf: an interpolation that touches it is -inf; NaN is dropped */
    const float d[] = {-INFINITY, -1};
    assert_true(isinf(route_logprob_quantile(d, 2, 0.5)) && route_logprob_quantile(d, 2, 0.5) < 0);
    assert_true(route_logprob_quantile(d, 2, 1) == -1);
    const float e[] = {NAN, -1, -3};
    /* without the NaN: sorted -3 -1, q 0.5: h = 0.5, -2 */
    assert_true(fabs(route_logprob_quantile(e, 3, 0.5) - (-2.0)) < 1e-6);
    const double s[] = {-5, -4, -1};
    /* q 0.75: h = 1.5, -4 + 0.5 * 3 = -2.5 */
    assert_true(fabs(route_quantile_sorted(s, 3, 0.75) - (-2.5)) < 1e-12);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decision_table),
        cmocka_unit_test(test_attempts_are_usable_and_distinct),
        cmocka_unit_test(test_plan_json),
        cmocka_unit_test(test_latency),
        cmocka_unit_test(test_quantile),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
