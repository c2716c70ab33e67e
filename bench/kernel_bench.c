/* kite_kernel_bench: throughput of the matrix kernels per weight type and CPU level, on 1.1B-like
 * shapes, the way the forward pass calls them (quantize the activations once, then row ranges of
 * row_block rows handed to the thread pool).
 *
 *   kite_kernel_bench [--threads N] [--level ref|avx2|avx512|neon|all] [--types q4_0,q8_0,kt2,...]
 *                     [--rows R] [--cols C] [--batches 1,16,64] [--ms MILLISECONDS] [--cpu-time]
 *
 * --copies N caps the copies (1 keeps a small matrix in cache, to see the compute rate alone).
 * --cpu-time (with --threads 1) times the calling thread's CPU time instead of wall time: a rough
 * figure that survives a busy machine (memory bandwidth is still shared).
 *
 * n = 1 reports GB/s of packed weight bytes streamed (decode is bound by memory bandwidth); larger n
 * report GOP/s (2 * rows * cols * n per product; prefill and draft verification are bound by
 * arithmetic). Enough copies of the matrix are cycled through that they do not fit in the caches. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "base/threadpool.h"
#include "kernels/kernels_internal.h"
#include "quant/trellis.h"
#include "quant/types.h"

static clockid_t bench_clock = CLOCK_MONOTONIC;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(bench_clock, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct job {
    const kite_kernel_set *set;
    const kite_packed_matrix *w;
    const void *act;
    const float *x;
    float *y;
    int32_t n;
    int64_t rows;
} job;

static void task(void *ctx, int64_t t, int thread) {
    (void)thread;
    const job *j = ctx;
    int64_t r0 = t * j->set->row_block, r1 = r0 + j->set->row_block;
    if (r1 > j->rows) r1 = j->rows;
    j->set->matmul(j->w, j->act, j->x, j->n, j->y, j->rows, r0, r1);
}

/* Read-bandwidth probe: the threads sum disjoint slices of a large buffer (the decode roofline). */
typedef uint64_t u64x4 __attribute__((vector_size(32)));
typedef struct probe_job {
    const u64x4 *buf;
    size_t n_vec;   /* vectors in buf */
    int64_t n_tasks;
    u64x4 sums[64];
} probe_job;

static void probe_task(void *ctx, int64_t t, int thread) {
    probe_job *j = ctx;
    size_t per = j->n_vec / (size_t)j->n_tasks, lo = (size_t)t * per, hi = lo + per;
    u64x4 a = {0}, b = {0}, c = {0}, d = {0};
    for (size_t i = lo; i + 4 <= hi; i += 4) {
        a += j->buf[i];
        b += j->buf[i + 1];
        c += j->buf[i + 2];
        d += j->buf[i + 3];
    }
    j->sums[thread & 63] += a + b + c + d;
}

static double probe_bandwidth(kite_pool *pool, const void *buf, size_t bytes) {
    probe_job j = {.buf = buf, .n_vec = bytes / sizeof(u64x4), .n_tasks = 64};
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = now_s();
        kite_pool_run(pool, probe_task, &j, j.n_tasks);
        double gbs = (double)bytes / (now_s() - t0) * 1e-9;
        if (gbs > best) best = gbs;
    }
    volatile uint64_t sink = j.sums[0][0];
    (void)sink;
    return best;
}

static uint32_t type_by_name(const char *name) {
    for (uint32_t t = 0; t < KITE_TYPE_COUNT; t++) {
        const kite_type_traits *tr = kite_type_get(t);
        if (tr && strcasecmp(tr->name, name) == 0) return t; /* q2_k as q2_K */
    }
    static const uint32_t kt[] = {KITE_TYPE_KT2, KITE_TYPE_KT2_5, KITE_TYPE_KT3, KITE_TYPE_KT2H, KITE_TYPE_KT2_5H, KITE_TYPE_KT3H};
    for (size_t i = 0; i < sizeof kt / sizeof kt[0]; i++)
        if (strcasecmp(kite_type_get(kt[i])->name, name) == 0) return kt[i];
    return UINT32_MAX;
}

int main(int argc, char **argv) {
    int threads = 2, ms = 400, max_copies = 64;
    const char *level_arg = "all", *types_arg = "q4_0,q8_0,q4_K,q6_K,q5_K,f16,bf16,f32", *batches_arg = "1,16,64";
    int64_t rows = 2048, cols = 8192;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--level") && i + 1 < argc) level_arg = argv[++i];
        else if (!strcmp(argv[i], "--types") && i + 1 < argc) types_arg = argv[++i];
        else if (!strcmp(argv[i], "--batches") && i + 1 < argc) batches_arg = argv[++i];
        else if (!strcmp(argv[i], "--rows") && i + 1 < argc) rows = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--cols") && i + 1 < argc) cols = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--ms") && i + 1 < argc) ms = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--copies") && i + 1 < argc) max_copies = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--cpu-time")) bench_clock = CLOCK_THREAD_CPUTIME_ID;
        else {
            fprintf(stderr, "usage: %s [--threads N] [--level ref|avx2|avx512|neon|all] [--types a,b] [--rows R] [--cols C] "
                            "[--batches 1,16,64] [--ms MS] [--copies N] [--cpu-time]\n", argv[0]);
            return 2;
        }
    }
    if (bench_clock == CLOCK_THREAD_CPUTIME_ID) threads = 1;
    if (threads < 1 || rows < 1 || cols < 256 || cols % 256 || ms < 1) {
        fprintf(stderr, "bad arguments (cols must be a multiple of 256)\n");
        return 2;
    }
    int32_t batches[16], n_batches = 0, max_batch = 1;
    char *batch_list = strdup(batches_arg);
    for (char *tok = batch_list ? strtok(batch_list, ",") : NULL; tok && n_batches < 16; tok = strtok(NULL, ",")) {
        batches[n_batches] = atoi(tok);
        if (batches[n_batches] < 1) batches[n_batches] = 1;
        if (batches[n_batches] > max_batch) max_batch = batches[n_batches];
        n_batches++;
    }
    free(batch_list);
    kite_pool *pool = kite_pool_new(threads);
    if (!pool) return 1;
    float *x = malloc(sizeof(float) * (size_t)(max_batch * cols));
    float *y = malloc(sizeof(float) * (size_t)max_batch * (size_t)rows);
    float *src = malloc(sizeof(float) * (size_t)cols);
    if (!x || !y || !src) return 1;
    srand(1);
    for (int64_t i = 0; i < max_batch * cols; i++) x[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    for (int64_t i = 0; i < cols; i++) src[i] = ((float)rand() / (float)RAND_MAX - 0.5f) * 0.1f;

    const size_t probe_bytes = (size_t)256 << 20;
    /* Weights and probe in the packer's memory (huge pages where the kernel offers them): with 4 KiB
     * pages both the kernels and the probe read 25-40% slower than the model's weights do. */
    void *probe_buf = kite_alloc_weights(probe_bytes);
    if (!probe_buf) return 1;
    memset(probe_buf, 1, probe_bytes);
    printf("kernel bench: %lld x %lld (rows x cols), %d threads\n", (long long)rows, (long long)cols, threads);
    printf("%-12s %-6s %6s %10s %10s %10s\n", "level", "type", "n", "ms/call", "GB/s", "GOP/s");
    printf("(n = 1 is followed by a read-bandwidth probe taken right after it, and the fraction reached)\n");
    static const kite_cpu_level levels[] = {KITE_CPU_REF, KITE_CPU_AVX2, KITE_CPU_AVX512, KITE_CPU_NEON};
    static const char *level_names[] = {"ref", "avx2", "avx512", "neon"};
    for (int li = 0; li < 4; li++) {
        if (strcmp(level_arg, "all") && strcmp(level_arg, level_names[li])) continue;
        const kite_kernel_set *set = kite_kernels_for(levels[li]);
        if (!set) continue;
        char *types = strdup(types_arg);
        for (char *tn = strtok(types, ","); tn; tn = strtok(NULL, ",")) {
            uint32_t type = type_by_name(tn);
            const kite_type_traits *tr = kite_type_get(type);
            const bool trellis = kite_is_trellis(type);
            if (!tr || (!tr->from_float && !trellis) || cols % tr->block_size || (trellis && rows % KT_ROWS)) {
                fprintf(stderr, "skipping type %s: %s\n", tn,
                        !tr ? "no such type (names as in GGUF: q4_0, q4_K, kt2, ...)"
                        : (!tr->from_float && !trellis) ? "kite cannot quantize to it"
                                                         : "the matrix shape is not a multiple of its block");
                continue;
            }
            /* One quantized row repeated: the kernels' speed does not depend on the values. */
            size_t row_bytes = kite_type_row_bytes(type, cols);
            uint8_t *raw = malloc(row_bytes * (size_t)rows);
            if (!raw) return 1;
            if (trellis) { /* one row group (16 rows), repeated */
                float *src16 = malloc(sizeof(float) * (size_t)cols * KT_ROWS);
                if (!src16) return 1;
                for (int r = 0; r < KT_ROWS; r++)
                    for (int64_t c = 0; c < cols; c++) src16[r * cols + c] = src[(c + 97 * r) % cols];
                kite_kt_quantize(type, src16, raw, KT_ROWS, cols, NULL);
                free(src16);
                for (int64_t r = KT_ROWS; r < rows; r += KT_ROWS) memcpy(raw + (size_t)r * row_bytes, raw, row_bytes * KT_ROWS);
            } else {
                tr->from_float(src, raw, cols);
                for (int64_t r = 1; r < rows; r++) memcpy(raw + (size_t)r * row_bytes, raw, row_bytes);
            }
            kite_tensor t = {.type = type, .n_dims = 2, .ne = {cols, rows, 1, 1}, .n_bytes = row_bytes * (size_t)rows, .data = raw};
            snprintf(t.name, sizeof t.name, "bench");
            kite_error e = {0};
            kite_packed_matrix pm;
            double pack_t0 = now_s();
            if (set->pack(&t, NULL, &pm, &e)) {
                fprintf(stderr, "%s\n", e.msg);
                return 1;
            }
            double pack_s = now_s() - pack_t0;
            printf("%-12s %-6s   pack %.1f MB in %.1f ms (%.0f MB/s, one thread, at load)\n", set->name, tr->name,
                   (double)t.n_bytes * 1e-6, pack_s * 1e3, (double)t.n_bytes * 1e-6 / (pack_s > 0 ? pack_s : 1e-9));
            /* Copies up to ~256 MB so each call streams from memory, as a forward pass over layers does. */
            int copies = (int)(((size_t)256 << 20) / pm.n_bytes) + 1;
            if (copies > max_copies) copies = max_copies;
            if (copies < 1) copies = 1;
            kite_packed_matrix *mats = calloc((size_t)copies, sizeof *mats);
            if (!mats) return 1;
            for (int c = 0; c < copies; c++) {
                mats[c] = pm;
                void *mem = kite_alloc_weights(pm.n_bytes);
                if (!mem) return 1;
                memcpy(mem, pm.data, pm.n_bytes);
                mats[c].data = mem;
                mats[c].owned = mem;
            }
            for (int bi = 0; bi < n_batches; bi++) {
                int32_t n = batches[bi];
                size_t ab = set->act_bytes(type, cols, n);
                void *act = ab ? aligned_alloc(64, kite_round_up(ab, 64)) : NULL;
                job j = {.set = set, .act = act, .x = x, .y = y, .n = n, .rows = rows};
                int64_t n_tasks = (rows + set->row_block - 1) / set->row_block;
                double best = 1e30;
                for (int rep = 0; rep < 3; rep++) {
                    int calls = 0;
                    double t0 = now_s(), t1 = t0;
                    while (t1 - t0 < ms * 1e-3 / 3) {
                        if (act) set->quantize_act(type, x, cols, 0, n, act);
                        j.w = &mats[calls % copies];
                        kite_pool_run(pool, task, &j, n_tasks);
                        calls++;
                        t1 = now_s();
                    }
                    double per = (t1 - t0) / calls;
                    if (per < best) best = per;
                }
                double gbs = (double)pm.n_bytes / best * 1e-9;
                double gops = 2.0 * (double)rows * (double)cols * n / best * 1e-9;
                printf("%-12s %-6s %6d %10.3f %10.1f %10.1f", set->name, tr->name, n, best * 1e3, gbs, gops);
                if (n == 1 && bench_clock == CLOCK_MONOTONIC) {
                    double probe = probe_bandwidth(pool, probe_buf, probe_bytes);
                    printf("   (read probe %.1f GB/s: %.0f%%)", probe, 100.0 * gbs / probe);
                }
                printf("\n");
                fflush(stdout);
                free(act);
            }
            for (int c = 0; c < copies; c++) kite_packed_matrix_free(&mats[c]);
            free(mats);
            kite_packed_matrix_free(&pm);
            free(raw);
        }
        free(types);
    }
    kite_pool_free(pool);
    free(probe_buf);
    free(x);
    free(y);
    free(src);
    return 0;
}
