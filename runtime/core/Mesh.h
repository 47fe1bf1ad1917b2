//===- Mesh.h - group sizes and shard arithmetic of the mesh ----*- C++ -*-===//
//
// The one place md computes how many ranks a group has and how a flat buffer
// is split into shards over them. The compiler (dialect verifiers, memory
// analysis, bucketing) and the runtime (plan binding, arena layout, executor,
// comms) all call into it, so the two sides cannot disagree on a shard's size.
// It includes nothing but the standard library: the dialect and the passes
// include it without linking the runtime.
//
// The mesh is 2-D: world = replicate x shard. With hybrid sharding the shard
// group is a block of S ranks and the replicate group the W / S ranks at the
// same position in every block; without it the shard group is the world and
// every replicate group a single rank.
//
// A flat buffer of n elements over a group of p ranks is padded to
// p * ceil(n / p) elements and split into p equal shards; shard i covers
// [i * ceil(n / p), (i + 1) * ceil(n / p)) of the padded buffer, and the
// elements at n and beyond are padding (fewer than p of them). The shard's
// size never overflows; the padded size can (n near INT64_MAX), so the
// layout is only made when it fits, and callers handle the refusal.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_CORE_MESH_H
#define MD_RUNTIME_CORE_MESH_H

#include <algorithm>
#include <cstdint>
#include <optional>

namespace md::mesh {

/// The groups of the mesh, numbered like the dialect's Group, the plan's
/// fb::Group and the runtime's GroupKind.
enum class GroupKind : uint8_t { world = 0, shard = 1, replicate = 2 };

/// The number of ranks in each group of a mesh.
struct GroupSizes {
  int64_t world = 1;
  int64_t shard = 1;
  int64_t replicate = 1;

  constexpr int64_t of(GroupKind kind) const {
    switch (kind) {
    case GroupKind::world:
      return world;
    case GroupKind::shard:
      return shard;
    case GroupKind::replicate:
      return replicate;
    }
    return world;
  }
};

/// The group sizes at world size `worldSize` with a hybrid shard group of
/// `hybridShardSize` ranks (0: no hybrid group, the shard group is the
/// world). Nothing for a world size below 1, a negative hybrid group, or a
/// hybrid group that does not divide the world.
constexpr std::optional<GroupSizes> groupSizes(int64_t worldSize,
                                               int64_t hybridShardSize = 0) {
  if (worldSize < 1 || hybridShardSize < 0)
    return std::nullopt;
  if (hybridShardSize == 0)
    return GroupSizes{worldSize, worldSize, 1};
  if (worldSize % hybridShardSize != 0)
    return std::nullopt;
  return GroupSizes{worldSize, hybridShardSize, worldSize / hybridShardSize};
}

/// The size of group `kind` when the world size may not be known yet (the
/// compiler before W is fixed): what follows from what is known. The world
/// group is W and the shard group of a hybrid mesh its `hybridShardSize`
/// whether or not the other is known; the replicate group is one rank on a
/// 1-D mesh and W / hybridShardSize on a hybrid one where that divides.
/// Nothing when it depends on an unknown W, when it does not divide, or for
/// a size below 1.
constexpr std::optional<int64_t>
staticGroupSize(GroupKind kind, std::optional<int64_t> worldSize,
                std::optional<int64_t> hybridShardSize) {
  if ((worldSize && *worldSize < 1) ||
      (hybridShardSize && *hybridShardSize < 1))
    return std::nullopt;
  switch (kind) {
  case GroupKind::world:
    return worldSize;
  case GroupKind::shard:
    return hybridShardSize ? hybridShardSize : worldSize;
  case GroupKind::replicate:
    if (!hybridShardSize)
      return 1;
    if (!worldSize || *worldSize % *hybridShardSize != 0)
      return std::nullopt;
    return *worldSize / *hybridShardSize;
  }
  return std::nullopt;
}

/// ceil(numel / parts): the elements of each shard of a flat buffer of
/// `numel` elements split over `parts` ranks, padding included. Never
/// overflows. Nothing for a negative `numel` or `parts` below 1.
constexpr std::optional<int64_t> shardNumel(int64_t numel, int64_t parts) {
  if (numel < 0 || parts < 1)
    return std::nullopt;
  return numel / parts + (numel % parts != 0 ? 1 : 0);
}

/// A flat buffer of `numel()` elements split into `parts()` equal shards of
/// ceil(numel / parts) elements; the last shards hold the padding. Made only
/// when the padded buffer's size fits in int64_t, so every accessor is
/// exact.
class ShardLayout {
public:
  /// The layout, or nothing for a negative `numel`, `parts` below 1, or a
  /// padded size parts * ceil(numel / parts) beyond INT64_MAX.
  static constexpr std::optional<ShardLayout> of(int64_t numel, int64_t parts);

  constexpr int64_t numel() const { return numel_; }
  constexpr int64_t parts() const { return parts_; }
  /// ceil(numel / parts).
  constexpr int64_t shardNumel() const { return shard_; }
  /// parts * ceil(numel / parts).
  constexpr int64_t paddedNumel() const { return shard_ * parts_; }
  /// The pad elements after the data: fewer than `parts`.
  constexpr int64_t paddingNumel() const { return paddedNumel() - numel_; }
  /// The first element of shard `index` in the padded buffer; `index` may be
  /// `parts` (the end). Nothing outside [0, parts].
  constexpr std::optional<int64_t> shardOffset(int64_t index) const {
    if (index < 0 || index > parts_)
      return std::nullopt;
    return shard_ * index;
  }
  /// Elements of shard `index` that are data rather than padding; 0 for an
  /// index outside [0, parts).
  constexpr int64_t validNumel(int64_t index) const {
    if (index < 0 || index >= parts_)
      return 0;
    return std::clamp<int64_t>(numel_ - shard_ * index, 0, shard_);
  }

private:
  constexpr ShardLayout(int64_t numel, int64_t parts, int64_t shard)
      : numel_(numel), parts_(parts), shard_(shard) {}

  int64_t numel_;
  int64_t parts_;
  int64_t shard_;
};

// Defined once ShardLayout is complete, so that it is usable in constant
// expressions.
constexpr std::optional<ShardLayout> ShardLayout::of(int64_t numel,
                                                     int64_t parts) {
  std::optional<int64_t> shard = mesh::shardNumel(numel, parts);
  if (!shard || *shard > INT64_MAX / parts)
    return std::nullopt;
  return ShardLayout(numel, parts, *shard);
}

/// parts * ceil(numel / parts), or nothing where ShardLayout::of refuses.
constexpr std::optional<int64_t> paddedNumel(int64_t numel, int64_t parts) {
  std::optional<ShardLayout> layout = ShardLayout::of(numel, parts);
  if (!layout)
    return std::nullopt;
  return layout->paddedNumel();
}

} // namespace md::mesh

#endif // MD_RUNTIME_CORE_MESH_H
