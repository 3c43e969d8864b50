/* server/server.c — server_run: load the models, start one engine per generative model, serve
 * until told to stop, tear down in reverse order. */
#include "server/server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "server/embed_queue.h"
#include "server/engine.h"
#include "server/http.h"
#include "server/json_mask.h"
#include "server/srv.h"
#include "server/textio.h"
#include "tok/tokenizer.h"

void server_options_default(struct server_options *o) {
  memset(o, 0, sizeof *o);
  o->host = "127.0.0.1";
  o->port = 8080;
  hearth_model_params_default(&o->model);
  o->n_slots = 4;
  o->n_ctx = 4096;
  o->max_queue = 64;
  o->max_body = 8u << 20;
  o->max_depth = 64;
  o->keepalive_ms = 3000;
  o->prefill_chunk = 512;
  o->max_conns = 128;
  o->timeout_s = 15;
  o->head_timeout_s = 10;
  o->shutdown_grace_ms = 5000;
}

struct srv_model *srv_find_model(struct srv *s, const char *name) {
  for (int i = 0; name && i < s->n_models; i++)
    if (!strcmp(s->models[i].id, name)) return &s->models[i];
  return NULL;
}

static void model_close(struct srv_model *m) {
  engine_free(m->engine);
  jvocab_free(m->jv);
  embq_free(m->embq);
  textio_free(m->tio);
  hearth_model_free(m->model);
  memset(m, 0, sizeof *m);
}

static int model_open(const struct server_options *o, const struct server_model_opt *mo,
                      struct srv_model *m, struct hearth_err *err) {
  const char *base = strrchr(mo->path, '/');
  base = base && base[1] ? base + 1 : mo->path;
  snprintf(m->id, sizeof m->id, "%s", mo->id ? mo->id : base);
  m->path = mo->path;
  m->created = time(NULL);
  struct hearth_model_params mp = o->model;
  mp.path = mo->path;
  mp.embedding = mo->embedding;
  if (!mp.kv_tokens) mp.kv_tokens = o->n_slots * o->n_ctx;
  int rc = hearth_model_load(&mp, &m->model, err);
  if (!rc) {
    m->info = hearth_model_info(m->model);
    m->n_ctx = o->n_ctx;
    if (m->info->n_ctx_train > 0 && m->n_ctx > m->info->n_ctx_train) m->n_ctx = m->info->n_ctx_train;
    rc = textio_load(mo->path, &m->tio, err);
    /* a tokenizer from another model: refuse at start, not at the first request it breaks */
    if (!rc) rc = tok_check_model_vocab(textio_tok(m->tio), m->info->n_vocab, err);
  }
  if (!rc && m->info->is_embedding) {
    rc = embq_new(m->model, &m->embq, err);
  } else if (!rc) {
    struct engine_params ep = {.n_slots = o->n_slots, .n_ctx = m->n_ctx, .max_queue = o->max_queue,
                               .prefill_chunk = o->prefill_chunk};
    rc = jvocab_new(textio_tok(m->tio), &m->jv, err);
    if (!rc) rc = engine_new(m->model, &ep, &m->engine, err);
  }
  if (rc) {
    err_prefix(err, "model %s", mo->path);
    model_close(m);
  }
  return rc;
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
  for (int i = 0; i < s->n_models; i++) engine_shutdown(s->models[i].engine);
  if (!wait_idle(s, 2000))
    fprintf(stderr, "hearth serve: %d connection(s) did not finish; closing them\n",
            atomic_load(&s->n_inflight));
}

int server_run(const struct server_options *o, volatile sig_atomic_t *stop, struct hearth_err *err) {
  if (o->n_models < 1) return err_set(err, HEARTH_ERR_ARG, "no model given (--model DIR)");
  if (o->n_slots < 1 || o->n_ctx < 16 || o->max_queue < 1 || o->max_body < 1024 ||
      o->max_conns < 1 || o->timeout_s < 1 || o->max_depth < 1 || o->keepalive_ms < 1 ||
      o->prefill_chunk < 1 || o->shutdown_grace_ms < 0)
    return err_set(err, HEARTH_ERR_ARG, "server options out of range");
  struct srv *s = calloc(1, sizeof *s);
  if (!s) return err_set(err, HEARTH_ERR_NOMEM, "out of memory");
  s->opt = o;
  s->started = time(NULL);
  int rc = 0;
  for (int i = 0; !rc && i < o->n_models; i++) {
    rc = model_open(o, &o->models[i], &s->models[i], err);
    if (!rc) s->n_models++;
    for (int j = 0; !rc && j < i; j++)
      if (!strcmp(s->models[j].id, s->models[i].id))
        rc = err_set(err, HEARTH_ERR_ARG, "two models named '%s' (use --model ID=DIR)", s->models[i].id);
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
    for (int i = 0; i < s->n_models; i++)
      fprintf(stderr, "%s%s%s", i ? ", " : "", s->models[i].id,
              s->models[i].info->is_embedding ? " [embedding]" : "");
    fprintf(stderr, ")\n");
    while (!*stop) usleep(100 * 1000);
    fprintf(stderr, "hearth serve: shutting down\n");
    drain(s, o->shutdown_grace_ms);
  }
  /* the engines first: readers still blocked on tokens see "cancelled" at once, then the daemon
   * can join its connection threads */
  for (int i = 0; i < s->n_models; i++) engine_shutdown(s->models[i].engine);
  http_stop(s, d);
  for (int i = s->n_models - 1; i >= 0; i--) model_close(&s->models[i]);
  free(s);
  return rc;
}
