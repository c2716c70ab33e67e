/* kite bench --spec: speculative decoding on real prompt sets, against plain decoding of the same
 * session settings. Uses only the public API (kite.h) and jansson.
 *
 * For every prompt and temperature, two fresh sessions generate the same number of tokens (end tokens
 * ignored, so lengths are equal): plain decoding, then speculative decoding. Per category it reports
 * tau (tokens per target pass), acceptance by depth, decode tok/s of both and the wall-clock decode
 * speed-up (plain decode time / speculative decode time over the category's tokens), and checks that
 * the speculative tokens are the plain ones (they must be, with Gumbel verification).
 * Prompts are the first N of each category, as plain text (the tiny test models are not chat models),
 * tokenized with BOS when the model adds one; a prompt too long for the context keeps BOS and its
 * last tokens. The oracle drafter (--oracle-acceptance A) replays the plain run's tokens, each
 * replaced by another with probability 1 - A: it measures what a drafter of that quality would give,
 * and every output labels it "oracle". */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kite.h"
#include "cli_util.h"

int kite_bench_spec(int argc, char **argv);

static int spec_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int spec_fail(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "kite: error: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return code;
}

static const char SPEC_USAGE[] =
    "usage: kite bench --spec --model PATH [--draft PATH|ngram | --oracle-acceptance A] [options]\n"
    "\n"
    "Speculative decoding on the prompt sets of DATA (Spec-Bench by category, MT-Bench, HumanEval,\n"
    "MATH-500, GSM8K): per category, tokens per target pass (tau), acceptance by depth, decode tok/s\n"
    "with speculation and with plain decoding of the same settings, and the speed-up. Every prompt\n"
    "generates exactly --gen-tokens tokens both ways (end tokens ignored) and the two outputs are\n"
    "compared (Gumbel verification must give the plain tokens).\n"
    "\n"
    "  --model, -m PATH          target model (GGUF, llama2.c .bin, Hugging Face folder)\n"
    "  --tokenizer PATH          tokenizer for a model or draft without one of its own (a llama2.c .bin)\n"
    "  --draft PATH|ngram|mtp    drafter: a draft model sharing the vocabulary (or an EAGLE-3 head, a DFlash\n"
    "                            drafter), n-gram matches (default), or mtp: the model's own next-n block\n"
    "  --oracle-acceptance A     drafter: the oracle, replaying the plain output with each token replaced\n"
    "                            by another with probability 1 - A (labelled \"oracle\" everywhere); with\n"
    "                            --draft DFLASH.gguf the DFlash drafter's block also runs and is charged\n"
    "                            each pass (\"oracle+dflash\": published acceptance at the real drafting cost)\n"
    "  --spec-budget N|auto      drafted tokens per pass, 1..32 (default auto)\n"
    "  --spec-tree C             children per draft node, 1..8 (default 1: a chain)\n"
    "  --spec-p-min P            a DSpark drafter drafts nothing below a node of confidence under P (0..1;\n"
    "                            default 0: off)\n"
    "  --spec-verify MODE        gumbel (default) or rejection\n"
    "  --spec-prompts N          prompts per category (default 8)\n"
    "  --gen-tokens N            tokens generated per prompt (default 64)\n"
    "  --temperatures LIST       comma-separated (default 0,1); sampling is plain softmax(logits / T)\n"
    "  --sets LIST               of spec_bench,mt_bench,humaneval,math500,gsm8k (default all)\n"
    "  --data DIR                folder of the prompt sets (default $KITE_TEST_DATA/data, else ../shared/data)\n"
    "  --seed S                  sampling seed of the first prompt (the i-th uses S + i; default 1)\n"
    "  --reps R                  runs of each prompt both ways, alternating (and which goes first); the\n"
    "                            fastest of each counts\n"
    "                            (default 1; more steadies the speed-ups of tiny models on a busy machine)\n"
    "  --threads N               worker threads (default: all cores)\n"
    "  --ctx N                   context size (default: the model's, at most 4096)\n"
    "  --json                    print one JSON object\n"
    "  --plot FILE.svg           write grouped bars of speed-up and tau per category\n"
    "  --quiet, -q               no progress on stderr\n";

/* ---- arguments -------------------------------------------------------------------------------------- */

enum { MAX_TEMPS = 8 };

typedef struct spec_args {
    const char *model, *tokenizer, *draft, *data_dir, *plot, *sets;
    int32_t threads, ctx, budget, tree, prompts, gen_tokens, reps;
    kite_spec_verify verify;
    bool oracle;
    double oracle_acceptance;
    double p_min;             /* --spec-p-min */
    float temps[MAX_TEMPS];
    int n_temps;
    uint64_t seed;
    bool json, quiet, help;
} spec_args;

static int parse_spec_args(int argc, char **argv, spec_args *a) {
    a->tree = 1, a->prompts = 8, a->gen_tokens = 64, a->seed = 1, a->reps = 1;
    a->temps[0] = 0.0f, a->temps[1] = 1.0f, a->n_temps = 2;
    a->sets = "spec_bench,mt_bench,humaneval,math500,gsm8k";
    for (int i = 2; i < argc; i++) {
        const char *opt = argv[i];
        if (!strcmp(opt, "--spec")) continue;
        if (!strcmp(opt, "--help") || !strcmp(opt, "-h")) { a->help = true; continue; }
        if (!strcmp(opt, "--json")) { a->json = true; continue; }
        if (!strcmp(opt, "--quiet") || !strcmp(opt, "-q")) { a->quiet = true; continue; }
        if (opt[0] != '-') return spec_fail(2, "unexpected argument '%s' (see kite bench --spec --help)", opt);
        if (i + 1 >= argc) return spec_fail(2, "option %s needs a value (see kite bench --spec --help)", opt);
        const char *val = argv[++i];
        long v;
        double d;
        if (!strcmp(opt, "--model") || !strcmp(opt, "-m")) a->model = val;
        else if (!strcmp(opt, "--tokenizer")) a->tokenizer = val;
        else if (!strcmp(opt, "--draft")) a->draft = val;
        else if (!strcmp(opt, "--data")) a->data_dir = val;
        else if (!strcmp(opt, "--plot")) a->plot = val;
        else if (!strcmp(opt, "--sets")) a->sets = val;
        else if (!strcmp(opt, "--oracle-acceptance")) {
            if (!kite_cli_parse_double(val, 0.0, 1.0, &d)) return spec_fail(2, "--oracle-acceptance expects a number in [0, 1], got '%s'", val);
            a->oracle = true, a->oracle_acceptance = d;
        } else if (!strcmp(opt, "--spec-budget")) {
            if (!strcmp(val, "auto")) a->budget = 0;
            else if (kite_cli_parse_long(val, 1, KITE_MAX_DRAFT, &v)) a->budget = (int32_t)v;
            else return spec_fail(2, "--spec-budget expects auto or an integer in [1, %d], got '%s'", KITE_MAX_DRAFT, val);
        } else if (!strcmp(opt, "--spec-tree")) {
            if (!kite_cli_parse_long(val, 1, 8, &v)) return spec_fail(2, "--spec-tree expects an integer in [1, 8], got '%s'", val);
            a->tree = (int32_t)v;
        } else if (!strcmp(opt, "--spec-p-min")) {
            if (!kite_cli_parse_double(val, 0.0, 1.0, &a->p_min)) return spec_fail(2, "--spec-p-min expects a number in [0, 1], got '%s'", val);
        } else if (!strcmp(opt, "--spec-verify")) {
            if (!strcmp(val, "gumbel")) a->verify = KITE_VERIFY_GUMBEL;
            else if (!strcmp(val, "rejection")) a->verify = KITE_VERIFY_REJECTION;
            else return spec_fail(2, "--spec-verify expects gumbel or rejection, got '%s'", val);
        } else if (!strcmp(opt, "--spec-prompts")) {
            if (!kite_cli_parse_long(val, 1, 10000, &v)) return spec_fail(2, "--spec-prompts expects an integer in [1, 10000], got '%s'", val);
            a->prompts = (int32_t)v;
        } else if (!strcmp(opt, "--gen-tokens")) {
            if (!kite_cli_parse_long(val, 2, 1 << 20, &v)) return spec_fail(2, "--gen-tokens expects an integer >= 2, got '%s'", val);
            a->gen_tokens = (int32_t)v;
        } else if (!strcmp(opt, "--reps")) {
            if (!kite_cli_parse_long(val, 1, 100, &v)) return spec_fail(2, "--reps expects an integer in [1, 100], got '%s'", val);
            a->reps = (int32_t)v;
        } else if (!strcmp(opt, "--threads")) {
            if (!kite_cli_parse_long(val, 1, 1024, &v)) return spec_fail(2, "--threads expects an integer in [1, 1024], got '%s'", val);
            a->threads = (int32_t)v;
        } else if (!strcmp(opt, "--ctx")) {
            if (!kite_cli_parse_long(val, 16, 1 << 22, &v)) return spec_fail(2, "--ctx expects an integer in [16, %d], got '%s'", 1 << 22, val);
            a->ctx = (int32_t)v;
        } else if (!strcmp(opt, "--seed")) {
            char *end;
            errno = 0;
            unsigned long long s = strtoull(val, &end, 10);
            if (errno || end == val || *end || val[0] == '-') return spec_fail(2, "--seed expects a non-negative integer, got '%s'", val);
            a->seed = s;
        } else if (!strcmp(opt, "--temperatures")) {
            a->n_temps = 0;
            const char *p = val;
            while (*p) {
                char *end;
                errno = 0;
                double t = strtod(p, &end);
                if (errno || end == p || !(t >= 0 && t <= 100) || a->n_temps == MAX_TEMPS || (*end && *end != ','))
                    return spec_fail(2, "--temperatures expects up to %d comma-separated numbers in [0, 100], got '%s'", MAX_TEMPS, val);
                a->temps[a->n_temps++] = (float)t;
                p = *end ? end + 1 : end;
            }
            if (a->n_temps == 0) return spec_fail(2, "--temperatures expects at least one number, got '%s'", val);
        } else {
            return spec_fail(2, "unknown option %s (see kite bench --spec --help)", opt);
        }
    }
    return 0;
}

/* ---- prompt sets -------------------------------------------------------------------------------------- */

typedef struct category {
    char name[48];
    char **texts;       /* [n] prompt texts, owned */
    int n;
} category;

typedef struct category_list {
    category *items;    /* [n] in order of first appearance */
    int n, cap;
} category_list;

static category *category_get(category_list *l, const char *name) {
    for (int i = 0; i < l->n; i++)
        if (!strcmp(l->items[i].name, name)) return &l->items[i];
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 16;
        category *ni = realloc(l->items, (size_t)cap * sizeof *ni);
        if (!ni) return NULL;
        l->items = ni, l->cap = cap;
    }
    category *c = &l->items[l->n++];
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "%s", name);
    return c;
}

static void category_list_free(category_list *l) {
    for (int i = 0; i < l->n; i++) {
        for (int k = 0; k < l->items[i].n; k++) free(l->items[i].texts[k]);
        free(l->items[i].texts);
    }
    free(l->items);
    memset(l, 0, sizeof *l);
}

typedef struct prompt_set {
    const char *key;
    const char *file;            /* under the data folder */
    const char *category_field;  /* the record's category, or NULL: one category named key */
    const char *text_field;      /* a string, or an array whose first element is the prompt ("turns") */
    bool gzip;
} prompt_set;

static const prompt_set SETS[] = {
    {"spec_bench", "spec_bench/question.jsonl", "category", "turns", false},
    {"mt_bench", "mt_bench/question.jsonl", NULL, "turns", false},
    {"humaneval", "humaneval/HumanEval.jsonl.gz", NULL, "prompt", true},
    {"math500", "math500/test.jsonl", NULL, "problem", false},
    {"gsm8k", "gsm8k/test.jsonl", NULL, "question", false},
};

/* Single-quotes a path for the shell (popen). */
static char *shell_quote(const char *s) {
    size_t n = 3;
    for (const char *p = s; *p; p++) n += *p == '\'' ? 4 : 1;
    char *q = malloc(n), *o = q;
    if (!q) return NULL;
    *o++ = '\'';
    for (const char *p = s; *p; p++) {
        if (*p == '\'') { memcpy(o, "'\\''", 4); o += 4; }
        else *o++ = *p;
    }
    *o++ = '\'';
    *o = 0;
    return q;
}

/* Reads one JSON Lines set, adding the first `max_per` prompts of each category. */
static int load_set(const prompt_set *set, const char *dir, int max_per, category_list *out) {
    size_t plen = strlen(dir) + strlen(set->file) + 2;
    char *path = malloc(plen);
    if (!path) return spec_fail(1, "out of memory");
    snprintf(path, plen, "%s/%s", dir, set->file);
    FILE *f = NULL;
    if (set->gzip) {
        char *quoted = shell_quote(path);
        size_t clen = quoted ? strlen(quoted) + 32 : 0;
        char *cmd = quoted ? malloc(clen) : NULL;
        if (cmd) {
            snprintf(cmd, clen, "gzip -dc %s 2>/dev/null", quoted);
            FILE *probe = fopen(path, "rb");
            if (probe) { fclose(probe); f = popen(cmd, "r"); }
        }
        free(cmd);
        free(quoted);
    } else {
        f = fopen(path, "rb");
    }
    if (!f) {
        int rc = spec_fail(1, "cannot read the %s prompts at %s (see --data)", set->key, path);
        free(path);
        return rc;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    long line_no = 0, bad = 0, records = 0;
    while ((len = getline(&line, &cap, f)) >= 0) {
        line_no++;
        if (len <= 1) continue;
        json_error_t je;
        json_t *rec = json_loadb(line, (size_t)len, 0, &je);
        const char *cat_name = set->key, *text = NULL;
        if (rec && set->category_field) {
            json_t *c = json_object_get(rec, set->category_field);
            cat_name = json_is_string(c) ? json_string_value(c) : NULL;
        }
        json_t *t = rec ? json_object_get(rec, set->text_field) : NULL;
        if (json_is_array(t)) t = json_array_get(t, 0);
        if (json_is_string(t)) text = json_string_value(t);
        if (!rec || !cat_name || !text || !*text) {
            bad++;
            json_decref(rec);
            continue;
        }
        records++;
        category *c = category_get(out, cat_name);
        if (c && c->n < max_per) {
            char **nt = realloc(c->texts, (size_t)(c->n + 1) * sizeof *nt);
            char *copy = strdup(text);
            if (nt) c->texts = nt;
            if (nt && copy) c->texts[c->n++] = copy;
            else free(copy);
        }
        json_decref(rec);
    }
    free(line);
    int status = set->gzip ? pclose(f) : fclose(f);
    if ((set->gzip && status != 0) || records == 0) {
        int rc = spec_fail(1, "%s: no readable records in %s%s", set->key, path, set->gzip ? " (is gzip installed?)" : "");
        free(path);
        return rc;
    }
    if (bad) fprintf(stderr, "kite: warning: %s: skipped %ld of %ld lines without a category and a prompt\n", set->key, bad, line_no);
    free(path);
    return 0;
}

/* ---- measuring ---------------------------------------------------------------------------------------- */

typedef struct tally {
    int prompts, identical, truncated;
    int64_t tokens;                 /* generated per run (the same both ways) */
    double plain_decode_ms, spec_decode_ms;
    int64_t plain_decoded, spec_decoded; /* tokens after each run's first */
    int64_t passes, drafted, accepted;
    int64_t drafted_by_depth[KITE_MAX_DRAFT], accepted_by_depth[KITE_MAX_DRAFT];
    double draft_ms, verify_ms;
} tally;

static void tally_add(tally *t, const kite_stats *plain, const kite_stats *spec, bool identical, bool truncated) {
    t->prompts++;
    t->identical += identical;
    t->truncated += truncated;
    t->tokens += spec->generated_tokens;
    t->plain_decode_ms += plain->decode_ms;
    t->spec_decode_ms += spec->decode_ms;
    t->plain_decoded += plain->generated_tokens - 1;
    t->spec_decoded += spec->generated_tokens - 1;
    t->passes += spec->target_passes;
    t->drafted += spec->drafted;
    t->accepted += spec->accepted;
    for (int d = 0; d < KITE_MAX_DRAFT; d++) {
        t->drafted_by_depth[d] += spec->drafted_by_depth[d];
        t->accepted_by_depth[d] += spec->accepted_by_depth[d];
    }
    t->draft_ms += spec->draft_ms;
    t->verify_ms += spec->verify_ms;
}

static void tally_merge(tally *into, const tally *t) {
    into->prompts += t->prompts, into->identical += t->identical, into->truncated += t->truncated;
    into->tokens += t->tokens;
    into->plain_decode_ms += t->plain_decode_ms, into->spec_decode_ms += t->spec_decode_ms;
    into->plain_decoded += t->plain_decoded, into->spec_decoded += t->spec_decoded;
    into->passes += t->passes, into->drafted += t->drafted, into->accepted += t->accepted;
    for (int d = 0; d < KITE_MAX_DRAFT; d++) {
        into->drafted_by_depth[d] += t->drafted_by_depth[d];
        into->accepted_by_depth[d] += t->accepted_by_depth[d];
    }
    into->draft_ms += t->draft_ms, into->verify_ms += t->verify_ms;
}

static double tally_tau(const tally *t) { return t->passes ? (double)(t->accepted + t->passes) / (double)t->passes : 0; }
static double tok_s(int64_t tokens, double ms) { return ms > 0 ? (double)tokens / (ms / 1e3) : 0; }
static double tally_speedup(const tally *t) {
    double plain = tok_s(t->plain_decoded, t->plain_decode_ms), spec = tok_s(t->spec_decoded, t->spec_decode_ms);
    return plain > 0 ? spec / plain : 0;
}

static json_t *tally_json(const char *name, const tally *t) {
    json_t *depth = json_array();
    for (int d = 0; d < KITE_MAX_DRAFT && t->drafted_by_depth[d] > 0; d++)
        json_array_append_new(depth, json_real((double)t->accepted_by_depth[d] / (double)t->drafted_by_depth[d]));
    json_t *o = json_object();
    json_object_set_new(o, "name", json_string(name));
    json_object_set_new(o, "prompts", json_integer(t->prompts));
    json_object_set_new(o, "truncated_prompts", json_integer(t->truncated));
    json_object_set_new(o, "tokens", json_integer(t->tokens));
    json_object_set_new(o, "identical_to_plain", json_integer(t->identical));
    json_object_set_new(o, "tau", json_real(tally_tau(t)));
    json_object_set_new(o, "target_passes", json_integer(t->passes));
    json_object_set_new(o, "drafted", json_integer(t->drafted));
    json_object_set_new(o, "accepted", json_integer(t->accepted));
    json_object_set_new(o, "acceptance_by_depth", depth);
    json_object_set_new(o, "plain_decode_tok_s", json_real(tok_s(t->plain_decoded, t->plain_decode_ms)));
    json_object_set_new(o, "spec_decode_tok_s", json_real(tok_s(t->spec_decoded, t->spec_decode_ms)));
    json_object_set_new(o, "speedup", json_real(tally_speedup(t)));
    json_object_set_new(o, "plain_decode_ms", json_real(t->plain_decode_ms));
    json_object_set_new(o, "spec_decode_ms", json_real(t->spec_decode_ms));
    json_object_set_new(o, "draft_ms", json_real(t->draft_ms));
    json_object_set_new(o, "verify_ms", json_real(t->verify_ms));
    return o;
}

typedef struct collected {
    int32_t *ids;
    int n, cap;
} collected;

static bool collect_token(int32_t id, const char *text, size_t len, void *user) {
    (void)text, (void)len;
    collected *c = user;
    if (c->n < c->cap) c->ids[c->n++] = id;
    return true;
}

typedef struct bench_ctx {
    const spec_args *a;
    kite_model *model, *draft;
    int32_t n_ctx;
} bench_ctx;

static bool same_ids(const collected *a, const collected *b) {
    return a->n == b->n && !memcmp(a->ids, b->ids, sizeof(int32_t) * (size_t)a->n);
}

/* One generation on a fresh session: spec NULL = plain. */
static int generate_once(const bench_ctx *b, const kite_spec_params *spec, const int32_t *prompt, size_t n_prompt,
                         const kite_gen_params *gp, collected *out, kite_stats *stats) {
    char err[512];
    kite_session_params sp = kite_session_default_params();
    sp.n_ctx = b->n_ctx;
    sp.n_threads = b->a->threads;
    kite_session *s = NULL;
    if (kite_session_open(&s, b->model, &sp, err, sizeof err)) return spec_fail(1, "%s", err);
    int rc = 0;
    out->n = 0;
    if (spec && kite_session_set_spec(s, spec, err, sizeof err)) rc = spec_fail(1, "%s", err);
    else if (kite_prompt(s, prompt, n_prompt, err, sizeof err)) rc = spec_fail(1, "%s", err);
    else if (kite_generate(s, gp, collect_token, out, err, sizeof err)) rc = spec_fail(1, "%s", err);
    kite_session_stats(s, stats);
    kite_session_free(s);
    return rc;
}

/* ---- the plot ----------------------------------------------------------------------------------------- */

static void svg_text(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '&') fputs("&amp;", f);
        else if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '"') fputs("&quot;", f);
        else fputc(*s, f);
    }
}

static int write_plot(const char *path, const char *title, const category_list *cats, const tally *tallies,
                      const tally *overall, const spec_args *a) {
    FILE *f = fopen(path, "w");
    if (!f) return spec_fail(1, "cannot write the plot to %s", path);
    int n_groups = cats->n + 1; /* the categories, then "all" */
    double ymax = 1.5;
    for (int ti = 0; ti < a->n_temps; ti++)
        for (int c = 0; c <= cats->n; c++) {
            const tally *t = c < cats->n ? &tallies[ti * cats->n + c] : &overall[ti];
            if (tally_tau(t) > ymax) ymax = tally_tau(t);
            if (tally_speedup(t) > ymax) ymax = tally_speedup(t);
        }
    double step = ymax <= 3 ? 0.5 : ymax <= 6 ? 1 : ymax <= 15 ? 2 : 5;
    ymax = ceil(ymax / step) * step;
    const int left = 60, right = 20, group_w = 44, panel_h = 230, top = 64, label_h = 110;
    int width = left + right + n_groups * group_w, height = top + a->n_temps * (panel_h + label_h) + 10;
    if (width < 520) width = 520;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" font-size=\"11\">\n",
            width, height);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n<text x=\"%d\" y=\"20\" font-size=\"14\">", left);
    svg_text(f, title);
    fprintf(f, "</text>\n");
    fprintf(f, "<rect x=\"%d\" y=\"32\" width=\"12\" height=\"12\" fill=\"#3b6fb6\"/><text x=\"%d\" y=\"42\">decode speed-up vs plain"
               " (wall clock)</text>\n", left, left + 16);
    fprintf(f, "<rect x=\"%d\" y=\"32\" width=\"12\" height=\"12\" fill=\"#e08a2c\"/><text x=\"%d\" y=\"42\">tau (tokens per target"
               " pass)</text>\n", left + 230, left + 246);
    for (int ti = 0; ti < a->n_temps; ti++) {
        int y0 = top + ti * (panel_h + label_h) + 14, base = y0 + panel_h;
        fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"12\" font-weight=\"bold\">T = %g</text>\n", left, y0 - 2, a->temps[ti]);
        for (double v = 0; v <= ymax + 1e-9; v += step) {
            double y = base - v / ymax * (panel_h - 16);
            fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>", left, y, left + n_groups * group_w, y);
            fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n", left - 4, y + 4, v);
        }
        double y1 = base - 1.0 / ymax * (panel_h - 16);
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#444\" stroke-dasharray=\"4 3\"/>\n", left, y1,
                left + n_groups * group_w, y1);
        for (int c = 0; c < n_groups; c++) {
            const tally *t = c < cats->n ? &tallies[ti * cats->n + c] : &overall[ti];
            const char *name = c < cats->n ? cats->items[c].name : "all";
            double vals[2] = {tally_speedup(t), tally_tau(t)};
            static const char *const colors[2] = {"#3b6fb6", "#e08a2c"};
            for (int k = 0; k < 2; k++) {
                double h = vals[k] / ymax * (panel_h - 16);
                int x = left + c * group_w + 6 + k * 16;
                fprintf(f, "<rect x=\"%d\" y=\"%.1f\" width=\"15\" height=\"%.1f\" fill=\"%s\"><title>", x, base - h, h, colors[k]);
                svg_text(f, name);
                fprintf(f, " %s %.2f</title></rect>\n", k ? "tau" : "speed-up", vals[k]);
            }
            int lx = left + c * group_w + 22;
            fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\" transform=\"rotate(-45 %d %d)\">", lx, base + 12, lx, base + 12);
            svg_text(f, name);
            fprintf(f, "</text>\n");
        }
        fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n", left, base, left + n_groups * group_w, base);
    }
    fprintf(f, "</svg>\n");
    if (fclose(f) != 0) return spec_fail(1, "cannot write the plot to %s", path);
    return 0;
}

/* ---- the command -------------------------------------------------------------------------------------- */

/* A model with a tokenizer of its own keeps it; --tokenizer is for one without (a llama2.c .bin), so
 * a target and a draft of different families can each have theirs. */
static int open_with_tokenizer(const spec_args *a, const char *path, const char *what, kite_model **model) {
    char err[512], err2[512];
    kite_model_params mp = kite_model_default_params();
    mp.n_threads = a->threads;
    int st = kite_model_open(model, path, &mp, err, sizeof err);
    if (st == KITE_ERR_TOKENIZER && a->tokenizer) {
        mp.tokenizer_path = a->tokenizer;
        if (kite_model_open(model, path, &mp, err2, sizeof err2) == 0) return 0;
        return spec_fail(1, "%s%s", what, err2);
    }
    if (st) return spec_fail(1, "%s%s", what, err);
    return 0;
}

int kite_bench_spec(int argc, char **argv) {
    spec_args a = {0};
    int rc = parse_spec_args(argc, argv, &a);
    if (rc) return rc;
    if (a.help) { fputs(SPEC_USAGE, stdout); return 0; }
    if (!a.model) return spec_fail(2, "kite bench --spec needs --model PATH (see kite bench --spec --help)");
    /* Both: the oracle's tokens at a DFlash drafter's real cost (checked once the draft is open). */
    if (a.oracle && a.draft && !strcmp(a.draft, "ngram")) return spec_fail(2, "give either --draft ngram or --oracle-acceptance, not both");
    if (a.verify == KITE_VERIFY_REJECTION && a.tree != 1) return spec_fail(2, "--spec-verify rejection works on chains: use --spec-tree 1");
    char data_buf[4096];
    if (!a.data_dir) {
        const char *env = getenv("KITE_TEST_DATA");
        snprintf(data_buf, sizeof data_buf, "%s/data", env && *env ? env : "../shared");
        a.data_dir = data_buf;
    }

    /* Prompt sets first: a wrong --data fails before any model loads. */
    category_list cats = {0};
    {
        char *sets = strdup(a.sets);
        if (!sets) return spec_fail(1, "out of memory");
        for (char *save = NULL, *key = strtok_r(sets, ",", &save); key; key = strtok_r(NULL, ",", &save)) {
            const prompt_set *set = NULL;
            for (size_t i = 0; i < sizeof SETS / sizeof SETS[0]; i++)
                if (!strcmp(SETS[i].key, key)) set = &SETS[i];
            if (!set) rc = spec_fail(2, "--sets: unknown set '%s' (spec_bench, mt_bench, humaneval, math500, gsm8k)", key);
            else rc = load_set(set, a.data_dir, a.prompts, &cats);
            if (rc) break;
        }
        free(sets);
        if (!rc && cats.n == 0) rc = spec_fail(2, "--sets: no prompt set given");
        if (rc) { category_list_free(&cats); return rc; }
    }

    char err[512];
    bench_ctx b = {.a = &a};
    if ((rc = open_with_tokenizer(&a, a.model, "", &b.model))) {
        category_list_free(&cats);
        return rc;
    }
    kite_model_info info;
    kite_model_get_info(b.model, &info);
    const bool mtp = a.draft && !strcmp(a.draft, "mtp"); /* the model's own next-n block */
    if (mtp && a.oracle) { rc = spec_fail(2, "give either --draft mtp or --oracle-acceptance, not both"); goto done; }
    const char *drafter_name = a.oracle ? "oracle" : !a.draft || !strcmp(a.draft, "ngram") ? "ngram" : mtp ? "mtp" : "model";
    if ((!strcmp(drafter_name, "model") || (a.oracle && a.draft)) && (rc = open_with_tokenizer(&a, a.draft, "draft model: ", &b.draft)))
        goto done;
    bool eagle3 = false, dflash = false; /* the draft is an EAGLE-3 head, a DFlash drafter */
    if (b.draft) {
        kite_model_info di;
        kite_model_get_info(b.draft, &di);
        if (!strcmp(di.architecture, "eagle3")) eagle3 = true, drafter_name = "eagle3";
        if (!strcmp(di.architecture, "dflash")) dflash = true, drafter_name = a.oracle ? "oracle+dflash" : "dflash";
        if (a.oracle && !dflash) {
            rc = spec_fail(2, "--oracle-acceptance with --draft takes a DFlash drafter (its pass is charged, its tokens the oracle's)");
            goto done;
        }
    }
    b.n_ctx = a.ctx ? a.ctx : info.n_ctx_train < 4096 ? info.n_ctx_train : 4096;
    int32_t max_prompt = b.n_ctx - a.gen_tokens - KITE_MAX_DRAFT - 1;
    if (max_prompt < 4) {
        rc = spec_fail(2, "--gen-tokens %d leaves no room for a prompt in a context of %d tokens", a.gen_tokens, b.n_ctx);
        goto done;
    }

    kite_spec_params spec = kite_spec_default_params();
    spec.drafter = a.oracle ? KITE_DRAFT_ORACLE : mtp ? KITE_DRAFT_MTP : eagle3 ? KITE_DRAFT_EAGLE3 : dflash ? KITE_DRAFT_DFLASH : b.draft ? KITE_DRAFT_MODEL : KITE_DRAFT_NGRAM;
    spec.draft_model = b.draft;
    spec.budget = a.budget;
    spec.tree_width = a.tree;
    spec.verify = a.verify;
    spec.draft_p_min = (float)a.p_min;
    spec.oracle_error_rate = a.oracle ? (float)(1.0 - a.oracle_acceptance) : 0.0f;

    /* Tokenized prompts, with BOS and the prompt's end kept when it is too long. */
    int n_prompts_total = 0;
    for (int c = 0; c < cats.n; c++) n_prompts_total += cats.items[c].n;
    int32_t **prompts = calloc((size_t)n_prompts_total, sizeof *prompts);
    size_t *n_prompt = calloc((size_t)n_prompts_total, sizeof *n_prompt);
    bool *truncated = calloc((size_t)n_prompts_total, sizeof *truncated);
    tally *tallies = calloc((size_t)a.n_temps * (size_t)cats.n, sizeof *tallies);
    tally *overall = calloc((size_t)a.n_temps, sizeof *overall);
    collected plain_ids = {.cap = a.gen_tokens}, spec_ids = {.cap = a.gen_tokens}, other_ids = {.cap = a.gen_tokens};
    plain_ids.ids = malloc(sizeof(int32_t) * (size_t)a.gen_tokens);
    spec_ids.ids = malloc(sizeof(int32_t) * (size_t)a.gen_tokens);
    other_ids.ids = malloc(sizeof(int32_t) * (size_t)a.gen_tokens);
    json_t *root = NULL;
    if (!prompts || !n_prompt || !truncated || !tallies || !overall || !plain_ids.ids || !spec_ids.ids || !other_ids.ids) {
        rc = spec_fail(1, "out of memory");
        goto free_all;
    }
    bool bos = info.add_bos;
    for (int c = 0, k = 0; c < cats.n; c++)
        for (int i = 0; i < cats.items[c].n; i++, k++) {
            const char *text = cats.items[c].texts[i];
            size_t n = 0;
            if (kite_tokenize(b.model, text, strlen(text), bos, false, NULL, 0, &n, err, sizeof err) ||
                !(prompts[k] = malloc((n ? n : 1) * sizeof(int32_t))) ||
                kite_tokenize(b.model, text, strlen(text), bos, false, prompts[k], n, &n, err, sizeof err)) {
                rc = spec_fail(1, "%s prompt %d: %s", cats.items[c].name, i + 1, prompts[k] ? err : "out of memory");
                goto free_all;
            }
            if (n > (size_t)max_prompt) {
                size_t keep_head = bos ? 1 : 0, tail = (size_t)max_prompt - keep_head;
                memmove(prompts[k] + keep_head, prompts[k] + n - tail, tail * sizeof(int32_t));
                n = (size_t)max_prompt;
                truncated[k] = true;
            }
            n_prompt[k] = n;
        }

    /* Warm-up: faults the weights in, wakes the workers, measures the pass cost curve once. */
    {
        kite_gen_params gp = kite_gen_default_params();
        gp.temperature = 0, gp.max_tokens = a.gen_tokens < 16 ? a.gen_tokens : 16, gp.ignore_eos = true;
        kite_stats st;
        if ((rc = generate_once(&b, NULL, prompts[0], n_prompt[0], &gp, &plain_ids, &st))) goto free_all;
        spec.oracle_ids = plain_ids.ids, spec.n_oracle_ids = (size_t)plain_ids.n;
        if ((rc = generate_once(&b, &spec, prompts[0], n_prompt[0], &gp, &spec_ids, &st))) goto free_all;
    }

    for (int ti = 0; ti < a.n_temps; ti++) {
        for (int c = 0, k0 = 0; c < cats.n; k0 += cats.items[c].n, c++) {
            tally *t = &tallies[ti * cats.n + c];
            for (int i = 0; i < cats.items[c].n; i++) {
                int k = k0 + i;
                kite_gen_params gp = kite_gen_default_params();
                gp.temperature = a.temps[ti];
                gp.top_k = 0, gp.top_p = 1.0f, gp.min_p = 0.0f;
                gp.max_tokens = a.gen_tokens;
                gp.ignore_eos = true;
                gp.seed = a.seed + (uint64_t)i;
                kite_stats plain_st = {0}, spec_st = {0}, st;
                bool same = true;
                /* Plain and speculative runs alternate, and which goes first alternates with the rep: the
                 * run that follows another finds the caches and the host in a different state. The
                 * oracle replays the first plain run's output. */
                if ((rc = generate_once(&b, NULL, prompts[k], n_prompt[k], &gp, &plain_ids, &plain_st))) goto free_all;
                spec.oracle_ids = plain_ids.ids, spec.n_oracle_ids = (size_t)plain_ids.n;
                for (int32_t rep = 0; rep < a.reps; rep++) {
                    for (int turn = 0; turn < 2; turn++) {
                        bool run_spec = (turn == 1) == (rep % 2 == 0); /* rep 0, 2...: plain, spec; 1, 3...: spec, plain */
                        if (!run_spec && rep == 0) continue; /* the first plain run is above */
                        if (run_spec) {
                            if ((rc = generate_once(&b, &spec, prompts[k], n_prompt[k], &gp, &spec_ids, &st))) goto free_all;
                            if (rep == 0 || st.decode_ms < spec_st.decode_ms) spec_st = st;
                            same = same && same_ids(&plain_ids, &spec_ids);
                        } else {
                            if ((rc = generate_once(&b, NULL, prompts[k], n_prompt[k], &gp, &other_ids, &st))) goto free_all;
                            if (st.decode_ms < plain_st.decode_ms) plain_st = st;
                            same = same && same_ids(&other_ids, &plain_ids);
                        }
                    }
                }
                tally_add(t, &plain_st, &spec_st, same, truncated[k]);
            }
            tally_merge(&overall[ti], t);
            if (!a.quiet && !a.json)
                fprintf(stderr, "T %g %-16s tau %.2f, speed-up %.2f\n", a.temps[ti], cats.items[c].name, tally_tau(t), tally_speedup(t));
        }
    }

    /* Reports. */
    char budget_text[16], title[512];
    if (a.budget) snprintf(budget_text, sizeof budget_text, "%d", a.budget);
    else snprintf(budget_text, sizeof budget_text, "auto");
    char drafter_text[160];
    if (a.oracle) snprintf(drafter_text, sizeof drafter_text, "oracle%s (acceptance %.2f)", dflash ? " at the DFlash drafter's cost" : "", a.oracle_acceptance);
    else if (b.draft) snprintf(drafter_text, sizeof drafter_text, "%s %s", drafter_name, a.draft);
    else snprintf(drafter_text, sizeof drafter_text, "%s", drafter_name); /* ngram or mtp */
    const char *model_base = strrchr(a.model, '/') && strrchr(a.model, '/')[1] ? strrchr(a.model, '/') + 1 : a.model;
    snprintf(title, sizeof title, "%s: drafter %s, budget %s, tree %d, %s; %d prompts/category, %d tokens", model_base,
             drafter_text, budget_text, a.tree, a.verify == KITE_VERIFY_REJECTION ? "rejection" : "gumbel", a.prompts, a.gen_tokens);
    int mismatched = 0;
    for (int ti = 0; ti < a.n_temps; ti++) mismatched += overall[ti].prompts - overall[ti].identical;
    if (a.json) {
        root = json_object();
        json_object_set_new(root, "model", json_string(a.model));
        json_object_set_new(root, "drafter", json_string(drafter_name));
        if (b.draft) json_object_set_new(root, "draft_model", json_string(a.draft));
        if (a.oracle) json_object_set_new(root, "oracle_acceptance", json_real(a.oracle_acceptance));
        json_object_set_new(root, "label", json_string(drafter_text));
        json_object_set_new(root, "budget", a.budget ? json_integer(a.budget) : json_string("auto"));
        json_object_set_new(root, "tree_width", json_integer(a.tree));
        json_object_set_new(root, "verify", json_string(a.verify == KITE_VERIFY_REJECTION ? "rejection" : "gumbel"));
        json_object_set_new(root, "threads", a.threads ? json_integer(a.threads) : json_string("all cores"));
        json_object_set_new(root, "n_ctx", json_integer(b.n_ctx));
        json_object_set_new(root, "gen_tokens", json_integer(a.gen_tokens));
        json_object_set_new(root, "prompts_per_category", json_integer(a.prompts));
        json_object_set_new(root, "reps", json_integer(a.reps));
        json_object_set_new(root, "sampling", json_string("softmax(logits / T): no top-k, top-p or min-p; end tokens ignored"));
        json_t *runs = json_array();
        for (int ti = 0; ti < a.n_temps; ti++) {
            json_t *r = json_object(), *list = json_array();
            json_object_set_new(r, "temperature", json_real(a.temps[ti]));
            for (int c = 0; c < cats.n; c++) json_array_append_new(list, tally_json(cats.items[c].name, &tallies[ti * cats.n + c]));
            json_object_set_new(r, "categories", list);
            json_object_set_new(r, "all", tally_json("all", &overall[ti]));
            json_array_append_new(runs, r);
        }
        json_object_set_new(root, "results", runs);
        char *dump = json_dumps(root, JSON_COMPACT | JSON_ENSURE_ASCII | JSON_REAL_PRECISION(6));
        if (dump) puts(dump);
        free(dump);
    } else {
        printf("%s\n", title);
        for (int ti = 0; ti < a.n_temps; ti++) {
            printf("\nT = %g\n%-18s %7s %6s %10s %10s %8s  %s\n", a.temps[ti], "category", "prompts", "tau", "plain t/s", "spec t/s",
                   "speed-up", "acceptance by depth 1..4");
            for (int c = 0; c <= cats.n; c++) {
                const tally *t = c < cats.n ? &tallies[ti * cats.n + c] : &overall[ti];
                printf("%-18s %7d %6.2f %10.1f %10.1f %8.2f ", c < cats.n ? cats.items[c].name : "all", t->prompts, tally_tau(t),
                       tok_s(t->plain_decoded, t->plain_decode_ms), tok_s(t->spec_decoded, t->spec_decode_ms), tally_speedup(t));
                for (int d = 0; d < 4 && t->drafted_by_depth[d] > 0; d++)
                    printf(" %.2f", (double)t->accepted_by_depth[d] / (double)t->drafted_by_depth[d]);
                putchar('\n');
            }
        }
        if (a.verify == KITE_VERIFY_GUMBEL)
            printf("\nspeculative output identical to plain: %s\n", mismatched ? "NO" : "yes, every prompt");
    }
    if (a.plot) rc = write_plot(a.plot, title, &cats, tallies, overall, &a);
    /* Gumbel verification must reproduce plain decoding: a difference is a bug, and fails the run. */
    if (!rc && mismatched && a.verify == KITE_VERIFY_GUMBEL)
        rc = spec_fail(1, "%d prompt(s) gave speculative output different from plain decoding", mismatched);

free_all:
    json_decref(root);
    if (prompts)
        for (int k = 0; k < n_prompts_total; k++) free(prompts[k]);
    free(prompts);
    free(n_prompt);
    free(truncated);
    free(tallies);
    free(overall);
    free(plain_ids.ids);
    free(spec_ids.ids);
    free(other_ids.ids);
done:
    category_list_free(&cats);
    kite_model_free(b.draft);
    kite_model_free(b.model);
    return rc;
}
