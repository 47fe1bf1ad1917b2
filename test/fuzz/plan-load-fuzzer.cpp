//===- plan-load-fuzzer.cpp - libFuzzer target over the plan loader -----===//
//
// Feeds arbitrary bytes to LoadPlan (both verification stages) and, when a
// plan is accepted, to what consumes it: BindWorldSize, PerRankMemory and
// Summarize at a few world sizes. Any crash, sanitizer report, leak or hang
// is a bug, and so is an error message of more than one line: the loader
// must refuse what it cannot vouch for, in one line.
//
// A byte mutation of a sealed plan fails its checksum, so half of them are
// sealed again to reach the FlatBuffers verifier; they rarely get past it
// into the semantic checks, so half of the mutations are structural: a well-formed plan is
// unpacked to its object form, one field is changed (an index, a size, an
// enum value, an attribute, an instruction moved or copied, ...), and the
// plan is packed again.
//
//===----------------------------------------------------------------------===//

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "runtime/plan/Checksum.h"
#include "runtime/plan/Loader.h"
#include "runtime/plan/Memory.h"
#include "runtime/plan/PlanBuilder.h"
#include "runtime/plan/Summary.h"

extern "C" size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t maxSize);

namespace {

using namespace md;

class Mutator {
public:
  explicit Mutator(unsigned seed) : rng_(seed) {}

  /// A random index in [0, n), n > 0.
  size_t index(size_t n) { return static_cast<size_t>(rng_() % n); }
  bool coin() { return rng_() % 2 == 0; }

  /// A value near the edges of [0, range) or an extreme (computed without
  /// overflow whatever `range` is).
  int64_t interesting(int64_t range) {
    auto clamp = [](__int128 v) {
      return static_cast<int64_t>(
          std::clamp<__int128>(v, std::numeric_limits<int64_t>::min(),
                               std::numeric_limits<int64_t>::max()));
    };
    __int128 r = range;
    switch (index(10)) {
    case 0:
      return -1;
    case 1:
      return 0;
    case 2:
      return range;
    case 3:
      return clamp(r - 1);
    case 4:
      return clamp(r + 1);
    case 5:
      return std::numeric_limits<int32_t>::max();
    case 6:
      return coin() ? std::numeric_limits<int64_t>::max()
                    : std::numeric_limits<int64_t>::min();
    case 7:
      return int64_t{1} << (32 + index(31));
    default: {
      uint64_t span = static_cast<uint64_t>(
                          std::clamp<int64_t>(range, 1, int64_t{1} << 40)) +
                      4;
      return static_cast<int64_t>(rng_() % span) - 2;
    }
    }
  }
  int32_t interesting32(int64_t range) {
    int64_t v = interesting(range);
    return static_cast<int32_t>(std::clamp<int64_t>(v, INT32_MIN, INT32_MAX));
  }

  template <typename T> void tweakList(std::vector<T> &list, int64_t range) {
    if (!list.empty() && index(4) != 0)
      list[index(list.size())] = static_cast<T>(interesting(range));
    else if (!list.empty() && coin())
      list.erase(list.begin() +
                 static_cast<std::ptrdiff_t>(index(list.size())));
    else
      list.push_back(static_cast<T>(interesting(range)));
  }

  fb::InstructionT *someInstruction(fb::PlanT &p, size_t *block = nullptr,
                                    size_t *at = nullptr) {
    if (p.blocks.empty())
      return nullptr;
    size_t b = index(p.blocks.size());
    auto &insts = p.blocks[b]->instructions;
    if (insts.empty())
      return nullptr;
    size_t i = index(insts.size());
    if (block)
      *block = b;
    if (at)
      *at = i;
    return insts[i].get();
  }

  void mutate(fb::PlanT &p) {
    const int64_t buffers = static_cast<int64_t>(p.buffers.size());
    const int64_t blocks = static_cast<int64_t>(p.blocks.size());
    switch (index(10)) {
    case 0:
    case 1:
    case 2: { // an instruction's field
      fb::InstructionT *inst = someInstruction(p);
      if (!inst)
        return;
      switch (index(11)) {
      case 0:
        inst->opcode = static_cast<fb::Opcode>(
            index(static_cast<size_t>(fb::Opcode::MAX) + 3));
        break;
      case 1:
        tweakList(inst->inputs, buffers);
        break;
      case 2:
        tweakList(inst->outputs, buffers);
        break;
      case 3:
        tweakList(inst->ints, 8);
        break;
      case 4:
        if (inst->floats.empty())
          inst->floats.push_back(0);
        inst->floats[index(inst->floats.size())] = coin() ? -1.0 : 1e300;
        break;
      case 5:
        tweakList(inst->blocks, blocks);
        break;
      case 6:
        tweakList(inst->waits, static_cast<int64_t>(p.events.size()));
        break;
      case 7:
        inst->record = interesting32(static_cast<int64_t>(p.events.size()));
        break;
      case 8:
        inst->stream = static_cast<uint8_t>(index(3));
        break;
      case 9:
        inst->rank0_only = !inst->rank0_only;
        break;
      default:
        inst->loc = interesting32(static_cast<int64_t>(p.locations.size()));
        break;
      }
      return;
    }
    case 3: { // a buffer's field
      if (p.buffers.empty())
        return;
      fb::BufferT &b = *p.buffers[index(p.buffers.size())];
      switch (index(9)) {
      case 0:
        b.dtype = static_cast<fb::DType>(index(9));
        break;
      case 1:
        b.size_kind = static_cast<fb::SizeKind>(index(3));
        break;
      case 2:
        b.numel = interesting(b.numel);
        break;
      case 3:
        tweakList(b.shape, b.numel);
        break;
      case 4:
        b.role = static_cast<fb::StateRole>(index(9));
        break;
      case 5:
        b.block = interesting32(blocks);
        break;
      case 6:
        b.first = interesting32(int64_t{b.last} + 1);
        break;
      case 7:
        b.last = interesting32(int64_t{b.last} + 1);
        break;
      default:
        b.group = static_cast<fb::Group>(index(4));
        break;
      }
      return;
    }
    case 4: { // move or copy an instruction
      size_t from = 0, at = 0;
      if (!someInstruction(p, &from, &at))
        return;
      auto &source = p.blocks[from]->instructions;
      auto copy = std::make_unique<fb::InstructionT>(*source[at]);
      if (coin())
        source.erase(source.begin() + static_cast<std::ptrdiff_t>(at));
      auto &target = p.blocks[index(p.blocks.size())]->instructions;
      target.insert(target.begin() +
                        static_cast<std::ptrdiff_t>(index(target.size() + 1)),
                    std::move(copy));
      return;
    }
    case 5: { // a parameter or unit
      if (!p.params.empty() && coin()) {
        fb::ParamT &param = *p.params[index(p.params.size())];
        switch (index(4)) {
        case 0:
          tweakList(param.shape, 64);
          break;
        case 1:
          param.unit = interesting32(static_cast<int64_t>(p.units.size()));
          break;
        case 2:
          param.offset = interesting(param.offset);
          break;
        default:
          param.trainable = !param.trainable;
          break;
        }
      } else if (!p.units.empty()) {
        p.units[index(p.units.size())]->numel = interesting(212);
      }
      return;
    }
    case 6: { // the header
      if (!p.header)
        return;
      switch (index(4)) {
      case 0:
        p.header->world_size = interesting(4);
        break;
      case 1:
        p.header->shard_group_size = interesting(4);
        break;
      case 2:
        if (p.header->options)
          p.header->options->shard = static_cast<fb::ShardKind>(index(6));
        break;
      default:
        p.header.reset();
        break;
      }
      return;
    }
    case 7: { // the recipe
      if (!p.recipe)
        return;
      switch (index(3)) {
      case 0:
        p.recipe->global_batch = interesting(32);
        break;
      case 1:
        p.recipe->micro_batch = interesting(8);
        break;
      default:
        p.recipe->train_data =
            interesting32(static_cast<int64_t>(p.datasets.size()));
        break;
      }
      return;
    }
    case 8: { // the block tree
      switch (index(4)) {
      case 0:
        p.step_block = interesting32(blocks);
        break;
      case 1:
        p.hooks_block = interesting32(blocks);
        break;
      case 2:
        if (!p.blocks.empty())
          p.blocks[index(p.blocks.size())]->kind =
              static_cast<fb::BlockKind>(index(9));
        break;
      default:
        p.blocks.push_back(std::make_unique<fb::BlockT>());
        break;
      }
      return;
    }
    default: { // swap the operands of two instructions
      fb::InstructionT *a = someInstruction(p), *b = someInstruction(p);
      if (a && b)
        std::swap(coin() ? a->inputs : a->outputs,
                  coin() ? b->inputs : b->outputs);
      return;
    }
    }
  }

private:
  std::mt19937_64 rng_;
};

} // namespace

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size,
                                          size_t maxSize, unsigned int seed) {
  Mutator mutator(seed);
  std::vector<uint8_t> aligned(data, data + size);
  if (mutator.coin() || !md::plan::CheckPlanStructure(aligned).ok()) {
    // A byte mutation of a sealed plan is refused by its checksum alone;
    // sealed again (when its root table still reads), it reaches the
    // verifiers behind it. The input keeps the checksum check covered.
    size_t n = LLVMFuzzerMutate(data, size, maxSize);
    if (mutator.coin()) {
      std::vector<uint8_t> bytes(data, data + n);
      if (md::plan::SealPlan(bytes).ok())
        std::memcpy(data, bytes.data(), n);
    }
    return n;
  }
  md::fb::PlanT plan;
  md::fb::GetPlan(aligned.data())->UnPackTo(&plan);
  int rounds = 1 + static_cast<int>(mutator.index(3));
  for (int r = 0; r < rounds; ++r)
    mutator.mutate(plan);
  std::vector<uint8_t> bytes = md::plan::PlanBuilder::serialize(plan);
  if (bytes.size() > maxSize)
    return LLVMFuzzerMutate(data, size, maxSize);
  std::memcpy(data, bytes.data(), bytes.size());
  return bytes.size();
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  using namespace md::plan;
  absl::StatusOr<LoadedPlan> loaded = LoadPlan(absl::MakeConstSpan(data, size));
  if (!loaded.ok()) {
    // mdrun prints the message as its one error line.
    if (loaded.status().message().find('\n') != absl::string_view::npos)
      __builtin_trap();
    return 0;
  }
  for (int64_t worldSize : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{8}}) {
    if (!BindWorldSize(*loaded, worldSize).ok())
      continue;
    (void)PerRankMemory(*loaded, worldSize);
    (void)Summarize(*loaded, worldSize);
  }
  return 0;
}
