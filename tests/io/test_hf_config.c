/* config.json / generation_config.json parsing, HF tensor-name translation. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "io/hf_config.h"
#include "io/mmap.h"
#include "test_util.h"

static int parse(const char *json, kite_hparams *hp, int32_t *bos, int32_t *eos, kite_error *e) {
    memset(e, 0, sizeof *e);
    return kite_hf_parse_config(json, strlen(json), "config.json", hp, bos, eos, e);
}

static void expect_fail(const char *json, int status, const char *needle) {
    kite_hparams hp;
    int32_t bos, eos;
    kite_error e;
    int rc = parse(json, &hp, &bos, &eos, &e);
    if (rc != status || !strstr(e.msg, needle)) {
        print_error("config %s: status %d (want %d), message '%s' (want '%s')\n", json, rc, status, e.msg, needle);
        fail();
    }
}

static void test_real_tinystories(void **state) {
    (void)state;
    char *text;
    size_t len;
    kite_error e = {0};
    const char *path = kite_test_data("models/tinystories-656k/config.json");
    assert_int_equal(kite_read_file(path, &text, &len, 1 << 20, &e), KITE_OK);
    kite_hparams hp;
    int32_t bos, eos;
    assert_int_equal(kite_hf_parse_config(text, len, path, &hp, &bos, &eos, &e), KITE_OK);
    free(text);
    /* values from shared/models/README.md */
    assert_int_equal(hp.arch, KITE_ARCH_LLAMA);
    assert_int_equal(hp.dim, 128);
    assert_int_equal(hp.ffn_dim, 384);
    assert_int_equal(hp.n_layers, 2);
    assert_int_equal(hp.n_heads, 8);
    assert_int_equal(hp.n_kv_heads, 4);
    assert_int_equal(hp.head_dim, 16);
    assert_int_equal(hp.n_vocab, 2048);
    assert_int_equal(hp.n_ctx_train, 512);
    assert_float_equal(hp.rms_eps, 1e-6f, 1e-12f);
    assert_float_equal(hp.rope_theta, 10000.0f, 0.0f);
    assert_int_equal(hp.rope_layout, KITE_ROPE_HALF);
    assert_int_equal(hp.rope_scaling, KITE_ROPE_SCALING_NONE);
    assert_true(hp.tied_embeddings);
    assert_int_equal(bos, 1);
    assert_int_equal(eos, 2);

    path = kite_test_data("models/tinystories-656k/generation_config.json");
    assert_int_equal(kite_read_file(path, &text, &len, 1 << 20, &e), KITE_OK);
    kite_gen_params p = {.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .repeat_penalty = 1.0f};
    bos = eos = -7;
    assert_int_equal(kite_hf_parse_generation_config(text, len, path, &p, &bos, &eos, &e), KITE_OK);
    free(text);
    /* no sampling fields there: everything kept */
    assert_float_equal(p.temperature, 0.8f, 0.0f);
    assert_int_equal(p.top_k, 40);
    assert_int_equal(bos, 1);
    assert_int_equal(eos, 2);
}

/* Qwen3-0.6B's config (abridged, values as published): explicit head_dim, tied, eps 1e-6, theta 1e6. */
static const char *qwen3_config =
    "{\"architectures\":[\"Qwen3ForCausalLM\"],\"attention_bias\":false,\"bos_token_id\":151643,"
    "\"eos_token_id\":151645,\"head_dim\":128,\"hidden_act\":\"silu\",\"hidden_size\":1024,"
    "\"intermediate_size\":3072,\"max_position_embeddings\":40960,\"max_window_layers\":28,\"model_type\":\"qwen3\","
    "\"num_attention_heads\":16,\"num_hidden_layers\":28,\"num_key_value_heads\":8,\"rms_norm_eps\":1e-06,"
    "\"rope_scaling\":null,\"rope_theta\":1000000,\"sliding_window\":null,\"tie_word_embeddings\":true,"
    "\"torch_dtype\":\"bfloat16\",\"use_cache\":true,\"use_sliding_window\":false,\"vocab_size\":151936}";

static void test_qwen3(void **state) {
    (void)state;
    kite_hparams hp;
    int32_t bos, eos;
    kite_error e;
    assert_int_equal(parse(qwen3_config, &hp, &bos, &eos, &e), KITE_OK);
    assert_int_equal(hp.arch, KITE_ARCH_QWEN3);
    assert_int_equal(hp.head_dim, 128); /* not hidden/heads = 64 */
    assert_int_equal(hp.n_heads, 16);
    assert_int_equal(hp.n_kv_heads, 8);
    assert_int_equal(hp.n_layers, 28);
    assert_int_equal(hp.n_ctx_train, 40960);
    assert_float_equal(hp.rope_theta, 1e6f, 0.0f);
    assert_true(hp.tied_embeddings);
    assert_int_equal(bos, 151643);
    assert_int_equal(eos, 151645);
}

static void test_arch_and_defaults(void **state) {
    (void)state;
    kite_hparams hp;
    int32_t bos, eos;
    kite_error e;
    /* architectures only, defaults for everything optional */
    assert_int_equal(parse("{\"architectures\":[\"Qwen2ForCausalLM\"],\"hidden_size\":64,\"intermediate_size\":100,"
                           "\"num_hidden_layers\":3,\"num_attention_heads\":4,\"vocab_size\":300,"
                           "\"eos_token_id\":[7,8,9]}", &hp, &bos, &eos, &e), KITE_OK);
    assert_int_equal(hp.arch, KITE_ARCH_QWEN2);
    assert_int_equal(hp.n_kv_heads, 4);
    assert_int_equal(hp.head_dim, 16);
    assert_float_equal(hp.rope_theta, 10000.0f, 0.0f);
    assert_float_equal(hp.rms_eps, 1e-6f, 1e-12f);
    assert_int_equal(hp.n_ctx_train, 2048);
    assert_false(hp.tied_embeddings);
    assert_int_equal(bos, -1);
    assert_int_equal(eos, 7); /* a list: the first */

    expect_fail("{\"model_type\":\"gemma3\",\"hidden_size\":64}", KITE_ERR_UNSUPPORTED,
                "unsupported architecture 'gemma3' (model_type in config.json); kite runs llama, qwen2, qwen3, qwen3_moe, qwen3_5_text, gemma3_text");
    expect_fail("{\"architectures\":[\"MistralForCausalLM\"]}", KITE_ERR_UNSUPPORTED, "'MistralForCausalLM' (architectures");
    expect_fail("{\"hidden_size\":64}", KITE_ERR_FORMAT, "architecture");
    expect_fail("{\"model_type\":5}", KITE_ERR_FORMAT, "model_type");
    expect_fail("not json", KITE_ERR_FORMAT, "invalid JSON");
    expect_fail("[]", KITE_ERR_FORMAT, "not a JSON object");
    expect_fail("", KITE_ERR_FORMAT, "invalid JSON");
}

/* Gemma 3's text config: transformers' defaults, the periodic layer pattern from layer_types or
 * sliding_window_pattern, and the names of its norms. */
/* LiquidAI/LFM2-350M's config.json (its fields kite reads, as published) and the older full_attn_idxs form. */
static void test_lfm2(void **state) {
    (void)state;
    kite_hparams hp;
    int32_t bos, eos;
    kite_error e;
#define LFM2 "\"architectures\":[\"Lfm2ForCausalLM\"],\"model_type\":\"lfm2\",\"block_auto_adjust_ff_dim\":true," \
             "\"block_ff_dim\":6656,\"block_ffn_dim_multiplier\":1.0,\"block_multiple_of\":256," \
             "\"hidden_size\":1024,\"intermediate_size\":6656,\"max_position_embeddings\":128000," \
             "\"norm_eps\":1e-05,\"num_attention_heads\":16,\"num_hidden_layers\":16,\"num_key_value_heads\":8," \
             "\"rope_theta\":1000000.0,\"vocab_size\":65536,\"bos_token_id\":1,\"eos_token_id\":7"
#define LFM2_TYPES "\"layer_types\":[\"conv\",\"conv\",\"full_attention\",\"conv\",\"conv\",\"full_attention\",\"conv\"," \
                   "\"conv\",\"full_attention\",\"conv\",\"full_attention\",\"conv\",\"full_attention\",\"conv\"," \
                   "\"full_attention\",\"conv\"]"
    assert_int_equal(parse("{" LFM2 "," LFM2_TYPES ",\"conv_L_cache\":3,\"conv_bias\":false}", &hp, &bos, &eos, &e), KITE_OK);
    assert_int_equal(hp.arch, KITE_ARCH_LFM2);
    assert_int_equal(hp.ffn_dim, 4608); /* 256 * ceil(int(2 * 6656 / 3) / 256), llama.cpp's n_ff for LFM2-350M */
    assert_int_equal(hp.conv_taps, 3);
    assert_int_equal(hp.head_dim, 64);
    assert_int_equal(hp.n_kv_heads, 8);
    assert_float_equal(hp.rms_eps, 1e-5f, 0.0f);
    assert_true(hp.tied_embeddings);
    static const int attn[] = {2, 5, 8, 10, 12, 14};
    for (int l = 0, a = 0; l < 16; l++) {
        bool is_attn = a < 6 && attn[a] == l;
        a += is_attn;
        assert_int_equal(kite_layer_is_conv(&hp, l), !is_attn);
    }
    assert_int_equal(parse("{" LFM2 ",\"full_attn_idxs\":[2,5,8,10,12,14],\"tie_embedding\":false}", &hp, &bos, &eos, &e), KITE_OK);
    for (int l = 0, a = 0; l < 16; l++) {
        bool is_attn = a < 6 && attn[a] == l;
        a += is_attn;
        assert_int_equal(kite_layer_is_conv(&hp, l), !is_attn);
    }
    assert_false(hp.tied_embeddings);
    expect_fail("{" LFM2 "}", KITE_ERR_FORMAT, "layer_types");
    expect_fail("{" LFM2 "," LFM2_TYPES ",\"conv_bias\":true}", KITE_ERR_UNSUPPORTED, "conv_bias");
    expect_fail("{" LFM2 ",\"layer_types\":[\"conv\"]}", KITE_ERR_FORMAT, "layer_types");
    expect_fail("{" LFM2 ",\"full_attn_idxs\":[16]}", KITE_ERR_FORMAT, "full_attn_idxs");
    expect_fail("{" LFM2 "," LFM2_TYPES ",\"conv_L_cache\":40}", KITE_ERR_FORMAT, "conv_L_cache");
#undef LFM2
#undef LFM2_TYPES
    char out[96];
    static const char *const names[][2] = {
        {"model.layers.0.operator_norm.weight", "blk.0.attn_norm.weight"},
        {"model.layers.0.conv.in_proj.weight", "blk.0.shortconv.in_proj.weight"},
        {"model.layers.0.conv.conv.weight", "blk.0.shortconv.conv.weight"},
        {"model.layers.0.conv.out_proj.weight", "blk.0.shortconv.out_proj.weight"},
        {"model.layers.2.self_attn.q_proj.weight", "blk.2.attn_q.weight"},
        {"model.layers.2.self_attn.out_proj.weight", "blk.2.attn_output.weight"},
        {"model.layers.2.self_attn.q_layernorm.weight", "blk.2.attn_q_norm.weight"},
        {"model.layers.2.self_attn.k_layernorm.weight", "blk.2.attn_k_norm.weight"},
        {"model.layers.3.ffn_norm.weight", "blk.3.ffn_norm.weight"},
        {"model.layers.3.feed_forward.w1.weight", "blk.3.ffn_gate.weight"},
        {"model.layers.3.feed_forward.w3.weight", "blk.3.ffn_up.weight"},
        {"model.layers.3.feed_forward.w2.weight", "blk.3.ffn_down.weight"},
        {"model.embedding_norm.weight", "token_embd_norm.weight"},
        {"model.embed_tokens.weight", "token_embd.weight"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        assert_int_equal(kite_hf_canonical_name_arch(KITE_ARCH_LFM2, names[i][0], 16, out, sizeof out), 1);
        assert_string_equal(out, names[i][1]);
    }
    assert_int_equal(kite_hf_canonical_name_arch(KITE_ARCH_LFM2, "model.layers.0.conv.conv.bias", 16, out, sizeof out), -2);
    assert_int_equal(kite_hf_canonical_name_arch(KITE_ARCH_LFM2, "model.layers.16.conv.in_proj.weight", 16, out, sizeof out), -1);
    /* outside LFM2, embedding_norm is not a name kite knows */
    assert_int_equal(kite_hf_canonical_name_arch(KITE_ARCH_LLAMA, "model.embedding_norm.weight", 16, out, sizeof out), 0);
}

static void test_gemma3(void **state) {
    (void)state;
    kite_hparams hp;
    int32_t bos, eos;
    kite_error e;
#define G3 "\"model_type\":\"gemma3_text\",\"hidden_size\":64,\"intermediate_size\":100,\"num_hidden_layers\":6," \
           "\"num_attention_heads\":4,\"num_key_value_heads\":1,\"vocab_size\":300"
    assert_int_equal(parse("{" G3 "}", &hp, &bos, &eos, &e), KITE_OK);
    assert_int_equal(hp.arch, KITE_ARCH_GEMMA3);
    assert_int_equal(hp.head_dim, 256);          /* Gemma3TextConfig's default, not hidden / heads */
    assert_float_equal(hp.rope_theta, 1e6f, 0.0f);
    assert_true(hp.tied_embeddings);
    assert_int_equal(hp.ffn_act, KITE_FFN_GELU_TANH);
    assert_float_equal(hp.embd_scale, 8.0f, 1e-6f);
    assert_float_equal(hp.attn_scale, 1.0f / 16.0f, 1e-7f); /* query_pre_attn_scalar 256 */
    assert_float_equal(hp.norm_weight_offset, 1.0f, 0.0f);
    assert_int_equal(hp.sliding_window, 4096);
    assert_int_equal(hp.swa_period, 6);
    assert_float_equal(hp.rope_theta_local, 10000.0f, 0.0f);
    assert_float_equal(hp.final_logit_softcap, 0.0f, 0.0f);
    for (int l = 0; l < 6; l++) assert_int_equal(kite_layer_is_local(&hp, l), l != 5);
    assert_int_equal(parse("{" G3 ",\"head_dim\":16,\"query_pre_attn_scalar\":64,\"sliding_window\":32,"
                           "\"rope_local_base_freq\":5000,\"final_logit_softcapping\":30.0,\"tie_word_embeddings\":false,"
                           "\"layer_types\":[\"sliding_attention\",\"full_attention\",\"sliding_attention\",\"full_attention\","
                           "\"sliding_attention\",\"full_attention\"]}", &hp, &bos, &eos, &e), KITE_OK);
    assert_int_equal(hp.head_dim, 16);
    assert_float_equal(hp.attn_scale, 0.125f, 1e-7f);
    assert_int_equal(hp.sliding_window, 32);
    assert_int_equal(hp.swa_period, 2);
    assert_float_equal(hp.rope_theta_local, 5000.0f, 0.0f);
    assert_float_equal(hp.final_logit_softcap, 30.0f, 0.0f);
    assert_false(hp.tied_embeddings);
    expect_fail("{" G3 ",\"layer_types\":[\"sliding_attention\",\"full_attention\",\"full_attention\",\"full_attention\","
                "\"sliding_attention\",\"full_attention\"]}", KITE_ERR_UNSUPPORTED, "layer_types[2] breaks the periodic pattern");
    expect_fail("{" G3 ",\"layer_types\":[\"sliding_attention\"]}", KITE_ERR_FORMAT, "list of 6 strings");
    expect_fail("{" G3 ",\"layer_types\":[1,2,3,4,5,6]}", KITE_ERR_FORMAT, "layer_types[0] is neither");
    expect_fail("{" G3 ",\"hidden_activation\":\"relu\"}", KITE_ERR_UNSUPPORTED, "hidden_activation 'relu'");
    expect_fail("{" G3 ",\"attn_logit_softcapping\":50.0}", KITE_ERR_UNSUPPORTED, "attn_logit_softcapping");
    expect_fail("{" G3 ",\"sliding_window\":0}", KITE_ERR_FORMAT, "sliding_window");
#undef G3
    char out[96];
    assert_int_equal(kite_hf_canonical_name_arch(KITE_ARCH_GEMMA3, "model.layers.2.post_attention_layernorm.weight", 6, out, sizeof out), 1);
    assert_string_equal(out, "blk.2.post_attention_norm.weight");
    assert_int_equal(kite_hf_canonical_name_arch(KITE_ARCH_GEMMA3, "model.layers.0.pre_feedforward_layernorm.weight", 6, out, sizeof out), 1);
    assert_string_equal(out, "blk.0.ffn_norm.weight");
    assert_int_equal(kite_hf_canonical_name_arch(KITE_ARCH_GEMMA3, "model.layers.5.post_feedforward_layernorm.weight", 6, out, sizeof out), 1);
    assert_string_equal(out, "blk.5.post_ffw_norm.weight");
    assert_int_equal(kite_hf_canonical_name_arch(KITE_ARCH_GEMMA3, "model.layers.6.post_feedforward_layernorm.weight", 6, out, sizeof out), -1);
    assert_int_equal(kite_hf_canonical_name_arch(KITE_ARCH_GEMMA3, "model.layers.1.self_attn.q_norm.weight", 6, out, sizeof out), 1);
    assert_string_equal(out, "blk.1.attn_q_norm.weight");
    /* Llama's post_attention_layernorm is the FFN's pre-norm */
    assert_int_equal(kite_hf_canonical_name_arch(KITE_ARCH_LLAMA, "model.layers.2.post_attention_layernorm.weight", 6, out, sizeof out), 1);
    assert_string_equal(out, "blk.2.ffn_norm.weight");
}

/* Qwen3-MoE: the expert keys (transformers' Qwen3MoeConfig defaults), refused variants, and the router and
 * expert names. */
/* Gemma 4 31B's text config (shape scaled down, keys and kinds as published): nested in text_config, the sliding
 * layers' head_dim / num_key_value_heads and the global ones' global_head_dim / num_global_key_value_heads,
 * proportional RoPE; the E2B/E4B and 26B-A4B features refused by name. */
#define G4T "\"model_type\":\"gemma4_text\",\"hidden_size\":64,\"intermediate_size\":100,\"num_hidden_layers\":6," \
            "\"num_attention_heads\":8,\"num_key_value_heads\":4,\"num_global_key_value_heads\":2,\"head_dim\":32," \
            "\"global_head_dim\":64,\"vocab_size\":300,\"sliding_window\":16,\"final_logit_softcapping\":30.0," \
            "\"attention_k_eq_v\":true,\"layer_types\":[\"sliding_attention\",\"sliding_attention\",\"sliding_attention\"," \
            "\"sliding_attention\",\"sliding_attention\",\"full_attention\"],\"rope_parameters\":{\"sliding_attention\":" \
            "{\"rope_type\":\"default\",\"rope_theta\":10000.0},\"full_attention\":{\"rope_type\":\"proportional\"," \
            "\"partial_rotary_factor\":0.25,\"rope_theta\":1000000.0}}"
static void test_gemma4(void **state) {
    (void)state;
    kite_hparams hp;
    int32_t bos, eos;
    kite_error e;
    assert_int_equal(parse("{\"architectures\":[\"Gemma4ForConditionalGeneration\"],\"model_type\":\"gemma4\",\"text_config\":{"
                           G4T "},\"vision_config\":{\"hidden_size\":32},\"bos_token_id\":2,\"eos_token_id\":1}",
                           &hp, &bos, &eos, &e), KITE_OK);
    assert_int_equal(hp.arch, KITE_ARCH_GEMMA4);
    assert_int_equal(hp.head_dim, 64);
    assert_int_equal(hp.n_kv_heads, 2);
    assert_int_equal(hp.head_dim_local, 32);
    assert_int_equal(hp.n_kv_heads_local, 4);
    assert_int_equal(hp.rope_dim_local, 32);
    assert_float_equal(hp.rope_theta, 1e6f, 0.0f);
    assert_float_equal(hp.rope_theta_local, 10000.0f, 0.0f);
    assert_float_equal(hp.rope_global_fraction, 0.25f, 0.0f);
    assert_float_equal(hp.attn_scale, 1.0f, 0.0f);
    assert_float_equal(hp.final_logit_softcap, 30.0f, 0.0f);
    assert_float_equal(hp.norm_weight_offset, 0.0f, 0.0f);
    assert_true(hp.v_norm);
    assert_true(hp.tied_embeddings);
    assert_int_equal(bos, 2);
    assert_int_equal(eos, 1);
    for (int l = 0; l < 6; l++) {
        assert_int_equal(kite_layer_is_local(&hp, l), l != 5);
        assert_int_equal(kite_layer_head_dim(&hp, l), l != 5 ? 32 : 64);
        assert_int_equal(kite_layer_kv_heads(&hp, l), l != 5 ? 4 : 2);
    }
    assert_int_equal(parse("{" G4T "}", &hp, &bos, &eos, &e), KITE_OK);
    assert_int_equal(hp.head_dim_local, 32);
    expect_fail("{" G4T ",\"num_kv_shared_layers\":2}", KITE_ERR_UNSUPPORTED, "KV sharing across layers");
    expect_fail("{" G4T ",\"hidden_size_per_layer_input\":256}", KITE_ERR_UNSUPPORTED, "per-layer embeddings");
    expect_fail("{" G4T ",\"enable_moe_block\":true}", KITE_ERR_UNSUPPORTED, "mixture of experts");
    expect_fail("{" G4T ",\"use_double_wide_mlp\":true}", KITE_ERR_UNSUPPORTED, "use_double_wide_mlp");
    char out[96];
    assert_int_equal(kite_hf_canonical_name_arch(KITE_ARCH_GEMMA4, "model.language_model.layers.3.layer_scalar", 6, out, sizeof out), 1);
    assert_string_equal(out, "blk.3.layer_output_scale.weight");
    assert_int_equal(kite_hf_canonical_name_arch(KITE_ARCH_GEMMA4, "model.language_model.embed_tokens.weight", 6, out, sizeof out), 1);
    assert_string_equal(out, "token_embd.weight");
    assert_int_equal(kite_hf_canonical_name_arch(KITE_ARCH_GEMMA4, "model.vision_tower.encoder.layers.0.mlp.fc1.weight", 6, out, sizeof out), 0);
}
#undef G4T

/* Muse Glimmer: the keys its converter reads (all required), per-layer pattern, RoPE only on sliding layers. */
static void test_muse_glimmer(void **state) {
    (void)state;
    kite_hparams hp;
    int32_t bos, eos;
    kite_error e;
#define MG "\"model_type\":\"muse_glimmer\",\"hidden_size\":64,\"intermediate_size\":100,\"num_hidden_layers\":4," \
           "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"head_dim\":32,\"vocab_size\":300,\"rope_theta\":50000.0," \
           "\"layer_types\":[\"sliding_attention\",\"sliding_attention\",\"sliding_attention\",\"full_attention\"]"
    assert_int_equal(parse("{" MG ",\"sliding_window\":8,\"final_logit_softcapping\":30.0,\"output_multiplier\":0.5,"
                           "\"qk_scale_factor\":1.6}", &hp, &bos, &eos, &e), KITE_OK);
    assert_int_equal(hp.arch, KITE_ARCH_MUSE_GLIMMER);
    assert_int_equal(hp.sliding_window, 8);
    assert_float_equal(hp.logit_scale, 0.5f, 0.0f);
    assert_float_equal(hp.qk_scale_factor, 1.6f, 1e-7f);
    assert_float_equal(hp.rope_theta_local, 50000.0f, 0.0f);
    assert_float_equal(hp.post_norm_eps, 1e-8f, 0.0f);
    assert_true(hp.rope_global_none && hp.embd_norm);
    for (int l = 0; l < 4; l++) assert_int_equal(kite_layer_rope_dim(&hp, l), l != 3 ? 32 : 0);
    expect_fail("{" MG ",\"sliding_window\":8,\"final_logit_softcapping\":30.0}", KITE_ERR_FORMAT, "output_multiplier");
    expect_fail("{" MG ",\"output_multiplier\":0.5,\"qk_scale_factor\":1.6}", KITE_ERR_FORMAT, "sliding_window");
#undef MG
    char out[96];
    assert_int_equal(kite_hf_canonical_name_arch(KITE_ARCH_MUSE_GLIMMER, "model.layers.1.self_attn.gate_proj.weight", 4, out, sizeof out), 1);
    assert_string_equal(out, "blk.1.attn_gate.weight");
}

static void test_qwen3moe(void **state) {
    (void)state;
    kite_hparams hp;
    int32_t bos, eos;
    kite_error e;
#define QM "\"model_type\":\"qwen3_moe\",\"hidden_size\":64,\"intermediate_size\":100,\"num_hidden_layers\":2," \
           "\"num_attention_heads\":4,\"vocab_size\":300"
    assert_int_equal(parse("{" QM ",\"num_experts\":8,\"num_experts_per_tok\":2,\"moe_intermediate_size\":32}", &hp, &bos, &eos, &e),
                     KITE_OK);
    assert_int_equal(hp.arch, KITE_ARCH_QWEN3MOE);
    assert_int_equal(hp.n_experts, 8);
    assert_int_equal(hp.n_experts_used, 2);
    assert_int_equal(hp.expert_ffn_dim, 32);
    assert_false(hp.expert_weights_norm); /* norm_topk_prob defaults to false */
    assert_int_equal(parse("{" QM ",\"num_experts\":8,\"num_experts_per_tok\":2,\"moe_intermediate_size\":32,\"norm_topk_prob\":true,"
                           "\"decoder_sparse_step\":1,\"mlp_only_layers\":[]}", &hp, &bos, &eos, &e), KITE_OK);
    assert_true(hp.expert_weights_norm);
    expect_fail("{" QM ",\"num_experts_per_tok\":2,\"moe_intermediate_size\":32}", KITE_ERR_FORMAT, "missing \"num_experts\"");
    expect_fail("{" QM ",\"num_experts\":8,\"num_experts_per_tok\":9,\"moe_intermediate_size\":32}", KITE_ERR_FORMAT,
                "num_experts_per_tok");
    expect_fail("{" QM ",\"num_experts\":8,\"num_experts_per_tok\":2,\"moe_intermediate_size\":32,\"mlp_only_layers\":[1]}",
                KITE_ERR_UNSUPPORTED, "dense layers");
    expect_fail("{" QM ",\"num_experts\":8,\"num_experts_per_tok\":2,\"moe_intermediate_size\":32,\"decoder_sparse_step\":2}",
                KITE_ERR_UNSUPPORTED, "dense layers");
    expect_fail("{" QM ",\"num_experts\":8,\"num_experts_per_tok\":2,\"moe_intermediate_size\":32,\"norm_topk_prob\":1}",
                KITE_ERR_FORMAT, "norm_topk_prob");
#undef QM
    char out[96];
    assert_int_equal(kite_hf_canonical_name_arch(KITE_ARCH_QWEN3MOE, "model.layers.1.mlp.gate.weight", 2, out, sizeof out), 1);
    assert_string_equal(out, "blk.1.ffn_gate_inp.weight");
    assert_int_equal(kite_hf_canonical_name_arch(KITE_ARCH_QWEN3MOE, "model.layers.0.mlp.experts.7.down_proj.weight", 2, out, sizeof out), 1);
    assert_string_equal(out, "blk.0.ffn_down_exps.7.weight");
    assert_int_equal(kite_hf_canonical_name_arch(KITE_ARCH_QWEN3MOE, "model.layers.0.mlp.experts.12.gate_proj.weight", 2, out, sizeof out), 1);
    assert_string_equal(out, "blk.0.ffn_gate_exps.12.weight");
    assert_int_equal(kite_hf_canonical_name_arch(KITE_ARCH_QWEN3MOE, "model.layers.2.mlp.experts.0.up_proj.weight", 2, out, sizeof out), -1);
    assert_int_equal(kite_hf_canonical_name_arch(KITE_ARCH_QWEN3MOE, "model.layers.0.mlp.experts.gate_up_proj", 2, out, sizeof out), 1);
    assert_string_equal(out, "blk.0.ffn_gate_up_exps.weight");
    assert_int_equal(kite_hf_canonical_name_arch(KITE_ARCH_QWEN3MOE, "model.layers.1.mlp.experts.down_proj", 2, out, sizeof out), 1);
    assert_string_equal(out, "blk.1.ffn_down_exps.weight");
    assert_int_equal(kite_hf_canonical_name_arch(KITE_ARCH_QWEN3MOE, "model.layers.0.mlp.experts.up_proj", 2, out, sizeof out), -2);
    assert_int_equal(kite_hf_canonical_name_arch(KITE_ARCH_QWEN3MOE, "model.layers.0.mlp.experts.03.up_proj.weight", 2, out, sizeof out), -2);
    assert_int_equal(kite_hf_canonical_name_arch(KITE_ARCH_QWEN3MOE, "model.layers.0.mlp.shared_expert.up_proj.weight", 2, out, sizeof out), -2);
    assert_int_equal(kite_hf_canonical_name_arch(KITE_ARCH_QWEN3MOE, "model.layers.0.self_attn.q_norm.weight", 2, out, sizeof out), 1);
    assert_string_equal(out, "blk.0.attn_q_norm.weight");
}

#define BASE "\"model_type\":\"llama\",\"intermediate_size\":100,\"num_hidden_layers\":2,\"vocab_size\":300"

static void test_ranges(void **state) {
    (void)state;
    expect_fail("{" BASE ",\"num_attention_heads\":4}", KITE_ERR_FORMAT, "missing \"hidden_size\"");
    expect_fail("{" BASE ",\"hidden_size\":0,\"num_attention_heads\":4}", KITE_ERR_FORMAT, "\"hidden_size\" = 0");
    expect_fail("{" BASE ",\"hidden_size\":-64,\"num_attention_heads\":4}", KITE_ERR_FORMAT, "hidden_size");
    expect_fail("{" BASE ",\"hidden_size\":99999999999,\"num_attention_heads\":4}", KITE_ERR_FORMAT, "hidden_size");
    expect_fail("{" BASE ",\"hidden_size\":64.5,\"num_attention_heads\":4}", KITE_ERR_FORMAT, "not an integer");
    expect_fail("{" BASE ",\"hidden_size\":\"64\",\"num_attention_heads\":4}", KITE_ERR_FORMAT, "not an integer");
    expect_fail("{" BASE ",\"hidden_size\":64,\"num_attention_heads\":5}", KITE_ERR_FORMAT, "not a multiple of num_attention_heads");
    expect_fail("{" BASE ",\"hidden_size\":64,\"num_attention_heads\":4,\"num_key_value_heads\":3}", KITE_ERR_FORMAT,
                "not a multiple of num_key_value_heads");
    expect_fail("{" BASE ",\"hidden_size\":64,\"num_attention_heads\":4,\"num_key_value_heads\":8}", KITE_ERR_FORMAT,
                "num_key_value_heads");
    expect_fail("{" BASE ",\"hidden_size\":64,\"num_attention_heads\":4,\"head_dim\":15}", KITE_ERR_FORMAT, "head_dim");
    expect_fail("{" BASE ",\"hidden_size\":64,\"num_attention_heads\":4,\"head_dim\":4096}", KITE_ERR_FORMAT, "head_dim");
    expect_fail("{" BASE ",\"hidden_size\":64,\"num_attention_heads\":4,\"rms_norm_eps\":0}", KITE_ERR_FORMAT, "rms_norm_eps");
    expect_fail("{" BASE ",\"hidden_size\":64,\"num_attention_heads\":4,\"rms_norm_eps\":-1e-5}", KITE_ERR_FORMAT, "rms_norm_eps");
    expect_fail("{" BASE ",\"hidden_size\":64,\"num_attention_heads\":4,\"rms_norm_eps\":1e-52}", KITE_ERR_FORMAT,
                "too small");
    expect_fail("{" BASE ",\"hidden_size\":64,\"num_attention_heads\":4,\"rope_theta\":0}", KITE_ERR_FORMAT, "rope_theta");
    expect_fail("{" BASE ",\"hidden_size\":64,\"num_attention_heads\":4,\"rope_theta\":1e400}", KITE_ERR_FORMAT, "JSON");
    expect_fail("{" BASE ",\"hidden_size\":64,\"num_attention_heads\":4,\"max_position_embeddings\":0}", KITE_ERR_FORMAT,
                "max_position_embeddings");
    expect_fail("{" BASE ",\"hidden_size\":64,\"num_attention_heads\":4,\"tie_word_embeddings\":1}", KITE_ERR_FORMAT,
                "tie_word_embeddings");
    expect_fail("{" BASE ",\"hidden_size\":64,\"num_attention_heads\":4,\"eos_token_id\":300}", KITE_ERR_FORMAT, "vocab_size");
    expect_fail("{" BASE ",\"hidden_size\":64,\"num_attention_heads\":4,\"bos_token_id\":\"a\"}", KITE_ERR_FORMAT, "bos_token_id");
    expect_fail("{" BASE ",\"hidden_size\":64,\"num_attention_heads\":4,\"hidden_act\":\"gelu\"}", KITE_ERR_UNSUPPORTED, "gelu");
    expect_fail("{" BASE ",\"hidden_size\":64,\"num_attention_heads\":4,\"mlp_bias\":true}", KITE_ERR_UNSUPPORTED, "mlp_bias");
    expect_fail("{" BASE ",\"hidden_size\":64,\"num_attention_heads\":4,\"use_sliding_window\":true}", KITE_ERR_UNSUPPORTED,
                "sliding");
    expect_fail("{\"model_type\":\"llama\",\"hidden_size\":64,\"num_attention_heads\":4,\"intermediate_size\":100,"
                "\"num_hidden_layers\":2,\"vocab_size\":2147483648}", KITE_ERR_FORMAT, "vocab_size");
    expect_fail("{\"model_type\":\"llama\",\"hidden_size\":64,\"num_attention_heads\":4,\"intermediate_size\":100,"
                "\"num_hidden_layers\":5000,\"vocab_size\":20}", KITE_ERR_FORMAT, "num_hidden_layers");
    expect_fail("{\"model_type\":\"llama\",\"model_type\":\"llama\"}", KITE_ERR_FORMAT, "duplicate");
}

static void test_rope_scaling(void **state) {
    (void)state;
    kite_hparams hp;
    int32_t bos, eos;
    kite_error e;
    /* Llama-3.2-1B's published rope_scaling */
    assert_int_equal(parse("{" BASE ",\"hidden_size\":64,\"num_attention_heads\":4,\"max_position_embeddings\":131072,"
                           "\"rope_scaling\":{\"factor\":32.0,\"high_freq_factor\":4.0,\"low_freq_factor\":1.0,"
                           "\"original_max_position_embeddings\":8192,\"rope_type\":\"llama3\"},\"rope_theta\":500000.0}",
                           &hp, &bos, &eos, &e), KITE_OK);
    assert_int_equal(hp.rope_scaling, KITE_ROPE_SCALING_LLAMA3);
    assert_float_equal(hp.rope_factor, 32.0f, 0.0f);
    assert_float_equal(hp.rope_low_freq_factor, 1.0f, 0.0f);
    assert_float_equal(hp.rope_high_freq_factor, 4.0f, 0.0f);
    assert_int_equal(hp.rope_orig_ctx, 8192);
    assert_float_equal(hp.rope_theta, 500000.0f, 0.0f);
    /* linear, spelled with the older "type" key */
    assert_int_equal(parse("{" BASE ",\"hidden_size\":64,\"num_attention_heads\":4,"
                           "\"rope_scaling\":{\"type\":\"linear\",\"factor\":4}}", &hp, &bos, &eos, &e), KITE_OK);
    assert_int_equal(hp.rope_scaling, KITE_ROPE_SCALING_LINEAR);
    assert_float_equal(hp.rope_factor, 4.0f, 0.0f);
    assert_int_equal(parse("{" BASE ",\"hidden_size\":64,\"num_attention_heads\":4,"
                           "\"rope_scaling\":{\"rope_type\":\"default\"}}", &hp, &bos, &eos, &e), KITE_OK);
    assert_int_equal(hp.rope_scaling, KITE_ROPE_SCALING_NONE);

    expect_fail("{" BASE ",\"hidden_size\":64,\"num_attention_heads\":4,\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":4}}",
                KITE_ERR_UNSUPPORTED, "unsupported rope_scaling type 'yarn'");
    expect_fail("{" BASE ",\"hidden_size\":64,\"num_attention_heads\":4,\"rope_scaling\":{\"factor\":4}}", KITE_ERR_FORMAT,
                "rope_type");
    expect_fail("{" BASE ",\"hidden_size\":64,\"num_attention_heads\":4,\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8}}",
                KITE_ERR_FORMAT, "low_freq_factor");
    expect_fail("{" BASE ",\"hidden_size\":64,\"num_attention_heads\":4,\"rope_scaling\":{\"rope_type\":\"linear\",\"factor\":-1}}",
                KITE_ERR_FORMAT, "factor");
    expect_fail("{" BASE ",\"hidden_size\":64,\"num_attention_heads\":4,\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8,"
                "\"low_freq_factor\":4,\"high_freq_factor\":1,\"original_max_position_embeddings\":8192}}",
                KITE_ERR_FORMAT, "high_freq_factor");
    expect_fail("{" BASE ",\"hidden_size\":64,\"num_attention_heads\":4,\"rope_scaling\":\"linear\"}", KITE_ERR_FORMAT,
                "rope_scaling");
}

static int gen(const char *json, kite_gen_params *p, int32_t *bos, int32_t *eos, kite_error *e) {
    return kite_hf_parse_generation_config(json, strlen(json), "generation_config.json", p, bos, eos, e);
}

static void test_generation_config(void **state) {
    (void)state;
    const kite_gen_params base = {.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f, .repeat_penalty = 1.0f};
    kite_gen_params p = base;
    int32_t bos = -1, eos = -1;
    kite_error e = {0};
    /* Qwen3-0.6B's published generation_config */
    assert_int_equal(gen("{\"bos_token_id\":151643,\"do_sample\":true,\"eos_token_id\":[151645,151643],"
                         "\"pad_token_id\":151643,\"temperature\":0.6,\"top_k\":20,\"top_p\":0.95}", &p, &bos, &eos, &e),
                     KITE_OK);
    assert_float_equal(p.temperature, 0.6f, 1e-7f);
    assert_int_equal(p.top_k, 20);
    assert_float_equal(p.top_p, 0.95f, 1e-7f);
    assert_float_equal(p.min_p, 0.05f, 0.0f); /* kept */
    assert_int_equal(bos, 151643);
    assert_int_equal(eos, 151645);

    p = base;
    assert_int_equal(gen("{\"do_sample\":false,\"temperature\":0.7,\"repetition_penalty\":1.1,\"min_p\":0.1}", &p, NULL,
                         NULL, &e), KITE_OK);
    assert_float_equal(p.temperature, 0.0f, 0.0f);
    assert_float_equal(p.repeat_penalty, 1.1f, 1e-7f);
    assert_float_equal(p.min_p, 0.1f, 1e-7f);

    const char *bad[] = {"{\"temperature\":-1}", "{\"top_p\":0}", "{\"top_p\":1.5}", "{\"top_k\":-3}", "{\"top_k\":2.5}",
                         "{\"min_p\":2}", "{\"repetition_penalty\":0}", "{\"do_sample\":\"yes\"}", "{\"temperature\":\"hot\"}",
                         "{\"eos_token_id\":[\"x\"]}", "[]", "{"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        p = base;
        e.msg[0] = 0;
        assert_int_equal(gen(bad[i], &p, &bos, &eos, &e), KITE_ERR_FORMAT);
        assert_true(strstr(e.msg, "generation_config.json") != NULL);
        assert_float_equal(p.temperature, base.temperature, 0.0f); /* untouched on failure */
    }
}

static void test_names(void **state) {
    (void)state;
    static const struct { const char *hf, *canon; int rc; } cases[] = {
        {"model.embed_tokens.weight", "token_embd.weight", 1},
        {"model.norm.weight", "output_norm.weight", 1},
        {"lm_head.weight", "output.weight", 1},
        {"model.layers.0.input_layernorm.weight", "blk.0.attn_norm.weight", 1},
        {"model.layers.11.self_attn.q_proj.weight", "blk.11.attn_q.weight", 1},
        {"model.layers.3.self_attn.k_proj.weight", "blk.3.attn_k.weight", 1},
        {"model.layers.3.self_attn.v_proj.weight", "blk.3.attn_v.weight", 1},
        {"model.layers.3.self_attn.o_proj.weight", "blk.3.attn_output.weight", 1},
        {"model.layers.3.self_attn.q_proj.bias", "blk.3.attn_q.bias", 1},
        {"model.layers.3.self_attn.k_proj.bias", "blk.3.attn_k.bias", 1},
        {"model.layers.3.self_attn.v_proj.bias", "blk.3.attn_v.bias", 1},
        {"model.layers.3.self_attn.q_norm.weight", "blk.3.attn_q_norm.weight", 1},
        {"model.layers.3.self_attn.k_norm.weight", "blk.3.attn_k_norm.weight", 1},
        {"model.layers.3.post_attention_layernorm.weight", "blk.3.ffn_norm.weight", 1},
        {"model.layers.3.mlp.gate_proj.weight", "blk.3.ffn_gate.weight", 1},
        {"model.layers.3.mlp.up_proj.weight", "blk.3.ffn_up.weight", 1},
        {"model.layers.3.mlp.down_proj.weight", "blk.3.ffn_down.weight", 1},
        {"model.layers.3.self_attn.rotary_emb.inv_freq", NULL, 0},
        {"model.layers.3.self_attn.o_proj.bias", NULL, -2},
        {"model.layers.3.mlp.down_proj.bias", NULL, -2},
        {"model.layers.12.mlp.up_proj.weight", NULL, -1}, /* layer beyond n_layers = 12 */
        {"model.layers.03.mlp.up_proj.weight", NULL, -1},
        {"model.layers.-1.mlp.up_proj.weight", NULL, -1},
        {"model.layers.x.mlp.up_proj.weight", NULL, -1},
        {"model.layers.99999999999999999999.mlp.up_proj.weight", NULL, -1},
        {"model.embed_tokens.bias", NULL, 0},
        {"visual.blocks.0.weight", NULL, 0},
        {"", NULL, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char out[96] = "";
        int rc = kite_hf_canonical_name(cases[i].hf, 12, out, sizeof out);
        if (rc != cases[i].rc || (cases[i].canon && strcmp(out, cases[i].canon) != 0)) {
            print_error("%s -> %d '%s'\n", cases[i].hf, rc, out);
            fail();
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_real_tinystories), cmocka_unit_test(test_qwen3), cmocka_unit_test(test_arch_and_defaults),
        cmocka_unit_test(test_ranges), cmocka_unit_test(test_rope_scaling), cmocka_unit_test(test_generation_config),
        cmocka_unit_test(test_names), cmocka_unit_test(test_gemma3), cmocka_unit_test(test_gemma4), cmocka_unit_test(test_muse_glimmer), cmocka_unit_test(test_lfm2), cmocka_unit_test(test_qwen3moe),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
