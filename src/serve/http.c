/* The HTTP side of kite serve: libmicrohttpd with a thread per connection. Each POST body is read
 * (bounded), parsed (openai.c), tokenized and queued for the scheduler; a non-stream request then waits
 * on its channel inside the handler, a stream is answered at once with a reader that sends the SSE
 * events as the scheduler writes them. Both watch the socket so a client that leaves frees its slot. */
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/error.h"
#include "chat/chat_internal.h"
#include "serve/server.h"

/* How long kite_server_wait lets in-flight requests finish before it cancels them. */
static const double SHUTDOWN_GRACE_SECONDS = 10.0;
/* Bytes of a too-large body read and dropped before the connection is closed instead. */
static const size_t DISCARD_LIMIT_BYTES = (size_t)64 << 20;
/* How often a waiting connection thread looks at its socket. */
static const long WAIT_SLICE_MS = 50;

/* ---- small helpers ---------------------------------------------------------------------------- */
static uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static uint64_t next_random(kite_server *s) {
    return splitmix64(s->id_salt ^ splitmix64(atomic_fetch_add(&s->id_counter, 1)));
}

/* The peer closed its end (or the socket failed): nothing more will be read from us. */
static bool peer_gone(int fd) {
    if (fd < 0) return false;
    struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLERR | POLLHUP | POLLRDHUP | POLLNVAL)) return true;
    if (p.revents & POLLIN) {
        char c;
        ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
        return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
    }
    return false;
}

static void deadline_after_ms(struct timespec *ts, long ms) {
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

/* Compares a presented "Bearer KEY" with the server's key in time that depends only on the key's length. */
static bool api_key_matches(const char *header, const char *key) {
    if (!header || strncasecmp(header, "Bearer ", 7) != 0) return false;
    const char *given = header + 7;
    size_t given_len = strlen(given), key_len = strlen(key);
    unsigned diff = given_len != key_len;
    for (size_t i = 0; i < key_len; i++)
        diff |= (unsigned)((unsigned char)key[i] ^ (unsigned char)(i < given_len ? given[i] : 0));
    return diff == 0;
}

/* ---- connections ------------------------------------------------------------------------------ */
typedef struct serve_connection {
    serve_endpoint endpoint;
    bool is_post;
    bool answered;          /* a response was queued */
    bool body_too_big;      /* past max_body_bytes: the rest is dropped and the answer is 413 */
    size_t body_received;
    serve_buf body;
    serve_request *req;     /* the connection's reference, once queued (counted in n_responding) */
} serve_connection;

/* Where a routed request ran and why (x-kite-backend, x-kite-route-reason), as header-safe text. */
static void add_route_headers(struct MHD_Response *resp, const serve_request *r) {
    if (!r || !r->route) return;
    const route_config *cfg = &r->server->router->cfg;
    const serve_route *rt = r->route;
    int32_t answered = rt->answer_backend >= 0 ? rt->answer_backend : rt->backend;
    if (answered >= 0 && answered < cfg->n_backends) MHD_add_response_header(resp, "x-kite-backend", cfg->backends[answered].name);
    char reason[sizeof rt->plan.reason + 64];
    snprintf(reason, sizeof reason, "%s%s", rt->plan.reason, rt->continued ? "; continued locally after a remote cut" : "");
    for (char *p = reason; *p; p++)
        if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f) *p = '?';
    MHD_add_response_header(resp, "x-kite-route-reason", reason);
}

static enum MHD_Result queue_response(kite_server *s, struct MHD_Connection *conn, serve_connection *c, int status,
                                      const char *content_type, char *body, size_t len) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    add_route_headers(resp, c->req);
    if (status == 429) MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    if (status == 401) MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    enum MHD_Result rc = MHD_queue_response(conn, (unsigned)status, resp);
    MHD_destroy_response(resp);
    c->answered = true;
    serve_metrics_request(&s->metrics, c->endpoint, status);
    kite_log(KITE_LOG_DEBUG, "serve: %s -> %d", serve_endpoint_name(c->endpoint), status);
    return rc;
}

static enum MHD_Result send_json(kite_server *s, struct MHD_Connection *conn, serve_connection *c, int status,
                                 json_t *body) {
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!text) {
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,\"code\":null}}";
        text = strdup(oom);
        status = 500;
        if (!text) return MHD_NO;
    }
    return queue_response(s, conn, c, status, "application/json", text, strlen(text));
}

static json_t *error_json(const kite_openai_error *e) {
    json_t *root = json_object(), *err = json_object();
    json_object_set_new(err, "message", json_string(e->message));
    json_object_set_new(err, "type", json_string(e->type));
    json_object_set_new(err, "param", e->param[0] ? json_string(e->param) : json_null());
    json_object_set_new(err, "code", e->code[0] ? json_string(e->code) : json_null());
    json_object_set_new(root, "error", err);
    return root;
}

static enum MHD_Result send_error(kite_server *s, struct MHD_Connection *conn, serve_connection *c,
                                  const kite_openai_error *e) {
    return send_json(s, conn, c, e->http_status, error_json(e));
}

static enum MHD_Result send_error_fmt(kite_server *s, struct MHD_Connection *conn, serve_connection *c, int status,
                                      const char *type, const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 8, 9)));
static enum MHD_Result send_error_fmt(kite_server *s, struct MHD_Connection *conn, serve_connection *c, int status,
                                      const char *type, const char *param, const char *code, const char *fmt, ...) {
    kite_openai_error e;
    char message[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    kite_openai_set_error(&e, status, type, param, code, "%s", message);
    return send_error(s, conn, c, &e);
}

/* ---- responses -------------------------------------------------------------------------------- */
json_t *serve_response_body(const serve_request *r) {
    bool chat = r->oa.endpoint == KITE_OPENAI_CHAT;
    json_t *root = json_object();
    json_object_set_new(root, "id", json_string(r->id));
    json_object_set_new(root, "object", json_string(chat ? "chat.completion" : "text_completion"));
    json_object_set_new(root, "created", json_integer(r->created));
    json_object_set_new(root, "model", json_string(r->server->model_name));
    json_t *choice = json_object();
    json_object_set_new(choice, "index", json_integer(0));
    json_t *text = r->message ? NULL : serve_json_text(r->content.data ? r->content.data : "", r->content.len);
    if (r->message) {
        json_object_set_new(choice, "message", json_incref(r->message));
    } else if (chat) {
        json_t *message = json_object();
        json_object_set_new(message, "role", json_string("assistant"));
        json_object_set_new(message, "content", text);
        json_object_set_new(choice, "message", message);
    } else {
        json_object_set_new(choice, "text", text);
    }
    json_object_set_new(choice, "logprobs", r->logprobs ? json_incref(r->logprobs) : json_null());
    json_object_set_new(choice, "finish_reason", json_string(r->finish_reason ? r->finish_reason : "stop"));
    if (r->oa.return_token_ids && !r->route) {
        json_object_set_new(choice, "token_ids", serve_ids_json(r->out_ids, r->n_out_ids));
        json_object_set_new(root, "prompt_token_ids", serve_ids_json(r->prompt_ids, r->n_prompt));
    }
    json_t *choices = json_array();
    json_array_append_new(choices, choice);
    json_object_set_new(root, "choices", choices);
    json_t *usage = json_object();
    json_object_set_new(usage, "prompt_tokens", json_integer((json_int_t)r->n_prompt));
    json_object_set_new(usage, "completion_tokens", json_integer(r->completion_tokens));
    json_object_set_new(usage, "total_tokens", json_integer((json_int_t)r->n_prompt + r->completion_tokens));
    json_object_set_new(root, "usage", usage);
    if (r->route) json_object_set_new(root, "route", serve_route_json(r));
    return root;
}

/* The stream's reader: waits on the channel, a slice at a time so a client that left is noticed. */
static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    serve_request *r = cls;
    (void)pos;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        if (r->out_pos < r->out.len) {
            size_t n = r->out.len - r->out_pos;
            if (n > max) n = max;
            memcpy(buf, r->out.data + r->out_pos, n);
            r->out_pos += n;
            if (r->out_pos == r->out.len) r->out_pos = r->out.len = 0;
            pthread_mutex_unlock(&r->mu);
            return (ssize_t)n;
        }
        if (r->done) {
            pthread_mutex_unlock(&r->mu);
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        struct timespec ts;
        deadline_after_ms(&ts, WAIT_SLICE_MS);
        pthread_cond_timedwait(&r->cv, &r->mu, &ts);
        if (r->out_pos == r->out.len && !r->done && peer_gone(r->client_fd)) {
            pthread_mutex_unlock(&r->mu);
            serve_request_cancel(r);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
}

static void stream_free(void *cls) {
    serve_request *r = cls;
    bool done;
    pthread_mutex_lock(&r->mu);
    done = r->done;
    pthread_mutex_unlock(&r->mu);
    if (!done) serve_request_cancel(r); /* the connection ended before the stream did */
    serve_request_unref(r);
}

/* ---- completions ------------------------------------------------------------------------------ */
static int32_t clamp_i32(long long v, int32_t lo, int32_t hi) { return v < lo ? lo : v > hi ? hi : (int32_t)v; }

/* The engine's generation settings: the model's defaults overlaid with what the request gave. */
static void build_gen_params(kite_server *s, serve_request *r) {
    const kite_openai_request *oa = &r->oa;
    kite_gen_params g = s->gen_defaults;
    int32_t room = s->n_ctx - (int32_t)r->n_prompt;
    /* OpenAI's defaults: legacy completions stop after 16 tokens, chat runs until the end (the context) */
    g.max_tokens = oa->max_tokens > 0 ? oa->max_tokens : (oa->endpoint == KITE_OPENAI_COMPLETIONS ? 16 : room);
    if (!isnan(oa->temperature)) g.temperature = oa->temperature;
    if (!isnan(oa->top_p)) {
        if (oa->top_p == 0) g.temperature = 0; /* only the likeliest token is left */
        else g.top_p = oa->top_p;
    }
    if (oa->top_k >= 0) g.top_k = oa->top_k;
    if (!isnan(oa->min_p)) g.min_p = oa->min_p;
    if (!isnan(oa->presence_penalty)) g.presence_penalty = oa->presence_penalty;
    if (!isnan(oa->frequency_penalty)) g.frequency_penalty = oa->frequency_penalty;
    if (!isnan(oa->repetition_penalty)) g.repeat_penalty = oa->repetition_penalty;
    g.seed = oa->has_seed ? oa->seed : next_random(s);
    g.logit_bias = oa->logit_bias;
    g.n_logit_bias = oa->n_logit_bias;
    g.ignore_eos = oa->ignore_eos;
    /* Text for people, as vLLM and llama-server give it, except where a reply parser needs the markup. */
    g.skip_special = oa->skip_special_tokens && !r->replies && !r->parse_reply;
    g.stop = (const char *const *)oa->stop;
    g.n_stop = oa->n_stop;
    g.logprobs = oa->logprobs;
    g.top_logprobs = clamp_i32(oa->top_logprobs, 0, KITE_MAX_TOP_LOGPROBS);
    g.grammar = r->grammar;
    r->gen = g;
}

static int tokenize_prompt(kite_server *s, serve_request *r, const char *messages_json, const char *prompt_text,
                           size_t prompt_len, const char *cont, size_t cont_len, kite_openai_error *e);

/* Tokenizes the request's prompt (chat: through the template); with a continuation (cont non-NULL), the
 * text a remote already sent is the start of the reply. Returns 0 or an HTTP status with *e. */
static int tokenize_request(kite_server *s, serve_request *r, const char *cont, size_t cont_len, const char *cont_reasoning,
                            size_t cont_reasoning_len, kite_openai_error *e) {
    const kite_openai_request *oa = &r->oa;
    char *messages_json = NULL, *prompt_text = NULL;
    if (cont && oa->endpoint == KITE_OPENAI_CHAT) {
        /* the assistant's turn so far, left open (continue_final_message) */
        json_t *messages = json_loads(oa->messages_json, 0, NULL), *turn = json_object();
        json_object_set_new(turn, "role", json_string("assistant"));
        json_object_set_new(turn, "content", serve_json_text(cont, cont_len));
        if (cont_reasoning_len) json_object_set_new(turn, "reasoning_content", serve_json_text(cont_reasoning, cont_reasoning_len));
        if (messages) json_array_append_new(messages, turn);
        else json_decref(turn);
        messages_json = messages ? json_dumps(messages, JSON_COMPACT) : NULL;
        json_decref(messages);
        if (!messages_json) return kite_openai_set_error(e, 500, "server_error", NULL, NULL, "out of memory");
    } else if (cont && oa->prompt_text) {
        prompt_text = malloc(oa->prompt_len + cont_len + 1);
        if (!prompt_text) return kite_openai_set_error(e, 500, "server_error", NULL, NULL, "out of memory");
        memcpy(prompt_text, oa->prompt_text, oa->prompt_len);
        memcpy(prompt_text + oa->prompt_len, cont, cont_len);
        prompt_text[oa->prompt_len + cont_len] = 0;
    }
    int rc = tokenize_prompt(s, r, messages_json, prompt_text, prompt_text ? oa->prompt_len + cont_len : 0, cont, cont_len, e);
    free(messages_json);
    free(prompt_text);
    return rc;
}

/* The prompt's tokens: messages_json (NULL = the request's) through the template, prompt_text (NULL = the
 * request's) or the request's ids (a continuation's text tokenized after them). */
static int tokenize_prompt(kite_server *s, serve_request *r, const char *messages_json, const char *prompt_text,
                           size_t prompt_len, const char *cont, size_t cont_len, kite_openai_error *e) {
    char err[512];
    const kite_openai_request *oa = &r->oa;
    if (oa->endpoint == KITE_OPENAI_CHAT) {
        if (!s->tmpl)
            return kite_openai_set_error(e, 400, "invalid_request_error", "messages", "no_chat_template",
                                         "this model has no chat template (%s); start kite serve with --chat-template FILE, "
                                         "or use /v1/completions",
                                         s->tmpl_error);
        kite_chat_params cp = kite_chat_default_params();
        cp.messages_json = messages_json ? messages_json : oa->messages_json;
        cp.kwargs_json = oa->kwargs_json;
        cp.tools_json = oa->tools_json; /* the template's `tools`: the model sees the definitions */
        cp.add_generation_prompt = !messages_json;
        cp.continue_final_message = messages_json != NULL;
        cp.family_tool_shapes = true; /* Command R+'s and GLM-4's templates read their own tool shapes */
        int32_t *ids = NULL;
        size_t n = 0;
        int rc = kite_chat_tokenize(s->tmpl, s->model, &cp, &ids, &n, err, sizeof err);
        if (rc != KITE_OK)
            return kite_openai_set_error(e, rc == KITE_ERR_NOMEM ? 500 : 400,
                                         rc == KITE_ERR_NOMEM ? "server_error" : "invalid_request_error", "messages", NULL,
                                         "the chat template could not render these messages: %s", err);
        r->prompt_ids = ids;
        r->n_prompt = n;
        r->ids_from_lib = true;
    } else if (oa->prompt_text) {
        const char *text = prompt_text ? prompt_text : oa->prompt_text;
        size_t text_len = prompt_text ? prompt_len : oa->prompt_len;
        size_t n = 0;
        int rc = kite_tokenize(s->model, text, text_len, s->info.add_bos, oa->parse_special, NULL, 0, &n, err, sizeof err);
        if (rc != KITE_OK && rc != KITE_ERR_INVALID_ARG)
            return kite_openai_set_error(e, 400, "invalid_request_error", "prompt", NULL, "the prompt could not be tokenized: %s",
                                         err);
        r->prompt_ids = malloc((n ? n : 1) * sizeof *r->prompt_ids);
        if (!r->prompt_ids) return kite_openai_set_error(e, 500, "server_error", NULL, NULL, "out of memory");
        rc = kite_tokenize(s->model, text, text_len, s->info.add_bos, oa->parse_special, r->prompt_ids, n, &r->n_prompt, err,
                           sizeof err);
        if (rc != KITE_OK)
            return kite_openai_set_error(e, 400, "invalid_request_error", "prompt", NULL, "the prompt could not be tokenized: %s",
                                         err);
    } else {
        for (size_t i = 0; i < oa->n_prompt_ids; i++)
            if (oa->prompt_ids[i] >= s->info.n_vocab)
                return kite_openai_set_error(e, 400, "invalid_request_error", "prompt", NULL,
                                             "prompt token id %d is outside the vocabulary (%d tokens)", oa->prompt_ids[i],
                                             s->info.n_vocab);
        size_t n_cont = 0;
        if (cont_len) kite_tokenize(s->model, cont, cont_len, false, false, NULL, 0, &n_cont, NULL, 0);
        r->prompt_ids = malloc((oa->n_prompt_ids + n_cont) * sizeof *r->prompt_ids);
        if (!r->prompt_ids) return kite_openai_set_error(e, 500, "server_error", NULL, NULL, "out of memory");
        memcpy(r->prompt_ids, oa->prompt_ids, oa->n_prompt_ids * sizeof *r->prompt_ids);
        r->n_prompt = oa->n_prompt_ids;
        if (n_cont && kite_tokenize(s->model, cont, cont_len, false, false, r->prompt_ids + r->n_prompt, n_cont, &n_cont, err,
                                    sizeof err) == KITE_OK)
            r->n_prompt += n_cont;
    }
    if (r->n_prompt == 0)
        return kite_openai_set_error(e, 400, "invalid_request_error", oa->endpoint == KITE_OPENAI_CHAT ? "messages" : "prompt",
                                     NULL, "the prompt is empty (no tokens)");
    if (r->n_prompt > (size_t)s->n_ctx - 1)
        return kite_openai_set_error(e, 400, "invalid_request_error", oa->endpoint == KITE_OPENAI_CHAT ? "messages" : "prompt",
                                     "context_length_exceeded",
                                     "this model's context is %d tokens per request and the prompt has %zu tokens; it may have "
                                     "at most %d so that one token can be generated",
                                     s->n_ctx, r->n_prompt, s->n_ctx - 1);
    for (size_t i = 0; i < oa->n_logit_bias; i++)
        if (oa->logit_bias[i].token >= s->info.n_vocab)
            return kite_openai_set_error(e, 400, "invalid_request_error", "logit_bias", NULL,
                                         "logit_bias token id %d is outside the vocabulary (%d tokens)", oa->logit_bias[i].token,
                                         s->info.n_vocab);
    return 0;
}

/* The grammar the request's output must follow (response_format, grammar, a forced tool call) and the
 * parser of a chat reply's parts. Returns 0 or an HTTP status with *e. */
static int prepare_output(kite_server *s, serve_request *r, kite_openai_error *e) {
    const kite_openai_request *oa = &r->oa;
    char err[512];
    kite_error ke = {0};
    bool chat = oa->endpoint == KITE_OPENAI_CHAT;
    bool calls = chat && oa->n_tools > 0 && oa->tool_choice != KITE_OPENAI_TOOLS_NONE;
    kite_tool_format format = calls ? s->tool_info.format : KITE_TOOL_FORMAT_NONE;
    const char *param = oa->format == KITE_OPENAI_FORMAT_GRAMMAR ? "grammar"
                        : oa->format == KITE_OPENAI_FORMAT_JSON_SCHEMA ? "response_format.json_schema.schema"
                                                                        : "response_format";
    int rc = KITE_OK;
    switch (oa->format) {
    case KITE_OPENAI_FORMAT_TEXT: break;
    case KITE_OPENAI_FORMAT_JSON_OBJECT: rc = kite_grammar_open(&r->grammar, s->model, KITE_GRAMMAR_JSON, NULL, 0, err, sizeof err); break;
    case KITE_OPENAI_FORMAT_JSON_SCHEMA:
        rc = kite_grammar_open(&r->grammar, s->model, KITE_GRAMMAR_JSON_SCHEMA, oa->format_text, strlen(oa->format_text), err,
                               sizeof err);
        break;
    case KITE_OPENAI_FORMAT_GRAMMAR:
        rc = kite_grammar_open(&r->grammar, s->model, KITE_GRAMMAR_GBNF, oa->format_text, strlen(oa->format_text), err, sizeof err);
        break;
    }
    if (!rc && calls && oa->tool_choice >= KITE_OPENAI_TOOLS_REQUIRED) {
        param = "tool_choice";
        rc = kite_grammar_open_tool_call(&r->grammar, s->model, s->tmpl, oa->tools_json, oa->tool_choice_name, err, sizeof err);
    }
    /* auto: the calls the model starts are held to the tools' schemas from their trigger on (a lazy
     * grammar); a template without a text trigger (harmony) or a request with its own format answers
     * as it is, its calls parsed; so does one whose tool schemas no grammar can hold (auto never
     * refused them) */
    if (!rc && calls && oa->tool_choice == KITE_OPENAI_TOOLS_AUTO && oa->format == KITE_OPENAI_FORMAT_TEXT) {
        param = "tools";
        rc = kite_grammar_open_tool_auto(&r->grammar, s->model, s->tmpl, oa->tools_json, oa->parallel_tool_calls, err, sizeof err);
        if (rc && rc != KITE_ERR_NOMEM) kite_log(KITE_LOG_INFO, "serve: tool_choice auto without a grammar: %s", err);
        if (rc != KITE_ERR_NOMEM) rc = KITE_OK;
    }
    if (rc)
        return kite_openai_set_error(e, rc == KITE_ERR_NOMEM ? 500 : 400, rc == KITE_ERR_NOMEM ? "server_error" : "invalid_request_error",
                                     param, NULL, "%s", err);
    if (chat && (calls || s->tool_info.think)) {
        kite_tool_parse_options po = kite_tool_parse_default_options(format);
        po.think = s->tool_info.think;
        po.id_seed = next_random(s);
        /* a generation prompt that opens <think> (DeepSeek-R1's newer templates) starts the reply inside it */
        char tail[256];
        size_t from = r->n_prompt > 16 ? r->n_prompt - 16 : 0, n_tail = 0;
        if (po.think && kite_detokenize(s->model, r->prompt_ids + from, r->n_prompt - from, tail, sizeof tail, &n_tail, err, sizeof err) == KITE_OK &&
            n_tail <= sizeof tail)
            po.starts_in_think = kite_tool_prompt_opens_think(tail, n_tail);
        if (!oa->stream) {
            r->parse_reply = true; /* the whole text is parsed once at the end */
            r->reply_options = po;
        } else if (kite_tool_stream_new(&po, &r->replies, &ke)) {
            return kite_openai_set_error(e, 500, "server_error", NULL, NULL, "%s", ke.msg);
        }
    }
    return 0;
}

int serve_prepare_local(kite_server *s, serve_request *r, const char *continuation, size_t continuation_len,
                        const char *continuation_reasoning, size_t continuation_reasoning_len, kite_openai_error *e) {
    /* a request may come here more than once (a fallback, a continuation): drop the previous try's state */
    if (r->ids_from_lib) kite_free(r->prompt_ids);
    else free(r->prompt_ids);
    r->prompt_ids = NULL;
    r->n_prompt = 0;
    r->ids_from_lib = false;
    kite_grammar_free(r->grammar);
    r->grammar = NULL;
    kite_tool_stream_free(r->replies);
    r->replies = NULL;
    int rc = tokenize_request(s, r, continuation, continuation_len, continuation_reasoning, continuation_reasoning_len, e);
    if (rc == 0) rc = prepare_output(s, r, e);
    if (rc == 0) build_gen_params(s, r);
    return rc;
}

serve_request *serve_request_new(kite_server *s) {
    serve_request *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    atomic_init(&r->refs, 1);
    atomic_init(&r->cancelled, false);
    r->server = s;
    r->client_fd = -1;
    pthread_mutex_init(&r->mu, NULL);
    serve_cond_init(&r->cv);
    return r;
}

/* A stream's response, answered once its first bytes may go out (headers included). */
static enum MHD_Result queue_stream(kite_server *s, struct MHD_Connection *conn, serve_connection *c, serve_request *r) {
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_reader, serve_request_ref(r), stream_free);
    if (!resp) {
        serve_request_unref(r);
        serve_request_cancel(r);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    add_route_headers(resp, r);
    enum MHD_Result qr = MHD_queue_response(conn, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp);
    c->answered = true;
    serve_metrics_request(&s->metrics, c->endpoint, 200);
    return qr;
}

/* Waits (this connection's thread) until ready(r) holds under r->mu, watching the socket. False when the
 * client left (the request is cancelled and 499 counted). */
static bool wait_for(kite_server *s, serve_connection *c, serve_request *r, bool (*ready)(const serve_request *)) {
    pthread_mutex_lock(&r->mu);
    while (!ready(r)) {
        struct timespec ts;
        deadline_after_ms(&ts, WAIT_SLICE_MS);
        pthread_cond_timedwait(&r->cv, &r->mu, &ts);
        if (!ready(r) && peer_gone(r->client_fd)) {
            pthread_mutex_unlock(&r->mu);
            serve_request_cancel(r);
            serve_metrics_request(&s->metrics, c->endpoint, 499); /* nginx's "client closed request" */
            c->answered = true;
            return false;
        }
    }
    pthread_mutex_unlock(&r->mu);
    return true;
}

static bool is_done(const serve_request *r) { return r->done; }
static bool is_started(const serve_request *r) { (void)r; return true; }
static bool is_committed(const serve_request *r) { return r->done || r->route->committed; }

/* Drops a reference counted in n_responding (a request that will not be answered over this path). */
static void serve_request_release(kite_server *s, serve_request *r) {
    serve_request_unref(r);
    pthread_mutex_lock(&s->mu);
    if (--s->n_responding == 0) pthread_cond_broadcast(&s->drained_cv);
    pthread_mutex_unlock(&s->mu);
}

static void name_request(kite_server *s, serve_request *r) {
    uint64_t rnd = next_random(s);
    snprintf(r->id, sizeof r->id, "%s%016llx%08llx", r->oa.endpoint == KITE_OPENAI_CHAT ? "chatcmpl-" : "cmpl-",
             (unsigned long long)rnd, (unsigned long long)(next_random(s) & 0xffffffffu));
    r->created = (int64_t)time(NULL);
}

/* A routed request: the policies decide from the body, the segment header and the backends' states;
 * the runner (route_exec.c) tries the plan. Returns 0 with *out started, or an HTTP status with *e. */
static int submit_routed(kite_server *s, serve_request *r, const char *body, size_t len, const char *segment,
                         kite_openai_error *e) {
    kite_router *router = s->router;
    route_request_info info;
    char route_name[ROUTE_NAME_MAX], user[256];
    kite_error ke = {0};
    if (route_request_info_from_body(router, body, len, segment, &info, route_name, sizeof route_name, user, sizeof user, &ke))
        return kite_openai_set_error(e, 400, "invalid_request_error", NULL, NULL, "%s", ke.msg);
    /* a model field naming a backend picks it, as "route" does */
    if (!info.route && r->oa.model && route_config_backend(&router->cfg, r->oa.model) >= 0) info.route = r->oa.model;
    route_backend_state states[ROUTE_MAX_BACKENDS];
    route_router_states(router, states);
    serve_route *rt = calloc(1, sizeof *rt);
    if (!rt) return kite_openai_set_error(e, 500, "server_error", NULL, NULL, "out of memory");
    r->route = rt;
    rt->backend = rt->answer_backend = -1;
    route_decide(&router->cfg, states, &info, &rt->plan);
    pthread_mutex_lock(&router->mu);
    int32_t rule = rt->plan.rule >= 0 && rt->plan.rule < ROUTE_MAX_RULES ? rt->plan.rule : ROUTE_MAX_RULES;
    router->decisions_by_rule[rule]++;
    pthread_mutex_unlock(&router->mu);
    if (rt->plan.http_status == 400)
        return kite_openai_set_error(e, 400, "invalid_request_error", r->oa.endpoint == KITE_OPENAI_CHAT ? "messages" : "prompt",
                                     strstr(rt->plan.reason, "fit") ? "context_length_exceeded" : NULL, "%s", rt->plan.reason);
    if (rt->plan.http_status)
        return kite_openai_set_error(e, rt->plan.http_status, "server_error", NULL, "no_backend", "%s", rt->plan.reason);
    rt->prompt_tokens = info.prompt_tokens;
    rt->body = malloc(len + 1);
    if (!rt->body) return kite_openai_set_error(e, 500, "server_error", NULL, NULL, "out of memory");
    memcpy(rt->body, body, len);
    rt->body[len] = 0;
    rt->body_len = len;
    if (serve_route_start(r)) return kite_openai_set_error(e, 500, "server_error", NULL, NULL, "cannot start the request");
    return 0;
}

/* Parses, prepares and starts a request, whatever carries it (HTTP, kite_server_complete). Returns 0
 * with *out (the caller's reference, counted in n_responding), or an HTTP status with *e. */
static int submit(kite_server *s, kite_openai_endpoint endpoint, const char *body, size_t len, const char *segment,
                  int client_fd, bool force_stream, serve_request **out, kite_openai_error *e) {
    *out = NULL;
    serve_request *r = serve_request_new(s);
    if (!r) return kite_openai_set_error(e, 500, "server_error", NULL, NULL, "out of memory");
    r->t_received = serve_now();
    r->deadline = r->t_received + s->timeout_ms / 1000.0;
    r->client_fd = client_fd;
    int rc = kite_openai_parse_request(endpoint, body, len, &s->limits, &r->oa, e);
    if (rc == 0 && force_stream) r->oa.stream = true;
    if (rc == 0 && !s->router && r->oa.model && strcmp(r->oa.model, s->model_name) != 0)
        rc = kite_openai_set_error(e, 404, "invalid_request_error", "model", "model_not_found",
                                   "The model '%.200s' does not exist; this server serves '%.200s'", r->oa.model,
                                   s->model_name);
    if (rc == 0 && !s->router) rc = serve_prepare_local(s, r, NULL, 0, NULL, 0, e);
    if (rc) {
        serve_request_unref(r);
        return rc;
    }
    name_request(s, r);
    pthread_mutex_lock(&s->mu);
    s->n_responding++;
    pthread_mutex_unlock(&s->mu);
    if (s->router) {
        rc = submit_routed(s, r, body, len, segment, e);
    } else {
        rc = serve_enqueue(s, r);
        if (rc == 429)
            kite_openai_set_error(e, 429, "rate_limit_error", NULL, "queue_full",
                                  "the server is busy: %d requests are already waiting; retry later", s->queue_size);
        else if (rc)
            kite_openai_set_error(e, 503, "server_error", NULL, "shutting_down", "the server is shutting down");
    }
    if (rc) {
        serve_request_release(s, r);
        return rc;
    }
    *out = r;
    return 0;
}

static enum MHD_Result handle_completion(kite_server *s, struct MHD_Connection *conn, serve_connection *c) {
    kite_openai_endpoint endpoint = c->endpoint == SERVE_EP_CHAT ? KITE_OPENAI_CHAT : KITE_OPENAI_COMPLETIONS;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    const char *segment = NULL;
    if (s->router)
        segment = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                              s->router->cfg.segment_header ? s->router->cfg.segment_header : "x-kite-segment");
    serve_request *r = NULL;
    kite_openai_error e;
    if (submit(s, endpoint, c->body.data, c->body.len, segment, ci ? ci->connect_fd : -1, false, &r, &e))
        return send_error(s, conn, c, &e);
    c->req = r; /* the connection keeps its reference until it completes (request_completed) */
    /* a routed request sends nothing before the backend that answers commits (its headers name it) */
    if (!wait_for(s, c, r, !r->oa.stream ? is_done : r->route ? is_committed : is_started)) return MHD_NO;
    if (r->error_status) return send_error(s, conn, c, &r->error);
    if (r->oa.stream) return queue_stream(s, conn, c, r);
    return send_json(s, conn, c, 200, serve_response_body(r));
}

/* ---- other endpoints -------------------------------------------------------------------------- */
static json_t *model_object(const kite_server *s) {
    json_t *m = json_object();
    json_object_set_new(m, "id", json_string(s->model_name));
    json_object_set_new(m, "object", json_string("model"));
    json_object_set_new(m, "created", json_integer(s->started));
    json_object_set_new(m, "owned_by", json_string("kite"));
    return m;
}

static enum MHD_Result handle_get(kite_server *s, struct MHD_Connection *conn, serve_connection *c, const char *url) {
    if (c->endpoint == SERVE_EP_HEALTH) {
        pthread_mutex_lock(&s->mu);
        bool stopping = s->stopping;
        pthread_mutex_unlock(&s->mu);
        json_t *body = json_object();
        json_object_set_new(body, "status", json_string(stopping ? "shutting down" : "ok"));
        return send_json(s, conn, c, stopping ? 503 : 200, body);
    }
    if (c->endpoint == SERVE_EP_METRICS) {
        pthread_mutex_lock(&s->mu);
        int32_t queued = s->n_queued;
        pthread_mutex_unlock(&s->mu);
        char *text = serve_metrics_text(&s->metrics, queued, atomic_load(&s->busy_slots), s->n_slots);
        if (text && s->router) {
            char *more = serve_route_metrics_text(s);
            char *joined = more ? malloc(strlen(text) + strlen(more) + 1) : NULL;
            if (joined) {
                strcpy(joined, text);
                strcat(joined, more);
            }
            free(text);
            free(more);
            text = joined;
        }
        if (!text) return send_error_fmt(s, conn, c, 500, "server_error", NULL, NULL, "out of memory");
        return queue_response(s, conn, c, 200, "text/plain; version=0.0.4; charset=utf-8", text, strlen(text));
    }
    /* /v1/models and /v1/models/{id} */
    if (!strcmp(url, "/v1/models")) {
        json_t *body = json_object(), *data = json_array();
        json_array_append_new(data, model_object(s));
        json_object_set_new(body, "object", json_string("list"));
        json_object_set_new(body, "data", data);
        return send_json(s, conn, c, 200, body);
    }
    const char *id = url + strlen("/v1/models/");
    if (strcmp(id, s->model_name) != 0)
        return send_error_fmt(s, conn, c, 404, "invalid_request_error", "model", "model_not_found",
                              "The model '%.200s' does not exist; this server serves '%.200s'", id, s->model_name);
    return send_json(s, conn, c, 200, model_object(s));
}

static serve_endpoint classify(const char *url) {
    if (!strcmp(url, "/v1/chat/completions")) return SERVE_EP_CHAT;
    if (!strcmp(url, "/v1/completions")) return SERVE_EP_COMPLETIONS;
    if (!strcmp(url, "/v1/models") || !strncmp(url, "/v1/models/", 11)) return SERVE_EP_MODELS;
    if (!strcmp(url, "/health")) return SERVE_EP_HEALTH;
    if (!strcmp(url, "/metrics")) return SERVE_EP_METRICS;
    return SERVE_EP_OTHER;
}

static enum MHD_Result access_handler(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                      const char *version, const char *upload_data, size_t *upload_data_size,
                                      void **con_cls) {
    kite_server *s = cls;
    (void)version;
    serve_connection *c = *con_cls;
    if (!c) {
        /* First call: the headers are in. Answer whatever can be answered before the body. */
        c = calloc(1, sizeof *c);
        if (!c) return MHD_NO;
        *con_cls = c;
        c->endpoint = classify(url);
        c->is_post = !strcmp(method, MHD_HTTP_METHOD_POST);
        bool is_get = !strcmp(method, MHD_HTTP_METHOD_GET) || !strcmp(method, MHD_HTTP_METHOD_HEAD);
        if (c->endpoint == SERVE_EP_OTHER)
            return send_error_fmt(s, conn, c, 404, "invalid_request_error", NULL, "not_found", "Unknown endpoint: %s %.200s",
                                  method, url);
        bool wants_post = c->endpoint == SERVE_EP_CHAT || c->endpoint == SERVE_EP_COMPLETIONS;
        if (wants_post ? !c->is_post : !is_get)
            return send_error_fmt(s, conn, c, 405, "invalid_request_error", NULL, "method_not_allowed",
                                  "%.200s takes %s, not %s", url, wants_post ? "POST" : "GET", method);
        if (s->api_key && c->endpoint != SERVE_EP_HEALTH &&
            !api_key_matches(MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION), s->api_key))
            return send_error_fmt(s, conn, c, 401, "invalid_request_error", NULL, "invalid_api_key",
                                  "Missing or incorrect API key: send the header 'Authorization: Bearer KEY'");
        if (wants_post) {
            const char *length = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
            /* Too large: the body is read and dropped, then 413 (clients such as fetch fail on a connection
             * closed while they still send); a body far past the limit is not worth reading: 413 at once. */
            unsigned long long announced = length ? strtoull(length, NULL, 10) : 0;
            if (announced > s->max_body_bytes + DISCARD_LIMIT_BYTES)
                return send_error_fmt(s, conn, c, 413, "invalid_request_error", NULL, "request_too_large",
                                      "the request body is %s bytes; this server accepts at most %zu bytes", length,
                                      s->max_body_bytes);
            if (announced > s->max_body_bytes) c->body_too_big = true;
            pthread_mutex_lock(&s->mu);
            bool stopping = s->stopping;
            pthread_mutex_unlock(&s->mu);
            if (stopping)
                return send_error_fmt(s, conn, c, 503, "server_error", NULL, "shutting_down", "the server is shutting down");
            return MHD_YES; /* the body follows */
        }
        return handle_get(s, conn, c, url);
    }
    if (c->answered) {
        *upload_data_size = 0; /* a rejected request's body is read and dropped */
        return MHD_YES;
    }
    if (*upload_data_size > 0) {
        /* The body arrives in pieces; past the limit (a chunked upload gave no length) it is dropped. */
        c->body_received += *upload_data_size;
        if (!c->body_too_big && c->body_received <= s->max_body_bytes) {
            if (!serve_buf_append(&c->body, upload_data, *upload_data_size)) return MHD_NO;
        } else {
            c->body_too_big = true;
            serve_buf_free(&c->body);
            if (c->body_received > s->max_body_bytes + DISCARD_LIMIT_BYTES) return MHD_NO; /* close the connection */
        }
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (c->body_too_big)
        return send_error_fmt(s, conn, c, 413, "invalid_request_error", NULL, "request_too_large",
                              "the request body is larger than this server accepts (at most %zu bytes)", s->max_body_bytes);
    return handle_completion(s, conn, c);
}

static void request_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                              enum MHD_RequestTerminationCode toe) {
    (void)cls;
    (void)conn;
    serve_connection *c = *con_cls;
    if (!c) return;
    if (c->req) {
        kite_server *s = c->req->server;
        if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK) serve_request_cancel(c->req);
        serve_request_unref(c->req);
        pthread_mutex_lock(&s->mu);
        if (--s->n_responding == 0) pthread_cond_broadcast(&s->drained_cv);
        pthread_mutex_unlock(&s->mu);
    }
    serve_buf_free(&c->body);
    free(c);
    *con_cls = NULL;
}

static void mhd_logger(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
    kite_log(KITE_LOG_WARN, "serve: http: %s", line);
}

/* ---- the public API --------------------------------------------------------------------------- */
kite_server_params kite_server_default_params(void) {
    return (kite_server_params){.host = NULL, .port = 0, .kv_type = KITE_KV_F16};
}

static void server_free_parts(kite_server *s) {
    if (s->daemon) MHD_stop_daemon(s->daemon);
    s->daemon = NULL;
    serve_scheduler_stop(s);
    for (int32_t i = 0; s->slots && i < s->n_slots; i++) kite_session_free(s->slots[i].session);
    free(s->slots);
    kite_batch_free(s->batch);
    kite_chat_template_free(s->tmpl);
    free(s->model_name);
    free(s->api_key);
    if (s->stop_fd >= 0) close(s->stop_fd);
    serve_metrics_destroy(&s->metrics);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    pthread_cond_destroy(&s->drained_cv);
    free(s);
}

int kite_server_open(kite_server **out, kite_model *model, const kite_server_params *params, char *err,
                     size_t err_size) {
    kite_error e = {0};
    if (out) *out = NULL;
    if (!out || !model) {
        kite_fail(&e, KITE_ERR_INVALID_ARG, "kite_server_open: out and model are required");
        return kite_error_export(&e, err, err_size);
    }
    kite_server_params p = params ? *params : kite_server_default_params();
    if (p.n_parallel < 0 || p.n_parallel > 256 || p.n_ctx < 0 || p.queue_size < 0 || p.timeout_ms < 0 ||
        p.max_json_depth < 0 || p.max_messages < 0 || p.port < -1 || p.port > 65535) {
        kite_fail(&e, KITE_ERR_INVALID_ARG, "kite_server_open: a parameter is out of range");
        return kite_error_export(&e, err, err_size);
    }
    if (p.router && kite_router_local_model(p.router) != model) {
        kite_fail(&e, KITE_ERR_INVALID_ARG, "kite_server_open: with a router, the model must be the router's local one");
        return kite_error_export(&e, err, err_size);
    }
    kite_server *s = calloc(1, sizeof *s);
    if (!s) {
        kite_fail(&e, KITE_ERR_NOMEM, "kite_server_open: out of memory");
        return kite_error_export(&e, err, err_size);
    }
    s->stop_fd = -1;
    pthread_mutex_init(&s->mu, NULL);
    serve_cond_init(&s->cv);
    serve_cond_init(&s->drained_cv);
    serve_metrics_init(&s->metrics);
    s->model = model;
    s->router = p.router;
    kite_model_get_info(model, &s->info);
    s->gen_defaults = kite_model_gen_params(model);
    s->model_name = strdup(p.model_name && p.model_name[0] ? p.model_name : "kite");
    s->api_key = p.api_key && p.api_key[0] ? strdup(p.api_key) : NULL;
    s->queue_size = p.queue_size ? p.queue_size : 64;
    s->timeout_ms = p.timeout_ms ? p.timeout_ms : 600000;
    s->max_body_bytes = p.max_body_bytes ? p.max_body_bytes : (size_t)8 << 20;
    s->limits = kite_openai_default_limits();
    if (p.max_json_depth) s->limits.max_json_depth = p.max_json_depth;
    if (p.max_messages) s->limits.max_messages = p.max_messages;
    s->started = (int64_t)time(NULL);
    s->n_slots = p.n_parallel ? p.n_parallel : 4;
    if (getrandom(&s->id_salt, sizeof s->id_salt, 0) != (ssize_t)sizeof s->id_salt)
        s->id_salt = (uint64_t)time(NULL) ^ (uint64_t)(uintptr_t)s;
    atomic_init(&s->id_counter, 0);
    atomic_init(&s->busy_slots, 0);
    atomic_init(&s->stop_requested, false);
    int rc = KITE_OK;
    if (!s->model_name || (p.api_key && p.api_key[0] && !s->api_key)) {
        rc = kite_fail(&e, KITE_ERR_NOMEM, "kite_server_open: out of memory");
        goto fail;
    }
    s->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (s->stop_fd < 0) {
        rc = kite_fail(&e, KITE_ERR_IO, "serve: eventfd: %s", strerror(errno));
        goto fail;
    }

    /* The chat template: the given source, else the model's own (none: chat requests get a clear 400). */
    char msg[512];
    if (p.chat_template) {
        rc = kite_chat_template_from_text(&s->tmpl, p.chat_template, strlen(p.chat_template), model, msg, sizeof msg);
        if (rc) {
            kite_fail(&e, rc, "serve: chat template: %s", msg);
            goto fail;
        }
    } else if (kite_chat_template_open(&s->tmpl, model, NULL, msg, sizeof msg) != KITE_OK) {
        s->tmpl = NULL;
        snprintf(s->tmpl_error, sizeof s->tmpl_error, "%.200s", msg);
        kite_log(KITE_LOG_WARN, "serve: no chat template, /v1/chat/completions will answer 400: %s", msg);
    }
    s->tool_info = kite_chat_template_tool_info(s->tmpl);

    /* The slots and the batch that steps them. */
    s->slots = calloc((size_t)s->n_slots, sizeof *s->slots);
    if (!s->slots) {
        rc = kite_fail(&e, KITE_ERR_NOMEM, "kite_server_open: out of memory");
        goto fail;
    }
    kite_session_params sp = kite_session_default_params();
    sp.n_ctx = p.n_ctx;
    sp.n_threads = p.n_threads;
    if (p.router && p.router->local_backend >= 0) {
        /* the context and threads the router's policies assume for its local backend */
        const route_backend *local = &p.router->cfg.backends[p.router->local_backend];
        if (!sp.n_ctx && local->n_ctx > 0) sp.n_ctx = local->n_ctx;
        if (!sp.n_threads && local->n_threads > 0) sp.n_threads = local->n_threads;
    }
    sp.kv_type = p.kv_type;
    if (p.spec) {
        s->spec = *p.spec;
        s->have_spec = true;
    }
    for (int32_t i = 0; i < s->n_slots; i++) {
        s->slots[i].index = i;
        rc = kite_session_open(&s->slots[i].session, model, &sp, msg, sizeof msg);
        if (rc == KITE_OK && s->have_spec) rc = kite_session_set_spec(s->slots[i].session, &s->spec, msg, sizeof msg);
        if (rc) {
            kite_fail(&e, rc, "serve: slot %d: %s", i, msg);
            goto fail;
        }
    }
    s->n_ctx = kite_session_n_ctx(s->slots[0].session);
    kite_batch_params bp = kite_batch_default_params();
    bp.n_ctx = s->n_ctx;
    bp.n_threads = sp.n_threads;
    rc = kite_batch_open(&s->batch, model, &bp, msg, sizeof msg);
    if (rc) {
        kite_fail(&e, rc, "serve: batch: %s", msg);
        goto fail;
    }
    rc = serve_scheduler_start(s, msg, sizeof msg);
    if (rc) {
        kite_fail(&e, rc, "%s", msg);
        goto fail;
    }

    if (p.no_listen) {
        kite_log(KITE_LOG_INFO, "serve: in-process only, %d slots of %d tokens", s->n_slots, s->n_ctx);
        *out = s;
        return KITE_OK;
    }
    /* Bind: an IPv4 or IPv6 literal (or "localhost"); port -1 lets the system choose. */
    const char *host = p.host && p.host[0] ? p.host : "127.0.0.1";
    if (!strcmp(host, "localhost")) host = "127.0.0.1";
    uint16_t port = p.port == -1 ? 0 : (uint16_t)(p.port ? p.port : 8080);
    struct sockaddr_in a4 = {0};
    struct sockaddr_in6 a6 = {0};
    struct sockaddr *addr;
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
    if (inet_pton(AF_INET, host, &a4.sin_addr) == 1) {
        a4.sin_family = AF_INET;
        a4.sin_port = htons(port);
        addr = (struct sockaddr *)&a4;
    } else if (inet_pton(AF_INET6, host, &a6.sin6_addr) == 1) {
        a6.sin6_family = AF_INET6;
        a6.sin6_port = htons(port);
        addr = (struct sockaddr *)&a6;
        flags |= MHD_USE_IPv6;
    } else {
        rc = kite_fail(&e, KITE_ERR_INVALID_ARG, "serve: --host must be an IPv4 or IPv6 address (or localhost), got '%.100s'",
                       host);
        goto fail;
    }
    unsigned connection_limit = (unsigned)(s->queue_size + s->n_slots + 64);
    /* the logger first, so that nothing MHD says goes to stderr */
    s->daemon = MHD_start_daemon(flags, port, NULL, NULL, access_handler, s, MHD_OPTION_EXTERNAL_LOGGER, mhd_logger, s,
                                 MHD_OPTION_SOCK_ADDR, addr, MHD_OPTION_NOTIFY_COMPLETED, request_completed, s,
                                 MHD_OPTION_CONNECTION_LIMIT, connection_limit, MHD_OPTION_CONNECTION_TIMEOUT,
                                 (unsigned)120, MHD_OPTION_LISTENING_ADDRESS_REUSE, (unsigned)1, MHD_OPTION_END);
    if (!s->daemon) {
        rc = kite_fail(&e, KITE_ERR_IO, "serve: cannot listen on %s port %u (in use, or not an address of this machine)",
                       host, (unsigned)port);
        goto fail;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = info ? info->port : port;
    kite_log(KITE_LOG_INFO, "serve: listening on %s:%u, %d slots of %d tokens", host, (unsigned)s->port, s->n_slots,
             s->n_ctx);
    *out = s;
    return KITE_OK;
fail:
    server_free_parts(s);
    return kite_error_export(&e, err, err_size);
}

int32_t kite_server_port(const kite_server *server) { return server ? server->port : -1; }

/* ---- in-process requests ------------------------------------------------------------------------ */
typedef struct complete_state {
    kite_text_fn on_text;
    void *user_data;
    bool stopped;                    /* on_text said stop */
    serve_buf text, reasoning;
    json_t *tool_calls;              /* deltas as they came */
    json_t *last;                    /* the chunk with finish_reason (carries "route") */
    json_t *usage;
    json_t *error;
} complete_state;

static int on_complete_event(const route_sse_event *ev, void *user_data) {
    complete_state *st = user_data;
    if (!strcmp(ev->data, "[DONE]")) return 0;
    json_t *root = json_loadb(ev->data, ev->data_len, 0, NULL);
    if (!root) return 0;
    json_t *err = json_object_get(root, "error");
    if (err) {
        json_decref(st->error);
        st->error = json_incref(err);
    }
    json_t *usage = json_object_get(root, "usage");
    if (json_is_object(usage)) {
        json_decref(st->usage);
        st->usage = json_incref(usage);
    }
    json_t *choice = json_array_get(json_object_get(root, "choices"), 0);
    json_t *delta = json_object_get(choice, "delta");
    json_t *text = delta ? json_object_get(delta, "content") : json_object_get(choice, "text");
    json_t *reasoning = json_object_get(delta, "reasoning_content");
    json_t *calls = json_object_get(delta, "tool_calls");
    if (json_is_string(text) && json_string_length(text)) {
        serve_buf_append(&st->text, json_string_value(text), json_string_length(text));
        if (st->on_text && !st->stopped && !st->on_text(json_string_value(text), json_string_length(text), st->user_data))
            st->stopped = true;
    }
    if (json_is_string(reasoning)) serve_buf_append(&st->reasoning, json_string_value(reasoning), json_string_length(reasoning));
    if (json_is_array(calls)) {
        if (!st->tool_calls) st->tool_calls = json_array();
        json_array_extend(st->tool_calls, calls);
    }
    if (json_is_string(json_object_get(choice, "finish_reason"))) {
        json_decref(st->last);
        st->last = json_incref(root);
    }
    json_decref(root);
    return 0;
}

int kite_server_complete(kite_server *server, bool chat, const char *body, size_t len, const char *segment,
                         kite_text_fn on_text, void *user_data, char **response_json, char *err, size_t err_size) {
    kite_error ke = {0};
    if (response_json) *response_json = NULL;
    if (!server || !body) {
        kite_fail(&ke, KITE_ERR_INVALID_ARG, "kite_server_complete: server and body are required");
        return kite_error_export(&ke, err, err_size);
    }
    serve_request *r = NULL;
    kite_openai_error e;
    if (submit(server, chat ? KITE_OPENAI_CHAT : KITE_OPENAI_COMPLETIONS, body, len, segment, -1, true, &r, &e)) {
        kite_fail(&ke, e.http_status < 500 ? KITE_ERR_INVALID_ARG : KITE_ERR_IO, "HTTP %d: %s", e.http_status, e.message);
        return kite_error_export(&ke, err, err_size);
    }
    complete_state st = {.on_text = on_text, .user_data = user_data};
    route_sse_parser *parser = route_sse_new(0);
    serve_buf bytes = {0};
    bool done = false, cancelled = false;
    while (!done) {
        pthread_mutex_lock(&r->mu);
        while (r->out_pos == r->out.len && !r->done) pthread_cond_wait(&r->cv, &r->mu);
        bytes.len = 0;
        serve_buf_append(&bytes, r->out.data + r->out_pos, r->out.len - r->out_pos);
        r->out_pos = r->out.len = 0;
        done = r->done;
        pthread_mutex_unlock(&r->mu);
        if (parser && bytes.len) route_sse_feed(parser, bytes.data, bytes.len, on_complete_event, &st, NULL);
        if (st.stopped && !cancelled) {
            serve_request_cancel(r);
            cancelled = true;
        }
    }
    if (r->error_status) {
        kite_fail(&ke, r->error_status < 500 ? KITE_ERR_INVALID_ARG : KITE_ERR_IO, "HTTP %d: %s", r->error_status,
                       r->error.message);
    } else if (st.error && !cancelled) {
        kite_fail(&ke, KITE_ERR_IO, "%s", json_string_value(json_object_get(st.error, "message")));
    } else if (response_json) {
        json_t *o = json_object();
        json_object_set_new(o, "text", serve_json_text(st.text.data ? st.text.data : "", st.text.len));
        if (st.reasoning.len) json_object_set_new(o, "reasoning_content", serve_json_text(st.reasoning.data, st.reasoning.len));
        if (st.tool_calls) json_object_set(o, "tool_calls", st.tool_calls);
        json_t *choice = json_array_get(json_object_get(st.last, "choices"), 0);
        json_t *finish = json_object_get(choice, "finish_reason");
        json_object_set_new(o, "finish_reason", cancelled ? json_string("stopped") : finish ? json_incref(finish) : json_null());
        if (st.usage) json_object_set(o, "usage", st.usage);
        json_t *route = json_object_get(st.last, "route");
        if (route) json_object_set(o, "route", route);
        *response_json = json_dumps(o, JSON_COMPACT);
        json_decref(o);
        if (!*response_json) kite_fail(&ke, KITE_ERR_NOMEM, "kite_server_complete: out of memory");
    }
    route_sse_free(parser);
    serve_buf_free(&bytes);
    serve_buf_free(&st.text);
    serve_buf_free(&st.reasoning);
    json_decref(st.tool_calls);
    json_decref(st.last);
    json_decref(st.usage);
    json_decref(st.error);
    serve_request_release(server, r);
    return kite_error_export(&ke, err, err_size);
}

void kite_server_stop(kite_server *server) {
    if (!server) return;
    /* async-signal-safe: an atomic store and a write(2) */
    atomic_store(&server->stop_requested, true);
    uint64_t one = 1;
    ssize_t n = write(server->stop_fd, &one, sizeof one);
    (void)n;
}

/* Waits up to `seconds` for no request to be in flight (and, with responses, none still being sent);
 * returns whether that happened. */
static bool wait_drained(kite_server *s, double seconds, bool responses) {
    struct timespec ts;
    deadline_after_ms(&ts, (long)(seconds * 1000));
    pthread_mutex_lock(&s->mu);
    int rc = 0;
    while ((s->in_flight > 0 || s->n_runners > 0 || (responses && s->n_responding > 0)) && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&s->drained_cv, &s->mu, &ts);
    bool drained = s->in_flight == 0 && s->n_runners == 0 && (!responses || s->n_responding == 0);
    pthread_mutex_unlock(&s->mu);
    return drained;
}

static void shut_down(kite_server *s, double grace_seconds) {
    if (s->waited) return;
    s->waited = true;
    pthread_mutex_lock(&s->mu);
    s->stopping = true;
    pthread_mutex_unlock(&s->mu);
    if (!wait_drained(s, grace_seconds, false)) {
        kite_log(KITE_LOG_WARN, "serve: cancelling the requests still running after %.0f s", grace_seconds);
        pthread_mutex_lock(&s->mu);
        s->cancel_all = true;
        pthread_cond_signal(&s->cv);
        pthread_mutex_unlock(&s->mu);
        serve_route_cancel_all(s);
        wait_drained(s, 30.0, false);
    }
    /* Every request is done: let the connection threads send what is left (a slow reader gets a few
     * seconds), then the daemon closes the connections. */
    wait_drained(s, 5.0, true);
    if (s->daemon) MHD_stop_daemon(s->daemon);
    s->daemon = NULL;
    serve_scheduler_stop(s);
}

int kite_server_wait(kite_server *server, char *err, size_t err_size) {
    kite_error e = {0};
    if (!server) {
        kite_fail(&e, KITE_ERR_INVALID_ARG, "kite_server_wait: server is NULL");
        return kite_error_export(&e, err, err_size);
    }
    while (!atomic_load(&server->stop_requested)) {
        struct pollfd p = {.fd = server->stop_fd, .events = POLLIN};
        poll(&p, 1, 1000);
    }
    kite_log(KITE_LOG_INFO, "serve: stopping: finishing the requests in flight");
    double grace = server->timeout_ms / 1000.0 < SHUTDOWN_GRACE_SECONDS ? server->timeout_ms / 1000.0 : SHUTDOWN_GRACE_SECONDS;
    shut_down(server, grace);
    return kite_error_export(&e, err, err_size);
}

void kite_server_free(kite_server *server) {
    if (!server) return;
    shut_down(server, 0.0);
    server_free_parts(server);
}
