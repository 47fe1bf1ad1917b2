//===- MdOptimizerOps.cpp - md optimizer ops
//-------------------------------------===//

#include "dialect/MdAsmUtils.h"
#include "dialect/MdOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/PatternMatch.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

using namespace mlir;
using namespace md;

#define GET_OP_CLASSES
#include "dialect/MdOptimizerOps.cpp.inc"

//===----------------------------------------------------------------------===//
// Helpers: hyper-parameters in the custom forms and in diagnostics
//===----------------------------------------------------------------------===//

/// The shortest decimal form of `value` that reads back as the same double
/// ("0.9", "1e-08"); "inf"/"nan" for the non-finite ones.
static std::string formatShortest(double value) {
  if (std::isnan(value))
    return "nan";
  if (std::isinf(value))
    return value < 0 ? "-inf" : "inf";
  char buf[64];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, value);
    if (std::strtod(buf, nullptr) == value)
      break;
  }
  return buf;
}

/// `value` as an MLIR float literal: the shortest round-tripping form with a
/// mandatory '.' ("0.9", "1.0", "1.0e-08"); a non-finite value as its IEEE
/// bit pattern, which the float parser accepts too.
static std::string formatF64Literal(double value) {
  if (!std::isfinite(value)) {
    char buf[32];
    uint64_t bits;
    std::memcpy(&bits, &value, sizeof(bits));
    std::snprintf(buf, sizeof(buf), "0x%016llX",
                  static_cast<unsigned long long>(bits));
    return buf;
  }
  std::string s = formatShortest(value);
  if (s.find('.') == std::string::npos) {
    size_t e = s.find('e');
    s.insert(e == std::string::npos ? s.size() : e, ".0");
  }
  return s;
}

static void printF64(OpAsmPrinter &p, StringRef keyword, const APFloat &v) {
  p << ' ' << keyword << ' ' << formatF64Literal(v.convertToDouble());
}

/// Parses `keyword <float>` into an F64 attribute named `name`.
static ParseResult parseKeywordF64(OpAsmParser &parser, OperationState &result,
                                   StringRef keyword, StringAttr name) {
  double value;
  if (parser.parseKeyword(keyword) || parser.parseFloat(value))
    return failure();
  result.addAttribute(name, parser.getBuilder().getF64FloatAttr(value));
  return success();
}

/// Parses an optional `keyword <float>`; the attribute is 0.0 when absent.
static ParseResult parseOptionalKeywordF64(OpAsmParser &parser,
                                           OperationState &result,
                                           StringRef keyword, StringAttr name) {
  double value = 0.0;
  if (succeeded(parser.parseOptionalKeyword(keyword)) &&
      parser.parseFloat(value))
    return failure();
  result.addAttribute(name, parser.getBuilder().getF64FloatAttr(value));
  return success();
}

/// "768x4", or "scalar" for a rank-0 tensor.
static std::string shapeOf(Type type) {
  auto shaped = cast<ShapedType>(type);
  if (shaped.getRank() == 0)
    return "scalar";
  return formatShape(shaped.getShape());
}

/// The type of an optimizer state tensor of `param`: its shape, f32.
static Type getStateType(Type paramType) {
  auto tensor = cast<RankedTensorType>(paramType);
  return RankedTensorType::get(tensor.getShape(),
                               Float32Type::get(paramType.getContext()));
}

/// `value` (named `name`) must have the shape of `param`.
static LogicalResult verifySameShape(Operation *op, StringRef name, Value value,
                                     Value param) {
  auto valueType = cast<ShapedType>(value.getType());
  auto paramType = cast<ShapedType>(param.getType());
  if (valueType.getShape() != paramType.getShape())
    return op->emitOpError()
           << name << " shape " << shapeOf(valueType)
           << " does not match param shape " << shapeOf(paramType);
  return success();
}

/// An optimizer state tensor must have the shape of `param` and be f32.
static LogicalResult verifyState(Operation *op, StringRef name, Value state,
                                 Value param) {
  if (failed(verifySameShape(op, name, state, param)))
    return failure();
  Type elementType = cast<ShapedType>(state.getType()).getElementType();
  if (!elementType.isF32())
    return op->emitOpError()
           << name << " must be f32 (optimizer state is kept in f32), got "
           << elementType;
  return success();
}

/// `unit N` after an update's hyper-parameters: the wrap unit whose
/// parameters' groups give per-element decay and lr scale.
static ParseResult parseOptionalUnit(OpAsmParser &parser,
                                     OperationState &result, StringAttr name) {
  if (failed(parser.parseOptionalKeyword("unit")))
    return success();
  int64_t unit = 0;
  if (parser.parseInteger(unit))
    return failure();
  result.addAttribute(name, parser.getBuilder().getI64IntegerAttr(unit));
  return success();
}

//===----------------------------------------------------------------------===//
// AdamWUpdateOp
//===----------------------------------------------------------------------===//

LogicalResult
AdamWUpdateOp::inferReturnTypes(MLIRContext *, std::optional<Location>,
                                Adaptor adaptor,
                                SmallVectorImpl<Type> &inferredReturnTypes) {
  inferredReturnTypes.push_back(adaptor.getParam().getType());
  inferredReturnTypes.push_back(adaptor.getM().getType());
  inferredReturnTypes.push_back(adaptor.getV().getType());
  return success();
}

ParseResult AdamWUpdateOp::parse(OpAsmParser &parser, OperationState &result) {
  SmallVector<OpAsmParser::UnresolvedOperand, 6> operands;
  SMLoc operandsLoc = parser.getCurrentLocation();
  if (parser.parseOperandList(operands, /*requiredOperandCount=*/6) ||
      parseKeywordF64(parser, result, "beta1", getBeta1AttrName(result.name)) ||
      parseKeywordF64(parser, result, "beta2", getBeta2AttrName(result.name)) ||
      parseKeywordF64(parser, result, "eps", getEpsAttrName(result.name)) ||
      parseKeywordF64(parser, result, "weight_decay",
                      getWeightDecayAttrName(result.name)) ||
      parseOptionalUnit(parser, result, getUnitAttrName(result.name)) ||
      parser.parseOptionalAttrDict(result.attributes) || parser.parseColon())
    return failure();

  Type paramType, gradType, mType, vType;
  SMLoc typesLoc = parser.getCurrentLocation();
  if (parser.parseType(paramType) || parser.parseComma() ||
      parser.parseType(gradType))
    return failure();
  // The moments' types are implied; they are written out only when they are
  // not the f32 tensors of the param's shape (which the verifier rejects).
  if (succeeded(parser.parseOptionalComma())) {
    if (parser.parseType(mType) || parser.parseComma() ||
        parser.parseType(vType))
      return failure();
  } else {
    if (!isa<RankedTensorType>(paramType))
      return parser.emitError(typesLoc, "param must be a ranked tensor, got ")
             << paramType;
    mType = vType = getStateType(paramType);
  }

  Builder &b = parser.getBuilder();
  if (parser.resolveOperands(
          operands,
          {paramType, gradType, mType, vType, b.getF32Type(), b.getI64Type()},
          operandsLoc, result.operands))
    return failure();
  result.addTypes({paramType, mType, vType});
  return success();
}

void AdamWUpdateOp::print(OpAsmPrinter &p) {
  p << ' ' << getParam() << ", " << getGrad() << ", " << getM() << ", "
    << getV() << ", " << getLr() << ", " << getStep();
  printF64(p, "beta1", getBeta1());
  printF64(p, "beta2", getBeta2());
  printF64(p, "eps", getEps());
  printF64(p, "weight_decay", getWeightDecay());
  if (std::optional<uint64_t> unit = getUnit())
    p << " unit " << *unit;
  p.printOptionalAttrDict((*this)->getAttrs(), getAttributeNames());
  p << " : " << getParam().getType() << ", " << getGrad().getType();
  Type stateType = getStateType(getParam().getType());
  if (getM().getType() != stateType || getV().getType() != stateType)
    p << ", " << getM().getType() << ", " << getV().getType();
}

LogicalResult AdamWUpdateOp::verify() {
  if (failed(verifySameShape(*this, "grad", getGrad(), getParam())) ||
      failed(verifyState(*this, "m", getM(), getParam())) ||
      failed(verifyState(*this, "v", getV(), getParam())))
    return failure();
  // The rules of #md.adamw.
  double beta1 = getBeta1().convertToDouble();
  double beta2 = getBeta2().convertToDouble();
  double eps = getEps().convertToDouble();
  double weightDecay = getWeightDecay().convertToDouble();
  if (!(beta1 >= 0 && beta1 < 1))
    return emitOpError("beta1 must be in [0, 1), got ")
           << formatShortest(beta1);
  if (!(beta2 >= 0 && beta2 < 1))
    return emitOpError("beta2 must be in [0, 1), got ")
           << formatShortest(beta2);
  if (!(eps > 0))
    return emitOpError("eps must be > 0, got ") << formatShortest(eps);
  if (!(weightDecay >= 0))
    return emitOpError("weight_decay must be >= 0, got ")
           << formatShortest(weightDecay);
  return success();
}

//===----------------------------------------------------------------------===//
// SGDUpdateOp
//===----------------------------------------------------------------------===//

LogicalResult
SGDUpdateOp::inferReturnTypes(MLIRContext *, std::optional<Location>,
                              Adaptor adaptor,
                              SmallVectorImpl<Type> &inferredReturnTypes) {
  inferredReturnTypes.push_back(adaptor.getParam().getType());
  if (Value buffer = adaptor.getMomentumBuffer())
    inferredReturnTypes.push_back(buffer.getType());
  return success();
}

ParseResult SGDUpdateOp::parse(OpAsmParser &parser, OperationState &result) {
  OpAsmParser::UnresolvedOperand param, grad, buffer, lr, step;
  bool hasBuffer = false;
  if (parser.parseOperand(param) || parser.parseComma() ||
      parser.parseOperand(grad))
    return failure();
  if (succeeded(parser.parseOptionalKeyword("momentum_buffer"))) {
    if (parser.parseOperand(buffer))
      return failure();
    hasBuffer = true;
  }
  if (parser.parseComma() || parser.parseOperand(lr) || parser.parseComma() ||
      parser.parseOperand(step) ||
      parseOptionalKeywordF64(parser, result, "momentum",
                              getMomentumAttrName(result.name)) ||
      parseOptionalKeywordF64(parser, result, "dampening",
                              getDampeningAttrName(result.name)) ||
      parseOptionalKeywordF64(parser, result, "weight_decay",
                              getWeightDecayAttrName(result.name)))
    return failure();
  if (succeeded(parser.parseOptionalKeyword("nesterov")))
    result.addAttribute(getNesterovAttrName(result.name),
                        parser.getBuilder().getUnitAttr());
  if (parseOptionalUnit(parser, result, getUnitAttrName(result.name)))
    return failure();
  if (parser.parseOptionalAttrDict(result.attributes) || parser.parseColon())
    return failure();

  Type paramType, gradType, bufferType;
  SMLoc typesLoc = parser.getCurrentLocation();
  if (parser.parseType(paramType) || parser.parseComma() ||
      parser.parseType(gradType))
    return failure();
  // The buffer's type is implied; it is written out only when it is not the
  // f32 tensor of the param's shape (which the verifier rejects).
  if (succeeded(parser.parseOptionalComma())) {
    if (!hasBuffer)
      return parser.emitError(parser.getCurrentLocation(),
                              "a third type is the momentum buffer's, but "
                              "there is no momentum_buffer operand");
    if (parser.parseType(bufferType))
      return failure();
  } else if (hasBuffer) {
    if (!isa<RankedTensorType>(paramType))
      return parser.emitError(typesLoc, "param must be a ranked tensor, got ")
             << paramType;
    bufferType = getStateType(paramType);
  }

  if (parser.resolveOperand(param, paramType, result.operands) ||
      parser.resolveOperand(grad, gradType, result.operands) ||
      (hasBuffer &&
       parser.resolveOperand(buffer, bufferType, result.operands)) ||
      parser.resolveOperand(lr, parser.getBuilder().getF32Type(),
                            result.operands) ||
      parser.resolveOperand(step, parser.getBuilder().getI64Type(),
                            result.operands))
    return failure();
  result.addTypes(paramType);
  if (hasBuffer)
    result.addTypes(bufferType);
  return success();
}

void SGDUpdateOp::print(OpAsmPrinter &p) {
  p << ' ' << getParam() << ", " << getGrad();
  if (Value buffer = getMomentumBuffer())
    p << " momentum_buffer " << buffer;
  p << ", " << getLr() << ", " << getStep();
  // Zero is the default of each and is left out.
  if (!getMomentum().isPosZero())
    printF64(p, "momentum", getMomentum());
  if (!getDampening().isPosZero())
    printF64(p, "dampening", getDampening());
  if (!getWeightDecay().isPosZero())
    printF64(p, "weight_decay", getWeightDecay());
  if (getNesterov())
    p << " nesterov";
  if (std::optional<uint64_t> unit = getUnit())
    p << " unit " << *unit;
  p.printOptionalAttrDict((*this)->getAttrs(), getAttributeNames());
  p << " : " << getParam().getType() << ", " << getGrad().getType();
  if (Value buffer = getMomentumBuffer())
    if (buffer.getType() != getStateType(getParam().getType()))
      p << ", " << buffer.getType();
}

LogicalResult SGDUpdateOp::verify() {
  if (failed(verifySameShape(*this, "grad", getGrad(), getParam())))
    return failure();
  // The rules of #md.sgd (and torch.optim.SGD).
  double momentum = getMomentum().convertToDouble();
  double dampening = getDampening().convertToDouble();
  double weightDecay = getWeightDecay().convertToDouble();
  if (!(momentum >= 0))
    return emitOpError("momentum must be >= 0, got ")
           << formatShortest(momentum);
  if (!(weightDecay >= 0))
    return emitOpError("weight_decay must be >= 0, got ")
           << formatShortest(weightDecay);
  if (getNesterov() && (momentum <= 0 || dampening != 0))
    return emitOpError("nesterov needs momentum > 0 and dampening = 0, got "
                       "momentum ")
           << formatShortest(momentum) << " and dampening "
           << formatShortest(dampening);
  // The buffer exists exactly when there is momentum.
  Value buffer = getMomentumBuffer();
  if (momentum > 0 && !buffer)
    return emitOpError("with momentum ")
           << formatShortest(momentum) << " needs a momentum_buffer operand";
  if (momentum == 0 && buffer)
    return emitOpError("has a momentum_buffer but momentum is 0; plain SGD "
                       "keeps no buffer");
  if (buffer &&
      failed(verifyState(*this, "momentum_buffer", buffer, getParam())))
    return failure();
  return success();
}

//===----------------------------------------------------------------------===//
// GlobalNormOp
//===----------------------------------------------------------------------===//

LogicalResult GlobalNormOp::verify() {
  if (getInputs().empty())
    return emitOpError("needs at least one tensor");
  return success();
}

//===----------------------------------------------------------------------===//
// ClipOp
//===----------------------------------------------------------------------===//

LogicalResult
ClipOp::inferReturnTypes(MLIRContext *, std::optional<Location>,
                         Adaptor adaptor,
                         SmallVectorImpl<Type> &inferredReturnTypes) {
  for (Value grad : adaptor.getGrads())
    inferredReturnTypes.push_back(grad.getType());
  return success();
}

ParseResult ClipOp::parse(OpAsmParser &parser, OperationState &result) {
  SmallVector<OpAsmParser::UnresolvedOperand> operands;
  SMLoc operandsLoc = parser.getCurrentLocation();
  if (parser.parseOperandList(operands))
    return failure();
  if (operands.size() < 2)
    return parser.emitError(operandsLoc,
                            "expected the gradients and then the norm");
  SmallVector<Type> gradTypes;
  if (parseKeywordF64(parser, result, "max_norm",
                      getMaxNormAttrName(result.name)) ||
      parser.parseOptionalAttrDict(result.attributes) || parser.parseColon() ||
      parser.parseTypeList(gradTypes))
    return failure();
  auto normType = RankedTensorType::get({}, parser.getBuilder().getF32Type());
  if (parser.resolveOperands(ArrayRef(operands).drop_back(), gradTypes,
                             operandsLoc, result.operands) ||
      parser.resolveOperand(operands.back(), normType, result.operands))
    return failure();
  result.addTypes(gradTypes);
  return success();
}

void ClipOp::print(OpAsmPrinter &p) {
  p << ' ';
  p.printOperands(getGrads());
  p << ", " << getNorm();
  printF64(p, "max_norm", getMaxNorm());
  p.printOptionalAttrDict((*this)->getAttrs(), getAttributeNames());
  p << " : ";
  llvm::interleaveComma(getGrads().getTypes(), p);
}

LogicalResult ClipOp::verify() {
  if (getGrads().empty())
    return emitOpError("needs at least one gradient");
  double maxNorm = getMaxNorm().convertToDouble();
  if (!(maxNorm > 0))
    return emitOpError("max_norm must be > 0, got ") << formatShortest(maxNorm);
  return success();
}
