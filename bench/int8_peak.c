/* bench/int8_peak.c — this core's int8 dot-product peak: the ceiling of the CPU int4 matmuls, whose
 * 16-bit activations (two int8 planes, cpu_kernels.h) cost two int8 multiply-adds per weight.
 * Prints the clock (a chain of dependent adds, one a cycle) and the throughput of independent
 * VPDPBUSD (zmm, ymm) and of the AVX2 pair VPMADDUBSW + VPMADDWD, on one thread, and what each
 * gives as a two-plane MAC rate. Used for issue 31/35's W5 bound (bench/RESULTS.md, session 37).
 *   gcc -O2 -mavx2 -mavx512f -mavx512bw -mavx512vl -mavx512vnni -mavxvnni bench/int8_peak.c -o /tmp/int8_peak
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

#define N 12 /* independent chains: enough to cover a 5-cycle latency on 2 pipes */

__attribute__((target("avx512f,avx512vnni"))) static double zmm_dpbusd(long iters) {
  /* distinct starting values: equal chains would be merged by the compiler */
  __m512i a0 = _mm512_set1_epi32(0), a1 = _mm512_set1_epi32(1), a2 = _mm512_set1_epi32(2), a3 = _mm512_set1_epi32(3),
          a4 = _mm512_set1_epi32(4), a5 = _mm512_set1_epi32(5), a6 = _mm512_set1_epi32(6), a7 = _mm512_set1_epi32(7),
          a8 = _mm512_set1_epi32(8), a9 = _mm512_set1_epi32(9), a10 = _mm512_set1_epi32(10), a11 = _mm512_set1_epi32(11);
  const __m512i b = _mm512_set1_epi8(3), c = _mm512_set1_epi8(5);
  double t0 = now();
  for (long i = 0; i < iters; i++) {
#define D(x) x = _mm512_dpbusd_epi32(x, b, c);
    D(a0) D(a1) D(a2) D(a3) D(a4) D(a5) D(a6) D(a7) D(a8) D(a9) D(a10) D(a11)
#undef D
    __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5), "+v"(a6), "+v"(a7), "+v"(a8),
                     "+v"(a9), "+v"(a10), "+v"(a11));
  }
  double dt = now() - t0;
  __m512i s = _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3)),
                               _mm512_add_epi32(_mm512_add_epi32(a4, a5), _mm512_add_epi32(a6, a7)));
  s = _mm512_add_epi32(s, _mm512_add_epi32(_mm512_add_epi32(a8, a9), _mm512_add_epi32(a10, a11)));
  volatile int sink = _mm512_reduce_add_epi32(s);
  (void)sink;
  return N * (double)iters / dt;
}

__attribute__((target("avx2,avxvnni"))) static double ymm_dpbusd(long iters) {
  __m256i a0 = _mm256_set1_epi32(0), a1 = _mm256_set1_epi32(1), a2 = _mm256_set1_epi32(2), a3 = _mm256_set1_epi32(3),
          a4 = _mm256_set1_epi32(4), a5 = _mm256_set1_epi32(5), a6 = _mm256_set1_epi32(6), a7 = _mm256_set1_epi32(7),
          a8 = _mm256_set1_epi32(8), a9 = _mm256_set1_epi32(9), a10 = _mm256_set1_epi32(10), a11 = _mm256_set1_epi32(11);
  const __m256i b = _mm256_set1_epi8(3), c = _mm256_set1_epi8(5);
  double t0 = now();
  for (long i = 0; i < iters; i++) {
#define D(x) x = _mm256_dpbusd_avx_epi32(x, b, c);
    D(a0) D(a1) D(a2) D(a3) D(a4) D(a5) D(a6) D(a7) D(a8) D(a9) D(a10) D(a11)
#undef D
    __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5), "+v"(a6), "+v"(a7), "+v"(a8),
                     "+v"(a9), "+v"(a10), "+v"(a11));
  }
  double dt = now() - t0;
  __m256i s = _mm256_add_epi32(_mm256_add_epi32(_mm256_add_epi32(a0, a1), _mm256_add_epi32(a2, a3)),
                               _mm256_add_epi32(_mm256_add_epi32(a4, a5), _mm256_add_epi32(a6, a7)));
  s = _mm256_add_epi32(s, _mm256_add_epi32(_mm256_add_epi32(a8, a9), _mm256_add_epi32(a10, a11)));
  volatile int sink = _mm256_extract_epi32(s, 0);
  (void)sink;
  return N * (double)iters / dt;
}

/* the AVX2 form of one int8 dot step: PMADDUBSW (u8 x s8 pairs to int16), PMADDWD (to int32), PADDD. The chain
 * feeds its own accumulator back as the signed bytes, so that nothing is loop-invariant; 12 chains cover the
 * ~7-cycle latency of the three. */
__attribute__((target("avx2"))) static double ymm_maddubs(long iters) {
  __m256i a0 = _mm256_set1_epi32(0), a1 = _mm256_set1_epi32(1), a2 = _mm256_set1_epi32(2), a3 = _mm256_set1_epi32(3),
          a4 = _mm256_set1_epi32(4), a5 = _mm256_set1_epi32(5), a6 = _mm256_set1_epi32(6), a7 = _mm256_set1_epi32(7),
          a8 = _mm256_set1_epi32(8), a9 = _mm256_set1_epi32(9), a10 = _mm256_set1_epi32(10), a11 = _mm256_set1_epi32(11);
  const __m256i b = _mm256_set1_epi8(3), one = _mm256_set1_epi16(1);
  double t0 = now();
  for (long i = 0; i < iters; i++) {
#define D(x) x = _mm256_add_epi32(x, _mm256_madd_epi16(_mm256_maddubs_epi16(b, x), one));
    D(a0) D(a1) D(a2) D(a3) D(a4) D(a5) D(a6) D(a7) D(a8) D(a9) D(a10) D(a11)
#undef D
    __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5), "+v"(a6), "+v"(a7), "+v"(a8),
                     "+v"(a9), "+v"(a10), "+v"(a11));
  }
  double dt = now() - t0;
  __m256i s = _mm256_add_epi32(_mm256_add_epi32(_mm256_add_epi32(a0, a1), _mm256_add_epi32(a2, a3)),
                               _mm256_add_epi32(_mm256_add_epi32(a4, a5), _mm256_add_epi32(a6, a7)));
  s = _mm256_add_epi32(s, _mm256_add_epi32(_mm256_add_epi32(a8, a9), _mm256_add_epi32(a10, a11)));
  volatile int sink = _mm256_extract_epi32(s, 0);
  (void)sink;
  return N * (double)iters / dt;
}

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
