/* Fuzz target: SentencePiece ModelProto (.model), then tokenizing with whatever loaded. */
#include "fuzz_tok_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kite_tokenizer *t = NULL;
    kite_error e = {0};
    if (kite_tokenizer_from_spm_model(&t, data, size, &e) == KITE_OK) {
        fuzz_exercise_tokenizer(t, data, size);
        kite_tokenizer_free(t);
    }
    return 0;
}
