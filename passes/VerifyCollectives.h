//===- VerifyCollectives.h - the static desync check ------------*- C++ -*-===//
//
// The checks of `md-verify-collectives` as a library: `checkDesync` returns
// structured findings (a rule, a location, notes, a fix) that the pass turns
// into MLIR diagnostics and `mdc --check` into text, JSON or SARIF; and
// `computeCollectiveSequence` lists the collectives of a step program in
// the order every rank runs them. docs/check.md describes both.
//
//===----------------------------------------------------------------------===//

#ifndef MD_PASSES_VERIFYCOLLECTIVES_H
#define MD_PASSES_VERIFYCOLLECTIVES_H

#include "dialect/MdOps.h"
#include "passes/analysis/RankVariance.h"

#include <string>

namespace md {

/// The ways ranks can disagree; each is a rule of docs/check.md.
enum class DesyncRule {
  Branch,     // communicates under a rank-varying condition
  Loop,       // communicates in a loop with a rank-varying trip count
  Stop,       // stops training under a rank-varying condition
  Rank0Only,  // communicates in a body only rank 0 runs
  Shape,      // a collective operand whose shape varies between ranks
  Parameters, // a parameter used under rank-varying control
};

/// The stable id of a rule ("desync/branch"), for JSON, SARIF and docs.
llvm::StringRef getDesyncRuleId(DesyncRule rule);
/// One line on what the rule rejects.
llvm::StringRef getDesyncRuleSummary(DesyncRule rule);
/// Every rule, in id order.
llvm::ArrayRef<DesyncRule> getDesyncRules();

struct DesyncNote {
  mlir::Location loc;
  std::string message;
};

/// One reason the program can hang. `loc` is the op that communicates (or
/// the call, `evaluate`, `save`, `stop` that contains or implies it);
/// `notes` explain the chain from the varying source to the control op and
/// name what communicates inside; `fix` suggests the rewrite.
struct DesyncFinding {
  DesyncRule rule;
  mlir::Location loc;
  std::string message;
  llvm::SmallVector<DesyncNote> notes;
  std::string fix;
  /// A finding in a program md's passes wrote, not the user.
  bool internal = false;
};

struct DesyncCheckOptions {
  /// Findings in `md.train`'s step program are internal errors.
  bool finalProgram = false;
};

/// Every finding of `model`, in program order. Empty when the model is
/// pinned to one rank.
llvm::SmallVector<DesyncFinding>
checkDesync(ModelOp model, const RankVariance &variance,
            const DesyncCheckOptions &options = {});

/// Reports `finding` as an error with notes through MLIR's diagnostics.
void emitDesyncFinding(const DesyncFinding &finding);

/// The group sizes at which the sequence samples the bytes of a collective
/// whose group size is symbolic in W.
llvm::ArrayRef<int64_t> getSampleGroupSizes();

/// One collective of a step program.
struct CollectiveSeqEntry {
  mlir::Operation *op;
  CollectiveKind kind;
  Group group;
  std::optional<ReductionKind> reduction;
  /// The group sizes the bytes are given at: the group's size when the
  /// model pins it, else getSampleGroupSizes().
  llvm::SmallVector<int64_t> groupSizes;
  /// Bytes one rank sends at each of `groupSizes`; std::nullopt where the
  /// operand is a shard whose size its type does not tell.
  llvm::SmallVector<std::optional<int64_t>> bytesSent;
  /// Where it runs: "step", "micro-steps" (A - 1 times per step), with
  /// "@f/" prefixes for the callees it sits in.
  std::string where;
};

/// The collectives of a step program, in the order every rank runs them.
struct CollectiveSeq {
  llvm::SmallVector<CollectiveSeqEntry> entries;
  void print(llvm::raw_ostream &os) const;
};

/// Lists the collectives of `train`'s step program in program order,
/// following md.micro_steps and calls. Fails, reporting through MLIR
/// diagnostics, when the sequence could differ between ranks: a collective
/// under rank-varying control or with a rank-varying operand shape.
mlir::FailureOr<CollectiveSeq>
computeCollectiveSequence(TrainOp train, const RankVariance &variance);

} // namespace md

#endif // MD_PASSES_VERIFYCOLLECTIVES_H
