/* Tensor types: the traits table, block layouts decoded element by element from the format definition,
 * quantizer and dequantizer outputs against ggml's (hashes of ggml's own results), round-trip error
 * bounds, kite_ref_dot, and exhaustive fp16/bf16 conversions. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "base/fp16.h"
#include "quant/blocks.h"
#include "quant/types.h"
#include "quant_inputs.h"

static const uint32_t all_types[] = {
    KITE_TYPE_F32, KITE_TYPE_F16, KITE_TYPE_BF16, KITE_TYPE_Q4_0, KITE_TYPE_Q4_1, KITE_TYPE_Q5_0,
    KITE_TYPE_Q5_1, KITE_TYPE_Q8_0, KITE_TYPE_Q8_1, KITE_TYPE_Q2_K, KITE_TYPE_Q3_K, KITE_TYPE_Q4_K,
    KITE_TYPE_Q5_K, KITE_TYPE_Q6_K, KITE_TYPE_Q8_K,
};
#define N_TYPES (sizeof all_types / sizeof all_types[0])

static const kite_type_traits *tr(uint32_t type) {
    const kite_type_traits *t = kite_type_get(type);
    assert_non_null(t);
    return t;
}

/* ---- traits ------------------------------------------------------------------------------------- */

static void test_traits_table(void **state) {
    (void)state;
    /* Names, block sizes and bytes as in ggml's type_traits table. */
    static const struct { uint32_t id; const char *name; int block; size_t bytes; } want[] = {
        {0, "f32", 1, 4}, {1, "f16", 1, 2}, {30, "bf16", 1, 2}, {2, "q4_0", 32, 18}, {3, "q4_1", 32, 20},
        {6, "q5_0", 32, 22}, {7, "q5_1", 32, 24}, {8, "q8_0", 32, 34}, {9, "q8_1", 32, 36},
        {10, "q2_K", 256, 84}, {11, "q3_K", 256, 110}, {12, "q4_K", 256, 144}, {13, "q5_K", 256, 176},
        {14, "q6_K", 256, 210}, {15, "q8_K", 256, 292},
    };
    bool known[64] = {0};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const kite_type_traits *t = tr(want[i].id);
        assert_string_equal(t->name, want[i].name);
        assert_int_equal(t->block_size, want[i].block);
        assert_int_equal(t->block_bytes, want[i].bytes);
        assert_non_null(t->to_float);
        assert_non_null(t->from_float);
        known[want[i].id] = true;
        assert_int_equal(kite_type_row_bytes(want[i].id, want[i].block * 3), want[i].bytes * 3);
        assert_int_equal(kite_type_row_bytes(want[i].id, 0), 0);
        if (want[i].block > 1) assert_int_equal(kite_type_row_bytes(want[i].id, want[i].block + 1), 0);
    }
    /* GGML ids kite does not run (q4_2/q4_3 gaps, iq*, i8..i64, f64, tq*, mxfp4) are unknown. */
    for (uint32_t id = 0; id < 64; id++)
        if (!known[id]) assert_null(kite_type_get(id));
    assert_null(kite_type_get(UINT32_MAX));
    assert_null(kite_type_get(KITE_TYPE_COUNT));
    assert_int_equal(kite_type_row_bytes(4, 32), 0);
    assert_int_equal(kite_type_row_bytes(KITE_TYPE_F32, -4), 0);

    /* Field offsets of the k-quant blocks, from ggml-common.h. */
    assert_int_equal(offsetof(kite_block_q2_K, qs), 16);
    assert_int_equal(offsetof(kite_block_q2_K, d), 80);
    assert_int_equal(offsetof(kite_block_q3_K, qs), 32);
    assert_int_equal(offsetof(kite_block_q3_K, scales), 96);
    assert_int_equal(offsetof(kite_block_q3_K, d), 108);
    assert_int_equal(offsetof(kite_block_q4_K, scales), 4);
    assert_int_equal(offsetof(kite_block_q4_K, qs), 16);
    assert_int_equal(offsetof(kite_block_q5_K, qh), 16);
    assert_int_equal(offsetof(kite_block_q5_K, qs), 48);
    assert_int_equal(offsetof(kite_block_q6_K, qh), 128);
    assert_int_equal(offsetof(kite_block_q6_K, scales), 192);
    assert_int_equal(offsetof(kite_block_q6_K, d), 208);
    assert_int_equal(offsetof(kite_block_q8_K, qs), 4);
    assert_int_equal(offsetof(kite_block_q8_K, bsums), 260);
    assert_int_equal(offsetof(kite_block_q5_0, qh), 2);
    assert_int_equal(offsetof(kite_block_q5_1, qs), 8);
}

/* ---- hand-built blocks, decoded from the format definition ------------------------------------- */

#define H_1 0x3C00     /* fp16 1.0 */
#define H_HALF 0x3800  /* 0.5 */
#define H_QUARTER 0x3400
#define H_EIGHTH 0x3000
#define H_2 0x4000
#define H_M1 0xBC00    /* -1.0 */
#define H_1_5 0x3E00   /* 1.5 */

static void expect_floats(const float *got, const float *want, int64_t n, const char *what) {
    for (int64_t i = 0; i < n; i++) {
        if (memcmp(&got[i], &want[i], 4) != 0 && !(got[i] == 0 && want[i] == 0)) {
            print_error("%s: element %lld is %.9g, want %.9g\n", what, (long long)i, got[i], want[i]);
            fail();
        }
    }
}

static void test_plain_float_blocks(void **state) {
    (void)state;
    const uint16_t halves[] = {0x3C00, 0xC000, 0x0001, 0x8001, 0x7BFF, 0x0400, 0x03FF, 0x3555};
    const float want_h[] = {1.0f, -2.0f, 0x1p-24f, -0x1p-24f, 65504.0f, 0x1p-14f, 1023 * 0x1p-24f, 0x1.554p-2f};
    float y[8];
    tr(KITE_TYPE_F16)->to_float(halves, y, 8);
    expect_floats(y, want_h, 8, "f16");
    const uint16_t bf[] = {0x3F80, 0xC040, 0x0001, 0x7F7F, 0x3E20};
    const float want_bf[] = {1.0f, -3.0f, 0x1p-133f, 0x1.FEp127f, 0.15625f};
    tr(KITE_TYPE_BF16)->to_float(bf, y, 5);
    expect_floats(y, want_bf, 5, "bf16");
    const float f[3] = {1.25f, -0.0f, 3e38f};
    tr(KITE_TYPE_F32)->to_float(f, y, 3);
    assert_memory_equal(y, f, sizeof f);
}

static void test_q4_q5_q8_blocks(void **state) {
    (void)state;
    float y[32], want[32];
    /* q4_0: value = d * (nibble - 8); element j in the low nibble of qs[j], j + 16 in the high one. */
    kite_block_q4_0 b40 = {.d = H_HALF};
    for (int j = 0; j < 16; j++) b40.qs[j] = (uint8_t)(j | ((15 - j) << 4));
    for (int j = 0; j < 16; j++) { want[j] = 0.5f * (j - 8); want[j + 16] = 0.5f * (7 - j); }
    tr(KITE_TYPE_Q4_0)->to_float(&b40, y, 32);
    expect_floats(y, want, 32, "q4_0");

    /* q4_1: value = d * nibble + m. */
    kite_block_q4_1 b41 = {.d = H_QUARTER, .m = H_M1};
    for (int j = 0; j < 16; j++) b41.qs[j] = (uint8_t)(j | ((j ^ 5) << 4));
    for (int j = 0; j < 16; j++) { want[j] = 0.25f * j - 1; want[j + 16] = 0.25f * (j ^ 5) - 1; }
    tr(KITE_TYPE_Q4_1)->to_float(&b41, y, 32);
    expect_floats(y, want, 32, "q4_1");

    /* q5_0: 5-bit q = nibble | (bit i of the little-endian u32 qh) << 4; value = d * (q - 16). */
    const uint32_t qh = 0xA5A5F00Fu;
    kite_block_q5_0 b50 = {.d = H_2};
    memcpy(b50.qh, &qh, 4);
    for (int j = 0; j < 16; j++) b50.qs[j] = (uint8_t)(((j * 3) & 0xF) | (((j * 5) & 0xF) << 4));
    for (int i = 0; i < 32; i++) {
        int nib = i < 16 ? (b50.qs[i] & 0xF) : (b50.qs[i - 16] >> 4);
        int q = nib | (int)((qh >> i) & 1) << 4;
        want[i] = 2.0f * (q - 16);
    }
    tr(KITE_TYPE_Q5_0)->to_float(&b50, y, 32);
    expect_floats(y, want, 32, "q5_0");

    /* q5_1: value = d * q + m. */
    kite_block_q5_1 b51 = {.d = H_HALF, .m = H_1_5};
    memcpy(b51.qh, &qh, 4);
    memcpy(b51.qs, b50.qs, 16);
    for (int i = 0; i < 32; i++) {
        int nib = i < 16 ? (b51.qs[i] & 0xF) : (b51.qs[i - 16] >> 4);
        int q = nib | (int)((qh >> i) & 1) << 4;
        want[i] = 0.5f * q + 1.5f;
    }
    tr(KITE_TYPE_Q5_1)->to_float(&b51, y, 32);
    expect_floats(y, want, 32, "q5_1");

    /* q8_0 and q8_1: value = d * q. */
    kite_block_q8_0 b80 = {.d = H_EIGHTH};
    kite_block_q8_1 b81 = {.d = H_QUARTER, .s = 0x1234};
    for (int j = 0; j < 32; j++) {
        b80.qs[j] = (int8_t)(j * 8 - 128);
        b81.qs[j] = (int8_t)(j - 16);
    }
    for (int j = 0; j < 32; j++) want[j] = 0.125f * (j * 8 - 128);
    tr(KITE_TYPE_Q8_0)->to_float(&b80, y, 32);
    expect_floats(y, want, 32, "q8_0");
    for (int j = 0; j < 32; j++) want[j] = 0.25f * (j - 16);
    tr(KITE_TYPE_Q8_1)->to_float(&b81, y, 32);
    expect_floats(y, want, 32, "q8_1");

    /* Two blocks in a row: the second starts right after the first's 34 bytes. */
    kite_block_q8_0 two[2] = {b80, b80};
    two[1].d = H_1;
    float y2[64];
    tr(KITE_TYPE_Q8_0)->to_float(two, y2, 64);
    for (int j = 0; j < 32; j++) assert_true(y2[32 + j] == (float)(j * 8 - 128));
}

/* k-quant super-blocks: 256 elements. The expected value of element e is computed from the layout
 * description, one element at a time (not by the decoder's loop structure). */

/* 2-bit field of element e in a q2_K/q3_K qs array: byte 32 * (e / 128) + e % 32, bits 2 * ((e % 128) / 32). */
static int k_q2(const uint8_t *qs, int e) { return (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3; }

static void test_q2_K_block(void **state) {
    (void)state;
    kite_block_q2_K b;
    qi_bytes(b.qs, sizeof b.qs, 21);
    for (int s = 0; s < 16; s++) b.scales[s] = (uint8_t)((s % 16) | ((15 - s) << 4));
    b.d = H_1;
    b.dmin = H_HALF;
    float y[256], want[256];
    for (int e = 0; e < 256; e++) {
        int s = e / 16, sc = b.scales[s] & 0xF, m = b.scales[s] >> 4;
        want[e] = 1.0f * sc * k_q2(b.qs, e) - 0.5f * m;
    }
    tr(KITE_TYPE_Q2_K)->to_float(&b, y, 256);
    expect_floats(y, want, 256, "q2_K");
}

static void test_q3_K_block(void **state) {
    (void)state;
    kite_block_q3_K b;
    qi_bytes(b.qs, sizeof b.qs, 31);
    qi_bytes(b.hmask, sizeof b.hmask, 32);
    /* Sixteen 6-bit scales s_j (stored with a +32 bias): low 4 bits in byte j (j < 8, low nibble) or byte
     * j - 8 (high nibble); high 2 bits in byte 8 + j % 4 at bit 2 * (j / 4). */
    int s6[16];
    memset(b.scales, 0, sizeof b.scales);
    for (int j = 0; j < 16; j++) {
        s6[j] = (j * 7 + 3) % 64;
        if (j < 8) b.scales[j] |= (uint8_t)(s6[j] & 0xF);
        else b.scales[j - 8] |= (uint8_t)((s6[j] & 0xF) << 4);
        b.scales[8 + j % 4] |= (uint8_t)((s6[j] >> 4) << (2 * (j / 4)));
    }
    b.d = H_QUARTER;
    float y[256], want[256];
    for (int e = 0; e < 256; e++) {
        /* 3-bit q = low 2 bits | (bit e / 32 of hmask[e % 32]) << 2; value = d * (s - 32) * (q - 4). */
        int q = k_q2(b.qs, e) | (((b.hmask[e % 32] >> (e / 32)) & 1) << 2);
        want[e] = 0.25f * (s6[e / 16] - 32) * (q - 4);
    }
    tr(KITE_TYPE_Q3_K)->to_float(&b, y, 256);
    expect_floats(y, want, 256, "q3_K");
}

/* Packs eight 6-bit scales and mins into q4_K/q5_K's 12 bytes: sub-blocks 0..3 in the low 6 bits of
 * bytes j (scale) and j + 4 (min); sub-blocks 4..7 keep their low 4 bits in byte j + 4 (scale low,
 * min high nibble) and their top 2 bits in the top 2 bits of bytes j - 4 (scale) and j (min). */
static void pack_k4_scales(uint8_t out[12], const int sc[8], const int mn[8]) {
    memset(out, 0, 12);
    for (int j = 0; j < 4; j++) {
        out[j] = (uint8_t)sc[j];
        out[j + 4] = (uint8_t)mn[j];
    }
    for (int j = 4; j < 8; j++) {
        out[j + 4] = (uint8_t)((sc[j] & 0xF) | ((mn[j] & 0xF) << 4));
        out[j - 4] |= (uint8_t)((sc[j] >> 4) << 6);
        out[j] |= (uint8_t)((mn[j] >> 4) << 6);
    }
}

/* 4-bit field of element e in q4_K/q5_K qs: byte 32 * (e / 64) + e % 32, low nibble for the first 32 of
 * each 64 and high nibble for the next 32. */
static int k_q4(const uint8_t *qs, int e) {
    uint8_t byte = qs[32 * (e / 64) + e % 32];
    return (e % 64) < 32 ? (byte & 0xF) : (byte >> 4);
}

static void test_q4_K_q5_K_blocks(void **state) {
    (void)state;
    const int sc[8] = {63, 1, 17, 32, 48, 5, 60, 33};
    const int mn[8] = {0, 63, 9, 40, 31, 16, 2, 47};
    float y[256], want[256];

    kite_block_q4_K b4;
    pack_k4_scales(b4.scales, sc, mn);
    qi_bytes(b4.qs, sizeof b4.qs, 41);
    b4.d = H_QUARTER;
    b4.dmin = H_EIGHTH;
    for (int e = 0; e < 256; e++) want[e] = 0.25f * sc[e / 32] * k_q4(b4.qs, e) - 0.125f * mn[e / 32];
    tr(KITE_TYPE_Q4_K)->to_float(&b4, y, 256);
    expect_floats(y, want, 256, "q4_K");

    /* q5_K: fifth bit of element e is bit e / 32 of qh[e % 32]. */
    kite_block_q5_K b5;
    pack_k4_scales(b5.scales, sc, mn);
    qi_bytes(b5.qs, sizeof b5.qs, 51);
    qi_bytes(b5.qh, sizeof b5.qh, 52);
    b5.d = H_HALF;
    b5.dmin = H_2;
    for (int e = 0; e < 256; e++) {
        int q = k_q4(b5.qs, e) | (((b5.qh[e % 32] >> (e / 32)) & 1) << 4);
        want[e] = 0.5f * sc[e / 32] * q - 2.0f * mn[e / 32];
    }
    tr(KITE_TYPE_Q5_K)->to_float(&b5, y, 256);
    expect_floats(y, want, 256, "q5_K");
}

static void test_q6_K_q8_K_blocks(void **state) {
    (void)state;
    float y[256], want[256];
    kite_block_q6_K b6;
    qi_bytes(b6.ql, sizeof b6.ql, 61);
    qi_bytes(b6.qh, sizeof b6.qh, 62);
    for (int s = 0; s < 16; s++) b6.scales[s] = (int8_t)(s * 17 - 128);
    b6.d = H_EIGHTH;
    for (int e = 0; e < 256; e++) {
        /* Per 128 elements: quarter g = (e % 128) / 32, l = e % 32; the low 4 bits are in
         * ql[64 * (e / 128) + l + 32 * (g % 2)] (low nibble for g < 2, high for g >= 2); the high 2 bits
         * are bits 2g..2g+1 of qh[32 * (e / 128) + l]. value = d * scale[e / 16] * (q - 32). */
        int g = (e % 128) / 32, l = e % 32;
        uint8_t lb = b6.ql[64 * (e / 128) + l + 32 * (g % 2)];
        int lo = g < 2 ? (lb & 0xF) : (lb >> 4);
        int hi = (b6.qh[32 * (e / 128) + l] >> (2 * g)) & 3;
        want[e] = 0.125f * b6.scales[e / 16] * ((lo | (hi << 4)) - 32);
    }
    tr(KITE_TYPE_Q6_K)->to_float(&b6, y, 256);
    expect_floats(y, want, 256, "q6_K");

    kite_block_q8_K b8;
    b8.d = 0.375f;
    for (int e = 0; e < 256; e++) b8.qs[e] = (int8_t)(e - 128);
    memset(b8.bsums, 0x55, sizeof b8.bsums); /* not used by dequantization */
    for (int e = 0; e < 256; e++) want[e] = 0.375f * (e - 128);
    tr(KITE_TYPE_Q8_K)->to_float(&b8, y, 256);
    expect_floats(y, want, 256, "q8_K");
}

/* Rows at odd addresses decode the same (GGUF alignment may be 1). */
static void test_unaligned_rows(void **state) {
    (void)state;
    for (size_t t = 0; t < N_TYPES; t++) {
        const kite_type_traits *tt = tr(all_types[t]);
        const int64_t n = 512;
        size_t nb = kite_type_row_bytes(all_types[t], n);
        uint8_t *buf = malloc(nb + 1);
        qi_bytes(buf, nb, 77 + t);
        float *a = malloc(n * 4), *b = malloc(n * 4);
        tt->to_float(buf, a, n);
        memmove(buf + 1, buf, nb);
        tt->to_float(buf + 1, b, n);
        assert_int_equal(qi_hash_floats(a, n), qi_hash_floats(b, n));
        free(buf);
        free(a);
        free(b);
    }
}

/* ---- bit-exactness against ggml ----------------------------------------------------------------- */

/* Hashes of ggml's own results on the quant_inputs.h inputs, from libggml-base.so of node-llama-cpp
 * 3.21.1 (llama.cpp CPU build): quantize_row_<type>_ref over qi_fill(x, 4096, kind, 7) for each kind
 * (output buffer zeroed first), and dequantize_row_<type> over qi_bytes(q, bytes of 4096 elements,
 * 1234 + type id) hashed with qi_hash_floats (0: ggml has no dequantize_row for the type). */
static const struct { uint32_t type; uint64_t quantize[QI_KINDS]; uint64_t dequantize; } ggml_hashes[] = {
    {2 /* q4_0 */, {0x7b2a5985b93ec579ull, 0x5057e54e0cca4388ull, 0x178e3898ee7a3bfbull, 0x42cd90235b5741e2ull, 0x60cce9654bff2d03ull, 0x7609da430860543full}, 0x3d57c2f498019adfull},
    {3 /* q4_1 */, {0x4127ca408dd044d1ull, 0xd3eac2fb9f530360ull, 0x172d6995ae95633cull, 0xe0d7ceebc813bb75ull, 0x224b1cdd31449963ull, 0x9b3a310d3947af88ull}, 0xb0098c67a3e2876cull},
    {6 /* q5_0 */, {0x9324dc992f947c13ull, 0x26c2a88ee74373f9ull, 0xedfab6b21fe4a91eull, 0x62950bb4ce991270ull, 0x461f73038533ad44ull, 0xc5e4a3ad385e3a40ull}, 0xfa0bbffa46e6edefull},
    {7 /* q5_1 */, {0xb303cff56261227full, 0x9ad373ab9b157329ull, 0x95009e7b4479b6ceull, 0x6296f5a483023098ull, 0x7bb46e7482a08c82ull, 0xa0e962db1ebf3722ull}, 0xb410b2d7b09774b9ull},
    {8 /* q8_0 */, {0x33b54efb88632424ull, 0x5330c4ad10fbe0acull, 0x225a807192468921ull, 0xfcefe5d403828cbfull, 0xd8a00a29ff8a58fdull, 0xee4b90511abfffe8ull}, 0xf018867925057384ull},
    {9 /* q8_1 */, {0xc293331f7785ebafull, 0xdd77152253535487ull, 0xbeeb30f2f595a2d4ull, 0xa0f694dfdca80bafull, 0x5c6a38a94d3997d0ull, 0xadd884dbd7edd9c6ull}, 0x0000000000000000ull},
    {10 /* q2_K */, {0x40ebcbb0d01bdfa6ull, 0xd22d3317ba071f5aull, 0x33177a89d4761916ull, 0x5c521e6aaf9a5759ull, 0xfd277bb19c00fe05ull, 0x36243e8a110ab9c0ull}, 0xca0e2ebfe9900ed9ull},
    {11 /* q3_K */, {0x8c3ef159620219b8ull, 0x000d52608419a4f8ull, 0x6da4c5a4e5c47b30ull, 0x66703b86ae06c332ull, 0x61f30b79c64ada6dull, 0x2d1891ef4db74b22ull}, 0x791eaa90ff7c16e7ull},
    {12 /* q4_K */, {0xfa3647a818db3affull, 0x21e89d3b8c3608e8ull, 0xb2b055ce423d12b3ull, 0xbae684cf54b0bc24ull, 0xc0d09acfee3d0822ull, 0x9de8c2b6003df359ull}, 0x9dc1e4522bc93526ull},
    {13 /* q5_K */, {0xaf63f08fc1f43173ull, 0xc5490c7a7c232e9full, 0xb58de539643fb314ull, 0xba070bd5efaf0f6bull, 0x3726385cc0f317b8ull, 0xe6c588e59bd7ff0eull}, 0x9b62decb07aa3fb3ull},
    {14 /* q6_K */, {0x7229b0e3fe68dab4ull, 0x5dda019942213d75ull, 0x9d9f1c2c4564598full, 0x6f7f89e67067232cull, 0x1d0169a2a6c633f0ull, 0xed136e7107472f7bull}, 0xc6b94a8161d4ac02ull},
    {15 /* q8_K */, {0x4117e45f50467242ull, 0x9d68414f43b993d1ull, 0x16d32b9ad243c509ull, 0x7a10ed684d23f188ull, 0xa306c8c4775b68f5ull, 0x1fceff705b6fde57ull}, 0xe9b1b5c2b17c224dull},
};

static void test_matches_ggml(void **state) {
    (void)state;
    const int64_t n = 4096;
    float *x = malloc(n * 4), *y = malloc(n * 4);
    uint8_t *q = malloc(n * 2);
    for (size_t i = 0; i < sizeof ggml_hashes / sizeof ggml_hashes[0]; i++) {
        const kite_type_traits *t = tr(ggml_hashes[i].type);
        const size_t nb = kite_type_row_bytes(ggml_hashes[i].type, n);
        for (int kind = 0; kind < QI_KINDS; kind++) {
            qi_fill(x, n, kind, 7);
            memset(q, 0, nb);
            t->from_float(x, q, n);
            if (qi_hash(q, nb, QI_HASH_SEED) != ggml_hashes[i].quantize[kind]) {
                print_error("%s: quantized bytes of input kind %d differ from ggml's\n", t->name, kind);
                fail();
            }
        }
        if (ggml_hashes[i].dequantize) {
            qi_bytes(q, nb, 1234 + ggml_hashes[i].type);
            t->to_float(q, y, n);
            if (qi_hash_floats(y, n) != ggml_hashes[i].dequantize) {
                print_error("%s: dequantized random blocks differ from ggml's\n", t->name);
                fail();
            }
        }
    }
    free(x);
    free(y);
    free(q);
}

/* ---- round trips --------------------------------------------------------------------------------- */

static const float FP16_REL = 1.0f / 2048; /* half an ulp of an fp16 mantissa, relative */

static void round_trip(uint32_t type, const float *x, int64_t n, float *y) {
    const kite_type_traits *t = tr(type);
    uint8_t *q = malloc(kite_type_row_bytes(type, n));
    t->from_float(x, q, n);
    t->to_float(q, y, n);
    free(q);
}

static void test_round_trip_float_types(void **state) {
    (void)state;
    const int64_t n = 4096;
    float *x = malloc(n * 4), *y = malloc(n * 4);
    for (int kind = 0; kind < QI_KINDS; kind++) {
        qi_fill(x, n, kind, 3);
        round_trip(KITE_TYPE_F32, x, n, y);
        assert_memory_equal(x, y, n * 4);
        /* f16 keeps 11 significant bits for normal values: |err| <= |x| * 2^-11; below 2^-14 the
         * spacing is 2^-24, so |err| <= 2^-25. bf16 keeps 8: |err| <= |x| * 2^-8. */
        round_trip(KITE_TYPE_F16, x, n, y);
        for (int64_t i = 0; i < n; i++) assert_true(fabsf(y[i] - x[i]) <= fmaxf(fabsf(x[i]) * FP16_REL, 0x1p-25f));
        round_trip(KITE_TYPE_BF16, x, n, y);
        for (int64_t i = 0; i < n; i++) assert_true(fabsf(y[i] - x[i]) <= fabsf(x[i]) * (1.0f / 256));
    }
    free(x);
    free(y);
}

/* Per-block bounds for the 32-element types, derived from the quantizer (d is the unrounded scale; the
 * fp16 rounding of d and m adds at most |q| * |d| * 2^-11 and |m| * 2^-11):
 *   q8_0: d = amax/127, q = round(x/d):            |err| <= d/2 + 127 d 2^-11
 *   q4_0: |d| = amax/8, q = round(x/d) clamped to 7: |err| <= |d| + 8 |d| 2^-11 (the clamp costs up to one step)
 *   q5_0: |d| = amax/16, clamped to 15:            |err| <= |d| + 16 |d| 2^-11
 *   q4_1: d = (max-min)/15, q = round((x-min)/d):  |err| <= d/2 + 15 d 2^-11 + |min| 2^-11
 *   q5_1: d = (max-min)/31:                        |err| <= d/2 + 31 d 2^-11 + |min| 2^-11
 * Also the mean |err| stays under d/3 (about d/4 expected for uniform rounding error). Tiny inputs
 * (kind 4) are skipped: their scales fall below fp16's range. */
static void test_round_trip_32_element_types(void **state) {
    (void)state;
    const int64_t n = 8192;
    float *x = malloc(n * 4), *y = malloc(n * 4);
    const uint32_t types[] = {KITE_TYPE_Q8_0, KITE_TYPE_Q8_1, KITE_TYPE_Q4_0, KITE_TYPE_Q5_0, KITE_TYPE_Q4_1, KITE_TYPE_Q5_1};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        for (int kind = 0; kind < QI_KINDS; kind++) {
            if (kind == 4) continue;
            qi_fill(x, n, kind, 11);
            round_trip(types[t], x, n, y);
            double sum_err = 0, sum_d = 0;
            for (int64_t b = 0; b < n / 32; b++) {
                const float *xb = x + b * 32, *yb = y + b * 32;
                float amax = 0, mn = xb[0], mx = xb[0];
                for (int j = 0; j < 32; j++) {
                    amax = fmaxf(amax, fabsf(xb[j]));
                    mn = fminf(mn, xb[j]);
                    mx = fmaxf(mx, xb[j]);
                }
                float d, bound;
                switch (types[t]) {
                case KITE_TYPE_Q8_0: case KITE_TYPE_Q8_1: d = amax / 127; bound = d / 2 + 127 * d * FP16_REL; break;
                case KITE_TYPE_Q4_0: d = amax / 8; bound = d + 8 * d * FP16_REL; break;
                case KITE_TYPE_Q5_0: d = amax / 16; bound = d + 16 * d * FP16_REL; break;
                case KITE_TYPE_Q4_1: d = (mx - mn) / 15; bound = d / 2 + 15 * d * FP16_REL + fabsf(mn) * FP16_REL; break;
                default: d = (mx - mn) / 31; bound = d / 2 + 31 * d * FP16_REL + fabsf(mn) * FP16_REL; break;
                }
                bound = bound * 1.0001f + 1e-30f;
                for (int j = 0; j < 32; j++) {
                    float err = fabsf(yb[j] - xb[j]);
                    if (err > bound) {
                        print_error("%s kind %d block %lld: |err| %g > bound %g (d %g)\n", tr(types[t])->name, kind,
                                    (long long)b, err, bound, d);
                        fail();
                    }
                    sum_err += err;
                    sum_d += d;
                }
            }
            assert_true(sum_err <= sum_d / 3);
        }
    }
    free(x);
    free(y);
}

/* K-quants: bounds measured on these inputs with a margin, per super-block of 256:
 * max |err| <= c * amax and RMS(err) <= r * RMS(x). q8_K has a float scale d = amax/127 and exact
 * rounding, so its max error is amax/254. */
static void test_round_trip_k_quants(void **state) {
    (void)state;
    static const struct { uint32_t type; float max_rel, rms_rel; } bounds[] = {
        {KITE_TYPE_Q2_K, 0.50f, 0.36f}, {KITE_TYPE_Q3_K, 0.33f, 0.24f}, {KITE_TYPE_Q4_K, 0.15f, 0.10f},
        {KITE_TYPE_Q5_K, 0.08f, 0.05f}, {KITE_TYPE_Q6_K, 0.025f, 0.03f}, {KITE_TYPE_Q8_K, 1.0f / 254 * 1.0001f, 0.02f},
    };
    const int64_t n = 256 * 64;
    float *x = malloc(n * 4), *y = malloc(n * 4);
    for (size_t t = 0; t < sizeof bounds / sizeof bounds[0]; t++) {
        for (int kind = 0; kind < QI_KINDS; kind++) {
            if (kind == 4 && bounds[t].type != KITE_TYPE_Q8_K) continue;
            qi_fill(x, n, kind, 13);
            round_trip(bounds[t].type, x, n, y);
            double se = 0, sx = 0;
            for (int64_t b = 0; b < n / 256; b++) {
                float amax = 0;
                for (int j = 0; j < 256; j++) amax = fmaxf(amax, fabsf(x[b * 256 + j]));
                for (int j = 0; j < 256; j++) {
                    float err = fabsf(y[b * 256 + j] - x[b * 256 + j]);
                    if (err > bounds[t].max_rel * amax) {
                        print_error("%s kind %d: |err| %g > %g * amax %g\n", tr(bounds[t].type)->name, kind, err,
                                    bounds[t].max_rel, amax);
                        fail();
                    }
                    se += (double)err * err;
                    sx += (double)x[b * 256 + j] * x[b * 256 + j];
                }
            }
            if (sqrt(se / sx) > bounds[t].rms_rel) {
                print_error("%s kind %d: relative RMS error %g > %g\n", tr(bounds[t].type)->name, kind, sqrt(se / sx),
                            bounds[t].rms_rel);
                fail();
            }
        }
    }
    free(x);
    free(y);
}

/* Zeros stay zeros; tiny inputs never blow up; q8_K's bsums are the sums of its quants. */
static void test_special_inputs(void **state) {
    (void)state;
    const int64_t n = 512;
    float x[512], y[512];
    for (size_t t = 0; t < N_TYPES; t++) {
        memset(x, 0, sizeof x);
        round_trip(all_types[t], x, n, y);
        for (int i = 0; i < n; i++) assert_true(y[i] == 0.0f);
        qi_fill(x, n, 4, 5);
        round_trip(all_types[t], x, n, y);
        for (int i = 0; i < n; i++) assert_true(isfinite(y[i]) && fabsf(y[i]) <= 0x1p-19f);
        /* A constant block. */
        for (int i = 0; i < n; i++) x[i] = -0.75f;
        round_trip(all_types[t], x, n, y);
        for (int i = 0; i < n; i++) assert_true(fabsf(y[i] + 0.75f) <= 0.75f * 0.02f);
    }
    kite_block_q8_K b[2];
    qi_fill(x, n, 1, 9);
    tr(KITE_TYPE_Q8_K)->from_float(x, b, n);
    for (int k = 0; k < 2; k++)
        for (int g = 0; g < 16; g++) {
            int sum = 0;
            for (int j = 0; j < 16; j++) sum += b[k].qs[16 * g + j];
            assert_int_equal(b[k].bsums[g], sum);
        }
}

/* ---- kite_ref_dot -------------------------------------------------------------------------------- */

/* The documented order: per chunk (the block, or 32 elements for f32/f16/bf16) a double sum of
 * w[j] * x[j] in element order; chunks added into a float in order. */
static float documented_dot(uint32_t type, const float *w, const float *x, int64_t n) {
    const int64_t chunk = tr(type)->block_size > 1 ? tr(type)->block_size : 32;
    float total = 0;
    for (int64_t s = 0; s < n; s += chunk) {
        double sum = 0;
        for (int64_t j = s; j < s + chunk && j < n; j++) sum += (double)w[j] * (double)x[j];
        total += (float)sum;
    }
    return total;
}

static void test_ref_dot(void **state) {
    (void)state;
    const int64_t lengths[] = {256, 512, 4096, 172, 32 * 7};
    float *w = malloc(4096 * 4), *x = malloc(4096 * 4), *src = malloc(4096 * 4);
    uint8_t *row = malloc(4096 * 4);
    for (size_t t = 0; t < N_TYPES; t++) {
        const kite_type_traits *tt = tr(all_types[t]);
        for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++) {
            const int64_t n = lengths[li];
            if (n % tt->block_size) {
                assert_true(kite_ref_dot(all_types[t], row, x, n) == 0.0f);
                continue;
            }
            qi_fill(src, n, 1, 100 + li);
            qi_fill(x, n, 0, 200 + li);
            tt->from_float(src, row, n);
            tt->to_float(row, w, n);
            double exact = 0, mag = 0;
            for (int64_t j = 0; j < n; j++) {
                exact += (double)w[j] * x[j];
                mag += fabs((double)w[j] * x[j]);
            }
            const float got = kite_ref_dot(all_types[t], row, x, n);
            /* Float accumulation over nc chunks: each addition rounds by at most 2^-24 of the running
             * magnitude, which is at most mag; the chunk sums are exact to about 2^-53. */
            const int64_t nc = (n + (tt->block_size > 1 ? tt->block_size : 32) - 1) / (tt->block_size > 1 ? tt->block_size : 32);
            const double tol = (double)(nc + 1) * 0x1p-24 * mag + 1e-30;
            if (fabs(got - exact) > tol) {
                print_error("%s n=%lld: dot %.9g, exact %.9g, tolerance %g\n", tt->name, (long long)n, got, exact, tol);
                fail();
            }
            /* And bit for bit the documented order, on every call. */
            const float doc = documented_dot(all_types[t], w, x, n);
            assert_memory_equal(&got, &doc, 4);
            const float again = kite_ref_dot(all_types[t], row, x, n);
            assert_memory_equal(&got, &again, 4);
        }
    }
    assert_true(kite_ref_dot(4, row, x, 32) == 0.0f);
    assert_true(kite_ref_dot(KITE_TYPE_F32, row, x, 0) == 0.0f);
    free(w);
    free(x);
    free(src);
    free(row);
}

/* ---- fp16 / bf16 --------------------------------------------------------------------------------- */

/* The IEEE half value of bits h, computed independently with ldexp. */
static double half_value(uint16_t h) {
    int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    double v = exp == 0 ? ldexp(mant, -24) : ldexp(1024 + mant, exp - 25);
    return sign ? -v : v;
}

static void test_fp16_exhaustive(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        const float f = kite_fp16_to_f32((uint16_t)h);
        const int exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
        if (exp == 31) {
            if (mant) {
                assert_true(isnan(f));
                uint16_t back = kite_f32_to_fp16(f);
                assert_true(((back >> 10) & 0x1f) == 31 && (back & 0x3ff) != 0); /* still a NaN */
                assert_int_equal(back & 0x8000, h & 0x8000);
            } else {
                assert_true(isinf(f) && (f < 0) == ((h & 0x8000) != 0));
                assert_int_equal(kite_f32_to_fp16(f), h);
            }
            continue;
        }
        assert_true((double)f == half_value((uint16_t)h));
        assert_int_equal(kite_f32_to_fp16(f), h); /* exact round trip, signed zeros included */
        /* Round to nearest even at the midpoint to the next half up (in magnitude), and just either side. */
        if ((h & 0x7fff) < 0x7bff) {
            const double next = half_value((uint16_t)(h + 1));
            const float mid = (float)(((double)f + next) / 2); /* exact: fp16 midpoints fit in a float */
            const uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
            assert_int_equal(kite_f32_to_fp16(mid), even);
            assert_int_equal(kite_f32_to_fp16(nextafterf(mid, 0.0f)), h);
            assert_int_equal(kite_f32_to_fp16(nextafterf(mid, (h & 0x8000) ? -INFINITY : INFINITY)), h + 1);
        }
    }
    /* Overflow: 65520 (the midpoint above 65504) rounds to infinity, anything below to 65504. */
    assert_int_equal(kite_f32_to_fp16(65520.0f), 0x7C00);
    assert_int_equal(kite_f32_to_fp16(nextafterf(65520.0f, 0)), 0x7BFF);
    assert_int_equal(kite_f32_to_fp16(-1e30f), 0xFC00);
    /* Underflow: half of the smallest subnormal rounds to zero (even), just above it to 2^-24. */
    assert_int_equal(kite_f32_to_fp16(0x1p-25f), 0x0000);
    assert_int_equal(kite_f32_to_fp16(nextafterf(0x1p-25f, 1)), 0x0001);
    assert_int_equal(kite_f32_to_fp16(0x1.8p-24f), 0x0002);
    assert_int_equal(kite_f32_to_fp16(-1e-30f), 0x8000);
}

static void test_bf16_exhaustive(void **state) {
    (void)state;
    for (uint32_t b = 0; b < 65536; b++) {
        const float f = kite_bf16_to_f32((uint16_t)b);
        const uint32_t bits = kite_bits_from_f32(f);
        assert_int_equal(bits, b << 16);
        if (isnan(f)) {
            assert_true(isnan(kite_bf16_to_f32(kite_f32_to_bf16(f))));
            continue;
        }
        assert_int_equal(kite_f32_to_bf16(f), b);
        /* Midpoint to the next value up: ties to even; one float ulp either side rounds to the nearer. */
        if ((b & 0x7fff) < 0x7f7f) {
            const uint32_t mid = (b << 16) | 0x8000;
            const uint16_t even = (b & 1) ? (uint16_t)(b + 1) : (uint16_t)b;
            assert_int_equal(kite_f32_to_bf16(kite_f32_from_bits(mid)), even);
            assert_int_equal(kite_f32_to_bf16(kite_f32_from_bits(mid - 1)), b);
            assert_int_equal(kite_f32_to_bf16(kite_f32_from_bits(mid + 1)), b + 1);
        }
    }
    assert_int_equal(kite_f32_to_bf16(kite_f32_from_bits(0x7F7FFFFFu)), 0x7F80); /* FLT_MAX rounds to inf */
    assert_int_equal(kite_f32_to_bf16(kite_f32_from_bits(0x7F800001u)) & 0x7FC0, 0x7FC0); /* signalling NaN quieted */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_traits_table),
        cmocka_unit_test(test_plain_float_blocks),
        cmocka_unit_test(test_q4_q5_q8_blocks),
        cmocka_unit_test(test_q2_K_block),
        cmocka_unit_test(test_q3_K_block),
        cmocka_unit_test(test_q4_K_q5_K_blocks),
        cmocka_unit_test(test_q6_K_q8_K_blocks),
        cmocka_unit_test(test_unaligned_rows),
        cmocka_unit_test(test_matches_ggml),
        cmocka_unit_test(test_round_trip_float_types),
        cmocka_unit_test(test_round_trip_32_element_types),
        cmocka_unit_test(test_round_trip_k_quants),
        cmocka_unit_test(test_special_inputs),
        cmocka_unit_test(test_ref_dot),
        cmocka_unit_test(test_fp16_exhaustive),
        cmocka_unit_test(test_bf16_exhaustive),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
