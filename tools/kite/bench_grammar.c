/* kite bench --grammar: the cost of grammar-constrained decoding (token masks) against decoding itself,
 * and speculative decoding's tokens per pass under a grammar with and without the forced-text drafts.
 * Uses only kite.h. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chat_common.h"
#include "kite.h"

static const char GRAMMAR_BENCH_USAGE[] =
    "usage: kite bench --grammar --model PATH [--json-schema FILE | --gbnf FILE | --regex TEXT] [options]\n"
    "\n"
    "Generates under a constraint (default: a built-in JSON schema of a customer record) and reports\n"
    "what the token masks cost: per token, as a fraction of decode time, and split into first visits of\n"
    "a grammar state (a walk of the vocabulary trie) and cached states (a lookup and the mask applied).\n"
    "With --draft, also tokens per target pass (tau) with and without the grammar's forced-text drafts.\n"
    "\n"
    "  --model, -m PATH      model file (GGUF, llama2.c .bin, Hugging Face folder)\n"
    "  --tokenizer PATH      tokenizer for checkpoints without one\n"
    "  --json-schema FILE    a JSON Schema     --gbnf FILE   a GBNF grammar     --regex TEXT   a regex\n"
    "  --prompt TEXT         (default: a request for the record as JSON)\n"
    "  --gen-tokens N        tokens per generation at most (default 128)\n"
    "  --runs R              generations, seeds 1..R (default 3)\n"
    "  --temperature T       (default 1; 0 = greedy)\n"
    "  --threads N           worker threads (default: all cores)\n"
    "  --draft ngram|PATH    speculative decoding: report tau with and without forced drafts\n"
    "  --spec-budget N       drafted tokens per pass, 1..32 (default: adaptive)\n"
    "  --json                print one JSON object\n";

static const char DEFAULT_SCHEMA[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"id\":{\"type\":\"integer\",\"minimum\":1},"
    "\"name\":{\"type\":\"string\",\"maxLength\":40},"
    "\"email\":{\"type\":\"string\",\"pattern\":\"^[a-z0-9._]{1,20}@[a-z0-9]{1,20}\\\\.(com|org|net)$\"},"
    "\"active\":{\"type\":\"boolean\"},"
    "\"tier\":{\"enum\":[\"free\",\"pro\",\"enterprise\"]},"
    "\"address\":{\"type\":\"object\",\"properties\":{\"street\":{\"type\":\"string\"},\"city\":{\"type\":\"string\"},"
    "\"zip\":{\"type\":\"string\",\"pattern\":\"^[0-9]{5}$\"}},\"required\":[\"street\",\"city\",\"zip\"],"
    "\"additionalProperties\":false},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":16},\"maxItems\":4}},"
    "\"required\":[\"id\",\"name\",\"email\",\"active\",\"tier\",\"address\",\"tags\"],\"additionalProperties\":false}";

static int bench_fail(int code, const char *msg) {
    fprintf(stderr, "kite: error: %s\n", msg);
    return code;
}

typedef struct totals {
    int64_t tokens, masks, hits, passes, accepted;
    double decode_ms, grammar_ms, mask_ms;
    int complete;
} totals;

/* One generation per seed with gp (grammar or not); spec NULL = plain. */
static int run_all(kite_model *m, const int32_t *prompt, size_t n_prompt, kite_gen_params gp, int runs, int threads,
                   const kite_spec_params *spec, totals *t, char *err, size_t err_size) {
    memset(t, 0, sizeof *t);
    for (int r = 0; r < runs; r++) {
        kite_session_params sp = kite_session_default_params();
        sp.n_threads = threads;
        sp.n_ctx = (int32_t)n_prompt + gp.max_tokens + 64;
        kite_session *s = NULL;
        int st = kite_session_open(&s, m, &sp, err, err_size);
        if (!st && spec) st = kite_session_set_spec(s, spec, err, err_size);
        if (!st) st = kite_prompt(s, prompt, n_prompt, err, err_size);
        gp.seed = 1 + (uint64_t)r;
        if (!st) st = kite_generate(s, &gp, NULL, NULL, err, err_size);
        if (st) {
            kite_session_free(s);
            return st;
        }
        kite_stats k;
        kite_session_stats(s, &k);
        t->tokens += k.generated_tokens;
        t->decode_ms += k.decode_ms;
        t->grammar_ms += k.grammar_ms;
        t->mask_ms += k.grammar_mask_ms;
        t->masks += k.grammar_masks;
        t->hits += k.grammar_mask_hits;
        t->passes += k.target_passes;
        t->accepted += k.accepted;
        t->complete += kite_session_finish_reason(s) == KITE_FINISH_STOP;
        kite_session_free(s);
    }
    return KITE_OK;
}

int kite_bench_grammar(int argc, char **argv);
int kite_bench_grammar(int argc, char **argv) {
    const char *model_path = NULL, *tokenizer = NULL, *schema_file = NULL, *gbnf_file = NULL, *regex = NULL, *draft = NULL;
    const char *prompt_text = "Write the customer record as JSON:";
    long gen_tokens = 128, runs = 3, threads = 0, budget = 0;
    float temperature = 1.0f;
    bool json = false;
    for (int i = 2; i < argc; i++) {
        const char *opt = argv[i];
        if (!strcmp(opt, "--grammar")) continue;
        if (!strcmp(opt, "--help") || !strcmp(opt, "-h")) {
            fputs(GRAMMAR_BENCH_USAGE, stdout);
            return 0;
        }
        if (!strcmp(opt, "--json")) {
            json = true;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "kite: error: option %s needs a value (see kite bench --grammar --help)\n", opt);
            return 2;
        }
        const char *val = argv[++i];
        char *end = NULL;
        errno = 0;
        if (!strcmp(opt, "--model") || !strcmp(opt, "-m")) model_path = val;
        else if (!strcmp(opt, "--tokenizer")) tokenizer = val;
        else if (!strcmp(opt, "--json-schema")) schema_file = val;
        else if (!strcmp(opt, "--gbnf")) gbnf_file = val;
        else if (!strcmp(opt, "--regex")) regex = val;
        else if (!strcmp(opt, "--draft")) draft = val;
        else if (!strcmp(opt, "--prompt")) prompt_text = val;
        else if (!strcmp(opt, "--temperature")) {
            temperature = strtof(val, &end);
            if (errno || *end || !(temperature >= 0)) return bench_fail(2, "--temperature expects a number >= 0");
        } else {
            long *slot = !strcmp(opt, "--gen-tokens") ? &gen_tokens : !strcmp(opt, "--runs") ? &runs : !strcmp(opt, "--threads") ? &threads
                        : !strcmp(opt, "--spec-budget") ? &budget : NULL;
            if (!slot) {
                fprintf(stderr, "kite: error: unknown option %s (see kite bench --grammar --help)\n", opt);
                return 2;
            }
            *slot = strtol(val, &end, 10);
            if (errno || *end || *slot < 1 || *slot > 100000) {
                fprintf(stderr, "kite: error: %s expects an integer in [1, 100000], got '%s'\n", opt, val);
                return 2;
            }
        }
    }
    if (!model_path) return bench_fail(2, "kite bench --grammar needs --model PATH (see kite bench --grammar --help)");
    if ((schema_file != NULL) + (gbnf_file != NULL) + (regex != NULL) > 1)
        return bench_fail(2, "give one of --json-schema, --gbnf and --regex");

    char err[1024];
    char *text = NULL;
    size_t len = 0;
    kite_grammar_kind kind = gbnf_file ? KITE_GRAMMAR_GBNF : regex ? KITE_GRAMMAR_REGEX : KITE_GRAMMAR_JSON_SCHEMA;
    const char *file = schema_file ? schema_file : gbnf_file;
    if (file) {
        if (!(text = kite_cli_read_file(file, &len, err, sizeof err))) return bench_fail(1, err);
    } else {
        const char *src = regex ? regex : DEFAULT_SCHEMA;
        len = strlen(src);
        text = malloc(len + 1);
        if (!text) return bench_fail(1, "out of memory");
        memcpy(text, src, len + 1);
    }
    kite_model_params mp = kite_model_default_params();
    mp.tokenizer_path = tokenizer;
    mp.n_threads = (int)threads;
    kite_model *model = NULL, *draft_model = NULL;
    kite_grammar *grammar = NULL, *again = NULL;
    int rc = 0;
    if (kite_model_open(&model, model_path, &mp, err, sizeof err)) {
        rc = bench_fail(1, err);
        goto done;
    }
    kite_model_info info;
    kite_model_get_info(model, &info);
    /* The first open builds the model's vocabulary index; the second costs only the grammar. */
    struct timespec t0, t1, t2;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (kite_grammar_open(&grammar, model, kind, text, len, err, sizeof err)) {
        rc = bench_fail(1, err);
        goto done;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (kite_grammar_open(&again, model, kind, text, len, err, sizeof err)) {
        rc = bench_fail(1, err);
        goto done;
    }
    clock_gettime(CLOCK_MONOTONIC, &t2);
    double first_open_ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-6;
    double open_ms = (double)(t2.tv_sec - t1.tv_sec) * 1e3 + (double)(t2.tv_nsec - t1.tv_nsec) * 1e-6;

    int32_t prompt[512];
    size_t n_prompt = 0;
    if (kite_tokenize(model, prompt_text, strlen(prompt_text), info.add_bos, false, prompt, 512, &n_prompt, err, sizeof err)) {
        rc = bench_fail(1, err);
        goto done;
    }
    kite_gen_params gp = kite_gen_default_params();
    gp.temperature = temperature;
    gp.top_k = 0, gp.top_p = 1.0f, gp.min_p = 0.0f;
    gp.max_tokens = (int32_t)gen_tokens;
    totals free_run, constrained;
    if (run_all(model, prompt, n_prompt, gp, (int)runs, (int)threads, NULL, &free_run, err, sizeof err) ||
        (gp.grammar = grammar, run_all(model, prompt, n_prompt, gp, (int)runs, (int)threads, NULL, &constrained, err, sizeof err))) {
        rc = bench_fail(1, err);
        goto done;
    }
    /* decode_ms counts every token after each run's first. */
    int64_t decoded = constrained.tokens - runs;
    double ms_per_token = decoded > 0 ? constrained.decode_ms / (double)decoded : 0;
    double free_ms_per_token = free_run.tokens > runs ? free_run.decode_ms / (double)(free_run.tokens - runs) : 0;
    double grammar_per_token = constrained.tokens ? constrained.grammar_ms / (double)constrained.tokens : 0;
    double first_visit_ms = constrained.masks ? constrained.mask_ms / (double)constrained.masks : 0;
    double cached_per_token = constrained.tokens ? (constrained.grammar_ms - constrained.mask_ms) / (double)constrained.tokens : 0;
    totals spec_forced = {0}, spec_plain = {0};
    if (draft) {
        kite_spec_params sp = kite_spec_default_params();
        sp.budget = budget > 32 ? 32 : (int32_t)budget;
        if (!strcmp(draft, "ngram")) {
            sp.drafter = KITE_DRAFT_NGRAM;
        } else {
            kite_model_params dp = kite_model_default_params();
            dp.tokenizer_path = tokenizer;
            dp.n_threads = (int)threads;
            if (kite_model_open(&draft_model, draft, &dp, err, sizeof err)) {
                rc = bench_fail(1, err);
                goto done;
            }
            sp.drafter = KITE_DRAFT_MODEL;
            sp.draft_model = draft_model;
        }
        if (run_all(model, prompt, n_prompt, gp, (int)runs, (int)threads, &sp, &spec_forced, err, sizeof err)) {
            rc = bench_fail(1, err);
            goto done;
        }
        sp.no_forced_drafts = true;
        if (run_all(model, prompt, n_prompt, gp, (int)runs, (int)threads, &sp, &spec_plain, err, sizeof err)) {
            rc = bench_fail(1, err);
            goto done;
        }
    }
    double tau_forced = spec_forced.passes ? (double)(spec_forced.accepted + spec_forced.passes) / (double)spec_forced.passes : 0;
    double tau_plain = spec_plain.passes ? (double)(spec_plain.accepted + spec_plain.passes) / (double)spec_plain.passes : 0;
    if (json) {
        json_t *o = json_pack("{s:i,s:f,s:f,s:I,s:i,s:f,s:f,s:f,s:f,s:I,s:I,s:f,s:f}", "n_vocab", info.n_vocab, "first_open_ms",
                              first_open_ms, "open_ms", open_ms, "tokens", (json_int_t)constrained.tokens, "complete",
                              constrained.complete, "decode_ms_per_token", ms_per_token, "free_decode_ms_per_token",
                              free_ms_per_token, "grammar_ms_per_token", grammar_per_token, "grammar_fraction",
                              ms_per_token > 0 ? grammar_per_token / ms_per_token : 0.0, "first_visits",
                              (json_int_t)constrained.masks, "cache_hits", (json_int_t)constrained.hits, "first_visit_ms",
                              first_visit_ms, "cached_ms_per_token", cached_per_token);
        if (draft) {
            json_object_set_new(o, "tau_forced_drafts", json_real(tau_forced));
            json_object_set_new(o, "tau_without_forced_drafts", json_real(tau_plain));
        }
        char *dump = json_dumps(o, JSON_COMPACT);
        if (dump) puts(dump);
        free(dump);
        json_decref(o);
    } else {
        printf("vocabulary %d tokens: index and first grammar %.1f ms, a later grammar %.2f ms\n", info.n_vocab, first_open_ms,
               open_ms);
        printf("constrained: %lld tokens in %ld runs (%d complete), decode %.3f ms/token (free %.3f ms/token)\n",
               (long long)constrained.tokens, runs, constrained.complete, ms_per_token, free_ms_per_token);
        printf("grammar: %.4f ms/token = %.2f%% of decode; first visits %lld at %.3f ms each, cached %lld hits, %.4f "
               "ms/token (lookup, mask, advance)\n",
               grammar_per_token, ms_per_token > 0 ? 100.0 * grammar_per_token / ms_per_token : 0.0, (long long)constrained.masks,
               first_visit_ms, (long long)constrained.hits, cached_per_token);
        if (draft)
            printf("speculative (%s): tau %.3f with forced drafts, %.3f without (%lld / %lld passes)\n", draft, tau_forced,
                   tau_plain, (long long)spec_forced.passes, (long long)spec_plain.passes);
    }
done:
    free(text);
    kite_grammar_free(grammar);
    kite_grammar_free(again);
    kite_model_free(draft_model);
    kite_model_free(model);
    return rc;
}
