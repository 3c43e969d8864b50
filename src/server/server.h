/* server/server.h — the OpenAI-compatible HTTP server: options and the one entry point.
 *
 * The server is one process: libmicrohttpd connection threads parse and validate requests, render
 * chat templates and tokenize; one engine thread per generative model owns the sessions and runs
 * continuous batching (server/engine.h). It binds to loopback only (127.0.0.1, ::1, localhost);
 * anything else is refused at start. tools/cmd_serve.c fills the options from the command line.
 */
#ifndef HEARTH_SERVER_SERVER_H
#define HEARTH_SERVER_SERVER_H

#include <signal.h>
#include <stddef.h>

#include "hearth.h"

#define SERVER_MAX_MODELS 8

/* The models served when no --model is given: pulled into the Hub cache on first start. */
#define SERVER_DEFAULT_MODEL "Qwen/Qwen2.5-3B-Instruct"
#define SERVER_DEFAULT_EMBEDDING_MODEL "Qwen/Qwen3-Embedding-0.6B"

struct server_model_opt {
  const char *id;   /* the name clients pass as "model"; NULL = the repo id ("ORG/NAME" from the
                       Hub cache) or the directory's base name */
  const char *path; /* Hugging Face model directory (config.json, safetensors, tokenizer.json),
                       or a repo id "ORG/NAME" in the Hub cache */
  int embedding;    /* 1: serve it as an embedding model (--embedding-model) whatever its config says */
};

struct server_options {
  const char *host;      /* bind address; must be loopback. default "127.0.0.1" */
  int port;              /* 0 = an ephemeral port (see port_file). default 8080 */
  const char *port_file; /* when set, the bound port is written here once listening */
  const char *api_key;   /* when set, every /v1 request needs "Authorization: Bearer <key>" */
  struct server_model_opt models[SERVER_MAX_MODELS]; /* loaded at start; none: the defaults */
  int n_models;
  int max_loaded;    /* generative models resident at once (LRU unload); 0 = max(1, n_models) */
  int max_loaded_embedding; /* embedding models resident at once; 0 = max(1, n_models) */
  int offline;       /* never download: a missing default model is an error at start */
  int allow_model_admin; /* POST /v1/models/pull and DELETE /v1/models/ID without --api-key */
  struct hearth_model_params model; /* dtype, backend, threads, kv_tokens (path is per model) */
  int n_slots;       /* sequences decoded together per model (continuous batch width). default 16 */
  int n_ctx;         /* context per sequence; 0 = min(kv_tokens / n_slots rounded, n_ctx_train) */
  int max_queue;     /* requests waiting for a slot before 503. default 64 */
  size_t max_body;   /* request body cap in bytes (413 above). default 8 MiB */
  int max_depth;     /* JSON nesting depth cap (400 above). default 64 */
  int keepalive_ms;  /* SSE ": keep-alive" comment after this long without data. default 3000 */
  int prefill_chunk; /* tokens per engine step: decode tokens plus prompt chunks. 0 = by backend (512 CPU, 4096 CUDA) */
  int speculate;     /* prompt-lookup draft length for plain greedy requests (engine_params.speculate); 0 = off.
                        default HEARTH_SPEC_DEFAULT */
  int max_conns;     /* concurrent connections (MHD limit). default 128 */
  int timeout_s;     /* idle connection timeout. default 15 */
  int head_timeout_s; /* a request head must arrive within this; a body must keep up 16 KiB/s
                       * after this long (server/http_guard.h). default 10 */
  int shutdown_grace_ms; /* on stop: how long requests in flight may run on before they are
                            cancelled (503 / a stream's error event). default 5000 */
  int verbose;       /* log each request to stderr */
};

void server_options_default(struct server_options *o);

/* With no model given, makes sure the defaults are in the Hub cache, pulling whichever is missing
 * (progress on stderr) unless o->offline, then loads every model, starts the engines and the HTTP daemon, and serves until *stop becomes
 * non-zero (set it from a signal handler), then drains: new requests get 503, requests in flight
 * run on for up to shutdown_grace_ms, then whatever is left is cancelled (a non-streamed request
 * gets a 503 error object, a stream an error event and [DONE]); then frees everything. Returns 0 after a
 * clean shutdown or a negative HEARTH_ERR_* with err filled (bad options, non-loopback host,
 * a model that fails to load, a port in use). Call from the main thread, once. */
int server_run(const struct server_options *o, volatile sig_atomic_t *stop, struct hearth_err *err);

#endif
