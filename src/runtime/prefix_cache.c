/* runtime/prefix_cache.c — hash-chained full KV blocks, open addressing with backward-shift delete. */
#include "runtime/prefix_cache.h"

#include <stdlib.h>
#include <string.h>

int prefix_cache_init(struct prefix_cache *pc, int n_blocks, int block_size) {
  memset(pc, 0, sizeof *pc);
  int cap = 16;
  while (cap < 2 * n_blocks) cap *= 2;
  pc->cap = cap;
  pc->block_size = block_size;
  pc->keys = calloc((size_t)cap, sizeof *pc->keys);
  pc->blocks = malloc((size_t)cap * sizeof *pc->blocks);
  pc->sblocks = malloc((size_t)cap * sizeof *pc->sblocks);
  pc->parents = malloc((size_t)cap * sizeof *pc->parents);
  pc->tokens = malloc((size_t)cap * (size_t)block_size * sizeof *pc->tokens);
  pc->last_used = malloc((size_t)cap * sizeof *pc->last_used);
  if (!pc->keys || !pc->blocks || !pc->sblocks || !pc->parents || !pc->tokens || !pc->last_used) {
    prefix_cache_free(pc);
    return -1;
  }
  return 0;
}

void prefix_cache_free(struct prefix_cache *pc) {
  free(pc->keys);
  free(pc->blocks);
  free(pc->sblocks);
  free(pc->parents);
  free(pc->tokens);
  free(pc->last_used);
  memset(pc, 0, sizeof *pc);
}

uint64_t prefix_hash(uint64_t parent, const int32_t *tokens, int n) {
  uint64_t h = parent ^ 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < n; i++) {
    h ^= (uint64_t)(uint32_t)tokens[i];
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
  }
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 29;
  return h ? h : 1; /* 0 marks an empty slot */
}

static int find_slot(const struct prefix_cache *pc, uint64_t key, uint64_t parent, const int32_t *tokens) {
  int mask = pc->cap - 1;
  for (int i = (int)(key & (uint64_t)mask), probes = 0; probes < pc->cap; i = (i + 1) & mask, probes++) {
    if (pc->keys[i] == 0) return -1;
    if (pc->keys[i] == key && pc->parents[i] == parent &&
        !memcmp(pc->tokens + (size_t)i * pc->block_size, tokens, (size_t)pc->block_size * sizeof *tokens))
      return i;
  }
  return -1;
}

int32_t prefix_cache_lookup(struct prefix_cache *pc, uint64_t key, uint64_t parent, const int32_t *tokens,
                            int32_t *sblock) {
  if (sblock) *sblock = -1;
  if (!pc->cap) return -1;
  int i = find_slot(pc, key, parent, tokens);
  if (i < 0) { pc->misses++; return -1; }
  pc->last_used[i] = ++pc->clock;
  pc->hits++;
  if (sblock) *sblock = pc->sblocks[i];
  return pc->blocks[i];
}

int prefix_cache_insert(struct prefix_cache *pc, uint64_t key, uint64_t parent, const int32_t *tokens, int32_t block,
                        int32_t sblock) {
  if (!pc->cap) return 0;
  int f = find_slot(pc, key, parent, tokens);
  if (f >= 0) {
    if (pc->sblocks[f] >= 0 || sblock < 0) return 0;
    pc->sblocks[f] = sblock; /* the same positions of the same token chain: the same sliding KV */
    return PC_ADDED_SWA;
  }
  if (pc->n_entries * 2 >= pc->cap) return 0;
  int mask = pc->cap - 1, i = (int)(key & (uint64_t)mask);
  while (pc->keys[i]) i = (i + 1) & mask;
  pc->keys[i] = key;
  pc->parents[i] = parent;
  pc->blocks[i] = block;
  pc->sblocks[i] = sblock;
  memcpy(pc->tokens + (size_t)i * pc->block_size, tokens, (size_t)pc->block_size * sizeof *tokens);
  pc->last_used[i] = ++pc->clock;
  pc->n_entries++;
  return PC_ADDED;
}

static void remove_slot(struct prefix_cache *pc, int i) {
  int mask = pc->cap - 1;
  pc->keys[i] = 0;
  pc->n_entries--;
  /* backward-shift deletion: an entry may move into the hole when the hole lies on its probe path */
  for (int j = (i + 1) & mask; pc->keys[j]; j = (j + 1) & mask) {
    int home = (int)(pc->keys[j] & (uint64_t)mask);
    if (((j - home) & mask) >= ((j - i) & mask)) {
      pc->keys[i] = pc->keys[j];
      pc->parents[i] = pc->parents[j];
      pc->blocks[i] = pc->blocks[j];
      pc->sblocks[i] = pc->sblocks[j];
      pc->last_used[i] = pc->last_used[j];
      memcpy(pc->tokens + (size_t)i * pc->block_size, pc->tokens + (size_t)j * pc->block_size,
             (size_t)pc->block_size * sizeof *pc->tokens);
      pc->keys[j] = 0;
      i = j;
    }
  }
}

int32_t prefix_cache_evict(struct prefix_cache *pc, const int32_t *refs, int32_t *sblock) {
  int best = -1;
  *sblock = -1;
  for (int i = 0; i < pc->cap; i++)
    if (pc->keys[i] && refs[pc->blocks[i]] == 1 && (best < 0 || pc->last_used[i] < pc->last_used[best])) best = i;
  if (best < 0) return -1;
  int32_t b = pc->blocks[best];
  *sblock = pc->sblocks[best];
  remove_slot(pc, best);
  return b;
}

int32_t prefix_cache_evict_swa(struct prefix_cache *pc, const int32_t *srefs) {
  int best = -1;
  for (int i = 0; i < pc->cap; i++)
    if (pc->keys[i] && pc->sblocks[i] >= 0 && srefs[pc->sblocks[i]] == 1 &&
        (best < 0 || pc->last_used[i] < pc->last_used[best]))
      best = i;
  if (best < 0) return -1;
  int32_t b = pc->sblocks[best];
  pc->sblocks[best] = -1;
  return b;
}

void prefix_cache_clear(struct prefix_cache *pc, void (*release)(void *ctx, int32_t block), void *ctx) {
  for (int i = 0; i < pc->cap; i++)
    if (pc->keys[i]) {
      release(ctx, pc->blocks[i]);
      pc->keys[i] = 0;
    }
  pc->n_entries = 0;
}
