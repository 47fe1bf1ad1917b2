//===- Executor.h - runs a plan on one rank -*- C++ -*-===//
//
// The executor is md's runtime proper: given a verified plan bound to a
// world size W, this rank's number, a Backend (memory and kernels) and a
// Comm (collectives), it
//   - lays out one arena for persistent buffers and one for transient
//     buffers from their liveness intervals (ArenaLayout.h);
//   - initialises the parameters from the plan's seed, identically on every
//     rank, each rank materialising only the elements it holds (its shard);
//   - runs the step block once per optimizer step (the micro-steps body
//     A - 1 times, A = global_batch / (micro_batch x W)), then the hooks block;
//   - interprets every instruction by calling the Backend or the Comm, in
//     program order (the CPU backend's streams are synchronous; events are
//     still recorded and waited on through the Backend API).
// Everything returns absl::Status; a NaN or infinite loss is an error naming
// the step. docs/runtime.md describes the semantics in full.
//
// Every rank runs the same sequence of collectives: whatever this class
// adds to the plan's own (the mean loss of a progress report, the gather of
// a full checkpoint) depends only on options that are the same on every
// rank.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_EXEC_EXECUTOR_H
#define MD_RUNTIME_EXEC_EXECUTOR_H

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/exec/ArenaLayout.h"
#include "runtime/core/Backend.h"
#include "runtime/core/Comm.h"
#include "runtime/exec/LrSchedule.h"
#include "runtime/plan/Loader.h"
#include "runtime/plan/Memory.h"

namespace md::runtime {

class FlightRecorder;
class TraceRecorder;

/// What a run is, for the startup banner.
struct RunInfo {
  std::string model, planName, preset;
  int64_t worldSize = 0;
  std::string backend, comm;
  int64_t microBatch = 0, accumulationSteps = 0, globalBatch = 0;
  std::string optimizer;
  /// The optimizer's parameter groups, one line each; empty without.
  std::vector<std::string> optimizerGroups;
  LrSchedule schedule;
  double clipGradNorm = 0;
  int64_t seed = 0;
  int64_t paramCount = 0, paramElements = 0, trainableElements = 0;
  plan::MemoryReport memory; // the plan's memory model at W
  int64_t persistentArenaBytes = 0, transientArenaBytes = 0;
  int64_t steps = 0; // steps this run trains for
  std::string data;  // the training data, described
  std::string sampler;
  /// Tokens per sample when the first batch input is a token sequence
  /// (throughput is then reported in tokens/s), else 0.
  int64_t tokensPerSample = 0;
  /// The checkpoint the run resumed from ("" for a fresh start), what it
  /// says of itself (step, world size, plan), and, for `--resume auto`
  /// that found none, why the run starts fresh.
  std::string resumedFrom, resumedWhat, resumeNote;
  /// Checkpoints `--resume auto` passed over, newest first: "DIR: why"
  /// (a meta.json that does not read, a file missing, truncated or
  /// corrupt).
  std::vector<std::string> resumeSkipped;
  /// What the resume found questionable in the checkpoint it loaded (a
  /// meta.json of an older format, without its own checksum).
  std::vector<std::string> resumeWarnings;
  /// The weights file the run started from (ExecutorOptions::init), and
  /// what it held.
  std::string initFrom, initWhat;
};

/// A progress report of a step (rank 0).
struct Progress {
  int64_t step = 0;               // steps completed
  int64_t steps = 0;              // steps the run trains for
  double loss = 0;                // mean over micro-steps and ranks
  double lr = 0;                  // the learning rate the step used
  std::optional<double> gradNorm; // when the plan clips
  double samplesPerSecond = 0;    // since the previous report
  double tokensPerSecond = 0;     // 0 unless a token model
  double stepSeconds = 0;         // mean step time since the previous report
  int64_t stepsSince = 0;         // steps since the previous report
  double elapsedSeconds = 0;      // since the executor was created
  int64_t epoch = 0;
  /// What the report is for: a progress line (logEvery, the first and the
  /// last step), a metrics record (metricsEvery, the first and the last),
  /// or both.
  bool line = true, record = true;
};

/// Receives what rank 0 reports. Called only on rank 0, from the thread
/// that runs the executor.
class RunObserver {
public:
  virtual ~RunObserver();
  virtual void onProgress(const Progress &) {}
  /// A plan `log`: a tag and named values.
  virtual void onLog(int64_t /*step*/, const std::string & /*tag*/,
                     const std::vector<std::pair<std::string, double>> &) {}
  /// A plan `print`: the line to show. A rank0_only print (the same on
  /// every rank) is reported by rank 0; any other by every rank that runs
  /// it, with `perRank` set, since its line or whether it runs may differ
  /// by rank.
  virtual void onPrint(int64_t /*step*/, const std::string & /*line*/,
                       bool /*perRank*/) {}
  /// A checkpoint written by rank 0 (or, sharded, by all ranks), and the
  /// seconds the save took (gathering, writing, syncing, publishing).
  virtual void onSave(int64_t /*step*/, const std::string & /*path*/,
                      double /*seconds*/) {}
  /// Training stopped early (`stop` in the hooks; not `fail`, which
  /// Executor::failure() reports).
  virtual void onExit(int64_t /*step*/, const std::string & /*reason*/) {}
  /// A step's hooks and progress report are done (after its onLog calls
  /// and its onProgress, if it had one; before onExit).
  virtual void onStepEnd(int64_t /*step*/) {}
};

struct ExecutorOptions {
  int rank = 0;
  /// This rank's number on its node (the plan's `local_rank`); -1: `rank`,
  /// as when every rank runs on one node.
  int localRank = -1;
  /// Steps to train; -1: the schedule's `steps` (an error for a constant
  /// schedule, which has none).
  int64_t steps = -1;
  /// Replaces the recipe's seed (initialisation and sampling).
  std::optional<int64_t> seed;
  /// A progress report every N steps (and after the first and the last);
  /// 0: none. Each report all-reduces the loss, so every rank must pass the
  /// same N.
  int64_t logEvery = 0;
  /// A metrics report every N steps (and after the first and the last),
  /// between the progress lines too; 0: none. The same on every rank.
  int64_t metricsEvery = 0;
  /// Rank 0's observer; ignored on other ranks.
  RunObserver *observer = nullptr;
  /// Checks every read of a scalar the host keeps a copy of against the
  /// device's bytes (an Internal error when they differ), at the cost of a
  /// wait for the device each time. mdrun sets it from the environment
  /// variable MD_VERIFY_HOST_SCALARS=1 (docs/runtime.md).
  bool verifyHostScalars = false;
  /// A sharded checkpoint directory to resume from; "auto": the newest
  /// complete one under the plan's sharded save directory (none: a fresh
  /// start, RunInfo::resumeNote says so); "": a fresh start.
  std::string resume;
  /// A safetensors file of parameters by name (PyTorch's
  /// `save_file(model.state_dict())`, md's full checkpoints and
  /// --save-final) to start from: weights only, a fresh optimizer at step 0.
  /// "": the recipe's initialisation.
  std::string init;
  /// The name map (runtime/exec/NameMap.h) through which `init`'s tensors
  /// are read; "": they carry md's names.
  std::string initMap;
  /// With `init`: a parameter the file lacks keeps its declared initialiser
  /// (PyTorch's load_state_dict(strict = False)) instead of failing the
  /// run; RunInfo::initWhat names those parameters.
  bool initMissing = false;
  /// Set (by a signal handler, say) to end the run after the current step,
  /// as a scheduler's preemption asks: at the end of every step the ranks
  /// agree on it (a 4-byte all-reduce, max), write the plan's first sharded
  /// save (else its first save) at that step unless the hooks just did, and
  /// stop; Executor::preempted() then says so. nullptr: not watched.
  const std::atomic<bool> *preempt = nullptr;
  /// Where the executor files every collective it runs and the step it is
  /// in (FlightRecorder.h); none when null. Not owned.
  FlightRecorder *recorder = nullptr;
  /// Where the executor files a slice per instruction, step, micro-step and
  /// hooks (TraceRecorder.h, `mdrun --trace`); none when null. Not owned.
  TraceRecorder *trace = nullptr;
};

/// A parameter as a full f32 tensor.
struct NamedTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;
};

/// A held-out evaluation of the plan run on its own (mdrun --evaluate).
struct Evaluation {
  std::string where;   // the evaluate's .mdl position, "file:line:col"
  std::string dataset; // "synthetic(seed = 1)", "tokens(data/val.bin)"
  double loss = 0;     // the mean over the data set and the ranks
};

/// The steps a run trains for: `steps` when it is >= 0, else the
/// schedule's `steps` (InvalidArgument for a constant schedule, which has
/// no end).
absl::StatusOr<int64_t> StepsToRun(const fb::Plan &plan, int64_t steps);

class Executor {
public:
  /// Checks that `backend` and `comm` fit the plan at `worldSize` (the comm's
  /// groups have the plan's sizes), opens the training data, allocates the
  /// arenas and initialises the state.
  static absl::StatusOr<std::unique_ptr<Executor>>
  Create(const plan::LoadedPlan &plan, int64_t worldSize, Backend &backend,
         Comm &comm, const ExecutorOptions &options);
  /// Create's check on a backend whose streams run concurrently, without
  /// a backend: "" when the plan's events order every conflict between its
  /// two streams at `worldSize`, else the first they leave unordered (or
  /// that there are too many to check). An error when the plan cannot be
  /// bound to `worldSize` or laid out. mdrun asks before it starts the CPU
  /// backend's comm thread.
  static absl::StatusOr<std::string>
  UnorderedStreams(const plan::LoadedPlan &plan, int64_t worldSize);
  ~Executor();
  Executor(const Executor &) = delete;
  Executor &operator=(const Executor &) = delete;

  /// Trains until the step count is reached or the hooks `exit`.
  absl::Status Run();
  /// One optimizer step followed by the hooks.
  absl::Status Step();

  /// Optimizer steps completed.
  int64_t stepsDone() const;
  /// Steps Run() trains for.
  int64_t stepsToRun() const;
  /// Whether the hooks ran `exit`.
  bool stopped() const;
  /// Whether the run stopped because ExecutorOptions::preempt was set.
  bool preempted() const;
  /// Why the run failed, when the hooks ran `fail("why")` (every rank
  /// after the same step: the condition is uniform); nullopt otherwise.
  std::optional<std::string> failure() const;
  /// This rank's loss of the last step (mean over its micro-steps).
  double lastLoss() const;
  const RunInfo &info() const;
  const ArenaLayout &layout() const;

  /// Every trainable parameter as a full f32 tensor, gathered from the
  /// shards of the master weights (a collective: every rank must call it).
  absl::StatusOr<std::vector<NamedTensor>> GatherParameters();
  /// GatherParameters, then rank 0 writes them to `path` as safetensors
  /// (by name, global shape, F32), atomically. A collective.
  absl::Status SaveFull(const std::string &path);

  /// Runs every `evaluate` of the plan's hooks once on the current
  /// weights, without training: each one's mean held-out loss, in program
  /// order (InvalidArgument when the plan has none). A collective.
  absl::StatusOr<std::vector<Evaluation>> Evaluate();

  /// The bytes of persistent buffer `buffer` on this rank (tests).
  absl::StatusOr<std::vector<uint8_t>> ReadBuffer(int32_t buffer);

private:
  class Impl;
  explicit Executor(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

} // namespace md::runtime

#endif // MD_RUNTIME_EXEC_EXECUTOR_H
