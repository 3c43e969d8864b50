/* load/hub_pull.h — downloading a model repository from the Hugging Face Hub (or $HF_ENDPOINT) into
 * the local Hub cache (hub_cache.h), speaking the Hub's HTTP protocol with libcurl. Only the files
 * inference needs are fetched; nothing half-done is ever visible under snapshots/. */
#ifndef HEARTH_LOAD_HUB_PULL_H
#define HEARTH_LOAD_HUB_PULL_H
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

/* Progress, called from the pulling thread. file NULL: the whole pull. Return non-zero to cancel
 * (the pull then fails with HEARTH_ERR_CANCELLED and the cache is left as it was). */
struct hub_progress {
  const char *status;    /* "resolving", "downloading", "verifying", "done" */
  const char *file;      /* the file being fetched, or NULL */
  uint64_t completed, total;           /* bytes of this file */
  uint64_t all_completed, all_total;   /* bytes of the whole pull */
};
typedef int (*hub_progress_fn)(const struct hub_progress *p, void *arg);

struct hub_pull_opts {
  const char *revision;  /* NULL: "main" */
  const char *endpoint;  /* NULL: $HF_ENDPOINT, else https://huggingface.co */
  const char *token;     /* NULL: $HF_TOKEN, else the token file in $HF_HOME (~/.cache/huggingface/token) */
  hub_progress_fn progress; /* may be NULL */
  void *progress_arg;
};

/* Pulls repo ("ORG/NAME") into the cache. On success writes the snapshot directory into
 * dir[0..cap) (may be NULL). Returns 0 or an error code with err filled. */
int hub_pull(const char *repo, const struct hub_pull_opts *o, char *dir, size_t cap, struct hearth_err *err);
#endif
