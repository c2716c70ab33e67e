/* Reading llama.cpp's importance-matrix files, both forms (see quant/imatrix.h).
 *
 * GGUF form: tensors "<name>.in_sum2" (F32, n_cols x n_mat: sums of squared activations) and
 * "<name>.counts" (F32, 1 x n_mat: activation rows summed, integers stored as floats and rounded on
 * reading, as llama.cpp does); keys imatrix.datasets (array of strings), imatrix.chunk_count and
 * imatrix.chunk_size (u32). Tensors with other names are ignored.
 *
 * Legacy .dat form, little-endian: i32 n_entries (>= 1), then per entry i32 name length, the name,
 * i32 ncall, i32 nval (>= 1), nval f32 values; then optionally i32 chunk count, i32 length and a
 * dataset name. A value there is already mean * ncall, so an entry reads as one matrix with
 * sum_sq = values and count = ncall (count 1 when ncall <= 0: llama.cpp then uses the values as
 * they are). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/gguf.h"
#include "io/mmap.h"
#include "quant/imatrix_parse.h"

/* Bounds that keep a hostile file from asking for absurd allocations. */
#define MAX_ENTRIES 1000000 /* llama.cpp's largest models have some thousands */
#define MAX_NAME_LEN 4096

static char *dup_bytes(const char *p, size_t n) {
    char *s = malloc(n + 1);
    if (!s) return NULL;
    memcpy(s, p, n);
    s[n] = 0;
    return s;
}

/* A name as it may appear in a one-line message: control bytes as '?', at most 80 bytes. */
typedef struct shown_name { char text[88]; } shown_name;
static shown_name show(const char *name) {
    shown_name out;
    size_t j = 0;
    for (size_t i = 0; name[i] && j < 80; i++) out.text[j++] = (unsigned char)name[i] < 0x20 || name[i] == 0x7f ? '?' : name[i];
    if (name[j] && j == 80) memcpy(out.text + j, "...", 3), j += 3;
    out.text[j] = 0;
    return out;
}

void kite_imatrix_clear(kite_imatrix *m) {
    if (!m) return;
    for (int64_t i = 0; i < m->n_entries; i++) {
        free(m->entries[i].name);
        free(m->entries[i].sum_sq);
        free(m->entries[i].counts);
    }
    free(m->entries);
    for (int32_t i = 0; i < m->n_datasets; i++) free(m->datasets[i]);
    free(m->datasets);
    memset(m, 0, sizeof *m);
}

const kite_imatrix_entry *kite_imatrix_find(const kite_imatrix *m, const char *tensor_name) {
    if (!m || !tensor_name) return NULL;
    for (int64_t i = 0; i < m->n_entries; i++)
        if (strcmp(m->entries[i].name, tensor_name) == 0) return &m->entries[i];
    return NULL;
}

void kite_imatrix_means(const kite_imatrix_entry *entry, float *out) {
    for (int64_t j = 0; j < entry->n_mat; j++) {
        const float count = entry->counts[j];
        for (int64_t i = 0; i < entry->n_cols; i++)
            out[j * entry->n_cols + i] = count > 0.0f ? entry->sum_sq[j * entry->n_cols + i] / count : 1.0f;
    }
}

/* Appends an entry (taking ownership of name, sums and counts, freeing them on failure). */
static kite_status add_entry(kite_imatrix *m, int64_t *cap, char *name, int64_t n_cols, int64_t n_mat, float *sums,
                             float *counts, kite_error *e) {
    if (m->n_entries == *cap) {
        int64_t new_cap = *cap ? 2 * *cap : 16;
        kite_imatrix_entry *p = realloc(m->entries, (size_t)new_cap * sizeof *p);
        if (!p) {
            free(name), free(sums), free(counts);
            return kite_fail(e, KITE_ERR_NOMEM, "imatrix: out of memory");
        }
        m->entries = p;
        *cap = new_cap;
    }
    m->entries[m->n_entries++] = (kite_imatrix_entry){name, n_cols, n_mat, sums, counts};
    return KITE_OK;
}

static kite_status check_finite(const float *v, int64_t n, const char *name, const char *what, kite_error *e) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(v[i]))
            return kite_fail(e, KITE_ERR_FORMAT, "imatrix %s: entry '%s' value %lld is not finite", what, show(name).text, (long long)i);
    return KITE_OK;
}

/* ---- legacy .dat ------------------------------------------------------------------------------- */

typedef struct reader {
    const uint8_t *p;
    size_t size, pos;
} reader;

static bool read_i32(reader *r, int32_t *v) {
    if (r->size - r->pos < 4) return false;
    memcpy(v, r->p + r->pos, 4);
    r->pos += 4;
    return true;
}

static kite_status parse_legacy(kite_imatrix *m, reader *r, const char *what, kite_error *e) {
    int32_t n_entries;
    if (!read_i32(r, &n_entries) || n_entries < 1 || n_entries > MAX_ENTRIES)
        return kite_fail(e, KITE_ERR_FORMAT, "imatrix %s: byte 0: not a GGUF file, and no legacy entry count in 1..%d", what, MAX_ENTRIES);
    int64_t cap = 0;
    for (int32_t i = 0; i < n_entries; i++) {
        size_t at = r->pos;
        int32_t len;
        if (!read_i32(r, &len) || len < 1 || len > MAX_NAME_LEN || r->size - r->pos < (size_t)len)
            return kite_fail(e, KITE_ERR_FORMAT, "imatrix %s: byte %zu: entry %d has a bad or truncated name", what, at, i);
        const char *name_p = (const char *)r->p + r->pos;
        if (memchr(name_p, 0, (size_t)len))
            return kite_fail(e, KITE_ERR_FORMAT, "imatrix %s: byte %zu: entry %d's name holds a NUL byte", what, r->pos, i);
        r->pos += (size_t)len;
        int32_t ncall, nval;
        at = r->pos;
        if (!read_i32(r, &ncall) || !read_i32(r, &nval) || nval < 1 || (r->size - r->pos) / 4 < (size_t)nval)
            return kite_fail(e, KITE_ERR_FORMAT, "imatrix %s: byte %zu: entry %d has a bad or truncated value count", what, at, i);
        char *name = dup_bytes(name_p, (size_t)len);
        float *sums = malloc((size_t)nval * sizeof *sums);
        float *counts = malloc(sizeof *counts);
        if (!name || !sums || !counts) {
            free(name), free(sums), free(counts);
            return kite_fail(e, KITE_ERR_NOMEM, "imatrix %s: out of memory", what);
        }
        memcpy(sums, r->p + r->pos, (size_t)nval * 4);
        r->pos += (size_t)nval * 4;
        counts[0] = ncall > 0 ? (float)ncall : 1.0f;
        kite_status st = add_entry(m, &cap, name, nval, 1, sums, counts, e);
        if (st) return st;
        const kite_imatrix_entry *last = &m->entries[m->n_entries - 1];
        if ((st = check_finite(last->sum_sq, nval, last->name, what, e))) return st;
    }
    /* Optional trailer: chunk count, then the dataset's name. */
    int32_t chunks, len;
    if (read_i32(r, &chunks)) {
        m->chunk_count = chunks;
        size_t at = r->pos;
        if (read_i32(r, &len) && len > 0) {
            if (len > MAX_NAME_LEN || r->size - r->pos < (size_t)len)
                return kite_fail(e, KITE_ERR_FORMAT, "imatrix %s: byte %zu: truncated dataset name", what, at);
            m->datasets = malloc(sizeof *m->datasets);
            if (!m->datasets || !(m->datasets[0] = dup_bytes((const char *)r->p + r->pos, (size_t)len))) {
                free(m->datasets);
                m->datasets = NULL;
                return kite_fail(e, KITE_ERR_NOMEM, "imatrix %s: out of memory", what);
            }
            m->n_datasets = 1;
        }
    }
    return KITE_OK;
}

/* ---- GGUF -------------------------------------------------------------------------------------- */

static bool ends_with(kite_gguf_str s, const char *suffix, uint64_t *stem_len) {
    uint64_t n = strlen(suffix);
    if (s.len <= n || memcmp(s.ptr + s.len - n, suffix, n) != 0) return false;
    *stem_len = s.len - n;
    return true;
}

static kite_status parse_gguf(kite_imatrix *m, const kite_gguf *g, const char *what, kite_error *e) {
    int64_t cap = 0;
    const int64_t n_tensors = kite_gguf_n_tensors(g);
    for (int64_t t = 0; t < n_tensors; t++) {
        const kite_gguf_tensor *sums_t = kite_gguf_tensor_at(g, t);
        uint64_t stem;
        if (!ends_with(sums_t->name, ".in_sum2", &stem)) continue;
        char *name = dup_bytes(sums_t->name.ptr, stem);
        if (!name) return kite_fail(e, KITE_ERR_NOMEM, "imatrix %s: out of memory", what);
        char counts_name[160];
        if (stem + sizeof ".counts" > sizeof counts_name || memchr(name, 0, stem)) {
            kite_status st = kite_fail(e, KITE_ERR_FORMAT, "imatrix %s: tensor %lld has a bad name", what, (long long)t);
            free(name);
            return st;
        }
        snprintf(counts_name, sizeof counts_name, "%s.counts", name);
        const kite_gguf_tensor *counts_t = kite_gguf_find_tensor(g, counts_name);
        int64_t nval = 1, ncounts = 1;
        /* element counts, refused rather than overflowed past 2^40 (the GGUF reader bounds each dimension, not
         * their product) */
        for (int d = 0; d < 4; d++) nval = nval > 0 && sums_t->ne[d] > 0 && nval <= ((int64_t)1 << 40) / sums_t->ne[d] ? nval * sums_t->ne[d] : -1;
        if (counts_t)
            for (int d = 0; d < 4; d++)
                ncounts = ncounts > 0 && counts_t->ne[d] > 0 && ncounts <= ((int64_t)1 << 40) / counts_t->ne[d] ? ncounts * counts_t->ne[d] : -1;
        const char *fault = !counts_t ? "has no matching .counts tensor"
                          : sums_t->type != 0 || counts_t->type != 0 ? "sums and counts must be F32"
                          : nval < 1 || ncounts < 1 || nval % ncounts != 0 ? "sums are not a whole number of matrices"
                          : NULL;
        if (fault) {
            kite_status st = kite_fail(e, KITE_ERR_FORMAT, "imatrix %s: entry '%s' %s", what, show(name).text, fault);
            free(name);
            return st;
        }
        float *sums = malloc((size_t)nval * sizeof *sums);
        float *counts = malloc((size_t)ncounts * sizeof *counts);
        if (!sums || !counts) {
            free(name), free(sums), free(counts);
            return kite_fail(e, KITE_ERR_NOMEM, "imatrix %s: out of memory", what);
        }
        memcpy(sums, sums_t->data, (size_t)nval * 4);
        memcpy(counts, counts_t->data, (size_t)ncounts * 4);
        kite_status st = add_entry(m, &cap, name, nval / ncounts, ncounts, sums, counts, e);
        if (st) return st;
        kite_imatrix_entry *last = &m->entries[m->n_entries - 1];
        if ((st = check_finite(last->sum_sq, nval, last->name, what, e))) return st;
        for (int64_t j = 0; j < ncounts; j++) {
            if (!isfinite(counts[j]) || counts[j] < 0 || counts[j] > 9.0e15f)
                return kite_fail(e, KITE_ERR_FORMAT, "imatrix %s: entry '%s' count %lld is not a non-negative number", what, show(last->name).text, (long long)j);
            counts[j] = (float)llroundf(counts[j]); /* llama.cpp keeps counts as integers */
        }
    }
    if (m->n_entries == 0) return kite_fail(e, KITE_ERR_FORMAT, "imatrix %s: no .in_sum2/.counts tensor pairs", what);
    kite_gguf_vtype et;
    uint64_t n;
    if (kite_gguf_get_arr(g, "imatrix.datasets", &et, &n) && et == KITE_GGUF_STRING && n > 0) {
        if (n > MAX_ENTRIES) return kite_fail(e, KITE_ERR_FORMAT, "imatrix %s: %llu datasets", what, (unsigned long long)n);
        m->datasets = calloc((size_t)n, sizeof *m->datasets);
        if (!m->datasets) return kite_fail(e, KITE_ERR_NOMEM, "imatrix %s: out of memory", what);
        for (uint64_t i = 0; i < n; i++) {
            kite_gguf_str s;
            if (!kite_gguf_arr_str(g, "imatrix.datasets", i, &s)) break;
            if (!(m->datasets[i] = dup_bytes(s.ptr, s.len))) return kite_fail(e, KITE_ERR_NOMEM, "imatrix %s: out of memory", what);
            m->n_datasets = (int32_t)(i + 1);
        }
    }
    uint32_t v;
    if (kite_gguf_get_u32(g, "imatrix.chunk_count", &v)) m->chunk_count = (int32_t)(v > INT32_MAX ? INT32_MAX : v);
    if (kite_gguf_get_u32(g, "imatrix.chunk_size", &v)) m->chunk_size = (int32_t)(v > INT32_MAX ? INT32_MAX : v);
    return KITE_OK;
}

static int compare_entries(const void *a, const void *b) {
    return strcmp(((const kite_imatrix_entry *)a)->name, ((const kite_imatrix_entry *)b)->name);
}

/* Entries sorted by name (llama.cpp keeps them in a std::map too); a name twice is an error. Sorting
 * keeps the check O(n log n) for files with many entries. */
static kite_status sort_and_check_unique(kite_imatrix *m, const char *what, kite_error *e) {
    if (m->n_entries > 1) qsort(m->entries, (size_t)m->n_entries, sizeof *m->entries, compare_entries);
    for (int64_t i = 1; i < m->n_entries; i++)
        if (strcmp(m->entries[i - 1].name, m->entries[i].name) == 0)
            return kite_fail(e, KITE_ERR_FORMAT, "imatrix %s: entry '%s' appears twice", what, show(m->entries[i].name).text);
    return KITE_OK;
}

kite_status kite_imatrix_parse(kite_imatrix *out, const void *data, size_t size, const char *what, kite_error *e) {
    memset(out, 0, sizeof *out);
    if (!what) what = "(memory)";
    kite_status st;
    if (size >= 4 && memcmp(data, "GGUF", 4) == 0) {
        kite_gguf *g = NULL;
        kite_error ge = {0};
        if (kite_gguf_open(&g, data, size, &ge)) return kite_fail(e, KITE_ERR_FORMAT, "imatrix %s: %s", what, ge.msg);
        st = parse_gguf(out, g, what, e);
        kite_gguf_free(g);
    } else {
        reader r = {data, size, 0};
        st = parse_legacy(out, &r, what, e);
    }
    if (!st) st = sort_and_check_unique(out, what, e);
    if (st) kite_imatrix_clear(out);
    return st;
}

kite_status kite_imatrix_read(kite_imatrix *out, const char *path, kite_error *e) {
    memset(out, 0, sizeof *out);
    if (!path) return kite_fail(e, KITE_ERR_INVALID_ARG, "imatrix: NULL path");
    kite_mapped_file f = {0};
    kite_status st = kite_map_file(&f, path, e);
    if (st) return st;
    st = kite_imatrix_parse(out, f.data, f.size, path, e);
    kite_unmap_file(&f);
    return st;
}
