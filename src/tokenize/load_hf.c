/* Tokenizer from a Hugging Face tokenizer.json (model type BPE), optionally with tokenizer_config.json.
 * Two shapes are understood:
 *   - byte-level BPE (GPT-2 / Llama-3 / Qwen): pre_tokenizer ByteLevel, alone (use_regex: GPT-2's pattern)
 *     or after Split regexes (a "Sequence"); normalizer null or NFC;
 *   - SentencePiece converted to BPE (Llama-2 style, TinyStories): byte_fallback, normalizer Prepend "▁" +
 *     Replace " " -> "▁", or pre_tokenizer Metaspace.
 * Anything else is KITE_ERR_UNSUPPORTED with the name of the part that is not understood. */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "tokenize/tokenizer_internal.h"

#define SPACE_MARKER "\xE2\x96\x81"

typedef struct hf_options {
    bool bytelevel;        /* a ByteLevel pre-tokenizer was seen */
    bool nfc;
    bool prepend_marker;   /* normalizer Prepend "▁" */
    bool replace_space;    /* normalizer Replace " " -> "▁" */
    bool metaspace;
    kite_space_prefix metaspace_prefix;
    bool metaspace_split;
    bool bpe_prefix_space; /* ByteLevel add_prefix_space */
    const char *regex[KITE_PRETOK_MAX_REGEX];
    size_t regex_len[KITE_PRETOK_MAX_REGEX];
    char *owned[KITE_PRETOK_MAX_REGEX]; /* quoted literal patterns */
    int n_regex;
} hf_options;

static const char *type_of(const json_t *node) {
    const char *s = json_string_value(json_object_get(node, "type"));
    return s ? s : "(no type)";
}

static bool string_is(const json_t *node, const char *want) {
    const char *s = json_string_value(node);
    return s && strcmp(s, want) == 0;
}

static bool get_bool(const json_t *obj, const char *key, bool fallback) {
    json_t *v = json_object_get(obj, key);
    return json_is_boolean(v) ? json_is_true(v) : fallback;
}

static int parse_normalizer(const json_t *n, hf_options *o, int depth, kite_error *e) {
    if (!n || json_is_null(n)) return KITE_OK;
    if (!json_is_object(n) || depth > 8) return kite_fail(e, KITE_ERR_FORMAT, "tokenizer.json: normalizer is malformed");
    const char *type = type_of(n);
    if (strcmp(type, "Sequence") == 0) {
        json_t *list = json_object_get(n, "normalizers");
        if (!json_is_array(list)) return kite_fail(e, KITE_ERR_FORMAT, "tokenizer.json: normalizer Sequence has no list");
        for (size_t i = 0; i < json_array_size(list); i++) {
            int rc = parse_normalizer(json_array_get(list, i), o, depth + 1, e);
            if (rc) return rc;
        }
        return KITE_OK;
    }
    if (strcmp(type, "NFC") == 0) {
        o->nfc = true;
        return KITE_OK;
    }
    if (strcmp(type, "Prepend") == 0 && string_is(json_object_get(n, "prepend"), SPACE_MARKER)) {
        o->prepend_marker = true;
        return KITE_OK;
    }
    if (strcmp(type, "Replace") == 0) {
        json_t *pattern = json_object_get(json_object_get(n, "pattern"), "String");
        if (string_is(pattern, " ") && string_is(json_object_get(n, "content"), SPACE_MARKER)) {
            o->replace_space = true;
            return KITE_OK;
        }
        return kite_fail(e, KITE_ERR_UNSUPPORTED, "tokenizer.json: normalizer Replace other than \" \" -> \"\u2581\" is not supported");
    }
    return kite_fail(e, KITE_ERR_UNSUPPORTED, "tokenizer.json: normalizer \"%s\" is not supported", type);
}

static int add_regex(hf_options *o, const char *pattern, size_t len, char *owned, kite_error *e) {
    if (o->n_regex >= KITE_PRETOK_MAX_REGEX) {
        free(owned);
        return kite_fail(e, KITE_ERR_UNSUPPORTED, "tokenizer.json: more than %d Split pre-tokenizers", KITE_PRETOK_MAX_REGEX);
    }
    o->regex[o->n_regex] = pattern;
    o->regex_len[o->n_regex] = len;
    o->owned[o->n_regex] = owned;
    o->n_regex++;
    return KITE_OK;
}

static int parse_pre_tokenizer(const json_t *p, hf_options *o, int depth, kite_error *e) {
    if (!p || json_is_null(p)) return KITE_OK;
    if (!json_is_object(p) || depth > 8) return kite_fail(e, KITE_ERR_FORMAT, "tokenizer.json: pre_tokenizer is malformed");
    const char *type = type_of(p);
    if (strcmp(type, "Sequence") == 0) {
        json_t *list = json_object_get(p, "pretokenizers");
        if (!json_is_array(list)) return kite_fail(e, KITE_ERR_FORMAT, "tokenizer.json: pre_tokenizer Sequence has no list");
        for (size_t i = 0; i < json_array_size(list); i++) {
            int rc = parse_pre_tokenizer(json_array_get(list, i), o, depth + 1, e);
            if (rc) return rc;
        }
        return KITE_OK;
    }
    if (strcmp(type, "Split") == 0) {
        if (!string_is(json_object_get(p, "behavior"), "Isolated") || get_bool(p, "invert", false))
            return kite_fail(e, KITE_ERR_UNSUPPORTED, "tokenizer.json: Split pre-tokenizer supports only behavior \"Isolated\" without invert");
        json_t *pattern = json_object_get(p, "pattern");
        json_t *re = json_object_get(pattern, "Regex");
        if (json_is_string(re)) return add_regex(o, json_string_value(re), json_string_length(re), NULL, e);
        json_t *lit = json_object_get(pattern, "String");
        if (json_is_string(lit)) {
            const char *s = json_string_value(lit);
            size_t n = json_string_length(lit);
            if (n == 0 || strstr(s, "\\E") || strlen(s) != n)
                return kite_fail(e, KITE_ERR_UNSUPPORTED, "tokenizer.json: Split String pattern cannot be quoted");
            char *q = malloc(n + 5);
            if (!q) return kite_fail(e, KITE_ERR_NOMEM, "tokenizer.json: out of memory");
            memcpy(q, "\\Q", 2);
            memcpy(q + 2, s, n);
            memcpy(q + 2 + n, "\\E", 3);
            return add_regex(o, q, n + 4, q, e);
        }
        return kite_fail(e, KITE_ERR_FORMAT, "tokenizer.json: Split pre-tokenizer has no Regex or String pattern");
    }
    if (strcmp(type, "ByteLevel") == 0) {
        o->bytelevel = true;
        if (get_bool(p, "add_prefix_space", false)) o->bpe_prefix_space = true;
        if (get_bool(p, "use_regex", true)) return add_regex(o, kite_regex_gpt2_hf, strlen(kite_regex_gpt2_hf), NULL, e);
        return KITE_OK;
    }
    if (strcmp(type, "Metaspace") == 0) {
        json_t *rep = json_object_get(p, "replacement");
        if (rep && !string_is(rep, SPACE_MARKER))
            return kite_fail(e, KITE_ERR_UNSUPPORTED, "tokenizer.json: Metaspace replacement other than \"\u2581\"");
        o->metaspace = true;
        o->metaspace_split = get_bool(p, "split", true);
        const char *scheme = json_string_value(json_object_get(p, "prepend_scheme"));
        if (scheme) {
            if (strcmp(scheme, "always") == 0) o->metaspace_prefix = KITE_PREFIX_ALWAYS;
            else if (strcmp(scheme, "first") == 0) o->metaspace_prefix = KITE_PREFIX_FIRST;
            else if (strcmp(scheme, "never") == 0) o->metaspace_prefix = KITE_PREFIX_NONE;
            else return kite_fail(e, KITE_ERR_UNSUPPORTED, "tokenizer.json: Metaspace prepend_scheme \"%s\"", scheme);
        } else {
            o->metaspace_prefix = get_bool(p, "add_prefix_space", true) ? KITE_PREFIX_ALWAYS : KITE_PREFIX_NONE;
        }
        return KITE_OK;
    }
    return kite_fail(e, KITE_ERR_UNSUPPORTED, "tokenizer.json: pre_tokenizer \"%s\" is not supported", type);
}

/* The BOS a TemplateProcessing post-processor puts first (also inside a Sequence), or NULL. */
static const char *template_bos(const json_t *pp, int depth) {
    if (!json_is_object(pp) || depth > 8) return NULL;
    const char *type = type_of(pp);
    if (strcmp(type, "Sequence") == 0) {
        json_t *list = json_object_get(pp, "processors");
        for (size_t i = 0; i < json_array_size(list); i++) {
            const char *s = template_bos(json_array_get(list, i), depth + 1);
            if (s) return s;
        }
        return NULL;
    }
    if (strcmp(type, "TemplateProcessing") != 0) return NULL;
    json_t *first = json_array_get(json_object_get(pp, "single"), 0);
    const char *name = json_string_value(json_object_get(json_object_get(first, "SpecialToken"), "id"));
    if (!name) return NULL;
    json_t *ids = json_object_get(json_object_get(json_object_get(pp, "special_tokens"), name), "tokens");
    const char *tok = json_string_value(json_array_get(ids, 0));
    return tok ? tok : name;
}

/* tokenizer_config.json's bos_token / eos_token: a string, or an object with "content". */
static const char *config_token(const json_t *config, const char *key) {
    json_t *v = json_object_get(config, key);
    if (json_is_object(v)) v = json_object_get(v, "content");
    return json_string_value(v);
}

static int32_t find_cstr(const kite_tokenizer *t, const char *s) {
    return s ? kite_vocab_find(t, s, strlen(s)) : -1;
}

static int load_merges(kite_tokenizer *t, const json_t *merges, kite_error *e) {
    size_t n = json_array_size(merges);
    if (n > INT32_MAX) return kite_fail(e, KITE_ERR_FORMAT, "tokenizer.json: too many merges");
    int rc = kite_merges_init(&t->merges, n, e);
    if (rc) return rc;
    size_t skipped = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(merges, i);
        const char *l, *r;
        size_t ll, rl;
        if (json_is_string(m)) { /* "left right" */
            const char *s = json_string_value(m);
            size_t len = json_string_length(m);
            const char *sp = len > 1 ? memchr(s + 1, ' ', len - 1) : NULL;
            if (!sp) return kite_fail(e, KITE_ERR_FORMAT, "tokenizer.json: merge %zu has no space between its parts", i);
            l = s;
            ll = (size_t)(sp - s);
            r = sp + 1;
            rl = len - ll - 1;
        } else if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
                   json_is_string(json_array_get(m, 1))) { /* ["left", "right"] */
            l = json_string_value(json_array_get(m, 0));
            ll = json_string_length(json_array_get(m, 0));
            r = json_string_value(json_array_get(m, 1));
            rl = json_string_length(json_array_get(m, 1));
        } else {
            return kite_fail(e, KITE_ERR_FORMAT, "tokenizer.json: merge %zu is neither \"a b\" nor [\"a\", \"b\"]", i);
        }
        rc = kite_merges_add_text(t, l, ll, r, rl, (int32_t)i, &skipped, e);
        if (rc) return rc;
    }
    if (skipped) kite_log(KITE_LOG_WARN, "tokenizer.json: skipped %zu merges naming texts outside the vocabulary", skipped);
    return KITE_OK;
}

static int build(kite_tokenizer **out, const json_t *root, const json_t *config, hf_options *o, kite_error *e) {
    json_t *model = json_object_get(root, "model");
    if (!json_is_object(model)) return kite_fail(e, KITE_ERR_FORMAT, "tokenizer.json: no \"model\" object");
    json_t *merges = json_object_get(model, "merges");
    const char *mtype = json_string_value(json_object_get(model, "type"));
    if (mtype ? strcmp(mtype, "BPE") != 0 : !json_is_array(merges))
        return kite_fail(e, KITE_ERR_UNSUPPORTED, "tokenizer.json: model type \"%s\" is not supported (only BPE)",
                         mtype ? mtype : "(none)");
    if (merges && !json_is_null(merges) && !json_is_array(merges))
        return kite_fail(e, KITE_ERR_FORMAT, "tokenizer.json: model.merges is not an array");
    json_t *vocab = json_object_get(model, "vocab");
    if (!json_is_object(vocab)) return kite_fail(e, KITE_ERR_FORMAT, "tokenizer.json: model.vocab is not an object");
    const char *affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int k = 0; k < 2; k++) {
        json_t *v = json_object_get(model, affixes[k]);
        if (v && !json_is_null(v) && !string_is(v, ""))
            return kite_fail(e, KITE_ERR_UNSUPPORTED, "tokenizer.json: model.%s is not supported", affixes[k]);
    }

    int rc = parse_normalizer(json_object_get(root, "normalizer"), o, 0, e);
    if (!rc) rc = parse_pre_tokenizer(json_object_get(root, "pre_tokenizer"), o, 0, e);
    if (rc) return rc;
    bool byte_fallback = get_bool(model, "byte_fallback", false);
    kite_tokenizer_kind kind;
    if (o->bytelevel) {
        if (o->prepend_marker || o->replace_space || o->metaspace)
            return kite_fail(e, KITE_ERR_UNSUPPORTED, "tokenizer.json: ByteLevel mixed with SentencePiece-style \"\u2581\"");
        kind = KITE_TOKENIZER_BPE;
    } else if (byte_fallback || o->prepend_marker || o->replace_space || o->metaspace) {
        if (o->nfc || o->n_regex)
            return kite_fail(e, KITE_ERR_UNSUPPORTED, "tokenizer.json: NFC or Split with a SentencePiece-style BPE is not supported");
        kind = KITE_TOKENIZER_SPM;
    } else {
        return kite_fail(e, KITE_ERR_UNSUPPORTED,
                         "tokenizer.json: BPE without ByteLevel or SentencePiece-style \"\u2581\" handling is not supported");
    }

    /* ids: the vocabulary plus added tokens; they must be dense enough to allocate */
    json_t *added = json_object_get(root, "added_tokens");
    if (added && !json_is_null(added) && !json_is_array(added))
        return kite_fail(e, KITE_ERR_FORMAT, "tokenizer.json: added_tokens is not an array");
    size_t n_entries = json_object_size(vocab) + json_array_size(added);
    int64_t max_id = -1;
    const char *key;
    size_t key_len;
    json_t *value;
    json_object_keylen_foreach((json_t *)vocab, key, key_len, value) {
        if (!json_is_integer(value) || json_integer_value(value) < 0)
            return kite_fail(e, KITE_ERR_FORMAT, "tokenizer.json: vocab entry \"%.40s\" has no valid id", key);
        if (json_integer_value(value) > max_id) max_id = json_integer_value(value);
    }
    for (size_t i = 0; i < json_array_size(added); i++) {
        json_t *a = json_array_get(added, i);
        json_t *id = json_object_get(a, "id");
        if (!json_is_object(a) || !json_is_integer(id) || json_integer_value(id) < 0 ||
            !json_is_string(json_object_get(a, "content")))
            return kite_fail(e, KITE_ERR_FORMAT, "tokenizer.json: added_tokens[%zu] needs an id and a content", i);
        if (json_integer_value(id) > max_id) max_id = json_integer_value(id);
    }
    if (max_id < 0) return kite_fail(e, KITE_ERR_FORMAT, "tokenizer.json: empty vocabulary");
    if (max_id >= (int64_t)(2 * n_entries + 1024) || max_id >= (1 << 26))
        return kite_fail(e, KITE_ERR_FORMAT, "tokenizer.json: token id %lld is far beyond the %zu entries", (long long)max_id,
                         n_entries);
    int32_t n_vocab = (int32_t)max_id + 1;

    kite_tokenizer *t;
    rc = kite_tokenizer_alloc(&t, n_vocab, e);
    if (rc) return rc;
    kite_span *texts = calloc((size_t)n_vocab, sizeof *texts);
    if (!texts) {
        kite_tokenizer_free(t);
        return kite_fail(e, KITE_ERR_NOMEM, "tokenizer.json: out of memory");
    }
    memset(t->types, KITE_TOKEN_UNUSED, (size_t)n_vocab); /* ids nobody names stay unused */
    json_object_keylen_foreach((json_t *)vocab, key, key_len, value) {
        int32_t id = (int32_t)json_integer_value(value);
        texts[id] = (kite_span){key, key_len};
        t->types[id] = KITE_TOKEN_NORMAL;
    }
    for (size_t i = 0; i < json_array_size(added); i++) {
        json_t *a = json_array_get(added, i);
        int32_t id = (int32_t)json_integer_value(json_object_get(a, "id"));
        json_t *content = json_object_get(a, "content");
        texts[id] = (kite_span){json_string_value(content), json_string_length(content)};
        t->types[id] = get_bool(a, "special", false) ? KITE_TOKEN_CONTROL : KITE_TOKEN_USER_DEFINED;
        t->flags[id] = (uint8_t)((get_bool(a, "lstrip", false) ? KITE_TOKEN_FLAG_LSTRIP : 0) |
                                 (get_bool(a, "rstrip", false) ? KITE_TOKEN_FLAG_RSTRIP : 0));
    }
    rc = kite_tokenizer_set_texts(t, texts, e);
    free(texts);
    if (!rc) rc = kite_vocab_build_map(t, e);
    if (rc) goto fail;

    t->kind = kind;
    t->algo = KITE_ALGO_BPE_RANKS;
    t->ignore_merges = get_bool(model, "ignore_merges", false);
    t->byte_fallback = byte_fallback;
    t->fuse_unk = get_bool(model, "fuse_unk", false);
    t->unk = find_cstr(t, json_string_value(json_object_get(model, "unk_token")));
    if (t->unk >= 0 && t->types[t->unk] != KITE_TOKEN_USER_DEFINED) t->types[t->unk] = KITE_TOKEN_UNKNOWN;
    if (kind == KITE_TOKENIZER_SPM) {
        t->escape_spaces = o->replace_space || o->metaspace;
        if (o->prepend_marker) t->space_prefix = KITE_PREFIX_ALWAYS;
        if (o->metaspace) {
            t->space_prefix = o->metaspace_prefix;
            t->metaspace_split = o->metaspace_split;
            t->prefix_unless_space = true;
        }
    } else {
        t->nfc = o->nfc;
        t->bpe_prefix_space = o->bpe_prefix_space;
        for (int i = 0; i < o->n_regex && !rc; i++) rc = kite_pretok_add_regex(t, o->regex[i], o->regex_len[i], e);
        if (rc) goto fail;
    }

    const char *bos_text = template_bos(json_object_get(root, "post_processor"), 0);
    t->bos = find_cstr(t, bos_text);
    t->add_bos = t->bos >= 0;
    if (config) {
        json_t *flag = json_object_get(config, "add_bos_token");
        if (json_is_boolean(flag)) t->add_bos = json_is_true(flag);
        if (json_object_get(config, "bos_token")) t->bos = find_cstr(t, config_token(config, "bos_token"));
        if (json_object_get(config, "eos_token")) t->eos = find_cstr(t, config_token(config, "eos_token"));
    }

    if (json_is_array(merges)) rc = load_merges(t, merges, e);
    if (!rc) rc = kite_tokenizer_finish(t, NULL, 0, e);
    if (rc) goto fail;
    *out = t;
    return KITE_OK;
fail:
    kite_tokenizer_free(t);
    return rc;
}

int kite_tokenizer_from_hf_json(kite_tokenizer **out, const char *json, size_t json_len, const char *config_json,
                                size_t config_len, kite_error *e) {
    if (!out || (!json && json_len)) return kite_fail(e, KITE_ERR_INVALID_ARG, "tokenizer.json: no text or output");
    *out = NULL;
    json_error_t jerr;
    json_t *root = json_loadb(json ? json : "", json_len, JSON_ALLOW_NUL, &jerr);
    if (!root) return kite_fail(e, KITE_ERR_FORMAT, "tokenizer.json: line %d column %d: %s", jerr.line, jerr.column, jerr.text);
    json_t *config = NULL;
    int rc = KITE_OK;
    if (!json_is_object(root)) rc = kite_fail(e, KITE_ERR_FORMAT, "tokenizer.json: top level is not an object");
    if (!rc && config_json && config_len) {
        config = json_loadb(config_json, config_len, JSON_ALLOW_NUL | JSON_DECODE_INT_AS_REAL, &jerr);
        if (!config || !json_is_object(config))
            rc = kite_fail(e, KITE_ERR_FORMAT, "tokenizer_config.json: line %d column %d: %s", jerr.line, jerr.column,
                           config ? "top level is not an object" : jerr.text);
    }
    hf_options o = {0};
    if (!rc) rc = build(out, root, config, &o, e);
    for (int i = 0; i < o.n_regex; i++) free(o.owned[i]);
    json_decref(config);
    json_decref(root);
    return rc;
}
