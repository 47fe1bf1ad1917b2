//===- Schema.h - what the values of plan.fbs mean --------------*- C++ -*-===//
//
// The schema version this runtime reads and writes, element sizes, names for
// messages, and one table that says, for every opcode of plan.fbs, how many
// inputs, outputs, attributes and nested blocks an instruction has, what its
// attribute slots mean (so enum values, flags and float parameters are
// range-checked), and whether it communicates or is io. The table is built
// from runtime/core/Opcodes.def, the one description of the instruction set;
// the loader verifies against it, `mdrun --inspect` summarises with it, and
// the executor dispatches on it.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_PLAN_SCHEMA_H
#define MD_RUNTIME_PLAN_SCHEMA_H

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "runtime/plan/plan_generated.h"

namespace md::plan {

/// Version 3 added optimizer parameter groups (Optimizer.groups,
/// Param.group and the updates' `unit` slot) as well as Save's keep and
/// Exit's failed slots (InstructionSchemaVersion); mdc writes it only for a
/// plan that uses one of them. It is the newest version a field or slot
/// (rather than an opcode) came with.
constexpr uint32_t kParamGroupsSchemaVersion = 3;

/// Version 7 let `cast` convert an i32 or i64 buffer to a float one (a
/// type rule, not a slot): mdc writes at least it for a plan with such a
/// cast, and the loader refuses one in an older plan.
constexpr uint32_t kIndexCastSchemaVersion = 7;

/// Version 8 added frozen parameters: StateRole Frozen, the state of a unit
/// whose parameters are never trained (kept in the param dtype, with no
/// gradient or optimizer state), and such parameters at offsets in their
/// unit's flat buffer. mdc writes at least it for a plan with a frozen unit.
constexpr uint32_t kFrozenSchemaVersion = 8;

/// Version 9 added the attention opcodes' optional `window` slot
/// (sliding-window attention): mdc writes at least it for a plan with a
/// windowed attention, and the loader refuses one in an older plan, whose
/// runtime would ignore the slot's meaning.
constexpr uint32_t kAttentionWindowSchemaVersion = 9;

/// The compatible revision of plan.fbs this runtime writes and the newest it
/// reads (plan.fbs, "Versioning"): the newest of kParamGroupsSchemaVersion
/// and every opcode's `since` in Opcodes.def, so that a row with a new
/// version raises it. Bump it by hand (a constant beside
/// kParamGroupsSchemaVersion) with every other compatible change.
constexpr uint32_t kSchemaVersion = std::max({
    kParamGroupsSchemaVersion,
    kIndexCastSchemaVersion,
    kFrozenSchemaVersion,
    kAttentionWindowSchemaVersion,
#define MD_OP(Name, Value, Str, Flags, Since, ...) uint32_t{Since},
#include "runtime/core/Opcodes.def"
});

/// The first schema_version that has `opcode`: its row's `since` in
/// Opcodes.def (2 added Rank and LocalRank, 4 MatmulGelu), 1 for a value
/// that is no opcode. mdc writes the lowest version that has every opcode a
/// plan uses, so that a plan without the newer opcodes still loads in an
/// older runtime; the loader refuses a plan that uses an opcode its version
/// does not have.
uint32_t OpcodeSchemaVersion(fb::Opcode opcode);

/// The first schema_version that has an instruction of `opcode` with
/// `ints` attribute ints: OpcodeSchemaVersion, or 3 for the slots version 3
/// appended (Save's keep, Exit's failed), which an older runtime would
/// refuse with a less helpful message or, were it lenient, ignore.
inline uint32_t InstructionSchemaVersion(fb::Opcode opcode, size_t ints) {
  if ((opcode == fb::Opcode::Save && ints > 1) ||
      (opcode == fb::Opcode::Exit && ints > 0))
    return 3;
  return OpcodeSchemaVersion(opcode);
}

/// An inclusive range of list lengths; `max == kMany` means unbounded.
struct Arity {
  static constexpr int32_t kMany = INT32_MAX;
  int32_t min = 0;
  int32_t max = 0;
  bool contains(int64_t n) const { return n >= min && n <= max; }
};

/// What an integer attribute holds, for its range check.
enum class IntAttr : uint8_t {
  Any,              // any value
  Bool,             // 0 or 1
  Positive,         // > 0
  NonNegative,      // >= 0
  Bucket,           // a bucket id, or -1 for none
  Group,            // fb::Group
  Reduction,        // fb::Reduction
  PeriodUnit,       // fb::PeriodUnit
  CheckpointFormat, // fb::CheckpointFormat
  ArithKind,        // fb::ArithKind
  CompareKind,      // fb::CompareKind
  ElementwiseFn,    // fb::ElementwiseFn
  Dataset,          // an index into Plan.datasets
};

/// What a float attribute holds, for its range check (NaN fails every
/// check but Any).
enum class FloatAttr : uint8_t {
  Any,          // any value
  Positive,     // > 0
  NonNegative,  // >= 0
  UnitInterval, // in [0, 1)
  Bound,        // a number, or -inf / inf for no bound (clamp's); not NaN
};

/// Properties of an opcode.
enum OpcodeFlag : uint32_t {
  kCollective = 1u << 0, // every rank of a group runs it in the same order
  kIo = 1u << 1,         // a side effect outside the rank's memory
  kControl = 1u << 2,    // runs nested blocks
  kVaryingResult =
      1u << 3, // its results may differ between ranks whatever its inputs
  kUniformResult =
      1u << 4, // its results are the same on every rank whatever its inputs
  kHooksOnly = 1u << 5, // only in the hooks block's tree
};

/// The signature of one opcode (one row of Opcodes.def).
struct OpcodeInfo {
  /// Slots before the first repeated one; no opcode has more.
  static constexpr size_t kLeadingSlots = 4;

  fb::Opcode opcode = fb::Opcode::Invalid;
  const char *name = "";
  Arity inputs, outputs, ints, floats, strings, blocks;
  /// Kinds of ints[0..3]; later ints have `restInts`' kind.
  std::array<IntAttr, kLeadingSlots> leadingInts{IntAttr::Any, IntAttr::Any,
                                                 IntAttr::Any, IntAttr::Any};
  IntAttr restInts = IntAttr::Any;
  /// Kinds and plan.fbs names of floats[0..3]; later floats have no rule.
  std::array<FloatAttr, kLeadingSlots> floatKinds{
      FloatAttr::Any, FloatAttr::Any, FloatAttr::Any, FloatAttr::Any};
  std::array<const char *, kLeadingSlots> floatNames{"", "", "", ""};
  uint32_t flags = 0;
  /// The first schema_version that has the opcode (its row's `since`).
  uint32_t since = 1;
  /// Whether the executor runs it as one Backend kernel (an MD_KERNEL row).
  bool kernel = false;

  bool is(OpcodeFlag flag) const { return (flags & flag) != 0; }
  IntAttr intKind(size_t i) const {
    return i < leadingInts.size() ? leadingInts[i] : restInts;
  }
  FloatAttr floatKind(size_t i) const {
    return i < floatKinds.size() ? floatKinds[i] : FloatAttr::Any;
  }
  /// The position of the bucket id in ints (collectives), or -1.
  int bucketIndex() const {
    for (size_t i = 0; i < leadingInts.size(); ++i)
      if (leadingInts[i] == IntAttr::Bucket)
        return static_cast<int>(i);
    return -1;
  }
};

/// The signature of `opcode`, or nullptr when it is not a valid opcode
/// (Invalid included).
const OpcodeInfo *GetOpcodeInfo(fb::Opcode opcode);

/// The snake_case name of an opcode ("all_gather"), or "opcode <n>" for a
/// value that is not one.
std::string OpcodeName(fb::Opcode opcode);

/// Bytes per element of a dtype, 0 for Invalid or an unknown value.
int64_t DTypeSize(fb::DType dtype);

/// Lower-case names used in messages and by `mdrun --inspect` ("bf16",
/// "world", "avg", ...); "?" for a value out of range.
const char *DTypeName(fb::DType dtype);
const char *GroupName(fb::Group group);
const char *ReductionName(fb::Reduction reduction);
const char *StateRoleName(fb::StateRole role);
const char *BlockKindName(fb::BlockKind kind);

} // namespace md::plan

#endif // MD_RUNTIME_PLAN_SCHEMA_H
