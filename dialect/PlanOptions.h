//===- PlanOptions.h - plan options kept beside #md.plan --------*- C++ -*-===//
//
// Three plan options live on `md.model` as attributes of their own rather
// than as fields of `#md.plan`: the gradient accumulation mode, the link the
// cost model assumes and the limit of in-flight all-gathers. Each attribute
// is present only when the plan departs from the default, so a plan that
// leaves them alone compiles to the same IR and the same plan file as before
// they existed. The frontend writes them (frontend/Plans.cpp) and the passes
// read them (md-apply-plan, md-bucketing, md-schedule, --explain) through the
// functions below, which are header-only so that the frontend needs no pass
// library.
//
//===----------------------------------------------------------------------===//

#ifndef MD_PASSES_ANALYSIS_PLANOPTIONS_H
#define MD_PASSES_ANALYSIS_PLANOPTIONS_H

#include "dialect/MdOps.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <optional>

namespace md {

/// `md.grad_accumulation = "sharded"`: reduce-scatter every micro-step's
/// gradient and accumulate only this rank's shard (absent: local).
inline constexpr llvm::StringLiteral kGradAccumulationAttr =
    "md.grad_accumulation";
/// `md.interconnect = {name = "pcie", alpha_us = 20.0, beta_gbps = 12.0}`:
/// the link of the cost model (absent: nvlink).
inline constexpr llvm::StringLiteral kInterconnectAttr = "md.interconnect";
/// `md.max_inflight_allgathers = N`: gathered units live at once when
/// prefetching (absent: kDefaultMaxInflightAllGathers).
inline constexpr llvm::StringLiteral kMaxInflightAllGathersAttr =
    "md.max_inflight_allgathers";

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
  auto mode = model->getAttrOfType<mlir::StringAttr>(kGradAccumulationAttr);
  return mode && mode.getValue() == "sharded";
}

/// The link `model`'s plan names: its name ("custom" for alpha/beta) and
/// figures; std::nullopt when the plan names none.
inline std::optional<std::pair<std::string, Interconnect>>
getPlanInterconnect(ModelOp model) {
  auto dict = model->getAttrOfType<mlir::DictionaryAttr>(kInterconnectAttr);
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
          model->getAttrOfType<mlir::IntegerAttr>(kMaxInflightAllGathersAttr))
    return limit.getInt();
  return std::nullopt;
}

} // namespace md

#endif // MD_PASSES_ANALYSIS_PLANOPTIONS_H
