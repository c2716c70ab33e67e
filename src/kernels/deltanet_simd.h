/* Gated DeltaNet's kernels (kite_dn_head in kernels.h) written once for every SIMD level: the step-wise and
 * chunked recurrence of one head and the conv row, the reference's math (ref/ref_deltanet.c) on vectors, the
 * same sums in the same order (fused multiply-adds, vector exponentials: the levels agree with the reference
 * within the bound tests/kernels states). Included by each level's file after its vector layer (the av_*
 * operations attend_simd.h lists) and:
 *
 *   av_silu(v)             kite_silu per lane
 *
 * dn_fits(h) says whether a head's sizes suit the vectors (hk and hv multiples of AV_LANES); the level's
 * entry points run the reference otherwise.
 *
 * Layout of the work: the vectors run over the key elements i (M's rows, the state update), the value
 * elements j (u and o rows), or the chunk's tokens t and s (S k_t, S q_t and the Gram matrices, from k and
 * q transposed): every output element is one accumulation chain over its sum's index in the reference's
 * order, so no horizontal reduction is needed except the step-wise form's two dot products per row. */

#include <math.h>
#include <stdint.h>
#include <string.h>

#define DN_INLINE static inline __attribute__((always_inline))
#define DN_TB 4 /* vectors of accumulators per block (with their pairs: 8 chains) */

DN_INLINE bool dn_fits(const kite_dn_head *h) { return h->hk % AV_LANES == 0 && h->hv % AV_LANES == 0 && h->hk > 0 && h->hv > 0; }

/* a . b over n (a multiple of AV_LANES) elements: two chains (even and odd vectors), then one horizontal sum. */
DN_INLINE float dn_dot(const float *a, const float *b, int32_t n) {
    av_t acc0 = av_zero(), acc1 = av_zero();
    int32_t i = 0;
    for (; i + 2 * AV_LANES <= n; i += 2 * AV_LANES) {
        acc0 = av_fmadd(av_load(a + i), av_load(b + i), acc0);
        acc1 = av_fmadd(av_load(a + i + AV_LANES), av_load(b + i + AV_LANES), acc1);
    }
    if (i < n) acc0 = av_fmadd(av_load(a + i), av_load(b + i), acc0);
    return av_hsum(av_add(acc0, acc1));
}

/* One token (the reference's head_step): row j decayed while M k is summed, then updated while M q is summed. */
static void dn_step(float *M, int32_t hk, int32_t hv, const float *q, const float *k, const float *v, float g, float beta,
                    float *o) {
    const av_t decay = av_set1(expf(g));
    for (int32_t j = 0; j < hv; j++) {
        float *m = M + (size_t)j * hk;
        av_t a0 = av_zero(), a1 = av_zero();
        int32_t i = 0;
        for (; i + 2 * AV_LANES <= hk; i += 2 * AV_LANES) {
            const av_t m0 = av_mul(av_load(m + i), decay), m1 = av_mul(av_load(m + i + AV_LANES), decay);
            av_store(m + i, m0);
            av_store(m + i + AV_LANES, m1);
            a0 = av_fmadd(m0, av_load(k + i), a0);
            a1 = av_fmadd(m1, av_load(k + i + AV_LANES), a1);
        }
        if (i < hk) {
            const av_t m0 = av_mul(av_load(m + i), decay);
            av_store(m + i, m0);
            a0 = av_fmadd(m0, av_load(k + i), a0);
        }
        const av_t d = av_set1((v[j] - av_hsum(av_add(a0, a1))) * beta);
        a0 = a1 = av_zero();
        for (i = 0; i + 2 * AV_LANES <= hk; i += 2 * AV_LANES) {
            const av_t m0 = av_fmadd(av_load(k + i), d, av_load(m + i));
            const av_t m1 = av_fmadd(av_load(k + i + AV_LANES), d, av_load(m + i + AV_LANES));
            av_store(m + i, m0);
            av_store(m + i + AV_LANES, m1);
            if (o) {
                a0 = av_fmadd(m0, av_load(q + i), a0);
                a1 = av_fmadd(m1, av_load(q + i + AV_LANES), a1);
            }
        }
        if (i < hk) {
            const av_t m0 = av_fmadd(av_load(k + i), d, av_load(m + i));
            av_store(m + i, m0);
            if (o) a0 = av_fmadd(m0, av_load(q + i), a0);
        }
        if (o) o[j] = av_hsum(av_add(a0, a1));
    }
}

static void dn_steps(const kite_dn_head *r) {
    for (int32_t t = 0; t < r->n; t++)
        dn_step(r->M, r->hk, r->hv, r->q ? r->q + t * r->qk_stride : NULL, r->k + t * r->qk_stride, r->v + t * r->v_stride,
                r->g[t * r->gb_stride], r->beta[t * r->gb_stride], r->o ? r->o + t * r->o_stride : NULL);
}

/* x[t] = sum_i a[i] * A[i][t] and y[t] = sum_i b[i] * B[i][t] for NB vectors of t from t0 (rows of A and B
 * KITE_DN_CHUNK apart), i ascending; a_stride is the distance between a's (and b's) consecutive elements. */
DN_INLINE void dn_pair_block(const float *a, const float *b, int64_t a_stride, const float *A, const float *B, int32_t n_i,
                             int32_t t0, float *x, float *y, const int NB) {
    av_t ax[DN_TB], ay[DN_TB];
#pragma GCC unroll 4
    for (int c = 0; c < NB; c++) ax[c] = ay[c] = av_zero();
    for (int32_t i = 0; i < n_i; i++) {
        const av_t ai = av_set1(a[i * a_stride]), bi = av_set1(b[i * a_stride]);
        const float *Ai = A + (size_t)i * KITE_DN_CHUNK + t0, *Bi = B + (size_t)i * KITE_DN_CHUNK + t0;
#pragma GCC unroll 4
        for (int c = 0; c < NB; c++) {
            ax[c] = av_fmadd(ai, av_load(Ai + c * AV_LANES), ax[c]);
            ay[c] = av_fmadd(bi, av_load(Bi + c * AV_LANES), ay[c]);
        }
    }
#pragma GCC unroll 4
    for (int c = 0; c < NB; c++) {
        av_store(x + t0 + c * AV_LANES, ax[c]);
        av_store(y + t0 + c * AV_LANES, ay[c]);
    }
}

/* dn_pair_block over nv vectors of t from 0, DN_TB at a time. */
DN_INLINE void dn_pair(const float *a, const float *b, int64_t a_stride, const float *A, const float *B, int32_t n_i, int32_t nv,
                       float *x, float *y) {
    for (int32_t v0 = 0; v0 < nv; v0 += DN_TB) {
        const int32_t t0 = v0 * AV_LANES;
        switch (nv - v0 < DN_TB ? nv - v0 : DN_TB) {
        case 1: dn_pair_block(a, b, a_stride, A, B, n_i, t0, x, y, 1); break;
        case 2: dn_pair_block(a, b, a_stride, A, B, n_i, t0, x, y, 2); break;
        case 3: dn_pair_block(a, b, a_stride, A, B, n_i, t0, x, y, 3); break;
        default: dn_pair_block(a, b, a_stride, A, B, n_i, t0, x, y, 4); break;
        }
    }
}

/* acc[j] (NB vectors from j0, loaded from and stored to dst) += sum_s w[s] * rows[s][j] for s in [0, ns), s
 * ascending, row s at rows + s * row_stride. */
DN_INLINE void dn_axpy_block(float *dst, const float *w, const float *rows, int64_t row_stride, int32_t ns, int32_t j0, const int NB) {
    av_t acc[DN_TB];
#pragma GCC unroll 4
    for (int c = 0; c < NB; c++) acc[c] = av_load(dst + j0 + c * AV_LANES);
    for (int32_t s = 0; s < ns; s++) {
        const av_t ws = av_set1(w[s]);
        const float *row = rows + s * row_stride + j0;
#pragma GCC unroll 4
        for (int c = 0; c < NB; c++) acc[c] = av_fmadd(ws, av_load(row + c * AV_LANES), acc[c]);
    }
#pragma GCC unroll 4
    for (int c = 0; c < NB; c++) av_store(dst + j0 + c * AV_LANES, acc[c]);
}

DN_INLINE void dn_axpy(float *dst, int32_t n, const float *w, const float *rows, int64_t row_stride, int32_t ns) {
    const int32_t nv = n / AV_LANES;
    for (int32_t v0 = 0; v0 < nv; v0 += DN_TB) {
        const int32_t j0 = v0 * AV_LANES;
        switch (nv - v0 < DN_TB ? nv - v0 : DN_TB) {
        case 1: dn_axpy_block(dst, w, rows, row_stride, ns, j0, 1); break;
        case 2: dn_axpy_block(dst, w, rows, row_stride, ns, j0, 2); break;
        case 3: dn_axpy_block(dst, w, rows, row_stride, ns, j0, 3); break;
        default: dn_axpy_block(dst, w, rows, row_stride, ns, j0, 4); break;
        }
    }
}

/* The reference's kite_ref_dn_chunked on vectors (its comment has the math). The chunk's columns of k^T and
 * q^T past its L tokens are zero and G past L repeats G[L-1], so the vectors over t may run to a whole
 * vector; the lanes past what the reference computes are never read. */
static void dn_chunked(const kite_dn_head *r, float *work) {
    enum { C = KITE_DN_CHUNK };
    const int32_t hk = r->hk, hv = r->hv, n = r->n;
    float *M = r->M;
    float *G = work, *eG = G + C, *E = eG + C, *acc = E + C; /* acc: [2][C] */
    float *u = acc + 2 * C;                 /* [C][hv] */
    float *kT = u + (size_t)C * hv;         /* [hk][C] */
    float *qT = kT + (size_t)hk * C;        /* [hk][C] */
    float *KK = qT + (size_t)hk * C;        /* [C][C]: KK[t][s] = k_t . k_s (s <= t, whole vectors) */
    float *KQ = KK + (size_t)C * C;         /* [C][C]: KQ[t][s] = k_s . q_t */
    const int64_t qs = r->qk_stride, vs = r->v_stride, gs = r->gb_stride;
    float wrow[C], crow[C];
    for (int32_t c0 = 0; c0 < n; c0 += C) {
        const int32_t L = n - c0 < C ? n - c0 : C, nvL = (L + AV_LANES - 1) / AV_LANES, Lp = nvL * AV_LANES;
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
        for (int32_t t = L; t < Lp; t++) {
            G[t] = G[L - 1];
            for (int32_t i = 0; i < hk; i++) kT[(size_t)i * C + t] = qT[(size_t)i * C + t] = 0.0f;
        }
        /* S k_t and S q_t for every t, row j of S at a time (vectors over t). */
        for (int32_t j = 0; j < hv; j++) {
            const float *m = M + (size_t)j * hk;
            dn_pair(m, m, 1, kT, qT, hk, nvL, acc, acc + C);
            for (int32_t t = 0; t < L; t++) {
                u[(size_t)t * hv + j] = beta[t * gs] * (v[t * vs + j] - eG[t] * acc[t]);
                if (o) o[t * r->o_stride + j] = eG[t] * acc[C + t];
            }
        }
        /* The Gram matrices' rows (vectors over s, up to the vector holding s = t). */
        for (int32_t t = 0; t < L; t++)
            dn_pair(k + t * qs, q + t * qs, 1, kT, kT, hk, t / AV_LANES + 1, KK + (size_t)t * C, KQ + (size_t)t * C);
        /* Row t of u (forward substitution over s < t), then o_t over s <= t (u_s final for s <= t). */
        for (int32_t t = 0; t < L; t++) {
            const int32_t ns = t / AV_LANES + 1;
            const av_t Gt = av_set1(G[t]);
            for (int32_t c = 0; c < ns; c++) av_store(E + c * AV_LANES, av_exp(av_sub(Gt, av_load(G + c * AV_LANES))));
            const float bt = beta[t * gs];
            for (int32_t s = 0; s < t; s++) wrow[s] = -(bt * KK[(size_t)t * C + s] * E[s]);
            float *ut = u + (size_t)t * hv;
            dn_axpy(ut, hv, wrow, u, hv, t);
            if (o) {
                for (int32_t s = 0; s <= t; s++) crow[s] = KQ[(size_t)t * C + s] * E[s];
                dn_axpy(o + t * r->o_stride, hv, crow, u, hv, t + 1);
            }
        }
        /* S' = e^{G_L} S + sum_s e^{G_L - G_s} u_s k_s^T, row j at a time (vectors over i). */
        {
            const av_t GL = av_set1(G[L - 1]);
            for (int32_t c = 0; c < nvL; c++) av_store(E + c * AV_LANES, av_exp(av_sub(GL, av_load(G + c * AV_LANES))));
        }
        const av_t eGL = av_set1(eG[L - 1]);
        for (int32_t j = 0; j < hv; j++) {
            float *m = M + (size_t)j * hk;
            for (int32_t i = 0; i < hk; i += AV_LANES) av_store(m + i, av_mul(av_load(m + i), eGL));
            for (int32_t s = 0; s < L; s++) wrow[s] = E[s] * u[(size_t)s * hv + j];
            dn_axpy(m, hk, wrow, k, qs, L);
        }
    }
}

/* The conv row: vectors over channels, the taps in order; the tail on a padded copy with the same steps. */
static void dn_conv_silu(const float *const *taps, const float *w_t, int32_t n_taps, int64_t n, float *out) {
    int64_t c = 0;
    for (; c + AV_LANES <= n; c += AV_LANES) {
        av_t s = av_mul(av_load(taps[0] + c), av_load(w_t + c));
        for (int32_t t = 1; t < n_taps; t++) s = av_fmadd(av_load(taps[t] + c), av_load(w_t + t * n + c), s);
        av_store(out + c, av_silu(s));
    }
    if (c < n) {
        float x[AV_LANES] = {0}, w[AV_LANES] = {0}, y[AV_LANES];
        av_t s = av_zero();
        for (int32_t t = 0; t < n_taps; t++) {
            memcpy(x, taps[t] + c, sizeof(float) * (size_t)(n - c));
            memcpy(w, w_t + t * n + c, sizeof(float) * (size_t)(n - c));
            s = t == 0 ? av_mul(av_load(x), av_load(w)) : av_fmadd(av_load(x), av_load(w), s);
        }
        av_store(y, av_silu(s));
        memcpy(out + c, y, sizeof(float) * (size_t)(n - c));
    }
}
