/* Session files: a session's context (its tokens and their K/V rows) saved to disk and loaded into a
 * session of the same model, so a prompt processed once is not processed again (kite run --prompt-cache).
 *
 * Layout (little-endian; KITE_SESSION_HEADER_BYTES of header, then the payload, then a checksum):
 *   0  "KITESESS"                      8 bytes
 *   8  u32 version (1)
 *  12  u32 kv type (kite_kv_type)
 *  16  u64 model fingerprint           (kite_model_fingerprint)
 *  24  i32 n_layers, n_kv_heads, head_dim, n_vocab
 *  40  i32 n_tokens
 *  44  u32 reserved (0)
 *  48  i32 tokens[n_tokens]
 *      K rows, then V rows: for each layer, for each of its KV heads, n_tokens rows of its head size (Gemma 4's
 *      local and global layers differ in both; LFM2's conv layers have none)
 *      conv rows (LFM2): for each conv layer, the last min(n_tokens, taps - 1) positions' rows of dim f32
 *      a model with recurrent layers (Qwen3.5): i32 base block set, base position, rows held, 0; both block sets
 *      of its state, then its kept rows (f32, kite_dn_state's layout), so the loaded session can start at
 *      n_tokens exactly as the saved one could
 *      u64 FNV-1a 64 of every byte before it
 * A load checks every field against the session and the file's size against the fields before reading. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine.h"
#include "io/mmap.h"

static const char SESSION_MAGIC[8] = {'K', 'I', 'T', 'E', 'S', 'E', 'S', 'S'};
enum { SESSION_VERSION = 1 };

static uint64_t fnv1a(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}
static const uint64_t FNV_OFFSET = 0xcbf29ce484222325ULL;

uint64_t kite_model_fingerprint(const kite_model *m) {
    uint64_t h = FNV_OFFSET;
    h = fnv1a(h, &m->n_vocab, sizeof m->n_vocab);
    for (int32_t i = 0; i < m->src.n_tensors; i++) {
        const kite_tensor *t = &m->src.tensors[i];
        h = fnv1a(h, t->name, strlen(t->name));
        h = fnv1a(h, &t->type, sizeof t->type);
        h = fnv1a(h, t->ne, sizeof t->ne);
        h = fnv1a(h, &t->n_bytes, sizeof t->n_bytes);
        /* The first and last bytes of each tensor tell a fine-tune or a requantization apart, without
         * reading gigabytes at every save and load. */
        if (t->data) {
            size_t n = t->n_bytes < 256 ? (size_t)t->n_bytes : 256;
            h = fnv1a(h, t->data, n);
            h = fnv1a(h, (const char *)t->data + t->n_bytes - n, n);
        }
    }
    return h;
}

static void put_u32(unsigned char *p, uint32_t v) { memcpy(p, &v, 4); }
static void put_u64(unsigned char *p, uint64_t v) { memcpy(p, &v, 8); }
static uint32_t get_u32(const unsigned char *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
static uint64_t get_u64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* Bytes of a file of n_tokens for shape x, or 0 when that would overflow. */
static uint64_t file_bytes(const kite_session_file_shape *x, int64_t n_tokens) {
    if (x->n_conv_layers < 0 || x->n_conv_layers > x->n_layers || x->conv_dim < 0 || x->conv_keep < 0) return 0;
    uint64_t per_token = x->token_row_bytes;
    if (!per_token) {
        uint64_t row_bytes = kite_kv_row_bytes(x->kv_type, x->head_dim);
        uint64_t rows = (uint64_t)(x->n_layers - x->n_conv_layers) * (uint64_t)x->n_kv_heads; /* each bounded by 2^31 */
        if (row_bytes == 0 || rows > (UINT64_MAX / 4) / row_bytes) return 0;
        per_token = rows * row_bytes;
    }
    if (per_token && (uint64_t)n_tokens > (UINT64_MAX / 4) / per_token) return 0;
    uint64_t keep = (uint64_t)(n_tokens < x->conv_keep ? n_tokens : x->conv_keep);
    uint64_t conv_bytes = (uint64_t)x->n_conv_layers * keep * (uint64_t)x->conv_dim * 4; /* each bounded by 2^31 */
    return KITE_SESSION_HEADER_BYTES + 4 * (uint64_t)n_tokens + 2 * (uint64_t)n_tokens * per_token + conv_bytes + x->dn_bytes + 8;
}

int kite_session_file_parse(const void *data, size_t size, const kite_session_file_shape *x, int32_t max_tokens,
                            kite_session_file_view *out, kite_error *e) {
    const unsigned char *p = data;
    if (size < KITE_SESSION_HEADER_BYTES + 8)
        return kite_fail(e, KITE_ERR_FORMAT, "session file: %zu bytes is too short for a header of %d", size, KITE_SESSION_HEADER_BYTES);
    if (memcmp(p, SESSION_MAGIC, 8)) return kite_fail(e, KITE_ERR_FORMAT, "session file: bad magic at byte 0 (not a kite session file)");
    uint32_t version = get_u32(p + 8);
    if (version != SESSION_VERSION)
        return kite_fail(e, KITE_ERR_UNSUPPORTED, "session file: version %u at byte 8 (this kite reads version %d)", version, SESSION_VERSION);
    uint32_t kv_type = get_u32(p + 12);
    if (kv_type != (uint32_t)x->kv_type)
        return kite_fail(e, KITE_ERR_INVALID_ARG, "session file: its KV cache is %s (byte 12), the session's is %s",
                         kv_type <= KITE_KV_Q4_0 ? kite_kv_type_name((kite_kv_type)kv_type) : "of an unknown type",
                         kite_kv_type_name(x->kv_type) ? kite_kv_type_name(x->kv_type) : "of an unknown type");
    if (get_u64(p + 16) != x->fingerprint)
        return kite_fail(e, KITE_ERR_INVALID_ARG, "session file: made with another model (fingerprint at byte 16 differs)");
    int32_t dims[4];
    memcpy(dims, p + 24, sizeof dims);
    const int32_t want[4] = {x->n_layers, x->n_kv_heads, x->head_dim, x->n_vocab};
    static const char *const names[4] = {"layers", "KV heads", "head dim", "vocabulary"};
    for (int i = 0; i < 4; i++)
        if (dims[i] != want[i])
            return kite_fail(e, KITE_ERR_INVALID_ARG, "session file: %s %d at byte %d, the model has %d", names[i], dims[i], 24 + 4 * i, want[i]);
    int32_t n_tokens;
    memcpy(&n_tokens, p + 40, 4);
    if (n_tokens < 0 || n_tokens > max_tokens)
        return kite_fail(e, KITE_ERR_CONTEXT_FULL, "session file: %d tokens (byte 40) do not fit a context of %d", n_tokens, max_tokens);
    if (get_u32(p + 44) != 0) return kite_fail(e, KITE_ERR_FORMAT, "session file: reserved field at byte 44 is not 0");
    uint64_t need = file_bytes(x, n_tokens);
    if (need == 0 || need != (uint64_t)size)
        return kite_fail(e, KITE_ERR_FORMAT, "session file: %zu bytes, but %d tokens of this model take %llu (truncated or padded)", size,
                         n_tokens, (unsigned long long)need);
    if (fnv1a(FNV_OFFSET, p, size - 8) != get_u64(p + size - 8))
        return kite_fail(e, KITE_ERR_FORMAT, "session file: checksum at byte %zu does not match (the file is damaged)", size - 8);
    const unsigned char *tokens = p + KITE_SESSION_HEADER_BYTES;
    for (int32_t i = 0; i < n_tokens; i++) {
        int32_t id;
        memcpy(&id, tokens + 4 * (size_t)i, 4);
        if (id < 0 || id >= x->n_vocab)
            return kite_fail(e, KITE_ERR_FORMAT, "session file: token %d at byte %zu is %d, outside the vocabulary of %d", i,
                             KITE_SESSION_HEADER_BYTES + 4 * (size_t)i, id, x->n_vocab);
    }
    out->n_tokens = n_tokens;
    out->tokens = tokens;
    out->kv = tokens + 4 * (size_t)n_tokens;
    out->dn = NULL;
    if (x->dn_bytes) {
        out->dn = p + size - 8 - x->dn_bytes;
        int32_t h[4];
        memcpy(h, out->dn, sizeof h);
        /* The state must reach n_tokens: base <= n_tokens <= base + rows held (deltanet.h). */
        if ((h[0] & ~3) != 0 || h[1] < 0 || h[2] < 0 || h[2] > KITE_KV_MAX_PASS || h[1] > n_tokens || n_tokens > h[1] + h[2] || h[3] != 0)
            return kite_fail(e, KITE_ERR_FORMAT, "session file: its recurrent state (byte %zu) does not reach position %d",
                             (size_t)(out->dn - p), n_tokens);
    }
    return KITE_OK;
}

static int32_t n_conv_layers(const kite_kv_cache *kv) {
    int32_t n = 0;
    for (int32_t l = 0; l < kv->n_layers; l++) n += kv->conv_index[l] >= 0;
    return n;
}

static kite_session_file_shape session_shape(const kite_session *s) {
    const kite_hparams *hp = &s->model->weights.hp;
    uint64_t per_token = 0;
    for (int32_t l = 0; l < s->kv.n_layers; l++) per_token += (uint64_t)s->kv.layer_kv_heads[l] * s->kv.layer_row_bytes[l];
    return (kite_session_file_shape){
        .token_row_bytes = per_token,
        .fingerprint = kite_model_fingerprint(s->model),
        .kv_type = s->kv.kv_type,
        .n_layers = hp->n_layers,
        .n_kv_heads = hp->n_kv_heads,
        .head_dim = s->kv.head_dim,
        .n_vocab = s->model->n_vocab,
        .dn_bytes = s->kv.dn ? 16 + sizeof(float) * (2 * (uint64_t)s->kv.dn->n_rec * s->kv.dn->block_floats +
                                                    (uint64_t)s->kv.dn->max_rows * s->kv.dn->n_rec * s->kv.dn->row_floats)
                             : 0,
        .n_conv_layers = n_conv_layers(&s->kv),
        .conv_dim = s->kv.conv_dim,
        .conv_keep = s->kv.conv_taps > 0 ? s->kv.conv_taps - 1 : 0,
    };
}

int kite_session_save(const kite_session *s, const char *path, char *err, size_t err_size) {
    kite_error e = {0};
    if (!s || !path) return kite_fail(&e, KITE_ERR_INVALID_ARG, "session and path must not be NULL"), kite_error_export(&e, err, err_size);
    if (s->gen.busy)
        return kite_fail(&e, KITE_ERR_INVALID_ARG, "kite_session_save: the session is busy"), kite_error_export(&e, err, err_size);
    kite_session_file_shape x = session_shape(s);
    int32_t n = s->n_past; /* rows with K/V (an unfed generated token has none) */
    kite_kv_cache probe = s->kv; /* kite_kv_can_rewind may change only ring_high, of this copy */
    if (!kite_kv_can_rewind(&probe, n))
        return kite_fail(&e, KITE_ERR_INVALID_ARG, "kite_session_save: the sliding-window or conv cache no longer holds the window"),
               kite_error_export(&e, err, err_size);
    unsigned char header[KITE_SESSION_HEADER_BYTES] = {0};
    memcpy(header, SESSION_MAGIC, 8);
    put_u32(header + 8, SESSION_VERSION);
    put_u32(header + 12, (uint32_t)x.kv_type);
    put_u64(header + 16, x.fingerprint);
    const int32_t dims[5] = {x.n_layers, x.n_kv_heads, x.head_dim, x.n_vocab, n};
    memcpy(header + 24, dims, sizeof dims);
    /* Written beside the target and renamed into place: a reader never sees half a file. */
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 32);
    if (!tmp) return kite_fail(&e, KITE_ERR_NOMEM, "out of memory"), kite_error_export(&e, err, err_size);
    snprintf(tmp, plen + 32, "%s.tmp%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        kite_fail(&e, KITE_ERR_IO, "cannot write %s", tmp);
        free(tmp);
        return kite_error_export(&e, err, err_size);
    }
    uint64_t h = fnv1a(FNV_OFFSET, header, sizeof header);
    bool ok = fwrite(header, 1, sizeof header, f) == sizeof header;
    h = fnv1a(h, s->history, sizeof(int32_t) * (size_t)n);
    ok = ok && fwrite(s->history, sizeof(int32_t), (size_t)n, f) == (size_t)n;
    /* A sliding-window ring holds only its last rows: older positions, which nothing reads again, are
     * written as zeros (the file keeps one layout for every layer). */
    static const char zeros[4 * KITE_ATTN_MAX_HEAD_DIM];
    for (int pass = 0; pass < 2 && ok; pass++) {
        const char *base = pass == 0 ? s->kv.k : s->kv.v;
        for (int32_t l = 0; l < x.n_layers && ok; l++)
            for (int32_t hd = 0; hd < s->kv.layer_kv_heads[l] && ok; hd++) {
                const size_t row_bytes = s->kv.layer_row_bytes[l];
                if (!kite_kv_is_ring(&s->kv, l)) {
                    const char *rows = base + kite_kv_offset(&s->kv, l, hd, 0);
                    h = fnv1a(h, rows, row_bytes * (size_t)n);
                    ok = fwrite(rows, row_bytes, (size_t)n, f) == (size_t)n;
                    continue;
                }
                for (int32_t p = 0; p < n && ok; p++) {
                    bool held = p >= s->kv.ring_high - s->kv.ring_rows;
                    const char *row = held ? base + kite_kv_offset(&s->kv, l, hd, kite_kv_row(&s->kv, l, p)) : zeros;
                    h = fnv1a(h, row, row_bytes);
                    ok = fwrite(row, row_bytes, 1, f) == 1;
                }
            }
    }
    /* The conv rows the taps read next (kite_kv_can_rewind held them). */
    for (int32_t l = 0; l < x.n_layers && ok; l++) {
        if (s->kv.conv_index[l] < 0) continue;
        for (int32_t p = n > x.conv_keep ? n - x.conv_keep : 0; p < n && ok; p++) {
            const float *row = kite_kv_conv_row(&s->kv, l, p);
            h = fnv1a(h, row, sizeof(float) * (size_t)x.conv_dim);
            ok = fwrite(row, sizeof(float), (size_t)x.conv_dim, f) == (size_t)x.conv_dim;
        }
    }
    const kite_dn_state *dn = s->kv.dn;
    if (dn && ok) {
        const int32_t hdr[4] = {dn->base | (dn->head_ahead ? 2 : 0), dn->base_pos, dn->n_rows, 0};
        const size_t nb = 2 * (size_t)dn->n_rec * dn->block_floats, nr = (size_t)dn->max_rows * dn->n_rec * dn->row_floats;
        h = fnv1a(h, hdr, sizeof hdr);
        h = fnv1a(h, dn->blocks, sizeof(float) * nb);
        h = fnv1a(h, dn->rows, sizeof(float) * nr);
        ok = fwrite(hdr, sizeof hdr, 1, f) == 1 && fwrite(dn->blocks, sizeof(float), nb, f) == nb && fwrite(dn->rows, sizeof(float), nr, f) == nr;
    }
    unsigned char sum[8];
    put_u64(sum, h);
    ok = ok && fwrite(sum, 1, 8, f) == 8;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        remove(tmp);
        kite_fail(&e, KITE_ERR_IO, ok ? "cannot rename %s into place" : "cannot write %s (disk full?)", ok ? tmp : path);
    }
    free(tmp);
    return kite_error_export(&e, err, err_size);
}

int kite_session_load(kite_session *s, const char *path, char *err, size_t err_size) {
    kite_error e = {0};
    if (!s || !path) return kite_fail(&e, KITE_ERR_INVALID_ARG, "session and path must not be NULL"), kite_error_export(&e, err, err_size);
    if (s->gen.busy)
        return kite_fail(&e, KITE_ERR_INVALID_ARG, "kite_session_load: the session is busy"), kite_error_export(&e, err, err_size);
    char *data = NULL;
    size_t size = 0;
    int st = kite_read_file(path, &data, &size, (size_t)1 << 40, &e);
    if (st) return kite_error_export(&e, err, err_size);
    kite_session_file_shape x = session_shape(s);
    kite_session_file_view view;
    st = kite_session_file_parse(data, size, &x, s->n_ctx, &view, &e);
    if (st) {
        char inner[sizeof e.msg];
        snprintf(inner, sizeof inner, "%s", e.msg);
        kite_fail(&e, st, "%s: %s", path, inner);
        free(data);
        return kite_error_export(&e, err, err_size);
    }
    int32_t n = view.n_tokens;
    const unsigned char *src = view.kv;
    for (int pass = 0; pass < 2; pass++) {
        char *base = pass == 0 ? s->kv.k : s->kv.v;
        for (int32_t l = 0; l < x.n_layers; l++)
            for (int32_t hd = 0; hd < s->kv.layer_kv_heads[l]; hd++) {
                const size_t row_bytes = s->kv.layer_row_bytes[l], block = row_bytes * (size_t)n;
                if (!kite_kv_is_ring(&s->kv, l)) {
                    memcpy(base + kite_kv_offset(&s->kv, l, hd, 0), src, block);
                } else {
                    /* The ring keeps the last positions (later ones land on earlier ones' rows). */
                    int32_t ring = s->kv.layer_rows[l];
                    for (int32_t p = n > ring ? n - ring : 0; p < n; p++)
                        memcpy(base + kite_kv_offset(&s->kv, l, hd, kite_kv_row(&s->kv, l, p)), src + row_bytes * (size_t)p,
                               row_bytes);
                }
                src += block;
            }
    }
    int32_t conv_from = n > x.conv_keep ? n - x.conv_keep : 0;
    for (int32_t l = 0; l < x.n_layers; l++) {
        if (s->kv.conv_index[l] < 0) continue;
        for (int32_t p = conv_from; p < n; p++) {
            memcpy(kite_kv_conv_row(&s->kv, l, p), src, sizeof(float) * (size_t)x.conv_dim);
            src += sizeof(float) * (size_t)x.conv_dim;
        }
    }
    s->kv.conv_held_from = conv_from; /* older conv rows were not saved */
    s->kv.ring_high = n;
    kite_dn_state *dn = s->kv.dn;
    if (dn) {
        int32_t hdr[4];
        memcpy(hdr, view.dn, sizeof hdr);
        const size_t nb = 2 * (size_t)dn->n_rec * dn->block_floats, nr = (size_t)dn->max_rows * dn->n_rec * dn->row_floats;
        memcpy(dn->blocks, view.dn + sizeof hdr, sizeof(float) * nb);
        memcpy(dn->rows, view.dn + sizeof hdr + sizeof(float) * nb, sizeof(float) * nr);
        dn->base = hdr[0] & 1;
        dn->head_ahead = (hdr[0] & 2) != 0;
        dn->base_pos = hdr[1];
        dn->n_rows = hdr[2];
        dn->n_tree = 0;
    }
    memcpy(s->history, view.tokens, sizeof(int32_t) * (size_t)n);
    s->n_past = n;
    s->unfed_token = -1;
    s->have_logits = false; /* the next kite_prompt computes them (give it at least one token) */
    free(data);
    return KITE_OK;
}
