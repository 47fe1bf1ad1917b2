//===- mdc.cpp - the md compiler driver -----------------------------------===//
//
// Reads a .mdl program, parses it, and prints either its AST (--emit=ast) or
// the md dialect module that IR generation builds from it (--emit=mlir, the
// default). With --explain, --max-memory or --print-ir-after-all it runs md's
// training pipeline on the module first; --explain then prints the report of
// passes/ExplainReport.h instead of the IR. A thin driver: it parses the
// command line, hands the program to the compile library (compile/Compile.h,
// compile/Check.h) and writes what it returns. Exit status: 0 success, 1
// errors in the program or its files (diagnostics on stderr), 2 a bad
// command line.
//
//===----------------------------------------------------------------------===//

#include <cstdlib>
#include <optional>
#include <string>

#include "compile/Check.h"
#include "compile/Compile.h"
#include "frontend/AST.h"
#include "frontend/IRGen.h"

#include "mlir/IR/OperationSupport.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/raw_ostream.h"

namespace cl = llvm::cl;
using namespace md::frontend;

namespace {

enum ExitCode { kSuccess = 0, kUserError = 1, kUsageError = 2 };

enum class EmitKind { MLIR, Frontend, AST, Plan };

cl::OptionCategory mdcCategory("mdc options");

cl::opt<std::string> inputFilename(cl::Positional, cl::Required,
                                   cl::desc("<input .mdl file>"),
                                   cl::cat(mdcCategory));

cl::list<std::string>
    moreInputFilenames(cl::Positional,
                       cl::desc("[more .mdl files, with --check]"),
                       cl::cat(mdcCategory));

cl::opt<bool> check("check",
                    cl::desc("Run the static desync check on every given file "
                             "(under --plan NAME or all) and report every "
                             "finding; exit 1 if any is an error"),
                    cl::init(false), cl::cat(mdcCategory));

cl::opt<md::CheckFormat> outputFormat(
    "format", cl::init(md::CheckFormat::Text),
    cl::desc("How --check reports its findings and --explain its report"),
    cl::values(clEnumValN(md::CheckFormat::Text, "text",
                          "Compiler diagnostics on stderr (default)"),
               clEnumValN(md::CheckFormat::JSON, "json",
                          "One JSON document on stdout"),
               clEnumValN(md::CheckFormat::SARIF, "sarif",
                          "SARIF 2.1.0 on stdout, for CI annotations "
                          "(--check only)")),
    cl::cat(mdcCategory));

cl::opt<std::string> outputFilename("o", cl::init("-"),
                                    cl::desc("Write the output to <file> "
                                             "(default: stdout)"),
                                    cl::value_desc("file"),
                                    cl::cat(mdcCategory));

cl::opt<EmitKind> emitKind(
    "emit", cl::init(EmitKind::MLIR), cl::desc("What to print"),
    cl::values(clEnumValN(EmitKind::MLIR, "mlir",
                          "The md dialect module after md's passes when a "
                          "plan is given (default)"),
               clEnumValN(EmitKind::Frontend, "frontend",
                          "The md dialect module as the frontend builds it, "
                          "before any pass"),
               clEnumValN(EmitKind::AST, "ast",
                          "The syntax tree, after parsing only"),
               clEnumValN(EmitKind::Plan, "plan",
                          "The plan mdrun executes (a FlatBuffer, to -o "
                          "FILE; the default when FILE ends in .fb)")),
    cl::cat(mdcCategory));

cl::opt<std::string> planName(
    "plan",
    cl::desc("The parallelism plan: a plan of the file or a built-in preset "
             "(default: none)"),
    cl::value_desc("name"), cl::cat(mdcCategory));

cl::opt<std::string>
    modelName("model",
              cl::desc("The model to compile when the file has several"),
              cl::value_desc("name"), cl::cat(mdcCategory));

cl::list<std::string> defines(
    "D", cl::Prefix,
    cl::desc("Override the model's hyper-parameter <name> with <value>"),
    cl::value_desc("name=value"), cl::cat(mdcCategory));

cl::opt<long>
    worldSize("world-size",
              cl::desc("Pin the number of ranks W (default: chosen at launch)"),
              cl::value_desc("N"), cl::cat(mdcCategory));

cl::opt<bool> explain(
    "explain",
    cl::desc("Run the passes and print, for --world-size N, the per-rank "
             "memory, the communication per step, the buckets, the "
             "precision of casts and collectives and the batch arithmetic, "
             "instead of the IR"),
    cl::init(false), cl::cat(mdcCategory));

cl::opt<std::string> maxMemory(
    "max-memory",
    cl::desc("Fail when the predicted per-rank peak memory at --world-size N "
             "exceeds this many bytes (suffixes KiB, MiB, GiB, KB, MB, GB)"),
    cl::value_desc("bytes"), cl::cat(mdcCategory));

// Plan options that override the selected plan's, written as in a .mdl
// plan (docs/language.md, "Options").
cl::opt<std::string> gradAccumulation(
    "grad-accumulation",
    cl::desc("Override the plan's grad_accumulation: local (accumulate full "
             "gradients, reduce once per step) or sharded (reduce-scatter "
             "every micro-step, accumulate the shard)"),
    cl::value_desc("local|sharded"), cl::cat(mdcCategory));

cl::opt<std::string> interconnectName(
    "interconnect",
    cl::desc("Override the plan's interconnect, the link md-bucketing's cost "
             "model assumes: nvlink, pcie, infiniband, ethernet, shm or "
             "'custom(alpha_us = A, beta_gbps = B)'"),
    cl::value_desc("link"), cl::cat(mdcCategory));

cl::opt<std::string> maxInflightAllGathers(
    "max-inflight-allgathers",
    cl::desc("Override the plan's max_inflight_allgathers: how many gathered "
             "units may be live at once when prefetching (>= 1)"),
    cl::value_desc("N"), cl::cat(mdcCategory));

cl::opt<unsigned> errorLimit(
    "error-limit",
    cl::desc("Stop showing .mdl errors after this many (0: show all)"),
    cl::init(20), cl::value_desc("N"), cl::cat(mdcCategory));

cl::opt<bool> printIRAfterAll(
    "print-ir-after-all",
    cl::desc("Run the passes and print the IR after each of them on stderr"),
    cl::init(false), cl::cat(mdcCategory));

cl::opt<bool> printDebugInfo(
    "mlir-print-debuginfo",
    cl::desc("Print the source locations (file:line:col) of the IR"),
    cl::init(false), cl::cat(mdcCategory));

const char *const kOverview =
    "mdc - the md compiler\n\n"
    "  Compiles a .mdl program (its blocks and models, the training recipe\n"
    "  and the parallelism plans) into an md dialect module, the input of\n"
    "  md's passes and of mdrun. The program is parsed and checked, and every\n"
    "  error is reported with its file:line:col before mdc exits; the module\n"
    "  is printed only when there were none. --emit=ast stops after parsing\n"
    "  and prints the syntax tree instead. --check runs the static desync\n"
    "  check on one or more files and prints its findings, not the IR.\n";

bool isIdentifier(llvm::StringRef s) {
  if (s.empty() || !(llvm::isAlpha(s[0]) || s[0] == '_'))
    return false;
  return llvm::all_of(s, [](char c) { return llvm::isAlnum(c) || c == '_'; });
}

/// Parses a byte count: digits with an optional binary (KiB, MiB, GiB) or
/// decimal (KB, MB, GB) suffix.
std::optional<int64_t> parseBytes(llvm::StringRef text) {
  static const std::pair<llvm::StringRef, int64_t> suffixes[] = {
      {"KiB", int64_t(1) << 10}, {"MiB", int64_t(1) << 20},
      {"GiB", int64_t(1) << 30}, {"KB", 1000},
      {"MB", 1000 * 1000},       {"GB", 1000 * 1000 * 1000}};
  int64_t scale = 1;
  for (auto [suffix, factor] : suffixes)
    if (text.consume_back(suffix)) {
      scale = factor;
      break;
    }
  text = text.trim();
  uint64_t value;
  if (text.empty() || text.getAsInteger(10, value) || value == 0 ||
      value > static_cast<uint64_t>(INT64_MAX / scale))
    return std::nullopt;
  return static_cast<int64_t>(value) * scale;
}

/// Writes through `write` to `path` ("-": stdout). A file is written to a
/// temporary next to it and renamed into place, so it is never left half
/// written; a device or FIFO (-o /dev/null) directly.
bool writeOutput(llvm::StringRef path,
                 llvm::function_ref<void(llvm::raw_ostream &)> write) {
  if (path == "-") {
    write(llvm::outs());
    llvm::outs().flush();
    return true;
  }
  // Something that exists and is not a regular file (/dev/null, a FIFO) is
  // written to as it is: a temporary renamed over it would replace it.
  llvm::sys::fs::file_status st;
  if (!llvm::sys::fs::status(path, st) && llvm::sys::fs::exists(st) &&
      !llvm::sys::fs::is_regular_file(st)) {
    if (llvm::sys::fs::is_directory(st)) {
      llvm::errs() << "mdc: error: cannot write '" << path
                   << "': it is a directory\n";
      return false;
    }
    std::error_code ec;
    llvm::raw_fd_ostream os(path, ec);
    if (!ec) {
      write(os);
      os.close();
      if (os.has_error()) {
        ec = os.error();
        os.clear_error();
      }
    }
    if (ec) {
      llvm::errs() << "mdc: error: cannot write '" << path
                   << "': " << ec.message() << "\n";
      return false;
    }
    return true;
  }
  llvm::SmallString<256> tempPath;
  int fd;
  if (std::error_code ec = llvm::sys::fs::createUniqueFile(
          path + ".tmp-%%%%%%%%", fd, tempPath)) {
    llvm::errs() << "mdc: error: cannot write '" << path
                 << "': " << ec.message() << "\n";
    return false;
  }
  {
    llvm::raw_fd_ostream os(fd, /*shouldClose=*/true);
    write(os);
    os.close();
    if (os.has_error()) {
      llvm::errs() << "mdc: error: cannot write '" << path
                   << "': " << os.error().message() << "\n";
      os.clear_error();
      llvm::sys::fs::remove(tempPath);
      return false;
    }
  }
  if (std::error_code ec = llvm::sys::fs::rename(tempPath, path)) {
    llvm::errs() << "mdc: error: cannot write '" << path
                 << "': " << ec.message() << "\n";
    llvm::sys::fs::remove(tempPath);
    return false;
  }
  return true;
}

/// Prints a command-line error; mdc then exits with kUsageError.
void usageError(const llvm::Twine &message) {
  llvm::errs() << "mdc: error: " << message << "\n";
}

/// What --emit asks for: -o FILE.fb means the plan unless --emit says
/// otherwise.
EmitKind getEmitKind() {
  if (!emitKind.getNumOccurrences() &&
      llvm::StringRef(outputFilename).ends_with(".fb"))
    return EmitKind::Plan;
  return emitKind;
}

/// The frontend's options from --plan, --model, -D and --world-size; none
/// after a usage error.
std::optional<IRGenOptions> getIRGenOptions() {
  IRGenOptions options;
  options.plan = planName;
  options.model = modelName;
  for (const std::string &define : defines) {
    auto [name, value] = llvm::StringRef(define).split('=');
    if (!isIdentifier(name) || value.empty() ||
        define.find('=') == std::string::npos) {
      usageError("malformed -D '" + define +
                 "': expected NAME=VALUE, as in -D layers=2");
      return std::nullopt;
    }
    options.overrides[name.str()] = value.str();
  }
  if (worldSize.getNumOccurrences()) {
    if (worldSize < 1) {
      usageError("--world-size must be a positive integer, got " +
                 llvm::Twine(static_cast<int64_t>(worldSize)));
      return std::nullopt;
    }
    options.worldSize = worldSize;
  }
  for (auto [option, flag] :
       {std::pair<const char *, cl::opt<std::string> *>{"grad_accumulation",
                                                        &gradAccumulation},
        {"interconnect", &interconnectName},
        {"max_inflight_allgathers", &maxInflightAllGathers}}) {
    if (!flag->getNumOccurrences())
      continue;
    if (planName.empty()) {
      usageError("--" + flag->ArgStr + " sets a plan option: it needs --plan");
      return std::nullopt;
    }
    options.planOptions.push_back(std::string(option) + " = " +
                                  flag->getValue());
  }
  return options;
}

/// `mdc --check FILE...`: the exit status.
int runCheckCommand(const IRGenOptions &irgen) {
  md::CheckOptions options;
  options.files.push_back(inputFilename);
  options.files.insert(options.files.end(), moreInputFilenames.begin(),
                       moreInputFilenames.end());
  options.plan = planName;
  options.format = outputFormat;
  options.irgen = irgen;
  options.errorLimit = errorLimit;
  md::CheckSummary summary = md::runCheck(options, llvm::outs(), llvm::errs());
  return summary.errors ? kUserError : kSuccess;
}

/// What the compile library is asked for, from the options that decide how
/// far it runs; none after a usage error.
std::optional<md::CompileOptions> getCompileOptions(EmitKind emit,
                                                    IRGenOptions irgen) {
  // The passes run for --explain, --max-memory and --print-ir-after-all.
  std::optional<int64_t> memoryLimit;
  if (maxMemory.getNumOccurrences()) {
    memoryLimit = parseBytes(maxMemory);
    if (!memoryLimit) {
      usageError("--max-memory expects a positive number of bytes, as in "
                 "80GiB or 1048576, got '" +
                 maxMemory + "'");
      return std::nullopt;
    }
  }
  for (auto [given, name] :
       {std::pair<bool, llvm::StringRef>{explain, "--explain"},
        {memoryLimit.has_value(), "--max-memory"}})
    if (given && !worldSize.getNumOccurrences()) {
      usageError(name + " needs --world-size N: memory and communication "
                        "depend on the number of ranks");
      return std::nullopt;
    }
  if (outputFormat.getNumOccurrences() && !explain) {
    usageError("--format applies to --explain and --check only");
    return std::nullopt;
  }
  if (explain && outputFormat == md::CheckFormat::SARIF) {
    usageError("--explain prints text or json, not sarif");
    return std::nullopt;
  }
  if (emit == EmitKind::Plan && explain) {
    usageError("--explain prints a report, not a plan");
    return std::nullopt;
  }
  bool runPasses =
      explain || memoryLimit || printIRAfterAll || emit == EmitKind::Plan;
  if (runPasses && emit == EmitKind::Frontend) {
    usageError("--emit=frontend stops before md's passes; it cannot be "
               "combined with --explain, --max-memory or "
               "--print-ir-after-all");
    return std::nullopt;
  }
  if (runPasses && emit == EmitKind::AST) {
    usageError("--emit=ast stops after parsing; it cannot be combined with "
               "--explain, --max-memory or --print-ir-after-all");
    return std::nullopt;
  }

  md::CompileOptions options;
  options.irgen = std::move(irgen);
  switch (emit) {
  case EmitKind::AST:
    options.stopAfter = md::CompileStage::Parse;
    break;
  case EmitKind::Frontend:
    options.stopAfter = md::CompileStage::IRGen;
    break;
  case EmitKind::MLIR:
    // With a plan, the step program md's passes build from the recipe (a
    // model without one has nothing to train: its IR as is).
    options.stopAfter = runPasses || !planName.empty()
                            ? md::CompileStage::Pipeline
                            : md::CompileStage::IRGen;
    options.pipelineNeedsTrain = !runPasses;
    break;
  case EmitKind::Plan:
    options.stopAfter = md::CompileStage::Plan;
    break;
  }
  options.maxMemory = memoryLimit.value_or(0);
  options.errorLimit = errorLimit;
  if (explain)
    options.explain = outputFormat == md::CheckFormat::JSON
                          ? md::ExplainFormat::JSON
                          : md::ExplainFormat::Text;
  if (printIRAfterAll)
    options.printIRAfterAll = &llvm::errs();
  options.irPrintingFlags.enableDebugInfo(printDebugInfo);
  options.compilerVersion =
      std::string("mdc (md) built with LLVM ") + LLVM_VERSION_STRING;
  options.toolName = "mdc";
  return options;
}

/// Writes what `emit` asks for of `compiled` to -o; the exit status.
int writeCompiled(const md::CompiledPlan &compiled, EmitKind emit,
                  const md::CompileOptions &options) {
  auto write = [&](llvm::function_ref<void(llvm::raw_ostream &)> print) {
    return writeOutput(outputFilename, print) ? kSuccess : kUserError;
  };
  if (emit == EmitKind::AST)
    return write([&](llvm::raw_ostream &os) { dumpAST(*compiled.ast, os); });
  if (emit == EmitKind::Plan)
    return write([&](llvm::raw_ostream &os) {
      os.write(reinterpret_cast<const char *>(compiled.plan.data()),
               compiled.plan.size());
    });
  if (options.explain != md::ExplainFormat::None)
    return write([&](llvm::raw_ostream &os) { os << compiled.explainReport; });
  return write([&](llvm::raw_ostream &os) {
    compiled.module.get()->print(os, options.irPrintingFlags);
    os << "\n";
  });
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM initLLVM(argc, argv);

  // The presets, for --help; computed here rather than in a static
  // initializer that could run before the list exists.
  std::string presets = "\nPLAN PRESETS:\n  ";
  llvm::interleave(
      getBuiltinPlanNames(), [&](llvm::StringRef name) { presets += name; },
      [&] { presets += ", "; });
  presets += "\n";
  cl::extrahelp presetsHelp(presets.c_str());
  cl::extrahelp examplesHelp(
      "\nEXAMPLES:\n"
      "  mdc gpt.mdl                       print the md IR of gpt.mdl\n"
      "  mdc gpt.mdl --plan fsdp-full -o plan.fb\n"
      "                                    compile the plan mdrun runs\n"
      "  mdc gpt.mdl --plan fsdp-full --world-size 8 -o gpt.mlir\n"
      "                                    the IR of FSDP over 8 ranks\n"
      "  mdc gpt.mdl -D layers=2 -D d=128  override hyper-parameters\n"
      "  mdc gpt.mdl --emit=ast            print the syntax tree\n"
      "  mdc gpt.mdl --plan fsdp-full --world-size 8 --explain --format=json\n"
      "                                    memory, communication and buckets\n"
      "                                    per rank at 8 ranks\n"
      "  mdc --check models/*.mdl --plan all --format=sarif\n"
      "                                    the desync check, for CI\n"
      "\nEXIT STATUS:\n"
      "  0 success; 1 errors in the program (reported on stderr) or in its\n"
      "  files; 2 a bad command line.\n");

  cl::HideUnrelatedOptions(mdcCategory);
  cl::SetVersionPrinter([](llvm::raw_ostream &os) {
    os << "mdc (md) built with LLVM " << LLVM_VERSION_STRING << "\n";
  });
  if (!cl::ParseCommandLineOptions(argc, argv, kOverview, &llvm::errs()))
    return kUsageError;

  EmitKind emit = getEmitKind();
  if (emit == EmitKind::Plan && !check) {
    if (planName.empty()) {
      usageError("a plan file needs --plan NAME (a plan of the file or a "
                 "preset)");
      return kUsageError;
    }
    if (outputFilename == "-") {
      usageError("--emit=plan writes a binary file: give -o FILE");
      return kUsageError;
    }
  }
  // -o naming an input would overwrite the program with what it compiles
  // to (the same file under any spelling: its device and inode).
  if (outputFilename != "-") {
    std::vector<std::string> inputs = {inputFilename};
    inputs.insert(inputs.end(), moreInputFilenames.begin(),
                  moreInputFilenames.end());
    for (const std::string &input : inputs) {
      bool same = false;
      if (!llvm::sys::fs::equivalent(input, outputFilename, same) && same) {
        usageError("-o '" + outputFilename + "' names the input file '" +
                   input + "'; give another output file");
        return kUsageError;
      }
    }
  }
  std::optional<IRGenOptions> irgen = getIRGenOptions();
  if (!irgen)
    return kUsageError;
  if (check)
    return runCheckCommand(*irgen);
  if (!moreInputFilenames.empty()) {
    usageError("more than one input file; only --check takes several");
    return kUsageError;
  }
  std::optional<md::CompileOptions> options =
      getCompileOptions(emit, std::move(*irgen));
  if (!options)
    return kUsageError;

  llvm::ErrorOr<md::Source> source = md::readSource(inputFilename);
  if (std::error_code ec = source.getError()) {
    llvm::errs() << "mdc: error: cannot open '" << inputFilename
                 << "': " << ec.message() << "\n";
    return kUserError;
  }
  mlir::FailureOr<md::CompiledPlan> compiled = md::compile(*source, *options);
  if (mlir::failed(compiled))
    return kUserError;
  return writeCompiled(*compiled, emit, *options);
}
