/* Load-time work shared by every kernel set: validating a weight matrix, decoding blocks to their
 * integer form, and repacking rows into the interleaved layout described in kernels_internal.h. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "base/fp16.h"
#include "kernels/kernels_internal.h"

/* ---- integer decoding ------------------------------------------------------------------------------ */

void kite_decode_b32(uint32_t type, const void *block, kite_b32_ints *out) {
    const uint8_t *p = block;
    uint16_t h;
    memcpy(&h, p, 2);
    out->d = kite_fp16_to_f32(h);
    out->m = 0.0f;
    out->has_min = false;
    switch (type) {
    case KITE_TYPE_Q8_0:
        memcpy(out->v, p + 2, 32);
        break;
    case KITE_TYPE_Q4_0:
    case KITE_TYPE_Q4_1: {
        int offset = type == KITE_TYPE_Q4_0 ? 8 : 0;
        const uint8_t *qs = p + (type == KITE_TYPE_Q4_0 ? 2 : 4);
        if (type == KITE_TYPE_Q4_1) {
            memcpy(&h, p + 2, 2);
            out->m = kite_fp16_to_f32(h);
            out->has_min = true;
        }
        for (int j = 0; j < 16; j++) {
            out->v[j] = (int8_t)((qs[j] & 0x0F) - offset);
            out->v[j + 16] = (int8_t)((qs[j] >> 4) - offset);
        }
        break;
    }
    case KITE_TYPE_Q5_0:
    case KITE_TYPE_Q5_1: {
        int offset = type == KITE_TYPE_Q5_0 ? 16 : 0;
        size_t at = 2;
        if (type == KITE_TYPE_Q5_1) {
            memcpy(&h, p + 2, 2);
            out->m = kite_fp16_to_f32(h);
            out->has_min = true;
            at = 4;
        }
        uint32_t qh;
        memcpy(&qh, p + at, 4);
        const uint8_t *qs = p + at + 4;
        for (int j = 0; j < 16; j++) {
            int lo = (qs[j] & 0x0F) | (int)(((qh >> j) & 1u) << 4);
            int hi = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
            out->v[j] = (int8_t)(lo - offset);
            out->v[j + 16] = (int8_t)(hi - offset);
        }
        break;
    }
    default:
        memset(out->v, 0, sizeof out->v);
        out->d = 0.0f;
        break;
    }
}

static void scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4));
    }
}

void kite_decode_k(uint32_t type, const void *block, kite_k_ints *out) {
    memset(out, 0, sizeof *out);
    switch (type) {
    case KITE_TYPE_Q2_K: {
        kite_block_q2_K b;
        memcpy(&b, block, sizeof b);
        out->d = kite_fp16_to_f32(b.d);
        out->dmin = kite_fp16_to_f32(b.dmin);
        out->has_min = true;
        out->sub = 16;
        for (int s = 0; s < 16; s++) {
            out->sc[s] = b.scales[s] & 0xF;
            out->m[s] = b.scales[s] >> 4;
        }
        for (int e = 0; e < 256; e++) {
            int half = e / 128, w = e % 128, j = w / 32, l = w % 32;
            out->v[e] = (int8_t)((b.qs[32 * half + l] >> (2 * j)) & 3);
        }
        break;
    }
    case KITE_TYPE_Q3_K: {
        kite_block_q3_K b;
        memcpy(&b, block, sizeof b);
        out->d = kite_fp16_to_f32(b.d);
        out->sub = 16;
        for (int s = 0; s < 16; s++) {
            int lo = s < 8 ? (b.scales[s] & 0xF) : (b.scales[s - 8] >> 4);
            int hi = (b.scales[8 + s % 4] >> (2 * (s / 4))) & 3;
            out->sc[s] = (int16_t)((lo | (hi << 4)) - 32);
        }
        for (int e = 0; e < 256; e++) {
            int half = e / 128, w = e % 128, j = w / 32, l = w % 32;
            int low = (b.qs[32 * half + l] >> (2 * j)) & 3;
            int high = (b.hmask[l] >> (4 * half + j)) & 1;
            out->v[e] = (int8_t)(low - (high ? 0 : 4));
        }
        break;
    }
    case KITE_TYPE_Q4_K:
    case KITE_TYPE_Q5_K: {
        const uint8_t *p = block;
        uint16_t d, dmin;
        memcpy(&d, p, 2);
        memcpy(&dmin, p + 2, 2);
        const uint8_t *scales = p + 4;
        const uint8_t *qh = type == KITE_TYPE_Q5_K ? p + 16 : NULL;
        const uint8_t *qs = type == KITE_TYPE_Q5_K ? p + 48 : p + 16;
        out->d = kite_fp16_to_f32(d);
        out->dmin = kite_fp16_to_f32(dmin);
        out->has_min = true;
        out->sub = 32;
        for (int s = 0; s < 8; s++) {
            uint8_t sc, m;
            scale_min_k4(s, scales, &sc, &m);
            out->sc[s] = sc;
            out->m[s] = m;
        }
        for (int e = 0; e < 256; e++) {
            int chunk = e / 64, w = e % 64, l = w % 32, upper = w >= 32;
            int v = upper ? (qs[32 * chunk + l] >> 4) : (qs[32 * chunk + l] & 0xF);
            if (qh && (qh[l] >> (2 * chunk + upper)) & 1) v += 16;
            out->v[e] = (int8_t)v;
        }
        break;
    }
    case KITE_TYPE_Q6_K: {
        kite_block_q6_K b;
        memcpy(&b, block, sizeof b);
        out->d = kite_fp16_to_f32(b.d);
        out->sub = 16;
        for (int s = 0; s < 16; s++) out->sc[s] = b.scales[s];
        for (int e = 0; e < 256; e++) {
            int h = e / 128, w = e % 128, quarter = w / 32, l = w % 32;
            uint8_t lbyte = b.ql[64 * h + l + (quarter & 1) * 32];
            int low = quarter < 2 ? (lbyte & 0xF) : (lbyte >> 4);
            int high = (b.qh[32 * h + l] >> (2 * quarter)) & 3;
            out->v[e] = (int8_t)((low | (high << 4)) - 32);
        }
        break;
    }
    default:
        break;
    }
}

/* ---- activation buffer sizes ------------------------------------------------------------------------ */

size_t kite_act_bytes_common(uint32_t type, int64_t cols, int32_t n) {
    kite_family f = kite_type_family(type);
    if (f != KITE_FAMILY_B32 && f != KITE_FAMILY_K) return 0;
    if (n <= 0 || cols <= 0) return 0;
    kite_act_geom g = kite_act_geometry(f, cols);
    return g.row_bytes * (size_t)n;
}

/* ---- validation ---------------------------------------------------------------------------------------- */

int kite_check_matrix(const kite_tensor *t, kite_error *e) {
    if (!t || !t->data) return kite_fail(e, KITE_ERR_INVALID_ARG, "kernels: matrix tensor is NULL or has no data");
    const kite_type_traits *tr = kite_type_get(t->type);
    if (!tr || kite_type_family(t->type) == KITE_FAMILY_NONE)
        return kite_fail(e, KITE_ERR_UNSUPPORTED, "kernels: tensor %s: type %s (%u) has no matrix kernel", t->name,
                         tr ? tr->name : "?", t->type);
    int64_t cols = t->ne[0], rows = t->ne[1];
    if (cols <= 0 || rows <= 0 || t->ne[2] != 1 || t->ne[3] != 1 || cols > ((int64_t)1 << 32) || rows > ((int64_t)1 << 32))
        return kite_fail(e, KITE_ERR_FORMAT, "kernels: tensor %s: shape [%lld, %lld, %lld, %lld] is not a matrix kite runs",
                         t->name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3]);
    if (cols % tr->block_size != 0)
        return kite_fail(e, KITE_ERR_FORMAT, "kernels: tensor %s: %lld columns is not a multiple of the %s block (%d)",
                         t->name, (long long)cols, tr->name, tr->block_size);
    if (kite_is_trellis(t->type) && rows % KT_ROWS != 0)
        return kite_fail(e, KITE_ERR_FORMAT, "kernels: tensor %s: %lld rows is not a multiple of the %s row group (%d)",
                         t->name, (long long)rows, tr->name, KT_ROWS);
    size_t row_bytes = kite_type_row_bytes(t->type, cols);
    /* rows <= 2^32 and row_bytes <= 2^34: the product fits in 64 bits. */
    if (row_bytes == 0 || t->n_bytes < (uint64_t)row_bytes * (uint64_t)rows)
        return kite_fail(e, KITE_ERR_FORMAT, "kernels: tensor %s: %llu bytes hold fewer than %lld rows of %zu bytes", t->name,
                         (unsigned long long)t->n_bytes, (long long)rows, row_bytes);
    return KITE_OK;
}

/* ---- interleaved packing ---------------------------------------------------------------------------------- */

bool kite_pack_geometry(uint32_t type, int64_t rows, int64_t cols, int32_t G, kite_pack_geom *g) {
    memset(g, 0, sizeof *g);
    g->G = G;
    g->n_groups = (rows + G - 1) / G;
    size_t V = 4 * (size_t)G; /* bytes of one vector */
    switch (type) {
    case KITE_TYPE_F32: g->n_blocks = cols; g->q_bytes = 4 * (size_t)G; break;
    case KITE_TYPE_F16:
    case KITE_TYPE_BF16: g->n_blocks = cols; g->q_bytes = 2 * (size_t)G; break;
    case KITE_TYPE_Q8_0: g->n_blocks = cols / 32; g->q_bytes = 8 * V; g->s_bytes = 2 * (size_t)G; break;
    case KITE_TYPE_Q4_0: g->n_blocks = cols / 32; g->q_bytes = 4 * V; g->s_bytes = 2 * (size_t)G; break;
    case KITE_TYPE_Q4_1: g->n_blocks = cols / 32; g->q_bytes = 4 * V; g->s_bytes = 4 * (size_t)G; break;
    case KITE_TYPE_Q5_0: g->n_blocks = cols / 32; g->q_bytes = 5 * V; g->s_bytes = 2 * (size_t)G; break;
    case KITE_TYPE_Q5_1: g->n_blocks = cols / 32; g->q_bytes = 5 * V; g->s_bytes = 4 * (size_t)G; break;
    case KITE_TYPE_Q2_K: g->n_blocks = cols / 256; g->q_bytes = 16 * V; g->s_bytes = 20 * (size_t)G; break;
    case KITE_TYPE_Q3_K: g->n_blocks = cols / 256; g->q_bytes = 24 * V; g->s_bytes = 18 * (size_t)G; break;
    case KITE_TYPE_Q4_K: g->n_blocks = cols / 256; g->q_bytes = 32 * V; g->s_bytes = 20 * (size_t)G; break;
    case KITE_TYPE_Q5_K: g->n_blocks = cols / 256; g->q_bytes = 40 * V; g->s_bytes = 20 * (size_t)G; break;
    case KITE_TYPE_Q6_K: g->n_blocks = cols / 256; g->q_bytes = 48 * V; g->s_bytes = 18 * (size_t)G; break;
    default: return false;
    }
    g->block_bytes = g->q_bytes + g->s_bytes;
    g->group_bytes = kite_round_up((size_t)g->n_blocks * g->block_bytes, 64);
    return true;
}

/* Puts the G x 32 int8 values of one column range (32 columns, groups j0..j0+7 relative to `base`)
 * into vectors. vals[r][c] for c in [0, 32). */
static void put_nibble_vectors(uint8_t *q, int32_t G, const uint8_t (*nib)[32]) {
    /* 4 vectors; vector p: low nibble = column group p, high nibble = column group p + 4. */
    for (int p = 0; p < 4; p++)
        for (int32_t r = 0; r < G; r++)
            for (int i = 0; i < 4; i++)
                q[(size_t)p * 4 * G + 4 * r + i] = (uint8_t)((nib[r][4 * p + i] & 0xF) | ((nib[r][16 + 4 * p + i] & 0xF) << 4));
}

static void pack_group(uint32_t type, const kite_pack_geom *g, const uint8_t *const *row_src, size_t row_bytes,
                       uint32_t flags, uint8_t *dst) {
    const int32_t G = g->G;
    const size_t V = 4 * (size_t)G;
    /* Block blk's quant bytes at dst + blk * block_bytes, its scales right after them. */
    uint8_t *qreg = dst, *sreg = dst + g->q_bytes;
    const size_t stride = g->block_bytes;
    (void)row_bytes;
    uint8_t nib[16][32];
    /* Fast paths: these layouts are byte shuffles of the stored rows (q4_0's stored nibble pairs are
     * exactly the vector bytes: byte 4p + i of a row holds elements 4p + i and 16 + 4p + i). */
    if (type == KITE_TYPE_F32 || type == KITE_TYPE_F16 || type == KITE_TYPE_BF16) {
        const size_t es = type == KITE_TYPE_F32 ? 4 : 2;
        /* Column tiles of 64 keep the G source streams and the destination lines in L1. */
        for (int64_t k0 = 0; k0 < g->n_blocks; k0 += 64) {
            int64_t k1 = k0 + 64 < g->n_blocks ? k0 + 64 : g->n_blocks;
            for (int32_t r = 0; r < G; r++) {
                if (!row_src[r]) continue;
                for (int64_t k = k0; k < k1; k++)
                    memcpy(qreg + (size_t)k * stride + es * (size_t)r, row_src[r] + es * (size_t)k, es);
            }
        }
        return;
    }
    if (type == KITE_TYPE_Q4_0 || type == KITE_TYPE_Q8_0) {
        const bool q8 = type == KITE_TYPE_Q8_0;
        const size_t bb = q8 ? 34 : 18;
        const int words = q8 ? 8 : 4;
        const uint32_t flip = (q8 && (flags & KITE_PACK_Q8_OFFSET)) ? 0x80808080u : 0; /* v + 128 as u8 = v ^ 0x80 */
        for (int64_t blk = 0; blk < g->n_blocks; blk++) {
            for (int32_t r = 0; r < G; r++) {
                if (!row_src[r]) continue;
                const uint8_t *src = row_src[r] + (size_t)blk * bb;
                uint8_t *q = qreg + (size_t)blk * stride;
                memcpy(sreg + (size_t)blk * stride + 2 * (size_t)r, src, 2);
                for (int j = 0; j < words; j++) {
                    uint32_t word;
                    memcpy(&word, src + 2 + 4 * j, 4);
                    word ^= flip;
                    memcpy(q + (size_t)j * V + 4 * (size_t)r, &word, 4);
                }
            }
        }
        /* Padding rows: q4_0 nibble 8 and q8_0 offset 128 both decode to 0 (and d = 0 anyway). */
        return;
    }
    for (int64_t blk = 0; blk < g->n_blocks; blk++) {
        uint8_t *q = qreg + (size_t)blk * stride, *s = sreg + (size_t)blk * stride;
        switch (type) {
        case KITE_TYPE_F32:
        case KITE_TYPE_F16:
        case KITE_TYPE_BF16: {
            size_t es = type == KITE_TYPE_F32 ? 4 : 2;
            for (int32_t r = 0; r < G; r++)
                if (row_src[r]) memcpy(q + (size_t)r * es, row_src[r] + (size_t)blk * es, es);
            break;
        }
        case KITE_TYPE_Q8_0:
        case KITE_TYPE_Q4_0: {
            kite_b32_ints b;
            uint8_t vals[16][32];
            for (int32_t r = 0; r < G; r++) {
                uint16_t dh = 0;
                if (row_src[r]) {
                    const uint8_t *blkp = row_src[r] + (size_t)blk * (type == KITE_TYPE_Q8_0 ? 34 : 18);
                    kite_decode_b32(type, blkp, &b);
                    memcpy(&dh, blkp, 2);
                } else {
                    memset(&b, 0, sizeof b);
                    if (type == KITE_TYPE_Q4_0) memset(b.v, -8, 32); /* zero rows: nibble 8 means 0 */
                }
                for (int c = 0; c < 32; c++) {
                    if (type == KITE_TYPE_Q4_0) vals[r][c] = (uint8_t)(b.v[c] + 8);
                    else vals[r][c] = (uint8_t)((flags & KITE_PACK_Q8_OFFSET) ? b.v[c] + 128 : b.v[c]);
                }
                memcpy(s + 2 * (size_t)r, &dh, 2);
            }
            if (type == KITE_TYPE_Q4_0) {
                put_nibble_vectors(q, G, (const uint8_t(*)[32])vals);
            } else {
                for (int j = 0; j < 8; j++)
                    for (int32_t r = 0; r < G; r++) memcpy(q + (size_t)j * V + 4 * r, &vals[r][4 * j], 4);
            }
            break;
        }
        case KITE_TYPE_Q4_1:
        case KITE_TYPE_Q5_0:
        case KITE_TYPE_Q5_1: {
            const size_t bb = type == KITE_TYPE_Q4_1 ? 20 : type == KITE_TYPE_Q5_0 ? 22 : 24;
            const int offset = type == KITE_TYPE_Q5_0 ? 16 : 0;
            const bool has_min = type != KITE_TYPE_Q5_0;
            uint8_t hb[16][32];
            for (int32_t r = 0; r < G; r++) {
                kite_b32_ints b;
                uint16_t dh = 0, mh = 0;
                if (row_src[r]) {
                    const uint8_t *blkp = row_src[r] + (size_t)blk * bb;
                    kite_decode_b32(type, blkp, &b);
                    memcpy(&dh, blkp, 2);
                    if (has_min) memcpy(&mh, blkp + 2, 2);
                } else {
                    memset(&b, 0, sizeof b);
                    memset(b.v, -offset, sizeof b.v);
                }
                for (int c = 0; c < 32; c++) {
                    uint8_t u = (uint8_t)(b.v[c] + offset);
                    nib[r][c] = u & 0xF;
                    hb[r][c] = u >> 4;
                }
                memcpy(s + 2 * (size_t)r, &dh, 2);
                if (has_min) memcpy(s + 2 * (size_t)G + 2 * (size_t)r, &mh, 2);
            }
            put_nibble_vectors(q, G, (const uint8_t(*)[32])nib);
            if (type != KITE_TYPE_Q4_1)
                for (int32_t r = 0; r < G; r++)
                    for (int i = 0; i < 4; i++) {
                        uint8_t byte = 0;
                        for (int j = 0; j < 8; j++) byte |= (uint8_t)(hb[r][4 * j + i] << j);
                        q[4 * V + 4 * (size_t)r + i] = byte;
                    }
            break;
        }
        case KITE_TYPE_Q2_K:
        case KITE_TYPE_Q3_K: {
            const bool q3 = type == KITE_TYPE_Q3_K;
            const size_t bb = q3 ? 110 : 84, d_at = q3 ? 108 : 80;
            uint8_t u[16][256]; /* stored unsigned values: q2_K v, q3_K v + 4 */
            for (int32_t r = 0; r < G; r++) {
                kite_k_ints k;
                memset(&k, 0, sizeof k);
                uint16_t dh = 0, dminh = 0;
                if (row_src[r]) {
                    const uint8_t *blkp = row_src[r] + (size_t)blk * bb;
                    kite_decode_k(type, blkp, &k);
                    memcpy(&dh, blkp + d_at, 2);
                    if (!q3) memcpy(&dminh, blkp + d_at + 2, 2);
                } else if (q3) {
                    memset(k.v, -4, sizeof k.v);
                }
                for (int e = 0; e < 256; e++) u[r][e] = (uint8_t)(k.v[e] + (q3 ? 4 : 0));
                for (int sub = 0; sub < 16; sub++) /* pairs per row: q3_K int8 sc, q2_K the file's sc | m << 4 */
                    s[(size_t)(sub / 2) * 2 * G + 2 * (size_t)r + sub % 2] =
                        q3 ? (uint8_t)(int8_t)k.sc[sub] : (uint8_t)(k.sc[sub] | k.m[sub] << 4);
                memcpy(s + 16 * (size_t)G + 2 * (size_t)r, &dh, 2);
                if (!q3) memcpy(s + 18 * (size_t)G + 2 * (size_t)r, &dminh, 2);
            }
            for (int sub = 0; sub < 16; sub++) {
                /* the low 2 bits of column group 4 sub + j in bits 2j..2j+1 */
                uint8_t *lo = q + (size_t)(q3 ? 3 * (sub / 2) + sub % 2 : sub) * V;
                for (int32_t r = 0; r < G; r++)
                    for (int i = 0; i < 4; i++) {
                        uint8_t byte = 0;
                        for (int j = 0; j < 4; j++) byte |= (uint8_t)((u[r][16 * sub + 4 * j + i] & 3) << (2 * j));
                        lo[4 * (size_t)r + (size_t)i] = byte;
                    }
            }
            if (q3)
                for (int t = 0; t < 8; t++) { /* the high bit of column group 8t + k in bit k */
                    uint8_t *hv = q + (size_t)(3 * t + 2) * V;
                    for (int32_t r = 0; r < G; r++)
                        for (int i = 0; i < 4; i++) {
                            uint8_t byte = 0;
                            for (int k = 0; k < 8; k++) byte |= (uint8_t)((u[r][32 * t + 4 * k + i] >> 2) << k);
                            hv[4 * (size_t)r + (size_t)i] = byte;
                        }
                }
            break;
        }
        case KITE_TYPE_Q4_K:
        case KITE_TYPE_Q5_K:
        case KITE_TYPE_Q6_K: {
            size_t bb = type == KITE_TYPE_Q4_K ? 144 : type == KITE_TYPE_Q5_K ? 176 : 210;
            static const kite_k_ints zero_k = {0};
            uint8_t u[16][256];     /* stored unsigned values: q4_K/q5_K v, q6_K v + 32 */
            int16_t sc[16][16], mn[16][16];
            uint16_t dh[16], dminh[16];
            for (int32_t r = 0; r < G; r++) {
                kite_k_ints k = zero_k;
                dh[r] = dminh[r] = 0;
                if (row_src[r]) {
                    const uint8_t *blkp = row_src[r] + (size_t)blk * bb;
                    kite_decode_k(type, blkp, &k);
                    if (type == KITE_TYPE_Q6_K) {
                        memcpy(&dh[r], blkp + 208, 2);
                    } else {
                        memcpy(&dh[r], blkp, 2);
                        memcpy(&dminh[r], blkp + 2, 2);
                    }
                } else if (type == KITE_TYPE_Q6_K) {
                    memset(k.v, -32, sizeof k.v);
                }
                for (int e = 0; e < 256; e++) u[r][e] = (uint8_t)(k.v[e] + (type == KITE_TYPE_Q6_K ? 32 : 0));
                memcpy(sc[r], k.sc, sizeof sc[r]);
                memcpy(mn[r], k.m, sizeof mn[r]);
            }
            if (type == KITE_TYPE_Q6_K) {
                for (int t = 0; t < 8; t++) { /* 32 columns at a time */
                    uint8_t *qt = q + (size_t)t * 6 * V;
                    for (int32_t r = 0; r < G; r++)
                        for (int c = 0; c < 32; c++) nib[r][c] = u[r][32 * t + c] & 0xF;
                    put_nibble_vectors(qt, G, (const uint8_t(*)[32])nib);
                    for (int h = 0; h < 2; h++)
                        for (int32_t r = 0; r < G; r++)
                            for (int i = 0; i < 4; i++) {
                                uint8_t byte = 0;
                                for (int j = 0; j < 4; j++)
                                    byte |= (uint8_t)((u[r][32 * t + 4 * (4 * h + j) + i] >> 4) << (2 * j));
                                qt[(size_t)(4 + h) * V + 4 * r + i] = byte;
                            }
                }
                for (int p = 0; p < 8; p++)
                    for (int32_t r = 0; r < G; r++) {
                        s[(size_t)p * 2 * G + 2 * r] = (uint8_t)(int8_t)sc[r][2 * p];
                        s[(size_t)p * 2 * G + 2 * r + 1] = (uint8_t)(int8_t)sc[r][2 * p + 1];
                    }
                memcpy(s + 16 * (size_t)G, dh, 2 * (size_t)G);
            } else {
                for (int sb = 0; sb < 8; sb++) {
                    for (int32_t r = 0; r < G; r++)
                        for (int c = 0; c < 32; c++) nib[r][c] = u[r][32 * sb + c] & 0xF;
                    put_nibble_vectors(q + (size_t)sb * 4 * V, G, (const uint8_t(*)[32])nib);
                }
                if (type == KITE_TYPE_Q5_K) {
                    uint8_t *hv = q + 32 * V;
                    for (int sb = 0; sb < 8; sb++)
                        for (int32_t r = 0; r < G; r++)
                            for (int i = 0; i < 4; i++) {
                                uint8_t byte = 0;
                                for (int j = 0; j < 8; j++) byte |= (uint8_t)((u[r][32 * sb + 4 * j + i] >> 4) << j);
                                hv[(size_t)sb * V + 4 * r + i] = byte;
                            }
                }
                for (int p = 0; p < 4; p++)
                    for (int32_t r = 0; r < G; r++) {
                        s[(size_t)p * 2 * G + 2 * r] = (uint8_t)sc[r][2 * p];
                        s[(size_t)p * 2 * G + 2 * r + 1] = (uint8_t)sc[r][2 * p + 1];
                        s[8 * (size_t)G + (size_t)p * 2 * G + 2 * r] = (uint8_t)mn[r][2 * p];
                        s[8 * (size_t)G + (size_t)p * 2 * G + 2 * r + 1] = (uint8_t)mn[r][2 * p + 1];
                    }
                memcpy(s + 16 * (size_t)G, dh, 2 * (size_t)G);
                memcpy(s + 18 * (size_t)G, dminh, 2 * (size_t)G);
            }
            break;
        }
        default:
            break;
        }
    }
}

/* Packed weights live for the model's lifetime and are streamed on every token: large ones go in
 * transparent huge pages where the kernel offers them (fewer page faults at load, which are costly in
 * VMs, and fewer TLB misses while streaming). */
void *kite_alloc_weights(size_t bytes) {
    const size_t huge = (size_t)2 << 20, page = 4096;
    if (bytes >= huge && bytes <= SIZE_MAX - huge) {
        /* 2 MiB-aligned start; the length is only rounded to a page, so the tail past the last whole
         * huge page stays in small pages instead of wasting most of a huge page per matrix. */
        size_t rounded = kite_round_up(bytes, page);
        /* posix_memalign: C11's aligned_alloc wants the size to be a multiple of the alignment. */
        void *p = NULL;
        if (posix_memalign(&p, huge, rounded) != 0) p = NULL;
#ifdef MADV_HUGEPAGE
        if (p) (void)madvise(p, rounded, MADV_HUGEPAGE); /* advice only */
#endif
        return p;
    }
    return aligned_alloc(64, kite_round_up(bytes, 64));
}

int kite_weight_arena_init(kite_weight_arena *a, size_t capacity, kite_error *e) {
    memset(a, 0, sizeof *a);
    const size_t huge = (size_t)2 << 20;
    if (capacity == 0) return KITE_OK;
    if (capacity > SIZE_MAX - huge) return kite_fail(e, KITE_ERR_NOMEM, "kernels: %zu bytes of weights is too large", capacity);
    size_t rounded = kite_round_up(capacity, huge);
    void *p = NULL;
    if (posix_memalign(&p, huge, rounded) != 0 || !p)
        return kite_fail(e, KITE_ERR_NOMEM, "kernels: out of memory for %.1f MiB of packed weights", (double)rounded / 1048576.0);
#ifdef MADV_HUGEPAGE
    (void)madvise(p, rounded, MADV_HUGEPAGE); /* advice only */
#endif
    a->base = p;
    a->capacity = rounded;
    return KITE_OK;
}

void *kite_weight_arena_take(kite_weight_arena *a, size_t bytes) {
    if (!a || !a->base) return NULL;
    size_t at = kite_round_up(a->used, 64);
    if (at > a->capacity || bytes > a->capacity - at) return NULL;
    a->used = at + bytes;
    return a->base + at;
}

void kite_weight_arena_free(kite_weight_arena *a) {
    if (!a) return;
    free(a->base);
    memset(a, 0, sizeof *a);
}

/* Checks t and G and sizes the interleaved packing: its geometry and total bytes. */
static int interleaved_size(const kite_tensor *t, int32_t G, kite_pack_geom *g, size_t *total, kite_error *e) {
    int st = kite_check_matrix(t, e); /* rows >= 1, so n_groups >= 1 below */
    if (st) return st;
    if (G < 1 || G > 16) return kite_fail(e, KITE_ERR_INVALID_ARG, "kernels: row interleave %d out of range", G);
    if (!kite_pack_geometry(t->type, t->ne[1], t->ne[0], G, g))
        return kite_fail(e, KITE_ERR_UNSUPPORTED, "kernels: tensor %s: no interleaved layout for type %u", t->name, t->type);
    if (g->group_bytes > SIZE_MAX / (size_t)g->n_groups)
        return kite_fail(e, KITE_ERR_NOMEM, "kernels: tensor %s is too large to pack", t->name);
    *total = g->group_bytes * (size_t)g->n_groups;
    return KITE_OK;
}

size_t kite_pack_interleaved_bytes(const kite_tensor *t, int32_t G) {
    kite_pack_geom g;
    size_t total = 0;
    return interleaved_size(t, G, &g, &total, NULL) == KITE_OK ? total : 0;
}

int kite_pack_interleaved(const kite_tensor *t, int32_t G, uint32_t flags, kite_weight_arena *arena, kite_packed_matrix *out,
                          kite_error *e) {
    memset(out, 0, sizeof *out);
    kite_pack_geom g;
    size_t total = 0;
    int st = interleaved_size(t, G, &g, &total, e);
    if (st) return st;
    void *mem = kite_weight_arena_take(arena, total), *owned = NULL;
    if (!mem) mem = owned = kite_alloc_weights(total);
    if (!mem) return kite_fail(e, KITE_ERR_NOMEM, "kernels: out of memory packing %s (%zu bytes)", t->name, total);
    memset(mem, 0, total);
    size_t row_bytes = kite_type_row_bytes(t->type, t->ne[0]);
    const uint8_t *base = t->data;
    const uint8_t *row_src[16];
    for (int64_t grp = 0; grp < g.n_groups; grp++) {
        for (int32_t r = 0; r < G; r++) {
            int64_t row = grp * G + r;
            row_src[r] = row < t->ne[1] ? base + (size_t)row * row_bytes : NULL;
        }
        pack_group(t->type, &g, row_src, row_bytes, flags, (uint8_t *)mem + (size_t)grp * g.group_bytes);
    }
    out->type = t->type;
    out->layout = (uint32_t)KITE_LAYOUT_INTERLEAVED | (uint32_t)G | flags;
    out->rows = t->ne[1];
    out->cols = t->ne[0];
    out->data = mem;
    out->n_bytes = total;
    out->owned = owned;
    return KITE_OK;
}

void kite_packed_matrix_free(kite_packed_matrix *m) {
    if (!m) return;
    free(m->owned);
    memset(m, 0, sizeof *m);
}
