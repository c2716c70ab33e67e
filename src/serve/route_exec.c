/* Running a routed request's plan (the server has a router, src/route): a runner thread per request
 * tries the plan's backends in turn.
 *   - local: the request goes to the scheduler like any other; a full queue overflows to the next
 *     backend; a confidence gate holds the first K tokens back and, when the quantile of their
 *     log-probabilities is below the threshold, ends the local work unseen and goes on;
 *   - remote: route_upstream_stream, its chunks re-framed as this server's (id, model) into the
 *     request's channel. A failure before anything reached the client moves on to the next backend;
 *     a cut after content went out is continued on the local model from exactly the text sent (the
 *     assistant's turn so far, left open), so the client sees one answer with a normal finish.
 *     Requests with structured output or tools hold a remote's output until it finishes (a cut then
 *     costs nothing the client saw, and the local model redoes the whole answer under its grammar).
 * The connection thread sends nothing before `committed`, so the headers name the backend that
 * answers. */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "serve/server.h"

void serve_route_commit_locked(serve_route *rt) {
    if (rt->answer_backend < 0) rt->answer_backend = rt->backend;
    rt->committed = true;
}

void serve_route_free(serve_route *rt) {
    if (!rt) return;
    free(rt->body);
    json_decref(rt->attempts);
    serve_buf_free(&rt->held);
    serve_buf_free(&rt->sent_content);
    serve_buf_free(&rt->sent_reasoning);
    free(rt->remote_ids);
    free(rt->remote_prompt_ids);
    json_decref(rt->tool_calls);
    free(rt);
}

static const route_backend *backend_of(const serve_request *r, int32_t index) {
    return &r->server->router->cfg.backends[index];
}

/* One try, for the answer's "route".attempts (the runner appends while nothing else reads). */
static void note_attempt(serve_request *r, int32_t backend, const char *outcome, const char *message) {
    serve_route *rt = r->route;
    if (!rt->attempts) rt->attempts = json_array();
    json_t *a = json_object();
    json_object_set_new(a, "backend", json_string(backend_of(r, backend)->name));
    json_object_set_new(a, "outcome", json_string(outcome));
    if (message && message[0]) json_object_set_new(a, "message", serve_json_text(message, strlen(message)));
    json_array_append_new(rt->attempts, a);
}

/* Rewrites the outcome of the latest try (a local one is noted before it runs, since its answer's route
 * field is written by the scheduler when it finishes). */
static void set_last_outcome(serve_request *r, const char *outcome, const char *message) {
    json_t *a = json_array_get(r->route->attempts, json_array_size(r->route->attempts) - 1);
    if (!a) return;
    json_object_set_new(a, "outcome", json_string(outcome));
    if (message && message[0]) json_object_set_new(a, "message", serve_json_text(message, strlen(message)));
}

json_t *serve_route_json(const serve_request *r) {
    const serve_route *rt = r->route;
    json_t *o = json_object();
    int32_t answered = rt->answer_backend >= 0 ? rt->answer_backend : rt->backend;
    if (answered >= 0) json_object_set_new(o, "backend", json_string(backend_of(r, answered)->name));
    json_object_set_new(o, "reason", json_string(rt->plan.reason));
    json_object_set_new(o, "rule", rt->plan.rule >= 0 ? json_integer(rt->plan.rule) : json_null());
    if (rt->gate_decided) json_object_set_new(o, "confidence", json_real(rt->gate_score));
    if (rt->continued) json_object_set_new(o, "continued_by", json_string(backend_of(r, rt->backend)->name));
    json_object_set_new(o, "attempts", rt->attempts ? json_deep_copy(rt->attempts) : json_array());
    return o;
}

static void count(serve_request *r, uint64_t *counter) {
    kite_router *router = r->server->router;
    pthread_mutex_lock(&router->mu);
    (*counter)++;
    pthread_mutex_unlock(&router->mu);
}

/* ---- the confidence gate (scheduler thread) ----------------------------------------------------- */
static void decide_gate(serve_request *r) {
    serve_route *rt = r->route;
    rt->gate_decided = true;
    rt->gate_score = route_logprob_quantile(rt->gate_logprobs, (size_t)rt->gate_seen, rt->plan.conf_quantile);
    bool pass = rt->gate_seen == 0 || rt->gate_score >= rt->plan.conf_min_logprob;
    kite_log(KITE_LOG_INFO, "route: %s: confidence %.3f over %d tokens (threshold %.3f): %s", r->id, rt->gate_score,
             rt->gate_seen, rt->plan.conf_min_logprob, pass ? "answered locally" : "sent on");
    pthread_mutex_lock(&r->mu);
    if (pass) serve_route_commit_locked(rt);
    else rt->escalated = true;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

bool serve_route_on_token(serve_request *r) {
    serve_route *rt = r->route;
    if (rt->gate_tokens == 0 || rt->gate_decided) {
        if (!rt->committed) {
            pthread_mutex_lock(&r->mu);
            serve_route_commit_locked(rt);
            pthread_cond_broadcast(&r->cv);
            pthread_mutex_unlock(&r->mu);
        }
        return true;
    }
    kite_logprobs lp;
    if (kite_session_token_logprobs(r->slot->session, &lp) == KITE_OK && rt->gate_seen < SERVE_ROUTE_MAX_GATE)
        rt->gate_logprobs[rt->gate_seen++] = lp.logprob;
    if (rt->gate_seen >= rt->gate_tokens) decide_gate(r);
    return !rt->escalated;
}

void serve_route_on_finish(serve_request *r) {
    serve_route *rt = r->route;
    if (rt->gate_tokens > 0 && !rt->gate_decided) decide_gate(r); /* an answer shorter than K */
}

/* ---- remote chunks ------------------------------------------------------------------------------ */
/* Appends an event to the held buffer (holding) or the channel. */
static void emit(serve_request *r, json_t *event) {
    serve_route *rt = r->route;
    if (!rt->hold) {
        serve_send_event(r, event);
        return;
    }
    serve_sse_append(&rt->held, event);
    json_decref(event);
}

static void emit_role_once(serve_request *r) {
    if (r->oa.endpoint != KITE_OPENAI_CHAT || r->sent_role) return;
    json_t *delta = json_object();
    json_object_set_new(delta, "role", json_string("assistant"));
    json_object_set_new(delta, "content", json_string(""));
    emit(r, serve_chunk(r, serve_chunk_choice(r, delta, NULL, NULL)));
    r->sent_role = true;
}

static void commit(serve_request *r) {
    pthread_mutex_lock(&r->mu);
    serve_route_commit_locked(r->route);
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

/* Non-stream: a tool-call delta merged into the answer's calls (OpenAI's deltas: index, then id, type,
 * name once and the arguments in pieces). */
static void merge_tool_call(serve_request *r, json_t *delta_call) {
    json_int_t index = json_integer_value(json_object_get(delta_call, "index"));
    if (!r->route->tool_calls) r->route->tool_calls = json_array();
    if (index < 0 || index > 255) return;
    while ((json_int_t)json_array_size(r->route->tool_calls) <= index) {
        json_t *call = json_object(), *fn = json_object();
        json_object_set_new(call, "id", json_string(""));
        json_object_set_new(call, "type", json_string("function"));
        json_object_set_new(fn, "name", json_string(""));
        json_object_set_new(fn, "arguments", json_string(""));
        json_object_set_new(call, "function", fn);
        json_array_append_new(r->route->tool_calls, call);
        r->n_tool_calls++;
    }
    json_t *call = json_array_get(r->route->tool_calls, (size_t)index);
    json_t *id = json_object_get(delta_call, "id");
    if (json_is_string(id)) json_object_set(call, "id", id);
    json_t *fn = json_object_get(call, "function"), *dfn = json_object_get(delta_call, "function");
    json_t *name = json_object_get(dfn, "name"), *args = json_object_get(dfn, "arguments");
    if (json_is_string(name) && json_string_length(name)) json_object_set(fn, "name", name);
    if (json_is_string(args) && json_string_length(args)) {
        json_t *old = json_object_get(fn, "arguments");
        serve_buf joined = {0};
        serve_buf_append(&joined, json_string_value(old), json_string_length(old));
        serve_buf_append(&joined, json_string_value(args), json_string_length(args));
        json_object_set_new(fn, "arguments", serve_json_text(joined.data ? joined.data : "", joined.len));
        serve_buf_free(&joined);
    }
}

/* One upstream chunk: its choice's delta (chat) or text (completions) re-framed as ours. */
static int on_remote_chunk(const char *chunk_json, size_t len, void *user_data) {
    serve_request *r = user_data;
    serve_route *rt = r->route;
    bool chat = r->oa.endpoint == KITE_OPENAI_CHAT;
    json_t *root = json_loadb(chunk_json, len, 0, NULL);
    if (!root) return 0; /* upstream.c has judged the stream's shape; a chunk it passed is an object */
    json_t *usage = json_object_get(root, "usage");
    if (json_is_object(usage)) {
        json_t *pt = json_object_get(usage, "prompt_tokens"), *ct = json_object_get(usage, "completion_tokens");
        if (json_is_integer(pt)) r->n_prompt = (size_t)json_integer_value(pt);
        if (json_is_integer(ct)) r->completion_tokens = (int32_t)json_integer_value(ct);
    }
    json_t *choice = json_array_get(json_object_get(root, "choices"), 0);
    if (!json_is_object(choice)) {
        json_decref(root);
        return 0;
    }
    json_t *prompt_ids = json_object_get(root, "prompt_token_ids");
    if (json_is_array(prompt_ids) && !rt->remote_prompt_ids && json_array_size(prompt_ids) > 0) {
        rt->remote_prompt_ids = malloc(json_array_size(prompt_ids) * sizeof *rt->remote_prompt_ids);
        if (rt->remote_prompt_ids) {
            size_t i;
            json_t *v;
            json_array_foreach(prompt_ids, i, v) rt->remote_prompt_ids[i] = (int32_t)json_integer_value(v);
            rt->n_remote_prompt_ids = json_array_size(prompt_ids);
        }
    }
    json_t *ids = json_object_get(choice, "token_ids");
    if (json_is_array(ids)) {
        size_t i;
        json_t *v;
        json_array_foreach(ids, i, v) {
            if (rt->n_remote_ids == rt->cap_remote_ids) {
                size_t cap = rt->cap_remote_ids ? 2 * rt->cap_remote_ids : 64;
                int32_t *grown = realloc(rt->remote_ids, cap * sizeof *grown);
                if (!grown) break;
                rt->remote_ids = grown;
                rt->cap_remote_ids = cap;
            }
            rt->remote_ids[rt->n_remote_ids++] = (int32_t)json_integer_value(v);
        }
    }
    json_t *finish = json_object_get(choice, "finish_reason");
    if (json_is_string(finish)) snprintf(rt->remote_finish, sizeof rt->remote_finish, "%s", json_string_value(finish));
    json_t *logprobs = r->oa.logprobs ? json_object_get(choice, "logprobs") : NULL;
    if (json_is_null(logprobs)) logprobs = NULL;
    json_t *delta = chat ? json_object_get(choice, "delta") : NULL;
    json_t *content = chat ? json_object_get(delta, "content") : json_object_get(choice, "text");
    json_t *reasoning = chat ? json_object_get(delta, "reasoning_content") : NULL;
    if (chat && !reasoning) reasoning = json_object_get(delta, "reasoning"); /* vLLM's newer name */
    json_t *calls = chat ? json_object_get(delta, "tool_calls") : NULL;
    size_t n_content = json_is_string(content) ? json_string_length(content) : 0;
    size_t n_reasoning = json_is_string(reasoning) ? json_string_length(reasoning) : 0;
    bool has_calls = json_is_array(calls) && json_array_size(calls) > 0;
    if (n_content) rt->remote_tokens++;
    if (n_content) serve_buf_append(&rt->sent_content, json_string_value(content), n_content);
    if (n_reasoning) serve_buf_append(&rt->sent_reasoning, json_string_value(reasoning), n_reasoning);
    if (!r->oa.stream) {
        if (n_content) serve_buf_append(&r->content, json_string_value(content), n_content);
        if (has_calls) {
            size_t i;
            json_t *call;
            json_array_foreach(calls, i, call) merge_tool_call(r, call);
        }
        if (logprobs && chat && json_is_array(json_object_get(logprobs, "content"))) {
            if (!r->logprobs) {
                r->logprobs = json_object();
                json_object_set_new(r->logprobs, "content", json_array());
            }
            json_array_extend(json_object_get(r->logprobs, "content"), json_object_get(logprobs, "content"));
        }
        if (n_content || n_reasoning) rt->delivered = !rt->hold;
    } else if (n_content || n_reasoning || has_calls || logprobs) {
        emit_role_once(r);
        json_t *payload;
        if (chat) {
            payload = json_object();
            if (n_content || !n_reasoning) json_object_set_new(payload, "content", n_content ? json_incref(content) : json_string(""));
            if (n_reasoning) json_object_set_new(payload, "reasoning_content", json_incref(reasoning));
            if (has_calls) {
                json_object_set(payload, "tool_calls", calls);
                r->n_tool_calls += (int32_t)json_array_size(calls); /* deltas, not calls: only tested for > 0 */
            }
        } else {
            payload = n_content ? json_incref(content) : json_string("");
        }
        emit(r, serve_chunk(r, serve_chunk_choice(r, payload, logprobs ? json_incref(logprobs) : NULL, NULL)));
        if (!rt->hold) {
            rt->delivered = true;
            if (!rt->committed) commit(r);
        }
    }
    json_decref(root);
    return 0;
}

/* ---- finishing -------------------------------------------------------------------------------- */
/* A remote's answer ended normally: the held events, the closing chunk, usage, [DONE]. */
static void finish_remote(serve_request *r) {
    serve_route *rt = r->route;
    kite_server *s = r->server;
    const char *finish = rt->remote_finish[0] ? rt->remote_finish : "stop";
    if (r->completion_tokens == 0) r->completion_tokens = (int32_t)rt->remote_tokens;
    if (r->n_prompt == 0) r->n_prompt = (size_t)rt->prompt_tokens;
    r->finish_reason = !strcmp(finish, "length") ? "length" : !strcmp(finish, "tool_calls") ? "tool_calls" : "stop";
    if (r->oa.stream) {
        emit_role_once(r);
        json_t *last = serve_chunk(r, serve_chunk_choice(r, r->oa.endpoint == KITE_OPENAI_CHAT ? json_object() : json_string(""),
                                                         NULL, r->finish_reason));
        json_object_set_new(last, "route", serve_route_json(r));
        emit(r, last);
        if (r->oa.include_usage) {
            json_t *u = serve_chunk(r, NULL), *usage = json_object();
            json_object_set_new(usage, "prompt_tokens", json_integer((json_int_t)r->n_prompt));
            json_object_set_new(usage, "completion_tokens", json_integer(r->completion_tokens));
            json_object_set_new(usage, "total_tokens", json_integer((json_int_t)r->n_prompt + r->completion_tokens));
            json_object_set_new(u, "usage", usage);
            emit(r, u);
        }
    }
    if (!r->oa.stream && r->oa.endpoint == KITE_OPENAI_CHAT && (rt->tool_calls || rt->sent_reasoning.len)) {
        /* the answer's message in OpenAI's shape: content null when it only calls tools */
        json_t *m = json_object();
        json_object_set_new(m, "role", json_string("assistant"));
        json_object_set_new(m, "content", rt->tool_calls && r->content.len == 0
                                              ? json_null()
                                              : serve_json_text(r->content.data ? r->content.data : "", r->content.len));
        if (rt->sent_reasoning.len)
            json_object_set_new(m, "reasoning_content", serve_json_text(rt->sent_reasoning.data, rt->sent_reasoning.len));
        if (rt->tool_calls) json_object_set(m, "tool_calls", rt->tool_calls);
        r->message = m;
    }
    pthread_mutex_lock(&r->mu);
    if (rt->held.len) serve_buf_append(&r->out, rt->held.data, rt->held.len);
    rt->held.len = 0;
    if (r->oa.stream) serve_buf_append(&r->out, "data: [DONE]\n\n", 14);
    r->done = true;
    serve_route_commit_locked(rt);
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    kite_log(KITE_LOG_INFO, "route: %s answered by %s (%s), %d tokens, %.0f ms", r->id, backend_of(r, rt->backend)->name,
             rt->plan.reason, r->completion_tokens, (serve_now() - r->t_received) * 1000.0);
    (void)s;
}

/* Ends the request with an error (nothing was sent: the status goes in the response), or, when content
 * already went out (a stream that can go nowhere else), with finish_reason "length" so the client still
 * sees a well-formed end; the route field names the failures. */
static void finish_failed(serve_request *r, int status, const char *code, const char *message) {
    serve_route *rt = r->route;
    if (rt->delivered) {
        snprintf(rt->remote_finish, sizeof rt->remote_finish, "length");
        finish_remote(r);
        return;
    }
    pthread_mutex_lock(&r->mu);
    r->error_status = status;
    kite_openai_set_error(&r->error, status, "server_error", NULL, code, "%s", message);
    r->done = true;
    serve_route_commit_locked(rt);
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

/* Output of a try that will not be used (nothing was sent): dropped before the next backend. */
static void reset_output(serve_request *r) {
    serve_route *rt = r->route;
    pthread_mutex_lock(&r->mu);
    r->out.len = r->out_pos = 0;
    pthread_mutex_unlock(&r->mu);
    rt->held.len = 0;
    r->content.len = 0;
    json_decref(rt->tool_calls);
    rt->tool_calls = NULL;
    json_decref(r->message);
    r->message = NULL;
    r->n_tool_calls = 0;
    json_decref(r->logprobs);
    r->logprobs = NULL;
    r->sent_role = false;
    r->text_offset = 0;
    r->completion_tokens = 0;
    r->n_prompt = 0;
    rt->sent_content.len = 0;
    rt->sent_reasoning.len = 0;
    rt->remote_tokens = 0;
    rt->n_remote_ids = 0;
    free(rt->remote_prompt_ids);
    rt->remote_prompt_ids = NULL;
    rt->n_remote_prompt_ids = 0;
    rt->remote_finish[0] = 0;
    rt->escalated = rt->local_ended = false;
    rt->answer_backend = -1;
    rt->gate_tokens = rt->gate_seen = 0;
    rt->gate_decided = false;
}

/* ---- the tries ------------------------------------------------------------------------------- */
typedef enum run_outcome {
    RUN_DONE = 0,   /* answered (or failed in a way the client has been told) */
    RUN_NEXT = 1,   /* nothing sent: try the next backend */
    RUN_CUT = 2,    /* a remote stopped after content went out: continue locally */
} run_outcome;

static bool local_settled(const serve_request *r) { return r->done || r->route->local_ended; }

/* A cut answer continued from the remote's own tokens: the local prompt's ids, when they equal the
 * remote's (the same model and template on both sides), followed by the ids of the text it sent, so
 * greedy decoding goes on exactly as the remote would have (re-tokenizing the text could split it
 * differently). Returns 0, an HTTP status with *e, or -1 when the ids cannot be used (then the text is). */
static int continue_from_ids(serve_request *r, kite_openai_error *e) {
    serve_route *rt = r->route;
    int rc = serve_prepare_local(r->server, r, NULL, 0, NULL, 0, e);
    if (rc) return rc;
    if (rt->n_remote_prompt_ids != r->n_prompt ||
        memcmp(rt->remote_prompt_ids, r->prompt_ids, r->n_prompt * sizeof *r->prompt_ids) != 0) {
        kite_log(KITE_LOG_INFO, "route: %s: the remote's prompt ids differ from the local ones: continuing from the text", r->id);
        return -1;
    }
    size_t n = r->n_prompt + rt->n_remote_ids;
    int32_t *ids = malloc(n * sizeof *ids);
    if (!ids) return kite_openai_set_error(e, 500, "server_error", NULL, NULL, "out of memory");
    memcpy(ids, r->prompt_ids, r->n_prompt * sizeof *ids);
    memcpy(ids + r->n_prompt, rt->remote_ids, rt->n_remote_ids * sizeof *ids);
    if (r->ids_from_lib) kite_free(r->prompt_ids);
    else free(r->prompt_ids);
    r->prompt_ids = ids;
    r->ids_from_lib = false;
    r->n_prompt = n;
    int32_t room = r->server->n_ctx - (int32_t)n;
    if (room < 1)
        return kite_openai_set_error(e, 400, "invalid_request_error", NULL, "context_length_exceeded",
                                     "the answer so far fills the local context (%d tokens)", r->server->n_ctx);
    if (r->gen.max_tokens > room) r->gen.max_tokens = room;
    return 0;
}

/* What a local answer took, for the latency policy's next predictions. */
static void observe_local_answer(serve_request *r, double t_enqueued) {
    double t_done = serve_now();
    int32_t prefilled = (int32_t)r->n_prompt - r->n_reused;
    double ttft_s = r->t_first_token - t_enqueued;
    double s_per_token = r->completion_tokens > 1 ? (t_done - r->t_first_token) / (r->completion_tokens - 1) : -1;
    kite_router *router = r->server->router;
    pthread_mutex_lock(&router->mu);
    route_latency_observe_local(&router->local_latency, prefilled, ttft_s, s_per_token);
    pthread_mutex_unlock(&router->mu);
}

/* The local model: the scheduler answers (or, the gate failing, lets go unseen). continuation: the
 * remote's text already sent. */
static run_outcome run_local(serve_request *r, int32_t backend, bool continuation, kite_openai_error *last_error) {
    kite_server *s = r->server;
    serve_route *rt = r->route;
    kite_openai_error e;
    int rc = continuation && rt->n_remote_ids ? continue_from_ids(r, &e) : -1;
    if (rc < 0)
        rc = serve_prepare_local(s, r, continuation ? (rt->sent_content.data ? rt->sent_content.data : "") : NULL,
                                 rt->sent_content.len, rt->sent_reasoning.data, rt->sent_reasoning.len, &e);
    if (rc) {
        note_attempt(r, backend, "rejected", e.message);
        *last_error = e;
        return RUN_NEXT;
    }
    if (continuation && r->oa.max_tokens > 0) {
        int64_t left = (int64_t)r->oa.max_tokens - rt->remote_tokens;
        r->gen.max_tokens = left > 0 ? (int32_t)left : 1;
    }
    bool gated = rt->attempt == 0 && rt->plan.confidence && !continuation;
    if (gated) {
        rt->gate_tokens = rt->plan.conf_first_tokens < SERVE_ROUTE_MAX_GATE ? rt->plan.conf_first_tokens : SERVE_ROUTE_MAX_GATE;
        r->gen.logprobs = true; /* for the gate; the answer carries them only when the client asked */
    }
    r->slot = NULL;
    r->n_callbacks = 0;
    r->cancel_sent = r->timed_out = false;
    r->next = NULL;
    rt->backend = backend;
    note_attempt(r, backend, "ok", NULL);
    r->t_first_token = 0;
    double t_enqueued = serve_now();
    rc = serve_enqueue(s, r);
    if (rc == 429) {
        count(r, &s->router->overflows);
        set_last_outcome(r, "queue_full", "the local queue is full");
        kite_openai_set_error(last_error, 429, "rate_limit_error", NULL, "queue_full", "the local queue is full; retry later");
        return RUN_NEXT;
    }
    if (rc) {
        set_last_outcome(r, "shutting_down", NULL);
        kite_openai_set_error(last_error, 503, "server_error", NULL, "shutting_down", "the server is shutting down");
        return RUN_NEXT;
    }
    pthread_mutex_lock(&r->mu);
    while (!local_settled(r)) pthread_cond_wait(&r->cv, &r->mu);
    bool escalated = rt->local_ended;
    pthread_mutex_unlock(&r->mu);
    if (escalated) {
        char msg[96];
        snprintf(msg, sizeof msg, "confidence %.3f < %.3f", rt->gate_score, rt->plan.conf_min_logprob);
        set_last_outcome(r, "low_confidence", msg);
        count(r, &s->router->confidence_escalations);
        double score = rt->gate_score;
        reset_output(r);
        rt->gate_decided = true; /* keep the score for the answer's route field */
        rt->gate_score = score;
        rt->gate_failed = true;
        return RUN_NEXT;
    }
    if (r->error_status) set_last_outcome(r, "error", r->error.message);
    else if (!continuation && r->t_first_token > 0) observe_local_answer(r, t_enqueued);
    return RUN_DONE;
}

/* The client's body as the remote gets it: its model, a stream with usage, kite's extensions removed. */
static char *remote_body(const serve_request *r, const route_backend *b, size_t *len) {
    json_t *root = json_loadb(r->route->body, r->route->body_len, 0, NULL);
    if (!json_is_object(root)) {
        json_decref(root);
        return NULL;
    }
    json_object_set_new(root, "model", json_string(b->remote_model ? b->remote_model : ""));
    json_object_set_new(root, "stream", json_true());
    json_t *so = json_object();
    json_object_set_new(so, "include_usage", json_true());
    json_object_set_new(root, "stream_options", so);
    json_object_del(root, "route");
    json_object_del(root, "max_latency_ms");
    if (b->token_ids) json_object_set_new(root, "return_token_ids", json_true());
    else json_object_del(root, "return_token_ids");
    char *text = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (text) *len = strlen(text);
    return text;
}

static run_outcome run_remote(serve_request *r, int32_t backend, kite_openai_error *last_error) {
    kite_server *s = r->server;
    serve_route *rt = r->route;
    const route_backend *b = backend_of(r, backend);
    route_upstream *u = s->router->upstreams[backend];
    if (!u || !route_upstream_available(u)) {
        note_attempt(r, backend, "cooldown", "in cooldown after failures");
        kite_openai_set_error(last_error, 503, "server_error", NULL, "backend_unavailable", "%s is unavailable", b->name);
        return RUN_NEXT;
    }
    size_t len = 0;
    char *body = remote_body(r, b, &len);
    if (!body) {
        note_attempt(r, backend, "rejected", "the request body could not be re-encoded");
        return RUN_NEXT;
    }
    rt->backend = backend;
    rt->hold = r->oa.format != KITE_OPENAI_FORMAT_TEXT || (r->oa.n_tools > 0 && r->oa.tool_choice != KITE_OPENAI_TOOLS_NONE);
    route_upstream_result res;
    route_upstream_stream(u, r->oa.endpoint == KITE_OPENAI_CHAT ? "/chat/completions" : "/completions", body, len,
                          on_remote_chunk, r, &r->cancelled, &res);
    free(body);
    if (res.fault == ROUTE_OK) {
        note_attempt(r, backend, "ok", NULL);
        finish_remote(r);
        return RUN_DONE;
    }
    note_attempt(r, backend, route_fault_name(res.fault), res.message);
    if (res.fault == ROUTE_FAULT_CANCELLED) {
        finish_failed(r, 503, "cancelled", "the request was cancelled");
        return RUN_DONE;
    }
    kite_log(KITE_LOG_INFO, "route: %s: %s failed (%s: %s)%s", r->id, b->name, route_fault_name(res.fault), res.message,
             rt->delivered ? " after content was sent" : "");
    count(r, &s->router->fallbacks_from_backend[backend]);
    if (rt->delivered) return RUN_CUT;
    kite_openai_set_error(last_error, res.fault == ROUTE_FAULT_HTTP_4XX && res.http_status ? res.http_status : 502, "server_error",
                          NULL, route_fault_name(res.fault), "%s: %s", b->name, res.message);
    reset_output(r);
    return RUN_NEXT;
}

static void *runner_main(void *arg) {
    serve_request *r = arg;
    kite_server *s = r->server;
    kite_router *router = s->router;
    serve_route *rt = r->route;
    kite_openai_error last_error;
    kite_openai_set_error(&last_error, 503, "server_error", NULL, "no_backend", "no backend could answer: %s", rt->plan.reason);
    for (rt->attempt = 0; rt->attempt < rt->plan.n_attempts; rt->attempt++) {
        if (atomic_load(&r->cancelled)) {
            finish_failed(r, 503, "cancelled", "the request was cancelled");
            goto out;
        }
        int32_t b = rt->plan.attempts[rt->attempt];
        run_outcome o = router->cfg.backends[b].kind == ROUTE_BACKEND_LOCAL ? run_local(r, b, false, &last_error)
                                                                            : run_remote(r, b, &last_error);
        if (o == RUN_DONE) goto out;
        if (o == RUN_CUT) {
            if (router->local_backend < 0) {
                finish_failed(r, 502, "upstream_cut", "the remote answer was cut and there is no local model to continue it");
                goto out;
            }
            rt->continued = true;
            if (rt->n_remote_ids) rt->remote_tokens = (int64_t)rt->n_remote_ids; /* tokens, not chunks */
            count(r, &router->midstream_continuations);
            kite_log(KITE_LOG_INFO, "route: %s: continuing locally after %zu bytes", r->id, rt->sent_content.len);
            if (run_local(r, router->local_backend, true, &last_error) != RUN_DONE) {
                /* the continuation could not start (e.g. it no longer fits the context): end cleanly */
                finish_failed(r, last_error.http_status, last_error.code, last_error.message);
            }
            goto out;
        }
    }
    /* the confidence gate sent it on and the remote failed too: the local answer, ungated, is still an answer */
    if (rt->gate_failed && router->local_backend >= 0 && !atomic_load(&r->cancelled)) {
        kite_log(KITE_LOG_INFO, "route: %s: the remote failed after the confidence gate: answering locally", r->id);
        if (run_local(r, router->local_backend, false, &last_error) == RUN_DONE) goto out;
    }
    finish_failed(r, last_error.http_status ? last_error.http_status : 503, last_error.code[0] ? last_error.code : "no_backend",
                  last_error.message);
out:
    if (rt->backend >= 0 && !r->error_status) count(r, &router->answered_by_backend[rt->backend]); /* who finished it */
    pthread_mutex_lock(&s->mu);
    if (r->runner_prev) r->runner_prev->runner_next = r->runner_next;
    else s->runners = r->runner_next;
    if (r->runner_next) r->runner_next->runner_prev = r->runner_prev;
    if (--s->n_runners == 0) pthread_cond_broadcast(&s->drained_cv);
    pthread_mutex_unlock(&s->mu);
    serve_request_unref(r);
    return NULL;
}

void serve_route_cancel_all(struct kite_server *s) {
    pthread_mutex_lock(&s->mu);
    for (serve_request *r = s->runners; r; r = r->runner_next) atomic_store(&r->cancelled, true);
    pthread_mutex_unlock(&s->mu);
}

int serve_route_start(serve_request *r) {
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    struct kite_server *s = r->server;
    serve_request_ref(r);
    /* listed before the thread starts, so a shutdown waits for it (and can cancel it) */
    pthread_mutex_lock(&s->mu);
    r->runner_prev = NULL;
    r->runner_next = s->runners;
    if (s->runners) s->runners->runner_prev = r;
    s->runners = r;
    s->n_runners++;
    pthread_mutex_unlock(&s->mu);
    int rc = pthread_create(&t, &attr, runner_main, r);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        pthread_mutex_lock(&s->mu);
        if (r->runner_next) r->runner_next->runner_prev = NULL;
        s->runners = r->runner_next;
        s->n_runners--;
        pthread_mutex_unlock(&s->mu);
        serve_request_unref(r);
        return KITE_ERR_NOMEM;
    }
    return KITE_OK;
}

/* ---- /metrics ----------------------------------------------------------------------------------- */
char *serve_route_metrics_text(struct kite_server *s) {
    kite_router *router = s->router;
    const route_config *cfg = &router->cfg;
    serve_buf b = {0};
    pthread_mutex_lock(&router->mu);
    serve_buf_printf(&b, "# HELP kite_route_decisions_total Routing decisions by the rule that made them (rule=\"none\": explicit or no rule).\n");
    serve_buf_printf(&b, "# TYPE kite_route_decisions_total counter\n");
    for (int32_t i = 0; i < cfg->n_rules; i++)
        serve_buf_printf(&b, "kite_route_decisions_total{rule=\"%d\"} %llu\n", cfg->rules[i].config_index,
             (unsigned long long)router->decisions_by_rule[cfg->rules[i].config_index < ROUTE_MAX_RULES ? cfg->rules[i].config_index : ROUTE_MAX_RULES]);
    serve_buf_printf(&b, "kite_route_decisions_total{rule=\"none\"} %llu\n", (unsigned long long)router->decisions_by_rule[ROUTE_MAX_RULES]);
    serve_buf_printf(&b, "# HELP kite_route_answered_total Requests answered, by the backend that finished them.\n");
    serve_buf_printf(&b, "# TYPE kite_route_answered_total counter\n");
    for (int32_t i = 0; i < cfg->n_backends; i++)
        serve_buf_printf(&b, "kite_route_answered_total{backend=\"%s\"} %llu\n", cfg->backends[i].name,
             (unsigned long long)router->answered_by_backend[i]);
    serve_buf_printf(&b, "# HELP kite_route_fallbacks_total Failed tries that moved a request on, by the backend that failed.\n");
    serve_buf_printf(&b, "# TYPE kite_route_fallbacks_total counter\n");
    for (int32_t i = 0; i < cfg->n_backends; i++)
        serve_buf_printf(&b, "kite_route_fallbacks_total{backend=\"%s\"} %llu\n", cfg->backends[i].name,
             (unsigned long long)router->fallbacks_from_backend[i]);
    serve_buf_printf(&b, "# TYPE kite_route_confidence_escalations_total counter\nkite_route_confidence_escalations_total %llu\n",
         (unsigned long long)router->confidence_escalations);
    serve_buf_printf(&b, "# TYPE kite_route_overflows_total counter\nkite_route_overflows_total %llu\n", (unsigned long long)router->overflows);
    serve_buf_printf(&b, "# TYPE kite_route_continuations_total counter\nkite_route_continuations_total %llu\n",
         (unsigned long long)router->midstream_continuations);
    pthread_mutex_unlock(&router->mu);
    serve_buf_printf(&b, "# HELP kite_route_upstream_faults_total Upstream failures by backend and kind.\n");
    serve_buf_printf(&b, "# TYPE kite_route_upstream_faults_total counter\n");
    for (int32_t i = 0; i < cfg->n_backends; i++) {
        if (!router->upstreams[i]) continue;
        route_upstream_counters c;
        route_upstream_get_counters(router->upstreams[i], &c);
        for (int f = ROUTE_FAULT_CONNECT; f <= ROUTE_FAULT_CANCELLED; f++)
            serve_buf_printf(&b, "kite_route_upstream_faults_total{backend=\"%s\",fault=\"%s\"} %llu\n", cfg->backends[i].name,
                 route_fault_name((route_fault)f), (unsigned long long)c.faults[f]);
        serve_buf_printf(&b, "kite_route_upstream_requests_total{backend=\"%s\"} %llu\n", cfg->backends[i].name, (unsigned long long)c.requests);
        serve_buf_printf(&b, "kite_route_upstream_retries_total{backend=\"%s\"} %llu\n", cfg->backends[i].name, (unsigned long long)c.retries);
        serve_buf_printf(&b, "kite_route_upstream_cooldowns_total{backend=\"%s\"} %llu\n", cfg->backends[i].name, (unsigned long long)c.cooldowns);
        serve_buf_printf(&b, "kite_route_upstream_probes_total{backend=\"%s\"} %llu\n", cfg->backends[i].name, (unsigned long long)c.probes);
        serve_buf_printf(&b, "kite_route_backend_up{backend=\"%s\"} %d\n", cfg->backends[i].name, c.in_cooldown ? 0 : 1);
    }
    serve_buf_append(&b, "", 1);
    return b.data;
}
