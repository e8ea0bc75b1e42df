// VPTQ (compress.vptq v1) decode GEMV, batch 1, with both codebooks in shared memory.
//
// Math (contract: notes/VPTQ_FORMAT.md): for n = g*8 + i,
//   y[n] = s[n] * sum_j x[j] * (C[idx[j,g], i] + R[ridx[j,g], i]) + t[n] * sum_j x[j].
// Why CUDA C++: every weight vector is a random 16-byte codebook row. Through L1 (the Triton kernel)
// each warp-wide gather touches 32 cache lines and costs about 32 SM clocks; from shared memory the
// same gather costs the bank conflicts of 32 random 16-byte rows (measured on the H100: 9.3 clocks
// per warp read, kernels/csrc/vptq_lds_bench.cu). Triton 3.6 gives no explicit shared memory for a
// gather.
//
// Layout in shared memory (per CTA, loaded once; one CTA per SM):
//   main codebook  k x 16 B  (64 KB for 4096, 128 KB for 8192); after the main loop the same bytes
//     hold the cross-warp reduction buffer (16 warps x 2 KB), so it costs no extra shared memory
//     (shared memory not taken is L1, which the overlapping 4-byte index loads rely on).
//   residual codebook replicated rc = 8 (or 4) times: row r at r*rc*16 + c*16, lane l reads copy
//     l % rc, so the 8 lanes of a quarter warp hit different 16-byte bank groups (measured 4.3
//     clocks per warp read, the minimum for 512 bytes).
// Work: a "tile" is 32 lanes x GT vector slots (GT*8*32 outputs). CTA c works on tile c / cpt,
// columns [K*p/cpt, K*(p+1)/cpt) with p = c % cpt; its 16 warps split those columns (interleaved),
// reduce in shared memory in fixed order, and write one partial per CTA to a workspace. The last
// CTA of a tile to arrive (counter) sums the tile's cpt partials in CTA order, applies scale/bias
// and writes y: one launch, deterministic (no float atomics).
// Indices are read straight from the packed stream: lane l of tile t owns slots (t*32+l)*GT ..+GT,
// whose GT*B bits start at bit (t*32+l)*GT*B of each row; the words are loaded with 4-byte loads
// and shifted once by the lane's bit offset, after which every index sits at a compile-time bit.
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "launch_ex.cuh"
#include "vptq_common.cuh"

namespace {

// Build-time variants (kernels/vptq_cuda.py builds one library per variant):
//   VPTQ_WARPS: warps per CTA (one CTA per SM). 16 caps a thread at 128 registers, where GT=8 with a
//     residual spills a few ring registers inside the loop; 8 allows 255.
//   VPTQ_ROLL: 1 = rolled main loop (one column per iteration, ring shifted by register moves): a
//     third of the code, which is fetched cold after every L2 flush.
#ifndef VPTQ_WARPS
#define VPTQ_WARPS 16
#endif
#ifndef VPTQ_ROLL
#define VPTQ_ROLL 0
#endif
//   VPTQ_BULK: 1 = without clusters the main codebook also comes by the bulk-copy engine (a few 16 KB
//     instructions from one thread) instead of one 16-byte cp.async per row from every thread: session 2
//     measured the per-thread copy at 14-25 B per SM clock (bound by outstanding requests).
#ifndef VPTQ_BULK
#define VPTQ_BULK 0
#endif
constexpr int WARPS = VPTQ_WARPS;
constexpr int THREADS = WARPS * 32;
constexpr int RED_BYTES = WARPS * 512 * 4;  // cross-warp reduction buffer (aliases the main codebook)
// Columns of indices in flight per warp (register ring). Bytes in flight per SM must cover DRAM
// latency at the shared-memory-bound rate (~10 KB): 16 warps x 2 x ~700 B or 8 warps x 4 x ~700 B.
// 16 warps with GT=8 get 2: at 3 ptxas spilled inside the loop.
template <int GT> __host__ __device__ constexpr int depth_for() { return (WARPS <= 8 || GT < 8) ? 4 : 2; }

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

// Cluster multicast of the main codebook (Hopper bulk copy engine): CTA rank r of a cluster of cl
// copies slice r of the codebook into the shared memory of every CTA of the cluster, so the L2
// serves each codebook byte once per cluster instead of once per CTA.
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
// The same copy without a cluster: thread 0 issues it; every thread must see the initialised barrier
// before it waits on it (the __syncthreads).
__device__ __forceinline__ void load_codebook_bulk(unsigned char* s_main, const uint4* cb, int kc, uint64_t* bar) {
  const uint32_t b = smem_u32(bar);
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(b));
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(b), "r"(static_cast<uint32_t>(kc) * 16u)
                 : "memory");
    for (uint32_t r = 0; r < static_cast<uint32_t>(kc); r += 1024) {
      const uint32_t n = min(1024u, static_cast<uint32_t>(kc) - r) * 16u;
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                   ::"r"(smem_u32(s_main + r * 16)), "l"(cb + r), "r"(n), "r"(b) : "memory");
    }
  }
  __syncthreads();
}
__device__ __forceinline__ uint32_t ld_word(const int32_t* p) {
  return static_cast<uint32_t>(__ldg(p));
}

// Output element of float f of a tile's partial (layout of the CTA reduction below: round rr, float4 k4
// of lane ln, component c): n = ((t*32 + ln)*GT + q)*8 + i.
template <int GT>
__device__ __forceinline__ long tile_output(int t, int f) {
  const int f4 = f / 4, c = f % 4;
  const int rr = f4 / 128, r = f4 % 128, ln = r % 32, k4 = r / 32;
  const int q = 2 * rr + k4 / 2, i0 = (k4 % 2) * 4;
  return ((long)(t * 32 + ln) * GT + q) * 8 + i0 + c;
}

// Split-K tail launched cooperatively (all CTAs resident): every CTA of tile t waits until the tile's cpt
// partials are stored, then sums its own slice of the tile over them. The last-CTA tail below reads all
// cpt partials from one SM (cpt x 8 KB at GT = 8: the 5-9 us session 2 measured); here each CTA reads
// about 8 KB, with G threads per float4 (each a fixed run of partials, combined in shared memory in
// order: the same bytes every call). counters[t] counts arrivals, counters[T + t] departures; the last
// to leave resets both (every CTA has passed the wait by then), so graph replays start from zero.
template <typename XT, int GT>
__device__ void cooperative_tail(const float* __restrict__ ws, int* __restrict__ counters, const __half* __restrict__ scale,
                                 const __half* __restrict__ bias, XT* __restrict__ out, int N, int t, int part, int cpt) {
  constexpr int TILEF = 32 * GT * 8, SLOTF = TILEF + 4, F4 = TILEF / 4;
  __shared__ float4 s_part[THREADS];
  __shared__ float s_sx;
  const int tid = threadIdx.x;
  const int T = (N / 8 + 32 * GT - 1) / (32 * GT);
  if (tid == 0) {
    asm volatile("fence.acq_rel.gpu;\n" ::: "memory");
    atomicAdd(counters + t, 1);
    int seen = 0;
    do {
      asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(seen) : "l"(counters + t) : "memory");
    } while (seen < cpt);
    asm volatile("fence.acq_rel.gpu;\n" ::: "memory");
  }
  __syncthreads();
  const float* parts = ws + (long)t * cpt * SLOTF;
  // This CTA's float4s [a, b) of the tile; G threads per float4, thread h of a group sums partials
  // [cpt*h/G, cpt*(h+1)/G).
  const int a = F4 * part / cpt, b = F4 * (part + 1) / cpt, S = b - a;
  int G = 1;
  while (G * 2 * S <= THREADS && G * 2 <= cpt) G *= 2;
  const int j = tid % S, h = tid / S;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  if (S > 0 && h < G) {
    const int p0 = cpt * h / G, p1 = cpt * (h + 1) / G;
#pragma unroll 4
    for (int p = p0; p < p1; ++p) {
      const float4 v = __ldcg(reinterpret_cast<const float4*>(parts + (long)p * SLOTF) + a + j);
      acc.x += v.x; acc.y += v.y; acc.z += v.z; acc.w += v.w;
    }
    s_part[h * S + j] = acc;
  }
  if (tid == THREADS - 1) {  // the x sum, in partial order (only bias needs it)
    float sx = 0.f;
    if (bias != nullptr)
      for (int p = 0; p < cpt; ++p) sx += __ldcg(parts + (long)p * SLOTF + TILEF);
    s_sx = sx;
  }
  __syncthreads();
  if (S > 0 && tid < S) {
    float4 y4 = s_part[tid];
    for (int hh = 1; hh < G; ++hh) {
      const float4 v = s_part[hh * S + tid];
      y4.x += v.x; y4.y += v.y; y4.z += v.z; y4.w += v.w;
    }
    const float yv[4] = {y4.x, y4.y, y4.z, y4.w};
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const long n = tile_output<GT>(t, (a + tid) * 4 + c);
      if (n < N) {
        float y = yv[c];
        if (scale != nullptr) y *= __half2float(scale[n]);
        if (bias != nullptr) y += __half2float(bias[n]) * s_sx;
        out[n] = from_f32<XT>(y);
      }
    }
  }
  if (tid == 0) {
    const int prev = atomicAdd(counters + T + t, 1);
    if (prev == cpt - 1) {
      counters[t] = 0;
      counters[T + t] = 0;
    }
  }
}

template <typename XT, int B, int RB, int GT, bool ROLL>
__global__ void __launch_bounds__(THREADS, 1)
vptq_gemv_kernel(const uint16_t* __restrict__ x, const int32_t* __restrict__ idx, const uint4* __restrict__ cb, int kc,
                 const int32_t* __restrict__ ridx, const uint4* __restrict__ rcb, int kr, int rc,
                 const __half* __restrict__ scale, const __half* __restrict__ bias, XT* __restrict__ out,
                 float* __restrict__ ws, int* __restrict__ counters, int N, int K, int IW, int RW, int cpt, int cl,
                 int mode, int coop) {
  using SM = Stream<GT, B>;
  using SR = Stream<GT, RB ? RB : 1>;
  constexpr int SLOTS = 32 * GT;           // vector slots per tile
  constexpr int TILEF = SLOTS * 8;         // floats per tile
  constexpr int ROUNDS = GT / 2;           // reduction rounds, 16 floats per lane each
  constexpr int SLOTF = TILEF + 4;         // workspace floats per partial (+ x sum, 16-byte aligned)
  constexpr int DEPTH = depth_for<GT>();

  extern __shared__ __align__(16) unsigned char smem[];
  unsigned char* s_main = smem;
  // Regions sized for every index a B-bit field can hold (2^B rows), not just the kc centroids: the
  // lanes past N/8 decode clamped words into arbitrary indices, which must stay inside the buffer.
  unsigned char* s_res = smem + max((size_t)16 << B, (size_t)RED_BYTES);
  float* s_red = reinterpret_cast<float*>(smem);  // after the main loop only
  __shared__ float s_xsum[WARPS];
  __shared__ int s_last;
  __shared__ __align__(8) uint64_t s_bar;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int NG = N / 8;
  const int T = (NG + SLOTS - 1) / SLOTS;
  const int t = blockIdx.x / cpt, part = blockIdx.x % cpt;
  const bool active = t < T;  // a cluster launch rounds the grid up; the extra CTAs only help load
  const int j0 = static_cast<int>((long)K * part / cpt), j1 = static_cast<int>((long)K * (part + 1) / cpt);

  // 1. Main codebook copy starts (async), then this warp's first index columns are requested, so
  //    the two memory round trips overlap, then the residual copies are written, then wait.
  if (mode != 2) {
    if (cl > 1) {
      load_codebook_multicast(s_main, cb, kc, cl, &s_bar);
    } else if (VPTQ_BULK) {
      load_codebook_bulk(s_main, cb, kc, &s_bar);
    } else {
#pragma unroll 4
      for (int r = tid; r < kc; r += THREADS) {
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_u32(s_main + (size_t)r * 16)), "l"(cb + r));
      }
      asm volatile("cp.async.commit_group;\n" ::);
    }
  }

  // Warm the TLB and L2 for what the tail touches (counter, own partial, the tile's partials, scale,
  // bias, y): after an L2 flush each first touch is a page walk plus a DRAM trip, and the tail would
  // otherwise take them one after another. Real loads (a prefetch may be dropped on a TLB miss),
  // waited for before the codebook barrier, where they overlap the codebook copy.
  uint32_t warm = 0;
  if (active && mode == 0) {
    constexpr int LINES = SLOTS * 8 * 2 / 128;  // 128-byte lines of one tile's fp16 outputs
    const long tile_n0 = (long)t * SLOTS * 8;
    const int line = tid - 3;
    const uint32_t* p = nullptr;
    if (tid == 0) p = reinterpret_cast<const uint32_t*>(counters + t);
    if (tid == 1) p = reinterpret_cast<const uint32_t*>(ws + (long)blockIdx.x * SLOTF);
    if (tid == 2) p = reinterpret_cast<const uint32_t*>(ws + (long)t * cpt * SLOTF);
    if (line >= 0 && line < 3 * LINES) {
      const long n = tile_n0 + (long)(line % LINES) * 64;
      const int which = line / LINES;
      if (n < N) {
        if (which == 0 && scale != nullptr) p = reinterpret_cast<const uint32_t*>(scale + (n & ~1L));
        if (which == 1 && bias != nullptr) p = reinterpret_cast<const uint32_t*>(bias + (n & ~1L));
        if (which == 2) p = reinterpret_cast<const uint32_t*>(out + (n & ~1L));
      }
    }
    if (p != nullptr) warm = __ldcg(p);
  }

  // This lane's slots and where their bits start in a row.
  // Word reads are clamped to the row (no predicates, so no extra registers): a clamped word only
  // feeds bits past the lane's last slot or slots >= N/8, whose outputs are never written.
  const long g0 = (long)(t * 32 + lane) * GT;
  const long mbit = g0 * B, rbit = g0 * (RB ? RB : 1);
  const int mw0 = min(static_cast<int>(mbit >> 5), IW - 1), rw0 = min(static_cast<int>(rbit >> 5), RW - 1);
  const int mlim = IW - 1 - mw0, rlim = RW - 1 - rw0;
  const uint32_t moff = static_cast<uint32_t>(mbit & 31), roff = static_cast<uint32_t>(rbit & 31);
  // Columns of this warp: j0 + warp, j0 + warp + WARPS, ...
  const int ncols = (active && (mode == 0 || mode == 3) && j1 - j0 > warp) ? (j1 - j0 - warp + WARPS - 1) / WARPS : 0;
  Column<GT, B, RB> ring[DEPTH];
  auto load = [&](Column<GT, B, RB>& c, int ci) {
    const int j = j0 + warp + ci * WARPS;
    const int32_t* row = idx + (long)j * IW + mw0;
#pragma unroll
    for (int i = 0; i < SM::WORDS; ++i) c.m[i] = ld_word(row + min(i, mlim));
    if constexpr (RB > 0) {
      const int32_t* rrow = ridx + (long)j * RW + rw0;
#pragma unroll
      for (int i = 0; i < SR::WORDS; ++i) c.r[i] = ld_word(rrow + min(i, rlim));
    }
    c.x = __ldg(x + j);
  };
#pragma unroll
  for (int d = 0; d < DEPTH; ++d)
    if (d < ncols) load(ring[d], d);

  const int rsh = (rc == 8) ? 7 : 6;  // residual row stride rc*16 bytes
  const uint32_t lane_res = static_cast<uint32_t>(lane & (rc - 1)) * 16;
  if constexpr (RB > 0) {
    if (mode != 2) {
      replicate_residual(s_res, rcb, kr, rc, rsh, THREADS);
    }
  }
  if (warm == 0x7FC00001u) s_last = 1;  // uses the warming load (waits for it); never true in practice
  if (mode != 2) {
    if (cl > 1) {
      codebook_wait(&s_bar);
      cluster_sync_all();  // every CTA has all its bytes: no bulk copy is left in flight when one exits
    } else if (VPTQ_BULK) {
      codebook_wait(&s_bar);
    } else {
      asm volatile("cp.async.wait_all;\n" ::);
    }
  }
  __syncthreads();
  if ((mode != 0 && mode != 3) || !active) return;  // mode 1/2: timing probes of the prologue (no output)

  float acc[GT][8];
#pragma unroll
  for (int q = 0; q < GT; ++q)
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[q][i] = 0.f;
  float xs = 0.f;

  // One column: shift the loaded words to bit 0, look up GT main + residual rows, accumulate.
  auto consume = [&](const uint32_t (&um)[SM::NWORDS], const uint32_t (&ur)[SR::NWORDS], float xf) {
#pragma unroll
    for (int q = 0; q < GT; ++q) {
      uint4 c = *reinterpret_cast<const uint4*>(s_main + index_at<B, GT>(um, q) * 16);
      if constexpr (RB > 0)
        c = add_h8(c, *reinterpret_cast<const uint4*>(s_res + (index_at<RB, GT>(ur, q) << rsh) + lane_res));
      fma8(acc[q], xf, c);
    }
  };

  if constexpr (ROLL) {
    // Rolled: one column per iteration, the ring shifted down by register moves (a third of the
    // code of the unrolled ring; the whole kernel's code is fetched cold after each L2 flush).
#pragma unroll 1
    for (int ci = 0; ci < ncols; ++ci) {
      uint32_t um[SM::NWORDS], ur[SR::NWORDS];
      shift_words<GT, B>(ring[0].m, moff, um);
      if constexpr (RB > 0) shift_words<GT, RB>(ring[0].r, roff, ur);
      const float xf = to_f32<XT>(ring[0].x);
      xs += xf;
#pragma unroll
      for (int d = 0; d + 1 < DEPTH; ++d) ring[d] = ring[d + 1];
      if (ci + DEPTH < ncols) load(ring[DEPTH - 1], ci + DEPTH);
      consume(um, ur, xf);
    }
  } else {
    ring_loop(ring, ncols, moff, roff, xs, load, [](uint16_t raw) { return to_f32<XT>(raw); }, consume);
  }

  if (mode == 3) {  // timing probe: the main loop without the tail (the store keeps the loop alive)
    if (acc[0][0] == 1.2345e-30f && acc[GT - 1][7] == 1.2345e-30f) out[0] = from_f32<XT>(xs);
    return;
  }

  // 2. Reduce the 16 warps' partials in fixed order, ROUNDS x 512 floats, into this CTA's slot.
  //    The buffer is the main codebook's bytes: wait until every warp is done with it.
  __syncthreads();
  float* slot = ws + (long)blockIdx.x * SLOTF;
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
    for (int f = tid; f < 512; f += THREADS) {
      float sum = 0.f;
#pragma unroll
      for (int w = 0; w < WARPS; ++w) sum += s_red[w * 512 + f];
      __stcg(slot + rr * 512 + f, sum);
    }
    __syncthreads();
  }
  if (tid == 0) {
    float sx = 0.f;
    for (int w = 0; w < WARPS; ++w) sx += s_xsum[w];
    __stcg(slot + TILEF, sx);
  }
  // Release the partial / acquire the others' with one gpu-scope fence pair by one thread around the
  // counter (bar.sync orders the CTA's other threads): __threadfence() in every thread compiles to
  // MEMBAR.SC.GPU, a sequentially consistent fence per thread.
  __syncthreads();
  if (coop) {
    cooperative_tail<XT, GT>(ws, counters, scale, bias, out, N, t, part, cpt);
    return;
  }
  if (tid == 0) {
    asm volatile("fence.acq_rel.gpu;\n" ::: "memory");
    const int prev = atomicAdd(counters + t, 1);
    asm volatile("fence.acq_rel.gpu;\n" ::: "memory");
    s_last = (prev == cpt - 1);
  }
  __syncthreads();
  if (!s_last) return;

  // 3. Last CTA of tile t: sum the partials in CTA order, apply scale / bias, write y.
  //    Each thread owns PER float4s of the tile (or, with SPLIT threads per float4, a share of the
  //    partials, combined in shared memory in fixed order); the partials sit in L2.
  const float* parts = ws + (long)t * cpt * SLOTF;
  float sx = 0.f;
  if (bias != nullptr) {  // every warp computes the same x sum in the same order
    for (int p = lane; p < cpt; p += 32) sx += __ldcg(parts + (long)p * SLOTF + TILEF);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sx += __shfl_xor_sync(0xFFFFFFFFu, sx, o);
  }
  constexpr int F4 = TILEF / 4;                          // float4s per tile: 512 (GT=8) or 256 (GT=4)
  constexpr int SPLIT = THREADS > F4 ? THREADS / F4 : 1;  // threads per float4 (16 warps, GT=4: 2)
  constexpr int PER = F4 > THREADS ? F4 / THREADS : 1;    // float4s per thread (8 warps, GT=8: 2)
  constexpr int SPAN = THREADS / SPLIT;                   // threads covering the tile once
  const int f4base = tid % SPAN, h = tid / SPAN;
  const int p0 = cpt * h / SPLIT, p1 = cpt * (h + 1) / SPLIT;
  float4 s4[PER];
#pragma unroll
  for (int e = 0; e < PER; ++e) s4[e] = make_float4(0.f, 0.f, 0.f, 0.f);
  // PER x 8 independent L2 loads in flight per thread; the sums stay in partial order.
#pragma unroll 8
  for (int p = p0; p < p1; ++p) {
#pragma unroll
    for (int e = 0; e < PER; ++e) {
      const float4 v = __ldcg(reinterpret_cast<const float4*>(parts + (long)p * SLOTF) + f4base + e * SPAN);
      s4[e].x += v.x; s4[e].y += v.y; s4[e].z += v.z; s4[e].w += v.w;
    }
  }
  if constexpr (SPLIT > 1) {
    float4* s_half = reinterpret_cast<float4*>(s_red);
    if (h == 1) s_half[f4base] = s4[0];
    __syncthreads();
    if (h == 0) {
      const float4 v = s_half[f4base];
      s4[0].x += v.x; s4[0].y += v.y; s4[0].z += v.z; s4[0].w += v.w;
    }
  }
  if (h == 0) {
#pragma unroll
    for (int e = 0; e < PER; ++e) {
      const int f4 = f4base + e * SPAN;
      // Buffer position f = 4*f4 + comp = rr*512 + (k4*32 + lane')*4 + comp -> slot q, element i of lane'.
      const int rr = f4 / 128, r = f4 % 128, ln = r % 32, k4 = r / 32;
      const int q = 2 * rr + k4 / 2, i0 = (k4 % 2) * 4;
      const long n0 = ((long)(t * 32 + ln) * GT + q) * 8 + i0;
      const float sv[4] = {s4[e].x, s4[e].y, s4[e].z, s4[e].w};
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
  }
  if (tid == 0) counters[t] = 0;  // ready for the next call (and CUDA-graph replays)
}

__host__ __device__ inline size_t vptq_smem(int b, int rb, int rc) {
  const size_t main = ((size_t)16 << b) > (size_t)RED_BYTES ? ((size_t)16 << b) : (size_t)RED_BYTES;
  return main + (rb ? ((size_t)rc * 16 << rb) : 0);
}

// Launch geometry: grid = T * cpt CTAs (rounded up to whole clusters).
template <typename XT, int B, int RB, int GT, bool ROLL>
int launch_one(const void* x, const int32_t* idx, const void* cb, int kc, const int32_t* ridx, const void* rcb, int kr,
               int rc, const void* scale, const void* bias, void* out, float* ws, int* counters, int N, int K, int IW,
               int RW, int cpt, int cl, int mode, int coop, cudaStream_t stream) {
  const int NG = N / 8, T = (NG + 32 * GT - 1) / (32 * GT);
  const size_t smem = vptq_smem(B, RB, rc);
  auto kern = vptq_gemv_kernel<XT, B, RB, GT, ROLL>;
  // per kernel and device (launch_ex.cuh)
  if (const int e = set_attribute_once(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem))) {
    return refused(static_cast<cudaError_t>(e));
  }
  if (cl < 1 || cl > 8 || cpt < 1 || (coop && cl > 1)) return -3;
  const int grid = (T * cpt + cl - 1) / cl * cl;
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[2];
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(THREADS);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  if (cl > 1) {
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = cl;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
  }
  if (coop) {  // every CTA resident at once, or the launch fails (the tail waits for the tile's CTAs)
    attr[0].id = cudaLaunchAttributeCooperative;
    attr[0].val.cooperative = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
  }
  cudaError_t e = cudaLaunchKernelEx(&cfg, kern, static_cast<const uint16_t*>(x), idx, static_cast<const uint4*>(cb), kc, ridx,
                                     static_cast<const uint4*>(rcb), kr, rc, static_cast<const __half*>(scale),
                                     static_cast<const __half*>(bias), static_cast<XT*>(out), ws, counters, N, K, IW, RW, cpt,
                                     cl, mode, coop);
  if (e != cudaSuccess) return refused(e);
  return static_cast<int>(cudaGetLastError());
}

#define VPTQ_ARGS x, idx, cb, kc, ridx, rcb, kr, rc, scale, bias, out, ws, counters, N, K, IW, RW, cpt, cl, mode, coop, stream
#define VPTQ_PARAMS const void *x, const int32_t *idx, const void *cb, int kc, const int32_t *ridx, const void *rcb, int kr, \
    int rc, const void *scale, const void *bias, void *out, float *ws, int *counters, int N, int K, int IW, int RW, int cpt, \
    int cl, int mode, int coop, cudaStream_t stream

template <typename XT, int B, int RB, int GT>
int by_roll(int roll, VPTQ_PARAMS) {
  if (roll != VPTQ_ROLL) return -1;  // one loop form per library
  return launch_one<XT, B, RB, GT, VPTQ_ROLL != 0>(VPTQ_ARGS);
}

template <typename XT, int B, int RB>
int by_gt(int gt, int roll, VPTQ_PARAMS) {
  if (gt == 4) return by_roll<XT, B, RB, 4>(roll, VPTQ_ARGS);
  if (gt == 8) return by_roll<XT, B, RB, 8>(roll, VPTQ_ARGS);
  return -1;
}

template <typename XT, int B>
int by_rb(int rb, int gt, int roll, VPTQ_PARAMS) {
  switch (rb) {
    case 0: return by_gt<XT, B, 0>(gt, roll, VPTQ_ARGS);
    case 8: return by_gt<XT, B, 8>(gt, roll, VPTQ_ARGS);
    case 9: return by_gt<XT, B, 9>(gt, roll, VPTQ_ARGS);
  }
  return -1;
}

template <typename XT>
int by_b(int b, int rb, int gt, int roll, VPTQ_PARAMS) {
  switch (b) {
    case 12: return by_rb<XT, 12>(rb, gt, roll, VPTQ_ARGS);
    case 13: return by_rb<XT, 13>(rb, gt, roll, VPTQ_ARGS);
  }
  return -1;
}

}  // namespace

extern "C" {

// Workspace floats: one partial of (32*gt*8 + 4) floats per CTA.
long vptq_gemv_workspace_floats(int N, int gt, int cpt) {
  const int T = (N / 8 + 32 * gt - 1) / (32 * gt);
  return (long)(T * cpt + 8) * (32 * gt * 8 + 4);
}

// The build's variant: bulk * 1000 + warps * 10 + roll.
int vptq_gemv_variant() { return VPTQ_BULK * 1000 + VPTQ_WARPS * 10 + VPTQ_ROLL; }

// Dynamic shared-memory bytes per CTA for b-bit main and rb-bit residual indices (rb = 0: none).
long vptq_gemv_smem_bytes(int b, int rb, int rc) { return (long)vptq_smem(b, rb, rc); }

// Returns 0, a cudaError_t, -1 for a (bits, residual bits, gt) combination that is not compiled, or
// -3 for a bad cluster size / cpt. cpt: CTAs per tile (split of K). cl = 1: plain launch; 2..8:
// main-codebook multicast within clusters. rc: residual copies, 8 or 4. roll: rolled main loop.
// mode: 0 = compute; timing probes that write no output: 1 = codebook load only, 2 = launch only,
// 3 = no tail (main loop, then exit). coop = 1: cooperative launch, every CTA sums a slice of its tile
// (cooperative_tail; cl must be 1).
// counters: at least 2 x `tiles` int32 zeros (left at zero on return).
int vptq_gemv(const void* x, int x_is_bf16, const int32_t* idx, const void* cb, int kc, int b, const int32_t* ridx,
              const void* rcb, int kr, int rb, int rc, const void* scale, const void* bias, void* out, float* ws,
              int* counters, int N, int K, int IW, int RW, int gt, int cpt, int cl, int roll, int mode, int coop,
              void* stream_) {
  cudaStream_t stream = static_cast<cudaStream_t>(stream_);
  if (rc != 4 && rc != 8) return -3;
  if (x_is_bf16) return by_b<__nv_bfloat16>(b, rb, gt, roll, VPTQ_ARGS);
  return by_b<__half>(b, rb, gt, roll, VPTQ_ARGS);
}

}  // extern "C"
