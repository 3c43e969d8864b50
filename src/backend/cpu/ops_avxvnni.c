/* backend/cpu/ops_avxvnni.c — the "avx2-vnni" kernel set: ops_avx2.c compiled again with its planes' integer dots
 * on AVX-VNNI (VEX VPDPBUSD), for CPUs that have AVX-VNNI but no AVX-512 (Intel Alder Lake and later client cores).
 * Everything else is the AVX2 set's code; the bits are the same (test_cpu_kernels). */
#define AVX2_VNNI 1
#include "backend/cpu/ops_avx2.c"
