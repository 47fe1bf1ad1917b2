//===- CheckpointLayout.h - a plan's state in a checkpoint -*- C++ -*-===//
//
// A sharded checkpoint stores the state a future step needs (master
// weights, working parameters, optimizer moments, model buffers; never the
// gradient accumulator, which every step starts afresh) as logical tensors
// that do not depend on the plan: `master/fc1.weight`,
// `exp_avg/h.0.attn.q.weight` at the parameter's global shape, `buffer/<name>`
// for a state outside the units. A plan packs them into flat unit buffers and
// splits those over a group; this file maps between the two, for the writer
// (which rank writes which element range of which tensor, so that meta.json can
// list every tensor's pieces) and for the loader (which ranges a rank must read
// to fill its own buffers at another world size or under another plan).
//
// Ranks that hold the same bytes (a full buffer on every rank, a shard
// replicated across the replicate group) write them once: a full buffer from
// rank 0, a shard from the ranks at index 0 of the group it is not split
// over.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_EXEC_CHECKPOINTLAYOUT_H
#define MD_RUNTIME_EXEC_CHECKPOINTLAYOUT_H

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/plan/Schema.h"
#include "runtime/plan/World.h"

namespace md::runtime {

/// Whether plan buffer `b` is state a checkpoint keeps: persistent and not
/// a gradient accumulator.
bool IsCheckpointState(const fb::Buffer &b);

/// Whether plan buffer `b` holds a unit's parameters: its master weights,
/// their working copy in the param dtype, or its frozen parameters.
bool HoldsParameters(const fb::Buffer &b);

/// A run of a logical tensor inside a buffer's flat elements (global
/// positions, before any sharding): tensor elements [tensorStart,
/// tensorStart + count) are the buffer's flat elements [flatStart,
/// flatStart + count).
struct StateRun {
  std::string tensor;
  std::vector<int64_t> shape; // the tensor's global shape
  int64_t flatStart = 0, tensorStart = 0, count = 0;
};

/// The logical tensors buffer `x` of `plan` holds (empty unless
/// IsCheckpointState).
std::vector<StateRun> StateRuns(const fb::Plan &plan, int32_t x);

/// The flat elements of a buffer that rank `rank` holds at `world`:
/// [begin, begin + elements) of which the first `valid` are data (the rest
/// is a shard's padding), and whether this rank writes them to a checkpoint.
struct HeldRange {
  int64_t begin = 0, elements = 0, valid = 0;
  bool writes = false;
};
HeldRange RankRange(const fb::Buffer &b, const plan::WorldBinding &world,
                    int64_t rank);

/// The name of buffer `x` in a rank's checkpoint file.
std::string StateFileName(const fb::Plan &plan, int32_t x);

/// A piece of a logical tensor in a rank's file: tensor elements [start,
/// start + count) are elements [offset, offset + count) of file tensor
/// `fileTensor` in the file of rank `rank`.
struct TensorPiece {
  int64_t rank = 0;
  std::string fileTensor;
  int64_t offset = 0, start = 0, count = 0;
};
struct TensorLayout {
  std::string name;
  std::string dtype; // safetensors dtype
  std::vector<int64_t> shape;
  std::vector<TensorPiece> pieces; // by start; together they cover it once
};

/// Every logical tensor of `plan`'s state at `world` and its pieces, by
/// name.
std::vector<TensorLayout> ShardedLayout(const fb::Plan &plan,
                                        const plan::WorldBinding &world);

/// The elements of a tensor of shape `shape`.
int64_t ShapeElements(const std::vector<int64_t> &shape);

} // namespace md::runtime

#endif // MD_RUNTIME_EXEC_CHECKPOINTLAYOUT_H
