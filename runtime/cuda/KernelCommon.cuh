//===- KernelCommon.cuh - loads, stores and reductions of the kernels ----===//
//
// Element types are a runtime argument: ld() widens bf16/f16/f32 to f32 and
// st() rounds to nearest even with the very functions the CPU backend uses
// (runtime/core/NumberFormat.h), so the two backends store identical bits for
// the same f32 value. Block reductions sum in a fixed tree order, so results do
// not change from run to run.
//
// Everything here is written against CUDA's built-ins (threadIdx, blockDim,
// __syncthreads, ...) alone; how a kernel is launched and where its dynamic
// shared memory is lives in KernelUtil.cuh, which includes this file. A
// host test (test/unit/emulated/runtime/cuda/KernelUtil.cuh) provides the
// built-ins and the launches instead and includes this same file, so the
// kernels it runs on a CPU use these very helpers.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_CUDA_KERNELCOMMON_CUH
#define MD_RUNTIME_CUDA_KERNELCOMMON_CUH

#include <cmath>
#include <cstdint>

#include "runtime/core/NumberFormat.h"
#include "runtime/cuda/Kernels.h"

namespace md::cuda::kernels {

// runtime::DType's values.
inline constexpr int kF32 = 0, kBf16 = 1, kF16 = 2, kI32 = 3, kI64 = 4;

/// Threads per block of every kernel here.
inline constexpr int kThreads = 256;

__device__ inline float ld(const void *p, int t, int64_t i) {
  switch (t) {
  case kBf16:
    return md::runtime::bf16ToF32(static_cast<const uint16_t *>(p)[i]);
  case kF16:
    return md::runtime::f16ToF32(static_cast<const uint16_t *>(p)[i]);
  default:
    return static_cast<const float *>(p)[i];
  }
}

__device__ inline void st(void *p, int t, int64_t i, float v) {
  switch (t) {
  case kBf16:
    static_cast<uint16_t *>(p)[i] = md::runtime::f32ToBf16(v);
    break;
  case kF16:
    static_cast<uint16_t *>(p)[i] = md::runtime::f32ToF16(v);
    break;
  default:
    static_cast<float *>(p)[i] = v;
    break;
  }
}

__device__ inline int64_t ldIndex(const void *p, bool i32, int64_t i) {
  return i32 ? int64_t(static_cast<const int32_t *>(p)[i])
             : static_cast<const int64_t *>(p)[i];
}

/// Blocks for a grid-stride loop over n elements.
inline unsigned gridFor(int64_t n) {
  int64_t blocks = (n + kThreads - 1) / kThreads;
  if (blocks > 65535)
    blocks = 65535;
  return blocks < 1 ? 1u : unsigned(blocks);
}

#define MD_GRID_STRIDE(i, n)                                                   \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);    \
       i += int64_t(gridDim.x) * blockDim.x)

/// Offset of row-major element i of `space` in operand A (or B).
__device__ inline int64_t offsetA(const Strided &s, int64_t i) {
  int64_t off = 0;
  for (int d = s.rank - 1; d >= 0; --d) {
    int64_t idx = i % s.shape[d];
    i /= s.shape[d];
    off += idx * s.strideA[d];
  }
  return off;
}
__device__ inline void offsetsAB(const Strided &s, int64_t i, int64_t &a,
                                 int64_t &b) {
  a = 0;
  b = 0;
  for (int d = s.rank - 1; d >= 0; --d) {
    int64_t idx = i % s.shape[d];
    i /= s.shape[d];
    a += idx * s.strideA[d];
    b += idx * s.strideB[d];
  }
}

/// Sum of v over the block (blockDim.x == kThreads), the same value in every
/// thread. `shared` holds kThreads doubles. Fixed tree order.
__device__ inline double blockSum(double v, double *shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (int(threadIdx.x) < s)
      shared[threadIdx.x] += shared[threadIdx.x + s];
    __syncthreads();
  }
  double r = shared[0];
  __syncthreads();
  return r;
}

/// Maximum of v over the block (fmaxf: NaNs are dropped unless all are NaN,
/// as the CPU's std::fmax).
__device__ inline float blockMax(float v, float *shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (int(threadIdx.x) < s)
      shared[threadIdx.x] = fmaxf(shared[threadIdx.x], shared[threadIdx.x + s]);
    __syncthreads();
  }
  float r = shared[0];
  __syncthreads();
  return r;
}

/// The f64 sum of v[0..n) over the block: each thread adds every
/// blockDim.x-th value, then blockSum. The same value in every thread.
__device__ inline double blockSumOf(const double *v, int64_t n,
                                    double *shared) {
  double acc = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    acc += v[i];
  return blockSum(acc, shared);
}

/// The statistics of a softmax over one row: the maximum and the f64 sum of
/// exp(value - max), the values in f32 as the CPU's softmaxRow.
struct RowSoftmax {
  float max;
  double sum;
};

/// RowSoftmax of the n values load(0), ..., load(n - 1) over the block; the
/// same in every thread. `shared` and `sharedF` hold kThreads each.
template <typename Load>
__device__ inline RowSoftmax blockRowSoftmax(int64_t n, Load load,
                                             double *shared, float *sharedF) {
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
    mx = fmaxf(mx, load(j));
  const float m = blockMax(mx, sharedF);
  double sum = 0;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
    sum += expf(load(j) - m);
  return {m, blockSum(sum, shared)};
}

} // namespace md::cuda::kernels

#endif // MD_RUNTIME_CUDA_KERNELCOMMON_CUH
