//===- CudaRegistration.cpp - the CUDA backend in the runtime's registry --===//
//
// "cuda": the device backend (runtime/rank/Registry.h). Its probe counts
// this node's usable GPUs: a device must answer cudaGetDeviceCount and run
// a kernel compiled for its architecture, else the reason is the choice's
// fallback warning ("no CUDA driver installed", the CUDA error).
//
//===----------------------------------------------------------------------===//

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/core/Status.h"
#include "runtime/cuda/CudaBackend.h"
#include "runtime/cuda/Device.h"
#include "runtime/rank/Registry.h"

namespace md::rank {
namespace {

DeviceProbe probeCuda() {
  DeviceProbe probe;
  // No device at all, said as such ("no CUDA driver installed"), apart
  // from a device that is there but cannot be used (the CUDA error).
  if (std::optional<std::string> none = cuda::noDeviceReason()) {
    probe.unusableReason = *none;
    return probe;
  }
  absl::StatusOr<std::vector<cuda::DeviceInfo>> devices = cuda::queryDevices();
  if (!devices.ok()) {
    probe.unusableReason = std::string(devices.status().message());
    return probe;
  }
  if (devices->empty()) {
    probe.unusableReason = "no CUDA device found";
    return probe;
  }
  // A device md was not compiled for fails here, with the architectures.
  if (absl::Status s = cuda::selfTest(0); !s.ok()) {
    probe.unusableReason = std::string(s.message());
    return probe;
  }
  probe.count = static_cast<int>(devices->size());
  return probe;
}

absl::StatusOr<RankBackend> makeCuda(const RankSpec &spec) {
  RankBackend made;
  MD_ASSIGN_OR_RETURN(made.backend, cuda::CudaBackend::create(spec.device));
  made.where = absl::StrFormat("rank 0 on cuda:%d", spec.device);
  if (absl::StatusOr<std::vector<cuda::DeviceInfo>> devices =
          cuda::queryDevices();
      devices.ok() && spec.device < static_cast<int>(devices->size()))
    absl::StrAppend(&made.where, " (", (*devices)[spec.device].name, ")");
  return made;
}

} // namespace

absl::Status RegisterCudaBackend(Registry &registry) {
  BackendInfo info;
  info.name = "cuda";
  info.title = "CUDA";
  info.probe = probeCuda;
  info.make = makeCuda;
  return registry.addBackend(std::move(info));
}

} // namespace md::rank
