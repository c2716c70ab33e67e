/* Where the default model is (kite_default_model_path in kite.h). The compiled-in places come from
 * CMake (KITE_INSTALLED_DEFAULT_MODEL, KITE_SOURCE_DEFAULT_MODEL, and the installed model's path relative
 * to the installed kite and libkite.so: KITE_MODEL_FROM_BINDIR, KITE_MODEL_FROM_LIBDIR) and are set on
 * this file only, so a new install prefix recompiles one file. */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"

#if !defined(KITE_INSTALLED_DEFAULT_MODEL) || !defined(KITE_SOURCE_DEFAULT_MODEL) || \
    !defined(KITE_MODEL_FROM_BINDIR) || !defined(KITE_MODEL_FROM_LIBDIR)
#error "the default model's places are set by CMakeLists.txt"
#endif

static bool is_regular_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* The file at `relative` from file's folder, resolved (no "bin/.." left in it), into out (PATH_MAX
 * bytes); false when there is none. */
static bool beside(const char *file, const char *relative, char *out) {
    const char *slash = strrchr(file, '/');
    char joined[PATH_MAX];
    if (!slash) return false;
    int n = snprintf(joined, sizeof joined, "%.*s/%s", (int)(slash - file), file, relative);
    return n > 0 && (size_t)n < sizeof joined && realpath(joined, out) && is_regular_file(out);
}

/* The copy under the prefix the running program was installed into, which is not the configured
 * prefix after `cmake --install --prefix P`: found from the running executable (the CLI links libkite
 * statically) and from the object holding this function (libkite.so for programs linking it). Fills
 * out (PATH_MAX bytes) and returns true when one exists. */
static bool installed_beside_program(char *out) {
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        if (beside(exe, KITE_MODEL_FROM_BINDIR, out)) return true;
    }
    Dl_info info;
    if (dladdr((void *)&kite_default_model_path, &info) && info.dli_fname && info.dli_fname[0] == '/')
        if (beside(info.dli_fname, KITE_MODEL_FROM_LIBDIR, out)) return true;
    return false;
}

/* Looked up once per process (the program does not move while it runs), so the string returned stays
 * valid and unchanged for every caller on any thread. */
static pthread_once_t g_beside_once = PTHREAD_ONCE_INIT;
static char g_beside_program[PATH_MAX];
static bool g_have_beside;

static void find_beside_program(void) { g_have_beside = installed_beside_program(g_beside_program); }

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
    pthread_once(&g_beside_once, find_beside_program);
    if (g_have_beside) {
        *path = g_beside_program;
        return KITE_OK;
    }
    static const char *const compiled_in[] = {KITE_INSTALLED_DEFAULT_MODEL, KITE_SOURCE_DEFAULT_MODEL};
    for (size_t i = 0; i < sizeof compiled_in / sizeof compiled_in[0]; i++) {
        if (is_regular_file(compiled_in[i])) {
            *path = compiled_in[i];
            return KITE_OK;
        }
    }
    kite_fail(&e, KITE_ERR_IO, "no default model: KITE_DEFAULT_MODEL is not set, none is installed beside this program, and neither %s (installed) nor %s (source tree) exists",
              KITE_INSTALLED_DEFAULT_MODEL, KITE_SOURCE_DEFAULT_MODEL);
    return kite_error_export(&e, err, err_size);
}
