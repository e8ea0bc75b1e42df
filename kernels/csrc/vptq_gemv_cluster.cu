// VPTQ (compress.vptq v1) decode GEMV, batch 1: split-K inside a thread-block cluster.
//
// Math (contract: notes/VPTQ_FORMAT.md): for n = g*8 + i,
//   y[n] = s[n] * sum_j x[j] * (C[idx[j,g], i] + R[ridx[j,g], i]) + t[n] * sum_j x[j].
//
// Why a second kernel beside vptq_gemv.cu: that one decodes at the shared-memory bound, but every call
// pays 11-14 us before the first weight (measured, bench/results/h100/kernels_vptq/NOTES.md): ~200 KB
// of shared memory filled by per-thread cp.async (bound by each SM's outstanding requests), and a
// split-K tail of 4-5 dependent global round trips (partial store, fence, counter atomic, partial
// loads, y store). Rows whose torch time is under ~20 us cannot win with that. Here:
//  * the CTAs that split one tile's K form a cluster (1-16 CTAs); they reduce through distributed
//    shared memory after a cluster barrier: no workspace, no fence, no atomic, one y store;
//  * the main codebook arrives by the bulk-copy engine (one instruction per 16 KB), multicast to the
//    whole cluster, so L2 serves it once per cluster;
//  * tiles can be narrow (LT lanes x GT vector slots, down to 8 slots = 64 outputs): out_features of
//    1024 still gives 16 tiles, so clusters fill the chip without a cross-cluster split;
//  * SMEM = false reads both codebooks through L1 instead (no copy, small shared memory): for calls
//    where a CTA decodes too few vectors to repay a 64-128 KB copy.
// Work split: tile t = cluster t (blockIdx.x / CL); rank p of the cluster takes columns
// [K*p/CL, K*(p+1)/CL). A warp covers CPW = 32/LT consecutive columns per step (lane l: slot lane
// l % LT, column l / LT) and steps by WARPS*CPW. Lane sums -> warp (shuffles) -> CTA (shared memory,
// fixed warp order) -> cluster (rank p sums slice p of the tile over ranks 0..CL-1 in order, applies
// scale and bias, stores y). Every sum has a fixed order: same bytes on every call.
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "launch_ex.cuh"
#include "vptq_common.cuh"

namespace {

#ifndef VPTQ_B
#define VPTQ_B 12
#endif
#ifndef VPTQ_RB
#define VPTQ_RB 8
#endif
constexpr int WARPS = 16;
constexpr int THREADS = WARPS * 32;
constexpr int RED_FLOATS = 512;                      // per warp per reduction round
constexpr int RED_BYTES = WARPS * RED_FLOATS * 4;    // 32 KB
constexpr int TILE_MAX_FLOATS = 32 * 8 * 8;          // LT*GT*8 at most (8 KB)

// Address of the same shared-memory byte in CTA `rank` of the cluster.
__device__ __forceinline__ uint32_t peer_addr(uint32_t local, uint32_t rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(local), "r"(rank));
  return r;
}
__device__ __forceinline__ float ld_peer(uint32_t addr) {
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(v) : "r"(addr) : "memory");
  return v;
}

// The main codebook into shared memory by the bulk-copy engine. With cl > 1 rank r copies slice r of
// the rows into every CTA of the cluster (multicast); each CTA's mbarrier expects all kc*16 bytes.
__device__ __forceinline__ void codebook_copy_start(unsigned char* s_main, const uint4* cb, int kc, int cl, uint64_t* bar) {
  const uint32_t b = smem_u32(bar);
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(b));
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  if (cl > 1) cluster_sync_all();  // every CTA's barrier exists before a peer's copy can signal it
  else __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(b), "r"(static_cast<uint32_t>(kc) * 16u)
                 : "memory");
    const uint32_t rank = cl > 1 ? cluster_rank() : 0u;
    const uint32_t rows = (static_cast<uint32_t>(kc) + cl - 1) / cl;
    const uint32_t r0 = rank * rows, r1 = min(static_cast<uint32_t>(kc), r0 + rows);
    const uint16_t mask = static_cast<uint16_t>((1u << cl) - 1u);
    for (uint32_t r = r0; r < r1; r += 1024) {  // 16 KB per instruction
      const uint32_t n = min(1024u, r1 - r) * 16u;
      if (cl > 1) {
        asm volatile(
            "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1], %2, [%3], %4;\n"
            ::"r"(smem_u32(s_main + r * 16)), "l"(cb + r), "r"(n), "r"(b), "h"(mask) : "memory");
      } else {
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                     ::"r"(smem_u32(s_main + r * 16)), "l"(cb + r), "r"(n), "r"(b) : "memory");
      }
    }
  }
}
__device__ __forceinline__ float x_to_f32(uint16_t raw, bool bf16) {
  return bf16 ? __uint_as_float(static_cast<uint32_t>(raw) << 16) : __half2float(__ushort_as_half(raw));
}


struct Params {
  const uint16_t* x;
  const int32_t* idx;
  const uint4* cb;
  const int32_t* ridx;
  const uint4* rcb;
  const __half* scale;
  const __half* bias;
  void* out;
  int kc, kr, rc, N, K, IW, RW, cl, x_bf16, pdl;
};

// Programmatic dependent launch (sm_90; no-ops when the launch did not ask for it).
__device__ __forceinline__ void grid_dep_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
__device__ __forceinline__ void grid_dep_launch() { asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory"); }

// Shared memory (dynamic), SMEM: [main codebook 16<<B bytes (>= RED_BYTES + tile), aliased after the
// loop by the warp-reduction buffer (32 KB) and the CTA's tile sums (<= 8 KB)] [residual, rc copies].
// !SMEM: [reduction buffer 32 KB][tile sums 8 KB].
template <int B, int RB, bool SMEM>
__host__ __device__ constexpr size_t main_region() {
  return SMEM ? (((size_t)16 << B) > (size_t)(RED_BYTES + TILE_MAX_FLOATS * 4) ? ((size_t)16 << B)
                                                                               : (size_t)(RED_BYTES + TILE_MAX_FLOATS * 4))
              : (size_t)(RED_BYTES + TILE_MAX_FLOATS * 4);
}

template <int B, int RB, int GT, int LT, bool SMEM>
__global__ void __launch_bounds__(THREADS, 1) vptq_cluster_kernel(const Params p) {
  using SM = Stream<GT, B>;
  using SR = Stream<GT, RB ? RB : 1>;
  constexpr int CPW = 32 / LT;                                     // columns per warp step
  constexpr int TF = LT * GT * 8;                                  // floats per tile
  constexpr int Q = (GT < RED_FLOATS / (LT * 8)) ? GT : RED_FLOATS / (LT * 8);  // slots per round
  constexpr int ROUNDS = GT / Q;
  constexpr int RF = LT * Q * 8;                                   // floats per round per warp
  constexpr int DEPTH = GT >= 8 ? 2 : 4;                           // columns in flight per lane
  static_assert(TF <= TILE_MAX_FLOATS && GT % Q == 0, "tile shape");

  extern __shared__ __align__(128) unsigned char smem[];
  unsigned char* s_main = smem;
  unsigned char* s_res = smem + main_region<B, RB, SMEM>();
  float* s_red = reinterpret_cast<float*>(smem);                  // after the main loop
  float* s_tile = reinterpret_cast<float*>(smem + RED_BYTES);     // after the main loop
  __shared__ float s_xsum[WARPS + 1];
  __shared__ __align__(8) uint64_t s_bar;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int cl = p.cl;
  const int t = blockIdx.x / cl, part = blockIdx.x % cl;
  const int j0 = static_cast<int>((long)p.K * part / cl), j1 = static_cast<int>((long)p.K * (part + 1) / cl);

  if constexpr (SMEM) codebook_copy_start(s_main, p.cb, p.kc, cl, &s_bar);

  // This lane's slots and where their bits start in a row. Word reads are clamped to the row (no
  // predicates): a clamped word only feeds slots past N/8, whose outputs are never stored; their
  // indices stay inside the shared buffers (sized 2^B rows) or are clamped (L1 path).
  const int sl = lane % LT, co = lane / LT;
  const long g0 = (long)(t * LT + sl) * GT;
  const long mbit = g0 * B, rbit = g0 * (RB ? RB : 1);
  const int mw0 = min(static_cast<int>(mbit >> 5), p.IW - 1), rw0 = min(static_cast<int>(rbit >> 5), p.RW - 1);
  const int mlim = p.IW - 1 - mw0, rlim = p.RW - 1 - rw0;
  const uint32_t moff = static_cast<uint32_t>(mbit & 31), roff = static_cast<uint32_t>(rbit & 31);
  const int jl = j0 + warp * CPW + co;  // this lane's first column; then every WARPS*CPW
  constexpr int STEP = WARPS * CPW;
  const int ncols = jl < j1 ? (j1 - jl + STEP - 1) / STEP : 0;
  Column<GT, B, RB> ring[DEPTH];
  auto load_idx = [&](Column<GT, B, RB>& c, int ci) {
    const int j = jl + ci * STEP;
    const int32_t* row = p.idx + (long)j * p.IW + mw0;
#pragma unroll
    for (int i = 0; i < SM::WORDS; ++i) c.m[i] = static_cast<uint32_t>(__ldg(row + min(i, mlim)));
    if constexpr (RB > 0) {
      const int32_t* rrow = p.ridx + (long)j * p.RW + rw0;
#pragma unroll
      for (int i = 0; i < SR::WORDS; ++i) c.r[i] = static_cast<uint32_t>(__ldg(rrow + min(i, rlim)));
    }
  };
  auto load = [&](Column<GT, B, RB>& c, int ci) {
    load_idx(c, ci);
    c.x = __ldcg(p.x + jl + ci * STEP);
  };
  // Weights (codebooks, indices) are requested before the dependency wait; x, from the previous kernel,
  // after it. Under PDL this kernel's codebook copy and first index loads overlap the previous one's tail.
  // x is read past L1 (ld.global.cg): this kernel starts before the previous one has written x, so an L1
  // line of x from an earlier call could be stale (seen on the H100: NaN from a buffer's earlier fill).
#pragma unroll
  for (int d = 0; d < DEPTH; ++d)
    if (d < ncols) load_idx(ring[d], d);

  // Residual codebook: replicated rc times in shared memory (lane l reads copy l % rc: the 8 lanes of
  // a quarter warp hit different bank groups).
  const int rsh = (p.rc == 8) ? 7 : 6;
  const uint32_t lane_res = static_cast<uint32_t>(lane & (p.rc - 1)) * 16;
  if constexpr (SMEM && RB > 0) {
    replicate_residual(s_res, p.rcb, p.kr, p.rc, rsh, THREADS);
  }
  if (p.pdl) grid_dep_wait();
#pragma unroll
  for (int d = 0; d < DEPTH; ++d)
    if (d < ncols) ring[d].x = __ldcg(p.x + jl + d * STEP);
  if constexpr (SMEM) codebook_wait(&s_bar);
  __syncthreads();

  float acc[GT][8];
#pragma unroll
  for (int q = 0; q < GT; ++q)
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[q][i] = 0.f;
  float xs = 0.f;
  const bool xbf = p.x_bf16 != 0;

  auto consume = [&](const uint32_t (&um)[SM::NWORDS], const uint32_t (&ur)[SR::NWORDS], float xf) {
#pragma unroll
    for (int q = 0; q < GT; ++q) {
      const uint32_t mi = index_at<B, GT>(um, q);
      uint4 c;
      if constexpr (SMEM) c = *reinterpret_cast<const uint4*>(s_main + mi * 16);
      else c = __ldg(p.cb + min(mi, static_cast<uint32_t>(p.kc - 1)));
      if constexpr (RB > 0) {
        const uint32_t ri = index_at<RB, GT>(ur, q);
        uint4 r;
        if constexpr (SMEM) r = *reinterpret_cast<const uint4*>(s_res + (ri << rsh) + lane_res);
        else r = __ldg(p.rcb + min(ri, static_cast<uint32_t>(p.kr - 1)));
        c = add_h8(c, r);
      }
      fma8(acc[q], xf, c);
    }
  };

  ring_loop(ring, ncols, moff, roff, xs, load, [xbf](uint16_t raw) { return x_to_f32(raw, xbf); }, consume);

  if (p.pdl) grid_dep_launch();  // the next kernel's weight requests may overlap this one's reductions

  // 1. Lanes of the same slot lane (different columns) -> lanes 0..LT-1, butterfly (every lane of a
  //    group ends with the same bits: fp addition is commutative).
#pragma unroll
  for (int o = LT; o < 32; o <<= 1) {
#pragma unroll
    for (int q = 0; q < GT; ++q)
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[q][i] += __shfl_xor_sync(0xFFFFFFFFu, acc[q][i], o);
  }
  // x sum: the lanes of one column group read the same x[j]; sum over the groups only.
#pragma unroll
  for (int o = LT; o < 32; o <<= 1) xs += __shfl_xor_sync(0xFFFFFFFFu, xs, o);

  // 2. Warps -> this CTA's tile sums s_tile[(sl*GT + q)*8 + i], in warp order, ROUNDS x RF floats.
  //    The buffers alias the main codebook: wait until every warp is done with it.
  __syncthreads();
  if (lane == 0) s_xsum[warp] = xs;
#pragma unroll
  for (int rr = 0; rr < ROUNDS; ++rr) {
    if (lane < LT) {
      float4* mine = reinterpret_cast<float4*>(s_red + warp * RF + sl * Q * 8);
#pragma unroll
      for (int qq = 0; qq < Q; ++qq) {
        const int q = rr * Q + qq;
        mine[2 * qq] = make_float4(acc[q][0], acc[q][1], acc[q][2], acc[q][3]);
        mine[2 * qq + 1] = make_float4(acc[q][4], acc[q][5], acc[q][6], acc[q][7]);
      }
    }
    __syncthreads();
    for (int f = tid; f < RF; f += THREADS) {
      float sum = 0.f;
#pragma unroll
      for (int w = 0; w < WARPS; ++w) sum += s_red[w * RF + f];
      const int s = f / (Q * 8), qq = (f / 8) % Q, i = f % 8;
      s_tile[(s * GT + rr * Q + qq) * 8 + i] = sum;
    }
    __syncthreads();
  }
  if (tid == 0) {
    float sx = 0.f;
    for (int w = 0; w < WARPS; ++w) sx += s_xsum[w];
    s_xsum[WARPS] = sx;
  }

  // 3. Cluster: rank `part` owns floats [TF*part/cl, TF*(part+1)/cl) of the tile; it sums them over
  //    ranks 0..cl-1 in order from their shared memory, applies scale / bias and stores y.
  if (cl > 1) cluster_sync_all();  // every rank's s_tile and x sum are final
  else __syncthreads();
  const int f0 = TF * part / cl, f1 = TF * (part + 1) / cl;
  const long n_base = (long)t * TF;
  const uint32_t tile_addr = smem_u32(s_tile), xs_addr = smem_u32(&s_xsum[WARPS]);
  float sx = 0.f;
  if (p.bias != nullptr) {
    for (int r = 0; r < cl; ++r) sx += (cl > 1) ? ld_peer(peer_addr(xs_addr, r)) : s_xsum[WARPS];
  }
  for (int f = f0 + tid; f < f1; f += THREADS) {
    const long n = n_base + f;
    float y = 0.f;
    if (cl > 1) {  // four peer loads in flight at a time, summed in rank order
      for (int r = 0; r < cl; r += 4) {
        float v[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) v[u] = (r + u < cl) ? ld_peer(peer_addr(tile_addr + f * 4, r + u)) : 0.f;
#pragma unroll
        for (int u = 0; u < 4; ++u) if (r + u < cl) y += v[u];
      }
    } else {
      y = s_tile[f];
    }
    if (n < p.N) {
      if (p.scale != nullptr) y *= __half2float(p.scale[n]);
      if (p.bias != nullptr) y += __half2float(p.bias[n]) * sx;
      if (p.x_bf16) reinterpret_cast<__nv_bfloat16*>(p.out)[n] = __float2bfloat16_rn(y);
      else reinterpret_cast<__half*>(p.out)[n] = __float2half_rn(y);
    }
  }
  if (cl > 1) cluster_sync_all();  // peers may still read this CTA's shared memory
}

template <int B, int RB, bool SMEM>
__host__ __device__ constexpr size_t smem_bytes(int rc) {
  return main_region<B, RB, SMEM>() + ((SMEM && RB) ? ((size_t)rc * 16 << RB) : 0);
}

template <int B, int RB, int GT, int LT, bool SMEM>
int launch(const Params& p, int tiles, cudaStream_t stream) {
  auto kern = vptq_cluster_kernel<B, RB, GT, LT, SMEM>;
  const size_t smem = smem_bytes<B, RB, SMEM>(p.rc);
  // per kernel and device (launch_ex.cuh); the size follows rc, so it is asked for on every launch
  if (const int e = set_attribute_once(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem))) {
    return refused(static_cast<cudaError_t>(e));
  }
  if (const int e = set_attribute_once(kern, cudaFuncAttributeNonPortableClusterSizeAllowed, 1)) {
    return refused(static_cast<cudaError_t>(e));
  }
  const LaunchConfig lc(dim3(tiles * p.cl), THREADS, smem, p.pdl, stream, dim3(p.cl, 1, 1));
  cudaError_t e = cudaLaunchKernelEx(&lc.cfg, kern, p);
  if (e != cudaSuccess) return refused(e);
  return static_cast<int>(cudaGetLastError());
}

// The tile shapes compiled: (GT vector slots per lane, LT lanes per tile).
#define VPTQ_TILES(X) X(1, 8) X(1, 16) X(1, 32) X(2, 16) X(2, 32) X(4, 32) X(8, 32)

template <bool SMEM>
int by_tile(int gt, int lt, const Params& p, int tiles, cudaStream_t s) {
#define VPTQ_TRY(G, L) if (gt == G && lt == L) return launch<VPTQ_B, VPTQ_RB, G, L, SMEM>(p, tiles, s);
  VPTQ_TILES(VPTQ_TRY)
#undef VPTQ_TRY
  return -1;
}

// Largest number of clusters of `cl` CTAs of this instantiation resident at once (0 if it cannot run).
template <int GT, int LT, bool SMEM>
int max_active(int cl, int rc) {
  auto k = vptq_cluster_kernel<VPTQ_B, VPTQ_RB, GT, LT, SMEM>;
  const size_t smem = smem_bytes<VPTQ_B, VPTQ_RB, SMEM>(rc);
  if (set_attribute_once(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) != 0 ||
      set_attribute_once(k, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != 0) {
    cudaGetLastError();  // a refused attribute also sets the runtime's last error
    return 0;
  }
  const LaunchConfig lc(dim3(cl), THREADS, smem, false, 0, dim3(cl, 1, 1));
  int n = 0;
  return cudaOccupancyMaxActiveClusters(&n, k, &lc.cfg) == cudaSuccess ? n : 0;
}

}  // namespace

extern "C" {

// This library's (main, residual) index bits: one library per pair (built on first use).
int vptq_cluster_bits() { return VPTQ_B * 100 + VPTQ_RB; }

// Dynamic shared-memory bytes of a launch (smem = 1: codebooks in shared memory).
long vptq_cluster_smem_bytes(int smem, int rc) {
  return smem ? (long)smem_bytes<VPTQ_B, VPTQ_RB, true>(rc) : (long)smem_bytes<VPTQ_B, VPTQ_RB, false>(rc);
}

// Largest number of clusters of `cl` CTAs resident at once for this tile shape (0 if it cannot run).
int vptq_cluster_max_active(int gt, int lt, int smem, int cl, int rc) {
  int n = -1;
#define VPTQ_OCC(G, L)                                                                                  \
  if (gt == G && lt == L) n = smem ? max_active<G, L, true>(cl, rc) : max_active<G, L, false>(cl, rc);
  VPTQ_TILES(VPTQ_OCC)
#undef VPTQ_OCC
  cudaGetLastError();
  return n;
}

// Returns 0, a cudaError_t, -1 for a tile shape that is not compiled, -2 for bits this library was not
// built for, -3 for a bad cluster size or copy count. cl: CTAs per tile (1..16, the split of K). pdl = 1:
// programmatic dependent launch (weights requested before the wait for the previous kernel, x after it;
// the weights must not be written by the kernel launched just before, as a model's weights are not).
int vptq_cluster_gemv(const void* x, int x_is_bf16, const int32_t* idx, const void* cb, int kc, int b, const int32_t* ridx,
                      const void* rcb, int kr, int rb, int rc, const void* scale, const void* bias, void* out, int N, int K,
                      int IW, int RW, int gt, int lt, int cl, int smem, int pdl, void* stream_) {
  if (b != VPTQ_B || rb != VPTQ_RB) return -2;
  if (cl < 1 || cl > 16 || (rc != 4 && rc != 8)) return -3;
  Params p{static_cast<const uint16_t*>(x), idx, static_cast<const uint4*>(cb), ridx, static_cast<const uint4*>(rcb),
           static_cast<const __half*>(scale), static_cast<const __half*>(bias), out, kc, kr, rc, N, K, IW, RW, cl, x_is_bf16,
           pdl};
  const int tiles = (N / 8 + gt * lt - 1) / (gt * lt);
  cudaStream_t s = static_cast<cudaStream_t>(stream_);
  return smem ? by_tile<true>(gt, lt, p, tiles, s) : by_tile<false>(gt, lt, p, tiles, s);
}

}  // extern "C"
