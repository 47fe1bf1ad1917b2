//===- Comm.h - the interface every communication backend implements -*- C++ -*-===//
//
// The executor runs a plan's collective instructions through this interface:
// `shm` (runtime/shm, ranks as processes on one machine) and `nccl` plug in
// the same way. It also holds which ranks form a group of the 2-D mesh; how
// many there are and how a flat buffer of n elements is padded and split
// into shards is Mesh.h's, which the compiler shares.
//
// Sizes follow NCCL's conventions, counted in elements of the given dtype:
//  - allGather: every rank sends `sendCount` elements; recv holds
//    size * sendCount elements, rank i's at [i * sendCount, ...).
//  - reduceScatter: send holds size * recvCount elements; rank i receives
//    the reduction of block i, elements [i * recvCount, (i+1) * recvCount).
//  - allReduce, broadcast: `count` elements everywhere.
// A flat parameter or gradient of n elements is therefore padded by the
// caller to a buffer of size * ceil(n / size) elements (ShardLayout,
// Mesh.h); the
// collectives never see a ragged shard. Pad elements take part in the
// reduction like any other (the caller zeroes them).
//
// In place is allowed as in NCCL: recv == send for allReduce and broadcast,
// send == recv + index * sendCount for allGather, and
// recv == send + index * recvCount for reduceScatter.
//
// Every collective returns a Status: InvalidArgument for arguments that are
// wrong on this rank alone, DeadlineExceeded when a peer does not arrive in
// time (naming it), FailedPrecondition when the ranks of a group disagree
// on the collective (a desync).
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_CORE_COMM_H
#define MD_RUNTIME_CORE_COMM_H

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/core/Mesh.h"
#include "runtime/core/Tensor.h"

namespace md::runtime {

/// The reduction of a collective. Numbered like the dialect's
/// ReductionKind.
enum class ReduceOp : uint8_t { sum = 0, avg = 1, max = 2, min = 3, prod = 4 };
const char *reduceOpName(ReduceOp op);

/// The collectives of this interface. Numbered as ShmComm publishes them in
/// its segment.
enum class Collective : uint8_t {
  all_gather = 0,
  reduce_scatter = 1,
  all_reduce = 2,
  broadcast = 3,
  barrier = 4
};
/// "all_gather", "reduce_scatter", "all_reduce", "broadcast", "barrier".
const char *collectiveName(Collective c);

/// Which group of the mesh a collective runs over. Numbered like the
/// dialect's Group.
enum class GroupKind : uint8_t { world = 0, shard = 1, replicate = 2 };
const char *groupKindName(GroupKind kind);

/// The ranks of one group, in the order that defines the collectives'
/// results (all-gather concatenates, reductions accumulate in this order),
/// and this rank's position among them.
struct Group {
  GroupKind kind = GroupKind::world;
  std::vector<int> ranks;
  int index = 0;

  int size() const { return static_cast<int>(ranks.size()); }
  /// "shard [2, 3]".
  std::string str() const;
};

/// The 2-D mesh: world = replicate x shard. Shard groups are contiguous
/// blocks of `shardSize` ranks ({0..S-1}, {S..2S-1}, ...); replicate groups
/// take the same position in every block ({r % S, r % S + S, ...}). Without
/// hybrid sharding shardSize = worldSize: the shard group is the world and
/// each replicate group is a single rank.
struct Mesh {
  int worldSize = 1;
  int shardSize = 1;
};

/// Rejects worldSize < 1 and shard sizes that do not divide the world.
absl::Status checkMesh(const Mesh &mesh);
/// The group of `kind` that `rank` belongs to.
absl::StatusOr<Group> meshGroup(const Mesh &mesh, GroupKind kind, int rank);

/// One collective call, in the fields every member of its group must agree
/// on: ShmComm publishes it in its segment and GlooComm sends it in its
/// headers, so its layout is part of both protocols. Fields the collective
/// does not use stay 0; the comm sets seq and the group when the call runs.
/// A peer's description may hold any values: name() and args() print
/// unknown ones as "collective?" and "dtype?".
struct CollectiveDesc {
  uint64_t seq = 0;        // this rank's count of collectives on the group kind
  uint32_t collective = 0; // a Collective
  uint32_t groupKind = 0;  // a GroupKind
  int32_t groupSize = 0;
  uint32_t dtype = 0;  // a DType
  uint32_t reduce = 0; // a ReduceOp
  int32_t root = 0;
  int64_t count = 0; // NCCL's, as the Comm methods take it

  static CollectiveDesc allGather(DType dtype, int64_t sendCount);
  static CollectiveDesc reduceScatter(DType dtype, int64_t recvCount,
                                      ReduceOp op);
  static CollectiveDesc allReduce(DType dtype, int64_t count, ReduceOp op);
  static CollectiveDesc broadcast(DType dtype, int64_t count, int root);
  static CollectiveDesc barrier();

  bool operator==(const CollectiveDesc &o) const;
  /// "all_reduce".
  const char *name() const;
  /// "f32 x 8, sum", "bf16 x 4, root 1", "i64 x 3"; "" for a barrier.
  std::string args() const;
};

/// The checks of a collective's arguments that a rank can make alone, which
/// every comm shares. Messages start with the collective ("all_reduce:
/// ..."); the comm prefixes its name. `group` must be `rank`'s own group of
/// its kind.
absl::Status checkOwnGroup(const Mesh &mesh, int rank, const Group &group,
                           const char *op);
/// A known element type, a count whose bytes across the group fit in
/// int64, and buffers whenever there is something to move.
absl::Status checkCollectiveBuffers(const char *op, DType dtype, int64_t count,
                                    int groupSize, const void *send,
                                    const void *recv);
/// What the host comms check before a collective, in this order:
/// checkOwnGroup; for a broadcast, a root that indexes the group; for all
/// but a barrier, checkCollectiveBuffers (a broadcast reads `send` on its
/// root only). Messages start with `comm` ("shm: broadcast: root 2 is not
/// an index of group world [0, 1]").
absl::Status checkCollectiveCall(const char *comm, const Mesh &mesh, int rank,
                                 const Group &group, const CollectiveDesc &call,
                                 const void *send, const void *recv);

/// A flat buffer split into equal, padded shards over a group (Mesh.h).
using ShardLayout = mesh::ShardLayout;

class Comm {
public:
  // A comm owns its connections, segment or communicators: never copied,
  // so no comm needs to say so again.
  Comm() = default;
  Comm(const Comm &) = delete;
  Comm &operator=(const Comm &) = delete;
  virtual ~Comm();

  /// "shm", "nccl".
  virtual const char *name() const = 0;
  virtual int rank() const = 0;
  virtual int worldSize() const = 0;
  /// This rank's group of each kind.
  virtual absl::StatusOr<Group> group(GroupKind kind) const = 0;

  virtual absl::Status allGather(const void *send, void *recv,
                                 int64_t sendCount, DType dtype,
                                 const Group &group) = 0;
  virtual absl::Status reduceScatter(const void *send, void *recv,
                                     int64_t recvCount, DType dtype,
                                     ReduceOp op, const Group &group) = 0;
  virtual absl::Status allReduce(const void *send, void *recv, int64_t count,
                                 DType dtype, ReduceOp op,
                                 const Group &group) = 0;
  /// `root` is an index into group.ranks; only the root's `send` is read
  /// (it may be null elsewhere).
  virtual absl::Status broadcast(const void *send, void *recv, int64_t count,
                                 DType dtype, int root, const Group &group) = 0;
  virtual absl::Status barrier(const Group &group) = 0;

  /// Whether a collective is queued on the backend's comm stream and so
  /// ordered by the plan's events alone (NCCL, the staged comm). False:
  /// the collective reads its operands on the host when called (shm, gloo),
  /// so the executor first waits for the compute stream.
  virtual bool streamOrdered() const { return false; }

  /// Whether collectives issued between beginGroup() and endGroup() are
  /// launched together (NCCL's ncclGroupStart/End: one kernel for a bucket
  /// of collectives). The executor groups the consecutive collectives of
  /// one plan bucket only on a comm that says so; until endGroup() returns
  /// they may not have been queued yet.
  virtual bool groupsCollectives() const { return false; }
  virtual absl::Status beginGroup() { return absl::OkStatus(); }
  virtual absl::Status endGroup() { return absl::OkStatus(); }
};

} // namespace md::runtime

#endif // MD_RUNTIME_CORE_COMM_H
