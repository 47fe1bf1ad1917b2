//===- md-fuzz-compile.cpp - libFuzzer target for md::compile -------------===//
//
// Feeds arbitrary bytes, as a .mdl program, through the whole compiler:
// md::compile (compile/Compile.h) parses it, generates and verifies its md
// IR, runs the training pipeline, formats the explain report and emits the
// plan, which the runtime's loader verifies. The plan and the world size
// come from the input's length (every built-in preset at W = 1, 2, 4 and 8),
// so that a seed and its mutations meet every preset.
//
// A crash, hang, sanitizer report or runaway memory is a bug, and so are two
// quieter failures this target checks itself: a compilation that fails
// without printing an error (a user would see mdc exit 1 and nothing else),
// and one that succeeds without a plan. Built with clang++ -fsanitize=fuzzer,
// address,undefined (the frontend and the compile library instrumented, the
// rest of the compiler linked as md builds it; see CMakeLists.txt).
//
//===----------------------------------------------------------------------===//

#include "compile/Compile.h"
#include "compile/Source.h"
#include "frontend/IRGen.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/raw_ostream.h"

#include <sys/stat.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <string>

namespace {

/// Set when the fuzzer replays files rather than exploring a corpus: each
/// input then names the plan and world size it compiles under, for `mdc`.
bool replaying = false;

/// Stops the fuzzer on a failure md::compile did not report: libFuzzer
/// saves the input that caused it.
[[noreturn]] void fail(const char *what, const std::string &diagnostics) {
  std::fprintf(stderr, "md-fuzz-compile: %s\n%s\n", what, diagnostics.c_str());
  std::abort();
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int *argc, char ***argv) {
  for (int i = 1; i < *argc; ++i) {
    struct stat st;
    if ((*argv)[i][0] != '-' && ::stat((*argv)[i], &st) == 0 &&
        S_ISREG(st.st_mode))
      replaying = true;
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const int64_t worldSizes[] = {1, 2, 4, 8};
  llvm::ArrayRef<llvm::StringRef> presets = md::frontend::getBuiltinPlanNames();

  md::CompileOptions options;
  options.irgen.plan = presets[size % presets.size()].str();
  options.irgen.worldSize =
      worldSizes[(size / presets.size()) % std::size(worldSizes)];
  if (replaying)
    std::fprintf(stderr, "md-fuzz-compile: --plan %s --world-size %lld\n",
                 options.irgen.plan.c_str(),
                 static_cast<long long>(*options.irgen.worldSize));
  options.stopAfter = md::CompileStage::Plan;
  options.explain = md::ExplainFormat::Text;
  options.compilerVersion = "fuzz";
  options.toolName = "md-fuzz-compile";
  std::string diagnostics;
  llvm::raw_string_ostream diagnosticStream(diagnostics);
  options.diagnostics = &diagnosticStream;

  md::Source source = md::Source::fromText(
      "fuzz.mdl", llvm::StringRef(reinterpret_cast<const char *>(data), size));
  mlir::FailureOr<md::CompiledPlan> compiled = md::compile(source, options);
  diagnosticStream.flush();
  if (mlir::failed(compiled)) {
    if (llvm::StringRef(diagnostics).find("error:") == llvm::StringRef::npos)
      fail("compilation failed without an error", diagnostics);
    return 0;
  }
  if (compiled->plan.empty())
    fail("compilation succeeded without a plan", diagnostics);
  return 0;
}
