//===- Cluster.h - where an mdrun process sits in a job -*- C++ -*-===//
//
// mdrun is started in one of three ways, and this file decides which from
// the command line and the environment:
//  - by hand or by a script, once per node: `mdrun --gpus N plan.fb` on one
//    machine, or `mdrun --nnodes M --node-rank R --master-addr A ...` on each
//    of M machines. The process is a launcher: it starts N local ranks.
//  - by `srun` (Slurm) or `mpirun` (Open MPI) with one task per rank: the
//    process is one rank, and its place comes from SLURM_PROCID /
//    SLURM_STEP_NUM_TASKS / SLURM_LOCALID / SLURM_STEP_TASKS_PER_NODE or
//    OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE}.
//  - by `srun` or `mpirun` with one task per node and `--gpus N`: each task is
//    the launcher of its node (node rank = SLURM_NODEID or the MPI rank).
// MASTER_ADDR and MASTER_PORT, when set, win over the scheduler's defaults
// (the first host of SLURM_STEP_NODELIST, port 29500); options given on the
// command line must agree with the scheduler's, or it is an error naming
// both. docs/multinode.md shows each way.
//
//===----------------------------------------------------------------------===//

#ifndef MD_TOOLS_MDRUN_CLUSTER_H
#define MD_TOOLS_MDRUN_CLUSTER_H

#include "absl/strings/string_view.h"
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/rank/Choice.h"
#include "tools/mdrun/Options.h"

namespace md::mdrun {

/// Looks up an environment variable; null when unset.
using EnvLookup = std::function<const char *(const char *)>;
/// The process environment.
EnvLookup ProcessEnvironment();

struct Placement {
  enum class Role {
    Launcher, // starts ranksPerNode ranks on this node
    Rank      // is itself rank `rank`
  };
  Role role = Role::Launcher;
  /// "command line", "Slurm", "Open MPI", "torchrun" (its agent started
  /// this process) or "the torchrun environment" (RANK, WORLD_SIZE, ...
  /// set by another launcher: a Kubernetes PyTorchJob, Accelerate):
  /// where the place came from.
  std::string source = "command line";
  int nnodes = 1;
  int nodeRank = 0;
  /// Launcher: the ranks this node starts (0: not given; the launcher takes
  /// the plan's pinned world size, else 1). Rank: the ranks on its node.
  int ranksPerNode = 0;
  // Rank role only.
  int rank = 0;
  int worldSize = 1;
  int localRank = 0;
  std::string masterAddr = "127.0.0.1";
  /// How the user named masterAddr, for messages about it: "--master-addr
  /// node01", "MASTER_ADDR=node01", "SLURM_STEP_NODELIST's first host
  /// gpu07"; "" for this machine's default.
  std::string masterAddrFrom;
  int masterPort = 29500;
  /// The job's name for the ranks' shared-memory segment and the store's
  /// keys ("" : derived from the scheduler's job id and the port).
  std::string jobId;
  /// torchrun's agent serves its TCPStore on masterPort
  /// (TORCHELASTIC_USE_AGENT_STORE): md's rendezvous takes a port of its
  /// own, which rank 0 publishes there (runtime/net/TorchStore.h).
  bool agentStore = false;
  /// TORCHELASTIC_ERROR_FILE: where torchrun reads a failed rank's error.
  std::string errorFile;
};

/// What this node's GPUs can do: how many are usable, or why none is
/// (the CUDA backend's probe, runtime/cuda/CudaRegistration.cpp); without
/// CUDA in the build, says so.
rank::DeviceProbe ProbeGpus();

/// The runtime's choice of backend and comm (runtime/rank/Choice.h) for
/// `ranksPerNode` ranks on each of `nnodes` nodes, asked for by --backend,
/// --comm and --no-fallback: GPUs when usable (NCCL with one GPU per rank;
/// ranks sharing GPUs on one node stage their collectives through host
/// shared memory), else the CPU backend with a warning, its comm shm on
/// one node and gloo across nodes unless --comm names one; the refusals
/// are ChooseRank's.
absl::StatusOr<rank::RankChoice> ChooseRankFor(const TrainOptions &options,
                                               int ranksPerNode, int nnodes,
                                               const rank::DeviceProbe &probe);

/// The process's place in its job; InvalidArgument naming the option or the
/// variable when they contradict each other or are malformed.
absl::StatusOr<Placement> ResolvePlacement(const TrainOptions &options,
                                           const EnvLookup &env);

/// Resolves the rendezvous host once, before any rank starts, where some
/// process of this node will connect to it (a job on several nodes, or a
/// rank of a job whose ranks are started one by one): a name that does not
/// resolve fails at once, InvalidArgument naming how it was given
/// ("--master-addr bogus.invalid: cannot resolve it: Name or service not
/// known"), instead of as a rendezvous timeout --timeout later.
absl::Status CheckRendezvousHost(const Placement &place);

/// The first host of a Slurm host list: "gpu[07-09,12],login1" -> "gpu07".
absl::StatusOr<std::string> FirstSlurmHost(absl::string_view nodelist);

/// Slurm's tasks-per-node list expanded: "2(x3),1" -> {2, 2, 2, 1}.
absl::StatusOr<std::vector<int>>
ExpandSlurmTasksPerNode(absl::string_view list);

} // namespace md::mdrun

#endif // MD_TOOLS_MDRUN_CLUSTER_H
