//===- Pipeline.cpp - md's training pipeline -----------------------------===//

#include "passes/Pipeline.h"
#include "passes/Passes.h"

#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

void md::buildTrainingPipeline(OpPassManager &pm) {
  OpPassManager &model = pm.nest<ModelOp>();
  model.addPass(createSyncBatchNorm());
  model.addPass(createApplyPlan());
  model.addPass(createMixedPrecision());
  model.addPass(createVerifyCollectives({/*finalProgram=*/true}));
}

void md::registerTrainingPipeline() {
  PassPipelineRegistration<>(
      "md-training-pipeline",
      "md's passes from the frontend's IR to the scheduled step program",
      [](OpPassManager &pm) { buildTrainingPipeline(pm); });
}
