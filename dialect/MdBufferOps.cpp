//===- MdBufferOps.cpp - md buffer ops -------------------------------------===//

#include "dialect/MdAsmUtils.h"
#include "dialect/MdOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/PatternMatch.h"

using namespace mlir;
using namespace md;

#define GET_OP_CLASSES
#include "dialect/MdBufferOps.cpp.inc"

//===----------------------------------------------------------------------===//
// CastOp
//===----------------------------------------------------------------------===//

static bool isMdFloat(Type type) {
  return type.isBF16() || type.isF16() || type.isF32();
}

/// Whether converting `from` to `to` is exact, i.e. `to` represents every
/// value of `from`. That holds for the identity and for widening to f32:
/// bf16 has f32's 8-bit exponent and 8 of its 24 significand bits (bf16 is
/// the upper half of an f32), and f16's 5-bit exponent and 11-bit significand
/// (subnormals included) fit in f32's normal range and significand. No other
/// pair among bf16, f16 and f32 is exact: f32 -> bf16/f16 drops significand
/// bits, bf16 -> f16 loses range (and bf16's tiny values) and f16 -> bf16
/// loses significand bits.
///
/// This is what makes cast(cast(x : A -> B) : B -> C) == cast(x : A -> C)
/// when A -> B is exact: the inner cast then yields x's value unchanged, so
/// the outer one rounds the same real number once, exactly like the direct
/// cast. When A -> B rounds (f32 -> bf16 -> f32) the chain differs from both
/// x and cast(x : A -> C), so it must stay.
static bool isExactConversion(Type from, Type to) {
  return from == to || (to.isF32() && (from.isBF16() || from.isF16()));
}

LogicalResult CastOp::verify() {
  auto inputType = cast<RankedTensorType>(getInput().getType());
  auto resultType = cast<RankedTensorType>(getType());
  if (inputType.getShape() != resultType.getShape())
    return emitOpError("must keep the shape, got ")
           << inputType << " to " << resultType;
  Type from = inputType.getElementType();
  bool index = from.isSignlessInteger(32) || from.isSignlessInteger(64);
  if (!(isMdFloat(from) || index) || !isMdFloat(resultType.getElementType()))
    return emitOpError("element types must be bf16, f16 or f32, or i32 or "
                       "i64 to a float, got ")
           << inputType.getElementType() << " to "
           << resultType.getElementType();
  return success();
}

OpFoldResult CastOp::fold(FoldAdaptor adaptor) {
  // cast(x : A -> A) = x.
  if (getInput().getType() == getType())
    return getInput();

  // cast(cast(x : A -> B) : B -> C) = cast(x : A -> C) when A -> B is exact
  // (see isExactConversion), and = x when C = A.
  if (auto inner = getInput().getDefiningOp<CastOp>()) {
    Value x = inner.getInput();
    if (isExactConversion(getElementTypeOrSelf(x.getType()),
                          getElementTypeOrSelf(inner.getType()))) {
      if (x.getType() == getType())
        return x;
      getInputMutable().assign(x);
      return getResult();
    }
  }

  // Constants: convert every element, rounding to nearest, ties to even.
  if (auto dense =
          llvm::dyn_cast_if_present<DenseFPElementsAttr>(adaptor.getInput())) {
    auto elementType = dyn_cast<FloatType>(getType().getElementType());
    if (!elementType || !isMdFloat(elementType))
      return {};
    const llvm::fltSemantics &semantics = elementType.getFloatSemantics();
    DenseElementsAttr folded =
        dense.mapValues(elementType, [&](const APFloat &value) {
          APFloat converted = value;
          bool losesInfo = false;
          (void)converted.convert(semantics, APFloat::rmNearestTiesToEven,
                                  &losesInfo);
          return converted.bitcastToAPInt();
        });
    if (folded && folded.getType() == getType())
      return folded;
  }
  return {};
}

//===----------------------------------------------------------------------===//
// FlattenOp
//===----------------------------------------------------------------------===//

LogicalResult FlattenOp::verify() {
  if (getInputs().empty())
    return emitOpError("needs at least one operand");
  auto resultType = cast<RankedTensorType>(getType());
  if (resultType.getRank() != 1 || !resultType.hasStaticShape())
    return emitOpError("result must be a static 1-D tensor, got ")
           << resultType;
  Type elementType = resultType.getElementType();
  int64_t total = 0;
  for (auto [i, input] : llvm::enumerate(getInputs())) {
    auto inputType = cast<RankedTensorType>(input.getType());
    if (!inputType.hasStaticShape())
      return emitOpError("operand #")
             << i << " must have a static shape, got " << inputType;
    if (inputType.getElementType() != elementType)
      return emitOpError("operand #")
             << i << " has element type " << inputType.getElementType()
             << ", the result " << elementType;
    total += inputType.getNumElements();
  }
  int64_t size = resultType.getDimSize(0);
  if (total > size)
    return emitOpError("operands hold ")
           << total << " elements in total, more than the " << size
           << "-element result";
  return success();
}

OpFoldResult FlattenOp::fold(FoldAdaptor) {
  // Flattening one 1-D tensor into a buffer of its own size is the identity.
  if (getInputs().size() == 1 && getInputs()[0].getType() == getType())
    return getInputs()[0];
  return {};
}

//===----------------------------------------------------------------------===//
// ViewOp
//===----------------------------------------------------------------------===//

LogicalResult ViewOp::verify() {
  auto sourceType = cast<RankedTensorType>(getSource().getType());
  auto resultType = cast<RankedTensorType>(getType());
  if (sourceType.getRank() != 1 || !sourceType.hasStaticShape())
    return emitOpError("source must be a static 1-D buffer, got ")
           << sourceType;
  if (!resultType.hasStaticShape())
    return emitOpError("result must have a static shape, got ") << resultType;
  if (resultType.getElementType() != sourceType.getElementType())
    return emitOpError("result element type ")
           << resultType.getElementType()
           << " differs from the buffer's element type "
           << sourceType.getElementType();
  int64_t offset = getOffset();
  int64_t size = sourceType.getDimSize(0);
  int64_t numel = resultType.getNumElements();
  if (offset < 0)
    return emitOpError("offset must be >= 0, got ") << offset;
  if (numel > size || offset > size - numel)
    return emitOpError("view of ")
           << numel << " elements at offset " << offset
           << " runs past the end of the " << size << "-element buffer";
  return success();
}

OpFoldResult ViewOp::fold(FoldAdaptor) {
  int64_t offset = getOffset();
  // The whole buffer with its own type.
  if (offset == 0 && getSource().getType() == getType())
    return getSource();

  // view(flatten(a0, a1, ...))[o_i] : type(a_i) = a_i.
  auto flatten = getSource().getDefiningOp<FlattenOp>();
  if (!flatten)
    return {};
  int64_t start = 0;
  for (Value input : flatten.getInputs()) {
    if (start > offset)
      break;
    auto inputType = cast<RankedTensorType>(input.getType());
    if (!inputType.hasStaticShape())
      return {};
    if (start == offset && inputType == getType())
      return input;
    start += inputType.getNumElements();
  }
  return {};
}
