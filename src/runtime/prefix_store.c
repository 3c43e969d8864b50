/* runtime/prefix_store.c — KV blocks of the prefix cache persisted under a model fingerprint. */
#include "runtime/prefix_store.h"

#include <errno.h>
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

/* floats of K (and of V) one token takes in a layer's cache: 0 for Gemma 4's KV-shared layers (no storage) */
static size_t layer_width(const struct hearth_model *m, int l) {
  const struct hb_kv_layer *kl = &m->kv.layers[l];
  return kl->k.data ? (size_t)kl->n_kv_heads * (size_t)kl->head_dim : 0;
}

/* K and V floats per token over all layers (the header's width: layers may differ, Gemma 4) */
static size_t total_width(const struct hearth_model *m) {
  size_t w = 0;
  for (int l = 0; l < m->cfg.num_hidden_layers; l++) w += layer_width(m, l);
  return w;
}

/* what the block header records as its width: one layer's when every layer that stores KV has the same (the
 * format of before Gemma 4), else the total */
static size_t header_width(const struct hearth_model *m) {
  size_t one = 0;
  for (int l = 0; l < m->cfg.num_hidden_layers; l++) {
    size_t w = layer_width(m, l);
    if (!w) continue;
    if (one && w != one) return total_width(m);
    one = w;
  }
  return one;
}

static size_t payload_bytes(const struct hearth_model *m) {
  return (size_t)m->kv.block_size * sizeof(int32_t) + 2 * (size_t)m->kv.block_size * total_width(m) * sizeof(float);
}

void prefix_store_save(struct hearth_model *m, uint64_t key, uint64_t parent, const int32_t *tokens, int32_t id) {
  if (!m->store_dir) return;
  char path[4200], tmp[4300];
  snprintf(path, sizeof path, "%s/%016llx.kv", m->store_dir, (unsigned long long)key);
  if (access(path, F_OK) == 0) return;
  int bs = m->kv.block_size, L = m->cfg.num_hidden_layers;
  size_t w = header_width(m);
  size_t n = payload_bytes(m);
  char *buf = malloc(n);
  if (!buf) return;
  memcpy(buf, tokens, (size_t)bs * sizeof(int32_t));
  float *p = (float *)(buf + (size_t)bs * sizeof(int32_t));
  for (int l = 0; l < L; l++) {
    struct hb_kv_layer *kl = &m->kv.layers[l];
    size_t rows = (size_t)bs * layer_width(m, l);
    if (!rows) continue;
    if (m->be->read(m->bctx, &kl->k, (int64_t)id * bs, bs, p) || m->be->read(m->bctx, &kl->v, (int64_t)id * bs, bs, p + rows)) {
      free(buf);
      return;
    }
    p += 2 * rows;
  }
  struct block_header h = {STORE_MAGIC, 1, m->fingerprint, key, parent, mix64(0x84222325ull, buf, n),
                           (uint32_t)bs, (uint32_t)L, (uint32_t)w, 0};
  /* a fresh name (O_EXCL, never through a link): two models of one process, or of two processes,
   * may save the same block at once; each renames its own complete file over the other's */
  snprintf(tmp, sizeof tmp, "%s.tmpXXXXXX", path);
  int fd = mkstemp(tmp);
  if (fd < 0) { free(buf); return; }
  FILE *f = fdopen(fd, "wb");
  if (!f) close(fd);
  int ok = f && fwrite(&h, sizeof h, 1, f) == 1 && fwrite(buf, 1, n, f) == n;
  if (f && fclose(f)) ok = 0;
  if (ok) ok = rename(tmp, path) == 0;
  if (!ok) unlink(tmp);
  free(buf);
}

int32_t prefix_store_load(struct hearth_model *m, uint64_t key, uint64_t parent, const int32_t *tokens) {
  if (!m->store_dir) return -1;
  char path[4200];
  snprintf(path, sizeof path, "%s/%016llx.kv", m->store_dir, (unsigned long long)key);
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  int bs = m->kv.block_size, L = m->cfg.num_hidden_layers;
  size_t w = header_width(m);
  size_t n = payload_bytes(m);
  struct block_header h;
  char *buf = NULL;
  int32_t id = -1;
  int bad = fread(&h, sizeof h, 1, f) != 1 || h.magic != STORE_MAGIC || h.version != 1 || h.fingerprint != m->fingerprint ||
            h.key != key || h.parent != parent || h.block_size != (uint32_t)bs || h.n_layers != (uint32_t)L || h.width != (uint32_t)w;
  if (!bad && !(buf = malloc(n))) goto out;
  bad = bad || fread(buf, 1, n, f) != n || fgetc(f) != EOF || mix64(0x84222325ull, buf, n) != h.checksum;
  if (bad) { unlink(path); goto out; } /* stale or damaged: recompute and rewrite later */
  if (memcmp(buf, tokens, (size_t)bs * sizeof(int32_t))) goto out; /* hash collision: not ours */
  id = kv_block_alloc(&m->kv);
  if (id < 0) goto out;
  const float *p = (const float *)(buf + (size_t)bs * sizeof(int32_t));
  for (int l = 0; l < L; l++) {
    struct hb_kv_layer *kl = &m->kv.layers[l];
    size_t rows = (size_t)bs * layer_width(m, l);
    if (!rows) continue;
    if (m->be->write(m->bctx, &kl->k, (int64_t)id * bs, bs, p) || m->be->write(m->bctx, &kl->v, (int64_t)id * bs, bs, p + rows)) {
      kv_block_unref(&m->kv, id);
      id = -1;
      goto out;
    }
    p += 2 * rows;
  }
  kv_prefix_register(&m->kv, key, parent, tokens, id);
out:
  free(buf);
  fclose(f);
  return id;
}
