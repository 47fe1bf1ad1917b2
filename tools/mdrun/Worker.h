//===- Worker.h - one rank of a training job -*- C++ -*-===//
//
// A worker is the process the launcher starts for each rank: it reads its
// place in the job from the torchrun environment contract (RANK,
// WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT) and
// md's own variables (MD_BACKEND and MD_COMM, the names of a backend and a
// comm of the runtime's registry, runtime/rank/Registry.h: cpu or cuda;
// shm, gloo, nccl or shm-staged; MD_DEVICE the CUDA device, MD_JOB_ID the
// shared-memory segment, MD_THREADS the BLAS threads), loads the plan,
// makes the backend and joins the comm through the registry
// (runtime/rank/Rank.h; the comms that meet through the TCP rendezvous at
// MASTER_ADDR:MASTER_PORT do so there) and runs the executor.
// Rank 0 prints the banner and the progress lines and writes the metrics
// file.
//
//===----------------------------------------------------------------------===//

#ifndef MD_TOOLS_MDRUN_WORKER_H
#define MD_TOOLS_MDRUN_WORKER_H

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tools/mdrun/Cluster.h"
#include "tools/mdrun/Options.h"

namespace md::mdrun {

struct WorkerEnv {
  int rank = 0;
  int worldSize = 1;
  int localRank = 0;
  int localWorldSize = 1;
  std::string masterAddr = "127.0.0.1";
  int masterPort = 29500;
  std::string jobId;                          // names the shared-memory segment
  int threads = 1;                            // BLAS threads (CPU backend)
  std::string backend = "cpu";                // a registered backend's name
  std::string comm = "shm";                   // a registered comm's name
  int device = 0;                             // the CUDA device (CUDA backend)
  /// The memfd of this rank's flight recorder ring, which the launcher
  /// made and reads (MD_FLIGHT_FD); -1: none.
  int flightFd = -1;
};

/// The worker's environment; InvalidArgument naming a missing or bad
/// variable.
absl::StatusOr<WorkerEnv> WorkerEnvFromEnvironment();

/// Trains as rank env.rank. Collectives wait at most options.timeoutSeconds.
/// SIGTERM (a scheduler's preemption, or the launcher's) ends the run after
/// the current step, every rank at the same step, writing the recipe's
/// checkpoint there (ExecutorOptions::preempt); the status is then a
/// preemption (IsPreemption). A second SIGTERM ends the rank at once. The
/// plan file is read once; `flightLocations`, when given, receives the
/// source location of each of its instructions (FlightLocations) once it
/// has loaded, for a flight recorder written after a failure.
absl::Status RunWorker(const TrainOptions &options, const WorkerEnv &env,
                       std::vector<std::string> *flightLocations = nullptr);

/// The exit status of a rank, and of mdrun, stopped by SIGTERM after a
/// step and its checkpoint: EX_TEMPFAIL of sysexits.h ("try again later"),
/// which schedulers' requeue scripts can test for.
inline constexpr int kPreemptedExitCode = 75;

/// A status saying the run was preempted (`what` says where it stopped),
/// and whether a status is one.
absl::Status PreemptionStatus(const std::string &what);
bool IsPreemption(const absl::Status &status);

/// The exit status of a rank, and of mdrun, whose recipe ran `fail("why")`:
/// every rank ended after the same step, and the job is not restarted (the
/// recipe decided; a rerun would decide the same). Distinct from 1 (an
/// error of the job) so that a script can tell a diverged run from a
/// broken one.
inline constexpr int kRecipeFailedExitCode = 3;

/// A status saying the recipe failed, `message` saying where and why ("the
/// recipe failed at step 7: diverged"; "" for a rank that leaves saying it
/// to another), and whether a status is one.
absl::Status RecipeFailureStatus(const std::string &message);
bool IsRecipeFailure(const absl::Status &status);

/// Trains as the one rank that srun or mpirun started (Cluster.h): picks
/// the backend and comm itself, as the launcher would.
absl::Status RunRank(const TrainOptions &options, const Placement &place);

} // namespace md::mdrun

#endif // MD_TOOLS_MDRUN_WORKER_H
