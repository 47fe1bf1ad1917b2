//===- ExecutorImpl.h - the executor's state, shared by its parts -*- C++
//-*-===//
//
// Private to the executor. Executor::Impl holds a rank's whole run: the
// arenas and a pointer and a TensorRef per plan buffer, the step counters,
// the host's scalar copies (HostScalars) and the data feeds (DataFeeds).
// Its member functions are defined by concern:
//   Executor.cpp             setup, memory, blocks and the step, batches
//                            and evaluations, the instruction switch
//   ExecutorCollectives.cpp  collectives, their grouping and their waits
//   ExecutorScalars.cpp      host scalars and the scalar instructions
//   ExecutorCheckpoints.cpp  gathering parameters, `save`, and loading a
//                            checkpoint to resume from
// The loader has verified every index, arity and operand type, so nothing
// here re-checks them; kernels still check shapes (OpChecks) and return
// errors.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_EXEC_EXECUTORIMPL_H
#define MD_RUNTIME_EXEC_EXECUTORIMPL_H

#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "runtime/exec/CheckpointMeta.h"
#include "runtime/exec/DataFeeds.h"
#include "runtime/exec/Executor.h"
#include "runtime/core/FlightRecorder.h"
#include "runtime/exec/HostScalars.h"
#include "runtime/exec/OptimizerGroups.h"
#include "runtime/exec/PlanAccess.h"
#include "runtime/core/TraceRecorder.h"
#include "runtime/plan/Schema.h"
#include "runtime/plan/World.h"

namespace md::runtime {

class Executor::Impl {
public:
  using Clock = std::chrono::steady_clock;

  Impl(const plan::LoadedPlan &plan, Backend &backend, Comm &comm,
       const ExecutorOptions &options);
  ~Impl();

  absl::Status init(int64_t worldSize);
  absl::Status step();
  absl::Status run();
  absl::StatusOr<std::vector<NamedTensor>> gatherParameters();
  absl::Status saveFull(const std::string &path);
  absl::StatusOr<std::vector<uint8_t>> readBuffer(int32_t buffer);
  absl::StatusOr<std::vector<Evaluation>> evaluateAll();

  RunInfo info_;
  ArenaLayout layout_;
  int64_t step_ = 0, steps_ = 0;
  bool stop_ = false;
  bool preempted_ = false; // stopped by ExecutorOptions::preempt
  /// The hooks ran `fail("why")`: the run ends after this step as failed,
  /// for failReason_ (the first failure of the step, if several ran).
  bool failed_ = false;
  std::string failReason_;
  double lastLoss_ = std::nan("");

private:
  // --- setup (Executor.cpp) ------------------------------------------------
  absl::Status checkComm();
  absl::Status allocate();
  absl::Status initState();
  void fillInfo();
  /// Values of elements [begin, begin + n) of unit `unit`'s flat buffer.
  std::vector<float> flatInit(int32_t unit, int64_t begin, int64_t n) const;
  double initValue(uint32_t param, int64_t element) const;

  // --- running (Executor.cpp) ----------------------------------------------
  absl::Status runBlock(int32_t block);
  absl::Status execute(const fb::Instruction &inst);
  // The families execute routes an instruction to.
  absl::Status executeKernel(const fb::Instruction &inst);
  absl::Status executeHostElementwise(const fb::Instruction &inst);
  absl::Status shardSlice(const fb::Instruction &inst);
  absl::Status executeStateOp(const fb::Instruction &inst);
  absl::Status executeRunValue(const fb::Instruction &inst);
  absl::Status executeOutput(const fb::Instruction &inst);
  absl::Status executeControl(const fb::Instruction &inst);
  absl::Status readBatch(const fb::Instruction &inst);
  absl::Status evaluate(const fb::Instruction &inst);
  absl::Status report();
  std::string where(int32_t block, uint32_t index) const;
  /// "step 3" or "hooks after step 2": where an error in `block` happened.
  std::string blockPrefix(const fb::Block &block) const;

  // --- collectives (ExecutorCollectives.cpp) -------------------------------
  /// Runs a collective instruction, through the flight recorder if any.
  absl::Status executeCollective(const fb::Instruction &inst);
  absl::Status dispatchCollective(const fb::Instruction &inst);
  /// A collective instruction as the flight recorder and the trace see it.
  FlightCall describeCollective(const fb::Instruction &inst) const;
  /// A collective of the executor's own (a progress report's mean loss,
  /// an evaluation's, an `every`'s clock) as the recorder keeps it: in the
  /// current step and micro-step, with no bucket and no location.
  FlightCall flightCall(Collective kind, const Group &g, DType dtype,
                        int64_t bytes) const;
  /// Runs `run` (one collective) as `call` in the flight recorder: started
  /// (or queued, on a stream-ordered comm) before, completed or failed
  /// after. Just `run` without a recorder.
  absl::Status recorded(const FlightCall &call,
                        absl::FunctionRef<absl::Status()> run);
  /// Tells the recorder where the rank is now (step and micro-step).
  void enterFlight(int64_t step, int32_t micro);

  // --- the trace (Executor.cpp) --------------------------------------------
  /// Files instruction `inst`, run from beginNs to endNs, in the trace:
  /// its slice, and flow arrows from the instructions of other streams
  /// whose events it waited for. `members` > 1: a group of collectives.
  void traceInstruction(const fb::Instruction &inst, int64_t beginNs,
                        int64_t endNs, uint32_t members = 1);
  /// Where the last record of each plan event happened (track, time), for
  /// the flow arrows; track -1: not yet.
  std::vector<std::pair<int, int64_t>> traceRecords_;
  struct GatherScatter;
  /// All-gather or reduce-scatter between a shard and its flat whole.
  absl::Status flatCollective(const fb::Instruction &inst,
                              const GatherScatter &c);
  /// All-gather or reduce-scatter of tensors along an axis.
  absl::Status tensorCollective(const fb::Instruction &inst,
                                const GatherScatter &c);
  /// The bucket of a collective the comm may launch in a group with its
  /// neighbours of the same bucket, or -1.
  int64_t groupableBucket(const fb::Instruction &inst) const;
  /// The end of the group of collectives starting at instruction `i`
  /// (i itself when there is none to form).
  uint32_t groupEnd(const fb::Block &block, uint32_t i) const;
  absl::Status runGroup(const fb::Block &block, uint32_t begin, uint32_t end);

  // --- host scalars (ExecutorScalars.cpp) ----------------------------------
  absl::Status executeScalar(const fb::Instruction &inst);
  absl::StatusOr<Scalar> readScalar(int32_t x, int64_t element = 0);
  absl::Status writeScalar(int32_t x, const Scalar &v);
  /// Every element of buffer x as a double (for `log` and `print`).
  absl::StatusOr<std::vector<double>> readValues(int32_t x);
  /// Keeps a host copy of the one-element buffer x, whose bytes the host
  /// has just written (`encoded`), for readScalar.
  void rememberScalar(int32_t x, const uint8_t *encoded);
  /// Drops the host copies that `inst` is about to overwrite.
  void forgetScalarsWrittenBy(const fb::Instruction &inst);

  // --- checkpoints (ExecutorCheckpoints.cpp) -------------------------------
  absl::Status save(const fb::Instruction &inst);
  /// ExecutorOptions::preempt, agreed by every rank at the end of a step.
  absl::Status checkPreemption();
  absl::Status saveSharded(const std::string &dir);
  /// The f32 master weights of every unit, whole, by unit (none for a unit
  /// without masters). A collective.
  absl::StatusOr<std::vector<std::optional<std::vector<float>>>> gatherUnits();
  /// ExecutorOptions::resume: the checkpoint directory to load, "" for
  /// none, with its meta.json read into `meta` and its files verified.
  /// "auto" is resolved on rank 0 and broadcast: the newest checkpoint
  /// whose meta.json reads and whose files verify (the damaged ones passed
  /// over are listed in RunInfo::resumeSkipped). A collective.
  absl::StatusOr<std::string> resolveResume(std::optional<ShardedMeta> *meta);
  /// Every file of the checkpoint `dir` at its size, and each file's
  /// checksum read on one rank; the lowest rank's finding is every rank's
  /// error, word for word. A collective.
  absl::Status verifySharded(const std::string &dir, const ShardedMeta &meta);
  /// Fills this rank's state from the verified checkpoint `dir` (meta.json
  /// read as `meta`), reading only the ranges it holds.
  absl::Status loadSharded(const std::string &dir, const ShardedMeta &meta);
  /// How long resolveResume took to read and verify the checkpoint loaded
  /// (the banner's load time counts it).
  double verifySeconds_ = 0;
  /// ExecutorOptions::init: this rank's master weights and working
  /// parameters from the safetensors file `path`, by parameter name.
  absl::Status loadWeights(const std::string &path);
  /// i64 values through the comm over the world, on the host.
  absl::Status broadcastInts(int64_t *values, int64_t n);
  /// Rank 0's outcome `mine` of a part of a save only it does, told to every
  /// rank: rank 0 gets `mine` back, the others an error that carries rank
  /// 0's message ("rank 0 could not <what>: ..."), so that whichever rank's
  /// failure reaches the user first names the cause.
  absl::Status shareRank0Outcome(const absl::Status &mine,
                                 absl::string_view what);
  absl::Status allGatherInts(const int64_t *mine, int64_t n,
                             std::vector<int64_t> *all);

  // --- memory (Executor.cpp) -----------------------------------------------
  const fb::Buffer &buf(int32_t x) const { return *plan_.buffers()->Get(x); }
  int64_t esize(int32_t x) const { return plan::DTypeSize(buf(x).dtype()); }
  int64_t bytes(int32_t x) const {
    return layout_.buffers[x].elements * esize(x);
  }
  const TensorRef &ref(int32_t x) const { return refs_[x]; }
  absl::Status toHost(void *dst, int32_t x, int64_t offset, int64_t n);
  absl::Status fromHost(int32_t x, const void *src, int64_t offset, int64_t n);
  absl::Status copyBuffer(int32_t dst, int32_t src, Stream stream);
  /// Waits for the comm stream to drain and files what it ran as completed
  /// in the flight recorder.
  absl::Status waitForComm();
  /// Copies or casts `n` f32 host values into buffer x (any float dtype).
  absl::Status storeFloats(int32_t x, const float *values, int64_t n);
  const Group &group(int64_t kind) const { return groups_[kind]; }

  plan::LoadedPlan loaded_;
  const fb::Plan &plan_;
  Backend &backend_;
  Comm &comm_;
  ExecutorOptions options_;
  plan::WorldBinding world_;
  LrSchedule schedule_;
  uint64_t seed_ = 0, samplerSeed_ = 0;
  Group groups_[3];

  Buffer persistent_, transient_, scratch_, control_;
  std::vector<char *> ptrs_;
  std::vector<TensorRef> refs_;
  /// Scalars the host wrote (the learning rate, the step, constants, scalar
  /// arithmetic) with their values, so that reading one back needs no wait
  /// for the device. An entry goes as soon as an instruction writes any of
  /// its bytes (views and reused arena bytes included). With
  /// ExecutorOptions::verifyHostScalars every hit is checked against the
  /// device.
  HostScalars hostScalars_;
  std::vector<Event> events_;
  /// With optimizer parameter groups: each unit's group ranges over its
  /// flat buffer, and the ranges of each update's operands on this rank
  /// (OptimizerGroups.h), made at set-up.
  std::vector<std::vector<OptimizerSegment>> unitSegments_;
  absl::flat_hash_map<const fb::Instruction *, std::vector<OptimizerSegment>>
      updateSegments_;
  absl::Status findUpdateSegments();

  std::unique_ptr<DataFeeds> feeds_; // once the world size is bound

  // Where the flight recorder files collectives: the step (1-based) and
  // micro-step (1-based; 0 in the hooks).
  int64_t flightStep_ = 0;
  int32_t flightMicro_ = 0;

  // Per step.
  int64_t micro_ = 0; // micro-steps done in this step
  double lossSum_ = 0;
  int64_t lossCount_ = 0;
  std::optional<double> gradNorm_;
  int64_t epoch_ = 0; // of the last training batch

  // Progress reports.
  Clock::time_point start_;
  Clock::time_point lastReport_;
  int64_t lastReportStep_ = 0;
  std::map<const fb::Instruction *, Clock::time_point> everyFired_;
  std::string stopReason_;
  int64_t lastSaveStep_ = -1; // the step of the last save, -1: none yet
};

} // namespace md::runtime

#endif // MD_RUNTIME_EXEC_EXECUTORIMPL_H
