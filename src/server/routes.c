/* server/routes.c — the table of endpoints: path, method, handler. */
#include "server/routes.h"

#include <string.h>

static const struct route ROUTES[] = {
  {"/health", 0, "GET", ep_health, 1},
  {"/v1/health", 0, "GET", ep_health, 1},
  {"/status", 0, "GET", ep_status, 0},
  {"/v1/models", 0, "GET", ep_models, 0},
  {"/v1/models/pull", 0, "POST", ep_models_pull, 0},
  {"/v1/models/", 1, "GET", ep_model, 0},
  {"/v1/models/", 1, "DELETE", ep_model_delete, 0},
  {"/v1/chat/completions", 0, "POST", ep_chat_completions, 0},
  {"/v1/completions", 0, "POST", ep_completions, 0},
  {"/v1/embeddings", 0, "POST", ep_embeddings, 0},
  {"/tokenize", 0, "POST", ep_tokenize, 0},
  {"/detokenize", 0, "POST", ep_detokenize, 0},
};

const struct route *routes_match(const char *url, const char *method, int *path_known,
                                 const char **allow) {
  *path_known = 0;
  *allow = NULL;
  for (size_t i = 0; i < sizeof ROUTES / sizeof ROUTES[0]; i++) {
    const struct route *rt = &ROUTES[i];
    size_t n = strlen(rt->path);
    int hit = rt->prefix ? (!strncmp(url, rt->path, n) && url[n])
                         : !strcmp(url, rt->path);
    if (!hit) continue;
    int get = !strcmp(rt->method, "GET");
    if (!strcmp(method, rt->method) || (get && !strcmp(method, "HEAD"))) return rt;
    *path_known = 1;
    *allow = get ? "GET, HEAD" : rt->method;
  }
  return NULL;
}
