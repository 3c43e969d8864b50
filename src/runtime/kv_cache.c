/* runtime/kv_cache.c — block allocation for the paged KV cache. The storage itself is one backend
 * tensor per layer for K and for V ([n_blocks*block_size, n_kv*hd]); a block id indexes into it. */
#include "runtime/kv_cache.h"

#include "runtime/kv_ring.h"

#include <stdlib.h>
#include <string.h>

int kv_pool_init(struct hearth_model *m, int n_tokens, int block_size, int swa_blocks, int window, struct hearth_err *err) {
  struct kv_pool *p = &m->kv;
  memset(p, 0, sizeof *p);
  pthread_mutex_init(&p->mu, NULL);
  p->block_size = block_size;
  p->n_blocks = (n_tokens + block_size - 1) / block_size;
  int L = m->cfg.num_hidden_layers;
  p->layers = calloc((size_t)L, sizeof *p->layers);
  p->free_list = malloc((size_t)p->n_blocks * sizeof *p->free_list);
  p->refs = calloc((size_t)p->n_blocks, sizeof *p->refs);
  if (!p->layers || !p->free_list || !p->refs) return err_set(err, HEARTH_ERR_NOMEM, "out of memory for the KV pool");
  if (swa_blocks > 0 && kv_swa_init(&p->swa, swa_blocks, window))
    return err_set(err, HEARTH_ERR_NOMEM, "out of memory for the KV pool");
  for (int i = 0; i < L; i++) {
    struct hb_kv_layer *kl = &p->layers[i];
    const struct hf_layer *y = &m->cfg.layer[i];
    kl->n_kv_heads = y->n_kv_heads;
    kl->head_dim = y->head_dim;
    /* a Gemma 4 KV-shared layer attends over its source layer's cache and stores nothing */
    if (y->kv_source != i) continue;
    int64_t w = (int64_t)y->n_kv_heads * y->head_dim;
    /* a sliding layer's rows are indexed by the sliding pool's block ids (runtime/kv_ring.h) */
    int64_t rows = (int64_t)(kv_layer_in_swa(m, i) ? p->swa.n_blocks : p->n_blocks) * block_size;
    int rc = m->be->alloc(m->bctx, &kl->k, HB_F32, rows, w, err);
    if (!rc) rc = m->be->alloc(m->bctx, &kl->v, HB_F32, rows, w, err);
    if (rc) return err_prefix(err, "KV pool (%d tokens)", n_tokens);
  }
  if (prefix_cache_init(&p->pc, p->n_blocks, block_size)) return err_set(err, HEARTH_ERR_NOMEM, "out of memory for the prefix cache");
  for (int i = 0; i < p->n_blocks; i++) p->free_list[i] = p->n_blocks - 1 - i;
  p->n_free = p->n_blocks;
  return 0;
}

void kv_pool_free(struct hearth_model *m) {
  struct kv_pool *p = &m->kv;
  if (p->layers)
    for (int i = 0; i < m->cfg.num_hidden_layers; i++) {
      if (p->layers[i].k.data) m->be->release(m->bctx, &p->layers[i].k);
      if (p->layers[i].v.data) m->be->release(m->bctx, &p->layers[i].v);
    }
  prefix_cache_free(&p->pc);
  kv_swa_free(&p->swa);
  free(p->layers);
  free(p->free_list);
  free(p->refs);
  pthread_mutex_destroy(&p->mu);
  memset(p, 0, sizeof *p);
}

int32_t kv_block_alloc(struct kv_pool *p) {
  pthread_mutex_lock(&p->mu);
  int32_t id = -1;
  if (p->n_free == 0) { /* reclaim the least recently used prefix no session holds */
    int32_t sv, victim = prefix_cache_evict(&p->pc, p->refs, &sv);
    if (victim >= 0 && --p->refs[victim] == 0) p->free_list[p->n_free++] = victim;
    if (sv >= 0 && --p->swa.refs[sv] == 0) p->swa.free_list[p->swa.n_free++] = sv;
  }
  if (p->n_free > 0) {
    id = p->free_list[--p->n_free];
    p->refs[id] = 1;
  }
  pthread_mutex_unlock(&p->mu);
  return id;
}

void kv_block_ref(struct kv_pool *p, int32_t id) {
  pthread_mutex_lock(&p->mu);
  p->refs[id]++;
  pthread_mutex_unlock(&p->mu);
}

void kv_block_unref(struct kv_pool *p, int32_t id) {
  pthread_mutex_lock(&p->mu);
  if (--p->refs[id] == 0) p->free_list[p->n_free++] = id;
  pthread_mutex_unlock(&p->mu);
}

int kv_pool_free_blocks(struct kv_pool *p) {
  pthread_mutex_lock(&p->mu);
  int n = p->n_free;
  pthread_mutex_unlock(&p->mu);
  return n;
}

int kv_block_shared(struct kv_pool *p, int32_t id) {
  pthread_mutex_lock(&p->mu);
  int shared = p->refs[id] > 1;
  pthread_mutex_unlock(&p->mu);
  return shared;
}

int32_t kv_prefix_attach(struct kv_pool *p, uint64_t key, uint64_t parent, const int32_t *tokens, int32_t *sid) {
  pthread_mutex_lock(&p->mu);
  int32_t s = -1, id = prefix_cache_lookup(&p->pc, key, parent, tokens, &s);
  if (id >= 0) p->refs[id]++;
  if (id >= 0 && s >= 0 && sid) p->swa.refs[s]++;
  if (sid) *sid = id >= 0 ? s : -1;
  pthread_mutex_unlock(&p->mu);
  return id;
}

int kv_prefix_register(struct kv_pool *p, uint64_t key, uint64_t parent, const int32_t *tokens, int32_t id, int32_t sid) {
  pthread_mutex_lock(&p->mu);
  int added = prefix_cache_insert(&p->pc, key, parent, tokens, id, sid);
  if (added == PC_ADDED) p->refs[id]++;
  if (added && sid >= 0) p->swa.refs[sid]++;
  pthread_mutex_unlock(&p->mu);
  return added == PC_ADDED;
}

void kv_prefix_stats(struct kv_pool *p, uint64_t *hits, uint64_t *misses, int *entries) {
  pthread_mutex_lock(&p->mu);
  *hits = p->pc.hits;
  *misses = p->pc.misses;
  *entries = p->pc.n_entries;
  pthread_mutex_unlock(&p->mu);
}
