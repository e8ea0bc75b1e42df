// Int8 tensor-core GEMV for M = 1..64 tokens (1..16 before session 11): W8A8 (dense int8 weights, mma.sync
// m16n8k32 .s8) and 2:4 int8
// (compress.sparse24 values, mma.sp::ordered_metadata m16n8k64 .s8: the sparse tensor core picks the activations
// the 2-bit positions name, so no instruction gathers them).
//
// Math (both): y[m, n] = float(sum_k xq[m, k] * w[n, k]) * sx[m] * sw[n], int32 sums, fp32 scaling in that order
// (kernels.w8a8.w8a8_linear_ref), output in fp16 / bf16. xq / sx come from kernels.w8a8.quantize_per_token.
//
// Why CUDA C++: the Triton kernels this replaces at 2..16 tokens pay for what Triton places. The W8A8 GEMM's
// tiles pad 1..16 tokens to a 16-row dot and stream the 8B layers at 1.5-2.4 TB/s (session 8 table); the 2:4 int8
// GEMV gathers every kept activation with a PRMT and ~11 instructions per 4 values (2.0 TB/s on 8B gate/up), where
// mma.sp reads the positions itself. Here a warp's weights stream through a private shared-memory ring
// (cp.async, as kernels/csrc/w4a16_gemv.cu), each lane reads its A fragment as one 16-byte word per row, and a
// block costs 2 (dense) or 2 (sparse, per 128 k) tensor-core instructions per token tile.
// Measured (H100, session 10, bench/results/h100/kernels_s10_i8/README.md): the 2:4 mode takes 2:4 int8 layers at 2..8
// tokens from 0.14-0.75x to 1.02-1.20x of dense W8A8 and matches the Triton 2:4 GEMV at one token; the dense mode
// streams 2.0-2.6 TB/s, below kernels/w8a8.py's paths (2.4-3.1), and is not served.
//
// Fragments (PTX ISA, mma m16n8k32 .s8; lane = 4 g + t): A regs a0 (row g, k 4t..4t+3), a1 (row g + 8, same k),
// a2 (row g, k 16 + 4t..), a3 (row g + 8, k 16 + 4t..); B regs b0 (k 4t.., column g), b1 (k 16 + 4t.., column g);
// D d0, d1 (row g, columns 2t, 2t + 1), d2, d3 (row g + 8). The k order inside one mma is free as long as A and B
// agree, so lane (g, t) takes 16 contiguous bytes of row g (and g + 8) at byte 16 t of a 64-byte block:
//   dense (block = 64 k): mma 0 uses bytes 0..7 (a0 = 0..3, a2 = 4..7), mma 1 bytes 8..15; B = the same 16
//   bytes of token g's activations (b0 b1 for mma 0, the next two words for mma 1): one 16-byte read.
//   2:4 (block = 128 k = 64 value bytes = 32 groups of 4): mma.sp m16n8k64 takes A as 16 x 32 kept values (the
//   dense A layout above over value columns) plus one 32-bit metadata register per lane; fragment f = 0, 1 of a
//   block uses value bytes 8 f .. 8 f + 7 of the lane's 16 (its groups 8 t + 4 f + 0..3 of the block), so mma
//   group G of the fragment is block group 8 (G / 2) + 4 f + G % 2 (G < 8) or 8 ((G - 8) / 2) + 4 f + 2 + G % 2.
//   B is 64 k x 8 tokens, b0..b3 = k 4t.., 16 + 4t.., 32 + 4t.., 48 + 4t.. = mma groups t, 4 + t, 8 + t, 12 + t:
//   the activations are staged once per CTA already permuted into that order (4 words per lane and fragment).
//   The metadata register of each lane is packed at load time in exactly register order
//   (kernels/i8_gemv.py `pack_meta_fragments`; measured on the H100 by this file's probe: lane (g, t) holds the
//   positions of row g + 8 (t % 2), groups 8 (t / 2) .. + 7, i.e. of values its quad's other lanes hold).
//
// Streaming: each warp owns 16 rows and a ring of STAGES slots, one slot = 16 rows x SB blocks x 64 bytes (+ SB x
// 256 bytes of fragment-ordered metadata for 2:4), filled with 16-byte cp.async.cg (L1 bypassed, L2 evict-first).
// Odd rows store block u at u ^ 1 (SB even) so the two rows of an 8-lane phase read opposite bank halves.
//
// Work: CTA = WARPS warps = 16 * WARPS rows x a K chunk of `per` blocks (grid.y = S chunks). S > 1: every CTA adds
// its int32 sums into a zeroed int32 workspace (red.global.add: integer sums, so the order of arrival does not
// change a bit), and the last CTA of a row group (counter) scales, writes y, and zeroes the workspace and the
// counter again (CUDA-graph safe). (Session 10, call 3: a balanced stream-K schedule, CTAs sharing the row groups x
// blocks evenly in two segments each, measured slower on every layer at 1, 4 and 16 tokens; not kept.)
//
// More tokens (session 11): M = 17..64 run 4 or 8 token tiles (MT), each weight fragment feeding MT mmas. The staged
// activations grow with MT (8 KB per 2:4 block at 64 tokens), so the launcher lets them take more shared memory
// (kernels/i8_gemv.py STAGED_BYTES_WIDE) rather than cut K into many more chunks, whose int32 adds grow with M.
//
// Programmatic dependent launch (flag bit 0): the kernel may start while the quantizer before it runs; with bit 1
// ("early") it fills its ring and loads its channel scales before `griddepcontrol.wait` (the weights must not be
// written by the kernel launched right before it: true of a model's weights), and reads x, sx, the workspace and
// the counters after it. It triggers its dependents after its main loop.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "launch_ex.cuh"
#include "ring_common.cuh"

#ifndef I8_WARPS
#define I8_WARPS 8
#endif
#ifndef I8_SB
#define I8_SB 2
#endif
#ifndef I8_STAGES
#define I8_STAGES 4
#endif

namespace {

constexpr int WARPS = I8_WARPS;
constexpr int THREADS = WARPS * 32;
constexpr int ROWS = 16 * WARPS;   // output rows per CTA
constexpr int SB = I8_SB;          // blocks per ring slot
constexpr int STAGES = I8_STAGES;  // ring slots per warp
constexpr int MAX_M = 64;          // eight mma n-tiles of 8 tokens (session 11; 16 before)
constexpr int VAL_SLOT = 16 * SB * 64;  // value bytes of one warp's slot
static_assert(SB >= 1 && STAGES >= 2 && (SB == 1 || SB % 2 == 0), "SB must be 1 or even (the bank swizzle)");

template <bool SPARSE> __host__ __device__ constexpr int slot_bytes() { return VAL_SLOT + (SPARSE ? SB * 256 : 0); }
__host__ __device__ constexpr int token_tiles(int M) { return M > 32 ? 8 : (M > 16 ? 4 : (M > 8 ? 2 : 1)); }
// Staged activations per block: 32 lanes x 16 bytes per fragment (2 for 2:4) and token tile, absent tokens as zeros.
// (Session 10, call 3: staging only the lanes of present tokens, with one shared zero slot, saved shared memory but
// its per-mma slot select made the main loop slower.)
template <bool SPARSE> __host__ __device__ constexpr int xs_block_bytes(int mt) { return (SPARSE ? 2 : 1) * mt * 512; }
template <bool SPARSE> __host__ __device__ size_t smem_bytes(int per, int M) {
  return (size_t)WARPS * STAGES * slot_bytes<SPARSE>() + (size_t)per * xs_block_bytes<SPARSE>(token_tiles(M));
}

__device__ __forceinline__ void red_add(int* p, int v) { asm volatile("red.global.add.s32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory"); }

// d += A (16 x 32 int8, row) * B (32 x 8 int8, col), int32.
__device__ __forceinline__ void mma_s8(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                       uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
               "{%0, %1, %2, %3};\n"
               : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
// d += A (16 x 64, 2:4: 16 x 32 kept int8 + metadata e) * B (64 x 8 int8, col), int32. Selector 0: every lane of a
// quad holds metadata (the m16n8k64 .s8 shape).
__device__ __forceinline__ void mma_sp_s8(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                          uint32_t b1, uint32_t b2, uint32_t b3, uint32_t e) {
  asm volatile("mma.sp::ordered_metadata.sync.aligned.m16n8k64.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, "
               "{%4, %5, %6, %7}, {%8, %9, %10, %11}, {%0, %1, %2, %3}, %12, 0x0;\n"
               : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "r"(b2), "r"(b3), "r"(e));
}

// The reference's rounding: int32 -> fp32 (exact for |sum| < 2^24, else one rounding), times sx, times sw.
__device__ __forceinline__ float scaled(int acc, float sx, float sw) {
  return __fmul_rn(__fmul_rn(__int2float_rn(acc), sx), sw);
}

struct Args {
  const int8_t* xq;       // (M, K) int8 codes, row stride ldx bytes (16-byte aligned rows)
  const float* sx;        // (M,) token scales
  const uint4* w;         // dense (N, K) int8 / 2:4 (N, K / 2) int8 values, rows as 16-byte vectors
  const uint4* meta;      // 2:4: fragment-ordered metadata (ceil(N / 16), kblocks, 32 lanes, 2 fragments) uint32
  const float* sw;        // (N,) channel scales
  uint16_t* out;          // (M, N) fp16 / bf16 bits
  int* ws;                // (M, N) int32, zero on entry and on return (S > 1)
  int* counters;          // one per row group, zero on entry and on return (S > 1)
  int M, N, K, ldx, vrow, kblocks, per, S;
  int early;
  // In-kernel quantizer (flag bit 4, few tokens): xf (M, K) fp16 / bf16 bits, row stride ldxf elements; every CTA
  // finds each token's absmax over the whole row (from L2) and quantizes its own chunk while staging it, so no
  // quantizer kernel runs before this one. xq and sx are unused then.
  const uint16_t* xf;
  int ldxf;
  int qin;
};

// kernels.w8a8's codes: clamp(rint(v / s), -127, 127), correctly rounded division, ties to even; 4 values -> a word.
__device__ __forceinline__ uint32_t code(float v, float s) {
  const int q = max(-127, min(127, __float2int_rn(__fdiv_rn(v, s))));
  return (uint32_t)(q & 0xFF);
}
template <typename T> __device__ __forceinline__ uint32_t codes4(uint2 h, float s) {
  return code(low_to_f32<T>(h.x), s) | (code(low_to_f32<T>(h.x >> 16), s) << 8) | (code(low_to_f32<T>(h.y), s) << 16) |
         (code(low_to_f32<T>(h.y >> 16), s) << 24);
}

template <typename T, bool SPARSE, int MT>
__global__ void __launch_bounds__(THREADS, 2) i8_gemv_kernel(const Args a) {
  extern __shared__ uint4 smem[];
  __shared__ int last;
  constexpr int F = SPARSE ? 2 : 1;                         // mma fragments per block
  constexpr int SLOT = slot_bytes<SPARSE>();
  constexpr int VCOPIES = 16 * SB * 4;                      // 16-byte value copies per warp and slot (a multiple of 32)
  constexpr int COPIES = VCOPIES + (SPARSE ? SB * 16 : 0);  // + metadata copies
  constexpr int CPL = (COPIES + 31) / 32;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int n_base = blockIdx.x * ROWS;
  const int blk0 = blockIdx.y * a.per, nb = min(a.per, a.kblocks - blk0);
  const int rg16 = n_base / 16 + warp;                    // the warp's 16-row group
  const int rg16_ok = rg16 * 16 < a.N ? rg16 : 0;         // a warp past N copies group 0 (valid memory, discarded)

  uint8_t* ring = reinterpret_cast<uint8_t*>(smem);
  uint4* xs = reinterpret_cast<uint4*>(ring + (size_t)WARPS * STAGES * SLOT);

  if (!a.early) grid_dep_wait();
  const uint64_t pol = evict_first_policy();
  const uint32_t my_ring = smem_addr(ring + warp * STAGES * SLOT);
  // Lane copy i of a slot: c = lane + 32 i. c < VCOPIES: row c / (4 SB), block (c / 4) % SB, 16-byte piece c % 4;
  // else metadata piece c - VCOPIES of the slot's SB consecutive blocks (256 contiguous bytes each). The sources are
  // kept per copy (session 10, call 2: computing them per copy cost 5-15% of the time).
  const uint4* src[CPL];
  uint32_t dst[CPL];
  int cu[CPL];
#pragma unroll
  for (int i = 0; i < CPL; ++i) {
    const int c = lane + 32 * i;
    if (i * 32 < VCOPIES) {
      const int r = c / (4 * SB), u = (c / 4) % SB, piece = c % 4;
      const int row = n_base + warp * 16 + r;
      src[i] = a.w + (size_t)(row < a.N ? row : 0) * a.vrow + (size_t)(blk0 + u) * 4 + piece;
      dst[i] = (uint32_t)(r * SB * 64 + (SB > 1 ? (u ^ (r & 1)) : u) * 64 + piece * 16);
      cu[i] = u;
    } else {
      const int mc = c < COPIES ? c - VCOPIES : 0;
      src[i] = a.meta + ((size_t)rg16_ok * a.kblocks + blk0) * 16 + mc;
      dst[i] = (uint32_t)(VAL_SLOT + mc * 16);
      cu[i] = c < COPIES ? mc / 16 : SB;  // SB: no copy
    }
  }
  const int nst = (nb + SB - 1) / SB;
  auto issue = [&](int st) {
    const uint32_t base = my_ring + (uint32_t)((st % STAGES) * SLOT);
#pragma unroll
    for (int i = 0; i < CPL; ++i) {
      const int step = i * 32 < VCOPIES ? 4 : 16;  // 16-byte vectors per block: a row's values / a group's metadata
      if (cu[i] < SB && st * SB + cu[i] < nb) cp_async16(base + dst[i], src[i] + (size_t)st * SB * step, pol);
    }
  };
#pragma unroll
  for (int st = 0; st < STAGES - 1; ++st) {
    if (st < nst) issue(st);
    cp_async_commit();
  }
  // Channel scales of the lane's two rows (weights: read before the wait when early).
  const int row_a = n_base + warp * 16 + g, row_b = row_a + 8;
  const float swa = row_a < a.N ? __ldg(a.sw + row_a) : 0.f, swb = row_b < a.N ? __ldg(a.sw + row_b) : 0.f;

  grid_dep_wait();  // x, sx, ws and counters below

  // ---- token scales: loaded, or (qin) each token's absmax over its whole row, as kernels.w8a8 computes it.
  constexpr int TOKS = MT > 2 ? 8 * MT : 16;  // M <= TOKS; 16 up to two token tiles, as before session 11
  __shared__ float s_sx[TOKS];
  if (a.qin) {
    __shared__ float red[WARPS][TOKS];
    for (int m = 0; m < a.M; ++m) {
      const uint16_t* xr = a.xf + (size_t)m * a.ldxf;
      float mx = 0.f;
#pragma unroll 4
      for (int k = threadIdx.x * 8; k < a.K; k += THREADS * 8) {  // K % 64 == 0: whole 16-byte vectors
        const uint4 v = __ldg(reinterpret_cast<const uint4*>(xr + k));
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const uint32_t e = word(v, c);
          mx = fmaxf(mx, fmaxf(fabsf(low_to_f32<T>(e)), fabsf(low_to_f32<T>(e >> 16))));
        }
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      if (lane == 0) red[warp][m] = mx;
    }
    __syncthreads();
    if (threadIdx.x < a.M) {
      float mx = 0.f;
#pragma unroll
      for (int w = 0; w < WARPS; ++w) mx = fmaxf(mx, red[w][threadIdx.x]);
      s_sx[threadIdx.x] = __fdiv_rn(fmaxf(mx, 1e-8f), 127.f);
    }
  } else if (threadIdx.x < a.M) {
    s_sx[threadIdx.x] = __ldg(a.sx + threadIdx.x);
  }
  __syncthreads();

  // ---- activations of the chunk, in B-fragment order: xs[((lb * F + f) * MT + mt) * 32 + lane].
  {
    const int units = nb * F * MT * 32;
    for (int un = threadIdx.x; un < units; un += THREADS) {
      const int ln = un & 31, mt = (un >> 5) % MT, rest = (un >> 5) / MT, f = rest % F, lb = rest / F;
      const int tok = 8 * mt + (ln >> 2), tt = ln & 3;
      uint4 v = make_uint4(0u, 0u, 0u, 0u);
      if (tok < a.M) {
        // Element offsets (within the token's row) of the 4 words: 16 contiguous k (dense), or the 4 activations of
        // block groups base, base + 16, base + 2, base + 18 with base = 8 (t / 2) + 4 f + t % 2 (2:4, the header).
        const int base = SPARSE ? 8 * (tt >> 1) + 4 * f + (tt & 1) : 0;
        const size_t k0 = SPARSE ? (size_t)(blk0 + lb) * 128 : (size_t)(blk0 + lb) * 64 + 16 * tt;
        const size_t off[4] = {SPARSE ? k0 + 4 * base : k0, SPARSE ? k0 + 4 * (base + 16) : k0 + 4,
                               SPARSE ? k0 + 4 * (base + 2) : k0 + 8, SPARSE ? k0 + 4 * (base + 18) : k0 + 12};
        if (a.qin) {
          const uint16_t* xr = a.xf + (size_t)tok * a.ldxf;
          const float sxt = s_sx[tok];
          uint2 h[4];
#pragma unroll
          for (int q = 0; q < 4; ++q) h[q] = __ldg(reinterpret_cast<const uint2*>(xr + off[q]));
          v = make_uint4(codes4<T>(h[0], sxt), codes4<T>(h[1], sxt), codes4<T>(h[2], sxt), codes4<T>(h[3], sxt));
        } else if (!SPARSE) {
          v = __ldg(reinterpret_cast<const uint4*>(a.xq + (size_t)tok * a.ldx + k0));
        } else {
          const int8_t* xr = a.xq + (size_t)tok * a.ldx;
          v.x = __ldg(reinterpret_cast<const uint32_t*>(xr + off[0]));
          v.y = __ldg(reinterpret_cast<const uint32_t*>(xr + off[1]));
          v.z = __ldg(reinterpret_cast<const uint32_t*>(xr + off[2]));
          v.w = __ldg(reinterpret_cast<const uint32_t*>(xr + off[3]));
        }
      }
      xs[un] = v;
    }
  }
  float sxv[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    const int t0 = 8 * mt + 2 * t;
    sxv[mt][0] = t0 < a.M ? s_sx[t0] : 0.f;
    sxv[mt][1] = t0 + 1 < a.M ? s_sx[t0 + 1] : 0.f;
  }
  __syncthreads();

  // ---- main loop
  int acc[MT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) acc[mt][0] = acc[mt][1] = acc[mt][2] = acc[mt][3] = 0;
  const uint8_t* my_slot0 = ring + warp * STAGES * SLOT + g * SB * 64 + 16 * t;
  const int par = SB > 1 ? (g & 1) : 0;  // rows g and g + 8 share the parity (the swizzle)
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
      const int lb = it * SB + u;
      if (lb < nb) {
        const uint4 wa = *reinterpret_cast<const uint4*>(slot + (u ^ par) * 64);
        const uint4 wb = *reinterpret_cast<const uint4*>(slot + (u ^ par) * 64 + 8 * SB * 64);
        if constexpr (SPARSE) {
          const uint2 e = *reinterpret_cast<const uint2*>(ring + warp * STAGES * SLOT + (it % STAGES) * SLOT + VAL_SLOT +
                                                          u * 256 + lane * 8);
#pragma unroll
          for (int f = 0; f < 2; ++f) {
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
              const uint4 b = xs[((lb * 2 + f) * MT + mt) * 32 + lane];
              mma_sp_s8(acc[mt], word(wa, 2 * f), word(wb, 2 * f), word(wa, 2 * f + 1), word(wb, 2 * f + 1), b.x, b.y,
                        b.z, b.w, f ? e.y : e.x);
            }
          }
        } else {
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            const uint4 b = xs[(lb * MT + mt) * 32 + lane];
            mma_s8(acc[mt], wa.x, wb.x, wa.y, wb.y, b.x, b.y);
            mma_s8(acc[mt], wa.z, wb.z, wa.w, wb.w, b.z, b.w);
          }
        }
      }
    }
  }
  cp_async_wait<0>();
  grid_dep_launch();  // the next kernel may start its own weight copies during this epilogue

  // acc[mt]: (row_a, token 8 mt + 2t), (row_a, 8 mt + 2t + 1), (row_b, 8 mt + 2t), (row_b, 8 mt + 2t + 1)
  if (a.S == 1) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      const int t0 = 8 * mt + 2 * t, t1 = t0 + 1;
      if (row_a < a.N && t0 < a.M) a.out[(size_t)t0 * a.N + row_a] = to_bits<T>(scaled(acc[mt][0], sxv[mt][0], swa));
      if (row_a < a.N && t1 < a.M) a.out[(size_t)t1 * a.N + row_a] = to_bits<T>(scaled(acc[mt][1], sxv[mt][1], swa));
      if (row_b < a.N && t0 < a.M) a.out[(size_t)t0 * a.N + row_b] = to_bits<T>(scaled(acc[mt][2], sxv[mt][0], swb));
      if (row_b < a.N && t1 < a.M) a.out[(size_t)t1 * a.N + row_b] = to_bits<T>(scaled(acc[mt][3], sxv[mt][1], swb));
    }
    return;
  }
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    const int t0 = 8 * mt + 2 * t, t1 = t0 + 1;
    if (row_a < a.N && t0 < a.M) red_add(a.ws + (size_t)t0 * a.N + row_a, acc[mt][0]);
    if (row_a < a.N && t1 < a.M) red_add(a.ws + (size_t)t1 * a.N + row_a, acc[mt][1]);
    if (row_b < a.N && t0 < a.M) red_add(a.ws + (size_t)t0 * a.N + row_b, acc[mt][2]);
    if (row_b < a.N && t1 < a.M) red_add(a.ws + (size_t)t1 * a.N + row_b, acc[mt][3]);
  }
  __threadfence();  // the sums are visible device-wide before the counter moves
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(a.counters + blockIdx.x, 1) == a.S - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  const int rows_here = min(ROWS, a.N - n_base);
  for (int e = threadIdx.x; e < a.M * rows_here; e += THREADS) {
    const int m = e / rows_here, row = n_base + e % rows_here;
    int* p = a.ws + (size_t)m * a.N + row;
    const int v = __ldcg(p);
    __stcg(p, 0);
    a.out[(size_t)m * a.N + row] = to_bits<T>(scaled(v, s_sx[m], __ldg(a.sw + row)));
  }
  if (threadIdx.x == 0) a.counters[blockIdx.x] = 0;
}

// The whole per-block shared memory for an instantiation on the current device (launch_ex.cuh).
template <typename T, bool SPARSE, int MT>
int allow_smem(size_t* limit) {
  return optin_smem_limit(i8_gemv_kernel<T, SPARSE, MT>, limit);
}

template <typename T, bool SPARSE, int MT>
int launch(const Args& a, bool pdl, cudaStream_t stream) {
  const size_t smem = smem_bytes<SPARSE>(a.per, a.M);
  size_t limit = 0;
  const int rc = allow_smem<T, SPARSE, MT>(&limit);
  if (rc != 0) return rc;
  if (smem > limit) return -4;
  return launch_ex(i8_gemv_kernel<T, SPARSE, MT>, a, dim3((a.N + ROWS - 1) / ROWS, a.S), THREADS, smem, pdl, stream);
}

template <typename T, bool SPARSE>
int by_tokens(const Args& a, bool pdl, cudaStream_t stream) {
  switch (token_tiles(a.M)) {
    case 1: return launch<T, SPARSE, 1>(a, pdl, stream);
    case 2: return launch<T, SPARSE, 2>(a, pdl, stream);
    case 4: return launch<T, SPARSE, 4>(a, pdl, stream);
    default: return launch<T, SPARSE, 8>(a, pdl, stream);
  }
}

template <bool SPARSE>
int occupancy(int per, int M) {
  const size_t smem = smem_bytes<SPARSE>(per, M);
  size_t limit = 0;
  int n = 0;
  cudaError_t e;
  switch (token_tiles(M)) {
    case 1:
      if (allow_smem<__half, SPARSE, 1>(&limit) != 0 || smem > limit) return 0;
      e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, i8_gemv_kernel<__half, SPARSE, 1>, THREADS, smem);
      break;
    case 2:
      if (allow_smem<__half, SPARSE, 2>(&limit) != 0 || smem > limit) return 0;
      e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, i8_gemv_kernel<__half, SPARSE, 2>, THREADS, smem);
      break;
    case 4:
      if (allow_smem<__half, SPARSE, 4>(&limit) != 0 || smem > limit) return 0;
      e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, i8_gemv_kernel<__half, SPARSE, 4>, THREADS, smem);
      break;
    default:
      if (allow_smem<__half, SPARSE, 8>(&limit) != 0 || smem > limit) return 0;
      e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, i8_gemv_kernel<__half, SPARSE, 8>, THREADS, smem);
  }
  return e == cudaSuccess ? n : 0;
}

// ---- probe of the mma.sp m16n8k64 .s8 fragments (kernels/i8_gemv.py `probe_sparse_layout` decodes it).
// Warp w < 512: A layout. Lane w / 16 holds one kept value 1 at byte w % 16 (all others 0), every metadata nibble
// is 0b0100 (kept positions 0 and 1 of each group of 4), B[k][n] = k + 1: D[m][n] = (k of that value) + 1 in the
// one row m that holds it. out[w * 16 + m] = D[m][0].
// Warp 512 + w, w < 256: metadata layout. Every kept value is 1, every nibble 0b0100 but nibble w % 8 of lane w / 8,
// which is 0b1000 (positions 0 and 2); B[k][0] = 1 and B[k][1] = (k / 4) + 1 where k % 4 == 2, else 0: D[m][0] = 1
// and D[m][1] = (group of 4) + 1 in the row whose group that nibble controls. out[8192 + w * 32 + 2 m + c] = D[m][c].
// B layout assumed: lane (g, t) holds b_q = B[16 q + 4 t + i][g], i = 0..3 in byte i (the dense m16n8k32 layout,
// twice); the GPU test of the kernel checks the whole chain against the reference.
__global__ void sp_probe_kernel(int* out) {
  const int w = blockIdx.x * 8 + (threadIdx.x >> 5), lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  uint32_t a[4] = {0u, 0u, 0u, 0u}, b[4], e = 0x44444444u;
  int d[4] = {0, 0, 0, 0};
  if (w < 512) {
    if (lane == w / 16) a[(w % 16) / 4] = 1u << (8 * (w % 4));
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      uint32_t v = 0u;
      for (int i = 0; i < 4; ++i) v |= (uint32_t)(16 * q + 4 * t + i + 1) << (8 * i);
      b[q] = v;
    }
  } else if (w < 768) {
    const int c = w - 512;
    a[0] = a[1] = a[2] = a[3] = 0x01010101u;
    if (lane == c / 8) e = (e & ~(0xFu << (4 * (c % 8)))) | (0x8u << (4 * (c % 8)));
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      uint32_t v = 0u;
      for (int i = 0; i < 4; ++i) {
        const int k = 16 * q + 4 * t + i;
        const int val = (k % 4 != 2) ? 0 : (g == 0 ? 1 : (g == 1 ? k / 4 + 1 : 0));
        v |= (uint32_t)val << (8 * i);
      }
      b[q] = v;
    }
  } else {
    return;
  }
  mma_sp_s8(d, a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3], e);
  // d0 = (row g, col 2t), d1 = (row g, 2t + 1), d2 = (row g + 8, 2t), d3 = (row g + 8, 2t + 1)
  if (w < 512) {
    if (t == 0) {
      out[w * 16 + g] = d[0];
      out[w * 16 + g + 8] = d[2];
    }
  } else if (t == 0) {
    const int c = w - 512;
    out[8192 + c * 32 + 2 * g] = d[0];
    out[8192 + c * 32 + 2 * g + 1] = d[1];
    out[8192 + c * 32 + 2 * (g + 8)] = d[2];
    out[8192 + c * 32 + 2 * (g + 8) + 1] = d[3];
  }
}

}  // namespace

extern "C" {

// The build's variant: warps * 100 + blocks per slot * 10 + ring slots.
int i8_gemv_variant() { return I8_WARPS * 100 + I8_SB * 10 + I8_STAGES; }
int i8_gemv_rows_per_cta() { return ROWS; }
long i8_gemv_smem_bytes(int per, int M, int sparse) {
  return (long)(sparse ? smem_bytes<true>(per, M) : smem_bytes<false>(per, M));
}
// CTAs resident per SM for a chunk of `per` blocks (0 when it does not fit), from the occupancy calculator.
int i8_gemv_ctas_per_sm(int per, int M, int sparse) { return sparse ? occupancy<true>(per, M) : occupancy<false>(per, M); }

// Returns 0, a cudaError_t, or -1 (M outside 1..64), -3 (bad split: S * per must cover the blocks, S > 1 needs ws
// and counters), -4 (shared memory over the per-block limit), -5 (K not a multiple of the block: 64 dense, 128 2:4;
// ldx not a multiple of 16, or with bit 4 ldx not a multiple of 8 elements and x not 16-byte aligned; 2:4 without
// metadata).
// flags: bit 0 programmatic dependent launch, bit 1 (with bit 0) weights and channel scales read before the wait,
// bit 2 2:4 (w = values (N, K / 2), meta = fragment-ordered metadata), bit 3 bf16 activations and output (else fp16),
// bit 4 in-kernel quantizer: xq is the fp16 / bf16 x (M, K) itself with row stride ldx elements, sx unused.
int i8_gemv(const void* xq, int ldx, const float* sx, const void* w, const void* meta, const float* sw, void* out,
            int* ws, int* counters, int M, int N, int K, int per, int S, int flags, void* stream_) {
  const bool sparse = (flags & 4) != 0, bf16 = (flags & 8) != 0, pdl = (flags & 1) != 0, qin = (flags & 16) != 0;
  if (M < 1 || M > MAX_M) return -1;
  const int bk = sparse ? 128 : 64;
  if (K % bk != 0 || (sparse && meta == nullptr)) return -5;
  if (qin ? (ldx % 8 != 0 || (reinterpret_cast<uintptr_t>(xq) & 15)) : ldx % 16 != 0) return -5;
  const int kblocks = K / bk;
  if (per < 1 || S < 1 || (long)per * S < kblocks || (long)per * (S - 1) >= kblocks) return -3;
  if (S > 1 && (ws == nullptr || counters == nullptr)) return -3;
  Args a;
  a.xq = static_cast<const int8_t*>(xq);
  a.sx = sx;
  a.w = static_cast<const uint4*>(w);
  a.meta = static_cast<const uint4*>(meta);
  a.sw = sw;
  a.out = static_cast<uint16_t*>(out);
  a.ws = ws;
  a.counters = counters;
  a.M = M;
  a.N = N;
  a.K = K;
  a.ldx = ldx;
  a.vrow = (sparse ? K / 2 : K) / 16;
  a.kblocks = kblocks;
  a.per = per;
  a.S = S;
  a.early = pdl && (flags & 2) != 0;
  a.qin = qin;
  a.xf = qin ? static_cast<const uint16_t*>(xq) : nullptr;
  a.ldxf = ldx;
  cudaStream_t stream = static_cast<cudaStream_t>(stream_);
  if (sparse) return bf16 ? by_tokens<__nv_bfloat16, true>(a, pdl, stream) : by_tokens<__half, true>(a, pdl, stream);
  return bf16 ? by_tokens<__nv_bfloat16, false>(a, pdl, stream) : by_tokens<__half, false>(a, pdl, stream);
}

// Runs the fragment probe into out (8192 + 8192 ints, device memory); returns 0 or a cudaError_t.
int i8_sp_probe(int* out, void* stream_) {
  sp_probe_kernel<<<96, 256, 0, static_cast<cudaStream_t>(stream_)>>>(out);
  return (int)cudaGetLastError();
}

}  // extern "C"
