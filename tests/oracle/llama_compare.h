/* What the comparisons of kite's drafters with llama.cpp's (test_dflash_llamacpp, test_eagle3_llamacpp,
 * test_mtp_llamacpp) share on kite's side and around libllama: the random models written to a temporary
 * folder and loaded in both engines, kite's greedy chain drafted from a prompt and a root, and the
 * difference of two rows of logits. Failures go through cmocka. */
#ifndef KITE_TESTS_ORACLE_LLAMA_COMPARE_H
#define KITE_TESTS_ORACLE_LLAMA_COMPARE_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "llama_api.h"

#include "engine/engine.h"
#include "kite.h"

#ifndef KITE_LLAMA_LIB_DIR
#error "KITE_LLAMA_LIB_DIR must name node-llama-cpp's prebuilt library folder"
#endif

/* Opens libllama from KITE_LLAMA_LIB_DIR into api and makes dir (64 bytes), /tmp/kite-NAME-llamacpp-XXXXXX;
 * non-zero (said on stderr) on failure. */
int compare_open(llama_api *api, const char *name, char *dir);
/* Writes the random model rp to path and opens it in kite (one thread) and in llama.cpp (lmp, no GPU
 * layers); non-zero (said on stderr) on failure. */
int compare_load(const llama_api *api, const char *path, const kite_random_model_params *rp, struct llama_model_params lmp,
                 kite_model **km, struct llama_model **lm);
/* A kite session on target as llama_api_exact_context compares it (256 positions, one thread, f32 KV)
 * drafting as spec, fed prompt[0 .. n). */
kite_session *compare_session(kite_model *target, const kite_spec_params *spec, const int32_t *prompt, int32_t n);
/* s's greedy draft of n from root into t (n + 1 nodes, checked). */
void compare_greedy_draft(kite_session *s, int32_t root, int32_t n, kite_draft_tree *t);
/* t's chain of n drafted tokens (each node the child of the one before, checked) into drafted. */
void compare_chain(const kite_draft_tree *t, int32_t n, int32_t *drafted);
/* max - min of x[0 .. n). */
float compare_spread(const float *x, size_t n);
/* max |a - b| over n, and the spread of b. */
float compare_max_abs_diff(const float *a, const float *b, size_t n, float *spread);

#endif
