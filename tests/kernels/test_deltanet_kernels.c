/* Gated DeltaNet kernels (kite_kernel_set.dn_steps, dn_chunked, dn_conv_silu) on every level this CPU runs,
 * against an independent double-precision step-wise recurrence
 *     M = e^g M;  M += beta (v - M k) k^T;  o = M q
 * and against the reference set, over heads (hk x hv) 64x64, 128x128, 128x64, 16x16 (AVX-512's fallback)
 * and 40x24 (every level's fallback), token counts 1, 7, 63, 64, 65, 131 (odd chunk lengths, one to three
 * chunks), heads interleaved as the model lays them out (strides of two heads), decays e^-3 .. ~1,
 * |k| = 1 and |q| = hk^-1/2 (the model's L2 norms).
 * Stated bounds:
 *  - recurrence: |o - o_exact| and |M - M_exact| <= 5e-6 x (1 + max |exact|) for both forms on every level
 *    (the model test's bound; the float sums drift by a few ulp per token), so a level and the reference
 *    set agree within 1e-5 x (1 + max |exact|).
 *  - conv row: |out - silu(exact sum)| <= 2e-6 |out_exact| + 4 x 2^-24 x 1.1 x sum_t |x_t w_t| + 1e-30
 *    (kite_silu's bound, and the float sum of four taps times silu's slope <= 1.1).
 * Exactness (the speculative tree commits rest on it): on every level n steps in one call equal n calls of
 * one step bit for bit, and the chunked form's bits do not depend on the work space's prior contents (it
 * is filled with NaN: lanes past a partial chunk must never be read). A conv channel's bits do not depend
 * on the row's width (vector body or tail).
 * Negative controls: the exact recurrence without the decay, and with beta = 1/2, are far (> 100x the bound)
 * from every level's chunked output. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/kernels_internal.h"

#define BOUND 5e-6
static const kite_cpu_level all_levels[] = {KITE_CPU_REF, KITE_CPU_AVX2, KITE_CPU_AVX512, KITE_CPU_NEON};
#define N_LEVELS (sizeof all_levels / sizeof all_levels[0])

static uint64_t g_state = 0x243f6a8885a308d3ull;
static double uniform(void) { /* in (0, 1) */
    g_state ^= g_state >> 12, g_state ^= g_state << 25, g_state ^= g_state >> 27;
    return ((double)((g_state * 0x2545F4914F6CDD1Dull) >> 11) + 0.5) / 9007199254740992.0;
}

/* Two heads interleaved per token, as the model's rows hold them: q, k [n][2][hk], v [n][2][hv], g, beta
 * [n][2]; the test runs head 1 (so every stride and offset matters). */
enum { HEADS = 2, HEAD = 1 };
typedef struct inputs {
    int32_t hk, hv, n;
    float *q, *k, *v, *g, *beta, *M0; /* M0 [hv][hk] */
} inputs;

static void make_inputs(inputs *in, int32_t hk, int32_t hv, int32_t n) {
    in->hk = hk, in->hv = hv, in->n = n;
    in->q = malloc(sizeof(float) * (size_t)n * HEADS * hk), in->k = malloc(sizeof(float) * (size_t)n * HEADS * hk);
    in->v = malloc(sizeof(float) * (size_t)n * HEADS * hv);
    in->g = malloc(sizeof(float) * (size_t)n * HEADS), in->beta = malloc(sizeof(float) * (size_t)n * HEADS);
    in->M0 = malloc(sizeof(float) * (size_t)hv * hk);
    assert_true(in->q && in->k && in->v && in->g && in->beta && in->M0);
    for (int32_t t = 0; t < n * HEADS; t++) {
        float *q = in->q + (size_t)t * hk, *k = in->k + (size_t)t * hk;
        double sq = 0, sk = 0;
        for (int32_t i = 0; i < hk; i++) {
            q[i] = (float)(2 * uniform() - 1), k[i] = (float)(2 * uniform() - 1);
            sq += (double)q[i] * q[i], sk += (double)k[i] * k[i];
        }
        for (int32_t i = 0; i < hk; i++) q[i] = (float)(q[i] / sqrt(sq) / sqrt(hk)), k[i] = (float)(k[i] / sqrt(sk));
        for (int32_t j = 0; j < hv; j++) in->v[(size_t)t * hv + j] = (float)(4 * uniform() - 2);
        in->g[t] = (float)(-3.0 * pow(uniform(), 3.0)); /* mostly mild decay, sometimes strong */
        in->beta[t] = (float)uniform();
    }
    for (int32_t i = 0; i < hv * hk; i++) in->M0[i] = (float)(uniform() - 0.5);
}

static void free_inputs(inputs *in) { free(in->q), free(in->k), free(in->v), free(in->g), free(in->beta), free(in->M0); }

/* Head HEAD's rows of the first n tokens, into M and o ([n][hv], or NULL). */
static kite_dn_head head_of(const inputs *in, float *M, float *o, int32_t t0, int32_t n) {
    const int32_t hk = in->hk, hv = in->hv;
    return (kite_dn_head){.M = M, .hk = hk, .hv = hv, .n = n,
                          .q = in->q + ((size_t)t0 * HEADS + HEAD) * hk, .k = in->k + ((size_t)t0 * HEADS + HEAD) * hk,
                          .v = in->v + ((size_t)t0 * HEADS + HEAD) * hv, .g = in->g + (size_t)t0 * HEADS + HEAD,
                          .beta = in->beta + (size_t)t0 * HEADS + HEAD, .o = o ? o + (size_t)t0 * hv : NULL,
                          .qk_stride = HEADS * hk, .v_stride = HEADS * hv, .o_stride = hv, .gb_stride = HEADS};
}

/* The recurrence in double; decay and beta_override (< 0: none) for the controls. o [n][hv], M [hv][hk]. */
static void exact(const inputs *in, bool decay, double beta_override, double *o, double *M) {
    const int32_t hk = in->hk, hv = in->hv;
    for (int32_t i = 0; i < hv * hk; i++) M[i] = in->M0[i];
    for (int32_t t = 0; t < in->n; t++) {
        const size_t row = (size_t)t * HEADS + HEAD;
        const float *q = in->q + row * hk, *k = in->k + row * hk, *v = in->v + row * hv;
        const double e = decay ? exp((double)in->g[row]) : 1.0, b = beta_override >= 0 ? beta_override : in->beta[row];
        for (int32_t j = 0; j < hv; j++) {
            double *m = M + (size_t)j * hk, sk = 0, oj = 0;
            for (int32_t i = 0; i < hk; i++) m[i] *= e, sk += m[i] * k[i];
            const double d = (v[j] - sk) * b;
            for (int32_t i = 0; i < hk; i++) m[i] += k[i] * d, oj += m[i] * q[i];
            o[(size_t)t * hv + j] = oj;
        }
    }
}

/* max |x - ref| / (1 + max |ref|) over n values (NaN counts as infinitely wrong). */
static double rel_err(const float *x, const double *ref, size_t n) {
    double worst = 0, scale = 0;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(ref[i]));
    for (size_t i = 0; i < n; i++) {
        const double e = fabs(x[i] - ref[i]);
        worst = e == e ? fmax(worst, e) : INFINITY;
    }
    return worst / (1 + scale);
}

static double rel_err_f(const float *x, const float *y, const double *ref, size_t n) {
    double worst = 0, scale = 0;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(ref[i]));
    for (size_t i = 0; i < n; i++) {
        const double e = fabs((double)x[i] - y[i]);
        worst = e == e ? fmax(worst, e) : INFINITY;
    }
    return worst / (1 + scale);
}

typedef struct worst {
    double step, chunk, vs_ref, control;
    int cases;
} worst;

static void recurrence_case(const kite_kernel_set *ks, const kite_kernel_set *ref, int32_t hk, int32_t hv, int32_t n, worst *w) {
    inputs in;
    make_inputs(&in, hk, hv, n);
    const size_t no = (size_t)n * hv, nm = (size_t)hv * hk, nwork = kite_dn_chunk_work_floats(hk, hv);
    double *o_x = malloc(sizeof(double) * no), *M_x = malloc(sizeof(double) * nm), *o_ctl = malloc(sizeof(double) * no);
    float *o = malloc(sizeof(float) * no), *M = malloc(sizeof(float) * nm), *work = malloc(sizeof(float) * nwork);
    float *o2 = malloc(sizeof(float) * no), *M2 = malloc(sizeof(float) * nm);
    float *o_ref = malloc(sizeof(float) * no), *M_ref = malloc(sizeof(float) * nm);
    assert_true(o_x && M_x && o_ctl && o && M && work && o2 && M2 && o_ref && M_ref);
    exact(&in, true, -1, o_x, M_x);

    /* Step-wise: within the bound, and n steps in one call equal n one-step calls bit for bit (a tree's
     * node, a replay and decoding take the same step). A replay's step (o NULL) leaves the same state. */
    memcpy(M, in.M0, sizeof(float) * nm);
    kite_dn_head h = head_of(&in, M, o, 0, n);
    ks->dn_steps(&h);
    const double step = fmax(rel_err(o, o_x, no), rel_err(M, M_x, nm));
    if (!(step <= BOUND)) fail_msg("%s steps %dx%d n %d: error %.3g > %g", ks->name, hk, hv, n, step, BOUND);
    memcpy(M2, in.M0, sizeof(float) * nm);
    for (int32_t t = 0; t < n; t++) {
        kite_dn_head one = head_of(&in, M2, o2, t, 1);
        ks->dn_steps(&one);
    }
    if (memcmp(o, o2, sizeof(float) * no) || memcmp(M, M2, sizeof(float) * nm))
        fail_msg("%s steps %dx%d n %d: one call differs from one-token calls", ks->name, hk, hv, n);
    memcpy(M2, in.M0, sizeof(float) * nm);
    h = head_of(&in, M2, NULL, 0, n);
    ks->dn_steps(&h);
    if (memcmp(M, M2, sizeof(float) * nm)) fail_msg("%s steps %dx%d n %d: a replay's state differs", ks->name, hk, hv, n);
    memcpy(M_ref, in.M0, sizeof(float) * nm);
    h = head_of(&in, M_ref, o_ref, 0, n);
    ref->dn_steps(&h);
    double vs_ref = fmax(rel_err_f(o, o_ref, o_x, no), rel_err_f(M, M_ref, M_x, nm));

    /* Chunked: within the bound, the same bits whatever the work space held before. */
    for (size_t i = 0; i < nwork; i++) work[i] = NAN;
    memcpy(M, in.M0, sizeof(float) * nm);
    h = head_of(&in, M, o, 0, n);
    ks->dn_chunked(&h, work);
    const double chunk = fmax(rel_err(o, o_x, no), rel_err(M, M_x, nm));
    if (!(chunk <= BOUND)) fail_msg("%s chunked %dx%d n %d: error %.3g > %g", ks->name, hk, hv, n, chunk, BOUND);
    memset(work, 0, sizeof(float) * nwork);
    memcpy(M2, in.M0, sizeof(float) * nm);
    h = head_of(&in, M2, o2, 0, n);
    ks->dn_chunked(&h, work);
    if (memcmp(o, o2, sizeof(float) * no) || memcmp(M, M2, sizeof(float) * nm))
        fail_msg("%s chunked %dx%d n %d: the bits depend on the work space's contents", ks->name, hk, hv, n);
    memcpy(M_ref, in.M0, sizeof(float) * nm);
    h = head_of(&in, M_ref, o_ref, 0, n);
    ref->dn_chunked(&h, work);
    vs_ref = fmax(vs_ref, fmax(rel_err_f(o, o_ref, o_x, no), rel_err_f(M, M_ref, M_x, nm)));
    if (!(vs_ref <= 2 * BOUND)) fail_msg("%s %dx%d n %d: %.3g from the reference set", ks->name, hk, hv, n, vs_ref);

    /* Negative controls (enough tokens for the decay and beta to matter). */
    if (n >= 63) {
        exact(&in, false, -1, o_ctl, M_x);
        double ctl = rel_err(o, o_ctl, no);
        exact(&in, true, 0.5, o_ctl, M_x);
        ctl = fmin(ctl, rel_err(o, o_ctl, no));
        if (!(ctl > 100 * BOUND)) fail_msg("%s %dx%d n %d: a control is only %.3g away", ks->name, hk, hv, n, ctl);
        w->control = fmin(w->control, ctl);
    }
    w->step = fmax(w->step, step), w->chunk = fmax(w->chunk, chunk), w->vs_ref = fmax(w->vs_ref, vs_ref);
    w->cases++;
    free(o_x), free(M_x), free(o_ctl), free(o), free(M), free(work), free(o2), free(M2), free(o_ref), free(M_ref);
    free_inputs(&in);
}

static void test_recurrence(void **state) {
    (void)state;
    static const int32_t shapes[][2] = {{64, 64}, {128, 128}, {128, 64}, {16, 16}, {40, 24}};
    static const int32_t counts[] = {1, 7, 63, 64, 65, 131};
    const kite_kernel_set *ref = kite_kernels_for(KITE_CPU_REF);
    for (size_t li = 0; li < N_LEVELS; li++) {
        const kite_kernel_set *ks = kite_kernels_for(all_levels[li]);
        if (!ks) continue;
        assert_non_null(ks->dn_steps);
        assert_non_null(ks->dn_chunked);
        worst w = {.control = INFINITY};
        g_state = 0x243f6a8885a308d3ull;
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) recurrence_case(ks, ref, shapes[s][0], shapes[s][1], counts[c], &w);
        print_message("deltanet %-12s %d cases: steps %.2e, chunked %.2e (bound %.0e), vs ref %.2e (bound %.0e); "
                      "nearest control %.2e (must exceed %.0e)\n",
                      ks->name, w.cases, w.step, w.chunk, BOUND, w.vs_ref, 2 * BOUND, w.control, 100 * BOUND);
    }
}

/* The conv row against the exact sum and silu; a channel's bits the same in rows of any width. */
#define CONV_SILU_BOUND 2e-6
static void test_conv_silu(void **state) {
    (void)state;
    enum { TAPS = 4 };
    static const int64_t widths[] = {1, 3, 7, 8, 15, 16, 17, 33, 100, 6144};
    for (size_t li = 0; li < N_LEVELS; li++) {
        const kite_kernel_set *ks = kite_kernels_for(all_levels[li]);
        if (!ks) continue;
        assert_non_null(ks->dn_conv_silu);
        g_state = 17;
        double worst = 0;
        for (size_t wi = 0; wi < sizeof widths / sizeof widths[0]; wi++) {
            const int64_t n = widths[wi];
            float *x = malloc(sizeof(float) * (size_t)(TAPS * n)), *w = malloc(sizeof(float) * (size_t)(TAPS * n));
            float *out = malloc(sizeof(float) * (size_t)n), *w1 = malloc(sizeof(float) * TAPS);
            assert_true(x && w && out && w1);
            for (int64_t i = 0; i < TAPS * n; i++) x[i] = (float)(8 * uniform() - 4), w[i] = (float)(2 * uniform() - 1);
            const float *taps[TAPS];
            for (int t = 0; t < TAPS; t++) taps[t] = x + t * n;
            ks->dn_conv_silu(taps, w, TAPS, n, out);
            for (int64_t c = 0; c < n; c++) {
                double s = 0, mag = 0;
                for (int t = 0; t < TAPS; t++) s += (double)taps[t][c] * w[t * n + c], mag += fabs((double)taps[t][c] * w[t * n + c]);
                const double want = s / (1 + exp(-s)), err = fabs(out[c] - want);
                const double bound = CONV_SILU_BOUND * fabs(want) + TAPS * 0x1p-24 * 1.1 * mag + 1e-30;
                if (!(err <= bound)) fail_msg("%s conv n %lld c %lld: %.9g, exact %.9g", ks->name, (long long)n, (long long)c, out[c], want);
                worst = fmax(worst, err / bound);
                /* The channel alone (a row of width 1: the tail path) gives the same bits. */
                if (c % 5 == 0 || c == n - 1) {
                    const float *one[TAPS];
                    for (int t = 0; t < TAPS; t++) one[t] = taps[t] + c, w1[t] = w[t * n + c];
                    float y;
                    ks->dn_conv_silu(one, w1, TAPS, 1, &y);
                    if (memcmp(&y, out + c, sizeof y))
                        fail_msg("%s conv n %lld c %lld: %.9g alone, %.9g in the row", ks->name, (long long)n, (long long)c, y, out[c]);
                }
            }
            free(x), free(w), free(out), free(w1);
        }
        print_message("conv_silu %-12s worst error %.2f of the bound\n", ks->name, worst);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_recurrence),
        cmocka_unit_test(test_conv_silu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
