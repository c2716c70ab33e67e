/* Pre-tokenizer for byte-level BPE: split patterns run with PCRE2 (UTF and UCP, JIT-compiled when the
 * library supports it). Each regex splits every piece into its matches and the gaps between them, as
 * HF's Split pre-tokenizer with behavior "Isolated" and llama.cpp's regex split do. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tokenize/tokenizer_internal.h"

const char kite_regex_gpt2[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
const char kite_regex_gpt2_hf[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
/* llama.cpp spells the case-insensitive contractions of the original "(?i:'s|'t|...)" with ASCII classes,
 * so "'ſ" (long s) and the Kelvin sign do not count as contractions. */
const char kite_regex_llama3[] =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|"
    " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char kite_regex_qwen2[] =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}|"
    " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

int kite_pretok_add_regex(kite_tokenizer *t, const char *pattern, size_t len, kite_error *e) {
    if (t->n_regex >= KITE_PRETOK_MAX_REGEX)
        return kite_fail(e, KITE_ERR_UNSUPPORTED, "tokenizer: more than %d split patterns", KITE_PRETOK_MAX_REGEX);
    int err;
    PCRE2_SIZE err_off;
    pcre2_code *code = pcre2_compile((PCRE2_SPTR)pattern, len, PCRE2_UTF | PCRE2_UCP, &err, &err_off, NULL);
    if (!code) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(err, msg, sizeof msg);
        return kite_fail(e, KITE_ERR_FORMAT, "tokenizer: split pattern does not compile at offset %zu: %s",
                         (size_t)err_off, (const char *)msg);
    }
    /* JIT is an optimisation only: without it (or if it fails) the interpreter runs the same pattern. */
    (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
    t->regex[t->n_regex++] = code;
    return KITE_OK;
}

void kite_pretok_free(kite_tokenizer *t) {
    for (int i = 0; i < t->n_regex; i++) pcre2_code_free(t->regex[i]);
    t->n_regex = 0;
}

typedef struct split_state {
    const kite_tokenizer *t;
    pcre2_match_data *md[KITE_PRETOK_MAX_REGEX];
    kite_word_fn fn;
    void *ctx;
    kite_error *e;
} split_state;

static int split_level(split_state *st, int level, const char *text, size_t len) {
    if (len == 0) return KITE_OK;
    if (level == st->t->n_regex) return st->fn(st->ctx, text, len);
    const pcre2_code *code = st->t->regex[level];
    pcre2_match_data *md = st->md[level];
    size_t pos = 0, last = 0;
    while (pos < len) {
        /* The text was validated as UTF-8 once; checking it again on every call would be quadratic. */
        int rc = pcre2_match(code, (PCRE2_SPTR)text, len, pos, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
            rc = pcre2_match(code, (PCRE2_SPTR)text, len, pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return kite_fail(st->e, KITE_ERR_TOKENIZER, "tokenizer: split pattern failed at byte %zu: %s", pos,
                             (const char *)msg);
        }
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t start = ov[0], end = ov[1];
        if (start > len || end > len || end < start) break; /* cannot happen; be safe */
        if (end == start) { /* an empty match splits nothing: step over one character */
            if (start >= len) break; /* at the very end ("\\s*(?!\\S)" matches there): no character left */
            pos = start + kite_utf8_len((unsigned char)text[start]);
            continue;
        }
        int r = split_level(st, level + 1, text + last, start - last);
        if (!r) r = split_level(st, level + 1, text + start, end - start);
        if (r) return r;
        last = pos = end;
    }
    return split_level(st, level + 1, text + last, len - last);
}

int kite_pretok_split(const kite_tokenizer *t, const char *text, size_t len, kite_word_fn fn, void *ctx,
                      kite_error *e) {
    split_state st = {t, {0}, fn, ctx, e};
    int rc = KITE_OK;
    for (int i = 0; i < t->n_regex; i++) {
        st.md[i] = pcre2_match_data_create_from_pattern(t->regex[i], NULL);
        if (!st.md[i]) {
            rc = kite_fail(e, KITE_ERR_NOMEM, "tokenizer: out of memory for regex match data");
            break;
        }
    }
    if (!rc) rc = split_level(&st, 0, text, len);
    for (int i = 0; i < t->n_regex; i++) pcre2_match_data_free(st.md[i]);
    return rc;
}
