/* kite's chat-template renderer against goldens rendered by the npm package @huggingface/jinja
 * (tests/chat_golden/goldens.json, made by make_goldens.mjs from the real templates in templates/ and
 * the conversations in conversations.json):
 *   - every case renders byte for byte as the reference did, or fails where the reference failed
 *     (a template's raise_exception must fail with its message);
 *   - for the Qwen3 and Llama-3 templates, with the real tokenizers opened vocab-only, kite_chat_tokenize
 *     gives the reference's ids (HF tokenization of the rendered text: special-token text recognised,
 *     no BOS added), except where a message holds special-token text: there kite's ids must not carry
 *     the forged special tokens (the reference's do), the template's own must be there, and both id
 *     lists decode to the rendered text (special tokens shown as their text).
 * A plain main: prints each failure (case, first differing byte with context) and a per-template
 * summary, and returns non-zero when any case fails. */
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chat/chat_internal.h"
#include "kite.h"

/* strftime_now must see the goldens' fixed instant (their fixed_time_utc; the reference formats it as
 * UTC, and TZ=UTC makes kite's local time the same). */
static int64_t golden_time;

static int open_template(kite_chat_template **out, const char *source, size_t len, const kite_model *model, char *err,
                         size_t err_size) {
    int status = kite_chat_template_from_text(out, source, len, model, err, err_size);
    if (status == KITE_OK) kite_chat_template_set_fixed_time(*out, golden_time);
    return status;
}

enum { ERR_SIZE = 512, CONTEXT_BYTES = 60 };

typedef struct template_tally {
    const char *name;
    int passed, failed;
    int ids_passed, ids_failed;
} template_tally;

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long size = ftell(f);
        if (size >= 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)size + 1))) {
            if (fread(buf, 1, (size_t)size, f) != (size_t)size) {
                free(buf);
                buf = NULL;
            } else {
                buf[size] = '\0';
                *len = (size_t)size;
            }
        }
    }
    fclose(f);
    return buf;
}

/* Prints bytes [from, to) of s as a C-style escaped string. */
static void print_escaped(const char *label, const char *s, size_t len, size_t from, size_t to) {
    if (to > len) to = len;
    printf("      %s: %s\"", label, from > 0 ? "..." : "");
    for (size_t i = from; i < to; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n') printf("\\n");
        else if (c == '\t') printf("\\t");
        else if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 0x20 || c == 0x7f) printf("\\x%02x", c);
        else putchar(c);
    }
    printf("\"%s (%zu bytes)\n", to < len ? "..." : "", len);
}

static void print_first_difference(const char *want, size_t want_len, const char *got, size_t got_len) {
    size_t at = 0;
    while (at < want_len && at < got_len && want[at] == got[at]) at++;
    size_t from = at > CONTEXT_BYTES ? at - CONTEXT_BYTES : 0;
    printf("    first difference at byte %zu\n", at);
    print_escaped("expected", want, want_len, from, at + CONTEXT_BYTES);
    print_escaped("kite    ", got, got_len, from, at + CONTEXT_BYTES);
}

static char *dump_or_null(const json_t *value) { return value ? json_dumps(value, JSON_COMPACT | JSON_ENCODE_ANY) : NULL; }

typedef struct conversation_json {
    char *messages;
    char *tools; /* NULL when the conversation has none */
} conversation_json;

static bool find_conversation(json_t *conversations, const char *name, conversation_json *out) {
    size_t i;
    json_t *conv;
    json_array_foreach(conversations, i, conv) {
        if (strcmp(json_string_value(json_object_get(conv, "name")), name) != 0) continue;
        out->messages = dump_or_null(json_object_get(conv, "messages"));
        out->tools = dump_or_null(json_object_get(conv, "tools"));
        return out->messages != NULL;
    }
    return false;
}

/* kwargs without the keys the model supplies itself (bos_token, eos_token), for the tokenizer runs. */
static char *dump_kwargs_without_special(const json_t *kwargs) {
    json_t *copy = json_deep_copy(kwargs);
    json_object_del(copy, "bos_token");
    json_object_del(copy, "eos_token");
    char *text = json_dumps(copy, JSON_COMPACT);
    json_decref(copy);
    return text;
}

/* One rendering case: true when it behaves as the golden says. */
static bool check_render(const kite_chat_template *tmpl, const json_t *c, const conversation_json *conv) {
    const char *id = json_string_value(json_object_get(c, "id"));
    const json_t *expected = json_object_get(c, "expected");
    char *kwargs = dump_or_null(json_object_get(c, "kwargs"));
    kite_chat_params params = kite_chat_default_params();
    params.messages_json = conv->messages;
    params.tools_json = conv->tools;
    params.kwargs_json = kwargs;
    params.add_generation_prompt = json_is_true(json_object_get(c, "add_generation_prompt"));
    char err[ERR_SIZE] = "";
    char *text = NULL;
    size_t len = 0;
    int status = kite_chat_render(tmpl, &params, &text, &len, err, sizeof err);
    bool ok;
    if (expected) {
        const char *want = json_string_value(expected);
        size_t want_len = json_string_length(expected);
        ok = status == KITE_OK && len == want_len && memcmp(text, want, len) == 0;
        if (!ok) {
            printf("FAIL %s\n", id);
            if (status != KITE_OK) printf("    kite failed (%s): %s\n", kite_status_name(status), err);
            else print_first_difference(want, want_len, text, len);
        }
    } else {
        const char *want_error = json_string_value(json_object_get(c, "error"));
        bool raised = strcmp(json_string_value(json_object_get(c, "error_kind")), "raise_exception") == 0;
        /* A template's own raise_exception must fail with its message; a runtime error of the reference
         * (e.g. an operation on none) must fail too, with kite's own wording. */
        ok = status != KITE_OK && (!raised || strstr(err, want_error) != NULL);
        if (!ok) {
            printf("FAIL %s\n", id);
            printf("    expected an error (%s): %s\n", raised ? "raise_exception" : "runtime", want_error);
            if (status == KITE_OK) print_escaped("kite rendered", text, len, 0, 2 * CONTEXT_BYTES);
            else printf("    kite's error lacks the message: %s\n", err);
        }
    }
    kite_free(text);
    free(kwargs);
    return ok;
}

static size_t count_id(const int32_t *ids, size_t n, int32_t id) {
    size_t count = 0;
    for (size_t i = 0; i < n; i++) count += ids[i] == id;
    return count;
}

/* The text ids stand for, special tokens shown as their text: kite_detokenize leaves BOS/EOS out (by
 * design, for generated text), so ids that decode to nothing get their text from shown (the forged list:
 * id -> text), as Hugging Face's decode(skip_special_tokens=False) spells them. */
static char *decode_showing_special(const kite_model *model, const int32_t *ids, size_t n, const json_t *shown,
                                    size_t *len) {
    size_t cap = 64, used = 0;
    char *text = malloc(cap);
    char err[ERR_SIZE];
    for (size_t i = 0; text && i < n; i++) {
        size_t piece_len = 0;
        if (kite_detokenize(model, &ids[i], 1, NULL, 0, &piece_len, err, sizeof err) != KITE_OK) {
            free(text);
            return NULL;
        }
        const char *special = NULL;
        size_t k;
        json_t *f;
        json_array_foreach(shown, k, f) {
            if (piece_len == 0 && json_integer_value(json_object_get(f, "id")) == ids[i])
                special = json_string_value(json_object_get(f, "text"));
        }
        size_t need = special ? strlen(special) : piece_len;
        if (used + need + 1 > cap) {
            while (used + need + 1 > cap) cap *= 2;
            char *grown = realloc(text, cap);
            if (!grown) {
                free(text);
                return NULL;
            }
            text = grown;
        }
        if (special) memcpy(text + used, special, need);
        else if (kite_detokenize(model, &ids[i], 1, text + used, cap - used, &piece_len, err, sizeof err) != KITE_OK) {
            free(text);
            return NULL;
        }
        used += need;
    }
    if (text) text[used] = '\0';
    *len = used;
    return text;
}

static void print_ids_difference(const json_t *want, const int32_t *got, size_t n_got) {
    size_t n_want = json_array_size(want), at = 0;
    while (at < n_want && at < n_got && json_integer_value(json_array_get(want, at)) == got[at]) at++;
    printf("    ids: %zu expected, %zu from kite, first difference at index %zu\n      expected:", n_want, n_got, at);
    for (size_t i = at > 4 ? at - 4 : 0; i < n_want && i < at + 8; i++)
        printf(" %lld", (long long)json_integer_value(json_array_get(want, i)));
    printf("\n      kite    :");
    for (size_t i = at > 4 ? at - 4 : 0; i < n_got && i < at + 8; i++) printf(" %d", got[i]);
    printf("\n");
}

/* One token-id case, with the template bound to the model (bos/eos from its tokenizer). */
static bool check_ids(const kite_chat_template *tmpl, const kite_model *model, const json_t *c,
                      const conversation_json *conv) {
    const char *id = json_string_value(json_object_get(c, "id"));
    const json_t *want = json_object_get(c, "ids");
    const json_t *forged = json_object_get(c, "forged");
    char *kwargs = dump_kwargs_without_special(json_object_get(c, "kwargs"));
    kite_chat_params params = kite_chat_default_params();
    params.messages_json = conv->messages;
    params.tools_json = conv->tools;
    params.kwargs_json = kwargs;
    params.add_generation_prompt = json_is_true(json_object_get(c, "add_generation_prompt"));
    char err[ERR_SIZE] = "";
    int32_t *ids = NULL;
    size_t n_ids = 0;
    int status = kite_chat_tokenize(tmpl, model, &params, &ids, &n_ids, err, sizeof err);
    free(kwargs);
    if (status != KITE_OK) {
        printf("FAIL ids %s\n    kite_chat_tokenize failed (%s): %s\n", id, kite_status_name(status), err);
        return false;
    }
    size_t n_want = json_array_size(want);
    int32_t *want_ids = malloc((n_want ? n_want : 1) * sizeof *want_ids);
    for (size_t i = 0; i < n_want; i++) want_ids[i] = (int32_t)json_integer_value(json_array_get(want, i));
    bool ok = true;
    if (!forged) {
        ok = n_ids == n_want && memcmp(ids, want_ids, n_ids * sizeof *ids) == 0;
        if (!ok) {
            printf("FAIL ids %s\n", id);
            print_ids_difference(want, ids, n_ids);
        }
    } else {
        /* The reference turned the content's special-token text into special tokens; kite must leave
         * exactly those out (plain text instead) and keep the template's own. */
        size_t i;
        json_t *f;
        bool any_forged = false;
        json_array_foreach(forged, i, f) {
            int32_t special = (int32_t)json_integer_value(json_object_get(f, "id"));
            size_t in_content = (size_t)json_integer_value(json_object_get(f, "in_content"));
            size_t in_reference = count_id(want_ids, n_want, special), in_kite = count_id(ids, n_ids, special);
            any_forged |= in_content > 0;
            if (in_reference < in_content || in_kite != in_reference - in_content) {
                printf("FAIL ids %s\n    special token %s (%d): %zu in the reference's ids, %zu of them from the "
                       "content; kite has %zu (want %zu)\n",
                       id, json_string_value(json_object_get(f, "text")), special, in_reference, in_content, in_kite,
                       in_reference >= in_content ? in_reference - in_content : 0);
                ok = false;
            }
        }
        /* The template's own turn tokens survive: kite's first id (the template's opening special token or
         * the bos it writes) is the reference's. */
        if (n_ids == 0 || n_want == 0 || ids[0] != want_ids[0]) {
            printf("FAIL ids %s\n    kite's ids do not start with the template's own token %d\n", id, n_want ? want_ids[0] : -1);
            ok = false;
        }
        if (!any_forged || (n_ids == n_want && memcmp(ids, want_ids, n_ids * sizeof *ids) == 0)) {
            printf("FAIL ids %s\n    the forging case forged nothing: kite's ids equal the reference's\n", id);
            ok = false;
        }
        /* Same text, other tokens: both id lists stand for the rendered text. */
        const json_t *expected = json_object_get(c, "expected");
        const char *want_text = json_string_value(expected);
        size_t want_len = json_string_length(expected);
        const char *whose[2] = {"kite's", "the reference's"};
        const int32_t *lists[2] = {ids, want_ids};
        size_t counts[2] = {n_ids, n_want};
        for (int w = 0; w < 2; w++) {
            size_t len = 0;
            char *text = decode_showing_special(model, lists[w], counts[w], forged, &len);
            if (!text || len != want_len || memcmp(text, want_text, len) != 0) {
                printf("FAIL ids %s\n    %s ids do not decode to the rendered text\n", id, whose[w]);
                if (text) print_first_difference(want_text, want_len, text, len);
                ok = false;
            }
            free(text);
        }
    }
    free(want_ids);
    kite_free(ids);
    return ok;
}

int main(void) {
    setenv("TZ", "UTC", 1);
    tzset();
    const char *source_dir = getenv("KITE_SOURCE_DIR");
    const char *data_dir = getenv("KITE_TEST_DATA");
    if (!source_dir || !data_dir) {
        printf("KITE_SOURCE_DIR and KITE_TEST_DATA must be set (ctest sets them)\n");
        return 1;
    }
    char path[4096];
    json_error_t jerr;
    snprintf(path, sizeof path, "%s/tests/chat_golden/goldens.json", source_dir);
    json_t *goldens = json_load_file(path, 0, &jerr);
    snprintf(path, sizeof path, "%s/tests/chat_golden/conversations.json", source_dir);
    json_t *inputs = json_load_file(path, 0, &jerr);
    if (!goldens || !inputs) {
        printf("cannot read the goldens or the conversations: %s (%s)\n", jerr.text, path);
        return 1;
    }
    json_t *conversations = json_object_get(inputs, "conversations");
    json_t *cases = json_object_get(goldens, "cases");
    json_t *templates = json_object_get(goldens, "templates");

    /* The fixed instant of the goldens (ISO 8601 UTC, "YYYY-MM-DDTHH:MM:SSZ"). */
    struct tm fixed = {0};
    if (sscanf(json_string_value(json_object_get(goldens, "fixed_time_utc")), "%d-%d-%dT%d:%d:%d", &fixed.tm_year,
               &fixed.tm_mon, &fixed.tm_mday, &fixed.tm_hour, &fixed.tm_min, &fixed.tm_sec) != 6) {
        printf("goldens.json: bad fixed_time_utc\n");
        return 1;
    }
    fixed.tm_year -= 1900;
    fixed.tm_mon -= 1;
    golden_time = (int64_t)timegm(&fixed);

    size_t n_templates = json_object_size(templates), n_tallies = 0;
    template_tally *tallies = calloc(n_templates, sizeof *tallies);
    int failures = 0, total = 0;

    const char *name;
    json_t *meta;
    json_object_foreach(templates, name, meta) {
        template_tally *tally = &tallies[n_tallies++];
        tally->name = name;
        size_t source_len = 0;
        snprintf(path, sizeof path, "%s/tests/chat_golden/templates/%s.jinja", source_dir, name);
        char *source = read_file(path, &source_len);
        char err[ERR_SIZE] = "";
        kite_chat_template *tmpl = NULL;
        int status = source ? open_template(&tmpl, source, source_len, NULL, err, sizeof err) : KITE_ERR_IO;
        if (status != KITE_OK) printf("FAIL template %s does not compile (%s): %s\n", name, kite_status_name(status), err);

        /* Token ids need the real tokenizer: opened once per template that has id cases. */
        kite_model *model = NULL;
        kite_chat_template *bound = NULL;
        size_t i;
        json_t *c;
        json_array_foreach(cases, i, c) {
            if (strcmp(json_string_value(json_object_get(c, "template")), name) != 0) continue;
            total++;
            conversation_json conv = {0};
            if (!find_conversation(conversations, json_string_value(json_object_get(c, "conversation")), &conv)) {
                printf("FAIL %s: conversation not in conversations.json\n", json_string_value(json_object_get(c, "id")));
                tally->failed++;
                failures++;
                continue;
            }
            bool ok = tmpl && check_render(tmpl, c, &conv);
            if (!tmpl) printf("FAIL %s (template did not compile)\n", json_string_value(json_object_get(c, "id")));
            ok ? tally->passed++ : tally->failed++;
            failures += !ok;

            const char *tokenizer = json_string_value(json_object_get(c, "ids_tokenizer"));
            if (tokenizer) {
                if (!model && source) {
                    char tok_path[4096];
                    snprintf(tok_path, sizeof tok_path, "%s/%s", data_dir, tokenizer);
                    kite_model_params mp = kite_model_default_params();
                    mp.vocab_only = true;
                    mp.tokenizer_path = tok_path;
                    if (kite_model_open(&model, NULL, &mp, err, sizeof err) != KITE_OK) {
                        printf("FAIL cannot open %s vocab-only: %s\n", tok_path, err);
                        model = NULL;
                    } else if (open_template(&bound, source, source_len, model, err, sizeof err) != KITE_OK) {
                        printf("FAIL template %s with the %s tokenizer does not compile: %s\n", name, tokenizer, err);
                        bound = NULL;
                    }
                }
                bool ids_ok = bound && check_ids(bound, model, c, &conv);
                ids_ok ? tally->ids_passed++ : tally->ids_failed++;
                failures += !ids_ok;
                total++;
            }
            free(conv.messages);
            free(conv.tools);
        }
        kite_chat_template_free(bound);
        kite_model_free(model);
        kite_chat_template_free(tmpl);
        free(source);
    }

    printf("\nper template: rendered cases passed/total (token-id cases passed/total)\n");
    for (size_t t = 0; t < n_tallies; t++) {
        template_tally *tally = &tallies[t];
        printf("  %-26s %3d/%-3d", tally->name, tally->passed, tally->passed + tally->failed);
        if (tally->ids_passed + tally->ids_failed)
            printf("  ids %d/%d", tally->ids_passed, tally->ids_failed + tally->ids_passed);
        printf("%s\n", tally->failed + tally->ids_failed ? "  FAIL" : "");
    }
    printf("%d of %d checks failed\n", failures, total);
    free(tallies);
    json_decref(goldens);
    json_decref(inputs);
    return failures ? 1 : 0;
}
