/* OpenAI request bodies (POST /v1/chat/completions and /v1/completions) parsed into a plain, validated
 * C struct, and the error shape OpenAI answers with. Knows nothing of models: the server checks what
 * needs one (the model name, token ids against the vocabulary, the prompt against the context). */
#ifndef KITE_SERVE_OPENAI_H
#define KITE_SERVE_OPENAI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kite.h"

typedef enum kite_openai_endpoint {
    KITE_OPENAI_CHAT = 0,        /* /v1/chat/completions: messages */
    KITE_OPENAI_COMPLETIONS = 1, /* /v1/completions: prompt */
} kite_openai_endpoint;

typedef struct kite_openai_limits {
    int32_t max_json_depth;  /* nesting of arrays and objects, checked before jansson parses */
    int32_t max_messages;    /* entries of messages */
    int32_t max_stop;        /* stop strings */
    int32_t max_stop_bytes;  /* bytes of one stop string */
    int32_t max_logit_bias;  /* entries of logit_bias */
} kite_openai_limits;

/* 64 levels, 1024 messages, 16 stop strings of at most 256 bytes, 1024 logit biases. */
kite_openai_limits kite_openai_default_limits(void);

/* What the output must conform to (response_format, or kite's and llama.cpp's "grammar" and
 * "json_schema" extensions). */
typedef enum kite_openai_format {
    KITE_OPENAI_FORMAT_TEXT = 0,        /* unconstrained */
    KITE_OPENAI_FORMAT_JSON_OBJECT = 1, /* response_format {"type": "json_object"}: any JSON object */
    KITE_OPENAI_FORMAT_JSON_SCHEMA = 2, /* response_format {"type": "json_schema", "json_schema": {"schema"}} or "json_schema" */
    KITE_OPENAI_FORMAT_GRAMMAR = 3,     /* "grammar": GBNF text (llama.cpp's syntax) */
} kite_openai_format;

/* tool_choice (chat with tools). */
typedef enum kite_openai_tool_choice {
    KITE_OPENAI_TOOLS_AUTO = 0,     /* the model decides (the default with tools) */
    KITE_OPENAI_TOOLS_NONE = 1,     /* no call: the tools still go to the template, the reply is text */
    KITE_OPENAI_TOOLS_REQUIRED = 2, /* at least one call, of any of the tools */
    KITE_OPENAI_TOOLS_NAMED = 3,    /* a call of tool_choice_name */
} kite_openai_tool_choice;

/* A validated request. Optional fields the client did not send (or sent as null) read as absent:
 * NAN for numbers, -1 for counts, false for flags; the server fills in its defaults. */
typedef struct kite_openai_request {
    kite_openai_endpoint endpoint;
    char *model;                /* NULL when absent */
    /* chat */
    char *messages_json;        /* the messages as a JSON array, each content a string (text parts joined),
                                   "developer" turns given the role "system"; other keys kept */
    size_t n_messages;
    char *kwargs_json;          /* chat_template_kwargs (a JSON object) or NULL */
    /* completions: exactly one of prompt_text / prompt_ids */
    char *prompt_text;          /* NUL-terminated UTF-8 (prompt_len bytes; may hold no NUL) */
    size_t prompt_len;
    int32_t *prompt_ids;        /* a prompt given as token ids (no BOS added) */
    size_t n_prompt_ids;
    bool parse_special;         /* "parse_special" (default true): special-token text in the prompt becomes
                                   special tokens, as HF and llama.cpp do; false = plain text */
    /* sampling */
    int32_t max_tokens;         /* max_completion_tokens, else max_tokens; -1 absent; >= 1 */
    float temperature;          /* [0, 2] */
    float top_p;                /* [0, 1] */
    int32_t top_k;              /* >= 0; -1 absent */
    float min_p;                /* [0, 1] */
    float presence_penalty;     /* [-2, 2] */
    float frequency_penalty;    /* [-2, 2] */
    float repetition_penalty;   /* (0, 10]; "repetition_penalty" or "repeat_penalty" */
    bool has_seed;
    uint64_t seed;              /* any integer (negative ones taken modulo 2^64) */
    char **stop;                /* n_stop non-empty strings */
    size_t n_stop;
    kite_logit_bias *logit_bias;/* token ids >= 0 (the server checks them against the vocabulary), bias in [-100, 100] */
    size_t n_logit_bias;
    bool ignore_eos;            /* "ignore_eos" (an extension, as llama.cpp's): keep generating past end tokens */
    bool skip_special_tokens;   /* "skip_special_tokens" (vLLM's, default true): control tokens give no text and an
                                   end marker spelled in plain pieces ends the answer (kite_gen_params.skip_special),
                                   unless a reply parser (tools, <think>) reads the markup itself */
    bool return_token_ids;      /* "return_token_ids" (an extension, as vLLM's): the answer carries the prompt's
                                   ids ("prompt_token_ids") and each choice the ids of its text ("token_ids") */
    /* output */
    bool logprobs;              /* chat: logprobs true; completions: logprobs an integer (>= 0) */
    int32_t top_logprobs;       /* 0 .. KITE_MAX_TOP_LOGPROBS (chat: top_logprobs; completions: logprobs) */
    bool stream;
    bool include_usage;         /* stream_options.include_usage */
    /* structured output */
    kite_openai_format format;
    char *format_text;          /* JSON_SCHEMA: the schema as compact JSON; GRAMMAR: the GBNF text; else NULL */
    char *format_name;          /* response_format.json_schema.name, or NULL */
    /* tools (chat): the definitions go to the chat template's `tools` */
    char *tools_json;           /* the tools array (compact JSON), or NULL without tools */
    char **tool_names;          /* [n_tools] each function's name */
    size_t n_tools;
    kite_openai_tool_choice tool_choice;
    char *tool_choice_name;     /* NAMED: the function to call (one of tool_names) */
    bool parallel_tool_calls;   /* default true: the reply may hold several calls */
} kite_openai_request;

/* An error as OpenAI reports it: {"error": {"message", "type", "param", "code"}} with an HTTP status. */
typedef struct kite_openai_error {
    int http_status;
    char type[32];              /* "invalid_request_error", ... */
    char param[64];             /* "" = null */
    char code[48];              /* "" = null */
    char message[512];
} kite_openai_error;

/* Fills *error (when non-NULL) and returns http_status. param and code may be NULL. */
int kite_openai_set_error(kite_openai_error *error, int http_status, const char *type, const char *param,
                          const char *code, const char *fmt, ...) __attribute__((format(printf, 6, 7)));

/* Parses and validates a request body of `len` bytes (need not be NUL-terminated). Returns 0 and fills
 * *req (free it with kite_openai_request_free), or the HTTP status of the failure (400) with *error
 * naming the offending parameter; *req is then empty. */
int kite_openai_parse_request(kite_openai_endpoint endpoint, const char *body, size_t len,
                              const kite_openai_limits *limits, kite_openai_request *req, kite_openai_error *error);
void kite_openai_request_free(kite_openai_request *req);

/* Deepest nesting of arrays and objects in JSON text, counting only brackets outside strings; stops
 * counting (and returns limit + 1) once past limit, so the scan is linear and never recurses. */
int32_t kite_openai_json_depth(const char *text, size_t len, int32_t limit);

#endif
