//===- PlanBuilder.h - build a plan.fb in memory ----------------*- C++ -*-===//
//
// A small API over the schema's object form (fb::PlanT) for whoever writes
// plans: the compiler's emitter and the tests. The add* functions append to
// a table and return the new entry's index; everything else is reachable
// through plan() and set directly. finish() serialises with the file
// identifier; it checks nothing (the loader is the one place that does), so
// tests can build broken plans on purpose.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_PLAN_PLANBUILDER_H
#define MD_RUNTIME_PLAN_PLANBUILDER_H

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "runtime/plan/plan_generated.h"

namespace md::plan {

/// 64-bit FNV-1a of `text`: Header.source_hash of a plan compiled from it.
uint64_t SourceHash(absl::string_view text);

class PlanBuilder {
public:
  /// An empty plan with a header (W unpinned), plan options, and a recipe
  /// with its optimizer, schedule and sampler. Its schema_version is the
  /// first that has every opcode add()ed (OpcodeSchemaVersion), so a plan
  /// without newer opcodes still loads in an older runtime.
  PlanBuilder();

  fb::PlanT &plan() { return plan_; }
  const fb::PlanT &plan() const { return plan_; }
  fb::HeaderT &header() { return *plan_.header; }
  fb::RecipeT &recipe() { return *plan_.recipe; }

  int32_t addUnit(std::string name, int64_t numel);
  /// A parameter; `offset` is its first element in the unit's flat buffer
  /// (-1 for a frozen one).
  int32_t addParam(std::string name, std::vector<int64_t> shape,
                   fb::DType dtype, int32_t unit, int64_t offset,
                   fb::InitKind init = fb::InitKind::Zeros,
                   std::vector<double> initArgs = {}, bool trainable = true);
  int32_t addDataset(fb::DataKind kind, std::string path, int64_t seed = 0);

  /// A transient full buffer of a static shape (numel is the product, or -1
  /// when that overflows). Its liveness is left unset for inferLiveness().
  static fb::BufferT full(std::string name, fb::DType dtype,
                          std::vector<int64_t> shape);
  /// A transient shard of a flat buffer of `numel` elements split over `group`.
  static fb::BufferT shard(std::string name, fb::DType dtype, int64_t numel,
                           fb::Group group);
  /// `buffer` made persistent state with `role`.
  static fb::BufferT state(fb::BufferT buffer, fb::StateRole role,
                           int32_t unit = -1,
                           bool onlyWhenAccumulating = false);
  int32_t addBuffer(fb::BufferT buffer);

  int32_t addEvent(std::string name);
  int32_t addLocation(std::string file, int32_t line, int32_t col);
  int32_t addBlock(fb::BlockKind kind);
  void setStepBlock(int32_t block) { plan_.step_block = block; }
  void setHooksBlock(int32_t block) { plan_.hooks_block = block; }

  /// Appends an instruction to `block` and returns it for its attributes,
  /// stream, events and nested blocks (the reference stays valid).
  fb::InstructionT &add(int32_t block, fb::Opcode opcode,
                        std::vector<int32_t> inputs = {},
                        std::vector<int32_t> outputs = {});
  /// The number of instructions in `block` so far.
  int32_t size(int32_t block) const;

  /// Sets block, first and last of every transient buffer whose block is -1
  /// from its uses: it lives in the innermost block that contains them all,
  /// where a use inside a nested block counts at the control instruction
  /// that runs it, and an input of an instruction on the comm stream (1)
  /// counts until the first later instruction of its block that waits for
  /// the event of it or of a later comm-stream instruction (or to the end
  /// of the block): the collective may still be reading it; an output of
  /// such an instruction counts from the first instruction of its block
  /// after the latest event it (or an earlier comm-stream instruction)
  /// waits for, or from the block's start: the collective may already be
  /// writing it. The source of a
  /// view then lives as long as the view (a view aliases its source). Fails on a buffer no instruction uses or on a
  /// block tree that is not one (what the loader would refuse anyway).
  absl::Status inferLiveness();

  /// The plan as a FlatBuffer with the "MDP1" identifier, sealed with its
  /// checksum (Checksum.h).
  std::vector<uint8_t> finish() const { return serialize(plan_); }

  /// Any plan in object form as a FlatBuffer with the "MDP1" identifier,
  /// sealed with its checksum; without `checksum`, as an mdc before the
  /// checksum wrote it (for the tests of such plans and of the verifier
  /// behind the checksum). `plan.checksum` itself is ignored.
  static std::vector<uint8_t> serialize(const fb::PlanT &plan,
                                        bool checksum = true);

private:
  fb::PlanT plan_;
};

} // namespace md::plan

#endif // MD_RUNTIME_PLAN_PLANBUILDER_H
