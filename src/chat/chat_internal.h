/* Internal hooks of the chat-template API, for tests and the library's own callers. */
#ifndef KITE_CHAT_CHAT_INTERNAL_H
#define KITE_CHAT_CHAT_INTERNAL_H

#include "chat/jinja.h"
#include "chat/tool_calls.h"
#include "kite.h"

/* strftime_now formats this time (Unix seconds, shown in local time) instead of the clock's, so tests
 * are deterministic. */
void kite_chat_template_set_fixed_time(kite_chat_template *tmpl, int64_t unix_seconds);
/* Replaces the render budgets (the fuzz target uses small ones). */
void kite_chat_template_set_limits(kite_chat_template *tmpl, const jinja_limits *limits);

/* kite_chat_render plus the origin of each byte: mask[i] = 1 when text[i] came from the caller's data
 * (message content, tools, documents, kwargs), 0 when the template wrote it. Both malloc'd. */
int kite_chat_render_masked(const kite_chat_template *tmpl, const kite_chat_params *params, char **text, uint8_t **mask,
                            size_t *len, kite_error *e);

/* The tool-call format (and whether it writes <think> blocks) the template's source shows. */
kite_tool_template_info kite_chat_template_tool_info(const kite_chat_template *tmpl);

#endif
