/* A grammar that makes the model call a tool (tool_choice "required" or a named function): the call's
 * markup in the model's own format (kite_tool_call_frame) around JSON that its parameters schema allows. */
#ifndef KITE_CHAT_TOOL_GRAMMAR_H
#define KITE_CHAT_TOOL_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>

#include "base/error.h"
#include "chat/tool_calls.h"

/* GBNF for a reply that is exactly one call in format: of the tool named force_name, or of any of the
 * tools when force_name is NULL. tools_json is the OpenAI tools array ([{"type": "function", "function":
 * {"name", "parameters"?}}]); a tool without parameters takes any JSON object. *gbnf is malloc'd and
 * NUL-terminated. Errors name the tool ("tools[2].function.parameters: ..."): a schema the compiler
 * rejects, a name the format cannot carry, no such tool. */
int kite_tool_grammar(kite_tool_format format, const char *tools_json, const char *force_name, char **gbnf,
                      size_t *gbnf_len, kite_error *e);

/* kite_tool_grammar with control_markers: the markup's <|name|> markers (gpt-oss harmony's <|channel|>,
 * <|constrain|>, <|message|>, <|call|>) written as GBNF token references, for a vocabulary where they
 * are control tokens (kite_grammar_open resolves them; it fails when one is not a token). */
int kite_tool_grammar_marked(kite_tool_format format, const char *tools_json, const char *force_name, bool control_markers,
                             char **gbnf, size_t *gbnf_len, kite_error *e);

/* GBNF for tool_choice "auto": free text until the text starts a call in format's markup (the
 * format's trigger: <tool_call>, [TOOL_CALLS], <|tool_call|>, Command R's Action:, DeepSeek's call markers anywhere; for
 * LLAMA3 and GENERIC, whose replies are calls when they are a JSON object, a '{' at the start), then
 * calls as kite_tool_grammar writes them (HERMES with parallel: one or more, a newline apart; else one) to the
 * end of the reply (kite_gbnf_lazy). KITE_ERR_UNSUPPORTED for formats without a text trigger (NONE,
 * HARMONY, whose markers are control tokens). GLM4's triggers are the tools' name lines ("NAME\n") at the
 * start of the reply (at most KITE_LAZY_MAX_TRIGGERS tools). */
int kite_tool_grammar_lazy(kite_tool_format format, const char *tools_json, bool parallel, char **gbnf, size_t *gbnf_len,
                           kite_error *e);

#endif
