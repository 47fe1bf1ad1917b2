//===- TypeRules.cpp - operand types of plan instructions ---------------===//
//
// The per-opcode rules on dtypes, shapes and size kinds that a kernel relies
// on to index its operands: once the loader has run them, no kernel reads
// past a buffer. They restate the verifiers of docs/dialect.md for the ops
// a plan holds, on buffers instead of tensor types. Persistent state is
// touched only by state_load, state_store, grad_accumulate and grad_total.
//
//===----------------------------------------------------------------------===//

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "runtime/core/ShapeRules.h"
#include "runtime/plan/VerifyInternal.h"

namespace md::plan::detail {
namespace {

using Shape = std::vector<int64_t>;
using Op = fb::Opcode;
constexpr fb::DType I64 = fb::DType::I64;
constexpr fb::DType F32 = fb::DType::F32;
constexpr fb::DType F64 = fb::DType::F64;

Shape shapeOf(const fb::Buffer &b) {
  Shape shape;
  for (uint32_t i = 0; i < count(b.shape()); ++i)
    shape.push_back(b.shape()->Get(i));
  return shape;
}

std::string describe(const fb::Buffer &b) {
  if (b.size_kind() == fb::SizeKind::Shard)
    return absl::StrFormat("%s shard(%d, %s)", DTypeName(b.dtype()), b.numel(),
                           GroupName(b.group()));
  return absl::StrFormat("%s[%s]", DTypeName(b.dtype()),
                         absl::StrJoin(shapeOf(b), ", "));
}

std::string describeShape(const Shape &shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

/// Checks one instruction. Operand accessors are valid because the loader
/// verified indices and arity first.
class Rule {
public:
  Rule(const fb::Plan &plan, const fb::Instruction &inst,
       const OpcodeInfo &info, absl::string_view path)
      : plan_(plan), inst_(inst), info_(info), path_(path) {}

  absl::Status check();

private:
  // --- operands -----------------------------------------------------------
  uint32_t ins() const { return count(inst_.inputs()); }
  uint32_t outs() const { return count(inst_.outputs()); }
  int32_t inIndex(uint32_t k) const { return inst_.inputs()->Get(k); }
  int32_t outIndex(uint32_t k) const { return inst_.outputs()->Get(k); }
  const fb::Buffer &in(uint32_t k) const {
    return *plan_.buffers()->Get(inIndex(k));
  }
  const fb::Buffer &out(uint32_t k) const {
    return *plan_.buffers()->Get(outIndex(k));
  }
  int64_t intAttr(uint32_t k) const { return inst_.ints()->Get(k); }
  double floatAttr(uint32_t k) const { return inst_.floats()->Get(k); }

  /// "inputs[1]" or "outputs[0]", with its buffer.
  struct Ref {
    bool input;
    uint32_t k;
  };
  static Ref I(uint32_t k) { return {true, k}; }
  static Ref O(uint32_t k) { return {false, k}; }
  const fb::Buffer &buf(Ref r) const { return r.input ? in(r.k) : out(r.k); }
  std::string name(Ref r) const {
    return absl::StrFormat("%s.%s[%d]", path_, r.input ? "inputs" : "outputs",
                           r.k);
  }

  template <typename... Args>
  absl::Status fail(Ref r, const absl::FormatSpec<Args...> &format,
                    const Args &...args) const {
    return absl::InvalidArgumentError(
        absl::StrCat(name(r), ": ", info_.name, ": buffer ",
                     r.input ? inIndex(r.k) : outIndex(r.k), " is ",
                     describe(buf(r)), ", ", absl::StrFormat(format, args...)));
  }
  template <typename... Args>
  absl::Status failAttr(const absl::FormatSpec<Args...> &format,
                        const Args &...args) const {
    return absl::InvalidArgumentError(absl::StrCat(
        path_, ": ", info_.name, ": ", absl::StrFormat(format, args...)));
  }

  // --- building blocks ------------------------------------------------------
  absl::Status full(Ref r) const {
    if (buf(r).size_kind() != fb::SizeKind::Full)
      return fail(r, "but must be a full buffer");
    return absl::OkStatus();
  }
  absl::Status fullFloat(Ref r) const {
    MD_RETURN_IF_ERROR(full(r));
    return isFloat(buf(r).dtype()) ? absl::OkStatus()
                                   : fail(r, "but must be a float tensor");
  }
  absl::Status floating(Ref r) const {
    return isFloat(buf(r).dtype()) ? absl::OkStatus()
                                   : fail(r, "but must be a float tensor");
  }
  absl::Status fullInt(Ref r) const {
    MD_RETURN_IF_ERROR(full(r));
    fb::DType t = buf(r).dtype();
    if (t != fb::DType::I32 && t != fb::DType::I64)
      return fail(r, "but must be an i32 or i64 tensor");
    return absl::OkStatus();
  }
  absl::Status rankAtLeast(Ref r, uint32_t rank) const {
    MD_RETURN_IF_ERROR(full(r));
    if (count(buf(r).shape()) < rank)
      return fail(r, "but must have at least %d dims", rank);
    return absl::OkStatus();
  }
  absl::Status rankIs(Ref r, uint32_t rank) const {
    MD_RETURN_IF_ERROR(full(r));
    if (count(buf(r).shape()) != rank)
      return fail(r, "but must have %d dims", rank);
    return absl::OkStatus();
  }
  /// A single value (a full buffer of one element) of a dtype in `allowed`
  /// (any when empty).
  absl::Status scalar(Ref r,
                      std::initializer_list<fb::DType> allowed = {}) const {
    const fb::Buffer &b = buf(r);
    if (b.size_kind() != fb::SizeKind::Full || b.numel() != 1)
      return fail(r, "but must be a single value");
    if (allowed.size() != 0 &&
        std::find(allowed.begin(), allowed.end(), b.dtype()) == allowed.end()) {
      std::vector<std::string> names;
      for (fb::DType t : allowed)
        names.push_back(DTypeName(t));
      return fail(r, "but must be %s", absl::StrJoin(names, " or "));
    }
    return absl::OkStatus();
  }
  static bool sameLayout(const fb::Buffer &a, const fb::Buffer &b) {
    if (a.size_kind() != b.size_kind() || a.numel() != b.numel())
      return false;
    if (a.size_kind() == fb::SizeKind::Shard)
      return a.group() == b.group();
    return shapeOf(a) == shapeOf(b);
  }
  /// `r` has the layout (size kind, shape or shard) of `like`.
  absl::Status layoutOf(Ref r, Ref like) const {
    if (!sameLayout(buf(r), buf(like)))
      return fail(r, "but must have the size of %s (%s)", name(like),
                  describe(buf(like)));
    return absl::OkStatus();
  }
  /// `r` has the layout and dtype of `like`.
  absl::Status typeOf(Ref r, Ref like) const {
    if (!sameLayout(buf(r), buf(like)) || buf(r).dtype() != buf(like).dtype())
      return fail(r, "but must be %s like %s", describe(buf(like)), name(like));
    return absl::OkStatus();
  }
  absl::Status dtypeOf(Ref r, Ref like) const {
    if (buf(r).dtype() != buf(like).dtype())
      return fail(r, "but must be %s like %s", DTypeName(buf(like).dtype()),
                  name(like));
    return absl::OkStatus();
  }
  absl::Status shapeIs(Ref r, const Shape &shape) const {
    MD_RETURN_IF_ERROR(full(r));
    if (shapeOf(buf(r)) != shape)
      return fail(r, "but must have shape %s", describeShape(shape));
    return absl::OkStatus();
  }
  /// floats[k] against its slot's kind in Opcodes.def.
  absl::Status floatSlot(uint32_t k) const {
    const char *what = info_.floatNames[k];
    switch (info_.floatKind(k)) {
    case FloatAttr::Any:
      return absl::OkStatus();
    case FloatAttr::Positive:
      return positiveFloat(k, what);
    case FloatAttr::NonNegative:
      return nonNegativeFloat(k, what);
    case FloatAttr::Bound: // VerifyInstructions refused NaN
      return absl::OkStatus();
    case FloatAttr::UnitInterval:
      return unitInterval(k, what);
    }
    return absl::OkStatus();
  }
  absl::Status positiveFloat(uint32_t k, const char *what) const {
    if (!(floatAttr(k) > 0))
      return failAttr("floats[%d] (%s) %g is not positive", k, what,
                      floatAttr(k));
    return absl::OkStatus();
  }
  absl::Status nonNegativeFloat(uint32_t k, const char *what) const {
    if (!(floatAttr(k) >= 0))
      return failAttr("floats[%d] (%s) %g is negative", k, what, floatAttr(k));
    return absl::OkStatus();
  }
  absl::Status unitInterval(uint32_t k, const char *what) const {
    if (!(floatAttr(k) >= 0 && floatAttr(k) < 1))
      return failAttr("floats[%d] (%s) %g is not in [0, 1)", k, what,
                      floatAttr(k));
    return absl::OkStatus();
  }
  /// A dim attribute in [-rank, rank), normalised.
  absl::Status dimAttr(uint32_t k, size_t rank, int64_t *dim) const {
    int64_t d = intAttr(k);
    int64_t r = static_cast<int64_t>(rank);
    if (d < -r || d >= r)
      return failAttr("ints[%d]: dim %d out of range for rank %d", k, d, r);
    *dim = d < 0 ? d + r : d;
    return absl::OkStatus();
  }

  // --- rules -----------------------------------------------------------------
  /// The operands' types and what relates an attribute to them.
  absl::Status operands();
  /// Every float slot against its kind, then what relates slots.
  absl::Status slots();
  absl::Status state();
  absl::Status matmulShape(Ref a, Ref b, Shape *result) const;
  absl::Status reduction(const Shape &x, Shape *reduced) const;
  absl::Status norm();
  absl::Status normGrad(uint32_t gradients);
  absl::Status collective();
  absl::Status constant();
  // One rule per opcode, or per opcodes that share one, by family; each row
  // of Opcodes.def names its rule, and operands() calls it.
  /// Nothing to check beyond the layout (io and control whose operands
  /// any type will do).
  absl::Status none() { return absl::OkStatus(); }
  // compute
  /// out = f(x) elementwise: a floating x, out of x's type.
  absl::Status unary();
  absl::Status matmul();
  absl::Status matmulGrad();
  absl::Status binary();
  absl::Status softmax();
  absl::Status unaryGrad();
  absl::Status batchNorm();
  absl::Status batchNormGrad();
  absl::Status attention();
  absl::Status embedding();
  absl::Status embeddingGrad();
  absl::Status crossEntropy();
  absl::Status reduce(Ref whole, Ref reduced);
  absl::Status sumTo();
  absl::Status reshape();
  absl::Status transpose();
  absl::Status arange();
  /// md.slice's x (inputs[0]) and out, md.slice_grad's dx (outputs[0]) and
  /// dy: `sliced` is `whole` sliced by the axis, start and step slots.
  absl::Status sliceOf(Ref whole, Ref sliced);
  absl::Status slice() { return sliceOf(I(0), O(0)); }
  absl::Status sliceGrad() { return sliceOf(O(0), I(0)); }
  absl::Status concat();
  absl::Status expand();
  absl::Status accumulate();
  // optimizer
  absl::Status adamw();
  absl::Status sgd();
  /// An update's optional `unit` slot (parameter groups): a unit of the
  /// plan whose flat buffer the operands are.
  absl::Status updateUnit();
  absl::Status globalNorm();
  absl::Status clip();
  // buffers
  absl::Status cast();
  absl::Status flatten();
  absl::Status view();
  absl::Status shardSlice();
  // state and the step
  absl::Status batch();
  absl::Status gradAccumulate();
  absl::Status gradTotal();
  // values of the run
  absl::Status lr();
  absl::Status fileExists();
  // host scalars
  absl::Status scalarArith();
  absl::Status scalarCompare();
  absl::Status scalarConvert();
  // io and control
  absl::Status evaluate();
  absl::Status ifOp();
  absl::Status forOp();

  const fb::Plan &plan_;
  const fb::Instruction &inst_;
  const OpcodeInfo &info_;
  absl::string_view path_;
};

/// Persistent buffers appear only in the state slot of the state opcodes.
absl::Status Rule::state() {
  auto allowed = [&](Ref r) {
    switch (inst_.opcode()) {
    case fb::Opcode::StateLoad:
    case fb::Opcode::GradTotal:
      return r.input &&
             r.k == (inst_.opcode() == fb::Opcode::StateLoad ? 0u : 1u);
    case fb::Opcode::StateStore:
    case fb::Opcode::GradAccumulate:
      return !r.input && r.k == 0;
    default:
      return false;
    }
  };
  for (uint32_t k = 0; k < ins() + outs(); ++k) {
    Ref r = k < ins() ? I(k) : O(k - ins());
    bool persistent = buf(r).role() != fb::StateRole::None;
    if (persistent && !allowed(r))
      return fail(r,
                  "persistent state (%s): only state_load, state_store, "
                  "grad_accumulate and "
                  "grad_total touch state",
                  StateRoleName(buf(r).role()));
    if (!persistent && allowed(r))
      return fail(r, "but must be persistent state");
  }
  return absl::OkStatus();
}

/// The result shape of matmul(a, b) with the transposes of ints[0..1].
absl::Status Rule::matmulShape(Ref ra, Ref rb, Shape *result) const {
  MD_RETURN_IF_ERROR(rankAtLeast(ra, 2));
  MD_RETURN_IF_ERROR(fullFloat(ra));
  MD_RETURN_IF_ERROR(rankAtLeast(rb, 2));
  MD_RETURN_IF_ERROR(fullFloat(rb));
  MD_RETURN_IF_ERROR(dtypeOf(rb, ra));
  const Shape a = shapeOf(buf(ra)), b = shapeOf(buf(rb));
  rules::Matmul r =
      rules::MatmulShapes(a, b, intAttr(0) != 0, intAttr(1) != 0);
  switch (r.problem) {
  case rules::Matmul::Problem::none:
    break;
  case rules::Matmul::Problem::aRank: // rankAtLeast said so
  case rules::Matmul::Problem::bRank:
    return fail(rb, "but must have 2 dims or the %d dims of %s", a.size(),
                name(ra));
  case rules::Matmul::Problem::batch:
    return fail(rb, "but a batched operand needs the batch dims of %s (%s)",
                name(ra), describe(buf(ra)));
  case rules::Matmul::Problem::contraction:
    return fail(rb, "but its contracted dim %d differs from %s's %d", r.kb,
                name(ra), r.ka);
  }
  *result = std::move(r.shape);
  return absl::OkStatus();
}

/// The shape of a mean or sum of `x` over ints[1...] (keepdim in ints[0]).
absl::Status Rule::reduction(const Shape &x, Shape *reduced) const {
  std::vector<int64_t> dims;
  for (uint32_t k = 1; k < count(inst_.ints()); ++k)
    dims.push_back(intAttr(k));
  rules::Reduction r = rules::ReduceDims(x, dims, intAttr(0) != 0);
  switch (r.problem) {
  case rules::Reduction::Problem::none:
    break;
  case rules::Reduction::Problem::empty:
    return failAttr("ints[1...]: no dims to reduce (list every dim to reduce "
                    "to a scalar)");
  case rules::Reduction::Problem::outOfRange:
    return failAttr("ints[%d]: dim %d out of range for rank %d", r.index + 1,
                    r.dim, x.size());
  case rules::Reduction::Problem::twice:
    return failAttr("ints[%d]: dim %d listed twice", r.index + 1, r.dim);
  }
  *reduced = std::move(r.shape);
  return absl::OkStatus();
}

/// layer_norm and rms_norm: x [..., D], gamma [D] and layer_norm's beta [D].
absl::Status Rule::norm() {
  MD_RETURN_IF_ERROR(rankAtLeast(I(0), 1));
  MD_RETURN_IF_ERROR(fullFloat(I(0)));
  Shape x = shapeOf(in(0));
  for (uint32_t k = 1; k < ins(); ++k) {
    MD_RETURN_IF_ERROR(shapeIs(I(k), {x.back()}));
    MD_RETURN_IF_ERROR(dtypeOf(I(k), I(0)));
  }
  return typeOf(O(0), I(0));
}

/// layer_norm_grad and rms_norm_grad: dy, x [..., D], gamma [D] ->
/// dx, dgamma [, dbeta].
absl::Status Rule::normGrad(uint32_t gradients) {
  MD_RETURN_IF_ERROR(rankAtLeast(I(1), 1));
  MD_RETURN_IF_ERROR(fullFloat(I(1)));
  MD_RETURN_IF_ERROR(typeOf(I(0), I(1)));
  Shape x = shapeOf(in(1));
  MD_RETURN_IF_ERROR(shapeIs(I(2), {x.back()}));
  MD_RETURN_IF_ERROR(dtypeOf(I(2), I(1)));
  MD_RETURN_IF_ERROR(typeOf(O(0), I(1)));
  for (uint32_t k = 1; k < gradients; ++k)
    MD_RETURN_IF_ERROR(typeOf(O(k), I(2)));
  return absl::OkStatus();
}

absl::Status Rule::collective() {
  auto group = static_cast<fb::Group>(intAttr(0));
  switch (inst_.opcode()) {
  case fb::Opcode::AllGather:
  case fb::Opcode::ReduceScatter: {
    bool gather = inst_.opcode() == fb::Opcode::AllGather;
    Ref part = gather ? I(0) : O(0), whole = gather ? O(0) : I(0);
    int64_t axis = intAttr(gather ? 2 : 3);
    MD_RETURN_IF_ERROR(dtypeOf(O(0), I(0)));
    MD_RETURN_IF_ERROR(full(whole));
    if (buf(part).size_kind() == fb::SizeKind::Shard) {
      // The flat form: a shard of a 1-D buffer of n elements.
      if (buf(part).group() != group)
        return fail(part, "but the collective's group is %s", GroupName(group));
      if (count(buf(whole).shape()) != 1 ||
          buf(whole).numel() != buf(part).numel())
        return fail(whole,
                    "but must be the 1-D buffer of %d elements %s shards",
                    buf(part).numel(), name(part));
      if (axis != 0)
        return failAttr(
            "axis %d, but a flat shard is gathered or scattered along axis 0",
            axis);
      return absl::OkStatus();
    }
    // The tensor form: dim `axis` of the whole is |group| times the part's
    // (checked when W is bound); the other dims agree.
    Shape p = shapeOf(buf(part)), w = shapeOf(buf(whole));
    if (p.size() != w.size() || axis >= static_cast<int64_t>(p.size()))
      return fail(whole, "but must have the rank of %s (%s) and a dim %d",
                  name(part), describe(buf(part)), axis);
    for (size_t i = 0; i < p.size(); ++i) {
      if (static_cast<int64_t>(i) != axis && p[i] != w[i])
        return fail(whole, "but its dim %d differs from %s's (%s)", i,
                    name(part), describe(buf(part)));
    }
    return absl::OkStatus();
  }
  case fb::Opcode::AllReduce:
  case fb::Opcode::Broadcast:
    return typeOf(O(0), I(0));
  default:
    return absl::OkStatus();
  }
}

absl::Status Rule::constant() {
  const fb::Buffer &y = out(0);
  MD_RETURN_IF_ERROR(full(O(0)));
  uint32_t ints = count(inst_.ints()), floats = count(inst_.floats());
  bool isF = isFloat(y.dtype());
  uint32_t given = isF ? floats : ints, other = isF ? ints : floats;
  if (other != 0 || static_cast<int64_t>(given) != y.numel())
    return fail(
        O(0), "so a constant needs exactly its %d values in %s and none in %s",
        y.numel(), isF ? "floats" : "ints", isF ? "ints" : "floats");
  for (uint32_t k = 0; k < ints; ++k) {
    int64_t v = intAttr(k);
    if ((y.dtype() == fb::DType::Bool && (v < 0 || v > 1)) ||
        (y.dtype() == fb::DType::I32 && (v < INT32_MIN || v > INT32_MAX)))
      return failAttr("ints[%d]: %d does not fit in %s", k, v,
                      DTypeName(y.dtype()));
  }
  return absl::OkStatus();
}

absl::Status Rule::check() {
  MD_RETURN_IF_ERROR(state());
  MD_RETURN_IF_ERROR(operands());
  return slots();
}

absl::Status Rule::slots() {
  for (uint32_t k = 0;
       k < count(inst_.floats()) && k < static_cast<uint32_t>(info_.floats.min);
       ++k)
    MD_RETURN_IF_ERROR(floatSlot(k));
  if (inst_.opcode() == fb::Opcode::SgdUpdate) {
    bool momentum = ins() == 5;
    if (momentum != (floatAttr(0) > 0))
      return failAttr(
          "a momentum buffer is an operand exactly when momentum %g > 0",
          floatAttr(0));
    if (intAttr(0) != 0 && (floatAttr(0) <= 0 || floatAttr(1) != 0))
      return failAttr("nesterov needs momentum > 0 and dampening = 0");
  }
  if (inst_.opcode() == fb::Opcode::AdamWUpdate ||
      inst_.opcode() == fb::Opcode::SgdUpdate)
    return updateUnit();
  return absl::OkStatus();
}

absl::Status Rule::updateUnit() {
  // The unit slot follows the fixed ones (SGD's nesterov).
  uint32_t fixed = inst_.opcode() == fb::Opcode::SgdUpdate ? 1 : 0;
  if (count(inst_.ints()) <= fixed)
    return absl::OkStatus();
  int64_t unit = intAttr(fixed);
  const fb::Optimizer *optimizer =
      plan_.recipe() ? plan_.recipe()->optimizer() : nullptr;
  if (!optimizer || count(optimizer->groups()) == 0)
    return failAttr("ints[%d] (unit) %d, but the optimizer has no parameter "
                    "groups",
                    fixed, unit);
  if (unit >= static_cast<int64_t>(count(plan_.units())))
    return failAttr("ints[%d] (unit) %d is out of range (%d units)", fixed,
                    unit, count(plan_.units()));
  // Full(n) or shard(n, group): n is the whole flat buffer either way.
  int64_t numel = plan_.units()->Get(unit)->numel();
  if (in(0).numel() != numel)
    return failAttr("param has %d elements, but unit %d's flat buffer has %d",
                    in(0).numel(), unit, numel);
  return absl::OkStatus();
}

absl::Status Rule::operands() {
  switch (inst_.opcode()) {
#define MD_OP(Name, Value, Str, Flags, Since, Rule, ...)                       \
  case Op::Name:                                                               \
    return Rule;
#include "runtime/core/Opcodes.def"
  case Op::Invalid:
    break;
  }
  return failAttr("no type rule for this opcode");
}

// --- compute rules ----------------------------------------------------------

/// out = a @ b (+ bias): b's last dim, matmul's result; matmul_gelu's
/// second result, pre, has the type of its first.
absl::Status Rule::unary() {
  MD_RETURN_IF_ERROR(floating(I(0)));
  return typeOf(O(0), I(0));
}

absl::Status Rule::matmul() {
  Shape y;
  MD_RETURN_IF_ERROR(matmulShape(I(0), I(1), &y));
  if (ins() == 3) {
    MD_RETURN_IF_ERROR(shapeIs(I(2), {y.back()}));
    MD_RETURN_IF_ERROR(dtypeOf(I(2), I(0)));
  }
  MD_RETURN_IF_ERROR(shapeIs(O(0), y));
  MD_RETURN_IF_ERROR(dtypeOf(O(0), I(0)));
  if (outs() == 2)
    return typeOf(O(1), O(0));
  return absl::OkStatus();
}

/// dy, a, b: dy has the shape of matmul(a, b).
absl::Status Rule::matmulGrad() {
  // dy, a, b: dy has the shape of matmul(a, b).
  Shape y;
  MD_RETURN_IF_ERROR(matmulShape(I(1), I(2), &y));
  MD_RETURN_IF_ERROR(shapeIs(I(0), y));
  MD_RETURN_IF_ERROR(dtypeOf(I(0), I(1)));
  MD_RETURN_IF_ERROR(typeOf(O(0), I(1)));
  MD_RETURN_IF_ERROR(typeOf(O(1), I(2)));
  if (outs() == 3) {
    MD_RETURN_IF_ERROR(shapeIs(O(2), {y.back()}));
    MD_RETURN_IF_ERROR(dtypeOf(O(2), I(2)));
  }
  return absl::OkStatus();
}

/// add, sub, mul: float operands that broadcast to the output.
absl::Status Rule::binary() {
  MD_RETURN_IF_ERROR(fullFloat(I(0)));
  MD_RETURN_IF_ERROR(fullFloat(I(1)));
  MD_RETURN_IF_ERROR(dtypeOf(I(1), I(0)));
  rules::Broadcast y = rules::BroadcastShapes(shapeOf(in(0)), shapeOf(in(1)));
  if (!y.ok)
    return fail(I(1), "which does not broadcast with inputs[0] (%s)",
                describe(in(0)));
  MD_RETURN_IF_ERROR(shapeIs(O(0), y.shape));
  return dtypeOf(O(0), I(0));
}

absl::Status Rule::softmax() {
  MD_RETURN_IF_ERROR(rankAtLeast(I(0), 1));
  MD_RETURN_IF_ERROR(fullFloat(I(0)));
  int64_t axis = 0;
  MD_RETURN_IF_ERROR(dimAttr(0, count(in(0).shape()), &axis));
  return typeOf(O(0), I(0));
}

/// gelu_grad, relu_grad, softmax_grad: dy like x.
absl::Status Rule::unaryGrad() {
  MD_RETURN_IF_ERROR(floating(I(1)));
  MD_RETURN_IF_ERROR(typeOf(I(0), I(1)));
  if (inst_.opcode() == Op::SoftmaxGrad) {
    MD_RETURN_IF_ERROR(rankAtLeast(I(1), 1));
    int64_t axis = 0;
    MD_RETURN_IF_ERROR(dimAttr(0, count(in(1).shape()), &axis));
  }
  return typeOf(O(0), I(1));
}

absl::Status Rule::batchNorm() {
  MD_RETURN_IF_ERROR(rankAtLeast(I(0), 1));
  MD_RETURN_IF_ERROR(fullFloat(I(0)));
  int64_t c = shapeOf(in(0)).back();
  for (uint32_t k = 1; k < 3; ++k) {
    MD_RETURN_IF_ERROR(shapeIs(I(k), {c}));
    MD_RETURN_IF_ERROR(dtypeOf(I(k), I(0)));
  }
  MD_RETURN_IF_ERROR(typeOf(O(0), I(0)));
  for (uint32_t k = 1; k < 3; ++k) {
    MD_RETURN_IF_ERROR(shapeIs(O(k), {c}));
    if (out(k).dtype() != F32)
      return fail(O(k), "but batch statistics are f32");
  }
  return absl::OkStatus();
}

absl::Status Rule::batchNormGrad() {
  MD_RETURN_IF_ERROR(rankAtLeast(I(1), 1));
  MD_RETURN_IF_ERROR(fullFloat(I(1)));
  MD_RETURN_IF_ERROR(typeOf(I(0), I(1)));
  int64_t c = shapeOf(in(1)).back();
  MD_RETURN_IF_ERROR(shapeIs(I(2), {c}));
  MD_RETURN_IF_ERROR(dtypeOf(I(2), I(1)));
  for (uint32_t k = 3; k < 5; ++k) {
    MD_RETURN_IF_ERROR(shapeIs(I(k), {c}));
    if (in(k).dtype() != F32)
      return fail(I(k), "but batch statistics are f32");
  }
  MD_RETURN_IF_ERROR(typeOf(O(0), I(1)));
  MD_RETURN_IF_ERROR(typeOf(O(1), I(2)));
  return typeOf(O(2), I(2));
}

/// causal_attention and its gradient: q, k, v of [b, t, c].
absl::Status Rule::attention() {
  bool grad = inst_.opcode() == Op::CausalAttentionGrad;
  Ref q = I(grad ? 1 : 0);
  MD_RETURN_IF_ERROR(rankIs(q, 3));
  MD_RETURN_IF_ERROR(fullFloat(q));
  for (uint32_t k = 0; k < ins(); ++k)
    MD_RETURN_IF_ERROR(typeOf(I(k), q));
  const rules::Attention a = rules::AttentionShape(shapeOf(buf(q)), intAttr(0));
  if (a.problem == rules::Attention::Problem::heads)
    return failAttr("ints[0]: %d heads is not a positive count", intAttr(0));
  if (a.problem == rules::Attention::Problem::indivisible)
    return failAttr("ints[0]: %d heads do not divide %d channels", intAttr(0),
                    a.channels);
  if (count(inst_.ints()) > 1 &&
      plan_.schema_version() < kAttentionWindowSchemaVersion)
    return failAttr("ints[1]: a window needs schema_version %d, the plan "
                    "says %d",
                    kAttentionWindowSchemaVersion, plan_.schema_version());
  for (uint32_t k = 0; k < outs(); ++k)
    MD_RETURN_IF_ERROR(typeOf(O(k), q));
  return absl::OkStatus();
}

absl::Status Rule::embedding() {
  MD_RETURN_IF_ERROR(rankIs(I(0), 2));
  MD_RETURN_IF_ERROR(fullFloat(I(0)));
  MD_RETURN_IF_ERROR(fullInt(I(1)));
  Shape y = shapeOf(in(1));
  if (y.size() >= static_cast<size_t>(kMaxRank))
    return fail(I(1), "but has no room for the embedding dim (at most %d dims)",
                kMaxRank);
  y.push_back(shapeOf(in(0))[1]);
  MD_RETURN_IF_ERROR(shapeIs(O(0), y));
  return dtypeOf(O(0), I(0));
}

absl::Status Rule::embeddingGrad() {
  MD_RETURN_IF_ERROR(rankAtLeast(I(0), 1));
  MD_RETURN_IF_ERROR(fullFloat(I(0)));
  MD_RETURN_IF_ERROR(fullInt(I(1)));
  Shape dy = shapeOf(in(0)), ids = shapeOf(in(1));
  if (!std::equal(ids.begin(), ids.end(), dy.begin(), dy.end() - 1) ||
      ids.size() + 1 != dy.size())
    return fail(I(0), "but must be the ids' shape %s plus the embedding dim",
                describeShape(ids));
  MD_RETURN_IF_ERROR(shapeIs(O(0), {intAttr(0), dy.back()}));
  return dtypeOf(O(0), I(0));
}

/// cross_entropy and its gradient.
absl::Status Rule::crossEntropy() {
  bool grad = inst_.opcode() == Op::CrossEntropyGrad;
  uint32_t base = grad ? 1 : 0;
  if (grad)
    MD_RETURN_IF_ERROR(scalar(I(0), {F32}));
  MD_RETURN_IF_ERROR(rankAtLeast(I(base), 1));
  MD_RETURN_IF_ERROR(fullFloat(I(base)));
  MD_RETURN_IF_ERROR(fullInt(I(base + 1)));
  Shape logits = shapeOf(in(base));
  MD_RETURN_IF_ERROR(
      shapeIs(I(base + 1), Shape(logits.begin(), logits.end() - 1)));
  if (grad)
    return typeOf(O(0), I(1));
  return scalar(O(0), {F32});
}

/// mean and sum reduce `whole` (their input) to `reduced` (their output);
/// their gradients run the other way, so they pass the operands swapped.
absl::Status Rule::reduce(Ref whole, Ref reduced) {
  MD_RETURN_IF_ERROR(fullFloat(whole));
  Shape y;
  MD_RETURN_IF_ERROR(reduction(shapeOf(buf(whole)), &y));
  MD_RETURN_IF_ERROR(shapeIs(reduced, y));
  return dtypeOf(reduced, whole);
}

/// The output broadcasts to the gradient it sums.
absl::Status Rule::sumTo() {
  MD_RETURN_IF_ERROR(fullFloat(I(0)));
  MD_RETURN_IF_ERROR(fullFloat(O(0)));
  MD_RETURN_IF_ERROR(dtypeOf(O(0), I(0)));
  if (!rules::BroadcastsTo(shapeOf(out(0)), shapeOf(in(0))))
    return fail(O(0), "which does not broadcast to inputs[0]'s %s",
                describe(in(0)));
  return absl::OkStatus();
}

absl::Status Rule::reshape() {
  MD_RETURN_IF_ERROR(full(I(0)));
  MD_RETURN_IF_ERROR(full(O(0)));
  MD_RETURN_IF_ERROR(dtypeOf(O(0), I(0)));
  if (out(0).numel() != in(0).numel())
    return fail(O(0), "but a reshape keeps the %d elements of inputs[0]",
                in(0).numel());
  return absl::OkStatus();
}

absl::Status Rule::transpose() {
  MD_RETURN_IF_ERROR(full(I(0)));
  Shape x = shapeOf(in(0)), y;
  if (count(inst_.ints()) != x.size())
    return failAttr("ints: a permutation of %d dims has %d entries", x.size(),
                    count(inst_.ints()));
  std::vector<bool> seen(x.size(), false);
  for (uint32_t k = 0; k < x.size(); ++k) {
    int64_t d = intAttr(k);
    if (d >= static_cast<int64_t>(x.size()) || seen[d])
      return failAttr("ints[%d]: %d repeats a dim or is not below rank %d", k,
                      d, x.size());
    seen[d] = true;
    y.push_back(x[d]);
  }
  MD_RETURN_IF_ERROR(shapeIs(O(0), y));
  return dtypeOf(O(0), I(0));
}

absl::Status Rule::sliceOf(Ref whole, Ref sliced) {
  MD_RETURN_IF_ERROR(full(whole));
  MD_RETURN_IF_ERROR(full(sliced));
  MD_RETURN_IF_ERROR(dtypeOf(sliced, whole));
  const Shape x = shapeOf(buf(whole)), y = shapeOf(buf(sliced));
  const int64_t axis = intAttr(0), start = intAttr(1), step = intAttr(2);
  const int64_t count =
      axis < static_cast<int64_t>(y.size()) ? y[axis] : 0;
  rules::Slice r = rules::SliceShape(x, axis, start, step, count);
  switch (r.problem) {
  case rules::Slice::Problem::none:
    break;
  case rules::Slice::Problem::axis:
    return failAttr("ints[0]: axis %d is out of range for %s", axis,
                    describe(buf(whole)));
  case rules::Slice::Problem::step:
  case rules::Slice::Problem::start:
    return failAttr("ints: start %d, step %d", start, step);
  case rules::Slice::Problem::count:
  case rules::Slice::Problem::bounds:
    return fail(sliced,
                "but %d elements from %d by %d along axis %d do not fit in "
                "%s",
                count, start, step, axis, describe(buf(whole)));
  }
  return shapeIs(sliced, r.shape);
}

absl::Status Rule::concat() {
  std::vector<Shape> shapes;
  for (uint32_t k = 0; k < ins(); ++k) {
    MD_RETURN_IF_ERROR(full(I(k)));
    MD_RETURN_IF_ERROR(dtypeOf(I(k), I(0)));
    shapes.push_back(shapeOf(in(k)));
  }
  MD_RETURN_IF_ERROR(dtypeOf(O(0), I(0)));
  std::vector<rules::Dims> dims(shapes.begin(), shapes.end());
  rules::Concat r = rules::ConcatShapes(dims, intAttr(0));
  switch (r.problem) {
  case rules::Concat::Problem::none:
    break;
  case rules::Concat::Problem::overflow:
    return fail(O(0), "but the inputs' sizes along axis %d overflow int64",
                intAttr(0));
  case rules::Concat::Problem::empty:
  case rules::Concat::Problem::axis:
    return failAttr("ints[0]: axis %d is out of range for inputs[0]'s %s",
                    intAttr(0), describe(in(0)));
  case rules::Concat::Problem::rank:
  case rules::Concat::Problem::dims:
    return fail(I(static_cast<uint32_t>(r.index)),
                "but must have the dims of inputs[0]'s %s but at axis %d",
                describe(in(0)), intAttr(0));
  }
  return shapeIs(O(0), r.shape);
}

absl::Status Rule::expand() {
  MD_RETURN_IF_ERROR(full(I(0)));
  MD_RETURN_IF_ERROR(full(O(0)));
  MD_RETURN_IF_ERROR(dtypeOf(O(0), I(0)));
  if (!rules::BroadcastsTo(shapeOf(in(0)), shapeOf(out(0))))
    return fail(O(0), "which inputs[0]'s %s does not broadcast to",
                describe(in(0)));
  return absl::OkStatus();
}

absl::Status Rule::arange() {
  int64_t length = 0;
  if (intAttr(0) >= intAttr(1) ||
      __builtin_sub_overflow(intAttr(1), intAttr(0), &length))
    return failAttr("ints: start %d is not below end %d", intAttr(0),
                    intAttr(1));
  MD_RETURN_IF_ERROR(fullInt(O(0)));
  return shapeIs(O(0), {length});
}

absl::Status Rule::accumulate() {
  MD_RETURN_IF_ERROR(floating(I(0)));
  MD_RETURN_IF_ERROR(floating(I(1)));
  MD_RETURN_IF_ERROR(layoutOf(I(1), I(0)));
  return typeOf(O(0), I(0));
}

// --- optimizer rules --------------------------------------------------------

absl::Status Rule::adamw() {
  MD_RETURN_IF_ERROR(floating(I(0)));
  MD_RETURN_IF_ERROR(floating(I(1)));
  MD_RETURN_IF_ERROR(layoutOf(I(1), I(0)));
  for (uint32_t k = 2; k < 4; ++k) {
    MD_RETURN_IF_ERROR(layoutOf(I(k), I(0)));
    if (in(k).dtype() != F32)
      return fail(I(k), "but optimizer moments are f32");
  }
  MD_RETURN_IF_ERROR(scalar(I(4), {F32}));
  MD_RETURN_IF_ERROR(scalar(I(5), {I64}));
  MD_RETURN_IF_ERROR(typeOf(O(0), I(0)));
  MD_RETURN_IF_ERROR(typeOf(O(1), I(2)));
  return typeOf(O(2), I(3));
}

absl::Status Rule::sgd() {
  bool momentum = ins() == 5;
  MD_RETURN_IF_ERROR(floating(I(0)));
  MD_RETURN_IF_ERROR(floating(I(1)));
  MD_RETURN_IF_ERROR(layoutOf(I(1), I(0)));
  uint32_t lr = momentum ? 3 : 2;
  if (momentum) {
    MD_RETURN_IF_ERROR(layoutOf(I(2), I(0)));
    if (in(2).dtype() != F32)
      return fail(I(2), "but the momentum buffer is f32");
    MD_RETURN_IF_ERROR(typeOf(O(1), I(2)));
  }
  MD_RETURN_IF_ERROR(scalar(I(lr), {F32}));
  MD_RETURN_IF_ERROR(scalar(I(lr + 1), {I64}));
  return typeOf(O(0), I(0));
}

absl::Status Rule::globalNorm() {
  for (uint32_t k = 0; k < ins(); ++k)
    MD_RETURN_IF_ERROR(floating(I(k)));
  return scalar(O(0), {F32});
}

absl::Status Rule::clip() {
  for (uint32_t k = 0; k + 1 < ins(); ++k) {
    MD_RETURN_IF_ERROR(floating(I(k)));
    MD_RETURN_IF_ERROR(typeOf(O(k), I(k)));
  }
  return scalar(I(ins() - 1), {F32});
}

// --- buffer rules -----------------------------------------------------------

absl::Status Rule::cast() {
  // An index buffer converts to a float one (schema_version 7).
  fb::DType from = buf(I(0)).dtype();
  if (from != fb::DType::I32 && from != fb::DType::I64)
    MD_RETURN_IF_ERROR(floating(I(0)));
  else if (plan_.schema_version() < kIndexCastSchemaVersion)
    return fail(I(0), "but a cast from an integer needs schema_version %d, "
                "the plan says %d",
                kIndexCastSchemaVersion, plan_.schema_version());
  MD_RETURN_IF_ERROR(floating(O(0)));
  return layoutOf(O(0), I(0));
}

absl::Status Rule::flatten() {
  MD_RETURN_IF_ERROR(rankIs(O(0), 1));
  int64_t total = 0;
  for (uint32_t k = 0; k < ins(); ++k) {
    MD_RETURN_IF_ERROR(full(I(k)));
    MD_RETURN_IF_ERROR(dtypeOf(I(k), O(0)));
    if (__builtin_add_overflow(total, in(k).numel(), &total))
      return fail(I(k), "and the inputs' element count overflows");
  }
  if (total > out(0).numel())
    return fail(O(0), "too small for the %d elements of the inputs", total);
  return absl::OkStatus();
}

absl::Status Rule::view() {
  MD_RETURN_IF_ERROR(full(I(0)));
  MD_RETURN_IF_ERROR(full(O(0)));
  MD_RETURN_IF_ERROR(dtypeOf(O(0), I(0)));
  int64_t end = 0;
  if (__builtin_add_overflow(intAttr(0), out(0).numel(), &end) ||
      end > in(0).numel())
    return fail(O(0),
                "which at offset %d runs past the %d elements of inputs[0]",
                intAttr(0), in(0).numel());
  return absl::OkStatus();
}

absl::Status Rule::shardSlice() {
  MD_RETURN_IF_ERROR(rankIs(I(0), 1));
  MD_RETURN_IF_ERROR(dtypeOf(O(0), I(0)));
  auto group = static_cast<fb::Group>(intAttr(0));
  if (out(0).size_kind() != fb::SizeKind::Shard ||
      out(0).numel() != in(0).numel() || out(0).group() != group)
    return fail(O(0), "but must be shard(%d, %s)", in(0).numel(),
                GroupName(group));
  return absl::OkStatus();
}

// --- state and step rules ---------------------------------------------------

absl::Status Rule::batch() {
  for (uint32_t k = 0; k < outs(); ++k)
    MD_RETURN_IF_ERROR(full(O(k)));
  return absl::OkStatus();
}

absl::Status Rule::gradAccumulate() {
  if (out(0).role() != fb::StateRole::GradAcc)
    return fail(O(0), "but grad_accumulate writes a grad_acc state");
  MD_RETURN_IF_ERROR(floating(I(0)));
  return layoutOf(I(0), O(0));
}

absl::Status Rule::gradTotal() {
  if (in(1).role() != fb::StateRole::GradAcc)
    return fail(I(1), "but grad_total reads a grad_acc state");
  MD_RETURN_IF_ERROR(floating(I(0)));
  MD_RETURN_IF_ERROR(layoutOf(I(0), I(1)));
  return typeOf(O(0), I(1));
}

// --- values of the run rules ------------------------------------------------

absl::Status Rule::lr() {
  MD_RETURN_IF_ERROR(scalar(I(0), {I64}));
  return scalar(O(0), {F32});
}

absl::Status Rule::fileExists() {
  if (str(inst_.strings()->Get(0)).empty())
    return failAttr("strings[0]: the path is empty");
  return scalar(O(0), {fb::DType::Bool});
}

// --- host scalars rules -----------------------------------------------------

absl::Status Rule::scalarArith() {
  for (uint32_t k = 0; k < ins(); ++k) {
    MD_RETURN_IF_ERROR(scalar(I(k)));
    MD_RETURN_IF_ERROR(dtypeOf(I(k), O(0)));
  }
  MD_RETURN_IF_ERROR(scalar(O(0)));
  auto kind = static_cast<fb::ArithKind>(intAttr(0));
  bool logical = kind == fb::ArithKind::And || kind == fb::ArithKind::Or ||
                 kind == fb::ArithKind::Xor || kind == fb::ArithKind::Not;
  if (logical && !isInteger(out(0).dtype()))
    return fail(O(0), "but %s needs integers or bools",
                fb::EnumNameArithKind(kind));
  return absl::OkStatus();
}

absl::Status Rule::scalarCompare() {
  MD_RETURN_IF_ERROR(scalar(I(0)));
  MD_RETURN_IF_ERROR(scalar(I(1)));
  MD_RETURN_IF_ERROR(dtypeOf(I(1), I(0)));
  return scalar(O(0), {fb::DType::Bool});
}

// --- io and control rules ---------------------------------------------------

/// The evaluation body yields an f32 loss.
absl::Status Rule::scalarConvert() {
  MD_RETURN_IF_ERROR(scalar(I(0)));
  return scalar(O(0));
}

absl::Status Rule::evaluate() {
  MD_RETURN_IF_ERROR(scalar(O(0), {F32}));
  const fb::Block *body = plan_.blocks()->Get(inst_.blocks()->Get(0));
  const fb::Instruction *yield =
      body->instructions()->Get(count(body->instructions()) - 1);
  const fb::Buffer &loss = *plan_.buffers()->Get(yield->inputs()->Get(0));
  if (loss.size_kind() != fb::SizeKind::Full || loss.numel() != 1 ||
      loss.dtype() != F32)
    return failAttr("blocks[0]: the evaluation body yields %s, not an f32 loss",
                    describe(loss));
  return absl::OkStatus();
}

/// Each branch yields what the if returns.
absl::Status Rule::ifOp() {
  MD_RETURN_IF_ERROR(scalar(I(0), {fb::DType::Bool}));
  for (uint32_t k = 0; k < count(inst_.blocks()) && outs() > 0; ++k) {
    const fb::Block *branch = plan_.blocks()->Get(inst_.blocks()->Get(k));
    const fb::Instruction *yield =
        branch->instructions()->Get(count(branch->instructions()) - 1);
    for (uint32_t r = 0; r < outs(); ++r) {
      const fb::Buffer &value = *plan_.buffers()->Get(yield->inputs()->Get(r));
      if (!sameLayout(value, out(r)) || value.dtype() != out(r).dtype())
        return fail(O(r), "but blocks[%d] yields %s for it", k,
                    describe(value));
    }
  }
  return absl::OkStatus();
}

absl::Status Rule::forOp() {
  MD_RETURN_IF_ERROR(scalar(I(0), {I64}));
  MD_RETURN_IF_ERROR(scalar(I(1), {I64}));
  return scalar(O(0), {I64});
}

} // namespace

absl::Status CheckOperandTypes(const fb::Plan &plan,
                               const fb::Instruction &inst,
                               const OpcodeInfo &info, absl::string_view path) {
  return Rule(plan, inst, info, path).check();
}

absl::Status CheckWorldTypes(const fb::Plan &plan, const fb::Instruction &inst,
                             const WorldBinding &world,
                             absl::string_view path) {
  auto group = static_cast<fb::Group>(inst.ints()->Get(0));
  int64_t size = world.groupSize(group);
  auto buffer =
      [&](const flatbuffers::Vector<int32_t> *list) -> const fb::Buffer & {
    return *plan.buffers()->Get(list->Get(0));
  };
  switch (inst.opcode()) {
  case fb::Opcode::AllGather:
  case fb::Opcode::ReduceScatter: {
    bool gather = inst.opcode() == fb::Opcode::AllGather;
    const fb::Buffer &part =
        gather ? buffer(inst.inputs()) : buffer(inst.outputs());
    const fb::Buffer &whole =
        gather ? buffer(inst.outputs()) : buffer(inst.inputs());
    if (part.size_kind() == fb::SizeKind::Shard)
      return absl::OkStatus();
    int64_t axis = inst.ints()->Get(gather ? 2 : 3);
    int64_t expected = 0;
    if (__builtin_mul_overflow(part.shape()->Get(axis), size, &expected) ||
        expected != whole.shape()->Get(axis))
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: %s over %s (%d ranks at world size %d): dim %d of the %s buffer "
          "is %d, not %d x "
          "%d",
          path, gather ? "all_gather" : "reduce_scatter", GroupName(group),
          size, world.worldSize, axis, gather ? "gathered" : "scattered",
          whole.shape()->Get(axis), size, part.shape()->Get(axis)));
    return absl::OkStatus();
  }
  case fb::Opcode::Broadcast:
    if (inst.ints()->Get(2) >= size)
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s.ints[2]: broadcast root %d is not a rank of %s (%d ranks at "
          "world size %d)",
          path, inst.ints()->Get(2), GroupName(group), size, world.worldSize));
    return absl::OkStatus();
  default:
    return absl::OkStatus();
  }
}

} // namespace md::plan::detail
