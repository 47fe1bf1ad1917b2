//===- KernelUtil.cuh - how the kernels launch, on a GPU -----------------===//
//
// The launches and the dynamic shared memory of the kernels; the loads,
// stores and block reductions they share are KernelCommon.cuh's. Every
// kernel of runtime/cuda launches through launch() or launchShared(), so a
// host test can run the .cu files with its own KernelUtil.cuh
// (test/unit/emulated/runtime/cuda/).
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_CUDA_KERNELUTIL_CUH
#define MD_RUNTIME_CUDA_KERNELUTIL_CUH

#include <utility>

#include "runtime/cuda/KernelCommon.cuh"

namespace md::cuda::kernels {

/// Runs `kernel` on `grid` blocks of kThreads threads on `stream` and
/// returns the launch's error. With no work (`work` == 0, e.g. an empty
/// tensor) it launches nothing and succeeds.
template <typename... Params, typename... Args>
cudaError_t launch(void (*kernel)(Params...), int64_t work, unsigned grid,
                   cudaStream_t stream, Args &&...args) {
  if (work == 0)
    return cudaSuccess;
  kernel<<<grid, kThreads, 0, stream>>>(std::forward<Args>(args)...);
  return cudaGetLastError();
}

/// The block's dynamic shared memory, as floats (the size is the launch's).
__device__ inline float *sharedFloats() {
  extern __shared__ float dynamicShared[];
  return dynamicShared;
}

/// Runs `kernel` on `grid` blocks of kThreads threads with `bytes` of
/// dynamic shared memory on `stream`, opting in first when that exceeds
/// the 48 KiB a block gets by default, and returns the first error.
template <typename... Params, typename... Args>
cudaError_t launchShared(void (*kernel)(Params...), unsigned grid,
                         size_t bytes, cudaStream_t stream, Args... args) {
  if (bytes > 48 * 1024) {
    cudaError_t e = cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
    if (e != cudaSuccess)
      return e;
  }
  kernel<<<grid, kThreads, bytes, stream>>>(args...);
  return cudaGetLastError();
}

} // namespace md::cuda::kernels

#endif // MD_RUNTIME_CUDA_KERNELUTIL_CUH
