/* kite route: the hybrid router's offline tools. `explain` prints where a request would run and why
 * (kite_router_explain); `calibrate` finds the min_logprob of a confidence rule that sends a chosen fraction
 * of a prompt set to the remote (kite_router_calibrate). Uses only kite.h and jansson. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat_common.h"
#include "kite.h"
#include "cli_util.h"

#define usage_error(...) kite_cli_usage_error("kite", "kite route --help", __VA_ARGS__)

static const char ROUTE_USAGE[] =
    "usage: kite route explain CONFIG --request FILE.json [--segment TAG] [--threads N] [--no-measure]\n"
    "       kite route calibrate CONFIG --prompts FILE [--limit N] [--first-tokens K] [--quantile Q]\n"
    "                            [--remote-fraction F]... [--threads N] [--json]\n"
    "\n"
    "explain    opens the router (the local model is loaded and timed, each remote probed once) and prints,\n"
    "           as JSON, the decision for one request body (OpenAI chat or completions, with kite's \"route\"\n"
    "           and \"max_latency_ms\"): the backend, the rule and the reason, the attempts in order and the\n"
    "           latency predictions. Nothing is generated. FILE.json may be - (stdin).\n"
    "  --segment TAG        the segment header's value\n"
    "  --no-measure         do not time the local model (its latency is then predicted as 0 ms)\n"
    "\n"
    "calibrate  runs each prompt on the local model (a one-user-message chat through its template; a model\n"
    "           without a template continues the prompt text), scores it by the Q-quantile of the\n"
    "           log-probabilities of its first K greedy tokens, and prints, for each fraction F, the\n"
    "           min_logprob below which F of the prompts score, with a confidence rule ready to paste.\n"
    "  --prompts FILE       JSON Lines or a JSON array; each record a string or an object whose prompt is in\n"
    "                       turns[0] (MT-Bench, Spec-Bench), prompt, question, problem, text or content\n"
    "  --limit N            the first N prompts only\n"
    "  --first-tokens K     tokens scored (default 8)\n"
    "  --quantile Q         quantile of their log-probabilities, in [0, 1] (default 0.1)\n"
    "  --remote-fraction F  fraction of prompts to send to the remote, in [0, 1]; repeatable (default 0.1, 0.25, 0.5)\n"
    "  --json               print the scores and thresholds as JSON\n"
    "\n"
    "  --threads N          threads for the local model\n";

enum { MAX_FRACTIONS = 16 };

/* stdin or a file, NUL-terminated. */
static char *read_input(const char *path, size_t *len, char *err, size_t err_size) {
    if (strcmp(path, "-")) return kite_cli_read_file(path, len, err, err_size);
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n + 1 >= cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) break;
            buf = nb;
        }
        size_t got = fread(buf + n, 1, cap - 1 - n, stdin);
        if (got == 0) {
            buf[n] = 0;
            *len = n;
            return buf;
        }
        n += got;
    }
    free(buf);
    snprintf(err, err_size, "out of memory reading stdin");
    return NULL;
}

/* The prompt text of one record of a prompt set, or NULL. */
static const char *record_prompt(const json_t *rec) {
    if (json_is_string(rec)) return json_string_value(rec);
    if (!json_is_object(rec)) return NULL;
    json_t *turns = json_object_get(rec, "turns");
    if (json_is_array(turns) && json_is_string(json_array_get(turns, 0))) return json_string_value(json_array_get(turns, 0));
    static const char *const keys[] = {"prompt", "question", "problem", "text", "content"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        json_t *v = json_object_get(rec, keys[i]);
        if (json_is_string(v)) return json_string_value(v);
    }
    return NULL;
}

/* Loads a prompt set into *records (a JSON array of the records kept, at most limit when limit > 0). */
static int load_prompts(const char *path, long limit, json_t **records, char *err, size_t err_size) {
    size_t len = 0;
    char *text = read_input(path, &len, err, err_size);
    if (!text) return 1;
    if (len >= 2 && (unsigned char)text[0] == 0x1f && (unsigned char)text[1] == 0x8b) {
        snprintf(err, err_size, "%s is gzip-compressed; decompress it first (zcat %s > prompts.jsonl)", path, path);
        free(text);
        return 1;
    }
    json_t *out = json_array();
    const char *p = text;
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    json_error_t jerr;
    if (*p == '[') {
        json_t *arr = json_loads(text, 0, &jerr);
        if (!arr) {
            snprintf(err, err_size, "%s:%d:%d: %s", path, jerr.line, jerr.column, jerr.text);
            free(text);
            json_decref(out);
            return 1;
        }
        size_t i;
        json_t *rec;
        json_array_foreach(arr, i, rec) {
            if (limit > 0 && (long)json_array_size(out) >= limit) break;
            if (!record_prompt(rec)) {
                snprintf(err, err_size, "%s: record %zu has no prompt (a string, or turns[0], prompt, question, problem, text "
                                        "or content)", path, i);
                json_decref(arr);
                json_decref(out);
                free(text);
                return 1;
            }
            json_array_append(out, rec);
        }
        json_decref(arr);
    } else {
        int line_no = 0;
        for (char *line = text; line && *line && !(limit > 0 && (long)json_array_size(out) >= limit);) {
            char *nl = strchr(line, '\n');
            if (nl) *nl = 0;
            line_no++;
            const char *q = line;
            while (*q == ' ' || *q == '\t' || *q == '\r') q++;
            if (*q) {
                json_t *rec = json_loads(line, JSON_DECODE_ANY, &jerr);
                if (!rec || !record_prompt(rec)) {
                    if (rec) snprintf(err, err_size, "%s:%d: no prompt (a string, or turns[0], prompt, question, problem, text or "
                                                     "content)", path, line_no);
                    else snprintf(err, err_size, "%s:%d:%d: %s", path, line_no, jerr.column, jerr.text);
                    json_decref(rec);
                    json_decref(out);
                    free(text);
                    return 1;
                }
                json_array_append_new(out, rec);
            }
            line = nl ? nl + 1 : NULL;
        }
    }
    free(text);
    if (json_array_size(out) == 0) {
        snprintf(err, err_size, "%s holds no prompts", path);
        json_decref(out);
        return 1;
    }
    *records = out;
    return 0;
}

/* The first remote backend's name in the config (the usual `else` of a confidence rule), or "cloud". */
static char *first_remote_name(const char *config_path) {
    json_t *root = json_load_file(config_path, 0, NULL);
    json_t *backends = json_object_get(root, "backends");
    const char *key, *name = "cloud";
    json_t *v;
    json_object_foreach(backends, key, v) {
        if (json_object_get(v, "url")) {
            name = key;
            break;
        }
    }
    char *out = strdup(name);
    json_decref(root);
    return out;
}

static int cmd_explain(const char *config, const char *request, const char *segment, const kite_router_params *rp) {
    char err[1024];
    size_t len = 0;
    char *body = read_input(request, &len, err, sizeof err);
    if (!body) {
        fprintf(stderr, "kite: error: %s\n", err);
        return 1;
    }
    kite_router *r = NULL;
    if (kite_router_open(&r, config, rp, err, sizeof err)) {
        fprintf(stderr, "kite: error: %s: %s\n", config, err);
        free(body);
        return 1;
    }
    char *decision = NULL;
    int rc = kite_router_explain(r, body, len, segment, &decision, err, sizeof err);
    free(body);
    if (rc) {
        fprintf(stderr, "kite: error: %s: %s\n", request, err);
        kite_router_free(r);
        return 1;
    }
    json_t *o = json_loads(decision, 0, NULL);
    char *pretty = o ? json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10)) : NULL;
    puts(pretty ? pretty : decision);
    free(pretty);
    json_decref(o);
    kite_free(decision);
    kite_router_free(r);
    return 0;
}

static int cmd_calibrate(const char *config, const char *prompts_path, long limit, long first_tokens, double quantile,
                         const double *fractions, int n_fractions, bool as_json, const kite_router_params *rp) {
    char err[1024];
    json_t *records = NULL;
    if (load_prompts(prompts_path, limit, &records, err, sizeof err)) {
        fprintf(stderr, "kite: error: %s\n", err);
        return 1;
    }
    size_t n = json_array_size(records);
    const char **prompts = malloc(n * sizeof *prompts);
    double *scores = malloc(n * sizeof *scores), thresholds[MAX_FRACTIONS];
    if (!prompts || !scores) {
        fprintf(stderr, "kite: error: out of memory\n");
        json_decref(records);
        free(prompts);
        free(scores);
        return 1;
    }
    for (size_t i = 0; i < n; i++) prompts[i] = record_prompt(json_array_get(records, i));
    kite_router *r = NULL;
    int rc = 0;
    if (kite_router_open(&r, config, rp, err, sizeof err)) {
        fprintf(stderr, "kite: error: %s: %s\n", config, err);
        rc = 1;
    }
    /* One run per fraction: each call scores the whole set (the scores are the same every time). */
    for (int k = 0; k < n_fractions && !rc; k++) {
        if (kite_router_calibrate(r, prompts, n, (int32_t)first_tokens, quantile, fractions[k], &thresholds[k], scores, err,
                                  sizeof err)) {
            fprintf(stderr, "kite: error: %s\n", err);
            rc = 1;
        }
    }
    if (!rc) {
        char *else_name = first_remote_name(config);
        if (as_json) {
            json_t *o = json_object(), *sc = json_array(), *th = json_array();
            json_object_set_new(o, "prompts", json_integer((json_int_t)n));
            json_object_set_new(o, "first_tokens", json_integer(first_tokens));
            json_object_set_new(o, "quantile", json_real(quantile));
            for (size_t i = 0; i < n; i++) json_array_append_new(sc, json_real(scores[i]));
            for (int k = 0; k < n_fractions; k++) {
                size_t below = 0;
                for (size_t i = 0; i < n; i++) below += scores[i] < thresholds[k];
                json_array_append_new(th, json_pack("{s:f, s:f, s:I}", "remote_fraction", fractions[k], "min_logprob",
                                                    thresholds[k], "below", (json_int_t)below));
            }
            json_object_set_new(o, "scores", sc);
            json_object_set_new(o, "thresholds", th);
            char *text = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10));
            puts(text ? text : "{}");
            free(text);
            json_decref(o);
        } else {
            printf("calibrated on %zu prompts from %s: score = quantile %g of the log-probabilities of the first %ld greedy "
                   "tokens\n", n, prompts_path, quantile, first_tokens);
            for (int k = 0; k < n_fractions; k++) {
                size_t below = 0;
                for (size_t i = 0; i < n; i++) below += scores[i] < thresholds[k];
                printf("remote_fraction %.3f: min_logprob %.6f (%zu of %zu prompts score below it)\n", fractions[k],
                       thresholds[k], below, n);
                printf("  {\"confidence\": {\"first_tokens\": %ld, \"quantile\": %g, \"min_logprob\": %.6f}, \"else\": \"%s\"}\n",
                       first_tokens, quantile, thresholds[k], else_name ? else_name : "cloud");
            }
        }
        free(else_name);
    }
    kite_router_free(r);
    json_decref(records);
    free(prompts);
    free(scores);
    return rc;
}

int kite_cmd_route(int argc, char **argv);
int kite_cmd_route(int argc, char **argv) {
    if (argc < 3 || !strcmp(argv[2], "--help") || !strcmp(argv[2], "-h")) {
        fputs(ROUTE_USAGE, argc < 3 ? stderr : stdout);
        return argc < 3 ? 2 : 0;
    }
    const char *verb = argv[2];
    bool explain = !strcmp(verb, "explain"), calib = !strcmp(verb, "calibrate");
    if (!explain && !calib) return usage_error("unknown kite route command '%s'", verb);
    const char *config = NULL, *request = NULL, *segment = NULL, *prompts = NULL;
    long limit = 0, first_tokens = 8, threads = 0;
    double quantile = 0.1, fractions[MAX_FRACTIONS];
    int n_fractions = 0;
    bool as_json = false, no_measure = false;
    for (int i = 3; i < argc; i++) {
        const char *opt = argv[i];
        if (!strcmp(opt, "--help") || !strcmp(opt, "-h")) {
            fputs(ROUTE_USAGE, stdout);
            return 0;
        }
        if (!strcmp(opt, "--json")) { as_json = true; continue; }
        if (!strcmp(opt, "--no-measure")) { no_measure = true; continue; }
        if (opt[0] != '-' || !strcmp(opt, "-")) {
            if (config) return usage_error("unexpected argument '%s'", opt);
            config = opt;
            continue;
        }
        if (i + 1 >= argc) return usage_error("option %s needs a value", opt);
        const char *val = argv[++i];
        if (!strcmp(opt, "--request")) request = val;
        else if (!strcmp(opt, "--segment")) segment = val;
        else if (!strcmp(opt, "--prompts")) prompts = val;
        else if (!strcmp(opt, "--limit")) {
            if (!kite_cli_parse_long(val, 1, 1L << 30, &limit)) return usage_error("--limit expects a positive integer, got '%s'", val);
        } else if (!strcmp(opt, "--first-tokens")) {
            if (!kite_cli_parse_long(val, 1, 256, &first_tokens)) return usage_error("--first-tokens expects an integer in [1, 256], got '%s'", val);
        } else if (!strcmp(opt, "--threads")) {
            if (!kite_cli_parse_long(val, 1, 1024, &threads)) return usage_error("--threads expects an integer in [1, 1024], got '%s'", val);
        } else if (!strcmp(opt, "--quantile")) {
            if (!kite_cli_parse_double(val, 0, 1, &quantile)) return usage_error("--quantile expects a number in [0, 1], got '%s'", val);
        } else if (!strcmp(opt, "--remote-fraction")) {
            if (n_fractions == MAX_FRACTIONS) return usage_error("at most 16 --remote-fraction values%s", "");
            if (!kite_cli_parse_double(val, 0, 1, &fractions[n_fractions++]))
                return usage_error("--remote-fraction expects a number in [0, 1], got '%s'", val);
        } else {
            return usage_error("unknown option %s", opt);
        }
    }
    if (!config) return usage_error("kite route %s needs a CONFIG file", verb);
    kite_router_params rp = kite_router_default_params();
    rp.n_threads = (int32_t)threads;
    if (explain) {
        if (!request) return usage_error("kite route explain needs --request FILE.json%s", "");
        if (prompts || limit || n_fractions || as_json) return usage_error("%s", "--prompts, --limit, --remote-fraction and --json are for kite route calibrate");
        rp.measure_local = !no_measure;
        return cmd_explain(config, request, segment, &rp);
    }
    if (!prompts) return usage_error("kite route calibrate needs --prompts FILE%s", "");
    if (request || segment || no_measure) return usage_error("%s", "--request, --segment and --no-measure are for kite route explain");
    rp.measure_local = false; /* calibration needs no latency figures */
    if (n_fractions == 0) {
        fractions[n_fractions++] = 0.1;
        fractions[n_fractions++] = 0.25;
        fractions[n_fractions++] = 0.5;
    }
    return cmd_calibrate(config, prompts, limit, first_tokens, quantile, fractions, n_fractions, as_json, &rp);
}
