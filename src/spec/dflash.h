/* DFlash block drafters (GGUF architecture "dflash", as llama.cpp's converter writes them): a few
 * decoder layers (Qwen3-style: q/k norms, NeoX RoPE, SwiGLU) that draft a whole block in one pass.
 *
 * The convention (llama.cpp's common_speculative_impl_draft_dflash and src/models/dflash.cpp): the
 * inputs of the target layers dflash.target_layers at every committed position p are concatenated,
 * fused by fc and normed (enc.output_norm) into g[p], and each layer's K/V of position p are
 * k_norm(W_k g[p]) (RoPE at p) and W_v g[p], injected into the drafter's cache. A block is the tokens
 * [root, mask x (n - 1)] at positions P .. P + n - 1 (P: the root's position, the committed length),
 * run through the layers with the target's embedding (or the drafter's own), attending to the
 * injected rows and to the whole block (all of it: dflash.attention.causal false, the default; its
 * rows up to itself when true); row i's logits are the draft distribution of the token at P + i,
 * i = 1 .. n - 1, whatever the tokens before it turn out to be.
 * DFlash-2 (dflash.selector_top_k / selector_rank / conv_kernel_size / conv_group_size; tensors
 * blk.N.{attn,ffn}_conv_{base,proj}, selector_{predecessor,successor,hidden}): every block norm's
 * output and sub-layer's output go through a causal gated convolution over the block's rows, and the
 * logits (with dflash.logit_scale and final_logit_softcapping) feed a selector: row i's top_k
 * candidates scored after each of row i - 1's (a lattice). llama.cpp drafts the chain that takes, row
 * by row, the best-scored successor of the previous choice; kite's chain is the same (the lattice row
 * after the node's token is its children's distribution), a tree takes next-best successors, and
 * sampling draws from the lattice rows with the target's Gumbel noise.
 * DSpark (markov_w1 / markov_w2, optionally conf_proj): the children of a node with token t take
 * their row's logits plus markov_w2 (markov_w1[t]); with dflash.sample_from_anchor (the default) the
 * block's row 0 (the root's) already drafts, so a block of n rows drafts n deep; the confidence head
 * sigmoid(conf_proj . [h_row; markov_w1[t]] + b) is computed per node (kite_dflash_last_confidence).
 * DeepSeek-V4 DSpark (hyper-connections), reduced vocabularies (d2t), sliding windows and M-RoPE
 * drafters are refused with a message naming what is missing. */
#ifndef KITE_SPEC_DFLASH_H
#define KITE_SPEC_DFLASH_H

#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"
#include "base/threadpool.h"

struct kite_weights;
struct kite_session;
struct kite_spec_state;
struct kite_draft_tree;
struct kite_gen_params;

enum { KITE_DFLASH_MAX_TARGET_LAYERS = 8 }; /* KITE_MAX_CAPTURE */
enum { KITE_DFLASH_MAX_BLOCK = 64 };        /* block sizes accepted (drafted depth stays <= KITE_MAX_DRAFT) */

typedef struct kite_dflash kite_dflash;

/* Whether the GGUF file at path has general.architecture "dflash" (false for anything unreadable). */
bool kite_dflash_file_is_drafter(const char *path);
/* Maps, validates (metadata, every tensor's shape; a truncated file is a format error) and packs the
 * drafter for kite_kernels(). */
int kite_dflash_open(kite_dflash **out, const char *path, kite_error *e);
/* The same over a GGUF image in memory (which must outlive the drafter): the fuzz target's entry. */
int kite_dflash_open_bytes(kite_dflash **out, const void *data, size_t size, kite_error *e);
void kite_dflash_free(kite_dflash *h);
/* The drafter's vocabulary (its own output's or embedding's rows; 0 when it borrows both). */
int32_t kite_dflash_n_vocab(const kite_dflash *h);
int32_t kite_dflash_dim(const kite_dflash *h);
int32_t kite_dflash_n_layers(const kite_dflash *h);
int32_t kite_dflash_block_size(const kite_dflash *h);
int32_t kite_dflash_mask_token(const kite_dflash *h);
/* DFlash-2's candidates per row (dflash.selector_top_k); 0 for a DFlash drafter without a selector. */
int32_t kite_dflash_selector_top_k(const kite_dflash *h);
/* DSpark's Markov head rank (0: none), whether its row 0 drafts (sample_from_anchor), whether it has a
 * confidence head. */
int32_t kite_dflash_markov_rank(const kite_dflash *h);
bool kite_dflash_from_anchor(const kite_dflash *h);
bool kite_dflash_has_confidence(const kite_dflash *h);
/* Refuses (KITE_ERR_INVALID_ARG, naming the mismatch) a drafter that does not fit the target: target
 * width, layer ids in [0, n_layers], vocabulary, mask token, a missing output or embedding. */
int kite_dflash_check_target(const kite_dflash *h, const struct kite_weights *target, kite_error *e);
/* The target layers whose inputs the drafter fuses (increasing), and how many. */
const int32_t *kite_dflash_target_layers(const kite_dflash *h, int32_t *n);

/* A session's drafting state: the drafter's cache (injected rows, then the block's) and scratch. */
typedef struct kite_dflash_run kite_dflash_run;
int kite_dflash_run_new(kite_dflash_run **out, const kite_dflash *h, const struct kite_weights *target, int32_t n_ctx,
                        kite_error *e);
void kite_dflash_run_free(kite_dflash_run *r);
/* Forgets the injected rows (the next draft injects them again from the feature rows). */
void kite_dflash_run_reset(kite_dflash_run *r);

/* The DFlash drafter (spec.c calls it for KITE_DRAFT_DFLASH): injects the feature rows of the
 * positions not yet in the cache, runs one block of min(block_size, budget + 1) rows, and grows the
 * tree under budget by top-C expansion (kite_spec_grow_tree) over the block's per-depth
 * distributions: a node at depth d takes row d + 1's, so the whole tree costs the one pass. */
int kite_dflash_draft(struct kite_spec_state *st, struct kite_session *s, int32_t root, int32_t budget,
                      const struct kite_gen_params *gp, struct kite_draft_tree *t, kite_error *e);
/* Injects nothing and runs a block of n rows on an empty context: its milliseconds (the drafting
 * cost before any is measured, and the benchmark's block cost). */
double kite_dflash_block_ms(kite_dflash_run *r, kite_pool *pool, int32_t n);
/* The last block's logits (n block rows): row i - 1 for block row i ([n - 1][V]); from the anchor
 * (DSpark), row i for block row i ([n][V]), before the Markov bias. */
const float *kite_dflash_last_logits(const kite_dflash_run *r, int32_t *n_rows);
/* DSpark with a confidence head: per node j of the last drafted tree, the confidence of its children's
 * row (node 0: the root's), as llama.cpp's conf of the chain's next position; NULL without one. */
const float *kite_dflash_last_confidence(const kite_dflash_run *r);
/* DFlash-2: the last block's lattice [n][top_k][top_k] (row i, predecessor p, candidate j; row 0
 * unused, row 1's predecessor the root, every p alike) and candidates *cand [n][top_k]. */
const float *kite_dflash_last_lattice(const kite_dflash_run *r, const int32_t **cand, int32_t *n_rows, int32_t *top_k);

#endif
