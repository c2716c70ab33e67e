/* The trellis types KT2, KT2_5, KT3 and their rotated variants KT2H, KT2_5H, KT3H (quant/trellis.h): encoder
 * round trip, importance weighting, the rotation, the plain-or-rotated choice, and the products of every
 * kernel level this CPU runs.
 *
 * Stated bounds:
 *  - Round trip on a unit Gaussian 32 x 1024 matrix: MSE / variance <= 0.082 (KT2), 0.044 (KT2_5),
 *    0.023 (KT3), plain or rotated (bench/trellis_rd measures 0.076, 0.040, 0.021 on 64 x 4096); the same
 *    data with the stream bits scrambled (negative control) is far above them.
 *  - The rotation against the dense Sylvester-Hadamard product in double: |error| <= 2^-20 max |x|;
 *    rotate then unrotate gives x back within 2^-20 max |x|.
 *  - Reference product vs the double-precision product of the dequantized weights with the float
 *    activations, both in the basis the kernel works in (a rotated type's: its rotated weights and
 *    kite_kt_rotate(x)): |y - dot| <= sum_blocks (d_x / 2) sum_j |w_j| (activation rounding) + (blocks + 4)
 *    * 2^-24 * sum_j |w_j| (|x_j| + d_x) (float rounding). In the original basis (a user's view: the
 *    dequantized weights times x) the same bound plus 2^-18 sum_j |w_j| |x_j| for the rotations.
 *  - Every SIMD level vs the reference: bit-identical, for any batch size, slot and row range, and the
 *    same activation bytes from every level's quantizer. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kernels/kernels_internal.h"
#include "model/tensors.h"
#include "quant/trellis.h"

static const uint32_t kt_types[] = {KITE_TYPE_KT2, KITE_TYPE_KT2_5, KITE_TYPE_KT3, KITE_TYPE_KT2H, KITE_TYPE_KT2_5H, KITE_TYPE_KT3H};
#define N_KT_TYPES (sizeof kt_types / sizeof kt_types[0])
static const double mse_bound[] = {0.082, 0.044, 0.023, 0.082, 0.044, 0.023};
static const kite_cpu_level levels[] = {KITE_CPU_REF, KITE_CPU_AVX2, KITE_CPU_AVX512, KITE_CPU_NEON};

static uint64_t rng;
static double uniform(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return ((double)(rng >> 11) + 0.5) / 9007199254740992.0;
}
static float gauss(void) { return (float)(sqrt(-2.0 * log(uniform())) * cos(6.283185307179586 * uniform())); }

static size_t kt_bytes(uint32_t type, int64_t rows, int64_t cols) { return kite_type_row_bytes(type, cols) * (size_t)rows; }

static double rel_mse(const float *a, const float *b, int64_t n) {
    double e = 0, v = 0;
    for (int64_t i = 0; i < n; i++) e += ((double)a[i] - b[i]) * ((double)a[i] - b[i]), v += (double)a[i] * a[i];
    return e / v;
}

static void test_round_trip(void **state) {
    (void)state;
    const int64_t rows = 32, cols = 1024, n = rows * cols;
    float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n);
    rng = 1;
    for (int64_t i = 0; i < n; i++) x[i] = 0.02f * gauss();
    for (size_t t = 0; t < N_KT_TYPES; t++) {
        const size_t bytes = kt_bytes(kt_types[t], rows, cols);
        assert_int_equal(bytes, (size_t)n * kite_kt_params_of(kt_types[t])->tile_bytes / 4096);
        uint8_t *q = malloc(bytes);
        assert_int_equal(kite_kt_quantize(kt_types[t], x, q, rows, cols, NULL), bytes);
        assert_true(kite_kt_dequantize(kt_types[t], q, rows, cols, y));
        const double m = rel_mse(x, y, n);
        print_message("%s: mse/var %.5f (bound %.3f)\n", kite_kt_traits(kt_types[t])->name, m, mse_bound[t]);
        assert_true(m <= mse_bound[t]);
        /* a row read alone gives the same floats */
        float row[1024];
        kite_kt_dequantize_row(kt_types[t], q, cols, 21, row);
        assert_memory_equal(row, y + 21 * cols, sizeof row);
        /* negative control: scramble every stream byte (scales kept) */
        const kite_kt_params *p = kite_kt_params_of(kt_types[t]);
        for (size_t tile = 0; tile < bytes / p->tile_bytes; tile++)
            for (size_t o = 0; o < (size_t)p->n_words * 64; o++) q[tile * p->tile_bytes + o] ^= (uint8_t)(0x5a + o);
        kite_kt_dequantize(kt_types[t], q, rows, cols, y);
        assert_true(rel_mse(x, y, n) > 4 * mse_bound[t]);
        free(q);
    }
    /* bad arguments */
    uint8_t small[4096];
    assert_int_equal(kite_kt_quantize(KITE_TYPE_KT2, x, small, 15, 256, NULL), 0);
    assert_int_equal(kite_kt_quantize(KITE_TYPE_KT2, x, small, 16, 200, NULL), 0);
    assert_int_equal(kite_kt_quantize(KITE_TYPE_Q4_K, x, small, 16, 256, NULL), 0);
    free(x), free(y);
}

/* Columns the importance matrix marks as 100x more important come out with less error than when the
 * encoder is told nothing, and the others with more. */
static void test_importance(void **state) {
    (void)state;
    const int64_t rows = 16, cols = 512, n = rows * cols;
    float *x = malloc(sizeof(float) * n), *y0 = malloc(sizeof(float) * n), *y1 = malloc(sizeof(float) * n), imp[512];
    rng = 7;
    for (int64_t i = 0; i < n; i++) x[i] = gauss();
    for (int c = 0; c < cols; c++) imp[c] = c % 4 == 0 ? 100.0f : 1.0f;
    uint8_t *q = malloc(kt_bytes(KITE_TYPE_KT2, rows, cols));
    kite_kt_quantize(KITE_TYPE_KT2, x, q, rows, cols, NULL);
    kite_kt_dequantize(KITE_TYPE_KT2, q, rows, cols, y0);
    kite_kt_quantize(KITE_TYPE_KT2, x, q, rows, cols, imp);
    kite_kt_dequantize(KITE_TYPE_KT2, q, rows, cols, y1);
    double heavy[2] = {0, 0}, light[2] = {0, 0};
    for (int64_t i = 0; i < n; i++) {
        const double e0 = (x[i] - y0[i]) * (double)(x[i] - y0[i]), e1 = (x[i] - y1[i]) * (double)(x[i] - y1[i]);
        if (i % cols % 4 == 0) heavy[0] += e0, heavy[1] += e1;
        else light[0] += e0, light[1] += e1;
    }
    print_message("important columns: error %.4f -> %.4f; others %.4f -> %.4f\n", heavy[0], heavy[1], light[0], light[1]);
    assert_true(heavy[1] < 0.5 * heavy[0]);
    assert_true(light[1] > light[0]);
    free(x), free(y0), free(y1), free(q);
}

/* Student-t CDF with 8 degrees of freedom (Abramowitz & Stegun 26.7.3, even degrees of freedom). */
static double t8_cdf(double t) {
    const double th = atan(t / sqrt(8.0)), c2 = cos(th) * cos(th);
    return 0.5 + 0.5 * sin(th) * (1 + c2 / 2 + 3 * c2 * c2 / 8 + 15 * c2 * c2 * c2 / 48);
}
static double t8_quantile(double p) {
    double lo = -50, hi = 50;
    for (int it = 0; it < 200; it++) {
        const double m = (lo + hi) / 2;
        if (t8_cdf(m) < p) lo = m;
        else hi = m;
    }
    return lo;
}

/* The level tables are what trellis.h says: KT_Q the Student-t(8) quantiles 63 t8((i + 0.5) / 64) / t8(63.5 / 64)
 * rounded half up (re-derived here from the CDF), KT_P[h] = 11 h mod 64; and the level of a state reads them as
 * stated. */
static void test_level_tables(void **state) {
    (void)state;
    assert_true(fabs(t8_cdf(1.859548) - 0.95) < 1e-6); /* the table value of t8 at 0.95 */
    const double top = t8_quantile(63.5 / 64);
    for (int i = 0; i < 64; i++) {
        assert_int_equal(kite_kt_q[i], (int)floor(63.0 * t8_quantile((i + 0.5) / 64) / top + 0.5));
        assert_int_equal(kite_kt_p[i], (11 * i) % 64);
    }
    for (uint32_t s = 0; s < 4096; s++) assert_int_equal(kite_kt_level(s), kite_kt_q[(s & 63) ^ kite_kt_p[s >> 6]]);
}

/* w and xb: the weights and activations in the basis the kernel works in (a rotated type's rotated basis), for
 * the float bound; x: the activations as a caller passes them. */
static void check_level(uint32_t type, const kite_kernel_set *ref, const kite_kernel_set *ks, const kite_tensor *t,
                        const float *w, const float *x, const float *xb, int64_t rows, int64_t cols, int32_t n) {
    kite_packed_matrix pr, ps;
    kite_error e = {0};
    assert_int_equal(ref->pack(t, NULL, &pr, &e), KITE_OK);
    assert_int_equal(ks->pack(t, NULL, &ps, &e), KITE_OK);
    assert_ptr_equal(ps.data, t->data); /* the file's bytes, not a copy */
    const size_t ab = kite_round_up(ref->act_bytes(type, cols, n), KITE_ACT_ALIGN);
    uint8_t *act = aligned_alloc(KITE_ACT_ALIGN, ab), *act_s = aligned_alloc(KITE_ACT_ALIGN, ab);
    memset(act, 0, ab), memset(act_s, 0, ab); /* row padding is never written */
    ref->quantize_act(type, x, cols, 0, n, act);
    ks->quantize_act(type, x, cols, 0, n, act_s);
    assert_memory_equal(act, act_s, ab);
    free(act_s);
    float *yr = calloc((size_t)(n * rows), sizeof(float)), *ys = calloc((size_t)(n * rows), sizeof(float));
    ref->matmul(&pr, act, x, n, yr, rows, 0, rows);
    ks->matmul(&ps, act, x, n, ys, rows, 0, rows);
    assert_memory_equal(yr, ys, sizeof(float) * (size_t)(n * rows));
    /* the float bound for the reference */
    const kite_act_geom g = kite_act_geometry(KITE_FAMILY_K, cols);
    for (int32_t b = 0; b < n; b++)
        for (int64_t r = 0; r < rows; r++) {
            double dot = 0, bound = 0, mag = 0;
            for (int64_t blk = 0; blk < cols / 256; blk++) {
                float dx;
                memcpy(&dx, act + (size_t)b * g.row_bytes + g.off_d + (size_t)blk * 4, 4);
                double sw = 0;
                for (int j = 0; j < 256; j++) {
                    const int64_t c = blk * 256 + j;
                    dot += (double)w[r * cols + c] * xb[b * cols + c];
                    sw += fabs(w[r * cols + c]);
                    mag += fabs(w[r * cols + c]) * (fabs(xb[b * cols + c]) + dx);
                }
                bound += dx / 2 * sw;
            }
            bound += (double)(cols / 256 + 4) * ldexp(1.0, -24) * mag;
            if (fabs(yr[b * rows + r] - dot) > bound)
                fail_msg("%s row %lld b %d: %g vs %g (bound %g)", kite_kt_traits(type)->name, (long long)r, b, yr[b * rows + r], dot,
                         bound);
        }
    /* batch invariance and row ranges: one row alone, and rows [5, 37) with the rest untouched */
    float *one = calloc((size_t)rows, sizeof(float));
    uint8_t *act1 = aligned_alloc(KITE_ACT_ALIGN, kite_round_up(ref->act_bytes(type, cols, 1), KITE_ACT_ALIGN));
    ks->quantize_act(type, x + (size_t)(n - 1) * cols, cols, 0, 1, act1);
    ks->matmul(&ps, act1, x + (size_t)(n - 1) * cols, 1, one, rows, 0, rows);
    assert_memory_equal(one, yr + (size_t)(n - 1) * rows, sizeof(float) * (size_t)rows);
    for (int64_t i = 0; i < n * rows; i++) ys[i] = -1.0f;
    ks->matmul(&ps, act, x, n, ys, rows, 5, 37);
    for (int32_t b = 0; b < n; b++)
        for (int64_t r = 0; r < rows; r++) {
            if (r >= 5 && r < 37) assert_memory_equal(&ys[b * rows + r], &yr[b * rows + r], sizeof(float));
            else assert_true(ys[b * rows + r] == -1.0f);
        }
    free(one), free(act1), free(act), free(yr), free(ys);
    kite_packed_matrix_free(&pr);
    kite_packed_matrix_free(&ps);
}

static void test_kernels(void **state) {
    (void)state;
    const int64_t rows = 48, cols = 768;
    float *wf = malloc(sizeof(float) * rows * cols), *w = malloc(sizeof(float) * rows * cols), *x = malloc(sizeof(float) * 5 * cols);
    float *xr = malloc(sizeof(float) * 5 * cols); /* x in the rotated basis */
    rng = 3;
    for (int64_t i = 0; i < rows * cols; i++) wf[i] = 0.05f * gauss();
    for (int64_t i = 0; i < 5 * cols; i++) x[i] = gauss() * (i % 97 == 0 ? 8.0f : 1.0f);
    for (int64_t blk = 0; blk < 5 * cols / 256; blk++) kite_kt_rotate(x + blk * 256, xr + blk * 256);
    const kite_kernel_set *ref = kite_kernels_for(KITE_CPU_REF);
    for (size_t t = 0; t < N_KT_TYPES; t++) {
        const size_t bytes = kt_bytes(kt_types[t], rows, cols);
        const bool rotated = kite_kt_is_rotated(kt_types[t]);
        uint8_t *q = malloc(bytes);
        kite_kt_quantize(kt_types[t], wf, q, rows, cols, NULL);
        /* the weights in the kernel's basis: a rotated type's tiles read as the plain type's are d * level exactly */
        kite_kt_dequantize(kite_kt_plain_type(kt_types[t]), q, rows, cols, w);
        kite_tensor tt = {.name = "w", .type = kt_types[t], .n_dims = 2, .ne = {cols, rows, 1, 1}, .n_bytes = bytes, .data = q};
        int tested = 0;
        for (size_t li = 0; li < sizeof levels / sizeof levels[0]; li++) {
            const kite_kernel_set *ks = kite_kernels_for(levels[li]);
            if (!ks) continue;
#if defined(__x86_64__)
            /* AVX-512: the VBMI kernel where the CPU has it, and the AVX2 fallback it takes without */
            const int variants = levels[li] == KITE_CPU_AVX512 ? 2 : 1;
#else
            const int variants = 1;
#endif
            for (int v = 0; v < variants; v++) {
#if defined(__x86_64__)
                if (levels[li] == KITE_CPU_AVX512 && !kite_avx512_vbmi_set(v == 0) && v == 0) continue;
#endif
                for (int32_t n = 1; n <= 5; n++) check_level(kt_types[t], ref, ks, &tt, w, x, rotated ? xr : x, rows, cols, n);
                tested++;
            }
#if defined(__x86_64__)
            if (levels[li] == KITE_CPU_AVX512) kite_avx512_vbmi_set(true);
#endif
        }
        print_message("%s: %d levels bit-identical to the reference\n", kite_kt_traits(kt_types[t])->name, tested);
        /* rows that are not a multiple of the row group are refused */
        kite_tensor bad = tt;
        bad.ne[1] = 40;
        kite_packed_matrix pm;
        kite_error e = {0};
        assert_int_not_equal(ref->pack(&bad, NULL, &pm, &e), KITE_OK);
        free(q);
    }
    free(wf), free(w), free(x), free(xr);
}

/* kite_kt_rotate is H S x / 16 (H the Sylvester Hadamard matrix, S the signs of kite_kt_signs), written here
 * as a dense product in double; kite_kt_unrotate undoes it. */
static void test_rotation(void **state) {
    (void)state;
    float x[256], y[256], back[256];
    rng = 11;
    double amax = 0;
    for (int j = 0; j < 256; j++) x[j] = j == 37 ? 40.0f : gauss(), amax = fmax(amax, fabs(x[j]));
    kite_kt_rotate(x, y);
    double nx = 0, ny = 0, ymax = 0;
    for (int i = 0; i < 256; i++) {
        double want = 0;
        for (int j = 0; j < 256; j++) {
            const double sj = (kite_kt_signs[j / 64] >> (j % 64)) & 1 ? -1.0 : 1.0;
            want += (__builtin_popcount((unsigned)(i & j)) & 1 ? -1.0 : 1.0) * sj * x[j];
        }
        want /= 16;
        assert_true(fabs(y[i] - want) <= ldexp(amax, -20));
        nx += (double)x[i] * x[i], ny += (double)y[i] * y[i], ymax = fmax(ymax, fabs(y[i]));
    }
    assert_true(fabs(nx - ny) <= 1e-5 * nx); /* orthogonal */
    assert_true(ymax < 0.5 * amax);           /* the outlier at column 37 is spread over the block */
    kite_kt_unrotate(y, back);
    for (int j = 0; j < 256; j++) assert_true(fabs(back[j] - x[j]) <= ldexp(amax, -20));
    /* in place gives the same bits */
    memcpy(back, x, sizeof x);
    kite_kt_rotate(back, back);
    assert_memory_equal(back, y, sizeof y);
    /* the signs are not all equal (S is what makes the rotation random) */
    int ones = 0;
    for (int k = 0; k < 4; k++) ones += __builtin_popcountll(kite_kt_signs[k]);
    assert_true(ones > 96 && ones < 160);
}

/* A rotated type's product, seen from outside: the ref kernel against the double product of the dequantized
 * weights (original basis) with x, within the activation bound and the rotations' rounding. */
static void test_rotated_product(void **state) {
    (void)state;
    const int64_t rows = 16, cols = 512;
    float *wf = malloc(sizeof(float) * rows * cols), *w = malloc(sizeof(float) * rows * cols), *wr = malloc(sizeof(float) * rows * cols);
    float x[512], y[16];
    rng = 5;
    for (int64_t i = 0; i < rows * cols; i++) wf[i] = 0.05f * gauss();
    for (int j = 0; j < cols; j++) x[j] = gauss();
    const kite_kernel_set *ref = kite_kernels_for(KITE_CPU_REF);
    uint8_t *q = malloc(kt_bytes(KITE_TYPE_KT3H, rows, cols));
    kite_kt_quantize(KITE_TYPE_KT3H, wf, q, rows, cols, NULL);
    kite_kt_dequantize(KITE_TYPE_KT3H, q, rows, cols, w);
    kite_kt_dequantize(KITE_TYPE_KT3, q, rows, cols, wr); /* the rotated basis, for the activation bound */
    assert_true(rel_mse(wf, w, rows * cols) <= mse_bound[2]);
    kite_tensor tt = {.name = "w", .type = KITE_TYPE_KT3H, .n_dims = 2, .ne = {cols, rows, 1, 1},
                      .n_bytes = kt_bytes(KITE_TYPE_KT3H, rows, cols), .data = q};
    kite_packed_matrix pm;
    kite_error e = {0};
    assert_int_equal(ref->pack(&tt, NULL, &pm, &e), KITE_OK);
    const size_t ab = kite_round_up(ref->act_bytes(KITE_TYPE_KT3H, cols, 1), KITE_ACT_ALIGN);
    uint8_t *act = aligned_alloc(KITE_ACT_ALIGN, ab);
    ref->quantize_act(KITE_TYPE_KT3H, x, cols, 0, 1, act);
    ref->matmul(&pm, act, x, 1, y, rows, 0, rows);
    const kite_act_geom g = kite_act_geometry(KITE_FAMILY_K, cols);
    for (int64_t r = 0; r < rows; r++) {
        double dot = 0, bound = 0, mag = 0;
        for (int64_t blk = 0; blk < cols / 256; blk++) {
            float dx;
            memcpy(&dx, act + g.off_d + (size_t)blk * 4, 4);
            double sw = 0;
            for (int j = 0; j < 256; j++) {
                const int64_t c = blk * 256 + j;
                dot += (double)w[r * cols + c] * x[c];
                sw += fabs(wr[r * cols + c]);
                mag += fabs(w[r * cols + c]) * fabs(x[c]);
            }
            bound += dx / 2 * sw;
        }
        bound += ldexp(mag, -18);
        if (fabs(y[r] - dot) > bound) fail_msg("kt3h row %lld: %g vs %g (bound %g)", (long long)r, y[r], dot, bound);
    }
    kite_packed_matrix_free(&pm);
    free(act), free(q), free(wf), free(w), free(wr);
}

/* The rotation measurably helps where a block has outliers: on rows with a few columns 12x the rest, each
 * rotated type's error is below its plain type's, and kite_kt_choose picks the rotated one. With an
 * importance matrix that the rotation cannot honour (100x on a quarter of the columns), Gaussian rows
 * come out with less weighted error plain, and kite_kt_choose keeps them plain. */
static void test_choose(void **state) {
    (void)state;
    const int64_t rows = 16, cols = 512, n = rows * cols;
    float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n), imp[512];
    uint8_t *q = malloc(kt_bytes(KITE_TYPE_KT3, rows, cols));
    rng = 9;
    for (int64_t i = 0; i < n; i++) x[i] = gauss() * (i % cols % 61 == 0 ? 12.0f : 1.0f);
    for (int t = 0; t < 3; t++) {
        double m[2];
        for (int v = 0; v < 2; v++) {
            const uint32_t type = kt_types[t + 3 * v];
            kite_kt_quantize(type, x, q, rows, cols, NULL);
            kite_kt_dequantize(type, q, rows, cols, y);
            m[v] = rel_mse(x, y, n);
        }
        print_message("%s with outlier columns: mse/var %.4f plain, %.4f rotated\n", kite_kt_traits(kt_types[t])->name, m[0], m[1]);
        assert_true(m[1] < 0.8 * m[0]);
        double ep = 0, er = 0;
        assert_int_equal(kite_kt_choose(kt_types[t], x, rows, cols, NULL, &ep, &er), kt_types[t + 3]);
        assert_true(er < ep);
        assert_int_equal(kite_kt_choose(kt_types[t + 3], x, rows, cols, NULL, NULL, NULL), kt_types[t + 3]);
    }
    for (int64_t i = 0; i < n; i++) x[i] = gauss();
    for (int c = 0; c < cols; c++) imp[c] = c % 4 == 0 ? 100.0f : 1.0f;
    double ep = 0, er = 0;
    assert_int_equal(kite_kt_choose(KITE_TYPE_KT2H, x, rows, cols, imp, &ep, &er), KITE_TYPE_KT2);
    print_message("weighted error with a 100x imatrix: %.4g plain, %.4g rotated\n", ep, er);
    assert_true(ep < er);
    /* bad arguments */
    assert_int_equal(kite_kt_choose(KITE_TYPE_KT2, x, 15, cols, NULL, NULL, NULL), 0u);
    assert_int_equal(kite_kt_choose(KITE_TYPE_Q4_K, x, rows, cols, NULL, NULL, NULL), 0u);
    free(x), free(y), free(q);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_level_tables),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_importance),
        cmocka_unit_test(test_kernels),
        cmocka_unit_test(test_rotation),
        cmocka_unit_test(test_rotated_product),
        cmocka_unit_test(test_choose),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
