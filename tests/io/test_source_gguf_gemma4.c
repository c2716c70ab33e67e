/* Gemma 4 and Muse Glimmer GGUF files: what kite cannot run is refused at load with the feature's name,
 * and a file read with one head size for every layer (key_length_swa dropped) is refused by the tensors'
 * shapes rather than run wrong. Each case rewrites kite gen-model's tiny-gemma4 / tiny-muse-glimmer with
 * one key changed (every other key and every tensor copied). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "engine/random_model.h"
#include "io/gguf.h"
#include "io/mmap.h"
#include "kite.h"

static char g_dir[64];

/* Copies src to dst without the key `drop` (NULL: none), adding key `set` = value (u32; NULL: none). */
static void rewrite(const char *src, const char *dst, const char *drop, const char *set, uint32_t value) {
    kite_error e = {0};
    kite_mapped_file f;
    assert_int_equal(kite_map_file(&f, src, &e), KITE_OK);
    kite_gguf *g = NULL;
    assert_int_equal(kite_gguf_open(&g, f.data, f.size, &e), KITE_OK);
    kite_gguf_writer *w = kite_gguf_writer_new();
    assert_non_null(w);
    for (int64_t i = 0; i < kite_gguf_n_kv(g); i++) {
        kite_gguf_str k = kite_gguf_key(g, i);
        if ((drop && k.len == strlen(drop) && !memcmp(k.ptr, drop, k.len)) ||
            (set && k.len == strlen(set) && !memcmp(k.ptr, set, k.len)))
            continue;
        kite_gguf_w_copy_kv(w, g, i);
    }
    if (set) kite_gguf_w_u32(w, set, value);
    for (int64_t i = 0; i < kite_gguf_n_tensors(g); i++) {
        const kite_gguf_tensor *t = kite_gguf_tensor_at(g, i);
        char name[96];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        kite_gguf_w_tensor(w, name, t->type, t->n_dims, t->ne, t->data, t->n_bytes);
    }
    assert_int_equal(kite_gguf_writer_save(w, dst, &e), KITE_OK);
    kite_gguf_writer_free(w);
    kite_gguf_free(g);
    kite_unmap_file(&f);
}

static void expect_refused(const char *path, int status, const char *needle) {
    kite_model_params mp = kite_model_default_params();
    mp.n_threads = 1;
    kite_model *m = NULL;
    char err[512] = "";
    int rc = kite_model_open(&m, path, &mp, err, sizeof err);
    if (rc != status || !strstr(err, needle)) {
        print_error("%s: status %d (want %d), message '%s' (want '%s')\n", path, rc, status, err, needle);
        kite_model_free(m);
        fail();
    }
}

static void write_shape(const char *shape, char *path, size_t size) {
    snprintf(path, size, "%s/%s.gguf", g_dir, shape);
    kite_random_model_params rp = {.shape = shape, .type = "f32", .seed = 3};
    char err[512];
    if (kite_write_random_model(path, &rp, err, sizeof err)) fail_msg("%s", err);
}

static void test_gemma4_refusals(void **state) {
    (void)state;
    char base[128], path[128];
    write_shape("tiny-gemma4", base, sizeof base);
    kite_model_params mp = kite_model_default_params();
    kite_model *m = NULL;
    char err[512];
    assert_int_equal(kite_model_open(&m, base, &mp, err, sizeof err), KITE_OK); /* the intact file loads */
    kite_model_free(m);
    snprintf(path, sizeof path, "%s/bad.gguf", g_dir);
    rewrite(base, path, NULL, "gemma4.attention.shared_kv_layers", 1);
    expect_refused(path, KITE_ERR_UNSUPPORTED, "KV sharing across layers");
    rewrite(base, path, NULL, "gemma4.embedding_length_per_layer_input", 256);
    expect_refused(path, KITE_ERR_UNSUPPORTED, "per-layer embeddings");
    rewrite(base, path, NULL, "gemma4.expert_count", 8);
    expect_refused(path, KITE_ERR_UNSUPPORTED, "mixture of experts");
    /* one head size for every layer: the local layers' q (4 x 32 rows) cannot be 4 x 64 */
    char mid[160];
    snprintf(mid, sizeof mid, "%s/mid.gguf", g_dir);
    rewrite(base, mid, "gemma4.attention.key_length_swa", NULL, 0);
    rewrite(mid, path, "gemma4.attention.value_length_swa", NULL, 0);
    unlink(mid);
    expect_refused(path, KITE_ERR_FORMAT, "blk.0.attn_q.weight has shape");
    rewrite(base, path, "gemma4.attention.sliding_window_pattern", NULL, 0);
    expect_refused(path, KITE_ERR_FORMAT, "sliding_window_pattern");
}

static void test_muse_glimmer_refusals(void **state) {
    (void)state;
    char base[128], path[128];
    write_shape("tiny-muse-glimmer", base, sizeof base);
    snprintf(path, sizeof path, "%s/bad.gguf", g_dir);
    rewrite(base, path, "muse-glimmer.logit_scale", NULL, 0);
    expect_refused(path, KITE_ERR_FORMAT, "logit_scale");
    rewrite(base, path, "muse-glimmer.attention.sliding_window", NULL, 0);
    expect_refused(path, KITE_ERR_FORMAT, "sliding_window");
    /* a scalar pattern of 0 is llama.cpp's "every layer sliding": accepted */
    rewrite(base, path, "muse-glimmer.attention.sliding_window_pattern", "muse-glimmer.attention.sliding_window_pattern", 0);
    kite_model_params mp = kite_model_default_params();
    kite_model *m = NULL;
    char err[512];
    assert_int_equal(kite_model_open(&m, path, &mp, err, sizeof err), KITE_OK);
    kite_model_info info;
    kite_model_get_info(m, &info);
    assert_int_equal(info.n_local_layers, info.n_layers);
    kite_model_free(m);
}

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/kite-gemma4-gguf-XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char path[128];
    static const char *const names[] = {"tiny-gemma4.gguf", "tiny-muse-glimmer.gguf", "bad.gguf"};
    for (size_t i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", g_dir, names[i]);
        unlink(path);
    }
    rmdir(g_dir);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemma4_refusals),
        cmocka_unit_test(test_muse_glimmer_refusals),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
