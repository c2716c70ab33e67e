#include "default_model.h"

#include <stdio.h>

#include "kite.h"

int kite_cli_model_or_default(const char **model, const char *verb, bool quiet) {
    if (*model) return 0;
    char err[1024];
    const char *path;
    if (kite_default_model_path(&path, err, sizeof err)) {
        fprintf(stderr, "kite: error: %s needs --model PATH (%s)\n", verb, err);
        return 2;
    }
    if (!quiet) fprintf(stderr, "kite: no --model given, using the default model %s\n", path);
    *model = path;
    return 0;
}
