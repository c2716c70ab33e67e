/* kite_perplexity, kite_kld and kite_imatrix_compute against independent computations:
 *   1. perplexity of stories260K over a text equals the perplexity computed here from llama.cpp's own
 *      next-token probabilities (node-llama-cpp through tests/oracle/llamacpp_probs.mjs) for the same
 *      chunks (BOS first, second halves scored);
 *   2. KL divergence of a model against itself is 0 with 100% top-1 agreement; TinyStories-656K Q8_0
 *      against its F32 weights matches a double-precision computation here from both models' logits
 *      (kite_eval over each chunk at once), statistic by statistic;
 *   3. the importance matrix of stories260K equals the sums of squares of the matrix inputs computed by
 *      a double-precision Llama forward pass written here from the GGUF's F32 weights, and the file,
 *      GGUF and legacy .dat, passes an independent parser (imatrix_parse.py, from the format description);
 *   4. bad input: no text, a text shorter than two chunks, models with different vocabularies, an
 *      output that cannot be created (no file left behind). */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "io/gguf.h"
#include "kite.h"
#include "quant/imatrix.h"
#include "test_util.h"

#define STORIES_GGUF "models/tinystories-tok512/stories260K.gguf"
#define TS656_Q8 "models/tinystories-656k/tinystories-656k-q8_0.gguf"
#define TS656_F32 "models/tinystories-656k"
#define TEXT_FILE "data/mt_bench/question.jsonl"

/* ---- helpers ------------------------------------------------------------------------------------- */
static char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) buf[n] = 0;
    if (len) *len = (size_t)n;
    return buf;
}

static kite_model *open_model(const char *rel) {
    kite_model_params mp = kite_model_default_params();
    mp.n_threads = 2;
    kite_model *m = NULL;
    char err[512];
    int st = kite_model_open(&m, kite_test_data(rel), &mp, err, sizeof err);
    if (st) fail_msg("cannot open %s: %s", rel, err);
    return m;
}

static int run_program(char *const argv[]) {
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        execvp(argv[0], argv);
        fprintf(stderr, "cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

static char TMP[256];

static int32_t *tokenize(const kite_model *m, const char *text, size_t len, size_t *n) {
    kite_model_info info;
    kite_model_get_info(m, &info);
    char err[256];
    assert_int_equal(kite_tokenize(m, text, len, info.add_bos, false, NULL, 0, n, err, sizeof err), KITE_OK);
    int32_t *ids = malloc(sizeof *ids * *n);
    assert_int_equal(kite_tokenize(m, text, len, info.add_bos, false, ids, *n, n, err, sizeof err), KITE_OK);
    return ids;
}

/* The ids of chunk c as llama.cpp evaluates it: the first token replaced by BOS. */
static void chunk_ids(const kite_model *m, const int32_t *tokens, int32_t n_ctx, int32_t c, int32_t *ids) {
    kite_model_info info;
    kite_model_get_info(m, &info);
    memcpy(ids, tokens + (size_t)c * n_ctx, sizeof *ids * (size_t)n_ctx);
    if (info.add_bos && info.bos_id >= 0) ids[0] = info.bos_id;
}

/* ---- 1. perplexity against llama.cpp ------------------------------------------------------------------
 * llama.cpp's probabilities come through node-llama-cpp as floats from its own softmax (rows sum to 1
 * within ~1e-3: renormalized here in double). Both engines run F32 weights with an F32 KV cache; the
 * oracle's per-probability agreement is ~1e-6 (tests/oracle/README.md), so the perplexities agree to
 * ~1e-6 relative: the bound is 1e-4. Scoring the wrong half, or forgetting the BOS, moves stories260K's
 * perplexity by far more (the negative control below measures it). */
#define PPL_REL_BOUND 1e-4
enum { ORACLE_CTX = 64, ORACLE_CHUNKS = 2 };

static void test_perplexity_matches_llamacpp(void **state) {
    (void)state;
    const char *node = getenv("KITE_NODE"), *src = getenv("KITE_SOURCE_DIR");
    if (!node || !*node || !src) fail_msg("KITE_NODE and KITE_SOURCE_DIR must be set (run through ctest)");
    char script[1024], package[1024];
    snprintf(script, sizeof script, "%s/tests/oracle/llamacpp_probs.mjs", src);
    snprintf(package, sizeof package, "%s/tests/oracle/node_modules/node-llama-cpp/package.json", src);
    struct stat st;
    if (stat(package, &st) != 0) fail_msg("node-llama-cpp is not installed: run `npm ci` in %s/tests/oracle", src);

    size_t len;
    char *text = read_all(kite_test_data(TEXT_FILE), &len);
    assert_non_null(text);
    kite_model *m = open_model(STORIES_GGUF);
    kite_quality_params qp = kite_quality_default_params();
    qp.n_ctx = ORACLE_CTX;
    qp.n_chunks = ORACLE_CHUNKS;
    qp.kv_type = KITE_KV_F32;
    kite_perplexity_result r;
    char err[512];
    assert_int_equal(kite_perplexity(m, text, len, &qp, &r, err, sizeof err), KITE_OK);
    assert_int_equal(r.n_chunks, ORACLE_CHUNKS);
    assert_int_equal(r.n_scored, ORACLE_CHUNKS * (ORACLE_CTX - 1 - ORACLE_CTX / 2));

    size_t n_tokens;
    int32_t *tokens = tokenize(m, text, len, &n_tokens);
    assert_int_equal((int64_t)n_tokens, r.n_text_tokens);
    /* One llama.cpp job: each chunk a prompt, its second-half positions requested. */
    json_t *prompts = json_array();
    int32_t ids[ORACLE_CHUNKS][ORACLE_CTX];
    for (int32_t c = 0; c < ORACLE_CHUNKS; c++) {
        chunk_ids(m, tokens, ORACLE_CTX, c, ids[c]);
        json_t *jids = json_array(), *pos = json_array();
        for (int32_t j = 0; j < ORACLE_CTX; j++) json_array_append_new(jids, json_integer(ids[c][j]));
        for (int32_t j = ORACLE_CTX / 2; j <= ORACLE_CTX - 2; j++) json_array_append_new(pos, json_integer(j));
        json_array_append_new(prompts, json_pack("{s:s,s:o,s:o}", "text", "", "ids", jids, "positions", pos));
    }
    char out_prefix[512], request[512];
    snprintf(out_prefix, sizeof out_prefix, "%s/llama", TMP);
    snprintf(request, sizeof request, "%s/request.json", TMP);
    json_t *req = json_pack("{s:i,s:i,s:[{s:s,s:s,s:o}]}", "threads", 2, "n_ctx", ORACLE_CTX, "jobs", "model",
                            kite_test_data(STORIES_GGUF), "out", out_prefix, "prompts", prompts);
    assert_int_equal(json_dump_file(req, request, 0), 0);
    json_decref(req);
    char *argv[] = {(char *)node, script, request, NULL};
    assert_int_equal(run_program(argv), 0);

    char bin_path[600];
    snprintf(bin_path, sizeof bin_path, "%s.bin", out_prefix);
    size_t bin_len;
    float *probs = (float *)read_all(bin_path, &bin_len);
    assert_non_null(probs);
    kite_model_info info;
    kite_model_get_info(m, &info);
    const int32_t per_chunk = ORACLE_CTX - 1 - ORACLE_CTX / 2;
    assert_int_equal(bin_len, sizeof(float) * (size_t)info.n_vocab * ORACLE_CHUNKS * per_chunk);
    double nll = 0.0, nll_shifted = 0.0;
    int64_t count = 0;
    for (int32_t c = 0; c < ORACLE_CHUNKS; c++)
        for (int32_t k = 0; k < per_chunk; k++) {
            const float *row = probs + ((size_t)c * per_chunk + (size_t)k) * (size_t)info.n_vocab;
            double sum = 0.0;
            for (int32_t i = 0; i < info.n_vocab; i++) sum += row[i];
            int32_t j = ORACLE_CTX / 2 + k;
            nll -= log((double)row[ids[c][j + 1]] / sum);
            /* The control: the token at the row's own position instead of the next one. */
            nll_shifted -= log(fmax((double)row[ids[c][j]] / sum, 1e-30));
            count++;
        }
    double ppl_llama = exp(nll / (double)count), ppl_control = exp(nll_shifted / (double)count);
    double rel = fabs(r.ppl / ppl_llama - 1.0);
    printf("perplexity: kite %.6f, from llama.cpp's probabilities %.6f (relative difference %.2e, bound %.0e); "
           "off-by-one control %.3f\n",
           r.ppl, ppl_llama, rel, PPL_REL_BOUND, ppl_control);
    assert_true(rel < PPL_REL_BOUND);
    assert_true(fabs(ppl_control / ppl_llama - 1.0) > 100 * PPL_REL_BOUND);
    free(probs);
    free(tokens);
    kite_model_free(m);
    free(text);
}

/* ---- 2. KL divergence ----------------------------------------------------------------------------- */
enum { KLD_CTX = 96, KLD_CHUNKS = 3 };

static void test_kld_self_is_zero(void **state) {
    (void)state;
    size_t len;
    char *text = read_all(kite_test_data(TEXT_FILE), &len);
    kite_model *m = open_model(STORIES_GGUF);
    kite_quality_params qp = kite_quality_default_params();
    qp.n_ctx = KLD_CTX;
    qp.n_chunks = KLD_CHUNKS;
    kite_kld_result r;
    char err[512];
    assert_int_equal(kite_kld(m, m, text, len, &qp, &r, err, sizeof err), KITE_OK);
    assert_int_equal(r.n_scored, KLD_CHUNKS * (KLD_CTX - 1 - KLD_CTX / 2));
    assert_true(r.kld == 0.0);
    for (int i = 0; i < KITE_KLD_N_QUANTILES; i++) assert_true(r.kld_quantile[i] == 0.0);
    assert_true(r.same_top == 1.0);
    assert_true(r.ppl == r.ppl_ref && r.ln_ppl_ratio == 0.0 && r.p_diff_rms == 0.0);
    kite_model_free(m);
    free(text);
}

/* llama.cpp's statistics, computed here independently over (model, reference) logits, in double. */
typedef struct direct_kld {
    double *kld, *p_diff;   /* per scored token */
    double nll, nll_ref, kld_sum;
    int64_t n, same_top;
} direct_kld;

static double softmax_log(const float *l, int32_t n, double *logp) {
    double max = l[0];
    for (int32_t i = 1; i < n; i++) max = fmax(max, l[i]);
    double sum = 0.0;
    for (int32_t i = 0; i < n; i++) sum += exp(l[i] - max);
    for (int32_t i = 0; i < n; i++) logp[i] = l[i] - max - log(sum);
    return 0.0;
}

static int32_t first_argmax(const float *l, int32_t n) {
    int32_t at = 0;
    for (int32_t i = 1; i < n; i++)
        if (l[i] > l[at]) at = i;
    return at;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void test_kld_q8_against_f32_matches_direct(void **state) {
    (void)state;
    size_t len;
    char *text = read_all(kite_test_data(TEXT_FILE), &len);
    kite_model *q8 = open_model(TS656_Q8), *f32 = open_model(TS656_F32);
    kite_quality_params qp = kite_quality_default_params();
    qp.n_ctx = KLD_CTX;
    qp.n_chunks = KLD_CHUNKS;
    kite_kld_result r;
    char err[512];
    assert_int_equal(kite_kld(q8, f32, text, len, &qp, &r, err, sizeof err), KITE_OK);

    /* The direct computation: each chunk through kite_eval at once, on both models. */
    kite_model_info info;
    kite_model_get_info(f32, &info);
    const int32_t nv = info.n_vocab, per_chunk = KLD_CTX - 1 - KLD_CTX / 2;
    size_t n_tokens;
    int32_t *tokens = tokenize(f32, text, len, &n_tokens);
    kite_session_params sp = kite_session_default_params();
    sp.n_ctx = KLD_CTX;
    kite_session *sa, *sb;
    assert_int_equal(kite_session_open(&sa, q8, &sp, err, sizeof err), KITE_OK);
    assert_int_equal(kite_session_open(&sb, f32, &sp, err, sizeof err), KITE_OK);
    float *la = malloc(sizeof(float) * (size_t)KLD_CTX * nv), *lb = malloc(sizeof(float) * (size_t)KLD_CTX * nv);
    double *pa = malloc(sizeof(double) * nv), *pb = malloc(sizeof(double) * nv);
    direct_kld d = {.kld = calloc(KLD_CHUNKS * per_chunk, sizeof(double)), .p_diff = calloc(KLD_CHUNKS * per_chunk, sizeof(double))};
    int32_t ids[KLD_CTX];
    for (int32_t c = 0; c < KLD_CHUNKS; c++) {
        chunk_ids(f32, tokens, KLD_CTX, c, ids);
        kite_session_reset(sa);
        kite_session_reset(sb);
        assert_int_equal(kite_eval(sa, ids, KLD_CTX, la, err, sizeof err), KITE_OK);
        assert_int_equal(kite_eval(sb, ids, KLD_CTX, lb, err, sizeof err), KITE_OK);
        for (int32_t j = KLD_CTX / 2; j <= KLD_CTX - 2; j++) {
            const float *ra = la + (size_t)j * nv, *rb = lb + (size_t)j * nv;
            softmax_log(ra, nv, pa);
            softmax_log(rb, nv, pb);
            double kl = 0.0;
            for (int32_t i = 0; i < nv; i++) kl += exp(pb[i]) * (pb[i] - pa[i]);
            int32_t tok = ids[j + 1];
            d.kld[d.n] = kl;
            d.p_diff[d.n] = exp(pa[tok]) - exp(pb[tok]);
            d.kld_sum += kl;
            d.nll -= pa[tok];
            d.nll_ref -= pb[tok];
            d.same_top += first_argmax(ra, nv) == first_argmax(rb, nv);
            d.n++;
        }
    }
    assert_int_equal(r.n_scored, d.n);
    double mean_kld = d.kld_sum / (double)d.n;
    qsort(d.kld, (size_t)d.n, sizeof(double), cmp_double);
    qsort(d.p_diff, (size_t)d.n, sizeof(double), cmp_double);
    double median = d.n % 2 ? d.kld[d.n / 2] : 0.5 * (d.kld[d.n / 2] + d.kld[d.n / 2 - 1]);
    double rms = 0.0;
    for (int64_t i = 0; i < d.n; i++) rms += d.p_diff[i] * d.p_diff[i];
    rms = sqrt(rms / (double)d.n);
    printf("kld Q8_0 vs F32: kite mean %.9f, direct %.9f; median %.9f vs %.9f; same top %.4f vs %.4f; "
           "ppl %.5f/%.5f vs %.5f/%.5f\n",
           r.kld, mean_kld, r.kld_quantile[5], median, r.same_top, (double)d.same_top / (double)d.n, r.ppl, r.ppl_ref,
           exp(d.nll / (double)d.n), exp(d.nll_ref / (double)d.n));
    /* The same logits (batch invariance), summed in another order: agreement to rounding. */
    assert_true(mean_kld > 1e-5); /* a real difference between the two files */
    assert_true(fabs(r.kld - mean_kld) <= 1e-9 * mean_kld + 1e-15);
    assert_true(fabs(r.kld_quantile[5] - median) <= 1e-9 * median + 1e-15);
    assert_true(fabs(r.kld_quantile[0] - d.kld[d.n - 1]) <= 1e-9 * d.kld[d.n - 1]);
    assert_true(fabs(r.kld_quantile[KITE_KLD_N_QUANTILES - 1] - d.kld[0]) <= 1e-9 * d.kld[0] + 1e-15);
    /* 99th percentile: linear interpolation at 0.99 * (n - 1). */
    double p = 0.99 * (double)(d.n - 1);
    int64_t ip = (int64_t)p;
    double q99 = (1 - (p - (double)ip)) * d.kld[ip] + (p - (double)ip) * d.kld[ip + 1];
    assert_true(fabs(r.kld_quantile[2] - q99) <= 1e-9 * q99);
    assert_int_equal((int64_t)llround(r.same_top * (double)d.n), d.same_top);
    assert_true(d.same_top < d.n); /* Q8_0 changes some top tokens (97% agreement, models/README.md) */
    assert_true(fabs(r.ppl / exp(d.nll / (double)d.n) - 1) < 1e-9);
    assert_true(fabs(r.ppl_ref / exp(d.nll_ref / (double)d.n) - 1) < 1e-9);
    assert_true(fabs(r.ln_ppl_ratio - (d.nll - d.nll_ref) / (double)d.n) < 1e-9);
    assert_true(fabs(r.p_diff_rms - rms) <= 1e-9 * rms);
    assert_true(fabs(r.p_diff_quantile[0] - d.p_diff[d.n - 1]) <= 1e-9 * fabs(d.p_diff[d.n - 1]) + 1e-15);
    free(d.kld);
    free(d.p_diff);
    free(pa);
    free(pb);
    free(la);
    free(lb);
    kite_session_free(sa);
    kite_session_free(sb);
    free(tokens);
    kite_model_free(q8);
    kite_model_free(f32);
    free(text);
}

/* ---- 3. importance matrix against a reference forward pass --------------------------------------------
 * A plain double-precision Llama forward over the GGUF's F32 tensors (RMSNorm, interleaved-pair RoPE as
 * llama.cpp's LLAMA rope type, grouped-query causal attention, SwiGLU), written here from the
 * architecture, accumulating the squares of each matrix's input. kite runs the same F32 weights with an
 * F32 KV cache in float: the sums agree to ~1e-6 relative; the bound is 1e-4. */
#define IMATRIX_REL_BOUND 1e-4
enum { IM_CTX = 64, IM_CHUNKS = 2, MAX_WEIGHTS = 64 };

typedef struct ref_sums {
    char name[MAX_WEIGHTS][64];
    int64_t cols[MAX_WEIGHTS];
    double *sum[MAX_WEIGHTS];
    int n;
} ref_sums;

static void ref_add(ref_sums *s, const char *name, const double *x, int64_t cols) {
    int at = -1;
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->name[i], name)) at = i;
    if (at < 0) {
        at = s->n++;
        snprintf(s->name[at], sizeof s->name[at], "%s", name);
        s->cols[at] = cols;
        s->sum[at] = calloc((size_t)cols, sizeof(double));
    }
    for (int64_t j = 0; j < cols; j++) s->sum[at][j] += x[j] * x[j];
}

static const float *tensor_f32(const kite_gguf *g, const char *fmt, int layer, int64_t want_elems) {
    char name[96];
    snprintf(name, sizeof name, fmt, layer);
    const kite_gguf_tensor *t = kite_gguf_find_tensor(g, name);
    if (!t) fail_msg("no tensor %s", name);
    assert_int_equal(t->type, 0); /* F32 */
    assert_int_equal((int64_t)(t->n_bytes / 4), want_elems);
    return t->data;
}

/* out[r] = sum_c W[r][c] x[c] for W [rows][cols] (GGUF: ne0 = cols innermost). */
static void matvec(const float *w, const double *x, int64_t rows, int64_t cols, double *out) {
    for (int64_t r = 0; r < rows; r++) {
        double acc = 0.0;
        for (int64_t c = 0; c < cols; c++) acc += (double)w[r * cols + c] * x[c];
        out[r] = acc;
    }
}

static void rmsnorm_d(const double *x, const float *w, int64_t n, double eps, double *out) {
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++) ss += x[i] * x[i];
    double scale = 1.0 / sqrt(ss / (double)n + eps);
    for (int64_t i = 0; i < n; i++) out[i] = x[i] * scale * w[i];
}

static void reference_imatrix(const int32_t *tokens, ref_sums *sums, bool process_output) {
    size_t size;
    char *data = read_all(kite_test_data(STORIES_GGUF), &size);
    assert_non_null(data);
    kite_gguf *g;
    assert_int_equal(kite_gguf_open(&g, data, size, NULL), KITE_OK);
    uint32_t dim, layers, heads, kv_heads, ffn;
    assert_true(kite_gguf_get_u32(g, "llama.embedding_length", &dim));
    assert_true(kite_gguf_get_u32(g, "llama.block_count", &layers));
    assert_true(kite_gguf_get_u32(g, "llama.attention.head_count", &heads));
    assert_true(kite_gguf_get_u32(g, "llama.attention.head_count_kv", &kv_heads));
    assert_true(kite_gguf_get_u32(g, "llama.feed_forward_length", &ffn));
    float eps = 1e-5f, theta = 10000.0f;
    kite_gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &eps);
    kite_gguf_get_f32(g, "llama.rope.freq_base", &theta);
    const int64_t hd = dim / heads, kvd = (int64_t)kv_heads * hd, T = IM_CTX;
    const float *embd = tensor_f32(g, "token_embd.weight", 0, 0 + (int64_t)dim * 512);
    double *x = calloc((size_t)(T * dim), sizeof(double)), *xn = malloc(sizeof(double) * dim);
    double *q = malloc(sizeof(double) * T * dim), *k = malloc(sizeof(double) * T * kvd), *v = malloc(sizeof(double) * T * kvd);
    double *att = malloc(sizeof(double) * T * dim), *h = malloc(sizeof(double) * dim), *gate = malloc(sizeof(double) * ffn),
           *up = malloc(sizeof(double) * ffn), *scores = malloc(sizeof(double) * T);
    double *xns = malloc(sizeof(double) * T * dim);
    for (int32_t c = 0; c < IM_CHUNKS; c++) {
        const int32_t *ids = tokens + c * IM_CTX;
        for (int64_t t = 0; t < T; t++)
            for (int64_t i = 0; i < dim; i++) x[t * dim + i] = embd[(int64_t)ids[t] * dim + i];
        for (uint32_t l = 0; l < layers; l++) {
            const float *an = tensor_f32(g, "blk.%d.attn_norm.weight", (int)l, dim);
            const float *wq = tensor_f32(g, "blk.%d.attn_q.weight", (int)l, (int64_t)dim * dim);
            const float *wk = tensor_f32(g, "blk.%d.attn_k.weight", (int)l, (int64_t)kvd * dim);
            const float *wv = tensor_f32(g, "blk.%d.attn_v.weight", (int)l, (int64_t)kvd * dim);
            const float *wo = tensor_f32(g, "blk.%d.attn_output.weight", (int)l, (int64_t)dim * dim);
            const float *fn = tensor_f32(g, "blk.%d.ffn_norm.weight", (int)l, dim);
            const float *wg = tensor_f32(g, "blk.%d.ffn_gate.weight", (int)l, (int64_t)ffn * dim);
            const float *wu = tensor_f32(g, "blk.%d.ffn_up.weight", (int)l, (int64_t)ffn * dim);
            const float *wd = tensor_f32(g, "blk.%d.ffn_down.weight", (int)l, (int64_t)dim * ffn);
            char name[64];
            for (int64_t t = 0; t < T; t++) {
                rmsnorm_d(x + t * dim, an, dim, eps, xn);
                static const char *const qkv[3] = {"attn_q", "attn_k", "attn_v"};
                for (int i = 0; i < 3; i++) {
                    snprintf(name, sizeof name, "blk.%u.%s.weight", l, qkv[i]);
                    ref_add(sums, name, xn, dim);
                }
                matvec(wq, xn, dim, dim, q + t * dim);
                matvec(wk, xn, kvd, dim, k + t * kvd);
                matvec(wv, xn, kvd, dim, v + t * kvd);
                /* RoPE on pairs (2i, 2i+1) of each head, angle t * theta^(-2i/hd). */
                for (int64_t i = 0; i < hd / 2; i++) {
                    double ang = (double)t * pow(theta, -2.0 * (double)i / (double)hd), cs = cos(ang), sn = sin(ang);
                    for (int64_t hh = 0; hh < heads; hh++) {
                        double *p = q + t * dim + hh * hd + 2 * i, a = p[0], b = p[1];
                        p[0] = a * cs - b * sn;
                        p[1] = a * sn + b * cs;
                    }
                    for (int64_t hh = 0; hh < kv_heads; hh++) {
                        double *p = k + t * kvd + hh * hd + 2 * i, a = p[0], b = p[1];
                        p[0] = a * cs - b * sn;
                        p[1] = a * sn + b * cs;
                    }
                }
            }
            for (int64_t t = 0; t < T; t++)
                for (int64_t hh = 0; hh < heads; hh++) {
                    int64_t kh = hh / (heads / kv_heads);
                    double max = -INFINITY, sum = 0.0;
                    for (int64_t s = 0; s <= t; s++) {
                        double dot = 0.0;
                        for (int64_t i = 0; i < hd; i++) dot += q[t * dim + hh * hd + i] * k[s * kvd + kh * hd + i];
                        scores[s] = dot / sqrt((double)hd);
                        max = fmax(max, scores[s]);
                    }
                    for (int64_t s = 0; s <= t; s++) sum += (scores[s] = exp(scores[s] - max));
                    for (int64_t i = 0; i < hd; i++) {
                        double acc = 0.0;
                        for (int64_t s = 0; s <= t; s++) acc += scores[s] / sum * v[s * kvd + kh * hd + i];
                        att[t * dim + hh * hd + i] = acc;
                    }
                }
            for (int64_t t = 0; t < T; t++) {
                snprintf(name, sizeof name, "blk.%u.attn_output.weight", l);
                ref_add(sums, name, att + t * dim, dim);
                matvec(wo, att + t * dim, dim, dim, h);
                for (int64_t i = 0; i < dim; i++) x[t * dim + i] += h[i];
                rmsnorm_d(x + t * dim, fn, dim, eps, xn);
                snprintf(name, sizeof name, "blk.%u.ffn_gate.weight", l);
                ref_add(sums, name, xn, dim);
                snprintf(name, sizeof name, "blk.%u.ffn_up.weight", l);
                ref_add(sums, name, xn, dim);
                matvec(wg, xn, ffn, dim, gate);
                matvec(wu, xn, ffn, dim, up);
                for (int64_t i = 0; i < ffn; i++) gate[i] = gate[i] / (1.0 + exp(-gate[i])) * up[i];
                snprintf(name, sizeof name, "blk.%u.ffn_down.weight", l);
                ref_add(sums, name, gate, ffn);
                matvec(wd, gate, dim, ffn, h);
                for (int64_t i = 0; i < dim; i++) x[t * dim + i] += h[i];
            }
        }
        if (process_output) {
            const float *on = tensor_f32(g, "output_norm.weight", 0, dim);
            for (int64_t t = 0; t < T; t++) {
                rmsnorm_d(x + t * dim, on, dim, eps, xns + t * dim);
                ref_add(sums, "output.weight", xns + t * dim, dim);
            }
        }
    }
    free(x); free(xn); free(q); free(k); free(v); free(att); free(h); free(gate); free(up); free(scores); free(xns);
    kite_gguf_free(g);
    free(data);
}

/* Runs the independent parser over path; returns its JSON. */
static json_t *parse_file(const char *path) {
    const char *src = getenv("KITE_SOURCE_DIR");
    if (!src) fail_msg("KITE_SOURCE_DIR is not set (run through ctest)");
    char script[1024], out[600];
    snprintf(script, sizeof script, "%s/tests/eval/imatrix_parse.py", src);
    snprintf(out, sizeof out, "%s.json", path);
    char *argv[] = {"python3", script, (char *)path, out, NULL};
    assert_int_equal(run_program(argv), 0);
    json_error_t jerr;
    json_t *j = json_load_file(out, 0, &jerr);
    if (!j) fail_msg("parser output: %s", jerr.text);
    return j;
}

static void test_imatrix_matches_reference_forward(void **state) {
    (void)state;
    size_t len;
    char *text = read_all(kite_test_data(TEXT_FILE), &len);
    kite_model *m = open_model(STORIES_GGUF);
    char path[512], dat_path[512], err[512];
    snprintf(path, sizeof path, "%s/imatrix.gguf", TMP);
    snprintf(dat_path, sizeof dat_path, "%s/imatrix.dat", TMP);
    kite_imatrix_params ip = kite_imatrix_default_params();
    ip.quality.n_ctx = IM_CTX;
    ip.quality.n_chunks = IM_CHUNKS;
    ip.quality.kv_type = KITE_KV_F32;
    ip.output_path = path;
    ip.process_output = true;
    ip.dataset = "question.jsonl";
    kite_imatrix_result r;
    assert_int_equal(kite_imatrix_compute(m, text, len, &ip, &r, err, sizeof err), KITE_OK);
    ip.output_path = dat_path;
    ip.legacy_format = true;
    kite_imatrix_result r_dat;
    assert_int_equal(kite_imatrix_compute(m, text, len, &ip, &r_dat, err, sizeof err), KITE_OK);
    assert_int_equal(r.n_chunks, IM_CHUNKS);

    size_t n_tokens;
    int32_t *tokens = tokenize(m, text, len, &n_tokens);
    int32_t chunked[IM_CHUNKS * IM_CTX];
    for (int32_t c = 0; c < IM_CHUNKS; c++) chunk_ids(m, tokens, IM_CTX, c, chunked + c * IM_CTX);
    ref_sums ref = {0};
    reference_imatrix(chunked, &ref, true);
    assert_int_equal(ref.n, 5 * 7 + 1);
    assert_int_equal(r.n_entries, ref.n);

    json_t *g = parse_file(path);
    assert_string_equal(json_string_value(json_array_get(json_object_get(g, "datasets"), 0)), "question.jsonl");
    assert_int_equal(json_integer_value(json_object_get(g, "chunk_count")), IM_CHUNKS);
    assert_int_equal(json_integer_value(json_object_get(g, "chunk_size")), IM_CTX);
    json_t *entries = json_object_get(g, "entries");
    assert_int_equal(json_object_size(entries), ref.n);
    /* Tensors in name order, each in_sum2 before its counts (llama.cpp sorts the names). */
    json_t *order = json_object_get(g, "tensor_order");
    assert_int_equal(json_array_size(order), 2 * (size_t)ref.n);
    for (size_t i = 0; i + 2 < json_array_size(order); i += 2) {
        const char *a = json_string_value(json_array_get(order, i)), *b = json_string_value(json_array_get(order, i + 2));
        assert_true(strcmp(a, b) < 0);
        assert_non_null(strstr(a, ".in_sum2"));
        assert_non_null(strstr(json_string_value(json_array_get(order, i + 1)), ".counts"));
    }
    json_t *dat = parse_file(dat_path);
    assert_int_equal(json_integer_value(json_object_get(dat, "chunk_count")), IM_CHUNKS);
    assert_string_equal(json_string_value(json_object_get(dat, "dataset")), "question.jsonl");
    json_t *dat_entries = json_object_get(dat, "entries");
    assert_int_equal(json_object_size(dat_entries), ref.n);
    double worst = 0.0, worst_dat = 0.0;
    for (int i = 0; i < ref.n; i++) {
        json_t *e = json_object_get(entries, ref.name[i]);
        if (!e) fail_msg("no entry %s in the GGUF imatrix", ref.name[i]);
        assert_int_equal(json_integer_value(json_object_get(e, "n_cols")), ref.cols[i]);
        assert_int_equal(json_integer_value(json_object_get(e, "n_mat")), 1);
        assert_true(json_real_value(json_array_get(json_object_get(e, "counts"), 0)) == IM_CHUNKS * IM_CTX);
        json_t *sums = json_object_get(e, "sums");
        json_t *de = json_object_get(dat_entries, ref.name[i]);
        assert_non_null(de);
        assert_int_equal(json_integer_value(json_object_get(de, "ncall")), IM_CHUNKS);
        json_t *values = json_object_get(de, "values");
        for (int64_t j = 0; j < ref.cols[i]; j++) {
            double got = json_number_value(json_array_get(sums, (size_t)j)), want = ref.sum[i][j];
            double rel = fabs(got - want) / fmax(want, 1e-30);
            worst = fmax(worst, rel);
            /* .dat: mean square times ncall. */
            double dat_want = want / (IM_CHUNKS * IM_CTX) * IM_CHUNKS;
            double dat_got = json_number_value(json_array_get(values, (size_t)j));
            worst_dat = fmax(worst_dat, fabs(dat_got - dat_want) / fmax(dat_want, 1e-30));
        }
    }
    printf("imatrix: %d entries, worst relative difference from the reference forward %.2e (GGUF), %.2e (.dat); "
           "bound %.0e\n",
           ref.n, worst, worst_dat, IMATRIX_REL_BOUND);
    assert_true(worst < IMATRIX_REL_BOUND);
    assert_true(worst_dat < IMATRIX_REL_BOUND);
    /* Without --process-output, the output head is left out (llama.cpp's default). */
    ip.output_path = path;
    ip.legacy_format = false;
    ip.process_output = false;
    assert_int_equal(kite_imatrix_compute(m, text, len, &ip, &r, err, sizeof err), KITE_OK);
    assert_int_equal(r.n_entries, ref.n - 1);
    json_t *g2 = parse_file(path);
    assert_null(json_object_get(json_object_get(g2, "entries"), "output.weight"));
    json_decref(g2);
    json_decref(g);
    json_decref(dat);
    for (int i = 0; i < ref.n; i++) free(ref.sum[i]);
    free(tokens);
    kite_model_free(m);
    free(text);
}

/* The writer on shapes a dense model never gives: several matrices (MoE experts), a matrix with no data,
 * an entry with none at all; and what it must refuse. Checked against the parser's reading of the
 * format: GGUF keeps the raw sums and counts; .dat stores sum / count * ncall with ncall = ceil(max count
 * / chunk size), 1 * ncall where a count is 0, and leaves out an entry without data. */
static void test_imatrix_writer_shapes(void **state) {
    (void)state;
    float sums_a[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, counts_a[3] = {10, 0, 5};
    float sums_b[2] = {7, 9}, counts_b[1] = {0};
    float sums_c[3] = {0.5f, 0.25f, 4}, counts_c[1] = {4};
    kite_imatrix_entry entries[3] = {
        {.name = "blk.1.ffn_down_exps.weight", .n_cols = 4, .n_mat = 3, .sum_sq = sums_a, .counts = counts_a},
        {.name = "blk.0.attn_q.weight", .n_cols = 2, .n_mat = 1, .sum_sq = sums_b, .counts = counts_b},
        {.name = "blk.0.attn_k.weight", .n_cols = 3, .n_mat = 1, .sum_sq = sums_c, .counts = counts_c},
    };
    char *datasets[2] = {"first.txt", "second.txt"};
    kite_imatrix m = {.entries = entries, .n_entries = 3, .datasets = datasets, .n_datasets = 2, .chunk_count = 3,
                      .chunk_size = 4};
    char path[512], dat[512];
    snprintf(path, sizeof path, "%s/shapes.gguf", TMP);
    snprintf(dat, sizeof dat, "%s/shapes.dat", TMP);
    kite_error e = {0};
    assert_int_equal(kite_imatrix_write(&m, path, false, &e), KITE_OK);
    assert_int_equal(kite_imatrix_write(&m, dat, true, &e), KITE_OK);
    json_t *g = parse_file(path), *d = parse_file(dat);
    json_t *ds = json_object_get(g, "datasets");
    assert_int_equal(json_array_size(ds), 2);
    assert_string_equal(json_string_value(json_array_get(ds, 1)), "second.txt");
    json_t *order = json_object_get(g, "tensor_order");
    assert_string_equal(json_string_value(json_array_get(order, 0)), "blk.0.attn_k.weight.in_sum2");
    assert_string_equal(json_string_value(json_array_get(order, 5)), "blk.1.ffn_down_exps.weight.counts");
    json_t *ea = json_object_get(json_object_get(g, "entries"), "blk.1.ffn_down_exps.weight");
    assert_int_equal(json_integer_value(json_object_get(ea, "n_cols")), 4);
    assert_int_equal(json_integer_value(json_object_get(ea, "n_mat")), 3);
    for (int i = 0; i < 12; i++) assert_true(json_real_value(json_array_get(json_object_get(ea, "sums"), i)) == sums_a[i]);
    for (int i = 0; i < 3; i++) assert_true(json_real_value(json_array_get(json_object_get(ea, "counts"), i)) == counts_a[i]);
    assert_int_equal(json_object_size(json_object_get(g, "entries")), 3);
    /* .dat: the entry without data is left out; the last dataset is the one named. */
    json_t *de = json_object_get(d, "entries");
    assert_int_equal(json_object_size(de), 2);
    assert_null(json_object_get(de, "blk.0.attn_q.weight"));
    assert_string_equal(json_string_value(json_object_get(d, "dataset")), "second.txt");
    assert_int_equal(json_integer_value(json_object_get(d, "chunk_count")), 3);
    json_t *da = json_object_get(de, "blk.1.ffn_down_exps.weight");
    assert_int_equal(json_integer_value(json_object_get(da, "ncall")), 3); /* ceil(10 / 4) */
    json_t *values = json_object_get(da, "values");
    assert_int_equal(json_array_size(values), 12);
    for (int mat = 0; mat < 3; mat++)
        for (int c = 0; c < 4; c++) {
            double want = counts_a[mat] == 0 ? 3.0 : (double)sums_a[mat * 4 + c] / counts_a[mat] * 3.0;
            assert_true(fabs(json_real_value(json_array_get(values, (size_t)(mat * 4 + c))) - want) < 1e-6 * want);
        }
    json_t *dc = json_object_get(de, "blk.0.attn_k.weight");
    assert_int_equal(json_integer_value(json_object_get(dc, "ncall")), 1);
    assert_true(fabs(json_real_value(json_array_get(json_object_get(dc, "values"), 2)) - 1.0) < 1e-7);
    json_decref(g);
    json_decref(d);

    /* Refused: a NaN, a duplicate name, a name too long for GGUF, the legacy form without a chunk size. */
    char bad_path[600];
    snprintf(bad_path, sizeof bad_path, "%s/bad.gguf", TMP);
    sums_c[1] = NAN;
    assert_int_equal(kite_imatrix_write(&m, bad_path, false, &e), KITE_ERR_INVALID_ARG);
    assert_non_null(strstr(e.msg, "blk.0.attn_k.weight"));
    sums_c[1] = 0.25f;
    entries[1].name = "blk.0.attn_k.weight";
    assert_int_equal(kite_imatrix_write(&m, bad_path, false, &e), KITE_ERR_INVALID_ARG);
    assert_non_null(strstr(e.msg, "two entries"));
    entries[1].name = "blk.0.a_very_long_tensor_name_that_does_not_fit_gguf.weight";
    assert_int_equal(kite_imatrix_write(&m, bad_path, false, &e), KITE_ERR_INVALID_ARG);
    assert_non_null(strstr(e.msg, "64 bytes"));
    entries[1].name = "blk.0.attn_q.weight";
    m.chunk_size = 0;
    assert_int_equal(kite_imatrix_write(&m, bad_path, true, &e), KITE_ERR_INVALID_ARG);
    struct stat st;
    assert_int_not_equal(stat(bad_path, &st), 0);
}

/* ---- 4. bad input ----------------------------------------------------------------------------------- */
static void test_bad_input(void **state) {
    (void)state;
    kite_model *m = open_model(STORIES_GGUF), *other = open_model(TS656_Q8);
    kite_quality_params qp = kite_quality_default_params();
    kite_perplexity_result r;
    kite_kld_result kr;
    char err[512];
    assert_int_equal(kite_perplexity(m, NULL, 0, &qp, &r, err, sizeof err), KITE_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "no text"));
    const char *short_text = "Once upon a time there was a little girl.";
    assert_int_equal(kite_perplexity(m, short_text, strlen(short_text), &qp, &r, err, sizeof err), KITE_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "too short"));
    assert_non_null(strstr(err, "1024"));
    qp.n_ctx = 4;
    assert_int_equal(kite_perplexity(m, short_text, strlen(short_text), &qp, &r, err, sizeof err), KITE_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "chunk size"));
    qp.n_ctx = 64;
    size_t len;
    char *text = read_all(kite_test_data(TEXT_FILE), &len);
    assert_int_equal(kite_kld(m, other, text, len, &qp, &kr, err, sizeof err), KITE_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "vocabulary"));
    printf("vocabulary mismatch: %s\n", err);
    /* An output that cannot be created fails before the work, and nothing is left. */
    kite_imatrix_params ip = kite_imatrix_default_params();
    ip.quality.n_ctx = 64;
    ip.quality.n_chunks = 2;
    char bad[600];
    snprintf(bad, sizeof bad, "%s/no-such-dir/imatrix.gguf", TMP);
    ip.output_path = bad;
    kite_imatrix_result ir;
    assert_int_equal(kite_imatrix_compute(m, text, len, &ip, &ir, err, sizeof err), KITE_ERR_IO);
    assert_non_null(strstr(err, "no-such-dir/imatrix.gguf"));
    free(text);
    kite_model_free(m);
    kite_model_free(other);
}

static int setup(void **state) {
    (void)state;
    snprintf(TMP, sizeof TMP, "/tmp/kite-test-quality-XXXXXX");
    return mkdtemp(TMP) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    if (!getenv("KITE_QUALITY_KEEP")) {
        char cmd[700];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", TMP);
        if (system(cmd) != 0) return -1;
    }
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_perplexity_matches_llamacpp),
        cmocka_unit_test(test_kld_self_is_zero),
        cmocka_unit_test(test_kld_q8_against_f32_matches_direct),
        cmocka_unit_test(test_imatrix_matches_reference_forward),
        cmocka_unit_test(test_imatrix_writer_shapes),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
