// W4A16 decode GEMV for M = 1..8 tokens over the compress.int4 layout (compress/packing/int4.py), as is.
//
// Math: y[m, n] = sum_k x[m, k] * (u[n, k] - z[g, n]) * s[g, n],  g = k / group (64 or 128), z = 8 when
// symmetric. fp32 accumulation, output in x's dtype.
//
// Why CUDA C++: the Triton kernels stream int4 weights at ~1.0-1.5 TB/s on the 8B layers (NOTES.md in
// bench/results/h100/kernels); a GEMV must stream at the copy bandwidth, which needs 16-byte weight loads
// several stages deep per thread and a dequantization of a few instructions per weight pair, both of which
// Triton 3.6 does not let us place. Measured (H100, w4a16_cuda_notes.md there): M = 1 median 2.25x over fp16
// on the 8 Llama-3 shapes, 1.3-1.9 TB/s on the 30-121 MB layers, as fast as torch.sum over the same bytes on
// 8B down_proj.
//
// Tensor-core GEMV ("weights on the left"): one warp computes 16 output rows x 8 token columns with
// mma.sync m16n8k16 (A = 16 weight rows x 16 k, B = 16 k x 8 tokens; tokens >= M are zero columns), so
// M = 1..8 cost the same and the fp32 sums come for free. Lane (g = lane / 4, t = lane % 4) loads 16 bytes
// (4 words) of row g and of row g + 8 for every 128-k block: the 4 lanes of a row read the block's 64
// contiguous bytes. The layout's word r of block b holds u[128 b + 16 j + r] in nibble j, so one LOP3
// with 0x000F000F | magic turns a word into the pair (nibble j, nibble j + 4) = k (16 j + r, 16 j + r + 64)
// as fp16x2 / bf16x2 "base + u" (base 1024 / 128), exact. The mma's k order inside a 16-wide step is free
// as long as A and B agree, so lane t's A pair (logical k 2t, 2t+1) is that physical pair, and the
// activations are staged in shared memory once per CTA already permuted into B-fragment order:
//   piece q of lane (g, t) in block b = 4 x (x[g, k], x[g, k + 64]) for k = 128 b + 16 j + 4 t + q, j = 0..3,
// so a lane reads its B fragments with 4 conflict-free 16-byte loads per block. Per word (8 weights):
// fp16: 1 SHF, 4 LOP3, 4 HFMA2 (u - z, exact; the high nibbles via the x16 trick: (1024 + 16 u) / 16 - 64 - z);
// bf16 (7-bit mantissa, no x16 trick): 3 SHF more. Group 128: a block is one group, so the mma sums exact
// integer weights and the fp32 block sums are scaled (4 FFMA per block). Group 64: the pair (j, j + 4)
// straddles the block's two groups, so the weights are scaled first by the pair (s[2b], s[2b + 1]) (4 HMUL2
// per word, one fp16/bf16 rounding, like dequantize-then-GEMM). SASS (sm_90a, fp16 g128): 146 instructions
// per lane per block of 64 weights.
//
// Work: CTA = WARPS warps = 16 * WARPS output rows x a K chunk of `per` blocks (grid.y = S chunks). Each
// warp streams its 16 rows through the chunk, STAGE blocks a step, the next step's words / scales in flight
// while the current step computes (registers, double buffered). S > 1: each CTA writes fp32 partials to
// a workspace; the last CTA of a row group to arrive (counter) sums the S partials in split order
// (deterministic) and writes y, then resets the counter to 0 for the next call (CUDA-graph safe).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <type_traits>

#ifndef W4_WARPS
#define W4_WARPS 8
#endif
#ifndef W4_STAGE
#define W4_STAGE 2
#endif
// Weight load: 0 = ld.global.cs (evict-first in L1 and L2: the weights are read once), 1 = non-coherent load
// that skips L1 and asks L2 for 256-byte fetches (the row's next blocks are read right after), 2 = __ldg.
#ifndef W4_LOAD
#define W4_LOAD 0
#endif

namespace {

constexpr int WARPS = W4_WARPS;
constexpr int THREADS = WARPS * 32;
constexpr int ROWS = WARPS * 16;  // output rows per CTA
constexpr int STAGE = W4_STAGE;   // 128-k blocks per pipeline step
constexpr int MAX_M = 8;          // mma n = 8 token columns

// fp16x2 / bf16x2 constants as bit patterns (low half = first element).
template <typename T> struct Bits;
template <> struct Bits<__half> {
  static constexpr bool HALF = true;
  static constexpr uint32_t MAGIC = 0x64006400u;  // 1024: OR-ing a nibble into the mantissa gives 1024 + u
  static constexpr uint32_t ONE = 0x3C003C00u;
  static constexpr uint32_t SIXTEENTH = 0x2C002C00u;
  static constexpr uint32_t NEG_ZERO = 0x80008000u;
  // -(1024 + z) and -(64 + z) for a pair of zero points z packed as z_lo | z_hi << 16 (z <= 15).
  static __device__ __forceinline__ uint32_t neg_lo(uint32_t z2) { return 0xE400E400u | z2; }
  static __device__ __forceinline__ uint32_t neg_hi(uint32_t z2) { return 0xD400D400u + (z2 << 4); }
};
template <> struct Bits<__nv_bfloat16> {
  static constexpr bool HALF = false;
  static constexpr uint32_t MAGIC = 0x43004300u;  // 128: 128 + u, exact with bf16's 7-bit mantissa
  static constexpr uint32_t ONE = 0x3F803F80u;
  static constexpr uint32_t SIXTEENTH = 0x3D803D80u;  // unused (no x16 trick in bf16)
  static constexpr uint32_t NEG_ZERO = 0x80008000u;
  static __device__ __forceinline__ uint32_t neg_lo(uint32_t z2) { return 0xC300C300u | z2; }
  static __device__ __forceinline__ uint32_t neg_hi(uint32_t z2) { return 0xC300C300u | z2; }
};

template <typename T> __device__ __forceinline__ uint32_t fma2(uint32_t a, uint32_t b, uint32_t c);
template <> __device__ __forceinline__ uint32_t fma2<__half>(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("fma.rn.f16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}
template <> __device__ __forceinline__ uint32_t fma2<__nv_bfloat16>(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// c += A (16 x 16, row) * B (16 x 8, col), fp32 accumulators.
template <typename T>
__device__ __forceinline__ void mma(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                    uint32_t b1);
template <>
__device__ __forceinline__ void mma<__half>(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                            uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma<__nv_bfloat16>(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                                   uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// (w & mask) | magic in one LOP3 (ptxas splits the C++ form into two: one immediate per instruction).
template <uint32_t MASK, uint32_t MAGIC>
__device__ __forceinline__ uint32_t lop3_and_or(uint32_t w) {
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(d) : "r"(w), "n"(MASK), "n"(MAGIC));
  return d;
}

// One packed word -> the 4 weight pairs (j, j + 4), j = 0..3: u - z exactly, times the scale pair s2 when
// SCALED (group 64: the pair straddles the block's two groups); group 128 scales the fp32 sums instead.
// z2: zero-point pair z_lo | z_hi << 16.
template <typename T, bool SCALED>
__device__ __forceinline__ void dequant(uint32_t w, uint32_t s2, uint32_t z2, uint32_t (&a)[4]) {
  using B = Bits<T>;
  const uint32_t zl = B::neg_lo(z2);
  if constexpr (B::HALF) {
    const uint32_t zh = B::neg_hi(z2);
    const uint32_t w8 = w >> 8;
    a[0] = fma2<T>(lop3_and_or<0x000F000Fu, B::MAGIC>(w), B::ONE, zl);
    a[1] = fma2<T>(lop3_and_or<0x00F000F0u, B::MAGIC>(w), B::SIXTEENTH, zh);
    a[2] = fma2<T>(lop3_and_or<0x000F000Fu, B::MAGIC>(w8), B::ONE, zl);
    a[3] = fma2<T>(lop3_and_or<0x00F000F0u, B::MAGIC>(w8), B::SIXTEENTH, zh);
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j) a[j] = fma2<T>(lop3_and_or<0x000F000Fu, B::MAGIC>(w >> (4 * j)), B::ONE, zl);
  }
  if constexpr (SCALED) {
#pragma unroll
    for (int j = 0; j < 4; ++j) a[j] = fma2<T>(a[j], s2, B::NEG_ZERO);  // x * s + (-0) = x * s, one rounding
  }
}

template <typename T> __device__ __forceinline__ float low_to_f32(uint32_t v);
template <> __device__ __forceinline__ float low_to_f32<__half>(uint32_t v) {
  return __half2float(__ushort_as_half((unsigned short)(v & 0xFFFFu)));
}
template <> __device__ __forceinline__ float low_to_f32<__nv_bfloat16>(uint32_t v) { return __uint_as_float(v << 16); }

__device__ __forceinline__ uint32_t word(const uint4& v, int c) {
  return c == 0 ? v.x : (c == 1 ? v.y : (c == 2 ? v.z : v.w));
}

__device__ __forceinline__ uint4 load_w(const uint4* p) {
#if W4_LOAD == 0
  return __ldcs(p);
#elif W4_LOAD == 1
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];\n"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
#else
  return __ldg(p);
#endif
}

// What one lane holds for STAGE blocks: its 16 bytes of rows g and g + 8, their scale / zero pairs.
struct Stage {
  uint4 wa[STAGE], wb[STAGE];
  uint32_t sa[STAGE], sb[STAGE], za[STAGE], zb[STAGE];
};

struct Args {
  const uint16_t* x;   // (M, K) fp16/bf16 bits, row stride ldx
  const uint4* q;      // (N, KW) int32 words, as 16-byte vectors
  const uint16_t* s;   // (G, N) scales, x's dtype
  const uint8_t* z;    // (G, N) zero points (asymmetric) or null
  uint16_t* out;       // (M, N)
  float* ws;           // (S, M, N) fp32 partials (S > 1)
  int* counters;       // one per row group, zero on entry and on return
  int M, N, K, ldx, KW, G, kblocks, per, S;
};

// Per-lane read pointers, advanced one 128-k block at a time. Rows >= N read row 0 (valid memory; their
// results are never stored), so the only per-block predicates are "block inside this CTA's chunk" and,
// for group 64, "second group exists" (K % 128 in (0, 64]).
struct Ptrs {
  const uint4* qa;      // row g, this lane's 16 bytes of the chunk's first block
  const uint4* qb;      // row g + 8
  const uint16_t* sa;   // scales of row g at the chunk's first group
  const uint16_t* sb;
  const uint8_t* za;    // zero points (asymmetric)
  const uint8_t* zb;
};

template <bool G64, typename V>
__device__ __forceinline__ uint32_t load_pair(const V* p, int gstride, bool hi_ok) {
  // Per-group value pair for the block's low / high 64 k (p points at the block's first group).
  if (G64) {
    const uint32_t lo = __ldg(p);
    const uint32_t hi = hi_ok ? (uint32_t)__ldg(p + gstride) : 0u;
    return lo | (hi << 16);
  }
  const uint32_t v = __ldg(p);
  return v | (v << 16);
}

// Loads blocks i .. i + STAGE - 1 of the chunk (p points at block i; lanes past the chunk load nothing).
template <bool ASYM, bool G64>
__device__ __forceinline__ void load_stage(Stage& st, const Ptrs& p, int nb, int i, int N, int g_left) {
  const int bstride = G64 ? 2 * N : N;  // scale / zero elements per block
#pragma unroll
  for (int u = 0; u < STAGE; ++u) {
    const int lb = i + u;
    const uint4 zero4 = make_uint4(0u, 0u, 0u, 0u);
    if (lb < nb) {
      const bool hi_ok = 2 * lb + 1 < g_left;  // group 64 only: the block's second group exists
      st.wa[u] = load_w(p.qa + 4 * u);
      st.wb[u] = load_w(p.qb + 4 * u);
      st.sa[u] = load_pair<G64>(p.sa + u * bstride, N, hi_ok);
      st.sb[u] = load_pair<G64>(p.sb + u * bstride, N, hi_ok);
      if (ASYM) {
        st.za[u] = load_pair<G64>(p.za + u * bstride, N, hi_ok);
        st.zb[u] = load_pair<G64>(p.zb + u * bstride, N, hi_ok);
      }
    } else {
      st.wa[u] = zero4;
      st.wb[u] = zero4;
      st.sa[u] = st.sb[u] = 0u;
      if (ASYM) st.za[u] = st.zb[u] = 0u;
    }
    if (!ASYM) st.za[u] = st.zb[u] = 0x00080008u;  // z = 8
  }
}

__device__ __forceinline__ void advance(Ptrs& p, int N, bool g64) {
  const int step = STAGE * (g64 ? 2 * N : N);
  p.qa += 4 * STAGE;
  p.qb += 4 * STAGE;
  p.sa += step;
  p.sb += step;
  p.za += step;
  p.zb += step;
}

template <typename T, bool ASYM, bool G64>
__global__ void __launch_bounds__(THREADS, 512 / THREADS) w4a16_gemv_kernel(const Args a) {
  extern __shared__ uint4 xs[];  // (per blocks, 4 pieces, 4M lanes) x 16 bytes, B-fragment order
  __shared__ int last;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int n_base = blockIdx.x * ROWS;
  const int split = blockIdx.y;
  const int blk0 = split * a.per;
  const int nb = min(a.per, a.kblocks - blk0);
  const int lanes_m = 4 * a.M;

  const int row_a = n_base + warp * 16 + g, row_b = row_a + 8;
  const bool va = row_a < a.N, vb = row_b < a.N;
  const int ra = va ? row_a : 0, rb = vb ? row_b : 0;
  const int gs_per_block = G64 ? 2 : 1;
  const size_t g0 = (size_t)blk0 * gs_per_block;  // first group of the chunk
  Ptrs p;
  p.qa = a.q + (size_t)ra * (a.KW / 4) + (size_t)blk0 * 4 + t;
  p.qb = a.q + (size_t)rb * (a.KW / 4) + (size_t)blk0 * 4 + t;
  p.sa = a.s + g0 * a.N + ra;
  p.sb = a.s + g0 * a.N + rb;
  p.za = ASYM ? a.z + g0 * a.N + ra : a.z;  // advanced but never read when symmetric
  p.zb = ASYM ? a.z + g0 * a.N + rb : a.z;
  const int g_left = a.G - (int)g0;  // groups from the chunk's first on

  // First step's weights in flight while the activations are staged.
  Stage cur, nxt;
  load_stage<ASYM, G64>(cur, p, nb, 0, a.N, g_left);
  advance(p, a.N, G64);

  // One staging unit = (block lb, slice j, lane ln): x[k0 .. k0 + 3] and x[k0 + 64 .. k0 + 67] of token ln / 4,
  // k0 = 128 b + 16 j + 4 t, two 8-byte loads that fill slot j of the lane's 4 pieces (q = 0..3). A thread issues
  // the loads of BATCH units before storing any (the first version loaded 2 bytes per element and stored
  // between loads: one round trip per few elements, 14 of them per thread at M = 8).
  uint32_t* xs32 = reinterpret_cast<uint32_t*>(xs);
  const bool xvec = ((reinterpret_cast<uintptr_t>(a.x) | (uintptr_t)a.ldx * 2) & 7) == 0;
  const int units = nb * 4 * lanes_m;
  constexpr int BATCH = 4;  // units per thread whose loads are issued before any of their stores
  for (int base = threadIdx.x; base < units; base += BATCH * THREADS) {
    uint2 lo[BATCH], hi[BATCH];
#pragma unroll
    for (int r = 0; r < BATCH; ++r) {
      const int un = base + r * THREADS;
      lo[r] = hi[r] = make_uint2(0u, 0u);
      if (un < units) {
        const int ln = un % lanes_m, rest = un / lanes_m;
        const int k0 = (blk0 + (rest >> 2)) * 128 + 16 * (rest & 3) + 4 * (ln & 3);
        const uint16_t* xr = a.x + (size_t)(ln >> 2) * a.ldx + k0;
        if (xvec && k0 + 67 < a.K) {
          lo[r] = __ldg(reinterpret_cast<const uint2*>(xr));
          hi[r] = __ldg(reinterpret_cast<const uint2*>(xr + 64));
        } else {  // the end of K (or an unaligned x): element by element
          uint32_t e[8];
#pragma unroll
          for (int q = 0; q < 8; ++q) {
            const int kk = k0 + (q & 3) + (q >> 2) * 64;
            e[q] = kk < a.K ? (uint32_t)__ldg(xr + (q & 3) + (q >> 2) * 64) : 0u;
          }
          lo[r] = make_uint2(e[0] | (e[1] << 16), e[2] | (e[3] << 16));
          hi[r] = make_uint2(e[4] | (e[5] << 16), e[6] | (e[7] << 16));
        }
      }
    }
#pragma unroll
    for (int r = 0; r < BATCH; ++r) {
      const int un = base + r * THREADS;
      if (un < units) {
        const int ln = un % lanes_m, rest = un / lanes_m;
        const int j = rest & 3, lb = rest >> 2;
        uint32_t* dst = xs32 + ((lb * 4) * lanes_m + ln) * 4 + j;  // piece q adds q * lanes_m * 4 words
        const int pq = lanes_m * 4;
        dst[0] = __byte_perm(lo[r].x, hi[r].x, 0x5410);       // (x[k0], x[k0 + 64])
        dst[pq] = __byte_perm(lo[r].x, hi[r].x, 0x7632);      // (x[k0 + 1], x[k0 + 65])
        dst[2 * pq] = __byte_perm(lo[r].y, hi[r].y, 0x5410);  // (x[k0 + 2], x[k0 + 66])
        dst[3 * pq] = __byte_perm(lo[r].y, hi[r].y, 0x7632);  // (x[k0 + 3], x[k0 + 67])
      }
    }
  }
  if (threadIdx.x == 0) xs[nb * 4 * lanes_m] = make_uint4(0u, 0u, 0u, 0u);  // the zero slot (below)
  __syncthreads();

  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  // Tokens >= M have no staged activations: those lanes read one zeroed slot (no per-register select).
  const bool has_x = g < a.M;
  const int zslot = nb * 4 * lanes_m;
  const int x_lane = has_x ? lane : zslot, x_piece = has_x ? lanes_m : 0;
  for (int i = 0; i < nb; i += STAGE) {
    load_stage<ASYM, G64>(nxt, p, nb, i + STAGE, a.N, g_left);
    advance(p, a.N, G64);
#pragma unroll
    for (int u = 0; u < STAGE; ++u) {
      const int lb = i + u;
      if (lb < nb) {
        uint4 bq[4];
#pragma unroll
        for (int c = 0; c < 4; ++c) bq[c] = xs[(lb * 4 + c) * x_piece + x_lane];
        float blk[4] = {0.f, 0.f, 0.f, 0.f};  // group 128: this block's (one group's) unscaled sums
        float(&dst)[4] = G64 ? acc : blk;
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          uint32_t ag[4], ah[4];
          dequant<T, G64>(word(cur.wa[u], c), cur.sa[u], cur.za[u], ag);
          dequant<T, G64>(word(cur.wb[u], c), cur.sb[u], cur.zb[u], ah);
          mma<T>(dst, ag[0], ah[0], ag[1], ah[1], bq[c].x, bq[c].y);
          mma<T>(dst, ag[2], ah[2], ag[3], ah[3], bq[c].z, bq[c].w);
        }
        if (!G64) {
          const float fa = low_to_f32<T>(cur.sa[u]), fb = low_to_f32<T>(cur.sb[u]);
          acc[0] = fmaf(blk[0], fa, acc[0]);
          acc[1] = fmaf(blk[1], fa, acc[1]);
          acc[2] = fmaf(blk[2], fb, acc[2]);
          acc[3] = fmaf(blk[3], fb, acc[3]);
        }
      }
    }
    cur = nxt;
  }

  // acc: (row g, token 2t), (row g, token 2t + 1), (row g + 8, token 2t), (row g + 8, token 2t + 1).
  const int tok0 = 2 * t, tok1 = 2 * t + 1;
  if (a.S == 1) {
    const float v[4] = {acc[0], acc[1], acc[2], acc[3]};
    const int rows[4] = {row_a, row_a, row_b, row_b};
    const int toks[4] = {tok0, tok1, tok0, tok1};
    const bool oks[4] = {va, va, vb, vb};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if (oks[e] && toks[e] < a.M) {
        uint16_t bits;
        if constexpr (Bits<T>::HALF) {
          bits = __half_as_ushort(__float2half_rn(v[e]));
        } else {
          bits = __bfloat16_as_ushort(__float2bfloat16_rn(v[e]));
        }
        a.out[(size_t)toks[e] * a.N + rows[e]] = bits;
      }
    }
    return;
  }

  float* part = a.ws + (size_t)split * a.M * a.N;
  if (va && tok0 < a.M) __stcg(part + (size_t)tok0 * a.N + row_a, acc[0]);
  if (va && tok1 < a.M) __stcg(part + (size_t)tok1 * a.N + row_a, acc[1]);
  if (vb && tok0 < a.M) __stcg(part + (size_t)tok0 * a.N + row_b, acc[2]);
  if (vb && tok1 < a.M) __stcg(part + (size_t)tok1 * a.N + row_b, acc[3]);
  __threadfence();  // partials visible device-wide before the counter moves
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(a.counters + blockIdx.x, 1) == a.S - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  const int rows_here = min(ROWS, a.N - n_base);
  for (int e = threadIdx.x; e < a.M * rows_here; e += THREADS) {
    const int m = e / rows_here, row = n_base + e % rows_here;
    float sum = 0.f;
    for (int sp = 0; sp < a.S; ++sp) sum += __ldcg(a.ws + ((size_t)sp * a.M + m) * a.N + row);
    uint16_t bits;
    if constexpr (Bits<T>::HALF) {
      bits = __half_as_ushort(__float2half_rn(sum));
    } else {
      bits = __bfloat16_as_ushort(__float2bfloat16_rn(sum));
    }
    a.out[(size_t)m * a.N + row] = bits;
  }
  if (threadIdx.x == 0) a.counters[blockIdx.x] = 0;
}

template <typename T, bool ASYM, bool G64>
int launch(const Args& a, cudaStream_t stream) {
  const dim3 grid((a.N + ROWS - 1) / ROWS, a.S);
  const size_t smem = ((size_t)a.per * 4 * (4 * a.M) + 1) * 16;  // + the zero slot
  w4a16_gemv_kernel<T, ASYM, G64><<<grid, THREADS, smem, stream>>>(a);
  return (int)cudaGetLastError();
}

template <typename T>
int by_variant(const Args& a, int asym, int g64, cudaStream_t stream) {
  if (asym) return g64 ? launch<T, true, true>(a, stream) : launch<T, true, false>(a, stream);
  return g64 ? launch<T, false, true>(a, stream) : launch<T, false, false>(a, stream);
}

}  // namespace

extern "C" {

// The build's variant: warps * 100 + blocks per pipeline step * 10 + load policy.
int w4a16_gemv_variant() { return W4_WARPS * 100 + W4_STAGE * 10 + W4_LOAD; }

// Output rows per CTA (one split-K counter per row group).
int w4a16_gemv_rows_per_cta() { return ROWS; }

// Returns 0, a cudaError_t, or -1 (M outside 1..8), -2 (group not 64/128), -3 (bad split: S * per must
// cover the K blocks, S > 1 needs ws and counters), -4 (staged activations over 32 KB).
// x (M, K) row stride ldx; q (N, Kp/8) int32; s (G, N); z (G, N) uint8 or null; out (M, N) contiguous;
// ws >= S * M * N floats and counters >= ceil(N / rows_per_cta) zero ints when S > 1.
int w4a16_gemv(const void* x, int x_is_bf16, const void* q, const void* s, const void* z, void* out, float* ws,
               int* counters, int M, int N, int K, int ldx, int group, int per, int S, void* stream_) {
  if (M < 1 || M > MAX_M) return -1;
  if (group != 64 && group != 128) return -2;
  const int kblocks = (K + 127) / 128;
  if (per < 1 || S < 1 || (long)per * S < kblocks || (long)per * (S - 1) >= kblocks) return -3;
  if (S > 1 && (ws == nullptr || counters == nullptr)) return -3;
  if (((long)per * 4 * (4 * M) + 1) * 16 > 32 * 1024 + 16) return -4;
  Args a;
  a.x = static_cast<const uint16_t*>(x);
  a.q = static_cast<const uint4*>(q);
  a.s = static_cast<const uint16_t*>(s);
  a.z = static_cast<const uint8_t*>(z);
  a.out = static_cast<uint16_t*>(out);
  a.ws = ws;
  a.counters = counters;
  a.M = M;
  a.N = N;
  a.K = K;
  a.ldx = ldx;
  a.KW = kblocks * 16;
  a.G = (K + group - 1) / group;
  a.kblocks = kblocks;
  a.per = per;
  a.S = S;
  cudaStream_t stream = static_cast<cudaStream_t>(stream_);
  const int asym = z != nullptr, g64 = group == 64;
  if (x_is_bf16) return by_variant<__nv_bfloat16>(a, asym, g64, stream);
  return by_variant<__half>(a, asym, g64, stream);
}

}  // extern "C"
