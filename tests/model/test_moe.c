/* The routed MoE FFN (src/model/moe.c) against a direct double-precision reference of its math (moe.h:
 * softmax router, top-k largest first with ties to the lower index, optional normalisation, SwiGLU
 * experts, the weighted sum), and its batch invariance: a row's output is bit-identical whether it runs
 * alone or in a batch of 37 rows whose experts it shares, on two threads.
 * Bounds: F32 weights, float kernels: |kite - ref| <= 1e-4 x (1 + |ref|) (f32 sums of 64 terms);
 * Q8_0 experts (the router F32), int8 activations: <= 3e-2 x (1 + max |ref|) (the 8-bit rounding, twice). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/threadpool.h"
#include "kernels/kernels.h"
#include "model/moe.h"
#include "quant/types.h"

enum { DIM = 64, E = 8, K = 3, FFN = 32, N = 37 };

typedef struct fixture {
    uint32_t type;
    float *router, *gate, *up, *down; /* dequantized weights: [E][DIM], [E][FFN][DIM] x2, [E][DIM][FFN] */
    void *storage[1 + 3 * E];
    kite_tensor tensors[1 + 3 * E];
    kite_moe_layer moe;
} fixture;

static uint64_t g_state = 0x9e3779b97f4a7c15ull;
static float uniform(void) { /* in (-1, 1) */
    g_state ^= g_state >> 12, g_state ^= g_state << 25, g_state ^= g_state >> 27;
    return (float)((double)((g_state * 0x2545F4914F6CDD1Dull) >> 11) / 4503599627370496.0 - 1.0);
}

/* A rows x cols matrix of values scale * U(-1, 1), stored as type and packed; w gets what it holds. */
static void make_matrix(fixture *f, int slot, kite_packed_matrix *out, int64_t rows, int64_t cols, float scale, float *w) {
    const uint32_t type = slot == 0 ? KITE_TYPE_F32 : f->type; /* the router stays F32, as llama-quantize keeps it */
    const kite_type_traits *tr = kite_type_get(type);
    size_t row_bytes = kite_type_row_bytes(type, cols);
    unsigned char *data = malloc(row_bytes * (size_t)rows);
    assert_non_null(data);
    for (int64_t r = 0; r < rows; r++) {
        float *row = w + r * cols;
        for (int64_t i = 0; i < cols; i++) row[i] = scale * uniform();
        tr->from_float(row, data + (size_t)r * row_bytes, cols);
        tr->to_float(data + (size_t)r * row_bytes, row, cols); /* the reference uses the stored values */
    }
    kite_tensor *t = &f->tensors[slot];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "m%d", slot);
    t->type = type, t->n_dims = 2, t->ne[0] = cols, t->ne[1] = rows, t->ne[2] = t->ne[3] = 1;
    t->n_bytes = row_bytes * (size_t)rows, t->data = data;
    f->storage[slot] = data;
    kite_error e = {0};
    if (kite_kernels()->pack(t, NULL, out, &e)) fail_msg("pack: %s", e.msg);
}

static void fixture_init(fixture *f, uint32_t type, float router_scale) {
    memset(f, 0, sizeof *f);
    f->type = type;
    f->router = malloc(sizeof(float) * E * DIM);
    f->gate = malloc(sizeof(float) * E * FFN * DIM);
    f->up = malloc(sizeof(float) * E * FFN * DIM);
    f->down = malloc(sizeof(float) * E * DIM * FFN);
    f->moe.n_experts = E;
    f->moe.gate = calloc(E, sizeof(kite_packed_matrix));
    f->moe.up = calloc(E, sizeof(kite_packed_matrix));
    f->moe.down = calloc(E, sizeof(kite_packed_matrix));
    make_matrix(f, 0, &f->moe.router, E, DIM, router_scale, f->router);
    for (int x = 0; x < E; x++) {
        make_matrix(f, 1 + x, &f->moe.gate[x], FFN, DIM, 0.3f, f->gate + x * FFN * DIM);
        make_matrix(f, 1 + E + x, &f->moe.up[x], FFN, DIM, 0.3f, f->up + x * FFN * DIM);
        make_matrix(f, 1 + 2 * E + x, &f->moe.down[x], DIM, FFN, 0.3f, f->down + x * DIM * FFN);
    }
}

static void fixture_free(fixture *f) {
    kite_moe_layer_free(&f->moe);
    for (int i = 0; i < 1 + 3 * E; i++) free(f->storage[i]);
    free(f->router), free(f->gate), free(f->up), free(f->down);
}

/* The math of moe.h in double, for one row. */
static void reference(const fixture *f, const float *x, bool norm, double *out) {
    double logit[E], p[E], max = -INFINITY, sum = 0.0;
    for (int e = 0; e < E; e++) {
        logit[e] = 0.0;
        for (int i = 0; i < DIM; i++) logit[e] += (double)f->router[e * DIM + i] * x[i];
        if (logit[e] > max) max = logit[e];
    }
    for (int e = 0; e < E; e++) sum += (p[e] = exp(logit[e] - max));
    int chosen[K];
    bool taken[E] = {false};
    double w[K], wsum = 0.0;
    for (int k = 0; k < K; k++) {
        int best = -1;
        for (int e = 0; e < E; e++)
            if (!taken[e] && (best < 0 || p[e] > p[best])) best = e; /* equal: the lower index stays */
        taken[best] = true;
        chosen[k] = best;
        wsum += (w[k] = p[best] / sum);
    }
    for (int i = 0; i < DIM; i++) out[i] = 0.0;
    for (int k = 0; k < K; k++) {
        const int e = chosen[k];
        double h[FFN];
        for (int j = 0; j < FFN; j++) {
            double g = 0.0, u = 0.0;
            for (int i = 0; i < DIM; i++) {
                g += (double)f->gate[(e * FFN + j) * DIM + i] * x[i];
                u += (double)f->up[(e * FFN + j) * DIM + i] * x[i];
            }
            h[j] = g / (1.0 + exp(-g)) * u;
        }
        const double wk = norm ? w[k] / wsum : w[k];
        for (int i = 0; i < DIM; i++) {
            double y = 0.0;
            for (int j = 0; j < FFN; j++) y += (double)f->down[(e * DIM + i) * FFN + j] * h[j];
            out[i] += wk * y;
        }
    }
}

static void run_case(uint32_t type, float router_scale, bool norm, double bound_rel, bool bound_by_max) {
    fixture f;
    fixture_init(&f, type, router_scale);
    kite_moe_scratch ms;
    kite_error e = {0};
    if (kite_moe_scratch_init(&ms, N, DIM, E, K, FFN, &e)) fail_msg("scratch: %s", e.msg);
    kite_pool *pool = kite_pool_new(2);
    assert_non_null(pool);
    kite_moe_call c = {.ks = kite_kernels(), .moe = &f.moe, .layer = 0, .dim = DIM, .n_used = K, .expert_ffn = FFN,
                       .norm_weights = norm};
    float *x = malloc(sizeof(float) * N * DIM), *batch = malloc(sizeof(float) * N * DIM), *alone = malloc(sizeof(float) * DIM);
    for (int b = 0; b < N; b++)
        for (int i = 0; i < DIM; i++) x[b * DIM + i] = b % 5 == 4 ? x[(b - 4) * DIM + i] : uniform(); /* some rows repeat */
    kite_moe_ffn(&c, &ms, pool, x, batch, N);
    double worst = 0.0;
    for (int b = 0; b < N; b++) {
        kite_moe_ffn(&c, &ms, pool, x + b * DIM, alone, 1);
        if (memcmp(alone, batch + b * DIM, sizeof(float) * DIM) != 0) fail_msg("row %d differs alone and in a batch of %d", b, N);
        double ref[DIM], max_ref = 0.0;
        reference(&f, x + b * DIM, norm, ref);
        for (int i = 0; i < DIM; i++) max_ref = fmax(max_ref, fabs(ref[i]));
        for (int i = 0; i < DIM; i++) {
            double err = fabs((double)batch[b * DIM + i] - ref[i]) / (1.0 + (bound_by_max ? max_ref : fabs(ref[i])));
            if (err > worst) worst = err;
        }
    }
    /* In place (out == x), as forward.c calls it. */
    memcpy(batch, x, sizeof(float) * N * DIM);
    kite_moe_ffn(&c, &ms, pool, batch, batch, N);
    kite_moe_ffn(&c, &ms, pool, x, alone, 1);
    assert_memory_equal(alone, batch, sizeof(float) * DIM);
    print_message("%s weights, router x%g, %s: worst relative error %.3g (bound %.3g)\n", type == KITE_TYPE_F32 ? "f32" : "q8_0",
                  (double)router_scale, norm ? "normalised" : "not normalised", worst, bound_rel);
    assert_true(worst <= bound_rel);
    free(x), free(batch), free(alone);
    kite_pool_free(pool);
    kite_moe_scratch_free(&ms);
    fixture_free(&f);
}

static void test_f32_normalised(void **s) { (void)s; run_case(KITE_TYPE_F32, 0.5f, true, 1e-4, false); }
static void test_f32_not_normalised(void **s) { (void)s; run_case(KITE_TYPE_F32, 0.5f, false, 1e-4, false); }
/* A zero router: every probability equal, so the first K experts by index win, each weighted 1/K. */
static void test_f32_ties_to_lower_index(void **s) { (void)s; run_case(KITE_TYPE_F32, 0.0f, true, 1e-4, false); }
static void test_q8_0_normalised(void **s) { (void)s; run_case(KITE_TYPE_Q8_0, 0.5f, true, 3e-2, true); }

/* The negative control of the reference comparison: a reference without the normalisation is far from
 * kite's normalised output (so the bound above would catch a missing normalisation). */
static void test_control_normalisation_matters(void **s) {
    (void)s;
    fixture f;
    fixture_init(&f, KITE_TYPE_F32, 0.5f);
    kite_moe_scratch ms;
    kite_error e = {0};
    if (kite_moe_scratch_init(&ms, 1, DIM, E, K, FFN, &e)) fail_msg("scratch: %s", e.msg);
    kite_pool *pool = kite_pool_new(1);
    kite_moe_call c = {.ks = kite_kernels(), .moe = &f.moe, .dim = DIM, .n_used = K, .expert_ffn = FFN, .norm_weights = true};
    float x[DIM], out[DIM];
    for (int i = 0; i < DIM; i++) x[i] = uniform();
    kite_moe_ffn(&c, &ms, pool, x, out, 1);
    double ref[DIM], worst = 0.0;
    reference(&f, x, false, ref);
    for (int i = 0; i < DIM; i++) worst = fmax(worst, fabs((double)out[i] - ref[i]) / (1.0 + fabs(ref[i])));
    print_message("normalised kite vs unnormalised reference: worst relative error %.3g (%.0fx the f32 bound)\n", worst,
                  worst / 1e-4);
    assert_true(worst > 100 * 1e-4);
    kite_pool_free(pool);
    kite_moe_scratch_free(&ms);
    fixture_free(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f32_normalised),          cmocka_unit_test(test_f32_not_normalised),
        cmocka_unit_test(test_f32_ties_to_lower_index), cmocka_unit_test(test_q8_0_normalised),
        cmocka_unit_test(test_control_normalisation_matters),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
