/* The trellis types (quant/trellis.h): parameters, the rotation of the H variants, the decoder, and the encoder.
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

static const kite_kt_params kt_params[6] = {
    {KITE_TYPE_KT2, "kt2", 0, false, 8, {2, 2, 2, 2}, {0, 2, 4, 6}, 16, 64 * 16 + 32},
    {KITE_TYPE_KT2_5, "kt2_5", 1, false, 10, {2, 3, 2, 3}, {0, 2, 5, 7}, 20, 64 * 20 + 32},
    {KITE_TYPE_KT3, "kt3", 2, false, 12, {3, 3, 3, 3}, {0, 3, 6, 9}, 24, 64 * 24 + 32},
    {KITE_TYPE_KT2H, "kt2h", 0, true, 8, {2, 2, 2, 2}, {0, 2, 4, 6}, 16, 64 * 16 + 32},
    {KITE_TYPE_KT2_5H, "kt2_5h", 1, true, 10, {2, 3, 2, 3}, {0, 2, 5, 7}, 20, 64 * 20 + 32},
    {KITE_TYPE_KT3H, "kt3h", 2, true, 12, {3, 3, 3, 3}, {0, 3, 6, 9}, 24, 64 * 24 + 32},
};

/* Student-t (8 degrees of freedom) quantiles: 63 t8((i + 0.5) / 64) / t8(63.5 / 64), rounded half up. Heavier
 * tails than Gaussian quantiles, for blocks with outliers: against those (bench/trellis_rd, KT2 / KT2_5 / KT3),
 * MSE +1.4 / +0.7 / -1% on Gaussian blocks, -10 / -14 / -19% on Laplace, -8 / -12 / -15% on Student-t(5).
 * |level| <= 63 keeps a maddubs pair of (level + 64) x activation under 2^15. */
const int8_t kite_kt_q[64] = {-63, -48, -42, -37, -34, -31, -29, -26, -25, -23, -21, -20, -19, -17, -16, -15,
                              -14, -13, -12, -11, -10, -9,  -8,  -7,  -6,  -5,  -5,  -4,  -3,  -2,  -1,  0,
                              0,   1,   2,   3,   4,   5,   5,   6,   7,   8,   9,   10,  11,  12,  13,  14,
                              15,  16,  17,  19,  20,  21,  23,  25,  26,  29,  31,  34,  37,  42,  48,  63};
/* 11 h mod 64 (quant/trellis.h says why). Against the second code's 64 pseudo-random values (xorshift64, the
 * best of 16 seeds), Gaussian MSE -4.3 / -3.5 / -5.4% at KT2 / KT2_5 / KT3, Laplace -3.1 / -2.9 / -2.6%
 * (64 x 1024 blocks); the odd multipliers 13, 27 and 53 give within 1% of 11, KT_P[h] = h twice the
 * error. */
const uint8_t kite_kt_p[64] = { 0, 11, 22, 33, 44, 55,  2, 13, 24, 35, 46, 57,  4, 15, 26, 37, 48, 59,  6, 17, 28, 39,
                               50, 61,  8, 19, 30, 41, 52, 63, 10, 21, 32, 43, 54,  1, 12, 23, 34, 45, 56,  3, 14, 25,
                               36, 47, 58,  5, 16, 27, 38, 49, 60,  7, 18, 29, 40, 51, 62,  9, 20, 31, 42, 53};

const kite_kt_params *kite_kt_params_of(uint32_t type) {
    for (int i = 0; i < 6; i++)
        if (kt_params[i].type == type) return &kt_params[i];
    return NULL;
}

uint32_t kite_kt_rotated_type(uint32_t type) {
    const kite_kt_params *p = kite_kt_params_of(type);
    return p && !p->rotated ? kt_params[p->code + 3].type : type;
}

uint32_t kite_kt_plain_type(uint32_t type) {
    const kite_kt_params *p = kite_kt_params_of(type);
    return p && p->rotated ? kt_params[p->code].type : type;
}

static const kite_type_traits kt_traits[6] = {
    {"kt2", KT_BLOCK, (64 * 16 + 32) / KT_ROWS, NULL, NULL},
    {"kt2_5", KT_BLOCK, (64 * 20 + 32) / KT_ROWS, NULL, NULL},
    {"kt3", KT_BLOCK, (64 * 24 + 32) / KT_ROWS, NULL, NULL},
    {"kt2h", KT_BLOCK, (64 * 16 + 32) / KT_ROWS, NULL, NULL},
    {"kt2_5h", KT_BLOCK, (64 * 20 + 32) / KT_ROWS, NULL, NULL},
    {"kt3h", KT_BLOCK, (64 * 24 + 32) / KT_ROWS, NULL, NULL},
};

const kite_type_traits *kite_kt_traits(uint32_t type) {
    const kite_kt_params *p = kite_kt_params_of(type);
    return p ? &kt_traits[p - kt_params] : NULL;
}

/* ---- the rotation ------------------------------------------------------------------------------------------ */

#if defined(__x86_64__) && ((defined(__GNUC__) && !defined(__clang__)) || (defined(__clang__) && __clang_major__ >= 14))
#define KT_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define KT_CLONES
#endif

/* The rotation's signs: splitmix64 of seed 0x4B54 ("KT"), four outputs; bit j set: column j negated. */
#define KT_SIGN_W0 0x0E3C36A45F36DB95ull
#define KT_SIGN_W1 0x8861097374CCBC5Bull
#define KT_SIGN_W2 0xCA67F83CF008F581ull
#define KT_SIGN_W3 0xF63D319F60352367ull
const uint64_t kite_kt_signs[4] = {KT_SIGN_W0, KT_SIGN_W1, KT_SIGN_W2, KT_SIGN_W3};
/* The same signs as floats (a constant table, so the loops vectorize). */
#define KT_S1(w, b) (((w) >> (b)) & 1 ? -1.0f : 1.0f)
#define KT_S8(w, b) KT_S1(w, b), KT_S1(w, b + 1), KT_S1(w, b + 2), KT_S1(w, b + 3), KT_S1(w, b + 4), KT_S1(w, b + 5), \
                    KT_S1(w, b + 6), KT_S1(w, b + 7)
#define KT_S64(w) KT_S8(w, 0), KT_S8(w, 8), KT_S8(w, 16), KT_S8(w, 24), KT_S8(w, 32), KT_S8(w, 40), KT_S8(w, 48), KT_S8(w, 56)
static const float kt_sign_f[KT_BLOCK] = {KT_S64(KT_SIGN_W0), KT_S64(KT_SIGN_W1), KT_S64(KT_SIGN_W2), KT_S64(KT_SIGN_W3)};

/* One butterfly stage of stride len (a constant at each call, so the loop vectorizes). */
static inline __attribute__((always_inline)) void fwht_stage(float *restrict v, const int len) {
    for (int i = 0; i < KT_BLOCK; i += 2 * len)
        for (int j = i; j < i + len; j++) {
            const float a = v[j], b = v[j + len];
            v[j] = a + b;
            v[j + len] = a - b;
        }
}

/* In-place fast Walsh-Hadamard transform of 256 floats (Sylvester order: y_i = sum_j (-1)^popcount(i & j) x_j):
 * stages of stride 1, 2, 4, ..., 128, each a + b and a - b, exact IEEE operations in a fixed order (the
 * strides 1, 2 and 4 written out per 8 elements: the same operations, in registers). */
static inline __attribute__((always_inline)) void fwht256(float *restrict v) {
    for (int i = 0; i < KT_BLOCK; i += 8) {
        float *p = v + i;
        const float s0 = p[0] + p[1], d0 = p[0] - p[1], s1 = p[2] + p[3], d1 = p[2] - p[3];
        const float s2 = p[4] + p[5], d2 = p[4] - p[5], s3 = p[6] + p[7], d3 = p[6] - p[7];
        const float t0 = s0 + s1, t1 = d0 + d1, t2 = s0 - s1, t3 = d0 - d1;
        const float t4 = s2 + s3, t5 = d2 + d3, t6 = s2 - s3, t7 = d2 - d3;
        p[0] = t0 + t4, p[1] = t1 + t5, p[2] = t2 + t6, p[3] = t3 + t7;
        p[4] = t0 - t4, p[5] = t1 - t5, p[6] = t2 - t6, p[7] = t3 - t7;
    }
    fwht_stage(v, 8), fwht_stage(v, 16), fwht_stage(v, 32), fwht_stage(v, 64), fwht_stage(v, 128);
}

/* The clones compute the same floats (additions, subtractions and exact products by +-1 and 1/16); they
 * are static for clang's sake (see ref_trellis.c). */
KT_CLONES static void rotate_block(const float *x, float *y, bool inverse) {
    float v[KT_BLOCK];
    if (inverse) {
        memcpy(v, x, sizeof v);
        fwht256(v);
        for (int j = 0; j < KT_BLOCK; j++) y[j] = v[j] * 0.0625f * kt_sign_f[j];
    } else {
        for (int j = 0; j < KT_BLOCK; j++) v[j] = x[j] * kt_sign_f[j];
        fwht256(v);
        for (int j = 0; j < KT_BLOCK; j++) y[j] = v[j] * 0.0625f; /* 1 / sqrt(256): exact */
    }
}

void kite_kt_rotate(const float *x, float *y) { rotate_block(x, y, false); }
void kite_kt_unrotate(const float *y, float *x) { rotate_block(y, x, true); }

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
    for (int64_t b = 0; b < nb; b++) {
        decode_lane(p, base + (size_t)b * p->tile_bytes, (int)(r % KT_ROWS), dst + b * KT_BLOCK);
        if (p->rotated) kite_kt_unrotate(dst + b * KT_BLOCK, dst + b * KT_BLOCK);
    }
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
    float rotated[KT_BLOCK];
    for (int64_t gr = 0; gr < n_rows / KT_ROWS; gr++) {
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *tile = out + (size_t)(gr * nb + b) * p->tile_bytes;
            memset(tile, 0, p->tile_bytes);
            for (int r = 0; r < KT_ROWS; r++) {
                const float *xr = src + (gr * KT_ROWS + r) * cols + b * KT_BLOCK;
                const float *imp = imatrix ? imatrix + b * KT_BLOCK : NULL;
                if (p->rotated) {
                    /* every rotated column mixes all 256: a per-column importance has no meaning there */
                    for (int j = 0; j < KT_BLOCK; j++) rotated[j] = isfinite(xr[j]) ? xr[j] : 0.0f;
                    kite_kt_rotate(rotated, rotated);
                    xr = rotated, imp = NULL;
                }
                uint16_t d = 0;
                encode_block(p, sc, xr, imp, col_state, &d);
                write_lane(p, tile, r, col_state, d);
            }
        }
    }
    free(sc);
    return (size_t)n_rows * (size_t)nb * (p->tile_bytes / KT_ROWS);
}

uint32_t kite_kt_choose(uint32_t type, const float *src, int64_t n_rows, int64_t cols, const float *imatrix,
                        double *err_plain, double *err_rotated) {
    const kite_kt_params *p = kite_kt_params_of(type);
    if (!p || n_rows <= 0 || n_rows % KT_ROWS != 0 || cols <= 0 || cols % KT_BLOCK != 0) return 0;
    const int64_t n_groups = n_rows / KT_ROWS, n_sample = n_groups < 4 ? n_groups : 4;
    const size_t group_bytes = (size_t)(cols / KT_BLOCK) * p->tile_bytes;
    uint8_t *q = malloc(group_bytes);
    float *back = malloc(sizeof(float) * (size_t)(KT_ROWS * cols));
    if (!q || !back) {
        free(q), free(back);
        return 0;
    }
    const uint32_t variant[2] = {kite_kt_plain_type(type), kite_kt_rotated_type(type)};
    double err[2] = {0, 0};
    for (int v = 0; v < 2; v++)
        for (int64_t i = 0; i < n_sample; i++) {
            const float *x = src + (size_t)((i * n_groups / n_sample) * KT_ROWS * cols);
            kite_kt_quantize(variant[v], x, q, KT_ROWS, cols, imatrix);
            kite_kt_dequantize(variant[v], q, KT_ROWS, cols, back);
            for (int64_t k = 0; k < KT_ROWS * cols; k++) {
                const double xv = isfinite(x[k]) ? x[k] : 0.0, e = xv - back[k];
                err[v] += (imatrix ? imatrix[k % cols] : 1.0) * e * e;
            }
        }
    free(q), free(back);
    const double n = (double)(n_sample * KT_ROWS * cols);
    if (err_plain) *err_plain = err[0] / n;
    if (err_rotated) *err_rotated = err[1] / n;
    return err[1] < err[0] ? variant[1] : variant[0];
}
