/* Golden tests: kite's logits, teacher-forced along the float64 reference continuations of
 * ../shared/models/reference_greedy.json, pick the reference token at every step, up to the first
 * step where kite's own top-1/top-2 margin is within the engine's arithmetic error of a tie:
 *   - float weights (activations stay f32): 1e-3, a near-tie an fp32 engine may break either way;
 *   - quantized weights, whose kernels round activations to int8 per block of 32 as llama.cpp's do
 *     (|x - d q| <= d / 2): 0.15 logits on these models. At the one step where this happens
 *     (TinyStories-656K Q8_0, "Tom and his dog...", step 7: 1030 over 761), llama.cpp picks the same
 *     token as kite (p 0.0824 against 0.0752 through node-llama-cpp 3.21.1).
 * Every case runs twice: with the f32 KV cache and with the default f16 one (whose rounding, 2^-11
 * relative per element, moves these logits by under 1e-3: the same margins hold).
 * Also checks that kite tokenizes each prompt to the reference prompt ids. */
#include <jansson.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kite.h"
#include "test_util.h"

static const double FLOAT_TIE_MARGIN = 1e-3;
static const double INT8_ACTIVATION_TIE_MARGIN = 0.15;

/* Whether the model's matrices are quantized (so its kernels quantize activations to int8). */
static bool int8_activations(const kite_model *m) {
    kite_model_info info;
    kite_model_get_info(m, &info);
    for (int32_t i = 0; i < info.n_tensors; i++) {
        kite_tensor_desc d;
        if (kite_model_tensor(m, i, &d) == KITE_OK && !strcmp(d.name, "blk.0.attn_q.weight"))
            return d.type_name[0] == 'q';
    }
    return false;
}

static void check_case(json_t *c, int index) {
    const char *model_rel = json_string_value(json_object_get(c, "model"));
    const char *tok_rel = json_string_value(json_object_get(c, "tokenizer"));
    const char *prompt = json_string_value(json_object_get(c, "prompt"));
    json_t *pids = json_object_get(c, "prompt_ids"), *gids = json_object_get(c, "greedy_ids");
    assert_non_null(model_rel);
    assert_non_null(prompt);
    char model_path[4096], tok_path[4096];
    snprintf(model_path, sizeof model_path, "%s/models/%s", kite_test_data(""), model_rel);
    kite_model_params mp = kite_model_default_params();
    mp.n_threads = 2;
    /* llama2.c checkpoints need their tokenizer; the others carry one. */
    if (tok_rel && strstr(model_rel, ".bin")) {
        snprintf(tok_path, sizeof tok_path, "%s/models/%s", kite_test_data(""), tok_rel);
        mp.tokenizer_path = tok_path;
    }
    char err[512];
    kite_model *m = NULL;
    if (kite_model_open(&m, model_path, &mp, err, sizeof err)) fail_msg("case %d: %s: %s", index, model_path, err);
    kite_model_info info;
    kite_model_get_info(m, &info);

    size_t n_prompt = json_array_size(pids), n_gen = json_array_size(gids);
    int32_t *seq = calloc(n_prompt + n_gen, sizeof *seq);
    for (size_t i = 0; i < n_prompt; i++) seq[i] = (int32_t)json_integer_value(json_array_get(pids, i));
    for (size_t i = 0; i < n_gen; i++) seq[n_prompt + i] = (int32_t)json_integer_value(json_array_get(gids, i));

    /* Tokenizer: the prompt gives the reference prompt ids (BOS included). The reference ids come
     * from a merge-rank BPE, as the HF tokenizer.json does it; the Q8_0 GGUF of TinyStories-656K
     * carries a SentencePiece vocabulary with scores instead, which llama.cpp (and so kite) splits
     * differently ("went" -> "w" "ent"...): its tokenization is checked against llama.cpp in the
     * oracle test, and here the model is fed the reference ids, as shared/models/README.md says. */
    bool gguf_spm_656k = strstr(model_rel, "656k") && strstr(model_rel, ".gguf");
    int32_t ids[512];
    size_t n_ids = 0;
    assert_int_equal(kite_tokenize(m, prompt, strlen(prompt), true, false, ids, 512, &n_ids, err, sizeof err), KITE_OK);
    if (!gguf_spm_656k && (n_ids != n_prompt || memcmp(ids, seq, n_prompt * sizeof *seq) != 0)) {
        fprintf(stderr, "case %d (%s, '%s'): kite tokenized to", index, model_rel, prompt);
        for (size_t i = 0; i < n_ids; i++) fprintf(stderr, " %d", ids[i]);
        fprintf(stderr, "\n");
        fail_msg("prompt ids differ from the reference");
    }

    size_t total = n_prompt + n_gen;
    float *logits = malloc(sizeof(float) * (size_t)info.n_vocab * total);
    for (int cache = 0; cache < 2; cache++) {
        kite_session *s = NULL;
        kite_session_params sp = kite_session_default_params();
        sp.kv_type = cache == 0 ? KITE_KV_F32 : KITE_KV_F16;
        assert_int_equal(kite_session_open(&s, m, &sp, err, sizeof err), KITE_OK);
        assert_int_equal(kite_eval(s, seq, total, logits, err, sizeof err), KITE_OK);
        size_t matched = 0, near_ties = 0;
        for (size_t step = 0; step < n_gen; step++) {
            const float *row = logits + (size_t)info.n_vocab * (n_prompt - 1 + step);
            int32_t best = 0, second = -1;
            for (int32_t t = 1; t < info.n_vocab; t++) {
                if (row[t] > row[best]) { second = best; best = t; }
                else if (second < 0 || row[t] > row[second]) second = t;
            }
            double margin = (double)row[best] - (double)row[second];
            if (best != seq[n_prompt + step]) {
                if (margin < (int8_activations(m) ? INT8_ACTIVATION_TIE_MARGIN : FLOAT_TIE_MARGIN)) { near_ties++; continue; }
                fail_msg("case %d (%s, '%s', %s cache): step %zu: kite picks %d (margin %.5f), reference %d", index, model_rel,
                         prompt, cache == 0 ? "f32" : "f16", step, best, margin, seq[n_prompt + step]);
            }
            matched++;
        }
        fprintf(stderr, "case %2d %s %-45s %-34s %zu/%zu tokens match, %zu near-ties\n", index, cache == 0 ? "f32" : "f16",
                model_rel, prompt, matched, n_gen, near_ties);
        assert_true(near_ties <= 3);
        kite_session_free(s);
    }
    free(logits);
    free(seq);
    kite_model_free(m);
}

static void test_reference_greedy(void **state) {
    (void)state;
    json_error_t jerr;
    json_t *root = json_load_file(kite_test_data("models/reference_greedy.json"), 0, &jerr);
    if (!root) fail_msg("cannot read reference_greedy.json: %s", jerr.text);
    json_t *cases = json_object_get(root, "cases");
    assert_true(json_array_size(cases) >= 19);
    for (size_t i = 0; i < json_array_size(cases); i++) check_case(json_array_get(cases, i), (int)i);
    json_decref(root);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_reference_greedy)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
