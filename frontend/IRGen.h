//===- IRGen.h - .mdl AST to the md dialect ---------------------*- C++ -*-===//
//
// Semantic analysis and IR generation. Reads a parsed Module, reports every
// semantic error it can through Diagnostics, and builds one `md.model` (with
// its params, functions, forward, recipe and the chosen plan) whose locations
// are FileLineColLocs into the .mdl file.
//
//===----------------------------------------------------------------------===//

#ifndef MD_FRONTEND_IRGEN_H
#define MD_FRONTEND_IRGEN_H

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "frontend/AST.h"
#include "frontend/Diagnostics.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"

namespace md::frontend {

struct IRGenOptions {
  /// A plan of the file or a built-in preset; empty: no plan attribute.
  std::string plan;
  /// Pins W (`mdc --world-size N`); the model then carries `world_size`.
  std::optional<int64_t> worldSize;
  /// `mdc -D name=value`: overrides of the model's hyper-parameters.
  std::map<std::string, std::string> overrides;
  /// Which model to emit when the file has several; empty: the only one.
  std::string model;
  /// Plan options set on the command line (`mdc --interconnect pcie` gives
  /// "interconnect = pcie"), each `option = value` in .mdl syntax; they
  /// override the selected plan's.
  std::vector<std::string> planOptions;
};

/// Null when there were errors (all of them reported through `diags`).
mlir::OwningOpRef<mlir::ModuleOp> generateIR(const Module &module,
                                             mlir::MLIRContext &context,
                                             const IRGenOptions &options,
                                             Diagnostics &diags);

/// The built-in plan presets: single, ddp, zero1, fsdp-grad-op, fsdp-full,
/// fsdp-hybrid.
llvm::ArrayRef<llvm::StringRef> getBuiltinPlanNames();

} // namespace md::frontend

#endif // MD_FRONTEND_IRGEN_H
