//===- SelfTest.cu - prove the binary can run kernels on a device ---------===//

#include "runtime/cuda/Device.h"

#include <cuda_runtime.h>

#include "absl/strings/str_format.h"

#ifndef MD_CUDA_ARCHITECTURES
#define MD_CUDA_ARCHITECTURES "unknown"
#endif

namespace md::cuda {
namespace {
// out[i] = i * i + 1 for i < n: cheap, and wrong if the kernel never ran.
__global__ void selfTestKernel(int *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    out[i] = i * i + 1;
}
} // namespace

const char *compiledArchitectures() { return MD_CUDA_ARCHITECTURES; }

absl::Status selfTest(int ordinal) {
  if (absl::Status s = cudaStatus(cudaSetDevice(ordinal), "cudaSetDevice");
      !s.ok())
    return s;
  constexpr int n = 1000;
  int *device = nullptr;
  if (absl::Status s = cudaStatus(cudaMalloc(&device, n * sizeof(int)),
                                  "cudaMalloc");
      !s.ok())
    return s;
  selfTestKernel<<<(n + 255) / 256, 256>>>(device, n);
  absl::Status launched = cudaStatus(cudaGetLastError(), "self-test launch");
  int host[n] = {0};
  absl::Status copied =
      launched.ok() ? cudaStatus(cudaMemcpy(host, device, sizeof(host),
                                            cudaMemcpyDeviceToHost),
                                 "cudaMemcpy")
                    : launched;
  cudaFree(device);
  if (!copied.ok()) {
    int major = 0, minor = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, ordinal);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, ordinal);
    return absl::Status(
        copied.code(),
        absl::StrFormat("%s (device %d has compute capability %d.%d; md was "
                        "compiled for CUDA architectures %s)",
                        copied.message(), ordinal, major, minor,
                        MD_CUDA_ARCHITECTURES));
  }
  for (int i = 0; i < n; ++i)
    if (host[i] != i * i + 1)
      return absl::InternalError(absl::StrFormat(
          "self-test kernel on device %d wrote %d at %d, expected %d",
          ordinal, host[i], i, i * i + 1));
  return absl::OkStatus();
}

} // namespace md::cuda
