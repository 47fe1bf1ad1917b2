//===- NcclComm.h - collectives through NCCL on the CUDA backend's comm stream
//-*- C++ -*-===//
//
// The comm of ranks that each own a GPU. Every rank process creates one
// NcclComm over its CudaBackend; the launcher hands all ranks the unique id
// that rank 0 made with NewUniqueId().
//
// Communicators: one for the world (ncclCommInitRankConfig, non-blocking),
// and, with hybrid sharding (1 < shardSize < worldSize), one per shard and
// one per replicate group split from it (ncclCommSplit, color = the group's
// index in the mesh, key = rank, so a rank's index in the split comm is its
// index in Group::ranks). Without hybrid sharding the shard group is the
// world and the replicate groups are single ranks (or the other way round
// with shardSize 1); a collective over a single-rank group that has no
// communicator is a device copy on the comm stream, or nothing.
//
// Collectives are enqueued on the backend's comm stream (kCommStream) and
// the call returns once NCCL has enqueued them: the executor orders the
// streams with events. barrier is the exception: it all-reduces one
// element and waits for the comm stream, because the executor relies on
// barrier holding the host until every rank has arrived.
//
// Nothing waits without a bound. Creation, a split, the enqueueing of a
// collective and the teardown each give up after the timeout, abort the
// communicators and fail with DeadlineExceeded. A watchdog thread polls
// every communicator for NCCL's asynchronous errors and watches an event
// recorded after each collective: an error, or a collective that has not
// completed within the timeout, aborts every communicator (which stops
// NCCL's kernels) and becomes this comm's status. From then on every call
// returns that status, and so does every host wait of the backend, through
// the sync poll create() installs, so a rank blocked in synchronize()
// fails instead of hanging.
//
// NCCL's own environment variables (NCCL_DEBUG, NCCL_SOCKET_IFNAME,
// NCCL_IB_*, ...) are NCCL's business: this class reads and sets none.
//
// Thread safety: one thread (the executor's) calls the collectives; the
// watchdog runs beside it. The backend must outlive the comm.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_NCCL_NCCLCOMM_H
#define MD_RUNTIME_NCCL_NCCLCOMM_H

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/core/CollectiveComm.h"
#include "runtime/cuda/CudaBackend.h"

namespace md::nccl {

/// The bytes of an ncclUniqueId.
using UniqueId = std::array<char, 128>;

/// A new NCCL unique id (rank 0 creates it; the launcher's TCP rendezvous
/// hands it to every rank). Needs no GPU.
absl::StatusOr<UniqueId> NewUniqueId();

/// "NCCL 2.x.y" of the library actually loaded.
std::string NcclVersionString();

struct NcclCommOptions {
  /// The 2-D mesh of Comm.h; shardSize 0 means worldSize.
  int rank = 0, worldSize = 1, shardSize = 1;
  UniqueId uniqueId{};
  /// Collectives run on its comm stream (runtime::kCommStream).
  cuda::CudaBackend *backend = nullptr;
  /// A collective not done by then aborts the communicators; also bounds
  /// creation and teardown.
  std::chrono::milliseconds timeout{300'000};
};

class NcclComm final : public runtime::CollectiveComm {
public:
  /// Creates the communicators on options.backend's device, starts the
  /// watchdog and installs the backend's sync poll. Errors: InvalidArgument
  /// for bad options; DeadlineExceeded when the communicators are not ready
  /// within the timeout (a rank missing, ranks with different unique ids);
  /// NCCL's failures with its error string.
  static absl::StatusOr<std::unique_ptr<NcclComm>>
  create(const NcclCommOptions &options);

  /// Finalizes and destroys the communicators (bounded by the timeout,
  /// aborting them when that runs out), or only lets go of them after an
  /// abort; clears the backend's sync poll.
  ~NcclComm() override;

  const char *name() const override { return "nccl"; }
  bool streamOrdered() const override { return true; }
  int rank() const override;
  int worldSize() const override;
  absl::StatusOr<runtime::Group> group(runtime::GroupKind kind) const override;

  /// ncclGroupStart/End around the collectives of one plan bucket: NCCL
  /// launches them together at endGroup(), which also starts the
  /// watchdog's clock on each. A barrier inside a group is refused.
  bool groupsCollectives() const override { return true; }
  absl::Status beginGroup() override;
  absl::Status endGroup() override;

  /// OK while healthy; after an NCCL error or a timeout, that error (what
  /// every call and the backend's sync poll return from then on).
  absl::Status status() const;
  /// How many collectives this rank has started on groups of `kind`; the
  /// "#N" of error messages.
  uint64_t sequence(runtime::GroupKind kind) const;

private:
  /// A barrier also waits for the comm stream (see above).
  absl::Status run(const runtime::CollectiveArgs &args,
                   const runtime::Group &group) override;

  struct Impl;
  explicit NcclComm(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

} // namespace md::nccl

#endif // MD_RUNTIME_NCCL_NCCLCOMM_H
