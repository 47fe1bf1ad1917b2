//===- Memory.h - bytes per rank of a plan at a world size ------*- C++ -*-===//
//
// PerRankMemory is the memory model of a plan. For a plan mdc wrote it is
// the compiler's (docs/memory.md): every buffer carries the category mdc
// gave it, so `mdrun --inspect` reports what `mdc --explain` predicts. The
// rule, at world size W with A accumulation steps (a buffer's bytes are
// WorldBinding::bytes: numel or ceil(numel / |group|) elements times the
// dtype's size):
//
//   persistent buffers, allocated for the whole run, count in their
//   category; without one, by role:
//     params    = master + params + buffer roles
//     grad_acc  = grad_acc (only_when_accumulating: only when A > 1)
//     optimizer = exp_avg + exp_avg_sq + momentum
//   transient buffers, live in their block from instruction `first` to
//   `last` inclusive, take no bytes of their own when they alias another
//   buffer (views and aliasing state loads: Aliasing.h) or are host
//   scalars; the others count in their category, or without one as
//   comm_buffers when a collective (all_gather, reduce_scatter, all_reduce,
//   broadcast) reads or writes them and activations otherwise:
//     live(b, i)  = bytes of the transient buffers of block b live at i
//     inner(b, i) = the largest peak(c) over the blocks c that instruction i
//                   of block b runs (0 for none; a micro_steps body does not
//                   run when A = 1)
//     peak(b)     = max over i of live(b, i) + inner(b, i)
//     transient peak = max(peak(step block), peak(hooks block))
//   Each category's bytes are those at the transient peak (its first
//   occurrence in program order), so that they add up to `peak`.
//
// What both memory models share lives here too, free of MLIR, so that the
// compiler's analysis (passes/analysis/MemoryAnalysis.h) runs it on its IR:
// the categories' names, the sweep that sums live intervals by category
// (LiveBytes), the totals at the peak (MemoryTotals), the rows every
// report prints, in one order (MemoryRows), and how long a comm-stream
// instruction keeps its operands (StreamWindows), which the plan builder's
// liveness inference applies too.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_PLAN_MEMORY_H
#define MD_RUNTIME_PLAN_MEMORY_H

#include <array>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/plan/Loader.h"

namespace md::plan {

/// Bytes per category, indexed by fb::MemoryCategory.
using CategoryBytes =
    std::array<int64_t, static_cast<size_t>(fb::MemoryCategory::MAX) + 1>;

/// "params", "grads", "grad_acc", "optimizer", "activations",
/// "comm_buffers"; "host" and "unspecified" for the other two.
const char *MemoryCategoryName(fb::MemoryCategory category);

/// The per-rank bytes both reports print (mdc --explain, mdrun --inspect):
/// each category's bytes at the peak, which add up to `peak`.
struct MemoryTotals {
  int64_t params = 0;
  int64_t grads = 0;
  int64_t gradAcc = 0;
  int64_t optimizer = 0;
  int64_t activations = 0;
  int64_t commBuffers = 0;
  int64_t peak = 0;

  /// The totals of `bytes`: a buffer without a category counts as
  /// activations, host scalars not at all; `peak` is their sum. Fails when
  /// the sum overflows.
  static absl::StatusOr<MemoryTotals> Of(const CategoryBytes &bytes);
};

/// One row of a memory report.
struct MemoryRow {
  const char *name; // the JSON key and the text label
  int64_t bytes;
};
/// The rows every memory report prints, in its order: params, grads,
/// grad_acc, optimizer, activations, comm_buffers, peak.
std::array<MemoryRow, 7> MemoryRows(const MemoryTotals &totals);

/// The bytes one buffer holds from position `first` to `last` inclusive.
struct LiveInterval {
  int64_t first = 0;
  int64_t last = 0;
  fb::MemoryCategory category = fb::MemoryCategory::Activations;
  int64_t bytes = 0;
};

/// The bytes live at each of `positions` positions, by category: the sum of
/// the intervals that hold it. The sweep both memory models share; intervals
/// must lie in [0, positions). Fails when a sum overflows.
absl::StatusOr<std::vector<CategoryBytes>>
LiveBytes(int64_t positions, const std::vector<LiveInterval> &intervals);

/// What liveness reads of one instruction of a block: its stream, the event
/// it records and the events it waits for.
struct StreamEvents {
  int32_t stream = 0;  // 1: the comm stream
  int32_t record = -1; // -1: none
  std::vector<int32_t> waits;
};

/// How long an instruction of a block may touch its operands, as indices
/// into the block. An instruction on the compute stream touches them when
/// it runs: both are its own index. One on the comm stream runs after it is
/// issued and in the comm stream's order:
///  - it reads its inputs until `release`, the first later instruction that
///    waits for its event or that of a later comm-stream instruction, or
///    the block's end (`release` = the block's size) when none does;
///  - it may write its outputs from `start`, the instruction after the
///    latest event (recorded earlier in the block) that it or an earlier
///    comm-stream instruction waits for, or the block's first: it may start
///    that early, so its outputs must not share bytes with anything the
///    compute stream uses in between.
struct StreamWindow {
  int32_t start = 0;
  int32_t release = 0;
};

/// The window of every instruction of a block, the rule both liveness
/// inferences apply: PlanBuilder::inferLiveness on a plan and the
/// compiler's analysis on the IR (docs/memory.md, "Liveness").
std::vector<StreamWindow> StreamWindows(const std::vector<StreamEvents> &block);

struct MemoryReport : MemoryTotals {
  /// Where the transient peak is reached (the innermost block); -1 when the
  /// plan has no transient buffer.
  int32_t peakBlock = -1;
  int32_t peakInstruction = -1;
  /// Every buffer carries the compiler's category (a plan mdc wrote).
  bool compilerCategories = false;
};

/// Bytes per rank of `plan` at `worldSize` (bound with BindWorldSize, whose
/// errors it returns). Fails, rather than wrapping, when a sum overflows.
absl::StatusOr<MemoryReport> PerRankMemory(const LoadedPlan &plan,
                                           int64_t worldSize);

} // namespace md::plan

#endif // MD_RUNTIME_PLAN_MEMORY_H
