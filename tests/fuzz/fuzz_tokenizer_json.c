/* Fuzz target: HF tokenizer.json parsing (kite's JSON reader, normalizer / pre-tokenizer / model checks,
 * PCRE2 patterns from the file), then tokenizing with whatever loaded. */
#include "fuzz_tok_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kite_tokenizer *t = NULL;
    kite_error e = {0};
    if (kite_tokenizer_from_hf_json(&t, (const char *)data, size, NULL, 0, &e) == KITE_OK) {
        fuzz_exercise_tokenizer(t, data, size);
        kite_tokenizer_free(t);
    }
    return 0;
}
