/* load/hub_cache.h — the models in the local Hugging Face Hub cache (the layout huggingface_hub
 * writes, shared with every HF tool):
 *   ROOT/models--ORG--NAME/{blobs/<etag>, snapshots/<commit>/<file> -> ../../blobs/<etag>, refs/<rev>}
 * ROOT is $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub (hub_cache_root).
 * Listing reads config.json of each snapshot to say whether hearth can load it. */
#ifndef HEARTH_LOAD_HUB_CACHE_H
#define HEARTH_LOAD_HUB_CACHE_H
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

struct hub_model {
  char repo[256];        /* "ORG/NAME" */
  char revision[64];     /* the commit of the snapshot listed (refs/main's, else the only one) */
  char dir[1024];        /* the snapshot directory */
  char family[16];       /* "qwen2", "qwen3", "gemma4", ... as hf_config detects it */
  int is_embedding;      /* 1: an embedding model, 0: a chat/generative model */
  uint64_t n_params;     /* parameters, from the safetensors headers (0 if unknown) */
  uint64_t bytes_on_disk;/* bytes of the blobs this snapshot uses */
};

/* Writes the cache root into out[0..cap). Returns 0, or -1 when no root can be named. */
int hub_cache_root(char *out, size_t cap);

/* Every model in the cache that hearth can load (others are skipped silently), sorted by repo id.
 * *out is malloc'd (free() it); *n its count. Returns 0 or an error code with err filled. */
int hub_cache_list(struct hub_model **out, int *n, struct hearth_err *err);

/* Deletes repo's snapshots and refs, and the blobs no remaining snapshot uses. HEARTH_ERR_IO with a
 * message when repo is not in the cache. */
int hub_cache_rm(const char *repo, struct hearth_err *err);

/* Like hub_cache_rm, for one snapshot: deletes snapshots/<revision> (a commit, or a ref's commit)
 * and the refs naming it, and the blobs no other snapshot of the repo links to. */
int hub_cache_rm_revision(const char *repo, const char *revision, struct hearth_err *err);

/* ROOT/models--ORG--NAME into out[0..cap); -1 when repo is not ORG/NAME or no root can be named. */
int hub_repo_dir(const char *repo, char *out, size_t cap);

/* Takes the repo's lock (flock on ROOT/.locks/models--ORG--NAME/hearth.lock, waiting for another
 * pull or rm of the same repo to finish); *fd is the locked descriptor: close() it to unlock. */
int hub_repo_lock(const char *repo, int *fd, struct hearth_err *err);
#endif
