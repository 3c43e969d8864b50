/* load/safetensors.h — read-only, validated access to safetensors files and sharded sets.
 *
 * A file is mmap'd; its header (8-byte little-endian length + JSON) is parsed with jansson and
 * every entry is checked: known dtype, shape of non-negative dims, data_offsets inside the data
 * section, byte length = dtype size × product of dims (no overflow), entries not overlapping.
 * A directory is opened through model.safetensors.index.json when present (every shard named in
 * weight_map is opened once and every mapped tensor must exist in its shard), else
 * model.safetensors. This module interprets nothing: binding tensors to a model is model/bind.c.
 * Zero-size tensors (a 0 in the shape, begin == end) are legal and overlap nothing; whether a
 * model may use one is the binder's shape check. Names are found by binary search over a sorted
 * index: a header with 100k entries must not make loading quadratic. */
#ifndef HEARTH_LOAD_SAFETENSORS_H
#define HEARTH_LOAD_SAFETENSORS_H
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

enum st_dtype { ST_F32, ST_F16, ST_BF16, ST_F64, ST_I64, ST_I32, ST_I16, ST_I8, ST_U8, ST_BOOL,
                ST_F8_E4M3, ST_F8_E5M2, ST_UNKNOWN };

#define ST_MAX_DIMS 8
#define ST_MAX_TENSORS (1 << 20) /* per set; the largest real checkpoints hold ~100k tensors */

struct st_tensor {
  char *name;
  enum st_dtype dtype;
  int n_dims;
  int64_t shape[ST_MAX_DIMS];
  int64_t n_elems;
  const void *data;  /* inside the mapping */
  size_t n_bytes;
  int file;          /* index into st_set.files */
};

struct st_file {
  char *path;
  void *map;
  size_t size;
};

struct st_name { const char *name; int32_t i; }; /* a tensor's name and its index in st_set.tensors */

struct st_set {
  struct st_file *files;
  int n_files;
  struct st_tensor *tensors;
  int n_tensors;
  struct st_name *by_name; /* the tensors of every fully parsed file, sorted by name (st_find) */
  int n_by_name;
};

/* Opens DIR's safetensors (index or single file). On error *out is NULL and err names the file. */
int st_open_dir(const char *dir, struct st_set **out, struct hearth_err *err);
/* Opens one file into a fresh set (used by tests and fuzzing). */
int st_open_file(const char *path, struct st_set **out, struct hearth_err *err);
/* Validates a header given as memory: buf[0..len) is the whole file. Used by st_open_file and the fuzzer. */
int st_parse(const void *buf, size_t len, const char *path, struct st_set *set, int file_index,
             struct hearth_err *err);
/* The tensor called name in the files parsed without error so far, or NULL (O(log n)). */
const struct st_tensor *st_find(const struct st_set *set, const char *name);
const char *st_dtype_name(enum st_dtype dt);
size_t st_dtype_size(enum st_dtype dt);
/* Unmaps and frees everything (NULL allowed). */
void st_close(struct st_set *set);
/* Tells the kernel the mappings may be dropped (after weights were copied out). */
void st_release_pages(struct st_set *set);
#endif
