/* runtime/prefix_store.h — the prefix cache on disk, so shared prefixes survive a restart.
 *
 * Every full KV block the prefix cache registers is also written to
 *   DIR/<model fingerprint>/<block key>.kv
 * (tokens, parent key, and the block's K and V rows of every layer, with a checksum), and a block
 * the memory cache misses is looked up there before it is computed again. The fingerprint covers
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
/* Writes block `id` (already registered under key/parent/tokens) unless the file exists.
 * Best effort: a failure only costs a recomputation later. Caller holds forward_mu. */
void prefix_store_save(struct hearth_model *m, uint64_t key, uint64_t parent, const int32_t *tokens, int32_t id);
/* Loads the block for key/parent/tokens into a freshly allocated pool block, registers it in the
 * memory cache with the caller's reference taken, and returns its id; -1 when absent or invalid.
 * Caller holds forward_mu. */
int32_t prefix_store_load(struct hearth_model *m, uint64_t key, uint64_t parent, const int32_t *tokens);
#endif
