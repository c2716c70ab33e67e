/* Fuzzes the CLI's conversation loader (kite chat /load, kite template --messages): the input is a
 * conversation file. Parsing and checking must never crash; a conversation that passes the checks is
 * written back as JSON text and rendered through a ChatML template, as kite chat does each turn. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../tools/kite/chat_common.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char CHATML[] =
    "{%- for m in messages %}{{ '<|im_start|>' + m.role + '\\n' }}{%- if m.content is string %}{{ m.content }}"
    "{%- elif m.content %}{%- for part in m.content %}{{ part.text if part.text is defined else '' }}{%- endfor %}"
    "{%- endif %}{{ '<|im_end|>\\n' }}{%- endfor %}{%- if tools %}{{ tools | tojson }}{%- endif %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- endif %}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static kite_chat_template *tmpl;
    char err[512];
    if (!tmpl && kite_chat_template_from_text(&tmpl, CHATML, sizeof CHATML - 1, NULL, err, sizeof err)) abort();
    json_t *messages = NULL, *tools = NULL;
    if (kite_cli_parse_conversation((const char *)data, size, "input", &messages, &tools, err, sizeof err) == KITE_OK) {
        if (!json_is_array(messages) || (tools && !json_is_array(tools))) abort();
        char *messages_text = kite_cli_json_text(messages), *tools_text = tools ? kite_cli_json_text(tools) : NULL;
        if (messages_text) {
            kite_chat_params p = kite_chat_default_params();
            p.messages_json = messages_text;
            p.tools_json = tools_text;
            char *text = NULL;
            size_t len = 0;
            if (kite_chat_render(tmpl, &p, &text, &len, err, sizeof err) == KITE_OK && (!text || strlen(text) != len)) abort();
            kite_free(text);
        }
        free(messages_text);
        free(tools_text);
    } else if (!memchr(err, 0, sizeof err) || !strstr(err, "input")) {
        abort(); /* every refusal is a message naming the input */
    }
    json_decref(messages);
    json_decref(tools);
    return 0;
}
