/* server/sse.c — SSE framing and the MHD content-reader that drains a producer (see sse.h). */
#include "server/sse.h"

#include <stdlib.h>
#include <string.h>

struct sse {
  sse_produce_fn produce;
  sse_free_fn free_ctx;
  void *ctx;
  struct sbuf out;   /* frames produced, not yet handed to MHD */
  size_t sent;       /* bytes of out already handed over */
  int finished;
  int keepalive_ms;  /* a comment after this long without a frame */
  double last;       /* when the last bytes were produced (monotonic s) */
};

static ssize_t reader(void *cls, uint64_t pos, char *buf, size_t max) {
  (void)pos;
  struct sse *s = cls;
  while (s->sent == s->out.n) {
    sbuf_reset(&s->out);
    s->sent = 0;
    if (s->finished) return MHD_CONTENT_READER_END_OF_STREAM;
    double now = http_now();
    int left = s->keepalive_ms - (int)((now - s->last) * 1e3);
    int rc = s->produce(s->ctx, &s->out, left < 1000 ? (left > 0 ? left : 0) : 1000);
    if (rc < 0) return MHD_CONTENT_READER_END_WITH_ERROR;
    if (rc > 0) s->finished = 1;
    now = http_now();
    if (s->out.n) { s->last = now; break; }
    if ((now - s->last) * 1e3 >= s->keepalive_ms) {
      s->last = now;
      if (sbuf_adds(&s->out, ": keep-alive\n\n")) return MHD_CONTENT_READER_END_WITH_ERROR;
    }
  }
  size_t n = s->out.n - s->sent;
  if (n > max) n = max;
  memcpy(buf, s->out.p + s->sent, n);
  s->sent += n;
  return (ssize_t)n;
}

static void release(void *cls) {
  struct sse *s = cls;
  s->free_ctx(s->ctx);
  sbuf_free(&s->out);
  free(s);
}

enum MHD_Result sse_reply(struct http_req *r, sse_produce_fn produce, sse_free_fn free_ctx,
                          void *ctx) {
  struct sse *s = calloc(1, sizeof *s);
  if (!s) {
    free_ctx(ctx);
    return http_reply_error(r, 500, NULL, NULL, "out of memory");
  }
  s->produce = produce;
  s->free_ctx = free_ctx;
  s->ctx = ctx;
  s->keepalive_ms = r->srv->opt->keepalive_ms > 0 ? r->srv->opt->keepalive_ms : 3000;
  s->last = http_now();
  return http_reply_stream(r, reader, s, release);
}

int sse_event(struct sbuf *out, json_t *obj) {
  char *text = obj ? json_dumps(obj, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
  json_decref(obj);
  if (!text) return -1;
  int rc = sbuf_adds(out, "data: ") || sbuf_adds(out, text) || sbuf_adds(out, "\n\n") ? -1 : 0;
  free(text);
  return rc;
}

int sse_done(struct sbuf *out) { return sbuf_adds(out, "data: [DONE]\n\n"); }
