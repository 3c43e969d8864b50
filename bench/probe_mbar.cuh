/* bench/probe_mbar.cuh — bulk copies into shared memory against an mbarrier, for the probes that stream by them
 * (probe_flow's v5, probe_persist's -bulk forms). Not the engine's: its GEMV ring stays on cp.async (round 25). sm_90.
 *   mbar_init      one arrival a phase
 *   mbar_expect    arrive, expecting `bytes` of copies to complete the phase (0: the phase completes at once)
 *   mbar_arrive    arrive with nothing to copy
 *   mbar_wait      spin until the phase of the given parity has completed
 *   bulk_g2s       global -> this block's shared memory, completing on the mbarrier */
#pragma once
#include <cstdint>

__device__ __forceinline__ void mbar_init(uint32_t bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_expect(uint32_t bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, unsigned parity) {
  uint32_t ok;
  do {
    asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
                 : "=r"(ok)
                 : "r"(bar), "r"(parity)
                 : "memory");
  } while (!ok);
}
__device__ __forceinline__ void bulk_g2s(uint32_t dst, const void *src, unsigned bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}
