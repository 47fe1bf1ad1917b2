//===- StepProgram.h - the step program: blocks, dependences -*- C++ -*-===//
//
// What md-bucketing, md-schedule and md-plan-memory share about the step
// program md-apply-plan builds (docs/passes.md): where it is, which
// collectives reduce gradients, and which ops of a block must stay ordered.
//
//===----------------------------------------------------------------------===//

#ifndef MD_PASSES_ANALYSIS_STEPPROGRAM_H
#define MD_PASSES_ANALYSIS_STEPPROGRAM_H

#include "dialect/MdOps.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallVector.h"

namespace md {

/// The block of the `step` region of the model's md.train, or null when the
/// model has no md.train.
mlir::Block *getStepBlock(ModelOp model);

/// Erases the ops of `region` (nested ones included) that nothing uses and
/// that have no effect, users before their operands.
void eraseDeadOps(mlir::Region &region);

/// Whether `op` reduces a wrap unit's gradient: a reduce_scatter or
/// all_reduce (sum or avg) of a 1-D buffer that comes, through casts and
/// earlier reductions, from an md.flatten or md.grad_total. The clipping
/// norm's all_reduce of a scalar is not one.
bool isGradientReduction(mlir::Operation *op);

/// The md.unit of `op`, or -1.
int64_t getUnit(mlir::Operation *op);

/// The `md.phase` of an all-gather ("forward", "backward", "step"), or "".
llvm::StringRef getPhase(mlir::Operation *op);

/// What a 1-D shard `tensor<?xT>` is a shard of: `numel` elements split
/// over `group`, `ceil(numel / |group|)` per rank.
struct ShardInfo {
  int64_t numel;
  Group group;
};

/// The flat buffer a dynamically shaped value is a shard of, found from the
/// op that defines it: a sharded md.state's `shard(N) group G`, the input of
/// a reduce_scatter or md.shard_slice, and through every other op (casts,
/// elementwise and optimizer ops, all_reduce) its first shard operand.
std::optional<ShardInfo> getShardInfo(mlir::Value value);

/// The persistent state (md.state and the data cursor) an op reads and
/// writes, and whether it communicates or has effects md does not model.
struct OpAccess {
  /// md.state symbols, "<batch>" (the data cursor), "<loss>" (the step's
  /// loss), "<host>" (host I/O) or "*" (anything).
  llvm::SmallVector<llvm::StringRef, 2> reads, writes;
  /// A collective is inside (or is) the op.
  bool communicates = false;
  /// The op communicates without being a collective: collectives in its
  /// regions, or a save or evaluation. It keeps its place relative to every
  /// collective.
  bool holdsCommunication = false;
  /// The op has effects md does not model: it keeps its place relative to
  /// every op with an effect, collectives included.
  bool opaque = false;

  bool hasEffects() const {
    return communicates || opaque || !reads.empty() || !writes.empty();
  }
};

/// The accesses of `op` and of every op nested in it.
OpAccess getAccess(mlir::Operation *op);

/// Whether two ops must keep their relative order because of their
/// accesses: one writes what the other reads or writes, or either is opaque
/// and the other has an effect. Two collectives never conflict: their order
/// is the schedule's to choose, and it chooses it from the IR alone, so
/// every rank issues them in the same order. An op holding communication
/// conflicts with every collective.
bool accessesConflict(const OpAccess &a, const OpAccess &b);

/// The dependences between the ops of one block: an op depends on the ops
/// of the block that define its operands (or operands of ops nested in it)
/// and on earlier ops whose accesses conflict with its own. The program
/// order of the block is a topological order of this graph.
class BlockDependences {
public:
  explicit BlockDependences(mlir::Block &block);

  llvm::ArrayRef<mlir::Operation *> getOps() const { return ops; }
  unsigned size() const { return ops.size(); }
  /// The position of `op` (an op of the block) in program order.
  unsigned indexOf(mlir::Operation *op) const { return index.lookup(op); }
  bool contains(mlir::Operation *op) const { return index.count(op); }
  llvm::ArrayRef<unsigned> getPredecessors(unsigned i) const {
    return preds[i];
  }
  llvm::ArrayRef<unsigned> getSuccessors(unsigned i) const { return succs[i]; }
  const OpAccess &getAccessAt(unsigned i) const { return accesses[i]; }

private:
  llvm::SmallVector<mlir::Operation *> ops;
  llvm::DenseMap<mlir::Operation *, unsigned> index;
  llvm::SmallVector<llvm::SmallVector<unsigned, 4>> preds, succs;
  llvm::SmallVector<OpAccess> accesses;
};

} // namespace md

#endif // MD_PASSES_ANALYSIS_STEPPROGRAM_H
