/* kite's sampling defaults (the values llama.cpp ships, except the seed, which is fixed so that a run
 * without an explicit seed is still reproducible). */
#include "kite.h"

/* Default seed: a fixed, recognisable constant. Callers wanting fresh randomness pass their own. */
#define KITE_DEFAULT_SEED 0xC0FFEEull

kite_gen_params kite_gen_default_params(void) {
    return (kite_gen_params){
        .max_tokens = 256,
        .temperature = 0.8f,
        .top_k = 40,
        .top_p = 0.95f,
        .min_p = 0.05f,
        .repeat_penalty = 1.0f,
        .penalty_last_n = 64,
        .presence_penalty = 0.0f,
        .frequency_penalty = 0.0f,
        .seed = KITE_DEFAULT_SEED,
        .logit_bias = NULL,
        .n_logit_bias = 0,
        .ignore_eos = false,
    };
}
