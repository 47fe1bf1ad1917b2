//===- PlanOptions.h - plan options kept beside #md.plan --------*- C++ -*-===//
//
// Three plan options live on `md.model` as attributes of their own rather
// than as fields of `#md.plan`: the gradient accumulation mode, the link the
// cost model assumes and the limit of in-flight all-gathers. Each attribute
// is present only when the plan departs from the default, so a plan that
// leaves them alone compiles to the same IR and the same plan file as before
// they existed. They are discardable attributes of the dialect, declared in
// MdBase.td (md.grad_accumulation, md.interconnect,
// md.max_inflight_allgathers) and verified with the others; the frontend
// writes them (frontend/Plans.cpp) and the passes read them (md-apply-plan,
// md-bucketing, md-schedule, --explain) through the functions below.
//
//===----------------------------------------------------------------------===//

#ifndef MD_DIALECT_PLANOPTIONS_H
#define MD_DIALECT_PLANOPTIONS_H

#include "dialect/MdOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <optional>

namespace md {

/// Two gathered units: the one computing and the one prefetched, as FSDP's
/// `limit_all_gathers`.
inline constexpr int64_t kDefaultMaxInflightAllGathers = 2;

/// A link's latency (alpha, per collective) and bandwidth (beta, per rank).
struct Interconnect {
  double alphaUs;
  double betaGBps;
};

/// A named link of the cost model and the figures it stands for.
struct NamedInterconnect {
  llvm::StringLiteral name;
  Interconnect link;
};

/// The links a plan or `mdc --interconnect` may name; the first is the
/// default. The figures are what NCCL's ring reaches per rank on each
/// (docs/passes.md, md-bucketing, says where they come from).
inline llvm::ArrayRef<NamedInterconnect> getNamedInterconnects() {
  static const NamedInterconnect links[] = {
      {"nvlink", {10.0, 150.0}},   // NVLink 4 through NVSwitch
      {"pcie", {20.0, 12.0}},      // PCIe 4 x16 through host bridges
      {"infiniband", {8.0, 24.0}}, // one 200 Gb/s HDR port per GPU
      {"ethernet", {30.0, 2.5}},   // 25 GbE with TCP sockets
      {"shm", {5.0, 5.0}},         // md's host shared-memory comm
  };
  return links;
}

/// The figures of the link called `name`, or std::nullopt.
inline std::optional<Interconnect> getInterconnect(llvm::StringRef name) {
  for (const NamedInterconnect &named : getNamedInterconnects())
    if (named.name == name)
      return named.link;
  return std::nullopt;
}

/// "nvlink, pcie, infiniband, ethernet, shm", for diagnostics.
inline std::string getInterconnectNames() {
  std::string names;
  for (const NamedInterconnect &named : getNamedInterconnects())
    names += (names.empty() ? "" : ", ") + named.name.str();
  return names;
}

/// Whether `model`'s plan accumulates gradients as shards.
inline bool hasShardedGradAccumulation(ModelOp model) {
  auto mode = model->getAttrOfType<mlir::StringAttr>(
      MdDialect::GradAccumulationAttrHelper::getNameStr());
  return mode && mode.getValue() == "sharded";
}

/// The link `model`'s plan names: its name ("custom" for alpha/beta) and
/// figures; std::nullopt when the plan names none.
inline std::optional<std::pair<std::string, Interconnect>>
getPlanInterconnect(ModelOp model) {
  auto dict = model->getAttrOfType<mlir::DictionaryAttr>(
      MdDialect::InterconnectAttrHelper::getNameStr());
  if (!dict)
    return std::nullopt;
  auto name = dict.getAs<mlir::StringAttr>("name");
  auto alpha = dict.getAs<mlir::FloatAttr>("alpha_us");
  auto beta = dict.getAs<mlir::FloatAttr>("beta_gbps");
  if (!name || !alpha || !beta)
    return std::nullopt;
  return std::make_pair(
      name.getValue().str(),
      Interconnect{alpha.getValueAsDouble(), beta.getValueAsDouble()});
}

/// The limit of in-flight all-gathers `model`'s plan sets, if any.
inline std::optional<int64_t> getPlanMaxInflightAllGathers(ModelOp model) {
  if (auto limit =
          model->getAttrOfType<mlir::IntegerAttr>(
              MdDialect::MaxInflightAllgathersAttrHelper::getNameStr()))
    return limit.getInt();
  return std::nullopt;
}

/// md.grad_accumulation = "sharded": reduce-scatter every micro-step's
/// gradient and accumulate only this rank's shard (absent: local).
inline void setShardedGradAccumulation(ModelOp model) {
  model->setAttr(MdDialect::GradAccumulationAttrHelper::getNameStr(),
                 mlir::StringAttr::get(model.getContext(), "sharded"));
}

/// md.interconnect = {name, alpha_us, beta_gbps}: the link of the cost
/// model (absent: nvlink).
inline void setPlanInterconnect(ModelOp model, llvm::StringRef name,
                                Interconnect link) {
  mlir::Builder b(model.getContext());
  model->setAttr(
      MdDialect::InterconnectAttrHelper::getNameStr(),
      b.getDictionaryAttr(
          {b.getNamedAttr("name", b.getStringAttr(name)),
           b.getNamedAttr("alpha_us", b.getF64FloatAttr(link.alphaUs)),
           b.getNamedAttr("beta_gbps", b.getF64FloatAttr(link.betaGBps))}));
}

/// md.max_inflight_allgathers = N: gathered units live at once when
/// prefetching (absent: kDefaultMaxInflightAllGathers).
inline void setPlanMaxInflightAllGathers(ModelOp model, int64_t limit) {
  model->setAttr(MdDialect::MaxInflightAllgathersAttrHelper::getNameStr(),
                 mlir::Builder(model.getContext()).getI64IntegerAttr(limit));
}

} // namespace md

#endif // MD_DIALECT_PLANOPTIONS_H
