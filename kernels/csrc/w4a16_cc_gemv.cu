// W4A16 one-token GEMV on the CUDA cores (compress.int4 layout, read as it is): y = x @ W^T for one token.
//
// Why a second W4A16 GEMV: the tensor-core GEMV (w4a16_gemv.cu) runs one CTA of 16 warps an SM and streams the
// weights through per-warp cp.async rings; on the H200 its frame, not its math, keeps it 1.4-10 us above a plain read
// of the same bytes (bench/results/h200/kernels_s28). This one has no ring and no shared memory for weights: each
// lane keeps R x U 16-byte words of its rows in flight in registers, small CTAs fill every SM several times over,
// and occupancy hides the latency. At one token a tensor-core mma wastes 7 of its 8 columns, so CUDA-core math costs
// no more. Session 29's probe (bench/results/h200/kernels_s29/cc_gemv_probe.cu) measured the design first.
//
// Math: W[n, k] = (u[n, k] - z[g, n]) * s[g, n] (compress/packing/int4.py). Word r of 128-block b holds nibble j =
// u[n, 128b + 16j + r]. One LOP3 with 0x000F000F | 0x64006400 turns nibbles j and j+4 into the half2 (1024 + u)
// for k = 16j + r and 16j + r + 64; with 0x00F000F0 it gives 1024 + 16u, and one HFMA2 by 1/16 removes the shift,
// so a 32-bit word costs one SHF, four LOP3, four HSUB2/HFMA2 and four HFMA2 for its 8 products. The low halves
// are k < 64 of the block and the high halves k >= 64: with group 64 they are the block's two groups, so each half
// of the fp16 accumulator takes its own scale and zero.
//
// Precision and range: products are summed in fp16 over the 16 low (or high) values of one 16-byte word, then in
// fp32 times the scale. So that neither a product nor such a sum can overflow fp16 (|u - z| <= 15), every CTA stages
// each 128-block b of x scaled by a power of two 2^-e_b that puts its max |x| below 128, and folds 2^e_b into the
// block's scales: exact scalings, so large activations (bf16 ones too: they are staged as fp16) cost no more than
// the fp16 rounding of the small entries of their own block. The sums are in a fixed order: the same inputs give the
// same bytes.
//
// Shared memory holds no weights. x is staged as the lanes read it: chunk c (16 bytes of a weight row = words 4(c%4)..+3 of
// block c/4) needs 4 pieces of 16 bytes, piece p = the 4 half2 (x[k], x[k + 64]) of word 4(c%4) + p; piece p of
// chunk c sits at slot 4c + (p ^ ((c >> 1) & 3)), so the 8 lanes of a quarter warp read 8 different bank groups.
// The CTA's scales and zeros are staged beside x (G x rows each, by cp.async while x is staged).
//
// Work: CTA = WARPS warps, warp = R consecutive rows; lane l takes chunks l, l + 32, ... of its rows, U chunks a row
// in flight. The first U chunks of each row are requested before x is staged (plain launches; under PDL with bit 1).
// Persistent grid (flags bit 2): as many CTAs as fit at once, each staging x once and then taking row groups c,
// c + grid, ..., the next group's first chunks requested before this group's outputs are written. It saves the
// restaging of x where there are many row groups (70B gate/up on the H200: 39.2 -> 35.7 us) and is even or slower
// elsewhere (session 29, call 8).
// Programmatic dependent launch (flags bit 0): launch and setup overlap the previous kernel's tail and the kernel
// waits (griddepcontrol.wait) before reading x; with bit 1 its first weight loads come before the wait (the weights
// must not be written by the kernel right before it, true of a model's weights). It lets the next kernel start once
// its loads are done.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <type_traits>

#include "w4a16_cc_common.cuh"

namespace {

using namespace w4cc;

struct Args {
  const uint16_t* x;   // (K,) fp16 or bf16
  const uint4* q;      // (N, Kp / 32) 16-byte chunks
  const uint16_t* s;   // (G, N), x's dtype
  const uint8_t* z;    // (G, N) or null (symmetric: 8)
  uint16_t* out;       // (N,)
  int N, K, Kp, G;
  int early;  // issue the first weight loads before griddepcontrol.wait and the staging of x
  int n_rg;   // row groups of RB rows; CTA c takes c, c + gridDim.x, ... (one each unless the grid is persistent)
};

__device__ __forceinline__ uint4 ldg_stream(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

// At most 64 registers a thread (32 / WARPS CTAs an SM by registers; 85 for 8 warps with 8 words a lane in flight,
// which spill at 64): 74-80 halved the CTAs resident per SM on the H200 and cost up to 40% (session 29, call 3).
template <int WARPS, int R, int U> constexpr int min_ctas() { return (WARPS == 8 && R * U >= 8) ? 3 : 32 / WARPS; }

template <typename T, bool ASYM, bool G64, int WARPS, int R, int U>
__global__ void __launch_bounds__(WARPS * 32, (min_ctas<WARPS, R, U>())) w4cc_kernel(const Args a) {
  // Shared memory (smem_bytes): x staged, Kp / 8 pieces; 2^e_b of each block, Kp / 128 floats; the CTA's scales,
  // G x RB raw 16-bit values; its zeros, G x RB bytes (asymmetric).
  constexpr int RB = WARPS * R;  // rows of the CTA
  extern __shared__ uint4 xs[];
  float* s_up = reinterpret_cast<float*>(xs + a.Kp / 8);
  uint16_t* s_sc = reinterpret_cast<uint16_t*>(s_up + up_floats(a.Kp));  // 16-byte aligned
  uint8_t* s_z = reinterpret_cast<uint8_t*>(s_sc + a.G * RB);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int CW = a.Kp / 32;  // chunks per row
  int rg = blockIdx.x;           // this CTA's row group
  int row0 = rg * RB + warp * R;  // this warp's first row
  bool live = row0 < a.N;

  uint4 wv[R][U];
  auto load = [&](int c0) {
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int c = c0 + 32 * u;
        const int row = min(row0 + r, a.N - 1);
        wv[r][u] = (live && c < CW) ? ldg_stream(a.q + (size_t)row * CW + c) : make_uint4(0, 0, 0, 0);
      }
  };
  // First weight loads before anything else where that is safe: plain launches (stream order) and early PDL.
  if (a.early) load(lane);
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif

  // The CTA's scales (and zeros): through L1 they cost each lane a line per chunk and row, and the staged x leaves
  // L1 little room at large K (session 29, call 4: 70B down 41.6 us against the probe's 32.3). Copied by cp.async
  // (16 bytes = 8 rows of scales, 8 bytes = 8 rows of zeros; past N zero-filled) so the copy overlaps x's staging;
  // with N % 8 != 0 the rows of a group are not 16-byte aligned, and one value a thread is copied instead.
  auto stage_scales = [&](int n0) {
    if (a.N % 8 == 0) {
      for (int t = threadIdx.x; t < a.G * (RB / 8); t += WARPS * 32) {
        const int g = t / (RB / 8), n = n0 + (t % (RB / 8)) * 8;
        const int bytes = n < a.N ? 16 : 0;  // N % 8 == 0: 8 rows are all in or all out
        const uint16_t* src = bytes ? a.s + (size_t)g * a.N + n : a.s;
        asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(s_sc + g * RB + n - n0)),
                     "l"(src), "r"(bytes));
        if constexpr (ASYM) {
          const uint8_t* zsrc = bytes ? a.z + (size_t)g * a.N + n : a.z;
          asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(smem_u32(s_z + g * RB + n - n0)),
                       "l"(zsrc), "r"(bytes / 2));
        }
      }
      asm volatile("cp.async.commit_group;\n" ::: "memory");
    } else {
      for (int t = threadIdx.x; t < a.G * RB; t += WARPS * 32) {
        const int g = t / RB, rr = t - g * RB, n = min(n0 + rr, a.N - 1);
        s_sc[t] = __ldg(a.s + (size_t)g * a.N + n);
        if constexpr (ASYM) s_z[t] = __ldg(a.z + (size_t)g * a.N + n);
      }
    }
  };
  stage_scales(rg * RB);
  // Stage x in one pass (w4a16_cc_common.cuh): x * 2^-e_b per 128-block into xs, 2^e_b into s_up.
  stage_x<T>(a.x, a.K, a.Kp, xs, s_up, threadIdx.x, WARPS * 32);
  asm volatile("cp.async.wait_all;\n" ::: "memory");
  __syncthreads();

  // Row groups: compute one, request the next one's first words, write this one's outputs, restage the scales.
  bool have_first = a.early;  // the first U chunks of each row are already in wv
  for (;;) {
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = 0.f;
    if (live) {
      for (int c0 = lane; c0 < CW; c0 += 32 * U) {
        if (c0 != lane || !have_first) load(c0);
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int c = c0 + 32 * u;
          if (c >= CW) break;
          const int sw = (c >> 1) & 3, b = c >> 2;
          uint4 xp[4];
#pragma unroll
          for (int p = 0; p < 4; ++p) xp[p] = xs[c * 4 + (p ^ sw)];
#pragma unroll
          for (int r = 0; r < R; ++r) {
            const int rr = warp * R + r;
            const int g0 = G64 ? 2 * b : b, g1 = G64 ? 2 * b + 1 : b;
            __half2 zc, zc16;
            if constexpr (ASYM) {
              const float z0 = (float)s_z[g0 * RB + rr];
              const float z1 = G64 ? (float)s_z[min(g1, a.G - 1) * RB + rr] : z0;
              zc = __floats2half2_rn(1024.f + z0, 1024.f + z1);
              zc16 = __floats2half2_rn(64.f + z0, 64.f + z1);
            } else {
              zc = __float2half2_rn(1032.f);
              zc16 = __float2half2_rn(72.f);
            }
            __half2 s2 = __float2half2_rn(0.f);
            s2 = dot_word(wv[r][u].x, xp[0], zc, zc16, s2);
            s2 = dot_word(wv[r][u].y, xp[1], zc, zc16, s2);
            s2 = dot_word(wv[r][u].z, xp[2], zc, zc16, s2);
            s2 = dot_word(wv[r][u].w, xp[3], zc, zc16, s2);
            const float2 f = __half22float2(s2);
            const float up = s_up[b];
            const float sc0 = to_f<T>(s_sc[g0 * RB + rr]) * up;
            if constexpr (G64) {
              // A last block with only its first 64 columns has no second group: its high halves are padding
              // (u = 8 against x = 0), and g1 is clamped so the load stays inside the tensor.
              const float sc1 = to_f<T>(s_sc[min(g1, a.G - 1) * RB + rr]) * up;
              acc[r] = fmaf(f.y, sc1, fmaf(f.x, sc0, acc[r]));
            } else {
              acc[r] = fmaf(f.x + f.y, sc0, acc[r]);
            }
          }
        }
      }
    }
    const int done_row0 = row0;
    const bool done_live = live;
    const int next = rg + gridDim.x;
    if (next < a.n_rg) {  // persistent grid: the next group's first loads overlap this group's epilogue
      row0 = next * RB + warp * R;
      live = row0 < a.N;
      load(lane);
      have_first = true;
    } else {
#if __CUDA_ARCH__ >= 900
      asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) acc[r] += __shfl_xor_sync(0xFFFFFFFFu, acc[r], o);
      if (lane == 0 && done_live && done_row0 + r < a.N) a.out[done_row0 + r] = from_f<T>(acc[r]);
    }
    if (next >= a.n_rg) break;
    __syncthreads();  // every warp is done with this group's scales
    rg = next;
    stage_scales(rg * RB);
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    __syncthreads();
  }
}

// Dynamic shared memory of one CTA of rb rows (the kernel's layout).
size_t smem_bytes(const Args& a, int rb, bool asym) {
  return (size_t)a.Kp * 2 + (size_t)up_floats(a.Kp) * 4 + (size_t)a.G * rb * 2 + (asym ? (size_t)a.G * rb : 0);
}

template <typename T, bool ASYM, bool G64, int WARPS, int R, int U>
int launch(Args a, bool pdl, bool persist, cudaStream_t stream) {
  auto kernel = w4cc_kernel<T, ASYM, G64, WARPS, R, U>;
  const size_t smem = smem_bytes(a, WARPS * R, ASYM);
  int resident = 0;  // also raises the kernel's shared-memory limit where smem needs it
  if (const int rc = resident_ctas(kernel, WARPS * 32, smem, &resident)) return rc;
  a.n_rg = (a.N + WARPS * R - 1) / (WARPS * R);
  int grid = a.n_rg;
  if (persist) grid = max(1, min(grid, resident));  // as many CTAs as fit at once, each taking several row groups
  return launch_ex(kernel, a, grid, WARPS * 32, smem, pdl, stream);
}

template <int WARPS, int R, int U>
int by_format(const Args& a, int bf16, int asym, int g64, bool pdl, bool ps, cudaStream_t st) {
#define W4CC_T(T)                                                                                                  \
  if (asym) return g64 ? launch<T, true, true, WARPS, R, U>(a, pdl, ps, st) : launch<T, true, false, WARPS, R, U>(a, pdl, ps, st); \
  return g64 ? launch<T, false, true, WARPS, R, U>(a, pdl, ps, st) : launch<T, false, false, WARPS, R, U>(a, pdl, ps, st);
  if (bf16) { W4CC_T(__nv_bfloat16) }
  W4CC_T(__half)
#undef W4CC_T
}

// Launch configs (warps per CTA, rows per warp, 16-byte chunks a row in flight per lane), by index.
constexpr int CONFIGS[][3] = {{8, 2, 2}, {8, 1, 4}, {16, 2, 4}, {4, 2, 2}, {8, 2, 4}, {16, 1, 4}};
constexpr int NUM_CONFIGS = sizeof(CONFIGS) / sizeof(CONFIGS[0]);

// Config i (checked by the caller) as the kernel template of its CONFIGS row: each config is written once, there.
template <int I = 0>
int by_config(int i, const Args& a, int bf16, int asym, int g64, bool pdl, bool ps, cudaStream_t st) {
  if constexpr (I + 1 < NUM_CONFIGS) {
    if (i != I) return by_config<I + 1>(i, a, bf16, asym, g64, pdl, ps, st);
  }
  return by_format<CONFIGS[I][0], CONFIGS[I][1], CONFIGS[I][2]>(a, bf16, asym, g64, pdl, ps, st);
}

}  // namespace

extern "C" {

int w4cc_num_configs() { return NUM_CONFIGS; }
int w4cc_config(int i, int field) { return CONFIGS[i][field]; }

// Returns 0, a cudaError_t, or -1 (bad config index), -2 (group not 64/128), -3 (K not a positive multiple of 8),
// -4 (x or q not 16-byte aligned), -5 (staged x, scales and zeros over the shared memory of a block).
// x (K,) contiguous; q (N, Kp/8) int32 with Kp = ceil(K / 128) * 128; s (G, N) in x's dtype; z (G, N) uint8 or
// null; out (N,). flags: bit 0 = programmatic dependent launch, bit 1 (with bit 0) = weights read before the wait,
// bit 2 = persistent grid (as many CTAs as fit at once, each staging x once for several row groups).
int w4cc_gemv(const void* x, int x_is_bf16, const void* q, const void* s, const void* z, void* out, int N, int K,
              int group, int config, int flags, void* stream_) {
  if (config < 0 || config >= NUM_CONFIGS) return -1;
  if (group != 64 && group != 128) return -2;
  if (K <= 0 || (K & 7)) return -3;
  if ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(q)) & 15) return -4;
  Args a;
  a.x = static_cast<const uint16_t*>(x);
  a.q = static_cast<const uint4*>(q);
  a.s = static_cast<const uint16_t*>(s);
  a.z = static_cast<const uint8_t*>(z);
  a.out = static_cast<uint16_t*>(out);
  a.N = N;
  a.K = K;
  a.Kp = (K + 127) / 128 * 128;
  a.G = (K + group - 1) / group;
  const bool pdl = (flags & 1) != 0, ps = (flags & 4) != 0;
  a.early = !pdl || (flags & 2) != 0;  // weights first: always safe in stream order, asked for under PDL
  cudaStream_t st = static_cast<cudaStream_t>(stream_);
  const int asym = z != nullptr, g64 = group == 64, bf = x_is_bf16 != 0;
  if (smem_bytes(a, CONFIGS[config][0] * CONFIGS[config][1], asym) > 227 * 1024) return -5;
  return by_config(config, a, bf, asym, g64, pdl, ps, st);
}

}  // extern "C"
