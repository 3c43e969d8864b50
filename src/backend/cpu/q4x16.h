/* backend/cpu/q4x16.h — the repacked int4 layout the SIMD int4 kernels stream.
 *
 * Rows are taken in blocks of 16 (the last block padded with zero weights). For row block b,
 * group g (128 columns) and chunk c in [0, 16) (8 columns: k = 128g + 8c + j), 64 bytes hold
 *   byte 4*l + j  (l = row within the block, j in [0, 4)):
 *       low nibble  = u(row 16b+l, k = 128g + 8c + j)
 *       high nibble = u(row 16b+l, k = 128g + 8c + 4 + j)        u = q + 8 in [0, 15]
 * so one 64-byte load, masked / shifted, gives two vectors whose 32-bit lane l holds 4 weights of
 * row l: exactly what VPDPBUSD wants against 4 activation bytes broadcast to every lane. An AVX2
 * register takes the first or second 32 bytes (rows 0-7, rows 8-15). The scales follow all the
 * quants: d[b][g][l] fp16. Quants of one row block are contiguous (cols * 8 bytes), so a thread
 * that owns a range of row blocks streams one contiguous region.
 *
 * packed = [ quants: nblk * cols * 8 bytes ][ scales: nblk * (cols/128) * 16 fp16 ], 64-aligned. */
#ifndef HEARTH_BACKEND_CPU_Q4X16_H
#define HEARTH_BACKEND_CPU_Q4X16_H
#include <stdint.h>

#include "backend/cpu/cpu_kernels.h"

#define Q4X16_ROWS 16

static inline int64_t q4x16_nblk(const struct cpu_q4 *w) { return (w->rows + 15) / 16; }
static inline const uint8_t *q4x16_quants(const struct cpu_q4 *w, int64_t blk) {
  return (const uint8_t *)w->packed + blk * w->cols * 8;
}
static inline const uint16_t *q4x16_scales(const struct cpu_q4 *w, int64_t blk) {
  return (const uint16_t *)((const uint8_t *)w->packed + q4x16_nblk(w) * w->cols * 8) +
         blk * (w->cols / 128) * 16;
}

struct threadpool;
/* Packs the reference layout qs/d (w->rows x w->cols; w->qs, w->d untouched) into a new w->packed,
 * over `pool`'s threads when given (the loader's: weights are packed while the model loads). The
 * bytes are the same for any pool. 0, or -1 on OOM (w unchanged). */
int q4x16_pack(struct cpu_q4 *w, const uint8_t *qs, const uint16_t *d, struct threadpool *pool);
/* q4x16_pack from w->qs/w->d on this thread, then frees qs/d. 0, or -1 on OOM (w unchanged). */
int q4x16_repack(struct cpu_q4 *w);
void q4x16_free(struct cpu_q4 *w);
/* Dequantizes row r from the packed layout (bit-identical to q4_dequantize_row). */
void q4x16_row(const struct cpu_q4 *w, int64_t r, float *out);
/* Generic C versions of the quantized-activation kernels: the arithmetic the SIMD ones match. */
void q4x16_q8_quantize_generic(const float *x, int64_t ldx, int t0, int t1, const struct cpu_q8 *a);
void q4x16_matmul_generic(const struct cpu_q4 *w, const struct cpu_q8 *a, int n, int64_t r0,
                          int64_t r1, float *out, int64_t ldo);
#endif
