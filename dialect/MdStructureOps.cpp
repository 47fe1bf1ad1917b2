//===- MdStructureOps.cpp - model, param, functions, recipe ---------------===//

#include "dialect/MdAsmUtils.h"
#include "dialect/MdOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/FunctionImplementation.h"
#include "runtime/core/Mesh.h"

using namespace mlir;
using namespace md;

#define GET_OP_CLASSES
#include "dialect/MdStructureOps.cpp.inc"

//===----------------------------------------------------------------------===//
// ModelOp
//===----------------------------------------------------------------------===//

void ModelOp::build(OpBuilder &builder, OperationState &state, StringRef name) {
  state.addAttribute(getSymNameAttrName(state.name),
                     builder.getStringAttr(name));
  Region *body = state.addRegion();
  body->push_back(new Block());
}

ForwardOp ModelOp::getForward() {
  for (auto fwd : getBody().getOps<ForwardOp>())
    return fwd;
  return {};
}

TrainOp ModelOp::getTrain() {
  for (auto train : getBody().getOps<TrainOp>())
    return train;
  return {};
}

std::optional<int64_t> ModelOp::getStaticGroupSize(Group group) {
  static_assert(static_cast<int>(Group::world) ==
                        static_cast<int>(md::mesh::GroupKind::world) &&
                    static_cast<int>(Group::shard) ==
                        static_cast<int>(md::mesh::GroupKind::shard) &&
                    static_cast<int>(Group::replicate) ==
                        static_cast<int>(md::mesh::GroupKind::replicate),
                "md.Group is numbered like Mesh.h's GroupKind");
  auto known = [](std::optional<uint64_t> size) -> std::optional<int64_t> {
    if (!size)
      return std::nullopt;
    return static_cast<int64_t>(*size);
  };
  return md::mesh::staticGroupSize(static_cast<md::mesh::GroupKind>(group),
                                   known(getWorldSize()),
                                   known(getShardGroupSize()));
}

LogicalResult ModelOp::verify() {
  std::optional<uint64_t> world = getWorldSize();
  std::optional<uint64_t> shard = getShardGroupSize();
  if (world && shard && *world % *shard != 0)
    return emitOpError("world size ")
           << *world << " is not a multiple of the shard group size " << *shard;
  if (PlanAttr plan = getPlanAttr()) {
    if (plan.isSingleRank() && world && *world != 1)
      return emitOpError("plan '")
             << plan.getName() << "' runs on one rank, but world_size is "
             << *world;
    std::optional<int64_t> planGroup = plan.getShardGroupSize();
    if (planGroup && shard && static_cast<int64_t>(*shard) != *planGroup)
      return emitOpError("shard_group_size ")
             << *shard << " differs from the shard group " << *planGroup
             << " of plan '" << plan.getName() << "'";
  }
  Operation *firstForward = nullptr, *firstTrain = nullptr;
  for (Operation &op : getBody().getOps()) {
    Operation *&first = isa<ForwardOp>(op) ? firstForward
                        : isa<TrainOp>(op) ? firstTrain
                                           : firstForward;
    if (!isa<ForwardOp, TrainOp>(op))
      continue;
    if (first) {
      InFlightDiagnostic diag = op.emitOpError("a model has at most one '")
                                << op.getName() << "'";
      diag.attachNote(first->getLoc()) << "the first one is here";
      return diag;
    }
    first = &op;
  }
  return success();
}

//===----------------------------------------------------------------------===//
// ParamOp / ParamRefOp
//===----------------------------------------------------------------------===//

LogicalResult ParamOp::verify() {
  RankedTensorType type = getTensorType();
  if (!type.hasStaticShape())
    return emitOpError("parameter shape must be static, got tensor<")
           << formatShape(type.getShape()) << ">";
  if (!isa<FloatType>(type.getElementType()) ||
      !(type.getElementType().isBF16() || type.getElementType().isF16() ||
        type.getElementType().isF32()))
    return emitOpError("parameter element type must be bf16, f16 or f32, got ")
           << type.getElementType();
  if (type.getNumElements() == 0)
    return emitOpError("parameter has no elements (shape ")
           << formatShape(type.getShape()) << ")";
  if (std::optional<uint64_t> unit = getUnit())
    if (static_cast<int64_t>(*unit) < 0)
      return emitOpError("unit must be >= 0, got ")
             << static_cast<int64_t>(*unit);
  return success();
}

LogicalResult ParamRefOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  auto model = (*this)->getParentOfType<ModelOp>();
  if (!model)
    return emitOpError("must be nested in an 'md.model'");
  auto param =
      symbolTable.lookupNearestSymbolFrom<ParamOp>(*this, getParamAttr());
  if (!param)
    return emitOpError("'") << getParam() << "' is not a parameter of model '"
                            << model.getSymName() << "'";
  if (param.getType() != getType()) {
    InFlightDiagnostic diag = emitOpError("type ")
                              << getType() << " does not match parameter '"
                              << getParam() << "' of type " << param.getType();
    diag.attachNote(param.getLoc()) << "parameter declared here";
    return diag;
  }
  return success();
}

//===----------------------------------------------------------------------===//
// ForwardOp / FuncOp / ReturnOp / CallOp
//===----------------------------------------------------------------------===//

template <typename OpT>
static ParseResult parseFunctionLike(OpAsmParser &parser,
                                     OperationState &result) {
  auto buildFuncType =
      [](Builder &builder, ArrayRef<Type> argTypes, ArrayRef<Type> results,
         function_interface_impl::VariadicFlag,
         std::string &) { return builder.getFunctionType(argTypes, results); };
  return function_interface_impl::parseFunctionOp(
      parser, result, /*allowVariadic=*/false,
      OpT::getFunctionTypeAttrName(result.name), buildFuncType,
      OpT::getArgAttrsAttrName(result.name),
      OpT::getResAttrsAttrName(result.name));
}

template <typename OpT> static void printFunctionLike(OpAsmPrinter &p, OpT op) {
  function_interface_impl::printFunctionOp(
      p, op, /*isVariadic=*/false, op.getFunctionTypeAttrName(),
      op.getArgAttrsAttrName(), op.getResAttrsAttrName());
}

ParseResult ForwardOp::parse(OpAsmParser &parser, OperationState &result) {
  return parseFunctionLike<ForwardOp>(parser, result);
}
void ForwardOp::print(OpAsmPrinter &p) { printFunctionLike(p, *this); }
ParseResult FuncOp::parse(OpAsmParser &parser, OperationState &result) {
  return parseFunctionLike<FuncOp>(parser, result);
}
void FuncOp::print(OpAsmPrinter &p) { printFunctionLike(p, *this); }

// FunctionOpInterface already checks the entry block against the signature.
LogicalResult ForwardOp::verify() {
  ArrayRef<Type> results = getResultTypes();
  auto lossType = RankedTensorType::get({}, Float32Type::get(getContext()));
  if (results.empty() || results.front() != lossType)
    return emitOpError("first result must be the scalar loss tensor<f32>, got ")
           << (results.empty() ? std::string("no result") : [&] {
                std::string s;
                llvm::raw_string_ostream os(s);
                os << results.front();
                return s;
              }());
  return success();
}

/// Each of `values` has the type at its index in `types`, which the function
/// `fn` declares: "<what> #i has type T, but '<fn>' <verb> U" otherwise.
/// The counts are the caller's to check first.
static LogicalResult verifyEachType(Operation *op, StringRef what,
                                    ValueRange values, TypeRange types,
                                    StringRef fn, StringRef verb) {
  for (auto [i, value] : llvm::enumerate(values))
    if (value.getType() != types[i])
      return op->emitOpError(what)
             << " #" << i << " has type " << value.getType() << ", but '" << fn
             << "' " << verb << " " << types[i];
  return success();
}

LogicalResult ReturnOp::verify() {
  auto fn = cast<FunctionOpInterface>((*this)->getParentOp());
  ArrayRef<Type> results = fn.getResultTypes();
  if (getNumOperands() != results.size())
    return emitOpError("returns ")
           << getNumOperands() << " values, but '" << fn.getName()
           << "' declares " << results.size();
  return verifyEachType(*this, "result", getOperands(), results, fn.getName(),
                        "declares");
}

LogicalResult CallOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  auto callee =
      symbolTable.lookupNearestSymbolFrom<FuncOp>(*this, getCalleeAttr());
  if (!callee)
    return emitOpError("'") << getCallee() << "' is not an 'md.func'";
  FunctionType type = callee.getFunctionType();
  if (type.getNumInputs() != getNumOperands())
    return emitOpError("passes ")
           << getNumOperands() << " arguments to '" << getCallee()
           << "', which takes " << type.getNumInputs();
  if (failed(verifyEachType(*this, "argument", getOperands(), type.getInputs(),
                            getCallee(), "takes")))
    return failure();
  if (type.getNumResults() != getNumResults())
    return emitOpError("expects ")
           << getNumResults() << " results from '" << getCallee()
           << "', which returns " << type.getNumResults();
  return verifyEachType(*this, "result", getResults(), type.getResults(),
                        getCallee(), "returns");
}

//===----------------------------------------------------------------------===//
// TrainOp
//===----------------------------------------------------------------------===//

LogicalResult TrainOp::verify() {
  int64_t global = getGlobalBatch();
  int64_t micro = getMicroBatch();
  if (global % micro != 0)
    return emitOpError("global_batch ")
           << global << " is not a multiple of micro_batch " << micro;
  if (std::optional<int64_t> world = getStaticGroupSize(*this, Group::world))
    if (global % (micro * *world) != 0)
      return emitOpError("global_batch ")
             << global
             << " is not a multiple of micro_batch x world size = " << micro
             << " x " << *world << " = " << micro * *world;
  if (std::optional<APFloat> clip = getClipGradNorm())
    if (!(clip->convertToDouble() > 0))
      return emitOpError("clip_grad_norm must be > 0, got ")
             << clip->convertToDouble();
  return success();
}

LogicalResult TrainOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  if (!symbolTable.lookupNearestSymbolFrom<ForwardOp>(*this, getForwardAttr()))
    return emitOpError("'") << getForward() << "' is not an 'md.forward'";
  return success();
}
