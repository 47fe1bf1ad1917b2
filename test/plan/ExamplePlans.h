//===- ExamplePlans.h - hand-built plans for tests and seed corpora -*- C++
//-*-===//
//
// Plans written with PlanBuilder the way the compiler will write them:
// a tiny fsdp-full MLP (all-gather before use, gradient accumulation in a
// micro-steps body, reduce-scatter, clipping, AdamW on the shard, hooks
// with a uniform if, an evaluation and a checkpoint), and a minimal plan.
// PlanLoaderTest mutates them into bad plans; md-plan-examples writes them
// to files for the fuzzer's seed corpus and the mdrun --inspect test.
//
//===----------------------------------------------------------------------===//

#ifndef MD_TEST_PLAN_EXAMPLEPLANS_H
#define MD_TEST_PLAN_EXAMPLEPLANS_H

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "runtime/plan/PlanBuilder.h"

namespace md::plan::examples {

struct TinyMlpOptions {
  int64_t pinnedWorldSize = 0; // Header.world_size
  int64_t globalBatch = 16;
  int64_t microBatch = 4;
};

/// Sizes of the tiny MLP: x f32[4, 8] -> Linear(8, 16) -> relu ->
/// Linear(16, 4) -> cross_entropy against y i32[4]. One unit of 212 elements.
struct TinyMlpShape {
  static constexpr int64_t kBatch = 4, kIn = 8, kHidden = 16, kClasses = 4;
  static constexpr int64_t kUnitNumel =
      kHidden * kIn + kHidden + kClasses * kHidden + kClasses;
};

/// The tiny fsdp-full MLP. Liveness is inferred, so the plan loads as is.
PlanBuilder TinyMlpPlan(const TinyMlpOptions &options = {});

/// The smallest plan the loader accepts: a `single` plan whose step block
/// only reads a batch, with no parameters and no hooks.
PlanBuilder MinimalPlan();

/// Named plans for seed corpora and tools: ("tiny-mlp", bytes), ...
std::vector<std::pair<std::string, std::vector<uint8_t>>> ExamplePlanFiles();

} // namespace md::plan::examples

#endif // MD_TEST_PLAN_EXAMPLEPLANS_H
