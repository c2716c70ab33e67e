/* kite quantize: writes a quantized GGUF file from an F32/F16/BF16 one, with llama.cpp's recipes
 * (kite_quantize in kite.h). Progress goes to stderr; Ctrl-C cancels cleanly (no file under OUT). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kite.h"

static const char QUANTIZE_USAGE[] =
    "usage: kite quantize IN OUT.gguf --type TYPE [--imatrix FILE] [--threads N] [--tokenizer FILE]\n"
    "                    [--allow-requantize] [--quiet]\n"
    "\n"
    "Quantizes an F32/F16/BF16 GGUF model (or a llama2.c .bin with --tokenizer, converted as llama.cpp's\n"
    "convert-llama2c-to-ggml does, or a Hugging Face folder, converted as convert_hf_to_gguf.py does)\n"
    "the way llama-quantize does: the same type for each tensor\n"
    "(token embeddings, output, attn_v and ffn_down get more bits in the _M/_L mixes; 1-D tensors and\n"
    "norms stay as they are) and byte-identical blocks. A tensor whose rows are not a multiple of the\n"
    "type's block falls back: Q2_K/Q3_K to Q4_0, Q4_K to Q5_0, Q5_K to Q5_1, Q6_K to Q8_0, and to F16\n"
    "when 32 does not divide the row either. The file is written under OUT.tmp-PID and renamed when\n"
    "complete: a failed or interrupted run leaves no file under OUT.\n"
    "\n"
    "  --type TYPE          one of:";

static const char QUANTIZE_OPTIONS[] =
    "  --imatrix FILE       importance matrix from llama-imatrix or kite imatrix (GGUF or legacy .dat)\n"
    "  --threads N          threads quantizing rows (default: every CPU)\n"
    "  --tokenizer FILE     a llama2.c checkpoint's tokenizer .bin\n"
    "  --allow-requantize   accept a source whose weights are already quantized (lossy twice)\n"
    "  --quiet              no progress lines\n";

static volatile sig_atomic_t g_interrupted = 0;
static void on_sigint(int sig) {
    (void)sig;
    g_interrupted = 1;
}

static bool show_progress(void *user_data, int64_t index, int64_t n_tensors, const char *name, const char *type) {
    if (!*(const bool *)user_data) fprintf(stderr, "[%4lld/%4lld] %-40s -> %s\n", (long long)index + 1, (long long)n_tensors, name, type);
    return !g_interrupted;
}

static void print_usage(FILE *f) {
    fputs(QUANTIZE_USAGE, f);
    for (const char *const *t = kite_quantize_type_names(); *t; t++) fprintf(f, " %s", *t);
    fputs("\n", f);
    fputs(QUANTIZE_OPTIONS, f);
}

int kite_cmd_quantize(int argc, char **argv);
int kite_cmd_quantize(int argc, char **argv) {
    kite_quantize_params p = kite_quantize_default_params();
    const char *paths[2] = {NULL, NULL};
    int n_paths = 0;
    bool quiet = false, have_type = false;
    for (int i = 2; i < argc; i++) {
        const char *opt = argv[i];
        if (!strcmp(opt, "--help") || !strcmp(opt, "-h")) {
            print_usage(stdout);
            return 0;
        }
        if (!strcmp(opt, "--allow-requantize")) { p.allow_requantize = true; continue; }
        if (!strcmp(opt, "--quiet")) { quiet = true; continue; }
        if (opt[0] == '-' && opt[1] == '-') {
            if (strcmp(opt, "--type") && strcmp(opt, "--imatrix") && strcmp(opt, "--threads") && strcmp(opt, "--tokenizer")) {
                fprintf(stderr, "kite: error: unknown option %s (see kite quantize --help)\n", opt);
                return 2;
            }
            if (i + 1 >= argc) {
                fprintf(stderr, "kite: error: option %s needs a value (see kite quantize --help)\n", opt);
                return 2;
            }
            const char *v = argv[++i];
            if (!strcmp(opt, "--type")) { p.type = v; have_type = true; }
            else if (!strcmp(opt, "--imatrix")) p.imatrix_path = v;
            else if (!strcmp(opt, "--tokenizer")) p.tokenizer_path = v;
            else {
                char *end;
                long n = strtol(v, &end, 10);
                if (*end || end == v || n < 1 || n > 1024) {
                    fprintf(stderr, "kite: error: --threads needs a number from 1 to 1024, got '%s'\n", v);
                    return 2;
                }
                p.n_threads = (int32_t)n;
            }
            continue;
        }
        if (n_paths == 2) {
            fprintf(stderr, "kite: error: unexpected argument '%s' (kite quantize takes IN and OUT)\n", opt);
            return 2;
        }
        paths[n_paths++] = opt;
    }
    if (n_paths != 2 || !have_type) {
        fprintf(stderr, "kite: error: kite quantize needs IN, OUT and --type TYPE\n\n");
        print_usage(stderr);
        return 2;
    }
    p.progress = show_progress;
    p.progress_user_data = &quiet;
    struct sigaction sa = {0};
    sa.sa_handler = on_sigint;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    char err[1024];
    int st = kite_quantize(paths[0], paths[1], &p, err, sizeof err);
    if (st) {
        fprintf(stderr, "kite: error: %s\n", err);
        return 1;
    }
    if (!quiet) fprintf(stderr, "kite: wrote %s\n", paths[1]);
    return 0;
}
