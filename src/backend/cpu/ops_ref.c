/* backend/cpu/ops_ref.c — scalar reference kernels: the specification for every other kernel.
 * f32 accumulation in a fixed order (8 interleaved partial sums, then pairwise), so results are
 * reproducible run to run and across thread counts. */
#include <stdlib.h>

#include "backend/cpu/cpu_kernels.h"
#include "base/half.h"
#include "quant/q4.h"

static float dot_f32(const float *a, const float *b, int64_t n) {
  float s[8] = {0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; k++) s[k] += a[i + k] * b[i + k];
  for (; i < n; i++) s[i & 7] += a[i] * b[i];
  return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}

static void ref_q4_row(const struct cpu_q4 *w, int64_t r, float *out) {
  q4_dequantize_row(w->qs + r * (w->cols / 2), w->d + r * (w->cols / Q4_GROUP), w->cols, out);
}

/* Dequantizes a row once into a stack/heap buffer and dots it with every token: exact f32. */
static void ref_matmul_q4(const struct cpu_q4 *w, const float *x, int64_t ldx, int n, int64_t r0,
                          int64_t r1, float *out, int64_t ldo) {
  float stackbuf[4096];
  float *row = w->cols <= 4096 ? stackbuf : malloc((size_t)w->cols * sizeof *row);
  if (!row) return; /* cannot happen for real shapes; leaves out untouched */
  for (int64_t r = r0; r < r1; r++) {
    ref_q4_row(w, r, row);
    for (int t = 0; t < n; t++) out[t * ldo + r] = dot_f32(row, x + t * ldx, w->cols);
  }
  if (row != stackbuf) free(row);
}

static void ref_matmul_bf16(const uint16_t *w, int64_t cols, const float *x, int64_t ldx, int n,
                            int64_t r0, int64_t r1, float *out, int64_t ldo) {
  float stackbuf[4096];
  float *row = cols <= 4096 ? stackbuf : malloc((size_t)cols * sizeof *row);
  if (!row) return;
  for (int64_t r = r0; r < r1; r++) {
    for (int64_t c = 0; c < cols; c++) row[c] = bf16_to_f32(w[r * cols + c]);
    for (int t = 0; t < n; t++) out[t * ldo + r] = dot_f32(row, x + t * ldx, cols);
  }
  if (row != stackbuf) free(row);
}

static void ref_matmul_f32(const float *w, int64_t cols, const float *x, int64_t ldx, int n,
                           int64_t r0, int64_t r1, float *out, int64_t ldo) {
  for (int64_t r = r0; r < r1; r++)
    for (int t = 0; t < n; t++) out[t * ldo + r] = dot_f32(w + r * cols, x + t * ldx, cols);
}

const struct cpu_kernels cpu_kernels_ref = {
  .name = "scalar",
  .matmul_q4 = ref_matmul_q4,
  .matmul_bf16 = ref_matmul_bf16,
  .matmul_f32 = ref_matmul_f32,
  .q4_pack = NULL,
  .q4_free_packed = NULL,
  .q4_row = ref_q4_row,
};
