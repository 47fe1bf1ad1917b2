//===- ArenaLayout.cpp - where every buffer of a plan lives --------------===//

#include "runtime/exec/ArenaLayout.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "runtime/core/Backend.h"
#include "runtime/core/Mesh.h"
#include "runtime/core/Status.h"
#include "runtime/plan/Aliasing.h"
#include "runtime/plan/Schema.h"

namespace md::runtime {

int64_t AlignUp(int64_t n) {
  return (n + kAllocAlignment - 1) / kAllocAlignment * kAllocAlignment;
}

namespace {

template <typename T> uint32_t count(const flatbuffers::Vector<T> *v) {
  return v ? v->size() : 0;
}

/// A view (or a state load aliasing its state) reads its bytes from
/// `source` at `byteOffset`; -1 when the buffer has storage of its own.
struct AliasSource {
  int32_t source = -1;
  int64_t byteOffset = 0;
};

/// A shard-sized operand of a gather or scatter whose whole buffer needs
/// padding to a multiple of the group size.
struct PaddedOperand {
  int32_t buffer;
  int64_t bytes;
};

/// Element counts, capacities and liveness intervals (-1 when the buffer's
/// block never runs).
void sizeBuffers(const fb::Plan &plan, const plan::WorldBinding &world,
                 const plan::ProgramOrder &program, ArenaLayout &layout) {
  for (uint32_t x = 0; x < count(plan.buffers()); ++x) {
    const fb::Buffer *buffer = plan.buffers()->Get(x);
    BufferLayout &l = layout.buffers[x];
    l.elements = world.elements(*buffer);
    l.capacity = l.elements * plan::DTypeSize(buffer->dtype());
    if (!program.interval(*buffer, l.start, l.end))
      l.start = l.end = -1;
  }
}

/// The gather or scatter `inst` (blocks[b].instructions[i]): records its
/// whole buffer in `padded` when sharding pads it past its capacity, or
/// grows the scratch space a gather or scatter along a non-leading axis
/// needs.
absl::Status notePadding(const fb::Plan &plan, const plan::WorldBinding &world,
                         const fb::Instruction &inst, uint32_t b, uint32_t i,
                         ArenaLayout &layout,
                         std::vector<PaddedOperand> &padded) {
  bool gather = inst.opcode() == fb::Opcode::AllGather;
  int32_t part = gather ? inst.inputs()->Get(0) : inst.outputs()->Get(0);
  int32_t whole = gather ? inst.outputs()->Get(0) : inst.inputs()->Get(0);
  const fb::Buffer *w = plan.buffers()->Get(whole);
  int64_t g = world.groupSize(static_cast<fb::Group>(inst.ints()->Get(0)));
  int64_t esize = plan::DTypeSize(w->dtype());
  if (plan.buffers()->Get(part)->size_kind() == fb::SizeKind::Shard) {
    std::optional<int64_t> paddedNumel = mesh::paddedNumel(w->numel(), g);
    int64_t bytes = 0;
    if (!paddedNumel || __builtin_mul_overflow(*paddedNumel, esize, &bytes))
      return absl::InvalidArgumentError(absl::StrFormat(
          "blocks[%d].instructions[%d]: buffers[%d] padded to %d shards "
          "overflows 64 bits",
          b, i, whole, g));
    if (bytes > layout.buffers[whole].capacity)
      padded.push_back({whole, bytes});
  } else {
    int64_t axis = inst.ints()->Get(gather ? 2 : 3);
    if (axis != 0)
      layout.scratchBytes = std::max(layout.scratchBytes, w->numel() * esize);
  }
  return absl::OkStatus();
}

/// Walks the instructions of the blocks that run: the views into `views`,
/// the padded gather and scatter operands into `padded`; then the state
/// loads that alias their state (Aliasing.h) into `views`.
absl::Status collectAliasesAndPadding(const fb::Plan &plan,
                                      const plan::WorldBinding &world,
                                      const plan::ProgramOrder &program,
                                      ArenaLayout &layout,
                                      std::vector<AliasSource> &views,
                                      std::vector<PaddedOperand> &padded) {
  for (uint32_t b = 0; b < count(plan.blocks()); ++b) {
    const fb::Block *block = plan.blocks()->Get(b);
    if (program.enter[b].empty())
      continue; // unreachable block: never runs
    for (uint32_t i = 0; i < count(block->instructions()); ++i) {
      const fb::Instruction *inst = block->instructions()->Get(i);
      switch (inst->opcode()) {
      case fb::Opcode::View: {
        int32_t out = inst->outputs()->Get(0);
        views[out].source = inst->inputs()->Get(0);
        views[out].byteOffset =
            inst->ints()->Get(0) *
            plan::DTypeSize(plan.buffers()->Get(out)->dtype());
        break;
      }
      case fb::Opcode::AllGather:
      case fb::Opcode::ReduceScatter:
        MD_RETURN_IF_ERROR(
            notePadding(plan, world, *inst, b, i, layout, padded));
        break;
      default:
        break;
      }
    }
  }
  const std::vector<int32_t> loads = plan::AliasedStateLoads(plan, program);
  for (uint32_t x = 0; x < count(plan.buffers()); ++x) {
    if (loads[x] < 0)
      continue;
    views[x].source = loads[x];
    views[x].byteOffset = 0;
  }
  return absl::OkStatus();
}

/// Persistent buffers (state that lives across steps) back to back.
void placePersistent(const fb::Plan &plan, const plan::WorldBinding &world,
                     ArenaLayout &layout) {
  int64_t persistent = 0;
  for (uint32_t x = 0; x < count(plan.buffers()); ++x) {
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
}

/// Resolves aliases to their root (a view of a view of a load ...). The
/// loader guarantees that view chains end; a depth bound keeps a bad chain
/// from looping anyway.
absl::Status resolveAliases(const std::vector<AliasSource> &views,
                            ArenaLayout &layout) {
  const uint32_t numBuffers = static_cast<uint32_t>(views.size());
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
  return absl::OkStatus();
}

/// A padded operand grows its own buffer, or, when that buffer is an alias
/// or persistent (its size fixed), needs scratch space of the padded size.
void applyPadding(const std::vector<PaddedOperand> &padded,
                  ArenaLayout &layout) {
  for (const PaddedOperand &p : padded) {
    BufferLayout &l = layout.buffers[p.buffer];
    if (l.placement == Placement::Alias || l.placement == Placement::Persistent)
      layout.scratchBytes = std::max(layout.scratchBytes, p.bytes);
    else
      l.capacity = std::max(l.capacity, p.bytes);
  }
}

/// Transient buffers: greedy first fit over their intervals, largest first.
void placeTransients(const fb::Plan &plan, ArenaLayout &layout) {
  std::vector<uint32_t> order;
  for (uint32_t x = 0; x < count(plan.buffers()); ++x) {
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
}

} // namespace

absl::StatusOr<ArenaLayout> LayOutArenas(const plan::LoadedPlan &loaded,
                                         const plan::WorldBinding &world) {
  const fb::Plan &plan = loaded.plan();
  const uint32_t numBuffers = count(plan.buffers());
  ArenaLayout layout;
  layout.buffers.resize(numBuffers);
  const plan::ProgramOrder program = plan::ProgramOrder::Of(plan);
  sizeBuffers(plan, world, program, layout);

  std::vector<AliasSource> views(numBuffers);
  std::vector<PaddedOperand> padded;
  MD_RETURN_IF_ERROR(
      collectAliasesAndPadding(plan, world, program, layout, views, padded));
  placePersistent(plan, world, layout);
  MD_RETURN_IF_ERROR(resolveAliases(views, layout));
  applyPadding(padded, layout);
  placeTransients(plan, layout);
  return layout;
}

} // namespace md::runtime
