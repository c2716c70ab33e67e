/* kite quantize against llama.cpp's own quantizer (llama_lib.h: libllama / libggml-base of the npm
 * oracle, opened with dlopen):
 *   1. blocks: kite_quantize_rows == ggml_quantize_chunk byte for byte, for every type, on Gaussian,
 *      Laplace, Student-t and real rows, without and with importance vectors (random, some zeros);
 *   2. files: kite_quantize of an F32 GGUF == llama_model_quantize's output, tensor by tensor (names,
 *      types, shapes, bytes) and key by key, for every file type, without and with an imatrix (given to
 *      kite as a GGUF and as a legacy .dat file written here, to llama.cpp as the means both encode), on a
 *      random-weight model whose rows fit K-quant blocks and on the real stories260K (whose rows do not:
 *      the documented fallbacks); a quantized source only with allow_requantize; a llama2.c checkpoint
 *      converted as llama.cpp's converter does, then quantized as llama-quantize does;
 *   3. the Q4_K_M file runs in llama.cpp (tests/oracle/llamacpp_probs.mjs) and in kite with the same
 *      next-token probabilities;
 *   4. bad input: missing, non-GGUF, unknown type, unwritable output, a failed write (a file-size limit,
 *      and an injected failure), a cancelled run: a clear error and no file under the output name. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "io/gguf.h"
#include "io/mmap.h"
#include "kite.h"
#include "llama_lib.h"
#include "quant/imatrix_parse.h"
#include "quant/quantize.h"
#include "quant/quantize_model.h"
#include "quant/trellis.h"
#include "quant/types.h"

static llama_lib g_lib;
static char g_dir[256];        /* scratch folder */
static char g_tiny[512];       /* random-weight F32 model, rows multiples of 256 */
static char g_stories[512];    /* real F32 model (stories260K), rows of 64 and 172 */

static const char *data_dir(void) {
    const char *d = getenv("KITE_TEST_DATA");
    return d ? d : "../shared";
}

/* ---- deterministic inputs ------------------------------------------------------------------------- */

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static double uniform01(void) {
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return ((double)(g_rng >> 11) + 0.5) / 9007199254740992.0;
}
static double gaussian(void) { return sqrt(-2 * log(uniform01())) * cos(6.283185307179586 * uniform01()); }

typedef enum { IN_GAUSS, IN_LAPLACE, IN_STUDENT3, IN_REAL, IN_KINDS } input_kind;
static const char *const kind_names[] = {"gaussian", "laplace", "student-t3", "real"};

/* rows x cols floats of the kind; real rows are the concatenated weights of stories260K. */
static void fill_input(float *x, int64_t n, input_kind kind, const float *real, int64_t n_real) {
    for (int64_t i = 0; i < n; i++) {
        double v;
        switch (kind) {
        case IN_GAUSS: v = gaussian(); break;
        case IN_LAPLACE: v = (uniform01() < 0.5 ? -1 : 1) * -log(uniform01()); break;
        case IN_STUDENT3: {
            double c = 0;
            for (int k = 0; k < 3; k++) { double g = gaussian(); c += g * g; }
            v = gaussian() / sqrt(c / 3);
            break;
        }
        default: v = real[i % n_real]; break;
        }
        x[i] = (float)(kind == IN_REAL ? v : 0.05 * v);
    }
}

/* The weights of stories260K's 2-D tensors, end to end. */
static float *real_weights(int64_t *n) {
    kite_mapped_file f;
    kite_error e = {0};
    assert_int_equal(kite_map_file(&f, g_stories, &e), 0);
    kite_gguf *g;
    assert_int_equal(kite_gguf_open(&g, f.data, f.size, &e), 0);
    int64_t total = 0;
    for (int64_t i = 0; i < kite_gguf_n_tensors(g); i++) if (kite_gguf_tensor_at(g, i)->n_dims == 2) total += (int64_t)kite_gguf_tensor_at(g, i)->n_bytes / 4;
    float *out = malloc((size_t)total * 4);
    assert_non_null(out);
    int64_t at = 0;
    for (int64_t i = 0; i < kite_gguf_n_tensors(g); i++) {
        const kite_gguf_tensor *t = kite_gguf_tensor_at(g, i);
        if (t->n_dims != 2) continue;
        assert_int_equal(t->type, KITE_TYPE_F32);
        memcpy(out + at, t->data, t->n_bytes);
        at += (int64_t)t->n_bytes / 4;
    }
    kite_gguf_free(g);
    kite_unmap_file(&f);
    *n = total;
    return out;
}

/* ---- 1. blocks ------------------------------------------------------------------------------------- */

static const uint32_t block_types[] = {KITE_TYPE_Q4_0, KITE_TYPE_Q4_1, KITE_TYPE_Q5_0, KITE_TYPE_Q5_1, KITE_TYPE_Q8_0,
                                       KITE_TYPE_Q2_K, KITE_TYPE_Q3_K, KITE_TYPE_Q4_K, KITE_TYPE_Q5_K, KITE_TYPE_Q6_K,
                                       KITE_TYPE_F16, KITE_TYPE_BF16};

static void test_blocks_match_ggml(void **state) {
    (void)state;
    enum { ROWS = 24, COLS = 1024 };
    int64_t n_real;
    float *real = real_weights(&n_real);
    float *x = malloc(sizeof(float) * ROWS * COLS);
    float qw[COLS];
    uint8_t *a = malloc(ROWS * COLS * 4), *b = malloc(ROWS * COLS * 4);
    assert_true(x && a && b);
    int compared = 0;
    for (int kind = 0; kind < IN_KINDS; kind++) {
        fill_input(x, ROWS * COLS, (input_kind)kind, real, n_real);
        /* an all-zero row and a row of one repeated value: the zero-group and tie paths */
        memset(x + 3 * COLS, 0, COLS * sizeof(float));
        for (int j = 0; j < COLS; j++) x[5 * COLS + j] = 0.25f;
        for (int weighting = 0; weighting < 3; weighting++) {
            /* 0: none; 1: positive log-normal importances; 2: the same with every 7th column 0 */
            for (int j = 0; j < COLS; j++) qw[j] = (float)exp(gaussian());
            if (weighting == 2) for (int j = 0; j < COLS; j += 7) qw[j] = 0;
            for (size_t t = 0; t < sizeof block_types / sizeof block_types[0]; t++) {
                const uint32_t type = block_types[t];
                const size_t bytes = ROWS * kite_type_row_bytes(type, COLS);
                memset(a, 0xA5, bytes), memset(b, 0x5A, bytes);
                size_t na = kite_quantize_rows(type, x, a, ROWS, COLS, weighting ? qw : NULL);
                size_t nb = g_lib.quantize_chunk((int)type, x, b, 0, ROWS, COLS, weighting ? qw : NULL);
                assert_int_equal(na, bytes);
                assert_int_equal(nb, bytes);
                if (memcmp(a, b, bytes) != 0) {
                    size_t at = 0;
                    while (a[at] == b[at]) at++;
                    fail_msg("%s on %s rows, importance %d: kite's blocks differ from ggml's at byte %zu of %zu",
                             kite_type_get(type)->name, kind_names[kind], weighting, at, bytes);
                }
                compared++;
            }
        }
    }
    assert_int_equal(compared, IN_KINDS * 3 * (int)(sizeof block_types / sizeof block_types[0]));
    free(real), free(x), free(a), free(b);
}

/* ---- imatrix files written here (independently of kite's reader and writer) ----------------------- */

typedef struct test_imatrix {
    char names[64][96];
    int64_t cols[64];
    float *sums[64];   /* [cols] */
    float count[64];   /* rows summed (GGUF), or ncall (legacy) */
    int n;
} test_imatrix;

/* Importances for every 2-D weight of a model file: sums of squares of random activations. */
static void make_imatrix(test_imatrix *m, const char *model) {
    memset(m, 0, sizeof *m);
    kite_mapped_file f;
    kite_error e = {0};
    assert_int_equal(kite_map_file(&f, model, &e), 0);
    kite_gguf *g;
    assert_int_equal(kite_gguf_open(&g, f.data, f.size, &e), 0);
    for (int64_t i = 0; i < kite_gguf_n_tensors(g); i++) {
        const kite_gguf_tensor *t = kite_gguf_tensor_at(g, i);
        if (t->n_dims != 2 || strstr(t->name.ptr, "token_embd")) continue; /* llama-imatrix sees no embedding */
        assert_true(m->n < 64);
        snprintf(m->names[m->n], sizeof m->names[0], "%.*s", (int)t->name.len, t->name.ptr);
        m->cols[m->n] = t->ne[0];
        m->sums[m->n] = malloc((size_t)t->ne[0] * sizeof(float));
        m->count[m->n] = 40;
        for (int64_t j = 0; j < t->ne[0]; j++) {
            double s = 0;
            const double scale = exp(gaussian());
            for (int k = 0; k < 40; k++) { double v = scale * gaussian(); s += v * v; }
            m->sums[m->n][j] = (float)s;
        }
        m->n++;
    }
    kite_gguf_free(g);
    kite_unmap_file(&f);
}

static void free_imatrix(test_imatrix *m) {
    for (int i = 0; i < m->n; i++) free(m->sums[i]);
}

/* GGUF form, through kite's generic GGUF writer (the layout: llama-imatrix's save_imatrix). */
static void write_imatrix_gguf(const test_imatrix *m, const char *path) {
    kite_gguf_writer *w = kite_gguf_writer_new();
    kite_gguf_w_str(w, "general.type", "imatrix");
    const char *ds[] = {"calibration.txt"};
    kite_gguf_w_arr_str(w, "imatrix.datasets", ds, 1);
    kite_gguf_w_u32(w, "imatrix.chunk_count", 10);
    kite_gguf_w_u32(w, "imatrix.chunk_size", 4);
    for (int i = 0; i < m->n; i++) {
        char name[128];
        int64_t ne_s[2] = {m->cols[i], 1}, ne_c[2] = {1, 1};
        snprintf(name, sizeof name, "%s.in_sum2", m->names[i]);
        kite_gguf_w_tensor(w, name, KITE_TYPE_F32, 2, ne_s, m->sums[i], (uint64_t)m->cols[i] * 4);
        snprintf(name, sizeof name, "%s.counts", m->names[i]);
        kite_gguf_w_tensor(w, name, KITE_TYPE_F32, 2, ne_c, &m->count[i], 4);
    }
    kite_error e = {0};
    assert_int_equal(kite_gguf_writer_save(w, path, &e), 0);
    kite_gguf_writer_free(w);
}

/* Legacy .dat form, byte by byte (llama-imatrix's save_imatrix_legacy): a value is mean * ncall. */
static void write_imatrix_dat(const test_imatrix *m, const char *path, int32_t ncall) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    int32_t n = m->n;
    fwrite(&n, 4, 1, f);
    for (int i = 0; i < m->n; i++) {
        int32_t len = (int32_t)strlen(m->names[i]), nval = (int32_t)m->cols[i];
        fwrite(&len, 4, 1, f), fwrite(m->names[i], 1, (size_t)len, f), fwrite(&ncall, 4, 1, f), fwrite(&nval, 4, 1, f);
        for (int64_t j = 0; j < m->cols[i]; j++) {
            float v = m->sums[i][j] / m->count[i] * (float)ncall;
            fwrite(&v, 4, 1, f);
        }
    }
    int32_t chunks = 10, dlen = 15;
    fwrite(&chunks, 4, 1, f), fwrite(&dlen, 4, 1, f), fwrite("calibration.txt", 1, 15, f);
    assert_int_equal(fclose(f), 0);
}

static void test_imatrix_read_both_forms(void **state) {
    (void)state;
    test_imatrix m;
    make_imatrix(&m, g_tiny);
    char gguf[512], dat[512];
    snprintf(gguf, sizeof gguf, "%s/read.imatrix.gguf", g_dir);
    snprintf(dat, sizeof dat, "%s/read.imatrix.dat", g_dir);
    write_imatrix_gguf(&m, gguf);
    write_imatrix_dat(&m, dat, 10);
    kite_imatrix a, b;
    kite_error e = {0};
    assert_int_equal(kite_imatrix_read(&a, gguf, &e), 0);
    assert_int_equal(kite_imatrix_read(&b, dat, &e), 0);
    assert_int_equal(a.n_entries, m.n);
    assert_int_equal(b.n_entries, m.n);
    assert_int_equal(a.chunk_count, 10);
    assert_int_equal(a.chunk_size, 4);
    assert_int_equal(b.chunk_count, 10);
    assert_int_equal(a.n_datasets, 1);
    assert_string_equal(a.datasets[0], "calibration.txt");
    assert_int_equal(b.n_datasets, 1);
    assert_string_equal(b.datasets[0], "calibration.txt");
    for (int i = 0; i < m.n; i++) {
        const kite_imatrix_entry *ea = kite_imatrix_find(&a, m.names[i]), *eb = kite_imatrix_find(&b, m.names[i]);
        assert_non_null(ea);
        assert_non_null(eb);
        assert_int_equal(ea->n_cols, m.cols[i]);
        assert_int_equal(ea->n_mat, 1);
        assert_true(ea->counts[0] == m.count[i]);
        float *ma = malloc((size_t)m.cols[i] * 4), *mb = malloc((size_t)m.cols[i] * 4);
        kite_imatrix_means(ea, ma);
        kite_imatrix_means(eb, mb);
        for (int64_t j = 0; j < m.cols[i]; j++) {
            assert_true(ea->sum_sq[j] == m.sums[i][j]);
            /* the legacy form stores mean * ncall in float: one rounding each way */
            assert_true(fabsf(ma[j] - mb[j]) <= 2e-6f * ma[j]);
        }
        free(ma), free(mb);
    }
    assert_null(kite_imatrix_find(&a, "no.such.weight"));
    kite_imatrix_clear(&a);
    kite_imatrix_clear(&b);
    kite_imatrix_clear(&a); /* a cleared matrix clears again as a no-op */

    /* damaged files: a clear error naming the file, never a crash */
    static const uint8_t truncated[] = {2, 0, 0, 0, 5, 0, 0, 0, 'a', 'b'};
    static const uint8_t negative[] = {1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff};
    kite_imatrix c;
    assert_int_equal(kite_imatrix_parse(&c, truncated, sizeof truncated, "t.dat", &e), KITE_ERR_FORMAT);
    assert_non_null(strstr(e.msg, "t.dat"));
    assert_int_equal(kite_imatrix_parse(&c, negative, sizeof negative, "n.dat", &e), KITE_ERR_FORMAT);
    assert_int_equal(kite_imatrix_parse(&c, "", 0, "empty", &e), KITE_ERR_FORMAT);
    static const uint8_t twice[] = {2, 0, 0, 0, 1, 0, 0, 0, 'w', 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 128, 63,
                                    1, 0, 0, 0, 'w', 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 128, 63};
    assert_int_equal(kite_imatrix_parse(&c, twice, sizeof twice, "twice.dat", &e), KITE_ERR_FORMAT);
    assert_non_null(strstr(e.msg, "appears twice"));
    uint8_t once[sizeof twice - 17];
    memcpy(once, twice, sizeof once);
    once[0] = 1; /* the first entry alone */
    assert_int_equal(kite_imatrix_parse(&c, once, sizeof once, "once.dat", &e), KITE_OK);
    assert_int_equal(c.n_entries, 1);
    assert_true(c.entries[0].sum_sq[0] == 1.0f && c.entries[0].counts[0] == 1.0f);
    kite_imatrix_clear(&c);
    assert_int_equal(kite_imatrix_read(&c, "/nonexistent/imatrix.gguf", &e), KITE_ERR_IO);
    free_imatrix(&m);
}

/* ---- 2. whole files ------------------------------------------------------------------------------- */

typedef struct file_view {
    kite_mapped_file f;
    kite_gguf *g;
} file_view;

static void view_open(file_view *v, const char *path) {
    kite_error e = {0};
    if (kite_map_file(&v->f, path, &e) || kite_gguf_open(&v->g, v->f.data, v->f.size, &e)) fail_msg("%s: %s", path, e.msg);
}
static void view_close(file_view *v) {
    kite_gguf_free(v->g);
    kite_unmap_file(&v->f);
}

/* Same tensors (in the same order), types, shapes and bytes; the same keys with the same values for
 * the ones that matter (file type, tokenizer). Returns the number of tensors whose type differs from
 * the source's (quantized ones). */
static int compare_files(const char *kite_path, const char *llama_path, const char *what) {
    file_view k, l;
    view_open(&k, kite_path);
    view_open(&l, llama_path);
    assert_int_equal(kite_gguf_n_tensors(k.g), kite_gguf_n_tensors(l.g));
    for (int64_t i = 0; i < kite_gguf_n_tensors(l.g); i++) {
        const kite_gguf_tensor *a = kite_gguf_tensor_at(k.g, i), *b = kite_gguf_tensor_at(l.g, i);
        if (a->name.len != b->name.len || memcmp(a->name.ptr, b->name.ptr, a->name.len) != 0)
            fail_msg("%s: tensor %lld is '%.*s' in kite's file, '%.*s' in llama.cpp's", what, (long long)i, (int)a->name.len,
                     a->name.ptr, (int)b->name.len, b->name.ptr);
        if (a->type != b->type)
            fail_msg("%s: tensor '%.*s' is %s in kite's file, %s in llama.cpp's", what, (int)b->name.len, b->name.ptr,
                     kite_type_get(a->type)->name, kite_type_get(b->type)->name);
        assert_memory_equal(a->ne, b->ne, sizeof a->ne);
        assert_int_equal(a->n_bytes, b->n_bytes);
        if (memcmp(a->data, b->data, a->n_bytes) != 0)
            fail_msg("%s: tensor '%.*s' (%s) has different bytes", what, (int)b->name.len, b->name.ptr, kite_type_get(b->type)->name);
    }
    assert_int_equal(kite_gguf_n_kv(k.g), kite_gguf_n_kv(l.g));
    for (int64_t i = 0; i < kite_gguf_n_kv(l.g); i++) {
        kite_gguf_str key = kite_gguf_key(l.g, i);
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)key.len, key.ptr);
        if (!kite_gguf_has(k.g, name)) fail_msg("%s: key '%s' missing from kite's file", what, name);
    }
    uint32_t fa, fb;
    assert_true(kite_gguf_get_u32(k.g, "general.file_type", &fa));
    assert_true(kite_gguf_get_u32(l.g, "general.file_type", &fb));
    assert_int_equal(fa, fb);
    kite_gguf_vtype ta, tb;
    uint64_t na, nb;
    assert_true(kite_gguf_get_arr(k.g, "tokenizer.ggml.tokens", &ta, &na));
    assert_true(kite_gguf_get_arr(l.g, "tokenizer.ggml.tokens", &tb, &nb));
    assert_int_equal(na, nb);
    for (uint64_t i = 0; i < na; i++) {
        kite_gguf_str sa, sb;
        assert_true(kite_gguf_arr_str(k.g, "tokenizer.ggml.tokens", i, &sa) && kite_gguf_arr_str(l.g, "tokenizer.ggml.tokens", i, &sb));
        assert_true(sa.len == sb.len && memcmp(sa.ptr, sb.ptr, sa.len) == 0);
    }
    view_close(&k);
    view_close(&l);
    return 0;
}

/* kite's file and llama.cpp's for one file type; imatrix: NULL, or a file for kite with the means
 * for llama.cpp. */
static void quantize_both(const char *model, const char *tag, const kite_ftype_info *ft, const char *imatrix_file,
                          const test_imatrix *m, int32_t legacy_ncall, bool requantize) {
    char kpath[600], lpath[600], err[1024];
    snprintf(kpath, sizeof kpath, "%s/%s-%s-kite.gguf", g_dir, tag, ft->name);
    snprintf(lpath, sizeof lpath, "%s/%s-%s-llama.gguf", g_dir, tag, ft->name);
    kite_quantize_params p = kite_quantize_default_params();
    p.type = ft->name;
    p.n_threads = 2;
    p.imatrix_path = imatrix_file;
    p.allow_requantize = requantize;
    if (kite_quantize(model, kpath, &p, err, sizeof err)) fail_msg("kite_quantize %s %s: %s", tag, ft->name, err);

    llama_quantize_params lp = g_lib.defaults;
    lp.nthread = 2;
    lp.ftype = ft->id;
    lp.allow_requantize = requantize;
    llama_imatrix_data data[65];
    float *means[64] = {0};
    if (m) {
        for (int i = 0; i < m->n; i++) {
            means[i] = malloc((size_t)m->cols[i] * 4);
            /* what llama-quantize's load_imatrix computes from either file: sum / count (GGUF), or the
             * stored mean * ncall divided by ncall (legacy) */
            for (int64_t j = 0; j < m->cols[i]; j++) {
                float mean = m->sums[i][j] / m->count[i];
                means[i][j] = legacy_ncall > 0 ? mean * (float)legacy_ncall / (float)legacy_ncall : mean;
            }
            data[i] = (llama_imatrix_data){m->names[i], means[i], (size_t)m->cols[i]};
        }
        data[m->n] = (llama_imatrix_data){NULL, NULL, 0};
        lp.imatrix = data;
    }
    assert_int_equal(g_lib.model_quantize(model, lpath, &lp), 0);
    for (int i = 0; i < 64; i++) free(means[i]);
    char what[256];
    snprintf(what, sizeof what, "%s %s%s", tag, ft->name, imatrix_file ? " with imatrix" : "");
    compare_files(kpath, lpath, what);
    unlink(lpath);
    if (strcmp(ft->name, "Q4_K_M") != 0) unlink(kpath); /* test 3 runs the Q4_K_M files */
}

static const char *const file_types[] = {"Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K_S", "Q3_K_M", "Q3_K_L",
                                         "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K", "F16"};
#define N_FILE_TYPES (sizeof file_types / sizeof file_types[0])

static void test_files_match_llama_quantize(void **state) {
    (void)state;
    for (size_t i = 0; i < N_FILE_TYPES; i++) {
        const kite_ftype_info *ft = kite_ftype_find(file_types[i]);
        assert_non_null(ft);
        /* the float file types are plain conversions (test 1 checks them): one model is enough */
        if (ft->base_type != KITE_TYPE_F16) quantize_both(g_tiny, "tiny", ft, NULL, NULL, 0, false);
        quantize_both(g_stories, "stories", ft, NULL, NULL, 0, false);
    }
}

static void test_files_with_imatrix_match(void **state) {
    (void)state;
    test_imatrix m;
    make_imatrix(&m, g_tiny);
    char gguf[512], dat[512];
    snprintf(gguf, sizeof gguf, "%s/tiny.imatrix.gguf", g_dir);
    snprintf(dat, sizeof dat, "%s/tiny.imatrix.dat", g_dir);
    write_imatrix_gguf(&m, gguf);
    write_imatrix_dat(&m, dat, 10);
    /* every weighted search in a file (Q2_K's mix also holds Q3_K, Q4_K_M's Q6_K), and the legacy form
     * twice */
    static const char *const with_imatrix[] = {"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q4_K_M", "Q5_K_S"};
    for (size_t i = 0; i < sizeof with_imatrix / sizeof with_imatrix[0]; i++) {
        const kite_ftype_info *ft = kite_ftype_find(with_imatrix[i]);
        quantize_both(g_tiny, "tiny-im", ft, gguf, &m, 0, false);
        if (i == 0 || i == 4) quantize_both(g_tiny, "tiny-imdat", ft, dat, &m, 10, false);
    }
    /* the real model: imatrix entries of its 64- and 172-column rows */
    test_imatrix ms;
    make_imatrix(&ms, g_stories);
    snprintf(gguf, sizeof gguf, "%s/stories.imatrix.gguf", g_dir);
    write_imatrix_gguf(&ms, gguf);
    quantize_both(g_stories, "stories-im", kite_ftype_find("Q4_K_M"), gguf, &ms, 0, false);
    quantize_both(g_stories, "stories-im", kite_ftype_find("Q2_K"), gguf, &ms, 0, false);
    free_imatrix(&m);
    free_imatrix(&ms);
}

static void test_requantize_only_when_allowed(void **state) {
    (void)state;
    char src[512], out[600], err[1024];
    snprintf(src, sizeof src, "%s/models/tinystories-656k/tinystories-656k-q8_0.gguf", data_dir());
    snprintf(out, sizeof out, "%s/requant.gguf", g_dir);
    kite_quantize_params p = kite_quantize_default_params();
    p.type = "Q4_0";
    assert_int_equal(kite_quantize(src, out, &p, err, sizeof err), KITE_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "allow-requantize"));
    assert_int_equal(access(out, F_OK), -1);
    quantize_both(src, "requant", kite_ftype_find("Q4_0"), NULL, NULL, 0, true);
    quantize_both(src, "requant", kite_ftype_find("Q6_K"), NULL, NULL, 0, true);
}

/* A llama2.c checkpoint: kite's conversion equals llama.cpp's converter's (stories260K.gguf was written by
 * convert-llama2c-to-ggml from stories260K.bin and tok512.bin), and quantizing the .bin equals
 * llama-quantize on that .gguf. */
static void test_llama2c_source_matches_converter(void **state) {
    (void)state;
    char bin[512], tok[512], out[600], lpath[600], err[1024];
    snprintf(bin, sizeof bin, "%s/models/tinystories-tok512/stories260K.bin", data_dir());
    snprintf(tok, sizeof tok, "%s/models/tinystories-tok512/tok512.bin", data_dir());
    snprintf(out, sizeof out, "%s/from-bin.gguf", g_dir);
    kite_quantize_params p = kite_quantize_default_params();
    p.type = "F32";
    assert_int_equal(kite_quantize(bin, out, &p, err, sizeof err), KITE_ERR_INVALID_ARG); /* no tokenizer */
    assert_non_null(strstr(err, "--tokenizer"));
    p.tokenizer_path = tok;
    if (kite_quantize(bin, out, &p, err, sizeof err)) fail_msg("%s", err);
    file_view k, l;
    view_open(&k, out);
    view_open(&l, g_stories);
    assert_int_equal(kite_gguf_n_tensors(k.g), kite_gguf_n_tensors(l.g));
    for (int64_t i = 0; i < kite_gguf_n_tensors(l.g); i++) {
        const kite_gguf_tensor *b = kite_gguf_tensor_at(l.g, i);
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)b->name.len, b->name.ptr);
        const kite_gguf_tensor *a = kite_gguf_find_tensor(k.g, name);
        if (!a) fail_msg("tensor '%s' missing from kite's conversion", name);
        assert_int_equal(a->type, b->type);
        assert_memory_equal(a->ne, b->ne, sizeof a->ne);
        assert_int_equal(a->n_bytes, b->n_bytes);
        if (memcmp(a->data, b->data, a->n_bytes)) fail_msg("tensor '%s' differs from the converter's", name);
    }
    for (int64_t i = 0; i < kite_gguf_n_kv(l.g); i++) {
        kite_gguf_str key = kite_gguf_key(l.g, i);
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)key.len, key.ptr);
        if (!kite_gguf_has(k.g, name)) fail_msg("key '%s' missing from kite's conversion", name);
    }
    for (uint64_t i = 0; i < 512; i++) {
        kite_gguf_str sa, sb;
        float fa = 0, fb = 1;
        int64_t ta = 0, tb = -1;
        assert_true(kite_gguf_arr_str(k.g, "tokenizer.ggml.tokens", i, &sa) && kite_gguf_arr_str(l.g, "tokenizer.ggml.tokens", i, &sb));
        if (sa.len != sb.len || memcmp(sa.ptr, sb.ptr, sa.len)) fail_msg("token %llu differs from the converter's", (unsigned long long)i);
        assert_true(kite_gguf_arr_f32(k.g, "tokenizer.ggml.scores", i, &fa) && kite_gguf_arr_f32(l.g, "tokenizer.ggml.scores", i, &fb));
        assert_true(fa == fb);
        assert_true(kite_gguf_arr_i64(k.g, "tokenizer.ggml.token_type", i, &ta) && kite_gguf_arr_i64(l.g, "tokenizer.ggml.token_type", i, &tb));
        assert_int_equal(ta, tb);
    }
    view_close(&k);
    view_close(&l);

    p.type = "Q4_K_M";
    if (kite_quantize(bin, out, &p, err, sizeof err)) fail_msg("%s", err);
    snprintf(lpath, sizeof lpath, "%s/from-gguf-llama.gguf", g_dir);
    llama_quantize_params lp = g_lib.defaults;
    lp.nthread = 2;
    lp.ftype = kite_ftype_find("Q4_K_M")->id;
    assert_int_equal(g_lib.model_quantize(g_stories, lpath, &lp), 0);
    compare_files(out, lpath, "stories260K.bin Q4_K_M");
    unlink(out), unlink(lpath);
}

/* ---- Hugging Face folders as the source: what convert_hf_to_gguf.py (then llama-quantize) writes ---- */

/* Whether key holds the same value in both files (scalars, strings and arrays of them). */
static bool same_kv(const kite_gguf *a, const kite_gguf *b, const char *key) {
    kite_gguf_vtype ta, tb;
    uint64_t na, nb;
    if (kite_gguf_get_arr(a, key, &ta, &na)) {
        if (!kite_gguf_get_arr(b, key, &tb, &nb) || ta != tb || na != nb) return false;
        for (uint64_t i = 0; i < na; i++) {
            kite_gguf_str sa, sb;
            int64_t ia, ib;
            float fa, fb;
            if (ta == KITE_GGUF_STRING) {
                if (!kite_gguf_arr_str(a, key, i, &sa) || !kite_gguf_arr_str(b, key, i, &sb) || sa.len != sb.len ||
                    memcmp(sa.ptr, sb.ptr, sa.len))
                    return false;
            } else if (ta == KITE_GGUF_FLOAT32 || ta == KITE_GGUF_FLOAT64) {
                if (!kite_gguf_arr_f32(a, key, i, &fa) || !kite_gguf_arr_f32(b, key, i, &fb) || fa != fb) return false;
            } else if (!kite_gguf_arr_i64(a, key, i, &ia) || !kite_gguf_arr_i64(b, key, i, &ib) || ia != ib) {
                return false;
            }
        }
        return true;
    }
    kite_gguf_str sa, sb;
    if (kite_gguf_get_str(a, key, &sa))
        return kite_gguf_get_str(b, key, &sb) && sa.len == sb.len && !memcmp(sa.ptr, sb.ptr, sa.len);
    int64_t ia, ib;
    if (kite_gguf_get_i64(a, key, &ia)) return kite_gguf_get_i64(b, key, &ib) && ia == ib;
    bool ba, bb;
    if (kite_gguf_get_bool(a, key, &ba)) return kite_gguf_get_bool(b, key, &bb) && ba == bb;
    float fa, fb;
    return kite_gguf_get_f32(a, key, &fa) && kite_gguf_get_f32(b, key, &fb) && fa == fb;
}

/* Every tensor byte-identical, and every key of ref (but the model card's general.* fields, which the
 * converter takes from README.md) present in got with the same value. */
static void assert_same_model(const char *got_path, const char *ref_path, const char *what, const char *const *optional) {
    file_view k, r;
    view_open(&k, got_path);
    view_open(&r, ref_path);
    if (kite_gguf_n_tensors(k.g) != kite_gguf_n_tensors(r.g))
        fail_msg("%s: %lld tensors, the reference has %lld", what, (long long)kite_gguf_n_tensors(k.g), (long long)kite_gguf_n_tensors(r.g));
    for (int64_t i = 0; i < kite_gguf_n_tensors(r.g); i++) {
        const kite_gguf_tensor *b = kite_gguf_tensor_at(r.g, i);
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)b->name.len, b->name.ptr);
        const kite_gguf_tensor *a = kite_gguf_find_tensor(k.g, name);
        if (!a) fail_msg("%s: tensor '%s' missing", what, name);
        if (a->type != b->type || memcmp(a->ne, b->ne, sizeof a->ne) || a->n_bytes != b->n_bytes || memcmp(a->data, b->data, a->n_bytes))
            fail_msg("%s: tensor '%s' differs from the reference's", what, name);
    }
    static const char *const card[] = {"general.name", "general.basename", "general.size_label", "general.license", "general.dataset.",
                                       "general.languages", "general.type", NULL};
    int compared = 0;
    for (int64_t i = 0; i < kite_gguf_n_kv(r.g); i++) {
        kite_gguf_str key = kite_gguf_key(r.g, i);
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)key.len, key.ptr);
        bool skip = false;
        for (int c = 0; card[c]; c++) skip = skip || !strncmp(name, card[c], strlen(card[c]));
        for (int c = 0; optional && optional[c]; c++) skip = skip || (!strcmp(name, optional[c]) && !kite_gguf_has(k.g, name));
        if (skip) continue;
        if (!same_kv(r.g, k.g, name)) fail_msg("%s: key '%s' is missing or differs from the reference's", what, name);
        compared++;
    }
    print_message("%s: %lld tensors identical, %d keys equal\n", what, (long long)kite_gguf_n_tensors(r.g), compared);
    view_close(&k);
    view_close(&r);
}

static void test_hf_folder_matches_converter(void **state) {
    (void)state;
    char folder[512], ref[600], out[600], err[1024];
    /* TinyStories-656K: the folder and convert_hf_to_gguf.py --outtype q8_0's file of it (../shared) */
    snprintf(folder, sizeof folder, "%s/models/tinystories-656k", data_dir());
    snprintf(ref, sizeof ref, "%s/tinystories-656k-q8_0.gguf", folder);
    snprintf(out, sizeof out, "%s/from-hf.gguf", g_dir);
    kite_quantize_params p = kite_quantize_default_params();
    p.type = "Q8_0";
    if (kite_quantize(folder, out, &p, err, sizeof err)) fail_msg("%s", err);
    assert_same_model(out, ref, "TinyStories-656K folder -> Q8_0", NULL);
    /* byte-level BPE tokenizers (Llama-3: q/k permuted; Qwen3: pairs of merges; Gemma 3: norms as w + 1): the
     * folder and the f32 GGUF kite_write_random_model writes of the same weights */
    static const struct { const char *shape, *tokenizer; } cases[] = {
        {"tiny", "llama3"}, {"tiny-qwen3", "qwen3"}, {"tiny-gemma3", "qwen3"}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        char tok[600], hf[600], gguf[600], what[64];
        snprintf(tok, sizeof tok, "%s/models/tokenizers/%s/tokenizer.json", data_dir(), cases[c].tokenizer);
        snprintf(hf, sizeof hf, "%s/hf-%s", g_dir, cases[c].shape);
        snprintf(gguf, sizeof gguf, "%s/random-%s.gguf", g_dir, cases[c].shape);
        kite_random_model_params rp = {.shape = cases[c].shape, .type = "f32", .tokenizer_path = tok, .seed = 1, .hf_dir = hf};
        if (kite_write_random_model(gguf, &rp, err, sizeof err)) fail_msg("%s", err);
        p.type = "F32";
        if (kite_quantize(hf, out, &p, err, sizeof err)) fail_msg("%s: %s", cases[c].shape, err);
        snprintf(what, sizeof what, "%s folder -> F32", cases[c].shape);
        /* The writer spells out keys the converter leaves at llama.cpp's defaults for these folders (the same values:
           add_bos/add_eos from the pre-tokenizer, key/value length and rope dimensions from head_dim, the vocabulary
           size from the tokens). */
        char kl[64], vl[64], rd[64], vs[64];
        const char *arch = c == 0 ? "llama" : c == 1 ? "qwen3" : "gemma3";
        snprintf(kl, sizeof kl, "%s.attention.key_length", arch);
        snprintf(vl, sizeof vl, "%s.attention.value_length", arch);
        snprintf(rd, sizeof rd, "%s.rope.dimension_count", arch);
        snprintf(vs, sizeof vs, "%s.vocab_size", arch);
        const char *const defaults[] = {"tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token", kl, vl, rd, vs, NULL};
        assert_same_model(out, gguf, what, defaults);
        unlink(gguf);
    }
    /* refused with the reason: a folder without a tokenizer */
    char bare[600], cfg[700];
    snprintf(bare, sizeof bare, "%s/bare", g_dir);
    assert_int_equal(mkdir(bare, 0755), 0);
    snprintf(cfg, sizeof cfg, "%s/config.json", bare);
    FILE *f = fopen(cfg, "w");
    assert_non_null(f);
    fputs("{}", f);
    fclose(f);
    assert_int_not_equal(kite_quantize(bare, out, &p, err, sizeof err), 0);
    print_message("bare folder: %s\n", err);
    assert_non_null(strstr(err, "bare"));
    unlink(out);
}

/* ---- 3. the file runs in llama.cpp and in kite ----------------------------------------------------- */

/* Mean over positions of the total variation distance (half the L1 distance) between the softmax of
 * kite's logits and llama.cpp's probabilities. */
static double mean_tv_distance(const float *logits, const float *probs, int n_pos, int n_vocab) {
    double sum = 0;
    for (int pos = 0; pos < n_pos; pos++) {
        const float *l = logits + pos * n_vocab;
        double mx = l[0], z = 0;
        for (int t = 1; t < n_vocab; t++) mx = l[t] > mx ? l[t] : mx;
        for (int t = 0; t < n_vocab; t++) z += exp(l[t] - mx);
        for (int t = 0; t < n_vocab; t++) sum += 0.5 * fabs(exp(l[t] - mx) / z - probs[pos * n_vocab + t]);
    }
    return sum / n_pos;
}

static float *kite_logits_of(const char *model, const int32_t *ids, int n_ids, int n_vocab) {
    kite_model *km;
    kite_model_params mp = kite_model_default_params();
    char err[1024];
    if (kite_model_open(&km, model, &mp, err, sizeof err)) fail_msg("kite cannot open %s: %s", model, err);
    kite_session_params sp = kite_session_default_params();
    kite_session *s;
    assert_int_equal(kite_session_open(&s, km, &sp, err, sizeof err), 0);
    float *logits = malloc((size_t)n_ids * n_vocab * 4);
    assert_int_equal(kite_eval(s, ids, (size_t)n_ids, logits, err, sizeof err), 0);
    kite_session_free(s);
    kite_model_free(km);
    return logits;
}

static void test_q4_k_m_runs_in_llama_cpp_and_kite(void **state) {
    (void)state;
    char model[600], req[600], out_q[600], out_f[600], cmd[2400];
    snprintf(model, sizeof model, "%s/stories-Q4_K_M-kite.gguf", g_dir);
    snprintf(req, sizeof req, "%s/probs.json", g_dir);
    snprintf(out_q, sizeof out_q, "%s/probs-q", g_dir);
    snprintf(out_f, sizeof out_f, "%s/probs-f", g_dir);
    static const int32_t ids[] = {1, 403, 407, 261, 378, 285, 270, 263, 301, 313, 429, 263};
    enum { N_IDS = sizeof ids / sizeof ids[0], N_VOCAB = 512 };
    FILE *f = fopen(req, "w");
    assert_non_null(f);
    fprintf(f, "{\"threads\": 2, \"n_ctx\": 64, \"jobs\": [");
    const char *jobs[2][2] = {{model, out_q}, {g_stories, out_f}};
    for (int j = 0; j < 2; j++) {
        fprintf(f, "%s{\"model\": \"%s\", \"out\": \"%s\", \"prompts\": [{\"text\": \"\", \"ids\": [", j ? "," : "", jobs[j][0], jobs[j][1]);
        for (int i = 0; i < N_IDS; i++) fprintf(f, "%s%d", i ? "," : "", ids[i]);
        fprintf(f, "]}]}");
    }
    fprintf(f, "]}\n");
    fclose(f);
    const char *node = getenv("KITE_NODE");
    snprintf(cmd, sizeof cmd, "'%s' '%s/tests/oracle/llamacpp_probs.mjs' '%s'", node && *node ? node : "node",
             getenv("KITE_SOURCE_DIR"), req);
    if (system(cmd) != 0) fail_msg("llama.cpp could not run kite's Q4_K_M file (%s)", cmd);
    kite_mapped_file pq, pf;
    kite_error e = {0};
    char bin[700];
    snprintf(bin, sizeof bin, "%s.bin", out_q);
    assert_int_equal(kite_map_file(&pq, bin, &e), 0);
    snprintf(bin, sizeof bin, "%s.bin", out_f);
    assert_int_equal(kite_map_file(&pf, bin, &e), 0);
    assert_int_equal(pq.size, (size_t)N_IDS * N_VOCAB * 4);
    assert_int_equal(pf.size, (size_t)N_IDS * N_VOCAB * 4);

    float *kq = kite_logits_of(model, ids, N_IDS, N_VOCAB);
    float *kf = kite_logits_of(g_stories, ids, N_IDS, N_VOCAB);
    const double engines_q = mean_tv_distance(kq, (const float *)pq.data, N_IDS, N_VOCAB);
    const double engines_f = mean_tv_distance(kf, (const float *)pf.data, N_IDS, N_VOCAB);
    const double quantization = mean_tv_distance(kf, (const float *)pq.data, N_IDS, N_VOCAB);
    print_message("mean total variation distance: kite vs llama.cpp on kite's Q4_K_M file %.2e, on the F32 source %.2e; "
                  "kite F32 vs llama.cpp Q4_K_M %.2e\n", engines_q, engines_f, quantization);
    /* Both engines run the file; they agree on it far better than it agrees with its F32 source (what
     * wrong blocks or a wrong type would show). On F32 the engines agree closely; on Q4_K_M llama.cpp also rounds activations to 8 bits for its dot products, so the gap is wider. */
    assert_true(engines_f < 2e-3);
    assert_true(engines_q < quantization / 4);
    free(kq), free(kf);
    kite_unmap_file(&pq);
    kite_unmap_file(&pf);
}

/* Mean over positions of KL(p || q) of the softmaxes of two logit arrays. */
static double mean_kl(const float *lp, const float *lq, int n_pos, int n_vocab) {
    double sum = 0;
    for (int pos = 0; pos < n_pos; pos++) {
        const float *a = lp + pos * n_vocab, *b = lq + pos * n_vocab;
        double ma = a[0], mb = b[0], za = 0, zb = 0;
        for (int t = 1; t < n_vocab; t++) ma = a[t] > ma ? a[t] : ma, mb = b[t] > mb ? b[t] : mb;
        for (int t = 0; t < n_vocab; t++) za += exp(a[t] - ma), zb += exp(b[t] - mb);
        for (int t = 0; t < n_vocab; t++) {
            const double la = a[t] - ma - log(za), lb = b[t] - mb - log(zb);
            sum += exp(la) * (la - lb);
        }
    }
    return sum / n_pos;
}

/* kite's trellis mix end to end: `KT2_5_M` gives each layer matrix of the tiny model (256 and 512 columns)
 * KT3 or KT2 (plain or rotated, kite_kt_choose's pick), the embeddings Q4_K and the head Q6_K; kite runs the
 * file, and its next-token distributions stay closer to the F32 model's (KL divergence) than those of
 * kite's Q2_K file (2.6-3.4 bits per weight in llama.cpp's recipe). */
static void test_trellis_mix_runs(void **state) {
    (void)state;
    static const int32_t ids[] = {1, 403, 407, 261, 378, 285, 270, 263, 301, 313, 429, 263};
    enum { N_IDS = sizeof ids / sizeof ids[0], N_VOCAB = 512 };
    static const char *const types[] = {"KT2_5_M", "Q2_K", "Q3_K_M"};
    char out[3][600], err[1024];
    double kl[3];
    float *kf = kite_logits_of(g_tiny, ids, N_IDS, N_VOCAB);
    for (int i = 0; i < 3; i++) {
        snprintf(out[i], sizeof out[i], "%s/tiny-%s.gguf", g_dir, types[i]);
        kite_quantize_params p = kite_quantize_default_params();
        p.type = types[i];
        p.n_threads = 2;
        if (kite_quantize(g_tiny, out[i], &p, err, sizeof err)) fail_msg("kite_quantize tiny %s: %s", types[i], err);
        float *kq = kite_logits_of(out[i], ids, N_IDS, N_VOCAB);
        kl[i] = mean_kl(kf, kq, N_IDS, N_VOCAB);
        free(kq);
    }
    print_message("tiny model, mean KL divergence from F32: KT2_5_M %.3e, Q2_K %.3e, Q3_K_M %.3e\n", kl[0], kl[1], kl[2]);
    assert_true(kl[0] > 0 && kl[0] < kl[1]);
    file_view v;
    view_open(&v, out[0]);
    int n_trellis = 0, n_rotated = 0;
    for (int64_t i = 0; i < kite_gguf_n_tensors(v.g); i++) {
        const kite_gguf_tensor *t = kite_gguf_tensor_at(v.g, i);
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        const uint32_t plain = kite_kt_plain_type(t->type);
        if (strstr(name, ".attn_q.") || strstr(name, ".attn_k.") || strstr(name, ".attn_v.") ||
            strstr(name, ".attn_output.") || strstr(name, ".ffn_down."))
            assert_int_equal(plain, KITE_TYPE_KT3);
        else if (strstr(name, ".ffn_gate.") || strstr(name, ".ffn_up."))
            assert_int_equal(plain, KITE_TYPE_KT2);
        else if (!strcmp(name, "token_embd.weight"))
            assert_int_equal(t->type, KITE_TYPE_Q4_K);
        else if (!strcmp(name, "output.weight"))
            assert_int_equal(t->type, KITE_TYPE_Q6_K);
        n_trellis += kite_is_trellis(t->type);
        n_rotated += kite_kt_is_rotated(t->type);
    }
    print_message("%d trellis matrices, %d of them rotated\n", n_trellis, n_rotated);
    assert_int_equal(n_trellis, 14); /* 2 layers x 7 matrices */
    view_close(&v);
    /* the trellis file as a source (its tensors decoded through kite_kt_dequantize): refused without
     * --allow-requantize, and with it a Q8_0 file that keeps KT2_5_M's distributions */
    char re[600];
    snprintf(re, sizeof re, "%s/tiny-kt-q8_0.gguf", g_dir);
    kite_quantize_params p = kite_quantize_default_params();
    p.type = "Q8_0";
    assert_int_equal(kite_quantize(out[0], re, &p, err, sizeof err), KITE_ERR_UNSUPPORTED);
    p.allow_requantize = true;
    if (kite_quantize(out[0], re, &p, err, sizeof err)) fail_msg("requantizing the KT2_5_M file: %s", err);
    float *kt = kite_logits_of(out[0], ids, N_IDS, N_VOCAB), *k8 = kite_logits_of(re, ids, N_IDS, N_VOCAB);
    const double kl_re = mean_kl(kt, k8, N_IDS, N_VOCAB);
    print_message("KT2_5_M requantized to Q8_0: mean KL from the KT2_5_M file %.3e\n", kl_re);
    assert_true(kl_re < kl[0] / 4);
    free(kt), free(k8);
    unlink(re);
    free(kf);
    for (int i = 0; i < 3; i++) unlink(out[i]);
}

/* ---- 4. bad input and failed writes -------------------------------------------------------------- */

static bool file_exists(const char *p) { return access(p, F_OK) == 0; }

/* No file beside out whose name starts with out's (the temporary file was removed). */
static void assert_no_leftovers(const char *out) {
    char cmd[1300];
    snprintf(cmd, sizeof cmd, "ls '%s'* >/dev/null 2>&1", out);
    assert_int_not_equal(system(cmd), 0);
}

static bool fail_write(const char *tmp) {
    assert_true(file_exists(tmp)); /* the whole file was there, under the temporary name */
    return false;
}

static bool cancel_at_third(void *user_data, int64_t index, int64_t n, const char *name, const char *type) {
    (void)user_data, (void)n, (void)name, (void)type;
    return index < 2;
}

static void test_bad_input_and_failed_writes(void **state) {
    (void)state;
    char out[600], err[1024], text[600];
    snprintf(out, sizeof out, "%s/bad.gguf", g_dir);
    kite_quantize_params p = kite_quantize_default_params();
    p.type = "Q4_K_M";

    assert_int_equal(kite_quantize("/nonexistent/model.gguf", out, &p, err, sizeof err), KITE_ERR_IO);
    assert_non_null(strstr(err, "/nonexistent/model.gguf"));
    snprintf(text, sizeof text, "%s/not-a-model.txt", g_dir);
    FILE *f = fopen(text, "w");
    fputs("hello", f);
    fclose(f);
    assert_int_equal(kite_quantize(text, out, &p, err, sizeof err), KITE_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "neither a GGUF file nor a llama2.c checkpoint"));
    p.type = "Q7_K";
    assert_int_equal(kite_quantize(g_tiny, out, &p, err, sizeof err), KITE_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "Q7_K"));
    p.type = "Q4_K_M";
    assert_int_equal(kite_quantize(g_tiny, "/nonexistent-dir/out.gguf", &p, err, sizeof err), KITE_ERR_IO);
    assert_non_null(strstr(err, "/nonexistent-dir/out.gguf"));
    p.imatrix_path = "/nonexistent/imatrix.gguf";
    assert_int_equal(kite_quantize(g_tiny, out, &p, err, sizeof err), KITE_ERR_IO);
    p.imatrix_path = NULL;
    assert_no_leftovers(out);

    /* a file already under out is kept whole when a run fails */
    f = fopen(out, "w");
    fputs("previous", f);
    fclose(f);
    kite_quantize_write_hook = fail_write;
    assert_int_equal(kite_quantize(g_tiny, out, &p, err, sizeof err), KITE_ERR_IO);
    kite_quantize_write_hook = NULL;
    assert_non_null(strstr(err, "failed"));
    struct stat st;
    assert_int_equal(stat(out, &st), 0);
    assert_int_equal(st.st_size, 8);
    unlink(out);
    assert_no_leftovers(out);

    /* a cancelled run */
    p.progress = cancel_at_third;
    assert_int_equal(kite_quantize(g_tiny, out, &p, err, sizeof err), KITE_ERR_CANCELLED);
    p.progress = NULL;
    assert_no_leftovers(out);

    /* a full disk: a file-size limit makes the writes fail part-way (EFBIG) */
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit rl = {200 * 1024, 200 * 1024};
        setrlimit(RLIMIT_FSIZE, &rl);
        int rc = kite_quantize(g_tiny, out, &p, err, sizeof err);
        _exit(rc == KITE_ERR_IO && strstr(err, "failed") ? 0 : 1);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_no_leftovers(out);

    /* shapes no K-quant fits fall back as documented (stories260K: rows of 64 and 172) */
    p.type = "Q4_K_M";
    assert_int_equal(kite_quantize(g_stories, out, &p, err, sizeof err), 0);
    file_view v;
    view_open(&v, out);
    const kite_gguf_tensor *down = kite_gguf_find_tensor(v.g, "blk.0.ffn_down.weight");
    const kite_gguf_tensor *q = kite_gguf_find_tensor(v.g, "blk.0.attn_q.weight");
    const kite_gguf_tensor *norm = kite_gguf_find_tensor(v.g, "blk.0.attn_norm.weight");
    assert_int_equal(down->type, KITE_TYPE_F16); /* 172 columns: no 32-block fits either */
    assert_int_equal(q->type, KITE_TYPE_Q5_0);   /* Q4_K falls back to Q5_0 */
    assert_int_equal(norm->type, KITE_TYPE_F32); /* 1-D: kept */
    view_close(&v);
    unlink(out);
}

/* ---- setup --------------------------------------------------------------------------------------- */

static int setup(void **state) {
    (void)state;
    const char *lib_dir = getenv("KITE_LLAMA_LIB_DIR");
    if (!lib_dir || !llama_lib_open(&g_lib, lib_dir)) {
        fprintf(stderr, "test_quantize: %s\n", lib_dir ? g_lib.error : "KITE_LLAMA_LIB_DIR is not set");
        return -1;
    }
    snprintf(g_dir, sizeof g_dir, "/tmp/kite-test-quantize-XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    snprintf(g_stories, sizeof g_stories, "%s/models/tinystories-tok512/stories260K.gguf", data_dir());
    snprintf(g_tiny, sizeof g_tiny, "%s/tiny-f32.gguf", g_dir);
    char tok[512], err[1024];
    snprintf(tok, sizeof tok, "%s/models/tinystories-tok512/tok512.bin", data_dir());
    kite_random_model_params rp = {.shape = "tiny", .type = "f32", .tokenizer_path = tok, .seed = 7};
    if (kite_write_random_model(g_tiny, &rp, err, sizeof err)) {
        fprintf(stderr, "test_quantize: %s\n", err);
        return -1;
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_blocks_match_ggml),
        cmocka_unit_test(test_imatrix_read_both_forms),
        cmocka_unit_test(test_files_match_llama_quantize),
        cmocka_unit_test(test_files_with_imatrix_match),
        cmocka_unit_test(test_requantize_only_when_allowed),
        cmocka_unit_test(test_llama2c_source_matches_converter),
        cmocka_unit_test(test_hf_folder_matches_converter),
        cmocka_unit_test(test_q4_k_m_runs_in_llama_cpp_and_kite),
        cmocka_unit_test(test_trellis_mix_runs),
        cmocka_unit_test(test_bad_input_and_failed_writes),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
