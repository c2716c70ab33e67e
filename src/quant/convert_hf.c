/* A Hugging Face folder written as a GGUF file the way llama.cpp's convert_hf_to_gguf.py writes it, so
 * that `kite quantize FOLDER OUT` gives what llama-quantize gives for the converter's file:
 *   - the architecture's keys from config.json (as kite's loader read them: src/io/hf_config.c);
 *   - tensors under their GGUF names, matrices in their stored type (F32, F16, BF16), every 1-D tensor as
 *     F32 (the converter's rule); Llama's q/k rows permuted from Hugging Face's rotate-half layout to
 *     the interleaved one llama.cpp's "llama" graph expects; Gemma 3's norm weights stored as w + 1;
 *     Llama-3 RoPE scaling as rope_freqs.weight;
 *   - the tokenizer (gguf-py's vocab classes): a byte-level BPE tokenizer.json as "gpt2" (tokens, token
 *     types, merges, the pre-tokenizer named by its Split pattern), a Llama BPE with byte fallback
 *     (LlamaHfVocab) as "llama" with scores -1000; special token ids, add_bos/add_eos and the chat
 *     template from tokenizer_config.json (SpecialVocab's rules, the common cases).
 * Anything else (another tokenizer kind, an unknown pre-tokenizer) is refused with the reason: a guess
 * would change how llama.cpp tokenizes without a word. */
#include "quant/convert_hf.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fp16.h"
#include "io/gguf.h"
#include "model/source.h"
#include "quant/types.h"

/* GGUF token types (llama.cpp's llama_token_type). */
enum { TOKEN_NORMAL = 1, TOKEN_UNKNOWN = 2, TOKEN_CONTROL = 3, TOKEN_USER_DEFINED = 4, TOKEN_UNUSED = 5, TOKEN_BYTE = 6 };

/* Split patterns of the byte-level tokenizers llama.cpp knows, as tokenizer.json spells them, and the
 * tokenizer.ggml.pre name convert_hf_to_gguf.py gives them (its checksum of the tokenizer's output on a
 * test text picks the same name for these files). */
static const struct {
    const char *pattern;
    const char *pre;
} k_known_pre[] = {
    {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
     "llama-bpe"},
    {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
     "qwen2"},
};

typedef struct hf_vocab {
    const char *model;   /* "gpt2" or "llama" */
    const char *pre;     /* tokenizer.ggml.pre */
    char **tokens;       /* [n] */
    float *scores;       /* [n] ("llama" only) */
    int32_t *types;      /* [n] */
    int32_t n;
    char **merges;       /* [n_merges] "a b" ("gpt2" only) */
    size_t n_merges;
} hf_vocab;

static void vocab_free(hf_vocab *v) {
    if (v->tokens)
        for (int32_t i = 0; i < v->n; i++) free(v->tokens[i]);
    for (size_t i = 0; i < v->n_merges; i++) free(v->merges[i]);
    free(v->tokens), free(v->scores), free(v->types), free(v->merges);
    memset(v, 0, sizeof *v);
}

static const char *json_str(const json_t *o, const char *key) { return json_string_value(json_object_get(o, key)); }

/* A special token entry of tokenizer_config.json: a string, or {"content": ...}. */
static const char *special_content(const json_t *entry) {
    if (json_is_string(entry)) return json_string_value(entry);
    return json_is_object(entry) ? json_str(entry, "content") : NULL;
}

/* The id of an added token by its text (SpecialVocab looks special tokens up among added_tokens). */
static int64_t added_id(const json_t *added, const char *content) {
    size_t i;
    json_t *a;
    if (!content) return -1;
    json_array_foreach(added, i, a) {
        const char *c = json_str(a, "content");
        if (c && !strcmp(c, content) && json_is_integer(json_object_get(a, "id"))) return json_integer_value(json_object_get(a, "id"));
    }
    return -1;
}

static bool looks_special(const char *s) {
    size_t n = strlen(s);
    if (!strcmp(s, "<pad>") || !strcmp(s, "<mask>") || !strcmp(s, "<2mass>") || !strcmp(s, "[@BOS@]")) return true;
    if (n >= 4 && !strncmp(s, "<|", 2) && !strcmp(s + n - 2, "|>")) return true;
    /* the fullwidth bars of DeepSeek's <｜...｜> */
    return n >= 8 && !strncmp(s, "<\xEF\xBD\x9C", 4) && !strcmp(s + n - 4, "\xEF\xBD\x9C>");
}

static bool is_byte_token(const char *s) {
    return strlen(s) == 6 && !strncmp(s, "<0x", 3) && strchr("0123456789ABCDEFabcdef", s[3]) && strchr("0123456789ABCDEFabcdef", s[4]) &&
           s[5] == '>' && s[3] && s[4];
}

/* The Split pattern of a byte-level tokenizer: pre_tokenizer Split, or a Sequence holding one. */
static const char *split_pattern(const json_t *pre) {
    if (!json_is_object(pre)) return NULL;
    const char *type = json_str(pre, "type");
    if (type && !strcmp(type, "Split")) return json_str(json_object_get(pre, "pattern"), "Regex");
    if (type && !strcmp(type, "Sequence")) {
        size_t i;
        json_t *p;
        json_array_foreach(json_object_get(pre, "pretokenizers"), i, p) {
            const char *r = split_pattern(p);
            if (r) return r;
        }
    }
    return NULL;
}

static int set_token(hf_vocab *v, int64_t id, const char *text, int32_t type, const char *path, kite_error *e) {
    if (id < 0 || id >= v->n)
        return kite_fail(e, KITE_ERR_FORMAT, "%s: token id %lld is outside the model's %d embedding rows", path, (long long)id, v->n);
    if (v->tokens[id]) {
        if (!strcmp(v->tokens[id], text)) return KITE_OK;
        return kite_fail(e, KITE_ERR_FORMAT, "%s: id %lld names both '%s' and '%s'", path, (long long)id, v->tokens[id], text);
    }
    if (!(v->tokens[id] = strdup(text))) return kite_fail(e, KITE_ERR_NOMEM, "out of memory");
    v->types[id] = type;
    return KITE_OK;
}

/* Merges as GGUF keeps them, "left right"; the pair form may hold spaces, written as U+0120 (gguf-py's
 * chr(ord(' ') + 256)). */
static char *merge_text(const json_t *m) {
    if (json_is_string(m)) return strdup(json_string_value(m));
    if (!json_is_array(m) || json_array_size(m) != 2 || !json_is_string(json_array_get(m, 0)) || !json_is_string(json_array_get(m, 1)))
        return NULL;
    const char *parts[2] = {json_string_value(json_array_get(m, 0)), json_string_value(json_array_get(m, 1))};
    size_t n = 2 * (strlen(parts[0]) + strlen(parts[1])) + 2;
    char *out = malloc(n), *q = out;
    if (!out) return NULL;
    for (int k = 0; k < 2; k++) {
        if (k) *q++ = ' ';
        for (const char *c = parts[k]; *c; c++) {
            if (*c == ' ') *q++ = (char)0xC4, *q++ = (char)0xA0; /* U+0120 */
            else *q++ = *c;
        }
    }
    *q = 0;
    return out;
}

static int load_vocab(const kite_source *src, const json_t *tok, const json_t *tcfg, int32_t n_rows, const char *path, hf_vocab *v,
                      kite_error *e) {
    const json_t *model = json_object_get(tok, "model");
    const json_t *vocab = json_object_get(model, "vocab"), *merges = json_object_get(model, "merges");
    const json_t *added = json_object_get(tok, "added_tokens");
    const char *mtype = json_str(model, "type");
    if (!mtype || strcmp(mtype, "BPE") || !json_is_object(vocab))
        return kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: tokenizer model '%s' is not supported for conversion (kite converts BPE tokenizers; "
                         "use llama.cpp's convert_hf_to_gguf.py)", path, mtype ? mtype : "?");
    if (added && !json_is_array(added)) return kite_fail(e, KITE_ERR_FORMAT, "%s: added_tokens is not an array", path);
    const bool byte_fallback = json_is_true(json_object_get(model, "byte_fallback"));
    const char *decoder = json_str(json_object_get(tok, "decoder"), "type");
    const bool llama_hf = src->hp.arch == KITE_ARCH_LLAMA && byte_fallback && decoder && !strcmp(decoder, "Sequence");
    v->n = n_rows;
    v->tokens = calloc((size_t)n_rows, sizeof *v->tokens);
    v->types = calloc((size_t)n_rows, sizeof *v->types);
    v->scores = calloc((size_t)n_rows, sizeof *v->scores);
    if (!v->tokens || !v->types || !v->scores) return kite_fail(e, KITE_ERR_NOMEM, "out of memory");
    int st;
    if (llama_hf) {
        /* LlamaHfVocab: base tokens NORMAL (BYTE for <0xNN>, CONTROL for the tokenizer's special tokens),
         * every score -1000; added tokens past the base CONTROL if special, else USER_DEFINED. */
        v->model = "llama";
        v->pre = "default";
        static const char *const special_keys[] = {"bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token"};
        const char *key;
        json_t *val;
        json_object_foreach((json_t *)vocab, key, val) {
            if (!json_is_integer(val)) return kite_fail(e, KITE_ERR_FORMAT, "%s: vocab entry '%s' is not an integer", path, key);
            bool special = false;
            for (size_t k = 0; k < sizeof special_keys / sizeof *special_keys; k++) {
                const char *c = special_content(json_object_get(tcfg, special_keys[k]));
                special = special || (c && !strcmp(c, key));
            }
            size_t i;
            json_t *a;
            json_array_foreach(json_object_get(tcfg, "additional_special_tokens"), i, a) special = special || (special_content(a) && !strcmp(special_content(a), key));
            int32_t type = is_byte_token(key) ? TOKEN_BYTE : special ? TOKEN_CONTROL : TOKEN_NORMAL;
            if ((st = set_token(v, json_integer_value(val), key, type, path, e))) return st;
        }
        size_t i;
        json_t *a;
        json_array_foreach(added, i, a) {
            const char *c = json_str(a, "content");
            json_t *id = json_object_get(a, "id");
            if (!c || !json_is_integer(id)) return kite_fail(e, KITE_ERR_FORMAT, "%s: added_tokens[%zu] lacks id or content", path, i);
            if (json_integer_value(id) < n_rows && json_integer_value(id) >= 0 && v->tokens[json_integer_value(id)]) continue; /* in the base */
            if ((st = set_token(v, json_integer_value(id), c, json_is_true(json_object_get(a, "special")) ? TOKEN_CONTROL : TOKEN_USER_DEFINED, path, e)))
                return st;
        }
        for (int32_t id = 0; id < n_rows; id++) v->scores[id] = -1000.0f;
        for (int32_t id = 0; id < n_rows; id++) {
            if (v->tokens[id]) continue;
            char pad[32];
            snprintf(pad, sizeof pad, "[PAD%d]", (int)id);
            if ((st = set_token(v, id, pad, TOKEN_USER_DEFINED, path, e))) return st;
        }
        return KITE_OK;
    }
    if (byte_fallback)
        return kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: a BPE tokenizer with byte fallback on a %s model is not supported for conversion "
                         "(use llama.cpp's convert_hf_to_gguf.py)", path, src->hp.arch == KITE_ARCH_LLAMA ? "llama" : "non-llama");
    /* byte-level BPE (get_vocab_base): the pre-tokenizer by its pattern */
    const char *pattern = split_pattern(json_object_get(tok, "pre_tokenizer"));
    v->model = "gpt2";
    for (size_t k = 0; k < sizeof k_known_pre / sizeof *k_known_pre; k++)
        if (pattern && !strcmp(pattern, k_known_pre[k].pattern)) v->pre = k_known_pre[k].pre;
    if (!v->pre)
        return kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: the byte-level pre-tokenizer %s is not one kite can name for llama.cpp "
                         "(it knows Llama-3's and Qwen2's; use llama.cpp's convert_hf_to_gguf.py)", path,
                         pattern ? "pattern" : "(no Split pattern)");
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)vocab, key, val) {
        if (!json_is_integer(val)) return kite_fail(e, KITE_ERR_FORMAT, "%s: vocab entry '%s' is not an integer", path, key);
        if ((st = set_token(v, json_integer_value(val), key, TOKEN_NORMAL, path, e))) return st;
    }
    size_t i;
    json_t *a;
    json_array_foreach(added, i, a) {
        const char *c = json_str(a, "content");
        json_t *id = json_object_get(a, "id");
        if (!c || !json_is_integer(id)) return kite_fail(e, KITE_ERR_FORMAT, "%s: added_tokens[%zu] lacks id or content", path, i);
        int32_t type = json_is_true(json_object_get(a, "special")) || looks_special(c) ? TOKEN_CONTROL : TOKEN_USER_DEFINED;
        int64_t tid = json_integer_value(id);
        if (tid >= 0 && tid < n_rows && v->tokens[tid] && !strcmp(v->tokens[tid], c)) { /* the added entry sets the type */
            v->types[tid] = type;
            continue;
        }
        if ((st = set_token(v, tid, c, type, path, e))) return st;
    }
    for (int32_t id = 0; id < n_rows; id++) {
        if (v->tokens[id]) continue;
        char pad[32];
        snprintf(pad, sizeof pad, "[PAD%d]", (int)id);
        if ((st = set_token(v, id, pad, TOKEN_UNUSED, path, e))) return st;
    }
    if (!json_is_array(merges)) return kite_fail(e, KITE_ERR_FORMAT, "%s: model.merges is missing", path);
    v->n_merges = json_array_size(merges);
    v->merges = calloc(v->n_merges ? v->n_merges : 1, sizeof *v->merges);
    if (!v->merges) return kite_fail(e, KITE_ERR_NOMEM, "out of memory");
    json_array_foreach(merges, i, a) {
        if (!(v->merges[i] = merge_text(a))) return kite_fail(e, KITE_ERR_FORMAT, "%s: merges[%zu] is neither a string nor a pair of strings", path, i);
    }
    return KITE_OK;
}

/* SpecialVocab's ids and flags: tokenizer_config.json's special tokens looked up among added_tokens,
 * config.json's ids where none was found; add_bos/add_eos as tokenizer_config.json says, else from a
 * TemplateProcessing post-processor's leading/trailing special token (left out when neither says). */
static void write_special(kite_gguf_writer *w, const kite_source *src, const json_t *tok, const json_t *tcfg) {
    const json_t *added = json_object_get(tok, "added_tokens");
    static const struct { const char *cfg, *gguf; } kinds[] = {
        {"bos_token", "tokenizer.ggml.bos_token_id"}, {"eos_token", "tokenizer.ggml.eos_token_id"},
        {"unk_token", "tokenizer.ggml.unknown_token_id"}, {"sep_token", "tokenizer.ggml.seperator_token_id"},
        {"pad_token", "tokenizer.ggml.padding_token_id"}, {"cls_token", "tokenizer.ggml.cls_token_id"},
        {"mask_token", "tokenizer.ggml.mask_token_id"},
    };
    int64_t ids[7];
    for (size_t k = 0; k < 7; k++) ids[k] = added_id(added, special_content(json_object_get(tcfg, kinds[k].cfg)));
    if (ids[0] < 0 && src->bos_id >= 0) ids[0] = src->bos_id;
    if (ids[1] < 0 && src->eos_id >= 0) ids[1] = src->eos_id;
    /* gguf-py's order: bos, eos, unk, sep, pad, cls, mask */
    for (size_t k = 0; k < 7; k++)
        if (ids[k] >= 0) kite_gguf_w_u32(w, kinds[k].gguf, (uint32_t)ids[k]);
    json_t *add_bos = json_object_get(tcfg, "add_bos_token"), *add_eos = json_object_get(tcfg, "add_eos_token");
    int bos = json_is_boolean(add_bos) ? json_is_true(add_bos) : -1, eos = json_is_boolean(add_eos) ? json_is_true(add_eos) : -1;
    const json_t *post = json_object_get(tok, "post_processor");
    const json_t *procs = json_object_get(post, "processors");
    size_t n_procs = json_is_array(procs) ? json_array_size(procs) : post ? 1 : 0;
    for (size_t p = 0; p < n_procs; p++) {
        const json_t *pr = json_is_array(procs) ? json_array_get(procs, p) : post;
        const char *type = json_str(pr, "type");
        if (!type || strcmp(type, "TemplateProcessing")) continue;
        const json_t *single = json_object_get(pr, "single");
        if (!json_is_array(single) || json_array_size(single) < 2) continue;
        const char *first = json_str(json_object_get(json_array_get(single, 0), "SpecialToken"), "id");
        const char *last = json_str(json_object_get(json_array_get(single, json_array_size(single) - 1), "SpecialToken"), "id");
        const char *bos_text = special_content(json_object_get(tcfg, "bos_token"));
        const char *eos_text = special_content(json_object_get(tcfg, "eos_token"));
        if (first && bos < 0) bos = bos_text && !strcmp(first, bos_text);
        if (last && eos < 0) eos = eos_text && !strcmp(last, eos_text);
    }
    if (bos >= 0) kite_gguf_w_bool(w, "tokenizer.ggml.add_bos_token", bos);
    if (eos >= 0) kite_gguf_w_bool(w, "tokenizer.ggml.add_eos_token", eos);
}

/* The chat template: chat_template.jinja, else tokenizer_config.json's chat_template (a string, or a
 * list of {name, template}: "default" as tokenizer.chat_template, the others under their names). */
static int write_chat_template(kite_gguf_writer *w, const kite_source *src, const json_t *tcfg, kite_error *e) {
    if (src->chat_template_jinja[0]) {
        FILE *f = fopen(src->chat_template_jinja, "rb");
        if (!f) return kite_fail(e, KITE_ERR_IO, "cannot read %s", src->chat_template_jinja);
        char *text = NULL;
        size_t len = 0, cap = 0;
        for (;;) {
            if (len + 4096 + 1 > cap) {
                cap = cap ? 2 * cap : 65536;
                char *grown = realloc(text, cap);
                if (!grown) { free(text); fclose(f); return kite_fail(e, KITE_ERR_NOMEM, "out of memory"); }
                text = grown;
            }
            size_t got = fread(text + len, 1, 4096, f);
            len += got;
            if (got < 4096) break;
        }
        fclose(f);
        text[len] = 0;
        kite_gguf_w_str(w, "tokenizer.chat_template", text);
        free(text);
        return KITE_OK;
    }
    const json_t *t = json_object_get(tcfg, "chat_template");
    if (json_is_string(t)) kite_gguf_w_str(w, "tokenizer.chat_template", json_string_value(t));
    else if (json_is_array(t)) {
        size_t i;
        json_t *item;
        json_array_foreach(t, i, item) {
            const char *name = json_str(item, "name"), *tmpl = json_str(item, "template");
            if (!name || !tmpl) continue;
            char key[256];
            if (!strcmp(name, "default")) snprintf(key, sizeof key, "tokenizer.chat_template");
            else snprintf(key, sizeof key, "tokenizer.chat_template.%s", name);
            kite_gguf_w_str(w, key, tmpl);
        }
    }
    return KITE_OK;
}

static const char *arch_name(kite_arch a) {
    switch (a) {
    case KITE_ARCH_LLAMA: return "llama";
    case KITE_ARCH_QWEN2: return "qwen2";
    case KITE_ARCH_QWEN3: return "qwen3";
    case KITE_ARCH_GEMMA3: return "gemma3";
    default: return NULL;
    }
}

static void write_hparams(kite_gguf_writer *w, const kite_hparams *hp, const char *arch) {
    char key[128];
#define KEY(suffix) (snprintf(key, sizeof key, "%s.%s", arch, suffix), key)
    kite_gguf_w_u32(w, KEY("context_length"), (uint32_t)hp->n_ctx_train);
    kite_gguf_w_u32(w, KEY("embedding_length"), (uint32_t)hp->dim);
    kite_gguf_w_u32(w, KEY("block_count"), (uint32_t)hp->n_layers);
    kite_gguf_w_u32(w, KEY("feed_forward_length"), (uint32_t)hp->ffn_dim);
    kite_gguf_w_u32(w, KEY("attention.head_count"), (uint32_t)hp->n_heads);
    kite_gguf_w_u32(w, KEY("attention.head_count_kv"), (uint32_t)hp->n_kv_heads);
    kite_gguf_w_f32(w, KEY("rope.freq_base"), hp->rope_theta);
    kite_gguf_w_f32(w, KEY("attention.layer_norm_rms_epsilon"), hp->rms_eps);
    if (hp->head_dim != hp->dim / hp->n_heads || hp->arch == KITE_ARCH_GEMMA3 || hp->arch == KITE_ARCH_QWEN3) {
        kite_gguf_w_u32(w, KEY("attention.key_length"), (uint32_t)hp->head_dim);
        kite_gguf_w_u32(w, KEY("attention.value_length"), (uint32_t)hp->head_dim);
    }
    if (hp->arch == KITE_ARCH_LLAMA) {
        kite_gguf_w_u32(w, KEY("vocab_size"), (uint32_t)hp->n_vocab);
        kite_gguf_w_u32(w, KEY("rope.dimension_count"), (uint32_t)hp->head_dim);
    }
    if (hp->rope_scaling == KITE_ROPE_SCALING_LINEAR) {
        kite_gguf_w_str(w, KEY("rope.scaling.type"), "linear");
        kite_gguf_w_f32(w, KEY("rope.scaling.factor"), hp->rope_factor);
    }
    if (hp->arch == KITE_ARCH_GEMMA3) {
        if (hp->sliding_window > 0) {
            kite_gguf_w_u32(w, KEY("attention.sliding_window"), (uint32_t)hp->sliding_window);
            if (hp->swa_period != 6) kite_gguf_w_u32(w, KEY("attention.sliding_window_pattern"), (uint32_t)hp->swa_period);
            kite_gguf_w_f32(w, KEY("rope.freq_base_swa"), hp->rope_theta_local);
        }
        if (hp->final_logit_softcap > 0.0f) kite_gguf_w_f32(w, KEY("final_logit_softcapping"), hp->final_logit_softcap);
    }
#undef KEY
}

/* Convert_hf_to_gguf.py's Llama-3 RoPE factors (per rotated pair: 1 for short wavelengths, factor for
 * long ones, a blend between), from float32 base frequencies as torch computes them. */
static void llama3_rope_factors(const kite_hparams *hp, float *factors) {
    int32_t half = hp->head_dim / 2;
    double low_wavelen = hp->rope_orig_ctx / (double)hp->rope_low_freq_factor;
    double high_wavelen = hp->rope_orig_ctx / (double)hp->rope_high_freq_factor;
    for (int32_t i = 0; i < half; i++) {
        float freq = 1.0f / powf(hp->rope_theta, (float)(2 * i) / (float)hp->head_dim);
        double wavelen = 2.0 * M_PI / (double)freq;
        if (wavelen < high_wavelen) factors[i] = 1.0f;
        else if (wavelen > low_wavelen) factors[i] = hp->rope_factor;
        else {
            double smooth = (hp->rope_orig_ctx / wavelen - hp->rope_low_freq_factor) /
                            (double)(hp->rope_high_freq_factor - hp->rope_low_freq_factor);
            factors[i] = (float)(1.0 / ((1.0 - smooth) / hp->rope_factor + smooth));
        }
    }
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

/* Which q/k rows to permute (Llama: from rotate-half to interleaved pairs), with their head counts. */
static int32_t permute_heads(const kite_hparams *hp, const char *name) {
    if (hp->arch != KITE_ARCH_LLAMA || strncmp(name, "blk.", 4)) return 0;
    if (ends_with(name, ".attn_q.weight") || ends_with(name, ".attn_q.bias")) return hp->n_heads;
    if (ends_with(name, ".attn_k.weight") || ends_with(name, ".attn_k.bias")) return hp->n_kv_heads;
    return 0;
}

/* One tensor as the converter writes it: 1-D tensors F32 (Gemma 3's norms + 1), matrices in their type,
 * rows permuted where asked. The writer copies the data. */
static int write_tensor(kite_gguf_writer *w, const kite_hparams *hp, const kite_tensor *t, kite_error *e) {
    const kite_type_traits *tr = kite_type_get(t->type);
    if (t->type != KITE_TYPE_F32 && t->type != KITE_TYPE_F16 && t->type != KITE_TYPE_BF16)
        return kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: stored as %s; kite converts F32, F16 and BF16 folders", t->name, tr ? tr->name : "?");
    int64_t rows = t->n_dims > 1 ? t->ne[1] : 1, cols = t->ne[0];
    for (uint32_t d = 2; d < t->n_dims; d++) rows *= t->ne[d];
    const bool one_d = t->n_dims == 1;
    const size_t elem = one_d ? 4 : kite_type_row_bytes(t->type, 1);
    const size_t row_bytes = elem * (size_t)cols;
    unsigned char *buf = malloc(row_bytes * (size_t)rows);
    if (!buf) return kite_fail(e, KITE_ERR_NOMEM, "out of memory converting %s", t->name);
    if (one_d) {
        tr->to_float(t->data, (float *)buf, cols);
        if (hp->arch == KITE_ARCH_GEMMA3 && ends_with(t->name, "norm.weight"))
            for (int64_t i = 0; i < cols; i++) ((float *)buf)[i] += 1.0f;
    } else {
        memcpy(buf, t->data, row_bytes * (size_t)rows);
    }
    int32_t heads = permute_heads(hp, t->name);
    if (heads > 0) {
        /* within each head, row 2i + s comes from row s * half + i */
        int64_t n_rows = one_d ? cols : rows;
        size_t unit = one_d ? 4 : row_bytes;
        int64_t hd = n_rows / heads, half = hd / 2;
        unsigned char *out = malloc(unit * (size_t)n_rows);
        if (!out) { free(buf); return kite_fail(e, KITE_ERR_NOMEM, "out of memory converting %s", t->name); }
        for (int64_t h = 0; h < heads; h++)
            for (int64_t i = 0; i < half; i++)
                for (int64_t s = 0; s < 2; s++)
                    memcpy(out + (size_t)(h * hd + 2 * i + s) * unit, buf + (size_t)(h * hd + s * half + i) * unit, unit);
        free(buf);
        buf = out;
    }
    kite_gguf_w_tensor(w, t->name, one_d ? KITE_TYPE_F32 : t->type, t->n_dims, t->ne, buf, row_bytes * (size_t)rows);
    free(buf);
    return KITE_OK;
}

int kite_convert_hf_to_gguf(const char *folder, const char *gguf_path, kite_error *e) {
    kite_source src;
    int st = kite_source_open_hf(&src, folder, e);
    if (st) return st;
    json_t *tok = NULL, *tcfg = NULL;
    hf_vocab v = {0};
    kite_gguf_writer *w = NULL;
    const kite_hparams *hp = &src.hp;
    const char *arch = arch_name(hp->arch);
    if (!arch) { st = kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: kite converts llama, qwen2, qwen3 and gemma3 folders", folder); goto done; }
    if (!src.tokenizer_json[0]) { st = kite_fail(e, KITE_ERR_FORMAT, "%s: no tokenizer.json (the GGUF file needs the tokenizer)", folder); goto done; }
    json_error_t jerr;
    if (!(tok = json_load_file(src.tokenizer_json, 0, &jerr))) {
        st = kite_fail(e, KITE_ERR_FORMAT, "%s: %s (line %d)", src.tokenizer_json, jerr.text, jerr.line);
        goto done;
    }
    /* JSON_DECODE_INT_AS_REAL: model_max_length is often 1e30 written as an integer; only strings and
     * booleans are read from this file */
    if (src.tokenizer_config_json[0] && !(tcfg = json_load_file(src.tokenizer_config_json, JSON_DECODE_INT_AS_REAL, &jerr))) {
        st = kite_fail(e, KITE_ERR_FORMAT, "%s: %s (line %d)", src.tokenizer_config_json, jerr.text, jerr.line);
        goto done;
    }
    if (!tcfg && !(tcfg = json_object())) { st = kite_fail(e, KITE_ERR_NOMEM, "out of memory"); goto done; }
    if ((st = load_vocab(&src, tok, tcfg, hp->n_vocab, src.tokenizer_json, &v, e))) goto done;
    if (!(w = kite_gguf_writer_new())) { st = kite_fail(e, KITE_ERR_NOMEM, "out of memory"); goto done; }
    /* general.* as the converter writes the essentials (the model card's fields are not read) */
    kite_gguf_w_str(w, "general.architecture", arch);
    kite_gguf_w_str(w, "general.type", "model");
    /* general.name: the folder's name (the converter takes the model card's) */
    char name[256];
    snprintf(name, sizeof name, "%s", folder);
    for (size_t n = strlen(name); n > 1 && name[n - 1] == '/'; n--) name[n - 1] = 0;
    const char *slash = strrchr(name, '/');
    if (slash && slash[1]) memmove(name, slash + 1, strlen(slash + 1) + 1);
    kite_gguf_w_str(w, "general.name", name);
    write_hparams(w, hp, arch);
    bool any_16 = false;
    for (int32_t i = 0; i < src.n_tensors; i++) any_16 = any_16 || (src.tensors[i].n_dims > 1 && src.tensors[i].type != KITE_TYPE_F32);
    kite_gguf_w_u32(w, "general.file_type", any_16 ? 1u : 0u); /* MOSTLY_F16 or ALL_F32 (kite quantize rewrites it) */
    kite_gguf_w_str(w, "tokenizer.ggml.model", v.model);
    kite_gguf_w_str(w, "tokenizer.ggml.pre", v.pre);
    kite_gguf_w_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v.tokens, (uint64_t)v.n);
    if (!strcmp(v.model, "llama")) kite_gguf_w_arr_f32(w, "tokenizer.ggml.scores", v.scores, (uint64_t)v.n);
    kite_gguf_w_arr_i32(w, "tokenizer.ggml.token_type", v.types, (uint64_t)v.n);
    if (v.merges) kite_gguf_w_arr_str(w, "tokenizer.ggml.merges", (const char *const *)v.merges, v.n_merges);
    write_special(w, &src, tok, tcfg);
    json_t *prefix = json_object_get(tcfg, "add_prefix_space"); /* LlamaModel.set_vocab passes it on */
    if (hp->arch == KITE_ARCH_LLAMA && json_is_boolean(prefix)) kite_gguf_w_bool(w, "tokenizer.ggml.add_space_prefix", json_is_true(prefix));
    if ((st = write_chat_template(w, &src, tcfg, e))) goto done;
    for (int32_t i = 0; i < src.n_tensors && !st; i++) st = write_tensor(w, hp, &src.tensors[i], e);
    if (!st && hp->rope_scaling == KITE_ROPE_SCALING_LLAMA3) {
        float factors[2048];
        int64_t ne[1] = {hp->head_dim / 2};
        if (ne[0] > 2048) st = kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: head size %d too large", folder, hp->head_dim);
        else {
            llama3_rope_factors(hp, factors);
            kite_gguf_w_tensor(w, "rope_freqs.weight", KITE_TYPE_F32, 1, ne, factors, (uint64_t)ne[0] * sizeof(float));
        }
    }
    if (!st) st = kite_gguf_writer_save(w, gguf_path, e);
done:
    kite_gguf_writer_free(w);
    vocab_free(&v);
    json_decref(tok);
    json_decref(tcfg);
    kite_source_close(&src);
    return st;
}
