//===- Aliasing.h - which buffers of a plan share bytes ----------*- C++ -*-===//
//
// The one rule of which transient buffers take no bytes of their own, read
// by the executor's arena layout (runtime/exec/ArenaLayout.h) and by the
// memory report (Memory.h), so that what `mdrun --inspect` reports is what
// the executor allocates:
//  - a view's output aliases its source;
//  - a state_load's output aliases the state it reads, unless the state is
//    written while the loaded value is live. A write by a state_store of the
//    loaded buffer itself does not count: it stores what is already there
//    (an optimizer update done in place on the state).
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_PLAN_ALIASING_H
#define MD_RUNTIME_PLAN_ALIASING_H

#include <cstdint>
#include <vector>

#include "runtime/plan/plan_generated.h"

namespace md::plan {

/// Depth-first numbers of the instructions of the blocks that run (the step
/// block, then the hooks block): enter[b][i] numbers instruction i of block
/// b, exit[b][i] is the last number inside the blocks it runs. Blocks no
/// root reaches have no numbers (empty vectors).
struct ProgramOrder {
  std::vector<std::vector<int64_t>> enter, exit;

  static ProgramOrder Of(const fb::Plan &plan);
  /// A transient buffer's interval on the numbered axis, inclusive; false
  /// for a persistent buffer or one in a block that never runs.
  bool interval(const fb::Buffer &buffer, int64_t &start, int64_t &end) const;
};

/// For every buffer, the state its state_load output aliases, or -1 (not a
/// load, or a load that must copy). `plan` is verified.
std::vector<int32_t> AliasedStateLoads(const fb::Plan &plan,
                                       const ProgramOrder &order);

} // namespace md::plan

#endif // MD_RUNTIME_PLAN_ALIASING_H
