//===- Memory.cpp - bytes per rank of a plan at a world size ------------===//

#include "runtime/plan/Memory.h"

#include <vector>

#include "absl/strings/str_format.h"
#include "runtime/plan/VerifyInternal.h"

namespace md::plan {
namespace {

using detail::count;

absl::Status overflow(const char *what, int64_t worldSize) {
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s bytes per rank overflow 64 bits at world size %d", what, worldSize));
}

bool isCommOpcode(fb::Opcode op) {
  return op == fb::Opcode::AllGather || op == fb::Opcode::ReduceScatter ||
         op == fb::Opcode::AllReduce || op == fb::Opcode::Broadcast;
}

/// Live transient bytes at one program point, split by class.
struct Live {
  int64_t activations = 0;
  int64_t comm = 0;
  int32_t block = -1;
  int32_t instruction = -1;
  int64_t total() const {
    return activations + comm;
  } // callers keep this from overflowing
};

class PeakFinder {
public:
  PeakFinder(const fb::Plan &plan, const WorldBinding &world)
      : plan_(plan), world_(world) {
    uint32_t numBlocks = count(plan.blocks());
    byBlock_.resize(numBlocks);
    comm_.assign(count(plan.buffers()), false);
    alias_.assign(count(plan.buffers()), false);
    for (uint32_t x = 0; x < count(plan.buffers()); ++x) {
      const fb::Buffer *buffer = plan.buffers()->Get(x);
      if (buffer->role() == fb::StateRole::None)
        byBlock_[buffer->block()].push_back(x);
    }
    for (uint32_t b = 0; b < numBlocks; ++b) {
      const fb::Block *block = plan.blocks()->Get(b);
      for (uint32_t i = 0; i < count(block->instructions()); ++i) {
        const fb::Instruction *inst = block->instructions()->Get(i);
        if (inst->opcode() == fb::Opcode::View)
          alias_[inst->outputs()->Get(0)] = true;
        if (!isCommOpcode(inst->opcode()))
          continue;
        for (uint32_t k = 0; k < count(inst->inputs()); ++k)
          comm_[inst->inputs()->Get(k)] = true;
        for (uint32_t k = 0; k < count(inst->outputs()); ++k)
          comm_[inst->outputs()->Get(k)] = true;
      }
    }
  }

  /// peak(b) of the rule in Memory.h. Recursion is bounded by the block
  /// tree's depth, which the loader caps.
  absl::StatusOr<Live> peak(int32_t b) {
    const fb::Block *block = plan_.blocks()->Get(b);
    uint32_t n = count(block->instructions());
    std::vector<int64_t> actDelta(n + 1, 0), commDelta(n + 1, 0);
    for (uint32_t x : byBlock_[b]) {
      if (alias_[x])
        continue;
      const fb::Buffer *buffer = plan_.buffers()->Get(x);
      int64_t bytes = world_.bytes(*buffer);
      std::vector<int64_t> &delta = comm_[x] ? commDelta : actDelta;
      if (__builtin_add_overflow(delta[buffer->first()], bytes,
                                 &delta[buffer->first()]) ||
          __builtin_sub_overflow(delta[buffer->last() + 1], bytes,
                                 &delta[buffer->last() + 1]))
        return overflow("transient", world_.worldSize);
    }
    Live best, live;
    best.block = b;
    for (uint32_t i = 0; i < n; ++i) {
      if (__builtin_add_overflow(live.activations, actDelta[i],
                                 &live.activations) ||
          __builtin_add_overflow(live.comm, commDelta[i], &live.comm))
        return overflow("transient", world_.worldSize);
      Live here = live;
      here.block = b;
      here.instruction = static_cast<int32_t>(i);
      int64_t hereTotal = 0;
      if (__builtin_add_overflow(here.activations, here.comm, &hereTotal))
        return overflow("transient", world_.worldSize);
      const fb::Instruction *inst = block->instructions()->Get(i);
      Live inner;
      for (uint32_t k = 0; k < count(inst->blocks()); ++k) {
        absl::StatusOr<Live> child = peak(inst->blocks()->Get(k));
        if (!child.ok())
          return child.status();
        if (child->total() > inner.total() || inner.block == -1)
          inner = *child;
      }
      Live candidate = here;
      if (inner.block != -1) {
        int64_t total = 0;
        if (__builtin_add_overflow(here.activations, inner.activations,
                                   &candidate.activations) ||
            __builtin_add_overflow(here.comm, inner.comm, &candidate.comm) ||
            __builtin_add_overflow(candidate.activations, candidate.comm,
                                   &total))
          return overflow("transient", world_.worldSize);
        if (inner.total() > 0) {
          candidate.block = inner.block;
          candidate.instruction = inner.instruction;
        }
      }
      if (best.instruction == -1 || candidate.total() > best.total())
        best = candidate;
    }
    return best;
  }

private:
  const fb::Plan &plan_;
  const WorldBinding &world_;
  std::vector<std::vector<uint32_t>> byBlock_;
  std::vector<bool> comm_;
  std::vector<bool> alias_; // outputs of views
};

} // namespace

absl::StatusOr<MemoryReport> PerRankMemory(const LoadedPlan &loaded,
                                           int64_t worldSize) {
  absl::StatusOr<WorldBinding> world = BindWorldSize(loaded, worldSize);
  if (!world.ok())
    return world.status();
  const fb::Plan &plan = loaded.plan();
  MemoryReport report;
  for (uint32_t x = 0; x < count(plan.buffers()); ++x) {
    const fb::Buffer *buffer = plan.buffers()->Get(x);
    if (buffer->role() == fb::StateRole::None)
      continue;
    if (buffer->only_when_accumulating() && world->accumulationSteps <= 1)
      continue;
    int64_t *category = nullptr;
    switch (buffer->role()) {
    case fb::StateRole::Master:
    case fb::StateRole::Params:
    case fb::StateRole::Buffer:
      category = &report.params;
      break;
    case fb::StateRole::GradAcc:
      category = &report.grads;
      break;
    case fb::StateRole::ExpAvg:
    case fb::StateRole::ExpAvgSq:
    case fb::StateRole::Momentum:
      category = &report.optimizer;
      break;
    case fb::StateRole::None:
      continue;
    }
    if (__builtin_add_overflow(*category, world->bytes(*buffer), category))
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
    if (hooks->total() > transient->total())
      transient = hooks;
  }
  report.activations = transient->activations;
  report.commBuffers = transient->comm;
  if (transient->total() > 0) {
    report.peakBlock = transient->block;
    report.peakInstruction = transient->instruction;
  }
  int64_t peak = 0;
  if (__builtin_add_overflow(report.params, report.grads, &peak) ||
      __builtin_add_overflow(peak, report.optimizer, &peak) ||
      __builtin_add_overflow(peak, report.activations, &peak) ||
      __builtin_add_overflow(peak, report.commBuffers, &peak))
    return overflow("peak", worldSize);
  report.peak = peak;
  return report;
}

} // namespace md::plan
