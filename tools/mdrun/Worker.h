//===- Worker.h - one rank of a training job -*- C++ -*-===//
//
// A worker is the process the launcher starts for each rank: it reads its
// place in the job from the torchrun environment contract (RANK,
// WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT) and
// md's own variables (MD_JOB_ID names the shared-memory segment, MD_THREADS
// the BLAS threads), loads the plan, joins the comm and runs the executor.
// Rank 0 prints the banner and the progress lines and writes the metrics
// file.
//
//===----------------------------------------------------------------------===//

#ifndef MD_TOOLS_MDRUN_WORKER_H
#define MD_TOOLS_MDRUN_WORKER_H

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tools/mdrun/Options.h"

namespace md::mdrun {

struct WorkerEnv {
  int rank = 0;
  int worldSize = 1;
  int localRank = 0;
  int localWorldSize = 1;
  std::string jobId;
  int threads = 1;
};

/// The worker's environment; InvalidArgument naming a missing or bad
/// variable.
absl::StatusOr<WorkerEnv> WorkerEnvFromEnvironment();

/// Trains as rank env.rank. Collectives wait at most options.timeoutSeconds.
absl::Status RunWorker(const TrainOptions &options, const WorkerEnv &env);

} // namespace md::mdrun

#endif // MD_TOOLS_MDRUN_WORKER_H
