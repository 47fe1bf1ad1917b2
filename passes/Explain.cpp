//===- Explain.cpp - print the mdc --explain report -----------------------===//
//
// md-explain: prints ExplainReport.h's report of the model to standard
// output, so that lit can test what mdc --explain prints on hand-written IR.
//
//===----------------------------------------------------------------------===//

#include "passes/ExplainReport.h"
#include "passes/Passes.h"

namespace md {
#define GEN_PASS_DEF_EXPLAIN
#include "passes/Passes.h.inc"
} // namespace md

using namespace mlir;
using namespace md;

namespace {

struct ExplainPass : public md::impl::ExplainBase<ExplainPass> {
  using ExplainBase::ExplainBase;

  void runOnOperation() override {
    ModelOp model = getOperation();
    if (format != "text" && format != "json") {
      model.emitError("md-explain: format must be text or json, got '")
          << format << "'";
      return signalPassFailure();
    }
    int64_t world = worldSize;
    if (world == 0) {
      std::optional<uint64_t> pinned = model.getWorldSize();
      if (!pinned) {
        model.emitError("md-explain needs a world size: the model has no "
                        "world_size and world-size is not given");
        return signalPassFailure();
      }
      world = static_cast<int64_t>(*pinned);
    }
    FailureOr<ExplainReport> report = computeExplainReport(model, world);
    if (failed(report))
      return signalPassFailure();
    if (format == "json")
      printExplainJson(*report, llvm::outs());
    else
      printExplainText(*report, llvm::outs());
    if (listBuffers)
      printMemoryBuffers(report->memory, llvm::outs());
    llvm::outs().flush();
    markAllAnalysesPreserved();
  }
};

} // namespace
