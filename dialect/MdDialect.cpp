//===- MdDialect.cpp - md dialect registration and shared helpers ---------===//

#include "dialect/MdOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace md;

#include "dialect/MdDialect.cpp.inc"
#include "dialect/MdEnums.cpp.inc"

void MdDialect::initialize() {
  registerAttributes();
  // One list of every op: each GET_OP_LIST include expands to its ops,
  // comma-separated, and undefines the macro again.
  addOperations<
#define GET_OP_LIST
#include "dialect/MdStructureOps.cpp.inc"
      ,
#define GET_OP_LIST
#include "dialect/MdControlOps.cpp.inc"
      ,
#define GET_OP_LIST
#include "dialect/MdComputeOps.cpp.inc"
      ,
#define GET_OP_LIST
#include "dialect/MdOptimizerOps.cpp.inc"
      ,
#define GET_OP_LIST
#include "dialect/MdBufferOps.cpp.inc"
      ,
#define GET_OP_LIST
#include "dialect/MdCollectiveOps.cpp.inc"
      ,
#define GET_OP_LIST
#include "dialect/MdStepOps.cpp.inc"
      >();
}

Operation *MdDialect::materializeConstant(OpBuilder &builder, Attribute value,
                                          Type type, Location loc) {
  if (auto typed = dyn_cast<TypedAttr>(value))
    if (arith::ConstantOp::isBuildableWith(typed, type))
      return arith::ConstantOp::create(builder, loc, type, typed);
  return nullptr;
}

//===----------------------------------------------------------------------===//
// Shared helpers
//===----------------------------------------------------------------------===//

std::optional<int64_t> md::getStaticGroupSize(Operation *op, Group group) {
  auto model = op->getParentOfType<ModelOp>();
  if (!model)
    model = dyn_cast<ModelOp>(op);
  if (!model)
    return std::nullopt;
  return model.getStaticGroupSize(group);
}

int64_t md::getElementBytes(Type elementType) {
  if (elementType.isIntOrFloat())
    return std::max<int64_t>(1, elementType.getIntOrFloatBitWidth() / 8);
  return 0;
}

int64_t md::getTensorBytes(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor || !tensor.hasStaticShape())
    return 0;
  return tensor.getNumElements() * getElementBytes(tensor.getElementType());
}

std::string md::formatShape(ArrayRef<int64_t> shape) {
  std::string out;
  llvm::raw_string_ostream os(out);
  llvm::interleave(
      shape, os,
      [&](int64_t d) {
        if (ShapedType::isDynamic(d))
          os << "?";
        else
          os << d;
      },
      "x");
  return out;
}

static Operation *findCollectiveImpl(Operation *op,
                                     llvm::SmallPtrSetImpl<Operation *> &seen) {
  if (isa<CollectiveOpInterface>(op))
    return op;
  // Ops that communicate without being a collective themselves.
  if (isa<SaveOp>(op))
    return op; // full gathers to rank 0; sharded barriers before rename
  if (isa<EvaluateOp>(op))
    return op; // the metric is all-reduced
  if (auto call = dyn_cast<CallOp>(op)) {
    auto callee =
        SymbolTable::lookupNearestSymbolFrom<FuncOp>(op, call.getCalleeAttr());
    if (callee && seen.insert(callee).second)
      if (Operation *found = findCollectiveImpl(callee, seen))
        return found;
  }
  for (Region &region : op->getRegions())
    for (Operation &nested : region.getOps())
      if (Operation *found = findCollectiveImpl(&nested, seen))
        return found;
  return nullptr;
}

Operation *md::findCollective(Operation *op) {
  llvm::SmallPtrSet<Operation *, 8> seen;
  return findCollectiveImpl(op, seen);
}

bool md::containsCollective(Operation *op) {
  return findCollective(op) != nullptr;
}
