/* kite run --router CONFIG and kite chat --router CONFIG: one prompt, or a conversation, answered where
 * the router's rules say (the config's local model or a remote), through kite_server_complete on an
 * in-process server (no HTTP). Prints the answer as it comes, and on stderr where it ran and why. */
#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chat_common.h"
#include "kite.h"
#include "cli_util.h"

static int usage_error(const char *verb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int usage_error(const char *verb, const char *fmt, ...) {
    char prefix[64], help[96];
    snprintf(prefix, sizeof prefix, "kite %s", verb);
    snprintf(help, sizeof help, "kite %s --router x --help", verb);
    va_list ap;
    va_start(ap, fmt);
    int rc = kite_cli_usage_verror(prefix, help, fmt, ap);
    va_end(ap);
    return rc;
}

int kite_cmd_routed(int argc, char **argv, bool chat_verb);

static const char ROUTED_USAGE[] =
    "usage: kite run --router CONFIG.json --prompt TEXT [options]\n"
    "       kite chat --router CONFIG.json [options]\n"
    "\n"
    "Answers where the router's rules say (README \"Routing\"): the config's local model or one of its\n"
    "OpenAI-compatible remotes, with fallbacks when a side fails; stderr says which backend answered and why.\n"
    "\n"
    "  --prompt, -p TEXT       the prompt (kite run); with --chat it is the user's message\n"
    "  --chat                  kite run: send the prompt as a chat message (the template's turn)\n"
    "  --system TEXT           a system message first (chat)\n"
    "  --max-tokens, -n N      tokens to generate (default 256)\n"
    "  --temperature, --temp T sampling temperature (default: the backend's)\n"
    "  --seed, -s N            sampling seed\n"
    "  --route local|remote|NAME  ask for a backend (when the config allows explicit choice)\n"
    "  --segment TAG           the request's segment (as the segment header would give it)\n"
    "  --user NAME             the request's user (mapped to segments by the config)\n"
    "  --max-latency-ms N      the request's latency budget\n"
    "  --threads, -t N         threads for the local model\n"
    "  --chat-template FILE    a chat template for the local model\n"
    "  --json                  print the result as one JSON object (text, finish_reason, usage, route)\n"
    "  --verbose, -v           log routing events to stderr\n";

static bool g_verbose;
static kite_server *volatile g_routed_server;

static void log_to_stderr(kite_log_level level, const char *message, void *user_data) {
    (void)user_data;
    if (level < KITE_LOG_WARN && !g_verbose) return;
    static const char *const names[] = {"debug", "info", "warning", "error"};
    fprintf(stderr, "kite: %s: %s\n", names[level <= KITE_LOG_ERROR ? level : KITE_LOG_ERROR], message);
}

static bool print_text(const char *text, size_t len, void *user_data) {
    bool *quiet = user_data;
    if (*quiet) return true;
    if (fwrite(text, 1, len, stdout) != len) return false;
    fflush(stdout);
    return true;
}

/* "answered by NAME (REASON)" from the result's route field. */
static void say_where(const char *verb, const char *result_json) {
    json_t *root = json_loads(result_json, 0, NULL);
    json_t *route = json_object_get(root, "route");
    const char *backend = json_string_value(json_object_get(route, "backend"));
    const char *reason = json_string_value(json_object_get(route, "reason"));
    const char *continued = json_string_value(json_object_get(route, "continued_by"));
    fprintf(stderr, "kite %s: answered by %s (%s)%s%s, finish %s\n", verb, backend ? backend : "?", reason ? reason : "",
            continued ? "; continued by " : "", continued ? continued : "",
            json_string_value(json_object_get(root, "finish_reason")) ? json_string_value(json_object_get(root, "finish_reason")) : "?");
    json_decref(root);
}

static void on_signal(int sig) {
    (void)sig;
    kite_server *s = g_routed_server;
    if (s) kite_server_stop(s);
    signal(SIGINT, SIG_DFL); /* a second ^C ends the process */
}

int kite_cmd_routed(int argc, char **argv, bool chat_verb) {
    const char *verb = chat_verb ? "chat" : "run";
    const char *router_path = NULL, *prompt = NULL, *system = NULL, *route = NULL, *segment = NULL, *user = NULL;
    const char *template_path = NULL;
    long max_tokens = 256, seed = -1, threads = 0, max_latency = 0;
    double temperature = -1;
    bool as_chat = chat_verb, json_out = false;
    for (int i = 2; i < argc; i++) {
        const char *opt = argv[i];
        if (!strcmp(opt, "--help") || !strcmp(opt, "-h")) {
            fputs(ROUTED_USAGE, stdout);
            return 0;
        }
        if (!strcmp(opt, "--verbose") || !strcmp(opt, "-v")) { g_verbose = true; continue; }
        if (!strcmp(opt, "--chat")) { as_chat = true; continue; }
        if (!strcmp(opt, "--json")) { json_out = true; continue; }
        if (i + 1 >= argc) return usage_error(verb, "option %s needs a value", opt);
        const char *val = argv[++i];
        if (!strcmp(opt, "--router")) router_path = val;
        else if (!strcmp(opt, "--prompt") || !strcmp(opt, "-p")) prompt = val;
        else if (!strcmp(opt, "--system")) system = val;
        else if (!strcmp(opt, "--route")) route = val;
        else if (!strcmp(opt, "--segment")) segment = val;
        else if (!strcmp(opt, "--user")) user = val;
        else if (!strcmp(opt, "--chat-template")) template_path = val;
        else if (!strcmp(opt, "--max-tokens") || !strcmp(opt, "-n")) {
            if (!kite_cli_parse_long(val, 1, 1 << 24, &max_tokens)) return usage_error(verb, "--max-tokens expects a count >= 1, got '%s'", val);
        } else if (!strcmp(opt, "--seed") || !strcmp(opt, "-s")) {
            if (!kite_cli_parse_long(val, 0, 0x7fffffffL, &seed)) return usage_error(verb, "--seed expects 0..2^31-1, got '%s'", val);
        } else if (!strcmp(opt, "--threads") || !strcmp(opt, "-t")) {
            if (!kite_cli_parse_long(val, 1, 1024, &threads)) return usage_error(verb, "--threads expects 1..1024, got '%s'", val);
        } else if (!strcmp(opt, "--max-latency-ms")) {
            if (!kite_cli_parse_long(val, 1, 1L << 30, &max_latency)) return usage_error(verb, "--max-latency-ms expects milliseconds, got '%s'", val);
        } else if (!strcmp(opt, "--temperature") || !strcmp(opt, "--temp")) {
            char *end;
            temperature = strtod(val, &end);
            if (end == val || *end || temperature < 0 || temperature > 2) return usage_error(verb, "--temperature expects 0..2, got '%s'", val);
        } else {
            return usage_error(verb, "unknown option %s with --router", opt);
        }
    }
    if (!router_path) return usage_error(verb, "%s", "--router CONFIG is required here");
    if (!chat_verb && !prompt) return usage_error(verb, "%s", "kite run --router needs --prompt TEXT");
    kite_set_log_callback(log_to_stderr, NULL);

    char err[512];
    kite_router_params rp = kite_router_default_params();
    rp.n_threads = (int32_t)threads;
    kite_router *router = NULL;
    if (kite_router_open(&router, router_path, &rp, err, sizeof err)) {
        fprintf(stderr, "kite %s: error: --router %s: %s\n", verb, router_path, err);
        return 1;
    }
    kite_model *model = kite_router_local_model(router);
    if (!model) {
        fprintf(stderr, "kite %s: error: --router %s: the config has no local backend, which this needs\n", verb, router_path);
        kite_router_free(router);
        return 1;
    }
    char *template_text = NULL;
    if (template_path) {
        size_t n = 0;
        template_text = kite_cli_read_file(template_path, &n, err, sizeof err);
        if (!template_text) {
            fprintf(stderr, "kite %s: error: --chat-template: %s\n", verb, err);
            kite_router_free(router);
            return 1;
        }
    }
    kite_server_params sp = kite_server_default_params();
    sp.router = router;
    sp.no_listen = true;
    sp.n_parallel = 1;
    sp.n_threads = (int32_t)threads;
    sp.chat_template = template_text;
    kite_server *server = NULL;
    int rc = kite_server_open(&server, model, &sp, err, sizeof err);
    free(template_text);
    if (rc) {
        fprintf(stderr, "kite %s: error: %s\n", verb, err);
        kite_router_free(router);
        return 1;
    }
    g_routed_server = server;
    signal(SIGINT, on_signal);
    signal(SIGPIPE, SIG_IGN);

    json_t *messages = json_array();
    if (system) {
        json_t *m = json_object();
        json_object_set_new(m, "role", json_string("system"));
        json_object_set_new(m, "content", json_string(system));
        json_array_append_new(messages, m);
    }
    int status = 0;
    char line[16384];
    for (int turn = 0;; turn++) {
        const char *text = prompt;
        if (chat_verb && (turn > 0 || !prompt)) {
            if (isatty(0)) fputs("> ", stderr);
            if (!fgets(line, sizeof line, stdin)) break;
            size_t n = strlen(line);
            while (n && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
            if (!n) continue;
            if (!strcmp(line, "/exit") || !strcmp(line, "/quit")) break;
            text = line;
        } else if (turn > 0) {
            break;
        }
        json_t *body = json_object();
        if (as_chat) {
            json_t *m = json_object();
            json_object_set_new(m, "role", json_string("user"));
            json_object_set_new(m, "content", json_string(text));
            json_array_append_new(messages, m);
            json_object_set(body, "messages", messages);
        } else {
            json_object_set_new(body, "prompt", json_string(text));
        }
        json_object_set_new(body, "max_tokens", json_integer(max_tokens));
        if (temperature >= 0) json_object_set_new(body, "temperature", json_real(temperature));
        if (seed >= 0) json_object_set_new(body, "seed", json_integer(seed));
        if (route) json_object_set_new(body, "route", json_string(route));
        if (user) json_object_set_new(body, "user", json_string(user));
        if (max_latency) json_object_set_new(body, "max_latency_ms", json_integer(max_latency));
        char *body_text = json_dumps(body, JSON_COMPACT);
        json_decref(body);
        char *result = NULL;
        bool quiet = json_out;
        rc = body_text ? kite_server_complete(server, as_chat, body_text, strlen(body_text), segment, print_text, &quiet, &result,
                                              err, sizeof err)
                       : KITE_ERR_NOMEM;
        free(body_text);
        if (rc) {
            fprintf(stderr, "kite %s: error: %s\n", verb, rc == KITE_ERR_NOMEM ? "out of memory" : err);
            status = 1;
            break;
        }
        if (json_out) printf("%s\n", result);
        else fputc('\n', stdout);
        if (fflush(stdout) != 0) {
            fprintf(stderr, "kite %s: error: writing the answer: %s\n", verb, strerror(errno));
            kite_free(result);
            status = 1;
            break;
        }
        say_where(verb, result);
        if (as_chat) {
            json_t *res = json_loads(result, 0, NULL);
            json_t *m = json_object();
            json_object_set_new(m, "role", json_string("assistant"));
            json_t *answer = json_object_get(res, "text");
            json_object_set_new(m, "content", answer ? json_incref(answer) : json_string(""));
            json_array_append_new(messages, m);
            json_decref(res);
        }
        kite_free(result);
        if (!chat_verb) break;
    }
    json_decref(messages);
    g_routed_server = NULL;
    kite_server_stop(server);
    kite_server_wait(server, err, sizeof err);
    kite_server_free(server);
    kite_router_free(router);
    return status;
}
