//===- ArenaLayout.h - where every buffer of a plan lives -*- C++ -*-===//
//
// The executor allocates two arenas per rank: one for persistent buffers
// (state: master weights, moments, accumulators), laid out back to back, and
// one for transient buffers, whose offsets come from their liveness
// intervals: two buffers share bytes only when they are never live at the
// same time. Intervals are placed on one program-order axis: instructions
// are numbered depth first, a control instruction's number range covering
// the blocks it runs, so a buffer of an outer block that lives across a
// loop overlaps everything inside it. The assignment is greedy first fit,
// largest buffers first.
//
// Some buffers take no bytes of their own:
//  - a view's output aliases its source (at offset x element size);
//  - a state_load's output aliases the state it reads when nothing else
//    writes that state while the loaded value is live (otherwise it is a
//    copy): the rule of runtime/plan/Aliasing.h, which the memory report
//    shares;
//  - persistent buffers marked only_when_accumulating at A = 1.
//
// Flat all-gathers and reduce-scatters move |G| * ceil(N / |G|) elements,
// the padded layout of the comm (ShardLayout), so the full-size operand of
// each gets that capacity; the pad is the executor's to zero. An operand
// that cannot be padded in place (an alias) goes through a scratch buffer,
// sized here.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_EXEC_ARENALAYOUT_H
#define MD_RUNTIME_EXEC_ARENALAYOUT_H

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/plan/Loader.h"

namespace md::runtime {

enum class Placement : uint8_t {
  None,       // not allocated (only_when_accumulating at A = 1)
  Persistent, // `offset` bytes into the persistent arena
  Transient,  // `offset` bytes into the transient arena
  Alias,      // `offset` bytes into buffer `aliasOf` (never itself an alias)
};

struct BufferLayout {
  Placement placement = Placement::None;
  int64_t offset = 0;
  int32_t aliasOf = -1;
  /// Elements of the buffer at this world size.
  int64_t elements = 0;
  /// Bytes it may use from its start: its own size, or the padded size of a
  /// collective operand.
  int64_t capacity = 0;
  /// Transient: its interval on the program-order axis (inclusive).
  int64_t start = -1, end = -1;
};

struct ArenaLayout {
  std::vector<BufferLayout> buffers; // one per plan buffer
  int64_t persistentBytes = 0;
  int64_t transientBytes = 0;
  /// Bytes of the scratch buffer for collectives whose operands cannot be
  /// padded in place or that gather along an inner axis.
  int64_t scratchBytes = 0;
  /// Sum of the transient buffers' own bytes (what no reuse would take).
  int64_t transientUnshared = 0;
};

/// Lays out `plan` (verified) at `world` (bound).
absl::StatusOr<ArenaLayout> LayOutArenas(const plan::LoadedPlan &plan,
                                         const plan::WorldBinding &world);

/// `n` rounded up to kAllocAlignment.
int64_t AlignUp(int64_t n);

} // namespace md::runtime

#endif // MD_RUNTIME_EXEC_ARENALAYOUT_H
