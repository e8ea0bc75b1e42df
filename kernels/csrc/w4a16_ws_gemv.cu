// W4A16 one-token GEMV, warp-specialized (compress.int4 layout, read as it is): y = x @ W^T for one token.
//
// Why a third one-token GEMV: the two others keep their weight bytes in flight either in per-warp cp.async rings that
// the same warps must refill between their math (w4a16_gemv.cu) or in registers (w4a16_cc_gemv.cu, at most 64 a
// thread). Either way the bytes in flight per SM are capped by what the math warps can hold and by when they get to
// issue, and on the H200 both stay 3 us above a plain read of an 8B layer's 29 MB (8.1 us, session 28's read probe).
// Here one producer warp per CTA does nothing but keep NS ring stages in flight with TMA bulk copies (one per weight
// row and stage, completion counted on an mbarrier), and C consumer warps only compute: the bytes in flight are set by
// the ring's depth in shared memory, not by registers, and never wait for the math to issue.
//
// Work: CTA = C consumer warps + 1 producer warp; a persistent grid (as many CTAs as fit) takes row groups c, c + grid,
// ... A ring stage holds, for the RB rows of a group, the next U x 512 bytes of each row (one bulk copy a row), plus
// the stage's scales (and zeros) for those rows (cp.async, counted on the same mbarrier). The producer runs ahead
// across row groups: the ring never drains between them. Two consumers, picked by the config's rows per warp R:
// - CUDA-core (R < 16; RB = C x R): w4a16_cc_gemv.cu's math and layout (its header): one LOP3 turns nibbles (j, j + 4)
//   of a word into the half2 1024 + u, fp16 sums of the 16 low (or high) products of one 16-byte chunk, then fp32
//   times the scale. Warp w owns rows w R .. w R + R - 1; lane l takes chunks l, l + 32, ... of each (conflict-free
//   16-byte shared loads), sums in fp32 over the stages and reduces over the warp once per row group.
// - Tensor-core (R = 16; RB = 16): the C warps share one 16-row tile, warp w taking blocks w, w + C, ... of each stage;
//   mma.sync m16n8k16 with the dequantized weights as A (lane (g, t): 16 bytes of rows g and g + 8 a block) and the
//   same staged x as B in every column, so each lane ends with rows g and g + 8 whole; fp32 sums of exact products
//   (group 64: two sums a block, B split into its k < 64 and k >= 64 halves). The warps' sums meet in shared memory.
//   The row pitch is the span + 64 bytes, so rows g and g + 1 read opposite bank halves.
// x is staged once per CTA, each 128-block scaled by the power of two 2^-e_b that keeps fp16 sums finite, 2^e_b
// folded back into the block's scales (exact; w4a16_cc_common.cuh).
//
// Measured on the H200 (bench/results/h200/kernels_s30/README.md, rotate timing): the fastest one-token path on the 8B
// q/o (3.9-4.0 us against 5.0), k/v, gate/up (11.0-11.2 against 11.4), down (11.2-11.3 against 11.4) and 70B k/v
// layers and the 8B fused q/k/v; slower than the tensor-core GEMV on 70B down, the CUDA-core one on 70B gate/up. Its
// ring alone (-DW4WS_NOMATH, consumers that only read their words) reads the 8B gate/up layer in 7.8 us: the math
// costs the rest. End to end (Llama-3-8B W4A16 decode) it changed nothing measurable.
//
// Needs N % 8 == 0 (a stage's scales are copied 8 rows = 16 bytes at a time) and 16-byte aligned x, q, s, z.
// Programmatic dependent launch (flags bit 0): consumers wait (griddepcontrol.wait) before reading x; with bit 1 the
// producer's weight and scale copies start before that wait (the weights must not be written by the kernel launched
// right before this one: true of a model's weights).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <type_traits>

#include "w4a16_cc_common.cuh"
#include "w4a16_ws_ring.cuh"

namespace {

using namespace w4cc;
using namespace w4ws;

struct Args {
  const uint16_t* x;   // (K,) fp16 or bf16
  const uint8_t* q;    // (N, Kp / 2) bytes
  const uint16_t* s;   // (G, N), x's dtype
  const uint8_t* z;    // (G, N) or null (symmetric: 8)
  uint16_t* out;       // (N,)
  int N, K, Kp, G, group;
  int early;  // the producer's copies start before griddepcontrol.wait
  int n_rg;   // row groups
};

// A config's stage (w4a16_ws_ring.cuh): C consumer warps of R rows (R = 16: the tensor-core consumer), U x 512 weight
// bytes of each row. The CUDA-core consumer's warps each own R rows and read whole rows, lane after lane (no padding);
// the tensor-core consumer's warps share one 16-row tile, warp w taking blocks w, w + C, ... of each stage, their sums
// meeting in shared memory at the end, and read 16 bytes of rows g and g + 1 in one 8-lane phase (a row pitch of 64 mod
// 128 bytes puts them on opposite bank halves).
template <bool ASYM, int GROUP, int C, int R, int U>
struct Stage : RingStage<ASYM, GROUP, (R == 16 ? 16 : C * R), U, (R == 16 ? 64 : 0)> {
  static constexpr bool TC = R == 16;
};

// Shared memory: x staged (Kp / 8 pieces of 16 bytes, as w4a16_cc_gemv.cu); 2^e_b per block (Kp / 128 floats, padded
// to 16 bytes); the NS ring stages.
template <typename T, bool ASYM, bool G64, int C, int R, int U, int NS>
__global__ void __launch_bounds__((C + 1) * 32) w4ws_kernel(const Args a) {
  using S = Stage<ASYM, G64 ? 64 : 128, C, R, U>;
  static_assert(S::RB % 8 == 0, "a row group is a multiple of 8 rows (scales are copied 8 rows at a time)");
  static_assert(!S::TC || U * 512 % 128 == 0, "the tensor-core consumer's row pitch needs a span of whole 128 bytes");
  extern __shared__ uint4 xs[];
  __shared__ uint64_t full[NS], empty[NS];
  float* s_up = reinterpret_cast<float*>(xs + a.Kp / 8);
  uint8_t* ring = reinterpret_cast<uint8_t*>(s_up + up_floats(a.Kp));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int CW = a.Kp / 32;                      // 16-byte chunks of a row
  const int nst = (CW + 32 * U - 1) / (32 * U);  // stages of a row group

  if (threadIdx.x == 0) ring_init(full, empty, NS, C);
  __syncthreads();

  if (warp == C) {
    produce<S, ASYM>(a, ring, full, empty, lane, nst, NS, blockIdx.x, gridDim.x, 0, a.Kp / 2, 0);
    return;
  }

  // ---- consumers: stage x, then the row groups
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  stage_x<T>(a.x, a.K, a.Kp, xs, s_up, threadIdx.x, C * 32);
  asm volatile("bar.sync 1, %0;" ::"n"(C * 32) : "memory");  // the consumers only

  const int g = lane >> 2, tq = lane & 3;  // the tensor-core consumer's mma lane coordinates
  __shared__ float red[S::TC ? 2 : 1][S::TC ? C : 1][16];  // its per-warp sums, double-buffered by row group
  int t = 0, nrg = 0;
  for (int rg = blockIdx.x; rg < a.n_rg; rg += gridDim.x, ++nrg) {
    const int row0 = rg * S::RB + (S::TC ? 0 : warp * R);
    float acc[S::TC ? 2 : R];
#pragma unroll
    for (int r = 0; r < (S::TC ? 2 : R); ++r) acc[r] = 0.f;
    for (int st = 0; st < nst; ++st, ++t) {
      const int slot = t % NS;
      mbar_wait(&full[slot], (t / NS) & 1);
      const uint8_t* base = ring + slot * S::BYTES;
      const uint16_t* sc = reinterpret_cast<const uint16_t*>(base + S::WBYTES);
      const uint8_t* zc = base + S::WBYTES + S::SCB;
      const int g0 = st * S::GS;
      if constexpr (S::TC) {
        // Tensor-core consumer: the warp's 16 rows x the stage's 128-k blocks, one m16n8k16 per 16 k; lane (g, tq)
        // dequantizes 16 bytes of rows g and g + 8 per block (words 4 tq .. 4 tq + 3) straight into A fragments, its
        // pair (nibble j, j + 4) of word r standing for the logical k pair of the fragment; B holds x in the same
        // order (the staged pieces), the same for every column, so every column of the result is the token's and
        // each lane ends with rows g and g + 8 whole. fp32 sums of exact products; group 64 gets two sums per block,
        // its B split into the halves k < 64 (low) and k >= 64 (high).
#pragma unroll
        for (int bl = warp; bl < U * 8; bl += C) {
          const int B = st * U * 8 + bl;  // block of the row
          if (B * 4 < CW) {
            const uint8_t* rp = base + g * S::PITCH + bl * 64 + 16 * tq;
            const uint4 wa = *reinterpret_cast<const uint4*>(rp);
            const uint4 wb = *reinterpret_cast<const uint4*>(rp + 8 * S::PITCH);
            const int c = B * 4 + tq, sw = (c >> 1) & 3;
            const int ra = g, rb = g + 8;
            const int gl0 = (G64 ? 2 * B : B) - g0;
            const int gl1 = G64 ? min(2 * B + 1, a.G - 1) - g0 : gl0;  // a last half block has no second group
            uint32_t nla = 0xE408E408u, nha = 0xD480D480u, nlb = nla, nhb = nha;  // z = 8
            if constexpr (ASYM) {
              const uint32_t za = (uint32_t)zc[gl0 * S::RB + ra] | ((uint32_t)zc[gl1 * S::RB + ra] << 16);
              const uint32_t zb = (uint32_t)zc[gl0 * S::RB + rb] | ((uint32_t)zc[gl1 * S::RB + rb] << 16);
              nla = neg_lo(za); nha = neg_hi(za); nlb = neg_lo(zb); nhb = neg_hi(zb);
            }
            float d[G64 ? 4 : 2][4] = {};
            const uint32_t* wav = reinterpret_cast<const uint32_t*>(&wa);
            const uint32_t* wbv = reinterpret_cast<const uint32_t*>(&wb);
#pragma unroll
            for (int q = 0; q < 4; ++q) {
              const uint4 xp = xs[c * 4 + (q ^ sw)];
              uint32_t pa[4], pb[4];
              dequant_pairs(wav[q], nla, nha, pa);
              dequant_pairs(wbv[q], nlb, nhb, pb);
              if constexpr (G64) {
                mma16816(d[0], pa[0], pb[0], pa[1], pb[1], xp.x & 0xFFFFu, xp.y & 0xFFFFu);
                mma16816(d[1], pa[0], pb[0], pa[1], pb[1], xp.x & 0xFFFF0000u, xp.y & 0xFFFF0000u);
                mma16816(d[2], pa[2], pb[2], pa[3], pb[3], xp.z & 0xFFFFu, xp.w & 0xFFFFu);
                mma16816(d[3], pa[2], pb[2], pa[3], pb[3], xp.z & 0xFFFF0000u, xp.w & 0xFFFF0000u);
              } else {
                mma16816(d[0], pa[0], pb[0], pa[1], pb[1], xp.x, xp.y);
                mma16816(d[1], pa[2], pb[2], pa[3], pb[3], xp.z, xp.w);
              }
            }
            const float up = s_up[B];
            const float sa0 = to_f<T>(sc[gl0 * S::RB + ra]) * up, sb0 = to_f<T>(sc[gl0 * S::RB + rb]) * up;
            if constexpr (G64) {
              const float sa1 = to_f<T>(sc[gl1 * S::RB + ra]) * up, sb1 = to_f<T>(sc[gl1 * S::RB + rb]) * up;
              acc[0] = fmaf(d[1][0] + d[3][0], sa1, fmaf(d[0][0] + d[2][0], sa0, acc[0]));
              acc[1] = fmaf(d[1][2] + d[3][2], sb1, fmaf(d[0][2] + d[2][2], sb0, acc[1]));
            } else {
              acc[0] = fmaf(d[0][0] + d[1][0], sa0, acc[0]);
              acc[1] = fmaf(d[0][2] + d[1][2], sb0, acc[1]);
            }
          }
        }
      } else {  // CUDA-core consumer
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int cl = u * 32 + lane;    // chunk within the stage
          const int c = st * 32 * U + cl;  // chunk within the row
#ifdef W4WS_NOMATH  // session 30's diagnosis build (bench/results/h200/kernels_s30/ws_ab.py diag): the ring alone
          if (c < CW) {
#pragma unroll
            for (int r = 0; r < R; ++r) {
              const uint4 w = *reinterpret_cast<const uint4*>(base + (warp * R + r) * S::PITCH + cl * 16);
              acc[r] += (float)((w.x ^ w.y ^ w.z ^ w.w) & 1);
            }
          }
          if (false) {
#else
          if (c < CW) {
#endif
            const int sw = (c >> 1) & 3, b = c >> 2;
            uint4 xp[4];
#pragma unroll
            for (int p = 0; p < 4; ++p) xp[p] = xs[c * 4 + (p ^ sw)];
            const float up = s_up[b];
            const int gl0 = (G64 ? 2 * b : b) - g0;
            const int gl1 = G64 ? min(2 * b + 1, a.G - 1) - g0 : gl0;  // a last half block has no second group
#pragma unroll
            for (int r = 0; r < R; ++r) {
              const int rr = warp * R + r;
              const uint4 w = *reinterpret_cast<const uint4*>(base + rr * S::PITCH + cl * 16);
              __half2 zh, zh16;
              if constexpr (ASYM) {
                const float z0 = (float)zc[gl0 * S::RB + rr], z1 = (float)zc[gl1 * S::RB + rr];
                zh = __floats2half2_rn(1024.f + z0, 1024.f + z1);
                zh16 = __floats2half2_rn(64.f + z0, 64.f + z1);
              } else {
                zh = __float2half2_rn(1032.f);
                zh16 = __float2half2_rn(72.f);
              }
              __half2 s2 = __float2half2_rn(0.f);
              s2 = dot_word(w.x, xp[0], zh, zh16, s2);
              s2 = dot_word(w.y, xp[1], zh, zh16, s2);
              s2 = dot_word(w.z, xp[2], zh, zh16, s2);
              s2 = dot_word(w.w, xp[3], zh, zh16, s2);
              const float2 f = __half22float2(s2);
              const float sc0 = to_f<T>(sc[gl0 * S::RB + rr]) * up;
              if constexpr (G64) {
                acc[r] = fmaf(f.y, to_f<T>(sc[gl1 * S::RB + rr]) * up, fmaf(f.x, sc0, acc[r]));
              } else {
                acc[r] = fmaf(f.x + f.y, sc0, acc[r]);
              }
            }
          }
        }
      }
      __syncwarp();
      if (lane == 0) mbar_arrive(&empty[slot]);
    }
    if (rg + (int)gridDim.x >= a.n_rg) {
#if __CUDA_ARCH__ >= 900
      asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
    }
    if constexpr (S::TC) {
      // Every lane holds its warp's sums of rows g and g + 8; the C warps' sums meet in shared memory and warp 0 adds
      // them in warp order (the same bytes every call). The buffer alternates by row group: a warp can write the
      // next group's sums while warp 0 still reads these (it reads them before the next barrier).
      float (*rd)[16] = red[nrg & 1];
      if (tq == 0) {
        rd[warp][g] = acc[0];
        rd[warp][g + 8] = acc[1];
      }
      asm volatile("bar.sync 1, %0;" ::"n"(C * 32) : "memory");
      if (warp == 0 && lane < 16) {
        float y = 0.f;
#pragma unroll
        for (int w = 0; w < C; ++w) y += rd[w][lane];
        if (row0 + lane < a.N) a.out[row0 + lane] = from_f<T>(y);
      }
    } else {
#pragma unroll
      for (int r = 0; r < R; ++r) {
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) acc[r] += __shfl_xor_sync(0xFFFFFFFFu, acc[r], o);
        if (lane == 0 && row0 + r < a.N) a.out[row0 + r] = from_f<T>(acc[r]);
      }
    }
  }
}


template <typename T, bool ASYM, bool G64, int C, int R, int U, int NS>
int launch(Args a, bool pdl, int max_grid, cudaStream_t stream) {
  using S = Stage<ASYM, G64 ? 64 : 128, C, R, U>;
  auto kernel = w4ws_kernel<T, ASYM, G64, C, R, U, NS>;
  const size_t smem = (size_t)a.Kp * 2 + (size_t)up_floats(a.Kp) * 4 + (size_t)NS * S::BYTES;
  a.n_rg = (a.N + S::RB - 1) / S::RB;
  int resident = 0;
  if (const int rc = resident_ctas(kernel, (C + 1) * 32, smem, &resident)) return rc;
  if (resident < 1) return -5;
  int grid = min(a.n_rg, resident);
  if (max_grid > 0) grid = min(grid, max_grid);
  return launch_ex(kernel, a, grid, (C + 1) * 32, smem, pdl, stream);
}

template <int C, int R, int U, int NS>
int by_format(const Args& a, int bf16, int asym, int g64, bool pdl, int mg, cudaStream_t st) {
#define W4WS_T(T)                                                                                                  \
  if (asym) return g64 ? launch<T, true, true, C, R, U, NS>(a, pdl, mg, st) : launch<T, true, false, C, R, U, NS>(a, pdl, mg, st); \
  return g64 ? launch<T, false, true, C, R, U, NS>(a, pdl, mg, st) : launch<T, false, false, C, R, U, NS>(a, pdl, mg, st);
  if (bf16) { W4WS_T(__nv_bfloat16) }
  W4WS_T(__half)
#undef W4WS_T
}

// Launch configs (consumer warps, rows per warp, chunks a lane takes of a row per stage, ring stages), by index.
constexpr int CONFIGS[][4] = {{8, 2, 2, 6}, {8, 4, 2, 3}, {4, 4, 1, 8}, {8, 2, 4, 3}, {8, 2, 4, 4}, {16, 1, 4, 3},
                              {8, 1, 8, 3}, {16, 1, 2, 6}, {4, 2, 4, 6}, {8, 2, 2, 4}, {4, 2, 2, 8},
                              {8, 1, 4, 6}, {8, 1, 2, 8}, {8, 16, 2, 6}, {8, 16, 2, 4}, {4, 16, 2, 6}, {8, 16, 4, 3}};
constexpr int NUM_CONFIGS = sizeof(CONFIGS) / sizeof(CONFIGS[0]);

template <int I = 0>
int by_config(int i, const Args& a, int bf16, int asym, int g64, bool pdl, int mg, cudaStream_t st) {
  if constexpr (I + 1 < NUM_CONFIGS) {
    if (i != I) return by_config<I + 1>(i, a, bf16, asym, g64, pdl, mg, st);
  }
  return by_format<CONFIGS[I][0], CONFIGS[I][1], CONFIGS[I][2], CONFIGS[I][3]>(a, bf16, asym, g64, pdl, mg, st);
}

}  // namespace

extern "C" {

int w4ws_num_configs() { return NUM_CONFIGS; }
int w4ws_config(int i, int field) { return CONFIGS[i][field]; }

// Returns 0, a cudaError_t, or -1 (bad config index), -2 (group not 64/128), -3 (K not a positive multiple of 8),
// -4 (x, q, s or z not 16-byte aligned), -5 (does not fit an SM), -6 (N not a multiple of 8).
// flags: bit 0 = programmatic dependent launch, bit 1 (with bit 0) = weights read before the wait. max_grid > 0 caps
// the persistent grid (sweeps).
int w4ws_gemv(const void* x, int x_is_bf16, const void* q, const void* s, const void* z, void* out, int N, int K,
              int group, int config, int flags, int max_grid, void* stream_) {
  if (config < 0 || config >= NUM_CONFIGS) return -1;
  if (const int rc = check_call(x, q, s, z, N, K, group)) return rc;
  Args a;
  a.x = static_cast<const uint16_t*>(x);
  a.q = static_cast<const uint8_t*>(q);
  a.s = static_cast<const uint16_t*>(s);
  a.z = static_cast<const uint8_t*>(z);
  a.out = static_cast<uint16_t*>(out);
  a.N = N;
  a.K = K;
  a.Kp = (K + 127) / 128 * 128;
  a.G = (K + group - 1) / group;
  a.group = group;
  const bool pdl = (flags & 1) != 0;
  a.early = !pdl || (flags & 2) != 0;
  const int asym = z != nullptr, g64 = group == 64, bf = x_is_bf16 != 0;
  return by_config(config, a, bf, asym, g64, pdl, max_grid, static_cast<cudaStream_t>(stream_));
}

}  // extern "C"
