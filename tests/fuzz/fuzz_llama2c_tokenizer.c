/* Fuzz target: llama2.c tokenizer .bin (all entries to the end of the input, and a fixed count), then
 * tokenizing with whatever loaded. */
#include "fuzz_tok_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    for (int pass = 0; pass < 2; pass++) {
        kite_tokenizer *t = NULL;
        kite_error e = {0};
        if (kite_tokenizer_from_llama2c(&t, data, size, pass ? 300 : 0, &e) == KITE_OK) {
            fuzz_exercise_tokenizer(t, data, size);
            kite_tokenizer_free(t);
        }
    }
    return 0;
}
