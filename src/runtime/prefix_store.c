/* runtime/prefix_store.c — KV blocks of the prefix cache persisted under a model fingerprint. */
#include "runtime/prefix_store.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/prof.h"
#include "runtime/kv_cache.h"
#include "runtime/kv_ring.h"

/* Saving, off the request path: a block registered in the prefix cache is only noted (with a pool reference,
 * so it cannot be reused before it is read); the engine reads noted blocks back in batches when it is idle
 * (prefix_store_flush: one batch of copies and one wait), and a writer thread writes the files. A full note
 * list (a server that is never idle) is flushed on the spot. Loading reads the files of a run of consecutive
 * blocks in parallel and uploads them in one batch. */
enum { PEND_MAX = 256, FLUSH_BATCH = 64, READERS = 8 };
/* the pinned buffer restores read into: 64 MiB, ~110 blocks of the 3B's f16 KV (a 1,700-token prefix) a chunk */
#define LOAD_PIN_BYTES ((size_t)64 << 20)

struct store_job {
  int n;
  uint64_t key[FLUSH_BATCH], parent[FLUSH_BATCH];
  int32_t *tokens; /* [n × bs] */
  char *kv;        /* [n × kv bytes] */
  uint8_t has[FLUSH_BATCH]; /* a sliding-pool model's block has its sliding part (the rest of its kv bytes unused) */
  struct store_job *next;
};

struct prefix_store {
  pthread_mutex_t mu; /* the note list */
  int n_pend;
  uint64_t pkey[PEND_MAX], pparent[PEND_MAX];
  int32_t pid[PEND_MAX], psid[PEND_MAX]; /* the noted block and its sliding block (-1 without a sliding pool) */
  int32_t *ptok; /* [PEND_MAX × bs] */
  /* a model with a sliding pool (runtime/kv_ring.h): its layers split into those the main block ids index and
   * those the sliding ids do (the other kind's storage left out), one kv_block_read / write each */
  struct hb_kv_layer *lfull, *lswa;
  pthread_mutex_t wmu; /* the writer's queue */
  pthread_cond_t wcv;
  struct store_job *head, *tail;
  int stop, busy;
  pthread_t writer;
  int writer_on;
};

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
 * prefix of a 3B model is ~57 MB of KV; one chain hashed it at ~4 GB/s, this at several times that). Streamed
 * (sum4_blocks over 32-byte steps, then sum4_final), so a file's tokens and KV need not be in one buffer. */
struct sum4_state { uint64_t h[4]; };

static void sum4_init(struct sum4_state *s, uint64_t seed) {
  s->h[0] = seed;
  s->h[1] = seed ^ 0x9e3779b97f4a7c15ull;
  s->h[2] = seed ^ 0xc2b2ae3d27d4eb4full;
  s->h[3] = seed ^ 0x165667b19e3779f9ull;
}

/* the whole 32-byte steps of p[0..n); returns the bytes consumed */
static size_t sum4_blocks(struct sum4_state *s, const void *data, size_t n) {
  const unsigned char *p = data;
  size_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int k = 0; k < 4; k++) {
      uint64_t w;
      memcpy(&w, p + i + 8 * k, 8);
      s->h[k] = (s->h[k] ^ w) * 0x9e3779b97f4a7c15ull;
      s->h[k] ^= s->h[k] >> 29;
    }
  return i;
}

static uint64_t sum4_final(const struct sum4_state *s, const void *tail, size_t n) {
  uint64_t r = mix64(s->h[0], tail, n);
  for (int k = 1; k < 4; k++) r = (r ^ s->h[k]) * 0x100000001b3ull;
  return r;
}

/* sum4 of a ‖ b (a's length a multiple of 32, as a block's tokens are for block sizes that are multiples of 8;
 * otherwise the two are joined first) */
static uint64_t sum4_pair(uint64_t seed, const void *a, size_t na, const void *b, size_t nb) {
  struct sum4_state s;
  sum4_init(&s, seed);
  if (na % 32) {
    char *j = malloc(na + nb);
    if (!j) return 0; /* no checksum matches: the block is recomputed */
    memcpy(j, a, na);
    memcpy(j + na, b, nb);
    size_t c = sum4_blocks(&s, j, na + nb);
    uint64_t r = sum4_final(&s, j + c, na + nb - c);
    free(j);
    return r;
  }
  sum4_blocks(&s, a, na);
  size_t c = sum4_blocks(&s, b, nb);
  return sum4_final(&s, (const char *)b + c, nb - c);
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

static void *writer_main(void *arg);

static int store_start(struct hearth_model *m, struct hearth_err *err) {
  struct prefix_store *st = calloc(1, sizeof *st);
  if (!st || !(st->ptok = malloc((size_t)PEND_MAX * (size_t)m->kv.block_size * sizeof(int32_t)))) {
    free(st);
    return err_set(err, HEARTH_ERR_NOMEM, "out of memory");
  }
  if (m->kv.swa.n_blocks) {
    const int L = m->cfg.num_hidden_layers;
    st->lfull = malloc((size_t)L * sizeof *st->lfull);
    st->lswa = malloc((size_t)L * sizeof *st->lswa);
    if (!st->lfull || !st->lswa) {
      free(st->lfull); free(st->lswa); free(st->ptok); free(st);
      return err_set(err, HEARTH_ERR_NOMEM, "out of memory");
    }
    for (int l = 0; l < L; l++) {
      st->lfull[l] = st->lswa[l] = m->kv.layers[l];
      struct hb_kv_layer *drop = kv_layer_in_swa(m, l) ? &st->lfull[l] : &st->lswa[l];
      memset(&drop->k, 0, sizeof drop->k);
      memset(&drop->v, 0, sizeof drop->v);
    }
  }
  pthread_mutex_init(&st->mu, NULL);
  pthread_mutex_init(&st->wmu, NULL);
  pthread_cond_init(&st->wcv, NULL);
  m->store = st;
  st->writer_on = pthread_create(&st->writer, NULL, writer_main, m) == 0; /* without it: files are written inline */
  return 0;
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
  /* now, not in the first request that restores a prefix: pinning 64 MiB takes milliseconds */
  if (m->be->host_pinned) (void)m->be->host_pinned(m->bctx, LOAD_PIN_BYTES);
  return store_start(m, err);
}

/* Files hold each block's tokens, then the KV rows of every layer that stores KV in the backend's own element
 * format (f16 on CUDA's fast path, f32 elsewhere: the fingerprint names the backend and dtype), exactly as
 * kv_block_read packs them. Version 1 files (f32 rows read one layer at a time) are found stale and rewritten.
 * A model with a sliding pool writes version 3: the full layers' rows of the block, then, when the block still had
 * one, its sliding block's rows (the sliding layers' KV of the same positions; header pad = 1). A block whose
 * sliding block went before it was keyed (the early passes of a long prompt) is saved without: it still serves as
 * a link of a longer prefix, which resumes where the sliding blocks of its last window are there (kv_ring.h).
 * A file of another version is ignored and removed. */
#define STORE_VERSION 2
#define STORE_VERSION_SWA 3

static int store_version(const struct hearth_model *m) { return m->kv.swa.n_blocks ? STORE_VERSION_SWA : STORE_VERSION; }

/* the full layers' part of a payload (all of it without a sliding pool), and the sliding layers' */
static size_t kv_bytes_full(const struct hearth_model *m) {
  const struct hb_kv_layer *l = m->store && m->store->lfull ? m->store->lfull : m->kv.layers;
  return hb_kv_block_bytes(l, m->cfg.num_hidden_layers, m->kv.block_size);
}
static size_t kv_bytes_swa(const struct hearth_model *m) {
  return m->store && m->store->lswa ? hb_kv_block_bytes(m->store->lswa, m->cfg.num_hidden_layers, m->kv.block_size) : 0;
}
static size_t kv_bytes(const struct hearth_model *m) { return kv_bytes_full(m) + kv_bytes_swa(m); }

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

static void block_path(const struct hearth_model *m, uint64_t key, char *path, size_t n) {
  snprintf(path, n, "%s/%016llx.kv", m->store_dir, (unsigned long long)key);
}

/* the KV bytes of a file: all of them, or a sliding-pool model's block without its sliding part (has = 0) */
static size_t file_kv_bytes(const struct hearth_model *m, int has) { return has ? kv_bytes(m) : kv_bytes_full(m); }

/* a file of the right size is kept (its checksum is checked when it is read): 2 whole, 1 a sliding-pool model's
 * block without its sliding part, 0 none */
static int on_disk(const struct hearth_model *m, uint64_t key) {
  char path[4200];
  struct stat sb;
  block_path(m, key, path, sizeof path);
  if (lstat(path, &sb) || !S_ISREG(sb.st_mode)) return 0;
  const size_t head = sizeof(struct block_header) + (size_t)m->kv.block_size * sizeof(int32_t);
  if ((size_t)sb.st_size == head + file_kv_bytes(m, 1)) return 2;
  return kv_bytes_swa(m) && (size_t)sb.st_size == head + file_kv_bytes(m, 0) ? 1 : 0;
}

static void write_block(const struct hearth_model *m, uint64_t key, uint64_t parent, const int32_t *tokens, const char *kv,
                        int has) {
  char path[4200], tmp[4300];
  block_path(m, key, path, sizeof path);
  if (on_disk(m, key) >= (has ? 2 : 1)) return;
  const int bs = m->kv.block_size, L = m->cfg.num_hidden_layers;
  const size_t tb = (size_t)bs * sizeof(int32_t), kvb = file_kv_bytes(m, has);
  /* the checksum covers tokens then KV, as they lie in the file */
  struct block_header h = {STORE_MAGIC, (uint32_t)store_version(m), m->fingerprint, key, parent,
                           sum4_pair(0x84222325ull, tokens, tb, kv, kvb), (uint32_t)bs, (uint32_t)L,
                           (uint32_t)(kv_bytes(m) / (size_t)bs), (uint32_t)(kv_bytes_swa(m) && has)};
  /* a fresh name (O_EXCL, never through a link): two models of one process, or of two processes,
   * may save the same block at once; each renames its own complete file over the other's */
  snprintf(tmp, sizeof tmp, "%s.tmpXXXXXX", path);
  int fd = mkstemp(tmp);
  if (fd >= 0) {
    int ok = !write_all(fd, &h, sizeof h) && !write_all(fd, tokens, tb) && !write_all(fd, kv, kvb);
    if (close(fd)) ok = 0;
    if (ok) ok = rename(tmp, path) == 0;
    if (!ok) unlink(tmp);
  }
}

static void run_job(const struct hearth_model *m, struct store_job *j) {
  const size_t kvb = kv_bytes(m);
  for (int i = 0; i < j->n; i++)
    write_block(m, j->key[i], j->parent[i], j->tokens + (size_t)i * m->kv.block_size, j->kv + (size_t)i * kvb, j->has[i]);
  free(j->tokens);
  free(j->kv);
  free(j);
}

static void *writer_main(void *arg) {
  struct hearth_model *m = arg;
  struct prefix_store *st = m->store;
  pthread_mutex_lock(&st->wmu);
  for (;;) {
    while (!st->head && !st->stop) pthread_cond_wait(&st->wcv, &st->wmu);
    struct store_job *j = st->head;
    if (!j) break; /* stopped, queue drained */
    st->head = j->next;
    if (!st->head) st->tail = NULL;
    st->busy = 1;
    pthread_mutex_unlock(&st->wmu);
    run_job(m, j);
    pthread_mutex_lock(&st->wmu);
    st->busy = 0;
    pthread_cond_broadcast(&st->wcv);
  }
  pthread_mutex_unlock(&st->wmu);
  return NULL;
}

/* Reads up to FLUSH_BATCH noted blocks back (caller holds forward_mu) and queues their files. Returns how many
 * notes are left. */
static int flush_locked(struct hearth_model *m) {
  struct prefix_store *st = m->store;
  const int bs = m->kv.block_size;
  const size_t kvb = kv_bytes(m);
  struct store_job *j = calloc(1, sizeof *j);
  int32_t ids[FLUSH_BATCH], sids[FLUSH_BATCH];
  pthread_mutex_lock(&st->mu);
  int n = st->n_pend < FLUSH_BATCH ? st->n_pend : FLUSH_BATCH;
  if (j && n > 0 && (j->tokens = malloc((size_t)n * bs * sizeof(int32_t))) && (j->kv = malloc((size_t)n * kvb))) {
    j->n = n;
    memcpy(j->key, st->pkey, (size_t)n * sizeof *j->key);
    memcpy(j->parent, st->pparent, (size_t)n * sizeof *j->parent);
    memcpy(ids, st->pid, (size_t)n * sizeof *ids);
    memcpy(sids, st->psid, (size_t)n * sizeof *sids);
    memcpy(j->tokens, st->ptok, (size_t)n * bs * sizeof(int32_t));
  } else {
    n = 0;
  }
  /* the taken notes leave the list (FIFO) */
  st->n_pend -= n;
  memmove(st->pkey, st->pkey + n, (size_t)st->n_pend * sizeof *st->pkey);
  memmove(st->pparent, st->pparent + n, (size_t)st->n_pend * sizeof *st->pparent);
  memmove(st->pid, st->pid + n, (size_t)st->n_pend * sizeof *st->pid);
  memmove(st->psid, st->psid + n, (size_t)st->n_pend * sizeof *st->psid);
  memmove(st->ptok, st->ptok + (size_t)n * bs, (size_t)st->n_pend * bs * sizeof(int32_t));
  int left = st->n_pend;
  pthread_mutex_unlock(&st->mu);
  if (n == 0) {
    if (j) { free(j->tokens); free(j); }
    return left;
  }
  int rc;
  memset(j->has, 1, sizeof j->has);
  if (st->lswa) { /* each part in one batch of copies, then block by block: full rows, then sliding rows if any */
    const size_t fb = kv_bytes_full(m), sb = kv_bytes_swa(m);
    char *tmp = malloc((size_t)n * kvb);
    int32_t hs[FLUSH_BATCH];
    int nh = 0;
    for (int i = 0; i < n; i++)
      if ((j->has[i] = sids[i] >= 0)) hs[nh++] = sids[i];
    const int L = m->cfg.num_hidden_layers;
    rc = !tmp || m->be->kv_block_read(m->bctx, st->lfull, L, ids, n, bs, tmp, (size_t)n * fb) ||
         (nh && m->be->kv_block_read(m->bctx, st->lswa, L, hs, nh, bs, tmp + (size_t)n * fb, (size_t)nh * sb));
    for (int i = 0, k = 0; !rc && i < n; i++) {
      memcpy(j->kv + (size_t)i * kvb, tmp + (size_t)i * fb, fb);
      if (j->has[i]) memcpy(j->kv + (size_t)i * kvb + fb, tmp + (size_t)n * fb + (size_t)(k++) * sb, sb);
    }
    free(tmp);
    for (int i = 0; i < n; i++)
      if (sids[i] >= 0) kv_swa_unref(&m->kv, sids[i]);
  } else {
    rc = m->be->kv_block_read(m->bctx, m->kv.layers, m->cfg.num_hidden_layers, ids, n, bs, j->kv, (size_t)n * kvb);
  }
  for (int i = 0; i < n; i++) kv_block_unref(&m->kv, ids[i]);
  if (rc) { /* best effort: these blocks are not saved */
    free(j->tokens);
    free(j->kv);
    free(j);
    return left;
  }
  if (st->writer_on) {
    pthread_mutex_lock(&st->wmu);
    if (st->tail) st->tail->next = j;
    else st->head = j;
    st->tail = j;
    pthread_cond_signal(&st->wcv);
    pthread_mutex_unlock(&st->wmu);
  } else {
    run_job(m, j);
  }
  return left;
}

void prefix_store_note(struct hearth_model *m, uint64_t key, uint64_t parent, const int32_t *tokens, int32_t id,
                       int32_t sid) {
  struct prefix_store *st = m->store;
  if (!st || !m->be->kv_block_read || on_disk(m, key) >= (!st->lswa || sid >= 0 ? 2 : 1)) return;
  const int bs = m->kv.block_size;
  pthread_mutex_lock(&st->mu);
  int full = st->n_pend == PEND_MAX;
  if (!full) {
    kv_block_ref(&m->kv, id);
    if (st->lswa && sid >= 0) kv_swa_ref(&m->kv, sid);
    st->psid[st->n_pend] = st->lswa ? sid : -1;
    st->pkey[st->n_pend] = key;
    st->pparent[st->n_pend] = parent;
    st->pid[st->n_pend] = id;
    memcpy(st->ptok + (size_t)st->n_pend * bs, tokens, (size_t)bs * sizeof(int32_t));
    st->n_pend++;
  }
  pthread_mutex_unlock(&st->mu);
  if (full) { /* never idle: make room now, then note this one */
    pthread_mutex_lock(&m->forward_mu);
    while (flush_locked(m) > PEND_MAX - FLUSH_BATCH) {}
    pthread_mutex_unlock(&m->forward_mu);
    prefix_store_note(m, key, parent, tokens, id, sid);
  }
}

int prefix_store_flush(struct hearth_model *m, int max_blocks) {
  struct prefix_store *st = m->store;
  if (!st) return 0;
  int left;
  pthread_mutex_lock(&m->forward_mu);
  do left = flush_locked(m);
  while (left > 0 && (max_blocks -= FLUSH_BATCH) > 0);
  pthread_mutex_unlock(&m->forward_mu);
  return left;
}

void prefix_store_close(struct hearth_model *m) {
  struct prefix_store *st = m->store;
  if (!st) return;
  while (prefix_store_flush(m, PEND_MAX) > 0) {}
  if (st->writer_on) {
    pthread_mutex_lock(&st->wmu);
    st->stop = 1;
    pthread_cond_broadcast(&st->wcv);
    pthread_mutex_unlock(&st->wmu);
    pthread_join(st->writer, NULL);
  }
  pthread_mutex_destroy(&st->mu);
  pthread_mutex_destroy(&st->wmu);
  pthread_cond_destroy(&st->wcv);
  free(st->ptok);
  free(st->lfull);
  free(st->lswa);
  free(st);
  m->store = NULL;
}

/* ---- loading ---- */

struct load_job {
  const struct hearth_model *m;
  const uint64_t *key, *parent;
  const int32_t *tokens; /* [n × bs] what the prompt holds */
  int n;
  char *kv;              /* [n × kv bytes] */
  uint8_t *ok, *has;     /* [n]: read; with its sliding part (write_block) */
  atomic_int next;
};

/* one file into its slot of the job: 1 when it is there, intact, this model's and these tokens' */
static int load_one(struct load_job *J, int i) {
  const struct hearth_model *m = J->m;
  const int bs = m->kv.block_size, L = m->cfg.num_hidden_layers;
  const size_t tb = (size_t)bs * sizeof(int32_t), kvb = kv_bytes(m), swb = kv_bytes_swa(m);
  char path[4200];
  block_path(m, J->key[i], path, sizeof path);
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return 0;
  struct block_header h;
  struct stat sb;
  char extra;
  int32_t *tok = malloc(tb);
  char *kv = J->kv + (size_t)i * kvb;
  int bad = !tok || fstat(fd, &sb) || !S_ISREG(sb.st_mode);
  /* a sliding-pool model's file may hold the block without its sliding part (write_block): told by its size,
   * and the header must say the same */
  const int has = !bad && (size_t)sb.st_size == sizeof h + tb + kvb;
  const size_t fkb = file_kv_bytes(m, has);
  bad = bad || (!has && (!swb || (size_t)sb.st_size != sizeof h + tb + fkb)) ||
        read_all(fd, &h, sizeof h) || h.magic != STORE_MAGIC || h.version != (uint32_t)store_version(m) ||
        h.fingerprint != m->fingerprint || h.key != J->key[i] || h.parent != J->parent[i] ||
        h.block_size != (uint32_t)bs || h.n_layers != (uint32_t)L || h.width != (uint32_t)(kvb / (size_t)bs) ||
        h.pad != (uint32_t)(swb && has) || read_all(fd, tok, tb) || read_all(fd, kv, fkb) || read(fd, &extra, 1) != 0;
  J->has[i] = (uint8_t)has;
  if (!bad) { /* the checksum over tokens then KV, as written */
    uint64_t c = sum4_pair(0x84222325ull, tok, tb, kv, fkb);
    bad = c != h.checksum;
  }
  int ok = 0;
  if (bad && tok) unlink(path); /* stale or damaged: recompute and rewrite later */
  else if (!bad) ok = memcmp(tok, J->tokens + (size_t)i * bs, tb) == 0; /* else a hash collision: not ours */
  free(tok);
  close(fd);
  return ok;
}

static void *load_worker(void *arg) {
  struct load_job *J = arg;
  for (int i; (i = atomic_fetch_add(&J->next, 1)) < J->n;) J->ok[i] = (uint8_t)load_one(J, i);
  return NULL;
}

/* reads blocks [0, J->n) of the job into J->kv with up to READERS threads */
static void load_blocks(struct load_job *J) {
  atomic_init(&J->next, 0);
  pthread_t th[READERS];
  int nth = 0;
  for (int t = 0; t < READERS - 1 && t + 1 < J->n / 2; t++) /* a few blocks: read them here */
    if (pthread_create(&th[nth], NULL, load_worker, J) == 0) nth++;
  load_worker(J);
  for (int t = 0; t < nth; t++) pthread_join(th[t], NULL);
}

/* a sliding-pool model's run of ok blocks: the parts of each payload apart, each part uploaded in one batch */
static int write_split(struct hearth_model *m, const int32_t *ids, const int32_t *sids, int ok, const char *kv) {
  const struct prefix_store *st = m->store;
  const int L = m->cfg.num_hidden_layers, bs = m->kv.block_size;
  const size_t fb = kv_bytes_full(m), sb = kv_bytes_swa(m), kvb = fb + sb;
  char *tmp = malloc((size_t)ok * kvb);
  int32_t *hs = malloc((size_t)ok * sizeof *hs);
  int nh = 0;
  if (!tmp || !hs) { free(tmp); free(hs); return -1; }
  for (int i = 0; i < ok; i++) {
    memcpy(tmp + (size_t)i * fb, kv + (size_t)i * kvb, fb);
    if (sids[i] < 0) continue; /* saved without its sliding part */
    memcpy(tmp + (size_t)ok * fb + (size_t)nh * sb, kv + (size_t)i * kvb + fb, sb);
    hs[nh++] = sids[i];
  }
  int rc = m->be->kv_block_write(m->bctx, st->lfull, L, ids, ok, bs, tmp, (size_t)ok * fb) ||
           (nh && m->be->kv_block_write(m->bctx, st->lswa, L, hs, nh, bs, tmp + (size_t)ok * fb, (size_t)nh * sb));
  free(tmp);
  free(hs);
  return rc;
}

int prefix_store_load_run(struct hearth_model *m, const uint64_t *key, const uint64_t *parent, const int32_t *tokens,
                          int n, int32_t *ids, int32_t *sids) {
  if (!m->store_dir || !m->be->kv_block_write || n <= 0) return 0;
  const int split = m->store && m->store->lswa;
  if (split && !sids) return 0;
  const int L = m->cfg.num_hidden_layers, bs = m->kv.block_size;
  const size_t kvb = kv_bytes(m);
  /* the run ends at the first block that is not on disk: look before reading anything */
  int run = 0;
  while (run < n && on_disk(m, key[run])) run++;
  if (run == 0) return 0;
  /* the readers fill the backend's pinned buffer (allocated at open) in chunks that fit it, so the upload needs no
   * staging copy and the bytes no fresh pages; without one, ordinary memory for the whole run */
  char *pin = m->be->host_pinned && !split ? m->be->host_pinned(m->bctx, LOAD_PIN_BYTES) : NULL;
  int per = pin ? (int)(LOAD_PIN_BYTES / kvb) : run;
  if (per < 1) per = 1, pin = NULL;
  if (per > run) per = run;
  struct load_job J = {.m = m};
  J.kv = pin ? pin : malloc((size_t)per * kvb);
  J.ok = calloc((size_t)per, 1);
  J.has = calloc((size_t)per, 1);
  if (!J.kv || !J.ok || !J.has) {
    if (!pin) free(J.kv);
    free(J.ok);
    free(J.has);
    return 0;
  }
  int got = 0;
  while (got < run) {
    const int c = run - got < per ? run - got : per;
    J.key = key + got;
    J.parent = parent + got;
    J.tokens = tokens + (size_t)got * bs;
    J.n = c;
    memset(J.ok, 0, (size_t)c);
    double t0 = prof_now();
    load_blocks(&J);
    int ok = 0;
    while (ok < c && J.ok[ok]) ok++;
    prof_add(PROF_STORE_READ, t0, ok);
    for (int i = 0; i < ok; i++) {
      if (split) sids[got + i] = -1;
      if ((ids[got + i] = kv_block_alloc(&m->kv)) < 0) {
        ok = i;
        break;
      }
      if (split && J.has[i] && (sids[got + i] = kv_swa_alloc(&m->kv)) < 0) {
        kv_block_unref(&m->kv, ids[got + i]);
        ok = i;
        break;
      }
    }
    t0 = prof_now();
    if (ok > 0 && (split ? write_split(m, ids + got, sids + got, ok, J.kv)
                         : m->be->kv_block_write(m->bctx, m->kv.layers, L, ids + got, ok, bs, J.kv, (size_t)ok * kvb))) {
      for (int i = 0; i < ok; i++) {
        kv_block_unref(&m->kv, ids[got + i]);
        if (split && sids[got + i] >= 0) kv_swa_unref(&m->kv, sids[got + i]);
      }
      ok = 0;
    }
    prof_add(PROF_STORE_UPLOAD, t0, ok);
    for (int i = 0; i < ok; i++)
      kv_prefix_register(&m->kv, key[got + i], parent[got + i], tokens + (size_t)(got + i) * bs, ids[got + i],
                         split ? sids[got + i] : -1);
    got += ok;
    if (ok < c) break; /* the run ends at the first block that failed */
  }
  if (!pin) free(J.kv);
  free(J.ok);
  free(J.has);
  return got;
}
