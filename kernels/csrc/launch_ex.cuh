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

// The CUDA runtime keeps a kernel's attributes per device (each device's context loads the module for itself): setting
// one on the current device leaves the same kernel on another device as it was. Two helpers set them once per kernel,
// device and attribute and remember what they set. Session 40 found the launchers remembering it per kernel only: on a
// second GPU a kernel above 48 KB of dynamic shared memory then failed to launch (tests/test_second_gpu.py).

// cudaFuncSetAttribute(kernel, attr, value) on the current device unless a value at least as large was set there
// already (the callers only ever raise a limit or switch a permission on, so a remembered larger value stays valid).
// Returns 0 or a cudaError_t.
template <typename Kernel>
int set_attribute_once(Kernel kernel, cudaFuncAttribute attr, int value) {
  struct Set {
    const void* fn;
    int dev;
    cudaFuncAttribute attr;
    int value;
  };
  static std::mutex mu;
  static std::vector<Set> done;
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return (int)e;
  const void* fn = reinterpret_cast<const void*>(kernel);
  std::lock_guard<std::mutex> lock(mu);
  Set* s = nullptr;
  for (Set& x : done) s = (x.fn == fn && x.dev == dev && x.attr == attr) ? &x : s;
  if (s != nullptr && s->value >= value) return 0;
  e = cudaFuncSetAttribute(kernel, attr, value);
  if (e != cudaSuccess) return (int)e;
  if (s == nullptr) done.push_back({fn, dev, attr, value}); else s->value = value;
  return 0;
}

// Lets `kernel` use the current device's whole per-block shared memory (beyond 48 KB needs the opt-in; the opt-in limit
// counts the static shared memory too, so asking for all of it as dynamic is an invalid value) and returns that
// dynamic limit in `limit`: the ring launchers size their rings by it. Once per kernel and device. Returns 0 or a
// cudaError_t.
template <typename Kernel>
int optin_smem_limit(Kernel kernel, size_t* limit) {
  struct Known {
    const void* fn;
    int dev;
    size_t limit;
  };
  static std::mutex mu;
  static std::vector<Known> known;
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return (int)e;
  const void* fn = reinterpret_cast<const void*>(kernel);
  {
    std::lock_guard<std::mutex> lock(mu);
    for (const Known& k : known) {
      if (k.fn == fn && k.dev == dev) {
        *limit = k.limit;
        return 0;
      }
    }
  }
  int optin = 0;
  e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  if (e != cudaSuccess) return (int)e;
  cudaFuncAttributes fa;
  e = cudaFuncGetAttributes(&fa, kernel);
  if (e != cudaSuccess) return (int)e;
  const int dyn = optin - (int)fa.sharedSizeBytes;
  if (const int rc = set_attribute_once(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, dyn)) return rc;
  std::lock_guard<std::mutex> lock(mu);
  known.push_back({fn, dev, (size_t)dyn});
  *limit = (size_t)dyn;
  return 0;
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
  static std::mutex mu;
  static std::vector<Known> known;
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
    if (const int rc = set_attribute_once(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem)) return rc;
  }
  int sms = 0, per_sm = 0;
  e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem);
  if (e != cudaSuccess) return (int)e;
  known.push_back({fn, dev, threads, smem, sms * per_sm});
  *resident = sms * per_sm;
  return 0;
}
