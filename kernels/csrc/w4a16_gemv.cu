// W4A16 decode GEMV for M = 1..64 tokens (1..16 before session 8) over the compress.int4 layout
// (compress/packing/int4.py), as is.
//
// Math: y[m, n] = sum_k x[m, k] * (u[n, k] - z[g, n]) * s[g, n],  g = k / group (64 or 128), z = 8 when
// symmetric. fp32 accumulation, output in x's dtype.
//
// Why CUDA C++: a decode GEMV must stream the int4 weights at the copy bandwidth. That needs many bytes in
// flight per SM and a dequantization of a few instructions per weight pair straight into tensor-core
// fragments; Triton 3.6 places neither (its W4A16 kernels stream at ~1.0-1.5 TB/s on the 8B layers).
// Measured (H100, bench/results/h100/kernels/w4a16_cuda_s4_notes.md; graph replays over rotating weight copies):
// M = 1 at 2.1-2.5 TB/s on the 30-121 MB layers, 75-85% of a plain read kernel over the same bytes; the 128
// GEMVs of a Llama-3-8B token in 1.78 ms back to back (session 3's kernel: 2.12 ms; read kernel: 1.34 ms).
//
// Tensor-core GEMV ("weights on the left"): one warp computes 16 output rows x 8 token columns per
// mma.sync m16n8k16 (A = 16 weight rows x 16 k, B = 16 k x 8 tokens; tokens >= M are zero columns);
// M = 9..16 run the mma twice per A fragment (MT = 2 token tiles), so a weight word is dequantized once
// for up to 16 tokens. Lane (g = lane / 4, t = lane % 4) takes 16 bytes (4 words) of row g and of row
// g + 8 for every 128-k block: the 4 lanes of a row cover the block's 64 contiguous bytes. The layout's
// word r of block b holds u[128 b + 16 j + r] in nibble j, so one LOP3 with 0x000F000F | magic turns a word
// into the pair (nibble j, nibble j + 4) = k (16 j + r, 16 j + r + 64) as fp16x2 / bf16x2 "base + u"
// (base 1024 / 128), exact. The mma's k order inside a 16-wide step is free as long as A and B agree, so
// lane t's A pair (logical k 2t, 2t+1) is that physical pair, and the activations are staged in shared
// memory once per CTA already permuted into B-fragment order:
//   piece q of lane (g, t) in block b = 4 x (x[g, k], x[g, k + 64]) for k = 128 b + 16 j + 4 t + q, j = 0..3,
// (token tile 1 uses lane slots 32..63, token g + 8), so a lane reads its B fragments with 4 conflict-free
// 16-byte loads per block and tile. Per word (8 weights): fp16: 1 SHF, 4 LOP3, 4 HFMA2 (u - z, exact; the
// high nibbles via the x16 trick: (1024 + 16 u) / 16 - 64 - z); bf16 (7-bit mantissa, no x16 trick): 3 SHF
// more. Group 128: a block is one group, so the mma sums exact integer weights and the fp32 block sums are
// scaled (4 FFMA per block and tile). Group 64: the pair (j, j + 4) straddles the block's two groups, so
// the weights are scaled first by the pair (s[2b], s[2b + 1]) (4 HMUL2 per word, one fp16/bf16 rounding,
// like dequantize-then-GEMM).
//
// Streaming (session 4; session 3 held two pipeline steps of weights in registers): each warp owns a
// private ring of STAGES shared-memory slots, one slot = its 16 rows x SB blocks (SB KB), filled with
// 16-byte cp.async.cg (L1 bypassed, L2 evict-first: the weights are read once per token). STAGES - 1 slots
// are in flight while the warp computes on one, so the bytes in flight per SM no longer cost registers. The
// copies are coalesced along rows (a warp's instruction reads whole 64-byte blocks of consecutive rows of
// one 128-k span). Bank conflicts: a lane reads 16 bytes at (row g, block u, 16 t), so rows g and g + 1 of
// one 8-lane phase would hit the same banks when a row's slot length is a multiple of 128 bytes; odd rows
// store their blocks pairwise swapped (block u at u ^ 1) when SB is even, which puts the two rows on
// opposite bank halves without padding. Only __syncwarp orders a slot's refill against its last reads.
// The CTA's scales (and zeros) for its whole K chunk are staged in shared memory once, with the activations.
// SASS (sm_90a, fp16 group 128, M <= 8, 4 warps x 2-block slots, read with nvdisasm 13.4): 257 instructions per
// main-loop step of 2 blocks, ~128 per lane per block of 64 weights (session 3's register pipeline: 146).
// Session 37 (SASS of the 8-warp two-row-tile build, nvcc 13.0): the activations' staging divided by the runtime 4 M
// twice per 8-byte unit -- a third of the 16-token kernel's instructions -- and the main loop rebuilt the weight
// copies' shared-memory addresses (the swizzle) per copy and slot. With 16-byte staging units stepped from one
// division a thread, and the addresses written so the compiler folds them, a main-loop step is 538 instructions
// instead of 637 at 9-16 tokens (495 instead of 556 at 1-8). H200, same process, served configs: 4-19% faster at
// 16 tokens and 7-21% at 8 on the Llama-3 8B / 70B layers (bench/results/h200/kernels_s37/README.md).
//
// Work: CTA = WARPS warps = 16 * WARPS output rows x a K chunk of `per` blocks (grid.y = S chunks). S > 1:
// either (flag bit 2, S <= 8) the S CTAs of a row group run as one thread-block cluster and sum their fp32
// partials through distributed shared memory in split order, or each CTA writes fp32 partials to a workspace
// and the last CTA of a row group to arrive (counter) sums the S partials in split order and writes y, then
// resets the counter to 0 for the next call (CUDA-graph safe). Both orders are the same: the same bytes.
// Balanced schedule (flag bit 3, session 6; see Args.bal): a 1-D grid of any CTA count shares the (row group,
// block) units evenly, each CTA's run spanning at most two row groups. H100 (bench/results/h100/kernels_s6): slower
// than the per-row-group split at M = 1 on every shape measured (that split leaves SMs where the next call starts
// early under PDL); faster on the 8B fused gate_up at M = 16 (47.7 -> 42.3 us), the launcher's only default use.
//
// Programmatic dependent launch (flag bit 0, sm_90): the kernel may be scheduled while the previous kernel in
// the stream drains, and waits (`griddepcontrol.wait`) before its first global read, so its launch and setup
// overlap the previous kernel's tail. With flag bit 1 ("early") it also issues its first weight copies and
// loads its scales before the wait, and reads only the activations, the workspace and the counters after it:
// then the weights, scales and zeros must not be written by the kernel launched right before this one (true of
// a model's weights, written once at load). It triggers its dependents once its main loop is done, so the next
// GEMV's setup (and early weight copies) overlap this one's split-K reduction.
//
// Fused inputs (session 7, Args.xform; the runtime's decode step of a W4A16 model, compress/runtime/fastpath.py):
// the down projection can take [gate | up] and form silu(gate) * up while it stages its activations (xform 1), and
// the q/k/v and gate/up projections can take the residual stream x and the block output y and form
// rms_norm(x + y) * w themselves (xform 2: every CTA first reduces the whole row, CTA 0 writes x + y for the next
// residual add). Each removes one launch per use (silu * up, the residual add + RMSNorm) from the decode step;
// the per-CTA cost is the extra loads and math of the staging, after the dependency wait. Measured on the H100
// (bench/results/h100/e2e/session7/): that cost is larger than the launches it removes -- Llama-3-8B W4A16 decode
// TPOT 2.551 -> 2.654 ms with both folds -- so they are built only with -DW4_XFORM=1 (a separate library, opt-in);
// without it this file compiles to the kernels of session 6.
//
// More tokens (session 8): M = 17..64 run 4 or 8 token tiles (MT). The block sums of group 128 would double the
// accumulators, so there the weights are scaled before the mma as for group 64 (one fp16/bf16 rounding of
// (u - z) * s, as dequantize-then-GEMM) and each B fragment is loaded from shared memory where it is used. With
// -DW4_RT=2 a warp owns 32 rows (two 16-row A tiles) and every B fragment feeds both: the shared-memory reads of
// activations per weight byte, which grow with the token tiles, halve. The balanced schedule and the fused inputs
// stay at <= 16 tokens (the entry point refuses more). Token tiles beyond 2 allow up to 255 registers (half the
// resident threads) so the RT x MT accumulator tiles do not spill.
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <type_traits>

#include "launch_ex.cuh"
#include "ring_common.cuh"

#ifndef W4_WARPS
#define W4_WARPS 4
#endif
#ifndef W4_SB
#define W4_SB 2
#endif
#ifndef W4_STAGES
#define W4_STAGES 4
#endif
#ifndef W4_RT
#define W4_RT 1
#endif
#ifndef W4_KS
#define W4_KS 1
#endif
#ifndef W4_ACC
#define W4_ACC 4
#endif

namespace {

constexpr int WARPS = W4_WARPS;
constexpr int THREADS = WARPS * 32;
constexpr int RT = W4_RT;          // 16-row mma tiles per warp (session 8: 2 = one B fragment feeds two A tiles)
constexpr int WROWS = 16 * RT;     // output rows per warp
// Session 25: KS warps share one row tile, warp w taking the tile's ring slots w % KS, w % KS + KS, ... of the K
// chunk (KS = 1: every warp its own tile, sessions 3-24). A CTA then reads KS x SB x 64 contiguous bytes of each of
// its rows at a time instead of SB x 64 -- the DRAM locality that took the 2:4 W8A16 GEMV from 2.15 to 2.7 TB/s
// (kernels/csrc/sp24_w16_gemv.cu). The KS warps' sums meet in shared memory, in warp order, before the epilogue.
constexpr int KS = W4_KS;
// Session 28: up to 8 tokens (one token tile) with one row tile a warp, a block's 8 mmas add into ACC independent
// accumulator sets (mma i into set i % ACC), summed in set order at the block's end, instead of one chain of 8
// dependent mmas: the chain was a warp's only mma work at one token (the H200 profile: fixed-latency dependency
// stalls next to the shared-memory waits, 4 warps per scheduler, no eligible warp in half the cycles). Measured on the
// H200 (bench/results/h200/kernels_s28/README.md), the served build of each layer shape at one token: 0.4-3.3% faster
// on 8 of 12 shapes, within 0.5% on the others. Small, because the math is not what limits there: a build without it
// was only 0.3-1.3 us faster. Two row tiles (RT = 2) and more token tiles already run independent chains.
constexpr int ACC = (RT == 1 ? W4_ACC : 1);
static_assert(W4_ACC == 1 || W4_ACC == 2 || W4_ACC == 4 || W4_ACC == 8, "W4_ACC is 1, 2, 4 or 8");
constexpr int TILES = WARPS / KS;    // row tiles per CTA
constexpr int ROWS = TILES * WROWS;  // output rows per CTA
constexpr int SB = W4_SB;         // 128-k blocks per ring slot
constexpr int STAGES = W4_STAGES; // ring slots per warp
constexpr int MAX_M = 64;         // eight mma n-tiles of 8 tokens (session 8; 16 before)
constexpr int XFORM_MAX_M = 16;   // the fused input transforms serve the decode step (<= 16 tokens)
constexpr int MAX_CLUSTER = 8;    // portable thread-block cluster size
constexpr int SLOT = WROWS * SB * 64;       // bytes per warp per slot (WROWS rows x SB blocks x 64 bytes)
constexpr int CPL = WROWS * SB * 4 / 32;    // 16-byte copies per lane per slot
static_assert(SB >= 1 && STAGES >= 2 && (SB == 1 || SB % 2 == 0), "SB must be 1 or even (the bank swizzle)");
static_assert(CPL >= 1, "a slot must give each lane at least one copy");
static_assert(RT == 1 || RT == 2, "W4_RT is 1 or 2");
static_assert(KS >= 1 && WARPS % KS == 0, "W4_KS must divide W4_WARPS");
// The cluster reduction parks a warp's WROWS x M fp32 partials in its own ring.
static_assert(STAGES * SLOT >= WROWS * MAX_M * 4, "a warp's ring must hold its partials for the cluster reduction");

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

struct Args {
  const uint16_t* x;   // (M, K) fp16/bf16 bits, row stride ldx
  const uint4* q;      // (N, KW) int32 words, as 16-byte vectors
  const uint16_t* s;   // (G, N) scales, x's dtype
  const uint8_t* z;    // (G, N) zero points (asymmetric) or null
  uint16_t* out;       // (M, N)
  float* ws;           // (S, M, N) fp32 partials (S > 1)
  int* counters;       // one per row group, zero on entry and on return
  int M, N, K, ldx, KW, G, kblocks, per, S;
  int early;           // programmatic dependent launch: weights and scales are read before the wait
  int cluster;         // S > 1: the S CTAs of a row group form a cluster and reduce through shared memory
  int bal;             // balanced schedule: S CTAs share the R x kblocks (row group, block) units evenly
  int units;           // bal: R * kblocks
#ifdef W4_XFORM
  // Input transform (session 7; see "Fused inputs" in the header): 0 none; 1 x = [gate | up] (M, 2K) and the
  // activations are silu(gate) * up; 2 the activations are rms_norm(x + y) * nw (y null: rms_norm(x) * nw) and
  // CTA 0 writes x + y to s_out.
  int xform;
  const uint16_t* y;   // xform 2: (M, K) row stride ldx, or null
  const uint16_t* nw;  // xform 2: norm weight (K)
  uint16_t* s_out;     // xform 2 with y: x + y, (M, K) row stride ldx
  float eps;           // xform 2
#endif
};

#ifdef W4_XFORM
// Fused inputs, one element (bits of T): the rounding points of the runtime's glue kernels.
// silu(g) * u in fp32, rounded once (decode_kernels' Triton glue and the compiled fastpath.silu_mul).
template <typename T> __device__ __forceinline__ uint32_t silu_mul_bits(uint32_t g, uint32_t u) {
  const float gf = low_to_f32<T>(g), uf = low_to_f32<T>(u);
  return to_bits<T>(gf / (1.f + expf(-gf)) * uf);
}
// x + y rounded to T (the residual add in the activation dtype).
template <typename T> __device__ __forceinline__ uint32_t add_bits(uint32_t x, uint32_t y) {
  return to_bits<T>(low_to_f32<T>(x) + low_to_f32<T>(y));
}
// transformers' LlamaRMSNorm: (s * r) rounded to T, times the weight, rounded to T.
template <typename T> __device__ __forceinline__ uint32_t norm_bits(uint32_t s, float r, uint32_t w) {
  return to_bits<T>(low_to_f32<T>(to_bits<T>(low_to_f32<T>(s) * r)) * low_to_f32<T>(w));
}
#endif

// Balanced schedule (flag bit 3): the R x kblocks units (row group, 128-k block), row group major, are cut into S
// contiguous runs of floor/ceil(units / S) blocks, CTA c taking units [c * units / S, (c + 1) * units / S). A
// run is at most kblocks long (the launcher checks), so it covers the tail of one row group and/or the head of
// the next: at most two segments. CTA that holds unit u, and the first unit of CTA c:
__device__ __forceinline__ int bal_owner(long long u, const Args& a) { return (int)(((u + 1) * a.S - 1) / a.units); }
__device__ __forceinline__ long long bal_start(int c, const Args& a) { return (long long)c * a.units / a.S; }

// Shared memory of a CTA, in this order (every part a multiple of 16 bytes):
//   ring   WARPS x STAGES x SLOT bytes (weights)
//   xs     (per blocks x 4 pieces x 4M lanes + 1 zero slot) x 16 bytes (activations, B-fragment order)
//   sc     (per * groups per block) x ROWS scales (2 bytes), zc the same count of zero points (1 byte)
__host__ __device__ __forceinline__ int groups_per_block(bool g64) { return g64 ? 2 : 1; }
__host__ __device__ __forceinline__ size_t round16(size_t v) { return (v + 15) & ~(size_t)15; }
__host__ __device__ __forceinline__ size_t ring_bytes() { return (size_t)WARPS * STAGES * SLOT; }
__host__ __device__ __forceinline__ size_t xs_bytes(int per, int M) { return ((size_t)per * 4 * 4 * M + 1) * 16; }
__host__ __device__ __forceinline__ size_t sc_bytes(int per, bool g64) {
  return round16((size_t)per * groups_per_block(g64) * ROWS * 2);
}
__host__ __device__ __forceinline__ size_t zc_bytes(int per, bool g64, bool asym) {
  return asym ? round16((size_t)per * groups_per_block(g64) * ROWS) : 0;
}
__host__ __device__ __forceinline__ size_t smem_bytes(int per, int M, bool g64, bool asym) {
  return ring_bytes() + xs_bytes(per, M) + sc_bytes(per, g64) + zc_bytes(per, g64, asym);
}

// Resident CTAs the register allocation must allow: 512 threads per SM up to 16 tokens (at most 128 registers, as
// session 6); 256 beyond (more token tiles hold more accumulators: 64 fp32 at 64 tokens with two row tiles).
__host__ __device__ constexpr int min_ctas(int mt) { return (mt > 2 ? 256 : 512) / THREADS > 0 ? (mt > 2 ? 256 : 512) / THREADS : 1; }

template <typename T, bool ASYM, bool G64, int MT, bool BAL>
__global__ void __launch_bounds__(THREADS, min_ctas(MT)) w4a16_gemv_kernel(const Args a) {
  extern __shared__ uint4 smem[];
  __shared__ int last;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int wt = warp / KS, wk = warp % KS;  // the warp's row tile, and its turn among the tile's KS warps
  static_assert(KS == 1 || !BAL, "the balanced schedule is built for one warp per row tile");
  // The CTA's blocks: segment A = row group n_base / ROWS, blocks blk0 .. blk0 + la - 1; with the balanced
  // schedule, segment B = the next row group's blocks 0 .. nb - la - 1 (local blocks la .. nb - 1).
  const int split = blockIdx.y;
  int n_base, blk0, nb, la;
  if (BAL) {
    const long long s0 = bal_start(blockIdx.x, a), s1 = bal_start(blockIdx.x + 1, a);
    n_base = (int)(s0 / a.kblocks) * ROWS;
    blk0 = (int)(s0 % a.kblocks);
    nb = (int)(s1 - s0);
    la = min(nb, a.kblocks - blk0);
  } else {
    n_base = blockIdx.x * ROWS;
    blk0 = split * a.per;
    nb = min(a.per, a.kblocks - blk0);
    la = nb;
  }
  const int lanes_m = 4 * a.M;
  constexpr int GPB = G64 ? 2 : 1;

  uint8_t* ring = reinterpret_cast<uint8_t*>(smem);
  uint4* xs = reinterpret_cast<uint4*>(ring + ring_bytes());
  uint16_t* sc = reinterpret_cast<uint16_t*>(reinterpret_cast<uint8_t*>(xs) + xs_bytes(a.per, a.M));
  uint8_t* zc = reinterpret_cast<uint8_t*>(sc) + sc_bytes(a.per, G64);

  // ---- weight copies: lane copy i of a slot = chunk c = lane + 32 i of the warp's 16 rows x SB blocks x 4
  // chunks (row c / (4 SB), block (c / 4) % SB, 16-byte piece c % 4). Rows >= N copy row 0 (valid memory;
  // their results are never stored). Odd rows store block u at u ^ 1 (SB even): see the header.
  // Without `early`, nothing is read before the previous kernel is done (a no-op without the launch attribute).
  if (!a.early) grid_dep_wait();
  const uint64_t pol = evict_first_policy();
  const uint32_t my_ring = smem_addr(ring + warp * STAGES * SLOT);
  // src: segment A's copy source; srcb (balanced, segment B): the row's start + block u, as a 16-byte-vector
  // offset from q (the launcher checks that N * KW / 4 fits an int).
  const uint4* src[CPL];
  int srcb[CPL];
  uint32_t dst[CPL];
  // Chunk c = lane + 32 i: SB divides 8, so its block u and piece are the lane's for every i, and its row is
  // lane / (4 SB) + i 8 / SB. Written out that way the compiler sees dst[i] = dst[0] + 512 i for SB <= 4 (one
  // swizzle parity for all i) and folds it into the copies' address immediates; from c itself it rebuilt the swizzle
  // per copy and slot (session 37, SASS of a 16-token build: ~100 instructions a main-loop step).
  static_assert(8 % SB == 0, "SB divides 8: a lane's block and piece are the same in each of its copies");
  const int cblk = (lane >> 2) % SB, piece = lane & 3, r0 = lane / (4 * SB);
#pragma unroll
  for (int i = 0; i < CPL; ++i) {
    const int r = r0 + i * (8 / SB), u = cblk;
    const int row = n_base + wt * WROWS + r;
    const int rr = row < a.N ? row : 0;
    src[i] = a.q + (size_t)rr * (a.KW / 4) + (size_t)(blk0 + u) * 4 + piece;
    const int rowb = row + ROWS;
    if (BAL) srcb[i] = (rowb < a.N ? rowb : 0) * (a.KW / 4) + u * 4 + piece;
    const int pu = SB > 1 ? (u ^ (r & 1)) : u;
    dst[i] = (uint32_t)(r * SB * 64 + pu * 64 + piece * 16);
  }
  // Ring slots this warp fills over the chunk: its own slot st covers the chunk's slot st * KS + wk.
  const int nst = KS == 1 ? (nb + SB - 1) / SB : max(0, ((nb + SB - 1) / SB - wk + KS - 1) / KS);
  auto issue = [&](int st) {
    const uint32_t base = my_ring + (uint32_t)((st % STAGES) * SLOT);
    const int cst = st * KS + wk;
    const int lbk = cst * SB + cblk;
#pragma unroll
    for (int i = 0; i < CPL; ++i) {
      const uint4* from = !BAL || lbk < la ? src[i] + cst * SB * 4 : a.q + (srcb[i] + (long long)(cst * SB - la) * 4);
      if (lbk < nb) cp_async16(base + dst[i], from, pol);
    }
  };
#pragma unroll
  for (int st = 0; st < STAGES - 1; ++st) {
    if (st < nst) issue(st);
    cp_async_commit();  // one group per slot, empty or not, so wait_group counts slots
  }

  // ---- scales (and zeros) of the chunk for the CTA's rows: (local group, row) in shared memory. They are
  // weights: the first batch is loaded before the dependency wait and stored after the activations' loads are
  // issued, so the two round trips overlap (most chunks fit in one batch).
  // Loaded in row pairs (one 32-bit scale load, one 16-bit zero load; two 16-bit loads when N is odd or a
  // pointer is not aligned for that), so a batch costs few registers.
  const int sc_pairs = nb * GPB * ROWS / 2;
  const bool n_even = (a.N & 1) == 0 && (reinterpret_cast<uintptr_t>(a.s) & 3) == 0 &&
                      (!ASYM || (reinterpret_cast<uintptr_t>(a.z) & 1) == 0);  // and the pointers allow it
  constexpr int SBATCH = 8;  // row pairs per thread in flight
  uint32_t sv[SBATCH], zv[SBATCH];
  auto load_scales = [&](int base) {
#pragma unroll
    for (int r = 0; r < SBATCH; ++r) {
      const int e = 2 * (base + r * THREADS);  // first of the pair; ROWS is even, so both share a group
      sv[r] = 0u;
      zv[r] = 0u;
      if (e < 2 * sc_pairs) {
        const int gl = e / ROWS, lbk = gl / GPB, segb = BAL && lbk >= la;  // local block, in segment B
        const int row = n_base + segb * ROWS + e % ROWS;
        const int gg = (segb ? lbk - la : blk0 + lbk) * GPB + gl % GPB;
        if (gg < a.G && row < a.N) {
          const size_t off = (size_t)gg * a.N + row;
          if (n_even) {  // row even, N even: the pair is aligned and both rows exist
            sv[r] = __ldg(reinterpret_cast<const unsigned int*>(a.s + off));
            if (ASYM) zv[r] = __ldg(reinterpret_cast<const unsigned short*>(a.z + off));
          } else {
            const bool second = row + 1 < a.N;
            sv[r] = (uint32_t)__ldg(a.s + off) | (second ? (uint32_t)__ldg(a.s + off + 1) << 16 : 0u);
            if (ASYM) zv[r] = (uint32_t)__ldg(a.z + off) | (second ? (uint32_t)__ldg(a.z + off + 1) << 8 : 0u);
          }
        }
      }
    }
  };
  auto store_scales = [&](int base) {
#pragma unroll
    for (int r = 0; r < SBATCH; ++r) {
      const int p2 = base + r * THREADS;
      if (p2 < sc_pairs) {
        reinterpret_cast<uint32_t*>(sc)[p2] = sv[r];
        if (ASYM) reinterpret_cast<uint16_t*>(zc)[p2] = (uint16_t)zv[r];
      }
    }
  };
  load_scales(threadIdx.x);

  // Everything below reads what the previous kernel may have written (x) or shares it (ws, counters).
  grid_dep_wait();

#ifdef W4_XFORM
  // ---- xform 2: 1 / rms of each token's row s = x + y (all K columns: every CTA reads the whole row, 8 KB per
  // token at K = 4096, from L2; the staging below then finds its chunk in L1). CTA 0 also writes s.
  __shared__ float rnorm[XFORM_MAX_M];
  __shared__ float rpart[WARPS][XFORM_MAX_M];
  if (a.xform == 2) {
    const bool writer = blockIdx.x == 0 && blockIdx.y == 0 && a.y != nullptr;
    for (int m = 0; m < a.M; ++m) {
      const uint16_t* xr = a.x + (size_t)m * a.ldx;
      const uint16_t* yr = a.y + (size_t)m * a.ldx;
      float ss = 0.f;
#pragma unroll 4
      for (int k = threadIdx.x * 8; k < a.K; k += THREADS * 8) {  // K % 8 == 0, rows 16-byte aligned (launcher)
        uint4 v = __ldg(reinterpret_cast<const uint4*>(xr + k));
        if (a.y != nullptr) {
          const uint4 w = __ldg(reinterpret_cast<const uint4*>(yr + k));
          uint32_t* vv = reinterpret_cast<uint32_t*>(&v);
          const uint32_t* ww = reinterpret_cast<const uint32_t*>(&w);
#pragma unroll
          for (int c = 0; c < 4; ++c) vv[c] = add_bits<T>(vv[c], ww[c]) | (add_bits<T>(vv[c] >> 16, ww[c] >> 16) << 16);
          if (writer) *reinterpret_cast<uint4*>(a.s_out + (size_t)m * a.ldx + k) = v;
        }
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const uint32_t e = word(v, c);
          const float lo = low_to_f32<T>(e), hi = low_to_f32<T>(e >> 16);
          ss = fmaf(lo, lo, ss);
          ss = fmaf(hi, hi, ss);
        }
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
      if (lane == 0) rpart[warp][m] = ss;
    }
    __syncthreads();
    if (threadIdx.x < a.M) {
      float tot = 0.f;
#pragma unroll
      for (int w = 0; w < WARPS; ++w) tot += rpart[w][threadIdx.x];
      rnorm[threadIdx.x] = 1.f / sqrtf(tot / (float)a.K + a.eps);
    }
    __syncthreads();
  }
  // One activation (bits of T) of token m at column kk < K, after the input transform.
  auto xelem = [&](int m, int kk) -> uint32_t {
    const uint16_t* xr = a.x + (size_t)m * a.ldx;
    if (a.xform == 1) return silu_mul_bits<T>(__ldg(xr + kk), __ldg(xr + a.K + kk));
    if (a.xform == 2) {
      const uint32_t xv = __ldg(xr + kk);
      const uint32_t sv = a.y != nullptr ? add_bits<T>(xv, __ldg(a.y + (size_t)m * a.ldx + kk)) : xv;
      return norm_bits<T>(sv, rnorm[m], __ldg(a.nw + kk));
    }
    return __ldg(xr + kk);
  };
#endif

  // ---- activations. One staging unit = (block lb, token m, chunk c = 0..7): x[m, k0 .. k0 + 7] and
  // x[m, k0 + 64 .. k0 + 71], k0 = 128 b + 8 c, two 16-byte loads. Their pairs (x[k], x[k + 64]), k = k0 + e, are
  // slot j = c / 2 of piece q = e % 4 of lane slot ln = 4 m + t, t = 2 (c % 2) + e / 4: two lanes' 4 pieces.
  // A thread issues the loads of BATCH units before storing any. Units go (block, token, chunk), chunk fastest,
  // so 8 threads read 2 x 128 contiguous bytes of a row.
  // Session 37: the units were 8-byte halves of these, found from un by a division and a modulo by the runtime
  // lanes_m (~25 instructions each): the SASS of the 16-token build spent a third of the kernel's instructions here.
  // Now a unit's (block, token) steps by THREADS / 8 from one division per thread.
  {
    uint32_t* xs32 = reinterpret_cast<uint32_t*>(xs);
    const bool xvec = ((reinterpret_cast<uintptr_t>(a.x) | (uintptr_t)a.ldx * 2) & 15) == 0;
    const int units = nb * a.M * 8;
    constexpr int BATCH = MT > 2 ? 2 : 4;  // the wide token tiles need their registers
    constexpr int RSTEP = THREADS / 8;  // (block, token) pairs a step of THREADS units moves on
    static_assert(THREADS % 8 == 0, "a step of THREADS units keeps the chunk");
    const int c = threadIdx.x & 7;
    const int step_b = RSTEP / a.M, step_m = RSTEP % a.M;
    int next_m = (threadIdx.x >> 3) % a.M, next_b = (threadIdx.x >> 3) / a.M;
    const int pq = lanes_m * 4;  // words from one piece to the next
    for (int base = threadIdx.x; base < units; base += BATCH * THREADS) {
      uint4 lo[BATCH], hi[BATCH];
      int ms[BATCH], lbs[BATCH];
#pragma unroll
      for (int r = 0; r < BATCH; ++r) {
        ms[r] = next_m;
        lbs[r] = next_b;
        next_m += step_m;
        next_b += step_b;
        if (next_m >= a.M) {
          next_m -= a.M;
          ++next_b;
        }
      }
#pragma unroll
      for (int r = 0; r < BATCH; ++r) {
        lo[r] = hi[r] = make_uint4(0u, 0u, 0u, 0u);
        if (base + r * THREADS < units) {
          const int lbk = lbs[r];
          const int k0 = (!BAL || lbk < la ? blk0 + lbk : lbk - la) * 128 + 8 * c;
          const uint16_t* xr = a.x + (size_t)ms[r] * a.ldx + k0;
#ifdef W4_XFORM
          if (a.xform == 0 && xvec && k0 + 71 < a.K) {
#else
          if (xvec && k0 + 71 < a.K) {
#endif
            lo[r] = __ldg(reinterpret_cast<const uint4*>(xr));
            hi[r] = __ldg(reinterpret_cast<const uint4*>(xr + 64));
          } else {  // the end of K, an unaligned x (or a fused input transform): element by element
            uint32_t e[16];
#pragma unroll
            for (int q = 0; q < 16; ++q) {
              const int kk = k0 + (q & 7) + (q >> 3) * 64;
#ifdef W4_XFORM
              e[q] = kk < a.K ? xelem(ms[r], kk) : 0u;
#else
              e[q] = kk < a.K ? (uint32_t)__ldg(xr + (q & 7) + (q >> 3) * 64) : 0u;
#endif
            }
            lo[r] = make_uint4(e[0] | (e[1] << 16), e[2] | (e[3] << 16), e[4] | (e[5] << 16), e[6] | (e[7] << 16));
            hi[r] = make_uint4(e[8] | (e[9] << 16), e[10] | (e[11] << 16), e[12] | (e[13] << 16),
                               e[14] | (e[15] << 16));
          }
        }
      }
#pragma unroll
      for (int r = 0; r < BATCH; ++r) {
        if (base + r * THREADS < units) {
          // lane slot 4 m + 2 (c % 2) (then + 1 for e >= 4), slot j = c / 2 of its pieces
          uint32_t* d = xs32 + ((lbs[r] * 4) * lanes_m + 4 * ms[r] + 2 * (c & 1)) * 4 + (c >> 1);
          d[0] = __byte_perm(lo[r].x, hi[r].x, 0x5410);           // e = 0: (x[k0], x[k0 + 64])
          d[pq] = __byte_perm(lo[r].x, hi[r].x, 0x7632);          // e = 1
          d[2 * pq] = __byte_perm(lo[r].y, hi[r].y, 0x5410);      // e = 2
          d[3 * pq] = __byte_perm(lo[r].y, hi[r].y, 0x7632);      // e = 3
          d[4] = __byte_perm(lo[r].z, hi[r].z, 0x5410);           // e = 4: the next lane slot
          d[4 + pq] = __byte_perm(lo[r].z, hi[r].z, 0x7632);      // e = 5
          d[4 + 2 * pq] = __byte_perm(lo[r].w, hi[r].w, 0x5410);  // e = 6
          d[4 + 3 * pq] = __byte_perm(lo[r].w, hi[r].w, 0x7632);  // e = 7
        }
      }
    }
    if (threadIdx.x == 0) xs[nb * 4 * lanes_m] = make_uint4(0u, 0u, 0u, 0u);  // the zero slot (below)
  }
  store_scales(threadIdx.x);
  for (int base = threadIdx.x + SBATCH * THREADS; base < sc_pairs; base += SBATCH * THREADS) {
    load_scales(base);
    store_scales(base);
  }
  __syncthreads();

  // ---- main loop
  // acc[rt][mt]: row tile rt (rows 16 rt + g, 16 rt + g + 8 of the warp) x token tile mt. SCALE_W (M > 16): the
  // weights are scaled before the mma for group 128 too (one fp16/bf16 rounding, as group 64), so the fp32 sums
  // need no per-block copy: the registers go to the wider token tiles.
  constexpr bool SCALE_W = G64 || MT > 2;
  float acc[RT][MT][4];
#pragma unroll
  for (int rt = 0; rt < RT; ++rt) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) acc[rt][mt][0] = acc[rt][mt][1] = acc[rt][mt][2] = acc[rt][mt][3] = 0.f;
  }
  const int lr = wt * WROWS + g;  // the lane's first row inside the CTA (then lr + 8, lr + 16, lr + 24)
  // Balanced schedule: a segment's sums go straight to y when its CTA is the row group's only piece, else to
  // workspace slot 2 c + (0: segment A, 1: segment B) as (slot, token, row in the group) fp32 partials.
  auto bal_pieces = [&](int rg, int* first) {
    const int c0 = bal_owner((long long)rg * a.kblocks, a);
    if (first) *first = c0;
    return bal_owner((long long)(rg + 1) * a.kblocks - 1, a) - c0 + 1;
  };
  auto store_seg = [&](int rbase, int slot, bool direct) {
#pragma unroll
    for (int rt = 0; rt < RT; ++rt) {
      const int la_ = lr + 16 * rt, row_a = rbase + la_, row_b = row_a + 8;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const int tok0 = 8 * mt + 2 * t, tok1 = tok0 + 1;
        if (direct) {
          if (row_a < a.N && tok0 < a.M) a.out[(size_t)tok0 * a.N + row_a] = to_bits<T>(acc[rt][mt][0]);
          if (row_a < a.N && tok1 < a.M) a.out[(size_t)tok1 * a.N + row_a] = to_bits<T>(acc[rt][mt][1]);
          if (row_b < a.N && tok0 < a.M) a.out[(size_t)tok0 * a.N + row_b] = to_bits<T>(acc[rt][mt][2]);
          if (row_b < a.N && tok1 < a.M) a.out[(size_t)tok1 * a.N + row_b] = to_bits<T>(acc[rt][mt][3]);
        } else {
          float* part = a.ws + (size_t)slot * a.M * ROWS;
          if (tok0 < a.M) {
            __stcg(part + tok0 * ROWS + la_, acc[rt][mt][0]);
            __stcg(part + tok0 * ROWS + la_ + 8, acc[rt][mt][2]);
          }
          if (tok1 < a.M) {
            __stcg(part + tok1 * ROWS + la_, acc[rt][mt][1]);
            __stcg(part + tok1 * ROWS + la_ + 8, acc[rt][mt][3]);
          }
        }
      }
    }
  };
  // Tokens >= M have no staged activations: those lanes read one zeroed slot (no per-register select).
  const int zslot = nb * 4 * lanes_m;
  int x_lane[MT], x_piece[MT];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    const bool has_x = g + 8 * mt < a.M;
    x_lane[mt] = has_x ? lane + 32 * mt : zslot;
    x_piece[mt] = has_x ? lanes_m : 0;
  }
  const uint8_t* my_slot0 = ring + warp * STAGES * SLOT + g * SB * 64 + 16 * t;
  const int par = SB > 1 ? (g & 1) : 0;  // rows g, g + 8, g + 16, g + 24 share the parity (the swizzle)
  for (int it = 0; it < nst; ++it) {
    cp_async_wait<STAGES - 2>();
    __syncwarp();  // every lane's copies of slot `it` landed; every lane is done with slot `it - 1`
    {
      const int st = it + STAGES - 1;
      if (st < nst) issue(st);
      cp_async_commit();
    }
    const uint8_t* slot = my_slot0 + (it % STAGES) * SLOT;
#pragma unroll
    for (int u = 0; u < SB; ++u) {
      const int lb = (it * KS + wk) * SB + u;
      if (lb < nb) {
        uint4 wa[RT], wb[RT];
        uint32_t sa[RT], sb[RT], za[RT], zb[RT];
#pragma unroll
        for (int rt = 0; rt < RT; ++rt) {
          const uint8_t* wp = slot + rt * 16 * SB * 64 + (u ^ par) * 64;
          wa[rt] = *reinterpret_cast<const uint4*>(wp);
          wb[rt] = *reinterpret_cast<const uint4*>(wp + 8 * SB * 64);
          const int r0 = lr + 16 * rt;
          za[rt] = zb[rt] = 0x00080008u;
          if (G64) {
            sa[rt] = (uint32_t)sc[(2 * lb) * ROWS + r0] | ((uint32_t)sc[(2 * lb + 1) * ROWS + r0] << 16);
            sb[rt] = (uint32_t)sc[(2 * lb) * ROWS + r0 + 8] | ((uint32_t)sc[(2 * lb + 1) * ROWS + r0 + 8] << 16);
            if (ASYM) {
              za[rt] = (uint32_t)zc[(2 * lb) * ROWS + r0] | ((uint32_t)zc[(2 * lb + 1) * ROWS + r0] << 16);
              zb[rt] = (uint32_t)zc[(2 * lb) * ROWS + r0 + 8] | ((uint32_t)zc[(2 * lb + 1) * ROWS + r0 + 8] << 16);
            }
          } else {
            sa[rt] = sc[lb * ROWS + r0];
            sb[rt] = sc[lb * ROWS + r0 + 8];
            sa[rt] |= sa[rt] << 16;
            sb[rt] |= sb[rt] << 16;
            if (ASYM) {
              za[rt] = zc[lb * ROWS + r0];
              zb[rt] = zc[lb * ROWS + r0 + 8];
              za[rt] |= za[rt] << 16;
              zb[rt] |= zb[rt] << 16;
            }
          }
        }
        if constexpr (MT <= 2) {
          // Up to 16 tokens: the block's B fragments up front (8 registers a tile), sums per block for group 128.
          uint4 bq[MT][4];
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
            for (int c = 0; c < 4; ++c) bq[mt][c] = xs[(lb * 4 + c) * x_piece[mt] + x_lane[mt]];
          }
          // Group 128: this block's (one group's) unscaled sums, in SETS sets. Group 64 with one set adds into acc
          // itself (as before session 28); with more, its sets are added to acc at the block's end.
          constexpr int SETS = MT == 1 ? ACC : 1;
          constexpr bool DIRECT = G64 && SETS == 1;
          float blk[RT][MT][SETS][4];
#pragma unroll
          for (int rt = 0; rt < RT; ++rt) {
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
              for (int j = 0; j < SETS; ++j) blk[rt][mt][j][0] = blk[rt][mt][j][1] = blk[rt][mt][j][2] = blk[rt][mt][j][3] = 0.f;
            }
          }
#pragma unroll
          for (int c = 0; c < 4; ++c) {
#pragma unroll
            for (int rt = 0; rt < RT; ++rt) {
              uint32_t ag[4], ah[4];
              dequant<T, G64>(word(wa[rt], c), sa[rt], za[rt], ag);
              dequant<T, G64>(word(wb[rt], c), sb[rt], zb[rt], ah);
#pragma unroll
              for (int mt = 0; mt < MT; ++mt) {
                float(&d0)[4] = DIRECT ? acc[rt][mt] : blk[rt][mt][(2 * c) % SETS];
                float(&d1)[4] = DIRECT ? acc[rt][mt] : blk[rt][mt][(2 * c + 1) % SETS];
                mma<T>(d0, ag[0], ah[0], ag[1], ah[1], bq[mt][c].x, bq[mt][c].y);
                mma<T>(d1, ag[2], ah[2], ag[3], ah[3], bq[mt][c].z, bq[mt][c].w);
              }
            }
          }
          if constexpr (!DIRECT) {  // the sets' sums into set 0, in set order (group 64: then into acc)
#pragma unroll
            for (int rt = 0; rt < RT; ++rt) {
#pragma unroll
              for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
                for (int j = 1; j < SETS; ++j) {
#pragma unroll
                  for (int e = 0; e < 4; ++e) blk[rt][mt][0][e] += blk[rt][mt][j][e];
                }
                if (G64) {
#pragma unroll
                  for (int e = 0; e < 4; ++e) acc[rt][mt][e] += blk[rt][mt][0][e];
                }
              }
            }
          }
          if (!G64) {
#pragma unroll
            for (int rt = 0; rt < RT; ++rt) {
              const float fa = low_to_f32<T>(sa[rt]), fb = low_to_f32<T>(sb[rt]);
#pragma unroll
              for (int mt = 0; mt < MT; ++mt) {
                acc[rt][mt][0] = fmaf(blk[rt][mt][0][0], fa, acc[rt][mt][0]);
                acc[rt][mt][1] = fmaf(blk[rt][mt][0][1], fa, acc[rt][mt][1]);
                acc[rt][mt][2] = fmaf(blk[rt][mt][0][2], fb, acc[rt][mt][2]);
                acc[rt][mt][3] = fmaf(blk[rt][mt][0][3], fb, acc[rt][mt][3]);
              }
            }
          }
        } else {
          // 17..64 tokens: scaled weights (SCALE_W), each B fragment loaded where it is used and fed to every row
          // tile, so the registers hold RT x MT accumulator tiles and one fragment at a time.
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            uint32_t ag[RT][4], ah[RT][4];
#pragma unroll
            for (int rt = 0; rt < RT; ++rt) {
              dequant<T, SCALE_W>(word(wa[rt], c), sa[rt], za[rt], ag[rt]);
              dequant<T, SCALE_W>(word(wb[rt], c), sb[rt], zb[rt], ah[rt]);
            }
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
              const uint4 b = xs[(lb * 4 + c) * x_piece[mt] + x_lane[mt]];
#pragma unroll
              for (int rt = 0; rt < RT; ++rt) {
                mma<T>(acc[rt][mt], ag[rt][0], ah[rt][0], ag[rt][1], ah[rt][1], b.x, b.y);
                mma<T>(acc[rt][mt], ag[rt][2], ah[rt][2], ag[rt][3], ah[rt][3], b.z, b.w);
              }
            }
          }
        }
        if (BAL && lb == la - 1 && la < nb) {  // balanced: segment A (this row group's tail) is done
          store_seg(n_base, 2 * blockIdx.x, bal_pieces(n_base / ROWS, nullptr) == 1);
#pragma unroll
          for (int rt = 0; rt < RT; ++rt) {
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) acc[rt][mt][0] = acc[rt][mt][1] = acc[rt][mt][2] = acc[rt][mt][3] = 0.f;
          }
        }
      }
    }
  }
  cp_async_wait<0>();  // no copy outlives the kernel (the trailing groups are empty)
  grid_dep_launch();   // the next kernel may start its own weight copies during this epilogue

  // KS > 1: warps 1..KS-1 of a tile leave their sums in their own (now idle) rings, lane-major; warp 0 of the tile
  // adds them in warp order (a fixed order: the same bytes every call) and alone carries the tile on from here.
  const bool holds = KS == 1 || wk == 0;
  if constexpr (KS > 1) {
    static_assert(STAGES * SLOT >= RT * MT * 4 * 32 * 4, "a warp's ring must hold its sums for the tile reduction");
    float* mine = reinterpret_cast<float*>(ring + warp * STAGES * SLOT);
    __syncwarp();  // every lane is done with the ring's last slot
    if (!holds) {
#pragma unroll
      for (int rt = 0; rt < RT; ++rt) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
          for (int c = 0; c < 4; ++c) mine[((rt * MT + mt) * 4 + c) * 32 + lane] = acc[rt][mt][c];
        }
      }
    }
    __syncthreads();
    if (holds) {
#pragma unroll 1
      for (int j = 1; j < KS; ++j) {
        const float* other = reinterpret_cast<const float*>(ring + (warp + j) * STAGES * SLOT);
#pragma unroll
        for (int rt = 0; rt < RT; ++rt) {
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
            for (int c = 0; c < 4; ++c) acc[rt][mt][c] += other[((rt * MT + mt) * 4 + c) * 32 + lane];
          }
        }
      }
    }
    // The cluster reduction below reuses the tile holders' own rings, which no warp reads here.
  }

  // acc[rt][mt]: (row r, token 8 mt + 2t), (row r, 8 mt + 2t + 1), (row r + 8, 8 mt + 2t), (row r + 8, 8 mt + 2t + 1)
  // with r = 16 rt + g of the warp.
  if (BAL) {
    // The last segment's sums (B, or A when the run stays in one row group), then one counter per row group a
    // partial went to; the last of a row group's pieces to arrive sums them in K order (piece 0 first) and resets
    // its counter: the same bytes whatever the arrival order, and graph-replay safe.
    const int rga = n_base / ROWS, two = la < nb, rg = rga + two;
    int c0;
    const int pieces = bal_pieces(rg, &c0);
    store_seg(rg * ROWS, 2 * blockIdx.x + two, pieces == 1);
    if (!two && pieces == 1) return;
    __threadfence();  // partials visible device-wide before the counters move
    __syncthreads();
    if (threadIdx.x == 0) {
      int f = 0;
      if (two) {
        const int pa = bal_pieces(rga, nullptr);
        if (pa > 1 && atomicAdd(a.counters + rga, 1) == pa - 1) f |= 1;
      }
      if (pieces > 1 && atomicAdd(a.counters + rg, 1) == pieces - 1) f |= 2;
      last = f;
    }
    __syncthreads();
    const int f = last;
    if (f == 0) return;
    __threadfence();
#pragma unroll 1
    for (int h = 0; h < 2; ++h) {
      if (!(f & (1 << h))) continue;
      const int r = h == 0 ? rga : rg;
      int first;
      const int np = bal_pieces(r, &first);
      // Piece p > 0 starts a CTA's run (its segment A, slot 2 c); piece 0 is segment B of its CTA when that run
      // began in the row group before.
      const int slot0 = 2 * first + (bal_start(first, a) < (long long)r * a.kblocks ? 1 : 0);
      const int rows_here = min(ROWS, a.N - r * ROWS);
      for (int e = threadIdx.x; e < a.M * rows_here; e += THREADS) {
        const int m = e / rows_here, rl = e % rows_here;
        float sum = __ldcg(a.ws + ((size_t)slot0 * a.M + m) * ROWS + rl);
        // Up to 8 pieces' loads in flight before their adds (a dependent chain would cost one L2 round trip per
        // piece); the adds stay in piece order.
        for (int p0 = 1; p0 < np; p0 += 8) {
          float v[8];
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            v[j] = p0 + j < np ? __ldcg(a.ws + ((size_t)(2 * (first + p0 + j)) * a.M + m) * ROWS + rl) : 0.f;
          }
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            if (p0 + j < np) sum += v[j];
          }
        }
        a.out[(size_t)m * a.N + r * ROWS + rl] = to_bits<T>(sum);
      }
      if (threadIdx.x == 0) a.counters[r] = 0;
    }
    return;
  }

  if (a.S == 1) {
    if (holds) store_seg(n_base, 0, true);
    return;
  }

  if (a.cluster) {
    // Each warp leaves its 16 rows x M tokens of fp32 partials in its own (now idle) ring, the cluster syncs,
    // and CTA rank r sums outputs r, r + S, ... over the S CTAs' shared memory in split order (the same sums
    // in the same order as the workspace path below, so the same bytes), then syncs again so that no CTA
    // leaves while another still reads its shared memory.
    namespace cg = cooperative_groups;
    float* red = reinterpret_cast<float*>(ring + warp * STAGES * SLOT);
    __syncwarp();  // every lane is done with the ring's last slot
    if (holds) {   // a shared tile's other warps hold no sums now (and still meet the cluster barriers)
#pragma unroll
      for (int rt = 0; rt < RT; ++rt) {
        const int r = 16 * rt + g;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          const int tok0 = 8 * mt + 2 * t, tok1 = tok0 + 1;
          if (tok0 < a.M) {
            red[tok0 * WROWS + r] = acc[rt][mt][0];
            red[tok0 * WROWS + r + 8] = acc[rt][mt][2];
          }
          if (tok1 < a.M) {
            red[tok1 * WROWS + r] = acc[rt][mt][1];
            red[tok1 * WROWS + r + 8] = acc[rt][mt][3];
          }
        }
      }
    }
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();
    const int rank = (int)cluster.block_rank();
    const int rows_here = min(ROWS, a.N - n_base);
    for (int e = rank * THREADS + threadIdx.x; e < a.M * rows_here; e += a.S * THREADS) {
      const int m = e / rows_here, rl = e % rows_here;
      float* mine = reinterpret_cast<float*>(ring + (rl / WROWS) * KS * STAGES * SLOT) + m * WROWS + (rl % WROWS);
      float sum = 0.f;
#pragma unroll 8
      for (int sp = 0; sp < a.S; ++sp) sum += *cluster.map_shared_rank(mine, sp);
      a.out[(size_t)m * a.N + n_base + rl] = to_bits<T>(sum);
    }
    cluster.sync();
    return;
  }

  float* part = a.ws + (size_t)split * a.M * a.N;
#pragma unroll
  for (int rt = 0; rt < RT; ++rt) {
    const int row_a = n_base + lr + 16 * rt, row_b = row_a + 8;
    const bool va = holds && row_a < a.N, vb = holds && row_b < a.N;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      const int tok0 = 8 * mt + 2 * t, tok1 = tok0 + 1;
      if (va && tok0 < a.M) __stcg(part + (size_t)tok0 * a.N + row_a, acc[rt][mt][0]);
      if (va && tok1 < a.M) __stcg(part + (size_t)tok1 * a.N + row_a, acc[rt][mt][1]);
      if (vb && tok0 < a.M) __stcg(part + (size_t)tok0 * a.N + row_b, acc[rt][mt][2]);
      if (vb && tok1 < a.M) __stcg(part + (size_t)tok1 * a.N + row_b, acc[rt][mt][3]);
    }
  }
  __threadfence();  // partials visible device-wide before the counter moves
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(a.counters + blockIdx.x, 1) == a.S - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  const int rows_here = min(ROWS, a.N - n_base);
  if (MT > 1 && ((a.N | rows_here) & 3) == 0) {
    // Session 8: 4 rows per 16-byte load and E of them x J splits in flight per thread. The scalar loop below
    // keeps 8 loads in flight, so the last CTA paid one L2 round trip per element and thread: M x rows / THREADS
    // of them (32 at 64 tokens x 256 rows), a tail that grew with M. Same additions in the same (split) order,
    // so the same bytes. Not at <= 8 tokens: there it changed the build's registers, hence the occupancy the
    // split-K plan asks for, and the plans measured slower (H100, call 2 of bench/results/h100/kernels_s8_w4a16).
    constexpr int E = 2, J = MT > 2 ? 8 : 4;  // J = 8 would raise the <= 16-token builds' registers (72 -> 110)
    const int q4 = rows_here >> 2, total = a.M * q4;
    const size_t stride = (size_t)a.M * a.N;  // one split's partials
    for (int base = threadIdx.x; base < total; base += E * THREADS) {
      float4 sum[E];
      size_t off[E];
      bool ok[E];
#pragma unroll
      for (int e = 0; e < E; ++e) {
        const int idx = base + e * THREADS;
        ok[e] = idx < total;
        off[e] = ok[e] ? (size_t)(idx / q4) * a.N + n_base + 4 * (idx % q4) : 0;
        sum[e] = make_float4(0.f, 0.f, 0.f, 0.f);
      }
      for (int sp0 = 0; sp0 < a.S; sp0 += J) {
        float4 v[E][J];
#pragma unroll
        for (int e = 0; e < E; ++e) {
#pragma unroll
          for (int j = 0; j < J; ++j) {
            v[e][j] = ok[e] && sp0 + j < a.S
                          ? __ldcg(reinterpret_cast<const float4*>(a.ws + (size_t)(sp0 + j) * stride + off[e]))
                          : make_float4(0.f, 0.f, 0.f, 0.f);
          }
        }
#pragma unroll
        for (int e = 0; e < E; ++e) {
#pragma unroll
          for (int j = 0; j < J; ++j) {
            if (sp0 + j < a.S) {
              sum[e].x += v[e][j].x;
              sum[e].y += v[e][j].y;
              sum[e].z += v[e][j].z;
              sum[e].w += v[e][j].w;
            }
          }
        }
      }
#pragma unroll
      for (int e = 0; e < E; ++e) {
        if (ok[e]) {
          const uint2 h = make_uint2((uint32_t)to_bits<T>(sum[e].x) | ((uint32_t)to_bits<T>(sum[e].y) << 16),
                                     (uint32_t)to_bits<T>(sum[e].z) | ((uint32_t)to_bits<T>(sum[e].w) << 16));
          *reinterpret_cast<uint2*>(a.out + off[e]) = h;
        }
      }
    }
  } else {
    for (int e = threadIdx.x; e < a.M * rows_here; e += THREADS) {
      const int m = e / rows_here, row = n_base + e % rows_here;
      float sum = 0.f;
#pragma unroll 8
      for (int sp = 0; sp < a.S; ++sp) sum += __ldcg(a.ws + ((size_t)sp * a.M + m) * a.N + row);
      a.out[(size_t)m * a.N + row] = to_bits<T>(sum);
    }
  }
  if (threadIdx.x == 0) a.counters[blockIdx.x] = 0;
}

// The whole per-block shared memory for an instantiation on the current device (launch_ex.cuh).
template <typename T, bool ASYM, bool G64, int MT, bool BAL>
int allow_smem(size_t* limit) {
  return optin_smem_limit(w4a16_gemv_kernel<T, ASYM, G64, MT, BAL>, limit);
}

template <typename T, bool ASYM, bool G64, int MT, bool BAL>
int launch(const Args& a, bool pdl, cudaStream_t stream) {
  auto kernel = w4a16_gemv_kernel<T, ASYM, G64, MT, BAL>;
  const size_t smem = smem_bytes(a.per, a.M, G64, ASYM);
  size_t limit = 0;
  const int rc = allow_smem<T, ASYM, G64, MT, BAL>(&limit);
  if (rc != 0) return rc;
  if (smem > limit) return -4;
  const dim3 grid = BAL ? dim3(a.S, 1) : dim3((a.N + ROWS - 1) / ROWS, a.S);
  return launch_ex(kernel, a, grid, THREADS, smem, pdl, stream, a.cluster ? dim3(1, a.S, 1) : dim3(1, 1, 1));
}

template <typename T, int MT, bool BAL>
int by_schedule(const Args& a, int asym, int g64, bool pdl, cudaStream_t stream) {
  if (asym) return g64 ? launch<T, true, true, MT, BAL>(a, pdl, stream) : launch<T, true, false, MT, BAL>(a, pdl, stream);
  return g64 ? launch<T, false, true, MT, BAL>(a, pdl, stream) : launch<T, false, false, MT, BAL>(a, pdl, stream);
}

template <typename T, int MT>
int by_variant(const Args& a, int asym, int g64, bool pdl, cudaStream_t stream) {
  if constexpr (MT > 2 || KS > 1) {  // the balanced schedule: up to 16 tokens, one warp a tile (the entry point
    return by_schedule<T, MT, false>(a, asym, g64, pdl, stream);  // refuses the rest)
  } else {
    return a.bal ? by_schedule<T, MT, true>(a, asym, g64, pdl, stream) : by_schedule<T, MT, false>(a, asym, g64, pdl, stream);
  }
}

// Token tiles of 8 for M tokens: 1, 2, 4 or 8 (the kernel's MT).
__host__ __device__ constexpr int token_tiles(int M) { return M > 32 ? 8 : (M > 16 ? 4 : (M > 8 ? 2 : 1)); }

template <typename T>
int by_tokens(const Args& a, int asym, int g64, bool pdl, cudaStream_t stream) {
  switch (token_tiles(a.M)) {
    case 1: return by_variant<T, 1>(a, asym, g64, pdl, stream);
    case 2: return by_variant<T, 2>(a, asym, g64, pdl, stream);
    case 4: return by_variant<T, 4>(a, asym, g64, pdl, stream);
    default: return by_variant<T, 8>(a, asym, g64, pdl, stream);
  }
}

template <bool BAL>
int ctas_per_sm(int per, int M, int group, int asym) {
  const bool g64 = group == 64, as = asym != 0;
  const size_t smem = smem_bytes(per, M, g64, as);
  size_t limit = 0;
  int n = 0;
  cudaError_t e;
  // Registers and threads barely depend on the dtype / zeros / group: ask the fp16 symmetric group-128 code
  // of the token tile count that will run.
  if constexpr (BAL && KS > 1) {
    return 0;  // not built with shared row tiles
  } else if (M > 16) {
    if (BAL) return 0;  // not built for more than 16 tokens
    if (M > 32) {
      if (allow_smem<__half, false, false, 8, false>(&limit) != 0 || smem > limit) return 0;
      e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, w4a16_gemv_kernel<__half, false, false, 8, false>, THREADS, smem);
    } else {
      if (allow_smem<__half, false, false, 4, false>(&limit) != 0 || smem > limit) return 0;
      e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, w4a16_gemv_kernel<__half, false, false, 4, false>, THREADS, smem);
    }
  } else if (M > 8) {
    if (allow_smem<__half, false, false, 2, BAL>(&limit) != 0 || smem > limit) return 0;
    e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, w4a16_gemv_kernel<__half, false, false, 2, BAL>, THREADS, smem);
  } else {
    if (allow_smem<__half, false, false, 1, BAL>(&limit) != 0 || smem > limit) return 0;
    e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, w4a16_gemv_kernel<__half, false, false, 1, BAL>, THREADS, smem);
  }
  return e == cudaSuccess ? n : 0;
}

}  // namespace

extern "C" {

// The build's variant: warps sharing a row tile * 100000 + row tiles per warp * 10000 + warps * 100 + blocks per ring
// slot * 10 + ring slots (tile sharing and row tiles counted only when > 1, so the session-6 builds answer as before).
int w4a16_gemv_variant() {
  return (W4_KS > 1 ? W4_KS * 100000 : 0) + (W4_RT > 1 ? W4_RT * 10000 : 0) + W4_WARPS * 100 + W4_SB * 10 + W4_STAGES;
}

// The largest M this build takes.
int w4a16_gemv_max_m() { return MAX_M; }

// Output rows per CTA (one split-K counter per row group).
int w4a16_gemv_rows_per_cta() { return ROWS; }

// Shared-memory bytes of one CTA for a K chunk of `per` blocks.
long w4a16_gemv_smem_bytes(int per, int M, int group, int asym) { return (long)smem_bytes(per, M, group == 64, asym != 0); }

// CTAs of this build resident per SM for a chunk of `per` blocks (0 when it does not fit), from the occupancy
// calculator (registers, shared memory, threads), for the split-K plan; bal: of the balanced schedule's code.
int w4a16_gemv_ctas_per_sm(int per, int M, int group, int asym, int bf16, int bal) {
  (void)bf16;
  return bal ? ctas_per_sm<true>(per, M, group, asym) : ctas_per_sm<false>(per, M, group, asym);
}

// Returns 0, a cudaError_t, or -1 (M outside 1..64), -2 (group not 64/128), -3 (bad split: S * per must
// cover the K blocks, S > 1 needs ws and counters; the balanced schedule with M > 16), -4 (shared memory over the
// device's per-block limit), -5 (see w4a16_gemv_x), -6 (an input transform with M > 16).
// x (M, K) row stride ldx; q (N, Kp/8) int32; s (G, N); z (G, N) uint8 or null; out (M, N) contiguous;
// ws >= S * M * N floats and counters >= ceil(N / rows_per_cta) zero ints when S > 1.
// flags: bit 0 = programmatic dependent launch; bit 1 (with bit 0) = read the weights and scales before waiting
// for the previous kernel (see the header for what that asks of the caller); bit 2 = split-K reduction inside
// a thread-block cluster when 1 < S <= 8 (ws and counters unused then); bit 3 = balanced schedule (Args.bal):
// S CTAs over the ceil(N / rows_per_cta) x kblocks units, per >= ceil(units / S) and per <= kblocks, ws >=
// 2 * S * M * rows_per_cta floats (bit 2 ignored).
// w4a16_gemv_x: the same with an input transform (Args.xform; -5 unless built with -DW4_XFORM=1): 1 = x holds
// [gate | up] (M, 2K), row stride ldx >= 2K, and the activations are silu(gate) * up; 2 = the activations are
// rms_norm(x + y) * nw with eps (y may be null: rms_norm(x) * nw), x + y written to s_out (same row stride ldx);
// x, y, s_out 16-byte aligned, K and ldx multiples of 8 (else -5).
int w4a16_gemv_x(const void* x, int x_is_bf16, const void* q, const void* s, const void* z, void* out, float* ws,
                 int* counters, int M, int N, int K, int ldx, int group, int per, int S, int flags, void* stream_,
                 int xform, const void* y, const void* nw, void* s_out, float eps) {
  if (M < 1 || M > MAX_M) return -1;
  if (xform != 0 && M > XFORM_MAX_M) return -6;
  if ((flags & 8) && (M > 16 || KS > 1)) return -3;  // the balanced schedule: up to 16 tokens, one warp a tile
#ifndef W4_XFORM
  if (xform != 0) return -5;  // this library was built without the fused inputs
#endif
  if (xform < 0 || xform > 2) return -5;
  if (xform == 1 && ldx < 2 * K) return -5;
  if (xform == 2) {
    const uintptr_t al = reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y) |
                         reinterpret_cast<uintptr_t>(s_out);
    if ((al & 15) || (K & 7) || (ldx & 7) || nw == nullptr || (y != nullptr && s_out == nullptr)) return -5;
  }
  if (group != 64 && group != 128) return -2;
  const int kblocks = (K + 127) / 128;
  const bool bal = (flags & 8) != 0;
  if (per < 1 || S < 1) return -3;
  if (!bal && ((long)per * S < kblocks || (long)per * (S - 1) >= kblocks)) return -3;
  const long units = (long)((N + ROWS - 1) / ROWS) * kblocks;
  if (bal) {
    if (S > units || per > kblocks || (long)per * S < units || ws == nullptr || counters == nullptr) return -3;
    if ((long)N * kblocks * 4 >= (1L << 31)) return -3;  // segment B's copy offsets are ints
  } else if (S > 1 && (ws == nullptr || counters == nullptr) && !((flags & 4) && S <= MAX_CLUSTER)) {
    return -3;
  }
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
  const bool pdl = (flags & 1) != 0;
  a.early = pdl && (flags & 2) != 0;
  a.cluster = !bal && (flags & 4) != 0 && S > 1 && S <= MAX_CLUSTER;
  a.bal = bal;
  a.units = (int)units;
#ifdef W4_XFORM
  a.xform = xform;
  a.y = static_cast<const uint16_t*>(y);
  a.nw = static_cast<const uint16_t*>(nw);
  a.s_out = static_cast<uint16_t*>(s_out);
  a.eps = eps;
#endif
  return x_is_bf16 ? by_tokens<__nv_bfloat16>(a, asym, g64, pdl, stream) : by_tokens<__half>(a, asym, g64, pdl, stream);
}

int w4a16_gemv(const void* x, int x_is_bf16, const void* q, const void* s, const void* z, void* out, float* ws,
               int* counters, int M, int N, int K, int ldx, int group, int per, int S, int flags, void* stream_) {
  return w4a16_gemv_x(x, x_is_bf16, q, s, z, out, ws, counters, M, N, K, ldx, group, per, S, flags, stream_, 0,
                      nullptr, nullptr, nullptr, 0.f);
}

}  // extern "C"
