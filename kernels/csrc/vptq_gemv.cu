// VPTQ (compress.vptq v1) decode GEMV, batch 1, with both codebooks in shared memory.
//
// Math (contract: notes/VPTQ_FORMAT.md): for n = g*8 + i,
//   y[n] = s[n] * sum_j x[j] * (C[idx[j,g], i] + R[ridx[j,g], i]) + t[n] * sum_j x[j].
// Why CUDA C++: every weight vector is a random 16-byte codebook row. Through L1 (the Triton kernel)
// each warp-wide gather touches 32 cache lines and costs about 32 SM clocks; from shared memory the
// same gather costs the bank conflicts of 32 random 16-byte rows (about 8-12 wavefronts). Triton
// 3.6 gives no explicit shared memory for a gather.
//
// Layout in shared memory (per CTA, loaded once; one CTA per SM):
//   main codebook  k  x 16 B  (64 KB for 4096, 128 KB for 8192)
//   residual codebook replicated 8x: row r at r*128 + c*16 for c = 0..7, and lane l reads copy l&7,
//     so the 8 lanes of a quarter warp hit 8 different 16-byte bank groups: conflict-free.
//   reduction buffer 16 warps x 2 KB.
// Work: a "tile" is 32 lanes x GT vector slots (GT*8*32 outputs); the (tile, column) pairs are cut
// into one contiguous range per CTA (tile-major), the 16 warps of a CTA split each tile segment's
// columns (interleaved), reduce in shared memory in fixed order, and write one partial per (tile,
// CTA) to a workspace. The last CTA to finish a tile (arrival counter) sums that tile's partials in
// CTA order, applies scale/bias and writes y: one launch, deterministic (no float atomics).
// Indices are read straight from the packed stream: lane l of tile t owns slots (t*32+l)*GT ..+GT,
// whose GT*B bits start at bit (t*32+l)*GT*B of each row; the words are loaded with 4-byte loads
// and shifted once by the lane's bit offset, after which every index sits at a compile-time bit.
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

namespace {

constexpr int WARPS = 16;
constexpr int THREADS = WARPS * 32;
// Columns of indices in flight per warp (register ring): 4, or 3 where GT=8's 64 accumulators leave
// too few of the 128 registers a thread gets at 512 threads per SM (ptxas spilled at 4).
template <int GT> __host__ __device__ constexpr int depth_for() { return GT >= 8 ? 3 : 4; }

__host__ __device__ constexpr int gcd_c(int a, int b) { return b == 0 ? a : gcd_c(b, a % b); }

// Words a lane must load to cover GT*B bits that may start at any multiple of gcd(GT*B, 32).
template <int GT, int B>
struct Stream {
  static constexpr int BITS = GT * B;
  static constexpr int MAXOFF = 32 - gcd_c(BITS, 32);
  static constexpr int WORDS = (MAXOFF + BITS + 31) / 32;  // loaded
  static constexpr int NWORDS = (BITS + 31) / 32;          // after the shift
};

template <typename T> __device__ __forceinline__ float to_f32(uint16_t raw);
template <> __device__ __forceinline__ float to_f32<__half>(uint16_t raw) {
  return __half2float(__ushort_as_half(raw));
}
template <> __device__ __forceinline__ float to_f32<__nv_bfloat16>(uint16_t raw) {
  return __uint_as_float(static_cast<uint32_t>(raw) << 16);
}
template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

__device__ __forceinline__ uint32_t smem_u32(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

// Cluster multicast of the main codebook (Hopper bulk copy engine): CTA rank r of a cluster of cl
// copies slice r of the codebook into the shared memory of every CTA of the cluster, so the L2
// serves each codebook byte once per cluster instead of once per CTA.
__device__ __forceinline__ void cluster_sync_all() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
__device__ __forceinline__ void load_codebook_multicast(unsigned char* s_main, const uint4* cb, int kc, int cl,
                                                        uint64_t* bar) {
  const uint32_t b = smem_u32(bar);
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(b));
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  cluster_sync_all();  // every CTA's barrier exists before any peer's copy can signal it
  if (threadIdx.x == 0) {
    const uint32_t bytes = static_cast<uint32_t>(kc) * 16u;
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(b), "r"(bytes) : "memory");
    const uint32_t rank = cluster_rank();
    const uint32_t rows = (static_cast<uint32_t>(kc) + cl - 1) / cl;
    const uint32_t r0 = rank * rows, r1 = min(static_cast<uint32_t>(kc), r0 + rows);
    const uint16_t mask = static_cast<uint16_t>((1u << cl) - 1u);
    for (uint32_t r = r0; r < r1; r += 1024) {  // 16 KB pieces
      const uint32_t n = min(1024u, r1 - r) * 16u;
      asm volatile(
          "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1], %2, [%3], %4;\n"
          ::"r"(smem_u32(s_main + r * 16)), "l"(cb + r), "r"(n), "r"(b), "h"(mask) : "memory");
    }
  }
}
__device__ __forceinline__ void wait_codebook_multicast(uint64_t* bar) {
  const uint32_t b = smem_u32(bar);
  uint32_t done = 0;
  while (!done) {
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done) : "r"(b) : "memory");
  }
}

__device__ __forceinline__ uint32_t ld_word(const int32_t* p) {
  return static_cast<uint32_t>(__ldg(p));
}

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

template <int GT, int B, int RB>
struct Column {
  uint32_t m[Stream<GT, B>::WORDS];
  uint32_t r[RB ? Stream<GT, RB>::WORDS : 1];
  uint16_t x;
};

template <typename XT, int B, int RB, int GT>
__global__ void __launch_bounds__(THREADS, 1)
vptq_gemv_kernel(const uint16_t* __restrict__ x, const int32_t* __restrict__ idx, const uint4* __restrict__ cb, int kc,
                 const int32_t* __restrict__ ridx, const uint4* __restrict__ rcb, int kr,
                 const __half* __restrict__ scale, const __half* __restrict__ bias, XT* __restrict__ out,
                 float* __restrict__ ws, int* __restrict__ counters, int N, int K, int IW, int RW, int per, int cl) {
  using SM = Stream<GT, B>;
  using SR = Stream<GT, RB ? RB : 1>;
  constexpr int SLOTS = 32 * GT;           // vector slots per tile
  constexpr int TILEF = SLOTS * 8;         // floats per tile
  constexpr int ROUNDS = GT / 2;           // reduction rounds, 16 floats per lane each
  constexpr int SLOTF = TILEF + 4;         // workspace floats per partial (+ x sum, 16-byte aligned)
  constexpr int DEPTH = depth_for<GT>();

  extern __shared__ __align__(16) unsigned char smem[];
  unsigned char* s_main = smem;
  unsigned char* s_res = smem + (size_t)kc * 16;
  float* s_red = reinterpret_cast<float*>(s_res + (size_t)(RB ? kr : 0) * 128);  // WARPS x 512 floats
  __shared__ float s_xsum[WARPS];
  __shared__ int s_last;
  __shared__ __align__(8) uint64_t s_bar;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int NG = N / 8;
  const int T = (NG + SLOTS - 1) / SLOTS;
  const long total = (long)T * K;
  const long a = (long)blockIdx.x * per;
  const long b = min(total, a + per);

  // 1. Codebooks into shared memory (async copy for the main one, so the residual copies overlap it).
  if (cl > 1) {
    load_codebook_multicast(s_main, cb, kc, cl, &s_bar);
  } else {
    for (int r = tid; r < kc; r += THREADS) {
      uint32_t dst = smem_u32(s_main + (size_t)r * 16);
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(cb + r));
    }
    asm volatile("cp.async.commit_group;\n" ::);
  }
  if constexpr (RB > 0) {
    for (int r = tid; r < kr; r += THREADS) {
      uint4 v = __ldg(rcb + r);
      uint4* d = reinterpret_cast<uint4*>(s_res + (size_t)r * 128);
#pragma unroll
      for (int c = 0; c < 8; ++c) d[c] = v;
    }
  }
  if (cl > 1) wait_codebook_multicast(&s_bar);
  else asm volatile("cp.async.wait_all;\n" ::);
  __syncthreads();

  const uint32_t lane_res = static_cast<uint32_t>(lane & 7) * 16;

  for (long u = a; u < b;) {
    const int t = static_cast<int>(u / K);
    const int j0 = static_cast<int>(u % K);
    const int j1 = static_cast<int>(min((long)K, (long)j0 + (b - u)));
    u += j1 - j0;

    // This lane's slots and where their bits start in a row.
    const long g0 = (long)(t * 32 + lane) * GT;
    const long mbit = g0 * B, rbit = g0 * (RB ? RB : 1);
    const int mw0 = static_cast<int>(mbit >> 5), rw0 = static_cast<int>(rbit >> 5);
    const uint32_t moff = static_cast<uint32_t>(mbit & 31), roff = static_cast<uint32_t>(rbit & 31);

    float acc[GT][8];
#pragma unroll
    for (int q = 0; q < GT; ++q)
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[q][i] = 0.f;
    float xs = 0.f;

    // Columns of this warp: j0 + warp, j0 + warp + WARPS, ...
    const int ncols = (j1 - j0 > warp) ? (j1 - j0 - warp + WARPS - 1) / WARPS : 0;
    Column<GT, B, RB> ring[DEPTH];
    auto load = [&](Column<GT, B, RB>& c, int ci) {
      const int j = j0 + warp + ci * WARPS;
      const int32_t* row = idx + (long)j * IW + mw0;
#pragma unroll
      for (int i = 0; i < SM::WORDS; ++i) c.m[i] = (mw0 + i < IW) ? ld_word(row + i) : 0u;
      if constexpr (RB > 0) {
        const int32_t* rrow = ridx + (long)j * RW + rw0;
#pragma unroll
        for (int i = 0; i < SR::WORDS; ++i) c.r[i] = (rw0 + i < RW) ? ld_word(rrow + i) : 0u;
      }
      c.x = __ldg(x + j);
    };
#pragma unroll
    for (int d = 0; d < DEPTH; ++d)
      if (d < ncols) load(ring[d], d);

    for (int base = 0; base < ncols; base += DEPTH) {
#pragma unroll
      for (int d = 0; d < DEPTH; ++d) {
        if (base + d < ncols) {
          uint32_t um[SM::NWORDS];
          shift_words<GT, B>(ring[d].m, moff, um);
          uint32_t ur[SR::NWORDS];
          if constexpr (RB > 0) shift_words<GT, RB>(ring[d].r, roff, ur);
          const float xf = to_f32<XT>(ring[d].x);
          xs += xf;
          if (base + d + DEPTH < ncols) load(ring[d], base + d + DEPTH);
#pragma unroll
          for (int q = 0; q < GT; ++q) {
            uint32_t mi;
            // Unrolled q makes q*B a compile-time bit position.
            switch (q) {
#define VPTQ_CASE(Q) case Q: if constexpr (Q < GT) mi = field<B, Q * B>(um); break;
              VPTQ_CASE(0) VPTQ_CASE(1) VPTQ_CASE(2) VPTQ_CASE(3) VPTQ_CASE(4) VPTQ_CASE(5) VPTQ_CASE(6) VPTQ_CASE(7)
#undef VPTQ_CASE
            }
            uint4 c = *reinterpret_cast<const uint4*>(s_main + mi * 16);
            if constexpr (RB > 0) {
              uint32_t ri;
              switch (q) {
#define VPTQ_CASE(Q) case Q: if constexpr (Q < GT) ri = field<RB, Q * RB>(ur); break;
                VPTQ_CASE(0) VPTQ_CASE(1) VPTQ_CASE(2) VPTQ_CASE(3) VPTQ_CASE(4) VPTQ_CASE(5) VPTQ_CASE(6) VPTQ_CASE(7)
#undef VPTQ_CASE
              }
              const uint4 r = *reinterpret_cast<const uint4*>(s_res + ri * 128 + lane_res);
              // fp16 main + residual (one rounding, as the Triton kernel's fp32 sum rounds later)
              __half2 h;
              h = __hadd2(*reinterpret_cast<const __half2*>(&c.x), *reinterpret_cast<const __half2*>(&r.x)); c.x = *reinterpret_cast<uint32_t*>(&h);
              h = __hadd2(*reinterpret_cast<const __half2*>(&c.y), *reinterpret_cast<const __half2*>(&r.y)); c.y = *reinterpret_cast<uint32_t*>(&h);
              h = __hadd2(*reinterpret_cast<const __half2*>(&c.z), *reinterpret_cast<const __half2*>(&r.z)); c.z = *reinterpret_cast<uint32_t*>(&h);
              h = __hadd2(*reinterpret_cast<const __half2*>(&c.w), *reinterpret_cast<const __half2*>(&r.w)); c.w = *reinterpret_cast<uint32_t*>(&h);
            }
            const float2 f0 = __half22float2(*reinterpret_cast<const __half2*>(&c.x));
            const float2 f1 = __half22float2(*reinterpret_cast<const __half2*>(&c.y));
            const float2 f2 = __half22float2(*reinterpret_cast<const __half2*>(&c.z));
            const float2 f3 = __half22float2(*reinterpret_cast<const __half2*>(&c.w));
            acc[q][0] = fmaf(xf, f0.x, acc[q][0]); acc[q][1] = fmaf(xf, f0.y, acc[q][1]);
            acc[q][2] = fmaf(xf, f1.x, acc[q][2]); acc[q][3] = fmaf(xf, f1.y, acc[q][3]);
            acc[q][4] = fmaf(xf, f2.x, acc[q][4]); acc[q][5] = fmaf(xf, f2.y, acc[q][5]);
            acc[q][6] = fmaf(xf, f3.x, acc[q][6]); acc[q][7] = fmaf(xf, f3.y, acc[q][7]);
          }
        }
      }
    }

    // 2. Reduce the 16 warps' partials in fixed order, ROUNDS x 512 floats, into this CTA's slot.
    const int first = static_cast<int>(((long)t * K) / per);
    const int last = static_cast<int>(((long)(t + 1) * K - 1) / per);
    const int nparts = last - first + 1;
    float* slot = ws + (long)(first + t + (blockIdx.x - first)) * SLOTF;
    if (lane == 0) s_xsum[warp] = xs;
#pragma unroll
    for (int rr = 0; rr < ROUNDS; ++rr) {
      float4* mine = reinterpret_cast<float4*>(s_red + warp * 512);
#pragma unroll
      for (int k4 = 0; k4 < 4; ++k4) {
        const int q = 2 * rr + k4 / 2, i0 = (k4 % 2) * 4;
        mine[k4 * 32 + lane] = make_float4(acc[q][i0], acc[q][i0 + 1], acc[q][i0 + 2], acc[q][i0 + 3]);
      }
      __syncthreads();
      float s = 0.f;
#pragma unroll
      for (int w = 0; w < WARPS; ++w) s += s_red[w * 512 + tid];
      __stcg(slot + rr * 512 + tid, s);
      __syncthreads();
    }
    if (tid == 0) {
      float sx = 0.f;
      for (int w = 0; w < WARPS; ++w) sx += s_xsum[w];
      __stcg(slot + TILEF, sx);
    }
    __threadfence();
    __syncthreads();
    if (tid == 0) s_last = (atomicAdd(counters + t, 1) == nparts - 1);
    __syncthreads();
    if (s_last) {
      // 3. Last CTA of tile t: sum the partials in CTA order, apply scale / bias, write y.
      // One float4 of the tile per thread (GT=4: two threads per float4, each over half the
      // partials, combined in shared memory), 16 loads in flight: the partials sit in L2, so the
      // tail costs about ceil(nparts / 16) L2 round trips.
      __threadfence();
      const float* parts = ws + (long)(first + t) * SLOTF;
      float sx = 0.f;
      if (bias != nullptr) {  // every warp computes the same x sum in the same order
        for (int p = lane; p < nparts; p += 32) sx += __ldcg(parts + (long)p * SLOTF + TILEF);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) sx += __shfl_xor_sync(0xFFFFFFFFu, sx, o);
      }
      constexpr int F4 = TILEF / 4;           // float4s per tile: 512 (GT=8) or 256 (GT=4)
      constexpr int SPLIT = THREADS / F4;     // threads per float4
      const int f4 = tid % F4, h = tid / F4;
      const int p0 = nparts * h / SPLIT, p1 = nparts * (h + 1) / SPLIT;
      float4 s4 = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 16
      for (int p = p0; p < p1; ++p) {
        const float4 v = __ldcg(reinterpret_cast<const float4*>(parts + (long)p * SLOTF) + f4);
        s4.x += v.x; s4.y += v.y; s4.z += v.z; s4.w += v.w;
      }
      if constexpr (SPLIT > 1) {
        float4* s_half = reinterpret_cast<float4*>(s_red);
        if (h == 1) s_half[f4] = s4;
        __syncthreads();
        if (h == 0) {
          const float4 v = s_half[f4];
          s4.x += v.x; s4.y += v.y; s4.z += v.z; s4.w += v.w;
        }
      }
      if (h == 0) {
        // Buffer position f = 4*f4 + comp = rr*512 + (k4*32 + lane')*4 + comp -> slot q, element i of lane'.
        const int rr = f4 / 128, r = f4 % 128, ln = r % 32, k4 = r / 32;
        const int q = 2 * rr + k4 / 2, i0 = (k4 % 2) * 4;
        const long n0 = ((long)(t * 32 + ln) * GT + q) * 8 + i0;
        const float sv[4] = {s4.x, s4.y, s4.z, s4.w};
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const long n = n0 + c;
          if (n < N) {
            float y = sv[c];
            if (scale != nullptr) y *= __half2float(scale[n]);
            if (bias != nullptr) y += __half2float(bias[n]) * sx;
            out[n] = from_f32<XT>(y);
          }
        }
      }
      if (tid == 0) counters[t] = 0;  // ready for the next call (and CUDA-graph replays)
      __syncthreads();                // s_red is reused by the next segment's reduction
    }
  }
}

template <typename XT, int B, int RB, int GT>
int launch_one(const void* x, const int32_t* idx, const void* cb, int kc, const int32_t* ridx, const void* rcb, int kr,
               const void* scale, const void* bias, void* out, float* ws, int* counters, int N, int K, int IW, int RW,
               int ctas, int cl, cudaStream_t stream) {
  const int NG = N / 8, T = (NG + 32 * GT - 1) / (32 * GT);
  const long total = (long)T * K;
  const size_t smem = (size_t)kc * 16 + (size_t)(RB ? kr : 0) * 128 + (size_t)WARPS * 512 * 4;
  auto kern = vptq_gemv_kernel<XT, B, RB, GT>;
  static size_t configured = 0;  // per instantiation
  if (smem > configured) {
    cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (e != cudaSuccess) return static_cast<int>(e);
    configured = smem;
  }
  int per = static_cast<int>((total + ctas - 1) / ctas);
  int grid = static_cast<int>((total + per - 1) / per);
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1];
  cfg.blockDim = dim3(THREADS);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  if (cl > 1) {
    // Whole clusters only, and no more than fit at once (one CTA per SM; a GPC may not hold a
    // multiple of cl SMs), so that every CTA runs in the first and only wave.
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = cl;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    cfg.gridDim = dim3((grid + cl - 1) / cl * cl);
    static int fits[9] = {0};  // per instantiation and cluster size (same smem every call: k, kr fixed per layer type)
    static size_t fits_smem[9] = {0};
    if (cl > 8) return -2;
    if (fits_smem[cl] != smem) {
      int max_clusters = 0;
      cudaError_t e = cudaOccupancyMaxActiveClusters(&max_clusters, kern, &cfg);
      if (e != cudaSuccess) return static_cast<int>(e);
      fits[cl] = max_clusters;
      fits_smem[cl] = smem;
    }
    const int max_clusters = fits[cl];
    if (max_clusters < 1) return -2;
    grid = min(grid, max_clusters * cl);
    per = static_cast<int>((total + grid - 1) / grid);
    grid = static_cast<int>((total + per - 1) / per);
    grid = (grid + cl - 1) / cl * cl;  // trailing CTAs without work still load their share of the codebook
  }
  cfg.gridDim = dim3(grid);
  cudaError_t e = cudaLaunchKernelEx(&cfg, kern, static_cast<const uint16_t*>(x), idx, static_cast<const uint4*>(cb), kc, ridx,
                                     static_cast<const uint4*>(rcb), kr, static_cast<const __half*>(scale),
                                     static_cast<const __half*>(bias), static_cast<XT*>(out), ws, counters, N, K, IW, RW, per,
                                     cl);
  if (e != cudaSuccess) return static_cast<int>(e);
  return static_cast<int>(cudaGetLastError());
}

template <typename XT, int B, int RB>
int by_gt(int gt, const void* x, const int32_t* idx, const void* cb, int kc, const int32_t* ridx, const void* rcb, int kr,
          const void* scale, const void* bias, void* out, float* ws, int* counters, int N, int K, int IW, int RW, int ctas,
          int cl, cudaStream_t stream) {
  if (gt == 4) return launch_one<XT, B, RB, 4>(x, idx, cb, kc, ridx, rcb, kr, scale, bias, out, ws, counters, N, K, IW, RW, ctas, cl, stream);
  if (gt == 8) return launch_one<XT, B, RB, 8>(x, idx, cb, kc, ridx, rcb, kr, scale, bias, out, ws, counters, N, K, IW, RW, ctas, cl, stream);
  return -1;
}

template <typename XT, int B>
int by_rb(int rb, int gt, const void* x, const int32_t* idx, const void* cb, int kc, const int32_t* ridx, const void* rcb,
          int kr, const void* scale, const void* bias, void* out, float* ws, int* counters, int N, int K, int IW, int RW,
          int ctas, int cl, cudaStream_t stream) {
  switch (rb) {
    case 0: return by_gt<XT, B, 0>(gt, x, idx, cb, kc, ridx, rcb, kr, scale, bias, out, ws, counters, N, K, IW, RW, ctas, cl, stream);
    case 8: return by_gt<XT, B, 8>(gt, x, idx, cb, kc, ridx, rcb, kr, scale, bias, out, ws, counters, N, K, IW, RW, ctas, cl, stream);
    case 9: return by_gt<XT, B, 9>(gt, x, idx, cb, kc, ridx, rcb, kr, scale, bias, out, ws, counters, N, K, IW, RW, ctas, cl, stream);
  }
  return -1;
}

template <typename XT>
int by_b(int b, int rb, int gt, const void* x, const int32_t* idx, const void* cb, int kc, const int32_t* ridx,
         const void* rcb, int kr, const void* scale, const void* bias, void* out, float* ws, int* counters, int N, int K,
         int IW, int RW, int ctas, int cl, cudaStream_t stream) {
  switch (b) {
    case 12: return by_rb<XT, 12>(rb, gt, x, idx, cb, kc, ridx, rcb, kr, scale, bias, out, ws, counters, N, K, IW, RW, ctas, cl, stream);
    case 13: return by_rb<XT, 13>(rb, gt, x, idx, cb, kc, ridx, rcb, kr, scale, bias, out, ws, counters, N, K, IW, RW, ctas, cl, stream);
  }
  return -1;
}

}  // namespace

extern "C" {

// Workspace floats the launcher needs: (ctas + tiles) partial slots of (32*gt*8 + 4) floats.
long vptq_gemv_workspace_floats(int N, int gt, int ctas) {
  const int T = (N / 8 + 32 * gt - 1) / (32 * gt);
  return (long)(ctas + T) * (32 * gt * 8 + 4);
}

// Shared-memory bytes per CTA.
long vptq_gemv_smem_bytes(int kc, int kr) { return (long)kc * 16 + (long)kr * 128 + (long)WARPS * 512 * 4; }

// Returns 0, a cudaError_t, -1 for a (bits, residual bits, gt) combination that is not compiled, or -2
// when no cluster of `cl` CTAs fits. cl = 1: plain launch; 2..8: codebook multicast within clusters.
// counters: at least `tiles` int32 zeros (left at zero on return).
int vptq_gemv(const void* x, int x_is_bf16, const int32_t* idx, const void* cb, int kc, int b, const int32_t* ridx,
              const void* rcb, int kr, int rb, const void* scale, const void* bias, void* out, float* ws, int* counters,
              int N, int K, int IW, int RW, int gt, int ctas, int cl, void* stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (x_is_bf16)
    return by_b<__nv_bfloat16>(b, rb, gt, x, idx, cb, kc, ridx, rcb, kr, scale, bias, out, ws, counters, N, K, IW, RW, ctas, cl, s);
  return by_b<__half>(b, rb, gt, x, idx, cb, kc, ridx, rcb, kr, scale, bias, out, ws, counters, N, K, IW, RW, ctas, cl, s);
}

}  // extern "C"
