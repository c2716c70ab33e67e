/* Gated DeltaNet's reference kernels (kite_dn_head in kernels.h): the step-wise and chunked recurrence of one
 * head and the conv row, the truth the SIMD levels (kernels/deltanet_simd.h) are tested against. Moved
 * unchanged from model/deltanet.c. */
#include <math.h>
#include <string.h>

#include "kernels/kernels_internal.h"

/* Lanes of the fixed-order sums: eight partial sums, combined pairwise, so the compiler can keep them in
 * vector registers (a single accumulator is one add latency per element) and every caller (decoding, a
 * drafted node, a replay) adds in the same order. */
enum { LANES = 8 };

static float lanes_total(const float *acc, float tail) {
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail;
}

static float dot(const float *a, const float *b, int32_t n) {
    float acc[LANES] = {0};
    int32_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) acc[l] += a[i + l] * b[i + l];
    float tail = 0.0f;
    for (; i < n; i++) tail += a[i] * b[i];
    return lanes_total(acc, tail);
}

/* One token: M = e^g M; M += beta (v - M k) k^T; o = M q (o may be NULL). Row j of M only meets row j, so
 * the decay, M k, the update and M q run row by row over a row held in cache. */
static void head_step(float *M, int32_t hk, int32_t hv, const float *q, const float *k, const float *v, float g, float beta,
                      float *o) {
    const float decay = expf(g);
    for (int32_t j = 0; j < hv; j++) {
        float *m = M + (size_t)j * hk;
        for (int32_t i = 0; i < hk; i++) m[i] *= decay;
        const float d = (v[j] - dot(m, k, hk)) * beta;
        for (int32_t i = 0; i < hk; i++) m[i] += k[i] * d;
        if (o) o[j] = dot(m, q, hk);
    }
}

void kite_ref_dn_steps(const kite_dn_head *r) {
    for (int32_t t = 0; t < r->n; t++)
        head_step(r->M, r->hk, r->hv, r->q ? r->q + t * r->qk_stride : NULL, r->k + t * r->qk_stride, r->v + t * r->v_stride,
                  r->g[t * r->gb_stride], r->beta[t * r->gb_stride], r->o ? r->o + t * r->o_stride : NULL);
}

/* The chunk-parallel form. Within a chunk of L tokens from state S, with G_t = g_1 + .. + g_t:
 *   M_t = e^{G_t} S + sum_{s<=t} e^{G_t - G_s} u_s k_s^T, where
 *   u_t = beta_t (v_t - e^{G_t} S k_t) - sum_{s<t} beta_t (k_t . k_s) e^{G_t - G_s} u_s
 * (the WY form: u = (I + A)^-1 beta (v - e^G S k), A strictly lower, solved by forward substitution);
 *   o_t = e^{G_t} S q_t + sum_{s<=t} e^{G_t - G_s} (k_s . q_t) u_s,   S' = M_L.
 * S is read twice and written once per chunk instead of three times per token, and the products run as
 * small matrix products over the chunk's tokens (k and q transposed, so the inner loops are over t).
 * All exponents are differences G_t - G_s <= 0 (g <= 0), so nothing overflows. */
void kite_ref_dn_chunked(const kite_dn_head *r, float *work) {
    const int32_t C = KITE_DN_CHUNK, hk = r->hk, hv = r->hv, n = r->n;
    float *M = r->M;
    float *G = work, *eG = G + C, *coef = eG + C, *acc = coef + C; /* acc: [2][C] */
    float *u = acc + 2 * C;                 /* [C][hv] */
    float *kT = u + (size_t)C * hv;         /* [hk][C] */
    float *qT = kT + (size_t)hk * C;        /* [hk][C] */
    float *KK = qT + (size_t)hk * C;        /* [C][C]: KK[t][s] = k_t . k_s */
    float *KQ = KK + (size_t)C * C;         /* [C][C]: KQ[t][s] = k_s . q_t */
    const int64_t qs = r->qk_stride, vs = r->v_stride, gs = r->gb_stride;
    for (int32_t c0 = 0; c0 < n; c0 += C) {
        const int32_t L = n - c0 < C ? n - c0 : C;
        const float *q = r->q ? r->q + c0 * qs : NULL, *k = r->k + c0 * qs, *v = r->v + c0 * vs;
        const float *g = r->g + c0 * gs, *beta = r->beta + c0 * gs;
        float *o = r->o ? r->o + c0 * r->o_stride : NULL;
        for (int32_t t = 0; t < L; t++) {
            G[t] = (t ? G[t - 1] : 0.0f) + g[t * gs];
            eG[t] = expf(G[t]);
            for (int32_t i = 0; i < hk; i++) {
                kT[(size_t)i * C + t] = k[t * qs + i];
                qT[(size_t)i * C + t] = q[t * qs + i];
            }
        }
        /* S k_t and S q_t for every t, row j of S at a time. */
        for (int32_t j = 0; j < hv; j++) {
            const float *m = M + (size_t)j * hk;
            float *sk = acc, *sq = acc + C;
            for (int32_t t = 0; t < L; t++) sk[t] = sq[t] = 0.0f;
            for (int32_t i = 0; i < hk; i++) {
                const float mi = m[i], *ki = kT + (size_t)i * C, *qi = qT + (size_t)i * C;
                for (int32_t t = 0; t < L; t++) {
                    sk[t] += mi * ki[t];
                    sq[t] += mi * qi[t];
                }
            }
            for (int32_t t = 0; t < L; t++) {
                u[(size_t)t * hv + j] = beta[t * gs] * (v[t * vs + j] - eG[t] * sk[t]);
                if (o) o[t * r->o_stride + j] = eG[t] * sq[t];
            }
        }
        /* The chunk's Gram matrices. */
        for (int32_t t = 0; t < L; t++) {
            float *kk = KK + (size_t)t * C, *kq = KQ + (size_t)t * C;
            for (int32_t s = 0; s < L; s++) kk[s] = kq[s] = 0.0f;
            for (int32_t i = 0; i < hk; i++) {
                const float kti = k[t * qs + i], qti = q[t * qs + i], *ki = kT + (size_t)i * C;
                for (int32_t s = 0; s < L; s++) {
                    kk[s] += kti * ki[s];
                    kq[s] += qti * ki[s];
                }
            }
        }
        for (int32_t t = 1; t < L; t++) {
            float *ut = u + (size_t)t * hv;
            for (int32_t s = 0; s < t; s++) {
                const float a = beta[t * gs] * KK[(size_t)t * C + s] * expf(G[t] - G[s]);
                const float *us = u + (size_t)s * hv;
                for (int32_t j = 0; j < hv; j++) ut[j] -= a * us[j];
            }
        }
        if (o)
            for (int32_t t = 0; t < L; t++) {
                float *ot = o + t * r->o_stride;
                for (int32_t s = 0; s <= t; s++) {
                    const float c = KQ[(size_t)t * C + s] * expf(G[t] - G[s]);
                    const float *us = u + (size_t)s * hv;
                    for (int32_t j = 0; j < hv; j++) ot[j] += c * us[j];
                }
            }
        for (int32_t s = 0; s < L; s++) coef[s] = expf(G[L - 1] - G[s]);
        for (int32_t j = 0; j < hv; j++) {
            float *m = M + (size_t)j * hk;
            for (int32_t i = 0; i < hk; i++) m[i] *= eG[L - 1];
            for (int32_t s = 0; s < L; s++) {
                const float w = coef[s] * u[(size_t)s * hv + j];
                const float *ks = k + s * qs;
                for (int32_t i = 0; i < hk; i++) m[i] += w * ks[i];
            }
        }
    }
}

static float silu(float x) { return x / (1.0f + expf(-x)); }

void kite_ref_dn_conv_silu(const float *const *taps, const float *w_t, int32_t n_taps, int64_t n, float *out) {
    for (int64_t c = 0; c < n; c++) {
        float s = 0.0f;
        for (int32_t t = 0; t < n_taps; t++) s += taps[t][c] * w_t[t * n + c];
        out[c] = silu(s);
    }
}
