/* Tool calls in the text a model writes: each chat-template family's own markup parsed into OpenAI
 * `tool_calls` (id, function name, arguments as compact JSON text), plus the reply's content and its
 * reasoning, either whole or incrementally while the text streams in. A pure text layer: no model, no
 * grammar, no HTTP.
 *
 * Formats (kite_tool_format), as each family's chat template renders an assistant tool_calls message:
 *   HERMES    Qwen2.5, Qwen3, Cogito, Hermes 2/3: one or more `<tool_call>\n{"name": N, "arguments": A}\n</tool_call>`.
 *   LLAMA3    Llama 3.1/3.2: a reply that is `{"name": N, "parameters": A}` (also "arguments"), optionally after
 *             `<|python_tag|>`; `<|python_tag|>tool.call(key="value", n=1)` (the built-in tools) becomes the call
 *             "tool" with arguments {"key":"value","n":1}.
 *   MISTRAL   `[TOOL_CALLS][{"name": N, "arguments": A}, ...]` (Nemo, v3 templates) and `[TOOL_CALLS]N[ARGS]A`
 *             (v11+ templates; `[CALL_ID]x` before `[ARGS]` is skipped). Both are parsed under either value;
 *             they differ only in the prefix kite_tool_call_frame writes.
 *   HARMONY   gpt-oss: messages `<|channel|>C [to=R] [<|constrain|>json]<|message|>BODY<|end|>`, joined by
 *             `<|start|>assistant`; the recipient may stand before `<|channel|>` too. Channel analysis is
 *             reasoning, final (and commentary without a recipient: a preamble) is content, a recipient
 *             `functions.N` makes BODY the arguments of call N (another recipient, e.g. `browser.search`, is
 *             kept as the call's name whole). Bodies end at <|end|>, <|call|>, <|return|>, <|start|> or the end.
 *   DEEPSEEK  DeepSeek V3/R1: `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>N\n```json\nA\n```
 *             <｜tool▁call▁end｜>...<｜tool▁calls▁end｜>` (the V3.1 form `<｜tool▁call▁begin｜>N<｜tool▁sep｜>A<｜tool▁call▁end｜>`
 *             too, and a call block opened by <｜tool▁call▁begin｜> alone). DEEPSEEK_V3_1 (a template without the
             ```json fence) parses the same; only its kite_tool_call_frame differs.
 *   GRANITE   Granite 3.x: `<|tool_call|>[{"name": N, "arguments": A}, ...]`.
 *   COMMAND_R Command R/R+ (the tool_use template): `Action: ```json\n[{"tool_name": N, "parameters": A}, ...]\n```` (the
 *             fence is optional; a single object instead of the list is taken too). "tool_name" names the call in
 *             this format only. The `directly-answer` pseudo-tool is a call like any other (the caller may drop it).
 *   GLM4      GLM-4 (glm-4-9b-chat): the reply (the text after <|assistant|>) is `N\n{A}`: a first line that is a
 *             bare name ([A-Za-z0-9_.-]+, after optional whitespace), then the arguments object; anything else (a
 *             first line with other characters, as GLM-4's plain answers after their newline have, or no '{' after
 *             it) is content byte for byte. One call per reply.
 *   GENERIC   any other template: a reply that is one JSON object {"name": N, "arguments": A} or
 *             {"tool_calls": [{"name": N, "arguments": A} or {"type": "function", "function": {...}}, ...]}.
 *   NONE      no tool calls: the text is content (reasoning still split off when think is set).
 * In the JSON call objects, "arguments" and "parameters" both name the arguments, the OpenAI shape
 * {"type": "function", "function": {...}} is accepted, and "id" and "type" are ignored (kite makes its own
 * ids). Arguments given as a JSON string holding JSON (as in OpenAI's own messages) are decoded.
 *
 * Reasoning: with think set, a `<think>...</think>` block at the start of the reply (after whitespace) is
 * reasoning; starts_in_think says the prompt already opened it (kite_tool_prompt_opens_think). A block
 * never closed is reasoning to the end. Harmony's analysis channel is reasoning whatever think says.
 *
 * Whitespace: markup's own whitespace is dropped (before a call's opener, after its closer, inside the
 * think block's edges and after </think>); everything else in content is kept byte for byte, so a reply
 * without markup comes back unchanged. Harmony bodies are kept byte for byte.
 *
 * Arguments are compact JSON text: the model's bytes without the whitespace between JSON tokens (strings
 * and numbers exactly as written), "{}" when a call gives none. Names are the decoded JSON string.
 *
 * Malformed output never fails the parse; it is documented here and reported by a one-line problem
 * (kite_tool_stream_problem, kite_tool_parse.problem) naming the byte offset:
 *   - markup that never becomes a call (bad JSON before the name is known, an object without a name, a
 *     tentative LLAMA3/GENERIC object with another key such as {"answer": 1}, an opener at the end of the
 *     text) is content, byte for byte as the model wrote it (only the tentative-JSON case sets no problem);
 *   - once a call has started (its name is known and its arguments have begun, or its object closed),
 *     it stays a call: arguments that turn out not to be JSON, or end unterminated, end the call with what
 *     was valid so far, the problem says where, and the rest of that call's markup (to its closer, or to
 *     the end of the text for families without one) is dropped;
 *   - a call whose closer is missing before other text is kept; the text after it is content.
 * Unknown tool names are kept (OpenAI clients see them and answer with an error of their own).
 *
 * Streaming: text may be split anywhere, even inside a marker or a UTF-8 character. Text that may still
 * be the start of a marker is held back until it is known not to be one, a call is held until its name is
 * known, and a delta never ends inside a UTF-8 character (an incomplete character waits for its last
 * bytes, or for the end). For every split of the same text, the concatenation of each kind of delta, the
 * calls and the problem are the same as kite_tool_parse_text gives for the whole. */
#ifndef KITE_CHAT_TOOL_CALLS_H
#define KITE_CHAT_TOOL_CALLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

typedef enum kite_tool_format {
    KITE_TOOL_FORMAT_NONE = 0,
    KITE_TOOL_FORMAT_GENERIC = 1,
    KITE_TOOL_FORMAT_HERMES = 2,
    KITE_TOOL_FORMAT_LLAMA3 = 3,
    KITE_TOOL_FORMAT_MISTRAL = 4,      /* list form [TOOL_CALLS][{...}] */
    KITE_TOOL_FORMAT_MISTRAL_ARGS = 5, /* [TOOL_CALLS]name[ARGS]{...} */
    KITE_TOOL_FORMAT_HARMONY = 6,
    KITE_TOOL_FORMAT_DEEPSEEK = 7,
    KITE_TOOL_FORMAT_GRANITE = 8,
    KITE_TOOL_FORMAT_DEEPSEEK_V3_1 = 9, /* parsed as DEEPSEEK; its frame is the V3.1 form */
    KITE_TOOL_FORMAT_COMMAND_R = 10,    /* Action: ```json [{"tool_name": N, "parameters": A}]``` */
    KITE_TOOL_FORMAT_GLM4 = 11,         /* N\n{A} at the start of the reply */
} kite_tool_format;
enum { KITE_TOOL_FORMAT_COUNT = 12 };

/* "hermes", "llama3", ...; "?" for a value out of range. */
const char *kite_tool_format_name(kite_tool_format format);

/* What a chat template says about its model's output. */
typedef struct kite_tool_template_info {
    kite_tool_format format; /* GENERIC when the template shows no family's markup */
    bool think;              /* the template writes or strips <think> blocks */
} kite_tool_template_info;

/* Reads the family from the chat template's source text and, when the template shows no markup, from the
 * model's special-token texts (special[0..n_special), may be NULL). COMMAND_R: the template names Cohere's
 * parameter_definitions or asks for 'Action:' with "tool_name"; GLM4: a [gMASK] template that reads tools
 * and the assistant's metadata. From the vocabulary: a vocabulary with <tool_call> is
 * HERMES, [TOOL_CALLS] MISTRAL, <|python_tag|> LLAMA3, <|channel|> HARMONY, <｜tool▁calls▁begin｜> DEEPSEEK. */
kite_tool_template_info kite_tool_detect(const char *template_source, size_t len, const char *const *special,
                                         size_t n_special);

/* True when the rendered prompt ends inside an open <think> block (the generation prompt wrote
 * "<think>\n", as DeepSeek-R1's newer templates do): the reply starts as reasoning. */
bool kite_tool_prompt_opens_think(const char *prompt, size_t len);

typedef struct kite_tool_parse_options {
    kite_tool_format format;
    bool think;            /* split a leading <think>...</think> off as reasoning */
    bool starts_in_think;  /* the reply starts inside the block (kite_tool_prompt_opens_think) */
    const char *id_prefix; /* ids are id_prefix + a suffix; NULL = "call_" (MISTRAL*: no prefix, see below) */
    uint64_t id_seed;      /* the suffixes are a function of (id_seed, call index): give each response its own
                              seed (random, or a counter) for ids unique across responses */
} kite_tool_parse_options;

kite_tool_parse_options kite_tool_parse_default_options(kite_tool_format format);

/* The id of call `index` (0-based) in a response: prefix + 24 letters and digits from a bijective mix of
 * (seed, index), so the ids of one response are distinct. MISTRAL formats make 9 letters and digits and
 * no prefix unless one is given, because Mistral's templates refuse any other id when the calls come back
 * in the next request. out must hold KITE_TOOL_ID_MAX bytes; returns the length. */
enum { KITE_TOOL_ID_MAX = 96 };
size_t kite_tool_call_id(kite_tool_format format, const char *prefix, uint64_t seed, uint32_t index, char *out);

/* ---- streaming ---- */

typedef enum kite_tool_event_kind {
    KITE_TOOL_EVENT_CONTENT = 0,    /* text: a content delta */
    KITE_TOOL_EVENT_REASONING = 1,  /* text: a reasoning delta */
    KITE_TOOL_EVENT_CALL_START = 2, /* index, id, name: a call begins (OpenAI's first tool_calls delta) */
    KITE_TOOL_EVENT_ARGUMENTS = 3,  /* index, text: more of that call's arguments */
    KITE_TOOL_EVENT_CALL_END = 4,   /* index: the call's arguments are complete */
} kite_tool_event_kind;

typedef struct kite_tool_event {
    kite_tool_event_kind kind;
    int32_t index;    /* the call's position in the response (CALL_* and ARGUMENTS), else -1 */
    const char *id;   /* CALL_START: NUL-terminated; valid during the callback */
    const char *name; /* CALL_START: NUL-terminated, the decoded name */
    const char *text; /* CONTENT, REASONING, ARGUMENTS: text[0..len), not NUL-terminated; valid during the callback */
    size_t len;
} kite_tool_event;

/* Returns false to stop the stream: feed and finish then return KITE_ERR_CANCELLED. */
typedef bool (*kite_tool_event_fn)(const kite_tool_event *event, void *user_data);

typedef struct kite_tool_stream kite_tool_stream;

int kite_tool_stream_new(const kite_tool_parse_options *options, kite_tool_stream **out, kite_error *e);
void kite_tool_stream_free(kite_tool_stream *s);
/* Feeds text[0..len) and calls fn for each event it completes (text deltas are gathered per feed, so one
 * feed gives at most one delta per run of one kind). KITE_OK, KITE_ERR_NOMEM, KITE_ERR_CANCELLED, or
 * KITE_ERR_INVALID_ARG after finish. */
int kite_tool_stream_feed(kite_tool_stream *s, const char *text, size_t len, kite_tool_event_fn fn, void *user_data,
                          kite_error *e);
/* The text has ended: releases what was held back and ends an open call. */
int kite_tool_stream_finish(kite_tool_stream *s, kite_tool_event_fn fn, void *user_data, kite_error *e);
/* The first malformation seen so far (one line with its byte offset), or NULL. */
const char *kite_tool_stream_problem(const kite_tool_stream *s);
/* Calls started so far. */
int32_t kite_tool_stream_call_count(const kite_tool_stream *s);

/* ---- whole text ---- */

typedef struct kite_tool_call {
    char id[KITE_TOOL_ID_MAX];
    char *name;      /* NUL-terminated */
    char *arguments; /* compact JSON text, NUL-terminated */
    size_t arguments_len;
} kite_tool_call;

typedef struct kite_tool_parse {
    char *content;   /* NUL-terminated (empty when none); content_len bytes */
    size_t content_len;
    char *reasoning; /* NUL-terminated (empty when none) */
    size_t reasoning_len;
    kite_tool_call *calls;
    size_t n_calls;
    char problem[512]; /* "" or the first malformation, as kite_tool_stream_problem */
} kite_tool_parse;

/* The stream fed text[0..len) at once and finished. Fails only for a bad argument or memory. *out is
 * filled on success and zeroed on failure; free it with kite_tool_parse_clear. */
int kite_tool_parse_text(const kite_tool_parse_options *options, const char *text, size_t len, kite_tool_parse *out,
                         kite_error *e);
void kite_tool_parse_clear(kite_tool_parse *p);

/* ---- forcing a call ---- */

/* The text that frames one call in this format, for the grammar layer (tool_choice "required" or a named
 * function): the reply must start with *prefix (at the very start of the reply, or right after the
 * reasoning block when the caller lets the model think first), then write the arguments as a JSON
 * object (constrain it with the tool's parameter schema), then *suffix. With name NULL (any tool) the
 * prefix stops where the name begins: the grammar continues with one of the tools' names, written as the
 * format writes it (a JSON string body, or the bare name for HARMONY, MISTRAL_ARGS, DEEPSEEK and GLM4), then
 * with name_to_args, the text between the name and the arguments; with a name, that text is already in
 * the prefix. For example HERMES with "get_weather":
 *   prefix "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "  suffix "}\n</tool_call>"
 * and HERMES with NULL: prefix "<tool_call>\n{\"name\": \"", name_to_args "\", \"arguments\": ".
 * The suffix closes one call; a reply may hold more in the formats that allow it (the parser takes them).
 * HARMONY's suffix is "<|call|>", the model's stop token. Each output is malloc'd and NUL-terminated
 * (NULL pointers skip that output). KITE_ERR_INVALID_ARG for NONE, or a name that is not valid UTF-8 or
 * holds a character the format cannot carry (a control character; a space or '<' for the bare names). */
int kite_tool_call_frame(kite_tool_format format, const char *name, char **prefix, char **name_to_args, char **suffix,
                         kite_error *e);

#endif
