/* kite grammar: prints the GBNF grammar a JSON schema or a regular expression compiles to (what
 * kite run --json-schema / --regex constrain the output with). Uses only kite.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat_common.h"
#include "kite.h"

static const char GRAMMAR_USAGE[] =
    "usage: kite grammar (--json-schema FILE.json | --regex TEXT | --json-object | --grammar FILE.gbnf)\n"
    "\n"
    "Prints the GBNF grammar (llama.cpp's syntax, start rule root) that constrained decoding uses for a\n"
    "JSON schema, a regular expression (the whole output must match it) or any JSON object; with\n"
    "--grammar, checks a GBNF file and prints it back. Errors name the position of the bad input.\n"
    "\n"
    "  --json-schema FILE.json a JSON Schema\n"
    "  --regex TEXT            a regular expression\n"
    "  --json-object           any JSON object (response_format json_object)\n"
    "  --grammar FILE.gbnf     a GBNF grammar\n";

int kite_cmd_grammar(int argc, char **argv);
int kite_cmd_grammar(int argc, char **argv) {
    const char *schema_file = NULL, *regex = NULL, *gbnf_file = NULL;
    int json_object = 0;
    for (int i = 2; i < argc; i++) {
        const char *opt = argv[i];
        if (!strcmp(opt, "--help") || !strcmp(opt, "-h")) {
            fputs(GRAMMAR_USAGE, stdout);
            return 0;
        }
        if (!strcmp(opt, "--json-object")) {
            json_object = 1;
            continue;
        }
        const char **slot = !strcmp(opt, "--json-schema") ? &schema_file
                            : !strcmp(opt, "--regex")     ? &regex
                            : !strcmp(opt, "--grammar")   ? &gbnf_file
                                                          : NULL;
        if (!slot) {
            fprintf(stderr, "kite: error: unknown option %s (see kite grammar --help)\n", opt);
            return 2;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "kite: error: option %s needs a value (see kite grammar --help)\n", opt);
            return 2;
        }
        *slot = argv[++i];
    }
    if ((schema_file != NULL) + (regex != NULL) + (gbnf_file != NULL) + json_object != 1) {
        fprintf(stderr, "kite: error: kite grammar needs one of --json-schema FILE, --regex TEXT, --json-object and "
                        "--grammar FILE (see kite grammar --help)\n");
        return 2;
    }
    char err[1024];
    const char *file = schema_file ? schema_file : gbnf_file;
    kite_grammar_kind kind = schema_file ? KITE_GRAMMAR_JSON_SCHEMA
                             : regex     ? KITE_GRAMMAR_REGEX
                             : gbnf_file ? KITE_GRAMMAR_GBNF
                                         : KITE_GRAMMAR_JSON;
    char *content = NULL;
    size_t len = regex ? strlen(regex) : 0;
    if (file && !(content = kite_cli_read_file(file, &len, err, sizeof err))) {
        fprintf(stderr, "kite: error: %s\n", err);
        return 1;
    }
    char *gbnf = NULL;
    size_t gbnf_len = 0;
    int st = kite_grammar_to_gbnf(kind, file ? content : regex ? regex : "", len, &gbnf, &gbnf_len, err, sizeof err);
    free(content);
    if (st) {
        fprintf(stderr, "kite: error: %s%s%s\n", file ? file : "", file ? ": " : "", err);
        return 1;
    }
    fwrite(gbnf, 1, gbnf_len, stdout);
    if (gbnf_len == 0 || gbnf[gbnf_len - 1] != '\n') fputc('\n', stdout);
    kite_free(gbnf);
    return 0;
}
