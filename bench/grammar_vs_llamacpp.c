/* Grammar-constrained sampling cost per token, kite against llama.cpp, on the same vocabulary, the same
 * grammar and the same token sequence.
 *
 * The grammar is kite's compilation of a JSON Schema (kite_grammar_to_gbnf: plain GBNF that llama.cpp
 * parses too); the token sequence is a JSON document valid under it, tokenized by the model's
 * tokenizer. Per token, each engine does what its sampler does before a token is drawn and after it is
 * chosen, over logits for the whole vocabulary:
 *   kite       kite_gmask_allowed (a cached mask, or a walk of the vocabulary trie on a state's first
 *              visit) + kite_gmask_apply (-inf where refused) + kite_gmask_advance;
 *   llama.cpp  llama_sampler_apply of llama_sampler_init_grammar over a llama_token_data_array of all
 *              n_vocab candidates (its grammar sampler sets refused candidates to -inf) +
 *              llama_sampler_accept.
 * Filling the candidate array (llama.cpp) is outside the timed region, as is copying the logits
 * (kite). Each run is a new generation (a new kite_gmask, whose cache starts empty; a new llama.cpp
 * sampler); runs alternate between the engines. Both engines must allow every token of the document
 * (checked), and the number of tokens each allows is compared at every step (reported).
 *
 * The vocabulary's one-time index (kite_vocab_index_build: the token trie) and llama.cpp's sampler
 * creation are timed apart.
 *
 *   grammar_vs_llamacpp LIB_DIR MODEL.gguf [RUNS] [SCHEMA.json DOCUMENT.json]
 * LIB_DIR: node-llama-cpp's prebuilt libraries (tests/oracle/node_modules/@node-llama-cpp/linux-x64/
 * bins/linux-x64). MODEL.gguf: any GGUF llama.cpp loads, e.g. `kite gen-model --shape tiny --tokenizer
 * .../qwen3/tokenizer.json`. */
#include <dlfcn.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/engine.h"
#include "grammar/grammar.h"
#include "grammar/mask.h"
#include "kite.h"
#include "tokenize/tokenizer.h"

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

/* The schema's record as kite's JSON grammar writes it (its key order, one space after ':' and ','). */
static const char DEFAULT_DOCUMENT[] =
    "{\"id\": 48213, \"name\": \"Ada Lovelace, Analytical Engines Ltd.\", \"email\": \"ada.lovelace@engines.org\", "
    "\"active\": true, \"tier\": \"enterprise\", \"address\": {\"street\": \"12 St James's Square\", \"city\": \"London\", "
    "\"zip\": \"20500\"}, \"tags\": [\"mathematics\", \"poetry\", \"computing\"]}";

/* ---- llama.cpp, dlopen'ed (declarations as llama.h has them) ---- */

typedef int32_t llama_token;
typedef struct llama_token_data {
    llama_token id;
    float logit;
    float p;
} llama_token_data;
typedef struct llama_token_data_array {
    llama_token_data *data;
    size_t size;
    int64_t selected;
    bool sorted;
} llama_token_data_array;
/* llama_model_params by value: larger than any version's struct (returned through a hidden pointer and
 * passed in memory on x86-64 and aarch64 alike, so the callee reads only its own fields) */
typedef struct params_slot {
    unsigned char bytes[1024];
} params_slot;

typedef struct llama_api {
    void *ggml, *llama;
    void (*backend_init)(void);
    void (*load_all_from_path)(const char *dir);
    void (*log_set)(void (*)(int, const char *, void *), void *);
    params_slot (*model_default_params)(void);
    void *(*model_load)(const char *path, params_slot params);
    void (*model_free)(void *model);
    const void *(*model_get_vocab)(const void *model);
    int32_t (*vocab_n_tokens)(const void *vocab);
    void *(*sampler_init_grammar)(const void *vocab, const char *grammar, const char *root);
    void (*sampler_apply)(void *smpl, llama_token_data_array *cur);
    void (*sampler_accept)(void *smpl, llama_token token);
    void (*sampler_free)(void *smpl);
} llama_api;

static void quiet_log(int level, const char *text, void *user_data) {
    (void)level, (void)text, (void)user_data;
}

static bool llama_open(llama_api *a, const char *dir) {
    memset(a, 0, sizeof *a);
    char path[4096];
    snprintf(path, sizeof path, "%s/libggml-base.so", dir);
    void *base = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    snprintf(path, sizeof path, "%s/libggml.v0.4.0.so", dir);
    a->ggml = base ? dlopen(path, RTLD_NOW | RTLD_GLOBAL) : NULL;
    snprintf(path, sizeof path, "%s/libllama.v0.4.0.so", dir);
    a->llama = a->ggml ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
    if (!a->llama) {
        fprintf(stderr, "cannot open llama.cpp's libraries in %s: %s\n", dir, dlerror());
        return false;
    }
#define SYM(lib, field, name) *(void **)&a->field = dlsym(a->lib, name)
    SYM(llama, backend_init, "llama_backend_init");
    SYM(ggml, load_all_from_path, "ggml_backend_load_all_from_path");
    SYM(llama, log_set, "llama_log_set");
    SYM(llama, model_default_params, "llama_model_default_params");
    SYM(llama, model_load, "llama_model_load_from_file");
    SYM(llama, model_free, "llama_model_free");
    SYM(llama, model_get_vocab, "llama_model_get_vocab");
    SYM(llama, vocab_n_tokens, "llama_vocab_n_tokens");
    SYM(llama, sampler_init_grammar, "llama_sampler_init_grammar");
    SYM(llama, sampler_apply, "llama_sampler_apply");
    SYM(llama, sampler_accept, "llama_sampler_accept");
    SYM(llama, sampler_free, "llama_sampler_free");
#undef SYM
    if (!a->backend_init || !a->load_all_from_path || !a->log_set || !a->model_default_params || !a->model_load ||
        !a->model_free || !a->model_get_vocab || !a->vocab_n_tokens || !a->sampler_init_grammar || !a->sampler_apply ||
        !a->sampler_accept || !a->sampler_free) {
        fprintf(stderr, "llama.cpp's libraries in %s lack a symbol this bench uses\n", dir);
        return false;
    }
    a->log_set(quiet_log, NULL);
    a->load_all_from_path(dir);
    a->backend_init();
    return true;
}

/* ---- helpers ---- */

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return 1e3 * (double)t.tv_sec + 1e-6 * (double)t.tv_nsec;
}

static char *read_all(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = malloc((size_t)n + 1);
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) {
        free(p);
        p = NULL;
    }
    fclose(f);
    if (p) p[n] = 0;
    return p;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ---- one run of each ---- */

typedef struct run_result {
    double total_ms, first_ms; /* all tokens; the first token alone */
    int64_t computed, hits;    /* kite: masks walked, masks from the cache */
    bool ok;
} run_result;

static run_result run_kite(const kite_gbnf *g, const kite_vocab_index *vi, const kite_tokenizer *tok, const int32_t *ids,
                           size_t n_ids, const float *logits, float *work, int32_t n_vocab, int32_t *allowed_counts,
                           uint64_t *kept_bits) {
    run_result r = {0};
    kite_error e = {0};
    kite_gmask *gm = NULL;
    if (kite_gmask_new(g, vi, tok, true, 0, &gm, &e)) {
        fprintf(stderr, "kite: %s\n", e.msg);
        return r;
    }
    /* the reply follows an ordinary prompt token (after BOS, kite would also allow the first token with its
     * SentencePiece dummy-prefix space, which it drops there; llama.cpp reads pieces as they are) */
    int32_t state = kite_gmask_start(gm), prev = kite_tokenizer_token_id(tok, ":", 1);
    r.ok = true;
    for (size_t i = 0; i < n_ids && r.ok; i++) {
        memcpy(work, logits, (size_t)n_vocab * sizeof *work);
        double t0 = now_ms();
        int32_t n_allowed = 0;
        const uint64_t *bits = kite_gmask_allowed(gm, state, prev, &n_allowed, &e);
        if (bits) kite_gmask_apply(bits, work, n_vocab);
        int32_t next = bits ? kite_gmask_advance(gm, state, prev, ids[i]) : -1;
        double dt = now_ms() - t0;
        r.total_ms += dt;
        if (i == 0) r.first_ms = dt;
        allowed_counts[i] = n_allowed;
        size_t words = ((size_t)n_vocab + 63) / 64;
        if (bits) memcpy(kept_bits + i * words, bits, words * sizeof *bits);
        if (!bits || (next < 0 && next != KITE_GSTATE_ENDED) || isinf(work[ids[i]])) {
            fprintf(stderr, "kite refuses token %zu (id %d) of the document\n", i, ids[i]);
            r.ok = false;
        }
        state = next;
        prev = ids[i];
    }
    kite_gmask_stats st;
    kite_gmask_get_stats(gm, &st);
    r.computed = st.computed;
    r.hits = st.hits;
    kite_gmask_free(gm);
    return r;
}

static run_result run_llama(const llama_api *a, const void *vocab, const char *gbnf, const int32_t *ids, size_t n_ids,
                            const float *logits, llama_token_data *cand, int32_t n_vocab, int32_t *allowed_counts,
                            double *init_ms, const uint64_t *kite_bits, const kite_tokenizer *tok, bool *shown,
                            int64_t *diff) {
    run_result r = {0};
    double t0 = now_ms();
    void *smpl = a->sampler_init_grammar(vocab, gbnf, "root");
    *init_ms = now_ms() - t0;
    if (!smpl) {
        fprintf(stderr, "llama.cpp refuses the grammar\n");
        return r;
    }
    r.ok = true;
    for (size_t i = 0; i < n_ids && r.ok; i++) {
        for (int32_t t = 0; t < n_vocab; t++) cand[t] = (llama_token_data){t, logits[t], 0.0f};
        llama_token_data_array arr = {cand, (size_t)n_vocab, -1, false};
        double t1 = now_ms();
        a->sampler_apply(smpl, &arr);
        a->sampler_accept(smpl, ids[i]);
        double dt = now_ms() - t1;
        r.total_ms += dt;
        if (i == 0) r.first_ms = dt;
        int32_t n_allowed = 0;
        bool chosen_ok = false;
        for (size_t k = 0; k < arr.size; k++) {
            if (isinf(arr.data[k].logit)) continue;
            n_allowed++;
            if (arr.data[k].id == ids[i]) chosen_ok = true;
        }
        allowed_counts[i] = n_allowed;
        /* tokens only one engine allows, by kind; a few of the others shown */
        const uint64_t *kb = kite_bits + i * (((size_t)n_vocab + 63) / 64);
        for (size_t k = 0; k < arr.size && diff; k++) {
            int32_t id = arr.data[k].id;
            bool l_ok = !isinf(arr.data[k].logit), k_ok = kite_gmask_bit(kb, id);
            if (l_ok == k_ok) continue;
            size_t pl = 0;
            const char *piece = kite_tokenizer_token_text(tok, id, &pl);
            char bytes[256];
            int32_t nb = kite_tokenizer_piece(tok, -1, id, bytes, sizeof bytes);
            bool never_utf8 = false; /* a byte no UTF-8 text holds: C0, C1, F5..FF */
            for (int32_t b = 0; b < nb && b < (int32_t)sizeof bytes; b++) {
                unsigned char c = (unsigned char)bytes[b];
                if (c == 0xC0 || c == 0xC1 || c >= 0xF5) never_utf8 = true;
            }
            int kind = kite_tokenizer_is_control(tok, id) || kite_tokenizer_is_special(tok, id) || nb <= 0 ? 0 : never_utf8 ? 1 : 2;
            diff[(l_ok ? 0 : 3) + kind]++;
            if (kind == 2 && !*shown) {
                printf("  step %zu: token %d '%.*s' allowed by %s only\n", i, id, (int)pl, piece ? piece : "", l_ok ? "llama.cpp" : "kite");
                *shown = true;
            }
        }
        if (!chosen_ok) {
            fprintf(stderr, "llama.cpp refuses token %zu (id %d) of the document\n", i, ids[i]);
            r.ok = false;
        }
    }
    a->sampler_free(smpl);
    return r;
}

int main(int argc, char **argv) {
    if (argc < 3 || argc == 5) {
        fprintf(stderr, "usage: %s LIB_DIR MODEL.gguf [RUNS] [SCHEMA.json DOCUMENT.json]\n", argv[0]);
        return 2;
    }
    const int runs = argc > 3 ? atoi(argv[3]) : 5;
    if (runs < 1 || runs > 1000) {
        fprintf(stderr, "RUNS must be 1..1000\n");
        return 2;
    }
    char *schema = argc > 5 ? read_all(argv[4]) : strdup(DEFAULT_SCHEMA);
    char *doc = argc > 5 ? read_all(argv[5]) : strdup(DEFAULT_DOCUMENT);
    if (!schema || !doc) {
        fprintf(stderr, "cannot read the schema or the document\n");
        return 1;
    }
    size_t doc_len = strlen(doc);
    while (doc_len && (doc[doc_len - 1] == '\n' || doc[doc_len - 1] == '\r')) doc[--doc_len] = 0;

    char err[512];
    kite_model *model = NULL;
    kite_model_params mp = kite_model_default_params();
    if (kite_model_open(&model, argv[2], &mp, err, sizeof err)) {
        fprintf(stderr, "kite: %s\n", err);
        return 1;
    }
    char *gbnf = NULL;
    size_t gbnf_len = 0;
    if (kite_grammar_to_gbnf(KITE_GRAMMAR_JSON_SCHEMA, schema, strlen(schema), &gbnf, &gbnf_len, err, sizeof err)) {
        fprintf(stderr, "kite: %s\n", err);
        return 1;
    }
    size_t n_ids = 0;
    kite_tokenize(model, doc, doc_len, false, false, NULL, 0, &n_ids, err, sizeof err);
    int32_t *ids = malloc((n_ids + 1) * sizeof *ids);
    if (!ids || kite_tokenize(model, doc, doc_len, false, false, ids, n_ids, &n_ids, err, sizeof err)) {
        fprintf(stderr, "kite: tokenize: %s\n", err);
        return 1;
    }
    /* SentencePiece writes the document's first token with its dummy-prefix space ("\xe2\x96\x81{"); kite drops
     * that space at the start of a reply, llama.cpp's grammar sampler reads it: both get the same token
     * without the space */
    size_t first_len = 0;
    const char *first = kite_tokenizer_token_text(model->tokenizer, ids[0], &first_len);
    if (first && first_len > 3 && !memcmp(first, "\xe2\x96\x81", 3)) {
        int32_t bare = kite_tokenizer_token_id(model->tokenizer, first + 3, first_len - 3);
        if (bare < 0) {
            fprintf(stderr, "the document's first token has a dummy-prefix space and no token without it\n");
            return 1;
        }
        ids[0] = bare;
    }
    ids[n_ids++] = kite_tokenizer_eos(model->tokenizer); /* the document ends: the end token is allowed */
    const int32_t n_vocab = model->n_vocab;

    kite_error e = {0};
    kite_gbnf *g = NULL;
    if (kite_gbnf_parse(gbnf, gbnf_len, "root", &g, &e)) {
        fprintf(stderr, "kite: %s\n", e.msg);
        return 1;
    }
    double t0 = now_ms();
    kite_vocab_index *vi = NULL;
    if (kite_vocab_index_build(model->tokenizer, n_vocab, &vi, &e)) {
        fprintf(stderr, "kite: %s\n", e.msg);
        return 1;
    }
    const double index_ms = now_ms() - t0;

    llama_api api;
    if (!llama_open(&api, argv[1])) return 1;
    params_slot p = api.model_default_params();
    void *lmodel = api.model_load(argv[2], p);
    if (!lmodel) {
        fprintf(stderr, "llama.cpp cannot load %s\n", argv[2]);
        return 1;
    }
    const void *vocab = api.model_get_vocab(lmodel);
    if (api.vocab_n_tokens(vocab) != n_vocab) {
        fprintf(stderr, "the vocabularies differ: kite %d tokens, llama.cpp %d\n", n_vocab, api.vocab_n_tokens(vocab));
        return 1;
    }

    float *logits = malloc((size_t)n_vocab * sizeof *logits), *work = malloc((size_t)n_vocab * sizeof *work);
    llama_token_data *cand = malloc((size_t)n_vocab * sizeof *cand);
    int32_t *kite_allowed = calloc(n_ids, sizeof *kite_allowed), *llama_allowed = calloc(n_ids, sizeof *llama_allowed);
    double *kite_ms = calloc((size_t)runs, sizeof(double)), *llama_ms = calloc((size_t)runs, sizeof(double));
    double *kite_first = calloc((size_t)runs, sizeof(double)), *llama_first = calloc((size_t)runs, sizeof(double));
    double *llama_init = calloc((size_t)runs, sizeof(double));
    uint64_t *kite_bits = calloc(n_ids * (((size_t)n_vocab + 63) / 64), sizeof *kite_bits);
    bool shown = false;
    int64_t diff[6] = {0}; /* llama.cpp only: control/unknown, bytes never in UTF-8, others; kite only: the same */
    if (!logits || !work || !cand || !kite_allowed || !llama_allowed || !kite_ms || !llama_ms || !kite_first || !llama_first ||
        !llama_init || !kite_bits) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (int32_t t = 0; t < n_vocab; t++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        logits[t] = (float)((double)(x >> 11) / 9007199254740992.0 * 8.0 - 4.0);
    }
    run_result kr = {0}, lr = {0};
    for (int r = 0; r < runs; r++) {
        kr = run_kite(g, vi, model->tokenizer, ids, n_ids, logits, work, n_vocab, kite_allowed, kite_bits);
        lr = run_llama(&api, vocab, gbnf, ids, n_ids, logits, cand, n_vocab, llama_allowed, &llama_init[r], kite_bits,
                       model->tokenizer, &shown, r == 0 ? diff : NULL);
        if (!kr.ok || !lr.ok) return 1;
        kite_ms[r] = kr.total_ms / (double)n_ids;
        llama_ms[r] = lr.total_ms / (double)n_ids;
        kite_first[r] = kr.first_ms;
        llama_first[r] = lr.first_ms;
    }
    size_t differ = 0;
    for (size_t i = 0; i < n_ids; i++) differ += kite_allowed[i] != llama_allowed[i];
    double km = median(kite_ms, runs), lm = median(llama_ms, runs);
    printf("model %s: %d tokens in the vocabulary; document of %zu tokens (%zu bytes), grammar of %zu bytes\n", argv[2],
           n_vocab, n_ids, doc_len, gbnf_len);
    printf("kite      per token %.4f ms (median of %d runs; first token %.3f ms; per run %lld trie walks, %lld cached masks)"
           "; vocabulary index %.1f ms once per model\n",
           km, runs, median(kite_first, runs), (long long)kr.computed, (long long)kr.hits, index_ms);
    printf("llama.cpp per token %.4f ms (median of %d runs; first token %.3f ms); sampler init %.2f ms per generation\n", lm, runs,
           median(llama_first, runs), median(llama_init, runs));
    printf("ratio llama.cpp / kite: %.1fx; allowed-token counts differ at %zu of %zu steps\n", lm / km, differ, n_ids);
    printf("tokens allowed by one engine only, summed over the steps: llama.cpp only %lld control/unknown/empty, "
           "%lld with bytes no UTF-8 holds (C0, C1, F5-FF), %lld others; kite only %lld, %lld, %lld\n",
           (long long)diff[0], (long long)diff[1], (long long)diff[2], (long long)diff[3], (long long)diff[4], (long long)diff[5]);
    api.model_free(lmodel);
    kite_vocab_index_free(vi);
    kite_gbnf_free(g);
    kite_model_free(model);
    return 0;
}
