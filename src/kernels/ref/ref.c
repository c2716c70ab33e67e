/* The scalar reference kernel set: the definition of every product (see kernels_internal.h for the
 * math). Weights stay in their stored layout (a view of the tensor, nothing copied); each block is
 * decoded to its integer form once per row and used for all activation rows. Floats are combined only
 * with fmaf and plain multiplications in separate statements, so no compiler contraction setting can
 * change the bits. */
#include <math.h>
#include <string.h>

#include "base/fp16.h"
#include "kernels/kernels_internal.h"

/* ---- activation quantization (the definition) --------------------------------------------------------- */

static inline int8_t quant_one(float x, float id) {
    float v = x * id;
    v = fminf(127.0f, fmaxf(-127.0f, v)); /* NaN becomes 127 or -127: defined, not meaningful */
    return (int8_t)lrintf(v);              /* default rounding mode: nearest, ties to even */
}

/* Quantizes len floats to q with d = amax / 127; returns d. */
static float quant_block(const float *x, int len, int8_t *q) {
    float amax = 0.0f;
    for (int j = 0; j < len; j++) {
        float a = fabsf(x[j]);
        if (a > amax) amax = a;
    }
    float d = amax / 127.0f;
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < len; j++) q[j] = quant_one(x[j], id);
    return d;
}

void kite_ref_quantize_act(uint32_t type, const float *x, int64_t cols, int32_t b0, int32_t b1, void *act) {
    kite_family f = kite_type_family(type);
    if (f != KITE_FAMILY_B32 && f != KITE_FAMILY_K) return;
    kite_act_geom g = kite_act_geometry(f, cols);
    const bool rotate = kite_kt_is_rotated(type); /* a rotated trellis type: blocks in its basis (quant/trellis.h) */
    float rotated[256];
    for (int32_t b = b0; b < b1; b++) {
        uint8_t *row = (uint8_t *)act + (size_t)b * g.row_bytes;
        const float *xr = x + (size_t)b * (size_t)cols;
        int8_t *qs = (int8_t *)row;
        for (int64_t blk = 0; blk < g.n_blocks; blk++) {
            int8_t *q = qs + blk * g.block;
            const float *xb = xr + blk * g.block;
            if (rotate) {
                kite_kt_rotate(xb, rotated);
                xb = rotated;
            }
            float d = quant_block(xb, g.block, q);
            memcpy(row + g.off_d + (size_t)blk * 4, &d, 4);
            if (f == KITE_FAMILY_B32) {
                int32_t sum = 0;
                for (int j = 0; j < 32; j++) sum += q[j];
                memcpy(row + g.off_sum + (size_t)blk * 4, &sum, 4);
            } else {
                for (int s = 0; s < 16; s++) {
                    int16_t sum = 0;
                    for (int j = 0; j < 16; j++) sum = (int16_t)(sum + q[16 * s + j]);
                    memcpy(row + g.off_sum + ((size_t)blk * 16 + (size_t)s) * 2, &sum, 2);
                }
                for (int s = 0; s < 8; s++) {
                    int16_t sum = 0;
                    for (int j = 0; j < 32; j++) sum = (int16_t)(sum + q[32 * s + j]);
                    memcpy(row + g.off_sum32 + ((size_t)blk * 8 + (size_t)s) * 2, &sum, 2);
                }
            }
        }
    }
}

/* ---- packing: a view ---------------------------------------------------------------------------------------- */

int kite_ref_pack(const kite_tensor *t, kite_weight_arena *arena, kite_packed_matrix *out, kite_error *e) {
    (void)arena;
    memset(out, 0, sizeof *out);
    int st = kite_check_matrix(t, e);
    if (st) return st;
    out->type = t->type;
    out->layout = KITE_LAYOUT_RAW;
    out->rows = t->ne[1];
    out->cols = t->ne[0];
    out->data = t->data;
    out->n_bytes = kite_type_row_bytes(t->type, t->ne[0]) * (size_t)t->ne[1];
    out->owned = NULL;
    return KITE_OK;
}

size_t kite_ref_pack_bytes(const kite_tensor *t) {
    (void)t;
    return 0;
}

static size_t ref_act_bytes(uint32_t type, int64_t cols, int32_t n) { return kite_act_bytes_common(type, cols, n); }

/* ---- products ---------------------------------------------------------------------------------------------- */

enum { REF_BATCH = 64 }; /* activation rows per pass over a weight row */

/* fmaf is correctly rounded whether libm computes it or an FMA instruction does, so the products can
 * use the instruction where the CPU has one (a clone picked at load time) with the same bits; without
 * it, baseline x86-64 calls libm's fmaf, which makes the reference several times slower. */
#if defined(__x86_64__) && ((defined(__GNUC__) && !defined(__clang__)) || (defined(__clang__) && __clang_major__ >= 14))
#define REF_CLONES __attribute__((target_clones("fma", "default")))
#else
#define REF_CLONES
#endif

static float load_f32(const void *p) { float v; memcpy(&v, p, 4); return v; }

/* Rows are taken REF_ROWS at a time so their independent fma chains overlap (each (row, b) still
 * runs its own chain over k in order). */
enum { REF_ROWS = 8 };

static inline float weight_at(uint32_t type, const uint8_t *row, int64_t k) {
    if (type == KITE_TYPE_F32) return load_f32(row + 4 * k);
    uint16_t h;
    memcpy(&h, row + 2 * k, 2);
    return type == KITE_TYPE_F16 ? kite_fp16_to_f32(h) : kite_bf16_to_f32(h);
}

REF_CLONES static void matmul_float(const kite_packed_matrix *w, const float *x, int32_t n, float *y, int64_t y_stride,
                                    int64_t r0, int64_t r1) {
    const int64_t cols = w->cols;
    const size_t es = w->type == KITE_TYPE_F32 ? 4 : 2;
    for (int64_t ra = r0; ra < r1; ra += REF_ROWS) {
        const int nr = r1 - ra < REF_ROWS ? (int)(r1 - ra) : REF_ROWS;
        for (int32_t b0 = 0; b0 < n; b0 += REF_BATCH) {
            int32_t nb = n - b0 < REF_BATCH ? n - b0 : REF_BATCH;
            float acc[REF_ROWS][REF_BATCH];
            memset(acc, 0, sizeof acc);
            for (int64_t k = 0; k < cols; k++) {
                for (int rr = 0; rr < nr; rr++) {
                    const float wk = weight_at(w->type, (const uint8_t *)w->data + (size_t)(ra + rr) * (size_t)cols * es, k);
                    for (int32_t b = 0; b < nb; b++)
                        acc[rr][b] = fmaf(wk, x[(size_t)(b0 + b) * (size_t)cols + (size_t)k], acc[rr][b]);
                }
            }
            for (int rr = 0; rr < nr; rr++)
                for (int32_t b = 0; b < nb; b++) y[(int64_t)(b0 + b) * y_stride + ra + rr] = acc[rr][b];
        }
    }
}

REF_CLONES static void matmul_b32(const kite_packed_matrix *w, const uint8_t *act, int32_t n, float *y, int64_t y_stride,
                       int64_t r0, int64_t r1) {
    const kite_type_traits *tr = kite_type_get(w->type);
    const kite_act_geom g = kite_act_geometry(KITE_FAMILY_B32, w->cols);
    const size_t row_bytes = kite_type_row_bytes(w->type, w->cols);
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *row = (const uint8_t *)w->data + (size_t)r * row_bytes;
        for (int32_t b0 = 0; b0 < n; b0 += REF_BATCH) {
            int32_t nb = n - b0 < REF_BATCH ? n - b0 : REF_BATCH;
            float acc[REF_BATCH] = {0};
            for (int64_t blk = 0; blk < g.n_blocks; blk++) {
                kite_b32_ints wb;
                kite_decode_b32(w->type, row + (size_t)blk * tr->block_bytes, &wb);
                for (int32_t b = 0; b < nb; b++) {
                    const uint8_t *arow = act + (size_t)(b0 + b) * g.row_bytes;
                    const int8_t *q = (const int8_t *)arow + blk * 32;
                    int32_t isum = 0;
                    for (int j = 0; j < 32; j++) isum += wb.v[j] * q[j];
                    float dx = load_f32(arow + g.off_d + (size_t)blk * 4);
                    float scale = wb.d * dx;
                    acc[b] = fmaf((float)isum, scale, acc[b]);
                    if (wb.has_min) {
                        int32_t xsum;
                        memcpy(&xsum, arow + g.off_sum + (size_t)blk * 4, 4);
                        float mscale = wb.m * dx;
                        acc[b] = fmaf((float)xsum, mscale, acc[b]);
                    }
                }
            }
            for (int32_t b = 0; b < nb; b++) y[(int64_t)(b0 + b) * y_stride + r] = acc[b];
        }
    }
}

REF_CLONES static void matmul_k(const kite_packed_matrix *w, const uint8_t *act, int32_t n, float *y, int64_t y_stride, int64_t r0,
                     int64_t r1) {
    const kite_type_traits *tr = kite_type_get(w->type);
    const kite_act_geom g = kite_act_geometry(KITE_FAMILY_K, w->cols);
    const size_t row_bytes = kite_type_row_bytes(w->type, w->cols);
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *row = (const uint8_t *)w->data + (size_t)r * row_bytes;
        for (int32_t b0 = 0; b0 < n; b0 += REF_BATCH) {
            int32_t nb = n - b0 < REF_BATCH ? n - b0 : REF_BATCH;
            float acc[REF_BATCH] = {0};
            for (int64_t blk = 0; blk < g.n_blocks; blk++) {
                kite_k_ints kb;
                kite_decode_k(w->type, row + (size_t)blk * tr->block_bytes, &kb);
                const int n_sub = 256 / kb.sub;
                for (int32_t b = 0; b < nb; b++) {
                    const uint8_t *arow = act + (size_t)(b0 + b) * g.row_bytes;
                    const int8_t *q = (const int8_t *)arow + blk * 256;
                    int32_t A = 0, B = 0;
                    for (int s = 0; s < n_sub; s++) {
                        int32_t part = 0;
                        for (int j = 0; j < kb.sub; j++) part += kb.v[s * kb.sub + j] * q[s * kb.sub + j];
                        A += kb.sc[s] * part;
                        if (kb.has_min) {
                            int16_t xs;
                            if (kb.sub == 16) memcpy(&xs, arow + g.off_sum + ((size_t)blk * 16 + (size_t)s) * 2, 2);
                            else memcpy(&xs, arow + g.off_sum32 + ((size_t)blk * 8 + (size_t)s) * 2, 2);
                            B += kb.m[s] * xs;
                        }
                    }
                    float dx = load_f32(arow + g.off_d + (size_t)blk * 4);
                    float scale = kb.d * dx;
                    acc[b] = fmaf((float)A, scale, acc[b]);
                    if (kb.has_min) {
                        float mscale = kb.dmin * dx;
                        acc[b] = fmaf(-(float)B, mscale, acc[b]);
                    }
                }
            }
            for (int32_t b = 0; b < nb; b++) y[(int64_t)(b0 + b) * y_stride + r] = acc[b];
        }
    }
}

void kite_ref_matmul(const kite_packed_matrix *w, const void *act, const float *x, int32_t n, float *y,
                     int64_t y_stride, int64_t r0, int64_t r1) {
    if (r0 < 0) r0 = 0;
    if (r1 > w->rows) r1 = w->rows;
    if (r0 >= r1 || n <= 0) return;
    if (kite_is_trellis(w->type)) {
        kite_ref_matmul_trellis(w, act, n, y, y_stride, r0, r1);
        return;
    }
    switch (kite_type_family(w->type)) {
    case KITE_FAMILY_FLOAT: matmul_float(w, x, n, y, y_stride, r0, r1); break;
    case KITE_FAMILY_B32: matmul_b32(w, act, n, y, y_stride, r0, r1); break;
    case KITE_FAMILY_K: matmul_k(w, act, n, y, y_stride, r0, r1); break;
    default: break;
    }
}

/* ---- attention ------------------------------------------------------------------------------------------- */

/* q.k with 16 lanes accumulated in column order and a fixed pairwise reduction (the shape the SIMD
 * levels follow, so they stay close to these bits). Plain multiply-adds: fmaf is a library call on
 * CPUs without FMA, and this runs on them. */
static float attn_dot(const float *q, const float *k, int32_t n) {
    float acc[16] = {0};
    int32_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; j++) acc[j] += q[i + j] * k[i + j];
    float tail = 0.0f;
    for (; i < n; i++) tail += q[i] * k[i];
    for (int width = 8; width > 0; width >>= 1)
        for (int j = 0; j < width; j++) acc[j] += acc[j + width];
    return acc[0] + tail;
}

/* Cache row r of k or v as floats. */
static void attn_row(const kite_attn_query *a, const void *base, int64_t r, float *row) {
    kite_type_get(a->kv_type)->to_float((const char *)base + (size_t)r * a->row_bytes, row, a->head_dim);
}

void kite_ref_attend(const kite_attn_query *a) {
    const int32_t hd = a->head_dim, nq = a->n_q;
    float m[KITE_ATTN_MAX_Q], l[KITE_ATTN_MAX_Q], s[KITE_ATTN_MAX_Q][KITE_ATTN_TILE], row[KITE_ATTN_MAX_HEAD_DIM];
    for (int32_t i = 0; i < nq; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
        memset(a->out + (int64_t)i * hd, 0, sizeof(float) * (size_t)hd);
    }
    for (int32_t t0 = 0; t0 < a->n_visible; t0 += KITE_ATTN_TILE) {
        int32_t nt = a->n_visible - t0 < KITE_ATTN_TILE ? a->n_visible - t0 : KITE_ATTN_TILE;
        for (int32_t t = 0; t < nt; t++) {
            int64_t r = a->rows ? a->rows[t0 + t] : t0 + t;
            attn_row(a, a->k, r, row);
            for (int32_t i = 0; i < nq; i++) s[i][t] = attn_dot(a->q + (int64_t)i * hd, row, hd) * a->scale;
        }
        /* Online softmax: rescale what the earlier tiles summed to the new running max. */
        for (int32_t i = 0; i < nq; i++) {
            float mt = s[i][0];
            for (int32_t t = 1; t < nt; t++) mt = s[i][t] > mt ? s[i][t] : mt;
            float mn = mt > m[i] ? mt : m[i];
            float f = kite_attn_exp(m[i] - mn), sum = 0.0f;
            for (int32_t t = 0; t < nt; t++) {
                s[i][t] = kite_attn_exp(s[i][t] - mn);
                sum += s[i][t];
            }
            l[i] = l[i] * f + sum;
            m[i] = mn;
            float *o = a->out + (int64_t)i * hd;
            for (int32_t d = 0; d < hd; d++) o[d] *= f;
        }
        for (int32_t t = 0; t < nt; t++) {
            int64_t r = a->rows ? a->rows[t0 + t] : t0 + t;
            attn_row(a, a->v, r, row);
            for (int32_t i = 0; i < nq; i++) {
                float *o = a->out + (int64_t)i * hd;
                for (int32_t d = 0; d < hd; d++) o[d] += s[i][t] * row[d];
            }
        }
    }
    for (int32_t i = 0; i < nq; i++) {
        float inv = 1.0f / l[i], *o = a->out + (int64_t)i * hd;
        for (int32_t d = 0; d < hd; d++) o[d] *= inv;
    }
}

void kite_ref_silu_mul(float *gate, const float *up, int64_t n) {
    for (int64_t i = 0; i < n; i++) gate[i] = kite_silu(gate[i]) * up[i];
}

void kite_ref_gelu_mul(float *gate, const float *up, int64_t n) {
    for (int64_t i = 0; i < n; i++) gate[i] = kite_gelu_tanh(gate[i]) * up[i];
}

void kite_ref_f32_to_f16(const float *x, uint16_t *y, int64_t n) { kite_type_get(KITE_TYPE_F16)->from_float(x, y, n); }

static const kite_kernel_set ref_set = {
    .level = KITE_CPU_REF,
    .name = "ref",
    .pack = kite_ref_pack,
    .pack_bytes = kite_ref_pack_bytes,
    .act_bytes = ref_act_bytes,
    .quantize_act = kite_ref_quantize_act,
    .matmul = kite_ref_matmul,
    .attend = kite_ref_attend,
    .silu_mul = kite_ref_silu_mul,
    .gelu_mul = kite_ref_gelu_mul,
    .f32_to_f16 = kite_ref_f32_to_f16,
    .dn_steps = kite_ref_dn_steps,
    .dn_chunked = kite_ref_dn_chunked,
    .dn_conv_silu = kite_ref_dn_conv_silu,
    .row_block = 16,
};

const kite_kernel_set *kite_kernels_ref(void) { return &ref_set; }
