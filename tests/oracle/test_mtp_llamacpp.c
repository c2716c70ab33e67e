/* kite's MTP drafting (Qwen3.5's next-n block, spec/mtp.h) against llama.cpp's, on the same random
 * `tiny-qwen35-mtp` file (kite_write_random_model, F32). llama.cpp is node-llama-cpp's prebuilt libllama
 * (dlopen'ed), driven through the C API the way common/speculative.cpp's draft-mtp drives it: the model
 * loaded with load_mtp; the target context returns h_nextn for every row (llama_set_embeddings_nextn);
 * a second context of type LLAMA_CONTEXT_TYPE_MTP on the same model catches up on the prompt (row k:
 * token x[k], the target's h_nextn of row k - 1, zeros for row 0, at position k), then drafts greedily:
 * (root, h of the last prompt row) at N, then each drafted token with the head's own h_nextn of the
 * step before, at N + 1, N + 2, ... kite drafts a greedy chain with kite_spec_draft from the same prompt
 * and root. For prompts of 2, 17 and 40 tokens: the drafted tokens are equal, the first step's logits agree
 * within 1e-4 of their spread (observed ~1e-6), and so do the head's logits run by kite_mtp_run_rows on
 * llama.cpp's own input rows (its h_nextn). Negative controls: kite's chain from another root differs;
 * the head over the same rows without row 0 (x[0], zeros) is far outside the bound (0.01-0.4). (The functions of
 * llama.cpp's src/llama-ext.h are looked up by their mangled names, as in test_dflash_llamacpp.) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "llama_compare.h"
#include "spec/mtp.h"
#include "spec/spec.h"

enum { MAX_PROMPT = 64, DEPTH = 4 };
static const float LOGIT_BOUND = 1e-4f; /* of the logits' spread */

static llama_api L;
static char g_dir[64], g_path[128];
static kite_model *g_model;
static struct llama_model *l_model;

static int setup(void **state) {
    (void)state;
    if (compare_open(&L, "mtp", g_dir)) return -1;
    snprintf(g_path, sizeof g_path, "%s/mtp.gguf", g_dir);
    struct llama_model_params lmp = L.model_default_params();
    lmp.load_mtp = true;
    const kite_random_model_params rp = {.shape = "tiny-qwen35-mtp", .type = "f32", .seed = 5};
    return compare_load(&L, g_path, &rp, lmp, &g_model, &l_model);
}

static int teardown(void **state) {
    (void)state;
    kite_model_free(g_model);
    if (l_model) L.model_free(l_model);
    unlink(g_path);
    rmdir(g_dir);
    return 0;
}

/* llama.cpp's greedy MTP chain of DEPTH after the prompt; root: the target's greedy token; logits0: the
 * first step's logits [V]. */
static float *g_h; /* llama.cpp's target h_nextn of the last prompt [N][D] */
static void llama_draft(const int32_t *prompt, int32_t N, int32_t *root, int32_t *drafted, float *logits0) {
    const int32_t V = g_model->n_vocab, D = g_model->weights.hp.dim;
    struct llama_context_params cp = llama_api_exact_context(&L);
    struct llama_context *tgt = L.init_from_model(l_model, cp);
    assert_non_null(tgt);
    cp.ctx_type = LLAMA_CONTEXT_TYPE_MTP;
    cp.n_rs_seq = 0;
    struct llama_context *dft = L.init_from_model(l_model, cp);
    assert_non_null(dft);
    L.set_nextn(tgt, true, false);
    L.set_nextn(dft, true, true);

    struct llama_batch b = llama_api_batch(N, true, 0);
    for (int32_t i = 0; i < N; i++) b.token[i] = prompt[i], b.pos[i] = i, b.logits[i] = 1;
    assert_int_equal(L.decode(tgt, b), 0);
    *root = llama_api_argmax(L.get_logits_ith(tgt, N - 1), V);
    llama_api_batch_free(&b);
    const float *h = L.get_nextn(tgt);
    assert_non_null(h);
    free(g_h);
    g_h = malloc(sizeof(float) * (size_t)N * (size_t)D);
    memcpy(g_h, h, sizeof(float) * (size_t)N * (size_t)D);
    b = llama_api_batch(N, true, D); /* the catch-up: row k takes h of row k - 1 (zeros for row 0) */
    for (int32_t i = 0; i < N; i++) b.token[i] = prompt[i], b.pos[i] = i, b.logits[i] = 0;
    memcpy(b.embd + D, h, sizeof(float) * (size_t)(N - 1) * (size_t)D);
    float *last_h = malloc(sizeof(float) * (size_t)D);
    memcpy(last_h, h + (size_t)(N - 1) * D, sizeof(float) * (size_t)D);
    assert_int_equal(L.decode(dft, b), 0);
    llama_api_batch_free(&b);
    b = llama_api_batch(1, true, D);
    int32_t tok = *root;
    for (int32_t d = 0; d < DEPTH; d++) {
        b.token[0] = tok, b.pos[0] = N + d, b.logits[0] = 1;
        memcpy(b.embd, last_h, sizeof(float) * (size_t)D);
        assert_int_equal(L.decode(dft, b), 0);
        const float *lg = L.get_logits_ith(dft, 0);
        if (d == 0) memcpy(logits0, lg, sizeof(float) * (size_t)V);
        drafted[d] = tok = llama_api_argmax(lg, V);
        memcpy(last_h, L.get_nextn_ith(dft, 0), sizeof(float) * (size_t)D);
    }
    llama_api_batch_free(&b);
    free(last_h);
    L.free_ctx(dft);
    L.free_ctx(tgt);
}

/* kite's greedy chain of DEPTH from the same prompt and root; logits0: the first step's logits [V]. */
static void kite_draft(const int32_t *prompt, int32_t N, int32_t root, int32_t *drafted, float *logits0) {
    kite_spec_params spec = kite_spec_default_params();
    spec.drafter = KITE_DRAFT_MTP, spec.budget = DEPTH, spec.tree_width = 1;
    kite_session *s = compare_session(g_model, &spec, prompt, N);
    kite_draft_tree t;
    compare_greedy_draft(s, root, DEPTH, &t);
    compare_chain(&t, DEPTH, drafted);
    if (logits0) memcpy(logits0, s->spec.draft_logits, sizeof(float) * (size_t)g_model->n_vocab);
    kite_session_free(s);
}

static void test_drafts_match_llamacpp(void **state) {
    (void)state;
    const int32_t V = g_model->n_vocab;
    float *lk = malloc(sizeof(float) * (size_t)V), *ll = malloc(sizeof(float) * (size_t)V);
    static const int32_t lengths[3] = {2, 17, 40};
    float worst = 0;
    int controls_differ = 0;
    for (int c = 0; c < 3; c++) {
        int32_t prompt[MAX_PROMPT], N = lengths[c];
        prompt[0] = 1;
        for (int32_t i = 1; i < N; i++) prompt[i] = 3 + (int32_t)((i * 131 + c * 17) % (V - 4));
        int32_t root, dl[DEPTH], dk[DEPTH], dc[DEPTH];
        llama_draft(prompt, N, &root, dl, ll);
        kite_draft(prompt, N, root, dk, lk);
        /* the head alone on llama.cpp's own rows (its target h_nextn, row 0 with zeros): within the bound;
         * without row 0 (a cache one row short of llama.cpp's): outside it */
        float spread_l = 0, head_rel = 0, short_rel = 0;
        {
            const int32_t D = g_model->weights.hp.dim;
            kite_mtp_run *r = NULL;
            kite_error e = {0};
            int32_t tok[MAX_PROMPT + 1];
            float *hin = calloc((size_t)(N + 1) * D, sizeof(float)), *lg = malloc(sizeof(float) * (size_t)(N + 1) * V);
            for (int32_t i = 0; i < N; i++) tok[i] = prompt[i];
            tok[N] = root;
            memcpy(hin + D, g_h, sizeof(float) * (size_t)N * D);
            spread_l = compare_spread(ll, (size_t)V);
            for (int pass = 0; pass < 2; pass++) {
                if (kite_mtp_run_new(&r, &g_model->weights, 256, &e)) fail_msg("%s", e.msg);
                kite_mtp_run_rows(r, NULL, tok + pass, hin + (size_t)pass * D, N + 1 - pass, 0, lg, NULL);
                const float *last = lg + (size_t)(N - pass) * V;
                float d2 = 0;
                for (int32_t i = 0; i < V; i++) d2 = fabsf(last[i] - ll[i]) > d2 ? fabsf(last[i] - ll[i]) : d2;
                *(pass ? &short_rel : &head_rel) = d2 / spread_l;
                kite_mtp_run_free(r);
            }
            free(hin); free(lg);
        }
        printf("prompt of %d: the head on llama.cpp's rows %.3g of the spread; without row 0 (control) %.3g\n", N,
               (double)head_rel, (double)short_rel);
        if (head_rel > LOGIT_BOUND) fail_msg("prompt of %d: the head on llama.cpp's rows differs by %g", N, (double)head_rel);
        if (short_rel < 10 * LOGIT_BOUND) fail_msg("prompt of %d: the control without row 0 is within the bound", N);
        float spread, rel = compare_max_abs_diff(lk, ll, (size_t)V, &spread) / spread;
        if (rel > worst) worst = rel;
        printf("prompt of %d, root %d: llama.cpp drafts %d %d %d %d, kite %d %d %d %d; first-step logits differ by %.3g of their spread\n",
               N, root, dl[0], dl[1], dl[2], dl[3], dk[0], dk[1], dk[2], dk[3], (double)rel);
        if (rel > LOGIT_BOUND) fail_msg("prompt of %d: first-step logits differ by %g of their spread", N, (double)rel);
        for (int d = 0; d < DEPTH; d++)
            if (dk[d] != dl[d]) fail_msg("prompt of %d: drafted token %d is %d in kite, %d in llama.cpp", N, d, dk[d], dl[d]);
        kite_draft(prompt, N, (root + 1) % V, dc, NULL); /* negative control: another root */
        for (int d = 0; d < DEPTH; d++) controls_differ += dc[d] != dl[d];
    }
    printf("worst first-step logit difference %.3g of the spread (bound %.0e); control (another root): %d of %d tokens differ\n",
           (double)worst, (double)LOGIT_BOUND, controls_differ, 3 * DEPTH);
    assert_true(controls_differ > 0);
    free(lk); free(ll);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_drafts_match_llamacpp)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
