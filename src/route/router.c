/* The public kite_router (kite.h): the config loaded, the local model opened and timed, one upstream client
 * per remote probed once, and the per-request pieces the server and `kite route` share: the backends'
 * states, a request body's routing facts (its prompt counted with the local tokenizer), the decision as
 * JSON (explain), and the offline calibration of a confidence gate.
 *
 * Device capability, judged once at open: the local model is "capable" unless its weights exceed the
 * memory available before it was opened (/proc/meminfo MemAvailable; not checked where that is not
 * readable), or its measured decode speed is below the backend's min_decode_tok_s. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "route/route.h"

enum { REQUEST_MAX_DEPTH = 64, LOCAL_CTX_CAP = 4096, CALIBRATE_MAX_FIRST_TOKENS = 256 };

kite_router_params kite_router_default_params(void) {
    return (kite_router_params){.n_threads = 0, .measure_local = true};
}

/* Bytes of memory available (MemAvailable), or 0 when unknown. */
static uint64_t memory_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    unsigned long long kib = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1) break;
    fclose(f);
    return (uint64_t)kib * 1024;
}

/* The context a local request gets: the backend's ctx, else the model's training context capped as kite
 * sessions cap it. */
static int32_t local_ctx(const struct kite_router *r) {
    const route_backend *b = &r->cfg.backends[r->local_backend];
    if (b->n_ctx > 0) return b->n_ctx;
    kite_model_info info;
    kite_model_get_info(r->local_model, &info);
    return info.n_ctx_train > 0 && info.n_ctx_train < LOCAL_CTX_CAP ? info.n_ctx_train : LOCAL_CTX_CAP;
}

static int open_local(struct kite_router *r, const kite_router_params *p, kite_error *e) {
    route_backend *b = &r->cfg.backends[r->local_backend];
    kite_model_params mp = kite_model_default_params();
    mp.tokenizer_path = b->tokenizer_path;
    mp.n_threads = p->n_threads > 0 ? p->n_threads : b->n_threads;
    uint64_t avail = memory_available();
    char err[512];
    if (kite_model_open(&r->local_model, b->model_path, &mp, err, sizeof err)) {
        r->local_model = NULL;
        return kite_fail(e, KITE_ERR_INVALID_ARG, "router: backends.%s.model: %s", b->name, err);
    }
    r->local_capable = true;
    kite_model_info info;
    kite_model_get_info(r->local_model, &info);
    if (avail > 0 && info.weight_bytes > avail) {
        r->local_capable = false;
        kite_log(KITE_LOG_WARN, "router: backends.%s: the model's %.2f GiB of weights exceed the %.2f GiB of memory free; it "
                 "will not be chosen", b->name, (double)info.weight_bytes / (1 << 30), (double)avail / (1 << 30));
    }
    if (p->measure_local) {
        int rc = route_measure_local(r->local_model, 0, &r->local_latency, e);
        if (rc) return rc;
        double tok_s = r->local_latency.decode_s_per_token > 0 ? 1.0 / r->local_latency.decode_s_per_token : INFINITY;
        kite_log(KITE_LOG_INFO, "router: backends.%s: prefill %.1f tok/s, decode %.1f tok/s, fixed %.2f ms", b->name,
                 r->local_latency.prefill_s_per_token > 0 ? 1.0 / r->local_latency.prefill_s_per_token : INFINITY, tok_s,
                 r->local_latency.fixed_s * 1000.0);
        if (b->min_decode_tok_s > 0 && tok_s < b->min_decode_tok_s) {
            r->local_capable = false;
            kite_log(KITE_LOG_WARN, "router: backends.%s: decodes %.1f tok/s, below min_decode_tok_s %g; it will not be chosen",
                     b->name, tok_s, b->min_decode_tok_s);
        }
    }
    if (kite_chat_template_open(&r->local_template, r->local_model, NULL, err, sizeof err)) {
        r->local_template = NULL; /* chat prompts are then counted from their text alone */
        kite_log(KITE_LOG_DEBUG, "router: backends.%s: no chat template (%s)", b->name, err);
    }
    return KITE_OK;
}

static int open_router(struct kite_router *r, const char *config_path, const kite_router_params *p, kite_error *e) {
    int rc = route_config_load(config_path, &r->cfg, e);
    if (rc) return rc;
    for (int32_t i = 0; i < r->cfg.n_backends; i++)
        if (r->cfg.backends[i].kind == ROUTE_BACKEND_LOCAL) r->local_backend = i;
    if (r->local_backend >= 0 && (rc = open_local(r, p, e))) return rc;
    for (int32_t i = 0; i < r->cfg.n_backends; i++) {
        route_backend *b = &r->cfg.backends[i];
        if (b->kind != ROUTE_BACKEND_REMOTE) continue;
        if ((rc = route_upstream_open(&r->upstreams[i], b, e))) return rc;
        kite_error pe = {0};
        if (route_upstream_probe(r->upstreams[i], &pe) == KITE_OK) continue;
        if (b->require_reachable)
            return kite_fail(e, KITE_ERR_IO, "router: backends.%s.url: unreachable at start (require_reachable): %s", b->name,
                             pe.msg);
        kite_log(KITE_LOG_WARN, "router: backends.%s.url is unreachable at start (%s); it starts in cooldown", b->name, pe.msg);
    }
    return KITE_OK;
}

int kite_router_open(kite_router **out, const char *config_path, const kite_router_params *params, char *err,
                     size_t err_size) {
    kite_error e = {0};
    if (!out || !config_path) {
        if (out) *out = NULL;
        kite_fail(&e, KITE_ERR_INVALID_ARG, "kite_router_open: out and config_path are required");
        return kite_error_export(&e, err, err_size);
    }
    *out = NULL;
    kite_router_params p = params ? *params : kite_router_default_params();
    struct kite_router *r = calloc(1, sizeof *r);
    if (!r) {
        kite_fail(&e, KITE_ERR_NOMEM, "router: out of memory");
        return kite_error_export(&e, err, err_size);
    }
    pthread_mutex_init(&r->mu, NULL);
    r->local_backend = -1;
    if (open_router(r, config_path, &p, &e)) {
        kite_router_free(r);
        return kite_error_export(&e, err, err_size);
    }
    *out = r;
    return KITE_OK;
}

void kite_router_free(kite_router *r) {
    if (!r) return;
    for (int32_t i = 0; i < ROUTE_MAX_BACKENDS; i++) route_upstream_free(r->upstreams[i]);
    kite_chat_template_free(r->local_template);
    kite_model_free(r->local_model);
    route_config_free(&r->cfg);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

kite_model *kite_router_local_model(kite_router *r) { return r ? r->local_model : NULL; }

void route_router_states(struct kite_router *r, route_backend_state states[ROUTE_MAX_BACKENDS]) {
    memset(states, 0, sizeof(route_backend_state) * ROUTE_MAX_BACKENDS);
    for (int32_t i = 0; i < r->cfg.n_backends; i++) {
        route_backend_state *s = &states[i];
        if (r->cfg.backends[i].kind == ROUTE_BACKEND_LOCAL) {
            s->available = r->local_model != NULL;
            s->capable = r->local_capable;
            s->n_ctx = r->local_model ? local_ctx(r) : r->cfg.backends[i].n_ctx;
            pthread_mutex_lock(&r->mu);
            s->latency = r->local_latency;
            pthread_mutex_unlock(&r->mu);
        } else {
            /* May run a health probe (bounded by the connect timeout): outside the lock. */
            s->available = r->upstreams[i] && route_upstream_available(r->upstreams[i]);
            s->capable = true;
            s->n_ctx = r->cfg.backends[i].max_context;
            if (r->upstreams[i]) route_upstream_get_latency(r->upstreams[i], &s->latency);
        }
    }
}

/* ---- a request's routing facts ---------------------------------------------------------------- */
/* The text a message's content holds: a string, or the "text" of its content parts. */
static void content_texts(const json_t *content, json_t *texts) {
    if (json_is_string(content)) {
        json_array_append(texts, (json_t *)content);
    } else if (json_is_array(content)) {
        size_t i;
        json_t *part;
        json_array_foreach(content, i, part) {
            json_t *t = json_object_get(part, "text");
            if (json_is_string(t)) json_array_append(texts, t);
        }
    }
}

/* Tokens of texts joined by newlines: with the local tokenizer, else bytes / 4 rounded up. */
static int count_texts(struct kite_router *r, const json_t *texts, bool add_bos, int32_t *n_tokens, kite_error *e) {
    size_t bytes = 0;
    size_t i;
    json_t *t;
    json_array_foreach(texts, i, t) bytes += json_string_length(t) + (i ? 1 : 0); /* joined by newlines */
    if (!r->local_model) {
        *n_tokens = (int32_t)((bytes + 3) / 4 > INT32_MAX ? INT32_MAX : (bytes + 3) / 4);
        return 0;
    }
    char *joined = malloc(bytes + 1);
    if (!joined) {
        kite_fail(e, KITE_ERR_NOMEM, "router: out of memory");
        return 500;
    }
    size_t at = 0;
    json_array_foreach(texts, i, t) {
        if (i) joined[at++] = '\n';
        memcpy(joined + at, json_string_value(t), json_string_length(t));
        at += json_string_length(t);
    }
    size_t n = 0;
    char err[256];
    int rc = kite_tokenize(r->local_model, joined, at, add_bos, false, NULL, 0, &n, err, sizeof err);
    free(joined);
    if (rc && rc != KITE_ERR_INVALID_ARG) {
        kite_fail(e, KITE_ERR_INVALID_ARG, "router: the prompt could not be tokenized: %s", err);
        return 400;
    }
    *n_tokens = n > INT32_MAX ? INT32_MAX : (int32_t)n;
    return 0;
}

static int bad_request(kite_error *e, const char *fmt, const char *arg) {
    kite_fail(e, KITE_ERR_INVALID_ARG, fmt, arg);
    return 400;
}

static int count_prompt(struct kite_router *r, const json_t *body, int32_t *n_tokens, kite_error *e) {
    json_t *messages = json_object_get(body, "messages"), *prompt = json_object_get(body, "prompt");
    json_t *texts = json_array();
    if (!texts) {
        kite_fail(e, KITE_ERR_NOMEM, "router: out of memory");
        return 500;
    }
    int status = 0;
    kite_model_info info = {0};
    if (r->local_model) kite_model_get_info(r->local_model, &info);
    if (messages) {
        if (!json_is_array(messages)) {
            json_decref(texts);
            return bad_request(e, "router: %s: expected an array of messages", "messages");
        }
        if (r->local_template) {
            /* The prompt the local model would run: the template applied, as the server tokenizes it. */
            char *mj = json_dumps(messages, JSON_COMPACT | JSON_PRESERVE_ORDER);
            json_t *tools = json_object_get(body, "tools"), *kwargs = json_object_get(body, "chat_template_kwargs");
            char *tj = json_is_array(tools) && json_array_size(tools) ? json_dumps(tools, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
            char *kj = json_is_object(kwargs) ? json_dumps(kwargs, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
            kite_chat_params cp = kite_chat_default_params();
            cp.messages_json = mj;
            cp.tools_json = tj;
            cp.kwargs_json = kj;
            cp.add_generation_prompt = true;
            int32_t *ids = NULL;
            size_t n = 0;
            char err[256];
            int rc = mj ? kite_chat_tokenize(r->local_template, r->local_model, &cp, &ids, &n, err, sizeof err) : KITE_ERR_NOMEM;
            free(mj);
            free(tj);
            free(kj);
            kite_free(ids);
            if (rc == KITE_OK) {
                json_decref(texts);
                *n_tokens = n > INT32_MAX ? INT32_MAX : (int32_t)n;
                return 0;
            }
            /* A conversation the template refuses is the server's to reject (or the remote's to take):
               route it by its text. */
            kite_log(KITE_LOG_DEBUG, "router: counting the prompt from its text (the chat template: %s)", err);
        }
        size_t i;
        json_t *m;
        json_array_foreach(messages, i, m) content_texts(json_object_get(m, "content"), texts);
        status = count_texts(r, texts, info.add_bos, n_tokens, e);
    } else if (prompt) {
        if (json_is_string(prompt)) {
            json_array_append(texts, prompt);
            status = count_texts(r, texts, info.add_bos, n_tokens, e);
        } else if (json_is_array(prompt) && json_array_size(prompt) > 0 && json_is_integer(json_array_get(prompt, 0))) {
            *n_tokens = json_array_size(prompt) > INT32_MAX ? INT32_MAX : (int32_t)json_array_size(prompt);
        } else {
            status = bad_request(e, "router: %s: expected a string or an array of token ids", "prompt");
        }
    } else {
        status = bad_request(e, "router: the body has neither %s", "\"messages\" nor \"prompt\"");
    }
    json_decref(texts);
    return status;
}

int route_request_info_from_body(struct kite_router *r, const char *body, size_t len, const char *segment,
                                 route_request_info *info, char *route_buf, size_t route_buf_size, char *user_buf,
                                 size_t user_buf_size, kite_error *e) {
    *info = (route_request_info){.prompt_tokens = 0, .max_tokens = -1, .segment = segment};
    if (!body) return bad_request(e, "router: %s", "no request body");
    if (route_json_depth(body, len, REQUEST_MAX_DEPTH) > REQUEST_MAX_DEPTH)
        return bad_request(e, "router: the body is nested more than %s levels deep", "64");
    json_error_t jerr;
    json_t *root = json_loadb(body, len, 0, &jerr);
    if (!root) {
        kite_fail(e, KITE_ERR_INVALID_ARG, "router: the body is not JSON: line %d, column %d: %s", jerr.line, jerr.column,
                  jerr.text);
        return 400;
    }
    int status = 0;
    if (!json_is_object(root)) {
        status = bad_request(e, "router: %s", "the body is not a JSON object");
        goto done;
    }
    json_t *v = json_object_get(root, "route");
    if (v && !json_is_null(v)) {
        if (!json_is_string(v)) {
            status = bad_request(e, "router: %s: expected a string (local, remote or a backend's name)", "route");
            goto done;
        }
        if (!route_buf || json_string_length(v) >= route_buf_size) {
            status = bad_request(e, "router: %s: longer than any backend's name", "route");
            goto done;
        }
        memcpy(route_buf, json_string_value(v), json_string_length(v) + 1);
        info->route = route_buf;
    }
    v = json_object_get(root, "user");
    if (v && !json_is_null(v)) {
        if (!json_is_string(v)) {
            status = bad_request(e, "router: %s: expected a string", "user");
            goto done;
        }
        /* A name longer than the buffer matches no mapped user (those are shorter): not kept. */
        if (user_buf && json_string_length(v) < user_buf_size) {
            memcpy(user_buf, json_string_value(v), json_string_length(v) + 1);
            info->user = user_buf;
        }
    }
    v = json_object_get(root, "max_completion_tokens");
    if (!v || json_is_null(v)) v = json_object_get(root, "max_tokens");
    if (v && !json_is_null(v)) {
        if (!json_is_integer(v) || json_integer_value(v) < 1) {
            status = bad_request(e, "router: %s: expected an integer >= 1", json_object_get(root, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens");
            goto done;
        }
        json_int_t m = json_integer_value(v);
        info->max_tokens = m > INT32_MAX ? INT32_MAX : (int32_t)m;
    }
    v = json_object_get(root, "max_latency_ms");
    if (v && !json_is_null(v)) {
        if (!json_is_number(v) || !(json_number_value(v) > 0)) {
            status = bad_request(e, "router: %s: expected a number of milliseconds > 0", "max_latency_ms");
            goto done;
        }
        info->max_latency_ms = json_number_value(v);
    }
    status = count_prompt(r, root, &info->prompt_tokens, e);
done:
    json_decref(root);
    return status;
}

/* ---- explain ---------------------------------------------------------------------------------- */
int kite_router_explain(kite_router *r, const char *request_json, size_t len, const char *segment, char **decision_json,
                        char *err, size_t err_size) {
    kite_error e = {0};
    if (decision_json) *decision_json = NULL;
    if (!r || !request_json || !decision_json) {
        kite_fail(&e, KITE_ERR_INVALID_ARG, "kite_router_explain: router, request_json and decision_json are required");
        return kite_error_export(&e, err, err_size);
    }
    route_request_info info;
    char route[ROUTE_NAME_MAX], user[ROUTE_NAME_MAX];
    int status = route_request_info_from_body(r, request_json, len, segment, &info, route, sizeof route, user, sizeof user, &e);
    if (status) {
        if (!e.status) kite_fail(&e, KITE_ERR_INVALID_ARG, "router: bad request");
        return kite_error_export(&e, err, err_size);
    }
    route_backend_state states[ROUTE_MAX_BACKENDS];
    route_router_states(r, states);
    route_plan plan;
    route_decide(&r->cfg, states, &info, &plan);
    char *plan_text = route_plan_json(&r->cfg, &plan);
    json_t *o = plan_text ? json_loads(plan_text, 0, NULL) : NULL;
    free(plan_text);
    json_t *req = json_object(), *backends = json_array();
    if (!o || !req || !backends) {
        json_decref(o);
        json_decref(req);
        json_decref(backends);
        kite_fail(&e, KITE_ERR_NOMEM, "router: out of memory");
        return kite_error_export(&e, err, err_size);
    }
    json_object_set_new(req, "prompt_tokens", json_integer(info.prompt_tokens));
    json_object_set_new(req, "max_tokens", info.max_tokens > 0 ? json_integer(info.max_tokens) : json_null());
    json_object_set_new(req, "max_latency_ms", info.max_latency_ms > 0 ? json_real(info.max_latency_ms) : json_null());
    json_object_set_new(req, "route", info.route ? json_string(info.route) : json_null());
    json_object_set_new(req, "user", info.user ? json_string(info.user) : json_null());
    json_object_set_new(req, "segment", segment ? json_string(segment) : json_null());
    json_object_set_new(o, "request", req);
    for (int32_t i = 0; i < r->cfg.n_backends; i++) {
        json_t *b = json_object();
        bool local = r->cfg.backends[i].kind == ROUTE_BACKEND_LOCAL;
        json_object_set_new(b, "name", json_string(r->cfg.backends[i].name));
        json_object_set_new(b, "kind", json_string(local ? "local" : "remote"));
        json_object_set_new(b, "available", json_boolean(states[i].available));
        json_object_set_new(b, "capable", json_boolean(states[i].capable));
        json_object_set_new(b, local ? "ctx" : "max_context", json_integer(states[i].n_ctx));
        json_array_append_new(backends, b);
    }
    json_object_set_new(o, "backends", backends);
    char *text = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(12));
    json_decref(o);
    if (!text) {
        kite_fail(&e, KITE_ERR_NOMEM, "router: out of memory");
        return kite_error_export(&e, err, err_size);
    }
    /* kite_free is free(); jansson allocates with malloc unless told otherwise, but a copy makes it sure. */
    size_t n = strlen(text);
    *decision_json = malloc(n + 1);
    if (*decision_json) memcpy(*decision_json, text, n + 1);
    free(text);
    if (!*decision_json) kite_fail(&e, KITE_ERR_NOMEM, "router: out of memory");
    return kite_error_export(&e, err, err_size);
}

/* ---- calibrate -------------------------------------------------------------------------------- */
static int compare_double(const void *pa, const void *pb) {
    double a = *(const double *)pa, b = *(const double *)pb;
    return (a > b) - (a < b);
}

typedef struct logprob_sink {
    kite_session *session;
    float *logprobs;   /* [capacity] */
    int32_t n, capacity;
    int failed;        /* a kite_status from kite_session_token_logprobs */
} logprob_sink;

static bool collect_logprob(int32_t id, const char *text, size_t len, void *user_data) {
    (void)id, (void)text, (void)len;
    logprob_sink *s = user_data;
    kite_logprobs lp;
    int rc = kite_session_token_logprobs(s->session, &lp);
    if (rc) {
        s->failed = rc;
        return false;
    }
    if (s->n < s->capacity) s->logprobs[s->n++] = lp.logprob;
    return true;
}

/* The prompt's ids: a one-user-message chat through the model's template, or, for a model without one,
 * the text as a plain completion prompt (BOS as the model adds it). *ids is the caller's (kite_free). */
static int calibration_prompt(struct kite_router *r, const char *prompt, size_t index, int32_t **ids, size_t *n, kite_error *e) {
    char err[512];
    *ids = NULL;
    *n = 0;
    if (r->local_template) {
        json_t *msgs = json_pack("[{s:s, s:s}]", "role", "user", "content", prompt);
        char *mj = msgs ? json_dumps(msgs, JSON_COMPACT) : NULL;
        json_decref(msgs);
        if (!mj) return kite_fail(e, KITE_ERR_INVALID_ARG, "router: calibrate: prompt %zu is not valid UTF-8", index);
        kite_chat_params cp = kite_chat_default_params();
        cp.messages_json = mj;
        cp.add_generation_prompt = true;
        int rc = kite_chat_tokenize(r->local_template, r->local_model, &cp, ids, n, err, sizeof err);
        free(mj);
        if (rc) return kite_fail(e, rc, "router: calibrate: prompt %zu: %s", index, err);
        return KITE_OK;
    }
    kite_model_info info;
    kite_model_get_info(r->local_model, &info);
    size_t len = strlen(prompt), need = 0;
    int rc = kite_tokenize(r->local_model, prompt, len, info.add_bos, false, NULL, 0, &need, err, sizeof err);
    if (rc && rc != KITE_ERR_INVALID_ARG) return kite_fail(e, rc, "router: calibrate: prompt %zu: %s", index, err);
    if (!(*ids = malloc((need ? need : 1) * sizeof **ids))) return kite_fail(e, KITE_ERR_NOMEM, "router: out of memory");
    if ((rc = kite_tokenize(r->local_model, prompt, len, info.add_bos, false, *ids, need, n, err, sizeof err)))
        return kite_fail(e, rc, "router: calibrate: prompt %zu: %s", index, err);
    return KITE_OK;
}

static int calibrate(struct kite_router *r, const char *const *prompts, size_t n_prompts, int32_t first_tokens,
                     double quantile, double remote_fraction, double *threshold, double *scores, kite_error *e) {
    if (!r->local_model) return kite_fail(e, KITE_ERR_INVALID_ARG, "router: calibrate needs a local backend");
    if (!prompts || n_prompts == 0) return kite_fail(e, KITE_ERR_INVALID_ARG, "router: calibrate: no prompts");
    if (first_tokens < 1 || first_tokens > CALIBRATE_MAX_FIRST_TOKENS)
        return kite_fail(e, KITE_ERR_INVALID_ARG, "router: calibrate: first_tokens must be in [1, %d]", CALIBRATE_MAX_FIRST_TOKENS);
    if (!(quantile >= 0 && quantile <= 1) || !(remote_fraction >= 0 && remote_fraction <= 1))
        return kite_fail(e, KITE_ERR_INVALID_ARG, "router: calibrate: quantile and remote_fraction must be in [0, 1]");
    if (!threshold) return kite_fail(e, KITE_ERR_INVALID_ARG, "router: calibrate: threshold is required");
    kite_session_params sp = kite_session_default_params();
    int32_t n_ctx = local_ctx(r);
    sp.n_ctx = n_ctx;
    kite_session *s = NULL;
    char err[512];
    if (kite_session_open(&s, r->local_model, &sp, err, sizeof err)) return kite_fail(e, KITE_ERR_INVALID_ARG, "router: calibrate: %s", err);
    double *all = malloc(n_prompts * sizeof *all);
    float *lps = malloc((size_t)first_tokens * sizeof *lps);
    int rc = KITE_OK;
    if (!all || !lps) {
        rc = kite_fail(e, KITE_ERR_NOMEM, "router: out of memory");
        goto done;
    }
    kite_gen_params gp = kite_gen_default_params();
    gp.temperature = 0;
    gp.max_tokens = first_tokens;
    gp.logprobs = true;
    for (size_t i = 0; i < n_prompts; i++) {
        if (!prompts[i]) {
            rc = kite_fail(e, KITE_ERR_INVALID_ARG, "router: calibrate: prompt %zu is NULL", i);
            goto done;
        }
        int32_t *ids = NULL;
        size_t n = 0;
        if ((rc = calibration_prompt(r, prompts[i], i, &ids, &n, e))) {
            kite_free(ids);
            goto done;
        }
        if (n == 0 || n + (size_t)first_tokens > (size_t)n_ctx) {
            kite_free(ids);
            rc = n == 0 ? kite_fail(e, KITE_ERR_INVALID_ARG, "router: calibrate: prompt %zu is empty (no tokens)", i)
                        : kite_fail(e, KITE_ERR_CONTEXT_FULL,
                                    "router: calibrate: prompt %zu has %zu tokens; with %d to generate it does not fit the "
                                    "local context (%d)", i, n, first_tokens, n_ctx);
            goto done;
        }
        kite_session_reset(s);
        rc = kite_prompt(s, ids, n, err, sizeof err);
        kite_free(ids);
        logprob_sink sink = {.session = s, .logprobs = lps, .capacity = first_tokens};
        if (!rc) rc = kite_generate(s, &gp, collect_logprob, &sink, err, sizeof err);
        if (rc) {
            rc = kite_fail(e, rc, "router: calibrate: prompt %zu: %s", i, err);
            goto done;
        }
        if (sink.failed || sink.n == 0) {
            rc = kite_fail(e, KITE_ERR_INVALID_ARG, "router: calibrate: prompt %zu: no log-probabilities", i);
            goto done;
        }
        all[i] = route_logprob_quantile(lps, (size_t)sink.n, quantile);
        if (scores) scores[i] = all[i];
    }
    /* The scores' remote_fraction quantile: about that fraction of the prompts score below it. */
    for (size_t i = 0; i < n_prompts; i++)
        if (isnan(all[i])) all[i] = -INFINITY;
    qsort(all, n_prompts, sizeof *all, compare_double);
    *threshold = route_quantile_sorted(all, n_prompts, remote_fraction);
done:
    kite_session_free(s);
    free(all);
    free(lps);
    return rc;
}

int kite_router_calibrate(kite_router *router, const char *const *prompts, size_t n_prompts, int32_t first_tokens,
                          double quantile, double remote_fraction, double *threshold, double *scores, char *err,
                          size_t err_size) {
    kite_error e = {0};
    if (!router) kite_fail(&e, KITE_ERR_INVALID_ARG, "kite_router_calibrate: router is required");
    else calibrate(router, prompts, n_prompts, first_tokens, quantile, remote_fraction, threshold, scores, &e);
    return kite_error_export(&e, err, err_size);
}
