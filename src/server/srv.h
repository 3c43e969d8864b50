/* server/srv.h — the server's shared state: the model registry (server/registry.h) with the loaded
 * models and their engines, counters. The registry's slots change at run time (a request naming a
 * cached model loads it, the least recently used one is unloaded) under reg_mu; a request touches
 * a model only through a reference (srv_model_acquire), which keeps it loaded until released. */
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
struct http_relay;
struct jvocab;
struct textio;

/* A registry slot's life: EMPTY -> LOADING (one request's thread loads it, others wait) -> READY
 * (requests hold references) -> UNLOADING (chosen as least recently used: no new references) ->
 * CLOSING (refs reached 0: being freed without the lock; nobody may read its model) -> EMPTY. A
 * failed load with requests waiting on it goes LOADING -> FAILED, and the last waiter to read the
 * error makes it EMPTY. */
enum srv_slot_state { SLOT_EMPTY = 0, SLOT_LOADING, SLOT_READY, SLOT_UNLOADING, SLOT_CLOSING, SLOT_FAILED };

struct srv_model {
  char id[256];
  char path[1024];           /* the model directory (a Hub cache snapshot or a local directory) */
  /* registry bookkeeping, guarded by srv.reg_mu */
  enum srv_slot_state state;
  int refs;                  /* requests holding this model (srv_model_acquire) */
  int waiters;               /* requests waiting for this LOADING model */
  int embedding;             /* the kind counted against the limits: 1 embedding, 0 generative */
  unsigned long last_used;   /* srv.use_clock at the last acquire: the LRU order */
  unsigned long load_seq;    /* order of LOADING claims: a loader waits only for earlier ones */
  char load_err[600];        /* FAILED: why, for every waiter */
  /* the loaded model, written by the loader while LOADING, read-only while READY */
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

#define SRV_MAX_SLOTS 40 /* above the largest limits (16 + 16) plus loads in progress */

/* A model the server may load: one named on the command line (the Hub cache's models are looked up
 * when named, registry.c). */
struct srv_entry {
  char id[256];
  const char *src;           /* directory or "ORG/NAME" as given */
  int embedding;             /* --embedding-model */
};

struct srv {
  const struct server_options *opt;
  /* the registry (registry.c) */
  pthread_mutex_t reg_mu;
  pthread_cond_t reg_cv;     /* any slot's state, refs or waiters changed */
  struct srv_model models[SRV_MAX_SLOTS];
  int n_models;              /* slots in use at most (the loop bound over models[]) */
  unsigned long use_clock, load_clock;
  int max_loaded[2];         /* resident models: [0] generative, [1] embedding */
  struct srv_entry entries[SERVER_MAX_MODELS];
  int n_entries;
  time_t started;
  atomic_int port;           /* the bound port (Host headers must name it) */
  atomic_ulong n_requests;   /* requests dispatched to a route */
  atomic_ulong n_errors;     /* 4xx/5xx replies */
  atomic_int n_active_http;  /* requests inside a handler right now */
  struct http_guard *guard;  /* per-connection deadlines (http_guard.h), owned by http.c */
  struct http_relay *relay;  /* the accept loop and strict framing (http_relay.h), owned by http.c */
  /* shutdown (server_run): draining = new requests get 503; n_inflight = requests begun and not yet
   * completed (streams included); aborting = the grace period is over: embeddings stop */
  atomic_int draining;
  atomic_int n_inflight;
  atomic_int aborting;
  atomic_int n_pulls;        /* POST /v1/models/pull threads running (model_admin.c) */
  atomic_int n_waiting;      /* threads waiting for a stream's model to load (stream_load.c) */
};


#endif
