//===- Memory.h - bytes per rank of a plan at a world size ------*- C++ -*-===//
//
// PerRankMemory is the memory model of a plan, and `mdc --explain` must
// compute the same numbers from the IR. The rule, at world size W with A
// accumulation steps (a buffer's bytes are WorldBinding::bytes: numel or
// ceil(numel / |group|) elements times the dtype's size):
//
//   persistent buffers, by role, allocated for the whole run:
//     params    = master + params + buffer roles
//     grads     = grad_acc
//     optimizer = exp_avg + exp_avg_sq + momentum
//     (a buffer marked only_when_accumulating counts only when A > 1)
//   transient buffers, live in their block from instruction `first` to
//   `last` inclusive:
//     live(b, i)  = bytes of the transient buffers of block b live at i
//     inner(b, i) = the largest peak(c) over the blocks c that instruction i
//                   of block b runs (0 for none)
//     peak(b)     = max over i of live(b, i) + inner(b, i)
//     transient peak = max(peak(step block), peak(hooks block))
//   The output of a view aliases its source and takes no bytes of its own
//   (the loader checks that the source outlives it).
//   A transient buffer read or written by an all_gather, reduce_scatter,
//   all_reduce or broadcast is a comm buffer, every other one an activation;
//   `activations` and `commBuffers` are their bytes at the transient peak
//   (its first occurrence in program order), so that
//     peak = params + grads + optimizer + activations + commBuffers.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_PLAN_MEMORY_H
#define MD_RUNTIME_PLAN_MEMORY_H

#include <cstdint>

#include "absl/status/statusor.h"
#include "runtime/plan/Loader.h"

namespace md::plan {

struct MemoryReport {
  int64_t params = 0;
  int64_t grads = 0;
  int64_t optimizer = 0;
  int64_t activations = 0;
  int64_t commBuffers = 0;
  int64_t peak = 0;
  /// Where the transient peak is reached (the innermost block); -1 when the
  /// plan has no transient buffer.
  int32_t peakBlock = -1;
  int32_t peakInstruction = -1;
};

/// Bytes per rank of `plan` at `worldSize` (bound with BindWorldSize, whose
/// errors it returns). Fails, rather than wrapping, when a sum overflows.
absl::StatusOr<MemoryReport> PerRankMemory(const LoadedPlan &plan,
                                           int64_t worldSize);

} // namespace md::plan

#endif // MD_RUNTIME_PLAN_MEMORY_H
