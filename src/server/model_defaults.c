/* server/model_defaults.c — the default models of `hearth serve` without --model: found in the
 * Hub cache, or pulled into it on the first start with progress lines on stderr. */
#include <stdio.h>
#include <string.h>

#include "base/err.h"
#include "load/hub.h"
#include "load/hub_cache.h"
#include "load/hub_pull.h"
#include "server/registry.h"

static int pull_progress(const struct hub_progress *p, void *arg) {
  (void)arg;
  static char last[512];
  char line[512];
  /* one line per file and status, and one per 10 % of the whole pull */
  unsigned pct = p->all_total ? (unsigned)(p->all_completed * 10 / p->all_total) : 0;
  snprintf(line, sizeof line, "%s %s %u", p->status, p->file ? p->file : "", pct);
  if (strcmp(line, last)) {
    snprintf(last, sizeof last, "%s", line);
    fprintf(stderr, "hearth serve: pull: %s%s%s %.1f / %.1f MB (all: %.1f / %.1f MB)\n", p->status,
            p->file ? " " : "", p->file ? p->file : "", p->completed / 1e6, p->total / 1e6,
            p->all_completed / 1e6, p->all_total / 1e6);
  }
  return 0;
}

int registry_ensure_cached(const char *repo, int offline, struct hearth_err *err) {
  char dir[1024], root[1024] = "?";
  struct hearth_err e2 = {0};
  if (!hub_resolve(repo, dir, sizeof dir, &e2)) return 0;
  hub_cache_root(root, sizeof root);
  if (offline)
    return err_set(err, HEARTH_ERR_IO, "the default model %s is not in the Hugging Face cache (%s) "
                   "and --offline forbids downloading it: run `hearth pull %s` first, or name "
                   "another model with --model", repo, root, repo);
  fprintf(stderr, "hearth serve: %s is not in %s: pulling it\n", repo, root);
  struct hub_pull_opts po = {.progress = pull_progress};
  int rc = hub_pull(repo, &po, dir, sizeof dir, err);
  if (rc) err_prefix(err, "pulling the default model %s (or use --offline with --model)", repo);
  return rc;
}
