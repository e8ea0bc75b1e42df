// Microbenchmark behind the VPTQ kernel's design (run by kernels/vptq_probe.py): SM clocks per
// warp-wide 16-byte shared-memory read for the access patterns of a codebook lookup.
//   mode 0: random rows of a rows x 16 B table (the main codebook)
//   mode 1: random rows of a table replicated 8x, lane l reading copy l&7 (the residual codebook)
//   mode 2: consecutive rows across the warp (conflict-free baseline)
//   mode 3: mode 0 and mode 1 interleaved (one main + one residual lookup per vector)
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" __global__ void __launch_bounds__(512, 1)
lds_bench(int mode, int rows, int iters, float* out, long long* cycles) {
  extern __shared__ uint4 tab[];
  const int tid = threadIdx.x, lane = tid & 31;
  const int total = (mode == 1 ? rows * 8 : rows) + (mode == 3 ? 512 * 8 : 0);
  for (int i = tid; i < total; i += blockDim.x) tab[i] = make_uint4(i, i * 3, i * 5, i * 7);
  __syncthreads();
  uint32_t st = 0x9E3779B9u * (tid + 1) + blockIdx.x * 7919u;
  const uint32_t mask = rows - 1;
  float acc = 0.f;
  long long t0 = clock64();
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      st = st * 1664525u + 1013904223u;
      const uint32_t r = (st >> 8) & mask;
      uint4 v;
      if (mode == 0) v = tab[r];
      else if (mode == 1) v = tab[r * 8 + (lane & 7)];
      else if (mode == 2) v = tab[(lane + u * 32 + it) & mask];
      else {
        uint4 a = tab[r];
        uint4 b = tab[rows + ((st >> 20) & 511) * 8 + (lane & 7)];
        v = make_uint4(a.x ^ b.x, a.y ^ b.y, a.z ^ b.z, a.w ^ b.w);
      }
      acc += __uint_as_float((v.x ^ v.y ^ v.z ^ v.w) & 0x3FFFFFFFu);
    }
  }
  long long t1 = clock64();
  out[blockIdx.x * blockDim.x + tid] = acc;
  if (tid == 0) cycles[blockIdx.x] = t1 - t0;
}

extern "C" int run_lds_bench(int mode, int rows, int iters, int blocks, float* out, long long* cycles) {
  const int total = (mode == 1 ? rows * 8 : rows) + (mode == 3 ? 512 * 8 : 0);
  const size_t smem = (size_t)total * 16;
  cudaError_t e = cudaFuncSetAttribute(lds_bench, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
  if (e != cudaSuccess) return (int)e;
  lds_bench<<<blocks, 512, smem>>>(mode, rows, iters, out, cycles);
  e = cudaGetLastError();
  if (e != cudaSuccess) return (int)e;
  return (int)cudaDeviceSynchronize();
}
