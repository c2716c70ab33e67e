/* Tokenizer from a Hugging Face tokenizer.json (model type BPE), optionally with tokenizer_config.json.
 * Two shapes are understood:
 *   - byte-level BPE (GPT-2 / Llama-3 / Qwen): pre_tokenizer ByteLevel, alone (use_regex: GPT-2's pattern)
 *     or after Split regexes (a "Sequence"); normalizer null or NFC;
 *   - SentencePiece converted to BPE (Llama-2 style, TinyStories): byte_fallback, normalizer Prepend "▁" +
 *     Replace " " -> "▁", or pre_tokenizer Metaspace.
 * Anything else is KITE_ERR_UNSUPPORTED with the name of the part that is not understood.
 * Added tokens follow llama.cpp's GGUF conversion: "special": true -> control, else user-defined. */
#include <stdlib.h>
#include <string.h>

#include "tokenize/json_lite.h"
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

/* A node's "type" for messages (at most 40 bytes shown). */
static void type_name(const kj_doc *d, uint32_t node, char out[48]) {
    const char *s;
    size_t n;
    if (!kj_string(d, kj_get(d, node, "type"), &s, &n)) {
        strcpy(out, "(no type)");
        return;
    }
    if (n > 40) n = 40;
    memcpy(out, s, n);
    out[n] = '\0';
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)out[i] < 0x20) out[i] = '?';
}

static bool type_is(const kj_doc *d, uint32_t node, const char *want) {
    return kj_string_is(d, kj_get(d, node, "type"), want);
}

static int parse_normalizer(const kj_doc *d, uint32_t n, hf_options *o, int depth, kite_error *e) {
    if (kj_type_of(d, n) == KJ_NULL) return KITE_OK;
    if (kj_type_of(d, n) != KJ_OBJECT || depth > 8) return kite_fail(e, KITE_ERR_FORMAT, "tokenizer.json: normalizer is malformed");
    if (type_is(d, n, "Sequence")) {
        uint32_t list = kj_get(d, n, "normalizers");
        if (kj_type_of(d, list) != KJ_ARRAY) return kite_fail(e, KITE_ERR_FORMAT, "tokenizer.json: normalizer Sequence has no list");
        for (uint32_t c = d->nodes[list].first; c; c = d->nodes[c].next) {
            int rc = parse_normalizer(d, c, o, depth + 1, e);
            if (rc) return rc;
        }
        return KITE_OK;
    }
    if (type_is(d, n, "NFC")) {
        o->nfc = true;
        return KITE_OK;
    }
    if (type_is(d, n, "Prepend") && kj_string_is(d, kj_get(d, n, "prepend"), SPACE_MARKER)) {
        o->prepend_marker = true;
        return KITE_OK;
    }
    if (type_is(d, n, "Replace")) {
        if (kj_string_is(d, kj_get(d, kj_get(d, n, "pattern"), "String"), " ") &&
            kj_string_is(d, kj_get(d, n, "content"), SPACE_MARKER)) {
            o->replace_space = true;
            return KITE_OK;
        }
        return kite_fail(e, KITE_ERR_UNSUPPORTED, "tokenizer.json: normalizer Replace other than \" \" -> \"\u2581\" is not supported");
    }
    char type[48];
    type_name(d, n, type);
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

static int parse_pre_tokenizer(const kj_doc *d, uint32_t p, hf_options *o, int depth, kite_error *e) {
    if (kj_type_of(d, p) == KJ_NULL) return KITE_OK;
    if (kj_type_of(d, p) != KJ_OBJECT || depth > 8)
        return kite_fail(e, KITE_ERR_FORMAT, "tokenizer.json: pre_tokenizer is malformed");
    if (type_is(d, p, "Sequence")) {
        uint32_t list = kj_get(d, p, "pretokenizers");
        if (kj_type_of(d, list) != KJ_ARRAY) return kite_fail(e, KITE_ERR_FORMAT, "tokenizer.json: pre_tokenizer Sequence has no list");
        for (uint32_t c = d->nodes[list].first; c; c = d->nodes[c].next) {
            int rc = parse_pre_tokenizer(d, c, o, depth + 1, e);
            if (rc) return rc;
        }
        return KITE_OK;
    }
    if (type_is(d, p, "Split")) {
        /* Gemma 3's Split on " " after a normalizer that made every space "▁": nothing left to split at */
        if (o->replace_space && kj_string_is(d, kj_get(d, kj_get(d, p, "pattern"), "String"), " ") &&
            !kj_bool(d, kj_get(d, p, "invert"), false))
            return KITE_OK;
        if (!kj_string_is(d, kj_get(d, p, "behavior"), "Isolated") || kj_bool(d, kj_get(d, p, "invert"), false))
            return kite_fail(e, KITE_ERR_UNSUPPORTED, "tokenizer.json: Split pre-tokenizer supports only behavior \"Isolated\" without invert");
        uint32_t pattern = kj_get(d, p, "pattern");
        const char *s;
        size_t n;
        if (kj_string(d, kj_get(d, pattern, "Regex"), &s, &n)) return add_regex(o, s, n, NULL, e);
        if (kj_string(d, kj_get(d, pattern, "String"), &s, &n)) {
            if (n == 0 || memchr(s, '\0', n) || memmem(s, n, "\\E", 2))
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
    if (type_is(d, p, "ByteLevel")) {
        o->bytelevel = true;
        if (kj_bool(d, kj_get(d, p, "add_prefix_space"), false)) o->bpe_prefix_space = true;
        if (kj_bool(d, kj_get(d, p, "use_regex"), true))
            return add_regex(o, kite_regex_gpt2_hf, strlen(kite_regex_gpt2_hf), NULL, e);
        return KITE_OK;
    }
    if (type_is(d, p, "Metaspace")) {
        uint32_t rep = kj_get(d, p, "replacement");
        if (rep && !kj_string_is(d, rep, SPACE_MARKER))
            return kite_fail(e, KITE_ERR_UNSUPPORTED, "tokenizer.json: Metaspace replacement other than \"\u2581\"");
        o->metaspace = true;
        o->metaspace_split = kj_bool(d, kj_get(d, p, "split"), true);
        uint32_t scheme = kj_get(d, p, "prepend_scheme");
        if (kj_string_is(d, scheme, "always")) o->metaspace_prefix = KITE_PREFIX_ALWAYS;
        else if (kj_string_is(d, scheme, "first")) o->metaspace_prefix = KITE_PREFIX_FIRST;
        else if (kj_string_is(d, scheme, "never")) o->metaspace_prefix = KITE_PREFIX_NONE;
        else if (scheme) return kite_fail(e, KITE_ERR_UNSUPPORTED, "tokenizer.json: Metaspace prepend_scheme is not always/first/never");
        else o->metaspace_prefix = kj_bool(d, kj_get(d, p, "add_prefix_space"), true) ? KITE_PREFIX_ALWAYS : KITE_PREFIX_NONE;
        return KITE_OK;
    }
    char type[48];
    type_name(d, p, type);
    return kite_fail(e, KITE_ERR_UNSUPPORTED, "tokenizer.json: pre_tokenizer \"%s\" is not supported", type);
}

/* The BOS a TemplateProcessing post-processor puts first (also inside a Sequence): its token text. */
static bool template_bos(const kj_doc *d, uint32_t pp, int depth, const char **s, size_t *n) {
    if (kj_type_of(d, pp) != KJ_OBJECT || depth > 8) return false;
    if (type_is(d, pp, "Sequence")) {
        uint32_t list = kj_get(d, pp, "processors");
        for (uint32_t c = kj_type_of(d, list) == KJ_ARRAY ? d->nodes[list].first : 0; c; c = d->nodes[c].next)
            if (template_bos(d, c, depth + 1, s, n)) return true;
        return false;
    }
    if (!type_is(d, pp, "TemplateProcessing")) return false;
    uint32_t first = kj_index(d, kj_get(d, pp, "single"), 0);
    const char *name;
    size_t name_len;
    if (!kj_string(d, kj_get(d, kj_get(d, first, "SpecialToken"), "id"), &name, &name_len)) return false;
    /* special_tokens maps the name to its token texts; the name itself is the text in practice */
    uint32_t specials = kj_get(d, pp, "special_tokens");
    for (uint32_t c = kj_type_of(d, specials) == KJ_OBJECT ? d->nodes[specials].first : 0; c; c = d->nodes[c].next) {
        if (d->nodes[c].key_len == name_len && memcmp(d->nodes[c].key, name, name_len) == 0 &&
            kj_string(d, kj_index(d, kj_get(d, c, "tokens"), 0), s, n))
            return true;
    }
    *s = name;
    *n = name_len;
    return true;
}

/* tokenizer_config.json's bos_token / eos_token: a string, or an object with "content". */
static bool config_token(const kj_doc *d, const char *key, const char **s, size_t *n) {
    uint32_t v = kj_get(d, KJ_ROOT, key);
    if (kj_type_of(d, v) == KJ_OBJECT) v = kj_get(d, v, "content");
    return kj_string(d, v, s, n);
}

static int load_merges(kite_tokenizer *t, const kj_doc *d, uint32_t merges, kite_error *e) {
    int rc = kite_merges_init(&t->merges, d->nodes[merges].len, e);
    if (rc) return rc;
    size_t skipped = 0;
    int32_t rank = 0;
    for (uint32_t m = d->nodes[merges].first; m; m = d->nodes[m].next, rank++) {
        const char *l, *r;
        size_t ll, rl;
        if (kj_type_of(d, m) == KJ_STRING) { /* "left right" */
            const char *s = d->nodes[m].str;
            size_t len = d->nodes[m].len;
            const char *sp = len > 1 ? memchr(s + 1, ' ', len - 1) : NULL;
            if (!sp) return kite_fail(e, KITE_ERR_FORMAT, "tokenizer.json: merge %d has no space between its parts", rank);
            l = s;
            ll = (size_t)(sp - s);
            r = sp + 1;
            rl = len - ll - 1;
        } else if (kj_type_of(d, m) == KJ_ARRAY && d->nodes[m].len == 2 && kj_string(d, kj_index(d, m, 0), &l, &ll) &&
                   kj_string(d, kj_index(d, m, 1), &r, &rl)) { /* ["left", "right"] */
        } else {
            return kite_fail(e, KITE_ERR_FORMAT, "tokenizer.json: merge %d is neither \"a b\" nor [\"a\", \"b\"]", rank);
        }
        rc = kite_merges_add_text(t, l, ll, r, rl, rank, &skipped, e);
        if (rc) return rc;
    }
    if (skipped) kite_log(KITE_LOG_WARN, "tokenizer.json: skipped %zu merges naming texts outside the vocabulary", skipped);
    return KITE_OK;
}

/* An added token whose id lies past the model's embedding rows (model_n_vocab > 0): llama.cpp's converter leaves
 * such tokens out (Gemma 3 1B's tokenizer.json adds <image_soft_token> as id 262144 to a 262144-row model), and so
 * does kite, rather than refusing the folder or producing an id the model has no row for. */
static bool past_model(const kj_doc *d, uint32_t added_token, int32_t model_n_vocab) {
    return model_n_vocab > 0 && d->nodes[kj_get(d, added_token, "id")].ival >= model_n_vocab;
}

static int build(kite_tokenizer **out, const kj_doc *d, const kj_doc *config, hf_options *o, int32_t model_n_vocab, kite_error *e) {
    uint32_t model = kj_get(d, KJ_ROOT, "model");
    if (kj_type_of(d, model) != KJ_OBJECT) return kite_fail(e, KITE_ERR_FORMAT, "tokenizer.json: no \"model\" object");
    uint32_t merges = kj_get(d, model, "merges");
    uint32_t mtype = kj_get(d, model, "type");
    if (mtype ? !kj_string_is(d, mtype, "BPE") : kj_type_of(d, merges) != KJ_ARRAY) {
        char type[48];
        type_name(d, model, type);
        return kite_fail(e, KITE_ERR_UNSUPPORTED, "tokenizer.json: model type \"%s\" is not supported (only BPE)", type);
    }
    if (kj_type_of(d, merges) != KJ_NULL && kj_type_of(d, merges) != KJ_ARRAY)
        return kite_fail(e, KITE_ERR_FORMAT, "tokenizer.json: model.merges is not an array");
    uint32_t vocab = kj_get(d, model, "vocab");
    if (kj_type_of(d, vocab) != KJ_OBJECT) return kite_fail(e, KITE_ERR_FORMAT, "tokenizer.json: model.vocab is not an object");
    const char *affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int k = 0; k < 2; k++) {
        uint32_t v = kj_get(d, model, affixes[k]);
        if (kj_type_of(d, v) != KJ_NULL && !kj_string_is(d, v, ""))
            return kite_fail(e, KITE_ERR_UNSUPPORTED, "tokenizer.json: model.%s is not supported", affixes[k]);
    }

    int rc = parse_normalizer(d, kj_get(d, KJ_ROOT, "normalizer"), o, 0, e);
    if (!rc) rc = parse_pre_tokenizer(d, kj_get(d, KJ_ROOT, "pre_tokenizer"), o, 0, e);
    if (rc) return rc;
    bool byte_fallback = kj_bool(d, kj_get(d, model, "byte_fallback"), false);
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
    uint32_t added = kj_get(d, KJ_ROOT, "added_tokens");
    if (kj_type_of(d, added) != KJ_NULL && kj_type_of(d, added) != KJ_ARRAY)
        return kite_fail(e, KITE_ERR_FORMAT, "tokenizer.json: added_tokens is not an array");
    size_t n_entries = (size_t)d->nodes[vocab].len + (added ? d->nodes[added].len : 0);
    int64_t max_id = -1;
    for (uint32_t c = d->nodes[vocab].first; c; c = d->nodes[c].next) {
        const kj_node *v = &d->nodes[c];
        if (v->type != KJ_NUMBER || !v->is_int || v->ival < 0)
            return kite_fail(e, KITE_ERR_FORMAT, "tokenizer.json: vocab entry \"%.*s\" has no valid id",
                             (int)(v->key_len > 40 ? 40 : v->key_len), v->key);
        if (v->ival > max_id) max_id = v->ival;
    }
    size_t i = 0;
    for (uint32_t a = added ? d->nodes[added].first : 0; a; a = d->nodes[a].next, i++) {
        uint32_t id = kj_get(d, a, "id");
        if (kj_type_of(d, id) != KJ_NUMBER || !d->nodes[id].is_int || d->nodes[id].ival < 0 ||
            kj_type_of(d, kj_get(d, a, "content")) != KJ_STRING)
            return kite_fail(e, KITE_ERR_FORMAT, "tokenizer.json: added_tokens[%zu] needs an id and a content", i);
        if (past_model(d, a, model_n_vocab)) continue;
        if (d->nodes[id].ival > max_id) max_id = d->nodes[id].ival;
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
    for (uint32_t c = d->nodes[vocab].first; c; c = d->nodes[c].next) {
        int32_t id = (int32_t)d->nodes[c].ival;
        texts[id] = (kite_span){d->nodes[c].key, d->nodes[c].key_len};
        t->types[id] = KITE_TOKEN_NORMAL;
    }
    for (uint32_t a = added ? d->nodes[added].first : 0; a; a = d->nodes[a].next) {
        if (past_model(d, a, model_n_vocab)) continue;
        int32_t id = (int32_t)d->nodes[kj_get(d, a, "id")].ival;
        const kj_node *content = &d->nodes[kj_get(d, a, "content")];
        texts[id] = (kite_span){content->str, content->len};
        t->types[id] = kj_bool(d, kj_get(d, a, "special"), false) ? KITE_TOKEN_CONTROL : KITE_TOKEN_USER_DEFINED;
        t->flags[id] = (uint8_t)((kj_bool(d, kj_get(d, a, "lstrip"), false) ? KITE_TOKEN_FLAG_LSTRIP : 0) |
                                 (kj_bool(d, kj_get(d, a, "rstrip"), false) ? KITE_TOKEN_FLAG_RSTRIP : 0));
    }
    rc = kite_tokenizer_set_texts(t, texts, e);
    free(texts);
    if (!rc) rc = kite_vocab_build_map(t, e);
    if (rc) goto fail;

    t->kind = kind;
    t->algo = KITE_ALGO_BPE_RANKS;
    t->ignore_merges = kj_bool(d, kj_get(d, model, "ignore_merges"), false);
    t->byte_fallback = byte_fallback;
    t->fuse_unk = kj_bool(d, kj_get(d, model, "fuse_unk"), false);
    const char *s;
    size_t n;
    if (kj_string(d, kj_get(d, model, "unk_token"), &s, &n)) t->unk = kite_vocab_find(t, s, n);
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
        for (int k = 0; k < o->n_regex && !rc; k++) rc = kite_pretok_add_regex(t, o->regex[k], o->regex_len[k], e);
        if (rc) goto fail;
    }

    if (template_bos(d, kj_get(d, KJ_ROOT, "post_processor"), 0, &s, &n)) t->bos = kite_vocab_find(t, s, n);
    t->add_bos = t->bos >= 0;
    if (config) {
        uint32_t flag = kj_get(config, KJ_ROOT, "add_bos_token");
        if (kj_type_of(config, flag) == KJ_TRUE || kj_type_of(config, flag) == KJ_FALSE) t->add_bos = kj_bool(config, flag, false);
        if (kj_get(config, KJ_ROOT, "bos_token")) t->bos = config_token(config, "bos_token", &s, &n) ? kite_vocab_find(t, s, n) : -1;
        if (kj_get(config, KJ_ROOT, "eos_token")) t->eos = config_token(config, "eos_token", &s, &n) ? kite_vocab_find(t, s, n) : -1;
    }

    if (merges) rc = load_merges(t, d, merges, e);
    if (!rc) rc = kite_tokenizer_finish(t, NULL, 0, NULL, e);
    if (rc) goto fail;
    *out = t;
    return KITE_OK;
fail:
    kite_tokenizer_free(t);
    return rc;
}

int kite_tokenizer_from_hf_json(kite_tokenizer **out, const char *json, size_t json_len, const char *config_json,
                                size_t config_len, kite_error *e) {
    return kite_tokenizer_from_hf_json_for(out, json, json_len, config_json, config_len, 0, e);
}

int kite_tokenizer_from_hf_json_for(kite_tokenizer **out, const char *json, size_t json_len, const char *config_json,
                                    size_t config_len, int32_t model_n_vocab, kite_error *e) {
    if (!out || !json) return kite_fail(e, KITE_ERR_INVALID_ARG, "tokenizer.json: no text or output");
    *out = NULL;
    kj_doc doc, config = {0};
    int rc = kj_parse(&doc, json, json_len, "tokenizer.json", e);
    if (rc) return rc;
    if (kj_type_of(&doc, KJ_ROOT) != KJ_OBJECT) rc = kite_fail(e, KITE_ERR_FORMAT, "tokenizer.json: top level is not an object");
    bool have_config = false;
    if (!rc && config_json && config_len) {
        rc = kj_parse(&config, config_json, config_len, "tokenizer_config.json", e);
        have_config = !rc;
        if (!rc && kj_type_of(&config, KJ_ROOT) != KJ_OBJECT)
            rc = kite_fail(e, KITE_ERR_FORMAT, "tokenizer_config.json: top level is not an object");
    }
    hf_options o = {0};
    if (!rc) rc = build(out, &doc, have_config ? &config : NULL, &o, model_n_vocab, e);
    for (int k = 0; k < o.n_regex; k++) free(o.owned[k]);
    if (have_config) kj_free(&config);
    kj_free(&doc);
    return rc;
}
