//===- Summary.cpp - what a plan does, in numbers, at a world size ------===//

#include "runtime/plan/Summary.h"

#include <algorithm>
#include <initializer_list>
#include <limits>
#include <map>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "runtime/plan/VerifyInternal.h"

namespace md::plan {
namespace {

using detail::count;
using detail::str;

const char *const kCollectiveKinds[] = {"all_gather", "reduce_scatter",
                                        "all_reduce", "broadcast", "barrier"};

/// The opcodes whose floating-point operations are counted, in report order.
/// A matmul_gelu counts as the matmul it is (its row; the GELU is not a
/// GEMM-class operation), so that fusing leaves the report as it was.
const fb::Opcode kFlopOpcodes[] = {fb::Opcode::Matmul, fb::Opcode::MatmulGrad,
                                   fb::Opcode::CausalAttention,
                                   fb::Opcode::CausalAttentionGrad};

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

/// a * b and a + b of non-negative counts, saturating at INT64_MAX.
int64_t mulSat(int64_t a, int64_t b) {
  int64_t r = 0;
  return __builtin_mul_overflow(a, b, &r) ? kInt64Max : r;
}
int64_t addSat(int64_t a, int64_t b) {
  int64_t r = 0;
  return __builtin_add_overflow(a, b, &r) ? kInt64Max : r;
}
int64_t mulSat(std::initializer_list<int64_t> factors) {
  int64_t r = 1;
  for (int64_t f : factors)
    r = mulSat(r, f);
  return r;
}

/// The static shape of a full buffer.
std::vector<int64_t> shapeOf(const fb::Buffer &b) {
  std::vector<int64_t> shape;
  for (uint32_t d = 0; d < count(b.shape()); ++d)
    shape.push_back(b.shape()->Get(d));
  return shape;
}

int64_t saturate(__int128 v) {
  return v > std::numeric_limits<int64_t>::max()
             ? std::numeric_limits<int64_t>::max()
             : static_cast<int64_t>(v);
}

/// tally += volume * times, false on overflow.
bool addTimes(CollectiveTally &tally, const CollectiveVolume &volume,
              int64_t times) {
  int64_t bytes = 0, bus = 0;
  return !__builtin_add_overflow(tally.count, times, &tally.count) &&
         !__builtin_mul_overflow(volume.bytes, times, &bytes) &&
         !__builtin_add_overflow(tally.bytes, bytes, &tally.bytes) &&
         !__builtin_mul_overflow(volume.busBytes, times, &bus) &&
         !__builtin_add_overflow(tally.busBytes, bus, &tally.busBytes);
}

std::string quoted(absl::string_view s) { return absl::StrCat("\"", s, "\""); }

class Summarizer {
public:
  Summarizer(const fb::Plan &plan, const WorldBinding &world,
             PlanSummary &summary)
      : plan_(plan), world_(world), summary_(summary) {}

  /// Tallies the collectives of block `b` (run `times` times per step).
  absl::Status tallyStep(int32_t b, int64_t times, bool conditional) {
    const fb::Block *block = plan_.blocks()->Get(b);
    for (uint32_t i = 0; i < count(block->instructions()); ++i) {
      const fb::Instruction *inst = block->instructions()->Get(i);
      const OpcodeInfo &info = *GetOpcodeInfo(inst->opcode());
      if (info.is(kCollective)) {
        CollectiveVolume volume = CollectiveBytes(plan_, *inst, world_);
        if (conditional) {
          ++summary_.conditionalCollectives;
        } else {
          auto &tally = summary_.perStep[kindIndex(info.name)];
          if (!addTimes(tally, volume, times) ||
              !addTimes(summary_.perStepTotal, volume, times))
            return absl::InvalidArgumentError(absl::StrFormat(
                "collective bytes per step overflow 64 bits at world size %d",
                world_.worldSize));
        }
        int64_t bucket = info.bucketIndex() >= 0
                             ? inst->ints()->Get(info.bucketIndex())
                             : -1;
        BucketSummary &entry = buckets_[bucket];
        entry.id = bucket;
        ++entry.collectives;
        entry.bytes =
            saturate(static_cast<__int128>(entry.bytes) + volume.bytes);
        if (std::find(entry.kinds.begin(), entry.kinds.end(), info.name) ==
            entry.kinds.end())
          entry.kinds.push_back(info.name);
      }
      if (CountsFlops(inst->opcode())) {
        if (conditional) {
          ++summary_.conditionalFlopInstructions;
        } else {
          FlopTally &tally = summary_.flops[flopIndex(inst->opcode())];
          tally.count = addSat(tally.count, times);
          tally.flops = addSat(tally.flops,
                               mulSat(InstructionFlops(plan_, *inst), times));
        }
      }
      for (uint32_t k = 0; k < count(inst->blocks()); ++k) {
        bool micro = inst->opcode() == fb::Opcode::MicroSteps;
        int64_t inner = micro ? times * (world_.accumulationSteps - 1) : times;
        MD_RETURN_IF_ERROR(
            tallyStep(inst->blocks()->Get(k), inner, conditional || !micro));
      }
    }
    return absl::OkStatus();
  }

  /// The actions of block `b`, for the hooks summary.
  void describe(int32_t b, std::vector<std::string> &actions,
                bool &communicates) {
    const fb::Block *block = plan_.blocks()->Get(b);
    for (uint32_t i = 0; i < count(block->instructions()); ++i) {
      const fb::Instruction *inst = block->instructions()->Get(i);
      const OpcodeInfo &info = *GetOpcodeInfo(inst->opcode());
      communicates = communicates || info.is(kCollective);
      std::string action;
      switch (inst->opcode()) {
      case fb::Opcode::Log:
      case fb::Opcode::Print:
        action =
            absl::StrCat(info.name, " ", quoted(str(inst->strings()->Get(0))));
        break;
      case fb::Opcode::Evaluate: {
        const fb::DataSpec *data = plan_.datasets()->Get(inst->ints()->Get(0));
        action =
            absl::StrCat("evaluate ", data->kind() == fb::DataKind::Synthetic
                                          ? std::string("synthetic")
                                          : quoted(str(data->path())));
        if (inst->ints()->Get(1) > 0)
          absl::StrAppend(&action, " (", inst->ints()->Get(1), " batches)");
        break;
      }
      case fb::Opcode::Save:
        action = absl::StrCat(
            "save ", static_cast<fb::CheckpointFormat>(inst->ints()->Get(0)) ==
                             fb::CheckpointFormat::Full
                         ? "full"
                         : "sharded");
        if (count(inst->strings()) == 1)
          absl::StrAppend(&action, " ", quoted(str(inst->strings()->Get(0))));
        if (count(inst->ints()) > 1)
          absl::StrAppend(&action, " (keep ", inst->ints()->Get(1), ")");
        break;
      case fb::Opcode::Exit:
        action = count(inst->ints()) > 0 && inst->ints()->Get(0) != 0 ? "fail"
                                                                      : "exit";
        if (count(inst->strings()) == 1)
          absl::StrAppend(&action, " ", quoted(str(inst->strings()->Get(0))));
        break;
      case fb::Opcode::If:
      case fb::Opcode::For: {
        std::vector<std::string> inner;
        for (uint32_t k = 0; k < count(inst->blocks()); ++k) {
          if (k == 1)
            inner.push_back("else:");
          describe(inst->blocks()->Get(k), inner, communicates);
        }
        action =
            absl::StrCat(info.name, " { ", absl::StrJoin(inner, ", "), " }");
        break;
      }
      case fb::Opcode::Every: {
        // The hooks block's own everys are hooks of their own (below); a
        // nested one is an action of the block it is in.
        if (b == plan_.hooks_block())
          continue;
        auto unit = static_cast<fb::PeriodUnit>(inst->ints()->Get(1));
        communicates = communicates || unit != fb::PeriodUnit::Steps;
        std::vector<std::string> inner;
        describe(inst->blocks()->Get(0), inner, communicates);
        action =
            absl::StrCat("every ", inst->ints()->Get(0), " ",
                         absl::AsciiStrToLower(fb::EnumNamePeriodUnit(unit)),
                         " { ", absl::StrJoin(inner, ", "), " }");
        break;
      }
      case fb::Opcode::AllGather:
      case fb::Opcode::ReduceScatter:
      case fb::Opcode::AllReduce:
      case fb::Opcode::Broadcast:
      case fb::Opcode::Barrier:
        action = info.name;
        break;
      default:
        continue;
      }
      if (inst->rank0_only())
        absl::StrAppend(&action, " (rank 0)");
      actions.push_back(std::move(action));
    }
  }

  std::vector<BucketSummary> takeBuckets() {
    std::vector<BucketSummary> out;
    for (auto &[id, bucket] : buckets_)
      out.push_back(std::move(bucket));
    return out;
  }

private:
  static size_t flopIndex(fb::Opcode opcode) {
    if (opcode == fb::Opcode::MatmulGelu)
      opcode = fb::Opcode::Matmul;
    for (size_t i = 0; i < std::size(kFlopOpcodes); ++i)
      if (opcode == kFlopOpcodes[i])
        return i;
    return 0;
  }

  static size_t kindIndex(absl::string_view kind) {
    for (size_t i = 0; i < std::size(kCollectiveKinds); ++i)
      if (kind == kCollectiveKinds[i])
        return i;
    return 0;
  }

  const fb::Plan &plan_;
  const WorldBinding &world_;
  PlanSummary &summary_;
  std::map<int64_t, BucketSummary> buckets_;
};

} // namespace

bool CountsFlops(fb::Opcode opcode) {
  return opcode == fb::Opcode::MatmulGelu ||
         std::find(std::begin(kFlopOpcodes), std::end(kFlopOpcodes), opcode) !=
         std::end(kFlopOpcodes);
}

int64_t InstructionFlops(const fb::Plan &plan, const fb::Instruction &inst) {
  auto buffer = [&](uint32_t k) -> const fb::Buffer & {
    return *plan.buffers()->Get(inst.inputs()->Get(k));
  };
  switch (inst.opcode()) {
  case fb::Opcode::Matmul:
  case fb::Opcode::MatmulGelu:
  case fb::Opcode::MatmulGrad: {
    // matmul: in [a, b, [bias]]; matmul_grad: in [dy, a, b] out [da, db,
    // [dbias]]. a is [batch..., m, k] ([batch..., k, m] transposed), b
    // [k, n] or [batch..., k, n] ([n, k] transposed).
    bool grad = inst.opcode() == fb::Opcode::MatmulGrad;
    std::vector<int64_t> a = shapeOf(buffer(grad ? 1 : 0)),
                         b = shapeOf(buffer(grad ? 2 : 1));
    if (a.size() < 2 || b.size() < 2)
      return 0; // not a plan that loaded
    bool ta = inst.ints()->Get(0) != 0, tb = inst.ints()->Get(1) != 0;
    int64_t m = ta ? a[a.size() - 1] : a[a.size() - 2];
    int64_t k = ta ? a[a.size() - 2] : a[a.size() - 1];
    int64_t n = tb ? b[b.size() - 2] : b[b.size() - 1];
    int64_t batch = 1;
    for (size_t d = 0; d + 2 < a.size(); ++d)
      batch = mulSat(batch, a[d]);
    int64_t product = mulSat({grad ? 4 : 2, batch, m, n, k});
    bool bias = grad ? count(inst.outputs()) == 3 : count(inst.inputs()) == 3;
    return bias ? addSat(product, mulSat({batch, m, n})) : product;
  }
  case fb::Opcode::CausalAttention:
  case fb::Opcode::CausalAttentionGrad: {
    // q is [B, T, C]: per (batch, head), T x T x C/heads products; with a
    // window W < T, T x W of them.
    bool grad = inst.opcode() == fb::Opcode::CausalAttentionGrad;
    std::vector<int64_t> q = shapeOf(buffer(grad ? 1 : 0));
    if (q.size() != 3)
      return 0;
    int64_t keys = q[1];
    if (count(inst.ints()) > 1 && inst.ints()->Get(1) > 0)
      keys = std::min(keys, inst.ints()->Get(1));
    return mulSat({grad ? 10 : 4, q[0], q[1], keys, q[2]});
  }
  default:
    return 0;
  }
}

CollectiveVolume CollectiveBytes(const fb::Plan &plan,
                                 const fb::Instruction &inst,
                                 const WorldBinding &world) {
  CollectiveVolume volume;
  if (inst.opcode() == fb::Opcode::Barrier || count(inst.inputs()) == 0)
    return volume;
  auto group = static_cast<fb::Group>(inst.ints()->Get(0));
  int64_t n = world.groupSize(group);
  const fb::Buffer &in = *plan.buffers()->Get(inst.inputs()->Get(0));
  const fb::Buffer &out = *plan.buffers()->Get(inst.outputs()->Get(0));
  __int128 bytes = 0, bus = 0;
  switch (inst.opcode()) {
  case fb::Opcode::AllGather:
    bytes = world.bytes(out);
    bus = bytes * (n - 1) / n;
    break;
  case fb::Opcode::ReduceScatter:
    bytes = world.bytes(in);
    bus = bytes * (n - 1) / n;
    break;
  case fb::Opcode::AllReduce:
    bytes = world.bytes(in);
    bus = bytes * 2 * (n - 1) / n;
    break;
  case fb::Opcode::Broadcast:
    bytes = world.bytes(in);
    bus = n > 1 ? bytes : 0;
    break;
  default:
    break;
  }
  volume.bytes = saturate(bytes);
  volume.busBytes = saturate(bus);
  return volume;
}

absl::StatusOr<PlanSummary> Summarize(const LoadedPlan &loaded,
                                      int64_t worldSize) {
  const fb::Plan &plan = loaded.plan();
  PlanSummary summary;
  absl::StatusOr<WorldBinding> world = BindWorldSize(loaded, worldSize);
  if (!world.ok())
    return world.status();
  summary.world = *world;
  absl::StatusOr<MemoryReport> memory = PerRankMemory(loaded, worldSize);
  if (!memory.ok())
    return memory.status();
  summary.memory = *memory;

  for (uint32_t u = 0; u < count(plan.units()); ++u) {
    const fb::Unit *unit = plan.units()->Get(u);
    summary.units.push_back(
        {unit->id(), std::string(str(unit->name())), unit->numel(), 0});
  }
  for (uint32_t i = 0; i < count(plan.params()); ++i) {
    const fb::Param *param = plan.params()->Get(i);
    int64_t numel = 1;
    for (uint32_t d = 0; d < count(param->shape()); ++d)
      numel *= param->shape()->Get(d); // verified not to overflow
    ++summary.paramCount;
    ++summary.units[param->unit()].params;
    int64_t bytes =
        numel * DTypeSize(param->dtype()); // verified not to overflow
    if (__builtin_add_overflow(summary.paramElements, numel,
                               &summary.paramElements) ||
        __builtin_add_overflow(summary.paramBytes, bytes,
                               &summary.paramBytes) ||
        (param->trainable() &&
         __builtin_add_overflow(summary.trainableElements, numel,
                                &summary.trainableElements)))
      return absl::InvalidArgumentError(
          "parameter element counts overflow 64 bits");
  }
  for (uint32_t x = 0; x < count(plan.buffers()); ++x) {
    if (plan.buffers()->Get(x)->role() == fb::StateRole::None)
      ++summary.transientBuffers;
    else
      ++summary.persistentBuffers;
  }

  for (const char *kind : kCollectiveKinds)
    summary.perStep.push_back({kind, 0, 0, 0});
  summary.perStepTotal.kind = "total";
  for (fb::Opcode opcode : kFlopOpcodes)
    summary.flops.push_back({GetOpcodeInfo(opcode)->name, 0, 0});
  Summarizer summarizer(plan, summary.world, summary);
  MD_RETURN_IF_ERROR(summarizer.tallyStep(plan.step_block(), 1, false));
  for (const FlopTally &tally : summary.flops)
    summary.flopsPerRank = addSat(summary.flopsPerRank, tally.flops);
  summary.flopsAllRanks = mulSat(summary.flopsPerRank, summary.world.worldSize);
  summary.buckets = summarizer.takeBuckets();

  // Instructions per tree.
  for (uint32_t b = 0; b < count(plan.blocks()); ++b) {
    int32_t root = static_cast<int32_t>(b);
    while (loaded.site(root).parentBlock != -1)
      root = loaded.site(root).parentBlock;
    int64_t n = count(plan.blocks()->Get(b)->instructions());
    (root == plan.step_block() ? summary.stepInstructions
                               : summary.hookInstructions) += n;
  }

  if (plan.hooks_block() != -1) {
    // What runs after every step outside an every, then each every.
    HookSummary everyStep;
    everyStep.unit = "steps";
    summarizer.describe(plan.hooks_block(), everyStep.actions,
                        everyStep.communicates);
    if (!everyStep.actions.empty())
      summary.hooks.push_back(std::move(everyStep));
    const fb::Block *hooks = plan.blocks()->Get(plan.hooks_block());
    for (uint32_t i = 0; i < count(hooks->instructions()); ++i) {
      const fb::Instruction *inst = hooks->instructions()->Get(i);
      if (inst->opcode() != fb::Opcode::Every)
        continue;
      HookSummary hook;
      hook.period = inst->ints()->Get(0);
      hook.unit = absl::AsciiStrToLower(fb::EnumNamePeriodUnit(
          static_cast<fb::PeriodUnit>(inst->ints()->Get(1))));
      summarizer.describe(inst->blocks()->Get(0), hook.actions,
                          hook.communicates);
      summary.hooks.push_back(std::move(hook));
    }
  }
  return summary;
}

} // namespace md::plan
