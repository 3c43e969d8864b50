/* runtime/prefix_cache.h — shared KV prefixes: full KV blocks keyed by a hash chain of their tokens.
 *
 * A full block's key is hash(parent key, its block_size token ids), so equal keys mean equal
 * whole prefixes (the tokens are stored and compared as well, so a hash collision cannot alias).
 * The cache holds one reference on every block it knows; a session that finds its next block in
 * the cache takes another reference instead of computing it. Blocks in the cache are immutable: a
 * session that would write into a shared block first falls back to the block boundary.
 * When the pool runs dry, the least recently used entry that no session holds is evicted.
 * A model with a sliding-window pool (runtime/kv_ring.h) keeps beside each entry the sliding layers' block of the
 * same positions, or -1: that part can go alone when the sliding pool runs dry (prefix_cache_evict_swa), since a
 * cached prefix needs only the sliding blocks of its last window to be resumed.
 * All functions expect the pool mutex (kv_pool.mu) to be held by the caller. */
#ifndef HEARTH_RUNTIME_PREFIX_CACHE_H
#define HEARTH_RUNTIME_PREFIX_CACHE_H
#include <stdint.h>

struct kv_pool;

struct prefix_cache {
  int cap;             /* slots in the open-addressing table (power of two) */
  int block_size;
  int n_entries;
  uint64_t *keys;      /* [cap], 0 = empty */
  int32_t *blocks;     /* [cap] */
  int32_t *sblocks;    /* [cap] the sliding pool's block of the same positions, or -1 */
  uint64_t *parents;   /* [cap] */
  int32_t *tokens;     /* [cap × block_size] */
  uint64_t *last_used; /* [cap] */
  uint64_t clock;
  uint64_t hits, misses; /* blocks reused / looked up and not found */
};

int prefix_cache_init(struct prefix_cache *pc, int n_blocks, int block_size);
void prefix_cache_free(struct prefix_cache *pc);
uint64_t prefix_hash(uint64_t parent, const int32_t *tokens, int n);
/* Block id cached for (parent, tokens), or -1; *sblock (when not NULL) gets its sliding block or -1. A hit
 * refreshes its LRU time. */
int32_t prefix_cache_lookup(struct prefix_cache *pc, uint64_t key, uint64_t parent, const int32_t *tokens,
                            int32_t *sblock);
/* Registers block (and sliding block sblock, -1 for none) under key. Returns PC_ADDED if inserted (the caller
 * must then add the cache's references on both), PC_ADDED_SWA if the key was present without a sliding block
 * and takes sblock now (the caller adds that reference only), 0 otherwise (present, or the table is full). */
enum { PC_ADDED = 1, PC_ADDED_SWA = 2 };
int prefix_cache_insert(struct prefix_cache *pc, uint64_t key, uint64_t parent, const int32_t *tokens, int32_t block,
                        int32_t sblock);
/* Evicts the LRU entry whose block refcount (refs[]) is 1 — held only by the cache — and
 * returns its block id for the caller to release (its sliding block, or -1, in *sblock), or -1 when none can go. */
int32_t prefix_cache_evict(struct prefix_cache *pc, const int32_t *refs, int32_t *sblock);
/* Takes the sliding block off the LRU entry whose sliding block only the cache holds (srefs[] == 1) and returns
 * it for the caller to release, or -1; the entry stays (its full-layer block still serves longer prefixes). */
int32_t prefix_cache_evict_swa(struct prefix_cache *pc, const int32_t *srefs);
/* Drops every entry, returning their blocks through release(block) (used at shutdown). */
void prefix_cache_clear(struct prefix_cache *pc, void (*release)(void *ctx, int32_t block), void *ctx);
#endif
