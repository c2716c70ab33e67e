/* The per-request decision (contract in route.h; README "Routing" documents the order):
 *   1. set aside the backends that cannot take the request: a remote in cooldown, a local model not loaded
 *      or not capable on this device, a backend whose context cannot hold the prompt plus the tokens to
 *      generate (max_tokens, else 1; a remote with max_context 0 is assumed to fit). None fits: 400, the
 *      reason naming the prompt's tokens and each limit. Some fit but none is usable: 503.
 *   2. explicit choice (cfg.allow_explicit): the request's "route" = "local" (the local backend), "remote"
 *      (the first usable remote) or a backend's name; a set-aside choice falls back to the others.
 *   3. the rules in config order, the first whose conditions all hold decides:
 *        use NAME:    that backend, then its fallbacks; set aside: straight to the fallbacks (the reason
 *                     says so); no usable fallback either: the rule is passed over;
 *        use fastest: with a latency budget, a usable local backend predicted within it; else the lowest
 *                     prediction, a local backend winning ties within 5%;
 *        confidence:  the gate on the local backend, then its else backend (attempts [local, else]); one of
 *                     the two set aside: the other, without the gate; both: the rule is passed over.
 *   4. no rule decides: the first usable backend in config order.
 * Fallbacks are the rule's "fallback" list (usable ones), else every other usable backend in config order.
 * Pure: reads only its arguments. */
#include <ctype.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "route/route.h"

#define FASTEST_TIE 1.05 /* a local backend within 5% of the fastest counts as a tie, and wins it */

enum { MAX_REQUEST_TAGS = 2 * ROUTE_MAX_TAGS };

typedef struct decide_ctx {
    const route_config *cfg;
    const route_backend_state *st;
    const route_request_info *req;
    route_plan *plan;
    bool usable[ROUTE_MAX_BACKENDS];
    bool fits[ROUTE_MAX_BACKENDS];
    char why[ROUTE_MAX_BACKENDS][80];  /* why a backend is set aside: "in cooldown", "cannot fit 5000 tokens (ctx 2048)" */
    int32_t n_gen;                     /* tokens to generate counted against the context: max_tokens, else 1 */
    double budget_ms;                  /* the request's latency budget, else the config's default; 0 = none */
    char tags[MAX_REQUEST_TAGS][ROUTE_NAME_MAX]; /* the request's segment tags (header, then user mapping) */
    int32_t n_tags;
} decide_ctx;

static void append(char *buf, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void append(char *buf, size_t size, const char *fmt, ...) {
    size_t at = strlen(buf);
    if (at + 1 >= size) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + at, size - at, fmt, ap);
    va_end(ap);
}

static bool printable_name(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n >= ROUTE_NAME_MAX) return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '-' && s[i] != '.' && s[i] != ':') return false;
    return true;
}

static void add_attempt(route_plan *plan, int32_t b) {
    if (b < 0 || plan->n_attempts >= ROUTE_MAX_ATTEMPTS) return;
    for (int32_t i = 0; i < plan->n_attempts; i++)
        if (plan->attempts[i] == b) return;
    plan->attempts[plan->n_attempts++] = b;
}

/* The rule's fallback list (usable entries) when it gives one, else every usable backend in config order;
 * the backends already in the plan are skipped. */
static void add_fallbacks(decide_ctx *c, const route_rule *rule) {
    if (rule && rule->n_fallback >= 0) {
        for (int32_t i = 0; i < rule->n_fallback; i++)
            if (c->usable[rule->fallback[i]]) add_attempt(c->plan, rule->fallback[i]);
        return;
    }
    for (int32_t i = 0; i < c->cfg->n_backends; i++)
        if (c->usable[i]) add_attempt(c->plan, i);
}

/* The first backend add_fallbacks would add (other than skip), or -1. */
static int32_t first_fallback(const decide_ctx *c, const route_rule *rule, int32_t skip) {
    if (rule && rule->n_fallback >= 0) {
        for (int32_t i = 0; i < rule->n_fallback; i++)
            if (c->usable[rule->fallback[i]] && rule->fallback[i] != skip) return rule->fallback[i];
        return -1;
    }
    for (int32_t i = 0; i < c->cfg->n_backends; i++)
        if (c->usable[i] && i != skip) return i;
    return -1;
}

static const char *name_of(const decide_ctx *c, int32_t b) { return c->cfg->backends[b].name; }

static void set_aside(decide_ctx *c) {
    const route_config *cfg = c->cfg;
    int32_t prompt = c->req->prompt_tokens > 0 ? c->req->prompt_tokens : 0;
    for (int32_t i = 0; i < cfg->n_backends; i++) {
        const route_backend *b = &cfg->backends[i];
        const route_backend_state *s = &c->st[i];
        bool local = b->kind == ROUTE_BACKEND_LOCAL;
        c->fits[i] = s->n_ctx <= 0 || (int64_t)prompt + c->n_gen <= s->n_ctx;
        c->usable[i] = false;
        if (!c->fits[i]) {
            if (c->req->max_tokens > 0)
                snprintf(c->why[i], sizeof c->why[i], "cannot fit %d + %d tokens (%s %d)", prompt, c->n_gen,
                         local ? "ctx" : "max_context", s->n_ctx);
            else
                snprintf(c->why[i], sizeof c->why[i], "cannot fit %d tokens (%s %d)", prompt, local ? "ctx" : "max_context",
                         s->n_ctx);
        } else if (!s->available) {
            snprintf(c->why[i], sizeof c->why[i], "%s", local ? "is not loaded" : "is in cooldown");
        } else if (local && !s->capable) {
            snprintf(c->why[i], sizeof c->why[i], "is not capable on this device");
        } else {
            c->usable[i] = true;
            c->why[i][0] = 0;
        }
    }
}

/* The request's tags: the segment header's value (comma-separated, spaces trimmed), then the user's. */
static void request_tags(decide_ctx *c) {
    const char *seg = c->req->segment;
    while (seg && *seg && c->n_tags < ROUTE_MAX_TAGS) {
        while (*seg == ' ' || *seg == '\t' || *seg == ',') seg++;
        const char *end = seg;
        while (*end && *end != ',') end++;
        const char *last = end;
        while (last > seg && (last[-1] == ' ' || last[-1] == '\t')) last--;
        size_t n = (size_t)(last - seg);
        if (n > 0 && n < ROUTE_NAME_MAX) {
            memcpy(c->tags[c->n_tags], seg, n);
            c->tags[c->n_tags++][n] = 0;
        }
        seg = end;
    }
    if (!c->req->user) return;
    for (int32_t u = 0; u < c->cfg->n_users; u++) {
        if (strcmp(c->cfg->user_names[u], c->req->user)) continue;
        for (int32_t k = 0; k < c->cfg->user_n_tags[u] && c->n_tags < MAX_REQUEST_TAGS; k++)
            snprintf(c->tags[c->n_tags++], ROUTE_NAME_MAX, "%s", c->cfg->user_tags[u][k]);
        break;
    }
}

/* Whether the rule's conditions hold; conds gets them in words ("prompt 1803 tokens > 1500"). */
static bool rule_matches(const decide_ctx *c, const route_rule *r, char *conds, size_t size) {
    conds[0] = 0;
    int32_t prompt = c->req->prompt_tokens;
    if (r->prompt_tokens_over >= 0) {
        if (!(prompt > r->prompt_tokens_over)) return false;
        append(conds, size, "prompt %d tokens > %d", prompt, r->prompt_tokens_over);
    }
    if (r->prompt_tokens_under >= 0) {
        if (!(prompt < r->prompt_tokens_under)) return false;
        append(conds, size, "%sprompt %d tokens < %d", *conds ? ", " : "", prompt, r->prompt_tokens_under);
    }
    if (r->n_segments > 0) {
        const char *hit = NULL;
        for (int32_t i = 0; i < r->n_segments && !hit; i++)
            for (int32_t k = 0; k < c->n_tags && !hit; k++)
                if (!strcmp(r->segments[i], c->tags[k])) hit = r->segments[i];
        if (!hit) return false;
        append(conds, size, "%ssegment %s", *conds ? ", " : "", hit);
    }
    if (r->max_latency_ms_under >= 0) {
        if (!(c->budget_ms > 0 && c->budget_ms < r->max_latency_ms_under)) return false;
        append(conds, size, "%sbudget %.0f ms", *conds ? ", " : "", c->budget_ms);
    }
    return true;
}

/* Decides by one rule whose conditions hold; false when it cannot (its backends are set aside). */
static bool apply_rule(decide_ctx *c, const route_rule *r, const char *conds) {
    route_plan *plan = c->plan;
    const route_config *cfg = c->cfg;
    char *reason = plan->reason;
    size_t rs = sizeof plan->reason;
    if (r->confidence) {
        int32_t on = r->conf_backend, els = r->conf_else_backend;
        bool on_ok = c->usable[on], else_ok = c->usable[els];
        if (!on_ok && !else_ok) return false;
        snprintf(reason, rs, "rule %d: %s%s", r->config_index, conds, *conds ? ": " : "");
        if (on_ok && else_ok) {
            plan->confidence = true;
            plan->conf_first_tokens = r->conf_first_tokens;
            plan->conf_quantile = r->conf_quantile;
            plan->conf_min_logprob = r->conf_min_logprob;
            plan->conf_else_backend = els;
            add_attempt(plan, on);
            add_attempt(plan, els);
            if (r->n_fallback >= 0) add_fallbacks(c, r);
            append(reason, rs, "confidence gate on %s (first %d tokens, q%g of logprobs < %g -> %s)", name_of(c, on),
                   r->conf_first_tokens, r->conf_quantile, r->conf_min_logprob, name_of(c, els));
        } else if (on_ok) {
            add_attempt(plan, on);
            add_fallbacks(c, r);
            append(reason, rs, "confidence gate: %s %s, answering from %s without the gate", name_of(c, els), c->why[els],
                   name_of(c, on));
        } else {
            add_attempt(plan, els);
            add_fallbacks(c, r);
            append(reason, rs, "confidence gate: %s %s, answering from %s", name_of(c, on), c->why[on], name_of(c, els));
        }
        return true;
    }
    if (r->use == ROUTE_USE_FASTEST) {
        int32_t best = -1;
        for (int32_t i = 0; i < cfg->n_backends; i++)
            if (c->usable[i] && (best < 0 || plan->predicted_ms[i] < plan->predicted_ms[best])) best = i;
        if (best < 0) return false;
        int32_t pick = best;
        const char *why = "";
        if (cfg->backends[best].kind != ROUTE_BACKEND_LOCAL) {
            for (int32_t i = 0; i < cfg->n_backends; i++) {
                if (!c->usable[i] || cfg->backends[i].kind != ROUTE_BACKEND_LOCAL) continue;
                if (c->budget_ms > 0 && plan->predicted_ms[i] <= c->budget_ms) {
                    pick = i;
                    why = " (local meets the budget)";
                } else if (plan->predicted_ms[i] <= plan->predicted_ms[best] * FASTEST_TIE) {
                    pick = i;
                    why = " (local within 5%)";
                }
                break;
            }
        }
        add_attempt(plan, pick);
        add_fallbacks(c, r);
        snprintf(reason, rs, "rule %d: %s:", r->config_index, *conds ? conds : "fastest");
        bool first = true;
        for (int32_t i = 0; i < cfg->n_backends; i++) {
            if (!c->usable[i]) continue;
            append(reason, rs, "%s %s %.0f ms", first ? "" : ",", name_of(c, i), plan->predicted_ms[i]);
            first = false;
        }
        append(reason, rs, "%s", why);
        return true;
    }
    int32_t b = r->backend;
    snprintf(reason, rs, "rule %d: %s", r->config_index, *conds ? conds : "always");
    if (c->usable[b]) {
        add_attempt(plan, b);
        add_fallbacks(c, r);
        return true;
    }
    int32_t fb = first_fallback(c, r, b);
    if (fb < 0) {
        reason[0] = 0;
        return false;
    }
    add_fallbacks(c, r);
    append(reason, rs, "; %s %s, falling back to %s", name_of(c, b), c->why[b], name_of(c, fb));
    return true;
}

/* The request's "route". Returns whether it decided (or failed the request). */
static bool apply_explicit(decide_ctx *c) {
    const char *route = c->req->route;
    route_plan *plan = c->plan;
    const route_config *cfg = c->cfg;
    if (!route || !cfg->allow_explicit) return false;
    const char *shown = printable_name(route) && strlen(route) <= 32 ? route : "(not a name)";
    int32_t target = -1;
    if (!strcmp(route, "local")) {
        for (int32_t i = 0; i < cfg->n_backends && target < 0; i++)
            if (cfg->backends[i].kind == ROUTE_BACKEND_LOCAL) target = i;
        if (target < 0) {
            plan->http_status = 400;
            snprintf(plan->reason, sizeof plan->reason, "explicit: route=local but the router has no local backend");
            return true;
        }
    } else if (!strcmp(route, "remote")) {
        int32_t first_remote = -1;
        for (int32_t i = 0; i < cfg->n_backends && target < 0; i++) {
            if (cfg->backends[i].kind != ROUTE_BACKEND_REMOTE) continue;
            if (first_remote < 0) first_remote = i;
            if (c->usable[i]) target = i;
        }
        if (first_remote < 0) {
            plan->http_status = 400;
            snprintf(plan->reason, sizeof plan->reason, "explicit: route=remote but the router has no remote backend");
            return true;
        }
        if (target < 0) target = first_remote;
    } else if ((target = route_config_backend(cfg, route)) < 0) {
        plan->http_status = 400;
        snprintf(plan->reason, sizeof plan->reason, "explicit: route=%s names no backend", shown);
        return true;
    }
    snprintf(plan->reason, sizeof plan->reason, "explicit: route=%s", shown);
    if (c->usable[target]) {
        add_attempt(plan, target);
    } else {
        int32_t fb = first_fallback(c, NULL, target);
        append(plan->reason, sizeof plan->reason, ": %s %s, falling back to %s", name_of(c, target), c->why[target],
               name_of(c, fb));
    }
    add_fallbacks(c, NULL);
    return true;
}

void route_decide(const route_config *cfg, const route_backend_state *states, const route_request_info *req,
                  route_plan *plan) {
    memset(plan, 0, sizeof *plan);
    plan->rule = -1;
    plan->conf_else_backend = -1;
    for (int32_t i = 0; i < ROUTE_MAX_BACKENDS; i++) plan->predicted_ms[i] = -1;
    decide_ctx c = {.cfg = cfg, .st = states, .req = req, .plan = plan};
    c.n_gen = req->max_tokens > 0 ? req->max_tokens : 1;
    c.budget_ms = req->max_latency_ms > 0 ? req->max_latency_ms : cfg->default_max_latency_ms;
    int32_t completion = req->max_tokens > 0 ? req->max_tokens : cfg->default_max_tokens > 0 ? cfg->default_max_tokens : 256;
    for (int32_t i = 0; i < cfg->n_backends; i++)
        plan->predicted_ms[i] = route_latency_predict_ms(&states[i].latency, &cfg->backends[i], req->prompt_tokens, completion);
    set_aside(&c);
    request_tags(&c);

    /* Nothing can take it: a 400 when the prompt fits no context, a 503 when those it fits are down. */
    bool any_fits = false, any_usable = false;
    for (int32_t i = 0; i < cfg->n_backends; i++) {
        any_fits |= c.fits[i];
        any_usable |= c.usable[i];
    }
    if (!any_usable) {
        plan->http_status = any_fits ? 503 : 400;
        if (any_fits) {
            snprintf(plan->reason, sizeof plan->reason, "no backend can take the request:");
        } else if (req->max_tokens > 0) {
            snprintf(plan->reason, sizeof plan->reason, "prompt %d tokens + %d to generate fits no backend:",
                     req->prompt_tokens, req->max_tokens);
        } else {
            snprintf(plan->reason, sizeof plan->reason, "prompt %d tokens fits no backend:", req->prompt_tokens);
        }
        for (int32_t i = 0; i < cfg->n_backends; i++) {
            const char *sep = i ? "," : "";
            if (!any_fits)
                append(plan->reason, sizeof plan->reason, "%s %s %s %d", sep, name_of(&c, i),
                       cfg->backends[i].kind == ROUTE_BACKEND_LOCAL ? "ctx" : "max_context", states[i].n_ctx);
            else
                append(plan->reason, sizeof plan->reason, "%s %s %s", sep, name_of(&c, i), c.why[i]);
        }
        return;
    }
    if (apply_explicit(&c)) return;
    for (int32_t k = 0; k < cfg->n_rules; k++) {
        const route_rule *r = &cfg->rules[k];
        char conds[128];
        if (!rule_matches(&c, r, conds, sizeof conds)) continue;
        plan->n_attempts = 0;
        if (apply_rule(&c, r, conds)) {
            plan->rule = r->config_index;
            return;
        }
    }
    for (int32_t i = 0; i < cfg->n_backends; i++)
        if (c.usable[i]) {
            add_attempt(plan, i);
            break;
        }
    add_fallbacks(&c, NULL);
    snprintf(plan->reason, sizeof plan->reason, "%s: first usable backend %s", cfg->n_rules ? "no rule matched" : "no rules",
             name_of(&c, plan->attempts[0]));
}

char *route_plan_json(const route_config *cfg, const route_plan *plan) {
    json_t *o = json_object(), *attempts = json_array(), *pred = json_object();
    if (!o || !attempts || !pred) {
        json_decref(o);
        json_decref(attempts);
        json_decref(pred);
        return NULL;
    }
    json_object_set_new(o, "http_status", json_integer(plan->http_status ? plan->http_status : 200));
    json_object_set_new(o, "backend",
                        plan->n_attempts > 0 ? json_string(cfg->backends[plan->attempts[0]].name) : json_null());
    json_object_set_new(o, "rule", plan->rule >= 0 ? json_integer(plan->rule) : json_null());
    json_object_set_new(o, "reason", json_string(plan->reason));
    for (int32_t i = 0; i < plan->n_attempts; i++) json_array_append_new(attempts, json_string(cfg->backends[plan->attempts[i]].name));
    json_object_set_new(o, "attempts", attempts);
    if (plan->confidence) {
        json_t *conf = json_object();
        json_object_set_new(conf, "backend", json_string(cfg->backends[plan->attempts[0]].name));
        json_object_set_new(conf, "first_tokens", json_integer(plan->conf_first_tokens));
        json_object_set_new(conf, "quantile", json_real(plan->conf_quantile));
        json_object_set_new(conf, "min_logprob", json_real(plan->conf_min_logprob));
        json_object_set_new(conf, "else", json_string(cfg->backends[plan->conf_else_backend].name));
        json_object_set_new(o, "confidence", conf);
    } else {
        json_object_set_new(o, "confidence", json_null());
    }
    for (int32_t i = 0; i < cfg->n_backends; i++)
        if (plan->predicted_ms[i] >= 0 && isfinite(plan->predicted_ms[i]))
            json_object_set_new(pred, cfg->backends[i].name, json_real(round(plan->predicted_ms[i] * 1000.0) / 1000.0));
    json_object_set_new(o, "predicted_ms", pred);
    char *text = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(12));
    json_decref(o);
    return text;
}

/* ---- the confidence statistic ---------------------------------------------------------------- */
static int compare_double(const void *pa, const void *pb) {
    double a = *(const double *)pa, b = *(const double *)pb;
    return (a > b) - (a < b);
}

/* numpy's default ("linear", method 7 of Hyndman and Fan): h = (n - 1) q, the value at h interpolated
 * between the order statistics floor(h) and floor(h) + 1. NaNs are dropped first; an interpolation that
 * involves -inf is -inf (numpy would say NaN for -inf + 0 * inf). */
double route_quantile_sorted(const double *x, size_t n, double q) {
    if (n == 0) return NAN;
    if (!(q >= 0)) q = 0;
    if (q > 1) q = 1;
    double h = (double)(n - 1) * q;
    size_t lo = (size_t)floor(h);
    if (lo >= n - 1) return x[n - 1];
    double frac = h - (double)lo;
    if (frac == 0) return x[lo];
    if (isinf(x[lo]) || isinf(x[lo + 1])) return isinf(x[lo]) ? x[lo] : x[lo + 1];
    return x[lo] + frac * (x[lo + 1] - x[lo]);
}

double route_logprob_quantile(const float *logprobs, size_t n, double q) {
    if (!logprobs || n == 0) return NAN;
    double stack[64], *x = n <= 64 ? stack : malloc(n * sizeof *x);
    if (!x) return NAN;
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (!isnan(logprobs[i])) x[m++] = logprobs[i];
    qsort(x, m, sizeof *x, compare_double);
    double v = route_quantile_sorted(x, m, q);
    if (x != stack) free(x);
    return v;
}
