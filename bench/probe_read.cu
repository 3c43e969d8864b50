/* bench/probe_read.cu — how fast the H200 reads 160 MB of int4 weights under the access patterns a
 * decode GEMV can use (a diagnostic for bench/NOTES.md, not part of the engine). Standalone:
 *   nvcc -O3 -arch=sm_90 -Isrc -o probe_read bench/probe_read.cu && ./probe_read
 * Rows of 1024 bytes (K = 2048 int4), tiles of 16 rows (16 KB, contiguous); every pattern reads
 * every byte once per pass, 16-byte loads, 8 steps unrolled (16 loads in flight per thread):
 *   tile64   one warp per tile, step g: lane (gid, tig) reads row gid and gid + 8 at 64 g + 16 tig
 *            (the GEMV's fragment order: 16 pieces of 64 bytes, rows 1 KB apart)
 *   tile128  the same, two groups per step: 128 contiguous bytes of each row per step
 *   tile1k   one warp per tile, step g reads the tile's g-th 1 KB contiguously (a tile-major repack)
 * and the same with the scales (5 MB beside): tile64 + one 4-byte word per row and step (what the GEMV's
 * cp.async ring fetches), tile1k + the tile's 512 bytes once (a tile-major scale layout). Each at 1 and
 * 2 blocks of 8 warps per SM. */
#include <cstdint>
#include <cstdio>
#include <cuda_runtime.h>

#include "backend/cuda/ptx.cuh" /* ld_nc_v4: the GEMV's own weight load */

template <int PAT>
__global__ __launch_bounds__(256, 2) void probe(const uint8_t *buf, const uint8_t *sc, int tiles, unsigned *out) {
  const int lane = threadIdx.x % 32, gid = lane / 4, tig = lane % 4;
  const int wg = blockIdx.x * 8 + threadIdx.x / 32, nwarps = gridDim.x * 8;
  unsigned acc = 0;
  for (int t = wg; t < tiles; t += nwarps) {
    const uint8_t *tb = buf + (size_t)t * 16384;
#pragma unroll 1
    for (int s0 = 0; s0 < 16; s0 += 8) {
      uint4 v[16];
#pragma unroll
      for (int s = 0; s < 8; s++) {
        const int g = s0 + s;
        const uint8_t *a0, *a1;
        if (PAT == 1 || PAT == 4) { a0 = tb + gid * 1024 + g * 64 + tig * 16; a1 = a0 + 8 * 1024; }
        else if (PAT == 2) { a0 = tb + (gid + 8 * (g / 8)) * 1024 + (g % 8) * 128 + tig * 16; a1 = a0 + 64; }
        else { a0 = tb + g * 1024 + lane * 16; a1 = a0 + 512; } /* 3, 5 */
        v[2 * s] = ld_nc_v4((const uint4 *)a0);
        v[2 * s + 1] = ld_nc_v4((const uint4 *)a1);
        if (PAT == 4) { /* + the scales as the GEMV fetches them: one 4-byte word per row and step */
          const unsigned *s0 = (const unsigned *)(sc + ((size_t)t * 16 + gid) * 32 + (g / 2) * 4);
          acc += __ldg(s0) ^ __ldg(s0 + 8 * 8);
        }
      }
#pragma unroll
      for (int s = 0; s < 16; s++) acc ^= v[s].x ^ v[s].y ^ v[s].z ^ v[s].w;
    }
  }
  if (PAT == 5) { /* tile-major + the tile's 512 bytes of scales, one 16-byte load per lane per tile */
    for (int t = wg; t < tiles; t += nwarps) {
      const uint4 q = ld_nc_v4((const uint4 *)(sc + (size_t)t * 512 + lane * 16));
      acc ^= q.x ^ q.w;
    }
  }
  if (acc == 0x12345678u) out[0] = acc;
}

int main() {
  const int tiles = 10240; /* 160 MB of weights, 5 MB of scales */
  const size_t bytes = (size_t)tiles * 16384, sbytes = (size_t)tiles * 512;
  uint8_t *buf[2], *sc[2];
  unsigned *out;
  for (int i = 0; i < 2; i++) {
    cudaMalloc(&buf[i], bytes);
    cudaMalloc(&sc[i], sbytes);
    cudaMemset(buf[i], 1 + i, bytes);
    cudaMemset(sc[i], 3 + i, sbytes);
  }
  cudaMalloc(&out, 4);
  int nsm = 0;
  cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, 0);
  const char *names[6] = {"", "tile64 (GEMV order)", "tile128 (2 groups/step)", "tile1k (tile-major)",
                          "tile64 + 4-byte scale words per step", "tile1k + 16-byte scales per tile"};
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  printf("| pattern | blocks of 8 warps per SM | GB/s (weights only, 160 MB) |\n|---|---|---|\n");
  for (int pat = 1; pat < 6; pat++) {
    for (int bps = 1; bps <= 2; bps++) {
      const int grid = bps * nsm;
      for (int rep = 0; rep < 25; rep++) {
        if (rep == 5) cudaEventRecord(e0);
        const uint8_t *b = buf[rep & 1], *s = sc[rep & 1];
        switch (pat) {
          case 1: probe<1><<<grid, 256>>>(b, s, tiles, out); break;
          case 2: probe<2><<<grid, 256>>>(b, s, tiles, out); break;
          case 3: probe<3><<<grid, 256>>>(b, s, tiles, out); break;
          case 4: probe<4><<<grid, 256>>>(b, s, tiles, out); break;
          default: probe<5><<<grid, 256>>>(b, s, tiles, out); break;
        }
      }
      cudaEventRecord(e1);
      cudaEventSynchronize(e1);
      float ms = 0;
      cudaEventElapsedTime(&ms, e0, e1);
      printf("| %s | %d | %.0f |\n", names[pat], bps, bytes * 20 / (ms * 1e-3) / 1e9);
    }
  }
  printf("%s\n", cudaGetErrorString(cudaGetLastError()));
  return 0;
}
