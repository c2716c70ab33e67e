/* Fuzzes the router's config parser, then the decision over the configs it accepts (a few request and
 * backend-state combinations derived from the input) and the plan's JSON. Aborts when an accepted config
 * breaks what route.h promises, when a plan tries a backend that was set aside, or when a message
 * carries the API key (the variable is set to a sentinel the inputs may also paste anywhere). The key
 * counts as one only where a remote names its variable; the config's own names (object keys) are quoted
 * in paths, so an input that names a backend after the key is not held against the parser. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "route/route.h"

#define SENTINEL "sk-fuzz-SENTINEL-7731"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_config(const route_config *cfg) {
    if (cfg->n_backends < 1 || cfg->n_backends > ROUTE_MAX_BACKENDS || cfg->n_rules < 0 || cfg->n_rules > ROUTE_MAX_RULES)
        abort();
    int n_local = 0;
    for (int32_t i = 0; i < cfg->n_backends; i++) {
        const route_backend *b = &cfg->backends[i];
        if (!b->name[0] || strlen(b->name) >= ROUTE_NAME_MAX) abort();
        if (b->kind == ROUTE_BACKEND_LOCAL) {
            n_local++;
            if (!b->model_path) abort();
        } else {
            if (!b->url || (strncmp(b->url, "http://", 7) && strncmp(b->url, "https://", 8))) abort();
            if (b->timeout.connect_ms < 1 || b->timeout.first_token_ms > b->timeout.total_ms ||
                b->timeout.connect_ms > b->timeout.total_ms)
                abort();
        }
    }
    if (n_local > 1) abort();
    for (int32_t k = 0; k < cfg->n_rules; k++) {
        const route_rule *r = &cfg->rules[k];
        if (r->config_index != k) abort();
        if (r->confidence) {
            if (r->conf_backend < 0 || r->conf_backend >= cfg->n_backends || r->conf_else_backend < 0 ||
                r->conf_else_backend >= cfg->n_backends || r->conf_first_tokens < 1 || !(r->conf_min_logprob <= 0))
                abort();
        } else if (r->use == ROUTE_USE_BACKEND && (r->backend < 0 || r->backend >= cfg->n_backends)) {
            abort();
        }
        for (int32_t i = 0; i < r->n_fallback; i++)
            if (r->fallback[i] < 0 || r->fallback[i] >= cfg->n_backends) abort();
    }
}

static bool must_not_quote(const uint8_t *data, size_t size);

static void decide_some(const route_config *cfg, const uint8_t *data, size_t size) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < size; i++) h = (h ^ data[i]) * 16777619u;
    static const char *const routes[] = {NULL, "local", "remote", "cloud", "x"};
    static const char *const segs[] = {NULL, "pro", "free, pro", ""};
    for (int round = 0; round < 4; round++, h = h * 1103515245u + 12345u) {
        route_backend_state st[ROUTE_MAX_BACKENDS];
        memset(st, 0, sizeof st);
        for (int32_t i = 0; i < cfg->n_backends; i++) {
            uint32_t bits = h >> (i % 16);
            st[i].available = bits & 1;
            st[i].capable = bits & 2;
            st[i].n_ctx = (bits & 4) ? (int32_t)(h % 5000) : 0;
            st[i].latency = (route_latency){.fixed_s = 0.01, .prefill_s_per_token = 0.001, .decode_s_per_token = 0.01 * (round + 1),
                                            .ewma_ttft_s = 0.3, .ewma_s_per_token = 0.02, .n_observed = (bits & 8) ? 3 : 0};
        }
        route_request_info req = {.prompt_tokens = (int32_t)(h % 4000), .max_tokens = (h & 16) ? (int32_t)(h % 300) : -1,
                                  .user = (h & 32) ? "alice" : NULL, .segment = segs[(h >> 6) % 4],
                                  .route = routes[(h >> 8) % 5], .max_latency_ms = (h & 64) ? (double)(h % 1000) : 0};
        route_plan plan;
        route_decide(cfg, st, &req, &plan);
        if (!plan.reason[0] || strlen(plan.reason) >= sizeof plan.reason) abort();
        if (plan.http_status != 0 && plan.n_attempts != 0) abort();
        if (plan.http_status == 0 && plan.n_attempts < 1) abort();
        for (int32_t i = 0; i < plan.n_attempts; i++) {
            int32_t b = plan.attempts[i];
            if (b < 0 || b >= cfg->n_backends || !st[b].available) abort();
            if (cfg->backends[b].kind == ROUTE_BACKEND_LOCAL && !st[b].capable) abort();
        }
        char *json = route_plan_json(cfg, &plan);
        if (!json) abort();
        if (strstr(json, SENTINEL) && must_not_quote(data, size)) abort();
        free(json);
    }
}

static bool key_in_object_keys(const json_t *v, int depth) {
    if (depth > 32) return false;
    const char *key;
    json_t *child;
    size_t i;
    if (json_is_object(v)) {
        json_object_foreach((json_t *)v, key, child) {
            if (strstr(key, SENTINEL) || key_in_object_keys(child, depth + 1)) return true;
        }
    } else if (json_is_array(v)) {
        json_array_foreach(v, i, child) if (key_in_object_keys(child, depth + 1)) return true;
    }
    return false;
}

/* Whether a message quoting the sentinel would leak a key: the input parses, some remote backend takes its
 * key from CLOUD_API_KEY, and no object key holds the sentinel. Unparsable input: always checked. */
static bool must_not_quote(const uint8_t *data, size_t size) {
    if (route_json_depth((const char *)data, size, 16) > 16) return true;
    json_t *root = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, NULL);
    if (!root) return true;
    bool loaded = false;
    const char *name;
    json_t *b;
    json_object_foreach(json_object_get(root, "backends"), name, b) {
        json_t *env = json_object_get(b, "api_key_env");
        if (json_object_get(b, "url") && json_is_string(env) && !strcmp(json_string_value(env), "CLOUD_API_KEY")) loaded = true;
    }
    bool check = loaded && !key_in_object_keys(root, 0);
    json_decref(root);
    return check;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int env_set;
    if (!env_set) {
        setenv("CLOUD_API_KEY", SENTINEL, 1);
        env_set = 1;
    }
    route_config cfg;
    kite_error e = {0};
    if (route_config_parse((const char *)data, size, "dir", &cfg, &e) == KITE_OK) {
        check_config(&cfg);
        decide_some(&cfg, data, size);
        route_config_free(&cfg);
    } else {
        if (!e.msg[0] || strchr(e.msg, '\n')) abort();
        if (strstr(e.msg, SENTINEL) && must_not_quote(data, size)) abort();
        if (cfg.n_backends != 0) abort();
    }
    return 0;
}
