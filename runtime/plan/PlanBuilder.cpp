//===- PlanBuilder.cpp - build a plan.fb in memory ----------------------===//

#include "runtime/plan/PlanBuilder.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/strings/str_format.h"
#include "runtime/plan/Checksum.h"
#include "runtime/plan/Memory.h"
#include "runtime/plan/Schema.h"

namespace md::plan {

uint64_t SourceHash(absl::string_view text) {
  uint64_t hash = 14695981039346656037ull; // FNV-1a 64 offset basis
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 1099511628211ull; // FNV-1a 64 prime
  }
  return hash;
}

PlanBuilder::PlanBuilder() {
  // Raised by add() to the first version with each opcode used.
  plan_.schema_version = 1;
  plan_.header = std::make_unique<fb::HeaderT>();
  plan_.header->options = std::make_unique<fb::PlanOptionsT>();
  plan_.recipe = std::make_unique<fb::RecipeT>();
  plan_.recipe->optimizer = std::make_unique<fb::OptimizerT>();
  plan_.recipe->schedule = std::make_unique<fb::ScheduleT>();
  plan_.recipe->sampler = std::make_unique<fb::SamplerT>();
}

int32_t PlanBuilder::addUnit(std::string name, int64_t numel) {
  auto unit = std::make_unique<fb::UnitT>();
  unit->id = static_cast<int32_t>(plan_.units.size());
  unit->name = std::move(name);
  unit->numel = numel;
  plan_.units.push_back(std::move(unit));
  return plan_.units.back()->id;
}

int32_t PlanBuilder::addParam(std::string name, std::vector<int64_t> shape,
                              fb::DType dtype, int32_t unit, int64_t offset,
                              fb::InitKind init, std::vector<double> initArgs,
                              bool trainable) {
  auto param = std::make_unique<fb::ParamT>();
  param->name = std::move(name);
  param->shape = std::move(shape);
  param->dtype = dtype;
  param->init = std::make_unique<fb::InitT>();
  param->init->kind = init;
  param->init->args = std::move(initArgs);
  param->unit = unit;
  param->offset = offset;
  param->trainable = trainable;
  plan_.params.push_back(std::move(param));
  return static_cast<int32_t>(plan_.params.size() - 1);
}

int32_t PlanBuilder::addDataset(fb::DataKind kind, std::string path,
                                int64_t seed) {
  auto data = std::make_unique<fb::DataSpecT>();
  data->kind = kind;
  data->path = std::move(path);
  data->seed = seed;
  plan_.datasets.push_back(std::move(data));
  return static_cast<int32_t>(plan_.datasets.size() - 1);
}

fb::BufferT PlanBuilder::full(std::string name, fb::DType dtype,
                              std::vector<int64_t> shape) {
  fb::BufferT buffer;
  buffer.name = std::move(name);
  buffer.dtype = dtype;
  buffer.size_kind = fb::SizeKind::Full;
  int64_t numel = 1;
  for (int64_t dim : shape) {
    if (dim < 0 || __builtin_mul_overflow(numel, dim, &numel)) {
      numel = -1;
      break;
    }
  }
  buffer.numel = numel;
  buffer.shape = std::move(shape);
  return buffer;
}

fb::BufferT PlanBuilder::shard(std::string name, fb::DType dtype, int64_t numel,
                               fb::Group group) {
  fb::BufferT buffer;
  buffer.name = std::move(name);
  buffer.dtype = dtype;
  buffer.size_kind = fb::SizeKind::Shard;
  buffer.numel = numel;
  buffer.group = group;
  return buffer;
}

fb::BufferT PlanBuilder::state(fb::BufferT buffer, fb::StateRole role,
                               int32_t unit, bool onlyWhenAccumulating) {
  buffer.role = role;
  buffer.unit = unit;
  buffer.only_when_accumulating = onlyWhenAccumulating;
  return buffer;
}

int32_t PlanBuilder::addBuffer(fb::BufferT buffer) {
  plan_.buffers.push_back(std::make_unique<fb::BufferT>(std::move(buffer)));
  return static_cast<int32_t>(plan_.buffers.size() - 1);
}

int32_t PlanBuilder::addEvent(std::string name) {
  auto event = std::make_unique<fb::EventT>();
  event->name = std::move(name);
  plan_.events.push_back(std::move(event));
  return static_cast<int32_t>(plan_.events.size() - 1);
}

int32_t PlanBuilder::addLocation(std::string file, int32_t line, int32_t col) {
  auto loc = std::make_unique<fb::SourceLocationT>();
  loc->file = std::move(file);
  loc->line = line;
  loc->col = col;
  plan_.locations.push_back(std::move(loc));
  return static_cast<int32_t>(plan_.locations.size() - 1);
}

int32_t PlanBuilder::addBlock(fb::BlockKind kind) {
  auto block = std::make_unique<fb::BlockT>();
  block->kind = kind;
  plan_.blocks.push_back(std::move(block));
  return static_cast<int32_t>(plan_.blocks.size() - 1);
}

fb::InstructionT &PlanBuilder::add(int32_t block, fb::Opcode opcode,
                                   std::vector<int32_t> inputs,
                                   std::vector<int32_t> outputs) {
  auto inst = std::make_unique<fb::InstructionT>();
  inst->opcode = opcode;
  plan_.schema_version =
      std::max(plan_.schema_version, OpcodeSchemaVersion(opcode));
  inst->inputs = std::move(inputs);
  inst->outputs = std::move(outputs);
  auto &list = plan_.blocks.at(static_cast<size_t>(block))->instructions;
  list.push_back(std::move(inst));
  return *list.back();
}

int32_t PlanBuilder::size(int32_t block) const {
  return static_cast<int32_t>(
      plan_.blocks.at(static_cast<size_t>(block))->instructions.size());
}

absl::Status PlanBuilder::inferLiveness() {
  const int32_t numBlocks = static_cast<int32_t>(plan_.blocks.size());
  // parent[b]: the block and instruction that run block b.
  std::vector<std::pair<int32_t, int32_t>> parent(numBlocks, {-1, -1});
  for (int32_t b = 0; b < numBlocks; ++b) {
    const auto &insts = plan_.blocks[b]->instructions;
    for (int32_t i = 0; i < static_cast<int32_t>(insts.size()); ++i) {
      for (int32_t child : insts[i]->blocks) {
        if (child < 0 || child >= numBlocks)
          return absl::InvalidArgumentError(absl::StrFormat(
              "blocks[%d].instructions[%d]: block %d out of range", b, i,
              child));
        if (parent[child].first != -1 || child == plan_.step_block ||
            child == plan_.hooks_block)
          return absl::InvalidArgumentError(absl::StrFormat(
              "blocks[%d]: run from more than one place", child));
        parent[child] = {b, i};
      }
    }
  }
  std::vector<int32_t> depth(numBlocks, -1);
  for (int32_t b = 0; b < numBlocks; ++b) {
    int32_t d = 0;
    for (int32_t p = b; parent[p].first != -1; p = parent[p].first) {
      if (++d > numBlocks)
        return absl::InvalidArgumentError(
            absl::StrFormat("blocks[%d]: nested blocks form a cycle", b));
    }
    depth[b] = d;
  }

  // Per buffer: the innermost common block of its uses and the positions
  // of those uses in it.
  struct Uses {
    int32_t block = -1;
    std::vector<std::pair<int32_t, int32_t>> sites; // (block, instruction)
  };
  std::vector<Uses> uses(plan_.buffers.size());
  for (int32_t b = 0; b < numBlocks; ++b) {
    const auto &insts = plan_.blocks[b]->instructions;
    const int32_t size = static_cast<int32_t>(insts.size());
    // How long each instruction touches its operands: a comm-stream one
    // reads its inputs until the compute stream waits for it and may write
    // its outputs from the moment it can start (Memory.h).
    std::vector<StreamEvents> events(insts.size());
    for (int32_t i = 0; i < size; ++i)
      events[i] = {insts[i]->stream, insts[i]->record, insts[i]->waits};
    const std::vector<StreamWindow> windows = StreamWindows(events);
    for (int32_t i = 0; i < size; ++i) {
      auto note = [&](int32_t buffer, int32_t at) {
        if (buffer >= 0 && buffer < static_cast<int32_t>(uses.size()))
          uses[buffer].sites.push_back({b, at});
      };
      for (int32_t in : insts[i]->inputs)
        note(in, std::min(windows[i].release, size - 1));
      for (int32_t out : insts[i]->outputs)
        note(out, i);
      if (insts[i]->stream == 1)
        for (int32_t out : insts[i]->outputs)
          note(out, windows[i].start);
    }
  }
  auto commonBlock = [&](int32_t a, int32_t b) {
    while (depth[a] > depth[b])
      a = parent[a].first;
    while (depth[b] > depth[a])
      b = parent[b].first;
    while (a != b && a != -1 && b != -1) {
      a = parent[a].first;
      b = parent[b].first;
    }
    return a == b ? a : -1;
  };
  std::vector<bool> inferred(plan_.buffers.size(), false);
  for (size_t index = 0; index < plan_.buffers.size(); ++index) {
    fb::BufferT &buffer = *plan_.buffers[index];
    if (buffer.role != fb::StateRole::None || buffer.block != -1)
      continue;
    const Uses &use = uses[index];
    if (use.sites.empty())
      return absl::InvalidArgumentError(absl::StrFormat(
          "buffers[%d] ('%s'): no instruction uses it", index, buffer.name));
    int32_t home = use.sites.front().first;
    for (const auto &site : use.sites) {
      home = commonBlock(home, site.first);
      if (home == -1)
        return absl::InvalidArgumentError(absl::StrFormat(
            "buffers[%d] ('%s'): used in blocks of two different trees", index,
            buffer.name));
    }
    int32_t first = INT32_MAX, last = -1;
    for (auto [b, i] : use.sites) {
      while (b != home) { // the control instruction in `home` that runs the use
        i = parent[b].second;
        b = parent[b].first;
      }
      first = std::min(first, i);
      last = std::max(last, i);
    }
    buffer.block = home;
    buffer.first = first;
    buffer.last = last;
    inferred[index] = true;
  }
  // A view aliases its source: keep the source alive as long as the view
  // (in reverse order, so that a view of a view extends both).
  for (int32_t b = 0; b < numBlocks; ++b) {
    const auto &insts = plan_.blocks[b]->instructions;
    for (auto it = insts.rbegin(); it != insts.rend(); ++it) {
      const fb::InstructionT &inst = **it;
      if (inst.opcode != fb::Opcode::View || inst.inputs.size() != 1 ||
          inst.outputs.size() != 1)
        continue;
      auto valid = [&](int32_t x) {
        return x >= 0 && x < static_cast<int32_t>(inferred.size());
      };
      if (!valid(inst.inputs[0]) || !valid(inst.outputs[0]) ||
          !inferred[inst.inputs[0]])
        continue;
      fb::BufferT &source = *plan_.buffers[inst.inputs[0]];
      const fb::BufferT &view = *plan_.buffers[inst.outputs[0]];
      if (source.block == view.block)
        source.last = std::max(source.last, view.last);
    }
  }
  return absl::OkStatus();
}

std::vector<uint8_t> PlanBuilder::serialize(const fb::PlanT &plan,
                                            bool checksum) {
  // Pack writes a scalar only when it differs from its default (0): the
  // checksum field is packed as a placeholder that is not, so that the file
  // has its 8 bytes, and then sealed. The object is borrowed for it (its
  // value is put back), so two threads must not serialize one object.
  fb::PlanT &object = const_cast<fb::PlanT &>(plan);
  const uint64_t given = object.checksum;
  object.checksum = checksum ? ~uint64_t{0} : 0;
  flatbuffers::FlatBufferBuilder fbb;
  fb::FinishPlanBuffer(fbb, fb::Plan::Pack(fbb, &object));
  object.checksum = given;
  std::vector<uint8_t> bytes(fbb.GetBufferPointer(),
                             fbb.GetBufferPointer() + fbb.GetSize());
  if (checksum)
    (void)SealPlan(bytes); // the field is there: packed just above
  return bytes;
}

} // namespace md::plan
