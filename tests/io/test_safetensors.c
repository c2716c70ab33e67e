/* safetensors parser: hand-built files from the spec, every kind of malformed header, and the real
 * TinyStories-656K file. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "io/mmap.h"
#include "io/safetensors.h"
#include "quant/types.h"
#include "st_writer.h"
#include "test_util.h"

/* Parses a header with `payload_size` zero bytes of data; returns the status, message in e. */
static int parse_header(const char *header, size_t payload_size, kite_error *e) {
    unsigned char *payload = calloc(1, payload_size + 1);
    st_buf b = st_build(header, payload, payload_size);
    kite_safetensors st;
    memset(e, 0, sizeof *e);
    int rc = kite_safetensors_parse(&st, b.data, b.size, "t.safetensors", e);
    if (rc == KITE_OK) kite_safetensors_free(&st);
    free(b.data);
    free(payload);
    return rc;
}

static void expect_fail(const char *header, size_t payload, int status, const char *needle) {
    kite_error e;
    int rc = parse_header(header, payload, &e);
    if (rc != status || !strstr(e.msg, needle)) {
        print_error("header %s: status %d (want %d), message '%s' (want '%s')\n", header, rc, status, e.msg, needle);
        fail();
    }
}

static void test_valid_small(void **state) {
    (void)state;
    /* two tensors: a [2,3] F32 matrix (24 bytes) then a [4] BF16 vector (8 bytes). */
    const char *header = "{\"__metadata__\":{\"format\":\"pt\"},"
                         "\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
                         "\"b\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[24,32]},"
                         "\"c\":{\"dtype\":\"F16\",\"shape\":[1,1,1,2],\"data_offsets\":[32,36]}}";
    unsigned char payload[36];
    for (int i = 0; i < 36; i++) payload[i] = (unsigned char)i;
    st_buf b = st_build(header, payload, sizeof payload);
    kite_safetensors st;
    kite_error e = {0};
    assert_int_equal(kite_safetensors_parse(&st, b.data, b.size, "t", &e), KITE_OK);
    assert_int_equal(st.n_tensors, 3);
    assert_int_equal(st.header_size, strlen(header));
    const kite_safetensors_tensor *a = kite_safetensors_find(&st, "a");
    const kite_safetensors_tensor *bb = kite_safetensors_find(&st, "b");
    const kite_safetensors_tensor *c = kite_safetensors_find(&st, "c");
    assert_non_null(a);
    assert_non_null(bb);
    assert_non_null(c);
    assert_null(kite_safetensors_find(&st, "__metadata__"));
    assert_int_equal(a->type, KITE_TYPE_F32);
    assert_int_equal(a->n_dims, 2);
    assert_int_equal(a->ne[0], 3); /* innermost = last JSON entry */
    assert_int_equal(a->ne[1], 2);
    assert_int_equal(a->ne[2], 1);
    assert_int_equal(a->n_bytes, 24);
    assert_int_equal(a->offset, 8 + strlen(header));
    assert_ptr_equal(a->data, b.data + 8 + strlen(header));
    assert_int_equal(bb->type, KITE_TYPE_BF16);
    assert_int_equal(bb->ne[0], 4);
    assert_int_equal(((const unsigned char *)bb->data)[0], 24);
    assert_int_equal(c->type, KITE_TYPE_F16);
    assert_int_equal(c->n_dims, 4);
    assert_int_equal(c->ne[0], 2);
    assert_int_equal(c->ne[3], 1);
    kite_safetensors_free(&st);
    free(b.data);
}

static void test_header_length(void **state) {
    (void)state;
    kite_error e = {0};
    kite_safetensors st;
    unsigned char tiny[7] = {0};
    assert_int_equal(kite_safetensors_parse(&st, tiny, sizeof tiny, "t", &e), KITE_ERR_FORMAT);
    assert_int_equal(kite_safetensors_parse(&st, NULL, 0, "t", &e), KITE_ERR_FORMAT);
    /* header length beyond the file */
    unsigned char buf[64] = {0};
    buf[0] = 100;
    memcpy(buf + 8, "{}", 2);
    assert_int_equal(kite_safetensors_parse(&st, buf, sizeof buf, "t", &e), KITE_ERR_FORMAT);
    assert_non_null(strstr(e.msg, "header length 100"));
    /* absurd header lengths: over 100 MB, and 2^64-1 (must not wrap around) */
    buf[0] = 0; buf[3] = 0x10; /* 0x10000000 = 268 MB */
    assert_int_equal(kite_safetensors_parse(&st, buf, sizeof buf, "t", &e), KITE_ERR_FORMAT);
    assert_non_null(strstr(e.msg, "limit"));
    memset(buf, 0xff, 8);
    assert_int_equal(kite_safetensors_parse(&st, buf, sizeof buf, "t", &e), KITE_ERR_FORMAT);
    /* empty header object: a valid file with no tensors */
    memset(buf, 0, 8);
    buf[0] = 2;
    assert_int_equal(kite_safetensors_parse(&st, buf, 10, "t", &e), KITE_OK);
    assert_int_equal(st.n_tensors, 0);
    kite_safetensors_free(&st);
    /* not JSON / not an object */
    expect_fail("{\"a\":", 0, KITE_ERR_FORMAT, "JSON");
    expect_fail("[1,2]", 0, KITE_ERR_FORMAT, "{");
}

static void test_bad_entries(void **state) {
    (void)state;
    expect_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,16]}}", 8, KITE_ERR_FORMAT, "outside");
    expect_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 8, KITE_ERR_FORMAT, "outside");
    expect_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, KITE_ERR_FORMAT, "outside");
    expect_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 16, KITE_ERR_FORMAT, "need 12");
    expect_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[-1,7]}}", 16, KITE_ERR_FORMAT, "data_offsets");
    expect_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 16, KITE_ERR_FORMAT, "data_offsets");
    expect_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8.0]}}", 16, KITE_ERR_FORMAT, "data_offsets");
    expect_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[2]}}", 16, KITE_ERR_FORMAT, "data_offsets");
    expect_fail("{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 16, KITE_ERR_FORMAT, "shape");
    expect_fail("{\"w\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 16, KITE_ERR_FORMAT, "dtype");
    expect_fail("{\"w\":{\"dtype\":7,\"shape\":[2],\"data_offsets\":[0,8]}}", 16, KITE_ERR_FORMAT, "dtype");
    expect_fail("{\"w\":[1,2]}", 16, KITE_ERR_FORMAT, "not an object");
    expect_fail("{\"\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 16, KITE_ERR_FORMAT, "empty name");
    /* unsupported dtypes name the dtype and the tensor */
    expect_fail("{\"model.x\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,16]}}", 16, KITE_ERR_UNSUPPORTED,
                "'model.x' has dtype I64");
    expect_fail("{\"q\":{\"dtype\":\"F8_E4M3\",\"shape\":[2],\"data_offsets\":[0,2]}}", 16, KITE_ERR_UNSUPPORTED, "F8_E4M3");
    /* dimensions: 0 dims, 5 dims, zero, negative, non-integer, overflowing products */
    expect_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}", 16, KITE_ERR_UNSUPPORTED, "0 dimensions");
    expect_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1],\"data_offsets\":[0,4]}}", 16, KITE_ERR_UNSUPPORTED,
                "5 dimensions");
    expect_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,0],\"data_offsets\":[0,0]}}", 16, KITE_ERR_FORMAT, "shape[1]");
    expect_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 16, KITE_ERR_FORMAT, "shape[0]");
    expect_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[\"2\"],\"data_offsets\":[0,8]}}", 16, KITE_ERR_FORMAT, "shape[0]");
    expect_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}}", 16, KITE_ERR_FORMAT,
                "overflows");
    expect_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904],\"data_offsets\":[0,8]}}", 16, KITE_ERR_FORMAT,
                "overflows");
    expect_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[9223372036854775807],\"data_offsets\":[0,8]}}", 16, KITE_ERR_FORMAT,
                "overflows");
    /* overlapping tensors, and duplicate names */
    expect_fail("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 16, KITE_ERR_FORMAT, "overlap");
    expect_fail("{\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},"
                "\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 16, KITE_ERR_FORMAT, "overlap");
    expect_fail("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 16, KITE_ERR_FORMAT, "duplicate");
    /* adjacent tensors and a gap are fine */
    kite_error e;
    assert_int_equal(parse_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                                  "\"b\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[12,16]}}", 16, &e), KITE_OK);
}

/* Every prefix of a valid file is rejected cleanly (no crash under the sanitizers). */
static void test_truncated(void **state) {
    (void)state;
    const st_tensor ts[] = {{"x", "F32", 2, {3, 5}}, {"y", "BF16", 1, {7}}};
    st_buf b = st_build_tensors(ts, 2);
    kite_safetensors st;
    kite_error e = {0};
    assert_int_equal(kite_safetensors_parse(&st, b.data, b.size, "t", &e), KITE_OK);
    kite_safetensors_free(&st);
    for (size_t len = 0; len < b.size; len++) {
        unsigned char *copy = malloc(len ? len : 1); /* exact-size buffer so ASan sees any over-read */
        memcpy(copy, b.data, len);
        e.msg[0] = 0;
        int rc = kite_safetensors_parse(&st, copy, len, "t", &e);
        if (rc == KITE_OK) {
            print_error("prefix of %zu/%zu bytes parsed\n", len, b.size);
            fail();
        }
        assert_true(e.msg[0] != 0);
        free(copy);
    }
    /* and so is every single-byte corruption of the header length */
    for (int i = 0; i < 8; i++) {
        unsigned char *copy = malloc(b.size);
        memcpy(copy, b.data, b.size);
        copy[i] ^= 0x40;
        assert_int_not_equal(kite_safetensors_parse(&st, copy, b.size, "t", &e), KITE_OK);
        free(copy);
    }
    free(b.data);
}

/* The real TinyStories-656K file: 20 tensors, lm_head [2048,128] first in the data section. */
static void test_real_file(void **state) {
    (void)state;
    kite_mapped_file m;
    kite_error e = {0};
    const char *path = kite_test_data("models/tinystories-656k/model.safetensors");
    assert_int_equal(kite_map_file(&m, path, &e), KITE_OK);
    kite_safetensors st;
    assert_int_equal(kite_safetensors_parse(&st, m.data, m.size, path, &e), KITE_OK);
    assert_int_equal(st.n_tensors, 20);
    /* header length, read independently from the first 8 bytes */
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | m.data[i];
    assert_int_equal(st.header_size, n);
    const kite_safetensors_tensor *t = kite_safetensors_find(&st, "lm_head.weight");
    assert_non_null(t);
    assert_int_equal(t->type, KITE_TYPE_F32);
    assert_int_equal(t->ne[0], 128);
    assert_int_equal(t->ne[1], 2048);
    assert_int_equal(t->offset, 8 + n);
    t = kite_safetensors_find(&st, "model.layers.1.self_attn.k_proj.weight");
    assert_non_null(t);
    assert_int_equal(t->ne[0], 128);
    assert_int_equal(t->ne[1], 64);
    assert_null(kite_safetensors_find(&st, "model.embed_tokens.weight"));
    /* the data section ends exactly at the end of the file */
    uint64_t end = 0;
    for (int64_t i = 0; i < st.n_tensors; i++)
        if (st.tensors[i].offset + st.tensors[i].n_bytes > end) end = st.tensors[i].offset + st.tensors[i].n_bytes;
    assert_int_equal(end, m.size);
    kite_safetensors_free(&st);
    kite_unmap_file(&m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_small), cmocka_unit_test(test_header_length), cmocka_unit_test(test_bad_entries),
        cmocka_unit_test(test_truncated), cmocka_unit_test(test_real_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
