//===- Pipeline.h - md's training pipeline ----------------------*- C++ -*-===//

#ifndef MD_COMPILE_PIPELINE_H
#define MD_COMPILE_PIPELINE_H

#include "mlir/Pass/PassManager.h"

#include <cstdint>

namespace md {

/// What a driver may set for the pipeline; the rest comes from the model
/// (its `#md.plan`, its `world_size`).
struct TrainingPipelineOptions {
  /// md-plan-memory fails when the predicted per-rank peak exceeds this
  /// many bytes (0: no limit).
  int64_t maxMemory = 0;
};

/// Adds md's passes, in docs/passes.md's order, to `pm` (which runs on the
/// builtin module holding one `md.model`).
void buildTrainingPipeline(mlir::OpPassManager &pm,
                           const TrainingPipelineOptions &options = {});

/// Registers `--md-training-pipeline` with md-opt.
void registerTrainingPipeline();

} // namespace md

#endif // MD_COMPILE_PIPELINE_H
