/* Matrix kernels: every weight type x every kernel level this CPU runs, against the reference set and
 * against an independent float product.
 *
 * Stated bounds (see src/kernels/kernels_internal.h for the math):
 *  - SIMD levels vs the reference set: bit-identical (the integer parts are exact and the float steps are
 *    the same operations in the same order), and the quantized activations are byte-identical.
 *  - Batch invariance: y[b][r] bit-identical for any n, slot b and row range, on every level.
 *  - Reference vs the exact product of the stored weights with float activations (kite_ref_dot, itself
 *    within nb * 2^-24 * sum|w x| of exact): |y - dot| <= sum_blocks (d_x / 2) * sum_j |w_j|  (activation
 *    rounding to int8) + (steps + 4) * 2^-24 * sum_j |w_j| (|x_j| + d_x)   (float rounding), with steps =
 *    blocks (quantized) or columns (float types, no activation rounding). */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "base/fp16.h"
#include "kernels/kernels_internal.h"
#include "quant/types.h"

static const uint32_t all_types[] = {
    KITE_TYPE_F32,  KITE_TYPE_F16,  KITE_TYPE_BF16, KITE_TYPE_Q8_0, KITE_TYPE_Q4_0, KITE_TYPE_Q4_1, KITE_TYPE_Q5_0,
    KITE_TYPE_Q5_1, KITE_TYPE_Q2_K, KITE_TYPE_Q3_K, KITE_TYPE_Q4_K, KITE_TYPE_Q5_K, KITE_TYPE_Q6_K,
};
#define N_TYPES (sizeof all_types / sizeof all_types[0])

static const kite_cpu_level all_levels[] = {KITE_CPU_REF, KITE_CPU_AVX2, KITE_CPU_AVX512, KITE_CPU_NEON};

/* ---- deterministic data --------------------------------------------------------------------------------- */

static uint64_t rng_state;
static uint32_t rng_u32(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33);
}
static float rng_uniform(void) { return (float)((rng_u32() + 0.5) / 2147483648.0) - 1.0f; } /* (-1, 1) */
static float rng_normalish(void) { return rng_uniform() + rng_uniform() + rng_uniform(); }

/* Weight rows: mostly normal-ish values, a few large outliers, some all-zero blocks. */
static void fill_weights(float *w, int64_t count) {
    for (int64_t i = 0; i < count; i++) {
        float v = rng_normalish() * 0.05f;
        if (rng_u32() % 97 == 0) v *= 20.0f;
        w[i] = v;
    }
    if (count >= 64) memset(w + 32, 0, 32 * sizeof *w); /* a zero 32-block */
}

static void fill_acts(float *x, int64_t count) {
    for (int64_t i = 0; i < count; i++) {
        float v = rng_normalish();
        if (rng_u32() % 53 == 0) v *= 30.0f;
        x[i] = v;
    }
}

typedef struct matrix {
    kite_tensor t;
    void *bytes;
    float *deq; /* rows x cols, dequantized */
} matrix;

static void make_matrix(matrix *m, uint32_t type, int64_t rows, int64_t cols) {
    const kite_type_traits *tr = kite_type_get(type);
    assert_non_null(tr);
    size_t row_bytes = kite_type_row_bytes(type, cols);
    assert_true(row_bytes > 0);
    float *src = malloc(sizeof(float) * (size_t)(rows * cols));
    m->bytes = malloc(row_bytes * (size_t)rows);
    m->deq = malloc(sizeof(float) * (size_t)(rows * cols));
    assert_non_null(src);
    assert_non_null(m->bytes);
    assert_non_null(m->deq);
    fill_weights(src, rows * cols);
    for (int64_t r = 0; r < rows; r++) {
        tr->from_float(src + r * cols, (uint8_t *)m->bytes + (size_t)r * row_bytes, cols);
        tr->to_float((uint8_t *)m->bytes + (size_t)r * row_bytes, m->deq + r * cols, cols);
    }
    free(src);
    memset(&m->t, 0, sizeof m->t);
    snprintf(m->t.name, sizeof m->t.name, "test.%s.%lldx%lld", tr->name, (long long)rows, (long long)cols);
    m->t.type = type;
    m->t.n_dims = 2;
    m->t.ne[0] = cols;
    m->t.ne[1] = rows;
    m->t.ne[2] = m->t.ne[3] = 1;
    m->t.n_bytes = row_bytes * (size_t)rows;
    m->t.data = m->bytes;
}

static void free_matrix(matrix *m) {
    free(m->bytes);
    free(m->deq);
}

/* Runs y = W x with set s over rows [r0, r1); y is [n][rows]. */
static void run(const kite_kernel_set *s, const kite_packed_matrix *pm, const float *x, int32_t n, float *y, int64_t r0,
                int64_t r1) {
    size_t ab = s->act_bytes(pm->type, pm->cols, n);
    void *act = NULL;
    if (ab) {
        act = aligned_alloc(64, kite_round_up(ab, 64));
        assert_non_null(act);
        s->quantize_act(pm->type, x, pm->cols, 0, n, act);
    }
    s->matmul(pm, act, x, n, y, pm->rows, r0, r1);
    free(act);
}

static int bits_equal(const float *a, const float *b, size_t count, size_t *first_diff) {
    for (size_t i = 0; i < count; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0) {
            if (first_diff) *first_diff = i;
            return 0;
        }
    return 1;
}

/* ---- one shape: every level vs the reference, invariance, and ref vs float ------------------------------ */

static void check_shape(uint32_t type, int64_t rows, int64_t cols, int32_t n) {
    const kite_type_traits *tr = kite_type_get(type);
    matrix m;
    make_matrix(&m, type, rows, cols);
    float *x = malloc(sizeof(float) * (size_t)(n * cols));
    assert_non_null(x);
    fill_acts(x, n * cols);
    size_t ycount = (size_t)n * (size_t)rows;
    float *y_ref = malloc(sizeof(float) * ycount), *y = malloc(sizeof(float) * ycount);
    float *y_one = malloc(sizeof(float) * (size_t)rows);
    assert_non_null(y_ref);
    assert_non_null(y);
    assert_non_null(y_one);

    const kite_kernel_set *ref = kite_kernels_for(KITE_CPU_REF);
    assert_non_null(ref);
    kite_error e = {0};
    kite_packed_matrix pref;
    assert_int_equal(ref->pack(&m.t, NULL, &pref, &e), KITE_OK);
    run(ref, &pref, x, n, y_ref, 0, rows);

    /* Reference vs the float product of the stored weights. */
    kite_family fam = kite_type_family(type);
    kite_act_geom ag = kite_act_geometry(fam, cols);
    size_t ab = ref->act_bytes(type, cols, n);
    uint8_t *act_ref = NULL;
    if (ab) {
        act_ref = aligned_alloc(64, kite_round_up(ab, 64));
        assert_non_null(act_ref);
        ref->quantize_act(type, x, cols, 0, n, act_ref);
    }
    size_t row_bytes = kite_type_row_bytes(type, cols);
    const double u = 1.0 / 16777216.0;
    for (int32_t b = 0; b < n; b++) {
        for (int64_t r = 0; r < rows; r++) {
            const float *wr = m.deq + r * cols, *xb = x + (size_t)b * (size_t)cols;
            double dot = kite_ref_dot(type, (const uint8_t *)m.bytes + (size_t)r * row_bytes, xb, cols);
            double quant_bound = 0.0, float_mass = 0.0, abs_mass = 0.0;
            int64_t steps = cols;
            if (fam != KITE_FAMILY_FLOAT) {
                steps = ag.n_blocks;
                for (int64_t blk = 0; blk < ag.n_blocks; blk++) {
                    float dx;
                    memcpy(&dx, act_ref + (size_t)b * ag.row_bytes + ag.off_d + (size_t)blk * 4, 4);
                    double wsum = 0.0;
                    for (int j = 0; j < ag.block; j++) {
                        double wj = fabs(wr[blk * ag.block + j]);
                        wsum += wj;
                        float_mass += wj * (fabs(xb[blk * ag.block + j]) + dx);
                    }
                    quant_bound += 0.5 * dx * wsum * (1.0 + 4 * u);
                }
            } else {
                for (int64_t k = 0; k < cols; k++) float_mass += fabs((double)wr[k] * xb[k]);
            }
            for (int64_t k = 0; k < cols; k++) abs_mass += fabs((double)wr[k] * xb[k]);
            double dot_err = (double)(cols / tr->block_size + 2) * u * abs_mass;
            double bound = quant_bound + (double)(steps + 4) * u * float_mass + dot_err + 1e-30;
            double got = y_ref[(size_t)b * (size_t)rows + (size_t)r];
            if (!(fabs(got - dot) <= bound))
                fail_msg("%s %lldx%lld n=%d: ref row %lld act %d = %.9g, float dot %.9g, |diff| %.3g > bound %.3g",
                         tr->name, (long long)rows, (long long)cols, n, (long long)r, b, got, dot, fabs(got - dot), bound);
        }
    }

    for (size_t li = 0; li < sizeof all_levels / sizeof all_levels[0]; li++) {
        const kite_kernel_set *s = kite_kernels_for(all_levels[li]);
        if (!s) continue;
        kite_packed_matrix pm;
        assert_int_equal(s->pack(&m.t, NULL, &pm, &e), KITE_OK);
        assert_int_equal(pm.rows, rows);
        assert_int_equal(pm.cols, cols);
        assert_int_equal(s->act_bytes(type, cols, n), ab);
        /* Quantized activations: byte-identical to the reference quantizer. */
        if (ab) {
            uint8_t *act = aligned_alloc(64, kite_round_up(ab, 64));
            assert_non_null(act);
            memset(act, 0, ab);
            s->quantize_act(type, x, cols, 0, n, act);
            for (int32_t b = 0; b < n; b++) {
                const uint8_t *p = act + (size_t)b * ag.row_bytes, *q = act_ref + (size_t)b * ag.row_bytes;
                size_t used = fam == KITE_FAMILY_B32 ? ag.off_sum + (size_t)ag.n_blocks * 4 : ag.off_sum32 + (size_t)ag.n_blocks * 16;
                if (memcmp(p, q, used) != 0)
                    fail_msg("%s: %s quantized activation row %d differs from the reference", s->name, tr->name, b);
            }
            free(act);
        }
        /* Full product: bit-identical to the reference. */
        for (size_t i = 0; i < ycount; i++) y[i] = NAN;
        run(s, &pm, x, n, y, 0, rows);
        size_t at = 0;
        if (!bits_equal(y, y_ref, ycount, &at))
            fail_msg("%s: %s %lldx%lld n=%d: act %zu row %zu = %.9g, reference %.9g", s->name, tr->name, (long long)rows,
                     (long long)cols, n, at / (size_t)rows, at % (size_t)rows, y[at], y_ref[at]);
        /* Each activation row alone (n = 1, slot 0) gives the same bits. */
        for (int32_t b = 0; b < n; b++) {
            run(s, &pm, x + (size_t)b * (size_t)cols, 1, y_one, 0, rows);
            if (!bits_equal(y_one, y + (size_t)b * (size_t)rows, (size_t)rows, &at))
                fail_msg("%s: %s n=%d: act %d alone differs at row %zu", s->name, tr->name, n, b, at);
        }
        /* A rotated batch (row b in slot b + 1) gives the same bits. */
        if (n > 1) {
            float *xr = malloc(sizeof(float) * (size_t)(n * cols)), *yr = malloc(sizeof(float) * ycount);
            assert_non_null(xr);
            assert_non_null(yr);
            for (int32_t b = 0; b < n; b++)
                memcpy(xr + (size_t)((b + 1) % n) * (size_t)cols, x + (size_t)b * (size_t)cols, sizeof(float) * (size_t)cols);
            run(s, &pm, xr, n, yr, 0, rows);
            for (int32_t b = 0; b < n; b++)
                if (!bits_equal(yr + (size_t)((b + 1) % n) * (size_t)rows, y + (size_t)b * (size_t)rows, (size_t)rows, NULL))
                    fail_msg("%s: %s n=%d: act %d in another slot differs", s->name, tr->name, n, b);
            free(xr);
            free(yr);
        }
        /* Arbitrary row ranges (not multiples of any interleave) cover the rows with the same bits. */
        {
            for (size_t i = 0; i < ycount; i++) y[i] = NAN;
            int64_t cuts[4] = {0, rows / 3, rows / 3 + (rows > 4 ? 3 : 0), rows};
            if (cuts[2] > rows) cuts[2] = rows;
            for (int c = 0; c < 3; c++) run(s, &pm, x, n, y, cuts[c], cuts[c + 1]);
            if (!bits_equal(y, y_ref, ycount, &at))
                fail_msg("%s: %s n=%d: split row ranges differ at act %zu row %zu", s->name, tr->name, n, at / (size_t)rows,
                         at % (size_t)rows);
        }
        kite_packed_matrix_free(&pm);
    }
    kite_packed_matrix_free(&pref);
    free(act_ref);
    free(x);
    free(y_ref);
    free(y);
    free(y_one);
    free_matrix(&m);
}

static void test_all_types_all_levels(void **state) {
    (void)state;
    rng_state = 12345;
    static const int32_t ns[] = {1, 2, 3, 7, 16, 33, 64};
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        uint32_t type = all_types[ti];
        const kite_type_traits *tr = kite_type_get(type);
        int64_t bs = tr->block_size > 1 ? tr->block_size : 32;
        bool k = bs == 256;
        /* Shapes: rows off any interleave, 1..several blocks of columns. */
        const int64_t shapes[][2] = {
            {1, bs}, {5, 2 * bs}, {17, 3 * bs}, {33, k ? 2 * bs : 5 * bs}, {16, bs}, {50, k ? 3 * bs : 8 * bs},
        };
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
            for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
                /* Keep the big batches to a few shapes so the program stays fast under sanitizers. */
                if (ns[ni] > 16 && si != 2 && si != 5) continue;
                check_shape(type, shapes[si][0], shapes[si][1], ns[ni]);
            }
    }
}

/* Float types take any column count (llama2.c models have FFN widths like 172). */
static void test_float_odd_columns(void **state) {
    (void)state;
    rng_state = 777;
    static const int64_t cols[] = {1, 7, 16, 33, 172};
    static const uint32_t types[] = {KITE_TYPE_F32, KITE_TYPE_F16, KITE_TYPE_BF16};
    for (size_t t = 0; t < 3; t++)
        for (size_t c = 0; c < sizeof cols / sizeof cols[0]; c++) {
            check_shape(types[t], 19, cols[c], 1);
            check_shape(types[t], 40, cols[c], 9);
        }
}

/* The 1.1B-like widths once, to exercise long accumulations and many groups. */
static void test_wide_rows(void **state) {
    (void)state;
    rng_state = 4242;
    check_shape(KITE_TYPE_Q4_0, 40, 2048, 3);
    check_shape(KITE_TYPE_Q8_0, 40, 2048, 9);
    check_shape(KITE_TYPE_Q4_K, 24, 2048, 2);
    check_shape(KITE_TYPE_Q6_K, 24, 2048, 9);
    check_shape(KITE_TYPE_F16, 24, 1000, 2);
}

/* The batch sizes where the AVX-512 tiling changes (tiles of up to 12 rows for the 32-block types, split
 * evenly; one dpbusd chain from 3 rows; the AMX tiles from 24 rows, one or two A/C pairs per tile, up to
 * 32 rows) and columns past one chunk of precomputed offset terms (65 blocks): every level against the
 * reference and batch invariance, with the AMX tiles on (when the CPU has them) and forced off. */
static void test_tile_edges(void **state) {
    (void)state;
    rng_state = 2718;
    static const uint32_t types[] = {KITE_TYPE_Q4_0, KITE_TYPE_Q8_0, KITE_TYPE_Q5_0, KITE_TYPE_Q4_1, KITE_TYPE_Q5_1};
    static const int32_t ns[] = {4, 5, 9, 12, 13, 17, 23, 24, 25, 33, 40};
#if defined(__x86_64__)
    const bool have_amx = kite_avx512_amx_set(true);
#else
    const bool have_amx = false;
#endif
    /* Without AMX (other CPUs, qemu) both passes would run the same VNNI code: one pass then. */
    for (int amx = have_amx ? 1 : 0; amx >= 0; amx--) {
#if defined(__x86_64__)
        kite_avx512_amx_set(amx != 0);
#endif
        for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
            for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) check_shape(types[t], 40, 65 * 32, ns[i]);
            /* An odd row count (a partial 16-row group, 5 of 16 rows masked) and an odd block count. */
            for (int32_t n = 23; n <= 25; n++) check_shape(types[t], 37, 33 * 32, n);
            check_shape(types[t], 37, 33 * 32, 32);
        }
    }
#if defined(__x86_64__)
    kite_avx512_amx_set(true);
#endif
    /* The K-quants' evenly split tiles of up to 8 rows (9 = 5 + 4, 17 = 6 + 6 + 5). */
    check_shape(KITE_TYPE_Q4_K, 24, 512, 9);
    check_shape(KITE_TYPE_Q6_K, 24, 512, 17);
    check_shape(KITE_TYPE_Q5_K, 24, 512, 13);
}

#if defined(__x86_64__)
/* Worker threads of their own: each runs one product of the best set into its own output. */
typedef struct product_job {
    const kite_kernel_set *set;
    const kite_packed_matrix *pm;
    const float *x;
    int32_t n;
    float *y;
    int64_t r0, r1;
    int reps;
} product_job;

static void *product_thread(void *arg) {
    product_job *j = arg;
    size_t ab = j->set->act_bytes(j->pm->type, j->pm->cols, j->n);
    void *act = aligned_alloc(64, kite_round_up(ab, 64));
    if (!act) return NULL;
    j->set->quantize_act(j->pm->type, j->x, j->pm->cols, 0, j->n, act);
    for (int r = 0; r < j->reps; r++) j->set->matmul(j->pm, act, j->x, j->n, j->y, j->pm->rows, j->r0, j->r1);
    free(act);
    return j;
}

/* The AMX tile configuration is per thread: new threads (which never loaded one) running products of
 * different tile shapes at the same time (n = 40: two tiles of 10 + 10 rows; n = 25: 13 + 12; n = 24:
 * 12 + 12) give the reference's bits, for every 32-block type. A thread whose tiles were not configured
 * would die of SIGILL; a configuration shared between threads would mix the shapes. Also: KITE_AMX=0
 * in the environment turns the tiles off. */
static void test_amx_threads(void **state) {
    (void)state;
    rng_state = 1618;
    setenv("KITE_AMX", "0", 1);
    assert_false(kite_avx512_amx_set(true));
    unsetenv("KITE_AMX");
    const bool amx = kite_avx512_amx_set(true);
    print_message("AMX tiles %s\n", amx ? "in use" : "not available (CPU, OS or compiler); the VNNI tiles run");
#if defined(KITE_TEST_BUILD_HAS_AMX) && defined(__linux__)
    /* Independently of the kernel's probe: the CPU lists amx_tile and amx_int8 and Linux grants this
     * process the tile data (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA): then they are used. */
    {
        FILE *f = fopen("/proc/cpuinfo", "r");
        char line[8192];
        bool tile = false, int8 = false;
        while (f && fgets(line, sizeof line, f))
            if (!strncmp(line, "flags", 5)) {
                tile = strstr(line, " amx_tile") != NULL, int8 = strstr(line, " amx_int8") != NULL;
                break;
            }
        if (f) fclose(f);
        const bool granted = tile && int8 && syscall(SYS_arch_prctl, 0x1023, 18) == 0;
        if (granted && !amx) fail_msg("the CPU and OS have AMX-INT8 and the build compiled it, but the kernels do not use it");
    }
#endif
    const kite_kernel_set *best = kite_kernels_for(KITE_CPU_AVX512), *ref = kite_kernels_for(KITE_CPU_REF);
    if (!best) best = kite_kernels_for(KITE_CPU_AVX2);
    if (!best) {
        /* An x86 CPU without AVX2 (qemu's Nehalem in CI) has neither tiles: only the KITE_AMX check applies. */
        assert_false(amx);
        print_message("no AVX2 or AVX-512 on this CPU: no tiles to run on threads\n");
        return;
    }
    static const uint32_t types[] = {KITE_TYPE_Q4_0, KITE_TYPE_Q8_0, KITE_TYPE_Q5_0, KITE_TYPE_Q4_1, KITE_TYPE_Q5_1};
    enum { ROWS = 53, COLS = 9 * 32, NMAX = 40, JOBS = 3 };
    static const int32_t ns[JOBS] = {40, 25, 24};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        matrix m;
        make_matrix(&m, types[t], ROWS, COLS);
        float *x = malloc(sizeof(float) * NMAX * COLS), *y_ref = malloc(sizeof(float) * NMAX * ROWS);
        float *y[JOBS];
        assert_non_null(x);
        assert_non_null(y_ref);
        fill_acts(x, NMAX * COLS);
        kite_error e = {0};
        kite_packed_matrix pref, pm;
        assert_int_equal(ref->pack(&m.t, NULL, &pref, &e), KITE_OK);
        assert_int_equal(best->pack(&m.t, NULL, &pm, &e), KITE_OK);
        run(ref, &pref, x, NMAX, y_ref, 0, ROWS);
        product_job jobs[JOBS];
        pthread_t th[JOBS];
        for (int j = 0; j < JOBS; j++) {
            y[j] = malloc(sizeof(float) * NMAX * ROWS);
            assert_non_null(y[j]);
            for (size_t i = 0; i < (size_t)NMAX * ROWS; i++) y[j][i] = NAN;
            /* All 53 rows (three full 16-row groups and 5 rows of a fourth), each thread its own output. */
            jobs[j] = (product_job){best, &pm, x, ns[j], y[j], 0, ROWS, 20};
            assert_int_equal(pthread_create(&th[j], NULL, product_thread, &jobs[j]), 0);
        }
        for (int j = 0; j < JOBS; j++) {
            void *ret = NULL;
            assert_int_equal(pthread_join(th[j], &ret), 0);
            assert_ptr_equal(ret, &jobs[j]);
            size_t at = 0;
            if (!bits_equal(y[j], y_ref, (size_t)ns[j] * ROWS, &at))
                fail_msg("%s: %s n=%d in its own thread: act %zu row %zu = %.9g, reference %.9g", best->name,
                         kite_type_get(types[t])->name, ns[j], at / ROWS, at % ROWS, y[j][at], y_ref[at]);
            free(y[j]);
        }
        kite_packed_matrix_free(&pm);
        kite_packed_matrix_free(&pref);
        free(x);
        free(y_ref);
        free_matrix(&m);
    }
}
#endif

/* Activations at the edges of the quantizer: zero blocks, a lone huge value, ties at .5. */
static void test_activation_edges(void **state) {
    (void)state;
    rng_state = 99;
    matrix m;
    make_matrix(&m, KITE_TYPE_Q8_0, 20, 256);
    matrix mk;
    make_matrix(&mk, KITE_TYPE_Q4_K, 20, 256);
    float x[3 * 256];
    memset(x, 0, sizeof x);                                /* row 0: all zero */
    for (int j = 0; j < 256; j++) x[256 + j] = (float)(j % 5) * 0.25f - 0.75f; /* row 1: ties at .5 */
    x[256] = 63.5f; /* d = 0.5, id = 2: the others land on k + 0.5 */
    for (int j = 0; j < 256; j++) x[512 + j] = j == 77 ? 1e30f : 1e-30f; /* row 2: one huge value */
    const kite_kernel_set *ref = kite_kernels_for(KITE_CPU_REF);
    for (int which = 0; which < 2; which++) {
        matrix *mm = which ? &mk : &m;
        size_t ab = ref->act_bytes(mm->t.type, 256, 3);
        uint8_t *a_ref = aligned_alloc(64, kite_round_up(ab, 64)), *a = aligned_alloc(64, kite_round_up(ab, 64));
        assert_non_null(a_ref);
        assert_non_null(a);
        ref->quantize_act(mm->t.type, x, 256, 0, 3, a_ref);
        /* The zero row quantizes to zeros with d = 0. */
        for (int j = 0; j < 256; j++) assert_int_equal(((int8_t *)a_ref)[j], 0);
        for (size_t li = 1; li < sizeof all_levels / sizeof all_levels[0]; li++) {
            const kite_kernel_set *s = kite_kernels_for(all_levels[li]);
            if (!s) continue;
            memset(a, 0x5a, ab);
            s->quantize_act(mm->t.type, x, 256, 0, 3, a);
            kite_act_geom g = kite_act_geometry(kite_type_family(mm->t.type), 256);
            for (int b = 0; b < 3; b++) {
                size_t used = which ? g.off_sum32 + 16 : g.off_sum + (size_t)g.n_blocks * 4;
                if (memcmp(a + (size_t)b * g.row_bytes, a_ref + (size_t)b * g.row_bytes, used) != 0)
                    fail_msg("%s: edge activation row %d quantized differently from the reference", s->name, b);
            }
            kite_error e = {0};
            kite_packed_matrix pm, pr;
            assert_int_equal(s->pack(&mm->t, NULL, &pm, &e), KITE_OK);
            assert_int_equal(ref->pack(&mm->t, NULL, &pr, &e), KITE_OK);
            float y[60], yr[60];
            s->matmul(&pm, a_ref, x, 3, y, 20, 0, 20);
            ref->matmul(&pr, a_ref, x, 3, yr, 20, 0, 20);
            assert_true(bits_equal(y, yr, 60, NULL));
            for (int r = 0; r < 20; r++) assert_true(y[r] == 0.0f); /* zero activations give exact zeros */
            kite_packed_matrix_free(&pm);
            kite_packed_matrix_free(&pr);
        }
        free(a_ref);
        free(a);
    }
    free_matrix(&m);
    free_matrix(&mk);
}

/* Packing rejects what it cannot run, with a message naming the tensor. */
static void test_pack_rejects(void **state) {
    (void)state;
    uint8_t buf[4096] = {0};
    kite_tensor t;
    memset(&t, 0, sizeof t);
    snprintf(t.name, sizeof t.name, "blk.0.attn_q.weight");
    t.data = buf;
    for (size_t li = 0; li < sizeof all_levels / sizeof all_levels[0]; li++) {
        const kite_kernel_set *s = kite_kernels_for(all_levels[li]);
        if (!s) continue;
        kite_error e = {0};
        kite_packed_matrix pm;
        t.type = KITE_TYPE_Q8_K; /* an activation type, not a weight type */
        t.ne[0] = 256; t.ne[1] = 2; t.ne[2] = t.ne[3] = 1;
        t.n_bytes = sizeof buf;
        assert_int_equal(s->pack(&t, NULL, &pm, &e), KITE_ERR_UNSUPPORTED);
        assert_non_null(strstr(e.msg, "blk.0.attn_q.weight"));
        t.type = KITE_TYPE_Q4_0;
        t.ne[0] = 48; /* not a multiple of 32 */
        assert_int_equal(s->pack(&t, NULL, &pm, &e), KITE_ERR_FORMAT);
        assert_non_null(strstr(e.msg, "multiple"));
        t.ne[0] = 64; t.ne[1] = 1000; /* 1000 rows of 36 bytes do not fit in 4096 */
        assert_int_equal(s->pack(&t, NULL, &pm, &e), KITE_ERR_FORMAT);
        assert_non_null(strstr(e.msg, "bytes"));
        t.ne[1] = 2; t.ne[2] = 3; /* a 3-D tensor */
        assert_int_equal(s->pack(&t, NULL, &pm, &e), KITE_ERR_FORMAT);
        t.ne[2] = 1; t.ne[0] = 0;
        assert_int_equal(s->pack(&t, NULL, &pm, &e), KITE_ERR_FORMAT);
        t.ne[0] = 64; t.ne[1] = 2;
        assert_int_equal(s->pack(&t, NULL, &pm, &e), KITE_OK);
        kite_packed_matrix_free(&pm);
        kite_packed_matrix_free(NULL);
    }
}

/* Dispatch: ref always exists; KITE_CPU picks a level or falls back (in fresh child processes, since
 * the choice is made once per process). */
static int child_level(const char *value, char *name, size_t name_size) {
    int fds[2];
    if (pipe(fds) != 0) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        if (value) setenv("KITE_CPU", value, 1);
        else unsetenv("KITE_CPU");
        if (dup2(fds[1], STDOUT_FILENO) < 0) _exit(1);
        /* Under a user-mode emulator (scripts/test-cross.sh runs this program under qemu with a chosen CPU
         * model), the child must run under the same emulator and CPU model, or it would run on the host's
         * CPU (or not at all, for another architecture): KITE_TEST_EMULATOR holds that command line, words
         * separated by spaces, e.g. "qemu-x86_64 -cpu Nehalem". qemu answers /proc/self/exe with the
         * emulated program's path. */
        const char *emulator = getenv("KITE_TEST_EMULATOR");
        if (emulator && *emulator) {
            char self[4096], words[1024], *args[32];
            ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
            if (len <= 0 || strlen(emulator) >= sizeof words) _exit(1);
            self[len] = 0;
            strcpy(words, emulator);
            int k = 0;
            for (char *w = strtok(words, " "); w && k < 29; w = strtok(NULL, " ")) args[k++] = w;
            args[k++] = self;
            args[k++] = (char *)"--print-level";
            args[k] = NULL;
            execvp(args[0], args);
            _exit(1);
        }
        /* A fresh image: this process may already have resolved its choice. */
        execl("/proc/self/exe", "test_kernels", "--print-level", (char *)NULL);
        _exit(1);
    }
    close(fds[1]);
    ssize_t got = read(fds[0], name, name_size - 1);
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    name[got > 0 ? got : 0] = 0;
    return got > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

/* ---- attention ----------------------------------------------------------------------------------------------
 * Against an exact softmax attention in double over the same cache values (f16-rounded, f32, or the
 * dequantized elements of Q8_0 / Q4_0 rows, which the kernels must read exactly):
 *   |out - exact| <= ATTN_BOUND * max_t |v_t|   per element,
 * ATTN_BOUND = 2e-5: scores carry about head_dim * 2^-24 * |q||k| of rounding (q, k in (-3, 3) here,
 * scaled by 1/sqrt(head_dim): under 1e-5 absolute), which moves the weights by as much relative; exp
 * is within 2 ulp; the weighted sum adds n_visible * 2^-24 relative. Measured worst over the cases
 * below: about 2e-6 on every level.
 * And the invariants the forward pass relies on, bit for bit on every level: a query head's output is
 * the same computed alone or with its group, and the same whether the visible rows are contiguous or
 * gathered through a row list from scattered cache rows (a tree node and plain decoding). */
#define ATTN_BOUND 2e-5

static float attn_value(void) { return rng_uniform() * 3.0f; }

static void attention_case(const kite_kernel_set *ks, int32_t hd, int32_t nq, int32_t n_visible, uint32_t kv_type,
                           double *worst) {
    const int32_t n_rows = n_visible * 2 + 3; /* the cache holds more rows than are visible */
    const kite_type_traits *tt = kite_type_get(kv_type);
    const char *type_name = tt->name;
    const size_t rb = kite_type_row_bytes(kv_type, hd);
    assert_true(rb > 0);
    float *q = malloc(sizeof(float) * (size_t)(nq * hd)), *kf = malloc(sizeof(float) * (size_t)(n_rows * hd));
    float *vf = malloc(sizeof(float) * (size_t)(n_rows * hd));
    for (int32_t i = 0; i < nq * hd; i++) q[i] = attn_value();
    for (int32_t i = 0; i < n_rows * hd; i++) {
        kf[i] = attn_value();
        vf[i] = attn_value();
    }
    /* Two physical caches: A holds the visible rows contiguously at 0..n_visible-1; B holds the same rows
     * scattered (row t of the sequence at rows[t]), with other rows around them. Each row is stored in the
     * cache's type, and kf/vf become the values that row holds (its type's round trip). */
    int32_t *rows = malloc(sizeof(int32_t) * (size_t)n_visible);
    for (int32_t t = 0; t < n_visible; t++) rows[t] = 2 * t + (int32_t)(rng_u32() % 2) + 1;
    char *ka = calloc((size_t)n_rows, rb), *va = calloc((size_t)n_rows, rb);
    char *kb = calloc((size_t)n_rows, rb), *vb = calloc((size_t)n_rows, rb);
    for (int32_t r = 0; r < n_rows; r++) {
        tt->from_float(kf + r * hd, kb + (size_t)r * rb, hd);
        tt->from_float(vf + r * hd, vb + (size_t)r * rb, hd);
        tt->to_float(kb + (size_t)r * rb, kf + r * hd, hd);
        tt->to_float(vb + (size_t)r * rb, vf + r * hd, hd);
    }
    for (int32_t t = 0; t < n_visible; t++) {
        memcpy(ka + (size_t)t * rb, kb + (size_t)rows[t] * rb, rb);
        memcpy(va + (size_t)t * rb, vb + (size_t)rows[t] * rb, rb);
    }
    float *out_a = malloc(sizeof(float) * (size_t)(nq * hd)), *out_b = malloc(sizeof(float) * (size_t)(nq * hd));
    float *out_1 = malloc(sizeof(float) * (size_t)hd);
    const float scale = 1.0f / sqrtf((float)hd);
    kite_attn_query a = {.q = q, .n_q = nq, .head_dim = hd, .k = ka, .v = va, .kv_type = kv_type, .row_bytes = rb,
                         .rows = NULL, .n_visible = n_visible, .scale = scale, .out = out_a};
    ks->attend(&a);
    kite_attn_query b = a;
    b.k = kb;
    b.v = vb;
    b.rows = rows;
    b.out = out_b;
    ks->attend(&b);
    if (memcmp(out_a, out_b, sizeof(float) * (size_t)(nq * hd)) != 0)
        fail_msg("%s attention (hd %d, %d heads, %d rows, %s): gathered rows give other bits than contiguous ones", ks->name,
                 hd, nq, n_visible, type_name);
    for (int32_t i = 0; i < nq; i++) {
        kite_attn_query one = a;
        one.q = q + (size_t)i * (size_t)hd;
        one.n_q = 1;
        one.out = out_1;
        ks->attend(&one);
        if (memcmp(out_1, out_a + (size_t)i * (size_t)hd, sizeof(float) * (size_t)hd) != 0)
            fail_msg("%s attention (hd %d, %d heads, %d rows): head %d alone differs from head %d in its group", ks->name, hd,
                     nq, n_visible, i, i);
    }
    /* The exact result, in double. */
    double *w = malloc(sizeof(double) * (size_t)n_visible);
    for (int32_t i = 0; i < nq; i++) {
        double mx = -INFINITY, sum = 0.0, vmax = 0.0;
        for (int32_t t = 0; t < n_visible; t++) {
            double dot = 0.0;
            for (int32_t d = 0; d < hd; d++) dot += (double)q[i * hd + d] * kf[rows[t] * hd + d];
            w[t] = dot * scale;
            if (w[t] > mx) mx = w[t];
        }
        for (int32_t t = 0; t < n_visible; t++) {
            w[t] = exp(w[t] - mx);
            sum += w[t];
            for (int32_t d = 0; d < hd; d++) {
                double mag = fabs(vf[rows[t] * hd + d]); /* (not fmax: GCC 12's AArch64 vectorizer crashes on it) */
                if (mag > vmax) vmax = mag;
            }
        }
        for (int32_t d = 0; d < hd; d++) {
            double exact = 0.0;
            for (int32_t t = 0; t < n_visible; t++) exact += w[t] / sum * vf[rows[t] * hd + d];
            double err = fabs(out_a[i * hd + d] - exact) / vmax;
            if (err > *worst) *worst = err;
            if (!(err <= ATTN_BOUND))
                fail_msg("%s attention (hd %d, %d heads, %d rows, %s cache): head %d element %d is %.9g, exact %.9g "
                         "(error %.3g x max|v| > %g)", ks->name, hd, nq, n_visible, type_name, i, d,
                         (double)out_a[i * hd + d], exact, err, ATTN_BOUND);
        }
    }
    free(w); free(q); free(kf); free(vf); free(rows); free(ka); free(va); free(kb); free(vb);
    free(out_a); free(out_b); free(out_1);
}

static void test_attention(void **state) {
    (void)state;
    static const int32_t head_dims[] = {64, 128, 40, 8, 256};
    static const int32_t group_sizes[] = {1, 2, 4, 5, 16};
    static const int32_t visible[] = {1, 2, 15, 63, 64, 65, 130, 700};
    rng_state = 7;
    for (size_t li = 0; li < sizeof all_levels / sizeof all_levels[0]; li++) {
        const kite_kernel_set *ks = kite_kernels_for(all_levels[li]);
        if (!ks) continue;
        assert_non_null(ks->attend);
        double worst = 0.0;
        int cases = 0;
        for (size_t h = 0; h < sizeof head_dims / sizeof head_dims[0]; h++)
            for (size_t g = 0; g < sizeof group_sizes / sizeof group_sizes[0]; g++)
                for (size_t v = 0; v < sizeof visible / sizeof visible[0]; v++) {
                    /* Keep the long cases to the common shapes, so the test stays quick under sanitizers. */
                    if (visible[v] > 130 && (head_dims[h] != 64 || group_sizes[g] > 4)) continue;
                    static const uint32_t kv_types[] = {KITE_TYPE_F16, KITE_TYPE_F32, KITE_TYPE_Q8_0, KITE_TYPE_Q4_0};
                    for (size_t t = 0; t < sizeof kv_types / sizeof *kv_types; t++) {
                        /* quantized caches: whole blocks of 32 per head (the cache refuses other heads) */
                        if (kv_types[t] != KITE_TYPE_F16 && kv_types[t] != KITE_TYPE_F32 && head_dims[h] % 32 != 0) continue;
                        attention_case(ks, head_dims[h], group_sizes[g], visible[v], kv_types[t], &worst);
                        cases++;
                    }
                }
        print_message("attention %-12s %d cases, worst error %.3g x max|v| (bound %g)\n", ks->name, cases, worst, ATTN_BOUND);
    }
}

/* silu_mul on every level against silu in double precision. Bound: kite_attn_exp is within about 2
 * ulp, the division, the two multiplies and (for the SIMD levels) the fused steps add a few more, so a
 * relative error of 2e-6 of the exact product (plus 1e-33: below -87 the exponential is 0, as it is for the softmax), over odd lengths
 * (vector bodies and tails), inputs across the exponential's range and the edges (0, -0, +-87, +-200,
 * +-inf). NaN in gives NaN out. */
#define SILU_BOUND 2e-6
static void test_silu_mul(void **state) {
    (void)state;
    static const int64_t lengths[] = {1, 3, 4, 7, 8, 15, 16, 17, 33, 1000};
    static const float edges[] = {0.0f, -0.0f, 87.0f, -87.0f, 88.5f, -88.5f, 200.0f, -200.0f, 1e-30f, -1e-30f, 0.5f, -0.5f};
    rng_state = 99;
    for (size_t li = 0; li < sizeof all_levels / sizeof all_levels[0]; li++) {
        const kite_kernel_set *ks = kite_kernels_for(all_levels[li]);
        if (!ks) continue;
        assert_non_null(ks->silu_mul);
        double worst = 0.0;
        for (size_t c = 0; c < sizeof lengths / sizeof lengths[0]; c++) {
            const int64_t n = lengths[c];
            float *gate = malloc(sizeof(float) * (size_t)n), *up = malloc(sizeof(float) * (size_t)n);
            float *orig = malloc(sizeof(float) * (size_t)n);
            assert_non_null(gate); assert_non_null(up); assert_non_null(orig);
            for (int64_t i = 0; i < n; i++) {
                gate[i] = i < (int64_t)(sizeof edges / sizeof edges[0]) && n >= 16 ? edges[i] : rng_uniform() * 30.0f;
                up[i] = rng_normalish();
                orig[i] = gate[i];
            }
            ks->silu_mul(gate, up, n);
            for (int64_t i = 0; i < n; i++) {
                const double x = orig[i], exact = x / (1.0 + exp(-x)) * (double)up[i];
                const double err = fabs((double)gate[i] - exact);
                if (!(err <= SILU_BOUND * fabs(exact) + 1e-33))
                    fail_msg("%s: silu(%g) * %g = %.9g, exact %.9g (n %lld, i %lld)", ks->name, x, up[i], gate[i], exact,
                             (long long)n, (long long)i);
                if (fabs(x) < 87.0 && exact != 0.0 && err / fabs(exact) > worst) worst = err / fabs(exact); /* flushed ones aside */
            }
            free(gate); free(up); free(orig);
        }
        /* An element's bits never depend on where it sits in a call: the forward pass hands the kernel
         * a whole batch's [B x ffn] at once, and continuous batching promises every row the bits it gets
         * in any other batch (a scalar tail had broken it for the last row of odd batches). */
        {
            enum { N = 1000 };
            static float g_whole[N], g_pieces[N], u[N];
            for (int i = 0; i < N; i++) {
                g_whole[i] = g_pieces[i] = rng_uniform() * 20.0f;
                u[i] = rng_normalish();
            }
            ks->silu_mul(g_whole, u, N);
            for (int i = 0; i < N;) {
                int len = 1 + (int)((rng_uniform() + 1.0f) * 18.0f); /* 1 .. 37 */
                if (len > N - i) len = N - i;
                ks->silu_mul(g_pieces + i, u + i, len);
                i += len;
            }
            for (int i = 0; i < N; i++)
                if (memcmp(&g_whole[i], &g_pieces[i], sizeof(float)))
                    fail_msg("%s: silu_mul of element %d differs between one call and calls of odd lengths", ks->name, i);
        }
        /* Infinities and NaN, in a vector body and in a tail. */
        float special[19], up1[19];
        for (int i = 0; i < 19; i++) special[i] = 1.0f, up1[i] = 1.0f;
        special[0] = INFINITY, special[1] = NAN, special[17] = NAN, special[18] = INFINITY;
        ks->silu_mul(special, up1, 19);
        assert_true(isinf(special[0]) && special[0] > 0);
        assert_true(isnan(special[1]) && isnan(special[17]));
        assert_true(isinf(special[18]) && special[18] > 0);
        print_message("silu_mul  %-12s worst relative error %.3g above -87 (bound %g)\n", ks->name, worst, SILU_BOUND);
    }
}

/* gelu_mul (GeGLU) on every level against gelu-tanh in double precision, written as x * sigmoid(z) with
 * z = 2 sqrt(2/pi) x (1 + 0.044715 x^2) (the same function as 0.5 x (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3))),
 * checked against that form too where it does not cancel). Bound: z carries a few ulp of relative error,
 * which the sigmoid turns into about |z| times as much where it is e^z-like, so the relative error of the
 * product is at most 2e-6 + 4e-7 |z| (plus 1e-33 where the exponential flushes to 0); odd lengths (bodies
 * and tails), batch invariance across call splits, +inf and NaN. */
#define GELU_BOUND 2e-6
#define GELU_Z_BOUND 4e-7
static void test_gelu_mul(void **state) {
    (void)state;
    static const int64_t lengths[] = {1, 3, 4, 7, 8, 15, 16, 17, 33, 1000};
    static const float edges[] = {0.0f, -0.0f, 10.0f, -10.0f, 5.0f, -5.0f, 200.0f, -200.0f, 1e-30f, -1e-30f, 0.5f, -0.5f};
    rng_state = 77;
    for (size_t li = 0; li < sizeof all_levels / sizeof all_levels[0]; li++) {
        const kite_kernel_set *ks = kite_kernels_for(all_levels[li]);
        if (!ks) continue;
        assert_non_null(ks->gelu_mul);
        double worst = 0.0;
        for (size_t c = 0; c < sizeof lengths / sizeof lengths[0]; c++) {
            const int64_t n = lengths[c];
            float *gate = malloc(sizeof(float) * (size_t)n), *up = malloc(sizeof(float) * (size_t)n);
            float *orig = malloc(sizeof(float) * (size_t)n);
            assert_non_null(gate); assert_non_null(up); assert_non_null(orig);
            for (int64_t i = 0; i < n; i++) {
                gate[i] = i < (int64_t)(sizeof edges / sizeof edges[0]) && n >= 16 ? edges[i] : rng_uniform() * 8.0f;
                up[i] = rng_normalish();
                orig[i] = gate[i];
            }
            ks->gelu_mul(gate, up, n);
            for (int64_t i = 0; i < n; i++) {
                const double x = orig[i], z = 1.5957691216057308 * x * (1.0 + 0.044715 * x * x);
                const double exact = x / (1.0 + exp(-z)) * (double)up[i];
                if (fabs(x) < 3.0) { /* the tanh form agrees where neither cancels */
                    const double tanh_form = 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))) * up[i];
                    assert_true(fabs(tanh_form - exact) <= 1e-12 * (fabs(exact) + 1e-300) + 1e-300);
                }
                const double err = fabs((double)gate[i] - exact), bound = GELU_BOUND + GELU_Z_BOUND * fabs(z);
                if (!(err <= bound * fabs(exact) + 1e-33))
                    fail_msg("%s: gelu(%g) * %g = %.9g, exact %.9g (n %lld, i %lld)", ks->name, x, up[i], gate[i], exact,
                             (long long)n, (long long)i);
                if (fabs(z) < 87.0 && exact != 0.0 && err / fabs(exact) / bound > worst) worst = err / fabs(exact) / bound;
            }
            free(gate); free(up); free(orig);
        }
        {
            enum { N = 1000 };
            static float g_whole[N], g_pieces[N], u[N];
            for (int i = 0; i < N; i++) {
                g_whole[i] = g_pieces[i] = rng_uniform() * 6.0f;
                u[i] = rng_normalish();
            }
            ks->gelu_mul(g_whole, u, N);
            for (int i = 0; i < N;) {
                int len = 1 + (int)((rng_uniform() + 1.0f) * 18.0f); /* 1 .. 37 */
                if (len > N - i) len = N - i;
                ks->gelu_mul(g_pieces + i, u + i, len);
                i += len;
            }
            for (int i = 0; i < N; i++)
                if (memcmp(&g_whole[i], &g_pieces[i], sizeof(float)))
                    fail_msg("%s: gelu_mul of element %d differs between one call and calls of odd lengths", ks->name, i);
        }
        float special[19], up1[19];
        for (int i = 0; i < 19; i++) special[i] = 1.0f, up1[i] = 1.0f;
        special[0] = INFINITY, special[1] = NAN, special[17] = NAN, special[18] = INFINITY;
        ks->gelu_mul(special, up1, 19);
        assert_true(isinf(special[0]) && special[0] > 0);
        assert_true(isnan(special[1]) && isnan(special[17]));
        assert_true(isinf(special[18]) && special[18] > 0);
        print_message("gelu_mul  %-12s worst error %.3g of the bound (relative %g + %g |z|)\n", ks->name, worst, GELU_BOUND,
                      GELU_Z_BOUND);
    }
}

/* f32_to_f16 on every level gives kite_f32_to_fp16's bits (the KV cache must not depend on the level):
 * random values over the half range and beyond, every rounding tie, subnormals, overflow to inf, +-0,
 * +-inf; a NaN stays a NaN (hardware keeps payload bits the scalar code drops). Odd lengths cover the
 * vector bodies and tails. */
static void test_f32_to_f16(void **state) {
    (void)state;
    enum { N = 4099 };
    float *x = malloc(sizeof(float) * N);
    uint16_t *want = malloc(sizeof(uint16_t) * N), *got = malloc(sizeof(uint16_t) * (N + 1));
    assert_non_null(x); assert_non_null(want); assert_non_null(got);
    rng_state = 4711;
    for (int i = 0; i < N; i++) {
        switch (i % 4) {
        case 0: x[i] = rng_normalish() * 100.0f; break;
        case 1: x[i] = ldexpf(rng_uniform(), (int)(rng_u32() % 48) - 30); break;            /* 2^-30 .. 2^17 */
        case 2: x[i] = kite_f32_from_bits((rng_u32() << 13) | 0x1000u); break;                 /* exact ties */
        default: x[i] = kite_f32_from_bits(rng_u32() ^ (rng_u32() << 16)); break;              /* any bits */
        }
    }
    static const float edges[] = {0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, -65520.0f, 5.96e-8f, 2.98e-8f, 2.99e-8f, 6.1e-5f, INFINITY, -INFINITY, NAN};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) x[i] = edges[i];
    for (int i = 0; i < N; i++) want[i] = kite_f32_to_fp16(x[i]);
    static const int lengths[] = {N, 1, 3, 7, 8, 15, 17, 64};
    for (size_t li = 0; li < sizeof all_levels / sizeof all_levels[0]; li++) {
        const kite_kernel_set *ks = kite_kernels_for(all_levels[li]);
        if (!ks) continue;
        assert_non_null(ks->f32_to_f16);
        for (size_t c = 0; c < sizeof lengths / sizeof lengths[0]; c++) {
            const int n = lengths[c];
            memset(got, 0xAB, sizeof(uint16_t) * (N + 1));
            ks->f32_to_f16(x + (N - n), got, n); /* the end of x, so short lengths see random values too */
            for (int i = 0; i < n; i++) {
                const uint16_t w = want[N - n + i], g = got[i];
                const bool w_nan = (w & 0x7c00) == 0x7c00 && (w & 0x3ff), g_nan = (g & 0x7c00) == 0x7c00 && (g & 0x3ff);
                if (w_nan ? !g_nan : g != w)
                    fail_msg("%s: f16(%a) = 0x%04x, want 0x%04x (n %d, i %d)", ks->name, (double)x[N - n + i], g, w, n, i);
            }
            assert_int_equal(got[n], 0xABAB); /* nothing past n */
        }
        ks->f32_to_f16(x, got, N);
        for (int i = 0; i < (int)(sizeof edges / sizeof edges[0]); i++) {
            if (isnan(edges[i])) assert_true((got[i] & 0x7c00) == 0x7c00 && (got[i] & 0x3ff));
            else assert_int_equal(got[i], want[i]);
        }
        print_message("f32_to_f16 %-12s %d values: the scalar conversion's bits\n", ks->name, N);
    }
    free(x); free(want); free(got);
}

static void test_dispatch(void **state) {
    (void)state;
    assert_non_null(kite_kernels_for(KITE_CPU_REF));
    assert_string_equal(kite_kernels_for(KITE_CPU_REF)->name, "ref");
    char best[64], got[64];
    assert_int_equal(child_level(NULL, best, sizeof best), 0);
    assert_int_equal(child_level("ref", got, sizeof got), 0);
    assert_string_equal(got, "ref");
    assert_int_equal(child_level("no-such-level", got, sizeof got), 0);
    assert_string_equal(got, best);
    /* The best level is the highest one kite_kernels_for offers. */
    const kite_kernel_set *top = NULL;
    for (size_t li = 0; li < sizeof all_levels / sizeof all_levels[0]; li++)
        if (kite_kernels_for(all_levels[li])) top = kite_kernels_for(all_levels[li]);
    if (kite_kernels_for(KITE_CPU_AVX512)) top = kite_kernels_for(KITE_CPU_AVX512);
    assert_string_equal(best, top->name);
    /* A level this machine lacks falls back to the best one. */
    for (size_t li = 0; li < sizeof all_levels / sizeof all_levels[0]; li++) {
        if (kite_kernels_for(all_levels[li])) continue;
        static const char *names[] = {"ref", "avx2", "avx512", "neon"};
        assert_int_equal(child_level(names[all_levels[li]], got, sizeof got), 0);
        assert_string_equal(got, best);
    }
    for (size_t li = 0; li < sizeof all_levels / sizeof all_levels[0]; li++) {
        const kite_kernel_set *s = kite_kernels_for(all_levels[li]);
        if (!s) continue;
        assert_true(s->row_block > 0 && s->row_block % 16 == 0);
        printf("level available: %s (row_block %d)\n", s->name, s->row_block);
    }
}

/* The SIMD levels really run their own kernels (an interleaved copy) for the types they accelerate:
 * without this, falling back to the reference everywhere would pass every comparison above. */
static void test_simd_levels_pack_their_own_layout(void **state) {
    (void)state;
    rng_state = 5;
    for (size_t li = 1; li < sizeof all_levels / sizeof all_levels[0]; li++) {
        const kite_kernel_set *s = kite_kernels_for(all_levels[li]);
        if (!s) continue;
        printf("%s packs:", s->name);
        for (size_t ti = 0; ti < N_TYPES; ti++) {
            const kite_type_traits *tr = kite_type_get(all_types[ti]);
            matrix m;
            make_matrix(&m, all_types[ti], 3, 256);
            kite_error e = {0};
            kite_packed_matrix pm;
            assert_int_equal(s->pack(&m.t, NULL, &pm, &e), KITE_OK);
            bool own = pm.owned != NULL;
            printf(" %s%s", tr->name, own ? "" : "(ref)");
            uint32_t t = all_types[ti];
            bool required = t == KITE_TYPE_Q4_0 || t == KITE_TYPE_Q8_0 || t == KITE_TYPE_F32 || t == KITE_TYPE_F16;
            if (s->level != KITE_CPU_NEON) required = required || t == KITE_TYPE_Q4_K || t == KITE_TYPE_Q5_K || t == KITE_TYPE_Q6_K;
            if (required && !own) fail_msg("%s: %s falls back to the reference", s->name, tr->name);
            kite_packed_matrix_free(&pm);
            free_matrix(&m);
        }
        printf("\n");
    }
}

/* Packing into an arena (the model's weights): the same bytes as a packing of its own, pack_bytes is what
 * the arena gives up, slices are 64-byte aligned and back to back, and a full arena makes pack fall
 * back to an allocation of its own. */
static void test_pack_into_arena(void **state) {
    (void)state;
    rng_state = 6;
    for (size_t li = 0; li < sizeof all_levels / sizeof all_levels[0]; li++) {
        const kite_kernel_set *s = kite_kernels_for(all_levels[li]);
        if (!s) continue;
        for (size_t ti = 0; ti < N_TYPES; ti++) {
            matrix m;
            make_matrix(&m, all_types[ti], 37, 512);
            kite_error e = {0};
            kite_packed_matrix own, a1, a2, a3;
            assert_int_equal(s->pack(&m.t, NULL, &own, &e), KITE_OK);
            size_t bytes = s->pack_bytes(&m.t);
            if (own.owned) assert_int_equal(bytes, own.n_bytes);
            else assert_int_equal(bytes, 0); /* a view of the tensor */
            kite_weight_arena arena;
            /* Room for two packings and a bit: the third does not fit. */
            assert_int_equal(kite_weight_arena_init(&arena, 2 * (bytes + 64) + 1, &e), KITE_OK);
            arena.capacity = 2 * (bytes + 64) + 1; /* as if the 2 MiB rounding had not added room */
            assert_int_equal(s->pack(&m.t, &arena, &a1, &e), KITE_OK);
            assert_int_equal(s->pack(&m.t, &arena, &a2, &e), KITE_OK);
            assert_int_equal(s->pack(&m.t, &arena, &a3, &e), KITE_OK);
            assert_int_equal(a1.n_bytes, own.n_bytes);
            assert_int_equal(a1.layout, own.layout);
            assert_memory_equal(a1.data, own.data, own.n_bytes);
            assert_memory_equal(a2.data, own.data, own.n_bytes);
            assert_memory_equal(a3.data, own.data, own.n_bytes);
            if (bytes) {
                assert_ptr_equal(a1.data, arena.base);
                assert_null(a1.owned);
                assert_ptr_equal(a2.data, arena.base + (bytes + 63) / 64 * 64);
                assert_null(a2.owned);
                assert_non_null(a3.owned); /* the arena was full */
                assert_ptr_equal(a3.data, a3.owned);
            }
            kite_packed_matrix_free(&a1);
            kite_packed_matrix_free(&a2);
            kite_packed_matrix_free(&a3);
            kite_packed_matrix_free(&own);
            kite_weight_arena_free(&arena);
            free_matrix(&m);
        }
    }
    kite_weight_arena empty;
    kite_error e = {0};
    assert_int_equal(kite_weight_arena_init(&empty, 0, &e), KITE_OK);
    assert_null(kite_weight_arena_take(&empty, 1));
    assert_null(kite_weight_arena_take(NULL, 1));
    kite_weight_arena_free(&empty);
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--print-level") == 0) {
        fputs(kite_kernels()->name, stdout);
        return 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dispatch),
        cmocka_unit_test(test_attention),
        cmocka_unit_test(test_silu_mul),
        cmocka_unit_test(test_gelu_mul),
        cmocka_unit_test(test_f32_to_f16),
        cmocka_unit_test(test_pack_rejects),
        cmocka_unit_test(test_simd_levels_pack_their_own_layout),
        cmocka_unit_test(test_pack_into_arena),
        cmocka_unit_test(test_activation_edges),
        cmocka_unit_test(test_float_odd_columns),
        cmocka_unit_test(test_wide_rows),
        cmocka_unit_test(test_tile_edges),
#if defined(__x86_64__)
        cmocka_unit_test(test_amx_threads),
#endif
        cmocka_unit_test(test_all_types_all_levels),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
