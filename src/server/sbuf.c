/* server/sbuf.c — growable byte strings (see sbuf.h). */
#include "server/sbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int sbuf_reserve(struct sbuf *s, size_t extra) {
  if (s->n + extra + 1 <= s->cap) return 0;
  size_t cap = s->cap ? s->cap : 256;
  while (cap < s->n + extra + 1) cap *= 2;
  char *p = realloc(s->p, cap);
  if (!p) return -1;
  s->p = p;
  s->cap = cap;
  return 0;
}

int sbuf_add(struct sbuf *s, const char *p, size_t n) {
  if (sbuf_reserve(s, n)) return -1;
  if (n) memcpy(s->p + s->n, p, n);
  s->n += n;
  s->p[s->n] = 0;
  return 0;
}

int sbuf_adds(struct sbuf *s, const char *str) { return sbuf_add(s, str, strlen(str)); }

int sbuf_addf(struct sbuf *s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (k < 0 || sbuf_reserve(s, (size_t)k)) return -1;
  va_start(ap, fmt);
  vsnprintf(s->p + s->n, (size_t)k + 1, fmt, ap);
  va_end(ap);
  s->n += (size_t)k;
  return 0;
}

void sbuf_consume(struct sbuf *s, size_t n) {
  if (n >= s->n) { sbuf_reset(s); return; }
  memmove(s->p, s->p + n, s->n - n);
  s->n -= n;
  s->p[s->n] = 0;
}

void sbuf_reset(struct sbuf *s) {
  s->n = 0;
  if (s->p) s->p[0] = 0;
}

void sbuf_free(struct sbuf *s) {
  free(s->p);
  s->p = NULL;
  s->n = s->cap = 0;
}
