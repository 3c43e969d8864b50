/* runtime/kv_cache.h — the model's pool of fixed-size KV blocks, ref-counted for prefix sharing. */
#ifndef HEARTH_RUNTIME_KV_CACHE_H
#define HEARTH_RUNTIME_KV_CACHE_H
#include "model/model.h"

/* swa_blocks > 0: the sliding-window layers get a pool of their own of that many blocks (runtime/kv_ring.h) */
int kv_pool_init(struct hearth_model *m, int n_tokens, int block_size, int swa_blocks, int window, struct hearth_err *err);
void kv_pool_free(struct hearth_model *m);
/* Takes one free block (refcount 1); returns its id or -1 when the pool is exhausted. */
int32_t kv_block_alloc(struct kv_pool *p);
/* Adds a reference to a block (a second sequence shares it). */
void kv_block_ref(struct kv_pool *p, int32_t id);
/* Drops a reference; the block returns to the free list at zero. */
void kv_block_unref(struct kv_pool *p, int32_t id);
int kv_pool_free_blocks(struct kv_pool *p);
/* 1 when more than one holder (a session and/or the prefix cache) references the block. */
int kv_block_shared(struct kv_pool *p, int32_t id);
/* Prefix cache under the pool lock: attach takes a reference on the cached block (or returns -1) and on its
 * sliding block, given in *sid (-1: none; sid may be NULL only for a model without a sliding pool);
 * register adds the cache's reference on a newly full block and on its sliding block sid (-1: none); a known key
 * without a sliding block takes sid. Returns 1 if the key is new. */
int32_t kv_prefix_attach(struct kv_pool *p, uint64_t key, uint64_t parent, const int32_t *tokens, int32_t *sid);
int kv_prefix_register(struct kv_pool *p, uint64_t key, uint64_t parent, const int32_t *tokens, int32_t id, int32_t sid);
void kv_prefix_stats(struct kv_pool *p, uint64_t *hits, uint64_t *misses, int *entries);
#endif
