/* server/model_admin.c — POST /v1/models/pull and DELETE /v1/models/{ORG/NAME}: changing the Hub
 * cache through the server.
 *
 * Both are refused (403) unless the server has an API key (--api-key: then http.c has already
 * checked the bearer token) or --allow-model-admin: any web page the user opens can send requests
 * to a loopback server, and must not be able to make it download gigabytes or delete models.
 *
 * A pull runs hub_pull on a thread of its own and streams its progress as server-sent events:
 *   data: {"status": "resolving"|"downloading"|"verifying"|"done", "file": F|null,
 *          "completed": B, "total": B, "all_completed": B, "all_total": B}
 * at most one per 100 ms per file (and every change of status or file), then
 *   data: {"status": "success", "model": "ORG/NAME", "revision": COMMIT}
 * or an OpenAI error object, then data: [DONE]. A client that goes away cancels the pull (the
 * progress callback answers non-zero; hub_pull leaves the cache as it was).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "load/hub_cache.h"
#include "load/hub_pull.h"
#include "server/errors.h"
#include "server/registry.h"
#include "server/routes.h"
#include "server/sse.h"

static int admin_allowed(struct http_req *r, enum MHD_Result *ret) {
  const struct server_options *o = r->srv->opt;
  if (o->api_key || o->allow_model_admin) return 1;
  *ret = http_reply_error(r, 403, NULL, "model_admin_disabled",
                          "pulling and deleting models through the server needs --api-key or "
                          "--allow-model-admin (a web page must not be able to make this server "
                          "download or delete models)");
  return 0;
}

/* ---- DELETE /v1/models/{ORG/NAME} ------------------------------------------------------- */

enum MHD_Result ep_model_delete(struct http_req *r) {
  enum MHD_Result ret;
  if (!admin_allowed(r, &ret)) return ret;
  const char *id = r->url + strlen("/v1/models/");
  if (!srv_valid_repo_id(id))
    return http_reply_error(r, 404, "model", "model_not_found",
                            "'%s' is not a model of the Hugging Face cache (ORG/NAME)", id);
  struct hearth_err err = {0};
  int status = 200;
  if (registry_remove(r->srv, id, &status, &err))
    return http_reply_error(r, (unsigned)status, NULL,
                            status == 409 ? "model_in_use" : status == 404 ? "model_not_found" : NULL,
                            "%s", errors_scrub(err.msg));
  return http_reply_json(r, 200, json_pack("{s:s, s:s, s:b}", "id", id, "object", "model", "deleted", 1));
}

/* ---- POST /v1/models/pull --------------------------------------------------------------- */

struct pull {
  struct srv *srv;
  char repo[256];
  char revision[128];
  pthread_mutex_t mu;
  pthread_cond_t cv;
  struct sbuf out;       /* events produced, not yet handed to the stream */
  int finished;          /* the final event is in out */
  atomic_int cancel;     /* the client has gone: the progress callback stops the pull */
  int refs;              /* the thread and the stream; the last one frees */
  /* throttling (the pulling thread only) */
  char last_status[32], last_file[512];
  double last_t;
};

static void pull_unref(struct pull *p) {
  pthread_mutex_lock(&p->mu);
  int left = --p->refs;
  pthread_mutex_unlock(&p->mu);
  if (left) return;
  sbuf_free(&p->out);
  pthread_cond_destroy(&p->cv);
  pthread_mutex_destroy(&p->mu);
  free(p);
}

/* Queues one event (obj stolen). */
static void pull_emit(struct pull *p, json_t *obj, int final) {
  pthread_mutex_lock(&p->mu);
  sse_event(&p->out, obj);
  if (final) {
    sse_done(&p->out);
    p->finished = 1;
  }
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
}

static int pull_progress(const struct hub_progress *h, void *arg) {
  struct pull *p = arg;
  if (atomic_load(&p->cancel)) return 1;
  const char *file = h->file ? h->file : "";
  double now = http_now();
  int change = strcmp(h->status, p->last_status) || strcmp(file, p->last_file);
  if (!change && h->completed != h->total && now - p->last_t < 0.1) return 0;
  snprintf(p->last_status, sizeof p->last_status, "%s", h->status);
  snprintf(p->last_file, sizeof p->last_file, "%s", file);
  p->last_t = now;
  json_t *ev = json_pack("{s:s, s:o, s:I, s:I, s:I, s:I}", "status", h->status, "file",
                         h->file ? json_string(h->file) : json_null(), "completed",
                         (json_int_t)h->completed, "total", (json_int_t)h->total, "all_completed",
                         (json_int_t)h->all_completed, "all_total", (json_int_t)h->all_total);
  pull_emit(p, ev, 0);
  return 0;
}

static void *pull_thread(void *arg) {
  struct pull *p = arg;
  struct srv *s = p->srv;
  struct hub_pull_opts po = {.revision = p->revision[0] ? p->revision : NULL,
                             .progress = pull_progress, .progress_arg = p};
  char dir[1024] = "";
  struct hearth_err err = {0};
  int rc = hub_pull(p->repo, &po, dir, sizeof dir, &err);
  if (rc) {
    if (rc == HEARTH_ERR_CANCELLED && atomic_load(&p->cancel)) snprintf(err.msg, sizeof err.msg, "the pull was cancelled");
    pull_emit(p, errors_json(rc == HEARTH_ERR_IO || rc == HEARTH_ERR_CANCELLED ? 502 : 500, "model",
                             "pull_failed", errors_scrub(err.msg)), 1);
  } else {
    const char *rev = strrchr(dir, '/');
    pull_emit(p, json_pack("{s:s, s:s, s:s}", "status", "success", "model", p->repo, "revision",
                           rev ? rev + 1 : ""), 1);
  }
  pull_unref(p);
  atomic_fetch_sub(&s->n_pulls, 1); /* the last touch of s: server_run waits for this */
  return NULL;
}

static int pull_produce(void *ctx, struct sbuf *out, int timeout_ms) {
  struct pull *p = ctx;
  if (atomic_load(&p->srv->aborting)) { /* shutdown: stop the pull, end the stream */
    atomic_store(&p->cancel, 1);
    sse_event(out, errors_json(503, NULL, "shutting_down", "the server is shutting down; the pull was cancelled"));
    sse_done(out);
    return 1;
  }
  pthread_mutex_lock(&p->mu);
  if (!p->out.n && !p->finished) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += timeout_ms / 1000;
    ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
    pthread_cond_timedwait(&p->cv, &p->mu, &ts);
  }
  int rc = p->out.n && sbuf_add(out, p->out.p, p->out.n) ? -1 : 0;
  sbuf_reset(&p->out);
  if (!rc && p->finished) rc = 1;
  pthread_mutex_unlock(&p->mu);
  return rc;
}

static void pull_stream_free(void *ctx) {
  struct pull *p = ctx;
  atomic_store(&p->cancel, 1); /* no one reads on: a pull still running stops */
  pull_unref(p);
}

enum MHD_Result ep_models_pull(struct http_req *r) {
  enum MHD_Result ret;
  if (!admin_allowed(r, &ret)) return ret;
  struct verr e = {{0}, {0}};
  const char *repo, *rev;
  if (v_str(r->json, "model", 1, NULL, &repo, &e) || v_str(r->json, "revision", 0, NULL, &rev, &e))
    return http_reply_verr(r, &e);
  if (!srv_valid_repo_id(repo))
    return http_reply_error(r, 400, "model", "invalid_value",
                            "'model' must be a Hugging Face repo id ORG/NAME");
  if (rev && (!*rev || strlen(rev) >= 128 || strstr(rev, "..") || rev[0] == '/'))
    return http_reply_error(r, 400, "revision", "invalid_value", "'revision' must be a branch, tag or commit");
  struct pull *p = calloc(1, sizeof *p);
  if (!p) return http_reply_error(r, 500, NULL, NULL, "out of memory");
  p->srv = r->srv;
  snprintf(p->repo, sizeof p->repo, "%s", repo);
  if (rev) snprintf(p->revision, sizeof p->revision, "%s", rev);
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv, NULL);
  p->refs = 2;
  atomic_fetch_add(&r->srv->n_pulls, 1);
  pthread_t t;
  pthread_attr_t at;
  pthread_attr_init(&at);
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  int prc = pthread_create(&t, &at, pull_thread, p);
  pthread_attr_destroy(&at);
  if (prc) {
    atomic_fetch_sub(&r->srv->n_pulls, 1);
    p->refs = 1;
    pull_unref(p);
    return http_reply_error(r, 503, NULL, "server_busy", "cannot start a pull now; retry");
  }
  return sse_reply(r, pull_produce, pull_stream_free, p);
}
