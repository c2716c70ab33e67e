/* Shared pieces of the learned drafters (head.h). */
#include "spec/head.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/mmap.h"
#include "quant/types.h"

int kite_head_find(const kite_head_file *f, const char *name, int64_t cols, int64_t rows, bool required,
                   const kite_gguf_tensor **out, kite_error *e) {
    const kite_gguf_tensor *t = kite_gguf_find_tensor(f->g, name);
    *out = t;
    if (!t) return required ? kite_fail(e, KITE_ERR_FORMAT, "%s: tensor %s is missing", f->what, name) : KITE_OK;
    const kite_type_traits *tr = kite_type_get(t->type);
    if (!tr || !tr->to_float) return kite_fail(e, KITE_ERR_UNSUPPORTED, "%s: tensor %s has a type kite cannot read", f->what, name);
    if (t->ne[0] != cols || (rows > 0 && t->ne[1] != rows) || t->ne[2] != 1 || t->ne[3] != 1 || (rows == 1 && t->n_dims != 1))
        return kite_fail(e, KITE_ERR_FORMAT, "%s: tensor %s is [%lld, %lld], expected [%lld, %lld]", f->what, name,
                         (long long)t->ne[0], (long long)t->ne[1], (long long)cols, (long long)rows);
    return KITE_OK;
}

kite_tensor kite_head_as_tensor(const kite_gguf_tensor *t) {
    kite_tensor k;
    memset(&k, 0, sizeof k);
    snprintf(k.name, sizeof k.name, "%.*s", (int)t->name.len, t->name.ptr);
    k.type = t->type;
    k.n_dims = t->n_dims;
    memcpy(k.ne, t->ne, sizeof k.ne);
    k.n_bytes = t->n_bytes;
    k.data = t->data;
    return k;
}

int kite_head_load_matrix(const kite_head_file *f, const char *name, int64_t cols, int64_t rows, kite_packed_matrix *m,
                          kite_error *e) {
    const kite_gguf_tensor *t;
    int st = kite_head_find(f, name, cols, rows, true, &t, e);
    if (st) return st;
    kite_tensor k = kite_head_as_tensor(t);
    return f->ks->pack(&k, f->arena && f->arena->base ? f->arena : NULL, m, e);
}

int kite_head_load_vector(const kite_head_file *f, const char *name, int64_t n, float **out, kite_error *e) {
    const kite_gguf_tensor *t;
    int st = kite_head_find(f, name, n, 1, true, &t, e);
    if (st) return st;
    *out = malloc(sizeof(float) * (size_t)n);
    if (!*out) return kite_fail(e, KITE_ERR_NOMEM, "%s: out of memory", f->what);
    kite_type_get(t->type)->to_float(t->data, *out, n);
    return KITE_OK;
}

int kite_head_arena_init(const kite_head_file *f, const char *const *names, size_t n_names, kite_weight_arena *arena,
                         kite_error *e) {
    size_t total = 0;
    for (size_t i = 0; i < n_names; i++) {
        const kite_gguf_tensor *t = kite_gguf_find_tensor(f->g, names[i]);
        if (!t || !kite_type_get(t->type)) continue;
        kite_tensor k = kite_head_as_tensor(t);
        size_t b = (f->ks->pack_bytes(&k) + 63) / 64 * 64;
        if (b > ((size_t)1 << 40)) continue;
        total += b;
    }
    return total ? kite_weight_arena_init(arena, total, e) : KITE_OK;
}

bool kite_head_file_has_arch(const char *path, const char *arch) {
    kite_mapped_file f;
    kite_error e = {0};
    if (kite_map_file(&f, path, &e)) return false;
    bool yes = false;
    kite_gguf *g = NULL;
    if (f.size >= 4 && memcmp(f.data, "GGUF", 4) == 0 && !kite_gguf_open(&g, f.data, f.size, &e)) {
        kite_gguf_str a;
        const size_t n = strlen(arch);
        yes = kite_gguf_get_str(g, "general.architecture", &a) && a.len == n && memcmp(a.ptr, arch, n) == 0;
        kite_gguf_free(g);
    }
    kite_unmap_file(&f);
    return yes;
}

bool kite_head_get_u32(const kite_gguf *g, const char *arch, const char *suffix, uint32_t *v) {
    char key[96];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return kite_gguf_get_u32(g, key, v);
}

int kite_head_load_embd_output(const kite_head_file *f, const char *path, int64_t dim, kite_tensor *tok_embd, bool *has_embd,
                               kite_packed_matrix *output, bool *has_output, kite_error *e) {
    const kite_gguf_tensor *t;
    int st;
    if ((st = kite_head_find(f, "token_embd.weight", dim, 0, false, &t, e))) return st;
    if (t) *tok_embd = kite_head_as_tensor(t), *has_embd = true;
    if ((st = kite_head_find(f, "output.weight", dim, 0, false, &t, e))) return st;
    if (t) {
        kite_tensor k = kite_head_as_tensor(t);
        if ((st = f->ks->pack(&k, f->arena && f->arena->base ? f->arena : NULL, output, e))) return st;
        *has_output = true;
    }
    if (*has_embd && *has_output && tok_embd->ne[1] != output->rows)
        return kite_fail(e, KITE_ERR_FORMAT, "%s %s: its embedding has %lld tokens, its output %lld", f->what, path,
                         (long long)tok_embd->ne[1], (long long)output->rows);
    return KITE_OK;
}

int kite_head_inv_freq(float theta, uint32_t head_dim, float **out, kite_error *e) {
    *out = malloc(sizeof(float) * (head_dim / 2 > 0 ? head_dim / 2 : 1));
    if (!*out) return kite_fail(e, KITE_ERR_NOMEM, "out of memory");
    for (uint32_t i = 0; i < head_dim / 2; i++) (*out)[i] = powf(theta, -2.0f * (float)i / (float)head_dim);
    return KITE_OK;
}

size_t kite_head_act_bytes(const kite_kernel_set *ks, const kite_packed_matrix *const *w, size_t n_w, int32_t n) {
    size_t most = 0;
    for (size_t i = 0; i < n_w; i++) {
        size_t b = ks->act_bytes(w[i]->type, w[i]->cols, n);
        if (b > most) most = b;
    }
    return most;
}

typedef struct mm_job {
    const kite_kernel_set *ks;
    const kite_packed_matrix *w;
    const void *act;
    const float *x;
    int32_t n;
    float *y;
} mm_job;

static void mm_task(void *ctx, int64_t task, int thread) {
    (void)thread;
    const mm_job *j = ctx;
    int64_t r0 = task * j->ks->row_block, r1 = r0 + j->ks->row_block;
    if (r1 > j->w->rows) r1 = j->w->rows;
    j->ks->matmul(j->w, j->act, j->x, j->n, j->y, j->w->rows, r0, r1);
}

void kite_head_mm(const kite_kernel_set *ks, void *act, kite_pool *pool, const kite_packed_matrix *w, const float *x, int32_t n,
                  float *y) {
    const void *a = NULL;
    if (ks->act_bytes(w->type, w->cols, n)) {
        ks->quantize_act(w->type, x, w->cols, 0, n, act);
        a = act;
    }
    mm_job j = {ks, w, a, x, n, y};
    int64_t tasks = (w->rows + ks->row_block - 1) / ks->row_block;
    if (pool && kite_pool_threads(pool) > 1 && tasks > 1 && w->rows * w->cols * n >= ((int64_t)1 << 18))
        kite_pool_run(pool, mm_task, &j, tasks);
    else
        for (int64_t t = 0; t < tasks; t++) mm_task(&j, t, 0);
}

void kite_head_rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps) {
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float scale = (float)(1.0 / sqrt(ss / (double)n + (double)eps));
    for (int64_t i = 0; i < n; i++) out[i] = x[i] * scale * w[i];
}

void kite_head_rope(float *v, int32_t head_dim, const float *inv_freq, int32_t pos, bool neox) {
    const int32_t half = head_dim / 2;
    for (int32_t i = 0; i < half; i++) {
        float a = (float)pos * inv_freq[i], c = cosf(a), s = sinf(a);
        int32_t i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
        float x0 = v[i0], x1 = v[i1];
        v[i0] = x0 * c - x1 * s;
        v[i1] = x0 * s + x1 * c;
    }
}
