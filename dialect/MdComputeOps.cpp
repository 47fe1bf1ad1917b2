//===- MdComputeOps.cpp - md compute ops
//-------------------------------------===//
//
// Verifiers, builders and folders of the compute ops. Shapes are checked
// where they are static; a dynamic dim (`?`) is compatible with anything.
//
//===----------------------------------------------------------------------===//

#include "dialect/MdAsmUtils.h"
#include "dialect/MdOps.h"
#include "runtime/core/ShapeRules.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/PatternMatch.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallBitVector.h"
#include "llvm/Support/Format.h"

using namespace mlir;
using namespace md;

#define GET_OP_CLASSES
#include "dialect/MdComputeOps.cpp.inc"

//===----------------------------------------------------------------------===//
// Shared helpers
//===----------------------------------------------------------------------===//

/// A type as IR spells it, without the quotes diagnostics put around types:
/// "tensor<8x768xf32>".
static std::string str(Type type) {
  std::string out;
  llvm::raw_string_ostream os(out);
  type.print(os);
  return out;
}

/// "[0, 1]".
static std::string str(ArrayRef<int64_t> list) {
  std::string out = "[";
  llvm::raw_string_ostream os(out);
  llvm::interleaveComma(list, os);
  os << "]";
  return out;
}

static RankedTensorType tensorType(Value value) {
  return cast<RankedTensorType>(value.getType());
}

// The shape rules are runtime/core/ShapeRules.h's, shared with the plan
// loader and the kernels; MLIR's unknown dim is theirs.
static_assert(ShapedType::kDynamic == md::rules::kDynamic);

static md::rules::Dims dims(ArrayRef<int64_t> shape) {
  return md::rules::Dims(shape.data(), shape.size());
}

static bool shapesCompatible(ArrayRef<int64_t> a, ArrayRef<int64_t> b) {
  return md::rules::ShapesCompatible(dims(a), dims(b));
}

/// Checks that `actual` is a tensor of `shape` and `elementType`, else
/// reports "<name> must be tensor<...> (<why>), got tensor<...>".
static LogicalResult expectType(Operation *op, StringRef name, Type actual,
                                ArrayRef<int64_t> shape, Type elementType,
                                const Twine &why) {
  auto tensor = cast<RankedTensorType>(actual);
  if (tensor.getElementType() == elementType &&
      shapesCompatible(tensor.getShape(), shape))
    return success();
  return op->emitOpError() << name << " must be "
                           << str(RankedTensorType::get(shape, elementType))
                           << " (" << why.str() << "), got " << str(actual);
}

static LogicalResult verifyMinRank(Operation *op, StringRef name, Type type,
                                   int64_t minRank) {
  if (cast<RankedTensorType>(type).getRank() >= minRank)
    return success();
  return op->emitOpError() << name << " must have rank >= " << minRank
                           << ", got " << str(type);
}

/// Checks a per-feature vector (gamma, beta, batch statistics) against the
/// last dim of `x`: it must be [D], with `elementType` or else x's.
static LogicalResult verifyLastDimVector(Operation *op, StringRef name,
                                         Type vector, Type x,
                                         Type elementType = {}) {
  auto xType = cast<RankedTensorType>(x);
  if (!elementType)
    elementType = xType.getElementType();
  return expectType(op, name, vector, {xType.getShape().back()}, elementType,
                    "the last dim of x " + str(x));
}

/// `axis` in [-rank, rank) counted from the end when negative; returns it in
/// [0, rank).
static FailureOr<int64_t> normalizeAxis(Operation *op, StringRef name,
                                        int64_t axis, Type type) {
  int64_t rank = cast<RankedTensorType>(type).getRank();
  std::optional<int64_t> normalized = md::rules::NormalizeAxis(axis, rank);
  if (!normalized) {
    op->emitOpError() << name << " " << axis << " is out of range for "
                      << str(type) << " of rank " << rank;
    return failure();
  }
  return *normalized;
}

std::optional<SmallVector<int64_t>> md::broadcastShapes(ArrayRef<int64_t> a,
                                                        ArrayRef<int64_t> b) {
  md::rules::Broadcast r = md::rules::BroadcastShapes(dims(a), dims(b));
  if (!r.ok)
    return std::nullopt;
  return SmallVector<int64_t>(r.shape.begin(), r.shape.end());
}

/// True when `from` broadcasts to `to` without changing `to`.
static bool broadcastsTo(ArrayRef<int64_t> from, ArrayRef<int64_t> to) {
  return md::rules::BroadcastsTo(dims(from), dims(to));
}

/// Validates the `dims` of a reduction of `type` (not empty, in range,
/// distinct) and returns the reduced shape.
static FailureOr<SmallVector<int64_t>>
reducedShape(Operation *op, Type type, ArrayRef<int64_t> dims, bool keepdim) {
  auto tensor = cast<RankedTensorType>(type);
  md::rules::Reduction r = md::rules::ReduceDims(
      ::dims(tensor.getShape()), md::rules::Dims(dims.data(), dims.size()),
      keepdim);
  switch (r.problem) {
  case md::rules::Reduction::Problem::none:
    break;
  case md::rules::Reduction::Problem::empty:
    op->emitOpError("dims must not be empty; list every dim to reduce to a "
                    "scalar");
    return failure();
  case md::rules::Reduction::Problem::outOfRange:
    op->emitOpError() << "dim " << r.dim << " is out of range for "
                      << str(type) << " of rank " << tensor.getRank();
    return failure();
  case md::rules::Reduction::Problem::twice:
    op->emitOpError() << "dims " << str(dims) << " list dim "
                      << *md::rules::NormalizeAxis(r.dim, tensor.getRank())
                      << " twice";
    return failure();
  }
  return SmallVector<int64_t>(r.shape.begin(), r.shape.end());
}

/// A flag that says whether an optional result is present must agree with it.
static LogicalResult verifyOptionalResult(Operation *op, StringRef flag,
                                          bool set, StringRef result,
                                          Value value) {
  if (set && !value)
    return op->emitOpError()
           << flag << " is set but there is no " << result << " result";
  if (!set && value)
    return op->emitOpError()
           << "has a " << result << " result but " << flag << " is not set";
  return success();
}

static LogicalResult verifyEps(Operation *op, const APFloat &eps) {
  double value = eps.convertToDouble();
  if (value > 0)
    return success();
  std::string text;
  llvm::raw_string_ostream(text) << llvm::format("%g", value);
  return op->emitOpError() << "eps must be > 0, got " << text;
}

/// C of a [B, T, C] attention operand must split into `numHeads` heads.
static LogicalResult verifyHeads(Operation *op, Type type, int64_t numHeads) {
  md::rules::Attention r = md::rules::AttentionShape(
      dims(cast<RankedTensorType>(type).getShape()), numHeads);
  if (r.problem != md::rules::Attention::Problem::indivisible)
    return success(); // the rank and num_heads are ODS's constraints
  return op->emitOpError() << "C = " << r.channels << " of " << str(type)
                           << " is not divisible by num_heads = " << numHeads;
}

/// Targets of a cross-entropy: the leading dims of the logits.
static LogicalResult verifyTargets(Operation *op, Type logits, Type targets) {
  if (failed(verifyMinRank(op, "logits", logits, 1)))
    return failure();
  auto logitsType = cast<RankedTensorType>(logits);
  return expectType(op, "targets", targets, logitsType.getShape().drop_back(),
                    cast<RankedTensorType>(targets).getElementType(),
                    "the leading dims of logits " + str(logits));
}

//===----------------------------------------------------------------------===//
// Matmul
//===----------------------------------------------------------------------===//

/// The shape of op_a(a) · op_b(b), assuming the operands are valid.
static SmallVector<int64_t> matmulShape(RankedTensorType a, RankedTensorType b,
                                        bool transposeA, bool transposeB) {
  md::rules::Matmul r = md::rules::MatmulShapes(
      dims(a.getShape()), dims(b.getShape()), transposeA, transposeB);
  return SmallVector<int64_t>(r.shape.begin(), r.shape.end());
}

/// Checks the operands of a matmul (shared by md.matmul and md.matmul_grad)
/// and returns the shape of the product.
template <typename OpT>
static FailureOr<SmallVector<int64_t>> verifyMatmulOperands(OpT op) {
  auto a = cast<RankedTensorType>(op.getA().getType());
  auto b = cast<RankedTensorType>(op.getB().getType());
  bool transposeA = op.getTransposeA(), transposeB = op.getTransposeB();
  if (failed(verifyMinRank(op, "lhs", a, 2)))
    return failure();
  md::rules::Matmul r = md::rules::MatmulShapes(
      dims(a.getShape()), dims(b.getShape()), transposeA, transposeB);
  switch (r.problem) {
  case md::rules::Matmul::Problem::none:
    break;
  case md::rules::Matmul::Problem::aRank: // verifyMinRank said so
  case md::rules::Matmul::Problem::bRank:
    op->emitOpError() << "rhs must have rank 2 or the rank of lhs ("
                      << a.getRank() << "), got " << str(b);
    return failure();
  case md::rules::Matmul::Problem::batch:
    op->emitOpError() << "batch dimensions differ: lhs " << str(a) << ", rhs "
                      << str(b);
    return failure();
  case md::rules::Matmul::Problem::contraction:
    op->emitOpError() << "contracting dimensions differ: lhs " << str(a)
                      << " has K = " << r.ka << ", rhs " << str(b)
                      << " has K = " << r.kb;
    return failure();
  }
  return SmallVector<int64_t>(r.shape.begin(), r.shape.end());
}

void MatmulOp::build(OpBuilder &builder, OperationState &state, Value a,
                     Value b, Value bias, bool transposeA, bool transposeB) {
  RankedTensorType aType = tensorType(a);
  auto resultType = RankedTensorType::get(
      matmulShape(aType, tensorType(b), transposeA, transposeB),
      aType.getElementType());
  build(builder, state, resultType, a, b, bias, transposeA, transposeB);
}

/// md.matmul and md.matmul_gelu: the operands, the optional bias [N] and
/// the product's type, which `result` (named `name`) must have.
template <typename OpT>
static LogicalResult verifyMatmulProduct(OpT op, Type result, StringRef name) {
  FailureOr<SmallVector<int64_t>> shape = verifyMatmulOperands(op);
  if (failed(shape))
    return failure();
  Type elementType = op.getA().getType().getElementType();
  if (op.getBias() &&
      failed(expectType(op, "bias", op.getBias().getType(), {shape->back()},
                        elementType, "N of rhs " + str(op.getB().getType()))))
    return failure();
  return expectType(op, name, result, *shape, elementType,
                    "the product of lhs " + str(op.getA().getType()) +
                        " and rhs " + str(op.getB().getType()));
}

LogicalResult MatmulOp::verify() {
  return verifyMatmulProduct(*this, getType(), "result");
}

LogicalResult MatmulGeluOp::verify() {
  return verifyMatmulProduct(*this, getOut().getType(), "out");
}

LogicalResult MatmulGradOp::verify() {
  FailureOr<SmallVector<int64_t>> shape = verifyMatmulOperands(*this);
  if (failed(shape))
    return failure();
  Type elementType = getA().getType().getElementType();
  if (failed(expectType(*this, "dy", getDy().getType(), *shape, elementType,
                        "the product of lhs " + str(getA().getType()) +
                            " and rhs " + str(getB().getType()))) ||
      failed(verifyOptionalResult(*this, "has_bias", getHasBias(), "dbias",
                                  getDbias())))
    return failure();
  if (getDbias())
    return expectType(*this, "dbias", getDbias().getType(), {shape->back()},
                      elementType, "N of rhs " + str(getB().getType()));
  return success();
}

//===----------------------------------------------------------------------===//
// Elementwise ops
//===----------------------------------------------------------------------===//

static LogicalResult verifyBroadcastBinary(Operation *op, Value lhs, Value rhs,
                                           Value result) {
  RankedTensorType lhsType = tensorType(lhs), rhsType = tensorType(rhs);
  std::optional<SmallVector<int64_t>> shape =
      broadcastShapes(lhsType.getShape(), rhsType.getShape());
  if (!shape)
    return op->emitOpError() << "incompatible shapes for broadcasting: lhs "
                             << str(lhsType) << ", rhs " << str(rhsType);
  return expectType(
      op, "result", result.getType(), *shape, lhsType.getElementType(),
      "the broadcast of lhs " + str(lhsType) + " and rhs " + str(rhsType));
}

/// The broadcast result type for the builders; assumes compatible shapes.
static Type broadcastType(Value lhs, Value rhs) {
  RankedTensorType lhsType = tensorType(lhs);
  std::optional<SmallVector<int64_t>> shape =
      broadcastShapes(lhsType.getShape(), tensorType(rhs).getShape());
  assert(shape && "incompatible shapes for broadcasting");
  return RankedTensorType::get(*shape, lhsType.getElementType());
}

#define MD_BROADCAST_BINARY_OP(OP)                                             \
  void OP::build(OpBuilder &builder, OperationState &state, Value lhs,         \
                 Value rhs) {                                                  \
    build(builder, state, broadcastType(lhs, rhs), lhs, rhs);                  \
  }                                                                            \
  LogicalResult OP::verify() {                                                 \
    return verifyBroadcastBinary(*this, getLhs(), getRhs(), getResult());      \
  }
MD_BROADCAST_BINARY_OP(AddOp)
MD_BROADCAST_BINARY_OP(SubOp)
MD_BROADCAST_BINARY_OP(MulOp)
MD_BROADCAST_BINARY_OP(DivOp)
MD_BROADCAST_BINARY_OP(MaximumOp)
MD_BROADCAST_BINARY_OP(MinimumOp)
#undef MD_BROADCAST_BINARY_OP

OpFoldResult ScaleOp::fold(FoldAdaptor) {
  if (getFactor().convertToDouble() == 1.0)
    return getX();
  // scale(scale(x, a), b) = scale(x, a * b).
  if (auto inner = getX().getDefiningOp<ScaleOp>()) {
    double factor =
        inner.getFactor().convertToDouble() * getFactor().convertToDouble();
    getXMutable().assign(inner.getX());
    setFactorAttr(FloatAttr::get(Float64Type::get(getContext()), factor));
    return getResult();
  }
  return {};
}

LogicalResult AccumulateOp::verify() {
  if (shapesCompatible(getAcc().getType().getShape(),
                       getG().getType().getShape()))
    return success();
  return emitOpError() << "shapes differ: acc " << str(getAcc().getType())
                       << ", g " << str(getG().getType());
}

//===----------------------------------------------------------------------===//
// Normalisations and softmax
//===----------------------------------------------------------------------===//

/// The eps, x and gamma every layer and RMS norm and its gradient take.
template <typename OpT> static LogicalResult verifyNormOperands(OpT op) {
  if (failed(verifyEps(op, op.getEps())) ||
      failed(verifyMinRank(op, "x", op.getX().getType(), 1)))
    return failure();
  return verifyLastDimVector(op, "gamma", op.getGamma().getType(),
                             op.getX().getType());
}

LogicalResult LayerNormOp::verify() {
  if (failed(verifyNormOperands(*this)))
    return failure();
  if (getBeta())
    return verifyLastDimVector(*this, "beta", getBeta().getType(),
                               getX().getType());
  return success();
}

LogicalResult LayerNormGradOp::verify() {
  if (failed(verifyNormOperands(*this)) ||
      failed(verifyOptionalResult(*this, "has_beta", getHasBeta(), "dbeta",
                                  getDbeta())))
    return failure();
  if (getDbeta() && getDbeta().getType() != getGamma().getType())
    return emitOpError() << "dbeta must have the type of gamma "
                         << str(getGamma().getType()) << ", got "
                         << str(getDbeta().getType());
  return success();
}

LogicalResult RmsNormOp::verify() { return verifyNormOperands(*this); }

LogicalResult RmsNormGradOp::verify() { return verifyNormOperands(*this); }

/// x [N, ..., C], gamma [C] (x's element type), mean/invstd f32 [C].
static LogicalResult verifyBatchNormOperands(Operation *op, Type x, Type gamma,
                                             Type mean) {
  if (failed(verifyMinRank(op, "x", x, 2)) ||
      failed(verifyLastDimVector(op, "gamma", gamma, x)))
    return failure();
  return verifyLastDimVector(op, "mean", mean, x,
                             Float32Type::get(op->getContext()));
}

LogicalResult BatchNormOp::verify() {
  if (failed(verifyEps(*this, getEps())))
    return failure();
  return verifyBatchNormOperands(*this, getX().getType(), getGamma().getType(),
                                 getMean().getType());
}

LogicalResult BatchNormGradOp::verify() {
  return verifyBatchNormOperands(*this, getX().getType(), getGamma().getType(),
                                 getMean().getType());
}

LogicalResult SoftmaxOp::verify() {
  return normalizeAxis(*this, "axis", static_cast<int64_t>(getAxis()),
                       getX().getType());
}

LogicalResult SoftmaxGradOp::verify() {
  return normalizeAxis(*this, "axis", static_cast<int64_t>(getAxis()),
                       getY().getType());
}

LogicalResult CausalAttentionOp::verify() {
  return verifyHeads(*this, getQ().getType(), getNumHeads());
}

LogicalResult CausalAttentionGradOp::verify() {
  return verifyHeads(*this, getQ().getType(), getNumHeads());
}

//===----------------------------------------------------------------------===//
// Embedding and loss
//===----------------------------------------------------------------------===//

LogicalResult EmbeddingOp::verify() {
  RankedTensorType table = getTable().getType(), ids = getIds().getType();
  SmallVector<int64_t> shape(ids.getShape());
  shape.push_back(table.getShape().back());
  return expectType(*this, "result", getType(), shape, table.getElementType(),
                    "ids " + str(ids) + " looking up rows of table " +
                        str(table));
}

LogicalResult EmbeddingGradOp::verify() {
  RankedTensorType dy = getDy().getType(), ids = getIds().getType();
  if (dy.getRank() != ids.getRank() + 1 ||
      !shapesCompatible(dy.getShape().drop_back(), ids.getShape()))
    return emitOpError() << "dy " << str(dy) << " must have the shape of ids "
                         << str(ids) << " plus a trailing dim D";
  int64_t v = static_cast<int64_t>(getNumEmbeddings());
  return expectType(*this, "result", getType(), {v, dy.getShape().back()},
                    dy.getElementType(),
                    "num_embeddings = " + Twine(v) +
                        " rows of the last dim of dy " + str(dy));
}

LogicalResult CrossEntropyOp::verify() {
  return verifyTargets(*this, getLogits().getType(), getTargets().getType());
}

LogicalResult CrossEntropyGradOp::verify() {
  return verifyTargets(*this, getLogits().getType(), getTargets().getType());
}

//===----------------------------------------------------------------------===//
// Shape ops
//===----------------------------------------------------------------------===//

LogicalResult ReshapeOp::verify() {
  RankedTensorType in = getX().getType(), out = getType();
  if (!in.hasStaticShape() || !out.hasStaticShape() ||
      in.getNumElements() == out.getNumElements())
    return success();
  return emitOpError() << "element counts differ: x " << str(in) << " has "
                       << in.getNumElements() << ", result " << str(out)
                       << " has " << out.getNumElements();
}

OpFoldResult ReshapeOp::fold(FoldAdaptor) {
  if (getX().getType() == getType())
    return getX();
  // reshape(reshape(x)) = reshape(x).
  if (auto inner = getX().getDefiningOp<ReshapeOp>()) {
    if (inner.getX().getType() == getType())
      return inner.getX();
    getXMutable().assign(inner.getX());
    return getResult();
  }
  return {};
}

LogicalResult TransposeOp::verify() {
  RankedTensorType in = getX().getType();
  ArrayRef<int64_t> perm = getPerm();
  if (static_cast<int64_t>(perm.size()) != in.getRank())
    return emitOpError() << "perm " << str(perm) << " has " << perm.size()
                         << " entries, x " << str(in) << " has rank "
                         << in.getRank();
  llvm::SmallBitVector seen(perm.size());
  for (int64_t p : perm) {
    if (p < 0 || p >= in.getRank() || seen.test(p))
      return emitOpError() << "perm " << str(perm)
                           << " is not a permutation of [0, " << in.getRank()
                           << ")";
    seen.set(p);
  }
  SmallVector<int64_t> shape;
  for (int64_t p : perm)
    shape.push_back(in.getShape()[p]);
  return expectType(*this, "result", getType(), shape, in.getElementType(),
                    "x " + str(in) + " permuted by " + str(perm));
}

OpFoldResult TransposeOp::fold(FoldAdaptor) {
  auto isIdentity = [](ArrayRef<int64_t> perm) {
    for (auto [i, p] : llvm::enumerate(perm))
      if (static_cast<int64_t>(i) != p)
        return false;
    return true;
  };
  if (isIdentity(getPerm()) && getX().getType() == getType())
    return getX();
  // transpose(transpose(x, p1), p2) = transpose(x, p1[p2[i]]).
  if (auto inner = getX().getDefiningOp<TransposeOp>()) {
    ArrayRef<int64_t> innerPerm = inner.getPerm();
    SmallVector<int64_t> composed;
    for (int64_t p : getPerm())
      composed.push_back(innerPerm[p]);
    if (isIdentity(composed) && inner.getX().getType() == getType())
      return inner.getX();
    getXMutable().assign(inner.getX());
    setPerm(composed);
    return getResult();
  }
  return {};
}

LogicalResult ArangeOp::verify() {
  auto start = static_cast<int64_t>(getStart());
  auto end = static_cast<int64_t>(getEnd());
  if (start >= end)
    return emitOpError() << "start " << start << " must be less than end "
                         << end;
  return expectType(*this, "result", getType(), {end - start},
                    getType().getElementType(),
                    "end - start = " + Twine(end - start));
}

//===----------------------------------------------------------------------===//
// Reductions and gradient plumbing
//===----------------------------------------------------------------------===//

/// Checks that `value` (called `name`, with element type `elementType`) has
/// the shape of `source` (called `sourceName`) reduced over `dims`.
static LogicalResult verifyReduced(Operation *op, StringRef name, Value value,
                                   Type elementType, StringRef sourceName,
                                   Value source, ArrayRef<int64_t> dims,
                                   bool keepdim) {
  FailureOr<SmallVector<int64_t>> shape =
      reducedShape(op, source.getType(), dims, keepdim);
  if (failed(shape))
    return failure();
  return expectType(op, name, value.getType(), *shape, elementType,
                    sourceName + " " + str(source.getType()) +
                        " reduced over dims " + str(dims) +
                        (keepdim ? " with keepdim" : ""));
}

static LogicalResult verifyReduction(Operation *op, Value x,
                                     ArrayRef<int64_t> dims, bool keepdim,
                                     Value result) {
  return verifyReduced(op, "result", result, tensorType(x).getElementType(),
                       "x", x, dims, keepdim);
}

/// The gradient of a reduction: dy must be the result type reduced.
static LogicalResult verifyReductionGrad(Operation *op, Value dy,
                                         ArrayRef<int64_t> dims, bool keepdim,
                                         Value result) {
  return verifyReduced(op, "dy", dy, tensorType(dy).getElementType(),
                       "the result", result, dims, keepdim);
}

LogicalResult SumOp::verify() {
  return verifyReduction(*this, getX(), getDims(), getKeepdim(), getResult());
}
LogicalResult MeanOp::verify() {
  return verifyReduction(*this, getX(), getDims(), getKeepdim(), getResult());
}
LogicalResult SumGradOp::verify() {
  return verifyReductionGrad(*this, getDy(), getDims(), getKeepdim(),
                             getResult());
}
LogicalResult MeanGradOp::verify() {
  return verifyReductionGrad(*this, getDy(), getDims(), getKeepdim(),
                             getResult());
}

//===----------------------------------------------------------------------===//
// ClampOp, ClampGradOp
//===----------------------------------------------------------------------===//

static LogicalResult verifyClampBounds(Operation *op, double lo, double hi) {
  if (lo <= hi)
    return success();
  return op->emitOpError() << "min " << lo << " must be at most max " << hi
                           << " (neither NaN)";
}

LogicalResult ClampOp::verify() {
  return verifyClampBounds(*this, getMin().convertToDouble(),
                           getMax().convertToDouble());
}

LogicalResult ClampGradOp::verify() {
  return verifyClampBounds(*this, getMin().convertToDouble(),
                           getMax().convertToDouble());
}

//===----------------------------------------------------------------------===//
// SliceOp, SliceGradOp, ConcatOp, ExpandOp
//===----------------------------------------------------------------------===//

/// `sliced` is `whole` sliced along axis from start by step (md.slice's
/// result of x, md.slice_grad's dy of its result).
static LogicalResult verifySlice(Operation *op, StringRef wholeName,
                                 RankedTensorType whole, StringRef slicedName,
                                 RankedTensorType sliced, int64_t axis,
                                 int64_t start, int64_t step) {
  if (axis >= whole.getRank())
    return op->emitOpError() << "axis " << axis << " is out of range for "
                             << wholeName << " " << str(whole) << " of rank "
                             << whole.getRank();
  if (sliced.getRank() != whole.getRank())
    return op->emitOpError() << slicedName << " " << str(sliced)
                             << " must have the rank of " << wholeName << " "
                             << str(whole);
  const int64_t count = sliced.getShape()[axis];
  if (ShapedType::isDynamic(count))
    return op->emitOpError() << slicedName << " " << str(sliced)
                             << " must have a known size along axis " << axis;
  md::rules::Slice r = md::rules::SliceShape(dims(whole.getShape()), axis,
                                             start, step, count);
  switch (r.problem) {
  case md::rules::Slice::Problem::none:
    break;
  case md::rules::Slice::Problem::count:
    return op->emitOpError() << slicedName << " " << str(sliced)
                             << " takes no element along axis " << axis;
  case md::rules::Slice::Problem::bounds:
    return op->emitOpError()
           << count << " elements from " << start << " by " << step
           << " along axis " << axis << " end at " << r.last << ", past "
           << wholeName << " " << str(whole);
  default: // the attributes' constraints refuse the rest
    return op->emitOpError("start must be >= 0 and step >= 1");
  }
  return expectType(op, slicedName, sliced, r.shape, whole.getElementType(),
                    wholeName.str() + " " + str(whole) + " sliced along axis " +
                        std::to_string(axis));
}

LogicalResult SliceOp::verify() {
  return verifySlice(*this, "x", getX().getType(), "result", getType(),
                     getAxis(), getStart(), getStep());
}

OpFoldResult SliceOp::fold(FoldAdaptor) {
  if (getX().getType() == getType() && getStart() == 0 && getStep() == 1)
    return getX();
  return {};
}

LogicalResult SliceGradOp::verify() {
  return verifySlice(*this, "result", getType(), "dy", getDy().getType(),
                     getAxis(), getStart(), getStep());
}

LogicalResult ConcatOp::verify() {
  if (getInputs().empty())
    return emitOpError("needs at least one input");
  SmallVector<SmallVector<int64_t>> shapes;
  Type element = tensorType(getInputs()[0]).getElementType();
  for (auto [i, in] : llvm::enumerate(getInputs())) {
    RankedTensorType t = tensorType(in);
    if (t.getElementType() != element)
      return emitOpError() << "input " << i << " " << str(t)
                           << " must have the element type of input 0 "
                           << str(getInputs()[0].getType());
    shapes.emplace_back(t.getShape());
  }
  SmallVector<md::rules::Dims> spans;
  for (const auto &shape : shapes)
    spans.push_back(dims(shape));
  md::rules::Concat r = md::rules::ConcatShapes(spans, getAxis());
  switch (r.problem) {
  case md::rules::Concat::Problem::none:
    break;
  case md::rules::Concat::Problem::overflow:
    return emitOpError() << "the inputs' sizes along axis " << getAxis()
                         << " overflow int64";
  case md::rules::Concat::Problem::axis:
  case md::rules::Concat::Problem::empty:
    return emitOpError() << "axis " << getAxis() << " is out of range for "
                         << str(getInputs()[0].getType());
  case md::rules::Concat::Problem::rank:
  case md::rules::Concat::Problem::dims:
    return emitOpError() << "input " << r.index << " "
                         << str(getInputs()[r.index].getType())
                         << " must have the dims of input 0 "
                         << str(getInputs()[0].getType()) << " but at axis "
                         << getAxis();
  }
  return expectType(*this, "result", getType(), r.shape, element,
                    "the inputs joined along axis " +
                        std::to_string(getAxis()));
}

OpFoldResult ConcatOp::fold(FoldAdaptor) {
  if (getInputs().size() == 1 && getInputs()[0].getType() == getType())
    return getInputs()[0];
  return {};
}

LogicalResult ExpandOp::verify() {
  if (broadcastsTo(getX().getType().getShape(), getType().getShape()))
    return success();
  return emitOpError() << "x " << str(getX().getType())
                       << " does not broadcast to the result "
                       << str(getType());
}

OpFoldResult ExpandOp::fold(FoldAdaptor) {
  if (getX().getType() == getType())
    return getX();
  return {};
}

LogicalResult SumToOp::verify() {
  if (broadcastsTo(getType().getShape(), getG().getType().getShape()))
    return success();
  return emitOpError() << "result " << str(getType())
                       << " does not broadcast to g " << str(getG().getType());
}

OpFoldResult SumToOp::fold(FoldAdaptor) {
  if (getG().getType() == getType())
    return getG();
  return {};
}

//===----------------------------------------------------------------------===//
// RsqrtOp
//===----------------------------------------------------------------------===//

LogicalResult RsqrtOp::verify() {
  if (!(getEps().convertToDouble() >= 0))
    return emitOpError("eps must be >= 0, got ") << getEps().convertToDouble();
  return success();
}
