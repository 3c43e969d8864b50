/* load/hub.h — finding a model directory: a path as given, or a Hugging Face repo id ("Org/Name")
 * resolved through the local Hub cache layout that other tools already filled:
 *   $HF_HUB_CACHE or $HF_HOME/hub or ~/.cache/huggingface/hub / models--Org--Name / snapshots / REV
 * where REV is refs/main (or the only snapshot). No network access: downloads are a separate step. */
#ifndef HEARTH_LOAD_HUB_H
#define HEARTH_LOAD_HUB_H
#include <stddef.h>

#include "base/err.h"

/* Writes the directory to use into out[0..cap). Returns 0, or HEARTH_ERR_IO naming what was tried. */
int hub_resolve(const char *path_or_repo, char *out, size_t cap, struct hearth_err *err);
/* The same for a repo id only (a directory of that name is not looked at): the cache's snapshot. */
int hub_resolve_repo(const char *repo, char *out, size_t cap, struct hearth_err *err);
#endif
