//===- Pipeline.h - md's training pipeline ----------------------*- C++ -*-===//

#ifndef MD_PASSES_PIPELINE_H
#define MD_PASSES_PIPELINE_H

#include "mlir/Pass/PassManager.h"

namespace md {

/// Adds md's passes, in docs/passes.md's order, to `pm` (which runs on the
/// builtin module holding one `md.model`).
void buildTrainingPipeline(mlir::OpPassManager &pm);

/// Registers `--md-training-pipeline` with md-opt.
void registerTrainingPipeline();

} // namespace md

#endif // MD_PASSES_PIPELINE_H
