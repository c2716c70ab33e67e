/* The random-model generator's value stream, shared with its tests: what a tensor held before it was
 * quantized is a pure function of (seed, tensor name, row), so a test can check a written file
 * against it without keeping the floats. */
#ifndef KITE_ENGINE_RANDOM_MODEL_H
#define KITE_ENGINE_RANDOM_MODEL_H

#include <stdint.h>

#include "base/error.h"
#include "kite.h"

/* kite_write_random_model's "eagle3" shape: a random EAGLE-3 head fitting params->target_path. */
int kite_write_random_eagle3(const char *path, const kite_random_model_params *params, kite_error *e);
/* shape "dflash[-bN][-causal]": a DFlash drafter fitting params->target_path (random_drafter.c). */
int kite_write_random_dflash(const char *path, const kite_random_model_params *params, kite_error *e);

/* Standard deviation of every random weight matrix (embeddings, projections, output). */
#define KITE_RANDOM_WEIGHT_STD 0.02f

/* Fills out[0..n) with row `row` of tensor `name` as kite_write_random_model draws it before
 * quantization: 1.0 for norm weights (names ending in "norm.weight"), otherwise a sum of four
 * uniforms (mean 0, standard deviation KITE_RANDOM_WEIGHT_STD, bounded by 3.47 of them) from a
 * counter-based stream keyed by (seed, name, row). */
void kite_random_model_row(uint64_t seed, const char *name, int64_t row, float *out, int64_t n);

/* Test-only variations of a written model (the library's internal API; the oracle tests use them). A
 * negative control is the same model with one feature defeated: kite must then disagree with an independent
 * engine by far more than the comparison's bound. */
typedef enum kite_random_defect {
    KITE_RANDOM_DEFECT_NONE = 0,
    KITE_RANDOM_DEFECT_UNIT_QK_NORM, /* attn_q_norm / attn_k_norm weights all one (QK-norm weights ignored); needs norm_std */
    KITE_RANDOM_DEFECT_CONV_REVERSED, /* lfm2: every channel's conv taps in reverse order (newest tap on the oldest position) */
    KITE_RANDOM_DEFECT_NO_ROPE_SCALING, /* llama: rope_freqs.weight left out (config.json rope_scaling null): Llama-3 scaling ignored */
    KITE_RANDOM_DEFECT_ZERO_QKV_BIAS, /* qwen2: the q/k/v biases all zero (as if they were dropped) */
    KITE_RANDOM_DEFECT_WIDE_WINDOW, /* sliding-window families: a window of 4096 (the window ignored, the pattern intact) */
    KITE_RANDOM_DEFECT_MOE_UNNORMALISED, /* qwen3moe, the HF folder only: norm_topk_prob false (top-k weights not divided by
                                            their sum, which llama.cpp always does for qwen3moe; a GGUF cannot say it) */
    KITE_RANDOM_DEFECT_NO_OUTPUT_GATE, /* qwen35: the gate rows of attn_q zero (sigmoid 1/2 everywhere: no gating) */
    KITE_RANDOM_DEFECT_BETA_IGNORED, /* qwen35: ssm_beta zero (beta 1/2 for every token and head) */
    KITE_RANDOM_DEFECT_DECAY_IGNORED, /* qwen35: ssm_a zero (g = 0: the DeltaNet state never decays; A_log -inf in the folder) */
    KITE_RANDOM_DEFECT_NO_ATTN_GATE, /* muse-glimmer: attn_gate zero (sigmoid 1/2 everywhere: after the post-norm, no gate) */
    KITE_RANDOM_DEFECT_NO_SOFTCAP, /* muse-glimmer, gemma4: final_logit_softcapping left out */
    KITE_RANDOM_DEFECT_NO_PROPORTIONAL_ROPE, /* gemma4: rope_freqs.weight left out (global layers rotate every pair) */
    KITE_RANDOM_DEFECT_NO_LAYER_SCALAR, /* gemma4: layer_output_scale.weight left out (the layer scalars ignored) */
} kite_random_defect;

typedef struct kite_random_model_extras {
    float norm_std;            /* > 0: norm weights are 1 + the stream scaled to this deviation (bounded by 3.47 of them)
                                  instead of 1, so that a norm weight that is ignored shows */
    float qk_norm_mean, qk_norm_std; /* with norm_std, > 0: attn_q_norm / attn_k_norm drawn around this mean with this
                                        deviation instead (a gain far from 1 makes ignoring them show in every score) */
    kite_random_defect defect; /* written into the GGUF and the HF folder alike */
} kite_random_model_extras;

/* kite_write_random_model with extras (NULL: none). */
int kite_write_random_model_ex(const char *path, const kite_random_model_params *params, const kite_random_model_extras *extras,
                               char *err, size_t err_size);

#endif
