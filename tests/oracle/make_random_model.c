/* Writes one of the oracle's random-weight models as GGUF and/or a Hugging Face folder.
 *   make_random_model ARCH TOKENIZER_DIR OUT.gguf [HF_DIR] [--seed N]
 * ARCH: llama (Llama-3 with RoPE scaling), qwen2 (q/k/v biases) or qwen3 (QK-norm). TOKENIZER_DIR holds
 * the tokenizer.json whose vocabulary the model uses (e.g. ../shared/models/tokenizers/llama3).
 * OUT.gguf may be "-" to skip the GGUF; HF_DIR is created if missing. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "random_model.h"

int main(int argc, char **argv) {
    const char *positional[4] = {0};
    int n_pos = 0;
    oracle_spec spec;
    uint64_t seed = 0;
    bool have_seed = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
            char *end;
            seed = strtoull(argv[++i], &end, 0);
            if (*end) { fprintf(stderr, "make_random_model: bad --seed '%s'\n", argv[i]); return 2; }
            have_seed = true;
        } else if (n_pos < 4) {
            positional[n_pos++] = argv[i];
        } else {
            n_pos = 5;
        }
    }
    if (n_pos < 3 || n_pos > 4 || !oracle_default_spec(positional[0], &spec)) {
        fprintf(stderr, "usage: make_random_model llama|qwen2|qwen3 TOKENIZER_DIR OUT.gguf|- [HF_DIR] [--seed N]\n");
        return 2;
    }
    if (have_seed) spec.seed = seed;
    const char *gguf = strcmp(positional[2], "-") == 0 ? NULL : positional[2];
    const char *hf = positional[3];
    if (hf && mkdir(hf, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "make_random_model: cannot create %s: %s\n", hf, strerror(errno));
        return 1;
    }
    char err[1024];
    oracle_vocab *vocab = NULL;
    if (oracle_vocab_load(&vocab, &spec, positional[1], err, sizeof err) ||
        oracle_write_model(&spec, vocab, positional[1], gguf, hf, err, sizeof err)) {
        fprintf(stderr, "make_random_model: %s\n", err);
        oracle_vocab_free(vocab);
        return 1;
    }
    oracle_vocab_free(vocab);
    return 0;
}
