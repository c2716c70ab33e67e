/* Fuzzes the safetensors header parser: any input must parse or fail cleanly, and every tensor it
 * accepts must lie inside the input. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kite_safetensors st;
    kite_error e;
    if (kite_safetensors_parse(&st, data, size, "fuzz", &e) != KITE_OK) return 0;
    volatile uint8_t sink = 0;
    for (int64_t i = 0; i < st.n_tensors; i++) {
        const kite_safetensors_tensor *t = &st.tensors[i];
        if (t->offset + t->n_bytes > size || (const uint8_t *)t->data != data + t->offset) abort();
        const uint8_t *p = t->data;
        sink ^= p[0];
        sink ^= p[t->n_bytes - 1];
        if (kite_safetensors_find(&st, t->name) == NULL) abort();
    }
    (void)sink;
    kite_safetensors_free(&st);
    return 0;
}
