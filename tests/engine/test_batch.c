/* Continuous batching through the public API: many sessions stepped together by kite_batch_step give
 * every session the same tokens, text, log-probabilities and finish reason as kite_prompt +
 * kite_generate give it alone (greedy, seeded sampling, penalties, stop strings, n-gram speculation, grammars,
 * prompts longer than a step's rows); stop strings against the text of a run without them; log-probs
 * against a log-softmax of kite_eval's logits; kite_session_copy_prefix against prefilling;
 * cancellation of one session among several. Models: TinyStories-656K (Q8_0 GGUF) and stories260K. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "kite.h"
#include "test_util.h"

enum { MAX_OUT = 512, N_REQ = 9 };

/* What a generation delivered. */
typedef struct run_log {
    int32_t ids[MAX_OUT];
    size_t n_ids;
    char text[MAX_OUT * 16];
    size_t n_text;
    kite_logprobs lp[MAX_OUT];
    kite_session *session; /* for the log-prob query inside the callback */
    bool logprobs;
    int32_t cancel_after;  /* > 0: kite_cancel(session) once this many tokens arrived */
} run_log;

static bool collect(int32_t id, const char *text, size_t len, void *user_data) {
    run_log *r = user_data;
    assert_true(r->n_ids < MAX_OUT);
    if (r->logprobs) assert_int_equal(kite_session_token_logprobs(r->session, &r->lp[r->n_ids]), KITE_OK);
    else assert_int_not_equal(kite_session_token_logprobs(r->session, &r->lp[r->n_ids]), KITE_OK);
    r->ids[r->n_ids++] = id;
    assert_true(r->n_text + len <= sizeof r->text);
    memcpy(r->text + r->n_text, text, len);
    r->n_text += len;
    if (r->cancel_after > 0 && (int32_t)r->n_ids == r->cancel_after) kite_cancel(r->session);
    return true;
}

typedef struct request {
    const char *prompt;
    kite_gen_params gp;
    kite_drafter drafter;
    const char *stop[2];
} request;

static kite_model *g_draft; /* draft model for requests with KITE_DRAFT_MODEL */
static kite_grammar *g_grammar; /* the constrained requests' grammar, opened for the batch's model */

/* Free words between forced keys and a closed set of values (no braces: TinyStories-656K has no '{'). */
static const char RECORD_GRAMMAR[] =
    "root ::= \"Name: \" [A-Z] [a-z]{1,10} \", pet: \" (\"cat\" | \"dog\" | \"bird\") \". \" [A-Z] [a-z ,.]{0,100} \"!\"\n";

static kite_model *open_model(const char *rel) {
    char err[512];
    kite_model *m;
    kite_model_params mp = kite_model_default_params();
    mp.n_threads = 2;
    if (strstr(rel, ".bin")) mp.tokenizer_path = kite_test_data("models/tinystories-tok512/tok512.bin");
    if (kite_model_open(&m, rel[0] == '/' ? rel : kite_test_data(rel), &mp, err, sizeof err)) fail_msg("cannot open %s: %s", rel, err);
    return m;
}

static size_t encode(kite_model *m, const char *text, int32_t *ids, size_t cap) {
    size_t n = 0;
    char err[256];
    assert_int_equal(kite_tokenize(m, text, strlen(text), true, false, ids, cap, &n, err, sizeof err), KITE_OK);
    return n;
}

static const char *LONG_PROMPT =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends. "
    "One day, she found a shiny red ball under a big green tree. She picked it up and ran to show her mom. Her mom "
    "smiled and said, \"What a pretty ball! You can play with it, but share it with your friends.\" Lily nodded and "
    "ran back to the park. She saw her friend Tom sitting on a bench. He looked sad. Lily asked him why he was sad.";

static void make_requests(kite_model *m, request *req) {
    memset(req, 0, sizeof *req * N_REQ);
    kite_gen_params base = kite_model_gen_params(m);
    const char *prompts[N_REQ] = {"Once upon a time", LONG_PROMPT, "Tom and his dog", "The sun was", "Lily",
                                  "One day, a cat", LONG_PROMPT, "A big red", "Sam had a toy"};
    for (int i = 0; i < N_REQ; i++) {
        req[i].prompt = prompts[i];
        req[i].gp = base;
        req[i].gp.max_tokens = 24 + 9 * i;
        req[i].gp.temperature = 0;
        req[i].gp.seed = 1000 + (uint64_t)i;
    }
    req[1].gp.temperature = 0.8f; req[1].gp.top_p = 0.9f;
    req[2].gp.temperature = 1.0f; req[2].gp.top_k = 40; req[2].gp.logprobs = true; req[2].gp.top_logprobs = 5;
    req[3].gp.repeat_penalty = 1.3f; req[3].gp.logprobs = true; req[3].gp.top_logprobs = 20;
    req[4].drafter = KITE_DRAFT_NGRAM;
    req[5].drafter = KITE_DRAFT_NGRAM; req[5].gp.temperature = 0.7f; req[5].gp.min_p = 0.05f;
    req[6].stop[0] = "."; req[6].stop[1] = " the"; req[6].gp.n_stop = 2;
    req[7].gp.max_tokens = 0;
    req[8].gp.temperature = 1.2f; req[8].stop[0] = "ball"; req[8].gp.n_stop = 1; req[8].drafter = KITE_DRAFT_NGRAM;

    for (int i = 0; i < N_REQ; i++)
        if (req[i].gp.n_stop) req[i].gp.stop = req[i].stop;
}

static kite_kv_type g_kv_type = KITE_KV_F16; /* every session's cache, alone and batched */
static int32_t g_n_ctx = 256;                  /* ... and its context */

static kite_session *open_session(kite_model *m, const request *rq) {
    char err[256];
    kite_session *s;
    kite_session_params sp = kite_session_default_params();
    sp.n_ctx = g_n_ctx;
    sp.kv_type = g_kv_type;
    assert_int_equal(kite_session_open(&s, m, &sp, err, sizeof err), KITE_OK);
    kite_spec_params spec = kite_spec_default_params();
    spec.drafter = rq->drafter;
    if (rq->drafter == KITE_DRAFT_MODEL) {
        spec.draft_model = g_draft;
        spec.tree_width = 2;
    }
    assert_int_equal(kite_session_set_spec(s, &spec, err, sizeof err), KITE_OK);
    return s;
}

static void run_alone(kite_model *m, const request *rq, run_log *out, kite_finish_reason *finish) {
    char err[256];
    int32_t ids[512];
    size_t n = encode(m, rq->prompt, ids, 512);
    kite_session *s = open_session(m, rq);
    memset(out, 0, sizeof *out);
    out->session = s;
    out->logprobs = rq->gp.logprobs;
    assert_int_equal(kite_prompt(s, ids, n, err, sizeof err), KITE_OK);
    assert_int_equal(kite_generate(s, &rq->gp, collect, out, err, sizeof err), KITE_OK);
    *finish = kite_session_finish_reason(s);
    kite_session_free(s);
}

static void assert_same_run(const run_log *a, const run_log *b, int i) {
    if (a->n_ids != b->n_ids || memcmp(a->ids, b->ids, a->n_ids * sizeof *a->ids))
        fail_msg("request %d: %zu tokens alone, %zu batched, or different tokens", i, a->n_ids, b->n_ids);
    if (a->n_text != b->n_text || memcmp(a->text, b->text, a->n_text)) fail_msg("request %d: different text", i);
    if (a->logprobs && memcmp(a->lp, b->lp, a->n_ids * sizeof *a->lp)) fail_msg("request %d: different log-probabilities", i);
}

/* The property the server promises: batched == alone, for every request, whatever shares the steps. */
static void batched_equals_alone(const char *model_rel, int32_t batch_rows, const char *draft_rel, bool grammar) {
    kite_model *m = open_model(model_rel);
    request req[N_REQ];
    make_requests(m, req);
    if (grammar) {
        /* Constrained: greedy and sampled, plain and with n-gram drafts (and the grammar's forced text),
         * with log-probs and with a stop string; the others stay free beside them. */
        char err[512];
        if (kite_grammar_open(&g_grammar, m, KITE_GRAMMAR_GBNF, RECORD_GRAMMAR, strlen(RECORD_GRAMMAR), err, sizeof err))
            fail_msg("grammar: %s", err);
        static const int constrained[] = {0, 2, 4, 5, 8};
        for (size_t k = 0; k < sizeof constrained / sizeof constrained[0]; k++) {
            req[constrained[k]].gp.grammar = g_grammar;
            req[constrained[k]].gp.max_tokens = 120;
        }
    }
    if (draft_rel) { /* a draft model for the greedy, seeded and penalised requests: trees of 2 children */
        g_draft = open_model(draft_rel);
        req[0].drafter = req[1].drafter = req[3].drafter = req[6].drafter = KITE_DRAFT_MODEL;
    }
    static run_log alone[N_REQ], batched[N_REQ];
    kite_finish_reason alone_finish[N_REQ];
    for (int i = 0; i < N_REQ; i++) run_alone(m, &req[i], &alone[i], &alone_finish[i]);

    char err[256];
    kite_batch_params bp = kite_batch_default_params();
    bp.max_tokens = batch_rows;
    bp.n_ctx = g_n_ctx;
    kite_batch *batch;
    assert_int_equal(kite_batch_open(&batch, m, &bp, err, sizeof err), KITE_OK);
    kite_session *sessions[N_REQ];
    int32_t ids[512];
    int steps = 0;
    /* Requests arrive while others run: two at first, then one more every third step. */
    int started = 0;
    for (;;) {
        while (started < N_REQ && (started < 2 || steps >= 3 * (started - 1))) {
            int i = started++;
            sessions[i] = open_session(m, &req[i]);
            memset(&batched[i], 0, sizeof batched[i]);
            batched[i].session = sessions[i];
            batched[i].logprobs = req[i].gp.logprobs;
            size_t n = encode(m, req[i].prompt, ids, 512);
            assert_int_equal(kite_session_start(sessions[i], ids, n, &req[i].gp, collect, &batched[i], err, sizeof err), KITE_OK);
            assert_true(kite_session_busy(sessions[i]));
        }
        bool busy = false;
        for (int i = 0; i < started; i++) busy = busy || kite_session_busy(sessions[i]);
        if (!busy && started == N_REQ) break;
        assert_int_equal(kite_batch_step(batch, sessions, (size_t)started, err, sizeof err), KITE_OK);
        steps++;
        assert_true(steps < 10000);
    }
    for (int i = 0; i < N_REQ; i++) {
        assert_int_equal(kite_session_result(sessions[i], err, sizeof err), KITE_OK);
        assert_same_run(&alone[i], &batched[i], i);
        assert_int_equal(kite_session_finish_reason(sessions[i]), alone_finish[i]);
        kite_session_free(sessions[i]);
    }
    /* Fewer steps than the requests' passes one after another: they really shared passes. */
    size_t total = 0;
    for (int i = 0; i < N_REQ; i++) total += alone[i].n_ids;
    assert_true((size_t)steps < total);
    kite_batch_free(batch);
    kite_grammar_free(g_grammar);
    g_grammar = NULL;
    kite_model_free(m);
    kite_model_free(g_draft);
    g_draft = NULL;
}

/* Quantized caches (heads of 32k elements: a random-weight "tiny" model, heads of 64). */
static void test_batched_equals_alone_quantized_cache(void **state) {
    (void)state;
    char path[] = "/tmp/kite-batch-kvq-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    kite_random_model_params rp = {.shape = "tiny", .type = "q8_0", .seed = 5,
                                  .tokenizer_path = kite_test_data("models/tinystories-tok512/tok512.bin")};
    char err[512];
    if (kite_write_random_model(path, &rp, err, sizeof err)) fail_msg("random model: %s", err);
    static const kite_kv_type types[] = {KITE_KV_Q8_0, KITE_KV_Q4_0};
    g_n_ctx = 512; /* random weights never end a story: room for every request's whole length */
    for (size_t t = 0; t < sizeof types / sizeof *types; t++) {
        g_kv_type = types[t];
        batched_equals_alone(path, 0, NULL, false);
    }
    g_n_ctx = 256;
    g_kv_type = KITE_KV_F16;
    unlink(path);
}

static void test_batched_equals_alone_656k(void **state) {
    (void)state;
    batched_equals_alone("models/tinystories-656k/tinystories-656k-q8_0.gguf", 0, NULL, false);
}

/* Few rows per step: prompts go in many chunks and some sessions wait for a step with room. */
static void test_batched_equals_alone_small_steps(void **state) {
    (void)state;
    batched_equals_alone("models/tinystories-tok512/stories260K.gguf", 12, NULL, false);
}

/* Requests drafted by a smaller model (llama2xs-281K verified, stories260K drafting trees). */
static void test_batched_equals_alone_draft_model(void **state) {
    (void)state;
    batched_equals_alone("models/tinystories-tok512/llama2xs-281K.bin", 0, "models/tinystories-tok512/stories260K.bin", false);
}

/* Under a grammar (src/grammar): constrained requests beside free ones, alone and with a draft model. */
static void test_batched_equals_alone_grammar(void **state) {
    (void)state;
    batched_equals_alone("models/tinystories-656k/tinystories-656k-q8_0.gguf", 0, NULL, true);
}

static void test_batched_equals_alone_grammar_draft_model(void **state) {
    (void)state;
    batched_equals_alone("models/tinystories-tok512/llama2xs-281K.bin", 0, "models/tinystories-tok512/stories260K.bin", true);
}

/* Stop strings against a run without them: the text ends right before the first occurrence, which is
 * never delivered, and the finish reason is stop. */
static void test_stop_strings(void **state) {
    (void)state;
    kite_model *m = open_model("models/tinystories-656k/tinystories-656k-q8_0.gguf");
    const char *stops[][2] = {{".", NULL}, {" the", "!"}, {"ed", NULL}, {"zzzz-never", NULL}, {"Lily", "an"}};
    for (size_t k = 0; k < sizeof stops / sizeof stops[0]; k++) {
        request rq = {.prompt = "One day, Lily", .gp = kite_model_gen_params(m)};
        rq.gp.temperature = 0.9f;
        rq.gp.seed = 77 + k;
        rq.gp.max_tokens = 80;
        run_log plain, stopped;
        kite_finish_reason f_plain, f_stop;
        run_alone(m, &rq, &plain, &f_plain);
        rq.gp.stop = stops[k];
        rq.gp.n_stop = stops[k][1] ? 2 : 1;
        run_alone(m, &rq, &stopped, &f_stop);
        size_t first = plain.n_text;
        for (size_t i = 0; i < rq.gp.n_stop; i++) {
            size_t len = strlen(stops[k][i]);
            for (size_t at = 0; at + len <= plain.n_text; at++)
                if (!memcmp(plain.text + at, stops[k][i], len)) {
                    if (at < first) first = at;
                    break;
                }
        }
        if (first < plain.n_text) {
            assert_int_equal(f_stop, KITE_FINISH_STOP);
            assert_int_equal(stopped.n_text, first);
            /* Generation ended with the token that completed the stop string. */
            assert_true(stopped.n_ids <= plain.n_ids);
        } else {
            assert_int_equal(f_stop, f_plain);
            assert_int_equal(stopped.n_text, plain.n_text);
        }
        assert_memory_equal(stopped.text, plain.text, stopped.n_text);
        assert_memory_equal(stopped.ids, plain.ids, stopped.n_ids * sizeof *plain.ids);
    }
    kite_model_free(m);
}

/* Log-probabilities against an independent log-softmax (double precision) of kite_eval's logits over
 * the same tokens. */
static void test_logprobs(void **state) {
    (void)state;
    kite_model *m = open_model("models/tinystories-tok512/stories260K.gguf");
    kite_model_info info;
    kite_model_get_info(m, &info);
    request rq = {.prompt = "Tom and his dog", .gp = kite_model_gen_params(m)};
    rq.gp.temperature = 0.9f;
    rq.gp.seed = 5;
    rq.gp.max_tokens = 20;
    rq.gp.logprobs = true;
    rq.gp.top_logprobs = 20;
    run_log r;
    kite_finish_reason f;
    run_alone(m, &rq, &r, &f);
    int32_t ids[600];
    size_t n = encode(m, rq.prompt, ids, 512);
    memcpy(ids + n, r.ids, r.n_ids * sizeof *ids);
    size_t V = (size_t)info.n_vocab, total = n + r.n_ids;
    float *logits = malloc(sizeof(float) * V * total);
    char err[256];
    kite_session *s;
    assert_int_equal(kite_session_open(&s, m, NULL, err, sizeof err), KITE_OK);
    assert_int_equal(kite_eval(s, ids, total, logits, err, sizeof err), KITE_OK);
    for (size_t t = 0; t < r.n_ids; t++) {
        const float *row = logits + (n - 1 + t) * V;
        double max = -INFINITY, sum = 0;
        for (size_t v = 0; v < V; v++) max = row[v] > max ? row[v] : max;
        for (size_t v = 0; v < V; v++) sum += exp((double)row[v] - max);
        double lz = max + log(sum);
        assert_int_equal(r.lp[t].id, r.ids[t]);
        assert_true(fabs(r.lp[t].logprob - ((double)row[r.ids[t]] - lz)) < 1e-4);
        assert_int_equal(r.lp[t].n_top, 20);
        for (int k = 0; k < 20; k++) {
            const kite_token_logprob *e = &r.lp[t].top[k];
            assert_true(fabs(e->logprob - ((double)row[e->id] - lz)) < 1e-4);
            if (k > 0) assert_true(e->logprob <= r.lp[t].top[k - 1].logprob);
            /* Nothing outside the list beats its last entry. */
            int better = 0;
            for (size_t v = 0; v < V; v++) better += row[v] > row[r.lp[t].top[19].id];
            if (k == 19) assert_true(better <= 19);
        }
    }
    free(logits);
    kite_session_free(s);
    kite_model_free(m);
}

/* A session that starts from another's K/V (kite_session_copy_prefix) gives the same logits as one
 * that prefilled the whole prompt itself. */
static void test_copy_prefix(void **state) {
    (void)state;
    kite_model *m = open_model("models/tinystories-656k/tinystories-656k-q8_0.gguf");
    kite_model_info info;
    kite_model_get_info(m, &info);
    size_t V = (size_t)info.n_vocab;
    int32_t ids[512];
    size_t n = encode(m, LONG_PROMPT, ids, 512);
    assert_true(n > 60);
    char err[256];
    kite_session *full, *donor, *copy, *other;
    assert_int_equal(kite_session_open(&full, m, NULL, err, sizeof err), KITE_OK);
    assert_int_equal(kite_session_open(&donor, m, NULL, err, sizeof err), KITE_OK);
    assert_int_equal(kite_session_open(&copy, m, NULL, err, sizeof err), KITE_OK);
    float *want = malloc(sizeof(float) * V * n), *got = malloc(sizeof(float) * V * n);
    assert_int_equal(kite_eval(full, ids, n, want, err, sizeof err), KITE_OK);
    assert_int_equal(kite_prompt(donor, ids, 40, err, sizeof err), KITE_OK);
    assert_int_equal(kite_session_copy_prefix(copy, donor, 30, err, sizeof err), KITE_OK);
    assert_int_equal(kite_session_n_past(copy), 30);
    int32_t nt;
    const int32_t *toks = kite_session_tokens(copy, &nt);
    assert_int_equal(nt, 30);
    assert_memory_equal(toks, ids, 30 * sizeof *ids);
    assert_int_equal(kite_eval(copy, ids + 30, n - 30, got, err, sizeof err), KITE_OK);
    assert_memory_equal(got, want + 30 * V, sizeof(float) * V * (n - 30));
    /* From a donor busy with a generation (between steps): the same logits. */
    kite_batch *batch;
    assert_int_equal(kite_batch_open(&batch, m, NULL, err, sizeof err), KITE_OK);
    kite_gen_params gp = kite_model_gen_params(m);
    gp.max_tokens = 50;
    gp.ignore_eos = true;
    kite_session *busy_donor;
    assert_int_equal(kite_session_open(&busy_donor, m, NULL, err, sizeof err), KITE_OK);
    assert_int_equal(kite_session_start(busy_donor, ids, 45, &gp, NULL, NULL, err, sizeof err), KITE_OK);
    for (int i = 0; i < 4; i++) assert_int_equal(kite_batch_step(batch, &busy_donor, 1, err, sizeof err), KITE_OK);
    assert_true(kite_session_busy(busy_donor));
    assert_int_equal(kite_session_copy_prefix(copy, busy_donor, 44, err, sizeof err), KITE_OK);
    assert_int_equal(kite_eval(copy, ids + 44, n - 44, got, err, sizeof err), KITE_OK);
    assert_memory_equal(got, want + 44 * V, sizeof(float) * V * (n - 44));
    /* A busy destination is refused. */
    assert_int_not_equal(kite_session_copy_prefix(busy_donor, copy, 10, err, sizeof err), KITE_OK);
    kite_session_free(busy_donor);
    kite_batch_free(batch);
    /* Refused: more than the donor holds, another KV type. */
    assert_int_not_equal(kite_session_copy_prefix(copy, donor, 41, err, sizeof err), KITE_OK);
    kite_session_params sp = kite_session_default_params();
    sp.kv_type = KITE_KV_F32;
    assert_int_equal(kite_session_open(&other, m, &sp, err, sizeof err), KITE_OK);
    assert_int_not_equal(kite_session_copy_prefix(other, donor, 10, err, sizeof err), KITE_OK);
    free(want);
    free(got);
    kite_session_free(full);
    kite_session_free(donor);
    kite_session_free(copy);
    kite_session_free(other);
    kite_model_free(m);
}

/* kite_cancel ends one session's work at its next step; the others go on to the same tokens as alone. */
static void test_cancel_one(void **state) {
    (void)state;
    kite_model *m = open_model("models/tinystories-tok512/stories260K.gguf");
    request rq = {.prompt = "Once upon a time", .gp = kite_model_gen_params(m)};
    rq.gp.temperature = 0;
    rq.gp.max_tokens = 60;
    rq.gp.ignore_eos = true;
    run_log alone;
    kite_finish_reason f;
    run_alone(m, &rq, &alone, &f);
    char err[256];
    kite_batch *batch;
    assert_int_equal(kite_batch_open(&batch, m, NULL, err, sizeof err), KITE_OK);
    kite_session *s[2];
    static run_log logs[2];
    int32_t ids[64];
    size_t n = encode(m, rq.prompt, ids, 64);
    for (int i = 0; i < 2; i++) {
        s[i] = open_session(m, &rq);
        memset(&logs[i], 0, sizeof logs[i]);
        logs[i].session = s[i];
        logs[i].cancel_after = i == 0 ? 5 : 0;
        assert_int_equal(kite_session_start(s[i], ids, n, &rq.gp, collect, &logs[i], err, sizeof err), KITE_OK);
    }
    while (kite_session_busy(s[0]) || kite_session_busy(s[1])) assert_int_equal(kite_batch_step(batch, s, 2, err, sizeof err), KITE_OK);
    assert_int_equal(kite_session_result(s[0], err, sizeof err), KITE_ERR_CANCELLED);
    assert_int_equal(kite_session_finish_reason(s[0]), KITE_FINISH_CANCELLED);
    assert_int_equal(logs[0].n_ids, 5);
    assert_int_equal(kite_session_result(s[1], err, sizeof err), KITE_OK);
    assert_same_run(&alone, &logs[1], 1);
    /* The cancelled session is usable again: truncated to its prompt it gives the same run. */
    assert_int_equal(kite_session_truncate(s[0], (int32_t)n - 1, err, sizeof err), KITE_OK);
    memset(&logs[0], 0, sizeof logs[0]);
    logs[0].session = s[0];
    assert_int_equal(kite_session_start(s[0], ids + n - 1, 1, &rq.gp, collect, &logs[0], err, sizeof err), KITE_OK);
    while (kite_session_busy(s[0])) assert_int_equal(kite_batch_step(batch, s, 1, err, sizeof err), KITE_OK);
    assert_same_run(&alone, &logs[0], 0);
    /* Busy sessions refuse blocking calls; bad arguments are refused. */
    assert_int_equal(kite_session_start(s[0], ids, n, &rq.gp, collect, &logs[0], err, sizeof err), KITE_OK);
    assert_int_not_equal(kite_prompt(s[0], ids, n, err, sizeof err), KITE_OK);
    assert_int_not_equal(kite_generate(s[0], &rq.gp, collect, &logs[0], err, sizeof err), KITE_OK);
    kite_session *twice[2] = {s[0], s[0]};
    assert_int_not_equal(kite_batch_step(batch, twice, 2, err, sizeof err), KITE_OK);
    kite_session_reset(s[0]);
    assert_false(kite_session_busy(s[0]));
    for (int i = 0; i < 2; i++) kite_session_free(s[i]);
    kite_batch_free(batch);
    kite_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batched_equals_alone_656k),
        cmocka_unit_test(test_batched_equals_alone_small_steps),
        cmocka_unit_test(test_batched_equals_alone_draft_model),
        cmocka_unit_test(test_batched_equals_alone_grammar),
        cmocka_unit_test(test_batched_equals_alone_grammar_draft_model),
        cmocka_unit_test(test_stop_strings),
        cmocka_unit_test(test_logprobs),
        cmocka_unit_test(test_copy_prefix),
        cmocka_unit_test(test_cancel_one),
        cmocka_unit_test(test_batched_equals_alone_quantized_cache), /* last: it sets the cache type */
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
