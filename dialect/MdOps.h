//===- MdOps.h - every op of the md dialect ---------------------*- C++ -*-===//

#ifndef MD_DIALECT_MDOPS_H
#define MD_DIALECT_MDOPS_H

#include "dialect/MdDialect.h"

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/RegionKindInterface.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/CallInterfaces.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "dialect/MdInterfaces.h.inc"

namespace md {
class ModelOp;
class ForwardOp;
class FuncOp;
class TrainOp;
class MicroStepsOp;

/// The resource every collective reads and writes: it keeps generic passes
/// from reordering, merging or deleting collectives, whose order is part of
/// the program's meaning in SPMD.
struct CommResource : public mlir::SideEffects::Resource::Base<CommResource> {
  llvm::StringRef getName() final { return "md.comm"; }
};

/// The resource every side effect of the recipe (log, save, exit) touches.
struct StateResource
    : public mlir::SideEffects::Resource::Base<StateResource> {
  llvm::StringRef getName() final { return "md.state"; }
};

struct HostIOResource
    : public mlir::SideEffects::Resource::Base<HostIOResource> {
  llvm::StringRef getName() final { return "md.host_io"; }
};

/// The number of ranks in `group` as seen from `op`, when the enclosing
/// `md.model` pins the world size; std::nullopt when it is symbolic in W.
std::optional<int64_t> getStaticGroupSize(mlir::Operation *op, Group group);

/// True when `op` is a collective, implies one (a full checkpoint gathers,
/// evaluation all-reduces its metric) or contains or calls one.
bool containsCollective(mlir::Operation *op);

/// The first op at or below `op` (following calls) that communicates, as
/// containsCollective counts them; null if none.
mlir::Operation *findCollective(mlir::Operation *op);

/// Element size in bytes of md's tensor element types.
int64_t getElementBytes(mlir::Type elementType);

/// Bytes of a statically shaped tensor type (0 for a dynamic one).
int64_t getTensorBytes(mlir::Type type);

/// The numpy broadcast of two shapes (a dynamic dim matches any size), or
/// std::nullopt when they do not broadcast. The verifiers of md.add/sub/mul
/// and the frontend's shape inference share it.
std::optional<llvm::SmallVector<int64_t>>
broadcastShapes(llvm::ArrayRef<int64_t> a, llvm::ArrayRef<int64_t> b);

/// "4x8xf32" for diagnostics.
std::string formatShape(llvm::ArrayRef<int64_t> shape);
} // namespace md

#define GET_OP_CLASSES
#include "dialect/MdStructureOps.h.inc"
#define GET_OP_CLASSES
#include "dialect/MdControlOps.h.inc"
#define GET_OP_CLASSES
#include "dialect/MdComputeOps.h.inc"
#define GET_OP_CLASSES
#include "dialect/MdOptimizerOps.h.inc"
#define GET_OP_CLASSES
#include "dialect/MdBufferOps.h.inc"
#define GET_OP_CLASSES
#include "dialect/MdCollectiveOps.h.inc"
#define GET_OP_CLASSES
#include "dialect/MdStepOps.h.inc"

#endif // MD_DIALECT_MDOPS_H
