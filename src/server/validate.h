/* server/validate.h — typed readers for request fields that name the offending parameter.
 *
 * Each reader looks up key in obj. A missing key or JSON null yields the default (or, for required
 * fields, an error). A present key of the wrong type or out of range fills *e with the parameter
 * name and a message and returns -1; otherwise returns 0. Handlers turn a failure into a 400
 * invalid_request_error whose "param" is e->param. Unknown keys are ignored, as OpenAI clients send
 * fields hearth does not use. */
#ifndef HEARTH_SERVER_VALIDATE_H
#define HEARTH_SERVER_VALIDATE_H

#include <jansson.h>

struct verr {
  char param[64];
  char msg[256];
};

int v_fail(struct verr *e, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Integer in [lo, hi]. Reals are refused (1.5 is not a token count). */
int v_int(json_t *obj, const char *key, long long lo, long long hi, long long def, long long *out,
          struct verr *e);
/* Number (integer or real) in [lo, hi]. */
int v_num(json_t *obj, const char *key, double lo, double hi, double def, double *out,
          struct verr *e);
/* Number in [lo, hi] that is stored as a 32-bit float: the range is checked again after the
 * conversion (1e-300 passes [0, 1] as a double but becomes 0.0f), so the engine never sees a value
 * the check did not. gt_lo: the lower bound is exclusive (top_p must stay above 0). */
int v_float(json_t *obj, const char *key, float lo, float hi, int gt_lo, float def, float *out,
            struct verr *e);
int v_bool(json_t *obj, const char *key, int def, int *out, struct verr *e);
/* String; *out points into obj (valid while obj lives). required: a missing key is an error. */
int v_str(json_t *obj, const char *key, int required, const char *def, const char **out,
          struct verr *e);
/* One of the strings in allowed (NULL-terminated). */
int v_enum(json_t *obj, const char *key, const char *const *allowed, const char *def,
           const char **out, struct verr *e);
/* Object (or absent → *out = NULL). */
int v_obj(json_t *obj, const char *key, json_t **out, struct verr *e);
/* Array (or absent → *out = NULL). */
int v_arr(json_t *obj, const char *key, json_t **out, struct verr *e);

#define V_MAX_STOP 4
/* "stop": a string or an array of up to 4 non-empty strings. out[] point into obj. */
int v_stop(json_t *obj, const char *key, const char *out[V_MAX_STOP], int *n_out, struct verr *e);

#endif
