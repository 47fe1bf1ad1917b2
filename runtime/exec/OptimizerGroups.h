//===- OptimizerGroups.h - per-parameter decay and lr scale -----*- C++ -*-===//
//
// With optimizer parameter groups (the recipe's `groups`), elements of one
// wrap unit's flat buffer take different weight decays and learning-rate
// scales: a unit packs parameters of several groups back to back, and a
// rank's shard of it can start in one parameter and end in another. The
// plan states each parameter's group (Param.group) and its offset in the
// unit; an update names its unit. Here the executor turns that into ranges
// of elements: each unit's ranges over its whole flat buffer once, at
// set-up, then the part of them a rank's shard covers, and it runs the
// backend's ordinary update once per range with that range's values. An
// update is elementwise, so the elements of a range get exactly the bits a
// parameter updated alone with its group's values gets, on any backend.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_EXEC_OPTIMIZERGROUPS_H
#define MD_RUNTIME_EXEC_OPTIMIZERGROUPS_H

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "runtime/core/Backend.h"
#include "runtime/plan/plan_generated.h"

namespace md::runtime {

/// Elements [begin, end) of a flat buffer (or of a shard of it) and the
/// values they are updated with.
struct OptimizerSegment {
  int64_t begin = 0, end = 0;
  double weightDecay = 0;
  double lrScale = 1;
  int32_t group = 0; // index into the plan's Optimizer.groups
};

/// For every unit of `plan`, ordered ranges that cover its flat buffer
/// [0, Unit.numel): each parameter's elements take its group's values,
/// adjacent parameters of one group share a range, and elements no
/// parameter holds (the padding) take the default group's. Empty when the
/// optimizer has no groups. `plan` is verified (groups and offsets in
/// range).
std::vector<std::vector<OptimizerSegment>>
UnitOptimizerSegments(const fb::Plan &plan);

/// One group of a plan's optimizer, for the banner and `--inspect`.
struct OptimizerGroupSummary {
  std::string name; // "default", or how the recipe selected it
  int64_t members = 0, numel = 0;
  double weightDecay = 0, lrScale = 1;
  /// `default: 50 params, 85,000 elements, weight_decay 0.1, lr_scale 1`.
  std::string str() const;
};

/// The groups of `plan`'s optimizer with their members; empty without.
std::vector<OptimizerGroupSummary>
SummarizeOptimizerGroups(const fb::Plan &plan);

/// The ranges of `unit` (from UnitOptimizerSegments) that elements
/// [offset, offset + length) cover, relative to `offset`; the last range
/// extends to `length` (the padding of the last shard).
std::vector<OptimizerSegment>
ShardOptimizerSegments(absl::Span<const OptimizerSegment> unit, int64_t offset,
                       int64_t length);

/// Runs `args`' update once per range of `segments` (from
/// ShardOptimizerSegments over the operands' elements) with the range's
/// weight decay and learning rate lr * lrScale, rounded to f32.
absl::Status RunGroupedUpdate(Backend &backend, const AdamWArgs &args,
                              absl::Span<const OptimizerSegment> segments);
absl::Status RunGroupedUpdate(Backend &backend, const SgdArgs &args,
                              absl::Span<const OptimizerSegment> segments);

} // namespace md::runtime

#endif // MD_RUNTIME_EXEC_OPTIMIZERGROUPS_H
