//===- CheckpointLayout.cpp - where a plan's state lies in a checkpoint ---===//
//
// Logical tensors of a plan's state, the element ranges ranks hold and
// write, and the pieces meta.json lists (CheckpointLayout.h).
//
//===----------------------------------------------------------------------===//

#include "runtime/exec/CheckpointLayout.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "runtime/exec/Checkpoint.h"
#include "runtime/exec/PlanAccess.h"

namespace md::runtime {

using plan_access::count;
using plan_access::str;

bool IsCheckpointState(const fb::Buffer &b) {
  return b.role() != fb::StateRole::None && b.role() != fb::StateRole::GradAcc;
}

bool HoldsParameters(const fb::Buffer &b) {
  return b.unit() >= 0 && (b.role() == fb::StateRole::Master ||
                           b.role() == fb::StateRole::Params ||
                           b.role() == fb::StateRole::Frozen);
}

int64_t ShapeElements(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

std::vector<StateRun> StateRuns(const fb::Plan &plan, int32_t x) {
  const fb::Buffer &b = *plan.buffers()->Get(x);
  std::vector<StateRun> runs;
  if (!IsCheckpointState(b))
    return runs;
  const std::string role = plan::StateRoleName(b.role());
  if (b.unit() >= 0 && b.role() != fb::StateRole::Buffer) {
    // A unit's flat buffer: its parameters at their offsets (a unit holds
    // trainable or frozen ones, never both; a frozen one at offset -1 is in
    // no buffer).
    for (uint32_t p = 0; p < count(plan.params()); ++p) {
      const fb::Param *param = plan.params()->Get(p);
      if (param->unit() != b.unit() || param->offset() < 0)
        continue;
      StateRun r;
      r.tensor = absl::StrCat(role, "/", str(param->name()));
      for (uint32_t d = 0; d < count(param->shape()); ++d)
        r.shape.push_back(param->shape()->Get(d));
      r.flatStart = param->offset();
      r.count = ShapeElements(r.shape);
      runs.push_back(std::move(r));
    }
    return runs;
  }
  StateRun r;
  r.tensor = absl::StrCat(role, "/", str(b.name()));
  if (b.size_kind() == fb::SizeKind::Full) {
    for (uint32_t d = 0; d < count(b.shape()); ++d)
      r.shape.push_back(b.shape()->Get(d));
  } else {
    r.shape.push_back(b.numel());
  }
  r.count = b.numel();
  runs.push_back(std::move(r));
  return runs;
}

HeldRange RankRange(const fb::Buffer &b, const plan::WorldBinding &world,
                    int64_t rank) {
  HeldRange h;
  h.elements = world.elements(b);
  if (b.size_kind() == fb::SizeKind::Full) {
    h.valid = h.elements;
    h.writes = rank == 0;
    return h;
  }
  // Mesh.h: shard groups are blocks of S consecutive ranks, replicate
  // groups take the same position in every block.
  const int64_t s = world.shardGroupSize;
  int64_t index = rank, other = 0;
  switch (b.group()) {
  case fb::Group::Shard:
    index = rank % s;
    other = rank / s;
    break;
  case fb::Group::Replicate:
    index = rank / s;
    other = rank % s;
    break;
  default:
    break;
  }
  h.begin = index * h.elements;
  h.valid = std::clamp<int64_t>(b.numel() - h.begin, 0, h.elements);
  h.writes = other == 0;
  return h;
}

std::string StateFileName(const fb::Plan &plan, int32_t x) {
  std::string name = str(plan.buffers()->Get(x)->name());
  return name.empty() ? absl::StrCat("buffer.", x) : name;
}

std::vector<TensorLayout> ShardedLayout(const fb::Plan &plan,
                                        const plan::WorldBinding &world) {
  std::map<std::string, TensorLayout> tensors;
  std::map<std::string, int32_t> owner;
  for (uint32_t i = 0; i < count(plan.buffers()); ++i) {
    int32_t x = static_cast<int32_t>(i);
    const fb::Buffer &b = *plan.buffers()->Get(x);
    std::vector<StateRun> runs = StateRuns(plan, x);
    for (const StateRun &run : runs) {
      // Two buffers of one role and unit would hold the same tensor: the
      // first one's pieces describe it.
      if (!owner.emplace(run.tensor, x).second)
        continue;
      TensorLayout &t = tensors[run.tensor];
      t.name = run.tensor;
      t.dtype = SafetensorsDType(b.dtype());
      t.shape = run.shape;
      for (int64_t r = 0; r < world.worldSize; ++r) {
        HeldRange h = RankRange(b, world, r);
        if (!h.writes)
          continue;
        int64_t lo = std::max(h.begin, run.flatStart);
        int64_t hi = std::min(h.begin + h.valid, run.flatStart + run.count);
        if (lo >= hi)
          continue;
        TensorPiece piece;
        piece.rank = r;
        piece.fileTensor = StateFileName(plan, x);
        piece.offset = lo - h.begin;
        piece.start = run.tensorStart + (lo - run.flatStart);
        piece.count = hi - lo;
        t.pieces.push_back(std::move(piece));
      }
    }
  }
  std::vector<TensorLayout> out;
  for (auto &[name, t] : tensors) {
    std::sort(t.pieces.begin(), t.pieces.end(),
              [](const TensorPiece &a, const TensorPiece &b) {
                return a.start < b.start;
              });
    out.push_back(std::move(t));
  }
  return out;
}

} // namespace md::runtime
