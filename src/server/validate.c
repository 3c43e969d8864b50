/* server/validate.c — typed request field readers (see validate.h). */
#include "server/validate.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int v_fail(struct verr *e, const char *param, const char *fmt, ...) {
  snprintf(e->param, sizeof e->param, "%s", param);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->msg, sizeof e->msg, fmt, ap);
  va_end(ap);
  return -1;
}

static const char *type_name(const json_t *v) {
  switch (json_typeof(v)) {
  case JSON_OBJECT: return "an object";
  case JSON_ARRAY: return "an array";
  case JSON_STRING: return "a string";
  case JSON_INTEGER: return "an integer";
  case JSON_REAL: return "a number";
  case JSON_TRUE: case JSON_FALSE: return "a boolean";
  default: return "null";
  }
}

int v_int(json_t *obj, const char *key, long long lo, long long hi, long long def, long long *out,
          struct verr *e) {
  json_t *v = json_object_get(obj, key);
  if (!v || json_is_null(v)) { *out = def; return 0; }
  if (!json_is_integer(v))
    return v_fail(e, key, "'%s' must be an integer, got %s", key, type_name(v));
  long long x = json_integer_value(v);
  if (x < lo || x > hi)
    return v_fail(e, key, "'%s' must be between %lld and %lld, got %lld", key, lo, hi, x);
  *out = x;
  return 0;
}

int v_num(json_t *obj, const char *key, double lo, double hi, double def, double *out,
          struct verr *e) {
  json_t *v = json_object_get(obj, key);
  if (!v || json_is_null(v)) { *out = def; return 0; }
  if (!json_is_number(v))
    return v_fail(e, key, "'%s' must be a number, got %s", key, type_name(v));
  double x = json_number_value(v);
  if (!isfinite(x) || x < lo || x > hi)
    return v_fail(e, key, "'%s' must be between %g and %g, got %g", key, lo, hi, x);
  *out = x;
  return 0;
}

int v_float(json_t *obj, const char *key, float lo, float hi, int gt_lo, float def, float *out,
            struct verr *e) {
  double d = def;
  if (v_num(obj, key, lo, hi, def, &d, e)) return -1;
  float f = (float)d;
  if (!isfinite(f) || f < lo || f > hi || (gt_lo && !(f > lo)))
    return v_fail(e, key, "'%s' must be %s %g and at most %g as a 32-bit float, got %g", key,
                  gt_lo ? "greater than" : "at least", (double)lo, (double)hi, d);
  *out = f;
  return 0;
}

int v_bool(json_t *obj, const char *key, int def, int *out, struct verr *e) {
  json_t *v = json_object_get(obj, key);
  if (!v || json_is_null(v)) { *out = def; return 0; }
  if (!json_is_boolean(v))
    return v_fail(e, key, "'%s' must be a boolean, got %s", key, type_name(v));
  *out = json_is_true(v);
  return 0;
}

int v_str(json_t *obj, const char *key, int required, const char *def, const char **out,
          struct verr *e) {
  json_t *v = json_object_get(obj, key);
  if (!v || json_is_null(v)) {
    if (required) return v_fail(e, key, "'%s' is required", key);
    *out = def;
    return 0;
  }
  if (!json_is_string(v))
    return v_fail(e, key, "'%s' must be a string, got %s", key, type_name(v));
  *out = json_string_value(v);
  return 0;
}

int v_enum(json_t *obj, const char *key, const char *const *allowed, const char *def,
           const char **out, struct verr *e) {
  const char *s = NULL;
  if (v_str(obj, key, 0, def, &s, e)) return -1;
  if (!s) { *out = NULL; return 0; }
  for (int i = 0; allowed[i]; i++)
    if (!strcmp(s, allowed[i])) { *out = allowed[i]; return 0; }
  char list[160] = "";
  for (int i = 0; allowed[i]; i++) {
    size_t l = strlen(list);
    snprintf(list + l, sizeof list - l, "%s'%s'", i ? ", " : "", allowed[i]);
  }
  return v_fail(e, key, "'%s' must be one of %s", key, list);
}

int v_obj(json_t *obj, const char *key, json_t **out, struct verr *e) {
  json_t *v = json_object_get(obj, key);
  if (!v || json_is_null(v)) { *out = NULL; return 0; }
  if (!json_is_object(v))
    return v_fail(e, key, "'%s' must be an object, got %s", key, type_name(v));
  *out = v;
  return 0;
}

int v_arr(json_t *obj, const char *key, json_t **out, struct verr *e) {
  json_t *v = json_object_get(obj, key);
  if (!v || json_is_null(v)) { *out = NULL; return 0; }
  if (!json_is_array(v))
    return v_fail(e, key, "'%s' must be an array, got %s", key, type_name(v));
  *out = v;
  return 0;
}

int v_stop(json_t *obj, const char *key, const char *out[V_MAX_STOP], int *n_out, struct verr *e) {
  json_t *v = json_object_get(obj, key);
  *n_out = 0;
  if (!v || json_is_null(v)) return 0;
  if (json_is_string(v)) {
    if (!json_string_length(v)) return v_fail(e, key, "'%s' must not be empty", key);
    out[(*n_out)++] = json_string_value(v);
    return 0;
  }
  if (!json_is_array(v))
    return v_fail(e, key, "'%s' must be a string or an array of strings", key);
  if (json_array_size(v) > V_MAX_STOP)
    return v_fail(e, key, "'%s' may hold at most %d strings", key, V_MAX_STOP);
  size_t i;
  json_t *s;
  json_array_foreach(v, i, s) {
    if (!json_is_string(s) || !json_string_length(s))
      return v_fail(e, key, "'%s[%zu]' must be a non-empty string", key, i);
    out[(*n_out)++] = json_string_value(s);
  }
  return 0;
}
