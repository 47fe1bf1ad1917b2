//===- StagedComm.h - device collectives through a host comm -*- C++ -*-===//
//
// For ranks that share one GPU: NCCL does not run a communicator with two
// ranks on the same device, so their collectives go through a host comm
// (ShmComm) instead. Each collective copies the device send buffer into
// pinned host staging memory on the backend's comm stream and waits for it
// (through backend.synchronize, so a sync poll applies), runs the host
// comm's collective on the staging buffers, and copies the result back on
// the comm stream. The call returns once that copy is enqueued, like a
// NCCL collective; the staging memory is reused only after the next
// collective has waited for the stream again.
//
// Results are the host comm's, bit for bit (ShmComm's are deterministic);
// its errors (a peer missing, a desync) come back unchanged.
//
// One thread uses it, as any Comm. The backend must outlive it.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_NCCL_STAGEDCOMM_H
#define MD_RUNTIME_NCCL_STAGEDCOMM_H

#include <cstdint>
#include <memory>

#include "runtime/core/CollectiveComm.h"
#include "runtime/cuda/CudaBackend.h"

namespace md::nccl {

class StagedComm final : public runtime::CollectiveComm {
public:
  StagedComm(std::unique_ptr<runtime::Comm> host, cuda::CudaBackend &backend);
  /// Waits for the comm stream, then frees the staging memory.
  ~StagedComm() override;

  const char *name() const override { return "shm-staged"; }
  /// Its staging copies run on the comm stream, after the plan's waits.
  bool streamOrdered() const override { return true; }
  int rank() const override { return host_->rank(); }
  int worldSize() const override { return host_->worldSize(); }
  absl::StatusOr<runtime::Group> group(runtime::GroupKind kind) const override {
    return host_->group(kind);
  }

  runtime::Comm &host() { return *host_; }

private:
  /// Stages send, runs the host comm's collective on the staging buffers,
  /// enqueues the copy of the result to recv. A barrier is the host comm's.
  absl::Status run(const runtime::CollectiveArgs &args,
                   const runtime::Group &group) override;
  /// Staging of at least `bytes`.
  absl::Status reserve(int64_t bytes);

  std::unique_ptr<runtime::Comm> host_;
  cuda::CudaBackend &backend_;
  char *staging_ = nullptr; // pinned: [send | recv]
  int64_t stagingBytes_ = 0;
};

} // namespace md::nccl

#endif // MD_RUNTIME_NCCL_STAGEDCOMM_H
