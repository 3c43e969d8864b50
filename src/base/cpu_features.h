/* base/cpu_features.h — what the CPU can do, read once with cpuid. */
#ifndef HEARTH_BASE_CPU_FEATURES_H
#define HEARTH_BASE_CPU_FEATURES_H
struct cpu_features {
  int avx2, fma, f16c, avx512f, avx512bw, avx512vl, avx512dq, avx512vnni, avx512bf16, avxvnni;
};
/* The features of this CPU (cached after the first call; thread-safe). HEARTH_CPU=scalar|avx2
 * in the environment caps what is reported, for tests and comparisons. */
const struct cpu_features *cpu_features_get(void);
#endif
