/* base/cpu_features.h — what the CPU can do, read once with cpuid. */
#ifndef HEARTH_BASE_CPU_FEATURES_H
#define HEARTH_BASE_CPU_FEATURES_H
struct cpu_features {
  int avx2, fma, f16c, avx512f, avx512bw, avx512vl, avx512dq, avx512vnni, avx512bf16, avxvnni;
  int amx; /* AMX-TILE + AMX-INT8, enabled by the OS, and this process granted the tile data (Linux) */
  int amd; /* the vendor is AMD (or Hygon): kernels tuned per memory system read it (ops_avx2.c's decode prefetch) */
};
/* The features of this CPU (cached after the first call; thread-safe). HEARTH_CPU=scalar|avx2|avx2-vnni|avx512
 * in the environment caps what is reported, for tests and comparisons. Where the CPU has AMX, the first
 * call also asks Linux for the tile data state (arch_prctl ARCH_REQ_XCOMP_PERM) for the whole process:
 * without that grant the first tile instruction kills the process. */
const struct cpu_features *cpu_features_get(void);
/* Applies a HEARTH_CPU value to f: "scalar" clears every feature, "avx2" clears the AVX-512, AMX and
 * AVX-VNNI ones, "avx2-vnni" the AVX-512 and AMX ones, "avx512" AMX; NULL or any other value leaves f as it is. */
void cpu_features_cap(struct cpu_features *f, const char *cap);
#endif
