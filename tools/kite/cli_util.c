#include "cli_util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

bool kite_cli_parse_ll(const char *s, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return false;
    *out = v;
    return true;
}

bool kite_cli_parse_long(const char *s, long lo, long hi, long *out) {
    long long v;
    if (!kite_cli_parse_ll(s, lo, hi, &v)) return false;
    *out = (long)v;
    return true;
}

bool kite_cli_parse_i32(const char *s, long long lo, long long hi, int32_t *out) {
    long long v;
    if (lo < INT32_MIN) lo = INT32_MIN;
    if (hi > INT32_MAX) hi = INT32_MAX;
    if (!kite_cli_parse_ll(s, lo, hi, &v)) return false;
    *out = (int32_t)v;
    return true;
}

bool kite_cli_parse_double(const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) return false;
    *out = v;
    return true;
}

bool kite_cli_parse_float(const char *s, float *out) {
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || end == s || *end) return false;
    *out = v;
    return true;
}

int kite_cli_usage_verror(const char *prefix, const char *help, const char *fmt, va_list ap) {
    fprintf(stderr, "%s: error: ", prefix);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see %s)\n", help);
    return 2;
}

int kite_cli_usage_error(const char *prefix, const char *help, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = kite_cli_usage_verror(prefix, help, fmt, ap);
    va_end(ap);
    return rc;
}

void kite_cli_warn_limits(const char *prefix, int32_t threads, int32_t ctx, int32_t n_ctx_train) {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (threads > 0 && cpus > 0 && threads > cpus)
        fprintf(stderr, "%s: warning: --threads %d is more than the %ld CPUs online: the extra threads only wait for a core\n",
                prefix, threads, cpus);
    if (ctx > 0 && n_ctx_train > 0 && ctx > n_ctx_train)
        fprintf(stderr, "%s: warning: --ctx %d is more than the %d tokens the model was trained with: text past them is "
                        "likely to degrade\n", prefix, ctx, n_ctx_train);
}
