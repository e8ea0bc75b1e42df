// Read-bandwidth reference for bench/results/h100/kernels/w4a16_cuda_s4_bench.py (bench only, not a library
// kernel): reads a buffer once with 16-byte streaming loads (ld.global.cs, like the GEMV's evict-first copies),
// UNROLL loads in flight per thread before any use, and writes nothing unless the XOR of everything read is a
// magic value (so the loads cannot be dropped). Two grid shapes: one pass of many CTAs (each thread UNROLL
// loads, like a split-K GEMV's single pass), or a persistent grid that strides over the buffer.
#include <cuda_runtime.h>
#include <stdint.h>

namespace {
constexpr int THREADS = 256;
constexpr int UNROLL = 8;

__global__ void __launch_bounds__(THREADS) read_kernel(const uint4* __restrict__ p, long n16, unsigned* out) {
  unsigned acc = 0;
  const long stride = (long)gridDim.x * THREADS * UNROLL;
  for (long base = (long)blockIdx.x * THREADS * UNROLL + threadIdx.x; base < n16; base += stride) {
    uint4 v[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const long i = base + (long)u * THREADS;
      v[u] = i < n16 ? __ldcs(p + i) : make_uint4(0u, 0u, 0u, 0u);
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  if (acc == 0x9E3779B9u) out[0] = acc;
}
}  // namespace

extern "C" {
// blocks <= 0: one pass (ceil(n16 / (THREADS * UNROLL)) CTAs); else that many CTAs striding over the buffer.
int read_bytes(const void* p, long bytes, void* out, int blocks, void* stream) {
  const long n16 = bytes / 16;
  const long one_pass = (n16 + (long)THREADS * UNROLL - 1) / ((long)THREADS * UNROLL);
  const long grid = blocks > 0 ? (blocks < one_pass ? blocks : one_pass) : one_pass;
  read_kernel<<<(unsigned)grid, THREADS, 0, static_cast<cudaStream_t>(stream)>>>(static_cast<const uint4*>(p), n16,
                                                                                  static_cast<unsigned*>(out));
  return (int)cudaGetLastError();
}
}
