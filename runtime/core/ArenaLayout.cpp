//===- ArenaLayout.cpp - where every buffer of a plan lives --------------===//

#include "runtime/core/ArenaLayout.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "runtime/core/Backend.h"
#include "runtime/core/Mesh.h"
#include "runtime/plan/Aliasing.h"
#include "runtime/plan/Schema.h"

namespace md::runtime {
namespace {

template <typename T> uint32_t count(const flatbuffers::Vector<T> *v) {
  return v ? v->size() : 0;
}

struct AliasSource {
  int32_t source = -1;
  int64_t byteOffset = 0;
};

} // namespace

int64_t AlignUp(int64_t n) {
  return (n + kAllocAlignment - 1) / kAllocAlignment * kAllocAlignment;
}

absl::StatusOr<ArenaLayout> LayOutArenas(const plan::LoadedPlan &loaded,
                                         const plan::WorldBinding &world) {
  const fb::Plan &plan = loaded.plan();
  const uint32_t numBuffers = count(plan.buffers());
  const uint32_t numBlocks = count(plan.blocks());
  ArenaLayout layout;
  layout.buffers.resize(numBuffers);

  const plan::ProgramOrder program = plan::ProgramOrder::Of(plan);

  for (uint32_t x = 0; x < numBuffers; ++x) {
    const fb::Buffer *buffer = plan.buffers()->Get(x);
    BufferLayout &l = layout.buffers[x];
    l.elements = world.elements(*buffer);
    l.capacity = l.elements * plan::DTypeSize(buffer->dtype());
    if (!program.interval(*buffer, l.start, l.end))
      l.start = l.end = -1;
  }

  // Views, and the state loads that alias their state (Aliasing.h).
  std::vector<AliasSource> views(numBuffers);
  struct PaddedOperand {
    int32_t buffer;
    int64_t bytes;
  };
  std::vector<PaddedOperand> padded;
  for (uint32_t b = 0; b < numBlocks; ++b) {
    const fb::Block *block = plan.blocks()->Get(b);
    for (uint32_t i = 0; i < count(block->instructions()); ++i) {
      const fb::Instruction *inst = block->instructions()->Get(i);
      if (program.enter[b].empty())
        continue; // unreachable block: never runs
      switch (inst->opcode()) {
      case fb::Opcode::View: {
        int32_t out = inst->outputs()->Get(0);
        int32_t src = inst->inputs()->Get(0);
        views[out].source = src;
        views[out].byteOffset =
            inst->ints()->Get(0) *
            plan::DTypeSize(plan.buffers()->Get(out)->dtype());
        break;
      }
      case fb::Opcode::AllGather:
      case fb::Opcode::ReduceScatter: {
        bool gather = inst->opcode() == fb::Opcode::AllGather;
        int32_t part =
            gather ? inst->inputs()->Get(0) : inst->outputs()->Get(0);
        int32_t whole =
            gather ? inst->outputs()->Get(0) : inst->inputs()->Get(0);
        const fb::Buffer *w = plan.buffers()->Get(whole);
        int64_t g =
            world.groupSize(static_cast<fb::Group>(inst->ints()->Get(0)));
        int64_t esize = plan::DTypeSize(w->dtype());
        if (plan.buffers()->Get(part)->size_kind() == fb::SizeKind::Shard) {
          std::optional<int64_t> paddedNumel = mesh::paddedNumel(w->numel(), g);
          int64_t bytes = 0;
          if (!paddedNumel ||
              __builtin_mul_overflow(*paddedNumel, esize, &bytes))
            return absl::InvalidArgumentError(absl::StrFormat(
                "blocks[%d].instructions[%d]: buffers[%d] padded to %d shards "
                "overflows 64 bits",
                b, i, whole, g));
          if (bytes > layout.buffers[whole].capacity)
            padded.push_back({whole, bytes});
        } else {
          int64_t axis = inst->ints()->Get(gather ? 2 : 3);
          if (axis != 0)
            layout.scratchBytes =
                std::max(layout.scratchBytes, w->numel() * esize);
        }
        break;
      }
      default:
        break;
      }
    }
  }

  const std::vector<int32_t> loads = plan::AliasedStateLoads(plan, program);
  for (uint32_t x = 0; x < numBuffers; ++x) {
    if (loads[x] < 0)
      continue;
    views[x].source = loads[x];
    views[x].byteOffset = 0;
  }

  // Persistent buffers back to back.
  int64_t persistent = 0;
  for (uint32_t x = 0; x < numBuffers; ++x) {
    const fb::Buffer *buffer = plan.buffers()->Get(x);
    if (buffer->role() == fb::StateRole::None)
      continue;
    if (buffer->only_when_accumulating() && world.accumulationSteps <= 1)
      continue;
    BufferLayout &l = layout.buffers[x];
    l.placement = Placement::Persistent;
    l.offset = persistent;
    persistent += AlignUp(l.capacity);
  }
  layout.persistentBytes = persistent;

  // Resolve aliases to their root (a view of a view of a load ...). The
  // loader guarantees that view chains end; a depth bound keeps a bad
  // chain from looping anyway.
  for (uint32_t x = 0; x < numBuffers; ++x) {
    if (views[x].source < 0)
      continue;
    int32_t root = static_cast<int32_t>(x);
    int64_t offset = 0;
    int steps = 0;
    while (views[root].source >= 0 && steps++ <= static_cast<int>(numBuffers)) {
      offset += views[root].byteOffset;
      root = views[root].source;
    }
    if (views[root].source >= 0)
      return absl::InternalError(
          absl::StrFormat("buffer %d: a cycle of views", x));
    BufferLayout &l = layout.buffers[x];
    l.placement = Placement::Alias;
    l.aliasOf = root;
    l.offset = offset;
  }

  for (const PaddedOperand &p : padded) {
    BufferLayout &l = layout.buffers[p.buffer];
    if (l.placement == Placement::Alias || l.placement == Placement::Persistent)
      layout.scratchBytes = std::max(layout.scratchBytes, p.bytes);
    else
      l.capacity = std::max(l.capacity, p.bytes);
  }

  // Transient buffers: greedy first fit over their intervals.
  std::vector<uint32_t> order;
  for (uint32_t x = 0; x < numBuffers; ++x) {
    const fb::Buffer *buffer = plan.buffers()->Get(x);
    BufferLayout &l = layout.buffers[x];
    if (buffer->role() != fb::StateRole::None ||
        l.placement == Placement::Alias)
      continue;
    if (l.start < 0)
      continue; // in a block that never runs
    l.placement = Placement::Transient;
    layout.transientUnshared += AlignUp(l.capacity);
    order.push_back(x);
  }
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    const BufferLayout &la = layout.buffers[a], &lb = layout.buffers[b];
    if (la.capacity != lb.capacity)
      return la.capacity > lb.capacity;
    if (la.start != lb.start)
      return la.start < lb.start;
    return a < b;
  });
  std::vector<uint32_t> placed;
  std::vector<std::pair<int64_t, int64_t>> busy; // [offset, end) of overlaps
  int64_t top = 0;
  for (uint32_t x : order) {
    BufferLayout &l = layout.buffers[x];
    int64_t size = AlignUp(l.capacity);
    busy.clear();
    for (uint32_t y : placed) {
      const BufferLayout &o = layout.buffers[y];
      if (o.start <= l.end && l.start <= o.end)
        busy.emplace_back(o.offset, o.offset + AlignUp(o.capacity));
    }
    std::sort(busy.begin(), busy.end());
    int64_t offset = 0;
    for (const auto &[begin, end] : busy) {
      if (offset + size <= begin)
        break;
      offset = std::max(offset, end);
    }
    l.offset = offset;
    top = std::max(top, offset + size);
    placed.push_back(x);
  }
  layout.transientBytes = top;
  return layout;
}

} // namespace md::runtime
