//===- Device.h - CUDA device discovery and errors as absl::Status -*- C++
//-*-===//
//
// The first thing mdrun asks of a machine: which GPUs can this process use,
// and can they run the code md was compiled for? Every CUDA error becomes an
// absl::Status whose message carries the CUDA error name (cudaErrorNoDevice,
// cudaErrorInsufficientDriver, ...) and what md was doing, so the fallback
// warning and the test skips say exactly why a GPU is not usable.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_CUDA_DEVICE_H
#define MD_RUNTIME_CUDA_DEVICE_H

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace md::cuda {

/// What md needs to know about one device.
struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int computeMajor = 0;
  int computeMinor = 0;
  int64_t totalMemoryBytes = 0;
  int multiprocessors = 0;
  std::string pciBusId;
};

/// Turns a CUDA runtime error code into a Status: OK for cudaSuccess,
/// otherwise "<what>: <cudaErrorName>: <description>". The code is an int so
/// callers need not include cuda_runtime.h.
absl::Status cudaStatus(int cudaError, const char *what);

/// Versions of the installed driver and of the runtime md was built with, as
/// CUDA encodes them (1000 * major + 10 * minor).
struct CudaVersions {
  int driver = 0;
  int runtime = 0;
};
absl::StatusOr<CudaVersions> queryVersions();

/// The devices this process can use. An error (not an empty list) when none
/// is usable, naming the CUDA error: no driver, driver too old, no device.
absl::StatusOr<std::vector<DeviceInfo>> queryDevices();

/// Why this machine has no CUDA device, or nullopt when it has one, whether
/// or not md can use it. No device means no driver installed (the runtime
/// reports driver version 0; cudaGetDeviceCount would say
/// cudaErrorInsufficientDriver, as for a driver that is merely too old) or
/// a driver that sees none (cudaErrorNoDevice, or a count of 0). Tests skip
/// only then: with a device present, failing to use it is a failure.
std::optional<std::string> noDeviceReason();

/// Launches a small kernel on `ordinal` and checks its result, proving the
/// binary holds code for that device's architecture (the error otherwise is
/// cudaErrorNoKernelImageForDevice, which names the device's compute
/// capability and the architectures md was compiled for).
absl::Status selfTest(int ordinal);

/// Free and total memory of a device, as cudaMemGetInfo reports them.
struct DeviceMemory {
  int64_t freeBytes = 0;
  int64_t totalBytes = 0;
};
/// cudaMemGetInfo on `ordinal`. For a launcher, before its ranks start: the
/// context the query needs is destroyed again (cudaDeviceReset), so that
/// its memory is the ranks' (the free bytes are read while it exists, so
/// they err on the safe side by its size).
absl::StatusOr<DeviceMemory> queryMemoryAndRelease(int ordinal);

/// The CUDA architectures this binary was compiled for, e.g.
/// "80,86,89,90,100,120".
const char *compiledArchitectures();

} // namespace md::cuda

#endif // MD_RUNTIME_CUDA_DEVICE_H
