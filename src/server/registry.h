/* server/registry.h — the server's models at run time: which ones are loaded, loading a model a
 * request names, unloading the least recently used one.
 *
 * A request names a model by id: one given on the command line (--model, --embedding-model), or any
 * repo id "ORG/NAME" in the Hugging Face Hub cache (load/hub_cache.h). srv_model_acquire returns the
 * model loaded, with a reference that keeps it loaded until srv_model_release; when it is not
 * loaded, the calling request's thread loads it while later requests for it wait (a failed load
 * answers every waiter with its error); a stream does this wait on a thread of its own, sending
 * keep-alives meanwhile (server/stream_load.h). At most opt->max_loaded generative and
 * opt->max_loaded_embedding embedding models stay resident: before a load, the least recently
 * acquired model of the same kind is marked unloading (no new references), and freed once its
 * running requests have released it; a request is never left holding a freed model.
 *
 * Deadlock freedom: a request holds at most one reference and never waits while holding it; a
 * loader waits only for the references of its victims and for loads claimed before its own.
 */
#ifndef HEARTH_SERVER_REGISTRY_H
#define HEARTH_SERVER_REGISTRY_H

#include <stddef.h>

#include "server/srv.h"

/* The mutex, the limits and the command-line entries. Returns 0 or HEARTH_ERR_ARG (two models
 * with one id). */
int registry_init(struct srv *s, struct hearth_err *err);
/* Frees every model (no request may hold one: after the daemon has stopped). */
void registry_free(struct srv *s);

/* The model named name, loaded, with a reference. Returns 0, or an error with *http_status 404
 * (no such model), 400 (name is not a valid id) or 500 (the load failed) and err filled. */
int srv_model_acquire(struct srv *s, const char *name, struct srv_model **out, int *http_status,
                      struct hearth_err *err);
void srv_model_release(struct srv *s, struct srv_model *m);
/* Like srv_model_acquire without ever waiting or loading: 0 with *out referenced when the model is
 * loaded; SRV_ACQUIRE_PENDING (> 0) when it exists but srv_model_acquire would wait for it (being
 * loaded or unloaded, or only on disk); the same errors otherwise (404 is known at once). A stream
 * uses it to start its response before a load (server/stream_load.h). */
#define SRV_ACQUIRE_PENDING 1
int srv_model_try_acquire(struct srv *s, const char *name, struct srv_model **out,
                          int *http_status, struct hearth_err *err);

/* engine_shutdown on every loaded model (the end of a drain: cancels what runs). */
void registry_shutdown_engines(struct srv *s);

/* 1 when repo names a model loaded or loading (by id, or by a directory inside its cache folder). */
int registry_in_use(struct srv *s, const char *repo);

/* Deletes repo from the Hub cache (hub_cache_rm) unless it is loaded or loading: then 409, under
 * the registry lock so that no load starts meanwhile. Returns 0, or an error with *http_status
 * 409, 404 (not in the cache), 501 (not built) or 500 and err filled. */
int registry_remove(struct srv *s, const char *repo, int *http_status, struct hearth_err *err);

/* 1 when name is a Hub repo id: ORG/NAME, each part [A-Za-z0-9._-] (not starting with '.' or
 * '-', no ".."), at most 96 characters each. */
int srv_valid_repo_id(const char *name);

/* Makes sure repo is in the Hub cache: 0 when it is; else pulls it (progress lines on stderr)
 * unless offline, which is an error naming the model and `hearth pull` (model_defaults.c). */
int registry_ensure_cached(const char *repo, int offline, struct hearth_err *err);

#endif
