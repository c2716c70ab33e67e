/* Hugging Face folders: the real TinyStories-656K folder, folders written here (single file and
 * sharded, llama/qwen2/qwen3), and every kind of broken folder. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "model/model.h"
#include "model/moe.h"
#include "model/source.h"
#include "quant/types.h"
#include "st_writer.h"
#include "test_util.h"

/* ---- a small model described as HF tensors -------------------------------------------------- */
typedef struct model_desc {
    st_tensor t[128];
    char names[128][96];
    int n;
} model_desc;

static void add(model_desc *m, const char *dtype, int n_dims, int64_t d0, int64_t d1, const char *fmt, int layer) {
    snprintf(m->names[m->n], sizeof m->names[0], fmt, layer);
    m->t[m->n] = (st_tensor){m->names[m->n], dtype, n_dims, {d0, d1}};
    m->n++;
}

enum { DIM = 8, HEADS = 2, KV = 1, HD = 4, FFN = 12, LAYERS = 2, VOCAB = 16 };

/* HF shapes (outermost first): q_proj [heads*hd, dim], ... */
static model_desc make_model(bool lm_head, bool biases, bool qk_norm) {
    model_desc m;
    memset(&m, 0, sizeof m);
    add(&m, "F32", 2, VOCAB, DIM, "model.embed_tokens.weight", 0);
    for (int l = 0; l < LAYERS; l++) {
        add(&m, "F32", 1, DIM, 0, "model.layers.%d.input_layernorm.weight", l);
        add(&m, "F32", 2, HEADS * HD, DIM, "model.layers.%d.self_attn.q_proj.weight", l);
        add(&m, "F32", 2, KV * HD, DIM, "model.layers.%d.self_attn.k_proj.weight", l);
        add(&m, "F32", 2, KV * HD, DIM, "model.layers.%d.self_attn.v_proj.weight", l);
        add(&m, "F32", 2, DIM, HEADS * HD, "model.layers.%d.self_attn.o_proj.weight", l);
        if (biases) {
            add(&m, "F32", 1, HEADS * HD, 0, "model.layers.%d.self_attn.q_proj.bias", l);
            add(&m, "F32", 1, KV * HD, 0, "model.layers.%d.self_attn.k_proj.bias", l);
            add(&m, "F32", 1, KV * HD, 0, "model.layers.%d.self_attn.v_proj.bias", l);
        }
        if (qk_norm) {
            add(&m, "F32", 1, HD, 0, "model.layers.%d.self_attn.q_norm.weight", l);
            add(&m, "F32", 1, HD, 0, "model.layers.%d.self_attn.k_norm.weight", l);
        }
        add(&m, "F32", 1, DIM, 0, "model.layers.%d.post_attention_layernorm.weight", l);
        add(&m, "BF16", 2, FFN, DIM, "model.layers.%d.mlp.gate_proj.weight", l);
        add(&m, "F16", 2, FFN, DIM, "model.layers.%d.mlp.up_proj.weight", l);
        add(&m, "F32", 2, DIM, FFN, "model.layers.%d.mlp.down_proj.weight", l);
        add(&m, "F32", 1, HD / 2, 0, "model.layers.%d.self_attn.rotary_emb.inv_freq", l);
    }
    add(&m, "F32", 1, DIM, 0, "model.norm.weight", 0);
    if (lm_head) add(&m, "F32", 2, VOCAB, DIM, "lm_head.weight", 0);
    return m;
}

/* The struct is returned by value: point the tensors at this copy's names again. */
static void fixup(model_desc *m) {
    for (int i = 0; i < m->n; i++) m->t[i].name = m->names[i];
}

static int find(const model_desc *m, const char *name) {
    for (int i = 0; i < m->n; i++)
        if (strcmp(m->names[i], name) == 0) return i;
    return -1;
}

static void drop(model_desc *m, const char *name) {
    int i = find(m, name);
    assert_true(i >= 0);
    for (int j = i; j + 1 < m->n; j++) {
        memcpy(m->names[j], m->names[j + 1], sizeof m->names[0]);
        m->t[j] = m->t[j + 1];
        m->t[j].name = m->names[j];
    }
    m->n--;
}

static const char *config_for(const char *model_type, bool tied) {
    static char buf[1024];
    snprintf(buf, sizeof buf,
             "{\"model_type\":\"%s\",\"hidden_size\":%d,\"intermediate_size\":%d,\"num_hidden_layers\":%d,"
             "\"num_attention_heads\":%d,\"num_key_value_heads\":%d,\"vocab_size\":%d,\"rms_norm_eps\":1e-05,"
             "\"rope_theta\":500000.0,\"max_position_embeddings\":64,\"tie_word_embeddings\":%s,"
             "\"bos_token_id\":3,\"eos_token_id\":[4,5]}",
             model_type, DIM, FFN, LAYERS, HEADS, KV, VOCAB, tied ? "true" : "false");
    return buf;
}

static char tmp_root[256];

static void path_in(char *out, const char *dir, const char *name) { snprintf(out, 512, "%s/%s", dir, name); }

static void write_text(const char *dir, const char *name, const char *text) {
    char p[512];
    path_in(p, dir, name);
    assert_int_equal(st_write_file(p, text, strlen(text)), 0);
}

static void clear_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *ent;
    while ((ent = readdir(d))) {
        if (ent->d_name[0] == '.') continue;
        char p[512];
        path_in(p, dir, ent->d_name);
        unlink(p);
    }
    closedir(d);
}

/* Writes the model into tmp_root: model.safetensors when n_shards == 0, else n_shards files
 * (tensor k in shard k % n_shards) plus model.safetensors.index.json. */
static void write_model(model_desc *m, const char *config, int n_shards) {
    fixup(m);
    clear_dir(tmp_root);
    if (config) write_text(tmp_root, "config.json", config);
    if (n_shards == 0) {
        st_buf b = st_build_tensors(m->t, m->n);
        write_text(tmp_root, "tokenizer.json", "{}");
        char p[512];
        path_in(p, tmp_root, "model.safetensors");
        assert_int_equal(st_write_file(p, b.data, b.size), 0);
        free(b.data);
        return;
    }
    char index[16384];
    size_t len = (size_t)snprintf(index, sizeof index, "{\"metadata\":{\"total_size\":0},\"weight_map\":{");
    bool first = true;
    for (int s = 0; s < n_shards; s++) {
        st_tensor part[128];
        int n = 0;
        for (int k = s; k < m->n; k += n_shards) {
            part[n++] = m->t[k];
            len += (size_t)snprintf(index + len, sizeof index - len, "%s\"%s\":\"model-%05d-of-%05d.safetensors\"",
                                    first ? "" : ",", m->t[k].name, s + 1, n_shards);
            first = false;
        }
        st_buf b = st_build_tensors(part, n);
        char name[64], p[512];
        snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", s + 1, n_shards);
        path_in(p, tmp_root, name);
        assert_int_equal(st_write_file(p, b.data, b.size), 0);
        free(b.data);
    }
    snprintf(index + len, sizeof index - len, "}}");
    write_text(tmp_root, "model.safetensors.index.json", index);
}

static int open_status(const char *path, const char *needle) {
    kite_source src;
    kite_error e = {0};
    int rc = kite_source_open_hf(&src, path, &e);
    if (rc == KITE_OK) {
        kite_source_close(&src);
        print_error("%s opened, expected an error containing '%s'\n", path, needle);
        fail();
    }
    if (!e.msg[0] || (needle && !strstr(e.msg, needle))) {
        print_error("%s: message '%s' lacks '%s'\n", path, e.msg, needle);
        fail();
    }
    return rc;
}

/* ---- the real folder --------------------------------------------------------------------------- */
static void check_tinystories(const kite_source *src) {
    const kite_hparams *hp = &src->hp;
    assert_string_equal(src->format, "safetensors");
    assert_int_equal(hp->arch, KITE_ARCH_LLAMA);
    assert_int_equal(hp->dim, 128);
    assert_int_equal(hp->ffn_dim, 384);
    assert_int_equal(hp->n_layers, 2);
    assert_int_equal(hp->n_heads, 8);
    assert_int_equal(hp->n_kv_heads, 4);
    assert_int_equal(hp->head_dim, 16);
    assert_int_equal(hp->n_vocab, 2048);
    assert_int_equal(hp->n_ctx_train, 512);
    assert_float_equal(hp->rms_eps, 1e-6f, 1e-12f);
    assert_int_equal(hp->rope_layout, KITE_ROPE_HALF);
    assert_true(hp->tied_embeddings);
    assert_int_equal(src->bos_id, 1);
    assert_int_equal(src->eos_id, 2);
    assert_int_equal(src->n_tensors, 2 + 2 * 9);
    assert_null(kite_source_find(src, "output.weight"));
    assert_non_null(strstr(src->tokenizer_json, "tinystories-656k/tokenizer.json"));
    assert_non_null(strstr(src->tokenizer_config_json, "tinystories-656k/tokenizer_config.json"));
    const kite_tensor *k = kite_source_find(src, "blk.1.attn_k.weight");
    assert_non_null(k);
    assert_int_equal(k->type, KITE_TYPE_F32);
    assert_int_equal(k->ne[0], 128);
    assert_int_equal(k->ne[1], 64);
    assert_non_null(kite_source_find(src, "blk.0.ffn_down.weight"));

    /* token_embd is the stored lm_head.weight: compare with the file's bytes read independently
     * (data section starts after the 8-byte length and the header; lm_head has data_offsets [0, 1048576)). */
    const kite_tensor *embd = kite_source_find(src, "token_embd.weight");
    assert_non_null(embd);
    assert_int_equal(embd->ne[0], 128);
    assert_int_equal(embd->ne[1], 2048);
    assert_int_equal(embd->n_bytes, 1048576);
    FILE *f = fopen(kite_test_data("models/tinystories-656k/model.safetensors"), "rb");
    assert_non_null(f);
    unsigned char len8[8];
    assert_int_equal(fread(len8, 1, 8, f), 8);
    uint64_t header = 0;
    for (int i = 7; i >= 0; i--) header = header << 8 | len8[i];
    assert_int_equal(fseek(f, (long)(8 + header), SEEK_SET), 0);
    unsigned char *raw = malloc(1048576);
    assert_int_equal(fread(raw, 1, 1048576, f), 1048576);
    fclose(f);
    assert_memory_equal(embd->data, raw, 1048576);
    free(raw);
}

static void test_real_folder(void **state) {
    (void)state;
    const char *paths[] = {kite_test_data("models/tinystories-656k"), kite_test_data("models/tinystories-656k/"),
                           kite_test_data("models/tinystories-656k/model.safetensors"),
                           kite_test_data("models/tinystories-656k/config.json")};
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        kite_source src;
        kite_error e = {0};
        int rc = kite_source_open_hf(&src, paths[i], &e);
        if (rc) print_error("%s: %s\n", paths[i], e.msg);
        assert_int_equal(rc, KITE_OK);
        check_tinystories(&src);
        kite_source_close(&src);
    }
}

/* ---- written folders --------------------------------------------------------------------------- */
static void test_written_single_and_sharded(void **state) {
    (void)state;
    model_desc m = make_model(true, false, false);
    for (int shards = 0; shards <= 3; shards++) {
        write_model(&m, config_for("llama", false), shards);
        char target[512];
        if (shards == 0) snprintf(target, sizeof target, "%s", tmp_root);
        else if (shards == 1) path_in(target, tmp_root, "model.safetensors.index.json");
        else { /* a shard given directly */
            char shard[64];
            snprintf(shard, sizeof shard, "model-00002-of-%05d.safetensors", shards);
            path_in(target, tmp_root, shard);
        }
        if (shards == 3) snprintf(target, sizeof target, "%s", tmp_root);
        kite_source src;
        kite_error e = {0};
        int rc = kite_source_open_hf(&src, target, &e);
        if (rc) print_error("%d shards: %s\n", shards, e.msg);
        assert_int_equal(rc, KITE_OK);
        assert_int_equal(src.n_maps, shards ? shards : 1);
        assert_int_equal(src.n_tensors, 3 + LAYERS * 9);
        assert_false(src.hp.tied_embeddings);
        assert_float_equal(src.hp.rope_theta, 500000.0f, 0.0f);
        assert_int_equal(src.bos_id, 3);
        assert_int_equal(src.eos_id, 4);
        assert_int_equal(src.tokenizer_json[0] != 0, shards == 0);
        const kite_tensor *q = kite_source_find(&src, "blk.1.attn_q.weight");
        assert_non_null(q);
        assert_int_equal(q->ne[0], DIM);
        assert_int_equal(q->ne[1], HEADS * HD);
        const kite_tensor *gate = kite_source_find(&src, "blk.0.ffn_gate.weight");
        assert_int_equal(gate->type, KITE_TYPE_BF16);
        assert_int_equal(gate->n_bytes, FFN * DIM * 2);
        assert_int_equal(kite_source_find(&src, "blk.0.ffn_up.weight")->type, KITE_TYPE_F16);
        /* data: element i of a shard's k-th tensor holds k * 1000 + i (see st_build_tensors) */
        int k = find(&m, "lm_head.weight");
        int index_in_shard = shards ? k / shards : k;
        const kite_tensor *out = kite_source_find(&src, "output.weight");
        assert_non_null(out);
        float v[2];
        memcpy(v, out->data, sizeof v);
        assert_float_equal(v[0], (float)(index_in_shard * 1000), 0.0f);
        assert_float_equal(v[1], (float)(index_in_shard * 1000 + 1), 0.0f);
        kite_source_close(&src);
    }
}

static void test_written_qwen(void **state) {
    (void)state;
    model_desc m = make_model(false, true, false);
    write_model(&m, config_for("qwen2", true), 2);
    kite_source src;
    kite_error e = {0};
    int rc = kite_source_open_hf(&src, tmp_root, &e);
    if (rc) print_error("%s\n", e.msg);
    assert_int_equal(rc, KITE_OK);
    assert_int_equal(src.hp.arch, KITE_ARCH_QWEN2);
    assert_true(src.hp.tied_embeddings);
    assert_non_null(kite_source_find(&src, "blk.1.attn_k.bias"));
    assert_int_equal(kite_source_find(&src, "blk.1.attn_q.bias")->ne[0], HEADS * HD);
    kite_source_close(&src);
    /* qwen2 requires the biases */
    m = make_model(false, false, false);
    write_model(&m, config_for("qwen2", true), 0);
    open_status(tmp_root, "blk.0.attn_q.bias is missing");

    m = make_model(true, false, true);
    write_model(&m, config_for("qwen3", false), 0);
    assert_int_equal(kite_source_open_hf(&src, tmp_root, &e), KITE_OK);
    assert_int_equal(src.hp.arch, KITE_ARCH_QWEN3);
    assert_int_equal(kite_source_find(&src, "blk.0.attn_k_norm.weight")->ne[0], HD);
    kite_source_close(&src);
    drop(&m, "model.layers.1.self_attn.k_norm.weight");
    write_model(&m, config_for("qwen3", false), 0);
    open_status(tmp_root, "blk.1.attn_k_norm.weight");

    /* tied config with both matrices: lm_head is dropped, the embedding serves */
    m = make_model(true, false, false);
    write_model(&m, config_for("llama", true), 0);
    assert_int_equal(kite_source_open_hf(&src, tmp_root, &e), KITE_OK);
    assert_true(src.hp.tied_embeddings);
    assert_null(kite_source_find(&src, "output.weight"));
    kite_source_close(&src);
    /* untied config without lm_head: tied all the same (nothing else to use) */
    m = make_model(false, false, false);
    write_model(&m, config_for("llama", false), 0);
    assert_int_equal(kite_source_open_hf(&src, tmp_root, &e), KITE_OK);
    assert_true(src.hp.tied_embeddings);
    kite_source_close(&src);
}

/* A Qwen3-MoE model: make_model's attention, the dense MLP replaced by a router and E experts of XF, either
 * one matrix per expert or transformers 5's fused mlp.experts.gate_up_proj [E, 2 XF, DIM] (each expert's gate
 * rows, then its up rows) and mlp.experts.down_proj [E, DIM, XF]. */
enum { MOE_E = 3, MOE_XF = 4 };

static model_desc make_moe(bool fused) {
    model_desc m = make_model(true, false, true);
    char name[96], fmt[96];
    for (int l = 0; l < LAYERS; l++) {
        static const char *const dense[3] = {"gate_proj", "up_proj", "down_proj"};
        for (int k = 0; k < 3; k++) {
            snprintf(name, sizeof name, "model.layers.%d.mlp.%s.weight", l, dense[k]);
            drop(&m, name);
        }
        add(&m, "F32", 2, MOE_E, DIM, "model.layers.%d.mlp.gate.weight", l);
        if (fused) {
            add(&m, "F32", 3, MOE_E, 2 * MOE_XF, "model.layers.%d.mlp.experts.gate_up_proj", l);
            m.t[m.n - 1].shape[2] = DIM;
            add(&m, "F32", 3, MOE_E, DIM, "model.layers.%d.mlp.experts.down_proj", l);
            m.t[m.n - 1].shape[2] = MOE_XF;
            continue;
        }
        for (int x = 0; x < MOE_E; x++) {
            snprintf(fmt, sizeof fmt, "model.layers.%%d.mlp.experts.%d.gate_proj.weight", x);
            add(&m, "F32", 2, MOE_XF, DIM, fmt, l);
            snprintf(fmt, sizeof fmt, "model.layers.%%d.mlp.experts.%d.up_proj.weight", x);
            add(&m, "F32", 2, MOE_XF, DIM, fmt, l);
            snprintf(fmt, sizeof fmt, "model.layers.%%d.mlp.experts.%d.down_proj.weight", x);
            add(&m, "F32", 2, DIM, MOE_XF, fmt, l);
        }
    }
    return m;
}

static const char *moe_config(void) {
    static char buf[1400];
    const char *base = config_for("qwen3_moe", false);
    snprintf(buf, sizeof buf, "%.*s,\"num_experts\":%d,\"num_experts_per_tok\":2,\"moe_intermediate_size\":%d}",
             (int)strlen(base) - 1, base, MOE_E, MOE_XF);
    return buf;
}

/* Element i of tensor k of the written file holds k * 1000 + i (st_writer.h). */
static void expect_ramp(const kite_tensor *view, int k, int64_t first, int64_t rows, int64_t cols, int64_t stride) {
    const float *v = view->data;
    assert_int_equal(view->ne[0], cols);
    assert_int_equal(view->ne[1], rows);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            if (v[r * cols + c] != (float)(k * 1000 + first + r * stride + c))
                fail_msg("%s[%lld][%lld] = %g, expected %g", view->name, (long long)r, (long long)c, (double)v[r * cols + c],
                         (double)(k * 1000 + first + r * stride + c));
}

static void test_written_qwen3moe(void **state) {
    (void)state;
    kite_source src;
    kite_weights w;
    kite_error e = {0};
    model_desc m = make_moe(false);
    write_model(&m, moe_config(), 2);
    int rc = kite_source_open_hf(&src, tmp_root, &e);
    if (rc) print_error("%s\n", e.msg);
    assert_int_equal(rc, KITE_OK);
    assert_int_equal(src.hp.arch, KITE_ARCH_QWEN3MOE);
    assert_int_equal(kite_source_find(&src, "blk.1.ffn_down_exps.2.weight")->ne[0], MOE_XF);
    assert_int_equal(kite_weights_bind(&w, &src, NULL, NULL, &e), KITE_OK);
    assert_int_equal(w.layers[1].moe->n_experts, MOE_E);
    assert_int_equal(w.layers[1].moe->down[2].rows, DIM);
    kite_weights_free(&w);
    kite_source_close(&src);
    drop(&m, "model.layers.1.mlp.experts.1.up_proj.weight");
    write_model(&m, moe_config(), 0);
    open_status(tmp_root, "expert 1's blk.1.ffn_up_exps.1.weight");

    m = make_moe(true);
    write_model(&m, moe_config(), 0);
    rc = kite_source_open_hf(&src, tmp_root, &e);
    if (rc) print_error("%s\n", e.msg);
    assert_int_equal(rc, KITE_OK);
    assert_int_equal(kite_weights_bind(&w, &src, NULL, NULL, &e), KITE_OK);
    const kite_moe_layer *moe = w.layers[1].moe;
    const int k_gate_up = find(&m, "model.layers.1.mlp.experts.gate_up_proj"), k_down = find(&m, "model.layers.1.mlp.experts.down_proj");
    for (int x = 0; x < MOE_E; x++) {
        expect_ramp(&moe->views[x], k_gate_up, (int64_t)x * 2 * MOE_XF * DIM, MOE_XF, DIM, DIM);                  /* gate */
        expect_ramp(&moe->views[MOE_E + x], k_gate_up, ((int64_t)x * 2 * MOE_XF + MOE_XF) * DIM, MOE_XF, DIM, DIM); /* up */
        expect_ramp(&moe->views[2 * MOE_E + x], k_down, (int64_t)x * DIM * MOE_XF, DIM, MOE_XF, MOE_XF);             /* down */
    }
    kite_weights_free(&w);
    kite_source_close(&src);
    m.t[find(&m, "model.layers.0.mlp.experts.gate_up_proj")].shape[1] = MOE_XF; /* gate or up missing */
    write_model(&m, moe_config(), 0);
    open_status(tmp_root, "blk.0.ffn_gate_up_exps.weight has shape [8, 4, 3]");
}

static void test_broken_folders(void **state) {
    (void)state;
    model_desc m = make_model(true, false, false);
    char p[512];

    write_model(&m, NULL, 0);
    assert_int_equal(open_status(tmp_root, "config.json"), KITE_ERR_IO);
    write_model(&m, "{\"model_type\":\"gemma3\"}", 0);
    assert_int_equal(open_status(tmp_root, "'gemma3'"), KITE_ERR_UNSUPPORTED);
    write_model(&m, "{\"model_type\":", 0);
    assert_int_equal(open_status(tmp_root, "config.json"), KITE_ERR_FORMAT);
    write_model(&m, config_for("llama", false), 0);
    write_text(tmp_root, "generation_config.json", "{\"top_p\": 7}");
    assert_int_equal(open_status(tmp_root, "top_p"), KITE_ERR_FORMAT);

    /* no weights, a path that does not exist, a file of another kind */
    clear_dir(tmp_root);
    write_text(tmp_root, "config.json", config_for("llama", false));
    assert_int_equal(open_status(tmp_root, "no model.safetensors"), KITE_ERR_IO);
    path_in(p, tmp_root, "nothing-here");
    assert_int_equal(open_status(p, "nothing-here"), KITE_ERR_IO);
    path_in(p, tmp_root, "config.txt");
    write_text(tmp_root, "config.txt", "x");
    assert_int_equal(open_status(p, "expected"), KITE_ERR_UNSUPPORTED);

    /* index naming a missing shard, a wrong shard, a path outside the folder, no weight_map */
    write_model(&m, config_for("llama", false), 2);
    path_in(p, tmp_root, "model-00002-of-00002.safetensors");
    unlink(p);
    assert_int_equal(open_status(tmp_root, "model-00002-of-00002.safetensors is missing"), KITE_ERR_IO);
    write_model(&m, config_for("llama", false), 2);
    write_text(tmp_root, "model.safetensors.index.json",
               "{\"weight_map\":{\"model.embed_tokens.weight\":\"model-00002-of-00002.safetensors\"}}");
    open_status(tmp_root, "does not hold it");
    write_text(tmp_root, "model.safetensors.index.json", "{\"weight_map\":{\"model.norm.weight\":\"../x.safetensors\"}}");
    open_status(tmp_root, "invalid shard");
    write_text(tmp_root, "model.safetensors.index.json", "{\"weight_map\":{\"model.norm.weight\":7}}");
    open_status(tmp_root, "invalid shard");
    write_text(tmp_root, "model.safetensors.index.json", "{\"metadata\":{}}");
    open_status(tmp_root, "weight_map");
    write_text(tmp_root, "model.safetensors.index.json", "{\"weight_map\":");
    open_status(tmp_root, "JSON");
    /* an index that lists only some tensors: the others are never seen, so a required one is missing */
    write_text(tmp_root, "model.safetensors.index.json",
               "{\"weight_map\":{\"model.embed_tokens.weight\":\"model-00001-of-00002.safetensors\"}}");
    open_status(tmp_root, "output_norm.weight is missing");

    /* wrong shape: names the tensor and both shapes */
    model_desc bad = make_model(true, false, false);
    bad.t[find(&bad, "model.layers.0.self_attn.q_proj.weight")].shape[0] = HEADS * HD + 2;
    write_model(&bad, config_for("llama", false), 0);
    assert_int_equal(open_status(tmp_root, "blk.0.attn_q.weight has shape [8, 10] but the hyper-parameters need [8, 8]"),
                     KITE_ERR_FORMAT);
    bad = make_model(true, false, false);
    bad.t[find(&bad, "model.norm.weight")].n_dims = 2;
    bad.t[find(&bad, "model.norm.weight")].shape[1] = 2;
    write_model(&bad, config_for("llama", false), 0);
    open_status(tmp_root, "output_norm.weight");
    /* a missing tensor; a layer beyond num_hidden_layers; a bias kite cannot run; a dtype kite cannot read */
    bad = make_model(true, false, false);
    drop(&bad, "model.layers.1.mlp.down_proj.weight");
    write_model(&bad, config_for("llama", false), 0);
    open_status(tmp_root, "required tensor blk.1.ffn_down.weight is missing");
    bad = make_model(true, false, false);
    add(&bad, "F32", 1, DIM, 0, "model.layers.%d.input_layernorm.weight", LAYERS);
    write_model(&bad, config_for("llama", false), 0);
    open_status(tmp_root, "outside");
    bad = make_model(true, false, false);
    add(&bad, "F32", 1, DIM, 0, "model.layers.%d.self_attn.o_proj.bias", 0);
    write_model(&bad, config_for("llama", false), 0);
    assert_int_equal(open_status(tmp_root, "o_proj.bias"), KITE_ERR_UNSUPPORTED);
    bad = make_model(true, false, false);
    bad.t[find(&bad, "model.norm.weight")].dtype = "I32";
    write_model(&bad, config_for("llama", false), 0);
    assert_int_equal(open_status(tmp_root, "I32"), KITE_ERR_UNSUPPORTED);
    /* embeddings absent, lm_head present, not tied */
    bad = make_model(true, false, false);
    drop(&bad, "model.embed_tokens.weight");
    write_model(&bad, config_for("llama", false), 0);
    open_status(tmp_root, "embed_tokens");
    /* config disagreeing with the weights */
    write_model(&m, "{\"model_type\":\"llama\",\"hidden_size\":16,\"intermediate_size\":12,\"num_hidden_layers\":2,"
                    "\"num_attention_heads\":2,\"num_key_value_heads\":1,\"vocab_size\":16}", 0);
    open_status(tmp_root, "token_embd.weight has shape [8, 16] but the hyper-parameters need [16, 16]");
}

/* Every prefix of a written model.safetensors (and a few byte flips) fails cleanly. */
static void test_truncated_weights(void **state) {
    (void)state;
    model_desc m = make_model(true, false, false);
    fixup(&m);
    st_buf b = st_build_tensors(m.t, m.n);
    write_model(&m, config_for("llama", false), 0);
    char p[512];
    path_in(p, tmp_root, "model.safetensors");
    kite_source src;
    kite_error e;
    for (size_t len = 0; len < b.size; len += (len < 4096 ? 7 : 301)) {
        assert_int_equal(st_write_file(p, b.data, len), 0);
        e.msg[0] = 0;
        int rc = kite_source_open_hf(&src, tmp_root, &e);
        if (rc == KITE_OK) {
            print_error("a %zu-byte prefix loaded\n", len);
            fail();
        }
        assert_true(e.msg[0] != 0);
    }
    free(b.data);
}

static int setup(void **state) {
    (void)state;
    snprintf(tmp_root, sizeof tmp_root, "/tmp/kite-io-hf-XXXXXX");
    return mkdtemp(tmp_root) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    clear_dir(tmp_root);
    rmdir(tmp_root);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_real_folder), cmocka_unit_test(test_written_single_and_sharded),
        cmocka_unit_test(test_written_qwen), cmocka_unit_test(test_written_qwen3moe), cmocka_unit_test(test_broken_folders), cmocka_unit_test(test_truncated_weights),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
