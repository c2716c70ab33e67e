/* A tree verification pass whose accepted path is not the tree's first branch must leave the session exactly
 * as decoding the path token by token does, for every family (one gen-model shape per family as arguments,
 * tests/spec/tests.cmake lists them).
 *
 * The drafters' trees rarely test this: their accepted path is usually the first child at every level, whose
 * nodes already sit in position order, so a commit that moved nothing (or moved only K/V rows and forgot a
 * family's other per-position state, such as LFM2's conv rows or Qwen3.5's DeltaNet rows) would still pass.
 * Here, after a 100-token prompt (past Gemma 3's window of 8 and LFM2's 3 conv taps), the tree is
 *     node 0  root r            (the committed context's next token)
 *     node 1  w1, child of 0    (first branch, rejected)
 *     node 2  c1, child of 0    (second branch, accepted)
 *     node 3  w2, child of 1    (rejected)
 *     node 4  c2, child of 2    (accepted)
 *     node 5  c3, child of 4    (accepted)
 * and the path 0, 2, 4, 5 is committed (kite_kv_commit, as the session's walk does). Against a second session
 * that decoded prompt + r c1 c2 c3 one token per pass (plain decoding: the reference speculation must match;
 * a recurrent layer's several-row chain runs the chunked form, whose float sums differ from the step-wise
 * recurrence a tree and decoding both run):
 *   1. the tree's logits at the path's nodes equal the decoded ones, bit for bit;
 *   2. every attention layer's K/V rows of positions 0 .. P+3, every conv layer's rows of the taps' window and
 *      every DeltaNet layer's kept rows (conv input, g, beta) of the positions both sessions hold are
 *      byte-identical;
 *   3. a continuation of 8 tokens gives bit-identical logits, and then the DeltaNet state (base block: the
 *      recurrent matrices and conv window at P+4, the block at P+12 and the continuation's rows) is
 *      byte-identical too (both sessions now hold it in the same form);
 * and the negative control: the same tree pass with no commit at all must make step 3 differ (so the check
 * can see a commit that leaves the path's rows where the pass put them). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "engine/engine.h"

enum { N_PROMPT = 100, N_TREE = 6, N_PATH = 4, N_CONT = 8, N_CTX = 256 };

static char **g_shapes;
static int g_n_shapes;

static kite_session *open_session(kite_model *m) {
    kite_session_params sp = kite_session_default_params();
    sp.n_ctx = N_CTX;
    sp.n_threads = 1;
    sp.kv_type = KITE_KV_F32;
    kite_session *s = NULL;
    char err[512];
    if (kite_session_open(&s, m, &sp, err, sizeof err)) fail_msg("session: %s", err);
    return s;
}

static void prompt(kite_session *s, const int32_t *ids, size_t n) {
    char err[512];
    if (kite_prompt(s, ids, n, err, sizeof err)) fail_msg("kite_prompt: %s", err);
}

static void run_chain(kite_session *s, const int32_t *ids, size_t n, float *logits) {
    kite_error e = {0};
    if (kite_session_run_chain(s, ids, n, logits, &e)) fail_msg("run_chain: %s", e.msg);
}

/* The tree pass of the header on s (n_past = P, nothing unfed), then the path's commit when commit is set. */
static void tree_pass(kite_session *s, const int32_t *tree, bool commit, float *tree_logits) {
    static const int32_t parent[N_TREE] = {-1, 0, 0, 1, 2, 4};
    static const int32_t path[N_PATH] = {0, 2, 4, 5};
    const int32_t P = s->n_past;
    kite_forward(&s->model->weights, &s->kv, &s->scratch, s->pool, tree, parent, 0, N_TREE, P, tree_logits, true);
    if (commit) kite_kv_commit(&s->kv, s->model->weights.hp.n_layers, P, path, N_PATH);
    for (int i = 0; i < N_PATH; i++) s->history[P + i] = tree[path[i]];
    s->n_past = P + N_PATH;
}

/* Whether two DeltaNet states agree on what both hold: the kept rows of the positions both hold, the base
 * block when both bases sit at one position, the block ahead when both reach one end position with it.
 * *blocks counts the blocks compared (a caller that needs the states themselves compared checks it). */
static bool same_dn(const kite_dn_state *a, const kite_dn_state *b, int *blocks, const char **what) {
    *blocks = 0;
    if (!a && !b) return true;
    if (!a || !b || a->n_tree || b->n_tree) {
        *what = "DeltaNet states (one holds an uncommitted tree)";
        return false;
    }
    const size_t row_bytes = sizeof(float) * (size_t)a->n_rec * a->row_floats; /* one position, every layer */
    const size_t set_bytes = sizeof(float) * (size_t)a->n_rec * a->block_floats;
    const int32_t end_a = a->base_pos + a->n_rows, end_b = b->base_pos + b->n_rows;
    const int32_t p0 = a->base_pos > b->base_pos ? a->base_pos : b->base_pos, p1 = end_a < end_b ? end_a : end_b;
    for (int32_t p = p0; p < p1; p++)
        if (memcmp((const char *)a->rows + (size_t)(p - a->base_pos) * row_bytes,
                   (const char *)b->rows + (size_t)(p - b->base_pos) * row_bytes, row_bytes)) {
            *what = "DeltaNet rows (conv input, g, beta)";
            return false;
        }
    if (a->base_pos == b->base_pos) {
        if (memcmp((const char *)a->blocks + (size_t)a->base * set_bytes, (const char *)b->blocks + (size_t)b->base * set_bytes,
                   set_bytes)) {
            *what = "DeltaNet base states (recurrent matrices, conv window)";
            return false;
        }
        ++*blocks;
    }
    if (end_a == end_b && a->head_ahead && b->head_ahead) {
        if (memcmp((const char *)a->blocks + (size_t)(1 - a->base) * set_bytes,
                   (const char *)b->blocks + (size_t)(1 - b->base) * set_bytes, set_bytes)) {
            *what = "DeltaNet end states (recurrent matrices, conv window)";
            return false;
        }
        ++*blocks;
    }
    return true;
}

/* Whether a and b hold the same rows for positions [0, n): K/V of attention layers, the conv rows of the
 * positions the taps read next, the DeltaNet rows both hold. */
static bool same_cache(const kite_kv_cache *a, const kite_kv_cache *b, int32_t n, const char **what) {
    for (int32_t l = 0; l < a->n_layers; l++) {
        if (a->dn && a->dn->slot[l] >= 0) continue; /* a DeltaNet layer: same_dn */
        if (!kite_kv_layer_has_kv(a, l)) {
            for (int32_t p = n - (a->conv_taps - 1); p < n; p++)
                if (memcmp(kite_kv_conv_row(a, l, p), kite_kv_conv_row(b, l, p), sizeof(float) * (size_t)a->conv_dim)) {
                    *what = "conv rows";
                    return false;
                }
            continue;
        }
        /* a ring: the positions both still hold (the pass's rejected nodes overwrote the oldest rows of a's) */
        int32_t high = a->ring_high > b->ring_high ? a->ring_high : b->ring_high;
        int32_t p0 = kite_kv_is_ring(a, l) && high > a->layer_rows[l] ? high - a->layer_rows[l] : 0;
        for (int32_t h = 0; h < a->layer_kv_heads[l]; h++) /* each layer's own heads and row size (Gemma 4) */
            for (int32_t p = p0; p < n; p++) {
                size_t at = kite_kv_offset(a, l, h, kite_kv_row(a, l, p));
                if (memcmp((const char *)a->k + at, (const char *)b->k + at, a->layer_row_bytes[l]) ||
                    memcmp((const char *)a->v + at, (const char *)b->v + at, a->layer_row_bytes[l])) {
                    *what = "K/V rows";
                    return false;
                }
            }
    }
    int blocks;
    return same_dn(a->dn, b->dn, &blocks, what);
}

static void check_shape(const char *shape) {
    char dir[64], path[128], err[512];
    snprintf(dir, sizeof dir, "/tmp/kite-tree-commit-XXXXXX");
    if (!mkdtemp(dir)) fail_msg("mkdtemp failed");
    snprintf(path, sizeof path, "%s/model.gguf", dir);
    kite_random_model_params rp = {.shape = shape, .type = "f32", .seed = 11};
    if (kite_write_random_model(path, &rp, err, sizeof err)) fail_msg("%s: %s", shape, err);
    kite_model_params mp = kite_model_default_params();
    mp.n_threads = 1;
    kite_model *m = NULL;
    if (kite_model_open(&m, path, &mp, err, sizeof err)) fail_msg("%s: %s", shape, err);
    unlink(path);
    rmdir(dir);
    const int32_t V = m->n_vocab;
    int32_t ids[N_PROMPT + N_PATH + N_CONT];
    for (int i = 0; i < N_PROMPT; i++) ids[i] = 3 + (int32_t)((i * 53 + (i / 7) * 11) % (V - 3));
    /* the tree's tokens: r c1 c2 c3 on the path, w1 w2 off it (all distinct from their siblings) */
    const int32_t r = 5, c1 = 40, c2 = 77, c3 = 123, w1 = 200, w2 = 31;
    const int32_t tree[N_TREE] = {r, w1, c1, w2, c2, c3};
    const int32_t chain[N_PATH] = {r, c1, c2, c3};
    int32_t cont[N_CONT];
    for (int i = 0; i < N_CONT; i++) cont[i] = 7 + (int32_t)((i * 97) % (V - 7));

    float *tree_logits = malloc(sizeof(float) * (size_t)V * N_TREE);
    float *chain_logits = malloc(sizeof(float) * (size_t)V * N_PATH);
    float *cont_a = malloc(sizeof(float) * (size_t)V * N_CONT), *cont_b = malloc(sizeof(float) * (size_t)V * N_CONT);
    assert_non_null(tree_logits), assert_non_null(chain_logits), assert_non_null(cont_a), assert_non_null(cont_b);

    kite_session *a = open_session(m), *b = open_session(m), *c = open_session(m);
    prompt(a, ids, N_PROMPT);
    prompt(b, ids, N_PROMPT);
    prompt(c, ids, N_PROMPT);
    tree_pass(a, tree, true, tree_logits);
    for (int i = 0; i < N_PATH; i++) run_chain(b, chain + i, 1, chain_logits + (size_t)i * V); /* plain decoding */
    static const int32_t on_path[N_PATH] = {0, 2, 4, 5};
    for (int i = 0; i < N_PATH; i++)
        if (memcmp(tree_logits + (size_t)on_path[i] * V, chain_logits + (size_t)i * V, sizeof(float) * (size_t)V))
            fail_msg("%s: the tree's logits at node %d differ from decoding's at position %d", shape, on_path[i], N_PROMPT + i);
    const char *what = "";
    if (!same_cache(&a->kv, &b->kv, N_PROMPT + N_PATH, &what))
        fail_msg("%s: after committing the second branch the cache's %s differ from decoding's", shape, what);
    run_chain(a, cont, N_CONT, cont_a);
    run_chain(b, cont, N_CONT, cont_b);
    int dn_blocks = 0;
    if (!same_dn(a->kv.dn, b->kv.dn, &dn_blocks, &what))
        fail_msg("%s: after the continuation the %s differ from decoding's", shape, what);
    if (a->kv.dn && dn_blocks != 2)
        fail_msg("%s: after the continuation the DeltaNet states are not held alike (%d blocks compared)", shape, dn_blocks);
    if (memcmp(cont_a, cont_b, sizeof(float) * (size_t)V * N_CONT))
        fail_msg("%s: the continuation after the committed second branch differs from decoding's", shape);
    /* control: the same pass without its commit leaves the path's rows at their nodes' slots */
    tree_pass(c, tree, false, tree_logits);
    run_chain(c, cont, N_CONT, cont_a);
    if (!memcmp(cont_a, cont_b, sizeof(float) * (size_t)V * N_CONT))
        fail_msg("%s: control: a tree pass left uncommitted continues exactly like the chain (the check cannot see a "
                 "broken commit)", shape);
    print_message("%s: second-branch commit identical to decoding (logits, cache rows%s, continuation); without the "
                  "commit the continuation differs\n", shape, a->kv.dn ? ", DeltaNet rows and states" : "");
    kite_session_free(a);
    kite_session_free(b);
    kite_session_free(c);
    kite_model_free(m);
    free(tree_logits), free(chain_logits), free(cont_a), free(cont_b);
}

static void test_tree_commit_exact(void **state) {
    (void)state;
    assert_true(g_n_shapes > 0);
    for (int i = 0; i < g_n_shapes; i++) check_shape(g_shapes[i]);
}

int main(int argc, char **argv) {
    g_shapes = argv + 1;
    g_n_shapes = argc - 1;
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_tree_commit_exact)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
