/* backend/cpu/cpu_kernels.h — the short list of hot CPU kernels that have per-ISA variants.
 *
 * The op table in cpu_backend.c does the bookkeeping (threads, shapes, paging) and calls these for
 * the inner work. ops_ref.c holds the scalar versions: the specification every SIMD variant
 * (ops_avx2.c, ops_avx512.c) is tested against. cpu_kernels_select() picks one set by cpuid. */
#ifndef HEARTH_BACKEND_CPU_KERNELS_H
#define HEARTH_BACKEND_CPU_KERNELS_H
#include <stdint.h>

/* An int4 weight as the CPU backend holds it: the reference layout of quant/q4.h
 * (qs [rows][cols/2], d [rows][cols/128] fp16). A SIMD set may repack into `packed` at upload
 * (its own layout, described in its file); then qs/d may be NULL. */
struct cpu_q4 {
  int64_t rows, cols;
  uint8_t *qs;
  uint16_t *d;
  void *packed;
};

struct cpu_kernels {
  const char *name;
  /* out[t*ldo + r] = dot(x[t*ldx .. +cols], W row r) for t in [0,n), r in [r0,r1) */
  void (*matmul_q4)(const struct cpu_q4 *w, const float *x, int64_t ldx, int n, int64_t r0,
                    int64_t r1, float *out, int64_t ldo);
  void (*matmul_bf16)(const uint16_t *w, int64_t cols, const float *x, int64_t ldx, int n,
                      int64_t r0, int64_t r1, float *out, int64_t ldo);
  void (*matmul_f32)(const float *w, int64_t cols, const float *x, int64_t ldx, int n, int64_t r0,
                     int64_t r1, float *out, int64_t ldo);
  /* optional repack at upload (NULL = keep the reference layout); returns 0 or -1 on OOM */
  int (*q4_repack)(struct cpu_q4 *w);
  void (*q4_free_packed)(struct cpu_q4 *w);
  /* dequantize row r of w into out[cols] (for embedding lookups) */
  void (*q4_row)(const struct cpu_q4 *w, int64_t r, float *out);
};

extern const struct cpu_kernels cpu_kernels_ref;
/* The fastest set this CPU supports (HEARTH_CPU=scalar|avx2 caps it). */
const struct cpu_kernels *cpu_kernels_select(void);

/* Exactness switch: 1 = always use cpu_kernels_ref (the f32-activation int4 path). */
#endif
