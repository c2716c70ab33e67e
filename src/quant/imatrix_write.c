/* Writing importance matrices in llama.cpp's two file formats (kite imatrix).
 *
 * GGUF (what llama-imatrix writes by default): general.type = "imatrix", imatrix.datasets (array of
 * strings), imatrix.chunk_count and imatrix.chunk_size (u32); then, for each weight in name order, the
 * F32 tensors "<name>.in_sum2" of shape [n_cols, n_mat] (the raw sums of squared activations) and
 * "<name>.counts" of shape [1, n_mat] (the activation rows summed into each matrix).
 *
 * Legacy .dat: int32 n_entries; per entry in name order: int32 name length, the name's bytes, int32
 * ncall (the chunks the entry saw, rounded up), int32 n_values, n_values float32 (sum / count * ncall:
 * the mean squared activation scaled by ncall); then int32 chunk_count, int32 length and bytes of the
 * dataset name. An entry whose every count is zero is left out; a matrix with a zero count stores 1s
 * (llama.cpp's rule for partial data). Little-endian (the host's order, as llama.cpp writes it). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/gguf.h"
#include "quant/imatrix.h"
#include "quant/types.h"

/* Entries sorted by name (llama.cpp sorts its names with std::sort, i.e. by bytes). */
static int compare_entry_names(const void *a, const void *b) {
    const kite_imatrix_entry *const *x = a, *const *y = b;
    return strcmp((*x)->name, (*y)->name);
}

static kite_status check_entries(const kite_imatrix *m, kite_error *e) {
    if (m->n_entries < 0 || (m->n_entries > 0 && !m->entries))
        return kite_fail(e, KITE_ERR_INVALID_ARG, "imatrix: %lld entries and entries %s", (long long)m->n_entries,
                         m->entries ? "set" : "NULL");
    if (m->n_datasets < 0 || (m->n_datasets > 0 && !m->datasets))
        return kite_fail(e, KITE_ERR_INVALID_ARG, "imatrix: %d datasets and no names", (int)m->n_datasets);
    for (int64_t i = 0; i < m->n_entries; i++) {
        const kite_imatrix_entry *en = &m->entries[i];
        if (!en->name || !*en->name) return kite_fail(e, KITE_ERR_INVALID_ARG, "imatrix: entry %lld has no name", (long long)i);
        if (en->n_cols <= 0 || en->n_mat <= 0 || en->n_cols > INT32_MAX / en->n_mat || !en->sum_sq || !en->counts)
            return kite_fail(e, KITE_ERR_INVALID_ARG, "imatrix: entry '%s' has %lld columns x %lld matrices (or no data)",
                             en->name, (long long)en->n_cols, (long long)en->n_mat);
        for (int64_t j = 0; j < en->n_mat; j++)
            if (!(en->counts[j] >= 0.0f))
                return kite_fail(e, KITE_ERR_INVALID_ARG, "imatrix: entry '%s' matrix %lld has count %g", en->name,
                                 (long long)j, (double)en->counts[j]);
        for (int64_t j = 0; j < en->n_cols * en->n_mat; j++)
            if (!(en->sum_sq[j] >= 0.0f) || en->sum_sq[j] > 3.4e38f)
                return kite_fail(e, KITE_ERR_INVALID_ARG, "imatrix: entry '%s' value %lld is %g (not a finite sum of squares)",
                                 en->name, (long long)j, (double)en->sum_sq[j]);
    }
    return KITE_OK;
}

static const kite_imatrix_entry **sorted_entries(const kite_imatrix *m, kite_error *e) {
    const kite_imatrix_entry **order = malloc(sizeof *order * (size_t)(m->n_entries ? m->n_entries : 1));
    if (!order) {
        kite_fail(e, KITE_ERR_NOMEM, "imatrix: out of memory");
        return NULL;
    }
    for (int64_t i = 0; i < m->n_entries; i++) order[i] = &m->entries[i];
    qsort(order, (size_t)m->n_entries, sizeof *order, compare_entry_names);
    for (int64_t i = 1; i < m->n_entries; i++)
        if (!strcmp(order[i]->name, order[i - 1]->name)) {
            kite_fail(e, KITE_ERR_INVALID_ARG, "imatrix: two entries are named '%s'", order[i]->name);
            free(order);
            return NULL;
        }
    return order;
}

static kite_status write_gguf(const kite_imatrix *m, const kite_imatrix_entry **order, const char *tmp, kite_error *e) {
    kite_gguf_writer *w = kite_gguf_writer_new();
    if (!w) return kite_fail(e, KITE_ERR_NOMEM, "imatrix: out of memory");
    kite_gguf_w_str(w, "general.type", "imatrix");
    kite_gguf_w_arr_str(w, "imatrix.datasets", (const char *const *)m->datasets, (uint64_t)m->n_datasets);
    kite_gguf_w_u32(w, "imatrix.chunk_count", (uint32_t)(m->chunk_count > 0 ? m->chunk_count : 0));
    kite_gguf_w_u32(w, "imatrix.chunk_size", (uint32_t)(m->chunk_size > 0 ? m->chunk_size : 0));
    kite_status st = KITE_OK;
    for (int64_t i = 0; i < m->n_entries && !st; i++) {
        const kite_imatrix_entry *en = order[i];
        char name[80];
        /* GGUF tensor names are shorter than 64 bytes (llama.cpp's GGML_MAX_NAME). */
        if (strlen(en->name) + strlen(".in_sum2") >= 64) {
            st = kite_fail(e, KITE_ERR_INVALID_ARG, "imatrix: tensor name '%s.in_sum2' is 64 bytes or longer", en->name);
            break;
        }
        snprintf(name, sizeof name, "%s.in_sum2", en->name);
        const int64_t ne_sums[2] = {en->n_cols, en->n_mat};
        kite_gguf_w_tensor(w, name, KITE_TYPE_F32, 2, ne_sums, en->sum_sq, sizeof(float) * (uint64_t)(en->n_cols * en->n_mat));
        snprintf(name, sizeof name, "%s.counts", en->name);
        const int64_t ne_counts[2] = {1, en->n_mat};
        kite_gguf_w_tensor(w, name, KITE_TYPE_F32, 2, ne_counts, en->counts, sizeof(float) * (uint64_t)en->n_mat);
    }
    if (!st) st = kite_gguf_writer_save(w, tmp, e);
    kite_gguf_writer_free(w);
    return st;
}

static bool put_i32(FILE *f, int32_t v) { return fwrite(&v, sizeof v, 1, f) == 1; }

static kite_status write_dat(const kite_imatrix *m, const kite_imatrix_entry **order, const char *tmp, kite_error *e) {
    if (m->chunk_size <= 0)
        return kite_fail(e, KITE_ERR_INVALID_ARG, "imatrix: the legacy format needs a chunk size (got %d)", (int)m->chunk_size);
    int32_t n_stored = 0;
    for (int64_t i = 0; i < m->n_entries; i++) {
        bool any = false;
        for (int64_t j = 0; j < order[i]->n_mat; j++) any |= order[i]->counts[j] > 0.0f;
        n_stored += any;
    }
    FILE *f = fopen(tmp, "wb");
    if (!f) return kite_fail(e, KITE_ERR_IO, "imatrix: cannot create '%s': %s", tmp, strerror(errno));
    bool ok = put_i32(f, n_stored);
    float *scaled = NULL;
    for (int64_t i = 0; ok && i < m->n_entries; i++) {
        const kite_imatrix_entry *en = order[i];
        double max_count = 0.0;
        for (int64_t j = 0; j < en->n_mat; j++)
            if (en->counts[j] > max_count) max_count = en->counts[j];
        if (max_count <= 0.0) continue; /* no data: skipped, as llama.cpp does */
        int64_t n_values = en->n_cols * en->n_mat;
        /* ceil(max count / chunk size): an entry that saw part of a chunk still counts one call. */
        int64_t ncall = ((int64_t)max_count + m->chunk_size - 1) / m->chunk_size;
        float *grown = realloc(scaled, sizeof *scaled * (size_t)n_values);
        if (!grown) {
            ok = false;
            errno = ENOMEM;
            break;
        }
        scaled = grown;
        for (int64_t mat = 0; mat < en->n_mat; mat++) {
            float count = en->counts[mat];
            for (int64_t c = 0; c < en->n_cols; c++) {
                float value = en->sum_sq[mat * en->n_cols + c];
                if (count == 0.0f) value = 1.0f; /* partial data: a neutral 1 (count 1 below) */
                scaled[mat * en->n_cols + c] = value / (count == 0.0f ? 1.0f : count) * (float)ncall;
            }
        }
        int32_t len = (int32_t)strlen(en->name);
        ok = put_i32(f, len) && fwrite(en->name, 1, (size_t)len, f) == (size_t)len && put_i32(f, (int32_t)ncall) &&
             put_i32(f, (int32_t)n_values) && fwrite(scaled, sizeof *scaled, (size_t)n_values, f) == (size_t)n_values;
    }
    free(scaled);
    /* The dataset: the last one named (llama.cpp writes its prompt file, else the last dataset it loaded). */
    const char *dataset = m->n_datasets > 0 && m->datasets[m->n_datasets - 1] ? m->datasets[m->n_datasets - 1] : "";
    int32_t dlen = (int32_t)strlen(dataset);
    ok = ok && put_i32(f, m->chunk_count > 0 ? m->chunk_count : 0) && put_i32(f, dlen) &&
         fwrite(dataset, 1, (size_t)dlen, f) == (size_t)dlen;
    int write_errno = errno;
    if (fclose(f) != 0 && ok) {
        ok = false;
        write_errno = errno;
    }
    if (!ok) {
        remove(tmp);
        return kite_fail(e, write_errno == ENOMEM ? KITE_ERR_NOMEM : KITE_ERR_IO, "imatrix: write to '%s' failed: %s", tmp,
                         strerror(write_errno ? write_errno : EIO));
    }
    return KITE_OK;
}

kite_status kite_imatrix_write(const kite_imatrix *m, const char *path, bool legacy_dat, kite_error *e) {
    if (!m || !path || !*path) return kite_fail(e, KITE_ERR_INVALID_ARG, "imatrix: NULL matrix or empty output path");
    kite_status st = check_entries(m, e);
    if (st) return st;
    /* The file is renamed into place: a device or a folder under that name must not be replaced. */
    struct stat existing;
    if (stat(path, &existing) == 0 && !S_ISREG(existing.st_mode))
        return kite_fail(e, KITE_ERR_IO, "imatrix: cannot write '%s': it exists and is not a regular file", path);
    const kite_imatrix_entry **order = sorted_entries(m, e);
    if (!order) return e ? e->status : KITE_ERR_NOMEM;
    /* A temporary name beside the output, renamed into place once complete: an interrupted run never
     * leaves a file under the output name that looks complete. */
    size_t tmp_len = strlen(path) + 32;
    char *tmp = malloc(tmp_len);
    if (!tmp) {
        free(order);
        return kite_fail(e, KITE_ERR_NOMEM, "imatrix: out of memory");
    }
    snprintf(tmp, tmp_len, "%s.tmp.%ld", path, (long)getpid());
    st = legacy_dat ? write_dat(m, order, tmp, e) : write_gguf(m, order, tmp, e);
    if (!st && rename(tmp, path) != 0) {
        st = kite_fail(e, KITE_ERR_IO, "imatrix: cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
        remove(tmp);
    }
    free(tmp);
    free(order);
    return st;
}
