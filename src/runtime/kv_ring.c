/* runtime/kv_ring.c — the sliding-window layers' block pool and a sequence's ring over it (kv_ring.h). */
#include "runtime/kv_ring.h"

#include <stdlib.h>
#include <string.h>

int kv_swa_blocks(int n_blocks, int bs, int window, int kv_seqs, int batch_tokens) {
  if (kv_seqs <= 0) return n_blocks; /* sequences of any length and number: as many as the main pool */
  /* a window spans at most ceil((window - 1) / bs) + 1 blocks, plus the block being filled */
  int64_t per_seq = (window - 1 + bs - 1) / bs + 2;
  int64_t n = 2 * (int64_t)kv_seqs * per_seq + (batch_tokens + bs - 1) / bs;
  return n < n_blocks ? (int)n : n_blocks;
}

int kv_layer_in_swa(const struct hearth_model *m, int i) {
  return m->kv.swa.n_blocks > 0 && m->cfg.layer[i].sliding;
}

int kv_swa_init(struct kv_swa_pool *sp, int n_blocks, int window) {
  memset(sp, 0, sizeof *sp);
  sp->free_list = malloc((size_t)n_blocks * sizeof *sp->free_list);
  sp->refs = calloc((size_t)n_blocks, sizeof *sp->refs);
  if (!sp->free_list || !sp->refs) return -1;
  for (int i = 0; i < n_blocks; i++) sp->free_list[i] = n_blocks - 1 - i;
  sp->n_free = sp->n_blocks = n_blocks;
  sp->window = window;
  return 0;
}

void kv_swa_free(struct kv_swa_pool *sp) {
  free(sp->free_list);
  free(sp->refs);
  memset(sp, 0, sizeof *sp);
}

/* with p->mu held */
static void swa_unref_locked(struct kv_swa_pool *sp, int32_t id) {
  if (--sp->refs[id] == 0) sp->free_list[sp->n_free++] = id;
}

int32_t kv_swa_alloc(struct kv_pool *p) {
  struct kv_swa_pool *sp = &p->swa;
  pthread_mutex_lock(&p->mu);
  int32_t id = -1;
  if (sp->n_free == 0) { /* the prefix cache's least recently used sliding part that no session holds */
    int32_t victim = prefix_cache_evict_swa(&p->pc, sp->refs);
    if (victim >= 0) swa_unref_locked(sp, victim);
  }
  if (sp->n_free > 0) {
    id = sp->free_list[--sp->n_free];
    sp->refs[id] = 1;
    if (sp->n_blocks - sp->n_free > sp->peak_used) sp->peak_used = sp->n_blocks - sp->n_free;
  }
  pthread_mutex_unlock(&p->mu);
  return id;
}

void kv_swa_ref(struct kv_pool *p, int32_t id) {
  pthread_mutex_lock(&p->mu);
  p->swa.refs[id]++;
  pthread_mutex_unlock(&p->mu);
}

void kv_swa_unref(struct kv_pool *p, int32_t id) {
  pthread_mutex_lock(&p->mu);
  swa_unref_locked(&p->swa, id);
  pthread_mutex_unlock(&p->mu);
}

int kv_swa_shared(struct kv_pool *p, int32_t id) {
  pthread_mutex_lock(&p->mu);
  int shared = p->swa.refs[id] > 1;
  pthread_mutex_unlock(&p->mu);
  return shared;
}

int kv_swa_used(struct kv_pool *p) {
  pthread_mutex_lock(&p->mu);
  int n = p->swa.n_blocks - p->swa.n_free;
  pthread_mutex_unlock(&p->mu);
  return n;
}

int kv_ring_intact(const struct kv_pool *p, const int32_t *sb, int n_blocks, int n) {
  if (n <= 0) return 1;
  const int bs = p->block_size, lo = n - p->swa.window + 1 > 0 ? n - p->swa.window + 1 : 0;
  for (int b = lo / bs; b <= (n - 1) / bs; b++)
    if (b >= n_blocks || sb[b] < 0) return 0;
  return 1;
}

/* blocks dead for queries at >= next, except those a query at `keep` sees */
static int release_dead_keep(struct kv_pool *p, int32_t *sb, int n_blocks, int keep, int next) {
  const int bs = p->block_size, lo = next - p->swa.window + 1; /* the lowest key a query at >= next sees */
  const int klo = keep - p->swa.window + 1 > 0 ? (keep - p->swa.window + 1) / bs : 0, khi = keep > 0 ? (keep - 1) / bs : -1;
  int gone = 0;
  for (int b = 0; b < n_blocks && (b + 1) * bs <= lo; b++)
    if (sb[b] >= 0 && (b < klo || b > khi)) {
      kv_swa_unref(p, sb[b]);
      sb[b] = -1;
      gone++;
    }
  return gone;
}

int kv_ring_release_dead(struct kv_pool *p, int32_t *sb, int n_blocks, int next) {
  return release_dead_keep(p, sb, n_blocks, next, next);
}

int kv_ring_fill(struct kv_pool *p, int32_t *sb, int n_blocks, int keep, int from, int to) {
  release_dead_keep(p, sb, n_blocks, keep, from);
  const int bs = p->block_size, lo = from - p->swa.window + 1 > 0 ? from - p->swa.window + 1 : 0;
  for (int b = lo / bs; b < n_blocks && b * bs < to; b++)
    if (sb[b] < 0 && (sb[b] = kv_swa_alloc(p)) < 0) return -1;
  return 0;
}

void kv_ring_release(struct kv_pool *p, int32_t *sb, int from, int to) {
  for (int b = from; b < to; b++)
    if (sb[b] >= 0) {
      kv_swa_unref(p, sb[b]);
      sb[b] = -1;
    }
}

void kv_ring_stage(int32_t *dst, const int32_t *sb, int n) {
  int32_t any = 0;
  for (int b = n - 1; b >= 0; b--)
    if (sb[b] >= 0) { any = sb[b]; break; }
  for (int b = 0; b < n; b++) dst[b] = sb[b] >= 0 ? sb[b] : any;
}

int kv_ring_held(const int32_t *sb, int n) {
  int k = 0;
  for (int b = 0; b < n; b++) k += sb[b] >= 0;
  return k;
}
