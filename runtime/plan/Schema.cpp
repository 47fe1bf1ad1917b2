//===- Schema.cpp - opcode signatures, dtype sizes and names ------------===//
//
// The table behind GetOpcodeInfo, built from the rows of Opcodes.def: the
// arity of each operand list and attribute list follows from its items and
// slots, the attribute kinds from the slots' kinds. The static_asserts below
// make a row whose value differs from plan.fbs, or a missing row, a build
// error.
//
//===----------------------------------------------------------------------===//

#include "runtime/plan/Schema.h"

#include <initializer_list>
#include <iterator>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/core/EnumNames.h"

namespace md::plan {
namespace {

using fb::Opcode;

#define MD_EXPAND(...) __VA_ARGS__

//===----------------------------------------------------------------------===//
// Every row's value is its fb::Opcode, and the rows are 1..MAX in order.
//===----------------------------------------------------------------------===//

#define MD_OP(Name, Value, ...)                                                \
  static_assert(static_cast<int>(Opcode::Name) == (Value),                     \
                "Opcodes.def: " #Name " is not " #Value " in plan.fbs");
#include "runtime/core/Opcodes.def"

constexpr int kRowValues[] = {
#define MD_OP(Name, Value, ...) Value,
#include "runtime/core/Opcodes.def"
};

constexpr bool rowsAreEveryOpcodeInOrder() {
  if (std::size(kRowValues) != static_cast<size_t>(Opcode::MAX))
    return false;
  for (size_t i = 0; i < std::size(kRowValues); ++i)
    if (kRowValues[i] != static_cast<int>(i) + 1)
      return false;
  return true;
}
static_assert(rowsAreEveryOpcodeInOrder(),
              "Opcodes.def must have one row per opcode of plan.fbs, in order");

// Every row's opcode came with a schema_version (kSchemaVersion is the
// newest of them).
#define MD_OP(Name, Value, Str, Flags, Since, ...)                             \
  static_assert((Since) >= 1, "Opcodes.def: " #Name "'s since is not a "       \
                              "schema_version");
#include "runtime/core/Opcodes.def"

// Each operand list and the ints have at most one optional or repeated
// item, which is what places the others (KernelDispatch.cpp reads them so).
#define MD_T(field)
#define MD_T_OPT(field) +1
#define MD_T_LIST(field, min) +1
#define MD_HOST_F(field)
#define MD_HOST_I(field)
#define MD_I(field, name, Kind)
#define MD_I_NOARG(field, name, Kind)
#define MD_I_OPT(field, name, Kind) +1
#define MD_I_LIST(field, name, Kind, min) +1
#define MD_OP(Name, Value, Str, Flags, Since, Rule, Ins, Outs, Ints, Floats,   \
              Strings, Blocks)                                                 \
  static_assert(0 MD_EXPAND Ins <= 1 && 0 MD_EXPAND Outs <= 1 &&               \
                    0 MD_EXPAND Ints <= 1,                                     \
                "Opcodes.def: " #Name " has two optional or repeated items "   \
                "in one list");
#include "runtime/core/Opcodes.def"

// OpcodeInfo keeps the kinds of the slots before a repeated one.
#define MD_I(field, name, Kind) +1
#define MD_I_NOARG(field, name, Kind) +1
#define MD_I_OPT(field, name, Kind) +1
#define MD_I_LIST(field, name, Kind, min)
#define MD_F(field, name, Kind) +1
#define MD_F_LIST(field, name, min)
#define MD_OP(Name, Value, Str, Flags, Since, Rule, Ins, Outs, Ints, Floats,   \
              Strings, Blocks)                                                 \
  static_assert(0 MD_EXPAND Ints <= OpcodeInfo::kLeadingSlots &&               \
                    0 MD_EXPAND Floats <= OpcodeInfo::kLeadingSlots,           \
                "Opcodes.def: " #Name " has more slots than "                  \
                "OpcodeInfo::kLeadingSlots");
#include "runtime/core/Opcodes.def"

//===----------------------------------------------------------------------===//
// Rows to signatures
//===----------------------------------------------------------------------===//

/// One operand item or attribute slot: how many list entries it takes.
template <typename Kind> struct Slot {
  int32_t min = 1, max = 1;
  Kind kind{};
  const char *name = "";
};
using Item = Slot<int>;

int32_t saturatingAdd(int32_t a, int32_t b) {
  return a > Arity::kMany - b ? Arity::kMany : a + b;
}

template <typename Kind>
Arity arityOf(std::initializer_list<Slot<Kind>> slots) {
  Arity arity;
  for (const Slot<Kind> &slot : slots) {
    arity.min += slot.min;
    arity.max = saturatingAdd(arity.max, slot.max);
  }
  return arity;
}

OpcodeInfo makeInfo(Opcode opcode, const char *name, uint32_t flags,
                    uint32_t since, bool kernel,
                    std::initializer_list<Item> inputs,
                    std::initializer_list<Item> outputs,
                    std::initializer_list<Slot<IntAttr>> ints,
                    std::initializer_list<Slot<FloatAttr>> floats,
                    Arity strings, Arity blocks) {
  OpcodeInfo info;
  info.opcode = opcode;
  info.name = name;
  info.flags = flags;
  info.since = since;
  info.kernel = kernel;
  info.inputs = arityOf(inputs);
  info.outputs = arityOf(outputs);
  info.ints = arityOf(ints);
  info.floats = arityOf(floats);
  info.strings = strings;
  info.blocks = blocks;
  // Fixed slots name their position; a repeated slot gives its kind to
  // every later position.
  size_t k = 0;
  for (const Slot<IntAttr> &slot : ints) {
    if (slot.max == Arity::kMany) {
      for (; k < OpcodeInfo::kLeadingSlots; ++k)
        info.leadingInts[k] = slot.kind;
      info.restInts = slot.kind;
      break;
    }
    info.leadingInts[k++] = slot.kind;
  }
  k = 0;
  for (const Slot<FloatAttr> &slot : floats) {
    if (slot.max == Arity::kMany || k == OpcodeInfo::kLeadingSlots)
      break;
    info.floatKinds[k] = slot.kind;
    info.floatNames[k++] = slot.name;
  }
  return info;
}

std::vector<OpcodeInfo> buildTable() {
  std::vector<OpcodeInfo> rows = {
#define MD_T(field) Item{1, 1},
#define MD_T_OPT(field) Item{0, 1},
#define MD_T_LIST(field, min) Item{min, Arity::kMany},
#define MD_HOST_F(field) Item{1, 1},
#define MD_HOST_I(field) Item{1, 1},
#define MD_I(field, name, Kind) Slot<IntAttr>{1, 1, IntAttr::Kind, name},
#define MD_I_NOARG(field, name, Kind) Slot<IntAttr>{1, 1, IntAttr::Kind, name},
#define MD_I_OPT(field, name, Kind) Slot<IntAttr>{0, 1, IntAttr::Kind, name},
#define MD_I_LIST(field, name, Kind, min)                                      \
  Slot<IntAttr>{min, Arity::kMany, IntAttr::Kind, name},
#define MD_F(field, name, Kind) Slot<FloatAttr>{1, 1, FloatAttr::Kind, name},
#define MD_F_LIST(field, name, min)                                            \
  Slot<FloatAttr>{min, Arity::kMany, FloatAttr::Any, name},
#define MD_ROW(Name, Value, Str, Flags, Since, Rule, Kernel, Ins, Outs, Ints,  \
               Floats, Strings, Blocks)                                        \
  makeInfo(Opcode::Name, Str, Flags, Since, Kernel, {MD_EXPAND Ins},           \
           {MD_EXPAND Outs}, {MD_EXPAND Ints}, {MD_EXPAND Floats},             \
           Arity{MD_EXPAND Strings}, Arity{MD_EXPAND Blocks}),
#include "runtime/core/Opcodes.def"
  };
  // Index the rows by opcode value; Invalid stays a hole.
  std::vector<OpcodeInfo> table(static_cast<size_t>(Opcode::MAX) + 1);
  for (const OpcodeInfo &row : rows)
    table[static_cast<size_t>(row.opcode)] = row;
  return table;
}

const std::vector<OpcodeInfo> &table() {
  static const std::vector<OpcodeInfo> kTable = buildTable();
  return kTable;
}

} // namespace

const OpcodeInfo *GetOpcodeInfo(fb::Opcode opcode) {
  auto index = static_cast<size_t>(opcode);
  const std::vector<OpcodeInfo> &rows = table();
  if (index >= rows.size() || rows[index].opcode == fb::Opcode::Invalid)
    return nullptr;
  return &rows[index];
}

uint32_t OpcodeSchemaVersion(fb::Opcode opcode) {
  const OpcodeInfo *info = GetOpcodeInfo(opcode);
  return info ? info->since : 1;
}

std::string OpcodeName(fb::Opcode opcode) {
  if (const OpcodeInfo *info = GetOpcodeInfo(opcode))
    return info->name;
  return absl::StrCat("opcode ", static_cast<int>(opcode));
}

int64_t DTypeSize(fb::DType dtype) {
  switch (dtype) {
  case fb::DType::F32:
  case fb::DType::I32:
    return 4;
  case fb::DType::BF16:
  case fb::DType::F16:
    return 2;
  case fb::DType::I64:
  case fb::DType::F64:
    return 8;
  case fb::DType::Bool:
    return 1;
  case fb::DType::Invalid:
    return 0;
  }
  return 0;
}

//===----------------------------------------------------------------------===//
// Names of enum values in messages and reports (runtime/core/EnumNames.h):
// each table has one name per value of its plan.fbs enum, up to flatc's MAX.
//===----------------------------------------------------------------------===//

namespace {

using runtime::enumName;
using runtime::namesEveryValue;

constexpr const char *kDTypeNames[] = {"invalid", "f32", "bf16", "f16",
                                       "i32",     "i64", "f64",  "bool"};
static_assert(namesEveryValue(kDTypeNames, fb::DType::MAX));
constexpr const char *kGroupNames[] = {"world", "shard", "replicate"};
static_assert(namesEveryValue(kGroupNames, fb::Group::MAX));
constexpr const char *kReductionNames[] = {"sum", "avg", "max", "min", "prod"};
static_assert(namesEveryValue(kReductionNames, fb::Reduction::MAX));
// None is a transient buffer: it persists in no role.
constexpr const char *kStateRoleNames[] = {
    "transient",  "master",   "params",   "exp_avg",
    "exp_avg_sq", "momentum", "grad_acc", "buffer",   "frozen"};
static_assert(namesEveryValue(kStateRoleNames, fb::StateRole::MAX));
constexpr const char *kBlockKindNames[] = {
    "step", "hooks", "micro_steps", "then", "else", "every", "for", "eval"};
static_assert(namesEveryValue(kBlockKindNames, fb::BlockKind::MAX));

} // namespace

const char *DTypeName(fb::DType dtype) { return enumName(kDTypeNames, dtype); }
const char *GroupName(fb::Group group) { return enumName(kGroupNames, group); }
const char *ReductionName(fb::Reduction reduction) {
  return enumName(kReductionNames, reduction);
}
const char *StateRoleName(fb::StateRole role) {
  return enumName(kStateRoleNames, role);
}
const char *BlockKindName(fb::BlockKind kind) {
  return enumName(kBlockKindNames, kind);
}

} // namespace md::plan
