/* base/file.h — opening the files a model directory names without trusting them.
 *
 * A model directory is input: any of its files may be a FIFO (open() would block forever), a
 * symlink to /dev/zero or /dev/urandom (a read would never end), or simply enormous. Every loader
 * (config.json, generation_config.json, tokenizer*.json, chat templates, safetensors and their
 * index, the Hub cache's refs/main) opens its files through here: open with O_NONBLOCK so a FIFO
 * cannot block, fstat, require a regular file no larger than the cap of its kind, then clear
 * O_NONBLOCK and read. Errors name the file. */
#ifndef HEARTH_BASE_FILE_H
#define HEARTH_BASE_FILE_H
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

/* Size caps per file kind. The largest real files: Gemma 3's tokenizer.json (33 MB), a
 * tokenizer_config.json carrying a chat template (1.2 MB), a chat template (~20 KB). */
#define FILE_CAP_JSON ((uint64_t)64 << 20)            /* config / index / tokenizer_config / ... */
#define FILE_CAP_TOKENIZER_JSON ((uint64_t)256 << 20) /* tokenizer.json */
#define FILE_CAP_TEMPLATE ((uint64_t)1 << 20)         /* chat_template.jinja */
#define FILE_CAP_SMALL ((uint64_t)4096)               /* one-line files (refs/main) */
#define FILE_CAP_NONE UINT64_MAX                      /* safetensors: mapped, never read whole */

/* Opens path read-only as described above. On success *fd is a blocking, close-on-exec
 * descriptor of a regular file of *size <= max_bytes bytes (the caller closes it). Errors:
 * HEARTH_ERR_IO (cannot open; not a regular file), HEARTH_ERR_FORMAT (larger than max_bytes). */
int file_open_regular(const char *path, uint64_t max_bytes, int *fd, size_t *size, struct hearth_err *err);

/* Reads the whole regular file path (<= max_bytes) into a malloc'd buffer with a NUL after the
 * last byte; *len excludes the NUL. On error *buf is NULL. Errors as file_open_regular, plus
 * HEARTH_ERR_NOMEM and HEARTH_ERR_IO for a failed read. */
int file_read_all(const char *path, uint64_t max_bytes, char **buf, size_t *len, struct hearth_err *err);

/* 1 when something (of any type) exists at path; for optional files, which are then opened with
 * the functions above so that a FIFO or device there is an error, not a hang. */
int file_exists(const char *path);
#endif
