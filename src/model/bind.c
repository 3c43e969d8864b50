/* model/bind.c — name -> field binding with shape checks, dtype conversion and quantization. */
#include "model/bind.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/half.h"
#include "quant/q4.h"

const struct st_tensor *bind_lookup(const struct binder *b, const char *name) {
  const struct st_tensor *t = st_find(b->st, name);
  if (t) return t;
  if (!strncmp(name, "model.", 6)) return st_find(b->st, name + 6); /* Qwen3-Embedding: bare names */
  return NULL;
}

static const char *file_of(const struct binder *b, const struct st_tensor *t) {
  const char *p = b->st->files[t->file].path, *s = strrchr(p, '/');
  return s ? s + 1 : p;
}

/* Converts row r of a bf16/f16/f32 tensor to f32. */
static void row_to_f32(const struct st_tensor *t, int64_t r, int64_t cols, float *out) {
  if (t->dtype == ST_F32) {
    memcpy(out, (const float *)t->data + r * cols, (size_t)cols * sizeof *out);
  } else if (t->dtype == ST_BF16) {
    const uint16_t *s = (const uint16_t *)t->data + r * cols;
    for (int64_t i = 0; i < cols; i++) out[i] = bf16_to_f32(s[i]);
  } else {
    const uint16_t *s = (const uint16_t *)t->data + r * cols;
    for (int64_t i = 0; i < cols; i++) out[i] = f16_to_f32(s[i]);
  }
}

/* NaN/Inf weights would make every logit NaN and every answer garbage that still looks like a
 * 200: find them while converting (the data is being read anyway) and name the tensor. */
static int first_nonfinite(const float *v, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    if (!isfinite(v[i])) return (int)(i < INT32_MAX ? i : INT32_MAX);
  return -1;
}

/* bf16 copied as is: exponent bits all ones is Inf or NaN. */
static int64_t first_nonfinite_bf16(const uint16_t *v, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    if ((v[i] & 0x7F80) == 0x7F80) return i;
  return -1;
}

static int nonfinite_err(const struct binder *b, const struct st_tensor *t, const char *name, int64_t r, int64_t c,
                         float v, struct hearth_err *err) {
  return err_set(err, HEARTH_ERR_FORMAT, "%s: tensor '%s' holds a non-finite weight (%s at row %lld, column %lld)",
                 file_of(b, t), name, isnan(v) ? "NaN" : v > 0 ? "+Inf" : "-Inf", (long long)r, (long long)c);
}

static int check(const struct binder *b, const struct st_tensor *t, const char *name, int n_dims,
                 int64_t rows, int64_t cols, struct hearth_err *err) {
  if (t->dtype != ST_BF16 && t->dtype != ST_F16 && t->dtype != ST_F32)
    return err_set(err, HEARTH_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s; hearth loads bf16, f16 and f32",
                   file_of(b, t), name, st_dtype_name(t->dtype));
  int ok = t->n_dims == n_dims && t->shape[0] == rows && (n_dims == 1 || t->shape[1] == cols);
  if (!ok) {
    char got[128] = "[";
    for (int i = 0; i < t->n_dims; i++) {
      char d[32];
      snprintf(d, sizeof d, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
      strncat(got, d, sizeof got - strlen(got) - 2);
    }
    strcat(got, "]");
    if (n_dims == 1)
      return err_set(err, HEARTH_ERR_FORMAT, "%s: tensor '%s' has shape %s, config.json implies [%lld]",
                     file_of(b, t), name, got, (long long)rows);
    return err_set(err, HEARTH_ERR_FORMAT, "%s: tensor '%s' has shape %s, config.json implies [%lld, %lld]",
                   file_of(b, t), name, got, (long long)rows, (long long)cols);
  }
  return 0;
}

int bind_matrix(struct binder *b, struct hb_tensor *dst, const char *name, int64_t rows, int64_t cols,
                struct hearth_err *err) {
  const struct st_tensor *t = bind_lookup(b, name);
  if (!t) return err_set(err, HEARTH_ERR_FORMAT, "checkpoint: tensor '%s' is missing", name);
  int rc = check(b, t, name, 2, rows, cols, err);
  if (rc) return rc;
  b->n_params += (uint64_t)rows * (uint64_t)cols;
  struct hb_host_weight hw = {.rows = rows, .cols = cols};
  void *buf = NULL, *scales = NULL;
  int64_t bad_r = -1; /* first non-finite weight: row, column, value */
  int bad_c = -1;
  float bad_v = 0;
  float *row = malloc((size_t)cols * sizeof *row);
  if (!row) return err_set(err, HEARTH_ERR_NOMEM, "out of memory");
  if (b->dtype == HEARTH_DTYPE_INT4 && cols % Q4_GROUP == 0) {
    hw.dtype = HB_Q4;
    buf = malloc((size_t)rows * (size_t)cols / 2);
    scales = malloc((size_t)rows * (size_t)(cols / Q4_GROUP) * 2);
    if (buf && scales)
      for (int64_t r = 0; r < rows && bad_r < 0; r++) {
        row_to_f32(t, r, cols, row);
        if ((bad_c = first_nonfinite(row, cols)) >= 0) { bad_r = r, bad_v = row[bad_c]; break; }
        q4_quantize_row(row, cols, (uint8_t *)buf + r * (cols / 2), (uint16_t *)scales + r * (cols / Q4_GROUP));
      }
  } else if (b->dtype == HEARTH_DTYPE_F32) {
    hw.dtype = HB_F32;
    buf = malloc((size_t)rows * (size_t)cols * 4);
    if (buf)
      for (int64_t r = 0; r < rows && bad_r < 0; r++) {
        float *dst = (float *)buf + r * cols;
        row_to_f32(t, r, cols, dst);
        if ((bad_c = first_nonfinite(dst, cols)) >= 0) bad_r = r, bad_v = dst[bad_c];
      }
  } else { /* bf16, and int4-ineligible matrices */
    hw.dtype = HB_BF16;
    buf = malloc((size_t)rows * (size_t)cols * 2);
    if (buf) {
      if (t->dtype == ST_BF16) {
        memcpy(buf, t->data, (size_t)rows * (size_t)cols * 2);
        int64_t i = first_nonfinite_bf16(buf, rows * cols);
        if (i >= 0) bad_r = i / cols, bad_c = (int)(i % cols), bad_v = bf16_to_f32(((uint16_t *)buf)[i]);
      } else {
        for (int64_t r = 0; r < rows && bad_r < 0; r++) {
          row_to_f32(t, r, cols, row);
          if ((bad_c = first_nonfinite(row, cols)) >= 0) { bad_r = r, bad_v = row[bad_c]; break; }
          for (int64_t i = 0; i < cols; i++) ((uint16_t *)buf)[r * cols + i] = f32_to_bf16(row[i]);
        }
      }
    }
  }
  free(row);
  if (bad_r >= 0) {
    free(buf); free(scales);
    return nonfinite_err(b, t, name, bad_r, bad_c, bad_v, err);
  }
  if (!buf || (hw.dtype == HB_Q4 && !scales)) {
    free(buf); free(scales);
    return err_set(err, HEARTH_ERR_NOMEM, "out of memory converting '%s'", name);
  }
  hw.data = buf;
  hw.scales = scales;
  rc = b->m->be->weight_upload(b->m->bctx, dst, &hw, err);
  free(buf);
  free(scales);
  if (rc) return err_prefix(err, "tensor '%s'", name);
  return 0;
}

int bind_vector(struct binder *b, struct hb_tensor *dst, const char *name, int64_t n, struct hearth_err *err) {
  const struct st_tensor *t = bind_lookup(b, name);
  if (!t) return err_set(err, HEARTH_ERR_FORMAT, "checkpoint: tensor '%s' is missing", name);
  int rc = check(b, t, name, 1, n, 0, err);
  if (rc) return rc;
  b->n_params += (uint64_t)n;
  float *v = malloc((size_t)n * sizeof *v);
  if (!v) return err_set(err, HEARTH_ERR_NOMEM, "out of memory");
  row_to_f32(t, 0, n, v);
  int bad = first_nonfinite(v, n);
  if (bad >= 0) {
    float x = v[bad];
    free(v);
    return nonfinite_err(b, t, name, 0, bad, x, err);
  }
  struct hb_host_weight hw = {.dtype = HB_F32, .rows = 1, .cols = n, .data = v};
  rc = b->m->be->weight_upload(b->m->bctx, dst, &hw, err);
  free(v);
  if (rc) return err_prefix(err, "tensor '%s'", name);
  return 0;
}
