//===- Options.h - mdrun's command line -*- C++ -*-===//
//
// What `mdrun` was asked to do: inspect a plan, launch a training job, or
// (hidden, for the processes the launcher starts) run one rank of it. The
// launcher passes its own command line on to its workers, so both parse the
// same options; docs/cli.md lists them. The values live in Abseil flags
// (Options.cpp), parsed through tools/cli.
//
//===----------------------------------------------------------------------===//

#ifndef MD_TOOLS_MDRUN_OPTIONS_H
#define MD_TOOLS_MDRUN_OPTIONS_H

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/mdrun/Inspect.h"

namespace md::mdrun {

enum class BackendChoice { Auto, Cpu, Cuda };
/// "auto", "cpu", "cuda": --backend's spellings, and the runtime's names of
/// the backends (runtime/rank/Registry.h).
const char *BackendChoiceName(BackendChoice backend);
/// A yes-or-no option spelt on or off (--comm-thread).
enum class OnOff { Off, On };

struct TrainOptions {
  std::string planPath;
  /// Ranks to start (--gpus N or --ranks N); 0: the plan's pinned world
  /// size, else 1.
  int64_t ranks = 0;
  /// --nproc-per-node auto (torchrun's): one rank per usable GPU, else one
  /// per core; the launcher resolves it into `ranks`.
  bool ranksAuto = false;
  BackendChoice backend = BackendChoice::Auto;
  /// --comm: "auto" (the runtime's choice: shm on one node, gloo across
  /// nodes), or a comm the runtime's registry lets the user name
  /// (runtime/rank/Registry.h: shm, gloo).
  std::string comm = "auto";
  /// No GPU is an error instead of a fallback to the CPU backend.
  bool noFallback = false;
  /// Start the ranks even when the plan's predicted peak, times the ranks
  /// on this node, exceeds the memory available (CPU backend).
  bool skipMemoryCheck = false;
  /// Start the ranks without checking the data's contents first (a token
  /// file's width and ids; files are still opened by the ranks).
  bool skipDataCheck = false;
  int64_t steps = -1; // -1: the plan's
  std::optional<int64_t> seed;
  std::string metricsPath;
  std::string saveFinalPath;
  /// --resume: a sharded checkpoint directory, "auto", or "" (none).
  std::string resumePath;
  /// --init: a safetensors file of weights to start from, or "".
  std::string initPath;
  /// --init-map: the name map of the --init file ("": md's own names).
  std::string initMapPath;
  /// --init-missing: parameters the --init file lacks keep their declared
  /// initialiser (a LoRA adapter on a base model's weights).
  bool initMissing = false;
  /// --evaluate: run the recipe's evaluations once instead of training.
  bool evaluate = false;
  int64_t logEvery = 10;
  /// --metrics-every: a metrics record every N steps (and the first and
  /// last); 0: with the progress lines only.
  int64_t metricsEvery = 1;
  /// How long a collective may wait for a peer, in seconds.
  double timeoutSeconds = 300;
  /// Rank 0's port for the rendezvous (MASTER_PORT); -1: not given
  /// (MASTER_PORT from the environment, else 29500); 0 picks a free port
  /// and prints it.
  int64_t masterPort = -1;
  /// Rank 0's host (MASTER_ADDR); "": not given (127.0.0.1 on one node).
  std::string masterAddr;
  /// Nodes of the job and this node's index; 0 / -1: not given.
  int64_t nnodes = 0;
  int64_t nodeRank = -1;
  /// BLAS threads per rank; 0: cores / ranks.
  int64_t threads = 0;
  /// The CPU backend's comm stream on a thread of its own, so collectives
  /// overlap compute (--comm-thread; docs/runtime-cpu.md).
  bool commThread = true;

  // --- when a job fails (docs/runtime.md, "When a job fails") -------------
  /// Collectives each rank's flight recorder keeps; 0: no recorder, no
  /// analysis and no progress watchdog.
  int64_t flightRecorder = 2048;
  /// Where the ranks' timelines go as one Chrome trace-event JSON file
  /// (--trace); "": no trace.
  std::string tracePath;
  /// How often a failed or stalled job (on one node) starts again from its
  /// newest checkpoint (--max-restarts); 0: never.
  int64_t maxRestarts = 0;
};

struct CommandLine {
  enum class Mode { Help, Inspect, Launch, Worker };
  Mode mode = Mode::Launch;
  InspectOptions inspect;
  TrainOptions train;
};

/// Parses argv through mdrun's Abseil flags (tools/cli); every parse
/// starts from their defaults; InvalidArgument (a usage error) names the bad
/// option.
absl::StatusOr<CommandLine> ParseCommandLine(int argc, char **argv);

/// The --help text (and what follows a command-line error).
std::string Usage();

} // namespace md::mdrun

#endif // MD_TOOLS_MDRUN_OPTIONS_H
