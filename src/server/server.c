/* server/server.c — server_run: make sure the default models are in the cache (pulling them on a
 * first start), load the models through the registry (one engine per generative model), serve until
 * told to stop, tear down in reverse order. */
#include "base/prof.h"
#include "server/server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "server/http.h"
#include "server/registry.h"
#include "server/srv.h"

void server_options_default(struct server_options *o) {
  memset(o, 0, sizeof *o);
  o->host = "127.0.0.1";
  o->port = 8080;
  hearth_model_params_default(&o->model);
  o->n_slots = 4;
  o->n_ctx = 4096;
  o->max_queue = 1024; /* a label-scoring request of 1,024 prompts queues as 1,024 requests */
  o->max_body = 8u << 20;
  o->max_depth = 64;
  o->keepalive_ms = 3000;
  o->prefill_chunk = 0; /* by backend: engine_default_prefill_chunk */
  o->speculate = HEARTH_SPEC_DEFAULT; /* where the backend can (engine_params.speculate) */
  o->max_conns = 128;
  o->timeout_s = 15;
  o->head_timeout_s = 10;
  o->shutdown_grace_ms = 5000;
}

/* Waits up to ms (polling) until no request is in flight; 1 if none is left. */
static int wait_idle(struct srv *s, int ms) {
  for (int waited = 0; atomic_load(&s->n_inflight) > 0; waited += 10) {
    if (waited >= ms) return 0;
    usleep(10 * 1000);
  }
  return 1;
}

/* The graceful part of a shutdown. New requests get 503 (http.c), requests in flight get grace_ms
 * to finish; then the engines cancel what is left (their readers answer 503 or end their stream
 * with an error event and [DONE]) and embeddings stop at their next batch, and the replies get a
 * bounded moment to be written before the daemon closes the connections. */
static void drain(struct srv *s, int grace_ms) {
  atomic_store(&s->draining, 1);
  if (wait_idle(s, grace_ms)) return;
  fprintf(stderr, "hearth serve: %d request(s) still running after %d ms: cancelling them\n",
          atomic_load(&s->n_inflight), grace_ms);
  atomic_store(&s->aborting, 1);
  registry_shutdown_engines(s);
  if (!wait_idle(s, 2000))
    fprintf(stderr, "hearth serve: %d connection(s) did not finish; closing them\n",
            atomic_load(&s->n_inflight));
}

int server_run(const struct server_options *o, volatile sig_atomic_t *stop, struct hearth_err *err) {
  if (o->n_slots < 1 || o->n_ctx < 16 || o->max_queue < 1 || o->max_body < 1024 ||
      o->max_conns < 1 || o->timeout_s < 1 || o->max_depth < 1 || o->keepalive_ms < 1 ||
      o->prefill_chunk < 0 || o->speculate < 0 || o->speculate > HEARTH_SPEC_MAX || o->shutdown_grace_ms < 0 || o->max_loaded < 0 || o->max_loaded > 16 ||
      o->max_loaded_embedding < 0 || o->max_loaded_embedding > 16)
    return err_set(err, HEARTH_ERR_ARG, "server options out of range");
  /* no model named: the defaults, from the cache or pulled into it now */
  struct server_options with_defaults;
  if (o->n_models < 1) {
    int rc = registry_ensure_cached(SERVER_DEFAULT_MODEL, o->offline, err);
    if (!rc) rc = registry_ensure_cached(SERVER_DEFAULT_EMBEDDING_MODEL, o->offline, err);
    if (rc) return rc;
    with_defaults = *o;
    with_defaults.models[0] = (struct server_model_opt){.path = SERVER_DEFAULT_MODEL};
    with_defaults.models[1] = (struct server_model_opt){.path = SERVER_DEFAULT_EMBEDDING_MODEL, .embedding = 1};
    with_defaults.n_models = 2;
    o = &with_defaults;
  }
  struct srv *s = calloc(1, sizeof *s);
  if (!s) return err_set(err, HEARTH_ERR_NOMEM, "out of memory");
  s->opt = o;
  s->started = time(NULL);
  int rc = registry_init(s, err);
  /* every model of the command line is loaded before the server listens */
  for (int i = 0; !rc && i < s->n_entries; i++) {
    struct srv_model *m;
    int status;
    rc = srv_model_acquire(s, s->entries[i].id, &m, &status, err);
    if (!rc) srv_model_release(s, m);
  }
  struct MHD_Daemon *d = NULL;
  int port = 0;
  if (!rc) rc = http_start(s, &d, &port, err);
  if (!rc) {
    if (o->port_file) {
      char tmp[4096];
      snprintf(tmp, sizeof tmp, "%s.tmp", o->port_file);
      FILE *f = fopen(tmp, "w");
      if (!f || fprintf(f, "%d\n", port) < 0 || fclose(f) || rename(tmp, o->port_file))
        rc = err_set(err, HEARTH_ERR_IO, "cannot write %s", o->port_file);
    }
  }
  if (!rc) {
    const char *h = o->host;
    int v6 = strchr(h, ':') != NULL;
    fprintf(stderr, "hearth serve: listening on http://%s%s%s:%d (", v6 ? "[" : "", h, v6 ? "]" : "", port);
    for (int i = 0, k = 0; i < s->n_models; i++)
      if (s->models[i].state == SLOT_READY)
        fprintf(stderr, "%s%s%s", k++ ? ", " : "", s->models[i].id,
                s->models[i].info->is_embedding ? " [embedding]" : "");
    fprintf(stderr, "; at most %d generative and %d embedding model(s) loaded at once)\n",
            s->max_loaded[0], s->max_loaded[1]);
    while (!*stop) usleep(100 * 1000);
    fprintf(stderr, "hearth serve: shutting down\n");
    drain(s, o->shutdown_grace_ms);
  }
  /* the engines first: readers still blocked on tokens see "cancelled" at once, then the daemon
   * can join its connection threads */
  registry_shutdown_engines(s);
  http_stop(s, d);
  /* pulls whose client has gone are cancelled at their next progress call */
  for (int waited = 0; atomic_load(&s->n_pulls) > 0 && waited < 30000; waited += 10) usleep(10 * 1000);
  /* a load a stream was waiting for runs to its end (it cannot be cut short): the models are
   * freed after it */
  while (atomic_load(&s->n_waiting) > 0) usleep(10 * 1000);
  registry_free(s);
  free(s);
  prof_dump(stderr); /* HEARTH_PROFILE only (base/prof.h) */
  return rc;
}
