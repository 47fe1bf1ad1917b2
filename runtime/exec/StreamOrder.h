//===- StreamOrder.h - are a plan's streams ordered by its events? -*- C++ -*-===//
//
// A plan puts each instruction on a stream (compute or comm) and orders the
// streams with events: an instruction waits for events recorded by earlier
// instructions. On a GPU the two streams run concurrently, so every pair of
// instructions on different streams that touch the same bytes — one of them
// writing — must be ordered by a chain of events; otherwise the result
// depends on timing. The CPU backend runs everything in order and can never
// show such a race, so this check proves, on any machine, what a GPU run
// would otherwise reveal as wrong numbers.
//
// The check simulates the program with vector clocks: per stream, the
// position of each instruction; an event carries the recording stream's
// clock; a wait joins it. Bytes are those of the arena layout at the run's
// world size, so buffers that share bytes over time (disjoint liveness,
// views, aliased state loads) are checked too. Blocks that repeat (the step,
// micro-steps, loop and evaluation bodies) are walked twice, so that an
// iteration's late instructions are checked against the next one's early
// ones. Nothing the host does is assumed to order the streams: the executor
// may wait for a stream on the host, but the check does not rely on it.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_EXEC_STREAMORDER_H
#define MD_RUNTIME_EXEC_STREAMORDER_H

#include "absl/status/status.h"
#include "runtime/exec/ArenaLayout.h"
#include "runtime/plan/Loader.h"

namespace md::runtime {

/// OK when every cross-stream conflict is ordered by events; otherwise
/// FailedPrecondition naming the first unordered pair:
///   "blocks[0].instructions[57] (all_gather on stream 1) reads bytes that
///    blocks[0].instructions[40] (cast on stream 0) writes (buffers 12
///    'x' and 12 'x'), and no event orders them". ResourceExhausted when
/// the plan leaves more than 2e8 access pairs to compare (a plan without
/// events at all, of millions of instructions): the check's time is
/// bounded.
absl::Status CheckStreamOrder(const plan::LoadedPlan &plan,
                              const ArenaLayout &layout);
/// The same with another bound on the pairs compared (tests).
absl::Status CheckStreamOrder(const plan::LoadedPlan &plan,
                              const ArenaLayout &layout, int64_t maxPairs);

} // namespace md::runtime

#endif // MD_RUNTIME_EXEC_STREAMORDER_H
