/* backend/cpu/kernels_select.c — run-time choice of the CPU kernel set, once per backend init:
 * AVX-512 with VNNI and AMX > AVX-512 with VNNI (F/BW/VL/VNNI + F16C/FMA) > AVX2 (+FMA, F16C) with AVX-VNNI >
 * AVX2 > the scalar reference. HEARTH_CPU=scalar|avx2|avx2-vnni|avx512 caps the choice (base/cpu_features.c). */
#include "backend/cpu/cpu_kernels.h"
#include "base/cpu_features.h"

const struct cpu_kernels *cpu_kernels_for(const struct cpu_features *f) {
#if defined(__x86_64__)
  if (f->avx512f && f->avx512bw && f->avx512vl && f->avx512vnni && f->fma && f->f16c)
    return f->amx ? &cpu_kernels_amx : &cpu_kernels_avx512;
  if (f->avx2 && f->fma && f->f16c) return f->avxvnni ? &cpu_kernels_avxvnni : &cpu_kernels_avx2;
#else
  (void)f;
#endif
  return &cpu_kernels_ref;
}

const struct cpu_kernels *cpu_kernels_select(void) { return cpu_kernels_for(cpu_features_get()); }
