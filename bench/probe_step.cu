/* bench/probe_step.cu — what one step of the decode GEMV's loop costs on the SM, with its data already in shared
 * memory (session 16, bench/NOTES.md "Round 20", next-session item 1). Round 20's trace builds put gate/up's loop
 * skeleton (GEMV_ABLATE=8) at ~950 cycles a step in the decode chain; this kernel runs the same step shape alone:
 * 264 blocks of 8 warps (the 3B gate/up grid), `act` warps per block stepping (gate/up: 5.2 on average), each step
 * two 128-column groups of a 16-row tile: the weight and scale LDS of the slot, per group four x LDS and one
 * correction LDS, 32 LOP3 + 8 SHF of int4 -> f16 conversion, 8 mma.sync m16n8k16 in two chains of 4, the scale FMAs.
 * Parts are taken out by the variant bits (1 conversion, 2 mma, 4 x reads, 8 weight reads); a part taken out is
 * replaced by a register copy so that the rest keeps its inputs. Bit 16 wraps the step in the engine's ring protocol
 * (wait for the slot, refill it two steps ahead by cp.async, commit) with zero fills, so no bytes move; bit 32 does
 * the same streaming the weights from device memory (each warp its own run of 64 × 2 KB); bit 64 makes the ring 4
 * slots deep instead of 2; bit 128 (with 32) fills each slot by two bulk copies (cp.async.bulk: the 2 KB of weights
 * and the 64 bytes of scales) issued by lane 0 on an mbarrier per slot, which every lane waits on by try_wait, in
 * place of five 16-byte cp.async per lane, a commit and a wait_group (round 24); bit 256 (with 32) gives the cp.async
 * copies the engine's evict_first L2 policy (round 24). Printed: cycles per step per warp (clock64 over NS steps, mean
 * over the stepping warps) and µs per launch (events over many launches).
 *   nvcc -O3 -arch=sm_90 -o probe_step bench/probe_step.cu && ./probe_step */
#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>
#include <cuda_fp16.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); return 1; } } while (0)

__device__ __forceinline__ void mma16816(float *c, const uint32_t *a, const uint32_t *b) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
/* int4 pairs of one word -> four f16x2 (the +8 / 1024 trick, one LOP3 each with the mask in a register) */
__device__ __forceinline__ void q4w(uint32_t w, uint32_t m, uint32_t *p) {
  const uint32_t h = w >> 8;
  asm("lop3.b32 %0, %1, %2, %3, 0xea;" : "=r"(p[0]) : "r"(w), "r"(0x000f000fu), "r"(m));
  asm("lop3.b32 %0, %1, %2, %3, 0xea;" : "=r"(p[1]) : "r"(w), "r"(0x00f000f0u), "r"(m));
  asm("lop3.b32 %0, %1, %2, %3, 0xea;" : "=r"(p[2]) : "r"(h), "r"(0x000f000fu), "r"(m));
  asm("lop3.b32 %0, %1, %2, %3, 0xea;" : "=r"(p[3]) : "r"(h), "r"(0x00f000f0u), "r"(m));
}

/* the ring's copies: 16 bytes per lane into shared memory, src_bytes of them read (0: a zero fill, no read) */
__device__ __forceinline__ void cpa(uint32_t dst, const void *src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
/* the same with the engine's L2 policy on weight copies (evict_first, fraction 1: ptx.cuh l2_evict_first) */
__device__ __forceinline__ void cpa_h(uint32_t dst, const void *src, int src_bytes, uint64_t pol) {
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;" ::"r"(dst), "l"(src), "r"(src_bytes),
               "l"(pol) : "memory");
}

/* the bulk ring's slot barrier: armed by lane 0 for `bytes`, completed by the copies' transaction count */
__device__ __forceinline__ void mb_init(uint32_t bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mb_expect(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void bulk_g2s(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst), "l"(src),
               "r"(bytes), "r"(bar) : "memory");
}
__device__ __forceinline__ void mb_wait(uint32_t bar, uint32_t parity) {
  asm volatile("{\n .reg .pred p;\n W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n @!p bra W;\n}" ::"r"(bar),
               "r"(parity) : "memory");
}

template <int V>
__global__ __launch_bounds__(256, 2) void step_probe(int act, int NS, float *out, unsigned long long *cyc, const uint8_t *wg) {
  extern __shared__ uint4 sm[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, tig = lane % 4, gid = lane / 4;
  /* per warp: two 2,112-byte ring slots; x (4 KB) and corrections (1 KB) shared by the block */
  constexpr int R = (V & 64) ? 4 : 2; /* ring slots per warp (bit 64: 4) */
  uint8_t *ring = (uint8_t *)sm + 5120 + warp * R * 2112;
  for (int i = threadIdx.x; i < (5120 + 8 * R * 2112) / 16; i += 256)
    sm[i] = make_uint4(0x3c003c01u * (i + 1), 0x3c003c00u ^ i, 0x2c002c00u + i, 0x3c013c00u);
  constexpr bool BULK = (V & 128) != 0;
  const uint32_t bars = (uint32_t)__cvta_generic_to_shared(sm) + 5120 + 8 * R * 2112 + warp * R * 8;
  if (BULK && lane == 0) {
    for (int i = 0; i < R; i++) mb_init(bars + 8 * i);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (warp >= act) return;
  const __half *x = (const __half *)sm;
  const float *corr = (const float *)((uint8_t *)sm + 4096);
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  const uint32_t mk = 0x64006400u;
  uint4 Wk0 = make_uint4(lane, 1, 2, 3), Wk8 = Wk0;
  /* bits 16/32: the engine's ring protocol around the step (wait for the slot, read it, refill it two steps ahead:
   * four 16-byte copies per lane and the scales by lanes 0-3, one commit), with zero fills (16) or with the weights
   * streamed from device memory (32: each warp its own NS * 2 KB run) */
  const uint32_t rs0 = (uint32_t)__cvta_generic_to_shared(ring), rs = rs0 + lane * 16;
  const uint8_t *wp0 = wg + (size_t)(blockIdx.x * 8 + warp) * (size_t)NS * 2048, *wp = wp0 + lane * 16;
  const int nb = (V & 32) ? 16 : 0;
  uint64_t pol = 0;
  if (V & 256) asm volatile("createpolicy.fractional.L2::evict_first.L2::evict_unchanged.b64 %0, %1;" : "=l"(pol) : "f"(1.0f));
  auto cp = [&](uint32_t d, const void *src) { /* one lane's 16-byte copy, hinted with bit 256 */
    if (V & 256) cpa_h(d, src, nb, pol);
    else cpa(d, src, nb);
  };
  auto refill = [&](int st) {
    if (BULK) { /* the lanes' reads of this slot are done (they were issued before, their values are in registers) */
      __syncwarp();
      if (lane == 0) {
        const uint32_t bar = bars + 8 * (st % R), d = rs0 + (st % R) * 2112;
        mb_expect(bar, 2048 + 64);
        bulk_g2s(d, wp0 + (size_t)st * 2048, 2048, bar);
        bulk_g2s(d + 2048, wg, 64, bar);
      }
      return;
    }
    const uint32_t d = rs + (st % R) * 2112;
    const uint8_t *src = wp + (size_t)st * 2048;
    cp(d, src); cp(d + 512, src + 512); cp(d + 1024, src + 1024); cp(d + 1536, src + 1536);
    if (lane < 4) cp(d + 2048, wg + lane * 16); /* the scales (lanes 0-3) */
    asm volatile("cp.async.commit_group;" ::: "memory");
  };
  if (V & 48)
    for (int i = 0; i < R; i++) refill(i);
  const unsigned long long t0 = clock64();
  for (int s = 0; s < NS; s++) {
    if (BULK) {
      mb_wait(bars + 8 * (s % R), (uint32_t)(s / R) & 1u);
    } else if (V & 48) {
      if (R == 4) asm volatile("cp.async.wait_group 3;" ::: "memory");
      else asm volatile("cp.async.wait_group 1;" ::: "memory");
    }
    const uint8_t *sb = ring + (s % R) * 2112;
    uint4 W0[2], W8[2];
    __half S0[2], S8[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
      W0[h] = (V & 8) ? Wk0 : *(const uint4 *)(sb + h * 1024 + lane * 16);
      W8[h] = (V & 8) ? Wk8 : *(const uint4 *)(sb + h * 1024 + 512 + lane * 16);
      S0[h] = *(const __half *)(sb + 2048 + h * 16 + gid * 2);
      S8[h] = *(const __half *)(sb + 2048 + 32 + h * 16 + gid * 2);
    }
    if (BULK) {
      if (s + R < NS) refill(s + R);
    } else if (V & 48) {
      if (s + R < NS) refill(s + R);
      else asm volatile("cp.async.commit_group;" ::: "memory");
    }
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int g = (2 * s + h) & 15;
      uint32_t p0[4][4], p8[4][4];
      const uint32_t a0[4] = {W0[h].x, W0[h].y, W0[h].z, W0[h].w}, a8[4] = {W8[h].x, W8[h].y, W8[h].z, W8[h].w};
#pragma unroll
      for (int q = 0; q < 4; q++) {
        if (V & 1) {
#pragma unroll
          for (int i = 0; i < 4; i++) { p0[q][i] = a0[q]; p8[q][i] = a8[q]; }
        } else {
          q4w(a0[q], mk, p0[q]);
          q4w(a8[q], mk, p8[q]);
        }
      }
      uint4 xv[4];
      const uint4 *xp = (const uint4 *)(x + tig * 32 + g * 128);
#pragma unroll
      for (int c = 0; c < 4; c++) xv[c] = (V & 4) ? make_uint4(lane, c, h, s) : xp[c ^ ((tig >> 1) & 3)];
      float c4[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
      const float4 cr = *(const float4 *)&corr[g * 16 + tig * 4];
      c4[1][0] = cr.x; c4[1][1] = cr.y; c4[1][2] = cr.z; c4[1][3] = cr.w;
#pragma unroll
      for (int q = 0; q < 4; q++)
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
          const uint32_t af[4] = {p0[q][2 * hh], p8[q][2 * hh], p0[q][2 * hh + 1], p8[q][2 * hh + 1]};
          const uint4 xc = xv[2 * hh + (q >> 1)];
          const uint32_t bf[2] = {q & 1 ? xc.z : xc.x, q & 1 ? xc.w : xc.y};
          if (V & 2) {
            c4[hh][0] += __uint_as_float((af[0] ^ bf[0]) & 0x3c7fffffu);
            c4[hh][1] += __uint_as_float((af[1] ^ bf[1]) & 0x3c7fffffu);
            c4[hh][2] += __uint_as_float(af[2] & 0x3c7fffffu);
            c4[hh][3] += __uint_as_float(af[3] & 0x3c7fffffu);
          } else {
            mma16816(c4[hh], af, bf);
          }
        }
      const float sc0 = __half2float(S0[h]), sc8 = __half2float(S8[h]);
      acc[0] = fmaf(sc0, c4[0][0] + c4[1][0], acc[0]);
      acc[1] = fmaf(sc0, c4[0][1] + c4[1][1], acc[1]);
      acc[2] = fmaf(sc8, c4[0][2] + c4[1][2], acc[2]);
      acc[3] = fmaf(sc8, c4[0][3] + c4[1][3], acc[3]);
    }
    Wk0.x ^= (uint32_t)acc[0]; /* keeps the weight stand-ins step-dependent */
    Wk8.y ^= (uint32_t)acc[2];
  }
  const unsigned long long t1 = clock64();
  out[(blockIdx.x * 8 + warp) * 32 + lane] = acc[0] + acc[1] + acc[2] + acc[3];
  if (lane == 0) atomicAdd(cyc, t1 - t0);
}

template <int V>
static int run(const char *name, int act, int NS, float *out, unsigned long long *cyc, const uint8_t *wg) {
  const int smem = 5120 + 8 * ((V & 64) ? 4 : 2) * (2112 + 8);
  CK(cudaFuncSetAttribute(step_probe<V>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  step_probe<V><<<264, 256, smem>>>(act, NS, out, cyc, wg);
  CK(cudaDeviceSynchronize());
  CK(cudaMemset(cyc, 0, 8));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  const int reps = 20;
  CK(cudaEventRecord(e0));
  for (int r = 0; r < reps; r++) step_probe<V><<<264, 256, smem>>>(act, NS, out, cyc, wg);
  CK(cudaEventRecord(e1));
  CK(cudaEventSynchronize(e1));
  float ms = 0.0f;
  CK(cudaEventElapsedTime(&ms, e0, e1));
  unsigned long long c = 0;
  CK(cudaMemcpy(&c, cyc, 8, cudaMemcpyDeviceToHost));
  printf("| %s | %d | %.0f | %.2f |\n", name, act, (double)c / ((double)reps * 264 * act * NS), 1000.0 * ms / reps);
  CK(cudaGetLastError());
  return 0;
}

int main() {
  float *out;
  unsigned long long *cyc;
  uint8_t *wg;
  const int NS = 64;
  const size_t wbytes = (size_t)264 * 8 * NS * 2048; /* 277 MB: every warp its own run */
  CK(cudaMalloc(&out, 264 * 256 * sizeof(float)));
  CK(cudaMalloc(&cyc, 8));
  CK(cudaMalloc(&wg, wbytes));
  CK(cudaMemset(wg, 0x35, wbytes));
  printf("264 blocks x 8 warps, %d steps per stepping warp; cycles per step per warp (SM clock), µs per launch\n", NS);
  printf("| variant | warps stepping per block | cycles / step | µs / launch |\n|---|---|---|---|\n");
  int bad = 0;
  for (int act : {5, 6, 8}) {
    bad |= run<0>("full step", act, NS, out, cyc, wg);
    bad |= run<1>("no conversion", act, NS, out, cyc, wg);
    bad |= run<2>("no mma (XOR/FADD stand-ins)", act, NS, out, cyc, wg);
    bad |= run<4>("no x reads", act, NS, out, cyc, wg);
    bad |= run<8>("no weight reads", act, NS, out, cyc, wg);
    bad |= run<1 | 2 | 4>("skeleton: no conversion, mma, x", act, NS, out, cyc, wg);
    bad |= run<1 | 2 | 4 | 8>("skeleton, no weight reads", act, NS, out, cyc, wg);
    bad |= run<16>("full step + ring protocol, zero fills", act, NS, out, cyc, wg);
    bad |= run<1 | 2 | 4 | 16>("skeleton + ring protocol, zero fills", act, NS, out, cyc, wg);
    bad |= run<32>("full step + ring streaming the weights", act, NS, out, cyc, wg);
    bad |= run<1 | 2 | 4 | 32>("skeleton + ring streaming the weights", act, NS, out, cyc, wg);
    bad |= run<32 | 64>("full step + ring of 4 streaming the weights", act, NS, out, cyc, wg);
    bad |= run<16 | 64>("full step + ring of 4, zero fills", act, NS, out, cyc, wg);
    bad |= run<32 | 128>("full step + bulk-copy ring streaming the weights", act, NS, out, cyc, wg);
    bad |= run<32 | 64 | 128>("full step + bulk-copy ring of 4 streaming", act, NS, out, cyc, wg);
    bad |= run<1 | 2 | 4 | 32 | 128>("skeleton + bulk-copy ring streaming", act, NS, out, cyc, wg);
    bad |= run<32 | 256>("full step + ring streaming, evict_first hint", act, NS, out, cyc, wg);
    bad |= run<32 | 64 | 256>("full step + ring of 4 streaming, evict_first hint", act, NS, out, cyc, wg);
  }
  bad |= run<0>("full step", 1, NS, out, cyc, wg);
  bad |= run<1 | 2 | 4>("skeleton", 1, NS, out, cyc, wg);
  bad |= run<16>("full step + ring protocol, zero fills", 1, NS, out, cyc, wg);
  return bad;
}
