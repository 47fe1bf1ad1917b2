//===- KernelUtil.cuh - host stand-in for the CUDA kernels' built-ins -----===//
//
// Lets a host test compile a .cu file of runtime/cuda as C++ and run its
// kernels without a GPU: this directory comes before the source tree on
// the test's include path, so the kernel file's
// #include "runtime/cuda/KernelUtil.cuh" finds this file. A launch runs
// the blocks one after another, each as kThreads fibers (ucontext) on the
// calling thread sharing one shared-memory buffer (filled with NaNs, so a
// read before a write shows). __syncthreads switches to the next fiber:
// the launch resumes fiber 0, 1, ..., 255 in turn, each running to its next
// barrier, so none passes a barrier before all have reached it. A static
// __shared__ array is a function-local static (one block runs at a time),
// and atomics are plain updates (one fiber runs at a time). A warp
// shuffle is a block-wide exchange through two alternating buffers and one
// barrier, which is the same thing for a kernel whose threads all shuffle
// together (as those of Attention.cu do). Everything else the kernels use,
// loads, stores and block reductions, is the real
// runtime/cuda/KernelCommon.cuh, included below.
//
// It checks indexing, masking, tile bounds and barrier placement; not
// speed, not the device's exp (glibc's is used), not memory ordering
// beyond the barriers.
//
//===----------------------------------------------------------------------===//

#ifndef MD_TEST_UNIT_EMULATED_KERNELUTIL_CUH
#define MD_TEST_UNIT_EMULATED_KERNELUTIL_CUH

#include <ucontext.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#define MD_CUDA_EMULATED 1
#define __global__
#define __device__
#define __launch_bounds__(n)
#define __shared__ static

using cudaError_t = int;
using cudaStream_t = void *;
inline constexpr cudaError_t cudaSuccess = 0, cudaErrorInvalidValue = 1,
                             cudaErrorInvalidConfiguration = 9;

// One fiber runs at a time: an atomic is a plain update.
inline float atomicAdd(float *address, float v) {
  float old = *address;
  *address = old + v;
  return old;
}
inline unsigned long long atomicAdd(unsigned long long *address,
                                    unsigned long long v) {
  unsigned long long old = *address;
  *address = old + v;
  return old;
}
inline long long atomicMin(long long *address, long long v) {
  long long old = *address;
  *address = v < old ? v : old;
  return old;
}

namespace md::cuda::kernels {
namespace emulated {

struct Index {
  unsigned x = 0;
};

/// The fibers of the running block and the scheduler's context.
struct Fiber {
  ucontext_t context;
  std::unique_ptr<char[]> stack;
  bool done = false;
};
inline std::vector<Fiber> fibers;
inline ucontext_t scheduler;

inline Index threadIdx;
inline Index blockIdx, gridDim, blockDim{256};

} // namespace emulated

using emulated::blockDim;
using emulated::blockIdx;
using emulated::gridDim;
using emulated::threadIdx;

/// Back to the scheduler, which resumes this fiber once every other one
/// has reached its barrier too.
inline void __syncthreads() {
  swapcontext(&emulated::fibers[threadIdx.x].context, &emulated::scheduler);
}

} // namespace md::cuda::kernels

#include "runtime/cuda/KernelCommon.cuh"

namespace md::cuda::kernels {

static_assert(kThreads == 256, "blockDim above starts at kThreads");

/// The most dynamic shared memory a launch may ask for: the 99 KiB opt-in
/// limit of sm_86/89/120, the smallest of the architectures md builds for.
inline constexpr size_t kMaxSharedBytes = 99 * 1024;

namespace emulated {
inline std::vector<float> shared;
inline float exchange[2][kThreads];
inline int exchangeTurn = 0;
/// Set when a launch asked for more shared memory than allowed.
inline bool sharedOverflow = false;
} // namespace emulated

/// A thread reads buffer k after barrier k and writes the other one next;
/// it can write buffer k again only after barrier k + 1, which waits for
/// every reader of buffer k.
inline float __shfl_xor_sync(unsigned, float v, int laneMask) {
  float *buffer = emulated::exchange[emulated::exchangeTurn];
  buffer[threadIdx.x] = v;
  __syncthreads();
  if (threadIdx.x == 0)
    emulated::exchangeTurn ^= 1; // fiber 0 runs first after the barrier
  return buffer[threadIdx.x ^ unsigned(laneMask)];
}

inline float *sharedFloats() { return emulated::shared.data(); }

/// Runs the kernel's blocks in order, each as kThreads fibers.
template <typename... Params, typename... Args>
cudaError_t launchShared(void (*kernel)(Params...), unsigned grid, size_t bytes,
                         cudaStream_t, Args... args) {
  if (bytes > kMaxSharedBytes) {
    emulated::sharedOverflow = true;
    return cudaErrorInvalidValue;
  }
  emulated::gridDim.x = grid;
  constexpr size_t kStack = 64 * 1024;
  emulated::fibers.resize(kThreads);
  for (emulated::Fiber &f : emulated::fibers)
    if (!f.stack)
      f.stack.reset(new char[kStack]);
  // The fiber's entry: makecontext passes int arguments only, so the
  // kernel and its arguments are reached through this static.
  static std::function<void()> body;
  body = [&] { kernel(args...); };
  for (unsigned b = 0; b < grid; ++b) {
    emulated::blockIdx.x = b;
    emulated::shared.assign(bytes / sizeof(float), NAN);
    emulated::exchangeTurn = 0;
    for (unsigned t = 0; t < unsigned(kThreads); ++t) {
      emulated::Fiber &f = emulated::fibers[t];
      f.done = false;
      getcontext(&f.context);
      f.context.uc_stack.ss_sp = f.stack.get();
      f.context.uc_stack.ss_size = kStack;
      f.context.uc_link = &emulated::scheduler;
      makecontext(
          &f.context,
          +[] {
            body();
            emulated::fibers[threadIdx.x].done = true;
          },
          0);
    }
    // One round per barrier: every fiber runs to its next barrier (or to
    // its end) before the first one is resumed again.
    for (bool running = true; running;) {
      running = false;
      for (unsigned t = 0; t < unsigned(kThreads); ++t) {
        if (emulated::fibers[t].done)
          continue;
        threadIdx.x = t;
        swapcontext(&emulated::scheduler, &emulated::fibers[t].context);
        running |= !emulated::fibers[t].done;
      }
    }
  }
  return cudaSuccess;
}


/// KernelUtil.cuh's launch: no work launches nothing.
template <typename... Params, typename... Args>
cudaError_t launch(void (*kernel)(Params...), int64_t work, unsigned grid,
                   cudaStream_t stream, Args &&...args) {
  if (work == 0)
    return cudaSuccess;
  return launchShared(kernel, grid, 0, stream, Params(args)...);
}

} // namespace md::cuda::kernels

#endif // MD_TEST_UNIT_EMULATED_KERNELUTIL_CUH
