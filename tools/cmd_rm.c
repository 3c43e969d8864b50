/* tools/cmd_rm.c — `hearth rm ORG/NAME [--revision REV]`: a model's snapshots (or one of them) and
 * the blobs no remaining snapshot uses, out of the local Hub cache. */
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "load/hub_cache.h"

int cmd_rm(int argc, char **argv) {
  const char *repo = NULL, *rev = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--revision") && i + 1 < argc) rev = argv[++i];
    else if (argv[i][0] != '-' && !repo) repo = argv[i];
    else { repo = NULL; break; }
  }
  if (!repo) { fprintf(stderr, "usage: hearth rm ORG/NAME [--revision REV]\n"); return 2; }
  struct hearth_err err = {0};
  int rc = rev ? hub_cache_rm_revision(repo, rev, &err) : hub_cache_rm(repo, &err);
  if (rc) { fprintf(stderr, "hearth rm: %s\n", err.msg); return 1; }
  printf("removed %s%s%s\n", repo, rev ? " revision " : "", rev ? rev : "");
  return 0;
}
