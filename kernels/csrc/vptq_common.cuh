// Device helpers shared by the two VPTQ decode GEMVs (vptq_gemv.cu, vptq_gemv_cluster.cu): the packed
// index stream (notes/VPTQ_FORMAT.md: b bits per index, little-endian, an index may straddle two 32-bit
// words), cluster barriers and the mbarrier wait of the codebook bulk copies. kernels/cuda_build.py hashes
// this header into each including library's cache key.
#pragma once
#include <cuda_runtime.h>
#include <stdint.h>

namespace {

__host__ __device__ constexpr int gcd_c(int a, int b) { return b == 0 ? a : gcd_c(b, a % b); }

// Words a lane must load to cover GT*B bits that may start at any multiple of gcd(GT*B, 32).
template <int GT, int B>
struct Stream {
  static constexpr int BITS = GT * B;
  static constexpr int MAXOFF = 32 - gcd_c(BITS, 32);
  static constexpr int WORDS = (MAXOFF + BITS + 31) / 32;  // loaded
  static constexpr int NWORDS = (BITS + 31) / 32;          // after the shift
};

// One column of a lane's ring: its main (and residual) index words and x[j].
template <int GT, int B, int RB>
struct Column {
  uint32_t m[Stream<GT, B>::WORDS];
  uint32_t r[RB ? Stream<GT, RB>::WORDS : 1];
  uint16_t x;
};

// Index at compile-time bit P (width B) of the shifted words u[].
template <int B, int P, int N>
__device__ __forceinline__ uint32_t field(const uint32_t (&u)[N]) {
  constexpr int w = P / 32, s = P % 32;
  constexpr uint32_t mask = (B >= 32) ? 0xFFFFFFFFu : ((1u << B) - 1u);
  if constexpr (s + B <= 32) {
    return (u[w] >> s) & mask;
  } else {
    return __funnelshift_r(u[w], u[w + 1], s) & mask;
  }
}

// The loaded words shifted so that the lane's first index starts at bit 0.
template <int GT, int B>
__device__ __forceinline__ void shift_words(const uint32_t (&w)[Stream<GT, B>::WORDS], uint32_t off,
                                            uint32_t (&u)[Stream<GT, B>::NWORDS]) {
  using S = Stream<GT, B>;
  if constexpr (S::MAXOFF == 0) {
#pragma unroll
    for (int i = 0; i < S::NWORDS; ++i) u[i] = w[i];
  } else {
#pragma unroll
    for (int i = 0; i < S::NWORDS; ++i) u[i] = (i + 1 < S::WORDS) ? __funnelshift_r(w[i], w[i + 1], off) : (w[i] >> off);
  }
}

__device__ __forceinline__ uint32_t smem_u32(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

__device__ __forceinline__ void cluster_sync_all() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}

// Wait until the bulk copies tracked by the mbarrier at `bar` (phase 0: one use per launch) have landed.
__device__ __forceinline__ void codebook_wait(uint64_t* bar) {
  const uint32_t b = smem_u32(bar);
  uint32_t done = 0;
  while (!done) {
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done) : "r"(b) : "memory");
  }
}

// A refused call also sets this runtime's last error: clear it, or the next good launch reports it.
inline int refused(cudaError_t e) {
  cudaGetLastError();
  return static_cast<int>(e);
}

}  // namespace
