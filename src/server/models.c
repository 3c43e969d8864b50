/* server/models.c — GET /health, /status, /v1/models, /v1/models/{id}; picking a request's model
 * (which loads it when it is not loaded: server/registry.h). */
#include "server/routes.h"

#include <stdlib.h>
#include <string.h>

#include "load/hub_cache.h"
#include "server/embed_queue.h"
#include "server/engine.h"
#include "server/errors.h"
#include "server/registry.h"

enum MHD_Result ep_health(struct http_req *r) {
  return http_reply_json(r, 200, json_pack("{s:s}", "status", "ok"));
}

/* Per-model slot and queue occupancy: what a client (and the disconnect test) can watch. */
enum MHD_Result ep_status(struct http_req *r) {
  struct srv *s = r->srv;
  json_t *models = json_array();
  pthread_mutex_lock(&s->reg_mu); /* the loaded models stay loaded while they are read */
  for (int i = 0; i < s->n_models; i++) {
    struct srv_model *m = &s->models[i];
    if (m->state != SLOT_READY && m->state != SLOT_UNLOADING) continue;
    json_t *o = json_pack("{s:s, s:s, s:i}", "id", m->id, "kind",
                          m->info->is_embedding ? "embedding" : "generate", "n_ctx", m->n_ctx);
    if (m->engine) {
      struct engine_stats st;
      engine_stats(m->engine, &st);
      json_t *x = json_pack("{s:i, s:i, s:i, s:I, s:I, s:I, s:I, s:I, s:I}",
                                      "slots", st.n_slots, "slots_busy", st.n_busy, "queued",
                                      st.n_queued, "done", (json_int_t)st.n_done, "cancelled",
                                      (json_int_t)st.n_cancelled, "errors", (json_int_t)st.n_errors,
                                      "prompt_tokens", (json_int_t)st.n_prompt_tokens,
                                      "cached_tokens", (json_int_t)st.n_cached_tokens,
                                      "generated_tokens", (json_int_t)st.n_gen_tokens);
      json_object_update(o, x);
      json_decref(x);
      json_object_set_new(o, "steps", json_integer((json_int_t)st.n_steps));
      json_object_set_new(o, "steps_split", json_integer((json_int_t)st.n_steps_split));
      /* prompt-lookup speculation: steps that verified drafts, draft tokens, those taken */
      json_object_set_new(o, "spec_steps", json_integer((json_int_t)st.n_spec_steps));
      json_object_set_new(o, "spec_drafted", json_integer((json_int_t)st.n_spec_drafted));
      json_object_set_new(o, "spec_accepted", json_integer((json_int_t)st.n_spec_accepted));
    } else { /* embedding work: requests computing or waiting, and those dropped unfinished */
      json_object_set_new(o, "embeddings_busy", json_integer(atomic_load(&m->embed_busy)));
      json_object_set_new(o, "cancelled", json_integer((json_int_t)atomic_load(&m->embed_cancelled)));
      unsigned long rounds, passes, shared; /* embed_queue.h: rounds shared by requests, their passes */
      embq_counts(m->embq, &rounds, &passes, &shared);
      json_object_set_new(o, "embed_rounds", json_integer((json_int_t)rounds));
      json_object_set_new(o, "embed_shared_rounds", json_integer((json_int_t)shared));
      json_object_set_new(o, "embed_passes", json_integer((json_int_t)passes));
    }
    json_object_set_new(o, "state", json_string(m->state == SLOT_READY ? "loaded" : "unloading"));
    json_object_set_new(o, "requests", json_integer(m->refs));
    json_array_append_new(models, o);
  }
  pthread_mutex_unlock(&s->reg_mu);
  return http_reply_json(
      r, 200,
      json_pack("{s:s, s:I, s:I, s:I, s:i, s:o}", "status",
                atomic_load(&s->draining) ? "draining" : "ok", "uptime_s",
                (json_int_t)(time(NULL) - s->started), "requests",
                (json_int_t)atomic_load(&s->n_requests), "errors",
                (json_int_t)atomic_load(&s->n_errors), "active_http",
                atomic_load(&s->n_active_http), "models", models));
}

/* One model in OpenAI's shape, plus hearth's fields: loaded, kind, and for loaded models the
 * context the server enforces. */
static json_t *model_obj(const char *id, time_t created, int loaded, int embedding, int n_ctx) {
  json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:b, s:s}", "id", id, "object", "model", "created",
                        (json_int_t)created, "owned_by", "hearth", "loaded", loaded, "kind",
                        embedding ? "embedding" : "chat");
  if (o && n_ctx) json_object_set_new(o, "context_length", json_integer(n_ctx));
  return o;
}

/* Adds id unless data already lists it. */
static void add_model(json_t *data, json_t *o) {
  size_t i;
  json_t *x;
  const char *id = json_string_value(json_object_get(o, "id"));
  json_array_foreach(data, i, x)
    if (!strcmp(json_string_value(json_object_get(x, "id")), id)) { json_decref(o); return; }
  json_array_append_new(data, o);
}

/* Every model the server can serve: the loaded ones first, then the command line's, then the Hub
 * cache's (id = repo id, created = 0: the cache does not say). When id is set, only that one. */
static json_t *model_list(struct srv *s, const char *id) {
  json_t *data = json_array();
  pthread_mutex_lock(&s->reg_mu);
  for (int i = 0; i < s->n_models; i++) {
    struct srv_model *m = &s->models[i];
    if (m->state == SLOT_READY && (!id || !strcmp(id, m->id)))
      add_model(data, model_obj(m->id, m->created, 1, m->info->is_embedding, m->n_ctx));
  }
  for (int i = 0; i < s->n_entries; i++)
    if (!id || !strcmp(id, s->entries[i].id))
      add_model(data, model_obj(s->entries[i].id, s->started, 0, s->entries[i].embedding, 0));
  pthread_mutex_unlock(&s->reg_mu);
  struct hub_model *list = NULL;
  int n = 0;
  struct hearth_err err = {0};
  if (!hub_cache_list(&list, &n, &err)) {
    for (int i = 0; i < n; i++)
      if (!id || !strcmp(id, list[i].repo))
        add_model(data, model_obj(list[i].repo, 0, 0, list[i].is_embedding, 0));
    free(list);
  }
  return data;
}

enum MHD_Result ep_models(struct http_req *r) {
  return http_reply_json(r, 200, json_pack("{s:s, s:o}", "object", "list", "data", model_list(r->srv, NULL)));
}

enum MHD_Result ep_model(struct http_req *r) {
  const char *id = r->url + strlen("/v1/models/");
  json_t *data = model_list(r->srv, id);
  if (!json_array_size(data)) {
    json_decref(data);
    return http_reply_error(r, 404, "model", "model_not_found", "no model '%s'", id);
  }
  json_t *o = json_incref(json_array_get(data, 0));
  json_decref(data);
  return http_reply_json(r, 200, o);
}

/* The reply to a failed acquire (registry.h's statuses). */
static enum MHD_Result acquire_failed(struct http_req *r, int status, struct hearth_err *err) {
  return http_reply_error(r, (unsigned)status, status == 500 ? NULL : "model",
                          status == 404 ? "model_not_found" : status == 500 ? "model_load_failed" : "invalid_value",
                          "%s", errors_scrub(err->msg));
}

/* ep_pick_model's work; wait 0: SRV_ACQUIRE_PENDING instead of waiting for a load. */
static int pick(struct http_req *r, int embedding, int wait, struct srv_model **out,
                enum MHD_Result *ret) {
  struct verr e;
  const char *name;
  *out = NULL;
  if (v_str(r->json, "model", 1, NULL, &name, &e)) { *ret = http_reply_verr(r, &e); return -1; }
  if (r->held) { /* one model per request */
    *ret = http_reply_error(r, 500, NULL, NULL, "internal error: a second model for one request");
    return -1;
  }
  struct srv_model *m;
  struct hearth_err err = {0};
  int status = 500;
  int rc = wait ? srv_model_acquire(r->srv, name, &m, &status, &err)
                : srv_model_try_acquire(r->srv, name, &m, &status, &err);
  if (rc == SRV_ACQUIRE_PENDING) return rc;
  if (rc) { *ret = acquire_failed(r, status, &err); return -1; }
  r->held = m; /* released when the request completes (http.c), a stream's after its last byte */
  if (embedding >= 0 && !m->info->is_embedding != !embedding) {
    *ret = http_reply_error(r, 400, "model", "invalid_model",
                            embedding ? "'%s' is not an embedding model"
                                      : "'%s' is an embedding model; use /v1/embeddings",
                            name);
    return -1;
  }
  *out = m;
  return 0;
}

struct srv_model *ep_pick_model(struct http_req *r, int embedding, enum MHD_Result *ret) {
  struct srv_model *m;
  return pick(r, embedding, 1, &m, ret) ? NULL : m;
}

int ep_pick_model_or_pending(struct http_req *r, int embedding, struct srv_model **m,
                             enum MHD_Result *ret) {
  int stream = json_is_true(json_object_get(r->json, "stream"));
  return pick(r, embedding, !stream, m, ret);
}
