//===- ShapeRulesTest.cpp - runtime/core/ShapeRules.h ---------------------===//
//
// The ops' shape rules that the dialect's verifiers, the plan loader's type
// rules, the frontend and the kernels' checks share: each result, and each
// problem with what it names.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/ShapeRules.h"

#include <limits>

#include "gtest/gtest.h"

namespace md::rules {
namespace {

constexpr int64_t D = kDynamic;

TEST(ShapeRules, BroadcastingAsNumpy) {
  Broadcast b = BroadcastShapes({4, 1, 3}, {5, 1});
  ASSERT_TRUE(b.ok);
  EXPECT_EQ(b.shape, Shape({4, 5, 3}));
  EXPECT_EQ(BroadcastShapes({}, {2, 3}).shape, Shape({2, 3}));
  b = BroadcastShapes({2, 3}, {4, 3});
  EXPECT_FALSE(b.ok);
  EXPECT_EQ(b.dim, 0u);
  EXPECT_EQ(b.a, 2);
  EXPECT_EQ(b.b, 4);
  // An unknown dim takes the known one, and matches anything.
  EXPECT_EQ(BroadcastShapes({D, 3}, {4, 3}).shape, Shape({4, 3}));
  EXPECT_EQ(BroadcastShapes({D}, {D}).shape, Shape({D}));
  EXPECT_TRUE(BroadcastsTo({3}, {4, 3}));
  EXPECT_TRUE(BroadcastsTo({1, 3}, {4, 3}));
  EXPECT_FALSE(BroadcastsTo({2, 3}, {4, 3}));
  EXPECT_FALSE(BroadcastsTo({5, 4, 3}, {4, 3}));
  EXPECT_TRUE(BroadcastsTo({D, 3}, {4, 3}));
}

TEST(ShapeRules, AxesAndReductions) {
  EXPECT_EQ(NormalizeAxis(-1, 3), 2);
  EXPECT_EQ(NormalizeAxis(2, 3), 2);
  EXPECT_FALSE(NormalizeAxis(3, 3));
  EXPECT_FALSE(NormalizeAxis(-4, 3));
  Reduction r = ReduceDims({2, 3, 4}, {0, -1}, false);
  ASSERT_EQ(r.problem, Reduction::Problem::none);
  EXPECT_EQ(r.shape, Shape({3}));
  EXPECT_EQ(r.reduced, std::vector<bool>({true, false, true}));
  EXPECT_EQ(ReduceDims({2, 3, 4}, {1}, true).shape, Shape({2, 1, 4}));
  EXPECT_EQ(ReduceDims({2, 3}, {}, false).problem, Reduction::Problem::empty);
  r = ReduceDims({2, 3}, {0, 5}, false);
  EXPECT_EQ(r.problem, Reduction::Problem::outOfRange);
  EXPECT_EQ(r.dim, 5);
  EXPECT_EQ(r.index, 1u);
  r = ReduceDims({2, 3}, {1, -1}, false); // the same dim spelled twice
  EXPECT_EQ(r.problem, Reduction::Problem::twice);
  EXPECT_EQ(r.dim, -1);
  EXPECT_EQ(r.index, 1u);
}

TEST(ShapeRules, MatmulLayouts) {
  Matmul m = MatmulShapes({8, 4, 3}, {3, 5}, false, false);
  ASSERT_EQ(m.problem, Matmul::Problem::none);
  EXPECT_EQ(m.shape, Shape({8, 4, 5}));
  EXPECT_EQ(m.batch, 8);
  EXPECT_EQ(m.m, 4);
  EXPECT_EQ(m.n, 5);
  EXPECT_EQ(m.k, 3);
  EXPECT_FALSE(m.batchedB);
  // Transposes: a [K, M], b [N, K].
  m = MatmulShapes({3, 4}, {5, 3}, true, true);
  ASSERT_EQ(m.problem, Matmul::Problem::none);
  EXPECT_EQ(m.shape, Shape({4, 5}));
  // A batched b needs a's batch dims.
  m = MatmulShapes({2, 4, 3}, {2, 3, 5}, false, false);
  EXPECT_TRUE(m.batchedB);
  EXPECT_EQ(m.shape, Shape({2, 4, 5}));
  EXPECT_EQ(MatmulShapes({2, 4, 3}, {7, 3, 5}, false, false).problem,
            Matmul::Problem::batch);
  EXPECT_EQ(MatmulShapes({4}, {4, 5}, false, false).problem,
            Matmul::Problem::aRank);
  EXPECT_EQ(MatmulShapes({2, 2, 4, 3}, {2, 3, 5}, false, false).problem,
            Matmul::Problem::bRank);
  m = MatmulShapes({4, 3}, {2, 5}, false, false);
  EXPECT_EQ(m.problem, Matmul::Problem::contraction);
  EXPECT_EQ(m.ka, 3);
  EXPECT_EQ(m.kb, 2);
  // Unknown dims are compatible, and stay unknown.
  m = MatmulShapes({D, 4, D}, {3, 5}, false, false);
  ASSERT_EQ(m.problem, Matmul::Problem::none);
  EXPECT_EQ(m.shape, Shape({D, 4, 5}));
  EXPECT_EQ(m.batch, D);
  EXPECT_EQ(m.k, 3);
}

TEST(ShapeRules, AttentionAndTheRest) {
  Attention a = AttentionShape({2, 16, 64}, 4);
  ASSERT_EQ(a.problem, Attention::Problem::none);
  EXPECT_EQ(a.headDim, 16);
  EXPECT_EQ(AttentionShape({16, 64}, 4).problem, Attention::Problem::rank);
  EXPECT_EQ(AttentionShape({2, 16, 64}, 0).problem, Attention::Problem::heads);
  a = AttentionShape({2, 16, 66}, 4);
  EXPECT_EQ(a.problem, Attention::Problem::indivisible);
  EXPECT_EQ(a.channels, 66);
  EXPECT_EQ(AttentionShape({2, 16, D}, 4).problem, Attention::Problem::none);
  EXPECT_EQ(LastDimVector({2, 3, 7}), Shape({7}));
  EXPECT_EQ(CrossEntropyTargets({8, 64, 512}), Shape({8, 64}));
  EXPECT_EQ(ElementCount({}), 1);
  EXPECT_EQ(ElementCount({2, 3, 4}), 24);
  EXPECT_FALSE(ElementCount({int64_t(1) << 40, int64_t(1) << 40}));
  EXPECT_FALSE(ElementCount({2, D}));
}

TEST(ShapeRules, Slices) {
  Slice s = SliceShape({4, 5, 6}, 1, 1, 2, 2);
  ASSERT_EQ(s.problem, Slice::Problem::none);
  EXPECT_EQ(s.shape, Shape({4, 2, 6}));
  // Ending on the dim's last element fits; every axis, step 1 too.
  EXPECT_EQ(SliceShape({4, 5, 6}, 1, 0, 2, 3).shape, Shape({4, 3, 6}));
  EXPECT_EQ(SliceShape({4, 5, 6}, 0, 3, 1, 1).shape, Shape({1, 5, 6}));
  EXPECT_EQ(SliceShape({4, 5, 6}, 2, 0, 1, 6).shape, Shape({4, 5, 6}));
  EXPECT_EQ(SliceShape({7}, 0, 6, 100, 1).shape, Shape({1}));
  // Each problem, in the order they are checked.
  EXPECT_EQ(SliceShape({4, 5, 6}, 3, 0, 1, 1).problem, Slice::Problem::axis);
  EXPECT_EQ(SliceShape({4, 5, 6}, -1, 0, 1, 1).problem, Slice::Problem::axis);
  EXPECT_EQ(SliceShape({}, 0, 0, 1, 1).problem, Slice::Problem::axis);
  EXPECT_EQ(SliceShape({4, 5, 6}, 3, -1, 0, 0).problem, Slice::Problem::axis);
  EXPECT_EQ(SliceShape({4, 5, 6}, 1, 0, 0, 1).problem, Slice::Problem::step);
  EXPECT_EQ(SliceShape({4, 5, 6}, 1, -1, -2, 0).problem, Slice::Problem::step);
  EXPECT_EQ(SliceShape({4, 5, 6}, 1, -1, 1, 1).problem, Slice::Problem::start);
  EXPECT_EQ(SliceShape({4, 5, 6}, 1, -1, 1, 0).problem, Slice::Problem::start);
  EXPECT_EQ(SliceShape({4, 5, 6}, 1, 0, 1, 0).problem, Slice::Problem::count);
  EXPECT_EQ(SliceShape({4, 5, 6}, 1, 0, 1, -3).problem, Slice::Problem::count);
  // Past the dim: `last` is the index the last element would have.
  s = SliceShape({4, 5, 6}, 1, 2, 2, 3);
  EXPECT_EQ(s.problem, Slice::Problem::bounds);
  EXPECT_EQ(s.last, 6);
  EXPECT_TRUE(s.shape.empty());
  s = SliceShape({4, 5, 6}, 1, 5, 1, 1);
  EXPECT_EQ(s.problem, Slice::Problem::bounds);
  EXPECT_EQ(s.last, 5);
  EXPECT_EQ(SliceShape({4, 5, 6}, 2, 0, 1, 7).problem, Slice::Problem::bounds);
  EXPECT_EQ(SliceShape({4, 0, 6}, 1, 0, 1, 1).problem, Slice::Problem::bounds);
  // A last index that overflows int64 is past any dim.
  const int64_t big = std::numeric_limits<int64_t>::max() / 2;
  EXPECT_EQ(SliceShape({4, 5, 6}, 1, 0, big, 4).problem,
            Slice::Problem::bounds);
  EXPECT_EQ(SliceShape({4, 5, 6}, 1, std::numeric_limits<int64_t>::max(), 1, 2)
                .problem,
            Slice::Problem::bounds);
  // Even along an unknown dim.
  EXPECT_EQ(SliceShape({D}, 0, 0, big, 4).problem, Slice::Problem::bounds);
  // An unknown dim along the axis takes any slice; others stay unknown.
  s = SliceShape({D, 5}, 0, 100, 7, 3);
  ASSERT_EQ(s.problem, Slice::Problem::none);
  EXPECT_EQ(s.shape, Shape({3, 5}));
  EXPECT_EQ(SliceShape({D, 5, D}, 1, 1, 1, 4).shape, Shape({D, 4, D}));
  EXPECT_EQ(SliceShape({D, 5}, 1, 1, 1, 5).problem, Slice::Problem::bounds);
}

TEST(ShapeRules, Concats) {
  const Shape a = {2, 3, 4}, b = {2, 1, 4}, c = {2, 2, 4};
  Concat r = ConcatShapes({a, b, c}, 1);
  ASSERT_EQ(r.problem, Concat::Problem::none);
  EXPECT_EQ(r.shape, Shape({2, 6, 4}));
  EXPECT_EQ(ConcatShapes({a, Shape{3, 3, 4}}, 0).shape, Shape({5, 3, 4}));
  EXPECT_EQ(ConcatShapes({a, Shape{2, 3, 1}}, 2).shape, Shape({2, 3, 5}));
  EXPECT_EQ(ConcatShapes({a}, 2).shape, a);
  EXPECT_EQ(ConcatShapes({a, Shape{2, 0, 4}}, 1).shape, a);
  EXPECT_EQ(ConcatShapes({}, 0).problem, Concat::Problem::empty);
  EXPECT_EQ(ConcatShapes({a, b}, 3).problem, Concat::Problem::axis);
  EXPECT_EQ(ConcatShapes({a, b}, -1).problem, Concat::Problem::axis);
  EXPECT_EQ(ConcatShapes({Shape{}}, 0).problem, Concat::Problem::axis);
  // The input at fault, and for `dims` its dim that differs.
  r = ConcatShapes({a, b, Shape{2, 4}}, 1);
  EXPECT_EQ(r.problem, Concat::Problem::rank);
  EXPECT_EQ(r.index, 2u);
  r = ConcatShapes({a, Shape{2, 3, 4, 1}}, 0);
  EXPECT_EQ(r.problem, Concat::Problem::rank);
  EXPECT_EQ(r.index, 1u);
  r = ConcatShapes({a, b, Shape{2, 2, 5}}, 1);
  EXPECT_EQ(r.problem, Concat::Problem::dims);
  EXPECT_EQ(r.index, 2u);
  EXPECT_EQ(r.dim, 2u);
  r = ConcatShapes({a, Shape{3, 3, 4}}, 1);
  EXPECT_EQ(r.problem, Concat::Problem::dims);
  EXPECT_EQ(r.index, 1u);
  EXPECT_EQ(r.dim, 0u);
  // Unknown dims: the sum along the axis is unknown when one part is; an
  // unknown other dim takes a later input's known size, which the inputs
  // after it must then match.
  EXPECT_EQ(ConcatShapes({Shape{2, D}, Shape{2, 4}}, 1).shape, Shape({2, D}));
  EXPECT_EQ(ConcatShapes({Shape{2, 3}, Shape{2, D}, Shape{2, 1}}, 1).shape,
            Shape({2, D}));
  EXPECT_EQ(ConcatShapes({Shape{D, 3}, Shape{2, 4}}, 1).shape, Shape({2, 7}));
  EXPECT_EQ(ConcatShapes({Shape{D, 3}, Shape{D, 4}}, 1).shape, Shape({D, 7}));
  EXPECT_EQ(ConcatShapes({Shape{2, 3}, Shape{D, 4}}, 1).shape, Shape({2, 7}));
  r = ConcatShapes({Shape{D, 3}, Shape{2, 1}, Shape{5, 1}}, 1);
  EXPECT_EQ(r.problem, Concat::Problem::dims);
  EXPECT_EQ(r.index, 2u);
  EXPECT_EQ(r.dim, 0u);
  // Sizes that add up past int64 are refused, not taken as unknown.
  const int64_t big = std::numeric_limits<int64_t>::max() / 2 + 1;
  r = ConcatShapes({Shape{big}, Shape{big}}, 0);
  EXPECT_EQ(r.problem, Concat::Problem::overflow);
  EXPECT_EQ(r.index, 1u);
}

} // namespace
} // namespace md::rules
