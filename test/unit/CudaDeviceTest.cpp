//===- CudaDeviceTest.cpp - CUDA device layer -----------------------------===//
//
// Runs everywhere the CUDA backend is compiled. Tests that need a GPU skip
// only on a machine without one (no driver, no device), saying why; with a
// GPU present, a device that md cannot use fails them with the CUDA error.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/Device.h"

#include <memory>
#include <optional>
#include <string>

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "runtime/cpu/CpuBackend.h"
#include "test/unit/BackendTestUtil.h"

namespace {

TEST(CudaStatus, SuccessIsOk) {
  EXPECT_TRUE(md::cuda::cudaStatus(cudaSuccess, "x").ok());
}

TEST(CudaStatus, ErrorsCarryTheCudaErrorNameAndWhatFailed) {
  absl::Status s =
      md::cuda::cudaStatus(cudaErrorMemoryAllocation, "cudaMalloc");
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
  std::optional<std::string> none = md::cuda::noDeviceReason();
  if (!devices.ok()) {
    // No usable GPU must be an error naming a CUDA error, never an empty list.
    EXPECT_NE(devices.status().message().find("cudaError"), std::string::npos)
        << devices.status();
    ASSERT_TRUE(none.has_value())
        << "a GPU is present but cannot be queried: " << devices.status();
    GTEST_SKIP() << *none;
  }
  EXPECT_FALSE(none.has_value()) << *none;
  ASSERT_FALSE(devices->empty());
  for (const md::cuda::DeviceInfo &d : *devices) {
    EXPECT_FALSE(d.name.empty());
    EXPECT_GE(d.computeMajor, 5);
    EXPECT_GT(d.totalMemoryBytes, int64_t{1} << 30);
    EXPECT_GT(d.multiprocessors, 0);
  }
}

TEST(CudaDevice, SelfTestKernelRunsOnEveryDevice) {
  if (std::optional<std::string> none = md::cuda::noDeviceReason())
    GTEST_SKIP() << *none;
  absl::StatusOr<std::vector<md::cuda::DeviceInfo>> devices =
      md::cuda::queryDevices();
  ASSERT_TRUE(devices.ok()) << devices.status();
  for (const md::cuda::DeviceInfo &d : *devices)
    EXPECT_TRUE(md::cuda::selfTest(d.ordinal).ok())
        << md::cuda::selfTest(d.ordinal);
}

TEST(CudaDevice, VersionsAreReportedWhenADriverIsPresent) {
  absl::StatusOr<md::cuda::CudaVersions> v = md::cuda::queryVersions();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_GE(v->runtime, 12000) << "md is built against CUDA 12 or newer";
  if (v->driver == 0)
    GTEST_SKIP() << "no CUDA driver installed (runtime " << v->runtime << ")";
  EXPECT_GT(v->driver, 0);
}

// The kernel suites' verdict on a backend (BackendTestUtil.h), with set-up
// failures injected: a failure skips only where the machine has no device.
md::test::BackendFactory injected(absl::Status failure,
                                  std::optional<std::string> noDevice) {
  return {"cuda",
          [failure]() -> absl::StatusOr<std::unique_ptr<md::runtime::Backend>> {
            if (!failure.ok())
              return failure;
            return std::unique_ptr<md::runtime::Backend>(
                std::make_unique<md::cpu::CpuBackend>(1));
          },
          [noDevice] { return noDevice; }};
}

TEST(BackendSetUp, AFailureWithTheDevicePresentFailsNamingItsCause) {
  md::test::BackendSetUp s = md::test::setUpBackend(injected(
      absl::InternalError("cublasLtCreate: CUBLAS_STATUS_ALLOC_FAILED"),
      std::nullopt));
  EXPECT_EQ(s.verdict, md::test::BackendSetUp::Verdict::Fail);
  EXPECT_EQ(s.backend, nullptr);
  EXPECT_NE(s.why.find("failed to set up with its device present"),
            std::string::npos)
      << s.why;
  EXPECT_NE(s.why.find("cublasLtCreate: CUBLAS_STATUS_ALLOC_FAILED"),
            std::string::npos)
      << s.why;
}

TEST(BackendSetUp, AFailureWithoutADeviceSkipsSayingWhy) {
  md::test::BackendSetUp s = md::test::setUpBackend(injected(
      absl::UnavailableError("cudaGetDeviceCount: cudaErrorInsufficientDriver"),
      "no CUDA driver installed"));
  EXPECT_EQ(s.verdict, md::test::BackendSetUp::Verdict::Skip);
  EXPECT_EQ(s.why, "cuda backend: no CUDA driver installed");
}

TEST(BackendSetUp, ABackendThatSetsUpRunsWhateverTheProbeSays) {
  md::test::BackendSetUp s =
      md::test::setUpBackend(injected(absl::OkStatus(), "no CUDA device"));
  EXPECT_EQ(s.verdict, md::test::BackendSetUp::Verdict::Run);
  EXPECT_NE(s.backend, nullptr);
}

// A factory without a device probe (the CPU backend's) never skips.
TEST(BackendSetUp, WithoutAProbeEveryFailureIsAFailure) {
  md::test::BackendFactory f = injected(absl::InternalError("no arena"), {});
  f.absent = nullptr;
  EXPECT_EQ(md::test::setUpBackend(f).verdict,
            md::test::BackendSetUp::Verdict::Fail);
}

} // namespace
