//===- Pipeline.cpp - md's training pipeline -----------------------------===//

#include "passes/Pipeline.h"
#include "passes/Passes.h"

#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

void md::buildTrainingPipeline(OpPassManager &pm) {
  // The passes land here one by one, in docs/passes.md's order.
  OpPassManager &model = pm.nest<ModelOp>();
  model.addPass(createSyncBatchNorm());
  model.addPass(createAutodiff());
  model.addPass(createApplyPlan());
  model.addPass(createMixedPrecision());
}

void md::registerTrainingPipeline() {
  PassPipelineRegistration<>(
      "md-training-pipeline",
      "md's passes from the frontend's IR to the scheduled step program",
      [](OpPassManager &pm) { buildTrainingPipeline(pm); });
}
