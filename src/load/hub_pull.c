/* load/hub_pull.c — `hearth pull`: a Hub repository's inference files into the local Hub cache.
 *
 * The order is what keeps a failure invisible: (1) the revision's file list and every file's
 * HEAD (etag, size, where its bytes are) before anything is written; (2) the blobs, each through
 * blobs/<etag>.incomplete renamed only once its size (and, for an LFS file, its sha256 = its etag)
 * matched; model.safetensors.index.json first, so that a hostile index is refused before a single
 * weight is fetched; (3) only then the snapshot's relative symlinks, each made aside and renamed
 * in; (4) refs/<revision> last. A pull that fails in (1)-(2) leaves no snapshot and no ref, only
 * the verified blobs and the *.incomplete files a retry resumes from (HTTP Range); one that fails
 * in (3) removes the links it made. A lock (flock on ROOT/.locks/models--ORG--NAME/hearth.lock, the
 * folder huggingface_hub keeps its own locks in) makes a second pull of the same model wait. */
#include "load/hub_pull.h"

#ifndef HEARTH_HAVE_CURL
int hub_pull(const char *repo, const struct hub_pull_opts *o, char *dir, size_t cap, struct hearth_err *err) {
  (void)o; (void)dir; (void)cap;
  return err_set(err, HEARTH_ERR_UNSUPPORTED, "%s: hearth was built without libcurl, so it cannot pull models "
                 "(install libcurl4-openssl-dev: scripts/install-deps.sh, then rebuild)", repo);
}
#else
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/file.h"
#include "base/sha256.h"
#include "load/hub_cache.h"
#include "load/hub_files.h"
#include "load/hub_http.h"

#define DEFAULT_ENDPOINT "https://huggingface.co"
#define MAX_FILES 4096

struct pfile {
  char name[256];
  char etag[160];
  int lfs;              /* the Hub said X-Linked-Etag: the etag is the sha256 of the bytes */
  uint64_t size;
  char url[2048];       /* where the bytes are: the CDN location of an LFS file, else the resolve URL */
  int have;             /* blobs/<etag> is already complete */
};

struct pull {
  const char *repo;
  const char *rev;
  char commit[96];
  char endpoint[512];
  char repo_dir[1400];
  struct hub_http *http;
  struct pfile *files;
  int n_files;
  uint64_t all_total, all_done;
  hub_progress_fn progress;
  void *progress_arg;
};

static int report(struct pull *p, const char *status, const struct pfile *f, uint64_t done, struct hearth_err *err) {
  if (!p->progress) return 0;
  struct hub_progress pr = {status, f ? f->name : NULL, done, f ? f->size : p->all_total, p->all_done, p->all_total};
  if (!f) pr.completed = p->all_done;
  if (p->progress(&pr, p->progress_arg)) return err_set(err, HEARTH_ERR_CANCELLED, "%s: pull cancelled", p->repo);
  return 0;
}

/* The token: opts, else $HF_TOKEN, else the first line of $HF_HOME/token (~/.cache/huggingface/token). */
static void find_token(const char *given, char *out, size_t cap) {
  out[0] = 0;
  const char *t = given && *given ? given : getenv("HF_TOKEN");
  if (t && *t) { snprintf(out, cap, "%s", t); return; }
  char path[1200];
  const char *home = getenv("HF_HOME"), *h = getenv("HOME");
  if (home && *home) snprintf(path, sizeof path, "%s/token", home);
  else if (h && *h) snprintf(path, sizeof path, "%s/.cache/huggingface/token", h);
  else return;
  char *text = NULL;
  size_t len;
  struct hearth_err e = {0};
  if (!file_exists(path) || file_read_all(path, FILE_CAP_SMALL, &text, &len, &e)) return;
  snprintf(out, cap, "%s", text);
  out[strcspn(out, "\r\n \t")] = 0;
  free(text);
}

static int mkdirs(const char *path) { /* mkdir -p */
  char buf[2048];
  if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) return -1;
  for (char *s = buf + 1; *s; s++)
    if (*s == '/') { *s = 0; if (mkdir(buf, 0755) && errno != EEXIST) return -1; *s = '/'; }
  return mkdir(buf, 0755) && errno != EEXIST ? -1 : 0;
}

/* The message for a failed HTTP answer: 401/403 say how to give a token. */
static int http_error(struct pull *p, const struct hub_http_resp *r, const char *what, struct hearth_err *err) {
  if (r->status == 401 || r->status == 403)
    return err_set(err, HEARTH_ERR_IO, "%s: %s: HTTP %ld: a gated or private repository; set HF_TOKEN (or put a token in "
                   "$HF_HOME/token) for an account that was granted access", p->repo, what, r->status);
  if (r->status == 404)
    return err_set(err, HEARTH_ERR_IO, "%s: %s: not found on %s (HTTP 404)", p->repo, what, p->endpoint);
  return err_set(err, HEARTH_ERR_IO, "%s: %s: HTTP %ld from %s", p->repo, what, r->status, p->endpoint);
}

static int valid_etag(const char *e) {
  size_t n = strlen(e);
  if (!n || n > 128 || e[0] == '.') return 0;
  for (size_t i = 0; i < n; i++)
    if (!((e[i] >= '0' && e[i] <= '9') || (e[i] >= 'a' && e[i] <= 'z') || (e[i] >= 'A' && e[i] <= 'Z') || e[i] == '-' || e[i] == '_'))
      return 0;
  return 1;
}

/* (1a) the revision's commit and the file list, refusing a wanted name that would escape */
static int fetch_revision(struct pull *p, struct hearth_err *err) {
  char url[2048], rev[600], *body = NULL;
  struct hub_http_resp r;
  if (hub_http_escape_path(p->rev, rev, sizeof rev)) return err_set(err, HEARTH_ERR_ARG, "revision too long");
  for (char *s; (s = strchr(rev, '/'));) { /* a branch name with '/' is one path segment here */
    memmove(s + 3, s + 1, strlen(s + 1) + 1);
    memcpy(s, "%2F", 3);
  }
  snprintf(url, sizeof url, "%s/api/models/%s/revision/%s", p->endpoint, p->repo, rev);
  int rc = hub_http_get_text(p->http, url, 64u << 20, &body, &r, err);
  if (rc) return err_prefix(err, "%s", p->repo);
  if (r.status != 200) { free(body); return http_error(p, &r, "revision info", err); }
  json_error_t je;
  json_t *j = json_loads(body, 0, &je);
  free(body);
  json_t *sha = j ? json_object_get(j, "sha") : NULL, *sib = j ? json_object_get(j, "siblings") : NULL;
  if (!json_is_string(sha) || !json_is_array(sib)) {
    json_decref(j);
    return err_set(err, HEARTH_ERR_FORMAT, "%s: the revision info from %s has no 'sha' and 'siblings'", p->repo, p->endpoint);
  }
  snprintf(p->commit, sizeof p->commit, "%s", json_string_value(sha));
  if (!valid_etag(p->commit) || strlen(p->commit) > 64) {
    json_decref(j);
    return err_set(err, HEARTH_ERR_FORMAT, "%s: the revision's commit '%.64s' is not a commit id", p->repo, json_string_value(sha));
  }
  p->files = calloc(MAX_FILES, sizeof *p->files);
  if (!p->files) { json_decref(j); return err_set(err, HEARTH_ERR_NOMEM, "out of memory"); }
  size_t i;
  json_t *s;
  int has_config = 0;
  json_array_foreach(sib, i, s) {
    const char *name = json_string_value(json_object_get(s, "rfilename"));
    if (!name) continue;
    if (hub_file_looks_wanted(name) && !hub_name_safe(name)) {
      rc = err_set(err, HEARTH_ERR_FORMAT, "%s: refusing the file name '%.200s': it would leave the snapshot folder", p->repo, name);
      break;
    }
    if (!hub_file_wanted(name)) continue;
    if (p->n_files == MAX_FILES) { rc = err_set(err, HEARTH_ERR_FORMAT, "%s: more than %d files", p->repo, MAX_FILES); break; }
    snprintf(p->files[p->n_files++].name, sizeof p->files[0].name, "%s", name);
    has_config |= !strcmp(name, "config.json");
  }
  json_decref(j);
  if (!rc && !has_config) rc = err_set(err, HEARTH_ERR_FORMAT, "%s: revision %s has no config.json: not a model hearth can load", p->repo, p->rev);
  return rc;
}

/* (1b) each file's etag, size and location */
static int head_file(struct pull *p, struct pfile *f, struct hearth_err *err) {
  char url[2048], esc[800];
  struct hub_http_resp r;
  if (hub_http_escape_path(f->name, esc, sizeof esc)) return err_set(err, HEARTH_ERR_ARG, "%s: name too long", f->name);
  snprintf(url, sizeof url, "%s/%s/resolve/%s/%s", p->endpoint, p->repo, p->commit, esc);
  int rc = hub_http_head(p->http, url, &r, err);
  if (rc) return err_prefix(err, "%s", p->repo);
  int redirect = r.status >= 300 && r.status < 400;
  if (!(r.status >= 200 && r.status < 300) && !redirect) return http_error(p, &r, f->name, err);
  const char *etag = r.linked_etag[0] ? r.linked_etag : r.etag;
  int64_t size = r.linked_size >= 0 ? r.linked_size : redirect ? -1 : r.content_length;
  if (!valid_etag(etag)) return err_set(err, HEARTH_ERR_FORMAT, "%s: %s: the Hub gave no usable ETag ('%.64s')", p->repo, f->name, etag);
  if (size < 0) return err_set(err, HEARTH_ERR_FORMAT, "%s: %s: the Hub gave no size", p->repo, f->name);
  snprintf(f->etag, sizeof f->etag, "%s", etag);
  f->lfs = r.linked_etag[0] != 0;
  if (f->lfs && strlen(etag) != 64) return err_set(err, HEARTH_ERR_FORMAT, "%s: %s: X-Linked-Etag is not a sha256", p->repo, f->name);
  f->size = (uint64_t)size;
  snprintf(f->url, sizeof f->url, "%s", redirect && r.location[0] ? r.location : url);
  return 0;
}

struct sink { struct pull *p; struct pfile *f; int fd; struct sha256 h; uint64_t done, from; struct hub_http_resp *r;
              int restarted, failed; struct hearth_err *err; };

static int on_bytes(const void *data, size_t len, void *arg) {
  struct sink *s = arg;
  if (s->from && s->r->status == 200 && !s->restarted) { /* the server ignored the Range: start over */
    s->restarted = 1;
    s->p->all_done -= s->done;
    s->done = 0;
    if (ftruncate(s->fd, 0) || lseek(s->fd, 0, SEEK_SET) < 0) { s->failed = errno; return 1; }
    sha256_init(&s->h);
  }
  sha256_update(&s->h, data, len);
  for (const char *d = data; len;) {
    ssize_t w = write(s->fd, d, len);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) { s->failed = errno ? errno : EIO; return 1; }
    d += w; len -= (size_t)w;
    s->done += (uint64_t)w;
    s->p->all_done += (uint64_t)w;
  }
  return report(s->p, "downloading", s->f, s->done, s->err) ? 1 : 0;
}

/* Hashes fd's first n bytes (the part of an .incomplete a resumed download keeps). */
static int hash_prefix(int fd, uint64_t n, struct sha256 *h) {
  enum { BUF = 1 << 16 };
  char *buf = malloc(BUF);
  if (!buf) return -1;
  int rc = 0;
  for (uint64_t off = 0; off < n;) {
    ssize_t r = pread(fd, buf, n - off < BUF ? (size_t)(n - off) : BUF, (off_t)off);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) { rc = -1; break; }
    sha256_update(h, buf, (size_t)r);
    off += (uint64_t)r;
  }
  free(buf);
  return rc;
}

/* One attempt at blobs/<etag>: resumes an .incomplete, verifies, renames. *bad_hash is set (and the
 * .incomplete deleted) when the bytes are all there but their sha256 is not the etag. */
static int fetch_blob_once(struct pull *p, struct pfile *f, int *bad_hash, struct hearth_err *err) {
  char part[1720], blob[1700];
  snprintf(blob, sizeof blob, "%s/blobs/%s", p->repo_dir, f->etag);
  snprintf(part, sizeof part, "%s.incomplete", blob);
  *bad_hash = 0;
  int fd = open(part, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return err_set(err, HEARTH_ERR_IO, "%s: %s", part, strerror(errno));
  struct stat sb;
  struct hub_http_resp r;
  struct sink s = {.p = p, .f = f, .fd = fd, .r = &r, .err = err};
  sha256_init(&s.h);
  int rc = 0;
  if (fstat(fd, &sb) || !S_ISREG(sb.st_mode)) { rc = err_set(err, HEARTH_ERR_IO, "%s: not a regular file", part); goto out; }
  s.from = (uint64_t)sb.st_size;
  if (s.from > f->size || (s.from && f->lfs && hash_prefix(fd, s.from, &s.h))) { /* longer than the file: not ours */
    if (ftruncate(fd, 0)) { rc = err_set(err, HEARTH_ERR_IO, "%s: %s", part, strerror(errno)); goto out; }
    s.from = 0;
    sha256_init(&s.h);
  }
  s.done = s.from;
  p->all_done += s.from;
  if (lseek(fd, (off_t)s.from, SEEK_SET) < 0) { rc = err_set(err, HEARTH_ERR_IO, "%s: %s", part, strerror(errno)); goto out; }
  if (s.from < f->size || f->size == 0) {
    memset(&r, 0, sizeof r);
    rc = hub_http_get(p->http, f->url, s.from, on_bytes, &s, &r, err);
    if (s.failed) { rc = err_set(err, HEARTH_ERR_IO, "%s: %s", part, strerror(s.failed)); goto out; }
    if (rc == HEARTH_ERR_CANCELLED) { err_set(err, rc, "%s: pull cancelled", p->repo); goto out; }
    if (rc) { err_prefix(err, "%s: %s", p->repo, f->name); goto out; }
    if (r.status != 200 && r.status != 206) { rc = http_error(p, &r, f->name, err); goto out; }
    if (r.status == 206 && r.range_start != (int64_t)s.from) {
      rc = err_set(err, HEARTH_ERR_IO, "%s: %s: the server answered a range from %lld, not %llu", p->repo, f->name,
                   (long long)r.range_start, (unsigned long long)s.from);
      goto out;
    }
  }
  if (fstat(fd, &sb)) { rc = err_set(err, HEARTH_ERR_IO, "%s: %s", part, strerror(errno)); goto out; }
  if ((uint64_t)sb.st_size != f->size) {
    rc = err_set(err, HEARTH_ERR_IO, "%s: %s: the transfer ended after %llu of %llu bytes (run the pull again to resume)",
                 p->repo, f->name, (unsigned long long)sb.st_size, (unsigned long long)f->size);
    goto out;
  }
  if ((rc = report(p, "verifying", f, f->size, err))) goto out;
  if (f->lfs) {
    uint8_t d[32];
    char hex[65];
    sha256_final(&s.h, d);
    sha256_hex(d, hex);
    if (strcasecmp(hex, f->etag)) {
      unlink(part);
      *bad_hash = 1;
      rc = err_set(err, HEARTH_ERR_FORMAT, "%s: %s: sha256 %s differs from the Hub's %s", p->repo, f->name, hex, f->etag);
      goto out;
    }
  }
  if (fsync(fd) || rename(part, blob)) rc = err_set(err, HEARTH_ERR_IO, "%s: %s", blob, strerror(errno));
out:
  close(fd);
  return rc;
}

/* (2) a blob, fetched again once when its bytes fail their hash */
static int fetch_blob(struct pull *p, struct pfile *f, struct hearth_err *err) {
  uint64_t before = p->all_done;
  int bad = 0, rc = fetch_blob_once(p, f, &bad, err);
  if (rc && bad) {
    p->all_done = before;
    rc = fetch_blob_once(p, f, &bad, err);
  }
  if (!rc) p->all_done = before + f->size;
  return rc;
}

/* Every shard model.safetensors.index.json names must be a plain file name of this revision. */
static int check_index(struct pull *p, const struct pfile *f, struct hearth_err *err) {
  char path[1700], *text = NULL;
  size_t len;
  snprintf(path, sizeof path, "%s/blobs/%s", p->repo_dir, f->etag);
  int rc = file_read_all(path, FILE_CAP_JSON, &text, &len, err);
  if (rc) return rc;
  json_error_t je;
  json_t *j = json_loadb(text, len, 0, &je), *wm = j ? json_object_get(j, "weight_map") : NULL;
  free(text);
  if (!json_is_object(wm)) {
    json_decref(j);
    return err_set(err, HEARTH_ERR_FORMAT, "%s: %s has no weight_map object", p->repo, f->name);
  }
  const char *k;
  json_t *v;
  json_object_foreach(wm, k, v) {
    const char *shard = json_string_value(v);
    int found = 0;
    for (int i = 0; shard && i < p->n_files; i++) found |= !strcmp(p->files[i].name, shard);
    if (!shard || !hub_name_safe(shard) || strchr(shard, '/') || !found) {
      rc = err_set(err, HEARTH_ERR_FORMAT, "%s: refusing %s: tensor '%.100s' names the shard '%.200s', not a file of this revision",
                   p->repo, f->name, k, shard ? shard : "(not a string)");
      break;
    }
  }
  json_decref(j);
  return rc;
}

/* (3) snapshots/<commit>/<name> -> ../../blobs/<etag> (one more ../ per folder in name) */
static int link_snapshot(struct pull *p, char *snap, size_t cap, struct hearth_err *err) {
  snprintf(snap, cap, "%s/snapshots/%s", p->repo_dir, p->commit);
  struct stat sb;
  int made_dir = stat(snap, &sb) != 0, rc = 0;
  char *made = calloc((size_t)p->n_files, 1); /* links this pull added (not replaced) */
  if (!made) return err_set(err, HEARTH_ERR_NOMEM, "out of memory");
  if (mkdirs(snap)) { free(made); return err_set(err, HEARTH_ERR_IO, "%s: %s", snap, strerror(errno)); }
  for (int i = 0; i < p->n_files && !rc; i++) {
    const struct pfile *f = &p->files[i];
    char link[2000], tmp[2100], target[400] = "../../";
    snprintf(link, sizeof link, "%s/%s", snap, f->name);
    for (const char *c = f->name; (c = strchr(c, '/')); c++) {
      strcat(target, "../");
      char dir[2000];
      snprintf(dir, sizeof dir, "%s/%.*s", snap, (int)(c - f->name), f->name);
      if (mkdirs(dir)) { rc = err_set(err, HEARTH_ERR_IO, "%s: %s", dir, strerror(errno)); break; }
    }
    if (rc) break;
    snprintf(target + strlen(target), sizeof target - strlen(target), "blobs/%s", f->etag);
    snprintf(tmp, sizeof tmp, "%s.hearth-%d.tmp", link, (int)getpid());
    unlink(tmp);
    made[i] = lstat(link, &sb) != 0;
    if (symlink(target, tmp) || rename(tmp, link)) {
      rc = err_set(err, HEARTH_ERR_IO, "%s: %s", link, strerror(errno));
      unlink(tmp);
      made[i] = 0;
    }
  }
  if (rc) { /* take back what this pull added */
    for (int i = 0; i < p->n_files; i++)
      if (made[i]) {
        char link[2000];
        snprintf(link, sizeof link, "%s/%s", snap, p->files[i].name);
        unlink(link);
        char *sl = strrchr(link, '/');
        if (sl && strchr(p->files[i].name, '/')) { *sl = 0; rmdir(link); }
      }
    if (made_dir) rmdir(snap);
  }
  free(made);
  return rc;
}

/* (4) refs/<revision> holding the commit, written aside and renamed in (not for a commit id) */
static int write_ref(struct pull *p, struct hearth_err *err) {
  if (!strcmp(p->rev, p->commit)) return 0;
  char ref[2000], tmp[2100], dir[2000];
  snprintf(ref, sizeof ref, "%s/refs/%s", p->repo_dir, p->rev);
  snprintf(dir, sizeof dir, "%s", ref);
  *strrchr(dir, '/') = 0;
  if (mkdirs(dir)) return err_set(err, HEARTH_ERR_IO, "%s: %s", dir, strerror(errno));
  snprintf(tmp, sizeof tmp, "%s.hearth-%d.tmp", ref, (int)getpid());
  FILE *fp = fopen(tmp, "w");
  if (!fp || fputs(p->commit, fp) < 0 || fclose(fp) || rename(tmp, ref)) {
    int e = errno;
    unlink(tmp);
    return err_set(err, HEARTH_ERR_IO, "%s: %s", ref, strerror(e));
  }
  return 0;
}

static int pull_locked(struct pull *p, char *dir, size_t cap, struct hearth_err *err) {
  int rc = report(p, "resolving", NULL, 0, err);
  if (!rc) rc = fetch_revision(p, err);
  for (int i = 0; !rc && i < p->n_files; i++) rc = head_file(p, &p->files[i], err);
  if (rc) return rc;
  /* the index first: its shard names are checked before any weight is fetched */
  for (int i = 1; i < p->n_files; i++)
    if (!strcmp(p->files[i].name, "model.safetensors.index.json")) {
      struct pfile t = p->files[0];
      p->files[0] = p->files[i];
      p->files[i] = t;
    }
  for (int i = 0; i < p->n_files; i++) {
    struct pfile *f = &p->files[i];
    char blob[1700];
    struct stat sb;
    snprintf(blob, sizeof blob, "%s/blobs/%s", p->repo_dir, f->etag);
    f->have = lstat(blob, &sb) == 0 && S_ISREG(sb.st_mode) && (uint64_t)sb.st_size == f->size;
    p->all_total += f->size;
    if (f->have) p->all_done += f->size;
  }
  char blobs[1500];
  snprintf(blobs, sizeof blobs, "%s/blobs", p->repo_dir);
  if (mkdirs(blobs)) return err_set(err, HEARTH_ERR_IO, "%s: %s", blobs, strerror(errno));
  for (int i = 0; !rc && i < p->n_files; i++) {
    struct pfile *f = &p->files[i];
    if (!f->have) rc = fetch_blob(p, f, err);
    else rc = report(p, "downloading", f, f->size, err);
    if (!rc && !strcmp(f->name, "model.safetensors.index.json")) rc = check_index(p, f, err);
  }
  char snap[1600];
  if (!rc) rc = link_snapshot(p, snap, sizeof snap, err);
  if (!rc) rc = write_ref(p, err);
  if (!rc) rc = report(p, "done", NULL, 0, err);
  if (!rc && dir && snprintf(dir, cap, "%s", snap) >= (int)cap) rc = err_set(err, HEARTH_ERR_ARG, "snapshot path too long");
  return rc;
}

int hub_pull(const char *repo, const struct hub_pull_opts *o, char *dir, size_t cap, struct hearth_err *err) {
  struct hub_pull_opts none = {0};
  if (!o) o = &none;
  struct pull p = {.repo = repo, .rev = o->revision && *o->revision ? o->revision : "main",
                   .progress = o->progress, .progress_arg = o->progress_arg};
  if (!hub_repo_id_valid(repo)) return err_set(err, HEARTH_ERR_ARG, "'%.200s' is not a repository id ORG/NAME", repo);
  if (!hub_revision_valid(p.rev)) return err_set(err, HEARTH_ERR_ARG, "'%.200s' is not a revision", p.rev);
  const char *ep = o->endpoint && *o->endpoint ? o->endpoint : getenv("HF_ENDPOINT");
  snprintf(p.endpoint, sizeof p.endpoint, "%s", ep && *ep ? ep : DEFAULT_ENDPOINT);
  for (size_t n = strlen(p.endpoint); n && p.endpoint[n - 1] == '/'; n--) p.endpoint[n - 1] = 0;
  if (hub_repo_dir(repo, p.repo_dir, sizeof p.repo_dir)) return err_set(err, HEARTH_ERR_ARG, "cache path too long");
  char token[1024];
  find_token(o->token, token, sizeof token);
  int lock = -1;
  int rc = hub_repo_lock(repo, &lock, err);
  if (rc) return rc;
  struct stat sb;
  int fresh = stat(p.repo_dir, &sb) != 0; /* a failed first pull takes its empty folders back */
  rc = hub_http_new(p.endpoint, token, &p.http, err);
  if (!rc) rc = pull_locked(&p, dir, cap, err);
  if (rc && fresh) {
    char d[1600];
    snprintf(d, sizeof d, "%s/blobs", p.repo_dir); rmdir(d);
    snprintf(d, sizeof d, "%s/snapshots", p.repo_dir); rmdir(d);
    rmdir(p.repo_dir);
  }
  hub_http_free(p.http);
  free(p.files);
  close(lock);
  return rc;
}
#endif /* HEARTH_HAVE_CURL */
