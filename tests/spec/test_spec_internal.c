/* Speculative decoding's parts, tested directly (private headers):
 *   - the verification walk (kite_spec_walk), exhaustively: every draft tree up to depth 4 over a
 *     2-token vocabulary and up to depth 2 over a 3-token one, nodes in breadth-first and depth-first
 *     order, greedy, sampled and with penalties, stopped by the caller at every length: the walk emits
 *     exactly plain decoding's tokens, as many as the longest drafted path that matches them plus one;
 *   - the rejection verifier: one step (kite_spec_rejection_step) draws from p whatever q proposed, and
 *     accepts with probability sum min(p, q); whole generations through the walk with rejection have
 *     the target's joint distribution (chi-square);
 *   - the n-gram drafter's branches, worked out by hand, including the remembered conversations;
 *   - the draft model's tree (shape invariants, best child first) and its cache after passes
 *     (kite_spec_commit): the same K/V as running the accepted text afresh;
 *   - the budget controller on a synthetic cost curve, its fall back to plain decoding and re-probe.
 * The chi-square tests use fixed seeds, so their outcome is fixed; they fail at p < 1e-4. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "engine/engine.h"
#include "sample/sampler.h"
#include "spec/spec.h"
#include "test_util.h"

/* ---- chi-square ------------------------------------------------------------------------------------ */

/* Q(a, x) = Gamma(a, x) / Gamma(a): series for small x, Lentz's continued fraction otherwise. */
static double gamma_q(double a, double x) {
    if (x <= 0) return 1.0;
    double log_front = a * log(x) - x - lgamma(a);
    if (x < a + 1) {
        double term = 1 / a, sum = term;
        for (int n = 1; n < 100000 && term > sum * 1e-17; n++) {
            term *= x / (a + n);
            sum += term;
        }
        return 1 - sum * exp(log_front);
    }
    double b = x + 1 - a, c = 1e300, d = 1 / b, h = d;
    for (int i = 1; i < 100000; i++) {
        double an = -i * (i - a);
        b += 2;
        d = an * d + b;
        if (fabs(d) < 1e-300) d = 1e-300;
        c = b + an / c;
        if (fabs(c) < 1e-300) c = 1e-300;
        d = 1 / d;
        h *= d * c;
        if (fabs(d * c - 1) < 1e-16) break;
    }
    return exp(log_front) * h;
}

/* p-value of Pearson's statistic over the cells with expected > 0; a drawn cell with expected 0 fails. */
static double chi_square(const long *counts, const double *expected_p, int n_cells, long n, const char *what) {
    double chi2 = 0;
    int cells = 0;
    for (int i = 0; i < n_cells; i++) {
        if (expected_p[i] == 0) {
            if (counts[i]) fail_msg("%s: cell %d has probability 0 but was drawn %ld times", what, i, counts[i]);
            continue;
        }
        double e = expected_p[i] * (double)n;
        assert_true(e >= 5); /* the approximation needs enough expected counts */
        chi2 += (counts[i] - e) * (counts[i] - e) / e;
        cells++;
    }
    double p = gamma_q((cells - 1) / 2.0, chi2 / 2);
    print_message("%-44s chi2 %7.2f, %2d dof, p = %.4f\n", what, chi2, cells - 1, p);
    if (p < 1e-4) fail_msg("%s: chi2 %.2f with %d dof, p = %.3g", what, chi2, cells - 1, p);
    return p;
}

static void test_chi_square_reference_points(void **state) {
    (void)state;
    /* Published upper 1e-4 quantiles of chi-square for 1, 10, 15 dof; Q(1, x) = exp(-x). */
    assert_true(fabs(gamma_q(0.5, 15.137 / 2) - 1e-4) < 2e-6);
    assert_true(fabs(gamma_q(5.0, 35.564 / 2) - 1e-4) < 2e-6);
    assert_true(fabs(gamma_q(7.5, 44.263 / 2) - 1e-4) < 2e-6);
    assert_true(fabs(gamma_q(1.0, 3.0) - exp(-3.0)) < 1e-12);
}

/* ---- synthetic target and draft: logits as a function of the whole token sequence ------------------ */

/* A deterministic pseudo-random value in [-1, 1) for (salt, sequence, token). */
static float seq_hash(uint64_t salt, const int32_t *seq, int n, int32_t token) {
    uint64_t h = 1469598103934665603ull ^ salt;
    for (int i = 0; i < n; i++) h = (h ^ (uint64_t)(uint32_t)seq[i]) * 1099511628211ull;
    h = (h ^ (uint64_t)(uint32_t)token) * 1099511628211ull;
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 32;
    return (float)((double)(h >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static void seq_logits(uint64_t salt, float scale, const int32_t *seq, int n, int32_t V, float *out) {
    for (int32_t t = 0; t < V; t++) out[t] = scale * seq_hash(salt, seq, n, t);
}

/* ---- the walk, exhaustively ------------------------------------------------------------------------- */

enum { MAX_V = 3, MAX_FULL = 64, P0 = 5 };

/* The full V-ary tree of depth D, breadth first: node f has token tok[f] (the last of its sequence),
 * parent par[f], depth dep[f]; node 0 is the root. */
typedef struct full_tree {
    int32_t V, D, n;
    int32_t tok[MAX_FULL], par[MAX_FULL], dep[MAX_FULL];
    float logits[MAX_FULL][MAX_V]; /* the target's logits after node f's sequence */
    int32_t plain[8];             /* plain decoding's tokens y1 .. y(D+1) after the root */
    int32_t plain_node[8];        /* full-tree node of y1..yk, k = 0..D (plain_node[0] = root) */
} full_tree;

typedef struct walk_case {
    const char *name;
    kite_gen_params gp;
    int32_t committed[P0]; /* history before the root */
    int32_t root;
} walk_case;

static int32_t sequence_of(const full_tree *ft, const walk_case *wc, int32_t f, int32_t *seq) {
    int32_t n = P0 + 1 + ft->dep[f];
    memcpy(seq, wc->committed, sizeof wc->committed);
    seq[P0] = wc->root;
    for (int32_t g = f, at = n - 1; g > 0; g = ft->par[g]) seq[at--] = ft->tok[g];
    return n;
}

static void build_full_tree(full_tree *ft, int32_t V, int32_t D, const walk_case *wc, uint64_t salt) {
    memset(ft, 0, sizeof *ft);
    ft->V = V, ft->D = D, ft->n = 1;
    ft->par[0] = -1;
    for (int32_t f = 0; f < ft->n; f++) {
        if (ft->dep[f] == D) continue;
        for (int32_t t = 0; t < V; t++) {
            int32_t g = ft->n++;
            assert_true(g < MAX_FULL);
            ft->tok[g] = t, ft->par[g] = f, ft->dep[g] = ft->dep[f] + 1;
        }
    }
    int32_t seq[P0 + 16];
    for (int32_t f = 0; f < ft->n; f++) {
        int32_t n = sequence_of(ft, wc, f, seq);
        seq_logits(salt, 1.5f, seq, n, V, ft->logits[f]);
    }
    /* Plain decoding, token by token: kite_sample at positions P0 + 1, P0 + 2, ... */
    int32_t f = 0;
    ft->plain_node[0] = 0;
    for (int32_t k = 0; k <= D; k++) {
        float row[MAX_V];
        memcpy(row, ft->logits[f], sizeof row);
        int32_t n = sequence_of(ft, wc, f, seq);
        ft->plain[k] = kite_sample(&wc->gp, row, V, seq, (size_t)n, P0 + 1 + k);
        if (k == D) break;
        int32_t child = -1;
        for (int32_t g = 1; g < ft->n; g++)
            if (ft->par[g] == f && ft->tok[g] == ft->plain[k]) child = g;
        f = child;
        ft->plain_node[k + 1] = f;
    }
}

typedef struct walk_env {
    const full_tree *ft;
    const walk_case *wc;
    kite_spec_state st;
    int64_t walks;
    int64_t by_match[8]; /* walks by the length of the matching path, for coverage */
} walk_env;

typedef struct emit_log {
    int32_t tokens[64];
    int n, stop_at;
} emit_log;

static bool log_emit(void *user, int32_t token, const float *logits) {
    emit_log *l = user;
    (void)logits;
    l->tokens[l->n++] = token;
    return !(l->stop_at > 0 && l->n >= l->stop_at);
}

/* Checks one tree (a prefix-closed set of full-tree nodes, `in`), laid out in the given order. */
static void check_tree(walk_env *env, const bool *in, const int32_t *order, int32_t n_order) {
    const full_tree *ft = env->ft;
    kite_draft_tree t;
    memset(&t, 0, sizeof t);
    int32_t index_of[MAX_FULL];
    static float tree_logits[MAX_FULL * MAX_V];
    for (int32_t i = 0; i < n_order; i++) {
        int32_t f = order[i];
        if (!in[f]) continue;
        int32_t j = t.n++;
        index_of[f] = j;
        t.token[j] = f == 0 ? env->wc->root : ft->tok[f];
        t.parent[j] = f == 0 ? -1 : index_of[ft->par[f]];
        t.depth[j] = ft->dep[f];
        memcpy(tree_logits + j * ft->V, ft->logits[f], sizeof(float) * (size_t)ft->V);
    }
    /* Expected: the drafted path that matches plain decoding, k nodes below the root. */
    int32_t k = 0;
    while (k < ft->D && in[ft->plain_node[k + 1]]) k++;
    env->by_match[k]++;
    for (int stop = 0; stop <= k + 1; stop++) {
        int32_t history[P0 + 40];
        memcpy(history, env->wc->committed, sizeof env->wc->committed);
        emit_log log = {.stop_at = stop};
        float buf[MAX_V];
        int32_t path[KITE_MAX_DRAFT + 1];
        int32_t n_path = kite_spec_walk(&env->st, &env->wc->gp, &t, tree_logits, ft->V, history, P0, buf, log_emit, NULL, &log, path);
        int want = stop == 0 ? k + 1 : stop;
        if (n_path != want || log.n != want)
            fail_msg("%s: tree of %d nodes, match %d, stop %d: %d path nodes, %d tokens", env->wc->name, t.n, k, stop, n_path,
                     log.n);
        for (int i = 0; i < want; i++) {
            assert_int_equal(log.tokens[i], ft->plain[i]);
            assert_int_equal(path[i], index_of[ft->plain_node[i]]);
            assert_int_equal(history[P0 + i], t.token[path[i]]);
        }
        env->walks++;
    }
}

/* Enumerates every prefix-closed subset of the full tree (node f may be in only if its parent is). */
static void enumerate(walk_env *env, bool *in, int32_t f, const int32_t *dfs, int32_t *count) {
    const full_tree *ft = env->ft;
    if (f == ft->n) {
        int32_t bfs[MAX_FULL];
        for (int32_t i = 0; i < ft->n; i++) bfs[i] = i;
        check_tree(env, in, bfs, ft->n);
        check_tree(env, in, dfs, ft->n);
        (*count)++;
        return;
    }
    in[f] = false;
    enumerate(env, in, f + 1, dfs, count);
    if (in[ft->par[f]]) {
        in[f] = true;
        enumerate(env, in, f + 1, dfs, count);
        in[f] = false;
    }
}

static void dfs_order(const full_tree *ft, int32_t f, int32_t *out, int32_t *n) {
    out[(*n)++] = f;
    /* children in reverse token order, so sibling order differs from the breadth-first layout too */
    for (int32_t g = ft->n - 1; g > 0; g--)
        if (ft->par[g] == f) dfs_order(ft, g, out, n);
}

static void walk_all_trees(int32_t V, int32_t D, const walk_case *wc, uint64_t salt, int32_t expect_trees) {
    full_tree *ft = calloc(1, sizeof *ft);
    walk_env *env = calloc(1, sizeof *env);
    assert_non_null(ft);
    assert_non_null(env);
    build_full_tree(ft, V, D, wc, salt);
    env->ft = ft, env->wc = wc;
    env->st.params = kite_spec_default_params();
    env->st.params.drafter = KITE_DRAFT_MODEL;
    int32_t dfs[MAX_FULL], n_dfs = 0, count = 0;
    dfs_order(ft, 0, dfs, &n_dfs);
    assert_int_equal(n_dfs, ft->n);
    bool in[MAX_FULL] = {true};
    enumerate(env, in, 1, dfs, &count);
    assert_int_equal(count, expect_trees);
    print_message("%-34s V %d depth %d: %d trees, %lld walks; plain path matched to depth 0..%d in", wc->name, V, D, count,
                  (long long)env->walks, D);
    for (int32_t k = 0; k <= D; k++) print_message(" %lld", (long long)env->by_match[k]);
    print_message(" trees\n");
    for (int32_t k = 0; k <= D; k++) assert_true(env->by_match[k] > 0);
    free(ft);
    free(env);
}

static walk_case make_case(const char *name, float T, uint64_t seed) {
    walk_case wc = {.name = name, .committed = {1, 0, 1, 1, 0}, .root = 0};
    wc.gp = kite_gen_default_params();
    wc.gp.temperature = T;
    wc.gp.top_k = 0, wc.gp.top_p = 1.0f, wc.gp.min_p = 0.0f;
    wc.gp.seed = seed;
    return wc;
}

static void test_walk_exhaustive(void **state) {
    (void)state;
    /* Number of trees: t(0) = 1, t(d) = (1 + t(d - 1))^V: V = 2 gives 1, 4, 25, 676, 458329 (depth 4);
     * V = 3 gives 1, 8, 729 (depth 2). */
    walk_case greedy = make_case("greedy", 0.0f, 1);
    walk_all_trees(2, 4, &greedy, 11, 458329);
    walk_case sampled = make_case("T 1.0", 1.0f, 77);
    walk_all_trees(2, 4, &sampled, 12, 458329);
    /* Penalties read the history: the committed tokens plus the node's own ancestors. */
    walk_case penalties = make_case("T 0.8, repeat/presence penalties", 0.8f, 5);
    penalties.gp.repeat_penalty = 1.8f, penalties.gp.presence_penalty = 0.4f, penalties.gp.penalty_last_n = 4;
    walk_all_trees(2, 4, &penalties, 13, 458329);
    for (uint64_t seed = 0; seed < 8; seed++) {
        walk_case v3 = make_case("V 3, T 0.7 top-k 2", 0.7f, 100 + seed);
        v3.gp.top_k = 2;
        v3.committed[0] = 2;
        walk_all_trees(3, 2, &v3, 20 + seed, 729);
        walk_case g3 = make_case("V 3, greedy", 0.0f, 0);
        walk_all_trees(3, 2, &g3, 40 + seed, 729);
    }
}

/* ---- rejection verification: one step ---------------------------------------------------------------- */

enum { RV = 8 };

/* p = softmax(logits / T) over the top-k tokens, by a full sort (the textbook definition). */
static void reference_p(const float *logits, int32_t V, float T, int32_t top_k, double *p) {
    int32_t order[RV];
    for (int32_t i = 0; i < V; i++) order[i] = i;
    for (int32_t i = 0; i < V; i++)
        for (int32_t j = i + 1; j < V; j++)
            if (logits[order[j]] > logits[order[i]]) { int32_t x = order[i]; order[i] = order[j]; order[j] = x; }
    int32_t keep = top_k > 0 && top_k < V ? top_k : V;
    double z = 0;
    for (int32_t i = 0; i < V; i++) p[i] = 0;
    for (int32_t i = 0; i < keep; i++) z += exp((double)logits[order[i]] / T);
    for (int32_t i = 0; i < keep; i++) p[order[i]] = exp((double)logits[order[i]] / T) / z;
}

static int32_t sample_from_logq(const float *logq, int32_t V, uint64_t seed, int64_t pos) {
    int32_t best = -1;
    float best_score = -INFINITY;
    for (int32_t v = 0; v < V; v++) {
        if (logq[v] == -INFINITY) continue;
        float s = logq[v] + kite_gumbel(seed, pos, v);
        if (s > best_score) best_score = s, best = v;
    }
    return best;
}

static void test_rejection_step_distribution(void **state) {
    (void)state;
    static const float target[RV] = {1.2f, -0.3f, 0.4f, 2.0f, -1.0f, 0.9f, 0.1f, -0.6f};
    /* q proposes token 4 (which top-k 6 masks out of p: p = 0) and never proposes token 5 (q = 0). */
    static const float draft[RV] = {0.2f, 0.8f, 1.1f, 0.9f, 0.5f, -INFINITY, -0.2f, 0.3f};
    kite_gen_params gp = kite_gen_default_params();
    gp.temperature = 0.8f, gp.top_k = 6, gp.top_p = 1.0f, gp.min_p = 0.0f, gp.seed = 4242;
    double p[RV], q[RV];
    reference_p(target, RV, gp.temperature, gp.top_k, p);
    assert_true(p[4] == 0 && p[7] == 0 && p[5] > 0.1);
    float logq[RV];
    double zq = 0;
    for (int32_t v = 0; v < RV; v++) zq += draft[v] == -INFINITY ? 0 : exp((double)draft[v] / gp.temperature);
    for (int32_t v = 0; v < RV; v++) {
        q[v] = draft[v] == -INFINITY ? 0 : exp((double)draft[v] / gp.temperature) / zq;
        logq[v] = q[v] > 0 ? (float)log(q[v]) : -INFINITY;
    }
    kite_spec_state st;
    memset(&st, 0, sizeof st);
    float work[RV];
    st.work = work;
    const long N = 200000;
    for (int mode = 0; mode < 2; mode++) { /* 0: a draft model's sample x ~ q; 1: a certain draft (q = delta) */
        long counts[RV] = {0}, accepted = 0;
        double want_accept = 0;
        for (int32_t v = 0; v < RV; v++) want_accept += mode == 0 ? fmin(p[v], q[v]) : p[v] / RV;
        for (long i = 0; i < N; i++) {
            int32_t x = mode == 0 ? sample_from_logq(logq, RV, 99, i) : (int32_t)(i % RV);
            bool acc = false;
            int32_t y = kite_spec_rejection_step(&st, &gp, target, RV, NULL, 0, i, x, mode == 0 ? logq : NULL, &acc);
            assert_true(y >= 0 && y < RV);
            if (acc) assert_int_equal(y, x), accepted++;
            counts[y]++;
        }
        chi_square(counts, p, RV, N, mode == 0 ? "rejection step, x ~ q" : "rejection step, certain draft");
        double rate = (double)accepted / N, sd = sqrt(want_accept * (1 - want_accept) / N);
        print_message("acceptance %.4f, expected sum min(p, q) = %.4f\n", rate, want_accept);
        assert_true(fabs(rate - want_accept) < 5 * sd);
    }
}

/* ---- rejection verification: whole generations through the walk ----------------------------------- */

enum { JV = 3, JOINT = JV * JV * JV, CHAIN = 3 };

typedef struct gen_sim {
    kite_gen_params gp;
    uint64_t p_salt, q_salt;
    kite_spec_state st;
    float draft_q[(CHAIN + 1) * JV];
    float work[JV];
    int32_t out[8];
    int n_out;
} gen_sim;

static bool sim_emit(void *user, int32_t token, const float *logits) {
    gen_sim *g = user;
    (void)logits;
    g->out[g->n_out++] = token;
    return g->n_out < 3;
}

/* log q over the draft's logits at the sampling temperature (no masks: q may propose what p masks). */
static void sim_logq(const gen_sim *g, const int32_t *seq, int n, float *logq) {
    float l[JV];
    seq_logits(g->q_salt, 1.0f, seq, n, JV, l);
    double z = 0;
    for (int32_t v = 0; v < JV; v++) z += exp((double)l[v] / g->gp.temperature);
    for (int32_t v = 0; v < JV; v++) logq[v] = (float)((double)l[v] / g->gp.temperature - log(z));
}

/* Generates 3 tokens after committed tokens {2, 0} and root 1 like the session does: draft a chain
 * from q, verify it with the target's logits, walk with rejection, commit, repeat. */
static void sim_generate(gen_sim *g) {
    int32_t history[64] = {2, 0};
    int32_t P = 2, root = 1;
    g->n_out = 0;
    while (g->n_out < 3) {
        kite_draft_tree t;
        memset(&t, 0, sizeof t);
        t.n = 1, t.token[0] = root, t.parent[0] = -1;
        float tree_logits[(CHAIN + 1) * JV];
        int32_t seq[64];
        memcpy(seq, history, sizeof(int32_t) * (size_t)P);
        seq[P] = root;
        for (int32_t j = 0; j <= CHAIN; j++) {
            int n = P + 1 + j;
            seq_logits(g->p_salt, 1.2f, seq, n, JV, tree_logits + j * JV);
            sim_logq(g, seq, n, g->draft_q + j * JV);
            if (j == CHAIN) break;
            /* the draft's own sample, with noise of its own */
            int32_t x = sample_from_logq(g->draft_q + j * JV, JV, g->gp.seed ^ 0x5EEDull, P + j + 1);
            t.token[t.n] = x, t.parent[t.n] = j, t.depth[t.n] = j + 1;
            t.n++;
            seq[n] = x;
        }
        float buf[JV];
        int32_t path[KITE_MAX_DRAFT + 1];
        int32_t n_path = kite_spec_walk(&g->st, &g->gp, &t, tree_logits, JV, history, P, buf, sim_emit, NULL, g, path);
        P += n_path;
        root = g->out[g->n_out - 1];
    }
}

static void test_rejection_generation_distribution(void **state) {
    (void)state;
    for (int cfg = 0; cfg < 2; cfg++) {
        gen_sim *g = calloc(1, sizeof *g);
        assert_non_null(g);
        g->gp = kite_gen_default_params();
        g->gp.temperature = 1.0f, g->gp.top_k = cfg == 1 ? 2 : 0, g->gp.top_p = 1.0f, g->gp.min_p = 0.0f;
        g->p_salt = 0x1111 + (uint64_t)cfg, g->q_salt = 0x2222 + (uint64_t)cfg;
        g->st.params = kite_spec_default_params();
        g->st.params.drafter = KITE_DRAFT_MODEL;
        g->st.params.verify = KITE_VERIFY_REJECTION;
        g->st.draft_q = g->draft_q;
        g->st.work = g->work;
        /* Expected: p(y1 | 2 0 1) p(y2 | 2 0 1 y1) p(y3 | 2 0 1 y1 y2), with the top-k mask by hand. */
        double want[JOINT];
        for (int c = 0; c < JOINT; c++) {
            int32_t seq[6] = {2, 0, 1, (int32_t)(c / 9), (int32_t)(c / 3 % 3), (int32_t)(c % 3)};
            double prob = 1;
            for (int k = 0; k < 3; k++) {
                float l[JV];
                double pk[JV];
                seq_logits(g->p_salt, 1.2f, seq, 3 + k, JV, l);
                reference_p(l, JV, g->gp.temperature, g->gp.top_k, pk);
                prob *= pk[seq[3 + k]];
            }
            want[c] = prob;
        }
        long counts[JOINT] = {0};
        const long N = 120000;
        for (long i = 0; i < N; i++) {
            g->gp.seed = 1000003 * (uint64_t)cfg + (uint64_t)i;
            sim_generate(g);
            counts[g->out[0] * 9 + g->out[1] * 3 + g->out[2]]++;
        }
        chi_square(counts, want, JOINT, N, cfg ? "rejection walk, 3 tokens, top-k 2" : "rejection walk, 3 tokens");
        free(g);
    }
}

/* ---- sessions on a real model: n-gram branches, the draft model's tree and cache, the controller ---- */

static kite_model *g_model;

static int setup(void **state) {
    (void)state;
    char err[512];
    kite_model_params mp = kite_model_default_params();
    mp.n_threads = 1;
    if (kite_model_open(&g_model, kite_test_data("models/tinystories-tok512/stories260K.gguf"), &mp, err, sizeof err)) {
        fprintf(stderr, "cannot open stories260K.gguf: %s\n", err);
        return -1;
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    kite_model_free(g_model);
    return 0;
}

static kite_session *session_with(const kite_spec_params *sp) {
    kite_session_params p = kite_session_default_params();
    p.n_ctx = 256;
    p.n_threads = 1;
    kite_session *s = NULL;
    char err[512];
    assert_int_equal(kite_session_open(&s, g_model, &p, err, sizeof err), KITE_OK);
    if (sp) assert_int_equal(kite_session_set_spec(s, sp, err, sizeof err), KITE_OK);
    return s;
}

static void expect_tree(const kite_draft_tree *t, const int32_t *tokens, const int32_t *parents, int32_t n) {
    if (t->n != n + 1) fail_msg("tree has %d nodes, want %d", t->n - 1, n);
    for (int32_t j = 0; j < n; j++) {
        if (t->token[j + 1] != tokens[j] || t->parent[j + 1] != parents[j])
            fail_msg("node %d: token %d parent %d, want token %d parent %d", j + 1, t->token[j + 1], t->parent[j + 1], tokens[j],
                     parents[j]);
        assert_int_equal(t->depth[j + 1], t->depth[parents[j]] + 1);
    }
}

static void test_ngram_branches(void **state) {
    (void)state;
    /* The context, then the root 13. The suffix 10 11 12 13 occurred twice before (followed by 30, most
     * recently, and by 20); 12 13 also occurred followed by 40. */
    static const int32_t ctx[] = {1, 12, 13, 40, 10, 11, 12, 13, 20, 10, 11, 12, 13, 30, 10, 11, 12};
    const int32_t n_ctx = (int32_t)(sizeof ctx / sizeof ctx[0]), root = 13;
    kite_gen_params gp = kite_gen_default_params();
    kite_error e = {0};
    kite_draft_tree t;
    for (int32_t width = 1; width <= 3; width++) {
        kite_spec_params sp = kite_spec_default_params();
        sp.drafter = KITE_DRAFT_NGRAM, sp.budget = 8, sp.tree_width = width;
        kite_session *s = session_with(&sp);
        char err[256];
        assert_int_equal(kite_prompt(s, ctx, (size_t)n_ctx, err, sizeof err), KITE_OK);
        int32_t saved = s->history[n_ctx];
        assert_int_equal(kite_spec_draft(&s->spec, s, root, width == 1 ? 3 : 8, &gp, &t, &e), KITE_OK);
        assert_int_equal(s->history[n_ctx], saved); /* the search borrows the slot after the context */
        if (width == 1) {
            /* the most recent occurrence's continuation: 30 10 11 (12 13) */
            expect_tree(&t, (const int32_t[]){30, 10, 11}, (const int32_t[]){0, 1, 2}, 3);
        } else if (width == 2) {
            /* two branches share the budget: 4 tokens each */
            expect_tree(&t, (const int32_t[]){30, 10, 11, 12, 20, 10, 11, 12}, (const int32_t[]){0, 1, 2, 3, 0, 5, 6, 7}, 8);
        } else {
            /* a third branch from the shorter suffix 12 13 (followed by 40); 8 tokens as 3 + 3 + 2 */
            expect_tree(&t, (const int32_t[]){30, 10, 11, 20, 10, 11, 40, 10}, (const int32_t[]){0, 1, 2, 0, 4, 5, 0, 7}, 8);
        }
        /* A new conversation: its suffix 11 12 13 is found only in the remembered one. */
        kite_session_reset(s);
        assert_int_equal(kite_prompt(s, (const int32_t[]){2, 11, 12}, 3, err, sizeof err), KITE_OK);
        assert_int_equal(kite_spec_draft(&s->spec, s, root, 3, &gp, &t, &e), KITE_OK);
        if (width == 1) expect_tree(&t, (const int32_t[]){30, 10, 11}, (const int32_t[]){0, 1, 2}, 3);
        else if (width == 2) expect_tree(&t, (const int32_t[]){30, 10, 20}, (const int32_t[]){0, 1, 0}, 3);
        else expect_tree(&t, (const int32_t[]){30, 20, 40}, (const int32_t[]){0, 0, 0}, 3); /* 12 13 40 is remembered too */
        /* nothing to match: no draft */
        kite_session_reset(s);
        assert_int_equal(kite_prompt(s, (const int32_t[]){7}, 1, err, sizeof err), KITE_OK);
        assert_int_equal(kite_spec_draft(&s->spec, s, 99, 8, &gp, &t, &e), KITE_OK);
        assert_int_equal(t.n, 1);
        kite_session_free(s);
    }
}

static bool sink(int32_t id, const char *text, size_t len, void *user) {
    (void)id, (void)text, (void)len, (void)user;
    return true;
}

static void test_draft_model_tree_and_cache(void **state) {
    (void)state;
    char err[512];
    int32_t prompt[16];
    size_t n_prompt = 0;
    assert_int_equal(kite_tokenize(g_model, "Once upon a time", 16, true, false, prompt, 16, &n_prompt, err, sizeof err), KITE_OK);
    for (int cfg = 0; cfg < 2; cfg++) {
        kite_gen_params gp = kite_gen_default_params();
        gp.temperature = cfg ? 0.9f : 0.0f;
        gp.max_tokens = 50, gp.ignore_eos = true;
        for (int32_t width = 1; width <= 8; width *= 2) {
            /* The model drafting for itself: the tree's first child of the root is the target's own token. */
            kite_spec_params sp = kite_spec_default_params();
            sp.drafter = KITE_DRAFT_MODEL, sp.draft_model = g_model, sp.budget = 20, sp.tree_width = width;
            kite_session *s = session_with(&sp);
            assert_int_equal(kite_prompt(s, prompt, n_prompt, err, sizeof err), KITE_OK);
            assert_int_equal(kite_generate(s, &gp, sink, NULL, err, sizeof err), KITE_OK);
            /* The draft model's cache after the passes: what running its accepted text afresh gives. */
            kite_session *d = s->spec.draft;
            assert_true(d->n_past > (int32_t)n_prompt);
            assert_memory_equal(d->history, s->history, sizeof(int32_t) * (size_t)d->n_past);
            kite_session *fresh = session_with(NULL);
            assert_int_equal(kite_prompt(fresh, d->history, (size_t)d->n_past, err, sizeof err), KITE_OK);
            const kite_hparams *hp = &g_model->weights.hp;
            for (int32_t l = 0; l < hp->n_layers; l++)
                for (int32_t h = 0; h < hp->n_kv_heads; h++) {
                    size_t off_d = kite_kv_offset(&d->kv, l, h, 0), off_f = kite_kv_offset(&fresh->kv, l, h, 0);
                    size_t bytes = d->kv.row_bytes * (size_t)d->n_past; /* a head's rows are contiguous */
                    assert_memory_equal((const char *)d->kv.k + off_d, (const char *)fresh->kv.k + off_f, bytes);
                    assert_memory_equal((const char *)d->kv.v + off_d, (const char *)fresh->kv.v + off_f, bytes);
                }
            kite_session_free(fresh);
            /* Tree invariants on a fresh draft. */
            kite_draft_tree t;
            kite_error e = {0};
            int32_t root = s->unfed_token;
            assert_true(root >= 0);
            assert_int_equal(kite_spec_draft(&s->spec, s, root, 20, &gp, &t, &e), KITE_OK);
            assert_int_equal(t.n, 21);
            int32_t children[KITE_MAX_DRAFT + 1] = {0};
            for (int32_t j = 1; j < t.n; j++) {
                int32_t pa = t.parent[j];
                assert_true(pa >= 0 && pa < j);
                assert_int_equal(t.depth[j], t.depth[pa] + 1);
                assert_true(t.fed[pa]);                          /* expanded nodes were run by the draft model */
                assert_true(t.logq[j] <= t.logq[pa] + 1e-6f);    /* cumulative log q never grows */
                assert_true(++children[pa] <= width);
                for (int32_t k = 1; k < j; k++) assert_false(t.parent[k] == pa && t.token[k] == t.token[j]);
            }
            if (width == 1) assert_int_equal(t.depth[20], 20);   /* a chain */
            /* The root's first child is the target's own next token (q = p). */
            float *row = malloc(sizeof(float) * (size_t)g_model->n_vocab);
            assert_non_null(row);
            kite_session *ref = session_with(NULL);
            int32_t n_hist = s->n_past;
            assert_int_equal(kite_prompt(ref, s->history, (size_t)n_hist, err, sizeof err), KITE_OK);
            assert_int_equal(kite_eval(ref, &root, 1, row, err, sizeof err), KITE_OK);
            int32_t *hist = malloc(sizeof(int32_t) * (size_t)(n_hist + 1));
            memcpy(hist, s->history, sizeof(int32_t) * (size_t)n_hist);
            hist[n_hist] = root;
            int32_t y = kite_sample(&gp, row, g_model->n_vocab, hist, (size_t)n_hist + 1, n_hist + 1);
            assert_int_equal(t.token[1], y);
            free(hist);
            free(row);
            kite_session_free(ref);
            kite_session_free(s);
        }
    }
}

/* ---- the budget controller ------------------------------------------------------------------------- */

/* The cost curve the model caches: ms per pass over B tokens at spec.c's points (which it must match). */
static const int32_t COST_AT[KITE_N_COST_POINTS] = {1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 33};
static const double COSTS[KITE_N_COST_POINTS] = {1.0, 1.1, 1.15, 1.3, 1.4, 1.45, 1.7, 2.1, 2.5, 3.4, 4.1};

static double cost_at(int32_t B) {
    for (int k = 1; k < KITE_N_COST_POINTS; k++)
        if (B <= COST_AT[k])
            return COSTS[k - 1] + (COSTS[k] - COSTS[k - 1]) * (B - COST_AT[k - 1]) / (double)(COST_AT[k] - COST_AT[k - 1]);
    return COSTS[KITE_N_COST_POINTS - 1];
}

static void set_costs(kite_session *s) {
    pthread_mutex_lock(&g_model->cost_lock);
    g_model->cost_threads = kite_pool_threads(s->pool);
    g_model->cost_points = KITE_N_COST_POINTS;
    memcpy(g_model->pass_cost_ms, COSTS, sizeof COSTS);
    pthread_mutex_unlock(&g_model->cost_lock);
}

/* A session drafting n-grams on the fixed cost curve COSTS: the budget controller's tests set its estimates by hand. */
static kite_session *controller_session(void) {
    kite_spec_params sp = kite_spec_default_params();
    sp.drafter = KITE_DRAFT_NGRAM;
    kite_session *s = session_with(&sp);
    set_costs(s);
    return s;
}

/* The doc's rule, worked independently: k maximising (1 + a + a^2 + ... + a^k) / (T(k + 1) + k c). */
static int32_t best_chain(double a, double c, int32_t max_k) {
    int32_t best = 0;
    double best_rate = 1.0 / cost_at(1), expected = 1, reach = 1;
    for (int32_t k = 1; k <= max_k; k++) {
        reach *= a;
        expected += reach;
        double rate = expected / (cost_at(k + 1) + k * c);
        if (rate > best_rate * 1.0001) best_rate = rate, best = k;
    }
    return best;
}

/* A DFlash-like drafter: one block of min(k + 1, 16) rows per pass, priced fixed + per_row per row,
 * worked independently like best_chain. */
static int32_t best_block_chain(double a, double fixed, double per_row, int32_t max_k) {
    int32_t best = 0;
    double best_rate = 1.0 / cost_at(1), expected = 1, reach = 1;
    for (int32_t k = 1; k <= max_k; k++) {
        reach *= a;
        expected += reach;
        double rate = expected / (cost_at(k + 1) + fixed + per_row * (k + 1 < 16 ? k + 1 : 16));
        if (rate > best_rate * 1.0001) best_rate = rate, best = k;
    }
    return best;
}

/* The rows of spec.c's DFlash curve points for a block of 16 (BLOCK_ROW_POINTS, clipped). */
static const int32_t BLOCK_POINT_ROWS16[KITE_N_BLOCK_POINTS] = {2, 3, 5, 7, 9, 13, 16, 16, 16};

static void set_block_line(kite_spec_state *st, double fixed, double per_row) {
    st->draft_block_rows = 16, st->draft_block_scale = 1.0;
    for (int k = 0; k < KITE_N_BLOCK_POINTS; k++) st->draft_block_ms[k] = fixed + per_row * BLOCK_POINT_ROWS16[k];
}

/* A DFlash block's cost with a part that does not depend on its rows: the choice follows the whole
 * measured curve (a fixed part paid once per pass favours longer chains), and an observed pass scales
 * the curve. */
static void test_budget_block_cost(void **state) {
    (void)state;
    kite_session *s = controller_session();
    kite_spec_state *st = &s->spec;
    static const double fixed[] = {0.0, 0.1, 0.3, 0.6};
    int32_t prev = 0;
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
        for (int d = 0; d < KITE_MAX_DRAFT; d++) st->accept_rate[d] = 0.85, st->observed[d] = 100;
        set_block_line(st, fixed[i], 0.02);
        st->plain_streak = 0, st->explore_count = 0;
        kite_spec_estimates_changed(st);
        int32_t want = best_block_chain(0.85, fixed[i], 0.02, KITE_MAX_DRAFT);
        assert_int_equal(kite_spec_choose_budget(st, s, KITE_MAX_DRAFT), want);
        assert_true(want >= prev);
        prev = want;
    }
    assert_true(best_block_chain(0.85, 0.6, 0.02, KITE_MAX_DRAFT) > best_block_chain(0.85, 0.0, 0.02, KITE_MAX_DRAFT));
    /* between the points the curve is linear: a kinked curve (rows 9 -> 13 twice as steep) is followed */
    set_block_line(st, 0.3, 0.02);
    for (int k = 5; k < KITE_N_BLOCK_POINTS; k++) st->draft_block_ms[k] += 0.02 * (BLOCK_POINT_ROWS16[k] - 9);
    kite_spec_estimates_changed(st);
    {
        int32_t want = 0;
        double best_rate = 1.0 / cost_at(1), expected = 1, reach = 1;
        for (int32_t k = 1; k <= KITE_MAX_DRAFT; k++) {
            int32_t rows = k + 1 < 16 ? k + 1 : 16;
            reach *= 0.85, expected += reach;
            double rate = expected / (cost_at(k + 1) + 0.3 + 0.02 * rows + (rows > 9 ? 0.02 * (rows - 9) : 0.0));
            if (rate > best_rate * 1.0001) best_rate = rate, want = k;
        }
        assert_int_equal(kite_spec_choose_budget(st, s, KITE_MAX_DRAFT), want);
    }
    /* an observed pass of 7 tokens (8 rows, between the points 7 and 9) at twice the curve: the first
     * observation replaces the starting scale, later ones move it by a tenth */
    set_block_line(st, 0.3, 0.02);
    st->draft_cost_observed = 0;
    kite_spec_observe_draft_cost(st, 2.0 * (0.3 + 0.02 * 8), 7);
    assert_true(fabs(st->draft_block_scale - 2.0) < 1e-12);
    st->draft_cost_observed = 1000;
    kite_spec_observe_draft_cost(st, 0.0, 7);
    assert_true(fabs(st->draft_block_scale - 1.8) < 1e-12);
    st->draft_block_rows = 0, st->draft_ms_per_token = 0.0;
    kite_session_free(s);
}

/* The leading points of COST_AT that cover a pass over B tokens. */
static int points_covering(int32_t B) {
    int n = 1;
    while (n < KITE_N_COST_POINTS && COST_AT[n - 1] < B) n++;
    return n;
}

/* The measured curve: measured lazily (a pass's cost measures the points up to it; the controller
 * measures no pass longer than 4 tokens while no longer chain could pay, and up to the chain it chooses
 * once one does), once per thread count; one pass over more tokens never costs less (noisy points are
 * lowered to the later ones). */
static void test_measured_cost_curve(void **state) {
    (void)state;
    kite_spec_params sp = kite_spec_default_params();
    sp.drafter = KITE_DRAFT_NGRAM;
    kite_session *s = session_with(&sp);
    kite_spec_state *st = &s->spec;
    pthread_mutex_lock(&g_model->cost_lock);
    g_model->cost_threads = 0; /* forget any curve an earlier test set */
    pthread_mutex_unlock(&g_model->cost_lock);
    assert_true(kite_spec_pass_cost(s, 3) > 0.0);
    assert_int_equal(g_model->cost_points, points_covering(3));
    /* drafts that are never accepted: plain passes and probes, the passes over 5-33 tokens never timed */
    for (int d = 0; d < KITE_MAX_DRAFT; d++) st->accept_rate[d] = 0.01, st->observed[d] = 1000;
    st->draft_ms_per_token = 0.0, st->plain_streak = 0, st->probe_interval = 0, st->explore_count = 0;
    kite_spec_estimates_changed(st);
    for (int i = 0; i < 200; i++) assert_true(kite_spec_choose_budget(st, s, KITE_MAX_DRAFT) <= 1);
    assert_int_equal(g_model->cost_points, 4);
    /* drafts accepted 97% of the time on points 1-4 that cost the same (set by hand, so that chains longer
     * than 3 must look worth it on their extension whatever this machine's curve): the longer passes are
     * measured, at least up to the chain chosen, before it is chosen */
    pthread_mutex_lock(&g_model->cost_lock);
    for (int k = 0; k < 4; k++) g_model->pass_cost_ms[k] = 1e3;
    pthread_mutex_unlock(&g_model->cost_lock);
    for (int d = 0; d < KITE_MAX_DRAFT; d++) st->accept_rate[d] = 0.97;
    st->plain_streak = 0, st->explore_count = 0;
    kite_spec_estimates_changed(st);
    const int32_t k = kite_spec_choose_budget(st, s, KITE_MAX_DRAFT);
    print_message("acceptance 0.97: chains of %d, %d of %d points measured\n", k, g_model->cost_points, KITE_N_COST_POINTS);
    assert_true(g_model->cost_points > 4);
    assert_true(k > 0 && g_model->cost_points >= points_covering(k + 1));
    /* the whole curve, measured afresh (the hand-set points forgotten) */
    pthread_mutex_lock(&g_model->cost_lock);
    g_model->cost_threads = 0;
    pthread_mutex_unlock(&g_model->cost_lock);
    assert_true(kite_spec_pass_cost(s, KITE_MAX_DRAFT + 1) > 0.0);
    assert_int_equal(g_model->cost_points, KITE_N_COST_POINTS);
    double prev = 0.0;
    for (int32_t B = 1; B <= KITE_MAX_DRAFT + 1; B++) {
        double ms = kite_spec_pass_cost(s, B);
        assert_true(ms > 0.0 && ms >= prev);
        prev = ms;
    }
    assert_int_equal(g_model->cost_threads, kite_pool_threads(s->pool));
    kite_session_free(s);
}

/* The first probe interval the rule in spec.c should give on COSTS, counted up independently. */
static int first_probe_interval(void) {
    int n = KITE_PROBE_MIN;
    while ((cost_at(2) / cost_at(1) - 1.0) / n > KITE_PROBE_SHARE) n++;
    return n;
}

/* With drafts that never pay: plain passes with a probe after N, 2N, 4N, ... up to KITE_PROBE_MAX plain
 * passes; after drafting resumes and stops again, the first probe comes after N again. Returns N (the
 * first interval seen), asserting the doubling. */
static int probe_rounds(kite_session *s, kite_spec_state *st) {
    for (int d = 0; d < KITE_MAX_DRAFT; d++) st->accept_rate[d] = 0.02;
    st->draft_ms_per_token = 0.5, st->plain_streak = 0, st->probe_interval = 0, st->explore_count = 0;
    kite_spec_estimates_changed(st); /* set by hand here, not learned */
    int first = 0;
    while (kite_spec_choose_budget(st, s, KITE_MAX_DRAFT) == 0) first++;
    first++;
    for (int round = 1; round < 8; round++) {
        int interval = first << round < KITE_PROBE_MAX ? first << round : KITE_PROBE_MAX;
        for (int i = 0; i < interval - 1; i++) assert_int_equal(kite_spec_choose_budget(st, s, KITE_MAX_DRAFT), 0);
        assert_int_equal(kite_spec_choose_budget(st, s, KITE_MAX_DRAFT), 1);
    }
    for (int d = 0; d < KITE_MAX_DRAFT; d++) st->accept_rate[d] = 0.95;
    st->draft_ms_per_token = 0.0;
    kite_spec_estimates_changed(st);
    assert_true(kite_spec_choose_budget(st, s, KITE_MAX_DRAFT) > 0);
    for (int d = 0; d < KITE_MAX_DRAFT; d++) st->accept_rate[d] = 0.02;
    st->draft_ms_per_token = 0.5;
    kite_spec_estimates_changed(st);
    for (int i = 0; i < first - 1; i++) assert_int_equal(kite_spec_choose_budget(st, s, KITE_MAX_DRAFT), 0);
    assert_int_equal(kite_spec_choose_budget(st, s, KITE_MAX_DRAFT), 1);
    return first;
}

static void test_budget_controller(void **state) {
    (void)state;
    kite_session *s = controller_session();
    kite_spec_state *st = &s->spec;
    /* good drafts, free drafting: long chains; costly drafting or poor drafts: shorter or none */
    static const double rates[] = {0.95, 0.8, 0.6, 0.3, 0.05};
    static const double draft_costs[] = {0.0, 0.05, 0.5};
    for (size_t i = 0; i < sizeof rates / sizeof rates[0]; i++) {
        for (size_t j = 0; j < sizeof draft_costs / sizeof draft_costs[0]; j++) {
            for (int d = 0; d < KITE_MAX_DRAFT; d++) st->accept_rate[d] = rates[i];
            st->draft_ms_per_token = draft_costs[j];
            st->plain_streak = 0, st->explore_count = 0;
            kite_spec_estimates_changed(st);
            int32_t want = best_chain(rates[i], draft_costs[j], KITE_MAX_DRAFT);
            assert_int_equal(kite_spec_choose_budget(st, s, KITE_MAX_DRAFT), want);
            assert_int_equal(kite_spec_choose_budget(st, s, 3), want < 3 ? want : best_chain(rates[i], draft_costs[j], 3));
        }
    }
    assert_true(best_chain(0.95, 0, KITE_MAX_DRAFT) > 8 && best_chain(0.05, 0.5, KITE_MAX_DRAFT) == 0);
    /* exploration: every KITE_EXPLORE_EVERY-th drafting pass drafts one deeper (not past the room) */
    for (int d = 0; d < KITE_MAX_DRAFT; d++) st->accept_rate[d] = 0.6;
    st->draft_ms_per_token = 0.0, st->explore_count = 0;
    kite_spec_estimates_changed(st);
    int32_t k6 = best_chain(0.6, 0.0, KITE_MAX_DRAFT);
    assert_true(k6 > 0 && k6 < KITE_MAX_DRAFT);
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < KITE_EXPLORE_EVERY - 1; i++) assert_int_equal(kite_spec_choose_budget(st, s, KITE_MAX_DRAFT), k6);
        assert_int_equal(kite_spec_choose_budget(st, s, KITE_MAX_DRAFT), k6 + 1);
    }
    st->explore_count = KITE_EXPLORE_EVERY - 1;
    assert_int_equal(kite_spec_choose_budget(st, s, k6), k6);
    st->explore_count = 0;
    /* depths never drafted yet (still at the 0.6 prior) take the deepest observed rate: a controller
     * that has only tried chains of 3 good drafts still goes as deep as 0.95 everywhere would */
    for (int d = 0; d < KITE_MAX_DRAFT; d++) st->accept_rate[d] = d < 3 ? 0.95 : 0.6, st->observed[d] = d < 3 ? 5 : 0;
    st->draft_ms_per_token = 0.0, st->explore_count = 0;
    kite_spec_estimates_changed(st);
    assert_int_equal(kite_spec_choose_budget(st, s, KITE_MAX_DRAFT), best_chain(0.95, 0.0, KITE_MAX_DRAFT));
    assert_true(best_chain(0.95, 0.0, KITE_MAX_DRAFT) > best_chain(0.6, 0.0, KITE_MAX_DRAFT));
    /* falling back to plain decoding, with a probe of one token after N plain passes, then 2N, 4N, ...
     * up to 1024 while probes keep failing; drafting again brings the interval back to N. N is 16, or
     * the first count of passes over which a probe's extra cost T(2) - T(1) is at most KITE_PROBE_SHARE
     * of plain decoding: this curve (T(2) = 1.1) needs 21, a small model's (T(2) = 1.57) 115. */
    assert_int_equal(probe_rounds(s, st), first_probe_interval());
    const double steep[KITE_N_COST_POINTS] = {1.0, 1.57, 1.95, 2.39, 2.8, 3.2, 4.0, 5.6, 7.2, 10.4, 13.6};
    pthread_mutex_lock(&g_model->cost_lock);
    memcpy(g_model->pass_cost_ms, steep, sizeof steep);
    pthread_mutex_unlock(&g_model->cost_lock);
    assert_int_equal(probe_rounds(s, st), 115);
    set_costs(s);
    /* The choice is kept over plain passes (they teach nothing) and redone once a pass teaches
     * something: poor estimates give plain steps until chains of 4 keep being accepted. */
    for (int d = 0; d < KITE_MAX_DRAFT; d++) st->accept_rate[d] = 0.02, st->observed[d] = 1000;
    st->draft_ms_per_token = 0.0, st->plain_streak = -1000000; /* no probe in between */
    kite_spec_estimates_changed(st);
    for (int i = 0; i < 3; i++) assert_int_equal(kite_spec_choose_budget(st, s, KITE_MAX_DRAFT), 0);
    {
        kite_draft_tree all = {.n = 5, .token = {5, 6, 7, 8, 9}, .parent = {-1, 0, 1, 2, 3}, .depth = {0, 1, 2, 3, 4}};
        const int32_t all_path[5] = {0, 1, 2, 3, 4};
        for (int i = 0; i < 60; i++) kite_spec_observe(st, &all, all_path, 5);
    }
    assert_true(kite_spec_choose_budget(st, s, KITE_MAX_DRAFT) > 0);
    /* A drafter that costs a target step per token (a draft model as large as the target) would not
     * pay even if every draft were accepted: no probes at all, however long plain decoding goes on. */
    for (int d = 0; d < KITE_MAX_DRAFT; d++) st->accept_rate[d] = 0.02;
    st->draft_ms_per_token = cost_at(1), st->plain_streak = 0, st->probe_interval = 0;
    kite_spec_estimates_changed(st);
    for (int i = 0; i < 3 * KITE_PROBE_MAX; i++) assert_int_equal(kite_spec_choose_budget(st, s, KITE_MAX_DRAFT), 0);
    st->draft_ms_per_token = 0.5 * cost_at(1); /* half a step: all-accepted chains would pay, so probes resume */
    kite_spec_estimates_changed(st);
    int32_t got = 0;
    for (int i = 0; i < 3 * KITE_PROBE_MAX && !got; i++) got = kite_spec_choose_budget(st, s, KITE_MAX_DRAFT);
    assert_int_equal(got, 1);
    st->plain_streak = 0, st->probe_interval = 0;
    assert_int_equal(first_probe_interval(), 21);
    assert_int_equal(kite_spec_choose_budget(st, s, 0), 0); /* no room: plain */
    /* a fixed budget is kept, within the room left */
    st->params.budget = 7;
    assert_int_equal(kite_spec_choose_budget(st, s, KITE_MAX_DRAFT), 7);
    assert_int_equal(kite_spec_choose_budget(st, s, 5), 5);
    st->params.budget = 0;
    /* learning: a chain of 3 with the first 2 accepted moves depths 1, 2 toward 1 and depth 3 toward 0;
     * depth 4 was not drafted and keeps its estimate. The first observations average with the prior
     * (steps 1/2, 1/3, ...), later ones move by 0.1. */
    for (int d = 0; d < KITE_MAX_DRAFT; d++) st->accept_rate[d] = 0.5, st->observed[d] = 0;
    kite_draft_tree t = {.n = 4, .token = {5, 6, 7, 8}, .parent = {-1, 0, 1, 2}, .depth = {0, 1, 2, 3}};
    const int32_t path[3] = {0, 1, 2};
    kite_spec_observe(st, &t, path, 3);
    assert_true(fabs(st->accept_rate[0] - 0.75) < 1e-12 && fabs(st->accept_rate[1] - 0.75) < 1e-12);
    assert_true(fabs(st->accept_rate[2] - 0.25) < 1e-12 && st->accept_rate[3] == 0.5);
    kite_spec_observe(st, &t, path, 3);
    assert_true(fabs(st->accept_rate[0] - 5.0 / 6.0) < 1e-12 && fabs(st->accept_rate[2] - 1.0 / 6.0) < 1e-12);
    for (int d = 0; d < KITE_MAX_DRAFT; d++) st->observed[d] = 1000;
    kite_spec_observe(st, &t, path, 3);
    assert_true(fabs(st->accept_rate[0] - (5.0 / 6.0 + 0.1 / 6.0)) < 1e-12 && fabs(st->accept_rate[2] - 0.15) < 1e-12);
    /* a tree: at depth 1 two siblings under the root, the path takes the second; at depth 2 the drafted
     * node hangs under the first sibling, off the path, so depth 2 learns nothing */
    for (int d = 0; d < KITE_MAX_DRAFT; d++) st->accept_rate[d] = 0.5, st->observed[d] = 1000;
    kite_draft_tree tree = {.n = 4, .token = {5, 6, 7, 8}, .parent = {-1, 0, 0, 1}, .depth = {0, 1, 1, 2}};
    kite_spec_observe(st, &tree, (const int32_t[]){0, 2}, 2);
    assert_true(fabs(st->accept_rate[0] - 0.55) < 1e-12 && st->accept_rate[1] == 0.5);
    kite_session_free(s);
    /* cached cost curves belong to the model: leave them measured for real */
    pthread_mutex_lock(&g_model->cost_lock);
    g_model->cost_threads = 0;
    pthread_mutex_unlock(&g_model->cost_lock);
}

/* End to end: a drafter that is always wrong, with drafting priced high, makes the controller decode
 * plainly except for its probes, and the output does not change. */
static void test_controller_falls_back(void **state) {
    (void)state;
    char err[512];
    int32_t prompt[16];
    size_t n_prompt = 0;
    assert_int_equal(kite_tokenize(g_model, "Once upon a time", 16, true, false, prompt, 16, &n_prompt, err, sizeof err), KITE_OK);
    kite_gen_params gp = kite_gen_default_params();
    gp.temperature = 0.8f, gp.max_tokens = 80, gp.ignore_eos = true;
    int32_t plain_ids[80], ids[80];
    int32_t *out[2] = {plain_ids, ids};
    kite_stats stats;
    static int32_t oracle[200];
    for (int i = 0; i < 200; i++) oracle[i] = (i * 37 + 11) % 512;
    for (int run = 0; run < 2; run++) {
        kite_spec_params sp = kite_spec_default_params();
        sp.drafter = KITE_DRAFT_ORACLE, sp.oracle_ids = oracle, sp.n_oracle_ids = 200, sp.oracle_error_rate = 1.0f;
        kite_session *s = session_with(run ? &sp : NULL);
        set_costs(s);
        if (run) s->spec.draft_ms_per_token = 0.3; /* drafting priced like a third of a pass per token */
        assert_int_equal(kite_prompt(s, prompt, n_prompt, err, sizeof err), KITE_OK);
        assert_int_equal(kite_generate(s, &gp, NULL, NULL, err, sizeof err), KITE_OK);
        /* the tokens are the committed history after the prompt, plus the unfed last one */
        memcpy(out[run], s->history + n_prompt, sizeof(int32_t) * 79);
        out[run][79] = s->unfed_token;
        kite_session_stats(s, &stats);
        if (run) {
            print_message("always-wrong drafter: %lld passes, %lld drafted tokens\n", (long long)stats.target_passes,
                          (long long)stats.drafted);
            assert_int_equal(stats.accepted, 0);
            assert_int_equal(stats.target_passes, 79);
            assert_true(stats.drafted >= 1 && stats.drafted < 79 / 2);
        }
        kite_session_free(s);
        pthread_mutex_lock(&g_model->cost_lock);
        g_model->cost_threads = 0;
        pthread_mutex_unlock(&g_model->cost_lock);
    }
    assert_memory_equal(plain_ids, ids, sizeof plain_ids);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chi_square_reference_points),
        cmocka_unit_test(test_walk_exhaustive),
        cmocka_unit_test(test_rejection_step_distribution),
        cmocka_unit_test(test_rejection_generation_distribution),
        cmocka_unit_test(test_ngram_branches),
        cmocka_unit_test(test_draft_model_tree_and_cache),
        cmocka_unit_test(test_measured_cost_curve),
        cmocka_unit_test(test_budget_controller),
        cmocka_unit_test(test_budget_block_cost),
        cmocka_unit_test(test_controller_falls_back),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
