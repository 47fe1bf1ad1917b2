//===- MemoryAnalysis.h - per-rank buffers of the step ----------*- C++ -*-===//
//
// The memory analysis md-plan-memory, mdc --explain and the plan emitter
// share: every buffer of the step program and of the hooks after it (an
// evaluation's forward included, as the emitter writes it) at a world size
// W, its size, its category and its liveness interval, and the per-rank
// peak. It adapts the
// IR to the one memory model of runtime/plan/Memory.h, which mdrun --inspect
// runs on the emitted plan: the categories are the plan's, the bytes live at
// each position are summed by its sweep (LiveBytes) and the totals at the
// peak are its MemoryTotals, so the two reports cannot drift apart.
// docs/memory.md states the rules and works an example byte by byte.
//
//===----------------------------------------------------------------------===//

#ifndef MD_PASSES_ANALYSIS_MEMORYANALYSIS_H
#define MD_PASSES_ANALYSIS_MEMORYANALYSIS_H

#include "dialect/MdOps.h"
#include "runtime/plan/Memory.h"

#include "mlir/Support/LLVM.h"

#include <vector>

namespace md {

/// What a buffer holds, for the report (docs/memory.md, "Categories"): the
/// plan's categories, which the emitter writes as they are. The analysis
/// gives every buffer one of Params, Grads, GradAcc, Optimizer, Activations
/// and CommBuffers.
using MemoryCategory = fb::MemoryCategory;

/// "params", "grads", "grad_acc", "optimizer", "activations", "comm_buffers".
llvm::StringRef stringifyMemoryCategory(MemoryCategory category);

/// One buffer: an md.state (persistent, live throughout the step) or the
/// value an op allocates, with the values that alias it (views, reshapes).
struct BufferInterval {
  /// The md.state, or the op defining the value.
  mlir::Operation *op = nullptr;
  /// The value; null for an md.state.
  mlir::Value value;
  int64_t bytes = 0;
  MemoryCategory category = MemoryCategory::Activations;
  bool persistent = false;
  /// First and last position live, inclusive, in the step's linear order
  /// (MemoryReport::positions); the whole step for an md.state.
  int64_t start = 0, end = 0;
};

/// The per-rank bytes of the step program at one world size: the bytes by
/// category at the peak, which add up to `peak` (the most bytes live at
/// once, persistent state included), and how the analysis got there.
struct MemoryReport : plan::MemoryTotals {
  int64_t worldSize = 0;
  /// ZeRO's model states (docs/memory.md): the persistent params and
  /// optimizer states and the reduced gradients the optimizer consumes.
  int64_t modelStateParams = 0, modelStateGrads = 0, modelStateOptimizer = 0;
  int64_t modelStates() const {
    return modelStateParams + modelStateGrads + modelStateOptimizer;
  }
  /// Bytes of the md.states, live at every position.
  int64_t persistent = 0;
  /// Where the peak is first reached, or -1 (and null) when the step has no
  /// transient buffer.
  int64_t peakPosition = -1;
  mlir::Operation *peakOp = nullptr;
  /// Every buffer: the md.states in model order, then the values of the step
  /// in their order.
  std::vector<BufferInterval> buffers;
  /// The buffers (indices into `buffers`) live at the peak, largest first.
  std::vector<size_t> liveAtPeak;
  /// The number of positions of the linear order.
  int64_t positions = 0;
};

/// The number of ranks in `group` at world size `worldSize` (Mesh.h): world
/// is W, shard the model's shard_group_size (W without one), replicate
/// W / shard, or at least 1 when the shard group does not divide W (the
/// emitter's analysis at W = 1); 0 for W < 1.
int64_t getGroupSize(ModelOp model, Group group, int64_t worldSize);

/// The per-rank bytes of `value` at world size `worldSize`: a static tensor
/// its elements times their size, a `tensor<?xT>` shard of N elements over
/// group G `ceil(N / |G|)` elements. Fails (with no diagnostic) on a value
/// whose size cannot be told.
mlir::FailureOr<int64_t> getValueBytes(ModelOp model, mlir::Value value,
                                       int64_t worldSize);

/// The micro-steps per optimizer step at world size `worldSize`: A =
/// global_batch / (micro_batch × W), 1 without an md.train. Fails with a
/// diagnostic on md.train when the batch does not split evenly.
mlir::FailureOr<int64_t> getAccumulationSteps(ModelOp model, int64_t worldSize);

/// The buffers of the step program of `model` and of its hooks at world
/// size `worldSize`, and their peak. Fails with a diagnostic when a buffer cannot be sized.
/// Reads md.stream/md.record/md.wait when md-schedule has run: a collective
/// on the comm stream keeps its operands until an op waits for it. With one
/// micro-step per step (A = 1) the grad_acc states are not allocated and the
/// md.micro_steps body does not run.
mlir::FailureOr<MemoryReport> computeMemory(ModelOp model, int64_t worldSize);

} // namespace md

#endif // MD_PASSES_ANALYSIS_MEMORYANALYSIS_H
