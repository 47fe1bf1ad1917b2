//===- Checksum.cpp - a plan file's own checksum --------------------------===//
//
// Checksum.h. xxHash is used header-only (XXH_INLINE_ALL), so that the
// plan library and the fuzzer that compiles its sources need no library.
//
//===----------------------------------------------------------------------===//

#include "runtime/plan/Checksum.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cstring>

#include "absl/strings/str_format.h"
#include "runtime/plan/plan_generated.h"

namespace md::plan {

std::optional<PlanChecksumField>
FindPlanChecksum(absl::Span<const uint8_t> bytes) {
  if (bytes.size() < 8 ||
      bytes.size() >= static_cast<size_t>(FLATBUFFERS_MAX_BUFFER_SIZE))
    return std::nullopt;
  flatbuffers::Verifier::Options options;
  options.check_alignment = true;
  flatbuffers::Verifier verifier(bytes.data(), bytes.size(), options);
  // The root offset, then the root table's vtable and this one field.
  const auto root = flatbuffers::ReadScalar<flatbuffers::uoffset_t>(bytes.data());
  if (root < sizeof(flatbuffers::uoffset_t) || root > bytes.size() - 4)
    return std::nullopt;
  const auto *table =
      reinterpret_cast<const flatbuffers::Table *>(bytes.data() + root);
  if (!table->VerifyTableStart(verifier) ||
      !table->VerifyField<uint64_t>(verifier, fb::Plan::VT_CHECKSUM, 8))
    return std::nullopt;
  const flatbuffers::voffset_t field =
      table->GetOptionalFieldOffset(fb::Plan::VT_CHECKSUM);
  if (field == 0)
    return std::nullopt;
  PlanChecksumField out;
  out.offset = root + field;
  std::memcpy(&out.stated, bytes.data() + out.offset, 8); // little-endian
  return out;
}

uint64_t PlanChecksum(absl::Span<const uint8_t> bytes, size_t offset) {
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  const uint8_t zero[8] = {};
  XXH3_64bits_update(&state, bytes.data(), offset);
  XXH3_64bits_update(&state, zero, 8);
  XXH3_64bits_update(&state, bytes.data() + offset + 8,
                     bytes.size() - offset - 8);
  return XXH3_64bits_digest(&state);
}

absl::Status SealPlan(std::vector<uint8_t> &bytes) {
  std::optional<PlanChecksumField> field = FindPlanChecksum(bytes);
  if (!field)
    return absl::FailedPreconditionError(
        "the plan has no checksum field to seal");
  const uint64_t sum = PlanChecksum(bytes, field->offset);
  std::memcpy(bytes.data() + field->offset, &sum, 8);
  return absl::OkStatus();
}

absl::Status CheckPlanChecksum(absl::Span<const uint8_t> bytes) {
  std::optional<PlanChecksumField> field = FindPlanChecksum(bytes);
  if (!field)
    return absl::OkStatus();
  const uint64_t found = PlanChecksum(bytes, field->offset);
  if (found == field->stated)
    return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "checksum: the plan says XXH3-64 %016x, its %d bytes hash to %016x: "
      "they changed after mdc wrote them (a damaged or edited file); "
      "compile it again",
      field->stated, bytes.size(), found));
}

} // namespace md::plan
