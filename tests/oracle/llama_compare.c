/* See llama_compare.h. */
#include "llama_compare.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

int compare_open(llama_api *api, const char *name, char *dir) {
    char why[512];
    if (llama_api_open(api, KITE_LLAMA_LIB_DIR, why, sizeof why)) {
        fprintf(stderr, "%s\n", why);
        return -1;
    }
    snprintf(dir, 64, "/tmp/kite-%s-llamacpp-XXXXXX", name);
    return mkdtemp(dir) ? 0 : -1;
}

int compare_load(const llama_api *api, const char *path, const kite_random_model_params *rp, struct llama_model_params lmp,
                 kite_model **km, struct llama_model **lm) {
    char err[512];
    if (kite_write_random_model(path, rp, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    kite_model_params mp = kite_model_default_params();
    mp.n_threads = 1;
    if (kite_model_open(km, path, &mp, err, sizeof err)) {
        fprintf(stderr, "kite: %s\n", err);
        return -1;
    }
    lmp.n_gpu_layers = 0;
    *lm = api->model_load(path, lmp);
    if (!*lm) {
        fprintf(stderr, "llama.cpp could not load the random %s\n", rp->shape);
        return -1;
    }
    return 0;
}

kite_session *compare_session(kite_model *target, const kite_spec_params *spec, const int32_t *prompt, int32_t n) {
    char err[512];
    kite_session_params sp = kite_session_default_params();
    sp.n_ctx = 256, sp.n_threads = 1, sp.kv_type = KITE_KV_F32;
    kite_session *s = NULL;
    if (kite_session_open(&s, target, &sp, err, sizeof err)) fail_msg("%s", err);
    if (kite_session_set_spec(s, spec, err, sizeof err)) fail_msg("%s", err);
    if (kite_prompt(s, prompt, (size_t)n, err, sizeof err)) fail_msg("%s", err);
    return s;
}

void compare_greedy_draft(kite_session *s, int32_t root, int32_t n, kite_draft_tree *t) {
    kite_gen_params gp = kite_gen_default_params();
    gp.temperature = 0.0f;
    kite_error e = {0};
    if (kite_spec_draft(&s->spec, s, root, n, &gp, t, &e)) fail_msg("%s", e.msg);
    assert_int_equal(t->n, n + 1);
}

void compare_chain(const kite_draft_tree *t, int32_t n, int32_t *drafted) {
    for (int32_t j = 1; j <= n; j++) {
        assert_int_equal(t->parent[j], j - 1);
        drafted[j - 1] = t->token[j];
    }
}

float compare_spread(const float *x, size_t n) {
    float lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        if (x[i] < lo) lo = x[i];
        if (x[i] > hi) hi = x[i];
    }
    return hi - lo;
}

float compare_max_abs_diff(const float *a, const float *b, size_t n, float *spread) {
    float d = 0;
    for (size_t i = 0; i < n; i++) {
        float x = fabsf(a[i] - b[i]);
        if (x > d) d = x;
    }
    *spread = compare_spread(b, n);
    return d;
}
