/* Grammar-constrained decoding in the engine (src/grammar/mask.c, engine/session.c, engine/grammar.c):
 *   - token masks against a brute-force reference (every token's bytes stepped through the matcher
 *     one by one) on random walks over several grammars, for the vocabularies of tok512 (SentencePiece,
 *     512), TinyStories-656K (2048), Llama-2 (32000), Llama-3 (128256) and Qwen3 (151669 + padding),
 *     including SentencePiece's dropped leading space after BOS;
 *   - every generated text (many seeds, T = 1) accepted by the matcher and by an independent check:
 *     jansson parses the JSON grammar's outputs, PCRE2 full-matches the pattern grammars' outputs; on
 *     stories260K, TinyStories-656K and a random-weight model with the real Qwen3 tokenizer;
 *   - how generation ends: the grammar's end without end tokens (ignore_eos), max_tokens, stop strings,
 *     a vocabulary that lacks the bytes the grammar needs (at the start and mid-text: a clear error,
 *     no hang), log-probabilities of the raw logits, and bad input (grammar text, another model's grammar).
 *   - rejection verification (n-gram and draft model) keeps every output within the grammar;
 *   - JSON Schema, regex and json_object grammars through kite_grammar_open (the same tokens as their
 *     GBNF opened as text; outputs checked by hand with jansson and by PCRE2);
 * Exactness under speculation is in tests/spec/test_spec_exact.c, batching in tests/engine/test_batch.c. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <jansson.h>
#include <math.h>
#include <pcre2.h>
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
#include "grammar/grammar.h"
#include "grammar/mask.h"
#include "kite.h"
#include "test_util.h"

/* ---- grammars and their independent checks ------------------------------------------------------- */

/* JSON objects (no \u escapes: jansson refuses lone surrogates, which a grammar over bytes cannot
 * exclude from \uXXXX cheaply; exponents of two digits keep every number finite for jansson). */
static const char JSON_GRAMMAR[] =
    "root   ::= object\n"
    "value  ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
    "object ::= \"{\" ws ( string \":\" ws value (\",\" ws string \":\" ws value)* )? \"}\" ws\n"
    "array  ::= \"[\" ws ( value (\",\" ws value)* )? \"]\" ws\n"
    "string ::= \"\\\"\" ( [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" [\"\\\\/bfnrt] ){0,24} \"\\\"\" ws\n"
    "number ::= \"-\"? (\"0\" | [1-9] [0-9]{0,12}) (\".\" [0-9]{1,6})? ([eE] [-+]? [0-9]{1,2})? ws\n"
    "ws     ::= \"\" | \" \" | \"\\n\" [ ]{0,4}\n";

/* JSON nested two deep with few members, so that sampled texts close within a few hundred tokens. */
static const char SHALLOW_JSON_GRAMMAR[] =
    "root   ::= \"{\" ws ( member (\",\" ws member){0,3} )? \"}\" ws\n"
    "member ::= string \":\" ws (inner | scalar)\n"
    "inner  ::= \"{\" ws ( string \":\" ws scalar (\",\" ws string \":\" ws scalar){0,2} )? \"}\" ws"
    " | \"[\" ws ( scalar (\",\" ws scalar){0,3} )? \"]\" ws\n"
    "scalar ::= string | number | (\"true\" | \"false\" | \"null\") ws\n"
    "string ::= \"\\\"\" ( [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" [\"\\\\/bfnrt] ){0,12} \"\\\"\" ws\n"
    "number ::= \"-\"? (\"0\" | [1-9] [0-9]{0,8}) (\".\" [0-9]{1,4})? ws\n"
    "ws     ::= \"\" | \" \"\n";

/* A record with forced keys, as a schema compiler writes one. */
static const char PERSON_GRAMMAR[] =
    "root ::= \"{\" ws \"\\\"name\\\":\" ws str \",\" ws \"\\\"age\\\":\" ws int \",\" ws \"\\\"tags\\\":\" ws \"[\" ws "
    "(str (\",\" ws str){0,3})? \"]\" ws \"}\"\n"
    "str ::= \"\\\"\" [a-zA-Z0-9 _.-]{0,16} \"\\\"\" ws\n"
    "int ::= \"-\"? ([0-9] | [1-9] [0-9]{1,5}) ws\n"
    "ws ::= [ ]?\n";

/* Grammars written from a regular expression, which PCRE2 then checks independently. */
typedef struct pattern_case {
    const char *gbnf;
    const char *regex; /* PCRE2, matched in full */
} pattern_case;

static const pattern_case PATTERNS[] = {
    {"root ::= [a-z]{1,8} \"@\" [a-z]{1,8} \".\" (\"com\" | \"org\" | \"net\")\n", "[a-z]{1,8}@[a-z]{1,8}\\.(com|org|net)"},
    {"root ::= [0-9]{4} \"-\" [0-9]{2} \"-\" [0-9]{2} (\" \" [A-Z] [a-z]{1,9})?\n", "[0-9]{4}-[0-9]{2}-[0-9]{2}( [A-Z][a-z]{1,9})?"},
    {"root ::= (\"yes\" | \"no\" | \"maybe\") (\", \" [a-z ]{1,30})? \".\"\n", "(yes|no|maybe)(, [a-z ]{1,30})?\\."},
    {"root ::= [A-Z] [a-z]{1,12} (\" \" [a-z]{1,12}){2,6} [.!?]\n", "[A-Z][a-z]{1,12}( [a-z]{1,12}){2,6}[.!?]"},
};
enum { N_PATTERNS = sizeof PATTERNS / sizeof PATTERNS[0] };

/* Characters beyond ASCII: masks must follow multi-byte characters split across tokens. */
static const char UNICODE_GRAMMAR[] = "root ::= [\\u03B1-\\u03C9\\u4E00-\\u4E2F\\U0001F600-\\U0001F64F ]{1,30} \"!\"\n";

static bool full_match(const char *pattern, const char *text, size_t len) {
    int code;
    PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, PCRE2_ANCHORED | PCRE2_ENDANCHORED | PCRE2_UTF,
                                   &code, &off, NULL);
    if (!re) fail_msg("PCRE2 cannot compile %s", pattern);
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    int rc = pcre2_match(re, (PCRE2_SPTR)text, len, 0, 0, md, NULL);
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    return rc >= 0;
}

static bool json_parses(const char *text, size_t len) {
    json_error_t je;
    json_t *v = json_loadb(text, len, JSON_DECODE_INT_AS_REAL | JSON_ALLOW_NUL, &je);
    if (!v) {
        fprintf(stderr, "jansson: %s at %d:%d in %.*s\n", je.text, je.line, je.column, (int)len, text);
        return false;
    }
    bool object = json_is_object(v);
    json_decref(v);
    return object;
}

/* ---- models ------------------------------------------------------------------------------------------ */

static kite_model *g_stories;   /* stories260K (tok512) */
static kite_model *g_656k;      /* TinyStories-656K, Q8_0 GGUF */
static kite_model *g_qwen;      /* random weights, Qwen3's tokenizer */
static char g_tmp[4096];
static char g_qwen_path[4200];

static kite_model *open_model(const char *path, const char *tokenizer, bool vocab_only) {
    char err[512];
    kite_model_params mp = kite_model_default_params();
    mp.n_threads = 1;
    mp.tokenizer_path = tokenizer;
    mp.vocab_only = vocab_only;
    kite_model *m = NULL;
    if (kite_model_open(&m, path, &mp, err, sizeof err)) {
        fprintf(stderr, "cannot open %s: %s\n", path ? path : tokenizer, err);
        return NULL;
    }
    return m;
}

static int setup(void **state) {
    (void)state;
    g_stories = open_model(kite_test_data("models/tinystories-tok512/stories260K.bin"),
                           kite_test_data("models/tinystories-tok512/tok512.bin"), false);
    g_656k = open_model(kite_test_data("models/tinystories-656k/tinystories-656k-q8_0.gguf"), NULL, false);
    const char *tmp = getenv("TMPDIR");
    snprintf(g_tmp, sizeof g_tmp, "%s/kite-grammar-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(g_tmp)) return -1;
    snprintf(g_qwen_path, sizeof g_qwen_path, "%s/tiny-qwen3.gguf", g_tmp);
    kite_random_model_params rp = {.shape = "tiny", .type = "q8_0",
                                   .tokenizer_path = kite_test_data("models/tokenizers/qwen3/tokenizer.json"), .seed = 7};
    char err[512];
    if (kite_write_random_model(g_qwen_path, &rp, err, sizeof err)) {
        fprintf(stderr, "random model: %s\n", err);
        return -1;
    }
    g_qwen = open_model(g_qwen_path, NULL, false);
    return g_stories && g_656k && g_qwen ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    kite_model_free(g_stories);
    kite_model_free(g_656k);
    kite_model_free(g_qwen);
    unlink(g_qwen_path);
    rmdir(g_tmp);
    return 0;
}

static kite_grammar *open_grammar(const kite_model *m, const char *text) {
    char err[512];
    kite_grammar *g = NULL;
    if (kite_grammar_open(&g, m, KITE_GRAMMAR_GBNF, text, strlen(text), err, sizeof err)) fail_msg("grammar: %s", err);
    return g;
}

/* ---- masks against brute force ------------------------------------------------------------------------ */

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint32_t next_random(void) {
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 11);
}

/* Whether token id may follow prev at state, worked out without the trie: its piece (as emit writes
 * it) stepped through the matcher byte by byte; end tokens where the text is complete; control and
 * unknown tokens and empty pieces never. */
/* The state after token id as a token reference (<[id]>: the bytes 0xFF id>>16 id>>8 id), or < 0
 * when the grammar does not reference it. */
static int32_t ref_step(kite_gmatch *m, const kite_gbnf *g, int32_t state, int32_t id) {
    const int32_t *refs = NULL;
    size_t n = kite_gbnf_token_refs(g, &refs);
    for (size_t i = 0; i < n; i++)
        if (refs[i] == id) {
            const uint8_t b[4] = {0xFF, (uint8_t)(id >> 16), (uint8_t)(id >> 8), (uint8_t)id};
            return kite_gmatch_step_bytes(m, state, b, 4);
        }
    return KITE_GSTATE_DEAD;
}

static const kite_gbnf *g_brute_gbnf; /* the grammar the brute force works for (its token references) */

static bool allowed_by_brute_force(kite_gmatch *m, const kite_tokenizer *t, int32_t state, int32_t prev, int32_t id) {
    if (id >= kite_tokenizer_n_vocab(t)) return false;
    if (g_brute_gbnf && ref_step(m, g_brute_gbnf, state, id) >= 0) return true; /* a referenced token, any class */
    if (kite_tokenizer_is_eog(t, id)) return kite_gmatch_accepting(m, state);
    if (kite_tokenizer_is_special(t, id)) return false;
    char piece[512];
    int32_t len = kite_tokenizer_piece(t, prev, id, piece, sizeof piece);
    if (len <= 0 || len > 256) return false;
    int32_t s = state;
    for (int32_t i = 0; i < len && s >= 0; i++) {
        if ((uint8_t)piece[i] == 0xFF) return false; /* text never spells a token reference */
        s = kite_gmatch_step(m, s, (uint8_t)piece[i]);
    }
    return s >= 0;
}

/* Random walks of `steps` tokens from the start, comparing every state's mask with brute force. */
static void masks_match_brute_force(kite_model *model, const char *gbnf, int walks, int steps, int32_t first_prev) {
    kite_grammar *g = open_grammar(model, gbnf);
    kite_gmask *gm = NULL;
    kite_error e = {0};
    assert_int_equal(kite_gmask_new(g->gbnf, g->vocab, model->tokenizer, true, 0, &gm, &e), KITE_OK);
    kite_gmatch *ref = NULL;
    assert_int_equal(kite_gmatch_new(g->gbnf, &ref, &e), KITE_OK); /* a matcher of its own: nothing shared */
    g_brute_gbnf = g->gbnf;
    int32_t V = model->n_vocab;
    int32_t *allowed = malloc(sizeof(int32_t) * (size_t)V);
    assert_non_null(allowed);
    int states = 0;
    for (int w = 0; w < walks; w++) {
        int32_t state = kite_gmask_start(gm), ref_state = kite_gmatch_start(ref), prev = first_prev;
        for (int k = 0; k < steps; k++) {
            int32_t n_allowed = -1;
            const uint64_t *bits = kite_gmask_allowed(gm, state, prev, &n_allowed, &e);
            assert_non_null(bits);
            int32_t n_ref = 0;
            for (int32_t id = 0; id < V; id++) {
                bool want = allowed_by_brute_force(ref, model->tokenizer, ref_state, prev, id);
                if (want != kite_gmask_bit(bits, id)) {
                    char piece[300];
                    int32_t len = kite_tokenizer_piece(model->tokenizer, prev, id, piece, 256);
                    fail_msg("walk %d step %d: token %d (\"%.*s\") after %d: mask says %d, brute force %d", w, k, id,
                             len > 0 ? len : 0, piece, prev, kite_gmask_bit(bits, id), want);
                }
                if (want) allowed[n_ref++] = id;
            }
            assert_int_equal(n_allowed, n_ref);
            states++;
            if (n_ref == 0) break;
            int32_t id = allowed[next_random() % (uint32_t)n_ref];
            if (kite_tokenizer_is_eog(model->tokenizer, id)) break;
            /* The same token through the advance the engine uses and through the reference matcher. */
            state = kite_gmask_advance(gm, state, prev, id);
            char piece[300];
            int32_t len = kite_tokenizer_piece(model->tokenizer, prev, id, piece, 256);
            int32_t as_ref = ref_step(ref, g->gbnf, ref_state, id);
            ref_state = as_ref >= 0 ? as_ref : kite_gmatch_step_bytes(ref, ref_state, (const uint8_t *)piece, (size_t)len);
            assert_true(state >= 0 && ref_state >= 0);
            prev = id;
        }
    }
    assert_true(states >= walks);
    g_brute_gbnf = NULL;
    free(allowed);
    kite_gmatch_free(ref);
    kite_gmask_free(gm);
    kite_grammar_free(g);
}

static void test_masks_small_vocabularies(void **state) {
    (void)state;
    kite_model *models[2] = {g_stories, g_656k};
    for (int i = 0; i < 2; i++) {
        int32_t bos = kite_tokenizer_bos(models[i]->tokenizer);
        /* after BOS (SentencePiece drops the first word's space) and after an ordinary token */
        for (int after_bos = 0; after_bos < 2; after_bos++) {
            int32_t prev = after_bos ? bos : 100;
            masks_match_brute_force(models[i], JSON_GRAMMAR, 6, 24, prev);
            masks_match_brute_force(models[i], PERSON_GRAMMAR, 4, 30, prev);
            for (int p = 0; p < N_PATTERNS; p++) masks_match_brute_force(models[i], PATTERNS[p].gbnf, 4, 16, prev);
            masks_match_brute_force(models[i], UNICODE_GRAMMAR, 3, 12, prev);
        }
    }
}

static void test_masks_large_vocabularies(void **state) {
    (void)state;
    const char *tokenizers[3] = {"models/llama2-tokenizer/tokenizer.bin", "models/tokenizers/llama3/tokenizer.json",
                                 "models/tokenizers/qwen3/tokenizer.json"};
    for (int i = 0; i < 3; i++) {
        kite_model *m = open_model(NULL, kite_test_data(tokenizers[i]), true);
        assert_non_null(m);
        int32_t bos = kite_tokenizer_bos(m->tokenizer);
        masks_match_brute_force(m, JSON_GRAMMAR, 2, 8, bos);
        masks_match_brute_force(m, PERSON_GRAMMAR, 1, 10, 1000);
        masks_match_brute_force(m, PATTERNS[0].gbnf, 1, 6, 1000);
        masks_match_brute_force(m, UNICODE_GRAMMAR, 1, 6, 1000);
        kite_model_free(m);
    }
    /* The padded rows of the Qwen model (embedding rows past the tokenizer's) are never allowed. */
    masks_match_brute_force(g_qwen, PERSON_GRAMMAR, 1, 6, 1000);
}

/* ---- generated text conforms ----------------------------------------------------------------------------- */

typedef struct run_log {
    char text[8192];
    size_t n_text;
    int32_t ids[1024];
    int n;
    int status;
    char err[512];
    kite_finish_reason finish;
    kite_session *session;
    bool logprobs;
    kite_logprobs first_lp;
} run_log;

static bool collect(int32_t id, const char *text, size_t len, void *user) {
    run_log *r = user;
    if (r->logprobs && r->n == 0) assert_int_equal(kite_session_token_logprobs(r->session, &r->first_lp), KITE_OK);
    if (r->n < 1024) r->ids[r->n] = id;
    r->n++;
    assert_true(r->n_text + len < sizeof r->text);
    memcpy(r->text + r->n_text, text, len);
    r->n_text += len;
    return true;
}

static const kite_spec_params *g_spec; /* speculative decoding for run(), or NULL */

static void run(kite_model *m, const int32_t *prompt, size_t n_prompt, const kite_gen_params *gp, run_log *r) {
    memset(r, 0, sizeof *r);
    char err[512];
    kite_session_params sp = kite_session_default_params();
    sp.n_ctx = 512;
    kite_session *s = NULL;
    assert_int_equal(kite_session_open(&s, m, &sp, err, sizeof err), KITE_OK);
    if (g_spec) assert_int_equal(kite_session_set_spec(s, g_spec, err, sizeof err), KITE_OK);
    r->session = s;
    r->logprobs = gp->logprobs;
    assert_int_equal(kite_prompt(s, prompt, n_prompt, err, sizeof err), KITE_OK);
    r->status = kite_generate(s, gp, collect, r, r->err, sizeof r->err);
    r->finish = kite_session_finish_reason(s);
    kite_session_free(s);
}

static size_t encode(kite_model *m, const char *text, int32_t *ids, size_t cap) {
    size_t n = 0;
    char err[256];
    assert_int_equal(kite_tokenize(m, text, strlen(text), true, false, ids, cap, &n, err, sizeof err), KITE_OK);
    return n;
}

/* The text's state in a fresh matcher: >= 0 when it is a prefix of a sentence; accepting when whole. */
static int32_t text_state(const kite_grammar *g, const char *text, size_t n, bool *accepting) {
    kite_gmatch *m = NULL;
    kite_error e = {0};
    assert_int_equal(kite_gmatch_new(g->gbnf, &m, &e), KITE_OK);
    int32_t s = kite_gmatch_step_bytes(m, kite_gmatch_start(m), (const uint8_t *)text, n);
    *accepting = s >= 0 && kite_gmatch_accepting(m, s);
    kite_gmatch_free(m);
    return s;
}

typedef bool (*check_fn)(const void *arg, const char *text, size_t len);
static bool check_json(const void *arg, const char *text, size_t len) { (void)arg; return json_parses(text, len); }
static bool check_pattern(const void *arg, const char *text, size_t len) { return full_match(arg, text, len); }

/* seeds runs at T = 1: every complete text passes check, every cut one is a prefix the matcher
 * accepts; at least min_complete end by the grammar (or an end token where it is complete). */
static void conforms(kite_model *m, const char *prompt, const char *gbnf, check_fn check, const void *arg, int seeds,
                     int32_t max_tokens, int min_complete) {
    kite_grammar *g = open_grammar(m, gbnf);
    int32_t ids[64];
    size_t n = encode(m, prompt, ids, 64);
    int complete = 0;
    for (int seed = 0; seed < seeds; seed++) {
        kite_gen_params gp = kite_gen_default_params();
        gp.temperature = 1.0f;
        gp.top_k = 0, gp.top_p = 1.0f, gp.min_p = 0.0f;
        gp.seed = 100 + (uint64_t)seed;
        gp.max_tokens = max_tokens;
        gp.grammar = g;
        run_log r;
        run(m, ids, n, &gp, &r);
        if (r.status) fail_msg("seed %d: status %d: %s (after %.*s)", seed, r.status, r.err, (int)r.n_text, r.text);
        bool accepting = false;
        int32_t st = text_state(g, r.text, r.n_text, &accepting);
        if (st < 0) fail_msg("seed %d: the matcher refuses the output %.*s", seed, (int)r.n_text, r.text);
        if (r.finish == KITE_FINISH_STOP) {
            if (!accepting) fail_msg("seed %d: finished but incomplete: %.*s", seed, (int)r.n_text, r.text);
            if (!check(arg, r.text, r.n_text)) fail_msg("seed %d: the independent check refuses %.*s", seed, (int)r.n_text, r.text);
            complete++;
        } else {
            assert_int_equal(r.finish, KITE_FINISH_LENGTH);
            assert_int_equal(r.n, max_tokens);
        }
    }
    if (complete < min_complete) fail_msg("only %d of %d runs complete for %s", complete, seeds, gbnf);
    kite_grammar_free(g);
}

/* Token references by id and by text (llama.cpp's <[id]> and <|im_start|>): a control token (Qwen3's
 * <|im_start|>, never allowed as text), an added text token (<tool_call>) and an end token (<|im_end|>)
 * where the grammar names them, against the brute force; generation writes them; an unknown token
 * text is refused naming its offset. Ids from Qwen3's tokenizer.json. */
static const char TOKEN_REF_GRAMMAR[] = "root ::= ( [a-z]{1,3} | <|im_start|> | <tool_call> | <[151658]> )+ <|im_end|>\n";

static void test_token_references(void **state) {
    (void)state;
    masks_match_brute_force(g_qwen, TOKEN_REF_GRAMMAR, 3, 8, 1000);
    kite_grammar *g = open_grammar(g_qwen, "root ::= \"hi\" <|im_start|> <tool_call> \"ok\" <[151658]>\n");
    kite_gmask *gm = NULL;
    kite_error e = {0};
    assert_int_equal(kite_gmask_new(g->gbnf, g->vocab, g_qwen->tokenizer, true, 0, &gm, &e), KITE_OK);
    int32_t st = kite_gmatch_step_bytes(kite_gmask_matcher(gm), kite_gmask_start(gm), (const uint8_t *)"hi", 2);
    int32_t n_allowed = 0;
    const uint64_t *bits = kite_gmask_allowed(gm, st, 1000, &n_allowed, &e);
    assert_non_null(bits);
    assert_int_equal(n_allowed, 1);
    assert_true(kite_gmask_bit(bits, 151644));
    /* forced drafts write the referenced token itself */
    int32_t ids[4];
    assert_int_equal(kite_gmask_forced_tokens(gm, st, 1000, ids, 4), 1);
    assert_int_equal(ids[0], 151644);
    kite_gmask_free(gm);
    /* generation at T = 1 writes exactly the grammar's tokens */
    int32_t prompt[64];
    size_t n_prompt = encode(g_qwen, "hello", prompt, 64);
    for (uint64_t seed = 1; seed <= 3; seed++) {
        kite_gen_params gp = kite_gen_default_params();
        gp.temperature = 1.0f, gp.seed = seed, gp.max_tokens = 40, gp.grammar = g;
        run_log r;
        run(g_qwen, prompt, n_prompt, &gp, &r);
        assert_int_equal(r.status, KITE_OK);
        assert_int_equal(r.finish, KITE_FINISH_STOP);
        int found = 0;
        for (int i = 0; i < r.n; i++) found += r.ids[i] == 151644 || r.ids[i] == 151657 || r.ids[i] == 151658;
        assert_int_equal(found, 3);
    }
    kite_grammar_free(g);
    char err[512];
    kite_grammar *bad = NULL;
    static const char unknown[] = "root ::= \"a\" <|no_such_token|>\n";
    assert_int_not_equal(kite_grammar_open(&bad, g_qwen, KITE_GRAMMAR_GBNF, unknown, strlen(unknown), err, sizeof err), KITE_OK);
    assert_non_null(strstr(err, "<|no_such_token|> at byte 13 is not a token of this model's vocabulary"));
}

static void test_outputs_conform_stories(void **state) {
    (void)state;
    conforms(g_stories, "Once upon a time", SHALLOW_JSON_GRAMMAR, check_json, NULL, 12, 300, 8);
    conforms(g_stories, "Once upon a time", JSON_GRAMMAR, check_json, NULL, 8, 200, 1);
    conforms(g_stories, "Once upon a time", PERSON_GRAMMAR, check_json, NULL, 12, 200, 10);
    for (int p = 0; p < N_PATTERNS; p++)
        conforms(g_stories, "Once upon a time", PATTERNS[p].gbnf, check_pattern, PATTERNS[p].regex, 12, 120, 8);
    /* TinyStories-656K has no '{' and no '@': patterns without them (the missing bytes have their own test). */
    for (int p = 1; p < N_PATTERNS; p++)
        conforms(g_656k, "Tom and his dog", PATTERNS[p].gbnf, check_pattern, PATTERNS[p].regex, 12, 120, 8);
}

static void test_outputs_conform_qwen(void **state) {
    (void)state;
    conforms(g_qwen, "hello", PERSON_GRAMMAR, check_json, NULL, 6, 200, 5);
    conforms(g_qwen, "hello", SHALLOW_JSON_GRAMMAR, check_json, NULL, 6, 300, 4);
    for (int p = 0; p < N_PATTERNS; p++) conforms(g_qwen, "hello", PATTERNS[p].gbnf, check_pattern, PATTERNS[p].regex, 4, 100, 3);
    conforms(g_qwen, "hello", UNICODE_GRAMMAR, check_pattern, "[\\x{3B1}-\\x{3C9}\\x{4E00}-\\x{4E2F}\\x{1F600}-\\x{1F64F} ]{1,30}!", 4,
             100, 3);
}

/* Rejection verification (exact in distribution only, so not compared token for token): the grammar
 * still holds at every node, through the accept test and the residual sample. */
static void test_rejection_conforms(void **state) {
    (void)state;
    kite_spec_params sp = kite_spec_default_params();
    sp.verify = KITE_VERIFY_REJECTION;
    sp.budget = 4;
    for (int d = 0; d < 2; d++) {
        sp.drafter = d == 0 ? KITE_DRAFT_NGRAM : KITE_DRAFT_MODEL;
        sp.draft_model = g_stories; /* drafting for itself: q = p, most drafts accepted */
        sp.no_forced_drafts = d == 1;
        g_spec = &sp;
        conforms(g_stories, "Once upon a time", PERSON_GRAMMAR, check_json, NULL, 6, 200, 5);
        conforms(g_stories, "Once upon a time", PATTERNS[1].gbnf, check_pattern, PATTERNS[1].regex, 6, 100, 5);
        g_spec = NULL;
    }
}

/* ---- schemas, regexes and json_object through kite_grammar_open ------------------------------------------- */

static const char PERSON_SCHEMA[] =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":12},"
    "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":120},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"red\",\"green\",\"blue\"]},\"maxItems\":3}},"
    "\"required\":[\"name\",\"age\",\"tags\"],\"additionalProperties\":false}";

/* The schema checked by hand with jansson (an independent reading of the same constraints). */
static bool check_person(const void *arg, const char *text, size_t len) {
    (void)arg;
    json_error_t je;
    json_t *v = json_loadb(text, len, 0, &je);
    if (!v) return false;
    json_t *name = json_object_get(v, "name"), *age = json_object_get(v, "age"), *tags = json_object_get(v, "tags");
    bool ok = json_is_object(v) && json_object_size(v) == 3 && json_is_string(name) && json_is_integer(age) &&
              json_integer_value(age) >= 0 && json_integer_value(age) <= 120 && json_is_array(tags) && json_array_size(tags) <= 3;
    /* maxLength counts code points */
    if (ok) {
        size_t points = 0;
        for (const unsigned char *c = (const unsigned char *)json_string_value(name); *c; c++) points += (*c & 0xC0) != 0x80;
        ok = points <= 12;
    }
    for (size_t i = 0; ok && i < json_array_size(tags); i++) {
        const char *t = json_string_value(json_array_get(tags, i));
        ok = t && (!strcmp(t, "red") || !strcmp(t, "green") || !strcmp(t, "blue"));
    }
    json_decref(v);
    return ok;
}

/* conforms() for a grammar of another kind. */
static void conforms_kind(kite_model *m, kite_grammar_kind kind, const char *text, check_fn check, const void *arg, int seeds,
                          int32_t max_tokens, int min_complete) {
    char err[512], *gbnf = NULL;
    size_t len = 0;
    if (kite_grammar_to_gbnf(kind, text, strlen(text), &gbnf, &len, err, sizeof err)) fail_msg("to_gbnf: %s", err);
    /* kite_grammar_open of the kind must be the grammar of its GBNF: same tokens for the same seed */
    kite_grammar *direct = NULL;
    if (kite_grammar_open(&direct, m, kind, text, strlen(text), err, sizeof err)) fail_msg("grammar_open: %s", err);
    int32_t ids[64];
    size_t n = encode(m, "hello", ids, 64);
    kite_gen_params gp = kite_gen_default_params();
    gp.temperature = 1.0f, gp.top_k = 0, gp.top_p = 1.0f, gp.min_p = 0.0f, gp.seed = 3, gp.max_tokens = 60;
    gp.grammar = direct;
    run_log a, b;
    run(m, ids, n, &gp, &a);
    kite_grammar *via_text = open_grammar(m, gbnf);
    gp.grammar = via_text;
    run(m, ids, n, &gp, &b);
    assert_int_equal(a.n, b.n);
    assert_memory_equal(a.ids, b.ids, sizeof(int32_t) * (size_t)(a.n < 1024 ? a.n : 1024));
    kite_grammar_free(via_text);
    kite_grammar_free(direct);
    conforms(m, "hello", gbnf, check, arg, seeds, max_tokens, min_complete);
    kite_free(gbnf);
}

static void test_grammar_kinds(void **state) {
    (void)state;
    conforms_kind(g_qwen, KITE_GRAMMAR_JSON_SCHEMA, PERSON_SCHEMA, check_person, NULL, 6, 200, 5);
    conforms_kind(g_stories, KITE_GRAMMAR_JSON_SCHEMA, PERSON_SCHEMA, check_person, NULL, 8, 200, 6);
    /* Unbounded strings and nesting seldom close at T = 1 within the budget: the texts are checked as
     * prefixes the matcher accepts, and against the same grammar opened as GBNF text. */
    conforms_kind(g_stories, KITE_GRAMMAR_JSON, "", check_json, NULL, 4, 150, 0);
    for (int p = 0; p < N_PATTERNS; p++) {
        conforms_kind(g_qwen, KITE_GRAMMAR_REGEX, PATTERNS[p].regex, check_pattern, PATTERNS[p].regex, 3, 100, 2);
        conforms_kind(g_stories, KITE_GRAMMAR_REGEX, PATTERNS[p].regex, check_pattern, PATTERNS[p].regex, 4, 100, 3);
    }
    /* A bad schema and a bad regex: the compilers' messages come through. */
    char err[512];
    kite_grammar *g = NULL;
    const char *bad_schema = "{\"type\":\"integer\",\"minimum\":5,\"maximum\":1}";
    assert_int_not_equal(kite_grammar_open(&g, g_qwen, KITE_GRAMMAR_JSON_SCHEMA, bad_schema, strlen(bad_schema), err, sizeof err),
                         KITE_OK);
    assert_null(g);
    assert_non_null(strstr(err, "/m"));
    assert_int_not_equal(kite_grammar_open(&g, g_qwen, KITE_GRAMMAR_REGEX, "a(b", 3, err, sizeof err), KITE_OK);
    assert_null(g);
}

/* ---- how generation ends ---------------------------------------------------------------------------------- */

static void test_endings(void **state) {
    (void)state;
    int32_t ids[64];
    size_t n = encode(g_stories, "Once upon a time", ids, 64);
    kite_grammar *g = open_grammar(g_stories, PERSON_GRAMMAR);
    kite_gen_params gp = kite_gen_default_params();
    gp.temperature = 0.8f;
    gp.seed = 5;
    gp.max_tokens = 300;
    gp.grammar = g;
    /* Without end tokens the grammar's own end stops generation: '}' admits no further byte. */
    gp.ignore_eos = true;
    run_log r, cut;
    run(g_stories, ids, n, &gp, &r);
    assert_int_equal(r.status, KITE_OK);
    assert_int_equal(r.finish, KITE_FINISH_STOP);
    assert_true(r.n_text > 0 && r.text[r.n_text - 1] == '}');
    assert_true(json_parses(r.text, r.n_text));
    for (int i = 0; i < r.n && i < 1024; i++) assert_false(kite_tokenizer_is_eog(g_stories->tokenizer, r.ids[i]));
    /* max_tokens still cuts: the same tokens, fewer of them */
    gp.max_tokens = r.n / 2;
    run(g_stories, ids, n, &gp, &cut);
    assert_int_equal(cut.finish, KITE_FINISH_LENGTH);
    assert_int_equal(cut.n, r.n / 2);
    assert_memory_equal(cut.ids, r.ids, sizeof(int32_t) * (size_t)cut.n);
    /* a stop string still applies, and what it ends is not delivered */
    const char *stop[1] = {"\"age\""};
    gp.max_tokens = 300;
    gp.stop = stop;
    gp.n_stop = 1;
    run(g_stories, ids, n, &gp, &cut);
    assert_int_equal(cut.finish, KITE_FINISH_STOP);
    const char *at = memmem(r.text, r.n_text, "\"age\"", 5);
    assert_non_null(at);
    assert_int_equal(cut.n_text, (size_t)(at - r.text));
    assert_memory_equal(cut.text, r.text, cut.n_text);
    kite_grammar_free(g);

    /* A grammar of one sentence: the text is exactly it, whichever tokens spell it. */
    g = open_grammar(g_stories, "root ::= \"The end.\"\n");
    gp = kite_gen_default_params();
    gp.grammar = g;
    gp.temperature = 1.0f;
    gp.max_tokens = 50;
    for (uint64_t seed = 0; seed < 5; seed++) {
        gp.seed = seed;
        run(g_stories, ids, n, &gp, &r);
        assert_int_equal(r.finish, KITE_FINISH_STOP);
        assert_int_equal(r.n_text, 8);
        assert_memory_equal(r.text, "The end.", 8);
    }
    kite_grammar_free(g);
}

static void test_vocabulary_lacks_bytes(void **state) {
    (void)state;
    int32_t ids[64];
    size_t n = encode(g_656k, "Tom and his dog", ids, 64);
    kite_gen_params gp = kite_gen_default_params();
    gp.max_tokens = 50;
    /* TinyStories-656K's vocabulary has no '{' at all: refused before any token. */
    kite_grammar *g = open_grammar(g_656k, "root ::= \"{\" [a-z]+ \"}\"\n");
    gp.grammar = g;
    run_log r;
    run(g_656k, ids, n, &gp, &r);
    assert_int_equal(r.status, KITE_ERR_UNSUPPORTED);
    assert_int_equal(r.n, 0);
    assert_non_null(strstr(r.err, "no token of the vocabulary"));
    kite_grammar_free(g);
    /* ... and mid-text: "Tom" can be written, the '{' after it cannot. */
    g = open_grammar(g_656k, "root ::= \"Tom\" \"{\"\n");
    gp.grammar = g;
    run(g_656k, ids, n, &gp, &r);
    assert_int_equal(r.status, KITE_ERR_UNSUPPORTED);
    assert_int_equal(r.finish, KITE_FINISH_ERROR);
    assert_true(r.n >= 1);
    assert_int_equal(r.n_text, 3);
    assert_memory_equal(r.text, "Tom", 3);
    assert_non_null(strstr(r.err, "no token of the vocabulary continues"));
    kite_grammar_free(g);
}

/* Log-probabilities are the raw logits': the first token's alternatives are those of a free run. */
static void test_logprobs_raw(void **state) {
    (void)state;
    int32_t ids[64];
    size_t n = encode(g_stories, "Once upon a time", ids, 64);
    kite_grammar *g = open_grammar(g_stories, PATTERNS[0].gbnf);
    kite_gen_params gp = kite_gen_default_params();
    gp.temperature = 0;
    gp.max_tokens = 3;
    gp.logprobs = true;
    gp.top_logprobs = 10;
    run_log free_run, constrained;
    run(g_stories, ids, n, &gp, &free_run);
    gp.grammar = g;
    run(g_stories, ids, n, &gp, &constrained);
    assert_int_equal(constrained.first_lp.n_top, 10);
    assert_memory_equal(constrained.first_lp.top, free_run.first_lp.top, sizeof free_run.first_lp.top);
    /* the constrained token is a lowercase letter run, so not the free argmax " " + word */
    assert_true(constrained.text[0] >= 'a' && constrained.text[0] <= 'z');
    kite_grammar_free(g);
}

static void test_bad_input(void **state) {
    (void)state;
    char err[512];
    kite_grammar *g = NULL;
    const char *bad = "root ::= \"a\" undefined_rule\n";
    assert_int_not_equal(kite_grammar_open(&g, g_stories, KITE_GRAMMAR_GBNF, bad, strlen(bad), err, sizeof err), KITE_OK);
    assert_null(g);
    assert_non_null(strstr(err, "1:"));
    assert_int_equal(kite_grammar_open(NULL, g_stories, KITE_GRAMMAR_GBNF, "", 0, err, sizeof err), KITE_ERR_INVALID_ARG);
    assert_int_equal(kite_grammar_open(&g, g_stories, (kite_grammar_kind)99, "x", 1, err, sizeof err), KITE_ERR_INVALID_ARG);
    /* A grammar of another model is refused at generation (its vocabulary may differ). */
    g = open_grammar(g_656k, PATTERNS[0].gbnf);
    int32_t ids[64];
    size_t n = encode(g_stories, "Once upon a time", ids, 64);
    kite_gen_params gp = kite_gen_default_params();
    gp.grammar = g;
    run_log r;
    run(g_stories, ids, n, &gp, &r);
    assert_int_equal(r.status, KITE_ERR_INVALID_ARG);
    assert_non_null(strstr(r.err, "another model"));
    kite_grammar_free(g);
    kite_grammar_free(NULL);
    /* The GBNF of a GBNF grammar is itself, checked. */
    char *text = NULL;
    size_t len = 0;
    assert_int_equal(kite_grammar_to_gbnf(KITE_GRAMMAR_GBNF, PATTERNS[0].gbnf, strlen(PATTERNS[0].gbnf), &text, &len, err, sizeof err),
                     KITE_OK);
    assert_int_equal(len, strlen(PATTERNS[0].gbnf));
    assert_string_equal(text, PATTERNS[0].gbnf);
    kite_free(text);
    assert_int_not_equal(kite_grammar_to_gbnf(KITE_GRAMMAR_GBNF, bad, strlen(bad), &text, &len, err, sizeof err), KITE_OK);
    assert_null(text);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_masks_small_vocabularies),
        cmocka_unit_test(test_masks_large_vocabularies),
        cmocka_unit_test(test_token_references),
        cmocka_unit_test(test_outputs_conform_stories),
        cmocka_unit_test(test_outputs_conform_qwen),
        cmocka_unit_test(test_rejection_conforms),
        cmocka_unit_test(test_grammar_kinds),
        cmocka_unit_test(test_endings),
        cmocka_unit_test(test_vocabulary_lacks_bytes),
        cmocka_unit_test(test_logprobs_raw),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
