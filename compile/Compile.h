//===- Compile.h - md's compiler as a library -------------------*- C++ -*-===//
//
// One entry point for the whole compiler: parse a .mdl program, generate
// and verify its md IR, run md's training pipeline, and emit the plan or the
// explain report. `mdc` is a driver around it (arguments, output files,
// exit codes), and tests call it directly. `--check`'s entry point, which
// runs the frontend under several plans, is compile/Check.h.
//
//===----------------------------------------------------------------------===//

#ifndef MD_COMPILE_COMPILE_H
#define MD_COMPILE_COMPILE_H

#include "compile/Source.h"
#include "frontend/AST.h"
#include "frontend/IRGen.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OperationSupport.h"
#include "mlir/IR/OwningOpRef.h"
#include "mlir/Support/LLVM.h"

#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace md {

/// Where compilation stops; each stage includes the ones before it.
enum class CompileStage {
  /// The syntax tree.
  Parse,
  /// The md module as the frontend builds it, verified.
  IRGen,
  /// The module after md's training pipeline (compile/Pipeline.h).
  Pipeline,
  /// The plan mdrun executes: the file's one model must have an md.train.
  Plan,
};

enum class ExplainFormat { None, Text, JSON };

struct CompileOptions {
  /// The plan, the model, -D overrides and the pinned world size.
  frontend::IRGenOptions irgen;
  CompileStage stopAfter = CompileStage::Plan;
  /// With stopAfter == Pipeline: the pipeline runs only when a plan is
  /// given and the module has an md.train; otherwise the module stays as
  /// the frontend builds it (a model without a recipe has nothing to train).
  bool pipelineNeedsTrain = false;
  /// md-plan-memory fails when the predicted per-rank peak exceeds this
  /// many bytes (0: no limit).
  int64_t maxMemory = 0;
  /// The report of passes/ExplainReport.h for every model at
  /// `irgen.worldSize`, which must be set (needs stopAfter >= Pipeline).
  ExplainFormat explain = ExplainFormat::None;
  /// When set, the IR is printed here after every pass, with these flags.
  llvm::raw_ostream *printIRAfterAll = nullptr;
  mlir::OpPrintingFlags irPrintingFlags;
  /// Header.compiler_version of the plan.
  std::string compilerVersion;
  /// Where every diagnostic goes: the frontend's and the IR's, with the
  /// .mdl line under them, and those about the program as a whole, which
  /// read `<toolName>: error: message`.
  llvm::raw_ostream *diagnostics = &llvm::errs();
  /// The .mdl errors shown at most (frontend/Diagnostics.h); 0: all.
  unsigned errorLimit = 20;
  std::string toolName = "md";
};

/// What a compilation produced, up to its stop stage. The module's context
/// and the syntax tree's SourceMgr live as long as it does.
struct CompiledPlan {
  std::unique_ptr<llvm::SourceMgr> sourceMgr;
  std::unique_ptr<frontend::Module> ast;
  std::unique_ptr<mlir::MLIRContext> context;
  /// Null at CompileStage::Parse.
  mlir::OwningOpRef<mlir::ModuleOp> module;
  /// When CompileOptions::explain asks for it.
  std::string explainReport;
  /// At CompileStage::Plan: the FlatBuffer plan, verified by the runtime's
  /// loader.
  std::vector<uint8_t> plan;
};

/// Compiles `source` up to `options.stopAfter`. Fails after reporting every
/// error it found to `options.diagnostics`.
mlir::FailureOr<CompiledPlan> compile(const Source &source,
                                      const CompileOptions &options);

/// A context with the dialects md's IR uses loaded: md, func, arith, tensor.
std::unique_ptr<mlir::MLIRContext>
createCompilerContext(mlir::MLIRContext::Threading threading =
                          mlir::MLIRContext::Threading::ENABLED);

} // namespace md

#endif // MD_COMPILE_COMPILE_H
