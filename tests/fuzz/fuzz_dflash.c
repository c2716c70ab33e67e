/* libFuzzer target for the DFlash drafter loader (spec/dflash.c) over GGUF images: metadata (shape,
 * block size, target layer list, mask token, DFlash-2 selector and convolution keys, the refused
 * variants), every tensor's shape and type,
 * packing. On success the drafter is checked against a target of its own declared width (the paths
 * that compare layers, vocabulary and the mask token), run once over a short block, and freed. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "spec/dflash.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kite_dflash *h = NULL;
    kite_error e = {0};
    if (kite_dflash_open_bytes(&h, data, size, &e) != KITE_OK) return 0;
    kite_weights w;
    memset(&w, 0, sizeof w);
    w.hp.dim = kite_dflash_dim(h), w.hp.n_layers = 2, w.hp.n_vocab = kite_dflash_n_vocab(h);
    int32_t n = 0;
    (void)kite_dflash_target_layers(h, &n);
    /* A drafter with its own embedding and output runs without a target's tensors. */
    if (kite_dflash_check_target(h, &w, &e) == KITE_OK && w.hp.n_vocab > 0 && kite_dflash_dim(h) <= 256) {
        kite_dflash_run *r = NULL;
        if (kite_dflash_run_new(&r, h, &w, 8, &e) == KITE_OK) {
            (void)kite_dflash_block_ms(r, NULL, 3);
            kite_dflash_run_free(r);
        }
    }
    kite_dflash_free(h);
    return 0;
}
