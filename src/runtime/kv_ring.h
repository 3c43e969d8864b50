/* runtime/kv_ring.h — the sliding-window layers' block pool (Gemma 4): a ring of `window` tokens over paged blocks.
 *
 * A model with sliding-window layers gives them a block pool of their own (kv_pool.swa, storage sized by
 * kv_swa_blocks). A sequence's sliding block table maps logical block b to a block of that pool while some
 * query at or after the sequence's next position can still see one of its keys; once every key of the block lies
 * below next - window + 1 the block goes back (kv_ring_release_dead), so a sequence holds about window / bs + 1
 * sliding blocks however long it grows, instead of one per full block. The attention kernels are unchanged: they
 * already read only keys inside the window, through whichever block table the batch gives a layer.
 * A prefix-cache entry holds the sliding block of its positions too (prefix_cache.h), so a cached prefix resumes
 * with its last window; entries give those up first when the sliding pool runs dry.
 * All functions take the pool mutex themselves. */
#ifndef HEARTH_RUNTIME_KV_RING_H
#define HEARTH_RUNTIME_KV_RING_H
#include <stdint.h>

#include "model/model.h"

/* Blocks of the sliding pool for a KV pool of n_blocks blocks of bs tokens, of which kv_seqs sequences hold KV at
 * once (0: unknown) and a forward pass appends up to batch_tokens: every sequence's window and the block it fills,
 * one window more per sequence for the prefix cache, and a batch's new tokens; never more than n_blocks. */
int kv_swa_blocks(int n_blocks, int bs, int window, int kv_seqs, int batch_tokens);
/* 1 when layer i of the model keeps its KV in the sliding pool */
int kv_layer_in_swa(const struct hearth_model *m, int i);
int kv_swa_init(struct kv_swa_pool *sp, int n_blocks, int window);
void kv_swa_free(struct kv_swa_pool *sp);
/* A free sliding block (refcount 1), taking one from the prefix cache's LRU entry when none is free; -1 if none. */
int32_t kv_swa_alloc(struct kv_pool *p);
void kv_swa_ref(struct kv_pool *p, int32_t id);
void kv_swa_unref(struct kv_pool *p, int32_t id);
int kv_swa_shared(struct kv_pool *p, int32_t id);
/* sliding blocks in use (held by sessions or the prefix cache) */
int kv_swa_used(struct kv_pool *p);

/* ---- a sequence's sliding block table sb[0..n_blocks), -1 where unmapped ---- */
/* 1 when the blocks a query at position n needs (keys max(0, n - window + 1) .. n - 1) are all mapped */
int kv_ring_intact(const struct kv_pool *p, const int32_t *sb, int n_blocks, int n);
/* Gives back the blocks no query at position >= next can see; returns how many went. */
int kv_ring_release_dead(struct kv_pool *p, int32_t *sb, int n_blocks, int next);
/* Before the positions [from, to) are evaluated: gives back what no query at >= from sees (kv_ring_release_dead)
 * except the window of a query at keep <= from (the call's start: a call that fails, or a peek, cuts back there),
 * then maps every unmapped block from the window of `from` through position to - 1 (sb[0..n_blocks) must reach
 * it). Returns 0, or -1 when the sliding pool is dry (what was mapped stays). */
int kv_ring_fill(struct kv_pool *p, int32_t *sb, int n_blocks, int keep, int from, int to);
/* Unrefs the mapped entries of sb[from..to) and marks them -1. */
void kv_ring_release(struct kv_pool *p, int32_t *sb, int from, int to);
/* sb[0..n) into a batch's table row: unmapped entries name a mapped block of the row (never read: outside the
 * window), so no kernel can form an address from -1 */
void kv_ring_stage(int32_t *dst, const int32_t *sb, int n);
/* mapped entries of sb[0..n) */
int kv_ring_held(const int32_t *sb, int n);
/* the sliding blocks a session holds (runtime/session.c; tests) */
struct hearth_session;
int session_swa_held(const struct hearth_session *s);
#endif
