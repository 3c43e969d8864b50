/* server/sbuf.h — a growable NUL-terminated byte string (SSE frames, text deltas). */
#ifndef HEARTH_SERVER_SBUF_H
#define HEARTH_SERVER_SBUF_H

#include <stddef.h>

struct sbuf {
  char *p;     /* NUL-terminated when non-NULL */
  size_t n, cap;
};

/* Append n bytes; returns 0 or -1 on OOM (s unchanged). */
int sbuf_add(struct sbuf *s, const char *p, size_t n);
int sbuf_adds(struct sbuf *s, const char *str);
int sbuf_addf(struct sbuf *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Makes room for extra more bytes (and the NUL) at once; 0 or -1 on OOM. */
int sbuf_reserve(struct sbuf *s, size_t extra);
/* Drops the first n bytes. */
void sbuf_consume(struct sbuf *s, size_t n);
void sbuf_reset(struct sbuf *s);
void sbuf_free(struct sbuf *s);

#endif
