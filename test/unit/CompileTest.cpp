//===- CompileTest.cpp - the compile library's entry points ---------------===//
//
// md::compile and md::runCheck called directly, as mdc calls them: a small
// program compiles to a plan the runtime's loader accepts, each stage stops
// where it is asked to, and a bad program fails with diagnostics located in
// its text.
//
//===----------------------------------------------------------------------===//

#include "compile/Compile.h"
#include "compile/Check.h"
#include "dialect/MdOps.h"
#include "runtime/plan/Loader.h"

#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

#include <string>

using namespace md;

namespace {

/// A program small enough to compile in a moment: one linear layer.
constexpr const char *kTiny = R"(model tiny(d = 4) {
  param fc: Linear(d, 3)
  forward(x: f32[B, d], y: i32[B]) {
    return cross_entropy(fc(x), y)
  }
}

train {
  data = synthetic()
  global_batch = 8
  micro_batch = 4
  optimizer = sgd(lr = 0.1)
}
)";

/// Options that send the diagnostics to `os`.
CompileOptions optionsFor(llvm::raw_string_ostream &os,
                          llvm::StringRef plan = "ddp") {
  CompileOptions options;
  options.irgen.plan = plan.str();
  options.compilerVersion = "md CompileTest";
  options.diagnostics = &os;
  return options;
}

/// Whether md-apply-plan has built the step program: its persistent state
/// is md.state ops, which the frontend never creates.
bool hasStepProgram(mlir::ModuleOp module) {
  bool found = false;
  module.walk([&](StateOp) { found = true; });
  return found;
}

TEST(CompileTest, SmallProgramCompilesToAPlanTheLoaderAccepts) {
  std::string diagnostics;
  llvm::raw_string_ostream os(diagnostics);
  CompileOptions options = optionsFor(os);
  mlir::FailureOr<CompiledPlan> compiled =
      compile(Source::fromText("tiny.mdl", kTiny), options);
  ASSERT_TRUE(mlir::succeeded(compiled)) << diagnostics;
  EXPECT_EQ(diagnostics, "");
  ASSERT_FALSE(compiled->plan.empty());

  absl::StatusOr<plan::LoadedPlan> loaded = plan::LoadPlan(compiled->plan);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const fb::Header *header = loaded->plan().header();
  ASSERT_NE(header, nullptr);
  EXPECT_EQ(header->model()->str(), "tiny");
  EXPECT_EQ(header->plan_name()->str(), "ddp");
  EXPECT_EQ(header->source_file()->str(), "tiny.mdl");
  EXPECT_EQ(header->compiler_version()->str(), "md CompileTest");

  // The same program and options give the same bytes; another plan does
  // not.
  mlir::FailureOr<CompiledPlan> again =
      compile(Source::fromText("tiny.mdl", kTiny), options);
  ASSERT_TRUE(mlir::succeeded(again));
  EXPECT_EQ(again->plan, compiled->plan);
  options.irgen.plan = "fsdp-full";
  mlir::FailureOr<CompiledPlan> fsdp =
      compile(Source::fromText("tiny.mdl", kTiny), options);
  ASSERT_TRUE(mlir::succeeded(fsdp)) << diagnostics;
  EXPECT_NE(fsdp->plan, compiled->plan);
}

TEST(CompileTest, ModelFileFromDiskCompiles) {
  llvm::ErrorOr<Source> source = readSource(MD_SOURCE_DIR "/models/mlp.mdl");
  ASSERT_TRUE(bool(source)) << source.getError().message();
  EXPECT_EQ(source->path, MD_SOURCE_DIR "/models/mlp.mdl");
  EXPECT_EQ(source->bufferName, source->path);
  std::string diagnostics;
  llvm::raw_string_ostream os(diagnostics);
  mlir::FailureOr<CompiledPlan> compiled =
      compile(*source, optionsFor(os, "ddp-small-buckets"));
  ASSERT_TRUE(mlir::succeeded(compiled)) << diagnostics;
  EXPECT_TRUE(plan::LoadPlan(compiled->plan).ok());

  EXPECT_FALSE(bool(readSource(MD_SOURCE_DIR "/models/no-such-model.mdl")));
}

TEST(CompileTest, EachStageStopsWhereAsked) {
  std::string diagnostics;
  llvm::raw_string_ostream os(diagnostics);
  CompileOptions options = optionsFor(os);
  Source source = Source::fromText("tiny.mdl", kTiny);

  options.stopAfter = CompileStage::Parse;
  mlir::FailureOr<CompiledPlan> parsed = compile(source, options);
  ASSERT_TRUE(mlir::succeeded(parsed)) << diagnostics;
  ASSERT_TRUE(parsed->ast);
  EXPECT_EQ(parsed->ast->blocks.size(), 1u);
  EXPECT_FALSE(parsed->module);

  options.stopAfter = CompileStage::IRGen;
  mlir::FailureOr<CompiledPlan> generated = compile(source, options);
  ASSERT_TRUE(mlir::succeeded(generated)) << diagnostics;
  ASSERT_TRUE(generated->module);
  EXPECT_FALSE(hasStepProgram(*generated->module));
  EXPECT_TRUE(generated->plan.empty());

  options.stopAfter = CompileStage::Pipeline;
  mlir::FailureOr<CompiledPlan> lowered = compile(source, options);
  ASSERT_TRUE(mlir::succeeded(lowered)) << diagnostics;
  EXPECT_TRUE(hasStepProgram(*lowered->module));
  EXPECT_TRUE(lowered->plan.empty());

  // Without a plan there is no step program to build: the module stays as
  // the frontend builds it when the pipeline is asked for only then.
  options.irgen.plan.clear();
  options.pipelineNeedsTrain = true;
  mlir::FailureOr<CompiledPlan> unplanned = compile(source, options);
  ASSERT_TRUE(mlir::succeeded(unplanned)) << diagnostics;
  EXPECT_FALSE(hasStepProgram(*unplanned->module));
  EXPECT_EQ(diagnostics, "");
}

TEST(CompileTest, ExplainReportAtAWorldSize) {
  std::string diagnostics;
  llvm::raw_string_ostream os(diagnostics);
  CompileOptions options = optionsFor(os);
  options.stopAfter = CompileStage::Pipeline;
  options.explain = ExplainFormat::Text;
  Source source = Source::fromText("tiny.mdl", kTiny);

  // The report depends on W: without one the library refuses, it does not
  // guess.
  EXPECT_TRUE(mlir::failed(compile(source, options)));
  EXPECT_NE(diagnostics.find("md: error: the explain report needs a world "
                             "size"),
            std::string::npos)
      << diagnostics;

  diagnostics.clear();
  options.irgen.worldSize = 2;
  mlir::FailureOr<CompiledPlan> text = compile(source, options);
  ASSERT_TRUE(mlir::succeeded(text)) << diagnostics;
  EXPECT_NE(text->explainReport.find("tiny"), std::string::npos)
      << text->explainReport;
  options.explain = ExplainFormat::JSON;
  mlir::FailureOr<CompiledPlan> json = compile(source, options);
  ASSERT_TRUE(mlir::succeeded(json)) << diagnostics;
  EXPECT_EQ(json->explainReport.rfind("{", 0), 0u) << json->explainReport;
}

TEST(CompileTest, BadProgramFailsWithLocatedDiagnostics) {
  std::string diagnostics;
  llvm::raw_string_ostream os(diagnostics);
  CompileOptions options = optionsFor(os);
  // Line 2: a layer no one defined.
  Source source = Source::fromText("bad.mdl", "model m(d = 4) {\n"
                                              "  param fc: Nope(d, 3)\n"
                                              "  forward(x: f32[2, d]) {\n"
                                              "    return sum(fc(x))\n"
                                              "  }\n"
                                              "}\n");
  EXPECT_TRUE(mlir::failed(compile(source, options)));
  EXPECT_NE(
      diagnostics.find("bad.mdl:2:13: error: unknown layer or block 'Nope'"),
      std::string::npos)
      << diagnostics;

  // A syntax error stops at the parser, located too.
  diagnostics.clear();
  options.stopAfter = CompileStage::Parse;
  EXPECT_TRUE(mlir::failed(
      compile(Source::fromText("syntax.mdl", "model m( {\n"), options)));
  EXPECT_NE(diagnostics.find("syntax.mdl:1:"), std::string::npos)
      << diagnostics;
}

TEST(CompileTest, PlanNeedsATrainBlock) {
  std::string diagnostics;
  llvm::raw_string_ostream os(diagnostics);
  CompileOptions options = optionsFor(os);
  options.toolName = "tool";
  std::string program = kTiny;
  program.resize(program.find("train {"));
  EXPECT_TRUE(mlir::failed(
      compile(Source::fromText("no-train.mdl", program), options)));
  EXPECT_EQ(diagnostics, "tool: error: no-train.mdl: the model has no train "
                         "block: there is nothing to run, so no plan\n");
}

TEST(CompileTest, CheckCountsFindingsPerFile) {
  std::string out, err;
  llvm::raw_string_ostream outStream(out), errStream(err);
  CheckOptions options;
  options.files = {MD_SOURCE_DIR "/test/lit/check/rank-gated.mdl"};
  options.plan = "ddp";
  CheckSummary gated = runCheck(options, outStream, errStream);
  EXPECT_GT(gated.errors, 0u);
  EXPECT_NE(err.find("rank-gated.mdl:"), std::string::npos) << err;
  EXPECT_NE(out.find("mdc --check: 1 file under 1 plan"), std::string::npos)
      << out;

  out.clear();
  err.clear();
  options.files = {MD_SOURCE_DIR "/test/lit/check/rank-gated-safe.mdl"};
  options.plan = "all";
  CheckSummary safe = runCheck(options, outStream, errStream);
  EXPECT_EQ(safe.errors, 0u) << err;
  EXPECT_EQ(safe.warnings, 0u) << err;
}

} // namespace
