/* kite perplexity, kite kld, kite imatrix: a model's quality over a text (llama.cpp's llama-perplexity,
 * llama-perplexity --kl-divergence and llama-imatrix, with their chunking, statistics and printouts).
 * Progress goes to stderr, results to stdout. Uses only kite.h. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat_common.h"
#include "kite.h"

static const char PERPLEXITY_USAGE[] =
    "usage: kite perplexity --model PATH --text FILE [options]\n"
    "\n"
    "Perplexity of the model over a text, as llama-perplexity computes it: the text is cut into chunks of\n"
    "--ctx tokens, each evaluated from an empty context with BOS first, and only the second half of each\n"
    "chunk is scored. The text must hold two chunks at least.\n";

static const char KLD_USAGE[] =
    "usage: kite kld --model A --reference B --text FILE [options]\n"
    "\n"
    "KL divergence of model A (e.g. a quantized file) from the reference B (e.g. F32) over a text, with\n"
    "the statistics llama-perplexity --kl-divergence prints: perplexities of both and their ratio, KLD\n"
    "mean and quantiles, the change of the next token's probability (Δp), and how often the top tokens\n"
    "agree. Both models run side by side; they must share the vocabulary.\n";

static const char IMATRIX_USAGE[] =
    "usage: kite imatrix --model PATH --text FILE [-o imatrix.gguf] [options]\n"
    "\n"
    "Importance matrix over calibration text, as llama-imatrix computes it: for every matrix of the\n"
    "model's blocks, the sum of each input column's squared activations over the text's chunks, in\n"
    "llama.cpp's imatrix file (GGUF, or the legacy .dat format), for kite quantize or llama-quantize\n"
    "--imatrix. Also prints the perplexity over the same chunks.\n"
    "\n"
    "  -o, --output PATH           the file to write (default imatrix.gguf)\n"
    "  --output-format gguf|dat    GGUF (default) or llama.cpp's legacy format\n"
    "  --process-output            also collect the output head's inputs (output.weight)\n";

static const char COMMON_OPTIONS[] =
    "\n"
    "  -m, --model PATH            the model (GGUF, Hugging Face folder, llama2.c .bin)\n"
    "  -f, --text FILE             the text (UTF-8)\n"
    "  -c, --ctx N                 tokens per chunk (default 512)\n"
    "  --chunks N                  chunks to use at most (default: all the text holds)\n"
    "  -t, --threads N             worker threads (default: all cores)\n"
    "  --cache-type f16|f32        KV cache precision (default f16, as llama.cpp)\n"
    "  --tokenizer PATH            a tokenizer for models that carry none (llama2.c .bin)\n"
    "  --parse-special             special-token text in the file becomes special tokens\n"
    "  --json                      print the results as one JSON object\n"
    "  -q, --quiet                 no progress on stderr\n";

typedef enum verb { VERB_PERPLEXITY, VERB_KLD, VERB_IMATRIX } verb;

typedef struct ppl_args {
    const char *model, *reference, *text, *output, *tokenizer, *cache_type, *format;
    long long ctx, chunks, threads;
    bool json, quiet, parse_special, process_output, help;
} ppl_args;

static int usage_error(const char *verb_name, const char *fmt, const char *arg) {
    fprintf(stderr, "kite: error: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (see kite %s --help)\n", verb_name);
    return 2;
}

static bool parse_count(const char *s, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return false;
    *out = v;
    return true;
}

static int parse(int argc, char **argv, verb v, const char *name, ppl_args *a) {
    for (int i = 2; i < argc; i++) {
        const char *opt = argv[i];
        static const char *const aliases[][2] = {{"-m", "--model"}, {"-f", "--text"},    {"--file", "--text"},
                                                 {"-c", "--ctx"},   {"-t", "--threads"}, {"-o", "--output"},
                                                 {"-q", "--quiet"}, {"-h", "--help"}};
        for (size_t k = 0; k < sizeof aliases / sizeof *aliases; k++)
            if (!strcmp(opt, aliases[k][0])) opt = aliases[k][1];
        if (!strcmp(opt, "--help")) { a->help = true; continue; }
        if (!strcmp(opt, "--json")) { a->json = true; continue; }
        if (!strcmp(opt, "--quiet")) { a->quiet = true; continue; }
        if (!strcmp(opt, "--parse-special")) { a->parse_special = true; continue; }
        if (v == VERB_IMATRIX && !strcmp(opt, "--process-output")) { a->process_output = true; continue; }
        const char **str = !strcmp(opt, "--model")                           ? &a->model
                           : !strcmp(opt, "--text")                          ? &a->text
                           : !strcmp(opt, "--tokenizer")                     ? &a->tokenizer
                           : !strcmp(opt, "--cache-type")                    ? &a->cache_type
                           : v == VERB_KLD && !strcmp(opt, "--reference")    ? &a->reference
                           : v == VERB_IMATRIX && !strcmp(opt, "--output")   ? &a->output
                           : v == VERB_IMATRIX && !strcmp(opt, "--output-format") ? &a->format
                                                                                  : NULL;
        long long *num = !strcmp(opt, "--ctx") ? &a->ctx : !strcmp(opt, "--chunks") ? &a->chunks
                         : !strcmp(opt, "--threads")                                 ? &a->threads
                                                                                     : NULL;
        if (!str && !num) return usage_error(name, "unknown option %s", opt);
        if (i + 1 >= argc) return usage_error(name, "option %s needs a value", opt);
        const char *val = argv[++i];
        if (str) {
            *str = val;
            continue;
        }
        long long lo = num == &a->ctx ? 8 : 1, hi = num == &a->ctx ? 1 << 20 : num == &a->threads ? 1024 : 1 << 30;
        if (!parse_count(val, lo, hi, num)) {
            fprintf(stderr, "kite: error: %s expects an integer in [%lld, %lld], got '%s' (see kite %s --help)\n", opt, lo, hi,
                    val, name);
            return 2;
        }
    }
    return 0;
}

static int open_model(kite_model **m, const char *path, const ppl_args *a) {
    kite_model_params mp = kite_model_default_params();
    mp.tokenizer_path = a->tokenizer;
    mp.n_threads = (int)a->threads;
    char err[1024];
    if (kite_model_open(m, path, &mp, err, sizeof err)) {
        fprintf(stderr, "kite: error: %s\n", err);
        return 1;
    }
    return 0;
}

/* ---- progress ------------------------------------------------------------------------------------ */
typedef struct progress_ctx {
    verb v;
} progress_ctx;

static bool on_progress(const kite_quality_progress *p, void *user_data) {
    const progress_ctx *pc = user_data;
    if (p->chunk == 1) {
        double eta_s = p->ms / 1000.0 * (double)p->n_chunks;
        fprintf(stderr, "%.2f seconds per pass - ETA %.2f minutes\n", p->ms / 1000.0, eta_s / 60.0);
        if (pc->v == VERB_KLD)
            fprintf(stderr, "chunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence              Δp RMS            Same top p\n");
    }
    if (pc->v == VERB_KLD)
        fprintf(stderr, "%4d    %9.4f               %10.5f               %10.5f              %6.3f %%            %6.3f %%\n",
                p->chunk, p->ppl, p->ln_ppl_ratio, p->kld, 100.0 * p->p_diff_rms, 100.0 * p->same_top);
    else {
        fprintf(stderr, "[%d]%.4f,", p->chunk, p->ppl);
        if (p->chunk == p->n_chunks) fputc('\n', stderr);
    }
    return true;
}

/* ---- results ------------------------------------------------------------------------------------- */
static int emit_json(json_t *o) {
    char *text = json_dumps(o, JSON_REAL_PRECISION(10));
    json_decref(o);
    if (!text) {
        fprintf(stderr, "kite: error: out of memory\n");
        return 1;
    }
    puts(text);
    free(text);
    return 0;
}

static void print_kld(const kite_kld_result *r) {
    static const double kq[KITE_KLD_N_QUANTILES] = KITE_KLD_QUANTILES;
    static const double pq[KITE_P_DIFF_N_QUANTILES] = KITE_P_DIFF_QUANTILES;
    printf("====== Perplexity statistics ======\n");
    printf("Mean PPL(Q)                   : %10.6f ± %10.6f\n", r->ppl, r->ppl_error);
    printf("Mean PPL(base)                : %10.6f ± %10.6f\n", r->ppl_ref, r->ppl_ref_error);
    printf("Cor(ln(PPL(Q)), ln(PPL(base))): %6.2f%%\n", 100.0 * r->ln_ppl_correlation);
    printf("Mean ln(PPL(Q)/PPL(base))     : %10.6f ± %10.6f\n", r->ln_ppl_ratio, r->ln_ppl_ratio_error);
    printf("Mean PPL(Q)/PPL(base)         : %10.6f ± %10.6f\n", r->ppl_ratio, r->ppl_ratio_error);
    printf("Mean PPL(Q)-PPL(base)         : %10.6f ± %10.6f\n", r->ppl_diff, r->ppl_diff_error);
    printf("\n====== KL divergence statistics ======\n");
    printf("Mean    KLD: %10.6f ± %10.6f\n", r->kld, r->kld_error);
    for (int i = 0; i < KITE_KLD_N_QUANTILES; i++) {
        char label[16];
        if (kq[i] == 1.0) snprintf(label, sizeof label, "Maximum");
        else if (kq[i] == 0.5) snprintf(label, sizeof label, "Median ");
        else if (kq[i] == 0.0) snprintf(label, sizeof label, "Minimum");
        else snprintf(label, sizeof label, "%4.1f%%  ", 100.0 * kq[i]);
        printf("%s KLD: %10.6f\n", label, r->kld_quantile[i]);
    }
    printf("\n====== Token probability statistics ======\n");
    printf("Mean    Δp: %6.3f ± %5.3f %%\n", 100.0 * r->p_diff, 100.0 * r->p_diff_error);
    for (int i = 0; i < KITE_P_DIFF_N_QUANTILES; i++) {
        char label[16];
        if (pq[i] == 1.0) snprintf(label, sizeof label, "Maximum");
        else if (pq[i] == 0.5) snprintf(label, sizeof label, "Median ");
        else if (pq[i] == 0.0) snprintf(label, sizeof label, "Minimum");
        else snprintf(label, sizeof label, "%4.1f%%  ", 100.0 * pq[i]);
        printf("%s Δp: %6.3f%%\n", label, 100.0 * r->p_diff_quantile[i]);
    }
    printf("RMS Δp    : %6.3f ± %5.3f %%\n", 100.0 * r->p_diff_rms, 100.0 * r->p_diff_rms_error);
    printf("Same top p: %6.3f ± %5.3f %%\n", 100.0 * r->same_top, 100.0 * r->same_top_error);
}

static json_t *kld_json(const kite_kld_result *r) {
    static const double kq[KITE_KLD_N_QUANTILES] = KITE_KLD_QUANTILES;
    static const double pq[KITE_P_DIFF_N_QUANTILES] = KITE_P_DIFF_QUANTILES;
    json_t *kquant = json_object(), *pquant = json_object();
    for (int i = 0; i < KITE_KLD_N_QUANTILES; i++) {
        char key[16];
        snprintf(key, sizeof key, "%g", kq[i]);
        json_object_set_new(kquant, key, json_real(r->kld_quantile[i]));
    }
    for (int i = 0; i < KITE_P_DIFF_N_QUANTILES; i++) {
        char key[16];
        snprintf(key, sizeof key, "%g", pq[i]);
        json_object_set_new(pquant, key, json_real(r->p_diff_quantile[i]));
    }
    return json_pack("{s:I,s:i,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:o,s:f,s:f,s:o,s:f,s:f,s:f,s:f}",
                     "n_scored", (json_int_t)r->n_scored, "n_chunks", r->n_chunks, "ppl", r->ppl, "ppl_error",
                     r->ppl_error, "ppl_ref", r->ppl_ref, "ppl_ref_error", r->ppl_ref_error, "ln_ppl_correlation",
                     r->ln_ppl_correlation, "ln_ppl_ratio", r->ln_ppl_ratio, "ln_ppl_ratio_error", r->ln_ppl_ratio_error,
                     "ppl_ratio", r->ppl_ratio, "ppl_ratio_error", r->ppl_ratio_error, "ppl_diff", r->ppl_diff,
                     "ppl_diff_error", r->ppl_diff_error, "kld", r->kld, "kld_error", r->kld_error, "kld_quantiles", kquant,
                     "p_diff", r->p_diff, "p_diff_error", r->p_diff_error, "p_diff_quantiles", pquant, "p_diff_rms",
                     r->p_diff_rms, "p_diff_rms_error", r->p_diff_rms_error, "same_top", r->same_top, "same_top_error",
                     r->same_top_error);
}

static int run_verb(int argc, char **argv, verb v) {
    const char *name = v == VERB_KLD ? "kld" : v == VERB_IMATRIX ? "imatrix" : "perplexity";
    ppl_args a = {0};
    int rc = parse(argc, argv, v, name, &a);
    if (rc) return rc;
    if (a.help) {
        fputs(v == VERB_KLD ? KLD_USAGE : v == VERB_IMATRIX ? IMATRIX_USAGE : PERPLEXITY_USAGE, stdout);
        fputs(COMMON_OPTIONS, stdout);
        if (v == VERB_KLD) fputs("  --reference PATH            the reference model B (required)\n", stdout);
        return 0;
    }
    if (!a.model) return usage_error(name, "kite %s needs --model PATH", name);
    if (!a.text) return usage_error(name, "kite %s needs --text FILE", name);
    if (v == VERB_KLD && !a.reference) return usage_error(name, "kite %s needs --reference PATH", name);
    kite_kv_type kv = KITE_KV_F16;
    if (a.cache_type && !strcmp(a.cache_type, "f32")) kv = KITE_KV_F32;
    else if (a.cache_type && strcmp(a.cache_type, "f16"))
        return usage_error(name, "--cache-type must be f16 or f32, not '%s'", a.cache_type);
    bool legacy = false;
    if (a.format && !strcmp(a.format, "dat")) legacy = true;
    else if (a.format && strcmp(a.format, "gguf"))
        return usage_error(name, "--output-format must be gguf or dat, not '%s'", a.format);

    char err[1024];
    size_t len = 0;
    char *text = kite_cli_read_file(a.text, &len, err, sizeof err);
    if (!text) {
        fprintf(stderr, "kite: error: %s\n", err);
        return 1;
    }
    kite_model *model = NULL, *reference = NULL;
    if (open_model(&model, a.model, &a) || (v == VERB_KLD && open_model(&reference, a.reference, &a))) {
        kite_model_free(model);
        free(text);
        return 1;
    }
    progress_ctx pc = {.v = v};
    kite_quality_params qp = kite_quality_default_params();
    if (a.ctx) qp.n_ctx = (int32_t)a.ctx;
    qp.n_chunks = (int32_t)a.chunks;
    qp.n_threads = (int32_t)a.threads;
    qp.kv_type = kv;
    qp.parse_special = a.parse_special;
    if (!a.quiet) {
        qp.progress = on_progress;
        qp.progress_user_data = &pc;
    }
    int st;
    if (v == VERB_PERPLEXITY) {
        kite_perplexity_result r;
        st = kite_perplexity(model, text, len, &qp, &r, err, sizeof err);
        if (!st) {
            if (a.json)
                rc = emit_json(json_pack("{s:f,s:f,s:f,s:I,s:i,s:i,s:I}", "ppl", r.ppl, "ppl_error", r.ppl_error, "mean_nll",
                                         r.mean_nll, "n_scored", (json_int_t)r.n_scored, "n_chunks", r.n_chunks, "n_ctx",
                                         qp.n_ctx, "n_text_tokens", (json_int_t)r.n_text_tokens));
            else
                printf("Final estimate: PPL = %.4f +/- %.5f\n", r.ppl, r.ppl_error);
        }
    } else if (v == VERB_KLD) {
        kite_kld_result r;
        st = kite_kld(model, reference, text, len, &qp, &r, err, sizeof err);
        if (!st) {
            if (a.json) rc = emit_json(kld_json(&r));
            else print_kld(&r);
        }
    } else {
        kite_imatrix_params ip = kite_imatrix_default_params();
        ip.quality = qp;
        ip.output_path = a.output ? a.output : "imatrix.gguf";
        ip.legacy_format = legacy;
        ip.process_output = a.process_output;
        ip.dataset = a.text;
        kite_imatrix_result r;
        st = kite_imatrix_compute(model, text, len, &ip, &r, err, sizeof err);
        if (!st) {
            if (a.json)
                rc = emit_json(json_pack("{s:s,s:s,s:i,s:i,s:i,s:f,s:f}", "output", ip.output_path, "format",
                                         legacy ? "dat" : "gguf", "n_entries", r.n_entries, "n_chunks", r.n_chunks,
                                         "chunk_size", qp.n_ctx, "ppl", r.ppl, "ppl_error", r.ppl_error));
            else
                printf("Final estimate: PPL = %.4f +/- %.5f\nstored %d entries computed over %d chunks of %d tokens in %s\n",
                       r.ppl, r.ppl_error, r.n_entries, r.n_chunks, qp.n_ctx, ip.output_path);
        }
    }
    if (st) {
        fprintf(stderr, "kite: error: %s\n", err);
        rc = 1;
    }
    kite_model_free(model);
    kite_model_free(reference);
    free(text);
    return rc;
}

int kite_cmd_perplexity(int argc, char **argv);
int kite_cmd_kld(int argc, char **argv);
int kite_cmd_imatrix(int argc, char **argv);
int kite_cmd_perplexity(int argc, char **argv) { return run_verb(argc, argv, VERB_PERPLEXITY); }
int kite_cmd_kld(int argc, char **argv) { return run_verb(argc, argv, VERB_KLD); }
int kite_cmd_imatrix(int argc, char **argv) { return run_verb(argc, argv, VERB_IMATRIX); }
