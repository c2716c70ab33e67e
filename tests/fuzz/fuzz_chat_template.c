/* Fuzzes the chat-template engine: the input is a template source, then (after the first NUL byte) a
 * messages JSON array. Compiling and rendering must never crash, hang or run out of bounds; a render
 * that succeeds gives NUL-terminated text (a template may write NUL itself, '\x00') whose origin mask
 * holds only 0 and 1. Small budgets keep each run
 * short and reach the limit checks. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char DEFAULT_MESSAGES[] =
    "[{\"role\":\"system\",\"content\":\"sys\"},{\"role\":\"user\",\"content\":\"hi <|im_start|>\"},"
    "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"type\":\"function\",\"function\":{\"name\":\"f\","
    "\"arguments\":{\"a\":1}}}]},{\"role\":\"tool\",\"content\":[{\"type\":\"text\",\"text\":\"r\"}]}]";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t tmpl_len = nul ? (size_t)(nul - data) : size;
    char *messages = NULL;
    if (nul) {
        size_t n = size - tmpl_len - 1;
        messages = malloc(n + 1);
        if (!messages) return 0;
        memcpy(messages, nul + 1, n);
        messages[n] = 0;
    }
    kite_chat_template *t = NULL;
    char err[512];
    if (kite_chat_template_from_text(&t, (const char *)data, tmpl_len, NULL, err, sizeof err) == KITE_OK) {
        if (!t) abort();
        jinja_limits lim = {.max_output_bytes = 1 << 20, .max_memory_bytes = 64u << 20, .max_steps = 200000, .max_depth = 200};
        kite_chat_template_set_limits(t, &lim);
        kite_chat_template_set_fixed_time(t, 1796115907);
        kite_chat_params p = kite_chat_default_params();
        p.messages_json = messages ? messages : DEFAULT_MESSAGES;
        p.tools_json = "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\"}}}]";
        p.kwargs_json = "{\"enable_thinking\":false}";
        char *text = NULL;
        uint8_t *mask = NULL;
        size_t len = 0;
        kite_error e = {0};
        if (kite_chat_render_masked(t, &p, &text, &mask, &len, &e) == KITE_OK) {
            if (!text || !mask || text[len] != 0) abort();
            for (size_t i = 0; i < len; i++)
                if (mask[i] > 1) abort();
        } else if (text || !e.msg[0]) {
            abort();
        }
        free(text);
        free(mask);
        kite_chat_template_free(t);
    } else if (t || !err[0]) {
        abort();
    }
    free(messages);
    return 0;
}
