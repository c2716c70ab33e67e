/* See spec_harness.h. */
#include "spec_harness.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/gguf.h"
#include "io/mmap.h"
#include "quant/types.h"

spec_harness spec_h;

/* ---- files and models -------------------------------------------------------------------------- */

int spec_make_dir(const char *name) {
    snprintf(spec_h.dir, sizeof spec_h.dir, "/tmp/kite-spec-%s-XXXXXX", name);
    return mkdtemp(spec_h.dir) ? 0 : -1;
}

void spec_path(char out[128], const char *file) { snprintf(out, 128, "%s/%s", spec_h.dir, file); }

void spec_remove_dir(void) {
    DIR *d = opendir(spec_h.dir);
    if (d) {
        for (struct dirent *ent; (ent = readdir(d));) {
            if (!strcmp(ent->d_name, ".") || !strcmp(ent->d_name, "..")) continue;
            char path[384];
            snprintf(path, sizeof path, "%s/%s", spec_h.dir, ent->d_name);
            unlink(path);
        }
        closedir(d);
    }
    rmdir(spec_h.dir);
}

int spec_write_model(const char *path, const char *shape, const char *type, uint64_t seed, const char *target) {
    char err[512];
    kite_random_model_params rp = {.shape = shape, .type = type, .seed = seed, .target_path = target};
    if (kite_write_random_model(path, &rp, err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", path, err);
        return -1;
    }
    return 0;
}

int spec_block_setup(const char *name, const char *const *shapes, int n, char target_path[128], char (*drafter_path)[128],
                     kite_model **drafters, int32_t prompt[SPEC_BLOCK_PROMPT]) {
    if (spec_make_dir(name)) return -1;
    spec_path(target_path, "target.gguf");
    if (spec_write_model(target_path, "tiny", "f32", 11, NULL)) return -1;
    for (int d = 0; d < n; d++) {
        snprintf(drafter_path[d], 128, "%s/drafter%d.gguf", spec_h.dir, d);
        if (spec_write_model(drafter_path[d], shapes[d], "f32", 11, target_path)) return -1;
    }
    if (!(spec_h.target = spec_open_model(target_path))) return -1;
    for (int d = 0; d < n; d++)
        if (!(drafters[d] = spec_open_model(drafter_path[d]))) return -1;
    for (int i = 0; i < SPEC_BLOCK_PROMPT; i++) prompt[i] = 3 + (int32_t)((i % 10) * 37 + (i / 10) * 5) % 500;
    spec_h.n_ctx = 512, spec_h.prompt = prompt, spec_h.n_prompt = SPEC_BLOCK_PROMPT;
    spec_h.gen = 40, spec_h.seed = 777;
    return 0;
}

void spec_block_teardown(kite_model **drafters, int n) {
    kite_model_free(spec_h.target);
    spec_h.target = NULL;
    for (int d = 0; d < n; d++) kite_model_free(drafters[d]);
    spec_remove_dir();
}

kite_model *spec_open_model(const char *path) {
    char err[512];
    kite_model_params mp = kite_model_default_params();
    mp.n_threads = 1;
    kite_model *m = NULL;
    if (kite_model_open(&m, path, &mp, err, sizeof err)) {
        fprintf(stderr, "cannot open %s: %s\n", path, err);
        return NULL;
    }
    return m;
}

int spec_write_truncated(const char *src, const char *dst, long cut) {
    FILE *in = fopen(src, "rb"), *out = fopen(dst, "wb");
    if (!in || !out) {
        if (in) fclose(in);
        if (out) fclose(out);
        return -1;
    }
    fseek(in, 0, SEEK_END);
    long size = ftell(in);
    fseek(in, 0, SEEK_SET);
    for (long i = 0; i < size - cut; i++) fputc(fgetc(in), out);
    fclose(in);
    fclose(out);
    return 0;
}

static bool key_is(kite_gguf_str k, const char *name) { return name && k.len == strlen(name) && !memcmp(k.ptr, name, k.len); }

int spec_write_edited(const char *src, const char *dst, const spec_edit *ed) {
    kite_mapped_file f;
    kite_error e = {0};
    if (kite_map_file(&f, src, &e)) return -1;
    kite_gguf *g = NULL;
    if (kite_gguf_open(&g, f.data, f.size, &e)) {
        kite_unmap_file(&f);
        return -1;
    }
    kite_gguf_writer *w = kite_gguf_writer_new();
    for (int64_t i = 0; i < kite_gguf_n_kv(g); i++) {
        kite_gguf_str k = kite_gguf_key(g, i);
        if (key_is(k, ed->drop_key) || key_is(k, ed->set_key)) continue;
        kite_gguf_w_copy_kv(w, g, i);
    }
    if (ed->set_key) kite_gguf_w_u32(w, ed->set_key, ed->set_value);
    void *pad = NULL, *zeros = NULL;
    for (int64_t i = 0; i < kite_gguf_n_tensors(g); i++) {
        const kite_gguf_tensor *t = kite_gguf_tensor_at(g, i);
        char name[96];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        if (ed->drop_tensor && !strcmp(name, ed->drop_tensor)) continue;
        if (ed->reshape && !strcmp(name, ed->reshape)) {
            size_t n = sizeof(float);
            for (uint32_t k = 0; k < ed->reshape_dims; k++) n *= (size_t)ed->reshape_ne[k];
            pad = calloc(1, n);
            memcpy(pad, t->data, n < t->n_bytes ? n : t->n_bytes);
            kite_gguf_w_tensor(w, name, KITE_TYPE_F32, ed->reshape_dims, ed->reshape_ne, pad, n);
            continue;
        }
        kite_gguf_w_tensor(w, name, t->type, t->n_dims, t->ne, t->data, t->n_bytes);
    }
    if (ed->add_zeros) {
        size_t n = sizeof(float) * (size_t)(ed->add_ne[0] * ed->add_ne[1]);
        zeros = calloc(1, n);
        kite_gguf_w_tensor(w, ed->add_zeros, KITE_TYPE_F32, 2, ed->add_ne, zeros, n);
    }
    int st = kite_gguf_writer_save(w, dst, &e);
    free(pad);
    free(zeros);
    kite_gguf_writer_free(w);
    kite_gguf_free(g);
    kite_unmap_file(&f);
    return st ? -1 : 0;
}

/* ---- runs ---------------------------------------------------------------------------------------- */

kite_gen_params spec_gen_config(int which) {
    kite_gen_params gp = kite_gen_default_params();
    gp.max_tokens = spec_h.gen;
    gp.ignore_eos = true;
    gp.seed = spec_h.seed + (uint64_t)which;
    gp.top_k = 0, gp.top_p = 1.0f, gp.min_p = 0.0f;
    if (which == 1) gp.temperature = 0.8f, gp.top_k = 40, gp.top_p = 0.9f;
    else if (which == 2) gp.temperature = 1.0f;
    else gp.temperature = 0.0f;
    return gp;
}

kite_gen_params spec_gen_config_penalties(int which) {
    kite_gen_params gp = spec_gen_config(which);
    if (which == 3) gp.temperature = 0.7f, gp.repeat_penalty = 1.3f, gp.presence_penalty = 0.4f, gp.frequency_penalty = 0.2f,
                    gp.penalty_last_n = 32;
    return gp;
}

bool spec_collect(int32_t id, const char *text, size_t len, void *user) {
    (void)text, (void)len;
    spec_run *r = user;
    if (r->n < SPEC_MAX_GEN) r->ids[r->n] = id;
    r->n++;
    return true;
}

kite_session *spec_open_session_on(kite_model *m) {
    kite_session_params sp = kite_session_default_params();
    sp.n_ctx = spec_h.n_ctx;
    sp.n_threads = 1;
    kite_session *s = NULL;
    char err[512];
    if (kite_session_open(&s, m, &sp, err, sizeof err)) fail_msg("session: %s", err);
    return s;
}

kite_session *spec_open_session(void) { return spec_open_session_on(spec_h.target); }

void spec_set_spec(kite_session *s, const kite_spec_params *sp) {
    char err[512];
    if (kite_session_set_spec(s, sp, err, sizeof err)) fail_msg("kite_session_set_spec: %s", err);
}

kite_session *spec_session_with(const kite_spec_params *sp) {
    kite_session *s = spec_open_session();
    if (sp) spec_set_spec(s, sp);
    return s;
}

void spec_prompt_with(kite_session *s, const int32_t *ids, int32_t n) {
    char err[512];
    if (kite_prompt(s, ids, (size_t)n, err, sizeof err)) fail_msg("kite_prompt: %s", err);
}

void spec_prompt(kite_session *s) { spec_prompt_with(s, spec_h.prompt, spec_h.n_prompt); }

void spec_gen(kite_session *s, const kite_gen_params *gp, spec_run *r) {
    memset(r, 0, sizeof *r);
    char err[512];
    if (kite_generate(s, gp, spec_collect, r, err, sizeof err)) fail_msg("kite_generate: %s", err);
    kite_session_stats(s, &r->stats);
}

void spec_run_with(const kite_spec_params *sp, const int32_t *ids, int32_t n, const kite_gen_params *gp, spec_run *r) {
    kite_session *s = spec_session_with(sp);
    spec_prompt_with(s, ids, n);
    spec_gen(s, gp, r);
    kite_session_free(s);
}

void spec_run_prompt(const kite_spec_params *sp, const kite_gen_params *gp, spec_run *r) {
    spec_run_with(sp, spec_h.prompt, spec_h.n_prompt, gp, r);
}

kite_spec_params spec_params(kite_drafter d, kite_model *draft, int32_t budget, int32_t width) {
    kite_spec_params sp = kite_spec_default_params();
    sp.drafter = d;
    sp.draft_model = draft;
    sp.budget = budget;
    sp.tree_width = width;
    return sp;
}

/* ---- checks --------------------------------------------------------------------------------------- */

void spec_assert_same(const spec_run *want, const spec_run *got, const char *what) {
    int at = 0;
    while (at < want->n && at < got->n && want->ids[at] == got->ids[at]) at++;
    if (want->n != got->n || at < want->n) fail_msg("%s: %d tokens vs plain %d, first difference at %d", what, got->n, want->n, at);
}

void spec_assert_drafted(const spec_run *got, int32_t per_pass, const char *what) {
    if (got->stats.target_passes < 1 || got->stats.drafted < (int64_t)per_pass * (got->stats.target_passes - 1))
        fail_msg("%s: only %lld tokens drafted in %lld passes", what, (long long)got->stats.drafted, (long long)got->stats.target_passes);
}

void spec_assert_same_features(const kite_session *plain, const kite_session *spec, int32_t want_width, const char *what) {
    const kite_features *fa = &plain->features, *fb = &spec->features;
    if (fa->width != fb->width || fa->pos0 != fb->pos0 || fa->n != fb->n)
        fail_msg("%s: features width %d pos0 %d n %d vs plain width %d pos0 %d n %d", what, fb->width, fb->pos0, fb->n, fa->width,
                 fa->pos0, fa->n);
    if (want_width) assert_int_equal(fa->width, want_width);
    for (int32_t p = 0; p < fa->n; p++)
        if (memcmp(fa->rows + (size_t)p * fa->width, fb->rows + (size_t)p * fb->width, sizeof(float) * (size_t)fa->width))
            fail_msg("%s: the feature row of position %d differs from plain decoding's", what, fa->pos0 + p);
}

void spec_sweep_run(spec_sweep *sw) {
    assert_true(sw->n_configs <= (int)(sizeof sw->accepted_by_config / sizeof sw->accepted_by_config[0]));
    for (int cfg = 0; cfg < sw->n_configs; cfg++) {
        kite_gen_params gp = sw->config(cfg);
        spec_run plain, got;
        spec_run_prompt(NULL, &gp, &plain);
        assert_int_equal(plain.n, spec_h.gen);
        for (int d = 0; d < sw->n_drafters; d++) {
            const spec_sweep_drafter *dr = &sw->drafters[d];
            for (int b = 0; b < sw->n_budgets; b++)
                for (int w = 0; w < sw->n_widths; w++) {
                    const int32_t budget = sw->budgets[b], width = sw->widths[w];
                    if (sw->skip_case && sw->skip_case(cfg, d, budget)) continue;
                    kite_spec_params sp = spec_params(dr->kind, dr->model, budget, width);
                    spec_run_prompt(&sp, &gp, &got);
                    char what[160];
                    snprintf(what, sizeof what, "%s %s config %d budget %d width %d", sw->label, dr->name, cfg, budget, width);
                    spec_assert_same(&plain, &got, what);
                    if (dr->check == SPEC_CHECK_SOME && got.stats.drafted == 0) fail_msg("%s: nothing drafted", what);
                    if (dr->check == SPEC_CHECK_BUDGET && budget > 0) {
                        /* Every pass drafts the budget, as deep as the drafter reaches. */
                        const int32_t depth = dr->max_depth;
                        spec_assert_drafted(&got, width == 1 && depth > 0 && budget > depth ? depth : budget, what);
                        if (width == 1 && depth > 0 && got.stats.drafted_by_depth[depth] != 0) fail_msg("%s: drafted past the block", what);
                    }
                    sw->drafted += got.stats.drafted, sw->accepted += got.stats.accepted, sw->runs++;
                    sw->accepted_by_config[cfg] += got.stats.accepted;
                }
        }
    }
}

void spec_check_rejection(const kite_spec_params *sp, kite_gen_params (*config)(int which), const char *label) {
    kite_spec_params rejection = *sp;
    rejection.verify = KITE_VERIFY_REJECTION;
    for (int cfg = 0; cfg < 2; cfg++) {
        kite_gen_params gp = config(cfg == 0 ? 0 : 2);
        spec_run plain, a, b;
        spec_run_prompt(NULL, &gp, &plain);
        spec_run_prompt(&rejection, &gp, &a);
        spec_run_prompt(&rejection, &gp, &b);
        char what[128];
        snprintf(what, sizeof what, "%s rejection verification, run twice", label);
        spec_assert_same(&a, &b, what);
        snprintf(what, sizeof what, "%s rejection verification, greedy", label);
        if (cfg == 0) spec_assert_same(&plain, &a, what);
        assert_true(a.stats.drafted > 0);
    }
}

static void long_run(const kite_spec_params *sp, kite_gen_params (*config)(int which), spec_run *first, spec_run *second,
                     int32_t *held) {
    kite_session *s = spec_session_with(sp);
    spec_prompt(s);
    kite_gen_params gp = config(1);
    gp.max_tokens = 300;
    spec_gen(s, &gp, first);
    *held = s->features.n;
    char err[256];
    if (kite_session_truncate(s, 20, err, sizeof err)) fail_msg("truncate: %s", err);
    spec_prompt_with(s, spec_h.prompt + 7, 5);
    gp.max_tokens = spec_h.gen;
    spec_gen(s, &gp, second);
    kite_session_free(s);
}

void spec_check_long_context(const kite_spec_params *sp, kite_gen_params (*config)(int which)) {
    spec_run *r = calloc(4, sizeof *r);
    assert_non_null(r);
    int32_t held_plain, held_spec;
    long_run(NULL, config, &r[0], &r[1], &held_plain);
    long_run(sp, config, &r[2], &r[3], &held_spec);
    assert_int_equal(r[0].n, 300);
    spec_assert_same(&r[0], &r[2], "300 tokens, past the feature slack");
    spec_assert_same(&r[1], &r[3], "after a truncation below the feature rows");
    assert_int_equal(held_plain, 0); /* nothing captured without the drafter */
    if (held_spec > 256 + 64) fail_msg("%d feature rows held past the slack", held_spec);
    assert_true(held_spec > 0);
    free(r);
}

void spec_check_batch(const kite_spec_params sp[3], kite_gen_params (*config)(int which), int32_t feature_width, const char *who) {
    enum { N_SESS = 3 };
    kite_batch_params bp = kite_batch_default_params();
    bp.n_ctx = spec_h.n_ctx;
    bp.n_threads = 1;
    kite_batch *batch = NULL;
    char err[512];
    if (kite_batch_open(&batch, spec_h.target, &bp, err, sizeof err)) fail_msg("kite_batch_open: %s", err);
    kite_session *s[N_SESS];
    kite_gen_params gp[N_SESS];
    static spec_run got[N_SESS], want;
    for (int i = 0; i < N_SESS; i++) {
        s[i] = spec_session_with(&sp[i]);
        gp[i] = config(i);
        memset(&got[i], 0, sizeof got[i]);
        if (kite_session_start(s[i], spec_h.prompt + 7 * i, (size_t)(spec_h.n_prompt - 7 * i), &gp[i], spec_collect, &got[i], err,
                               sizeof err))
            fail_msg("kite_session_start: %s", err);
    }
    for (int steps = 0;; steps++) {
        bool busy = false;
        for (int i = 0; i < N_SESS; i++) busy |= kite_session_busy(s[i]);
        if (!busy) break;
        if (steps > 4 * (spec_h.n_prompt + spec_h.gen)) fail_msg("the batch did not finish");
        if (kite_batch_step(batch, s, N_SESS, err, sizeof err)) fail_msg("kite_batch_step: %s", err);
    }
    for (int i = 0; i < N_SESS; i++) {
        if (kite_session_result(s[i], err, sizeof err)) fail_msg("session %d: %s", i, err);
        kite_session_stats(s[i], &got[i].stats);
        if (got[i].stats.drafted == 0) fail_msg("session %d: %s drafted nothing", i, who);
        kite_session *plain = spec_open_session();
        kite_error e = {0};
        if (kite_session_set_capture(plain, s[i]->scratch.capture_layer, s[i]->scratch.n_capture, &e)) fail_msg("capture: %s", e.msg);
        spec_prompt_with(plain, spec_h.prompt + 7 * i, spec_h.n_prompt - 7 * i);
        spec_gen(plain, &gp[i], &want);
        char what[64];
        snprintf(what, sizeof what, "batched session %d (setting %d)", i, i);
        spec_assert_same(&want, &got[i], what);
        spec_assert_same_features(plain, s[i], feature_width, what);
        kite_session_free(plain);
        kite_session_free(s[i]);
    }
    kite_batch_free(batch);
}

kite_session *spec_refused(const kite_spec_params *sp, const char *want1, const char *want2) {
    kite_session *s = spec_open_session();
    char err[512] = "";
    assert_int_not_equal(kite_session_set_spec(s, sp, err, sizeof err), KITE_OK);
    if (!strstr(err, want1) || (want2 && !strstr(err, want2))) fail_msg("drafter refused with '%s'", err);
    assert_int_equal(s->features.width, 0); /* nothing captured for a refused drafter */
    return s;
}

void spec_assert_plain_after(kite_session *s, const kite_gen_params *gp, const char *what) {
    spec_run plain, after;
    spec_run_prompt(NULL, gp, &plain);
    spec_prompt(s);
    spec_gen(s, gp, &after);
    spec_assert_same(&plain, &after, what);
    kite_session_free(s);
}

kite_session *spec_session_to_draft_from(const kite_spec_params *sp, kite_gen_params gp, bool truncated, kite_stats *first) {
    kite_session *s = spec_session_with(sp);
    spec_prompt(s);
    spec_run r;
    spec_gen(s, &gp, &r);
    if (first) *first = r.stats;
    if (truncated) {
        char err[256];
        if (kite_session_truncate(s, spec_h.n_prompt + 9, err, sizeof err)) fail_msg("truncate: %s", err);
        spec_prompt_with(s, spec_h.prompt + 3, 5);
        gp.max_tokens = 11;
        spec_gen(s, &gp, &r);
    }
    s->gen.cur_id = r.ids[r.n - 1]; /* the root: the last emitted token */
    return s;
}

void spec_draft_now(kite_session *s, kite_gen_params (*config)(int which), kite_draft_tree *t) {
    kite_error e = {0};
    kite_gen_params gp = config(1);
    if (kite_spec_draft(&s->spec, s, s->gen.cur_id, 12, &gp, t, &e)) fail_msg("draft: %s", e.msg);
}

void spec_assert_same_tree(const kite_draft_tree *a, const kite_draft_tree *b, int32_t want_n) {
    assert_int_equal(a->n, want_n);
    assert_int_equal(a->n, b->n);
    for (int32_t j = 0; j < a->n; j++) {
        assert_int_equal(a->token[j], b->token[j]);
        assert_int_equal(a->parent[j], b->parent[j]);
    }
}
