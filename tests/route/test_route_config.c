/* The router's config parser: the example parses with the right fields, every optional key lands
 * where route.h says, relative paths resolve against the config's folder, and each bad input is refused
 * with a message naming its JSON path and never quoting an API key. */
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

#define SECRET "sk-live-SENTINEL-9f8e7d"

/* The example, as written there. */
static const char EXAMPLE[] =
    "{\"backends\": {\n"
    "   \"local\": {\"model\": \"models/qwen3-0.6b-q4_k_m.gguf\"},\n"
    "   \"cloud\": {\"url\": \"http://127.0.0.1:9000/v1\", \"model\": \"big\", \"api_key_env\": \"CLOUD_API_KEY\",\n"
    "             \"timeout_ms\": {\"connect\": 2000, \"first_token\": 10000, \"total\": 120000}}},\n"
    " \"rules\": [\n"
    "   {\"when\": {\"prompt_tokens_over\": 1500}, \"use\": \"cloud\"},\n"
    "   {\"when\": {\"segment\": [\"pro\"]}, \"use\": \"cloud\"},\n"
    "   {\"when\": {\"max_latency_ms_under\": 300}, \"use\": \"fastest\"},\n"
    "   {\"confidence\": {\"first_tokens\": 8, \"quantile\": 0.1, \"min_logprob\": -3.0}, \"else\": \"cloud\"},\n"
    "   {\"use\": \"local\", \"fallback\": \"cloud\"}]}\n";

static int setup(void **state) {
    (void)state;
    setenv("CLOUD_API_KEY", SECRET, 1);
    unsetenv("KITE_TEST_UNSET_VARIABLE");
    setenv("KITE_TEST_EMPTY_VARIABLE", "", 1);
    return 0;
}

static void test_example(void **state) {
    (void)state;
    route_config cfg;
    kite_error e = {0};
    assert_int_equal(route_config_parse(EXAMPLE, strlen(EXAMPLE), "/etc/kite", &cfg, &e), KITE_OK);
    assert_int_equal(cfg.n_backends, 2);
    const route_backend *l = &cfg.backends[0], *c = &cfg.backends[1];
    assert_string_equal(l->name, "local");
    assert_int_equal(l->kind, ROUTE_BACKEND_LOCAL);
    assert_string_equal(l->model_path, "/etc/kite/models/qwen3-0.6b-q4_k_m.gguf");
    assert_null(l->tokenizer_path);
    assert_int_equal(l->n_ctx, 0);
    assert_string_equal(c->name, "cloud");
    assert_int_equal(c->kind, ROUTE_BACKEND_REMOTE);
    assert_string_equal(c->url, "http://127.0.0.1:9000/v1");
    assert_string_equal(c->remote_model, "big");
    assert_string_equal(c->api_key_env, "CLOUD_API_KEY");
    assert_string_equal(c->api_key, SECRET);
    assert_int_equal(c->timeout.connect_ms, 2000);
    assert_int_equal(c->timeout.first_token_ms, 10000);
    assert_int_equal(c->timeout.total_ms, 120000);
    assert_int_equal(c->max_context, 0);
    assert_int_equal(c->max_retries, 2);
    assert_int_equal(c->retry_base_ms, 200);
    assert_int_equal(c->failures_to_cooldown, 3);
    assert_int_equal(c->cooldown_ms, 30000);
    assert_false(c->require_reachable);
    assert_int_equal(route_config_backend(&cfg, "cloud"), 1);
    assert_int_equal(route_config_backend(&cfg, "nope"), -1);

    assert_int_equal(cfg.n_rules, 5);
    const route_rule *r = cfg.rules;
    assert_int_equal(r[0].prompt_tokens_over, 1500);
    assert_int_equal(r[0].prompt_tokens_under, -1);
    assert_int_equal(r[0].n_segments, 0);
    assert_true(r[0].max_latency_ms_under < 0);
    assert_int_equal(r[0].use, ROUTE_USE_BACKEND);
    assert_int_equal(r[0].backend, 1);
    assert_int_equal(r[0].n_fallback, -1);
    assert_false(r[0].confidence);
    assert_int_equal(r[1].n_segments, 1);
    assert_string_equal(r[1].segments[0], "pro");
    assert_int_equal(r[1].backend, 1);
    assert_int_equal(r[1].prompt_tokens_over, -1);
    assert_true(r[2].max_latency_ms_under == 300.0);
    assert_int_equal(r[2].use, ROUTE_USE_FASTEST);
    assert_true(r[3].confidence);
    assert_int_equal(r[3].backend, -1);
    assert_int_equal(r[3].conf_first_tokens, 8);
    assert_true(r[3].conf_quantile == 0.1);
    assert_true(r[3].conf_min_logprob == -3.0);
    assert_int_equal(r[3].conf_backend, 0);
    assert_int_equal(r[3].conf_else_backend, 1);
    assert_int_equal(r[4].backend, 0);
    assert_int_equal(r[4].n_fallback, 1);
    assert_int_equal(r[4].fallback[0], 1);
    for (int i = 0; i < 5; i++) assert_int_equal(r[i].config_index, i);

    assert_true(cfg.allow_explicit);
    assert_string_equal(cfg.segment_header, "x-kite-segment");
    assert_int_equal(cfg.n_users, 0);
    assert_true(cfg.default_max_latency_ms == 0);
    assert_int_equal(cfg.default_max_tokens, 256);
    assert_string_equal(cfg.config_dir, "/etc/kite");
    route_config_free(&cfg);
    route_config_free(&cfg); /* freed twice: the struct was zeroed */
}

/* Every optional key the header comment documents, read into its field. */
static void test_all_keys(void **state) {
    (void)state;
    static const char json[] =
        "{\"backends\": {"
        "  \"dev\": {\"model\": \"/abs/m.bin\", \"tokenizer\": \"tok.bin\", \"ctx\": 1024, \"threads\": 3, \"min_decode_tok_s\": 12.5},"
        "  \"a\": {\"url\": \"https://api.example.com/v1/\", \"max_context\": 32768, \"max_retries\": 4, \"retry_base_ms\": 50,"
        "         \"failures_to_cooldown\": 5, \"cooldown_ms\": 1000, \"require_reachable\": true,"
        "         \"timeout_ms\": {\"first_token\": 500}},"
        "  \"b\": {\"url\": \"http://10.0.0.2:8000\", \"timeout_ms\": {\"total\": 1500}}},"
        " \"explicit\": false,"
        " \"segments\": {\"header\": \"X-Plan\", \"users\": {\"alice\": [\"pro\", \"beta\"], \"bob@example.com\": [\"free\"]}},"
        " \"defaults\": {\"max_latency_ms\": 1500, \"max_tokens\": 64},"
        " \"rules\": ["
        "  {\"when\": {\"prompt_tokens_under\": 20, \"segment\": [\"free\", \"x:y\"]}, \"use\": \"b\", \"fallback\": [\"a\", \"dev\"]},"
        "  {\"confidence\": {\"min_logprob\": -2.5}, \"use\": \"dev\", \"else\": \"a\", \"fallback\": []}]}";
    route_config cfg;
    kite_error e = {0};
    assert_int_equal(route_config_parse(json, strlen(json), "cfgdir", &cfg, &e), KITE_OK);
    const route_backend *d = &cfg.backends[0], *a = &cfg.backends[1], *b = &cfg.backends[2];
    assert_string_equal(d->model_path, "/abs/m.bin"); /* absolute: kept */
    assert_string_equal(d->tokenizer_path, "cfgdir/tok.bin");
    assert_int_equal(d->n_ctx, 1024);
    assert_int_equal(d->n_threads, 3);
    assert_true(d->min_decode_tok_s == 12.5);
    assert_string_equal(a->url, "https://api.example.com/v1"); /* the trailing slash dropped */
    assert_null(a->remote_model);
    assert_null(a->api_key_env);
    assert_null(a->api_key);
    assert_int_equal(a->max_context, 32768);
    assert_int_equal(a->max_retries, 4);
    assert_int_equal(a->retry_base_ms, 50);
    assert_int_equal(a->failures_to_cooldown, 5);
    assert_int_equal(a->cooldown_ms, 1000);
    assert_true(a->require_reachable);
    assert_int_equal(a->timeout.connect_ms, 2000); /* the others keep their defaults */
    assert_int_equal(a->timeout.first_token_ms, 500);
    assert_int_equal(a->timeout.total_ms, 120000);
    assert_string_equal(b->url, "http://10.0.0.2:8000");
    /* a total below the defaults: connect and first_token default to it rather than fail */
    assert_int_equal(b->timeout.total_ms, 1500);
    assert_int_equal(b->timeout.connect_ms, 1500);
    assert_int_equal(b->timeout.first_token_ms, 1500);
    assert_false(cfg.allow_explicit);
    assert_string_equal(cfg.segment_header, "x-plan"); /* header names compare lowercased */
    assert_int_equal(cfg.n_users, 2);
    assert_string_equal(cfg.user_names[0], "alice");
    assert_int_equal(cfg.user_n_tags[0], 2);
    assert_string_equal(cfg.user_tags[0][1], "beta");
    assert_string_equal(cfg.user_names[1], "bob@example.com");
    assert_string_equal(cfg.user_tags[1][0], "free");
    assert_true(cfg.default_max_latency_ms == 1500);
    assert_int_equal(cfg.default_max_tokens, 64);
    assert_int_equal(cfg.rules[0].prompt_tokens_under, 20);
    assert_int_equal(cfg.rules[0].n_segments, 2);
    assert_string_equal(cfg.rules[0].segments[1], "x:y");
    assert_int_equal(cfg.rules[0].backend, 2);
    assert_int_equal(cfg.rules[0].n_fallback, 2);
    assert_int_equal(cfg.rules[0].fallback[0], 1);
    assert_int_equal(cfg.rules[0].fallback[1], 0);
    const route_rule *c = &cfg.rules[1];
    assert_true(c->confidence);
    assert_int_equal(c->conf_first_tokens, 8); /* defaults */
    assert_true(c->conf_quantile == 0.1);
    assert_true(c->conf_min_logprob == -2.5);
    assert_int_equal(c->conf_backend, 0);
    assert_int_equal(c->conf_else_backend, 1);
    assert_int_equal(c->n_fallback, 0); /* [] = no fallback at all */
    route_config_free(&cfg);
}

static void test_load_resolves_against_the_folder(void **state) {
    (void)state;
    char dir[] = "/tmp/kite_route_cfg_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/router.json", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(EXAMPLE, f);
    fclose(f);
    route_config cfg;
    kite_error e = {0};
    assert_int_equal(route_config_load(path, &cfg, &e), KITE_OK);
    char want[300];
    snprintf(want, sizeof want, "%s/models/qwen3-0.6b-q4_k_m.gguf", dir);
    assert_string_equal(cfg.backends[0].model_path, want);
    route_config_free(&cfg);
    /* A missing file names itself. */
    snprintf(path, sizeof path, "%s/missing.json", dir);
    assert_int_equal(route_config_load(path, &cfg, &e), KITE_ERR_IO);
    assert_non_null(strstr(e.msg, "missing.json"));
    /* Larger than 1 MiB. */
    snprintf(path, sizeof path, "%s/big.json", dir);
    f = fopen(path, "w");
    assert_non_null(f);
    for (int i = 0; i < (1 << 20) + 10; i++) fputc(' ', f);
    fclose(f);
    assert_int_equal(route_config_load(path, &cfg, &e), KITE_ERR_INVALID_ARG);
    assert_non_null(strstr(e.msg, "1 MiB"));
    unlink(path);
    snprintf(path, sizeof path, "%s/router.json", dir);
    unlink(path);
    rmdir(dir);
}

typedef struct bad_case {
    const char *json;
    const char *want; /* a substring of the message: the path and what is wrong */
} bad_case;

#define REMOTE "\"cloud\": {\"url\": \"http://h:1/v1\"}"
#define LOCAL "\"local\": {\"model\": \"m.gguf\"}"
#define TWO "{\"backends\": {" LOCAL ", " REMOTE "}"

static const bad_case BAD[] = {
    {"[]", "router config: expected a JSON object at the top"},
    {"{\"backendz\": {}}", "router config: (top level): unknown key \"backendz\""},
    {"{}", "router config: backends: required"},
    {"{\"backends\": []}", "router config: backends: expected an object of 1 to 16 named backends"},
    {"{\"backends\": {}}", "router config: backends: expected an object of 1 to 16"},
    {"{\"backends\": {\"x\": {}}}", "router config: backends.x: needs \"model\""},
    {"{\"backends\": {\"x\": 3}}", "router config: backends.x: expected an object"},
    {"{\"backends\": {\"a b\": {\"model\": \"m\"}}}", "router config: backends (entry 0): a backend's name"},
    {"{\"backends\": {\"fastest\": {\"model\": \"m\"}}}", "router config: backends.fastest: \"fastest\" is reserved"},
    {"{\"backends\": {\"local\": {\"url\": \"http://h\"}}}", "router config: backends.local: a remote backend cannot be named"},
    {"{\"backends\": {\"remote\": {\"model\": \"m\"}}}", "router config: backends.remote: a local backend cannot be named"},
    {"{\"backends\": {\"local\": {\"model\": \"m\", \"foo\": 1}}}", "router config: backends.local: unknown key \"foo\""},
    {"{\"backends\": {\"local\": {\"model\": 7}}}", "router config: backends.local.model: expected a non-empty string"},
    {"{\"backends\": {\"local\": {\"model\": \"\"}}}", "router config: backends.local.model: expected a non-empty string"},
    {"{\"backends\": {\"local\": {\"model\": \"m\", \"max_context\": 9}}}", "router config: backends.local.max_context: only for a remote backend"},
    {"{\"backends\": {\"local\": {\"model\": \"m\", \"ctx\": 8}}}", "router config: backends.local.ctx: expected 0 (the model's) or at least 16"},
    {"{\"backends\": {\"local\": {\"model\": \"m\", \"ctx\": -1}}}", "router config: backends.local.ctx: expected an integer in [0, 4194304]"},
    {"{\"backends\": {\"local\": {\"model\": \"m\", \"threads\": 2.5}}}", "router config: backends.local.threads: expected an integer"},
    {"{\"backends\": {\"local\": {\"model\": \"m\", \"min_decode_tok_s\": -1}}}", "router config: backends.local.min_decode_tok_s: expected a number >= 0"},
    {"{\"backends\": {\"l1\": {\"model\": \"m\"}, \"l2\": {\"model\": \"n\"}}}", "router config: backends.l2: more than one local backend is not supported yet"},
    {"{\"backends\": {\"cloud\": {\"url\": \"ftp://h/v1\"}}}", "router config: backends.cloud.url: expected a URL starting with http:// or https://"},
    {"{\"backends\": {\"cloud\": {\"url\": \"http://\"}}}", "router config: backends.cloud.url: the URL has no host"},
    {"{\"backends\": {\"cloud\": {\"url\": \"http://a b\"}}}", "router config: backends.cloud.url: the URL holds a space"},
    {"{\"backends\": {\"cloud\": {\"url\": 5}}}", "router config: backends.cloud.url: expected a non-empty string"},
    {"{\"backends\": {\"cloud\": {\"url\": \"http://h\", \"ctx\": 5}}}", "router config: backends.cloud.ctx: only for a local backend"},
    {"{\"backends\": {\"cloud\": {\"url\": \"http://h\", \"api_key_env\": \"KITE_TEST_UNSET_VARIABLE\"}}}",
     "router config: backends.cloud.api_key_env: the environment variable KITE_TEST_UNSET_VARIABLE (the API key) is not set"},
    {"{\"backends\": {\"cloud\": {\"url\": \"http://h\", \"api_key_env\": \"KITE_TEST_EMPTY_VARIABLE\"}}}",
     "router config: backends.cloud.api_key_env: the environment variable KITE_TEST_EMPTY_VARIABLE (the API key) is empty"},
    {"{\"backends\": {\"cloud\": {\"url\": \"http://h\", \"api_key_env\": \"A-B\"}}}", "router config: backends.cloud.api_key_env: expected an environment variable's name"},
    {"{\"backends\": {\"cloud\": {\"url\": \"http://h\", \"timeout_ms\": 5}}}", "router config: backends.cloud.timeout_ms: expected an object"},
    {"{\"backends\": {\"cloud\": {\"url\": \"http://h\", \"timeout_ms\": {\"connect\": \"2s\"}}}}", "router config: backends.cloud.timeout_ms.connect: expected an integer in [1, 86400000]"},
    {"{\"backends\": {\"cloud\": {\"url\": \"http://h\", \"timeout_ms\": {\"total\": 0}}}}", "router config: backends.cloud.timeout_ms.total: expected an integer in [1, 86400000]"},
    {"{\"backends\": {\"cloud\": {\"url\": \"http://h\", \"timeout_ms\": {\"first_token\": 5000, \"total\": 1000}}}}", "router config: backends.cloud.timeout_ms.first_token: larger than the total timeout"},
    {"{\"backends\": {\"cloud\": {\"url\": \"http://h\", \"timeout_ms\": {\"connect\": 5000, \"total\": 1000}}}}", "router config: backends.cloud.timeout_ms.connect: larger than the total timeout"},
    {"{\"backends\": {\"cloud\": {\"url\": \"http://h\", \"timeout_ms\": {\"read\": 5}}}}", "router config: backends.cloud.timeout_ms: unknown key \"read\""},
    {"{\"backends\": {\"cloud\": {\"url\": \"http://h\", \"max_retries\": 11}}}", "router config: backends.cloud.max_retries: expected an integer in [0, 10]"},
    {"{\"backends\": {\"cloud\": {\"url\": \"http://h\", \"failures_to_cooldown\": 0}}}", "router config: backends.cloud.failures_to_cooldown: expected an integer in [1, 1000]"},
    {"{\"backends\": {\"cloud\": {\"url\": \"http://h\", \"require_reachable\": 1}}}", "router config: backends.cloud.require_reachable: expected true or false"},
    {TWO ", \"explicit\": \"yes\"}", "router config: explicit: expected true or false"},
    {TWO ", \"rules\": {}}", "router config: rules: expected an array of at most 64 rules"},
    {TWO ", \"rules\": [5]}", "router config: rules[0]: expected an object"},
    {TWO ", \"rules\": [{\"when\": {\"prompt_tokens_over\": 5}}]}", "router config: rules[0]: needs \"use\""},
    {TWO ", \"rules\": [{\"use\": \"clod\"}]}", "router config: rules[0].use: no backend named \"clod\" (backends: local, cloud)"},
    {TWO ", \"rules\": [{\"use\": 4}]}", "router config: rules[0].use: expected a backend's name"},
    {TWO ", \"rules\": [{\"use\": \"cloud\", \"if\": {}}]}", "router config: rules[0]: unknown key \"if\""},
    {TWO ", \"rules\": [{\"use\": \"cloud\"}, {\"use\": \"cloud\"}, {\"use\": \"cloud\"}, {\"when\": {\"segment\": \"pro\"}, \"use\": \"cloud\"}]}",
     "router config: rules[3].when.segment: expected an array of strings"},
    {TWO ", \"rules\": [{\"when\": {\"segment\": [\"pro\", 3]}, \"use\": \"cloud\"}]}", "router config: rules[0].when.segment: expected an array of strings"},
    {TWO ", \"rules\": [{\"when\": {\"segment\": []}, \"use\": \"cloud\"}]}", "router config: rules[0].when.segment: expected an array of strings"},
    {TWO ", \"rules\": [{\"when\": {\"segment\": [\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\",\"j\",\"k\",\"l\",\"m\",\"n\",\"o\",\"p\",\"q\"]}, \"use\": \"cloud\"}]}",
     "router config: rules[0].when.segment: expected an array of strings (1 to 16"},
    {TWO ", \"rules\": [{\"when\": {\"segment\": [\"a b\"]}, \"use\": \"cloud\"}]}", "router config: rules[0].when.segment[0]: a segment tag is"},
    {TWO ", \"rules\": [{\"when\": {\"prompt_tokens_over\": -5}, \"use\": \"cloud\"}]}", "router config: rules[0].when.prompt_tokens_over: expected an integer in [0,"},
    {TWO ", \"rules\": [{\"when\": {\"prompt_tokens_under\": 0}, \"use\": \"cloud\"}]}", "router config: rules[0].when.prompt_tokens_under: expected an integer in [1,"},
    {TWO ", \"rules\": [{\"when\": {\"max_latency_ms_under\": 0}, \"use\": \"cloud\"}]}", "router config: rules[0].when.max_latency_ms_under: expected a number > 0"},
    {TWO ", \"rules\": [{\"when\": {\"max_latency\": 10}, \"use\": \"cloud\"}]}", "router config: rules[0].when: unknown key \"max_latency\""},
    {TWO ", \"rules\": [{\"when\": [], \"use\": \"cloud\"}]}", "router config: rules[0].when: expected an object"},
    {TWO ", \"rules\": [{\"confidence\": {\"min_logprob\": -3}}]}", "router config: rules[0].else: required with \"confidence\""},
    {TWO ", \"rules\": [{\"use\": \"local\", \"else\": \"cloud\"}]}", "router config: rules[0].else: only with \"confidence\""},
    {TWO ", \"rules\": [{\"confidence\": {}, \"else\": \"cloud\"}]}", "router config: rules[0].confidence: needs \"min_logprob\""},
    {TWO ", \"rules\": [{\"confidence\": {\"min_logprob\": 0.5}, \"else\": \"cloud\"}]}", "router config: rules[0].confidence.min_logprob: expected a number <= 0"},
    {TWO ", \"rules\": [{\"confidence\": {\"min_logprob\": -1, \"quantile\": 1.5}, \"else\": \"cloud\"}]}", "router config: rules[0].confidence.quantile: expected a number in [0, 1]"},
    {TWO ", \"rules\": [{\"confidence\": {\"min_logprob\": -1, \"first_tokens\": 0}, \"else\": \"cloud\"}]}", "router config: rules[0].confidence.first_tokens: expected an integer in [1, 256]"},
    {TWO ", \"rules\": [{\"confidence\": {\"min_logprob\": -1, \"k\": 0}, \"else\": \"cloud\"}]}", "router config: rules[0].confidence: unknown key \"k\""},
    {TWO ", \"rules\": [{\"confidence\": {\"min_logprob\": -1}, \"else\": \"cloud\", \"use\": \"cloud\"}]}", "router config: rules[0].use: a confidence gate runs on a local backend"},
    {TWO ", \"rules\": [{\"confidence\": {\"min_logprob\": -1}, \"else\": \"local\"}]}", "router config: rules[0].else: names the backend the gate runs on"},
    {"{\"backends\": {" REMOTE "}, \"rules\": [{\"confidence\": {\"min_logprob\": -1}, \"else\": \"cloud\"}]}", "router config: rules[0].confidence: a confidence gate needs a local backend"},
    {TWO ", \"rules\": [{\"use\": \"local\", \"fallback\": [\"cloud\", \"nope\"]}]}", "router config: rules[0].fallback[1]: no backend named \"nope\""},
    {TWO ", \"rules\": [{\"use\": \"local\", \"fallback\": [\"cloud\", \"cloud\"]}]}", "router config: rules[0].fallback[1]: names a backend twice"},
    {TWO ", \"rules\": [{\"use\": \"local\", \"fallback\": 3}]}", "router config: rules[0].fallback: expected a backend's name or an array of names"},
    {TWO ", \"rules\": [{\"use\": \"local\", \"fallback\": [\"cloud\",\"cloud\",\"cloud\",\"cloud\",\"cloud\",\"cloud\",\"cloud\",\"cloud\",\"cloud\"]}]}", "router config: rules[0].fallback: at most 8 backends"},
    {TWO ", \"segments\": []}", "router config: segments: expected an object"},
    {TWO ", \"segments\": {\"header\": \"x plan\"}}", "router config: segments.header: expected an HTTP header name"},
    {TWO ", \"segments\": {\"users\": {\"alice\": \"pro\"}}}", "router config: segments.users.alice: expected an array of strings"},
    {TWO ", \"segments\": {\"users\": []}}", "router config: segments.users: expected an object"},
    {TWO ", \"segments\": {\"groups\": {}}}", "router config: segments: unknown key \"groups\""},
    {TWO ", \"defaults\": {\"max_tokens\": 0}}", "router config: defaults.max_tokens: expected an integer in [1, 16777216]"},
    {TWO ", \"defaults\": {\"max_latency_ms\": -3}}", "router config: defaults.max_latency_ms: expected a number > 0"},
    {TWO ", \"defaults\": {\"temperature\": 1}}", "router config: defaults: unknown key \"temperature\""},
    {"{\"backends\": {" LOCAL "}\n  , }", "router config: line 2, column"},
    {"{\"backends\": {" LOCAL "}, \"backends\": {}}", "router config: line 1, column"},
    {"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]", "router config: nested more than 16 levels deep"},
    {"", "router config: line"},
};

static void test_errors_name_the_path(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof BAD / sizeof *BAD; i++) {
        route_config cfg;
        kite_error e = {0};
        int rc = route_config_parse(BAD[i].json, strlen(BAD[i].json), NULL, &cfg, &e);
        if (rc != KITE_ERR_INVALID_ARG || !strstr(e.msg, BAD[i].want))
            fail_msg("case %zu: %s\n  got %d: %s\n  want: %s", i, BAD[i].json, rc, e.msg, BAD[i].want);
        assert_null(strchr(e.msg, '\n'));
        /* Nothing is left to free after a failure. */
        assert_int_equal(cfg.n_backends, 0);
        assert_null(cfg.segment_header);
    }
}

static void test_limits(void **state) {
    (void)state;
    char *big = malloc(ROUTE_MAX_CONFIG_BYTES + 2);
    assert_non_null(big);
    memset(big, ' ', ROUTE_MAX_CONFIG_BYTES + 1);
    route_config cfg;
    kite_error e = {0};
    assert_int_equal(route_config_parse(big, ROUTE_MAX_CONFIG_BYTES + 1, NULL, &cfg, &e), KITE_ERR_INVALID_ARG);
    assert_non_null(strstr(e.msg, "1 MiB"));
    /* 65 rules, 17 backends. */
    size_t at = (size_t)sprintf(big, TWO ", \"rules\": [");
    for (int i = 0; i < 65; i++) at += (size_t)sprintf(big + at, "%s{\"use\": \"local\"}", i ? "," : "");
    sprintf(big + at, "]}");
    assert_int_equal(route_config_parse(big, strlen(big), NULL, &cfg, &e), KITE_ERR_INVALID_ARG);
    assert_non_null(strstr(e.msg, "rules: expected an array of at most 64 rules"));
    at = (size_t)sprintf(big, "{\"backends\": {");
    for (int i = 0; i < 17; i++) at += (size_t)sprintf(big + at, "%s\"r%d\": {\"url\": \"http://h\"}", i ? "," : "", i);
    sprintf(big + at, "}}");
    assert_int_equal(route_config_parse(big, strlen(big), NULL, &cfg, &e), KITE_ERR_INVALID_ARG);
    assert_non_null(strstr(e.msg, "backends: expected an object of 1 to 16"));
    /* 64 rules and 16 backends are fine. */
    at = (size_t)sprintf(big, "{\"backends\": {");
    for (int i = 0; i < 16; i++) at += (size_t)sprintf(big + at, "%s\"r%d\": {\"url\": \"http://h\"}", i ? "," : "", i);
    at += (size_t)sprintf(big + at, "}, \"rules\": [");
    for (int i = 0; i < 64; i++) at += (size_t)sprintf(big + at, "%s{\"use\": \"r%d\"}", i ? "," : "", i % 16);
    sprintf(big + at, "]}");
    assert_int_equal(route_config_parse(big, strlen(big), NULL, &cfg, &e), KITE_OK);
    assert_int_equal(cfg.n_backends, 16);
    assert_int_equal(cfg.n_rules, 64);
    assert_int_equal(cfg.rules[63].backend, 15);
    route_config_free(&cfg);
    free(big);
}

/* The API key (the variable's value) never appears in a message, wherever it is pasted by mistake. */
static void test_key_never_in_errors(void **state) {
    (void)state;
    static const char *const cases[] = {
        "{\"backends\": {\"cloud\": {\"url\": \"http://h\", \"api_key\": \"" SECRET "\"}}}",
        "{\"backends\": {\"cloud\": {\"url\": \"" SECRET "\"}}}",
        "{\"backends\": {\"cloud\": {\"url\": \"http://h\", \"api_key_env\": \"" SECRET "\"}}}",
        "{\"backends\": " SECRET "}",
        "{\"backends\": {\"cloud\": {\"url\": \"http://h\"}}, \"rules\": [{\"use\": " SECRET "}]}",
        "{\"backends\": {\"cloud\": {\"url\": \"http://h\"}}, \"rules\": [{\"use\": \"x\" " SECRET "}]}",
        "{\"backends\": {\"cloud\": {\"url\": \"http://h\", \"model\": \"" SECRET "\", \"timeout_ms\": \"" SECRET "\"}}}",
        /* the key named right, then pasted as a backend's name in a rule */
        "{\"backends\": {\"cloud\": {\"url\": \"http://h\", \"api_key_env\": \"CLOUD_API_KEY\"}}, \"rules\": [{\"use\": \"" SECRET "\"}]}",
        "{\"backends\": {\"cloud\": {\"url\": \"http://h\", \"api_key_env\": \"CLOUD_API_KEY\", \"max_context\": -1}}}",
        "{\"backends\": {\"cloud\": {\"url\": \"http://h\", \"api_key_env\": \"CLOUD_API_KEY\"}}, \"rules\": [{\"use\": \"cloud\", \"fallback\": [\"" SECRET "\"]}]}",
        "{\"" SECRET "\": 1}",
        /* a name holding the key */
        "{\"backends\": {\"cloud\": {\"url\": \"http://h\", \"api_key_env\": \"CLOUD_API_KEY\"}}, \"rules\": [{\"use\": \"x" SECRET "\"}]}",
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        route_config cfg;
        kite_error e = {0};
        int rc = route_config_parse(cases[i], strlen(cases[i]), NULL, &cfg, &e);
        assert_int_equal(rc, KITE_ERR_INVALID_ARG);
        if (strstr(e.msg, SECRET) || strstr(e.msg, "SENTINEL")) fail_msg("case %zu leaks the key: %s", i, e.msg);
        assert_non_null(strstr(e.msg, "router config: "));
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_example),
        cmocka_unit_test(test_all_keys),
        cmocka_unit_test(test_load_resolves_against_the_folder),
        cmocka_unit_test(test_errors_name_the_path),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_key_never_in_errors),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
