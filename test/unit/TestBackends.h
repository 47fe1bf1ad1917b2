//===- TestBackends.h - the backends the kernel suites run against -*- C++
//-*-===//
//
// Every backend-agnostic suite is instantiated with these: "cpu" always,
// "cuda" wherever the CUDA backend is compiled. On a machine without a GPU
// every cuda case skips, saying why (no driver, no device); with a GPU, a
// failure to set the backend up fails every cuda case with the CUDA error.
//
// The suites compare each backend with f64 references (KernelReference.h)
// or hand-computed values, not with each other; the CUDA backend is held to
// the same tolerances as the CPU backend (docs/runtime-cuda.md lists them
// per op).
//
//===----------------------------------------------------------------------===//

#ifndef MD_TEST_UNIT_TESTBACKENDS_H
#define MD_TEST_UNIT_TESTBACKENDS_H

#include <vector>

#include "runtime/cpu/CpuBackend.h"
#include "test/unit/BackendTestUtil.h"
#ifdef MD_ENABLE_CUDA
#include "runtime/cuda/CudaBackend.h"
#include "runtime/cuda/Device.h"
#endif

namespace md::test {

inline std::vector<BackendFactory> testBackends() {
  // One BLAS thread: the tests share two cores with other test processes.
  std::vector<BackendFactory> backends;
  backends.push_back({"cpu", []() -> absl::StatusOr<std::unique_ptr<Backend>> {
                        return std::make_unique<cpu::CpuBackend>(1);
                      }});
#ifdef MD_ENABLE_CUDA
  backends.push_back({"cuda",
                      []() -> absl::StatusOr<std::unique_ptr<Backend>> {
                        absl::StatusOr<std::unique_ptr<cuda::CudaBackend>> b =
                            cuda::CudaBackend::create(0);
                        if (!b.ok())
                          return b.status();
                        return std::unique_ptr<Backend>(std::move(*b));
                      },
                      cuda::noDeviceReason});
#endif
  return backends;
}

} // namespace md::test

#endif // MD_TEST_UNIT_TESTBACKENDS_H
