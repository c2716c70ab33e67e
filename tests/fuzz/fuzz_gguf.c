/* libFuzzer target for the GGUF reader. On a successful parse it reads everything back through every
 * accessor: each key with each getter, each array element, each tensor by index and by name, and the
 * first row of each tensor's data through the type's to_float (so a wrong size or offset reads out of
 * bounds under ASan). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/gguf.h"
#include "quant/types.h"

static volatile float sink;

static void touch_key(const kite_gguf *g, const char *key) {
    uint32_t u;
    int64_t i;
    float f;
    bool b;
    kite_gguf_str s;
    kite_gguf_vtype et;
    uint64_t n;
    (void)kite_gguf_has(g, key);
    if (kite_gguf_get_u32(g, key, &u)) sink += (float)u;
    if (kite_gguf_get_i64(g, key, &i)) sink += (float)i;
    if (kite_gguf_get_f32(g, key, &f)) sink += f;
    if (kite_gguf_get_bool(g, key, &b)) sink += b;
    if (kite_gguf_get_str(g, key, &s) && s.len) sink += (float)(unsigned char)s.ptr[s.len - 1];
    if (kite_gguf_get_arr(g, key, &et, &n)) {
        for (uint64_t k = 0; k <= n; k++) { /* one past the end must fail cleanly */
            if (kite_gguf_arr_str(g, key, k, &s) && s.len) sink += (float)(unsigned char)s.ptr[0];
            if (kite_gguf_arr_f32(g, key, k, &f)) sink += f;
            if (kite_gguf_arr_i64(g, key, k, &i)) sink += (float)i;
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kite_gguf *g = NULL;
    kite_error e = {0};
    if (kite_gguf_open(&g, data, size, &e) != KITE_OK) return 0;
    (void)kite_gguf_version(g);
    (void)kite_gguf_alignment(g);
    char name[256];
    for (int64_t k = 0; k <= kite_gguf_n_kv(g); k++) {
        kite_gguf_str key = kite_gguf_key(g, k);
        size_t len = key.len < sizeof name - 1 ? (size_t)key.len : sizeof name - 1;
        if (len) memcpy(name, key.ptr, len);
        name[len] = 0;
        touch_key(g, name);
    }
    touch_key(g, "general.alignment");
    float row[4096];
    for (int64_t t = -1; t <= kite_gguf_n_tensors(g); t++) {
        const kite_gguf_tensor *ti = kite_gguf_tensor_at(g, t);
        if (!ti) continue;
        size_t len = ti->name.len < sizeof name - 1 ? (size_t)ti->name.len : sizeof name - 1;
        if (len) memcpy(name, ti->name.ptr, len);
        name[len] = 0;
        (void)kite_gguf_find_tensor(g, name);
        const kite_type_traits *tr = kite_type_get(ti->type);
        if (!tr || !tr->to_float || ti->n_bytes == 0) continue; /* trellis types: no row-wise reader (tiles of rows) */
        /* The first row, or as many whole blocks of it as fit in the buffer. */
        int64_t n = ti->ne[0] < 4096 ? ti->ne[0] : 4096;
        n -= n % tr->block_size;
        if (n <= 0) continue;
        tr->to_float(ti->data, row, n);
        sink += row[0] + row[n - 1];
        sink += kite_ref_dot(ti->type, ti->data, row, n);
        /* The last byte of the data must be readable. */
        sink += ((const uint8_t *)ti->data)[ti->n_bytes - 1];
    }
    kite_gguf_free(g);
    return 0;
}
