/* base/err.c — error values. */
#include "base/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int err_set(struct hearth_err *err, int code, const char *fmt, ...) {
  if (!err) return code;
  err->code = code;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err->msg, sizeof err->msg, fmt, ap);
  va_end(ap);
  return code;
}

int err_prefix(struct hearth_err *err, const char *fmt, ...) {
  if (!err) return HEARTH_ERR_ARG;
  char pre[256], old[sizeof err->msg];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(pre, sizeof pre, fmt, ap);
  va_end(ap);
  memcpy(old, err->msg, sizeof old);
  size_t n = strlen(pre);
  if (n > sizeof err->msg - 3) n = sizeof err->msg - 3;
  memcpy(err->msg, pre, n);
  memcpy(err->msg + n, ": ", 2);
  size_t rest = sizeof err->msg - n - 3, ol = strnlen(old, sizeof old - 1);
  if (ol > rest) ol = rest;
  memcpy(err->msg + n + 2, old, ol);
  err->msg[n + 2 + ol] = 0;
  return err->code;
}

void err_clear(struct hearth_err *err) {
  if (!err) return;
  err->code = 0;
  err->msg[0] = 0;
}

const char *hearth_status_name(int code) {
  switch (code) {
  case HEARTH_OK: return "ok";
  case HEARTH_ERR_IO: return "io";
  case HEARTH_ERR_FORMAT: return "format";
  case HEARTH_ERR_UNSUPPORTED: return "unsupported";
  case HEARTH_ERR_NOMEM: return "nomem";
  case HEARTH_ERR_ARG: return "arg";
  case HEARTH_ERR_BACKEND: return "backend";
  case HEARTH_ERR_CTX_FULL: return "ctx_full";
  case HEARTH_ERR_CANCELLED: return "cancelled";
  default: return "unknown";
  }
}

const char *hearth_version(void) { return "0.1.0"; }
