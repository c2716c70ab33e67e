/* kite: on-device LLM inference.
 *
 * The only header the CLI, the server, the benchmarks and bindings include.
 * Conventions:
 *   - Functions return a kite_status (0 = KITE_OK). On failure, a one-line message is written to the
 *     caller's `err` buffer (always NUL-terminated when err_size > 0; err may be NULL).
 *   - Opaque handles come in open/free pairs; free(NULL) is a no-op.
 *   - A model is immutable after open and may be shared by many sessions on many threads.
 *     A session is one conversation and is used by one thread at a time (kite_cancel excepted).
 *   - The library never prints to stdout or stderr and never exits; it logs through kite_set_log_callback.
 */
#ifndef KITE_H
#define KITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The library is built with hidden visibility; everything declared here is exported. */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

#define KITE_VERSION_MAJOR 0
#define KITE_VERSION_MINOR 1
#define KITE_VERSION_PATCH 0

typedef enum kite_status {
    KITE_OK = 0,
    KITE_ERR_INVALID_ARG = 1,  /* a parameter is out of range or NULL */
    KITE_ERR_IO = 2,           /* a file could not be opened, read or mapped */
    KITE_ERR_FORMAT = 3,       /* a file is malformed: bad magic, truncated, bad offsets or sizes */
    KITE_ERR_UNSUPPORTED = 4,  /* a well-formed file that kite cannot run (architecture, tensor type) */
    KITE_ERR_NOMEM = 5,        /* an allocation failed */
    KITE_ERR_CONTEXT_FULL = 6, /* the prompt or generation does not fit in the session's context */
    KITE_ERR_CANCELLED = 7,    /* kite_cancel was called */
    KITE_ERR_TOKENIZER = 8,    /* text could not be tokenized (e.g. invalid UTF-8), or no tokenizer */
} kite_status;

/* A short English name for a status ("ok", "format error", ...). Never NULL. */
const char *kite_status_name(int status);

/* ---- logging ---------------------------------------------------------------------------------- */
typedef enum kite_log_level { KITE_LOG_DEBUG = 0, KITE_LOG_INFO = 1, KITE_LOG_WARN = 2, KITE_LOG_ERROR = 3 } kite_log_level;
typedef void (*kite_log_fn)(kite_log_level level, const char *message, void *user_data);
/* Process-wide log sink; NULL silences the library (the default). */
void kite_set_log_callback(kite_log_fn fn, void *user_data);

/* ---- models ----------------------------------------------------------------------------------- */
typedef struct kite_model kite_model;
typedef struct kite_session kite_session;

/* Called while a model loads; fraction in [0, 1]. */
typedef void (*kite_progress_fn)(float fraction, void *user_data);

typedef struct kite_model_params {
    const char *tokenizer_path; /* a llama2.c tokenizer .bin or a tokenizer.json; NULL: from the model */
    bool vocab_only;            /* load the tokenizer only (no weights, no sessions); the model path
                                   may then be NULL when tokenizer_path is given */
    int n_threads;              /* worker threads for sessions of this model; 0 = number of cores */
    kite_progress_fn progress;  /* optional */
    void *progress_user_data;
} kite_model_params;

kite_model_params kite_model_default_params(void);

/* path: a GGUF file, a llama2.c .bin checkpoint, a .safetensors file inside a Hugging Face folder,
 * or the folder itself. Large models report progress through params->progress. */
int kite_model_open(kite_model **out, const char *path, const kite_model_params *params, char *err, size_t err_size);
void kite_model_free(kite_model *model);

typedef struct kite_model_info {
    char architecture[32];  /* "llama", "qwen2", "qwen3" */
    char format[16];        /* "gguf", "safetensors", "llama2c" */
    char tokenizer[16];     /* "spm", "bpe" (byte-level), "none" */
    int32_t n_vocab;
    int32_t dim;            /* residual width */
    int32_t n_layers;
    int32_t n_heads;
    int32_t n_kv_heads;
    int32_t head_dim;
    int32_t ffn_dim;
    int32_t n_ctx_train;    /* context length the model was trained with */
    float rope_theta;
    float rms_eps;
    bool tied_embeddings;
    int32_t bos_id;         /* -1 when the model has none */
    int32_t eos_id;         /* -1 when the model has none */
    bool add_bos;           /* whether prompts start with BOS by default */
    int64_t n_params;
    uint64_t weight_bytes;  /* bytes of all weight tensors as stored */
    int32_t n_tensors;
} kite_model_info;

void kite_model_get_info(const kite_model *model, kite_model_info *info);

typedef struct kite_tensor_desc {
    const char *name;       /* owned by the model */
    const char *type_name;  /* "f32", "q4_K", ... */
    int32_t n_dims;
    int64_t shape[4];       /* shape[0] is the innermost (contiguous) dimension */
    uint64_t n_bytes;
} kite_tensor_desc;

/* index in [0, info.n_tensors). */
int kite_model_tensor(const kite_model *model, int32_t index, kite_tensor_desc *desc);

/* Sampling defaults the model ships with (generation_config.json); fields not given keep kite's. */
typedef struct kite_logit_bias { int32_t token; float bias; } kite_logit_bias;

typedef struct kite_gen_params {
    int32_t max_tokens;        /* tokens to generate at most; stops earlier at an end token */
    float temperature;         /* 0 = greedy */
    int32_t top_k;             /* 0 = off */
    float top_p;               /* 1 = off */
    float min_p;               /* 0 = off */
    float repeat_penalty;      /* 1 = off; divides positive logits, multiplies negative ones */
    int32_t penalty_last_n;    /* window of previous tokens the penalties look at; -1 = whole context */
    float presence_penalty;    /* 0 = off */
    float frequency_penalty;   /* 0 = off */
    uint64_t seed;
    const kite_logit_bias *logit_bias; /* n_logit_bias entries, borrowed during generation */
    size_t n_logit_bias;
    bool ignore_eos;           /* keep going past end tokens */
} kite_gen_params;

kite_gen_params kite_gen_default_params(void);
/* kite's defaults overlaid with the model's generation_config.json, if it has one. */
kite_gen_params kite_model_gen_params(const kite_model *model);

/* ---- tokens ----------------------------------------------------------------------------------- */
/* Encodes text (UTF-8, validated). Writes at most `capacity` ids; *n_ids gets the full count, so a
 * call with capacity 0 measures. Returns KITE_ERR_INVALID_ARG if the ids did not fit. */
int kite_tokenize(const kite_model *model, const char *text, size_t text_len, bool add_bos, bool parse_special,
                  int32_t *ids, size_t capacity, size_t *n_ids, char *err, size_t err_size);
/* Decodes ids into bytes (not NUL-terminated unless room allows; *n_bytes gets the full length). */
int kite_detokenize(const kite_model *model, const int32_t *ids, size_t n_ids, char *text, size_t capacity,
                    size_t *n_bytes, char *err, size_t err_size);

/* ---- sessions --------------------------------------------------------------------------------- */
/* Precision of the KV cache. f16 (the default, as llama.cpp's) halves its memory and the bytes attention
 * reads; f32 keeps the projections exactly (for comparisons with float references). */
typedef enum kite_kv_type {
    KITE_KV_F16 = 0,
    KITE_KV_F32 = 1,
} kite_kv_type;

typedef struct kite_session_params {
    int32_t n_ctx;        /* tokens of context; 0 = the model's training context (capped at 4096) */
    int32_t n_threads;    /* 0 = the model's setting */
    kite_kv_type kv_type; /* KV cache precision (default KITE_KV_F16) */
} kite_session_params;

kite_session_params kite_session_default_params(void);
int kite_session_open(kite_session **out, kite_model *model, const kite_session_params *params, char *err,
                      size_t err_size);
void kite_session_free(kite_session *session);
/* Forgets the conversation (KV cache, statistics). */
void kite_session_reset(kite_session *session);
int32_t kite_session_n_past(const kite_session *session);
int32_t kite_session_n_ctx(const kite_session *session);

/* Forgets every token after the first n_past (0 <= n_past <= kite_session_n_past): the next prompt
 * or generation continues from there. Costs nothing; the statistics are kept. */
int kite_session_truncate(kite_session *session, int32_t n_past, char *err, size_t err_size);

/* Appends tokens to the context, running the model over them (prefill). */
int kite_prompt(kite_session *session, const int32_t *ids, size_t n_ids, char *err, size_t err_size);

/* Appends tokens like kite_prompt and writes the logits after each of them: logits gets n_ids rows of
 * n_vocab floats. For tests and tools that compare with other engines. */
int kite_eval(kite_session *session, const int32_t *ids, size_t n_ids, float *logits, char *err, size_t err_size);

/* Called for every generated token. `text`/`text_len` are the bytes that token completes (possibly
 * empty while a multi-byte character is incomplete). Return false to stop generating. */
typedef bool (*kite_token_fn)(int32_t id, const char *text, size_t text_len, void *user_data);

/* Generates after the current context (kite_prompt first). Stops at max_tokens, an end token,
 * a callback returning false, kite_cancel, or a full context (KITE_ERR_CONTEXT_FULL after the
 * tokens that fitted were emitted). */
int kite_generate(kite_session *session, const kite_gen_params *params, kite_token_fn on_token, void *user_data,
                  char *err, size_t err_size);

/* Safe from any thread: makes a running kite_prompt/kite_generate return KITE_ERR_CANCELLED soon. */
void kite_cancel(kite_session *session);

/* ---- speculative decoding -------------------------------------------------------------------- */
/* A drafter proposes a chain or a tree of tokens; the model verifies all of them in one batched pass
 * and keeps the longest path that matches its own choices. Greedy output is token-identical to plain
 * decoding; sampled output (Gumbel verification) is token-identical to plain sampling with the same
 * seed and settings. Speculation changes speed, never the output (rejection verification excepted:
 * it is exact in distribution only, and kept for comparison). */
typedef enum kite_drafter {
    KITE_DRAFT_NONE = 0,   /* plain decoding */
    KITE_DRAFT_NGRAM = 1,  /* suffix / n-gram matches over the prompt, the output and the session's history */
    KITE_DRAFT_MODEL = 2,  /* a smaller model sharing the vocabulary (draft_model) */
    KITE_DRAFT_ORACLE = 3, /* benchmarks only: replays oracle_ids (a previous plain run), corrupting each
                              proposed token with probability oracle_error_rate */
} kite_drafter;

typedef enum kite_spec_verify {
    KITE_VERIFY_GUMBEL = 0,    /* shared Gumbel noise: exact, token-identical to plain sampling */
    KITE_VERIFY_REJECTION = 1, /* standard speculative sampling, min(1, p/q) then the residual (chains) */
} kite_spec_verify;

enum { KITE_MAX_DRAFT = 32 }; /* drafted tokens per verification pass, at most */

typedef struct kite_spec_params {
    kite_drafter drafter;
    kite_model *draft_model;      /* KITE_DRAFT_MODEL; borrowed, must outlive the session */
    int32_t budget;               /* drafted tokens per pass, 1..KITE_MAX_DRAFT; 0 = adaptive */
    int32_t tree_width;           /* children per node, 1 (a chain) .. 8 */
    kite_spec_verify verify;
    const int32_t *oracle_ids;    /* KITE_DRAFT_ORACLE: the continuation to replay (borrowed) */
    size_t n_oracle_ids;
    float oracle_error_rate;      /* in [0, 1] */
} kite_spec_params;

kite_spec_params kite_spec_default_params(void);
/* Sets how the session decodes from now on. A draft model whose vocabulary differs from the
 * session's model is refused (KITE_ERR_INVALID_ARG) and the session keeps its previous setting. */
int kite_session_set_spec(kite_session *session, const kite_spec_params *params, char *err, size_t err_size);

typedef struct kite_stats {
    int64_t prompt_tokens;    /* tokens given to kite_prompt since open/reset */
    int64_t generated_tokens; /* tokens produced by kite_generate since open/reset */
    double prefill_ms;        /* time spent in prompt processing */
    double ttft_ms;           /* last kite_generate: the preceding prompt's processing plus the wait for its first token */
    double decode_ms;         /* time spent generating, after the first token of each generate call */
    double prefill_tok_s;
    double decode_tok_s;
    /* Speculative decoding (zero when plain). */
    int64_t target_passes;    /* verification passes of the model */
    int64_t drafted;          /* drafted tokens verified */
    int64_t accepted;         /* drafted tokens accepted */
    double tau;               /* tokens emitted per target pass (accepted + 1 per pass) */
    double draft_ms;          /* time spent drafting */
    double verify_ms;         /* time spent in verification passes */
    int64_t drafted_by_depth[KITE_MAX_DRAFT];  /* drafted nodes at depth d+1 */
    int64_t accepted_by_depth[KITE_MAX_DRAFT]; /* accepted nodes at depth d+1 */
} kite_stats;

void kite_session_stats(const kite_session *session, kite_stats *stats);

/* ---- machine and benchmarks ------------------------------------------------------------------ */
typedef struct kite_hw_info {
    char kernels[32];        /* the kernel set in use: "ref", "avx2", "avx512-vnni", "neon-dotprod", ... */
    int32_t n_cpus;          /* online CPUs */
    int32_t n_threads;       /* threads the multi-threaded figures used */
    double read_gbs_1t;      /* read bandwidth of one thread, GB/s (1e9 bytes) */
    double read_gbs;         /* read bandwidth of n_threads, GB/s */
    double int8_gops_1t;     /* int8 multiply-add peak of one thread, GOP/s (2 ops per multiply-add) */
    double int8_gops;        /* the same over n_threads */
    double f32_gflops;       /* fp32 FMA peak over n_threads, GFLOP/s */
} kite_hw_info;

/* Measures the machine (about `seconds` in all; 0 = a default of about 1.5 s). */
int kite_hw_probe(int32_t n_threads, double seconds, kite_hw_info *info, char *err, size_t err_size);

/* Writes a GGUF model of a real shape with random weights, for benchmarks. shape: "llama-1.1b"
 * (dim 2048, 16 layers, 32/8 heads, FFN 8192, vocab 32000), "qwen3-0.6b", "llama-3.2-1b", or "tiny";
 * type: "f32", "f16", "bf16", "q8_0", "q4_0", "q4_k_m". The tokenizer (a tokenizer.json or a
 * llama2.c tokenizer .bin whose vocabulary fits the shape) is written into the file so other engines
 * can load it. */
typedef struct kite_random_model_params {
    const char *shape;
    const char *type;
    const char *tokenizer_path;
    uint64_t seed;
    kite_progress_fn progress; /* optional */
    void *progress_user_data;
} kite_random_model_params;

int kite_write_random_model(const char *path, const kite_random_model_params *params, char *err, size_t err_size);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif
#endif /* KITE_H */
