//===- EmitPlan.h - the step program of a model as a plan.fb ----*- C++ -*-===//
//
// The last stage of mdc: lowers a model that md's training pipeline has run
// on (docs/passes.md) to the FlatBuffer plan mdrun executes
// (runtime/plan/plan.fbs, docs/plan-format.md). One md op becomes one
// instruction with the same operands in the same order; every SSA value a
// buffer, sized `full(n)` or `shard(n, group)`; md.state a persistent
// buffer; md.micro_steps, md.every, md.if, md.for and md.evaluate nested
// blocks. Each buffer carries the category md's memory analysis gave it
// (passes/analysis/MemoryAnalysis.h) and the aliasing the analysis assumes is
// made real (state loads, views and reshapes share their source's bytes,
// optimizer updates run in place), so `mdrun --inspect` reports the per-rank
// memory `mdc --explain` predicts. The emitted plan is verified with the
// runtime's loader before it is returned: mdc never writes a plan mdrun
// refuses.
//
//===----------------------------------------------------------------------===//

#ifndef MD_TARGET_PLAN_EMITPLAN_H
#define MD_TARGET_PLAN_EMITPLAN_H

#include "dialect/MdOps.h"

#include "mlir/Support/LLVM.h"

#include <cstdint>
#include <string>
#include <vector>

namespace md {

struct EmitPlanOptions {
  /// The .mdl file compiled (Header.source_file) and its text, whose hash
  /// goes in Header.source_hash.
  std::string sourceFile;
  std::string sourceText;
  /// Header.compiler_version.
  std::string compilerVersion;
};

/// The plan of `model`, which must have an md.train and have been through
/// md's training pipeline. Fails with a diagnostic at the op that cannot be
/// emitted.
mlir::FailureOr<std::vector<uint8_t>> emitPlan(ModelOp model,
                                               const EmitPlanOptions &options);

} // namespace md

#endif // MD_TARGET_PLAN_EMITPLAN_H
