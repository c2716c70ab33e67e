/* The trellis types (quant/trellis.h): parameters, the decoder, and the encoder.
 *
 * Encoder, per row and block: a scale d from the block's weighted RMS, then a Viterbi search over the 2^L
 * states for the circular path minimising sum_j w_j (x_j - d level(s_j))^2, w_j the column's importance
 * (imatrix) or 1. The search runs over the columns in decreasing order, where a state's predecessor
 * differs from it in the top k bits after a shift (s_j = ((s_{j+1} << k_j) | own bits) mod 2^L), so the
 * minimum over predecessors reads 2^k contiguous runs of the cost array (vectorizes). Tail-biting: a
 * first, short search over the 64 columns around the wrap (columns 31 .. 0, 255 .. 224) with free ends
 * fixes the bits the first and last states share; the full search then starts and ends on states that
 * agree with them. Then d is refit by weighted least squares over the chosen levels (KT_PASSES > 1 would search
 * again with it and keep the better path). */
#include "quant/trellis.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/fp16.h"

static const kite_kt_params kt_params[3] = {
    {KITE_TYPE_KT2, "kt2", 12, 0, 16, {2, 2, 2, 2, 2, 2, 2, 2}, {0, 2, 4, 6, 8, 10, 12, 14}, 32, 32 * 32 + 32},
    {KITE_TYPE_KT2_5, "kt2_5", 12, 4, 20, {2, 3, 2, 3, 2, 3, 2, 3}, {0, 2, 5, 7, 10, 12, 15, 17}, 40, 32 * 40 + 32},
    {KITE_TYPE_KT3, "kt3", 12, 8, 24, {3, 3, 3, 3, 3, 3, 3, 3}, {0, 3, 6, 9, 12, 15, 18, 21}, 48, 32 * 48 + 32},
};

const kite_kt_params *kite_kt_params_of(uint32_t type) {
    switch (type) {
    case KITE_TYPE_KT2: return &kt_params[0];
    case KITE_TYPE_KT2_5: return &kt_params[1];
    case KITE_TYPE_KT3: return &kt_params[2];
    default: return NULL;
    }
}

static const kite_type_traits kt_traits[3] = {
    {"kt2", KT_BLOCK, (32 * 32 + 32) / KT_ROWS, NULL, NULL},
    {"kt2_5", KT_BLOCK, (32 * 40 + 32) / KT_ROWS, NULL, NULL},
    {"kt3", KT_BLOCK, (32 * 48 + 32) / KT_ROWS, NULL, NULL},
};

const kite_type_traits *kite_kt_traits(uint32_t type) {
    const kite_kt_params *p = kite_kt_params_of(type);
    return p ? &kt_traits[p - kt_params] : NULL;
}

/* ---- decoding -------------------------------------------------------------------------------------------- */

static inline uint32_t load_u16(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }

/* Stream bits [8 K g, 8 K g + 40) of lane r: the group's bits and the next group's first 16. */
static uint64_t group_word(const kite_kt_params *p, const uint8_t *tile, int r, int g) {
    const uint8_t *grp = tile + (size_t)g * p->group_bytes;
    uint64_t rem = 0;
    if (p->rem_bits == 4) rem = r < 8 ? grp[32 + r] & 15u : grp[32 + r - 8] >> 4;
    else if (p->rem_bits == 8) rem = grp[32 + r];
    const uint64_t next = load_u16(tile + (size_t)((g + 1) % KT_GROUPS) * p->group_bytes + 2 * r);
    return load_u16(grp + 2 * r) | rem << 16 | next << p->group_bits;
}

uint32_t kite_kt_state(const kite_kt_params *p, const uint8_t *tile, int r, int j) {
    return (uint32_t)(group_word(p, tile, r, j / 8) >> p->pos[j % 8]) & ((1u << p->L) - 1);
}

static void decode_lane(const kite_kt_params *p, const uint8_t *tile, int r, float *dst) {
    uint16_t h;
    memcpy(&h, tile + KT_GROUPS * p->group_bytes + 2 * r, 2);
    const float d = kite_fp16_to_f32(h);
    for (int g = 0; g < KT_GROUPS; g++) {
        const uint64_t w = group_word(p, tile, r, g);
        for (int j = 0; j < 8; j++) dst[8 * g + j] = d * (float)kite_kt_level((uint32_t)(w >> p->pos[j]) & ((1u << p->L) - 1));
    }
}

void kite_kt_dequantize_row(uint32_t type, const void *data, int64_t cols, int64_t r, float *dst) {
    const kite_kt_params *p = kite_kt_params_of(type);
    if (!p || cols % KT_BLOCK != 0) return;
    const int64_t nb = cols / KT_BLOCK;
    const uint8_t *base = (const uint8_t *)data + (size_t)(r / KT_ROWS) * (size_t)nb * p->tile_bytes;
    for (int64_t b = 0; b < nb; b++) decode_lane(p, base + (size_t)b * p->tile_bytes, (int)(r % KT_ROWS), dst + b * KT_BLOCK);
}

bool kite_kt_dequantize(uint32_t type, const void *data, int64_t n_rows, int64_t cols, float *dst) {
    if (!kite_kt_params_of(type) || n_rows % KT_ROWS != 0 || cols <= 0 || cols % KT_BLOCK != 0) return false;
    for (int64_t r = 0; r < n_rows; r++) kite_kt_dequantize_row(type, data, cols, r, dst + r * cols);
    return true;
}

/* ---- encoding ------------------------------------------------------------------------------------------------ */

#define KT_MAX_STATES 16384
#define TAIL_COLS 32 /* columns each side of the wrap in the first search */
/* Searches per block: a second one with the refit scale lowered Gaussian MSE by 0.4% (KT2) to 1% (KT3)
 * for 1.8x the time (bench/trellis_rd), so one. */
#define KT_PASSES 1

typedef struct kt_scratch {
    float lvl[KT_MAX_STATES];           /* level(s) as floats */
    float cost_buf[2][KT_MAX_STATES], m[KT_MAX_STATES / 4];
    float *cost, *next;        /* the two halves of cost_buf, swapped every step */
    int32_t arg[KT_MAX_STATES / 4];
    uint8_t bp[KT_BLOCK][KT_MAX_STATES / 4]; /* step t: argmin predecessor's top bits, by s >> k */
    float level_rms;
} kt_scratch;

#if defined(__x86_64__) && ((defined(__GNUC__) && !defined(__clang__)) || (defined(__clang__) && __clang_major__ >= 14))
#define KT_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define KT_CLONES
#endif

/* One step into a column with k own bits: next[s] = min over predecessors + w (x - level(s))^2. K and G
 * are constants in each instance (so the loops vectorize); s = g K + b runs over next in order. */
static inline __attribute__((always_inline)) void step_k(kt_scratch *restrict sc, const int L, const int k, float x, float w,
                                                         uint8_t *restrict bp) {
    const int G = 1 << (L - k), K = 1 << k;
    float *restrict m = sc->m;
    const float *restrict cost = sc->cost;
    int32_t *restrict arg = sc->arg;
    for (int g = 0; g < G; g++) m[g] = cost[g], arg[g] = 0;
    for (int t = 1; t < K; t++)
        for (int g = 0; g < G; g++) {
            const float v = cost[t * G + g];
            const bool lt = v < m[g];
            arg[g] = lt ? t : arg[g];
            m[g] = lt ? v : m[g];
        }
    for (int g = 0; g < G; g++) bp[g] = (uint8_t)arg[g];
    float *restrict next = sc->next;
    const float *restrict lvl = sc->lvl;
    for (int g = 0; g < G; g++) {
        const float mg = m[g];
        for (int b = 0; b < K; b++) {
            const float e = x - lvl[g * K + b];
            next[g * K + b] = mg + w * (e * e);
        }
    }
}

KT_CLONES static void step(kt_scratch *sc, int L, int k, float x, float w, uint8_t *bp) {
    if (L == 12 && k == 2) step_k(sc, 12, 2, x, w, bp);
    else if (L == 12 && k == 3) step_k(sc, 12, 3, x, w, bp);
    else if (L == 11 && k == 3) step_k(sc, 11, 3, x, w, bp);
    else if (L == 13 && k == 3) step_k(sc, 13, 3, x, w, bp);
    else if (L == 13 && k == 2) step_k(sc, 13, 2, x, w, bp);
    else if (L == 14 && k == 2) step_k(sc, 14, 2, x, w, bp);
}

/* The least-cost path over n_steps columns start, start - 1, ... (mod 256). x, w: per column, x already
 * divided by the scale. h_start >= 0: the first state must satisfy s >> k_first == h_start; h_end >= 0:
 * the last state must satisfy s & (2^end_bits - 1) == h_end. states[t]: the path's state at step t. */
static float viterbi(const kite_kt_params *p, kt_scratch *sc, const float *x, const float *w, int start, int n_steps,
                     int h_start, int h_end, int end_bits, uint32_t *states) {
    const int L = p->L, S = 1 << L;
    int c = start;
    int k = p->k[c % 8];
    for (int s = 0; s < S; s++) {
        const float e = x[c] - sc->lvl[s];
        sc->cost[s] = (h_start >= 0 && (s >> k) != h_start) ? FLT_MAX : w[c] * (e * e);
    }
    for (int t = 1; t < n_steps; t++) {
        c = (c + KT_BLOCK - 1) % KT_BLOCK;
        step(sc, L, p->k[c % 8], x[c], w[c], sc->bp[t]);
        float *t_swap = sc->cost;
        sc->cost = sc->next;
        sc->next = t_swap;
    }
    uint32_t best_s = 0;
    float best = FLT_MAX;
    for (int s = 0; s < S; s++) {
        if (h_end >= 0 && (s & ((1 << end_bits) - 1)) != h_end) continue;
        if (sc->cost[s] < best || best == FLT_MAX) best = sc->cost[s], best_s = (uint32_t)s;
    }
    uint32_t s = best_s;
    states[n_steps - 1] = s;
    for (int t = n_steps - 1; t >= 1; t--) {
        const int kc = p->k[c % 8];
        const uint32_t g = s >> kc;
        s = ((uint32_t)sc->bp[t][g] << (L - kc)) | g;
        states[t - 1] = s;
        c = (c + 1) % KT_BLOCK;
    }
    return best;
}

/* Encodes one block of one row: the states of columns 0..255 (in column order) and the scale. */
static void encode_block(const kite_kt_params *p, kt_scratch *sc, const float *xr, const float *imp, uint32_t *col_state,
                         uint16_t *d_out) {
    float w[KT_BLOCK], xs[KT_BLOCK];
    double sw = 0, swx2 = 0;
    for (int j = 0; j < KT_BLOCK; j++) {
        w[j] = imp ? imp[j] : 1.0f;
        if (!(w[j] > 0.0f) || !isfinite(w[j])) w[j] = 1e-12f; /* a dead column still needs a defined path */
        const float v = isfinite(xr[j]) ? xr[j] : 0.0f;
        sw += w[j];
        swx2 += (double)w[j] * v * v;
    }
    const double rms = sw > 0 ? sqrt(swx2 / sw) : 0.0;
    memset(col_state, 0, sizeof(uint32_t) * KT_BLOCK);
    if (!(rms > 0.0)) {
        *d_out = 0;
        return;
    }
    const int kl = p->k[(KT_BLOCK - 1) % 8], end_bits = p->L - kl;
    uint32_t states[KT_BLOCK + 2 * TAIL_COLS];
    float d = (float)(rms / sc->level_rms);
    float best_err = FLT_MAX;
    uint32_t path[KT_BLOCK];
    for (int pass = 0; pass < KT_PASSES; pass++) {
        for (int j = 0; j < KT_BLOCK; j++) xs[j] = (isfinite(xr[j]) ? xr[j] : 0.0f) / d;
        /* columns TAIL_COLS-1 .. 0, 255 .. 256-TAIL_COLS: the wrap in the middle */
        viterbi(p, sc, xs, w, TAIL_COLS - 1, 2 * TAIL_COLS, -1, -1, 0, states);
        const int h = (int)(states[TAIL_COLS - 1] & ((1u << end_bits) - 1)); /* column 0's state */
        viterbi(p, sc, xs, w, KT_BLOCK - 1, KT_BLOCK, h, h, end_bits, states);
        for (int t = 0; t < KT_BLOCK; t++) path[KT_BLOCK - 1 - t] = states[t];
        /* least-squares scale over the chosen levels, then its error after fp16 rounding */
        double num = 0, den = 0;
        for (int j = 0; j < KT_BLOCK; j++) {
            const double l = sc->lvl[path[j]];
            num += w[j] * (double)(isfinite(xr[j]) ? xr[j] : 0.0f) * l;
            den += w[j] * l * l;
        }
        const float dfit = den > 0 ? (float)(num / den) : d;
        const uint16_t dh = kite_f32_to_fp16(dfit);
        const float dq = kite_fp16_to_f32(dh);
        double err = 0;
        for (int j = 0; j < KT_BLOCK; j++) {
            const double e = (double)(isfinite(xr[j]) ? xr[j] : 0.0f) - (double)dq * sc->lvl[path[j]];
            err += w[j] * e * e;
        }
        if (err < best_err) {
            best_err = (float)err;
            memcpy(col_state, path, sizeof path);
            *d_out = dh;
        }
        if (!(dfit > 0.0f) || !isfinite(dfit)) break;
        d = dfit;
    }
}

static void write_lane(const kite_kt_params *p, uint8_t *tile, int r, const uint32_t *col_state, uint16_t d) {
    for (int g = 0; g < KT_GROUPS; g++) {
        uint32_t v = 0;
        for (int j = 0; j < 8; j++) v |= (col_state[8 * g + j] & ((1u << p->k[j]) - 1)) << p->pos[j];
        uint8_t *grp = tile + (size_t)g * p->group_bytes;
        grp[2 * r] = (uint8_t)v;
        grp[2 * r + 1] = (uint8_t)(v >> 8);
        if (p->rem_bits == 8) grp[32 + r] = (uint8_t)(v >> 16);
        else if (p->rem_bits == 4) {
            uint8_t *b = &grp[32 + (r & 7)];
            *b = r < 8 ? (uint8_t)((*b & 0xf0) | ((v >> 16) & 15)) : (uint8_t)((*b & 0x0f) | (((v >> 16) & 15) << 4));
        }
    }
    memcpy(tile + KT_GROUPS * p->group_bytes + 2 * r, &d, 2);
}

size_t kite_kt_quantize(uint32_t type, const float *src, void *dst, int64_t n_rows, int64_t cols, const float *imatrix) {
    const kite_kt_params *p = kite_kt_params_of(type);
    if (!p || n_rows <= 0 || n_rows % KT_ROWS != 0 || cols <= 0 || cols % KT_BLOCK != 0) return 0;
    kt_scratch *sc = malloc(sizeof *sc);
    if (!sc) return 0;
    sc->cost = sc->cost_buf[0];
    sc->next = sc->cost_buf[1];
    double s2 = 0;
    for (int s = 0; s < (1 << p->L); s++) {
        sc->lvl[s] = (float)kite_kt_level((uint32_t)s);
        s2 += (double)sc->lvl[s] * sc->lvl[s];
    }
    sc->level_rms = (float)sqrt(s2 / (1 << p->L));
    const int64_t nb = cols / KT_BLOCK;
    uint8_t *out = dst;
    uint32_t col_state[KT_BLOCK];
    for (int64_t gr = 0; gr < n_rows / KT_ROWS; gr++) {
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *tile = out + (size_t)(gr * nb + b) * p->tile_bytes;
            memset(tile, 0, p->tile_bytes);
            for (int r = 0; r < KT_ROWS; r++) {
                uint16_t d = 0;
                encode_block(p, sc, src + (gr * KT_ROWS + r) * cols + b * KT_BLOCK, imatrix ? imatrix + b * KT_BLOCK : NULL,
                             col_state, &d);
                write_lane(p, tile, r, col_state, d);
            }
        }
    }
    free(sc);
    return (size_t)n_rows * (size_t)nb * (p->tile_bytes / KT_ROWS);
}
