// Host side, shared by the CUDA C++ kernels that launch one argument struct (i8_gemv.cu, sp24_w16_gemv.cu,
// w4a16_gemv.cu and, through w4a16_cc_common.cuh, the one-token W4A16 GEMVs and the warp-specialized GEMM): one
// cudaLaunchKernelEx with programmatic dependent launch and a thread-block cluster when asked.
#pragma once
#include <cuda_runtime.h>

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
