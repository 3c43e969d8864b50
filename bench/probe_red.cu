/* bench/probe_red.cu — what it costs many blocks to add their partial sums into one short f32 vector with global
 * atomics, as the fused MLP's down_proj does (round 19, bench/NOTES.md): `blocks` blocks each add a vector of
 * `rows` floats into acc, as float4 or scalar atomics, into one copy of acc or spread over `copies` copies
 * (block b adds into copy b % copies). Plain stores of the same bytes are the baseline. Each row is the mean of
 * 200 launches (cudaEvent), launch overhead included.
 *   nvcc -O3 -arch=sm_90 -o probe_red bench/probe_red.cu && ./probe_red */
#include <cstdio>
#include <cuda_runtime.h>

__global__ void red_probe(float *acc, int rows, int copies, int mode) {
  float *dst = acc + (size_t)(blockIdx.x % copies) * rows;
  for (int i = threadIdx.x * 4; i < rows; i += blockDim.x * 4) {
    const float v = (float)(blockIdx.x + i) * 1e-6f;
    if (mode == 0) {
      *(float4 *)(dst + i) = make_float4(v, v, v, v); /* plain stores (races are fine: timing only) */
    } else if (mode == 1) {
      atomicAdd((float4 *)(dst + i), make_float4(v, v, v, v));
    } else {
      atomicAdd(dst + i, v);
      atomicAdd(dst + i + 1, v);
      atomicAdd(dst + i + 2, v);
      atomicAdd(dst + i + 3, v);
    }
  }
}

int main() {
  const int rows = 2048, reps = 200;
  float *acc;
  cudaMalloc(&acc, (size_t)64 * rows * sizeof(float));
  cudaMemset(acc, 0, (size_t)64 * rows * sizeof(float));
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  const char *names[3] = {"stores", "float4 atomics", "scalar atomics"};
  printf("| blocks | copies | kind | us per launch |\n|---|---|---|---|\n");
  for (int blocks : {132, 264})
    for (int mode = 0; mode < 3; mode++)
      for (int copies : {1, 2, 4, 8, 16, 64}) {
        if (mode == 0 && copies > 1) continue;
        red_probe<<<blocks, 512>>>(acc, rows, copies, mode);
        cudaEventRecord(e0);
        for (int r = 0; r < reps; r++) red_probe<<<blocks, 512>>>(acc, rows, copies, mode);
        cudaEventRecord(e1);
        cudaEventSynchronize(e1);
        float ms = 0.0f;
        cudaEventElapsedTime(&ms, e0, e1);
        printf("| %d | %d | %s | %.2f |\n", blocks, copies, names[mode], 1000.0f * ms / reps);
      }
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) { printf("error: %s\n", cudaGetErrorString(err)); return 1; }
  cudaFree(acc);
  return 0;
}
