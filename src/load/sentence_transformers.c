/* load/sentence_transformers.c — modules.json + the Pooling module's config.json (see the header). */
#include "load/sentence_transformers.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"

/* Loads a small JSON file through base/file.c (FIFOs, devices and oversized files refused);
 * *root = NULL (and 0) when nothing exists at path. Both files are a few hundred bytes. */
static int load_json(const char *path, json_t **root, struct hearth_err *err) {
  *root = NULL;
  if (!file_exists(path)) return 0;
  char *text = NULL;
  size_t len = 0;
  int rc = file_read_all(path, FILE_CAP_SMALL * 256, &text, &len, err);
  if (rc) return rc;
  json_error_t je;
  *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
  free(text);
  if (!*root) return err_set(err, HEARTH_ERR_FORMAT, "%s: not valid JSON: %s (line %d)", path, je.text, je.line);
  return 0;
}

/* "sentence_transformers.models.Pooling" -> 1 when the type's last component is `what` */
static int is_type(const char *type, const char *what) {
  const char *dot = strrchr(type, '.');
  return !strcmp(dot ? dot + 1 : type, what);
}

/* a module folder is one plain name inside the model directory (no "..", no "/") */
static int safe_folder(const char *p) {
  if (!*p || *p == '.' || strlen(p) > 128) return 0;
  for (; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_' ||
          *p == '-' || *p == '.'))
      return 0;
  return 1;
}

static int read_pooling(const char *path, struct sentence_tf *out, struct hearth_err *err) {
  json_t *root = NULL;
  int rc = load_json(path, &root, err);
  if (rc) return rc;
  if (!root) return err_set(err, HEARTH_ERR_FORMAT, "%s is missing (modules.json names a Pooling module)", path);
  if (!json_is_object(root)) { rc = err_set(err, HEARTH_ERR_FORMAT, "%s: not a JSON object", path); goto done; }
  /* the saved form: one boolean per mode (sentence-transformers concatenates several true modes) */
  static const struct { const char *key; int mode; } modes[] = {
    {"pooling_mode_lasttoken", HEARTH_POOL_LAST}, {"pooling_mode_mean_tokens", HEARTH_POOL_MEAN},
    {"pooling_mode_cls_token", HEARTH_POOL_CLS}, {"pooling_mode_max_tokens", -1},
    {"pooling_mode_mean_sqrt_len_tokens", -1}, {"pooling_mode_weightedmean_tokens", -1},
  };
  int n_on = 0, mode = -1;
  const char *name = NULL;
  json_t *s = json_object_get(root, "pooling_mode"); /* the constructor's string form, when saved */
  if (json_is_string(s)) {
    const char *v = json_string_value(s);
    n_on = 1;
    name = v;
    mode = !strcmp(v, "lasttoken") ? HEARTH_POOL_LAST : !strcmp(v, "mean") ? HEARTH_POOL_MEAN
         : !strcmp(v, "cls") ? HEARTH_POOL_CLS : -1;
  } else {
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++)
      if (json_is_true(json_object_get(root, modes[i].key))) { n_on++; mode = modes[i].mode; name = modes[i].key; }
  }
  if (n_on != 1 || mode < 0) {
    rc = err_set(err, HEARTH_ERR_UNSUPPORTED, "%s: pooling %s is not supported; hearth pools one of lasttoken, mean, cls", path,
                 n_on == 0 ? "(no mode set)" : n_on > 1 ? "with several modes at once" : name);
    goto done;
  }
  /* mean pooling without the prompt needs the prompt's length, which an /v1/embeddings input has not */
  if (mode == HEARTH_POOL_MEAN && json_is_false(json_object_get(root, "include_prompt"))) {
    rc = err_set(err, HEARTH_ERR_UNSUPPORTED, "%s: mean pooling with include_prompt = false is not supported", path);
    goto done;
  }
  json_t *dim = json_object_get(root, "word_embedding_dimension");
  if (dim && (!json_is_integer(dim) || json_integer_value(dim) < 1 || json_integer_value(dim) > (1 << 20))) {
    rc = err_set(err, HEARTH_ERR_FORMAT, "%s: word_embedding_dimension must be a positive integer", path);
    goto done;
  }
  out->dim = dim ? (int)json_integer_value(dim) : 0;
  out->pooling = (enum hearth_pooling)mode;
  out->present = 1;
done:
  json_decref(root);
  return rc;
}

int sentence_tf_load(const char *dir, struct sentence_tf *out, struct hearth_err *err) {
  memset(out, 0, sizeof *out);
  out->pooling = HEARTH_POOL_LAST;
  char path[4096];
  if (snprintf(path, sizeof path, "%s/modules.json", dir) >= (int)sizeof path)
    return err_set(err, HEARTH_ERR_ARG, "model path too long");
  json_t *root = NULL;
  int rc = load_json(path, &root, err);
  if (rc || !root) return rc;
  const char *pool_dir = NULL, *unsupported = NULL;
  if (!json_is_array(root)) { rc = err_set(err, HEARTH_ERR_FORMAT, "%s: not a JSON array", path); goto done; }
  size_t i;
  json_t *mod;
  json_array_foreach(root, i, mod) {
    const char *type = json_string_value(json_object_get(mod, "type"));
    const char *folder = json_string_value(json_object_get(mod, "path"));
    if (!type) { rc = err_set(err, HEARTH_ERR_FORMAT, "%s: module %zu has no \"type\" string", path, i); goto done; }
    if (is_type(type, "Pooling")) {
      if (pool_dir) { rc = err_set(err, HEARTH_ERR_UNSUPPORTED, "%s: more than one Pooling module", path); goto done; }
      pool_dir = folder ? folder : "";
    } else if (!is_type(type, "Transformer") && !is_type(type, "Normalize") && !unsupported) {
      unsupported = type;
    }
  }
  if (!pool_dir) goto done; /* not an embedding pipeline: nothing to say */
  if (unsupported) {
    rc = err_set(err, HEARTH_ERR_UNSUPPORTED, "%s: module '%s' is not supported (hearth applies Transformer, Pooling, Normalize)",
                 path, unsupported);
    goto done;
  }
  if (!safe_folder(pool_dir)) {
    rc = err_set(err, HEARTH_ERR_FORMAT, "%s: the Pooling module's path must be a folder name inside the model directory", path);
    goto done;
  }
  if (snprintf(path, sizeof path, "%s/%s/config.json", dir, pool_dir) >= (int)sizeof path) {
    rc = err_set(err, HEARTH_ERR_ARG, "model path too long");
    goto done;
  }
  rc = read_pooling(path, out, err);
done:
  json_decref(root);
  return rc;
}
