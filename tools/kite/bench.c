/* kite bench and kite gen-model: speed measurements against the machine's own limits, and random
 * models of real shapes to measure on. Uses only the public API (kite.h) and jansson.
 *
 * What one `kite bench` run does, in this order, so the figures are taken close together:
 *   warm-up   one short prompt (faults the mapped weights in, wakes the workers)
 *   per rep   for each prompt length P: reset, kite_prompt(P tokens), generate 1 token -> prefill, TTFT
 *             batch curve: reset, prompt D tokens, then kite_eval(B tokens) and truncate back to D,
 *               for B = 1, 2, 4, 8, 16, 32
 *             decode: reset, prompt 1 token, generate G tokens greedily (end tokens ignored)
 *   then      peak RSS, then kite_hw_probe with the same thread count (after RSS, so its buffer is
 *             not counted)
 * Every figure is the median over reps, with min and max alongside.
 *
 * Prompt tokens are pseudo-random ids (the first is BOS when the model adds one), the same in every
 * run, as llama-bench does; so the hash of the generated tokens identifies the output of a model,
 * kernel set and thread count, and a faster run that changes it has changed the arithmetic. */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "default_model.h"
#include "kite.h"
#include "cli_util.h"

int kite_cmd_bench(int argc, char **argv);
int kite_cmd_gen_model(int argc, char **argv);

static int bench_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bench_fail(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "kite: error: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return code;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* "128,512" -> values in [lo, hi]; at most max_n. */
static bool parse_list(const char *s, long lo, long hi, int32_t *out, int max_n, int *n) {
    *n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < lo || v > hi || *n == max_n) return false;
        out[(*n)++] = (int32_t)v;
        if (*end == ',') end++;
        else if (*end) return false;
        p = end;
    }
    return *n > 0;
}

/* ---- statistics over reps ---------------------------------------------------------------------- */
static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct spread { double median, min, max; } spread;

static spread spread_of(const double *v, int n) {
    spread s = {0, 0, 0};
    if (n <= 0) return s;
    double *c = malloc((size_t)n * sizeof *c);
    if (!c) return s;
    memcpy(c, v, (size_t)n * sizeof *c);
    qsort(c, (size_t)n, sizeof *c, cmp_double);
    s.min = c[0];
    s.max = c[n - 1];
    s.median = n % 2 ? c[n / 2] : 0.5 * (c[n / 2 - 1] + c[n / 2]);
    free(c);
    return s;
}

static json_t *spread_json(spread s) { return json_pack("{s:f,s:f,s:f}", "median", s.median, "min", s.min, "max", s.max); }

/* ---- hashes ------------------------------------------------------------------------------------- */
#define FNV_OFFSET 0xcbf29ce484222325ull
#define FNV_PRIME 0x100000001b3ull
static uint64_t fnv1a(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * FNV_PRIME;
    return h;
}

/* FNV-1a 64 over the file's first MiB, its last MiB (the whole file once when it is shorter than
 * 2 MiB) and its size as 8 little-endian bytes: cheap on multi-GB files, and it changes when the
 * header, the tokenizer, the first or last tensors or the length change. */
static int model_file_hash(const char *path, uint64_t *hash, uint64_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    struct stat st;
    if (fstat(fileno(f), &st) != 0) { fclose(f); return -1; }
    uint64_t n = (uint64_t)st.st_size, h = FNV_OFFSET;
    const size_t mib = (size_t)1 << 20;
    unsigned char *buf = malloc(mib);
    if (!buf) { fclose(f); return -1; }
    uint64_t ranges[2][2] = {{0, n < 2 * mib ? n : mib}, {n < 2 * mib ? n : n - mib, n}};
    for (int r = 0; r < 2; r++) {
        if (fseeko(f, (off_t)ranges[r][0], SEEK_SET) != 0) { free(buf); fclose(f); return -1; }
        for (uint64_t at = ranges[r][0]; at < ranges[r][1];) {
            size_t want = (size_t)(ranges[r][1] - at < mib ? ranges[r][1] - at : mib);
            size_t got = fread(buf, 1, want, f);
            if (got == 0) { free(buf); fclose(f); return -1; }
            h = fnv1a(h, buf, got);
            at += got;
        }
    }
    unsigned char le[8];
    for (int i = 0; i < 8; i++) le[i] = (unsigned char)(n >> (8 * i));
    h = fnv1a(h, le, 8);
    free(buf);
    fclose(f);
    *hash = h;
    *size = n;
    return 0;
}

/* ---- the hardware probe ------------------------------------------------------------------------- */
static json_t *hw_json(const kite_hw_info *h) {
    return json_pack("{s:s,s:i,s:i,s:f,s:f,s:f,s:f,s:f}", "kernels", h->kernels, "n_cpus", h->n_cpus, "n_threads", h->n_threads,
                     "read_gbs_1t", h->read_gbs_1t, "read_gbs", h->read_gbs, "int8_gops_1t", h->int8_gops_1t, "int8_gops",
                     h->int8_gops, "f32_gflops", h->f32_gflops);
}

static void print_json(json_t *root) {
    char *dump = json_dumps(root, JSON_COMPACT | JSON_ENSURE_ASCII | JSON_REAL_PRECISION(6));
    if (dump) puts(dump);
    free(dump);
}

/* ---- kite bench --------------------------------------------------------------------------------- */
static const char BENCH_USAGE[] =
    "usage: kite bench --model PATH [options]\n"
    "       kite bench --hw [--threads N] [--json]\n"
    "\n"
    "Measures prefill, time to first token, decode and the batch curve of a model, next to the machine's\n"
    "own read bandwidth and int8 peak (measured in the same run). --hw prints only the machine probe.\n"
    "\n"
    "  --model, -m PATH       model file (GGUF, llama2.c .bin, Hugging Face folder)\n"
    "  --tokenizer PATH       tokenizer for checkpoints without one\n"
    "  --threads N            worker threads (default: all cores)\n"
    "  --prompt-tokens LIST   prompt lengths for prefill, comma-separated (default 128,512)\n"
    "  --gen-tokens N         tokens to decode (default 128)\n"
    "  --batch-curve          also time one pass over B = 1, 2, 4, 8, 16, 32 tokens\n"
    "  --batch-sizes LIST     the B values of the batch curve (default 1,2,4,8,16,32)\n"
    "  --batch-depth D        tokens in the context before each batch pass (default 64)\n"
    "  --batch-passes N       passes per batch size and rep (default 1); medians over all of them\n"
    "  --cache-type T         KV cache precision: f16 (default), f32, q8_0, q4_0\n"
    "  --reps R               repetitions; figures are medians (default 3)\n"
    "  --hw-seconds S         time given to the machine probe (default 1.5)\n"
    "  --no-hw                skip the machine probe (no fractions)\n"
    "  --json                 print one JSON object\n"
    "  --spec                 speculative decoding on prompt sets instead (see kite bench --spec --help)\n"
    "  --grammar              the cost of grammar-constrained decoding instead (see kite bench --grammar --help)\n"
    "\n"
    "Decode reads every weight once per token except the embedding table, which is only gathered\n"
    "(unless the output reuses it): bandwidth_gbs is those bytes times tokens per second.\n"
    "prefill GOP/s counts 2 x matrix parameters per token (attention's own products not included).\n"
    "The model hash is FNV-1a 64 of the file's first MiB, last MiB and size (8 bytes, little-endian);\n"
    "the tokens hash is FNV-1a 64 of the generated ids as 32-bit little-endian integers.\n";

enum { MAX_LIST = 16 };

typedef struct bench_args {
    const char *model, *tokenizer;
    int32_t threads;
    kite_kv_type kv_type;
    int32_t prompt_lens[MAX_LIST];
    int n_prompt_lens;
    int32_t gen_tokens;
    bool batch_curve;
    int32_t batch_sizes[MAX_LIST];
    int n_batch_sizes;
    int32_t batch_depth;
    int32_t batch_passes;
    int32_t reps;
    double hw_seconds;
    bool hw_only, no_hw, json, help;
    bool prompt_lens_given, gen_tokens_given, batch_depth_given; /* else the defaults shrink to fit a small model */
} bench_args;

static int parse_bench_args(int argc, char **argv, bench_args *a) {
    a->prompt_lens[0] = 128, a->prompt_lens[1] = 512, a->n_prompt_lens = 2;
    a->gen_tokens = 128;
    static const int32_t default_batches[] = {1, 2, 4, 8, 16, 32};
    memcpy(a->batch_sizes, default_batches, sizeof default_batches);
    a->n_batch_sizes = 6;
    a->batch_depth = 64;
    a->batch_passes = 1;
    a->reps = 3;
    a->hw_seconds = 1.5;
    for (int i = 2; i < argc; i++) {
        const char *opt = argv[i];
        if (!strcmp(opt, "--help") || !strcmp(opt, "-h")) { a->help = true; continue; }
        if (!strcmp(opt, "--json")) { a->json = true; continue; }
        if (!strcmp(opt, "--hw")) { a->hw_only = true; continue; }
        if (!strcmp(opt, "--no-hw")) { a->no_hw = true; continue; }
        if (!strcmp(opt, "--batch-curve")) { a->batch_curve = true; continue; }
        if (opt[0] != '-') return bench_fail(2, "unexpected argument '%s' (see kite bench --help)", opt);
        if (i + 1 >= argc) return bench_fail(2, "option %s needs a value (see kite bench --help)", opt);
        const char *val = argv[++i];
        long v;
        if (!strcmp(opt, "--model") || !strcmp(opt, "-m")) a->model = val;
        else if (!strcmp(opt, "--tokenizer")) a->tokenizer = val;
        else if (!strcmp(opt, "--threads")) {
            if (!kite_cli_parse_long(val, 1, 1024, &v)) return bench_fail(2, "--threads expects an integer in [1, 1024], got '%s'", val);
            a->threads = (int32_t)v;
        } else if (!strcmp(opt, "--prompt-tokens")) {
            if (!parse_list(val, 1, 1 << 20, a->prompt_lens, MAX_LIST, &a->n_prompt_lens))
                return bench_fail(2, "--prompt-tokens expects up to %d comma-separated lengths >= 1, got '%s'", MAX_LIST, val);
            a->prompt_lens_given = true;
        } else if (!strcmp(opt, "--gen-tokens")) {
            if (!kite_cli_parse_long(val, 2, 1 << 20, &v)) return bench_fail(2, "--gen-tokens expects an integer >= 2, got '%s'", val);
            a->gen_tokens = (int32_t)v;
            a->gen_tokens_given = true;
        } else if (!strcmp(opt, "--batch-sizes")) {
            if (!parse_list(val, 1, 4096, a->batch_sizes, MAX_LIST, &a->n_batch_sizes))
                return bench_fail(2, "--batch-sizes expects up to %d comma-separated sizes in [1, 4096], got '%s'", MAX_LIST, val);
            a->batch_curve = true;
        } else if (!strcmp(opt, "--batch-depth")) {
            if (!kite_cli_parse_long(val, 1, 1 << 20, &v)) return bench_fail(2, "--batch-depth expects an integer >= 1, got '%s'", val);
            a->batch_depth = (int32_t)v;
            a->batch_depth_given = true;
        } else if (!strcmp(opt, "--batch-passes")) {
            if (!kite_cli_parse_long(val, 1, 1000, &v)) return bench_fail(2, "--batch-passes expects an integer in [1, 1000], got '%s'", val);
            a->batch_passes = (int32_t)v;
        } else if (!strcmp(opt, "--cache-type")) {
            if (!kite_kv_type_from_name(val, &a->kv_type))
                return bench_fail(2, "--cache-type expects f16, f32, q8_0 or q4_0, got '%s'", val);
        } else if (!strcmp(opt, "--reps")) {
            if (!kite_cli_parse_long(val, 1, 1000, &v)) return bench_fail(2, "--reps expects an integer in [1, 1000], got '%s'", val);
            a->reps = (int32_t)v;
        } else if (!strcmp(opt, "--hw-seconds")) {
            char *end;
            errno = 0;
            double d = strtod(val, &end);
            if (errno || end == val || *end || !(d > 0) || d > 600) return bench_fail(2, "--hw-seconds expects a number in (0, 600], got '%s'", val);
            a->hw_seconds = d;
        } else {
            return bench_fail(2, "unknown option %s (see kite bench --help)", opt);
        }
    }
    return 0;
}

static int run_hw_only(const bench_args *a) {
    kite_hw_info hw;
    char err[512];
    if (kite_hw_probe(a->threads, a->hw_seconds, &hw, err, sizeof err)) return bench_fail(1, "%s", err);
    if (a->json) {
        json_t *root = hw_json(&hw);
        print_json(root);
        json_decref(root);
        return 0;
    }
    printf("kernels:          %s\n", hw.kernels);
    printf("cpus:             %d (probe used %d threads)\n", hw.n_cpus, hw.n_threads);
    printf("read bandwidth:   %.1f GB/s (1 thread), %.1f GB/s (%d threads)\n", hw.read_gbs_1t, hw.read_gbs, hw.n_threads);
    printf("int8 peak:        %.0f GOP/s (1 thread), %.0f GOP/s (%d threads)\n", hw.int8_gops_1t, hw.int8_gops, hw.n_threads);
    printf("fp32 FMA peak:    %.0f GFLOP/s (%d threads)\n", hw.f32_gflops, hw.n_threads);
    return 0;
}

/* Deterministic pseudo-random token ids (xorshift64), so every run feeds the same prompt. */
static void fill_tokens(int32_t *ids, int32_t n, int32_t n_vocab, int32_t bos, uint64_t seed) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int32_t i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        ids[i] = (int32_t)(s % (uint64_t)n_vocab);
    }
    if (n > 0 && bos >= 0) ids[0] = bos;
}

typedef struct token_sink { uint64_t hash; int64_t count; } token_sink;

static bool sink_token(int32_t id, const char *text, size_t len, void *user) {
    (void)text, (void)len;
    token_sink *s = user;
    unsigned char le[4] = {(unsigned char)id, (unsigned char)(id >> 8), (unsigned char)(id >> 16), (unsigned char)(id >> 24)};
    s->hash = fnv1a(s->hash, le, 4);
    s->count++;
    return true;
}

static int64_t peak_rss_bytes(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return -1;
    return (int64_t)ru.ru_maxrss * 1024; /* Linux reports KiB */
}

static const char *fmt_u64_hex(uint64_t v, char *buf, size_t n) {
    snprintf(buf, n, "%016llx", (unsigned long long)v);
    return buf;
}

static int run_bench(bench_args *a) { /* a: its default lengths may shrink to fit the model */
    char err[512];
    int rc = 0;
    kite_model_params mp = kite_model_default_params();
    mp.tokenizer_path = a->tokenizer;
    mp.n_threads = a->threads;
    kite_model *model = NULL;
    double t_load = now_ms();
    if (kite_model_open(&model, a->model, &mp, err, sizeof err)) return bench_fail(1, "%s", err);
    t_load = now_ms() - t_load;
    kite_model_info info;
    kite_model_get_info(model, &info);

    /* Bytes a decoded token reads and parameters a prefilled token multiplies: all weights but the
     * embedding table, which is gathered row by row, unless the output matrix is that table. */
    uint64_t embd_bytes = 0, expert_bytes = 0;
    int64_t embd_params = 0, expert_params = 0;
    for (int32_t i = 0; i < info.n_tensors; i++) {
        kite_tensor_desc d;
        if (kite_model_tensor(model, i, &d) != 0) continue;
        if (!strcmp(d.name, "token_embd.weight")) {
            embd_bytes = d.n_bytes;
            embd_params = d.shape[0] * (d.n_dims > 1 ? d.shape[1] : 1);
        } else if (info.n_experts > 0 && strstr(d.name, "_exps")) { /* routed experts */
            expert_bytes += d.n_bytes;
            expert_params += d.shape[0] * d.shape[1] * d.shape[2] * d.shape[3];
        }
    }
    uint64_t decode_bytes = info.weight_bytes - (info.tied_embeddings ? 0 : embd_bytes);
    int64_t matmul_params = info.n_params - (info.tied_embeddings ? 0 : embd_params);
    if (info.n_experts > 0) { /* a token reads and multiplies only its n_experts_used experts of each layer */
        decode_bytes -= expert_bytes - expert_bytes / (uint64_t)info.n_experts * (uint64_t)info.n_experts_used;
        matmul_params -= expert_params - expert_params / info.n_experts * info.n_experts_used;
    }

    /* Default lengths a small model's context cannot hold shrink to fit it (stories260K.bin holds 512
     * tokens: prompts of 128 and 511); lengths given on the command line are measured as given, or refused. */
    int32_t fit = info.n_ctx_train - 1; /* the longest prompt or generation a session of n_ctx_train holds */
    bool shrunk = false;
    if (fit >= 2 && !a->prompt_lens_given) {
        int n = 0;
        for (int i = 0; i < a->n_prompt_lens; i++) {
            int32_t len = a->prompt_lens[i] < fit ? a->prompt_lens[i] : fit;
            shrunk |= len != a->prompt_lens[i];
            if (n == 0 || a->prompt_lens[n - 1] != len) a->prompt_lens[n++] = len;
        }
        a->n_prompt_lens = n;
    }
    if (fit >= 2 && !a->gen_tokens_given && a->gen_tokens > fit) {
        a->gen_tokens = fit;
        shrunk = true;
    }
    if (a->batch_curve && !a->batch_depth_given) {
        int32_t widest = 0;
        for (int i = 0; i < a->n_batch_sizes; i++) widest = a->batch_sizes[i] > widest ? a->batch_sizes[i] : widest;
        if (a->batch_depth + widest > info.n_ctx_train && info.n_ctx_train - widest >= 1) {
            a->batch_depth = info.n_ctx_train - widest;
            shrunk = true;
        }
    }
    if (shrunk) {
        fprintf(stderr, "kite bench: %s holds %d tokens of context: prompts of", a->model, info.n_ctx_train);
        for (int i = 0; i < a->n_prompt_lens; i++) fprintf(stderr, "%s%d", i ? ", " : " ", a->prompt_lens[i]);
        fprintf(stderr, " tokens, %d generated\n", a->gen_tokens);
    }

    int32_t max_prompt = 0;
    for (int i = 0; i < a->n_prompt_lens; i++)
        if (a->prompt_lens[i] > max_prompt) max_prompt = a->prompt_lens[i];
    int32_t max_batch = 0;
    for (int i = 0; i < a->n_batch_sizes; i++)
        if (a->batch_sizes[i] > max_batch) max_batch = a->batch_sizes[i];
    int32_t n_ctx = max_prompt + 1;
    if (a->gen_tokens + 1 > n_ctx) n_ctx = a->gen_tokens + 1;
    if (a->batch_curve && a->batch_depth + max_batch > n_ctx) n_ctx = a->batch_depth + max_batch;

    if (n_ctx > info.n_ctx_train) {
        rc = bench_fail(1, "the benchmark needs %d tokens of context; %s was trained for %d", n_ctx, a->model, info.n_ctx_train);
        kite_model_free(model);
        return rc;
    }
    kite_session_params sp = kite_session_default_params();
    sp.n_ctx = n_ctx;
    sp.n_threads = a->threads;
    sp.kv_type = a->kv_type;
    kite_session *s = NULL;
    int32_t *tokens = NULL;
    float *logits = NULL;
    double *samples = NULL, *batch_samples = NULL, *scratch = NULL;
    json_t *root = NULL;
    if (kite_session_open(&s, model, &sp, err, sizeof err)) { rc = bench_fail(1, "%s", err); goto done; }

    int32_t n_tok = max_prompt > a->batch_depth + max_batch ? max_prompt : a->batch_depth + max_batch;
    tokens = malloc((size_t)n_tok * sizeof *tokens);
    logits = a->batch_curve ? malloc((size_t)max_batch * (size_t)info.n_vocab * sizeof *logits) : NULL;
    /* samples[metric][rep]: prefill ms and ttft per prompt length, then decode tok/s;
     * batch_samples[size][rep * passes + pass]: ms of one pass */
    int n_metrics = 2 * a->n_prompt_lens + 1;
    size_t batch_per_size = (size_t)a->reps * (size_t)a->batch_passes;
    samples = calloc((size_t)n_metrics * (size_t)a->reps, sizeof *samples);
    batch_samples = calloc((size_t)a->n_batch_sizes * batch_per_size, sizeof *batch_samples);
    scratch = calloc(batch_per_size > (size_t)a->reps ? batch_per_size : (size_t)a->reps, sizeof *scratch);
    if (!tokens || (a->batch_curve && !logits) || !samples || !batch_samples || !scratch) { rc = bench_fail(1, "out of memory"); goto done; }
    fill_tokens(tokens, n_tok, info.n_vocab, info.add_bos ? info.bos_id : -1, 42);
#define SAMPLE(metric, rep) samples[(size_t)(metric) * (size_t)a->reps + (size_t)(rep)]

    kite_gen_params gp = kite_gen_default_params();
    gp.temperature = 0;
    gp.top_k = 0, gp.top_p = 1, gp.min_p = 0, gp.repeat_penalty = 1, gp.presence_penalty = 0, gp.frequency_penalty = 0;
    gp.ignore_eos = true;

    /* Warm-up: maps the weights in and wakes the threads. */
    int32_t warm = max_prompt < 8 ? max_prompt : 8;
    if (kite_prompt(s, tokens, (size_t)warm, err, sizeof err)) { rc = bench_fail(1, "%s", err); goto done; }
    kite_session_reset(s);

    uint64_t tokens_hash = 0;
    int64_t tokens_generated = 0;
    bool tokens_stable = true;
    for (int32_t rep = 0; rep < a->reps; rep++) {
        if (!a->json) fprintf(stderr, "rep %d/%d\n", rep + 1, a->reps);
        for (int i = 0; i < a->n_prompt_lens; i++) {
            kite_session_reset(s);
            double t0 = now_ms();
            if (kite_prompt(s, tokens, (size_t)a->prompt_lens[i], err, sizeof err)) { rc = bench_fail(1, "%s", err); goto done; }
            double t1 = now_ms();
            gp.max_tokens = 1;
            if (kite_generate(s, &gp, NULL, NULL, err, sizeof err)) { rc = bench_fail(1, "%s", err); goto done; }
            kite_stats st;
            kite_session_stats(s, &st);
            SAMPLE(2 * i, rep) = t1 - t0;
            SAMPLE(2 * i + 1, rep) = st.ttft_ms;
        }
        if (a->batch_curve) {
            kite_session_reset(s);
            if (kite_prompt(s, tokens, (size_t)a->batch_depth, err, sizeof err)) { rc = bench_fail(1, "%s", err); goto done; }
            for (int32_t pass = 0; pass < a->batch_passes; pass++)
                for (int i = 0; i < a->n_batch_sizes; i++) {
                    int32_t b = a->batch_sizes[i];
                    double t0 = now_ms();
                    if (kite_eval(s, tokens + a->batch_depth, (size_t)b, logits, err, sizeof err)) { rc = bench_fail(1, "%s", err); goto done; }
                    batch_samples[(size_t)i * batch_per_size + (size_t)rep * (size_t)a->batch_passes + (size_t)pass] = now_ms() - t0;
                    if (kite_session_truncate(s, a->batch_depth, err, sizeof err)) { rc = bench_fail(1, "%s", err); goto done; }
                }
        }
        kite_session_reset(s);
        if (kite_prompt(s, tokens, 1, err, sizeof err)) { rc = bench_fail(1, "%s", err); goto done; }
        gp.max_tokens = a->gen_tokens;
        token_sink sink = {FNV_OFFSET, 0};
        if (kite_generate(s, &gp, sink_token, &sink, err, sizeof err)) { rc = bench_fail(1, "%s", err); goto done; }
        kite_stats st;
        kite_session_stats(s, &st);
        SAMPLE(n_metrics - 1, rep) = st.decode_tok_s;
        if (rep > 0 && sink.hash != tokens_hash) tokens_stable = false;
        tokens_hash = sink.hash;
        tokens_generated = sink.count;
    }
    int64_t rss = peak_rss_bytes();

    kite_hw_info hw;
    memset(&hw, 0, sizeof hw);
    bool have_hw = false;
    if (!a->no_hw) {
        if (kite_hw_probe(a->threads, a->hw_seconds, &hw, err, sizeof err)) { rc = bench_fail(1, "%s", err); goto done; }
        have_hw = true;
    }

    uint64_t file_hash = 0, file_size = 0;
    bool have_hash = model_file_hash(a->model, &file_hash, &file_size) == 0;
    char hexbuf[2][24];

    /* ---- report ---- */
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    int32_t threads = a->threads ? a->threads : (int32_t)(online > 0 ? online : 1); /* 0 means every core */
    root = json_object();
    json_object_set_new(root, "model", json_string(a->model));
    json_object_set_new(root, "model_size_bytes", json_integer((json_int_t)file_size));
    json_object_set_new(root, "model_hash", have_hash ? json_string(fmt_u64_hex(file_hash, hexbuf[0], sizeof hexbuf[0])) : json_null());
    json_object_set_new(root, "model_hash_method", json_string("fnv1a64(first MiB, last MiB, size u64le)"));
    json_object_set_new(root, "architecture", json_string(info.architecture));
    json_object_set_new(root, "n_params", json_integer((json_int_t)info.n_params));
    json_object_set_new(root, "matmul_params", json_integer((json_int_t)matmul_params));
    json_object_set_new(root, "weight_bytes", json_integer((json_int_t)info.weight_bytes));
    json_object_set_new(root, "decode_bytes_per_token", json_integer((json_int_t)decode_bytes));
    json_object_set_new(root, "load_ms", json_real(t_load));
    json_object_set_new(root, "threads", json_integer(threads));
    json_object_set_new(root, "cache_type", json_string(kite_kv_type_name(a->kv_type)));
    json_object_set_new(root, "kernels", json_string(have_hw ? hw.kernels : "unknown"));
    json_object_set_new(root, "reps", json_integer(a->reps));

    json_t *prompts = json_array();
    double last_prefill_tok_s = 0, last_ttft = 0;
    for (int i = 0; i < a->n_prompt_lens; i++) {
        int32_t p = a->prompt_lens[i];
        for (int32_t r = 0; r < a->reps; r++) scratch[r] = SAMPLE(2 * i, r) > 0 ? p / (SAMPLE(2 * i, r) / 1e3) : 0;
        spread ts = spread_of(scratch, a->reps);
        for (int32_t r = 0; r < a->reps; r++) scratch[r] = SAMPLE(2 * i + 1, r);
        spread tt = spread_of(scratch, a->reps);
        double gops = 2.0 * (double)matmul_params * ts.median / 1e9;
        json_t *o = json_pack("{s:i,s:f,s:o,s:f,s:o,s:f}", "prompt_tokens", p, "prefill_tok_s", ts.median, "prefill_tok_s_spread",
                              spread_json(ts), "ttft_ms", tt.median, "ttft_ms_spread", spread_json(tt), "gops", gops);
        if (have_hw && hw.int8_gops > 0) json_object_set_new(o, "int8_peak_fraction", json_real(gops / hw.int8_gops));
        json_array_append_new(prompts, o);
        last_prefill_tok_s = ts.median;
        last_ttft = tt.median;
        if (!a->json)
            printf("prefill %5d tokens: %8.1f tok/s (min %.1f, max %.1f)  ttft %8.1f ms  %6.1f GOP/s%s", p, ts.median, ts.min, ts.max,
                   tt.median, gops, have_hw ? "" : "\n");
        if (!a->json && have_hw) printf("  (%.1f%% of int8 peak %.0f)\n", 100.0 * gops / hw.int8_gops, hw.int8_gops);
    }
    json_object_set_new(root, "prompts", prompts);
    json_object_set_new(root, "prompt_tokens", json_integer(a->prompt_lens[a->n_prompt_lens - 1]));
    json_object_set_new(root, "prefill_tok_s", json_real(last_prefill_tok_s));
    json_object_set_new(root, "ttft_ms", json_real(last_ttft));
    json_object_set_new(root, "prefill_gops", json_real(2.0 * (double)matmul_params * last_prefill_tok_s / 1e9));

    for (int32_t r = 0; r < a->reps; r++) scratch[r] = SAMPLE(n_metrics - 1, r);
    spread ds = spread_of(scratch, a->reps);
    double gbs = (double)decode_bytes * ds.median / 1e9;
    json_object_set_new(root, "gen_tokens", json_integer(a->gen_tokens));
    json_object_set_new(root, "decode_tok_s", json_real(ds.median));
    json_object_set_new(root, "decode_tok_s_spread", spread_json(ds));
    json_object_set_new(root, "bandwidth_gbs", json_real(gbs));
    if (have_hw && hw.read_gbs > 0) json_object_set_new(root, "bandwidth_fraction", json_real(gbs / hw.read_gbs));
    json_object_set_new(root, "tokens_hash", json_string(fmt_u64_hex(tokens_hash, hexbuf[1], sizeof hexbuf[1])));
    json_object_set_new(root, "tokens_generated", json_integer((json_int_t)tokens_generated));
    json_object_set_new(root, "tokens_stable_across_reps", json_boolean(tokens_stable));
    if (!a->json) {
        printf("decode %d tokens:    %8.1f tok/s (min %.1f, max %.1f)  %.1f GB/s", a->gen_tokens, ds.median, ds.min, ds.max, gbs);
        if (have_hw) printf(" (%.1f%% of measured %.1f GB/s)", 100.0 * gbs / hw.read_gbs, hw.read_gbs);
        printf("\n");
    }

    if (a->batch_curve) {
        json_t *curve = json_object(), *ratio = json_object(), *curve_spread = json_object();
        double t1 = 0;
        for (int i = 0; i < a->n_batch_sizes; i++) {
            spread bs = spread_of(batch_samples + (size_t)i * batch_per_size, (int)batch_per_size);
            char key[16];
            snprintf(key, sizeof key, "%d", a->batch_sizes[i]);
            json_object_set_new(curve, key, json_real(bs.median));
            json_object_set_new(curve_spread, key, spread_json(bs));
            if (a->batch_sizes[i] == 1) t1 = bs.median;
        }
        for (int i = 0; i < a->n_batch_sizes && t1 > 0; i++) {
            char key[16];
            snprintf(key, sizeof key, "%d", a->batch_sizes[i]);
            json_object_set_new(ratio, key, json_real(json_real_value(json_object_get(curve, key)) / t1));
        }
        /* The pass's roofline (issue 3's definition): the time to read every weight byte once at the
         * measured bandwidth, or to do its multiply-adds at the measured int8 peak, whichever is longer.
         * Attention and the element-wise steps are left out, so T(B) / roofline >= 1 in practice. */
        json_t *roofline = json_object(), *roof_ratio = json_object();
        for (int i = 0; i < a->n_batch_sizes && have_hw && hw.read_gbs > 0 && hw.int8_gops > 0; i++) {
            char key[16];
            snprintf(key, sizeof key, "%d", a->batch_sizes[i]);
            double read_ms = (double)decode_bytes / (hw.read_gbs * 1e9) * 1e3;
            double compute_ms = 2.0 * (double)matmul_params * a->batch_sizes[i] / (hw.int8_gops * 1e9) * 1e3;
            double roof_ms = read_ms > compute_ms ? read_ms : compute_ms;
            json_object_set_new(roofline, key, json_real(roof_ms));
            json_object_set_new(roof_ratio, key, json_real(json_real_value(json_object_get(curve, key)) / roof_ms));
        }
        if (!a->json) {
            printf("batch curve (one pass over B tokens after %d in context, ms; T(B)/T(1)%s):\n", a->batch_depth,
                   json_object_size(roofline) ? "; roofline max(bytes/read, ops/int8 peak) and T(B)/roofline" : "");
            for (int i = 0; i < a->n_batch_sizes; i++) {
                char key[16];
                snprintf(key, sizeof key, "%d", a->batch_sizes[i]);
                double ms = json_real_value(json_object_get(curve, key));
                json_t *r = json_object_get(ratio, key), *roof = json_object_get(roofline, key);
                printf("  B=%-3d %9.2f ms", a->batch_sizes[i], ms);
                if (r) printf("  %5.2f", json_real_value(r));
                if (roof) printf("   roofline %7.2f ms  %5.2fx", json_real_value(roof), json_real_value(json_object_get(roof_ratio, key)));
                printf("\n");
            }
        }
        json_object_set_new(root, "batch_roofline_ms", roofline);
        json_object_set_new(root, "batch_roofline_ratio", roof_ratio);
        json_object_set_new(root, "batch_depth", json_integer(a->batch_depth));
        json_object_set_new(root, "batch_passes", json_integer(a->batch_passes));
        json_object_set_new(root, "batch_curve", curve);
        json_object_set_new(root, "batch_curve_spread", curve_spread);
        json_object_set_new(root, "batch_ratio", ratio);
    }
    json_object_set_new(root, "peak_rss_bytes", json_integer((json_int_t)rss));
    if (have_hw) json_object_set_new(root, "hw", hw_json(&hw));
    if (a->json) {
        print_json(root);
    } else {
        printf("peak RSS:            %.1f MiB\n", (double)rss / 1048576.0);
        printf("threads:             %d, kernels %s, KV cache %s\n", threads, have_hw ? hw.kernels : "unknown",
               kite_kv_type_name(a->kv_type));
        if (have_hw)
            printf("machine:             read %.1f GB/s (1 thread %.1f), int8 %.0f GOP/s, fp32 %.0f GFLOP/s\n", hw.read_gbs,
                   hw.read_gbs_1t, hw.int8_gops, hw.f32_gflops);
        printf("model:               %s, %.1f MiB, hash %s; %.1f MiB read per decoded token\n", a->model,
               (double)file_size / 1048576.0, have_hash ? hexbuf[0] : "?", (double)decode_bytes / 1048576.0);
        printf("tokens hash:         %s (%lld tokens%s)\n", hexbuf[1], (long long)tokens_generated,
               tokens_stable ? "" : ", DIFFERED between reps");
    }
#undef SAMPLE
done:
    json_decref(root);
    free(samples);
    free(batch_samples);
    free(scratch);
    free(logits);
    free(tokens);
    kite_session_free(s);
    kite_model_free(model);
    return rc;
}

int kite_bench_spec(int argc, char **argv);    /* bench_spec.c: kite bench --spec */
int kite_bench_grammar(int argc, char **argv); /* bench_grammar.c: kite bench --grammar */

int kite_cmd_bench(int argc, char **argv) {
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--spec")) return kite_bench_spec(argc, argv);
        if (!strcmp(argv[i], "--grammar")) return kite_bench_grammar(argc, argv);
    }
    bench_args a = {0};
    int rc = parse_bench_args(argc, argv, &a);
    if (rc) return rc;
    if (a.help) { fputs(BENCH_USAGE, stdout); return 0; }
    if (a.hw_only) {
        if (a.model) return bench_fail(2, "give either --hw or --model, not both");
        return run_hw_only(&a);
    }
    if ((rc = kite_cli_model_or_default(&a.model, "kite bench", false))) return rc;
    return run_bench(&a);
}

/* ---- kite gen-model ----------------------------------------------------------------------------- */
static const char GEN_USAGE[] =
    "usage: kite gen-model --shape S --type T --out FILE [--tokenizer PATH] [--seed N] [--hf-out DIR]\n"
    "\n"
    "Writes a GGUF model of a real shape with random weights (normal-ish, std 0.02; norms 1), for\n"
    "benchmarks. Other engines (llama.cpp) load it: the tokenizer is written into the file.\n"
    "\n"
    "  --shape S          real shapes for benchmarks: llama-1.1b (dim 2048, 16 layers, 32/8 heads, FFN\n"
    "                     8192, vocab 32000), qwen3-0.6b, llama-3.2-1b, gemma3-1b, qwen3.5-0.8b, lfm2-350m,\n"
    "                     qwen3moe-a3b-4l and gemma4-31b-6l (4 and 6 of their layers); small test shapes:\n"
    "                     tiny (llama, dim 256, 2 layers; vocab of the tokenizer), tiny-l4, tiny-qwen3, tiny-llama3\n"
    "                     (Llama-3 RoPE scaling), tiny-qwen2 (q/k/v biases, F16 embeddings), tiny-gemma3,\n"
    "                     tiny-qwen3moe, tiny-qwen35, tiny-lfm2, tiny-gemma4, tiny-muse-glimmer; qwen3.5-0.8b-mtp and\n"
    "                     tiny-qwen35-mtp add Qwen3.5's next-n (MTP) block (for --draft mtp)\n"
    "  --type T           f32, f16, bf16, q8_0, q4_0 (every matrix), q4_k_m (llama.cpp's Q4_K_M recipe);\n"
    "                     kt2, kt2_5, kt3, kt2_5_m (kite quantize's trellis recipe, always the rotated\n"
    "                     variants, the slower ones) for speed only: each trellis matrix is its first 16\n"
    "                     rows encoded and repeated (the encoder is slow)\n"
    "  --out FILE         where to write\n"
    "  --tokenizer PATH   a llama2.c tokenizer .bin or a tokenizer.json (byte-level BPE, or SentencePiece-style\n"
    "                     BPE such as Gemma 3's, written as an SPM vocabulary) whose vocabulary\n"
    "                     fits the shape (padded with <pad_N>); default: bytes-only SentencePiece vocabulary\n"
    "  --seed N           weights seed (default 1)\n"
    "  --hf-out DIR       also write the weights (before quantization, F32) as a Hugging Face folder:\n"
    "                     config.json, model.safetensors (transformers' names), the tokenizer files\n"
    "                     (needs --tokenizer DIR/tokenizer.json; copies the tokenizer_config.json beside it)\n"
    "  --shape eagle3 --target TARGET.gguf   an EAGLE-3 draft head fitting the target (llama.cpp's eagle3\n"
    "                     format; --type f32 by default, or f16, bf16, q8_0, q4_0)\n"
    "  --shape dflash --target TARGET.gguf   a DFlash block drafter fitting the target (llama.cpp's dflash\n"
    "                     format, block 16; dflash-bN: a block of N, dflash[-bN]-causal: causal block attention)\n";

static void gen_progress(float fraction, void *user) {
    (void)user;
    int width = 30, filled = (int)(fraction * (float)width + 0.5f);
    fprintf(stderr, "\rwriting [");
    for (int i = 0; i < width; i++) fputc(i < filled ? '#' : ' ', stderr);
    fprintf(stderr, "] %3d%%", (int)(fraction * 100.0f + 0.5f));
    if (fraction >= 1.0f) fprintf(stderr, "\r%*s\r", width + 18, "");
    fflush(stderr);
}

int kite_cmd_gen_model(int argc, char **argv) {
    kite_random_model_params p = {0};
    p.seed = 1;
    const char *out = NULL;
    for (int i = 2; i < argc; i++) {
        const char *opt = argv[i];
        if (!strcmp(opt, "--help") || !strcmp(opt, "-h")) { fputs(GEN_USAGE, stdout); return 0; }
        if (opt[0] != '-') return bench_fail(2, "unexpected argument '%s' (see kite gen-model --help)", opt);
        if (i + 1 >= argc) return bench_fail(2, "option %s needs a value (see kite gen-model --help)", opt);
        const char *val = argv[++i];
        if (!strcmp(opt, "--shape")) p.shape = val;
        else if (!strcmp(opt, "--type")) p.type = val;
        else if (!strcmp(opt, "--out") || !strcmp(opt, "-o")) out = val;
        else if (!strcmp(opt, "--tokenizer")) p.tokenizer_path = val;
        else if (!strcmp(opt, "--target")) p.target_path = val;
        else if (!strcmp(opt, "--hf-out")) p.hf_dir = val;
        else if (!strcmp(opt, "--seed")) {
            char *end;
            errno = 0;
            unsigned long long v = strtoull(val, &end, 10);
            if (errno || end == val || *end || val[0] == '-') return bench_fail(2, "--seed expects a non-negative integer, got '%s'", val);
            p.seed = v;
        } else {
            return bench_fail(2, "unknown option %s (see kite gen-model --help)", opt);
        }
    }
    if (!p.shape) return bench_fail(2, "kite gen-model needs --shape (llama-1.1b, qwen3-0.6b, llama-3.2-1b, tiny, tiny-qwen3, tiny-llama3, tiny-qwen2, gemma3-1b, tiny-gemma3, qwen3moe-a3b-4l, tiny-qwen3moe, qwen3.5-0.8b, tiny-qwen35, lfm2-350m, tiny-lfm2, gemma4-31b-6l, tiny-gemma4, tiny-muse-glimmer)");
    if (!p.type && (!strcmp(p.shape, "eagle3") || !strncmp(p.shape, "dflash", 6))) p.type = "f32";
    if (!p.type) return bench_fail(2, "kite gen-model needs --type (f32, f16, bf16, q8_0, q4_0, q4_k_m)");
    if (!out) return bench_fail(2, "kite gen-model needs --out FILE");
    if (isatty(STDERR_FILENO)) p.progress = gen_progress;
    char err[512];
    double t0 = now_ms();
    if (kite_write_random_model(out, &p, err, sizeof err)) return bench_fail(1, "%s", err);
    struct stat st;
    long long size = stat(out, &st) == 0 ? (long long)st.st_size : -1;
    fprintf(stderr, "wrote %s (%s %s, seed %llu, %lld bytes) in %.1f s\n", out, p.shape, p.type, (unsigned long long)p.seed, size,
            (now_ms() - t0) / 1e3);
    return 0;
}
