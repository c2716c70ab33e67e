/* Binding a source's canonical tensors to layer structs, and the RoPE frequency table. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "model/arch/qwen3moe.h"
#include "model/model.h"
#include "quant/trellis.h"
#include "quant/types.h"

/* A small tensor (norm weight, bias) as f32; NULL with an error if absent and required. */
static int vector_f32(const kite_source *src, const char *name, int64_t expect_len, bool required, float **out,
                      kite_error *e) {
    *out = NULL;
    const kite_tensor *t = kite_source_find(src, name);
    if (!t) return required ? kite_fail(e, KITE_ERR_FORMAT, "%s: missing tensor %s", src->format, name) : KITE_OK;
    int64_t n = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
    if (n != expect_len)
        return kite_fail(e, KITE_ERR_FORMAT, "%s: tensor %s has %lld elements, expected %lld", src->format, name,
                         (long long)n, (long long)expect_len);
    const kite_type_traits *tr = kite_type_get(t->type);
    if (!tr || !tr->to_float || expect_len % tr->block_size != 0) /* trellis types have no row-wise reader */
        return kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: tensor %s has a type kite cannot read as a vector", src->format, name);
    float *v = malloc(sizeof(float) * (size_t)expect_len);
    if (!v) return kite_fail(e, KITE_ERR_NOMEM, "out of memory");
    tr->to_float(t->data, v, expect_len);
    *out = v;
    return KITE_OK;
}

/* An RMSNorm weight: as vector_f32, plus the format's offset (Hugging Face Gemma stores w for 1 + w). */
static int norm_f32(const kite_source *src, const char *name, int64_t expect_len, bool required, float **out,
                    kite_error *e) {
    int st = vector_f32(src, name, expect_len, required, out, e);
    if (st || !*out || src->hp.norm_weight_offset == 0.0f) return st;
    for (int64_t i = 0; i < expect_len; i++) (*out)[i] += src->hp.norm_weight_offset;
    return KITE_OK;
}

static const kite_tensor *matrix(const kite_source *src, const char *name, int64_t rows, int64_t cols, kite_error *e) {
    const kite_tensor *t = kite_source_find(src, name);
    if (!t) {
        kite_fail(e, KITE_ERR_FORMAT, "%s: missing tensor %s", src->format, name);
        return NULL;
    }
    if (t->ne[0] != cols || t->ne[1] != rows || t->ne[2] != 1 || t->ne[3] != 1) {
        kite_fail(e, KITE_ERR_FORMAT, "%s: tensor %s has shape [%lld, %lld], expected [%lld, %lld] (rows, columns)",
                  src->format, name, (long long)t->ne[1], (long long)t->ne[0], (long long)rows, (long long)cols);
        return NULL;
    }
    const kite_type_traits *tr = kite_type_get(t->type);
    /* trellis matrices have no row-wise to_float (their rows are interleaved in tiles); the kernels read them */
    if (!tr || (!tr->to_float && !kite_is_trellis(t->type)) || cols % tr->block_size != 0) {
        kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: tensor %s: type %u with rows of %lld is not supported", src->format,
                  name, t->type, (long long)cols);
        return NULL;
    }
    return t;
}

/* After t was packed into a copy: if t lives in one of the source's file maps, drops the pages wholly
 * inside it from memory (they are clean file pages, reloaded from the file if ever read again), so the
 * packed copy is the one resident copy. Pages shared with neighbouring tensors stay. */
static void release_source_pages(const kite_source *src, const kite_tensor *t) {
    uintptr_t begin = (uintptr_t)t->data, end = begin + (uintptr_t)t->n_bytes;
    for (int32_t i = 0; i < src->n_maps; i++) {
        uintptr_t map_begin = (uintptr_t)src->maps[i].data, map_end = map_begin + src->maps[i].size;
        if (!src->maps[i].data || begin < map_begin || end > map_end) continue;
        long page = sysconf(_SC_PAGESIZE);
        if (page <= 0) return;
        uintptr_t lo = (begin + (uintptr_t)page - 1) / (uintptr_t)page * (uintptr_t)page;
        uintptr_t hi = end / (uintptr_t)page * (uintptr_t)page;
        if (hi > lo) (void)madvise((void *)lo, hi - lo, MADV_DONTNEED); /* advice only: failure is harmless */
        return;
    }
}

/* A matrix to pack: found and checked while binding, packed once the arena is sized. */
typedef struct pack_job {
    const kite_tensor *t;
    kite_packed_matrix *out;
    bool keep_source; /* the embedding, still read for row lookups */
} pack_job;

/* Packs every job's matrix for the weights' kernel set into one arena (kite_weight_arena) and releases
 * each source's file pages when the packing is a copy and the tensor is not needed any more. */
static int pack_matrices(kite_weights *w, const kite_source *src, const pack_job *jobs, int32_t n_jobs,
                         kite_progress_fn progress, void *progress_user_data, kite_error *e) {
    size_t total = 0;
    for (int32_t i = 0; i < n_jobs; i++) {
        size_t bytes = (w->kernels->pack_bytes(jobs[i].t) + 63) / 64 * 64;
        if (bytes > SIZE_MAX - total) return kite_fail(e, KITE_ERR_NOMEM, "weights too large to pack");
        total += bytes;
    }
    int st = kite_weight_arena_init(&w->arena, total, e);
    if (st) return st;
    for (int32_t i = 0; i < n_jobs; i++) {
        if ((st = w->kernels->pack(jobs[i].t, &w->arena, jobs[i].out, e))) return st;
        if (jobs[i].out->data != jobs[i].t->data && !jobs[i].keep_source) release_source_pages(src, jobs[i].t);
        /* Packing reads every weight once: the natural measure of a large model's loading. */
        if (progress) progress((float)(i + 1) / (float)n_jobs, progress_user_data);
    }
    return KITE_OK;
}

/* The packing list, for binders of other files (model/arch/qwen3moe.c's experts). */
typedef struct pack_list {
    pack_job *jobs;
    int32_t n, cap;
} pack_list;

static int add_pack_job(void *ctx, const kite_tensor *t, kite_packed_matrix *out, kite_error *e) {
    pack_list *list = ctx;
    if (!t) return kite_fail(e, KITE_ERR_FORMAT, "missing tensor");
    if (list->n >= list->cap) return kite_fail(e, KITE_ERR_INVALID_ARG, "more matrices than the packing list holds");
    list->jobs[list->n++] = (pack_job){t, out, false};
    return KITE_OK;
}

/* Inverse frequencies per rotated pair, with Llama-3 or linear scaling applied. */
static int rope_table(kite_weights *w, const kite_source *src, kite_error *e) {
    const kite_hparams *hp = &w->hp;
    int32_t half = hp->head_dim / 2;
    w->rope_inv_freq = malloc(sizeof(float) * (size_t)half);
    if (!w->rope_inv_freq) return kite_fail(e, KITE_ERR_NOMEM, "out of memory");
    /* GGUF files of Llama-3 carry the scaling as per-pair divisors (rope_freqs.weight). */
    float *freq_factors = NULL;
    int st = vector_f32(src, "rope_freqs.weight", half, false, &freq_factors, e);
    if (st) return st;
    for (int32_t i = 0; i < half; i++) {
        /* A partial rotary (Qwen3.5) turns n_rot dimensions with n_rot's frequencies; pairs past them stay. */
        const int32_t rot = hp->n_rot > 0 ? hp->n_rot : hp->head_dim;
        double freq = 2 * i < rot ? pow((double)hp->rope_theta, -2.0 * i / (double)rot) : 0.0;
        if (freq_factors) {
            freq /= freq_factors[i];
        } else if (hp->rope_global_fraction > 0.0f) {
            /* as Gemma4Model.generate_extra_tensors: divisor 1e30 for the pairs past the fraction */
            if (i >= (int32_t)((float)hp->head_dim * hp->rope_global_fraction / 2.0f)) freq /= 1e30f;
        } else if (hp->rope_scaling == KITE_ROPE_SCALING_LLAMA3) {
            double low_wavelen = hp->rope_orig_ctx / hp->rope_low_freq_factor;
            double high_wavelen = hp->rope_orig_ctx / hp->rope_high_freq_factor;
            double wavelen = 2.0 * M_PI / freq;
            if (wavelen > low_wavelen) {
                freq /= hp->rope_factor;
            } else if (wavelen >= high_wavelen) {
                double smooth = (hp->rope_orig_ctx / wavelen - hp->rope_low_freq_factor) /
                                (hp->rope_high_freq_factor - hp->rope_low_freq_factor);
                freq = (1.0 - smooth) * freq / hp->rope_factor + smooth * freq;
            }
        } else if (hp->rope_scaling == KITE_ROPE_SCALING_LINEAR) {
            freq /= hp->rope_factor;
        }
        w->rope_inv_freq[i] = (float)freq;
    }
    free(freq_factors);
    /* Sliding-window layers (Gemma 3) rotate with their own base and no scaling, as llama.cpp's
     * rope_freq_base_train_swa / rope_freq_scale_train_swa = 1 and transformers' rope_local_base_freq; over
     * their own rotated dimensions (Gemma 4's partial RoPE: ggml's theta_scale = base^(-2/n_dims)). */
    int32_t local_rope_dim = 0;
    for (int32_t l = 0; l < hp->n_layers; l++)
        if (kite_layer_is_local(hp, l)) local_rope_dim = kite_layer_rope_dim(hp, l);
    if (local_rope_dim > 0) {
        int32_t local_half = local_rope_dim / 2;
        w->rope_inv_freq_local = malloc(sizeof(float) * (size_t)local_half);
        if (!w->rope_inv_freq_local) return kite_fail(e, KITE_ERR_NOMEM, "out of memory");
        for (int32_t i = 0; i < local_half; i++)
            w->rope_inv_freq_local[i] = (float)pow((double)hp->rope_theta_local, -2.0 * i / (double)local_rope_dim);
    }
    return KITE_OK;
}

/* Qwen3.5's next-n block blk.{n_layers} (model.h, kite_mtp_weights; llama.cpp's load_block_mtp): its
 * vectors now, its matrices added to the packing list. */
static int bind_mtp(kite_weights *w, const kite_source *src, pack_job *jobs, int32_t *n_jobs, kite_error *e) {
    const kite_hparams *hp = &w->hp;
    const int64_t dim = hp->dim, hd = hp->head_dim, q_width = (int64_t)hp->n_heads * hd, kv_dim = (int64_t)hp->n_kv_heads * hd;
    const int32_t l = hp->n_layers;
    kite_mtp_weights *M = w->mtp = calloc(1, sizeof *w->mtp);
    if (!M) return kite_fail(e, KITE_ERR_NOMEM, "out of memory");
    kite_layer_weights *L = &M->block;
    char name[96];
    int st;
#define NAME(suffix) (snprintf(name, sizeof name, "blk.%d." suffix, l), name)
#define MATRIX(field, suffix, rows, cols)                                                    \
    {                                                                                         \
        const kite_tensor *t = matrix(src, NAME(suffix), rows, cols, e);                      \
        if (!t) return e->status;                                                             \
        jobs[(*n_jobs)++] = (pack_job){t, &field, false};                                     \
    }
    MATRIX(L->wq, "attn_q.weight", 2 * q_width, dim);
    MATRIX(L->wk, "attn_k.weight", kv_dim, dim);
    MATRIX(L->wv, "attn_v.weight", kv_dim, dim);
    MATRIX(L->wo, "attn_output.weight", dim, q_width);
    MATRIX(L->w_gate, "ffn_gate.weight", hp->ffn_dim, dim);
    MATRIX(L->w_up, "ffn_up.weight", hp->ffn_dim, dim);
    MATRIX(L->w_down, "ffn_down.weight", dim, hp->ffn_dim);
    MATRIX(M->eh_proj, "nextn.eh_proj.weight", dim, 2 * dim);
    if (kite_source_find(src, NAME("nextn.shared_head_head.weight"))) MATRIX(M->head, "nextn.shared_head_head.weight", hp->n_vocab, dim);
#undef MATRIX
    M->embd = w->tok_embd;
    if (kite_source_find(src, NAME("nextn.embed_tokens.weight"))) {
        if (!(M->embd = matrix(src, name, hp->n_vocab, dim, e))) return e->status;
        if (!kite_type_get(M->embd->type)->to_float)
            return kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: %s is a type kite cannot read a row at a time", src->format, name);
    }
    if ((st = norm_f32(src, NAME("attn_norm.weight"), dim, true, &L->attn_norm, e)) ||
        (st = norm_f32(src, NAME("post_attention_norm.weight"), dim, true, &L->ffn_norm, e)) ||
        (st = norm_f32(src, NAME("attn_q_norm.weight"), hd, true, &L->q_norm, e)) ||
        (st = norm_f32(src, NAME("attn_k_norm.weight"), hd, true, &L->k_norm, e)) ||
        (st = norm_f32(src, NAME("nextn.enorm.weight"), dim, true, &M->enorm, e)) ||
        (st = norm_f32(src, NAME("nextn.hnorm.weight"), dim, true, &M->hnorm, e)) ||
        (st = norm_f32(src, NAME("nextn.shared_head_norm.weight"), dim, false, &M->head_norm, e)))
        return st;
#undef NAME
    if (!M->head_norm) { /* llama.cpp falls back to the trunk's output_norm */
        if (!(M->head_norm = malloc(sizeof(float) * (size_t)dim))) return kite_fail(e, KITE_ERR_NOMEM, "out of memory");
        memcpy(M->head_norm, w->output_norm, sizeof(float) * (size_t)dim);
    }
    return KITE_OK;
}

static void free_layer(kite_layer_weights *L);

int kite_weights_bind(kite_weights *w, const kite_source *src, kite_progress_fn progress, void *progress_user_data,
                      kite_error *e) {
    memset(w, 0, sizeof *w);
    w->hp = src->hp;
    const kite_hparams *hp = &w->hp;
    int64_t dim = hp->dim;
    int st = KITE_OK;
    w->kernels = kite_kernels();
    if (!(w->tok_embd = matrix(src, "token_embd.weight", hp->n_vocab, dim, e))) return e->status;
    if (!kite_type_get(w->tok_embd->type)->to_float) /* a trellis type: its rows are interleaved in tiles */
        return kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: token_embd.weight is %s, which kite cannot read a row at a time",
                         src->format, kite_type_get(w->tok_embd->type)->name);
    const size_t per_layer = 8 + (hp->n_experts > 0 ? 1 + 3 * (size_t)hp->n_experts : 0);
    const size_t max_jobs = 1 + (size_t)hp->n_layers * per_layer + 9 /* a next-n block */;
    pack_job *jobs = calloc(max_jobs, sizeof *jobs);
    int32_t n_jobs = 0;
    if (!jobs) return kite_fail(e, KITE_ERR_NOMEM, "out of memory");
    if (kite_source_find(src, "output.weight")) {
        const kite_tensor *out = matrix(src, "output.weight", hp->n_vocab, dim, e);
        if (!out) { st = e->status; goto fail; }
        jobs[n_jobs++] = (pack_job){out, &w->output, out == w->tok_embd};
    } else {
        jobs[n_jobs++] = (pack_job){w->tok_embd, &w->output, true};
    }
    /* LFM2's final norm is token_embd_norm; Muse Glimmer's converter shifts only the layer norms (x * (1 + w)),
     * its final norm is x * w */
    const char *final_norm = hp->arch == KITE_ARCH_LFM2 ? "token_embd_norm.weight" : "output_norm.weight";
    if ((st = (hp->arch == KITE_ARCH_MUSE_GLIMMER ? vector_f32 : norm_f32)(src, final_norm, dim, true, &w->output_norm, e)))
        goto fail;
    w->layers = calloc((size_t)hp->n_layers, sizeof *w->layers);
    if (!w->layers) { st = kite_fail(e, KITE_ERR_NOMEM, "out of memory"); goto fail; }
    for (int32_t l = 0; l < hp->n_layers; l++) {
        kite_layer_weights *L = &w->layers[l];
        const int64_t head_dim = kite_layer_head_dim(hp, l), q_width = (int64_t)hp->n_heads * head_dim;
        const int64_t kv_dim = (int64_t)kite_layer_kv_heads(hp, l) * head_dim;
        char name[96];
#define NAME(suffix) (snprintf(name, sizeof name, "blk.%d." suffix, l), name)
#define MATRIX(field, suffix, rows, cols)                                                    \
        {                                                                                     \
            const kite_tensor *t = matrix(src, NAME(suffix), rows, cols, e);                  \
            if (!t) { st = e->status; goto fail; }                                            \
            jobs[n_jobs++] = (pack_job){t, &L->field, t == w->tok_embd};                      \
        }
        const bool recurrent = kite_layer_is_recurrent(hp, l), conv = kite_layer_is_conv(hp, l);
        if (recurrent) {
            const int64_t key_dim = (int64_t)hp->dn_n_k_heads * hp->dn_head_k_dim;
            const int64_t value_dim = (int64_t)hp->dn_n_v_heads * hp->dn_head_v_dim, conv_dim = 2 * key_dim + value_dim;
            MATRIX(w_qkv, "attn_qkv.weight", conv_dim, dim);
            MATRIX(w_z, "attn_gate.weight", value_dim, dim);
            MATRIX(w_beta, "ssm_beta.weight", hp->dn_n_v_heads, dim);
            MATRIX(w_alpha, "ssm_alpha.weight", hp->dn_n_v_heads, dim);
            MATRIX(w_ssm_out, "ssm_out.weight", dim, value_dim);
            kite_dn_weights *D = &L->dn;
            if ((st = vector_f32(src, NAME("ssm_conv1d.weight"), conv_dim * hp->dn_conv_kernel, true, &D->conv, e)) ||
                (st = vector_f32(src, NAME("ssm_dt.bias"), hp->dn_n_v_heads, true, &D->dt_bias, e)) ||
                (st = vector_f32(src, NAME("ssm_norm.weight"), hp->dn_head_v_dim, true, &D->norm, e))) /* plain w, no + 1 */
                goto fail;
            if (kite_source_find(src, NAME("ssm_a"))) {
                if ((st = vector_f32(src, name, hp->dn_n_v_heads, true, &D->a, e))) goto fail;
            } else { /* Hugging Face's A_log: the converter's -exp(A_log) */
                if ((st = vector_f32(src, NAME("ssm_a_log"), hp->dn_n_v_heads, true, &D->a, e))) goto fail;
                for (int32_t h = 0; h < hp->dn_n_v_heads; h++) D->a[h] = -expf(D->a[h]);
            }
        } else if (conv) {
            MATRIX(conv_in, "shortconv.in_proj.weight", 3 * dim, dim);
            MATRIX(conv_out, "shortconv.out_proj.weight", dim, dim);
            if ((st = vector_f32(src, NAME("shortconv.conv.weight"), dim * hp->conv_taps, true, &L->conv_kernel, e))) goto fail;
        } else {
            MATRIX(wq, "attn_q.weight", hp->attn_output_gate ? 2 * q_width : q_width, dim);
            MATRIX(wk, "attn_k.weight", kv_dim, dim);
            /* Gemma 4's k_eq_v layers have no attn_v: V is K's projection (llama.cpp: "use Kcur as Vcur") */
            L->v_from_k = hp->arch == KITE_ARCH_GEMMA4 && !kite_source_find(src, NAME("attn_v.weight"));
            if (!L->v_from_k) MATRIX(wv, "attn_v.weight", kv_dim, dim);
            MATRIX(wo, "attn_output.weight", dim, q_width);
            if (hp->arch == KITE_ARCH_MUSE_GLIMMER) MATRIX(w_attn_gate, "attn_gate.weight", q_width, dim);
        }
        if (hp->n_experts > 0) {
            if (!(L->moe = calloc(1, sizeof *L->moe))) { st = kite_fail(e, KITE_ERR_NOMEM, "out of memory"); goto fail; }
            pack_list list = {.jobs = jobs, .n = n_jobs, .cap = (int32_t)max_jobs};
            if ((st = kite_qwen3moe_bind_layer(src, l, L->moe, add_pack_job, &list, e))) goto fail;
            n_jobs = list.n;
        } else {
            MATRIX(w_gate, "ffn_gate.weight", hp->ffn_dim, dim);
            MATRIX(w_up, "ffn_up.weight", hp->ffn_dim, dim);
            MATRIX(w_down, "ffn_down.weight", dim, hp->ffn_dim);
        }
#undef MATRIX
        const bool qwen35 = hp->arch == KITE_ARCH_QWEN35;
        bool gemma3 = hp->arch == KITE_ARCH_GEMMA3 || hp->arch == KITE_ARCH_GEMMA4 || hp->arch == KITE_ARCH_MUSE_GLIMMER;
        bool qk_norm = !conv && (hp->arch == KITE_ARCH_QWEN3 || gemma3 || hp->arch == KITE_ARCH_QWEN3MOE ||
                                 hp->arch == KITE_ARCH_LFM2 || (qwen35 && !recurrent));
        if ((st = norm_f32(src, NAME("attn_norm.weight"), dim, true, &L->attn_norm, e))) goto fail;
        /* Qwen3.5's FFN input norm is named post_attention_norm (HF post_attention_layernorm), as Gemma's
         * norm of the attention output is: here it is the plain pre-FFN norm. */
        if ((st = norm_f32(src, qwen35 ? NAME("post_attention_norm.weight") : NAME("ffn_norm.weight"), dim, true, &L->ffn_norm, e)))
            goto fail;
        if (!qwen35 && (st = norm_f32(src, NAME("post_attention_norm.weight"), dim, gemma3, &L->post_attn_norm, e))) goto fail;
        if ((st = norm_f32(src, NAME("post_ffw_norm.weight"), dim, gemma3, &L->post_ffn_norm, e))) goto fail;
        if ((st = vector_f32(src, NAME("attn_q.bias"), q_width, false, &L->q_bias, e))) goto fail;
        if ((st = vector_f32(src, NAME("attn_k.bias"), kv_dim, false, &L->k_bias, e))) goto fail;
        if ((st = vector_f32(src, NAME("attn_v.bias"), kv_dim, false, &L->v_bias, e))) goto fail;
        if (hp->qk_scale_factor > 0.0f && !kite_source_find(src, NAME("attn_q_norm.weight"))) {
            /* Muse Glimmer's Hugging Face checkpoints: a weightless RMSNorm then qk_scale_factor on q, as the
             * converter's synthesized q_norm = the factor, k_norm = 1 */
            L->q_norm = malloc(sizeof(float) * (size_t)head_dim);
            L->k_norm = malloc(sizeof(float) * (size_t)head_dim);
            if (!L->q_norm || !L->k_norm) { st = kite_fail(e, KITE_ERR_NOMEM, "out of memory"); goto fail; }
            for (int64_t i = 0; i < head_dim; i++) L->q_norm[i] = hp->qk_scale_factor, L->k_norm[i] = 1.0f;
        } else {
            /* Muse Glimmer's q/k norms are the converter's own, never shifted */
            int (*read)(const kite_source *, const char *, int64_t, bool, float **, kite_error *) =
                hp->arch == KITE_ARCH_MUSE_GLIMMER ? vector_f32 : norm_f32;
            if ((st = read(src, NAME("attn_q_norm.weight"), head_dim, qk_norm, &L->q_norm, e))) goto fail;
            if ((st = read(src, NAME("attn_k_norm.weight"), head_dim, qk_norm, &L->k_norm, e))) goto fail;
        }
        if (hp->arch == KITE_ARCH_GEMMA4) { /* layer_scalar, one element (absent: no scaling) */
            float *scalar = NULL;
            if ((st = vector_f32(src, NAME("layer_output_scale.weight"), 1, false, &scalar, e))) goto fail;
            if (scalar) L->out_scale = scalar[0];
            free(scalar);
            if (!isfinite(L->out_scale)) { st = kite_fail(e, KITE_ERR_FORMAT, "%s: %s is not finite", src->format, name); goto fail; }
        }
#undef NAME
    }
    if (hp->arch == KITE_ARCH_QWEN35 && hp->n_nextn_layers > 0 && (st = bind_mtp(w, src, jobs, &n_jobs, e))) goto fail;
    if ((st = pack_matrices(w, src, jobs, n_jobs, progress, progress_user_data, e))) goto fail;
    if ((st = rope_table(w, src, e))) goto fail;
    free(jobs);
    return KITE_OK;
fail:
    free(jobs);
    kite_weights_free(w);
    return st;
}

static void free_layer(kite_layer_weights *L) {
    kite_packed_matrix_free(&L->wq); kite_packed_matrix_free(&L->wk); kite_packed_matrix_free(&L->wv);
    kite_packed_matrix_free(&L->wo); kite_packed_matrix_free(&L->w_gate); kite_packed_matrix_free(&L->w_up);
    kite_packed_matrix_free(&L->w_down);
    kite_packed_matrix_free(&L->conv_in); kite_packed_matrix_free(&L->conv_out);
    free(L->conv_kernel);
    kite_packed_matrix_free(&L->w_attn_gate);
    kite_moe_layer_free(L->moe);
    free(L->moe);
    free(L->attn_norm); free(L->ffn_norm); free(L->q_bias); free(L->k_bias); free(L->v_bias);
    free(L->q_norm); free(L->k_norm); free(L->post_attn_norm); free(L->post_ffn_norm);
    kite_packed_matrix_free(&L->w_qkv); kite_packed_matrix_free(&L->w_z); kite_packed_matrix_free(&L->w_beta);
    kite_packed_matrix_free(&L->w_alpha); kite_packed_matrix_free(&L->w_ssm_out);
    free(L->dn.conv); free(L->dn.dt_bias); free(L->dn.a); free(L->dn.norm);
}

void kite_weights_free(kite_weights *w) {
    if (!w) return;
    if (w->layers)
        for (int32_t l = 0; l < w->hp.n_layers; l++) free_layer(&w->layers[l]);
    if (w->mtp) {
        free_layer(&w->mtp->block);
        kite_packed_matrix_free(&w->mtp->eh_proj);
        kite_packed_matrix_free(&w->mtp->head);
        free(w->mtp->enorm); free(w->mtp->hnorm); free(w->mtp->head_norm);
        free(w->mtp);
    }
    free(w->layers);
    kite_packed_matrix_free(&w->output);
    kite_weight_arena_free(&w->arena); /* after the matrices carved from it */
    free(w->output_norm);
    free(w->rope_inv_freq);
    free(w->rope_inv_freq_local);
    memset(w, 0, sizeof *w);
}
