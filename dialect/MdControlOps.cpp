//===- MdControlOps.cpp - SPMD values, control flow, recipe effects -------===//

#include "dialect/MdAsmUtils.h"
#include "dialect/MdOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"

using namespace mlir;
using namespace md;

#define GET_OP_CLASSES
#include "dialect/MdControlOps.cpp.inc"

//===----------------------------------------------------------------------===//
// LrOp
//===----------------------------------------------------------------------===//

LogicalResult LrOp::verify() {
  if (!(*this)->getParentOfType<TrainOp>())
    return emitOpError("must be inside an 'md.train', whose schedule it reads");
  return success();
}

LogicalResult LossOp::verify() {
  if (!(*this)->getParentOfType<TrainOp>())
    return emitOpError("must be inside an 'md.train': there is no loss "
                       "outside training");
  return success();
}

//===----------------------------------------------------------------------===//
// IfOp
//===----------------------------------------------------------------------===//

void IfOp::build(OpBuilder &builder, OperationState &state,
                 TypeRange resultTypes, Value cond, bool withElse) {
  state.addOperands(cond);
  state.addTypes(resultTypes);
  OpBuilder::InsertionGuard guard(builder);
  Region *thenRegion = state.addRegion();
  builder.createBlock(thenRegion);
  if (resultTypes.empty())
    YieldOp::create(builder, state.location);
  Region *elseRegion = state.addRegion();
  if (withElse) {
    builder.createBlock(elseRegion);
    if (resultTypes.empty())
      YieldOp::create(builder, state.location);
  }
}

ParseResult IfOp::parse(OpAsmParser &parser, OperationState &result) {
  result.regions.reserve(2);
  Region *thenRegion = result.addRegion();
  Region *elseRegion = result.addRegion();
  OpAsmParser::UnresolvedOperand cond;
  Type i1 = parser.getBuilder().getI1Type();
  if (parser.parseOperand(cond) ||
      parser.resolveOperand(cond, i1, result.operands))
    return failure();
  if (parser.parseOptionalArrowTypeList(result.types))
    return failure();
  if (parser.parseRegion(*thenRegion, /*arguments=*/{}, /*argTypes=*/{}))
    return failure();
  IfOp::ensureTerminator(*thenRegion, parser.getBuilder(), result.location);
  if (!parser.parseOptionalKeyword("else")) {
    if (parser.parseRegion(*elseRegion, /*arguments=*/{}, /*argTypes=*/{}))
      return failure();
    IfOp::ensureTerminator(*elseRegion, parser.getBuilder(), result.location);
  }
  return parser.parseOptionalAttrDict(result.attributes);
}

void IfOp::print(OpAsmPrinter &p) {
  bool printBlockTerminators = !getResults().empty();
  p << " " << getCondition();
  if (!getResults().empty())
    p << " -> (" << getResultTypes() << ")";
  p << ' ';
  p.printRegion(getThenRegion(), /*printEntryBlockArgs=*/false,
                printBlockTerminators);
  if (!getElseRegion().empty()) {
    p << " else ";
    p.printRegion(getElseRegion(), /*printEntryBlockArgs=*/false,
                  printBlockTerminators);
  }
  p.printOptionalAttrDict((*this)->getAttrs());
}

/// Every yield in `region` must yield values of `types`.
static LogicalResult verifyYields(Operation *op, Region &region,
                                  TypeRange types, StringRef regionName) {
  if (region.empty())
    return success();
  auto yield = cast<YieldOp>(region.front().getTerminator());
  if (yield.getNumOperands() != types.size())
    return op->emitOpError("the ")
           << regionName << " region yields " << yield.getNumOperands()
           << " values, the op has " << types.size() << " results";
  for (auto [i, value] : llvm::enumerate(yield.getOperands()))
    if (value.getType() != types[i])
      return op->emitOpError("the ")
             << regionName << " region yields " << value.getType()
             << " for result #" << i << " of type " << types[i];
  return success();
}

LogicalResult IfOp::verify() {
  if (getNumResults() != 0 && getElseRegion().empty())
    return emitOpError("with results needs an else region");
  if (failed(verifyYields(*this, getThenRegion(), getResultTypes(), "then")) ||
      failed(verifyYields(*this, getElseRegion(), getResultTypes(), "else")))
    return failure();
  return success();
}

void IfOp::getSuccessorRegions(RegionBranchPoint point,
                               SmallVectorImpl<RegionSuccessor> &regions) {
  if (!point.isParent()) {
    regions.push_back(RegionSuccessor(getOperation(), getResults()));
    return;
  }
  regions.push_back(RegionSuccessor(&getThenRegion()));
  if (getElseRegion().empty())
    regions.push_back(RegionSuccessor(getOperation(), getResults()));
  else
    regions.push_back(RegionSuccessor(&getElseRegion()));
}

//===----------------------------------------------------------------------===//
// EveryOp
//===----------------------------------------------------------------------===//

/// A region that must not communicate because only rank 0 runs it. The
/// notes say what communicates and what to write instead.
static LogicalResult verifyRank0Only(Operation *op, bool rank0Only) {
  if (!rank0Only)
    return success();
  Operation *collective = findCollective(op);
  if (!collective)
    return success();
  InFlightDiagnostic diag =
      op->emitOpError("is rank0_only but communicates: the other ranks would "
                      "never join its collective (a deadlock); drop "
                      "rank0_only, md already writes on rank 0 only where "
                      "that is safe");
  if (collective != op)
    diag.attachNote(collective->getLoc())
        << "'" << collective->getName() << "' communicates here";
  if (isa<SaveOp>(collective))
    diag.attachNote(op->getLoc())
        << "fix: every rank must run 'md.save' (a full checkpoint gathers the "
           "parameters to rank 0, which alone writes the file; a sharded one "
           "barriers before the rename)";
  else if (isa<EvaluateOp>(collective))
    diag.attachNote(op->getLoc())
        << "fix: run 'md.evaluate' on every rank (its all-reduced loss is "
           "the same everywhere) and log the result with rank0_only";
  else
    diag.attachNote(op->getLoc())
        << "fix: run the collective on every rank, outside the rank0_only "
           "body, and keep only pure side effects (log, print) in it";
  return diag;
}

LogicalResult EveryOp::verify() {
  if (failed(verifyYields(*this, getBody(), TypeRange(), "body")))
    return failure();
  if (getUnit() != PeriodUnit::steps && !(*this)->getParentOfType<TrainOp>())
    return emitOpError("with a time period must be inside an 'md.train' hook");
  return verifyRank0Only(*this, getRank0Only());
}

void EveryOp::getSuccessorRegions(RegionBranchPoint point,
                                  SmallVectorImpl<RegionSuccessor> &regions) {
  if (point.isParent())
    regions.push_back(RegionSuccessor(&getBody()));
  regions.push_back(RegionSuccessor(getOperation(), getOperation()->getResults()));
}

//===----------------------------------------------------------------------===//
// ForOp
//===----------------------------------------------------------------------===//

void ForOp::build(OpBuilder &builder, OperationState &state, Value lb,
                  Value ub) {
  state.addOperands({lb, ub});
  OpBuilder::InsertionGuard guard(builder);
  Region *body = state.addRegion();
  Block *block = builder.createBlock(body);
  block->addArgument(builder.getI64Type(), state.location);
  YieldOp::create(builder, state.location);
}

ParseResult ForOp::parse(OpAsmParser &parser, OperationState &result) {
  OpAsmParser::Argument iv;
  OpAsmParser::UnresolvedOperand lb, ub;
  Type i64 = parser.getBuilder().getI64Type();
  if (parser.parseArgument(iv) || parser.parseEqual() ||
      parser.parseOperand(lb) || parser.parseKeyword("to") ||
      parser.parseOperand(ub) ||
      parser.resolveOperand(lb, i64, result.operands) ||
      parser.resolveOperand(ub, i64, result.operands))
    return failure();
  iv.type = i64;
  Region *body = result.addRegion();
  if (parser.parseRegion(*body, {iv}))
    return failure();
  ForOp::ensureTerminator(*body, parser.getBuilder(), result.location);
  return parser.parseOptionalAttrDict(result.attributes);
}

void ForOp::print(OpAsmPrinter &p) {
  p << " " << getInductionVar() << " = " << getLowerBound() << " to "
    << getUpperBound() << " ";
  p.printRegion(getBody(), /*printEntryBlockArgs=*/false,
                /*printBlockTerminators=*/false);
  p.printOptionalAttrDict((*this)->getAttrs());
}

LogicalResult ForOp::verify() {
  Block &body = getBody().front();
  if (body.getNumArguments() != 1 || !body.getArgument(0).getType().isInteger(64))
    return emitOpError("body must have one i64 induction variable");
  return verifyYields(*this, getBody(), TypeRange(), "body");
}

void ForOp::getSuccessorRegions(RegionBranchPoint point,
                                SmallVectorImpl<RegionSuccessor> &regions) {
  // From the parent or the end of the body: run the body (again) or leave.
  regions.push_back(RegionSuccessor(&getBody()));
  regions.push_back(RegionSuccessor(getOperation(), getOperation()->getResults()));
}

//===----------------------------------------------------------------------===//
// Effects
//===----------------------------------------------------------------------===//

LogicalResult LogOp::verify() { return verifyRank0Only(*this, getRank0Only()); }
LogicalResult PrintOp::verify() {
  return verifyRank0Only(*this, getRank0Only());
}
LogicalResult SaveOp::verify() {
  if (getPath() && getPath()->empty())
    return emitOpError("checkpoint path is empty");
  return verifyRank0Only(*this, getRank0Only());
}
LogicalResult ExitOp::verify() {
  // A failed run says why: the reason is mdrun's message.
  if (getFailure() && (!getReason() || getReason()->empty()))
    return emitOpError("a failure needs a reason");
  return success();
}
LogicalResult EvaluateOp::verify() {
  return verifyRank0Only(*this, getRank0Only());
}
