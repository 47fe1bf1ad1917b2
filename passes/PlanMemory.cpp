//===- PlanMemory.cpp - per-rank peak memory of the step program ---------===//
//
// md-plan-memory: attaches the per-rank bytes of the step program at world
// size W (analysis/MemoryAnalysis.h computes them) to md.model as `md.memory`,
// and fails when the peak exceeds `max-memory`, naming the largest buffers live
// then.
//
//===----------------------------------------------------------------------===//

#include "dialect/MdDiscardableAttrs.h"
#include "passes/Passes.h"
#include "passes/analysis/MemoryAnalysis.h"

#include "mlir/IR/Builders.h"

namespace md {
#define GEN_PASS_DEF_PLANMEMORY
#include "passes/Passes.h.inc"
} // namespace md

using namespace mlir;
using namespace md;

namespace {

/// The largest buffers live at the peak that a diagnostic names.
constexpr size_t kBuffersNamed = 3;

struct PlanMemoryPass : public md::impl::PlanMemoryBase<PlanMemoryPass> {
  using PlanMemoryBase::PlanMemoryBase;

  void runOnOperation() override {
    ModelOp model = getOperation();
    int64_t world = worldSize;
    if (world == 0) {
      std::optional<uint64_t> pinned = model.getWorldSize();
      if (!pinned)
        return; // sizes stay symbolic in W; nothing to report
      world = static_cast<int64_t>(*pinned);
    }
    if (world < 0 || maxMemory < 0) {
      model.emitError("md-plan-memory: world-size and max-memory must be "
                      ">= 0, got ")
          << world << " and " << static_cast<int64_t>(maxMemory);
      return signalPassFailure();
    }
    FailureOr<MemoryReport> report = computeMemory(model, world);
    if (failed(report))
      return signalPassFailure();
    numBuffers += report->buffers.size();

    Builder builder(&getContext());
    auto field = [&](StringRef name, int64_t value) {
      return builder.getNamedAttr(name, builder.getI64IntegerAttr(value));
    };
    SmallVector<NamedAttribute> fields;
    for (const plan::MemoryRow &row : plan::MemoryRows(*report))
      fields.push_back(field(row.name, row.bytes));
    fields.push_back(field("world_size", world));
    mark::setMemory(model, builder.getDictionaryAttr(fields));

    if (maxMemory == 0 || report->peak <= maxMemory)
      return;
    InFlightDiagnostic diag = model.emitError("predicted peak memory of ")
                              << report->peak
                              << " bytes per rank at world size " << world
                              << " exceeds max-memory "
                              << static_cast<int64_t>(maxMemory) << " bytes";
    if (report->peakOp)
      diag.attachNote(report->peakOp->getLoc())
          << "the peak is reached at this '" << report->peakOp->getName()
          << "'";
    for (size_t index :
         ArrayRef(report->liveAtPeak).take_front(kBuffersNamed)) {
      const BufferInterval &buffer = report->buffers[index];
      Diagnostic &note = diag.attachNote(buffer.op->getLoc());
      note << buffer.bytes << " bytes of "
           << stringifyMemoryCategory(buffer.category) << ": ";
      if (auto state = dyn_cast<StateOp>(buffer.op))
        note << "md.state @" << state.getSymName();
      else
        note << "result of '" << buffer.op->getName() << "'";
    }
    signalPassFailure();
  }
};

} // namespace
