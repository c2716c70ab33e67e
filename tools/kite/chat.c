/* kite chat: an interactive multi-turn conversation with a model, in the model's own chat template.
 *
 * Every turn re-renders the whole conversation (kite_chat_tokenize), keeps the longest prefix the
 * session already holds (its K/V is reused) and prefills only the rest, so a turn costs its own new
 * tokens. Uses only kite.h; line editing and history come from libedit when stdin is a terminal, and
 * plain lines are read otherwise (so a script can pipe a session in). */
#include <errno.h>
#include <jansson.h>
#include <langinfo.h>
#include <locale.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <editline/readline.h>

#include "chat_common.h"
#include "default_model.h"
#include "kite.h"
#include "cli_util.h"

#define usage_error(...) kite_cli_usage_error("kite", "kite chat --help", __VA_ARGS__)

static const char CHAT_USAGE[] =
    "usage: kite chat --model PATH [options]\n"
    "\n"
    "Talks with a model in its own chat template. Each turn reuses the K/V cache of the conversation so far:\n"
    "only the new turn's tokens are prefilled. Type a message and Enter; Ctrl-C stops an answer (the part\n"
    "written so far stays in the conversation); Ctrl-C or Ctrl-D at an empty prompt exits. When stdin is\n"
    "not a terminal, each line read is a message (or a command).\n"
    "\n"
    "  --model, -m PATH        GGUF file, llama2.c .bin, or Hugging Face folder\n"
    "  --tokenizer PATH        tokenizer for a llama2.c checkpoint\n"
    "  --chat-template FILE    a Jinja template file instead of the model's own\n"
    "  --template-name NAME    a named template of the model (tokenizer.chat_template.NAME)\n"
    "  --system TEXT           a system message at the start of the conversation (kept by /reset)\n"
    "  --no-think              ask a thinking model not to think (template variable enable_thinking=false)\n"
    "  --kwargs JSON           other template variables, e.g. '{\"enable_thinking\": true}'\n"
    "  --max-tokens N          tokens per answer at most (default: until the end of the turn or of the context)\n"
    "  --temperature T         0 = greedy (default: the model's generation_config, else 0.8)\n"
    "  --top-k K  --top-p P  --min-p P  --repeat-penalty R  --seed S   sampling, as kite run\n"
    "  --ignore-eos            keep generating past end-of-turn tokens (tests, benchmarks)\n"
    "  --ctx N                 context size in tokens (default: the model's, at most 4096)\n"
    "  --threads N             worker threads (default: all cores)\n"
    "  --cache-type T          KV cache precision: f16 (default), f32, q8_0, q4_0\n"
    "  --draft PATH|ngram|mtp|none speculative decoding (the answers are unchanged; mtp: the model's next-n block)\n"
    "  --tools FILE.json       tool definitions (an OpenAI tools array) for the template; the model's calls are\n"
    "                          shown as [tool call] NAME(ARGUMENTS), and each call's result is the next line read\n"
    "                          (prompt 'tool NAME> '), sent back as a tool message before the model goes on\n"
    "  --tool-choice auto|none|required|NAME\n"
    "                          auto (default): the model may call; none: calls are not parsed; required or a\n"
    "                          tool's NAME: the answer to each message is one call, forced by a grammar\n"
    "  --json                  print each tool call as one line of OpenAI JSON instead\n"
    "\n"
    "commands:\n"
    "  /reset        start a new conversation (the --system message stays)\n"
    "  /save FILE    write the conversation as JSON ({\"messages\": [...]}, OpenAI form)\n"
    "  /load FILE    continue a conversation saved by /save (or any OpenAI-form messages file)\n"
    "  /stats        context use, the last turn's prefilled and reused tokens, speeds\n"
    "  /help         this list\n"
    "  /exit         leave (also Ctrl-D)\n"
    "A line starting with // sends the rest as text beginning with '/'.\n";

static const char CHAT_COMMANDS[] =
    "  /reset        start a new conversation (the --system message stays)\n"
    "  /save FILE    write the conversation as JSON ({\"messages\": [...]})\n"
    "  /load FILE    continue a saved conversation\n"
    "  /stats        context use, the last turn's prefilled and reused tokens, speeds\n"
    "  /help         this list\n"
    "  /exit         leave (also Ctrl-D)\n";

/* ---- options ---------------------------------------------------------------------------------- */
typedef struct chat_options {
    const char *model_path, *tokenizer_path, *template_file, *template_name, *system, *kwargs_text;
    const char *draft, *cache_type;
    const char *tools_file, *tool_choice; /* tool_choice NULL = auto */
    bool no_think, ignore_eos, json;
    int32_t ctx, threads;      /* 0 = defaults */
    int32_t max_tokens;        /* per answer; -1 = until the end of the turn or the context */
    float temperature, top_p, min_p, repeat_penalty;
    int32_t top_k;
    uint64_t seed;
    bool have_temperature, have_top_p, have_min_p, have_repeat_penalty, have_top_k, have_seed;
} chat_options;

static bool parse_f32(const char *s, float *out) {
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || end == s || *end || v != v) return false;
    *out = v;
    return true;
}

/* Returns 0, 2 after a usage error, or -1 after --help. */
static int parse_options(int argc, char **argv, chat_options *o) {
    o->max_tokens = -1;
    for (int i = 2; i < argc; i++) {
        const char *opt = argv[i];
        /* llama.cpp's short flags, as kite run takes them. */
        static const char *const short_flags[][2] = {{"-m", "--model"}, {"-n", "--max-tokens"}, {"-t", "--threads"},
                                                      {"-c", "--ctx"},   {"-s", "--seed"},       {"--temp", "--temperature"}};
        for (size_t k = 0; k < sizeof short_flags / sizeof *short_flags; k++)
            if (!strcmp(opt, short_flags[k][0])) opt = short_flags[k][1];
        if (!strcmp(opt, "--help") || !strcmp(opt, "-h")) return -1;
        if (!strcmp(opt, "--no-think")) { o->no_think = true; continue; }
        if (!strcmp(opt, "--ignore-eos")) { o->ignore_eos = true; continue; }
        if (!strcmp(opt, "--json")) { o->json = true; continue; }
        if (opt[0] != '-') return usage_error("unexpected argument '%s'", opt);
        const char **text_slot = !strcmp(opt, "--model")           ? &o->model_path
                                 : !strcmp(opt, "--tokenizer")     ? &o->tokenizer_path
                                 : !strcmp(opt, "--chat-template") ? &o->template_file
                                 : !strcmp(opt, "--template-name") ? &o->template_name
                                 : !strcmp(opt, "--system")        ? &o->system
                                 : !strcmp(opt, "--kwargs")        ? &o->kwargs_text
                                 : !strcmp(opt, "--draft")         ? &o->draft
                                 : !strcmp(opt, "--cache-type")    ? &o->cache_type
                                 : !strcmp(opt, "--tools")         ? &o->tools_file
                                 : !strcmp(opt, "--tool-choice")   ? &o->tool_choice
                                                                   : NULL;
        static const char *const known[] = {"--max-tokens", "--temperature", "--top-k", "--top-p", "--min-p",
                                            "--repeat-penalty", "--seed", "--ctx", "--threads"};
        bool is_known = text_slot != NULL;
        for (size_t k = 0; k < sizeof known / sizeof *known; k++) is_known |= !strcmp(opt, known[k]);
        if (!is_known) return usage_error("unknown option %s", opt);
        if (i + 1 >= argc) return usage_error("option %s needs a value", opt);
        const char *val = argv[++i];
        if (text_slot) {
            *text_slot = val;
            continue;
        }
        bool ok = true;
        if (!strcmp(opt, "--max-tokens")) ok = kite_cli_parse_i32(val, 1, INT32_MAX, &o->max_tokens);
        else if (!strcmp(opt, "--ctx")) ok = kite_cli_parse_i32(val, 1, 1 << 22, &o->ctx);
        else if (!strcmp(opt, "--threads")) ok = kite_cli_parse_i32(val, 1, 1024, &o->threads);
        else if (!strcmp(opt, "--top-k")) ok = (o->have_top_k = kite_cli_parse_i32(val, 0, INT32_MAX, &o->top_k));
        else if (!strcmp(opt, "--temperature")) ok = (o->have_temperature = parse_f32(val, &o->temperature));
        else if (!strcmp(opt, "--top-p")) ok = (o->have_top_p = parse_f32(val, &o->top_p));
        else if (!strcmp(opt, "--min-p")) ok = (o->have_min_p = parse_f32(val, &o->min_p));
        else if (!strcmp(opt, "--repeat-penalty")) ok = (o->have_repeat_penalty = parse_f32(val, &o->repeat_penalty));
        else if (!strcmp(opt, "--seed")) {
            char *end;
            errno = 0;
            unsigned long long v = strtoull(val, &end, 10);
            ok = !errno && end != val && !*end && val[0] != '-';
            o->seed = v;
            o->have_seed = ok;
        }
        if (!ok) {
            fprintf(stderr, "kite: error: %s does not take '%s' (see kite chat --help)\n", opt, val);
            return 2;
        }
    }
    int rc = kite_cli_model_or_default(&o->model_path, "kite chat", false);
    if (rc) return rc;
    kite_kv_type kv_type;
    if (o->cache_type && !kite_kv_type_from_name(o->cache_type, &kv_type))
        return usage_error("--cache-type expects f16, f32, q8_0 or q4_0, got '%s'", o->cache_type);
    if (o->tool_choice && !o->tools_file) return usage_error("%s", "--tool-choice needs --tools FILE.json");
    if (o->json && !o->tools_file) return usage_error("%s", "--json prints tool calls: it needs --tools FILE.json");
    if (o->template_name && o->template_file)
        return usage_error("%s", "--template-name picks one of the model's templates; it does not go with --chat-template");
    return 0;
}

/* ---- Ctrl-C ----------------------------------------------------------------------------------- */
/* The handler only stores flags (kite_cancel is an atomic store): the session is set once before the
 * handler is installed, and g_generating says whether a prompt or answer is running. */
static kite_session *g_session;
static volatile sig_atomic_t g_generating;
static volatile sig_atomic_t g_interrupted;

static void on_sigint(int sig) {
    (void)sig;
    g_interrupted = 1;
    if (g_generating) kite_cancel(g_session);
}

/* ---- growing byte strings --------------------------------------------------------------------- */
typedef struct text_buf {
    char *data;
    size_t len, cap;
    bool failed; /* an allocation failed: the text is incomplete */
} text_buf;

static void buf_append(text_buf *b, const char *s, size_t n) {
    if (b->failed || n == 0) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = (b->len + n + 1) * 2;
        char *nd = realloc(b->data, cap);
        if (!nd) {
            b->failed = true;
            return;
        }
        b->data = nd;
        b->cap = cap;
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

/* A JSON string of bytes a model wrote: invalid UTF-8 (a model may emit any byte) becomes U+FFFD. */
static json_t *json_string_lossy(const char *s, size_t n) {
    json_t *j = json_stringn(s ? s : "", n);
    if (j) return j;
    text_buf clean = {0};
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        size_t need = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
        json_t *probe = need && i + need <= n ? json_stringn(s + i, need) : NULL;
        if (probe) {
            buf_append(&clean, s + i, need);
            json_decref(probe);
            i += need;
        } else {
            buf_append(&clean, "\xEF\xBF\xBD", 3);
            i++;
        }
    }
    j = json_stringn(clean.data ? clean.data : "", clean.len);
    free(clean.data);
    return j;
}

/* ---- the chat --------------------------------------------------------------------------------- */
typedef struct chat {
    kite_model *model, *draft_model;
    kite_session *session;
    kite_chat_template *tmpl;
    kite_gen_params gen;      /* sampling for every answer; max_tokens is set per turn */
    int32_t max_answer_tokens; /* -1: until the end of the turn or the context */
    const char *system;
    char *kwargs_text;        /* compact JSON object of template variables, or NULL */
    json_t *messages;         /* the conversation in OpenAI form */
    char *tools_text;         /* --tools: compact JSON array for the template, or NULL */
    bool parse_calls;         /* tools offered and --tool-choice is not none: replies are parsed for calls */
    kite_grammar *force_call; /* --tool-choice required|NAME: the answer to a message is one call */
    kite_grammar *auto_calls; /* --tool-choice auto: free text, or calls the tools' schemas allow (lazy) */
    bool json_calls;          /* --json: calls printed as OpenAI JSON lines */
    uint64_t n_replies;       /* replies parsed so far: each gets its own call ids */
    bool color;               /* stdout is a terminal: reasoning is dimmed */
    bool interactive;         /* stdin is a terminal: libedit */
    int32_t n_vocab;
    uint8_t *token_kind;      /* per token id: 0 not yet known, 1 a special (control) token, 2 text */
    /* The last turn, for /stats. */
    bool have_turn;
    int32_t turn_prefilled;   /* tokens given to kite_prompt */
    int32_t turn_reused;      /* tokens of the rendered conversation already in the session */
    int64_t turn_generated;
    double turn_prefill_tok_s, turn_decode_tok_s, turn_ttft_ms;
} chat;

/* Whether id is a special token (a control token such as <|im_end|>), which is never shown: its text
 * becomes that token only when special-token text is parsed. Text tokens, and added tokens that are
 * plain text (Qwen3's <think>), are shown. Decided once per id, with kite.h only. */
static bool token_is_special(chat *c, int32_t id) {
    if (id < 0 || id >= c->n_vocab || !c->token_kind) return false;
    if (c->token_kind[id]) return c->token_kind[id] == 1;
    char text[256];
    size_t n = 0;
    int32_t ids[4];
    size_t n_special = 0, n_plain = 0;
    bool special = false;
    if (!kite_detokenize(c->model, &id, 1, text, sizeof text, &n, NULL, 0) && n > 0 && n < sizeof text) {
        int st1 = kite_tokenize(c->model, text, n, false, true, ids, 4, &n_special, NULL, 0);
        bool whole_when_parsed = !st1 && n_special == 1 && ids[0] == id;
        int st2 = kite_tokenize(c->model, text, n, false, false, ids, 4, &n_plain, NULL, 0);
        bool whole_as_text = !st2 && n_plain == 1 && ids[0] == id;
        special = whole_when_parsed && !whole_as_text;
    }
    c->token_kind[id] = special ? 1 : 2;
    return special;
}

/* The conversation as templates take it (compact JSON text, malloc'd): past calls' arguments, JSON text
 * in OpenAI form, become JSON values (Hugging Face's convention, which templates write with tojson, as
 * kite serve passes them), and a reply that only called tools gets content "" (templates concatenate it). */
static char *conversation_text(const json_t *messages) {
    json_t *copy = json_deep_copy(messages);
    size_t i, k;
    json_t *m, *call;
    json_array_foreach(copy, i, m) {
        json_t *calls = json_object_get(m, "tool_calls");
        if (!json_is_array(calls)) continue;
        if (json_is_null(json_object_get(m, "content"))) json_object_set_new(m, "content", json_string(""));
        json_array_foreach(calls, k, call) {
            json_t *fn = json_object_get(call, "function");
            json_t *args = json_object_get(fn, "arguments");
            json_t *parsed = json_is_string(args) ? json_loadb(json_string_value(args), json_string_length(args), JSON_DECODE_ANY, NULL) : NULL;
            if (parsed) json_object_set_new(fn, "arguments", parsed);
        }
    }
    char *text = copy ? kite_cli_json_text(copy) : NULL;
    json_decref(copy);
    return text;
}

static kite_chat_params conversation_params(const chat *c, const char *messages_text, bool generation_prompt) {
    kite_chat_params cp = kite_chat_default_params();
    cp.messages_json = messages_text;
    cp.tools_json = c->tools_text;
    cp.family_tool_shapes = true;
    cp.kwargs_json = c->kwargs_text;
    cp.add_generation_prompt = generation_prompt;
    return cp;
}

/* Renders the conversation (plus the assistant header) and tokenizes it for the model. */
static int conversation_ids(chat *c, json_t *messages, bool generation_prompt, int32_t **ids, size_t *n, char *err,
                            size_t err_size) {
    char *text = conversation_text(messages);
    if (!text) {
        snprintf(err, err_size, "out of memory");
        return KITE_ERR_NOMEM;
    }
    kite_chat_params cp = conversation_params(c, text, generation_prompt);
    int st = kite_chat_tokenize(c->tmpl, c->model, &cp, ids, n, err, err_size);
    free(text);
    return st;
}

/* The conversation rendered with the generation prompt (kite_free), or NULL. */
static char *prompt_text(chat *c, size_t *len) {
    char *messages = conversation_text(c->messages);
    if (!messages) return NULL;
    kite_chat_params cp = conversation_params(c, messages, true);
    char *text = NULL;
    if (kite_chat_render(c->tmpl, &cp, &text, len, NULL, 0)) text = NULL;
    free(messages);
    return text;
}

/* Whether the rendered prompt leaves the model inside a reasoning block (templates such as
 * DeepSeek-R1's end the generation prompt with "<think>\n"): the answer then starts as reasoning. */
static bool prompt_opens_thinking(chat *c) {
    size_t len = 0;
    char *text = prompt_text(c, &len);
    bool open = false;
    if (text) {
        while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == ' ' || text[len - 1] == '\r')) len--;
        open = len >= 7 && !memcmp(text + len - 7, "<think>", 7);
    }
    kite_free(text);
    return open;
}

/* ---- one answer, streamed --------------------------------------------------------------------- */
/* Reasoning (text between <think> and </think> at the start of an answer) is shown apart, dimmed on
 * a terminal and prefixed, and stored as reasoning_content instead of content. Tags may arrive split
 * over several tokens, so text that could begin one is held back until it is decided. */
typedef enum answer_phase {
    PHASE_START,    /* nothing but whitespace yet: a <think> may still open */
    PHASE_THINKING, /* inside <think> ... </think> */
    PHASE_CONTENT,
} answer_phase;

static const char THINK_OPEN[] = "<think>", THINK_CLOSE[] = "</think>";
static const char REASONING_PREFIX[] = "| ";

typedef struct answer {
    chat *c;
    answer_phase phase;
    text_buf content, reasoning;
    text_buf held;           /* bytes that may be the start of a tag */
    bool skip_newlines;      /* drop newlines at the start of the reasoning and of the content after it */
    bool at_line_start;      /* the next reasoning byte starts a shown line (gets the prefix) */
    bool shown_reasoning;    /* a reasoning block was opened on screen */
    bool shown_anything;
    char last_shown;         /* the last byte shown */
    int64_t n_tokens;
    kite_chat_reply *reply;  /* tools: the parser the answer goes through (else the phases above) */
    bool reply_failed;       /* the parser ran out of memory */
} answer;

static void show(answer *a, const char *s, size_t n) {
    if (n == 0) return;
    fwrite(s, 1, n, stdout);
    a->shown_anything = true;
    a->last_shown = s[n - 1];
}

static void show_reasoning(answer *a, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (a->skip_newlines && (s[i] == '\n' || s[i] == '\r')) continue;
        a->skip_newlines = false;
        buf_append(&a->reasoning, s + i, 1);
        if (!a->shown_reasoning) {
            a->shown_reasoning = true;
            if (a->c->color) fputs("\x1b[2m", stdout);
        }
        if (a->at_line_start) {
            show(a, REASONING_PREFIX, sizeof REASONING_PREFIX - 1);
            a->at_line_start = false;
        }
        show(a, s + i, 1);
        if (s[i] == '\n') a->at_line_start = true;
    }
}

static void end_reasoning(answer *a) {
    if (!a->shown_reasoning) return;
    if (!a->at_line_start) show(a, "\n", 1);
    if (a->c->color) fputs("\x1b[0m", stdout);
    a->at_line_start = true;
    a->shown_reasoning = false; /* reasoning that comes again opens a new block */
}

static void show_content(answer *a, const char *s, size_t n) {
    size_t i = 0;
    if (a->skip_newlines) {
        while (i < n && (s[i] == '\n' || s[i] == '\r')) i++;
        if (i < n) a->skip_newlines = false;
    }
    buf_append(&a->content, s + i, n - i);
    show(a, s + i, n - i);
}

/* Length of the longest suffix of s[0..n) that is a proper prefix of tag. */
static size_t partial_tag_suffix(const char *s, size_t n, const char *tag) {
    size_t tag_len = strlen(tag);
    for (size_t k = tag_len - 1; k > 0; k--)
        if (k <= n && !memcmp(s + n - k, tag, k)) return k;
    return 0;
}

/* Feeds text through the phases; at_end flushes whatever is held. */
static void answer_feed(answer *a, const char *text, size_t len, bool at_end) {
    buf_append(&a->held, text, len);
    const char *s = a->held.data ? a->held.data : "";
    size_t n = a->held.len, used = 0;
    for (;;) {
        if (a->phase == PHASE_START) {
            size_t ws = used;
            while (ws < n && (s[ws] == ' ' || s[ws] == '\n' || s[ws] == '\r' || s[ws] == '\t')) ws++;
            size_t rest = n - ws, open_len = sizeof THINK_OPEN - 1;
            if (rest >= open_len && !memcmp(s + ws, THINK_OPEN, open_len)) {
                used = ws + open_len;
                a->phase = PHASE_THINKING;
                a->skip_newlines = true;
                continue;
            }
            if (!at_end && (rest == 0 || (rest < open_len && !memcmp(s + ws, THINK_OPEN, rest)))) break; /* undecided */
            a->phase = PHASE_CONTENT;
            continue;
        }
        if (a->phase == PHASE_THINKING) {
            size_t close_len = sizeof THINK_CLOSE - 1;
            const char *found = NULL;
            for (size_t i = used; i + close_len <= n; i++)
                if (!memcmp(s + i, THINK_CLOSE, close_len)) {
                    found = s + i;
                    break;
                }
            if (found) {
                show_reasoning(a, s + used, (size_t)(found - (s + used)));
                end_reasoning(a);
                used = (size_t)(found - s) + close_len;
                a->phase = PHASE_CONTENT;
                a->skip_newlines = true;
                continue;
            }
            size_t hold = at_end ? 0 : partial_tag_suffix(s + used, n - used, THINK_CLOSE);
            show_reasoning(a, s + used, n - used - hold);
            used = n - hold;
            if (at_end) end_reasoning(a);
            break;
        }
        show_content(a, s + used, n - used);
        used = n;
        break;
    }
    /* Keep only the undecided bytes. */
    if (used > 0 && a->held.data) {
        memmove(a->held.data, a->held.data + used, n - used);
        a->held.len = n - used;
        a->held.data[a->held.len] = '\0';
    }
    fflush(stdout);
}

static bool on_reply_part(kite_chat_reply_part part, int32_t call, const char *text, size_t len, void *user);

static bool on_answer_token(int32_t id, const char *text, size_t len, void *user) {
    answer *a = user;
    a->n_tokens++;
    if (a->reply) {
        /* the parser sees every byte, control tokens' text included (gpt-oss's and Mistral's call markup
         * is control tokens), as kite serve feeds it */
        if (kite_chat_reply_feed(a->reply, text, len, on_reply_part, a, NULL, 0)) a->reply_failed = true;
        fflush(stdout);
        return true;
    }
    if (token_is_special(a->c, id)) {
        /* The token's own text ends the chunk (bytes before it complete an earlier character). */
        char piece[256];
        size_t n = 0;
        if (!kite_detokenize(a->c->model, &id, 1, piece, sizeof piece, &n, NULL, 0) && n <= len && n < sizeof piece &&
            !memcmp(text + len - n, piece, n))
            len -= n;
    }
    answer_feed(a, text, len, false);
    return true;
}

/* The parts of a reply the tool-call parser decided: content and reasoning shown as without tools, and
 * each call as "[tool call] NAME(ARGUMENTS)" on a line of its own (nothing with --json: the calls are
 * printed as JSON when the reply ends). */
static bool on_reply_part(kite_chat_reply_part part, int32_t call, const char *text, size_t len, void *user) {
    answer *a = user;
    (void)call;
    switch (part) {
    case KITE_REPLY_REASONING: show_reasoning(a, text, len); break;
    case KITE_REPLY_CONTENT:
        end_reasoning(a);
        show_content(a, text, len);
        break;
    case KITE_REPLY_CALL_START:
        end_reasoning(a);
        if (a->c->json_calls) break;
        if (a->shown_anything && a->last_shown != '\n') show(a, "\n", 1);
        show(a, "[tool call] ", 12);
        show(a, text, len);
        show(a, "(", 1);
        break;
    case KITE_REPLY_CALL_ARGUMENTS:
        if (!a->c->json_calls) show(a, text, len);
        break;
    case KITE_REPLY_CALL_END:
        if (!a->c->json_calls) show(a, ")\n", 2);
        break;
    }
    return true;
}

/* ---- turns ------------------------------------------------------------------------------------ */
static void truncate_conversation(chat *c, size_t n) {
    while (json_array_size(c->messages) > n) json_array_remove(c->messages, json_array_size(c->messages) - 1);
}

/* The reply's message from the parser (OpenAI form); NULL when out of memory. An answer stopped by Ctrl-C,
 * or cut short (--max-tokens, the context) inside a call, keeps its content and reasoning but not its
 * calls. */
static json_t *parsed_reply(answer *a, bool cancelled, bool cut) {
    char err[512], *text = NULL;
    if (kite_chat_reply_finish(a->reply, on_reply_part, a, &text, err, sizeof err)) {
        fprintf(stderr, "kite: error: %s\n", err);
        return NULL;
    }
    json_t *m = json_loads(text, JSON_ALLOW_NUL, NULL); /* a model may write NUL bytes */
    kite_free(text);
    const char *problem = kite_chat_reply_problem(a->reply);
    if (problem && !cut) fprintf(stderr, "kite: warning: the tool-call markup is malformed: %s\n", problem);
    json_t *calls = json_object_get(m, "tool_calls");
    if (calls && (cancelled || (cut && problem))) {
        fprintf(stderr, "kite: the answer ended before it finished; its tool calls are not run\n");
        json_object_del(m, "tool_calls");
        if (json_is_null(json_object_get(m, "content"))) json_object_set_new(m, "content", json_string(""));
    } else if (calls && a->c->json_calls) {
        size_t i;
        json_t *one;
        json_array_foreach(calls, i, one) {
            char *line = kite_cli_json_text(one);
            if (line) show(a, line, strlen(line));
            show(a, "\n", 1);
            free(line);
        }
    }
    return m;
}

/* Answers the conversation as it stands (its last message is the user's line, or tool results) and
 * appends the answer; force_call applies --tool-choice required|NAME. Errors are reported; one before
 * the answer began takes the conversation back to its first `rollback` messages. Returns the calls the
 * answer made (borrowed from the stored message), or NULL. */
static json_t *answer_conversation(chat *c, size_t rollback, bool force_call) {
    char err[1024];
    int32_t *ids = NULL;
    size_t n_ids = 0;
    if (conversation_ids(c, c->messages, true, &ids, &n_ids, err, sizeof err)) {
        fprintf(stderr, "kite: error: %s\n", err);
        truncate_conversation(c, rollback);
        return NULL;
    }
    int32_t n_ctx = kite_session_n_ctx(c->session);
    if (n_ids == 0 || n_ids >= (size_t)n_ctx) {
        if (n_ids == 0) fprintf(stderr, "kite: error: the template rendered an empty prompt\n");
        else
            fprintf(stderr,
                    "kite: error: the conversation is %zu tokens with this message, and the context holds %d: "
                    "/reset to start a new conversation (or run with a larger --ctx)\n",
                    n_ids, n_ctx);
        kite_free(ids);
        truncate_conversation(c, rollback);
        return NULL;
    }

    answer a = {.c = c, .at_line_start = true};
    if (c->parse_calls) {
        /* the parser knows the template's reasoning markup: it reads the rendered prompt's end */
        size_t prompt_len = 0;
        char *prompt = prompt_text(c, &prompt_len);
        kite_chat_reply_params rp = kite_chat_reply_default_params();
        rp.tool_calls = true;
        rp.prompt = prompt;
        rp.prompt_len = prompt ? prompt_len : 0;
        rp.id_seed = c->gen.seed * 0x9E3779B97F4A7C15ull + ++c->n_replies;
        int st = kite_chat_reply_open(&a.reply, c->tmpl, &rp, err, sizeof err);
        kite_free(prompt);
        if (st) {
            fprintf(stderr, "kite: error: %s\n", err);
            kite_free(ids);
            truncate_conversation(c, rollback);
            return NULL;
        }
    } else {
        bool thinking = prompt_opens_thinking(c);
        a.phase = thinking ? PHASE_THINKING : PHASE_START;
        a.skip_newlines = thinking;
    }
    kite_stats before, after;
    kite_session_stats(c->session, &before);
    size_t keep = 0;
    int st = KITE_OK;
    g_interrupted = 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        /* Keep what the session already holds of this rendering; at least one token is prefilled so
         * the model has logits to answer from. */
        int32_t n_held = 0;
        const int32_t *held = kite_session_tokens(c->session, &n_held);
        size_t common = 0;
        while (held && common < (size_t)n_held && common < n_ids && held[common] == ids[common]) common++;
        keep = common < n_ids - 1 ? common : n_ids - 1;
        if ((st = kite_session_truncate(c->session, (int32_t)keep, err, sizeof err))) break;
        g_generating = 1;
        st = kite_prompt(c->session, ids + keep, n_ids - keep, err, sizeof err);
        /* Cancelled without a Ctrl-C during this turn: one that came as the previous answer ended. */
        if (st != KITE_ERR_CANCELLED || g_interrupted) break;
    }
    if (st) {
        g_generating = 0;
        if (st == KITE_ERR_CANCELLED) fprintf(stderr, "kite: stopped before the answer began; the message was not sent\n");
        else fprintf(stderr, "kite: error: %s\n", err);
        kite_free(ids);
        kite_chat_reply_free(a.reply);
        truncate_conversation(c, rollback);
        return NULL;
    }

    kite_gen_params gp = c->gen;
    int32_t room = n_ctx - (int32_t)n_ids;
    gp.max_tokens = c->max_answer_tokens > 0 && c->max_answer_tokens < room ? c->max_answer_tokens : room;
    if (force_call) gp.grammar = c->force_call;
    else if (c->auto_calls) gp.grammar = c->auto_calls;
    st = kite_generate(c->session, &gp, on_answer_token, &a, err, sizeof err);
    g_generating = 0;
    json_t *reply = NULL;
    if (a.reply) reply = parsed_reply(&a, st == KITE_ERR_CANCELLED, st || kite_session_finish_reason(c->session) != KITE_FINISH_STOP);
    else answer_feed(&a, NULL, 0, true);
    if (a.shown_anything && (!a.reply || a.last_shown != '\n')) fputc('\n', stdout);
    fflush(stdout);
    kite_session_stats(c->session, &after);

    c->have_turn = true;
    c->turn_prefilled = (int32_t)(n_ids - keep);
    c->turn_reused = (int32_t)keep;
    c->turn_generated = after.generated_tokens - before.generated_tokens;
    double prefill_ms = after.prefill_ms - before.prefill_ms, decode_ms = after.decode_ms - before.decode_ms;
    int64_t prompt_tokens = after.prompt_tokens - before.prompt_tokens;
    c->turn_prefill_tok_s = prefill_ms > 0 ? (double)prompt_tokens * 1000.0 / prefill_ms : 0;
    /* The first token of an answer comes from the prompt's logits; decode time counts the rest. */
    c->turn_decode_tok_s = decode_ms > 0 && c->turn_generated > 1 ? (double)(c->turn_generated - 1) * 1000.0 / decode_ms : 0;
    c->turn_ttft_ms = after.ttft_ms;

    if (st == KITE_ERR_CANCELLED) {
        fprintf(stderr, "kite: answer stopped; the part written so far stays in the conversation\n");
    } else if (st == KITE_ERR_CONTEXT_FULL || (!st && gp.max_tokens == room && a.n_tokens >= room)) {
        fprintf(stderr, "kite: the context of %d tokens is full: /reset to start a new conversation\n", n_ctx);
    } else if (st) {
        fprintf(stderr, "kite: error: %s\n", err);
    }
    if (a.content.failed || a.reasoning.failed || a.reply_failed || (a.reply && !reply))
        fprintf(stderr, "kite: error: out of memory keeping the answer\n");
    json_t *calls = NULL;
    if (st && st != KITE_ERR_CANCELLED && st != KITE_ERR_CONTEXT_FULL && a.n_tokens == 0) {
        json_decref(reply);
        truncate_conversation(c, rollback); /* nothing was answered */
    } else if (reply) {
        calls = json_object_get(reply, "tool_calls");
        json_array_append_new(c->messages, reply);
    } else if (!a.reply) {
        reply = json_object();
        json_object_set_new(reply, "role", json_string("assistant"));
        json_object_set_new(reply, "content", json_string_lossy(a.content.data, a.content.len));
        /* Templates that know reasoning_content (Qwen3) decide whether past reasoning is shown again;
         * the others never see it. */
        size_t r = a.reasoning.len;
        while (r > 0 && (a.reasoning.data[r - 1] == '\n' || a.reasoning.data[r - 1] == '\r')) r--;
        if (r > 0) json_object_set_new(reply, "reasoning_content", json_string_lossy(a.reasoning.data, r));
        json_array_append_new(c->messages, reply);
    }
    kite_chat_reply_free(a.reply);
    free(a.content.data);
    free(a.reasoning.data);
    free(a.held.data);
    kite_free(ids);
    return calls;
}

static char *read_line(chat *c, const char *prompt);

/* Each call's result is the next line read (taken as it is, commands included); the model then goes on
 * from the results. Returns false at the end of input. */
static bool answer_calls(chat *c, json_t *calls) {
    while (calls) {
        size_t rollback = json_array_size(c->messages), i;
        json_t *call;
        json_t *results = json_array();
        json_array_foreach(calls, i, call) {
            const char *name = json_string_value(json_object_get(json_object_get(call, "function"), "name"));
            char prompt[160];
            snprintf(prompt, sizeof prompt, "tool %.120s> ", name ? name : "?");
            char *line = read_line(c, prompt);
            if (!line) {
                json_decref(results);
                return false;
            }
            json_t *content = json_string(line);
            if (!content) {
                fprintf(stderr, "kite: error: the tool result is not valid UTF-8; it is sent as \"\"\n");
                content = json_string("");
            }
            if (c->interactive && *line) add_history(line);
            free(line);
            json_array_append_new(results, json_pack("{s:s,s:O,s:o}", "role", "tool", "tool_call_id",
                                                     json_object_get(call, "id"), "content", content));
        }
        json_array_extend(c->messages, results);
        json_decref(results);
        calls = answer_conversation(c, rollback, false);
    }
    return true;
}

/* Appends the user's line, answers it (and the tool calls the answer makes), and appends the answers.
 * Errors are reported and leave the conversation as it was before the line. Returns false at the end of
 * input. */
static bool chat_turn(chat *c, const char *line, size_t line_len) {
    json_t *content = json_stringn(line, line_len);
    if (!content) {
        fprintf(stderr, "kite: error: the message is not valid UTF-8; it was not sent\n");
        return true;
    }
    size_t rollback = json_array_size(c->messages);
    json_array_append_new(c->messages, json_pack("{s:s,s:o}", "role", "user", "content", content));
    return answer_calls(c, answer_conversation(c, rollback, c->force_call != NULL));
}

/* ---- commands --------------------------------------------------------------------------------- */
static void new_conversation(chat *c) {
    json_decref(c->messages);
    c->messages = json_array();
    if (c->system) json_array_append_new(c->messages, json_pack("{s:s,s:s}", "role", "system", "content", c->system));
}

static void cmd_stats(const chat *c) {
    printf("context: %d of %d tokens\n", kite_session_n_past(c->session), kite_session_n_ctx(c->session));
    if (!c->have_turn) {
        printf("last turn: none yet\n");
        return;
    }
    printf("last turn: prefilled %d tokens, reused %d from the cache, generated %lld tokens\n", c->turn_prefilled,
           c->turn_reused, (long long)c->turn_generated);
    printf("speed: prefill %.1f tok/s, decode %.1f tok/s, time to first token %.1f ms\n", c->turn_prefill_tok_s,
           c->turn_decode_tok_s, c->turn_ttft_ms);
}

static void cmd_save(const chat *c, const char *path) {
    json_t *root = json_pack("{s:O}", "messages", c->messages);
    if (!root || json_dump_file(root, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17))) {
        fprintf(stderr, "kite: error: cannot write %s: %s\n", path, errno ? strerror(errno) : "out of memory");
    } else {
        printf("saved %zu messages to %s\n", json_array_size(c->messages), path);
    }
    json_decref(root);
}

static void cmd_load(chat *c, const char *path) {
    char err[1024];
    json_t *messages = NULL;
    if (kite_cli_load_conversation(path, &messages, NULL, err, sizeof err)) {
        fprintf(stderr, "kite: error: %s\n", err);
        return;
    }
    /* The template must accept it, and it must leave room to answer. */
    int32_t *ids = NULL;
    size_t n_ids = 0;
    if (conversation_ids(c, messages, true, &ids, &n_ids, err, sizeof err)) {
        fprintf(stderr, "kite: error: %s: %s\n", path, err);
        json_decref(messages);
        return;
    }
    kite_free(ids);
    if (n_ids >= (size_t)kite_session_n_ctx(c->session)) {
        fprintf(stderr, "kite: error: %s: the conversation is %zu tokens, and the context holds %d\n", path, n_ids,
                kite_session_n_ctx(c->session));
        json_decref(messages);
        return;
    }
    json_decref(c->messages);
    c->messages = messages;
    printf("loaded %zu messages from %s\n", json_array_size(messages), path);
}

/* Runs a /command; returns false when the chat should end. */
static bool run_command(chat *c, char *line) {
    char *cmd = line + 1, *arg = cmd;
    while (*arg && *arg != ' ' && *arg != '\t') arg++;
    if (*arg) *arg++ = '\0';
    while (*arg == ' ' || *arg == '\t') arg++;
    size_t arg_len = strlen(arg);
    while (arg_len > 0 && (arg[arg_len - 1] == ' ' || arg[arg_len - 1] == '\t')) arg[--arg_len] = '\0';
    bool wants_file = !strcmp(cmd, "save") || !strcmp(cmd, "load");
    if (wants_file && !*arg) {
        fprintf(stderr, "kite: error: /%s needs a file name: /%s FILE\n", cmd, cmd);
    } else if (!wants_file && *arg && strcmp(cmd, "help")) {
        fprintf(stderr, "kite: error: /%s takes no argument (type /help)\n", cmd);
    } else if (!strcmp(cmd, "exit") || !strcmp(cmd, "quit")) {
        return false;
    } else if (!strcmp(cmd, "reset")) {
        new_conversation(c);
        kite_session_reset(c->session);
        c->have_turn = false;
        printf("new conversation\n");
    } else if (!strcmp(cmd, "stats")) {
        cmd_stats(c);
    } else if (!strcmp(cmd, "save")) {
        cmd_save(c, arg);
    } else if (!strcmp(cmd, "load")) {
        cmd_load(c, arg);
    } else if (!strcmp(cmd, "help")) {
        fputs(CHAT_COMMANDS, stdout);
    } else {
        fprintf(stderr, "kite: error: unknown command /%s (type /help for the commands)\n", cmd);
    }
    fflush(stdout);
    return true;
}

/* ---- input ------------------------------------------------------------------------------------ */
/* Ctrl-C at the prompt: libedit's readline does not say whether a line was being typed, so the key
 * reader answers an interrupted read with keys of its own: end of line, then (quoted) a marker
 * character, then Enter. readline returns the typed text followed by the marker: the marker alone is
 * an empty prompt (the chat ends), anything before it is a line to drop. */
enum { INTERRUPT_MARKER = 0x1f };
static const int INTERRUPT_KEYS[] = {0x05 /* ^E: to the end */, 0x16 /* ^V: quote the next key */, INTERRUPT_MARKER, '\n'};
static size_t g_pending_keys; /* keys of INTERRUPT_KEYS still to deliver */

/* Waits until a key can be read (1) or a Ctrl-C came (0); -1 on an error. SIGINT stays blocked from
 * the flag test until ppoll waits, so a Ctrl-C is never lost between them, whether it came while
 * waiting or while libedit was busy. */
static int wait_for_key(void) {
    sigset_t sigint, old;
    sigemptyset(&sigint);
    sigaddset(&sigint, SIGINT);
    sigprocmask(SIG_BLOCK, &sigint, &old);
    int result = 0;
    while (!g_interrupted) {
        struct pollfd p = {.fd = STDIN_FILENO, .events = POLLIN};
        int n = ppoll(&p, 1, NULL, &old);
        if (n > 0) {
            result = 1;
            break;
        }
        if (n < 0 && errno != EINTR) {
            result = -1;
            break;
        }
    }
    sigprocmask(SIG_SETMASK, &old, NULL);
    return result;
}

/* libedit's key reader (rl_getc_function): one character, as a code point (UTF-8 decoded here, since
 * libedit takes the returned value as a wide character); -1 at the end of input. */
static int read_key(FILE *unused) {
    (void)unused;
    size_t n_keys = sizeof INTERRUPT_KEYS / sizeof *INTERRUPT_KEYS;
    if (g_pending_keys) return INTERRUPT_KEYS[n_keys - g_pending_keys--];
    unsigned char bytes[4];
    size_t have = 0, need = 1;
    while (have < need) {
        int ready = have == 0 ? wait_for_key() : 1;
        if (ready < 0) return -1;
        if (ready == 0) {
            g_interrupted = 0;
            g_pending_keys = n_keys - 1;
            return INTERRUPT_KEYS[0];
        }
        ssize_t got = read(STDIN_FILENO, bytes + have, 1);
        if (got == 1) {
            if (have == 0) {
                unsigned char b = bytes[0];
                need = b < 0x80 ? 1 : (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 1;
            } else if ((bytes[have] & 0xC0) != 0x80) {
                return 0xFFFD; /* a broken sequence: the replacement character */
            }
            have++;
            continue;
        }
        if (got == 0 || errno != EINTR) return -1;
    }
    if (need == 1) return bytes[0] < 0x80 ? bytes[0] : 0xFFFD;
    uint32_t cp = bytes[0] & (0x7F >> need);
    for (size_t i = 1; i < need; i++) cp = cp << 6 | (bytes[i] & 0x3F);
    return (int)cp;
}

/* The next line (without its newline), malloc'd; NULL at the end of input, or on Ctrl-C at an empty
 * prompt. */
static char *read_line(chat *c, const char *prompt) {
    for (;;) {
        g_interrupted = 0;
        if (c->interactive) {
            char *line = readline(prompt);
            if (!line) return NULL;
            size_t len = strlen(line);
            if (len == 0 || line[len - 1] != INTERRUPT_MARKER) return line;
            bool empty = len == 1;
            free(line);
            if (empty) return NULL; /* Ctrl-C at an empty prompt */
            continue;              /* Ctrl-C on a typed line drops it */
        }
        char *line = NULL;
        size_t cap = 0;
        ssize_t n = getline(&line, &cap, stdin);
        if (n < 0) {
            free(line);
            return NULL;
        }
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = '\0';
        return line;
    }
}

/* ---- setup ------------------------------------------------------------------------------------ */
static int open_chat(chat *c, const chat_options *o) {
    char err[1024];
    kite_model_params mp = kite_model_default_params();
    mp.tokenizer_path = o->tokenizer_path;
    mp.n_threads = o->threads;
    if (kite_model_open(&c->model, o->model_path, &mp, err, sizeof err)) {
        fprintf(stderr, "kite: error: %s\n", err);
        return 1;
    }
    kite_model_info info;
    kite_model_get_info(c->model, &info);
    kite_cli_warn_limits("kite", o->threads, o->ctx, info.n_ctx_train);
    c->n_vocab = info.n_vocab;
    c->token_kind = calloc((size_t)(info.n_vocab > 0 ? info.n_vocab : 1), 1);
    if (!c->token_kind) {
        fprintf(stderr, "kite: error: out of memory\n");
        return 1;
    }
    if (kite_cli_open_template(&c->tmpl, c->model, o->template_file, o->template_name, err, sizeof err)) {
        fprintf(stderr, "kite: error: %s%s\n", err,
                o->template_file || info.n_draft_target_layers > 0 || strstr(err, "--chat-template") ? ""
                                                                                                 : " (give a template with --chat-template FILE)");
        return 1;
    }

    json_t *kwargs = NULL;
    if (o->kwargs_text) {
        json_error_t je;
        kwargs = json_loads(o->kwargs_text, JSON_REJECT_DUPLICATES, &je);
        if (!json_is_object(kwargs)) {
            fprintf(stderr, "kite: error: --kwargs must be a JSON object%s%s (see kite chat --help)\n",
                    kwargs ? "" : ": ", kwargs ? "" : je.text);
            json_decref(kwargs);
            return 2;
        }
    }
    if (o->no_think) {
        if (!kwargs) kwargs = json_object();
        json_object_set_new(kwargs, "enable_thinking", json_false());
    }
    if (kwargs) {
        c->kwargs_text = kite_cli_json_text(kwargs);
        json_decref(kwargs);
    }

    if (o->tools_file) {
        json_t *tools = kite_cli_load_tools(o->tools_file, err, sizeof err);
        if (!tools) {
            fprintf(stderr, "kite: error: %s\n", err);
            return 1;
        }
        c->tools_text = kite_cli_json_text(tools);
        json_decref(tools);
        if (!c->tools_text) {
            fprintf(stderr, "kite: error: out of memory\n");
            return 1;
        }
        const char *choice = o->tool_choice ? o->tool_choice : "auto";
        c->parse_calls = strcmp(choice, "none") != 0;
        c->json_calls = o->json;
        if (strcmp(choice, "none") && strcmp(choice, "auto")) {
            const char *name = strcmp(choice, "required") ? choice : NULL;
            if (kite_grammar_open_tool_call(&c->force_call, c->model, c->tmpl, c->tools_text, name, err, sizeof err)) {
                fprintf(stderr, "kite: error: --tool-choice %s: %s\n", choice, err);
                return 1;
            }
        } else if (!strcmp(choice, "auto")) {
            /* a template without a text trigger (harmony) answers unconstrained: its calls still parse */
            int st = kite_grammar_open_tool_auto(&c->auto_calls, c->model, c->tmpl, c->tools_text, true, err, sizeof err);
            if (st == KITE_ERR_NOMEM) {
                fprintf(stderr, "kite: error: --tools: %s\n", err);
                return 1;
            }
            if (st && st != KITE_ERR_UNSUPPORTED) fprintf(stderr, "kite: warning: --tools: calls are not held to their schemas: %s\n", err);
        }
    }

    kite_session_params sp = kite_session_default_params();
    sp.n_ctx = o->ctx;
    sp.n_threads = o->threads;
    if (o->cache_type) kite_kv_type_from_name(o->cache_type, &sp.kv_type);
    if (kite_session_open(&c->session, c->model, &sp, err, sizeof err)) {
        fprintf(stderr, "kite: error: %s\n", err);
        return 1;
    }
    if (o->draft && strcmp(o->draft, "none")) {
        kite_spec_params spec = kite_spec_default_params();
        if (!strcmp(o->draft, "ngram")) {
            spec.drafter = KITE_DRAFT_NGRAM;
        } else if (!strcmp(o->draft, "mtp")) {
            spec.drafter = KITE_DRAFT_MTP; /* the model's own next-n block */
        } else {
            kite_model_params dp = kite_model_default_params();
            dp.n_threads = o->threads;
            int st = kite_model_open(&c->draft_model, o->draft, &dp, err, sizeof err);
            if (st == KITE_ERR_TOKENIZER && o->tokenizer_path) {
                dp.tokenizer_path = o->tokenizer_path;
                st = kite_model_open(&c->draft_model, o->draft, &dp, err, sizeof err);
            }
            if (st) {
                fprintf(stderr, "kite: error: draft model: %s\n", err);
                return 1;
            }
            spec.drafter = KITE_DRAFT_MODEL;
            spec.draft_model = c->draft_model;
        }
        if (kite_session_set_spec(c->session, &spec, err, sizeof err)) {
            fprintf(stderr, "kite: error: %s\n", err);
            return 1;
        }
    }

    c->gen = kite_model_gen_params(c->model);
    if (o->have_temperature) c->gen.temperature = o->temperature;
    if (o->have_top_k) c->gen.top_k = o->top_k;
    if (o->have_top_p) c->gen.top_p = o->top_p;
    if (o->have_min_p) c->gen.min_p = o->min_p;
    if (o->have_repeat_penalty) c->gen.repeat_penalty = o->repeat_penalty;
    if (o->have_seed) c->gen.seed = o->seed;
    c->gen.ignore_eos = o->ignore_eos;
    c->gen.skip_special = true; /* text for people: no control-token text, a spelled-out end marker ends the answer */
    c->max_answer_tokens = o->max_tokens;
    c->system = o->system;
    if (c->system) { /* checked once: every /reset adds it again */
        json_t *probe = json_string(c->system);
        if (!probe) {
            fprintf(stderr, "kite: error: --system is not valid UTF-8\n");
            return 2;
        }
        json_decref(probe);
    }
    new_conversation(c);
    return 0;
}

static void close_chat(chat *c) {
    kite_session_free(c->session);
    kite_model_free(c->draft_model);
    kite_chat_template_free(c->tmpl);
    kite_model_free(c->model);
    json_decref(c->messages);
    free(c->kwargs_text);
    free(c->tools_text);
    kite_grammar_free(c->force_call);
    kite_grammar_free(c->auto_calls);
    free(c->token_kind);
}

int kite_cmd_chat(int argc, char **argv);
int kite_cmd_chat(int argc, char **argv) {
    chat_options o = {0};
    int rc = parse_options(argc, argv, &o);
    if (rc == -1) {
        fputs(CHAT_USAGE, stdout);
        return 0;
    }
    if (rc) return rc;
    chat c = {0};
    c.interactive = isatty(STDIN_FILENO);
    c.color = isatty(STDOUT_FILENO);
    if ((rc = open_chat(&c, &o))) {
        close_chat(&c);
        return rc;
    }

    g_session = c.session;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0; /* no SA_RESTART: a Ctrl-C at the prompt ends the read */
    sigaction(SIGINT, &sa, NULL);
    if (c.interactive) {
        /* Typed text is UTF-8 whatever the environment's locale says: libedit needs a UTF-8 LC_CTYPE to
         * hand back what read_key decodes. */
        if (!setlocale(LC_CTYPE, "") || strcmp(nl_langinfo(CODESET), "UTF-8")) setlocale(LC_CTYPE, "C.UTF-8");
        rl_catch_signals = 0; /* ours: libedit would re-raise Ctrl-C to the whole process group */
        rl_getc_function = read_key;
        using_history();
        fprintf(stderr, "kite chat: %s, context %d tokens. /help for commands, Ctrl-D to leave.\n", o.model_path,
                kite_session_n_ctx(c.session));
    }

    for (;;) {
        char *line = read_line(&c, "> ");
        if (!line) break;
        size_t len = strlen(line);
        bool go_on = true;
        if (line[0] == '/' && line[1] != '/') {
            if (c.interactive && len) add_history(line);
            go_on = run_command(&c, line);
        } else if (len > 0) {
            if (c.interactive) add_history(line);
            const char *text = line[0] == '/' ? line + 1 : line; /* "//x" sends "/x" */
            go_on = chat_turn(&c, text, strlen(text));
        }
        free(line);
        if (!go_on) break;
    }
    if (c.interactive) fputc('\n', stdout);
    signal(SIGINT, SIG_DFL);
    g_session = NULL;
    close_chat(&c);
    return 0;
}
