//===- CudaDeviceTest.cpp - CUDA device layer -----------------------------===//
//
// Runs everywhere the CUDA backend is compiled. Tests that need a GPU skip
// with the CUDA error that makes the device unusable.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/Device.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

namespace {

TEST(CudaStatus, SuccessIsOk) {
  EXPECT_TRUE(md::cuda::cudaStatus(cudaSuccess, "x").ok());
}

TEST(CudaStatus, ErrorsCarryTheCudaErrorNameAndWhatFailed) {
  absl::Status s = md::cuda::cudaStatus(cudaErrorMemoryAllocation, "cudaMalloc");
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("cudaMalloc"), std::string::npos) << s;
  EXPECT_NE(s.message().find("cudaErrorMemoryAllocation"), std::string::npos)
      << s;

  absl::Status none = md::cuda::cudaStatus(cudaErrorNoDevice, "probe");
  EXPECT_EQ(none.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(none.message().find("cudaErrorNoDevice"), std::string::npos);
}

TEST(CudaDevice, QueryReturnsDevicesOrTheReasonThereAreNone) {
  absl::StatusOr<std::vector<md::cuda::DeviceInfo>> devices =
      md::cuda::queryDevices();
  if (!devices.ok()) {
    // No usable GPU must be an error naming a CUDA error, never an empty list.
    EXPECT_NE(devices.status().message().find("cudaError"), std::string::npos)
        << devices.status();
    GTEST_SKIP() << "no usable CUDA device: " << devices.status();
  }
  ASSERT_FALSE(devices->empty());
  for (const md::cuda::DeviceInfo &d : *devices) {
    EXPECT_FALSE(d.name.empty());
    EXPECT_GE(d.computeMajor, 5);
    EXPECT_GT(d.totalMemoryBytes, int64_t{1} << 30);
    EXPECT_GT(d.multiprocessors, 0);
  }
}

TEST(CudaDevice, SelfTestKernelRunsOnEveryDevice) {
  absl::StatusOr<std::vector<md::cuda::DeviceInfo>> devices =
      md::cuda::queryDevices();
  if (!devices.ok())
    GTEST_SKIP() << "no usable CUDA device: " << devices.status();
  for (const md::cuda::DeviceInfo &d : *devices)
    EXPECT_TRUE(md::cuda::selfTest(d.ordinal).ok())
        << md::cuda::selfTest(d.ordinal);
}

TEST(CudaDevice, VersionsAreReportedWhenADriverIsPresent) {
  absl::StatusOr<md::cuda::CudaVersions> v = md::cuda::queryVersions();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_GE(v->runtime, 12000) << "md is built against CUDA 12 or newer";
  if (v->driver == 0)
    GTEST_SKIP() << "no CUDA driver installed (runtime "
                 << v->runtime << ")";
  EXPECT_GT(v->driver, 0);
}

} // namespace
