/* runtime/prefix_store.c — KV blocks of the prefix cache persisted under a model fingerprint. */
#include "runtime/prefix_store.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/kv_cache.h"

#define STORE_MAGIC 0x31564b48u /* "HKV1" */

struct block_header {
  uint32_t magic, version;
  uint64_t fingerprint, key, parent, checksum;
  uint32_t block_size, n_layers, width, pad;
};

static uint64_t mix(uint64_t h, const void *data, size_t n) {
  const unsigned char *p = data;
  for (size_t i = 0; i < n; i++) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

/* A faster mix for large payloads: 8 bytes at a time (tail bytewise). */
static uint64_t mix64(uint64_t h, const void *data, size_t n) {
  const unsigned char *p = data;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    memcpy(&w, p + i, 8);
    h = (h ^ w) * 0x9e3779b97f4a7c15ull;
    h ^= h >> 29;
  }
  return mix(h, p + i, n - i);
}

/* The payload checksum: four independent lanes, so the multiply chains overlap (a restored 1,560-token
 * prefix of a 3B model is ~57 MB of KV; one chain hashed it at ~4 GB/s, this at several times that). */
static uint64_t sum4(uint64_t seed, const void *data, size_t n) {
  const unsigned char *p = data;
  uint64_t h[4] = {seed, seed ^ 0x9e3779b97f4a7c15ull, seed ^ 0xc2b2ae3d27d4eb4full, seed ^ 0x165667b19e3779f9ull};
  size_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int k = 0; k < 4; k++) {
      uint64_t w;
      memcpy(&w, p + i + 8 * k, 8);
      h[k] = (h[k] ^ w) * 0x9e3779b97f4a7c15ull;
      h[k] ^= h[k] >> 29;
    }
  uint64_t r = mix64(h[0], p + i, n - i);
  for (int k = 1; k < 4; k++) r = (r ^ h[k]) * 0x100000001b3ull;
  return r;
}

uint64_t prefix_store_fingerprint(const char *model_dir, const struct st_set *st, enum hearth_dtype dtype,
                                  const char *backend, int block_size) {
  uint64_t h = 0xcbf29ce484222325ull;
  char path[4096];
  snprintf(path, sizeof path, "%s/config.json", model_dir);
  FILE *f = fopen(path, "rb");
  if (f) {
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) h = mix(h, buf, n);
    fclose(f);
  }
  for (int i = 0; i < st->n_files; i++) {
    const struct st_file *sf = &st->files[i];
    struct stat sb;
    if (stat(sf->path, &sb) == 0) {
      int64_t meta[2] = {(int64_t)sb.st_size, (int64_t)sb.st_mtime};
      h = mix(h, meta, sizeof meta);
    }
    if (!sf->map || sf->size < 8) continue;
    uint64_t hl = 0;
    for (int k = 7; k >= 0; k--) hl = (hl << 8) | ((const unsigned char *)sf->map)[k];
    if (hl > sf->size - 8) hl = sf->size - 8;
    h = mix64(h, sf->map, (size_t)(8 + hl));
    /* 64 samples of the weight bytes: a re-trained checkpoint of the same shapes differs here */
    size_t data0 = (size_t)(8 + hl), span = sf->size - data0, chunk = 256;
    for (int k = 0; k < 64 && span > chunk; k++) {
      size_t off = data0 + (span - chunk) / 63 * (size_t)k;
      h = mix64(h, (const char *)sf->map + off, chunk);
    }
  }
  int32_t meta[2] = {(int32_t)dtype, block_size};
  h = mix(h, meta, sizeof meta);
  h = mix(h, backend, strlen(backend));
  return h ? h : 1;
}

int prefix_store_open(struct hearth_model *m, const char *dir, struct hearth_err *err) {
  char path[4096];
  if (mkdir(dir, 0700) && errno != EEXIST) return err_set(err, HEARTH_ERR_IO, "KV cache directory: cannot create: %s", strerror(errno));
  int n = snprintf(path, sizeof path, "%s/%016llx", dir, (unsigned long long)m->fingerprint);
  if (n <= 0 || (size_t)n >= sizeof path) return err_set(err, HEARTH_ERR_ARG, "KV cache directory path too long");
  if (mkdir(path, 0700) && errno != EEXIST) return err_set(err, HEARTH_ERR_IO, "KV cache directory: cannot create: %s", strerror(errno));
  /* blocks read from here go straight into the KV cache, and the checksum is no secret: a
   * directory someone else may write (or a link to one) could feed the model any context */
  struct stat sb;
  if (lstat(path, &sb)) return err_set(err, HEARTH_ERR_IO, "KV cache directory: %s", strerror(errno));
  if (!S_ISDIR(sb.st_mode) || sb.st_uid != geteuid() || (sb.st_mode & 022))
    return err_set(err, HEARTH_ERR_IO, "KV cache directory: %016llx is not a directory of this user that only it may write",
                   (unsigned long long)m->fingerprint);
  m->store_dir = strdup(path);
  if (!m->store_dir) return err_set(err, HEARTH_ERR_NOMEM, "out of memory");
  return 0;
}

/* Files hold each block's tokens, then the KV rows of every layer that stores KV in the backend's own element
 * format (f16 on CUDA's fast path, f32 elsewhere: the fingerprint names the backend and dtype), exactly as
 * kv_block_read packs them. Version 1 files (f32 rows read one layer at a time) are found stale and rewritten. */
#define STORE_VERSION 2

static size_t kv_bytes(const struct hearth_model *m) {
  return hb_kv_block_bytes(m->kv.layers, m->cfg.num_hidden_layers, m->kv.block_size);
}

static size_t payload_bytes(const struct hearth_model *m) {
  return (size_t)m->kv.block_size * sizeof(int32_t) + kv_bytes(m);
}

static int write_all(int fd, const void *p, size_t n) {
  const char *c = p;
  while (n) {
    ssize_t w = write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    c += w;
    n -= (size_t)w;
  }
  return 0;
}

static int read_all(int fd, void *p, size_t n) {
  char *c = p;
  while (n) {
    ssize_t r = read(fd, c, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    c += r;
    n -= (size_t)r;
  }
  return 0;
}

void prefix_store_save(struct hearth_model *m, uint64_t key, uint64_t parent, const int32_t *tokens, int32_t id) {
  if (!m->store_dir || !m->be->kv_block_read) return;
  char path[4200], tmp[4300];
  snprintf(path, sizeof path, "%s/%016llx.kv", m->store_dir, (unsigned long long)key);
  int bs = m->kv.block_size, L = m->cfg.num_hidden_layers;
  size_t n = payload_bytes(m), kvb = kv_bytes(m);
  struct stat sb; /* a file of the right size is kept (its checksum is checked when it is read) */
  if (lstat(path, &sb) == 0 && S_ISREG(sb.st_mode) && (size_t)sb.st_size == sizeof(struct block_header) + n) return;
  char *buf = malloc(n);
  if (!buf) return;
  memcpy(buf, tokens, (size_t)bs * sizeof(int32_t));
  if (m->be->kv_block_read(m->bctx, m->kv.layers, L, id, bs, buf + (size_t)bs * sizeof(int32_t), kvb)) {
    free(buf);
    return;
  }
  struct block_header h = {STORE_MAGIC, STORE_VERSION, m->fingerprint, key, parent, sum4(0x84222325ull, buf, n),
                           (uint32_t)bs, (uint32_t)L, (uint32_t)(kvb / (size_t)bs), 0};
  /* a fresh name (O_EXCL, never through a link): two models of one process, or of two processes,
   * may save the same block at once; each renames its own complete file over the other's */
  snprintf(tmp, sizeof tmp, "%s.tmpXXXXXX", path);
  int fd = mkstemp(tmp);
  if (fd < 0) { free(buf); return; }
  int ok = !write_all(fd, &h, sizeof h) && !write_all(fd, buf, n);
  if (close(fd)) ok = 0;
  if (ok) ok = rename(tmp, path) == 0;
  if (!ok) unlink(tmp);
  free(buf);
}

int32_t prefix_store_load(struct hearth_model *m, uint64_t key, uint64_t parent, const int32_t *tokens) {
  if (!m->store_dir || !m->be->kv_block_write) return -1;
  char path[4200];
  snprintf(path, sizeof path, "%s/%016llx.kv", m->store_dir, (unsigned long long)key);
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return -1;
  int bs = m->kv.block_size, L = m->cfg.num_hidden_layers;
  size_t n = payload_bytes(m), kvb = kv_bytes(m);
  struct block_header h;
  struct stat sb;
  char *buf = NULL, extra;
  int32_t id = -1;
  int bad = fstat(fd, &sb) || !S_ISREG(sb.st_mode) || (size_t)sb.st_size != sizeof h + n || read_all(fd, &h, sizeof h) ||
            h.magic != STORE_MAGIC || h.version != STORE_VERSION || h.fingerprint != m->fingerprint || h.key != key ||
            h.parent != parent || h.block_size != (uint32_t)bs || h.n_layers != (uint32_t)L ||
            h.width != (uint32_t)(kvb / (size_t)bs);
  if (!bad && !(buf = malloc(n))) goto out;
  bad = bad || read_all(fd, buf, n) || read(fd, &extra, 1) != 0 || sum4(0x84222325ull, buf, n) != h.checksum;
  if (bad) { unlink(path); goto out; } /* stale or damaged: recompute and rewrite later */
  if (memcmp(buf, tokens, (size_t)bs * sizeof(int32_t))) goto out; /* hash collision: not ours */
  id = kv_block_alloc(&m->kv);
  if (id < 0) goto out;
  if (m->be->kv_block_write(m->bctx, m->kv.layers, L, id, bs, buf + (size_t)bs * sizeof(int32_t), kvb)) {
    kv_block_unref(&m->kv, id);
    id = -1;
    goto out;
  }
  kv_prefix_register(&m->kv, key, parent, tokens, id);
out:
  free(buf);
  close(fd);
  return id;
}
