/* An OpenAI chat request's tools and tool turns in the shape a family's own chat template reads, for the
 * families whose templates do not read OpenAI's shape (kite_chat_render itself renders what it is given,
 * as transformers does; the server adapts what an OpenAI client sends before that):
 *   COMMAND_R  Command R+'s tool_use template reads each tool's name, description and Cohere's
 *              parameter_definitions ({param: {type, description, required}}, the type as a Python name:
 *              str, int, float, bool, List, Dict, Any): each OpenAI tool gets them from function.name,
 *              .description and .parameters (properties and required). An assistant message with tool_calls is
 *              written as the model writes calls (its content, then "Action: ```json\n[{"tool_name": N,
 *              "parameters": A}, ...]\n```"); a tool message, which the template would drop, becomes a system
 *              turn "<results>\n...\n</results>".
 *   GLM4       GLM-4's template reads tools from a message (item['tools']), a call as an assistant message
 *              whose metadata is the name and whose content is the arguments, and tool results under the role
 *              "observation": the tools go on the first message (unless a message already carries some), each
 *              call becomes such a message (after one with the turn's text, if any), role "tool" becomes
 *              "observation".
 * Other formats: nothing changes. */
#ifndef KITE_CHAT_TOOL_TEMPLATE_H
#define KITE_CHAT_TOOL_TEMPLATE_H

#include "base/error.h"
#include "chat/tool_calls.h"

/* messages_json (a JSON array) and tools_json (a JSON array or NULL) as format's template reads them:
 * *messages_out and *tools_out are malloc'd JSON texts, or NULL where nothing changed (use the input).
 * Input that is not JSON of that shape is left as it is (the renderer reports it). */
int kite_tool_template_inputs(kite_tool_format format, const char *messages_json, const char *tools_json, char **messages_out,
                              char **tools_out, kite_error *e);

#endif
