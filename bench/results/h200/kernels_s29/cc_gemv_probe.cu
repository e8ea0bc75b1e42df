// Session 29 probe: can a W4A16 one-token GEMV on the CUDA cores, fed by plain 16-byte loads from many small CTAs,
// beat the served tensor-core GEMV (kernels/csrc/w4a16_gemv.cu: one CTA of 16 warps an SM, cp.async rings) on the
// H200? Session 28 measured plain loads reading the 8B gate/up int4 bytes in 8.1 us where the served GEMV takes
// 11.4 us, and the GEMV's own frame (not its math) costs the difference. This kernel has no ring and no shared
// memory for weights: every lane keeps R x U 16-byte words in flight in registers, and occupancy hides latency.
//
// Layout (probe only; a kernel would get its own --pack format): int4 row-major, row n = K/2 bytes, 16-byte word c
// of a row holds k = 32c .. 32c+31; its 32-bit sub-word s holds k0 = 32c + 8s .. k0+7 with nibble j at k0 + 2j and
// nibble j+4 at k0 + 2j + 1, so one LOP3 per pair yields the half2 that multiplies x[k0+2j .. k0+2j+1]. Symmetric
// (q - 8), one fp16 scale per row and 128 columns. x sits in shared memory, 4 pieces of 16 bytes per word, piece p of
// word c at slot c*4 + (p ^ ((c >> 1) & 3)): the 8 lanes of a quarter warp read 8 different bank groups.
// Products sum in fp16 over P weights (8: one sub-word; 32: the whole word), then in fp32 times the scale.
//
// Every arm is checked against a plain fp32 reference kernel on the same bytes first (max |err| / max |y| printed).
// Timing: one CUDA graph of REPS launches, each on its own copy of the weights (copies >= 3x L2), replayed 7 times;
// median per launch (session 28's read_probe.cu method). Build: nvcc -O3 -std=c++17 -arch=sm_90a -o cc cc_gemv_probe.cu
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e), __FILE__, __LINE__); exit(1); } } while (0)

__device__ __forceinline__ uint4 ldg_stream(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

__device__ __forceinline__ uint32_t lop3_nib(uint32_t w) {  // (w & 0x000F000F) | 0x64006400: two halves 1024 + q
  uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(w), "r"(0x000F000Fu), "r"(0x64006400u));
  return r;
}
__device__ __forceinline__ __half2 u2h2(uint32_t u) { return *reinterpret_cast<__half2*>(&u); }

// 8 products of sub-word w and the 8 x values xp (4 half2), summed into a (fp16).
__device__ __forceinline__ __half2 dot8(uint32_t w, uint4 xp, __half2 a) {
  const __half2 off = __float2half2_rn(1032.f);  // 1024 (the exponent trick) + 8 (symmetric zero point)
  a = __hfma2(__hsub2(u2h2(lop3_nib(w)), off), u2h2(xp.x), a);
  a = __hfma2(__hsub2(u2h2(lop3_nib(w >> 4)), off), u2h2(xp.y), a);
  a = __hfma2(__hsub2(u2h2(lop3_nib(w >> 8)), off), u2h2(xp.z), a);
  a = __hfma2(__hsub2(u2h2(lop3_nib(w >> 12)), off), u2h2(xp.w), a);
  return a;
}

template <int WARPS, int R, int U, int P, bool MATH>
__global__ void __launch_bounds__(WARPS * 32) cc_gemv(const uint4* __restrict__ W, const __half* __restrict__ S,
                                                      const uint4* __restrict__ x, __half* __restrict__ y, int N, int K,
                                                      uint32_t* sink) {
  extern __shared__ uint4 xs[];
  const int CW = K / 32, G = K / 128;
  for (int i = threadIdx.x; i < K / 8; i += blockDim.x) {
    const int c = i >> 2, p = i & 3;
    xs[c * 4 + (p ^ ((c >> 1) & 3))] = x[i];
  }
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int row0 = (blockIdx.x * WARPS + warp) * R;
  if (row0 >= N) return;
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = 0.f;
  uint32_t mix = 0;
  for (int c0 = lane; c0 < CW; c0 += 32 * U) {
    uint4 wv[R][U];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int c = c0 + 32 * u, row = min(row0 + r, N - 1);
        wv[r][u] = c < CW ? ldg_stream(W + (size_t)row * CW + c) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = c0 + 32 * u;
      if (c >= CW) break;
      if constexpr (!MATH) {
#pragma unroll
        for (int r = 0; r < R; ++r) mix ^= wv[r][u].x ^ wv[r][u].y ^ wv[r][u].z ^ wv[r][u].w;
      } else {
      const int sw = (c >> 1) & 3;
      uint4 xp[4];
#pragma unroll
      for (int s = 0; s < 4; ++s) xp[s] = xs[c * 4 + (s ^ sw)];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const float sc = __half2float(S[(size_t)min(row0 + r, N - 1) * G + (c >> 2)]);
        const uint32_t ws[4] = {wv[r][u].x, wv[r][u].y, wv[r][u].z, wv[r][u].w};
        float sum = 0.f;
        if constexpr (P == 32) {
          __half2 a = __float2half2_rn(0.f);
#pragma unroll
          for (int s = 0; s < 4; ++s) a = dot8(ws[s], xp[s], a);
          const float2 f = __half22float2(a);
          sum = f.x + f.y;
        } else {
#pragma unroll
          for (int s = 0; s < 4; ++s) {
            const float2 f = __half22float2(dot8(ws[s], xp[s], __float2half2_rn(0.f)));
            sum += f.x + f.y;
          }
        }
        acc[r] = fmaf(sum, sc, acc[r]);
      }
      }
    }
  }
  if constexpr (!MATH) {
    if (mix == 0x12345678u) sink[0] = mix;
  } else {
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) acc[r] += __shfl_xor_sync(0xFFFFFFFFu, acc[r], o);
      if (lane == 0 && row0 + r < N) y[row0 + r] = __float2half_rn(acc[r]);
    }
  }
}

// fp32 reference on the same layout: one thread a row.
__global__ void ref_gemv(const uint8_t* W, const __half* S, const __half* x, float* y, int N, int K) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= N) return;
  float acc = 0.f;
  for (int c = 0; c < K / 32; ++c)
    for (int s = 0; s < 4; ++s) {
      const uint32_t w = *reinterpret_cast<const uint32_t*>(W + (size_t)n * K / 2 + c * 16 + s * 4);
      const int k0 = 32 * c + 8 * s;
      float part = 0.f;
      for (int j = 0; j < 8; ++j) {
        const int q = (w >> (4 * j)) & 15, k = j < 4 ? k0 + 2 * (j & 3) : k0 + 2 * (j & 3) + 1;
        // nibble j (j < 4) sits in bits 4j..4j+3 -> low half of pair j; nibble j+4 in bits 16+4j -> high half
        part += (q - 8) * __half2float(x[k]);
      }
      acc += part * __half2float(S[(size_t)n * (K / 128) + c / 4]);
    }
  y[n] = acc;
}

struct Bufs { std::vector<uint8_t*> p; size_t bytes; };

template <typename Launch>
static float time_arm(const Bufs& b, Launch launch) {
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  const int REPS = std::max(60, (int)b.p.size() * 4);
  for (int i = 0; i < 3; ++i) launch(b.p[i % b.p.size()], st);
  CK(cudaStreamSynchronize(st));
  CK(cudaGetLastError());
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < REPS; ++i) launch(b.p[i % b.p.size()], st);
  CK(cudaStreamEndCapture(st, &g));
  CK(cudaGraphInstantiate(&ge, g, 0));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  CK(cudaGraphLaunch(ge, st));
  std::vector<float> ts;
  for (int r = 0; r < 7; ++r) {
    CK(cudaEventRecord(e0, st));
    CK(cudaGraphLaunch(ge, st));
    CK(cudaEventRecord(e1, st));
    CK(cudaEventSynchronize(e1));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    ts.push_back(ms * 1000.f / REPS);
  }
  std::sort(ts.begin(), ts.end());
  CK(cudaGraphExecDestroy(ge));
  CK(cudaGraphDestroy(g));
  CK(cudaStreamDestroy(st));
  return ts[3];
}

struct Ctx {
  const char* shape;
  int N, K;
  Bufs w;            // weight copies (int4 bytes; the scales of copy 0 serve every copy: 1/64 of the bytes)
  __half *S, *x, *y;
  float* yref;
  uint32_t* sink;
};

template <int WARPS, int R, int U, int P, bool MATH>
static void arm(Ctx& c) {
  auto k = cc_gemv<WARPS, R, U, P, MATH>;
  const size_t smem = (size_t)c.K * 2;
  CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  const int grid = (c.N + WARPS * R - 1) / (WARPS * R);
  int per_sm = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, WARPS * 32, smem));
  cudaFuncAttributes fa;
  CK(cudaFuncGetAttributes(&fa, k));
  auto launch = [&](uint8_t* p, cudaStream_t st) {
    k<<<grid, WARPS * 32, smem, st>>>(reinterpret_cast<const uint4*>(p), c.S, reinterpret_cast<const uint4*>(c.x), c.y,
                                       c.N, c.K, c.sink);
  };
  float err = -1.f;
  if (MATH) {  // check on copy 0 against the fp32 reference
    launch(c.w.p[0], 0);
    CK(cudaDeviceSynchronize());
    std::vector<__half> yh(c.N);
    std::vector<float> yr(c.N);
    CK(cudaMemcpy(yh.data(), c.y, c.N * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(yr.data(), c.yref, c.N * 4, cudaMemcpyDeviceToHost));
    float md = 0.f, my = 0.f;
    for (int i = 0; i < c.N; ++i) {
      md = std::max(md, fabsf(__half2float(yh[i]) - yr[i]));
      my = std::max(my, fabsf(yr[i]));
    }
    err = md / my;
  }
  const float us = time_arm(c.w, launch);
  char name[128];
  snprintf(name, sizeof name, "cc w%d r%d u%d p%d%s grid%d occ%d r%d", WARPS, R, U, P, MATH ? "" : " nomath", grid,
           per_sm, fa.numRegs);
  printf("%-12s %-44s %8.2f us %7.0f GB/s  err %.2e\n", c.shape, name, us, c.w.bytes / (us * 1e3), err);
  fflush(stdout);
}

__global__ void fill_half(__half* p, size_t n, uint32_t seed, float scale) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    uint32_t h = (uint32_t)i * 2654435761u ^ seed;
    h ^= h >> 15; h *= 2246822519u; h ^= h >> 13;
    p[i] = __float2half_rn(((h & 0xFFFF) / 65535.f - 0.5f) * scale);
  }
}
__global__ void fill_bytes(uint8_t* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    uint32_t h = (uint32_t)i * 2654435761u ^ seed;
    h ^= h >> 16; h *= 2246822519u; h ^= h >> 13;
    p[i] = (uint8_t)h;
  }
}

int main(int argc, char** argv) {
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  struct Shape { const char* name; int N, K; };
  const Shape shapes[] = {{"8B gu", 14336, 4096}, {"8B qo", 4096, 4096}, {"8B down", 4096, 14336},
                          {"70B gu", 28672, 8192}, {"70B qo", 8192, 8192}, {"70B down", 8192, 28672}};
  const int only = argc > 1 ? atoi(argv[1]) : -1;
  if (only < 0) printf("device %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
  for (int si = 0; si < 6; ++si) {
    if (only >= 0 && si != only) continue;
    const Shape& s = shapes[si];
    Ctx c{s.name, s.N, s.K};
    c.w.bytes = (size_t)s.N * s.K / 2;
    const size_t need = std::max((size_t)3 * prop.l2CacheSize, (size_t)4 * c.w.bytes);
    const int nb = (int)((need + c.w.bytes - 1) / c.w.bytes);
    for (int i = 0; i < nb; ++i) {
      uint8_t* p;
      CK(cudaMalloc(&p, c.w.bytes));
      fill_bytes<<<1024, 256>>>(p, c.w.bytes, 17u + i);
      c.w.p.push_back(p);
    }
    CK(cudaMalloc(&c.S, (size_t)s.N * (s.K / 128) * 2));
    CK(cudaMalloc(&c.x, (size_t)s.K * 2));
    CK(cudaMalloc(&c.y, (size_t)s.N * 2));
    CK(cudaMalloc(&c.yref, (size_t)s.N * 4));
    CK(cudaMalloc(&c.sink, 4));
    fill_half<<<256, 256>>>(c.S, (size_t)s.N * (s.K / 128), 5u, 0.02f);
    fill_half<<<64, 256>>>(c.x, s.K, 9u, 2.f);
    ref_gemv<<<(s.N + 127) / 128, 128>>>(c.w.p[0], c.S, c.x, c.yref, s.N, s.K);
    CK(cudaDeviceSynchronize());
    std::vector<std::function<void()>> arms = {
        [&] { arm<8, 2, 4, 32, false>(c); },
        [&] { arm<4, 1, 4, 32, true>(c); },  [&] { arm<4, 2, 2, 32, true>(c); },  [&] { arm<4, 2, 4, 32, true>(c); },
        [&] { arm<8, 1, 4, 32, true>(c); },  [&] { arm<8, 2, 2, 32, true>(c); },  [&] { arm<8, 2, 4, 32, true>(c); },
        [&] { arm<8, 4, 2, 32, true>(c); },  [&] { arm<8, 4, 4, 32, true>(c); },  [&] { arm<16, 2, 4, 32, true>(c); },
        [&] { arm<8, 2, 4, 8, true>(c); },   [&] { arm<8, 4, 2, 8, true>(c); },   [&] { arm<4, 1, 8, 32, true>(c); },
        [&] { arm<8, 1, 8, 32, true>(c); },  [&] { arm<8, 2, 8, 32, true>(c); },
    };
    const int a = argc > 2 ? atoi(argv[2]) : -1;
    if (a == -2) { printf("%zu arms\n", arms.size()); return 0; }
    for (int i = 0; i < (int)arms.size(); ++i)
      if (a < 0 || a == i) arms[i]();
    for (auto p : c.w.p) CK(cudaFree(p));
    CK(cudaFree(c.S)); CK(cudaFree(c.x)); CK(cudaFree(c.y)); CK(cudaFree(c.yref)); CK(cudaFree(c.sink));
  }
  return 0;
}
