//===- Check.h - the static desync check of .mdl files, for CI --*- C++ -*-===//
//
// The entry point of `mdc --check FILE... [--plan NAME|all]
// [--format=text|json|sarif]`: runs the frontend and md-verify-collectives
// on every file under every named plan and reports every finding: as
// compiler diagnostics, as JSON, or as SARIF 2.1.0 for CI systems that
// annotate source lines. docs/check.md and docs/cli.md describe it.
//
//===----------------------------------------------------------------------===//

#ifndef MD_COMPILE_CHECK_H
#define MD_COMPILE_CHECK_H

#include "frontend/IRGen.h"

#include "llvm/Support/raw_ostream.h"

#include <string>
#include <vector>

namespace md {

enum class CheckFormat { Text, JSON, SARIF };

struct CheckOptions {
  /// The .mdl files ("-" is standard input).
  std::vector<std::string> files;
  /// A plan of the file or a preset, "all" (every preset and every plan of
  /// the file), or empty: the program without a plan.
  std::string plan;
  CheckFormat format = CheckFormat::Text;
  /// -D, --model, --world-size; `plan` is set per run.
  frontend::IRGenOptions irgen;
  /// The .mdl errors reported at most per file; 0: all.
  unsigned errorLimit = 20;
};

/// How many findings of each level a check reported.
struct CheckSummary {
  unsigned errors = 0;
  unsigned warnings = 0;
};

/// Checks every file under every plan. Text: diagnostics on `err`, a summary
/// line on `out`; JSON and SARIF: the document on `out`.
CheckSummary runCheck(const CheckOptions &options, llvm::raw_ostream &out,
                      llvm::raw_ostream &err);

} // namespace md

#endif // MD_COMPILE_CHECK_H
