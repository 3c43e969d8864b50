/* server/stream_load.c — keep-alives while a stream's model loads (see stream_load.h). */
#include "server/stream_load.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/errors.h"
#include "server/registry.h"

/* What the waiting thread and the stream share; the last of the two to let go frees it. */
struct waiting {
  struct srv *srv;
  char name[256];
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int done;                  /* the acquire has returned: rc, status, err, m are set */
  int rc, status;
  struct hearth_err err;
  struct srv_model *m;       /* a reference, until the stream takes it (or it is dropped) */
  int abandoned;             /* the stream has ended: the thread drops m itself */
  int refs;
};

struct stream_load {
  struct srv *srv;
  const struct stream_load_ops *ops;
  void *ctx;
  json_t *body;              /* a reference on the request JSON: ctx points into it */
  struct http_watch watch;   /* the client, from the connection's thread */
  int embedding;
  struct waiting *w;         /* until the acquire's outcome is taken */
  struct srv_model *m;       /* the reference the stream holds once loaded */
  int started;               /* ops->start succeeded: ops->produce streams */
};

static void waiting_unref(struct waiting *w) {
  pthread_mutex_lock(&w->mu);
  int left = --w->refs;
  pthread_mutex_unlock(&w->mu);
  if (left) return;
  pthread_cond_destroy(&w->cv);
  pthread_mutex_destroy(&w->mu);
  free(w);
}

static void *wait_thread(void *arg) {
  struct waiting *w = arg;
  struct srv *s = w->srv;
  struct srv_model *m = NULL;
  struct hearth_err err = {0};
  int status = 500;
  int rc = srv_model_acquire(s, w->name, &m, &status, &err);
  pthread_mutex_lock(&w->mu);
  int drop = !rc && w->abandoned;
  if (!drop) {
    w->rc = rc;
    w->status = status;
    w->err = err;
    w->m = rc ? NULL : m;
  }
  w->done = 1;
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
  if (drop) srv_model_release(s, m); /* nobody streams it: the load is done, the model stays */
  waiting_unref(w);
  atomic_fetch_sub(&s->n_waiting, 1); /* the last touch of s: server_run waits for this */
  return NULL;
}

/* Waits up to timeout_ms for the acquire, watching the client every 20 ms. Returns 1 when done,
 * 0 on timeout, -1 when the client has gone, 2 when a probe should be written (http_watch). */
static int wait_loaded(struct stream_load *sl, int timeout_ms) {
  double t0 = http_now();
  for (;;) {
    pthread_mutex_lock(&sl->w->mu);
    if (!sl->w->done) {
      int left = timeout_ms - (int)((http_now() - t0) * 1e3);
      int slice = left < 20 ? (left > 0 ? left : 0) : 20;
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      ts.tv_nsec += (long)slice * 1000000L;
      if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
      pthread_cond_timedwait(&sl->w->cv, &sl->w->mu, &ts);
    }
    int done = sl->w->done;
    pthread_mutex_unlock(&sl->w->mu);
    if (done) return 1;
    int pc = http_watch_check(&sl->watch);
    if (pc == HTTP_PEER_GONE) return -1;
    if (pc == HTTP_PEER_PROBE) return 2;
    if ((http_now() - t0) * 1e3 >= timeout_ms) return 0;
  }
}

/* The acquire has returned: takes its model, or ends the stream with its error. Returns 0 (go on)
 * or 1 (out holds the error event and [DONE]). */
static int take_outcome(struct stream_load *sl, struct sbuf *out) {
  struct waiting *w = sl->w;
  pthread_mutex_lock(&w->mu);
  sl->m = w->m;
  w->m = NULL;
  int rc = w->rc, status = w->status;
  struct hearth_err err = w->err;
  pthread_mutex_unlock(&w->mu);
  sl->w = NULL;
  waiting_unref(w);
  struct gen_fail f;
  if (rc) {
    gen_fail_set(&f, (unsigned)status, status == 500 ? NULL : "model",
                 status == 404 ? "model_not_found" : status == 500 ? "model_load_failed" : "invalid_value",
                 "%s", errors_scrub(err.msg));
  } else if (sl->embedding >= 0 && !sl->m->info->is_embedding != !sl->embedding) {
    gen_fail_set(&f, 400, "model", "invalid_model",
                 sl->embedding ? "'%s' is not an embedding model" : "'%s' is an embedding model; use /v1/embeddings",
                 sl->m->id);
  } else if (sl->ops->start(sl->ctx, sl->m, &sl->watch, &f) == 0) {
    sl->started = 1;
    return 0;
  }
  return gen_fail_event(out, &f) ? -1 : 1;
}

static int produce(void *cls, struct sbuf *out, int timeout_ms) {
  struct stream_load *sl = cls;
  if (sl->started) return sl->ops->produce(sl->ctx, out, timeout_ms);
  if (atomic_load(&sl->srv->aborting)) { /* shutdown: end the stream; the load finishes alone */
    struct gen_fail f;
    gen_fail_set(&f, 503, NULL, "shutting_down", "the server is shutting down; the request was cancelled");
    return gen_fail_event(out, &f) ? -1 : 1;
  }
  int wr = wait_loaded(sl, timeout_ms);
  if (wr < 0) return -1;
  if (wr == 2) return sbuf_adds(out, ": probe\n\n") ? -1 : 0; /* the client's input ended: still there? */
  if (wr == 0) return 0; /* nothing yet: sse.c sends the keep-alive when one is due */
  return take_outcome(sl, out); /* 0: the next call streams */
}

static void release(void *cls) {
  struct stream_load *sl = cls;
  sl->ops->free_ctx(sl->ctx); /* the generation first: it reads the model */
  if (sl->m) srv_model_release(sl->srv, sl->m);
  if (sl->w) { /* the client left during the wait: the thread's model, if any, is dropped */
    struct waiting *w = sl->w;
    pthread_mutex_lock(&w->mu);
    w->abandoned = 1;
    struct srv_model *m = w->m; /* loaded between the last look and now */
    w->m = NULL;
    pthread_mutex_unlock(&w->mu);
    if (m) srv_model_release(sl->srv, m);
    waiting_unref(w);
  }
  json_decref(sl->body);
  free(sl);
}

enum MHD_Result stream_load_reply(struct http_req *r, int embedding,
                                  const struct stream_load_ops *ops, void *ctx) {
  struct srv *s = r->srv;
  const char *name = json_string_value(json_object_get(r->json, "model"));
  struct stream_load *sl = calloc(1, sizeof *sl);
  struct waiting *w = calloc(1, sizeof *w);
  if (!sl || !w || !name || strlen(name) >= sizeof w->name) {
    free(sl);
    free(w);
    ops->free_ctx(ctx);
    return http_reply_error(r, 500, NULL, NULL, "out of memory");
  }
  w->srv = s;
  snprintf(w->name, sizeof w->name, "%s", name);
  pthread_mutex_init(&w->mu, NULL);
  pthread_cond_init(&w->cv, NULL);
  w->refs = 2;
  atomic_fetch_add(&s->n_waiting, 1);
  pthread_t t;
  pthread_attr_t at;
  pthread_attr_init(&at);
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  int prc = pthread_create(&t, &at, wait_thread, w);
  pthread_attr_destroy(&at);
  if (prc) {
    atomic_fetch_sub(&s->n_waiting, 1);
    w->refs = 1;
    waiting_unref(w);
    free(sl);
    ops->free_ctx(ctx);
    return http_reply_error(r, 503, NULL, "server_busy", "cannot wait for the model now; retry");
  }
  sl->srv = s;
  sl->ops = ops;
  sl->ctx = ctx;
  sl->body = json_incref(r->json);
  sl->embedding = embedding;
  sl->w = w;
  http_watch_init(r, 1, &sl->watch);
  return sse_reply(r, produce, release, sl);
}
