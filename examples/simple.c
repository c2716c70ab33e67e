/* The smallest complete kite program: load a model, stream a greedy completion. */
#include <stdio.h>
#include <string.h>

#include "kite.h"

static bool print_token(int32_t id, const char *text, size_t len, void *user_data) {
    (void)id;
    (void)user_data;
    fwrite(text, 1, len, stdout);
    return true; /* keep going */
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL PROMPT\n", argv[0]);
        return 2;
    }
    char err[512];
    kite_model *model;
    kite_model_params mp = kite_model_default_params();
    if (kite_model_open(&model, argv[1], &mp, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        return 1;
    }
    kite_session *session;
    if (kite_session_open(&session, model, NULL, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        kite_model_free(model);
        return 1;
    }
    int32_t ids[1024];
    size_t n_ids;
    kite_gen_params gp = kite_model_gen_params(model);
    gp.temperature = 0; /* greedy */
    gp.max_tokens = 32;
    int status = kite_tokenize(model, argv[2], strlen(argv[2]), true, false, ids, 1024, &n_ids, err, sizeof err);
    if (!status) status = kite_prompt(session, ids, n_ids, err, sizeof err);
    if (!status) status = kite_generate(session, &gp, print_token, NULL, err, sizeof err);
    if (status) fprintf(stderr, "error: %s\n", err);
    printf("\n");
    kite_session_free(session);
    kite_model_free(model);
    return status ? 1 : 0;
}
