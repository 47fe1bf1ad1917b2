//===- MdStepOps.cpp - md per-step program ops ---------------------------===//

#include "dialect/MdAsmUtils.h"
#include "dialect/MdOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/OpImplementation.h"

using namespace mlir;
using namespace md;

#define GET_OP_CLASSES
#include "dialect/MdStepOps.cpp.inc"

//===----------------------------------------------------------------------===//
// StateOp
//===----------------------------------------------------------------------===//

// md.state @sym : type (shard(N) group G)? role R (unit U)? attr-dict
ParseResult StateOp::parse(OpAsmParser &parser, OperationState &result) {
  StringAttr name;
  Type type;
  if (parser.parseSymbolName(name, SymbolTable::getSymbolAttrName(),
                             result.attributes) ||
      parser.parseColonType(type))
    return failure();
  result.addAttribute(getTypeAttrName(result.name), TypeAttr::get(type));
  MLIRContext *context = parser.getContext();
  if (succeeded(parser.parseOptionalKeyword("shard"))) {
    int64_t numel;
    GroupAttr group;
    if (parser.parseLParen() || parser.parseInteger(numel) ||
        parser.parseRParen() || parser.parseKeyword("group") ||
        parseGroup(parser, group))
      return failure();
    result.addAttribute(getShardAttrName(result.name),
                        IntegerAttr::get(IntegerType::get(context, 64), numel));
    result.addAttribute(getGroupAttrName(result.name), group);
  }
  StateRoleAttr role;
  if (parser.parseKeyword("role") || parseStateRole(parser, role))
    return failure();
  result.addAttribute(getRoleAttrName(result.name), role);
  if (succeeded(parser.parseOptionalKeyword("unit"))) {
    int64_t unit;
    if (parser.parseInteger(unit))
      return failure();
    result.addAttribute(getUnitAttrName(result.name),
                        IntegerAttr::get(IntegerType::get(context, 64), unit));
  }
  return parser.parseOptionalAttrDict(result.attributes);
}

void StateOp::print(OpAsmPrinter &printer) {
  printer << ' ';
  printer.printSymbolName(getSymName());
  printer << " : " << getType();
  if (std::optional<uint64_t> shard = getShard()) {
    printer << " shard(" << *shard << ") group ";
    printGroup(printer, *this, getGroupAttr());
  }
  printer << " role ";
  printStateRole(printer, *this, getRoleAttr());
  if (std::optional<int64_t> unit = getUnit())
    printer << " unit " << *unit;
  printer.printOptionalAttrDict(
      (*this)->getAttrs(),
      {getSymNameAttrName(), getTypeAttrName(), getShardAttrName(),
       getGroupAttrName(), getRoleAttrName(), getUnitAttrName()});
}

int64_t StateOp::getFlatNumel() {
  if (std::optional<uint64_t> shard = getShard())
    return static_cast<int64_t>(*shard);
  return getTensorType().getNumElements();
}

LogicalResult StateOp::verify() {
  RankedTensorType type = getTensorType();
  if (isSharded()) {
    if (!getGroupAttr())
      return emitOpError("a sharded state needs a group");
    if (type.getRank() != 1 || !type.isDynamicDim(0))
      return emitOpError("a sharded state has a 1-D type with a dynamic dim "
                         "(its size is ceil(N / group size)), not ")
             << type;
  } else {
    if (getGroupAttr())
      return emitOpError("has a group but no 'shard(N)'");
    if (!type.hasStaticShape())
      return emitOpError("a full state has a static type, not ")
             << type << " (a shard needs 'shard(N) group G')";
  }
  if (!type.getElementType().isIntOrFloat())
    return emitOpError("element type must be a number");
  return success();
}

//===----------------------------------------------------------------------===//
// StateLoadOp / StateStoreOp / GradAccumulateOp / GradTotalOp
//===----------------------------------------------------------------------===//

/// The md.state `name` refers to from `op`, or an error.
static FailureOr<StateOp> lookupState(Operation *op, FlatSymbolRefAttr name,
                                      SymbolTableCollection &symbolTable) {
  auto state = symbolTable.lookupNearestSymbolFrom<StateOp>(op, name);
  if (!state)
    return op->emitOpError("'") << name.getValue()
                                << "' is not an 'md.state' of the model";
  return state;
}

static LogicalResult checkStateType(Operation *op, StateOp state, Type type) {
  if (state.getType() == type)
    return success();
  InFlightDiagnostic diag = op->emitOpError("type ")
                            << type << " does not match state '"
                            << state.getSymName() << "' of type "
                            << state.getType();
  diag.attachNote(state.getLoc()) << "state declared here";
  return diag;
}

LogicalResult
StateLoadOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  FailureOr<StateOp> state = lookupState(*this, getStateAttr(), symbolTable);
  if (failed(state))
    return failure();
  return checkStateType(*this, *state, getType());
}

LogicalResult
StateStoreOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  FailureOr<StateOp> state = lookupState(*this, getStateAttr(), symbolTable);
  if (failed(state))
    return failure();
  if (state->getRole() == StateRole::frozen) {
    InFlightDiagnostic diag = emitOpError("stores to '")
                              << getState()
                              << "', a 'frozen' state: frozen parameters "
                                 "are never updated";
    diag.attachNote(state->getLoc()) << "state declared here";
    return diag;
  }
  return checkStateType(*this, *state, getValue().getType());
}

/// An accumulator must be an f32 `grad_acc` state of `grad`'s shape: full,
/// or a shard of a reduce-scattered gradient (`grad_accumulation = sharded`).
static LogicalResult checkAccumulator(Operation *op, FlatSymbolRefAttr name,
                                      RankedTensorType gradType,
                                      SymbolTableCollection &symbolTable) {
  FailureOr<StateOp> state = lookupState(op, name, symbolTable);
  if (failed(state))
    return failure();
  if (state->getRole() != StateRole::grad_acc)
    return op->emitOpError("'") << name.getValue()
                                << "' is not a 'grad_acc' state";
  RankedTensorType accType = state->getTensorType();
  if (accType.getShape() != gradType.getShape())
    return op->emitOpError("gradient of type ")
           << gradType << " does not fit accumulator '" << name.getValue()
           << "' of type " << accType;
  return success();
}

LogicalResult GradAccumulateOp::verify() {
  if (!(*this)->getParentOfType<MicroStepsOp>())
    return emitOpError("must be inside 'md.micro_steps'");
  return success();
}

LogicalResult
GradAccumulateOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  return checkAccumulator(*this, getAccAttr(), getGrad().getType(),
                          symbolTable);
}

LogicalResult GradTotalOp::verify() {
  if ((*this)->getParentOfType<MicroStepsOp>())
    return emitOpError("must be outside 'md.micro_steps', in the last "
                       "micro-step");
  if (!getResult().getType().getElementType().isF32() ||
      getResult().getType().getShape() != getGrad().getType().getShape())
    return emitOpError("result must be the f32 tensor of the gradient's shape");
  return success();
}

LogicalResult
GradTotalOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  if (failed(checkAccumulator(*this, getAccAttr(), getGrad().getType(),
                              symbolTable)))
    return failure();
  auto state = symbolTable.lookupNearestSymbolFrom<StateOp>(*this, getAccAttr());
  if (state.getType() != getResult().getType())
    return emitOpError("result type ") << getResult().getType()
                                       << " differs from the accumulator's "
                                       << state.getType();
  return success();
}

//===----------------------------------------------------------------------===//
// BatchOp / MicroStepsOp
//===----------------------------------------------------------------------===//

/// Whether `op` is in the step region of an md.train.
static TrainOp getEnclosingStep(Operation *op) {
  auto train = op->getParentOfType<TrainOp>();
  if (!train || !train.getStep().isAncestor(op->getParentRegion()))
    return nullptr;
  return train;
}

LogicalResult BatchOp::verify() {
  TrainOp train = getEnclosingStep(*this);
  if (!train)
    return emitOpError("must be in the step region of an 'md.train'");
  auto forward = SymbolTable::lookupNearestSymbolFrom<FunctionOpInterface>(
      train, train.getForwardAttr());
  if (!forward)
    return success(); // md.train reports the missing forward
  ArrayRef<Type> inputs = forward.getArgumentTypes();
  if (TypeRange(getResultTypes()) != TypeRange(inputs))
    return emitOpError("results must be typed like the arguments of @")
           << train.getForward() << " (" << inputs.size() << " values)";
  return success();
}

LogicalResult MicroStepsOp::verify() {
  if (!getEnclosingStep(*this))
    return emitOpError("must be in the step region of an 'md.train'");
  if ((*this)->getParentOfType<MicroStepsOp>())
    return emitOpError("cannot be nested in another 'md.micro_steps'");
  return success();
}

//===----------------------------------------------------------------------===//
// ShardSliceOp
//===----------------------------------------------------------------------===//

LogicalResult ShardSliceOp::verify() {
  RankedTensorType in = getInput().getType();
  RankedTensorType out = getResult().getType();
  if (in.getRank() != 1 || !in.hasStaticShape())
    return emitOpError("input must be a static 1-D buffer, not ") << in;
  if (out.getRank() != 1 || !out.isDynamicDim(0))
    return emitOpError("result must be a 1-D shard with a dynamic dim, not ")
           << out;
  if (in.getElementType() != out.getElementType())
    return emitOpError("element types differ: ")
           << in.getElementType() << " vs " << out.getElementType();
  return success();
}
