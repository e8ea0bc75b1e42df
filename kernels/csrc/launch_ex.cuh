// Host side, shared by the CUDA C++ kernels that launch one argument struct (i8_gemv.cu, sp24_w16_gemv.cu and, through
// w4a16_cc_common.cuh, the one-token W4A16 GEMVs and the warp-specialized GEMM): one cudaLaunchKernelEx with
// programmatic dependent launch when asked.
#pragma once
#include <cuda_runtime.h>

// Launch `kernel(a)` on `grid` CTAs of `threads`, `smem` bytes of dynamic shared memory, on `stream`; with `pdl` the
// kernel may start while the one before it on the stream finishes (it calls griddepcontrol.wait before reading that
// kernel's outputs). Returns 0 or the cudaError_t of the launch.
template <typename Kernel, typename A>
inline int launch_ex(Kernel kernel, const A& a, dim3 grid, int threads, size_t smem, bool pdl, cudaStream_t stream) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(threads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, a);
  return e != cudaSuccess ? (int)e : (int)cudaGetLastError();
}
