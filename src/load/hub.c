/* load/hub.c — model directory or Hub-cache repo id -> a directory path. */
#include "load/hub.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/file.h"
#include "load/hub_cache.h"

static int is_dir(const char *p) {
  struct stat sb;
  return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

int hub_cache_root(char *out, size_t cap) {
  const char *c = getenv("HF_HUB_CACHE"), *h = getenv("HF_HOME"), *home = getenv("HOME");
  if (c && *c) return snprintf(out, cap, "%s", c) < (int)cap ? 0 : -1;
  if (h && *h) return snprintf(out, cap, "%s/hub", h) < (int)cap ? 0 : -1;
  if (home && *home) return snprintf(out, cap, "%s/.cache/huggingface/hub", home) < (int)cap ? 0 : -1;
  return -1;
}

int hub_resolve(const char *p, char *out, size_t cap, struct hearth_err *err) {
  if (is_dir(p)) {
    if (snprintf(out, cap, "%s", p) >= (int)cap) return err_set(err, HEARTH_ERR_ARG, "model path too long");
    return 0;
  }
  return hub_resolve_repo(p, out, cap, err);
}

int hub_resolve_repo(const char *p, char *out, size_t cap, struct hearth_err *err) {
  const char *slash = strchr(p, '/');
  int looks_like_repo = slash && slash != p && !strchr(slash + 1, '/') && slash[1] && p[0] != '.';
  if (!looks_like_repo) return err_set(err, HEARTH_ERR_IO, "%s: no such model directory", p);
  char root[1024], repo[2048];
  if (hub_cache_root(root, sizeof root)) return err_set(err, HEARTH_ERR_IO, "%s: no such directory and no Hugging Face cache to look in", p);
  if (strlen(p) > 512) return err_set(err, HEARTH_ERR_ARG, "repo id too long");
  if (snprintf(repo, sizeof repo, "%s/models--%.*s--%.512s", root, (int)(slash - p), p, slash + 1) >= (int)sizeof repo)
    return err_set(err, HEARTH_ERR_ARG, "repo path too long");
  char ref[2100], rev[256] = "";
  snprintf(ref, sizeof ref, "%s/refs/main", repo);
  char *rtext;
  size_t rlen;
  if (file_exists(ref)) {
    int rc = file_read_all(ref, FILE_CAP_SMALL, &rtext, &rlen, err);
    if (rc) return rc;
    snprintf(rev, sizeof rev, "%s", rtext);
    rev[strcspn(rev, "\r\n")] = 0;
    free(rtext);
  }
  char snaps[2100];
  snprintf(snaps, sizeof snaps, "%s/snapshots", repo);
  if (!rev[0] || strchr(rev, '/') || !strcmp(rev, ".") || !strcmp(rev, "..")) { /* no usable ref: the only snapshot */
    DIR *d = opendir(snaps);
    int n = 0;
    if (d) {
      struct dirent *e;
      while ((e = readdir(d)))
        if (e->d_name[0] != '.') { n++; snprintf(rev, sizeof rev, "%s", e->d_name); }
      closedir(d);
    }
    if (n != 1) return err_set(err, HEARTH_ERR_IO, "%s: not a directory, and %s has %s", p, repo, n ? "several snapshots and no refs/main" : "no snapshot");
  }
  if (snprintf(out, cap, "%s/%s", snaps, rev) >= (int)cap) return err_set(err, HEARTH_ERR_ARG, "model path too long");
  if (!is_dir(out)) return err_set(err, HEARTH_ERR_IO, "%s: snapshot %s is missing from the Hugging Face cache", p, rev);
  return 0;
}

int hearth_resolve_model_dir(const char *path_or_repo, char *out, size_t cap, struct hearth_err *err) {
  return hub_resolve(path_or_repo, out, cap, err);
}
