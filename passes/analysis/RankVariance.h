//===- RankVariance.h - which values and ops differ between ranks -*- C++
//-*-===//
//
// The rank-variance analysis of md's desync checker (docs/check.md). A
// sparse forward data-flow analysis over a whole `md.model` (the forward,
// the user blocks through `md.call`, the step program and the hooks of
// `md.train`) computes, for every SSA value, whether it can differ between
// the ranks of an SPMD job (`varying`) or is the same on every rank
// (`uniform`), and separately whether its *shape* can differ. On top of it,
// RankVariance answers the questions the checker asks: does this op run on
// some ranks only (under a rank-varying `md.if`, `md.for` or a rank0_only
// body), and why does this value vary (the chain from `md.rank`, the local
// loss, the wall clock, ... to the value).
//
//===----------------------------------------------------------------------===//

#ifndef MD_PASSES_ANALYSIS_RANKVARIANCE_H
#define MD_PASSES_ANALYSIS_RANKVARIANCE_H

#include "dialect/MdOps.h"

#include "mlir/Analysis/DataFlow/SparseAnalysis.h"
#include "mlir/Analysis/DataFlowFramework.h"

#include <memory>
#include <string>

namespace md {

/// The lattice value: {uninitialized < uniform < varying} for the value and,
/// independently, for its shape (only meaningful for dynamically shaped
/// tensors: every static shape is uniform). Join is the maximum of each.
class Variance {
public:
  Variance() = default;
  static Variance uniform() { return Variance(true, false, false); }
  static Variance varyingValue() { return Variance(true, true, false); }
  static Variance varyingValueAndShape() { return Variance(true, true, true); }
  static Variance get(bool varying, bool shapeVarying) {
    return Variance(true, varying, shapeVarying);
  }

  bool isUninitialized() const { return !initialized; }
  bool isVarying() const { return varying; }
  bool isShapeVarying() const { return shapeVarying; }

  static Variance join(const Variance &lhs, const Variance &rhs) {
    if (!lhs.initialized)
      return rhs;
    if (!rhs.initialized)
      return lhs;
    return Variance(true, lhs.varying || rhs.varying,
                    lhs.shapeVarying || rhs.shapeVarying);
  }
  bool operator==(const Variance &rhs) const {
    return initialized == rhs.initialized && varying == rhs.varying &&
           shapeVarying == rhs.shapeVarying;
  }
  void print(llvm::raw_ostream &os) const;

private:
  Variance(bool initialized, bool varying, bool shapeVarying)
      : initialized(initialized), varying(varying), shapeVarying(shapeVarying) {
  }

  bool initialized = false;
  bool varying = false;
  bool shapeVarying = false;
};

using VarianceLattice = mlir::dataflow::Lattice<Variance>;

/// The transfer functions (RankVariance.cpp documents the sources). Load it
/// into a DataFlowSolver next to DeadCodeAnalysis and
/// SparseConstantPropagation; RankVariance below does that.
class RankVarianceAnalysis
    : public mlir::dataflow::SparseForwardDataFlowAnalysis<VarianceLattice> {
public:
  using SparseForwardDataFlowAnalysis::SparseForwardDataFlowAnalysis;

  mlir::LogicalResult initialize(mlir::Operation *top) override;
  mlir::LogicalResult visit(mlir::ProgramPoint *point) override;
  mlir::LogicalResult
  visitOperation(mlir::Operation *op,
                 llvm::ArrayRef<const VarianceLattice *> operands,
                 llvm::ArrayRef<VarianceLattice *> results) override;
  void
  visitNonControlFlowArguments(mlir::Operation *op,
                               const mlir::RegionSuccessor &successor,
                               llvm::ArrayRef<VarianceLattice *> argLattices,
                               unsigned firstIndex) override;
  void setToEntryState(VarianceLattice *lattice) override;

protected:
  void
  visitCallableOperation(mlir::CallableOpInterface callable,
                         llvm::ArrayRef<mlir::dataflow::AbstractSparseLattice *>
                             argLattices) override;

private:
  /// Results of region ops whose control operands vary vary too.
  void joinControlDependence(mlir::Operation *op);
};

/// Why an op runs on some ranks only.
struct NonUniformControl {
  enum class Kind {
    Branch,    // an `md.if` whose condition varies
    Loop,      // an `md.for` whose bounds vary
    Rank0Only, // the body of an `md.every ... rank0_only`
    Region,    // another region op with a varying operand
  };
  Kind kind;
  /// The control op (md.if, md.for, md.every, ...).
  mlir::Operation *op = nullptr;
  /// The varying condition or bound; null for Rank0Only.
  mlir::Value cause;
};

/// One link of the chain that explains why a value varies, source first.
struct VarianceStep {
  mlir::Location loc;
  std::string message;
};

/// What makes a value vary, at the end of the chain.
enum class VarianceSource {
  Rank,       // md.rank, md.local_rank
  Loss,       // md.loss: this rank's loss
  WallTime,   // md.wall_time
  FileExists, // md.file_exists
  Data,       // md.batch, the forward's arguments: this rank's micro-batch
  Shard, // md.shard_slice, md.reduce_scatter, sharded state: this rank's shard
  Unknown, // an argument of unknown origin, an unknown op
};

/// The analysis run over one op (normally an `md.model`), and the queries
/// the desync checker makes. Construct it once per model; usable as a pass
/// analysis (`getAnalysis<RankVariance>()`).
class RankVariance {
public:
  explicit RankVariance(mlir::Operation *root);
  ~RankVariance();

  /// Whether the solver reached a fixpoint (it fails only on malformed IR).
  bool succeeded() const { return ok; }

  bool isVarying(mlir::Value value) const;
  /// Whether the value's shape can differ between ranks: a dynamically
  /// shaped tensor whose size comes from a rank-varying value.
  bool isShapeVarying(mlir::Value value) const;
  /// Whether the block can execute at all (`md.if false { ... }` cannot).
  bool isLive(mlir::Block *block) const;

  /// The innermost enclosing control op, inside `op`'s own function or
  /// `md.train` region, that makes `op` run on some ranks only.
  std::optional<NonUniformControl>
  getNonUniformControl(mlir::Operation *op) const;
  /// Every such control op, innermost first.
  llvm::SmallVector<NonUniformControl>
  getNonUniformControls(mlir::Operation *op) const;

  /// Why `value` (or, with `shape`, its shape) varies: from the source
  /// (`md.rank`, `md.loss`, ...) to `value`, following operands, `md.if`
  /// conditions and yields, call arguments and returns. Steps that share a
  /// location are merged; at most `maxSteps`, the middle elided.
  llvm::SmallVector<VarianceStep> explain(mlir::Value value, bool shape = false,
                                          unsigned maxSteps = 8) const;
  /// The kind of source `explain` ends at.
  VarianceSource getSource(mlir::Value value, bool shape = false) const;

private:
  const VarianceLattice *lookup(mlir::Value value) const;
  /// The value that makes `value` vary: an operand, a yield, a condition, a
  /// call-site argument, ...; null at a source. `step` says how.
  mlir::Value getVaryingInput(mlir::Value value, bool shape, std::string &step,
                              mlir::Location &loc) const;

  std::unique_ptr<mlir::DataFlowSolver> solver;
  bool ok = false;
};

/// Whether the integer comparison `cmp` has the same outcome on every rank
/// because of what the ranks' numbers are: `rank` and `local_rank` are in
/// [0, W), `world_size` is W >= 1, so `rank >= 0`, `rank < world_size` and
/// `rank % 2 < 2` always hold. Bounds are affine in W and follow `+`, `-`,
/// `*` by a constant and `%` by a positive constant; nullopt when they do
/// not decide it.
std::optional<bool> decideByRankRanges(mlir::Operation *cmp);

/// The value of `a - b`, `a xor b` or a comparison of `a` and `b` when both
/// read the same number of the run (`rank - rank` is 0, `rank == rank`
/// true: the frontend reads `rank` once per use, so constant folding alone
/// does not see it); nullopt otherwise.
std::optional<int64_t> foldSameNumber(mlir::Operation *op);

/// Whether the two arms of an `md.if` communicate alike: each has a then
/// and an else, and the ops in them that communicate or stop (collectives,
/// saves, evaluations, calls that communicate, `stop`), none with regions,
/// are the same ops with the same attributes and operand types, in the same
/// order. Every rank then runs the same sequence whichever arm it takes.
bool armsCommunicateAlike(IfOp ifOp);

/// A short description of a source op of variance, in the words of the
/// `.mdl` language where the op comes from a hook ("'rank' differs between
/// ranks"); empty if `op` is not a source.
std::string describeVarianceSource(mlir::Operation *op);

} // namespace md

#endif // MD_PASSES_ANALYSIS_RANKVARIANCE_H
