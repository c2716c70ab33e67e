/* The objects behind kite.h's opaque handles. */
#ifndef KITE_ENGINE_ENGINE_H
#define KITE_ENGINE_ENGINE_H

#include <stdatomic.h>

#include "model/model.h"
#include "tokenize/tokenizer.h"

struct kite_model {
    kite_source src;        /* mapped files and canonical tensors */
    kite_weights weights;   /* tensors bound to layers (unset when vocab_only) */
    bool vocab_only;        /* only the tokenizer is usable */
    int32_t n_vocab;        /* the model's vocabulary (rows of the embedding), or the tokenizer's */
    kite_tokenizer *tokenizer;
    int32_t n_threads;      /* default for sessions */
    kite_gen_params gen_defaults;
};

enum { KITE_PREFILL_CHUNK = 64 }; /* tokens per forward pass while processing a prompt */

struct kite_session {
    kite_model *model;
    kite_kv_cache kv;
    kite_forward_scratch scratch;
    kite_pool *pool;
    int32_t n_ctx;
    int32_t n_past;          /* tokens whose K/V are in the cache */
    int32_t *history;        /* [n_ctx] the tokens at positions 0..n_past-1 */
    float *logits;           /* [n_vocab] after the last token of the context */
    bool have_logits;
    int32_t unfed_token;     /* generated last and not yet run through the model, or -1 */
    atomic_bool cancel;
    kite_stats stats;
    double last_prompt_ms;   /* duration of the latest kite_prompt, counted into the next ttft */
};

double kite_now_ms(void);

#endif
