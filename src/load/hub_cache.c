/* load/hub_cache.c — listing and removing the models of the local Hub cache, and the per-repo lock
 * that pull and rm share. */
#include "load/hub_cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/file.h"
#include "load/hf_config.h"
#include "load/hub.h"
#include "load/hub_files.h"
#include "load/safetensors.h"
#include "load/sentence_transformers.h"

int hub_repo_dir(const char *repo, char *out, size_t cap) {
  char root[1024];
  if (!hub_repo_id_valid(repo) || hub_cache_root(root, sizeof root)) return -1;
  const char *slash = strchr(repo, '/');
  return snprintf(out, cap, "%s/models--%.*s--%s", root, (int)(slash - repo), repo, slash + 1) < (int)cap ? 0 : -1;
}

static int mkdir_p(char *path) { /* path is modified and restored */
  for (char *s = path + 1; *s; s++)
    if (*s == '/') { *s = 0; int bad = mkdir(path, 0755) && errno != EEXIST; *s = '/'; if (bad) return -1; }
  return mkdir(path, 0755) && errno != EEXIST ? -1 : 0;
}

int hub_repo_lock(const char *repo, int *fd, struct hearth_err *err) {
  char root[1024], dir[1600], path[1700];
  *fd = -1;
  if (!hub_repo_id_valid(repo)) return err_set(err, HEARTH_ERR_ARG, "'%.200s' is not a repository id ORG/NAME", repo);
  if (hub_cache_root(root, sizeof root)) return err_set(err, HEARTH_ERR_IO, "no Hugging Face cache folder: set HF_HUB_CACHE or HOME");
  const char *slash = strchr(repo, '/');
  snprintf(dir, sizeof dir, "%s/.locks/models--%.*s--%s", root, (int)(slash - repo), repo, slash + 1);
  snprintf(path, sizeof path, "%s/hearth.lock", dir);
  if (mkdir_p(dir)) return err_set(err, HEARTH_ERR_IO, "%s: %s", dir, strerror(errno));
  /* the lock file is never deleted: a waiter would then hold a lock on a file nobody else opens */
  *fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (*fd < 0) return err_set(err, HEARTH_ERR_IO, "%s: %s", path, strerror(errno));
  while (flock(*fd, LOCK_EX))
    if (errno != EINTR) {
      int e = errno;
      close(*fd);
      *fd = -1;
      return err_set(err, HEARTH_ERR_IO, "%s: lock: %s", path, strerror(e));
    }
  return 0;
}

/* ---- listing ----------------------------------------------------------------------------- */

/* Sums the sizes of the distinct files the snapshot's links reach (one folder level down, for
 * 1_Pooling/). */
static uint64_t snapshot_bytes(const char *dir, int depth, ino_t *seen, int *n_seen, int cap) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  uint64_t total = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char p[2400];
    struct stat sb;
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    if (stat(p, &sb)) continue;
    if (S_ISDIR(sb.st_mode)) { if (depth < 2) total += snapshot_bytes(p, depth + 1, seen, n_seen, cap); continue; }
    if (!S_ISREG(sb.st_mode)) continue;
    int dup = 0;
    for (int i = 0; i < *n_seen; i++) dup |= seen[i] == sb.st_ino;
    if (dup) continue;
    if (*n_seen < cap) seen[(*n_seen)++] = sb.st_ino;
    total += (uint64_t)sb.st_size;
  }
  closedir(d);
  return total;
}

/* Fills m from the snapshot dir; -1 when hearth cannot load it (no config, unknown family, no weights). */
static int describe(const char *repo, const char *dir, struct hub_model *m) {
  struct hearth_err e = {0};
  struct hf_config *cfg = calloc(1, sizeof *cfg);
  struct st_set *st = NULL;
  struct sentence_tf stf;
  int ok = cfg && !hf_config_load(dir, cfg, &e) && !st_open_dir(dir, &st, &e) && !sentence_tf_load(dir, &stf, &e);
  if (ok) {
    memset(m, 0, sizeof *m);
    snprintf(m->repo, sizeof m->repo, "%s", repo);
    snprintf(m->dir, sizeof m->dir, "%s", dir);
    const char *rev = strrchr(dir, '/');
    snprintf(m->revision, sizeof m->revision, "%.63s", rev ? rev + 1 : dir);
    snprintf(m->family, sizeof m->family, "%s", hf_family_name(cfg->family));
    /* an embedding model: a sentence-transformers pipeline, or bare names without an LM head
     * (Qwen3-Embedding as published), as the loader decides */
    m->is_embedding = stf.present || (st_find(st, "embed_tokens.weight") && !st_find(st, "lm_head.weight"));
    for (int i = 0; i < st->n_tensors; i++) m->n_params += (uint64_t)st->tensors[i].n_elems;
    ino_t seen[512];
    int n_seen = 0;
    m->bytes_on_disk = snapshot_bytes(dir, 0, seen, &n_seen, 512);
  }
  st_close(st);
  free(cfg);
  return ok ? 0 : -1;
}

static int by_repo(const void *a, const void *b) {
  return strcmp(((const struct hub_model *)a)->repo, ((const struct hub_model *)b)->repo);
}

int hub_cache_list(struct hub_model **out, int *n, struct hearth_err *err) {
  char root[1024];
  *out = NULL;
  *n = 0;
  if (hub_cache_root(root, sizeof root)) return err_set(err, HEARTH_ERR_IO, "no Hugging Face cache folder: set HF_HUB_CACHE or HOME");
  DIR *d = opendir(root);
  if (!d) return errno == ENOENT ? 0 : err_set(err, HEARTH_ERR_IO, "%s: %s", root, strerror(errno));
  struct hub_model *v = NULL;
  int cap = 0, rc = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (strncmp(e->d_name, "models--", 8)) continue;
    char repo[256], dir[1024];
    const char *sep = strstr(e->d_name + 8, "--");
    if (!sep || snprintf(repo, sizeof repo, "%.*s/%s", (int)(sep - e->d_name - 8), e->d_name + 8, sep + 2) >= (int)sizeof repo) continue;
    struct hearth_err ignored = {0};
    if (!hub_repo_id_valid(repo) || hub_resolve_repo(repo, dir, sizeof dir, &ignored)) continue;
    if (*n == cap) {
      struct hub_model *nv = realloc(v, (size_t)(cap = cap ? 2 * cap : 8) * sizeof *v);
      if (!nv) { rc = err_set(err, HEARTH_ERR_NOMEM, "out of memory"); break; }
      v = nv;
    }
    if (!describe(repo, dir, &v[*n])) (*n)++;
  }
  closedir(d);
  if (rc) { free(v); *n = 0; return rc; }
  if (*n) qsort(v, (size_t)*n, sizeof *v, by_repo);
  *out = v;
  return 0;
}

/* ---- removing ---------------------------------------------------------------------------- */

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb; (void)flag; (void)ftw;
  return remove(path) && errno != ENOENT ? -1 : 0;
}

static int rm_tree(const char *path) {
  struct stat sb;
  if (lstat(path, &sb)) return errno == ENOENT ? 0 : -1;
  return nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* The blob names (last component of each link target) under a snapshot folder, appended to names. */
static void collect_links(const char *dir, int depth, char (*names)[160], int *n, int cap) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char p[2400], t[1024];
    struct stat sb;
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    if (lstat(p, &sb)) continue;
    if (S_ISDIR(sb.st_mode) && depth < 4) { collect_links(p, depth + 1, names, n, cap); continue; }
    ssize_t len = S_ISLNK(sb.st_mode) ? readlink(p, t, sizeof t - 1) : -1;
    if (len <= 0 || *n >= cap) continue;
    t[len] = 0;
    const char *base = strrchr(t, '/');
    snprintf(names[(*n)++], 160, "%.159s", base ? base + 1 : t);
  }
  closedir(d);
}

/* Deletes the files of refs/ (any depth) whose content is commit. */
static void rm_refs_to(const char *dir, const char *commit, int depth) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char p[2400], *text = NULL;
    size_t len;
    struct stat sb;
    struct hearth_err ignored = {0};
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    if (lstat(p, &sb)) continue;
    if (S_ISDIR(sb.st_mode)) { if (depth < 4) rm_refs_to(p, commit, depth + 1); rmdir(p); continue; }
    if (file_read_all(p, FILE_CAP_SMALL, &text, &len, &ignored)) continue;
    text[strcspn(text, "\r\n")] = 0;
    if (!strcmp(text, commit)) unlink(p);
    free(text);
  }
  closedir(d);
}

static int rm_locked(const char *repo, const char *revision, struct hearth_err *err) {
  char rdir[1400], path[2000];
  struct stat sb;
  if (hub_repo_dir(repo, rdir, sizeof rdir)) return err_set(err, HEARTH_ERR_ARG, "'%.200s' is not a repository id ORG/NAME", repo);
  if (stat(rdir, &sb) || !S_ISDIR(sb.st_mode)) return err_set(err, HEARTH_ERR_IO, "%s: not in the cache (%s)", repo, rdir);
  if (!revision) {
    if (rm_tree(rdir)) return err_set(err, HEARTH_ERR_IO, "%s: %s", rdir, strerror(errno));
    return 0;
  }
  /* revision: a ref's commit, or a commit */
  char commit[128];
  snprintf(commit, sizeof commit, "%s", revision);
  snprintf(path, sizeof path, "%s/refs/%s", rdir, revision);
  char *text = NULL;
  size_t len;
  struct hearth_err ignored = {0};
  if (file_exists(path) && !file_read_all(path, FILE_CAP_SMALL, &text, &len, &ignored)) {
    snprintf(commit, sizeof commit, "%s", text);
    commit[strcspn(commit, "\r\n")] = 0;
    free(text);
  }
  if (!hub_name_safe(commit) || strchr(commit, '/')) return err_set(err, HEARTH_ERR_ARG, "'%.100s' is not a revision", revision);
  snprintf(path, sizeof path, "%s/snapshots/%s", rdir, commit);
  if (stat(path, &sb)) return err_set(err, HEARTH_ERR_IO, "%s: no snapshot %s in the cache", repo, revision);
  if (rm_tree(path)) return err_set(err, HEARTH_ERR_IO, "%s: %s", path, strerror(errno));
  snprintf(path, sizeof path, "%s/refs", rdir);
  rm_refs_to(path, commit, 0);
  /* the blobs the remaining snapshots still link to stay */
  enum { CAP = 16384 };
  char (*used)[160] = malloc(CAP * sizeof *used);
  if (!used) return err_set(err, HEARTH_ERR_NOMEM, "out of memory");
  int n_used = 0, n_snaps = 0;
  snprintf(path, sizeof path, "%s/snapshots", rdir);
  DIR *d = opendir(path);
  struct dirent *e;
  while (d && (e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char s[2400];
    snprintf(s, sizeof s, "%s/%s", path, e->d_name);
    collect_links(s, 0, used, &n_used, CAP);
    n_snaps++;
  }
  if (d) closedir(d);
  if (!n_snaps) { /* nothing left: the whole repo goes */
    free(used);
    return rm_tree(rdir) ? err_set(err, HEARTH_ERR_IO, "%s: %s", rdir, strerror(errno)) : 0;
  }
  snprintf(path, sizeof path, "%s/blobs", rdir);
  d = opendir(path);
  while (d && (e = readdir(d))) {
    size_t n = strlen(e->d_name);
    if (e->d_name[0] == '.' || (n > 11 && !strcmp(e->d_name + n - 11, ".incomplete"))) continue;
    int keep = 0;
    for (int i = 0; i < n_used && !keep; i++) keep = !strcmp(used[i], e->d_name);
    if (!keep) {
      char b[2400];
      snprintf(b, sizeof b, "%s/%s", path, e->d_name);
      unlink(b);
    }
  }
  if (d) closedir(d);
  free(used);
  return 0;
}

static int rm_with_lock(const char *repo, const char *revision, struct hearth_err *err) {
  int fd, rc = hub_repo_lock(repo, &fd, err);
  if (rc) return rc;
  rc = rm_locked(repo, revision, err);
  close(fd);
  return rc;
}

int hub_cache_rm(const char *repo, struct hearth_err *err) { return rm_with_lock(repo, NULL, err); }

int hub_cache_rm_revision(const char *repo, const char *revision, struct hearth_err *err) {
  return rm_with_lock(repo, revision, err);
}
