/* base/err.h — filling a struct hearth_err (defined in hearth.h). */
#ifndef HEARTH_BASE_ERR_H
#define HEARTH_BASE_ERR_H
#include "hearth.h"

/* Sets err (may be NULL) to code and a printf-style message; returns code. */
int err_set(struct hearth_err *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Prepends "prefix: " to err's message (e.g. a file name); returns err->code. */
int err_prefix(struct hearth_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void err_clear(struct hearth_err *err);

#endif
