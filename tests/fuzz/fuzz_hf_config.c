/* Fuzzes config.json and generation_config.json parsing and the HF tensor-name translation. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/hf_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kite_hparams hp;
    int32_t bos, eos;
    kite_error e;
    if (kite_hf_parse_config((const char *)data, size, "config.json", &hp, &bos, &eos, &e) == KITE_OK) {
        /* what the parser promises about accepted configs */
        if (hp.dim < 1 || hp.n_layers < 1 || hp.n_heads < 1 || hp.n_kv_heads < 1 || hp.n_heads % hp.n_kv_heads != 0 ||
            hp.head_dim < 2 || hp.head_dim % 2 != 0 || hp.n_vocab < 1 || !(hp.rms_eps > 0) || !(hp.rope_theta > 0) ||
            bos >= hp.n_vocab || eos >= hp.n_vocab)
            abort();
        /* Gemma 3's: a positive window and finite scales */
        if (hp.arch == KITE_ARCH_GEMMA3 &&
            (hp.sliding_window < 1 || hp.swa_period < 0 || !(hp.attn_scale > 0) || !(hp.rope_theta_local > 0) ||
             !(hp.final_logit_softcap >= 0) || !(hp.embd_scale > 0)))
            abort();
        /* LFM2's: 2..16 taps, conv layers only among the model's layers, a positive FFN width */
        if (hp.arch == KITE_ARCH_LFM2 && (hp.conv_taps < 2 || hp.conv_taps > 16 || hp.ffn_dim < 1 || hp.n_layers > KITE_MAX_CONV_LAYERS))
            abort();
        for (int32_t l = hp.n_layers; l < KITE_MAX_CONV_LAYERS; l++)
            if (kite_layer_is_conv(&hp, l)) abort();
        /* Gemma 4's and Muse Glimmer's: a window, a pattern for every layer, local heads that divide the heads,
         * rotated dimensions within the local head */
        if ((hp.arch == KITE_ARCH_GEMMA4 || hp.arch == KITE_ARCH_MUSE_GLIMMER) &&
            (hp.sliding_window < 1 || !hp.local_by_layer || hp.n_layers > KITE_MAX_LAYER_PATTERN ||
             (hp.n_kv_heads_local && hp.n_heads % hp.n_kv_heads_local) || hp.rope_dim_local % 2 ||
             hp.rope_dim_local > (hp.head_dim_local ? hp.head_dim_local : hp.head_dim) || !(hp.final_logit_softcap >= 0)))
            abort();
    }
    kite_gen_params p = {.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .repeat_penalty = 1.0f};
    if (kite_hf_parse_generation_config((const char *)data, size, "generation_config.json", &p, &bos, &eos, &e) ==
        KITE_OK) {
        if (!(p.temperature >= 0) || p.top_k < 0 || !(p.top_p > 0 && p.top_p <= 1) || !(p.repeat_penalty > 0)) abort();
    }
    /* the same bytes as a tensor name */
    char name[256];
    size_t n = size < sizeof name - 1 ? size : sizeof name - 1;
    memcpy(name, data, n);
    name[n] = 0;
    char out[96];
    kite_hf_canonical_name(name, 64, out, sizeof out);
    kite_hf_canonical_name_arch(KITE_ARCH_GEMMA3, name, 64, out, sizeof out);
    kite_hf_canonical_name_arch(KITE_ARCH_LFM2, name, 64, out, sizeof out);
    kite_hf_canonical_name_arch(KITE_ARCH_GEMMA4, name, 64, out, sizeof out);
    kite_hf_canonical_name_arch(KITE_ARCH_MUSE_GLIMMER, name, 64, out, sizeof out);
    return 0;
}
