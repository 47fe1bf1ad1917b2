//===- TrainingPlans.h - plans that train, for the executor's tests -*- C++
//-*-===//
//
// PlanBuilder plans written instruction for instruction as md's passes
// lower a model (compare `mdc models/mlp.mdl --plan P --emit=mlir | md-opt
// --md-training-pipeline`): the state of each preset, the micro-steps body
// with gradient accumulation, the last micro-step with the gradient
// reduction, clipping through the shards' squared norms, the optimizer,
// `md.step + 1` as the optimizer's step, and hooks. Two models:
//
//   mlp     x f32[B, D] -> Linear(D, H) -> relu -> Linear(H, C)
//           -> cross_entropy(y i32[B]); one unit
//   bigram  idx i32[B, T] -> Embedding(V, V) -> cross_entropy(targets
//           i32[B, T]); one unit (a token model that can learn a Markov
//           chain exactly)
//
// under `single`, `ddp`, `zero1`, `fsdp-grad-op`, `fsdp-full` and
// `fsdp-hybrid` (full sharding inside shard groups, gradients then averaged
// across them), in f32 or with bf16 parameters (mixed precision: a bf16
// `params` state, f32 masters and reductions).
//
//===----------------------------------------------------------------------===//

#ifndef MD_TEST_PLAN_TRAININGPLANS_H
#define MD_TEST_PLAN_TRAININGPLANS_H

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "runtime/plan/PlanBuilder.h"

namespace md::plan::examples {

enum class Preset { Single, Ddp, Zero1, FsdpGradOp, FsdpFull, Hybrid };
const char *PresetName(Preset preset);

enum class Model { Mlp, Bigram };

struct TrainingPlanOptions {
  Model model = Model::Mlp;
  Preset preset = Preset::FsdpFull;
  // mlp: D, H, C; bigram: V (classes), T (seq).
  int64_t in = 8, hidden = 16, classes = 4, seq = 8;
  int64_t globalBatch = 16, microBatch = 4;
  int64_t pinnedWorldSize = 0;
  int64_t shardGroupSize = 2; // hybrid
  /// F32, or BF16 for mixed precision (ddp and fsdp-full).
  fb::DType paramDtype = fb::DType::F32;
  bool adamw = true; // else sgd with momentum 0.9
  double lr = 0.05;
  double weightDecay = 0.01;
  double clip = 1.0; // 0: no clipping
  fb::ScheduleKind schedule = fb::ScheduleKind::Cosine;
  int64_t warmup = 2, steps = 100;
  double minLr = 0.0;
  int64_t seed = 1337;
  /// The training data.
  fb::DataKind data = fb::DataKind::Synthetic;
  std::string dataPath;
  int64_t dataSeed = 0;
  fb::TailPolicy tail = fb::TailPolicy::Drop;
  // Hooks (0: none).
  int64_t logEvery = 0;   // loss all-reduced, logged "train"
  double exitAbove = 0;   // with logEvery: print and exit when the mean > it
  int64_t exitAtStep = 0; // exit after this step (a uniform condition)
  bool exitFails = false; // that exit is the recipe's fail("...")
  int64_t evalEvery = 0;  // evaluate on synthetic(seed = dataSeed + 1)
  int64_t evalBatches = 0;
  int64_t saveEvery = 0;
  bool saveSharded = false;
  std::string saveDir;
  int64_t saveKeep = 0; // the save's keep = K (0: every checkpoint stays)
};

/// The plan, liveness inferred; it loads as is.
PlanBuilder TrainingPlan(const TrainingPlanOptions &options = {});

/// Named training plans for mdrun's tests and demos ("train-mlp-fsdp",
/// bytes), written to files by md-plan-examples.
std::vector<std::pair<std::string, std::vector<uint8_t>>> TrainingPlanFiles();

} // namespace md::plan::examples

#endif // MD_TEST_PLAN_TRAININGPLANS_H
