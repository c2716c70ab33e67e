/* The cost of one EAGLE-3 head step against one target token, in kite and in llama.cpp (node-llama-cpp's
 * prebuilt libllama, dlopen'ed), on the same target/head pair, thread count and 64-token prompt, rounds
 * alternating between the engines, the best round of each counting:
 *   target token: a plain one-token decode step after the prompt;
 *   head step:    a greedy chain of STEPS drafted tokens (the root's row and STEPS - 1 nodes), per row.
 * llama.cpp runs its head as common/speculative.cpp's draft-eagle3 does (seed row, then one row per
 * token on the pre-norm state), with its default caches (f16, flash attention as it chooses).
 *
 *   eagle3_vs_llamacpp LIB_DIR TARGET.gguf HEAD.gguf THREADS [STEPS] [ROUNDS] */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "kite.h"
#include "llama_api.h"
#include "spec/eagle3.h"

enum { N_PROMPT = 64 };

static llama_api L;

static struct llama_batch one_row(int32_t embd) {
    struct llama_batch b = {0};
    static llama_seq_id seq0 = 0;
    static int32_t n_seq = 1;
    static llama_seq_id *seqs[1] = {&seq0};
    b.n_tokens = 1;
    b.token = calloc(1, sizeof *b.token);
    b.embd = embd ? calloc((size_t)embd, sizeof(float)) : NULL;
    b.pos = calloc(1, sizeof *b.pos);
    b.n_seq_id = &n_seq;
    b.seq_id = seqs;
    b.logits = calloc(1, sizeof *b.logits);
    b.logits[0] = 1;
    return b;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s LIB_DIR TARGET.gguf HEAD.gguf THREADS [STEPS] [ROUNDS]\n", argv[0]);
        return 2;
    }
    const char *dir = argv[1], *target_path = argv[2], *head_path = argv[3];
    int threads = atoi(argv[4]), steps = argc > 5 ? atoi(argv[5]) : 8, rounds = argc > 6 ? atoi(argv[6]) : 3;
    if (threads < 1 || steps < 1 || steps > KITE_MAX_DRAFT || rounds < 1) return 2;
    char err[512];
    if (llama_api_open(&L, dir, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }

    kite_model_params mp = kite_model_default_params();
    mp.n_threads = threads;
    kite_model *target = NULL, *head = NULL;
    if (kite_model_open(&target, target_path, &mp, err, sizeof err) || kite_model_open(&head, head_path, &mp, err, sizeof err)) {
        fprintf(stderr, "kite: %s\n", err);
        return 1;
    }
    const int32_t V = target->n_vocab, hd = kite_eagle3_dim(head->eagle3), n_layer = target->weights.hp.n_layers;
    int32_t prompt[N_PROMPT];
    for (int i = 0; i < N_PROMPT; i++) prompt[i] = 3 + (int32_t)((i * 131) % (V - 3));

    kite_session_params sp = kite_session_default_params();
    sp.n_ctx = 512, sp.n_threads = threads;
    kite_session *s = NULL;
    if (kite_session_open(&s, target, &sp, err, sizeof err)) { fprintf(stderr, "kite: %s\n", err); return 1; }
    kite_spec_params spec = kite_spec_default_params();
    spec.drafter = KITE_DRAFT_EAGLE3, spec.draft_model = head, spec.budget = steps;
    if (kite_session_set_spec(s, &spec, err, sizeof err) || kite_prompt(s, prompt, N_PROMPT, err, sizeof err)) {
        fprintf(stderr, "kite: %s\n", err);
        return 1;
    }

    struct llama_model_params lmp = L.model_default_params();
    lmp.n_gpu_layers = 0;
    struct llama_model *lt = L.model_load(target_path, lmp), *lh = L.model_load(head_path, lmp);
    if (!lt || !lh) { fprintf(stderr, "llama.cpp cannot load the pair\n"); return 1; }
    struct llama_context_params cp = L.context_default_params();
    cp.n_ctx = 512, cp.n_batch = 512, cp.n_ubatch = 512, cp.n_threads = threads, cp.n_threads_batch = threads;
    struct llama_context *tgt = L.init_from_model(lt, cp);
    const int32_t *ids = L.target_layer_ids(lh);
    for (int k = 0; k < 3; k++) {
        if (ids[k] < n_layer) L.set_layer_inp(tgt, (uint32_t)ids[k], true);
        else L.set_nextn(tgt, true, false);
    }
    cp.ctx_other = tgt;
    struct llama_context *dft = L.init_from_model(lh, cp);
    if (!tgt || !dft) { fprintf(stderr, "llama.cpp cannot make the contexts\n"); return 1; }
    L.set_nextn(dft, true, true);
    /* The prompt through the target (features), the encoder and the head's rows below the root. */
    struct llama_batch pb = {0};
    static llama_seq_id seq0 = 0;
    llama_seq_id *seq_ptr[N_PROMPT];
    int32_t n_seq_id[N_PROMPT], pos[N_PROMPT];
    int8_t logits_flag[N_PROMPT];
    for (int i = 0; i < N_PROMPT; i++) seq_ptr[i] = &seq0, n_seq_id[i] = 1, pos[i] = i, logits_flag[i] = i == N_PROMPT - 1;
    pb.n_tokens = N_PROMPT, pb.token = prompt, pb.pos = pos, pb.n_seq_id = n_seq_id, pb.seq_id = seq_ptr, pb.logits = logits_flag;
    if (L.decode(tgt, pb)) { fprintf(stderr, "llama.cpp: target decode failed\n"); return 1; }
    const int32_t dim = target->weights.hp.dim;
    float *features = malloc(sizeof(float) * N_PROMPT * 3 * (size_t)dim);
    for (int k = 0; k < 3; k++) {
        const float *layer = ids[k] < n_layer ? L.get_layer_inp(tgt, (uint32_t)ids[k]) : L.get_nextn(tgt);
        for (int i = 0; i < N_PROMPT; i++)
            memcpy(features + ((size_t)i * 3 + (size_t)k) * dim, layer + (size_t)i * dim, sizeof(float) * (size_t)dim);
    }
    struct llama_batch enc = {0};
    enc.n_tokens = N_PROMPT, enc.embd = features;
    if (L.encode(dft, enc)) { fprintf(stderr, "llama.cpp: encode failed\n"); return 1; }
    float *g = malloc(sizeof(float) * N_PROMPT * (size_t)hd);
    memcpy(g, L.get_nextn(dft), sizeof(float) * N_PROMPT * (size_t)hd);
    /* The head's rows (token[p + 1], g[p]) for p < N - 1. */
    struct llama_batch rb = pb;
    rb.n_tokens = N_PROMPT - 1;
    rb.token = prompt + 1;
    rb.embd = g;
    int8_t no_logits[N_PROMPT] = {0};
    rb.logits = no_logits;
    if (L.decode(dft, rb)) { fprintf(stderr, "llama.cpp: head rows failed\n"); return 1; }
    void *(*get_memory)(struct llama_context *);
    bool (*seq_rm)(void *, llama_seq_id, llama_pos, llama_pos);
    *(void **)&get_memory = dlsym(L.llama, "llama_get_memory");
    *(void **)&seq_rm = dlsym(L.llama, "llama_memory_seq_rm");
    if (!get_memory || !seq_rm) { fprintf(stderr, "libllama lacks llama_get_memory / llama_memory_seq_rm\n"); return 1; }

    struct llama_batch tb = one_row(0), hb = one_row(hd);
    double best_k_tok = 1e30, best_k_step = 1e30, best_l_tok = 1e30, best_l_step = 1e30;
    kite_gen_params gp = kite_gen_default_params();
    gp.temperature = 0.0f;
    for (int r = 0; r < rounds; r++) {
        /* kite: a one-token pass past the prompt (nothing committed), then a chain. */
        double t0 = kite_now_ms();
        int32_t tok = prompt[5];
        kite_forward(&target->weights, &s->kv, &s->scratch, s->pool, &tok, NULL, 0, 1, s->n_past, s->logits, false);
        double t1 = kite_now_ms();
        kite_draft_tree t;
        kite_error e = {0};
        if (kite_spec_draft(&s->spec, s, prompt[7], steps, &gp, &t, &e)) { fprintf(stderr, "kite: %s\n", e.msg); return 1; }
        double t2 = kite_now_ms();
        if (t1 - t0 < best_k_tok) best_k_tok = t1 - t0;
        if ((t2 - t1) / steps < best_k_step) best_k_step = (t2 - t1) / steps;
        /* llama.cpp: a one-token decode at the same position (removed by decoding over it next round). */
        tb.token[0] = prompt[5], tb.pos[0] = N_PROMPT;
        seq_rm(get_memory(tgt), 0, N_PROMPT, -1);
        seq_rm(get_memory(dft), 0, N_PROMPT - 1, -1);
        t0 = kite_now_ms();
        if (L.decode(tgt, tb)) { fprintf(stderr, "llama.cpp: decode failed\n"); return 1; }
        (void)L.get_logits_ith(tgt, 0);
        t1 = kite_now_ms();
        hb.token[0] = prompt[7], hb.pos[0] = N_PROMPT - 1;
        memcpy(hb.embd, g + (size_t)(N_PROMPT - 1) * hd, sizeof(float) * (size_t)hd);
        for (int k = 0; k < steps; k++) {
            if (L.decode(dft, hb)) { fprintf(stderr, "llama.cpp: head decode failed\n"); return 1; }
            const float *lg = L.get_logits_ith(dft, 0);
            int32_t best = 0;
            for (int32_t v = 1; v < V; v++) if (lg[v] > lg[best]) best = v;
            hb.token[0] = best, hb.pos[0] = N_PROMPT + k;
            memcpy(hb.embd, L.get_nextn_ith(dft, 0), sizeof(float) * (size_t)hd);
        }
        t2 = kite_now_ms();
        if (t1 - t0 < best_l_tok) best_l_tok = t1 - t0;
        if ((t2 - t1) / steps < best_l_step) best_l_step = (t2 - t1) / steps;
    }
    printf("%d threads, best of %d rounds, head chains of %d\n", threads, rounds, steps);
    printf("kite:      target token %8.3f ms, head step %8.3f ms, step/token %.3f\n", best_k_tok, best_k_step, best_k_step / best_k_tok);
    printf("llama.cpp: target token %8.3f ms, head step %8.3f ms, step/token %.3f\n", best_l_tok, best_l_step, best_l_step / best_l_tok);
    printf("kite / llama.cpp time: target token %.2f, head step %.2f\n", best_k_tok / best_l_tok, best_k_step / best_l_step);
    return 0;
}
