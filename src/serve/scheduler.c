/* The scheduler thread: owns the slots (sessions) and the kite_batch. Each turn of its loop admits
 * queued requests into free slots (prefix cache first), cancels the ones whose client left or whose
 * time ran out, runs one kite_batch_step over every slot, and finishes the slots that went idle.
 * Token callbacks run here: they append to the request's channel and never touch the network. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "chat/reply.h"
#include "serve/server.h"

/* ---- requests --------------------------------------------------------------------------------- */
serve_request *serve_request_ref(serve_request *r) {
    atomic_fetch_add(&r->refs, 1);
    return r;
}

void serve_request_unref(serve_request *r) {
    if (!r || atomic_fetch_sub(&r->refs, 1) != 1) return;
    kite_openai_request_free(&r->oa);
    if (r->ids_from_lib) kite_free(r->prompt_ids);
    else free(r->prompt_ids);
    serve_buf_free(&r->out);
    serve_buf_free(&r->content);
    json_decref(r->message);
    json_decref(r->logprobs);
    kite_grammar_free(r->grammar);
    kite_tool_stream_free(r->replies);
    serve_route_free(r->route);
    free(r->out_ids);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r);
}

void serve_request_cancel(serve_request *r) {
    if (atomic_exchange(&r->cancelled, true)) return;
    struct kite_server *s = r->server;
    pthread_mutex_lock(&s->mu);
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* ---- events ----------------------------------------------------------------------------------- */
static bool is_chat(const serve_request *r) { return r->oa.endpoint == KITE_OPENAI_CHAT; }

/* {"id", "object", "created", "model", "choices": [choice]} with "usage": null when the client asked
 * for a usage chunk (OpenAI then puts the field on every chunk). */
json_t *serve_ids_json(const int32_t *ids, size_t n) {
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(a, json_integer(ids[i]));
    return a;
}

json_t *serve_chunk(serve_request *r, json_t *choice) {
    json_t *c = json_object();
    json_object_set_new(c, "id", json_string(r->id));
    json_object_set_new(c, "object", json_string(is_chat(r) ? "chat.completion.chunk" : "text_completion"));
    json_object_set_new(c, "created", json_integer(r->created));
    json_object_set_new(c, "model", json_string(r->server->model_name));
    json_t *choices = json_array();
    if (choice) json_array_append_new(choices, choice);
    json_object_set_new(c, "choices", choices);
    if (r->oa.include_usage) json_object_set_new(c, "usage", json_null());
    if (r->oa.return_token_ids && !r->sent_prompt_ids && !r->route) {
        /* vLLM's shape: the prompt's ids once, on the first chunk */
        json_object_set_new(c, "prompt_token_ids", serve_ids_json(r->prompt_ids, r->n_prompt));
        r->sent_prompt_ids = true;
    }
    return c;
}

/* A choice of a stream chunk: chat {"index", "delta", "logprobs", "finish_reason"}, completions
 * {"index", "text", "logprobs", "finish_reason"}. delta_or_text is taken. */
json_t *serve_chunk_choice(serve_request *r, json_t *delta_or_text, json_t *logprobs, const char *finish) {
    json_t *choice = json_object();
    json_object_set_new(choice, "index", json_integer(0));
    json_object_set_new(choice, is_chat(r) ? "delta" : "text", delta_or_text);
    json_object_set_new(choice, "logprobs", logprobs ? logprobs : json_null());
    json_object_set_new(choice, "finish_reason", finish ? json_string(finish) : json_null());
    if (r->oa.return_token_ids && !r->route) {
        /* the ids of the tokens whose text this chunk (or an earlier one, held back) carries */
        json_object_set_new(choice, "token_ids", serve_ids_json(r->out_ids + r->n_ids_sent, r->n_out_ids - r->n_ids_sent));
        r->n_ids_sent = r->n_out_ids;
    }
    return choice;
}

/* Appends an event to the channel and wakes the reader. */
void serve_send_event(serve_request *r, json_t *event) {
    pthread_mutex_lock(&r->mu);
    serve_sse_append(&r->out, event);
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    json_decref(event);
}

static void send_raw(serve_request *r, const char *text) {
    pthread_mutex_lock(&r->mu);
    serve_buf_append(&r->out, text, strlen(text));
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

static json_t *token_text(const struct kite_server *s, int32_t id, serve_buf *raw) {
    char buf[256];
    size_t n = 0;
    if (kite_detokenize(s->model, &id, 1, buf, sizeof buf, &n, NULL, 0) || n > sizeof buf) n = 0;
    raw->len = 0;
    serve_buf_append(raw, buf, n);
    return serve_json_text(buf, n);
}

/* OpenAI reports -9999.0 where a log-probability is minus infinity. */
static json_t *logprob_value(float lp) { return json_real(isfinite(lp) ? (double)lp : -9999.0); }

/* Chat form: {"token", "logprob", "bytes": [...]} (+ "top_logprobs" for the chosen token). */
static json_t *chat_logprob(const struct kite_server *s, int32_t id, float lp) {
    serve_buf raw = {0};
    json_t *e = json_object();
    json_object_set_new(e, "token", token_text(s, id, &raw));
    json_object_set_new(e, "logprob", logprob_value(lp));
    json_t *bytes = json_array();
    for (size_t i = 0; i < raw.len; i++) json_array_append_new(bytes, json_integer((unsigned char)raw.data[i]));
    json_object_set_new(e, "bytes", bytes);
    serve_buf_free(&raw);
    return e;
}

static json_t *chat_logprob_entry(const struct kite_server *s, const kite_logprobs *lp) {
    json_t *e = chat_logprob(s, lp->id, lp->logprob);
    json_t *top = json_array();
    for (int32_t i = 0; i < lp->n_top; i++) json_array_append_new(top, chat_logprob(s, lp->top[i].id, lp->top[i].logprob));
    json_object_set_new(e, "top_logprobs", top);
    return e;
}

/* Completions form: parallel arrays {tokens, token_logprobs, top_logprobs, text_offset}. */
static json_t *completion_logprobs_new(void) {
    json_t *l = json_object();
    json_object_set_new(l, "tokens", json_array());
    json_object_set_new(l, "token_logprobs", json_array());
    json_object_set_new(l, "top_logprobs", json_array());
    json_object_set_new(l, "text_offset", json_array());
    return l;
}

static void completion_logprobs_add(const struct kite_server *s, json_t *l, const kite_logprobs *lp, size_t offset) {
    serve_buf raw = {0};
    json_array_append_new(json_object_get(l, "tokens"), token_text(s, lp->id, &raw));
    json_array_append_new(json_object_get(l, "token_logprobs"), logprob_value(lp->logprob));
    json_t *top = json_object();
    for (int32_t i = 0; i < lp->n_top; i++) {
        json_t *t = token_text(s, lp->top[i].id, &raw);
        /* two ids may read the same: keep the likelier (listed first) */
        if (!json_object_get(top, json_string_value(t)))
            json_object_set_new(top, json_string_value(t), logprob_value(lp->top[i].logprob));
        json_decref(t);
    }
    json_array_append_new(json_object_get(l, "top_logprobs"), top);
    json_array_append_new(json_object_get(l, "text_offset"), json_integer((json_int_t)offset));
    serve_buf_free(&raw);
}

/* A chat stream's first delta carries the role; sent once, before any other delta. */
static json_t *role_chunk(serve_request *r) {
    json_t *delta = json_object();
    json_object_set_new(delta, "role", json_string("assistant"));
    json_object_set_new(delta, "content", json_string(""));
    return serve_chunk(r, serve_chunk_choice(r, delta, NULL, NULL));
}

void serve_send_role_once(serve_request *r) {
    if (!is_chat(r) || r->sent_role) return;
    serve_send_event(r, role_chunk(r));
    r->sent_role = true;
}

/* A streamed chat reply's parts as the tool-call parser finds them: content, reasoning and calls, sent as
 * OpenAI's deltas. */
static bool on_reply_event(const kite_tool_event *ev, void *user_data) {
    serve_request *r = user_data;
    json_t *delta = json_object();
    switch (ev->kind) {
    case KITE_TOOL_EVENT_CONTENT: json_object_set_new(delta, "content", serve_json_text(ev->text, ev->len)); break;
    case KITE_TOOL_EVENT_REASONING: json_object_set_new(delta, "reasoning_content", serve_json_text(ev->text, ev->len)); break;
    case KITE_TOOL_EVENT_CALL_START:
    case KITE_TOOL_EVENT_ARGUMENTS: {
        /* OpenAI's shape: the first delta of a call carries its index, id, type and name with empty
         * arguments; the next ones the index and more of the arguments */
        json_t *calls = json_array(), *call = json_object(), *fn = json_object();
        json_object_set_new(call, "index", json_integer(ev->index));
        if (ev->kind == KITE_TOOL_EVENT_CALL_START) {
            json_object_set_new(call, "id", json_string(ev->id));
            json_object_set_new(call, "type", json_string("function"));
            json_object_set_new(fn, "name", json_string(ev->name));
            json_object_set_new(fn, "arguments", json_string(""));
            r->n_tool_calls++;
        } else {
            json_object_set_new(fn, "arguments", serve_json_text(ev->text, ev->len));
        }
        json_object_set_new(call, "function", fn);
        json_array_append_new(calls, call);
        json_object_set_new(delta, "tool_calls", calls);
        break;
    }
    case KITE_TOOL_EVENT_CALL_END: json_decref(delta); return true;
    }
    serve_send_event(r, serve_chunk(r, serve_chunk_choice(r, delta, NULL, NULL)));
    return true;
}

static bool on_token(int32_t id, const char *text, size_t text_len, void *user_data) {
    serve_request *r = user_data;
    struct kite_server *s = r->server;
    if (atomic_load(&r->cancelled)) return false;
    s->step_generated++;
    if (r->n_callbacks++ == 0) {
        r->t_first_token = serve_now();
        serve_metrics_ttft(&s->metrics, r->t_first_token - r->t_received);
    }
    if (r->route && !serve_route_on_token(r)) return false;
    if (r->oa.return_token_ids) {
        if (r->n_out_ids == r->cap_out_ids) {
            size_t cap = r->cap_out_ids ? 2 * r->cap_out_ids : 64;
            int32_t *grown = realloc(r->out_ids, cap * sizeof *grown);
            if (!grown) return false;
            r->out_ids = grown;
            r->cap_out_ids = cap;
        }
        r->out_ids[r->n_out_ids++] = id;
    }
    kite_logprobs lp;
    /* a confidence gate asks for log-probabilities the client may not have asked for */
    bool have_lp = r->gen.logprobs && r->oa.logprobs && kite_session_token_logprobs(r->slot->session, &lp) == KITE_OK;
    size_t offset = r->text_offset;
    r->text_offset += text_len;
    if (!r->oa.stream) {
        /* Non-stream: only the scheduler touches these until done is set under the lock. */
        serve_buf_append(&r->content, text, text_len); /* with parse_reply, parsed when it ends */
        if (have_lp) {
            if (is_chat(r)) json_array_append_new(json_object_get(r->logprobs, "content"), chat_logprob_entry(s, &lp));
            else completion_logprobs_add(s, r->logprobs, &lp, offset);
        }
        return true;
    }
    serve_send_role_once(r);
    if (text_len == 0 && !have_lp) return true; /* held back (a possible stop string, an incomplete character) */
    json_t *logprobs = NULL;
    if (have_lp) {
        if (is_chat(r)) {
            logprobs = json_object();
            json_t *content = json_array();
            json_array_append_new(content, chat_logprob_entry(s, &lp));
            json_object_set_new(logprobs, "content", content);
        } else {
            logprobs = completion_logprobs_new();
            completion_logprobs_add(s, logprobs, &lp, offset);
        }
    }
    if (r->replies) {
        /* the parser decides what each piece of text is; log-probabilities go in a delta of their own */
        if (text_len) kite_tool_stream_feed(r->replies, text, text_len, on_reply_event, r, NULL);
        if (logprobs) {
            json_t *delta = json_object();
            json_object_set_new(delta, "content", json_string(""));
            serve_send_event(r, serve_chunk(r, serve_chunk_choice(r, delta, logprobs, NULL)));
        }
        return true;
    }
    json_t *piece = serve_json_text(text, text_len);
    json_t *payload = piece;
    if (is_chat(r)) {
        payload = json_object();
        json_object_set_new(payload, "content", piece);
    }
    serve_send_event(r, serve_chunk(r, serve_chunk_choice(r, payload, logprobs, NULL)));
    return true;
}

/* Ends a request: the closing events of a stream, then done. Takes the scheduler's reference. */
static void finish_request(struct kite_server *s, serve_request *r) {
    if (r->route && r->route->escalated) {
        /* the confidence gate sent it on: nothing was sent, the route's runner takes it from here */
        pthread_mutex_lock(&r->mu);
        r->route->local_ended = true;
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
        pthread_mutex_lock(&s->mu);
        if (--s->in_flight == 0) pthread_cond_broadcast(&s->drained_cv);
        pthread_mutex_unlock(&s->mu);
        serve_request_unref(r);
        return;
    }
    if (r->route && r->route->continued) {
        /* a remote's answer continued here: the usage is the whole answer's */
        r->completion_tokens += (int32_t)r->route->remote_tokens;
        r->n_prompt = (size_t)r->route->prompt_tokens;
    }
    int32_t prompt = (int32_t)r->n_prompt, completion = r->completion_tokens;
    kite_log(KITE_LOG_INFO, "serve: %s: %d prompt tokens (%d from the prefix cache), %d generated, %s%s, %.0f ms", r->id,
             prompt, r->n_reused, completion, r->error_status ? "error: " : "",
             r->error_status ? r->error.message : r->finish_reason, (serve_now() - r->t_received) * 1000.0);
    if (r->oa.stream) {
        pthread_mutex_lock(&r->mu);
        if (r->error_status) {
            json_t *event = json_object(), *e = json_object();
            json_object_set_new(e, "message", json_string(r->error.message));
            json_object_set_new(e, "type", json_string(r->error.type));
            json_object_set_new(e, "param", r->error.param[0] ? json_string(r->error.param) : json_null());
            json_object_set_new(e, "code", r->error.code[0] ? json_string(r->error.code) : json_null());
            json_object_set_new(event, "error", e);
            serve_sse_append(&r->out, event);
            json_decref(event);
        } else if (!atomic_load(&r->cancelled)) {
            if (is_chat(r) && !r->sent_role) {
                json_t *c = role_chunk(r);
                serve_sse_append(&r->out, c);
                json_decref(c);
            }
            json_t *last = serve_chunk(r, serve_chunk_choice(r, is_chat(r) ? json_object() : json_string(""), NULL, r->finish_reason));
            if (r->route) json_object_set_new(last, "route", serve_route_json(r));
            serve_sse_append(&r->out, last);
            json_decref(last);
            if (r->oa.include_usage) {
                json_t *u = serve_chunk(r, NULL), *usage = json_object();
                json_object_set_new(usage, "prompt_tokens", json_integer(prompt));
                json_object_set_new(usage, "completion_tokens", json_integer(completion));
                json_object_set_new(usage, "total_tokens", json_integer(prompt + completion));
                json_object_set_new(u, "usage", usage);
                serve_sse_append(&r->out, u);
                json_decref(u);
            }
        }
        serve_buf_append(&r->out, "data: [DONE]\n\n", 14);
        r->done = true;
        if (r->route) serve_route_commit_locked(r->route);
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
    } else {
        pthread_mutex_lock(&r->mu);
        r->done = true;
        if (r->route) serve_route_commit_locked(r->route);
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
    }
    pthread_mutex_lock(&s->mu);
    if (--s->in_flight == 0) pthread_cond_broadcast(&s->drained_cv);
    pthread_mutex_unlock(&s->mu);
    serve_request_unref(r);
}

static void fail_request(struct kite_server *s, serve_request *r, int status, const char *type, const char *code,
                         const char *message) {
    r->error_status = status;
    kite_openai_set_error(&r->error, status, type, NULL, code, "%s", message);
    finish_request(s, r);
}

/* A request that leaves the queue without a slot: cancelled, timed out, or the server stops. */
static void drop_queued(struct kite_server *s, serve_request *r, bool timed_out) {
    char msg[160];
    if (timed_out) {
        snprintf(msg, sizeof msg, "the request waited longer than this server's timeout (%d ms) for a slot", s->timeout_ms);
        fail_request(s, r, 504, "server_error", "timeout", msg);
    } else {
        fail_request(s, r, 503, "server_error", "cancelled", "the request was cancelled before it started");
    }
}

/* ---- admission and the prefix cache ----------------------------------------------------------- */
/* Tokens at the start of prompt that the slot's context holds with their K/V (the last generated token
 * of a finished request is in its token list but was never run). */
static int32_t cached_prefix(const serve_slot *slot, const int32_t *prompt, size_t n_prompt) {
    int32_t n_tokens = 0;
    const int32_t *tokens = kite_session_tokens(slot->session, &n_tokens);
    int32_t n_past = kite_session_n_past(slot->session);
    int32_t limit = n_tokens < n_past ? n_tokens : n_past;
    if ((size_t)limit > n_prompt) limit = (int32_t)n_prompt;
    int32_t common = 0;
    while (tokens && common < limit && tokens[common] == prompt[common]) common++;
    return common;
}

static void admit(struct kite_server *s, serve_request *r, uint64_t tick) {
    /* The free slot sharing the longest prefix (least recently used among equals), then any slot that
     * shares a longer one to copy from. */
    serve_slot *dst = NULL;
    int32_t dst_common = -1;
    for (int32_t i = 0; i < s->n_slots; i++) {
        serve_slot *slot = &s->slots[i];
        if (slot->req) continue;
        int32_t common = cached_prefix(slot, r->prompt_ids, r->n_prompt);
        if (common > dst_common || (common == dst_common && slot->last_used < dst->last_used)) {
            dst = slot;
            dst_common = common;
        }
    }
    serve_slot *src = NULL;
    int32_t src_common = dst_common;
    for (int32_t i = 0; i < s->n_slots; i++) {
        serve_slot *slot = &s->slots[i];
        if (slot == dst) continue;
        int32_t common = cached_prefix(slot, r->prompt_ids, r->n_prompt);
        if (common > src_common) {
            src = slot;
            src_common = common;
        }
    }
    /* The last prompt token always runs, so the first generated token has its logits. */
    int32_t limit = (int32_t)r->n_prompt - 1;
    int32_t keep = dst_common < limit ? dst_common : limit;
    char err[512];
    bool copied = false;
    if (src) {
        int32_t n = src_common < limit ? src_common : limit;
        /* A refused copy (it should not happen) leaves dst with its own prefix. */
        if (n > keep && kite_session_copy_prefix(dst->session, src->session, n, err, sizeof err) == KITE_OK) {
            keep = n;
            copied = true;
        } else if (n > keep) {
            kite_log(KITE_LOG_DEBUG, "serve: no prefix copy from slot %d: %s", src->index, err);
        }
    }
    if (!copied && kite_session_truncate(dst->session, keep, err, sizeof err) != KITE_OK) {
        kite_log(KITE_LOG_WARN, "serve: slot %d truncate failed: %s", dst->index, err);
        kite_session_reset(dst->session);
        keep = 0;
    }
    dst->req = r;
    dst->last_used = tick;
    r->slot = dst;
    r->n_reused = keep;
    r->n_to_prefill = (int32_t)r->n_prompt - keep;
    r->last_progress = serve_now();
    atomic_fetch_add(&s->busy_slots, 1);
    pthread_mutex_lock(&s->metrics.mu);
    s->metrics.prompt_tokens += r->n_prompt;
    if (keep > 0) {
        s->metrics.prefix_hits++;
        s->metrics.prefix_reused_tokens += (uint64_t)keep;
        if (copied) s->metrics.prefix_copies++;
    }
    pthread_mutex_unlock(&s->metrics.mu);
    if (!r->oa.stream) {
        r->logprobs = r->oa.logprobs ? (is_chat(r) ? json_object() : completion_logprobs_new()) : NULL;
        if (r->logprobs && is_chat(r)) json_object_set_new(r->logprobs, "content", json_array());
    }
    int rc = kite_session_start(dst->session, r->prompt_ids + keep, r->n_prompt - (size_t)keep, &r->gen, on_token, r,
                                err, sizeof err);
    if (rc != KITE_OK) {
        dst->req = NULL;
        r->slot = NULL;
        atomic_fetch_sub(&s->busy_slots, 1);
        kite_log(KITE_LOG_WARN, "serve: %s could not start: %s", r->id, err);
        if (rc == KITE_ERR_CONTEXT_FULL) fail_request(s, r, 400, "invalid_request_error", "context_length_exceeded", err);
        else if (rc == KITE_ERR_INVALID_ARG) fail_request(s, r, 400, "invalid_request_error", NULL, err);
        else fail_request(s, r, 500, "server_error", NULL, err);
    }
}

/* The slot's work ended: map the engine's result to the answer. */
static void finish_slot(struct kite_server *s, serve_slot *slot) {
    serve_request *r = slot->req;
    char err[512];
    int status = kite_session_result(slot->session, err, sizeof err);
    kite_finish_reason reason = kite_session_finish_reason(slot->session);
    int32_t n_tokens = 0;
    kite_session_tokens(slot->session, &n_tokens);
    int32_t generated = n_tokens - (int32_t)r->n_prompt;
    r->completion_tokens = generated > 0 ? generated : r->n_callbacks;
    slot->req = NULL;
    r->slot = NULL;
    atomic_fetch_sub(&s->busy_slots, 1);
    if (r->timed_out) {
        char msg[160];
        snprintf(msg, sizeof msg, "the request ran longer than this server's timeout (%d ms)", s->timeout_ms);
        fail_request(s, r, 504, "server_error", "timeout", msg);
    } else if (atomic_load(&r->cancelled)) {
        fail_request(s, r, 503, "server_error", "cancelled", "the request was cancelled");
    } else if (r->route && (serve_route_on_finish(r), r->route->escalated)) {
        finish_request(s, r);
    } else if (status == KITE_OK || status == KITE_ERR_CONTEXT_FULL) {
        if (r->replies) {
            if (r->oa.stream) serve_send_role_once(r); /* the role comes first, even before held text */
            kite_tool_stream_finish(r->replies, on_reply_event, r, NULL);
            const char *problem = kite_tool_stream_problem(r->replies);
            if (problem) kite_log(KITE_LOG_INFO, "serve: %s: tool-call markup: %s", r->id, problem);
        } else if (r->parse_reply) {
            /* non-stream: the whole text once, with the options a stream would have had */
            kite_tool_parse parse;
            kite_error ke = {0};
            if (kite_tool_parse_text(&r->reply_options, r->content.data ? r->content.data : "", r->content.len, &parse, &ke) == KITE_OK) {
                r->message = kite_tool_message_json(&parse);
                r->n_tool_calls = (int32_t)parse.n_calls;
                if (parse.problem[0]) kite_log(KITE_LOG_INFO, "serve: %s: tool-call markup: %s", r->id, parse.problem);
                kite_tool_parse_clear(&parse);
            }
            if (!r->message) {
                fail_request(s, r, 500, "server_error", NULL, ke.status ? ke.msg : "out of memory");
                return;
            }
        }
        r->finish_reason = reason == KITE_FINISH_STOP ? (r->n_tool_calls > 0 ? "tool_calls" : "stop") : "length";
        finish_request(s, r);
    } else {
        kite_log(KITE_LOG_WARN, "serve: %s failed: %s", r->id, err);
        fail_request(s, r, 500, "server_error", NULL, err);
    }
}

/* ---- the loop --------------------------------------------------------------------------------- */
static void *scheduler_main(void *arg) {
    struct kite_server *s = arg;
    kite_session **sessions = malloc((size_t)s->n_slots * sizeof *sessions);
    serve_request **admitted = malloc((size_t)s->n_slots * sizeof *admitted);
    serve_request *expired = NULL;
    uint64_t tick = 0;
    for (int32_t i = 0; i < s->n_slots; i++) sessions[i] = s->slots[i].session;
    for (;;) {
        int32_t n_busy = 0, n_free = 0;
        for (int32_t i = 0; i < s->n_slots; i++) {
            if (s->slots[i].req) n_busy++;
            else n_free++;
        }
        /* Take what can start, and what has expired, from the queue. */
        int32_t n_admitted = 0;
        bool cancel_all;
        pthread_mutex_lock(&s->mu);
        while (!s->scheduler_exit && n_busy == 0 && !s->queue_head) pthread_cond_wait(&s->cv, &s->mu);
        if (s->scheduler_exit && n_busy == 0 && !s->queue_head) {
            pthread_mutex_unlock(&s->mu);
            break;
        }
        cancel_all = s->cancel_all || s->scheduler_exit;
        double now = serve_now();
        serve_request **link = &s->queue_head, *last = NULL;
        while (*link) {
            serve_request *r = *link;
            bool drop = cancel_all || atomic_load(&r->cancelled) || now > r->deadline;
            if (drop || n_admitted < n_free) {
                *link = r->next;
                r->next = NULL;
                s->n_queued--;
                if (drop) {
                    r->timed_out = !cancel_all && !atomic_load(&r->cancelled);
                    r->next = expired;
                    expired = r;
                } else {
                    admitted[n_admitted++] = r;
                }
            } else {
                last = r;
                link = &r->next;
            }
        }
        s->queue_tail = last;
        pthread_mutex_unlock(&s->mu);
        while (expired) {
            serve_request *r = expired;
            expired = r->next;
            drop_queued(s, r, r->timed_out);
        }
        for (int32_t i = 0; i < n_admitted; i++) admit(s, admitted[i], ++tick);

        /* Cancel the slots whose client left or whose time ran out: their work ends at this step. */
        now = serve_now();
        int32_t pending_before = 0, n_stepped = 0;
        for (int32_t i = 0; i < s->n_slots; i++) {
            serve_request *r = s->slots[i].req;
            if (!r) continue;
            if (!r->cancel_sent && (cancel_all || atomic_load(&r->cancelled) || now > r->deadline)) {
                if (!cancel_all && !atomic_load(&r->cancelled)) r->timed_out = true;
                if (cancel_all) atomic_store(&r->cancelled, true);
                kite_cancel(s->slots[i].session);
                r->cancel_sent = true;
            }
            pending_before += kite_session_pending_prompt(s->slots[i].session);
            if (kite_session_busy(s->slots[i].session)) n_stepped++;
        }
        if (n_stepped > 0) {
            char err[512];
            s->step_generated = 0;
            /* Drafted and accepted tokens of this step: the sessions' counters before and after it. */
            int64_t drafted_before = 0, accepted_before = 0;
            kite_stats st;
            for (int32_t i = 0; i < s->n_slots; i++)
                if (s->slots[i].req) {
                    kite_session_stats(s->slots[i].session, &st);
                    drafted_before += st.drafted;
                    accepted_before += st.accepted;
                }
            double t0 = serve_now();
            int rc = kite_batch_step(s->batch, sessions, (size_t)s->n_slots, err, sizeof err);
            double dt = serve_now() - t0;
            int64_t drafted_after = 0, accepted_after = 0;
            for (int32_t i = 0; i < s->n_slots; i++)
                if (s->slots[i].req) {
                    kite_session_stats(s->slots[i].session, &st);
                    drafted_after += st.drafted;
                    accepted_after += st.accepted;
                }
            int32_t pending_after = 0;
            for (int32_t i = 0; i < s->n_slots; i++)
                if (s->slots[i].req) pending_after += kite_session_pending_prompt(s->slots[i].session);
            int32_t prefilled = pending_before > pending_after ? pending_before - pending_after : 0;
            pthread_mutex_lock(&s->metrics.mu);
            s->metrics.prefilled_tokens += (uint64_t)prefilled;
            s->metrics.generated_tokens += s->step_generated;
            s->metrics.batch_steps++;
            s->metrics.batch_slot_steps += (uint64_t)n_stepped;
            if (drafted_after > drafted_before) s->metrics.spec_drafted += (uint64_t)(drafted_after - drafted_before);
            if (accepted_after > accepted_before) s->metrics.spec_accepted += (uint64_t)(accepted_after - accepted_before);
            if (prefilled > 0) {
                s->metrics.prefill_seconds += dt;
            } else {
                s->metrics.decode_seconds += dt;
                s->metrics.decode_only_tokens += s->step_generated;
            }
            pthread_mutex_unlock(&s->metrics.mu);
            if (rc != KITE_OK) {
                /* The batch itself failed (not one session): end every request rather than spin. */
                kite_log(KITE_LOG_ERROR, "serve: batch step failed: %s", err);
                for (int32_t i = 0; i < s->n_slots; i++) {
                    serve_slot *slot = &s->slots[i];
                    if (!slot->req) continue;
                    serve_request *r = slot->req;
                    kite_cancel(slot->session);
                    slot->req = NULL;
                    r->slot = NULL;
                    atomic_fetch_sub(&s->busy_slots, 1);
                    fail_request(s, r, 500, "server_error", NULL, err);
                    kite_session_reset(slot->session);
                }
                continue;
            }
        }
        /* Finish what went idle; tell long prefills how far they are (an SSE comment, about once a second). */
        now = serve_now();
        for (int32_t i = 0; i < s->n_slots; i++) {
            serve_slot *slot = &s->slots[i];
            serve_request *r = slot->req;
            if (!r) continue;
            if (!kite_session_busy(slot->session)) {
                finish_slot(s, slot);
                continue;
            }
            int32_t pending = kite_session_pending_prompt(slot->session);
            if (r->oa.stream && pending > 0 && now - r->last_progress >= 1.0) {
                char line[96];
                snprintf(line, sizeof line, ": prefill %d/%d tokens\n\n", r->n_to_prefill - pending, r->n_to_prefill);
                send_raw(r, line);
                r->last_progress = now;
            }
        }
    }
    free(sessions);
    free(admitted);
    return NULL;
}

int serve_enqueue(struct kite_server *s, serve_request *r) {
    pthread_mutex_lock(&s->mu);
    int rc = 0;
    if (s->stopping) rc = 503;
    else if (s->n_queued >= s->queue_size) rc = 429;
    if (rc == 0) {
        serve_request_ref(r);
        if (s->queue_tail) s->queue_tail->next = r;
        else s->queue_head = r;
        s->queue_tail = r;
        s->n_queued++;
        s->in_flight++;
        pthread_cond_signal(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int serve_scheduler_start(struct kite_server *s, char *err, size_t err_size) {
    if (pthread_create(&s->scheduler, NULL, scheduler_main, s) != 0) {
        snprintf(err, err_size, "serve: cannot start the scheduler thread");
        return KITE_ERR_NOMEM;
    }
    s->scheduler_started = true;
    return KITE_OK;
}

void serve_scheduler_stop(struct kite_server *s) {
    if (!s->scheduler_started) return;
    pthread_mutex_lock(&s->mu);
    s->scheduler_exit = true;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->scheduler, NULL);
    s->scheduler_started = false;
}
