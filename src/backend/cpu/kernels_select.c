/* backend/cpu/kernels_select.c — run-time choice of the CPU kernel set. SIMD sets register here
 * as they land (ops_avx2.c, ops_avx512.c); until then the scalar set serves every CPU. */
#include "backend/cpu/cpu_kernels.h"
#include "base/cpu_features.h"

const struct cpu_kernels *cpu_kernels_select(void) {
  (void)cpu_features_get();
  return &cpu_kernels_ref;
}
