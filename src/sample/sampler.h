/* Sampling: logit processors, then Gumbel-max with counter-based noise.
 * The chosen token is a pure function of (processed logits, seed, position):
 *   T > 0: argmax_t logits'[t] / T + G(seed, position, t),  G = -log(-log U), U from Philox4x32-10
 *          keyed by the seed with counter (position, t); ties go to the lowest id.
 *   T = 0: argmax_t logits'[t] (greedy), ties to the lowest id.
 * logits' = logits after, in order: logit bias, repetition/presence/frequency penalties over the
 * history window, then masks (-inf) from top-k, top-p and min-p (computed on softmax of the logits
 * before temperature, in the order llama.cpp applies them: top-k, top-p, min-p, then temperature).
 * Because the noise depends only on (seed, position, token), speculative decoding can re-create the
 * exact draws of plain decoding (see shared docs/SPECULATIVE.md). */
#ifndef KITE_SAMPLE_SAMPLER_H
#define KITE_SAMPLE_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "kite.h"

/* Philox4x32-10: counter (4 x u32) and key (2 x u32) to 4 x u32. */
void kite_philox4x32_10(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]);

/* U in [2^-24, 1 - 2^-24] for (seed, position, token): 24 bits of Philox output, clamped away from 0 and 1. */
float kite_uniform(uint64_t seed, int64_t position, int32_t token);
/* -log(-log(kite_uniform(...))) */
float kite_gumbel(uint64_t seed, int64_t position, int32_t token);

/* Validates parameters (temperature >= 0 and finite, top_p in (0,1], min_p in [0,1], top_k >= 0,
 * repeat_penalty > 0, logit-bias ids within n_vocab, ...); a message names the bad field. */
int kite_gen_params_check(const kite_gen_params *p, int32_t n_vocab, char *err, size_t err_size);

/* Applies the processors to logits[n_vocab] in place (masked entries become -INFINITY).
 * history: the tokens before the one being sampled (prompt and generated), oldest first. */
void kite_process_logits(const kite_gen_params *p, float *logits, int32_t n_vocab, const int32_t *history,
                         size_t n_history);

/* Processes logits in place and returns the chosen token for absolute position `position`
 * (the index in the sequence the new token will occupy). */
int32_t kite_sample(const kite_gen_params *p, float *logits, int32_t n_vocab, const int32_t *history,
                    size_t n_history, int64_t position);

#endif
