//===- CudaBackendImpl.h - what CudaBackend's files share -------*- C++ -*-===//
//
// Private to runtime/cuda: the state behind CudaBackend (its streams,
// events, cuBLASLt handle and workspace, the index-check slots) and the
// helpers its op files share: CUDA and cuBLASLt return codes as Status,
// dtype codes for the launchers of Kernels.h, strided-shape packing and
// stream-ordered scratch memory. CudaBackend.cpp holds memory, streams and
// events; CudaGemm.cpp the cuBLASLt GEMMs; CudaOps.cpp every other op.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_CUDA_CUDABACKENDIMPL_H
#define MD_RUNTIME_CUDA_CUDABACKENDIMPL_H

#include "runtime/cuda/CudaBackend.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "runtime/core/Status.h"
#include "runtime/cuda/Device.h"
#include "runtime/cuda/Kernels.h"

namespace md::cuda {

using namespace md::runtime;
namespace k = md::cuda::kernels;

#define MD_CUDA(call) MD_RETURN_IF_ERROR(cudaStatus((call), #call))
#define MD_LAUNCH(call, what)                                                  \
  MD_RETURN_IF_ERROR(cudaStatus((call), what " kernel launch"))

/// cuBLASLt's return codes as Status, naming the call.
inline absl::Status ltStatus(cublasStatus_t s, const char *what) {
  if (s == CUBLAS_STATUS_SUCCESS)
    return absl::OkStatus();
  std::string msg = absl::StrFormat("%s: %s", what, cublasLtGetStatusString(s));
  switch (s) {
  case CUBLAS_STATUS_NOT_SUPPORTED:
    return absl::UnimplementedError(msg);
  case CUBLAS_STATUS_ALLOC_FAILED:
    return absl::ResourceExhaustedError(msg);
  case CUBLAS_STATUS_INVALID_VALUE:
    return absl::InvalidArgumentError(msg);
  default:
    return absl::InternalError(msg);
  }
}
#define MD_LT(call) MD_RETURN_IF_ERROR(ltStatus((call), #call))

inline int dt(DType t) { return static_cast<int>(t); }
inline int dt(const TensorRef &t) { return static_cast<int>(t.dtype); }

inline cudaDataType_t cudaType(int t) {
  switch (static_cast<DType>(t)) {
  case DType::bf16:
    return CUDA_R_16BF;
  case DType::f16:
    return CUDA_R_16F;
  default:
    return CUDA_R_32F;
  }
}

inline absl::Status rankLimit(const char *op, size_t rank) {
  if (rank > size_t(k::kMaxRank))
    return absl::UnimplementedError(absl::StrFormat(
        "%s: the CUDA kernels take tensors of rank <= %d, got rank %d", op,
        k::kMaxRank, rank));
  return absl::OkStatus();
}

inline absl::StatusOr<k::Strided> strided(const char *op,
                                          absl::Span<const int64_t> shape,
                                          const std::vector<int64_t> &a,
                                          const std::vector<int64_t> &b = {}) {
  MD_RETURN_IF_ERROR(rankLimit(op, shape.size()));
  k::Strided s;
  s.rank = int(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) {
    s.shape[i] = shape[i];
    s.strideA[i] = i < a.size() ? a[i] : 0;
    s.strideB[i] = i < b.size() ? b[i] : 0;
  }
  return s;
}

/// Device memory for one op's temporaries, allocated and freed in stream
/// order (cudaMallocAsync / cudaFreeAsync): the host never waits for it.
class Scratch {
public:
  explicit Scratch(cudaStream_t stream) : stream_(stream) {}
  ~Scratch() {
    if (ptr_)
      (void)cudaFreeAsync(ptr_, stream_);
  }
  Scratch(const Scratch &) = delete;
  Scratch &operator=(const Scratch &) = delete;
  absl::Status allocate(int64_t bytes, bool zeroed) {
    if (bytes < 8)
      bytes = 8;
    MD_RETURN_IF_ERROR(cudaStatus(
        cudaMallocAsync(&ptr_, size_t(bytes), stream_), "cudaMallocAsync"));
    if (zeroed)
      MD_RETURN_IF_ERROR(cudaStatus(
          cudaMemsetAsync(ptr_, 0, size_t(bytes), stream_), "cudaMemsetAsync"));
    return absl::OkStatus();
  }
  template <typename T> T *as() const { return static_cast<T *>(ptr_); }

private:
  cudaStream_t stream_;
  void *ptr_ = nullptr;
};

constexpr size_t kWorkspaceBytes = size_t(32) << 20;

/// The largest power of two (<= 256) dividing the address: what cuBLASLt's
/// heuristic may assume about a pointer.
inline int64_t alignmentOf(const void *p) {
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  int64_t al = 256;
  while (al > 1 && (a % uintptr_t(al)) != 0)
    al /= 2;
  return al;
}

struct CudaBackend::Impl {
  cudaStream_t streams[2] = {nullptr, nullptr};
  std::vector<cudaEvent_t> events;
  cublasLtHandle_t lt = nullptr;
  void *workspace = nullptr;
  int64_t *check = nullptr;     // device: {first bad position, count}
  int64_t *hostCheck = nullptr; // pinned: [0..1] initial values, [2..3] result
  std::map<std::vector<int64_t>, cublasLtMatmulAlgo_t> algos;
  std::function<absl::Status()> syncPoll;

  ~Impl() {
    for (cudaStream_t s : streams)
      if (s)
        (void)cudaStreamSynchronize(s);
    for (cudaEvent_t e : events)
      (void)cudaEventDestroy(e);
    if (lt)
      (void)cublasLtDestroy(lt);
    if (workspace)
      (void)cudaFree(workspace);
    if (check)
      (void)cudaFree(check);
    if (hostCheck)
      (void)cudaFreeHost(hostCheck);
    for (cudaStream_t s : streams)
      if (s)
        (void)cudaStreamDestroy(s);
  }
};

/// Checks an op's stream and names its CUDA stream `s`.
#define MD_STREAM(args)                                                        \
  MD_RETURN_IF_ERROR(checkStream((args).stream));                              \
  cudaStream_t s = impl_->streams[(args).stream.id]

} // namespace md::cuda

#endif // MD_RUNTIME_CUDA_CUDABACKENDIMPL_H
