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
#include "runtime/plan/Opcodes.def"

constexpr int kRowValues[] = {
#define MD_OP(Name, Value, ...) Value,
#include "runtime/plan/Opcodes.def"
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
#define MD_OP(Name, Value, Str, Flags, Ins, Outs, Ints, Floats, Strings,       \
              Blocks)                                                          \
  static_assert(0 MD_EXPAND Ins <= 1 && 0 MD_EXPAND Outs <= 1 &&               \
                    0 MD_EXPAND Ints <= 1,                                     \
                "Opcodes.def: " #Name " has two optional or repeated items "   \
                "in one list");
#include "runtime/plan/Opcodes.def"

// OpcodeInfo keeps the kinds of the slots before a repeated one.
#define MD_I(field, name, Kind) +1
#define MD_I_NOARG(field, name, Kind) +1
#define MD_I_OPT(field, name, Kind) +1
#define MD_I_LIST(field, name, Kind, min)
#define MD_F(field, name, Kind) +1
#define MD_F_LIST(field, name, min)
#define MD_OP(Name, Value, Str, Flags, Ins, Outs, Ints, Floats, Strings,       \
              Blocks)                                                          \
  static_assert(0 MD_EXPAND Ints <= OpcodeInfo::kLeadingSlots &&               \
                    0 MD_EXPAND Floats <= OpcodeInfo::kLeadingSlots,           \
                "Opcodes.def: " #Name " has more slots than "                  \
                "OpcodeInfo::kLeadingSlots");
#include "runtime/plan/Opcodes.def"

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
                    bool kernel, std::initializer_list<Item> inputs,
                    std::initializer_list<Item> outputs,
                    std::initializer_list<Slot<IntAttr>> ints,
                    std::initializer_list<Slot<FloatAttr>> floats,
                    Arity strings, Arity blocks) {
  OpcodeInfo info;
  info.opcode = opcode;
  info.name = name;
  info.flags = flags;
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
#define MD_ROW(Name, Str, Flags, Kernel, Ins, Outs, Ints, Floats, Strings,     \
               Blocks)                                                         \
  makeInfo(Opcode::Name, Str, Flags, Kernel, {MD_EXPAND Ins},                  \
           {MD_EXPAND Outs}, {MD_EXPAND Ints}, {MD_EXPAND Floats},             \
           Arity{MD_EXPAND Strings}, Arity{MD_EXPAND Blocks}),
#define MD_OP(Name, Value, Str, Flags, Ins, Outs, Ints, Floats, Strings,       \
              Blocks)                                                          \
  MD_ROW(Name, Str, Flags, false, Ins, Outs, Ints, Floats, Strings, Blocks)
#define MD_KERNEL(Name, Value, Str, Flags, Entry, Args, Preset, Ins, Outs,     \
                  Ints, Floats)                                                \
  MD_ROW(Name, Str, Flags, true, Ins, Outs, Ints, Floats, (0, 0), (0, 0))
#include "runtime/plan/Opcodes.def"
#undef MD_ROW
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

const char *DTypeName(fb::DType dtype) {
  switch (dtype) {
  case fb::DType::F32:
    return "f32";
  case fb::DType::BF16:
    return "bf16";
  case fb::DType::F16:
    return "f16";
  case fb::DType::I32:
    return "i32";
  case fb::DType::I64:
    return "i64";
  case fb::DType::F64:
    return "f64";
  case fb::DType::Bool:
    return "bool";
  case fb::DType::Invalid:
    return "invalid";
  }
  return "?";
}

const char *GroupName(fb::Group group) {
  switch (group) {
  case fb::Group::World:
    return "world";
  case fb::Group::Shard:
    return "shard";
  case fb::Group::Replicate:
    return "replicate";
  }
  return "?";
}

const char *ReductionName(fb::Reduction reduction) {
  switch (reduction) {
  case fb::Reduction::Sum:
    return "sum";
  case fb::Reduction::Avg:
    return "avg";
  case fb::Reduction::Max:
    return "max";
  case fb::Reduction::Min:
    return "min";
  case fb::Reduction::Prod:
    return "prod";
  }
  return "?";
}

const char *StateRoleName(fb::StateRole role) {
  switch (role) {
  case fb::StateRole::None:
    return "transient";
  case fb::StateRole::Master:
    return "master";
  case fb::StateRole::Params:
    return "params";
  case fb::StateRole::ExpAvg:
    return "exp_avg";
  case fb::StateRole::ExpAvgSq:
    return "exp_avg_sq";
  case fb::StateRole::Momentum:
    return "momentum";
  case fb::StateRole::GradAcc:
    return "grad_acc";
  case fb::StateRole::Buffer:
    return "buffer";
  }
  return "?";
}

const char *BlockKindName(fb::BlockKind kind) {
  switch (kind) {
  case fb::BlockKind::Step:
    return "step";
  case fb::BlockKind::Hooks:
    return "hooks";
  case fb::BlockKind::MicroSteps:
    return "micro_steps";
  case fb::BlockKind::Then:
    return "then";
  case fb::BlockKind::Else:
    return "else";
  case fb::BlockKind::Every:
    return "every";
  case fb::BlockKind::ForBody:
    return "for";
  case fb::BlockKind::EvalBody:
    return "eval";
  }
  return "?";
}

} // namespace md::plan
