/* server/models.c — GET /health, /status, /v1/models, /v1/models/{id}; picking a request's model. */
#include "server/routes.h"

#include <string.h>

#include "server/embed_queue.h"
#include "server/engine.h"

enum MHD_Result ep_health(struct http_req *r) {
  return http_reply_json(r, 200, json_pack("{s:s}", "status", "ok"));
}

/* Per-model slot and queue occupancy: what a client (and the disconnect test) can watch. */
enum MHD_Result ep_status(struct http_req *r) {
  struct srv *s = r->srv;
  json_t *models = json_array();
  for (int i = 0; i < s->n_models; i++) {
    struct srv_model *m = &s->models[i];
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
    } else { /* embedding work: requests computing or waiting, and those dropped unfinished */
      json_object_set_new(o, "embeddings_busy", json_integer(atomic_load(&m->embed_busy)));
      json_object_set_new(o, "cancelled", json_integer((json_int_t)atomic_load(&m->embed_cancelled)));
      unsigned long rounds, passes, shared; /* embed_queue.h: rounds shared by requests, their passes */
      embq_counts(m->embq, &rounds, &passes, &shared);
      json_object_set_new(o, "embed_rounds", json_integer((json_int_t)rounds));
      json_object_set_new(o, "embed_shared_rounds", json_integer((json_int_t)shared));
      json_object_set_new(o, "embed_passes", json_integer((json_int_t)passes));
    }
    json_array_append_new(models, o);
  }
  return http_reply_json(
      r, 200,
      json_pack("{s:s, s:I, s:I, s:I, s:i, s:o}", "status",
                atomic_load(&s->draining) ? "draining" : "ok", "uptime_s",
                (json_int_t)(time(NULL) - s->started), "requests",
                (json_int_t)atomic_load(&s->n_requests), "errors",
                (json_int_t)atomic_load(&s->n_errors), "active_http",
                atomic_load(&s->n_active_http), "models", models));
}

static json_t *model_obj(const struct srv_model *m) {
  return json_pack("{s:s, s:s, s:I, s:s, s:i}", "id", m->id, "object", "model", "created",
                   (json_int_t)m->created, "owned_by", "hearth", "context_length", m->n_ctx);
}

enum MHD_Result ep_models(struct http_req *r) {
  json_t *data = json_array();
  for (int i = 0; i < r->srv->n_models; i++)
    json_array_append_new(data, model_obj(&r->srv->models[i]));
  return http_reply_json(r, 200, json_pack("{s:s, s:o}", "object", "list", "data", data));
}

enum MHD_Result ep_model(struct http_req *r) {
  const char *id = r->url + strlen("/v1/models/");
  struct srv_model *m = srv_find_model(r->srv, id);
  if (!m) return http_reply_error(r, 404, "model", "model_not_found", "no model '%s'", id);
  return http_reply_json(r, 200, model_obj(m));
}

struct srv_model *ep_pick_model(struct http_req *r, int embedding, enum MHD_Result *ret) {
  struct verr e;
  const char *name;
  if (v_str(r->json, "model", 1, NULL, &name, &e)) { *ret = http_reply_verr(r, &e); return NULL; }
  struct srv_model *m = srv_find_model(r->srv, name);
  if (!m) {
    *ret = http_reply_error(r, 404, "model", "model_not_found", "the model '%s' does not exist",
                            name);
    return NULL;
  }
  if (!m->info->is_embedding != !embedding) {
    *ret = http_reply_error(r, 400, "model", "invalid_model",
                            embedding ? "'%s' is not an embedding model"
                                      : "'%s' is an embedding model; use /v1/embeddings",
                            name);
    return NULL;
  }
  return m;
}
