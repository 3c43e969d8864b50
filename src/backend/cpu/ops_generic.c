/* backend/cpu/ops_generic.c — the q4x16 / int8-activation kernel set in plain C: the same
 * arithmetic as ops_avx2.c and ops_avx512.c, without intrinsics. The SIMD sets are tested against
 * it (and it against the scalar reference, within the int8 quantization error). Not selected at
 * run time: a CPU without AVX2 gets the scalar reference set. */
#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/q4x16.h"

#define KERN_NAME(x) gen_##x
#include "backend/cpu/kern_impl.h"

const struct cpu_kernels cpu_kernels_generic = {
  .name = "generic",
  .matmul_q4 = NULL,
  .matmul_bf16 = NULL,
  .matmul_f32 = NULL,
  .q4_pack = q4x16_pack,
  .q4_free_packed = q4x16_free,
  .q4_row = q4x16_row,
  .q8_quantize = q4x16_q8_quantize_generic,
  .matmul_q4q8 = q4x16_matmul_generic,
  .attn_tile = gen_attn_tile,
  .silu_mul = gen_silu_mul,
};
