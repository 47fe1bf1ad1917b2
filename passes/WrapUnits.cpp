//===- WrapUnits.cpp - md-wrap-units ---------------------------------------===//
//
// Assigns every parameter to a wrap unit (an FSDP unit) by the plan's policy,
// before md-autodiff tags ops with their units:
//
//   wrap = blocks(h, ...)        one unit per instance of the named repeated
//                                parameters (`h.0.*`, `h.1.*`, ...), numbered
//                                from 1 in md.param order; the rest is the
//                                root unit 0;
//   wrap = size(min_params = M)  consecutive parameters, in md.param order,
//                                grouped until a unit holds at least M
//                                elements; a last group smaller than M joins
//                                the unit before it;
//   wrap = none                  everything in unit 0.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "llvm/ADT/StringExtras.h"

#include <map>

namespace md {
#define GEN_PASS_DEF_WRAPUNITS
#include "passes/Passes.h.inc"
} // namespace md

using namespace mlir;
using namespace md;

namespace {

/// "h.3" when `name` is `h.3.<rest>` and `block` is "h", else "".
std::string instanceOf(StringRef name, StringRef block) {
  std::string prefix = (block + ".").str();
  if (!name.starts_with(prefix))
    return "";
  StringRef rest = name.drop_front(prefix.size());
  StringRef index = rest.take_while(llvm::isDigit);
  if (index.empty() || !rest.drop_front(index.size()).starts_with("."))
    return "";
  return (block + "." + index).str();
}

class WrapUnitsPass : public md::impl::WrapUnitsBase<WrapUnitsPass> {
public:
  void runOnOperation() override {
    ModelOp model = getOperation();
    PlanAttr plan = model.getPlanAttr();
    if (!plan)
      return; // no plan: the frontend's units stand
    SmallVector<ParamOp> params(model.getBody().front().getOps<ParamOp>());
    auto set = [&](ParamOp param, int64_t unit) {
      param.setUnitAttr(IntegerAttr::get(IntegerType::get(&getContext(), 64),
                                         unit));
    };
    switch (plan.getWrap()) {
    case WrapKind::none:
      for (ParamOp param : params)
        set(param, 0);
      return;
    case WrapKind::blocks: {
      std::map<std::string, int64_t> units;
      bool matched = false;
      for (ParamOp param : params) {
        std::string instance;
        for (StringAttr block : plan.getWrapBlocks())
          if (instance.empty())
            instance = instanceOf(param.getSymName(), block.getValue());
        if (instance.empty()) {
          set(param, 0);
          continue;
        }
        matched = true;
        auto [it, inserted] =
            units.try_emplace(instance, static_cast<int64_t>(units.size()) + 1);
        set(param, it->second);
      }
      if (!matched) {
        model.emitOpError("plan '")
            << plan.getName() << "' wraps blocks that match no parameter";
        return signalPassFailure();
      }
      return;
    }
    case WrapKind::size: {
      int64_t minParams = plan.getWrapMinParams().value_or(1);
      int64_t unit = 0, inUnit = 0;
      SmallVector<int64_t> counts;
      for (ParamOp param : params) {
        if (inUnit >= minParams) {
          counts.push_back(inUnit);
          ++unit;
          inUnit = 0;
        }
        set(param, unit);
        inUnit += param.getTensorType().getNumElements();
      }
      // A last unit smaller than the minimum joins the one before it.
      if (unit > 0 && inUnit < minParams)
        for (ParamOp param : params)
          if (param.getUnit() == unit)
            set(param, unit - 1);
      return;
    }
    }
  }
};

} // namespace
