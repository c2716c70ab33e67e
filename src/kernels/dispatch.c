/* Choosing a kernel set: CPU features (cpuid and the OS's saved register state on x86, HWCAP on
 * AArch64), optionally narrowed by KITE_CPU=ref|avx2|avx512|neon. Resolved once per process. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels_internal.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define KITE_X86 1
#elif defined(__aarch64__)
#include <sys/auxv.h>
#define KITE_ARM64 1
#endif

typedef struct cpu_features {
    bool avx2, fma, f16c;                     /* with the OS saving YMM state */
    bool avx512f, avx512bw, avx512vl, vnni, bf16; /* with the OS saving ZMM and opmask state */
    bool asimd, dotprod;
} cpu_features;

#ifdef KITE_X86
static uint64_t read_xcr0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}
#endif

static cpu_features detect(void) {
    cpu_features f;
    memset(&f, 0, sizeof f);
#ifdef KITE_X86
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
    bool osxsave = (c >> 27) & 1, avx = (c >> 28) & 1;
    bool fma = (c >> 12) & 1, f16c = (c >> 29) & 1;
    if (!osxsave || !avx) return f;
    uint64_t xcr0 = read_xcr0();
    bool os_ymm = (xcr0 & 0x6) == 0x6;
    bool os_zmm = os_ymm && (xcr0 & 0xe0) == 0xe0;
    unsigned max_leaf = __get_cpuid_max(0, NULL);
    if (max_leaf < 7 || !os_ymm) return f;
    __cpuid_count(7, 0, a, b, c, d);
    unsigned leaf7_max_sub = a;
    f.avx2 = (b >> 5) & 1;
    f.fma = fma;
    f.f16c = f16c;
    if (os_zmm) {
        f.avx512f = (b >> 16) & 1;
        f.avx512bw = (b >> 30) & 1;
        f.avx512vl = (b >> 31) & 1;
        f.vnni = (c >> 11) & 1;
        if (leaf7_max_sub >= 1) {
            __cpuid_count(7, 1, a, b, c, d);
            f.bf16 = (a >> 5) & 1;
        }
    }
#elif defined(KITE_ARM64)
    unsigned long hw = getauxval(AT_HWCAP);
    f.asimd = (hw >> 1) & 1;     /* HWCAP_ASIMD */
    f.dotprod = (hw >> 20) & 1;  /* HWCAP_ASIMDDP */
#endif
    return f;
}

static bool level_available(const cpu_features *f, kite_cpu_level level) {
    switch (level) {
    case KITE_CPU_REF: return true;
#ifdef KITE_X86
    case KITE_CPU_AVX2: return f->avx2 && f->fma && f->f16c;
    case KITE_CPU_AVX512: return f->avx2 && f->fma && f->f16c && f->avx512f && f->avx512bw && f->avx512vl && f->vnni;
#endif
#ifdef KITE_ARM64
    case KITE_CPU_NEON: return f->asimd && f->dotprod;
#endif
    default: return false;
    }
}

static const kite_kernel_set *set_of(kite_cpu_level level) {
    switch (level) {
    case KITE_CPU_REF: return kite_kernels_ref();
#ifdef KITE_X86
    case KITE_CPU_AVX2: return kite_kernels_avx2();
    case KITE_CPU_AVX512: return kite_kernels_avx512();
#endif
#ifdef KITE_ARM64
    case KITE_CPU_NEON: return kite_kernels_neon();
#endif
    default: return NULL;
    }
}

static cpu_features features;
static const kite_kernel_set *chosen;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static const kite_kernel_set *best_available(void) {
    static const kite_cpu_level order[] = {KITE_CPU_AVX512, KITE_CPU_AVX2, KITE_CPU_NEON, KITE_CPU_REF};
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++)
        if (level_available(&features, order[i]) && set_of(order[i])) return set_of(order[i]);
    return kite_kernels_ref();
}

static void resolve(void) {
    features = detect();
    const char *want = getenv("KITE_CPU");
    chosen = NULL;
    if (want && *want) {
        static const struct { const char *name; kite_cpu_level level; } names[] = {
            {"ref", KITE_CPU_REF}, {"avx2", KITE_CPU_AVX2}, {"avx512", KITE_CPU_AVX512}, {"neon", KITE_CPU_NEON},
        };
        bool known = false;
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
            if (strcmp(want, names[i].name) != 0) continue;
            known = true;
            if (level_available(&features, names[i].level)) chosen = set_of(names[i].level);
            if (!chosen) kite_log(KITE_LOG_WARN, "KITE_CPU=%s: this CPU or build cannot run that level; using the best available", want);
        }
        if (!known) kite_log(KITE_LOG_WARN, "KITE_CPU=%s is not one of ref, avx2, avx512, neon; using the best available", want);
    }
    if (!chosen) chosen = best_available();
    kite_log(KITE_LOG_DEBUG, "kernels: %s", chosen->name);
}

const kite_kernel_set *kite_kernels(void) {
    pthread_once(&once, resolve);
    return chosen;
}

const kite_kernel_set *kite_kernels_for(kite_cpu_level level) {
    pthread_once(&once, resolve);
    return level_available(&features, level) ? set_of(level) : NULL;
}
