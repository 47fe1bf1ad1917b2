//===- CudaBackend.h - the GPU backend: cuBLASLt GEMMs and own kernels -*- C++
//-*-===//
//
// Implements runtime::Backend on one CUDA device with the CPU backend's
// semantics (runtime/cpu is the reference; docs/runtime-cuda.md says how
// each kernel computes and how closely it agrees). Arguments are checked
// by the same OpChecks.h functions as the CPU backend's, so both accept and
// refuse exactly the same calls with the same messages.
//
// Memory is one cudaMalloc per allocate() (the executor asks for one block
// per arena), zeroed. Streams 0 (compute) and 1 (comm) are non-blocking
// CUDA streams; events are CUDA events, so waitEvent orders the streams on
// the device without the host waiting. Kernels only queue work, with one
// exception: ops that read through indices (embedding, embedding_grad,
// cross_entropy, cross_entropy_grad) check the indices on the device and
// wait for that check, because an out-of-range id must be an
// InvalidArgument from the call itself, as on the CPU backend.
//
// Temporary device memory (reduction partials, f32 accumulators) comes from
// CUDA's stream-ordered allocator (cudaMallocAsync), never from the host's
// point of view a synchronising cudaMalloc.
//
// A comm that runs collectives on the comm stream (runtime/nccl) reaches the
// CUDA stream through nativeStream() and installs a sync poll: every host
// wait of the backend then polls the stream and asks the comm between polls
// whether it has failed, so a collective that will never finish turns the
// wait into the comm's error instead of a hang.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_CUDA_CUDABACKEND_H
#define MD_RUNTIME_CUDA_CUDABACKEND_H

#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "runtime/core/Backend.h"

namespace md::runtime {
struct MatmulDims; // runtime/core/OpChecks.h
} // namespace md::runtime

namespace md::cuda {

class CudaBackend final : public runtime::Backend {
public:
  /// The backend on device `ordinal`: Unavailable (naming the CUDA error)
  /// when there is no usable device, so callers can fall back to the CPU.
  static absl::StatusOr<std::unique_ptr<CudaBackend>> create(int ordinal = 0);
  ~CudaBackend() override;

  const char *name() const override { return "cuda"; }
  int device() const { return device_; }

  absl::StatusOr<runtime::Buffer> allocate(int64_t bytes) override;

  int numStreams() const override { return 2; }
  bool concurrentStreams() const override { return true; }
  // copy, zero, createEvent, recordEvent, waitEvent, synchronize.
  MD_BACKEND_STREAM_OVERRIDES

  /// The cudaStream_t behind `stream`; null for a stream that does not
  /// exist.
  void *nativeStream(runtime::Stream stream) const;
  /// With a poll set, every host wait of the backend (synchronize, a copy
  /// touching host memory, the index checks, allocate's zeroing) polls
  /// cudaStreamQuery with a short sleep and calls `poll` between polls,
  /// returning its error as soon as it has one. An empty function restores
  /// cudaStreamSynchronize. Set and cleared by the thread that uses the
  /// backend; whoever sets it clears it before `poll` becomes invalid.
  void setSyncPoll(std::function<absl::Status()> poll);

  // The kernels, one override per row of BackendOps.def.
#define MD_BACKEND_OP(entry, Args)                                             \
  absl::Status entry(const runtime::Args &args) override;
#include "runtime/core/BackendOps.def"

  /// One GEMM, row-major: C = alpha op(A) op(B) + beta C (+ bias[n] per
  /// row when bias), `batch` times with the given element strides (a
  /// stride of 0 shares the operand). A and B have type `in`, C type `out`
  /// (runtime::DType values). Public for the backend's own files only.
  struct Gemm {
    bool transA = false, transB = false;
    int64_t m = 0, n = 0, k = 0;
    const void *a = nullptr, *b = nullptr;
    int64_t lda = 0, ldb = 0;
    void *c = nullptr;
    int64_t ldc = 0;
    float alpha = 1.0f, beta = 0.0f;
    const void *bias = nullptr;
    /// With geluAux: C = gelu_tanh(product + bias), and the product plus
    /// bias written to `aux` ([m, n], leading dim auxLd), cuBLASLt's
    /// GELU_AUX(_BIAS) epilogue; one GEMM only (batch 1).
    bool geluAux = false;
    void *aux = nullptr;
    int64_t auxLd = 0;
    int in = 0, out = 0;
    int64_t batch = 1, strideA = 0, strideB = 0, strideC = 0;
  };
  absl::Status gemm(const Gemm &g, runtime::Stream stream);
  /// md.matmul's product as a Gemm (CudaGemm.cpp).
  static Gemm productGemm(const runtime::TensorRef &a,
                          const runtime::TensorRef &b,
                          const runtime::TensorRef &c, bool transA, bool transB,
                          const runtime::MatmulDims &d);

private:
  struct Impl;
  explicit CudaBackend(std::unique_ptr<Impl> impl);
  absl::Status checkStream(runtime::Stream stream) const;
  /// Blocks until `stream` (a cudaStream_t) is idle, through the sync poll
  /// when one is set.
  absl::Status waitStream(void *stream, const char *what);
  /// The indices' check on the device, waited for: InvalidArgument naming
  /// the first bad position, else how many positions are not ignored.
  absl::StatusOr<int64_t> checkIndices(const char *op, const char *what,
                                       const runtime::TensorRef &ids,
                                       int64_t rows, bool hasIgnore,
                                       int64_t ignoreIndex,
                                       runtime::Stream stream);

  std::unique_ptr<Impl> impl_;
  int device_ = 0;
};

} // namespace md::cuda

#endif // MD_RUNTIME_CUDA_CUDABACKEND_H
