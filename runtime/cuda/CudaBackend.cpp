//===- CudaBackend.cpp - memory, streams, events and creation -------------===//
//
// CudaBackend's own state: creating it on a device (streams, the cuBLASLt
// handle and workspace), device memory, copies, events and stream waits.
// Every op follows one pattern: the shared check (OpChecks.h), then sizes
// for the launchers in Kernels.h, which only queue work on the op's stream;
// the ops are defined in CudaGemm.cpp (cuBLASLt) and CudaOps.cpp (md's own
// kernels), which share CudaBackendImpl.h. Every CUDA and cuBLASLt return code
// becomes an absl::Status naming the call.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaBackendImpl.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "runtime/core/BackendChecks.h"

namespace md::cuda {

CudaBackend::CudaBackend(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaBackend::~CudaBackend() = default;

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::create(int ordinal) {
  MD_ASSIGN_OR_RETURN(std::vector<DeviceInfo> devices, queryDevices());
  if (ordinal < 0 || ordinal >= int(devices.size()))
    return absl::InvalidArgumentError(
        absl::StrFormat("cuda backend: device %d does not exist (%d devices)",
                        ordinal, devices.size()));
  // A binary without code for this device fails here, not at the first op.
  MD_RETURN_IF_ERROR(selfTest(ordinal));
  MD_CUDA(cudaSetDevice(ordinal));
  auto impl = std::make_unique<Impl>();
  for (cudaStream_t &s : impl->streams)
    MD_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  MD_LT(cublasLtCreate(&impl->lt));
  MD_CUDA(cudaMalloc(&impl->workspace, kWorkspaceBytes));
  MD_CUDA(
      cudaMalloc(reinterpret_cast<void **>(&impl->check), 2 * sizeof(int64_t)));
  MD_CUDA(cudaMallocHost(reinterpret_cast<void **>(&impl->hostCheck),
                         4 * sizeof(int64_t)));
  impl->hostCheck[0] = INT64_MAX;
  impl->hostCheck[1] = 0;
  std::unique_ptr<CudaBackend> backend(new CudaBackend(std::move(impl)));
  backend->device_ = ordinal;
  return backend;
}

//===----------------------------------------------------------------------===//
// Memory, streams, events
//===----------------------------------------------------------------------===//

absl::Status CudaBackend::checkStream(Stream stream) const {
  return checkStreamId("cuda backend", stream, numStreams());
}

absl::StatusOr<Buffer> CudaBackend::allocate(int64_t bytes) {
  MD_ASSIGN_OR_RETURN(const int64_t rounded,
                      allocationBytes("cuda backend", bytes));
  void *p = nullptr;
  MD_RETURN_IF_ERROR(
      cudaStatus(cudaMalloc(&p, size_t(rounded)),
                 absl::StrFormat("cudaMalloc of %d bytes", rounded).c_str()));
  Buffer buffer(p, bytes, [](void *q) { (void)cudaFree(q); });
  // Zeroed before any stream can use it: allocation is set-up time, so the
  // host may wait here.
  cudaStream_t s = impl_->streams[0];
  MD_CUDA(cudaMemsetAsync(p, 0, size_t(rounded), s));
  MD_RETURN_IF_ERROR(waitStream(s, "allocate"));
  return buffer;
}

absl::Status CudaBackend::copy(void *dst, const void *src, int64_t bytes,
                               Stream stream) {
  MD_RETURN_IF_ERROR(checkStream(stream));
  MD_RETURN_IF_ERROR(checkCopy("cuda backend", dst, src, bytes));
  if (bytes == 0 || dst == src)
    return absl::OkStatus();
  cudaStream_t s = impl_->streams[stream.id];
  MD_CUDA(cudaMemcpyAsync(dst, src, size_t(bytes), cudaMemcpyDefault, s));
  // A copy touching host memory completes before returning, as on the CPU
  // backend: the caller may read or free the host side right away.
  cudaPointerAttributes da{}, sa{};
  MD_CUDA(cudaPointerGetAttributes(&da, dst));
  MD_CUDA(cudaPointerGetAttributes(&sa, src));
  if (da.type != cudaMemoryTypeDevice || sa.type != cudaMemoryTypeDevice)
    MD_RETURN_IF_ERROR(waitStream(s, "copy"));
  return absl::OkStatus();
}

absl::Status CudaBackend::zero(void *dst, int64_t bytes, Stream stream) {
  MD_RETURN_IF_ERROR(checkStream(stream));
  MD_RETURN_IF_ERROR(checkZero("cuda backend", dst, bytes));
  if (bytes > 0)
    MD_CUDA(cudaMemsetAsync(dst, 0, size_t(bytes), impl_->streams[stream.id]));
  return absl::OkStatus();
}

absl::StatusOr<Event> CudaBackend::createEvent() {
  cudaEvent_t e = nullptr;
  MD_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  impl_->events.push_back(e);
  return Event{int(impl_->events.size()) - 1};
}

absl::Status CudaBackend::recordEvent(Stream stream, Event event) {
  MD_RETURN_IF_ERROR(checkStream(stream));
  MD_RETURN_IF_ERROR(
      checkEventId("cuda backend", event, int64_t(impl_->events.size())));
  MD_CUDA(cudaEventRecord(impl_->events[event.id], impl_->streams[stream.id]));
  return absl::OkStatus();
}

absl::Status CudaBackend::waitEvent(Stream stream, Event event) {
  MD_RETURN_IF_ERROR(checkStream(stream));
  MD_RETURN_IF_ERROR(
      checkEventId("cuda backend", event, int64_t(impl_->events.size())));
  MD_CUDA(cudaStreamWaitEvent(impl_->streams[stream.id],
                              impl_->events[event.id], 0));
  return absl::OkStatus();
}

absl::Status CudaBackend::synchronize(Stream stream) {
  MD_RETURN_IF_ERROR(checkStream(stream));
  return waitStream(impl_->streams[stream.id], "synchronize");
}

void *CudaBackend::nativeStream(Stream stream) const {
  if (stream.id < 0 || stream.id >= numStreams())
    return nullptr;
  return impl_->streams[stream.id];
}

void CudaBackend::setSyncPoll(std::function<absl::Status()> poll) {
  impl_->syncPoll = std::move(poll);
}

// The poll is asked first, so a comm that has already failed fails the
// wait at once. Latency: a few yields, then sleeps growing to 200 us.
absl::Status CudaBackend::waitStream(void *streamV, const char *what) {
  auto s = static_cast<cudaStream_t>(streamV);
  if (!impl_->syncPoll)
    return cudaStatus(
        cudaStreamSynchronize(s),
        absl::StrFormat("%s: cudaStreamSynchronize", what).c_str());
  std::chrono::microseconds nap{10};
  for (int i = 0;; ++i) {
    MD_RETURN_IF_ERROR(impl_->syncPoll());
    cudaError_t q = cudaStreamQuery(s);
    if (q == cudaSuccess)
      return absl::OkStatus();
    if (q != cudaErrorNotReady)
      return cudaStatus(q,
                        absl::StrFormat("%s: cudaStreamQuery", what).c_str());
    if (i < 16) {
      sched_yield();
    } else {
      std::this_thread::sleep_for(nap);
      nap = std::min(nap * 2, std::chrono::microseconds(200));
    }
  }
}

} // namespace md::cuda
