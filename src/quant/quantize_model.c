/* kite_quantize: a GGUF model file to a quantized GGUF file, tensor by tensor, with llama.cpp's recipes
 * (llama-quant.cpp: which tensors are quantized, which type each gets, and the fallbacks), so that kite's
 * output equals llama-quantize's tensor for tensor.
 *
 * Order. Tensors are visited and written in llama.cpp's order: by layer number ("blk.N." names; other
 * names count as layer -1 and come first), then by name. The per-layer bumps below count attn_v and
 * ffn_down tensors in that order, as llama.cpp does.
 *
 * Which tensors are quantized: those of 2 or more dimensions (trailing dimensions of 1 do not count)
 * whose name ends in "weight", except norms ("_norm.weight"), MoE router weights (ffn_gate_inp),
 * position embeddings and token types, and a list of small special tensors (below). Everything else is
 * copied unchanged, in its source type.
 *
 * Fallback when a row (ne[0]) is not a multiple of the chosen type's block: Q2_K and Q3_K become Q4_0,
 * Q4_K becomes Q5_0, Q5_K becomes Q5_1, Q6_K becomes Q8_0; a 32-element type stays; and if the row does
 * not fit that either (not a multiple of 32), F16.
 *
 * Sources: GGUF files; a llama2.c checkpoint is first converted to an F32 GGUF (below). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/threadpool.h"
#include "io/gguf.h"
#include "io/mmap.h"
#include "model/source.h"
#include "quant/convert_hf.h"
#include "quant/imatrix_parse.h"
#include "quant/quantize.h"
#include "quant/quantize_model.h"
#include "quant/trellis.h"
#include "quant/types.h"

bool (*kite_quantize_write_hook)(const char *tmp_path) = NULL;

/* llama_ftype ids. */
enum {
    FT_F32 = 0, FT_F16 = 1, FT_Q4_0 = 2, FT_Q4_1 = 3, FT_Q8_0 = 7, FT_Q5_0 = 8, FT_Q5_1 = 9, FT_Q2_K = 10,
    FT_Q3_K_S = 11, FT_Q3_K_M = 12, FT_Q3_K_L = 13, FT_Q4_K_S = 14, FT_Q4_K_M = 15, FT_Q5_K_S = 16,
    FT_Q5_K_M = 17, FT_Q6_K = 18, FT_BF16 = 32,
    /* kite's own (quant/trellis.h); not llama_ftype values: "KT" in the high 16 bits, clear of llama.cpp's */
    FT_KT2 = 0x4B540034, FT_KT2_5 = 0x4B540035, FT_KT3 = 0x4B540036, FT_KT2_5_M = 0x4B540135,
};

static const kite_ftype_info ftypes[] = {
    {"Q4_0", FT_Q4_0, KITE_TYPE_Q4_0},       {"Q4_1", FT_Q4_1, KITE_TYPE_Q4_1},
    {"Q5_0", FT_Q5_0, KITE_TYPE_Q5_0},       {"Q5_1", FT_Q5_1, KITE_TYPE_Q5_1},
    {"Q8_0", FT_Q8_0, KITE_TYPE_Q8_0},       {"Q2_K", FT_Q2_K, KITE_TYPE_Q2_K},
    {"Q3_K_S", FT_Q3_K_S, KITE_TYPE_Q3_K},   {"Q3_K_M", FT_Q3_K_M, KITE_TYPE_Q3_K},
    {"Q3_K_L", FT_Q3_K_L, KITE_TYPE_Q3_K},   {"Q4_K_S", FT_Q4_K_S, KITE_TYPE_Q4_K},
    {"Q4_K_M", FT_Q4_K_M, KITE_TYPE_Q4_K},   {"Q5_K_S", FT_Q5_K_S, KITE_TYPE_Q5_K},
    {"Q5_K_M", FT_Q5_K_M, KITE_TYPE_Q5_K},   {"Q6_K", FT_Q6_K, KITE_TYPE_Q6_K},
    {"F16", FT_F16, KITE_TYPE_F16},          {"BF16", FT_BF16, KITE_TYPE_BF16},
    {"F32", FT_F32, KITE_TYPE_F32},
    {"KT2", FT_KT2, KITE_TYPE_KT2},          {"KT2_5", FT_KT2_5, KITE_TYPE_KT2_5},
    {"KT3", FT_KT3, KITE_TYPE_KT3},          {"KT2_5_M", FT_KT2_5_M, KITE_TYPE_KT2},
};
#define N_FTYPES (sizeof ftypes / sizeof ftypes[0])

static const char *const type_names[] = {"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K_S", "Q3_K_M", "Q3_K_L",
                                         "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K", "F16", "BF16", "F32",
                                         "Q3_K", "Q4_K", "Q5_K", "KT2", "KT2_5", "KT3", "KT2_5_M", NULL};

const char *const *kite_quantize_type_names(void) { return type_names; }

const kite_ftype_info *kite_ftype_find(const char *name) {
    if (!name) return NULL;
    static const struct { const char *alias, *name; } aliases[] = {{"Q3_K", "Q3_K_M"}, {"Q4_K", "Q4_K_M"}, {"Q5_K", "Q5_K_M"}};
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (strcasecmp(name, aliases[i].alias) == 0) name = aliases[i].name;
    for (size_t i = 0; i < N_FTYPES; i++)
        if (strcasecmp(name, ftypes[i].name) == 0) return &ftypes[i];
    return NULL;
}

kite_quantize_params kite_quantize_default_params(void) {
    return (kite_quantize_params){.type = "Q8_0", .imatrix_path = NULL, .n_threads = 0, .allow_requantize = false,
                                  .progress = NULL, .progress_user_data = NULL, .tokenizer_path = NULL};
}

/* ---- the recipe (llama-quant.cpp's tensor_get_category, llama_tensor_get_type_impl) ------------- */

typedef enum category {
    CAT_OTHER, CAT_OUTPUT, CAT_TOKEN_EMBD, CAT_ATTN_QKV, CAT_ATTN_KV_B, CAT_ATTN_V, CAT_ATTN_K, CAT_ATTN_Q,
    CAT_ATTN_OUTPUT, CAT_FFN_UP, CAT_FFN_GATE, CAT_FFN_DOWN,
} category;

static category tensor_category(const char *name) {
    if (strcmp(name, "output.weight") == 0) return CAT_OUTPUT;
    if (strcmp(name, "token_embd.weight") == 0 || strcmp(name, "per_layer_token_embd.weight") == 0) return CAT_TOKEN_EMBD;
    static const struct { const char *part; category cat; } parts[] = {
        {"attn_qkv.weight", CAT_ATTN_QKV}, {"attn_kv_b.weight", CAT_ATTN_KV_B}, {"attn_v.weight", CAT_ATTN_V},
        {"attn_k.weight", CAT_ATTN_K},     {"attn_q.weight", CAT_ATTN_Q},       {"attn_output.weight", CAT_ATTN_OUTPUT},
        {"ffn_up", CAT_FFN_UP},            {"ffn_gate", CAT_FFN_GATE},          {"ffn_down", CAT_FFN_DOWN},
    };
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
        if (strstr(name, parts[i].part)) return parts[i].cat;
    return CAT_OTHER;
}

static bool is_attn_v_like(category c) { return c == CAT_ATTN_V || c == CAT_ATTN_QKV || c == CAT_ATTN_KV_B; }

/* Dimensions as ggml counts them: trailing 1s do not count (a [n x 1] tensor is 1-D). */
static int effective_dims(const int64_t ne[4]) {
    int d = 4;
    while (d > 1 && ne[d - 1] == 1) d--;
    return d;
}

/* Names llama.cpp never quantizes, by substring (small or special tensors of various architectures). */
static const char *const never_quantized[] = {
    "_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel", "per_layer_model_proj",
    "ssm_conv1d", "shortconv.conv.weight", "indexer.k_proj.weight", "indexer.q_proj.weight",
    "time_mix_first.weight", "time_mix_w0.weight", "time_mix_w1.weight", "time_mix_w2.weight",
    "time_mix_v0.weight", "time_mix_v1.weight", "time_mix_v2.weight", "time_mix_a0.weight",
    "time_mix_a1.weight", "time_mix_a2.weight", "time_mix_g1.weight", "time_mix_g2.weight",
    "time_mix_decay_w1.weight", "time_mix_decay_w2.weight", "time_mix_lerp_fused.weight", "attn_rel_b.weight",
    ".position_embd", "sam.pos_embd", "sam.neck.", "sam.net_", ".rel_pos", ".patch_embd", ".patch_merger",
    "a.rvq.codebook", "mm.a.code_embd",
};

static bool allows_quantization(const char *name, const int64_t ne[4]) {
    if (effective_dims(ne) < 2) return false;
    size_t len = strlen(name);
    if (len < 6 || strcmp(name + len - 6, "weight") != 0) return false;
    for (size_t i = 0; i < sizeof never_quantized / sizeof never_quantized[0]; i++)
        if (strstr(name, never_quantized[i])) return false;
    return strcmp(name, "position_embd.weight") != 0 && strcmp(name, "token_types.weight") != 0;
}

typedef struct recipe_state {
    int32_t ftype;
    bool falcon, is_70b, has_imatrix, tied_embeddings;
    int64_t n_gqa, n_expert;
    int n_attention_wv, i_attention_wv, n_layers, i_ffn_down, i_ffn_gate, i_ffn_up;
    int n_fallback;
} recipe_state;

static bool use_more_bits(int i_layer, int n_layers) {
    return i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2;
}

/* The layer of a per-layer tensor: from its name in MoE models (experts are not consecutive), else the
 * running counter. Fails for a MoE tensor without a valid "blk.N." prefix. */
static bool layer_of(const recipe_state *s, int counter, const char *name, int *layer, kite_error *e) {
    *layer = counter;
    if (s->n_expert > 1) {
        if (sscanf(name, "blk.%d.", layer) != 1 || *layer < 0 || *layer >= s->n_layers) {
            kite_fail(e, KITE_ERR_FORMAT, "quantize: cannot tell the layer of tensor '%s' (of %d)", name, s->n_layers);
            return false;
        }
    }
    return true;
}

static uint32_t recipe_type(recipe_state *s, uint32_t t, const char *name, const int64_t ne[4], category cat, kite_error *e,
                            bool *ok) {
    const int32_t ft = s->ftype;
    int layer;
    *ok = true;
    if (cat == CAT_OUTPUT || (s->tied_embeddings && cat == CAT_TOKEN_EMBD)) {
        const int64_t block = kite_type_get(t)->block_size;
        if (s->falcon || ne[0] % block != 0) t = KITE_TYPE_Q8_0;
        else if (t != KITE_TYPE_Q8_0) t = KITE_TYPE_Q6_K;
    } else if (cat == CAT_TOKEN_EMBD) {
        /* the IQ, TQ and Q2_0 file types change it; none of kite's do */
    } else if (is_attn_v_like(cat)) {
        if (ft == FT_Q2_K) t = s->n_gqa >= 4 ? KITE_TYPE_Q4_K : KITE_TYPE_Q3_K;
        else if (ft == FT_Q3_K_M) t = s->i_attention_wv < 2 ? KITE_TYPE_Q5_K : KITE_TYPE_Q4_K;
        else if (ft == FT_Q3_K_L) t = KITE_TYPE_Q5_K;
        else if ((ft == FT_Q4_K_M || ft == FT_Q5_K_M) && use_more_bits(s->i_attention_wv, s->n_attention_wv)) t = KITE_TYPE_Q6_K;
        else if (ft == FT_Q4_K_S && s->i_attention_wv < 4) t = KITE_TYPE_Q5_K;
        if (s->is_70b && (t == KITE_TYPE_Q3_K || t == KITE_TYPE_Q4_K)) t = KITE_TYPE_Q5_K;
        if (s->n_expert == 8) t = KITE_TYPE_Q8_0;
        ++s->i_attention_wv;
    } else if (cat == CAT_ATTN_K) {
        if (s->n_expert == 8) t = KITE_TYPE_Q8_0;
    } else if (cat == CAT_FFN_DOWN) {
        if (!(*ok = layer_of(s, s->i_ffn_down, name, &layer, e))) return t;
        const int n = s->n_layers;
        if (ft == FT_Q2_K) t = KITE_TYPE_Q3_K;
        else if (ft == FT_Q3_K_M)
            t = layer < n / 16 ? KITE_TYPE_Q5_K : !s->falcon || use_more_bits(layer, n) ? KITE_TYPE_Q4_K : KITE_TYPE_Q3_K;
        else if (ft == FT_Q3_K_L) t = s->falcon ? KITE_TYPE_Q4_K : KITE_TYPE_Q5_K;
        else if (ft == FT_Q4_K_M) {
            if (s->falcon) t = layer < n / 16 ? KITE_TYPE_Q6_K : use_more_bits(layer, n) ? KITE_TYPE_Q5_K : KITE_TYPE_Q4_K;
            else if (use_more_bits(layer, n)) t = KITE_TYPE_Q6_K;
        } else if (ft == FT_Q5_K_M && use_more_bits(layer, n)) t = KITE_TYPE_Q6_K;
        else if (ft == FT_Q4_K_S && !s->falcon && layer < n / 8) t = KITE_TYPE_Q5_K;
        else if ((ft == FT_Q4_0 || ft == FT_Q5_0) && s->has_imatrix && layer < n / 8)
            t = ft == FT_Q4_0 ? KITE_TYPE_Q4_1 : KITE_TYPE_Q5_1;
        ++s->i_ffn_down;
    } else if (cat == CAT_ATTN_OUTPUT) {
        if (!s->falcon) {
            if (s->n_expert == 8) {
                if (ft == FT_Q2_K || ft == FT_Q3_K_S || ft == FT_Q3_K_M || ft == FT_Q4_K_S || ft == FT_Q4_K_M) t = KITE_TYPE_Q5_K;
            } else {
                if (ft == FT_Q2_K) t = KITE_TYPE_Q3_K;
                else if (ft == FT_Q3_K_M) t = KITE_TYPE_Q4_K;
                else if (ft == FT_Q3_K_L) t = KITE_TYPE_Q5_K;
            }
        } else if (ft == FT_Q3_K_L) {
            t = KITE_TYPE_Q4_K;
        }
    } else if (cat == CAT_ATTN_QKV) {
        /* unreachable: attn_qkv is attn_v-like above, as in llama.cpp */
    } else if (cat == CAT_FFN_GATE) {
        if (!(*ok = layer_of(s, s->i_ffn_gate, name, &layer, e))) return t;
        ++s->i_ffn_gate;
    } else if (cat == CAT_FFN_UP) {
        if (!(*ok = layer_of(s, s->i_ffn_up, name, &layer, e))) return t;
        ++s->i_ffn_up;
    }
    return t;
}

/* The documented fallback for a row length the type's block does not divide. */
static uint32_t fallback_type(recipe_state *s, uint32_t t, int64_t n_cols) {
    const int64_t block = kite_type_get(t)->block_size;
    if (n_cols % block == 0) return t;
    ++s->n_fallback;
    switch (t) {
    case KITE_TYPE_Q2_K: case KITE_TYPE_Q3_K: t = KITE_TYPE_Q4_0; break;
    case KITE_TYPE_Q4_K: t = KITE_TYPE_Q5_0; break;
    case KITE_TYPE_Q5_K: t = KITE_TYPE_Q5_1; break;
    case KITE_TYPE_Q6_K: t = KITE_TYPE_Q8_0; break;
    default: break; /* a 32-element type has no smaller block to fall back to */
    }
    if (n_cols % kite_type_get(t)->block_size != 0) t = KITE_TYPE_F16;
    return t;
}

/* The trellis file types' recipe. Matrices get the file's type (KT2_5_M: KT3 for attention and
 * ffn_down, KT2 for the rest: ~2.5 bits per weight over the matrices of a Llama); the token embeddings,
 * which are read a row at a time and need a row-contiguous type, Q4_K; the output head (and tied
 * embeddings) Q6_K. A matrix the trellis layout does not fit (columns not a multiple of 256, rows not a
 * multiple of 16, or stacked experts) falls back to Q4_K, then by fallback_type's rules (Q5_0, F16). */
static uint32_t trellis_recipe(recipe_state *s, int32_t ft, uint32_t t, const char *name, const int64_t ne[4]) {
    const category cat = tensor_category(name);
    if (cat == CAT_OUTPUT || (s->tied_embeddings && cat == CAT_TOKEN_EMBD)) t = KITE_TYPE_Q6_K;
    else if (cat == CAT_TOKEN_EMBD) t = KITE_TYPE_Q4_K;
    else if (ft == FT_KT2_5_M)
        t = (cat == CAT_ATTN_Q || cat == CAT_ATTN_K || cat == CAT_ATTN_V || cat == CAT_ATTN_QKV || cat == CAT_ATTN_OUTPUT ||
             cat == CAT_FFN_DOWN)
                ? KITE_TYPE_KT3
                : KITE_TYPE_KT2;
    if (kite_is_trellis(t) && (ne[0] % KT_BLOCK != 0 || ne[1] % KT_ROWS != 0 || ne[2] * ne[3] != 1)) {
        ++s->n_fallback;
        t = KITE_TYPE_Q4_K;
    }
    return fallback_type(s, t, ne[0]);
}

static bool is_float_type(uint32_t t) { return t == KITE_TYPE_F32 || t == KITE_TYPE_F16 || t == KITE_TYPE_BF16; }

/* ---- one tensor: dequantize if needed, quantize rows over the pool -------------------------------- */

typedef struct rows_job {
    uint32_t type;
    const float *src;       /* [n_rows][n_per_row] */
    uint8_t *dst;           /* [n_rows] rows of row_bytes */
    int64_t n_rows, n_per_row, rows_per_expert, rows_per_task;
    size_t row_bytes;
    const float *imatrix;   /* NULL or [n_expert][n_per_row] */
} rows_job;

static void quantize_task(void *ctx, int64_t task, int thread) {
    (void)thread;
    const rows_job *j = ctx;
    int64_t r = task * j->rows_per_task, end = r + j->rows_per_task;
    if (end > j->n_rows) end = j->n_rows;
    while (r < end) {
        /* a run of rows inside one expert shares that expert's importance vector */
        const int64_t expert = r / j->rows_per_expert;
        int64_t stop = (expert + 1) * j->rows_per_expert;
        if (stop > end) stop = end;
        const float *qw = j->imatrix ? j->imatrix + expert * j->n_per_row : NULL;
        kite_quantize_rows(j->type, j->src + r * j->n_per_row, j->dst + (size_t)r * j->row_bytes, stop - r, j->n_per_row, qw);
        r = stop;
    }
}

typedef struct sorted_tensor {
    const kite_gguf_tensor *t;
    char name[96];
    int layer;
} sorted_tensor;

static int compare_tensors(const void *a, const void *b) {
    const sorted_tensor *x = a, *y = b;
    if (x->layer != y->layer) return x->layer < y->layer ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int64_t gguf_arch_u32(const kite_gguf *g, const char *arch, const char *suffix, int64_t fallback) {
    char key[160];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    int64_t v;
    return kite_gguf_get_i64(g, key, &v) ? v : fallback;
}

typedef struct quantize_run {
    kite_mapped_file in_map;
    kite_gguf *g;
    kite_imatrix im;
    kite_gguf_writer *w;
    kite_pool *pool;
    sorted_tensor *order;
    float *f32, *means;
    uint8_t *qbuf;
    char *tmp_path;
} quantize_run;

static void run_free(quantize_run *r) {
    kite_gguf_writer_free(r->w);
    kite_gguf_free(r->g);
    kite_unmap_file(&r->in_map);
    kite_imatrix_clear(&r->im);
    kite_pool_free(r->pool);
    free(r->order);
    free(r->f32);
    free(r->means);
    free(r->qbuf);
    if (r->tmp_path) {
        unlink(r->tmp_path); /* only present when the run failed before the rename */
        free(r->tmp_path);
    }
}

static int quantize_gguf(quantize_run *r, const char *in, const char *out, const kite_quantize_params *p,
                         const kite_ftype_info *ft, kite_error *e) {
    kite_status st = kite_map_file(&r->in_map, in, e);
    if (st) return st;
    if (r->in_map.size < 4 || memcmp(r->in_map.data, "GGUF", 4) != 0)
        return kite_fail(e, KITE_ERR_UNSUPPORTED, "quantize: '%s' is neither a GGUF file nor a llama2.c checkpoint (kite quantize reads F32/F16/BF16 GGUF and llama2.c .bin)", in);
    kite_error ge = {0};
    if (kite_gguf_open(&r->g, r->in_map.data, r->in_map.size, &ge)) return kite_fail(e, ge.status, "quantize: '%s': %s", in, ge.msg);
    const kite_gguf *g = r->g;
    if (p->imatrix_path && (st = kite_imatrix_read(&r->im, p->imatrix_path, e))) return st;

    kite_gguf_str arch_s;
    char arch[64] = "llama";
    if (kite_gguf_get_str(g, "general.architecture", &arch_s) && arch_s.len < sizeof arch) {
        memcpy(arch, arch_s.ptr, arch_s.len);
        arch[arch_s.len] = 0;
    }
    recipe_state rs = {.ftype = ft->id, .falcon = strcmp(arch, "falcon") == 0, .has_imatrix = p->imatrix_path != NULL,
                       .tied_embeddings = true};
    const int64_t n_head = gguf_arch_u32(g, arch, "attention.head_count", 0);
    const int64_t n_head_kv = gguf_arch_u32(g, arch, "attention.head_count_kv", n_head);
    rs.n_gqa = n_head_kv > 0 ? n_head / n_head_kv : 0;
    rs.n_expert = gguf_arch_u32(g, arch, "expert_count", 0);
    const int64_t n_layers = gguf_arch_u32(g, arch, "block_count", 0);
    if (n_layers < 0 || n_layers > 100000) return kite_fail(e, KITE_ERR_FORMAT, "quantize: '%s': block_count %lld", in, (long long)n_layers);
    rs.n_layers = (int)n_layers;
    rs.is_70b = strcmp(arch, "llama") == 0 && n_layers == 80 && n_head != n_head_kv;

    /* llama.cpp's order, categories and counters. */
    const int64_t n = kite_gguf_n_tensors(g);
    r->order = calloc((size_t)(n ? n : 1), sizeof *r->order);
    if (!r->order) return kite_fail(e, KITE_ERR_NOMEM, "quantize: out of memory");
    for (int64_t i = 0; i < n; i++) {
        sorted_tensor *s = &r->order[i];
        s->t = kite_gguf_tensor_at(g, i);
        if (s->t->name.len >= sizeof s->name || memchr(s->t->name.ptr, 0, s->t->name.len))
            return kite_fail(e, KITE_ERR_FORMAT, "quantize: '%s': tensor %lld has a bad name", in, (long long)i);
        memcpy(s->name, s->t->name.ptr, s->t->name.len);
        s->layer = -1;
        sscanf(s->name, "blk.%d.", &s->layer);
        category c = tensor_category(s->name);
        if (is_attn_v_like(c)) rs.n_attention_wv++;
        if (c == CAT_OUTPUT) rs.tied_embeddings = false;
    }
    qsort(r->order, (size_t)n, sizeof *r->order, compare_tensors);

    r->w = kite_gguf_writer_new();
    if (!r->w) return kite_fail(e, KITE_ERR_NOMEM, "quantize: out of memory");
    for (int64_t i = 0; i < kite_gguf_n_kv(g); i++) {
        kite_gguf_str k = kite_gguf_key(g, i);
        static const char *const replaced[] = {"general.quantization_version", "general.file_type", "split.no", "split.count",
                                               "split.tensors.count"};
        bool skip = false;
        for (size_t j = 0; j < sizeof replaced / sizeof replaced[0]; j++)
            skip |= k.len == strlen(replaced[j]) && memcmp(k.ptr, replaced[j], k.len) == 0;
        if (!skip) kite_gguf_w_copy_kv(r->w, g, i);
    }
    kite_gguf_w_u32(r->w, "general.quantization_version", 2);
    kite_gguf_w_u32(r->w, "general.file_type", (uint32_t)ft->id);

    int n_threads = p->n_threads > 0 ? p->n_threads : kite_cpu_count();
    if (n_threads > 256) n_threads = 256;
    r->pool = kite_pool_new(n_threads);
    if (!r->pool) return kite_fail(e, KITE_ERR_NOMEM, "quantize: cannot start %d threads", n_threads);

    const bool base_quantized = ft->base_type != KITE_TYPE_F32 && ft->base_type != KITE_TYPE_F16 && ft->base_type != KITE_TYPE_BF16;
    for (int64_t i = 0; i < n; i++) {
        const kite_gguf_tensor *t = r->order[i].t;
        const char *name = r->order[i].name;
        uint32_t type = t->type;
        if (allows_quantization(name, t->ne)) {
            type = ft->base_type;
            if (kite_is_trellis(ft->base_type)) {
                type = trellis_recipe(&rs, ft->id, type, name, t->ne);
            } else if (base_quantized) {
                bool ok;
                type = recipe_type(&rs, type, name, t->ne, tensor_category(name), e, &ok);
                if (!ok) return e ? e->status : KITE_ERR_FORMAT;
                type = fallback_type(&rs, type, t->ne[0]);
            }
        }
        const kite_type_traits *dst_tr = kite_type_get(type);
        /* a trellis matrix reports its type once the plain-or-rotated choice below has been made */
        if (p->progress && (!kite_is_trellis(type) || type == t->type) && !p->progress(p->progress_user_data, i, n, name, dst_tr->name))
            return kite_fail(e, KITE_ERR_CANCELLED, "quantize: cancelled at tensor %lld of %lld (%s)", (long long)i + 1, (long long)n, name);
        if (type == t->type) {
            kite_gguf_w_tensor(r->w, name, type, t->n_dims, t->ne, t->data, t->n_bytes);
            continue;
        }
        if (!is_float_type(t->type) && !p->allow_requantize)
            return kite_fail(e, KITE_ERR_UNSUPPORTED, "quantize: '%s': tensor '%s' is already quantized (%s); requantizing is lossy and disabled without --allow-requantize",
                             in, name, kite_type_get(t->type)->name);
        if (!kite_quantize_type_supported(type))
            return kite_fail(e, KITE_ERR_UNSUPPORTED, "quantize: no quantizer for type %s (tensor '%s')", dst_tr->name, name);
        const int64_t n_per_row = t->ne[0];
        const int64_t n_rows = t->ne[1] * t->ne[2] * t->ne[3];
        const int64_t n_elem = n_per_row * n_rows;
        const size_t row_bytes = kite_type_row_bytes(type, n_per_row);
        if (n_per_row <= 0 || n_rows <= 0 || row_bytes == 0)
            return kite_fail(e, KITE_ERR_FORMAT, "quantize: tensor '%s' has an empty shape", name);
        free(r->f32), free(r->qbuf), free(r->means);
        r->means = NULL;
        r->f32 = malloc((size_t)n_elem * sizeof(float));
        r->qbuf = malloc(row_bytes * (size_t)n_rows);
        if (!r->f32 || !r->qbuf) return kite_fail(e, KITE_ERR_NOMEM, "quantize: out of memory for tensor '%s'", name);
        /* (a trellis source has no row to_float: its rows are interleaved in tiles) */
        if (kite_is_trellis(t->type) ? !kite_kt_dequantize(t->type, t->data, n_rows, n_per_row, r->f32)
                                     : !kite_type_get(t->type)->to_float)
            return kite_fail(e, KITE_ERR_UNSUPPORTED, "quantize: cannot read tensor '%s' of type %s", name,
                             kite_type_get(t->type)->name);
        if (!kite_is_trellis(t->type)) kite_type_get(t->type)->to_float(t->data, r->f32, n_elem);

        const float *imatrix = NULL;
        const kite_imatrix_entry *ie = p->imatrix_path ? kite_imatrix_find(&r->im, name) : NULL;
        if (ie) {
            if (ie->n_cols * ie->n_mat == n_per_row * t->ne[2]) {
                r->means = malloc((size_t)(ie->n_cols * ie->n_mat) * sizeof(float));
                if (!r->means) return kite_fail(e, KITE_ERR_NOMEM, "quantize: out of memory");
                kite_imatrix_means(ie, r->means);
                imatrix = r->means;
            } else if (tensor_category(name) != CAT_TOKEN_EMBD) {
                /* llama.cpp stops here too: quantizing most of a model without its imatrix goes unnoticed */
                return kite_fail(e, KITE_ERR_INVALID_ARG, "quantize: imatrix entry '%s' has %lld values, the tensor needs %lld",
                                 name, (long long)(ie->n_cols * ie->n_mat), (long long)(n_per_row * t->ne[2]));
            }
        }
        if (kite_is_trellis(type)) {
            /* plain or rotated, whichever keeps the (importance-weighted) error of a sample lower */
            double err_plain = 0, err_rotated = 0;
            const uint32_t chosen = kite_kt_choose(type, r->f32, n_rows, n_per_row, imatrix, &err_plain, &err_rotated);
            if (!chosen) return kite_fail(e, KITE_ERR_NOMEM, "quantize: out of memory");
            kite_log(KITE_LOG_DEBUG, "quantize: %s: %s (sampled error per weight %.4g plain, %.4g rotated)", name,
                     kite_type_get(chosen)->name, err_plain, err_rotated);
            type = chosen;
            if (p->progress && !p->progress(p->progress_user_data, i, n, name, kite_type_get(type)->name))
                return kite_fail(e, KITE_ERR_CANCELLED, "quantize: cancelled at tensor %lld of %lld (%s)", (long long)i + 1,
                                 (long long)n, name);
        }
        rows_job job = {.type = type, .src = r->f32, .dst = r->qbuf, .n_rows = n_rows, .n_per_row = n_per_row,
                        .rows_per_expert = t->ne[1], .row_bytes = row_bytes, .imatrix = imatrix};
        /* tasks of about 16K elements, so small tensors do not pay for threads and large ones balance */
        job.rows_per_task = (16384 + n_per_row - 1) / n_per_row;
        if (kite_is_trellis(type)) job.rows_per_task = KT_ROWS; /* whole row groups; 16 rows take ~0.1 s per 2048 columns */
        int64_t n_tasks = (n_rows + job.rows_per_task - 1) / job.rows_per_task;
        kite_pool_run(r->pool, quantize_task, &job, n_tasks);
        kite_gguf_w_tensor(r->w, name, type, t->n_dims, t->ne, r->qbuf, row_bytes * (size_t)n_rows);
    }

    /* Temporary file beside the output (same file system, so the rename is atomic). */
    size_t len = strlen(out) + 40;
    r->tmp_path = malloc(len);
    if (!r->tmp_path) return kite_fail(e, KITE_ERR_NOMEM, "quantize: out of memory");
    snprintf(r->tmp_path, len, "%s.tmp-%ld", out, (long)getpid());
    if ((st = kite_gguf_writer_save(r->w, r->tmp_path, e))) {
        unlink(r->tmp_path);
        return st;
    }
    if (kite_quantize_write_hook && !kite_quantize_write_hook(r->tmp_path))
        return kite_fail(e, KITE_ERR_IO, "quantize: write to '%s' failed (injected)", r->tmp_path);
    if (rename(r->tmp_path, out) != 0)
        return kite_fail(e, KITE_ERR_IO, "quantize: cannot rename '%s' to '%s': %s", r->tmp_path, out, strerror(errno));
    free(r->tmp_path);
    r->tmp_path = NULL;
    return KITE_OK;
}

/* ---- llama2.c checkpoints: converted first to an F32 GGUF as llama.cpp's convert-llama2c-to-ggml
 * writes it (its keys, its vocabulary rules, output.weight a copy of the embedding when shared), so
 * quantizing the .bin gives what llama-quantize gives for the converted file. ----------------------- */

static int convert_llama2c(const char *in, const char *tokenizer, const char *gguf_path, kite_error *e) {
    if (!tokenizer)
        return kite_fail(e, KITE_ERR_INVALID_ARG, "quantize: '%s' is a llama2.c checkpoint: give its tokenizer .bin (--tokenizer)", in);
    kite_source src;
    kite_status st = kite_source_open_llama2c(&src, in, e);
    if (st) return st;
    kite_mapped_file tf = {0};
    kite_gguf_writer *w = NULL;
    char **texts = NULL;
    float *scores = NULL;
    int32_t *types = NULL;
    const int32_t n_vocab = src.hp.n_vocab;
    if ((st = kite_map_file(&tf, tokenizer, e))) goto done;
    texts = calloc((size_t)n_vocab, sizeof *texts);
    scores = calloc((size_t)n_vocab, sizeof *scores);
    types = calloc((size_t)n_vocab, sizeof *types);
    if (!texts || !scores || !types) { st = kite_fail(e, KITE_ERR_NOMEM, "quantize: out of memory"); goto done; }
    size_t off = 4;
    if (tf.size < 4) { st = kite_fail(e, KITE_ERR_FORMAT, "quantize: tokenizer '%s' is too short", tokenizer); goto done; }
    for (int32_t id = 0; id < n_vocab; id++) {
        int32_t len;
        if (tf.size - off < 8) { st = kite_fail(e, KITE_ERR_FORMAT, "quantize: tokenizer '%s': token %d truncated at byte %zu (the model has %d)", tokenizer, id, off, n_vocab); goto done; }
        memcpy(&scores[id], tf.data + off, 4);
        memcpy(&len, tf.data + off + 4, 4);
        off += 8;
        if (len < 0 || (size_t)len > tf.size - off || len > 4096) { st = kite_fail(e, KITE_ERR_FORMAT, "quantize: tokenizer '%s': token %d has a bad length at byte %zu", tokenizer, id, off - 4); goto done; }
        const char *t = (const char *)tf.data + off;
        off += (size_t)len;
        /* the converter's rules: fixed texts for ids 0-2, empty texts control, <0xNN> byte tokens, and
         * spaces as U+2581 */
        int type = 1; /* normal */
        if (id == 0) t = "<unk>", len = 5, type = 2;
        else if (id == 1) t = "<s>", len = 3, type = 3;
        else if (id == 2) t = "</s>", len = 4, type = 3;
        else if (len == 0) type = 3;
        else if (len >= 4 && memcmp(t, "<0x", 3) == 0 && t[3] && strchr("0123456789ABCDEFabcdef", t[3])) type = 6; /* sscanf "<0x%02hhX>" */
        char *text = malloc((size_t)len * 3 + 1), *q = text;
        if (!text) { st = kite_fail(e, KITE_ERR_NOMEM, "quantize: out of memory"); goto done; }
        for (int32_t k = 0; k < len; k++) {
            if (t[k] == ' ') memcpy(q, "\xE2\x96\x81", 3), q += 3;
            else *q++ = t[k];
        }
        *q = 0;
        if (memchr(text, 0, (size_t)(q - text))) { free(text); st = kite_fail(e, KITE_ERR_FORMAT, "quantize: tokenizer '%s': token %d holds a NUL byte", tokenizer, id); goto done; }
        texts[id] = text;
        types[id] = type;
    }
    w = kite_gguf_writer_new();
    if (!w) { st = kite_fail(e, KITE_ERR_NOMEM, "quantize: out of memory"); goto done; }
    const kite_hparams *hp = &src.hp;
    kite_gguf_w_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)texts, (uint64_t)n_vocab);
    kite_gguf_w_arr_f32(w, "tokenizer.ggml.scores", scores, (uint64_t)n_vocab);
    kite_gguf_w_arr_i32(w, "tokenizer.ggml.token_type", types, (uint64_t)n_vocab);
    kite_gguf_w_str(w, "tokenizer.ggml.model", "llama");
    kite_gguf_w_str(w, "general.architecture", "llama");
    kite_gguf_w_str(w, "general.name", "llama");
    kite_gguf_w_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    kite_gguf_w_u32(w, "tokenizer.ggml.bos_token_id", 1);
    kite_gguf_w_u32(w, "tokenizer.ggml.eos_token_id", 2);
    kite_gguf_w_u32(w, "tokenizer.ggml.seperator_token_id", UINT32_MAX); /* sic: llama.cpp's key */
    kite_gguf_w_u32(w, "tokenizer.ggml.padding_token_id", UINT32_MAX);
    kite_gguf_w_u32(w, "llama.context_length", (uint32_t)hp->n_ctx_train);
    kite_gguf_w_u32(w, "llama.embedding_length", (uint32_t)hp->dim);
    kite_gguf_w_u32(w, "llama.feed_forward_length", (uint32_t)hp->ffn_dim);
    kite_gguf_w_u32(w, "llama.attention.head_count", (uint32_t)hp->n_heads);
    kite_gguf_w_u32(w, "llama.attention.head_count_kv", (uint32_t)hp->n_kv_heads);
    kite_gguf_w_u32(w, "llama.block_count", (uint32_t)hp->n_layers);
    kite_gguf_w_u32(w, "llama.rope.dimension_count", (uint32_t)hp->head_dim);
    kite_gguf_w_f32(w, "llama.attention.layer_norm_rms_epsilon", hp->rms_eps);
    for (int32_t i = 0; i < src.n_tensors; i++) {
        const kite_tensor *t = &src.tensors[i];
        kite_gguf_w_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, t->n_bytes);
    }
    if (hp->tied_embeddings) {
        const kite_tensor *emb = kite_source_find(&src, "token_embd.weight");
        if (emb) kite_gguf_w_tensor(w, "output.weight", emb->type, emb->n_dims, emb->ne, emb->data, emb->n_bytes);
    }
    st = kite_gguf_writer_save(w, gguf_path, e);
done:
    if (texts) for (int32_t i = 0; i < n_vocab; i++) free(texts[i]);
    free(texts), free(scores), free(types);
    kite_gguf_writer_free(w);
    kite_unmap_file(&tf);
    kite_source_close(&src);
    return st;
}

int kite_quantize(const char *in, const char *out, const kite_quantize_params *params, char *err, size_t err_size) {
    kite_error e = {0};
    kite_quantize_params p = params ? *params : kite_quantize_default_params();
    if (!in || !out) {
        kite_fail(&e, KITE_ERR_INVALID_ARG, "quantize: NULL input or output path");
        return kite_error_export(&e, err, err_size);
    }
    const kite_ftype_info *ft = kite_ftype_find(p.type);
    if (!ft) {
        kite_fail(&e, KITE_ERR_INVALID_ARG, "quantize: unknown type '%s' (kite quantize --help lists the types)", p.type ? p.type : "(null)");
        return kite_error_export(&e, err, err_size);
    }
    /* A non-GGUF input that parses as a llama2.c checkpoint is converted first (beside out). */
    char *converted = NULL;
    unsigned char magic[4] = {0};
    FILE *probe = fopen(in, "rb");
    const bool is_gguf = probe && fread(magic, 1, 4, probe) == 4 && memcmp(magic, "GGUF", 4) == 0;
    if (probe) fclose(probe);
    struct stat in_st;
    if (probe && !is_gguf && stat(in, &in_st) == 0 && S_ISREG(in_st.st_mode)) {
        kite_source probe_src;
        kite_error pe = {0};
        if (kite_source_open_llama2c(&probe_src, in, &pe) == KITE_OK) {
            kite_source_close(&probe_src);
            size_t len = strlen(out) + 48;
            converted = malloc(len);
            if (!converted) {
                kite_fail(&e, KITE_ERR_NOMEM, "quantize: out of memory");
                return kite_error_export(&e, err, err_size);
            }
            snprintf(converted, len, "%s.f32-tmp-%ld", out, (long)getpid());
            int st = convert_llama2c(in, p.tokenizer_path, converted, &e);
            if (st) {
                unlink(converted);
                free(converted);
                return kite_error_export(&e, err, err_size);
            }
        }
    }
    /* A Hugging Face folder (or a file in one) is converted first, as convert_hf_to_gguf.py would. */
    struct stat dir_st;
    size_t in_len = strlen(in);
    bool hf = !converted && ((stat(in, &dir_st) == 0 && S_ISDIR(dir_st.st_mode)) ||
                             (!is_gguf && in_len > 12 && !strcmp(in + in_len - 12, ".safetensors")) ||
                             (!is_gguf && in_len > 11 && !strcmp(in + in_len - 11, "config.json")));
    if (hf) {
        size_t len = strlen(out) + 48;
        if (!(converted = malloc(len))) {
            kite_fail(&e, KITE_ERR_NOMEM, "quantize: out of memory");
            return kite_error_export(&e, err, err_size);
        }
        snprintf(converted, len, "%s.hf-tmp-%ld", out, (long)getpid());
        kite_log(KITE_LOG_INFO, "quantize: converting the Hugging Face folder %s to GGUF first", in);
        int st = kite_convert_hf_to_gguf(in, converted, &e);
        if (st) {
            unlink(converted);
            free(converted);
            if (e.status != st) kite_fail(&e, st, "quantize: converting %s failed", in);
            return kite_error_export(&e, err, err_size);
        }
    }
    quantize_run run = {0};
    int st = quantize_gguf(&run, converted ? converted : in, out, &p, ft, &e);
    run_free(&run);
    if (converted) {
        unlink(converted);
        free(converted);
    }
    if (st) {
        if (e.status != st) kite_fail(&e, st, "quantize: failed (%s)", kite_status_name(st));
        return kite_error_export(&e, err, err_size);
    }
    return KITE_OK;
}
