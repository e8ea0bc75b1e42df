// The weight ring of the warp-specialized W4A16 kernels (w4a16_ws_gemv.cu for one token, w4a16_ws_gemm.cu for 2-16):
// one producer warp per CTA keeps NS shared-memory stages in flight with TMA bulk copies, consumer warps compute on
// them. A stage holds, for the RB rows of a row group, the next U x 512 bytes of each row of the compress.int4 layout
// (one bulk copy a row, at a row pitch of SPAN + PAD bytes), then the stage's scales (and zeros) for those rows, copied
// by cp.async 8 rows = 16 bytes at a time; one mbarrier ("full") counts both, another ("empty") the consumer warps done
// with the stage. The producer walks the persistent grid's row groups (blockIdx.x, + gridDim.x, ...) and runs ahead
// across them: the ring never drains between row groups.
#pragma once
#include <cuda_runtime.h>
#include <stdint.h>

#include "w4a16_cc_common.cuh"

namespace w4ws {

using w4cc::launch_ex;
using w4cc::smem_u32;

// ---- mbarriers
__device__ __forceinline__ void mbar_init(uint64_t* b, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(b)), "r"(count) : "memory");
}
__device__ __forceinline__ bool mbar_try_wait(uint64_t* b, uint32_t parity) {
  uint32_t ok;
  asm volatile(
      "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(ok) : "r"(smem_u32(b)), "r"(parity) : "memory");
  return ok != 0;
}
__device__ __forceinline__ void mbar_wait(uint64_t* b, uint32_t parity) {
  while (!mbar_try_wait(b, parity)) {
  }
}
__device__ __forceinline__ void mbar_arrive(uint64_t* b) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(b)) : "memory");
}
__device__ __forceinline__ void mbar_arrive_tx(uint64_t* b, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(b)), "r"(bytes) : "memory");
}
// One arrival on b once every cp.async this thread issued so far has landed (the count was set for it at init).
__device__ __forceinline__ void mbar_cp_async_arrive(uint64_t* b) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_u32(b)) : "memory");
}
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes, uint64_t* bar, uint64_t pol) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;"
      ::"r"(smem_u32(dst)), "l"(src), "r"(bytes), "r"(smem_u32(bar)), "l"(pol) : "memory");
}
template <int SIZE> __device__ __forceinline__ void cp_async_sz(void* dst, const void* src, int src_bytes) {
  if constexpr (SIZE == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_u32(dst)), "l"(src), "r"(src_bytes) : "memory");
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;" ::"r"(smem_u32(dst)), "l"(src), "n"(SIZE), "r"(src_bytes)
                 : "memory");
  }
}

__host__ __device__ constexpr int round16(int v) { return (v + 15) & ~15; }

// A ring stage: [RB rows x PITCH bytes (the row's SPAN weight bytes, then PAD) | GS x RB scales | GS x RB zeros], each
// part 16-byte aligned. PAD = 64 puts rows g and g + 1 of a tensor-core consumer's 8-lane phase on opposite bank halves.
template <bool ASYM, int GROUP, int RB_, int U, int PAD>
struct RingStage {
  static constexpr int RB = RB_;
  static constexpr int SPAN = U * 512;         // weight bytes of a row a stage holds
  static constexpr int PITCH = SPAN + PAD;
  static constexpr int GS = U * 1024 / GROUP;  // scale groups a stage covers
  static constexpr int WBYTES = RB * PITCH;
  static constexpr int SCB = round16(GS * RB * 2);
  static constexpr int BYTES = WBYTES + SCB + (ASYM ? round16(GS * RB) : 0);
};

// The producer warp: the stages of this CTA's row groups (rg0, rg0 + rg_step, ... < n_rg), in order, into the ring;
// every lane takes part. Each row group takes `kbytes` bytes of each row from byte kb0 (the CTA's range of K; scale
// groups from gbase), nst stages. A needs q (N, Kp / 2 bytes), s (G, N), z (G, N) or null, N, Kp, G, n_rg and early (the
// copies start before griddepcontrol.wait: the weights must not be written by the kernel launched right before).
// ns: the ring's stages (a template constant for the one-token GEMV, chosen at launch for the multi-token one).
template <typename S, bool ASYM, typename A>
__device__ __forceinline__ void produce(const A& a, uint8_t* ring, uint64_t* full, uint64_t* empty, int lane, int nst,
                                        int ns, int rg0, int rg_step, int kb0, int kbytes, int gbase) {
  uint64_t pol;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
#if __CUDA_ARCH__ >= 900
  if (!a.early) asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  const int row_bytes = a.Kp / 2;
  int t = 0;
  for (int rg = rg0; rg < a.n_rg; rg += rg_step) {
    const int n0 = rg * S::RB;
    for (int st = 0; st < nst; ++st, ++t) {
      const int slot = t % ns;
      if (t >= ns) mbar_wait(&empty[slot], ((t / ns) + 1) & 1);
      uint8_t* base = ring + slot * S::BYTES;
      const int off = st * S::SPAN;
      const int bytes = min(S::SPAN, kbytes - off);
      if (lane == 0) mbar_arrive_tx(&full[slot], (uint32_t)(bytes * S::RB));
      __syncwarp();
      for (int r = lane; r < S::RB; r += 32) {
        const int row = min(n0 + r, a.N - 1);  // rows past N copy row N - 1 (never stored)
        bulk_copy(base + r * S::PITCH, a.q + (size_t)row * row_bytes + kb0 + off, (uint32_t)bytes, &full[slot], pol);
      }
      // Scales (and zeros) of the stage's groups for the group's rows, 8 rows a copy; past G or N zero-filled.
      const int g0 = gbase + st * S::GS;
      uint16_t* sc = reinterpret_cast<uint16_t*>(base + S::WBYTES);
      for (int i = lane; i < S::GS * (S::RB / 8); i += 32) {
        const int gl = i / (S::RB / 8), h = i % (S::RB / 8), g = g0 + gl, n = n0 + 8 * h;
        const bool in = g < a.G && n < a.N;
        cp_async_sz<16>(sc + gl * S::RB + 8 * h, in ? a.s + (size_t)g * a.N + n : a.s, in ? 16 : 0);
        if constexpr (ASYM) {
          uint8_t* zc = base + S::WBYTES + S::SCB;
          cp_async_sz<8>(zc + gl * S::RB + 8 * h, in ? a.z + (size_t)g * a.N + n : a.z, in ? 8 : 0);
        }
      }
      mbar_cp_async_arrive(&full[slot]);
    }
  }
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Set up the ring's mbarriers (thread 0; the caller syncs the CTA after): full = the producer's expect_tx arrival + one
// cp.async arrival per producer lane; empty = one arrival per consumer warp.
__device__ __forceinline__ void ring_init(uint64_t* full, uint64_t* empty, int ns, int consumer_warps) {
  for (int s = 0; s < ns; ++s) {
    mbar_init(&full[s], 1 + 32);
    mbar_init(&empty[s], consumer_warps);
  }
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// c += A (16 x 16, row) * B (16 x 8, col), fp16 in, fp32 accumulators.
__device__ __forceinline__ void mma16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// One word -> its pairs j = 0..3 (nibbles j, j + 4) as fp16x2 u - z, exactly: nlo = -(1024 + z), nhi = -(64 + z) per
// half (the high nibbles come out times 16 and are scaled back by 1/16 in the same HFMA2).
__device__ __forceinline__ void dequant_pairs(uint32_t w, uint32_t nlo, uint32_t nhi, uint32_t (&p)[4]) {
  using w4cc::as_h2;
  using w4cc::nib2;
  const __half2 sixteenth = __float2half2_rn(0.0625f);
  const uint32_t w8 = w >> 8;
  __half2 h;
  h = __hadd2(nib2(w, 0x000F000Fu), as_h2(nlo)); p[0] = *reinterpret_cast<uint32_t*>(&h);
  h = __hfma2(nib2(w, 0x00F000F0u), sixteenth, as_h2(nhi)); p[1] = *reinterpret_cast<uint32_t*>(&h);
  h = __hadd2(nib2(w8, 0x000F000Fu), as_h2(nlo)); p[2] = *reinterpret_cast<uint32_t*>(&h);
  h = __hfma2(nib2(w8, 0x00F000F0u), sixteenth, as_h2(nhi)); p[3] = *reinterpret_cast<uint32_t*>(&h);
}
// -(1024 + z) and -(64 + z) as fp16 bits for a zero-point pair z2 = z_lo | z_hi << 16 (z <= 15).
__device__ __forceinline__ uint32_t neg_lo(uint32_t z2) { return 0xE400E400u | z2; }
__device__ __forceinline__ uint32_t neg_hi(uint32_t z2) { return 0xD400D400u + (z2 << 4); }

// Host: the checks both WS entry points make before anything runs: 0, or -2 (group not 64 / 128), -3 (K not a positive
// multiple of 8), -4 (x, q, s or z not 16-byte aligned), -6 (N not a positive multiple of 8).
inline int check_call(const void* x, const void* q, const void* s, const void* z, int N, int K, int group) {
  if (group != 64 && group != 128) return -2;
  if (K <= 0 || (K & 7)) return -3;
  if ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(q) | reinterpret_cast<uintptr_t>(s) |
       reinterpret_cast<uintptr_t>(z)) & 15)
    return -4;
  if (N <= 0 || (N & 7)) return -6;
  return 0;
}

}  // namespace w4ws
