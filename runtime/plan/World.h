//===- World.h - group sizes and shard sizes at a world size ----*- C++ -*-===//
//
// The one place that turns a plan's W-symbolic sizes into numbers: the size
// of each process group at world size W, the elements of a `shard(n, group)`
// buffer, and the accumulation steps the recipe implies. BindWorldSize
// (Loader.h) makes one after checking that the plan can run at W.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_PLAN_WORLD_H
#define MD_RUNTIME_PLAN_WORLD_H

#include <cstdint>

#include "runtime/plan/Schema.h"
#include "runtime/plan/plan_generated.h"

namespace md::plan {

/// Elements of this rank's shard of a flat buffer of `numel` elements split
/// over `groupSize` ranks: ceil(numel / groupSize), without overflow. A
/// group of no ranks (an unbound WorldBinding) gives the whole buffer rather
/// than a division by zero.
inline int64_t ShardElements(int64_t numel, int64_t groupSize) {
  if (groupSize < 1)
    return numel;
  return numel / groupSize + (numel % groupSize != 0 ? 1 : 0);
}

/// A plan bound to a world size.
struct WorldBinding {
  int64_t worldSize = 0;      // W
  int64_t shardGroupSize = 0; // |shard|: the hybrid shard group, else W
  int64_t replicateGroupSize =
      0; // |replicate|: W / shard group when hybrid, else 1
  int64_t accumulationSteps = 0; // A = global_batch / (micro_batch * W)

  int64_t groupSize(fb::Group group) const {
    switch (group) {
    case fb::Group::World:
      return worldSize;
    case fb::Group::Shard:
      return shardGroupSize;
    case fb::Group::Replicate:
      return replicateGroupSize;
    }
    return 0;
  }

  /// Elements of `buffer` on one rank: numel for a full buffer, the shard's
  /// elements for a sharded one.
  int64_t elements(const fb::Buffer &buffer) const {
    if (buffer.size_kind() == fb::SizeKind::Shard)
      return ShardElements(buffer.numel(), groupSize(buffer.group()));
    return buffer.numel();
  }

  /// Bytes of `buffer` on one rank. Cannot overflow for a verified plan: the
  /// loader checks numel * dtype size, and a shard is never larger.
  int64_t bytes(const fb::Buffer &buffer) const {
    return elements(buffer) * DTypeSize(buffer.dtype());
  }
};

} // namespace md::plan

#endif // MD_RUNTIME_PLAN_WORLD_H
