//===- Checksum.h - a plan file's own checksum -------------------*- C++ -*-===//
//
// A plan carries the XXH3-64 of its own bytes in Plan.checksum (appended to
// the root table; docs/plan-format.md, "Checksum"): the hash of the whole
// file with the field's 8 bytes read as zero. PlanBuilder writes it, the
// loader checks it before anything else reads the plan, so that a plan
// whose bytes changed after mdc wrote it (a disk's fault, an edit, a
// mutation) is refused naming both checksums instead of training to other
// weights. Plans of an mdc before it have no such field and load as before.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_PLAN_CHECKSUM_H
#define MD_RUNTIME_PLAN_CHECKSUM_H

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace md::plan {

/// Where a plan's checksum field lies, read from its root table through
/// the FlatBuffers verifier's bounds checks alone (nothing else of the
/// plan is trusted yet): the byte offset of its 8 bytes and the value
/// there, or nullopt for a plan without the field (an older mdc's) or
/// whose root table does not verify (the full verifier then says where).
struct PlanChecksumField {
  size_t offset = 0;
  uint64_t stated = 0;
};
std::optional<PlanChecksumField>
FindPlanChecksum(absl::Span<const uint8_t> bytes);

/// XXH3-64 of `bytes` with the 8 bytes at `offset` read as zero.
uint64_t PlanChecksum(absl::Span<const uint8_t> bytes, size_t offset);

/// Writes the checksum of the plan `bytes` into its checksum field, which
/// must be there (PlanBuilder packs it): for the writer, and for tests and
/// fuzzers that change a plan's bytes on purpose and want the loader's
/// later checks to see them. FailedPrecondition without the field.
absl::Status SealPlan(std::vector<uint8_t> &bytes);

/// OK when the plan `bytes` has no checksum field or its checksum holds;
/// else InvalidArgument "checksum: ..." naming the one the plan states and
/// the one its bytes have.
absl::Status CheckPlanChecksum(absl::Span<const uint8_t> bytes);

} // namespace md::plan

#endif // MD_RUNTIME_PLAN_CHECKSUM_H
