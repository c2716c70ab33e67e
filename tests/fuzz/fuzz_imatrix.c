/* Fuzzes the imatrix reader (both of llama.cpp's forms: GGUF and legacy .dat). Parsing must never crash,
 * hang or read out of bounds; a matrix that parses has consistent shapes whose means can be taken, and
 * every entry can be found by its name. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "quant/imatrix_parse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kite_imatrix m;
    kite_error e = {0};
    if (kite_imatrix_parse(&m, data, size, "fuzz", &e) == KITE_OK) {
        for (int64_t i = 0; i < m.n_entries; i++) {
            const kite_imatrix_entry *en = &m.entries[i];
            if (en->n_cols < 1 || en->n_mat < 1 || !en->name) abort();
            if (kite_imatrix_find(&m, en->name) != en) abort(); /* names are unique */
            float *means = malloc((size_t)(en->n_cols * en->n_mat) * sizeof *means);
            if (!means) break;
            kite_imatrix_means(en, means);
            free(means);
        }
        for (int32_t i = 0; i < m.n_datasets; i++)
            if (!m.datasets[i]) abort();
    } else if (!e.msg[0] || strchr(e.msg, '\n')) {
        abort(); /* a failure always says why, on one line */
    }
    kite_imatrix_clear(&m);
    return 0;
}
