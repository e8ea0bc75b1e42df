// Weight-only int8 on 2:4 weights (W8A16 2:4) for 1..8 tokens, on the sparse tensor cores: compress.sparse24 int8
// values as they are, their 2-bit positions repacked once at load (kernels/sp24_w16_gemv.py `pack_meta_fragments`).
//
// Math: y[m, n] = (sum_k x[m, k] * v[n, k]) * sw[n], the int8 values widened exactly to fp16 / bf16, fp32 sums
// (the tensor core's), output in x's dtype (kernels.sparse24.sparse24_w8a16_linear_ref).
//
// Why CUDA C++: the Triton GEMV (kernels/sparse24.py `_sparse24_gemv_w16_kernel`) gathers each kept activation with a
// PRMT and converts and multiplies every value on its own, ~28.5 instructions per value word of 4 values; it streams
// the 8B / 70B layers at 1.7-2.2 TB/s (session 18), where the W8A8 2:4 GEMV with dp4a streams the same bytes at
// 2.4-2.8. mma.sp takes the positions as they are, so a value word costs one LOP3, two PRMTs and two HSUB2s (fp16),
// and one mma serves 16 rows x 32 k.
//
// Weights go straight from global memory to registers (ld.global.nc, L2 evict-first), DEPTH chunks ahead, with no
// shared-memory ring: the Triton 2:4 GEMVs that load this way stream faster than the ring kernels of i8_gemv.cu
// (2:4 W8A8 at one token, session 18: 52.5 us against 66.6 us on 70B gate/up).
//
// Fragments (PTX ISA, mma.sp m16n8k32 .f16 / .bf16; lane = 4 g + t): A is 16 rows x 16 kept values (32 k, 8 groups
// of 4 a row): a0 = row g, kept values 2t, 2t + 1 (group t); a1 = row g + 8, same; a2 = row g, kept 2t + 8, 2t + 9
// (group t + 4); a3 = row g + 8, same. B is 32 k x 8 tokens: b_j = k 8j + 2t, 8j + 2t + 1 of token g. D: d0, d1 =
// row g, tokens 2t, 2t + 1; d2, d3 = row g + 8. The order of the 8 groups inside one mma is free as long as A, B and
// the metadata agree, so lane (g, t) reads 16 contiguous value bytes of row g (and of g + 8) at byte 16 t of a
// row's 64-byte chunk (128 k, 32 groups): value word s (bytes 4s..4s+3) feeds k-step s of the chunk, its groups
// 8t + 2s (bytes 4s, 4s + 1) as mma group t and 8t + 2s + 1 as mma group t + 4. So mma group L of k-step s is chunk
// group 8L + 2s (L < 4) or 8(L - 4) + 2s + 1, and B, staged once per CTA in shared memory, is permuted to match
// (one 16-byte read per lane and k-step). The metadata registers are packed in that order at load time: k-steps 0
// and 1 take selector 0 (lanes t = 0, 1 hold the metadata), k-steps 2 and 3 selector 1 (lanes t = 2, 3), so each
// lane loads 8 bytes a chunk and the metadata stays 2 bits per kept value. Which nibble of which lane names which
// (row, group) was measured on the H100 by this file's probe (kernels/sp24_w16_gemv.py `probe_layout`).
//
// Widening: fp16: the word XOR 0x80808080 makes each byte b + 128; PRMT puts two of them under the exponent of 1024
// (0x64XX = 1024 + byte) and one HSUB2 of 1152 leaves b, exact. bf16 (8-bit significand, too narrow for that trick):
// each byte to fp32 (I2F.S8) and pairs to bf16x2, exact for |b| <= 128.
//
// Work: CTA = WARPS warps over a K range of `per` chunks (grid.y = S ranges) and WARPS / KW 16-row tiles; the KW warps
// of a tile take every KW-th chunk of the range (KW = 1: one warp a tile, all of the range) and add their sums in warp
// order through shared memory. KW > 1 keeps fewer rows in flight per SM, each read KW x 64 contiguous bytes at a time,
// and needs fewer K ranges to fill the GPU. Measured (H100, one token, bench/results/h100/kernels_s24 call 6): 70B
// gate/up 68.8 us with KW = 1 (2.1 TB/s), 54.4 with KW = 4 (2.7 TB/s); one warp a tile is still the faster at 8 tokens,
// where each CTA stages 8 tokens of x. S > 1: each CTA stores fp32 partials to a workspace and the last CTA of
// its row group to arrive (counter) sums the S partials in split order, scales, writes y and resets the counter
// (CUDA-graph safe, and the same bytes whatever the arrival order).
//
// Programmatic dependent launch (flag bit 0): the kernel may start while the kernel before it drains; with bit 1
// ("early") its first DEPTH chunks of weights are requested before `griddepcontrol.wait` (the weights must not be
// written by the kernel right before it: true of a model's weights); x, the workspace and the counters are read
// after it.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <type_traits>

#include "launch_ex.cuh"
#include "ring_common.cuh"

#ifndef SPW_WARPS
#define SPW_WARPS 8
#endif
#ifndef SPW_DEPTH
#define SPW_DEPTH 2
#endif
#ifndef SPW_KW
#define SPW_KW 1
#endif

namespace {

constexpr int WARPS = SPW_WARPS;
constexpr int THREADS = 32 * WARPS;
constexpr int KW = SPW_KW;                // warps sharing one 16-row tile, each every KW-th chunk of the CTA's range
constexpr int TILES = WARPS / KW;         // 16-row tiles per CTA
constexpr int ROWS = 16 * TILES;          // output rows per CTA
static_assert(KW >= 1 && WARPS % KW == 0, "KW must divide WARPS");
constexpr int DEPTH = SPW_DEPTH;  // chunks of weights in flight per warp
constexpr int MAX_M = 8;          // one mma n-tile of tokens
constexpr int CHUNK_K = 128;      // k per chunk: 64 value bytes a row, 4 k-steps of 32
static_assert(DEPTH >= 1 && DEPTH <= 8, "DEPTH out of range");
// Registers: up to 2 chunks in flight, 64 a thread (32 warps an SM); deeper builds get up to 128 (16 warps) rather than
// spill.
constexpr int MIN_CTAS = (DEPTH <= 2 ? 1024 : 512) / THREADS;

struct Args {
  const uint16_t* x;   // (M, K) fp16 / bf16 bits, row stride ldx (16-byte aligned rows)
  const int8_t* v;     // (N, K / 2) kept values
  const uint2* meta;   // (ceil(N / 16), K / 128, 32 lanes) metadata registers, two a lane (pack_meta_fragments)
  const float* sw;     // (N,) channel scales
  uint16_t* out;       // (M, N)
  float* ws;           // S x M x N fp32 partials when S > 1
  int* counters;       // one per row group (blockIdx.x), zero on entry and on return
  int M, N, K, ldx, kc, per, S, early;
};

// Staged activations per chunk: 4 k-steps x M tokens x 4 lanes x 16 bytes.
__host__ __device__ constexpr size_t xs_chunk_bytes(int M) { return (size_t)4 * M * 4 * 16; }

__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}

// Value word w (4 int8) -> (bytes 0, 1) and (bytes 2, 3) as fp16x2 / bf16x2, exact.
template <typename T> __device__ __forceinline__ void widen(uint32_t w, uint32_t& lo, uint32_t& hi);
template <> __device__ __forceinline__ void widen<__half>(uint32_t w, uint32_t& lo, uint32_t& hi) {
  const uint32_t u = w ^ 0x80808080u;  // byte b + 128, as unsigned
  const uint32_t l = prmt(u, 0x64646464u, 0x4140u), h = prmt(u, 0x64646464u, 0x4342u);  // 1024 + byte
  asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(lo) : "r"(l), "r"(0x64806480u));  // - 1152
  asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(hi) : "r"(h), "r"(0x64806480u));
}
template <> __device__ __forceinline__ void widen<__nv_bfloat16>(uint32_t w, uint32_t& lo, uint32_t& hi) {
  const float f0 = (float)(int8_t)(w & 0xFF), f1 = (float)(int8_t)((w >> 8) & 0xFF);
  const float f2 = (float)(int8_t)((w >> 16) & 0xFF), f3 = (float)(int8_t)(w >> 24);
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(lo) : "f"(f1), "f"(f0));  // first operand -> upper half
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(hi) : "f"(f3), "f"(f2));
}

// d += A (16 x 32, 2:4: 16 x 16 kept + metadata e) * B (32 x 8, col), fp32. SEL: which lane pair of each quad holds
// the metadata (0: t = 0, 1; 1: t = 2, 3).
template <typename T, int SEL>
__device__ __forceinline__ void mma_sp(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, const uint4& b,
                                       uint32_t e) {
  if constexpr (std::is_same_v<T, __half>) {
    asm("mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9, %10, %11}, {%0, %1, %2, %3}, %12, %13;\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b.x), "r"(b.y), "r"(b.z), "r"(b.w), "r"(e), "n"(SEL));
  } else {
    asm("mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9, %10, %11}, {%0, %1, %2, %3}, %12, %13;\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b.x), "r"(b.y), "r"(b.z), "r"(b.w), "r"(e), "n"(SEL));
  }
}

// Weights are read once per call: no L1 allocation, L2 evict-first. volatile keeps the requests in program order (the
// prologue's before the PDL wait, the loop's a full DEPTH ahead of their use).
__device__ __forceinline__ uint4 ld_stream16(const void* p, uint64_t pol) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;\n"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p), "l"(pol));
  return r;
}
__device__ __forceinline__ uint2 ld_stream8(const void* p, uint64_t pol) {
  uint2 r;
  asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v2.u32 {%0, %1}, [%2], %3;\n"
               : "=r"(r.x), "=r"(r.y)
               : "l"(p), "l"(pol));
  return r;
}

// Where chunk word w (0..63: the fp16 / bf16 pair at k 2w, 2w + 1 of a 128-k chunk) goes among the staged B
// fragments: (k-step s, lane t, register j). Chunk group P = w / 2 is mma group L of k-step s (the header), and
// b_j of lane t holds the pair at positions 2 (t % 2), +1 of mma group 2j + t / 2.
__device__ __forceinline__ void b_slot(int w, int& s, int& t, int& j) {
  const int P = w >> 1, q = w & 1;
  int L;
  if ((P & 1) == 0) {
    s = (P & 7) >> 1;
    L = P >> 3;
  } else {
    s = ((P - 1) & 7) >> 1;
    L = 4 + ((P - 1) >> 3);
  }
  j = L >> 1;
  t = 2 * (L & 1) + q;
}

template <typename T>
__global__ void __launch_bounds__(THREADS, MIN_CTAS) sp24_w16_kernel(const Args a) {
  extern __shared__ uint4 xs[];  // [chunk][k-step][token][lane t] B fragments
  __shared__ bool last;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int r16 = (a.N + 15) >> 4;
  const int tile = blockIdx.x * TILES + warp / KW, kq = warp % KW;
  const int c0 = blockIdx.y * a.per, nc = min(a.kc, c0 + a.per) - c0;
  // This warp's chunks of the range: kq, kq + KW, ... (none for a tile past N: a CTA's last tiles may not exist)
  const int ncw = (tile < r16 && kq < nc) ? (nc - kq + KW - 1) / KW : 0;
  const int tl = min(tile, r16 - 1);
  const int row0 = min(16 * tl + g, a.N - 1), row1 = min(16 * tl + g + 8, a.N - 1);
  const size_t vrow = (size_t)a.K / 2;
  const int8_t* p0 = a.v + row0 * vrow + (size_t)(c0 + kq) * 64 + 16 * t;
  const int8_t* p1 = a.v + row1 * vrow + (size_t)(c0 + kq) * 64 + 16 * t;
  const uint2* pm = a.meta + ((size_t)tl * a.kc + c0 + kq) * 32 + lane;
  constexpr int VSTEP = 64 * KW, MSTEP = 32 * KW;  // bytes of a row / metadata words from one of its chunks to the next
  const uint64_t pol = evict_first_policy();

  uint4 va[DEPTH], vb[DEPTH];
  uint2 vm[DEPTH];
  auto first_chunks = [&]() {
#pragma unroll
    for (int d = 0; d < DEPTH; ++d) {
      if (d < ncw) {
        va[d] = ld_stream16(p0 + VSTEP * d, pol);
        vb[d] = ld_stream16(p1 + VSTEP * d, pol);
        vm[d] = ld_stream8(pm + MSTEP * d, pol);
      }
    }
  };
  if (a.early) first_chunks();
  grid_dep_wait();
  if (!a.early) first_chunks();

  // Stage x for the CTA's chunks as B fragments: 16-byte reads (coalesced), all of a thread's round issued before
  // its first store, each word then written to its fragment slot.
  {
    uint32_t* xw = reinterpret_cast<uint32_t*>(xs);
    constexpr int U = 4;
    const int quads = nc * 16;  // 16-byte pieces of one token's K range
    for (int m = 0; m < a.M; ++m) {
      const uint4* src = reinterpret_cast<const uint4*>(a.x + (size_t)m * a.ldx + (size_t)c0 * CHUNK_K);
      for (int i0 = threadIdx.x; i0 < quads; i0 += U * THREADS) {
        uint4 v[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
          if (i0 + u * THREADS < quads) v[u] = src[i0 + u * THREADS];
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int i = i0 + u * THREADS;
          if (i < quads) {
#pragma unroll
            for (int q = 0; q < 4; ++q) {
              int s, tt, j;
              b_slot((4 * i + q) & 63, s, tt, j);
              xw[(((((4 * i + q) >> 6) * 4 + s) * a.M + m) * 4 + tt) * 4 + j] = word(v[u], q);
            }
          }
        }
      }
    }
  }
  __syncthreads();

  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  const int gx = g < a.M ? g : 0;  // token columns past M repeat token 0: their outputs are never stored
  for (int i = 0; i < ncw; i += DEPTH) {
#pragma unroll
    for (int d = 0; d < DEPTH; ++d) {
      const int c = i + d;
      if (c < ncw) {
        const uint4 A = va[d], B = vb[d];
        const uint2 E = vm[d];
        if (c + DEPTH < ncw) {
          va[d] = ld_stream16(p0 + VSTEP * (c + DEPTH), pol);
          vb[d] = ld_stream16(p1 + VSTEP * (c + DEPTH), pol);
          vm[d] = ld_stream8(pm + MSTEP * (c + DEPTH), pol);
        }
        const uint4* xc = xs + (size_t)(kq + KW * c) * 4 * a.M * 4 + gx * 4 + t;
#pragma unroll
        for (int s = 0; s < 4; ++s) {
          uint32_t a0, a1, a2, a3;
          widen<T>(word(A, s), a0, a2);
          widen<T>(word(B, s), a1, a3);
          const uint4 b = xc[s * a.M * 4];
          if (s < 2) {
            mma_sp<T, 0>(acc, a0, a1, a2, a3, b, (s & 1) ? E.y : E.x);
          } else {
            mma_sp<T, 1>(acc, a0, a1, a2, a3, b, (s & 1) ? E.y : E.x);
          }
        }
      }
    }
  }
  grid_dep_launch();

  if (KW > 1) {  // the tile's KW warps' sums, added in warp order by its first warp (the same bytes every call)
    __shared__ float4 red[WARPS][32];
    red[warp][lane] = make_float4(acc[0], acc[1], acc[2], acc[3]);
    __syncthreads();
    if (kq == 0) {
#pragma unroll
      for (int w = 1; w < KW; ++w) {
        const float4 v = red[warp + w][lane];
        acc[0] += v.x;
        acc[1] += v.y;
        acc[2] += v.z;
        acc[3] += v.w;
      }
    }
  }

  // d0, d1: row 16 tile + g, tokens 2t, 2t + 1; d2, d3: row + 8. Only the first warp of a tile writes.
  const int ra = 16 * tile + g, rb = ra + 8, tok0 = 2 * t, tok1 = tok0 + 1;
  const bool va_ok = kq == 0 && tile < r16 && ra < a.N, vb_ok = kq == 0 && tile < r16 && rb < a.N;
  if (a.S == 1) {
    if (va_ok) {
      const float s = a.sw[ra];
      if (tok0 < a.M) a.out[(size_t)tok0 * a.N + ra] = to_bits<T>(acc[0] * s);
      if (tok1 < a.M) a.out[(size_t)tok1 * a.N + ra] = to_bits<T>(acc[1] * s);
    }
    if (vb_ok) {
      const float s = a.sw[rb];
      if (tok0 < a.M) a.out[(size_t)tok0 * a.N + rb] = to_bits<T>(acc[2] * s);
      if (tok1 < a.M) a.out[(size_t)tok1 * a.N + rb] = to_bits<T>(acc[3] * s);
    }
    return;
  }
  float* part = a.ws + (size_t)blockIdx.y * a.M * a.N;
  if (va_ok && tok0 < a.M) __stcg(part + (size_t)tok0 * a.N + ra, acc[0]);
  if (va_ok && tok1 < a.M) __stcg(part + (size_t)tok1 * a.N + ra, acc[1]);
  if (vb_ok && tok0 < a.M) __stcg(part + (size_t)tok0 * a.N + rb, acc[2]);
  if (vb_ok && tok1 < a.M) __stcg(part + (size_t)tok1 * a.N + rb, acc[3]);
  __threadfence();  // partials visible device-wide before the counter moves
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(a.counters + blockIdx.x, 1) == a.S - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  const int n_base = blockIdx.x * ROWS, rows_here = min(ROWS, a.N - n_base);
  for (int e = threadIdx.x; e < a.M * rows_here; e += THREADS) {
    const int m = e / rows_here, row = n_base + e % rows_here;
    float sum = 0.f;
#pragma unroll 8
    for (int sp = 0; sp < a.S; ++sp) sum += __ldcg(a.ws + ((size_t)sp * a.M + m) * a.N + row);
    a.out[(size_t)m * a.N + row] = to_bits<T>(sum * a.sw[row]);
  }
  if (threadIdx.x == 0) a.counters[blockIdx.x] = 0;
}

template <typename T>
int allow_smem(size_t* limit) {
  return optin_smem_limit(sp24_w16_kernel<T>, limit);
}

template <typename T>
int launch(const Args& a, bool pdl, cudaStream_t stream) {
  const size_t smem = (size_t)a.per * xs_chunk_bytes(a.M);
  size_t limit = 0;
  const int rc = allow_smem<T>(&limit);
  if (rc != 0) return rc;
  if (smem > limit) return -4;
  return launch_ex(sp24_w16_kernel<T>, a, dim3((a.N + ROWS - 1) / ROWS, a.S), THREADS, smem, pdl, stream);
}

// ---- probe of the mma.sp m16n8k32 .f16 fragments (kernels/sp24_w16_gemv.py `probe_layout` decodes it).
// Warp w < 256, A layout: lane w / 8 holds one kept value 1 in half w % 8 of its a0..a3 (all others 0), every
// metadata nibble is 0b0100 (kept positions 0 and 1 of each group), B[k][n] = k + 1: D[m][0] = (k of that value) + 1
// in the one row m that holds it. out[w * 16 + m] = D[m][0].
// Warp 256 + 256 sel + c, metadata under selector sel: every kept value is 1, every nibble 0b0100 but nibble c % 8 of
// lane c / 8, which is 0b1000 (positions 0 and 2); B[k][0] = 1 and B[k][1] = k / 4 + 1 where k % 4 == 2, else 0:
// D[m][0] = 1 and D[m][1] = (group of 4) + 1 in the row whose group that nibble controls; all zero when that lane's
// register is not read under sel. out[4096 + (256 sel + c) * 32 + 2 m + col] = D[m][col].
// B layout assumed: lane (g, t) holds b_j = B[8j + 2t, 8j + 2t + 1][g] (the dense m16n8k16 layout, twice); the GPU
// test of the kernel checks the whole chain against the reference.
__global__ void sp_probe_kernel(int* out) {
  const int w = blockIdx.x * 8 + (threadIdx.x >> 5), lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const uint32_t one = 0x3C00u;  // fp16 1.0
  uint32_t a[4] = {0u, 0u, 0u, 0u}, e = 0x44444444u;
  uint4 b;
  uint32_t bw[4];
  float d[4] = {0.f, 0.f, 0.f, 0.f};
  if (w < 256) {
    if (lane == w / 8) a[(w % 8) / 2] = one << (16 * (w % 2));
    for (int j = 0; j < 4; ++j) {
      const int k = 8 * j + 2 * t;
      bw[j] = (uint32_t)__half_as_ushort(__float2half((float)(k + 1))) |
              ((uint32_t)__half_as_ushort(__float2half((float)(k + 2))) << 16);
    }
  } else if (w < 768) {
    const int c = (w - 256) % 256;
    a[0] = a[1] = a[2] = a[3] = one | (one << 16);
    if (lane == c / 8) e = (e & ~(0xFu << (4 * (c % 8)))) | (0x8u << (4 * (c % 8)));
    for (int j = 0; j < 4; ++j) {
      uint32_t v = 0u;
      for (int h = 0; h < 2; ++h) {
        const int k = 8 * j + 2 * t + h;
        const float val = (k % 4 != 2) ? 0.f : (g == 0 ? 1.f : (g == 1 ? (float)(k / 4 + 1) : 0.f));
        v |= (uint32_t)__half_as_ushort(__float2half(val)) << (16 * h);
      }
      bw[j] = v;
    }
  } else {
    return;
  }
  b = make_uint4(bw[0], bw[1], bw[2], bw[3]);
  if (w < 512) {
    mma_sp<__half, 0>(d, a[0], a[1], a[2], a[3], b, e);
  } else {
    mma_sp<__half, 1>(d, a[0], a[1], a[2], a[3], b, e);
  }
  if (t != 0) return;
  if (w < 256) {
    out[w * 16 + g] = (int)d[0];
    out[w * 16 + g + 8] = (int)d[2];
  } else {
    const int base = 4096 + (w - 256) * 32;
    out[base + 2 * g] = (int)d[0];
    out[base + 2 * g + 1] = (int)d[1];
    out[base + 2 * (g + 8)] = (int)d[2];
    out[base + 2 * (g + 8) + 1] = (int)d[3];
  }
}

}  // namespace

extern "C" {

int sp24_w16_rows_per_cta() { return ROWS; }
// Build variant: warps * 100 + warps a tile * 10 + depth.
int sp24_w16_variant() { return WARPS * 100 + KW * 10 + DEPTH; }
long sp24_w16_smem_bytes(int per, int M) { return (long)((size_t)per * xs_chunk_bytes(M)); }

// CTAs resident per SM with a K range of `per` chunks (0 when it does not fit), from the occupancy calculator.
int sp24_w16_ctas_per_sm(int per, int M, int bf16) {
  const size_t smem = (size_t)per * xs_chunk_bytes(M);
  size_t limit = 0;
  int n = 0;
  cudaError_t e;
  if (bf16) {
    if (allow_smem<__nv_bfloat16>(&limit) != 0 || smem > limit) return 0;
    e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, sp24_w16_kernel<__nv_bfloat16>, THREADS, smem);
  } else {
    if (allow_smem<__half>(&limit) != 0 || smem > limit) return 0;
    e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, sp24_w16_kernel<__half>, THREADS, smem);
  }
  return e == cudaSuccess ? n : 0;
}

// Returns 0, a cudaError_t, or -1 (M outside 1..8), -3 (bad split: S * per must cover the chunks, S > 1 needs ws and
// counters), -4 (shared memory over the per-block limit), -5 (K not a multiple of 128, or ldx not a multiple of 8, or
// x not 16-byte aligned). flags: bit 0 programmatic dependent launch, bit 1 (with bit 0) weights requested before the
// wait, bit 3 bf16 (else fp16).
int sp24_w16_gemv(const void* x, int ldx, const void* v, const void* meta, const float* sw, void* out, float* ws,
                  int* counters, int M, int N, int K, int per, int S, int flags, void* stream_) {
  if (M < 1 || M > MAX_M) return -1;
  if (K % CHUNK_K != 0 || ldx % 8 != 0 || (reinterpret_cast<uintptr_t>(x) & 15)) return -5;
  const int kc = K / CHUNK_K;
  if (per < 1 || S < 1 || (long)per * S < kc || (long)per * (S - 1) >= kc) return -3;
  if (S > 1 && (ws == nullptr || counters == nullptr)) return -3;
  const bool pdl = (flags & 1) != 0;
  Args a;
  a.x = static_cast<const uint16_t*>(x);
  a.v = static_cast<const int8_t*>(v);
  a.meta = static_cast<const uint2*>(meta);
  a.sw = sw;
  a.out = static_cast<uint16_t*>(out);
  a.ws = ws;
  a.counters = counters;
  a.M = M;
  a.N = N;
  a.K = K;
  a.ldx = ldx;
  a.kc = kc;
  a.per = per;
  a.S = S;
  a.early = pdl && (flags & 2) != 0;
  cudaStream_t stream = static_cast<cudaStream_t>(stream_);
  return (flags & 8) ? launch<__nv_bfloat16>(a, pdl, stream) : launch<__half>(a, pdl, stream);
}

// Runs the fragment probe into out (4096 + 16384 ints, device memory); returns 0 or a cudaError_t.
int sp24_w16_probe(int* out, void* stream_) {
  sp_probe_kernel<<<96, 256, 0, static_cast<cudaStream_t>(stream_)>>>(out);
  return (int)cudaGetLastError();
}

}  // extern "C"
