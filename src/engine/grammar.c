/* kite_grammar: a GBNF grammar (or a schema / regex compiled to one) bound to a model's vocabulary
 * index, which is built once per model and kept in it. */
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "grammar/compile.h"
#include "grammar/compose.h"
#include "grammar/grammar.h"
#include "grammar/mask.h"

/* The model's vocabulary index, built on first use. */
static int model_vocab_index(kite_model *m, const kite_vocab_index **out, kite_error *e) {
    pthread_mutex_lock(&m->vocab_lock);
    int st = KITE_OK;
    if (!m->vocab_index) st = kite_vocab_index_build(m->tokenizer, m->n_vocab, &m->vocab_index, e);
    *out = m->vocab_index;
    pthread_mutex_unlock(&m->vocab_lock);
    return st;
}

/* The GBNF text of kind (malloc'd, NUL-terminated) from text[0..len). */
static int grammar_text(kite_grammar_kind kind, const char *text, size_t len, char **gbnf, size_t *gbnf_len, kite_error *e) {
    *gbnf = NULL;
    *gbnf_len = 0;
    switch (kind) {
    case KITE_GRAMMAR_GBNF: {
        if (len && !text) return kite_fail(e, KITE_ERR_INVALID_ARG, "grammar text must not be NULL");
        char *copy = malloc(len + 1);
        if (!copy) return kite_fail(e, KITE_ERR_NOMEM, "out of memory");
        if (len) memcpy(copy, text, len);
        copy[len] = '\0';
        *gbnf = copy;
        *gbnf_len = len;
        return KITE_OK;
    }
    case KITE_GRAMMAR_JSON_SCHEMA:
        if (len && !text) return kite_fail(e, KITE_ERR_INVALID_ARG, "schema text must not be NULL");
        return kite_json_schema_to_gbnf(text ? text : "", len, gbnf, gbnf_len, e);
    case KITE_GRAMMAR_REGEX:
        if (len && !text) return kite_fail(e, KITE_ERR_INVALID_ARG, "regex text must not be NULL");
        return kite_regex_to_gbnf(text ? text : "", len, gbnf, gbnf_len, e);
    case KITE_GRAMMAR_JSON: {
        const char *fixed = kite_json_object_gbnf();
        size_t n = strlen(fixed);
        char *copy = malloc(n + 1);
        if (!copy) return kite_fail(e, KITE_ERR_NOMEM, "out of memory");
        memcpy(copy, fixed, n + 1);
        *gbnf = copy;
        *gbnf_len = n;
        return KITE_OK;
    }
    }
    return kite_fail(e, KITE_ERR_INVALID_ARG, "unknown grammar kind %d", (int)kind);
}

int kite_grammar_to_gbnf(kite_grammar_kind kind, const char *text, size_t len, char **gbnf, size_t *gbnf_len, char *err,
                         size_t err_size) {
    kite_error e = {0};
    if (!gbnf) return kite_fail(&e, KITE_ERR_INVALID_ARG, "kite_grammar_to_gbnf: gbnf must not be NULL"), kite_error_export(&e, err, err_size);
    size_t n = 0;
    if (!grammar_text(kind, text, len, gbnf, &n, &e)) {
        /* What it prints must parse (a GBNF file given as such is checked). */
        kite_gbnf *g = NULL;
        if (kite_gbnf_parse(*gbnf, n, NULL, &g, &e)) {
            free(*gbnf);
            *gbnf = NULL;
            n = 0;
        }
        kite_gbnf_free(g);
    }
    if (gbnf_len) *gbnf_len = n;
    return kite_error_export(&e, err, err_size);
}

static int32_t token_by_text(void *user, const char *text, size_t n) {
    return kite_tokenizer_token_id((const kite_tokenizer *)user, text, n);
}

/* Binds GBNF text to the model's vocabulary (token references by text resolved against it). */
static int open_gbnf(kite_grammar **out, const kite_model *model, const char *gbnf, size_t gbnf_len, kite_error *e) {
    char *resolved = NULL;
    size_t resolved_len = 0;
    if (memchr(gbnf, '<', gbnf_len)) {
        int st = kite_gbnf_resolve_tokens(gbnf, gbnf_len, token_by_text, (void *)model->tokenizer, &resolved, &resolved_len, e);
        if (st) return st;
        gbnf = resolved;
        gbnf_len = resolved_len;
    }
    kite_grammar *g = calloc(1, sizeof *g);
    if (!g) return free(resolved), kite_fail(e, KITE_ERR_NOMEM, "out of memory");
    g->model = model;
    int st = kite_gbnf_parse(gbnf, gbnf_len, NULL, &g->gbnf, e);
    free(resolved);
    /* The index is a cache inside the model, which is otherwise immutable: building it under the
     * model's lock does not change what the model computes. */
    if (!st) st = model_vocab_index((kite_model *)model, &g->vocab, e);
    if (st) {
        kite_grammar_free(g);
        return st;
    }
    *out = g;
    return KITE_OK;
}

static int check_open_args(kite_grammar **out, const kite_model *model, const char *what, kite_error *e) {
    if (out) *out = NULL;
    if (!out || !model) return kite_fail(e, KITE_ERR_INVALID_ARG, "%s: grammar and model must not be NULL", what);
    if (!model->tokenizer) return kite_fail(e, KITE_ERR_TOKENIZER, "%s: the model has no tokenizer", what);
    return KITE_OK;
}

int kite_grammar_open(kite_grammar **out, const kite_model *model, kite_grammar_kind kind, const char *text, size_t len,
                      char *err, size_t err_size) {
    kite_error e = {0};
    if (check_open_args(out, model, "kite_grammar_open", &e)) return kite_error_export(&e, err, err_size);
    char *gbnf = NULL;
    size_t gbnf_len = 0;
    if (!grammar_text(kind, text, len, &gbnf, &gbnf_len, &e)) open_gbnf(out, model, gbnf, gbnf_len, &e);
    free(gbnf);
    return kite_error_export(&e, err, err_size);
}

int kite_grammar_open_lazy(kite_grammar **out, const kite_model *model, kite_grammar_kind kind, const char *text, size_t len,
                           const char *const *triggers, size_t n_triggers, bool at_start, char *err, size_t err_size) {
    kite_error e = {0};
    if (check_open_args(out, model, "kite_grammar_open_lazy", &e)) return kite_error_export(&e, err, err_size);
    char *gbnf = NULL, *lazy = NULL;
    size_t gbnf_len = 0, lazy_len = 0;
    if (!grammar_text(kind, text, len, &gbnf, &gbnf_len, &e) &&
        !kite_gbnf_lazy(gbnf, gbnf_len, triggers, n_triggers, at_start, &lazy, &lazy_len, &e))
        open_gbnf(out, model, lazy, lazy_len, &e);
    free(gbnf);
    free(lazy);
    return kite_error_export(&e, err, err_size);
}

void kite_grammar_free(kite_grammar *g) {
    if (!g) return;
    kite_gbnf_free(g->gbnf);
    free(g);
}
