/* model/bind.c — name -> field binding with shape checks, dtype conversion and quantization.
 * A matrix's rows are converted on the model's load pool (all cores), since converting and
 * quantizing every weight is most of a load's CPU time (bench/RESULTS.md, load time). */
#include "model/bind.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "base/half.h"
#include "base/threadpool.h"
#include "model/model.h"
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
  /* a branch-free pass first (exponent bits all ones = Inf or NaN; it vectorizes, where the early-exit
   * isfinite loop ran one compare per weight and was ~12 % of a load's CPU), the index only if needed */
  uint32_t bad = 0;
  for (int64_t i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, &v[i], 4);
    bad |= (u & 0x7F800000u) == 0x7F800000u;
  }
  if (!bad) return -1;
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

/* ---- conversion of a matrix's rows, spread over the load pool ----------------------------------- */

enum conv_to { CONV_Q4, CONV_F32, CONV_BF16 };

struct conv_job {
  const struct st_tensor *t;
  int64_t rows, cols;
  enum conv_to to;
  void *buf, *scales;
  atomic_llong next;   /* the next unclaimed row */
  atomic_llong bad_r;  /* the lowest row holding a non-finite weight so far (rows when none) */
  pthread_mutex_t mu;  /* guards bad_c / bad_v together with lowering bad_r */
  int bad_c;
  float bad_v;
  atomic_int nomem;
};

enum { CONV_CHUNK = 16 }; /* rows a worker claims at once: small enough to balance, big enough to amortise */

/* Converts rows claimed from j->next until none is left. Rows past a known bad row are skipped: the
 * error names the first bad weight in row order, as the one-thread loop did. */
static void conv_worker(void *arg, int ith, int nth) {
  (void)ith; (void)nth;
  struct conv_job *j = arg;
  const int64_t cols = j->cols;
  float *row = malloc((size_t)cols * sizeof *row);
  if (!row) { atomic_store(&j->nomem, 1); return; }
  for (;;) {
    int64_t r0 = atomic_fetch_add(&j->next, CONV_CHUNK);
    if (r0 >= j->rows || r0 >= atomic_load(&j->bad_r)) break;
    int64_t r1 = r0 + CONV_CHUNK < j->rows ? r0 + CONV_CHUNK : j->rows;
    for (int64_t r = r0; r < r1; r++) {
      float *dst = j->to == CONV_F32 ? (float *)j->buf + r * cols : row;
      row_to_f32(j->t, r, cols, dst);
      int c = first_nonfinite(dst, cols);
      if (c >= 0) {
        pthread_mutex_lock(&j->mu);
        if (r < atomic_load(&j->bad_r)) { atomic_store(&j->bad_r, r); j->bad_c = c; j->bad_v = dst[c]; }
        pthread_mutex_unlock(&j->mu);
        break;
      }
      if (j->to == CONV_Q4)
        q4_quantize_row(row, cols, (uint8_t *)j->buf + r * (cols / 2), (uint16_t *)j->scales + r * (cols / Q4_GROUP));
      else if (j->to == CONV_BF16)
        for (int64_t i = 0; i < cols; i++) ((uint16_t *)j->buf)[r * cols + i] = f32_to_bf16(row[i]);
    }
  }
  free(row);
}

/* Converts every row of t into buf (and scales) on the model's load pool (model_load.c), or on this
 * thread when there is none. Returns 0, or a status with the first non-finite weight named. */
static int conv_rows(const struct binder *b, const struct st_tensor *t, const char *name, int64_t rows, int64_t cols,
                     enum conv_to to, void *buf, void *scales, struct hearth_err *err) {
  struct conv_job j = {.t = t, .rows = rows, .cols = cols, .to = to, .buf = buf, .scales = scales};
  atomic_init(&j.next, 0);
  atomic_init(&j.bad_r, rows);
  atomic_init(&j.nomem, 0);
  pthread_mutex_init(&j.mu, NULL);
  if (b->m->load_pool) threadpool_run_dynamic(b->m->load_pool, conv_worker, &j);
  else conv_worker(&j, 0, 1);
  pthread_mutex_destroy(&j.mu);
  int64_t bad_r = atomic_load(&j.bad_r);
  if (bad_r < rows) return nonfinite_err(b, t, name, bad_r, j.bad_c, j.bad_v, err);
  if (atomic_load(&j.nomem)) return err_set(err, HEARTH_ERR_NOMEM, "out of memory converting '%s'", name);
  return 0;
}

/* The buffer a matrix is converted into before the backend takes it (n bytes, 64-aligned). One
 * buffer, grown to the largest matrix and reused: a fresh one per tensor was a third of a load's
 * page faults (each first touch of new memory zeroes a page, which on a VM is a costly exit). */
static void *conv_buf(struct hearth_model *m, size_t n) {
  if (n <= m->load_buf_bytes) return m->load_buf;
  free(m->load_buf);
  m->load_buf_bytes = 0;
  const size_t huge = (size_t)2 << 20;
  size_t cap = (n + huge - 1) & ~(huge - 1);
  m->load_buf = aligned_alloc(huge, cap);
  if (!m->load_buf) return NULL;
#ifdef MADV_HUGEPAGE
  (void)madvise(m->load_buf, cap, MADV_HUGEPAGE);
#endif
  m->load_buf_bytes = cap;
  return m->load_buf;
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
  size_t n = (size_t)rows * (size_t)cols; /* elements */
  if (b->dtype == HEARTH_DTYPE_INT4 && cols % Q4_GROUP == 0) {
    hw.dtype = HB_Q4;
    size_t qb = (n / 2 + 63) & ~(size_t)63;
    buf = conv_buf(b->m, qb + n / Q4_GROUP * 2);
    scales = buf ? (uint8_t *)buf + qb : NULL;
    if (buf) rc = conv_rows(b, t, name, rows, cols, CONV_Q4, buf, scales, err);
  } else if (b->dtype == HEARTH_DTYPE_F32) {
    hw.dtype = HB_F32;
    buf = conv_buf(b->m, n * 4);
    if (buf) rc = conv_rows(b, t, name, rows, cols, CONV_F32, buf, NULL, err);
  } else { /* bf16, and int4-ineligible matrices */
    hw.dtype = HB_BF16;
    buf = conv_buf(b->m, n * 2);
    if (buf && t->dtype == ST_BF16) {
      memcpy(buf, t->data, n * 2);
      int64_t i = first_nonfinite_bf16(buf, rows * cols);
      if (i >= 0) rc = nonfinite_err(b, t, name, i / cols, i % cols, bf16_to_f32(((uint16_t *)buf)[i]), err);
    } else if (buf) {
      rc = conv_rows(b, t, name, rows, cols, CONV_BF16, buf, NULL, err);
    }
  }
  if (!rc && !buf) rc = err_set(err, HEARTH_ERR_NOMEM, "out of memory converting '%s'", name);
  if (rc) return rc;
  hw.data = buf;
  hw.scales = scales;
  hw.pool = b->m->load_pool;
  rc = b->m->be->weight_upload(b->m->bctx, dst, &hw, err); /* copies: buf is reused for the next tensor */
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
