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
    {KITE_TYPE_KT2, "kt2", 8, {2, 2, 2, 2}, {0, 2, 4, 6}, 16, 64 * 16 + 32},
    {KITE_TYPE_KT2_5, "kt2_5", 10, {2, 3, 2, 3}, {0, 2, 5, 7}, 20, 64 * 20 + 32},
    {KITE_TYPE_KT3, "kt3", 12, {3, 3, 3, 3}, {0, 3, 6, 9}, 24, 64 * 24 + 32},
};

/* Student-t (8 degrees of freedom) quantiles: 63 t8((i + 0.5) / 64) / t8(63.5 / 64), rounded half up. Heavier
 * tails than Gaussian quantiles, for blocks with outliers: against those (bench/trellis_rd, KT2 / KT2_5 / KT3),
 * MSE +1.4 / +0.7 / -1% on Gaussian blocks, -10 / -14 / -19% on Laplace, -8 / -12 / -15% on Student-t(5).
 * |level| <= 63 keeps a maddubs pair of (level + 64) x activation under 2^15. */
const int8_t kite_kt_q[64] = {-63, -48, -42, -37, -34, -31, -29, -26, -25, -23, -21, -20, -19, -17, -16, -15,
                              -14, -13, -12, -11, -10, -9,  -8,  -7,  -6,  -5,  -5,  -4,  -3,  -2,  -1,  0,
                              0,   1,   2,   3,   4,   5,   5,   6,   7,   8,   9,   10,  11,  12,  13,  14,
                              15,  16,  17,  19,  20,  21,  23,  25,  26,  29,  31,  34,  37,  42,  48,  63};
/* Pseudo-random 6-bit values (xorshift64, the best of 16 seeds on Gaussian blocks at 2 bits: MSE 0.0776
 * against 0.0784-0.0800 for the others, with Gaussian-quantile levels). */
const uint8_t kite_kt_p[64] = {48, 50, 63, 60, 13, 25, 9,  32, 5,  61, 39, 15, 52, 62, 29, 28, 6,  30, 17, 44, 26, 55,
                               46, 33, 32, 14, 25, 17, 35, 36, 58, 14, 32, 46, 63, 17, 11, 3,  3,  60, 63, 5,  5,  0,
                               40, 49, 44, 24, 5,  31, 45, 28, 31, 54, 37, 3,  54, 15, 59, 32, 44, 42, 13, 46};

const kite_kt_params *kite_kt_params_of(uint32_t type) {
    switch (type) {
    case KITE_TYPE_KT2: return &kt_params[0];
    case KITE_TYPE_KT2_5: return &kt_params[1];
    case KITE_TYPE_KT3: return &kt_params[2];
    default: return NULL;
    }
}

static const kite_type_traits kt_traits[3] = {
    {"kt2", KT_BLOCK, (64 * 16 + 32) / KT_ROWS, NULL, NULL},
    {"kt2_5", KT_BLOCK, (64 * 20 + 32) / KT_ROWS, NULL, NULL},
    {"kt3", KT_BLOCK, (64 * 24 + 32) / KT_ROWS, NULL, NULL},
};

const kite_type_traits *kite_kt_traits(uint32_t type) {
    const kite_kt_params *p = kite_kt_params_of(type);
    return p ? &kt_traits[p - kt_params] : NULL;
}

/* ---- decoding -------------------------------------------------------------------------------------------- */

static inline uint32_t load_word(const kite_kt_params *p, const uint8_t *tile, int r, int m) {
    uint32_t v;
    memcpy(&v, tile + ((size_t)(m % p->n_words) * KT_ROWS + (size_t)r) * 4, 4);
    return v;
}

/* Lane r's 32 stream bits from bit b (circular). */
static uint32_t stream_bits(const kite_kt_params *p, const uint8_t *tile, int r, int b) {
    const int m = b / 32, sh = b % 32;
    const uint64_t two = (uint64_t)load_word(p, tile, r, m) | (uint64_t)load_word(p, tile, r, m + 1) << 32;
    return (uint32_t)(two >> sh);
}

uint32_t kite_kt_state(const kite_kt_params *p, const uint8_t *tile, int r, int j) {
    return (stream_bits(p, tile, r, p->group_bits * (j / 4)) >> p->pos[j % 4]) & ((1u << KT_L) - 1);
}

static void decode_lane(const kite_kt_params *p, const uint8_t *tile, int r, float *dst) {
    uint16_t h;
    memcpy(&h, tile + (size_t)p->n_words * 64 + 2 * r, 2);
    const float d = kite_fp16_to_f32(h);
    for (int c = 0; c < KT_GROUPS; c++) {
        const uint32_t w = stream_bits(p, tile, r, p->group_bits * c);
        for (int i = 0; i < 4; i++) dst[4 * c + i] = d * (float)kite_kt_level((w >> p->pos[i]) & ((1u << KT_L) - 1));
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

#define KT_MAX_STATES (1 << KT_L) /* the trellis states */
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

KT_CLONES static void step(kt_scratch *sc, int k, float x, float w, uint8_t *bp) {
    if (k == 2) step_k(sc, KT_L, 2, x, w, bp);
    else step_k(sc, KT_L, 3, x, w, bp);
}

/* The least-cost path over n_steps columns start, start - 1, ... (mod 256). x, w: per column, x already
 * divided by the scale. h_start >= 0: the first state must satisfy s >> k_first == h_start; h_end >= 0:
 * the last state must satisfy s & (2^end_bits - 1) == h_end. states[t]: the path's state at step t. */
static float viterbi(const kite_kt_params *p, kt_scratch *sc, const float *x, const float *w, int start, int n_steps,
                     int h_start, int h_end, int end_bits, uint32_t *states) {
    const int L = KT_L, S = 1 << L;
    int c = start;
    int k = p->k[c % 4];
    for (int s = 0; s < S; s++) {
        const float e = x[c] - sc->lvl[s];
        sc->cost[s] = (h_start >= 0 && (s >> k) != h_start) ? FLT_MAX : w[c] * (e * e);
    }
    for (int t = 1; t < n_steps; t++) {
        c = (c + KT_BLOCK - 1) % KT_BLOCK;
        step(sc, p->k[c % 4], x[c], w[c], sc->bp[t]);
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
        const int kc = p->k[c % 4];
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
    const int kl = p->k[(KT_BLOCK - 1) % 4], end_bits = KT_L - kl;
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

/* Writes lane r's stream: column j's own k_j bits (the low bits of its state) at its position. */
static void write_lane(const kite_kt_params *p, uint8_t *tile, int r, const uint32_t *col_state, uint16_t d) {
    uint32_t words[24] = {0};
    for (int c = 0; c < KT_GROUPS; c++)
        for (int i = 0; i < 4; i++) {
            const uint32_t own = col_state[4 * c + i] & ((1u << p->k[i]) - 1);
            const int b = p->group_bits * c + p->pos[i]; /* k <= 3 bits from b: may cross a word */
            words[b / 32] |= own << (b % 32);
            if (b % 32 + p->k[i] > 32) words[b / 32 + 1] |= own >> (32 - b % 32);
        }
    for (int m = 0; m < p->n_words; m++) memcpy(tile + ((size_t)m * KT_ROWS + (size_t)r) * 4, &words[m], 4);
    memcpy(tile + (size_t)p->n_words * 64 + 2 * r, &d, 2);
}

size_t kite_kt_quantize(uint32_t type, const float *src, void *dst, int64_t n_rows, int64_t cols, const float *imatrix) {
    const kite_kt_params *p = kite_kt_params_of(type);
    if (!p || n_rows <= 0 || n_rows % KT_ROWS != 0 || cols <= 0 || cols % KT_BLOCK != 0) return 0;
    kt_scratch *sc = malloc(sizeof *sc);
    if (!sc) return 0;
    sc->cost = sc->cost_buf[0];
    sc->next = sc->cost_buf[1];
    double s2 = 0;
    for (int s = 0; s < (1 << KT_L); s++) {
        sc->lvl[s] = (float)kite_kt_level((uint32_t)s);
        s2 += (double)sc->lvl[s] * sc->lvl[s];
    }
    sc->level_rms = (float)sqrt(s2 / (1 << KT_L));
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
