/* bench/int8_peak.c — this core's int8 dot-product peak: the ceiling of the CPU int4 matmuls, whose
 * 16-bit activations (two int8 planes, cpu_kernels.h) cost two int8 multiply-adds per weight.
 * Prints the clock (a chain of dependent adds, one a cycle) and the throughput of independent
 * VPDPBUSD (zmm, ymm) and of the AVX2 pair VPMADDUBSW + VPMADDWD, on one thread, and what each
 * gives as a two-plane MAC rate; then VPDPBUSD interleaved with floating-point multiply-adds (FMA, BF16 dot
 * products), to see whether those run on other pipes (they would leave room for a mixed format). Used for issue 31/35's W5 bound (bench/RESULTS.md, session 37).
 *   gcc -O2 -mavx2 -mavx512f -mavx512bw -mavx512vl -mavx512vnni -mavx512bf16 -mavxvnni bench/int8_peak.c -o /tmp/int8_peak
 * Runs only the parts this CPU has (cpuid). */
#include <cpuid.h>
#include <immintrin.h>
#include <stdio.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

#define N 12 /* independent chains: enough to cover the ~5-7-cycle latencies on 2 pipes */

/* The body of each timer: 12 chains of VT from distinct starting values (equal chains would be merged by the
 * compiler), STEP(x) applied to each per iteration, an empty asm keeping all 12 live in registers, then their
 * lane sum written to a volatile (so nothing is dead). Returns steps a second. */
#define CHAINS(VT, SET1, ADD, LANE0, STEP)                                                                       \
  VT a0 = SET1(0), a1 = SET1(1), a2 = SET1(2), a3 = SET1(3), a4 = SET1(4), a5 = SET1(5), a6 = SET1(6),           \
     a7 = SET1(7), a8 = SET1(8), a9 = SET1(9), a10 = SET1(10), a11 = SET1(11);                                   \
  double t0 = now();                                                                                            \
  for (long i = 0; i < iters; i++) {                                                                            \
    STEP(a0) STEP(a1) STEP(a2) STEP(a3) STEP(a4) STEP(a5) STEP(a6) STEP(a7) STEP(a8) STEP(a9) STEP(a10) STEP(a11) \
    __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5), "+v"(a6), "+v"(a7),       \
                     "+v"(a8), "+v"(a9), "+v"(a10), "+v"(a11));                                                 \
  }                                                                                                             \
  double dt = now() - t0;                                                                                       \
  VT s = ADD(ADD(ADD(ADD(a0, a1), ADD(a2, a3)), ADD(ADD(a4, a5), ADD(a6, a7))), ADD(ADD(a8, a9), ADD(a10, a11))); \
  volatile int sink = LANE0(s);                                                                                 \
  (void)sink;                                                                                                   \
  return N * (double)iters / dt;

__attribute__((target("avx512f"))) static inline int lane0_512(__m512i v) { return _mm_cvtsi128_si32(_mm512_castsi512_si128(v)); }
__attribute__((target("avx2"))) static inline int lane0_256(__m256i v) { return _mm_cvtsi128_si32(_mm256_castsi256_si128(v)); }

__attribute__((target("avx512f,avx512vnni"))) static double zmm_dpbusd(long iters) {
  const __m512i b = _mm512_set1_epi8(3), c = _mm512_set1_epi8(5);
#define STEP(x) x = _mm512_dpbusd_epi32(x, b, c);
  CHAINS(__m512i, _mm512_set1_epi32, _mm512_add_epi32, lane0_512, STEP)
#undef STEP
}

__attribute__((target("avx2,avxvnni"))) static double ymm_dpbusd(long iters) {
  const __m256i b = _mm256_set1_epi8(3), c = _mm256_set1_epi8(5);
#define STEP(x) x = _mm256_dpbusd_avx_epi32(x, b, c);
  CHAINS(__m256i, _mm256_set1_epi32, _mm256_add_epi32, lane0_256, STEP)
#undef STEP
}

/* the AVX2 form of one int8 dot step: PMADDUBSW (u8 x s8 pairs to int16), PMADDWD (to int32), PADDD. The chain
 * feeds its own accumulator back as the signed bytes, so that nothing is loop-invariant. */
__attribute__((target("avx2"))) static double ymm_maddubs(long iters) {
  const __m256i b = _mm256_set1_epi8(3), one = _mm256_set1_epi16(1);
#define STEP(x) x = _mm256_add_epi32(x, _mm256_madd_epi16(_mm256_maddubs_epi16(b, x), one));
  CHAINS(__m256i, _mm256_set1_epi32, _mm256_add_epi32, lane0_256, STEP)
#undef STEP
}

/* whether the int8 dot products have a pipe of their own: 6 VPDPBUSD chains and 6 chains of a floating-point
 * multiply-add (VFMADD..PS, or VDPBF16PS with BF16 = 1) in one loop; returns the instructions of both kinds a second.
 * Were they on different pipes, the sum would pass VPDPBUSD's own rate (session 49, Zen 5: it does not) */
#define MIXED(NAME, TARGET, FSTEP)                                                                         \
  __attribute__((target(TARGET))) static double NAME(long iters) {                                      \
    const __m512i b = _mm512_set1_epi8(3), c = _mm512_set1_epi8(5);                                      \
    const __m512 m = _mm512_set1_ps(1.0001f);                                                             \
    const __m512i hb = _mm512_set1_epi16(0x3f80);                                                         \
    __m512i i0 = _mm512_set1_epi32(0), i1 = _mm512_set1_epi32(1), i2 = _mm512_set1_epi32(2),              \
            i3 = _mm512_set1_epi32(3), i4 = _mm512_set1_epi32(4), i5 = _mm512_set1_epi32(5);              \
    __m512 f0 = _mm512_set1_ps(0), f1 = _mm512_set1_ps(1), f2 = _mm512_set1_ps(2), f3 = _mm512_set1_ps(3), \
           f4 = _mm512_set1_ps(4), f5 = _mm512_set1_ps(5);                                                \
    (void)m;                                                                                              \
    (void)hb;                                                                                             \
    double t0 = now();                                                                                    \
    for (long i = 0; i < iters; i++) {                                                                    \
      i0 = _mm512_dpbusd_epi32(i0, b, c); FSTEP(f0) i1 = _mm512_dpbusd_epi32(i1, b, c); FSTEP(f1)         \
      i2 = _mm512_dpbusd_epi32(i2, b, c); FSTEP(f2) i3 = _mm512_dpbusd_epi32(i3, b, c); FSTEP(f3)         \
      i4 = _mm512_dpbusd_epi32(i4, b, c); FSTEP(f4) i5 = _mm512_dpbusd_epi32(i5, b, c); FSTEP(f5)         \
      __asm__ volatile("" : "+v"(i0), "+v"(i1), "+v"(i2), "+v"(i3), "+v"(i4), "+v"(i5), "+v"(f0), "+v"(f1),  \
                       "+v"(f2), "+v"(f3), "+v"(f4), "+v"(f5));                                             \
    }                                                                                                     \
    double dt = now() - t0;                                                                               \
    volatile int sink = _mm_cvtsi128_si32(_mm512_castsi512_si128(_mm512_add_epi32(i0, i5))) +            \
                        (int)_mm512_reduce_add_ps(_mm512_add_ps(f0, f5));                                 \
    (void)sink;                                                                                           \
    return 12.0 * (double)iters / dt;                                                                     \
  }
#define FMA_STEP(f) f = _mm512_fmadd_ps(f, m, m);
#define BF16_STEP(f) f = _mm512_dpbf16_ps(f, (__m512bh)hb, (__m512bh)hb);
MIXED(zmm_mixed_fma, "avx512f,avx512vnni", FMA_STEP)
MIXED(zmm_mixed_bf16, "avx512f,avx512vnni,avx512bf16", BF16_STEP)

int main(void) {
  unsigned a, b, c, d, b7 = 0, a71 = 0;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) b7 = b;
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) a71 = a;
  const int avx2 = (b7 >> 5) & 1, avx512f = (b7 >> 16) & 1;
  unsigned c7 = 0;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) c7 = c;
  const int has_vnni512 = avx512f && ((c7 >> 11) & 1), has_avxvnni = (a71 >> 4) & 1;
  long n = 300000000;
  double t0 = now();
  long x = 0;
  for (long i = 0; i < n; i++) __asm__ volatile("add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0" : "+r"(x));
  double ghz = 4.0 * n / (now() - t0) / 1e9;
  printf("clock (dependent adds): %.2f GHz\n", ghz);
  if (has_vnni512) {
    double r = zmm_dpbusd(100000000);
    printf("VPDPBUSD zmm: %.2f G/s (%.2f a cycle) -> %.0f G int8 MACs/s, %.0f GMAC/s with two planes\n", r / 1e9,
           r / 1e9 / ghz, r * 64 / 1e9, r * 32 / 1e9);
  }
  if (has_vnni512) {
    const double r = zmm_mixed_fma(100000000);
    printf("VPDPBUSD zmm + VFMADD zmm, 6 chains each: %.2f zmm instructions a cycle together\n", r / 1e9 / ghz);
    if ((a71 >> 5) & 1) { /* AVX512_BF16 */
      const double q = zmm_mixed_bf16(100000000);
      printf("VPDPBUSD zmm + VDPBF16PS zmm, 6 chains each: %.2f zmm instructions a cycle together\n", q / 1e9 / ghz);
    }
  }
  if (has_avxvnni) {
    double r = ymm_dpbusd(100000000);
    printf("VPDPBUSD ymm (AVX-VNNI): %.2f G/s (%.2f a cycle) -> %.0f G int8 MACs/s, %.0f GMAC/s with two planes\n",
           r / 1e9, r / 1e9 / ghz, r * 32 / 1e9, r * 16 / 1e9);
  }
  if (avx2) {
    double r = ymm_maddubs(100000000);
    printf("PMADDUBSW+PMADDWD+PADDD ymm: %.2f G/s (%.2f a cycle) -> %.0f G int8 MACs/s, %.0f GMAC/s with two planes\n",
           r / 1e9, r / 1e9 / ghz, r * 32 / 1e9, r * 16 / 1e9);
  }
  return 0;
}
