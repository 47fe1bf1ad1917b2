//===- KernelDispatch.cpp - decoders generated from Opcodes.def --------===//
//
// One function per MD_KERNEL row, written by the preprocessor: it fills the
// row's argument struct from the instruction (operands in the row's order,
// attribute slots in theirs), applies the row's preset and calls the row's
// Backend entry. Two passes over the table: the first counts each operand
// list's fixed items, which place an optional or repeated item; the second
// writes the decoders.
//
//===----------------------------------------------------------------------===//

#include "runtime/exec/KernelDispatch.h"

#include <optional>
#include <vector>

#include "absl/strings/str_format.h"
#include "runtime/plan/Schema.h"

// The kernels' ElementwiseFn is the plan's, value for value (the dispatch
// casts one to the other; the loader range-checks the slot).
static_assert(static_cast<int>(md::fb::ElementwiseFn::MAX) ==
              static_cast<int>(md::runtime::ElementwiseFn::rsqrt));
static_assert(static_cast<int>(md::fb::ElementwiseFn::Sigmoid) ==
              static_cast<int>(md::runtime::ElementwiseFn::sigmoid));

namespace md::runtime {
namespace {

#define MD_EXPAND(...) __VA_ARGS__

template <typename T> uint32_t count(const flatbuffers::Vector<T> *v) {
  return v ? v->size() : 0;
}

/// One operand list, read in order. The items before the optional or
/// repeated one are at the front, those after it at the back, and it takes
/// the `size - fixed` entries in between.
class Operands {
public:
  Operands(const KernelContext &ctx, const flatbuffers::Vector<int32_t> *list,
           uint32_t fixed)
      : ctx_(ctx), list_(list), variable_(count(list) - fixed) {}

  int32_t index() { return list_->Get(next_++); }
  const TensorRef &one() { return ctx_.refs[index()]; }
  std::optional<TensorRef> optional() {
    if (variable_ == 0)
      return std::nullopt;
    variable_ = 0;
    return one();
  }
  std::vector<TensorRef> list() {
    std::vector<TensorRef> tensors;
    for (; variable_ > 0; --variable_)
      tensors.push_back(one());
    return tensors;
  }

private:
  const KernelContext &ctx_;
  const flatbuffers::Vector<int32_t> *list_;
  uint32_t variable_;
  uint32_t next_ = 0;
};

/// An attribute list, read slot by slot.
template <typename T> class Slots {
public:
  explicit Slots(const flatbuffers::Vector<T> *list)
      : list_(list), size_(count(list)) {}
  T next() { return list_->Get(next_++); }
  bool more() const { return next_ < size_; }
  std::vector<T> rest() {
    std::vector<T> values;
    while (more())
      values.push_back(next());
    return values;
  }

private:
  const flatbuffers::Vector<T> *list_;
  uint32_t size_;
  uint32_t next_ = 0;
};

/// Calls a row's Backend entry. An optimizer update that names its unit
/// runs once per parameter group's range instead (OptimizerGroups.h).
template <typename Args>
absl::Status callEntry(const KernelContext &ctx, const Args &args,
                       absl::Status (Backend::*entry)(const Args &)) {
  return (ctx.backend.*entry)(args);
}
template <typename Args>
absl::Status callGrouped(const KernelContext &ctx, const Args &args,
                         absl::Status (Backend::*entry)(const Args &),
                         const char *op) {
  if (!args.unit)
    return (ctx.backend.*entry)(args);
  if (ctx.optimizerSegments == nullptr)
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: names unit %d, but the plan's optimizer has no parameter groups",
        op, *args.unit));
  return RunGroupedUpdate(ctx.backend, args, *ctx.optimizerSegments);
}
absl::Status callEntry(const KernelContext &ctx, const AdamWArgs &args,
                       absl::Status (Backend::*entry)(const AdamWArgs &)) {
  return callGrouped(ctx, args, entry, "adamw_update");
}
absl::Status callEntry(const KernelContext &ctx, const SgdArgs &args,
                       absl::Status (Backend::*entry)(const SgdArgs &)) {
  return callGrouped(ctx, args, entry, "sgd_update");
}

// Pass 1: kFixedIn<Name> and kFixedOut<Name>, the items of each operand
// list that are always there.
#define MD_T(field) +1
#define MD_T_OPT(field)
#define MD_T_LIST(field, min)
#define MD_HOST_F(field) +1
#define MD_HOST_I(field) +1
#define MD_KERNEL(Name, Value, Str, Flags, Since, Rule, Entry, Args, Ins,      \
                  Outs, Ints, Floats)                                          \
  constexpr uint32_t kFixedIn##Name = 0 MD_EXPAND Ins;                         \
  constexpr uint32_t kFixedOut##Name = 0 MD_EXPAND Outs;
#include "runtime/core/Opcodes.def"

// Pass 2: run<Name>, the decoder and call.
#define MD_T(field) args.field = cur.one();
#define MD_T_OPT(field) args.field = cur.optional();
#define MD_T_LIST(field, min) args.field = cur.list();
#define MD_HOST(field, read)                                                   \
  {                                                                            \
    auto value = ctx.read(cur.index());                                        \
    if (!value.ok())                                                           \
      return value.status();                                                   \
    args.field = static_cast<decltype(args.field)>(*value);                    \
  }
#define MD_HOST_F(field) MD_HOST(field, readFloat)
#define MD_HOST_I(field) MD_HOST(field, readInt)
#define MD_I(field, name, Kind)                                                \
  args.field = static_cast<decltype(args.field)>(ints.next());
#define MD_I_NOARG(field, name, Kind) ints.next();
#define MD_I_OPT(field, name, Kind)                                            \
  if (ints.more())                                                             \
    args.field = ints.next();
#define MD_I_LIST(field, name, Kind, min) args.field = ints.rest();
#define MD_F(field, name, Kind)                                                \
  args.field = static_cast<decltype(args.field)>(floats.next());
#define MD_F_LIST(field, name, min) args.field = floats.rest();
#define MD_RUN(Name, Entry, Args, Preset, Ins, Outs, Ints, Floats)             \
  absl::Status run##Name(const KernelContext &ctx,                             \
                         const fb::Instruction &inst) {                        \
    Args args;                                                                 \
    MD_EXPAND Preset;                                                          \
    {                                                                          \
      [[maybe_unused]] Operands cur(ctx, inst.inputs(), kFixedIn##Name);       \
      MD_EXPAND Ins                                                            \
    }                                                                          \
    {                                                                          \
      [[maybe_unused]] Operands cur(ctx, inst.outputs(), kFixedOut##Name);     \
      MD_EXPAND Outs                                                           \
    }                                                                          \
    args.stream = Stream{static_cast<int>(inst.stream())};                     \
    [[maybe_unused]] Slots<int64_t> ints(inst.ints());                         \
    [[maybe_unused]] Slots<double> floats(inst.floats());                      \
    { MD_EXPAND Ints MD_EXPAND Floats }                                        \
    return callEntry(ctx, args, &Backend::Entry);                              \
  }
#define MD_KERNEL(Name, Value, Str, Flags, Since, Rule, Entry, Args, Ins,      \
                  Outs, Ints, Floats)                                          \
  MD_RUN(Name, Entry, Args, (), Ins, Outs, Ints, Floats)
#define MD_KERNEL_SHARED(Name, Value, Str, Flags, Since, Rule, Entry, Args,    \
                         Preset, Ins, Outs, Ints, Floats)                      \
  MD_RUN(Name, Entry, Args, Preset, Ins, Outs, Ints, Floats)
#include "runtime/core/Opcodes.def"
#undef MD_RUN
#undef MD_HOST

} // namespace

bool IsKernelOpcode(fb::Opcode opcode) {
  switch (opcode) {
#define MD_KERNEL(Name, ...)                                                   \
  case fb::Opcode::Name:                                                       \
    return true;
#include "runtime/core/Opcodes.def"
  default:
    return false;
  }
}

const char *KernelEntryName(fb::Opcode opcode) {
  switch (opcode) {
#define MD_KERNEL(Name, Value, Str, Flags, Since, Rule, Entry, ...)            \
  case fb::Opcode::Name:                                                       \
    return #Entry;
#include "runtime/core/Opcodes.def"
  default:
    return nullptr;
  }
}

absl::Status DispatchKernel(const KernelContext &ctx,
                            const fb::Instruction &inst) {
  const plan::OpcodeInfo *info = plan::GetOpcodeInfo(inst.opcode());
  if (info == nullptr || !info->kernel)
    return absl::UnimplementedError(absl::StrFormat(
        "opcode %s is not a kernel", plan::OpcodeName(inst.opcode())));
  // The decoders read by position; a list the loader would refuse must not
  // reach them.
  if (!info->inputs.contains(count(inst.inputs())) ||
      !info->outputs.contains(count(inst.outputs())) ||
      !info->ints.contains(count(inst.ints())) ||
      !info->floats.contains(count(inst.floats())))
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %d inputs, %d outputs, %d ints and %d floats do not fit its "
        "layout",
        info->name, count(inst.inputs()), count(inst.outputs()),
        count(inst.ints()), count(inst.floats())));
  switch (inst.opcode()) {
#define MD_KERNEL(Name, ...)                                                   \
  case fb::Opcode::Name:                                                       \
    return run##Name(ctx, inst);
#include "runtime/core/Opcodes.def"
  default:
    break;
  }
  return absl::UnimplementedError(absl::StrFormat(
      "opcode %s is not a kernel", plan::OpcodeName(inst.opcode())));
}

} // namespace md::runtime
