/* server/routes.h — the route table and the endpoint handlers (one file per endpoint).
 * A handler runs on the connection's thread after http.c's checks (see http.h) and must queue
 * exactly one reply through the http_reply_* helpers. */
#ifndef HEARTH_SERVER_ROUTES_H
#define HEARTH_SERVER_ROUTES_H

#include "server/http.h"

typedef enum MHD_Result (*route_fn)(struct http_req *r);

struct route {
  const char *path;
  int prefix;          /* 1: path is a prefix ("/v1/models/" + id) */
  const char *method;  /* "GET" (HEAD allowed too), "POST" or "DELETE" */
  route_fn fn;
  int open;            /* 1: served without the bearer token (health) */
};

/* The route for url+method, or NULL. On NULL, *path_known says whether another method would match
 * (→ 405 with *allow as the Allow header) or not (→ 404). */
const struct route *routes_match(const char *url, const char *method, int *path_known,
                                 const char **allow);

enum MHD_Result ep_health(struct http_req *r);           /* GET /health */
enum MHD_Result ep_status(struct http_req *r);           /* GET /status */
enum MHD_Result ep_models(struct http_req *r);           /* GET /v1/models */
enum MHD_Result ep_model(struct http_req *r);            /* GET /v1/models/{id} */
enum MHD_Result ep_chat_completions(struct http_req *r); /* POST /v1/chat/completions */
enum MHD_Result ep_completions(struct http_req *r);      /* POST /v1/completions */
enum MHD_Result ep_embeddings(struct http_req *r);       /* POST /v1/embeddings */
enum MHD_Result ep_tokenize(struct http_req *r);         /* POST /tokenize */
enum MHD_Result ep_detokenize(struct http_req *r);       /* POST /detokenize */
enum MHD_Result ep_models_pull(struct http_req *r);      /* POST /v1/models/pull (model_admin.c) */
enum MHD_Result ep_model_delete(struct http_req *r);     /* DELETE /v1/models/{id} (model_admin.c) */

/* The model named by the request's "model" field, of the wanted kind (1 embedding, 0 generative,
 * -1 either), loading it when it is not loaded (server/registry.h); the request holds it until it
 * completes. On failure queues 400 (missing/wrong type, wrong kind), 404 model_not_found or 500
 * model_load_failed into *ret. */
struct srv_model *ep_pick_model(struct http_req *r, int embedding, enum MHD_Result *ret);
/* The same for a completion: a request with "stream": true whose model is not loaded yet (being
 * loaded, or only on disk) gets 1 and no model, and streams its wait (server/stream_load.h);
 * otherwise 0 with *m, or -1 with *ret queued, as ep_pick_model. */
int ep_pick_model_or_pending(struct http_req *r, int embedding, struct srv_model **m,
                             enum MHD_Result *ret);

/* A copy of a chat request's messages as templates expect them: text parts joined into one string,
 * tool-call arguments parsed from their JSON string into an object. NULL with *e filled on a
 * malformed message (chat_completions.c; /tokenize uses it too, so counts agree). */
json_t *chat_messages_normalize(json_t *msgs, struct verr *e);

#endif
