/* server/srv.h — the server's shared state: loaded models and their engines, counters.
 * Built once by server_run before the daemon starts and read-only afterwards, except for the
 * atomic counters and what the engines and the embedding queue guard themselves. */
#ifndef HEARTH_SERVER_SRV_H
#define HEARTH_SERVER_SRV_H

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "hearth.h"
#include "server/server.h"

struct embed_queue;
struct engine;
struct http_guard;
struct jvocab;
struct textio;

struct srv_model {
  char id[256];
  const char *path;
  struct hearth_model *model;
  const struct hearth_model_info *info;
  struct textio *tio;        /* tokenizer + chat template + output parser */
  struct engine *engine;     /* generative models: the batching engine; NULL for embedding models */
  struct jvocab *jv;         /* generative models: the vocabulary as bytes, for json_object decoding */
  /* embedding models: concurrent requests share forward passes (embed_queue.h) */
  struct embed_queue *embq;
  atomic_int embed_busy;          /* embedding requests computing or waiting for the session */
  atomic_ulong embed_cancelled;   /* embedding requests dropped (client gone, shutdown) */
  int n_ctx;                 /* per-sequence context the server enforces */
  time_t created;
};

struct srv {
  const struct server_options *opt;
  struct srv_model models[SERVER_MAX_MODELS];
  int n_models;
  time_t started;
  atomic_int port;           /* the bound port (Host headers must name it) */
  atomic_ulong n_requests;   /* requests dispatched to a route */
  atomic_ulong n_errors;     /* 4xx/5xx replies */
  atomic_int n_active_http;  /* requests inside a handler right now */
  struct http_guard *guard;  /* per-connection deadlines (http_guard.h), owned by http.c */
  /* shutdown (server_run): draining = new requests get 503; n_inflight = requests begun and not yet
   * completed (streams included); aborting = the grace period is over: embeddings stop */
  atomic_int draining;
  atomic_int n_inflight;
  atomic_int aborting;
};

/* The model whose id equals name, or NULL. */
struct srv_model *srv_find_model(struct srv *s, const char *name);

#endif
