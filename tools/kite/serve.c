/* kite serve: the OpenAI-compatible HTTP server (the library's kite_server) on the command line. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat_common.h"
#include "default_model.h"
#include "kite.h"
#include "cli_util.h"

#define usage_error(...) kite_cli_usage_error("kite serve", "kite serve --help", __VA_ARGS__)

int kite_cmd_serve(int argc, char **argv);

static const char SERVE_USAGE[] =
    "usage: kite serve --model PATH [options]\n"
    "       kite serve --router CONFIG.json [options]\n"
    "\n"
    "Serves the model over an OpenAI-compatible HTTP API: POST /v1/chat/completions and /v1/completions\n"
    "(stream and non-stream), GET /v1/models, /health, /metrics (Prometheus text). Requests are decoded\n"
    "together (continuous batching) and each gets exactly the tokens it would get alone.\n"
    "\n"
    "  --model, -m PATH        GGUF file, llama2.c .bin, or Hugging Face folder\n"
    "  --tokenizer PATH        tokenizer for a llama2.c checkpoint\n"
    "  --router CONFIG.json    route each request to the config's local model or its OpenAI-compatible\n"
    "                          remotes by its rules, with fallbacks (README \"Routing\"); the answer's\n"
    "                          x-kite-backend / x-kite-route-reason headers and \"route\" field say where\n"
    "  --host ADDR             address to bind (default 127.0.0.1; 0.0.0.0 exposes the server to the network)\n"
    "  --port N                port (default 8080; 0 lets the system choose one, printed at start)\n"
    "  --api-key KEY           require 'Authorization: Bearer KEY' (all endpoints but /health)\n"
    "  -np, --parallel N       requests decoded together (sessions; default 4)\n"
    "  -c, --ctx N             context of each request in tokens (default: the model's, at most 4096)\n"
    "  -t, --threads N         worker threads (default: all cores)\n"
    "  --cache-type T          KV cache precision: f16 (default), f32, q8_0, q4_0\n"
    "  --draft PATH|ngram|mtp  speculative decoding for every request (a draft model sharing the\n"
    "                          vocabulary, n-gram matches, or the model's next-n block); the output is unchanged\n"
    "  --spec-budget N         drafted tokens per verification pass, 1..32 (default: adaptive)\n"
    "  --spec-p-min P          a DSpark drafter drafts nothing below a node of confidence under P (0..1, default 0: off)\n"
    "  --chat-template FILE    a Jinja chat template overriding the model's\n"
    "  --model-name NAME       the model id clients send and /v1/models lists (default: the file name)\n"
    "  --queue N               requests that may wait for a slot before 429 (default 64)\n"
    "  --timeout-ms N          per request, waiting included (default 600000)\n"
    "  --verbose, -v           log requests and server events to stderr\n"
    "\n"
    "Request fields beyond OpenAI's: \"parse_special\": false (completions) tokenizes special-token text in\n"
    "the prompt as plain text; \"ignore_eos\": true keeps generating past end tokens; \"skip_special_tokens\":\n"
    "false keeps control tokens' text and a spelled-out end marker in the answer; \"top_k\", \"min_p\",\n"
    "\"repetition_penalty\". Sampling fields a request leaves out take the model's generation_config.\n"
    "\n"
    "  curl http://127.0.0.1:8080/v1/chat/completions -H 'Content-Type: application/json' \\\n"
    "       -d '{\"model\":\"NAME\",\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}]}'\n"
    "\n"
    "SIGINT or SIGTERM stops the server: requests in flight finish (or are cancelled after 10 s), exit 0.\n";

static kite_server *volatile g_server;

static void on_signal(int sig) {
    (void)sig;
    kite_server *s = g_server;
    if (s) kite_server_stop(s); /* async-signal-safe */
}

static bool g_verbose;

static void log_to_stderr(kite_log_level level, const char *message, void *user_data) {
    (void)user_data;
    if (level < KITE_LOG_WARN && !g_verbose) return;
    static const char *const names[] = {"debug", "info", "warning", "error"};
    fprintf(stderr, "kite serve: %s: %s\n", names[level <= KITE_LOG_ERROR ? level : KITE_LOG_ERROR], message);
}

/* The file's name without its folder and extension: the default model id. */
static void default_model_name(const char *path, char *out, size_t size) {
    size_t len = strlen(path);
    while (len > 1 && path[len - 1] == '/') len--;
    const char *base = path;
    for (size_t i = 0; i < len; i++)
        if (path[i] == '/' && i + 1 < len) base = path + i + 1;
    size_t n = (size_t)(path + len - base);
    const char *dot = NULL;
    for (size_t i = 0; i < n; i++)
        if (base[i] == '.') dot = base + i;
    if (dot && dot != base) n = (size_t)(dot - base);
    snprintf(out, size, "%.*s", (int)n, base);
}

int kite_cmd_serve(int argc, char **argv) {
    const char *model_path = NULL, *tokenizer = NULL, *draft = NULL, *template_path = NULL, *cache_type = NULL;
    const char *router_path = NULL;
    kite_server_params sp = kite_server_default_params();
    int32_t threads = 0, spec_budget = 0, port = 8080;
    double spec_p_min = 0.0;
    for (int i = 2; i < argc; i++) {
        const char *opt = argv[i];
        if (!strcmp(opt, "--help") || !strcmp(opt, "-h")) {
            fputs(SERVE_USAGE, stdout);
            return 0;
        }
        /* llama-server's short flags, where they clash with nothing of kite's. */
        static const char *const short_flags[][2] = {{"-t", "--threads"}, {"-c", "--ctx"}, {"-np", "--parallel"}};
        for (size_t k = 0; k < sizeof short_flags / sizeof *short_flags; k++)
            if (!strcmp(opt, short_flags[k][0])) opt = short_flags[k][1];
        if (!strcmp(opt, "--verbose") || !strcmp(opt, "-v")) {
            g_verbose = true;
            continue;
        }
        if (opt[0] != '-') return usage_error("unexpected argument '%s'", opt);
        if (i + 1 >= argc) return usage_error("option %s needs a value", opt);
        const char *val = argv[++i];
        if (!strcmp(opt, "--model") || !strcmp(opt, "-m")) model_path = val;
        else if (!strcmp(opt, "--tokenizer")) tokenizer = val;
        else if (!strcmp(opt, "--router")) router_path = val;
        else if (!strcmp(opt, "--host")) sp.host = val;
        else if (!strcmp(opt, "--api-key")) sp.api_key = val;
        else if (!strcmp(opt, "--draft")) draft = val;
        else if (!strcmp(opt, "--chat-template")) template_path = val;
        else if (!strcmp(opt, "--model-name")) sp.model_name = val;
        else if (!strcmp(opt, "--cache-type")) cache_type = val;
        else if (!strcmp(opt, "--port")) {
            if (!kite_cli_parse_i32(val, 0, 65535, &port)) return usage_error("--port expects 0..65535, got '%s'", val);
        } else if (!strcmp(opt, "--parallel")) {
            if (!kite_cli_parse_i32(val, 1, 256, &sp.n_parallel)) return usage_error("--parallel expects 1..256, got '%s'", val);
        } else if (!strcmp(opt, "--ctx")) {
            if (!kite_cli_parse_i32(val, 2, 1 << 22, &sp.n_ctx)) return usage_error("--ctx expects a number of tokens >= 2, got '%s'", val);
        } else if (!strcmp(opt, "--threads")) {
            if (!kite_cli_parse_i32(val, 1, 1024, &threads)) return usage_error("--threads expects 1..1024, got '%s'", val);
        } else if (!strcmp(opt, "--spec-budget")) {
            if (!kite_cli_parse_i32(val, 1, KITE_MAX_DRAFT, &spec_budget)) return usage_error("--spec-budget expects 1..32, got '%s'", val);
        } else if (!strcmp(opt, "--spec-p-min")) {
            if (!kite_cli_parse_double(val, 0.0, 1.0, &spec_p_min)) return usage_error("--spec-p-min expects a number in [0, 1], got '%s'", val);
        } else if (!strcmp(opt, "--queue")) {
            if (!kite_cli_parse_i32(val, 1, 1 << 20, &sp.queue_size)) return usage_error("--queue expects a count >= 1, got '%s'", val);
        } else if (!strcmp(opt, "--timeout-ms")) {
            if (!kite_cli_parse_i32(val, 1, INT32_MAX, &sp.timeout_ms)) return usage_error("--timeout-ms expects milliseconds >= 1, got '%s'", val);
        } else {
            return usage_error("unknown option %s", opt);
        }
    }
    if (model_path && router_path) return usage_error("%s", "--router takes the model from its config's local backend: drop --model");
    if (!router_path) {
        int usage_rc = kite_cli_model_or_default(&model_path, "kite serve", false);
        if (usage_rc) return usage_rc;
    }
    sp.kv_type = KITE_KV_F16;
    if (cache_type && !kite_kv_type_from_name(cache_type, &sp.kv_type))
        return usage_error("--cache-type expects f16, f32, q8_0 or q4_0, got '%s'", cache_type);
    sp.n_threads = threads;
    sp.port = port == 0 ? -1 : port; /* the library's 0 means its default; --port 0 asks the system */
    kite_set_log_callback(log_to_stderr, NULL);

    char err[512];
    char *template_text = NULL;
    if (template_path) {
        size_t template_len = 0;
        template_text = kite_cli_read_file(template_path, &template_len, err, sizeof err);
        if (!template_text) {
            fprintf(stderr, "kite serve: error: --chat-template: %s\n", err);
            return 1;
        }
        sp.chat_template = template_text;
    }
    kite_model_params mp = kite_model_default_params();
    mp.tokenizer_path = tokenizer;
    mp.n_threads = threads;
    kite_model *model = NULL, *draft_model = NULL;
    kite_router *router = NULL;
    if (router_path) {
        kite_router_params rp = kite_router_default_params();
        rp.n_threads = threads;
        if (kite_router_open(&router, router_path, &rp, err, sizeof err)) {
            fprintf(stderr, "kite serve: error: --router %s: %s\n", router_path, err);
            free(template_text);
            return 1;
        }
        model = kite_router_local_model(router);
        if (!model) {
            fprintf(stderr, "kite serve: error: --router %s: the config has no local backend, which kite serve needs\n", router_path);
            kite_router_free(router);
            free(template_text);
            return 1;
        }
        sp.router = router;
        model_path = router_path;
    } else if (kite_model_open(&model, model_path, &mp, err, sizeof err)) {
        fprintf(stderr, "kite serve: error: %s\n", err);
        free(template_text);
        return 1;
    }
    kite_model_info info;
    kite_model_get_info(model, &info);
    kite_cli_warn_limits("kite serve", threads, sp.n_ctx, info.n_ctx_train);
    kite_spec_params spec = kite_spec_default_params();
    if (draft || spec_budget) {
        if (!draft || !strcmp(draft, "ngram")) {
            spec.drafter = KITE_DRAFT_NGRAM;
        } else if (!strcmp(draft, "none")) {
            spec.drafter = KITE_DRAFT_NONE;
        } else if (!strcmp(draft, "mtp")) {
            spec.drafter = KITE_DRAFT_MTP; /* the model's own next-n block */
        } else {
            kite_model_params dp = kite_model_default_params();
            dp.n_threads = threads;
            if (kite_model_open(&draft_model, draft, &dp, err, sizeof err)) {
                fprintf(stderr, "kite serve: error: draft model: %s\n", err);
                if (router) kite_router_free(router);
                else kite_model_free(model);
                free(template_text);
                return 1;
            }
            spec.drafter = KITE_DRAFT_MODEL;
            spec.draft_model = draft_model;
        }
        spec.budget = spec_budget;
        spec.draft_p_min = (float)spec_p_min;
        sp.spec = &spec;
    }
    char name[256];
    if (!sp.model_name && !router) {
        default_model_name(model_path, name, sizeof name);
        sp.model_name = name;
    }

    kite_server *server = NULL;
    int rc = kite_server_open(&server, model, &sp, err, sizeof err);
    free(template_text);
    if (rc) {
        fprintf(stderr, "kite serve: error: %s\n", err);
        kite_model_free(draft_model);
        if (router) kite_router_free(router);
        else kite_model_free(model);
        return 1;
    }
    g_server = server;
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    fprintf(stderr, "kite serve: listening on http://%s:%d (model %s, %d slots)\n", sp.host ? sp.host : "127.0.0.1",
            kite_server_port(server), sp.model_name, sp.n_parallel ? sp.n_parallel : 4);
    fflush(stderr);
    rc = kite_server_wait(server, err, sizeof err);
    g_server = NULL;
    kite_server_free(server);
    kite_model_free(draft_model);
    if (router) kite_router_free(router);
    else kite_model_free(model);
    if (rc) {
        fprintf(stderr, "kite serve: error: %s\n", err);
        return 1;
    }
    fprintf(stderr, "kite serve: stopped\n");
    return 0;
}
