/* Fuzzes the OpenAI request parser (both endpoints) and checks what it promises about accepted requests. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "serve/openai.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const kite_openai_request *r, const kite_openai_limits *lim) {
    if (r->endpoint == KITE_OPENAI_CHAT) {
        if (!r->messages_json || r->n_messages == 0 || r->n_messages > (size_t)lim->max_messages) abort();
    } else {
        if (!r->prompt_text == !r->prompt_ids) abort();
        if (r->prompt_ids && r->n_prompt_ids == 0) abort();
        for (size_t i = 0; i < r->n_prompt_ids; i++)
            if (r->prompt_ids[i] < 0) abort();
    }
    if (r->max_tokens != -1 && r->max_tokens < 1) abort();
    if (!isnan(r->temperature) && !(r->temperature >= 0 && r->temperature <= 2)) abort();
    if (!isnan(r->top_p) && !(r->top_p >= 0 && r->top_p <= 1)) abort();
    if (r->top_k < -1) abort();
    if (r->n_stop > (size_t)lim->max_stop) abort();
    for (size_t i = 0; i < r->n_stop; i++)
        if (!r->stop[i] || !r->stop[i][0] || strlen(r->stop[i]) > (size_t)lim->max_stop_bytes) abort();
    if (r->n_logit_bias > (size_t)lim->max_logit_bias) abort();
    for (size_t i = 0; i < r->n_logit_bias; i++)
        if (r->logit_bias[i].token < 0 || !(fabsf(r->logit_bias[i].bias) <= 100)) abort();
    if (r->top_logprobs < 0 || r->top_logprobs > KITE_MAX_TOP_LOGPROBS) abort();
    if (r->top_logprobs > 0 && !r->logprobs) abort();
    /* structured output: a schema or a grammar comes with its text, the other formats without */
    bool has_text = r->format == KITE_OPENAI_FORMAT_JSON_SCHEMA || r->format == KITE_OPENAI_FORMAT_GRAMMAR;
    if (has_text != (r->format_text != NULL)) abort();
    /* tools: names checked, a named choice among them, a required call only with tools */
    if ((r->tools_json != NULL) != (r->n_tools > 0) || r->n_tools > (size_t)lim->max_messages) abort();
    for (size_t i = 0; i < r->n_tools; i++)
        if (!r->tool_names[i] || !r->tool_names[i][0] || strlen(r->tool_names[i]) > 64) abort();
    if ((r->tool_choice == KITE_OPENAI_TOOLS_NAMED) != (r->tool_choice_name != NULL)) abort();
    if (r->tool_choice >= KITE_OPENAI_TOOLS_REQUIRED && (r->n_tools == 0 || r->format != KITE_OPENAI_FORMAT_TEXT)) abort();
    if (r->tool_choice_name) {
        size_t k = 0;
        while (k < r->n_tools && strcmp(r->tool_names[k], r->tool_choice_name)) k++;
        if (k == r->n_tools) abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kite_openai_limits lim = kite_openai_default_limits();
    lim.max_json_depth = 16; /* small limits reach their checks more often */
    lim.max_messages = 8;
    lim.max_stop = 4;
    for (int endpoint = 0; endpoint < 2; endpoint++) {
        kite_openai_request req;
        kite_openai_error err;
        int rc = kite_openai_parse_request((kite_openai_endpoint)endpoint, (const char *)data, size, &lim, &req, &err);
        if (rc == 0) {
            check(&req, &lim);
            kite_openai_request_free(&req);
        } else if (rc < 400 || rc > 599 || err.http_status != rc || !err.message[0]) {
            abort();
        }
    }
    return 0;
}
