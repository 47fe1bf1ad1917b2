//===- Loader.h - load and verify a plan.fb ---------------------*- C++ -*-===//
//
// LoadPlan turns untrusted bytes into a LoadedPlan in two stages, as IREE
// does with its FlatBuffer modules:
//   (a) the file identifier, the plan's own checksum (Checksum.h), the
//       FlatBuffers Verifier with explicit limits (size, depth, tables;
//       a refusal names the table and field where it stopped) and the
//       schema version;
//   (b) a semantic verifier: every index in range, every size consistent
//       with its dtype and shape in overflow-checked arithmetic, every enum
//       value known, per-opcode arity, attributes and operand types, the
//       block tree, events recorded before they are waited on, buffers used
//       only inside their liveness interval, rank0_only only on io that does
//       not communicate, no collective under a condition that varies between
//       ranks, and the world size against the plan's pin.
// A plan that passes is read by the executor without re-checking. Every
// error is one line naming the field path, e.g.
//   blocks[0].instructions[12].inputs[1]: buffer 40 out of range (37 buffers)
// docs/plan-format.md lists every check.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_PLAN_LOADER_H
#define MD_RUNTIME_PLAN_LOADER_H

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "runtime/plan/World.h"
#include "runtime/plan/plan_generated.h"

namespace md::plan {

/// Limits of stage (a) and the world size to bind.
struct LoadOptions {
  /// The world size to run at: checked against the plan (pinned W, hybrid
  /// shard group, whole accumulation steps) and bound. 0 binds the plan's
  /// pinned W when it has one and leaves the plan unbound otherwise.
  int64_t worldSize = 0;
  /// Largest file accepted, in bytes (FlatBuffers' own cap is 2 GiB).
  size_t maxBytes = size_t{256} << 20;
  /// FlatBuffers Verifier: deepest nesting of tables and vectors.
  uint32_t maxDepth = 32;
  /// FlatBuffers Verifier: most tables in the file.
  uint32_t maxTables = 1u << 22;
};

class LoadedPlan;

/// Verifies `bytes` (both stages) and binds the world size of `options`.
absl::StatusOr<LoadedPlan> LoadPlan(absl::Span<const uint8_t> bytes,
                                    const LoadOptions &options = {});

/// Where a block sits in the block tree.
struct BlockSite {
  int32_t parentBlock = -1; // -1 for the step and hooks blocks
  int32_t parentInstruction =
      -1;            // the control instruction in parentBlock that runs it
  int32_t depth = 0; // 0 for the roots
};

/// A verified plan. It owns a copy of the bytes (aligned for FlatBuffers), so
/// it can be copied and moved freely.
class LoadedPlan {
public:
  const fb::Plan &plan() const { return *fb::GetPlan(bytes_.data()); }
  absl::Span<const uint8_t> bytes() const { return bytes_; }

  /// Whether a world size is bound; world() is all zero when not.
  bool bound() const { return world_.worldSize > 0; }
  const WorldBinding &world() const { return world_; }

  /// The checksum the plan carries, which held (Checksum.h); nullopt for a
  /// plan of an older mdc, which has none.
  std::optional<uint64_t> checksum() const { return checksum_; }

  /// The site of `block` (an index the loader verified).
  const BlockSite &site(int32_t block) const {
    return sites_[static_cast<size_t>(block)];
  }

private:
  friend absl::StatusOr<LoadedPlan> LoadPlan(absl::Span<const uint8_t>,
                                             const LoadOptions &);
  std::vector<uint8_t> bytes_;
  std::optional<uint64_t> checksum_;
  WorldBinding world_;
  std::vector<BlockSite> sites_;
};

/// Stage (a) alone: `bytes` are a plan FlatBuffer that is safe to read
/// (size, identifier, FlatBuffers verifier, alignment, schema version), not
/// necessarily a meaningful plan. `bytes` must start at an 8-byte aligned
/// address; LoadPlan calls it on its own aligned copy.
absl::Status CheckPlanStructure(absl::Span<const uint8_t> bytes,
                                const LoadOptions &options = {});

/// Reads the file at `path` (refusing one larger than options.maxBytes before
/// reading it) and loads it. Messages start with the path.
absl::StatusOr<LoadedPlan> LoadPlanFile(const std::string &path,
                                        const LoadOptions &options = {});

/// Checks that `plan` can run at `worldSize` ranks and returns the binding:
/// W >= 1, W equal to the pinned W if there is one, a hybrid shard group that
/// divides W, global_batch divisible by micro_batch * W, and every collective
/// whose operand sizes depend on W consistent at W.
absl::StatusOr<WorldBinding> BindWorldSize(const LoadedPlan &plan,
                                           int64_t worldSize);

} // namespace md::plan

#endif // MD_RUNTIME_PLAN_LOADER_H
