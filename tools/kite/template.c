/* kite template: renders a conversation through a chat template and prints exactly what the model
 * would be fed (no newline added). Uses only kite.h. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chat_common.h"
#include "kite.h"
#include "cli_util.h"

#define usage_error(...) kite_cli_usage_error("kite", "kite template --help", __VA_ARGS__)

static const char TEMPLATE_USAGE[] =
    "usage: kite template (--model PATH | --chat-template FILE) --messages FILE.json [options]\n"
    "\n"
    "Renders a conversation through a chat template and prints the text exactly (no newline is added\n"
    "unless the template writes one): what the model is fed before tokenization.\n"
    "\n"
    "  --model, -m PATH        the model whose template to use (GGUF tokenizer.chat_template, a Hugging Face\n"
    "                          folder's chat_template.jinja or tokenizer_config.json); also gives\n"
    "                          bos_token and eos_token\n"
    "  --tokenizer PATH        a tokenizer (tokenizer.json, llama2.c .bin) for bos_token and eos_token when\n"
    "                          there is no model\n"
    "  --chat-template FILE    a Jinja template file; overrides the model's\n"
    "  --template-name NAME    a named template of the model (tokenizer.chat_template.NAME, e.g. tool_use)\n"
    "  --messages FILE.json    the conversation in OpenAI form: an array of messages, or an object with\n"
    "                          \"messages\" and optionally \"tools\"\n"
    "  --tools FILE.json       tool definitions (a JSON array); overrides the messages file's \"tools\"\n"
    "  --no-generation-prompt  do not end with the header of an assistant turn\n"
    "  --kwargs JSON           extra template variables, e.g. '{\"enable_thinking\": false}'\n";

static int error_line(const char *message) {
    fprintf(stderr, "kite: error: %s\n", message);
    return 1;
}

int kite_cmd_template(int argc, char **argv);
int kite_cmd_template(int argc, char **argv) {
    const char *model_path = NULL, *tokenizer_path = NULL, *template_file = NULL, *template_name = NULL;
    const char *messages_file = NULL, *tools_file = NULL, *kwargs_text = NULL;
    bool generation_prompt = true;
    for (int i = 2; i < argc; i++) {
        const char *opt = argv[i];
        if (!strcmp(opt, "--help") || !strcmp(opt, "-h")) {
            fputs(TEMPLATE_USAGE, stdout);
            return 0;
        }
        if (!strcmp(opt, "--no-generation-prompt")) {
            generation_prompt = false;
            continue;
        }
        const char **slot = !strcmp(opt, "--model") || !strcmp(opt, "-m") ? &model_path
                            : !strcmp(opt, "--tokenizer")                   ? &tokenizer_path
                            : !strcmp(opt, "--chat-template")               ? &template_file
                            : !strcmp(opt, "--template-name")               ? &template_name
                            : !strcmp(opt, "--messages")                    ? &messages_file
                            : !strcmp(opt, "--tools")                       ? &tools_file
                            : !strcmp(opt, "--kwargs")                      ? &kwargs_text
                                                                            : NULL;
        if (!slot) return usage_error(opt[0] == '-' ? "unknown option %s" : "unexpected argument '%s'", opt);
        if (i + 1 >= argc) return usage_error("option %s needs a value", opt);
        *slot = argv[++i];
    }
    if (!model_path && !template_file) return usage_error("%s", "kite template needs --model PATH or --chat-template FILE");
    if (!messages_file) return usage_error("%s", "kite template needs --messages FILE.json");
    if (template_name && template_file) return usage_error("%s", "--template-name picks one of the model's templates; it does not go with --chat-template");

    char err[1024];
    json_t *kwargs = NULL;
    if (kwargs_text) {
        json_error_t je;
        kwargs = json_loads(kwargs_text, JSON_REJECT_DUPLICATES, &je);
        if (!kwargs) {
            fprintf(stderr, "kite: error: --kwargs: invalid JSON at column %d: %s (see kite template --help)\n", je.column, je.text);
            return 2;
        }
        if (!json_is_object(kwargs)) {
            json_decref(kwargs);
            return usage_error("%s", "--kwargs must be a JSON object");
        }
    }

    json_t *messages = NULL, *tools = NULL;
    kite_model *model = NULL;
    kite_chat_template *tmpl = NULL;
    char *messages_text = NULL, *tools_text = NULL, *kwargs_compact = NULL, *text = NULL;
    int rc = 1;
    if (kite_cli_load_conversation(messages_file, &messages, &tools, err, sizeof err)) {
        error_line(err);
        goto done;
    }
    if (tools_file) {
        json_t *file_tools = kite_cli_load_tools(tools_file, err, sizeof err);
        if (!file_tools) {
            error_line(err);
            goto done;
        }
        json_decref(tools);
        tools = file_tools;
    }

    if (model_path || tokenizer_path) {
        /* The template and the special tokens need only the tokenizer. */
        kite_model_params mp = kite_model_default_params();
        mp.vocab_only = true;
        mp.tokenizer_path = tokenizer_path;
        if (kite_model_open(&model, model_path, &mp, err, sizeof err)) {
            error_line(err);
            goto done;
        }
    }
    if (kite_cli_open_template(&tmpl, model, template_file, template_name, err, sizeof err)) {
        error_line(err);
        goto done;
    }

    messages_text = kite_cli_json_text(messages);
    tools_text = tools ? kite_cli_json_text(tools) : NULL;
    kwargs_compact = kwargs ? kite_cli_json_text(kwargs) : NULL;
    if (!messages_text || (tools && !tools_text) || (kwargs && !kwargs_compact)) {
        error_line("out of memory");
        goto done;
    }
    kite_chat_params cp = kite_chat_default_params();
    cp.messages_json = messages_text;
    cp.tools_json = tools_text;
    cp.kwargs_json = kwargs_compact;
    cp.add_generation_prompt = generation_prompt;
    size_t len = 0;
    if (kite_chat_render(tmpl, &cp, &text, &len, err, sizeof err)) {
        error_line(err);
        goto done;
    }
    if (fwrite(text, 1, len, stdout) != len || fflush(stdout)) {
        error_line("cannot write the rendered text to stdout");
        goto done;
    }
    rc = 0;
done:
    kite_free(text);
    free(messages_text);
    free(tools_text);
    free(kwargs_compact);
    kite_chat_template_free(tmpl);
    kite_model_free(model);
    json_decref(messages);
    json_decref(tools);
    json_decref(kwargs);
    return rc;
}
