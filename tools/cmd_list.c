/* tools/cmd_list.c — `hearth list [--json]`: the models of the local Hub cache hearth can load. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "load/hub_cache.h"

int cmd_list(int argc, char **argv) {
  int json = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--json")) json = 1;
    else { fprintf(stderr, "usage: hearth list [--json]\n"); return 2; }
  }
  struct hub_model *m = NULL;
  int n = 0;
  struct hearth_err err = {0};
  if (hub_cache_list(&m, &n, &err)) { fprintf(stderr, "hearth list: %s\n", err.msg); return 1; }
  if (json) {
    json_t *a = json_array();
    for (int i = 0; i < n; i++)
      json_array_append_new(a, json_pack("{s:s, s:s, s:s, s:I, s:I, s:s, s:s}", "repo", m[i].repo, "revision", m[i].revision,
                                         "family", m[i].family, "parameters", (json_int_t)m[i].n_params, "bytes_on_disk",
                                         (json_int_t)m[i].bytes_on_disk, "kind", m[i].is_embedding ? "embedding" : "chat",
                                         "path", m[i].dir));
    char *s = json_dumps(a, JSON_INDENT(2));
    printf("%s\n", s ? s : "[]");
    free(s);
    json_decref(a);
  } else {
    printf("%-40s %-12s %-8s %10s %10s  %s\n", "MODEL", "REVISION", "FAMILY", "PARAMS", "SIZE", "KIND");
    for (int i = 0; i < n; i++) {
      char params[32], size[32];
      double p = (double)m[i].n_params;
      if (p >= 1e9) snprintf(params, sizeof params, "%.2fB", p / 1e9);
      else snprintf(params, sizeof params, "%.1fM", p / 1e6);
      double b = (double)m[i].bytes_on_disk;
      if (b >= 1e9) snprintf(size, sizeof size, "%.2f GB", b / 1e9);
      else snprintf(size, sizeof size, "%.1f MB", b / 1e6);
      printf("%-40s %-12.12s %-8s %10s %10s  %s\n", m[i].repo, m[i].revision, m[i].family, params, size,
             m[i].is_embedding ? "embedding" : "chat");
    }
  }
  free(m);
  return 0;
}
