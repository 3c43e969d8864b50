/* runtime/prefix_store.h — the prefix cache on disk, so shared prefixes survive a restart.
 *
 * Every full KV block the prefix cache registers is also written to
 *   DIR/<model fingerprint>/<block key>.kv
 * (tokens, parent key, and the block's K and V rows of every layer, with a checksum), and a block
 * the memory cache misses is looked up there before it is computed again. Saving happens off the request
 * path (prefix_store_note, then prefix_store_flush when the caller is idle, and a writer thread). The fingerprint covers
 * the checkpoint (config.json, every safetensors header, file sizes and modification times, and
 * sampled weight bytes), the load dtype, the backend and the KV layout, so a cache never serves a
 * different model. Files are written to a temporary name and renamed, so readers never see half a
 * block; a file that fails any check is ignored (and removed). Off unless a directory is given. */
#ifndef HEARTH_RUNTIME_PREFIX_STORE_H
#define HEARTH_RUNTIME_PREFIX_STORE_H
#include <stdint.h>

#include "model/model.h"

/* Fingerprint of what the KV contents depend on; computed once at load. */
uint64_t prefix_store_fingerprint(const char *model_dir, const struct st_set *st, enum hearth_dtype dtype,
                                  const char *backend, int block_size);
/* Creates DIR/<fingerprint>/ (mode 0700). Returns 0 or a negative status. */
int prefix_store_open(struct hearth_model *m, const char *dir, struct hearth_err *err);
/* Notes block `id` (registered under key/parent/tokens) for saving unless its file exists: the note holds a pool
 * reference until the block is read back (prefix_store_flush, or on the spot when PEND_MAX notes wait). Best
 * effort: a failure only costs a recomputation later. Caller does not hold forward_mu. */
void prefix_store_note(struct hearth_model *m, uint64_t key, uint64_t parent, const int32_t *tokens, int32_t id,
                       int32_t sid);
/* Reads up to about max_blocks noted blocks back (taking forward_mu) and hands them to the writer thread;
 * returns how many notes are left. */
int prefix_store_flush(struct hearth_model *m, int max_blocks);
/* Saves every note, waits for the writer to finish its files, and frees the store (before the KV pool). */
void prefix_store_close(struct hearth_model *m);
/* Loads the longest run of blocks key[0..n) (each with its parent and its bs tokens in tokens[i*bs..]) that is
 * on disk and valid into freshly allocated pool blocks, in one upload, registering each in the memory cache with
 * the caller's reference taken; ids[0..run) receive them. Returns the run's length (0: the first is absent or
 * invalid). Caller holds forward_mu. A model with a sliding pool (runtime/kv_ring.h) restores each block's
 * sliding block too, into sids[0..run) (with the caller's reference; NULL there: nothing is loaded).
 * `sid` of a note: the sliding block of the same positions (-1 without a sliding pool; a sliding-pool model's
 * block without one is saved without its sliding part, and restored with sids[i] = -1). */
int prefix_store_load_run(struct hearth_model *m, const uint64_t *key, const uint64_t *parent, const int32_t *tokens,
                          int n, int32_t *ids, int32_t *sids);
#endif
