// Host side, shared by the CUDA C++ kernels that launch one argument struct (i8_gemv.cu, sp24_w16_gemv.cu,
// w4a16_gemv.cu and, through w4a16_cc_common.cuh, the one-token W4A16 GEMVs and the warp-specialized GEMM): one
// cudaLaunchKernelEx with programmatic dependent launch and a thread-block cluster when asked, and the occupancy
// those launchers size their persistent grids by, asked once.
#pragma once
#include <cuda_runtime.h>

#include <mutex>
#include <vector>

// A launch's cudaLaunchConfig_t and the attributes it points to: `grid` CTAs of `threads`, `smem` bytes of dynamic
// shared memory, on `stream`; with `pdl` the kernel may start while the one before it on the stream finishes (it calls
// griddepcontrol.wait before reading that kernel's outputs); a `cluster` of more than one CTA groups the grid's CTAs
// into thread-block clusters of that shape (the grid a multiple of it). Also what cudaOccupancyMaxActiveClusters
// takes. Not copyable: cfg points into the object.
struct LaunchConfig {
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[2];
  LaunchConfig(dim3 grid, int threads, size_t smem, bool pdl, cudaStream_t stream, dim3 cluster = dim3(1, 1, 1)) {
    cfg.gridDim = grid;
    cfg.blockDim = dim3(threads);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    int na = 0;
    if (pdl) {
      attr[na].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      attr[na].val.programmaticStreamSerializationAllowed = 1;
      ++na;
    }
    if (cluster.x * cluster.y * cluster.z > 1) {
      attr[na].id = cudaLaunchAttributeClusterDimension;
      attr[na].val.clusterDim.x = cluster.x;
      attr[na].val.clusterDim.y = cluster.y;
      attr[na].val.clusterDim.z = cluster.z;
      ++na;
    }
    cfg.attrs = attr;
    cfg.numAttrs = na;
  }
  LaunchConfig(const LaunchConfig&) = delete;
  LaunchConfig& operator=(const LaunchConfig&) = delete;
};

// Launch `kernel(a)` as LaunchConfig describes. Returns 0 or the cudaError_t of the launch.
template <typename Kernel, typename A>
inline int launch_ex(Kernel kernel, const A& a, dim3 grid, int threads, size_t smem, bool pdl, cudaStream_t stream,
                     dim3 cluster = dim3(1, 1, 1)) {
  LaunchConfig lc(grid, threads, smem, pdl, stream, cluster);
  const cudaError_t e = cudaLaunchKernelEx(&lc.cfg, kernel, a);
  return e != cudaSuccess ? (int)e : (int)cudaGetLastError();
}

// The CTAs of `threads` threads and `smem` bytes of dynamic shared memory that fit on the current device at once (its
// SM count times cudaOccupancyMaxActiveBlocksPerMultiprocessor; 0 when none fits), with the kernel's dynamic
// shared-memory limit raised to `smem` first where it is above 48 KB. Asked of the runtime once per kernel, device,
// block size and shared-memory size, then remembered; the persistent launchers asked on every launch. Measured on an
// H200 (session 39, bench/results/h200/kernels_s39/launch_cost.py): the one-token W4A16 GEMV's ctypes call 5.71 ->
// 4.77 us of host time on 4096 x 4096, the same (8.96 us) on 28672 x 4096 and on layers of another K in turns. The
// limit only ever grows (a kernel keeps the largest one set), so a remembered answer stays valid. Returns 0 or a
// cudaError_t.
template <typename Kernel>
int resident_ctas(Kernel kernel, int threads, size_t smem, int* resident) {
  struct Known {
    const void* fn;
    int dev, threads;
    size_t smem;
    int resident;
  };
  struct Raised {
    const void* fn;
    int dev;
    size_t smem;
  };
  static std::mutex mu;
  static std::vector<Known> known;
  static std::vector<Raised> raised;
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return (int)e;
  const void* fn = reinterpret_cast<const void*>(kernel);
  std::lock_guard<std::mutex> lock(mu);
  for (const Known& k : known) {
    if (k.fn == fn && k.dev == dev && k.threads == threads && k.smem == smem) {
      *resident = k.resident;
      return 0;
    }
  }
  if (smem > 48 * 1024) {
    Raised* r = nullptr;
    for (Raised& x : raised) r = (x.fn == fn && x.dev == dev) ? &x : r;
    if (r == nullptr || r->smem < smem) {
      e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
      if (e != cudaSuccess) return (int)e;
      if (r == nullptr) raised.push_back({fn, dev, smem}); else r->smem = smem;
    }
  }
  int sms = 0, per_sm = 0;
  e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem);
  if (e != cudaSuccess) return (int)e;
  known.push_back({fn, dev, threads, smem, sms * per_sm});
  *resident = sms * per_sm;
  return 0;
}
