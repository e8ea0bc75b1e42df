// Session 28 probe: how fast can one kernel launch READ a weight-sized buffer on this GPU, by the way it reads?
// The W4A16 and int8 CUDA GEMVs stream through per-warp cp.async rings at 1 CTA per SM and reach 2.6-2.9 TB/s on the
// H200, where the Triton int8 GEMV (plain loads, many small CTAs) reaches ~4 TB/s (sessions 26-27). This times the
// reads alone, no math, so the memory pipeline of each design is measured by itself:
//   ldg   plain 16-byte ld.global.nc (L1 no-allocate), U loads in flight per thread, many CTAs
//   ring  the GEMVs' pattern: a CTA owns 16*WARPS/KS rows of an (N x R bytes) matrix; each warp fills STAGES ring
//         slots of 16 rows x SB x 64 bytes with 16-byte cp.async.cg (evict-first), reads a slot back from shared
//         memory, refills it
//   bulk  TMA 1-D bulk copies (cp.async.bulk + mbarrier) into a CTA ring of STAGES slots of SLOT bytes, the CTA
//         taking contiguous spans (a tiled weight order) -- one thread issues, every thread reads the slot
// Timing: one CUDA graph of REPS launches, each on its own copy of the buffer (copies >= 3x L2), replayed 7 times;
// median per launch. Prints one line per arm: name, bytes, us per launch, GB/s.
// Build: nvcc -O3 -std=c++17 -arch=sm_90a -o read_probe read_probe.cu
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
__device__ __forceinline__ uint32_t mix(uint4 v) { return v.x ^ v.y ^ v.z ^ v.w; }

template <int U>
__global__ void ldg_kernel(const uint4* __restrict__ src, size_t n16, uint32_t* out) {
  const size_t tid = blockIdx.x * (size_t)blockDim.x + threadIdx.x, nt = (size_t)gridDim.x * blockDim.x;
  uint32_t acc = 0;
  size_t i = tid;
  for (; i + (U - 1) * nt < n16; i += U * nt) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) v[u] = ldg_stream(src + i + u * nt);
#pragma unroll
    for (int u = 0; u < U; ++u) acc ^= mix(v[u]);
  }
  for (; i < n16; i += nt) acc ^= mix(ldg_stream(src + i));
  if (acc == 0x12345678u) out[0] = acc;
}

// The GEMV pattern with plain loads: CTA = ROWS consecutive rows; it walks the rows' bytes in column slabs of W
// bytes (all ROWS rows of a slab, then the next slab), U 16-byte loads in flight per thread.
template <int U>
__global__ void ldg_rows_kernel(const uint8_t* __restrict__ q, int N, int R, int rows, int W, uint32_t* out) {
  const int per_slab = rows * W / 16, pr = W / 16;
  uint32_t acc = 0;
  for (int x = 0; x < R; x += W) {
    for (int c0 = threadIdx.x; c0 < per_slab; c0 += U * blockDim.x) {
      uint4 v[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int c = c0 + u * blockDim.x;
        int row = blockIdx.x * rows + c / pr;
        if (row >= N || c >= per_slab) row = 0;
        v[u] = ldg_stream(reinterpret_cast<const uint4*>(q + (size_t)row * R + x + (c % pr) * 16));
      }
#pragma unroll
      for (int u = 0; u < U; ++u) acc ^= mix(v[u]);
    }
  }
  if (acc == 0x12345678u) out[0] = acc;
}

__device__ __forceinline__ uint32_t sa(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }

// GEMV-pattern ring. Matrix rows of R bytes; CTA = rows [blockIdx.x * ROWS, +ROWS), all R bytes.
template <int WARPS, int SB, int STAGES, int KS>
__global__ void __launch_bounds__(WARPS * 32) ring_kernel(const uint8_t* __restrict__ q, int N, int R, uint32_t* out) {
  constexpr int SLOT = 16 * SB * 64, CPL = 16 * SB * 4 / 32;
  extern __shared__ uint4 smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, wt = warp / KS, wk = warp % KS;
  const int rows = (WARPS / KS) * 16;
  uint8_t* ring = reinterpret_cast<uint8_t*>(smem) + warp * STAGES * SLOT;
  uint64_t pol;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
  const int nblk = R / 64, nslots = nblk / SB, nst = (nslots - wk + KS - 1) / KS;
  const uint8_t* srcs[CPL];
  uint32_t dst[CPL];
#pragma unroll
  for (int i = 0; i < CPL; ++i) {
    const int c = lane + 32 * i, r = c / (4 * SB), u = (c / 4) % SB, piece = c % 4;
    int row = blockIdx.x * rows + wt * 16 + r;
    if (row >= N) row = 0;
    srcs[i] = q + (size_t)row * R + u * 64 + piece * 16;
    dst[i] = sa(ring) + r * SB * 64 + u * 64 + piece * 16;
  }
  auto issue = [&](int st) {
    const int cst = st * KS + wk;
#pragma unroll
    for (int i = 0; i < CPL; ++i)
      asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;" ::"r"(dst[i] + (st % STAGES) * SLOT),
                   "l"(srcs[i] + (size_t)cst * SB * 64), "l"(pol) : "memory");
  };
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < nst) issue(s);
    asm volatile("cp.async.commit_group;" ::: "memory");
  }
  uint32_t acc = 0;
  for (int st = 0; st < nst; ++st) {
    asm volatile("cp.async.wait_group %0;" ::"n"(STAGES - 2) : "memory");
    __syncwarp();
    const uint4* slot = reinterpret_cast<const uint4*>(ring + (st % STAGES) * SLOT);
#pragma unroll
    for (int i = 0; i < CPL; ++i) acc ^= mix(slot[lane + 32 * i]);
    __syncwarp();
    if (st + STAGES - 1 < nst) issue(st + STAGES - 1);
    asm volatile("cp.async.commit_group;" ::: "memory");
  }
  if (acc == 0x12345678u) out[0] = acc;
}

// TMA 1-D bulk ring: CTA c takes contiguous spans c, c + grid, ... of SLOT bytes each.
template <int SLOT, int STAGES>
__global__ void bulk_kernel(const uint8_t* __restrict__ src, size_t bytes, uint32_t* out) {
  extern __shared__ __align__(128) uint8_t sm[];
  __shared__ __align__(8) uint64_t full[STAGES];
  const size_t nspan = bytes / SLOT;
  const int mine = (int)((nspan - blockIdx.x + gridDim.x - 1) / gridDim.x);
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) asm volatile("mbarrier.init.shared.b64 [%0], 1;" ::"r"(sa(&full[s])));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  uint64_t pol;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
  auto issue = [&](int it) {
    const int s = it % STAGES;
    const uint8_t* from = src + ((size_t)blockIdx.x + (size_t)it * gridDim.x) * SLOT;
    asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;" ::"r"(sa(&full[s])), "r"(SLOT) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;"
                 ::"r"(sa(sm + s * SLOT)), "l"(from), "r"(SLOT), "r"(sa(&full[s])), "l"(pol) : "memory");
  };
  if (threadIdx.x == 0)
    for (int it = 0; it < STAGES && it < mine; ++it) issue(it);
  uint32_t acc = 0;
  for (int it = 0; it < mine; ++it) {
    const int s = it % STAGES;
    const uint32_t phase = (it / STAGES) & 1;
    asm volatile("{\n.reg .pred p;\nW: mbarrier.try_wait.parity.shared.b64 p, [%0], %1;\n@!p bra W;\n}" ::"r"(sa(&full[s])), "r"(phase) : "memory");
    const uint4* slot = reinterpret_cast<const uint4*>(sm + s * SLOT);
    for (int i = threadIdx.x; i < SLOT / 16; i += blockDim.x) acc ^= mix(slot[i]);
    __syncthreads();
    if (threadIdx.x == 0 && it + STAGES < mine) issue(it + STAGES);
  }
  if (acc == 0x12345678u) out[0] = acc;
}

struct Bufs { std::vector<uint8_t*> p; size_t bytes; };

template <typename Launch>
static float time_arm(const Bufs& b, Launch launch) {
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  const int REPS = std::max(60, (int)b.p.size() * 4);
  for (int i = 0; i < 3; ++i) launch(b.p[i % b.p.size()], st);  // warm (and check the launch)
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

static void report(const char* shape, const std::string& arm, size_t bytes, float us) {
  printf("%-12s %-34s %10zu B %8.2f us %7.0f GB/s\n", shape, arm.c_str(), bytes, us, bytes / (us * 1e3));
  fflush(stdout);
}

template <int WARPS, int SB, int STAGES, int KS>
static void ring_arm(const char* shape, const Bufs& b, int N, int R, uint32_t* out) {
  constexpr int SLOT = 16 * SB * 64;
  const size_t smem = (size_t)WARPS * STAGES * SLOT;
  auto k = ring_kernel<WARPS, SB, STAGES, KS>;
  CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  const int rows = (WARPS / KS) * 16, grid = (N + rows - 1) / rows;
  float us = time_arm(b, [&](uint8_t* p, cudaStream_t st) { k<<<grid, WARPS * 32, smem, st>>>(p, N, R, out); });
  char name[96];
  cudaFuncAttributes fa;
  CK(cudaFuncGetAttributes(&fa, k));
  snprintf(name, sizeof name, "ring w%db%ds%dk%d grid%d r%d", WARPS, SB, STAGES, KS, grid, fa.numRegs);
  report(shape, name, b.bytes, us);
}

template <int U>
static void ldg_arm(const char* shape, const Bufs& b, int ctas, int threads, uint32_t* out) {
  float us = time_arm(b, [&](uint8_t* p, cudaStream_t st) {
    ldg_kernel<U><<<ctas, threads, 0, st>>>(reinterpret_cast<const uint4*>(p), b.bytes / 16, out); });
  char name[96];
  snprintf(name, sizeof name, "ldg u%d %dx%d", U, ctas, threads);
  report(shape, name, b.bytes, us);
}

template <int U>
static void ldg_rows_arm(const char* shape, const Bufs& b, int N, int R, int rows, int W, int threads, uint32_t* out) {
  const int grid = (N + rows - 1) / rows;
  float us = time_arm(b, [&](uint8_t* p, cudaStream_t st) { ldg_rows_kernel<U><<<grid, threads, 0, st>>>(p, N, R, rows, W, out); });
  char name[96];
  snprintf(name, sizeof name, "ldg-rows u%d r%d w%d t%d grid%d", U, rows, W, threads, grid);
  report(shape, name, b.bytes, us);
}

template <int SLOT, int STAGES>
static void bulk_arm(const char* shape, const Bufs& b, int ctas, int threads, uint32_t* out) {
  auto k = bulk_kernel<SLOT, STAGES>;
  const size_t smem = (size_t)SLOT * STAGES;
  CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  float us = time_arm(b, [&](uint8_t* p, cudaStream_t st) { k<<<ctas, threads, smem, st>>>(p, b.bytes, out); });
  char name[96];
  snprintf(name, sizeof name, "bulk %dKBx%d %dx%d", SLOT / 1024, STAGES, ctas, threads);
  report(shape, name, b.bytes, us);
}

int main(int argc, char** argv) {
  int dev = 0, sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, dev));
  if (argc <= 2 || atoi(argv[2]) == -3) printf("device %s, %d SMs, L2 %d MB\n", prop.name, sms, prop.l2CacheSize >> 20);
  uint32_t* out;
  CK(cudaMalloc(&out, 4));
  // (name, N rows, R bytes per row): int4 rows of K/2 bytes and int8 rows of K bytes
  struct Shape { const char* name; int N, R; };
  const Shape shapes[] = {{"w4 8B gu", 14336, 2048}, {"w4 8B qo", 4096, 2048}, {"w4 8B down", 4096, 7168},
                          {"w4 70B gu", 28672, 4096}, {"w8 8B gu", 14336, 4096}};
  const int only = argc > 1 ? atoi(argv[1]) : -1;
  for (int si = 0; si < 5; ++si) {
    if (only >= 0 && si != only) continue;
    const Shape& s = shapes[si];
    Bufs b;
    b.bytes = (size_t)s.N * s.R;
    const size_t need = std::max((size_t)3 * prop.l2CacheSize, (size_t)4 * b.bytes);
    const int nb = (int)((need + b.bytes - 1) / b.bytes);
    for (int i = 0; i < nb; ++i) {
      uint8_t* p;
      CK(cudaMalloc(&p, b.bytes));
      CK(cudaMemset(p, i + 1, b.bytes));
      b.p.push_back(p);
    }
    // Arms by index (argv[2]; -1 = all): run each in its own process so a failing arm cannot stop the others.
    std::vector<std::function<void()>> arms;
    arms.push_back([&] {  // memcpy reference (half the buffer to the other half: read + write)
      float us = time_arm(b, [&](uint8_t* p, cudaStream_t st) {
        cudaMemcpyAsync(p + b.bytes / 2, p, b.bytes / 2, cudaMemcpyDeviceToDevice, st); });
      report(s.name, "memcpy D2D (read+write)", b.bytes, us);
    });
    arms.push_back([&] { ring_arm<16, 2, 2, 2>(s.name, b, s.N, s.R, out); });
    arms.push_back([&] { ring_arm<16, 2, 3, 2>(s.name, b, s.N, s.R, out); });
    arms.push_back([&] { ring_arm<16, 2, 4, 1>(s.name, b, s.N, s.R, out); });
    arms.push_back([&] { ring_arm<8, 2, 4, 1>(s.name, b, s.N, s.R, out); });
    arms.push_back([&] { ring_arm<8, 2, 4, 2>(s.name, b, s.N, s.R, out); });
    arms.push_back([&] { ring_arm<4, 2, 4, 1>(s.name, b, s.N, s.R, out); });
    arms.push_back([&] { ring_arm<4, 4, 3, 1>(s.name, b, s.N, s.R, out); });
    arms.push_back([&] { ring_arm<8, 4, 4, 4>(s.name, b, s.N, s.R, out); });
    arms.push_back([&] { ring_arm<16, 2, 4, 2>(s.name, b, s.N, s.R, out); });
    arms.push_back([&] { ring_arm<16, 2, 6, 2>(s.name, b, s.N, s.R, out); });
    arms.push_back([&] { ring_arm<16, 4, 3, 2>(s.name, b, s.N, s.R, out); });
    // Session 28, call 7: the served GEMV's CTA shape (one warp a tile, 16 warps, 256 rows; 2-3 slots)
    arms.push_back([&] { ring_arm<16, 2, 2, 1>(s.name, b, s.N, s.R, out); });
    arms.push_back([&] { ring_arm<16, 2, 3, 1>(s.name, b, s.N, s.R, out); });
    arms.push_back([&] { ring_arm<8, 2, 3, 1>(s.name, b, s.N, s.R, out); });
    for (int per : {1, 2, 4, 8}) {
      arms.push_back([&, per] { ldg_arm<4>(s.name, b, sms * per, 256, out); });
      arms.push_back([&, per] { ldg_arm<8>(s.name, b, sms * per, 256, out); });
    }
    arms.push_back([&] { ldg_arm<4>(s.name, b, sms * 16, 128, out); });
    arms.push_back([&] { ldg_arm<2>(s.name, b, sms * 16, 128, out); });
    arms.push_back([&] { ldg_rows_arm<4>(s.name, b, s.N, s.R, 128, 256, 512, out); });
    arms.push_back([&] { ldg_rows_arm<8>(s.name, b, s.N, s.R, 128, 256, 512, out); });
    arms.push_back([&] { ldg_rows_arm<4>(s.name, b, s.N, s.R, 32, 256, 256, out); });
    arms.push_back([&] { ldg_rows_arm<4>(s.name, b, s.N, s.R, 16, 512, 256, out); });
    arms.push_back([&] { ldg_rows_arm<8>(s.name, b, s.N, s.R, 16, 256, 128, out); });
    arms.push_back([&] { ldg_rows_arm<4>(s.name, b, s.N, s.R, 8, 512, 128, out); });
    for (int per : {1, 2}) {
      arms.push_back([&, per] { bulk_arm<16384, 4>(s.name, b, sms * per, 128, out); });
      arms.push_back([&, per] { bulk_arm<8192, 4>(s.name, b, sms * per, 128, out); });
      arms.push_back([&, per] { bulk_arm<32768, 3>(s.name, b, sms * per, 128, out); });
      arms.push_back([&, per] { bulk_arm<4096, 8>(s.name, b, sms * per, 128, out); });
    }
    const int arm = argc > 2 ? atoi(argv[2]) : -1;
    if (arm == -2) printf("%zu arms\n", arms.size());
    for (int a = 0; a < (int)arms.size(); ++a)
      if (arm == -1 || arm == a) arms[a]();
    for (auto p : b.p) CK(cudaFree(p));
  }
  return 0;
}
