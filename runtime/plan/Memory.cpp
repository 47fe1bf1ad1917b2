//===- Memory.cpp - bytes per rank of a plan at a world size ------------===//

#include "runtime/plan/Memory.h"

#include <algorithm>
#include <array>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "runtime/core/EnumNames.h"
#include "runtime/plan/Aliasing.h"
#include "runtime/plan/VerifyInternal.h"

namespace md::plan {
namespace {

using detail::count;
using fb::MemoryCategory;

absl::Status overflow(const char *what, int64_t worldSize) {
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s bytes per rank overflow 64 bits at world size %d", what, worldSize));
}

bool isCommOpcode(fb::Opcode op) {
  return op == fb::Opcode::AllGather || op == fb::Opcode::ReduceScatter ||
         op == fb::Opcode::AllReduce || op == fb::Opcode::Broadcast;
}

constexpr size_t kCategories = std::tuple_size<CategoryBytes>::value;

/// Live transient bytes at one program point, by category.
struct Live {
  CategoryBytes bytes{};
  int64_t total = 0;
  int32_t block = -1;
  int32_t instruction = -1;
};

absl::Status add(CategoryBytes &into, const CategoryBytes &from,
                 int64_t worldSize) {
  for (size_t c = 0; c < kCategories; ++c)
    if (__builtin_add_overflow(into[c], from[c], &into[c]))
      return overflow("transient", worldSize);
  return absl::OkStatus();
}

class PeakFinder {
public:
  PeakFinder(const fb::Plan &plan, const WorldBinding &world)
      : plan_(plan), world_(world) {
    uint32_t numBlocks = count(plan.blocks());
    uint32_t numBuffers = count(plan.buffers());
    byBlock_.resize(numBlocks);
    category_.assign(numBuffers, MemoryCategory::Unspecified);
    std::vector<bool> comm(numBuffers, false), alias(numBuffers, false);
    for (uint32_t x = 0; x < numBuffers; ++x) {
      const fb::Buffer *buffer = plan.buffers()->Get(x);
      if (buffer->role() == fb::StateRole::None)
        byBlock_[buffer->block()].push_back(x);
    }
    for (uint32_t b = 0; b < numBlocks; ++b) {
      const fb::Block *block = plan.blocks()->Get(b);
      for (uint32_t i = 0; i < count(block->instructions()); ++i) {
        const fb::Instruction *inst = block->instructions()->Get(i);
        if (inst->opcode() == fb::Opcode::View)
          alias[inst->outputs()->Get(0)] = true;
        if (!isCommOpcode(inst->opcode()))
          continue;
        for (uint32_t k = 0; k < count(inst->inputs()); ++k)
          comm[inst->inputs()->Get(k)] = true;
        for (uint32_t k = 0; k < count(inst->outputs()); ++k)
          comm[inst->outputs()->Get(k)] = true;
      }
    }
    std::vector<int32_t> loads =
        AliasedStateLoads(plan, ProgramOrder::Of(plan));
    for (uint32_t x = 0; x < numBuffers; ++x) {
      const fb::Buffer *buffer = plan.buffers()->Get(x);
      if (alias[x] || loads[x] >= 0 ||
          buffer->category() == MemoryCategory::Host)
        category_[x] = MemoryCategory::Host; // no device bytes of its own
      else if (buffer->category() != MemoryCategory::Unspecified)
        category_[x] = buffer->category();
      else
        category_[x] =
            comm[x] ? MemoryCategory::CommBuffers : MemoryCategory::Activations;
    }
  }

  /// peak(b) of the rule in Memory.h. Recursion is bounded by the block
  /// tree's depth, which the loader caps.
  absl::StatusOr<Live> peak(int32_t b) {
    const fb::Block *block = plan_.blocks()->Get(b);
    uint32_t n = count(block->instructions());
    std::vector<LiveInterval> intervals;
    for (uint32_t x : byBlock_[b]) {
      if (category_[x] == MemoryCategory::Host)
        continue;
      const fb::Buffer *buffer = plan_.buffers()->Get(x);
      intervals.push_back({buffer->first(), buffer->last(), category_[x],
                           world_.bytes(*buffer)});
    }
    absl::StatusOr<std::vector<CategoryBytes>> liveAt = LiveBytes(n, intervals);
    if (!liveAt.ok())
      return liveAt.status();
    Live best;
    for (uint32_t i = 0; i < n; ++i) {
      const fb::Instruction *inst = block->instructions()->Get(i);
      Live inner;
      bool runs = !(inst->opcode() == fb::Opcode::MicroSteps &&
                    world_.accumulationSteps <= 1);
      for (uint32_t k = 0; runs && k < count(inst->blocks()); ++k) {
        absl::StatusOr<Live> child = peak(inst->blocks()->Get(k));
        if (!child.ok())
          return child.status();
        if (inner.block == -1 || child->total > inner.total)
          inner = *child;
      }
      Live candidate;
      candidate.bytes = (*liveAt)[i];
      candidate.block = b;
      candidate.instruction = static_cast<int32_t>(i);
      if (inner.block != -1) {
        MD_RETURN_IF_ERROR(add(candidate.bytes, inner.bytes, world_.worldSize));
        if (inner.total > 0) {
          candidate.block = inner.block;
          candidate.instruction = inner.instruction;
        }
      }
      for (int64_t bytes : candidate.bytes)
        if (__builtin_add_overflow(candidate.total, bytes, &candidate.total))
          return overflow("transient", world_.worldSize);
      if (best.instruction == -1 || candidate.total > best.total)
        best = candidate;
    }
    if (best.instruction == -1)
      best.block = b;
    return best;
  }

private:
  const fb::Plan &plan_;
  const WorldBinding &world_;
  std::vector<std::vector<uint32_t>> byBlock_;
  /// What each transient buffer counts as; Host for no bytes of its own.
  std::vector<MemoryCategory> category_;
};

MemoryCategory categoryOfRole(fb::StateRole role) {
  switch (role) {
  case fb::StateRole::Master:
  case fb::StateRole::Params:
  case fb::StateRole::Buffer:
  case fb::StateRole::Frozen:
    return MemoryCategory::Params;
  case fb::StateRole::GradAcc:
    return MemoryCategory::GradAcc;
  case fb::StateRole::ExpAvg:
  case fb::StateRole::ExpAvgSq:
  case fb::StateRole::Momentum:
  case fb::StateRole::None:
    break;
  }
  return MemoryCategory::Optimizer;
}

} // namespace

// Unknown values read as unspecified, like a plan that does not say.
constexpr const char *kMemoryCategoryNames[] = {
    "unspecified", "params",      "grads",        "grad_acc",
    "optimizer",   "activations", "comm_buffers", "host"};
static_assert(runtime::namesEveryValue(kMemoryCategoryNames,
                                       MemoryCategory::MAX));

const char *MemoryCategoryName(MemoryCategory category) {
  return runtime::enumName(kMemoryCategoryNames, category, "unspecified");
}

absl::StatusOr<MemoryTotals> MemoryTotals::Of(const CategoryBytes &bytes) {
  auto at = [&](MemoryCategory c) { return bytes[static_cast<size_t>(c)]; };
  MemoryTotals totals;
  totals.params = at(MemoryCategory::Params);
  totals.grads = at(MemoryCategory::Grads);
  totals.gradAcc = at(MemoryCategory::GradAcc);
  totals.optimizer = at(MemoryCategory::Optimizer);
  totals.commBuffers = at(MemoryCategory::CommBuffers);
  bool overflows = __builtin_add_overflow(at(MemoryCategory::Activations),
                                          at(MemoryCategory::Unspecified),
                                          &totals.activations);
  for (int64_t part :
       {totals.params, totals.grads, totals.gradAcc, totals.optimizer,
        totals.activations, totals.commBuffers})
    overflows =
        overflows || __builtin_add_overflow(totals.peak, part, &totals.peak);
  if (overflows)
    return absl::InvalidArgumentError("memory per rank overflows 64 bits");
  return totals;
}

std::array<MemoryRow, 7> MemoryRows(const MemoryTotals &totals) {
  return {{{"params", totals.params},
           {"grads", totals.grads},
           {"grad_acc", totals.gradAcc},
           {"optimizer", totals.optimizer},
           {"activations", totals.activations},
           {"comm_buffers", totals.commBuffers},
           {"peak", totals.peak}}};
}

absl::StatusOr<std::vector<CategoryBytes>>
LiveBytes(int64_t positions, const std::vector<LiveInterval> &intervals) {
  if (positions < 0)
    return absl::InvalidArgumentError("a negative number of positions");
  auto overflows = [] {
    return absl::InvalidArgumentError("live bytes overflow 64 bits");
  };
  // +bytes where an interval starts, -bytes after it ends, then a running
  // sum over the positions.
  std::vector<CategoryBytes> live(static_cast<size_t>(positions) + 1,
                                  CategoryBytes{});
  for (const LiveInterval &interval : intervals) {
    if (interval.first < 0 || interval.last < interval.first ||
        interval.last >= positions)
      return absl::InvalidArgumentError(
          absl::StrFormat("interval [%d, %d] is not within %d positions",
                          interval.first, interval.last, positions));
    size_t c = static_cast<size_t>(interval.category);
    if (__builtin_add_overflow(live[interval.first][c], interval.bytes,
                               &live[interval.first][c]) ||
        __builtin_sub_overflow(live[interval.last + 1][c], interval.bytes,
                               &live[interval.last + 1][c]))
      return overflows();
  }
  for (size_t p = 1; p < live.size(); ++p)
    for (size_t c = 0; c < kCategories; ++c)
      if (__builtin_add_overflow(live[p][c], live[p - 1][c], &live[p][c]))
        return overflows();
  live.pop_back();
  return live;
}

std::vector<StreamWindow>
StreamWindows(const std::vector<StreamEvents> &block) {
  const int32_t size = static_cast<int32_t>(block.size());
  std::vector<StreamWindow> windows(block.size());
  auto contains = [](const std::vector<int32_t> &events, int32_t e) {
    return std::find(events.begin(), events.end(), e) != events.end();
  };
  // The earliest instruction with which the next comm-stream instruction
  // may run concurrently: the comm stream runs in order, and an
  // instruction starts once the events it waits for have completed.
  int32_t commStart = 0;
  std::vector<std::pair<int32_t, int32_t>> recordedAt; // (event, index)
  for (int32_t i = 0; i < size; ++i) {
    windows[i] = {i, i};
    if (block[i].stream == 1) {
      std::vector<int32_t> recorded;
      windows[i].release = size;
      for (int32_t j = i; j < size; ++j) {
        bool waits = false;
        for (int32_t e : block[j].waits)
          waits = waits || contains(recorded, e);
        if (j > i && waits) {
          windows[i].release = j;
          break;
        }
        if (block[j].stream == 1 && block[j].record >= 0)
          recorded.push_back(block[j].record);
      }
      for (int32_t e : block[i].waits)
        for (const auto &[event, at] : recordedAt)
          if (event == e)
            commStart = std::max(commStart, at + 1);
      windows[i].start = std::min(commStart, i);
    }
    if (block[i].record >= 0) {
      auto it = std::find_if(recordedAt.begin(), recordedAt.end(),
                             [&](const std::pair<int32_t, int32_t> &r) {
                               return r.first == block[i].record;
                             });
      if (it != recordedAt.end())
        it->second = i;
      else
        recordedAt.push_back({block[i].record, i});
    }
  }
  return windows;
}

absl::StatusOr<MemoryReport> PerRankMemory(const LoadedPlan &loaded,
                                           int64_t worldSize) {
  absl::StatusOr<WorldBinding> world = BindWorldSize(loaded, worldSize);
  if (!world.ok())
    return world.status();
  const fb::Plan &plan = loaded.plan();
  MemoryReport report;
  report.compilerCategories = count(plan.buffers()) != 0;
  CategoryBytes total{};
  for (uint32_t x = 0; x < count(plan.buffers()); ++x) {
    const fb::Buffer *buffer = plan.buffers()->Get(x);
    if (buffer->category() == MemoryCategory::Unspecified)
      report.compilerCategories = false;
    if (buffer->role() == fb::StateRole::None)
      continue;
    if (buffer->only_when_accumulating() && world->accumulationSteps <= 1)
      continue;
    MemoryCategory category = buffer->category();
    if (category == MemoryCategory::Unspecified)
      category = categoryOfRole(buffer->role());
    if (category == MemoryCategory::Host)
      continue;
    int64_t &into = total[static_cast<size_t>(category)];
    if (__builtin_add_overflow(into, world->bytes(*buffer), &into))
      return overflow("persistent", worldSize);
  }

  PeakFinder finder(plan, *world);
  absl::StatusOr<Live> transient = finder.peak(plan.step_block());
  if (!transient.ok())
    return transient.status();
  if (plan.hooks_block() != -1) {
    absl::StatusOr<Live> hooks = finder.peak(plan.hooks_block());
    if (!hooks.ok())
      return hooks.status();
    if (hooks->total > transient->total)
      transient = hooks;
  }
  MD_RETURN_IF_ERROR(add(total, transient->bytes, worldSize));
  absl::StatusOr<MemoryTotals> totals = MemoryTotals::Of(total);
  if (!totals.ok())
    return overflow("peak", worldSize);
  static_cast<MemoryTotals &>(report) = *totals;
  if (transient->total > 0) {
    report.peakBlock = transient->block;
    report.peakInstruction = transient->instruction;
  }
  return report;
}

} // namespace md::plan
