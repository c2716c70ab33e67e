/* The OpenAI-compatible server's insides, shared by its files:
 *   http.c       libmicrohttpd (a thread per connection), endpoints, responses, the public kite_server_* API
 *   scheduler.c  one thread owning the sessions (slots) and the kite_batch; admission with the prefix
 *                cache, token callbacks that fill each request's channel, finishing requests
 *   metrics.c    counters and the Prometheus text of /metrics
 *   text.c       byte buffers, UTF-8 repair for JSON, SSE framing
 * Threads: MHD's connection threads parse, tokenize and enqueue requests, then wait on the request's
 * channel; the scheduler thread runs the model and never waits on the network. A request is shared by
 * both through a reference count. */
#ifndef KITE_SERVE_SERVER_H
#define KITE_SERVE_SERVER_H

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chat/tool_calls.h"
#include "kite.h"
#include "route/route.h"
#include "serve/openai.h"

/* ---- text.c ----------------------------------------------------------------------------------- */
typedef struct serve_buf {
    char *data;
    size_t len, cap;
} serve_buf;

bool serve_buf_append(serve_buf *b, const char *bytes, size_t n);
/* Appends printf-style text of any length; false when out of memory or on a bad format. */
bool serve_buf_printf(serve_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void serve_buf_free(serve_buf *b);
/* A JSON string of bytes that may hold invalid UTF-8: each invalid byte becomes U+FFFD. NULL only when
 * out of memory. */
json_t *serve_json_text(const char *bytes, size_t n);
/* Appends `data: <compact JSON>\n\n` (an SSE event as OpenAI frames it). */
bool serve_sse_append(serve_buf *b, const json_t *event);
/* Seconds on the monotonic clock. */
double serve_now(void);
/* A condition variable whose timed waits read the monotonic clock (deadlines from serve_now's clock). */
void serve_cond_init(pthread_cond_t *cv);

/* ---- metrics.c -------------------------------------------------------------------------------- */
enum { SERVE_N_ENDPOINTS = 6, SERVE_N_STATUS = 16, SERVE_N_TTFT_BUCKETS = 11 };
typedef enum serve_endpoint {
    SERVE_EP_CHAT = 0,
    SERVE_EP_COMPLETIONS = 1,
    SERVE_EP_MODELS = 2,
    SERVE_EP_HEALTH = 3,
    SERVE_EP_METRICS = 4,
    SERVE_EP_OTHER = 5,
} serve_endpoint;

typedef struct serve_metrics {
    pthread_mutex_t mu;
    int status_codes[SERVE_N_ENDPOINTS][SERVE_N_STATUS]; /* distinct statuses seen per endpoint */
    uint64_t status_counts[SERVE_N_ENDPOINTS][SERVE_N_STATUS];
    uint64_t prompt_tokens;     /* prompt tokens of admitted requests (reused ones included) */
    uint64_t prefilled_tokens;  /* prompt tokens the model ran */
    uint64_t generated_tokens;
    double prefill_seconds;     /* wall time of batch steps that prefilled */
    double decode_seconds;      /* wall time of batch steps that only decoded */
    uint64_t decode_only_tokens;/* tokens generated in those steps */
    uint64_t ttft_buckets[SERVE_N_TTFT_BUCKETS]; /* cumulative counts per upper bound (last: +Inf) */
    double ttft_sum;
    uint64_t ttft_count;
    uint64_t prefix_hits;       /* requests that started from cached K/V */
    uint64_t prefix_reused_tokens;
    uint64_t prefix_copies;     /* of those, K/V copied from another slot */
    uint64_t batch_steps;       /* kite_batch_step calls */
    uint64_t batch_slot_steps;  /* busy slots summed over those steps (their ratio: requests per pass) */
    uint64_t spec_drafted;      /* drafted tokens verified (speculative decoding) */
    uint64_t spec_accepted;     /* of those, accepted */
} serve_metrics;

const char *serve_endpoint_name(serve_endpoint endpoint);
void serve_metrics_init(serve_metrics *m);
void serve_metrics_destroy(serve_metrics *m);
void serve_metrics_request(serve_metrics *m, serve_endpoint endpoint, int http_status);
void serve_metrics_ttft(serve_metrics *m, double seconds);
/* The Prometheus text exposition; queue_depth and busy_slots are read by the caller. */
char *serve_metrics_text(serve_metrics *m, int32_t queue_depth, int32_t busy_slots, int32_t n_slots);

/* ---- requests --------------------------------------------------------------------------------- */
typedef struct serve_slot serve_slot;
typedef struct serve_request serve_request;

enum { SERVE_ROUTE_MAX_GATE = 64 }; /* tokens a confidence gate may hold back */

/* A routed request's plan and progress (route_exec.c; the server has a router). The runner thread
 * tries the plan's backends in turn; the connection thread sends nothing until `committed`. Fields
 * below the mutex note are read and written under the request's mu. */
typedef struct serve_route {
    route_plan plan;
    int32_t prompt_tokens;           /* the policy's count (local tokenizer) */
    char *body;                      /* the client's body, for remotes */
    size_t body_len;
    int32_t attempt;                 /* index into plan.attempts being run */
    int32_t backend;                 /* the backend running now */
    int32_t answer_backend;          /* the one whose output went out first (named in the answer); -1 before */
    json_t *attempts;                /* [{"backend", "outcome", "message"}] the tries so far */
    bool hold;                       /* remote output is held until the remote finishes (structured output,
                                        tools): a cut then costs nothing the client saw */
    serve_buf held;                  /* stream: held SSE events */
    serve_buf sent_content;          /* content the client has been sent (or, held, would be) */
    serve_buf sent_reasoning;
    json_t *tool_calls;              /* non-stream: a remote's calls merged from its deltas */
    int64_t remote_tokens;           /* content pieces a remote delivered before a cut */
    int32_t *remote_ids;             /* the remote's token ids of the text delivered (backend "token_ids") */
    size_t n_remote_ids, cap_remote_ids;
    int32_t *remote_prompt_ids;      /* the remote's prompt ids (its first chunk's prompt_token_ids) */
    size_t n_remote_prompt_ids;
    char remote_finish[32];
    bool continued;                  /* a remote cut mid-answer, continued locally */
    bool delivered;                  /* a remote's content reached the client */
    /* confidence gate (scheduler thread) */
    int32_t gate_tokens;             /* K; 0 = no gate */
    int32_t gate_seen;
    float gate_logprobs[SERVE_ROUTE_MAX_GATE];
    bool gate_decided;
    bool gate_failed;                /* the gate sent the request on (kept across tries) */
    double gate_score;               /* the quantile once decided */
    /* under the request's mu */
    bool committed;                  /* output may go to the client (headers name answer_backend); set with
                                        serve_route_commit_locked */
    bool escalated;                  /* the gate failed: the local work ended without an answer */
    bool local_ended;                /* the scheduler let go of an escalated request */
} serve_route;

struct serve_request {
    atomic_int refs;
    atomic_bool cancelled;           /* the client went away, or the server stops */
    struct kite_server *server;
    kite_openai_request oa;          /* the parsed body */
    int32_t *prompt_ids;             /* the whole prompt (kite_free'd when from kite_chat_tokenize: see ids_from_lib) */
    size_t n_prompt;
    bool ids_from_lib;
    kite_gen_params gen;             /* stop and logit_bias point into oa, grammar to the one below */
    kite_grammar *grammar;           /* response_format / grammar / a forced tool call, or NULL */
    kite_tool_stream *replies;       /* stream chat: the reply parsed into content, reasoning and tool calls as
                                        it streams (tools offered, or a template that writes <think>), or NULL */
    bool parse_reply;                /* non-stream chat, in the same cases: content holds the reply's text,
                                        parsed once when it ends (reply_options) */
    kite_tool_parse_options reply_options;
    char id[48];                     /* chatcmpl-... / cmpl-... */
    int64_t created;                 /* Unix seconds */
    double t_received;               /* serve_now() when the body was in */
    double t_first_token;            /* serve_now() at the first generated token (0 = none yet) */
    double deadline;                 /* serve_now() past which it is cancelled (timeout) */
    int client_fd;                   /* the connection's socket, watched for a client that leaves */
    struct serve_request *next;      /* the server's queue */

    /* Scheduler-owned while admitted. */
    serve_slot *slot;
    int32_t n_reused;                /* prompt tokens taken from cached K/V */
    int32_t n_to_prefill;            /* prompt tokens the model runs */
    double last_progress;            /* last prefill comment (stream) */
    bool sent_role;
    bool cancel_sent;                /* kite_cancel issued */
    bool timed_out;
    size_t text_offset;              /* bytes of completion text so far */
    int32_t n_callbacks;

    /* The channel: the scheduler writes, the connection thread reads. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    serve_buf out;                   /* stream: SSE bytes not yet sent (from out_pos) */
    size_t out_pos;
    serve_buf content;               /* non-stream: the completion text */
    json_t *message;                 /* non-stream with parse_reply: the parsed assistant message, at the end */
    int32_t n_tool_calls;            /* calls the reply holds so far */
    json_t *logprobs;                /* non-stream: chat {"content": [...]} or completions {tokens, ...} */
    bool done;
    const char *finish_reason;       /* "stop" / "length" when done without error */
    int32_t completion_tokens;
    int error_status;                /* 0, or the HTTP status of a failure found after admission */
    kite_openai_error error;
    serve_route *route;              /* routed requests only (route_exec.c) */
    struct serve_request *runner_prev, *runner_next; /* the server's list of running route runners (under its mu) */
    /* return_token_ids: the generated ids, and how many of them stream chunks have carried */
    int32_t *out_ids;
    size_t n_out_ids, cap_out_ids, n_ids_sent;
    bool sent_prompt_ids;
};

serve_request *serve_request_ref(serve_request *r);
void serve_request_unref(serve_request *r);
/* Marks the request cancelled and wakes the scheduler so it frees its slot at its next step. */
void serve_request_cancel(serve_request *r);

/* ---- the server ------------------------------------------------------------------------------- */
struct serve_slot {
    kite_session *session;
    serve_request *req;              /* NULL = free (its context stays for the prefix cache) */
    uint64_t last_used;              /* scheduler tick of its last admission, for LRU ties */
    int32_t index;
};

struct kite_server {
    kite_model *model;
    kite_model_info info;
    kite_gen_params gen_defaults;    /* the model's generation_config over kite's defaults */
    char *model_name;
    char *api_key;                   /* NULL = open */
    kite_chat_template *tmpl;        /* NULL = the model has none (chat requests get 400) */
    kite_tool_template_info tool_info; /* the template's tool-call format and reasoning markup */
    char tmpl_error[256];
    int32_t n_ctx;                   /* per slot */
    int32_t queue_size;
    int32_t timeout_ms;
    size_t max_body_bytes;
    kite_openai_limits limits;
    int64_t started;                 /* Unix seconds */
    uint64_t id_salt;
    atomic_uint_fast64_t id_counter;

    serve_slot *slots;
    int32_t n_slots;
    kite_batch *batch;
    kite_spec_params spec;
    bool have_spec;

    pthread_mutex_t mu;              /* guards the queue and the flags below */
    pthread_cond_t cv;               /* wakes the scheduler */
    pthread_cond_t drained_cv;       /* in_flight reached 0 */
    serve_request *queue_head, *queue_tail;
    int32_t n_queued;
    int32_t in_flight;               /* requests enqueued and not yet done */
    int32_t n_responding;            /* connections holding a request whose response is not fully sent */
    bool stopping;                   /* new requests get 503 */
    bool cancel_all;                 /* the scheduler cancels everything */
    bool scheduler_exit;
    bool scheduler_started;
    atomic_int busy_slots;
    pthread_t scheduler;

    atomic_bool stop_requested;
    int stop_fd;                     /* an eventfd kite_server_stop writes to */
    bool waited;

    struct MHD_Daemon *daemon;
    uint16_t port;

    serve_metrics metrics;
    uint64_t step_generated;         /* scheduler: tokens generated in the current step */
    kite_router *router;             /* borrowed; NULL = no routing */
    serve_request *runners;          /* routed requests whose runner thread is alive (under mu) */
    int32_t n_runners;
};

/* scheduler.c */
int serve_scheduler_start(struct kite_server *s, char *err, size_t err_size);
void serve_scheduler_stop(struct kite_server *s);
/* Queues r (takes a reference). Returns 0, 429 when the queue is full, or 503 when stopping. */
int serve_enqueue(struct kite_server *s, serve_request *r);

/* Stream events (scheduler.c): a chunk around one choice, a choice, appending to the channel, the role
 * delta a chat stream opens with. */
json_t *serve_chunk(serve_request *r, json_t *choice);
json_t *serve_chunk_choice(serve_request *r, json_t *delta_or_text, json_t *logprobs, const char *finish);
/* return_token_ids: the request's ids as a JSON array (prompt, or generated from `from`). */
json_t *serve_ids_json(const int32_t *ids, size_t n);
void serve_send_event(serve_request *r, json_t *event);
void serve_send_role_once(serve_request *r);

/* http.c: the JSON answer of a finished non-stream request. */
json_t *serve_response_body(const serve_request *r);
/* http.c: tokenizes the request for the local model (with continuation: the text a remote already sent
 * becomes the start of the assistant's turn, or of the completion), compiles its grammar and reply
 * parser and fills its generation settings. Returns 0 or an HTTP status with *e. */
int serve_prepare_local(struct kite_server *s, serve_request *r, const char *continuation, size_t continuation_len,
                        const char *continuation_reasoning, size_t continuation_reasoning_len, kite_openai_error *e);
serve_request *serve_request_new(struct kite_server *s);

/* route_exec.c */
/* Starts the runner of a routed request (takes a reference; the server counts it in n_runners). */
int serve_route_start(serve_request *r);
/* Cancels every routed request whose runner is alive (a shutdown past its grace). */
void serve_route_cancel_all(struct kite_server *s);
/* The answer's "route" field: {"backend", "reason", "rule", "attempts", "continued_by"?}. */
json_t *serve_route_json(const serve_request *r);
/* Scheduler hooks: a token of a routed local request (false = stop it: the gate escalated), and its end
 * before the gate had K tokens. */
bool serve_route_on_token(serve_request *r);
void serve_route_on_finish(serve_request *r);
void serve_route_free(serve_route *rt);
/* Under the request's mu: output may go out, and the backend running now is the one the answer names. */
void serve_route_commit_locked(serve_route *rt);
/* The router's lines of /metrics (appended to the server's text; malloc'd, NULL when out of memory). */
char *serve_route_metrics_text(struct kite_server *s);

#endif
