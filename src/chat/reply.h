/* A parsed chat reply as an OpenAI assistant message, shared by the public reply API (kite.h:
 * kite_chat_reply_*, kite_chat_parse_reply) and the server's non-stream answers, so both build it one way. */
#ifndef KITE_CHAT_REPLY_H
#define KITE_CHAT_REPLY_H

#include <jansson.h>
#include <stddef.h>

#include "chat/tool_calls.h"

/* A JSON string of bytes a model wrote: each byte that is not part of valid UTF-8 becomes U+FFFD. NULL
 * only when out of memory. */
json_t *kite_json_text_lossy(const char *bytes, size_t n);

/* {"role": "assistant", "content": ..., "reasoning_content"?: ..., "tool_calls"?: [{"id", "type":
 * "function", "function": {"name", "arguments"}}]} as OpenAI answers: content is null when the reply
 * only calls tools, reasoning_content is there when the reply reasoned, tool_calls when it called.
 * NULL when out of memory. */
json_t *kite_tool_message_json(const kite_tool_parse *parse);

#endif
