//===- World.h - group sizes and shard sizes at a world size ----*- C++ -*-===//
//
// The one place that turns a plan's W-symbolic sizes into numbers: the size
// of each process group at world size W, the elements of a `shard(n, group)`
// buffer (both by Mesh.h's arithmetic, which the compiler shares), and the
// accumulation steps the recipe implies. BindWorldSize (Loader.h) makes one
// after checking that the plan can run at W.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_PLAN_WORLD_H
#define MD_RUNTIME_PLAN_WORLD_H

#include <cstdint>

#include "runtime/core/Mesh.h"
#include "runtime/plan/Schema.h"
#include "runtime/plan/plan_generated.h"

namespace md::plan {

/// Elements of this rank's shard of a flat buffer of `numel` elements split
/// over `groupSize` ranks: ceil(numel / groupSize) (Mesh.h). A group of no
/// ranks (an unbound WorldBinding) gives the whole buffer rather than a
/// division by zero.
inline int64_t ShardElements(int64_t numel, int64_t groupSize) {
  return mesh::shardNumel(numel, groupSize).value_or(numel);
}

/// A plan bound to a world size.
struct WorldBinding {
  int64_t worldSize = 0;      // W
  int64_t shardGroupSize = 0; // |shard|: the hybrid shard group, else W
  int64_t replicateGroupSize =
      0; // |replicate|: W / shard group when hybrid, else 1
  int64_t accumulationSteps = 0; // A = global_batch / (micro_batch * W)

  /// The size of `group`; 0 for an unknown one (a plan not yet verified).
  int64_t groupSize(fb::Group group) const {
    if (group > fb::Group::MAX)
      return 0;
    return mesh::GroupSizes{worldSize, shardGroupSize, replicateGroupSize}.of(
        static_cast<mesh::GroupKind>(group));
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
