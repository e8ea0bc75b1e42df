// Device helpers shared by the two VPTQ decode GEMVs (vptq_gemv.cu, vptq_gemv_cluster.cu): the packed
// index stream (notes/VPTQ_FORMAT.md: b bits per index, little-endian, an index may straddle two 32-bit
// words), cluster barriers and the mbarrier wait of the codebook bulk copies. kernels/cuda_build.py hashes
// this header into each including library's cache key.
#pragma once
#include <cuda_fp16.h>
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

// Index q (0..7; the caller's loop over q is unrolled, so q*B is a compile-time bit) of the shifted words u[].
template <int B, int GT, int N>
__device__ __forceinline__ uint32_t index_at(const uint32_t (&u)[N], int q) {
  uint32_t v = 0;
  switch (q) {
#define VPTQ_CASE(Q_) case Q_: if constexpr (Q_ < GT) v = field<B, Q_ * B>(u); break;
    VPTQ_CASE(0) VPTQ_CASE(1) VPTQ_CASE(2) VPTQ_CASE(3) VPTQ_CASE(4) VPTQ_CASE(5) VPTQ_CASE(6) VPTQ_CASE(7)
#undef VPTQ_CASE
  }
  return v;
}

// Main + residual codebook rows in fp16 (one rounding of the fp16 sum; the reference adds in fp32).
__device__ __forceinline__ uint4 add_h8(uint4 a, uint4 b) {
  __half2 h;
  h = __hadd2(*reinterpret_cast<const __half2*>(&a.x), *reinterpret_cast<const __half2*>(&b.x)); a.x = *reinterpret_cast<uint32_t*>(&h);
  h = __hadd2(*reinterpret_cast<const __half2*>(&a.y), *reinterpret_cast<const __half2*>(&b.y)); a.y = *reinterpret_cast<uint32_t*>(&h);
  h = __hadd2(*reinterpret_cast<const __half2*>(&a.z), *reinterpret_cast<const __half2*>(&b.z)); a.z = *reinterpret_cast<uint32_t*>(&h);
  h = __hadd2(*reinterpret_cast<const __half2*>(&a.w), *reinterpret_cast<const __half2*>(&b.w)); a.w = *reinterpret_cast<uint32_t*>(&h);
  return a;
}

// acc[i] += xf * c[i] for the 8 fp16 weights of a codebook row, in fp32.
__device__ __forceinline__ void fma8(float (&acc)[8], float xf, const uint4& c) {
  const float2 f0 = __half22float2(*reinterpret_cast<const __half2*>(&c.x));
  const float2 f1 = __half22float2(*reinterpret_cast<const __half2*>(&c.y));
  const float2 f2 = __half22float2(*reinterpret_cast<const __half2*>(&c.z));
  const float2 f3 = __half22float2(*reinterpret_cast<const __half2*>(&c.w));
  acc[0] = fmaf(xf, f0.x, acc[0]); acc[1] = fmaf(xf, f0.y, acc[1]);
  acc[2] = fmaf(xf, f1.x, acc[2]); acc[3] = fmaf(xf, f1.y, acc[3]);
  acc[4] = fmaf(xf, f2.x, acc[4]); acc[5] = fmaf(xf, f2.y, acc[5]);
  acc[6] = fmaf(xf, f3.x, acc[6]); acc[7] = fmaf(xf, f3.y, acc[7]);
}

// The residual codebook into shared memory, `rc` copies of each row side by side (row r at r << rsh bytes,
// rsh = log2(rc * 16)); lane l then reads copy l % rc, so the 8 lanes of a quarter warp hit different bank
// groups. Every thread of the CTA (`threads` of them) takes every threads-th row.
__device__ __forceinline__ void replicate_residual(unsigned char* s_res, const uint4* rcb, int kr, int rc, int rsh,
                                                   int threads) {
  for (int r = threadIdx.x; r < kr; r += threads) {
    const uint4 v = __ldg(rcb + r);
    uint4* dst = reinterpret_cast<uint4*>(s_res + ((size_t)r << rsh));
    for (int c = 0; c < rc; ++c) dst[c] = v;
  }
}

// The main loop over a lane's `ncols` columns with a register ring of DEPTH columns in flight (unrolled, so
// ring[d] stays in registers): shift column d's words to bit 0, convert its x (`x_f32`), request column
// d + DEPTH into the freed slot (`load`), then decode it (`consume`). xs sums x for the bias term.
template <int GT, int B, int RB, int DEPTH, typename Load, typename XF32, typename Consume>
__device__ __forceinline__ void ring_loop(Column<GT, B, RB> (&ring)[DEPTH], int ncols, uint32_t moff, uint32_t roff,
                                          float& xs, Load load, XF32 x_f32, Consume consume) {
  using SM = Stream<GT, B>;
  using SR = Stream<GT, RB ? RB : 1>;
  for (int base = 0; base < ncols; base += DEPTH) {
#pragma unroll
    for (int d = 0; d < DEPTH; ++d) {
      if (base + d < ncols) {
        uint32_t um[SM::NWORDS], ur[SR::NWORDS];
        shift_words<GT, B>(ring[d].m, moff, um);
        if constexpr (RB > 0) shift_words<GT, RB>(ring[d].r, roff, ur);
        const float xf = x_f32(ring[d].x);
        xs += xf;
        if (base + d + DEPTH < ncols) load(ring[d], base + d + DEPTH);
        consume(um, ur, xf);
      }
    }
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
