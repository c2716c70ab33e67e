/* EAGLE-3 draft heads (GGUF architecture "eagle3", as llama.cpp's converter writes them): one decoder
 * layer over the target's token embedding and a fusion (fc) of the inputs of three target layers,
 * drafting token by token with a small KV cache of its own.
 *
 * The input convention (llama.cpp's common_speculative_impl_draft_eagle3): the head's row at position p
 * takes the pair (token x[p+1], g[p]) with RoPE at p, where g[p] = fc(target features of position p),
 * and predicts x[p+2]. Rows of committed positions use the target's features; a drafted node deeper
 * than the first takes the pre-norm hidden state of its parent's row instead of g (the target has not
 * run it yet), so those rows are dropped after the pass and rebuilt from the verified features. */
#ifndef KITE_SPEC_EAGLE3_H
#define KITE_SPEC_EAGLE3_H

#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"
#include "base/threadpool.h"
#include "kernels/kernels.h"
#include "model/tensors.h"

struct kite_weights;
struct kite_session;
struct kite_spec_state;
struct kite_draft_tree;
struct kite_gen_params;

enum { KITE_EAGLE3_N_FEATURES = 3 }; /* target layers whose inputs the head fuses */

typedef struct kite_eagle3 kite_eagle3;

/* Whether the GGUF file at path has general.architecture "eagle3" (false for anything unreadable). */
bool kite_eagle3_file_is_head(const char *path);
/* Maps, validates (every tensor's shape against the metadata, a truncated file is a format error) and
 * packs the head for kite_kernels(). */
int kite_eagle3_open(kite_eagle3 **out, const char *path, kite_error *e);
/* The same over a GGUF image in memory (which must outlive the head): the fuzz target's entry. */
int kite_eagle3_open_bytes(kite_eagle3 **out, const void *data, size_t size, kite_error *e);
void kite_eagle3_free(kite_eagle3 *h);
/* The head's vocabulary (its own embedding's or output's rows; 0 when it borrows both from the target). */
int32_t kite_eagle3_n_vocab(const kite_eagle3 *h);
int32_t kite_eagle3_dim(const kite_eagle3 *h);
/* Refuses (KITE_ERR_INVALID_ARG, naming the mismatch) a head that does not fit the target: target
 * hidden size, layer ids in [0, n_layers] and increasing, vocabulary, missing output or embedding. */
int kite_eagle3_check_target(const kite_eagle3 *h, const struct kite_weights *target, kite_error *e);
/* The target layers the head reads (KITE_EAGLE3_N_FEATURES of them). */
const int32_t *kite_eagle3_target_layers(const kite_eagle3 *h);

/* A session's drafting state: the head's KV cache and scratch. */
typedef struct kite_eagle3_run kite_eagle3_run;
int kite_eagle3_run_new(kite_eagle3_run **out, const kite_eagle3 *h, const struct kite_weights *target, int32_t n_ctx,
                        kite_error *e);
void kite_eagle3_run_free(kite_eagle3_run *r);

/* The EAGLE-3 drafter (spec.c calls it for KITE_DRAFT_EAGLE3): brings the head's cache up to the
 * session's committed context from its feature rows, runs the root's row, and grows the tree under
 * budget by top-C expansion (kite_spec_grow_tree), running each round's new nodes in one batch. */
int kite_eagle3_draft(struct kite_spec_state *st, struct kite_session *s, int32_t root, int32_t budget,
                      const struct kite_gen_params *gp, struct kite_draft_tree *t, kite_error *e);
/* Milliseconds of one head row with its output layer (the drafting cost before any is measured). */
double kite_eagle3_one_step_ms(kite_eagle3_run *r, kite_pool *pool);

/* Forgets the head's cache (the next draft rebuilds it from the feature rows). */
void kite_eagle3_run_reset(kite_eagle3_run *r);

#endif
