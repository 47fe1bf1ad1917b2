//===- md-opt.cpp - mlir-opt for the md dialect ---------------------------===//
//
// Parses, verifies, transforms and prints md IR. Registers the md dialect,
// the upstream dialects md programs use (func, arith, tensor, scf), md's
// passes and MLIR's generic transforms (canonicalize, cse, ...). lit runs it.
//
//===----------------------------------------------------------------------===//

#include "compile/Pipeline.h"
#include "dialect/MdOps.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::registerTransformsPasses();
  md::registerMdPasses();
  md::registerTrainingPipeline();
  mlir::DialectRegistry registry;
  registry.insert<md::MdDialect, mlir::func::FuncDialect,
                  mlir::arith::ArithDialect, mlir::tensor::TensorDialect,
                  mlir::scf::SCFDialect>();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "md optimizer driver\n", registry));
}
