//===- Device.cpp - CUDA device discovery ---------------------------------===//

#include "runtime/cuda/Device.h"

#include <cuda_runtime.h>

#include "absl/strings/str_format.h"
#include "runtime/core/Status.h"

namespace md::cuda {

absl::Status cudaStatus(int code, const char *what) {
  auto err = static_cast<cudaError_t>(code);
  if (err == cudaSuccess)
    return absl::OkStatus();
  const char *name = cudaGetErrorName(err);
  const char *text = cudaGetErrorString(err);
  std::string message = absl::StrFormat(
      "%s: %s: %s", what, name ? name : "unknown CUDA error", text ? text : "");
  switch (err) {
  case cudaErrorNoDevice:
  case cudaErrorInsufficientDriver:
  case cudaErrorDevicesUnavailable:
  case cudaErrorNoKernelImageForDevice:
    return absl::UnavailableError(message);
  case cudaErrorMemoryAllocation:
    return absl::ResourceExhaustedError(message);
  case cudaErrorInvalidValue:
  case cudaErrorInvalidDevice:
    return absl::InvalidArgumentError(message);
  default:
    return absl::InternalError(message);
  }
}

absl::StatusOr<CudaVersions> queryVersions() {
  CudaVersions v;
  if (absl::Status s = cudaStatus(cudaRuntimeGetVersion(&v.runtime),
                                  "cudaRuntimeGetVersion");
      !s.ok())
    return s;
  if (absl::Status s =
          cudaStatus(cudaDriverGetVersion(&v.driver), "cudaDriverGetVersion");
      !s.ok())
    return s;
  return v;
}

std::optional<std::string> noDeviceReason() {
  int driver = 0;
  if (cudaDriverGetVersion(&driver) != cudaSuccess || driver == 0)
    return std::string("no CUDA driver installed");
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err == cudaErrorNoDevice || (err == cudaSuccess && count == 0))
    return absl::StrFormat("no CUDA device (driver %d.%d sees none)",
                           driver / 1000, driver % 1000 / 10);
  return std::nullopt;
}

absl::StatusOr<DeviceMemory> queryMemoryAndRelease(int ordinal) {
  MD_RETURN_IF_ERROR(cudaStatus(cudaSetDevice(ordinal), "cudaSetDevice"));
  size_t freeBytes = 0, totalBytes = 0;
  absl::Status s =
      cudaStatus(cudaMemGetInfo(&freeBytes, &totalBytes), "cudaMemGetInfo");
  // The primary context goes either way; a failed reset after a good
  // reading only costs the launcher's share, so the reading stands.
  (void)cudaDeviceReset();
  if (!s.ok())
    return s;
  return DeviceMemory{static_cast<int64_t>(freeBytes),
                      static_cast<int64_t>(totalBytes)};
}

absl::StatusOr<std::vector<DeviceInfo>> queryDevices() {
  int count = 0;
  if (absl::Status s =
          cudaStatus(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
      !s.ok())
    return s;
  if (count == 0)
    return cudaStatus(cudaErrorNoDevice, "cudaGetDeviceCount");
  std::vector<DeviceInfo> devices;
  devices.reserve(count);
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (absl::Status s = cudaStatus(cudaGetDeviceProperties(&prop, i),
                                    "cudaGetDeviceProperties");
        !s.ok())
      return s;
    DeviceInfo info;
    info.ordinal = i;
    info.name = prop.name;
    info.computeMajor = prop.major;
    info.computeMinor = prop.minor;
    info.totalMemoryBytes = static_cast<int64_t>(prop.totalGlobalMem);
    info.multiprocessors = prop.multiProcessorCount;
    char bus[32] = {0};
    if (cudaDeviceGetPCIBusId(bus, sizeof(bus), i) == cudaSuccess)
      info.pciBusId = bus;
    devices.push_back(std::move(info));
  }
  return devices;
}

} // namespace md::cuda
