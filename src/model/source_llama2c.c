#include "model/source_llama2c.h"

#include <stdio.h>
#include <string.h>

#include "model/validate.h"
#include "quant/types.h"

/* Caps far above any llama2.c model; with them every size below fits easily in 64 bits. */
enum {
    MAX_DIM = 1 << 16,
    MAX_HIDDEN = 1 << 20,
    MAX_LAYERS = 1024,
    MAX_HEADS = 1024,
    MAX_VOCAB = 1 << 24,
    MAX_SEQ = 1 << 24,
};

static int32_t read_i32(const unsigned char *p) {
    uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    int32_t v;
    memcpy(&v, &u, sizeof v);
    return v;
}

static int check_range(const char *label, const char *what, int32_t v, int32_t max, kite_error *e) {
    if (v < 1 || v > max)
        return kite_fail(e, KITE_ERR_FORMAT, "%s: header %s = %d is outside [1, %d] (not a llama2.c checkpoint?)", label,
                         what, v, max);
    return KITE_OK;
}

/* Walks the f32 arrays in file order, handing out consecutive slices. */
typedef struct cursor {
    const unsigned char *base;
    uint64_t offset; /* bytes from the start of the file */
} cursor;

static const void *take(cursor *c, uint64_t n_floats) {
    const void *p = c->base + c->offset;
    c->offset += n_floats * 4;
    return p;
}

/* Adds one tensor per layer from a stacked [L][ne1][ne0] array. */
static int add_layers(kite_source *src, cursor *c, const char *suffix, int32_t n_layers, uint32_t n_dims, int64_t ne0,
                      int64_t ne1, kite_error *e) {
    const int64_t ne[2] = {ne0, ne1};
    const uint64_t n_floats = (uint64_t)ne0 * (uint64_t)ne1;
    for (int32_t l = 0; l < n_layers; l++) {
        char name[96];
        snprintf(name, sizeof name, "blk.%d.%s", l, suffix);
        if (!kite_source_add_tensor(src, name, KITE_TYPE_F32, n_dims, ne, take(c, n_floats), n_floats * 4, e))
            return e ? e->status : KITE_ERR_FORMAT;
    }
    return KITE_OK;
}

int kite_llama2c_parse(kite_source *src, const void *data, size_t size, const char *label, kite_error *e) {
    const unsigned char *bytes = data;
    snprintf(src->format, sizeof src->format, "llama2c");
    if (size >= 8 && (uint32_t)read_i32(bytes) == KITE_LLAMA2C_MAGIC)
        return kite_fail(e, KITE_ERR_UNSUPPORTED,
                         "%s: llama2.c version %d checkpoint (magic \"ak42\"); kite reads only the legacy version 0 "
                         "format (export.py --version 0)", label, read_i32(bytes + 4));
    if (size < 28)
        return kite_fail(e, KITE_ERR_FORMAT, "%s: %zu bytes is shorter than the 28-byte llama2.c header", label, size);
    int32_t dim = read_i32(bytes), hidden = read_i32(bytes + 4), n_layers = read_i32(bytes + 8);
    int32_t n_heads = read_i32(bytes + 12), n_kv_heads = read_i32(bytes + 16), vocab_raw = read_i32(bytes + 20);
    int32_t seq_len = read_i32(bytes + 24);
    int rc;
    if ((rc = check_range(label, "dim", dim, MAX_DIM, e)) || (rc = check_range(label, "hidden_dim", hidden, MAX_HIDDEN, e)) ||
        (rc = check_range(label, "n_layers", n_layers, MAX_LAYERS, e)) ||
        (rc = check_range(label, "n_heads", n_heads, MAX_HEADS, e)) ||
        (rc = check_range(label, "n_kv_heads", n_kv_heads, n_heads, e)) ||
        (rc = check_range(label, "seq_len", seq_len, MAX_SEQ, e)))
        return rc;
    /* A negative vocabulary size flags an unshared classifier (wcls follows the other arrays). */
    const bool shared_classifier = vocab_raw > 0;
    if (vocab_raw == 0 || vocab_raw < -MAX_VOCAB || vocab_raw > MAX_VOCAB)
        return kite_fail(e, KITE_ERR_FORMAT, "%s: header vocab_size = %d is outside [-%d, %d] or zero", label, vocab_raw,
                         MAX_VOCAB, MAX_VOCAB);
    const int32_t vocab = shared_classifier ? vocab_raw : -vocab_raw;
    if (dim % n_heads != 0)
        return kite_fail(e, KITE_ERR_FORMAT, "%s: dim %d is not a multiple of n_heads %d", label, dim, n_heads);
    if (n_heads % n_kv_heads != 0)
        return kite_fail(e, KITE_ERR_FORMAT, "%s: n_heads %d is not a multiple of n_kv_heads %d", label, n_heads, n_kv_heads);
    const int32_t head_size = dim / n_heads;
    if (head_size % 2 != 0)
        return kite_fail(e, KITE_ERR_FORMAT, "%s: head size %d (dim / n_heads) is odd", label, head_size);
    const uint64_t kv_dim = (uint64_t)head_size * (uint64_t)n_kv_heads;
    const uint64_t L = (uint64_t)n_layers, D = (uint64_t)dim, H = (uint64_t)hidden, V = (uint64_t)vocab;

    /* Element counts of every array, in file order; the caps keep each product below 2^50. */
    const uint64_t n_floats = V * D                  /* token_embedding */
                              + L * D                /* rms_att */
                              + L * D * D            /* wq */
                              + 2 * L * kv_dim * D   /* wk, wv */
                              + L * D * D            /* wo */
                              + L * D                /* rms_ffn */
                              + 3 * L * H * D        /* w1, w2, w3 */
                              + D                    /* rms_final */
                              + 2 * (uint64_t)seq_len * (uint64_t)(head_size / 2) /* freq_cis real, imag */
                              + (shared_classifier ? 0 : V * D);                    /* wcls */
    const uint64_t expected = 28 + 4 * n_floats;
    if ((uint64_t)size != expected)
        return kite_fail(e, KITE_ERR_FORMAT,
                         "%s: the header (dim %d, hidden %d, %d layers, %d heads, %d kv heads, vocab %d, seq %d) implies "
                         "%llu bytes but the file has %zu%s", label, dim, hidden, n_layers, n_heads, n_kv_heads, vocab_raw,
                         seq_len, (unsigned long long)expected, size, (uint64_t)size < expected ? " (truncated?)" : "");

    kite_hparams *hp = &src->hp;
    memset(hp, 0, sizeof *hp);
    hp->arch = KITE_ARCH_LLAMA;
    hp->n_vocab = vocab;
    hp->dim = dim;
    hp->n_layers = n_layers;
    hp->n_heads = n_heads;
    hp->n_kv_heads = n_kv_heads;
    hp->head_dim = head_size;
    hp->ffn_dim = hidden;
    hp->n_ctx_train = seq_len;
    hp->rms_eps = 1e-5f;       /* llama2.c's run.c hard-codes these */
    hp->rope_theta = 10000.0f;
    hp->rope_layout = KITE_ROPE_INTERLEAVED;
    hp->rope_scaling = KITE_ROPE_SCALING_NONE;
    hp->rope_factor = hp->rope_low_freq_factor = hp->rope_high_freq_factor = 1.0f;
    hp->rope_orig_ctx = seq_len;
    hp->tied_embeddings = shared_classifier;

    cursor c = {bytes, 28};
    const int64_t embd_ne[2] = {dim, vocab}, norm_ne[1] = {dim};
    if (!kite_source_add_tensor(src, "token_embd.weight", KITE_TYPE_F32, 2, embd_ne, take(&c, V * D), V * D * 4, e))
        return e ? e->status : KITE_ERR_FORMAT;
    if ((rc = add_layers(src, &c, "attn_norm.weight", n_layers, 1, dim, 1, e)) ||
        (rc = add_layers(src, &c, "attn_q.weight", n_layers, 2, dim, dim, e)) ||
        (rc = add_layers(src, &c, "attn_k.weight", n_layers, 2, dim, (int64_t)kv_dim, e)) ||
        (rc = add_layers(src, &c, "attn_v.weight", n_layers, 2, dim, (int64_t)kv_dim, e)) ||
        (rc = add_layers(src, &c, "attn_output.weight", n_layers, 2, dim, dim, e)) ||
        (rc = add_layers(src, &c, "ffn_norm.weight", n_layers, 1, dim, 1, e)) ||
        (rc = add_layers(src, &c, "ffn_gate.weight", n_layers, 2, dim, hidden, e)) ||  /* w1 */
        (rc = add_layers(src, &c, "ffn_down.weight", n_layers, 2, hidden, dim, e)) ||  /* w2 */
        (rc = add_layers(src, &c, "ffn_up.weight", n_layers, 2, dim, hidden, e)))      /* w3 */
        return rc;
    if (!kite_source_add_tensor(src, "output_norm.weight", KITE_TYPE_F32, 1, norm_ne, take(&c, D), D * 4, e))
        return e ? e->status : KITE_ERR_FORMAT;
    take(&c, 2 * (uint64_t)seq_len * (uint64_t)(head_size / 2)); /* RoPE tables: kite computes its own */
    if (!shared_classifier &&
        !kite_source_add_tensor(src, "output.weight", KITE_TYPE_F32, 2, embd_ne, take(&c, V * D), V * D * 4, e))
        return e ? e->status : KITE_ERR_FORMAT;
    if (c.offset != expected)
        return kite_fail(e, KITE_ERR_FORMAT, "%s: internal size mismatch (%llu vs %llu)", label,
                         (unsigned long long)c.offset, (unsigned long long)expected);
    return kite_source_validate(src, e);
}

int kite_source_open_llama2c(kite_source *src, const char *path, kite_error *e) {
    memset(src, 0, sizeof *src);
    snprintf(src->format, sizeof src->format, "llama2c");
    src->bos_id = -1;
    src->eos_id = -1;
    int rc = kite_map_file(&src->maps[0], path, e);
    if (rc) return rc;
    src->n_maps = 1;
    rc = kite_llama2c_parse(src, src->maps[0].data, src->maps[0].size, path, e);
    if (rc) {
        kite_source_close(src);
        return rc;
    }
    src->gen_defaults = kite_gen_default_params();
    return KITE_OK;
}
