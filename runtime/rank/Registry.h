//===- Registry.h - the runtime's backends and comms, by name -*- C++ -*-===//
//
// A rank computes on a backend and talks to the other ranks through a comm.
// Each backend (runtime/cpu, runtime/cuda) and each comm (runtime/shm,
// runtime/gloo, runtime/nccl) registers itself here, from a small file of
// its own folder (<Name>Registration.cpp): its name, what it needs of the
// job (devices, every rank on one node, the rendezvous, the backends it
// serves) and a factory. The build calls every registration it compiled
// (BuiltinRegistry, Builtin.h), so the tools above the runtime — mdrun, the
// collective bench, the tests — choose a rank's backend and comm
// (Choice.h) and make them (Rank.h) by name, and a new comm needs no edit
// to any of them. docs/architecture.md, "Adding a comm", lists the files a
// new comm touches.
//
// A registry is filled once and then only read; reading it from several
// threads is safe, filling it is not.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_RANK_REGISTRY_H
#define MD_RUNTIME_RANK_REGISTRY_H

#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/core/Backend.h"
#include "runtime/core/Comm.h"
#include "runtime/core/FlightRecorder.h"
#include "runtime/net/Rendezvous.h"

namespace md::rank {

/// Who a rank is, where it meets the others, and which backend and comm it
/// runs: everything a factory may read.
struct RankSpec {
  /// A registered backend's and comm's names (a RankChoice's).
  std::string backend = "cpu";
  std::string comm = "shm";
  /// The torchrun contract's RANK, WORLD_SIZE, LOCAL_RANK and
  /// LOCAL_WORLD_SIZE.
  int rank = 0, worldSize = 1, localRank = 0, localWorldSize = 1;
  /// Ranks per shard group of the 2-D mesh (the plan's); 0: worldSize.
  int shardSize = 0;
  /// A device backend's device for this rank (RankChoice::deviceOf).
  int device = 0;
  /// The host backend's threads per rank; 0: its default.
  int threads = 0;
  /// Names what the ranks of one node share (the shared-memory segment):
  /// the same on every rank of a job, different for two jobs at once.
  std::string jobId;
  /// Rank 0's rendezvous (MASTER_ADDR, MASTER_PORT).
  std::string masterAddr = "127.0.0.1";
  int masterPort = 29500;
  /// What every rank must agree on (mdrun: the plan's hash, W, backend and
  /// comm); the comms refuse a rank that brings another.
  std::string fingerprint;
  /// Bounds every wait: attaching, the rendezvous, a collective.
  std::chrono::milliseconds timeout{300'000};
  /// Run the comm stream beside the compute stream, on a backend that does
  /// so only when asked (BackendInfo::overlapOnRequest: the CPU backend's
  /// comm thread). Only for a plan whose events order its two streams.
  bool overlapComm = false;
  /// The rank's flight recorder (may be null); it outlives the rank.
  runtime::FlightRecorder *recorder = nullptr;
};

/// Where rank 0's rendezvous is and who this rank is, for a comm that meets
/// the others through it.
net::RendezvousOptions RendezvousOptionsFor(const RankSpec &spec);

/// What a device backend finds on this node: how many devices are usable,
/// or why none is.
struct DeviceProbe {
  int count = 0;
  std::string unusableReason; // when count == 0
};

/// A backend as its factory made it for one rank.
struct RankBackend {
  std::unique_ptr<runtime::Backend> backend;
  /// How the banner describes it: "1 BLAS thread per rank, a comm thread",
  /// "rank 0 on cuda:0 (NVIDIA H100)".
  std::string where;
  /// The banner's further lines (the CPU's instruction set and warnings).
  std::vector<std::string> lines;
  /// Wraps the comm the rank runs on this backend (the CPU comm thread
  /// makes it stream-ordered); null: the comm as it is made.
  std::function<std::unique_ptr<runtime::Comm>(std::unique_ptr<runtime::Comm>)>
      wrapComm;
};

using BackendFactory =
    std::function<absl::StatusOr<RankBackend>(const RankSpec &spec)>;
/// Makes the rank's comm over `backend` (its memory, its comm stream);
/// the backend outlives the comm.
using CommFactory =
    std::function<absl::StatusOr<std::unique_ptr<runtime::Comm>>(
        const RankSpec &spec, runtime::Backend &backend)>;

struct BackendInfo {
  /// "cpu": MD_BACKEND, --backend, the fingerprint, the banner.
  std::string name;
  /// "CPU": messages ("the CPU backend").
  std::string title;
  /// A device backend finds its devices with it, and the choice prefers it
  /// when it finds some (Choice.h); empty for the host backend, which runs
  /// anywhere and is the fallback.
  std::function<DeviceProbe()> probe;
  /// Its comm stream runs beside compute only when asked
  /// (RankSpec::overlapComm): the CPU backend's comm thread.
  bool overlapOnRequest = false;
  BackendFactory make;
};

/// How a comm uses a device backend's devices.
enum class DeviceUse {
  None,       // host memory only (a comm of the host backend)
  OnePerRank, // each rank owns a device (nccl)
  Shared,     // ranks may share a device (shm-staged): a fallback
};

/// What a comm needs of the job; the choice takes a comm only where the
/// job meets them.
struct CommNeeds {
  /// The backends it runs on ("cpu"; "cuda").
  std::vector<std::string> backends;
  /// Every rank on one node (shared memory), and why, for the refusal:
  /// "their collectives go through host shared memory".
  bool oneNode = false;
  std::string oneNodeBecause;
  /// It meets the other ranks through the rendezvous at rank 0's address
  /// (RankSpec::masterAddr, masterPort), so works across nodes.
  bool rendezvous = false;
  DeviceUse devices = DeviceUse::None;
};

struct CommInfo {
  /// "gloo": MD_COMM, --comm, the fingerprint, the banner, messages.
  std::string name;
  /// One line of what it is, for listings: "Gloo over TCP, across nodes".
  std::string summary;
  CommNeeds needs;
  /// --comm may name it (and the choice then takes it where its needs are
  /// met); the others are the choice's alone.
  bool nameable = false;
  /// The choice may take it unnamed; a comm with false runs only when
  /// named.
  bool automatic = true;
  /// Among the automatic comms of a backend whose needs a job meets, the
  /// choice takes the one with the lowest preference (ties: the first
  /// registered).
  int preference = 100;
  /// A comm of ranks sharing a device: the end of the warning when the
  /// choice falls back to it ("ranks share GPUs and their collectives are
  /// staged through host shared memory (same math, slower than NCCL)").
  std::string fallbackWarning;
  CommFactory make;
  /// Removes what a job of this comm may leave on its node when its ranks
  /// die early (shm: the segment MD_JOB_ID names, which rank 0 unlinks
  /// once every rank has attached); OK when there is nothing. Null: the
  /// comm leaves nothing behind.
  std::function<absl::Status(const std::string &jobId)> removeLeftovers;
};

class Registry {
public:
  Registry() = default;
  Registry(const Registry &) = default;
  Registry &operator=(const Registry &) = default;

  /// Registers a backend or a comm. InvalidArgument for an entry without a
  /// name, title (a backend's), backends (a comm's) or factory, or a comm
  /// named "auto"; AlreadyExists for a name taken. The first error is also
  /// kept (status()), so that a build's registrations cannot fail unseen.
  absl::Status addBackend(BackendInfo info);
  absl::Status addComm(CommInfo info);

  /// The entry of that name, or null.
  const BackendInfo *backend(std::string_view name) const;
  const CommInfo *comm(std::string_view name) const;
  /// The same, or InvalidArgument listing the registered names: "unknown
  /// comm 'mpi' (shm, gloo, nccl, shm-staged)".
  absl::StatusOr<const BackendInfo *> findBackend(std::string_view name) const;
  absl::StatusOr<const CommInfo *> findComm(std::string_view name) const;

  /// Every entry, in registration order.
  std::vector<const BackendInfo *> backends() const;
  std::vector<const CommInfo *> comms() const;
  /// The names --comm takes, in registration order: shm, gloo.
  std::vector<std::string> nameableComms() const;
  /// The comms that run on `backend`, by preference (ties: registration
  /// order).
  std::vector<const CommInfo *> commsOf(std::string_view backend) const;
  /// The first backend without a probe (the CPU's), and the first with one
  /// (the GPUs'); null when none is registered.
  const BackendInfo *hostBackend() const;
  const BackendInfo *deviceBackend() const;

  /// OK, or the first registration that failed.
  const absl::Status &status() const { return status_; }

private:
  absl::Status keep(absl::Status s);

  std::deque<BackendInfo> backends_;
  std::deque<CommInfo> comms_;
  absl::Status status_;
};

/// Whether `comm` runs on the backend named `backend`.
bool Serves(const CommInfo &comm, std::string_view backend);

} // namespace md::rank

#endif // MD_RUNTIME_RANK_REGISTRY_H
