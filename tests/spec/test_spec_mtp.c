/* The MTP drafter (spec/mtp.h) on `tiny-qwen35-mtp` (kite gen-model: a Qwen3.5 trunk plus one next-n
 * block blk.4.*, as llama.cpp's converter writes it; F32):
 *   - reference: the head's logits and states for rows of (token, hidden) inputs at several positions
 *     (attention over the earlier rows) against a double-precision implementation written here from
 *     llama.cpp's graph_mtp (src/models/qwen35.cpp) over the raw GGUF tensors; bound 1e-4 of the largest
 *     logit; negative controls (concat halves swapped, hnorm omitted, RoPE omitted) are shown to exceed
 *     it (RoPE at p + 1 rather than p could not be told apart here: a common shift of every row's position
 *     leaves the attention scores unchanged);
 *   - exactness: with --draft mtp, greedy and seeded sampling (T 0.8 top-k/top-p, T 1.0, and T 4 where
 *     the shared noise makes the random head's proposals accepted), chains and trees, budgets 1..32 and
 *     adaptive, the generated ids equal plain decoding's, drafts were made, and some were accepted;
 *   - the head's own cache: a draft from the incrementally kept cache equals one (tokens; logits within
 *     1e-5 of their spread, the rows being run in other batch shapes) from a
 *     cache rebuilt from the session's feature rows (after generation with accepted drafts, and after a
 *     truncation), and a changed context token is seen (control: the draft then differs);
 *   - bad input: a Qwen3.5 model without next-n layers is refused with a clear message and the session
 *     then decodes exactly as plain;
 *   - the Hugging Face folder form (mtp.* tensors, mtp_num_hidden_layers): the head's logits equal the GGUF's
 *     within test_random_model_hf's bound (control: another seed's folder), it drafts exactly, and a folder
 *     whose config names a head it does not hold loads without one. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/gguf.h"
#include "io/mmap.h"
#include "quant/types.h"
#include "spec/mtp.h"
#include "spec/spec.h"
#include "spec_harness.h"
#include "test_util.h"

enum { GEN = 40, N_PROMPT = 24, N_CTX = 256 };

static char g_mtp_path[128], g_plain_path[128];
static kite_model *g_mtp, *g_plain;
static int32_t g_prompt[N_PROMPT];

static int setup(void **state) {
    (void)state;
    if (spec_make_dir("mtp")) return -1;
    spec_path(g_mtp_path, "mtp.gguf");
    spec_path(g_plain_path, "plain.gguf");
    if (spec_write_model(g_mtp_path, "tiny-qwen35-mtp", "f32", 11, NULL) || spec_write_model(g_plain_path, "tiny-qwen35", "f32", 11, NULL))
        return -1;
    g_mtp = spec_open_model(g_mtp_path);
    g_plain = spec_open_model(g_plain_path);
    if (!g_mtp || !g_plain) return -1;
    for (int i = 0; i < N_PROMPT; i++) g_prompt[i] = 3 + (int32_t)((i % 8) * 37 + (i / 8) * 5) % 500;
    spec_h.target = g_mtp, spec_h.n_ctx = N_CTX, spec_h.prompt = g_prompt, spec_h.n_prompt = N_PROMPT;
    spec_h.gen = GEN, spec_h.seed = 777;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    kite_model_free(g_mtp);
    kite_model_free(g_plain);
    spec_remove_dir();
    return 0;
}

/* ---- reference --------------------------------------------------------------------------------- */

typedef struct raw_file {
    kite_mapped_file file;
    kite_gguf *g;
} raw_file;

static const float *raw_tensor(raw_file *f, const char *name, int64_t count) {
    const kite_gguf_tensor *t = kite_gguf_find_tensor(f->g, name);
    if (!t) fail_msg("tensor %s is missing from the file", name);
    if (t->type != KITE_TYPE_F32 || t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3] != count)
        fail_msg("tensor %s: type %u, %lld elements (want F32, %lld)", name, t->type,
                 (long long)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]), (long long)count);
    return (const float *)t->data;
}

static const float *blk(raw_file *f, int l, const char *suffix, int64_t count) {
    char name[128];
    snprintf(name, sizeof name, "blk.%d.%s", l, suffix);
    return raw_tensor(f, name, count);
}

static void ref_rmsnorm(double *out, const double *x, const float *w, int64_t n, double eps) {
    double ss = 0;
    for (int64_t i = 0; i < n; i++) ss += x[i] * x[i];
    double s = 1.0 / sqrt(ss / (double)n + eps);
    for (int64_t i = 0; i < n; i++) out[i] = x[i] * s * (w ? (double)w[i] : 1.0);
}

/* y[rows] = W x, W a GGUF matrix [cols innermost]. */
static void ref_matvec(double *y, const float *w, const double *x, int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; r++) {
        double s = 0;
        for (int64_t c = 0; c < cols; c++) s += (double)w[r * cols + c] * x[c];
        y[r] = s;
    }
}

/* NeoX RoPE over the first n_rot dimensions (pairs i, i + n_rot / 2), as ggml_rope_multi with equal
 * position components. */
static void ref_rope(double *v, int n_rot, double theta, double pos) {
    for (int i = 0; i < n_rot / 2; i++) {
        double a = pos * pow(theta, -2.0 * i / n_rot), c = cos(a), s = sin(a);
        double x0 = v[i], x1 = v[i + n_rot / 2];
        v[i] = x0 * c - x1 * s;
        v[i + n_rot / 2] = x0 * s + x1 * c;
    }
}

enum { CTRL_NONE, CTRL_SWAP_CONCAT, CTRL_NO_HNORM, CTRL_NO_ROPE };

/* The head over rows 0..n-1 (row i: token tok[i], hidden h[i], RoPE at pos0 + i, attending to rows
 * 0..i), in doubles: logits[n][V], states after shared_head_norm hout[n][D]. */
static void reference(const kite_hparams *hp, raw_file *f, const int32_t *tok, const float *h, int n, int pos0, int ctrl,
                      double *logits, double *hout) {
    const int D = hp->dim, H = hp->n_heads, KV = hp->n_kv_heads, hd = hp->head_dim, F = hp->ffn_dim, V = hp->n_vocab;
    const int qd = H * hd, kvd = KV * hd, l = hp->n_layers;
    const double eps = hp->rms_eps;
    const float *embd = raw_tensor(f, "token_embd.weight", (int64_t)V * D);
    const float *output = kite_gguf_find_tensor(f->g, "output.weight") ? raw_tensor(f, "output.weight", (int64_t)V * D) : embd;
    const float *eh = blk(f, l, "nextn.eh_proj.weight", 2 * (int64_t)D * D), *enorm = blk(f, l, "nextn.enorm.weight", D);
    const float *hnorm = blk(f, l, "nextn.hnorm.weight", D), *shn = blk(f, l, "nextn.shared_head_norm.weight", D);
    const float *an = blk(f, l, "attn_norm.weight", D), *pan = blk(f, l, "post_attention_norm.weight", D);
    const float *wq = blk(f, l, "attn_q.weight", (int64_t)2 * qd * D), *wk = blk(f, l, "attn_k.weight", (int64_t)kvd * D);
    const float *wv = blk(f, l, "attn_v.weight", (int64_t)kvd * D), *wo = blk(f, l, "attn_output.weight", (int64_t)D * qd);
    const float *qn = blk(f, l, "attn_q_norm.weight", hd), *kn = blk(f, l, "attn_k_norm.weight", hd);
    const float *wg = blk(f, l, "ffn_gate.weight", (int64_t)F * D), *wu = blk(f, l, "ffn_up.weight", (int64_t)F * D);
    const float *wd = blk(f, l, "ffn_down.weight", (int64_t)D * F);
    double *cat = malloc(sizeof(double) * 2 * D), *x = malloc(sizeof(double) * (size_t)n * D), *xn = malloc(sizeof(double) * D);
    double *qg = malloc(sizeof(double) * 2 * qd), *q = malloc(sizeof(double) * (size_t)n * qd), *gate = malloc(sizeof(double) * (size_t)n * qd);
    double *K = malloc(sizeof(double) * (size_t)n * kvd), *Vv = malloc(sizeof(double) * (size_t)n * kvd);
    double *att = malloc(sizeof(double) * qd), *o = malloc(sizeof(double) * D), *g = malloc(sizeof(double) * F), *u = malloc(sizeof(double) * F);
    double *tmp = malloc(sizeof(double) * D), *sc = malloc(sizeof(double) * (size_t)n);
    for (int i = 0; i < n; i++) {
        double pos = ctrl == CTRL_NO_ROPE ? 0 : pos0 + i; /* RoPE at position 0 is the identity */
        for (int j = 0; j < D; j++) tmp[j] = embd[(size_t)tok[i] * D + j];
        double *e_half = ctrl == CTRL_SWAP_CONCAT ? cat + D : cat, *h_half = ctrl == CTRL_SWAP_CONCAT ? cat : cat + D;
        ref_rmsnorm(e_half, tmp, enorm, D, eps);
        for (int j = 0; j < D; j++) tmp[j] = h[(size_t)i * D + j];
        if (ctrl == CTRL_NO_HNORM) memcpy(h_half, tmp, sizeof(double) * D);
        else ref_rmsnorm(h_half, tmp, hnorm, D, eps);
        ref_matvec(x + (size_t)i * D, eh, cat, D, 2 * D);
        ref_rmsnorm(xn, x + (size_t)i * D, an, D, eps);
        ref_matvec(qg, wq, xn, 2 * qd, D);
        for (int hh = 0; hh < H; hh++) {
            ref_rmsnorm(q + (size_t)i * qd + hh * hd, qg + (size_t)hh * 2 * hd, qn, hd, eps);
            memcpy(gate + (size_t)i * qd + hh * hd, qg + (size_t)hh * 2 * hd + hd, sizeof(double) * hd);
            ref_rope(q + (size_t)i * qd + hh * hd, hp->n_rot, hp->rope_theta, pos);
        }
        ref_matvec(K + (size_t)i * kvd, wk, xn, kvd, D);
        ref_matvec(Vv + (size_t)i * kvd, wv, xn, kvd, D);
        for (int kh = 0; kh < KV; kh++) {
            ref_rmsnorm(K + (size_t)i * kvd + kh * hd, K + (size_t)i * kvd + kh * hd, kn, hd, eps);
            ref_rope(K + (size_t)i * kvd + kh * hd, hp->n_rot, hp->rope_theta, pos);
        }
    }
    for (int i = 0; i < n; i++) {
        for (int hh = 0; hh < H; hh++) {
            int kh = hh / (H / KV);
            double mx = -INFINITY, sum = 0;
            for (int t = 0; t <= i; t++) {
                double s = 0;
                for (int d = 0; d < hd; d++) s += q[(size_t)i * qd + hh * hd + d] * K[(size_t)t * kvd + kh * hd + d];
                sc[t] = s / sqrt((double)hd);
                if (sc[t] > mx) mx = sc[t];
            }
            for (int t = 0; t <= i; t++) sum += sc[t] = exp(sc[t] - mx);
            for (int d = 0; d < hd; d++) {
                double a = 0;
                for (int t = 0; t <= i; t++) a += sc[t] * Vv[(size_t)t * kvd + kh * hd + d];
                att[hh * hd + d] = a / sum / (1.0 + exp(-gate[(size_t)i * qd + hh * hd + d]));
            }
        }
        ref_matvec(o, wo, att, D, qd);
        double *xi = x + (size_t)i * D;
        for (int j = 0; j < D; j++) xi[j] += o[j];
        ref_rmsnorm(xn, xi, pan, D, eps);
        ref_matvec(g, wg, xn, F, D);
        ref_matvec(u, wu, xn, F, D);
        for (int j = 0; j < F; j++) g[j] = g[j] / (1.0 + exp(-g[j])) * u[j];
        ref_matvec(o, wd, g, D, F);
        for (int j = 0; j < D; j++) xi[j] += o[j];
        ref_rmsnorm(hout + (size_t)i * D, xi, shn, D, eps);
        ref_matvec(logits + (size_t)i * V, output, hout + (size_t)i * D, V, D);
    }
    free(cat); free(x); free(xn); free(qg); free(q); free(gate); free(K); free(Vv); free(att); free(o); free(g); free(u);
    free(tmp); free(sc);
}

/* max |a - b| over max |b| */
static double rel_err(const float *a, const double *b, size_t n) {
    double d = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        if (fabs((double)a[i] - b[i]) > d) d = fabs((double)a[i] - b[i]);
        if (fabs(b[i]) > m) m = fabs(b[i]);
    }
    return d / m;
}

static void test_head_matches_reference(void **state) {
    (void)state;
    const kite_weights *w = &g_mtp->weights;
    const kite_hparams *hp = &w->hp;
    assert_non_null(w->mtp);
    assert_int_equal(hp->n_nextn_layers, 1);
    raw_file f = {0};
    kite_error e = {0};
    if (kite_map_file(&f.file, g_mtp_path, &e) || kite_gguf_open(&f.g, f.file.data, f.file.size, &e)) fail_msg("%s", e.msg);
    enum { N = 6, POS0 = 5 };
    const int D = hp->dim, V = hp->n_vocab;
    int32_t tok[N];
    float *h = malloc(sizeof(float) * N * D), *logits = malloc(sizeof(float) * (size_t)N * V), *hout = malloc(sizeof(float) * N * D);
    double *rl = malloc(sizeof(double) * (size_t)N * V), *rh = malloc(sizeof(double) * N * D);
    uint64_t x = 12345;
    for (int i = 0; i < N; i++) tok[i] = (int32_t)((i * 7919 + 13) % V);
    for (int i = 0; i < N * D; i++) { /* hidden rows of no particular scale (hnorm normalises them) */
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        h[i] = 3.0f * ((float)(x >> 40) / (float)(1 << 24) - 0.5f);
    }
    kite_mtp_run *r = NULL;
    if (kite_mtp_run_new(&r, w, 64, &e)) fail_msg("%s", e.msg);
    kite_pool *pool = NULL;
    /* rows POS0.. after a first chunk of POS0 rows: the second chunk attends to the cached first one */
    int32_t tok0[POS0];
    float *h0 = malloc(sizeof(float) * POS0 * D);
    for (int i = 0; i < POS0; i++) tok0[i] = tok[i % N];
    memcpy(h0, h, sizeof(float) * POS0 * D);
    kite_mtp_run_rows(r, pool, tok0, h0, POS0, 0, NULL, NULL);
    kite_mtp_run_rows(r, pool, tok, h, N, POS0, logits, hout);
    /* the reference runs all POS0 + N rows from 0 */
    int32_t all_tok[POS0 + N];
    float *all_h = malloc(sizeof(float) * (POS0 + N) * D);
    memcpy(all_tok, tok0, sizeof tok0);
    memcpy(all_tok + POS0, tok, sizeof tok);
    memcpy(all_h, h0, sizeof(float) * POS0 * D);
    memcpy(all_h + POS0 * D, h, sizeof(float) * N * D);
    double *all_l = malloc(sizeof(double) * (size_t)(POS0 + N) * V), *all_hh = malloc(sizeof(double) * (POS0 + N) * D);
    const double bound = 1e-4;
    double errs[4];
    for (int ctrl = 0; ctrl < 4; ctrl++) {
        reference(hp, &f, all_tok, all_h, POS0 + N, 0, ctrl, all_l, all_hh);
        memcpy(rl, all_l + (size_t)POS0 * V, sizeof(double) * (size_t)N * V);
        memcpy(rh, all_hh + (size_t)POS0 * D, sizeof(double) * N * D);
        errs[ctrl] = rel_err(logits, rl, (size_t)N * V);
        if (ctrl == CTRL_NONE) {
            double eh = rel_err(hout, rh, (size_t)N * D);
            printf("MTP head vs double reference: logits %.3g, states %.3g of the largest (bound %.0e)\n", errs[0], eh, bound);
            assert_true(errs[0] < bound);
            assert_true(eh < bound);
        }
    }
    printf("controls: concat swapped %.3g, hnorm omitted %.3g, RoPE omitted %.3g\n", errs[1], errs[2], errs[3]);
    for (int ctrl = 1; ctrl < 4; ctrl++) assert_true(errs[ctrl] > 10 * bound);
    kite_mtp_run_free(r);
    free(h); free(logits); free(hout); free(rl); free(rh); free(h0); free(all_h); free(all_l); free(all_hh);
    kite_gguf_free(f.g);
    kite_unmap_file(&f.file);
}

/* ---- exactness --------------------------------------------------------------------------------- */

/* The harness's configurations 0..2, and 3: T 4 (flat distributions: the shared noise decides, drafts are accepted). */
static kite_gen_params gen_config(int which) {
    kite_gen_params gp = spec_gen_config(which);
    if (which == 3) gp.temperature = 4.0f;
    return gp;
}

/* The prompt fed to s, then one generation. */
static void gen(kite_session *s, const kite_gen_params *gp, spec_run *r) {
    spec_prompt(s);
    spec_gen(s, gp, r);
}

static kite_spec_params spec_of(int32_t budget, int32_t width) { return spec_params(KITE_DRAFT_MTP, NULL, budget, width); }

static void test_exact_with_mtp(void **state) {
    (void)state;
    static const int32_t budgets[] = {1, 3, 8, 16, 32, 0}, widths[] = {1, 3};
    const spec_sweep_drafter mtp = {.name = "head", .kind = KITE_DRAFT_MTP, .check = SPEC_CHECK_BUDGET};
    spec_sweep sw = {.label = "MTP", .n_configs = 4, .config = gen_config, .drafters = &mtp, .n_drafters = 1, .budgets = budgets,
                     .n_budgets = 6, .widths = widths, .n_widths = 2};
    spec_sweep_run(&sw);
    for (int cfg = 0; cfg < 4; cfg++)
        printf("MTP config %d (T %.1f): %lld drafted tokens accepted over all budgets and widths\n", cfg,
               (double)gen_config(cfg).temperature, (long long)sw.accepted_by_config[cfg]);
    if (sw.accepted_by_config[3] == 0) fail_msg("T 4: no drafted token was accepted");
    assert_true(sw.accepted > 0);
}

/* ---- the head's cache ----------------------------------------------------------------------------- */

static void draft_now(kite_session *s, bool rebuild, kite_draft_tree *t, float *logits) {
    if (rebuild) kite_mtp_run_reset(s->spec.mtp);
    spec_draft_now(s, gen_config, t);
    memcpy(logits, s->spec.draft_logits, sizeof(float) * (size_t)t->n * (size_t)g_mtp->n_vocab);
}

/* max |a - b| over the spread of b */
static float rel_diff(const float *a, const float *b, int32_t n) {
    float d = 0, lo = INFINITY, hi = -INFINITY;
    for (int32_t i = 0; i < n; i++) d = fmaxf(d, fabsf(a[i] - b[i])), lo = fminf(lo, b[i]), hi = fmaxf(hi, b[i]);
    return d / (hi - lo);
}

/* Rows run in other batch shapes round differently (seen 2.6e-6 in absolute logits) */
static const float CACHE_BOUND = 1e-5f;

/* A draft from the incrementally kept head cache equals, within CACHE_BOUND of the logits' spread, one from a cache rebuilt from
 * scratch out of the session's feature rows (after generation with accepted drafts, and after a
 * truncation and more decoding), and a changed context token is seen by the kept cache. */
static void test_cache_in_step(void **state) {
    (void)state;
    int32_t V = g_mtp->n_vocab;
    float *a = malloc(sizeof(float) * (KITE_MAX_DRAFT + 1) * (size_t)V), *b = malloc(sizeof(float) * (KITE_MAX_DRAFT + 1) * (size_t)V);
    assert_non_null(a);
    assert_non_null(b);
    for (int truncated = 0; truncated < 2; truncated++) {
        kite_spec_params sp = spec_of(6, 2);
        kite_stats first;
        /* T 4: drafts are accepted, so the cache follows accepted paths */
        kite_session *s = spec_session_to_draft_from(&sp, gen_config(3), truncated, &first);
        assert_true(first.accepted > 0);
        kite_draft_tree kept, rebuilt;
        draft_now(s, false, &kept, a);
        draft_now(s, true, &rebuilt, b);
        spec_assert_same_tree(&kept, &rebuilt, 13);
        float worst = 0;
        for (int32_t j = 0; j < kept.n; j++)
            if (kept.fed[j]) worst = fmaxf(worst, rel_diff(a + (size_t)j * V, b + (size_t)j * V, V));
        if (worst > CACHE_BOUND)
            fail_msg("draft logits differ by %g of their spread between the kept and the rebuilt cache%s", (double)worst,
                     truncated ? " (truncated)" : "");
        /* negative control: a context token changed under the cache is seen (the kept cache reruns from
         * there, as a rebuild does), and the draft then differs from the true context's */
        s->history[N_PROMPT / 2] ^= 1;
        draft_now(s, false, &kept, a);
        draft_now(s, true, &rebuilt, b);
        s->history[N_PROMPT / 2] ^= 1;
        float changed = rel_diff(a, b, V);
        draft_now(s, true, &rebuilt, b);
        float control = rel_diff(a, b, V);
        printf("head cache%s: kept vs rebuilt %.3g of the spread (bound %.0e); a changed context token: kept vs rebuilt %.3g, "
               "vs the true context %.3g\n", truncated ? " after a truncation" : "", (double)worst, (double)CACHE_BOUND,
               (double)changed, (double)control);
        assert_true(changed <= CACHE_BOUND);
        assert_true(control > 100 * CACHE_BOUND);
        kite_session_free(s);
    }
    free(a);
    free(b);
}

/* ---- the Hugging Face folder form ------------------------------------------------------------------- */

/* The writer's folder keeps the next-n block as a Qwen3.5 checkpoint does (mtp.layers.0.*, mtp.fc,
 * mtp.pre_fc_norm_{embedding,hidden}, mtp.norm; norms stored as w - 1; mtp_num_hidden_layers in text_config),
 * the GGUF as llama.cpp's converter writes it: the same weights, read by two readers. HF_BOUND is
 * test_random_model_hf's (f32 rounding of w - 1 + 1 and of the two paths' orders), of the largest logit. */
static const double HF_BOUND = 2e-4;

static void write_with_folder(const char *gguf, const char *folder, uint64_t seed) {
    kite_random_model_params p = {.shape = "tiny-qwen35-mtp", .type = "f32", .seed = seed, .hf_dir = folder,
                                  .tokenizer_path = kite_test_data("models/tokenizers/qwen3/tokenizer.json")};
    char err[512] = "";
    if (kite_write_random_model(gguf, &p, err, sizeof err)) fail_msg("%s: %s", gguf, err);
}

static void remove_folder(const char *path) {
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    assert_int_equal(system(cmd), 0);
}

/* The head's logits for n rows of (token, hidden) from position 0, [n][V]. */
static float *head_logits(const kite_model *m, const int32_t *tok, const float *h, int n) {
    kite_error e = {0};
    kite_mtp_run *r = NULL;
    if (kite_mtp_run_new(&r, &m->weights, 64, &e)) fail_msg("%s", e.msg);
    float *logits = malloc(sizeof(float) * (size_t)n * (size_t)m->n_vocab);
    assert_non_null(logits);
    kite_mtp_run_rows(r, NULL, tok, h, n, 0, logits, NULL);
    kite_mtp_run_free(r);
    return logits;
}

static double max_abs_diff(const float *a, const float *b, size_t n, double *max_abs) {
    double d = 0;
    *max_abs = 0;
    for (size_t i = 0; i < n; i++) {
        double x = fabs((double)a[i] - (double)b[i]);
        if (!(x <= d)) d = x; /* NaN fails */
        if (fabs((double)b[i]) > *max_abs) *max_abs = fabs((double)b[i]);
    }
    return d;
}

static void test_hf_folder_head(void **state) {
    (void)state;
    char gguf[128], folder[128], other_gguf[128], other_folder[128];
    spec_path(gguf, "q3.gguf");
    spec_path(folder, "q3-hf");
    spec_path(other_gguf, "q3-other.gguf");
    spec_path(other_folder, "q3-other-hf");
    write_with_folder(gguf, folder, 11);
    write_with_folder(other_gguf, other_folder, 12);
    kite_model *a = spec_open_model(gguf), *b = spec_open_model(folder), *c = spec_open_model(other_folder);
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(c);
    assert_non_null(b->weights.mtp);
    assert_int_equal(b->weights.hp.n_nextn_layers, 1);
    assert_int_equal(b->weights.hp.n_layers, a->weights.hp.n_layers);
    enum { N = 8 };
    const int D = a->weights.hp.dim;
    const int32_t V = a->n_vocab;
    assert_int_equal(b->n_vocab, V);
    int32_t tok[N];
    float h[N * 128];
    assert_true(D <= 128);
    uint64_t x = 777;
    for (int i = 0; i < N; i++) tok[i] = (int32_t)((i * 104729 + 17) % V);
    for (int i = 0; i < N * D; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        h[i] = 3.0f * ((float)(x >> 40) / (float)(1 << 24) - 0.5f);
    }
    float *la = head_logits(a, tok, h, N), *lb = head_logits(b, tok, h, N), *lc = head_logits(c, tok, h, N);
    double max_abs, diff = max_abs_diff(lb, la, (size_t)N * (size_t)V, &max_abs), max_abs_c;
    double control = max_abs_diff(lc, la, (size_t)N * (size_t)V, &max_abs_c);
    printf("MTP head, HF folder vs GGUF: max |logit difference| %.3g of logits up to %.3g (bound %.0e of it); "
           "control (folder of another seed) %.3g\n", diff, max_abs, HF_BOUND, control);
    if (!(diff <= HF_BOUND * max_abs)) fail_msg("the folder's head differs from the GGUF's by %g", diff);
    if (!(control > 100 * HF_BOUND * max_abs)) fail_msg("another seed's folder differs by %g only", control);
    free(la), free(lb), free(lc);
    kite_model_free(c);
    remove_folder(other_folder);
    unlink(other_gguf);

    /* drafting from the folder: speculative output identical to plain, and drafts accepted (T 4) */
    kite_model *saved = spec_h.target;
    spec_h.target = b;
    static const int32_t budgets[] = {4, 0}, widths[] = {1, 3};
    const spec_sweep_drafter mtp = {.name = "head", .kind = KITE_DRAFT_MTP, .check = SPEC_CHECK_BUDGET};
    spec_sweep sw = {.label = "MTP (HF folder)", .n_configs = 4, .config = gen_config, .drafters = &mtp, .n_drafters = 1,
                     .budgets = budgets, .n_budgets = 2, .widths = widths, .n_widths = 2};
    spec_sweep_run(&sw);
    spec_h.target = saved;
    printf("MTP from the HF folder: %lld drafted tokens accepted at T 4\n", (long long)sw.accepted_by_config[3]);
    if (sw.accepted_by_config[3] == 0) fail_msg("T 4: no drafted token was accepted");
    kite_model_free(a);
    kite_model_free(b);
    unlink(gguf);

    /* a checkpoint saved without its mtp.* weights (a folder written without a next-n block, its config.json
     * edited to name one): it loads and runs, and --draft mtp is refused as for a file without a head */
    char plain_gguf[128], plain_folder[128], config[160];
    spec_path(plain_gguf, "plain-q3.gguf");
    spec_path(plain_folder, "plain-q3-hf");
    kite_random_model_params p = {.shape = "tiny-qwen35", .type = "f32", .seed = 11, .hf_dir = plain_folder,
                                  .tokenizer_path = kite_test_data("models/tokenizers/qwen3/tokenizer.json")};
    char err[512] = "";
    if (kite_write_random_model(plain_gguf, &p, err, sizeof err)) fail_msg("%s", err);
    snprintf(config, sizeof config, "%s/config.json", plain_folder);
    FILE *f = fopen(config, "rb");
    assert_non_null(f);
    static char text[1 << 16], edited[(1 << 16) + 64];
    size_t len = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[len] = 0;
    const char *at = strstr(text, "\"text_config\": {");
    assert_non_null(at);
    at += strlen("\"text_config\": {");
    snprintf(edited, sizeof edited, "%.*s\"mtp_num_hidden_layers\": 1, %s", (int)(at - text), text, at);
    assert_non_null(f = fopen(config, "wb"));
    assert_int_equal(fwrite(edited, 1, strlen(edited), f), strlen(edited));
    assert_int_equal(fclose(f), 0);
    kite_model *d = spec_open_model(plain_folder);
    assert_non_null(d);
    assert_null(d->weights.mtp);
    assert_int_equal(d->weights.hp.n_nextn_layers, 0);
    kite_session *s = spec_open_session_on(d);
    kite_spec_params sp = spec_of(4, 1);
    assert_int_equal(kite_session_set_spec(s, &sp, err, sizeof err), KITE_ERR_INVALID_ARG);
    printf("a folder whose config names an MTP layer it does not hold: loads; --draft mtp refused: %s\n", err);
    kite_session_free(s);
    kite_model_free(d);
    remove_folder(plain_folder);
    remove_folder(folder);
    unlink(plain_gguf);
}

/* ---- bad input --------------------------------------------------------------------------------- */

static void test_refused_without_nextn(void **state) {
    (void)state;
    assert_null(g_plain->weights.mtp);
    kite_gen_params gp = gen_config(1);
    spec_run plain, got;
    kite_session *s = spec_open_session_on(g_plain);
    gen(s, &gp, &plain);
    kite_session_free(s);
    s = spec_open_session_on(g_plain);
    kite_spec_params sp = spec_of(4, 1);
    char err[512] = "";
    assert_int_equal(kite_session_set_spec(s, &sp, err, sizeof err), KITE_ERR_INVALID_ARG);
    printf("refused: %s\n", err);
    assert_non_null(strstr(err, "no next-n (MTP) layers"));
    gen(s, &gp, &got);
    spec_assert_same(&plain, &got, "after the refused MTP drafter");
    assert_int_equal(got.stats.drafted, 0);
    kite_session_free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_head_matches_reference),
        cmocka_unit_test(test_exact_with_mtp),
        cmocka_unit_test(test_cache_in_step),
        cmocka_unit_test(test_refused_without_nextn),
        cmocka_unit_test(test_hf_folder_head),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
