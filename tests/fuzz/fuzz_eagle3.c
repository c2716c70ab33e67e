/* libFuzzer target for the EAGLE-3 head loader (spec/eagle3.c) over GGUF images: metadata, the target
 * layer list, every tensor's shape and type, packing. On success the head is checked against a
 * target of its own declared width (the paths that compare layers and vocabulary) and freed. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "spec/eagle3.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kite_eagle3 *h = NULL;
    kite_error e = {0};
    if (kite_eagle3_open_bytes(&h, data, size, &e) != KITE_OK) return 0;
    kite_weights w;
    memset(&w, 0, sizeof w);
    w.hp.dim = 32, w.hp.n_layers = 2, w.hp.n_vocab = kite_eagle3_n_vocab(h);
    (void)kite_eagle3_check_target(h, &w, &e);
    (void)kite_eagle3_target_layers(h);
    kite_eagle3_free(h);
    return 0;
}
