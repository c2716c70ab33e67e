/* Fuzzes the llama2.c legacy checkpoint parser: any input must load or fail cleanly, and every view
 * it hands out must lie inside the input. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/source_llama2c.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kite_source src;
    memset(&src, 0, sizeof src);
    kite_error e;
    if (kite_llama2c_parse(&src, data, size, "fuzz", &e) == KITE_OK) {
        volatile uint8_t sink = 0;
        for (int32_t i = 0; i < src.n_tensors; i++) {
            const kite_tensor *t = &src.tensors[i];
            const uint8_t *p = t->data;
            if (p < data || p + t->n_bytes > data + size) abort();
            sink ^= p[t->n_bytes - 1];
        }
        (void)sink;
    }
    kite_source_close(&src);
    return 0;
}
