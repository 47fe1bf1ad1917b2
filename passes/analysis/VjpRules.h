//===- VjpRules.h - md-autodiff's vector-Jacobian products ------*- C++ -*-===//
//
// The reverse-mode rule of every op md-autodiff can differentiate, behind
// one entry point: given the gradients of an op's results, build the
// gradients of its operands.
//
//===----------------------------------------------------------------------===//

#ifndef MD_PASSES_ANALYSIS_VJPRULES_H
#define MD_PASSES_ANALYSIS_VJPRULES_H

#include "mlir/IR/Builders.h"
#include "mlir/Support/LLVM.h"
#include "llvm/ADT/STLFunctionalExtras.h"

namespace md {

/// What a rule works with: a builder at the end of the backward pass, a test
/// that says which operands need a gradient (the float values that depend
/// on a trainable parameter) and a sink for operand gradients, which sums
/// the contributions to a value used several times. A gradient always has
/// the type of the value it is the gradient of.
struct VjpContext {
  mlir::OpBuilder &builder;
  llvm::function_ref<bool(mlir::Value)> needsGradient;
  llvm::function_ref<void(mlir::Value operand, mlir::Value gradient)>
      addGradient;
};

/// Builds the vector-Jacobian product of `op`. `resultGradients[i]` is the
/// gradient of result i, or null where the loss does not depend on that
/// result; at least one is non-null. Fails, with a diagnostic at `op`, for an
/// op without a rule or gradients its rule cannot take.
mlir::LogicalResult emitVjp(mlir::Operation *op,
                            mlir::ArrayRef<mlir::Value> resultGradients,
                            const VjpContext &context);

} // namespace md

#endif // MD_PASSES_ANALYSIS_VJPRULES_H
