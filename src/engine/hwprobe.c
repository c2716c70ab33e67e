/* kite_hw_probe: measures what the machine can do, so benchmarks can quote fractions of it.
 *
 *   read bandwidth  every thread streams its own slice of one buffer far larger than the last-level
 *                   cache (1 GiB, or less when memory is short) with wide loads; best of several passes.
 *   int8 peak       a register-resident multiply-add loop: vpdpbusd (AVX-512 VNNI) when the CPU has it,
 *                   else vpmaddubsw + vpmaddwd (AVX2), else plain C. Counted as 2 ops per multiply-add.
 *   fp32 peak       a register-resident FMA loop (AVX-512F, else AVX2+FMA, else plain C), 2 flops per FMA.
 *
 * The multi-threaded figures start all threads at a barrier and divide the total work by the time of
 * the slowest thread, so a thread that starts late cannot inflate them. Each figure is the best of a
 * few short runs: the machine's noise only ever slows a run down. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "base/error.h"
#include "base/threadpool.h"
#include "kernels/kernels.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KITE_PROBE_X86 1
#endif

enum {
    PROBE_MAX_THREADS = 256,
    INT8_VNNI = 2,
    INT8_AVX2 = 1,
    INT8_SCALAR = 0,
};

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Keeps a result alive so the compiler cannot drop the loop that made it. */
static volatile uint64_t probe_sink;

/* ---- CPU features (x86 only: other architectures run the portable loops) ------------------------ */
#ifdef KITE_PROBE_X86
static bool cpu_has_avx512_vnni(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vnni");
}
static bool cpu_has_avx512f(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f");
}
static bool cpu_has_avx2_fma(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
#endif

/* ---- read loops: return a checksum of the bytes read ------------------------------------------ */
#ifdef KITE_PROBE_X86
__attribute__((target("avx512f"))) static uint64_t read_avx512(const unsigned char *p, size_t n) {
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 256 <= n; i += 256) {
        a0 = _mm512_xor_si512(a0, _mm512_load_si512((const void *)(p + i)));
        a1 = _mm512_xor_si512(a1, _mm512_load_si512((const void *)(p + i + 64)));
        a2 = _mm512_xor_si512(a2, _mm512_load_si512((const void *)(p + i + 128)));
        a3 = _mm512_xor_si512(a3, _mm512_load_si512((const void *)(p + i + 192)));
    }
    __m512i x = _mm512_xor_si512(_mm512_xor_si512(a0, a1), _mm512_xor_si512(a2, a3));
    return (uint64_t)_mm512_reduce_add_epi64(x);
}

__attribute__((target("avx2"))) static uint64_t read_avx2(const unsigned char *p, size_t n) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 128 <= n; i += 128) {
        a0 = _mm256_xor_si256(a0, _mm256_load_si256((const __m256i *)(p + i)));
        a1 = _mm256_xor_si256(a1, _mm256_load_si256((const __m256i *)(p + i + 32)));
        a2 = _mm256_xor_si256(a2, _mm256_load_si256((const __m256i *)(p + i + 64)));
        a3 = _mm256_xor_si256(a3, _mm256_load_si256((const __m256i *)(p + i + 96)));
    }
    __m256i x = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
    uint64_t lanes[4];
    _mm256_storeu_si256((__m256i *)lanes, x);
    return lanes[0] ^ lanes[1] ^ lanes[2] ^ lanes[3];
}
#endif

static uint64_t read_scalar(const unsigned char *p, size_t n) {
    const uint64_t *q = (const uint64_t *)(const void *)p;
    uint64_t a[8] = {0};
    for (size_t i = 0; i + 8 <= n / 8; i += 8)
        for (int k = 0; k < 8; k++) a[k] ^= q[i + k];
    return a[0] ^ a[1] ^ a[2] ^ a[3] ^ a[4] ^ a[5] ^ a[6] ^ a[7];
}

/* ---- compute loops: run `iters` iterations, return a value depending on all of them ----------- */
enum { INT8_CHAINS = 12, F32_CHAINS = 12 };

/* The chains are spelled out, not looped over: a compiler that does not unroll a loop over an
 * accumulator array keeps the array in memory, and the probe would measure loads and stores. */
#define REPEAT12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)

#ifdef KITE_PROBE_X86
/* One iteration: 12 vpdpbusd of 16 lanes x 4 byte products = 768 multiply-adds. */
__attribute__((target("avx512vnni,avx512f"))) static uint64_t int8_vnni_loop(int64_t iters, int32_t seed) {
    __m512i a = _mm512_set1_epi32(seed | 0x01010101), b = _mm512_set1_epi32(seed ^ 0x02030405);
#define DECL(k) __m512i acc##k = _mm512_set1_epi32(k);
#define STEP(k) acc##k = _mm512_dpbusd_epi32(acc##k, a, b);
#define SUM(k) s = _mm512_add_epi32(s, acc##k);
    REPEAT12(DECL)
    for (int64_t i = 0; i < iters; i++) {
        __asm__ volatile("" : "+v"(a), "+v"(b)); /* the inputs "change": nothing can be hoisted */
        REPEAT12(STEP)
    }
    __m512i s = _mm512_setzero_si512();
    REPEAT12(SUM)
#undef DECL
#undef STEP
#undef SUM
    return (uint64_t)(uint32_t)_mm512_reduce_add_epi32(s);
}

/* One iteration: 12 x (vpmaddubsw, vpmaddwd, vpaddd) over 32 byte products = 384 multiply-adds. */
__attribute__((target("avx2"))) static uint64_t int8_avx2_loop(int64_t iters, int32_t seed) {
    __m256i b = _mm256_set1_epi32(seed ^ 0x02030405);
    __m256i ones = _mm256_set1_epi16(1);
#define DECL(k) __m256i acc##k = _mm256_set1_epi32(k);
/* The accumulator is also the unsigned operand: with the same (a, b) in every chain the compiler
 * would compute the product once and only add it 12 times. */
#define STEP(k) acc##k = _mm256_add_epi32(acc##k, _mm256_madd_epi16(_mm256_maddubs_epi16(acc##k, b), ones));
#define SUM(k) s = _mm256_add_epi32(s, acc##k);
    REPEAT12(DECL)
    for (int64_t i = 0; i < iters; i++) {
        __asm__ volatile("" : "+x"(b));
        REPEAT12(STEP)
    }
    __m256i s = _mm256_setzero_si256();
    REPEAT12(SUM)
#undef DECL
#undef STEP
#undef SUM
    uint32_t lanes[8];
    _mm256_storeu_si256((__m256i *)lanes, s);
    uint64_t r = 0;
    for (int k = 0; k < 8; k++) r += lanes[k];
    return r;
}

/* One iteration: 12 FMAs of 16 lanes = 192 FMAs. */
__attribute__((target("avx512f"))) static uint64_t f32_avx512_loop(int64_t iters, int32_t seed) {
    __m512 a = _mm512_set1_ps(0.999f + (float)(seed & 1) * 1e-6f), b = _mm512_set1_ps(1e-7f);
#define DECL(k) __m512 acc##k = _mm512_set1_ps((float)k);
#define STEP(k) acc##k = _mm512_fmadd_ps(acc##k, a, b);
#define SUM(k) s = _mm512_add_ps(s, acc##k);
    REPEAT12(DECL)
    for (int64_t i = 0; i < iters; i++) {
        __asm__ volatile("" : "+v"(a), "+v"(b));
        REPEAT12(STEP)
    }
    __m512 s = _mm512_setzero_ps();
    REPEAT12(SUM)
#undef DECL
#undef STEP
#undef SUM
    float v = _mm512_reduce_add_ps(s);
    uint32_t bits;
    memcpy(&bits, &v, 4);
    return bits;
}

/* One iteration: 12 FMAs of 8 lanes = 96 FMAs. */
__attribute__((target("avx2,fma"))) static uint64_t f32_avx2_loop(int64_t iters, int32_t seed) {
    __m256 a = _mm256_set1_ps(0.999f + (float)(seed & 1) * 1e-6f), b = _mm256_set1_ps(1e-7f);
#define DECL(k) __m256 acc##k = _mm256_set1_ps((float)k);
#define STEP(k) acc##k = _mm256_fmadd_ps(acc##k, a, b);
#define SUM(k) s = _mm256_add_ps(s, acc##k);
    REPEAT12(DECL)
    for (int64_t i = 0; i < iters; i++) {
        __asm__ volatile("" : "+x"(b));
        REPEAT12(STEP)
    }
    __m256 s = _mm256_setzero_ps();
    REPEAT12(SUM)
#undef DECL
#undef STEP
#undef SUM
    float lanes[8];
    _mm256_storeu_ps(lanes, s);
    float v = 0;
    for (int k = 0; k < 8; k++) v += lanes[k];
    uint32_t bits;
    memcpy(&bits, &v, 4);
    return bits;
}
#endif

/* Portable fallbacks: 64 multiply-adds per iteration, in a shape compilers vectorize. */
static uint64_t int8_scalar_loop(int64_t iters, int32_t seed) {
    uint8_t a[64];
    int8_t b[64];
    int32_t acc[64] = {0};
    for (int k = 0; k < 64; k++) a[k] = (uint8_t)(seed + k), b[k] = (int8_t)(k - 32);
    for (int64_t i = 0; i < iters; i++) {
        __asm__ volatile("" : : "r"(a), "r"(b) : "memory");
        for (int k = 0; k < 64; k++) acc[k] += (int32_t)a[k] * (int32_t)b[k];
    }
    uint64_t r = 0;
    for (int k = 0; k < 64; k++) r += (uint32_t)acc[k];
    return r;
}

static uint64_t f32_scalar_loop(int64_t iters, int32_t seed) {
    float acc[64], a = 0.999f + (float)(seed & 1) * 1e-6f, b = 1e-7f;
    for (int k = 0; k < 64; k++) acc[k] = (float)k;
    for (int64_t i = 0; i < iters; i++) {
        __asm__ volatile("" : : "r"(acc) : "memory");
        for (int k = 0; k < 64; k++) acc[k] = acc[k] * a + b;
    }
    float v = 0;
    for (int k = 0; k < 64; k++) v += acc[k];
    uint32_t bits;
    memcpy(&bits, &v, 4);
    return bits;
}

typedef uint64_t (*compute_loop_fn)(int64_t iters, int32_t seed);

/* ---- a gang of threads that start together ------------------------------------------------------ */
typedef enum job_kind { JOB_READ, JOB_COMPUTE } job_kind;

typedef struct gang_job {
    job_kind kind;
    atomic_int ready;                     /* threads waiting at the start line */
    atomic_int go;                        /* 1: run, 2: abandon (a thread could not be created) */
    double t_start;                       /* set by thread 0 when it lets the others go */
    double t_end[PROBE_MAX_THREADS];      /* each thread's finish time */
    uint64_t result[PROBE_MAX_THREADS];   /* each thread's checksum, summed into probe_sink after the join */
    /* JOB_READ */
    const unsigned char *buf;
    size_t slice;                         /* bytes per thread, a multiple of 256 */
    uint64_t (*read_fn)(const unsigned char *, size_t);
    /* JOB_COMPUTE */
    compute_loop_fn loop;
    int64_t iters;
} gang_job;

typedef struct gang_arg { gang_job *job; int index; } gang_arg;

static void gang_work(gang_job *job, int index) {
    uint64_t r;
    if (job->kind == JOB_READ) r = job->read_fn(job->buf + (size_t)index * job->slice, job->slice);
    else r = job->loop(job->iters, index + 1);
    job->t_end[index] = now_seconds();
    job->result[index] = r;
}

static void *gang_worker(void *p) {
    gang_arg *a = p;
    gang_job *job = a->job;
    atomic_fetch_add(&job->ready, 1);
    int go;
    while ((go = atomic_load(&job->go)) == 0) { /* spin: the wait is microseconds */ }
    if (go == 1) gang_work(job, a->index);
    return NULL;
}

/* Runs the job on n threads (the caller is thread 0) released together; returns the seconds from the
 * release to the last finish, or a negative value when threads could not be started. */
static double gang_run(gang_job *job, int n) {
    pthread_t tids[PROBE_MAX_THREADS];
    gang_arg args[PROBE_MAX_THREADS];
    atomic_store(&job->ready, 0);
    atomic_store(&job->go, 0);
    int started = 1;
    for (int i = 1; i < n; i++) {
        args[i] = (gang_arg){job, i};
        if (pthread_create(&tids[i], NULL, gang_worker, &args[i]) != 0) break;
        started++;
    }
    if (started < n) {
        atomic_store(&job->go, 2);
        for (int i = 1; i < started; i++) pthread_join(tids[i], NULL);
        return -1;
    }
    while (atomic_load(&job->ready) < n - 1) { /* wait for everyone at the start line */ }
    job->t_start = now_seconds();
    atomic_store(&job->go, 1);
    gang_work(job, 0);
    for (int i = 1; i < n; i++) pthread_join(tids[i], NULL);
    for (int i = 0; i < n; i++) probe_sink += job->result[i];
    double last = job->t_start;
    for (int i = 0; i < n; i++)
        if (job->t_end[i] > last) last = job->t_end[i];
    return last - job->t_start;
}

/* ---- the figures ------------------------------------------------------------------------------ */
/* Best read bandwidth in GB/s of n threads over buf[0..size): passes until `budget` seconds are
 * spent (at least 3). */
static double best_read_gbs(const unsigned char *buf, size_t size, int n, double budget,
                            uint64_t (*read_fn)(const unsigned char *, size_t)) {
    gang_job job = {.kind = JOB_READ, .buf = buf, .read_fn = read_fn};
    job.slice = size / (size_t)n / 256 * 256;
    double best = 0, t0 = now_seconds();
    for (int pass = 0; pass < 3 || now_seconds() - t0 < budget; pass++) {
        double t = gang_run(&job, n);
        if (t <= 0) return -1;
        double gbs = (double)job.slice * (double)n / t / 1e9;
        if (gbs > best) best = gbs;
        if (pass >= 64) break;
    }
    return best;
}

/* Best GOP/s of `loop` on n threads: one calibration run, then runs of about budget/4 seconds. */
static double best_compute_gops(compute_loop_fn loop, double ops_per_iter, int n, double budget) {
    gang_job job = {.kind = JOB_COMPUTE, .loop = loop, .iters = 20000};
    double t = gang_run(&job, 1);
    if (t <= 0) return -1;
    double iters_per_s = (double)job.iters / t;
    double run_s = budget / 4 > 0.005 ? budget / 4 : 0.005;
    job.iters = (int64_t)(iters_per_s * run_s) + 1;
    double best = 0;
    for (int run = 0; run < 3; run++) {
        t = gang_run(&job, n);
        if (t <= 0) return -1;
        double gops = (double)job.iters * ops_per_iter * n / t / 1e9;
        if (gops > best) best = gops;
    }
    return best;
}

int kite_hw_probe(int32_t n_threads, double seconds, kite_hw_info *info, char *err, size_t err_size) {
    kite_error e = {0};
    if (!info) return kite_fail(&e, KITE_ERR_INVALID_ARG, "hw probe: info must not be NULL"), kite_error_export(&e, err, err_size);
    memset(info, 0, sizeof *info);
    int n_cpus = kite_cpu_count();
    if (n_threads == 0) n_threads = n_cpus;
    if (n_threads < 1 || n_threads > PROBE_MAX_THREADS)
        return kite_fail(&e, KITE_ERR_INVALID_ARG, "hw probe: n_threads %d is out of range (1..%d, or 0 for all %d CPUs)",
                         n_threads, PROBE_MAX_THREADS, n_cpus),
               kite_error_export(&e, err, err_size);
    if (!(seconds >= 0) || seconds > 600)
        return kite_fail(&e, KITE_ERR_INVALID_ARG, "hw probe: seconds %g is out of range (0..600)", seconds),
               kite_error_export(&e, err, err_size);
    if (seconds == 0) seconds = 1.5;

    const kite_kernel_set *ks = kite_kernels(); /* the set the forward pass uses (KITE_CPU applies) */
    const char *kernels = ks && ks->name ? ks->name : "ref";
    snprintf(info->kernels, sizeof info->kernels, "%s", kernels);
    info->n_cpus = n_cpus;
    info->n_threads = n_threads;

    /* A buffer far beyond any last-level cache. mmap (not malloc) so it goes back to the system at
     * once; huge pages where allowed, so TLB misses do not cap the figure. Filled with non-zero bytes
     * so no page is the shared zero page. */
    size_t size = (size_t)1 << 30;
    unsigned char *buf = MAP_FAILED;
    while (size >= ((size_t)64 << 20)) {
        buf = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (buf != MAP_FAILED) break;
        size /= 2;
    }
    if (buf == MAP_FAILED)
        return kite_fail(&e, KITE_ERR_NOMEM, "hw probe: cannot map a 64 MiB buffer for the bandwidth test"),
               kite_error_export(&e, err, err_size);
#ifdef MADV_HUGEPAGE
    madvise(buf, size, MADV_HUGEPAGE);
#endif
    memset(buf, 0x5a, size);

    uint64_t (*read_fn)(const unsigned char *, size_t) = read_scalar;
    compute_loop_fn int8_loop = int8_scalar_loop, f32_loop = f32_scalar_loop;
    double int8_ops = 64 * 2, f32_ops = 64 * 2;
#ifdef KITE_PROBE_X86
    if (cpu_has_avx512f()) read_fn = read_avx512;
    else if (cpu_has_avx2_fma()) read_fn = read_avx2;
    if (cpu_has_avx512_vnni()) int8_loop = int8_vnni_loop, int8_ops = INT8_CHAINS * 16 * 4 * 2;
    else if (cpu_has_avx2_fma()) int8_loop = int8_avx2_loop, int8_ops = INT8_CHAINS * 32 * 2;
    if (cpu_has_avx512f()) f32_loop = f32_avx512_loop, f32_ops = F32_CHAINS * 16 * 2;
    else if (cpu_has_avx2_fma()) f32_loop = f32_avx2_loop, f32_ops = F32_CHAINS * 8 * 2;
#endif

    /* Bandwidth gets most of the time: it is the noisy figure. */
    info->read_gbs_1t = best_read_gbs(buf, size, 1, seconds * 0.25, read_fn);
    info->read_gbs = n_threads == 1 ? info->read_gbs_1t : best_read_gbs(buf, size, n_threads, seconds * 0.35, read_fn);
    munmap(buf, size);
    info->int8_gops_1t = best_compute_gops(int8_loop, int8_ops, 1, seconds * 0.1);
    info->int8_gops = n_threads == 1 ? info->int8_gops_1t : best_compute_gops(int8_loop, int8_ops, n_threads, seconds * 0.1);
    info->f32_gflops = best_compute_gops(f32_loop, f32_ops, n_threads, seconds * 0.1);
    if (info->read_gbs_1t < 0 || info->read_gbs < 0 || info->int8_gops_1t < 0 || info->int8_gops < 0 || info->f32_gflops < 0)
        return kite_fail(&e, KITE_ERR_NOMEM, "hw probe: could not start %d threads", n_threads), kite_error_export(&e, err, err_size);
    return KITE_OK;
}
