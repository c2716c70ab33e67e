#include "base/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int kite_fail(kite_error *e, int status, const char *fmt, ...) {
    if (e) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->msg, sizeof e->msg, fmt, ap);
        va_end(ap);
        e->status = status;
    }
    return status;
}

int kite_error_export(const kite_error *e, char *err, size_t err_size) {
    if (err && err_size > 0) snprintf(err, err_size, "%s", e->status ? e->msg : "");
    return e->status;
}

const char *kite_status_name(int status) {
    switch (status) {
    case KITE_OK: return "ok";
    case KITE_ERR_INVALID_ARG: return "invalid argument";
    case KITE_ERR_IO: return "i/o error";
    case KITE_ERR_FORMAT: return "format error";
    case KITE_ERR_UNSUPPORTED: return "unsupported";
    case KITE_ERR_NOMEM: return "out of memory";
    case KITE_ERR_CONTEXT_FULL: return "context full";
    case KITE_ERR_CANCELLED: return "cancelled";
    case KITE_ERR_TOKENIZER: return "tokenizer error";
    case KITE_ERR_NOT_FOUND: return "not found";
    default: return "unknown status";
    }
}

static kite_log_fn g_log_fn;
static void *g_log_user;

void kite_set_log_callback(kite_log_fn fn, void *user_data) {
    g_log_fn = fn;
    g_log_user = user_data;
}

void kite_log(kite_log_level level, const char *fmt, ...) {
    if (!g_log_fn) return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    g_log_fn(level, line, g_log_user);
}
