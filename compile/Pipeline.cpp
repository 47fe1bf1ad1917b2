//===- Pipeline.cpp - md's training pipeline -----------------------------===//

#include "compile/Pipeline.h"
#include "passes/Passes.h"

#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

void md::buildTrainingPipeline(OpPassManager &pm,
                               const TrainingPipelineOptions &options) {
  // The passes land here one by one, in docs/passes.md's order.
  OpPassManager &model = pm.nest<ModelOp>();
  model.addPass(createWrapUnits());
  model.addPass(createSyncBatchNorm());
  // Before md-autodiff: the backward is derived from the fused ops.
  model.addPass(createFuse());
  model.addPass(createAutodiff());
  model.addPass(createApplyPlan());
  model.addPass(createMixedPrecision());
  // Folds what the plan made trivial: collectives over one rank (`single`,
  // W pinned to 1) and cast chains that cancel.
  model.addPass(mlir::createCanonicalizerPass());

  // --- After the step program exists: bucketing, schedule,
  // plan-memory. ---
  model.addPass(createBucketing());
  model.addPass(createSchedule());
  model.addPass(createVerifyCollectives({/*finalProgram=*/true}));
  PlanMemoryOptions memory;
  memory.maxMemory = options.maxMemory;
  model.addPass(createPlanMemory(memory));
}

void md::registerTrainingPipeline() {
  PassPipelineRegistration<>(
      "md-training-pipeline",
      "md's passes from the frontend's IR to the scheduled step program",
      [](OpPassManager &pm) { buildTrainingPipeline(pm); });
}
