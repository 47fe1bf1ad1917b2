//===- ParamGroups.cpp - which optimizer group each parameter is in ------===//
//
// First-match-wins assignment of trainable parameters to an optimizer's
// #md.param_group list (see ParamGroups.h).
//
//===----------------------------------------------------------------------===//

#include "dialect/ParamGroups.h"

using namespace mlir;

llvm::Expected<llvm::GlobPattern> md::compileParamGlob(StringRef pattern) {
  // Without a limit of sub-patterns, llvm::GlobPattern reads `{` and `}` as
  // plain characters: the limit is what turns alternatives on.
  return llvm::GlobPattern::create(pattern, kMaxGlobAlternatives);
}

namespace md {

ArrayAttr getOptimizerGroups(Attribute optimizer) {
  if (auto adamw = dyn_cast_or_null<AdamWAttr>(optimizer))
    return adamw.getGroups();
  if (auto sgd = dyn_cast_or_null<SGDAttr>(optimizer))
    return sgd.getGroups();
  return {};
}

double getOptimizerWeightDecay(Attribute optimizer) {
  if (auto adamw = dyn_cast_or_null<AdamWAttr>(optimizer))
    return adamw.getWeightDecay().convertToDouble();
  if (auto sgd = dyn_cast_or_null<SGDAttr>(optimizer))
    return sgd.getWeightDecay().convertToDouble();
  return 0;
}

ParamGroupAssignment assignParamGroups(ModelOp model, Attribute optimizer) {
  ParamGroupAssignment result;
  ParamGroupInfo fallback;
  fallback.weightDecay = getOptimizerWeightDecay(optimizer);
  result.groups.push_back(fallback);
  SmallVector<ParamGroupAttr> groups;
  if (ArrayAttr list = getOptimizerGroups(optimizer))
    for (Attribute attr : list)
      if (auto group = dyn_cast<ParamGroupAttr>(attr)) {
        groups.push_back(group);
        ParamGroupInfo info;
        info.attr = group;
        info.weightDecay = group.getWeightDecay().convertToDouble();
        info.lrScale = group.getLrScale().convertToDouble();
        result.groups.push_back(info);
      }
  result.matched.assign(groups.size(), 0);
  for (ParamOp param : model.getBody().front().getOps<ParamOp>()) {
    if (param.getFrozen())
      continue;
    StringRef name = param.getSymName();
    int64_t ndim = param.getTensorType().getRank();
    unsigned index = 0;
    for (auto [i, group] : llvm::enumerate(groups)) {
      if (!group.matches(name, ndim))
        continue;
      ++result.matched[i];
      if (index == 0)
        index = i + 1;
    }
    result.groupOf[param] = index;
    ParamGroupInfo &info = result.groups[index];
    ++info.members;
    info.numel += param.getTensorType().getNumElements();
  }
  return result;
}

} // namespace md
