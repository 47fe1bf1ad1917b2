//===- MeshTest.cpp - group sizes and shard arithmetic of Mesh.h ----------===//
//
// Mesh.h is the arithmetic the compiler and the runtime share, so its
// properties are tested over many sizes rather than a few examples: shards
// tile the padded range, padding is less than one element per part,
// offsets grow, and a size that does not fit is refused instead of wrapping.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/Mesh.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>

#include "gtest/gtest.h"

namespace md::mesh {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

// Usable where the compiler needs it: in constant expressions.
static_assert(*shardNumel(37, 4) == 10);
static_assert(*paddedNumel(37, 4) == 40);
static_assert(groupSizes(8, 2)->replicate == 4);

/// Checks every property of the layout of `numel` over `parts`.
void checkLayout(int64_t numel, int64_t parts) {
  SCOPED_TRACE(testing::Message() << "numel " << numel << ", parts " << parts);
  std::optional<ShardLayout> layout = ShardLayout::of(numel, parts);
  ASSERT_TRUE(layout.has_value());
  const int64_t shard = layout->shardNumel();
  EXPECT_EQ(shardNumel(numel, parts), shard);
  // ceil: the smallest shard whose parts cover the data.
  using Wide = __int128; // products that may not fit in int64_t
  EXPECT_TRUE(Wide(shard) * parts >= numel);
  EXPECT_TRUE(numel == 0 ? shard == 0 : Wide(shard - 1) * parts < numel);
  EXPECT_TRUE(Wide(layout->paddedNumel()) == Wide(shard) * parts);
  EXPECT_EQ(paddedNumel(numel, parts), layout->paddedNumel());
  EXPECT_GE(layout->paddingNumel(), 0);
  EXPECT_LT(layout->paddingNumel(), parts);
  EXPECT_EQ(layout->numel() + layout->paddingNumel(), layout->paddedNumel());

  // The shards tile [0, padded): each starts where the previous ends, and
  // their data elements add up to numel, all before any padding.
  int64_t valid = 0, expectedOffset = 0;
  bool padding = false;
  for (int64_t i = 0; i < parts; ++i) {
    std::optional<int64_t> offset = layout->shardOffset(i);
    ASSERT_TRUE(offset.has_value());
    EXPECT_EQ(*offset, expectedOffset);
    expectedOffset += shard;
    int64_t v = layout->validNumel(i);
    EXPECT_GE(v, 0);
    EXPECT_LE(v, shard);
    EXPECT_EQ(v, std::max<int64_t>(0, std::min(shard, numel - *offset)));
    if (padding) {
      EXPECT_EQ(v, 0) << "data after padding in shard " << i;
    }
    padding = padding || v < shard;
    valid += v;
  }
  EXPECT_EQ(layout->shardOffset(parts), layout->paddedNumel());
  EXPECT_EQ(valid, numel);
  EXPECT_FALSE(layout->shardOffset(-1).has_value());
  EXPECT_FALSE(layout->shardOffset(parts + 1).has_value());
  EXPECT_EQ(layout->validNumel(-1), 0);
  EXPECT_EQ(layout->validNumel(parts), 0);
}

TEST(MeshTest, ShardsTileThePaddedBufferForSmallSizes) {
  for (int64_t numel = 0; numel <= 200; ++numel)
    for (int64_t parts = 1; parts <= 17; ++parts)
      checkLayout(numel, parts);
}

TEST(MeshTest, ShardsTileThePaddedBufferNearTheLargestSize) {
  for (int64_t numel : {kMax - 16, kMax - 7, kMax - 1, kMax})
    checkLayout(numel, 1);
  // Sizes whose padded layout still fits: multiples of parts near INT64_MAX.
  for (int64_t parts : {2, 3, 7, 8, 16, 17}) {
    int64_t largest = kMax / parts * parts;
    checkLayout(largest, parts);
    checkLayout(largest - 1, parts);
    checkLayout(largest - parts + 1, parts);
  }
}

TEST(MeshTest, ShardNumelNeverOverflows) {
  // numel + parts - 1 overflows here; the shard's size does not.
  EXPECT_EQ(shardNumel(kMax, 2), kMax / 2 + 1);
  EXPECT_EQ(shardNumel(kMax, 8), kMax / 8 + 1);
  EXPECT_EQ(shardNumel(kMax - 1, kMax), 1);
  EXPECT_EQ(shardNumel(kMax, kMax), 1);
  EXPECT_EQ(shardNumel(0, kMax), 0);
}

TEST(MeshTest, PaddedSizeBeyondInt64IsRefused) {
  // 8 * ceil(INT64_MAX / 8) = INT64_MAX + 1.
  EXPECT_FALSE(ShardLayout::of(kMax, 8).has_value());
  EXPECT_FALSE(paddedNumel(kMax, 8).has_value());
  EXPECT_FALSE(ShardLayout::of(kMax, 2).has_value());
  EXPECT_TRUE(ShardLayout::of(kMax - 1, 3).has_value()); // 3 divides it
  EXPECT_FALSE(ShardLayout::of(kMax, 3).has_value());
  // Every size from the largest that fits upwards, for several parts.
  for (int64_t parts = 2; parts <= 17; ++parts) {
    int64_t fits = kMax / parts * parts;
    EXPECT_TRUE(ShardLayout::of(fits, parts).has_value()) << parts;
    for (int64_t above = 1; above <= kMax - fits; ++above)
      EXPECT_FALSE(ShardLayout::of(fits + above, parts).has_value())
          << fits + above << " over " << parts;
  }
}

TEST(MeshTest, BadArgumentsAreRefused) {
  EXPECT_FALSE(shardNumel(-1, 4).has_value());
  EXPECT_FALSE(shardNumel(10, 0).has_value());
  EXPECT_FALSE(shardNumel(10, -2).has_value());
  EXPECT_FALSE(ShardLayout::of(-1, 1).has_value());
  EXPECT_FALSE(ShardLayout::of(1, 0).has_value());
}

TEST(MeshTest, GroupSizesOfAOneDimensionalMesh) {
  for (int64_t w = 1; w <= 64; ++w) {
    std::optional<GroupSizes> sizes = groupSizes(w);
    ASSERT_TRUE(sizes.has_value());
    EXPECT_EQ(sizes->of(GroupKind::world), w);
    EXPECT_EQ(sizes->of(GroupKind::shard), w);
    EXPECT_EQ(sizes->of(GroupKind::replicate), 1);
  }
}

TEST(MeshTest, GroupSizesOfAHybridMesh) {
  for (int64_t w = 1; w <= 64; ++w) {
    for (int64_t s = 1; s <= 17; ++s) {
      std::optional<GroupSizes> sizes = groupSizes(w, s);
      ASSERT_EQ(sizes.has_value(), w % s == 0) << w << " " << s;
      if (!sizes)
        continue;
      EXPECT_EQ(sizes->world, w);
      EXPECT_EQ(sizes->shard, s);
      EXPECT_EQ(sizes->replicate * sizes->shard, sizes->world);
    }
  }
  EXPECT_FALSE(groupSizes(0).has_value());
  EXPECT_FALSE(groupSizes(-4, 2).has_value());
  EXPECT_FALSE(groupSizes(8, -2).has_value());
}

TEST(MeshTest, StaticGroupSizesAgreeWithBoundOnes) {
  const GroupKind kinds[] = {GroupKind::world, GroupKind::shard,
                             GroupKind::replicate};
  for (int64_t w = 1; w <= 32; ++w)
    for (int64_t s = 0; s <= 9; ++s) {
      std::optional<GroupSizes> sizes = groupSizes(w, s);
      std::optional<int64_t> hybrid =
          s == 0 ? std::nullopt : std::optional<int64_t>(s);
      for (GroupKind kind : kinds) {
        std::optional<int64_t> known = staticGroupSize(kind, w, hybrid);
        if (sizes) {
          EXPECT_EQ(known, sizes->of(kind));
        } else if (kind == GroupKind::replicate) {
          EXPECT_FALSE(known.has_value()) << w << " " << s;
        }
      }
    }
}

TEST(MeshTest, StaticGroupSizesWithoutAWorldSize) {
  // 1-D: only the replicate group (one rank) is known.
  EXPECT_EQ(staticGroupSize(GroupKind::world, std::nullopt, std::nullopt),
            std::nullopt);
  EXPECT_EQ(staticGroupSize(GroupKind::shard, std::nullopt, std::nullopt),
            std::nullopt);
  EXPECT_EQ(staticGroupSize(GroupKind::replicate, std::nullopt, std::nullopt),
            1);
  // Hybrid: the shard group is known, the replicate group is not.
  EXPECT_EQ(staticGroupSize(GroupKind::shard, std::nullopt, 4), 4);
  EXPECT_EQ(staticGroupSize(GroupKind::replicate, std::nullopt, 4),
            std::nullopt);
  // Known but not a mesh: the world and the shard group stay what they are.
  EXPECT_EQ(staticGroupSize(GroupKind::world, 6, 4), 6);
  EXPECT_EQ(staticGroupSize(GroupKind::shard, 6, 4), 4);
  EXPECT_EQ(staticGroupSize(GroupKind::replicate, 6, 4), std::nullopt);
  EXPECT_EQ(staticGroupSize(GroupKind::world, 0, std::nullopt), std::nullopt);
  EXPECT_EQ(staticGroupSize(GroupKind::shard, 8, 0), std::nullopt);
}

} // namespace
} // namespace md::mesh
