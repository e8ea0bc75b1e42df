// VPTQ (compress.vptq v1) for 1..64 tokens: every codebook row is looked up once per call and multiplied with
// all tokens' activations on the tensor cores (mma.sync m16n8k16), both codebooks in shared memory.
//
// Math (contract: notes/VPTQ_FORMAT.md): for n = g*8 + i,
//   y[m, n] = s[n] * sum_j x[m, j] * (C[idx[j,g], i] + R[ridx[j,g], i]) + t[n] * sum_j x[m, j]
// with the main + residual row summed in fp16 (as the batch-1 GEMV, vptq_gemv.cu) and the products summed
// in fp32. Why not Triton: its gathers go through L1 (vptq_gemv.cu's header), and its few-token kernel
// (kernels/vptq.py `_vptq_gemm_kernel`) measured 366 us on 8B gate/up at 8 tokens (session 21), 9x the fp16
// layer; the lookups here are the GEMV's shared-memory reads, and the tensor cores make the token count
// nearly free.
//
// Fragment mapping (the point of this kernel). A weight vector is 8 outputs of one input column. In the
// mma's B operand (16 k x 8 n, "col"), lane (g = lane/4, q = lane%4) holds column n = g at rows
// k = 2q, 2q+1, 2q+8, 2q+9. A warp runs 8 mmas per 16 columns, one per "n-tile" t = 0..7, and we let
// column g of n-tile t stand for output (slot0 + g)*8 + t: then the 8 values a lane needs for one k across
// the 8 n-tiles are exactly the 8 halves of one codebook row. So a lane looks up 4 rows (its 4 k) per
// 16 columns, and pairs their halves into B registers with byte permutes: no shuffles, no shared-memory
// staging. The A operand is x (16 tokens x 16 columns, "row") straight from global memory (L1-resident).
// Accumulator lane layout: token g (and g + 8), columns 2q, 2q+1 of each n-tile -> outputs
// (slot0 + 2q)*8 + t and (slot0 + 2q + 1)*8 + t: two runs of 8 consecutive outputs per token.
//
// Work: a CTA of 8 warps covers 512 outputs (warp w: slots w*8 .. w*8+7 of the tile) over one of S
// contiguous slices of K, 16 columns a step, each lane's index words and x fragments for the next step loaded
// into registers while it decodes the current one. (A 4-slot cp.async ring in shared memory, 3 steps ahead,
// measured slower at 1-16 tokens and no faster at 32-64: session 21, bench/results/h100/kernels_s21/call3.)
// It writes fp32 partials (tile, slice, token, 512) and, in tile 0, the slice's x
// sums. A second kernel sums the S partials in slice order, applies scale / bias, writes y: deterministic,
// no atomics, nothing left in the workspace that the next call depends on (CUDA-graph safe).
// Shared memory: main codebook 16 << B bytes (room for any B-bit index), residual codebook replicated 8x
// (row r at r*128 + copy*16; lane l reads copy l % 8: conflict-free within each quarter warp).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "launch_ex.cuh"
#include "vptq_common.cuh"

namespace {

constexpr int WARPS = 8;
constexpr int THREADS = WARPS * 32;
constexpr int TILE_N = WARPS * 64;  // outputs per CTA
constexpr int RCOPIES = 8;          // residual codebook copies (row stride 128 bytes)

template <typename XT>
struct Mma;
template <>
struct Mma<__half> {
  static __device__ __forceinline__ uint32_t weights(uint32_t h2) { return h2; }
  static __device__ __forceinline__ void run(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};
template <>
struct Mma<__nv_bfloat16> {
  // bf16 activations: the fp16 codebook pair is rounded to bf16, as the dequantized weight would be.
  static __device__ __forceinline__ uint32_t weights(uint32_t h2) {
    const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h2));
    const __nv_bfloat162 b = __float22bfloat162_rn(f);
    return *reinterpret_cast<const uint32_t*>(&b);
  }
  static __device__ __forceinline__ void run(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ void store(__half* p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ void store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

// What one lane loads for 16 columns: the index words of its 4 columns (main, residual) and its x fragments.
template <int MT>
struct Step {
  uint32_t m[4][2];
  uint32_t r[4][2];
  uint32_t a[MT][4];
};

template <typename XT, int B, int RB, int MT>
__global__ void __launch_bounds__(THREADS, 1)
vptq_gemm_kernel(const XT* __restrict__ x, int M, const int32_t* __restrict__ idx, const uint4* __restrict__ cb, int kc,
                 const int32_t* __restrict__ ridx, const uint4* __restrict__ rcb, int kr, float* __restrict__ ws,
                 float* __restrict__ wsx, int N, int K, int IW, int RW, int has_bias) {
  extern __shared__ __align__(16) unsigned char smem[];
  unsigned char* s_main = smem;
  unsigned char* s_res = smem + ((size_t)16 << B);
  __shared__ float s_xp[4][64];

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, q = lane & 3;
  const int tile = blockIdx.x, S = gridDim.y, s = blockIdx.y;
  const int steps = K / 16;
  const int st0 = static_cast<int>((long)steps * s / S), st1 = static_cast<int>((long)steps * (s + 1) / S);

  // 1. Codebooks into shared memory (main by cp.async, residual replicated), overlapped with the first loads.
  for (int r = tid; r < kc; r += THREADS)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_u32(s_main + (size_t)r * 16)), "l"(cb + r));
  asm volatile("cp.async.commit_group;\n" ::);

  // This lane's vector slot (fixed for the whole call) and where its index sits in every row.
  const int slot = (tile * WARPS + warp) * 8 + g;
  const bool active = slot < N / 8;  // N % 64 == 0: a warp is wholly in or out
  const long mbit = (long)slot * B, rbit = (long)slot * (RB ? RB : 1);
  const int mw = static_cast<int>(mbit >> 5), mw1 = min(mw + 1, IW - 1);
  const int rw = static_cast<int>(rbit >> 5), rw1 = min(rw + 1, RW - 1);
  const uint32_t msh = static_cast<uint32_t>(mbit & 31), rsh = static_cast<uint32_t>(rbit & 31);
  const int kofs[4] = {2 * q, 2 * q + 1, 2 * q + 8, 2 * q + 9};
  const uint32_t* x32 = reinterpret_cast<const uint32_t*>(x);  // K even: a pair of columns is one word

  auto load = [&](Step<MT>& st, int k0) {
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int32_t* row = idx + (long)(k0 + kofs[c]) * IW;
      st.m[c][0] = static_cast<uint32_t>(__ldg(row + mw));
      st.m[c][1] = (32 % B == 0) ? 0u : static_cast<uint32_t>(__ldg(row + mw1));
      if constexpr (RB > 0) {
        const int32_t* rrow = ridx + (long)(k0 + kofs[c]) * RW;
        st.r[c][0] = static_cast<uint32_t>(__ldg(rrow + rw));
        st.r[c][1] = (32 % RB == 0) ? 0u : static_cast<uint32_t>(__ldg(rrow + rw1));
      }
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      const int r0 = mt * 16 + g, r1 = r0 + 8;
      const long w0 = ((long)r0 * K + k0 + 2 * q) >> 1, w1 = ((long)r1 * K + k0 + 2 * q) >> 1;
      st.a[mt][0] = r0 < M ? __ldg(x32 + w0) : 0u;
      st.a[mt][1] = r1 < M ? __ldg(x32 + w1) : 0u;
      st.a[mt][2] = r0 < M ? __ldg(x32 + w0 + 4) : 0u;
      st.a[mt][3] = r1 < M ? __ldg(x32 + w1 + 4) : 0u;
    }
  };

  float acc[MT][8][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int t = 0; t < 8; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][t][e] = 0.f;

  auto compute = [&](const Step<MT>& st) {
    uint4 v[4];
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const uint32_t im = __funnelshift_r(st.m[c][0], st.m[c][1], msh) & ((1u << B) - 1u);
      v[c] = *reinterpret_cast<const uint4*>(s_main + (size_t)im * 16);
      if constexpr (RB > 0) {
        const uint32_t ir = __funnelshift_r(st.r[c][0], st.r[c][1], rsh) & ((1u << RB) - 1u);
        v[c] = add_h8(v[c], *reinterpret_cast<const uint4*>(s_res + (size_t)ir * (16 * RCOPIES) + (lane & 7) * 16));
      }
    }
    const uint32_t* w0 = reinterpret_cast<const uint32_t*>(&v[0]);
    const uint32_t* w1 = reinterpret_cast<const uint32_t*>(&v[1]);
    const uint32_t* w2 = reinterpret_cast<const uint32_t*>(&v[2]);
    const uint32_t* w3 = reinterpret_cast<const uint32_t*>(&v[3]);
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      // Halves 2u (low) and 2u + 1 (high) of each row: n-tiles 2u and 2u + 1.
      const uint32_t lo_e = Mma<XT>::weights(__byte_perm(w0[u], w1[u], 0x5410));
      const uint32_t hi_e = Mma<XT>::weights(__byte_perm(w2[u], w3[u], 0x5410));
      const uint32_t lo_o = Mma<XT>::weights(__byte_perm(w0[u], w1[u], 0x7632));
      const uint32_t hi_o = Mma<XT>::weights(__byte_perm(w2[u], w3[u], 0x7632));
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        Mma<XT>::run(acc[mt][2 * u], st.a[mt], lo_e, hi_e);
        Mma<XT>::run(acc[mt][2 * u + 1], st.a[mt], lo_o, hi_o);
      }
    }
  };

  Step<MT> cur, nxt;
  const bool work = active && st0 < st1;
  if (work) load(cur, st0 * 16);
  if constexpr (RB > 0) replicate_residual(s_res, rcb, kr, RCOPIES, 7, THREADS);
  asm volatile("cp.async.wait_all;\n" ::);
  __syncthreads();

  if (work) {
    for (int st = st0; st < st1; ++st) {
      if (st + 1 < st1) load(nxt, (st + 1) * 16);
      compute(cur);
      cur = nxt;
    }
    // 2. Partials: token row, then this lane's two runs of 8 outputs.
    float* base = ws + ((long)(tile * S + s) * M) * TILE_N + (warp * 8 + 2 * q) * 8;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {  // h = 0: token g (c0, c1); h = 1: token g + 8 (c2, c3)
        const int row = mt * 16 + g + 8 * h;
        if (row < M) {
          float4* p = reinterpret_cast<float4*>(base + (long)row * TILE_N);
          p[0] = make_float4(acc[mt][0][2 * h], acc[mt][1][2 * h], acc[mt][2][2 * h], acc[mt][3][2 * h]);
          p[1] = make_float4(acc[mt][4][2 * h], acc[mt][5][2 * h], acc[mt][6][2 * h], acc[mt][7][2 * h]);
          p[2] = make_float4(acc[mt][0][2 * h + 1], acc[mt][1][2 * h + 1], acc[mt][2][2 * h + 1], acc[mt][3][2 * h + 1]);
          p[3] = make_float4(acc[mt][4][2 * h + 1], acc[mt][5][2 * h + 1], acc[mt][6][2 * h + 1], acc[mt][7][2 * h + 1]);
        }
      }
    }
  }

  // 3. Tile 0 also sums x over its slice, per token, in a fixed order (4 strided runs, then their sum).
  if (has_bias && tile == 0) {
    const int m = tid & 63, h = tid >> 6;
    float xs = 0.f;
    if (m < M)
      for (int j = st0 * 16 + h; j < st1 * 16; j += 4) xs += to_f32(x[(long)m * K + j]);
    s_xp[h][m] = xs;
    __syncthreads();
    if (tid < M) wsx[(long)s * M + tid] = ((s_xp[0][tid] + s_xp[1][tid]) + s_xp[2][tid]) + s_xp[3][tid];
  }
}

// y[m, n] for 4 consecutive n per thread: the S partials summed in slice order, then scale and bias.
template <typename XT>
__global__ void __launch_bounds__(256)
vptq_gemm_reduce(const float* __restrict__ ws, const float* __restrict__ wsx, const __half* __restrict__ scale,
                 const __half* __restrict__ bias, XT* __restrict__ out, int M, int N, int S) {
  const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (long)M * N / 4) return;
  const int m = static_cast<int>(i / (N / 4)), n = static_cast<int>(i % (N / 4)) * 4;
  const int tile = n / TILE_N, nl = n % TILE_N;
  float4 a = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int s = 0; s < S; ++s) {
    const float4 v = __ldcg(reinterpret_cast<const float4*>(ws + ((long)(tile * S + s) * M + m) * TILE_N + nl));
    a.x += v.x; a.y += v.y; a.z += v.z; a.w += v.w;
  }
  float xs = 0.f;
  if (bias != nullptr)
    for (int s = 0; s < S; ++s) xs += __ldcg(wsx + (long)s * M + m);
  const float y[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    float v = y[c];
    if (scale != nullptr) v *= __half2float(scale[n + c]);
    if (bias != nullptr) v += __half2float(bias[n + c]) * xs;
    store(out + (long)m * N + n + c, v);
  }
}

__host__ __device__ inline size_t gemm_smem(int b, int rb) {
  return ((size_t)16 << b) + (rb ? ((size_t)RCOPIES * 16 << rb) : 0);
}

template <typename XT, int B, int RB, int MT>
int launch(const void* x, int M, const int32_t* idx, const void* cb, int kc, const int32_t* ridx, const void* rcb, int kr,
           const void* scale, const void* bias, void* out, float* ws, float* wsx, int N, int K, int IW, int RW, int S,
           cudaStream_t stream) {
  auto kern = vptq_gemm_kernel<XT, B, RB, MT>;
  const size_t smem = gemm_smem(B, RB);
  // per kernel and device (launch_ex.cuh)
  if (const int e = set_attribute_once(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem))) {
    return refused(static_cast<cudaError_t>(e));
  }
  const dim3 grid((N + TILE_N - 1) / TILE_N, S);
  kern<<<grid, THREADS, smem, stream>>>(static_cast<const XT*>(x), M, idx, static_cast<const uint4*>(cb), kc, ridx,
                                        static_cast<const uint4*>(rcb), kr, ws, wsx, N, K, IW, RW, bias != nullptr);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return static_cast<int>(e);
  const long quads = (long)M * N / 4;
  vptq_gemm_reduce<XT><<<static_cast<unsigned>((quads + 255) / 256), 256, 0, stream>>>(
      ws, wsx, static_cast<const __half*>(scale), static_cast<const __half*>(bias), static_cast<XT*>(out), M, N, S);
  return static_cast<int>(cudaGetLastError());
}

#define GEMM_ARGS x, M, idx, cb, kc, ridx, rcb, kr, scale, bias, out, ws, wsx, N, K, IW, RW, S, stream
#define GEMM_PARAMS const void *x, int M, const int32_t *idx, const void *cb, int kc, const int32_t *ridx, const void *rcb, \
    int kr, const void *scale, const void *bias, void *out, float *ws, float *wsx, int N, int K, int IW, int RW, int S,  \
    cudaStream_t stream

template <typename XT, int B, int RB>
int by_mt(GEMM_PARAMS) {
  if (M <= 16) return launch<XT, B, RB, 1>(GEMM_ARGS);
  if (M <= 32) return launch<XT, B, RB, 2>(GEMM_ARGS);
  return launch<XT, B, RB, 4>(GEMM_ARGS);
}

template <typename XT, int B>
int by_rb(int rb, GEMM_PARAMS) {
  switch (rb) {
    case 0: return by_mt<XT, B, 0>(GEMM_ARGS);
    case 8: return by_mt<XT, B, 8>(GEMM_ARGS);
    case 9: return by_mt<XT, B, 9>(GEMM_ARGS);
  }
  return -1;
}

template <typename XT>
int by_b(int b, int rb, GEMM_PARAMS) {
  switch (b) {
    case 12: return by_rb<XT, 12>(rb, GEMM_ARGS);
    case 13: return by_rb<XT, 13>(rb, GEMM_ARGS);
  }
  return -1;
}

}  // namespace

extern "C" {

// Workspace floats: partials (tiles x S x M x 512) then the x sums (S x M).
long vptq_gemm_workspace_floats(int M, int N, int S) {
  const long tiles = (N + TILE_N - 1) / TILE_N;
  return tiles * S * M * TILE_N + (long)S * M;
}

long vptq_gemm_smem_bytes(int b, int rb) { return (long)gemm_smem(b, rb); }

// y (M, N) = x (M, K) @ W_hat^T for 1 <= M <= 64. Returns 0, a cudaError_t, or -1 for what is not compiled or
// covered (bits, residual bits, M, N % 64, K % 16, S < 1). ws: vptq_gemm_workspace_floats(M, N, S) floats of fp32
// scratch; the x sums follow the partials in the same buffer. scale / bias: fp16 (N,) or null.
int vptq_gemm(const void* x, int x_is_bf16, int M, const int32_t* idx, const void* cb, int kc, int b, const int32_t* ridx,
              const void* rcb, int kr, int rb, const void* scale, const void* bias, void* out, float* ws, int N, int K,
              int IW, int RW, int S, void* stream_) {
  cudaStream_t stream = static_cast<cudaStream_t>(stream_);
  if (M < 1 || M > 64 || N % 64 || K % 16 || S < 1 || S > K / 16) return -1;
  const long tiles = (N + TILE_N - 1) / TILE_N;
  float* wsx = ws + tiles * S * M * TILE_N;
  if (x_is_bf16) return by_b<__nv_bfloat16>(b, rb, GEMM_ARGS);
  return by_b<__half>(b, rb, GEMM_ARGS);
}

}  // extern "C"
