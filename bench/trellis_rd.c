/* Rate-distortion of kite's trellis types (plain and rotated) next to llama.cpp's: mean squared error against bits per weight
 * on unit-variance Gaussian, Laplace and Student-t (nu = 5, scaled to unit variance) matrices, beside
 * the Gaussian bound sigma^2 2^(-2R). llama.cpp's types are quantized and dequantized by llama.cpp's own
 * code (ggml_quantize_chunk and the type's to_float in node-llama-cpp's libggml-base, dlopen'ed), with no
 * importance matrix, as kite's are. Also prints kite's encode time per weight (this thread's CPU time).
 *
 *   trellis_rd LIB_DIR [ROWS [COLS]]      (default 64 x 4096: ROWS must be a multiple of 16)
 *
 * "gap" is the distance in bits from the bound at the type's own rate: bpw - 0.5 log2(1 / MSE). */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "llama_lib.h"
#include "quant/trellis.h"

typedef struct ggml_traits {
    const char *type_name;
    int64_t blck_size, blck_size_interleave;
    size_t type_size;
    bool is_quantized;
    void (*to_float)(const void *x, float *y, int64_t k);
    void (*from_float_ref)(const float *x, void *y, int64_t k);
} ggml_traits;

/* CPU time of this thread: the machine is shared, wall time would count other processes' turns. */
static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static double uniform(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return ((double)(rng >> 11) + 0.5) / 9007199254740992.0;
}
static double gauss(void) { return sqrt(-2.0 * log(uniform())) * cos(6.283185307179586 * uniform()); }

static void fill(float *x, int64_t n, int dist) {
    for (int64_t i = 0; i < n; i++) {
        double v;
        if (dist == 0) v = gauss();
        else if (dist == 1) v = (uniform() < 0.5 ? -1 : 1) * -log(uniform()) / sqrt(2.0);
        else {
            const int nu = 5;
            double chi = 0;
            for (int k = 0; k < nu; k++) {
                double g = gauss();
                chi += g * g;
            }
            v = gauss() / sqrt(chi / nu) / sqrt(nu / (nu - 2.0));
        }
        x[i] = (float)v;
    }
}

static double mse(const float *a, const float *b, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    return s / (double)n;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s LIB_DIR [ROWS [COLS]]\n", argv[0]);
        return 2;
    }
    const int64_t rows = argc > 2 ? atoll(argv[2]) : 64, cols = argc > 3 ? atoll(argv[3]) : 4096, n = rows * cols;
    if (rows % 16 || cols % 256) return fprintf(stderr, "ROWS %% 16 and COLS %% 256 must be 0\n"), 2;
    llama_lib lib;
    if (!llama_lib_open(&lib, argv[1])) return fprintf(stderr, "%s\n", lib.error), 1;
    const ggml_traits *(*get_traits)(int) = (const ggml_traits *(*)(int))dlsym(lib.ggml_base, "ggml_get_type_traits");
    if (!get_traits) return fprintf(stderr, "no ggml_get_type_traits\n"), 1;
    float *x = malloc(sizeof(float) * (size_t)n), *y = malloc(sizeof(float) * (size_t)n);
    void *q = malloc((size_t)n * 2);
    static const struct { const char *name; int id; } llama_types[] = {
        {"q2_K", 10}, {"q3_K", 11}, {"q4_K", 12}, {"q4_0", 2}, {"iq2_xs", 17}, {"iq3_s", 21},
    };
    static const uint32_t kt[] = {KITE_TYPE_KT2, KITE_TYPE_KT2_5, KITE_TYPE_KT3, KITE_TYPE_KT2H, KITE_TYPE_KT2_5H, KITE_TYPE_KT3H};
    static const char *const dists[] = {"gaussian", "laplace", "student-t5"};
    printf("%lld x %lld matrices, unit variance; bound = 2^(-2 bpw)\n", (long long)rows, (long long)cols);
    for (int dist = 0; dist < 3; dist++) {
        rng = 0x9E3779B97F4A7C15ull + (uint64_t)dist;
        fill(x, n, dist);
        double var = 0;
        for (int64_t i = 0; i < n; i++) var += (double)x[i] * x[i];
        var /= (double)n;
        printf("\n%-12s %-8s %6s %10s %10s %7s %s\n", dists[dist], "type", "bpw", "mse/var", "bound", "gap", "encode");
        /* the curve llama.cpp's types are placed on: per rate, the better of plain and rotated */
        double kt_bpw[3], kt_mse[3];
        for (int t = 0; t < 6; t++) {
            const kite_type_traits *tr = kite_kt_traits(kt[t]);
            const double t0 = now_s();
            kite_kt_quantize(kt[t], x, q, rows, cols, NULL);
            const double dt = now_s() - t0;
            kite_kt_dequantize(kt[t], q, rows, cols, y);
            const double bpw = 8.0 * (double)tr->block_bytes / tr->block_size, m = mse(x, y, n) / var;
            if (t < 3 || m < kt_mse[t - 3]) kt_bpw[t % 3] = bpw, kt_mse[t % 3] = m;
            printf("%-12s %-8s %6.3f %10.5f %10.5f %7.3f %.2f us/weight\n", "", tr->name, bpw, m, pow(2, -2 * bpw),
                   bpw - 0.5 * log2(1 / m), 1e6 * dt / (double)n);
        }
        for (size_t t = 0; t < sizeof llama_types / sizeof llama_types[0]; t++) {
            const ggml_traits *gt = get_traits(llama_types[t].id);
            if (!gt || !gt->to_float || cols % gt->blck_size) continue;
            /* the IQ2 types need an importance matrix in ggml: give them flat importance */
            float *flat = malloc(sizeof(float) * (size_t)cols);
            for (int64_t c = 0; c < cols; c++) flat[c] = 1.0f;
            const bool needs_imatrix = llama_types[t].id == 17;
            lib.quantize_chunk(llama_types[t].id, x, q, 0, rows, cols, needs_imatrix ? flat : NULL);
            free(flat);
            for (int64_t r = 0; r < rows; r++)
                gt->to_float((const char *)q + (size_t)r * (size_t)(cols / gt->blck_size) * gt->type_size, y + r * cols, cols);
            const double bpw = 8.0 * (double)gt->type_size / (double)gt->blck_size, m = mse(x, y, n) / var;
            /* kite's bpw at this MSE, by log-linear interpolation of its curve */
            double at = NAN;
            for (int k = 0; k < 2; k++)
                if (m <= kt_mse[k] && m >= kt_mse[k + 1])
                    at = kt_bpw[k] + (kt_bpw[k + 1] - kt_bpw[k]) * log(m / kt_mse[k]) / log(kt_mse[k + 1] / kt_mse[k]);
            /* outside kite's range: extrapolate from the nearest end with the bound's slope (0.5 bit per halving) */
            if (isnan(at) && m > kt_mse[0]) at = kt_bpw[0] - 0.5 * log2(m / kt_mse[0]);
            if (isnan(at) && m < kt_mse[2]) at = kt_bpw[2] - 0.5 * log2(m / kt_mse[2]);
            printf("%-12s %-8s %6.3f %10.5f %10.5f %7.3f kite at equal MSE: %.3f bpw (%.2f fewer)\n", "", llama_types[t].name,
                   bpw, m, pow(2, -2 * bpw), bpw - 0.5 * log2(1 / m), at, bpw - at);
        }
    }
    free(x), free(y), free(q);
    return 0;
}
