//===- Choice.h - which backend and comm a job's ranks run -*- C++ -*-===//
//
// The choice of a job's backend and comm, from the job's facts (ranks per
// node, nodes, the usable devices of this node) and what the user asked
// for, over the entries of a registry (Registry.h):
//  - the device backend (the GPUs') when its probe finds usable devices,
//    else the host backend (the CPU's) with one warning; --backend names
//    either, and a device backend named, or --no-fallback, makes no usable
//    device an error;
//  - the comm: the one the user named (it must run on the backend and the
//    job must meet its needs), else the automatic comm of the backend with
//    the lowest preference whose needs the job meets: shm on one node and
//    gloo across nodes on the CPU, nccl with a device per rank on GPUs;
//    ranks sharing devices take a comm of DeviceUse::Shared (shm-staged)
//    with a warning, on one node only, never under --no-fallback.
// The messages name the request as mdrun's options spell it (--backend,
// --comm, --no-fallback): docs/runtime.md lists them, and the tests check
// them.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_RANK_CHOICE_H
#define MD_RUNTIME_RANK_CHOICE_H

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "runtime/rank/Registry.h"

namespace md::rank {

/// The job as the choice sees it: the same number of ranks on every node.
struct JobShape {
  int ranksPerNode = 1;
  int nnodes = 1;
};

/// What the user asked for.
struct RankRequest {
  /// "auto", or a backend's name; a name the registry lacks (cuda in a
  /// build without it) is a device backend that finds no device.
  std::string backend = "auto";
  /// "auto", or the name of a nameable comm.
  std::string comm = "auto";
  /// No usable device, or fewer devices than ranks, is an error instead of
  /// a fallback.
  bool noFallback = false;
};

struct RankChoice {
  std::string backend; // a registered backend's name
  std::string comm;    // a registered comm's name
  /// Usable devices on this node (0 on the host backend).
  int devices = 0;
  /// The one warning line to print, or "".
  std::string warning;
  /// On a device backend (else the host backend, the CPU's).
  bool onDevices() const { return devices > 0; }
  /// The device of local rank `localRank`: the ranks share the devices
  /// round-robin.
  int deviceOf(int localRank) const {
    return devices > 0 ? localRank % devices : 0;
  }
};

/// The backend and comm of a job of `job.ranksPerNode` ranks on each of
/// `job.nnodes` nodes, whose device backend found `probe` on this node.
/// FailedPrecondition for a request the job cannot meet: --comm naming a
/// comm of one node for several, or one that does not run on the backend
/// the job would run on; no usable device with --no-fallback or a device
/// backend named; more ranks than devices with --no-fallback, or across
/// nodes. InvalidArgument for a name the registry lacks.
absl::StatusOr<RankChoice> ChooseRank(const Registry &registry,
                                      const JobShape &job,
                                      const RankRequest &request,
                                      const DeviceProbe &probe);

/// The comm the choice takes unnamed for `backend` on a job of `job`'s
/// shape with `devices` usable devices (0 for the host backend), or null
/// when none of the backend's automatic comms meets the job without a
/// fallback. For listings: "shm on one node, gloo across nodes".
const CommInfo *AutomaticComm(const Registry &registry,
                              std::string_view backend, const JobShape &job,
                              int devices);

/// What the device backend's probe finds on this node; without a device
/// backend, no device and the reason "no GPU backend in this build".
DeviceProbe ProbeDevices(const Registry &registry);

} // namespace md::rank

#endif // MD_RUNTIME_RANK_CHOICE_H
