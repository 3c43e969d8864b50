/* load/safetensors.c — mmap + header validation for safetensors files and shard sets. */
#include "load/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/file.h"

enum { ST_MAX_HEADER = 100 * 1024 * 1024 }; /* the format's own cap on header size */

static const struct { const char *name; enum st_dtype dt; size_t size; } k_dtypes[] = {
  {"F32", ST_F32, 4}, {"F16", ST_F16, 2}, {"BF16", ST_BF16, 2}, {"F64", ST_F64, 8},
  {"I64", ST_I64, 8}, {"I32", ST_I32, 4}, {"I16", ST_I16, 2}, {"I8", ST_I8, 1},
  {"U8", ST_U8, 1}, {"BOOL", ST_BOOL, 1}, {"F8_E4M3", ST_F8_E4M3, 1}, {"F8_E5M2", ST_F8_E5M2, 1},
};

const char *st_dtype_name(enum st_dtype dt) {
  for (size_t i = 0; i < sizeof k_dtypes / sizeof k_dtypes[0]; i++)
    if (k_dtypes[i].dt == dt) return k_dtypes[i].name;
  return "?";
}

size_t st_dtype_size(enum st_dtype dt) {
  for (size_t i = 0; i < sizeof k_dtypes / sizeof k_dtypes[0]; i++)
    if (k_dtypes[i].dt == dt) return k_dtypes[i].size;
  return 0;
}

static enum st_dtype dtype_from_name(const char *s) {
  for (size_t i = 0; i < sizeof k_dtypes / sizeof k_dtypes[0]; i++)
    if (!strcmp(k_dtypes[i].name, s)) return k_dtypes[i].dt;
  return ST_UNKNOWN;
}

/* ---- name index ----------------------------------------------------------------------------
 * Names sorted (a binary search finds one): a header with 100k entries must not make loading
 * quadratic, and unlike a hash table no choice of names can make it so again. Each parsed file's
 * names are sorted (glibc's qsort merge-sorts: n log n whatever the input) and merged in. */

static int cmp_name(const void *a, const void *b) {
  return strcmp(((const struct st_name *)a)->name, ((const struct st_name *)b)->name);
}

/* Adds tensors [first, n_tensors) to the sorted index. Returns 0 or -1 (out of memory). */
static int index_merge(struct st_set *set, int first) {
  size_t n_old = (size_t)set->n_by_name, n_new = (size_t)(set->n_tensors - first);
  if (!n_new) return 0;
  struct st_name *fresh = malloc(n_new * sizeof *fresh), *all = malloc((n_old + n_new) * sizeof *all);
  if (!fresh || !all) { free(fresh), free(all); return -1; }
  for (size_t i = 0; i < n_new; i++) fresh[i] = (struct st_name){set->tensors[first + (int)i].name, first + (int32_t)i};
  qsort(fresh, n_new, sizeof *fresh, cmp_name);
  size_t i = 0, j = 0, k = 0;
  while (i < n_old || j < n_new) /* names are unique (checked by st_parse), so no ties */
    all[k++] = j == n_new || (i < n_old && strcmp(set->by_name[i].name, fresh[j].name) < 0) ? set->by_name[i++] : fresh[j++];
  free(fresh);
  free(set->by_name);
  set->by_name = all;
  set->n_by_name = (int)k;
  return 0;
}

/* Empty tensors first at an offset, then by offset: an empty range overlaps nothing. */
static int cmp_by_offset(const void *a, const void *b) {
  const struct st_tensor *x = *(const struct st_tensor *const *)a, *y = *(const struct st_tensor *const *)b;
  const char *px = x->data, *py = y->data;
  if (px != py) return px < py ? -1 : 1;
  return x->n_bytes < y->n_bytes ? -1 : x->n_bytes > y->n_bytes ? 1 : 0;
}

int st_parse(const void *buf, size_t len, const char *path, struct st_set *set, int file_index,
             struct hearth_err *err) {
  const unsigned char *p = buf;
  if (len < 8) return err_set(err, HEARTH_ERR_FORMAT, "%s: file too short for a safetensors header (%zu bytes)", path, len);
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | p[i];
  if (hlen > ST_MAX_HEADER || hlen > len - 8)
    return err_set(err, HEARTH_ERR_FORMAT, "%s: header length %llu exceeds the file (%zu bytes)", path,
                   (unsigned long long)hlen, len);
  json_error_t jerr;
  json_t *root = json_loadb((const char *)p + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
  if (!root) return err_set(err, HEARTH_ERR_FORMAT, "%s: header is not valid JSON: %s (offset %d)", path, jerr.text, jerr.position);
  if (!json_is_object(root)) {
    json_decref(root);
    return err_set(err, HEARTH_ERR_FORMAT, "%s: header is not a JSON object", path);
  }
  const unsigned char *data = p + 8 + hlen;
  size_t data_len = len - 8 - (size_t)hlen;
  size_t n_new = json_object_size(root);
  if (n_new > (size_t)ST_MAX_TENSORS - (size_t)set->n_tensors) {
    json_decref(root);
    return err_set(err, HEARTH_ERR_FORMAT, "%s: header lists %zu entries; hearth accepts at most %d tensors per checkpoint",
                   path, n_new, ST_MAX_TENSORS);
  }
  struct st_tensor *grown = realloc(set->tensors, (set->n_tensors + n_new + 1) * sizeof *grown);
  if (!grown) { json_decref(root); return err_set(err, HEARTH_ERR_NOMEM, "%s: out of memory", path); }
  set->tensors = grown;
  int first = set->n_tensors;
  const char *key;
  json_t *val;
  int rc = 0;
  json_object_foreach(root, key, val) {
    if (!strcmp(key, "__metadata__")) continue;
    if (!json_is_object(val)) { rc = err_set(err, HEARTH_ERR_FORMAT, "%s: tensor '%s': entry is not an object", path, key); break; }
    json_t *jd = json_object_get(val, "dtype"), *js = json_object_get(val, "shape"), *jo = json_object_get(val, "data_offsets");
    if (!json_is_string(jd)) { rc = err_set(err, HEARTH_ERR_FORMAT, "%s: tensor '%s': field 'dtype' missing or not a string", path, key); break; }
    if (!json_is_array(js)) { rc = err_set(err, HEARTH_ERR_FORMAT, "%s: tensor '%s': field 'shape' missing or not an array", path, key); break; }
    if (!json_is_array(jo) || json_array_size(jo) != 2) { rc = err_set(err, HEARTH_ERR_FORMAT, "%s: tensor '%s': field 'data_offsets' must be [begin, end]", path, key); break; }
    enum st_dtype dt = dtype_from_name(json_string_value(jd));
    if (dt == ST_UNKNOWN) { rc = err_set(err, HEARTH_ERR_FORMAT, "%s: tensor '%s': unknown dtype '%s'", path, key, json_string_value(jd)); break; }
    size_t nd = json_array_size(js);
    if (nd > ST_MAX_DIMS) { rc = err_set(err, HEARTH_ERR_FORMAT, "%s: tensor '%s': %zu dims (max %d)", path, key, nd, ST_MAX_DIMS); break; }
    struct st_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = dt;
    t.n_dims = (int)nd;
    t.file = file_index;
    uint64_t n_elems = 1;
    int bad = 0;
    for (size_t i = 0; i < nd; i++) {
      json_t *d = json_array_get(js, i);
      if (!json_is_integer(d) || json_integer_value(d) < 0) { bad = 1; break; }
      uint64_t v = (uint64_t)json_integer_value(d);
      if (v && n_elems > UINT64_MAX / v) { bad = 2; break; }
      n_elems *= v;
      t.shape[i] = (int64_t)v;
    }
    if (bad == 1) { rc = err_set(err, HEARTH_ERR_FORMAT, "%s: tensor '%s': shape entries must be non-negative integers", path, key); break; }
    if (bad == 2 || n_elems > (uint64_t)INT64_MAX / 8) { rc = err_set(err, HEARTH_ERR_FORMAT, "%s: tensor '%s': shape overflows", path, key); break; }
    json_t *b0 = json_array_get(jo, 0), *b1 = json_array_get(jo, 1);
    if (!json_is_integer(b0) || !json_is_integer(b1) || json_integer_value(b0) < 0 || json_integer_value(b1) < json_integer_value(b0)) {
      rc = err_set(err, HEARTH_ERR_FORMAT, "%s: tensor '%s': data_offsets must be integers with 0 <= begin <= end", path, key); break;
    }
    uint64_t beg = (uint64_t)json_integer_value(b0), end = (uint64_t)json_integer_value(b1);
    if (end > data_len) { rc = err_set(err, HEARTH_ERR_FORMAT, "%s: tensor '%s': data_offsets end %llu past the data section (%zu bytes; file truncated?)", path, key, (unsigned long long)end, data_len); break; }
    uint64_t want = n_elems * st_dtype_size(dt);
    if (end - beg != want) { rc = err_set(err, HEARTH_ERR_FORMAT, "%s: tensor '%s': %llu bytes for dtype %s and its shape, but data_offsets span %llu", path, key, (unsigned long long)want, st_dtype_name(dt), (unsigned long long)(end - beg)); break; }
    t.n_elems = (int64_t)n_elems;
    t.n_bytes = (size_t)want;
    t.data = data + beg;
    t.name = strdup(key);
    if (!t.name) { rc = err_set(err, HEARTH_ERR_NOMEM, "out of memory"); break; }
    if (st_find(set, key)) { free(t.name); rc = err_set(err, HEARTH_ERR_FORMAT, "%s: tensor '%s' appears in more than one shard", path, key); break; }
    set->tensors[set->n_tensors++] = t;
  }
  json_decref(root);
  if (!rc) { /* overlap check within this file */
    int n = set->n_tensors - first;
    struct st_tensor **v = n ? malloc((size_t)n * sizeof *v) : NULL;
    if (n && !v) return err_set(err, HEARTH_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n; i++) v[i] = &set->tensors[first + i];
    if (n > 1) qsort(v, (size_t)n, sizeof *v, cmp_by_offset);
    const struct st_tensor *prev = NULL; /* the last non-empty tensor */
    for (int i = 0; i < n && !rc; i++) {
      if (!v[i]->n_bytes) continue; /* occupies no bytes, wherever it points */
      if (prev && (const char *)v[i]->data < (const char *)prev->data + prev->n_bytes)
        rc = err_set(err, HEARTH_ERR_FORMAT, "%s: tensors '%s' and '%s' overlap", path, prev->name, v[i]->name);
      prev = v[i];
    }
    free(v);
  }
  if (!rc && index_merge(set, first)) rc = err_set(err, HEARTH_ERR_NOMEM, "out of memory");
  return rc;
}

static int map_file(const char *path, struct st_file *f, struct hearth_err *err) {
  int fd;
  int rc = file_open_regular(path, FILE_CAP_NONE, &fd, &f->size, err);
  if (rc) return rc;
  f->map = NULL;
  if (f->size) {
    void *m = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      close(fd);
      return err_set(err, HEARTH_ERR_IO, "%s: mmap failed: %s", path, strerror(errno));
    }
    posix_madvise(m, f->size, POSIX_MADV_SEQUENTIAL);
    f->map = m;
  }
  close(fd);
  f->path = strdup(path);
  if (!f->path) {
    if (f->map) munmap(f->map, f->size);
    f->map = NULL;
    return err_set(err, HEARTH_ERR_NOMEM, "out of memory");
  }
  return 0;
}

static int add_file(struct st_set *set, const char *path, struct hearth_err *err) {
  struct st_file *grown = realloc(set->files, (size_t)(set->n_files + 1) * sizeof *grown);
  if (!grown) return err_set(err, HEARTH_ERR_NOMEM, "out of memory");
  set->files = grown;
  struct st_file *f = &set->files[set->n_files];
  memset(f, 0, sizeof *f);
  int rc = map_file(path, f, err);
  if (rc) return rc;
  set->n_files++;
  return st_parse(f->map, f->size, path, set, set->n_files - 1, err);
}

int st_open_file(const char *path, struct st_set **out, struct hearth_err *err) {
  *out = NULL;
  struct st_set *set = calloc(1, sizeof *set);
  if (!set) return err_set(err, HEARTH_ERR_NOMEM, "out of memory");
  int rc = add_file(set, path, err);
  if (rc) { st_close(set); return rc; }
  *out = set;
  return 0;
}

int st_open_dir(const char *dir, struct st_set **out, struct hearth_err *err) {
  *out = NULL;
  char path[4096];
  snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
  if (!file_exists(path)) {
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (!file_exists(path))
      return err_set(err, HEARTH_ERR_IO, "%s: no model.safetensors or model.safetensors.index.json", dir);
    return st_open_file(path, out, err);
  }
  char *text;
  size_t text_len;
  int rc0 = file_read_all(path, FILE_CAP_JSON, &text, &text_len, err);
  if (rc0) return rc0;
  json_error_t jerr;
  json_t *idx = json_loadb(text, text_len, JSON_REJECT_DUPLICATES, &jerr);
  free(text);
  if (!idx) return err_set(err, HEARTH_ERR_FORMAT, "%s: not valid JSON: %s (line %d)", path, jerr.text, jerr.line);
  json_t *map = json_object_get(idx, "weight_map");
  if (!json_is_object(map)) {
    json_decref(idx);
    return err_set(err, HEARTH_ERR_FORMAT, "%s: field 'weight_map' missing or not an object", path);
  }
  struct st_set *set = calloc(1, sizeof *set);
  if (!set) { json_decref(idx); return err_set(err, HEARTH_ERR_NOMEM, "out of memory"); }
  int rc = 0;
  const char *key;
  json_t *val;
  json_object_foreach(map, key, val) { /* open each shard once, in first-mention order */
    if (!json_is_string(val)) { rc = err_set(err, HEARTH_ERR_FORMAT, "%s: weight_map['%s'] is not a string", path, key); break; }
    const char *shard = json_string_value(val);
    if (strchr(shard, '/') || !strcmp(shard, "..")) { rc = err_set(err, HEARTH_ERR_FORMAT, "%s: weight_map['%s'] names a path outside the model directory", path, key); break; }
    char sp[4096];
    snprintf(sp, sizeof sp, "%s/%s", dir, shard);
    int seen = 0;
    for (int i = 0; i < set->n_files; i++) if (!strcmp(set->files[i].path, sp)) seen = 1;
    if (!seen && (rc = add_file(set, sp, err))) break;
  }
  if (!rc) {
    json_object_foreach(map, key, val) {
      const struct st_tensor *t = st_find(set, key);
      if (!t) { rc = err_set(err, HEARTH_ERR_FORMAT, "%s: tensor '%s' listed in weight_map is missing from %s", path, key, json_string_value(val)); break; }
    }
  }
  json_decref(idx);
  if (rc) { st_close(set); return rc; }
  *out = set;
  return 0;
}

const struct st_tensor *st_find(const struct st_set *set, const char *name) {
  struct st_name key = {name, 0};
  const struct st_name *e = set->n_by_name ? bsearch(&key, set->by_name, (size_t)set->n_by_name, sizeof key, cmp_name) : NULL;
  return e ? &set->tensors[e->i] : NULL;
}

void st_release_pages(struct st_set *set) {
  if (!set) return;
  for (int i = 0; i < set->n_files; i++)
    if (set->files[i].map) posix_madvise(set->files[i].map, set->files[i].size, POSIX_MADV_DONTNEED);
}

void st_close(struct st_set *set) {
  if (!set) return;
  for (int i = 0; i < set->n_tensors; i++) free(set->tensors[i].name);
  for (int i = 0; i < set->n_files; i++) {
    if (set->files[i].map) munmap(set->files[i].map, set->files[i].size);
    free(set->files[i].path);
  }
  free(set->tensors);
  free(set->by_name);
  free(set->files);
  free(set);
}
