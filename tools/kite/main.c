/* kite: the command-line interface. Uses only the public API (kite.h). */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chat_common.h"
#include "default_model.h"
#include "kite.h"
#include "cli_util.h"
#include "store_cli.h"

static const char *g_prog = "kite";

static int fail(int code, const char *fmt, const char *arg) {
    fprintf(stderr, "%s: error: ", g_prog);
    fprintf(stderr, fmt, arg);
    fputc('\n', stderr);
    return code;
}

/* ---- argument parsing ------------------------------------------------------------------------- */
typedef struct cli_args {
    const char *model;
    const char *tokenizer;
    const char *prompt;
    const char *prompt_ids;
    int32_t max_tokens;
    bool have_max_tokens;
    float temperature, top_p, min_p, repeat_penalty, presence_penalty, frequency_penalty;
    bool have_temperature, have_top_p, have_min_p, have_repeat_penalty, have_presence, have_frequency;
    int32_t top_k;
    bool have_top_k;
    uint64_t seed;
    bool have_seed;
    int32_t threads;
    int32_t ctx;
    bool json, no_bos, ignore_eos, quiet, help;
    bool no_special;          /* special-token text in raw prompts stays plain text */
    bool chat;                /* kite run --chat: the prompt is a user turn through the chat template */
    const char *system;       /* --system TEXT: a system turn before it */
    const char *chat_template; /* --chat-template FILE: overrides the model's template */
    const char *positional;
    const char *draft;        /* --draft PATH|ngram|none */
    int32_t spec_budget;      /* 0 = auto */
    int32_t spec_tree;
    const char *spec_verify;
    float spec_p_min;         /* --spec-p-min P (DSpark drafters); 0 = off */
    bool have_spec_p_min;
    const char *cache_type;   /* f16 | f32 | q8_0 | q4_0 */
    const char *grammar_file; /* --grammar FILE.gbnf */
    const char *schema_file;  /* --json-schema FILE.json */
    const char *regex;        /* --regex TEXT */
    bool json_object;         /* --json-object: any JSON object */
    bool no_forced_drafts;    /* --no-forced-drafts */
    const char *stop[KITE_MAX_STOP]; /* --stop S, repeatable */
    size_t n_stop;
    const char *file;         /* --file PATH: the prompt text from a file */
    kite_logit_bias bias[256]; /* --logit-bias ID=BIAS, repeatable */
    size_t n_bias;
    int32_t logprobs;         /* --logprobs N: log-probabilities and N alternatives per token in --json */
    bool have_logprobs;
    const char *ids;          /* kite detokenize --ids IDS */
    bool keep_newline;        /* kite tokenize --keep-newline */
    const char *prompt_cache; /* --prompt-cache FILE: the prompt's K/V saved and reused */
} cli_args;

/* Parses argv[first..argc). Returns 0, or 2 after printing a usage error. */
static int parse_args(int argc, char **argv, int first, cli_args *a, const char *usage_hint) {
    for (int i = first; i < argc; i++) {
        const char *opt = argv[i];
        /* llama.cpp's short flags, where they clash with nothing of kite's. */
        static const char *const short_flags[][2] = {{"-m", "--model"}, {"-p", "--prompt"},  {"-n", "--max-tokens"},
                                                      {"-t", "--threads"}, {"-c", "--ctx"},   {"-s", "--seed"},
                                                      {"-f", "--file"},    {"--temp", "--temperature"}};
        for (size_t k = 0; k < sizeof short_flags / sizeof *short_flags; k++)
            if (!strcmp(opt, short_flags[k][0])) opt = short_flags[k][1];
        if (!strcmp(opt, "--keep-newline")) { a->keep_newline = true; continue; }
        if (!strcmp(opt, "--help") || !strcmp(opt, "-h")) { a->help = true; continue; }
        if (!strcmp(opt, "--json")) { a->json = true; continue; }
        if (!strcmp(opt, "--no-bos")) { a->no_bos = true; continue; }
        if (!strcmp(opt, "--ignore-eos")) { a->ignore_eos = true; continue; }
        if (!strcmp(opt, "--quiet") || !strcmp(opt, "-q")) { a->quiet = true; continue; }
        if (!strcmp(opt, "--no-special")) { a->no_special = true; continue; }
        if (!strcmp(opt, "--chat")) { a->chat = true; continue; }
        if (!strcmp(opt, "--json-object")) { a->json_object = true; continue; }
        if (!strcmp(opt, "--no-forced-drafts")) { a->no_forced_drafts = true; continue; }
        if (opt[0] != '-' || (opt[1] != '-' && opt[1])) {
            if (opt[0] == '-') {
                fprintf(stderr, "%s: error: unknown option %s (see %s)\n", g_prog, opt, usage_hint);
                return 2;
            }
            if (a->positional) return fail(2, "unexpected argument '%s'", opt);
            a->positional = opt;
            continue;
        }
        if (i + 1 >= argc) {
            static const char *const valued[] = {
                "--model", "--tokenizer", "--prompt", "--prompt-ids", "--file", "--ids", "--draft", "--spec-verify",
                "--cache-type", "--prompt-cache", "--system", "--chat-template", "--grammar", "--json-schema", "--regex", "--stop",
                "--logit-bias", "--spec-budget", "--max-tokens", "--top-k", "--threads", "--ctx", "--spec-tree", "--spec-p-min",
                "--logprobs", "--temperature", "--top-p", "--min-p", "--repeat-penalty", "--presence-penalty",
                "--frequency-penalty", "--seed"};
            bool known = false;
            for (size_t k = 0; k < sizeof valued / sizeof *valued; k++) known |= !strcmp(opt, valued[k]);
            fprintf(stderr, known ? "%s: error: option %s needs a value (see %s)\n" : "%s: error: unknown option %s (see %s)\n",
                    g_prog, opt, usage_hint);
            return 2;
        }
        const char *val = argv[++i];
        long long iv;
        float fv;
#define INT_OPT(name, field, lo, hi, flag)                                                              \
        if (!strcmp(opt, name)) {                                                                       \
            if (!kite_cli_parse_ll(val, lo, hi, &iv)) {                                                         \
                fprintf(stderr, "%s: error: %s expects an integer in [%lld, %lld], got '%s'\n", g_prog,   \
                        name, (long long)(lo), (long long)(hi), val);                                   \
                return 2;                                                                               \
            }                                                                                           \
            a->field = (int32_t)iv;                                                                     \
            flag;                                                                                       \
            continue;                                                                                   \
        }
#define FLOAT_OPT(name, field, flag)                                                                    \
        if (!strcmp(opt, name)) {                                                                       \
            if (!kite_cli_parse_float(val, &fv)) {                                                               \
                fprintf(stderr, "%s: error: %s expects a number, got '%s'\n", g_prog, name, val);          \
                return 2;                                                                               \
            }                                                                                           \
            a->field = fv;                                                                              \
            a->flag = true;                                                                             \
            continue;                                                                                   \
        }
        if (!strcmp(opt, "--model")) { a->model = val; continue; }
        if (!strcmp(opt, "--tokenizer")) { a->tokenizer = val; continue; }
        if (!strcmp(opt, "--prompt")) { a->prompt = val; continue; }
        if (!strcmp(opt, "--prompt-ids")) { a->prompt_ids = val; continue; }
        if (!strcmp(opt, "--draft")) { a->draft = val; continue; }
        if (!strcmp(opt, "--spec-verify")) { a->spec_verify = val; continue; }
        if (!strcmp(opt, "--cache-type")) { a->cache_type = val; continue; }
        if (!strcmp(opt, "--system")) { a->system = val; continue; }
        if (!strcmp(opt, "--chat-template")) { a->chat_template = val; continue; }
        if (!strcmp(opt, "--grammar")) { a->grammar_file = val; continue; }
        if (!strcmp(opt, "--json-schema")) { a->schema_file = val; continue; }
        if (!strcmp(opt, "--regex")) { a->regex = val; continue; }
        if (!strcmp(opt, "--file")) { a->file = val; continue; }
        if (!strcmp(opt, "--ids")) { a->ids = val; continue; }
        if (!strcmp(opt, "--prompt-cache")) { a->prompt_cache = val; continue; }
        if (!strcmp(opt, "--stop")) {
            if (a->n_stop == KITE_MAX_STOP) return fail(2, "at most 16 --stop strings, got another: '%s'", val);
            if (!*val || strlen(val) > KITE_MAX_STOP_BYTES) return fail(2, "--stop expects a non-empty string of at most 1024 bytes, got '%s'", val);
            a->stop[a->n_stop++] = val;
            continue;
        }
        if (!strcmp(opt, "--logit-bias")) {
            /* ID=BIAS (llama.cpp's ID+BIAS and ID-BIAS too); BIAS may be -inf (never this token). */
            char *end;
            errno = 0;
            long id = strtol(val, &end, 10);
            float bias;
            const char *b = *end == '=' ? end + 1 : end;
            if (end == val || errno || id < 0 || id > INT32_MAX || (*end != '=' && *end != '+' && *end != '-') ||
                !kite_cli_parse_float(b, &bias))
                return fail(2, "--logit-bias expects ID=BIAS (a token id and a number, e.g. 13=-inf or 42=2.5), got '%s'", val);
            if (a->n_bias == sizeof a->bias / sizeof *a->bias) return fail(2, "at most 256 --logit-bias entries, got another: '%s'", val);
            a->bias[a->n_bias++] = (kite_logit_bias){(int32_t)id, bias};
            continue;
        }
        if (!strcmp(opt, "--spec-budget") && !strcmp(val, "auto")) { a->spec_budget = 0; continue; }
        INT_OPT("--max-tokens", max_tokens, 0, INT32_MAX, a->have_max_tokens = true)
        INT_OPT("--top-k", top_k, 0, INT32_MAX, a->have_top_k = true)
        INT_OPT("--threads", threads, 1, 1024, (void)0)
        INT_OPT("--ctx", ctx, 1, 1 << 22, (void)0)
        INT_OPT("--spec-budget", spec_budget, 1, KITE_MAX_DRAFT, (void)0)
        INT_OPT("--spec-tree", spec_tree, 1, 8, (void)0)
        INT_OPT("--logprobs", logprobs, 0, KITE_MAX_TOP_LOGPROBS, a->have_logprobs = true)
        FLOAT_OPT("--temperature", temperature, have_temperature)
        FLOAT_OPT("--top-p", top_p, have_top_p)
        FLOAT_OPT("--min-p", min_p, have_min_p)
        FLOAT_OPT("--spec-p-min", spec_p_min, have_spec_p_min)
        FLOAT_OPT("--repeat-penalty", repeat_penalty, have_repeat_penalty)
        FLOAT_OPT("--presence-penalty", presence_penalty, have_presence)
        FLOAT_OPT("--frequency-penalty", frequency_penalty, have_frequency)
#undef INT_OPT
#undef FLOAT_OPT
        if (!strcmp(opt, "--seed")) {
            char *end;
            errno = 0;
            unsigned long long v = strtoull(val, &end, 10);
            if (errno || end == val || *end || val[0] == '-') return fail(2, "--seed expects a non-negative integer, got '%s'", val);
            a->seed = v;
            a->have_seed = true;
            continue;
        }
        fprintf(stderr, "%s: error: unknown option %s (see %s)\n", g_prog, opt, usage_hint);
        return 2;
    }
    return 0;
}

/* All of a stream, NUL-terminated (*len excludes the NUL); NULL on a read error or out of memory. */
static char *read_all(FILE *f, size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        if (n == cap) {
            char *grown = cap > ((size_t)1 << 30) ? NULL : realloc(buf, (cap *= 2) + 1);
            if (!grown) break;
            buf = grown;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) {
            if (ferror(f)) break;
            buf[n] = 0;
            *len = n;
            return buf;
        }
    }
    free(buf);
    return NULL;
}

/* ---- progress bar ----------------------------------------------------------------------------- */
static void progress_bar(float fraction, void *user) {
    (void)user;
    int width = 30, filled = (int)(fraction * (float)width + 0.5f);
    fprintf(stderr, "\rloading [");
    for (int i = 0; i < width; i++) fputc(i < filled ? '#' : ' ', stderr);
    fprintf(stderr, "] %3d%%", (int)(fraction * 100.0f + 0.5f));
    if (fraction >= 1.0f) fprintf(stderr, "\r%*s\r", width + 18, "");
    fflush(stderr);
}

static int open_model(const cli_args *a, bool vocab_only, kite_model **model) {
    kite_model_params mp = kite_model_default_params();
    mp.tokenizer_path = a->tokenizer;
    mp.vocab_only = vocab_only;
    mp.n_threads = a->threads;
    if (!vocab_only && isatty(STDERR_FILENO) && !a->quiet) mp.progress = progress_bar;
    char err[512];
    if (kite_model_open(model, a->model, &mp, err, sizeof err)) return fail(1, "%s", err);
    return 0;
}

/* ---- run -------------------------------------------------------------------------------------- */
static const char RUN_USAGE[] =
    "usage: kite run --model PATH [--tokenizer PATH] (--prompt TEXT | --file PATH | --prompt-ids IDS) [options]\n"
    "       kite run --model PATH --chat [--system TEXT] [--chat-template FILE] --prompt TEXT [options]\n"
    "\n"
    "Generates a completion of the prompt and streams it to stdout; statistics go to stderr.\n"
    "Special-token text in the prompt (\"<|im_start|>\", \"<s>\") becomes special tokens, as in Hugging Face\n"
    "and llama.cpp, unless --no-special. With --chat, the prompt is a user turn rendered through the model's\n"
    "chat template (special-token text typed in it then stays plain text) and the model answers it.\n"
    "\n"
    "  --model, -m PATH        GGUF file, llama2.c .bin, or Hugging Face folder (or a .safetensors in one);\n"
    "                          default: $KITE_DEFAULT_MODEL, else the bundled story model (models/README.md)\n"
    "  --tokenizer PATH        llama2.c tokenizer .bin, SentencePiece .model or tokenizer.json (needed for\n"
    "                          llama2.c checkpoints; its vocabulary must be the model's)\n"
    "  --prompt, -p TEXT       prompt text (UTF-8); - reads it from stdin\n"
    "  --file, -f PATH         prompt text from a file\n"
    "  --prompt-ids IDS        prompt as token ids, separated by commas or spaces (no BOS added)\n"
    "  --no-special            special-token text in the prompt is plain text\n"
    "  --chat                  render the prompt as one user turn through the chat template, ending with\n"
    "                          the assistant header (BOS only where the template writes it)\n"
    "  --system TEXT           with --chat: a system turn before the user turn\n"
    "  --chat-template FILE    with --chat: a Jinja template file instead of the model's\n"
    "  --max-tokens, -n N      tokens to generate at most (default 256); a full context also ends generation\n"
    "                          (finish \"length\", exit 0, a note on stderr)\n"
    "  --temperature, --temp T 0 = greedy (default: the model's generation_config, else 0.8)\n"
    "  --top-k K               keep the K most likely tokens (0 = off)\n"
    "  --top-p P               nucleus sampling threshold (1 = off)\n"
    "  --min-p P               drop tokens below P x the top probability (0 = off)\n"
    "  --repeat-penalty R      penalize the last 64 tokens (1 = off)\n"
    "  --presence-penalty X    --frequency-penalty X\n"
    "  --seed, -s S            sampling seed; the same seed gives the same tokens\n"
    "  --logit-bias ID=BIAS    add BIAS to token ID's logit (-inf: never); repeatable\n"
    "  --stop S                end generation where the text contains S (S itself not printed); repeatable\n"
    "  --threads, -t N         worker threads (default: all cores)\n"
    "  --ctx, -c N             context size in tokens (default: the model's, at most 4096)\n"
    "  --prompt-cache FILE     save the prompt's state (K/V) in FILE; a later run whose prompt starts the same\n"
    "                          loads it and skips that part of the prefill (a file of another model is ignored)\n"
    "  --cache-type T          KV cache precision: f16 (default, as llama.cpp), f32 (keys and values exact),\n"
    "                          q8_0 or q4_0 (GGML blocks of 32: 1.9x / 3.6x smaller than f16; head sizes that are multiples of 32)\n"
    "  --no-bos                do not add BOS to the prompt\n"
    "  --ignore-eos            keep generating past end-of-sequence tokens\n"
    "  --draft PATH|ngram|mtp|none speculative decoding with a draft model sharing the vocabulary, with\n"
    "                          n-gram matches over the context, or with the model's own next-n (MTP) block\n"
    "                          (Qwen3.5 files that carry one); default none; the output is unchanged\n"
    "  --spec-budget N|auto    drafted tokens per verification pass, 1..32 (default auto: chosen per pass\n"
    "                          from the measured pass cost and the acceptance so far)\n"
    "  --spec-tree C           children per draft node (1 = a chain, default)\n"
    "  --spec-p-min P          a DSpark drafter drafts no further below a node whose confidence is under P\n"
    "                          (in [0, 1]; 0, the default, drafts the whole block, as llama.cpp's\n"
    "                          --spec-draft-p-min)\n"
    "  --spec-verify MODE      gumbel (default; identical to plain sampling with the same seed) or\n"
    "                          rejection (standard speculative sampling, same distribution only)\n"
    "  --grammar FILE.gbnf     constrain the output to a GBNF grammar (llama.cpp's syntax, rule root)\n"
    "  --json-schema FILE.json constrain the output to JSON that validates against the schema\n"
    "  --regex TEXT            constrain the whole output to match the regular expression\n"
    "  --json-object           constrain the output to a JSON object\n"
    "                          (with a constraint, generation ends where the grammar allows nothing more)\n"
    "  --no-forced-drafts      with --draft and a constraint: do not draft the text the grammar forces\n"
    "  --json                  print one JSON object (prompt_ids, ids, text, stats, stopped: stop, length or\n"
    "                          interrupted) instead of the text; printed after Ctrl-C too (exit 130)\n"
    "  --logprobs N            with --json: each token's log-probability and its N most likely alternatives\n"
    "  --quiet, -q             no statistics and no progress bar on stderr\n";

typedef struct run_output {
    bool json;
    json_t *ids;       /* generated ids (--json) */
    json_t *logprobs;  /* per generated token (--json --logprobs N), or NULL */
    const kite_session *session;
    char *text;        /* generated bytes (--json) */
    size_t text_len, text_cap;
    bool write_failed; /* stdout refused bytes (a full disk, a closed pipe): generation stops */
    int write_errno;
} run_output;

/* The session kite run is generating with, for the SIGINT handler (kite_cancel is safe from it). */
static kite_session *volatile g_run_session;
static volatile sig_atomic_t g_interrupted;

static void on_sigint(int sig) {
    (void)sig;
    g_interrupted = 1;
    if (g_run_session) kite_cancel(g_run_session);
}

/* SIGINT cancels the generation (what was generated is still printed); a second one kills as usual. */
static void catch_sigint(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sa.sa_flags = SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
}

static bool on_token(int32_t id, const char *text, size_t len, void *user) {
    run_output *o = user;
    if (!o->json) {
        if ((len && fwrite(text, 1, len, stdout) != len) || fflush(stdout)) {
            o->write_failed = true;
            o->write_errno = errno;
            return false;
        }
        return true;
    }
    json_array_append_new(o->ids, json_integer(id));
    kite_logprobs lp;
    if (o->logprobs && !kite_session_token_logprobs(o->session, &lp)) {
        json_t *top = json_array();
        for (int32_t k = 0; k < lp.n_top; k++)
            json_array_append_new(top, json_pack("{s:i,s:f}", "id", (int)lp.top[k].id, "logprob", (double)lp.top[k].logprob));
        json_array_append_new(o->logprobs, json_pack("{s:i,s:f,s:o}", "id", (int)lp.id, "logprob", (double)lp.logprob, "top", top));
    }
    if (o->text_len + len + 1 > o->text_cap) {
        size_t cap = (o->text_cap + len + 1) * 2;
        char *nt = realloc(o->text, cap);
        if (!nt) return false;
        o->text = nt;
        o->text_cap = cap;
    }
    memcpy(o->text + o->text_len, text, len);
    o->text_len += len;
    o->text[o->text_len] = 0;
    return true;
}

static int parse_id_list(const char *s, int32_t **ids, size_t *n) {
    size_t cap = 16;
    *ids = malloc(cap * sizeof **ids);
    *n = 0;
    if (!*ids) return fail(1, "%s", "out of memory");
    const char *p = s;
    while (*p) {
        while (*p == ',' || *p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX) {
            fprintf(stderr, "%s: error: token ids: '%.20s' at byte %zu is not a token id\n", g_prog, p, (size_t)(p - s));
            return 2;
        }
        if (*n == cap) {
            cap *= 2;
            int32_t *ni = realloc(*ids, cap * sizeof **ids);
            if (!ni) return fail(1, "%s", "out of memory");
            *ids = ni;
        }
        (*ids)[(*n)++] = (int32_t)v;
        p = end;
    }
    return 0;
}

/* kite run --chat: the prompt as one user turn (after a system turn with --system) through the chat
 * template, ending with the assistant header. Special-token text the template writes becomes special
 * tokens; text typed in the prompt stays plain text (kite_chat_tokenize), so it cannot forge a turn. */
static int chat_prompt_ids(const cli_args *a, const kite_model *model, int32_t **ids, size_t *n) {
    char err[1024];
    kite_chat_template *tmpl = NULL;
    if (kite_cli_open_template(&tmpl, model, a->chat_template, NULL, err, sizeof err)) return fail(1, "%s", err);
    json_t *messages = json_array();
    json_t *system = a->system ? json_string(a->system) : NULL, *user = json_string(a->prompt);
    int rc = 0;
    char *messages_text = NULL;
    int32_t *chat_ids = NULL;
    size_t n_chat = 0;
    if ((a->system && !system) || !user) {
        rc = fail(2, "%s", a->system && !system ? "--system is not valid UTF-8" : "--prompt is not valid UTF-8");
        goto done;
    }
    if (system) json_array_append_new(messages, json_pack("{s:s,s:O}", "role", "system", "content", system));
    json_array_append_new(messages, json_pack("{s:s,s:O}", "role", "user", "content", user));
    if (!(messages_text = kite_cli_json_text(messages))) { rc = fail(1, "%s", "out of memory"); goto done; }
    kite_chat_params cp = kite_chat_default_params();
    cp.messages_json = messages_text;
    cp.add_generation_prompt = true;
    if (kite_chat_tokenize(tmpl, model, &cp, &chat_ids, &n_chat, err, sizeof err)) { rc = fail(1, "%s", err); goto done; }
    if (!(*ids = malloc((n_chat ? n_chat : 1) * sizeof **ids))) { rc = fail(1, "%s", "out of memory"); goto done; }
    if (n_chat) memcpy(*ids, chat_ids, n_chat * sizeof **ids);
    *n = n_chat;
done:
    kite_free(chat_ids);
    free(messages_text);
    json_decref(system);
    json_decref(user);
    json_decref(messages);
    kite_chat_template_free(tmpl);
    return rc;
}

/* The constraint the options ask for (none: *out stays NULL). */
static int open_grammar(const cli_args *a, const kite_model *model, kite_grammar **out) {
    *out = NULL;
    kite_grammar_kind kind;
    const char *file = NULL, *text = NULL;
    if (a->grammar_file) kind = KITE_GRAMMAR_GBNF, file = a->grammar_file;
    else if (a->schema_file) kind = KITE_GRAMMAR_JSON_SCHEMA, file = a->schema_file;
    else if (a->regex) kind = KITE_GRAMMAR_REGEX, text = a->regex;
    else if (a->json_object) kind = KITE_GRAMMAR_JSON, text = "";
    else return 0;
    char err[1024];
    char *content = NULL;
    size_t len = text ? strlen(text) : 0;
    if (file && !(content = kite_cli_read_file(file, &len, err, sizeof err))) return fail(1, "%s", err);
    int st = kite_grammar_open(out, model, kind, file ? content : text, len, err, sizeof err);
    free(content);
    if (st) {
        fprintf(stderr, "%s: error: %s%s%s\n", g_prog, file ? file : "", file ? ": " : "", err);
        return 1;
    }
    return 0;
}

static int cmd_run(int argc, char **argv) {
    cli_args a = {0};
    int rc = parse_args(argc, argv, 2, &a, "kite run --help");
    if (rc) return rc;
    if (a.help) { fputs(RUN_USAGE, stdout); return 0; }
    if ((rc = kite_cli_model_or_default(&a.model, "kite run", a.quiet))) return rc;
    kite_kv_type kv_type;
    if (a.cache_type && !kite_kv_type_from_name(a.cache_type, &kv_type))
        return fail(2, "--cache-type expects f16, f32, q8_0 or q4_0, got '%s'", a.cache_type);
    if (!a.prompt && !a.prompt_ids && !a.file)
        return fail(2, "%s", "kite run needs --prompt TEXT, --file PATH or --prompt-ids IDS (see kite run --help)");
    if ((a.prompt != NULL) + (a.prompt_ids != NULL) + (a.file != NULL) > 1)
        return fail(2, "%s", "give one of --prompt, --file and --prompt-ids");
    if (a.have_logprobs && !a.json) return fail(2, "%s", "--logprobs N goes with --json (the log-probabilities are printed in it)");
    if (a.positional) return fail(2, "unexpected argument '%s'", a.positional);
    if (a.chat && a.prompt_ids) return fail(2, "%s", "--chat renders --prompt TEXT as a user turn; it does not take --prompt-ids");
    if (!a.chat && (a.system || a.chat_template))
        return fail(2, "%s", "--system and --chat-template go with --chat (see kite run --help)");
    if (a.chat && a.no_special)
        return fail(2, "%s", "--no-special is for raw prompts: with --chat, typed text is always plain text");

    if ((a.grammar_file != NULL) + (a.schema_file != NULL) + (a.regex != NULL) + a.json_object > 1)
        return fail(2, "%s", "give one of --grammar, --json-schema, --regex and --json-object");
    if (a.no_forced_drafts && !a.draft) return fail(2, "%s", "--no-forced-drafts goes with --draft");

    /* --file PATH and -p - (stdin): the prompt text, read before the model loads. */
    char *prompt_text = NULL;
    if (a.file || (a.prompt && !strcmp(a.prompt, "-"))) {
        size_t len = 0;
        char err[512];
        if (!(prompt_text = a.file ? kite_cli_read_file(a.file, &len, err, sizeof err) : read_all(stdin, &len)))
            return a.file ? fail(1, "%s", err) : fail(1, "%s", "cannot read the prompt from stdin");
        if (strlen(prompt_text) != len) {
            free(prompt_text);
            return fail(2, "the prompt from %s holds a NUL byte", a.file ? a.file : "stdin");
        }
        a.prompt = prompt_text;
    }
    kite_model *model = NULL;
    if ((rc = open_model(&a, false, &model))) {
        free(prompt_text);
        return rc;
    }
    kite_model_info info;
    kite_model_get_info(model, &info);
    kite_grammar *grammar = NULL;
    kite_cli_warn_limits(g_prog, a.threads, a.ctx, info.n_ctx_train);

    char err[1024];
    int32_t *prompt = NULL;
    size_t n_prompt = 0;
    if (a.prompt_ids) {
        if ((rc = parse_id_list(a.prompt_ids, &prompt, &n_prompt))) goto done;
    } else if (a.chat) {
        if ((rc = chat_prompt_ids(&a, model, &prompt, &n_prompt))) goto done;
    } else {
        size_t len = strlen(a.prompt);
        bool bos = info.add_bos && !a.no_bos;
        /* Special-token text in a raw prompt is a special token (as in HF and llama.cpp) unless --no-special. */
        bool special = !a.no_special;
        if (kite_tokenize(model, a.prompt, len, bos, special, NULL, 0, &n_prompt, err, sizeof err)) { rc = fail(1, "%s", err); goto done; }
        prompt = malloc((n_prompt ? n_prompt : 1) * sizeof *prompt);
        if (!prompt) { rc = fail(1, "%s", "out of memory"); goto done; }
        if (kite_tokenize(model, a.prompt, len, bos, special, prompt, n_prompt, &n_prompt, err, sizeof err)) { rc = fail(1, "%s", err); goto done; }
    }
    if (n_prompt == 0) { rc = fail(2, "%s", "the prompt is empty (and the model adds no BOS): nothing to continue from"); goto done; }

    kite_gen_params gp = kite_model_gen_params(model);
    if (a.have_max_tokens) gp.max_tokens = a.max_tokens;
    if (a.have_temperature) gp.temperature = a.temperature;
    if (a.have_top_k) gp.top_k = a.top_k;
    if (a.have_top_p) gp.top_p = a.top_p;
    if (a.have_min_p) gp.min_p = a.min_p;
    if (a.have_repeat_penalty) gp.repeat_penalty = a.repeat_penalty;
    if (a.have_presence) gp.presence_penalty = a.presence_penalty;
    if (a.have_frequency) gp.frequency_penalty = a.frequency_penalty;
    if (a.have_seed) gp.seed = a.seed;
    gp.ignore_eos = a.ignore_eos;
    gp.skip_special = true; /* text for people: no control-token text, a spelled-out end marker ends it */
    gp.stop = a.stop;
    gp.n_stop = a.n_stop;
    gp.logit_bias = a.bias;
    gp.n_logit_bias = a.n_bias;
    if (a.have_logprobs) {
        gp.logprobs = true;
        gp.top_logprobs = a.logprobs;
    }

    if ((rc = open_grammar(&a, model, &grammar))) goto done;
    gp.grammar = grammar;

    kite_session_params sp = kite_session_default_params();
    sp.n_ctx = a.ctx;
    sp.n_threads = a.threads;
    if (a.cache_type) kite_kv_type_from_name(a.cache_type, &sp.kv_type);
    kite_session *session = NULL;
    if (kite_session_open(&session, model, &sp, err, sizeof err)) { rc = fail(1, "%s", err); goto done; }

    kite_model *draft_model = NULL;
    if (a.draft || a.spec_budget || a.spec_tree || a.spec_verify) {
        kite_spec_params spec = kite_spec_default_params();
        const char *d = a.draft ? a.draft : "ngram";
        if (!strcmp(d, "none")) {
            spec.drafter = KITE_DRAFT_NONE;
        } else if (!strcmp(d, "ngram")) {
            spec.drafter = KITE_DRAFT_NGRAM;
        } else if (!strcmp(d, "mtp")) {
            spec.drafter = KITE_DRAFT_MTP; /* the model's own next-n block */
        } else {
            /* The draft keeps a tokenizer of its own; --tokenizer serves one without (a llama2.c .bin), so a
             * GGUF draft for a .bin target (or the reverse) each read their own. */
            kite_model_params dp = kite_model_default_params();
            dp.n_threads = a.threads;
            int dst = kite_model_open(&draft_model, d, &dp, err, sizeof err);
            if (dst == KITE_ERR_TOKENIZER && a.tokenizer) {
                dp.tokenizer_path = a.tokenizer;
                dst = kite_model_open(&draft_model, d, &dp, err, sizeof err);
            }
            if (dst) {
                rc = fail(1, "draft model: %s", err);
                kite_session_free(session);
                goto done;
            }
            spec.drafter = KITE_DRAFT_MODEL;
            spec.draft_model = draft_model;
        }
        spec.budget = a.spec_budget;
        spec.tree_width = a.spec_tree ? a.spec_tree : 1;
        spec.draft_p_min = a.have_spec_p_min ? a.spec_p_min : 0.0f;
        if (a.spec_verify && strcmp(a.spec_verify, "gumbel") && strcmp(a.spec_verify, "rejection")) {
            rc = fail(2, "--spec-verify expects gumbel or rejection, got '%s'", a.spec_verify);
            kite_session_free(session);
            kite_model_free(draft_model);
            goto done;
        }
        spec.verify = a.spec_verify && !strcmp(a.spec_verify, "rejection") ? KITE_VERIFY_REJECTION : KITE_VERIFY_GUMBEL;
        spec.no_forced_drafts = a.no_forced_drafts;
        if (kite_session_set_spec(session, &spec, err, sizeof err)) {
            rc = fail(1, "%s", err);
            kite_session_free(session);
            kite_model_free(draft_model);
            goto done;
        }
    }

    run_output out = {.json = a.json, .session = session};
    if (a.json) out.ids = json_array();
    if (a.json && a.have_logprobs) out.logprobs = json_array();
    g_run_session = session;
    catch_sigint();
    /* --prompt-cache: the longest prefix the file shares with this prompt is not processed again (the last
     * prompt token always is: the file holds no logits); the prompt's state is saved for the next run. */
    size_t cached = 0;
    bool save_cache = a.prompt_cache != NULL;
    if (a.prompt_cache && access(a.prompt_cache, F_OK) == 0) {
        if (kite_session_load(session, a.prompt_cache, err, sizeof err)) {
            fprintf(stderr, "%s: warning: --prompt-cache: %s; processing the whole prompt\n", g_prog, err);
        } else {
            int32_t n_cached = 0;
            const int32_t *have = kite_session_tokens(session, &n_cached);
            while (cached < (size_t)n_cached && cached < n_prompt && have[cached] == prompt[cached]) cached++;
            if (cached == n_prompt) cached--;
            save_cache = cached + 1 < n_prompt || (size_t)n_cached != n_prompt;
            kite_session_truncate(session, (int32_t)cached, err, sizeof err);
        }
    }
    int st = kite_prompt(session, prompt + cached, n_prompt - cached, err, sizeof err);
    if (!st && save_cache && !g_interrupted && kite_session_save(session, a.prompt_cache, err, sizeof err)) {
        fprintf(stderr, "%s: warning: --prompt-cache: %s\n", g_prog, err);
        err[0] = 0;
    }
    bool generated = !st;
    if (!st) st = kite_generate(session, &gp, on_token, &out, err, sizeof err);
    g_run_session = NULL;
    signal(SIGINT, SIG_DFL);
    /* How it ended: a full context is a normal stop (finish "length"), as max_tokens is; SIGINT prints what
     * was generated and says so. */
    bool context_full = generated && st == KITE_ERR_CONTEXT_FULL;
    bool interrupted = st == KITE_ERR_CANCELLED || (g_interrupted && st == KITE_OK);
    const char *stopped = "error";
    if (out.write_failed) stopped = "error";
    else if (interrupted) stopped = "interrupted";
    else if (context_full) stopped = "length";
    else if (!st) {
        kite_finish_reason fr = kite_session_finish_reason(session);
        stopped = fr == KITE_FINISH_STOP ? "stop" : fr == KITE_FINISH_LENGTH ? "length" : "stop";
    }
    bool ok = !out.write_failed && (!st || context_full || interrupted);
    if (!a.json && ok && (fputc('\n', stdout) == EOF || fflush(stdout))) out.write_failed = true, out.write_errno = errno;
    kite_stats stats;
    kite_session_stats(session, &stats);
    if (out.write_failed) {
        rc = fail(1, "writing the output: %s", strerror(out.write_errno ? out.write_errno : EIO));
    } else if (interrupted) {
        fprintf(stderr, "%s: interrupted after %lld generated tokens\n", g_prog, (long long)stats.generated_tokens);
        rc = 130; /* 128 + SIGINT, as shells report it */
    } else if (context_full) {
        fprintf(stderr, "%s: note: the context of %d tokens is full: generation stopped after %lld tokens (a larger --ctx "
                        "gives room for more)\n", g_prog, kite_session_n_ctx(session), (long long)stats.generated_tokens);
    } else if (st) {
        rc = fail(1, "%s", err);
    }
    if (a.json && !out.write_failed) {
        json_t *pids = json_array();
        for (size_t i = 0; i < n_prompt; i++) json_array_append_new(pids, json_integer(prompt[i]));
        json_t *js = json_pack("{s:I,s:I,s:f,s:f,s:f,s:f,s:f}", "prompt_tokens", (json_int_t)stats.prompt_tokens,
                               "generated_tokens", (json_int_t)stats.generated_tokens, "ttft_ms", stats.ttft_ms,
                               "prefill_ms", stats.prefill_ms, "prefill_tok_s", stats.prefill_tok_s, "decode_ms",
                               stats.decode_ms, "decode_tok_s", stats.decode_tok_s);
        json_t *root = json_object();
        json_object_set_new(root, "prompt_ids", pids);
        json_object_set_new(root, "ids", out.ids);
        out.ids = NULL;
        /* Invalid UTF-8 in generated bytes (a model may emit any byte) is replaced for JSON. */
        json_t *text = json_stringn(out.text ? out.text : "", out.text_len);
        if (!text) {
            char *clean = malloc(out.text_len * 3 + 1);
            size_t k = 0;
            for (size_t i = 0; clean && i < out.text_len; i++) {
                unsigned char c = (unsigned char)out.text[i];
                if (c < 0x80) clean[k++] = (char)c;
                else { clean[k++] = (char)0xEF; clean[k++] = (char)0xBF; clean[k++] = (char)0xBD; }
            }
            text = json_stringn(clean ? clean : "", k);
            free(clean);
        }
        json_object_set_new(root, "text", text);
        if (stats.target_passes > 0) {
            json_t *depth = json_array();
            for (int d = 0; d < KITE_MAX_DRAFT && stats.drafted_by_depth[d] > 0; d++)
                json_array_append_new(depth, json_real((double)stats.accepted_by_depth[d] / (double)stats.drafted_by_depth[d]));
            json_object_set_new(js, "tau", json_real(stats.tau));
            json_object_set_new(js, "drafted", json_integer(stats.drafted));
            json_object_set_new(js, "accepted", json_integer(stats.accepted));
            json_object_set_new(js, "target_passes", json_integer(stats.target_passes));
            json_object_set_new(js, "acceptance_by_depth", depth);
            json_object_set_new(js, "draft_ms", json_real(stats.draft_ms));
            json_object_set_new(js, "verify_ms", json_real(stats.verify_ms));
        }
        if (grammar) {
            json_object_set_new(js, "grammar_ms", json_real(stats.grammar_ms));
            json_object_set_new(js, "grammar_masks", json_integer(stats.grammar_masks));
            json_object_set_new(js, "grammar_mask_ms", json_real(stats.grammar_mask_ms));
            json_object_set_new(js, "grammar_mask_hits", json_integer(stats.grammar_mask_hits));
        }
        if (a.prompt_cache) json_object_set_new(js, "prompt_cached", json_integer((json_int_t)cached));
        json_object_set_new(root, "stats", js);
        json_object_set_new(root, "stopped", json_string(stopped));
        if (context_full) json_object_set_new(root, "context_full", json_true());
        if (rc == 1) json_object_set_new(root, "error", json_string(err));
        if (out.logprobs) json_object_set_new(root, "logprobs", out.logprobs);
        out.logprobs = NULL;
        char *dump = json_dumps(root, JSON_COMPACT | JSON_ENSURE_ASCII);
        if (dump && (puts(dump) == EOF || fflush(stdout))) rc = fail(1, "writing the output: %s", strerror(errno ? errno : EIO));
        free(dump);
        json_decref(root);
    }
    if (!a.quiet && ok && a.prompt_cache) fprintf(stderr, "prompt cache: %zu of %zu prompt tokens reused\n", cached, n_prompt);
    if (!a.quiet && ok) {
        fprintf(stderr, "prompt tokens: %lld, prefill: %.1f tok/s, time to first token: %.1f ms, generated: %lld, decode: %.1f tok/s\n",
                (long long)stats.prompt_tokens, stats.prefill_tok_s, stats.ttft_ms, (long long)stats.generated_tokens,
                stats.decode_tok_s);
        if (stats.target_passes > 0) {
            fprintf(stderr, "speculative: %.2f tokens per pass (%lld passes), accepted %lld of %lld drafted, draft %.1f ms, verify %.1f ms; acceptance by depth:",
                    stats.tau, (long long)stats.target_passes, (long long)stats.accepted, (long long)stats.drafted,
                    stats.draft_ms, stats.verify_ms);
            for (int d = 0; d < KITE_MAX_DRAFT && stats.drafted_by_depth[d] > 0; d++)
                fprintf(stderr, " %.2f", (double)stats.accepted_by_depth[d] / (double)stats.drafted_by_depth[d]);
            fputc('\n', stderr);
        }
    }
    json_decref(out.ids);
    json_decref(out.logprobs);
    free(out.text);
    kite_session_free(session);
    kite_model_free(draft_model);
done:
    free(prompt);
    free(prompt_text);
    kite_grammar_free(grammar);
    kite_model_free(model);
    return rc;
}

/* ---- tokenize --------------------------------------------------------------------------------- */
static const char TOKENIZE_USAGE[] =
    "usage: kite tokenize (--model PATH | --tokenizer PATH) [--no-bos] [--no-special] [--keep-newline] < text\n"
    "\n"
    "Reads UTF-8 text on stdin and prints its token ids on stdout, space-separated. One newline ending the\n"
    "text (the one echo adds) is not tokenized unless --keep-newline.\n"
    "BOS is added where the model adds one, unless --no-bos. Special-token text (\"<|im_start|>\") becomes\n"
    "its special token, as Hugging Face and llama.cpp tokenize it, unless --no-special (plain text).\n";

static int cmd_tokenize(int argc, char **argv) {
    cli_args a = {0};
    int rc = parse_args(argc, argv, 2, &a, "kite tokenize --help");
    if (rc) return rc;
    if (a.help) { fputs(TOKENIZE_USAGE, stdout); return 0; }
    if (!a.model && !a.tokenizer) return fail(2, "%s", "kite tokenize needs --model PATH or --tokenizer PATH");
    if (a.positional) return fail(2, "unexpected argument '%s'", a.positional);
    size_t len = 0;
    char *text = read_all(stdin, &len);
    if (!text) return fail(1, "%s", "cannot read the text from stdin");
    if (!a.keep_newline && len > 0 && text[len - 1] == '\n') len -= len > 1 && text[len - 2] == '\r' ? 2 : 1;
    kite_model *model = NULL;
    if ((rc = open_model(&a, true, &model))) { free(text); return rc; }
    kite_model_info info;
    kite_model_get_info(model, &info);
    char err[512];
    size_t n = 0;
    int32_t *ids = NULL;
    bool bos = info.add_bos && !a.no_bos, special = !a.no_special;
    if (kite_tokenize(model, text, len, bos, special, NULL, 0, &n, err, sizeof err)) {
        rc = fail(1, "%s", err);
    } else if (!(ids = malloc((n ? n : 1) * sizeof *ids))) {
        rc = fail(1, "%s", "out of memory");
    } else if (kite_tokenize(model, text, len, bos, special, ids, n, &n, err, sizeof err)) {
        rc = fail(1, "%s", err);
    } else {
        for (size_t i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
        putchar('\n');
    }
    free(ids);
    free(text);
    kite_model_free(model);
    return rc;
}

/* ---- detokenize ------------------------------------------------------------------------------- */
static const char DETOKENIZE_USAGE[] =
    "usage: kite detokenize (--model PATH | --tokenizer PATH) [--ids IDS | < ids]\n"
    "\n"
    "Prints the text of token ids (separated by commas, spaces or newlines; from --ids or stdin), the inverse of\n"
    "kite tokenize: special tokens give their text, BOS and EOS none.\n";

static int cmd_detokenize(int argc, char **argv) {
    cli_args a = {0};
    int rc = parse_args(argc, argv, 2, &a, "kite detokenize --help");
    if (rc) return rc;
    if (a.help) { fputs(DETOKENIZE_USAGE, stdout); return 0; }
    if (!a.model && !a.tokenizer) return fail(2, "%s", "kite detokenize needs --model PATH or --tokenizer PATH");
    if (a.positional) return fail(2, "unexpected argument '%s'", a.positional);
    size_t len = 0;
    char *input = a.ids ? NULL : read_all(stdin, &len);
    if (!a.ids && !input) return fail(1, "%s", "cannot read the ids from stdin");
    int32_t *ids = NULL;
    size_t n = 0;
    rc = parse_id_list(a.ids ? a.ids : input, &ids, &n);
    free(input);
    kite_model *model = NULL;
    if (!rc) rc = open_model(&a, true, &model);
    kite_model_info info;
    if (!rc) kite_model_get_info(model, &info);
    for (size_t i = 0; !rc && i < n; i++)
        if (ids[i] >= info.n_vocab) {
            fprintf(stderr, "%s: error: token id %d (number %zu) is outside the vocabulary of %d\n", g_prog, ids[i], i + 1, info.n_vocab);
            rc = 2;
        }
    char err[512];
    size_t n_bytes = 0;
    char *text = NULL;
    if (!rc && kite_detokenize(model, ids, n, NULL, 0, &n_bytes, err, sizeof err)) rc = fail(1, "%s", err);
    if (!rc && !(text = malloc(n_bytes + 1))) rc = fail(1, "%s", "out of memory");
    if (!rc && kite_detokenize(model, ids, n, text, n_bytes + 1, &n_bytes, err, sizeof err)) rc = fail(1, "%s", err);
    if (!rc) {
        fwrite(text, 1, n_bytes, stdout);
        putchar('\n');
    }
    free(text);
    free(ids);
    kite_model_free(model);
    return rc;
}

/* ---- inspect ---------------------------------------------------------------------------------- */
static const char INSPECT_USAGE[] =
    "usage: kite inspect PATH [--tokenizer PATH]\n"
    "\n"
    "Prints a model's architecture, hyper-parameters, tokenizer and tensor table.\n";

static int cmd_inspect(int argc, char **argv) {
    cli_args a = {0};
    int rc = parse_args(argc, argv, 2, &a, "kite inspect --help");
    if (rc) return rc;
    if (a.help) { fputs(INSPECT_USAGE, stdout); return 0; }
    a.model = a.positional ? a.positional : a.model;
    if (!a.model) return fail(2, "%s", "kite inspect needs a model PATH (see kite inspect --help)");
    a.quiet = true;
    kite_model *model = NULL;
    if ((rc = open_model(&a, true, &model))) return rc;
    kite_model_info in;
    kite_model_get_info(model, &in);
    printf("model:          %s\n", a.model);
    printf("format:         %s\n", in.format);
    if (in.n_draft_target_layers > 0) { /* a drafter: what it drafts with, and how to use it */
        printf("architecture:   %s (a drafter: kite run --model TARGET --draft %s)\n", in.architecture, a.model);
        if (in.n_vocab > 0) printf("vocabulary:     %d\n", in.n_vocab);
        else printf("vocabulary:     the target's (the file borrows its embeddings and output)\n");
        printf("dim:            %d\n", in.dim);
        printf("layers:         %d\n", in.n_layers);
        if (in.draft_block_size > 0)
            printf("block:          %d rows (the anchor and %d drafted tokens), mask token %d\n", in.draft_block_size,
                   in.draft_block_size - 1, in.draft_mask_token);
        if (in.draft_selector_top_k > 0) printf("selector:       DFlash-2, %d candidates per row\n", in.draft_selector_top_k);
        if (in.draft_markov_rank > 0) printf("markov head:    DSpark, rank %d\n", in.draft_markov_rank);
        printf("target layers: ");
        for (int32_t i = 0; i < in.n_draft_target_layers; i++) printf("%s%d", i ? ", " : " ", in.draft_target_layers[i]);
        printf(" (the inputs of these layers of the target are its features)\n");
        kite_model_free(model);
        return 0;
    }
    printf("architecture:   %s\n", in.architecture);
    printf("parameters:     %lld (%.2f MiB of weights)\n", (long long)in.n_params, (double)in.weight_bytes / 1048576.0);
    printf("vocabulary:     %d\n", in.n_vocab);
    printf("dim:            %d\n", in.dim);
    printf("layers:         %d\n", in.n_layers);
    printf("heads:          %d (kv heads %d, head dim %d)\n", in.n_heads, in.n_kv_heads, in.head_dim);
    if (in.n_local_layers > 0)
        printf("sliding window: %d positions on %d of %d layers (their heads: kv heads %d, head dim %d)\n", in.sliding_window,
               in.n_local_layers, in.n_layers, in.n_kv_heads_local, in.head_dim_local);
    printf("ffn dim:        %d\n", in.ffn_dim);
    if (in.n_conv_layers > 0)
        printf("conv layers:    %d of %d (short gated convolutions of %d taps; the others attend)\n", in.n_conv_layers, in.n_layers,
               in.conv_taps);
    if (in.n_experts > 0)
        printf("experts:        %d (%d per token, ffn dim %d each)\n", in.n_experts, in.n_experts_used, in.expert_ffn_dim);
    if (in.n_recurrent_layers > 0)
        printf("gated deltanet: %d of the layers (%d key / %d value heads of %d); the others gated attention\n",
               in.n_recurrent_layers, in.recurrent_k_heads, in.recurrent_v_heads, in.recurrent_head_dim);
    if (in.n_mtp_layers > 0)
        printf("next-n (MTP):   %d block%s after the layers (drafts with --draft mtp)\n", in.n_mtp_layers, in.n_mtp_layers > 1 ? "s" : "");
    printf("context:        %d\n", in.n_ctx_train);
    printf("rope theta:     %g\n", in.rope_theta);
    printf("rms eps:        %g\n", in.rms_eps);
    printf("embeddings:     %s\n", in.tied_embeddings ? "tied" : "separate output");
    printf("tokenizer:      %s (bos %d, eos %d, %s)\n", in.tokenizer, in.bos_id, in.eos_id, in.add_bos ? "adds bos" : "no bos");
    printf("tensors:        %d\n", in.n_tensors);
    printf("\n%-40s %-6s %-28s %12s\n", "name", "type", "shape", "bytes");
    for (int32_t i = 0; i < in.n_tensors; i++) {
        kite_tensor_desc d;
        if (kite_model_tensor(model, i, &d)) continue;
        char shape[64] = "";
        size_t at = 0;
        for (int32_t k = 0; k < d.n_dims && at < sizeof shape; k++)
            at += (size_t)snprintf(shape + at, sizeof shape - at, k ? " x %lld" : "%lld", (long long)d.shape[k]);
        printf("%-40s %-6s %-28s %12llu\n", d.name, d.type_name, shape, (unsigned long long)d.n_bytes);
    }
    kite_model_free(model);
    return 0;
}

/* ---- main ------------------------------------------------------------------------------------- */
static const char MAIN_USAGE[] =
    "usage: kite <command> [options]\n"
    "\n"
    "commands:\n"
    "  run        generate text from a prompt (--chat: answer it as a user turn of a chat)\n"
    "  chat       talk with a model in its own chat template (interactive, multi-turn)\n"
    "  template   print a conversation rendered through a chat template\n"
    "  tokenize   print the token ids of text read on stdin\n"
    "  detokenize print the text of token ids\n"
    "  inspect    describe a model file\n"
    "  bench      measure prefill, decode and batch speed against the machine's limits\n"
    "  gen-model  write a random-weight model of a real shape (for benchmarks)\n"
    "  serve      an OpenAI-compatible HTTP server (chat and completions, continuous batching)\n"
    "  grammar    print the GBNF grammar a JSON schema or a regular expression compiles to\n"
    "  route      the hybrid router's tools: explain a request's routing, calibrate a confidence rule\n"
    "  perplexity a model's perplexity over a text (llama-perplexity's chunks and statistics)\n"
    "  kld        KL divergence, top-token agreement and perplexities of a model against a reference\n"
    "  imatrix    an importance matrix over calibration text, in llama.cpp's imatrix file format\n"
    "  pull       download a model from Hugging Face or a URL into the model store\n"
    "  list       list the models in the store\n"
    "  show       describe a model in the store\n"
    "  rm         delete a model from the store\n"
    "  quantize   write a quantized GGUF model (Q4_K_M, Q8_0, ...) as llama-quantize does\n"
    "\n"
    "Every --model PATH also takes a store name (kite list). Global options: --models-dir DIR (the store;\n"
    "default $KITE_MODELS, else ~/.cache/kite/models), --pull (pull a --model NAME on first use).\n"
    "kite <command> --help (or kite help <command>) describes each command.\n";

int kite_cmd_bench(int argc, char **argv);     /* bench.c */
int kite_cmd_gen_model(int argc, char **argv); /* bench.c */
int kite_cmd_template(int argc, char **argv);  /* template.c */
int kite_cmd_chat(int argc, char **argv);      /* chat.c */
int kite_cmd_serve(int argc, char **argv);     /* serve.c */
int kite_cmd_grammar(int argc, char **argv);   /* grammar.c */
int kite_cmd_routed(int argc, char **argv, bool chat_verb); /* route_run.c: run/chat --router */
int kite_cmd_route(int argc, char **argv);     /* route.c */
int kite_cmd_perplexity(int argc, char **argv); /* perplexity.c */
int kite_cmd_kld(int argc, char **argv);        /* perplexity.c */
int kite_cmd_imatrix(int argc, char **argv);    /* perplexity.c */
int kite_cmd_quantize(int argc, char **argv);  /* quantize.c */

/* The library's log lines on stderr, at or above the level KITE_LOG names (debug, info, warn (the
 * default), error, off); the library itself never prints. */
static void log_to_stderr(kite_log_level level, const char *message, void *user_data) {
    static const char *const names[] = {"debug", "info", "warning", "error"};
    if ((int)level < *(const int *)user_data) return;
    fprintf(stderr, "%s: %s: %s\n", g_prog, names[level], message);
}

static int g_log_threshold = KITE_LOG_WARN;

static void setup_logging(void) {
    const char *env = getenv("KITE_LOG");
    if (!env || !*env) env = "warn";
    static const char *const levels[] = {"debug", "info", "warn", "error", "off"};
    for (int i = 0; i < 5; i++)
        if (!strcmp(env, levels[i])) {
            g_log_threshold = i;
            if (i < 4) kite_set_log_callback(log_to_stderr, &g_log_threshold);
            return;
        }
    fprintf(stderr, "%s: warning: KITE_LOG=%s is not one of debug, info, warn, error, off; using warn\n", g_prog, env);
    kite_set_log_callback(log_to_stderr, &g_log_threshold);
}

static int dispatch(int argc, char **argv);

int main(int argc, char **argv) {
    setup_logging();
    /* A closed pipe is a write error to report (exit 1), not a silent death by SIGPIPE. */
    signal(SIGPIPE, SIG_IGN);
    int rc = kite_cli_resolve_models(&argc, argv);
    if (!rc) rc = dispatch(argc, argv);
    /* Output still buffered, or refused earlier (a full disk, a closed pipe), fails the command. */
    errno = 0;
    if ((fflush(stdout) || ferror(stdout) || fclose(stdout)) && rc == 0) { /* a failed command has said why */
        int code = errno;
        fprintf(stderr, "%s: error: writing the output: %s\n", g_prog, strerror(code ? code : EIO));
        rc = 1;
    }
    return rc;
}

static int dispatch(int argc, char **argv) {
    if (argc < 2) {
        fputs(MAIN_USAGE, stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "help") && argc == 3) {
        /* kite help VERB = kite VERB --help */
        char *help_argv[] = {argv[0], argv[2], "--help", NULL};
        if (!strcmp(argv[2], "help")) {
            fputs(MAIN_USAGE, stdout);
            return 0;
        }
        return dispatch(3, help_argv);
    }
    if (!strcmp(cmd, "help") && argc > 3) {
        fprintf(stderr, "%s: error: kite help takes one command name\n", g_prog);
        return 2;
    }
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        fputs(MAIN_USAGE, stdout);
        return 0;
    }
    if (!strcmp(cmd, "--version")) {
        printf("kite %d.%d.%d\n", KITE_VERSION_MAJOR, KITE_VERSION_MINOR, KITE_VERSION_PATCH);
        return 0;
    }
    for (int i = 2; i + 1 < argc && (!strcmp(cmd, "run") || !strcmp(cmd, "chat")); i++)
        if (!strcmp(argv[i], "--router")) return kite_cmd_routed(argc, argv, !strcmp(cmd, "chat"));
    if (!strcmp(cmd, "run")) return cmd_run(argc, argv);
    if (!strcmp(cmd, "tokenize")) return cmd_tokenize(argc, argv);
    if (!strcmp(cmd, "detokenize")) return cmd_detokenize(argc, argv);
    if (!strcmp(cmd, "inspect")) return cmd_inspect(argc, argv);
    if (!strcmp(cmd, "bench")) return kite_cmd_bench(argc, argv);
    if (!strcmp(cmd, "gen-model")) return kite_cmd_gen_model(argc, argv);
    if (!strcmp(cmd, "template")) return kite_cmd_template(argc, argv);
    if (!strcmp(cmd, "chat")) return kite_cmd_chat(argc, argv);
    if (!strcmp(cmd, "serve")) return kite_cmd_serve(argc, argv);
    if (!strcmp(cmd, "grammar")) return kite_cmd_grammar(argc, argv);
    if (!strcmp(cmd, "route")) return kite_cmd_route(argc, argv);
    if (!strcmp(cmd, "perplexity")) return kite_cmd_perplexity(argc, argv);
    if (!strcmp(cmd, "kld")) return kite_cmd_kld(argc, argv);
    if (!strcmp(cmd, "imatrix")) return kite_cmd_imatrix(argc, argv);
    if (!strcmp(cmd, "pull")) return kite_cmd_pull(argc, argv);
    if (!strcmp(cmd, "list")) return kite_cmd_list(argc, argv);
    if (!strcmp(cmd, "show")) return kite_cmd_show(argc, argv);
    if (!strcmp(cmd, "rm")) return kite_cmd_rm(argc, argv);
    if (!strcmp(cmd, "quantize")) return kite_cmd_quantize(argc, argv);
    fprintf(stderr, "%s: error: unknown command '%s'\n\n%s", g_prog, cmd, MAIN_USAGE);
    return 2;
}
