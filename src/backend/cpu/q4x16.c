/* backend/cpu/q4x16.c — repack into the x16 int4 layout (q4x16.h), row dequantization from it, and
 * the generic C 16-bit-activation kernels that define what the SIMD kernels compute. */
#include "backend/cpu/q4x16.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "base/half.h"
#include "base/threadpool.h"

/* Packs row blocks [b0, b1) from the reference layout. For row l, group g and chunk c the 8 weights
 * k = 128g + 8c + 0..7 sit in the 4 source bytes s0..s3 (low nibble first), and the 4 packed bytes
 * pair k with k + 4: o0 = u0 | u4 << 4 = (s0 & 15) | (s2 & 15) << 4, o1 = u1 | u5 << 4 =
 * (s0 >> 4) | (s2 & 0xF0), and likewise o2, o3 from s1, s3: byte operations, no nibble loop.
 * Rows past `rows` are zero weights (u = 8, scale 0). */
static void pack_blocks(const uint8_t *qs, const uint16_t *d, int64_t rows, int64_t cols, uint8_t *p,
                        int64_t nblk, int64_t b0, int64_t b1) {
  int64_t G = cols / 128;
  uint16_t *dp = (uint16_t *)(p + nblk * cols * 8);
  for (int64_t b = b0; b < b1; b++)
    for (int l = 0; l < 16; l++) {
      int64_t r = b * 16 + l;
      const uint8_t *src = r < rows ? qs + r * (cols / 2) : NULL;
      for (int64_t g = 0; g < G; g++) {
        dp[(b * G + g) * 16 + l] = src ? d[r * G + g] : 0;
        uint8_t *o = p + b * cols * 8 + g * 16 * 64 + 4 * l;
        if (!src) {
          for (int c = 0; c < 16; c++) memset(o + c * 64, 0x88, 4);
          continue;
        }
        const uint8_t *s = src + g * 64;
        for (int c = 0; c < 16; c++, s += 4, o += 64) {
          o[0] = (uint8_t)((s[0] & 15) | (s[2] & 15) << 4);
          o[1] = (uint8_t)((s[0] >> 4) | (s[2] & 0xF0));
          o[2] = (uint8_t)((s[1] & 15) | (s[3] & 15) << 4);
          o[3] = (uint8_t)((s[1] >> 4) | (s[3] & 0xF0));
        }
      }
    }
}

/* The packed weights are the model's resident memory, first touched right here: on a VM every 4 KiB
 * page fault is expensive (a third of the repack's time in perf before this), so a large buffer is
 * 2 MiB aligned and asks for transparent huge pages (512x fewer faults, and fewer TLB misses when
 * the matmuls stream it). Where THP is off the advice is ignored and nothing else changes. */
enum { HUGE_PAGE = 2 << 20 };
static void *weight_alloc(size_t bytes) {
  if (bytes < HUGE_PAGE) return aligned_alloc(64, (bytes + 63) & ~(size_t)63);
  size_t n = (bytes + HUGE_PAGE - 1) & ~(size_t)(HUGE_PAGE - 1);
  void *p = aligned_alloc(HUGE_PAGE, n);
#ifdef MADV_HUGEPAGE
  if (p) (void)madvise(p, n, MADV_HUGEPAGE);
#endif
  return p;
}

struct pack_job {
  const uint8_t *qs;
  const uint16_t *d;
  int64_t rows, cols, nblk;
  uint8_t *p;
  atomic_llong next;
};

enum { PACK_CHUNK = 8 }; /* row blocks a worker claims at once (128 rows) */

static void pack_worker(void *arg, int ith, int nth) {
  (void)ith; (void)nth;
  struct pack_job *j = arg;
  for (;;) {
    int64_t b0 = atomic_fetch_add(&j->next, PACK_CHUNK);
    if (b0 >= j->nblk) break;
    pack_blocks(j->qs, j->d, j->rows, j->cols, j->p, j->nblk, b0, b0 + PACK_CHUNK < j->nblk ? b0 + PACK_CHUNK : j->nblk);
  }
}

int q4x16_pack(struct cpu_q4 *w, const uint8_t *qs, const uint16_t *d, struct threadpool *pool) {
  int64_t nblk = q4x16_nblk(w), cols = w->cols, G = cols / 128;
  size_t qbytes = (size_t)(nblk * cols * 8), dbytes = (size_t)(nblk * G * 16 * 2);
  uint8_t *p = weight_alloc(qbytes + dbytes);
  if (!p) return -1;
  struct pack_job j = {.qs = qs, .d = d, .rows = w->rows, .cols = cols, .nblk = nblk, .p = p};
  atomic_init(&j.next, 0);
  /* each block is written by exactly one call, so the bytes do not depend on the pool */
  if (pool) threadpool_run_dynamic(pool, pack_worker, &j);
  else pack_worker(&j, 0, 1);
  w->packed = p;
  return 0;
}

int q4x16_repack(struct cpu_q4 *w) {
  if (q4x16_pack(w, w->qs, w->d, NULL)) return -1;
  free(w->qs);
  free(w->d);
  w->qs = NULL;
  w->d = NULL;
  return 0;
}

void q4x16_free(struct cpu_q4 *w) {
  free(w->packed);
  w->packed = NULL;
}

void q4x16_row(const struct cpu_q4 *w, int64_t r, float *out) {
  int64_t b = r / 16, G = w->cols / 128;
  int l = (int)(r % 16);
  const uint8_t *qp = q4x16_quants(w, b);
  const uint16_t *dp = q4x16_scales(w, b);
  for (int64_t g = 0; g < G; g++) {
    float d = f16_to_f32(dp[g * 16 + l]);
    for (int c = 0; c < 16; c++) {
      const uint8_t *o = qp + (g * 16 + c) * 64 + 4 * l;
      for (int j = 0; j < 4; j++) {
        out[g * 128 + c * 8 + j] = (float)((o[j] & 15) - 8) * d;
        out[g * 128 + c * 8 + 4 + j] = (float)((o[j] >> 4) - 8) * d;
      }
    }
  }
}

/* hi = floor((v + 128) / 256) without shifting a negative number */
static inline int split_hi(int v) { return ((v + 128 + 65536) >> 8) - 256; }

void q4x16_q8_quantize_generic(const float *x, int64_t ldx, int t0, int t1, const struct cpu_q8 *a) {
  int64_t cols = a->cols, G = cols / 128;
  for (int t = t0; t < t1; t++) {
    const float *xt = x + t * ldx;
    int8_t *q = a->q + t * cols, *lo = a->lo + t * cols;
    for (int64_t g = 0; g < G; g++) {
      float amax = 0.0f;
      for (int i = 0; i < 128; i++) amax = fmaxf(amax, fabsf(xt[g * 128 + i]));
      float id = amax > 0.0f ? (float)Q8_VMAX / amax : 0.0f;
      int sum = 0;
      for (int i = 0; i < 128; i++) {
        int v = (int)nearbyintf(xt[g * 128 + i] * id);
        v = v > Q8_VMAX ? Q8_VMAX : v < -Q8_VMAX ? -Q8_VMAX : v;
        sum += v;
        int h = split_hi(v);
        q[g * 128 + i] = (int8_t)h;
        lo[g * 128 + i] = (int8_t)(v - 256 * h);
        if (a->v16) a->v16[t * cols + g * 128 + i] = (int16_t)v;
        if (a->tiles) {
          int8_t *tp = a->tiles + q8_tile_off(t, g, i / 64, G) + i % 64;
          tp[0] = (int8_t)h;
          tp[1024] = (int8_t)(v - 256 * h);
        }
      }
      a->s[t * G + g] = amax / (float)Q8_VMAX;
      a->c[t * G + g] = -8 * sum;
    }
  }
}

void q4x16_matmul_generic(const struct cpu_q4 *w, const struct cpu_q8 *a, int n, int64_t r0,
                          int64_t r1, float *out, int64_t ldo) {
  int64_t G = w->cols / 128;
  for (int64_t r = r0; r < r1; r++) {
    const uint8_t *qp = q4x16_quants(w, r / 16);
    const uint16_t *dp = q4x16_scales(w, r / 16);
    int l = (int)(r % 16);
    for (int t = 0; t < n; t++) {
      const int8_t *qh = a->q + t * a->cols, *ql = a->lo + t * a->cols;
      float acc = 0.0f;
      for (int64_t g = 0; g < G; g++) {
        int32_t S = a->c[t * G + g];
        for (int c = 0; c < 16; c++) {
          const uint8_t *o = qp + (g * 16 + c) * 64 + 4 * l;
          int64_t k = g * 128 + c * 8;
          for (int j = 0; j < 4; j++) {
            int v0 = 256 * qh[k + j] + ql[k + j], v1 = 256 * qh[k + 4 + j] + ql[k + 4 + j];
            S += (o[j] & 15) * v0 + (o[j] >> 4) * v1;
          }
        }
        acc += (float)S * (f16_to_f32(dp[g * 16 + l]) * a->s[t * G + g]);
      }
      out[t * ldo + r] = acc;
    }
  }
}
