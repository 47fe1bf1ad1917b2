//===- Aliasing.cpp - which buffers of a plan share bytes ----------------===//

#include "runtime/plan/Aliasing.h"

#include "runtime/plan/VerifyInternal.h"

namespace md::plan {
namespace {

using detail::count;

void number(const fb::Plan &plan, int32_t b, int64_t &counter,
            ProgramOrder &order) {
  const fb::Block *block = plan.blocks()->Get(b);
  uint32_t size = count(block->instructions());
  order.enter[b].assign(size, 0);
  order.exit[b].assign(size, 0);
  for (uint32_t i = 0; i < size; ++i) {
    const fb::Instruction *inst = block->instructions()->Get(i);
    order.enter[b][i] = counter++;
    for (uint32_t k = 0; k < count(inst->blocks()); ++k)
      number(plan, inst->blocks()->Get(k), counter, order);
    order.exit[b][i] = counter - 1;
  }
}

} // namespace

ProgramOrder ProgramOrder::Of(const fb::Plan &plan) {
  ProgramOrder order;
  order.enter.resize(count(plan.blocks()));
  order.exit.resize(count(plan.blocks()));
  int64_t counter = 0;
  if (plan.step_block() >= 0)
    number(plan, plan.step_block(), counter, order);
  if (plan.hooks_block() >= 0)
    number(plan, plan.hooks_block(), counter, order);
  return order;
}

bool ProgramOrder::interval(const fb::Buffer &buffer, int64_t &start,
                            int64_t &end) const {
  if (buffer.role() != fb::StateRole::None || buffer.block() < 0 ||
      static_cast<size_t>(buffer.block()) >= enter.size() ||
      enter[buffer.block()].empty())
    return false;
  start = enter[buffer.block()][buffer.first()];
  end = exit[buffer.block()][buffer.last()];
  return true;
}

std::vector<int32_t> AliasedStateLoads(const fb::Plan &plan,
                                       const ProgramOrder &order) {
  const uint32_t numBuffers = count(plan.buffers());
  std::vector<int32_t> loads(numBuffers, -1);
  struct Write {
    int64_t at;
    int32_t source; // the buffer a state_store stores; -1 for other writes
  };
  std::vector<std::vector<Write>> writes(numBuffers);
  for (uint32_t b = 0; b < count(plan.blocks()); ++b) {
    if (order.enter[b].empty())
      continue; // never runs
    const fb::Block *block = plan.blocks()->Get(b);
    for (uint32_t i = 0; i < count(block->instructions()); ++i) {
      const fb::Instruction *inst = block->instructions()->Get(i);
      int64_t at = order.enter[b][i];
      switch (inst->opcode()) {
      case fb::Opcode::StateStore:
        writes[inst->outputs()->Get(0)].push_back({at, inst->inputs()->Get(0)});
        break;
      case fb::Opcode::GradAccumulate:
        writes[inst->outputs()->Get(0)].push_back({at, -1});
        break;
      case fb::Opcode::StateLoad:
        loads[inst->outputs()->Get(0)] = inst->inputs()->Get(0);
        break;
      default:
        break;
      }
    }
  }
  for (uint32_t x = 0; x < numBuffers; ++x) {
    if (loads[x] < 0)
      continue;
    int64_t start = 0, end = 0;
    if (!order.interval(*plan.buffers()->Get(x), start, end)) {
      loads[x] = -1;
      continue;
    }
    for (const Write &w : writes[loads[x]])
      if (w.at > start && w.at <= end && w.source != static_cast<int32_t>(x))
        loads[x] = -1;
  }
  return loads;
}

} // namespace md::plan
