/* bench/probe_chain.cu — what a read of the previous kernel's output costs in a PDL chain while weight bytes are in
 * flight, and how fast a GEMV-like weight stream runs by mechanism and layout (session 16, bench/NOTES.md "Round 20").
 *
 * A chain of L links, captured into a graph with programmatic edges and replayed. Each link is one launch of `link`
 * (264 blocks of 256 threads, the 3B gate/up GEMV's grid): before griddepcontrol.wait every warp prefetches P bytes
 * of fresh weight bytes (DRAM: every link reads its own region, 3.3 GB in all); after the wait every thread reads 16
 * bytes of x_in (4 KB written by the link before: an L2 hit), the block syncs ("x"), the prefetch is waited for
 * ("landed"), then each warp streams S more bytes in 2 KB steps through a ring of 2 or 4 slots, and each block writes
 * 16 bytes of x_out. Per variant (the table `vars` in main):
 *   mech   0 cp.async 16 B per lane; 1 bulk copies (cp.async.bulk) of 1 KB issued by lane 0 on an mbarrier;
 *          2 one bulk copy of P bytes; 3 an L2 prefetch only (cp.async.bulk.prefetch.L2); 4 ld.global.nc into registers
 *   mode   0 prefetch before the wait; 1 after the x read; 2 before the wait on blocks of even SMs only
 *   layout the stream's bytes: 0 each warp's contiguous; 1 step-major (a step of all warps contiguous); 2 two regions,
 *          1 KB of each per step, each warp's contiguous (gate/up's lo and hi 8-row blocks today); 3 the same step-major
 * Stamps (%globaltimer) per block: entry, release, x in, prefetch landed, end, SM. Printed in µs: the link's period
 * (graph time / L), the boundary (a link's first release after the previous link's last end), x (x in - release,
 * mean over blocks; then split by SM parity), landed (prefetch landed - release), end (last end - first release), and
 * the bytes moved per link over the period. The weight bytes are a constant fill: read their bandwidth as relative.
 *   nvcc -O3 -arch=sm_90 -o probe_chain bench/probe_chain.cu && ./probe_chain */
#include <cstdio>
#include <cstdint>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); return 1; } } while (0)

__device__ __forceinline__ uint64_t gtime() { uint64_t t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t; }
__device__ __forceinline__ unsigned smid() { unsigned s; asm volatile("mov.u32 %0, %%smid;" : "=r"(s)); return s; }
__device__ __forceinline__ void cpa16(uint32_t s, const void *g) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(g));
}
__device__ __forceinline__ void bulk16(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst), "l"(src),
               "r"(bytes), "r"(bar) : "memory");
}
__device__ __forceinline__ void bulk_l2(const void *src, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_init(uint32_t bar) { asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar)); }
__device__ __forceinline__ void mbar_expect(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t phase) {
  asm volatile("{\n .reg .pred p;\n W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n @!p bra W;\n}" ::"r"(bar), "r"(phase) : "memory");
}
__device__ __forceinline__ void cpa_commit() { asm volatile("cp.async.commit_group;"); }
template <int N> __device__ __forceinline__ void cpa_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

struct link_args {
  const uint8_t *w;   /* this link's weight region */
  const uint4 *xin;   /* 4 KB */
  uint4 *xout;        /* G * 16 bytes */
  uint64_t *st;       /* [G][6] stamps of this link (the 6th: the block's SM) */
  int P, mode, S;     /* prefetch bytes per warp, 0 before wait / 1 after x / 2 even SMs only, streamed bytes per warp */
  int mech;           /* how the prefetch and the stream move bytes: 0 cp.async 16 B per lane, 1 bulk copies of 1 KB (lane 0,
                         an mbarrier per warp), 2 one bulk copy of P bytes, 3 L2 prefetch only (cp.async.bulk.prefetch.L2),
                         4 ld.global.nc 16 B per lane into registers (P <= 4 KB) */
  int ring;           /* stream: slots of 2 KB per warp (2 or 4) */
  int layout;         /* stream bytes: 0 each warp's S bytes contiguous (warp-major), 1 step-major (step s of all warps
                         contiguous), 2 two regions of S/2 per warp, 1 KB of each per step, warp-major (gate/up's blocked
                         layout: a 16-row tile's lo and hi 8-row blocks), 3 the same two regions step-major */
};

__global__ __launch_bounds__(256, 4) void link(const __grid_constant__ link_args a) {
  extern __shared__ uint4 sm[];
  __shared__ uint32_t sink;
  __shared__ __align__(8) uint64_t bars[8][5]; /* per warp: the prefetch's barrier, then one per stream slot */
  const uint64_t t_entry = gtime();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const size_t gw = (size_t)blockIdx.x * 8 + warp, nwt = (size_t)gridDim.x * 8;
  const uint8_t *wp = a.layout ? a.w + gw * (size_t)a.P : a.w + gw * (size_t)(a.P + a.S);
  const uint8_t *sbase = a.w + nwt * (size_t)a.P; /* layouts 1-3: the stream region after every warp's prefetch */
  const uint32_t pbase = (uint32_t)__cvta_generic_to_shared(sm) + warp * 4096u; /* 4 KB per warp, wrapped: timing only */
  const uint32_t bar0 = (uint32_t)__cvta_generic_to_shared(&bars[warp][0]);
  if (lane < 5) mbar_init(bar0 + 8 * lane);
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  __syncwarp();
  const bool pf = a.mode == 0 || (a.mode == 2 && !(smid() & 1));
  uint4 rv[8]; /* mech 4: P <= 4 KB */
  auto prefetch = [&]() {
    if (a.mech == 0) {
      for (int o = 0; o < a.P; o += 512) cpa16(pbase + (o & 4095) + lane * 16, wp + o + lane * 16);
      cpa_commit();
    } else if (a.mech == 1 || a.mech == 2) {
      if (lane == 0) {
        mbar_expect(bar0, (uint32_t)a.P);
        if (a.mech == 1)
          for (int o = 0; o < a.P; o += 1024) bulk16(pbase + (o & 3072), wp + o, 1024, bar0);
        else
          bulk16((uint32_t)__cvta_generic_to_shared(sm) + 8 * 4096 + warp * 8192, wp, (uint32_t)a.P, bar0); /* the stream area */
      }
    } else if (a.mech == 3) {
      if (lane == 0) bulk_l2(wp, (uint32_t)a.P);
    } else {
#pragma unroll
      for (int i = 0; i < 8; i++)
        if (i * 512 < a.P) rv[i] = __ldg((const uint4 *)(wp + i * 512 + lane * 16));
    }
  };
  auto landed = [&]() {
    if (a.mech == 0) cpa_wait<0>();
    else if ((a.mech == 1 || a.mech == 2) && a.P) mbar_wait(bar0, 0);
    else if (a.mech == 4) {
      uint32_t acc = 0;
#pragma unroll
      for (int i = 0; i < 8; i++)
        if (i * 512 < a.P) acc ^= rv[i].x + rv[i].y + rv[i].z + rv[i].w;
      if (acc == 0x12345678u) sink = acc;
    }
  };
  if (pf) prefetch();
  if (threadIdx.x == 0) sink = 0;
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;");
  const uint64_t t_rel = gtime();
  const uint4 v = a.xin[threadIdx.x];
  atomicXor(&sink, v.x ^ v.y ^ v.z ^ v.w);
  __syncthreads();
  const uint64_t t_x = gtime();
  if (a.mode == 1) prefetch();
  if (a.mode != 2 || pf) landed();
  __syncthreads();
  const uint64_t t_land = gtime();
  /* the stream: S bytes per warp in 2 KB steps through a ring of a.ring slots (above the prefetch area) */
  if (a.S) {
    const uint8_t *sp = wp + a.P;
    /* chunk c (512 bytes) of step s */
    auto src = [&](int st, int c) -> const uint8_t * {
      switch (a.layout) {
      case 1: return sbase + ((size_t)st * nwt + gw) * 2048 + c * 512;
      case 2: return sbase + (c >> 1) * nwt * (size_t)(a.S / 2) + gw * (size_t)(a.S / 2) + (size_t)st * 1024 + (c & 1) * 512;
      case 3: return sbase + (c >> 1) * nwt * (size_t)(a.S / 2) + ((size_t)st * nwt + gw) * 1024 + (c & 1) * 512;
      default: return sp + (size_t)st * 2048 + c * 512;
      }
    };
    const uint32_t rb = (uint32_t)__cvta_generic_to_shared(sm) + 8u * 4096u + warp * 8192u;
    const uint8_t *rg = (const uint8_t *)sm + 8 * 4096 + warp * 8192;
    uint32_t acc = 0;
    const int steps = a.S / 2048, R = a.ring;
    auto issue = [&](int s) {
      const uint32_t dst = rb + (s % R) * 2048;
      if (a.mech == 0) {
#pragma unroll
        for (int c = 0; c < 4; c++) cpa16(dst + c * 512 + lane * 16, src(s, c) + lane * 16);
        cpa_commit();
      } else if (lane == 0) {
        const uint32_t b = bar0 + 8 + 8 * (s % R);
        mbar_expect(b, 2048);
        bulk16(dst, src(s, 0), 1024, b);
        bulk16(dst + 1024, src(s, 2), 1024, b);
      }
    };
    for (int s = 0; s < R; s++) {
      if (s < steps) issue(s);
      else if (a.mech == 0) cpa_commit();
    }
    for (int s = 0; s < steps; s++) {
      if (a.mech == 0) {
        if (R == 4) cpa_wait<3>(); else cpa_wait<1>();
      } else {
        mbar_wait(bar0 + 8 + 8 * (s % R), (uint32_t)((s / R) & 1));
      }
      const uint4 q0 = *(const uint4 *)(rg + (s % R) * 2048 + lane * 16);
      const uint4 q1 = *(const uint4 *)(rg + (s % R) * 2048 + 1024 + lane * 16);
      acc ^= q0.x + q0.y + q0.z + q0.w + q1.x + q1.y + q1.z + q1.w;
      __syncwarp();
      if (a.mech != 0) asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      if (s + R < steps) issue(s + R);
      else if (a.mech == 0) cpa_commit();
    }
    if (acc == 0x12345678u) sink = acc;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    a.xout[blockIdx.x] = make_uint4(sink, (uint32_t)t_x, blockIdx.x, 1u);
    uint64_t *s = a.st + (size_t)blockIdx.x * 6;
    s[0] = t_entry; s[1] = t_rel; s[2] = t_x; s[3] = t_land; s[4] = gtime(); s[5] = smid();
  }
}

int main() {
  const int L = 48, G = 264, reps = 10;
  int n_sm = 0;
  CK(cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, 0));
  const size_t region = (size_t)G * 8 * 32768; /* per link: P + S <= 32 KB per warp */
  uint8_t *w;
  CK(cudaMalloc(&w, region * L));
  CK(cudaMemset(w, 1, region * L));
  uint4 *x;
  CK(cudaMalloc(&x, (size_t)(L + 1) * 4096));
  CK(cudaMemset(x, 0, (size_t)(L + 1) * 4096));
  uint64_t *st;
  CK(cudaMalloc(&st, (size_t)L * G * 6 * 8));
  /* 32 KB (the prefetch area: six blocks fit an SM, so the next link's two enter early), + 64 KB where a variant
     streams or copies its prefetch in one piece (the stream area, 8 KB per warp: two blocks per SM) */
  CK(cudaFuncSetAttribute(link, cudaFuncAttributeMaxDynamicSharedMemorySize, 8 * 4096 + 8 * 8192));
  cudaStream_t str;
  CK(cudaStreamCreateWithFlags(&str, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  struct var { const char *name; int P, mode, S, mech, ring, layout; };
  const var vars[] = {
      /* name, P (prefetch bytes per warp), mode, S (streamed bytes per warp), mech, ring, layout */
      {"no prefetch", 0, 0, 0, 0, 2, 0},
      {"cp.async 2 KB/warp before wait", 2048, 0, 0, 0, 2, 0}, {"cp.async 4 KB", 4096, 0, 0, 0, 2, 0},
      {"cp.async 8 KB", 8192, 0, 0, 0, 2, 0}, {"cp.async 4 KB after x", 4096, 1, 0, 0, 2, 0},
      {"bulk 1 KB pieces 2 KB/warp", 2048, 0, 0, 1, 2, 0}, {"bulk 1 KB pieces 4 KB", 4096, 0, 0, 1, 2, 0},
      {"bulk 1 KB pieces 8 KB", 8192, 0, 0, 1, 2, 0}, {"bulk one copy 4 KB", 4096, 0, 0, 2, 2, 0},
      {"bulk one copy 8 KB", 8192, 0, 0, 2, 2, 0}, {"L2 prefetch 4 KB", 4096, 0, 0, 3, 2, 0},
      {"L2 prefetch 8 KB", 8192, 0, 0, 3, 2, 0}, {"ld.global.nc 2 KB", 2048, 0, 0, 4, 2, 0},
      {"ld.global.nc 4 KB", 4096, 0, 0, 4, 2, 0}, {"cp.async 8 KB, even SMs", 8192, 2, 0, 0, 2, 0},
      {"bulk 8 KB, even SMs", 8192, 2, 0, 1, 2, 0},
      {"stream 16 KB cp.async ring 2, warp-major", 0, 0, 16384, 0, 2, 0}, {"  step-major", 0, 0, 16384, 0, 2, 1},
      {"  two regions warp-major (gate/up today)", 0, 0, 16384, 0, 2, 2}, {"  two regions step-major", 0, 0, 16384, 0, 2, 3},
      {"stream 16 KB cp.async ring 4, warp-major", 0, 0, 16384, 0, 4, 0}, {"  step-major", 0, 0, 16384, 0, 4, 1},
      {"  two regions warp-major", 0, 0, 16384, 0, 4, 2}, {"  two regions step-major", 0, 0, 16384, 0, 4, 3},
      {"stream 16 KB bulk ring 2, warp-major", 0, 0, 16384, 1, 2, 0}, {"  step-major", 0, 0, 16384, 1, 2, 1},
      {"  two regions step-major", 0, 0, 16384, 1, 2, 3}, {"stream 16 KB bulk ring 4, warp-major", 0, 0, 16384, 1, 4, 0},
      {"  step-major", 0, 0, 16384, 1, 4, 1},
      {"cp.async 4 KB + stream 12 KB ring 2, two regions warp-major", 4096, 0, 12288, 0, 2, 2},
      {"  two regions step-major", 4096, 0, 12288, 0, 2, 3},
      {"bulk 4 KB + stream 12 KB bulk ring 2, warp-major", 4096, 0, 12288, 1, 2, 0},
      {"cp.async 8 KB + stream 24 KB ring 4, warp-major", 8192, 0, 24576, 0, 4, 0}, {"  step-major", 8192, 0, 24576, 0, 4, 1},
      {"bulk 8 KB + stream 24 KB bulk ring 4, warp-major", 8192, 0, 24576, 1, 4, 0},
  };


  printf("SMs %d, grid %d x 256, %d links per graph, %d replays; µs (x/landed: mean over blocks after the block's release)\n", n_sm, G, L, reps);
  printf("| variant | period | boundary | x | x even SM | x odd SM | landed | end | GB/s |\n|---|---|---|---|---|---|---|---|---|\n");
  std::vector<uint64_t> h((size_t)L * G * 6);
  for (const var &v : vars) {
    cudaGraph_t g;
    CK(cudaStreamBeginCapture(str, cudaStreamCaptureModeGlobal));
    for (int l = 0; l < L; l++) {
      link_args a;
      a.w = w + region * l;
      a.xin = x + (size_t)l * 256;
      a.xout = x + (size_t)(l + 1) * 256;
      a.st = st + (size_t)l * G * 6;
      a.P = v.P; a.mode = v.mode; a.S = v.S; a.mech = v.mech; a.ring = v.ring; a.layout = v.layout;
      cudaLaunchConfig_t cfg = {};
      cfg.gridDim = dim3(G); cfg.blockDim = dim3(256); cfg.stream = str;
      cfg.dynamicSmemBytes = 8 * 4096 + (v.S || v.mech == 2 ? 8 * 8192 : 0);
      cudaLaunchAttribute at[1];
      at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      at[0].val.programmaticStreamSerializationAllowed = 1;
      cfg.attrs = at; cfg.numAttrs = 1;
      CK(cudaLaunchKernelEx(&cfg, link, a));
    }
    CK(cudaStreamEndCapture(str, &g));
    cudaGraphExec_t ge;
    CK(cudaGraphInstantiate(&ge, g, 0));
    CK(cudaGraphLaunch(ge, str));
    CK(cudaStreamSynchronize(str));
    CK(cudaEventRecord(e0, str));
    for (int r = 0; r < reps; r++) CK(cudaGraphLaunch(ge, str));
    CK(cudaEventRecord(e1, str));
    CK(cudaEventSynchronize(e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    CK(cudaMemcpy(h.data(), st, h.size() * 8, cudaMemcpyDeviceToHost));
    /* the last replay's stamps; links 4..L-1 */
    double bnd = 0, xm = 0, xe = 0, xo = 0, ld = 0, en = 0;
    int ne = 0, no = 0, nl = 0;
    for (int l = 4; l < L; l++) {
      const uint64_t *s = &h[(size_t)l * G * 6], *p = &h[(size_t)(l - 1) * G * 6];
      uint64_t rel0 = ~0ull, end1 = 0, pend = 0;
      for (int b = 0; b < G; b++) { rel0 = std::min(rel0, s[b * 6 + 1]); end1 = std::max(end1, s[b * 6 + 4]); pend = std::max(pend, p[b * 6 + 4]); }
      bnd += (double)(int64_t)(rel0 - pend);
      en += (double)(end1 - rel0);
      for (int b = 0; b < G; b++) {
        const double dx = (double)(s[b * 6 + 2] - s[b * 6 + 1]);
        xm += dx;
        ld += (double)(s[b * 6 + 3] - s[b * 6 + 1]);
        if (s[b * 6 + 5] & 1) { xo += dx; no++; } else { xe += dx; ne++; }
      }
      nl++;
    }
    const double per = 1000.0 * ms / reps / L;
    const double bytes = (double)G * 8 * (v.P + v.S);
    printf("| %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.0f |\n", v.name, per, bnd / nl * 1e-3, xm / nl / G * 1e-3,
           ne ? xe / ne * 1e-3 : 0.0, no ? xo / no * 1e-3 : 0.0, ld / nl / G * 1e-3, en / nl * 1e-3, bytes / (per * 1e-6) * 1e-9);
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
  }
  CK(cudaGetLastError());
  return 0;
}
