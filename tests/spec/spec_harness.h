/* What the speculative-decoding tests (test_spec_dflash, _dflash2, _eagle3, _mtp, _family) share: random
 * models written to a temporary folder, sessions on one target, plain-versus-speculative runs compared
 * token for token, and the checks the learned drafters have in common (the exactness sweep over
 * configurations, drafters, budgets and widths; rejection verification; a long context and a deep
 * truncation; continuous batching; a refused drafter). Failures go through cmocka (fail_msg). */
#ifndef KITE_TESTS_SPEC_HARNESS_H
#define KITE_TESTS_SPEC_HARNESS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "engine/engine.h"
#include "kite.h"

enum { SPEC_MAX_GEN = 320 };

/* The ids one run generated (the first SPEC_MAX_GEN kept, n counts all) and its statistics. */
typedef struct spec_run {
    int32_t ids[SPEC_MAX_GEN];
    int n;
    kite_stats stats;
} spec_run;

/* What every run of a test uses; the test's setup fills it. */
typedef struct spec_harness {
    char dir[64];          /* the temporary folder (spec_make_dir) */
    kite_model *target;    /* the model sessions decode with */
    int32_t n_ctx;         /* their context */
    const int32_t *prompt; /* the prompt of spec_prompt */
    int32_t n_prompt;
    int32_t gen;           /* tokens each run generates (the configurations' max_tokens) */
    uint64_t seed;         /* configuration k samples with seed + k */
} spec_harness;
extern spec_harness spec_h;

/* ---- files and models -------------------------------------------------------------------------- */

/* Makes spec_h.dir, /tmp/kite-spec-NAME-XXXXXX; non-zero on failure. */
int spec_make_dir(const char *name);
/* spec_h.dir/file into out (128 bytes). */
void spec_path(char out[128], const char *file);
/* Removes every file of spec_h.dir and the folder. */
void spec_remove_dir(void);
/* kite_write_random_model of shape in type with seed (target_path: a drafter's target, or NULL); non-zero
 * (said on stderr) on failure. */
int spec_write_model(const char *path, const char *shape, const char *type, uint64_t seed, const char *target);
/* The model at path with one thread, or NULL (said on stderr). */
kite_model *spec_open_model(const char *path);
/* The block drafters' suites (DFlash-2, DSpark): spec_h.dir for `name`, the `tiny` target (seed 11) at
 * target_path and, at drafter_path[d], a drafter of shapes[d] written for it, all opened (spec_h.target,
 * drafters[d]); spec_h takes SPEC_BLOCK_PROMPT ids of the usual pattern as its prompt (in prompt), a context of
 * 512, 40 generated tokens and seed 777. Non-zero on failure; spec_block_teardown undoes it. */
enum { SPEC_BLOCK_PROMPT = 60 };
int spec_block_setup(const char *name, const char *const *shapes, int n, char target_path[128], char (*drafter_path)[128],
                     kite_model **drafters, int32_t prompt[SPEC_BLOCK_PROMPT]);
void spec_block_teardown(kite_model **drafters, int n);
/* src without its last `cut` bytes, written to dst; non-zero on failure. */
int spec_write_truncated(const char *src, const char *dst, long cut);

/* A GGUF file written again with one edit (the unset fields do nothing). */
typedef struct spec_edit {
    const char *drop_key;    /* a key left out */
    const char *set_key;     /* a u32 key set to set_value */
    uint32_t set_value;
    const char *drop_tensor; /* a tensor left out */
    const char *reshape;     /* a tensor written with ne reshape_ne (its data cut or padded with zeros) */
    int64_t reshape_ne[3];
    uint32_t reshape_dims;
    const char *add_zeros;   /* an F32 tensor of zeros [add_ne[0], add_ne[1]] added */
    int64_t add_ne[2];
} spec_edit;
int spec_write_edited(const char *src, const char *dst, const spec_edit *ed);

/* ---- runs ---------------------------------------------------------------------------------------- */

/* Configuration k (0 greedy, 1 T 0.8 top-k 40 top-p 0.9, 2 T 1.0; others greedy, for the test to
 * change): spec_h.gen tokens, EOS ignored, seed spec_h.seed + k, no other truncation of the
 * distribution. */
kite_gen_params spec_gen_config(int which);
/* The same, and configuration 3: T 0.7 with repeat (1.3 over the last 32), presence (0.4) and frequency
 * (0.2) penalties. */
kite_gen_params spec_gen_config_penalties(int which);
/* The token callback filling a spec_run. */
bool spec_collect(int32_t id, const char *text, size_t len, void *user);
/* A session on m (spec_h.n_ctx positions, one thread). */
kite_session *spec_open_session_on(kite_model *m);
kite_session *spec_open_session(void); /* on spec_h.target */
/* A session on spec_h.target drafting as sp (NULL: plain). */
kite_session *spec_session_with(const kite_spec_params *sp);
void spec_set_spec(kite_session *s, const kite_spec_params *sp);
void spec_prompt(kite_session *s); /* spec_h.prompt */
void spec_prompt_with(kite_session *s, const int32_t *ids, int32_t n);
/* One kite_generate into r (cleared first), with the session's statistics. */
void spec_gen(kite_session *s, const kite_gen_params *gp, spec_run *r);
/* A fresh session (drafting as sp, NULL: plain) fed ids and generating with gp. */
void spec_run_with(const kite_spec_params *sp, const int32_t *ids, int32_t n, const kite_gen_params *gp, spec_run *r);
void spec_run_prompt(const kite_spec_params *sp, const kite_gen_params *gp, spec_run *r); /* spec_h.prompt */
/* The speculative parameters: drafter d with its model (NULL for the n-gram and MTP drafters). */
kite_spec_params spec_params(kite_drafter d, kite_model *draft, int32_t budget, int32_t width);

/* ---- checks --------------------------------------------------------------------------------------- */

void spec_assert_same(const spec_run *want, const spec_run *got, const char *what);
/* Every pass but the last drafted at least per_pass tokens. */
void spec_assert_drafted(const spec_run *got, int32_t per_pass, const char *what);
/* Equal feature rows (width, first position, count, every row); want_width 0: any width. */
void spec_assert_same_features(const kite_session *plain, const kite_session *spec, int32_t want_width, const char *what);

/* One drafter of an exactness sweep. */
typedef struct spec_sweep_drafter {
    const char *name;   /* in messages */
    kite_drafter kind;
    kite_model *model;  /* NULL for the n-gram and MTP drafters */
    int32_t max_depth;  /* > 0: a chain drafts no deeper (a DFlash block's B - 1), checked */
    enum { SPEC_CHECK_NONE, SPEC_CHECK_SOME, SPEC_CHECK_BUDGET } check; /* nothing; something drafted; every pass the budget */
} spec_sweep_drafter;

/* For every configuration, plain decoding (spec_h.gen tokens) against each drafter at each budget (0:
 * adaptive, not checked for drafting) and tree width: the same ids, and drafts as `check` says. */
typedef struct spec_sweep {
    const char *label;                  /* "<label> <drafter> config C budget B width W" */
    int n_configs;
    kite_gen_params (*config)(int which);
    const spec_sweep_drafter *drafters;
    int n_drafters;
    const int32_t *budgets;
    int n_budgets;
    const int32_t *widths;
    int n_widths;
    bool (*skip_case)(int config, int drafter, int32_t budget); /* NULL: every case */
    /* results */
    int64_t drafted, accepted, runs;
    int64_t accepted_by_config[8];
} spec_sweep;
void spec_sweep_run(spec_sweep *sw);

/* Rejection verification (sp with KITE_VERIFY_REJECTION), greedy and at T 1.0 (configurations 0 and 2 of
 * config): the same tokens twice for a seed, plain decoding's when greedy, and drafts were made. */
void spec_check_rejection(const kite_spec_params *sp, kite_gen_params (*config)(int which), const char *label);
/* 300 tokens past a feature slack of 256 rows (config 1), a truncation to 20 below the rows held and
 * 5 more prompt tokens: output plain decoding's, no feature rows kept without the drafter and at most
 * 256 + 64 with it. */
void spec_check_long_context(const kite_spec_params *sp, kite_gen_params (*config)(int which));
/* Three sessions drafting as sp[i] with configuration i, stepped together by kite_batch from prompts
 * spec_h.prompt + 7 i: each one's tokens and feature rows are a plain session's (capturing the same
 * layers), and each drafted. */
void spec_check_batch(const kite_spec_params sp[3], kite_gen_params (*config)(int which), int32_t feature_width, const char *who);
/* sp refused with a message holding want1 and want2 (NULL: only want1), nothing captured; the session
 * is returned for more checks (spec_assert_plain_after). */
kite_session *spec_refused(const kite_spec_params *sp, const char *want1, const char *want2);
/* s (freed here), fed the prompt, decodes as plain decoding with gp. */
void spec_assert_plain_after(kite_session *s, const kite_gen_params *gp, const char *what);

/* A session drafting as sp after decoding with gp from the prompt (and when truncated, cut back to
 * n_prompt + 9, fed 5 prompt tokens and 11 more generated), its root (gen.cur_id) the last emitted
 * token: the cache tests draft from it. first: the first generation's statistics (may be NULL). */
kite_session *spec_session_to_draft_from(const kite_spec_params *sp, kite_gen_params gp, bool truncated, kite_stats *first);
/* A draft of 12 from s->gen.cur_id with configuration 1 of config. */
void spec_draft_now(kite_session *s, kite_gen_params (*config)(int which), kite_draft_tree *t);
/* The same tree: n nodes (checked against want_n) with equal tokens and parents. */
void spec_assert_same_tree(const kite_draft_tree *a, const kite_draft_tree *b, int32_t want_n);

#endif
