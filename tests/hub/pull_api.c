/* tests/hub/pull_api.c — hub_pull through its C API, for pull.test.mjs (which runs the fake Hub):
 *   pull_api REPO progress   pulls, printing each progress event as a JSON line, then the result
 *   pull_api REPO cancel     cancels once the first weight bytes arrived; prints the result
 * The result line: {"rc": N, "dir": "...", "error": "..."}. What the server's pull endpoint relies on. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "load/hub_pull.h"

static int on_progress(const struct hub_progress *p, void *arg) {
  int cancel = *(int *)arg;
  json_t *j = json_pack("{s:s, s:s?, s:I, s:I, s:I, s:I}", "status", p->status, "file", p->file, "completed",
                        (json_int_t)p->completed, "total", (json_int_t)p->total, "all_completed",
                        (json_int_t)p->all_completed, "all_total", (json_int_t)p->all_total);
  char *s = json_dumps(j, JSON_COMPACT);
  printf("%s\n", s);
  free(s);
  json_decref(j);
  return cancel && p->file && !strcmp(p->status, "downloading") && strstr(p->file, ".safetensors") && p->completed > 0;
}

int main(int argc, char **argv) {
  if (argc != 3) { fprintf(stderr, "usage: pull_api REPO progress|cancel\n"); return 2; }
  int cancel = !strcmp(argv[2], "cancel");
  struct hub_pull_opts o = {.progress = on_progress, .progress_arg = &cancel};
  struct hearth_err err = {0};
  char dir[2048] = "";
  int rc = hub_pull(argv[1], &o, dir, sizeof dir, &err);
  json_t *j = json_pack("{s:i, s:s, s:s}", "rc", rc, "dir", dir, "error", rc ? err.msg : "");
  char *s = json_dumps(j, JSON_COMPACT);
  printf("%s\n", s);
  free(s);
  json_decref(j);
  return 0;
}
