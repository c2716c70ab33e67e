/* Fuzz target: the tokenizer readers of the random-model writer (src/engine/random_model.c), which
 * copy a llama2.c tokenizer .bin or a tokenizer.json (byte-level or SentencePiece-style BPE) into GGUF metadata. The first
 * byte picks the reader; the rest is the file. A vocabulary that loads is then padded, as the writer
 * pads it to a shape's vocabulary. The .c is included to reach its static readers. */
#include "../../src/engine/random_model.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const unsigned char *body = data + 1;
    size_t n = size - 1;
    vocab v;
    memset(&v, 0, sizeof v);
    v.bos = v.eos = v.unk = v.pad = -1;
    v.add_space_prefix = -1;
    kite_error e = {0};
    int st = (data[0] & 1) ? vocab_from_hf_json(&v, "fuzz.json", (const char *)body, n, NULL, (data[0] & 2) ? "qwen3" : "llama", &e)
                           : vocab_from_llama2c(&v, "fuzz.bin", body, n, &e);
    if (st == KITE_OK) {
        if (v.n <= 0 || (v.bos >= v.n) || (v.eos >= v.n)) __builtin_trap();
        if (vocab_pad(&v, v.n + 5, &e) == KITE_OK)
            for (int32_t i = 0; i < v.n; i++)
                if (!v.tokens[i]) __builtin_trap();
    }
    vocab_free(&v);
    return 0;
}
