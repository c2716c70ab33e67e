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
    KITE_ERR_NOT_FOUND = 9,    /* a model name is not in the store, or a repository or file is not on the hub */
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
    const char *tokenizer_path; /* a llama2.c tokenizer .bin, a SentencePiece .model or a tokenizer.json; NULL: from the model */
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

/* The small story model kite ships (TinyStories-656K, Q8_0 GGUF, 750 KB, Apache-2.0; models/README.md),
 * for programs that need a model without being given one. The first of:
 *   1. $KITE_DEFAULT_MODEL when set and not empty (used as given: naming no file is an error);
 *   2. the installed copy, <datadir>/kite/models/tinystories-656k-q8_0.gguf: first under the prefix the
 *      running program (or libkite.so) is installed in, then under the prefix libkite was configured with;
 *   3. the copy in the source tree libkite was built from.
 * Sets *path to it (a string owned by the library, or the environment's, valid until the environment
 * changes), or returns KITE_ERR_IO with err naming the places looked in. */
int kite_default_model_path(const char **path, char *err, size_t err_size);

typedef struct kite_model_info {
    char architecture[32];  /* "llama", "qwen2", "qwen3"; "eagle3" for an EAGLE-3 draft head, "dflash" for a
                               DFlash drafter (only the vocabulary, width and layers are filled in then) */
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
    int32_t n_experts;      /* mixture of experts (qwen3moe): routed experts per layer, 0 for a dense model */
    int32_t n_experts_used; /* experts each token runs (top-k) */
    int32_t expert_ffn_dim; /* each expert's intermediate width */
    int32_t n_recurrent_layers; /* Gated DeltaNet (linear-attention) layers (qwen35), 0 elsewhere */
    int32_t recurrent_k_heads, recurrent_v_heads, recurrent_head_dim; /* their key and value heads, each head's size */
    int32_t n_conv_layers;  /* lfm2: layers that are short gated convolutions instead of attention, 0 elsewhere */
    int32_t conv_taps;      /* lfm2: the convolutions' kernel length */
    int32_t sliding_window; /* positions a sliding-window layer sees (gemma3, gemma4, muse-glimmer); 0 for none */
    int32_t n_local_layers; /* layers with the sliding window */
    int32_t head_dim_local; /* head size and KV heads of the sliding-window layers, when they differ from */
    int32_t n_kv_heads_local; /* head_dim / n_kv_heads (gemma4); else equal to them */
    int32_t n_mtp_layers;   /* qwen35: next-n (multi-token prediction) blocks the file carries after the n_layers
                               (the first drafts with --draft mtp, KITE_DRAFT_MTP); 0 elsewhere */
    /* Drafters (architecture dflash or eagle3: only a kite_spec_params.draft_model, never a session's model) */
    int32_t n_draft_target_layers;   /* target layers whose inputs the drafter reads */
    int32_t draft_target_layers[8];  /* their indices, in the file's order */
    int32_t draft_block_size;        /* dflash: rows of a block (the anchor and the tokens it drafts); 0 for eagle3 */
    int32_t draft_mask_token;        /* dflash: the mask token filling a block's rows after the anchor; -1 for eagle3 */
    int32_t draft_selector_top_k;    /* DFlash-2: candidates per row of its selector; 0 otherwise */
    int32_t draft_markov_rank;       /* DSpark: rank of its Markov head; 0 otherwise */
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

/* A compiled grammar bound to one model's vocabulary (kite_grammar_open below). */
typedef struct kite_grammar kite_grammar;

/* Sampling defaults the model ships with (generation_config.json); fields not given keep kite's. */
typedef struct kite_logit_bias { int32_t token; float bias; } kite_logit_bias;

enum { KITE_MAX_STOP = 16, KITE_MAX_STOP_BYTES = 1024 };

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
    /* Text for people (kite run, kite chat): control tokens (BOS, <|im_start|>, ...) give no text, and the
     * spelling of an end token written in plain pieces ("<|" "end" "_story" "|>", as a model trained on text
     * holding its marker may write it) ends generation like a stop string (KITE_FINISH_STOP). Off by default:
     * the text then holds every token's text but end tokens', as Hugging Face's decode does. */
    bool skip_special;
    /* Stop strings (borrowed during generation): generation ends when the generated text contains one,
     * matched across token boundaries. The callback never receives the stop string nor anything after
     * it: text that could begin a stop string is held back (delivered with a later token, or at the
     * end when it turns out not to be one), so a token's callback may carry text_len 0. */
    const char *const *stop;   /* n_stop non-empty strings, at most KITE_MAX_STOP of KITE_MAX_STOP_BYTES each */
    size_t n_stop;
    /* Log-probabilities: when set, kite_session_token_logprobs answers inside the token callback. */
    bool logprobs;
    int32_t top_logprobs;      /* alternatives to report, 0 .. KITE_MAX_TOP_LOGPROBS */
    /* Constrained decoding (borrowed during generation; NULL = unconstrained): every token is sampled
     * from the tokens whose text the grammar allows next (the others' logits set to -inf before the
     * processors above), at every drafted node too, so speculation stays exact. End tokens are allowed
     * exactly where the text is a complete sentence; generation ends (KITE_FINISH_STOP) where the
     * grammar allows nothing more, even for a model without an end token. Under ignore_eos, end tokens
     * are not allowed at all. Log-probabilities stay those of the raw logits. A text the vocabulary
     * cannot continue (it lacks bytes the grammar needs) ends with KITE_ERR_UNSUPPORTED. Stop strings
     * and max_tokens still apply. The grammar must belong to the session's model. */
    const kite_grammar *grammar;
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
 * reads; f32 keeps the projections exactly (for comparisons with float references); q8_0 (8.5 bits per
 * element) and q4_0 (4.5 bits) store each head's row of K and V in GGML's Q8_0 / Q4_0 blocks of 32
 * (an f16 scale and 32 codes, rounded by the reference quantizer), as llama.cpp's --cache-type-k/v
 * q8_0|q4_0 do, for 1.9x / 3.6x less cache than f16. The quantized types need a head size that is a
 * multiple of 32 (kite's cache is head-major: a block never spans two heads). A row's stored bits depend
 * on that row alone, so speculation and batching stay exact with every type. */
typedef enum kite_kv_type {
    KITE_KV_F16 = 0,
    KITE_KV_F32 = 1,
    KITE_KV_Q8_0 = 2,
    KITE_KV_Q4_0 = 3,
} kite_kv_type;

/* "f16", "f32", "q8_0", "q4_0"; NULL for another value. */
const char *kite_kv_type_name(kite_kv_type type);
/* The type a name spells (as kite_kv_type_name writes them); false for an unknown name. */
bool kite_kv_type_from_name(const char *name, kite_kv_type *type);

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
 * or generation continues from there. Costs nothing (except where a sliding-window ring no longer holds the
 * window before n_past: the first n_past tokens are then run again); the statistics are kept. */
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

/* Why the latest generation ended. */
typedef enum kite_finish_reason {
    KITE_FINISH_NONE = 0,      /* still generating, or nothing generated yet */
    KITE_FINISH_STOP = 1,      /* an end-of-generation token or a stop string */
    KITE_FINISH_LENGTH = 2,    /* max_tokens, or the context is full */
    KITE_FINISH_CALLBACK = 3,  /* the token callback returned false */
    KITE_FINISH_CANCELLED = 4, /* kite_cancel */
    KITE_FINISH_ERROR = 5,     /* a failure (the status and message say which) */
} kite_finish_reason;

kite_finish_reason kite_session_finish_reason(const kite_session *session);

/* Log-probabilities of a generated token: log-softmax of the model's raw logits at its position (before
 * temperature, penalties and filters, as OpenAI and vLLM report them). */
enum { KITE_MAX_TOP_LOGPROBS = 20 };
typedef struct kite_token_logprob {
    int32_t id;
    float logprob;
} kite_token_logprob;

typedef struct kite_logprobs {
    int32_t id;               /* the token these are for */
    float logprob;            /* of that token */
    int32_t n_top;            /* entries in top, the most likely first (ties: lower id first) */
    kite_token_logprob top[KITE_MAX_TOP_LOGPROBS];
} kite_logprobs;

/* Inside a token callback of a generation with params->logprobs: the log-probabilities of the token
 * being delivered. KITE_ERR_INVALID_ARG outside a callback or without params->logprobs. */
int kite_session_token_logprobs(const kite_session *session, kite_logprobs *out);

/* The tokens of the session's context (positions 0 .. n-1, the last generated token included): a
 * pointer into the session, valid until it next runs. *n gets the count. */
const int32_t *kite_session_tokens(const kite_session *session, int32_t *n);

/* Makes dst's context the first n_tokens tokens of src's (K/V copied, no model pass; but where src's
 * sliding-window ring no longer holds the window before n_tokens, dst runs the prefix itself): dst then
 * continues as if it had processed them itself, bit for bit. Both sessions must belong to the same
 * model and have the same KV type; n_tokens <= both contexts (kite_session_n_past(src), n_ctx of
 * dst). dst's own context is replaced; dst must not be busy, src may be (between kite_batch_step
 * calls, on the thread that steps it). A server's prefix cache: a request sharing a prompt prefix
 * with another session's context starts from that session's K/V. */
int kite_session_copy_prefix(kite_session *dst, const kite_session *src, int32_t n_tokens, char *err, size_t err_size);

/* Session files: the context's tokens and their K/V in a file (kite run --prompt-cache). Load replaces the
 * session's context with the file's; the file must come from the same model (a fingerprint of its tensors),
 * with the same KV type, and fit the session's context, else KITE_ERR_INVALID_ARG (or KITE_ERR_FORMAT for a
 * damaged file, KITE_ERR_CONTEXT_FULL when too long) and the session is unchanged. After a load the next
 * kite_prompt must give at least one token (the logits after the context are not stored). Save writes a
 * temporary file beside path and renames it into place. */
int kite_session_save(const kite_session *session, const char *path, char *err, size_t err_size);
int kite_session_load(kite_session *session, const char *path, char *err, size_t err_size);

/* ---- KV cache size ---------------------------------------------------------------------------- */
/* Bytes of the session's K/V cache. Sliding-window layers (Gemma 3's local layers) keep a ring of
 * window - 1 + 64 rows, so their share follows the window, not n_ctx. */
uint64_t kite_session_kv_bytes(const kite_session *session);

/* ---- continuous batching ---------------------------------------------------------------------- */
/* Many sessions of one model advanced together: each kite_batch_step runs one forward pass over one
 * decoding pass of every generating session (its next token, or its drafted chain or tree) and chunks
 * of the prompts of the sessions still prefilling. The matrix kernels are batch-invariant (a row's
 * result never depends on the other rows), so every session's tokens are identical to those it would
 * produce alone with kite_prompt and kite_generate, whatever else shares its steps.
 *
 *   kite_session_start(s, ids, n, &params, on_token, user_data, ...);   // returns at once
 *   while (any session is busy) kite_batch_step(batch, sessions, n_sessions, ...);
 *
 * Callbacks run on the thread calling kite_batch_step. */
typedef struct kite_batch kite_batch;

typedef struct kite_batch_params {
    int32_t max_tokens;   /* rows of one pass at most (decoding rows first, prompt chunks fill the rest);
                             0 = 64 + 33 per session up to 256 */
    int32_t n_ctx;        /* the largest context of the sessions it will step (0 = 4096) */
    int32_t n_threads;    /* 0 = the model's setting */
} kite_batch_params;

kite_batch_params kite_batch_default_params(void);
int kite_batch_open(kite_batch **out, kite_model *model, const kite_batch_params *params, char *err, size_t err_size);
void kite_batch_free(kite_batch *batch);

/* Queues ids after the session's context and a generation after them, for kite_batch_step to run
 * (ids may be empty to generate after the current context). params, its stop strings and logit bias
 * must stay valid until the session is no longer busy. Fails at once on bad parameters or a prompt
 * that does not fit the context (KITE_ERR_CONTEXT_FULL). */
int kite_session_start(kite_session *session, const int32_t *ids, size_t n_ids, const kite_gen_params *params,
                       kite_token_fn on_token, void *user_data, char *err, size_t err_size);
/* Whether the session has queued prompt or generation work left. */
bool kite_session_busy(const kite_session *session);
/* The status of the session's latest started work once it is not busy (KITE_OK, KITE_ERR_CANCELLED,
 * KITE_ERR_CONTEXT_FULL after the tokens that fitted, ...), with its message. */
int kite_session_result(const kite_session *session, char *err, size_t err_size);
/* Tokens of the queued prompt still to be prefilled. */
int32_t kite_session_pending_prompt(const kite_session *session);

/* One forward pass over the busy sessions among sessions[0..n) (idle ones are skipped). A session's
 * failure ends its own work (kite_session_result) and not the others'; the return status is for the
 * batch itself (bad arguments, sessions of another model). kite_cancel(session) ends that session's
 * work at its next step. */
int kite_batch_step(kite_batch *batch, kite_session *const *sessions, size_t n, char *err, size_t err_size);

/* ---- grammars (constrained decoding) ---------------------------------------------------------- */
typedef enum kite_grammar_kind {
    KITE_GRAMMAR_GBNF = 0,         /* llama.cpp GBNF text, start rule "root"; token references <[id]> and
                                      <text> (one token of the model spelled text, e.g. <|channel|>) match
                                      that token, control tokens included; !<...> is not supported */
    KITE_GRAMMAR_JSON_SCHEMA = 1,  /* a JSON Schema (text): output is JSON that validates against it */
    KITE_GRAMMAR_REGEX = 2,        /* a regular expression the whole output must match */
    KITE_GRAMMAR_JSON = 3,         /* any JSON object (response_format json_object); text ignored */
} kite_grammar_kind;

/* Compiles text[0..len) of the given kind into a grammar for model's vocabulary (the model's token
 * index is built on first use and kept with the model, so later grammars cost only their parse). The
 * grammar is immutable and may be shared by sessions on many threads; it must not outlive the model.
 * Errors name the position of bad input (line:column for GBNF, a JSON pointer for a schema, a byte
 * offset for a regex). */
int kite_grammar_open(kite_grammar **out, const kite_model *model, kite_grammar_kind kind, const char *text, size_t len,
                      char *err, size_t err_size);
void kite_grammar_free(kite_grammar *grammar);
/* ---- lazy grammars (tool_choice "auto"; llama.cpp's grammar_lazy with trigger words) ---- */
/* A grammar that leaves the text free until it reaches one of the trigger words (UTF-8, 1..16 of them,
 * each at most 64 characters), and from the trigger on makes it follow the grammar of kind: the output
 * is free text in which no trigger occurs, optionally followed by a sentence of the grammar that begins
 * with a trigger (so write the grammar to begin with one). at_start: a trigger counts only at the start
 * of the text, after whitespace; text that begins otherwise is free to its end. Being one grammar, it
 * stays exact under speculation and batching, and a token that holds text and the trigger's start
 * together is judged as a whole. Free text is any valid UTF-8 without control tokens (end tokens end
 * it, as usual). */
int kite_grammar_open_lazy(kite_grammar **out, const kite_model *model, kite_grammar_kind kind, const char *text,
                           size_t len, const char *const *triggers, size_t n_triggers, bool at_start, char *err,
                           size_t err_size);
/* The GBNF a schema or regex compiles to (the text itself for KITE_GRAMMAR_GBNF), for `kite grammar`
 * and debugging: *gbnf (NUL-terminated, *gbnf_len bytes) is the caller's, freed with kite_free. */
int kite_grammar_to_gbnf(kite_grammar_kind kind, const char *text, size_t len, char **gbnf, size_t *gbnf_len, char *err,
                         size_t err_size);

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
                              proposed token with probability oracle_error_rate; with a DFlash drafter as
                              draft_model, each pass also runs (and pays for) the drafter's block first */
    KITE_DRAFT_EAGLE3 = 4, /* an EAGLE-3 head (GGUF eagle3, draft_model) over the target's hidden states; a
                              draft_model that is one drafts so with KITE_DRAFT_MODEL too */
    KITE_DRAFT_DFLASH = 5, /* a DFlash block drafter (GGUF dflash, draft_model): a whole block in one pass over
                              the target's hidden states; a draft_model that is one drafts so with
                              KITE_DRAFT_MODEL too */
    KITE_DRAFT_MTP = 6,    /* the model's own next-n (MTP) block (Qwen3.5 files that carry one), over the target's
                              last hidden state; no draft_model. A model without one is refused */
} kite_drafter;

typedef enum kite_spec_verify {
    KITE_VERIFY_GUMBEL = 0,    /* shared Gumbel noise: exact, token-identical to plain sampling */
    KITE_VERIFY_REJECTION = 1, /* standard speculative sampling, min(1, p/q) then the residual (chains) */
} kite_spec_verify;

enum { KITE_MAX_DRAFT = 32 }; /* drafted tokens per verification pass, at most */

typedef struct kite_spec_params {
    kite_drafter drafter;
    kite_model *draft_model;      /* KITE_DRAFT_MODEL (or an EAGLE-3 head, a DFlash drafter); borrowed, must outlive
                                     the session */
    int32_t budget;               /* drafted tokens per pass, 1..KITE_MAX_DRAFT; 0 = adaptive */
    int32_t tree_width;           /* children per node, 1 (a chain) .. 8 */
    kite_spec_verify verify;
    const int32_t *oracle_ids;    /* KITE_DRAFT_ORACLE: the continuation to replay (borrowed) */
    size_t n_oracle_ids;
    float oracle_error_rate;      /* in [0, 1] */
    bool no_forced_drafts;        /* under a grammar, do not draft the text the grammar forces (for
                                     comparison): by default, where the grammar allows exactly one byte
                                     sequence (keys, punctuation), its tokens are drafted for free */
    float draft_p_min;            /* a drafter with a confidence head (DSpark): a draft node whose confidence
                                     is below this drafts no children, as llama.cpp's --spec-draft-p-min cuts
                                     its chain; 0 (default) = off, else in (0, 1]; other drafters ignore it */
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
    /* Constrained decoding (zero without a grammar). */
    double grammar_ms;        /* time the target's sampling spent on the grammar: masks (looked up or computed)
                                 applied to the logits, and the matcher advanced past each token */
    int64_t grammar_masks;    /* masks computed by walking the vocabulary trie (first visits of a grammar
                                 state; drafting's masks included) */
    double grammar_mask_ms;   /* time those walks took */
    int64_t grammar_mask_hits; /* masks answered from the generation's per-state cache */
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
    const char *target_path;   /* shapes "eagle3" and "dflash" (also "dflash-bN" for a block of N, "dflash-causal"):
                                  the GGUF target the drafter must fit (its width, layers, vocabulary) */
    kite_progress_fn progress; /* optional */
    void *progress_user_data;
    const char *hf_dir;        /* optional: also write the weights (before quantization, F32) as a Hugging Face folder
                                  here (created if missing): config.json, model.safetensors under transformers' names,
                                  tokenizer.json copied from tokenizer_path (which must then be a tokenizer.json) and the
                                  tokenizer_config.json beside it. Not for drafter shapes or next-n (MTP) blocks. */
} kite_random_model_params;

int kite_write_random_model(const char *path, const kite_random_model_params *params, char *err, size_t err_size);

/* Frees a buffer the library allocated for the caller (kite_chat_render, kite_chat_tokenize). */
void kite_free(void *ptr);

/* ---- chat templates --------------------------------------------------------------------------- */
/* The model's own chat template (Jinja, as Hugging Face renders it), compiled once. */
typedef struct kite_chat_template kite_chat_template;

/* The model's template: GGUF tokenizer.chat_template (or tokenizer.chat_template.NAME when name is
 * given), a Hugging Face folder's chat_template.jinja or tokenizer_config.json chat_template (a string,
 * or a list of {name, template}: name picks one, NULL the "default"). KITE_ERR_UNSUPPORTED when the
 * model has none. bos_token and eos_token come from the model's tokenizer. */
int kite_chat_template_open(kite_chat_template **out, const kite_model *model, const char *name, char *err,
                            size_t err_size);
/* A template from source text (--chat-template FILE). model (may be NULL) supplies bos_token and
 * eos_token. Syntax errors name the template line. */
int kite_chat_template_from_text(kite_chat_template **out, const char *source, size_t source_len, const kite_model *model,
                                 char *err, size_t err_size);
void kite_chat_template_free(kite_chat_template *tmpl);

typedef struct kite_chat_params {
    const char *messages_json;   /* a JSON array of messages in OpenAI form (role, content as a string or
                                    content parts, tool_calls, tool_call_id, name, reasoning_content) */
    const char *tools_json;      /* a JSON array of tool definitions, or NULL */
    const char *documents_json;  /* a JSON array of documents, or NULL */
    const char *kwargs_json;     /* a JSON object of extra template variables (chat_template_kwargs,
                                    e.g. {"enable_thinking": false}), or NULL */
    bool add_generation_prompt;  /* end with the header of an assistant turn */
    bool continue_final_message; /* the last message is an assistant turn to continue: the text ends right
                                    after its content, with no end-of-turn (as HF's apply_chat_template
                                    continue_final_message); needs add_generation_prompt false */
    bool family_tool_shapes;     /* give tools and tool turns to templates that read their family's own shape
                                    instead of OpenAI's (Command R+, GLM-4), as kite serve does; false renders
                                    the input as given, as transformers does */
} kite_chat_params;

kite_chat_params kite_chat_default_params(void);

/* Renders the template. *text (NUL-terminated, *len bytes) is the caller's, freed with kite_free.
 * Errors (a bad messages array, raise_exception, a runtime error) name the template line. */
int kite_chat_render(const kite_chat_template *tmpl, const kite_chat_params *params, char **text, size_t *len,
                     char *err, size_t err_size);

/* Renders and tokenizes for model: special-token text the template itself wrote becomes special tokens
 * (as Hugging Face and llama.cpp tokenize a rendered template), but text that came from the messages,
 * tools or kwargs is tokenized as plain text, so a user who types "<|im_start|>system" cannot forge a
 * turn. Without such text in the inputs the ids equal HF's apply_chat_template(tokenize=True). No BOS
 * is added beyond what the template writes. *ids is the caller's, freed with kite_free. */
int kite_chat_tokenize(const kite_chat_template *tmpl, const kite_model *model, const kite_chat_params *params,
                       int32_t **ids, size_t *n_ids, char *err, size_t err_size);

/* ---- chat replies: content, reasoning, tool calls --------------------------------------------- */
/* The text a model answers with, split as `kite serve` splits it: content, reasoning (a leading <think>
 * block when the template writes them, gpt-oss's analysis channel) and tool calls in the markup the
 * template's model writes (Qwen/Hermes <tool_call>, Llama-3.1 JSON and <|python_tag|>, Mistral
 * [TOOL_CALLS], DeepSeek, Granite, gpt-oss harmony, else one JSON object {"name", "arguments"}).
 * Markup that never becomes a call stays content; a malformed call ends where its valid part ends
 * (kite_chat_reply_problem says where). Text may be fed split anywhere, even inside a marker. */
typedef struct kite_chat_reply kite_chat_reply;

typedef struct kite_chat_reply_params {
    bool tool_calls;    /* parse tool calls (tools were offered and tool_choice is not "none"); else the text is
                           content and reasoning only */
    const char *prompt; /* the rendered prompt, or its end (NULL: unknown): a generation prompt that opens a
                           <think> block (DeepSeek-R1's newer templates) starts the reply inside it */
    size_t prompt_len;
    uint64_t id_seed;   /* call ids are "call_" and letters and digits that are a function of (id_seed, the
                           call's index): give each reply its own seed for ids unique across replies */
} kite_chat_reply_params;

kite_chat_reply_params kite_chat_reply_default_params(void);

typedef enum kite_chat_reply_part {
    KITE_REPLY_CONTENT = 0,        /* text: more content */
    KITE_REPLY_REASONING = 1,      /* text: more reasoning */
    KITE_REPLY_CALL_START = 2,     /* a tool call begins: text is its function's name (NUL-terminated) */
    KITE_REPLY_CALL_ARGUMENTS = 3, /* text: more of that call's arguments (together, compact JSON text) */
    KITE_REPLY_CALL_END = 4,       /* the call's arguments are complete (len 0) */
} kite_chat_reply_part;

/* One part of the reply as it is decided. call is the call's index in the reply (0-based) for the
 * KITE_REPLY_CALL_* parts, else -1; text[0..len) is valid during the call and never ends inside a UTF-8
 * character. Returns false to stop (feed and finish then return KITE_ERR_CANCELLED). */
typedef bool (*kite_chat_reply_fn)(kite_chat_reply_part part, int32_t call, const char *text, size_t len,
                                   void *user_data);

/* A parser for one reply of tmpl's model (the template is borrowed until kite_chat_reply_free). */
int kite_chat_reply_open(kite_chat_reply **out, const kite_chat_template *tmpl, const kite_chat_reply_params *params,
                         char *err, size_t err_size);
void kite_chat_reply_free(kite_chat_reply *reply);
/* Feeds text[0..len) (e.g. each token's text) and calls fn (may be NULL) for every part it decides: text
 * that may still begin a marker waits for the next feed. */
int kite_chat_reply_feed(kite_chat_reply *reply, const char *text, size_t len, kite_chat_reply_fn fn, void *user_data,
                         char *err, size_t err_size);
/* The reply has ended: the parts held back go to fn (may be NULL), and *message_json (may be NULL; the
 * caller's, freed with kite_free) gets the reply as an OpenAI assistant message: {"role": "assistant",
 * "content": text, or null when the reply only calls tools, "reasoning_content": text (when there is
 * reasoning), "tool_calls": [{"id", "type": "function", "function": {"name", "arguments": JSON text}}]
 * (when there are calls)}, the same parts as the ones fn received. Feeding after finish is an error. */
int kite_chat_reply_finish(kite_chat_reply *reply, kite_chat_reply_fn fn, void *user_data, char **message_json,
                           char *err, size_t err_size);
/* The first malformation in the text so far (one line naming its byte offset), or NULL. */
const char *kite_chat_reply_problem(const kite_chat_reply *reply);

/* A whole reply at once: open, feed and finish. *message_json as kite_chat_reply_finish gives it. */
int kite_chat_parse_reply(const kite_chat_template *tmpl, const kite_chat_reply_params *params, const char *text,
                          size_t len, char **message_json, char *err, size_t err_size);

/* A grammar (for kite_gen_params.grammar) under which the reply is exactly one tool call in tmpl's markup
 * whose arguments are JSON that the tool's parameters schema allows: tool_choice "required" (tool_name
 * NULL: any of the tools) or a named function (tool_name). tools_json is the tools array in OpenAI form
 * ([{"type": "function", "function": {"name", "parameters"?}}]; no parameters: any JSON object). The
 * reply then parses (kite_chat_reply) into that call. Errors name the tool ("tools[1].function.parameters:
 * ..."); KITE_ERR_UNSUPPORTED for a template without tool-call markup. gpt-oss harmony's markers
 * (<|channel|>, <|message|>, <|call|> ...) are written as the control tokens themselves (grammar token
 * references) where the vocabulary has them, else as text. */
int kite_grammar_open_tool_call(kite_grammar **out, const kite_model *model, const kite_chat_template *tmpl,
                                const char *tools_json, const char *tool_name, char *err, size_t err_size);
/* tool_choice "auto" under a grammar: the reply is free text until it starts a call in tmpl's markup
 * (Hermes/Qwen <tool_call>, Mistral [TOOL_CALLS], Granite <|tool_call|>, DeepSeek's call markers; for
 * Llama-3.x and the generic JSON format, a '{' at the start of the reply), and from there calls whose
 * arguments the tools' schemas allow (Hermes with parallel_calls: one or more; else one) to the end of the reply
 * (kite_grammar_open_lazy). KITE_ERR_UNSUPPORTED for templates without a text trigger (gpt-oss
 * harmony, no tool format): generate without a grammar then; the reply still parses. */
int kite_grammar_open_tool_auto(kite_grammar **out, const kite_model *model, const kite_chat_template *tmpl,
                                const char *tools_json, bool parallel_calls, char *err, size_t err_size);

/* ---- hybrid router (device / cloud) ------------------------------------------------------------ */
/* Backends (a local model, OpenAI-compatible remotes) and ordered rules from a JSON config (README
 * "Routing"); each request is answered where the rules say, with fallbacks when a side fails. */
typedef struct kite_router kite_router;

typedef struct kite_router_params {
    int32_t n_threads;         /* for the local model; 0 = the backend's setting, else kite's default */
    bool measure_local;        /* time a short prefill and decode at open, for the latency policy (default true) */
} kite_router_params;

kite_router_params kite_router_default_params(void);

/* Reads and validates the config (errors name the JSON path of the bad field; an API key's variable
 * that is not set is an error), opens the local backend's model and one client per remote. */
int kite_router_open(kite_router **out, const char *config_path, const kite_router_params *params, char *err,
                     size_t err_size);
void kite_router_free(kite_router *router);
/* The local backend's model (owned by the router), or NULL when the config has none. */
kite_model *kite_router_local_model(kite_router *router);

/* The decision for one request body (OpenAI chat or completions JSON, with kite's "route" and
 * "max_latency_ms" extensions) without running it: *decision_json (kite_free) holds the backend, the
 * rule and the reason, the attempts in order and the latency predictions. segment is the segment
 * header's value, or NULL. */
int kite_router_explain(kite_router *router, const char *request_json, size_t len, const char *segment,
                        char **decision_json, char *err, size_t err_size);

/* Calibrates a confidence rule: runs each chat prompt (a user message) on the local model, takes the
 * `quantile` of the log-probabilities of its first `first_tokens` greedy tokens, and returns in
 * *threshold the score below which `remote_fraction` of the prompts fall. scores (n_prompts, may be
 * NULL) receives each prompt's score. */
int kite_router_calibrate(kite_router *router, const char *const *prompts, size_t n_prompts, int32_t first_tokens,
                          double quantile, double remote_fraction, double *threshold, double *scores, char *err,
                          size_t err_size);

/* ---- measuring quality: perplexity, KL divergence, importance matrices ------------------------ */
/* llama.cpp's llama-perplexity and llama-imatrix, with the same chunking and statistics. The text is
 * tokenized as llama.cpp does (BOS when the model adds one, special-token text as plain text unless
 * parse_special) and cut into chunks of n_ctx tokens; each chunk is evaluated from an empty context with
 * its first token replaced by BOS (when the model adds one). Only the second half of each chunk is
 * scored: the logits at positions n_ctx/2 .. n_ctx-2 predict the tokens after them, n_ctx - 1 - n_ctx/2
 * tokens a chunk, so every scored token has at least n_ctx/2 tokens of context. The text must hold at
 * least two chunks (2 * n_ctx tokens), as llama.cpp requires. */
typedef struct kite_quality_progress {
    int32_t chunk;          /* chunks done so far (1-based after the first) */
    int32_t n_chunks;       /* chunks to do */
    int64_t n_scored;       /* tokens scored so far */
    double ms;              /* elapsed since the first chunk began */
    double ppl;             /* running perplexity of the model (model A for kite_kld) */
    /* kite_kld only (running values over the chunks done): */
    double ln_ppl_ratio;    /* ln(PPL(A) / PPL(reference)) */
    double kld;             /* mean KL divergence of A from the reference */
    double p_diff_rms;      /* RMS of p_A(token) - p_ref(token) */
    double same_top;        /* fraction of positions where both models' top token agree */
} kite_quality_progress;

/* Called after each chunk; return false to stop (the call then fails with KITE_ERR_CANCELLED). */
typedef bool (*kite_quality_progress_fn)(const kite_quality_progress *progress, void *user_data);

typedef struct kite_quality_params {
    int32_t n_ctx;             /* tokens per chunk (llama.cpp's --ctx-size); 0 = 512; at least 8 */
    int32_t n_chunks;          /* chunks to use at most; 0 = as many as the text holds */
    int32_t n_threads;         /* 0 = the model's setting */
    kite_kv_type kv_type;      /* KV cache precision (f16 by default, as llama.cpp) */
    bool parse_special;        /* special-token text in the calibration text becomes special tokens */
    kite_quality_progress_fn progress; /* optional */
    void *progress_user_data;
} kite_quality_params;

kite_quality_params kite_quality_default_params(void);

typedef struct kite_perplexity_result {
    double ppl;              /* exp(mean negative log-likelihood) over the scored tokens */
    double ppl_error;        /* its standard error: ppl * stddev(nll) / sqrt(n_scored - 1), as llama.cpp prints */
    double mean_nll;         /* mean negative log-likelihood, nats */
    int64_t n_scored;        /* tokens scored */
    int32_t n_chunks;        /* chunks evaluated */
    int64_t n_text_tokens;   /* tokens of the whole text (BOS included) */
} kite_perplexity_result;

/* Perplexity of model over text[0..len) (llama-perplexity's default mode). */
int kite_perplexity(kite_model *model, const char *text, size_t len, const kite_quality_params *params,
                    kite_perplexity_result *result, char *err, size_t err_size);

/* The fractions of kite_kld_result's quantiles, highest first: kld_quantile[i] is at KITE_KLD_QUANTILES[i]
 * (1 = the maximum, 0.5 = the median, 0 = the minimum), p_diff_quantile[i] at KITE_P_DIFF_QUANTILES[i].
 * Between sorted values, linear interpolation at fraction * (n - 1), as llama.cpp's percentile. */
enum { KITE_KLD_N_QUANTILES = 11, KITE_P_DIFF_N_QUANTILES = 13 };
#define KITE_KLD_QUANTILES {1.0, 0.999, 0.99, 0.95, 0.90, 0.5, 0.10, 0.05, 0.01, 0.001, 0.0}
#define KITE_P_DIFF_QUANTILES {1.0, 0.999, 0.99, 0.95, 0.90, 0.75, 0.5, 0.25, 0.10, 0.05, 0.01, 0.001, 0.0}

typedef struct kite_kld_result {
    int64_t n_scored;                /* tokens scored */
    int32_t n_chunks;
    double ppl, ppl_error;           /* model A: llama.cpp's PPL(Q) */
    double ppl_ref, ppl_ref_error;   /* the reference: PPL(base) */
    double ln_ppl_correlation;       /* Cor(ln PPL(A), ln PPL(ref)) of the per-token nll */
    double ln_ppl_ratio, ln_ppl_ratio_error; /* mean ln(PPL(A)/PPL(ref)) */
    double ppl_ratio, ppl_ratio_error;       /* PPL(A)/PPL(ref) */
    double ppl_diff, ppl_diff_error;         /* PPL(A)-PPL(ref) */
    double kld, kld_error;           /* mean KL(ref || A) per token, nats, over the full vocabulary in double */
    double kld_quantile[KITE_KLD_N_QUANTILES];
    double p_diff, p_diff_error;     /* mean of p_A(token) - p_ref(token), the probabilities of the actual next token */
    double p_diff_quantile[KITE_P_DIFF_N_QUANTILES];
    double p_diff_rms, p_diff_rms_error;
    double same_top, same_top_error; /* fraction of positions whose top token (first maximum) is the same */
} kite_kld_result;

/* KL divergence of model from reference over text (llama-perplexity --kl-divergence, with the reference's
 * logits computed side by side instead of read from a saved file). Both models must share the vocabulary
 * (same size, every token spelling the same bytes), else KITE_ERR_INVALID_ARG naming the first token that
 * differs. The text is tokenized by the reference. */
int kite_kld(kite_model *model, kite_model *reference, const char *text, size_t len, const kite_quality_params *params,
             kite_kld_result *result, char *err, size_t err_size);

typedef struct kite_imatrix_params {
    kite_quality_params quality; /* chunking; progress reports the running perplexity */
    const char *output_path;     /* where the file goes (required); written under a temporary name, then renamed */
    bool legacy_format;          /* llama.cpp's old .dat format instead of GGUF */
    bool process_output;         /* also collect the output head's inputs (llama-imatrix --process-output) */
    const char *dataset;         /* the calibration file's name, recorded in the file (NULL: none) */
} kite_imatrix_params;

kite_imatrix_params kite_imatrix_default_params(void);

typedef struct kite_imatrix_result {
    int32_t n_chunks;            /* chunks processed */
    int32_t n_entries;           /* weight matrices in the file */
    double ppl, ppl_error;       /* the model's perplexity over the same chunks (as llama-imatrix prints) */
} kite_imatrix_result;

/* Importance matrix of model over text (llama-imatrix): for every matrix of the blocks, the sum over
 * the calibration tokens of each input column's squared activation, and the count of rows summed, in
 * llama.cpp's file format. Checks that the output can be created before any work. */
int kite_imatrix_compute(kite_model *model, const char *text, size_t len, const kite_imatrix_params *params,
                         kite_imatrix_result *result, char *err, size_t err_size);
/* ---- the model store and pull ------------------------------------------------------------------ */
/* A folder of downloaded models with an index (index.json): one entry per model name, written only once
 * every file of the model is complete and verified. Default folder: $KITE_MODELS, else
 * ~/.cache/kite/models. Several processes may use one store at once (file locks). */
typedef struct kite_store kite_store;

/* dir NULL = the default. The folder need not exist yet (kite_pull creates it); a folder that cannot be
 * one (a path under a regular file) fails here. */
int kite_store_open(kite_store **out, const char *dir, char *err, size_t err_size);
void kite_store_free(kite_store *store);
/* The store's folder (owned by the store). */
const char *kite_store_dir(const kite_store *store);

typedef struct kite_store_file {
    char *path;        /* relative to the model's folder */
    uint64_t size;     /* bytes */
    char sha256[65];   /* lower-case hex; "" when the source published none */
} kite_store_file;

typedef struct kite_store_entry {
    char *name;          /* as pulled, normalised: "user/repo:Q4_K_M", "user/repo/file.gguf", a URL */
    char *source;        /* where it came from: "hf:user/repo@<commit>" or the URL */
    char *path;          /* what kite_model_open takes: the GGUF (the first of a split set) or the folder */
    char architecture[32]; /* general.architecture or config.json's model_type; "" if unknown */
    char quantization[32]; /* "Q4_K_M", "Q8_0", "F16", "BF16", ...; "" if unknown */
    char date[32];       /* when pulled, ISO 8601 UTC */
    uint64_t size;       /* bytes of all files */
    kite_store_file *files;
    size_t n_files;
} kite_store_entry;

/* Every complete model, sorted by name. *entries is freed with kite_store_entries_free. An index edited
 * by hand or truncated is rebuilt from the models' own manifests (a warning through the log callback). */
int kite_store_list(kite_store *store, kite_store_entry **entries, size_t *n, char *err, size_t err_size);
/* One model by name (a name is normalised as kite_pull does); KITE_ERR_NOT_FOUND if absent. */
int kite_store_show(kite_store *store, const char *name, kite_store_entry **entry, char *err, size_t err_size);
void kite_store_entries_free(kite_store_entry *entries, size_t n);
/* Deletes a model's files and its entry. KITE_ERR_NOT_FOUND if absent. */
int kite_store_remove(kite_store *store, const char *name, char *err, size_t err_size);
/* What a --model argument names: an existing file or folder wins (copied as is); else a store name (its
 * entry's path); else KITE_ERR_NOT_FOUND with "model \"X\" is not in the store: run `kite pull X`" (or,
 * for what cannot be a name, "no such file"). */
int kite_store_resolve(kite_store *store, const char *name_or_path, char *path, size_t path_size, char *err,
                       size_t err_size);

typedef struct kite_pull_progress {
    const char *file;      /* the file being fetched (relative to the model's folder) */
    int32_t file_index;    /* 0-based, of n_files */
    int32_t n_files;
    uint64_t file_done;    /* bytes of this file on disk (resumed bytes included) */
    uint64_t file_total;   /* its size; 0 when unknown */
    uint64_t done, total;  /* the same over all files (total 0 when a size is unknown) */
    uint64_t resumed;      /* bytes of this file that were already there and not fetched again */
    bool finished;         /* this file is complete and verified */
} kite_pull_progress;

typedef void (*kite_pull_progress_fn)(const kite_pull_progress *progress, void *user_data);
/* A sentence for people: which file was chosen and why, a resume, a retry. */
typedef void (*kite_pull_note_fn)(const char *note, void *user_data);

typedef struct kite_pull_params {
    kite_pull_progress_fn progress; /* optional, called a few times a second at most */
    kite_pull_note_fn note;         /* optional */
    void *user_data;
    const volatile int *cancel;     /* when it points at non-zero, the pull stops (KITE_ERR_CANCELLED) */
    const char *hf_token;           /* NULL = $HF_TOKEN; sent as a Bearer token, never logged nor in errors */
    const char *hf_endpoint;        /* NULL = $HF_ENDPOINT, else https://huggingface.co */
    int32_t connect_timeout_ms;     /* 0 = 15000 */
    int32_t stall_timeout_ms;       /* no byte received for this long fails the transfer; 0 = 30000 */
    int32_t max_retries;            /* transfers resumed after a dropped connection; 0 = 3, -1 = none */
    uint64_t memory_bytes;          /* memory user/repo choices fit in (60% of it); 0 = MemAvailable */
    uint64_t fail_write_at;         /* a test hook: the write that passes this many bytes of the model fails
                                       as a full disk would (ENOSPC); 0 = off */
} kite_pull_params;

kite_pull_params kite_pull_default_params(void);

/* Downloads name into the store: a Hugging Face reference
 *   user/repo            the GGUF that fits memory best (the largest under 60% of it, Q4_K_M when it is
 *                        about as large), or the whole safetensors repository when it has no GGUF
 *   user/repo:Q4_K_M     the GGUF (or split set) whose file name carries that quantization tag
 *   user/repo/dir/f.gguf one file (with the rest of its split set)
 *   user/repo@rev...     any of the above at a branch, tag or commit (default main)
 * or an http(s):// URL of one file. Files go to <store>/<name's folder>/<file>.part, resume from their
 * size after an interruption, are checked against the sha256 the hub publishes and renamed when
 * complete; the index gets the entry last. A name already in the store returns at once; a second pull
 * of the same name waits for the first. */
int kite_pull(kite_store *store, const char *name, const kite_pull_params *params, char *err, size_t err_size);

/* ---- OpenAI-compatible server ----------------------------------------------------------------- */
typedef struct kite_server kite_server;

typedef struct kite_server_params {
    const char *host;              /* address to bind; NULL = "127.0.0.1" (loopback) */
    int32_t port;                  /* 0 = 8080; -1 = a free port the system picks (kite_server_port) */
    const char *api_key;           /* NULL = none; else requests need "Authorization: Bearer KEY" */
    const char *model_name;        /* the id /v1/models lists and responses carry; NULL = "kite" */
    int32_t n_parallel;            /* requests decoded together (sessions); 0 = 4 */
    int32_t n_ctx;                 /* context per session; 0 = the model's (capped at 4096) */
    int32_t n_threads;             /* 0 = the model's setting */
    kite_kv_type kv_type;
    int32_t queue_size;            /* requests waiting for a session before 429; 0 = 64 */
    int32_t timeout_ms;            /* per request, queueing included; 0 = 600000 */
    size_t max_body_bytes;         /* 0 = 8 MiB */
    int32_t max_json_depth;        /* 0 = 64 */
    int32_t max_messages;          /* 0 = 1024 */
    const char *chat_template;     /* template source overriding the model's, or NULL */
    const kite_spec_params *spec;  /* speculative decoding for every request, or NULL (plain) */
    kite_router *router;           /* route requests by its rules (the server's model must be the router's
                                      local one, kite_router_local_model); NULL = serve the model alone */
    bool no_listen;                /* no HTTP at all: requests come only through kite_server_complete */
} kite_server_params;

kite_server_params kite_server_default_params(void);

/* Binds the address and starts serving model (borrowed; it must outlive the server) on threads of
 * its own; returns once the server accepts connections. */
int kite_server_open(kite_server **out, kite_model *model, const kite_server_params *params, char *err,
                     size_t err_size);
/* The port the server listens on (the one chosen by the system when params.port was -1). */
int32_t kite_server_port(const kite_server *server);
/* Text as it is produced; return false to stop the request. */
typedef bool (*kite_text_fn)(const char *text, size_t len, void *user_data);

/* One request in this process, without HTTP, through the same path as an HTTP one (continuous batching
 * with the other requests; routed when the server has a router): body is an OpenAI chat (chat true) or
 * completions request; the answer's content streams to on_text (may be NULL). *response_json (kite_free;
 * may be NULL) receives {"text", "reasoning_content", "tool_calls", "finish_reason", "usage", "route"}.
 * segment is the router's segment tag (the header's value), or NULL. A request the server refuses fails
 * with the message it would answer with ("HTTP 400: ..."): KITE_ERR_INVALID_ARG for 4xx, KITE_ERR_IO else.
 * Thread-safe: many requests may run at once. */
int kite_server_complete(kite_server *server, bool chat, const char *body, size_t len, const char *segment,
                         kite_text_fn on_text, void *user_data, char **response_json, char *err, size_t err_size);
/* Blocks until kite_server_stop, then finishes the in-flight requests (new ones get 503) and returns. */
int kite_server_wait(kite_server *server, char *err, size_t err_size);
/* Asks the server to stop; async-signal-safe (a SIGINT/SIGTERM handler may call it). */
void kite_server_stop(kite_server *server);
void kite_server_free(kite_server *server);

/* ---- quantizing model files (kite quantize) --------------------------------------------------- */
/* Called before each tensor is written (tensor_index counts from 0 to n_tensors - 1, in file order) with
 * its name and the type it gets ("q4_K", "f32", ...). Return false to cancel: kite_quantize then
 * returns KITE_ERR_CANCELLED and leaves no file under the output name. */
typedef bool (*kite_quantize_progress_fn)(void *user_data, int64_t tensor_index, int64_t n_tensors,
                                          const char *tensor_name, const char *type_name);

typedef struct kite_quantize_params {
    const char *type;              /* a name from kite_quantize_type_names(), any case: "Q4_K_M", "q8_0" */
    const char *imatrix_path;      /* NULL = none; else a llama.cpp imatrix file (GGUF or legacy .dat) */
    int32_t n_threads;             /* threads quantizing rows; <= 0 = every CPU */
    bool allow_requantize;         /* allow a source whose weights are already quantized (lossy twice) */
    kite_quantize_progress_fn progress; /* NULL = none */
    void *progress_user_data;
    const char *tokenizer_path;    /* a llama2.c checkpoint's tokenizer .bin (that source only), else NULL */
} kite_quantize_params;

kite_quantize_params kite_quantize_default_params(void); /* type "Q8_0", no imatrix, all CPUs */

/* The accepted type names (llama-quantize's spelling), NULL-terminated; static storage. */
const char *const *kite_quantize_type_names(void);

/* Writes GGUF file `out` from `in` (an F32/F16/BF16 GGUF, or a llama2.c checkpoint with its tokenizer,
 * converted as llama.cpp's convert-llama2c-to-ggml does) with llama.cpp's per-tensor recipe for the
 * type (README "Quantizing"): blocks byte-identical to llama-quantize's for the same input and imatrix,
 * metadata, tokenizer and chat template kept, general.file_type set. The file is written under a
 * temporary name beside `out` and renamed when complete: a failed or cancelled run leaves nothing under
 * `out`. */
int kite_quantize(const char *in, const char *out, const kite_quantize_params *params, char *err, size_t err_size);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif
#endif /* KITE_H */
