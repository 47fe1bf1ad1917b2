//===- CollectiveComm.h - one entry for every collective -*- C++ -*-===//
//
// Each comm (shm, gloo, nccl, the staged comm) checks a collective's
// arguments, numbers it, names it in errors and runs its protocol in one
// function for all five collectives; only the buffers' roles differ by
// kind. CollectiveComm is the base that says so once: its typed Comm
// methods pack their arguments into a CollectiveArgs and call run(), the
// one function a comm implements. The typed methods are final, so no comm
// can bypass its own checks for one collective.
//
// CollectiveArgs is also how a comm hands a collective on to another comm
// (runCollective), as the staged comm does with its host comm.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_CORE_COLLECTIVECOMM_H
#define MD_RUNTIME_CORE_COLLECTIVECOMM_H

#include <chrono>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/core/Comm.h"

namespace md::runtime {

/// One collective call as the Comm interface receives it. `count` is
/// NCCL's: per rank for all_gather (send) and reduce_scatter (recv).
/// Fields the collective does not use keep their defaults.
struct CollectiveArgs {
  Collective kind = Collective::all_reduce;
  const void *send = nullptr;
  void *recv = nullptr;
  int64_t count = 0;
  DType dtype = DType::f32;
  ReduceOp op = ReduceOp::sum;
  int root = 0;

  static CollectiveArgs allGather(const void *send, void *recv,
                                  int64_t sendCount, DType dtype) {
    return {Collective::all_gather, send, recv, sendCount, dtype};
  }
  static CollectiveArgs reduceScatter(const void *send, void *recv,
                                      int64_t recvCount, DType dtype,
                                      ReduceOp op) {
    return {Collective::reduce_scatter, send, recv, recvCount, dtype, op};
  }
  static CollectiveArgs allReduce(const void *send, void *recv, int64_t count,
                                  DType dtype, ReduceOp op) {
    return {Collective::all_reduce, send, recv, count, dtype, op};
  }
  static CollectiveArgs broadcast(const void *send, void *recv, int64_t count,
                                  DType dtype, int root) {
    return {Collective::broadcast, send, recv, count, dtype,
            ReduceOp::sum,         root};
  }
  static CollectiveArgs barrier() { return {Collective::barrier}; }

  /// What every member of the group must agree on (CollectiveDesc's
  /// factories; seq and the group are left for the comm to set).
  CollectiveDesc desc() const {
    switch (kind) {
    case Collective::all_gather:
      return CollectiveDesc::allGather(dtype, count);
    case Collective::reduce_scatter:
      return CollectiveDesc::reduceScatter(dtype, count, op);
    case Collective::all_reduce:
      return CollectiveDesc::allReduce(dtype, count, op);
    case Collective::broadcast:
      return CollectiveDesc::broadcast(dtype, count, root);
    case Collective::barrier:
      break;
    }
    return CollectiveDesc::barrier();
  }
};

/// A collective as a host comm (shm, gloo) runs it: the caller's arguments,
/// the group and the description its members exchange. Each comm's
/// in-flight Op extends it with its own state.
struct HostCollectiveCall {
  const Group *group = nullptr;
  const CollectiveArgs *args = nullptr;
  CollectiveDesc desc;

  /// Takes `args` on `group` and checks them (checkCollectiveCall, whose
  /// messages start with `comm`).
  absl::Status start(const char *comm, const Mesh &mesh, int rank,
                     const Group &onGroup, const CollectiveArgs &callArgs) {
    group = &onGroup;
    args = &callArgs;
    desc = callArgs.desc();
    return checkCollectiveCall(comm, mesh, rank, onGroup, desc, callArgs.send,
                               callArgs.recv);
  }
};

/// Elements of the send and of the receive buffer on a group of
/// `groupSize` ranks: reduce_scatter sends and all_gather receives
/// groupSize blocks of `count`, a barrier moves nothing.
inline int64_t sendElements(const CollectiveArgs &args, int groupSize) {
  if (args.kind == Collective::barrier)
    return 0;
  return args.kind == Collective::reduce_scatter ? args.count * groupSize
                                                 : args.count;
}
inline int64_t recvElements(const CollectiveArgs &args, int groupSize) {
  if (args.kind == Collective::barrier)
    return 0;
  return args.kind == Collective::all_gather ? args.count * groupSize
                                             : args.count;
}

/// Calls the typed method of `comm` that `args` describes.
inline absl::Status runCollective(Comm &comm, const CollectiveArgs &args,
                                  const Group &group) {
  switch (args.kind) {
  case Collective::all_gather:
    return comm.allGather(args.send, args.recv, args.count, args.dtype, group);
  case Collective::reduce_scatter:
    return comm.reduceScatter(args.send, args.recv, args.count, args.dtype,
                              args.op, group);
  case Collective::all_reduce:
    return comm.allReduce(args.send, args.recv, args.count, args.dtype, args.op,
                          group);
  case Collective::broadcast:
    return comm.broadcast(args.send, args.recv, args.count, args.dtype,
                          args.root, group);
  case Collective::barrier:
    break;
  }
  return comm.barrier(group);
}

/// The checks every comm makes of its options before it starts: the mesh of
/// `worldSize` ranks in shard groups of `shardSize` (0 meaning worldSize),
/// a rank in it and a positive timeout. Returns the mesh, or
/// InvalidArgument starting with `comm` ("gloo: rank 4 is out of range for
/// world size 4").
inline absl::StatusOr<Mesh> commMesh(const char *comm, int rank, int worldSize,
                                     int shardSize,
                                     std::chrono::milliseconds timeout) {
  Mesh mesh{worldSize, shardSize == 0 ? worldSize : shardSize};
  if (absl::Status s = checkMesh(mesh); !s.ok())
    return absl::InvalidArgumentError(absl::StrCat(comm, ": ", s.message()));
  if (rank < 0 || rank >= worldSize)
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: rank %d is out of range for world size %d", comm,
                        rank, worldSize));
  if (timeout.count() <= 0)
    return absl::InvalidArgumentError(
        absl::StrCat(comm, ": the timeout must be positive"));
  return mesh;
}

/// A comm whose collectives all run through run().
class CollectiveComm : public Comm {
public:
  absl::Status allGather(const void *send, void *recv, int64_t sendCount,
                         DType dtype, const Group &group) final {
    return run(CollectiveArgs::allGather(send, recv, sendCount, dtype), group);
  }
  absl::Status reduceScatter(const void *send, void *recv, int64_t recvCount,
                             DType dtype, ReduceOp op,
                             const Group &group) final {
    return run(CollectiveArgs::reduceScatter(send, recv, recvCount, dtype, op),
               group);
  }
  absl::Status allReduce(const void *send, void *recv, int64_t count,
                         DType dtype, ReduceOp op, const Group &group) final {
    return run(CollectiveArgs::allReduce(send, recv, count, dtype, op), group);
  }
  absl::Status broadcast(const void *send, void *recv, int64_t count,
                         DType dtype, int root, const Group &group) final {
    return run(CollectiveArgs::broadcast(send, recv, count, dtype, root),
               group);
  }
  absl::Status barrier(const Group &group) final {
    return run(CollectiveArgs::barrier(), group);
  }

protected:
  /// Runs one collective over `group`, which the caller claims is this
  /// rank's group of its kind: run() checks that, and everything else a
  /// rank can check alone, before it moves any data.
  virtual absl::Status run(const CollectiveArgs &args, const Group &group) = 0;
};

/// A host comm (shm, gloo) on the 2-D mesh of Comm.h: this rank's place,
/// its groups and its count of collectives per group kind, which both keep
/// alike. The count numbers each collective ("#N" in errors) and is what the
/// members of a group check against each other.
class HostMeshComm : public CollectiveComm {
public:
  int rank() const override { return rank_; }
  int worldSize() const override { return mesh_.worldSize; }
  absl::StatusOr<Group> group(GroupKind kind) const override {
    return meshGroup(mesh_, kind, rank_);
  }
  /// How many collectives this rank has started on groups of `kind`; the
  /// "#N" of error messages is this count for the failing one.
  uint64_t sequence(GroupKind kind) const {
    int k = static_cast<int>(kind);
    return k >= 0 && k < 3 ? seq_[k] : 0;
  }

protected:
  HostMeshComm(int rank, Mesh mesh) : rank_(rank), mesh_(mesh) {}

  const int rank_;
  const Mesh mesh_;
  uint64_t seq_[3] = {0, 0, 0}; // by GroupKind
};

} // namespace md::runtime

#endif // MD_RUNTIME_CORE_COLLECTIVECOMM_H
