/* Speculative decoding never changes the output: through the public API only (kite.h), on the real
 * draft/target pairs of KITE_TEST_DATA:
 *   llama2xs-281K (target) with stories260K (draft), both on tok512;
 *   TinyStories-656K F32 (target, Hugging Face folder) with its Q8_0 GGUF (draft).
 * For every drafter (n-gram, draft model, the oracle replaying the plain output perfectly, partly
 * corrupted, or replaced by random tokens), every budget 1..32, chains and trees, the generated ids
 * are identical to plain decoding: greedy, and sampled with the same seed at T = 0.7 and T = 1.0 with
 * top-k/top-p/min-p, and with penalties (which must see the committed text plus the node's
 * ancestors). The reference is plain decoding with the same session settings; the properties that
 * show drafts are really used are checked against numbers worked out by hand (a perfect oracle with
 * budget b needs exactly ceil((G - 1) / (b + 1)) passes for G tokens; a model drafting for itself is
 * accepted all the time).
 * Then the edges: end of sequence inside an accepted path, a full context, a callback that stops in
 * the middle of a path, several turns, reset and truncate, the adaptive budget, rejection
 * verification (deterministic for a seed, identical at T = 0), and bad input (an incompatible draft
 * model, budgets and widths out of range, bad oracle ids, a draft file that fails to load), after
 * which the session decodes exactly as before. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "kite.h"
#include "test_util.h"

enum { MAX_GEN = 256, GEN = 40 };

typedef struct pair {
    const char *name;
    const char *target_path, *draft_path, *tokenizer; /* tokenizer: for the llama2.c checkpoints */
    kite_model *target, *draft;
    kite_model_info info;
    int32_t prompt[2][32];
    size_t n_prompt[2];
} pair;

static pair g_pairs[2] = {
    {.name = "llama2xs-281K <- stories260K",
     .target_path = "models/tinystories-tok512/llama2xs-281K.bin",
     .draft_path = "models/tinystories-tok512/stories260K.bin",
     .tokenizer = "models/tinystories-tok512/tok512.bin"},
    {.name = "TinyStories-656K F32 <- Q8_0",
     .target_path = "models/tinystories-656k",
     .draft_path = "models/tinystories-656k/tinystories-656k-q8_0.gguf"},
};

/* Short prompts keep the sanitizer builds fast; what matters is the generation after them. */
static const char *const PROMPTS[2] = {"Once upon a time", "Tom and Sue went to the park. Tom"};

static kite_model *open_model(const char *rel, const char *tokenizer_rel) {
    char err[512];
    kite_model_params mp = kite_model_default_params();
    mp.n_threads = 1;
    mp.tokenizer_path = tokenizer_rel ? kite_test_data(tokenizer_rel) : NULL;
    kite_model *m = NULL;
    if (kite_model_open(&m, kite_test_data(rel), &mp, err, sizeof err)) {
        fprintf(stderr, "cannot open %s: %s\n", rel, err);
        return NULL;
    }
    return m;
}

static int setup(void **state) {
    (void)state;
    for (int i = 0; i < 2; i++) {
        pair *p = &g_pairs[i];
        p->target = open_model(p->target_path, p->tokenizer);
        p->draft = open_model(p->draft_path, p->tokenizer);
        if (!p->target || !p->draft) return -1;
        kite_model_get_info(p->target, &p->info);
        for (int k = 0; k < 2; k++) {
            char err[256];
            if (kite_tokenize(p->target, PROMPTS[k], strlen(PROMPTS[k]), true, false, p->prompt[k], 32, &p->n_prompt[k], err,
                              sizeof err))
                return -1;
        }
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    for (int i = 0; i < 2; i++) {
        kite_model_free(g_pairs[i].target);
        kite_model_free(g_pairs[i].draft);
    }
    return 0;
}

/* ---- running ------------------------------------------------------------------------------------- */

typedef struct run_result {
    int status;
    char err[512];
    int32_t ids[MAX_GEN];
    int n;
    int stop_after; /* the callback returns false at this many tokens (0 = never) */
    kite_stats stats;
    int32_t n_past;
} run_result;

static bool collect(int32_t id, const char *text, size_t len, void *user) {
    (void)text, (void)len;
    run_result *r = user;
    if (r->n < MAX_GEN) r->ids[r->n] = id;
    r->n++;
    return !(r->stop_after > 0 && r->n >= r->stop_after);
}

static int32_t g_threads = 1;
static kite_kv_type g_kv_type = KITE_KV_F16; /* the sessions' cache type */
static kite_finish_reason g_last_finish; /* of the latest generate() */

static kite_session *open_session(kite_model *m, int32_t n_ctx) {
    kite_session_params sp = kite_session_default_params();
    sp.n_ctx = n_ctx;
    sp.n_threads = g_threads;
    sp.kv_type = g_kv_type;
    kite_session *s = NULL;
    char err[512];
    if (kite_session_open(&s, m, &sp, err, sizeof err)) fail_msg("session: %s", err);
    return s;
}

static void set_spec(kite_session *s, const kite_spec_params *spec) {
    char err[512];
    int st = kite_session_set_spec(s, spec, err, sizeof err);
    if (st) fail_msg("kite_session_set_spec: %s", err);
}

/* Prompt, then one generate call; spec NULL = plain decoding. */
static void generate(kite_model *m, const kite_spec_params *spec, const int32_t *prompt, size_t n_prompt,
                     const kite_gen_params *gp, int32_t n_ctx, run_result *r) {
    memset(r, 0, sizeof *r);
    kite_session *s = open_session(m, n_ctx);
    if (spec) set_spec(s, spec);
    r->status = kite_prompt(s, prompt, n_prompt, r->err, sizeof r->err);
    assert_int_equal(r->status, KITE_OK);
    r->status = kite_generate(s, gp, collect, r, r->err, sizeof r->err);
    kite_session_stats(s, &r->stats);
    r->n_past = kite_session_n_past(s);
    g_last_finish = kite_session_finish_reason(s);
    kite_session_free(s);
}

static void assert_same_ids(const run_result *want, const run_result *got, const char *what) {
    int n = want->n < got->n ? want->n : got->n, at = 0;
    while (at < n && at < MAX_GEN && want->ids[at] == got->ids[at]) at++;
    if (want->n != got->n || at < n)
        fail_msg("%s: %d tokens vs plain %d, first difference at %d (status %d vs %d)", what, got->n, want->n, at,
                 got->status, want->status);
    assert_int_equal(got->status, want->status);
}

/* Sampling settings: 0 greedy; 1 T 0.7 with top-k/top-p; 2 T 1.0 with top-k/top-p/min-p;
 * 3 T 0.9 with repetition/presence/frequency penalties over the whole context. */
enum { N_CONFIGS = 4 };
static kite_gen_params gen_config(int which, int32_t max_tokens) {
    kite_gen_params gp = kite_gen_default_params();
    gp.max_tokens = max_tokens;
    gp.ignore_eos = true; /* fixed lengths keep the pass counts exact; end tokens have their own test */
    gp.seed = 1000 + (uint64_t)which * 7919;
    gp.top_k = 0, gp.top_p = 1.0f, gp.min_p = 0.0f;
    switch (which) {
    case 0: gp.temperature = 0.0f; break;
    case 1: gp.temperature = 0.7f, gp.top_k = 40, gp.top_p = 0.9f; break;
    case 2: gp.temperature = 1.0f, gp.top_k = 20, gp.top_p = 0.95f, gp.min_p = 0.02f; break;
    default:
        gp.temperature = 0.9f, gp.repeat_penalty = 1.3f, gp.presence_penalty = 0.2f, gp.frequency_penalty = 0.1f;
        gp.penalty_last_n = -1;
        break;
    }
    return gp;
}

static kite_spec_params spec_of(kite_drafter d, int32_t budget, int32_t width) {
    kite_spec_params sp = kite_spec_default_params();
    sp.drafter = d;
    sp.budget = budget;
    sp.tree_width = width;
    return sp;
}

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* ---- every drafter, every budget -------------------------------------------------------------------- */

/* got was generated with max_tokens = n (<= want->n): it must be want's first n tokens. */
static void assert_prefix_ids(const run_result *want, const run_result *got, int n, const char *what) {
    int at = 0;
    while (at < n && at < got->n && want->ids[at] == got->ids[at]) at++;
    if (got->n != n || at < n)
        fail_msg("%s: %d tokens, want plain's first %d; first difference at %d (status %d: %s)", what, got->n, n, at,
                 got->status, got->err);
    assert_int_equal(got->status, KITE_OK);
}

/* Generation lengths: the plain reference and the drafters that may accept whole 32-token paths run
 * 40 tokens; the oracle variants that mostly reject need fewer to exercise every budget. */
enum { GEN_HALF = 24, GEN_WRONG = 12 };

/* The budgets every drafter runs at: each up to 9 (where most paths end), either side of the tree
 * and pass-size boundaries at 16, and the largest (the tree at full size). Every budget 1..32 ran here
 * once; the ones between repeated what their neighbours showed at three times the CI time. */
static const int32_t BUDGETS[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17, 31, KITE_MAX_DRAFT};

static void exact_for_pair(pair *p) {
    int64_t drafted = 0, accepted = 0, runs = 0;
    for (int cfg = 0; cfg < N_CONFIGS; cfg++) {
        kite_gen_params gp = gen_config(cfg, GEN);
        for (int k = 0; k < 2; k++) {
            run_result plain, got;
            generate(p->target, NULL, p->prompt[k], p->n_prompt[k], &gp, 0, &plain);
            assert_int_equal(plain.status, KITE_OK);
            assert_int_equal(plain.n, GEN);
            assert_int_equal(plain.stats.target_passes, 0);
            for (size_t bi = 0; bi < sizeof BUDGETS / sizeof *BUDGETS; bi++) {
                const int32_t b = BUDGETS[bi];
                char what[160];
                kite_spec_params sp;
                kite_gen_params short_gp = gp;
                /* n-gram: a chain, and a tree of up to 3 branches (on one prompt) */
                for (int32_t w = 1; w <= (k == 0 ? 3 : 1); w += 2) {
                    sp = spec_of(KITE_DRAFT_NGRAM, b, w);
                    generate(p->target, &sp, p->prompt[k], p->n_prompt[k], &gp, 0, &got);
                    snprintf(what, sizeof what, "%s cfg %d prompt %d ngram budget %d width %d", p->name, cfg, k, b, w);
                    assert_prefix_ids(&plain, &got, GEN, what);
                    drafted += got.stats.drafted, accepted += got.stats.accepted, runs++;
                }
                /* the draft model: a chain and a tree of width 4 (on one prompt: it is the slow one) */
                for (int32_t w = 1; k == 0 && w <= 4; w += 3) {
                    sp = spec_of(KITE_DRAFT_MODEL, b, w);
                    sp.draft_model = p->draft;
                    generate(p->target, &sp, p->prompt[k], p->n_prompt[k], &gp, 0, &got);
                    snprintf(what, sizeof what, "%s cfg %d prompt %d model budget %d width %d", p->name, cfg, k, b, w);
                    assert_prefix_ids(&plain, &got, GEN, what);
                    assert_true(got.stats.drafted > 0);
                    drafted += got.stats.drafted, accepted += got.stats.accepted, runs++;
                }
                /* the oracle replaying the plain output: perfect, so every pass emits b + 1 tokens */
                sp = spec_of(KITE_DRAFT_ORACLE, b, 1);
                sp.oracle_ids = plain.ids;
                sp.n_oracle_ids = (size_t)plain.n;
                sp.oracle_error_rate = 0.0f;
                generate(p->target, &sp, p->prompt[k], p->n_prompt[k], &gp, 0, &got);
                snprintf(what, sizeof what, "%s cfg %d prompt %d perfect oracle budget %d", p->name, cfg, k, b);
                assert_prefix_ids(&plain, &got, GEN, what);
                if (got.stats.target_passes != ceil_div(GEN - 1, b + 1))
                    fail_msg("%s: %lld passes, want %lld", what, (long long)got.stats.target_passes,
                             (long long)ceil_div(GEN - 1, b + 1));
                if (k == 1) continue;
                /* ... half corrupted: paths accepted part of the way ... */
                sp.oracle_error_rate = 0.5f;
                short_gp.max_tokens = GEN_HALF;
                generate(p->target, &sp, p->prompt[k], p->n_prompt[k], &short_gp, 0, &got);
                snprintf(what, sizeof what, "%s cfg %d prompt %d oracle 50%% wrong budget %d", p->name, cfg, k, b);
                assert_prefix_ids(&plain, &got, GEN_HALF, what);
                /* ... every token replaced by a random other one (a drafter proposing random tokens):
                 * nothing is accepted, every pass emits exactly one token, the output is the same */
                sp.oracle_error_rate = 1.0f;
                short_gp.max_tokens = GEN_WRONG;
                generate(p->target, &sp, p->prompt[k], p->n_prompt[k], &short_gp, 0, &got);
                snprintf(what, sizeof what, "%s cfg %d prompt %d oracle all wrong budget %d", p->name, cfg, k, b);
                assert_prefix_ids(&plain, &got, GEN_WRONG, what);
                assert_int_equal(got.stats.accepted, 0);
                assert_int_equal(got.stats.target_passes, GEN_WRONG - 1);
                /* the pass rooted at the i-th token drafts b tokens, or fewer where the replay ends */
                int64_t want_drafted = 0;
                for (int i = 0; i < GEN_WRONG - 1; i++) want_drafted += b < GEN - 1 - i ? b : GEN - 1 - i;
                assert_int_equal(got.stats.drafted, want_drafted);
            }
        }
    }
    print_message("%s: %lld n-gram/model runs identical to plain, %lld of %lld drafted tokens accepted\n", p->name,
                  (long long)runs, (long long)accepted, (long long)drafted);
    assert_true(accepted > 0);
}

static void test_exact_tok512(void **state) { (void)state; exact_for_pair(&g_pairs[0]); }

/* Quantized caches (Q8_0, Q4_0: head sizes of 32k, so random-weight "tiny" models, heads of 64): every
 * drafter's output equals plain decoding with the same cache type, greedy and sampled. The real pairs'
 * heads (8, 16) take only f16 and f32. Drafters: n-grams, a second seed (rarely accepted), and the
 * target itself (accepted all along under greedy decoding: whole paths committed from the cache). */
static void test_exact_quantized_cache(void **state) {
    (void)state;
    char target_path[] = "/tmp/kite-spec-kvq-XXXXXX";
    int fd = mkstemp(target_path);
    assert_true(fd >= 0);
    close(fd);
    char draft_path[sizeof target_path + 6];
    snprintf(draft_path, sizeof draft_path, "%s.draft", target_path);
    kite_random_model_params rp = {.shape = "tiny", .type = "q8_0", .seed = 11,
                                  .tokenizer_path = kite_test_data("models/tinystories-tok512/tok512.bin")};
    char err[512];
    if (kite_write_random_model(target_path, &rp, err, sizeof err)) fail_msg("random model: %s", err);
    rp.seed = 12;
    if (kite_write_random_model(draft_path, &rp, err, sizeof err)) fail_msg("random model: %s", err);
    kite_model_params mp = kite_model_default_params();
    kite_model *target = NULL, *draft = NULL;
    if (kite_model_open(&target, target_path, &mp, err, sizeof err) || kite_model_open(&draft, draft_path, &mp, err, sizeof err))
        fail_msg("open: %s", err);
    int32_t prompt[32];
    size_t n_prompt = 0;
    if (kite_tokenize(target, PROMPTS[0], strlen(PROMPTS[0]), true, false, prompt, 32, &n_prompt, err, sizeof err)) fail_msg("%s", err);
    static const kite_kv_type types[] = {KITE_KV_Q8_0, KITE_KV_Q4_0};
    static const int32_t budgets[] = {1, 5, 32};
    int64_t drafted = 0, accepted = 0, runs = 0;
    for (size_t t = 0; t < sizeof types / sizeof *types; t++) {
        g_kv_type = types[t];
        for (int cfg = 0; cfg < N_CONFIGS; cfg += 2) { /* greedy, and T 1.0 with filters */
            kite_gen_params gp = gen_config(cfg, GEN);
            run_result plain, got;
            generate(target, NULL, prompt, n_prompt, &gp, 0, &plain);
            assert_int_equal(plain.n, GEN);
            for (size_t b = 0; b < sizeof budgets / sizeof *budgets; b++)
                for (int32_t w = 1; w <= 4; w += 3)
                    for (int model = 0; model < 3; model++) { /* n-grams, another seed, the target itself */
                        kite_spec_params sp = spec_of(model ? KITE_DRAFT_MODEL : KITE_DRAFT_NGRAM, budgets[b], w);
                        sp.draft_model = model == 1 ? draft : model == 2 ? target : NULL;
                        generate(target, &sp, prompt, n_prompt, &gp, 0, &got);
                        char what[160];
                        snprintf(what, sizeof what, "%s cache, cfg %d, %s budget %d width %d", kite_kv_type_name(types[t]), cfg,
                                 model == 0 ? "ngram" : model == 1 ? "model" : "self", budgets[b], w);
                        assert_prefix_ids(&plain, &got, GEN, what);
                        drafted += got.stats.drafted, accepted += got.stats.accepted, runs++;
                    }
        }
    }
    g_kv_type = KITE_KV_F16;
    print_message("quantized caches: %lld runs identical to plain, %lld of %lld drafted tokens accepted\n", (long long)runs,
                  (long long)accepted, (long long)drafted);
    assert_true(accepted > 0);
    kite_model_free(target);
    kite_model_free(draft);
    unlink(target_path);
    unlink(draft_path);
}
static void test_exact_656k(void **state) { (void)state; exact_for_pair(&g_pairs[1]); }

/* ---- under a grammar ------------------------------------------------------------------------------------- */

/* A record of free text (the stories' own words), a closed set of values and forced keys and
 * punctuation (no braces: TinyStories-656K's vocabulary has no '{'): every drafter, with and without the forced-text drafts, gives plain constrained
 * decoding's tokens and finish reason. The grammar ends the text (finish stop) before max_tokens in
 * most runs, so the ends of generation are exercised too. */
static const char STORY_GRAMMAR[] =
    "root ::= \"Hero: \" name \", mood: \" (\"happy\" | \"sad\" | \"brave\") \". Story: \\\"\" text \"\\\"\"\n"
    "name ::= [A-Z] [a-z]{1,12}\n"
    "text ::= [A-Za-z] [a-zA-Z ,.!']{0,120}\n";

/* A lazy grammar (kite_grammar_open_lazy): the story is free until it writes " the", then the grammar
 * holds it to a few lower-case words and a full stop; the mask switches on at the trigger in every
 * drafted path. */
static const char LAZY_BODY[] = "root ::= \" the\" [a-z ]{1,24} \".\"\n";

static void exact_under_grammar_of(pair *p, kite_grammar *g, const char *label, int64_t *triggered);

static void exact_under_grammar(pair *p) {
    char err[512];
    kite_grammar *g = NULL;
    if (kite_grammar_open(&g, p->target, KITE_GRAMMAR_GBNF, STORY_GRAMMAR, strlen(STORY_GRAMMAR), err, sizeof err))
        fail_msg("%s: grammar: %s", p->name, err);
    exact_under_grammar_of(p, g, "grammar", NULL);
}

static void exact_under_lazy_grammar(pair *p) {
    char err[512];
    kite_grammar *g = NULL;
    const char *triggers[] = {" the"};
    if (kite_grammar_open_lazy(&g, p->target, KITE_GRAMMAR_GBNF, LAZY_BODY, strlen(LAZY_BODY), triggers, 1, false, err, sizeof err))
        fail_msg("%s: lazy grammar: %s", p->name, err);
    int64_t triggered = 0;
    exact_under_grammar_of(p, g, "lazy grammar", &triggered);
    assert_true(triggered > 0);
}

/* Every drafter gives plain constrained decoding's tokens and finish under g (freed here). triggered
 * (may be NULL) counts the plain runs whose text holds LAZY_BODY's trigger; for those, the text before
 * the trigger is unconstrained decoding's text. */
static void exact_under_grammar_of(pair *p, kite_grammar *g, const char *label, int64_t *triggered) {
    int64_t drafted = 0, accepted = 0, stops = 0;
    static const int32_t budgets[] = {1, 2, 5, 12, 32};
    for (int cfg = 0; cfg < N_CONFIGS; cfg++) {
        kite_gen_params gp = gen_config(cfg, 160);
        gp.grammar = g;
        gp.ignore_eos = cfg % 2 == 1; /* end tokens allowed at the end (or not) */
        run_result plain, got;
        generate(p->target, NULL, p->prompt[0], p->n_prompt[0], &gp, 0, &plain);
        kite_finish_reason plain_finish = g_last_finish;
        assert_int_equal(plain.status, KITE_OK);
        assert_true(plain.n > (triggered ? 0 : 10));
        stops += plain_finish == KITE_FINISH_STOP;
        if (triggered) {
            /* free text is free: greedy, up to the trigger, the text is the text without a grammar (the mask
             * keeps out only what holds the trigger; sampling is left out, as a mask's renormalization moves
             * its draws) */
            kite_gen_params free_gp = gp;
            free_gp.grammar = NULL;
            run_result unconstrained;
            generate(p->target, NULL, p->prompt[0], p->n_prompt[0], &free_gp, 0, &unconstrained);
            char a[4096], b[4096];
            size_t na = 0, nb = 0;
            char e2[256];
            assert_int_equal(kite_detokenize(p->target, plain.ids, (size_t)plain.n, a, sizeof a - 1, &na, e2, sizeof e2), KITE_OK);
            assert_int_equal(kite_detokenize(p->target, unconstrained.ids, (size_t)unconstrained.n, b, sizeof b - 1, &nb, e2, sizeof e2), KITE_OK);
            a[na < sizeof a ? na : sizeof a - 1] = '\0';
            b[nb < sizeof b ? nb : sizeof b - 1] = '\0';
            const char *at = strstr(a, " the");
            if (at) {
                (*triggered)++;
                size_t free_len = (size_t)(at - a);
                if (gp.temperature == 0.0f && (nb < free_len || memcmp(a, b, free_len)))
                    fail_msg("%s cfg %d: the free text differs from unconstrained decoding:\n%.*s\n%s", p->name, cfg, (int)free_len, a, b);
            }
        }
        for (size_t bi = 0; bi < sizeof budgets / sizeof budgets[0]; bi++) {
            int32_t b = budgets[bi];
            for (int forced = 0; forced < 2; forced++) {
                for (int d = 0; d < 5; d++) {
                    /* n-gram chain and tree, draft model chain and tree, the perfect oracle */
                    kite_drafter dr = d < 2 ? KITE_DRAFT_NGRAM : d < 4 ? KITE_DRAFT_MODEL : KITE_DRAFT_ORACLE;
                    kite_spec_params sp = spec_of(dr, b, d == 1 ? 3 : d == 3 ? 4 : 1);
                    sp.draft_model = p->draft;
                    sp.oracle_ids = plain.ids, sp.n_oracle_ids = (size_t)plain.n;
                    sp.no_forced_drafts = !forced;
                    generate(p->target, &sp, p->prompt[0], p->n_prompt[0], &gp, 0, &got);
                    char what[160];
                    snprintf(what, sizeof what, "%s %s cfg %d drafter %d budget %d forced %d", p->name, label, cfg, d, b, forced);
                    assert_prefix_ids(&plain, &got, plain.n, what);
                    if (g_last_finish != plain_finish) fail_msg("%s: finish %d, plain %d", what, g_last_finish, plain_finish);
                    /* A perfect oracle without forced drafts still needs exactly the passes of a free run. */
                    if (d == 4 && !forced && got.stats.target_passes != ceil_div(plain.n - 1, b + 1))
                        fail_msg("%s: %lld passes, want %lld", what, (long long)got.stats.target_passes,
                                 (long long)ceil_div(plain.n - 1, b + 1));
                    drafted += got.stats.drafted, accepted += got.stats.accepted;
                }
            }
        }
    }
    print_message("%s under a %s: %lld of %lld drafted tokens accepted, %lld of %d plain runs ended by the grammar\n",
                  p->name, label, (long long)accepted, (long long)drafted, (long long)stops, N_CONFIGS);
    assert_true(accepted > 0);
    kite_grammar_free(g);
}

static void test_exact_under_grammar(void **state) {
    (void)state;
    for (int i = 0; i < 2; i++) exact_under_grammar(&g_pairs[i]);
}

static void test_exact_under_lazy_grammar(void **state) {
    (void)state;
    for (int i = 0; i < 2; i++) exact_under_lazy_grammar(&g_pairs[i]);
}

/* ---- a model drafting for itself: q = p, so every drafted token is accepted ---------------------------- */

/* Also checks the draft model's cache: a wrong commit of the accepted path (kite_spec_commit) would
 * make the drafts of later passes wrong, which only this kind of test can see. */
static void test_self_draft_always_accepted(void **state) {
    (void)state;
    static const int32_t budgets[] = {1, 3, 8, 32};
    for (int i = 0; i < 2; i++) {
        pair *p = &g_pairs[i];
        for (int cfg = 0; cfg < N_CONFIGS; cfg += 2) {
            kite_gen_params gp = gen_config(cfg, GEN);
            run_result plain, got;
            generate(p->target, NULL, p->prompt[0], p->n_prompt[0], &gp, 0, &plain);
            for (size_t bi = 0; bi < sizeof budgets / sizeof budgets[0]; bi++) {
                int32_t b = budgets[bi];
                for (int32_t w = 1; w <= 4; w += 3) {
                    kite_spec_params sp = spec_of(KITE_DRAFT_MODEL, b, w);
                    sp.draft_model = p->target;
                    generate(p->target, &sp, p->prompt[0], p->n_prompt[0], &gp, 0, &got);
                    char what[128];
                    snprintf(what, sizeof what, "%s self-draft cfg %d budget %d width %d", p->name, cfg, b, w);
                    assert_prefix_ids(&plain, &got, GEN, what);
                    /* A chain is accepted whole (one pass more allowed for a float tie between log q + G and
                     * logit / T + G); in a tree the root's best child is always the target's token. */
                    if (w == 1 && got.stats.target_passes > ceil_div(GEN - 1, b + 1) + 1)
                        fail_msg("%s: %lld passes, want %lld", what, (long long)got.stats.target_passes,
                                 (long long)ceil_div(GEN - 1, b + 1));
                    if (got.stats.accepted < got.stats.target_passes - 1)
                        fail_msg("%s: only %lld accepted in %lld passes", what, (long long)got.stats.accepted,
                                 (long long)got.stats.target_passes);
                }
            }
        }
    }
}

/* ---- the first token comes from the prompt's logits -------------------------------------------------- */

static void test_first_token_from_prompt(void **state) {
    (void)state;
    pair *p = &g_pairs[0];
    int32_t V = p->info.n_vocab;
    /* Independent reference: the prompt's last logits from kite_eval, argmax. */
    float *logits = malloc(sizeof(float) * (size_t)V * p->n_prompt[0]);
    assert_non_null(logits);
    kite_session *s = open_session(p->target, 0);
    char err[512];
    assert_int_equal(kite_eval(s, p->prompt[0], p->n_prompt[0], logits, err, sizeof err), KITE_OK);
    kite_session_free(s);
    const float *last = logits + (size_t)V * (p->n_prompt[0] - 1);
    int32_t best = 0;
    for (int32_t t = 1; t < V; t++) if (last[t] > last[best]) best = t;
    free(logits);
    kite_gen_params gp = gen_config(0, 1);
    run_result plain, got;
    generate(p->target, NULL, p->prompt[0], p->n_prompt[0], &gp, 0, &plain);
    assert_int_equal(plain.n, 1);
    assert_int_equal(plain.ids[0], best);
    for (int d = 0; d < 3; d++) {
        kite_spec_params sp = spec_of(d == 0 ? KITE_DRAFT_NGRAM : d == 1 ? KITE_DRAFT_MODEL : KITE_DRAFT_ORACLE, 8, 1);
        sp.draft_model = p->draft;
        sp.oracle_ids = plain.ids, sp.n_oracle_ids = 1;
        for (int cfg = 0; cfg < N_CONFIGS; cfg++) {
            kite_gen_params g = gen_config(cfg, 1);
            generate(p->target, NULL, p->prompt[0], p->n_prompt[0], &g, 0, &plain);
            generate(p->target, &sp, p->prompt[0], p->n_prompt[0], &g, 0, &got);
            assert_prefix_ids(&plain, &got, 1, "one token");
            assert_int_equal(got.stats.target_passes, 0); /* no verification pass for it */
        }
    }
}

/* ---- an end token inside an accepted path ends the generation there ----------------------------------- */

static void test_end_token_inside_accepted_path(void **state) {
    (void)state;
    pair *p = &g_pairs[1]; /* TinyStories-656K ends its stories with <|end_story|> */
    int32_t eos = p->info.eos_id;
    assert_true(eos >= 0);
    int checked = 0;
    for (int cfg = 0; cfg < 3; cfg += 2) {
        for (uint64_t seed = 1; seed < 40; seed++) {
            kite_gen_params gp = gen_config(cfg, 220);
            gp.seed = seed;
            gp.ignore_eos = false;
            run_result plain, through, got;
            generate(p->target, NULL, p->prompt[0], p->n_prompt[0], &gp, 0, &plain);
            if (plain.n >= 220 || plain.ids[plain.n - 1] != eos) continue; /* this seed's story is longer */
            for (int i = 0; i < plain.n - 1; i++) assert_int_not_equal(plain.ids[i], eos);
            /* The continuation past the end token, for an oracle that proposes it. */
            kite_gen_params past = gp;
            past.ignore_eos = true;
            past.max_tokens = plain.n + 40;
            generate(p->target, NULL, p->prompt[0], p->n_prompt[0], &past, 0, &through);
            assert_true(through.n == plain.n + 40);
            assert_memory_equal(through.ids, plain.ids, sizeof(int32_t) * (size_t)plain.n);
            /* Budgets that put the end token in the middle of a pass's accepted path (and one where it
             * is a pass's last token), for the perfect oracle, the n-gram and the draft model. */
            for (int32_t b = 1; b <= KITE_MAX_DRAFT; b += 3) {
                kite_spec_params sp = spec_of(KITE_DRAFT_ORACLE, b, 1);
                sp.oracle_ids = through.ids, sp.n_oracle_ids = (size_t)through.n;
                generate(p->target, &sp, p->prompt[0], p->n_prompt[0], &gp, 0, &got);
                char what[128];
                snprintf(what, sizeof what, "cfg %d seed %llu oracle budget %d", cfg, (unsigned long long)seed, b);
                assert_prefix_ids(&plain, &got, plain.n, what);
                assert_int_equal(got.stats.target_passes, ceil_div(plain.n - 1, b + 1));
                sp = spec_of(KITE_DRAFT_MODEL, b, b % 2 + 1);
                sp.draft_model = p->draft;
                generate(p->target, &sp, p->prompt[0], p->n_prompt[0], &gp, 0, &got);
                assert_prefix_ids(&plain, &got, plain.n, "model drafter");
                sp = spec_of(KITE_DRAFT_NGRAM, b, 1);
                generate(p->target, &sp, p->prompt[0], p->n_prompt[0], &gp, 0, &got);
                assert_prefix_ids(&plain, &got, plain.n, "ngram drafter");
            }
            checked++;
            break;
        }
    }
    assert_int_equal(checked, 2); /* one greedy story and one sampled story reached their end token */
}

/* ---- a full context ------------------------------------------------------------------------------------ */

static void test_context_full(void **state) {
    (void)state;
    for (int i = 0; i < 2; i++) {
        pair *p = &g_pairs[i];
        const int32_t n_ctx = 40;
        for (int cfg = 0; cfg < 3; cfg += 2) {
            kite_gen_params gp = gen_config(cfg, 100);
            run_result plain, got;
            generate(p->target, NULL, p->prompt[0], p->n_prompt[0], &gp, n_ctx, &plain);
            /* Positions n_prompt .. n_ctx - 1 take fed tokens; the token sampled at n_ctx is emitted and
             * never needs a position of its own. */
            assert_int_equal(plain.status, KITE_ERR_CONTEXT_FULL);
            assert_int_equal(plain.n, n_ctx - (int)p->n_prompt[0] + 1);
            for (int32_t b = 1; b <= KITE_MAX_DRAFT; b += 5) {
                for (int d = 0; d < 3; d++) {
                    kite_spec_params sp = spec_of(d == 0 ? KITE_DRAFT_NGRAM : d == 1 ? KITE_DRAFT_MODEL : KITE_DRAFT_ORACLE, b,
                                                  d == 2 ? 1 : 1 + b % 3);
                    sp.draft_model = p->draft;
                    sp.oracle_ids = plain.ids, sp.n_oracle_ids = (size_t)plain.n;
                    generate(p->target, &sp, p->prompt[0], p->n_prompt[0], &gp, n_ctx, &got);
                    char what[128];
                    snprintf(what, sizeof what, "%s n_ctx %d cfg %d drafter %d budget %d", p->name, n_ctx, cfg, d, b);
                    assert_same_ids(&plain, &got, what);
                    assert_int_equal(got.n_past, plain.n_past);
                }
            }
        }
    }
}

/* ---- several calls on one session -------------------------------------------------------------------- */

typedef struct script_result {
    int32_t ids[4 * MAX_GEN];
    int n;
    int status[8];
    kite_stats last_stats; /* of the conversation after the reset */
} script_result;

/* prompt, generate (stopped by the callback in the middle), generate on, prompt more, generate,
 * truncate and prompt, generate, reset, and the first prompt again (the n-gram drafter now has the first
 * conversation as a source). */
static void run_script(pair *p, const kite_spec_params *spec, int cfg, script_result *out) {
    memset(out, 0, sizeof *out);
    kite_session *s = open_session(p->target, 0);
    if (spec) set_spec(s, spec);
    char err[512];
    run_result r;
    int step = 0;
    static const int32_t max_tokens[4] = {20, 12, 15, 10};
    static const int stop_after[4] = {7, 0, 0, 0};
    assert_int_equal(kite_prompt(s, p->prompt[0], p->n_prompt[0], err, sizeof err), KITE_OK);
    for (int call = 0; call < 5; call++) {
        if (call == 2) assert_int_equal(kite_prompt(s, p->prompt[1], p->n_prompt[1], err, sizeof err), KITE_OK);
        if (call == 3) { /* forget 10 tokens, then continue from a few prompt tokens */
            assert_int_equal(kite_session_truncate(s, kite_session_n_past(s) - 10, err, sizeof err), KITE_OK);
            assert_int_equal(kite_prompt(s, p->prompt[1] + 1, 3, err, sizeof err), KITE_OK);
        }
        if (call == 4) {
            kite_session_reset(s);
            assert_int_equal(kite_prompt(s, p->prompt[0], p->n_prompt[0], err, sizeof err), KITE_OK);
        }
        kite_gen_params gp = gen_config(cfg, call < 4 ? max_tokens[call] : 30);
        memset(&r, 0, sizeof r);
        r.stop_after = call < 4 ? stop_after[call] : 0;
        out->status[step++] = kite_generate(s, &gp, collect, &r, err, sizeof err);
        memcpy(out->ids + out->n, r.ids, sizeof(int32_t) * (size_t)r.n);
        out->n += r.n;
    }
    kite_session_stats(s, &out->last_stats);
    kite_session_free(s);
}

static void test_several_calls(void **state) {
    (void)state;
    for (int i = 0; i < 2; i++) {
        pair *p = &g_pairs[i];
        for (int cfg = 0; cfg < 3; cfg += 2) {
            script_result plain, got;
            run_script(p, NULL, cfg, &plain);
            assert_int_equal(plain.n, 7 + 12 + 15 + 10 + 30);
            for (int d = 0; d < 4; d++) {
                kite_spec_params sp = spec_of(d == 0 ? KITE_DRAFT_NGRAM : d == 1 ? KITE_DRAFT_MODEL : KITE_DRAFT_ORACLE, 4 + d,
                                              d == 1 ? 2 : 1);
                if (d == 3) sp = spec_of(KITE_DRAFT_MODEL, 0, 2); /* the adaptive budget */
                sp.draft_model = p->draft;
                sp.oracle_ids = plain.ids, sp.n_oracle_ids = (size_t)plain.n;
                run_script(p, &sp, cfg, &got);
                assert_int_equal(got.n, plain.n);
                assert_memory_equal(got.ids, plain.ids, sizeof(int32_t) * (size_t)plain.n);
                assert_memory_equal(got.status, plain.status, sizeof plain.status);
                /* Greedy after the reset repeats the first conversation's first 19 tokens: the n-gram
                 * drafter finds them in the session's earlier conversation and proposes them, 4 a pass. */
                if (cfg == 0 && d == 0 && got.last_stats.accepted < 12)
                    fail_msg("%s: the n-gram drafter accepted %lld tokens replaying a remembered conversation", p->name,
                             (long long)got.last_stats.accepted);
            }
        }
    }
}

/* ---- the adaptive budget ---------------------------------------------------------------------------- */

static void test_adaptive_budget(void **state) {
    (void)state;
    for (int i = 0; i < 2; i++) {
        pair *p = &g_pairs[i];
        for (int cfg = 0; cfg < N_CONFIGS; cfg++) {
            kite_gen_params gp = gen_config(cfg, GEN);
            run_result plain, got;
            generate(p->target, NULL, p->prompt[0], p->n_prompt[0], &gp, 0, &plain);
            for (int d = 0; d < 5; d++) {
                kite_spec_params sp = spec_of(d == 0 ? KITE_DRAFT_NGRAM : d <= 2 ? KITE_DRAFT_MODEL : KITE_DRAFT_ORACLE, 0,
                                              d == 2 ? 3 : 1);
                sp.draft_model = p->draft;
                sp.oracle_ids = plain.ids, sp.n_oracle_ids = (size_t)plain.n;
                sp.oracle_error_rate = d == 4 ? 1.0f : 0.0f;
                generate(p->target, &sp, p->prompt[0], p->n_prompt[0], &gp, 0, &got);
                char what[128];
                snprintf(what, sizeof what, "%s cfg %d auto budget drafter %d", p->name, cfg, d);
                assert_prefix_ids(&plain, &got, GEN, what);
                assert_true(got.stats.target_passes > 0);
            }
        }
    }
}

/* ---- threads ------------------------------------------------------------------------------------------- */

static void test_two_threads(void **state) {
    (void)state;
    pair *p = &g_pairs[0];
    for (int cfg = 0; cfg < 3; cfg += 2) {
        kite_gen_params gp = gen_config(cfg, GEN);
        run_result plain, got;
        generate(p->target, NULL, p->prompt[1], p->n_prompt[1], &gp, 0, &plain);
        g_threads = 2;
        kite_spec_params sp = spec_of(KITE_DRAFT_MODEL, 8, 2);
        sp.draft_model = p->draft;
        generate(p->target, &sp, p->prompt[1], p->n_prompt[1], &gp, 0, &got);
        g_threads = 1;
        assert_prefix_ids(&plain, &got, GEN, "two threads");
    }
}

/* ---- rejection verification -------------------------------------------------------------------------- */

static void test_rejection_verification(void **state) {
    (void)state;
    for (int i = 0; i < 2; i++) {
        pair *p = &g_pairs[i];
        int32_t V = p->info.n_vocab;
        for (int cfg = 0; cfg < N_CONFIGS; cfg++) {
            kite_gen_params gp = gen_config(cfg, GEN);
            run_result plain, a, b;
            generate(p->target, NULL, p->prompt[0], p->n_prompt[0], &gp, 0, &plain);
            for (int d = 0; d < 3; d++) {
                kite_spec_params sp = spec_of(d == 0 ? KITE_DRAFT_NGRAM : d == 1 ? KITE_DRAFT_MODEL : KITE_DRAFT_ORACLE, 6, 1);
                sp.verify = KITE_VERIFY_REJECTION;
                sp.draft_model = p->draft;
                sp.oracle_ids = plain.ids, sp.n_oracle_ids = (size_t)plain.n, sp.oracle_error_rate = 0.3f;
                generate(p->target, &sp, p->prompt[0], p->n_prompt[0], &gp, 0, &a);
                generate(p->target, &sp, p->prompt[0], p->n_prompt[0], &gp, 0, &b);
                assert_int_equal(a.status, KITE_OK);
                assert_int_equal(a.n, GEN);
                /* Exact in distribution, not per seed; but a function of the seed, and greedy is greedy. */
                assert_memory_equal(a.ids, b.ids, sizeof(int32_t) * GEN);
                for (int t = 0; t < GEN; t++) assert_true(a.ids[t] >= 0 && a.ids[t] < V);
                if (cfg == 0) assert_prefix_ids(&plain, &a, GEN, "rejection at T = 0");
                assert_true(a.stats.accepted <= a.stats.drafted);
                assert_true(a.stats.target_passes > 0);
            }
        }
    }
}

/* ---- bad input ---------------------------------------------------------------------------------------- */

static void expect_refused(kite_session *s, const kite_spec_params *sp, const char *must_mention) {
    char err[512] = "";
    int st = kite_session_set_spec(s, sp, err, sizeof err);
    if (st != KITE_ERR_INVALID_ARG) fail_msg("accepted a bad setting (status %d), expected a mention of '%s'", st, must_mention);
    if (!strstr(err, must_mention)) fail_msg("error '%s' does not mention '%s'", err, must_mention);
    assert_null(strchr(err, '\n'));
}

/* Generates on a session after refused settings: the same output as a fresh plain session, and the
 * drafter it had before (none: no passes counted; n-gram: passes). */
static void check_unchanged(pair *p, kite_session *s, bool speculative, const run_result *plain) {
    char err[512];
    kite_session_reset(s);
    assert_int_equal(kite_prompt(s, p->prompt[0], p->n_prompt[0], err, sizeof err), KITE_OK);
    kite_gen_params gp = gen_config(2, GEN);
    run_result r;
    memset(&r, 0, sizeof r);
    assert_int_equal(kite_generate(s, &gp, collect, &r, err, sizeof err), KITE_OK);
    assert_prefix_ids(plain, &r, GEN, "after a refused setting");
    kite_stats st;
    kite_session_stats(s, &st);
    if (speculative) assert_true(st.target_passes > 0);
    else assert_int_equal(st.target_passes, 0);
}

static void test_bad_input(void **state) {
    (void)state;
    pair *p = &g_pairs[1];
    kite_gen_params gp = gen_config(2, GEN);
    run_result plain;
    generate(p->target, NULL, p->prompt[0], p->n_prompt[0], &gp, 0, &plain);
    int32_t bad_ids[3] = {5, 2048, 7};
    kite_model_params vp = kite_model_default_params();
    vp.vocab_only = true;
    kite_model *vocab_only = NULL;
    char err[512];
    assert_int_equal(kite_model_open(&vocab_only, kite_test_data(p->draft_path), &vp, err, sizeof err), KITE_OK);
    for (int before = 0; before < 2; before++) {
        kite_session *s = open_session(p->target, 0);
        if (before) {
            kite_spec_params ok = spec_of(KITE_DRAFT_NGRAM, 4, 1);
            set_spec(s, &ok);
        }
        kite_spec_params sp = spec_of(KITE_DRAFT_MODEL, 4, 1);
        /* stories260K (vocabulary 512) cannot draft for TinyStories-656K (2048), nor the reverse */
        sp.draft_model = g_pairs[0].draft;
        expect_refused(s, &sp, "vocabulary");
        expect_refused(s, &sp, "512");
        expect_refused(s, &sp, "2048");
        sp.draft_model = NULL;
        expect_refused(s, &sp, "draft model");
        sp.draft_model = vocab_only;
        expect_refused(s, &sp, "vocab_only");
        sp.draft_model = p->draft;
        sp.budget = -1;
        expect_refused(s, &sp, "budget");
        sp.budget = KITE_MAX_DRAFT + 1;
        expect_refused(s, &sp, "budget");
        sp.budget = 4;
        sp.tree_width = 0;
        expect_refused(s, &sp, "width");
        sp.tree_width = 9;
        expect_refused(s, &sp, "width");
        sp.tree_width = 2;
        sp.verify = KITE_VERIFY_REJECTION;
        expect_refused(s, &sp, "chain");
        sp.verify = (kite_spec_verify)7;
        sp.tree_width = 1;
        expect_refused(s, &sp, "verification");
        sp.verify = KITE_VERIFY_GUMBEL;
        sp.draft_p_min = 1.5f;
        expect_refused(s, &sp, "p_min");
        sp.draft_p_min = NAN;
        expect_refused(s, &sp, "p_min");
        sp.draft_p_min = 0.0f;
        sp.drafter = (kite_drafter)9;
        expect_refused(s, &sp, "drafter");
        sp.drafter = KITE_DRAFT_ORACLE;
        sp.oracle_ids = NULL;
        expect_refused(s, &sp, "oracle");
        sp.oracle_ids = bad_ids, sp.n_oracle_ids = 3;
        expect_refused(s, &sp, "2048");
        bad_ids[1] = -1;
        expect_refused(s, &sp, "-1");
        bad_ids[1] = 3;
        sp.oracle_error_rate = 1.5f;
        expect_refused(s, &sp, "error rate");
        sp.oracle_error_rate = NAN;
        expect_refused(s, &sp, "error rate");
        assert_int_equal(kite_session_set_spec(s, NULL, err, sizeof err), KITE_ERR_INVALID_ARG);
        assert_int_equal(kite_session_set_spec(NULL, &sp, err, sizeof err), KITE_ERR_INVALID_ARG);
        check_unchanged(p, s, before == 1, &plain);
        kite_session_free(s);
        bad_ids[1] = 2048;
    }
    /* the reverse pair: TinyStories-656K Q8_0 (2048) cannot draft for llama2xs-281K (512) */
    kite_session *s = open_session(g_pairs[0].target, 0);
    kite_spec_params sp = spec_of(KITE_DRAFT_MODEL, 4, 1);
    sp.draft_model = p->draft;
    expect_refused(s, &sp, "vocabulary");
    kite_session_free(s);
    kite_model_free(vocab_only);
    /* A draft file that does not load: a clear one-line error, no model. */
    static const char *const bad_files[] = {"models/does-not-exist.gguf", "data/README.md", "models/tinystories-tok512/tok512.bin"};
    for (size_t i = 0; i < sizeof bad_files / sizeof bad_files[0]; i++) {
        kite_model *m = (kite_model *)&err; /* must be reset to NULL */
        kite_model_params mp = kite_model_default_params();
        err[0] = 0;
        int st = kite_model_open(&m, kite_test_data(bad_files[i]), &mp, err, sizeof err);
        assert_int_not_equal(st, KITE_OK);
        assert_null(m);
        assert_true(strlen(err) > 10);
        assert_null(strchr(err, '\n'));
        print_message("%s: %s\n", bad_files[i], err);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_tok512),
        cmocka_unit_test(test_exact_656k),
        cmocka_unit_test(test_exact_quantized_cache),
        cmocka_unit_test(test_exact_under_grammar),
        cmocka_unit_test(test_exact_under_lazy_grammar),
        cmocka_unit_test(test_self_draft_always_accepted),
        cmocka_unit_test(test_first_token_from_prompt),
        cmocka_unit_test(test_end_token_inside_accepted_path),
        cmocka_unit_test(test_context_full),
        cmocka_unit_test(test_several_calls),
        cmocka_unit_test(test_adaptive_budget),
        cmocka_unit_test(test_two_threads),
        cmocka_unit_test(test_rejection_verification),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
