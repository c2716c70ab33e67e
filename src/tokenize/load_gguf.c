/* Tokenizer from GGUF metadata (tokenizer.ggml.*), following llama.cpp's llama_vocab::load. */
#include <stdlib.h>
#include <string.h>

#include "tokenize/tokenizer_internal.h"

static bool str_is(kite_gguf_str s, const char *lit) {
    size_t n = strlen(lit);
    return s.len == n && memcmp(s.ptr, lit, n) == 0;
}

/* Reads an optional token id key; ids outside the vocabulary keep the default, as llama.cpp does. */
static int32_t read_id(const kite_gguf *g, const char *key, int32_t n_vocab, int32_t fallback) {
    int64_t v;
    if (!kite_gguf_get_i64(g, key, &v)) return fallback;
    if (v < 0 || v >= n_vocab) {
        kite_log(KITE_LOG_WARN, "gguf: %s = %lld is outside the vocabulary; using %d", key, (long long)v, fallback);
        return fallback;
    }
    return (int32_t)v;
}

typedef struct pre_entry {
    const char *name;
    const char *regex;
    bool ignore_merges;
    bool add_bos;
} pre_entry;

static const pre_entry k_pre[] = {
    {"llama-bpe", kite_regex_llama3, true, true},
    {"llama3", kite_regex_llama3, true, true},
    {"llama-v3", kite_regex_llama3, true, true},
    {"qwen2", kite_regex_qwen2, false, false},
    {"deepseek-r1-qwen", kite_regex_qwen2, false, false},
    {"gpt-2", kite_regex_gpt2, false, false},
    {"default", kite_regex_gpt2, false, false},
};

static int load_merges(kite_tokenizer *t, const kite_gguf *g, kite_error *e) {
    const char *key = "tokenizer.ggml.merges";
    kite_gguf_vtype ty;
    uint64_t n;
    if (!kite_gguf_get_arr(g, key, &ty, &n))
        return kite_fail(e, KITE_ERR_FORMAT, "gguf: %s is missing (needed by a \"gpt2\" tokenizer)", key);
    if (ty != KITE_GGUF_STRING) return kite_fail(e, KITE_ERR_FORMAT, "gguf: %s is not an array of strings", key);
    if (n > INT32_MAX) return kite_fail(e, KITE_ERR_FORMAT, "gguf: %s has %llu entries, too many", key,
                                        (unsigned long long)n);
    int rc = kite_merges_init(&t->merges, (size_t)n, e);
    if (rc) return rc;
    size_t skipped = 0;
    for (uint64_t i = 0; i < n; i++) {
        kite_gguf_str s;
        if (!kite_gguf_arr_str(g, key, i, &s)) return kite_fail(e, KITE_ERR_FORMAT, "gguf: %s[%llu] unreadable", key,
                                                                  (unsigned long long)i);
        /* "left right", split at the first space after the first byte (a merge may start with a space) */
        const char *sp = s.len > 1 ? memchr(s.ptr + 1, ' ', (size_t)s.len - 1) : NULL;
        if (!sp) {
            skipped++;
            continue;
        }
        size_t left_len = (size_t)(sp - s.ptr);
        rc = kite_merges_add_text(t, s.ptr, left_len, sp + 1, (size_t)s.len - left_len - 1, (int32_t)i, &skipped, e);
        if (rc) return rc;
    }
    if (skipped) kite_log(KITE_LOG_DEBUG, "gguf: skipped %zu merges naming texts outside the vocabulary", skipped);
    return KITE_OK;
}

int kite_tokenizer_from_gguf(kite_tokenizer **out, const kite_gguf *g, kite_error *e) {
    if (!out || !g) return kite_fail(e, KITE_ERR_INVALID_ARG, "gguf tokenizer: no file or output");
    *out = NULL;
    kite_gguf_str model;
    if (!kite_gguf_get_str(g, "tokenizer.ggml.model", &model))
        return kite_fail(e, KITE_ERR_FORMAT, "gguf: tokenizer.ggml.model is missing");
    kite_tokenizer_kind kind;
    if (str_is(model, "llama")) kind = KITE_TOKENIZER_SPM;
    else if (str_is(model, "gpt2")) kind = KITE_TOKENIZER_BPE;
    else
        return kite_fail(e, KITE_ERR_UNSUPPORTED, "gguf: tokenizer.ggml.model \"%.*s\" is not supported (only \"llama\" and \"gpt2\")",
                         (int)(model.len > 64 ? 64 : model.len), model.ptr);

    const pre_entry *pre = NULL;
    if (kind == KITE_TOKENIZER_BPE) {
        kite_gguf_str pre_name = {"default", 7};
        kite_gguf_get_str(g, "tokenizer.ggml.pre", &pre_name);
        for (size_t k = 0; k < sizeof k_pre / sizeof k_pre[0] && !pre; k++)
            if (str_is(pre_name, k_pre[k].name)) pre = &k_pre[k];
        if (!pre)
            return kite_fail(e, KITE_ERR_UNSUPPORTED,
                             "gguf: tokenizer.ggml.pre \"%.*s\" is not supported (known: llama-bpe, llama3, qwen2, gpt-2, default)",
                             (int)(pre_name.len > 64 ? 64 : pre_name.len), pre_name.ptr);
    }

    const char *tokens_key = "tokenizer.ggml.tokens";
    kite_gguf_vtype ty;
    uint64_t n;
    if (!kite_gguf_get_arr(g, tokens_key, &ty, &n)) return kite_fail(e, KITE_ERR_FORMAT, "gguf: %s is missing", tokens_key);
    if (ty != KITE_GGUF_STRING) return kite_fail(e, KITE_ERR_FORMAT, "gguf: %s is not an array of strings", tokens_key);
    if (n == 0 || n > INT32_MAX)
        return kite_fail(e, KITE_ERR_FORMAT, "gguf: %s has %llu entries", tokens_key, (unsigned long long)n);
    int32_t n_vocab = (int32_t)n;

    bool has_scores = false, has_types = false;
    uint64_t m;
    if (kite_gguf_get_arr(g, "tokenizer.ggml.scores", &ty, &m)) {
        if (m != n || (ty != KITE_GGUF_FLOAT32 && ty != KITE_GGUF_FLOAT64))
            return kite_fail(e, KITE_ERR_FORMAT, "gguf: tokenizer.ggml.scores has %llu entries of type %d, need %llu floats",
                             (unsigned long long)m, (int)ty, (unsigned long long)n);
        has_scores = true;
    }
    if (kite_gguf_get_arr(g, "tokenizer.ggml.token_type", &ty, &m)) {
        if (m != n || ty == KITE_GGUF_STRING || ty == KITE_GGUF_ARRAY || ty == KITE_GGUF_BOOL || ty == KITE_GGUF_FLOAT32 ||
            ty == KITE_GGUF_FLOAT64)
            return kite_fail(e, KITE_ERR_FORMAT, "gguf: tokenizer.ggml.token_type has %llu entries of type %d, need %llu integers",
                             (unsigned long long)m, (int)ty, (unsigned long long)n);
        has_types = true;
    }

    kite_tokenizer *t;
    int rc = kite_tokenizer_alloc(&t, n_vocab, e);
    if (rc) return rc;
    kite_span *texts = malloc((size_t)n_vocab * sizeof *texts);
    if (!texts) {
        kite_tokenizer_free(t);
        return kite_fail(e, KITE_ERR_NOMEM, "gguf: out of memory for %d tokens", n_vocab);
    }
    for (int32_t i = 0; i < n_vocab && !rc; i++) {
        kite_gguf_str s;
        if (!kite_gguf_arr_str(g, tokens_key, (uint64_t)i, &s) || s.len > UINT32_MAX) {
            rc = kite_fail(e, KITE_ERR_FORMAT, "gguf: %s[%d] unreadable", tokens_key, i);
            break;
        }
        texts[i] = (kite_span){s.ptr, (size_t)s.len};
        if (has_scores && !kite_gguf_arr_f32(g, "tokenizer.ggml.scores", (uint64_t)i, &t->scores[i]))
            rc = kite_fail(e, KITE_ERR_FORMAT, "gguf: tokenizer.ggml.scores[%d] unreadable", i);
        if (has_scores && t->scores[i] != t->scores[i])
            rc = kite_fail(e, KITE_ERR_FORMAT, "gguf: tokenizer.ggml.scores[%d] is NaN", i);
        int64_t tt;
        if (has_types) {
            if (!kite_gguf_arr_i64(g, "tokenizer.ggml.token_type", (uint64_t)i, &tt))
                rc = kite_fail(e, KITE_ERR_FORMAT, "gguf: tokenizer.ggml.token_type[%d] unreadable", i);
            else
                t->types[i] = tt >= KITE_TOKEN_NORMAL && tt <= KITE_TOKEN_BYTE ? (uint8_t)tt : KITE_TOKEN_UNDEFINED;
        }
    }
    if (!rc) rc = kite_tokenizer_set_texts(t, texts, e);
    free(texts);
    if (rc) goto fail;

    t->kind = kind;
    bool flag;
    if (kind == KITE_TOKENIZER_SPM) {
        t->algo = KITE_ALGO_SPM_SCORES;
        t->escape_spaces = true;
        t->space_prefix = KITE_PREFIX_ALWAYS;
        if (kite_gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &flag) && !flag) t->space_prefix = KITE_PREFIX_NONE;
        t->add_bos = true;
        t->bos = n_vocab > 1 ? 1 : -1;
        t->eos = n_vocab > 2 ? 2 : -1;
        t->unk = 0;
    } else {
        t->algo = KITE_ALGO_BPE_RANKS;
        t->ignore_merges = pre->ignore_merges;
        t->add_bos = pre->add_bos;
        rc = kite_pretok_add_regex(t, pre->regex, strlen(pre->regex), e);
        if (rc) goto fail;
    }
    t->bos = read_id(g, "tokenizer.ggml.bos_token_id", n_vocab, t->bos);
    t->eos = read_id(g, "tokenizer.ggml.eos_token_id", n_vocab, t->eos);
    t->unk = read_id(g, "tokenizer.ggml.unknown_token_id", n_vocab, t->unk);
    if (kite_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &flag)) t->add_bos = flag;
    int32_t eog_extra[2] = {read_id(g, "tokenizer.ggml.eot_token_id", n_vocab, -1),
                            read_id(g, "tokenizer.ggml.eom_token_id", n_vocab, -1)};
    static const char *const fim_keys[6] = {"tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.fim_suf_token_id",
                                            "tokenizer.ggml.fim_mid_token_id", "tokenizer.ggml.fim_pad_token_id",
                                            "tokenizer.ggml.fim_rep_token_id", "tokenizer.ggml.fim_sep_token_id"};
    int32_t fim_ids[6];
    for (int f = 0; f < 6; f++) fim_ids[f] = read_id(g, fim_keys[f], n_vocab, -1);
    /* deprecated spellings of the first three */
    static const char *const old_keys[3] = {"tokenizer.ggml.prefix_token_id", "tokenizer.ggml.suffix_token_id",
                                            "tokenizer.ggml.middle_token_id"};
    for (int f = 0; f < 3; f++) fim_ids[f] = read_id(g, old_keys[f], n_vocab, fim_ids[f]);
    rc = kite_vocab_build_map(t, e);
    if (!rc && kind == KITE_TOKENIZER_BPE) rc = load_merges(t, g, e);
    if (!rc) rc = kite_tokenizer_finish(t, eog_extra, 2, fim_ids, e);
    if (rc) goto fail;
    *out = t;
    return KITE_OK;
fail:
    kite_tokenizer_free(t);
    return rc;
}
