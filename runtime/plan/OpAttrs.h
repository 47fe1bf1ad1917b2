//===- OpAttrs.h - typed attribute structs and encoders -------*- C++ -*-===//
//
// Generated from Opcodes.def: for every opcode, a struct plan::attrs::<Name>
// with one member per attribute slot, and Encode(attrs, inst), which writes
// the slots into the instruction's positional `ints` and `floats` in the
// order plan.fbs gives. A writer of plans (the compiler's emitter, tests)
// fills slots by name and cannot put one at the wrong position; a member
// only takes its own type (a bool flag, a plan enum, an int64, a double),
// and Encode refuses a struct with a required slot left unset, naming it.
//
//   plan::attrs::Matmul a;
//   a.transposeA = false;
//   a.transposeB = true;
//   MD_RETURN_IF_ERROR(plan::Encode(a, inst)); // inst.ints = {0, 1}
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_PLAN_OPATTRS_H
#define MD_RUNTIME_PLAN_OPATTRS_H

#include <cstdint>
#include <optional>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "runtime/core/Status.h"
#include "runtime/plan/Schema.h"
#include "runtime/plan/plan_generated.h"

namespace md::plan {

/// The C++ type of one int slot of kind K: flags are bools, enumerations
/// their plan.fbs enum, everything else an int64.
template <IntAttr K> struct IntSlot { using type = int64_t; };
template <> struct IntSlot<IntAttr::Bool> { using type = bool; };
template <> struct IntSlot<IntAttr::Group> { using type = fb::Group; };
template <> struct IntSlot<IntAttr::Reduction> { using type = fb::Reduction; };
template <> struct IntSlot<IntAttr::PeriodUnit> {
  using type = fb::PeriodUnit;
};
template <> struct IntSlot<IntAttr::CheckpointFormat> {
  using type = fb::CheckpointFormat;
};
template <> struct IntSlot<IntAttr::ArithKind> { using type = fb::ArithKind; };
template <> struct IntSlot<IntAttr::CompareKind> {
  using type = fb::CompareKind;
};
template <> struct IntSlot<IntAttr::ElementwiseFn> {
  using type = fb::ElementwiseFn;
};

/// A slot Encode must be given. It takes exactly its type: an int, a
/// float or another enum is a compile error, not a silent conversion.
template <typename T> class Required {
public:
  Required &operator=(T v) {
    value_ = v;
    return *this;
  }
  template <typename U,
            std::enable_if_t<!std::is_same_v<std::decay_t<U>, T>, int> = 0>
  Required &operator=(U) = delete;

  bool has_value() const { return value_.has_value(); }
  T operator*() const { return *value_; }

private:
  std::optional<T> value_;
};

namespace attrs {

#define MD_EXPAND(...) __VA_ARGS__
#define MD_I(field, name, Kind) Required<IntSlot<IntAttr::Kind>::type> field;
#define MD_I_NOARG(field, name, Kind)                                          \
  Required<IntSlot<IntAttr::Kind>::type> field;
#define MD_I_OPT(field, name, Kind)                                            \
  std::optional<IntSlot<IntAttr::Kind>::type> field;
#define MD_I_LIST(field, name, Kind, min) std::vector<int64_t> field;
#define MD_F(field, name, Kind) Required<double> field;
#define MD_F_LIST(field, name, min) std::vector<double> field;
#define MD_OP(Name, Value, Str, Flags, Since, Rule, Ins, Outs, Ints, Floats,   \
              Strings, Blocks)                                                 \
  struct Name {                                                                \
    static constexpr fb::Opcode kOpcode = fb::Opcode::Name;                    \
    static constexpr const char *kName = Str;                                  \
    MD_EXPAND Ints MD_EXPAND Floats                                            \
  };
#include "runtime/core/Opcodes.def"

} // namespace attrs

namespace detail {

template <typename T> int64_t toInt(T v) {
  if constexpr (std::is_same_v<T, bool>)
    return v ? 1 : 0;
  else
    return static_cast<int64_t>(v);
}

template <typename T, typename Out>
absl::Status put(std::vector<Out> &list, const Required<T> &slot,
                 const char *op, const char *name) {
  if (!slot.has_value())
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": attribute ", name, " is not set"));
  if constexpr (std::is_same_v<Out, double>)
    list.push_back(*slot);
  else
    list.push_back(toInt(*slot));
  return absl::OkStatus();
}
template <typename T>
void put(std::vector<int64_t> &list, const std::optional<T> &slot) {
  if (slot)
    list.push_back(toInt(*slot));
}
template <typename T>
void put(std::vector<T> &list, const std::vector<T> &slots) {
  list.insert(list.end(), slots.begin(), slots.end());
}

} // namespace detail

#define MD_I(field, name, Kind)                                                \
  MD_RETURN_IF_ERROR(detail::put(inst.ints, a.field, op, name));
#define MD_I_NOARG(field, name, Kind)                                          \
  MD_RETURN_IF_ERROR(detail::put(inst.ints, a.field, op, name));
#define MD_I_OPT(field, name, Kind) detail::put(inst.ints, a.field);
#define MD_I_LIST(field, name, Kind, min) detail::put(inst.ints, a.field);
#define MD_F(field, name, Kind)                                                \
  MD_RETURN_IF_ERROR(detail::put(inst.floats, a.field, op, name));
#define MD_F_LIST(field, name, min) detail::put(inst.floats, a.field);
/// Replaces inst's ints and floats with the slots of `a`; InvalidArgument
/// (and inst's attributes unspecified) when a required slot is unset.
#define MD_OP(Name, Value, Str, Flags, Since, Rule, Ins, Outs, Ints, Floats,   \
              Strings, Blocks)                                                 \
  inline absl::Status Encode([[maybe_unused]] const attrs::Name &a,            \
                             fb::InstructionT &inst) {                         \
    [[maybe_unused]] const char *op = attrs::Name::kName;                      \
    inst.ints.clear();                                                         \
    inst.floats.clear();                                                       \
    { MD_EXPAND Ints MD_EXPAND Floats }                                        \
    return absl::OkStatus();                                                   \
  }
#include "runtime/core/Opcodes.def"
#undef MD_EXPAND

} // namespace md::plan

#endif // MD_RUNTIME_PLAN_OPATTRS_H
