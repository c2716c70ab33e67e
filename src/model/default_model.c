/* Where the default model is (kite_default_model_path in kite.h). The two compiled-in places come from
 * CMake (KITE_INSTALLED_DEFAULT_MODEL, KITE_SOURCE_DEFAULT_MODEL) and are set on this file only, so a
 * new install prefix recompiles one file. */
#include <stdlib.h>
#include <sys/stat.h>

#include "base/error.h"

#ifndef KITE_INSTALLED_DEFAULT_MODEL
#error "KITE_INSTALLED_DEFAULT_MODEL must name the installed default model (set by CMakeLists.txt)"
#endif
#ifndef KITE_SOURCE_DEFAULT_MODEL
#error "KITE_SOURCE_DEFAULT_MODEL must name the default model in the source tree (set by CMakeLists.txt)"
#endif

static bool is_regular_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int kite_default_model_path(const char **path, char *err, size_t err_size) {
    kite_error e = {0};
    if (!path) {
        kite_fail(&e, KITE_ERR_INVALID_ARG, "kite_default_model_path: path is NULL");
        return kite_error_export(&e, err, err_size);
    }
    *path = NULL;
    /* The variable wins even when it names nothing: a user who set it meant that file, and quietly
     * running another model would hide the typo. */
    const char *from_env = getenv("KITE_DEFAULT_MODEL");
    if (from_env && *from_env) {
        if (is_regular_file(from_env)) *path = from_env;
        else kite_fail(&e, KITE_ERR_IO, "KITE_DEFAULT_MODEL=%s is not a file", from_env);
        return kite_error_export(&e, err, err_size);
    }
    static const char *const compiled_in[] = {KITE_INSTALLED_DEFAULT_MODEL, KITE_SOURCE_DEFAULT_MODEL};
    for (size_t i = 0; i < sizeof compiled_in / sizeof compiled_in[0]; i++) {
        if (is_regular_file(compiled_in[i])) {
            *path = compiled_in[i];
            return KITE_OK;
        }
    }
    kite_fail(&e, KITE_ERR_IO, "no default model: KITE_DEFAULT_MODEL is not set, and neither %s (installed) nor %s (source tree) exists",
              KITE_INSTALLED_DEFAULT_MODEL, KITE_SOURCE_DEFAULT_MODEL);
    return kite_error_export(&e, err, err_size);
}
