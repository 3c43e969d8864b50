/* load/hub_stub.c — placeholder bodies of hub_cache.h and hub_pull.h so that code written against
 * them links; replaced by hub_cache.c and hub_pull.c (helper branch `hub`). */
#include <stdlib.h>

#include "load/hub_cache.h"
#include "load/hub_pull.h"

int hub_cache_list(struct hub_model **out, int *n, struct hearth_err *err) {
  (void)err;
  *out = NULL;
  *n = 0;
  return 0;
}
int hub_cache_rm(const char *repo, struct hearth_err *err) {
  return err_set(err, HEARTH_ERR_UNSUPPORTED, "%s: removing models is not built yet", repo);
}
int hub_pull(const char *repo, const struct hub_pull_opts *o, char *dir, size_t cap, struct hearth_err *err) {
  (void)o; (void)dir; (void)cap;
  return err_set(err, HEARTH_ERR_UNSUPPORTED, "%s: pulling models is not built yet", repo);
}
