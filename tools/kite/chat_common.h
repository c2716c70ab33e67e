/* Helpers the chat-template verbs share (kite template, kite chat, kite run --chat): reading files,
 * opening the template a command line asks for, and loading and checking conversations in OpenAI
 * form. Uses only kite.h and jansson. Errors are one line written into err, never printed here. */
#ifndef KITE_CLI_CHAT_COMMON_H
#define KITE_CLI_CHAT_COMMON_H

#include <jansson.h>
#include <stddef.h>

#include "kite.h"

/* The whole file, NUL-terminated (*len excludes the NUL); NULL with a message on failure. */
char *kite_cli_read_file(const char *path, size_t *len, char *err, size_t err_size);

/* template_file (--chat-template FILE) when given, else the model's own template (name picks a named
 * one). model may be NULL with a template file (bos_token and eos_token are then undefined). */
int kite_cli_open_template(kite_chat_template **out, const kite_model *model, const char *template_file,
                           const char *name, char *err, size_t err_size);

/* Checks a conversation in OpenAI form: an array of objects, each with a "role" string and a
 * "content" that is a string, null or an array of content parts (null or absent only when the message
 * carries tool_calls). what names the source in messages ("conv.json"). */
int kite_cli_check_messages(const json_t *messages, const char *what, char *err, size_t err_size);

/* Parses a conversation (text[0..len), named what in messages): a JSON array of messages, or an object
 * with "messages" and optionally "tools", checked as kite_cli_check_messages does. Bad JSON names
 * what, the line and the column. *tools gets the "tools" array or NULL (both new references). */
int kite_cli_parse_conversation(const char *text, size_t len, const char *what, json_t **messages, json_t **tools,
                                char *err, size_t err_size);

/* Loads a conversation file: a JSON array of messages, or an object with "messages" and optionally
 * "tools". Bad JSON names the file, line and column. *tools gets the "tools" array or NULL (both new
 * references). Returns 0 or a kite_status. */
int kite_cli_load_conversation(const char *path, json_t **messages, json_t **tools, char *err, size_t err_size);

/* Loads a tools file (--tools FILE.json): a JSON array of tool definitions in OpenAI form. Bad JSON names
 * the file, line and column. Returns a new reference, or NULL with a message. */
json_t *kite_cli_load_tools(const char *path, char *err, size_t err_size);

/* Compact JSON text of value (UTF-8 kept, key order kept, reals round-trip), freed with free(). */
char *kite_cli_json_text(const json_t *value);

#endif
