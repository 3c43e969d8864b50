/* backend/cuda/ptx.cuh — the few PTX instructions the kernels issue by hand: 16-byte streaming
 * loads, cp.async, ldmatrix and the m16n8k16 f16 tensor-core product (f32 accumulate), plus the
 * int4 nibble-pair → f16 pair conversion both matmul kernels share. sm_80+ instructions. */
#ifndef HEARTH_BACKEND_CUDA_PTX_CUH
#define HEARTH_BACKEND_CUDA_PTX_CUH

#include <cuda_fp16.h>
#include <stdint.h>

/* 16 bytes of read-only data that is used once (weights): no L1 allocation */
__device__ __forceinline__ uint4 ld_nc_v4(const void *p) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p));
  return r;
}

__device__ __forceinline__ unsigned short ld_nc_u16(const void *p) {
  unsigned short r;
  asm volatile("ld.global.nc.u16 %0, [%1];" : "=h"(r) : "l"(p));
  return r;
}

/* 16-byte global -> shared copy; src_bytes < 16 zero-fills the rest (0: all zero) */
/* (the _s forms take the shared address already converted by smem_u32: the GEMV's ring keeps one base) */
__device__ __forceinline__ uint32_t smem_u32(const void *smem) { return (uint32_t)__cvta_generic_to_shared(smem); }
__device__ __forceinline__ void cp_async16_s(uint32_t s, const void *gmem, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(gmem), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem, int src_bytes) {
  cp_async16_s(smem_u32(smem), gmem, src_bytes);
}
/* the same with cp.async's ignore-src operand: zeros are written where `zero`. One predicated LDGSTS: a src-size
 * register instead costs the address arithmetic that emulates it (~4 instructions per copy on sm_90, round 13) */
__device__ __forceinline__ void cp_async16_z(uint32_t s, const void *gmem, bool zero) {
  asm volatile("{\n .reg .pred z;\n setp.ne.b32 z, %2, 0;\n cp.async.cg.shared.global [%0], [%1], 16, z;\n}" ::"r"(s),
               "l"(gmem), "r"((int)zero));
}
/* and issued only where `on` (a copy that writes zeros still writes: lanes that must not touch shared memory take
 * this one) */
__device__ __forceinline__ void cp_async16_if_z(bool on, uint32_t s, const void *gmem, bool zero) {
  asm volatile("{\n .reg .pred p, z;\n setp.ne.b32 p, %0, 0;\n setp.ne.b32 z, %3, 0;\n"
               " @p cp.async.cg.shared.global [%1], [%2], 16, z;\n}" ::"r"((int)on),
               "r"(s), "l"(gmem), "r"((int)zero));
}
/* L2 eviction priorities (bench/NOTES.md, round 17). A decode step streams ~1.6 GB of weights (3B) through a 50 MB L2,
 * so with no hint every small buffer the step reads again one token later (the norm weights, biases, the KV cache)
 * has been pushed out and comes from DRAM, behind the weight stream, on the critical path of a kernel's prologue.
 * The weight stream is read evict_first and the small per-layer constants evict_last, every access (fraction 1).
 * (The run-time knob HEARTH_L2_HINT=0 and the build switch HEARTH_L2_HINTS=0 that turned the hints off, the A/B
 * controls of rounds 17-19, are in the history at ac09af2.) */
__device__ __forceinline__ uint64_t l2_evict_first() {
  uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_first.L2::evict_unchanged.b64 %0, %1;" : "=l"(p) : "f"(1.0f));
  return p;
}
__device__ __forceinline__ uint64_t l2_evict_last() {
  uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_last.L2::evict_unchanged.b64 %0, %1;" : "=l"(p) : "f"(1.0f));
  return p;
}
/* cp_async16_z / cp_async16_if_z with an L2 cache policy (l2_evict_*) */
__device__ __forceinline__ void cp_async16_zh(uint32_t s, const void *gmem, bool zero, uint64_t pol) {
  asm volatile("{\n .reg .pred z;\n setp.ne.b32 z, %2, 0;\n cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, z, %3;\n}" ::"r"(s),
               "l"(gmem), "r"((int)zero), "l"(pol));
}
__device__ __forceinline__ void cp_async16_if_zh(bool on, uint32_t s, const void *gmem, bool zero, uint64_t pol) {
  asm volatile("{\n .reg .pred p, z;\n setp.ne.b32 p, %0, 0;\n setp.ne.b32 z, %3, 0;\n"
               " @p cp.async.cg.shared.global.L2::cache_hint [%1], [%2], 16, z, %4;\n}" ::"r"((int)on),
               "r"(s), "l"(gmem), "r"((int)zero), "l"(pol));
}
/* a 4-byte load with an L2 cache policy */
__device__ __forceinline__ float ld_f32_h(const float *p, uint64_t pol) {
  float r;
  asm volatile("ld.global.L2::cache_hint.f32 %0, [%1], %2;" : "=f"(r) : "l"(p), "l"(pol));
  return r;
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;"); }
/* "memory": no shared-memory read of the landed data may be moved above the wait */
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

/* four 8x8 b16 matrices; lane l gives the row address of matrix l/8, row l%8 */
__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const void *smem) {
  unsigned s = (unsigned)__cvta_generic_to_shared(smem);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}
/* the same, each 8x8 matrix transposed on the way (B operands stored k-major) */
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4], const void *smem) {
  unsigned s = (unsigned)__cvta_generic_to_shared(smem);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}

/* two floats rounded to an f16 pair, as the 32-bit register an mma operand takes (P·V's A fragment) */
__device__ __forceinline__ uint32_t half2_bits(float lo, float hi) {
  __half2 h = __floats2half2_rn(lo, hi);
  return *(uint32_t *)&h;
}

/* c += a · b, m16n8k16, a row-major 16x16 f16, b col-major 16x8 f16, c 16x8 f32 */
__device__ __forceinline__ void mma_16816(float c[4], const uint32_t a[4], const uint32_t b[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* nibbles at bits 0-3 and 16-19 of v (each q + 8) -> the f16 pair (q_lo, q_hi), exactly: or'ed
 * into 0x6400 (1024.0) each nibble is 1024 + q + 8; minus 1032 */
__device__ __forceinline__ uint32_t q4_pair(uint32_t v) {
  uint32_t h = (v & 0x000F000Fu) | 0x64006400u;
  __half2 x = __hsub2(*(__half2 *)&h, __half2half2(__ushort_as_half((unsigned short)0x6408)));
  return *(uint32_t *)&x;
}

/* the 8 weights of one 32-bit word of the int4 layout as 4 f16 pairs, exactly: pair j holds the
 * nibbles at bits 4j and 16 + 4j. Even pairs: (w >> 8·(j/2)) & 0x000F000F or'ed into 1024.0 is
 * 1024 + q + 8, minus 1032. Odd pairs without a shift: & 0x00F000F0 gives 1024 + 16 (q + 8), and
 * that / 16 - 72 is q (every step exact in f16). */
__device__ __forceinline__ void q4_word(uint32_t w, uint32_t p[4]) {
  const __half2 k1032 = __half2half2(__ushort_as_half((unsigned short)0x6408));
  const __half2 k16th = __half2half2(__ushort_as_half((unsigned short)0x2C00)); /* 1/16 */
  const __half2 km72 = __half2half2(__ushort_as_half((unsigned short)0xD480));  /* -72 */
  const uint32_t hi = w >> 8;
  uint32_t e0 = (w & 0x000F000Fu) | 0x64006400u, o0 = (w & 0x00F000F0u) | 0x64006400u;
  uint32_t e1 = (hi & 0x000F000Fu) | 0x64006400u, o1 = (hi & 0x00F000F0u) | 0x64006400u;
  __half2 r0 = __hsub2(*(__half2 *)&e0, k1032), r1 = __hfma2(*(__half2 *)&o0, k16th, km72);
  __half2 r2 = __hsub2(*(__half2 *)&e1, k1032), r3 = __hfma2(*(__half2 *)&o1, k16th, km72);
  p[0] = *(uint32_t *)&r0;
  p[1] = *(uint32_t *)&r1;
  p[2] = *(uint32_t *)&r2;
  p[3] = *(uint32_t *)&r3;
}

/* the same 8 weights as A-fragment values with the offset left in: even pairs 1024 + u, odd pairs
 * 1024 + 16 u (u = q + 8), one lop3 each and no f16 arithmetic; the caller scales the x of odd pairs
 * by 1/16 and subtracts 1032 * sum(x even) + 72 * sum(x odd) per group (gemv_q4.cu, the offset fold) */
/* (a & m) | 0x64006400 as one lop3 (0xEA = (a & b) | c): written as C, the and and the or stay two
 * instructions, because a SASS LOP3 holds one immediate and the compiler puts both masks there */
__device__ __forceinline__ uint32_t and_or_6400(uint32_t a, uint32_t m) {
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "r"(m), "n"(0x64006400));
  return d;
}
__device__ __forceinline__ void q4_word_raw(uint32_t w, uint32_t p[4]) {
  const uint32_t hi = w >> 8;
  p[0] = and_or_6400(w, 0x000F000Fu);
  p[1] = and_or_6400(w, 0x00F000F0u);
  p[2] = and_or_6400(hi, 0x000F000Fu);
  p[3] = and_or_6400(hi, 0x00F000F0u);
}

#endif
