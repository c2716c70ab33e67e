/* kite's DFlash drafting against llama.cpp's, on the same random pairs: the `tiny-l4` target (F32, dim
 * 256, 4 layers) and drafters written for it by kite_write_random_model ("dflash", llama.cpp's names
 * and metadata: 2 layers reading the inputs of target layers 0 and 3, the target's embedding and
 * output borrowed; block 16 non-causal, and "dflash-b8-causal"). llama.cpp is node-llama-cpp's prebuilt
 * libllama (dlopen'ed), driven through the C API the way common/speculative.cpp's draft-dflash drives
 * it: the target decodes the prompt with the inputs of the drafter's layers extracted
 * (llama_set_embeddings_layer_inp); the drafter (ctx_other = the target, causal attention as its
 * metadata says) decodes one embedding batch of the concatenated features at positions 0 .. N-1 (the
 * KV injection), then the token batch [root, mask x (B-1)] at N .. N+B-1 with logits at every row;
 * greedy drafts are the rows' argmaxes. kite drafts a greedy chain of B-1 tokens with kite_spec_draft
 * from the same prompt and root. For three prompts and both drafters:
 *   - kite's captured target features equal llama.cpp's layer inputs within 2e-5;
 *   - the block's logits at every row within |kite - llama.cpp| <= 1e-5 (observed 1.1e-6; f32 caches and flash
 *     attention off on llama.cpp's side), and the drafted tokens equal.
 * Negative control: kite's block drafted from another root is outside the bound.
 * DFlash-2 ("dflash2" and "dflash2-b8-causal": gated convolutions, a selector of rank 32 over the top 8
 * with unit-scale codebooks): llama.cpp's draft as common/speculative.cpp makes it (no logits, the
 * lattice read from the unmasked nextn embeddings, the walk from the best successor of the previous
 * choice): kite's lattice scores equal llama.cpp's within 5e-5 (observed 9.5e-6 on scores up to 8.3;
 * the candidates matched by token, as ggml's top-k leaves them unordered) and kite's greedy chain is
 * llama.cpp's, token for token. Controls: the lattice is far (> 100x the bound) from the logits alone,
 * the walk differs from the rows' argmaxes in some rows (so it is what is compared), and another root's
 * lattice is outside the bound.
 * DSpark ("dflash-dspark" from the anchor, "dflash-dspark-b8-causal-bonus"): llama.cpp's greedy chain
 * (the Markov-biased rows' argmaxes) equals kite's, and the confidence head's values within 1e-5
 * (observed 1.5e-7); control: the Markov head moves drafts off the unbiased argmax. (The functions of
 * llama.cpp's src/llama-ext.h are looked up by their mangled names, as in test_eagle3_llamacpp.) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "llama_compare.h"
#include "spec/dflash.h"

enum { MAX_PROMPT = 64, MAX_BLOCK = 16 };
static const float LOGIT_BOUND = 1e-5f, FEATURE_BOUND = 2e-5f, LATTICE_BOUND = 5e-5f, CONF_BOUND = 1e-5f;

static llama_api L;
enum { N_DRAFTERS = 6, N_V1 = 2, N_V2 = 4 }; /* DFlash drafters, DFlash-2 ones, DSpark ones */
static char g_dir[64], g_target_path[128], g_drafter_path[N_DRAFTERS][128];
static kite_model *g_target, *g_drafter[N_DRAFTERS];
static struct llama_model *l_target, *l_drafter[N_DRAFTERS];
static const char *const SHAPES[N_DRAFTERS] = {"dflash", "dflash-b8-causal", "dflash2", "dflash2-b8-causal", "dflash-dspark",
                                                "dflash-dspark-b8-causal-bonus"};

static int setup(void **state) {
    (void)state;
    if (compare_open(&L, "dflash", g_dir)) return -1;
    snprintf(g_target_path, sizeof g_target_path, "%s/target.gguf", g_dir);
    const struct llama_model_params lmp = L.model_default_params();
    kite_random_model_params rp = {.shape = "tiny-l4", .type = "f32", .seed = 5};
    if (compare_load(&L, g_target_path, &rp, lmp, &g_target, &l_target)) return -1;
    for (int d = 0; d < N_DRAFTERS; d++) {
        snprintf(g_drafter_path[d], sizeof g_drafter_path[d], "%s/drafter%d.gguf", g_dir, d);
        rp.shape = SHAPES[d], rp.target_path = g_target_path, rp.seed = 6 + (uint64_t)d;
        if (compare_load(&L, g_drafter_path[d], &rp, lmp, &g_drafter[d], &l_drafter[d])) return -1;
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    for (int d = 0; d < N_DRAFTERS; d++) {
        kite_model_free(g_drafter[d]);
        if (l_drafter[d]) L.model_free(l_drafter[d]);
        unlink(g_drafter_path[d]);
    }
    kite_model_free(g_target);
    if (l_target) L.model_free(l_target);
    unlink(g_target_path);
    rmdir(g_dir);
    return 0;
}

/* How a drafter context returns its nextn embeddings (llama_set_embeddings_nextn's two flags). */
typedef enum { NEXTN_OFF, NEXTN_UNMASKED, NEXTN_ON } nextn_mode;

/* llama.cpp's target and drafter d contexts as common/speculative.cpp's draft-dflash drives them, up to
 * the block: the target decodes the prompt with the inputs of the drafter's layers extracted (root: its
 * greedy token after the prompt); the drafter (causal attention as its shape says) decodes one embedding
 * batch of the concatenated features at positions 0 .. N-1 (the KV injection; copied to features [N][F]
 * when given), then the token batch [root, mask x (B-1)] at N .. N+B-1, with logits at every row when
 * block_logits. The caller reads the drafter's outputs and frees both contexts. */
static void llama_block(int d, const int32_t *prompt, int32_t N, nextn_mode nextn, bool block_logits, int32_t *root, float *features,
                        struct llama_context **tgt_out, struct llama_context **dft_out) {
    const kite_dflash *h = g_drafter[d]->dflash;
    const int32_t V = g_target->n_vocab, dim = g_target->weights.hp.dim, B = kite_dflash_block_size(h);
    const uint32_t n_ids = L.target_layer_ids_n(l_drafter[d]);
    const int32_t *ids = L.target_layer_ids(l_drafter[d]);
    struct llama_context_params cp = llama_api_exact_context(&L);
    struct llama_context *tgt = L.init_from_model(l_target, cp);
    assert_non_null(tgt);
    for (uint32_t k = 0; k < n_ids; k++) L.set_layer_inp(tgt, (uint32_t)ids[k], true);
    cp.ctx_other = tgt;
    struct llama_context *dft = L.init_from_model(l_drafter[d], cp);
    assert_non_null(dft);
    L.set_causal_attn(dft, strstr(SHAPES[d], "causal") != NULL);
    if (nextn != NEXTN_OFF) L.set_nextn(dft, true, nextn == NEXTN_ON);

    struct llama_batch b = llama_api_batch(N, true, 0);
    for (int32_t i = 0; i < N; i++) b.token[i] = prompt[i], b.pos[i] = i, b.logits[i] = i == N - 1;
    assert_int_equal(L.decode(tgt, b), 0);
    *root = llama_api_argmax(L.get_logits_ith(tgt, -1), V);
    llama_api_batch_free(&b);
    const int32_t F = (int32_t)n_ids * dim;
    b = llama_api_batch(N, false, F);
    for (uint32_t k = 0; k < n_ids; k++) {
        const float *layer = L.get_layer_inp(tgt, (uint32_t)ids[k]);
        assert_non_null(layer);
        for (int32_t i = 0; i < N; i++)
            memcpy(b.embd + (size_t)i * F + (size_t)k * dim, layer + (size_t)i * dim, sizeof(float) * (size_t)dim);
    }
    if (features) memcpy(features, b.embd, sizeof(float) * (size_t)N * (size_t)F);
    for (int32_t i = 0; i < N; i++) b.pos[i] = i, b.logits[i] = 0;
    assert_int_equal(L.decode(dft, b), 0); /* the injection */
    llama_api_batch_free(&b);
    b = llama_api_batch(B, true, 0);
    for (int32_t i = 0; i < B; i++) b.token[i] = i == 0 ? *root : kite_dflash_mask_token(h), b.pos[i] = N + i, b.logits[i] = block_logits;
    assert_int_equal(L.decode(dft, b), 0);
    llama_api_batch_free(&b);
    *tgt_out = tgt, *dft_out = dft;
}

/* kite's session after the prompt, drafter d given as a plain draft model (recognised as DFlash) with
 * budget n, and its greedy draft of n from root (n + 1 nodes, checked). */
static kite_session *kite_block(int d, const int32_t *prompt, int32_t N, int32_t root, int32_t n, kite_draft_tree *t) {
    kite_spec_params spec = kite_spec_default_params();
    spec.drafter = KITE_DRAFT_MODEL, spec.draft_model = g_drafter[d], spec.budget = n, spec.tree_width = 1;
    kite_session *s = compare_session(g_target, &spec, prompt, N);
    compare_greedy_draft(s, root, n, t);
    return s;
}

/* llama.cpp's greedy DFlash block: root (the target's greedy token after the prompt), the target
 * features ([N][n_ids * dim]), the drafted tokens ([B - 1]) and the block's logits ([B - 1][V]);
 * greedy drafts are the rows' argmaxes. */
static void llama_draft(int d, const int32_t *prompt, int32_t N, int32_t *root, float *features, int32_t *drafted, float *logits) {
    const kite_dflash *h = g_drafter[d]->dflash;
    const int32_t V = g_target->n_vocab, n_layer = g_target->weights.hp.n_layers, B = kite_dflash_block_size(h);
    int32_t n_ids_k = 0;
    const int32_t *kids = kite_dflash_target_layers(h, &n_ids_k);
    const uint32_t n_ids = L.target_layer_ids_n(l_drafter[d]);
    assert_int_equal(n_ids, n_ids_k);
    const int32_t *ids = L.target_layer_ids(l_drafter[d]);
    for (uint32_t k = 0; k < n_ids; k++) {
        assert_int_equal(ids[k], kids[k]);
        assert_true(ids[k] < n_layer);
    }
    struct llama_context *tgt, *dft;
    llama_block(d, prompt, N, NEXTN_OFF, true, root, features, &tgt, &dft);
    for (int32_t i = 1; i < B; i++) {
        const float *lg = L.get_logits_ith(dft, i);
        memcpy(logits + (size_t)(i - 1) * V, lg, sizeof(float) * (size_t)V);
        drafted[i - 1] = llama_api_argmax(lg, V);
    }
    L.free_ctx(dft);
    L.free_ctx(tgt);
}

/* kite's greedy chain of B - 1 from the same prompt and root; the session's feature rows [N][F] and
 * the block's logits [B - 1][V]. */
static void kite_draft(int d, const int32_t *prompt, int32_t N, int32_t root, float *features, int32_t *drafted, float *logits) {
    const int32_t B = kite_dflash_block_size(g_drafter[d]->dflash);
    kite_draft_tree t;
    kite_session *s = kite_block(d, prompt, N, root, B - 1, &t);
    assert_int_equal(s->spec.params.drafter, KITE_DRAFT_DFLASH); /* recognised */
    if (features) {
        assert_int_equal(s->features.pos0, 0);
        assert_int_equal(s->features.n, N);
        memcpy(features, s->features.rows, sizeof(float) * (size_t)N * (size_t)s->features.width);
    }
    compare_chain(&t, B - 1, drafted);
    int32_t rows = 0;
    const float *lg = kite_dflash_last_logits(s->spec.dflash, &rows);
    assert_int_equal(rows, B);
    memcpy(logits, lg, sizeof(float) * (size_t)(B - 1) * (size_t)g_target->n_vocab);
    kite_session_free(s);
}

static void test_blocks_match_llamacpp(void **state) {
    (void)state;
    const int32_t V = g_target->n_vocab, dim = g_target->weights.hp.dim;
    float *lk = malloc(sizeof(float) * MAX_BLOCK * (size_t)V), *ll = malloc(sizeof(float) * MAX_BLOCK * (size_t)V);
    float *fk = malloc(sizeof(float) * MAX_PROMPT * 8 * (size_t)dim), *fl = malloc(sizeof(float) * MAX_PROMPT * 8 * (size_t)dim);
    static const int32_t lengths[3] = {1, 17, 40};
    float worst = 0, worst_f = 0;
    for (int d = 0; d < N_V1; d++) {
        const int32_t B = kite_dflash_block_size(g_drafter[d]->dflash);
        int32_t n_ids = 0;
        (void)kite_dflash_target_layers(g_drafter[d]->dflash, &n_ids);
        for (int c = 0; c < 3; c++) {
            int32_t prompt[MAX_PROMPT], N = lengths[c];
            prompt[0] = 1;
            for (int32_t i = 1; i < N; i++) prompt[i] = 3 + (int32_t)((i * 131 + c * 17 + d * 7) % (V - 4));
            int32_t root, dl[MAX_BLOCK], dk[MAX_BLOCK];
            llama_draft(d, prompt, N, &root, fl, dl, ll);
            kite_draft(d, prompt, N, root, fk, dk, lk);
            float spread, fd = compare_max_abs_diff(fk, fl, (size_t)N * (size_t)n_ids * (size_t)dim, &spread);
            if (fd > worst_f) worst_f = fd;
            if (fd > FEATURE_BOUND) fail_msg("%s, prompt of %d: target features differ by %g from llama.cpp's", SHAPES[d], N, (double)fd);
            for (int32_t i = 0; i < B - 1; i++) {
                float dd = compare_max_abs_diff(lk + (size_t)i * V, ll + (size_t)i * V, (size_t)V, &spread);
                if (dd > worst) worst = dd;
                if (dd > LOGIT_BOUND)
                    fail_msg("%s, prompt of %d: block row %d logits differ by %g (spread %g) from llama.cpp's", SHAPES[d], N, i + 1,
                             (double)dd, (double)spread);
                if (dk[i] != dl[i]) fail_msg("%s, prompt of %d: row %d kite drafted %d, llama.cpp %d", SHAPES[d], N, i + 1, dk[i], dl[i]);
            }
            if (c == 1) { /* negative control: another root */
                int32_t other[MAX_BLOCK];
                kite_draft(d, prompt, N, (root + 1) % V, NULL, other, lk);
                float dd = compare_max_abs_diff(lk, ll, (size_t)V, &spread);
                if (!(dd > LOGIT_BOUND)) fail_msg("negative control: another root's logits within %g of llama.cpp's", (double)dd);
            }
        }
    }
    fprintf(stderr, "largest |kite - llama.cpp|: block logits %.3g (bound %.1g), target features %.3g (bound %.1g)\n", (double)worst,
            (double)LOGIT_BOUND, (double)worst_f, (double)FEATURE_BOUND);
    free(lk), free(ll), free(fk), free(fl);
}

/* ---- DFlash-2 ------------------------------------------------------------------------------------ */

/* llama.cpp's DFlash-2 draft as common/speculative.cpp makes it: the token batch [root, mask x (B-1)]
 * with no logits requested and the nextn embeddings unmasked; row i of the lattice (n_embd floats) is
 * [candidates (top_k, as floats), scores[predecessor][candidate] (top_k x top_k)]; the chain takes
 * the best-scored successor of the previous choice. lattice: [B][n_embd]; drafted: [B - 1]. */
static void llama_draft2(int d, const int32_t *prompt, int32_t N, int32_t *root, float *lattice, int32_t *drafted) {
    const kite_dflash *h = g_drafter[d]->dflash;
    const int32_t dim = g_target->weights.hp.dim;
    const int32_t B = kite_dflash_block_size(h), K = L.dflash_selector_top_k(l_drafter[d]);
    assert_int_equal(K, kite_dflash_selector_top_k(h));
    struct llama_context *tgt, *dft;
    /* DFlash-2 reads its lattice, never the raw logits */
    llama_block(d, prompt, N, NEXTN_UNMASKED, false, root, NULL, &tgt, &dft);
    const float *lat = L.get_nextn(dft);
    assert_non_null(lat);
    memcpy(lattice, lat, sizeof(float) * (size_t)B * (size_t)dim);
    int32_t pred = 0; /* common_speculative_impl_draft_dflash::draft's walk */
    for (int32_t i = 1; i < B; i++) {
        const float *row = lattice + (size_t)i * dim, *scores = row + K + (size_t)pred * K;
        pred = llama_api_argmax(scores, K);
        drafted[i - 1] = (int32_t)row[pred];
    }
    L.free_ctx(dft);
    L.free_ctx(tgt);
}

static float *g_last_logits; /* kite's last DFlash-2 block logits [B - 1][V] */

/* kite's greedy chain of B - 1 and its lattice ([B][K][K]) and candidates ([B][K]). */
static void kite_draft2(int d, const int32_t *prompt, int32_t N, int32_t root, int32_t *drafted, float *lattice, int32_t *cand) {
    const int32_t B = kite_dflash_block_size(g_drafter[d]->dflash);
    kite_draft_tree t;
    kite_session *s = kite_block(d, prompt, N, root, B - 1, &t);
    compare_chain(&t, B - 1, drafted);
    const int32_t *c = NULL;
    int32_t rows = 0, K = 0;
    const float *lat = kite_dflash_last_lattice(s->spec.dflash, &c, &rows, &K);
    assert_int_equal(rows, B);
    memcpy(lattice, lat, sizeof(float) * (size_t)B * K * K);
    memcpy(cand, c, sizeof(int32_t) * (size_t)B * K);
    const float *lg = kite_dflash_last_logits(s->spec.dflash, &rows);
    memcpy(g_last_logits, lg, sizeof(float) * (size_t)(B - 1) * (size_t)g_target->n_vocab);
    kite_session_free(s);
}

static int32_t index_of(const float *cands, int32_t K, int32_t tok) {
    for (int32_t j = 0; j < K; j++) if ((int32_t)cands[j] == tok) return j;
    return -1;
}

/* The largest |kite - llama.cpp| over the lattice, the candidates matched by token (llama.cpp's top-k
 * leaves them unordered); a candidate set that differs fails. */
static float lattice_diff(int d, int32_t B, int32_t K, const float *ll, const float *lk, const int32_t *ck, int32_t N) {
    const int32_t dim = g_target->weights.hp.dim;
    float worst = 0;
    for (int32_t i = 1; i < B; i++) {
        const float *row = ll + (size_t)i * dim, *prev = ll + (size_t)(i - 1) * dim;
        for (int32_t j = 0; j < K; j++) {
            int32_t jl = index_of(row, K, ck[(size_t)i * K + j]);
            if (jl < 0) fail_msg("%s, prompt of %d: row %d candidate %d is not among llama.cpp's", SHAPES[d], N, i, ck[(size_t)i * K + j]);
            for (int32_t p = 0; p < (i == 1 ? 1 : K); p++) {
                int32_t pl = i == 1 ? 0 : index_of(prev, K, ck[(size_t)(i - 1) * K + p]);
                if (pl < 0) fail_msg("%s: row %d predecessor not among llama.cpp's", SHAPES[d], i);
                float x = fabsf(lk[((size_t)i * K + p) * K + j] - row[K + (size_t)pl * K + jl]);
                if (!(x <= worst)) worst = x;
            }
        }
    }
    return worst;
}

static void test_dflash2_matches_llamacpp(void **state) {
    (void)state;
    const int32_t dim = g_target->weights.hp.dim;
    enum { MAX_K = 32 };
    float *ll = malloc(sizeof(float) * MAX_BLOCK * (size_t)dim), *lk = malloc(sizeof(float) * MAX_BLOCK * MAX_K * MAX_K);
    int32_t *ck = malloc(sizeof(int32_t) * MAX_BLOCK * MAX_K);
    static const int32_t lengths[3] = {1, 17, 40};
    float worst = 0;
    int off_argmax = 0;
    float largest = 0;
    g_last_logits = malloc(sizeof(float) * MAX_BLOCK * (size_t)g_target->n_vocab);
    for (int d = N_V1; d < N_V2; d++) {
        const int32_t B = kite_dflash_block_size(g_drafter[d]->dflash), K = kite_dflash_selector_top_k(g_drafter[d]->dflash);
        assert_true(K > 0 && K <= MAX_K);
        for (int c = 0; c < 3; c++) {
            int32_t prompt[MAX_PROMPT], N = lengths[c];
            prompt[0] = 1;
            for (int32_t i = 1; i < N; i++) prompt[i] = 3 + (int32_t)((i * 131 + c * 17 + d * 7) % (g_target->n_vocab - 4));
            int32_t root, dl[MAX_BLOCK], dk[MAX_BLOCK];
            llama_draft2(d, prompt, N, &root, ll, dl);
            kite_draft2(d, prompt, N, root, dk, lk, ck);
            float dd = lattice_diff(d, B, K, ll, lk, ck, N);
            if (dd > worst) worst = dd;
            if (dd > LATTICE_BOUND) fail_msg("%s, prompt of %d: lattice scores differ by %g from llama.cpp's", SHAPES[d], N, (double)dd);
            for (int32_t i = 0; i < B - 1; i++)
                if (dk[i] != dl[i]) fail_msg("%s, prompt of %d: row %d kite drafted %d, llama.cpp %d", SHAPES[d], N, i + 1, dk[i], dl[i]);
            /* The pair scores count: llama.cpp's scores are not the logits alone (kite's logits at the
             * candidates), and the walk leaves the rows' argmaxes somewhere. */
            float pair = 0;
            for (int32_t i = 1; i < B; i++) {
                const float *row = ll + (size_t)i * dim;
                for (int32_t jl = 0; jl < K; jl++) {
                    float x = fabsf(row[K + jl] - g_last_logits[(size_t)(i - 1) * g_target->n_vocab + (int32_t)row[jl]]);
                    if (x > pair) pair = x;
                }
                if (dl[i - 1] != llama_api_argmax(g_last_logits + (size_t)(i - 1) * g_target->n_vocab, g_target->n_vocab)) off_argmax++;
            }
            for (int32_t i = 1; i < B; i++)
                for (int32_t q = 0; q < K + K * K; q++) {
                    float x = q < K ? 0 : fabsf(ll[(size_t)i * dim + q]);
                    if (x > largest) largest = x;
                }
            if (!(pair > 100 * LATTICE_BOUND)) fail_msg("%s: llama.cpp's lattice is within %g of the logits alone", SHAPES[d], (double)pair);
            if (c == 1) { /* negative control: another root moves the lattice (the candidates may change: only row 1's scores compared) */
                int32_t other[MAX_BLOCK];
                kite_draft2(d, prompt, N, (root + 1) % g_target->n_vocab, other, lk, ck);
                float far = 0;
                for (int32_t j = 0; j < K; j++) {
                    int32_t jl = index_of(ll + dim, K, ck[K + j]);
                    float x = jl < 0 ? INFINITY : fabsf(lk[(size_t)K * K + j] - ll[dim + K + jl]);
                    if (x > far) far = x;
                }
                if (!(far > LATTICE_BOUND)) fail_msg("negative control: another root's lattice within %g of llama.cpp's", (double)far);
            }
        }
    }
    fprintf(stderr,
            "DFlash-2: largest |kite - llama.cpp| over the lattice scores %.3g (bound %.1g; scores up to %.3g); greedy chains equal; "
            "%d drafted tokens are not their row's argmax\n",
            (double)worst, (double)LATTICE_BOUND, (double)largest, off_argmax);
    if (off_argmax == 0) fail_msg("the selector never changed a drafted token from its row's argmax: the walk is not tested");
    free(ll), free(lk), free(ck), free(g_last_logits);
}

/* ---- DSpark -------------------------------------------------------------------------------------- */

/* llama.cpp's DSpark draft (common/speculative.cpp with type draft-dspark): from the anchor, the block
 * is n_max = B tokens and row i drafts the i-th token; with a bonus anchor, B tokens and rows 1 ..;
 * the Markov head biases row i by the previous greedy token, drafts are the biased rows' argmaxes and
 * the confidences are read from the nextn rows. drafted, conf: [n_draft]. */
static int32_t llama_draft_dspark(int d, const int32_t *prompt, int32_t N, int32_t *root, int32_t *drafted, float *conf) {
    const kite_dflash *h = g_drafter[d]->dflash;
    const int32_t V = g_target->n_vocab, dim = g_target->weights.hp.dim, B = kite_dflash_block_size(h);
    const bool anchor = kite_dflash_from_anchor(h);
    struct llama_context *tgt, *dft;
    llama_block(d, prompt, N, NEXTN_ON, true, root, NULL, &tgt, &dft);
    const float *nextn = L.get_nextn(dft);
    assert_non_null(nextn);
    int32_t n = 0;
    for (int32_t i = anchor ? 0 : 1; i < B; i++, n++) {
        drafted[n] = llama_api_argmax(L.get_logits_ith(dft, i), V);
        conf[n] = nextn[(size_t)i * dim];
    }
    L.free_ctx(dft);
    L.free_ctx(tgt);
    return n;
}

/* A confidence threshold between llama.cpp's confidences cl[0 .. n) that cuts the chain inside it: the
 * midpoint of the widest gap among the middle ones (so kite's confidences, within CONF_BOUND of these,
 * fall on the same side), or 0 when no gap is wide enough. */
static float cutting_p_min(const float *cl, int32_t n) {
    float sorted[MAX_BLOCK];
    memcpy(sorted, cl, sizeof(float) * (size_t)n);
    for (int32_t i = 1; i < n; i++)
        for (int32_t j = i; j > 0 && sorted[j] < sorted[j - 1]; j--) {
            float x = sorted[j];
            sorted[j] = sorted[j - 1], sorted[j - 1] = x;
        }
    float best_gap = 0, p_min = 0;
    for (int32_t i = n / 4; i + 1 < n - n / 4; i++)
        if (sorted[i + 1] - sorted[i] > best_gap) best_gap = sorted[i + 1] - sorted[i], p_min = 0.5f * (sorted[i] + sorted[i + 1]);
    return best_gap > 100 * CONF_BOUND ? p_min : 0.0f;
}

static void test_dspark_matches_llamacpp(void **state) {
    (void)state;
    static const int32_t lengths[3] = {1, 17, 40};
    float worst = 0;
    int off_argmax = 0, cut_cases = 0, cut_short = 0;
    for (int d = N_V2; d < N_DRAFTERS; d++) {
        const kite_dflash *h = g_drafter[d]->dflash;
        assert_true(kite_dflash_markov_rank(h) > 0 && kite_dflash_has_confidence(h));
        const int32_t B = kite_dflash_block_size(h), n_draft = kite_dflash_from_anchor(h) ? B : B - 1;
        for (int c = 0; c < 3; c++) {
            int32_t prompt[MAX_PROMPT], N = lengths[c];
            prompt[0] = 1;
            for (int32_t i = 1; i < N; i++) prompt[i] = 3 + (int32_t)((i * 131 + c * 17 + d * 7) % (g_target->n_vocab - 4));
            int32_t root, dl[MAX_BLOCK];
            float cl[MAX_BLOCK];
            assert_int_equal(llama_draft_dspark(d, prompt, N, &root, dl, cl), n_draft);
            kite_draft_tree t;
            kite_session *s = kite_block(d, prompt, N, root, n_draft, &t);
            const float *ck = kite_dflash_last_confidence(s->spec.dflash);
            int32_t rows = 0;
            const float *lg = kite_dflash_last_logits(s->spec.dflash, &rows);
            for (int32_t j = 0; j < n_draft; j++) {
                if (t.token[j + 1] != dl[j]) fail_msg("%s, prompt of %d: draft %d kite %d, llama.cpp %d", SHAPES[d], N, j, t.token[j + 1], dl[j]);
                float x = fabsf(ck[j] - cl[j]);
                if (x > worst) worst = x;
                if (x > CONF_BOUND) fail_msg("%s, prompt of %d: confidence %d kite %g, llama.cpp %g", SHAPES[d], N, j, (double)ck[j], (double)cl[j]);
                if (llama_api_argmax(lg + (size_t)j * g_target->n_vocab, g_target->n_vocab) != dl[j]) off_argmax++;
            }
            kite_session_free(s);
            /* With a confidence threshold (llama.cpp's --spec-draft-p-min), llama.cpp's chain stops before the
             * first row whose confidence is below it: kite's draft is that prefix. */
            const float p_min = cutting_p_min(cl, n_draft);
            if (p_min > 0) {
                int32_t keep = 0;
                while (keep < n_draft && !(cl[keep] < p_min)) keep++;
                kite_spec_params spec = kite_spec_default_params();
                spec.drafter = KITE_DRAFT_MODEL, spec.draft_model = g_drafter[d], spec.budget = n_draft, spec.draft_p_min = p_min;
                kite_session *sc = compare_session(g_target, &spec, prompt, N);
                kite_gen_params gp = kite_gen_default_params();
                gp.temperature = 0.0f;
                kite_error e = {0};
                kite_draft_tree tc;
                if (kite_spec_draft(&sc->spec, sc, root, n_draft, &gp, &tc, &e)) fail_msg("%s", e.msg);
                if (tc.n - 1 != keep)
                    fail_msg("%s, prompt of %d, p_min %g: kite drafted %d tokens, llama.cpp's chain stops after %d", SHAPES[d], N,
                             (double)p_min, tc.n - 1, keep);
                for (int32_t j = 0; j < keep; j++) assert_int_equal(tc.token[j + 1], dl[j]);
                cut_short += keep < n_draft, cut_cases++;
                kite_session_free(sc);
            }
        }
    }
    fprintf(stderr, "DSpark: greedy chains equal llama.cpp's (%d drafts moved off the unbiased argmax by the Markov head); largest "
            "confidence difference %.3g (bound %.1g)\n", off_argmax, (double)worst, (double)CONF_BOUND);
    if (off_argmax == 0) fail_msg("negative control: the Markov head never changed a draft, so it is not tested");
    fprintf(stderr, "DSpark with a confidence threshold: %d of %d chains cut short as llama.cpp cuts them\n", cut_short, cut_cases);
    if (cut_short == 0) fail_msg("no threshold cut a chain short: the confidence gate is not tested");
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_blocks_match_llamacpp), cmocka_unit_test(test_dflash2_matches_llamacpp),
                                       cmocka_unit_test(test_dspark_matches_llamacpp)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
