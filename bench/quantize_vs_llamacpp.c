/* Times kite_quantize against llama.cpp's llama_model_quantize (node-llama-cpp's libllama, dlopen'ed)
 * on the same file, type and thread count, alternating runs; prints the best of each and whether the
 * two outputs are byte-identical.
 *
 *   quantize_vs_llamacpp LIB_DIR IN.gguf TYPE THREADS [RUNS] [--allow-requantize] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kite.h"
#include "llama_lib.h"
#include "quant/quantize_model.h"

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static long file_bytes(const char *path, unsigned char **data) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    *data = malloc((size_t)n);
    if (!*data || fread(*data, 1, (size_t)n, f) != (size_t)n) n = -1;
    fclose(f);
    return n;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s LIB_DIR IN.gguf TYPE THREADS [RUNS] [--allow-requantize]\n", argv[0]);
        return 2;
    }
    const bool requant = argc > 6 && !strcmp(argv[6], "--allow-requantize");
    const int threads = atoi(argv[4]), runs = argc > 5 ? atoi(argv[5]) : 5;
    const kite_ftype_info *ft = kite_ftype_find(argv[3]);
    llama_lib lib;
    if (!ft || !llama_lib_open(&lib, argv[1])) {
        fprintf(stderr, "%s\n", ft ? lib.error : "unknown type");
        return 1;
    }
    const char *kout = "/tmp/kite-qbench-kite.gguf", *lout = "/tmp/kite-qbench-llama.gguf";
    double best_k = 1e9, best_l = 1e9;
    for (int r = 0; r < runs; r++) {
        kite_quantize_params p = kite_quantize_default_params();
        p.type = ft->name;
        p.n_threads = threads;
        p.allow_requantize = requant;
        char err[1024];
        double t0 = now_s();
        if (kite_quantize(argv[2], kout, &p, err, sizeof err)) {
            fprintf(stderr, "kite: %s\n", err);
            return 1;
        }
        double t1 = now_s();
        llama_quantize_params lp = lib.defaults;
        lp.nthread = threads;
        lp.ftype = ft->id;
        lp.allow_requantize = requant;
        if (lib.model_quantize(argv[2], lout, &lp)) {
            fprintf(stderr, "llama_model_quantize failed\n");
            return 1;
        }
        double t2 = now_s();
        if (t1 - t0 < best_k) best_k = t1 - t0;
        if (t2 - t1 < best_l) best_l = t2 - t1;
    }
    unsigned char *a, *b;
    long na = file_bytes(kout, &a), nb = file_bytes(lout, &b);
    printf("%s %s, %d threads, best of %d: kite %.3f s, llama.cpp %.3f s (kite/llama.cpp %.2f); output %ld bytes, %s\n",
           argv[2], ft->name, threads, runs, best_k, best_l, best_k / best_l, na,
           na == nb ? "same size as llama.cpp's" : "size differs from llama.cpp's");
    remove(kout), remove(lout);
    return 0;
}
