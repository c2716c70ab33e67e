/* Option parsing every verb shares: numbers checked against a range (the whole string must be the
 * number) and the one-line usage error that exits 2. Uses only the C library. */
#ifndef KITE_CLI_UTIL_H
#define KITE_CLI_UTIL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>

/* A base-10 integer in [lo, hi]; false for an empty string, trailing characters or overflow. */
bool kite_cli_parse_ll(const char *s, long long lo, long long hi, long long *out);
bool kite_cli_parse_long(const char *s, long lo, long hi, long *out);
bool kite_cli_parse_i32(const char *s, long long lo, long long hi, int32_t *out);

/* A number in [lo, hi] (NaN never is). */
bool kite_cli_parse_double(const char *s, double lo, double hi, double *out);
/* Any finite or infinite float strtof accepts (callers check the range they need). */
bool kite_cli_parse_float(const char *s, float *out);

/* Prints "PREFIX: error: MESSAGE (see HELP)" on stderr and returns 2, the exit status of a usage error.
 * prefix is e.g. "kite" or "kite run"; help e.g. "kite chat --help". */
int kite_cli_usage_error(const char *prefix, const char *help, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int kite_cli_usage_verror(const char *prefix, const char *help, const char *fmt, va_list ap) __attribute__((format(printf, 3, 0)));

/* Settings that work but are likely mistakes, warned about on stderr as "PREFIX: warning: ...": more
 * threads than CPUs online, more context than the model was trained with (0 = not set / unknown). */
void kite_cli_warn_limits(const char *prefix, int32_t threads, int32_t ctx, int32_t n_ctx_train);

#endif
