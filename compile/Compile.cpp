//===- Compile.cpp - md's compiler as a library ---------------------------===//
//
// The stages run in the order and with the settings mdc has always used, so
// that what it prints, diagnostics included, and the plans it writes do not
// change with the driver: the context is single-threaded and prints no op
// under a diagnostic while the pipeline runs, and the IR's own diagnostics
// print like the frontend's, with the .mdl line under them.
//
//===----------------------------------------------------------------------===//

#include "compile/Compile.h"

#include "compile/Pipeline.h"
#include "dialect/MdOps.h"
#include "frontend/Diagnostics.h"
#include "frontend/Parser.h"
#include "passes/ExplainReport.h"
#include "target/plan/EmitPlan.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"

#include "llvm/ADT/STLExtras.h"

using namespace md;

std::unique_ptr<mlir::MLIRContext>
md::createCompilerContext(mlir::MLIRContext::Threading threading) {
  mlir::DialectRegistry registry;
  registry.insert<MdDialect, mlir::func::FuncDialect, mlir::arith::ArithDialect,
                  mlir::tensor::TensorDialect>();
  auto context = std::make_unique<mlir::MLIRContext>(registry, threading);
  context->loadAllAvailableDialects();
  return context;
}

namespace {

/// Runs md's training pipeline on `module`.
mlir::LogicalResult runPipeline(mlir::ModuleOp module,
                                const CompileOptions &options) {
  mlir::MLIRContext &context = *module.getContext();
  // One thread: the IR dumps and the diagnostics come in a fixed order.
  // A diagnostic points at the .mdl line; the IR it came from is noise.
  context.disableMultithreading();
  context.printOpOnDiagnostic(false);
  mlir::PassManager pm(&context);
  if (options.printIRAfterAll)
    pm.enableIRPrinting(
        /*shouldPrintBeforePass=*/[](mlir::Pass *,
                                     mlir::Operation *) { return false; },
        /*shouldPrintAfterPass=*/
        [](mlir::Pass *, mlir::Operation *) { return true; },
        /*printModuleScope=*/true, /*printAfterOnlyOnChange=*/false,
        /*printAfterOnlyOnFailure=*/false, *options.printIRAfterAll,
        options.irPrintingFlags);
  TrainingPipelineOptions pipeline;
  pipeline.maxMemory = options.maxMemory;
  buildTrainingPipeline(pm, pipeline);
  return pm.run(module);
}

/// The explain report of every model of `module`, one after the other.
mlir::FailureOr<std::string>
explainModels(mlir::ModuleOp module, int64_t worldSize, ExplainFormat format) {
  std::string report;
  llvm::raw_string_ostream os(report);
  for (ModelOp model : module.getOps<ModelOp>()) {
    mlir::FailureOr<ExplainReport> explained =
        computeExplainReport(model, worldSize);
    if (mlir::failed(explained))
      return mlir::failure();
    if (format == ExplainFormat::JSON)
      printExplainJson(*explained, os);
    else
      printExplainText(*explained, os);
  }
  return report;
}

} // namespace

mlir::FailureOr<CompiledPlan> md::compile(const Source &source,
                                          const CompileOptions &options) {
  llvm::raw_ostream &diagnostics = *options.diagnostics;
  auto fail = [&](const llvm::Twine &message) {
    diagnostics << options.toolName << ": error: " << message << "\n";
    return mlir::failure();
  };

  if (options.explain != ExplainFormat::None &&
      options.stopAfter < CompileStage::Pipeline)
    return fail("the explain report needs md's pipeline to run");
  if (options.explain != ExplainFormat::None && !options.irgen.worldSize)
    return fail("the explain report needs a world size: memory and "
                "communication depend on the number of ranks");

  CompiledPlan result;
  result.sourceMgr = std::make_unique<llvm::SourceMgr>();
  unsigned bufferId = addSource(source, *result.sourceMgr);
  frontend::Diagnostics diags(*result.sourceMgr, diagnostics);
  diags.setErrorLimit(options.errorLimit);
  result.ast = frontend::parseModule(bufferId, diags);
  if (diags.hasErrors())
    return mlir::failure();
  if (options.stopAfter == CompileStage::Parse)
    return result;

  result.context = createCompilerContext();
  mlir::SourceMgrDiagnosticHandler irDiagnostics(
      *result.sourceMgr, result.context.get(), diagnostics);
  result.module =
      frontend::generateIR(*result.ast, *result.context, options.irgen, diags);
  if (!result.module || diags.hasErrors())
    return mlir::failure();
  mlir::ModuleOp module = *result.module;
  if (mlir::failed(mlir::verify(module)))
    return fail("internal error: the generated IR does not verify");
  if (options.stopAfter == CompileStage::IRGen)
    return result;

  bool hasTrain = false;
  module.walk([&](TrainOp) { hasTrain = true; });
  if (options.stopAfter == CompileStage::Plan && !hasTrain)
    return fail(source.path + ": the model has no train block: there is "
                              "nothing to run, so no plan");
  bool pipeline =
      !options.pipelineNeedsTrain || (hasTrain && !options.irgen.plan.empty());
  if (pipeline && mlir::failed(runPipeline(module, options)))
    return mlir::failure();

  if (options.explain != ExplainFormat::None) {
    mlir::FailureOr<std::string> report =
        explainModels(module, *options.irgen.worldSize, options.explain);
    if (mlir::failed(report))
      return mlir::failure();
    result.explainReport = std::move(*report);
  }

  if (options.stopAfter == CompileStage::Plan) {
    auto models = llvm::to_vector(module.getOps<ModelOp>());
    if (models.size() != 1)
      return fail("a plan holds one model; the file has " +
                  llvm::Twine(models.size()) +
                  " (choose one with --model NAME)");
    EmitPlanOptions emit;
    emit.sourceFile = source.path;
    emit.sourceText = source.text;
    emit.compilerVersion = options.compilerVersion;
    mlir::FailureOr<std::vector<uint8_t>> bytes =
        emitPlan(models.front(), emit);
    if (mlir::failed(bytes))
      return mlir::failure();
    result.plan = std::move(*bytes);
  }
  return result;
}
