//===- ShmComm.h - collectives between rank processes on one machine -*- C++
//-*-===//
//
// The comm of the CPU backend (and of GPUs that share a machine but not
// NCCL): the ranks are processes, and they exchange data through one POSIX
// shared-memory segment, /md-<jobId>, that rank 0 creates and the others
// attach to. Each rank owns a staging slot in it; a collective copies this
// rank's contribution into its slot, announces it, and reads what it needs
// from the slots of its group. Collectives bigger than a slot run in
// chunks. An all-reduce is a reduce-scatter and an all-gather per chunk:
// each member reduces its 1/n of the chunk and publishes it, then everyone
// copies the reduced slices.
//
// Results are bitwise deterministic and the same on every rank: a
// reduction adds the group's contributions in group order (index 0, 1, ...,
// n-1), with the same code on the same data whichever rank computes an
// element; bf16 and f16 are reduced in f32 and rounded once
// (runtime/core/Reduce.h).
//
// No wait is unbounded. A rank that does not arrive within the timeout
// fails the collective with DeadlineExceeded naming it, the collective's
// kind and sequence number; the failure is posted in the segment so the
// other ranks stop too, with the same error, and the comm stays failed.
// docs/runtime-cpu.md describes the protocol.
//
// A ShmComm is used by one thread of its process at a time.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_SHM_SHMCOMM_H
#define MD_RUNTIME_SHM_SHMCOMM_H

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "runtime/core/CollectiveComm.h"

namespace md::shm {

struct ShmCommOptions {
  /// Names the segment /md-<jobId>: letters, digits, '.', '_', '-'. Every
  /// rank of a job passes the same id; two jobs at once need two ids.
  std::string jobId;
  int rank = 0;
  int worldSize = 1;
  /// Ranks per shard group of the 2-D mesh; 0 means worldSize (no hybrid
  /// sharding).
  int shardSize = 0;
  /// Staging bytes per rank; at least 8 * worldSize. Larger collectives run
  /// in chunks of this size.
  int64_t slotBytes = int64_t(4) << 20;
  /// How long any wait (attaching, a peer's arrival) may take.
  std::chrono::milliseconds timeout{300'000};
  /// What the ranks must agree on (mdrun: the plan's hash, W, backend and
  /// comm), at most 255 bytes. Rank 0 stores it in the segment; a rank that
  /// attaches with another one fails, and makes every rank fail at once
  /// (FailedPrecondition, naming both), instead of running another plan.
  std::string fingerprint;
};

class ShmComm final : public runtime::HostMeshComm {
public:
  /// Rank 0 creates the segment, the others attach to it (waiting up to the
  /// timeout for it to appear); then every rank waits until all have
  /// attached, and rank 0 unlinks the name, so nothing is left in /dev/shm
  /// once the job runs, whatever happens to it later. Errors:
  /// InvalidArgument for bad options, AlreadyExists when rank 0 finds the
  /// name taken, DeadlineExceeded naming the ranks that did not attach,
  /// FailedPrecondition when the ranks disagree on the world size, mesh or
  /// slot size.
  static absl::StatusOr<std::unique_ptr<ShmComm>>
  create(const ShmCommOptions &options);

  /// "/md-<jobId>".
  static std::string segmentName(const std::string &jobId);
  /// Unlinks a segment left behind by a job whose rank 0 died before all
  /// ranks attached. OK when there is none.
  static absl::Status removeSegment(const std::string &jobId);

  ~ShmComm() override;

  const char *name() const override { return "shm"; }
  // rank(), worldSize(), group() and sequence() are HostMeshComm's.

private:
  struct Op; // one collective in flight, defined in ShmComm.cpp
  ShmComm(const ShmCommOptions &options, runtime::Mesh mesh);

  absl::Status createSegment();
  absl::Status attachSegment();
  absl::Status waitForAttach();
  /// Checks a collective's arguments (checkCollectiveCall), then runs it
  /// in chunks through the members' slots.
  absl::Status run(const runtime::CollectiveArgs &args,
                   const runtime::Group &group) override;
  /// How each chunk of `op` goes into this rank's slot and comes out of the
  /// group's slots.
  void stage(Op &op) const;
  void stageAllReduce(Op &op) const;
  /// The chunked protocol every collective shares.
  absl::Status runChunks(Op &op);
  /// What a wait is for: the members' contributions (posted), their
  /// reduced slices (posted again, all-reduce), their reads (done).
  enum class Wait { arrive, reduce, finish };
  /// Waits until every other member of op's group has posted (or, for
  /// Wait::finish, finished reading) `phase`.
  absl::Status waitForGroup(const Op &op, Wait what, uint64_t phase);
  absl::Status checkSameCollective(const Op &op);
  /// Posts `status` to the segment for the other ranks and keeps it as this
  /// comm's state; returns it.
  absl::Status fail(absl::Status status);
  absl::Status abortedByPeer(const Op &op) const;
  std::string describe(const Op &op) const;

  char *slot(int rank) const;

  ShmCommOptions options_;
  std::string name_;
  int64_t totalBytes_ = 0;
  int64_t slotStride_ = 0;
  char *base_ = nullptr;
  bool ownsName_ = false; // this rank created the name (rank 0)
  bool unlinked_ = false;
  uint64_t phase_[3] = {0, 0, 0};
  absl::Status failed_;
};

} // namespace md::shm

#endif // MD_RUNTIME_SHM_SHMCOMM_H
