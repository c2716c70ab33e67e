/* The router's JSON config parsed into route_config (contract in route.h; README "Routing").
 *
 * Reference (every key optional unless marked required; anything else is an error):
 *   backends (required, 1..ROUTE_MAX_BACKENDS): {NAME: BACKEND, ...}. NAME is 1..63 bytes of
 *       [A-Za-z0-9_.-]; "fastest" is reserved; a remote may not be named "local" nor a local one "remote"
 *       (they would read as the request's explicit route). A backend with "url" is remote; one without
 *       "url" but with "model" is local; one with neither is an error. At most one local backend.
 *     local:  model (required: path, relative to the config's folder), tokenizer (path), ctx (tokens, 0 =
 *             the model's capped at 4096; else 16 .. 2^22), threads (0 .. 1024, 0 = kite's default),
 *             min_decode_tok_s (>= 0: the device-capability floor; 0 = none)
 *     remote: url (required: http:// or https://, a trailing '/' dropped), model (sent upstream), api_key_env
 *             (the name of an environment variable that must be set and non-empty), timeout_ms {connect,
 *             first_token, total} (1 .. 86400000 ms; connect and first_token <= total), max_context
 *             (tokens, 0 .. 2^24, 0 = unknown), max_retries (0 .. 10), retry_base_ms (1 .. 60000),
 *             failures_to_cooldown (1 .. 1000), cooldown_ms (0 .. 86400000), require_reachable (bool),
 *             token_ids (bool: the remote returns token ids as vLLM and kite do with "return_token_ids"; a
 *             cut answer is then continued from the remote's own tokens when the prompts' ids agree)
 *   rules (0..ROUTE_MAX_RULES), each an object:
 *     when {prompt_tokens_over N (>= 0), prompt_tokens_under N (>= 1), segment [TAG, ...] (1..ROUTE_MAX_TAGS),
 *           max_latency_ms_under MS (> 0)}: every condition given must hold;
 *     use NAME | "fastest"; fallback NAME | [NAME, ...] (0..ROUTE_MAX_ATTEMPTS; default: every other usable
 *           backend in config order);
 *     confidence {first_tokens (1..256, default 8), quantile ([0, 1], default 0.1), min_logprob (required,
 *           <= 0)} with else NAME (required): a gate run on the local backend ("use" may name it and must
 *           then be local). A rule needs "use" or "confidence".
 *   explicit (bool, default true): the request's "route" may pick the backend.
 *   segments {header (an HTTP header name, default "x-kite-segment"), users {USER: [TAG, ...], ...}
 *           (0..ROUTE_MAX_USERS users of 1..63 bytes)}. TAGs are 1..63 bytes of [A-Za-z0-9_.:-].
 *   defaults {max_latency_ms (> 0), max_tokens (1 .. 2^24, default 256)}.
 * Errors name the JSON path ("router config: rules[3].when.segment: expected an array of strings") and never
 * quote a value: a URL may carry credentials, a string may be a key pasted in the wrong place. jansson's own
 * syntax messages quote the text near the error, so only their position is kept. */
#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "route/route.h"

enum { CONFIG_MAX_DEPTH = 16, PATH_MAX_BYTES = 160, MAX_TIMEOUT_MS = 86400000 };

int32_t route_json_depth(const char *text, size_t len, int32_t limit) {
    int32_t depth = 0, deepest = 0;
    bool in_string = false;
    for (size_t i = 0; i < len; i++) {
        char c = text[i];
        if (in_string) {
            if (c == '\\') i++;
            else if (c == '"') in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            if (++depth > deepest && (deepest = depth) > limit) return limit + 1;
        } else if ((c == ']' || c == '}') && depth > 0) {
            depth--;
        }
    }
    return deepest;
}

/* ---- small helpers ---------------------------------------------------------------------------- */
/* snprintf whose truncation is intended (paths and messages are cut, never overflowed). */
static void sfmt(char *out, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void sfmt(char *out, size_t size, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out, size, fmt, ap);
    va_end(ap);
}

static int bad(kite_error *e, const char *path, const char *what) {
    return kite_fail(e, KITE_ERR_INVALID_ARG, "router config: %s: %s", path, what);
}

static bool is_name_char(char c, bool tag) {
    return isalnum((unsigned char)c) || c == '_' || c == '-' || c == '.' || (tag && c == ':');
}

/* A backend name or a tag: 1..ROUTE_NAME_MAX-1 bytes of the allowed characters. */
static bool valid_name(const char *s, bool tag) {
    size_t n = strlen(s);
    if (n == 0 || n >= ROUTE_NAME_MAX) return false;
    for (size_t i = 0; i < n; i++)
        if (!is_name_char(s[i], tag)) return false;
    return true;
}

static char *dup_string(const char *s) {
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (d) memcpy(d, s, n + 1);
    return d;
}

/* Checks obj's keys against a NULL-terminated list. */
static int check_keys(const json_t *obj, const char *path, const char *const *allowed, kite_error *e) {
    const char *key;
    json_t *value;
    json_object_foreach((json_t *)obj, key, value) {
        (void)value;
        bool known = false;
        for (size_t i = 0; allowed[i]; i++)
            if (!strcmp(key, allowed[i])) known = true;
        if (!known) {
            char msg[160];
            /* Quoted only when it reads as a key (a value pasted as a key is not repeated). */
            bool plain = strlen(key) <= 40;
            for (const char *c = key; *c && plain; c++) plain = (*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '_';
            if (plain) sfmt(msg, sizeof msg, "unknown key \"%s\"", key);
            else sfmt(msg, sizeof msg, "unknown key (%zu bytes)", strlen(key));
            return bad(e, path, msg);
        }
    }
    return KITE_OK;
}

static void join_path(char *out, const char *path, const char *key) {
    sfmt(out, PATH_MAX_BYTES, "%s%s%s", path, *path ? "." : "", key);
}

/* An integer in [lo, hi] at obj.key (absent: *out untouched). */
static int get_int(const json_t *obj, const char *path, const char *key, long long lo, long long hi, int32_t *out,
                   kite_error *e) {
    json_t *v = json_object_get(obj, key);
    if (!v) return KITE_OK;
    char p[PATH_MAX_BYTES], msg[96];
    join_path(p, path, key);
    sfmt(msg, sizeof msg, "expected an integer in [%lld, %lld]", lo, hi);
    if (!json_is_integer(v)) return bad(e, p, msg);
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi) return bad(e, p, msg);
    *out = (int32_t)x;
    return KITE_OK;
}

/* A number in [lo, hi] (open at an end when lo_open / hi_open). */
static int get_number(const json_t *obj, const char *path, const char *key, double lo, bool lo_open, double hi,
                      double *out, kite_error *e) {
    json_t *v = json_object_get(obj, key);
    if (!v) return KITE_OK;
    char p[PATH_MAX_BYTES], msg[96];
    join_path(p, path, key);
    if (isinf(hi)) sfmt(msg, sizeof msg, "expected a number %s %g", lo_open ? ">" : ">=", lo);
    else if (isinf(lo)) sfmt(msg, sizeof msg, "expected a number <= %g", hi);
    else sfmt(msg, sizeof msg, "expected a number in %s%g, %g]", lo_open ? "(" : "[", lo, hi);
    if (!json_is_number(v)) return bad(e, p, msg);
    double x = json_number_value(v);
    if (!isfinite(x) || x < lo || (lo_open && x == lo) || x > hi) return bad(e, p, msg);
    *out = x;
    return KITE_OK;
}

static int get_bool(const json_t *obj, const char *path, const char *key, bool *out, kite_error *e) {
    json_t *v = json_object_get(obj, key);
    if (!v) return KITE_OK;
    char p[PATH_MAX_BYTES];
    join_path(p, path, key);
    if (!json_is_boolean(v)) return bad(e, p, "expected true or false");
    *out = json_is_true(v);
    return KITE_OK;
}

/* A non-empty string without NUL (jansson rejects \u0000 already) of at most max_len bytes. */
static int get_string(const json_t *obj, const char *path, const char *key, size_t max_len, const char **out,
                      kite_error *e) {
    json_t *v = json_object_get(obj, key);
    if (!v) return KITE_OK;
    char p[PATH_MAX_BYTES], msg[96];
    join_path(p, path, key);
    sfmt(msg, sizeof msg, "expected a non-empty string of at most %zu bytes", max_len);
    if (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) > max_len) return bad(e, p, msg);
    *out = json_string_value(v);
    return KITE_OK;
}

/* A path from the config, made relative to config_dir unless absolute. */
static char *resolve_path(const char *path, const char *config_dir) {
    if (path[0] == '/' || !config_dir || !*config_dir) return dup_string(path);
    size_t nd = strlen(config_dir), np = strlen(path);
    char *out = malloc(nd + 1 + np + 1);
    if (!out) return NULL;
    memcpy(out, config_dir, nd);
    out[nd] = '/';
    memcpy(out + nd + 1, path, np + 1);
    return out;
}

/* ---- backends --------------------------------------------------------------------------------- */
static const char *const LOCAL_KEYS[] = {"model", "tokenizer", "ctx", "threads", "min_decode_tok_s", NULL};
static const char *const REMOTE_KEYS[] = {"url", "model", "api_key_env", "timeout_ms", "max_context", "max_retries",
                                          "retry_base_ms", "failures_to_cooldown", "cooldown_ms", "require_reachable", "token_ids",
                                          NULL};

static int parse_backend(const char *name, const json_t *obj, const char *config_dir, route_backend *b, kite_error *e) {
    char path[PATH_MAX_BYTES];
    sfmt(path, sizeof path, "backends.%s", name);
    if (!json_is_object(obj)) return bad(e, path, "expected an object");
    sfmt(b->name, sizeof b->name, "%s", name);
    b->timeout = (route_timeouts){.connect_ms = 2000, .first_token_ms = 10000, .total_ms = 120000};
    b->max_retries = 2;
    b->retry_base_ms = 200;
    b->failures_to_cooldown = 3;
    b->cooldown_ms = 30000;
    bool remote = json_object_get(obj, "url") != NULL;
    if (!remote && !json_object_get(obj, "model"))
        return bad(e, path, "needs \"model\" (a local model's path) or \"url\" (a remote OpenAI-compatible endpoint)");
    int rc;
    const char *s = NULL;
    if (!remote) {
        b->kind = ROUTE_BACKEND_LOCAL;
        if (!strcmp(name, "remote")) return bad(e, path, "a local backend cannot be named \"remote\" (the request's route=remote)");
        /* A remote-only key on a local backend is named as such rather than as unknown. */
        const char *key;
        json_t *v;
        json_object_foreach((json_t *)obj, key, v) {
            (void)v;
            for (size_t i = 0; REMOTE_KEYS[i]; i++)
                if (strcmp(key, "model") && !strcmp(key, REMOTE_KEYS[i])) {
                    char p[PATH_MAX_BYTES];
                    join_path(p, path, key);
                    return bad(e, p, "only for a remote backend (one with \"url\")");
                }
        }
        if ((rc = check_keys(obj, path, LOCAL_KEYS, e))) return rc;
        if ((rc = get_string(obj, path, "model", 4096, &s, e))) return rc;
        if (!(b->model_path = resolve_path(s, config_dir))) return kite_fail(e, KITE_ERR_NOMEM, "router config: out of memory");
        s = NULL;
        if ((rc = get_string(obj, path, "tokenizer", 4096, &s, e))) return rc;
        if (s && !(b->tokenizer_path = resolve_path(s, config_dir)))
            return kite_fail(e, KITE_ERR_NOMEM, "router config: out of memory");
        if ((rc = get_int(obj, path, "ctx", 0, 1 << 22, &b->n_ctx, e))) return rc;
        if (b->n_ctx > 0 && b->n_ctx < 16) {
            char p[PATH_MAX_BYTES];
            join_path(p, path, "ctx");
            return bad(e, p, "expected 0 (the model's) or at least 16 tokens");
        }
        if ((rc = get_int(obj, path, "threads", 0, 1024, &b->n_threads, e))) return rc;
        if ((rc = get_number(obj, path, "min_decode_tok_s", 0, false, INFINITY, &b->min_decode_tok_s, e))) return rc;
        return KITE_OK;
    }
    b->kind = ROUTE_BACKEND_REMOTE;
    if (!strcmp(name, "local")) return bad(e, path, "a remote backend cannot be named \"local\" (the request's route=local)");
    {
        const char *key;
        json_t *v;
        json_object_foreach((json_t *)obj, key, v) {
            (void)v;
            for (size_t i = 0; LOCAL_KEYS[i]; i++)
                if (strcmp(key, "model") && !strcmp(key, LOCAL_KEYS[i])) {
                    char p[PATH_MAX_BYTES];
                    join_path(p, path, key);
                    return bad(e, p, "only for a local backend (one with \"model\" and no \"url\")");
                }
        }
    }
    if ((rc = check_keys(obj, path, REMOTE_KEYS, e))) return rc;
    char p[PATH_MAX_BYTES];
    if ((rc = get_string(obj, path, "url", 2048, &s, e))) return rc;
    join_path(p, path, "url");
    bool https = !strncmp(s, "https://", 8);
    if (!https && strncmp(s, "http://", 7)) return bad(e, p, "expected a URL starting with http:// or https://");
    const char *host = s + (https ? 8 : 7);
    if (!*host || *host == '/') return bad(e, p, "the URL has no host");
    for (const char *c = s; *c; c++)
        if ((unsigned char)*c <= ' ' || *c == 0x7f) return bad(e, p, "the URL holds a space or a control character");
    if (!(b->url = dup_string(s))) return kite_fail(e, KITE_ERR_NOMEM, "router config: out of memory");
    size_t prefix = https ? 8 : 7;
    for (size_t n = strlen(b->url); n > prefix + 1 && b->url[n - 1] == '/'; n--) b->url[n - 1] = 0;
    s = NULL;
    if ((rc = get_string(obj, path, "model", 256, &s, e))) return rc;
    if (s && !(b->remote_model = dup_string(s))) return kite_fail(e, KITE_ERR_NOMEM, "router config: out of memory");
    s = NULL;
    if ((rc = get_string(obj, path, "api_key_env", 255, &s, e))) return rc;
    if (s) {
        join_path(p, path, "api_key_env");
        for (const char *c = s; *c; c++)
            if (!isalnum((unsigned char)*c) && *c != '_') return bad(e, p, "expected an environment variable's name ([A-Za-z0-9_])");
        const char *key = getenv(s);
        char msg[384];
        if (!key || !*key) {
            sfmt(msg, sizeof msg, "the environment variable %s (the API key) is %s", s, key ? "empty" : "not set");
            return bad(e, p, msg);
        }
        if (!(b->api_key_env = dup_string(s)) || !(b->api_key = dup_string(key)))
            return kite_fail(e, KITE_ERR_NOMEM, "router config: out of memory");
    }
    json_t *t = json_object_get(obj, "timeout_ms");
    if (t) {
        join_path(p, path, "timeout_ms");
        if (!json_is_object(t)) return bad(e, p, "expected an object {connect, first_token, total}");
        static const char *const keys[] = {"connect", "first_token", "total", NULL};
        if ((rc = check_keys(t, p, keys, e))) return rc;
        route_timeouts given = {-1, -1, -1};
        if ((rc = get_int(t, p, "connect", 1, MAX_TIMEOUT_MS, &given.connect_ms, e))) return rc;
        if ((rc = get_int(t, p, "first_token", 1, MAX_TIMEOUT_MS, &given.first_token_ms, e))) return rc;
        if ((rc = get_int(t, p, "total", 1, MAX_TIMEOUT_MS, &given.total_ms, e))) return rc;
        /* A default never exceeds a total that was given (total 1000 alone means connect 1000, not 2000). */
        if (given.total_ms > 0) b->timeout.total_ms = given.total_ms;
        b->timeout.connect_ms = given.connect_ms > 0 ? given.connect_ms : b->timeout.connect_ms < b->timeout.total_ms ? b->timeout.connect_ms : b->timeout.total_ms;
        b->timeout.first_token_ms = given.first_token_ms > 0 ? given.first_token_ms
                                    : b->timeout.first_token_ms < b->timeout.total_ms ? b->timeout.first_token_ms
                                                                                       : b->timeout.total_ms;
        char q[PATH_MAX_BYTES];
        if (b->timeout.connect_ms > b->timeout.total_ms) {
            join_path(q, p, "connect");
            return bad(e, q, "larger than the total timeout");
        }
        if (b->timeout.first_token_ms > b->timeout.total_ms) {
            join_path(q, p, "first_token");
            return bad(e, q, "larger than the total timeout");
        }
    }
    if ((rc = get_int(obj, path, "max_context", 0, 1 << 24, &b->max_context, e))) return rc;
    if ((rc = get_int(obj, path, "max_retries", 0, 10, &b->max_retries, e))) return rc;
    if ((rc = get_int(obj, path, "retry_base_ms", 1, 60000, &b->retry_base_ms, e))) return rc;
    if ((rc = get_int(obj, path, "failures_to_cooldown", 1, 1000, &b->failures_to_cooldown, e))) return rc;
    if ((rc = get_int(obj, path, "cooldown_ms", 0, MAX_TIMEOUT_MS, &b->cooldown_ms, e))) return rc;
    if ((rc = get_bool(obj, path, "require_reachable", &b->require_reachable, e))) return rc;
    if ((rc = get_bool(obj, path, "token_ids", &b->token_ids, e))) return rc;
    return KITE_OK;
}

/* ---- rules ------------------------------------------------------------------------------------ */
/* A backend named at path (a string naming a backend). */
static int backend_ref(const route_config *cfg, const json_t *v, const char *path, int32_t *out, kite_error *e) {
    if (!json_is_string(v)) return bad(e, path, "expected a backend's name");
    const char *s = json_string_value(v);
    int32_t i = route_config_backend(cfg, s);
    if (i >= 0) {
        *out = i;
        return KITE_OK;
    }
    char msg[ROUTE_NAME_MAX * (ROUTE_MAX_BACKENDS + 2) + 64], list[ROUTE_NAME_MAX * (ROUTE_MAX_BACKENDS + 1)] = "";
    size_t at = 0;
    for (int32_t k = 0; k < cfg->n_backends; k++) {
        size_t n = strlen(cfg->backends[k].name);
        if (at + n + 3 >= sizeof list) break;
        if (k) list[at++] = ',', list[at++] = ' ';
        memcpy(list + at, cfg->backends[k].name, n + 1);
        at += n;
    }
    /* The name is quoted only when it looks like one: short, of name characters, and not a key the config
       loaded (pasted in the wrong place). */
    bool quotable = valid_name(s, false) && strlen(s) <= 32;
    for (int32_t k = 0; k < cfg->n_backends && quotable; k++)
        if (cfg->backends[k].api_key && strstr(s, cfg->backends[k].api_key)) quotable = false;
    if (quotable) sfmt(msg, sizeof msg, "no backend named \"%s\" (backends: %s)", s, list);
    else sfmt(msg, sizeof msg, "not the name of a backend (backends: %s)", list);
    return bad(e, path, msg);
}

static int parse_tags(const json_t *v, const char *path, char tags[ROUTE_MAX_TAGS][ROUTE_NAME_MAX], int32_t *n_tags,
                      kite_error *e) {
    if (!json_is_array(v) || json_array_size(v) == 0 || json_array_size(v) > ROUTE_MAX_TAGS)
        return bad(e, path, "expected an array of strings (1 to 16 segment tags)");
    for (size_t i = 0; i < json_array_size(v); i++) {
        json_t *t = json_array_get(v, i);
        char p[PATH_MAX_BYTES];
        sfmt(p, sizeof p, "%s[%zu]", path, i);
        if (!json_is_string(t)) return bad(e, path, "expected an array of strings");
        if (!valid_name(json_string_value(t), true))
            return bad(e, p, "a segment tag is 1 to 63 bytes of letters, digits and _ . : -");
        sfmt(tags[i], ROUTE_NAME_MAX, "%s", json_string_value(t));
    }
    *n_tags = (int32_t)json_array_size(v);
    return KITE_OK;
}

static int parse_rule(route_config *cfg, const json_t *obj, int32_t index, route_rule *r, kite_error *e) {
    char path[PATH_MAX_BYTES], p[PATH_MAX_BYTES];
    sfmt(path, sizeof path, "rules[%d]", index);
    *r = (route_rule){.prompt_tokens_over = -1, .prompt_tokens_under = -1, .max_latency_ms_under = -1, .backend = -1,
                      .n_fallback = -1, .conf_backend = -1, .conf_else_backend = -1, .config_index = index};
    if (!json_is_object(obj)) return bad(e, path, "expected an object");
    static const char *const keys[] = {"when", "use", "fallback", "confidence", "else", NULL};
    int rc = check_keys(obj, path, keys, e);
    if (rc) return rc;
    json_t *when = json_object_get(obj, "when");
    if (when) {
        join_path(p, path, "when");
        if (!json_is_object(when)) return bad(e, p, "expected an object");
        static const char *const wkeys[] = {"prompt_tokens_over", "prompt_tokens_under", "segment", "max_latency_ms_under", NULL};
        if ((rc = check_keys(when, p, wkeys, e))) return rc;
        if ((rc = get_int(when, p, "prompt_tokens_over", 0, INT32_MAX - 1, &r->prompt_tokens_over, e))) return rc;
        if ((rc = get_int(when, p, "prompt_tokens_under", 1, INT32_MAX, &r->prompt_tokens_under, e))) return rc;
        if ((rc = get_number(when, p, "max_latency_ms_under", 0, true, INFINITY, &r->max_latency_ms_under, e))) return rc;
        json_t *seg = json_object_get(when, "segment");
        if (seg) {
            char q[PATH_MAX_BYTES];
            join_path(q, p, "segment");
            if ((rc = parse_tags(seg, q, r->segments, &r->n_segments, e))) return rc;
        }
    }
    json_t *use = json_object_get(obj, "use"), *conf = json_object_get(obj, "confidence"), *els = json_object_get(obj, "else");
    if (!use && !conf) return bad(e, path, "needs \"use\" (a backend or \"fastest\") or \"confidence\" (a gate)");
    if (els && !conf) {
        join_path(p, path, "else");
        return bad(e, p, "only with \"confidence\"");
    }
    if (conf) {
        join_path(p, path, "confidence");
        if (!json_is_object(conf)) return bad(e, p, "expected an object {first_tokens, quantile, min_logprob}");
        static const char *const ckeys[] = {"first_tokens", "quantile", "min_logprob", NULL};
        if ((rc = check_keys(conf, p, ckeys, e))) return rc;
        r->confidence = true;
        r->conf_first_tokens = 8;
        r->conf_quantile = 0.1;
        if ((rc = get_int(conf, p, "first_tokens", 1, 256, &r->conf_first_tokens, e))) return rc;
        if ((rc = get_number(conf, p, "quantile", 0, false, 1, &r->conf_quantile, e))) return rc;
        if (!json_object_get(conf, "min_logprob")) return bad(e, p, "needs \"min_logprob\" (kite route calibrate finds one)");
        if ((rc = get_number(conf, p, "min_logprob", -INFINITY, false, 0, &r->conf_min_logprob, e))) return rc;
        join_path(p, path, "else");
        if (!els) return bad(e, p, "required with \"confidence\": the backend that answers when the gate fails");
        if ((rc = backend_ref(cfg, els, p, &r->conf_else_backend, e))) return rc;
        r->use = ROUTE_USE_BACKEND;
        if (use) {
            join_path(p, path, "use");
            if ((rc = backend_ref(cfg, use, p, &r->conf_backend, e))) return rc;
            if (cfg->backends[r->conf_backend].kind != ROUTE_BACKEND_LOCAL)
                return bad(e, p, "a confidence gate runs on a local backend");
        } else {
            for (int32_t i = 0; i < cfg->n_backends && r->conf_backend < 0; i++)
                if (cfg->backends[i].kind == ROUTE_BACKEND_LOCAL) r->conf_backend = i;
            if (r->conf_backend < 0) {
                join_path(p, path, "confidence");
                return bad(e, p, "a confidence gate needs a local backend to run on");
            }
        }
        if (r->conf_else_backend == r->conf_backend) {
            join_path(p, path, "else");
            return bad(e, p, "names the backend the gate runs on");
        }
    } else {
        join_path(p, path, "use");
        if (json_is_string(use) && !strcmp(json_string_value(use), "fastest")) {
            r->use = ROUTE_USE_FASTEST;
        } else {
            r->use = ROUTE_USE_BACKEND;
            if ((rc = backend_ref(cfg, use, p, &r->backend, e))) return rc;
        }
    }
    json_t *fb = json_object_get(obj, "fallback");
    if (fb) {
        join_path(p, path, "fallback");
        if (json_is_string(fb)) {
            r->n_fallback = 1;
            if ((rc = backend_ref(cfg, fb, p, &r->fallback[0], e))) return rc;
        } else if (json_is_array(fb)) {
            if (json_array_size(fb) > ROUTE_MAX_ATTEMPTS) {
                char msg[96];
                sfmt(msg, sizeof msg, "at most %d backends", ROUTE_MAX_ATTEMPTS);
                return bad(e, p, msg);
            }
            r->n_fallback = (int32_t)json_array_size(fb);
            for (int32_t i = 0; i < r->n_fallback; i++) {
                char q[PATH_MAX_BYTES];
                sfmt(q, sizeof q, "%s[%d]", p, i);
                if ((rc = backend_ref(cfg, json_array_get(fb, (size_t)i), q, &r->fallback[i], e))) return rc;
                for (int32_t k = 0; k < i; k++)
                    if (r->fallback[k] == r->fallback[i]) return bad(e, q, "names a backend twice");
            }
        } else {
            return bad(e, p, "expected a backend's name or an array of names");
        }
    }
    return KITE_OK;
}

/* ---- top level -------------------------------------------------------------------------------- */
static int parse_segments(route_config *cfg, const json_t *seg, kite_error *e) {
    if (!json_is_object(seg)) return bad(e, "segments", "expected an object {header, users}");
    static const char *const keys[] = {"header", "users", NULL};
    int rc = check_keys(seg, "segments", keys, e);
    if (rc) return rc;
    const char *h = NULL;
    if ((rc = get_string(seg, "segments", "header", ROUTE_NAME_MAX - 1, &h, e))) return rc;
    if (h) {
        for (const char *c = h; *c; c++)
            if (!isalnum((unsigned char)*c) && *c != '-' && *c != '_')
                return bad(e, "segments.header", "expected an HTTP header name (letters, digits, - and _)");
        free(cfg->segment_header);
        if (!(cfg->segment_header = dup_string(h))) return kite_fail(e, KITE_ERR_NOMEM, "router config: out of memory");
        for (char *c = cfg->segment_header; *c; c++) *c = (char)tolower((unsigned char)*c);
    }
    json_t *users = json_object_get(seg, "users");
    if (!users) return KITE_OK;
    if (!json_is_object(users)) return bad(e, "segments.users", "expected an object {USER: [TAG, ...]}");
    size_t n = json_object_size(users);
    if (n > ROUTE_MAX_USERS) {
        char msg[64];
        sfmt(msg, sizeof msg, "at most %d users", ROUTE_MAX_USERS);
        return bad(e, "segments.users", msg);
    }
    if (n == 0) return KITE_OK;
    cfg->user_names = calloc(n, sizeof *cfg->user_names);
    cfg->user_tags = calloc(n, sizeof *cfg->user_tags);
    cfg->user_n_tags = calloc(n, sizeof *cfg->user_n_tags);
    if (!cfg->user_names || !cfg->user_tags || !cfg->user_n_tags)
        return kite_fail(e, KITE_ERR_NOMEM, "router config: out of memory");
    const char *user;
    json_t *tags;
    json_object_foreach(users, user, tags) {
        char p[PATH_MAX_BYTES];
        int32_t i = cfg->n_users;
        if (!*user || strlen(user) >= ROUTE_NAME_MAX) {
            sfmt(p, sizeof p, "segments.users (entry %d)", i);
            return bad(e, p, "a user's name is 1 to 63 bytes");
        }
        for (const char *c = user; *c; c++)
            if ((unsigned char)*c < ' ') {
                sfmt(p, sizeof p, "segments.users (entry %d)", i);
                return bad(e, p, "a user's name holds a control character");
            }
        sfmt(p, sizeof p, "segments.users.%s", user);
        if ((rc = parse_tags(tags, p, cfg->user_tags[i], &cfg->user_n_tags[i], e))) return rc;
        sfmt(cfg->user_names[i], ROUTE_NAME_MAX, "%s", user);
        cfg->n_users++;
    }
    return KITE_OK;
}

static int parse_config(const json_t *root, const char *config_dir, route_config *cfg, kite_error *e) {
    if (!json_is_object(root)) return kite_fail(e, KITE_ERR_INVALID_ARG, "router config: expected a JSON object at the top");
    static const char *const keys[] = {"backends", "rules", "explicit", "segments", "defaults", NULL};
    int rc = check_keys(root, "(top level)", keys, e);
    if (rc) return rc;
    if (config_dir && *config_dir && !(cfg->config_dir = dup_string(config_dir)))
        return kite_fail(e, KITE_ERR_NOMEM, "router config: out of memory");
    json_t *backends = json_object_get(root, "backends");
    if (!backends) return kite_fail(e, KITE_ERR_INVALID_ARG, "router config: backends: required (an object of named backends)");
    if (!json_is_object(backends) || json_object_size(backends) == 0 || json_object_size(backends) > ROUTE_MAX_BACKENDS)
        return bad(e, "backends", "expected an object of 1 to 16 named backends");
    const char *name;
    json_t *value;
    int32_t n_local = 0;
    json_object_foreach(backends, name, value) {
        if (!valid_name(name, false)) {
            char p[PATH_MAX_BYTES];
            sfmt(p, sizeof p, "backends (entry %d)", cfg->n_backends);
            return bad(e, p, "a backend's name is 1 to 63 bytes of letters, digits and _ . -");
        }
        if (!strcmp(name, "fastest")) return bad(e, "backends.fastest", "\"fastest\" is reserved (rules' \"use\": \"fastest\")");
        route_backend *b = &cfg->backends[cfg->n_backends++];
        if ((rc = parse_backend(name, value, cfg->config_dir, b, e))) return rc;
        if (b->kind == ROUTE_BACKEND_LOCAL && ++n_local > 1) {
            char p[PATH_MAX_BYTES];
            sfmt(p, sizeof p, "backends.%s", name);
            return bad(e, p, "more than one local backend is not supported yet (the server runs one model)");
        }
    }
    if ((rc = get_bool(root, "", "explicit", &cfg->allow_explicit, e))) return rc;
    json_t *seg = json_object_get(root, "segments");
    if (seg && (rc = parse_segments(cfg, seg, e))) return rc;
    json_t *defaults = json_object_get(root, "defaults");
    if (defaults) {
        if (!json_is_object(defaults)) return bad(e, "defaults", "expected an object {max_latency_ms, max_tokens}");
        static const char *const dkeys[] = {"max_latency_ms", "max_tokens", NULL};
        if ((rc = check_keys(defaults, "defaults", dkeys, e))) return rc;
        if ((rc = get_number(defaults, "defaults", "max_latency_ms", 0, true, INFINITY, &cfg->default_max_latency_ms, e)))
            return rc;
        if ((rc = get_int(defaults, "defaults", "max_tokens", 1, 1 << 24, &cfg->default_max_tokens, e))) return rc;
    }
    json_t *rules = json_object_get(root, "rules");
    if (rules) {
        if (!json_is_array(rules) || json_array_size(rules) > ROUTE_MAX_RULES)
            return bad(e, "rules", "expected an array of at most 64 rules");
        for (size_t i = 0; i < json_array_size(rules); i++) {
            if ((rc = parse_rule(cfg, json_array_get(rules, i), (int32_t)i, &cfg->rules[i], e))) return rc;
            cfg->n_rules++;
        }
    }
    return KITE_OK;
}

kite_status route_config_parse(const char *json, size_t len, const char *config_dir, route_config *out, kite_error *e) {
    if (!out || (!json && len)) return kite_fail(e, KITE_ERR_INVALID_ARG, "router config: no text");
    memset(out, 0, sizeof *out);
    if (len > ROUTE_MAX_CONFIG_BYTES)
        return kite_fail(e, KITE_ERR_INVALID_ARG, "router config: %zu bytes, more than the %d-byte (1 MiB) limit", len,
                         ROUTE_MAX_CONFIG_BYTES);
    if (route_json_depth(json, len, CONFIG_MAX_DEPTH) > CONFIG_MAX_DEPTH)
        return kite_fail(e, KITE_ERR_INVALID_ARG, "router config: nested more than %d levels deep", CONFIG_MAX_DEPTH);
    json_error_t jerr;
    json_t *root = json_loadb(json ? json : "", len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        /* jansson quotes the text near the error ("invalid token near 'sk-...'"): keep the position and the
           kind of error only, never the text. */
        char what[200];
        sfmt(what, sizeof what, "%s", jerr.text);
        char *near = strstr(what, " near ");
        if (near) *near = 0;
        char *quote = strpbrk(what, "'\"");
        if (quote) *quote = 0;
        return kite_fail(e, KITE_ERR_INVALID_ARG, "router config: line %d, column %d: %s", jerr.line, jerr.column, what);
    }
    out->allow_explicit = true;
    out->default_max_tokens = 256;
    int rc = KITE_OK;
    if (!(out->segment_header = dup_string("x-kite-segment"))) rc = kite_fail(e, KITE_ERR_NOMEM, "router config: out of memory");
    if (!rc) rc = parse_config(root, config_dir, out, e);
    json_decref(root);
    if (rc) route_config_free(out);
    return rc;
}

kite_status route_config_load(const char *path, route_config *out, kite_error *e) {
    if (!out || !path) return kite_fail(e, KITE_ERR_INVALID_ARG, "router config: no path");
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f) return kite_fail(e, KITE_ERR_IO, "router config: cannot open %s: %s", path, strerror(errno));
    char *text = malloc(ROUTE_MAX_CONFIG_BYTES + 1);
    if (!text) {
        fclose(f);
        return kite_fail(e, KITE_ERR_NOMEM, "router config: out of memory");
    }
    size_t len = fread(text, 1, ROUTE_MAX_CONFIG_BYTES + 1, f);
    bool failed = ferror(f);
    fclose(f);
    if (failed) {
        free(text);
        return kite_fail(e, KITE_ERR_IO, "router config: cannot read %s", path);
    }
    if (len > ROUTE_MAX_CONFIG_BYTES) {
        free(text);
        return kite_fail(e, KITE_ERR_INVALID_ARG, "router config: %s is larger than the 1 MiB limit", path);
    }
    /* Relative model paths are resolved against the config's folder. */
    char dir[4096] = "";
    const char *slash = strrchr(path, '/');
    if (slash) sfmt(dir, sizeof dir, "%.*s", (int)(slash == path ? 1 : slash - path), path);
    int rc = route_config_parse(text, len, slash ? dir : NULL, out, e);
    free(text);
    return rc;
}

void route_config_free(route_config *cfg) {
    if (!cfg) return;
    for (int32_t i = 0; i < cfg->n_backends && i < ROUTE_MAX_BACKENDS; i++) {
        route_backend *b = &cfg->backends[i];
        free(b->model_path);
        free(b->tokenizer_path);
        free(b->url);
        free(b->remote_model);
        free(b->api_key_env);
        if (b->api_key) {
            /* The key does not linger in freed memory. */
            volatile char *k = b->api_key;
            for (size_t n = strlen(b->api_key); n > 0; n--) *k++ = 0;
            free(b->api_key);
        }
    }
    free(cfg->segment_header);
    free(cfg->user_names);
    free(cfg->user_tags);
    free(cfg->user_n_tags);
    free(cfg->config_dir);
    memset(cfg, 0, sizeof *cfg);
}

int32_t route_config_backend(const route_config *cfg, const char *name) {
    if (!cfg || !name) return -1;
    for (int32_t i = 0; i < cfg->n_backends; i++)
        if (!strcmp(cfg->backends[i].name, name)) return i;
    return -1;
}
