//===- OptimizerGroups.cpp - per-parameter decay and lr scale ------------===//
//
// The ranges of parameter groups in a unit's flat buffer and in a rank's
// shard of it, and an update run range by range (OptimizerGroups.h).
//
//===----------------------------------------------------------------------===//

#include "runtime/exec/OptimizerGroups.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "runtime/core/Status.h"

namespace md::runtime {

std::vector<std::vector<OptimizerSegment>>
UnitOptimizerSegments(const fb::Plan &plan) {
  std::vector<std::vector<OptimizerSegment>> result;
  const fb::Optimizer *optimizer =
      plan.recipe() ? plan.recipe()->optimizer() : nullptr;
  if (!optimizer || !optimizer->groups() || optimizer->groups()->size() == 0 ||
      !plan.units())
    return result;
  auto groups = optimizer->groups();
  auto valuesOf = [&](int32_t group, int64_t begin, int64_t end) {
    OptimizerSegment s;
    s.begin = begin;
    s.end = end;
    s.weightDecay = groups->Get(group)->weight_decay();
    s.lrScale = groups->Get(group)->lr_scale();
    s.group = group;
    return s;
  };
  // Each unit's parameters by offset: (offset, end, group).
  std::vector<std::vector<OptimizerSegment>> members(plan.units()->size());
  if (plan.params())
    for (const fb::Param *param : *plan.params()) {
      if (!param->trainable() || param->unit() < 0 || param->offset() < 0)
        continue;
      int64_t numel = 1;
      if (param->shape())
        for (int64_t dim : *param->shape())
          numel *= dim;
      members[param->unit()].push_back(
          valuesOf(param->group(), param->offset(), param->offset() + numel));
    }
  for (size_t u = 0; u < members.size(); ++u) {
    std::vector<OptimizerSegment> &params = members[u];
    std::sort(params.begin(), params.end(),
              [](const OptimizerSegment &a, const OptimizerSegment &b) {
                return a.begin < b.begin;
              });
    const int64_t numel = plan.units()->Get(u)->numel();
    std::vector<OptimizerSegment> ranges;
    auto append = [&](const OptimizerSegment &s) {
      if (s.end <= s.begin)
        return;
      if (!ranges.empty() && ranges.back().group == s.group &&
          ranges.back().end == s.begin)
        ranges.back().end = s.end;
      else
        ranges.push_back(s);
    };
    int64_t at = 0;
    for (const OptimizerSegment &p : params) {
      append(valuesOf(0, at, p.begin)); // a gap: the default group
      append(p);
      at = std::max(at, p.end);
    }
    append(valuesOf(0, at, numel));
    result.push_back(std::move(ranges));
  }
  return result;
}

std::string OptimizerGroupSummary::str() const {
  // Thousands separators, as the banner's other counts.
  std::string digits = std::to_string(numel), grouped;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0)
      grouped += ',';
    grouped += digits[i];
  }
  return absl::StrFormat(
      "%s: %d param%s, %s elements, weight_decay %g, lr_scale %g", name,
      members, members == 1 ? "" : "s", grouped, weightDecay, lrScale);
}

std::vector<OptimizerGroupSummary>
SummarizeOptimizerGroups(const fb::Plan &plan) {
  std::vector<OptimizerGroupSummary> result;
  const fb::Optimizer *optimizer =
      plan.recipe() ? plan.recipe()->optimizer() : nullptr;
  if (!optimizer || !optimizer->groups())
    return result;
  for (const fb::OptimizerGroup *group : *optimizer->groups()) {
    OptimizerGroupSummary s;
    s.name = group->name() ? group->name()->str() : "";
    s.weightDecay = group->weight_decay();
    s.lrScale = group->lr_scale();
    result.push_back(s);
  }
  if (plan.params())
    for (const fb::Param *param : *plan.params()) {
      if (!param->trainable() || param->group() < 0 ||
          param->group() >= static_cast<int32_t>(result.size()))
        continue;
      int64_t numel = 1;
      if (param->shape())
        for (int64_t dim : *param->shape())
          numel *= dim;
      ++result[param->group()].members;
      result[param->group()].numel += numel;
    }
  return result;
}

std::vector<OptimizerSegment>
ShardOptimizerSegments(absl::Span<const OptimizerSegment> unit, int64_t offset,
                       int64_t length) {
  std::vector<OptimizerSegment> local;
  const int64_t end = offset + length;
  for (const OptimizerSegment &s : unit) {
    int64_t begin = std::max(s.begin, offset), stop = std::min(s.end, end);
    if (begin >= stop)
      continue;
    OptimizerSegment part = s;
    part.begin = begin - offset;
    part.end = stop - offset;
    local.push_back(part);
  }
  // The last shard's padding lies past the unit's elements: it joins the
  // last range (its gradient is zero, so any values would do).
  if (local.empty() && length > 0 && !unit.empty()) {
    OptimizerSegment pad = unit.back();
    pad.begin = 0;
    pad.end = length;
    local.push_back(pad);
  } else if (!local.empty()) {
    local.back().end = length;
  }
  return local;
}

namespace {

/// Elements [begin, end) of a flat tensor.
TensorRef slice(const TensorRef &t, int64_t begin, int64_t end) {
  return TensorRef(static_cast<char *>(t.data) + begin * dtypeSize(t.dtype),
                   t.dtype, Shape{end - begin});
}

absl::Status checkSegments(const TensorRef &param,
                           absl::Span<const OptimizerSegment> segments,
                           const char *op) {
  int64_t at = 0;
  for (const OptimizerSegment &s : segments) {
    if (s.begin != at || s.end <= s.begin)
      return absl::InternalError(
          absl::StrFormat("%s: group ranges do not tile the operands", op));
    at = s.end;
  }
  if (at != param.numel())
    return absl::InternalError(absl::StrFormat(
        "%s: group ranges cover %d of %d elements", op, at, param.numel()));
  return absl::OkStatus();
}

/// Runs `update` once per segment on a copy of `args` whose operands
/// `sliceOperands` has cut to the segment and whose weight decay and lr are
/// the segment's group's: what the two optimizers' grouped updates share.
template <typename Args, typename Slice, typename Update>
absl::Status
forEachSegment(const Args &args, absl::Span<const OptimizerSegment> segments,
               const char *op, Slice sliceOperands, Update update) {
  MD_RETURN_IF_ERROR(checkSegments(args.param, segments, op));
  for (const OptimizerSegment &s : segments) {
    Args part = args;
    part.unit.reset();
    sliceOperands(part, s.begin, s.end);
    part.weightDecay = s.weightDecay;
    part.lr = static_cast<float>(double(args.lr) * s.lrScale);
    MD_RETURN_IF_ERROR(update(part));
  }
  return absl::OkStatus();
}

} // namespace

absl::Status RunGroupedUpdate(Backend &backend, const AdamWArgs &args,
                              absl::Span<const OptimizerSegment> segments) {
  return forEachSegment(
      args, segments, "adamw_update",
      [&](AdamWArgs &part, int64_t begin, int64_t end) {
        part.param = slice(args.param, begin, end);
        part.grad = slice(args.grad, begin, end);
        part.m = slice(args.m, begin, end);
        part.v = slice(args.v, begin, end);
        part.newParam = slice(args.newParam, begin, end);
        part.newM = slice(args.newM, begin, end);
        part.newV = slice(args.newV, begin, end);
      },
      [&](const AdamWArgs &part) { return backend.adamwUpdate(part); });
}

absl::Status RunGroupedUpdate(Backend &backend, const SgdArgs &args,
                              absl::Span<const OptimizerSegment> segments) {
  return forEachSegment(
      args, segments, "sgd_update",
      [&](SgdArgs &part, int64_t begin, int64_t end) {
        part.param = slice(args.param, begin, end);
        part.grad = slice(args.grad, begin, end);
        part.newParam = slice(args.newParam, begin, end);
        if (args.momentumBuffer)
          part.momentumBuffer = slice(*args.momentumBuffer, begin, end);
        if (args.newMomentumBuffer)
          part.newMomentumBuffer = slice(*args.newMomentumBuffer, begin, end);
      },
      [&](const SgdArgs &part) { return backend.sgdUpdate(part); });
}

} // namespace md::runtime
