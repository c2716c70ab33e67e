/* A grammar that makes the model call a tool (tool_choice "required" or a named function): the call's
 * markup in the model's own format (kite_tool_call_frame) around JSON that its parameters schema allows. */
#ifndef KITE_CHAT_TOOL_GRAMMAR_H
#define KITE_CHAT_TOOL_GRAMMAR_H

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

#endif
