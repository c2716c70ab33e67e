/* The hybrid router's insides (issue 12), shared by its files:
 *   config.c    the router's JSON config parsed into route_config (every field validated, errors name it)
 *   policy.c    the per-request decision: explicit choice, context fit, device capability, the ordered
 *               rules (length, segment, latency budget, confidence gate), fallbacks -> a route_plan
 *   latency.c   what each backend is predicted to take (local: measured prefill/decode speeds; remote:
 *               moving averages of observed time to first token and per-token time)
 *   sse.c       an incremental Server-Sent Events parser (the WHATWG event-stream grammar)
 *   upstream.c  the OpenAI-compatible upstream client over libcurl: streaming POSTs with connect,
 *               first-token and total timeouts, retries with backoff honouring Retry-After, cheap health
 *               probes (GET /v1/models), per-backend failure counts and cooldowns
 * The execution of a plan (streaming to the client, fallbacks, continuing a broken remote answer
 * locally) is the server's (src/serve), which owns the local model and the client connection.
 * Nothing here logs or returns an API key: keys live only in route_backend.api_key and the
 * Authorization header curl sends. */
#ifndef KITE_ROUTE_ROUTE_H
#define KITE_ROUTE_ROUTE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "kite.h"

enum {
    ROUTE_MAX_BACKENDS = 16,
    ROUTE_MAX_RULES = 64,
    ROUTE_MAX_TAGS = 16,        /* segments named in one rule / mapped to one user */
    ROUTE_MAX_ATTEMPTS = 8,     /* backends one plan tries in turn */
    ROUTE_NAME_MAX = 64,        /* bytes of a backend name or tag, NUL included */
    ROUTE_MAX_USERS = 4096,     /* entries of segments.users */
    ROUTE_MAX_CONFIG_BYTES = 1 << 20, /* a config file */
};

/* ---- config.c --------------------------------------------------------------------------------- */
typedef enum route_backend_kind {
    ROUTE_BACKEND_LOCAL = 0,   /* a model this process runs */
    ROUTE_BACKEND_REMOTE = 1,  /* an OpenAI-compatible endpoint */
} route_backend_kind;

typedef struct route_timeouts {
    int32_t connect_ms;        /* TCP+TLS connect; default 2000 */
    int32_t first_token_ms;    /* request sent -> first content token; default 10000 */
    int32_t total_ms;          /* whole request; default 120000 */
} route_timeouts;

typedef struct route_backend {
    char name[ROUTE_NAME_MAX];
    route_backend_kind kind;
    /* local */
    char *model_path;          /* GGUF / HF folder / llama2.c .bin, relative paths against the config's folder */
    char *tokenizer_path;      /* optional (llama2.c .bin models) */
    int32_t n_ctx;             /* tokens; 0 = the model's (capped as kite serve caps it) */
    int32_t n_threads;         /* 0 = kite's default */
    double min_decode_tok_s;   /* device capability: below this predicted decode speed the local side is not
                                  chosen (0 = no floor) */
    /* remote */
    char *url;                 /* base URL up to and including /v1, no trailing slash */
    char *remote_model;        /* "model" sent upstream */
    char *api_key_env;         /* the environment variable holding the key, or NULL for none */
    char *api_key;             /* its value, read at load (never logged, never in an error) */
    route_timeouts timeout;
    int32_t max_context;       /* tokens the remote accepts (prompt + completion); 0 = unknown (assumed to fit) */
    int32_t max_retries;       /* retries of one attempt before its first token (5xx, 429, connect); default 2 */
    int32_t retry_base_ms;     /* backoff base: base * 2^k with jitter, capped by Retry-After's larger value; default 200 */
    int32_t failures_to_cooldown; /* consecutive failed attempts that put it in cooldown; default 3 */
    int32_t cooldown_ms;       /* how long before a health probe may bring it back; default 30000 */
    bool require_reachable;    /* unreachable at open is an error (default false: a warning, and it starts in cooldown) */
    bool token_ids;            /* ask for "return_token_ids" (vLLM's and kite's extension): a cut answer is continued
                                  from the remote's own token ids when its prompt ids equal the local ones (exact) */
} route_backend;

typedef enum route_use_kind {
    ROUTE_USE_BACKEND = 0,     /* a named backend */
    ROUTE_USE_FASTEST = 1,     /* the backend with the lowest predicted latency (local on a tie) */
} route_use_kind;

typedef struct route_rule {
    /* when: every condition given must hold (none given = always) */
    int32_t prompt_tokens_over;     /* -1 = not given */
    int32_t prompt_tokens_under;    /* -1 = not given */
    char segments[ROUTE_MAX_TAGS][ROUTE_NAME_MAX]; /* any of these tags */
    int32_t n_segments;
    double max_latency_ms_under;    /* the request's latency budget is below this; < 0 = not given */
    /* then */
    route_use_kind use;
    int32_t backend;                /* USE_BACKEND: index into route_config.backends; -1 for a confidence rule */
    int32_t fallback[ROUTE_MAX_ATTEMPTS]; /* backends tried in turn when the chosen one fails */
    int32_t n_fallback;             /* -1 = not given: every other backend, in config order */
    /* confidence gate: run locally, hold back the first `first_tokens` tokens; when the `quantile` of their
       log-probabilities is below min_logprob, discard them and answer from `else_backend` */
    bool confidence;
    int32_t conf_first_tokens;      /* K >= 1 */
    double conf_quantile;           /* in [0, 1] */
    double conf_min_logprob;        /* natural log, <= 0 */
    int32_t conf_backend;           /* the backend that runs first (default: the first local one) */
    int32_t conf_else_backend;      /* required */
    int32_t config_index;           /* position in the config's "rules" array (for reasons and metrics) */
} route_rule;

typedef struct route_config {
    route_backend backends[ROUTE_MAX_BACKENDS];
    int32_t n_backends;
    route_rule rules[ROUTE_MAX_RULES];
    int32_t n_rules;
    bool allow_explicit;            /* "explicit": the request's "route" field may pick (default true) */
    char *segment_header;           /* header whose value is the request's segment tag (default "x-kite-segment") */
    /* "segments": {"users": {"alice": ["pro"], ...}}: the request's `user` field mapped to tags */
    char (*user_names)[ROUTE_NAME_MAX];
    char (*user_tags)[ROUTE_MAX_TAGS][ROUTE_NAME_MAX];
    int32_t *user_n_tags;
    int32_t n_users;
    double default_max_latency_ms;  /* a budget for requests that give none; 0 = none */
    int32_t default_max_tokens;     /* completion length assumed for latency when the request gives none; default 256 */
    char *config_dir;               /* the folder relative model paths are resolved against */
} route_config;

/* Parses a config. Unknown keys, wrong types, out-of-range values, unknown backend names in rules, an
 * api_key_env that is not set: KITE_ERR_INVALID_ARG with a message naming the JSON path
 * ("rules[3].when.segment: ..."). config_dir may be NULL (the current folder). */
kite_status route_config_parse(const char *json, size_t len, const char *config_dir, route_config *out, kite_error *e);
kite_status route_config_load(const char *path, route_config *out, kite_error *e);
void route_config_free(route_config *cfg);
/* -1 when no backend has that name. */
int32_t route_config_backend(const route_config *cfg, const char *name);
/* Deepest nesting of arrays and objects in JSON text (brackets outside strings only); stops at limit + 1,
 * so the scan is linear and never recurses. Checked before jansson parses anything the router reads. */
int32_t route_json_depth(const char *text, size_t len, int32_t limit);

/* ---- latency.c -------------------------------------------------------------------------------- */
typedef struct route_latency {
    /* local: measured at open (kite_session on the model), then refined by the answers the server gives
       (route_latency_observe_local), in seconds */
    double prefill_s_per_token;
    double decode_s_per_token;
    double fixed_s;                 /* per-request overhead */
    /* remote: exponentially weighted moving averages of observed requests (alpha 0.2); n_observed = 0
       means nothing seen yet and the prediction uses the config's timeouts as a pessimistic guess */
    double ewma_ttft_s;
    double ewma_s_per_token;
    int64_t n_observed;
} route_latency;

/* Predicted wall time of a request (prompt tokens in, completion tokens out), in milliseconds. */
double route_latency_predict_ms(const route_latency *l, const route_backend *b, int32_t prompt_tokens,
                                int32_t completion_tokens);
void route_latency_observe(route_latency *l, double ttft_s, double s_per_token);
/* A local answer as the client saw it: prefilled_tokens prompt tokens computed (not taken from the
 * prefix cache), the first token ttft_s after the request reached the scheduler, then s_per_token per
 * further token. The per-token averages move by the same EWMA as a remote's (fixed_s stays as measured),
 * so under load (queueing, batching with other requests) local predictions grow as the wait does.
 * Samples that are negative, not finite or measure nothing leave their average alone. */
void route_latency_observe_local(route_latency *l, int32_t prefilled_tokens, double ttft_s, double s_per_token);
/* Measures a local model's speeds with n_threads (0 = the model's setting): a 1-token and a 32-token
 * prefill (a two-point fit gives fixed_s and prefill_s_per_token) and 8 greedy decode tokens, after one
 * warm-up pass. Sets n_observed to 1. Takes a few forward passes (milliseconds for small models). */
kite_status route_measure_local(kite_model *m, int32_t n_threads, route_latency *out, kite_error *e);

/* ---- policy.c --------------------------------------------------------------------------------- */
/* What the policies read about one request and the backends' state at that moment. */
typedef struct route_request_info {
    int32_t prompt_tokens;          /* counted with the local model's tokenizer (the template applied) */
    int32_t max_tokens;             /* the request's, or -1 */
    const char *user;               /* the request's `user`, or NULL */
    const char *segment;            /* the segment header's value, or NULL */
    const char *route;              /* the request's "route": "local", "remote" or a backend name; or NULL */
    double max_latency_ms;          /* the request's "max_latency_ms"; <= 0 = none */
} route_request_info;

typedef struct route_backend_state {
    bool available;                 /* false while in cooldown (or, local, the model is not loaded) */
    bool capable;                   /* local: the device can run it well (memory, min_decode_tok_s) */
    int32_t n_ctx;                  /* local: the context a request gets; remote: max_context (0 = unknown) */
    route_latency latency;
} route_backend_state;

typedef struct route_plan {
    int http_status;                /* 0; 400 when the prompt fits no backend, or the request's route names none;
                                       503 when every backend it fits is unavailable (message in reason) */
    int32_t attempts[ROUTE_MAX_ATTEMPTS]; /* backend indices in the order to try */
    int32_t n_attempts;
    int32_t rule;                   /* config index of the deciding rule; -1 explicit choice or no rule matched */
    char reason[192];               /* one line: "rule 1: segment pro", "explicit: route=remote", ... */
    bool confidence;                /* attempts[0] runs with the gate below */
    int32_t conf_first_tokens;
    double conf_quantile;
    double conf_min_logprob;
    int32_t conf_else_backend;
    double predicted_ms[ROUTE_MAX_BACKENDS]; /* what the latency policy saw (<0 = not computed) */
} route_plan;

/* The decision, in the documented order (README "Routing"): explicit choice; backends that cannot take
 * the request are set aside (context fit, device capability, cooldown); the rules in order, the first
 * whose conditions hold decides; its fallbacks follow. Pure: reads only its arguments. */
void route_decide(const route_config *cfg, const route_backend_state *states, const route_request_info *req,
                  route_plan *plan);
/* The plan as JSON text (kite route explain): {"backend", "reason", "rule", "attempts": [...], ...};
 * caller frees with free(). */
char *route_plan_json(const route_config *cfg, const route_plan *plan);

/* The confidence statistic: the q-quantile (linear interpolation between order statistics, numpy's
 * default) of n log-probabilities. */
double route_logprob_quantile(const float *logprobs, size_t n, double q);
/* The same over n doubles sorted ascending (no NaN); NAN when n is 0. */
double route_quantile_sorted(const double *x, size_t n, double q);

/* ---- sse.c ------------------------------------------------------------------------------------ */
typedef struct route_sse_event {
    const char *event;              /* "" when the stream named none ("message") */
    const char *data;               /* data lines joined with '\n' (NUL-terminated, data_len bytes) */
    size_t data_len;
    const char *id;                 /* last event id, or "" */
    int64_t retry_ms;               /* -1 unless this event set it */
} route_sse_event;

/* Returns 0 to go on, non-zero to stop parsing (route_sse_feed then returns KITE_ERR_CANCELLED). */
typedef int (*route_sse_fn)(const route_sse_event *ev, void *user_data);

typedef struct route_sse_parser route_sse_parser;
/* max_event_bytes bounds one event's buffered data (0 = 8 MiB): a longer one is KITE_ERR_INVALID_ARG. */
route_sse_parser *route_sse_new(size_t max_event_bytes);
void route_sse_free(route_sse_parser *p);
/* Feeds bytes in any split (a CR LF pair across two calls counts once). Events are dispatched at blank
 * lines; a UTF-8 BOM at the very start is skipped; comments (":...") ignored. */
kite_status route_sse_feed(route_sse_parser *p, const char *bytes, size_t n, route_sse_fn fn, void *user_data,
                           kite_error *e);
/* End of stream: an event not terminated by a blank line is discarded, as the spec says. Returns whether
 * the stream ended between events (false = cut inside one). */
bool route_sse_finish(route_sse_parser *p);

/* ---- upstream.c ------------------------------------------------------------------------------- */
typedef enum route_fault {
    ROUTE_OK = 0,
    ROUTE_FAULT_CONNECT,            /* refused, unreachable, DNS, TLS */
    ROUTE_FAULT_CONNECT_TIMEOUT,
    ROUTE_FAULT_FIRST_TOKEN_TIMEOUT,
    ROUTE_FAULT_TOTAL_TIMEOUT,
    ROUTE_FAULT_RATE_LIMITED,       /* 429 (retry_after_ms set when the server said) */
    ROUTE_FAULT_HTTP_5XX,
    ROUTE_FAULT_HTTP_4XX,           /* other than 429: the request itself is bad; not retried, no fallback
                                       cooldown (the body's error message is in message) */
    ROUTE_FAULT_MALFORMED,          /* not SSE, bad JSON in a chunk, an error object in the stream */
    ROUTE_FAULT_CUT,                /* the stream ended without [DONE] or a finish_reason */
    ROUTE_FAULT_CANCELLED,          /* *cancel became true */
} route_fault;

const char *route_fault_name(route_fault f); /* "connect", "first_token_timeout", ... (metrics labels) */

typedef struct route_upstream_result {
    route_fault fault;
    int http_status;                /* last HTTP status seen, 0 if none */
    int32_t retry_after_ms;         /* from Retry-After (seconds or HTTP date), -1 if absent */
    int32_t n_retries;              /* retries made */
    bool got_first_token;           /* a chunk with content (or a tool call, or reasoning) arrived */
    char finish_reason[32];         /* the upstream's, "" if none arrived */
    double ttft_s;                  /* request sent -> first token */
    double total_s;
    int64_t completion_tokens;      /* chunks with content counted, or usage.completion_tokens when sent */
    char message[256];              /* what went wrong, one line, no key */
} route_upstream_result;

/* Called with each parsed chunk (the JSON text of one SSE data event other than [DONE]). Return 0 to
 * go on, non-zero to abort (fault CANCELLED). */
typedef int (*route_chunk_fn)(const char *chunk_json, size_t len, void *user_data);

typedef struct route_upstream route_upstream;

/* One remote backend's client (borrows b, which must outlive it). curl_global_init is done once, thread-
 * safely, by the first call. */
kite_status route_upstream_open(route_upstream **out, const route_backend *b, kite_error *e);
void route_upstream_free(route_upstream *u);

/* POSTs body (an OpenAI request; the caller has set "stream": true and "model") to url + path
 * ("/chat/completions" or "/completions") and streams its chunks to fn. Retries (up to max_retries, with
 * backoff honouring Retry-After, never past the total timeout) only while no chunk has been delivered.
 * Thread-safe: many requests may run on one upstream at once (each on a handle of its own; connections
 * are kept alive and reused). *cancel (may be NULL) is polled at least every 50 ms. The outcome is also
 * counted in the backend's health (below). */
void route_upstream_stream(route_upstream *u, const char *path, const char *body, size_t len, route_chunk_fn fn,
                           void *user_data, const atomic_bool *cancel, route_upstream_result *res);

/* Health: `failures_to_cooldown` consecutive failed attempts (connect, timeouts, 5xx, 429 past its
 * retries, malformed, cut) put the backend in cooldown for cooldown_ms; a connect failure (refused,
 * unreachable: the network is down) puts it there at once, so an offline machine waits on no further
 * timeouts. When the cooldown ends, route_upstream_available runs one health probe (GET url/models with
 * the connect timeout, at most one at a time) and the backend is back when it answers 200. */
bool route_upstream_available(route_upstream *u);
/* One health probe now (GET url/models, connect timeout), whatever the cooldown: KITE_OK when it
 * answers 200, else KITE_ERR_IO with e saying what failed (refused, timeout, status). Used at open to
 * report an unreachable backend (the backend then starts in cooldown). */
kite_status route_upstream_probe(route_upstream *u, kite_error *e);
/* Counters for /metrics (monotonic since open). */
typedef struct route_upstream_counters {
    uint64_t requests, failures, retries, cooldowns, probes, probe_failures;
    uint64_t faults[ROUTE_FAULT_CANCELLED + 1];
    bool in_cooldown;
} route_upstream_counters;
void route_upstream_get_counters(route_upstream *u, route_upstream_counters *out);
/* The latency averages this client has observed (for the latency policy). */
void route_upstream_get_latency(route_upstream *u, route_latency *out);

/* ---- router.c: the public kite_router ---------------------------------------------------------- */
/* Opened once; shared by the server's connection threads (route_decide is pure; the states and the
 * counters are read and written under mu). One local backend at most (the server serves one model). */
struct kite_router {
    route_config cfg;
    int32_t local_backend;                           /* index, or -1 */
    kite_model *local_model;                         /* owned */
    route_upstream *upstreams[ROUTE_MAX_BACKENDS];   /* remote backends' clients, NULL for the local one */
    route_latency local_latency;                     /* measured at open, refined by the server's answers (under mu) */
    bool local_capable;                              /* the device can run the local model well: it fits in the
                                                        memory free at open, and its measured decode speed reaches
                                                        min_decode_tok_s */
    kite_chat_template *local_template;              /* the local model's chat template (prompt counting), or NULL */
    pthread_mutex_t mu;
    /* counters for /metrics (under mu) */
    uint64_t decisions_by_rule[ROUTE_MAX_RULES + 1]; /* [config index], [n_rules] = explicit / no rule */
    uint64_t answered_by_backend[ROUTE_MAX_BACKENDS];
    uint64_t fallbacks_from_backend[ROUTE_MAX_BACKENDS];
    uint64_t confidence_escalations;                 /* confidence gates that sent the request on */
    uint64_t overflows;                              /* local queue full -> another backend */
    uint64_t midstream_continuations;                /* remote cut mid-answer, continued locally */
};

/* The backends' states at this moment (cooldowns probed as route_upstream_available does). */
void route_router_states(struct kite_router *r, route_backend_state states[ROUTE_MAX_BACKENDS]);
/* Fills info from an OpenAI body and counts its prompt tokens with the local model's tokenizer (the
 * chat template applied; without a template, the contents' text joined by newlines; without a local model,
 * bytes / 4 rounded up). Reads "route", "user", "max_completion_tokens" (else "max_tokens"),
 * "max_latency_ms"; route_buf and user_buf receive the strings info points to (a user longer than its
 * buffer is left out: it could match no mapped user). Returns 0, or 400 (a field of the wrong type, a body
 * without messages or prompt) or 500 (out of memory) with e filled. */
int route_request_info_from_body(struct kite_router *r, const char *body, size_t len, const char *segment,
                                 route_request_info *info, char *route_buf, size_t route_buf_size, char *user_buf,
                                 size_t user_buf_size, kite_error *e);

#endif
