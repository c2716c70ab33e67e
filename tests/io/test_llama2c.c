/* llama2.c legacy checkpoints: the two real tok512 models, a hand-made unshared-classifier file,
 * and malformed headers / truncations. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "io/mmap.h"
#include "model/source_llama2c.h"
#include "quant/types.h"
#include "test_util.h"

typedef struct expect {
    const char *file;
    int32_t dim, hidden, layers, heads, kv_heads, vocab, seq;
} expect;

/* From the table in shared/models/README.md. */
static const expect real_models[] = {
    {"models/tinystories-tok512/stories260K.bin", 64, 172, 5, 8, 4, 512, 512},
    {"models/tinystories-tok512/llama2xs-281K.bin", 64, 192, 5, 8, 4, 512, 256},
};

static void test_real_models(void **state) {
    (void)state;
    for (size_t m = 0; m < sizeof real_models / sizeof real_models[0]; m++) {
        const expect *x = &real_models[m];
        kite_source src;
        kite_error e = {0};
        const char *path = kite_test_data(x->file);
        int rc = kite_source_open_llama2c(&src, path, &e);
        if (rc) print_error("%s: %s\n", path, e.msg);
        assert_int_equal(rc, KITE_OK);
        const kite_hparams *hp = &src.hp;
        assert_string_equal(src.format, "llama2c");
        assert_int_equal(hp->arch, KITE_ARCH_LLAMA);
        assert_int_equal(hp->dim, x->dim);
        assert_int_equal(hp->ffn_dim, x->hidden);
        assert_int_equal(hp->n_layers, x->layers);
        assert_int_equal(hp->n_heads, x->heads);
        assert_int_equal(hp->n_kv_heads, x->kv_heads);
        assert_int_equal(hp->head_dim, x->dim / x->heads);
        assert_int_equal(hp->n_vocab, x->vocab);
        assert_int_equal(hp->n_ctx_train, x->seq);
        assert_float_equal(hp->rms_eps, 1e-5f, 0.0f);
        assert_float_equal(hp->rope_theta, 10000.0f, 0.0f);
        assert_int_equal(hp->rope_layout, KITE_ROPE_INTERLEAVED);
        assert_true(hp->tied_embeddings);
        assert_null(kite_source_find(&src, "output.weight"));
        assert_int_equal(src.n_tensors, 2 + 9 * x->layers);

        /* token_embd starts right after the 28-byte header: compare with the raw bytes */
        FILE *f = fopen(path, "rb");
        assert_non_null(f);
        unsigned char raw[28 + 64];
        assert_int_equal(fread(raw, 1, sizeof raw, f), sizeof raw);
        fseek(f, 0, SEEK_END);
        long file_size = ftell(f);
        fclose(f);
        const kite_tensor *embd = kite_source_find(&src, "token_embd.weight");
        assert_non_null(embd);
        assert_int_equal(embd->type, KITE_TYPE_F32);
        assert_int_equal(embd->ne[0], x->dim);
        assert_int_equal(embd->ne[1], x->vocab);
        assert_memory_equal(embd->data, raw + 28, 64);
        /* output_norm sits just before the two RoPE tables at the end of the file */
        const kite_tensor *norm = kite_source_find(&src, "output_norm.weight");
        const unsigned char *base = embd->data;
        base -= 28;
        long rope_bytes = 2L * x->seq * (x->dim / x->heads / 2) * 4;
        assert_int_equal((const unsigned char *)norm->data - base, file_size - rope_bytes - 4L * x->dim);
        /* a few layer views: blk.0.attn_norm follows the embedding; shapes of the GQA projections */
        assert_int_equal((const unsigned char *)kite_source_find(&src, "blk.0.attn_norm.weight")->data - base,
                         28 + 4L * x->vocab * x->dim);
        assert_int_equal((const unsigned char *)kite_source_find(&src, "blk.1.attn_norm.weight")->data - base,
                         28 + 4L * x->vocab * x->dim + 4L * x->dim);
        const kite_tensor *k = kite_source_find(&src, "blk.4.attn_k.weight");
        assert_int_equal(k->ne[0], x->dim);
        assert_int_equal(k->ne[1], x->dim / x->heads * x->kv_heads);
        const kite_tensor *down = kite_source_find(&src, "blk.2.ffn_down.weight");
        assert_int_equal(down->ne[0], x->hidden);
        assert_int_equal(down->ne[1], x->dim);
        kite_source_close(&src);
    }
}

/* A hand-made file: dim 4, hidden 6, 1 layer, 2 heads, 1 kv head, vocab 5 unshared, seq 3.
 * Every float holds its own index among the floats, so each view's first value shows its offset. */
enum { D = 4, HID = 6, NL = 1, NH = 2, NKV = 1, V = 5, SEQ = 3 };
static const size_t n_floats_small = V * D + NL * D + NL * D * D + 2 * NL * 2 * D + NL * D * D + NL * D + 3 * NL * HID * D +
                                     D + 2 * SEQ * 1 + V * D;

static unsigned char *make_small(size_t *size, int32_t vocab_field) {
    *size = 28 + 4 * n_floats_small;
    unsigned char *b = malloc(*size);
    int32_t header[7] = {D, HID, NL, NH, NKV, vocab_field, SEQ};
    memcpy(b, header, 28);
    for (size_t i = 0; i < n_floats_small; i++) {
        float v = (float)i;
        memcpy(b + 28 + 4 * i, &v, 4);
    }
    return b;
}

static float first(const kite_source *src, const char *name) {
    const kite_tensor *t = kite_source_find(src, name);
    assert_non_null(t);
    float v;
    memcpy(&v, t->data, 4);
    return v;
}

static void test_unshared_classifier(void **state) {
    (void)state;
    size_t size;
    unsigned char *b = make_small(&size, -V);
    kite_source src;
    memset(&src, 0, sizeof src);
    kite_error e = {0};
    int rc = kite_llama2c_parse(&src, b, size, "small", &e);
    if (rc) print_error("%s\n", e.msg);
    assert_int_equal(rc, KITE_OK);
    assert_false(src.hp.tied_embeddings);
    assert_int_equal(src.hp.n_vocab, V);
    assert_int_equal(src.hp.head_dim, 2);
    /* offsets in floats, by the layout: embd 0, rms_att 20, wq 24, wk 40, wv 48, wo 56, rms_ffn 72,
     * w1 76, w2 100, w3 124, rms_final 148, freq 152..157, wcls 158 */
    assert_float_equal(first(&src, "token_embd.weight"), 0, 0);
    assert_float_equal(first(&src, "blk.0.attn_norm.weight"), 20, 0);
    assert_float_equal(first(&src, "blk.0.attn_q.weight"), 24, 0);
    assert_float_equal(first(&src, "blk.0.attn_k.weight"), 40, 0);
    assert_float_equal(first(&src, "blk.0.attn_v.weight"), 48, 0);
    assert_float_equal(first(&src, "blk.0.attn_output.weight"), 56, 0);
    assert_float_equal(first(&src, "blk.0.ffn_norm.weight"), 72, 0);
    assert_float_equal(first(&src, "blk.0.ffn_gate.weight"), 76, 0);
    assert_float_equal(first(&src, "blk.0.ffn_down.weight"), 100, 0);
    assert_float_equal(first(&src, "blk.0.ffn_up.weight"), 124, 0);
    assert_float_equal(first(&src, "output_norm.weight"), 148, 0);
    assert_float_equal(first(&src, "output.weight"), 158, 0);
    assert_int_equal(kite_source_find(&src, "output.weight")->n_bytes, V * D * 4);
    kite_source_close(&src);

    /* the same bytes with a positive vocab have 20 floats too many */
    int32_t shared = V;
    memcpy(b + 20, &shared, 4);
    memset(&src, 0, sizeof src);
    assert_int_equal(kite_llama2c_parse(&src, b, size, "small", &e), KITE_ERR_FORMAT);
    assert_non_null(strstr(e.msg, "implies"));
    kite_source_close(&src);
    assert_int_equal(kite_llama2c_parse(&src, b, size - 80, "small", &e), KITE_OK);
    assert_true(src.hp.tied_embeddings);
    kite_source_close(&src);
    free(b);
}

static void expect_header_fail(int32_t dim, int32_t hidden, int32_t layers, int32_t heads, int32_t kv, int32_t vocab,
                               int32_t seq, const char *needle) {
    size_t size;
    unsigned char *b = make_small(&size, -V);
    int32_t header[7] = {dim, hidden, layers, heads, kv, vocab, seq};
    memcpy(b, header, 28);
    kite_source src;
    memset(&src, 0, sizeof src);
    kite_error e = {0};
    int rc = kite_llama2c_parse(&src, b, size, "hdr", &e);
    kite_source_close(&src);
    free(b);
    if (rc == KITE_OK || !strstr(e.msg, needle)) {
        print_error("header {%d %d %d %d %d %d %d}: rc %d, message '%s' (want '%s')\n", dim, hidden, layers, heads, kv,
                    vocab, seq, rc, e.msg, needle);
        fail();
    }
}

static void test_bad_headers(void **state) {
    (void)state;
    expect_header_fail(0, HID, NL, NH, NKV, -V, SEQ, "dim = 0");
    expect_header_fail(-4, HID, NL, NH, NKV, -V, SEQ, "dim = -4");
    expect_header_fail(1 << 30, HID, NL, NH, NKV, -V, SEQ, "dim");
    expect_header_fail(D, 0, NL, NH, NKV, -V, SEQ, "hidden_dim");
    expect_header_fail(D, INT32_MAX, NL, NH, NKV, -V, SEQ, "hidden_dim");
    expect_header_fail(D, HID, 0, NH, NKV, -V, SEQ, "n_layers");
    expect_header_fail(D, HID, 100000, NH, NKV, -V, SEQ, "n_layers");
    expect_header_fail(D, HID, NL, 0, NKV, -V, SEQ, "n_heads");
    expect_header_fail(D, HID, NL, 3, 1, -V, SEQ, "not a multiple of n_heads");
    expect_header_fail(D, HID, NL, NH, 3, -V, SEQ, "n_kv_heads");
    expect_header_fail(8, HID, NL, 4, 3, -V, SEQ, "not a multiple of n_kv_heads");
    expect_header_fail(D, HID, NL, 4, 1, -V, SEQ, "odd");
    expect_header_fail(D, HID, NL, NH, NKV, 0, SEQ, "vocab_size");
    expect_header_fail(D, HID, NL, NH, NKV, INT32_MIN, SEQ, "vocab_size");
    expect_header_fail(D, HID, NL, NH, NKV, INT32_MAX, SEQ, "vocab_size");
    expect_header_fail(D, HID, NL, NH, NKV, -V, 0, "seq_len");
    expect_header_fail(D, HID, NL, NH, NKV, -V, -1, "seq_len");
    /* plausible header, wrong size: both sizes in the message (28 + 4 * 190 floats vs 28 + 4 * 178) */
    expect_header_fail(D, HID + 1, NL, NH, NKV, -V, SEQ, "implies 788 bytes but the file has 740");
    /* largest allowed dims: the size is computed without overflow and simply does not match */
    expect_header_fail(1 << 16, 1 << 20, 1024, 1024, 1024, -(1 << 24), 1 << 24, "implies");

    /* version 1/2 exports */
    unsigned char v1[256] = {0};
    uint32_t magic = KITE_LLAMA2C_MAGIC;
    int32_t version = 2;
    memcpy(v1, &magic, 4);
    memcpy(v1 + 4, &version, 4);
    kite_source src;
    memset(&src, 0, sizeof src);
    kite_error e = {0};
    assert_int_equal(kite_llama2c_parse(&src, v1, sizeof v1, "v2.bin", &e), KITE_ERR_UNSUPPORTED);
    assert_non_null(strstr(e.msg, "version 2"));
    kite_source_close(&src);

    /* a missing file */
    assert_int_equal(kite_source_open_llama2c(&src, "/nonexistent/kite/model.bin", &e), KITE_ERR_IO);
    assert_non_null(strstr(e.msg, "/nonexistent/kite/model.bin"));
}

/* Every short prefix of the real checkpoint, then a spread of longer ones, and one byte too many. */
static void test_truncated(void **state) {
    (void)state;
    kite_mapped_file m;
    kite_error e = {0};
    assert_int_equal(kite_map_file(&m, kite_test_data(real_models[0].file), &e), KITE_OK);
    for (size_t len = 0; len <= m.size + 1; len += len < 512 ? 1 : 4093) {
        if (len == m.size) continue;
        size_t n = len < m.size ? len : m.size + 1;
        unsigned char *copy = calloc(1, n ? n : 1);
        memcpy(copy, m.data, n < m.size ? n : m.size);
        kite_source src;
        memset(&src, 0, sizeof src);
        e.msg[0] = 0;
        int rc = kite_llama2c_parse(&src, copy, n, "t.bin", &e);
        kite_source_close(&src);
        free(copy);
        if (rc == KITE_OK) {
            print_error("%zu of %zu bytes parsed\n", n, m.size);
            fail();
        }
        assert_true(e.msg[0] != 0);
    }
    kite_unmap_file(&m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_real_models), cmocka_unit_test(test_unshared_classifier), cmocka_unit_test(test_bad_headers),
        cmocka_unit_test(test_truncated),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
