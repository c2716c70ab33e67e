/* The gated delta rule (src/model/deltanet.c): the chunk-parallel form (prefill) and the step-wise
 * recurrence (decoding, drafted trees) against a double-precision step-wise reference of
 *     M = e^g M;  M += beta (v - M k) k^T;  o = M q
 * over 150 tokens (three chunks, the last partial) from a random state, heads of 16 and 64, decays from
 * e^-3 to nearly 1, |k| = 1 (L2-normalised, as the model feeds it) and |q| = head^-1/2.
 * Bound (measured on x86-64: step-wise <= 4e-8, chunked <= 4.1e-7): |o - o_ref| and |M - M_ref| <= 5e-6 x
 * (1 + max |ref|).
 * The negative controls (the reference without the decay, and with beta = 1/2) must differ from the
 * chunked form by more than 100x that bound. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "model/deltanet.h"

#define BOUND 5e-6
enum { N = 150 };

static uint64_t g_state = 0x243f6a8885a308d3ull;
static double uniform(void) { /* in (0, 1) */
    g_state ^= g_state >> 12, g_state ^= g_state << 25, g_state ^= g_state >> 27;
    return ((double)((g_state * 0x2545F4914F6CDD1Dull) >> 11) + 0.5) / 9007199254740992.0;
}

typedef struct inputs {
    int32_t hd;
    float *q, *k, *v, *g, *beta, *M0; /* [N][hd] x3, [N] x2, [hd][hd] */
} inputs;

static void make_inputs(inputs *in, int32_t hd) {
    in->hd = hd;
    in->q = malloc(sizeof(float) * N * hd), in->k = malloc(sizeof(float) * N * hd), in->v = malloc(sizeof(float) * N * hd);
    in->g = malloc(sizeof(float) * N), in->beta = malloc(sizeof(float) * N), in->M0 = malloc(sizeof(float) * hd * hd);
    for (int t = 0; t < N; t++) {
        double sq = 0, sk = 0;
        for (int i = 0; i < hd; i++) {
            in->q[t * hd + i] = (float)(2 * uniform() - 1), in->k[t * hd + i] = (float)(2 * uniform() - 1);
            in->v[t * hd + i] = (float)(4 * uniform() - 2);
            sq += (double)in->q[t * hd + i] * in->q[t * hd + i], sk += (double)in->k[t * hd + i] * in->k[t * hd + i];
        }
        for (int i = 0; i < hd; i++) {
            in->q[t * hd + i] = (float)(in->q[t * hd + i] / sqrt(sq) / sqrt(hd));
            in->k[t * hd + i] = (float)(in->k[t * hd + i] / sqrt(sk));
        }
        in->g[t] = (float)(-3.0 * pow(uniform(), 3.0)); /* mostly mild decay, sometimes strong */
        in->beta[t] = (float)uniform();
    }
    for (int i = 0; i < hd * hd; i++) in->M0[i] = (float)(uniform() - 0.5);
}

static void free_inputs(inputs *in) {
    free(in->q), free(in->k), free(in->v), free(in->g), free(in->beta), free(in->M0);
}

/* The reference in double; decay and beta_override (< 0: none) for the controls. */
static void reference(const inputs *in, bool decay, double beta_override, double *o, double *M) {
    const int hd = in->hd;
    for (int i = 0; i < hd * hd; i++) M[i] = in->M0[i];
    for (int t = 0; t < N; t++) {
        const float *q = in->q + t * hd, *k = in->k + t * hd, *v = in->v + t * hd;
        const double e = decay ? exp((double)in->g[t]) : 1.0, b = beta_override >= 0 ? beta_override : in->beta[t];
        for (int j = 0; j < hd; j++) {
            double *m = M + j * hd, sk = 0, oj = 0;
            for (int i = 0; i < hd; i++) m[i] *= e, sk += m[i] * k[i];
            const double d = (v[j] - sk) * b;
            for (int i = 0; i < hd; i++) m[i] += k[i] * d, oj += m[i] * q[i];
            o[t * hd + j] = oj;
        }
    }
}

/* max |x - ref| / (1 + max |ref|) over n values. */
static double rel_err(const float *x, const double *ref, int n) {
    double worst = 0, scale = 0;
    for (int i = 0; i < n; i++) scale = fmax(scale, fabs(ref[i]));
    for (int i = 0; i < n; i++) worst = fmax(worst, fabs(x[i] - ref[i]));
    return worst / (1 + scale);
}

static void run_forms(int32_t hd) {
    inputs in;
    make_inputs(&in, hd);
    double *o_ref = malloc(sizeof(double) * N * hd), *M_ref = malloc(sizeof(double) * hd * hd);
    reference(&in, true, -1, o_ref, M_ref);
    float *o = malloc(sizeof(float) * N * hd), *M = malloc(sizeof(float) * hd * hd);
    float *work = malloc(sizeof(float) * kite_dn_chunk_work_floats(hd, hd));

    memcpy(M, in.M0, sizeof(float) * hd * hd);
    kite_dn_head_steps(M, hd, hd, in.q, in.k, in.v, in.g, in.beta, N, o);
    double step_o = rel_err(o, o_ref, N * hd), step_M = rel_err(M, M_ref, hd * hd);

    memcpy(M, in.M0, sizeof(float) * hd * hd);
    kite_dn_head_chunked(M, hd, hd, in.q, in.k, in.v, in.g, in.beta, N, o, work);
    double chunk_o = rel_err(o, o_ref, N * hd), chunk_M = rel_err(M, M_ref, hd * hd);
    print_message("head %d: step-wise |do| %.2e |dM| %.2e; chunked |do| %.2e |dM| %.2e (bound %.0e)\n", hd, step_o, step_M,
                  chunk_o, chunk_M, BOUND);
    assert_true(step_o <= BOUND && step_M <= BOUND);
    assert_true(chunk_o <= BOUND && chunk_M <= BOUND);

    /* Negative controls: the chunked output is far from a reference that drops the decay or beta. */
    double *o_ctl = malloc(sizeof(double) * N * hd);
    reference(&in, false, -1, o_ctl, M_ref);
    double no_decay = rel_err(o, o_ctl, N * hd);
    reference(&in, true, 0.5, o_ctl, M_ref);
    double no_beta = rel_err(o, o_ctl, N * hd);
    print_message("head %d controls: without decay %.2e, beta 1/2 %.2e (must exceed %.0e)\n", hd, no_decay, no_beta, 100 * BOUND);
    assert_true(no_decay > 100 * BOUND && no_beta > 100 * BOUND);

    free(o_ctl), free(o), free(M), free(work), free(o_ref), free(M_ref);
    free_inputs(&in);
}

static void test_forms_head16(void **s) { (void)s; run_forms(16); }
static void test_forms_head64(void **s) { (void)s; run_forms(64); }

/* Chunking must not depend on where the token stream is cut: 150 tokens in one call equal 64 + 86 and
 * 1 + 149 within the bound (each call starts from the state the previous one left). */
static void test_chunked_split(void **s) {
    (void)s;
    const int32_t hd = 32;
    inputs in;
    make_inputs(&in, hd);
    double *o_ref = malloc(sizeof(double) * N * hd), *M_ref = malloc(sizeof(double) * hd * hd);
    reference(&in, true, -1, o_ref, M_ref);
    float *o = malloc(sizeof(float) * N * hd), *M = malloc(sizeof(float) * hd * hd);
    float *work = malloc(sizeof(float) * kite_dn_chunk_work_floats(hd, hd));
    const int cuts[3] = {64, 1, 100};
    for (int c = 0; c < 3; c++) {
        memcpy(M, in.M0, sizeof(float) * hd * hd);
        int a = cuts[c];
        kite_dn_head_chunked(M, hd, hd, in.q, in.k, in.v, in.g, in.beta, a, o, work);
        kite_dn_head_chunked(M, hd, hd, in.q + a * hd, in.k + a * hd, in.v + a * hd, in.g + a, in.beta + a, N - a, o + a * hd, work);
        assert_true(rel_err(o, o_ref, N * hd) <= BOUND && rel_err(M, M_ref, hd * hd) <= BOUND);
    }
    free(o), free(M), free(work), free(o_ref), free(M_ref);
    free_inputs(&in);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forms_head16),
        cmocka_unit_test(test_forms_head64),
        cmocka_unit_test(test_chunked_split),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
