//===- ExplainReport.h - what mdc --explain reports ------------*- C++ -*-===//
//
// The report of `mdc --explain` (and of md-opt's md-explain): the per-rank
// memory of the step program at a world size, the bytes its collectives
// send, the bucket table md-bucketing left on the model, the precision of
// casts and collectives, and the batch arithmetic. One computation, two
// renderings: text for people, JSON with stable keys for tools.
//
//===----------------------------------------------------------------------===//

#ifndef MD_PASSES_EXPLAINREPORT_H
#define MD_PASSES_EXPLAINREPORT_H

#include "passes/analysis/MemoryAnalysis.h"

#include "llvm/Support/raw_ostream.h"

#include <array>
#include <string>
#include <vector>

namespace md {

struct ExplainReport {
  std::string model;
  /// The plan's name, or "" without one.
  std::string plan;
  int64_t worldSize = 0;

  int64_t globalBatch = 0, microBatch = 0;
  /// Micro-steps per optimizer step: global_batch / (micro_batch × W).
  int64_t accumulationSteps = 0;
  /// Samples per optimizer step over all ranks (micro × A × W).
  int64_t effectiveBatch = 0;

  /// The model's parameters, trainable and frozen apart (tensors, elements).
  struct ParamCount {
    int64_t tensors = 0, elements = 0;
  };
  ParamCount trainable, frozen;

  MemoryReport memory;

  /// Bytes one rank sends per optimizer step, by kind of collective
  /// (indexed by CollectiveKind; a barrier, the last kind, sends none): the
  /// step's collectives once, those of md.micro_steps A − 1 times.
  std::array<int64_t, 4> bytesByKind{};

  struct Collective {
    std::string kind, group, dtype;
    std::optional<int64_t> bucket;
    /// Bytes sent by one rank each time it runs.
    int64_t bytesSent = 0;
    /// Times it runs per optimizer step.
    int64_t perStep = 1;
  };
  /// Every collective of the step program, in its order.
  std::vector<Collective> collectives;

  struct CastCount {
    std::string from, to;
    int64_t count = 0;
  };
  /// md.casts of the step program by (from, to), sorted.
  std::vector<CastCount> casts;

  struct Bucket {
    int64_t id = 0;
    std::string kind, group, dtype;
    std::vector<std::string> members;
    int64_t bytes = 0;
    double exposedUs = 0;
  };
  /// md-bucketing's `md.bucket_table`, empty without one.
  std::vector<Bucket> buckets;

  /// The plan options kept beside #md.plan (dialect/PlanOptions.h),
  /// each reported only when the plan sets it, so that a plan at the
  /// defaults reports what it always did.
  struct Link {
    std::string name;
    double alphaUs = 0, betaGBps = 0;
  };
  std::optional<Link> interconnect;
  struct InflightLimit {
    int64_t limit = 0;
    /// Bytes of the largest unit's gathered parameters: each all-gather
    /// allowed in flight ahead of compute can hold this much more.
    int64_t largestGatherBytes = 0;
    /// Gathered units live at the peak, and their bytes.
    int64_t gatheredAtPeak = 0, gatheredBytesAtPeak = 0;
  };
  std::optional<InflightLimit> inflightAllGathers;
  struct ShardedAccumulation {
    /// Per-rank bytes of the f32 accumulators, full (local) and sharded.
    int64_t localBytes = 0, shardedBytes = 0;
    /// Bytes one rank sends per optimizer step in the reduce-scatters of the
    /// A − 1 earlier micro-steps, which local accumulation does not run.
    int64_t addedBytesSent = 0;
    /// Those reduce-scatters per optimizer step.
    int64_t addedCollectives = 0;
  };
  std::optional<ShardedAccumulation> shardedAccumulation;

  struct OptimizerGroup {
    std::string name; // "default", or how the recipe selected it
    int64_t members = 0, numel = 0;
    double weightDecay = 0, lrScale = 1;
  };
  /// The optimizer's parameter groups (the default first); empty without.
  std::vector<OptimizerGroup> optimizerGroups;
};

/// The report for `model` at world size `worldSize`. Fails with a
/// diagnostic when the batch does not split into whole micro-steps at W or
/// a buffer cannot be sized.
mlir::FailureOr<ExplainReport> computeExplainReport(ModelOp model,
                                                    int64_t worldSize);

void printExplainText(const ExplainReport &report, llvm::raw_ostream &os);
void printExplainJson(const ExplainReport &report, llvm::raw_ostream &os);

/// Every buffer of `memory`, one a line: its position interval, bytes,
/// category and what it is; `*` marks those live at the peak.
void printMemoryBuffers(const MemoryReport &memory, llvm::raw_ostream &os);

} // namespace md

#endif // MD_PASSES_EXPLAINREPORT_H
