/* Internal error reporting: a status plus a one-line message, filled where the failure is found. */
#ifndef KITE_BASE_ERROR_H
#define KITE_BASE_ERROR_H

#include "kite.h"

typedef struct kite_error {
    int status;     /* a kite_status */
    char msg[512];  /* one line, no trailing newline */
} kite_error;

/* Records status and a printf-style message in e (if e is non-NULL) and returns status, so a failure
 * site reads `return kite_fail(e, KITE_ERR_FORMAT, "gguf: ...", ...);`. */
int kite_fail(kite_error *e, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Copies e's message into a caller's (err, err_size) buffer and returns e->status. */
int kite_error_export(const kite_error *e, char *err, size_t err_size);

/* Library logging through the callback set by kite_set_log_callback (no-op without one). */
void kite_log(kite_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
