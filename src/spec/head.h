/* Pieces the learned drafters (EAGLE-3 heads, spec/eagle3.c; DFlash block drafters, spec/dflash.c)
 * share: reading their GGUF tensors with shape checks, packing them for kite_kernels(), and the few
 * row operations of their small forward passes (matrix products over a pool, RMSNorm, RoPE). */
#ifndef KITE_SPEC_HEAD_H
#define KITE_SPEC_HEAD_H

#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"
#include "base/threadpool.h"
#include "io/gguf.h"
#include "kernels/kernels.h"
#include "model/tensors.h"

/* A drafter file being loaded: what names it in messages ("EAGLE-3 head", "DFlash drafter"). */
typedef struct kite_head_file {
    const char *what;
    const kite_gguf *g;
    const kite_kernel_set *ks;
    kite_weight_arena *arena; /* packed matrices go here while it has room (may be unset: base NULL) */
} kite_head_file;

/* The tensor `name` if it is [cols, rows] (rows 0: any; rows 1: a vector) of a type kite reads; a
 * missing tensor is an error only when required (*out = NULL otherwise). */
int kite_head_find(const kite_head_file *f, const char *name, int64_t cols, int64_t rows, bool required,
                   const kite_gguf_tensor **out, kite_error *e);
kite_tensor kite_head_as_tensor(const kite_gguf_tensor *t);
/* Packs the required matrix `name` [cols, rows]. */
int kite_head_load_matrix(const kite_head_file *f, const char *name, int64_t cols, int64_t rows, kite_packed_matrix *m,
                          kite_error *e);
/* The required vector `name` [n] as floats (*out is the caller's, free()). */
int kite_head_load_vector(const kite_head_file *f, const char *name, int64_t n, float **out, kite_error *e);
/* Sizes one arena for the named matrices that exist (packing falls back to allocations past it). */
int kite_head_arena_init(const kite_head_file *f, const char *const *names, size_t n_names, kite_weight_arena *arena,
                         kite_error *e);

/* Whether the file at path is a GGUF whose general.architecture is arch (false when it cannot be read). */
bool kite_head_file_has_arch(const char *path, const char *arch);
/* The u32 key "ARCH.suffix". */
bool kite_head_get_u32(const kite_gguf *g, const char *arch, const char *suffix, uint32_t *v);
/* The optional token_embd.weight [dim, *] (a view of the file) and output.weight [dim, *] (packed), each
 * flagged when present; both present must cover the same vocabulary. path names the file in messages. */
int kite_head_load_embd_output(const kite_head_file *f, const char *path, int64_t dim, kite_tensor *tok_embd, bool *has_embd,
                               kite_packed_matrix *output, bool *has_output, kite_error *e);
/* RoPE's inverse frequencies theta^(-2i / head_dim), i < head_dim / 2 (*out is the caller's, free()). */
int kite_head_inv_freq(float theta, uint32_t head_dim, float **out, kite_error *e);

/* Activation scratch for kite_head_mm: act_bytes for n rows against each matrix given. */
size_t kite_head_act_bytes(const kite_kernel_set *ks, const kite_packed_matrix *const *w, size_t n_w, int32_t n);
/* y[n][w.rows] = x[n][w.cols] W^T, split over the pool by row blocks when it is worth it. act: scratch
 * of kite_head_act_bytes for n rows. */
void kite_head_mm(const kite_kernel_set *ks, void *act, kite_pool *pool, const kite_packed_matrix *w, const float *x, int32_t n,
                  float *y);
/* out[i] = x[i] * w[i] / rms(x) (double accumulation; out may be x). */
void kite_head_rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps);
/* Rotates one head by RoPE at pos: llama.cpp's "norm" layout (pairs 2i, 2i+1) or NeoX (pairs i,
 * i + head_dim / 2). inv_freq: [head_dim / 2]. */
void kite_head_rope(float *v, int32_t head_dim, const float *inv_freq, int32_t pos, bool neox);

#endif
