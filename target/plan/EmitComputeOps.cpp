//===- EmitComputeOps.cpp - md's compute ops as plan instructions --------===//
//
// The emitter's compute ops (Emitter.h): the kernels of the forward and
// backward and the optimizer, the buffer ops and the collectives. One op
// becomes one instruction with the same operands in the same order, and its
// opcode's attribute struct (runtime/plan/OpAttrs.h, from Opcodes.def) is
// filled by slot name. A kernel needs nothing here: md.<name> is the row
// named "name", and each slot is read from the op's attribute of the slot's
// name (SlotReader). Only what is not a kernel row is written out below.
//
//===----------------------------------------------------------------------===//

#include "target/plan/Emitter.h"

#include "llvm/ADT/TypeSwitch.h"

#include <array>
#include <optional>
#include <type_traits>
#include <vector>

// md.elementwise's `fn` is emitted as its integer: the dialect's enum and
// the plan's have the same values.
static_assert(static_cast<int>(md::ElementwiseFn::rsqrt) ==
              static_cast<int>(md::fb::ElementwiseFn::MAX));
static_assert(static_cast<int>(md::ElementwiseFn::sigmoid) ==
              static_cast<int>(md::fb::ElementwiseFn::Sigmoid));

namespace md::emitter {

namespace A = plan::attrs;

namespace {

template <typename T> int64_t i64(T v) { return static_cast<int64_t>(v); }
template <typename Op> fb::Group group(Op c) {
  return static_cast<fb::Group>(c.getGroup());
}
template <typename Op> fb::Reduction reduction(Op c) {
  return static_cast<fb::Reduction>(c.getReductionKind());
}

/// The attribute that holds a number slot of type T, and its value: an
/// enumeration slot (a plan.fbs enum) is an integer attribute of the md
/// op's enum (its verifier checked the value).
template <typename T> struct NumberAttr {
  static_assert(std::is_enum_v<T>, "a number slot is an int, float or enum");
  using type = IntegerAttr;
  static constexpr const char *kKind = "an enumeration value";
  static T value(IntegerAttr a) {
    return static_cast<T>(a.getValue().getSExtValue());
  }
};
template <> struct NumberAttr<int64_t> {
  using type = IntegerAttr;
  static constexpr const char *kKind = "an integer";
  static int64_t value(IntegerAttr a) { return a.getValue().getSExtValue(); }
};
template <> struct NumberAttr<double> {
  using type = FloatAttr;
  static constexpr const char *kKind = "a float";
  static double value(FloatAttr a) { return a.getValueAsDouble(); }
};

/// Reads an attribute slot of a kernel's row from the md op's attribute of
/// the slot's name: a unit or bool attribute into a flag (absent: false),
/// an integer or float attribute into its number, an array of them (or a
/// dense i64 array) into its numbers. A required number the op lacks, or an
/// attribute of another kind, is an error on the op (the dialect
/// materialises its default-valued attributes, so only a table and dialect
/// that disagree get here; DialectTest proves they agree).
class SlotReader {
public:
  explicit SlotReader(Operation &op) : op_(op) {}

  LogicalResult operator()(StringRef name, plan::Required<bool> &slot) {
    Attribute attr = op_.getAttr(name);
    if (auto flag = dyn_cast_or_null<BoolAttr>(attr))
      slot = flag.getValue();
    else if (!attr || isa<UnitAttr>(attr))
      slot = static_cast<bool>(attr);
    else
      return wrongKind(name, "a flag");
    return success();
  }
  template <typename T>
  LogicalResult operator()(StringRef name, std::optional<T> &slot) {
    Attribute attr = op_.getAttr(name);
    if (!attr)
      return success();
    auto number = dyn_cast<typename NumberAttr<T>::type>(attr);
    if (!number)
      return wrongKind(name, NumberAttr<T>::kKind);
    slot = NumberAttr<T>::value(number);
    return success();
  }
  template <typename T>
  LogicalResult operator()(StringRef name, plan::Required<T> &slot) {
    std::optional<T> value;
    if (failed((*this)(name, value)))
      return failure();
    if (!value)
      return wrongKind(name, NumberAttr<T>::kKind);
    slot = *value;
    return success();
  }
  template <typename T>
  LogicalResult operator()(StringRef name, std::vector<T> &slots) {
    Attribute attr = op_.getAttr(name);
    if constexpr (std::is_same_v<T, int64_t>)
      if (auto dense = dyn_cast_or_null<DenseI64ArrayAttr>(attr)) {
        slots.assign(dense.asArrayRef().begin(), dense.asArrayRef().end());
        return success();
      }
    auto array = dyn_cast_or_null<ArrayAttr>(attr);
    if (!array)
      return wrongKind(name, "an array");
    for (Attribute element : array) {
      auto number = dyn_cast<typename NumberAttr<T>::type>(element);
      if (!number)
        return wrongKind(name, "an array of numbers");
      slots.push_back(NumberAttr<T>::value(number));
    }
    return success();
  }

private:
  LogicalResult wrongKind(StringRef name, StringRef kind) {
    return op_.emitError("'")
           << op_.getName() << "' needs attribute '" << name << "' to be "
           << kind << " for its plan instruction";
  }

  Operation &op_;
};

} // namespace

LogicalResult Emitter::emitComputeOp(Operation &op, Context ctx) {
  if (op.getDialect() != model_->getDialect())
    return op.emitError("'")
           << op.getName() << "' cannot be emitted into a plan";
  FailureOr<SmallVector<int32_t>> in = uses(op.getOperands(), ctx.block, &op);
  if (failed(in))
    return failure();
  FailureOr<std::vector<int32_t>> out = computeOutputs(op);
  if (failed(out))
    return failure();
  Pending p{op, ctx, std::vector<int32_t>(in->begin(), in->end()),
            std::move(*out)};
  // A cast from an integer came with version 7: an older loader would
  // refuse it by its type rule alone.
  if (auto cast = dyn_cast<CastOp>(op);
      cast && !isa<FloatType>(getElementTypeOrSelf(cast.getInput().getType())))
    b_.plan().schema_version =
        std::max(b_.plan().schema_version, plan::kIndexCastSchemaVersion);
  // An attention's window came with version 9: an older runtime would not
  // know the slot.
  if (op.hasAttr("window") && isa<CausalAttentionOp, CausalAttentionGradOp>(op))
    b_.plan().schema_version =
        std::max(b_.plan().schema_version, plan::kAttentionWindowSchemaVersion);
  for (auto emit : {&Emitter::emitBufferOp, &Emitter::emitCollectiveOp,
                    &Emitter::emitKernelOp})
    if (std::optional<LogicalResult> emitted = (this->*emit)(p))
      return *emitted;
  return op.emitError("'") << op.getName() << "' cannot be emitted into a plan";
}

FailureOr<std::vector<int32_t>> Emitter::computeOutputs(Operation &op) {
  // Optimizer updates run in place on the states they update (docs/memory.md):
  // a result whose operand was loaded from a state is that operand's buffer.
  auto inPlace = [&](Value result, Value operand) -> bool {
    auto it = buffers_.find(operand);
    if (!operand || it == buffers_.end() || !loadedFrom_.count(it->second))
      return false;
    buffers_[result] = it->second;
    return true;
  };
  std::vector<int32_t> outputs;
  auto adamw = dyn_cast<AdamWUpdateOp>(op);
  auto sgd = dyn_cast<SGDUpdateOp>(op);
  for (auto [i, result] : llvm::enumerate(op.getResults())) {
    Value updated;
    if (adamw)
      updated =
          std::array<Value, 3>{adamw.getParam(), adamw.getM(), adamw.getV()}[i];
    else if (sgd)
      updated = i == 0 ? sgd.getParam() : sgd.getMomentumBuffer();
    if (updated && inPlace(result, updated)) {
      outputs.push_back(buffers_[result]);
      continue;
    }
    // A view or reshape aliases its operand: both become a plan View.
    std::string name = op.getName().stripDialect().str();
    if (op.getNumResults() > 1)
      name += "#" + std::to_string(i);
    FailureOr<int32_t> x = newBuffer(result, name, &op);
    if (failed(x))
      return failure();
    outputs.push_back(*x);
  }
  return outputs;
}

// readSlots(read, a): every slot of a row's attribute struct, by name (a
// template, so that only the rows read here need a reader of their slots'
// types: the collectives' enums have none).
#define MD_EXPAND(...) __VA_ARGS__
#define MD_I(field, slot, Kind) &&succeeded(read(slot, a.field))
#define MD_I_NOARG(field, slot, Kind) &&succeeded(read(slot, a.field))
#define MD_I_OPT(field, slot, Kind) &&succeeded(read(slot, a.field))
#define MD_I_LIST(field, slot, Kind, min) &&succeeded(read(slot, a.field))
#define MD_F(field, slot, Kind) &&succeeded(read(slot, a.field))
#define MD_F_LIST(field, slot, min) &&succeeded(read(slot, a.field))
#define MD_OP(Name, Value, Str, Flags, Since, Rule, Ins, Outs, Ints, Floats,   \
              Strings, Blocks)                                                 \
  template <typename Reader>                                                   \
  LogicalResult readSlots([[maybe_unused]] Reader &read,                       \
                          [[maybe_unused]] A::Name &a) {                       \
    return success(true MD_EXPAND Ints MD_EXPAND Floats);                      \
  }
#include "runtime/core/Opcodes.def"

std::optional<LogicalResult> Emitter::emitKernelOp(const Pending &p) {
  SlotReader read(p.op);
  auto emitRow = [&](auto a) -> LogicalResult {
    if (failed(readSlots(read, a)))
      return failure();
    return emitAs(p, a);
  };
  // A reshape aliases its operand: a view of all of it.
  if (isa<ReshapeOp>(p.op)) {
    A::View a;
    a.offset = int64_t{0};
    return emitAs(p, a);
  }
  // The host's elementwise ops (rows, but no kernels: the executor computes
  // them).
  if (isa<SqrtOp>(p.op))
    return emitRow(A::Sqrt());
  if (isa<RsqrtOp>(p.op))
    return emitRow(A::Rsqrt());
  // Every other kernel is its row of Opcodes.def: the op md.<name>.
  StringRef name = p.op.getName().stripDialect();
#define MD_KERNEL(Name, Value, Str, ...)                                       \
  if (name == Str)                                                             \
    return emitRow(A::Name());
#include "runtime/core/Opcodes.def"
  return std::nullopt;
}
#undef MD_EXPAND

std::optional<LogicalResult> Emitter::emitBufferOp(const Pending &p) {
  auto emit = [&](const auto &a) { return emitAs(p, a); };
  return llvm::TypeSwitch<Operation *, std::optional<LogicalResult>>(&p.op)
      .Case([&](ViewOp v) {
        A::View a;
        a.offset = i64(v.getOffset());
        return emit(a);
      })
      .Case([&](ShardSliceOp s) {
        A::ShardSlice a;
        a.group = group(s);
        return emit(a);
      })
      .Default([](Operation *) { return std::nullopt; });
}

std::optional<LogicalResult> Emitter::emitCollectiveOp(const Pending &p) {
  auto emit = [&](const auto &a) { return emitAs(p, a); };
  // Every collective names its group and bucket (-1: none).
  auto onGroup = [&](auto a, auto c) {
    a.group = group(c);
    std::optional<uint64_t> bucket = c.getBucket();
    a.bucket = bucket ? i64(*bucket) : int64_t{-1};
    return a;
  };
  return llvm::TypeSwitch<Operation *, std::optional<LogicalResult>>(&p.op)
      .Case([&](AllGatherOp c) {
        A::AllGather a = onGroup(A::AllGather(), c);
        a.axis = i64(c.getAxis());
        return emit(a);
      })
      .Case([&](ReduceScatterOp c) {
        A::ReduceScatter a = onGroup(A::ReduceScatter(), c);
        a.reduction = reduction(c);
        a.axis = i64(c.getAxis());
        return emit(a);
      })
      .Case([&](AllReduceOp c) {
        A::AllReduce a = onGroup(A::AllReduce(), c);
        a.reduction = reduction(c);
        return emit(a);
      })
      .Case([&](BroadcastOp c) {
        A::Broadcast a = onGroup(A::Broadcast(), c);
        a.root = i64(c.getRoot());
        return emit(a);
      })
      .Case([&](BarrierOp c) { return emit(onGroup(A::Barrier(), c)); })
      .Default([](Operation *) { return std::nullopt; });
}

} // namespace md::emitter
