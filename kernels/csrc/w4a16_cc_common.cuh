// Shared by the one-token W4A16 GEMVs that do their math on the CUDA cores' fp16 pipes or feed mma.sync from the same
// staged activations (w4a16_cc_gemv.cu, w4a16_ws_gemv.cu) and the warp-specialized GEMM (w4a16_ws_gemm.cu): the LOP3
// dequantization of a compress.int4 word, the fp16 dot product of one word, the staging of x, and their launch.
// w4a16_cc_gemv.cu's header explains the math and the layout of x.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <type_traits>

#include "launch_ex.cuh"

namespace w4cc {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ __half2 nib2(uint32_t w, uint32_t mask) {  // (w & mask) | 0x64006400
  uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(w), "r"(mask), "r"(0x64006400u));
  return *reinterpret_cast<__half2*>(&r);
}
__device__ __forceinline__ __half2 as_h2(uint32_t u) { return *reinterpret_cast<__half2*>(&u); }

template <typename T> __device__ __forceinline__ float to_f(uint16_t v);
template <> __device__ __forceinline__ float to_f<__half>(uint16_t v) { return __half2float(__ushort_as_half(v)); }
template <> __device__ __forceinline__ float to_f<__nv_bfloat16>(uint16_t v) { return __uint_as_float((uint32_t)v << 16); }
template <typename T> __device__ __forceinline__ uint16_t from_f(float v);
template <> __device__ __forceinline__ uint16_t from_f<__half>(float v) { return __half_as_ushort(__float2half_rn(v)); }
template <> __device__ __forceinline__ uint16_t from_f<__nv_bfloat16>(float v) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

// The 8 products of 32-bit word w (offsets zc = 1024 + z, zc16 = 64 + z per half) with its piece xp, into a.
__device__ __forceinline__ __half2 dot_word(uint32_t w, uint4 xp, __half2 zc, __half2 zc16, __half2 a) {
  const __half2 sixteenth = __float2half2_rn(0.0625f);
  a = __hfma2(__hsub2(nib2(w, 0x000F000Fu), zc), as_h2(xp.x), a);
  a = __hfma2(__hfma2(nib2(w, 0x00F000F0u), sixteenth, __hneg2(zc16)), as_h2(xp.y), a);
  const uint32_t w8 = w >> 8;
  a = __hfma2(__hsub2(nib2(w8, 0x000F000Fu), zc), as_h2(xp.z), a);
  a = __hfma2(__hfma2(nib2(w8, 0x00F000F0u), sixteenth, __hneg2(zc16)), as_h2(xp.w), a);
  return a;
}

__host__ __device__ constexpr int up_floats(int Kp) { return (Kp / 128 + 3) / 4 * 4; }  // 2^e_b slots, 16-byte padded

// The exponent e_b of a 128-k block whose 8 threads (consecutive lanes) each hold v: the raw 16-bit values x[k .. k + 7]
// (v[0]) and x[k + 64 .. k + 71] (v[1]); max |x| * 2^-e_b < 128, e_b >= 0. Every lane of the warp must call it (shuffles).
template <typename T>
__device__ __forceinline__ int block_exponent(const uint32_t (&v)[2][4]) {
  float mx = 0.f;
#pragma unroll
  for (int hh = 0; hh < 2; ++hh)
#pragma unroll
    for (int t = 0; t < 4; ++t)
      mx = fmaxf(mx, fmaxf(fabsf(to_f<T>(v[hh][t] & 0xFFFF)), fabsf(to_f<T>(v[hh][t] >> 16))));
#pragma unroll
  for (int m = 4; m > 0; m >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, m));  // the block's 8 lanes
  int ex = 0;
  frexpf(mx, &ex);        // mx = f * 2^ex, f in [0.5, 1)
  return max(0, ex - 7);  // max |x| * 2^-e < 128
}

// Store a thread's 8 pairs (x[k], x[k + 64]), k = 128 b + o + t (v as for block_exponent), into xs as fp16 pairs, scaled by
// 2^-e unless `as_is` (fp16 bits kept as they are): piece p of chunk c lands at slot 4c + (p ^ ((c >> 1) & 3)).
template <typename T>
__device__ __forceinline__ void store_pairs(const uint32_t (&v)[2][4], int e, bool as_is, uint4* xs, int b, int o) {
  const float down = ldexpf(1.f, -e);
  const int j = o >> 4, r0 = o & 15;
  uint32_t* xw = reinterpret_cast<uint32_t*>(xs);
#pragma unroll
  for (int t = 0; t < 8; ++t) {
    const uint32_t lo = (v[0][t >> 1] >> (16 * (t & 1))) & 0xFFFF, hi = (v[1][t >> 1] >> (16 * (t & 1))) & 0xFFFF;
    uint32_t word;
    if (as_is) {
      word = lo | (hi << 16);
    } else {
      const __half2 h = __floats2half2_rn(to_f<T>(lo) * down, to_f<T>(hi) * down);
      word = *reinterpret_cast<const uint32_t*>(&h);
    }
    const int r = r0 + t, c = b * 4 + (r >> 2), p = r & 3;
    xw[(c * 4 + (p ^ ((c >> 1) & 3))) * 4 + j] = word;
  }
}

// Stage x (K values, Kp = K rounded up to 128) in one pass by `nthreads` threads (whole warps: they run shuffles),
// thread `tid` of them. Thread i takes k = 128b + o .. +7 and the same 8 positions + 64 (o < 64), i.e. 8 whole half2
// pairs (x[k], x[k + 64]); the 8 threads of block b agree on its exponent e_b by shuffles (max |x| * 2^-e_b <= 128)
// and store x * 2^-e_b; s_up[b] = 2^e_b goes back in with the scales. Piece p of chunk c lands at slot
// 4c + (p ^ ((c >> 1) & 3)) of xs.
template <typename T>
__device__ __forceinline__ void stage_x(const uint16_t* x, int K, int Kp, uint4* xs, float* s_up, int tid,
                                        int nthreads) {
  for (int i0 = 0; i0 < Kp / 16; i0 += nthreads) {
    const int i = i0 + tid;
    const int b = i >> 3, o = (i & 7) * 8;  // o in [0, 64): 8 threads per block
    const int k0 = b * 128 + o;
    // Raw 16-bit values only (8 registers): weight loads may be in flight beside them.
    uint32_t v[2][4];
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int k = k0 + 64 * hh;
      uint4 q = make_uint4(0, 0, 0, 0);  // past K: zeros (K % 8 == 0, so 8 values are all in or all out)
      if (i < Kp / 16 && k < K) q = __ldg(reinterpret_cast<const uint4*>(x + k));
      v[hh][0] = q.x; v[hh][1] = q.y; v[hh][2] = q.z; v[hh][3] = q.w;
    }
    const int e = block_exponent<T>(v);
    if (i < Kp / 16) {
      store_pairs<T>(v, e, std::is_same<T, __half>::value && e == 0, xs, b, o);  // fp16 needing no scaling: as it is
      if ((i & 7) == 0) s_up[b] = ldexpf(1.f, e);
    }
  }
}

using ::launch_ex;  // launch_ex.cuh

}  // namespace w4cc
